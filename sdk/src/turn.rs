//! Turn hooks and guards: an observation around every injected turn, and an explicit policy
//! channel that may deny a turn before it starts.
//!
//! A hook that defines `turn_begin` / `turn_finish` is a turn observer; one that defines
//! `guard_check` is a guard. For each turn, in activation order, every guard checks and
//! every observer begins — all before `TurnStarted` is published; a denial stops the
//! sequence. After the turn's terminal event is durable in the journal, observers finish in
//! reverse order; every begin that ran gets exactly one finish, also when a guard denied
//! the turn. [`TurnCall`] and [`TurnResult`] are snapshots: a hook cannot change the turn
//! through them, nor extend its deadline.

use serde::{Deserialize, Serialize};

/// What set a turn off.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Cause {
    /// One of the scenario's turns.
    Scenario,
    /// A hook's `ctx.converse()`.
    Converse { hook: String },
}

/// A turn about to start.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TurnCall {
    pub sweep_id: String,
    pub scenario_id: String,
    pub run_id: String,
    pub session_id: String,
    /// The agent's label.
    pub agent: String,
    /// 0-based index of the turn within its run.
    pub turn: u32,
    pub input: String,
    pub started_at: String,
    pub cause: Cause,
}

/// How a turn ended, as hook telemetry. The event journal keeps its own exact terminal set
/// (`TurnDone`, `TurnFailed`, `TurnInterrupted`); a denied turn has none, as it never
/// started.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    Done,
    Failed,
    Interrupted,
    Denied,
}

/// A turn that ended.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TurnResult {
    pub call: TurnCall,
    pub ended_at: String,
    pub outcome: Outcome,
    pub error: Option<String>,
    /// What kind of error `error` is (timeout, transport, protocol, agent, interrupted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_kind: Option<crate::model::TurnErrorKind>,
    /// The guard's denial, when the outcome is `Denied`: which guard, its code and message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub denial: Option<crate::model::Denial>,
}

/// A guard's answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum GuardDecision {
    Allow,
    Deny { code: String, message: String },
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
