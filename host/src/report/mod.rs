//! The reading side: what stored runs add up to, and the views of it.
//!
//! - [`scan`] is the one reader of runs directories: it applies the reading side's rules
//!   ([`load`]: sidecar rule, dedupe by `run_id`, foreign files skipped with a warning,
//!   bounded reads, journals), counts as it reads and holds a key per run; the views that
//!   judge runs whole (`wt triage`, `wt rescore`, the page's details) have each run read
//!   again whole by its key.
//! - [`Report`] is the one summary model: per scenario k/n with a Wilson interval, pass^k
//!   and pass@k, per-layer failures and latency; the pack's totals; the sweeps and whether
//!   they ended; the gate code.
//! - Views of it: [`table`] (and Markdown), [`junit`], [`html`], and JSON (the model
//!   serialized). [`compare`] builds the comparison of two such models.
//!
//! Nothing here writes into a runs directory.

pub(crate) mod calibration;
pub(crate) mod cells;
pub(crate) mod compare;
internal_mod!(gate);
pub(crate) mod html;
pub(crate) mod junit;
pub(crate) mod load;
pub(crate) mod plan;
pub(crate) mod scan;
internal_mod!(stats);
pub(crate) mod table;
pub(crate) mod triage;

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde::Serialize;
use windtunnel_model::{AggregateResult, RunUsage, SCHEMA_VERSION, Score, Trace, Verdict};

use crate::score::Aggregator;
use crate::store::{StoreError, StoredRun};
pub(crate) use junit::SweepRuns;
pub use load::{LoadedRun, ScenarioError, Sweep, SweepStatus, UnreadRun};

/// Every run in `dirs`, whole, as the one reader ([`scan`]) finds them: sidecar rule,
/// foreign and oversized files skipped, runs deduplicated by `run_id`, ordered by scenario
/// and run index. Skipped files are logged at `warn` level; commands that show them to the
/// user read the runs themselves.
pub fn load_runs<P: AsRef<Path>>(dirs: &[P]) -> Result<Vec<StoredRun>, StoreError> {
    let want = scan::Want {
        listing: true,
        ..scan::Want::default()
    };
    let read = scan::scan(dirs, want)?;
    for w in &read.found.warnings {
        tracing::warn!("{w}");
    }
    let Some(listing) = &read.listing else {
        return Ok(Vec::new());
    };
    let mut runs = Vec::with_capacity(listing.len());
    for run in listing.whole_runs() {
        match run {
            Ok(r) => runs.push((r.trace, r.score, r.path)),
            Err(w) => tracing::warn!("{w}"),
        }
    }
    Ok(runs)
}

/// Per scenario, the failure reasons of its runs — (layer, detail normalized as triage
/// normalizes it) → runs — as `wt compare` tells which appeared and disappeared.
pub(crate) type Reasons = BTreeMap<String, BTreeMap<(String, String), u32>>;

/// How many of a scenario's runs that did not pass the table and Markdown views list; the
/// rest are counted in one line (the JSON view lists every run).
pub(crate) const SHOWN_PER_SCENARIO: usize = 10;

/// Confidence level of the intervals `wt report` shows.
pub(crate) const REPORT_ALPHA: f64 = 0.05;

/// One run in a report.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct RunRow {
    pub scenario_id: String,
    pub run_index: u32,
    pub run_id: String,
    pub sweep_id: String,
    pub agent: String,
    /// `None` when the score sidecar is missing or unreadable.
    pub verdict: Option<Verdict>,
    /// Failed layers and their details, in reporting order.
    pub failures: Vec<(String, String)>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The trace file (displayed; paths that are not UTF-8 are shown lossily).
    pub trace: String,
    pub latency_ms: u64,
    /// The run's model calls and tokens, when `wt` saw any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<RunUsage>,
}

/// An estimate at one `k`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub(crate) struct AtK {
    pub k: u64,
    pub value: f64,
}

/// A scenario's aggregate with the reliability figures derived from it.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct ScenarioSummary {
    #[serde(flatten)]
    pub aggregate: AggregateResult,
    /// passed / runs (ERROR runs count as not passed); `None` with no runs.
    pub pass_rate: Option<f64>,
    /// The 95 % Wilson score interval of the pass rate.
    pub wilson95: Option<[f64; 2]>,
    /// pass^k for k = 1 and k = runs.
    pub pass_hat_k: Vec<AtK>,
    /// pass@k for k = 1 and k = runs.
    pub pass_at_k: Vec<AtK>,
    /// The scenario's model calls and tokens, summed over its runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<RunUsage>,
    /// What evaluating its runs cost (simulated users, judges), summed over its runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub eval_usage: Option<RunUsage>,
}

impl ScenarioSummary {
    pub(crate) fn new(aggregate: AggregateResult) -> ScenarioSummary {
        let (c, n) = (u64::from(aggregate.passed), u64::from(aggregate.runs));
        let ks = ks(&[1, n]);
        ScenarioSummary {
            usage: None,
            eval_usage: None,
            pass_rate: (n > 0).then(|| c as f64 / n as f64),
            wilson95: stats::wilson(c, n, REPORT_ALPHA).map(|(l, h)| [l, h]),
            pass_hat_k: at_ks(&ks, |k| stats::pass_hat_k(c, n, k)),
            pass_at_k: at_ks(&ks, |k| stats::pass_at_k(c, n, k)),
            aggregate,
        }
    }

    pub(crate) fn id(&self) -> &str {
        &self.aggregate.scenario_id
    }
}

fn ks(candidates: &[u64]) -> Vec<u64> {
    let mut ks: Vec<u64> = candidates.iter().copied().filter(|&k| k > 0).collect();
    ks.sort_unstable();
    ks.dedup();
    ks
}

fn at_ks(ks: &[u64], f: impl Fn(u64) -> Option<f64>) -> Vec<AtK> {
    ks.iter()
        .filter_map(|&k| f(k).map(|value| AtK { k, value }))
        .collect()
}

/// What the whole pack adds up to.
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct PackSummary {
    pub scenarios: usize,
    pub runs: u64,
    pub passed: u64,
    pub failed: u64,
    pub errored: u64,
    /// The fewest runs of any scenario: the largest k every scenario can estimate.
    pub k: u64,
    /// Mean over scenarios of pass^k, for k = 1 and k = [`PackSummary::k`].
    pub pass_hat_k: Vec<AtK>,
    /// Mean over scenarios of pass@k, for k = 1 and k = [`PackSummary::k`].
    pub pass_at_k: Vec<AtK>,
}

impl PackSummary {
    fn new(scenarios: &[ScenarioSummary]) -> PackSummary {
        let mut p = PackSummary {
            scenarios: scenarios.len(),
            ..PackSummary::default()
        };
        for s in scenarios {
            let a = &s.aggregate;
            p.runs += u64::from(a.runs);
            p.passed += u64::from(a.passed);
            p.failed += u64::from(a.failed);
            p.errored += u64::from(a.errored);
        }
        let judged: Vec<&AggregateResult> = scenarios
            .iter()
            .map(|s| &s.aggregate)
            .filter(|a| a.runs > 0)
            .collect();
        p.k = judged.iter().map(|a| u64::from(a.runs)).min().unwrap_or(0);
        let mean = |f: fn(u64, u64, u64) -> Option<f64>, k: u64| {
            let values: Vec<f64> = judged
                .iter()
                .filter_map(|a| f(u64::from(a.passed), u64::from(a.runs), k))
                .collect();
            (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
        };
        let ks = ks(&[1, p.k]);
        p.pass_hat_k = at_ks(&ks, |k| mean(stats::pass_hat_k, k));
        p.pass_at_k = at_ks(&ks, |k| mean(stats::pass_at_k, k));
        p
    }
}

/// A report over loaded runs: the summary model every format renders.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Report {
    pub schema_version: u32,
    /// Scenarios in id order.
    pub scenarios: Vec<ScenarioSummary>,
    pub pack: PackSummary,
    /// Runs in scenario then run order.
    pub runs: Vec<RunRow>,
    pub sweeps: Vec<Sweep>,
    /// Scenarios that could not run at all, from the journals.
    pub scenario_errors: Vec<ScenarioError>,
    /// Files skipped and other problems the reader met, one line each.
    pub warnings: Vec<String>,
    /// Trace files not counted because they repeat an earlier `run_id`.
    pub duplicates: usize,
    /// What the directories given cannot account for (missing shards, empty directories):
    /// the result is incomplete.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub gaps: Vec<String>,
    /// Runs the journals name whose traces were not read, each counted as ERROR.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unread: Vec<UnreadRun>,
    /// The exit code of `--gate` (see [`Report::gate`]).
    pub gate: u8,
    /// Model calls and tokens over every run, when `wt` saw any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<RunUsage>,
    /// What the evaluation itself cost over every run (simulated users, judges), when it
    /// made any model call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub eval_usage: Option<RunUsage>,
    /// The page's details, when a scan gathered them.
    #[serde(skip)]
    pub details: Option<scan::Details>,
    /// The agents of the runs read, sorted.
    #[serde(skip)]
    pub agents: Vec<String>,
    /// Failure reasons per scenario, over every run read (a scan counts them when asked).
    #[serde(skip)]
    pub reasons: Reasons,
    /// Where every run is, when `runs` holds only the few the table shows ([`scan`]): the
    /// JSON view streams every row from it.
    #[serde(skip)]
    pub listing: Option<scan::Listing>,
    /// Per scenario, how many of its runs read did not pass (`runs` may hold only the
    /// first few of them).
    #[serde(skip)]
    pub not_passed: BTreeMap<String, usize>,
    /// Where the runs come from, as their traces say: packs, shards, scenario digests.
    #[serde(skip)]
    pub ids: scan::Identities,
}

/// What the reading side found beside the runs.
pub(crate) struct Found {
    pub sweeps: Vec<Sweep>,
    pub scenario_errors: Vec<ScenarioError>,
    pub warnings: Vec<String>,
    pub duplicates: usize,
    pub gaps: Vec<String>,
    pub unread: Vec<UnreadRun>,
    /// A sweep may not have run to the end, or a shard is missing.
    pub partial: bool,
    /// Where the runs come from, as their traces say.
    pub ids: scan::Identities,
}

impl Report {
    /// The model of runs held in memory (a sweep's own, as `wt run --junit` reports them
    /// without reading the runs directory back), in the order given.
    pub(crate) fn from_sweep(runs: &[StoredRun], scenario_errors: Vec<ScenarioError>) -> Report {
        let mut aggs: BTreeMap<String, Aggregator> = BTreeMap::new();
        let mut rows = Vec::with_capacity(runs.len());
        let mut usage: BTreeMap<String, UsageSum> = BTreeMap::new();
        for (trace, score, path) in runs {
            aggs.entry(trace.scenario_id.clone())
                .or_insert_with(|| Aggregator::new(&trace.scenario_id))
                .add(trace, score.as_ref());
            if let Some(s) = score.as_ref().filter(|s| has_usage(s)) {
                usage
                    .entry(trace.scenario_id.clone())
                    .or_default()
                    .add_score(s);
            }
            rows.push(row(trace, score.as_ref(), path));
        }
        let found = Found {
            sweeps: Vec::new(),
            scenario_errors,
            warnings: Vec::new(),
            duplicates: 0,
            gaps: Vec::new(),
            unread: Vec::new(),
            partial: false,
            ids: scan::Identities::default(),
        };
        let mut report = Report::assemble(aggs, usage, rows, found);
        let mut agents: Vec<String> = report.runs.iter().map(|r| r.agent.clone()).collect();
        agents.sort();
        agents.dedup();
        report.agents = agents;
        for r in report.runs.iter().filter(|r| !r.failures.is_empty()) {
            let per = report.reasons.entry(r.scenario_id.clone()).or_default();
            for (layer, detail) in &r.failures {
                *per.entry((layer.clone(), triage::normalize(detail)))
                    .or_default() += 1;
            }
        }
        report
    }

    /// The model of aggregates counted elsewhere ([`Report::from_sweep`]'s or [`scan`]'s)
    /// and of what the reading side found beside the runs.
    pub(crate) fn assemble(
        mut aggs: BTreeMap<String, Aggregator>,
        mut usage: BTreeMap<String, UsageSum>,
        rows: Vec<RunRow>,
        found: Found,
    ) -> Report {
        let mut unread: BTreeMap<&str, u32> = BTreeMap::new();
        for u in &found.unread {
            aggs.entry(u.scenario_id.clone())
                .or_insert_with(|| Aggregator::new(&u.scenario_id));
            *unread.entry(&u.scenario_id).or_default() += 1;
        }
        let mut scenario_errors: BTreeMap<&str, Vec<&ScenarioError>> = BTreeMap::new();
        for e in &found.scenario_errors {
            aggs.entry(e.scenario_id.clone())
                .or_insert_with(|| Aggregator::new(&e.scenario_id));
            scenario_errors.entry(&e.scenario_id).or_default().push(e);
        }
        let mut total: Option<UsageSum> = None;
        for u in usage.values() {
            total.get_or_insert_with(UsageSum::default).merge(u);
        }
        let scenarios: Vec<ScenarioSummary> = aggs
            .into_iter()
            .map(|(id, agg)| {
                let mut a = agg.finish();
                // A run whose trace could not be read was not judged: ERROR.
                let missing = unread.get(id.as_str()).copied().unwrap_or(0);
                a.runs += missing;
                a.errored += missing;
                // A scenario that could not run wrote no trace: its runs are all ERROR.
                for e in scenario_errors.get(id.as_str()).into_iter().flatten() {
                    a.runs += e.runs;
                    a.errored += e.runs;
                    a.error.get_or_insert_with(|| e.error.clone());
                }
                let mut summary = ScenarioSummary::new(a);
                if let Some(u) = usage.remove(&id) {
                    summary.usage = u.finish();
                    summary.eval_usage = u.finish_eval();
                }
                summary
            })
            .collect();
        let gate = gate_code(scenarios.iter().map(|s| &s.aggregate), found.partial);
        let mut not_passed: BTreeMap<String, usize> = BTreeMap::new();
        for r in rows.iter().filter(|r| r.verdict != Some(Verdict::Pass)) {
            *not_passed.entry(r.scenario_id.clone()).or_default() += 1;
        }
        Report {
            not_passed,
            schema_version: SCHEMA_VERSION,
            pack: PackSummary::new(&scenarios),
            scenarios,
            runs: rows,
            sweeps: found.sweeps,
            scenario_errors: found.scenario_errors,
            warnings: found.warnings,
            duplicates: found.duplicates,
            gaps: found.gaps,
            unread: found.unread,
            gate,
            usage: total.as_ref().and_then(UsageSum::finish),
            eval_usage: total.as_ref().and_then(UsageSum::finish_eval),
            details: None,
            agents: Vec::new(),
            reasons: Reasons::new(),
            listing: None,
            ids: found.ids,
        }
    }

    /// The model of a [`scan`]: every count, the few runs the table lists, and the
    /// listing the JSON view streams every row from.
    pub(crate) fn from_scan(scan: scan::Scan) -> Report {
        let mut report = Report::assemble(scan.aggs, scan.usage, scan.shown, scan.found);
        report.not_passed = scan.not_passed;
        report.listing = scan.listing;
        report.details = scan.details;
        report.agents = scan.agents;
        report.reasons = scan.reasons;
        report
    }

    /// The rows held of the runs of `scenario` that did not pass (all of them for runs held in
    /// memory, the first [`SHOWN_PER_SCENARIO`] after a scan), and how many there are.
    pub(crate) fn not_passed_of(&self, scenario: &str) -> (Vec<&RunRow>, usize) {
        let rows: Vec<&RunRow> = self
            .runs
            .iter()
            .filter(|r| r.scenario_id == scenario && r.verdict != Some(Verdict::Pass))
            .collect();
        let n = self.not_passed.get(scenario).copied().unwrap_or(rows.len());
        (rows, n)
    }

    /// Every row, for views that list every run: those held, or (after a [`scan`]) each
    /// read again from the listing.
    pub(crate) fn all_rows(&self) -> Box<dyn Iterator<Item = Cow<'_, RunRow>> + '_> {
        match &self.listing {
            Some(listing) => Box::new(listing.rows().map(Cow::Owned)),
            None => Box::new(self.runs.iter().map(Cow::Borrowed)),
        }
    }

    /// A report over runs gathered elsewhere (no journals, no artifacts).
    #[cfg(test)]
    pub(crate) fn from_runs(runs: &[StoredRun]) -> Report {
        Report::from_sweep(runs, Vec::new())
    }

    pub(crate) fn totals(&self) -> (u64, u64, u64, u64) {
        let p = &self.pack;
        (p.runs, p.passed, p.failed, p.errored)
    }

    #[cfg(test)]
    pub(crate) fn to_json(&self) -> String {
        let mut out = Vec::new();
        self.write_json(&mut out).expect("a Vec takes any write");
        String::from_utf8(out).expect("JSON is UTF-8")
    }

    /// The JSON view, streamed: with a listing, every row is read again as it is written,
    /// so the document's size does not become memory.
    pub(crate) fn write_json(&self, w: &mut dyn std::io::Write) -> std::io::Result<()> {
        let view = JsonView {
            schema_version: self.schema_version,
            scenarios: &self.scenarios,
            pack: &self.pack,
            runs: RowsView(self),
            sweeps: &self.sweeps,
            scenario_errors: &self.scenario_errors,
            warnings: &self.warnings,
            duplicates: self.duplicates,
            gaps: &self.gaps,
            unread: &self.unread,
            gate: self.gate,
            usage: &self.usage,
            eval_usage: &self.eval_usage,
        };
        serde_json::to_writer_pretty(&mut *w, &view).map_err(std::io::Error::other)?;
        w.write_all(b"\n")
    }

    /// Sweeps that may not have run to the end.
    /// The packs the runs come from, as their traces and journals name them.
    pub(crate) fn packs(&self) -> BTreeSet<String> {
        let mut packs = self.ids.packs.clone();
        packs.extend(self.sweeps.iter().filter_map(|s| s.pack.clone()));
        packs
    }

    pub(crate) fn partial_sweeps(&self) -> impl Iterator<Item = &Sweep> {
        self.sweeps.iter().filter(|s| s.status.is_partial())
    }
}

/// The JSON document: [`Report`]'s fields, in its order, with the rows streamed.
#[derive(Serialize)]
struct JsonView<'a> {
    schema_version: u32,
    scenarios: &'a [ScenarioSummary],
    pack: &'a PackSummary,
    runs: RowsView<'a>,
    sweeps: &'a [Sweep],
    scenario_errors: &'a [ScenarioError],
    warnings: &'a [String],
    duplicates: usize,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    gaps: &'a [String],
    #[serde(skip_serializing_if = "<[UnreadRun]>::is_empty")]
    unread: &'a [UnreadRun],
    gate: u8,
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: &'a Option<RunUsage>,
    #[serde(skip_serializing_if = "Option::is_none")]
    eval_usage: &'a Option<RunUsage>,
}

struct RowsView<'a>(&'a Report);

impl Serialize for RowsView<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.all_rows())
    }
}

/// The gate: 3 if any run or scenario could not be judged or a sweep is partial (its missing
/// runs were never judged), else 1 if any run failed, else 0 — what a single sweep over the
/// same runs would have exited with.
pub(crate) fn gate_code<'a>(
    aggs: impl IntoIterator<Item = &'a AggregateResult>,
    partial: bool,
) -> u8 {
    if partial {
        return crate::exit::RUN_ERROR;
    }
    crate::exit::of_aggregates(aggs)
}

/// Model usage summed over runs, in any order with the same result: tokens are integers,
/// and dollars are added as fixed-point numbers (2^-64 dollar steps), so a report that reads
/// runs in parallel prints the same total every time. The sum has a cost only while every
/// run added has one: a total that leaves runs out would be false.
#[derive(Clone, Debug, Default)]
pub(crate) struct UsageSum {
    sum: RunUsage,
    cost: i128,
    uncosted: u64,
    /// Runs priced whose cost is unknown (a call reported no usage).
    unknown: u64,
    /// Runs added (less those taken back out).
    runs: u64,
    /// What the evaluation itself cost (simulated users, judges: the scores'
    /// `eval_usage`), summed alike and apart.
    eval: Option<Box<UsageSum>>,
}

/// Does a score count towards a [`UsageSum`]: has it the agent's usage or the evaluation's?
pub(crate) fn has_usage(s: &Score) -> bool {
    s.usage.is_some() || s.eval_usage.is_some()
}

/// Dollars to fixed point: exact for every cost above 2^-64 dollars.
const COST_SCALE: f64 = 18_446_744_073_709_551_616.0;

impl UsageSum {
    /// Adds a run's usage and its evaluation's.
    pub(crate) fn add_score(&mut self, s: &Score) {
        if let Some(u) = &s.usage {
            self.add(u);
        }
        if let Some(u) = &s.eval_usage {
            self.eval.get_or_insert_default().add(u);
        }
    }

    /// Takes a run added by [`UsageSum::add_score`] back out.
    pub(crate) fn remove_score(&mut self, s: &Score) {
        if let Some(u) = &s.usage {
            self.remove(u);
        }
        if let (Some(u), Some(eval)) = (&s.eval_usage, &mut self.eval) {
            eval.remove(u);
        }
    }

    fn add(&mut self, u: &RunUsage) {
        self.runs += 1;
        self.sum.model_calls += u.model_calls;
        self.sum.unreported += u.unreported;
        self.sum.tokens.add(&u.tokens);
        match u.cost_usd {
            Some(c) => self.cost += (c * COST_SCALE) as i128,
            None => self.uncosted += 1,
        }
        self.unknown += u64::from(u.cost_unknown.is_some());
    }

    fn remove(&mut self, u: &RunUsage) {
        self.runs = self.runs.saturating_sub(1);
        let t = &mut self.sum.tokens;
        self.sum.model_calls = self.sum.model_calls.saturating_sub(u.model_calls);
        self.sum.unreported = self.sum.unreported.saturating_sub(u.unreported);
        t.prompt_tokens = t.prompt_tokens.saturating_sub(u.tokens.prompt_tokens);
        t.completion_tokens = t
            .completion_tokens
            .saturating_sub(u.tokens.completion_tokens);
        t.cached_tokens = t.cached_tokens.saturating_sub(u.tokens.cached_tokens);
        t.reasoning_tokens = t.reasoning_tokens.saturating_sub(u.tokens.reasoning_tokens);
        match u.cost_usd {
            Some(c) => self.cost -= (c * COST_SCALE) as i128,
            None => self.uncosted = self.uncosted.saturating_sub(1),
        }
        self.unknown = self
            .unknown
            .saturating_sub(u64::from(u.cost_unknown.is_some()));
    }

    pub(crate) fn merge(&mut self, other: &UsageSum) {
        self.sum.model_calls += other.sum.model_calls;
        self.sum.unreported += other.sum.unreported;
        self.sum.tokens.add(&other.sum.tokens);
        self.cost += other.cost;
        self.uncosted += other.uncosted;
        self.unknown += other.unknown;
        self.runs += other.runs;
        if let Some(e) = &other.eval {
            self.eval.get_or_insert_default().merge(e);
        }
    }

    /// The agent's usage over the runs added; `None` when none had any.
    pub(crate) fn finish(&self) -> Option<RunUsage> {
        (self.runs > 0).then(|| self.total())
    }

    /// The evaluation's usage over the runs added; `None` when none had any.
    pub(crate) fn finish_eval(&self) -> Option<RunUsage> {
        self.eval.as_ref().and_then(|e| e.finish())
    }

    fn total(&self) -> RunUsage {
        let mut u = self.sum.clone();
        u.cost_usd = (self.uncosted == 0)
            .then(|| windtunnel_model::round_cost(self.cost as f64 / COST_SCALE));
        if self.unknown > 0 {
            u.cost_unknown = Some(format!(
                "{} run(s) had model calls that reported no usage",
                self.unknown
            ));
        }
        u
    }
}

/// A score's failed layers and their details, in reporting order.
pub(crate) fn failures(s: &Score) -> Vec<(String, String)> {
    s.layers()
        .into_iter()
        .filter(|(_, l)| !l.passed)
        .map(|(n, l)| (n.to_owned(), l.detail.clone()))
        .collect()
}

fn row(trace: &Trace, score: Option<&Score>, path: &Path) -> RunRow {
    RunRow {
        scenario_id: trace.scenario_id.clone(),
        run_index: trace.run_index,
        run_id: trace.run_id.clone(),
        sweep_id: trace.sweep_id.clone(),
        agent: trace.agent.label.clone(),
        verdict: score.map(|s| s.verdict),
        failures: score.map(failures).unwrap_or_default(),
        error: match score {
            Some(s) => s.error.clone(),
            None => Some("no score sidecar (run `wt rescore` to score it)".to_owned()),
        },
        trace: path.display().to_string(),
        usage: score.and_then(|s| s.usage.clone()),
        latency_ms: trace
            .turns
            .iter()
            .fold(0u64, |n, t| n.saturating_add(t.latency_ms)),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::path::PathBuf;

    use super::*;
    use windtunnel_model::LayerResult;

    pub(crate) fn run(scenario: &str, index: u32, verdict: Verdict) -> StoredRun {
        let layer = |passed: bool, detail: &str| {
            if passed {
                LayerResult::pass(detail)
            } else {
                LayerResult::fail(detail)
            }
        };
        let mut trace = Trace::default();
        trace.scenario_id = scenario.into();
        trace.run_index = index;
        trace.run_id = format!("run-{scenario}-{index}");
        let failing = verdict != Verdict::Pass;
        let mut score = Score::new(&trace.run_id, scenario, verdict);
        score.outcome = layer(true, "ok");
        score.trajectory = layer(true, "ok");
        score.constraint = layer(!failing, "forbidden tool `x` called");
        score.integrity = layer(verdict != Verdict::Error, "turn 0: timed out");
        score.error = (verdict == Verdict::Error).then(|| "turn 0: timed out".into());
        (
            trace,
            Some(score),
            PathBuf::from(format!("{scenario}_{index}.json")),
        )
    }

    /// `runs` written to a runs directory and read back by the reader, as `wt report` reads
    /// them (the directory lives as long as the report may read from it).
    pub(crate) fn scanned(runs: &[StoredRun]) -> (tempfile::TempDir, Report) {
        let dir = tempfile::tempdir().unwrap();
        for (trace, score, path) in runs {
            let at = dir.path().join(path.file_name().unwrap());
            crate::store::write_json(&at, trace).unwrap();
            if let Some(s) = score {
                crate::store::write_json(&at.with_extension("score.json"), s).unwrap();
            }
        }
        let want = scan::Want {
            listing: true,
            page: true,
            reasons: true,
            ..scan::Want::default()
        };
        let report = Report::from_scan(scan::scan(&[dir.path()], want).unwrap());
        (dir, report)
    }

    #[test]
    fn model_counts_reliability_and_gate() {
        let runs = vec![
            run("b", 0, Verdict::Pass),
            run("b", 1, Verdict::Pass),
            run("b", 2, Verdict::Fail),
            run("a", 1, Verdict::Error),
            run("a", 0, Verdict::Fail),
        ];
        let r = Report::from_runs(&runs);
        assert_eq!(r.scenarios[0].id(), "a");
        assert_eq!(r.runs[0].run_index, 0);
        assert_eq!(r.gate, crate::exit::RUN_ERROR);
        assert_eq!(r.totals(), (5, 2, 2, 1));
        let b = &r.scenarios[1];
        assert_eq!(
            b.pass_hat_k,
            vec![
                AtK {
                    k: 1,
                    value: 2.0 / 3.0
                },
                AtK { k: 3, value: 0.0 }
            ]
        );
        assert_eq!(b.pass_at_k[1], AtK { k: 3, value: 1.0 });
        // The pack: k = 2 (scenario a's run count); pass^2 = mean(0, C(2,2)/C(3,2)).
        assert_eq!(r.pack.k, 2);
        assert!((r.pack.pass_hat_k[1].value - (1.0 / 3.0) / 2.0).abs() < 1e-12);
        let json: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
        assert_eq!(json["runs"].as_array().unwrap().len(), 5);
        assert_eq!(json["scenarios"][1]["passed"], 2);
        assert_eq!(json["gate"], 3);
    }

    #[test]
    fn scenario_errors_and_partial_sweeps_gate_as_error() {
        let r = Report::from_sweep(
            &[],
            vec![ScenarioError {
                sweep_id: "s".into(),
                scenario_id: "never".into(),
                runs: 4,
                error: "provisioning failed: refused".into(),
            }],
        );
        let a = &r.scenarios[0].aggregate;
        assert_eq!((a.runs, a.errored), (4, 4));
        assert_eq!(r.gate, crate::exit::RUN_ERROR);
        let mut passing = [AggregateResult::default()];
        passing[0].runs = 1;
        passing[0].passed = 1;
        assert_eq!(gate_code(&passing, false), crate::exit::SUCCESS);
        assert_eq!(gate_code(&passing, true), crate::exit::RUN_ERROR);
    }
}
