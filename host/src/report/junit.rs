//! The JUnit view of a [`Report`]: a test suite per scenario, a test case per run; FAIL is a
//! failure, ERROR (or a missing score) an error, and each run of a scenario that could not
//! run at all is an errored test case carrying its reason — so JUnit counts the same runs as
//! every other view. Test case names are `<scenario>#<run index>`, with the sweep's short id
//! added where runs of several sweeps (merged shards, reruns) would share a name.
//!
//! The document is streamed: one test case is built at a time (after a scan, each from its
//! run's score read again), so a million runs cost their output, not their memory. It is
//! written byte for byte as quick-junit writes it (its strings cleaned by quick-junit's
//! [`XmlString`], escaped and indented as quick-xml does), and the tests check it against
//! quick-junit's own output.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{self, Write};
use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};

use quick_junit::XmlString;
#[cfg(test)]
use quick_junit::{NonSuccessKind, TestCase, TestCaseStatus, TestSuite};
use windtunnel_model::{TurnRecord, Verdict};

use super::scan::Listing;
use super::{Report, RunRow, ScenarioError};
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

/// What a test case of a run is, as far as its suite's counts go.
fn kind(v: Option<Verdict>) -> Kind {
    match v {
        Some(Verdict::Pass) => Kind::Success,
        Some(Verdict::Fail) => Kind::Failure,
        _ => Kind::Error,
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Success,
    Failure,
    Error,
}

/// A suite's counts, as quick-junit keeps them.
#[derive(Clone, Copy, Default)]
struct Totals {
    tests: usize,
    failures: usize,
    errors: usize,
}

impl Totals {
    fn add(&mut self, k: Kind, n: usize) {
        self.tests += n;
        match k {
            Kind::Success => {}
            Kind::Failure => self.failures += n,
            Kind::Error => self.errors += n,
        }
    }
}

/// The runs a report lists: its rows (runs held in memory, in any order: `wt run --junit` holds them
/// as they ended), or its listing (a scan's, in the report's order), read again one at a time.
enum Source<'a> {
    /// The rows, the order they are written in (by scenario, stably), and how many runs each
    /// scenario and run index has.
    Rows(&'a [RunRow], Vec<usize>, HashMap<(&'a str, u32), usize>),
    Listing(&'a Listing),
}

impl<'a> Source<'a> {
    /// The runs `report` lists: its listing when a scan made it, else its rows, written by
    /// scenario (stably).
    fn of(report: &'a Report) -> Source<'a> {
        match &report.listing {
            Some(l) => Source::Listing(l),
            None => {
                let runs = &report.runs;
                let mut order: Vec<usize> = (0..runs.len()).collect();
                order.sort_by(|&a, &b| runs[a].scenario_id.cmp(&runs[b].scenario_id));
                let mut counts: HashMap<(&str, u32), usize> = HashMap::new();
                for r in runs {
                    *counts.entry((&r.scenario_id, r.run_index)).or_default() += 1;
                }
                Source::Rows(runs, order, counts)
            }
        }
    }

    fn len(&self) -> usize {
        match self {
            Source::Rows(r, ..) => r.len(),
            Source::Listing(l) => l.len(),
        }
    }

    /// Scenario, run index, sweep and kind of the `p`-th run written.
    fn brief(&self, p: usize) -> (&str, u32, &str, Kind) {
        match self {
            Source::Rows(r, order, _) => {
                let r = &r[order[p]];
                (&r.scenario_id, r.run_index, &r.sweep_id, kind(r.verdict))
            }
            Source::Listing(l) => {
                let b = l.brief(p);
                (b.scenario, b.run_index, b.sweep, kind(b.verdict))
            }
        }
    }

    fn row(&self, p: usize) -> Cow<'_, RunRow> {
        match self {
            Source::Rows(r, order, _) => Cow::Borrowed(&r[order[p]]),
            Source::Listing(l) => Cow::Owned(l.row_at(p)),
        }
    }

    /// How many runs have the scenario and run index of the `p`-th (in a listing, the runs of
    /// one scenario and run index are together, from `p` on).
    fn runs_like(&self, p: usize) -> usize {
        let (scenario, k, _, _) = self.brief(p);
        match self {
            Source::Rows(_, _, counts) => counts.get(&(scenario, k)).copied().unwrap_or(0),
            Source::Listing(_) => (p..self.len())
                .take_while(|&q| {
                    let (s, kk, _, _) = self.brief(q);
                    s == scenario && kk == k
                })
                .count(),
        }
    }
}

/// XML written as quick-xml's writer writes it with an indent of four spaces: each element on
/// its own line, except an end tag right after text.
struct Xml<'a> {
    out: &'a mut dyn Write,
    depth: usize,
    line_break: bool,
    /// Bidirectional controls written as visible escapes (as `for_reader` does).
    bidi: bool,
}

impl Xml<'_> {
    fn put(&mut self, s: &str) -> io::Result<()> {
        if self.bidi {
            self.out.write_all(crate::term::escape_bidi(s).as_bytes())
        } else {
            self.out.write_all(s.as_bytes())
        }
    }

    /// `s` escaped as quick-xml's `escape` does (in attributes and in text alike).
    fn escaped(&mut self, s: &str) -> io::Result<()> {
        let mut from = 0;
        for (i, c) in s.char_indices() {
            let e = match c {
                '<' => "&lt;",
                '>' => "&gt;",
                '&' => "&amp;",
                '\'' => "&apos;",
                '"' => "&quot;",
                _ => continue,
            };
            self.put(&s[from..i])?;
            self.put(e)?;
            from = i + 1;
        }
        self.put(&s[from..])
    }

    fn line(&mut self) -> io::Result<()> {
        if self.line_break {
            self.put("\n")?;
            for _ in 0..self.depth {
                self.put("    ")?;
            }
        }
        Ok(())
    }

    fn tag(&mut self, name: &str, attrs: &[(&str, &str)], end: &str) -> io::Result<()> {
        self.line()?;
        self.put("<")?;
        self.put(name)?;
        for (k, v) in attrs {
            self.put(" ")?;
            self.put(k)?;
            self.put("=\"")?;
            self.escaped(v)?;
            self.put("\"")?;
        }
        self.put(end)?;
        self.line_break = true;
        Ok(())
    }

    fn open(&mut self, name: &str, attrs: &[(&str, &str)]) -> io::Result<()> {
        self.tag(name, attrs, ">")?;
        self.depth += 1;
        Ok(())
    }

    fn empty(&mut self, name: &str, attrs: &[(&str, &str)]) -> io::Result<()> {
        self.tag(name, attrs, "/>")
    }

    fn close(&mut self, name: &str) -> io::Result<()> {
        self.depth = self.depth.saturating_sub(1);
        self.line()?;
        self.put("</")?;
        self.put(name)?;
        self.put(">")?;
        self.line_break = true;
        Ok(())
    }

    fn text(&mut self, s: &str) -> io::Result<()> {
        self.escaped(s)?;
        self.line_break = false;
        Ok(())
    }

    /// A test case's failure or error element.
    fn status(&mut self, kind: Kind, message: &str, ty: &str, description: &str) -> io::Result<()> {
        let tag = if kind == Kind::Failure {
            "failure"
        } else {
            "error"
        };
        let (message, ty) = (XmlString::new(message), XmlString::new(ty));
        self.open(tag, &[("message", &message), ("type", &ty)])?;
        self.text(&XmlString::new(description))?;
        self.close(tag)
    }
}

/// Names test cases uniquely, as [`Report::to_junit_reference`] does: `<scenario>#<index>`,
/// with ` @<sweep's first 8 characters>` where several cases share that, and ` (2)`, ` (3)`, …
/// after a name taken already. Names can only meet within one scenario and run index, so
/// only those of the open one are held — and, for a scenario that could not run, those its
/// cases will meet; with a scenario id that could make names of different indexes meet
/// (one that holds a `#`), every name is held.
struct Names {
    used: HashSet<String>,
    global: bool,
}

impl Names {
    /// The names of the cases of `source`'s runs and of `scenario_errors`.
    fn new(source: &Source<'_>, scenario_errors: &[ScenarioError]) -> Names {
        Names {
            used: HashSet::new(),
            // Rows in any order: their names are all held (they are held anyway).
            global: matches!(source, Source::Rows(..))
                || scenario_errors.iter().any(|e| e.scenario_id.contains('#')),
        }
    }

    /// A new scenario and run index: the names of the one before cannot meet its.
    fn start(&mut self) {
        if !self.global {
            self.used.clear();
        }
    }

    /// The names of this run index, to resume it later.
    fn keep(&mut self) -> HashSet<String> {
        if self.global {
            HashSet::new()
        } else {
            std::mem::take(&mut self.used)
        }
    }

    fn resume(&mut self, used: HashSet<String>) {
        if !self.global {
            self.used = used;
        }
    }

    fn unique(&mut self, name: String, shared: bool, sweep: &str) -> String {
        let base = if shared {
            let short: String = sweep.chars().take(8).collect();
            format!("{name} @{short}")
        } else {
            name
        };
        let mut unique = base.clone();
        let mut n = 2;
        while !self.used.insert(unique.clone()) {
            unique = format!("{base} ({n})");
            n += 1;
        }
        unique
    }
}

impl Report {
    pub(crate) fn to_junit(&self) -> String {
        let mut out = Vec::new();
        self.write_junit(&mut out, false)
            .expect("a Vec takes any write");
        String::from_utf8(out).expect("JUnit is UTF-8")
    }

    /// The JUnit document, streamed to `w` (with `bidi`, its bidirectional controls written
    /// as visible escapes, as `for_reader` writes a document).
    pub(crate) fn write_junit(&self, w: &mut dyn Write, bidi: bool) -> io::Result<()> {
        let source = Source::of(self);
        // The counts first: each suite's, and the whole report's.
        let tallies = Tallies::new(&source, &self.scenario_errors);
        let all = tallies.all();
        let mut x = Xml {
            out: w,
            depth: 0,
            line_break: false,
            bidi,
        };
        x.put("<?xml version=\"1.0\" encoding=\"UTF-8\"?>")?;
        x.line_break = true;
        x.open(
            "testsuites",
            &[
                ("name", "wt"),
                ("tests", &all.tests.to_string()),
                ("failures", &all.failures.to_string()),
                ("errors", &all.errors.to_string()),
            ],
        )?;
        let mut cases = Cases {
            names: Names::new(&source, &self.scenario_errors),
            source: &source,
            tallies: &tallies,
            scenario_errors: &self.scenario_errors,
            next: 0,
            x,
        };
        for (scenario, t) in &tallies.suites {
            cases.suite(scenario, t)?;
        }
        let mut x = cases.x;
        x.close("testsuites")?;
        x.line_break = true;
        x.line()
    }
}

/// Each suite's counts, and per scenario the run counts of its scenario errors.
struct Tallies<'s> {
    /// By scenario, the order the suites are written in.
    suites: BTreeMap<&'s str, Totals>,
    /// Per scenario, the scenario errors' run counts (sorted), to count the cases they add
    /// to each run index.
    errors: BTreeMap<&'s str, Vec<u32>>,
}

impl<'s> Tallies<'s> {
    /// The counts of `source`'s runs and of the cases `scenario_errors` add.
    fn new(source: &'s Source<'_>, scenario_errors: &'s [ScenarioError]) -> Tallies<'s> {
        let mut suites: BTreeMap<&str, Totals> = BTreeMap::new();
        for p in 0..source.len() {
            let (scenario, _, _, k) = source.brief(p);
            match suites.get_mut(scenario) {
                Some(t) => t.add(k, 1),
                None => suites.entry(scenario).or_default().add(k, 1),
            }
        }
        let mut errors: BTreeMap<&str, Vec<u32>> = BTreeMap::new();
        for e in scenario_errors {
            suites
                .entry(&e.scenario_id)
                .or_default()
                .add(Kind::Error, e.runs as usize);
            errors.entry(&e.scenario_id).or_default().push(e.runs);
        }
        for v in errors.values_mut() {
            v.sort_unstable();
        }
        Tallies { suites, errors }
    }

    /// The whole document's counts.
    fn all(&self) -> Totals {
        self.suites.values().fold(Totals::default(), |mut a, t| {
            a.tests += t.tests;
            a.failures += t.failures;
            a.errors += t.errors;
            a
        })
    }

    /// How many cases the scenario's scenario errors add to its run index `k`.
    fn error_cases(&self, scenario: &str, k: u32) -> usize {
        self.errors
            .get(scenario)
            .map_or(0, |v| v.len() - v.partition_point(|&n| n <= k))
    }
}

/// Per run index of a scenario that a scenario error's cases share: its run cases, and the
/// names they took.
type Pending = HashMap<u32, (usize, HashSet<String>)>;

/// The document's test cases, written one suite at a time: where the runs come from, the
/// counts, the names taken, the next run to write and the XML they go to.
struct Cases<'s, 'w> {
    source: &'s Source<'s>,
    tallies: &'s Tallies<'s>,
    scenario_errors: &'s [ScenarioError],
    names: Names,
    /// The place in `source` of the next run written.
    next: usize,
    x: Xml<'w>,
}

impl Cases<'_, '_> {
    /// A scenario's suite, `t` its counts: its runs' cases, then its scenario errors'.
    fn suite(&mut self, scenario: &str, t: &Totals) -> io::Result<()> {
        let suite = XmlString::new(scenario);
        self.x.open(
            "testsuite",
            &[
                ("name", &suite),
                ("tests", &t.tests.to_string()),
                ("disabled", "0"),
                ("errors", &t.errors.to_string()),
                ("failures", &t.failures.to_string()),
            ],
        )?;
        let mut pending = self.run_cases(scenario)?;
        self.error_cases(scenario, &mut pending)?;
        self.x.close("testsuite")
    }

    /// The cases of the scenario's runs, the next ones of the source; what the scenario's
    /// errors' cases will share of them, by run index.
    fn run_cases(&mut self, scenario: &str) -> io::Result<Pending> {
        let source = self.source;
        let mut pending = Pending::new();
        let mut group: Option<(u32, usize)> = None;
        while self.next < source.len() && source.brief(self.next).0 == scenario {
            let (_, k, sweep, _) = source.brief(self.next);
            let rows = match group {
                Some((kk, rows)) if kk == k => rows,
                _ => {
                    self.keep(scenario, group, &mut pending);
                    self.names.start();
                    let rows = source.runs_like(self.next);
                    group = Some((k, rows));
                    rows
                }
            };
            let shared = rows + self.tallies.error_cases(scenario, k) > 1;
            let name = self.names.unique(format!("{scenario}#{k}"), shared, sweep);
            self.x.run_case(&source.row(self.next), &name, scenario)?;
            self.next += 1;
        }
        self.keep(scenario, group, &mut pending);
        Ok(pending)
    }

    /// Keeps the run cases and names of `group` (a run index and its runs) in `pending`, when
    /// a scenario error's cases will share its index.
    fn keep(&mut self, scenario: &str, group: Option<(u32, usize)>, pending: &mut Pending) {
        if let Some((k, rows)) = group
            && self.tallies.error_cases(scenario, k) > 0
        {
            pending.insert(k, (rows, self.names.keep()));
        }
    }

    /// The cases of the scenario's errors, one per run that never ran, each named among the
    /// cases of its run index.
    fn error_cases(&mut self, scenario: &str, pending: &mut Pending) -> io::Result<()> {
        let errors = self.scenario_errors;
        for e in errors.iter().filter(|e| e.scenario_id == scenario) {
            for k in 0..e.runs {
                let (rows, used) = pending.remove(&k).unwrap_or_else(|| {
                    let rows = match self.source {
                        Source::Rows(_, _, counts) => {
                            counts.get(&(scenario, k)).copied().unwrap_or(0)
                        }
                        Source::Listing(_) => 0,
                    };
                    (rows, HashSet::new())
                });
                self.names.resume(used);
                let shared = rows + self.tallies.error_cases(scenario, k) > 1;
                let name = self
                    .names
                    .unique(format!("{scenario}#{k}"), shared, &e.sweep_id);
                self.x.error_case(&name, scenario, e)?;
                pending.insert(k, (rows, self.names.keep()));
            }
        }
        Ok(())
    }
}

impl Xml<'_> {
    /// A run's test case.
    fn run_case(&mut self, row: &RunRow, name: &str, scenario: &str) -> io::Result<()> {
        let time = format!(
            "{:.3}",
            std::time::Duration::from_millis(row.latency_ms).as_secs_f64()
        );
        self.open(
            "testcase",
            &[
                ("name", &XmlString::new(name)),
                ("classname", &XmlString::new(scenario)),
                ("time", &time),
            ],
        )?;
        self.open("properties", &[])?;
        self.empty(
            "property",
            &[("name", "run_id"), ("value", &XmlString::new(&row.run_id))],
        )?;
        self.empty(
            "property",
            &[("name", "trace"), ("value", &XmlString::new(&row.trace))],
        )?;
        self.close("properties")?;
        let kind = kind(row.verdict);
        if kind != Kind::Success {
            let (message, description) = failure_text(row);
            let ty = row.verdict.map_or("UNSCORED", Verdict::as_str);
            self.status(kind, &message, ty, &description)?;
        }
        self.close("testcase")
    }

    /// The errored test case of a run that never ran: its scenario could not run (`e`).
    fn error_case(&mut self, name: &str, scenario: &str, e: &ScenarioError) -> io::Result<()> {
        self.open(
            "testcase",
            &[
                ("name", &XmlString::new(name)),
                ("classname", &XmlString::new(scenario)),
            ],
        )?;
        self.status(Kind::Error, &e.error, "ERROR", &never_ran(e))?;
        self.close("testcase")
    }
}

/// A run's failure message (its error, or the layers it failed) and description (each failed
/// layer's detail, a line each).
fn failure_text(row: &RunRow) -> (String, String) {
    let layers: Vec<&str> = row.failures.iter().map(|(l, _)| l.as_str()).collect();
    let message = match &row.error {
        Some(e) => e.clone(),
        None => format!("failed layers: {}", layers.join(", ")),
    };
    let detail: Vec<String> = row
        .failures
        .iter()
        .map(|(l, d)| format!("{l}: {d}"))
        .collect();
    (message, detail.join("\n"))
}

/// The description of a case of a scenario that could not run.
fn never_ran(e: &ScenarioError) -> String {
    format!(
        "the scenario could not run: its {} run(s) in sweep {} never ran",
        e.runs, e.sweep_id
    )
}

#[cfg(test)]
impl Report {
    /// The JUnit document as quick-junit writes it, holding every test case: the reference the
    /// streamed writer is checked against, byte for byte.
    pub(crate) fn to_junit_reference(&self) -> String {
        let mut report = quick_junit::Report::new("wt");
        // (scenario, name, sweep, case) for every run, then names made unique.
        let mut cases: Vec<(String, String, String, TestCase)> =
            self.all_rows().map(|r| reference_run_case(&r)).collect();
        for e in &self.scenario_errors {
            for k in 0..e.runs {
                let mut s = TestCaseStatus::non_success(NonSuccessKind::Error);
                s.set_message(e.error.clone());
                s.set_type("ERROR");
                s.set_description(never_ran(e));
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

/// A run's test case as quick-junit builds it, with its scenario, its name before it is made
/// unique, and its sweep.
#[cfg(test)]
fn reference_run_case(r: &RunRow) -> (String, String, String, TestCase) {
    let status = match r.verdict {
        Some(Verdict::Pass) => TestCaseStatus::success(),
        v => {
            let kind = if v == Some(Verdict::Fail) {
                NonSuccessKind::Failure
            } else {
                NonSuccessKind::Error
            };
            let mut s = TestCaseStatus::non_success(kind);
            let (message, description) = failure_text(r);
            s.set_message(message);
            s.set_type(v.map_or("UNSCORED", Verdict::as_str));
            s.set_description(description);
            s
        }
    };
    let mut case = TestCase::new(String::new(), status);
    case.set_classname(r.scenario_id.clone());
    case.set_time(std::time::Duration::from_millis(r.latency_ms));
    case.add_property(quick_junit::Property::new("run_id", r.run_id.clone()));
    case.add_property(quick_junit::Property::new("trace", r.trace.clone()));
    (
        r.scenario_id.clone(),
        format!("{}#{}", r.scenario_id, r.run_index),
        r.sweep_id.clone(),
        case,
    )
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
        let report = Report::from_sweep(&runs, errors);
        let junit = report.to_junit();
        assert_eq!(junit, report.to_junit_reference());
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
