//! Names of the context members a hook can read, shared by the host (which serves them),
//! the SDK (whose [`Context`](crate::Context) accessors read them) and test plugins.
//!
//! Which member is present at which point:
//!
//! | point | members |
//! | --- | --- |
//! | `on_provisioned` | [`SCENARIO`], [`AGENT`] |
//! | `on_run_start` | + [`RUN_ID`], [`SESSION_ID`] |
//! | `on_run_scored`, `on_run_end` | + [`TRACE`], [`SCORE`] |
//! | `on_scenario_end` | [`SCENARIO`], [`AGENT`], [`AGGREGATE`] |
//! | `on_pack_end` | [`AGGREGATES`] |
//! | `turn_begin`, `guard_check` | [`RUN_ID`], [`SESSION_ID`], [`TURN_CALL`] |
//! | `turn_finish` | + [`TURN_RESULT`] |
//!
//! ```
//! use windtunnel_sdk::{member, testing::TestContext};
//!
//! let ctx = TestContext::new().run_id("run-1");
//! ctx.with(|ctx| {
//!     assert_eq!(ctx.raw(member::RUN_ID).as_deref(), Some("\"run-1\""));
//!     assert_eq!(ctx.raw(member::TRACE), None);
//! });
//! ```

/// The scenario being run ([`Scenario`](crate::model::Scenario)).
pub const SCENARIO: &str = "scenario";
/// The agent under test ([`AgentConfig`](crate::model::AgentConfig)).
pub const AGENT: &str = "agent";
/// The current run's id (a JSON string).
pub const RUN_ID: &str = "run_id";
/// The current run's agent session id (a JSON string).
pub const SESSION_ID: &str = "session_id";
/// The frozen trace ([`Trace`](crate::model::Trace)).
pub const TRACE: &str = "trace";
/// The computed score ([`Score`](crate::model::Score)).
pub const SCORE: &str = "score";
/// The scenario's aggregate ([`AggregateResult`](crate::model::AggregateResult)).
pub const AGGREGATE: &str = "aggregate";
/// Every scenario's aggregate (a JSON array of [`AggregateResult`](crate::model::AggregateResult)).
pub const AGGREGATES: &str = "aggregates";
/// The turn about to start ([`TurnCall`](crate::TurnCall)); turn points only.
pub const TURN_CALL: &str = "turn_call";
/// The turn that ended ([`TurnResult`](crate::TurnResult)); `turn_finish` only.
pub const TURN_RESULT: &str = "turn_result";

/// [`TURN_CALL`] in the compact form the SDK reads without a JSON parse (since 1.5; see
/// [`crate::turn::fields`]). Not in [`ALL`]: it is the same member, encoded otherwise.
pub const TURN_CALL_FIELDS: &str = "turn_call.fields";
/// [`TURN_RESULT`] in the compact form (since 1.5).
pub const TURN_RESULT_FIELDS: &str = "turn_result.fields";
/// [`TURN_RESULT`]'s own fields in the compact form, after the snapshot id its call was
/// served under at the turn's begin (since 1.5): a plugin that read that call keeps it and
/// reads only the rest. Served at `turn_finish` when the begin's call had an id.
pub const TURN_RESULT_TAIL: &str = "turn_result.tail";

/// Every member this SDK knows, lifecycle members first.
pub const ALL: [&str; 10] = [
    SCENARIO,
    AGENT,
    RUN_ID,
    SESSION_ID,
    TRACE,
    SCORE,
    AGGREGATE,
    AGGREGATES,
    TURN_CALL,
    TURN_RESULT,
];
