//! A run once counted ([`Key`], 40 bytes), and the [`Listing`] of every run counted: where
//! each one's files are, in the report's order, read again as a view asks for them.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};

use windtunnel_model::{Score, Trace, Verdict};

use super::projection::{hash64, latency, read_projection};
use crate::report::RunRow;
use crate::report::load::{self, LoadedRun, MAX_TRACE_BYTES, read_score};
use crate::report::triage::Rung;
use crate::store;

/// One run, once counted: enough to order it, find its files again, list it and place it in
/// its triage cluster.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Key {
    /// Hash of run id, sweep, agent and start time: equal for copies of one run.
    pub(super) identity: u64,
    /// `YYYYMMDDHHMMSS` of a `YYYYMMDDTHHMMSSZ_hhhhhhhh` stem (or the stem's index in
    /// [`Listing::odd`], with [`ODD`]) shifted left 16 bits, and the directory's index.
    pub(super) loc: u64,
    /// The stem's eight hex digits.
    pub(super) stem_lo: u32,
    /// The (scenario, sweep, agent) in [`Listing::groups`].
    pub(super) group: u32,
    pub(super) run_index: u32,
    /// Turn latencies summed ([`SATURATED`] when the sum does not fit).
    pub(super) latency_ms: u32,
    /// The run's triage cluster, for a run that did not pass ([`NO_CLUSTER`] otherwise).
    pub(super) cluster: u32,
    /// 16 bits of the run id's hash, to recognize its score again.
    pub(super) run_hash: u16,
    /// The verdict (two bits), the rung (two bits), [`ODD`], [`DUPLICATE`], [`SATURATED`].
    pub(super) flags: u8,
}

pub(super) const VERDICT: u8 = 0b11;
pub(super) const PASS: u8 = 0;
pub(super) const FAIL: u8 = 1;
pub(super) const ERROR: u8 = 2;
pub(super) const UNSCORED: u8 = 3;
pub(super) const RUNG_SHIFT: u8 = 2;
pub(super) const ODD: u8 = 1 << 4;
pub(super) const DUPLICATE: u8 = 1 << 5;
pub(super) const SATURATED: u8 = 1 << 6;
pub(super) const NO_CLUSTER: u32 = u32::MAX;

pub(super) fn verdict_code(score: Option<&Score>) -> u8 {
    match score.map(|s| s.verdict) {
        Some(Verdict::Pass) => PASS,
        Some(Verdict::Fail) => FAIL,
        Some(_) => ERROR,
        None => UNSCORED,
    }
}

pub(super) fn rung_code(r: Rung) -> u8 {
    match r {
        Rung::Wiring => 0,
        Rung::Harness => 1,
        Rung::Steering => 2,
        Rung::Model => 3,
    }
}

pub(super) fn rung_of(code: u8) -> Rung {
    match code & 0b11 {
        0 => Rung::Wiring,
        1 => Rung::Harness,
        2 => Rung::Steering,
        _ => Rung::Model,
    }
}

impl Key {
    pub(super) fn verdict(&self) -> u8 {
        self.flags & VERDICT
    }

    pub(super) fn passed(&self) -> bool {
        self.verdict() == PASS
    }

    pub(super) fn rung(&self) -> Rung {
        rung_of(self.flags >> RUNG_SHIFT)
    }

    pub(super) fn dir(&self) -> u16 {
        self.loc as u16
    }

    pub(super) fn stem_hi(&self) -> u64 {
        self.loc >> 16
    }

    pub(super) fn odd(&self) -> bool {
        self.flags & ODD != 0
    }
}

/// Packs a stem the runner writes (`20261201T183442Z_70b49168`); `None` for any other.
pub(super) fn pack_stem(stem: &str) -> Option<(u64, u32)> {
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

pub(super) fn unpack_stem(hi: u64, lo: u32) -> String {
    let (date, time) = (hi / 1_000_000, hi % 1_000_000);
    format!("{date:08}T{time:06}Z_{lo:08x}")
}

/// The (scenario, sweep, agent) of runs, with the agent's model (empty when its runtime has
/// none).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Group {
    pub scenario: String,
    pub sweep: String,
    pub agent: String,
    pub model: String,
}

/// One run of a listing, as far as counting test cases needs it.
pub(crate) struct Brief<'a> {
    pub scenario: &'a str,
    pub run_index: u32,
    pub sweep: &'a str,
    pub agent: &'a str,
    /// The agent's model, empty when its runtime has none.
    pub model: &'a str,
    /// `None` for a run without a usable score.
    pub verdict: Option<Verdict>,
}

/// Where every run counted is, in the report's order (scenario, run index, sweep, path).
#[derive(Clone, Debug, Default)]
pub(crate) struct Listing {
    pub(super) keys: Vec<Key>,
    pub(super) groups: Vec<Group>,
    pub(super) dirs: Vec<PathBuf>,
    pub(super) odd: Vec<Box<str>>,
}

impl Listing {
    pub(super) fn stem(&self, k: &Key) -> Cow<'_, str> {
        if k.odd() {
            Cow::Borrowed(&self.odd[k.stem_hi() as usize])
        } else {
            Cow::Owned(unpack_stem(k.stem_hi(), k.stem_lo))
        }
    }

    pub(super) fn path(&self, k: &Key) -> PathBuf {
        self.dirs[usize::from(k.dir())].join(format!("{}.json", self.stem(k)))
    }

    pub(super) fn group(&self, k: &Key) -> &Group {
        &self.groups[k.group as usize]
    }

    /// Orders two runs' file names as a sorted listing of a directory does.
    pub(super) fn name_cmp(&self, a: &Key, b: &Key) -> Ordering {
        if !a.odd() && !b.odd() {
            (a.stem_hi(), a.stem_lo).cmp(&(b.stem_hi(), b.stem_lo))
        } else {
            self.stem(a).cmp(&self.stem(b))
        }
    }

    /// Orders a run's file name against `stem` (of a journal's `RunEnded`).
    pub(super) fn name_cmp_stem(
        &self,
        k: &Key,
        stem: &str,
        packed: Option<(u64, u32)>,
    ) -> Ordering {
        match packed {
            Some(p) if !k.odd() => (k.stem_hi(), k.stem_lo).cmp(&p),
            _ => (*self.stem(k)).cmp(stem),
        }
    }

    /// The row of one run, its score read again. A score that is no longer the one counted
    /// (rewritten since) is shown as it is read now, by the sidecar rule: a trace's score
    /// is the sidecar of its run.
    pub(super) fn row(&self, k: &Key) -> RunRow {
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
                row.failures = crate::report::failures(s);
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

    /// Like [`Listing::load_at`], its hook artifacts those of `names` (file names, as its
    /// index line gives them) that are there beside it, not the directory listed again. A
    /// name that is not one of its sidecars (another run's, a path, its score) is passed over.
    pub(crate) fn load_at_with(&self, i: usize, names: &[String]) -> Result<LoadedRun, String> {
        let k = &self.keys[i];
        let stem = self.stem(k).into_owned();
        let dir = &self.dirs[usize::from(k.dir())];
        let mut paths: Vec<PathBuf> = names
            .iter()
            .filter(|n| {
                n.strip_prefix(stem.as_str())
                    .is_some_and(|rest| rest.starts_with('.') && !rest.contains('/'))
                    && store::is_sidecar(Path::new(n.as_str()))
                    && !n.ends_with(".score.json")
            })
            .map(|n| dir.join(n))
            .filter(|p| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_file()))
            .collect();
        paths.sort();
        paths.dedup();
        let artifacts = HashMap::from([((k.dir(), stem), paths)]);
        self.load(k, &artifacts)
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
            agent: &g.agent,
            model: &g.model,
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
    pub(super) fn load(
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
    pub(super) fn artifacts(
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
    pub(super) fn artifacts_in(
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
