//! The per-run and per-turn hook points as the runner awaits them: relayed on the lane's own
//! thread when the lane's observer is `wt`'s hook observer (the calls are made outside the
//! lane's future, watched for their deadlines: [`crate::hooks::dispatch::relay`]), called in
//! place for any other observer (a library caller's own, or none).

use std::future::Future;
use std::sync::Arc;

use windtunnel_sdk::model::{AgentConfig, Scenario, Score, Trace};
use windtunnel_sdk::turn::{TurnCall, TurnResult};

use crate::hooks::dispatch::{Relay, Session};
use crate::hooks::observer::HookObserver;
use windtunnel_abi::point;

use crate::hooks::{RunHookOutput, RunObserver, TurnOpen};

#[derive(Clone, Copy)]
pub(super) enum Points<'l> {
    Relayed(&'l HookObserver, &'l Relay),
    InPlace(&'l dyn RunObserver),
}

impl<'l> Points<'l> {
    pub(super) fn new(observer: &'l dyn RunObserver, relay: &'l Relay) -> Points<'l> {
        match HookObserver::of(observer) {
            Some(hooks) => Points::Relayed(hooks, relay),
            None => Points::InPlace(observer),
        }
    }

    pub(super) fn on_run_start(
        self,
        scenario: &Scenario,
        agent: &AgentConfig,
        run_id: &str,
        session_id: &str,
        session: &dyn Session,
    ) -> PointCall<impl Future<Output = RunHookOutput> + Send + 'l> {
        match self {
            Points::Relayed(h, _) if !h.wants(point::ON_RUN_START) => {
                PointCall::Done(RunHookOutput::default())
            }
            Points::Relayed(h, relay) => PointCall::Relayed(
                h.relayed_run_start(relay, scenario, agent, run_id, session_id, session),
            ),
            Points::InPlace(o) => {
                PointCall::Done(o.on_run_start(scenario, agent, run_id, session_id, session))
            }
        }
    }

    pub(super) fn on_run_scored(
        self,
        scenario: &Scenario,
        agent: &AgentConfig,
        trace: &Arc<Trace>,
        score: &Arc<Score>,
        session: &dyn Session,
    ) -> PointCall<impl Future<Output = RunHookOutput> + Send + 'l> {
        match self {
            Points::Relayed(h, _) if !h.wants(point::ON_RUN_SCORED) => {
                PointCall::Done(RunHookOutput::default())
            }
            Points::Relayed(h, relay) => PointCall::Relayed(
                h.relayed_run_scored(relay, scenario, agent, trace, score, session),
            ),
            Points::InPlace(o) => {
                PointCall::Done(o.on_run_scored(scenario, agent, trace, score, session))
            }
        }
    }

    pub(super) fn on_run_end(
        self,
        scenario: &Scenario,
        agent: &AgentConfig,
        trace: &Arc<Trace>,
        score: &Arc<Score>,
        session: &dyn Session,
    ) -> PointCall<impl Future<Output = RunHookOutput> + Send + 'l> {
        match self {
            Points::Relayed(h, _) if !h.wants(point::ON_RUN_END) => {
                PointCall::Done(RunHookOutput::default())
            }
            Points::Relayed(h, relay) => {
                PointCall::Relayed(h.relayed_run_end(relay, scenario, agent, trace, score, session))
            }
            Points::InPlace(o) => {
                PointCall::Done(o.on_run_end(scenario, agent, trace, score, session))
            }
        }
    }

    pub(super) fn wants_turns(self) -> bool {
        match self {
            Points::Relayed(h, _) => h.wants_turns(),
            Points::InPlace(o) => o.wants_turns(),
        }
    }

    pub(super) async fn begin_turn(self, call: &Arc<TurnCall>) -> TurnOpen {
        match self {
            Points::Relayed(h, relay) => h.relayed_begin_turn(relay, call).await,
            Points::InPlace(o) => o.begin_turn(call),
        }
    }

    pub(super) async fn finish_turn(self, open: TurnOpen, result: &Arc<TurnResult>) -> Vec<String> {
        match self {
            Points::Relayed(h, relay) => h.relayed_finish_turn(relay, open, result).await,
            Points::InPlace(o) => o.finish_turn(open, result),
        }
    }
}

/// A relayed point's future, to await, or what the point returned already (an in-place
/// call, or a point no hook of the lane wants). The caller awaits the future in place, in
/// the lane's own future: a point allocates no box, and a point with nothing to relay moves
/// no future.
pub(super) enum PointCall<F> {
    Relayed(F),
    Done(RunHookOutput),
}

/// Awaits a run point's [`PointCall`]: the relayed future in place, or what it returned.
macro_rules! await_point {
    ($call:expr) => {
        match $call {
            $crate::runner::points::PointCall::Relayed(f) => f.await,
            $crate::runner::points::PointCall::Done(out) => out,
        }
    };
}
pub(super) use await_point;
