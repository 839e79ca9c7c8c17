//! `wt report` at any size: the runs directories read in parallel, counted as they are read,
//! and nothing kept per run but a 40-byte [`Key`] (docs/reports.md, "Reports at scale").
//!
//! The rules are the loader's ([`super::load`]): the same files are runs, the same sidecar
//! rule, the same warnings, duplicates counted once (the first directory given wins), the
//! journals read for how sweeps ended and for runs whose trace was not read. What differs is
//! what is held:
//! - each trace is parsed for the fields a report counts (ids, agent, start time, turn
//!   latencies; every other field of a trace must be there, but is skipped unread), and its
//!   score in full; both are dropped once counted into the scenario's [`Aggregator`] and
//!   [`UsageSum`], which merge exactly in any order;
//! - a run is then a [`Key`]: where its file is, its scenario, sweep and agent (as an index),
//!   its run index, verdict and latency, and a hash of what makes it the run it is;
//! - the rows a view lists are built again from the keys, re-reading each run's score: the
//!   table's few ([`SHOWN_PER_SCENARIO`] not-passed runs per scenario) at once, the JSON
//!   view's every row one at a time while it is written.
//!
//! A directory of 1,000,000 runs costs about 40 MB of keys; everything else is bounded by
//! the number of scenarios, sweeps and distinct latencies.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError, mpsc};

use serde::Deserialize;
use serde::de::IgnoredAny;
use windtunnel_sdk::model::{Score, Verdict, is_slug};

use super::load::{self, Journals, MAX_TRACE_BYTES, read_bounded_into, read_score};
use super::{Found, RunRow, UsageSum};
use crate::score::{Aggregator, Contribution};
use crate::store::{self, StoreError};

/// How many of a scenario's runs that did not pass the table and Markdown views list; the
/// rest are counted in one line (the JSON view lists every run).
pub(crate) const SHOWN_PER_SCENARIO: usize = 10;
/// Warnings kept (a directory of foreign files would otherwise hold one per file).
const MAX_WARNINGS: usize = 1000;
/// File names handed to a reader at a time.
const BATCH: usize = 64;

/// A trace, as far as a report reads it. The fields it skips must still be there: a file
/// without them is not a trace.
#[derive(Deserialize)]
struct LeanTrace {
    #[serde(rename = "schema_version")]
    _schema_version: IgnoredAny,
    run_id: String,
    sweep_id: String,
    scenario_id: String,
    run_index: u32,
    #[serde(rename = "session_id")]
    _session_id: IgnoredAny,
    agent: LeanAgent,
    started_at: String,
    #[serde(rename = "ended_at")]
    _ended_at: IgnoredAny,
    #[serde(rename = "surface")]
    _surface: IgnoredAny,
    turns: Vec<LeanTurn>,
    #[serde(rename = "evidence")]
    _evidence: IgnoredAny,
}

#[derive(Deserialize)]
struct LeanAgent {
    label: String,
}

#[derive(Deserialize)]
struct LeanTurn {
    latency_ms: u64,
    #[serde(default)]
    error: Option<IgnoredAny>,
}

impl LeanTrace {
    fn identity(&self) -> u64 {
        let mut h = std::hash::DefaultHasher::new();
        (&self.run_id, &self.sweep_id, &self.agent.label, &self.started_at).hash(&mut h);
        h.finish()
    }
}

fn run_hash(run_id: &str) -> u32 {
    let mut h = std::hash::DefaultHasher::new();
    run_id.hash(&mut h);
    h.finish() as u32
}

/// One run, once counted: enough to order it, find its files again and list it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Key {
    /// Hash of run id, sweep, agent and start time: equal for copies of one run.
    identity: u64,
    /// `YYYYMMDDHHMMSS` of a `YYYYMMDDTHHMMSSZ_hhhhhhhh` stem, or the index of the stem in
    /// [`Listing::odd`] (with [`ODD`]).
    stem_hi: u64,
    /// The stem's eight hex digits.
    stem_lo: u32,
    /// The (scenario, sweep, agent) in [`Listing::groups`].
    group: u32,
    run_index: u32,
    /// Hash of the run id alone, to recognize its score again.
    run_hash: u32,
    /// Turn latencies summed (saturating).
    latency_ms: u32,
    /// Index of the directory, in the order given.
    dir: u16,
    verdict: u8,
    flags: u8,
}

const ODD: u8 = 1;
const DUPLICATE: u8 = 2;

const PASS: u8 = 0;
const FAIL: u8 = 1;
const ERROR: u8 = 2;
const UNSCORED: u8 = 3;

impl Key {
    fn passed(&self) -> bool {
        self.verdict == PASS
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

/// Where every run counted is, in the report's order (scenario, run index, sweep,
/// directory, file).
#[derive(Clone, Debug, Default)]
pub(crate) struct Listing {
    keys: Vec<Key>,
    groups: Vec<Group>,
    dirs: Vec<PathBuf>,
    odd: Vec<Box<str>>,
}

impl Listing {
    fn stem(&self, k: &Key) -> Cow<'_, str> {
        if k.flags & ODD != 0 {
            Cow::Borrowed(&self.odd[k.stem_hi as usize])
        } else {
            Cow::Owned(unpack_stem(k.stem_hi, k.stem_lo))
        }
    }

    fn path(&self, k: &Key) -> PathBuf {
        self.dirs[usize::from(k.dir)].join(format!("{}.json", self.stem(k)))
    }

    /// Orders two runs' file names as the loader's sorted listing does.
    fn name_cmp(&self, a: &Key, b: &Key) -> Ordering {
        if (a.flags | b.flags) & ODD == 0 {
            (a.stem_hi, a.stem_lo).cmp(&(b.stem_hi, b.stem_lo))
        } else {
            format!("{}.json", self.stem(a)).cmp(&format!("{}.json", self.stem(b)))
        }
    }

    /// The row of one run, its score read again. A score that is no longer the one counted
    /// (rewritten since) is shown as read now; one that is gone says so.
    fn row(&self, k: &Key) -> RunRow {
        let path = self.path(k);
        let g = &self.groups[k.group as usize];
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
        let mut ignored = Vec::new();
        let score = load::read_bounded(&path.with_extension("score.json"), load::MAX_SIDECAR_BYTES)
            .ok()
            .and_then(|b| serde_json::from_slice::<Score>(&b).ok())
            .filter(|s| run_hash(&s.run_id) == k.run_hash);
        let (score, problem) = match score {
            Some(s) => (Some(s), None),
            // Not the run's score (or none): what the loader says of it, from the trace.
            None => match read_lean(&path) {
                Ok(t) => {
                    row.run_id = t.run_id.clone();
                    read_score(&path, &t.run_id, &mut ignored)
                }
                Err(why) => (None, Some(format!("trace {}: {why}", path.display()))),
            },
        };
        if let Some(s) = &score {
            row.run_id = s.run_id.clone();
            row.verdict = Some(s.verdict);
            row.failures = s
                .layers()
                .into_iter()
                .filter(|(_, l)| !l.passed)
                .map(|(n, l)| (n.to_owned(), l.detail.clone()))
                .collect();
            row.error = s.error.clone();
            row.usage = s.usage.clone();
        } else {
            row.error = problem;
        }
        row
    }

    /// Every run's row, built as it is asked for.
    pub(crate) fn rows(&self) -> impl Iterator<Item = RunRow> + '_ {
        self.keys.iter().map(|k| self.row(k))
    }
}

fn read_lean(path: &Path) -> Result<LeanTrace, String> {
    let bytes = load::read_bounded(path, MAX_TRACE_BYTES).map_err(|e| e.to_string())?;
    serde_json::from_slice(&bytes).map_err(|e| format!("not a wt trace ({e})"))
}

/// What a report over many runs holds: aggregates, the listing, and what the loader finds
/// beside runs.
pub(crate) struct Scan {
    pub aggs: BTreeMap<String, Aggregator>,
    pub usage: BTreeMap<String, UsageSum>,
    pub listing: Listing,
    /// The first [`SHOWN_PER_SCENARIO`] not-passed runs of each scenario, in order.
    pub shown: Vec<RunRow>,
    /// Per scenario, how many of its runs read did not pass.
    pub not_passed: BTreeMap<String, usize>,
    pub found: Found,
}

/// What one reader thread counted.
#[derive(Default)]
struct Part {
    keys: Vec<Vec<Key>>,
    aggs: BTreeMap<String, Aggregator>,
    usage: BTreeMap<String, UsageSum>,
    warnings: Vec<String>,
}

/// What the readers share.
struct Shared<'a> {
    dirs: &'a [PathBuf],
    groups: Mutex<(HashMap<Group, u32>, Vec<Group>)>,
    odd: Mutex<Vec<Box<str>>>,
}

impl Shared<'_> {
    fn group(&self, g: Group) -> u32 {
        let mut guard = self.groups.lock().unwrap_or_else(PoisonError::into_inner);
        let (index, all) = &mut *guard;
        if let Some(&i) = index.get(&g) {
            return i;
        }
        let i = all.len() as u32;
        all.push(g.clone());
        index.insert(g, i);
        i
    }
}

const CHUNK: usize = 16 * 1024;

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

    fn read(&mut self, shared: &Shared<'_>, dir: u16, name: &str, buf: &mut Vec<u8>) {
        let path = shared.dirs[usize::from(dir)].join(name);
        let shown = path.display();
        if let Err(why) = read_bounded_into(&path, MAX_TRACE_BYTES, buf) {
            self.warnings.push(format!("skipping {shown}: {why}"));
            return;
        }
        let t: LeanTrace = match serde_json::from_slice(buf) {
            Ok(t) => t,
            Err(e) => {
                self.warnings
                    .push(format!("skipping {shown}: not a wt trace ({e})"));
                return;
            }
        };
        if t.run_id.is_empty() || !is_slug(&t.scenario_id) {
            self.warnings.push(format!(
                "skipping {shown}: not a wt trace (empty run_id or invalid scenario_id)"
            ));
            return;
        }
        let (score, _) = read_score(&path, &t.run_id, &mut self.warnings);
        let c = Contribution::from_parts(
            score.as_ref(),
            t.turns
                .iter()
                .filter(|t| t.error.is_none())
                .map(|t| t.latency_ms),
        );
        self.aggs
            .entry(t.scenario_id.clone())
            .or_insert_with(|| Aggregator::new(&t.scenario_id))
            .add_run(&c);
        if let Some(u) = score.as_ref().and_then(|s| s.usage.as_ref()) {
            self.usage.entry(t.scenario_id.clone()).or_default().add(u);
        }
        let stem = &name[..name.len() - ".json".len()];
        let (stem_hi, stem_lo, flags) = match pack_stem(stem) {
            Some((hi, lo)) => (hi, lo, 0),
            None => {
                let mut odd = shared.odd.lock().unwrap_or_else(PoisonError::into_inner);
                odd.push(stem.into());
                ((odd.len() - 1) as u64, 0, ODD)
            }
        };
        let latency: u64 = t.turns.iter().map(|t| t.latency_ms).sum();
        self.push(Key {
            identity: t.identity(),
            stem_hi,
            stem_lo,
            group: shared.group(Group {
                scenario: t.scenario_id.clone(),
                sweep: t.sweep_id.clone(),
                agent: t.agent.label.clone(),
            }),
            run_index: t.run_index,
            run_hash: run_hash(&t.run_id),
            latency_ms: u32::try_from(latency).unwrap_or(u32::MAX),
            dir,
            verdict: match score.map(|s| s.verdict) {
                Some(Verdict::Pass) => PASS,
                Some(Verdict::Fail) => FAIL,
                Some(_) => ERROR,
                None => UNSCORED,
            },
            flags,
        });
    }
}

/// Reads every run directory in `dirs` (the loader's rules, see the module docs).
pub(crate) fn scan<P: AsRef<Path>>(dirs: &[P]) -> Result<Scan, StoreError> {
    let mut warnings = Vec::new();
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
                    let mut buf = Vec::new();
                    loop {
                        let job = rx.lock().unwrap_or_else(PoisonError::into_inner).recv();
                        let Ok((dir, names)) = job else { break };
                        for name in names {
                            part.read(shared, dir, &name, &mut buf);
                        }
                        if buf.capacity() > 1 << 20 {
                            buf = Vec::new();
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
    let total: usize = parts
        .iter()
        .map(|p| p.keys.iter().map(Vec::len).sum::<usize>())
        .sum();
    let mut keys = Vec::with_capacity(total);
    let mut read_warnings = Vec::new();
    for part in parts {
        for chunk in part.keys {
            keys.extend_from_slice(&chunk);
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
        read_warnings.extend(part.warnings);
    }
    // Readers finish in any order; warnings are listed in a stable one.
    read_warnings.sort();
    warnings.extend(read_warnings);
    let Shared { groups, odd, .. } = shared;
    let (_, groups) = groups.into_inner().unwrap_or_else(PoisonError::into_inner);
    let mut listing = Listing {
        keys,
        groups,
        odd: odd.into_inner().unwrap_or_else(PoisonError::into_inner),
        dirs: unique,
    };

    let duplicates = mark_duplicates(&mut listing, &mut aggs, &mut usage);

    // Journals, in the order the loader reads them.
    journal_paths.sort();
    let mut journals = Journals::forgetting_written();
    for (dir, name) in &journal_paths {
        journals.read(&listing.dirs[usize::from(*dir)].join(name), &mut warnings);
    }
    let unread = unread_runs(&mut listing, &journals.accepted);
    listing.keys.retain(|k| k.flags & DUPLICATE == 0);
    let mut runs_per_sweep: BTreeMap<String, usize> = BTreeMap::new();
    for k in &listing.keys {
        *runs_per_sweep
            .entry(listing.groups[k.group as usize].sweep.clone())
            .or_default() += 1;
    }
    let mut scenario_errors = Vec::new();
    let sweeps = journals.close(runs_per_sweep, &mut scenario_errors, &mut warnings);
    gaps.extend(load::missing_shards(&sweeps));

    sort_for_display(&mut listing);
    let mut not_passed: BTreeMap<String, usize> = BTreeMap::new();
    let mut shown = Vec::new();
    for k in listing.keys.iter().filter(|k| !k.passed()) {
        let scenario = &listing.groups[k.group as usize].scenario;
        let n = not_passed.entry(scenario.clone()).or_default();
        *n += 1;
        if *n <= SHOWN_PER_SCENARIO {
            shown.push(listing.row(k));
        }
    }
    if warnings.len() > MAX_WARNINGS {
        let more = warnings.len() - MAX_WARNINGS;
        warnings.truncate(MAX_WARNINGS);
        warnings.push(format!("… and {more} more warning(s) like these"));
    }
    let partial = sweeps.iter().any(|s| s.status.is_partial()) || !gaps.is_empty();
    Ok(Scan {
        aggs,
        usage,
        listing,
        shown,
        not_passed,
        found: Found {
            sweeps,
            scenario_errors,
            warnings,
            duplicates,
            gaps,
            unread,
            partial,
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

/// Marks every copy of a run after its first (by directory given, then file name) as a
/// duplicate, and takes it back out of the counts. Copies are found by their identity hash
/// and confirmed by reading them again (rare: a directory copied, or given under two names).
fn mark_duplicates(
    listing: &mut Listing,
    aggs: &mut BTreeMap<String, Aggregator>,
    usage: &mut BTreeMap<String, UsageSum>,
) -> usize {
    let mut keys = std::mem::take(&mut listing.keys);
    keys.sort_unstable_by(|a, b| {
        (a.identity, a.dir)
            .cmp(&(b.identity, b.dir))
            .then_with(|| listing.name_cmp(a, b))
    });
    let mut duplicates = 0;
    let mut i = 0;
    while i < keys.len() {
        let mut j = i + 1;
        while j < keys.len() && keys[j].identity == keys[i].identity {
            j += 1;
        }
        if j - i > 1 {
            let mut firsts: Vec<(String, String, String, String)> = Vec::new();
            for k in &mut keys[i..j] {
                let path = listing.path(k);
                let Ok(t) = read_lean(&path) else { continue };
                let id = (
                    t.run_id.clone(),
                    t.sweep_id.clone(),
                    t.agent.label.clone(),
                    t.started_at.clone(),
                );
                if !firsts.contains(&id) {
                    firsts.push(id);
                    continue;
                }
                k.flags |= DUPLICATE;
                duplicates += 1;
                let (score, _) = read_score(&path, &t.run_id, &mut Vec::new());
                let c = Contribution::from_parts(
                    score.as_ref(),
                    t.turns
                        .iter()
                        .filter(|t| t.error.is_none())
                        .map(|t| t.latency_ms),
                );
                if let Some(a) = aggs.get_mut(&t.scenario_id) {
                    a.remove_run(&c);
                }
                if let (Some(u), Some(sum)) = (
                    score.as_ref().and_then(|s| s.usage.as_ref()),
                    usage.get_mut(&t.scenario_id),
                ) {
                    sum.remove(u);
                }
            }
        }
        i = j;
    }
    listing.keys = keys;
    duplicates
}

/// The runs the accepted journals say were written whose trace was not read (duplicates'
/// files count as read). Leaves the keys sorted by file name.
fn unread_runs(listing: &mut Listing, journals: &[PathBuf]) -> Vec<super::UnreadRun> {
    let mut keys = std::mem::take(&mut listing.keys);
    keys.sort_unstable_by(|a, b| listing.name_cmp(a, b));
    let mut named = HashSet::new();
    let mut unread = Vec::new();
    for path in journals {
        load::for_each_written(path, |sweep, scenario, stem| {
            let found = match pack_stem(stem) {
                Some((hi, lo)) if !listing.odd.is_empty() => keys
                    .binary_search_by(|k| {
                        if k.flags & ODD == 0 {
                            (k.stem_hi, k.stem_lo).cmp(&(hi, lo))
                        } else {
                            format!("{}.json", listing.stem(k)).cmp(&format!("{stem}.json"))
                        }
                    })
                    .is_ok(),
                Some((hi, lo)) => keys
                    .binary_search_by(|k| (k.stem_hi, k.stem_lo).cmp(&(hi, lo)))
                    .is_ok(),
                None => keys
                    .binary_search_by(|k| {
                        format!("{}.json", listing.stem(k)).cmp(&format!("{stem}.json"))
                    })
                    .is_ok(),
            };
            if !found && named.insert(stem.to_owned()) {
                unread.push(super::UnreadRun {
                    sweep_id: sweep.to_owned(),
                    scenario_id: scenario.to_owned(),
                    stem: stem.to_owned(),
                });
            }
        });
    }
    listing.keys = keys;
    unread
}

/// The report's order: scenario, run index, sweep, directory, file name.
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
    let mut keys = std::mem::take(&mut listing.keys);
    keys.sort_unstable_by(|a, b| {
        let (ga, gb) = (a.group as usize, b.group as usize);
        (
            scenario[ga],
            a.run_index,
            sweep[ga],
            dir_rank[usize::from(a.dir)],
        )
            .cmp(&(
                scenario[gb],
                b.run_index,
                sweep[gb],
                dir_rank[usize::from(b.dir)],
            ))
            .then_with(|| listing.name_cmp(a, b))
    });
    listing.keys = keys;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stems_pack_and_unpack_in_name_order() {
        let a = "20261201T183442Z_70b49168";
        let (hi, lo) = pack_stem(a).unwrap();
        assert_eq!(unpack_stem(hi, lo), a);
        let b = "20261201T183442Z_70b4916a";
        assert!(pack_stem(b).unwrap() > (hi, lo));
        let c = "20261201T183443Z_00000000";
        assert!(pack_stem(c).unwrap() > pack_stem(b).unwrap());
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
