//! `debrief`: after a run is scored, and while its session is still alive, hand the agent
//! its verdict and record its self-report. It reports; it never gates.
//!
//! Knobs: `WT_DEBRIEF_ON=all` debriefs passing runs too (default: failing runs only).

use serde::Serialize;
use windtunnel_sdk::{
    Context, Hook, Result, hook,
    model::{Score, Trace},
};

/// Version of the debrief artifact schema.
pub(crate) const SCHEMA_VERSION: u32 = 2;

#[derive(Default)]
pub(crate) struct Debrief;

/// The `<stem>.debrief.json` artifact, field for field as design 0003 specifies.
#[derive(Debug, Serialize)]
pub(crate) struct DebriefArtifact {
    pub schema_version: u32,
    pub run_id: String,
    pub scenario_id: String,
    pub agent: String,
    pub model: Option<String>,
    pub verdict: String,
    pub failed_layers: Vec<String>,
    pub reasons: serde_json::Map<String, serde_json::Value>,
    pub prompt: String,
    pub reply: Option<String>,
    pub tools_disabled: bool,
    pub timed_out: bool,
    pub duration_ms: u64,
    pub error: Option<String>,
}

#[hook]
impl Hook for Debrief {
    const NAME: &'static str = "debrief";

    fn on_run_scored(&mut self, ctx: &Context<'_>) -> Result {
        let (Some(trace), Some(score)) = (ctx.trace(), ctx.score()) else {
            return Err(windtunnel_sdk::Error::msg(
                "no trace or score in context at on_run_scored",
            ));
        };
        let all = std::env::var("WT_DEBRIEF_ON").is_ok_and(|v| v.eq_ignore_ascii_case("all"));
        let failed = score.failed_layers();
        if failed.is_empty() && !all {
            return Ok(());
        }
        let prompt = prompt(score);
        // Reads 0 under a pinned clock (`WT_FIXED_CLOCK`), as every duration `wt` records.
        let watch = crate::clock::Clock::from_env()
            .unwrap_or(crate::clock::Clock::System)
            .stopwatch();
        let (reply, error) = match ctx.converse(&prompt) {
            Ok(reply) => (Some(reply), None),
            Err(e) => (None, Some(e.to_string())),
        };
        let artifact = artifact(trace, score, prompt, reply, error, watch.elapsed());
        ctx.emit_artifact(&artifact, None)
    }
}

fn artifact(
    trace: &Trace,
    score: &Score,
    prompt: String,
    reply: Option<String>,
    error: Option<String>,
    took: std::time::Duration,
) -> DebriefArtifact {
    DebriefArtifact {
        schema_version: SCHEMA_VERSION,
        run_id: trace.run_id.clone(),
        scenario_id: trace.scenario_id.clone(),
        agent: trace.agent.label.clone(),
        model: trace.agent.model.clone(),
        verdict: score.verdict.to_string(),
        failed_layers: score
            .failed_layers()
            .into_iter()
            .map(str::to_owned)
            .collect(),
        reasons: score
            .layers()
            .into_iter()
            .map(|(name, layer)| (name.to_owned(), layer.detail.clone().into()))
            .collect(),
        prompt,
        reply,
        // Stamped again by the host from what actually happened in `converse`.
        tools_disabled: false,
        timed_out: false,
        duration_ms: u64::try_from(took.as_millis()).unwrap_or(u64::MAX),
        error,
    }
}

/// The debrief turn. The order is deliberate: environment evidence the agent can quote
/// first (the reliable part of a self-report), then blockers, and only then what it would
/// change, so a truncated reply still holds the part worth having.
pub(crate) fn prompt(score: &Score) -> String {
    let mut text = format!(
        "This run has been scored. Verdict: {}.\nWhat each check found:\n",
        score.verdict
    );
    for (name, layer) in score.layers() {
        let status = if layer.passed { "passed" } else { "FAILED" };
        text.push_str(&format!("- {name} ({status}): {}\n", layer.detail));
    }
    if let Some(err) = &score.error {
        text.push_str(&format!("- run error: {err}\n"));
    }
    text.push_str(
        "\nPlease answer in this order:\n\
         1. Environment first: did any tool call return an error, an unexpected shape, or report a missing capability? Quote the exact text you received.\n\
         2. Blockers: was anything you needed absent from the environment?\n\
         3. Only then: what would you do differently?\n",
    );
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use windtunnel_model::{LayerResult, Verdict};

    fn layer(passed: bool, detail: &str) -> LayerResult {
        if passed {
            LayerResult::pass(detail)
        } else {
            LayerResult::fail(detail)
        }
    }

    #[test]
    fn prompt_asks_environment_first_and_quotes_each_layer() {
        let mut score = Score::new("r", "s", Verdict::Fail);
        score.outcome = layer(false, "reply lacks `refund issued`");
        score.trajectory = layer(true, "ok");
        score.constraint = layer(false, "called forbidden tool `delete_order`");
        score.integrity = layer(true, "ok");
        let p = prompt(&score);
        assert!(p.contains("Verdict: FAIL"));
        assert!(p.contains("constraint (FAILED): called forbidden tool `delete_order`"));
        let env = p.find("Environment first").unwrap();
        let blockers = p.find("Blockers").unwrap();
        let differently = p.find("what would you do differently").unwrap();
        assert!(env < blockers && blockers < differently);
    }
}
