//! The bridge between the runner's [`RunObserver`] seam and the [`Dispatcher`]: builds each
//! point's context from the runner's state, turns dispatch output into warnings and
//! artifacts, and implements the turn-hook and guard protocol.
//!
//! A point no active hook declared returns at once: no snapshot is built, nothing is
//! serialized, no thread is involved.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use serde_json::Value;
use windtunnel_abi::point;
use windtunnel_sdk::{
    GuardDecision, TurnCall, TurnResult,
    model::{AgentConfig, AggregateResult, Denial, Scenario, Score, Trace},
    turn::Cause as TurnCause,
};

use crate::{
    hooks::dispatch::{Artifact, CallData, DispatchOutput, Dispatcher, Session},
    hooks::{RunHookOutput, RunObserver, TurnOpen},
};

/// Schema version stamped into artifacts that carry none.
pub(crate) const DEFAULT_ARTIFACT_SCHEMA_VERSION: u64 = 1;

type Names = Arc<Mutex<HashSet<String>>>;

/// Every active hook, observing a sweep. Each lane (worker) of the sweep has its own
/// `HookObserver` over its own hook instances ([`HookObserver::prepare_lanes`]); they share
/// the artifact-name registries and, through the dispatchers, health and quarantine.
pub(crate) struct HookObserver {
    dispatcher: Arc<Dispatcher>,
    names: Arc<ArtifactNames>,
    /// Lanes 1, 2, …; lane 0 is this observer.
    lanes: Vec<Arc<HookObserver>>,
    /// This lane's run in progress: all of a run's points fire on its lane, one run at a
    /// time, and share what does not change within the run.
    run: Mutex<RunSlot>,
    /// The scenario snapshot this lane handed out last.
    last_scenario: Mutex<Option<Arc<Scenario>>>,
}

/// What every lane's observer shares: the artifact names written so far per scenario (by
/// id) and for the pack — each scope's files are named after them, so a name may be used
/// once (a run's are its lane's) —, and the snapshots that do not change within a sweep.
#[derive(Default)]
struct ArtifactNames {
    scenario: Mutex<HashMap<String, Names>>,
    pack: Names,
    scenarios: Mutex<HashMap<String, Arc<Scenario>>>,
    agent: std::sync::OnceLock<Arc<AgentConfig>>,
}

impl ArtifactNames {
    /// The scenario's snapshot, built once per sweep.
    fn scenario(&self, s: &Scenario) -> Arc<Scenario> {
        let mut scenarios = self.scenarios.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(a) = scenarios.get(&s.id) {
            return a.clone();
        }
        scenarios
            .entry(s.id.clone())
            .or_insert_with(|| Arc::new(s.clone()))
            .clone()
    }

    /// The agent's snapshot, built once per sweep.
    fn agent(&self, a: &AgentConfig) -> Arc<AgentConfig> {
        self.agent.get_or_init(|| Arc::new(a.clone())).clone()
    }
}

/// What a run's points share, built at its first point: its ids, its scenario's and agent's
/// snapshots, and the artifact names written in it.
#[derive(Clone)]
struct RunScope {
    run_id: Arc<str>,
    session_id: Arc<str>,
    scenario: Arc<Scenario>,
    agent: Arc<AgentConfig>,
    names: Names,
}

/// A lane's run in progress, and the names set of the run before it, emptied, for the next.
#[derive(Default)]
struct RunSlot {
    current: Option<RunScope>,
    spare_names: Option<Names>,
}

fn names_in(map: &Mutex<HashMap<String, Names>>, key: &str) -> Names {
    let mut map = map.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(names) = map.get(key) {
        return names.clone();
    }
    map.entry(key.to_owned()).or_default().clone()
}

fn forget(map: &Mutex<HashMap<String, Names>>, key: &str) {
    map.lock().unwrap_or_else(|e| e.into_inner()).remove(key);
}

impl HookObserver {
    pub(crate) fn new(dispatcher: Arc<Dispatcher>) -> Self {
        HookObserver {
            dispatcher,
            names: Arc::default(),
            lanes: Vec::new(),
            run: Mutex::default(),
            last_scenario: Mutex::new(None),
        }
    }

    /// Builds the observers of lanes 1 to `lanes - 1`, each with fresh instances of every
    /// hook, so the sweep's lanes never wait for each other's hooks.
    pub(crate) fn prepare_lanes(&mut self, lanes: usize) -> Result<(), String> {
        while self.lanes.len() + 1 < lanes {
            self.lanes.push(Arc::new(HookObserver {
                dispatcher: Arc::new(self.dispatcher.for_lane()?),
                names: self.names.clone(),
                lanes: Vec::new(),
                run: Mutex::default(),
                last_scenario: Mutex::new(None),
            }));
        }
        Ok(())
    }

    /// The scenario's snapshot (built once per sweep), from this lane's last one when it is
    /// the same scenario.
    fn scenario(&self, scenario: &Scenario) -> Arc<Scenario> {
        let mut last = self.last_scenario.lock().unwrap_or_else(|e| e.into_inner());
        match &*last {
            Some(s) if s.id == scenario.id => s.clone(),
            _ => {
                let s = self.names.scenario(scenario);
                *last = Some(s.clone());
                s
            }
        }
    }

    /// What the points of run `run_id` share (this lane's run in progress), built at its
    /// first point.
    fn run_scope(
        &self,
        scenario: &Scenario,
        agent: &AgentConfig,
        run_id: &str,
        session_id: &str,
    ) -> RunScope {
        let mut run = self.run.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(scope) = &mut run.current
            && &*scope.run_id == run_id
        {
            if &*scope.session_id != session_id {
                scope.session_id = Arc::from(session_id);
            }
            if scope.scenario.id != scenario.id {
                scope.scenario = self.scenario(scenario);
            }
            return scope.clone();
        }
        let names = run.spare_names.take().unwrap_or_default();
        let scope = RunScope {
            run_id: Arc::from(run_id),
            session_id: Arc::from(session_id),
            scenario: self.scenario(scenario),
            agent: self.names.agent(agent),
            names,
        };
        run.current = Some(scope.clone());
        scope
    }

    /// Forgets run `run_id` once it ended; its names set, emptied, serves the next run when
    /// nothing else holds it.
    fn forget_run(&self, run_id: &str) {
        let mut run = self.run.lock().unwrap_or_else(|e| e.into_inner());
        if run
            .current
            .as_ref()
            .is_some_and(|scope| &*scope.run_id == run_id)
            && let Some(scope) = run.current.take()
        {
            let mut names = scope.names;
            if let Some(set) = Arc::get_mut(&mut names) {
                set.get_mut().unwrap_or_else(|e| e.into_inner()).clear();
                run.spare_names = Some(names);
            }
        }
    }

    fn scenario_data(&self, scenario: &Scenario, agent: &AgentConfig) -> CallData {
        CallData {
            scenario: Some(self.scenario(scenario)),
            agent: Some(self.names.agent(agent)),
            artifact_names: Some(names_in(&self.names.scenario, &scenario.id)),
            ..CallData::default()
        }
    }

    fn run_data(
        &self,
        scenario: &Scenario,
        agent: &AgentConfig,
        run_id: &str,
        session_id: &str,
    ) -> CallData {
        let scope = self.run_scope(scenario, agent, run_id, session_id);
        CallData {
            scenario: Some(scope.scenario),
            agent: Some(scope.agent),
            run_id: Some(scope.run_id),
            session_id: Some(scope.session_id),
            artifact_names: Some(scope.names),
            ..CallData::default()
        }
    }

    fn with_run(
        &self,
        scenario: &Scenario,
        agent: &AgentConfig,
        trace: &Arc<Trace>,
        score: &Arc<Score>,
    ) -> CallData {
        CallData {
            // Shared, not copied: the runner takes the trace back once the run's points
            // are dispatched.
            trace: Some(trace.clone()),
            score: Some(score.clone()),
            ..self.run_data(scenario, agent, &trace.run_id, &trace.session_id)
        }
    }

    /// Dispatches `point` when anyone declared it.
    fn fire(
        &self,
        point: u32,
        data: impl FnOnce() -> CallData,
        session: Option<&dyn Session>,
    ) -> RunHookOutput {
        if !self.dispatcher.wants(point) {
            return RunHookOutput::default();
        }
        output(self.dispatcher.dispatch(point, data(), session))
    }

    /// A turn point's members: the turn, and the run and session ids it carries.
    fn turn_data(call: &Arc<TurnCall>) -> CallData {
        CallData {
            turn_call: Some(call.clone()),
            turn_id: next_turn_id(),
            ..CallData::default()
        }
    }
}

impl HookObserver {
    /// What a finish's hooks read: the result, under a new snapshot id, naming the id its
    /// call was served under at the begin (`begun_as`).
    fn finish_data(result: &Arc<TurnResult>, begun_as: u32) -> CallData {
        CallData {
            turn_result: Some(result.clone()),
            turn_id: next_turn_id(),
            begun_as,
            ..CallData::default()
        }
    }
}

/// A new turn snapshot id, unique in this process; 0 (none) once they ran out, so an id is
/// never given to two snapshots.
fn next_turn_id() -> u32 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static LAST: AtomicU32 = AtomicU32::new(0);
    LAST.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
        (n < windtunnel_sdk::turn::ids::MAX).then_some(n + 1)
    })
    .map_or(0, |n| n + 1)
}

/// Artifacts carry a `kind` and a schema version: the framework adds them to object
/// payloads that lack them (`kind` = `<hook>` or `<hook>.<label>`), and wraps any other JSON
/// value as `{kind, schema_version, value}`.
pub(crate) fn stamp(mut a: Artifact) -> Artifact {
    let kind = match &a.label {
        Some(l) => format!("{}.{l}", a.hook),
        None => a.hook.clone(),
    };
    match &mut a.payload {
        Value::Object(map) => {
            map.entry("kind").or_insert_with(|| Value::String(kind));
            map.entry("schema_version")
                .or_insert_with(|| Value::from(DEFAULT_ARTIFACT_SCHEMA_VERSION));
        }
        other => {
            let value = other.take();
            a.payload = serde_json::json!({
                "kind": kind,
                "schema_version": DEFAULT_ARTIFACT_SCHEMA_VERSION,
                "value": value,
            });
        }
    }
    a
}

fn output(out: DispatchOutput) -> RunHookOutput {
    let artifacts = if out.artifacts.is_empty() {
        Vec::new()
    } else {
        out.artifacts.into_iter().map(stamp).collect()
    };
    RunHookOutput {
        warnings: out.warnings,
        artifacts,
    }
}

impl RunObserver for HookObserver {
    fn on_pack_end(&self, aggregates: &[AggregateResult]) -> RunHookOutput {
        self.fire(
            point::ON_PACK_END,
            || CallData {
                aggregates: Some(Arc::new(aggregates.to_vec())),
                artifact_names: Some(self.names.pack.clone()),
                ..CallData::default()
            },
            None,
        )
    }

    fn on_provisioned(&self, scenario: &Scenario, agent: &AgentConfig) -> RunHookOutput {
        self.fire(
            point::ON_PROVISIONED,
            || self.scenario_data(scenario, agent),
            None,
        )
    }

    fn on_run_start(
        &self,
        scenario: &Scenario,
        agent: &AgentConfig,
        run_id: &str,
        session_id: &str,
        session: &dyn Session,
    ) -> RunHookOutput {
        self.fire(
            point::ON_RUN_START,
            || self.run_data(scenario, agent, run_id, session_id),
            Some(session),
        )
    }

    fn on_run_scored(
        &self,
        scenario: &Scenario,
        agent: &AgentConfig,
        trace: &Arc<Trace>,
        score: &Arc<Score>,
        session: &dyn Session,
    ) -> RunHookOutput {
        self.fire(
            point::ON_RUN_SCORED,
            || self.with_run(scenario, agent, trace, score),
            Some(session),
        )
    }

    fn on_run_end(
        &self,
        scenario: &Scenario,
        agent: &AgentConfig,
        trace: &Arc<Trace>,
        score: &Arc<Score>,
        session: &dyn Session,
    ) -> RunHookOutput {
        let out = self.fire(
            point::ON_RUN_END,
            || self.with_run(scenario, agent, trace, score),
            Some(session),
        );
        self.forget_run(&trace.run_id);
        out
    }

    fn on_scenario_end(
        &self,
        scenario: &Scenario,
        agent: &AgentConfig,
        aggregate: &AggregateResult,
    ) -> RunHookOutput {
        let out = self.fire(
            point::ON_SCENARIO_END,
            || CallData {
                aggregate: Some(Arc::new(aggregate.clone())),
                ..self.scenario_data(scenario, agent)
            },
            None,
        );
        forget(&self.names.scenario, &scenario.id);
        out
    }

    fn lane(&self, lane: usize) -> Option<Arc<dyn RunObserver>> {
        let l = self.lanes.get(lane.checked_sub(1)?)?;
        Some(l.clone())
    }

    fn wants_turns(&self) -> bool {
        let d = &self.dispatcher;
        d.wants(point::TURN_BEGIN) || d.wants(point::TURN_FINISH) || d.wants(point::GUARD_CHECK)
    }

    fn begin_turn(&self, call: &Arc<TurnCall>) -> TurnOpen {
        let d = &self.dispatcher;
        let mut guards = d.declared(point::GUARD_CHECK);
        let mut begins = d.declared(point::TURN_BEGIN);
        // One snapshot id for the turn's guards and begins: the finish names it.
        let data = Self::turn_data(call);
        let mut open = TurnOpen {
            turn_id: data.turn_id,
            ..TurnOpen::default()
        };
        if let TurnCause::Converse { hook } = &call.cause {
            // A converse turn: guards only (observers watch the scenario's turns), and not
            // the conversing hook itself, whose call is in progress.
            begins = 0;
            if let Some(slot) = d.hooks().iter().position(|h| &h.name == hook) {
                guards &= !(1u64 << slot);
            }
            if guards == 0 {
                return open;
            }
        }
        if guards == 0 {
            // Observers only: one hand-off for all begins.
            let out = d.dispatch_to(begins, false, point::TURN_BEGIN, data, None);
            open.begun = out.ok;
            open.warnings = out.warnings;
            return open;
        }
        // With guards, hooks go one at a time in activation order so that a denial stops
        // the begins that come after it.
        for slot in 0..d.hooks().len() {
            let bit = 1u64 << slot;
            if guards & bit != 0
                && let Some(denial) = self.check(slot, call.turn, &data, &mut open.warnings)
            {
                open.denial = Some(denial);
                return open;
            }
            if begins & bit != 0 {
                let out = d.dispatch_to(bit, false, point::TURN_BEGIN, data.clone(), None);
                open.begun |= out.ok;
                open.warnings.extend(out.warnings);
            }
        }
        open
    }

    fn finish_turn(&self, open: TurnOpen, result: &Arc<TurnResult>) -> Vec<String> {
        let mask = open.begun;
        if mask == 0 {
            // The begin's warnings are the runner's already (it records them at begin).
            return Vec::new();
        }
        let out = self.dispatcher.dispatch_to(
            mask,
            true,
            point::TURN_FINISH,
            Self::finish_data(result, open.turn_id),
            None,
        );
        out.warnings
    }
}

impl HookObserver {
    /// Runs one guard. Anything but an explicit allow denies: a denial, an error, a panic,
    /// an overrun, or a guard already quarantined (guards fail closed).
    fn check(
        &self,
        slot: usize,
        turn: u32,
        data: &CallData,
        warnings: &mut Vec<String>,
    ) -> Option<Denial> {
        let d = &self.dispatcher;
        let out = (d.quarantined() & (1 << slot) == 0)
            .then(|| d.dispatch_to(1 << slot, false, point::GUARD_CHECK, data.clone(), None));
        let guard = d.hooks()[slot].name.clone();
        let denial = |kind: &str, code: &str, message: String| {
            let mut d = Denial::default();
            d.turn = turn;
            d.guard = guard.clone();
            d.code = code.to_owned();
            d.message = message;
            d.kind = kind.to_owned();
            d
        };
        let Some(out) = out else {
            return Some(denial(
                "quarantined",
                "guard_error",
                "the guard was disabled earlier in this invocation".into(),
            ));
        };
        warnings.extend(out.warnings);
        if out.timed_out.contains(&slot) {
            return Some(denial(
                "timeout",
                "guard_error",
                format!(
                    "the guard overran its deadline of {}",
                    crate::deadlines::human(d.deadlines().dispatch)
                ),
            ));
        }
        match out
            .returns
            .into_iter()
            .find(|(s, _)| *s == slot)
            .map(|(_, r)| r)
        {
            Some(Ok(json)) => match serde_json::from_str::<GuardDecision>(&json) {
                Ok(GuardDecision::Allow) => None,
                Ok(GuardDecision::Deny { code, message }) => Some(denial("denied", &code, message)),
                Err(e) => Some(denial(
                    "error",
                    "guard_error",
                    format!("unreadable decision: {e}"),
                )),
            },
            Some(Err(e)) if e.starts_with("panicked") => Some(denial("panic", "guard_error", e)),
            Some(Err(e)) => Some(denial("error", "guard_error", e)),
            None => Some(denial(
                "error",
                "guard_error",
                "the guard was not called".into(),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn artifacts_get_a_kind_and_schema_version_unless_they_have_one() {
        let a = stamp(Artifact {
            hook: "debrief".into(),
            label: None,
            payload: json!({"schema_version": 2, "reply": "x"}),
        });
        assert_eq!(a.payload["kind"], "debrief");
        assert_eq!(a.payload["schema_version"], 2);
        let b = stamp(Artifact {
            hook: "probe".into(),
            label: Some("violation".into()),
            payload: json!([1, 2]),
        });
        assert_eq!(
            b.payload,
            json!({"kind": "probe.violation", "schema_version": 1, "value": [1, 2]})
        );
    }
}
