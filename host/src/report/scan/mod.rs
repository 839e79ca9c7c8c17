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

pub(crate) mod index;
mod key;
mod page;
mod part;
mod projection;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError, mpsc};

pub(crate) use key::{Brief, Group, Listing};
use key::{DUPLICATE, Key, NO_CLUSTER, pack_stem};
use page::Page;
pub(crate) use page::{Details, MAX_CLUSTERS, MAX_DETAILED_RUNS, MAX_PER_CLUSTER};
#[cfg(test)]
pub(crate) use page::{budgets, positions};
pub(crate) use part::Identities;
use part::{At, Clusters, Extras, FileWarning, Part, Shared, add_reasons};
use projection::{Digest, Projection, counted_latencies, hash64};
pub(crate) use projection::{Facts, LAYERS, hash_run_id};

use super::load::{self, DirFd, Journals, MAX_TRACE_BYTES, read_score};
use super::{Found, Reasons, RunRow, SHOWN_PER_SCENARIO, UsageSum};
use crate::score::{Aggregator, Contribution};
use crate::store::{self, StoreError};

/// Warnings kept (a directory of foreign files would otherwise hold one per file); the rest
/// are counted.
pub(crate) const MAX_WARNINGS: usize = 1000;
/// File names handed to a reader at a time.
const BATCH: usize = 64;
/// Keys a reader holds per allocation.
pub(super) const CHUNK: usize = 16 * 1024;

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
    /// The runs counted from the directories' indexes rather than their files.
    pub indexed: usize,
    /// The index files read ([`Facts::line`] names them by place).
    pub indexes: Vec<PathBuf>,
    pub found: Found,
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
    let shared = Shared {
        dirs: &unique_dirs(dirs)?,
        want,
        groups: Mutex::new((HashMap::new(), Vec::new())),
        odd: Mutex::new(Vec::new()),
    };
    let mut gaps = Vec::new();
    let mut journal_paths: Vec<(u16, String)> = Vec::new();
    let mut from_index = (0, Vec::new());
    let parts = read_all(&shared, &mut journal_paths, &mut gaps, &mut from_index)?;
    let (indexed, indexes) = from_index;
    tracing::debug!(indexed, "runs counted from the index");
    let mut m = Merged::of(parts, &mut gaps);
    let Shared {
        dirs, groups, odd, ..
    } = shared;
    let (_, groups) = groups.into_inner().unwrap_or_else(PoisonError::into_inner);
    let mut listing = Listing {
        keys: std::mem::take(&mut m.keys),
        groups,
        odd: odd.into_inner().unwrap_or_else(PoisonError::into_inner),
        dirs: dirs.to_vec(),
    };
    let mut dedup = mark_duplicates(
        &mut listing,
        &mut Counts {
            aggs: &mut m.aggs,
            usage: &mut m.usage,
            reasons: want.reasons.then_some(&mut m.reasons),
            shared: want.shared_with.map(|base| (base, &mut m.shared_runs)),
        },
    );
    dedup.paths.sort();
    let duplicate_paths = std::mem::take(&mut dedup.paths).into_iter().map(|(_, p)| p);
    let read = read_sweeps(&mut listing, journal_paths, &m.identities, &mut gaps);
    let warnings = all_warnings(
        std::mem::take(&mut m.file_warnings),
        m.warned,
        read.journal_warnings,
        read.sweep_warnings,
    );
    sort_for_display(&mut listing);
    let shown = Shown::of(&listing, m.clusters.keys.len());
    let details = want.page.then(|| {
        let page = Page {
            listing: &listing,
            clusters: &m.clusters,
            cluster_runs: &shown.cluster_runs,
            cluster_first: &shown.cluster_first,
            aggs: &m.aggs,
            scenario_errors: &read.scenario_errors,
        };
        page.all(std::mem::take(&mut m.extras), dedup.clean)
    });
    let partial = read.sweeps.iter().any(|s| s.status.is_partial()) || !gaps.is_empty();
    Ok(Scan {
        aggs: m.aggs,
        usage: m.usage,
        reasons: m.reasons,
        listing: want.listing.then_some(listing),
        shown: shown.rows,
        not_passed: shown.not_passed,
        agents: shown.agents.into_iter().collect(),
        details,
        run_ids: m.run_ids,
        shared: m.shared_runs,
        duplicate_paths: duplicate_paths.collect(),
        facts: m.facts,
        indexed,
        indexes,
        found: Found {
            sweeps: read.sweeps,
            scenario_errors: read.scenario_errors,
            warnings,
            duplicates: dedup.duplicates,
            gaps,
            unread: read.unread,
            partial,
            ids: m.identities,
        },
    })
}

/// The directories to read, each once (a directory given twice, or under two names, is read
/// once, where it was first given).
fn unique_dirs<P: AsRef<Path>>(dirs: &[P]) -> Result<Vec<PathBuf>, StoreError> {
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
    Ok(unique)
}

/// Counts the runs the directories' indexes hold, then reads the traces of every other run
/// with a reader thread per CPU (at most 8) while the directories are listed: what each
/// reader counted, and the journals found.
fn read_all(
    shared: &Shared<'_>,
    journal_paths: &mut Vec<(u16, String)>,
    gaps: &mut Vec<String>,
    from_index: &mut (usize, Vec<PathBuf>),
) -> Result<Vec<Part>, StoreError> {
    let readers = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(1, 8);
    let (mut indexed, covered, indexes) = index::read(shared, readers);
    *from_index = (covered.len(), indexes);
    let (tx, rx) = mpsc::sync_channel::<(u16, Vec<String>)>(readers * 4);
    let rx = Mutex::new(rx);
    let (parts, listed) = std::thread::scope(|s| {
        let workers: Vec<_> = (0..readers)
            .map(|_| s.spawn(|| read_batches(&rx, shared)))
            .collect();
        let listed = list_all(shared.dirs, &covered, &tx, journal_paths, gaps);
        drop(tx);
        let parts: Vec<Part> = workers
            .into_iter()
            .map(|w| w.join().expect("a report reader panicked"))
            .collect();
        (parts, listed)
    });
    indexed.extend(parts);
    listed.map(|()| indexed)
}

/// One reader thread: the batches of file names it is handed, read until the listing ends.
fn read_batches(rx: &Mutex<mpsc::Receiver<(u16, Vec<String>)>>, shared: &Shared<'_>) -> Part {
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
}

/// What the readers counted, merged.
#[derive(Default)]
struct Merged {
    keys: Vec<Key>,
    aggs: BTreeMap<String, Aggregator>,
    usage: BTreeMap<String, UsageSum>,
    reasons: Reasons,
    clusters: Clusters,
    extras: Extras,
    file_warnings: Vec<FileWarning>,
    warned: usize,
    shared_runs: usize,
    run_ids: Vec<u64>,
    identities: Identities,
    facts: Vec<Facts>,
}

impl Merged {
    /// Merges the readers' parts; traces of a newer schema than this `wt` reads become gaps.
    fn of(parts: Vec<Part>, gaps: &mut Vec<String>) -> Merged {
        let total: usize = parts
            .iter()
            .map(|p| p.keys.iter().map(Vec::len).sum::<usize>())
            .sum();
        let mut m = Merged {
            keys: Vec::with_capacity(total),
            ..Merged::default()
        };
        let mut newer = Vec::new();
        let mut newer_count = 0;
        for mut part in parts {
            newer.append(&mut part.newer);
            newer_count += part.newer_count;
            m.add(part);
        }
        newer_gaps(newer, newer_count, gaps);
        m.file_warnings.sort();
        m.file_warnings.truncate(MAX_WARNINGS);
        m.run_ids.sort_unstable();
        m.run_ids.dedup();
        m
    }

    fn add(&mut self, part: Part) {
        let ids: Vec<u32> = part
            .clusters
            .keys
            .into_iter()
            .map(|k| self.clusters.id(k))
            .collect();
        for chunk in part.keys {
            self.keys.extend(chunk.into_iter().map(|mut k| {
                if k.cluster != NO_CLUSTER {
                    k.cluster = ids[k.cluster as usize];
                }
                k
            }));
        }
        for (id, a) in part.aggs {
            match self.aggs.entry(id) {
                std::collections::btree_map::Entry::Occupied(mut e) => e.get_mut().merge(a),
                std::collections::btree_map::Entry::Vacant(e) => {
                    e.insert(a);
                }
            }
        }
        for (id, u) in part.usage {
            self.usage.entry(id).or_default().merge(&u);
        }
        for (id, per) in part.reasons {
            let into = self.reasons.entry(id).or_default();
            for (k, n) in per {
                *into.entry(k).or_default() += n;
            }
        }
        self.extras.merge(part.extras);
        self.identities.merge(part.ids);
        self.file_warnings.extend(part.warnings);
        self.warned += part.warned;
        self.run_ids.extend(part.run_ids);
        self.facts.extend(part.facts);
        self.shared_runs += part.shared;
    }
}

/// A trace this wt cannot read as its own is a run it cannot vouch for: the reading is
/// incomplete, never green without it. The first [`MAX_WARNINGS`] are named, the rest counted.
fn newer_gaps(mut newer: Vec<FileWarning>, count: usize, gaps: &mut Vec<String>) {
    newer.sort();
    newer.truncate(MAX_WARNINGS);
    let shown = newer.len();
    gaps.extend(newer.into_iter().map(|(_, _, text)| text));
    if count > shown {
        gaps.push(format!(
            "… and {} more trace(s) of a newer schema than this wt reads",
            count - shown
        ));
    }
}

/// What the journals say: how each sweep ended, its scenarios that could not run, the runs
/// they name whose traces were not read, and the warnings, by directory and of the sweeps.
struct SweepsRead {
    sweeps: Vec<load::Sweep>,
    scenario_errors: Vec<crate::report::ScenarioError>,
    unread: Vec<crate::report::UnreadRun>,
    journal_warnings: Vec<Vec<String>>,
    sweep_warnings: Vec<String>,
}

/// Reads the journals (by directory given, then name) and closes the sweeps over the runs
/// counted; duplicates leave the listing here. Missing shards become gaps.
fn read_sweeps(
    listing: &mut Listing,
    mut journal_paths: Vec<(u16, String)>,
    identities: &Identities,
    gaps: &mut Vec<String>,
) -> SweepsRead {
    journal_paths.sort();
    let mut journals = Journals::default();
    let mut journal_warnings: Vec<Vec<String>> = vec![Vec::new(); listing.dirs.len()];
    let unread = read_journals(
        listing,
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
    SweepsRead {
        sweeps,
        scenario_errors,
        unread,
        journal_warnings,
        sweep_warnings,
    }
}

/// Every warning, counted: those about trace files (the first of them kept) with each
/// directory's journals' after its traces', then the sweeps'.
fn all_warnings(
    file_warnings: Vec<FileWarning>,
    warned: usize,
    journal_warnings: Vec<Vec<String>>,
    sweep_warnings: Vec<String>,
) -> Vec<String> {
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
    warnings
}

/// What one walk of the listing in the report's order finds: the rows the table shows, the
/// runs that did not pass per scenario, the agents, and each cluster's runs and first run.
struct Shown {
    rows: Vec<RunRow>,
    not_passed: BTreeMap<String, usize>,
    agents: BTreeSet<String>,
    cluster_runs: Vec<usize>,
    cluster_first: Vec<Option<usize>>,
}

impl Shown {
    fn of(listing: &Listing, clusters: usize) -> Shown {
        let mut shown = Shown {
            rows: Vec::new(),
            not_passed: BTreeMap::new(),
            agents: BTreeSet::new(),
            cluster_runs: vec![0; clusters],
            cluster_first: vec![None; clusters],
        };
        for (i, k) in listing.keys.iter().enumerate() {
            let g = listing.group(k);
            if !shown.agents.contains(g.agent.as_str()) {
                shown.agents.insert(g.agent.clone());
            }
            if k.passed() {
                continue;
            }
            let n = match shown.not_passed.get_mut(&g.scenario) {
                Some(n) => n,
                None => shown.not_passed.entry(g.scenario.clone()).or_default(),
            };
            *n += 1;
            if *n <= SHOWN_PER_SCENARIO {
                shown.rows.push(listing.row(k));
            }
            if k.cluster != NO_CLUSTER {
                let c = k.cluster as usize;
                shown.cluster_runs[c] += 1;
                shown.cluster_first[c].get_or_insert(i);
            }
        }
        shown
    }
}

/// Lists every directory, handing trace names to the readers in batches; journals are
/// kept for later, other files ignored. A directory with neither is a gap.
fn list_all(
    dirs: &[PathBuf],
    covered: &index::Covered,
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
                if !covered.is_empty() && covered.has(i, &name) {
                    continue;
                }
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
                let t = Digest::from(t);
                let id = (
                    t.run_id.clone(),
                    t.sweep_id.clone(),
                    t.agent.clone(),
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
                let c = Contribution::from_parts(score.as_ref(), counted_latencies(&t), t.attempts);
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
) -> Vec<crate::report::UnreadRun> {
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

#[cfg(test)]
mod tests {
    use super::key::*;
    use super::projection::*;
    use super::*;
    use windtunnel_model::Trace;

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
        let digest = |t: &Trace| {
            Digest::from(load::parse_json::<Projection>(&serde_json::to_vec(t).unwrap()).unwrap())
        };
        let p = digest(&t);
        assert_eq!(
            (&*p.run_id, &*p.sweep_id, &*p.scenario_id, p.run_index),
            ("r-1", "s-1", "order-status", 3)
        );
        assert_eq!(
            (&*p.agent, &*p.started_at),
            ("demo", "2026-12-01T00:00:00Z")
        );
        assert_eq!(latency(&p), 42);
        assert_eq!(counted_latencies(&p).collect::<Vec<_>>(), [12]);
        assert!(!p.tool_errors && !p.denied && p.hooks.is_none());
        assert_eq!((p.tool_calls, p.model_calls, p.turns.len()), (1, 0, 2));
        t.evidence.tool_calls[0].error = Some("boom".into());
        t.denial = Some(windtunnel_model::Denial::default());
        let p = digest(&t);
        assert!(p.tool_errors && p.denied);
        // What the index holds of it reads back as the same digest.
        let line = serde_json::to_vec(&p).unwrap();
        assert_eq!(serde_json::from_slice::<Digest>(&line).unwrap(), p);
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
    use windtunnel_model::{HookProvenance, Verdict};

    use super::*;
    use crate::report::{LoadedRun, Report, html};
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
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
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

    /// The index files of `dir`.
    fn index_files(dir: &Path) -> Vec<PathBuf> {
        let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.to_string_lossy().ends_with(index::SUFFIX))
            .collect();
        found.sort();
        found
    }

    /// What every view of `dir` says (JSON, table, page, JUnit), with how many of its runs
    /// were counted from the index.
    fn views(dir: &Path) -> ([String; 4], usize) {
        let dirs = [dir.to_owned()];
        let report = agree(&dirs);
        let indexed = scan(&dirs, Want::default()).unwrap().indexed;
        let page = html::report_page(&report, None);
        let views = [report.to_json(), report.to_table(), page, report.to_junit()];
        (views, indexed)
    }

    /// The views of `dir` with its index files moved away (and back).
    fn views_without_index(dir: &Path) -> [String; 4] {
        let away = dir.with_extension("away");
        std::fs::create_dir_all(&away).unwrap();
        let files = index_files(dir);
        for f in &files {
            std::fs::rename(f, away.join(f.file_name().unwrap())).unwrap();
        }
        let (views, indexed) = views(dir);
        assert_eq!(indexed, 0);
        for f in &files {
            std::fs::rename(away.join(f.file_name().unwrap()), f).unwrap();
        }
        views
    }

    #[test]
    fn the_index_answers_as_the_files_do_and_only_for_the_files_it_was_written_for() {
        let tmp = tempfile::tempdir().unwrap();
        let a = tmp.path().join("a");
        sweep(&a, "demo-forbidden-tool", 4, |cfg| cfg.jobs = 2);
        sweep(&a, "demo", 3, |_| {});
        let mut indexes = index_files(&a);
        assert_eq!(indexes.len(), 2, "one index per sweep");
        // The failing sweep's first (their names may sort either way within a second).
        indexes.sort_by_key(|p| std::cmp::Reverse(index::entries(p).len()));
        let lines = index::entries(&indexes[0]);
        assert_eq!(lines.len(), 12);
        assert!(lines.iter().all(|e| e.journal.is_some_and(|(a, b)| a < b)));
        // Each run's line is found again where the reader says it is.
        let read = scan(
            std::slice::from_ref(&a),
            Want {
                facts: true,
                ..Want::default()
            },
        )
        .unwrap();
        assert_eq!(read.indexes, index_files(&a));
        let all: Vec<index::Entry> = indexes.iter().flat_map(|p| index::entries(p)).collect();
        assert_eq!(read.facts.len(), 21);
        for f in &read.facts {
            let place = f.line.expect("counted from its line");
            let e = all
                .iter()
                .find(|e| hash_run_id(&e.run.run_id) == f.run_id_hash)
                .unwrap();
            let path = &read.indexes[place.index as usize];
            let again = index::entry_at(path, place.offset, &e.trace).expect("its line is there");
            assert_eq!(again.run, e.run);
            assert!(index::entry_at(path, place.offset, "other.json").is_none());
        }
        let (with, indexed) = views(&a);
        assert_eq!(indexed, 21, "every run counted from the index");
        assert_eq!(
            with,
            views_without_index(&a),
            "the same answer as the files"
        );

        // A score rewritten after its line was written: that run is read from its files.
        let failing = &lines[0].trace;
        let score = a.join(failing).with_extension("score.json");
        edit(&score, |s| {
            s["verdict"] = "PASS".into();
            for layer in ["outcome", "trajectory", "constraint", "integrity"] {
                s[layer]["passed"] = true.into();
            }
        });
        let (edited, indexed) = views(&a);
        assert_eq!(indexed, 20);
        assert_ne!(edited[0], with[0], "the edit is seen");
        assert_eq!(edited, views_without_index(&a));

        // A line cut short, foreign and hostile lines: the same answer.
        let mut odd = std::fs::read(&indexes[1]).unwrap();
        odd.extend_from_slice(b"not json\n{\"v\": 1}\n[]\n");
        let second = std::fs::read(&indexes[0]).unwrap();
        let mut line: Value =
            serde_json::from_slice(second.split(|&b| b == b'\n').nth(1).unwrap()).unwrap();
        for (field, value) in [
            ("trace", Value::from("../a/x.json")),
            ("trace", "20261201T000000Z_00000000.json".into()),
            ("v", 2.into()),
        ] {
            let mut bad = line.clone();
            bad[field] = value;
            odd.extend(serde_json::to_vec(&bad).unwrap());
            odd.push(b'\n');
        }
        // The last line cut short, as a kill in the middle of a write would (were a line
        // not one write).
        let first = &odd[..odd.iter().position(|&b| b == b'\n').unwrap()];
        let cut = first[..first.len() / 2].to_vec();
        odd.extend_from_slice(&cut);
        std::fs::write(&indexes[1], &odd).unwrap();
        let (hostile, indexed) = views(&a);
        assert_eq!(indexed, 20);
        assert_eq!(hostile, edited);

        // Two valid lines for one run — a copy of an index beside it, or a line that differs
        // (a forged verdict): nothing is counted from the indexes, and a warning says why.
        let strip = |json: &str| {
            let mut v: Value = serde_json::from_str(json).unwrap();
            v.as_object_mut().unwrap().remove("warnings");
            v
        };
        let copy = a.join(format!("copy{}", index::SUFFIX));
        line["score"]["verdict"] = "PASS".into();
        let mut forged = serde_json::to_vec(&line).unwrap();
        forged.push(b'\n');
        for twice in [std::fs::read(&indexes[0]).unwrap(), forged] {
            std::fs::write(&copy, twice).unwrap();
            let read = scan(std::slice::from_ref(&a), Want::default()).unwrap();
            assert_eq!(read.indexed, 0);
            let warnings = &read.found.warnings;
            assert!(
                warnings.iter().any(|w| w.contains("hold two lines for")),
                "{warnings:?}"
            );
            assert_eq!(strip(&views(&a).0[0]), strip(&edited[0]));
        }
    }

    #[test]
    fn an_index_is_never_written_through_a_link_or_into_a_fifo() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path().join("runs");
        sweep(&d, "demo", 1, |_| {});
        let trace = &traces(&d)[0];
        let stem = trace.file_stem().unwrap().to_str().unwrap();
        let score: windtunnel_model::Score =
            store::read_json(&trace.with_extension("score.json")).unwrap();
        let target = tmp.path().join("elsewhere");
        std::fs::write(&target, "untouched").unwrap();
        std::os::unix::fs::symlink(&target, d.join(format!("link{}", index::SUFFIX))).unwrap();
        let fifo = d.join(format!("fifo{}", index::SUFFIX));
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        for name in ["link", "fifo"] {
            // Returns at once (a FIFO with no reader is not waited on) and writes nothing.
            index::Writer::new(&d, name).append(stem, &score, &[]);
        }
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "untouched");
        let plain = index::Writer::new(&d, "plain");
        plain.append(stem, &score, &[]);
        let plain = d.join(format!("plain{}", index::SUFFIX));
        let lines = index::entries(&plain);
        assert_eq!(lines.len(), 1);
        assert_eq!(lines[0].trace, format!("{stem}.json"));
        // Nor read through a link or from a FIFO: with the sweep's own index and this one moved
        // out of the directory and a link to each left in its place, no run is counted from an
        // index, and the FIFO beside them is not waited on.
        for index in index_files(&d) {
            if index == fifo || std::fs::symlink_metadata(&index).unwrap().is_symlink() {
                continue;
            }
            let moved = tmp.path().join(index.file_name().unwrap());
            std::fs::rename(&index, &moved).unwrap();
            std::os::unix::fs::symlink(&moved, &index).unwrap();
        }
        let read = scan(std::slice::from_ref(&d), Want::default()).unwrap();
        assert_eq!(
            (
                read.indexed,
                read.aggs.values().map(|a| a.runs()).sum::<u32>()
            ),
            (0, 3)
        );
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
