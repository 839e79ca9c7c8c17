//! Unit-test a hook with `cargo test`, without `wt` (feature `testing`).
//!
//! Add the SDK a second time as a dev-dependency with the feature on:
//!
//! ```toml
//! [dev-dependencies]
//! windtunnel-sdk = { version = "1.3", features = ["testing"] }
//! ```
//!
//! Three tools, from the smallest to the whole sweep:
//!
//! - [`TestContext`]: the members a call sees (scenario, trace, score, aggregate, …, or any
//!   raw JSON), a scripted [`converse`](crate::Context::converse) and
//!   [`probe_state`](crate::Context::probe_state), and what the hook did with it: the
//!   artifacts it emitted, its warnings, what it said to the agent.
//! - [`HookTester`]: one instance of your hook, called point by point with a
//!   `TestContext`, through the same adapter `wt` calls plugins through: a panic comes back
//!   as an error (and disables the instance, as in `wt`), `converse` works only in
//!   `on_run_scored`, a point the hook does not declare is refused.
//! - [`Sweep`]: drives the hook through whole scenarios — `on_provisioned`, then per run
//!   `on_run_start`, every turn (`guard_check`, `turn_begin`, `turn_finish`),
//!   `on_run_scored`, `on_run_end`, then `on_scenario_end` and finally `on_pack_end` —
//!   with the members `wt` would pass at each point, and returns a [`SweepLog`].
//!
//! ```
//! use windtunnel_sdk::{Context, Hook, Result, hook, model::Verdict};
//! use windtunnel_sdk::testing::{HookTester, Sweep, TestContext};
//!
//! #[derive(Default)]
//! pub struct FailureLog;
//!
//! #[hook]
//! impl Hook for FailureLog {
//!     const NAME: &'static str = "failure_log";
//!
//!     fn on_run_end(&mut self, ctx: &Context<'_>) -> Result {
//!         let Some(score) = ctx.try_score()? else { return Ok(()) };
//!         if score.verdict != Verdict::Pass {
//!             ctx.emit_artifact(&serde_json::json!({"failed": score.failed_layers()}), None)?;
//!         }
//!         Ok(())
//!     }
//! }
//!
//! // One call:
//! let mut score = windtunnel_sdk::model::Score::new("run-1", "s", Verdict::Fail);
//! score.outcome.passed = false;
//! let ctx = TestContext::new().score(score);
//! HookTester::<FailureLog>::new().on_run_end(&ctx).unwrap();
//! assert_eq!(ctx.artifacts()[0].payload["failed"][0], "outcome");
//!
//! // A whole sweep: three runs, the second fails.
//! let log = HookTester::<FailureLog>::new()
//!     .run_sweep(&Sweep::demo().verdicts([Verdict::Pass, Verdict::Fail, Verdict::Pass]));
//! assert!(log.errors().is_empty());
//! assert_eq!(log.points(), ["on_run_end"; 3]);
//! assert_eq!(log.artifacts().len(), 1);
//! assert_eq!(log.artifacts()[0].run_id.as_deref(), Some("run-2"));
//! ```

use std::{
    cell::RefCell,
    collections::{BTreeMap, HashSet, VecDeque},
    fmt,
    marker::PhantomData,
    rc::Rc,
};

use abi_stable::{
    sabi_trait::TD_Opaque,
    std_types::{ROption, RResult, RStr, RString},
};
use serde::Serialize;
use serde_json::{Value, json};
use windtunnel_abi::{FfiContext, FfiContext_TO, FfiHookBox, op, point};

use crate::{
    Hook,
    hook::{Access, Context},
    member,
    model::{
        AgentConfig, AggregateResult, LayerResult, Scenario, Score, ToolCall, ToolEffect, ToolSpec,
        Trace, TurnRecord, Verdict, WorldCheck, WorldObservation,
    },
    rules,
    turn::{Cause, GuardDecision, Outcome, TurnCall, TurnResult},
};

/// An artifact a hook emitted.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Artifact {
    /// The point it was emitted at (`on_run_end`, …); `""` outside any point
    /// ([`TestContext::with`] without [`TestContext::at`]).
    pub point: &'static str,
    /// The run it belongs to, at run and turn points.
    pub run_id: Option<String>,
    /// Its label, if any.
    pub label: Option<String>,
    /// The payload as emitted (without the `kind` and `schema_version` `wt` adds on disk).
    pub payload: Value,
}

type ConverseFn = Box<dyn FnMut(&str) -> Result<String, String>>;

/// The context of one hook call: which members are present, how `converse` and
/// `probe_state` answer, and — after the call — what the hook emitted, warned and said.
///
/// Builder methods add members; a member you do not set is absent, as it would be in
/// `wt` at a point that does not provide it.
///
/// ```
/// use windtunnel_sdk::{model::Scenario, point, testing::TestContext};
///
/// let ctx = TestContext::new()
///     .scenario(Scenario::new("s1", ["hi"]))
///     .run_id("run-7")
///     .at(point::ON_RUN_SCORED)
///     .converse_reply("fine, thanks");
/// let reply = ctx.with(|ctx| {
///     assert_eq!(ctx.scenario().unwrap().id, "s1");
///     assert_eq!(ctx.run_id().as_deref(), Some("run-7"));
///     ctx.converse("how are you?").unwrap()
/// });
/// assert_eq!(reply, "fine, thanks");
/// assert_eq!(ctx.conversed(), ["how are you?"]);
/// ```
pub struct TestContext {
    members: BTreeMap<String, String>,
    at: u32,
    replies: RefCell<VecDeque<String>>,
    converse_fn: RefCell<Option<ConverseFn>>,
    state: Option<Value>,
    artifacts: RefCell<Vec<Artifact>>,
    /// The artifact names written in this context's scope (a run, a scenario, the pack).
    artifact_names: Rc<RefCell<HashSet<String>>>,
    warnings: RefCell<Vec<String>>,
    conversed: RefCell<Vec<String>>,
}

impl Default for TestContext {
    fn default() -> Self {
        TestContext::new()
    }
}

impl fmt::Debug for TestContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TestContext")
            .field("members", &self.members.keys().collect::<Vec<_>>())
            .field("artifacts", &self.artifacts.borrow())
            .field("warnings", &self.warnings.borrow())
            .finish_non_exhaustive()
    }
}

fn to_json<T: Serialize + ?Sized>(value: &T) -> String {
    serde_json::to_string(value).expect("SDK model types serialize to JSON")
}

impl TestContext {
    /// A context with no members, no converse replies and no state probe.
    pub fn new() -> Self {
        TestContext {
            members: BTreeMap::new(),
            at: 0,
            replies: RefCell::new(VecDeque::new()),
            converse_fn: RefCell::new(None),
            state: None,
            artifacts: RefCell::new(Vec::new()),
            artifact_names: Rc::default(),
            warnings: RefCell::new(Vec::new()),
            conversed: RefCell::new(Vec::new()),
        }
    }

    /// This context writes artifacts in the scope of `other`: a name `other` wrote is taken.
    fn same_scope_as(mut self, other: &TestContext) -> Self {
        self.artifact_names = other.artifact_names.clone();
        self
    }

    /// Sets the [`scenario`](crate::Context::scenario) member.
    pub fn scenario(self, scenario: Scenario) -> Self {
        self.member_json(member::SCENARIO, to_json(&scenario))
    }
    /// Sets the [`agent`](crate::Context::agent) member.
    pub fn agent(self, agent: AgentConfig) -> Self {
        self.member_json(member::AGENT, to_json(&agent))
    }
    /// Sets the [`run_id`](crate::Context::run_id) member.
    pub fn run_id(self, run_id: &str) -> Self {
        self.member_json(member::RUN_ID, to_json(run_id))
    }
    /// Sets the [`session_id`](crate::Context::session_id) member.
    pub fn session_id(self, session_id: &str) -> Self {
        self.member_json(member::SESSION_ID, to_json(session_id))
    }
    /// Sets the [`trace`](crate::Context::trace) member.
    pub fn trace(self, trace: Trace) -> Self {
        self.member_json(member::TRACE, to_json(&trace))
    }
    /// Sets the [`score`](crate::Context::score) member.
    pub fn score(self, score: Score) -> Self {
        self.member_json(member::SCORE, to_json(&score))
    }
    /// Sets the [`aggregate`](crate::Context::aggregate) member.
    pub fn aggregate(self, aggregate: AggregateResult) -> Self {
        self.member_json(member::AGGREGATE, to_json(&aggregate))
    }
    /// Sets the [`aggregates`](crate::Context::aggregates) member.
    pub fn aggregates(self, aggregates: Vec<AggregateResult>) -> Self {
        self.member_json(member::AGGREGATES, to_json(&aggregates))
    }

    /// Sets any member to raw JSON text: a member a newer `wt` may send, or a broken one
    /// to test how your hook copes.
    pub fn member_json(mut self, name: &str, json: impl Into<String>) -> Self {
        self.members.insert(name.to_owned(), json.into());
        self
    }

    /// The point [`with`](TestContext::with) emulates (a constant of [`crate::point`]);
    /// `converse` and `probe_state` follow the same rules as in `wt`.
    pub fn at(mut self, point: u32) -> Self {
        self.at = point;
        self
    }

    /// Queues a reply for the next `converse` call. With no reply queued (and no
    /// [`converse_with`](TestContext::converse_with)), `converse` fails.
    pub fn converse_reply(self, reply: impl Into<String>) -> Self {
        self.replies.borrow_mut().push_back(reply.into());
        self
    }

    /// Answers every `converse` call with `f(text)`; an `Err` is the error the hook sees.
    pub fn converse_with(self, f: impl FnMut(&str) -> Result<String, String> + 'static) -> Self {
        *self.converse_fn.borrow_mut() = Some(Box::new(f));
        self
    }

    /// What `probe_state` returns. Without it, `probe_state` fails as it does for a
    /// runtime with no state probe.
    pub fn probe_state(mut self, state: Value) -> Self {
        self.state = Some(state);
        self
    }

    /// Runs `f` with a [`Context`] over these members, at the point set with
    /// [`at`](TestContext::at) — for testing code that takes a `&Context` directly.
    pub fn with<R>(&self, f: impl FnOnce(&Context<'_>) -> R) -> R {
        let host = Host {
            ctx: self,
            hook: "hook",
            point: self.at,
            run_id: None,
            extra: Vec::new(),
        };
        f(&Context::new(&host))
    }

    /// The artifacts emitted so far, in order.
    pub fn artifacts(&self) -> Vec<Artifact> {
        self.artifacts.borrow().clone()
    }

    /// The warnings recorded so far (without the `hook:<name>: ` prefix `wt` adds).
    pub fn warnings(&self) -> Vec<String> {
        self.warnings.borrow().clone()
    }

    /// What the hook sent to the agent with `converse`, in order.
    pub fn conversed(&self) -> Vec<String> {
        self.conversed.borrow().clone()
    }
}

/// The host side of one call: the test context plus what the point adds.
struct Host<'a> {
    ctx: &'a TestContext,
    /// The hook's name (its artifacts are named after it).
    hook: &'a str,
    point: u32,
    run_id: Option<String>,
    extra: Vec<(&'static str, String)>,
}

fn point_name(point: u32) -> &'static str {
    if point == 0 { "" } else { point::name(point) }
}

impl Access for Host<'_> {
    fn get(&self, name: &str) -> Option<String> {
        self.extra
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.clone())
            .or_else(|| self.ctx.members.get(name).cloned())
    }

    // What `wt` does for each service, by the same rules (crate::rules), messages included.
    fn call(&self, op: &str, arg: &str) -> Result<String, String> {
        rules::service_allowed(self.point, op)?;
        match op {
            op::WARN => {
                let text = rules::cut_warning(arg, rules::DEFAULT_MAX_WARNING_BYTES);
                self.ctx.warnings.borrow_mut().push(text);
                Ok("null".into())
            }
            op::EMIT_ARTIFACT => {
                let checked =
                    rules::check_artifact(self.hook, arg, rules::DEFAULT_MAX_ARTIFACT_BYTES)
                        .and_then(|a| {
                            if self.ctx.artifact_names.borrow_mut().insert(a.name.clone()) {
                                Ok(a)
                            } else {
                                Err(rules::artifact_written_twice(&a.name))
                            }
                        });
                let a = checked.inspect_err(|e| {
                    // `wt` records the refusal as a warning too.
                    self.ctx
                        .warnings
                        .borrow_mut()
                        .push(format!("artifact refused: {e}"));
                })?;
                self.ctx.artifacts.borrow_mut().push(Artifact {
                    point: point_name(self.point),
                    run_id: self.run_id.clone(),
                    label: a.label,
                    payload: a.payload,
                });
                Ok("null".into())
            }
            op::CONVERSE => {
                self.ctx.conversed.borrow_mut().push(arg.to_owned());
                let scripted = self.ctx.replies.borrow_mut().pop_front();
                let reply = match scripted {
                    Some(reply) => Ok(reply),
                    None => match self.ctx.converse_fn.borrow_mut().as_mut() {
                        Some(f) => f(arg),
                        None => Err(
                            "converse failed: no scripted reply (TestContext::converse_reply)"
                                .into(),
                        ),
                    },
                }?;
                Ok(to_json(&reply))
            }
            op::PROBE_STATE => match &self.ctx.state {
                Some(state) => Ok(to_json(state)),
                None => Err("this runtime has no state probe (TestContext::probe_state)".into()),
            },
            other => Err(format!("this wt offers no host service `{other}`")),
        }
    }
}

impl FfiContext for Host<'_> {
    fn get(&self, member: RStr<'_>) -> ROption<RString> {
        Access::get(self, member.as_str()).map(RString::from).into()
    }

    fn call(&self, op: RStr<'_>, arg: RStr<'_>) -> RResult<RString, RString> {
        match Access::call(self, op.as_str(), arg.as_str()) {
            Ok(v) => RResult::ROk(v.into()),
            Err(e) => RResult::RErr(e.into()),
        }
    }
}

/// A hook call that returned an error (or panicked, or was refused).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallError {
    point: &'static str,
    message: String,
}

impl CallError {
    /// The point that was called.
    pub fn point(&self) -> &'static str {
        self.point
    }

    /// The error as `wt` would record it (`panicked at src/lib.rs:12: …` for a panic).
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.point, self.message)
    }
}

impl std::error::Error for CallError {}

/// One instance of hook `H`, called point by point through the adapter `wt` uses.
///
/// ```
/// use windtunnel_sdk::{Context, Hook, Result, hook, testing::{HookTester, TestContext}};
///
/// #[derive(Default)]
/// pub struct Fragile;
///
/// #[hook]
/// impl Hook for Fragile {
///     const NAME: &'static str = "fragile";
///     fn on_run_end(&mut self, _ctx: &Context<'_>) -> Result {
///         panic!("boom")
///     }
/// }
///
/// let mut tester = HookTester::<Fragile>::new();
/// let err = tester.on_run_end(&TestContext::new()).unwrap_err();
/// assert!(err.message().contains("boom"));
/// // As in `wt`, a hook that panicked stays disabled:
/// let again = tester.on_run_end(&TestContext::new()).unwrap_err();
/// assert!(again.message().contains("disabled"));
/// // And a point it does not declare is never called:
/// assert!(tester.on_run_start(&TestContext::new()).is_err());
/// ```
pub struct HookTester<H> {
    hook: FfiHookBox,
    _hook: PhantomData<H>,
}

impl<H: Hook> Default for HookTester<H> {
    fn default() -> Self {
        HookTester::new()
    }
}

impl<H: Hook> HookTester<H> {
    /// A fresh instance, built with `H::default()` as `wt` builds it.
    pub fn new() -> Self {
        HookTester {
            hook: crate::export::new_ffi_hook::<H>(),
            _hook: PhantomData,
        }
    }

    /// Does the hook declare `point` (a constant of [`crate::point`])? `wt` calls only
    /// declared points.
    pub fn declares(&self, point: u32) -> bool {
        H::DECLARED_POINTS & point::bit(point) != 0
    }

    fn invoke(&mut self, point: u32, host: &Host<'_>) -> Result<String, CallError> {
        let fail = |message: String| CallError {
            point: point::name(point),
            message,
        };
        if !self.declares(point) {
            return Err(fail(format!(
                "hook `{}` does not declare {}; wt would never call it",
                H::NAME,
                point::name(point)
            )));
        }
        let ctx = FfiContext_TO::from_ptr(host, TD_Opaque);
        match self.hook.on_event(point, ctx) {
            RResult::ROk(v) => Ok(v.into()),
            RResult::RErr(e) => Err(fail(e.into())),
        }
    }

    /// Calls a lifecycle point (a constant of [`crate::point`]) with `ctx`.
    pub fn call(&mut self, point: u32, ctx: &TestContext) -> Result<(), CallError> {
        let host = Host {
            ctx,
            hook: H::NAME,
            point,
            run_id: ctx
                .members
                .get(member::RUN_ID)
                .and_then(|j| serde_json::from_str(j).ok()),
            extra: Vec::new(),
        };
        self.invoke(point, &host).map(drop)
    }

    /// Calls `on_provisioned`.
    pub fn on_provisioned(&mut self, ctx: &TestContext) -> Result<(), CallError> {
        self.call(point::ON_PROVISIONED, ctx)
    }
    /// Calls `on_run_start`.
    pub fn on_run_start(&mut self, ctx: &TestContext) -> Result<(), CallError> {
        self.call(point::ON_RUN_START, ctx)
    }
    /// Calls `on_run_scored` (the one point where `converse` works).
    pub fn on_run_scored(&mut self, ctx: &TestContext) -> Result<(), CallError> {
        self.call(point::ON_RUN_SCORED, ctx)
    }
    /// Calls `on_run_end`.
    pub fn on_run_end(&mut self, ctx: &TestContext) -> Result<(), CallError> {
        self.call(point::ON_RUN_END, ctx)
    }
    /// Calls `on_scenario_end`.
    pub fn on_scenario_end(&mut self, ctx: &TestContext) -> Result<(), CallError> {
        self.call(point::ON_SCENARIO_END, ctx)
    }
    /// Calls `on_pack_end`.
    pub fn on_pack_end(&mut self, ctx: &TestContext) -> Result<(), CallError> {
        self.call(point::ON_PACK_END, ctx)
    }

    fn turn_host<'a>(ctx: &'a TestContext, point: u32, call: &TurnCall) -> Host<'a> {
        Host {
            ctx,
            hook: H::NAME,
            point,
            run_id: Some(call.run_id.clone()),
            extra: vec![
                (member::RUN_ID, to_json(&call.run_id)),
                (member::SESSION_ID, to_json(&call.session_id)),
                (member::TURN_CALL, to_json(call)),
            ],
        }
    }

    /// Calls `turn_begin` for `call`; the context also gets the `run_id`, `session_id`
    /// and `turn_call` members, as in `wt`.
    pub fn turn_begin(&mut self, call: &TurnCall, ctx: &TestContext) -> Result<(), CallError> {
        let host = Self::turn_host(ctx, point::TURN_BEGIN, call);
        self.invoke(point::TURN_BEGIN, &host).map(drop)
    }

    /// Calls `turn_finish` for `result`; the context also gets `turn_result`.
    pub fn turn_finish(&mut self, result: &TurnResult, ctx: &TestContext) -> Result<(), CallError> {
        let mut host = Self::turn_host(ctx, point::TURN_FINISH, &result.call);
        host.extra.push((member::TURN_RESULT, to_json(result)));
        self.invoke(point::TURN_FINISH, &host).map(drop)
    }

    /// Calls `guard_check` for `call` and returns the guard's decision. In `wt`, an error
    /// here denies the turn.
    pub fn guard_check(
        &mut self,
        call: &TurnCall,
        ctx: &TestContext,
    ) -> Result<GuardDecision, CallError> {
        let host = Self::turn_host(ctx, point::GUARD_CHECK, call);
        let json = self.invoke(point::GUARD_CHECK, &host)?;
        serde_json::from_str(&json).map_err(|e| CallError {
            point: point::name(point::GUARD_CHECK),
            message: format!("guard returned an unreadable decision: {e}"),
        })
    }

    /// Drives the hook through `sweep` as `wt run` would, calling only declared points.
    pub fn run_sweep(&mut self, sweep: &Sweep) -> SweepLog {
        let mut log = SweepLog { calls: Vec::new() };
        let replies = RefCell::new(sweep.replies.iter().cloned().collect::<VecDeque<_>>());
        let mut aggregates = Vec::new();
        for plan in &sweep.plans {
            let base = || {
                let ctx = TestContext::new()
                    .scenario(plan.scenario.clone())
                    .agent(plan.agent.clone());
                match &sweep.state {
                    Some(state) => ctx.probe_state(state.clone()),
                    None => ctx,
                }
            };
            let provisioned = base();
            self.record(&mut log, point::ON_PROVISIONED, None, &provisioned);
            let mut agg = Aggregator::new(&plan.scenario.id);
            for (trace, mut score) in plan.materialize() {
                let run = Some(trace.run_id.clone());
                let ctx = base().run_id(&trace.run_id).session_id(&trace.session_id);
                self.record(&mut log, point::ON_RUN_START, run.clone(), &ctx);
                if let Some(denial) = self.run_turns(&mut log, plan, &trace, &ctx) {
                    score.verdict = Verdict::Error;
                    score.error = Some(denial);
                }
                let ctx = ctx.trace(trace.clone()).score(score.clone());
                *ctx.replies.borrow_mut() = std::mem::take(&mut *replies.borrow_mut());
                self.record(&mut log, point::ON_RUN_SCORED, run.clone(), &ctx);
                *replies.borrow_mut() = std::mem::take(&mut *ctx.replies.borrow_mut());
                self.record(&mut log, point::ON_RUN_END, run, &ctx);
                agg.add(&trace, &score);
            }
            let aggregate = agg.finish();
            let ctx = TestContext::new()
                .scenario(plan.scenario.clone())
                .agent(plan.agent.clone())
                .aggregate(aggregate.clone())
                .same_scope_as(&provisioned);
            self.record(&mut log, point::ON_SCENARIO_END, None, &ctx);
            aggregates.push(aggregate);
        }
        let ctx = TestContext::new().aggregates(aggregates);
        self.record(&mut log, point::ON_PACK_END, None, &ctx);
        log
    }

    /// The turns of one run; `Some(reason)` when the hook's guard denied one.
    fn run_turns(
        &mut self,
        log: &mut SweepLog,
        plan: &Plan,
        trace: &Trace,
        ctx: &TestContext,
    ) -> Option<String> {
        for turn in &trace.turns {
            let call = TurnCall {
                sweep_id: trace.sweep_id.clone(),
                scenario_id: trace.scenario_id.clone(),
                run_id: trace.run_id.clone(),
                session_id: trace.session_id.clone(),
                agent: plan.agent.label.clone(),
                turn: turn.index,
                input: turn.input.clone(),
                started_at: trace.started_at.clone(),
                cause: Cause::Scenario,
            };
            if self.declares(point::GUARD_CHECK) {
                let host = Self::turn_host(ctx, point::GUARD_CHECK, &call);
                let decision = self.invoke(point::GUARD_CHECK, &host).and_then(|json| {
                    serde_json::from_str::<GuardDecision>(&json).map_err(|e| CallError {
                        point: point::name(point::GUARD_CHECK),
                        message: e.to_string(),
                    })
                });
                let denied = match &decision {
                    Ok(GuardDecision::Allow) => None,
                    Ok(GuardDecision::Deny { code, message }) => Some(format!(
                        "turn {} denied by {}: {code}: {message}",
                        turn.index,
                        H::NAME
                    )),
                    Err(e) => Some(format!(
                        "turn {} denied by {}: {}",
                        turn.index,
                        H::NAME,
                        e.message
                    )),
                };
                log.push_call(
                    point::GUARD_CHECK,
                    Some(call.run_id.clone()),
                    Some(turn.index),
                    &host,
                    decision.as_ref().map(drop).map_err(Clone::clone),
                    decision.ok(),
                );
                if denied.is_some() {
                    return denied;
                }
            }
            if self.declares(point::TURN_BEGIN) {
                let host = Self::turn_host(ctx, point::TURN_BEGIN, &call);
                let begun = self.invoke(point::TURN_BEGIN, &host).map(drop);
                let ok = begun.is_ok();
                log.push_call(
                    point::TURN_BEGIN,
                    Some(call.run_id.clone()),
                    Some(turn.index),
                    &host,
                    begun,
                    None,
                );
                if ok && self.declares(point::TURN_FINISH) {
                    let outcome = if turn.error.is_some() {
                        Outcome::Failed
                    } else {
                        Outcome::Done
                    };
                    let result = TurnResult {
                        ended_at: trace.ended_at.clone(),
                        error: turn.error.clone(),
                        error_kind: turn.error_kind,
                        ..TurnResult::new(call.clone(), outcome)
                    };
                    let mut host = Self::turn_host(ctx, point::TURN_FINISH, &call);
                    host.extra.push((member::TURN_RESULT, to_json(&result)));
                    let finished = self.invoke(point::TURN_FINISH, &host).map(drop);
                    log.push_call(
                        point::TURN_FINISH,
                        Some(call.run_id.clone()),
                        Some(turn.index),
                        &host,
                        finished,
                        None,
                    );
                }
            }
        }
        None
    }

    fn record(
        &mut self,
        log: &mut SweepLog,
        point: u32,
        run_id: Option<String>,
        ctx: &TestContext,
    ) {
        if !self.declares(point) {
            return;
        }
        let host = Host {
            ctx,
            hook: H::NAME,
            point,
            run_id: run_id.clone(),
            extra: Vec::new(),
        };
        let result = self.invoke(point, &host).map(drop);
        log.push_call(point, run_id, None, &host, result, None);
    }
}

/// One call a [`Sweep`] made, with what the hook did during it.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Call {
    /// The point called.
    pub point: &'static str,
    /// The run, at run and turn points.
    pub run_id: Option<String>,
    /// The turn index, at turn points.
    pub turn: Option<u32>,
    /// What the call returned.
    pub result: Result<(), CallError>,
    /// The guard's decision, at `guard_check`.
    pub decision: Option<GuardDecision>,
    /// Artifacts emitted during the call.
    pub artifacts: Vec<Artifact>,
    /// Warnings recorded during the call.
    pub warnings: Vec<String>,
    /// What the hook sent with `converse` during the call.
    pub conversed: Vec<String>,
}

/// What a [`Sweep`] did to a hook, call by call.
#[derive(Clone, Debug, PartialEq)]
pub struct SweepLog {
    calls: Vec<Call>,
}

impl SweepLog {
    fn push_call(
        &mut self,
        point: u32,
        run_id: Option<String>,
        turn: Option<u32>,
        host: &Host<'_>,
        result: Result<(), CallError>,
        decision: Option<GuardDecision>,
    ) {
        self.calls.push(Call {
            point: point::name(point),
            run_id,
            turn,
            result,
            decision,
            artifacts: host.ctx.artifacts.take(),
            warnings: host.ctx.warnings.take(),
            conversed: host.ctx.conversed.take(),
        });
    }

    /// Every call, in order.
    pub fn calls(&self) -> &[Call] {
        &self.calls
    }

    /// The points called, in order.
    pub fn points(&self) -> Vec<&'static str> {
        self.calls.iter().map(|c| c.point).collect()
    }

    /// Every artifact, in order.
    pub fn artifacts(&self) -> Vec<&Artifact> {
        self.calls.iter().flat_map(|c| &c.artifacts).collect()
    }

    /// Every warning, in order.
    pub fn warnings(&self) -> Vec<&str> {
        self.calls
            .iter()
            .flat_map(|c| c.warnings.iter().map(String::as_str))
            .collect()
    }

    /// Every call that failed, in order.
    pub fn errors(&self) -> Vec<&CallError> {
        self.calls
            .iter()
            .filter_map(|c| c.result.as_ref().err())
            .collect()
    }
}

type TraceEdit = Box<dyn Fn(usize, &mut Trace)>;
type ScoreEdit = Box<dyn Fn(usize, &mut Score)>;

/// One scenario of a sweep: its runs are either given or generated.
struct Plan {
    scenario: Scenario,
    agent: AgentConfig,
    demo: bool,
    verdicts: Vec<Verdict>,
    given: Vec<(Trace, Score)>,
    trace_edits: Vec<TraceEdit>,
    score_edits: Vec<ScoreEdit>,
}

impl Plan {
    fn new(scenario: Scenario, demo: bool) -> Plan {
        let runs = scenario.runs.max(1) as usize;
        Plan {
            scenario,
            agent: demo_agent(),
            demo,
            verdicts: vec![Verdict::Pass; runs],
            given: Vec::new(),
            trace_edits: Vec::new(),
            score_edits: Vec::new(),
        }
    }

    fn materialize(&self) -> Vec<(Trace, Score)> {
        let mut runs = if self.given.is_empty() {
            self.verdicts
                .iter()
                .enumerate()
                .map(|(i, v)| self.generate(i, *v))
                .collect()
        } else {
            self.given.clone()
        };
        for (i, (trace, score)) in runs.iter_mut().enumerate() {
            for edit in &self.trace_edits {
                edit(i, trace);
            }
            for edit in &self.score_edits {
                edit(i, score);
            }
        }
        runs
    }

    fn generate(&self, index: usize, verdict: Verdict) -> (Trace, Score) {
        let s = &self.scenario;
        let run_id = format!("run-{}", index + 1);
        let mut trace = Trace::new(&run_id, &s.id);
        trace.sweep_id = "sweep-1".into();
        trace.run_index = index as u32;
        trace.session_id = format!("session-{}", index + 1);
        trace.agent.label = self.agent.label.clone();
        trace.agent.runtime = self.agent.runtime.clone();
        trace.agent.model = self.agent.model.clone();
        trace.started_at = "2026-01-01T00:00:00Z".into();
        trace.ended_at = "2026-01-01T00:00:01Z".into();
        trace.surface.soul = self.agent.soul.clone();
        trace.surface.tools = s
            .tools
            .iter()
            .map(|t| json!({"name": t.name, "description": t.description, "parameters": t.parameters}))
            .collect();
        trace.surface.model = self.agent.model.clone();
        trace.surface.sampling = self.agent.sampling.clone();
        trace.turns = s
            .turns
            .iter()
            .enumerate()
            .map(|(i, input)| {
                let mut turn = TurnRecord::default();
                turn.index = i as u32;
                turn.input = input.clone();
                turn.reply = Some(
                    if self.demo {
                        "Order 1234 has shipped."
                    } else {
                        "ok"
                    }
                    .into(),
                );
                turn.latency_ms = 120;
                turn
            })
            .collect();
        if self.demo {
            let mut call = ToolCall::default();
            call.name = "lookup_order".into();
            call.arguments = json!({"order_id": "1234"});
            call.result = json!({"status": "shipped", "item": "kettle"});
            trace.evidence.tool_calls = vec![call];
        }
        if let Some(world) = &s.world {
            let mut observed = WorldObservation::default();
            observed.before = world.clone();
            observed.after = world.clone();
            trace.world = Some(observed);
        }
        let mut score = Score::new(&run_id, &s.id, verdict);
        match verdict {
            Verdict::Pass => {}
            Verdict::Fail => {
                score.outcome = LayerResult::fail("the reply missed what the scenario expects")
            }
            _ => score.error = Some("the run could not be judged".into()),
        }
        (trace, score)
    }
}

/// Whole scenarios to drive a hook through with [`HookTester::run_sweep`]: each runs
/// `on_provisioned`, then per run `on_run_start`, the run's turns, `on_run_scored` and
/// `on_run_end`, then `on_scenario_end`; the sweep ends with `on_pack_end`. Runs are
/// generated from the scenario (ids `run-1`, `run-2`, …; sessions `session-1`, …; one
/// reply per turn; every verdict PASS unless you say otherwise) or given with
/// [`run`](Sweep::run).
///
/// ```
/// use windtunnel_sdk::{model::{Scenario, Verdict}, testing::Sweep};
///
/// let refunds = Scenario::new("refund", ["Please refund order 5678."]);
/// let sweep = Sweep::demo()                                  // order-status, one passing run
///     .runs(2)
///     .and(Sweep::of(refunds).verdicts([Verdict::Fail]))    // a second scenario
///     .converse_reply("the refund tool returned 500");
/// # let _ = sweep;
/// ```
pub struct Sweep {
    plans: Vec<Plan>,
    replies: Vec<String>,
    state: Option<Value>,
}

impl fmt::Debug for Sweep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sweep")
            .field(
                "scenarios",
                &self
                    .plans
                    .iter()
                    .map(|p| &p.scenario.id)
                    .collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl Sweep {
    /// One scenario like the demo pack's `order-status` (a `lookup_order` tool over a
    /// world of orders, one turn), on the demo agent, with one passing run that called
    /// `lookup_order` once.
    pub fn demo() -> Sweep {
        Sweep {
            plans: vec![Plan::new(demo_scenario(), true)],
            replies: Vec::new(),
            state: None,
        }
    }

    /// One scenario, on the demo agent, with `scenario.runs` passing runs.
    pub fn of(scenario: Scenario) -> Sweep {
        Sweep {
            plans: vec![Plan::new(scenario, false)],
            replies: Vec::new(),
            state: None,
        }
    }

    fn last(&mut self) -> &mut Plan {
        self.plans
            .last_mut()
            .expect("a sweep has at least one scenario")
    }

    /// The agent of the last scenario.
    pub fn agent(mut self, agent: AgentConfig) -> Sweep {
        self.last().agent = agent;
        self
    }

    /// `n` generated runs of the last scenario, all passing.
    pub fn runs(mut self, n: usize) -> Sweep {
        self.last().verdicts = vec![Verdict::Pass; n];
        self
    }

    /// One generated run of the last scenario per verdict, in order.
    pub fn verdicts(mut self, verdicts: impl IntoIterator<Item = Verdict>) -> Sweep {
        self.last().verdicts = verdicts.into_iter().collect();
        self
    }

    /// A run of the last scenario with this trace and score. Once any run is given, no
    /// run is generated for that scenario.
    pub fn run(mut self, trace: Trace, score: Score) -> Sweep {
        self.last().given.push((trace, score));
        self
    }

    /// Changes every trace of the last scenario (given the run's 0-based index) before the
    /// hook sees it.
    pub fn edit_traces(mut self, edit: impl Fn(usize, &mut Trace) + 'static) -> Sweep {
        self.last().trace_edits.push(Box::new(edit));
        self
    }

    /// Changes every score of the last scenario before the hook sees it.
    pub fn edit_scores(mut self, edit: impl Fn(usize, &mut Score) + 'static) -> Sweep {
        self.last().score_edits.push(Box::new(edit));
        self
    }

    /// Appends the scenarios of `other`; `on_pack_end` sees every scenario's aggregate.
    pub fn and(mut self, other: Sweep) -> Sweep {
        self.plans.extend(other.plans);
        self.replies.extend(other.replies);
        self.state = self.state.or(other.state);
        self
    }

    /// Queues a reply for the next `converse` call of the sweep.
    pub fn converse_reply(mut self, reply: impl Into<String>) -> Sweep {
        self.replies.push(reply.into());
        self
    }

    /// What `probe_state` returns at every run point.
    pub fn probe_state(mut self, state: Value) -> Sweep {
        self.state = Some(state);
        self
    }
}

fn demo_scenario() -> Scenario {
    let mut s = Scenario::new("order-status", ["Where is my order 1234?"]);
    s.description = "A customer asks where an order is; the agent looks it up.".into();
    s.world = Some(json!({"orders": {"1234": {"status": "shipped", "item": "kettle"}}}));
    let mut lookup = ToolSpec::new(
        "lookup_order",
        ToolEffect::Read {
            path: "orders".into(),
            key_arg: Some("order_id".into()),
        },
    );
    lookup.description = "Look up an order by its number.".into();
    lookup.parameters = json!({
        "type": "object",
        "properties": {"order_id": {"type": "string"}},
        "required": ["order_id"]
    });
    s.tools.push(lookup);
    s.preconditions
        .push(WorldCheck::exists("orders.1234", true));
    s.expect.outcome.reply_contains.push("shipped".into());
    s.expect
        .trajectory
        .required_tools
        .push("lookup_order".into());
    s
}

fn demo_agent() -> AgentConfig {
    let mut agent = AgentConfig::new("demo", "demo");
    agent.model = Some("demo-1".into());
    agent.soul = "You are the order-support agent of a small shop.".into();
    agent
}

/// Builds a scenario's aggregate the way `wt` does.
struct Aggregator {
    agg: AggregateResult,
    latencies: Vec<u64>,
}

impl Aggregator {
    fn new(scenario_id: &str) -> Self {
        Aggregator {
            agg: AggregateResult::new(scenario_id),
            latencies: Vec::new(),
        }
    }

    fn add(&mut self, trace: &Trace, score: &Score) {
        self.agg.runs += 1;
        match score.verdict {
            Verdict::Pass => self.agg.passed += 1,
            Verdict::Fail => self.agg.failed += 1,
            _ => self.agg.errored += 1,
        }
        for name in score.failed_layers() {
            *self.agg.layer_failures.entry(name.to_owned()).or_default() += 1;
        }
        self.latencies
            .extend(trace.turns.iter().map(|t| t.latency_ms));
    }

    fn finish(mut self) -> AggregateResult {
        let mut l = std::mem::take(&mut self.latencies);
        l.sort_unstable();
        if let (Some(&min), Some(&max)) = (l.first(), l.last()) {
            let at = |q: f64| l[((l.len() - 1) as f64 * q).round() as usize];
            let latency = &mut self.agg.latency;
            latency.count = l.len() as u64;
            latency.min_ms = min;
            latency.mean_ms = l.iter().sum::<u64>() / l.len() as u64;
            latency.p50_ms = at(0.5);
            latency.p95_ms = at(0.95);
            latency.max_ms = max;
        }
        self.agg
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Context, Result, hook};

    /// Declares every point and logs what it sees.
    #[derive(Default)]
    struct Everything {
        deny_turn: Option<u32>,
    }

    #[hook]
    impl Hook for Everything {
        const NAME: &'static str = "everything";

        fn on_provisioned(&mut self, ctx: &Context<'_>) -> Result {
            self.deny_turn = ctx
                .scenario()
                .and_then(|s| s.tags.first())
                .and_then(|t| t.strip_prefix("deny-"))
                .and_then(|n| n.parse().ok());
            Ok(())
        }
        fn on_run_start(&mut self, ctx: &Context<'_>) -> Result {
            ctx.probe_state().map(drop)
        }
        fn on_run_scored(&mut self, ctx: &Context<'_>) -> Result {
            let verdict = ctx.score().map(|s| s.verdict.as_str()).unwrap_or("none");
            ctx.emit_artifact(&json!({"verdict": verdict}), Some("scored"))
        }
        fn on_run_end(&mut self, ctx: &Context<'_>) -> Result {
            match ctx.converse("too late") {
                Ok(_) => Err(crate::Error::msg("converse worked at on_run_end")),
                Err(e) => {
                    ctx.warn(e);
                    Ok(())
                }
            }
        }
        fn on_scenario_end(&mut self, ctx: &Context<'_>) -> Result {
            let agg = ctx.aggregate().cloned().unwrap_or_default();
            ctx.emit_artifact(&agg, None)
        }
        fn on_pack_end(&mut self, ctx: &Context<'_>) -> Result {
            let n = ctx.aggregates().map_or(0, Vec::len);
            ctx.emit_artifact(&json!({"scenarios": n}), None)
        }
        fn turn_begin(&mut self, call: &TurnCall, ctx: &Context<'_>) -> Result {
            assert_eq!(ctx.turn_call().as_ref(), Some(call));
            Ok(())
        }
        fn turn_finish(&mut self, result: &TurnResult, ctx: &Context<'_>) -> Result {
            assert_eq!(ctx.turn_result().as_ref(), Some(result));
            Ok(())
        }
        fn guard_check(&mut self, call: &TurnCall, _ctx: &Context<'_>) -> Result<GuardDecision> {
            Ok(match self.deny_turn {
                Some(t) if t == call.turn => GuardDecision::deny("no", "denied in the test"),
                _ => GuardDecision::Allow,
            })
        }
    }

    #[test]
    fn a_sweep_calls_every_declared_point_in_wts_order() {
        let two = Scenario::new("two-turns", ["a", "b"]);
        let sweep = Sweep::demo()
            .and(Sweep::of(two).verdicts([Verdict::Fail]))
            .probe_state(json!({}));
        let log = HookTester::<Everything>::new().run_sweep(&sweep);
        assert_eq!(
            log.points(),
            [
                "on_provisioned",
                "on_run_start",
                "guard_check",
                "turn_begin",
                "turn_finish",
                "on_run_scored",
                "on_run_end",
                "on_scenario_end",
                "on_provisioned",
                "on_run_start",
                "guard_check",
                "turn_begin",
                "turn_finish",
                "guard_check",
                "turn_begin",
                "turn_finish",
                "on_run_scored",
                "on_run_end",
                "on_scenario_end",
                "on_pack_end",
            ]
        );
        assert!(log.errors().is_empty(), "{:?}", log.errors());
        assert_eq!(
            log.warnings(),
            [
                "converse is valid only during on_run_scored, not on_run_end",
                "converse is valid only during on_run_scored, not on_run_end"
            ]
        );
        let payloads: Vec<&Value> = log.artifacts().iter().map(|a| &a.payload).collect();
        assert_eq!(payloads[0]["verdict"], "PASS");
        assert_eq!(payloads[1]["runs"], 1);
        assert_eq!(payloads[2]["verdict"], "FAIL");
        assert_eq!(payloads[3]["failed"], 1);
        assert_eq!(payloads[3]["layer_failures"]["outcome"], 1);
        assert_eq!(payloads[4]["scenarios"], 2);
    }

    #[test]
    fn a_denied_turn_ends_the_run_as_error_with_the_guards_reason() {
        let mut s = Scenario::new("guarded", ["first", "second", "third"]);
        s.tags.push("deny-1".into());
        let log = HookTester::<Everything>::new().run_sweep(&Sweep::of(s).probe_state(json!({})));
        let turns: Vec<(&str, Option<u32>)> = log
            .calls()
            .iter()
            .filter(|c| c.turn.is_some())
            .map(|c| (c.point, c.turn))
            .collect();
        assert_eq!(
            turns,
            [
                ("guard_check", Some(0)),
                ("turn_begin", Some(0)),
                ("turn_finish", Some(0)),
                ("guard_check", Some(1)),
            ]
        );
        let decisions: Vec<_> = log
            .calls()
            .iter()
            .filter_map(|c| c.decision.clone())
            .collect();
        assert_eq!(
            decisions,
            [
                GuardDecision::Allow,
                GuardDecision::deny("no", "denied in the test")
            ]
        );
        assert_eq!(log.artifacts()[0].payload["verdict"], "ERROR");
    }

    #[test]
    fn services_follow_wts_rules() {
        let mut t = HookTester::<Everything>::new();
        // probe_state without a state probe fails as for a runtime without one.
        let err = t.on_run_start(&TestContext::new()).unwrap_err();
        assert!(err.message().contains("no state probe"), "{err}");
        // Outside any point, probe_state and converse are refused.
        let ctx = TestContext::new()
            .probe_state(json!({}))
            .converse_reply("x");
        ctx.with(|ctx| {
            let e = ctx.probe_state().unwrap_err();
            assert!(e.message().ends_with("not outside a hook point"), "{e}");
            let e = ctx.converse("hi").unwrap_err();
            assert!(
                e.message().starts_with("converse is valid only during"),
                "{e}"
            );
            let e = ctx.emit_artifact(&1, Some("Not A Slug")).unwrap_err();
            assert!(e.message().contains("is not a slug"), "{e}");
        });
        assert!(ctx.conversed().is_empty());
    }

    #[derive(Default)]
    struct TurnArtifacts;

    #[hook]
    impl Hook for TurnArtifacts {
        const NAME: &'static str = "turn_artifacts";
        fn turn_begin(&mut self, _call: &TurnCall, ctx: &Context<'_>) -> Result {
            ctx.emit_artifact(&json!({}), None)
        }
        fn turn_finish(&mut self, _result: &TurnResult, _ctx: &Context<'_>) -> Result {
            Ok(())
        }
    }

    #[test]
    fn artifacts_at_turn_points_are_refused_and_a_failed_begin_gets_no_finish() {
        let log = HookTester::<TurnArtifacts>::new().run_sweep(&Sweep::demo());
        assert_eq!(log.points(), ["turn_begin"]);
        assert_eq!(
            log.errors()[0].to_string(),
            "turn_begin: artifacts are written at run, scenario and pack points, not at \
             turn_begin; keep what the turn saw and emit it at on_run_end"
        );
    }

    #[derive(Default)]
    struct OnlyEnd;

    #[hook]
    impl Hook for OnlyEnd {
        const NAME: &'static str = "only_end";
        fn on_run_end(&mut self, _ctx: &Context<'_>) -> Result {
            Ok(())
        }
    }

    #[test]
    fn undeclared_points_are_never_called() {
        let mut t = HookTester::<OnlyEnd>::new();
        let err = t.on_pack_end(&TestContext::new()).unwrap_err();
        assert_eq!(
            err.message(),
            "hook `only_end` does not declare on_pack_end; wt would never call it"
        );
        assert_eq!(
            t.run_sweep(&Sweep::demo().runs(2)).points(),
            ["on_run_end"; 2]
        );
    }
}
