//! What the reader reads of each run: the trace's [`Projection`], the [`Digest`] it keeps of
//! it (what the index holds of the trace, docs/reports.md "The index"), and the [`Facts`]
//! `wt view` lists of it.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::Path;

use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};
use windtunnel_model::{HookProvenance, Score, Verdict};

use crate::report::load::{self, MAX_TRACE_BYTES};
use crate::report::triage::{self, Rung};

/// The layers a run is judged on, in the order of [`Score::layers`] (bit `i` of
/// [`Facts::layers`] is the `i`-th).
pub(crate) const LAYERS: [&str; 4] = ["outcome", "trajectory", "constraint", "integrity"];

/// What `wt view` shows of a run in its list, and filters and sorts by, read with the run.
/// Found again for a listed run by [`Listing::identity`].
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Facts {
    /// As [`Listing::identity`] gives it.
    pub identity: u64,
    /// The hash of the run id (a page's address names the run by its id).
    pub run_id_hash: u64,
    /// Failed layers: bit `i` for the `i`-th of [`Score::layers`].
    pub layers: u8,
    /// The triage rung of a run that did not pass, as [`triage::rung`] places it.
    pub rung: Option<Rung>,
    pub turns: u32,
    pub tool_calls: u32,
    pub model_calls: u32,
    /// Warnings the run's hooks gave (`hook:<name>: …` among its worker warnings).
    pub hook_warnings: u32,
    pub tokens: u64,
    pub cost_usd: Option<f64>,
    /// What evaluating the run cost (simulated user, judges): tokens and dollars.
    pub eval_tokens: u64,
    pub eval_cost_usd: Option<f64>,
    /// Where its index line is, when the run was counted from one.
    pub line: Option<LinePlace>,
}

/// Where a run's index line is: the index (its place in [`super::Scan::indexes`]) and the
/// line's first byte in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LinePlace {
    pub index: u32,
    pub offset: u64,
}

/// What a report reads of a trace: the fields of [`windtunnel_model::Trace`] it counts,
/// shows or orders by. The other fields every trace has must be there (a JSON file without
/// them is not a `wt` trace) but are skipped unread, as is anything else.
#[derive(Deserialize)]
pub(crate) struct Projection {
    pub schema_version: u32,
    pub run_id: String,
    pub sweep_id: String,
    pub scenario_id: String,
    pub run_index: u32,
    #[serde(rename = "session_id")]
    pub(super) _session_id: IgnoredAny,
    pub agent: AgentLabel,
    pub started_at: String,
    pub ended_at: String,
    #[serde(rename = "surface")]
    pub(super) _surface: IgnoredAny,
    pub turns: Vec<TurnLatency>,
    pub(super) evidence: ToolEvidence,
    #[serde(default)]
    pub(super) denial: Option<IgnoredAny>,
    #[serde(default)]
    pub hooks: Option<Vec<HookProvenance>>,
    #[serde(default)]
    pub pack: Option<String>,
    #[serde(default)]
    pub shard: Option<String>,
    #[serde(default)]
    pub scenario_digest: Option<String>,
    #[serde(default)]
    pub(super) worker_warnings: Vec<String>,
    #[serde(default)]
    pub attempts: Option<u32>,
}

#[derive(Deserialize)]
pub(crate) struct AgentLabel {
    pub label: String,
    #[serde(default)]
    pub model: Option<String>,
}

#[derive(Deserialize)]
pub(crate) struct TurnLatency {
    pub latency_ms: u64,
    #[serde(default)]
    pub(super) error: Option<IgnoredAny>,
}

#[derive(Deserialize)]
pub(super) struct ToolEvidence {
    pub(super) tool_calls: Vec<ToolError>,
    #[serde(default)]
    pub(super) model_calls: Vec<IgnoredAny>,
}

#[derive(Deserialize)]
pub(super) struct ToolError {
    #[serde(default)]
    pub(super) error: Option<IgnoredAny>,
}

/// What the reader keeps of a trace to count, order and list its run: the [`Projection`]
/// with its lists reduced to what is counted of them. The index holds one per run, beside its
/// score, so a run read from the index is counted exactly as one read from its files.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct Digest {
    pub schema_version: u32,
    pub run_id: String,
    pub sweep_id: String,
    pub scenario_id: String,
    pub run_index: u32,
    pub agent: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    pub started_at: String,
    pub ended_at: String,
    /// Each turn's latency, and whether the turn ended with an error.
    pub turns: Vec<(u64, bool)>,
    pub tool_calls: u32,
    /// Whether a tool call came back with an error (the harness rung of triage).
    pub tool_errors: bool,
    pub model_calls: u32,
    /// Whether a guard denied a turn.
    pub denied: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hooks: Option<Vec<HookProvenance>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pack: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scenario_digest: Option<String>,
    /// Warnings the run's hooks gave (`hook:<name>: …` among its worker warnings).
    pub hook_warnings: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempts: Option<u32>,
}

impl From<Projection> for Digest {
    fn from(t: Projection) -> Self {
        let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        Digest {
            schema_version: t.schema_version,
            tool_calls: count(t.evidence.tool_calls.len()),
            tool_errors: t.evidence.tool_calls.iter().any(|c| c.error.is_some()),
            model_calls: count(t.evidence.model_calls.len()),
            denied: t.denial.is_some(),
            hook_warnings: count(
                t.worker_warnings
                    .iter()
                    .filter(|w| w.starts_with("hook:"))
                    .count(),
            ),
            turns: t
                .turns
                .iter()
                .map(|turn| (turn.latency_ms, turn.error.is_some()))
                .collect(),
            run_id: t.run_id,
            sweep_id: t.sweep_id,
            scenario_id: t.scenario_id,
            run_index: t.run_index,
            agent: t.agent.label,
            model: t.agent.model,
            started_at: t.started_at,
            ended_at: t.ended_at,
            hooks: t.hooks,
            pack: t.pack,
            shard: t.shard,
            scenario_digest: t.scenario_digest,
            attempts: t.attempts,
        }
    }
}

/// The hash of a run id, as [`Facts::run_id_hash`] holds it.
pub(crate) fn hash_run_id(run_id: &str) -> u64 {
    hash64(&run_id)
}

pub(super) fn hash64(x: &impl Hash) -> u64 {
    // Fixed keys: the same hash in every process.
    let mut h = DefaultHasher::new();
    x.hash(&mut h);
    h.finish()
}

/// The hash of what makes a trace the run it is: its run id, qualified by sweep, agent and
/// start time (pinned sweeps of different agents reuse run ids).
pub(super) fn identity(t: &Digest) -> u64 {
    hash64(&(&t.run_id, &t.sweep_id, &t.agent, &t.started_at))
}

/// What `wt view` lists of a run (its trace `t` and its score).
pub(super) fn facts(
    t: &Digest,
    score: Option<&Score>,
    run_id_hash: u64,
    line: Option<LinePlace>,
) -> Facts {
    let usage = score.and_then(|s| s.usage.as_ref());
    let eval = score.and_then(|s| s.eval_usage.as_ref());
    let tokens = |u: &windtunnel_model::RunUsage| {
        u.tokens
            .prompt_tokens
            .saturating_add(u.tokens.completion_tokens)
    };
    Facts {
        identity: identity(t),
        run_id_hash,
        layers: score.map_or(0, |s| {
            s.layers()
                .iter()
                .enumerate()
                .filter(|(_, (_, l))| !l.passed)
                .fold(0, |bits, (i, _)| bits | 1 << i)
        }),
        rung: match score {
            Some(s) if s.verdict == Verdict::Pass => None,
            Some(s) => Some(triage::rung(s, t.denied, t.tool_errors)),
            None => Some(Rung::Harness),
        },
        turns: u32::try_from(t.turns.len()).unwrap_or(u32::MAX),
        tool_calls: t.tool_calls,
        model_calls: t.model_calls,
        hook_warnings: t.hook_warnings,
        tokens: usage.map_or(0, tokens),
        cost_usd: usage.and_then(|u| u.cost_usd),
        eval_tokens: eval.map_or(0, tokens),
        eval_cost_usd: eval.and_then(|u| u.cost_usd),
        line,
    }
}

pub(super) fn read_projection(path: &Path) -> Result<Digest, String> {
    let bytes = load::read_bounded(path, MAX_TRACE_BYTES).map_err(|e| e.to_string())?;
    serde_json::from_slice::<Projection>(&bytes)
        .map(Digest::from)
        .map_err(|e| format!("not a wt trace ({e})"))
}

/// A run's turn latencies summed (as its row shows them).
pub(super) fn latency(t: &Digest) -> u64 {
    t.turns
        .iter()
        .fold(0u64, |n, &(latency, _)| n.saturating_add(latency))
}

/// The turn latencies a scenario's aggregate counts (turns that ended without an error).
pub(super) fn counted_latencies(t: &Digest) -> impl Iterator<Item = u64> + '_ {
    t.turns
        .iter()
        .filter(|&&(_, error)| !error)
        .map(|&(latency, _)| latency)
}
