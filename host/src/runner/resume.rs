//! Resuming a sweep (`wt run --resume`): what of it is committed in its runs directory, what
//! is to be made again, and its journal, held for the resumed segment to append to.
//!
//! A run is *committed* when its trace is in the directory (the trace is written last, after
//! its score and artifacts). A resumed sweep makes exactly the (scenario, run index) pairs of
//! its plan that have no committed trace — runs in flight when it was cut left at most a
//! score, artifacts and temporary files, which are cleared first —, and, made again in place
//! (the same run id and file name), the runs cut when `wt` stopped and, with
//! `--retry-errors`, the runs that ended ERROR on the wiring or harness rung.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{BufRead, Read, Seek};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use windtunnel_model::{EarlierAttempt, Scenario, Score, Trace};

use super::{Shard, Sweep, lock};
use crate::events::SweepIdentity;
use crate::score::{Aggregator, Contribution};

/// The longest journal line read; a longer one is skipped.
const MAX_LINE: u64 = 1 << 20;

/// A sweep to resume, as its runs directory holds it.
pub struct Resume {
    /// The sweep's identity: its id, stem and claim are the first segment's.
    pub sweep: Sweep,
    /// 1 for the first resumption, 2 for the next, …
    pub segment: u32,
    /// The journal, opened and locked, and the `seq` its next line takes.
    journal: Mutex<Option<(PathBuf, File, u64)>>,
    scenarios: HashMap<String, Done>,
    /// The scores of runs in flight when the sweep was cut (written, their trace not), by
    /// (scenario, run index): their gradings stand again when the run is made the same.
    orphans: Mutex<HashMap<(String, u32), Score>>,
    /// What was cleared or found on the way, for the person resuming.
    pub notes: Vec<String>,
}

/// What is committed of one scenario.
#[derive(Default)]
struct Done {
    /// Run indices with a committed trace that stands.
    committed: HashSet<u32>,
    /// Committed runs to make again in place.
    remake: HashMap<u32, Remake>,
    /// The runs that stand, counted.
    agg: Option<Aggregator>,
}

/// A committed run made again: its identity and the attempts it already had.
#[derive(Clone, Debug)]
pub(crate) struct Remake {
    pub run_id: String,
    pub stem: String,
    pub earlier: Vec<EarlierAttempt>,
}

/// What a sweep's journal says of it.
#[derive(Default)]
struct Told {
    sweep_id: Option<String>,
    started_at: Option<String>,
    identity: Option<SweepIdentity>,
    agent: Option<String>,
    shard: Option<String>,
    hooks: Vec<String>,
    policy_revision: Option<String>,
    /// `SweepStarted` lines: segments so far.
    segments: u32,
    /// Run ids the sweep started, with their place.
    started: HashMap<String, (String, u32)>,
    lines: u64,
}

/// What this invocation is, to be held to the sweep it resumes.
pub struct Asked<'a> {
    pub identity: &'a SweepIdentity,
    pub agent: &'a str,
    pub shard: Option<Shard>,
    pub hooks: &'a [String],
    pub policy_revision: Option<&'a str>,
    /// `--retry-errors`: committed runs that ended ERROR on the wiring or harness rung are
    /// made again.
    pub retry_errors: bool,
}

/// Whether a run that ended ERROR is one a retry may change: its error is on the wiring or
/// harness rung (an endpoint down, a timeout, a 5xx, a harness model that failed), not a
/// guard's denial (a policy decision, the same every time) and not a cut when `wt` stopped
/// (made again by a resume, never counted as an attempt).
pub(crate) fn retryable(trace: &Trace, score: &Score) -> bool {
    score.verdict == windtunnel_model::Verdict::Error
        && trace.denial.is_none()
        && !trace.interrupted
}

impl Resume {
    /// Finds the sweep to resume in `dir` — the one whose journal was written last —, holds it
    /// to `asked` and takes its journal, so that no other `wt` resumes it at the same time.
    /// Refused, in one line, when there is none, when it is still running, or when `asked`
    /// differs from it (naming what differs).
    pub fn open(dir: &Path, scenarios: &[Scenario], asked: &Asked<'_>) -> Result<Resume, String> {
        let shown = dir.display();
        let journals = journals(dir)?;
        let Some(path) = newest(&journals) else {
            return Err(format!(
                "--resume: {shown} holds no sweep's event journal (*.events.jsonl) to resume"
            ));
        };
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
        let name = name.unwrap_or_default();
        let mut file = open_journal(&path)?;
        match crate::events::try_lock_file(&file, true) {
            Ok(true) => {}
            Ok(false) => {
                return Err(format!(
                    "--resume: the sweep of {name} is still running (another wt holds its journal); resume it once it has ended"
                ));
            }
            Err(e) => {
                return Err(format!("--resume: cannot lock {name}: {e}"));
            }
        }
        let mut notes = Vec::new();
        let told = read_journal(&mut file, &name, &mut notes)?;
        let (Some(sweep_id), Some(identity)) = (told.sweep_id.clone(), told.identity.clone())
        else {
            return Err(format!(
                "--resume: {name} does not record what its sweep was (pack, agent, seed, runs): it was written by an older wt or a library caller, and cannot be resumed"
            ));
        };
        differs(&told, &identity, asked, &name)?;
        let stem = name.trim_end_matches(".events.jsonl").to_owned();
        let (ts, claim) = stem_parts(&stem);
        let sweep = Sweep {
            id: sweep_id.clone(),
            ts,
            stem,
            started_at: told.started_at.clone().unwrap_or_default(),
            claim,
        };
        let (scenarios, orphan_runs) = committed(dir, &sweep_id, scenarios, asked, &mut notes)?;
        let orphans = clear_orphans(dir, &told, &orphan_runs, &mut notes);
        clear_temp_files(dir, &journals, &path, &mut notes);
        Ok(Resume {
            sweep,
            segment: told.segments,
            journal: Mutex::new(Some((path, file, told.lines))),
            scenarios,
            orphans: Mutex::new(orphans),
            notes,
        })
    }

    /// How many committed runs stand (are not made again).
    pub fn standing_runs(&self) -> u64 {
        self.scenarios
            .values()
            .map(|d| d.committed.len() as u64)
            .sum()
    }

    /// The journal to append to and the `seq` of its next line (once).
    pub(crate) fn take_journal(&self) -> Option<(PathBuf, File, u64)> {
        lock(&self.journal).take()
    }

    /// The run indices of `scenario` that stand (not to be made).
    pub(crate) fn committed(&self, scenario: &str) -> HashSet<u32> {
        self.scenarios
            .get(scenario)
            .map(|d| d.committed.clone())
            .unwrap_or_default()
    }

    /// The committed runs that stand, counted: where the scenario's aggregate starts.
    pub(crate) fn counted(&self, scenario: &str) -> Option<Aggregator> {
        self.scenarios.get(scenario).and_then(|d| d.agg.clone())
    }

    /// Run `index` of `scenario`, when it is a committed run made again in place.
    pub(crate) fn remake(&self, scenario: &str, index: u32) -> Option<Remake> {
        self.scenarios.get(scenario)?.remake.get(&index).cloned()
    }

    /// The score run `index` of `scenario` had written when the sweep was cut, once.
    pub(crate) fn orphan_score(&self, scenario: &str, index: u32) -> Option<Score> {
        lock(&self.orphans).remove(&(scenario.to_owned(), index))
    }
}

/// The journals in `dir` (regular files, never through a link).
fn journals(dir: &Path) -> Result<Vec<PathBuf>, String> {
    if !dir.is_dir() {
        return Ok(Vec::new());
    }
    let entries = crate::store::dir_entries(dir).map_err(|e| format!("--resume: {e}"))?;
    Ok(entries
        .into_iter()
        .filter(|(name, _)| name.ends_with(".events.jsonl"))
        .filter(|(_, p)| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_file()))
        .map(|(_, p)| p)
        .collect())
}

/// The journal written last (by modification time, then by name).
fn newest(journals: &[PathBuf]) -> Option<PathBuf> {
    journals
        .iter()
        .filter_map(|p| Some((std::fs::symlink_metadata(p).ok()?.modified().ok()?, p)))
        .max()
        .map(|(_, p)| p.clone())
}

fn open_journal(path: &Path) -> Result<File, String> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .append(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| format!("--resume: cannot open {}: {e}", path.display()))
}

/// A `SweepStarted` or `RunStarted` line, the fields resuming needs.
#[derive(serde::Deserialize)]
struct Line {
    event: String,
    #[serde(default)]
    sweep_id: Option<String>,
    #[serde(default)]
    ts: Option<String>,
    #[serde(default)]
    scenario_id: Option<String>,
    #[serde(default)]
    run_id: Option<String>,
    #[serde(default)]
    run_index: Option<u32>,
    #[serde(default)]
    agent: Option<String>,
    #[serde(default)]
    shard: Option<String>,
    #[serde(default)]
    hooks: Option<Vec<String>>,
    #[serde(default)]
    policy_revision: Option<String>,
    #[serde(default)]
    pack_digest: Option<String>,
    #[serde(flatten)]
    rest: serde_json::Map<String, serde_json::Value>,
}

/// Reads the journal, bounded by line; a last line torn by a crash mid-write is cut off, so
/// the resumed segment starts on a line of its own.
fn read_journal(file: &mut File, name: &str, notes: &mut Vec<String>) -> Result<Told, String> {
    let size = file
        .metadata()
        .map_err(|e| format!("--resume: {name}: {e}"))?
        .len();
    if size > crate::report::load::MAX_JOURNAL_BYTES {
        return Err(format!(
            "--resume: {name} is {size} bytes, over the {} GiB a journal may have",
            crate::report::load::MAX_JOURNAL_BYTES >> 30
        ));
    }
    let mut told = Told::default();
    let mut reader = std::io::BufReader::with_capacity(1 << 16, &*file);
    let (mut buf, mut whole) = (Vec::new(), 0u64);
    loop {
        buf.clear();
        let n = (&mut reader)
            .take(MAX_LINE)
            .read_until(b'\n', &mut buf)
            .map_err(|e| format!("--resume: read {name}: {e}"))?;
        if n == 0 {
            break;
        }
        if buf.last() != Some(&b'\n') {
            if n as u64 == MAX_LINE {
                // An overlong line: skipped whole, never held.
                let rest = reader
                    .skip_until(b'\n')
                    .map_err(|e| format!("--resume: read {name}: {e}"))?;
                whole += n as u64 + rest as u64;
                told.lines += 1;
                continue;
            }
            break;
        }
        whole += n as u64;
        told.lines += 1;
        let interesting = buf.windows(12).any(|w| w == b"SweepStarted") || {
            buf.windows(10).any(|w| w == b"RunStarted")
        };
        if !interesting {
            continue;
        }
        let Ok(line) = serde_json::from_slice::<Line>(&buf) else {
            continue;
        };
        if told.sweep_id.is_some() && line.sweep_id != told.sweep_id {
            continue;
        }
        match line.event.as_str() {
            "SweepStarted" => {
                told.segments += 1;
                if told.segments == 1 {
                    told.sweep_id = line.sweep_id;
                    told.started_at = line.ts;
                    told.agent = line.agent;
                    told.shard = line.shard;
                    told.hooks = line.hooks.unwrap_or_default();
                    told.policy_revision = line.policy_revision;
                    if let Some(pack_digest) = line.pack_digest {
                        let mut rest = line.rest;
                        rest.insert("pack_digest".into(), pack_digest.into());
                        told.identity =
                            serde_json::from_value(serde_json::Value::Object(rest)).ok();
                    }
                }
            }
            "RunStarted" => {
                if let (Some(run), Some(scenario), Some(index)) =
                    (line.run_id, line.scenario_id, line.run_index)
                {
                    told.started.insert(run, (scenario, index));
                }
            }
            _ => {}
        }
    }
    drop(reader);
    if whole < size {
        notes.push(format!(
            "{name}: its last line was torn ({} bytes, the sweep's process ended mid-write): cut off",
            size - whole
        ));
        file.set_len(whole)
            .map_err(|e| format!("--resume: cannot cut the torn last line of {name}: {e}"))?;
        file.seek(std::io::SeekFrom::End(0))
            .map_err(|e| format!("--resume: {name}: {e}"))?;
    }
    Ok(told)
}

/// Refuses a resume whose invocation is not the sweep's, naming every difference.
fn differs(told: &Told, was: &SweepIdentity, asked: &Asked<'_>, name: &str) -> Result<(), String> {
    let mut diffs = Vec::new();
    let mut differ = |what: &str, there: String, here: String| {
        if there != here {
            diffs.push(format!("{what} ({here} here, {there} in the sweep)"));
        }
    };
    let opt = |v: Option<String>| v.unwrap_or_else(|| "none".into());
    let now = asked.identity;
    differ("the pack", was.pack_digest.clone(), now.pack_digest.clone());
    differ(
        "the agent",
        format!("`{}` {}", opt(told.agent.clone()), was.agent_digest),
        format!("`{}` {}", asked.agent, now.agent_digest),
    );
    differ(
        "--seed",
        opt(was.seed.map(|s| s.to_string())),
        opt(now.seed.map(|s| s.to_string())),
    );
    differ(
        "--runs",
        opt(was.runs.map(|s| s.to_string())),
        opt(now.runs.map(|s| s.to_string())),
    );
    differ(
        "--shard",
        opt(told.shard.clone()),
        opt(asked.shard.map(|s| format!("{}/{}", s.index, s.count))),
    );
    differ("--filter", opt(was.filter.clone()), opt(now.filter.clone()));
    differ(
        "--until-decided",
        was.until_decided.to_string(),
        now.until_decided.to_string(),
    );
    differ(
        "the hooks",
        format!("[{}]", told.hooks.join(", ")),
        format!("[{}]", asked.hooks.join(", ")),
    );
    differ(
        "--policy-revision",
        opt(told.policy_revision.clone()),
        opt(asked.policy_revision.map(str::to_owned)),
    );
    if diffs.is_empty() {
        return Ok(());
    }
    Err(format!(
        "--resume: this is not the sweep of {name}: {} differ{}; resume with the sweep's own pack, agent and flags",
        diffs.join(", "),
        if diffs.len() == 1 { "s" } else { "" }
    ))
}

/// A sweep stem's timestamp and claim (`<ts>_<id8>[-N]`).
fn stem_parts(stem: &str) -> (String, u32) {
    let ts = stem.split('_').next().unwrap_or(stem).to_owned();
    let claim = stem
        .rsplit_once('-')
        .filter(|(head, _)| head.contains('_'))
        .and_then(|(_, n)| n.parse().ok())
        .unwrap_or(0);
    (ts, claim)
}

/// The sweep's committed runs, per scenario of the pack, and the run ids with a trace.
#[allow(clippy::type_complexity)]
fn committed(
    dir: &Path,
    sweep_id: &str,
    scenarios: &[Scenario],
    asked: &Asked<'_>,
    notes: &mut Vec<String>,
) -> Result<(HashMap<String, Done>, HashSet<String>), String> {
    let ids: HashSet<&str> = scenarios.iter().map(|s| s.id.as_str()).collect();
    let want = crate::report::scan::Want {
        listing: true,
        ..crate::report::scan::Want::default()
    };
    let read =
        crate::report::scan::scan(&[dir.to_owned()], want).map_err(|e| format!("--resume: {e}"))?;
    let mut done: HashMap<String, Done> = HashMap::new();
    let mut traced = HashSet::new();
    let (mut remade, mut retried) = (0usize, 0usize);
    for run in read.listing.iter().flat_map(|l| l.whole_runs()) {
        let Ok(run) = run else { continue };
        let t = &run.trace;
        if t.sweep_id != sweep_id || !ids.contains(t.scenario_id.as_str()) {
            continue;
        }
        traced.insert(t.run_id.clone());
        let d = done.entry(t.scenario_id.clone()).or_default();
        let retry = asked.retry_errors && run.score.as_ref().is_some_and(|s| retryable(t, s));
        if t.interrupted || retry {
            let mut earlier = t.earlier_attempts.clone();
            if let (true, Some(s)) = (retry, &run.score) {
                let mut a = EarlierAttempt::default();
                a.attempt = t.attempts.unwrap_or(1);
                a.error = s.error.clone().unwrap_or_default();
                a.started_at.clone_from(&t.started_at);
                a.ended_at.clone_from(&t.ended_at);
                a.usage.clone_from(&s.usage);
                earlier.push(a);
                retried += 1;
            } else {
                remade += 1;
            }
            d.remake.insert(
                t.run_index,
                Remake {
                    run_id: t.run_id.clone(),
                    stem: run.stem(),
                    earlier,
                },
            );
            continue;
        }
        d.committed.insert(t.run_index);
        d.agg
            .get_or_insert_with(|| Aggregator::new(&t.scenario_id))
            .add_run(&Contribution::of(t, run.score.as_ref()));
    }
    if remade > 0 {
        notes.push(format!(
            "{remade} run(s) cut when wt stopped are made again"
        ));
    }
    if retried > 0 {
        notes.push(format!(
            "{retried} run(s) that ended ERROR on the wiring or harness rung are retried (--retry-errors)"
        ));
    }
    Ok((done, traced))
}

/// Removes what runs in flight left when the sweep was cut — a score and hook artifacts
/// without their trace —, keeping each score's gradings for the run's next making.
fn clear_orphans(
    dir: &Path,
    told: &Told,
    traced: &HashSet<String>,
    notes: &mut Vec<String>,
) -> HashMap<(String, u32), Score> {
    let mut kept = HashMap::new();
    let Ok(entries) = crate::store::dir_entries(dir) else {
        return kept;
    };
    let names: HashSet<&str> = entries.iter().map(|(n, _)| n.as_str()).collect();
    let mut cleared = 0usize;
    for (name, path) in &entries {
        let Some(stem) = name.strip_suffix(".score.json") else {
            continue;
        };
        if names.contains(format!("{stem}.json").as_str()) {
            continue;
        }
        let Ok(bytes) =
            crate::report::load::read_bounded(path, crate::report::load::MAX_SIDECAR_BYTES)
        else {
            continue;
        };
        let Ok(score) = serde_json::from_slice::<Score>(&bytes) else {
            continue;
        };
        // Only this sweep's runs that started and never committed.
        let Some(place) = told.started.get(&score.run_id) else {
            continue;
        };
        if traced.contains(&score.run_id) {
            continue;
        }
        let prefix = format!("{stem}.");
        for (other, p) in &entries {
            if other.starts_with(&prefix)
                && crate::store::is_sidecar(p)
                && std::fs::remove_file(p).is_ok()
            {
                cleared += 1;
            }
        }
        kept.insert(place.clone(), score);
    }
    if cleared > 0 {
        notes.push(format!(
            "{cleared} file(s) of runs in flight when the sweep was cut (a score or artifacts without their trace) removed: those runs are made again"
        ));
    }
    kept
}

/// Removes the temporary files (`.wt-tmp-*`) a killed sweep left, unless another sweep is
/// writing into the directory right now (its journal is locked): they may be its.
fn clear_temp_files(dir: &Path, journals: &[PathBuf], ours: &Path, notes: &mut Vec<String>) {
    let busy = journals.iter().filter(|p| p.as_path() != ours).any(|p| {
        File::open(p).is_ok_and(|f| matches!(crate::events::try_lock_file(&f, false), Ok(false)))
    });
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let temps: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(".wt-tmp-"))
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .map(|e| e.path())
        .collect();
    if temps.is_empty() {
        return;
    }
    if busy {
        notes.push(format!(
            "{} temporary file(s) left as they are: another sweep is writing into this directory",
            temps.len()
        ));
        return;
    }
    let removed = temps
        .iter()
        .filter(|p| std::fs::remove_file(p).is_ok())
        .count();
    notes.push(format!(
        "{removed} temporary file(s) a cut sweep left (.wt-tmp-*) removed"
    ));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sweep_stem_gives_its_timestamp_and_claim() {
        assert_eq!(
            stem_parts("20261130T051500Z_8c86e1e5"),
            ("20261130T051500Z".to_owned(), 0)
        );
        assert_eq!(
            stem_parts("20261130T051500Z_8c86e1e5-2"),
            ("20261130T051500Z".to_owned(), 2)
        );
    }

    #[test]
    fn a_torn_last_line_is_cut_off_and_seq_goes_on_from_the_whole_lines() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.events.jsonl");
        let started = r#"{"seq":0,"sweep_id":"s1","event":"SweepStarted","ts":"t","agent":"demo","pack_digest":"sha256:p","agent_digest":"sha256:a","seed":3}"#;
        let run = r#"{"seq":1,"sweep_id":"s1","event":"RunStarted","scenario_id":"x","run_id":"r1","run_index":4}"#;
        std::fs::write(&path, format!("{started}\n{run}\n{{\"seq\":2,\"swe")).unwrap();
        let mut file = open_journal(&path).unwrap();
        let mut notes = Vec::new();
        let told = read_journal(&mut file, "j", &mut notes).unwrap();
        assert_eq!(told.lines, 2);
        assert_eq!(told.segments, 1);
        assert_eq!(told.sweep_id.as_deref(), Some("s1"));
        let identity = told.identity.unwrap();
        assert_eq!(
            (identity.seed, identity.agent_digest.as_str()),
            (Some(3), "sha256:a")
        );
        assert_eq!(told.started["r1"], ("x".to_owned(), 4));
        assert_eq!(notes.len(), 1, "{notes:?}");
        // What is appended next starts on a line of its own.
        file.write_all(b"{}\n").unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text, format!("{started}\n{run}\n{{}}\n"));
    }

    #[test]
    fn a_guard_denial_and_a_cut_are_never_retried_and_a_fail_is_not_an_error() {
        let mut score = Score::new("r", "s", windtunnel_model::Verdict::Error);
        let mut trace = Trace::default();
        assert!(retryable(&trace, &score));
        trace.interrupted = true;
        assert!(!retryable(&trace, &score));
        trace.interrupted = false;
        trace.denial = Some(windtunnel_model::Denial::default());
        assert!(!retryable(&trace, &score));
        trace.denial = None;
        score.verdict = windtunnel_model::Verdict::Fail;
        assert!(!retryable(&trace, &score));
    }
}
