//! [`StateProbeHook`]: continuous isolation checks. Implement [`StateProbe::probe`] — how
//! to read the agent's state — and the base does the rest: the first run's post-reset
//! state (or a baseline file) is the clean baseline, and every later post-reset state that
//! differs from it is reported as a warning plus a bounded violation artifact
//! (`<stem>.<name>.violation.json`) that says where the baseline came from. It never gates;
//! `wt doctor` is the hard gate.
//!
//! Knobs (for a probe named `acme_state_probe`):
//! - `WT_ACME_STATE_PROBE_BASELINE=FILE`: take the baseline from FILE (for example one
//!   written by `wt doctor --write-baseline FILE`) instead of the first run.
//!
//! ```
//! use serde_json::{Value, json};
//! use windtunnel_sdk::{Context, Result, StateProbe, StateProbeHook};
//!
//! /// Reads the agent's state through its runtime's state probe.
//! #[derive(Default)]
//! pub struct MemoryProbe;
//!
//! impl StateProbe for MemoryProbe {
//!     const NAME: &'static str = "memory_probe";
//!     fn probe(&mut self, ctx: &Context<'_>) -> Result<Value> {
//!         ctx.probe_state()
//!     }
//! }
//!
//! // In the plugin crate: windtunnel_sdk::export_hooks!(StateProbeHook<MemoryProbe>);
//! # use windtunnel_sdk::testing::{HookTester, TestContext};
//! let mut hook = HookTester::<StateProbeHook<MemoryProbe>>::new();
//! let clean = TestContext::new().run_id("run-1").probe_state(json!({"memory": []}));
//! hook.on_run_start(&clean).unwrap(); // the baseline
//! let leaky = TestContext::new().run_id("run-2").probe_state(json!({"memory": ["order 1234"]}));
//! hook.on_run_start(&leaky).unwrap();
//! assert!(leaky.warnings()[0].starts_with("state after reset differs from the baseline (run run-1)"));
//! let violation = &leaky.artifacts()[0];
//! assert_eq!(violation.label.as_deref(), Some("violation"));
//! assert_eq!(violation.payload["diff"][0]["path"], "/memory/0");
//! ```

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::hook::{Context, Error, Hook, Result};

/// Kind of the violation artifact.
pub const VIOLATION_KIND: &str = "wt.state-probe.violation";
/// Schema version of the violation artifact.
pub const VIOLATION_SCHEMA_VERSION: u32 = 1;
/// Kind of a baseline file.
pub const BASELINE_KIND: &str = "wt.state-baseline";

/// At most this many differing paths are listed in a violation artifact.
pub const MAX_DIFFS: usize = 20;
/// Values in a violation artifact are cut to this many characters.
pub const MAX_VALUE_CHARS: usize = 200;

/// How to read the agent's state. The only thing a state-probe author writes.
pub trait StateProbe: Default + Send + 'static {
    /// The hook's name (a slug).
    const NAME: &'static str;
    /// The agent's state right now, as JSON. Called after every reset.
    fn probe(&mut self, ctx: &Context<'_>) -> Result<Value>;
}

/// A baseline file: `{"kind": "wt.state-baseline", "state": …, …}`; any other JSON document
/// is taken as the state itself.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[non_exhaustive]
pub struct BaselineFile {
    /// [`BASELINE_KIND`].
    pub kind: String,
    /// Version of this format (1).
    pub schema_version: u32,
    /// The agent the baseline was taken from.
    #[serde(default)]
    pub agent: Option<String>,
    /// What wrote it (`wt doctor`).
    #[serde(default)]
    pub written_by: Option<String>,
    /// The agent's state.
    pub state: Value,
}

/// Where the baseline came from.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "from", rename_all = "snake_case")]
#[non_exhaustive]
pub enum BaselineSource {
    /// The post-reset state of the first run of this invocation.
    Run {
        /// That run.
        run_id: String,
        /// Its scenario.
        scenario_id: String,
    },
    /// A baseline file.
    File {
        /// Its path.
        path: String,
    },
}

/// One difference between the baseline and the observed state.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct Difference {
    /// A JSON pointer (`/memory/0`).
    pub path: String,
    /// The baseline's value there, cut to [`MAX_VALUE_CHARS`]; `None` when absent.
    pub baseline: Option<String>,
    /// The observed value there, cut likewise; `None` when absent.
    pub observed: Option<String>,
}

/// The violation artifact (`<stem>.<name>.violation.json`).
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct Violation {
    /// [`VIOLATION_KIND`].
    pub kind: &'static str,
    /// [`VIOLATION_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// The run whose post-reset state differed.
    pub run_id: Option<String>,
    /// Its scenario.
    pub scenario_id: Option<String>,
    /// Where the baseline came from.
    pub baseline: BaselineSource,
    /// How many paths differ in all.
    pub differences: usize,
    /// The first [`MAX_DIFFS`] of them, values cut to [`MAX_VALUE_CHARS`].
    pub diff: Vec<Difference>,
    /// Whether `diff` was cut to [`MAX_DIFFS`].
    pub truncated: bool,
    /// Violations so far in this invocation, this one included.
    pub violations_so_far: u32,
}

/// The [`Hook`] built around a [`StateProbe`]: export `StateProbeHook<YourProbe>`. It
/// declares `on_run_start` (probe and compare) and `on_run_end` (remember what the run left
/// behind, so a violation can say whether the leak matches it).
#[derive(Default)]
pub struct StateProbeHook<P> {
    probe: P,
    baseline: Option<(Value, BaselineSource)>,
    violations: u32,
    /// The state the previous run left behind (probed at `on_run_end`), kept so a violation
    /// can say whether the leak matches it.
    last_end_state: Option<(Value, String)>,
}

impl<P: StateProbe> StateProbeHook<P> {
    fn baseline_env() -> String {
        format!(
            "WT_{}_BASELINE",
            P::NAME.to_ascii_uppercase().replace('-', "_")
        )
    }

    fn load_baseline(path: &str) -> Result<Value> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::msg(format!("cannot read baseline file {path}: {e}")))?;
        let doc: Value = serde_json::from_str(&text)
            .map_err(|e| Error::msg(format!("baseline file {path} is not JSON: {e}")))?;
        Ok(match serde_json::from_value::<BaselineFile>(doc.clone()) {
            Ok(file) if file.kind == BASELINE_KIND => file.state,
            _ => doc,
        })
    }
}

#[crate::hook]
impl<P: StateProbe> Hook for StateProbeHook<P> {
    const NAME: &'static str = P::NAME;

    fn on_run_start(&mut self, ctx: &Context<'_>) -> Result {
        let observed = self.probe.probe(ctx)?;
        let Some((baseline, source)) = &self.baseline else {
            let baseline = match std::env::var(Self::baseline_env()) {
                Ok(path) if !path.is_empty() => {
                    (Self::load_baseline(&path)?, BaselineSource::File { path })
                }
                _ => (
                    observed.clone(),
                    BaselineSource::Run {
                        run_id: ctx.run_id().unwrap_or_default(),
                        scenario_id: ctx.scenario().map(|s| s.id.clone()).unwrap_or_default(),
                    },
                ),
            };
            self.baseline = Some(baseline);
            // With a file baseline, the first run is checked like every other.
            if matches!(self.baseline, Some((_, BaselineSource::File { .. }))) {
                return self.on_run_start_check(ctx, observed);
            }
            return Ok(());
        };
        let _ = (baseline, source);
        self.on_run_start_check(ctx, observed)
    }

    fn on_run_end(&mut self, ctx: &Context<'_>) -> Result {
        // Best effort: a failed probe here only costs the hint in the next violation.
        if let Ok(state) = self.probe.probe(ctx) {
            self.last_end_state = Some((state, ctx.run_id().unwrap_or_default()));
        }
        Ok(())
    }
}

impl<P: StateProbe> StateProbeHook<P> {
    fn on_run_start_check(&mut self, ctx: &Context<'_>, observed: Value) -> Result {
        let Some((baseline, source)) = &self.baseline else {
            return Ok(());
        };
        let mut diffs = Vec::new();
        diff("", baseline, &observed, &mut diffs);
        if diffs.is_empty() {
            return Ok(());
        }
        self.violations += 1;
        let total = diffs.len();
        let from = match source {
            BaselineSource::Run { run_id, .. } => format!("run {run_id}"),
            BaselineSource::File { path } => format!("file {path}"),
        };
        let leaked_from = self
            .last_end_state
            .as_ref()
            .filter(|(end, _)| *end == observed)
            .map(|(_, run)| format!("; it equals what run {run} left behind"))
            .unwrap_or_default();
        ctx.warn(format_args!(
            "state after reset differs from the baseline ({from}) at {total} path(s), first {}{leaked_from}",
            diffs[0].path
        ));
        let truncated = total > MAX_DIFFS;
        diffs.truncate(MAX_DIFFS);
        let violation = Violation {
            kind: VIOLATION_KIND,
            schema_version: VIOLATION_SCHEMA_VERSION,
            run_id: ctx.run_id(),
            scenario_id: ctx.scenario().map(|s| s.id.clone()),
            baseline: source.clone(),
            differences: total,
            diff: diffs,
            truncated,
            violations_so_far: self.violations,
        };
        ctx.emit_artifact(&violation, Some("violation"))
    }
}

fn cut(v: &Value) -> String {
    let text = v.to_string();
    if text.chars().count() <= MAX_VALUE_CHARS {
        text
    } else {
        let mut s: String = text.chars().take(MAX_VALUE_CHARS).collect();
        s.push('…');
        s
    }
}

/// Collects the JSON pointers where `a` and `b` differ (at most a few more than
/// [`MAX_DIFFS`] are kept in detail; the count is exact).
fn diff(path: &str, a: &Value, b: &Value, out: &mut Vec<Difference>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: BTreeMap<&String, ()> = x.keys().chain(y.keys()).map(|k| (k, ())).collect();
            for k in keys.keys() {
                let p = format!("{path}/{}", k.replace('~', "~0").replace('/', "~1"));
                match (x.get(*k), y.get(*k)) {
                    (Some(va), Some(vb)) => diff(&p, va, vb, out),
                    (va, vb) => out.push(Difference {
                        path: p,
                        baseline: va.map(cut),
                        observed: vb.map(cut),
                    }),
                }
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            for i in 0..x.len().max(y.len()) {
                let p = format!("{path}/{i}");
                match (x.get(i), y.get(i)) {
                    (Some(va), Some(vb)) => diff(&p, va, vb, out),
                    (va, vb) => out.push(Difference {
                        path: p,
                        baseline: va.map(cut),
                        observed: vb.map(cut),
                    }),
                }
            }
        }
        _ if a == b => {}
        _ => out.push(Difference {
            path: if path.is_empty() {
                "/".into()
            } else {
                path.into()
            },
            baseline: Some(cut(a)),
            observed: Some(cut(b)),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn diff_lists_changed_added_and_removed_paths() {
        let mut out = Vec::new();
        diff(
            "",
            &json!({"memory": [], "n": 1, "gone": true}),
            &json!({"memory": ["order 1234"], "n": 2}),
            &mut out,
        );
        let paths: Vec<&str> = out.iter().map(|d| d.path.as_str()).collect();
        assert_eq!(paths, ["/gone", "/memory/0", "/n"]);
        assert_eq!(out[1].observed.as_deref(), Some("\"order 1234\""));
        assert_eq!(out[1].baseline, None);
    }

    #[test]
    fn values_are_bounded() {
        let long = Value::String("x".repeat(5000));
        assert_eq!(cut(&long).chars().count(), MAX_VALUE_CHARS + 1);
    }
}
