//! Hooks: what they see, how they are found, loaded, vetted and called.
//!
//! - [`plugin`] — finding, vetting and loading hook plugins (`cdylib`s built against the SDK).
//! - [`registry`] — built-in hooks plus plugins, and `--hook NAME` resolution.
//! - [`dispatch`] — calling the active hooks at a point, in order, under deadlines.
//! - [`isolate`] — running a plugin hook in a child process (`--isolate-hooks`).
//! - [`observer`] — the runner's seam ([`RunObserver`]) implemented over the dispatcher.
//! - [`debrief`] — the hook that ships inside `wt`, written against the public SDK exactly
//!   like a plugin and called through the same FFI adapter.
//!
//! Nothing here imports the runner: the runner calls hooks through [`RunObserver`], defined
//! here, and never lets them change what is judged.

pub(crate) mod debrief;
internal_mod!(dispatch);
internal_mod!(isolate);
pub(crate) mod observer;
internal_mod!(plugin);
internal_mod!(registry);

use std::sync::Arc;

use windtunnel_model::{AgentConfig, AggregateResult, Denial, Scenario, Score, Trace};
use windtunnel_sdk::turn::{TurnCall, TurnResult};

use dispatch::Session;

/// What a hook point returns: warnings (run scope: into `trace.worker_warnings`) and
/// artifacts (run scope: beside the trace; scenario scope: at the runs-directory root).
#[derive(Debug, Default)]
pub struct RunHookOutput {
    pub warnings: Vec<String>,
    pub artifacts: Vec<Artifact>,
}

/// A hook artifact, written as `<stem>.<hook>.json` or `<stem>.<hook>.<label>.json`.
pub use dispatch::Artifact;

/// What the turn hooks decided before a turn starts.
#[derive(Debug, Default)]
pub struct TurnOpen {
    /// Set when a guard denied the turn: it must not start.
    pub denial: Option<Denial>,
    pub warnings: Vec<String>,
    /// Which observers began (their finishes are owed): a bit per hook, opaque to the runner.
    pub begun: u64,
    /// The snapshot id the begins' call was served under (0: none): the finish names it, so
    /// a plugin that holds that call reads only the result's own fields.
    pub turn_id: u32,
}

/// The seam lifecycle hooks plug into. Per run the order is: reset → mint session → capture
/// surface → `on_run_start` → inject (turn hooks around each turn) → evidence → trace →
/// score → `on_run_scored` → `on_run_end` → write. A run that errors still goes through
/// scored and end (pairing). `on_provisioned` / `on_scenario_end` pair per scenario that
/// provisioned.
#[expect(unused_variables, reason = "default no-op implementations")]
pub trait RunObserver: Send + Sync {
    fn on_provisioned(&self, scenario: &Scenario, agent: &AgentConfig) -> RunHookOutput {
        RunHookOutput::default()
    }
    fn on_run_start(
        &self,
        scenario: &Scenario,
        agent: &AgentConfig,
        run_id: &str,
        session_id: &str,
        session: &dyn Session,
    ) -> RunHookOutput {
        RunHookOutput::default()
    }
    fn on_run_scored(
        &self,
        scenario: &Scenario,
        agent: &AgentConfig,
        trace: &Arc<Trace>,
        score: &Arc<Score>,
        session: &dyn Session,
    ) -> RunHookOutput {
        RunHookOutput::default()
    }
    fn on_run_end(
        &self,
        scenario: &Scenario,
        agent: &AgentConfig,
        trace: &Arc<Trace>,
        score: &Arc<Score>,
        session: &dyn Session,
    ) -> RunHookOutput {
        RunHookOutput::default()
    }
    fn on_scenario_end(
        &self,
        scenario: &Scenario,
        agent: &AgentConfig,
        aggregate: &AggregateResult,
    ) -> RunHookOutput {
        RunHookOutput::default()
    }
    /// Once per sweep, after every scenario ended, with every scenario's aggregate (those
    /// that could not run too). Artifacts are pack-scoped.
    fn on_pack_end(&self, aggregates: &[AggregateResult]) -> RunHookOutput {
        RunHookOutput::default()
    }
    /// Guards check and observers begin, in activation order, before `TurnStarted`. For a
    /// converse turn (`call.cause` is a hook's converse) only guards are consulted, and not
    /// the conversing hook itself.
    fn begin_turn(&self, call: &Arc<TurnCall>) -> TurnOpen {
        TurnOpen::default()
    }
    /// Observers that began finish, in reverse order, after the terminal event is durable.
    fn finish_turn(&self, open: TurnOpen, result: &Arc<TurnResult>) -> Vec<String> {
        vec![]
    }
    /// Whether any turn hook or guard is active (skips building turn snapshots otherwise).
    fn wants_turns(&self) -> bool {
        false
    }
    /// The observer of lane `lane` (a worker of the sweep; lanes run in parallel). `None`:
    /// this observer serves every lane itself and may be called from several threads at
    /// once. The lanes of one sweep are numbered from 0; lane 0 may be `self`.
    fn lane(&self, lane: usize) -> Option<Arc<dyn RunObserver>> {
        None
    }
}

/// The observer used when no hooks are active.
#[derive(Debug, Default)]
pub struct NoopObserver;
impl RunObserver for NoopObserver {}
