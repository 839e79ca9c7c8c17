//! The data model shared by the host and hooks: what a scenario asks, what a run recorded
//! (the [`Trace`]), how it was judged (the [`Score`]) and what a scenario's runs add up to
//! (the [`AggregateResult`]). The host writes these types to disk and hands them to hooks as
//! JSON, so there is exactly one definition of each.
//!
//! Every persisted document carries [`SCHEMA_VERSION`]. Fields added later are optional and
//! skipped when absent, so files written by older versions keep parsing.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Schema version of traces, scores and aggregates written by this SDK.
pub const SCHEMA_VERSION: u32 = 1;

fn default_runs() -> u32 {
    1
}

/// One scenario of a pack: what to inject and what each scorer layer expects.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Slug id, `[a-z0-9_-]+`; never contains a dot.
    pub id: String,
    #[serde(default)]
    pub description: String,
    /// How many times the scenario runs in a sweep.
    #[serde(default = "default_runs")]
    pub runs: u32,
    #[serde(default)]
    pub tags: Vec<String>,
    /// The user turns injected in order.
    pub turns: Vec<String>,
    /// The fixture world: JSON state the scenario's tools read and change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub world: Option<Value>,
    /// Tools offered to the agent; each acts on the fixture world.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolSpec>,
    /// World checks that must hold before any run starts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub preconditions: Vec<WorldCheck>,
    #[serde(default)]
    pub expect: Expectations,
}

/// A tool the agent may call, and what it does to the fixture world.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolSpec {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// JSON Schema of the arguments object, as offered to the model.
    #[serde(default = "empty_object_schema")]
    pub parameters: Value,
    /// What a call does to the world.
    pub effect: ToolEffect,
}

fn empty_object_schema() -> Value {
    serde_json::json!({"type": "object", "properties": {}})
}

/// The effect of a tool call on the fixture world. Paths are dotted (`orders.1234.status`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum ToolEffect {
    /// Returns the value at `path`; with `key_arg`, at `path.<value of that argument>`.
    Read {
        path: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        key_arg: Option<String>,
    },
    /// Sets the value at `path` (extended by `key_arg` as for `Read`) to the argument
    /// `value_arg`, or to `value` when given. Returns the new value.
    Write {
        path: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        key_arg: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        value_arg: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        value: Option<Value>,
    },
    /// Appends the argument `value_arg` (or the whole arguments object) to the array at
    /// `path`. Returns the new length.
    Append {
        path: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        value_arg: Option<String>,
    },
}

/// A check on the fixture world: the value at `path` equals `equals`, or (with `exists`)
/// is present or absent.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorldCheck {
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub equals: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exists: Option<bool>,
}

/// What each scorer layer checks.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expectations {
    #[serde(default)]
    pub outcome: OutcomeExpect,
    #[serde(default)]
    pub trajectory: TrajectoryExpect,
    #[serde(default)]
    pub constraint: ConstraintExpect,
}

/// Outcome layer: the final reply and the final world state.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutcomeExpect {
    /// Case-insensitive substrings the final reply must contain.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reply_contains: Vec<String>,
    /// Case-insensitive substrings the final reply must not contain.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reply_excludes: Vec<String>,
    /// Checks on the world after the last turn.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub world: Vec<WorldCheck>,
}

/// Trajectory layer: which tools were called, and in which order.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrajectoryExpect {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub required_tools: Vec<String>,
    /// The required tools must first appear in the listed order.
    #[serde(default)]
    pub ordered: bool,
}

/// Constraint layer: what the agent must not do.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConstraintExpect {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub forbidden_tools: Vec<String>,
    /// Most tool calls allowed in the whole run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_steps: Option<u32>,
    /// Most tool calls allowed in any one turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_steps_per_turn: Option<u32>,
}

/// Sampling settings handed to the model.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sampling {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
}

fn default_turn_timeout() -> f64 {
    30.0
}
fn default_max_steps() -> u32 {
    8
}

/// The agent under test: which runtime drives it and what it is told.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentConfig {
    pub label: String,
    /// `demo`, `openai`, `http` (and later `process`).
    pub runtime: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The system prompt.
    #[serde(default)]
    pub soul: String,
    #[serde(default)]
    pub sampling: Sampling,
    /// Base URL (`openai`) or inject URL (`http`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// Name of the environment variable holding the API key. The key itself is never stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// Deadline of one turn, in seconds.
    #[serde(default = "default_turn_timeout")]
    pub turn_timeout_s: f64,
    /// Most model calls of the tool loop in one turn.
    #[serde(default = "default_max_steps")]
    pub max_steps: u32,
    /// Retries on HTTP 429/5xx, with backoff.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retries: Option<u32>,
    /// Demo runtime only: a fault mode (`leaky`, `forbidden-tool`, `slow`, `garbled`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fault: Option<String>,
    /// Largest response body accepted from the agent's endpoint, in bytes (default 8 MiB);
    /// a larger one ends the turn with a protocol error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_response_bytes: Option<u64>,
    /// `http` runtime: how many sessions the service holds at once, i.e. how many of a
    /// scenario's runs may be in flight together (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_sessions: Option<u32>,
    /// Most requests in flight to the endpoint at once, across all lanes (default: no cap).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrency: Option<u32>,
    /// Most requests a minute to the endpoint, across all lanes, evenly spaced (default: no
    /// cap).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests_per_minute: Option<u32>,
}

/// What the agent saw, frozen before the first inject.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Surface {
    pub soul: String,
    /// Tool schemas as offered to the model.
    pub tools: Vec<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    pub sampling: Sampling,
}

/// Which agent a trace is about (the config minus anything secret).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AgentRef {
    pub label: String,
    pub runtime: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

/// One injected turn and what came back.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TurnRecord {
    pub index: u32,
    pub input: String,
    /// The normalized reply; `None` when the turn produced none.
    pub reply: Option<String>,
    pub latency_ms: u64,
    /// A transport or protocol error that ended the turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What kind of error `error` is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_kind: Option<TurnErrorKind>,
    /// Requests of this turn that were retried, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub retries: Vec<Retry>,
}

/// Why a turn ended without a reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TurnErrorKind {
    /// The turn's deadline passed.
    Timeout,
    /// The agent could not be reached: connection refused or reset, HTTP 429/5xx.
    Transport,
    /// The agent answered outside its protocol: malformed JSON, a missing field, a reply
    /// over the size limit, another session's reply.
    Protocol,
    /// The agent answered and failed: it declared an error, crashed, or kept calling tools.
    Agent,
    /// `wt` was stopped (Ctrl-C, SIGTERM, SIGHUP) and cut the turn after its grace period.
    Interrupted,
    /// A kind this SDK does not know (written by a newer `wt`).
    #[serde(other)]
    Unknown,
}

impl TurnErrorKind {
    pub fn as_str(self) -> &'static str {
        match self {
            TurnErrorKind::Timeout => "timeout",
            TurnErrorKind::Transport => "transport",
            TurnErrorKind::Protocol => "protocol",
            TurnErrorKind::Agent => "agent",
            TurnErrorKind::Interrupted => "interrupted",
            TurnErrorKind::Unknown => "unknown",
        }
    }
}

impl std::fmt::Display for TurnErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A request that failed and was tried again.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Retry {
    /// 1 for the first retry.
    pub attempt: u32,
    /// Why the previous attempt failed.
    pub error: String,
    /// How long `wt` waited before this attempt (backoff, or the server's `Retry-After`).
    pub wait_ms: u64,
}

/// A tool call the agent made, as executed against the fixture world.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub turn: u32,
    pub step: u32,
    pub name: String,
    pub arguments: Value,
    pub result: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Evidence captured during a run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    pub tool_calls: Vec<ToolCall>,
}

/// The fixture world before the first turn and after the last.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WorldObservation {
    pub before: Value,
    pub after: Value,
}

/// Where an active hook came from, recorded in each trace when hooks are active.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HookProvenance {
    pub name: String,
    /// `built-in`, or the path of the plugin library.
    pub source: String,
    pub version: String,
    pub sdk_version: String,
    /// SHA-256 of the library file; absent for built-ins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// The resolved `WT_<HOOK>_*` settings.
    #[serde(default)]
    pub settings: BTreeMap<String, String>,
}

/// A turn a guard denied.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Denial {
    pub turn: u32,
    pub guard: String,
    pub code: String,
    pub message: String,
    /// `denied`, or the guard failure that denied (`panic`, `error`, `timeout`).
    pub kind: String,
}

/// Everything one run recorded.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Trace {
    pub schema_version: u32,
    pub run_id: String,
    pub sweep_id: String,
    pub scenario_id: String,
    /// 0-based index of the run within its scenario.
    pub run_index: u32,
    pub session_id: String,
    pub agent: AgentRef,
    pub started_at: String,
    pub ended_at: String,
    pub surface: Surface,
    pub turns: Vec<TurnRecord>,
    pub evidence: Evidence,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub world: Option<WorldObservation>,
    /// Non-fatal diagnostics, e.g. `hook:<name>: <message>`.
    #[serde(default)]
    pub worker_warnings: Vec<String>,
    /// A run-level error that kept the run from finishing (reset failed, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_revision: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub denial: Option<Denial>,
    /// Provenance of the active hooks; absent when none was active.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hooks: Option<Vec<HookProvenance>>,
}

/// The verdict of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Verdict {
    Pass,
    Fail,
    /// The run could not be judged (transport failure, denied turn, …).
    Error,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Pass => "PASS",
            Verdict::Fail => "FAIL",
            Verdict::Error => "ERROR",
        }
    }
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One scorer layer's result.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LayerResult {
    pub passed: bool,
    /// What a person can act on: why it failed, or what was checked.
    pub detail: String,
}

/// The four layers, in reporting order.
pub const LAYERS: [&str; 4] = ["outcome", "trajectory", "constraint", "integrity"];

/// How a run was judged.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Score {
    pub schema_version: u32,
    pub run_id: String,
    pub scenario_id: String,
    pub verdict: Verdict,
    pub outcome: LayerResult,
    pub trajectory: LayerResult,
    pub constraint: LayerResult,
    pub integrity: LayerResult,
    /// Why the run is ERROR, when it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Score {
    /// The layers with their names, in reporting order.
    pub fn layers(&self) -> [(&'static str, &LayerResult); 4] {
        [
            ("outcome", &self.outcome),
            ("trajectory", &self.trajectory),
            ("constraint", &self.constraint),
            ("integrity", &self.integrity),
        ]
    }

    /// Names of the layers that failed.
    pub fn failed_layers(&self) -> Vec<&'static str> {
        self.layers()
            .into_iter()
            .filter(|(_, l)| !l.passed)
            .map(|(n, _)| n)
            .collect()
    }
}

/// Latency over a scenario's turns, in milliseconds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencyStats {
    pub count: u64,
    pub min_ms: u64,
    pub mean_ms: u64,
    pub p50_ms: u64,
    pub p95_ms: u64,
    pub max_ms: u64,
}

/// What a scenario's runs add up to.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AggregateResult {
    pub schema_version: u32,
    pub scenario_id: String,
    pub runs: u32,
    pub passed: u32,
    pub failed: u32,
    pub errored: u32,
    /// Per layer, how many runs failed it.
    pub layer_failures: BTreeMap<String, u32>,
    pub latency: LatencyStats,
    /// Why the scenario could not run at all (provisioning failed, precondition broken).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Is `s` a valid slug (`[a-z0-9_-]+`, at most 64 characters)? Hook names, labels and
/// scenario ids must be; a slug can never contain a dot, which the sidecar rule relies on.
pub fn is_slug(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs() {
        assert!(is_slug("acme_state-probe2"));
        for bad in ["", "a.b", "A", "x y", "é", &"a".repeat(65)] {
            assert!(!is_slug(bad), "{bad:?} accepted");
        }
    }

    #[test]
    fn verdict_serializes_uppercase() {
        assert_eq!(serde_json::to_string(&Verdict::Error).unwrap(), "\"ERROR\"");
    }
}
