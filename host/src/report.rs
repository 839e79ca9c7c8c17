//! Reports over stored runs: a per-scenario summary (k/n, per-layer failures, latency) and
//! the failing runs with each layer's detail, rendered as a table, JSON, JUnit or Markdown.
//! Input always comes from [`crate::store::load_runs`], so hook artifacts and other sidecars
//! are never counted.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;
use windtunnel_sdk::model::{AggregateResult, LAYERS, SCHEMA_VERSION, Verdict};

use crate::score::Aggregator;
use crate::store::StoredRun;

/// One run in a report.
#[derive(Clone, Debug, Serialize)]
pub struct RunRow {
    pub scenario_id: String,
    pub run_index: u32,
    pub run_id: String,
    pub sweep_id: String,
    pub agent: String,
    /// `None` when the score sidecar is missing.
    pub verdict: Option<Verdict>,
    /// Failed layers and their details, in reporting order.
    pub failures: Vec<(String, String)>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The trace file (displayed; paths that are not UTF-8 are shown lossily).
    pub trace: String,
    pub latency_ms: u64,
}

/// A report: scenarios in id order, runs in scenario then run order.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub schema_version: u32,
    pub scenarios: Vec<AggregateResult>,
    pub runs: Vec<RunRow>,
}

impl Report {
    pub fn from_runs(runs: &[StoredRun]) -> Report {
        let mut aggs: BTreeMap<&str, Aggregator> = BTreeMap::new();
        let mut rows = Vec::new();
        for (trace, score, path) in runs {
            aggs.entry(&trace.scenario_id)
                .or_insert_with(|| Aggregator::new(&trace.scenario_id))
                .add(trace, score.as_ref());
            let failures = score
                .as_ref()
                .map(|s| {
                    s.layers()
                        .into_iter()
                        .filter(|(_, l)| !l.passed)
                        .map(|(n, l)| (n.to_owned(), l.detail.clone()))
                        .collect()
                })
                .unwrap_or_default();
            rows.push(RunRow {
                scenario_id: trace.scenario_id.clone(),
                run_index: trace.run_index,
                run_id: trace.run_id.clone(),
                sweep_id: trace.sweep_id.clone(),
                agent: trace.agent.label.clone(),
                verdict: score.as_ref().map(|s| s.verdict),
                failures,
                error: match score {
                    Some(s) => s.error.clone(),
                    None => Some("no score sidecar (run `wt rescore` to score it)".into()),
                },
                trace: path.display().to_string(),
                latency_ms: trace.turns.iter().map(|t| t.latency_ms).sum(),
            });
        }
        rows.sort_by(|a, b| {
            (&a.scenario_id, a.run_index, &a.sweep_id, &a.trace).cmp(&(
                &b.scenario_id,
                b.run_index,
                &b.sweep_id,
                &b.trace,
            ))
        });
        Report {
            schema_version: SCHEMA_VERSION,
            scenarios: aggs.into_values().map(Aggregator::finish).collect(),
            runs: rows,
        }
    }

    /// The exit code these results imply (as `wt run` would end).
    pub fn exit_code(&self) -> u8 {
        crate::runner::exit_code(&self.scenarios)
    }

    pub fn totals(&self) -> (u32, u32, u32, u32) {
        self.scenarios.iter().fold((0, 0, 0, 0), |t, a| {
            (
                t.0 + a.runs,
                t.1 + a.passed,
                t.2 + a.failed,
                t.3 + a.errored,
            )
        })
    }

    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).expect("report serializes");
        s.push('\n');
        s
    }

    /// The human table: one line per scenario, then every failing run with its reasons.
    pub fn to_table(&self) -> String {
        let mut out = String::new();
        let width = self
            .scenarios
            .iter()
            .map(|a| a.scenario_id.len())
            .max()
            .unwrap_or(8)
            .max(8);
        let _ = writeln!(
            out,
            "{:<width$}  {:>7}  {:>4}  {:>5}  {:>7}  FAILING LAYERS",
            "SCENARIO", "PASSED", "FAIL", "ERROR", "P50 MS"
        );
        for a in &self.scenarios {
            let _ = writeln!(
                out,
                "{:<width$}  {:>7}  {:>4}  {:>5}  {:>7}  {}",
                a.scenario_id,
                format!("{}/{}", a.passed, a.runs),
                a.failed,
                a.errored,
                a.latency.p50_ms,
                failing_layers(a)
            );
        }
        let (runs, passed, failed, errored) = self.totals();
        let _ = writeln!(
            out,
            "\n{passed}/{runs} runs passed, {failed} failed, {errored} could not be judged (ERROR)"
        );
        let bad: Vec<&RunRow> = self
            .runs
            .iter()
            .filter(|r| r.verdict != Some(Verdict::Pass))
            .collect();
        if !bad.is_empty() {
            out.push('\n');
        }
        for r in bad {
            let verdict = r.verdict.map_or("UNSCORED", Verdict::as_str);
            let _ = writeln!(
                out,
                "{verdict} {} #{} ({})",
                r.scenario_id, r.run_index, r.trace
            );
            if let Some(e) = &r.error {
                let _ = writeln!(out, "    error: {e}");
            }
            for (layer, detail) in &r.failures {
                let _ = writeln!(out, "    {layer}: {detail}");
            }
        }
        out
    }

    pub fn to_markdown(&self) -> String {
        let mut out = String::from(
            "| Scenario | Passed | Failed | Error | p50 ms | Failing layers |\n|---|---:|---:|---:|---:|---|\n",
        );
        for a in &self.scenarios {
            let _ = writeln!(
                out,
                "| `{}` | {}/{} | {} | {} | {} | {} |",
                a.scenario_id,
                a.passed,
                a.runs,
                a.failed,
                a.errored,
                a.latency.p50_ms,
                md(&failing_layers(a))
            );
        }
        let bad: Vec<&RunRow> = self
            .runs
            .iter()
            .filter(|r| r.verdict != Some(Verdict::Pass))
            .collect();
        if !bad.is_empty() {
            out.push_str(
                "\n### Runs that did not pass\n\n| Run | Verdict | Why |\n|---|---|---|\n",
            );
            for r in bad {
                let mut why: Vec<String> = r.error.iter().map(|e| format!("error: {e}")).collect();
                why.extend(r.failures.iter().map(|(l, d)| format!("{l}: {d}")));
                let _ = writeln!(
                    out,
                    "| `{}` #{} | {} | {} |",
                    r.scenario_id,
                    r.run_index,
                    r.verdict.map_or("UNSCORED", Verdict::as_str),
                    md(&why.join("<br>"))
                );
            }
        }
        out
    }

    /// JUnit XML: a test suite per scenario, a test case per run; FAIL is a failure, ERROR
    /// (or a missing score) an error.
    pub fn to_junit(&self) -> String {
        use quick_junit::{NonSuccessKind, TestCase, TestCaseStatus, TestSuite};
        let mut report = quick_junit::Report::new("wt");
        let mut suites: BTreeMap<&str, TestSuite> = BTreeMap::new();
        for r in &self.runs {
            let status = match r.verdict {
                Some(Verdict::Pass) => TestCaseStatus::success(),
                v => {
                    let kind = if v == Some(Verdict::Fail) {
                        NonSuccessKind::Failure
                    } else {
                        NonSuccessKind::Error
                    };
                    let mut s = TestCaseStatus::non_success(kind);
                    let layers: Vec<&str> = r.failures.iter().map(|(l, _)| l.as_str()).collect();
                    let message = match &r.error {
                        Some(e) => e.clone(),
                        None => format!("failed layers: {}", layers.join(", ")),
                    };
                    s.set_message(message);
                    s.set_type(v.map_or("UNSCORED", Verdict::as_str));
                    let detail: Vec<String> = r
                        .failures
                        .iter()
                        .map(|(l, d)| format!("{l}: {d}"))
                        .collect();
                    s.set_description(detail.join("\n"));
                    s
                }
            };
            let mut case = TestCase::new(format!("{}#{}", r.scenario_id, r.run_index), status);
            case.set_classname(r.scenario_id.clone());
            case.set_time(std::time::Duration::from_millis(r.latency_ms));
            case.add_property(quick_junit::Property::new("run_id", r.run_id.clone()));
            case.add_property(quick_junit::Property::new("trace", r.trace.clone()));
            suites
                .entry(&r.scenario_id)
                .or_insert_with(|| TestSuite::new(r.scenario_id.clone()))
                .add_test_case(case);
        }
        report.add_test_suites(suites.into_values());
        report.to_string().expect("JUnit serializes")
    }
}

fn failing_layers(a: &AggregateResult) -> String {
    let mut parts: Vec<String> = LAYERS
        .iter()
        .filter_map(|l| a.layer_failures.get(*l).filter(|n| **n > 0).map(|n| (l, n)))
        .map(|(l, n)| format!("{l} ({n})"))
        .collect();
    if let Some(e) = &a.error {
        parts.push(format!("scenario error: {e}"));
    }
    if parts.is_empty() {
        "-".to_owned()
    } else {
        parts.join(", ")
    }
}

fn md(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use windtunnel_sdk::model::{LayerResult, Score, Trace};

    fn run(scenario: &str, index: u32, verdict: Verdict) -> StoredRun {
        let layer = |passed: bool, detail: &str| LayerResult {
            passed,
            detail: detail.into(),
        };
        let trace = Trace {
            scenario_id: scenario.into(),
            run_index: index,
            run_id: format!("run-{scenario}-{index}"),
            ..Trace::default()
        };
        let failing = verdict != Verdict::Pass;
        let score = Score {
            schema_version: SCHEMA_VERSION,
            run_id: trace.run_id.clone(),
            scenario_id: scenario.into(),
            verdict,
            outcome: layer(true, "ok"),
            trajectory: layer(true, "ok"),
            constraint: layer(!failing, "forbidden tool `x` called"),
            integrity: layer(verdict != Verdict::Error, "turn 0: timed out"),
            error: (verdict == Verdict::Error).then(|| "turn 0: timed out".into()),
        };
        (
            trace,
            Some(score),
            PathBuf::from(format!("{scenario}_{index}.json")),
        )
    }

    #[test]
    fn renders_every_format() {
        let runs = vec![
            run("b", 0, Verdict::Pass),
            run("a", 1, Verdict::Error),
            run("a", 0, Verdict::Fail),
        ];
        let r = Report::from_runs(&runs);
        assert_eq!(r.scenarios[0].scenario_id, "a");
        assert_eq!(r.runs[0].run_index, 0);
        assert_eq!(r.exit_code(), crate::exit::RUN_ERROR);
        let table = r.to_table();
        assert!(
            table.contains("1/3 runs passed, 1 failed, 1 could not be judged"),
            "{table}"
        );
        assert!(
            table.contains("    constraint: forbidden tool `x` called"),
            "{table}"
        );
        assert!(table.contains("    error: turn 0: timed out"), "{table}");
        let junit = r.to_junit();
        assert_eq!(junit.matches("<testcase").count(), 3);
        assert!(
            junit.contains("<failure") && junit.contains("<error"),
            "{junit}"
        );
        assert!(r.to_markdown().contains("| `a` | 0/2 | 1 | 1 |"));
        let json: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
        assert_eq!(json["runs"].as_array().unwrap().len(), 3);
    }
}
