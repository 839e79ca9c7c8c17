//! The safe hook API: the [`Hook`] trait authors implement and the [`Context`] they receive.

use std::{cell::OnceCell, fmt};

use abi_stable::std_types::{RResult, RStr};
use serde::{Serialize, de::DeserializeOwned};
use windtunnel_abi::{FfiContextRef, op};

use crate::{
    model::{AgentConfig, AggregateResult, Scenario, Score, Trace},
    turn::{GuardDecision, TurnCall, TurnResult},
};

/// The error a hook method returns. Any displayable error converts into it with `?`.
pub struct Error {
    message: String,
}

impl Error {
    /// An error with this message.
    pub fn msg(message: impl fmt::Display) -> Self {
        Error {
            message: message.to_string(),
        }
    }

    pub fn message(&self) -> &str {
        &self.message
    }
}

impl<E: std::error::Error> From<E> for Error {
    fn from(err: E) -> Self {
        Error::msg(err)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.message, f)
    }
}

/// The result of a hook method.
pub type Result<T = (), E = Error> = std::result::Result<T, E>;

/// A lifecycle hook. Implement any subset of the six points on a `Default` type and put
/// `#[windtunnel_sdk::hook]` on the impl block: the attribute derives the set of points the
/// hook declares from the methods you wrote, so the host calls exactly those.
///
/// ```ignore
/// #[derive(Default)]
/// struct Counter { runs: u32 }
///
/// #[windtunnel_sdk::hook]
/// impl Hook for Counter {
///     const NAME: &'static str = "counter";
///     fn on_run_end(&mut self, ctx: &Context<'_>) -> Result {
///         self.runs += 1;
///         ctx.emit_artifact(&serde_json::json!({"runs": self.runs}), None)
///     }
/// }
/// windtunnel_sdk::export_hooks!(Counter);
/// ```
///
/// Points fire in activation (`--hook`) order; the host never calls one instance from two
/// threads at once. A panic inside a method is caught in the plugin and reported as an error.
///
/// Besides the six lifecycle points, a hook may observe every scenario turn (`turn_begin` /
/// `turn_finish`) or act as a guard that may deny a turn (`guard_check`); see
/// [`crate::turn`]. The same attribute derives those capabilities.
pub trait Hook: Default + Send + 'static {
    /// Stable slug (`[a-z0-9_-]+`): the activation token and the artifact discriminator.
    const NAME: &'static str;

    /// Set by `#[windtunnel_sdk::hook]`; never write it by hand.
    #[doc(hidden)]
    const DECLARED_POINTS: u32;

    /// Once per scenario, after provisioning and precondition checks; no run has started.
    fn on_provisioned(&mut self, ctx: &Context<'_>) -> Result {
        let _ = ctx;
        Ok(())
    }
    /// Per run, after reset and surface capture, before the first inject.
    fn on_run_start(&mut self, ctx: &Context<'_>) -> Result {
        let _ = ctx;
        Ok(())
    }
    /// Per run, after the score is computed; the session is alive and `converse` works.
    fn on_run_scored(&mut self, ctx: &Context<'_>) -> Result {
        let _ = ctx;
        Ok(())
    }
    /// Per run, right after `on_run_scored`; the run's result is final.
    fn on_run_end(&mut self, ctx: &Context<'_>) -> Result {
        let _ = ctx;
        Ok(())
    }
    /// Once per scenario, after its runs; `ctx.aggregate()` holds its result.
    fn on_scenario_end(&mut self, ctx: &Context<'_>) -> Result {
        let _ = ctx;
        Ok(())
    }
    /// Once per `wt run`, after the sweep; `ctx.aggregates()` holds every scenario's result.
    fn on_pack_end(&mut self, ctx: &Context<'_>) -> Result {
        let _ = ctx;
        Ok(())
    }

    /// Turn observer: before the turn's `TurnStarted` is published. An error or panic here
    /// is a warning; the turn still runs (observers fail open).
    fn turn_begin(&mut self, call: &TurnCall, ctx: &Context<'_>) -> Result {
        let _ = (call, ctx);
        Ok(())
    }
    /// Turn observer: after the turn's terminal event is durable. Runs once for every
    /// `turn_begin` that ran, in reverse activation order.
    fn turn_finish(&mut self, result: &TurnResult, ctx: &Context<'_>) -> Result {
        let _ = (result, ctx);
        Ok(())
    }
    /// Guard: allow or deny the turn before it starts. Defining this makes the hook a
    /// guard, which requires `wt run --policy-revision`. An error, a panic or an overrun
    /// denies the turn (guards fail closed).
    fn guard_check(&mut self, call: &TurnCall, ctx: &Context<'_>) -> Result<GuardDecision> {
        let _ = (call, ctx);
        Ok(GuardDecision::Allow)
    }
}

/// The FFI context with its inner lifetime erased.
trait Access {
    fn get(&self, member: &str) -> Option<String>;
    fn call(&self, op: &str, arg: &str) -> std::result::Result<String, String>;
}

impl Access for FfiContextRef<'_> {
    fn get(&self, member: &str) -> Option<String> {
        FfiContextRef::get(self, RStr::from_str(member))
            .into_option()
            .map(Into::into)
    }

    fn call(&self, op: &str, arg: &str) -> std::result::Result<String, String> {
        match FfiContextRef::call(self, RStr::from_str(op), RStr::from_str(arg)) {
            RResult::ROk(v) => Ok(v.into()),
            RResult::RErr(e) => Err(e.into()),
        }
    }
}

/// What a hook sees at a lifecycle point: read-only members (absent ones are `None`) and
/// three capabilities. It lives only for the duration of one call.
pub struct Context<'a> {
    ffi: &'a (dyn Access + 'a),
    scenario: OnceCell<Option<Scenario>>,
    agent: OnceCell<Option<AgentConfig>>,
    trace: OnceCell<Option<Trace>>,
    score: OnceCell<Option<Score>>,
    aggregate: OnceCell<Option<AggregateResult>>,
    aggregates: OnceCell<Option<Vec<AggregateResult>>>,
}

impl<'a> Context<'a> {
    #[doc(hidden)]
    pub fn from_ffi<'b: 'a>(ffi: &'a FfiContextRef<'b>) -> Self {
        Context {
            ffi,
            scenario: OnceCell::new(),
            agent: OnceCell::new(),
            trace: OnceCell::new(),
            score: OnceCell::new(),
            aggregate: OnceCell::new(),
            aggregates: OnceCell::new(),
        }
    }

    /// A member as raw JSON text, `None` when absent at this point.
    pub fn raw(&self, member: &str) -> Option<String> {
        self.ffi.get(member)
    }

    fn member<'s, T: DeserializeOwned>(
        &'s self,
        cell: &'s OnceCell<Option<T>>,
        member: &str,
    ) -> Option<&'s T> {
        cell.get_or_init(|| {
            self.raw(member)
                .and_then(|text| serde_json::from_str(&text).ok())
        })
        .as_ref()
    }

    /// The scenario being run.
    pub fn scenario(&self) -> Option<&Scenario> {
        self.member(&self.scenario, "scenario")
    }
    /// The agent under test.
    pub fn agent(&self) -> Option<&AgentConfig> {
        self.member(&self.agent, "agent")
    }
    /// The current run's id (run points only).
    pub fn run_id(&self) -> Option<String> {
        self.raw("run_id")
            .and_then(|t| serde_json::from_str(&t).ok())
    }
    /// The current run's session id (run points only).
    pub fn session_id(&self) -> Option<String> {
        self.raw("session_id")
            .and_then(|t| serde_json::from_str(&t).ok())
    }
    /// The frozen trace (from `on_run_scored`).
    pub fn trace(&self) -> Option<&Trace> {
        self.member(&self.trace, "trace")
    }
    /// The computed score (from `on_run_scored`).
    pub fn score(&self) -> Option<&Score> {
        self.member(&self.score, "score")
    }
    /// The scenario's aggregate (at `on_scenario_end`).
    pub fn aggregate(&self) -> Option<&AggregateResult> {
        self.member(&self.aggregate, "aggregate")
    }
    /// The turn about to start (turn points).
    pub fn turn_call(&self) -> Option<TurnCall> {
        self.raw("turn_call")
            .and_then(|t| serde_json::from_str(&t).ok())
    }
    /// The turn that ended (`turn_finish`).
    pub fn turn_result(&self) -> Option<TurnResult> {
        self.raw("turn_result")
            .and_then(|t| serde_json::from_str(&t).ok())
    }
    /// Every scenario's aggregate (at `on_pack_end`).
    pub fn aggregates(&self) -> Option<&Vec<AggregateResult>> {
        self.member(&self.aggregates, "aggregates")
    }

    fn call(&self, op: &str, arg: &str) -> Result<String> {
        self.ffi.call(op, arg).map_err(Error::msg)
    }

    /// Sends `text` into the run's own session and returns the agent's reply. Valid only in
    /// `on_run_scored`; the turn is never added to the trace. Bounded by
    /// `WT_HOOK_CONVERSE_TIMEOUT_S` (default 30 s): on expiry this returns an error and any
    /// late reply is discarded.
    pub fn converse(&self, text: &str) -> Result<String> {
        let reply = self.call(op::CONVERSE, text)?;
        serde_json::from_str(&reply).map_err(Error::from)
    }

    /// Buffers a JSON payload as this hook's artifact; the host writes it beside the trace
    /// (run points) or at the runs-directory root (scenario and pack points). `label` tells
    /// several artifacts of one run apart and must be a slug.
    pub fn emit_artifact<T: Serialize + ?Sized>(&self, payload: &T, label: Option<&str>) -> Result {
        let arg = serde_json::json!({"label": label, "payload": payload});
        self.call(op::EMIT_ARTIFACT, &arg.to_string()).map(drop)
    }

    /// The agent's internal state as its runtime reports it (a state-probe endpoint, the
    /// demo agent's memory). Valid at run points; an error where the runtime has no probe.
    pub fn probe_state(&self) -> Result<serde_json::Value> {
        let state = self.call(op::PROBE_STATE, "")?;
        serde_json::from_str(&state).map_err(Error::from)
    }

    /// Records a non-fatal diagnostic as `hook:<name>: <message>`.
    pub fn warn(&self, message: impl fmt::Display) {
        // A refused warning has nowhere else to go; it is not worth failing the hook for.
        let _ = self.call(op::WARN, &message.to_string());
    }
}
