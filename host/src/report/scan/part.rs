//! What one reader thread counts of the traces it reads ([`Part`]), merged exactly in any
//! order once every directory is read.

use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use windtunnel_model::{HookProvenance, Score, is_slug};

use super::key::{
    Group, Key, NO_CLUSTER, ODD, RUNG_SHIFT, SATURATED, pack_stem, rung_code, verdict_code,
};
use super::projection::{
    Digest, Facts, LinePlace, Projection, counted_latencies, facts, hash64, identity, latency,
};
use super::{CHUNK, MAX_WARNINGS, Want};
use crate::report::load::{self, DirFd, MAX_TRACE_BYTES, read_bounded_into_at, read_score_at};
use crate::report::triage::{self, Rung};
use crate::report::{Reasons, UsageSum};
use crate::score::{Aggregator, Contribution};

/// A triage cluster's key: scenario, failed layers (in reporting order) and normalized reason.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct ClusterKey {
    pub(super) scenario: String,
    pub(super) layers: Vec<&'static str>,
    pub(super) reason: String,
}

/// Clusters by key, each numbered once.
#[derive(Default)]
pub(super) struct Clusters {
    pub(super) index: HashMap<ClusterKey, u32>,
    pub(super) keys: Vec<ClusterKey>,
}

impl Clusters {
    pub(super) fn id(&mut self, key: ClusterKey) -> u32 {
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
pub(super) type HookKey = (String, String, String, Option<String>);

pub(super) fn hook_key(h: &HookProvenance) -> HookKey {
    (
        h.name.clone(),
        h.source.clone(),
        h.version.clone(),
        h.sha256.clone(),
    )
}

/// The sweep's span and hooks, over the runs read.
#[derive(Default)]
pub(super) struct Extras {
    pub(super) first: Option<String>,
    pub(super) last: Option<String>,
    /// Each hook with the provenance seen first, and whether another run recorded it otherwise
    /// (then the first run in the report's order decides, read again).
    pub(super) hooks: BTreeMap<HookKey, (HookProvenance, bool)>,
}

impl Extras {
    pub(super) fn add(&mut self, t: &Digest) {
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

    pub(super) fn hook(&mut self, key: HookKey, h: &HookProvenance, varies: bool) {
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

    pub(super) fn merge(&mut self, other: Extras) {
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
pub(super) type FileWarning = (u16, String, String);

/// What one reader thread counted.
#[derive(Default)]
pub(super) struct Part {
    pub(super) keys: Vec<Vec<Key>>,
    pub(super) aggs: BTreeMap<String, Aggregator>,
    pub(super) usage: BTreeMap<String, UsageSum>,
    pub(super) reasons: Reasons,
    pub(super) clusters: Clusters,
    pub(super) extras: Extras,
    /// The first [`MAX_WARNINGS`] warnings in the order shown (a max-heap), and how many
    /// there were in all.
    pub(super) warnings: BinaryHeap<FileWarning>,
    pub(super) warned: usize,
    pub(super) run_ids: Vec<u64>,
    pub(super) shared: usize,
    pub(super) ids: Identities,
    pub(super) facts: Vec<Facts>,
    /// Traces of a newer schema than this `wt` reads: (directory, name, what to say), the
    /// first [`MAX_WARNINGS`] of them; `newer_count` counts them all.
    pub(super) newer: Vec<(u16, String, String)>,
    pub(super) newer_count: usize,
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
    pub(super) fn add(&mut self, t: &Digest) {
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
    pub(super) fn add_judges(&mut self, scenario: &str, score: &Score) {
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

    pub(super) fn merge(&mut self, other: Identities) {
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
pub(super) struct At<'a> {
    pub(super) index: u16,
    pub(super) fd: Option<&'a DirFd>,
}

/// What the readers share.
pub(super) struct Shared<'a> {
    pub(super) dirs: &'a [PathBuf],
    pub(super) want: Want<'a>,
    pub(super) groups: Mutex<(HashMap<Group, u32>, Vec<Group>)>,
    pub(super) odd: Mutex<Vec<Box<str>>>,
}

impl Shared<'_> {
    pub(super) fn group(&self, t: &Digest) -> u32 {
        let mut guard = self.groups.lock().unwrap_or_else(PoisonError::into_inner);
        let (index, all) = &mut *guard;
        let g = Group {
            scenario: t.scenario_id.clone(),
            sweep: t.sweep_id.clone(),
            agent: t.agent.clone(),
            model: t.model.clone().unwrap_or_default(),
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
pub(super) fn add_reasons(reasons: &mut Reasons, scenario: &str, score: &Score, add: bool) {
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
    pub(super) fn push(&mut self, k: Key) {
        match self.keys.last_mut() {
            Some(chunk) if chunk.len() < CHUNK => chunk.push(k),
            _ => {
                let mut chunk = Vec::with_capacity(CHUNK);
                chunk.push(k);
                self.keys.push(chunk);
            }
        }
    }

    pub(super) fn warn(&mut self, dir: u16, name: &str, text: String) {
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

    /// Reads the trace `name` of directory `at` with its score and counts the run.
    pub(super) fn read(
        &mut self,
        shared: &Shared<'_>,
        at: &At<'_>,
        name: &str,
        bufs: &mut [Vec<u8>; 2],
    ) {
        let [buf, score_buf] = bufs;
        let path = shared.dirs[usize::from(at.index)].join(name);
        let Some(t) = self.projection(at, name, &path, buf) else {
            return;
        };
        let mut problems = Vec::new();
        let (score, problem) = read_score_at(at.fd, &path, &t.run_id, &mut problems, score_buf);
        for p in problems {
            self.warn(at.index, name, p);
        }
        let (score, problem) = (score.as_ref(), problem.as_deref());
        self.add_run(shared, at.index, name, (&t, score, problem), None);
    }

    /// Counts the run of trace `name` in directory `dir` (its digest, score and the score's
    /// problem), as read from its files or from the index (with where its line is).
    pub(super) fn add_run(
        &mut self,
        shared: &Shared<'_>,
        dir: u16,
        name: &str,
        (t, score, problem): (&Digest, Option<&Score>, Option<&str>),
        line: Option<LinePlace>,
    ) {
        self.count(shared.want, t, score);
        let (cluster, rung) = self.cluster(shared.want, t, score, problem);
        let run_id_hash = self.note(shared.want, t, score, line);
        let stem = &name[..name.len() - ".json".len()];
        let (stem_hi, stem_lo, odd) = match pack_stem(stem) {
            Some((hi, lo)) => (hi, lo, 0),
            None => {
                let mut odd = shared.odd.lock().unwrap_or_else(PoisonError::into_inner);
                odd.push(stem.into());
                ((odd.len() - 1) as u64, 0, ODD)
            }
        };
        let sum = latency(t);
        let saturated = if sum >= u64::from(u32::MAX) {
            SATURATED
        } else {
            0
        };
        self.push(Key {
            identity: identity(t),
            loc: stem_hi << 16 | u64::from(dir),
            stem_lo,
            group: shared.group(t),
            run_index: t.run_index,
            latency_ms: u32::try_from(sum).unwrap_or(u32::MAX),
            cluster,
            run_hash: run_id_hash as u16,
            flags: verdict_code(score) | rung << RUNG_SHIFT | odd | saturated,
        });
    }

    /// The trace at `path` as a report reads it, or `None` with a warning (or, for a trace of
    /// a newer schema, a gap) saying why it is not a run.
    fn projection(
        &mut self,
        at: &At<'_>,
        name: &str,
        path: &Path,
        buf: &mut Vec<u8>,
    ) -> Option<Digest> {
        let (dir, shown) = (at.index, path.display());
        if let Err(why) = read_bounded_into_at(at.fd, path, MAX_TRACE_BYTES, buf) {
            self.warn(dir, name, format!("skipping {shown}: {why}"));
            return None;
        }
        let parsed: Result<Projection, _> = load::parse_json(buf);
        let version = parsed.as_ref().ok().map(|t| t.schema_version);
        if let Some(v) = load::newer_than_read(version, if version.is_some() { &[] } else { buf }) {
            self.newer_count += 1;
            if self.newer.len() < MAX_WARNINGS {
                self.newer
                    .push((dir, name.to_owned(), load::newer_trace(path, v)));
            }
            return None;
        }
        let t = match parsed {
            Ok(t) => t,
            Err(e) => {
                self.warn(dir, name, format!("skipping {shown}: not a wt trace ({e})"));
                return None;
            }
        };
        if t.run_id.is_empty() || !is_slug(&t.scenario_id) {
            self.warn(
                dir,
                name,
                format!("skipping {shown}: not a wt trace (empty run_id or invalid scenario_id)"),
            );
            return None;
        }
        Some(Digest::from(t))
    }

    /// Counts the run into its scenario's aggregate, usage and (when wanted) failure reasons.
    fn count(&mut self, want: Want<'_>, t: &Digest, score: Option<&Score>) {
        let c = Contribution::from_parts(score, counted_latencies(t), t.attempts);
        self.aggs
            .entry(t.scenario_id.clone())
            .or_insert_with(|| Aggregator::new(&t.scenario_id))
            .add_run(&c);
        if let Some(s) = score.filter(|s| crate::report::has_usage(s)) {
            self.usage
                .entry(t.scenario_id.clone())
                .or_default()
                .add_score(s);
        }
        if want.reasons
            && let Some(s) = score
        {
            add_reasons(&mut self.reasons, &t.scenario_id, s, true);
        }
    }

    /// The run's triage cluster and rung code, for the page ([`NO_CLUSTER`] otherwise or for a
    /// run that passed).
    fn cluster(
        &mut self,
        want: Want<'_>,
        t: &Digest,
        score: Option<&Score>,
        problem: Option<&str>,
    ) -> (u32, u8) {
        match triage::cluster_key(score, problem) {
            Some((_, layers, reason)) if want.page => {
                let rung = match score {
                    Some(s) => triage::rung(s, t.denied, t.tool_errors),
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
        }
    }

    /// Notes what the run says of where it comes from, and what the caller wants of it beyond
    /// the counts (facts, run ids, runs shared with another side): the run id's hash.
    fn note(
        &mut self,
        want: Want<'_>,
        t: &Digest,
        score: Option<&Score>,
        line: Option<LinePlace>,
    ) -> u64 {
        if want.page {
            self.extras.add(t);
        }
        self.ids.add(t);
        if let Some(s) = score {
            self.ids.add_judges(&t.scenario_id, s);
        }
        let run_id_hash = hash64(&t.run_id);
        if want.facts {
            self.facts.push(facts(t, score, run_id_hash, line));
        }
        if want.run_ids {
            self.run_ids.push(run_id_hash);
        }
        if let Some(base) = want.shared_with
            && base.binary_search(&run_id_hash).is_ok()
        {
            self.shared += 1;
        }
        run_id_hash
    }
}
