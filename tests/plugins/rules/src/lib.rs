//! `rules_probe`: at the first turn and at `on_run_end` it tries what the point rules allow
//! and refuse — a second artifact of one name, a reserved label, a label that is no slug, an
//! artifact over the cap, an artifact at a turn point, `converse` and `probe_state` where
//! they are not valid, a warning over the cap — and reports each outcome as a warning. The
//! suite runs it through `wt run` and through the SDK's test kit and compares the two.

use serde_json::json;
use windtunnel_sdk::{Context, Hook, Result, TurnCall, TurnResult, export_hooks, hook};

#[derive(Default)]
pub struct RulesProbe;

fn report(ctx: &Context<'_>, case: &str, outcome: Result) {
    match outcome {
        Ok(()) => ctx.warn(format!("{case}: ok")),
        Err(e) => ctx.warn(format!("{case}: {e}")),
    }
}

#[hook]
impl Hook for RulesProbe {
    const NAME: &'static str = "rules_probe";

    fn turn_begin(&mut self, call: &TurnCall, ctx: &Context<'_>) -> Result {
        if call.turn == 0 {
            report(
                ctx,
                "artifact at turn_begin",
                ctx.emit_artifact(&json!({}), None),
            );
            report(
                ctx,
                "probe_state at turn_begin",
                ctx.probe_state().map(drop),
            );
        }
        Ok(())
    }

    fn turn_finish(&mut self, _result: &TurnResult, _ctx: &Context<'_>) -> Result {
        Ok(())
    }

    fn on_run_end(&mut self, ctx: &Context<'_>) -> Result {
        report(
            ctx,
            "first",
            ctx.emit_artifact(&json!({"n": 1}), Some("same")),
        );
        report(
            ctx,
            "same name again",
            ctx.emit_artifact(&json!({"n": 2}), Some("same")),
        );
        report(
            ctx,
            "reserved label",
            ctx.emit_artifact(&json!({}), Some("score")),
        );
        report(
            ctx,
            "label no slug",
            ctx.emit_artifact(&json!({}), Some("No Slug")),
        );
        let big = "x".repeat(20 << 20);
        report(ctx, "20 MB", ctx.emit_artifact(&big, Some("big")));
        report(
            ctx,
            "converse at on_run_end",
            ctx.converse("hello").map(drop),
        );
        ctx.warn("w".repeat(10_000));
        Ok(())
    }
}

export_hooks!(RulesProbe);
