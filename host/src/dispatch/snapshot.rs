//! What a hook sees: the context members of one dispatch, as an owned snapshot (`Arc`s),
//! serialized to JSON only when a hook reads a member, once per dispatch. An abandoned call
//! holds only this snapshot, never a borrow of the runner's state.

use std::sync::{Arc, Mutex, OnceLock};

use serde::Serialize;
use windtunnel_sdk::model::{AgentConfig, AggregateResult, Scenario, Score, Trace};

/// The read-only members of a hook's context. Members are serialized to JSON only when a
/// hook reads them, once per dispatch.
#[derive(Default, Clone)]
pub struct CallData {
    pub scenario: Option<Arc<Scenario>>,
    pub agent: Option<Arc<AgentConfig>>,
    pub run_id: Option<Arc<str>>,
    pub session_id: Option<Arc<str>>,
    pub trace: Option<Arc<Trace>>,
    pub score: Option<Arc<Score>>,
    pub aggregate: Option<Arc<AggregateResult>>,
    pub aggregates: Option<Arc<Vec<AggregateResult>>>,
    /// Extra members for turn points (`turn_call`, `turn_result`), as JSON text.
    pub extra: Vec<(&'static str, Arc<str>)>,
    /// The artifact names already written in this call's scope (the run, the scenario or
    /// the pack), as `<hook>` or `<hook>.<label>`: a second artifact with a taken name is an
    /// error to the hook, never a silent overwrite.
    pub artifact_names: Option<Arc<Mutex<std::collections::HashSet<String>>>>,
}

pub(super) struct Snapshot {
    pub data: CallData,
    pub cache: [OnceLock<Option<String>>; 8],
}

const MEMBERS: [&str; 8] = [
    "scenario",
    "agent",
    "run_id",
    "session_id",
    "trace",
    "score",
    "aggregate",
    "aggregates",
];

impl Snapshot {
    pub fn member(&self, name: &str) -> Option<String> {
        let Some(i) = MEMBERS.iter().position(|m| *m == name) else {
            return self
                .data
                .extra
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string());
        };
        fn json<T: Serialize + ?Sized>(v: &Option<Arc<T>>) -> Option<String> {
            v.as_ref().and_then(|v| serde_json::to_string(&**v).ok())
        }
        let d = &self.data;
        self.cache[i]
            .get_or_init(|| match i {
                0 => json(&d.scenario),
                1 => json(&d.agent),
                2 => json(&d.run_id),
                3 => json(&d.session_id),
                4 => json(&d.trace),
                5 => json(&d.score),
                6 => json(&d.aggregate),
                _ => json(&d.aggregates),
            })
            .clone()
    }
}
