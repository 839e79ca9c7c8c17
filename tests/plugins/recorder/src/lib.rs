//! Records every call it gets as one JSON line in the file named by `WT_<NAME>_LOG`
//! (`WT_RECORDER_LOG`, `WT_TAPE_LOG`: each hook reads only its own settings, as an isolated
//! hook must): the hook, the point, which context members were present (of every member the SDK
//! knows), the run id, and whether
//! `converse` was allowed. The library exports the same recorder twice, as `recorder` and
//! `tape`, to test activation order.

use std::io::Write;

use windtunnel_sdk::{Context, Hook, Result, export_hooks, hook, member};

fn record(hook: &str, point: &str, ctx: &Context<'_>) -> Result {
    let present: Vec<&str> = member::ALL
        .iter()
        .copied()
        .filter(|m| ctx.raw(m).is_some())
        .collect();
    let converse = match ctx.converse("recorder probe") {
        Ok(_) => "ok".to_owned(),
        Err(e) => format!("refused: {e}"),
    };
    let line = serde_json::json!({
        "hook": hook,
        "point": point,
        "present": present,
        "run_id": ctx.run_id(),
        "scenario": ctx.scenario().map(|s| s.id.clone()),
        "converse": converse,
    });
    if let Ok(path) = std::env::var(format!("WT_{}_LOG", hook.to_ascii_uppercase())) {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        // One write per line: lanes append to the same log at once.
        f.write_all(format!("{line}\n").as_bytes())?;
    }
    ctx.emit_artifact(
        &line,
        Some(point.trim_start_matches("on_").replace('_', "-").as_str()),
    )
}

macro_rules! recorder {
    ($($ty:ident = $name:literal),+) => {$(
        #[derive(Default)]
        pub struct $ty;

        #[hook]
        impl Hook for $ty {
            const NAME: &'static str = $name;

            fn on_provisioned(&mut self, ctx: &Context<'_>) -> Result {
                record($name, "on_provisioned", ctx)
            }
            fn on_run_start(&mut self, ctx: &Context<'_>) -> Result {
                record($name, "on_run_start", ctx)
            }
            fn on_run_scored(&mut self, ctx: &Context<'_>) -> Result {
                record($name, "on_run_scored", ctx)
            }
            fn on_run_end(&mut self, ctx: &Context<'_>) -> Result {
                record($name, "on_run_end", ctx)
            }
            fn on_scenario_end(&mut self, ctx: &Context<'_>) -> Result {
                record($name, "on_scenario_end", ctx)
            }
            fn on_pack_end(&mut self, ctx: &Context<'_>) -> Result {
                record($name, "on_pack_end", ctx)
            }
        }
    )+};
}

recorder!(Recorder = "recorder", Tape = "tape");

export_hooks!(Recorder, Tape);
