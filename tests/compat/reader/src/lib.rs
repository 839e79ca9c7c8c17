//! Reads every context member at every point, as raw JSON and through the typed accessors,
//! and emits both as an artifact labelled by the point (`wt` writes no artifact emitted at
//! a turn point, so the turn points' reports go out with `on_run_end`'s). Written against
//! the SDK 1.0 API only, so that the same source builds against every 1.x SDK. The hook's
//! name is the package's, so one `wt run` can load several builds side by side.

use serde_json::{Map, Value, json};
use windtunnel_sdk::{Context, Hook, Result, TurnCall, TurnResult, export_hooks, hook};

/// Every member the 1.0 SDK can read.
const MEMBERS: [&str; 10] = [
    "scenario",
    "agent",
    "run_id",
    "session_id",
    "trace",
    "score",
    "aggregate",
    "aggregates",
    "turn_call",
    "turn_result",
];

/// The member read through its typed accessor and serialized back; null when the
/// accessor returned `None`.
fn typed(ctx: &Context<'_>, member: &str) -> Value {
    let value = match member {
        "scenario" => ctx.scenario().map(serde_json::to_value),
        "agent" => ctx.agent().map(serde_json::to_value),
        "run_id" => ctx.run_id().map(serde_json::to_value),
        "session_id" => ctx.session_id().map(serde_json::to_value),
        "trace" => ctx.trace().map(serde_json::to_value),
        "score" => ctx.score().map(serde_json::to_value),
        "aggregate" => ctx.aggregate().map(serde_json::to_value),
        "aggregates" => ctx.aggregates().map(serde_json::to_value),
        "turn_call" => ctx.turn_call().map(|v| serde_json::to_value(&v)),
        "turn_result" => ctx.turn_result().map(|v| serde_json::to_value(&v)),
        _ => None,
    };
    match value {
        Some(Ok(v)) => v,
        Some(Err(e)) => json!({"serialize_error": e.to_string()}),
        None => Value::Null,
    }
}

fn read_all(ctx: &Context<'_>, point: &str) -> Value {
    let mut members = Map::new();
    for m in MEMBERS {
        let raw = ctx.raw(m).map(|text| {
            serde_json::from_str::<Value>(&text).unwrap_or(Value::String(text))
        });
        if let Some(raw) = raw {
            members.insert(m.to_owned(), json!({"raw": raw, "typed": typed(ctx, m)}));
        }
    }
    json!({"hook": env!("CARGO_PKG_NAME"), "point": point, "members": members})
}

fn report(ctx: &Context<'_>, point: &str, label: &str) -> Result {
    ctx.emit_artifact(&read_all(ctx, point), Some(label))
}

#[derive(Default)]
pub struct Reader {
    /// Reports made at turn points since the run's last `on_run_end`.
    turns: Vec<Value>,
}

#[hook]
impl Hook for Reader {
    const NAME: &'static str = env!("CARGO_PKG_NAME");

    fn on_provisioned(&mut self, ctx: &Context<'_>) -> Result {
        report(ctx, "on_provisioned", "provisioned")
    }
    fn on_run_start(&mut self, ctx: &Context<'_>) -> Result {
        report(ctx, "on_run_start", "run-start")
    }
    fn on_run_scored(&mut self, ctx: &Context<'_>) -> Result {
        report(ctx, "on_run_scored", "run-scored")
    }
    fn on_run_end(&mut self, ctx: &Context<'_>) -> Result {
        let turns = std::mem::take(&mut self.turns);
        ctx.emit_artifact(&json!({"hook": env!("CARGO_PKG_NAME"), "turns": turns}), Some("turns"))?;
        report(ctx, "on_run_end", "run-end")
    }
    fn on_scenario_end(&mut self, ctx: &Context<'_>) -> Result {
        report(ctx, "on_scenario_end", "scenario-end")
    }
    fn on_pack_end(&mut self, ctx: &Context<'_>) -> Result {
        report(ctx, "on_pack_end", "pack-end")
    }
    fn turn_begin(&mut self, _call: &TurnCall, ctx: &Context<'_>) -> Result {
        self.turns.push(read_all(ctx, "turn_begin"));
        Ok(())
    }
    fn turn_finish(&mut self, _result: &TurnResult, ctx: &Context<'_>) -> Result {
        self.turns.push(read_all(ctx, "turn_finish"));
        Ok(())
    }
}

export_hooks!(Reader);
