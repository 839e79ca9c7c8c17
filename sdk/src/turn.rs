//! Turn hooks and guards: an observation around every injected turn, and an explicit policy
//! channel that may deny a turn before it starts.
//!
//! A hook that defines [`Hook::turn_begin`] and [`Hook::turn_finish`] is a turn observer;
//! one that defines [`Hook::guard_check`] is a guard. For each turn, in activation order,
//! every guard checks and every observer begins — all before `TurnStarted` is published; a
//! denial stops the sequence. After the turn's terminal event is durable in the journal,
//! observers finish in reverse order; every begin that returned `Ok` gets exactly one
//! finish, also when a guard denied the turn. [`TurnCall`] and [`TurnResult`] are
//! snapshots: a hook cannot change the turn through them, nor extend its deadline.
//!
//! `#[hook]` refuses an impl that defines `turn_finish` without `turn_begin`: `wt` calls a
//! finish only for a begin that ran, so such a finish would never be called.
//!
//! # A turn observer
//!
//! `wt` writes no artifacts emitted at turn points: an observer keeps what it sees and
//! emits it once the run is over.
//!
//! ```
//! use std::time::Instant;
//! use windtunnel_sdk::{Context, Hook, Result, TurnCall, TurnResult, hook};
//!
//! /// Times every turn; one artifact per run with every turn's time.
//! #[derive(Default)]
//! pub struct TurnTimer {
//!     started: Option<Instant>,
//!     turns: Vec<serde_json::Value>,
//! }
//!
//! #[hook]
//! impl Hook for TurnTimer {
//!     const NAME: &'static str = "turn_timer";
//!
//!     fn turn_begin(&mut self, _call: &TurnCall, _ctx: &Context<'_>) -> Result {
//!         self.started = Some(Instant::now());
//!         Ok(())
//!     }
//!
//!     fn turn_finish(&mut self, result: &TurnResult, _ctx: &Context<'_>) -> Result {
//!         let ms = self.started.take().map(|t| t.elapsed().as_millis());
//!         let turn = result.call.turn;
//!         self.turns.push(serde_json::json!({"turn": turn, "outcome": result.outcome, "ms": ms}));
//!         Ok(())
//!     }
//!
//!     fn on_run_end(&mut self, ctx: &Context<'_>) -> Result {
//!         let turns = std::mem::take(&mut self.turns);
//!         ctx.emit_artifact(&serde_json::json!({"turns": turns}), Some("turns"))
//!     }
//! }
//!
//! # use windtunnel_sdk::testing::{HookTester, Sweep};
//! let log = HookTester::<TurnTimer>::new().run_sweep(&Sweep::demo());
//! assert_eq!(log.points(), ["turn_begin", "turn_finish", "on_run_end"]);
//! assert_eq!(log.artifacts()[0].payload["turns"][0]["outcome"], "Done");
//! ```
//!
//! # A guard
//!
//! ```
//! use windtunnel_sdk::{Context, GuardDecision, Hook, Result, TurnCall, hook};
//!
//! /// Denies any turn that pastes what looks like a card number.
//! #[derive(Default)]
//! pub struct NoCardNumbers;
//!
//! #[hook]
//! impl Hook for NoCardNumbers {
//!     const NAME: &'static str = "no_card_numbers";
//!
//!     fn guard_check(&mut self, call: &TurnCall, _ctx: &Context<'_>) -> Result<GuardDecision> {
//!         let digits = call.input.chars().filter(char::is_ascii_digit).count();
//!         Ok(if digits >= 13 {
//!             GuardDecision::deny("card_number", "the turn contains a card number")
//!         } else {
//!             GuardDecision::Allow
//!         })
//!     }
//! }
//!
//! # use windtunnel_sdk::testing::{HookTester, TestContext};
//! let mut tester = HookTester::<NoCardNumbers>::new();
//! let ctx = TestContext::new();
//! let card = TurnCall::new("run-1", 0, "my card is 4111 1111 1111 1111");
//! assert_eq!(
//!     tester.guard_check(&card, &ctx).unwrap(),
//!     GuardDecision::deny("card_number", "the turn contains a card number")
//! );
//! let fine = TurnCall::new("run-1", 1, "thanks");
//! assert_eq!(tester.guard_check(&fine, &ctx).unwrap(), GuardDecision::Allow);
//! ```
//!
//! A guard makes `wt run` require `--policy-revision`, which is stamped into every trace.
//!
//! [`Hook::turn_begin`]: crate::Hook::turn_begin
//! [`Hook::turn_finish`]: crate::Hook::turn_finish
//! [`Hook::guard_check`]: crate::Hook::guard_check

use serde::{Deserialize, Serialize};

/// What set a turn off.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Cause {
    /// One of the scenario's turns.
    #[default]
    Scenario,
    /// A hook's `ctx.converse()`.
    Converse {
        /// The hook that conversed.
        hook: String,
    },
    /// A cause this SDK does not know (from a newer `wt`).
    #[serde(other)]
    Unknown,
}

/// A turn about to start.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct TurnCall {
    /// The sweep (`wt run` invocation).
    pub sweep_id: String,
    /// The scenario.
    pub scenario_id: String,
    /// The run.
    pub run_id: String,
    /// The agent session.
    pub session_id: String,
    /// The agent's label.
    pub agent: String,
    /// 0-based index of the turn within its run.
    pub turn: u32,
    /// The text to be injected.
    pub input: String,
    /// RFC 3339 time the turn was called.
    pub started_at: String,
    /// What set it off.
    pub cause: Cause,
}

impl TurnCall {
    /// Turn `turn` of run `run_id` with this input, caused by the scenario; the other ids
    /// are empty.
    pub fn new(run_id: impl Into<String>, turn: u32, input: impl Into<String>) -> Self {
        TurnCall {
            run_id: run_id.into(),
            turn,
            input: input.into(),
            ..TurnCall::default()
        }
    }
}

/// How a turn ended, as hook telemetry. The event journal keeps its own exact terminal set
/// (`TurnDone`, `TurnFailed`, `TurnInterrupted`); a denied turn has none, as it never
/// started.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Outcome {
    /// The agent replied.
    Done,
    /// The turn ended with an error.
    Failed,
    /// The turn was cut short (deadline, Ctrl-C).
    Interrupted,
    /// A guard denied it; it never started.
    Denied,
    /// An outcome this SDK does not know (from a newer `wt`).
    #[serde(other)]
    Unknown,
}

/// A turn that ended.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct TurnResult {
    /// The call it answers.
    pub call: TurnCall,
    /// RFC 3339 end time.
    pub ended_at: String,
    /// How it ended.
    pub outcome: Outcome,
    /// The error, for failed, interrupted and denied turns.
    pub error: Option<String>,
    /// What kind of error `error` is (timeout, transport, protocol, agent, interrupted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_kind: Option<crate::model::TurnErrorKind>,
    /// The guard's denial, when the outcome is `Denied`: which guard, its code and message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub denial: Option<crate::model::Denial>,
}

impl TurnResult {
    /// The result of `call` with this outcome, no error and no end time.
    pub fn new(call: TurnCall, outcome: Outcome) -> Self {
        TurnResult {
            call,
            ended_at: String::new(),
            outcome,
            error: None,
            error_kind: None,
            denial: None,
        }
    }
}

/// A guard's answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum GuardDecision {
    /// The turn may start.
    Allow,
    /// The turn must not start.
    Deny {
        /// Machine-readable reason (`no_refunds`).
        code: String,
        /// Why, for people.
        message: String,
    },
}

impl GuardDecision {
    /// A denial with a machine-readable code and a message for people.
    pub fn deny(code: impl Into<String>, message: impl Into<String>) -> Self {
        GuardDecision::Deny {
            code: code.into(),
            message: message.into(),
        }
    }
}
