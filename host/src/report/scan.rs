//! The one reader of runs directories: every view (`wt report` in each format, `wt compare`,
//! `wt triage`, `wt rescore`, the gate) reads runs through [`scan`]. The directories are read
//! in parallel, counted as they are read, and nothing is kept per run but a 40-byte [`Key`]
//! (docs/reports.md, "Reports at scale").
//!
//! The reading side's rules are in [`super::load`]: which files are runs, the sidecar rule,
//! bounded reads, warnings in order, duplicates counted once (the first directory given
//! wins), the journals read for how sweeps ended and for runs whose trace was not read.
//! - each trace is parsed as a [`Projection`] (the fields of the data model's `Trace` a report
//!   reads: ids, agent, times, hooks, turn latencies and whether a guard or a tool call
//!   failed; the rest skipped unread), its score in full; both are dropped once counted into
//!   the scenario's [`Aggregator`], [`UsageSum`], failure reasons and triage cluster, which
//!   merge exactly in any order;
//! - a run is then a [`Key`]: where its file is, its scenario, sweep and agent (as an index),
//!   its run index, verdict, rung, cluster and latency, and a hash of what makes it the run it
//!   is;
//! - what a view shows of single runs is read again from the keys: the table's rows
//!   ([`SHOWN_PER_SCENARIO`] not-passed runs per scenario), the page's few runs in full and
//!   its clusters' evidence, the JSON and JUnit views' every row, one at a time as they are
//!   written, and every run whole for the views that judge runs ([`Listing::whole_runs`]).
//!
//! A directory of 1,000,000 runs costs 40 MB of keys while it is read; everything else is
//! bounded by the number of scenarios, sweeps, distinct failure reasons and distinct
//! latencies. Views that do not list every run drop the keys once read.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap, HashSet};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError, mpsc};

use windtunnel_model::{HookProvenance, Score, Trace, Verdict, is_slug};

use serde::Deserialize;
use serde::de::IgnoredAny;

use super::html::{self, Details};
use super::load::{
    self, DirFd, Journals, LoadedRun, MAX_TRACE_BYTES, read_bounded_into_at, read_score,
    read_score_at,
};
use super::triage::{self, Head, Rung};
use super::{Found, Reasons, RunRow, SHOWN_PER_SCENARIO, UsageSum};
use crate::score::{Aggregator, Contribution};
use crate::store::{self, StoreError};

/// Warnings kept (a directory of foreign files would otherwise hold one per file); the rest
/// are counted.
pub(crate) const MAX_WARNINGS: usize = 1000;
/// File names handed to a reader at a time.
const BATCH: usize = 64;
/// Keys a reader holds per allocation.
const CHUNK: usize = 16 * 1024;

/// What a caller wants of a scan beyond the counts.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Want<'a> {
    /// Keep where every run is, for views that list every run (JSON, JUnit).
    pub listing: bool,
    /// The report page's details: clusters, the runs shown in full, hooks, the sweep's span.
    pub page: bool,
    /// Failure reasons per scenario (a side of `wt compare`).
    pub reasons: bool,
    /// The sorted hashes of the run ids read (the BASE side of `wt compare`).
    pub run_ids: bool,
    /// Count the runs whose run id's hash is in this sorted list (the NEW side).
    pub shared_with: Option<&'a [u64]>,
    /// What `wt view` lists and filters every run by ([`Facts`]), one per trace read.
    pub facts: bool,
}

/// What `wt view` shows of a run in its list, and filters and sorts by, read with the run.
/// Found again for a listed run by [`Listing::identity`].
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Facts {
    /// As [`Listing::identity`] gives it.
    pub identity: u64,
    /// The hash of the run id (a page's address names the run by its id).
    pub run_id_hash: u64,
    /// Failed layers: bit `i` for the `i`-th of [`Score::layers`].
    pub layers: u8,
    /// The triage rung of a run that did not pass, as [`triage::rung`] places it.
    pub rung: Option<Rung>,
    pub turns: u32,
    pub tool_calls: u32,
    pub model_calls: u32,
    /// Warnings the run's hooks gave (`hook:<name>: …` among its worker warnings).
    pub hook_warnings: u32,
    pub tokens: u64,
    pub cost_usd: Option<f64>,
}

/// What a scan of run directories holds: counts, the few rows and runs the views show, and
/// what the reader finds beside runs.
pub(crate) struct Scan {
    pub aggs: BTreeMap<String, Aggregator>,
    pub usage: BTreeMap<String, UsageSum>,
    /// Per scenario, failure reasons (layer, normalized detail) → runs (with
    /// [`Want::reasons`]).
    pub reasons: Reasons,
    /// Where every run is, in the report's order (with [`Want::listing`]).
    pub listing: Option<Listing>,
    /// The first [`SHOWN_PER_SCENARIO`] not-passed runs of each scenario, in order.
    pub shown: Vec<RunRow>,
    /// Per scenario, how many of its runs read did not pass.
    pub not_passed: BTreeMap<String, usize>,
    /// The agents of the runs read, sorted.
    pub agents: Vec<String>,
    /// The page's details (with [`Want::page`]).
    pub details: Option<Details>,
    /// The run ids' hashes, sorted, once each (with [`Want::run_ids`]).
    pub run_ids: Vec<u64>,
    /// Runs whose run id's hash is in [`Want::shared_with`].
    pub shared: usize,
    /// The trace files not counted because an earlier one was the same run, in the order
    /// read (directory given, then file name).
    pub duplicate_paths: Vec<PathBuf>,
    /// With [`Want::facts`]: one per trace read, copies of a run included, in no order.
    pub facts: Vec<Facts>,
    pub found: Found,
}

/// What a report reads of a trace: the fields of [`windtunnel_model::Trace`] it counts,
/// shows or orders by. The other fields every trace has must be there (a JSON file without
/// them is not a `wt` trace) but are skipped unread, as is anything else.
#[derive(Deserialize)]
pub(crate) struct Projection {
    pub schema_version: u32,
    pub run_id: String,
    pub sweep_id: String,
    pub scenario_id: String,
    pub run_index: u32,
    #[serde(rename = "session_id")]
    _session_id: IgnoredAny,
    pub agent: AgentLabel,
    pub started_at: String,
    pub ended_at: String,
    #[serde(rename = "surface")]
    _surface: IgnoredAny,
    pub turns: Vec<TurnLatency>,
    evidence: ToolEvidence,
    #[serde(default)]
    denial: Option<IgnoredAny>,
    #[serde(default)]
    pub hooks: Option<Vec<HookProvenance>>,
    #[serde(default)]
    pub pack: Option<String>,
    #[serde(default)]
    pub shard: Option<String>,
    #[serde(default)]
    pub scenario_digest: Option<String>,
    #[serde(default)]
    worker_warnings: Vec<String>,
}

#[derive(Deserialize)]
pub(crate) struct AgentLabel {
    pub label: String,
}

#[derive(Deserialize)]
pub(crate) struct TurnLatency {
    pub latency_ms: u64,
    #[serde(default)]
    error: Option<IgnoredAny>,
}

#[derive(Deserialize)]
struct ToolEvidence {
    tool_calls: Vec<ToolError>,
    #[serde(default)]
    model_calls: Vec<IgnoredAny>,
}

#[derive(Deserialize)]
struct ToolError {
    #[serde(default)]
    error: Option<IgnoredAny>,
}

impl Projection {
    /// Whether a tool call of the run came back with an error (the harness rung of triage).
    fn tool_errors(&self) -> bool {
        self.evidence.tool_calls.iter().any(|c| c.error.is_some())
    }
}

/// The hash of a run id, as [`Facts::run_id_hash`] holds it.
pub(crate) fn hash_run_id(run_id: &str) -> u64 {
    hash64(&run_id)
}

fn hash64(x: &impl Hash) -> u64 {
    // Fixed keys: the same hash in every process.
    let mut h = DefaultHasher::new();
    x.hash(&mut h);
    h.finish()
}

/// The hash of what makes a trace the run it is: its run id, qualified by sweep, agent and
/// start time (pinned sweeps of different agents reuse run ids).
fn identity(t: &Projection) -> u64 {
    hash64(&(&t.run_id, &t.sweep_id, &t.agent.label, &t.started_at))
}

/// One run, once counted: enough to order it, find its files again, list it and place it in
/// its triage cluster.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Key {
    /// Hash of run id, sweep, agent and start time: equal for copies of one run.
    identity: u64,
    /// `YYYYMMDDHHMMSS` of a `YYYYMMDDTHHMMSSZ_hhhhhhhh` stem (or the stem's index in
    /// [`Listing::odd`], with [`ODD`]) shifted left 16 bits, and the directory's index.
    loc: u64,
    /// The stem's eight hex digits.
    stem_lo: u32,
    /// The (scenario, sweep, agent) in [`Listing::groups`].
    group: u32,
    run_index: u32,
    /// Turn latencies summed ([`SATURATED`] when the sum does not fit).
    latency_ms: u32,
    /// The run's triage cluster, for a run that did not pass ([`NO_CLUSTER`] otherwise).
    cluster: u32,
    /// 16 bits of the run id's hash, to recognize its score again.
    run_hash: u16,
    /// The verdict (two bits), the rung (two bits), [`ODD`], [`DUPLICATE`], [`SATURATED`].
    flags: u8,
}

const VERDICT: u8 = 0b11;
const PASS: u8 = 0;
const FAIL: u8 = 1;
const ERROR: u8 = 2;
const UNSCORED: u8 = 3;
const RUNG_SHIFT: u8 = 2;
const ODD: u8 = 1 << 4;
const DUPLICATE: u8 = 1 << 5;
const SATURATED: u8 = 1 << 6;
const NO_CLUSTER: u32 = u32::MAX;

fn verdict_code(score: Option<&Score>) -> u8 {
    match score.map(|s| s.verdict) {
        Some(Verdict::Pass) => PASS,
        Some(Verdict::Fail) => FAIL,
        Some(_) => ERROR,
        None => UNSCORED,
    }
}

fn rung_code(r: Rung) -> u8 {
    match r {
        Rung::Wiring => 0,
        Rung::Harness => 1,
        Rung::Steering => 2,
        Rung::Model => 3,
    }
}

fn rung_of(code: u8) -> Rung {
    match code & 0b11 {
        0 => Rung::Wiring,
        1 => Rung::Harness,
        2 => Rung::Steering,
        _ => Rung::Model,
    }
}

impl Key {
    fn verdict(&self) -> u8 {
        self.flags & VERDICT
    }

    fn passed(&self) -> bool {
        self.verdict() == PASS
    }

    fn rung(&self) -> Rung {
        rung_of(self.flags >> RUNG_SHIFT)
    }

    fn dir(&self) -> u16 {
        self.loc as u16
    }

    fn stem_hi(&self) -> u64 {
        self.loc >> 16
    }

    fn odd(&self) -> bool {
        self.flags & ODD != 0
    }
}

/// Packs a stem the runner writes (`20261201T183442Z_70b49168`); `None` for any other.
fn pack_stem(stem: &str) -> Option<(u64, u32)> {
    let b = stem.as_bytes();
    if b.len() != 25 || b[8] != b'T' || b[15] != b'Z' || b[16] != b'_' {
        return None;
    }
    let digits = |r: std::ops::Range<usize>| -> Option<u64> {
        b[r].iter().try_fold(0u64, |n, &c| {
            c.is_ascii_digit().then(|| n * 10 + u64::from(c - b'0'))
        })
    };
    let hi = digits(0..8)? * 1_000_000 + digits(9..15)?;
    let lo = b[17..].iter().try_fold(0u32, |n, &c| {
        let d = match c {
            b'0'..=b'9' => c - b'0',
            b'a'..=b'f' => c - b'a' + 10,
            _ => return None,
        };
        Some(n << 4 | u32::from(d))
    })?;
    Some((hi, lo))
}

fn unpack_stem(hi: u64, lo: u32) -> String {
    let (date, time) = (hi / 1_000_000, hi % 1_000_000);
    format!("{date:08}T{time:06}Z_{lo:08x}")
}

/// The (scenario, sweep, agent) of runs.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Group {
    pub scenario: String,
    pub sweep: String,
    pub agent: String,
}

/// One run of a listing, as far as counting test cases needs it.
pub(crate) struct Brief<'a> {
    pub scenario: &'a str,
    pub run_index: u32,
    pub sweep: &'a str,
    /// `None` for a run without a usable score.
    pub verdict: Option<Verdict>,
}

/// Where every run counted is, in the report's order (scenario, run index, sweep, path).
#[derive(Clone, Debug, Default)]
pub(crate) struct Listing {
    keys: Vec<Key>,
    groups: Vec<Group>,
    dirs: Vec<PathBuf>,
    odd: Vec<Box<str>>,
}

impl Listing {
    fn stem(&self, k: &Key) -> Cow<'_, str> {
        if k.odd() {
            Cow::Borrowed(&self.odd[k.stem_hi() as usize])
        } else {
            Cow::Owned(unpack_stem(k.stem_hi(), k.stem_lo))
        }
    }

    fn path(&self, k: &Key) -> PathBuf {
        self.dirs[usize::from(k.dir())].join(format!("{}.json", self.stem(k)))
    }

    fn group(&self, k: &Key) -> &Group {
        &self.groups[k.group as usize]
    }

    /// Orders two runs' file names as a sorted listing of a directory does.
    fn name_cmp(&self, a: &Key, b: &Key) -> Ordering {
        if !a.odd() && !b.odd() {
            (a.stem_hi(), a.stem_lo).cmp(&(b.stem_hi(), b.stem_lo))
        } else {
            self.stem(a).cmp(&self.stem(b))
        }
    }

    /// Orders a run's file name against `stem` (of a journal's `RunEnded`).
    fn name_cmp_stem(&self, k: &Key, stem: &str, packed: Option<(u64, u32)>) -> Ordering {
        match packed {
            Some(p) if !k.odd() => (k.stem_hi(), k.stem_lo).cmp(&p),
            _ => (*self.stem(k)).cmp(stem),
        }
    }

    /// The row of one run, its score read again. A score that is no longer the one counted
    /// (rewritten since) is shown as it is read now, by the sidecar rule: a trace's score
    /// is the sidecar of its run.
    fn row(&self, k: &Key) -> RunRow {
        let path = self.path(k);
        let g = self.group(k);
        let mut row = RunRow {
            scenario_id: g.scenario.clone(),
            run_index: k.run_index,
            run_id: String::new(),
            sweep_id: g.sweep.clone(),
            agent: g.agent.clone(),
            verdict: None,
            failures: Vec::new(),
            error: None,
            trace: path.display().to_string(),
            latency_ms: u64::from(k.latency_ms),
            usage: None,
        };
        let counted = (k.verdict() != UNSCORED)
            .then(|| {
                load::read_bounded(&path.with_extension("score.json"), load::MAX_SIDECAR_BYTES)
                    .ok()
                    .and_then(|b| serde_json::from_slice::<Score>(&b).ok())
            })
            .flatten()
            .filter(|s| {
                hash64(&s.run_id) as u16 == k.run_hash && verdict_code(Some(s)) == k.verdict()
            });
        let trace = (counted.is_none() || k.flags & SATURATED != 0).then(|| read_projection(&path));
        if let Some(Ok(t)) = &trace {
            row.latency_ms = latency(t);
        }
        let (score, problem) = match (counted, trace) {
            (Some(s), _) => (Some(s), None),
            (None, Some(Ok(t))) => {
                row.run_id = t.run_id;
                read_score(&path, &row.run_id, &mut Vec::new())
            }
            (None, Some(Err(why))) => (None, Some(format!("trace {}: {why}", path.display()))),
            (None, None) => (None, None),
        };
        match &score {
            Some(s) => {
                row.run_id = s.run_id.clone();
                row.verdict = Some(s.verdict);
                row.failures = super::failures(s);
                row.error = s.error.clone();
                row.usage = s.usage.clone();
            }
            None => row.error = problem,
        }
        row
    }

    /// Every run's row, built as it is asked for.
    pub(crate) fn rows(&self) -> impl Iterator<Item = RunRow> + '_ {
        self.keys.iter().map(|k| self.row(k))
    }

    /// How many runs are listed.
    pub(crate) fn len(&self) -> usize {
        self.keys.len()
    }

    /// The `i`-th run's row (see [`Listing::rows`]).
    pub(crate) fn row_at(&self, i: usize) -> RunRow {
        self.row(&self.keys[i])
    }

    /// The `i`-th run's identity (hash of run id, sweep, agent and start time): what its
    /// [`Facts`] are found by.
    pub(crate) fn identity(&self, i: usize) -> u64 {
        self.keys[i].identity
    }

    /// The `i`-th run's turn latencies summed, in milliseconds (saturated at `u32::MAX`).
    pub(crate) fn latency_ms(&self, i: usize) -> u64 {
        u64::from(self.keys[i].latency_ms)
    }

    /// The `i`-th run's trace file.
    pub(crate) fn path_at(&self, i: usize) -> PathBuf {
        self.path(&self.keys[i])
    }

    /// The `i`-th run whole, with the hook artifacts beside it (see [`Listing::whole_runs`]).
    pub(crate) fn load_at(&self, i: usize) -> Result<LoadedRun, String> {
        let artifacts = self.artifacts(std::iter::once(i));
        self.load(&self.keys[i], &artifacts)
    }

    /// The directories read, in the order given.
    pub(crate) fn dirs(&self) -> &[PathBuf] {
        &self.dirs
    }

    /// The `i`-th run, as far as counting its test case goes.
    pub(crate) fn brief(&self, i: usize) -> Brief<'_> {
        let k = &self.keys[i];
        let g = self.group(k);
        Brief {
            scenario: &g.scenario,
            run_index: k.run_index,
            sweep: &g.sweep,
            verdict: match k.verdict() {
                PASS => Some(Verdict::Pass),
                FAIL => Some(Verdict::Fail),
                ERROR => Some(Verdict::Error),
                _ => None,
            },
        }
    }

    /// One run whole (`artifacts`: the hook artifacts found beside the runs asked for, by
    /// directory and stem), or why it could not be read again: its file no longer holds the
    /// run counted, or holds what the data model's [`Trace`] does not parse.
    fn load(
        &self,
        k: &Key,
        artifacts: &HashMap<(u16, String), Vec<PathBuf>>,
    ) -> Result<LoadedRun, String> {
        let path = self.path(k);
        let shown = path.display();
        let bytes = load::read_bounded(&path, MAX_TRACE_BYTES)
            .map_err(|why| format!("skipping {shown}: {why}"))?;
        let trace: Trace = load::parse_json(&bytes)
            .map_err(|e| format!("skipping {shown}: not a wt trace ({e})"))?;
        if hash64(&trace.run_id) as u16 != k.run_hash {
            return Err(format!(
                "skipping {shown}: it changed while it was read (now run {})",
                trace.run_id
            ));
        }
        let (score, score_problem) = read_score(&path, &trace.run_id, &mut Vec::new());
        let stem = self.stem(k).into_owned();
        Ok(LoadedRun {
            artifacts: artifacts.get(&(k.dir(), stem)).cloned().unwrap_or_default(),
            trace,
            score,
            score_problem,
            path,
        })
    }

    /// Every run whole, in the report's order, each read again as it is asked for with the
    /// hook artifacts beside it (`wt triage` and `wt rescore` judge runs from them). A run that
    /// cannot be read again is an `Err` with the warning to show.
    pub(crate) fn whole_runs(&self) -> impl Iterator<Item = Result<LoadedRun, String>> + '_ {
        let dirs = (0..self.dirs.len()).map(|d| d as u16);
        let artifacts = self.artifacts_in(dirs, |_, _| true);
        self.keys.iter().map(move |k| self.load(k, &artifacts))
    }

    /// The hook artifacts beside the runs at `picked` (indexes of keys), by directory and
    /// stem.
    fn artifacts(
        &self,
        picked: impl Iterator<Item = usize>,
    ) -> HashMap<(u16, String), Vec<PathBuf>> {
        let mut stems: BTreeMap<u16, HashSet<String>> = BTreeMap::new();
        for i in picked {
            let k = &self.keys[i];
            stems
                .entry(k.dir())
                .or_default()
                .insert(self.stem(k).into_owned());
        }
        self.artifacts_in(stems.keys().copied(), |dir, stem| {
            stems.get(&dir).is_some_and(|s| s.contains(stem))
        })
    }

    /// The hook artifacts in directories `dirs` whose stems `keep` keeps, by directory and
    /// stem: the directories listed again, sidecars that are not scores kept.
    fn artifacts_in(
        &self,
        dirs: impl Iterator<Item = u16>,
        keep: impl Fn(u16, &str) -> bool,
    ) -> HashMap<(u16, String), Vec<PathBuf>> {
        let mut out: HashMap<(u16, String), Vec<PathBuf>> = HashMap::new();
        for dir in dirs {
            let Ok(entries) = std::fs::read_dir(&self.dirs[usize::from(dir)]) else {
                continue;
            };
            for entry in entries.flatten() {
                let Ok(name) = entry.file_name().into_string() else {
                    continue;
                };
                if name.starts_with('.')
                    || !store::is_sidecar(Path::new(&name))
                    || name.ends_with(".score.json")
                {
                    continue;
                }
                let stem = name.split('.').next().unwrap_or_default();
                if keep(dir, stem) {
                    out.entry((dir, stem.to_owned()))
                        .or_default()
                        .push(self.dirs[usize::from(dir)].join(&name));
                }
            }
        }
        for paths in out.values_mut() {
            paths.sort();
        }
        out
    }
}

/// What `wt view` lists of a run (its trace `t` and its score).
fn facts(t: &Projection, score: Option<&Score>, run_id_hash: u64) -> Facts {
    let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
    let usage = score.and_then(|s| s.usage.as_ref());
    Facts {
        identity: identity(t),
        run_id_hash,
        layers: score.map_or(0, |s| {
            s.layers()
                .iter()
                .enumerate()
                .filter(|(_, (_, l))| !l.passed)
                .fold(0, |bits, (i, _)| bits | 1 << i)
        }),
        rung: match score {
            Some(s) if s.verdict == Verdict::Pass => None,
            Some(s) => Some(triage::rung(s, t.denial.is_some(), t.tool_errors())),
            None => Some(Rung::Harness),
        },
        turns: count(t.turns.len()),
        tool_calls: count(t.evidence.tool_calls.len()),
        model_calls: count(t.evidence.model_calls.len()),
        hook_warnings: count(
            t.worker_warnings
                .iter()
                .filter(|w| w.starts_with("hook:"))
                .count(),
        ),
        tokens: usage.map_or(0, |u| {
            u.tokens
                .prompt_tokens
                .saturating_add(u.tokens.completion_tokens)
        }),
        cost_usd: usage.and_then(|u| u.cost_usd),
    }
}

fn read_projection(path: &Path) -> Result<Projection, String> {
    let bytes = load::read_bounded(path, MAX_TRACE_BYTES).map_err(|e| e.to_string())?;
    serde_json::from_slice(&bytes).map_err(|e| format!("not a wt trace ({e})"))
}

/// A run's turn latencies summed (as its row shows them).
fn latency(t: &Projection) -> u64 {
    t.turns
        .iter()
        .fold(0u64, |n, turn| n.saturating_add(turn.latency_ms))
}

/// The turn latencies a scenario's aggregate counts (turns that ended without an error).
fn counted_latencies(t: &Projection) -> impl Iterator<Item = u64> + '_ {
    t.turns
        .iter()
        .filter(|turn| turn.error.is_none())
        .map(|turn| turn.latency_ms)
}

/// A triage cluster's key: scenario, failed layers (in reporting order) and normalized reason.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct ClusterKey {
    scenario: String,
    layers: Vec<&'static str>,
    reason: String,
}

/// Clusters by key, each numbered once.
#[derive(Default)]
struct Clusters {
    index: HashMap<ClusterKey, u32>,
    keys: Vec<ClusterKey>,
}

impl Clusters {
    fn id(&mut self, key: ClusterKey) -> u32 {
        if let Some(&i) = self.index.get(&key) {
            return i;
        }
        let i = self.keys.len() as u32;
        self.keys.push(key.clone());
        self.index.insert(key, i);
        i
    }
}

/// A hook's identity, as the page lists hooks.
type HookKey = (String, String, String, Option<String>);

fn hook_key(h: &HookProvenance) -> HookKey {
    (
        h.name.clone(),
        h.source.clone(),
        h.version.clone(),
        h.sha256.clone(),
    )
}

/// The sweep's span and hooks, over the runs read.
#[derive(Default)]
struct Extras {
    first: Option<String>,
    last: Option<String>,
    /// Each hook with the provenance seen first, and whether another run recorded it otherwise
    /// (then the first run in the report's order decides, read again).
    hooks: BTreeMap<HookKey, (HookProvenance, bool)>,
}

impl Extras {
    fn add(&mut self, t: &Projection) {
        if self
            .first
            .as_deref()
            .is_none_or(|f| t.started_at.as_str() < f)
        {
            self.first = Some(t.started_at.clone());
        }
        if self.last.as_deref().is_none_or(|l| t.ended_at.as_str() > l) {
            self.last = Some(t.ended_at.clone());
        }
        for h in t.hooks.iter().flatten() {
            self.hook(hook_key(h), h, false);
        }
    }

    fn hook(&mut self, key: HookKey, h: &HookProvenance, varies: bool) {
        match self.hooks.entry(key) {
            std::collections::btree_map::Entry::Occupied(mut e) => {
                let (seen, v) = e.get_mut();
                *v |= varies || seen != h;
            }
            std::collections::btree_map::Entry::Vacant(e) => {
                e.insert((h.clone(), varies));
            }
        }
    }

    fn merge(&mut self, other: Extras) {
        if let Some(f) = other.first
            && self.first.as_ref().is_none_or(|s| f < *s)
        {
            self.first = Some(f);
        }
        if let Some(l) = other.last
            && self.last.as_ref().is_none_or(|s| l > *s)
        {
            self.last = Some(l);
        }
        for (key, (h, varies)) in other.hooks {
            self.hook(key, &h, varies);
        }
    }
}

/// A warning about one trace file, in the order they are shown: by directory given,
/// then file name.
type FileWarning = (u16, String, String);

/// What one reader thread counted.
#[derive(Default)]
struct Part {
    keys: Vec<Vec<Key>>,
    aggs: BTreeMap<String, Aggregator>,
    usage: BTreeMap<String, UsageSum>,
    reasons: Reasons,
    clusters: Clusters,
    extras: Extras,
    /// The first [`MAX_WARNINGS`] warnings in the order shown (a max-heap), and how many
    /// there were in all.
    warnings: BinaryHeap<FileWarning>,
    warned: usize,
    run_ids: Vec<u64>,
    shared: usize,
    ids: Identities,
    facts: Vec<Facts>,
    /// Traces of a newer schema than this `wt` reads: (directory, name, what to say), the
    /// first [`MAX_WARNINGS`] of them; `newer_count` counts them all.
    newer: Vec<(u16, String, String)>,
    newer_count: usize,
}

/// What the traces say about where their runs come from: packs, shards, and each scenario's
/// content digests. Bounded by the packs, shardings and scenario versions read, never by
/// the runs.
#[derive(Default, Clone, Debug)]
pub(crate) struct Identities {
    /// The packs the traces name.
    pub packs: BTreeSet<String>,
    /// The shards (`K/N`) the traces name.
    pub shards: BTreeSet<String>,
    /// Per scenario, the digests of its definition the traces name.
    pub digests: BTreeMap<String, BTreeSet<String>>,
    /// Traces that name no digest (written by a `wt` that did not record one).
    pub undigested: usize,
    /// Per scenario, the judges (`sha256:…` identities) its scores were graded by.
    pub judges: BTreeMap<String, BTreeSet<String>>,
}

impl Identities {
    fn add(&mut self, t: &Projection) {
        if let Some(p) = &t.pack
            && !self.packs.contains(p)
        {
            self.packs.insert(p.clone());
        }
        if let Some(k) = &t.shard
            && !self.shards.contains(k)
        {
            self.shards.insert(k.clone());
        }
        match &t.scenario_digest {
            Some(d) => {
                let set = match self.digests.get_mut(&t.scenario_id) {
                    Some(set) => set,
                    None => self.digests.entry(t.scenario_id.clone()).or_default(),
                };
                if !set.contains(d) {
                    set.insert(d.clone());
                }
            }
            None => self.undigested += 1,
        }
    }

    /// Notes the judges that graded a run.
    fn add_judges(&mut self, scenario: &str, score: &Score) {
        for g in score.judges.iter().filter(|g| !g.judge.is_empty()) {
            let set = match self.judges.get_mut(scenario) {
                Some(set) => set,
                None => self.judges.entry(scenario.to_owned()).or_default(),
            };
            if !set.contains(&g.judge) {
                set.insert(g.judge.clone());
            }
        }
    }

    fn merge(&mut self, other: Identities) {
        for (id, set) in other.judges {
            self.judges.entry(id).or_default().extend(set);
        }
        self.packs.extend(other.packs);
        self.shards.extend(other.shards);
        for (id, set) in other.digests {
            self.digests.entry(id).or_default().extend(set);
        }
        self.undigested += other.undigested;
    }
}

/// The directory a reader reads from: its index, and the directory held open.
struct At<'a> {
    index: u16,
    fd: Option<&'a DirFd>,
}

/// What the readers share.
struct Shared<'a> {
    dirs: &'a [PathBuf],
    want: Want<'a>,
    groups: Mutex<(HashMap<Group, u32>, Vec<Group>)>,
    odd: Mutex<Vec<Box<str>>>,
}

impl Shared<'_> {
    fn group(&self, t: &Projection) -> u32 {
        let mut guard = self.groups.lock().unwrap_or_else(PoisonError::into_inner);
        let (index, all) = &mut *guard;
        let g = Group {
            scenario: t.scenario_id.clone(),
            sweep: t.sweep_id.clone(),
            agent: t.agent.label.clone(),
        };
        if let Some(&i) = index.get(&g) {
            return i;
        }
        let i = all.len() as u32;
        all.push(g.clone());
        index.insert(g, i);
        i
    }
}

/// Counts `score`'s failed layers into a scenario's reasons.
fn add_reasons(reasons: &mut Reasons, scenario: &str, score: &Score, add: bool) {
    for (layer, l) in score.layers() {
        if l.passed {
            continue;
        }
        let key = (layer.to_owned(), triage::normalize(&l.detail));
        if add {
            *reasons
                .entry(scenario.to_owned())
                .or_default()
                .entry(key)
                .or_default() += 1;
        } else if let Some(per) = reasons.get_mut(scenario) {
            if let Some(n) = per.get_mut(&key) {
                *n -= 1;
                if *n == 0 {
                    per.remove(&key);
                }
            }
            if per.is_empty() {
                reasons.remove(scenario);
            }
        }
    }
}

impl Part {
    fn push(&mut self, k: Key) {
        match self.keys.last_mut() {
            Some(chunk) if chunk.len() < CHUNK => chunk.push(k),
            _ => {
                let mut chunk = Vec::with_capacity(CHUNK);
                chunk.push(k);
                self.keys.push(chunk);
            }
        }
    }

    fn warn(&mut self, dir: u16, name: &str, text: String) {
        self.warned += 1;
        if self.warnings.len() == MAX_WARNINGS {
            match self.warnings.peek() {
                Some((d, n, _)) if (dir, name) < (*d, n.as_str()) => {
                    self.warnings.pop();
                }
                _ => return,
            }
        }
        self.warnings.push((dir, name.to_owned(), text));
    }

    fn read(&mut self, shared: &Shared<'_>, at: &At<'_>, name: &str, bufs: &mut [Vec<u8>; 2]) {
        let dir = at.index;
        let path = shared.dirs[usize::from(dir)].join(name);
        let shown = path.display();
        let [buf, score_buf] = bufs;
        if let Err(why) = read_bounded_into_at(at.fd, &path, MAX_TRACE_BYTES, buf) {
            self.warn(dir, name, format!("skipping {shown}: {why}"));
            return;
        }
        let parsed: Result<Projection, _> = load::parse_json(buf);
        let version = parsed.as_ref().ok().map(|t| t.schema_version);
        if let Some(v) = load::newer_than_read(version, if version.is_some() { &[] } else { buf }) {
            self.newer_count += 1;
            if self.newer.len() < MAX_WARNINGS {
                self.newer
                    .push((dir, name.to_owned(), load::newer_trace(&path, v)));
            }
            return;
        }
        let t = match parsed {
            Ok(t) => t,
            Err(e) => {
                self.warn(dir, name, format!("skipping {shown}: not a wt trace ({e})"));
                return;
            }
        };
        if t.run_id.is_empty() || !is_slug(&t.scenario_id) {
            self.warn(
                dir,
                name,
                format!("skipping {shown}: not a wt trace (empty run_id or invalid scenario_id)"),
            );
            return;
        }
        let mut problems = Vec::new();
        let (score, problem) = read_score_at(at.fd, &path, &t.run_id, &mut problems, score_buf);
        for p in problems {
            self.warn(dir, name, p);
        }
        let c = Contribution::from_parts(score.as_ref(), counted_latencies(&t));
        self.aggs
            .entry(t.scenario_id.clone())
            .or_insert_with(|| Aggregator::new(&t.scenario_id))
            .add_run(&c);
        if let Some(s) = score.as_ref().filter(|s| super::has_usage(s)) {
            self.usage
                .entry(t.scenario_id.clone())
                .or_default()
                .add_score(s);
        }
        if shared.want.reasons
            && let Some(s) = &score
        {
            add_reasons(&mut self.reasons, &t.scenario_id, s, true);
        }
        let (cluster, rung) = match triage::cluster_key(score.as_ref(), problem.as_deref()) {
            Some((_, layers, reason)) if shared.want.page => {
                let rung = match &score {
                    Some(s) => triage::rung(s, t.denial.is_some(), t.tool_errors()),
                    None => Rung::Harness,
                };
                let key = ClusterKey {
                    scenario: t.scenario_id.clone(),
                    layers,
                    reason,
                };
                (self.clusters.id(key), rung_code(rung))
            }
            _ => (NO_CLUSTER, 0),
        };
        if shared.want.page {
            self.extras.add(&t);
        }
        self.ids.add(&t);
        if let Some(s) = &score {
            self.ids.add_judges(&t.scenario_id, s);
        }
        let run_id_hash = hash64(&t.run_id);
        if shared.want.facts {
            self.facts.push(facts(&t, score.as_ref(), run_id_hash));
        }
        if shared.want.run_ids {
            self.run_ids.push(run_id_hash);
        }
        if let Some(base) = shared.want.shared_with
            && base.binary_search(&run_id_hash).is_ok()
        {
            self.shared += 1;
        }
        let stem = &name[..name.len() - ".json".len()];
        let (stem_hi, stem_lo, odd) = match pack_stem(stem) {
            Some((hi, lo)) => (hi, lo, 0),
            None => {
                let mut odd = shared.odd.lock().unwrap_or_else(PoisonError::into_inner);
                odd.push(stem.into());
                ((odd.len() - 1) as u64, 0, ODD)
            }
        };
        let sum = latency(&t);
        let saturated = if sum >= u64::from(u32::MAX) {
            SATURATED
        } else {
            0
        };
        self.push(Key {
            identity: identity(&t),
            loc: stem_hi << 16 | u64::from(dir),
            stem_lo,
            group: shared.group(&t),
            run_index: t.run_index,
            latency_ms: u32::try_from(sum).unwrap_or(u32::MAX),
            cluster,
            run_hash: run_id_hash as u16,
            flags: verdict_code(score.as_ref()) | rung << RUNG_SHIFT | odd | saturated,
        });
    }
}

/// Keeps the keys' memory from outliving them: with glibc's sliding mmap threshold, blocks
/// freed once (a reader's chunk of keys, 640 KB) raise it, and the next scan's chunks (a
/// comparison reads two sides) come from heaps that keep them after they are freed. A fixed
/// threshold maps every block from 256 KiB up on its own, gives it back when freed, and grows
/// the keys with `mremap` instead of a copy.
fn map_big_blocks() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            // SAFETY: mallopt only sets an allocator parameter; any value is safe to ask for.
            unsafe {
                libc::mallopt(libc::M_MMAP_THRESHOLD, 256 << 10);
            }
        });
    }
}

/// Reads every run directory in `dirs` (the rules of [`super::load`], see the module docs).
pub(crate) fn scan<P: AsRef<Path>>(dirs: &[P], want: Want<'_>) -> Result<Scan, StoreError> {
    map_big_blocks();
    let mut gaps = Vec::new();
    // Directories given twice are read once.
    let mut seen = HashSet::new();
    let mut unique: Vec<PathBuf> = Vec::new();
    for dir in dirs {
        let dir = dir.as_ref();
        let canonical = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_owned());
        if seen.insert(canonical) {
            unique.push(dir.to_owned());
        }
    }
    if unique.len() > usize::from(u16::MAX) {
        return Err(StoreError::BadName {
            what: "runs directories",
            name: unique.len().to_string(),
            why: "at most 65535 directories can be read at once",
        });
    }
    let shared = Shared {
        dirs: &unique,
        want,
        groups: Mutex::new((HashMap::new(), Vec::new())),
        odd: Mutex::new(Vec::new()),
    };
    let readers = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(1, 8);
    let mut journal_paths: Vec<(u16, String)> = Vec::new();
    let (tx, rx) = mpsc::sync_channel::<(u16, Vec<String>)>(readers * 4);
    let rx = Mutex::new(rx);
    let (parts, listed) = std::thread::scope(|s| {
        let workers: Vec<_> = (0..readers)
            .map(|_| {
                let (rx, shared) = (&rx, &shared);
                s.spawn(move || {
                    let mut part = Part::default();
                    let mut bufs = [Vec::new(), Vec::new()];
                    // Each directory held open while its files are read.
                    let mut open: Option<(u16, Option<DirFd>)> = None;
                    loop {
                        let job = rx.lock().unwrap_or_else(PoisonError::into_inner).recv();
                        let Ok((dir, names)) = job else { break };
                        if open.as_ref().is_none_or(|(d, _)| *d != dir) {
                            open = Some((dir, DirFd::open(&shared.dirs[usize::from(dir)])));
                        }
                        let at = At {
                            index: dir,
                            fd: open.as_ref().and_then(|(_, fd)| fd.as_ref()),
                        };
                        for name in names {
                            part.read(shared, &at, &name, &mut bufs);
                        }
                        for buf in &mut bufs {
                            if buf.capacity() > 1 << 20 {
                                *buf = Vec::new();
                            }
                        }
                    }
                    part
                })
            })
            .collect();
        let listed = list_all(&unique, &tx, &mut journal_paths, &mut gaps);
        drop(tx);
        let parts: Vec<Part> = workers
            .into_iter()
            .map(|w| w.join().expect("a report reader panicked"))
            .collect();
        (parts, listed)
    });
    listed?;

    // Merge what the readers counted.
    let mut aggs: BTreeMap<String, Aggregator> = BTreeMap::new();
    let mut usage: BTreeMap<String, UsageSum> = BTreeMap::new();
    let mut reasons = Reasons::new();
    let mut clusters = Clusters::default();
    let mut extras = Extras::default();
    let mut file_warnings: Vec<FileWarning> = Vec::new();
    let (mut warned, mut shared_runs) = (0, 0);
    let mut run_ids = Vec::new();
    let mut identities = Identities::default();
    let mut facts = Vec::new();
    let mut newer = Vec::new();
    let mut newer_count = 0;
    let total: usize = parts
        .iter()
        .map(|p| p.keys.iter().map(Vec::len).sum::<usize>())
        .sum();
    let mut keys = Vec::with_capacity(total);
    for part in parts {
        let ids: Vec<u32> = part
            .clusters
            .keys
            .into_iter()
            .map(|k| clusters.id(k))
            .collect();
        for chunk in part.keys {
            keys.extend(chunk.into_iter().map(|mut k| {
                if k.cluster != NO_CLUSTER {
                    k.cluster = ids[k.cluster as usize];
                }
                k
            }));
        }
        for (id, a) in part.aggs {
            match aggs.entry(id) {
                std::collections::btree_map::Entry::Occupied(mut e) => e.get_mut().merge(a),
                std::collections::btree_map::Entry::Vacant(e) => {
                    e.insert(a);
                }
            }
        }
        for (id, u) in part.usage {
            usage.entry(id).or_default().merge(&u);
        }
        for (id, per) in part.reasons {
            let into = reasons.entry(id).or_default();
            for (k, n) in per {
                *into.entry(k).or_default() += n;
            }
        }
        extras.merge(part.extras);
        identities.merge(part.ids);
        file_warnings.extend(part.warnings);
        warned += part.warned;
        run_ids.extend(part.run_ids);
        facts.extend(part.facts);
        shared_runs += part.shared;
        newer.extend(part.newer);
        newer_count += part.newer_count;
    }
    // A trace this wt cannot read as its own is a run it cannot vouch for: the reading is
    // incomplete, never green without it.
    newer.sort();
    newer.truncate(MAX_WARNINGS);
    let shown_newer = newer.len();
    gaps.extend(newer.into_iter().map(|(_, _, text)| text));
    if newer_count > shown_newer {
        gaps.push(format!(
            "… and {} more trace(s) of a newer schema than this wt reads",
            newer_count - shown_newer
        ));
    }
    file_warnings.sort();
    file_warnings.truncate(MAX_WARNINGS);
    run_ids.sort_unstable();
    run_ids.dedup();
    let Shared { groups, odd, .. } = shared;
    let (_, groups) = groups.into_inner().unwrap_or_else(PoisonError::into_inner);
    let mut listing = Listing {
        keys,
        groups,
        odd: odd.into_inner().unwrap_or_else(PoisonError::into_inner),
        dirs: unique,
    };

    let mut dedup = mark_duplicates(
        &mut listing,
        &mut Counts {
            aggs: &mut aggs,
            usage: &mut usage,
            reasons: want.reasons.then_some(&mut reasons),
            shared: want.shared_with.map(|base| (base, &mut shared_runs)),
        },
    );
    dedup.paths.sort();
    let duplicate_paths: Vec<PathBuf> = std::mem::take(&mut dedup.paths)
        .into_iter()
        .map(|(_, p)| p)
        .collect();

    // Journals by directory given, then name; each journal's warnings after its
    // directory's trace warnings.
    journal_paths.sort();
    let mut journals = Journals::default();
    let mut journal_warnings: Vec<Vec<String>> = vec![Vec::new(); listing.dirs.len()];
    let unread = read_journals(
        &mut listing,
        &journal_paths,
        &mut journals,
        &mut journal_warnings,
    );
    listing.keys.retain(|k| k.flags & DUPLICATE == 0);
    let mut per_group = vec![0usize; listing.groups.len()];
    for k in &listing.keys {
        per_group[k.group as usize] += 1;
    }
    let mut runs_per_sweep: BTreeMap<String, usize> = BTreeMap::new();
    for (g, n) in listing.groups.iter().zip(&per_group) {
        if *n > 0 {
            *runs_per_sweep.entry(g.sweep.clone()).or_default() += n;
        }
    }
    let mut scenario_errors = Vec::new();
    let mut sweep_warnings = Vec::new();
    let sweeps = journals.close(runs_per_sweep, &mut scenario_errors, &mut sweep_warnings);
    gaps.extend(load::missing_shards(&sweeps, &identities.shards));
    // A scenario edited between the sweeps read: its counts mix two tests.
    sweep_warnings.extend(
        identities
            .digests
            .iter()
            .filter(|(_, versions)| versions.len() > 1)
            .map(|(id, versions)| {
                format!(
                    "scenario {id} was run in {} versions among these runs (its turns, expectations, world or tools were edited between sweeps): its counts mix them",
                    versions.len()
                )
            }),
    );

    // Every warning, counted: those about trace files (the first of them kept), then the
    // journals' and the sweeps'.
    let all = warned + journal_warnings.iter().map(Vec::len).sum::<usize>() + sweep_warnings.len();
    let mut warnings = Vec::new();
    let mut file_warnings = file_warnings.into_iter().peekable();
    for (dir, js) in journal_warnings.into_iter().enumerate() {
        while let Some((_, _, w)) = file_warnings.next_if(|(d, _, _)| usize::from(*d) == dir) {
            warnings.push(w);
        }
        warnings.extend(js);
    }
    warnings.extend(sweep_warnings);
    if all > MAX_WARNINGS {
        warnings.truncate(MAX_WARNINGS);
        warnings.push(format!(
            "… and {} more warning(s) like these",
            all - MAX_WARNINGS
        ));
    }

    sort_for_display(&mut listing);
    let mut not_passed: BTreeMap<String, usize> = BTreeMap::new();
    let mut shown = Vec::new();
    let mut cluster_runs = vec![0usize; clusters.keys.len()];
    let mut cluster_first: Vec<Option<usize>> = vec![None; clusters.keys.len()];
    let mut agents = BTreeSet::new();
    for (i, k) in listing.keys.iter().enumerate() {
        let g = listing.group(k);
        if !agents.contains(g.agent.as_str()) {
            agents.insert(g.agent.clone());
        }
        if k.passed() {
            continue;
        }
        let n = match not_passed.get_mut(&g.scenario) {
            Some(n) => n,
            None => not_passed.entry(g.scenario.clone()).or_default(),
        };
        *n += 1;
        if *n <= SHOWN_PER_SCENARIO {
            shown.push(listing.row(k));
        }
        if k.cluster != NO_CLUSTER {
            let c = k.cluster as usize;
            cluster_runs[c] += 1;
            cluster_first[c].get_or_insert(i);
        }
    }
    let details = want.page.then(|| {
        let mut latencies: BTreeMap<u64, u64> = BTreeMap::new();
        for a in aggs.values() {
            for (&ms, &n) in a.latencies() {
                *latencies.entry(ms).or_default() += n;
            }
        }
        let page = Page {
            listing: &listing,
            clusters: &clusters,
            cluster_runs: &cluster_runs,
            cluster_first: &cluster_first,
            aggs: &aggs,
            scenario_errors: &scenario_errors,
        };
        let mut details = page.details(latencies);
        page.extras(&mut extras, dedup.clean);
        details.first = extras.first;
        details.last = extras.last;
        details.hooks = extras.hooks.into_values().map(|(h, _)| h).collect();
        details
    });
    let partial = sweeps.iter().any(|s| s.status.is_partial()) || !gaps.is_empty();
    Ok(Scan {
        aggs,
        usage,
        reasons,
        listing: want.listing.then_some(listing),
        shown,
        not_passed,
        agents: agents.into_iter().collect(),
        details,
        run_ids,
        shared: shared_runs,
        duplicate_paths,
        facts,
        found: Found {
            sweeps,
            scenario_errors,
            warnings,
            duplicates: dedup.duplicates,
            gaps,
            unread,
            partial,
            ids: identities,
        },
    })
}

/// Lists every directory, handing trace names to the readers in batches; journals are
/// kept for later, other files ignored. A directory with neither is a gap.
fn list_all(
    dirs: &[PathBuf],
    tx: &mpsc::SyncSender<(u16, Vec<String>)>,
    journals: &mut Vec<(u16, String)>,
    gaps: &mut Vec<String>,
) -> Result<(), StoreError> {
    for (i, dir) in dirs.iter().enumerate() {
        let i = i as u16;
        let read_err = |source| StoreError::Read {
            path: dir.clone(),
            source,
        };
        let mut any = false;
        let mut batch = Vec::with_capacity(BATCH);
        for entry in std::fs::read_dir(dir).map_err(read_err)? {
            let entry = entry.map_err(read_err)?;
            let Ok(name) = entry.file_name().into_string() else {
                continue;
            };
            if name.starts_with('.') {
                continue;
            }
            if name.ends_with(".events.jsonl") {
                any = true;
                journals.push((i, name));
            } else if store::is_trace(Path::new(&name)) {
                any = true;
                batch.push(name);
                if batch.len() == BATCH {
                    let full = std::mem::replace(&mut batch, Vec::with_capacity(BATCH));
                    if tx.send((i, full)).is_err() {
                        return Ok(());
                    }
                }
            }
        }
        if !batch.is_empty() && tx.send((i, batch)).is_err() {
            return Ok(());
        }
        if !any {
            gaps.push(format!(
                "{} holds no run and no journal (a shard that never ran, or the wrong directory?)",
                dir.display()
            ));
        }
    }
    Ok(())
}

/// The counts a duplicate is taken back out of.
struct Counts<'a> {
    aggs: &'a mut BTreeMap<String, Aggregator>,
    usage: &'a mut BTreeMap<String, UsageSum>,
    reasons: Option<&'a mut Reasons>,
    /// The other side's run ids, and the count of runs found among them.
    shared: Option<(&'a [u64], &'a mut usize)>,
}

/// What deduplication found.
struct Dedup {
    duplicates: usize,
    /// The duplicates' trace files, by directory given.
    paths: Vec<(u16, PathBuf)>,
    /// Every duplicate's trace has the bytes of the run it repeats: what was gathered from
    /// every file read (the sweep's span, hooks) holds for the runs counted.
    clean: bool,
}

/// Marks every copy of a run after its first (by directory given, then file name) as a
/// duplicate, and takes it back out of the counts. Copies are found by their identity hash
/// and confirmed by reading them again (rare: a directory copied, or given under two names).
fn mark_duplicates(listing: &mut Listing, counts: &mut Counts<'_>) -> Dedup {
    let mut keys = std::mem::take(&mut listing.keys);
    keys.sort_unstable_by(|a, b| {
        (a.identity, a.dir())
            .cmp(&(b.identity, b.dir()))
            .then_with(|| listing.name_cmp(a, b))
    });
    let mut dedup = Dedup {
        duplicates: 0,
        paths: Vec::new(),
        clean: true,
    };
    let mut i = 0;
    while i < keys.len() {
        let mut j = i + 1;
        while j < keys.len() && keys[j].identity == keys[i].identity {
            j += 1;
        }
        if j - i > 1 {
            type Identity = (String, String, String, String);
            let mut firsts: Vec<(Identity, Vec<u8>)> = Vec::new();
            for k in &mut keys[i..j] {
                let path = listing.path(k);
                let Ok(bytes) = load::read_bounded(&path, MAX_TRACE_BYTES) else {
                    continue;
                };
                let Ok(t) = serde_json::from_slice::<Projection>(&bytes) else {
                    continue;
                };
                let id = (
                    t.run_id.clone(),
                    t.sweep_id.clone(),
                    t.agent.label.clone(),
                    t.started_at.clone(),
                );
                let Some((_, first)) = firsts.iter().find(|(f, _)| *f == id) else {
                    firsts.push((id, bytes));
                    continue;
                };
                dedup.clean &= *first == bytes;
                k.flags |= DUPLICATE;
                dedup.duplicates += 1;
                dedup.paths.push((k.dir(), path.clone()));
                let (score, _) = read_score(&path, &t.run_id, &mut Vec::new());
                let c = Contribution::from_parts(score.as_ref(), counted_latencies(&t));
                if let Some(a) = counts.aggs.get_mut(&t.scenario_id) {
                    a.remove_run(&c);
                }
                if let (Some(s), Some(sum)) = (score.as_ref(), counts.usage.get_mut(&t.scenario_id))
                {
                    sum.remove_score(s);
                }
                if let (Some(reasons), Some(s)) = (counts.reasons.as_deref_mut(), &score) {
                    add_reasons(reasons, &t.scenario_id, s, false);
                }
                if let Some((base, n)) = &mut counts.shared
                    && base.binary_search(&hash64(&t.run_id)).is_ok()
                {
                    **n -= 1;
                }
            }
        }
        i = j;
    }
    listing.keys = keys;
    dedup
}

/// Reads the journals in one pass each: how sweeps ended, and the runs they say were written
/// whose trace was not read (duplicates' files count as read), in journal order. Leaves
/// the keys sorted by file name.
fn read_journals(
    listing: &mut Listing,
    paths: &[(u16, String)],
    journals: &mut Journals,
    warnings: &mut [Vec<String>],
) -> Vec<super::UnreadRun> {
    let mut keys = std::mem::take(&mut listing.keys);
    keys.sort_unstable_by(|a, b| listing.name_cmp(a, b));
    let mut named = HashSet::new();
    let mut unread = Vec::new();
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(1, 8);
    let read = |stem: &str| {
        let packed = pack_stem(stem);
        keys.binary_search_by(|k| listing.name_cmp_stem(k, stem, packed))
            .is_ok()
    };
    for (dir, name) in paths {
        let path = listing.dirs[usize::from(*dir)].join(name);
        let warnings = &mut warnings[usize::from(*dir)];
        if let Some(mut missing) = journals.read_checked(&path, warnings, &read, threads) {
            // A journal's sweeps are gone through in id order.
            missing.sort_by(|a, b| a.sweep_id.cmp(&b.sweep_id));
            unread.extend(missing.into_iter().filter(|u| named.insert(u.stem.clone())));
        }
    }
    listing.keys = keys;
    unread
}

/// The report's order: scenario, run index, sweep, then the trace's path (directory, file
/// name).
fn sort_for_display(listing: &mut Listing) {
    let rank = |field: fn(&Group) -> &str| -> Vec<u32> {
        let names: BTreeSet<&str> = listing.groups.iter().map(field).collect();
        let order: HashMap<&str, u32> = names
            .into_iter()
            .enumerate()
            .map(|(i, n)| (n, i as u32))
            .collect();
        listing.groups.iter().map(|g| order[field(g)]).collect()
    };
    let scenario = rank(|g| &g.scenario);
    let sweep = rank(|g| &g.sweep);
    let mut by_path: Vec<u16> = (0..listing.dirs.len() as u16).collect();
    by_path.sort_by(|&a, &b| listing.dirs[usize::from(a)].cmp(&listing.dirs[usize::from(b)]));
    let mut dir_rank = vec![0u16; listing.dirs.len()];
    for (rank, &d) in by_path.iter().enumerate() {
        dir_rank[usize::from(d)] = rank as u16;
    }
    // A directory inside another one given: paths compare component by component, so the
    // file names take part before the directories are told apart.
    // (In path order a directory comes right before what is inside it.)
    let nested = by_path
        .windows(2)
        .any(|w| listing.dirs[usize::from(w[1])].starts_with(&listing.dirs[usize::from(w[0])]));
    let mut keys = std::mem::take(&mut listing.keys);
    keys.sort_unstable_by(|a, b| {
        let (ga, gb) = (a.group as usize, b.group as usize);
        (scenario[ga], a.run_index, sweep[ga])
            .cmp(&(scenario[gb], b.run_index, sweep[gb]))
            .then_with(|| {
                if a.dir() == b.dir() {
                    listing.name_cmp(a, b)
                } else if nested {
                    listing.path(a).cmp(&listing.path(b))
                } else {
                    dir_rank[usize::from(a.dir())].cmp(&dir_rank[usize::from(b.dir())])
                }
            })
    });
    listing.keys = keys;
}

/// What the page's details are planned from, once the keys are in the report's order.
struct Page<'a> {
    listing: &'a Listing,
    clusters: &'a Clusters,
    cluster_runs: &'a [usize],
    cluster_first: &'a [Option<usize>],
    aggs: &'a BTreeMap<String, Aggregator>,
    scenario_errors: &'a [super::ScenarioError],
}

impl Page<'_> {
    /// The clusters in the ladder's order, each listed one with its evidence (from its first
    /// run, read again) and the runs it shows in full.
    fn details(&self, latencies: BTreeMap<u64, u64>) -> Details {
        let listing = self.listing;
        // In triage's order before its sort: scenario, failed layers, reason.
        let mut ids: Vec<usize> = (0..self.clusters.keys.len())
            .filter(|&c| self.cluster_runs[c] > 0)
            .collect();
        ids.sort_by(|&a, &b| {
            let (a, b) = (&self.clusters.keys[a], &self.clusters.keys[b]);
            (&a.scenario, &a.layers, &a.reason).cmp(&(&b.scenario, &b.layers, &b.reason))
        });
        let mut heads: Vec<(Head, Option<usize>)> = ids
            .iter()
            .map(|&c| {
                let key = &self.clusters.keys[c];
                let first = self.cluster_first[c].map(|i| &listing.keys[i]);
                let head = Head {
                    scenario_id: key.scenario.clone(),
                    verdict: Verdict::Error,
                    failed_layers: key.layers.iter().map(|l| (*l).to_owned()).collect(),
                    reason: key.reason.clone(),
                    rung: first.map_or(Rung::Wiring, Key::rung),
                    evidence: String::new(),
                    runs: self.cluster_runs[c],
                    of: self
                        .aggs
                        .get(&key.scenario)
                        .map_or(0, |a| a.runs() as usize),
                };
                (head, Some(c))
            })
            .collect();
        heads.extend(
            self.scenario_errors
                .iter()
                .map(|e| (Head::of_scenario_error(e), None)),
        );
        // Triage's stable sort, of indexes in that order.
        let mut order: Vec<usize> = (0..heads.len()).collect();
        order.sort_by(|&a, &b| triage::head_order(&heads[a].0, &heads[b].0));
        let not_passed = heads.iter().map(|(h, _)| h.runs).sum();
        let hidden = heads.len().saturating_sub(html::MAX_CLUSTERS);
        let listed: Vec<usize> = order.into_iter().take(html::MAX_CLUSTERS).collect();
        let available: Vec<usize> = listed
            .iter()
            .map(|&i| {
                if heads[i].1.is_some() {
                    heads[i].0.runs
                } else {
                    0
                }
            })
            .collect();
        let budgets = html::budgets(&available);
        // The positions of the runs each cluster shows, then one walk to find them.
        let mut wanted: HashMap<usize, (Vec<usize>, usize)> = HashMap::new();
        for (&i, (&len, &b)) in listed.iter().zip(available.iter().zip(&budgets)) {
            if let (Some(c), true) = (heads[i].1, b > 0) {
                wanted.insert(c, (html::positions(len, b), 0));
            }
        }
        let mut picked: HashMap<usize, Vec<usize>> = HashMap::new();
        let mut seen = vec![0usize; self.clusters.keys.len()];
        if !wanted.is_empty() {
            for (i, k) in listing.keys.iter().enumerate() {
                if k.cluster == NO_CLUSTER {
                    continue;
                }
                let c = k.cluster as usize;
                let at = seen[c];
                seen[c] += 1;
                if let Some((positions, next)) = wanted.get_mut(&c)
                    && positions.get(*next) == Some(&at)
                {
                    *next += 1;
                    picked.entry(c).or_default().push(i);
                }
            }
        }
        let artifacts = listing.artifacts(picked.values().flatten().copied());
        let none = HashMap::new();
        let listed = listed
            .into_iter()
            .map(|i| {
                let (mut head, cluster) = heads[i].clone();
                let Some(c) = cluster else {
                    return (head, Vec::new());
                };
                let first = self.cluster_first[c].map(|i| &listing.keys[i]);
                match first
                    .and_then(|k| listing.load(k, &none).ok())
                    .and_then(|run| triage::judge(&run))
                {
                    Some((verdict, _, _, _, evidence)) => {
                        head.verdict = verdict;
                        head.evidence = evidence;
                    }
                    None => {
                        head.verdict = match first.map(Key::verdict) {
                            Some(FAIL) => Verdict::Fail,
                            _ => Verdict::Error,
                        };
                        head.evidence =
                            "the run's files changed while the report read them".to_owned();
                    }
                }
                let runs = picked
                    .get(&c)
                    .into_iter()
                    .flatten()
                    .filter_map(|&i| listing.load(&listing.keys[i], &artifacts).ok())
                    .collect();
                (head, runs)
            })
            .collect();
        Details {
            first: None,
            last: None,
            hooks: Vec::new(),
            latencies,
            listed,
            hidden,
            not_passed,
        }
    }

    /// Settles what the readers gathered from every file for the runs counted: a hook
    /// recorded differently by different runs takes the first run's provenance in the
    /// report's order, and when a duplicate differed from the run it repeats (`clean` false),
    /// the span and hooks are gathered again from the runs counted alone.
    fn extras(&self, extras: &mut Extras, clean: bool) {
        let listing = self.listing;
        if !clean {
            let mut again = Extras::default();
            for k in &listing.keys {
                if let Ok(t) = read_projection(&listing.path(k)) {
                    again.add(&t);
                }
            }
            *extras = again;
        }
        let mut open: BTreeSet<HookKey> = extras
            .hooks
            .iter()
            .filter(|(_, (_, varies))| *varies)
            .map(|(k, _)| k.clone())
            .collect();
        for k in &listing.keys {
            if open.is_empty() {
                break;
            }
            let Ok(t) = read_projection(&listing.path(k)) else {
                continue;
            };
            for h in t.hooks.iter().flatten() {
                let key = hook_key(h);
                if open.remove(&key)
                    && let Some(slot) = extras.hooks.get_mut(&key)
                {
                    slot.0 = h.clone();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_projection_keeps_what_a_report_reads_and_needs_a_trace() {
        let mut t = Trace::new("r-1", "order-status");
        t.sweep_id = "s-1".into();
        t.run_index = 3;
        t.agent.label = "demo".into();
        t.started_at = "2026-12-01T00:00:00Z".into();
        t.ended_at = "2026-12-01T00:00:01Z".into();
        for (latency_ms, error) in [(12, None), (30, Some("timed out".to_owned()))] {
            let mut turn = windtunnel_model::TurnRecord::default();
            turn.latency_ms = latency_ms;
            turn.error = error;
            turn.reply = Some("x".repeat(1000));
            t.turns.push(turn);
        }
        let mut call = windtunnel_model::ToolCall::default();
        call.arguments = serde_json::json!({"deep": [1, {"a": null}]});
        t.evidence.tool_calls.push(call);
        let p: Projection = load::parse_json(&serde_json::to_vec(&t).unwrap()).unwrap();
        assert_eq!(
            (&*p.run_id, &*p.sweep_id, &*p.scenario_id, p.run_index),
            ("r-1", "s-1", "order-status", 3)
        );
        assert_eq!(
            (&*p.agent.label, &*p.started_at),
            ("demo", "2026-12-01T00:00:00Z")
        );
        assert_eq!(latency(&p), 42);
        assert_eq!(counted_latencies(&p).collect::<Vec<_>>(), [12]);
        assert!(!p.tool_errors() && p.denial.is_none() && p.hooks.is_none());
        t.evidence.tool_calls[0].error = Some("boom".into());
        t.denial = Some(windtunnel_model::Denial::default());
        let p: Projection = load::parse_json(&serde_json::to_vec(&t).unwrap()).unwrap();
        assert!(p.tool_errors() && p.denial.is_some());
        // Not a trace: foreign JSON, or a trace without a field every trace has.
        let mut v = serde_json::to_value(&t).unwrap();
        v.as_object_mut().unwrap().remove("surface");
        let without = serde_json::to_vec(&v).unwrap();
        for bad in [
            &b"{\"model\": \"gpt\"}"[..],
            b"[]",
            b"null",
            b"{\"run_id\": ",
            &without,
        ] {
            assert!(load::parse_json::<Projection>(bad).is_err());
        }
    }

    #[test]
    fn stems_pack_and_unpack_in_name_order() {
        let a = "20261201T183442Z_70b49168";
        let (hi, lo) = pack_stem(a).unwrap();
        assert_eq!(unpack_stem(hi, lo), a);
        let b = "20261201T183442Z_70b4916a";
        assert!(pack_stem(b).unwrap() > (hi, lo));
        let c = "20261201T183443Z_00000000";
        assert!(pack_stem(c).unwrap() > pack_stem(b).unwrap());
        let top = "99999999T999999Z_ffffffff";
        let (hi, lo) = pack_stem(top).unwrap();
        assert!(hi < 1 << 48, "room for the directory beside it");
        assert_eq!(unpack_stem(hi, lo), top);
        for odd in [
            "20261201T183442Z_70B49168",
            "20261201T183442Z_70b4916",
            "run-1",
            "20261201X183442Z_70b49168",
        ] {
            assert_eq!(pack_stem(odd), None, "{odd}");
        }
        assert_eq!(std::mem::size_of::<Key>(), 40);
    }
}

/// The reader's rules, on real sweeps made hostile in every way there is a rule for: what
/// counts, what is skipped with which warning, duplicates, journals, shards; the table lists
/// at most [`SHOWN_PER_SCENARIO`] not-passed runs per scenario and counts the rest.
#[cfg(test)]
mod rules {
    use std::path::{Path, PathBuf};

    use serde_json::Value;
    use windtunnel_model::HookProvenance;

    use super::*;
    use crate::report::{Report, html};
    use crate::runner::{RunConfig, Shard, Sweep, run_sweep};

    /// One sweep of the demo pack into `out`.
    fn sweep(out: &Path, agent: &str, runs: u32, tune: impl FnOnce(&mut RunConfig)) {
        let mut cfg = RunConfig::new(crate::runtime::builtin_agent(agent).unwrap(), out);
        cfg.runs = Some(runs);
        tune(&mut cfg);
        let sweep = Sweep::new(&cfg);
        run_sweep(&crate::pack::Pack::demo().scenarios, &cfg, &sweep).unwrap();
    }

    fn traces(dir: &Path) -> Vec<PathBuf> {
        store::trace_files(dir).unwrap()
    }

    fn copy_dir(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        for e in std::fs::read_dir(from).unwrap() {
            let p = e.unwrap().path();
            if p.is_file() {
                std::fs::copy(&p, to.join(p.file_name().unwrap())).unwrap();
            }
        }
    }

    fn edit(path: &Path, f: impl FnOnce(&mut Value)) {
        let mut v: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
        f(&mut v);
        std::fs::write(path, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
    }

    fn scanned(dirs: &[PathBuf]) -> Report {
        let want = Want {
            listing: true,
            page: true,
            reasons: true,
            ..Want::default()
        };
        Report::from_scan(scan(dirs, want).unwrap())
    }

    /// The report over `dirs`, its streamed JUnit checked against quick-junit's, every run it
    /// lists read again whole, and the rows the table shows checked against every row.
    fn agree(dirs: &[PathBuf]) -> Report {
        let new = scanned(dirs);
        assert_eq!(
            new.to_junit_reference(),
            new.to_junit(),
            "quick-junit's JUnit of {dirs:?}"
        );
        let listing = new.listing.as_ref().unwrap();
        let whole: Vec<LoadedRun> = listing.whole_runs().map(Result::unwrap).collect();
        assert_eq!(whole.len(), listing.len(), "every run read again whole");
        // The rows the table and Markdown list: the first of each scenario's not-passed runs.
        let mut seen: BTreeMap<String, usize> = BTreeMap::new();
        let first: Vec<String> = new
            .all_rows()
            .filter(|r| r.verdict != Some(Verdict::Pass))
            .filter(|r| {
                let n = seen.entry(r.scenario_id.clone()).or_default();
                *n += 1;
                *n <= SHOWN_PER_SCENARIO
            })
            .map(|r| serde_json::to_string(&*r).unwrap())
            .collect();
        let shown: Vec<String> = new
            .runs
            .iter()
            .map(|r| serde_json::to_string(r).unwrap())
            .collect();
        assert_eq!(first, shown, "{dirs:?}");
        new
    }

    #[test]
    fn copies_repeated_directories_pinned_sweeps_and_many_failures() {
        let tmp = tempfile::tempdir().unwrap();
        let (a, b, c) = (
            tmp.path().join("a"),
            tmp.path().join("b"),
            tmp.path().join("c"),
        );
        // Two sweeps in one directory: 36 failing runs in three scenarios, 15 passing.
        sweep(&a, "demo-forbidden-tool", 12, |_| {});
        sweep(&a, "demo", 5, |cfg| cfg.jobs = 2);
        copy_dir(&a, &b);
        // Pinned sweeps of two agents: the same run ids, different runs.
        for agent in ["demo", "demo-forbidden-tool"] {
            sweep(&c, agent, 2, |cfg| {
                cfg.ids = crate::clock::Ids::seeded(7);
                cfg.clock = crate::clock::Clock::fixed("2026-11-30T05:15:00Z").unwrap();
            });
        }
        let new = agree(std::slice::from_ref(&a));
        assert_eq!(new.pack.runs, 51);
        assert_eq!(
            new.runs.len(),
            3 * SHOWN_PER_SCENARIO,
            "ten a failing scenario"
        );
        let table = new.to_table();
        assert!(
            table.contains("… and 2 more run(s) of escalate-human that did not pass"),
            "{table}"
        );
        assert_eq!(table.matches("\nFAIL ").count(), 3 * SHOWN_PER_SCENARIO);
        let md = new.to_markdown();
        assert!(md.contains("… and 2 more run(s) of order-status"), "{md}");
        let json: Value = serde_json::from_str(&new.to_json()).unwrap();
        assert_eq!(
            json["runs"].as_array().unwrap().len(),
            51,
            "the JSON lists every run"
        );
        let page = html::report_page(&new, None);
        assert!(
            page.contains("Showing full details for <strong>15</strong> of <strong>36</strong>"),
            "{}",
            &page[page.find("Showing").unwrap_or(0)..][..200]
        );
        for (dirs, runs, duplicates) in [
            (vec![a.clone(), b.clone()], 51, 51),
            (vec![b.clone(), a.clone()], 51, 51),
            (vec![a.clone(), a.clone()], 51, 0),
            (vec![a.clone(), a.join("."), b.clone()], 51, 51),
            (vec![c.clone()], 12, 0),
            (vec![a.clone(), c.clone(), b.clone()], 63, 51),
        ] {
            let new = agree(&dirs);
            assert_eq!(
                (new.pack.runs, new.duplicates),
                (runs, duplicates),
                "{dirs:?}"
            );
        }
        // The copies not counted are those of the directory given later.
        let read = scan(&[b.clone(), a.clone()], Want::default()).unwrap();
        assert_eq!(read.duplicate_paths.len(), 51);
        assert!(read.duplicate_paths.iter().all(|p| p.starts_with(&a)));
        let new = agree(std::slice::from_ref(&c));
        assert_eq!(new.pack.runs, 12, "both pinned sweeps count");
        assert_eq!(new.agents, ["demo", "demo-forbidden-tool"]);
    }

    #[test]
    fn hostile_files_are_skipped_with_one_warning_each() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path().join("runs");
        sweep(&d, "demo-forbidden-tool", 3, |_| {});
        let t = traces(&d);
        assert_eq!(t.len(), 9);
        std::fs::write(d.join("config.json"), r#"{"model": "gpt", "retries": 3}"#).unwrap();
        std::fs::write(d.join("20250101T000000Z_deadbeef.json"), "{\"run_id\": ").unwrap();
        // A field of the wrong type where a report reads nothing: still not a trace.
        let bad = d.join("20250101T000000Z_badtype0.json");
        std::fs::copy(&t[0], &bad).unwrap();
        edit(&bad, |v| v["turns"][0]["input"] = 5.into());
        edit(&bad, |v| v["run_id"] = "another-run".into());
        let big = std::fs::File::create(d.join("20250101T000000Z_bigbigbi.json")).unwrap();
        big.set_len(65 << 20).unwrap();
        std::os::unix::fs::symlink(&t[1], d.join("20250101T000000Z_linklink.json")).unwrap();
        let fifo = d.join("20250101T000000Z_fifofifo.json");
        let cpath = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(cpath.as_ptr(), 0o600) }, 0);
        std::fs::create_dir(d.join("20250101T000000Z_adirecto.json")).unwrap();
        std::fs::write(d.join(".wt-tmp-half"), "{\"half\": ").unwrap();
        // A score for another run, a corrupt score, a missing one, one without its trace.
        let score = |p: &Path| p.with_extension("score.json");
        std::fs::copy(score(&t[3]), score(&t[2])).unwrap();
        std::fs::write(score(&t[4]), "not json").unwrap();
        std::fs::remove_file(score(&t[5])).unwrap();
        std::fs::write(d.join("20250101T000000Z_orphan00.score.json"), "{}").unwrap();
        // Odd names: a copy of a run under another name (the same run: counted once), a run
        // of its own under a name the runner never writes.
        std::fs::copy(&t[6], d.join("run-copy.json")).unwrap();
        std::fs::copy(score(&t[6]), d.join("run-copy.score.json")).unwrap();
        let own = d.join("A-run.json");
        std::fs::copy(&t[7], &own).unwrap();
        edit(&own, |v| v["run_id"] = "own-run".into());
        std::fs::copy(score(&t[7]), score(&own)).unwrap();
        edit(&score(&own), |v| v["run_id"] = "own-run".into());
        let upper = d.join("20261201T000000Z_ABCDEF01.json");
        std::fs::copy(&t[1], &upper).unwrap();
        edit(&upper, |v| v["run_id"] = "upper-run".into());
        // Runs the journal names whose traces are gone or unreadable: ERROR, never nothing.
        std::fs::remove_file(&t[8]).unwrap();
        std::fs::write(&t[1], "{").unwrap();
        let new = scanned(std::slice::from_ref(&d));
        assert_eq!(new.unread.len(), 2, "{:?}", new.unread);
        assert_eq!(new.duplicates, 1);
        let trace_1 = t[1].file_name().unwrap().to_string_lossy().into_owned();
        let trace_1 = format!("{trace_1}: not a wt trace (EOF while parsing");
        for b in [
            trace_1.as_str(),
            "config.json: not a wt trace (missing field",
            "_deadbeef.json: not a wt trace (EOF while parsing",
            "_bigbigbi.json: 68157440 bytes is over the 64 MiB limit",
            "_linklink.json: not a regular file",
            "_fifofifo.json: not a regular file",
            "_adirecto.json: not a regular file",
            ".score.json does not parse",
            ".score.json is for run",
        ] {
            assert!(
                new.warnings.iter().any(|w| w.contains(b)),
                "{b}: {:?}",
                new.warnings
            );
        }
        // A field of the wrong type where a report reads nothing is skipped when the run is
        // read whole (what `wt triage` and the page do), with the data model's own message.
        let whole: Vec<Result<LoadedRun, String>> =
            new.listing.as_ref().unwrap().whole_runs().collect();
        let failed: Vec<&String> = whole.iter().filter_map(|r| r.as_ref().err()).collect();
        assert_eq!(failed.len(), 1, "{failed:?}");
        assert!(
            failed[0].contains(
                "_badtype0.json: not a wt trace (invalid type: integer `5`, expected a string"
            ),
            "{failed:?}"
        );
    }

    #[test]
    fn journals_partial_sweeps_missing_shards_and_nested_directories() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        // Shard 1 of 2 only: shard 2's runs are missing.
        let s1 = root.join("shard1");
        sweep(&s1, "demo", 4, |cfg| {
            cfg.shard = Some(Shard { index: 1, count: 2 });
            cfg.ids = crate::clock::Ids::seeded(3);
        });
        // Killed (no SweepEnded), interrupted (exit code 130).
        let (killed, stopped) = (root.join("killed"), root.join("stopped"));
        sweep(&killed, "demo", 2, |_| {});
        sweep(&stopped, "demo-forbidden-tool", 2, |_| {});
        let journal = |d: &Path| {
            std::fs::read_dir(d)
                .unwrap()
                .map(|e| e.unwrap().path())
                .find(|p| p.to_string_lossy().ends_with(".events.jsonl"))
                .unwrap()
        };
        let rewrite = |p: &Path, f: &dyn Fn(&str) -> Option<String>| {
            let text: String = std::fs::read_to_string(p)
                .unwrap()
                .lines()
                .filter_map(f)
                .map(|l| format!("{l}\n"))
                .collect();
            std::fs::write(p, text).unwrap();
        };
        rewrite(&journal(&killed), &|l| {
            (!l.contains("\"SweepEnded\"")).then(|| l.to_owned())
        });
        rewrite(&journal(&stopped), &|l| {
            Some(if l.contains("\"SweepEnded\"") {
                l.replace("\"exit_code\":1", "\"exit_code\":130")
            } else {
                l.to_owned()
            })
        });
        // A copied journal (the same bytes: read once) and one of the same length that
        // differs (read too), a foreign file with the journal suffix, an empty directory.
        let copy = root.join("copy");
        copy_dir(&killed, &copy);
        let same_len = journal(&copy);
        let text = std::fs::read_to_string(&same_len).unwrap();
        let other = root.join("other");
        std::fs::create_dir(&other).unwrap();
        std::fs::write(
            other.join("x.events.jsonl"),
            text.replacen("\"hooks\":[]", "\"hooks\":[ ]", 1)
                .replacen("\"v\":1,", "\"v\":1", 1),
        )
        .unwrap();
        std::fs::write(s1.join("notes.events.jsonl"), "hello\n").unwrap();
        let empty = root.join("empty");
        std::fs::create_dir(&empty).unwrap();
        // A directory inside another one given, with a run of the same scenario, index and
        // sweep: ordered by path, component by component.
        let nested = killed.join("sub");
        std::fs::create_dir(&nested).unwrap();
        let t = traces(&killed)[0].clone();
        let at = nested.join("aaa.json");
        std::fs::copy(&t, &at).unwrap();
        edit(&at, |v| v["run_id"] = "nested-run".into());
        std::fs::copy(&t, killed.join("zzz.json")).unwrap();
        // A warning about a file in a later directory than one about a journal.
        std::fs::write(nested.join("foreign.json"), "{}").unwrap();
        edit(&killed.join("zzz.json"), |v| {
            v["run_id"] = "outer-run".into()
        });
        for dirs in [
            vec![s1.clone()],
            vec![killed.clone(), stopped.clone()],
            vec![killed.clone(), copy.clone(), other.clone()],
            vec![s1.clone(), empty.clone(), nested.clone(), killed.clone()],
            vec![nested.clone(), killed.clone()],
        ] {
            let new = agree(&dirs);
            assert_eq!(new.gate, crate::exit::RUN_ERROR, "{dirs:?}");
        }
        let new = agree(&[s1.clone(), empty.clone()]);
        assert_eq!(new.gaps.len(), 2, "{:?}", new.gaps);
        let new = agree(&[killed.clone(), copy.clone(), other.clone()]);
        let status: Vec<&str> = new.sweeps.iter().map(|s| s.status.as_str()).collect();
        assert_eq!(status, ["incomplete"], "one sweep");
        assert_eq!(
            new.sweeps[0].journals.len(),
            2,
            "the copy is read once, the other not"
        );
    }

    #[test]
    fn hooks_recorded_differently_and_a_copy_that_changed() {
        let tmp = tempfile::tempdir().unwrap();
        let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
        let hook = |setting: &str| {
            let mut h = HookProvenance::default();
            h.name = "probe".into();
            h.source = "built-in".into();
            h.version = "1".into();
            h.sdk_version = "1.4".into();
            h.settings.insert("WT_PROBE_X".into(), setting.into());
            Some(vec![h])
        };
        sweep(&a, "demo-forbidden-tool", 2, |cfg| cfg.hooks = hook("1"));
        sweep(&a, "demo", 2, |cfg| cfg.hooks = hook("2"));
        let new = agree(std::slice::from_ref(&a));
        let d = new.details.as_ref().unwrap();
        assert_eq!(d.hooks.len(), 1);
        // A copy of a run whose file differs (the same run by its identity): the first
        // directory's file counts, and only it says when the sweep ended and which hooks ran.
        copy_dir(&a, &b);
        for t in traces(&b) {
            edit(&t, |v| {
                v["ended_at"] = "2099-01-01T00:00:00Z".into();
                v["hooks"][0]["version"] = "2".into();
            });
        }
        let new = agree(&[a.clone(), b.clone()]);
        let d = new.details.as_ref().unwrap();
        assert!(d.last.as_deref().is_some_and(|l| !l.starts_with("2099")));
        assert_eq!(d.hooks.len(), 1);
        let new = agree(&[b.clone(), a.clone()]);
        assert!(new.details.unwrap().last.unwrap().starts_with("2099"));
    }

    #[test]
    fn scenarios_that_could_not_run_share_their_run_indexes_with_runs() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path().join("runs");
        sweep(&d, "demo-forbidden-tool", 3, |_| {});
        // Two sweeps (of one id prefix) whose order-status could not run: their cases take
        // the names `order-status#0` … beside the runs'.
        let line = |sweep: &str, event: &str, extra: &str| {
            format!("{{\"v\":1,\"sweep_id\":\"{sweep}\",\"event\":\"{event}\"{extra}}}\n")
        };
        for (name, sweep, runs) in [("x", "zz-broken-1", 2), ("y", "zz-broken-2", 4)] {
            let text = [
                line(sweep, "SweepStarted", ",\"pack\":\"demo\""),
                line(
                    sweep,
                    "ScenarioEnded",
                    &format!(",\"scenario_id\":\"order-status\",\"runs\":{runs},\"error\":\"provisioning failed: <x>\""),
                ),
                line(sweep, "SweepEnded", ",\"exit_code\":3"),
            ]
            .concat();
            std::fs::write(d.join(format!("{name}.events.jsonl")), text).unwrap();
        }
        let new = agree(std::slice::from_ref(&d));
        let junit = new.to_junit();
        for name in [
            "order-status#0 @zz-broke\"",
            "order-status#0 @zz-broke (2)\"",
            "order-status#3\"",
        ] {
            assert!(junit.contains(&format!("name=\"{name}")), "{name}: {junit}");
        }
        assert_eq!(junit.matches("<testcase ").count(), 9 + 6);
    }

    #[test]
    fn warnings_past_the_bound_are_counted() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path().join("runs");
        sweep(&d, "demo", 1, |_| {});
        for i in 0..MAX_WARNINGS + 50 {
            std::fs::write(d.join(format!("foreign-{i:05}.json")), "{}").unwrap();
        }
        let new = scanned(std::slice::from_ref(&d));
        assert_eq!(new.warnings.len(), MAX_WARNINGS + 1);
        // The first of them, in file name order.
        assert!(new.warnings[0].contains("foreign-00000.json: not a wt trace"));
        assert!(new.warnings[MAX_WARNINGS - 1].contains("foreign-00999.json"));
        assert_eq!(
            new.warnings[MAX_WARNINGS],
            "… and 50 more warning(s) like these"
        );
    }
}
