//! What a hook sees: the context members of one dispatch, as an owned snapshot (`Arc`s),
//! serialized to JSON only when a hook reads a member, once per dispatch. An abandoned call
//! holds only this snapshot, never a borrow of the runner's state.

use std::sync::{Arc, Mutex, OnceLock};

use serde::Serialize;
use windtunnel_sdk::{
    TurnCall, TurnResult, member,
    model::{AgentConfig, AggregateResult, Scenario, Score, Trace},
};

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
    /// The turn, at turn points: the call (begin, guard), or the result with its call
    /// (finish). Served as JSON (`turn_call`, `turn_result`) and in the compact form SDK 1.5
    /// reads without a parse (`turn_call.fields`, `turn_result.fields`), each built only when
    /// a hook asks for it: the JSON once per dispatch, the compact form at each read.
    pub turn_call: Option<Arc<TurnCall>>,
    pub turn_result: Option<Arc<TurnResult>>,
    /// The turn snapshot's id (0: none): equal ids are the same `turn_call` or
    /// `turn_result`, so a plugin's hooks read it once (`windtunnel_sdk::turn::ids`).
    pub turn_id: u32,
    /// At a finish: the snapshot id the turn's call was served under at its begin (0:
    /// none). The result's tail (`turn_result.tail`) names it.
    pub begun_as: u32,
    /// The artifact names already written in this call's scope (the run, the scenario or
    /// the pack), as `<hook>` or `<hook>.<label>`: a second artifact with a taken name is an
    /// error to the hook, never a silent overwrite.
    pub artifact_names: Option<Arc<Mutex<std::collections::HashSet<String>>>>,
}

pub(super) struct Snapshot {
    pub data: CallData,
    /// The JSON members read so far (the compact forms, the last three, are not kept).
    pub cache: [OnceLock<Option<String>>; MEMBERS.len() - 3],
    /// The members SDK 1.0 reads in a shape of its own ([`SDK_1_0_FIELDS`]), in that shape.
    pub legacy: [OnceLock<Option<String>>; SDK_1_0_FIELDS.len()],
}

impl Snapshot {
    pub(super) fn new(data: CallData) -> Snapshot {
        Snapshot {
            data,
            cache: Default::default(),
            legacy: Default::default(),
        }
    }
}

/// The fields SDK 1.0 knows of the members whose types refuse unknown fields there
/// (`AgentConfig` and `Scenario` were `deny_unknown_fields` in 1.0), or that carry fields
/// every run has which 1.0 cannot read (the trace's `pack`, `shard` and `scenario_digest`;
/// its `processes`, which 1.0 plugins were always passed, stays). A plugin
/// built against 1.0 gets these members with only these keys, so a field this `wt` added —
/// set in an agent config, say — can never make its `ctx.agent()` fail to read, and what it
/// reads raw is what it reads typed.
const SDK_1_0_FIELDS: [(&str, &[&str]); 3] = [
    (
        member::AGENT,
        &[
            "label",
            "runtime",
            "model",
            "soul",
            "sampling",
            "endpoint",
            "api_key_env",
            "turn_timeout_s",
            "max_steps",
            "retries",
            "fault",
        ],
    ),
    (
        member::SCENARIO,
        &[
            "id",
            "description",
            "runs",
            "tags",
            "turns",
            "world",
            "tools",
            "preconditions",
            "expect",
        ],
    ),
    (
        member::TRACE,
        &[
            "schema_version",
            "run_id",
            "sweep_id",
            "scenario_id",
            "run_index",
            "session_id",
            "agent",
            "started_at",
            "ended_at",
            "surface",
            "turns",
            "evidence",
            "world",
            "worker_warnings",
            "error",
            "policy_revision",
            "denial",
            "hooks",
            "processes",
        ],
    ),
];

/// `json` with only the top-level keys SDK 1.0 knows for `member`.
fn for_sdk_1_0(member: &str, json: &str) -> String {
    let Some((_, keys)) = SDK_1_0_FIELDS.iter().find(|(m, _)| *m == member) else {
        return json.to_owned();
    };
    match serde_json::from_str::<serde_json::Value>(json) {
        Ok(serde_json::Value::Object(mut map)) => {
            map.retain(|k, _| keys.contains(&k.as_str()));
            serde_json::Value::Object(map).to_string()
        }
        _ => json.to_owned(),
    }
}

const MEMBERS: [&str; 13] = [
    member::SCENARIO,
    member::AGENT,
    member::RUN_ID,
    member::SESSION_ID,
    member::TRACE,
    member::SCORE,
    member::AGGREGATE,
    member::AGGREGATES,
    member::TURN_CALL,
    member::TURN_RESULT,
    member::TURN_CALL_FIELDS,
    member::TURN_RESULT_FIELDS,
    member::TURN_RESULT_TAIL,
];

/// The place of `name` in [`MEMBERS`].
fn member_index(name: &str) -> Option<usize> {
    let i = match name {
        member::SCENARIO => 0,
        member::AGENT => 1,
        member::RUN_ID => 2,
        member::SESSION_ID => 3,
        member::TRACE => 4,
        member::SCORE => 5,
        member::AGGREGATE => 6,
        member::AGGREGATES => 7,
        member::TURN_CALL => 8,
        member::TURN_RESULT => 9,
        member::TURN_CALL_FIELDS => 10,
        member::TURN_RESULT_FIELDS => 11,
        member::TURN_RESULT_TAIL => 12,
        _ => return None,
    };
    debug_assert_eq!(MEMBERS[i], name);
    Some(i)
}

impl Snapshot {
    /// A member in the shape the hook's SDK reads: as this `wt` writes it, or, with
    /// `sdk_1_0`, with only the fields SDK 1.0 knows where its types refused others.
    pub(super) fn member_for(&self, name: &str, sdk_1_0: bool) -> Option<String> {
        let Some(i) = sdk_1_0
            .then(|| SDK_1_0_FIELDS.iter().position(|(m, _)| *m == name))
            .flatten()
        else {
            return self.member(name);
        };
        self.legacy[i]
            .get_or_init(|| self.member(name).map(|json| for_sdk_1_0(name, &json)))
            .clone()
    }

    pub(super) fn member(&self, name: &str) -> Option<String> {
        let i = member_index(name)?;
        fn json<T: Serialize + ?Sized>(v: &Option<Arc<T>>) -> Option<String> {
            v.as_ref().and_then(|v| serde_json::to_string(&**v).ok())
        }
        let d = &self.data;
        // At a finish, the call is the result's.
        let call = || {
            d.turn_call
                .as_deref()
                .or(d.turn_result.as_deref().map(|r| &r.call))
        };
        // The compact forms are written for each read, never kept: writing one costs what
        // copying a kept one would, and a plugin's hooks read a turn once (by its id).
        match i {
            10 => return call().map(windtunnel_sdk::turn::fields::call),
            11 => {
                return d
                    .turn_result
                    .as_deref()
                    .map(windtunnel_sdk::turn::fields::result);
            }
            12 => {
                return d
                    .turn_result
                    .as_deref()
                    .filter(|_| d.begun_as != 0)
                    .map(|r| windtunnel_sdk::turn::fields::tail(r, d.begun_as));
            }
            _ => {}
        }
        self.cache[i]
            .get_or_init(|| match i {
                0 => json(&d.scenario),
                1 => json(&d.agent),
                // At turn points the ids are the turn's.
                2 => match (&d.run_id, call()) {
                    (None, Some(c)) => serde_json::to_string(&c.run_id).ok(),
                    _ => json(&d.run_id),
                },
                3 => match (&d.session_id, call()) {
                    (None, Some(c)) => serde_json::to_string(&c.session_id).ok(),
                    _ => json(&d.session_id),
                },
                4 => json(&d.trace),
                5 => json(&d.score),
                6 => json(&d.aggregate),
                7 => json(&d.aggregates),
                8 => call().and_then(|c| serde_json::to_string(c).ok()),
                _ => json(&d.turn_result),
            })
            .clone()
    }
}
