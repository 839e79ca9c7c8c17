//! How far a judge can be trusted: its gradings of runs a person labelled, compared with the
//! labels. Per judge check (a scenario's check, graded by one judge identity): how many
//! labelled runs it graded, how often it agreed, Cohen's kappa (agreement beyond chance), the
//! confusion matrix, and the rates at which it passes what a person passed and fails what a
//! person failed, each with a 95 % Wilson interval.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

use serde::{Deserialize, Serialize};
use windtunnel_model::{JudgeGrade, JudgeVerdict};

use super::stats;

/// One person's label of one judge check of one run (a line of the labels file).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Label {
    /// The run: its `run_id`, or its trace file's stem (`<timestamp>_<run_id[:8]>`, as `wt
    /// view` and the file names show it): both name the same run.
    pub run_id: String,
    /// The check's index in the scenario's `[[expect.judge]]`.
    #[serde(default)]
    pub check: u32,
    /// `pass` or `fail`.
    pub label: String,
}

/// The most labels a file may hold.
const MAX_LABELS: usize = 1_000_000;

/// Reads a labels file (JSON Lines): each line one [`Label`]; blank lines are skipped. A
/// line that does not read is an error naming its line; the same (run, check) labelled
/// twice is too.
pub(crate) fn read_labels(path: &Path) -> Result<Vec<Label>, String> {
    let text = crate::limits::read_input_file(path, true)
        .map_err(|e| format!("read {}: {e}", path.display()))?;
    let mut labels = Vec::new();
    let mut seen = BTreeSet::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let at = || format!("{}:{}", path.display(), i + 1);
        let l: Label = serde_json::from_str(line).map_err(|e| format!("{}: {e}", at()))?;
        if l.label != "pass" && l.label != "fail" {
            return Err(format!(
                "{}: `label` must be \"pass\" or \"fail\", not {:?}",
                at(),
                l.label
            ));
        }
        if !seen.insert((l.run_id.clone(), l.check)) {
            return Err(format!(
                "{}: run {} check {} is labelled twice",
                at(),
                l.run_id,
                l.check
            ));
        }
        labels.push(l);
        if labels.len() > MAX_LABELS {
            return Err(format!("{}: more than {MAX_LABELS} labels", path.display()));
        }
    }
    if labels.is_empty() {
        return Err(format!("{}: no labels", path.display()));
    }
    Ok(labels)
}

/// A grading of a stored run, as calibration reads it.
pub(crate) struct Graded<'a> {
    pub run_id: &'a str,
    /// The stem of the run's trace file.
    pub stem: &'a str,
    pub scenario_id: &'a str,
    pub grade: &'a JudgeGrade,
}

/// Counts of (judge, person) pairs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub(crate) struct Confusion {
    /// The judge passed what the person passed.
    pub pass_pass: u64,
    /// The judge passed what the person failed.
    pub pass_fail: u64,
    /// The judge failed what the person passed.
    pub fail_pass: u64,
    /// The judge failed what the person failed.
    pub fail_fail: u64,
}

/// A rate with its 95 % Wilson interval.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub(crate) struct Rate {
    pub value: f64,
    pub of: u64,
    pub wilson95: [f64; 2],
}

fn rate(hits: u64, of: u64) -> Option<Rate> {
    let (lo, hi) = stats::wilson(hits, of, super::REPORT_ALPHA)?;
    Some(Rate {
        value: hits as f64 / of as f64,
        of,
        wilson95: [lo, hi],
    })
}

/// One judge check's calibration.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct CheckCalibration {
    pub scenario_id: String,
    pub check: u32,
    pub model: String,
    /// The judge's identity (its model's settings, the rubric, what it sees).
    pub judge: String,
    /// Labelled runs it graded.
    pub n: u64,
    /// The share of them on which it agreed with the person.
    pub agreement: f64,
    /// Cohen's kappa; absent when chance agreement is total (every label and grading the
    /// same), where kappa is undefined.
    pub kappa: Option<f64>,
    pub confusion: Confusion,
    /// Of the runs the person passed, the share the judge passed.
    pub true_pass_rate: Option<Rate>,
    /// Of the runs the person failed, the share the judge failed.
    pub true_fail_rate: Option<Rate>,
}

/// Every judge check's calibration, and what could not be used.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Calibration {
    pub checks: Vec<CheckCalibration>,
    /// Labels of runs (or checks) that have no grading in the directories read.
    pub unmatched: Vec<String>,
    /// Labelled gradings left out because the judge failed on them (no verdict).
    pub judge_errors: u64,
}

impl CheckCalibration {
    fn new(scenario_id: &str, g: &JudgeGrade, c: Confusion) -> CheckCalibration {
        let n = c.pass_pass + c.pass_fail + c.fail_pass + c.fail_fail;
        let nf = n as f64;
        let agree = (c.pass_pass + c.fail_fail) as f64 / nf;
        // Chance agreement: both say pass, or both say fail, independently.
        let judge_pass = (c.pass_pass + c.pass_fail) as f64 / nf;
        let person_pass = (c.pass_pass + c.fail_pass) as f64 / nf;
        let chance = judge_pass * person_pass + (1.0 - judge_pass) * (1.0 - person_pass);
        let kappa = (chance < 1.0).then(|| (agree - chance) / (1.0 - chance));
        CheckCalibration {
            scenario_id: scenario_id.to_owned(),
            check: g.check,
            model: g.model.clone(),
            judge: g.judge.clone(),
            n,
            agreement: agree,
            kappa,
            true_pass_rate: rate(c.pass_pass, c.pass_pass + c.fail_pass),
            true_fail_rate: rate(c.fail_fail, c.fail_fail + c.pass_fail),
            confusion: c,
        }
    }
}

/// Compares `labels` with the `graded` runs' gradings. A label names its run by id or by
/// stem; each (run, check) is counted once, however many labels name it. A label that counts
/// for nothing is in `unmatched`, with why.
pub(crate) fn calibrate<'a>(
    labels: &[Label],
    graded: impl IntoIterator<Item = Graded<'a>>,
) -> Calibration {
    let wanted: HashMap<(&str, u32), usize> = labels
        .iter()
        .enumerate()
        .map(|(i, l)| ((l.run_id.as_str(), l.check), i))
        .collect();
    // Which label counted, and why each other one did not.
    let mut used: BTreeSet<usize> = BTreeSet::new();
    let mut why: HashMap<usize, &'static str> = HashMap::new();
    let mut runs_seen: BTreeSet<String> = BTreeSet::new();
    // (scenario, check, judge) → a grading of it (for its model) and the counts.
    let mut groups: BTreeMap<(String, u32, String), (JudgeGrade, Confusion)> = BTreeMap::new();
    let mut judge_errors = 0;
    for g in graded {
        runs_seen.insert(g.run_id.to_owned());
        runs_seen.insert(g.stem.to_owned());
        let by_id = wanted.get(&(g.run_id, g.grade.check)).copied();
        let by_stem = wanted.get(&(g.stem, g.grade.check)).copied();
        let Some(at) = by_id.or(by_stem) else {
            continue;
        };
        if let (Some(a), Some(b)) = (by_id, by_stem)
            && a != b
        {
            why.insert(b, "another label names the same run by its id");
        }
        used.insert(at);
        let Some(verdict) = g.grade.verdict.filter(|v| *v != JudgeVerdict::Unknown) else {
            judge_errors += 1;
            continue;
        };
        let key = (
            g.scenario_id.to_owned(),
            g.grade.check,
            g.grade.judge.clone(),
        );
        let (_, c) = groups
            .entry(key)
            .or_insert_with(|| (g.grade.clone(), Confusion::default()));
        match (verdict == JudgeVerdict::Pass, labels[at].label == "pass") {
            (true, true) => c.pass_pass += 1,
            (true, false) => c.pass_fail += 1,
            (false, true) => c.fail_pass += 1,
            (false, false) => c.fail_fail += 1,
        }
    }
    let unmatched = labels
        .iter()
        .enumerate()
        .filter(|(i, _)| !used.contains(i))
        .map(|(i, l)| {
            let why = why
                .get(&i)
                .copied()
                .unwrap_or(if runs_seen.contains(&l.run_id) {
                    "the run has no grading of that check"
                } else {
                    "no run read has that id or trace file stem"
                });
            format!("run {} check {}: {why}", l.run_id, l.check)
        })
        .collect();
    Calibration {
        checks: groups
            .into_iter()
            .map(|((scenario, _, _), (g, c))| CheckCalibration::new(&scenario, &g, c))
            .collect(),
        unmatched,
        judge_errors,
    }
}

impl Calibration {
    /// The terminal view: one block per judge check.
    pub(crate) fn to_table(&self) -> String {
        use std::fmt::Write as _;
        let mut out = String::new();
        let pct = |r: &Option<Rate>| match r {
            Some(r) => format!(
                "{:.0}% of {} (95% CI {:.0}–{:.0}%)",
                r.value * 100.0,
                r.of,
                r.wilson95[0] * 100.0,
                r.wilson95[1] * 100.0
            ),
            None => "- (no such label)".to_owned(),
        };
        for c in &self.checks {
            let _ = writeln!(
                out,
                "{} check {} (model `{}`, judge {}):",
                c.scenario_id,
                c.check,
                c.model,
                &c.judge[..c.judge.len().min(19)]
            );
            let kappa = c
                .kappa
                .map_or("undefined (one class only)".to_owned(), |k| {
                    format!("{k:.3}")
                });
            let _ = writeln!(
                out,
                "  n {}  agreement {:.1}%  kappa {kappa}",
                c.n,
                c.agreement * 100.0
            );
            let m = &c.confusion;
            let _ = writeln!(out, "                 person pass  person fail");
            let _ = writeln!(
                out,
                "    judge pass   {:>11}  {:>11}",
                m.pass_pass, m.pass_fail
            );
            let _ = writeln!(
                out,
                "    judge fail   {:>11}  {:>11}",
                m.fail_pass, m.fail_fail
            );
            let _ = writeln!(out, "  true-pass rate {}", pct(&c.true_pass_rate));
            let _ = writeln!(out, "  true-fail rate {}", pct(&c.true_fail_rate));
        }
        if self.judge_errors > 0 {
            let _ = writeln!(
                out,
                "{} labelled grading(s) left out: the judge failed on them",
                self.judge_errors
            );
        }
        if !self.unmatched.is_empty() {
            let shown: Vec<&str> = self.unmatched.iter().take(5).map(String::as_str).collect();
            let _ = writeln!(
                out,
                "{} label(s) match no grading in the directories read: {}{}",
                self.unmatched.len(),
                shown.join(", "),
                if self.unmatched.len() > 5 {
                    ", …"
                } else {
                    ""
                }
            );
        }
        out
    }
}

/// The judges a calibration file (as `wt judge calibrate --format json` writes it) covers.
pub(crate) fn judges_in_file(path: &Path) -> Result<BTreeSet<String>, String> {
    let text = crate::limits::read_input_file(path, true)
        .map_err(|e| format!("read {}: {e}", path.display()))?;
    #[derive(Deserialize)]
    struct File {
        checks: Vec<Check>,
    }
    #[derive(Deserialize)]
    struct Check {
        judge: String,
    }
    let f: File = serde_json::from_str(&text).map_err(|e| {
        format!(
            "{}: not a calibration (wt judge calibrate --format json): {e}",
            path.display()
        )
    })?;
    Ok(f.checks.into_iter().map(|c| c.judge).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grade(check: u32, verdict: Option<&str>) -> JudgeGrade {
        let verdict = verdict.map(|v| match v {
            "pass" => JudgeVerdict::Pass,
            _ => JudgeVerdict::Fail,
        });
        let mut g = JudgeGrade::default();
        g.check = check;
        g.model = "grader".into();
        g.judge = "sha256:j".into();
        g.verdict = verdict;
        g
    }

    #[test]
    fn kappa_and_rates_are_the_hand_computed_ones() {
        // 20 runs: judge pass/person pass 8, pass/fail 2, fail/pass 1, fail/fail 9.
        let mut labels = Vec::new();
        let mut grades = Vec::new();
        let cells = [
            (8, "pass", "pass"),
            (2, "pass", "fail"),
            (1, "fail", "pass"),
            (9, "fail", "fail"),
        ];
        for (n, judge, person) in cells {
            for _ in 0..n {
                let id = format!("r{}", labels.len());
                labels.push(Label {
                    run_id: id.clone(),
                    check: 0,
                    label: person.into(),
                });
                grades.push((id, grade(0, Some(judge))));
            }
        }
        // One label for a run the judge failed on, one for a run that is not there.
        labels.push(Label {
            run_id: "err".into(),
            check: 0,
            label: "pass".into(),
        });
        grades.push(("err".into(), grade(0, None)));
        labels.push(Label {
            run_id: "gone".into(),
            check: 0,
            label: "fail".into(),
        });
        let c = calibrate(
            &labels,
            grades.iter().map(|(id, g)| Graded {
                run_id: id,
                stem: "stem",
                scenario_id: "s",
                grade: g,
            }),
        );
        assert_eq!(c.checks.len(), 1);
        let k = &c.checks[0];
        assert_eq!(k.n, 20);
        assert_eq!(
            k.confusion,
            Confusion {
                pass_pass: 8,
                pass_fail: 2,
                fail_pass: 1,
                fail_fail: 9
            }
        );
        // po = 17/20 = 0.85; pe = (10/20)(9/20) + (10/20)(11/20) = 0.5; kappa = 0.35/0.5.
        assert!((k.agreement - 0.85).abs() < 1e-12);
        assert!((k.kappa.unwrap() - 0.7).abs() < 1e-12, "{:?}", k.kappa);
        let tp = k.true_pass_rate.unwrap();
        assert!((tp.value - 8.0 / 9.0).abs() < 1e-12 && tp.of == 9);
        assert!(tp.wilson95[0] < tp.value && tp.value < tp.wilson95[1]);
        let tf = k.true_fail_rate.unwrap();
        assert!((tf.value - 9.0 / 11.0).abs() < 1e-12 && tf.of == 11);
        assert_eq!(c.judge_errors, 1);
        assert_eq!(
            c.unmatched,
            vec!["run gone check 0: no run read has that id or trace file stem".to_owned()]
        );
        let table = c.to_table();
        assert!(
            table.contains("n 20  agreement 85.0%  kappa 0.700"),
            "{table}"
        );
    }

    #[test]
    fn kappa_is_undefined_when_every_answer_is_the_same() {
        let labels = vec![Label {
            run_id: "a".into(),
            check: 0,
            label: "pass".into(),
        }];
        let g = grade(0, Some("pass"));
        let c = calibrate(
            &labels,
            [Graded {
                run_id: "a",
                stem: "20261207T000000Z_a",
                scenario_id: "s",
                grade: &g,
            }],
        );
        assert_eq!(c.checks[0].kappa, None);
        assert!(c.checks[0].true_fail_rate.is_none());
    }

    #[test]
    fn a_label_names_its_run_by_id_or_stem_and_counts_once() {
        let label = |run: &str, check: u32| Label {
            run_id: run.into(),
            check,
            label: "pass".into(),
        };
        let g = grade(0, Some("pass"));
        let graded = || {
            [
                Graded {
                    run_id: "id-a",
                    stem: "T_a",
                    scenario_id: "s",
                    grade: &g,
                },
                Graded {
                    run_id: "id-b",
                    stem: "T_b",
                    scenario_id: "s",
                    grade: &g,
                },
            ]
        };
        let labels = vec![
            label("T_a", 0),
            label("id-b", 0),
            label("T_b", 0),
            label("id-a", 3),
            label("T_zz", 0),
        ];
        let c = calibrate(&labels, graded());
        assert_eq!(c.checks[0].n, 2, "{:?}", c.checks[0]);
        assert_eq!(
            c.unmatched,
            vec![
                "run T_b check 0: another label names the same run by its id".to_owned(),
                "run id-a check 3: the run has no grading of that check".to_owned(),
                "run T_zz check 0: no run read has that id or trace file stem".to_owned(),
            ]
        );
    }
}
