//! The safe hook API: the [`Hook`] trait authors implement, the [`Context`] they receive,
//! and the [`Error`] they return.

use std::{
    cell::{Cell, OnceCell},
    fmt,
};

use abi_stable::std_types::{RResult, RStr};
use serde::{Serialize, de::DeserializeOwned};
use windtunnel_abi::{FfiContextRef, op};

use crate::{
    member,
    model::{AgentConfig, AggregateResult, Scenario, Score, Trace},
    turn::{GuardDecision, TurnCall, TurnResult},
};

/// The error a hook method returns. Any displayable error converts into it with `?`, and
/// [`Error::msg`] makes one from a message.
///
/// `wt` records it as a warning, `hook:<name>: <message>`, in the run's
/// `trace.worker_warnings` (scenario and pack points: on stderr); it never changes a verdict.
///
/// ```
/// use windtunnel_sdk::{Error, Result};
///
/// fn parse_limit(text: &str) -> Result<u32> {
///     let n: u32 = text.parse()?; // ParseIntError converts with `?`
///     if n == 0 {
///         return Err(Error::msg("the limit must be positive"));
///     }
///     Ok(n)
/// }
/// assert_eq!(parse_limit("0").unwrap_err().message(), "the limit must be positive");
/// assert!(parse_limit("x").is_err());
/// ```
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

    /// The message.
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

/// The result of a hook method: `Result` is `Result<(), Error>`, `Result<T>` is
/// `Result<T, Error>`.
pub type Result<T = (), E = Error> = std::result::Result<T, E>;

/// A lifecycle hook. Implement any subset of the points on a `Default` type and put
/// `#[windtunnel_sdk::hook]` on the impl block: the attribute derives the set of points the
/// hook declares from the methods you wrote, so `wt` calls exactly those and nothing else.
///
/// ```
/// use windtunnel_sdk::{Context, Hook, Result, hook};
///
/// #[derive(Default)]
/// pub struct Counter {
///     runs: u32,
/// }
///
/// #[hook]
/// impl Hook for Counter {
///     const NAME: &'static str = "counter";
///
///     fn on_run_end(&mut self, ctx: &Context<'_>) -> Result {
///         self.runs += 1;
///         ctx.emit_artifact(&serde_json::json!({"runs": self.runs}), None)
///     }
/// }
///
/// // In a plugin crate (`crate-type = ["cdylib"]`), once:
/// // windtunnel_sdk::export_hooks!(Counter);
/// # use windtunnel_sdk::testing::{HookTester, Sweep};
/// let log = HookTester::<Counter>::new().run_sweep(&Sweep::demo().runs(3));
/// assert_eq!(log.points(), ["on_run_end"; 3]);
/// assert_eq!(log.artifacts().last().unwrap().payload["runs"], 3);
/// ```
///
/// `wt` builds one instance per `wt run` with `Default`, calls points in activation
/// (`--hook`) order, and never calls one instance from two threads at once. A panic inside
/// a method is caught in the plugin and reported as an error; the instance is then
/// disabled for the rest of the invocation.
///
/// Besides the six lifecycle points, a hook may observe every scenario turn
/// ([`turn_begin`](Hook::turn_begin) / [`turn_finish`](Hook::turn_finish)) or act as a
/// guard that may deny a turn ([`guard_check`](Hook::guard_check)); see [`crate::turn`].
pub trait Hook: Default + Send + 'static {
    /// Stable slug (`[a-z0-9_-]+`, at most 64 characters): the `--hook` activation token,
    /// the artifact file discriminator, and the `WT_<NAME>_*` settings prefix. Renaming it
    /// breaks whatever reads your artifacts.
    const NAME: &'static str;

    /// Set by `#[windtunnel_sdk::hook]`; never write it by hand.
    #[doc(hidden)]
    const DECLARED_POINTS: u32;

    /// Once per scenario, after provisioning and precondition checks; no run has started.
    /// Members: [`scenario`](Context::scenario), [`agent`](Context::agent).
    ///
    /// ```
    /// use windtunnel_sdk::{Context, Hook, Result, hook};
    ///
    /// /// Records which tools each scenario offers.
    /// #[derive(Default)]
    /// pub struct ToolInventory;
    ///
    /// #[hook]
    /// impl Hook for ToolInventory {
    ///     const NAME: &'static str = "tool_inventory";
    ///
    ///     fn on_provisioned(&mut self, ctx: &Context<'_>) -> Result {
    ///         let scenario = ctx.try_scenario()?.ok_or_else(|| windtunnel_sdk::Error::msg("no scenario"))?;
    ///         let tools: Vec<&str> = scenario.tools.iter().map(|t| t.name.as_str()).collect();
    ///         ctx.emit_artifact(&serde_json::json!({"tools": tools}), None)
    ///     }
    /// }
    /// # use windtunnel_sdk::testing::{HookTester, Sweep};
    /// let log = HookTester::<ToolInventory>::new().run_sweep(&Sweep::demo());
    /// assert_eq!(log.points(), ["on_provisioned"]);
    /// assert_eq!(log.artifacts()[0].payload["tools"][0], "lookup_order");
    /// ```
    fn on_provisioned(&mut self, ctx: &Context<'_>) -> Result {
        let _ = ctx;
        Ok(())
    }

    /// Per run, after the agent's state was reset and what it sees was captured, before the
    /// first turn. Members: + [`run_id`](Context::run_id), [`session_id`](Context::session_id).
    ///
    /// ```
    /// use windtunnel_sdk::{Context, Hook, Result, hook};
    ///
    /// /// Warns when a run starts with an agent that still remembers something.
    /// #[derive(Default)]
    /// pub struct FreshStart;
    ///
    /// #[hook]
    /// impl Hook for FreshStart {
    ///     const NAME: &'static str = "fresh_start";
    ///
    ///     fn on_run_start(&mut self, ctx: &Context<'_>) -> Result {
    ///         let state = ctx.probe_state()?;
    ///         if state["memory"].as_array().is_some_and(|m| !m.is_empty()) {
    ///             ctx.warn(format_args!("run {} starts with memory", ctx.run_id().unwrap_or_default()));
    ///         }
    ///         Ok(())
    ///     }
    /// }
    /// # use windtunnel_sdk::testing::{HookTester, Sweep};
    /// let sweep = Sweep::demo().probe_state(serde_json::json!({"memory": ["order 1234"]}));
    /// let log = HookTester::<FreshStart>::new().run_sweep(&sweep);
    /// assert_eq!(log.warnings(), ["run run-1 starts with memory"]);
    /// ```
    fn on_run_start(&mut self, ctx: &Context<'_>) -> Result {
        let _ = ctx;
        Ok(())
    }

    /// Per run, after the score is computed: the evidence is frozen, the session is still
    /// alive, and the next reset has not begun. The only point where
    /// [`converse`](Context::converse) works. Members: + [`trace`](Context::trace),
    /// [`score`](Context::score).
    ///
    /// ```
    /// use windtunnel_sdk::{Context, Hook, Result, hook, model::Verdict};
    ///
    /// /// Asks the agent about every failed run.
    /// #[derive(Default)]
    /// pub struct AskWhy;
    ///
    /// #[hook]
    /// impl Hook for AskWhy {
    ///     const NAME: &'static str = "ask_why";
    ///
    ///     fn on_run_scored(&mut self, ctx: &Context<'_>) -> Result {
    ///         let Some(score) = ctx.try_score()? else { return Ok(()) };
    ///         if score.verdict == Verdict::Fail {
    ///             let reply = ctx.converse("That run failed. Did any tool return an error?")?;
    ///             ctx.emit_artifact(&serde_json::json!({"reply": reply}), None)?;
    ///         }
    ///         Ok(())
    ///     }
    /// }
    /// # use windtunnel_sdk::testing::{HookTester, Sweep};
    /// let sweep = Sweep::demo().verdicts([Verdict::Pass, Verdict::Fail]).converse_reply("lookup_order timed out");
    /// let log = HookTester::<AskWhy>::new().run_sweep(&sweep);
    /// assert_eq!(log.artifacts().len(), 1);
    /// assert_eq!(log.artifacts()[0].run_id.as_deref(), Some("run-2"));
    /// assert_eq!(log.artifacts()[0].payload["reply"], "lookup_order timed out");
    /// ```
    fn on_run_scored(&mut self, ctx: &Context<'_>) -> Result {
        let _ = ctx;
        Ok(())
    }

    /// Per run, right after `on_run_scored`; the run's result is final. Observation only.
    /// Members: as at `on_run_scored`.
    ///
    /// ```
    /// use windtunnel_sdk::{Context, Hook, Result, hook};
    ///
    /// /// Counts the tool calls of every run.
    /// #[derive(Default)]
    /// pub struct ToolCount;
    ///
    /// #[hook]
    /// impl Hook for ToolCount {
    ///     const NAME: &'static str = "tool_count";
    ///
    ///     fn on_run_end(&mut self, ctx: &Context<'_>) -> Result {
    ///         if let Some(trace) = ctx.try_trace()? {
    ///             let calls = trace.evidence.tool_calls.len();
    ///             ctx.emit_artifact(&serde_json::json!({"tool_calls": calls}), None)?;
    ///         }
    ///         Ok(())
    ///     }
    /// }
    /// # use windtunnel_sdk::testing::{HookTester, Sweep};
    /// let log = HookTester::<ToolCount>::new().run_sweep(&Sweep::demo());
    /// assert_eq!(log.artifacts()[0].payload["tool_calls"], 1);
    /// ```
    fn on_run_end(&mut self, ctx: &Context<'_>) -> Result {
        let _ = ctx;
        Ok(())
    }

    /// Once per scenario, after its runs. Members: [`scenario`](Context::scenario),
    /// [`agent`](Context::agent), [`aggregate`](Context::aggregate). Artifacts go to the
    /// runs-directory root as `<sweep_ts>.<hook>.<scenario_id>[.<label>].pack.json`.
    ///
    /// ```
    /// use windtunnel_sdk::{Context, Hook, Result, hook};
    ///
    /// /// Flags scenarios that pass less than 80 % of the time.
    /// #[derive(Default)]
    /// pub struct Flaky;
    ///
    /// #[hook]
    /// impl Hook for Flaky {
    ///     const NAME: &'static str = "flaky";
    ///
    ///     fn on_scenario_end(&mut self, ctx: &Context<'_>) -> Result {
    ///         let Some(agg) = ctx.try_aggregate()? else { return Ok(()) };
    ///         if agg.pass_rate().is_some_and(|r| r < 0.8) {
    ///             ctx.warn(format_args!("{}: {}/{} passed", agg.scenario_id, agg.passed, agg.runs));
    ///         }
    ///         Ok(())
    ///     }
    /// }
    /// # use windtunnel_sdk::{model::Verdict, testing::{HookTester, Sweep}};
    /// let sweep = Sweep::demo().verdicts([Verdict::Pass, Verdict::Fail]);
    /// let log = HookTester::<Flaky>::new().run_sweep(&sweep);
    /// assert_eq!(log.warnings(), ["order-status: 1/2 passed"]);
    /// ```
    fn on_scenario_end(&mut self, ctx: &Context<'_>) -> Result {
        let _ = ctx;
        Ok(())
    }

    /// Once per `wt run`, after the sweep. Members: [`aggregates`](Context::aggregates).
    /// Artifacts go to the runs-directory root as `<sweep_ts>.<hook>[.<label>].pack.json`.
    ///
    /// ```
    /// use windtunnel_sdk::{Context, Hook, Result, hook};
    ///
    /// /// One summary line per sweep.
    /// #[derive(Default)]
    /// pub struct Summary;
    ///
    /// #[hook]
    /// impl Hook for Summary {
    ///     const NAME: &'static str = "summary";
    ///
    ///     fn on_pack_end(&mut self, ctx: &Context<'_>) -> Result {
    ///         let aggregates = ctx.try_aggregates()?.cloned().unwrap_or_default();
    ///         let passed: u32 = aggregates.iter().map(|a| a.passed).sum();
    ///         let runs: u32 = aggregates.iter().map(|a| a.runs).sum();
    ///         ctx.emit_artifact(&serde_json::json!({"passed": passed, "runs": runs}), None)
    ///     }
    /// }
    /// # use windtunnel_sdk::testing::{HookTester, Sweep};
    /// let log = HookTester::<Summary>::new().run_sweep(&Sweep::demo().runs(4));
    /// assert_eq!(log.artifacts()[0].payload, serde_json::json!({"passed": 4, "runs": 4}));
    /// ```
    fn on_pack_end(&mut self, ctx: &Context<'_>) -> Result {
        let _ = ctx;
        Ok(())
    }

    /// Turn observer: before the turn's `TurnStarted` is published. An error or panic here
    /// is a warning; the turn still runs (observers fail open), and no `turn_finish`
    /// follows for it. Members: [`run_id`](Context::run_id),
    /// [`session_id`](Context::session_id), [`turn_call`](Context::turn_call). See
    /// [`crate::turn`] for an example.
    fn turn_begin(&mut self, call: &TurnCall, ctx: &Context<'_>) -> Result {
        let _ = (call, ctx);
        Ok(())
    }

    /// Turn observer: after the turn's terminal event is durable. Runs once for every
    /// `turn_begin` that returned `Ok`, in reverse activation order. Members: as at
    /// `turn_begin`, + [`turn_result`](Context::turn_result). Artifacts cannot be emitted
    /// here; keep what you observe and emit it at `on_run_end` (see [`crate::turn`]).
    ///
    /// Defining `turn_finish` without `turn_begin` does not compile: the finish would never
    /// be called.
    ///
    /// ```compile_fail
    /// use windtunnel_sdk::{Context, Hook, Result, TurnResult, hook};
    ///
    /// #[derive(Default)]
    /// pub struct OnlyFinish;
    ///
    /// #[hook] // error: `turn_finish` needs `turn_begin`
    /// impl Hook for OnlyFinish {
    ///     const NAME: &'static str = "only_finish";
    ///     fn turn_finish(&mut self, _result: &TurnResult, _ctx: &Context<'_>) -> Result {
    ///         Ok(())
    ///     }
    /// }
    /// ```
    fn turn_finish(&mut self, result: &TurnResult, ctx: &Context<'_>) -> Result {
        let _ = (result, ctx);
        Ok(())
    }

    /// Guard: allow or deny the turn before it starts. Defining this makes the hook a
    /// guard, which requires `wt run --policy-revision`. An error, a panic or an overrun
    /// denies the turn (guards fail closed). Members: as at `turn_begin`. See
    /// [`crate::turn`] for an example.
    fn guard_check(&mut self, call: &TurnCall, ctx: &Context<'_>) -> Result<GuardDecision> {
        let _ = (call, ctx);
        Ok(GuardDecision::Allow)
    }
}

/// A context member that is present but could not be read as the type the SDK expects.
///
/// Returned by the `try_*` accessors of [`Context`]; the plain accessors log it as a
/// warning instead and return `None`. It converts into [`Error`] with `?`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("cannot read context member `{member}`: {message}")]
pub struct MemberError {
    member: String,
    message: String,
}

impl MemberError {
    /// The member's name (see [`crate::member`]).
    pub fn member(&self) -> &str {
        &self.member
    }

    /// Why it could not be read (serde's message).
    pub fn message(&self) -> &str {
        &self.message
    }
}

/// The host side of a context, with the FFI lifetime erased. `wt` provides it through the
/// FFI layer; [`crate::testing`] provides its own.
pub(crate) trait Access {
    fn get(&self, member: &str) -> Option<String>;
    fn call(&self, op: &str, arg: &str) -> std::result::Result<String, String>;
    /// Calls `f` with a member's text where it lies (no copy), if present.
    fn get_with(&self, member: &str, f: &mut dyn FnMut(&str)) -> bool {
        match self.get(member) {
            Some(text) => {
                f(&text);
                true
            }
            None => false,
        }
    }
}

impl Access for FfiContextRef<'_> {
    fn get(&self, member: &str) -> Option<String> {
        FfiContextRef::get(self, RStr::from_str(member))
            .into_option()
            .map(Into::into)
    }

    fn get_with(&self, member: &str, f: &mut dyn FnMut(&str)) -> bool {
        match FfiContextRef::get(self, RStr::from_str(member)).into_option() {
            Some(text) => {
                f(text.as_str());
                true
            }
            None => false,
        }
    }

    fn call(&self, op: &str, arg: &str) -> std::result::Result<String, String> {
        match FfiContextRef::call(self, RStr::from_str(op), RStr::from_str(arg)) {
            RResult::ROk(v) => Ok(v.into()),
            RResult::RErr(e) => Err(e.into()),
        }
    }
}

type Cached<T> = OnceCell<std::result::Result<Option<T>, MemberError>>;

/// What a hook sees at a point: read-only members (absent ones are `None`; see
/// [`crate::member`] for which are present where) and four capabilities —
/// [`converse`](Context::converse), [`emit_artifact`](Context::emit_artifact),
/// [`warn`](Context::warn) and [`probe_state`](Context::probe_state). It lives only for
/// the duration of one call.
///
/// Each member has two accessors. The plain one (`scenario()`) returns `None` both when
/// the member is absent and when it cannot be read; in the second case it also records a
/// warning naming the member and the error, so nothing fails silently. The `try_` one
/// (`try_scenario()`) returns that error to you:
///
/// ```
/// use windtunnel_sdk::testing::TestContext;
///
/// let ctx = TestContext::new().member_json("scenario", r#"{"id": 7}"#);
/// ctx.with(|ctx| {
///     let err = ctx.try_scenario().unwrap_err();
///     assert_eq!(err.member(), "scenario");
///     assert!(ctx.scenario().is_none());
/// });
/// assert!(ctx.warnings()[0].starts_with("cannot read context member `scenario`: invalid type"));
/// ```
pub struct Context<'a> {
    host: &'a (dyn Access + 'a),
    warned: Cell<u32>,
    /// The typed members read so far, made at the first read: a hook that reads none (a turn
    /// observer) costs no cache to build or drop.
    members: OnceCell<Box<Members>>,
}

/// A [`Context`]'s typed members, each parsed at its first read.
#[derive(Default)]
struct Members {
    scenario: Cached<Scenario>,
    agent: Cached<AgentConfig>,
    trace: Cached<Trace>,
    score: Cached<Score>,
    aggregate: Cached<AggregateResult>,
    aggregates: Cached<Vec<AggregateResult>>,
}

impl<'a> Context<'a> {
    #[doc(hidden)]
    pub fn from_ffi<'b: 'a>(ffi: &'a FfiContextRef<'b>) -> Self {
        Context::new(ffi)
    }

    pub(crate) fn new(host: &'a (dyn Access + 'a)) -> Self {
        Context {
            host,
            warned: Cell::new(0),
            members: OnceCell::new(),
        }
    }

    fn members(&self) -> &Members {
        self.members.get_or_init(Box::default)
    }

    /// A member as raw JSON text, `None` when absent at this point. Use it for what a newer
    /// `wt` sends that this SDK has no type for.
    pub fn raw(&self, member: &str) -> Option<String> {
        self.host.get(member)
    }

    /// `f` of a member's raw text where the host holds it (no copy); `None` when absent.
    pub(crate) fn with_raw<R>(&self, member: &str, f: impl FnOnce(&str) -> R) -> Option<R> {
        let mut f = Some(f);
        let mut out = None;
        self.host.get_with(member, &mut |text| {
            if let Some(f) = f.take() {
                out = Some(f(text));
            }
        });
        out
    }

    /// A member read as any type you choose: `Ok(None)` when absent, `Err` when present but
    /// not of that shape.
    ///
    /// ```
    /// use windtunnel_sdk::{member, testing::TestContext};
    ///
    /// #[derive(serde::Deserialize)]
    /// struct JustTheId {
    ///     id: String,
    /// }
    ///
    /// let ctx = TestContext::new().scenario(windtunnel_sdk::model::Scenario::new("s1", ["hi"]));
    /// ctx.with(|ctx| {
    ///     let s: JustTheId = ctx.member(member::SCENARIO).unwrap().unwrap();
    ///     assert_eq!(s.id, "s1");
    /// });
    /// ```
    pub fn member<T: DeserializeOwned>(
        &self,
        name: &str,
    ) -> std::result::Result<Option<T>, MemberError> {
        self.raw(name)
            .map(|text| {
                serde_json::from_str(&text).map_err(|e| MemberError {
                    member: name.to_owned(),
                    message: e.to_string(),
                })
            })
            .transpose()
    }

    fn cached<'s, T: DeserializeOwned>(
        &'s self,
        cell: &'s Cached<T>,
        name: &str,
    ) -> std::result::Result<Option<&'s T>, MemberError> {
        match cell.get_or_init(|| self.member(name)) {
            Ok(v) => Ok(v.as_ref()),
            Err(e) => Err(e.clone()),
        }
    }

    /// `None` for a read error, which is recorded as a warning once per member and call.
    fn lenient<T>(
        &self,
        name: &str,
        read: std::result::Result<Option<T>, MemberError>,
    ) -> Option<T> {
        match read {
            Ok(v) => v,
            Err(e) => {
                let bit = member::ALL
                    .iter()
                    .position(|m| *m == name)
                    .map_or(1 << 31, |i| 1 << i);
                if self.warned.get() & bit == 0 {
                    self.warned.set(self.warned.get() | bit);
                    self.warn(&e);
                }
                None
            }
        }
    }

    /// The scenario being run.
    pub fn scenario(&self) -> Option<&Scenario> {
        self.lenient(member::SCENARIO, self.try_scenario())
    }
    /// The scenario being run, or why it could not be read.
    pub fn try_scenario(&self) -> std::result::Result<Option<&Scenario>, MemberError> {
        self.cached(&self.members().scenario, member::SCENARIO)
    }

    /// The agent under test.
    pub fn agent(&self) -> Option<&AgentConfig> {
        self.lenient(member::AGENT, self.try_agent())
    }
    /// The agent under test, or why it could not be read.
    pub fn try_agent(&self) -> std::result::Result<Option<&AgentConfig>, MemberError> {
        self.cached(&self.members().agent, member::AGENT)
    }

    /// The current run's id (run and turn points).
    pub fn run_id(&self) -> Option<String> {
        self.lenient(member::RUN_ID, self.try_run_id())
    }
    /// The current run's id, or why it could not be read.
    pub fn try_run_id(&self) -> std::result::Result<Option<String>, MemberError> {
        self.member(member::RUN_ID)
    }

    /// The current run's agent session id (run and turn points).
    pub fn session_id(&self) -> Option<String> {
        self.lenient(member::SESSION_ID, self.try_session_id())
    }
    /// The current run's session id, or why it could not be read.
    pub fn try_session_id(&self) -> std::result::Result<Option<String>, MemberError> {
        self.member(member::SESSION_ID)
    }

    /// The frozen trace (`on_run_scored`, `on_run_end`).
    pub fn trace(&self) -> Option<&Trace> {
        self.lenient(member::TRACE, self.try_trace())
    }
    /// The frozen trace, or why it could not be read.
    pub fn try_trace(&self) -> std::result::Result<Option<&Trace>, MemberError> {
        self.cached(&self.members().trace, member::TRACE)
    }

    /// The computed score (`on_run_scored`, `on_run_end`).
    pub fn score(&self) -> Option<&Score> {
        self.lenient(member::SCORE, self.try_score())
    }
    /// The computed score, or why it could not be read.
    pub fn try_score(&self) -> std::result::Result<Option<&Score>, MemberError> {
        self.cached(&self.members().score, member::SCORE)
    }

    /// The scenario's aggregate (`on_scenario_end`).
    pub fn aggregate(&self) -> Option<&AggregateResult> {
        self.lenient(member::AGGREGATE, self.try_aggregate())
    }
    /// The scenario's aggregate, or why it could not be read.
    pub fn try_aggregate(&self) -> std::result::Result<Option<&AggregateResult>, MemberError> {
        self.cached(&self.members().aggregate, member::AGGREGATE)
    }

    /// Every scenario's aggregate (`on_pack_end`).
    pub fn aggregates(&self) -> Option<&Vec<AggregateResult>> {
        self.lenient(member::AGGREGATES, self.try_aggregates())
    }
    /// Every scenario's aggregate, or why they could not be read.
    pub fn try_aggregates(
        &self,
    ) -> std::result::Result<Option<&Vec<AggregateResult>>, MemberError> {
        self.cached(&self.members().aggregates, member::AGGREGATES)
    }

    /// The turn about to start (turn points).
    pub fn turn_call(&self) -> Option<TurnCall> {
        self.lenient(member::TURN_CALL, self.try_turn_call())
    }
    /// The turn about to start, or why it could not be read.
    pub fn try_turn_call(&self) -> std::result::Result<Option<TurnCall>, MemberError> {
        self.member(member::TURN_CALL)
    }

    /// The turn that ended (`turn_finish`).
    pub fn turn_result(&self) -> Option<TurnResult> {
        self.lenient(member::TURN_RESULT, self.try_turn_result())
    }
    /// The turn that ended, or why it could not be read.
    pub fn try_turn_result(&self) -> std::result::Result<Option<TurnResult>, MemberError> {
        self.member(member::TURN_RESULT)
    }

    fn call(&self, op: &str, arg: &str) -> Result<String> {
        self.host.call(op, arg).map_err(Error::msg)
    }

    /// Sends `text` into the run's own session and returns the agent's reply. Valid only in
    /// `on_run_scored` (an error elsewhere, and when the run's session is unusable). The
    /// turn is never added to the trace; it is journaled with `cause: converse`. Bounded by
    /// `WT_HOOK_CONVERSE_TIMEOUT_S` (default 30 s): on expiry this returns an error and any
    /// late reply is discarded. A converse turn may call tools, in a world already judged:
    /// `wt` stamps `tools_disabled: false` into the hook's artifacts.
    ///
    /// ```
    /// use windtunnel_sdk::{Context, Hook, Result, hook};
    ///
    /// #[derive(Default)]
    /// pub struct Interview;
    ///
    /// #[hook]
    /// impl Hook for Interview {
    ///     const NAME: &'static str = "interview";
    ///
    ///     fn on_run_scored(&mut self, ctx: &Context<'_>) -> Result {
    ///         let reply = ctx.converse("Which tool results surprised you?")?;
    ///         ctx.emit_artifact(&serde_json::json!({"reply": reply}), None)
    ///     }
    /// }
    /// # use windtunnel_sdk::testing::{HookTester, TestContext};
    /// let ctx = TestContext::new().converse_reply("none");
    /// HookTester::<Interview>::new().on_run_scored(&ctx).unwrap();
    /// assert_eq!(ctx.conversed(), ["Which tool results surprised you?"]);
    /// assert_eq!(ctx.artifacts()[0].payload["reply"], "none");
    ///
    /// // Anywhere else, converse is an error:
    /// let ctx = TestContext::new().converse_reply("never sent");
    /// let err = ctx.with(|ctx| ctx.converse("hello?").unwrap_err());
    /// assert!(err.message().starts_with("converse is valid only during on_run_scored"));
    /// ```
    pub fn converse(&self, text: &str) -> Result<String> {
        let reply = self.call(op::CONVERSE, text)?;
        serde_json::from_str(&reply).map_err(Error::from)
    }

    /// Buffers a JSON payload as this hook's artifact; `wt` writes it beside the trace
    /// (run points: `<stem>.<hook>[.<label>].json`) or at the runs-directory root (scenario
    /// and pack points). `label` tells several artifacts of one run apart and must be a
    /// slug. At turn points (`turn_begin`, `turn_finish`, `guard_check`) `wt` writes no
    /// artifact: keep per-turn data in the hook and emit it at `on_run_end` (the
    /// [`testing`](crate::testing) kit refuses such a call, so you find out in `cargo test`). `wt` adds `kind` (`<hook>` or `<hook>.<label>`) and `schema_version: 1` to
    /// object payloads that lack them, and wraps any other JSON value as
    /// `{kind, schema_version, value}`.
    ///
    /// ```
    /// use windtunnel_sdk::{Context, Hook, Result, hook};
    ///
    /// #[derive(Default)]
    /// pub struct Verdicts;
    ///
    /// #[hook]
    /// impl Hook for Verdicts {
    ///     const NAME: &'static str = "verdicts";
    ///
    ///     fn on_run_end(&mut self, ctx: &Context<'_>) -> Result {
    ///         let verdict = ctx.score().map(|s| s.verdict.as_str()).unwrap_or("none");
    ///         ctx.emit_artifact(&serde_json::json!({"verdict": verdict}), Some("verdict"))
    ///     }
    /// }
    /// # use windtunnel_sdk::testing::{HookTester, Sweep};
    /// let log = HookTester::<Verdicts>::new().run_sweep(&Sweep::demo());
    /// let artifact = &log.artifacts()[0];
    /// assert_eq!(artifact.label.as_deref(), Some("verdict"));
    /// assert_eq!(artifact.payload["verdict"], "PASS");
    /// ```
    pub fn emit_artifact<T: Serialize + ?Sized>(&self, payload: &T, label: Option<&str>) -> Result {
        let arg = serde_json::json!({"label": label, "payload": payload});
        self.call(op::EMIT_ARTIFACT, &arg.to_string()).map(drop)
    }

    /// The agent's internal state as its runtime reports it (the demo agent's memory, the
    /// `http` runtime's state endpoint). Valid at run points; an error where the runtime
    /// has no state probe.
    ///
    /// ```
    /// use windtunnel_sdk::{Context, Hook, Result, hook};
    ///
    /// #[derive(Default)]
    /// pub struct MemorySize;
    ///
    /// #[hook]
    /// impl Hook for MemorySize {
    ///     const NAME: &'static str = "memory_size";
    ///
    ///     fn on_run_end(&mut self, ctx: &Context<'_>) -> Result {
    ///         let state = ctx.probe_state()?;
    ///         let items = state["memory"].as_array().map_or(0, Vec::len);
    ///         ctx.emit_artifact(&serde_json::json!({"memory_items": items}), None)
    ///     }
    /// }
    /// # use windtunnel_sdk::testing::{HookTester, TestContext};
    /// let ctx = TestContext::new().probe_state(serde_json::json!({"memory": ["a", "b"]}));
    /// HookTester::<MemorySize>::new().on_run_end(&ctx).unwrap();
    /// assert_eq!(ctx.artifacts()[0].payload["memory_items"], 2);
    /// ```
    pub fn probe_state(&self) -> Result<serde_json::Value> {
        let state = self.call(op::PROBE_STATE, "")?;
        serde_json::from_str(&state).map_err(Error::from)
    }

    /// Records a non-fatal diagnostic as `hook:<name>: <message>`: in the run's
    /// `trace.worker_warnings` at run points, on stderr at scenario and pack points. A
    /// warning is evidence, never a gate.
    ///
    /// ```
    /// use windtunnel_sdk::{Context, Hook, Result, hook};
    ///
    /// #[derive(Default)]
    /// pub struct SlowTurns;
    ///
    /// #[hook]
    /// impl Hook for SlowTurns {
    ///     const NAME: &'static str = "slow_turns";
    ///
    ///     fn on_run_end(&mut self, ctx: &Context<'_>) -> Result {
    ///         for turn in ctx.trace().map(|t| t.turns.as_slice()).unwrap_or_default() {
    ///             if turn.latency_ms > 5_000 {
    ///                 ctx.warn(format_args!("turn {} took {} ms", turn.index, turn.latency_ms));
    ///             }
    ///         }
    ///         Ok(())
    ///     }
    /// }
    /// # use windtunnel_sdk::testing::{HookTester, Sweep};
    /// let sweep = Sweep::demo().edit_traces(|_, trace| trace.turns[0].latency_ms = 9_000);
    /// let log = HookTester::<SlowTurns>::new().run_sweep(&sweep);
    /// assert_eq!(log.warnings(), ["turn 0 took 9000 ms"]);
    /// ```
    pub fn warn(&self, message: impl fmt::Display) {
        // A refused warning has nowhere else to go; it is not worth failing the hook for.
        let _ = self.call(op::WARN, &message.to_string());
    }
}
