//! The JUnit view of a [`Report`]: a test suite per scenario, a test case per run; FAIL is a
//! failure, ERROR (or a missing score) an error, and each run of a scenario that could not
//! run at all is an errored test case carrying its reason — so JUnit counts the same runs as
//! every other view. Test case names are `<scenario>#<run index>`, with the sweep's short id
//! added where runs of several sweeps (merged shards, reruns) would share a name.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};

use quick_junit::{NonSuccessKind, TestCase, TestCaseStatus, TestSuite};
use windtunnel_sdk::model::{TurnRecord, Verdict};

use super::{Report, ScenarioError};
use crate::events::{Emitted, Event, Sink};
use crate::store::StoredRun;

/// The JUnit aggregator of `wt run --junit`: a sink of the sweep's event stream that keeps
/// this sweep's own runs, slimmed to what a report row needs (the texts stay on disk), and
/// the scenarios it could not run. Nothing else in the runs directory counts.
#[derive(Default)]
pub(crate) struct SweepRuns {
    seen: Mutex<(Vec<StoredRun>, Vec<ScenarioError>)>,
}

impl SweepRuns {
    /// The report over what the stream delivered so far.
    pub(crate) fn report(&self) -> Report {
        let seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        Report::from_sweep(&seen.0, seen.1.clone())
    }
}

impl Sink for SweepRuns {
    fn event(&self, e: &Emitted<'_>) {
        match (e.event, e.run) {
            (Event::RunEnded { stem }, Some(run)) => {
                let mut slim = run.trace.clone();
                for t in &mut slim.turns {
                    let (index, latency_ms) = (t.index, t.latency_ms);
                    *t = TurnRecord::default();
                    t.index = index;
                    t.latency_ms = latency_ms;
                }
                slim.surface = Default::default();
                slim.evidence = Default::default();
                slim.world = None;
                slim.worker_warnings = Vec::new();
                slim.hooks = None;
                let path = PathBuf::from(format!("{stem}.json"));
                let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
                seen.0.push((slim, Some(run.score.clone()), path));
            }
            (
                Event::ScenarioEnded {
                    runs,
                    error: Some(error),
                    ..
                },
                _,
            ) => {
                let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
                seen.1.push(ScenarioError {
                    sweep_id: e.sweep_id.to_owned(),
                    scenario_id: e.scope.scenario_id.clone().unwrap_or_default(),
                    runs: *runs,
                    error: error.clone(),
                });
            }
            _ => {}
        }
    }
}

impl Report {
    pub(crate) fn to_junit(&self) -> String {
        let mut report = quick_junit::Report::new("wt");
        // (scenario, name, sweep, case) for every run, then names made unique.
        let mut cases: Vec<(String, String, String, TestCase)> = Vec::new();
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
            let mut case = TestCase::new(String::new(), status);
            case.set_classname(r.scenario_id.clone());
            case.set_time(std::time::Duration::from_millis(r.latency_ms));
            case.add_property(quick_junit::Property::new("run_id", r.run_id.clone()));
            case.add_property(quick_junit::Property::new("trace", r.trace.clone()));
            cases.push((
                r.scenario_id.clone(),
                format!("{}#{}", r.scenario_id, r.run_index),
                r.sweep_id.clone(),
                case,
            ));
        }
        for e in &self.scenario_errors {
            for k in 0..e.runs {
                let mut s = TestCaseStatus::non_success(NonSuccessKind::Error);
                s.set_message(e.error.clone());
                s.set_type("ERROR");
                s.set_description(format!(
                    "the scenario could not run: its {} run(s) in sweep {} never ran",
                    e.runs, e.sweep_id
                ));
                let mut case = TestCase::new(String::new(), s);
                case.set_classname(e.scenario_id.clone());
                cases.push((
                    e.scenario_id.clone(),
                    format!("{}#{k}", e.scenario_id),
                    e.sweep_id.clone(),
                    case,
                ));
            }
        }
        let mut seen: BTreeMap<String, usize> = BTreeMap::new();
        for (_, name, _, _) in &cases {
            *seen.entry(name.clone()).or_default() += 1;
        }
        let mut used = std::collections::HashSet::new();
        let mut suites: BTreeMap<String, TestSuite> = BTreeMap::new();
        for (scenario, name, sweep, mut case) in cases {
            let base = if seen[&name] > 1 {
                let short: String = sweep.chars().take(8).collect();
                format!("{name} @{short}")
            } else {
                name
            };
            let mut unique = base.clone();
            let mut n = 2;
            while !used.insert(unique.clone()) {
                unique = format!("{base} ({n})");
                n += 1;
            }
            case.name = unique.into();
            suites
                .entry(scenario.clone())
                .or_insert_with(|| TestSuite::new(scenario))
                .add_test_case(case);
        }
        report.add_test_suites(suites.into_values());
        report.to_string().expect("JUnit serializes")
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::run;
    use super::*;

    #[test]
    fn failures_and_errors() {
        let runs = vec![
            run("b", 0, Verdict::Pass),
            run("a", 1, Verdict::Error),
            run("a", 0, Verdict::Fail),
        ];
        let junit = Report::from_runs(&runs).to_junit();
        assert_eq!(junit.matches("<testcase").count(), 3);
        assert!(
            junit.contains("<failure") && junit.contains("<error"),
            "{junit}"
        );
    }

    #[test]
    fn every_run_is_a_test_case_once_with_a_unique_name() {
        // Two sweeps' runs of one scenario, merged, and a scenario that could not run.
        let mut runs = vec![run("a", 0, Verdict::Pass), run("a", 1, Verdict::Pass)];
        for (i, mut r) in [run("a", 0, Verdict::Fail), run("a", 1, Verdict::Pass)]
            .into_iter()
            .enumerate()
        {
            r.0.sweep_id = "sweep-two".into();
            r.0.run_id = format!("other-{i}");
            runs.push(r);
        }
        let errors = vec![ScenarioError {
            sweep_id: "sweep-one".into(),
            scenario_id: "b".into(),
            runs: 3,
            error: "provisioning failed".into(),
        }];
        let junit = Report::from_sweep(&runs, errors).to_junit();
        assert_eq!(junit.matches("<testcase").count(), 7, "{junit}");
        assert_eq!(junit.matches("<error").count(), 3, "{junit}");
        let names: Vec<&str> = junit
            .split("name=\"")
            .skip(1)
            .map(|s| &s[..s.find('"').unwrap()])
            .filter(|n| n.contains('#'))
            .collect();
        let unique: std::collections::HashSet<&&str> = names.iter().collect();
        assert_eq!(unique.len(), names.len(), "{names:?}");
        assert!(names.contains(&"a#0 @sweep-tw"), "{names:?}");
        assert!(names.contains(&"b#2"), "{names:?}");
    }
}
