//! The reading side's rules, applied by its one reader ([`super::scan`]): which files of a runs
//! directory are runs, how each is read (bounded, never following links, never blocking),
//! a run's score ([`read_score`]), and the event journals ([`Journals`]).
//!
//! Rules (docs/reports.md, "What the reader reads"):
//! - A trace is a `*.json` whose stem has no dot ([`crate::store::is_sidecar`] decides);
//!   its score is `<stem>.score.json`, its hook artifacts `<stem>.<hook>[.<label>].json`.
//!   A score or artifact without its trace is ignored: the runner writes the trace last, so
//!   it is the run's commit record.
//! - Hidden files (the runner's `.wt-tmp-*` temp files left by a killed sweep) are ignored.
//! - Everything in a runs directory is untrusted: files are opened without following
//!   symbolic links and without blocking, must be regular files, and are read only up to a
//!   size bound. A file that is not a `wt` trace (foreign JSON, a corrupt or oversized
//!   trace) is skipped with one warning naming it; it never fails the whole directory.
//! - A trace or score of a newer `schema_version` than this `wt`'s is one it cannot vouch
//!   for ([`newer_than_read`]): such a trace is not counted as a run and makes the reading
//!   incomplete (the gate's 3), such a score leaves its run ERROR; each is named in one line
//!   with its version.
//! - Directories given twice are read once, and a run found in several directories is
//!   counted once (by `run_id`, qualified by sweep, agent and start time: pinned sweeps of
//!   different agents reuse ids); the first directory given wins.
//! - Event journals (`*.events.jsonl`, any stem) are read for what traces cannot say: which
//!   sweeps ended (`SweepEnded`), and which scenarios could not run at all (`ScenarioEnded`
//!   with an `error`; such a scenario wrote no trace). Sweeps are told apart by the
//!   `sweep_id` inside the lines, never by file names; journals with identical bytes are
//!   read once.
//!
//! Nothing here writes anything.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use windtunnel_model::{Score, Trace};

/// Largest trace file read; larger ones are skipped with a warning.
pub(crate) const MAX_TRACE_BYTES: u64 = 64 << 20;
/// Largest score sidecar or hook artifact read.
pub(crate) const MAX_SIDECAR_BYTES: u64 = 16 << 20;
/// Largest event journal read (it is streamed, never held whole).
pub(crate) const MAX_JOURNAL_BYTES: u64 = 4 << 30;
/// Longest journal line parsed; longer lines are skipped.
const MAX_JOURNAL_LINE: u64 = 1 << 20;

/// One run as stored: its trace, its score (when the sidecar is there and readable) and
/// where they live.
#[derive(Clone, Debug)]
pub struct LoadedRun {
    pub trace: Trace,
    pub score: Option<Score>,
    /// The trace file.
    pub path: PathBuf,
    /// Why there is no score: the sidecar is missing or unreadable.
    pub score_problem: Option<String>,
    /// Hook artifacts beside the run (`<stem>.<hook>[.<label>].json`), sorted.
    pub artifacts: Vec<PathBuf>,
}

impl LoadedRun {
    /// The run's file stem (`<timestamp>_<run_id[:8]>`).
    pub fn stem(&self) -> String {
        self.path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default()
    }

    /// The first lines of the run's debrief reply (or why there is none), on one line and at
    /// most 240 characters; `None` when the run has no readable debrief artifact.
    pub(crate) fn debrief_excerpt(&self) -> Option<String> {
        let wanted = format!("{}.debrief.json", self.stem());
        let path = self
            .artifacts
            .iter()
            .find(|p| p.file_name().is_some_and(|n| n.to_string_lossy() == wanted))?;
        let bytes = read_bounded(path, MAX_SIDECAR_BYTES).ok()?;
        let doc: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
        let text = doc
            .get("reply")
            .and_then(|r| r.as_str())
            .map(str::to_owned)
            .or_else(|| {
                doc.get("error")
                    .and_then(|e| e.as_str())
                    .map(|e| format!("(no reply: {e})"))
            })?;
        let one_line = text.split_whitespace().collect::<Vec<_>>().join(" ");
        Some(if one_line.chars().count() > 240 {
            format!("{}…", one_line.chars().take(240).collect::<String>())
        } else {
            one_line
        })
    }

    /// What a hook artifact beside a run says about itself: its `kind`, if it is JSON with
    /// one.
    pub(crate) fn artifact_kind(path: &Path) -> Option<String> {
        let bytes = read_bounded(path, MAX_SIDECAR_BYTES).ok()?;
        let v: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
        v.get("kind")?.as_str().map(str::to_owned)
    }
}

/// How a sweep ended, as far as its journal says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SweepStatus {
    /// Every journal of the sweep has its `SweepEnded`.
    Complete,
    /// It ended, interrupted (`SweepEnded` with exit code 130): some runs never ran.
    Interrupted,
    /// A journal of the sweep has no `SweepEnded`: it was killed, or is still running.
    Incomplete,
    /// Traces name the sweep but no journal was found: nothing says whether it completed.
    NoJournal,
}

impl SweepStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            SweepStatus::Complete => "complete",
            SweepStatus::Interrupted => "interrupted",
            SweepStatus::Incomplete => "incomplete",
            SweepStatus::NoJournal => "no journal",
        }
    }

    /// Whether part of the sweep may never have run.
    pub fn is_partial(self) -> bool {
        matches!(self, SweepStatus::Interrupted | SweepStatus::Incomplete)
    }
}

/// One sweep among the loaded runs.
#[derive(Clone, Debug, Serialize)]
pub struct Sweep {
    pub sweep_id: String,
    pub status: SweepStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pack: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    pub hooks: Vec<String>,
    /// The shards (`K/N`) of this sweep whose journals were read, when it was sharded.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub shards: Vec<String>,
    /// Runs of this sweep among the loaded ones.
    pub runs: usize,
    /// The journals that mention it.
    pub journals: Vec<String>,
}

impl Sweep {
    /// Why part of the sweep may never have run, when it may not have.
    pub(crate) fn partial_reason(&self) -> Option<String> {
        match self.status {
            SweepStatus::Incomplete => Some(format!(
                "sweep {} is incomplete: {} has no SweepEnded (killed, or still running); \
                 its missing runs cannot be judged",
                self.sweep_id,
                self.journals.join(", ")
            )),
            SweepStatus::Interrupted => Some(format!(
                "sweep {} was interrupted: runs that never started are missing",
                self.sweep_id
            )),
            _ => None,
        }
    }
}

/// A scenario that could not run at all (provisioning or a precondition failed, or the sweep
/// was interrupted before it): known only from its journal.
#[derive(Clone, Debug, Serialize)]
pub struct ScenarioError {
    pub sweep_id: String,
    pub scenario_id: String,
    /// Runs the scenario would have had; all count as ERROR.
    pub runs: u32,
    pub error: String,
}

/// A run named by its sweep's journal (`RunEnded`) whose trace was not read.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct UnreadRun {
    pub sweep_id: String,
    pub scenario_id: String,
    pub stem: String,
}

/// The shards of every sharding (`K/N`) seen in the journals or in the traces (`shards`) that
/// neither a journal nor a trace read is of: a sweep run as N shards is whole only with all N.
/// Traces carry their shard, so a missing shard is seen even when no journal was kept.
pub(crate) fn missing_shards(
    sweeps: &[Sweep],
    shards: &std::collections::BTreeSet<String>,
) -> Vec<String> {
    let mut seen: BTreeMap<u32, std::collections::BTreeSet<u32>> = BTreeMap::new();
    for shard in sweeps.iter().flat_map(|s| &s.shards).chain(shards) {
        if let Some((k, n)) = shard.split_once('/')
            && let (Ok(k), Ok(n)) = (k.parse::<u32>(), n.parse::<u32>())
            && (1..=n).contains(&k)
        {
            seen.entry(n).or_default().insert(k);
        }
    }
    seen.into_iter()
        .filter_map(|(n, have)| {
            let missing: Vec<String> = (1..=n)
                .filter(|k| !have.contains(k))
                .map(|k| format!("{k}/{n}"))
                .collect();
            (!missing.is_empty()).then(|| {
                format!(
                    "shard(s) {} of a sweep run in {n} shards: no trace or journal of them among the directories given, so their runs are missing",
                    missing.join(", ")
                )
            })
        })
        .collect()
}

/// The score sidecar of the trace at `path` (of run `run_id`), or why there is none; a
/// sidecar that is there but unusable adds a warning.
pub(crate) fn read_score(
    path: &Path,
    run_id: &str,
    warnings: &mut Vec<String>,
) -> (Option<Score>, Option<String>) {
    read_score_at(None, path, run_id, warnings, &mut Vec::new())
}

/// Like [`read_score`], the sidecar opened in `dir` when given, read into `buf`.
pub(crate) fn read_score_at(
    dir: Option<&DirFd>,
    path: &Path,
    run_id: &str,
    warnings: &mut Vec<String>,
    buf: &mut Vec<u8>,
) -> (Option<Score>, Option<String>) {
    let score_file = path.with_extension("score.json");
    match read_bounded_into_at(dir, &score_file, MAX_SIDECAR_BYTES, buf).map(|()| &buf[..]) {
        Err(ReadProblem::Missing) => (
            None,
            Some("no score sidecar (run `wt rescore` to score it)".to_owned()),
        ),
        Err(why) => {
            let problem = format!("score sidecar {}: {why}", score_file.display());
            warnings.push(format!("{problem}; the run counts as ERROR"));
            (None, Some(problem))
        }
        Ok(bytes) => match parse_json::<Score>(bytes) {
            Ok(s) if newer_than_read(Some(s.schema_version), &[]).is_some() => {
                newer_score(&score_file, s.schema_version, warnings)
            }
            Err(_) if let Some(v) = newer_than_read(None, bytes) => {
                newer_score(&score_file, v, warnings)
            }
            Ok(s) if s.run_id == run_id => (Some(s), None),
            Ok(s) => {
                let problem = format!(
                    "score sidecar {} is for run {}, not {}",
                    score_file.display(),
                    s.run_id,
                    run_id
                );
                warnings.push(format!("{problem}; the run counts as ERROR"));
                (None, Some(problem))
            }
            Err(e) => {
                let problem = format!("score sidecar {} does not parse: {e}", score_file.display());
                warnings.push(format!("{problem}; the run counts as ERROR"));
                (None, Some(problem))
            }
        },
    }
}

/// The `schema_version` of a document this `wt` cannot vouch for: one newer than it reads.
/// `version` is what the parsed document says; `bytes`, when it did not parse as this `wt`'s
/// model, are looked at for the version alone.
pub(crate) fn newer_than_read(version: Option<u32>, bytes: &[u8]) -> Option<u32> {
    #[derive(Deserialize)]
    struct Versioned {
        schema_version: u32,
    }
    version
        .or_else(|| {
            parse_json::<Versioned>(bytes)
                .ok()
                .map(|v| v.schema_version)
        })
        .filter(|v| *v > windtunnel_model::SCHEMA_VERSION)
}

/// What a reader says of a trace of a newer schema than this `wt` reads.
pub(crate) fn newer_trace(path: &Path, version: u32) -> String {
    format!(
        "{}: a trace of schema_version {version}, newer than this wt reads ({}); not counted as a run (read it with a newer wt)",
        path.display(),
        windtunnel_model::SCHEMA_VERSION
    )
}

fn newer_score(
    score_file: &Path,
    version: u32,
    warnings: &mut Vec<String>,
) -> (Option<Score>, Option<String>) {
    let problem = format!(
        "score sidecar {} has schema_version {version}, newer than this wt reads ({})",
        score_file.display(),
        windtunnel_model::SCHEMA_VERSION
    );
    warnings.push(format!("{problem}; the run counts as ERROR"));
    (None, Some(problem))
}

/// Why a file from a runs directory was not read.
#[derive(Debug)]
pub(crate) enum ReadProblem {
    Missing,
    NotRegular,
    TooLarge { size: u64, limit: u64 },
    Io(std::io::Error),
}

impl std::fmt::Display for ReadProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadProblem::Missing => f.write_str("missing"),
            ReadProblem::NotRegular => {
                f.write_str("not a regular file (symbolic links are not followed)")
            }
            ReadProblem::TooLarge { size, limit } => write!(
                f,
                "{size} bytes is over the {} MiB limit for this kind of file",
                limit >> 20
            ),
            ReadProblem::Io(e) => write!(f, "{e}"),
        }
    }
}

/// Opens a file from a runs directory: no symbolic links followed, no blocking on a FIFO,
/// regular files only, at most `limit` bytes.
pub(crate) fn open_bounded(path: &Path, limit: u64) -> Result<(File, u64), ReadProblem> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK);
    }
    let file = options.open(path).map_err(open_problem)?;
    checked(file, limit)
}

fn open_problem(e: std::io::Error) -> ReadProblem {
    match e.kind() {
        std::io::ErrorKind::NotFound => ReadProblem::Missing,
        // O_NOFOLLOW on a symbolic link fails with ELOOP.
        _ if e.raw_os_error() == Some(libc::ELOOP) => ReadProblem::NotRegular,
        _ => ReadProblem::Io(e),
    }
}

/// A file opened from a runs directory, checked with `fstat` before a byte is read: a regular
/// file within `limit` bytes.
fn checked(file: File, limit: u64) -> Result<(File, u64), ReadProblem> {
    let meta = file.metadata().map_err(ReadProblem::Io)?;
    if !meta.is_file() {
        return Err(ReadProblem::NotRegular);
    }
    if meta.len() > limit {
        return Err(ReadProblem::TooLarge {
            size: meta.len(),
            limit,
        });
    }
    Ok((file, meta.len()))
}

/// A runs directory held open, so that a reader of many of its files opens each by its name
/// in it (one path lookup, not the directory's path again), with [`open_bounded`]'s flags
/// and checks.
pub(crate) struct DirFd(File);

impl DirFd {
    pub(crate) fn open(dir: &Path) -> Option<DirFd> {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY)
            .open(dir)
            .ok()
            .map(DirFd)
    }

    /// The status of `name` (a file name, no separator) in this directory, not following a
    /// symbolic link.
    pub(crate) fn stat(&self, name: &str) -> Option<nix::sys::stat::FileStat> {
        nix::sys::stat::fstatat(&self.0, name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW).ok()
    }

    /// Opens `name` (a file name, no separator) in this directory, as [`open_bounded`] opens a
    /// path.
    fn open_bounded(&self, name: &str, limit: u64) -> Result<(File, u64), ReadProblem> {
        use std::os::fd::{AsRawFd, FromRawFd};
        let name =
            std::ffi::CString::new(name).map_err(|e| ReadProblem::Io(std::io::Error::other(e)))?;
        // SAFETY: a directory descriptor this value owns and a NUL-terminated name; the
        // descriptor returned is owned by the `File` made of it, and only then.
        let fd = unsafe {
            libc::openat(
                self.0.as_raw_fd(),
                name.as_ptr(),
                libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(open_problem(std::io::Error::last_os_error()));
        }
        // SAFETY: `fd` was just opened and nothing else owns it.
        checked(unsafe { File::from_raw_fd(fd) }, limit)
    }
}

/// Like [`read_bounded_into`], opening the file by its name in `dir` when given (`path` is
/// then `dir`'s path joined with a file name).
pub(crate) fn read_bounded_into_at(
    dir: Option<&DirFd>,
    path: &Path,
    limit: u64,
    bytes: &mut Vec<u8>,
) -> Result<(), ReadProblem> {
    let opened = match (dir, path.file_name().and_then(|n| n.to_str())) {
        (Some(d), Some(name)) => d.open_bounded(name, limit)?,
        _ => open_bounded(path, limit)?,
    };
    read_opened(opened, limit, bytes)
}

/// Parses JSON read from a runs directory: as text when it is valid UTF-8 (strings are then
/// not checked again one by one), else as bytes, for the same error the bytes give.
pub(crate) fn parse_json<'a, T: Deserialize<'a>>(bytes: &'a [u8]) -> serde_json::Result<T> {
    match std::str::from_utf8(bytes) {
        Ok(text) => serde_json::from_str(text),
        Err(_) => serde_json::from_slice(bytes),
    }
}

/// Reads a whole file from a runs directory within `limit` bytes (see [`open_bounded`]).
pub(crate) fn read_bounded(path: &Path, limit: u64) -> Result<Vec<u8>, ReadProblem> {
    let mut bytes = Vec::new();
    read_bounded_into(path, limit, &mut bytes)?;
    Ok(bytes)
}

/// Like [`read_bounded`], into `bytes` (cleared first): a reader of many files reuses one
/// buffer.
pub(crate) fn read_bounded_into(
    path: &Path,
    limit: u64,
    bytes: &mut Vec<u8>,
) -> Result<(), ReadProblem> {
    read_opened(open_bounded(path, limit)?, limit, bytes)
}

fn read_opened(
    (mut file, len): (File, u64),
    limit: u64,
    bytes: &mut Vec<u8>,
) -> Result<(), ReadProblem> {
    bytes.clear();
    // One read of what `fstat` said and a byte more: a regular file that returns what it
    // said is at its end, so a file costs one `read`. Only a file that grew since the check
    // (the byte more came) is read on, and never past the limit.
    let want = len as usize + 1;
    bytes.resize(want, 0);
    let mut filled = 0;
    while filled < len as usize {
        match file.read(&mut bytes[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(ReadProblem::Io(e)),
        }
    }
    bytes.truncate(filled);
    if filled == want {
        file.take(limit + 1 - want as u64)
            .read_to_end(bytes)
            .map_err(ReadProblem::Io)?;
    }
    if bytes.len() as u64 > limit {
        return Err(ReadProblem::TooLarge {
            size: bytes.len() as u64,
            limit,
        });
    }
    Ok(())
}

/// The journal lines the reader cares about; every other field is ignored. Strings are
/// borrowed from the line where they need no unescaping (a journal has a line per event).
#[derive(Deserialize)]
struct Line<'a> {
    #[serde(borrow)]
    sweep_id: Cow<'a, str>,
    #[serde(borrow)]
    event: Cow<'a, str>,
    #[serde(default, borrow)]
    ts: Option<Text<'a>>,
    #[serde(default, borrow)]
    scenario_id: Option<Text<'a>>,
    #[serde(default, borrow)]
    pack: Option<Text<'a>>,
    #[serde(default, borrow)]
    agent: Option<Text<'a>>,
    #[serde(default)]
    hooks: Option<Vec<String>>,
    #[serde(default, borrow)]
    shard: Option<Text<'a>>,
    #[serde(default)]
    runs: Option<u32>,
    #[serde(default, borrow)]
    error: Option<Text<'a>>,
    #[serde(default)]
    exit_code: Option<u8>,
    #[serde(default, borrow)]
    stem: Option<Text<'a>>,
}

/// A string of a journal line, borrowed where it can be.
#[derive(Deserialize)]
#[serde(transparent)]
struct Text<'a>(#[serde(borrow)] Cow<'a, str>);

impl Text<'_> {
    fn owned(t: Option<Text<'_>>) -> Option<String> {
        t.map(|t| t.0.into_owned())
    }
}

/// What a `SweepStarted` line says.
struct Started {
    shard: Option<String>,
    ts: Option<String>,
    pack: Option<String>,
    agent: Option<String>,
    hooks: Vec<String>,
}

/// One sweep's lines in one journal file.
#[derive(Default)]
struct Segment {
    journal: String,
    started: Option<Started>,
    ended: Option<u8>,
    errors: Vec<(String, u32, String)>,
}

/// A journal accepted: its bytes are not those of one read before it.
struct Accepted {
    path: PathBuf,
    /// How many bytes were read of it.
    len: u64,
    /// SHA-256 of those bytes, computed only once another journal of the same length is read:
    /// journals of different lengths cannot hold the same bytes, so most are never hashed.
    digest: Option<[u8; 32]>,
}

/// What one stretch of a journal says (a whole journal, or one of the pieces a big one is read
/// in, side by side).
#[derive(Default)]
struct Chunk {
    by_sweep: BTreeMap<String, Segment>,
    lines: u64,
    bad: u64,
    long: u64,
    /// Bytes read.
    len: u64,
    /// The read error that ended it.
    error: Option<std::io::Error>,
    /// `RunEnded` lines whose run was not read, in order (when checked).
    missing: Vec<UnreadRun>,
}

impl Chunk {
    /// This stretch, then the one after it: what the journal says read in one go.
    fn then(mut self, next: Chunk) -> Chunk {
        if self.error.is_some() {
            // Nothing after a read error is read.
            return self;
        }
        for (id, seg) in next.by_sweep {
            match self.by_sweep.entry(id) {
                std::collections::btree_map::Entry::Vacant(e) => {
                    e.insert(seg);
                }
                std::collections::btree_map::Entry::Occupied(mut e) => {
                    let into = e.get_mut();
                    // A later line says it last.
                    if seg.started.is_some() {
                        into.started = seg.started;
                    }
                    if seg.ended.is_some() {
                        into.ended = seg.ended;
                    }
                    into.errors.extend(seg.errors);
                }
            }
        }
        self.lines += next.lines;
        self.bad += next.bad;
        self.long += next.long;
        self.len += next.len;
        self.error = next.error;
        self.missing.extend(next.missing);
        self
    }
}

impl Chunk {
    /// Counts one journal line of interest into the sweep it names.
    fn add(&mut self, line: Line<'_>, shown: &str, read: &(dyn Fn(&str) -> bool + Sync)) {
        let seg = match self.by_sweep.get_mut(line.sweep_id.as_ref()) {
            Some(seg) => seg,
            None => self
                .by_sweep
                .entry(line.sweep_id.clone().into_owned())
                .or_insert_with(|| Segment {
                    journal: shown.to_owned(),
                    ..Segment::default()
                }),
        };
        match line.event.as_ref() {
            "SweepStarted" => {
                seg.started = Some(Started {
                    shard: Text::owned(line.shard),
                    ts: Text::owned(line.ts),
                    pack: Text::owned(line.pack),
                    agent: Text::owned(line.agent),
                    hooks: line.hooks.unwrap_or_default(),
                })
            }
            "SweepEnded" => seg.ended = Some(line.exit_code.unwrap_or_default()),
            "RunEnded" => {
                if let (Some(stem), Some(scenario)) = (line.stem, line.scenario_id)
                    && !read(&stem.0)
                {
                    self.missing.push(UnreadRun {
                        sweep_id: line.sweep_id.into_owned(),
                        scenario_id: scenario.0.into_owned(),
                        stem: stem.0.into_owned(),
                    });
                }
            }
            "ScenarioEnded" => {
                if let (Some(error), Some(scenario)) = (line.error, line.scenario_id) {
                    seg.errors.push((
                        scenario.0.into_owned(),
                        line.runs.unwrap_or(0),
                        error.0.into_owned(),
                    ));
                }
            }
            _ => {}
        }
    }
}

/// Reads the lines of a journal (or of a stretch of one that starts at a line).
fn read_chunk(
    reader: &mut impl BufRead,
    shown: &str,
    mut digest: Option<&mut Sha256>,
    read: &(dyn Fn(&str) -> bool + Sync),
) -> Chunk {
    let mut c = Chunk::default();
    let mut buf = Vec::new();
    loop {
        buf.clear();
        let n = match (&mut *reader)
            .take(MAX_JOURNAL_LINE)
            .read_until(b'\n', &mut buf)
        {
            Ok(n) => n,
            Err(e) => {
                c.error = Some(e);
                break;
            }
        };
        if n == 0 {
            break;
        }
        c.len += n as u64;
        if let Some(d) = digest.as_mut() {
            d.update(&buf);
        }
        if buf.last() != Some(&b'\n') && n as u64 == MAX_JOURNAL_LINE {
            // An overlong line: skip the rest of it.
            c.long += 1;
            let (skipped, more) = skip_line(reader, digest.as_deref_mut());
            c.len += skipped;
            if !more {
                break;
            }
            continue;
        }
        c.lines += 1;
        if !is_interesting(&buf) {
            continue;
        }
        match serde_json::from_slice::<Line<'_>>(&buf) {
            Ok(line) => c.add(line, shown, read),
            Err(_) => c.bad += 1,
        }
    }
    c
}

/// Reads `file` from `at` on with positioned reads (each of several readers of one file
/// keeps its own place).
struct ReadAt<'a> {
    file: &'a File,
    at: u64,
    end: u64,
}

impl Read for ReadAt<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        use std::os::unix::fs::FileExt;
        let left = self.end.saturating_sub(self.at);
        let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        if want == 0 {
            return Ok(0);
        }
        let n = self.file.read_at(&mut buf[..want], self.at)?;
        self.at += n as u64;
        Ok(n)
    }
}

/// The start of the first line at or after `at` (the end of `file`'s `size` bytes when none).
fn line_start(file: &File, at: u64, size: u64) -> u64 {
    let mut r = std::io::BufReader::with_capacity(
        1 << 16,
        ReadAt {
            file,
            at: at.saturating_sub(1),
            end: size,
        },
    );
    let mut skipped = Vec::new();
    let mut pos = at.saturating_sub(1);
    if at == 0 {
        return 0;
    }
    loop {
        skipped.clear();
        match (&mut r).take(1 << 16).read_until(b'\n', &mut skipped) {
            Ok(0) | Err(_) => return size,
            Ok(n) => {
                pos += n as u64;
                if skipped.last() == Some(&b'\n') {
                    return pos;
                }
            }
        }
    }
}

/// Journals at least this big are read in pieces, side by side.
const SPLIT_JOURNAL_BYTES: u64 = 16 << 20;

#[derive(Default)]
pub(crate) struct Journals {
    /// The journals read, duplicates of an earlier one's bytes left out.
    accepted: Vec<Accepted>,
    /// Segments in the order read, keyed by sweep id.
    segments: Vec<(String, Segment)>,
    /// Read journals from this size on in pieces ([`SPLIT_JOURNAL_BYTES`] unless set).
    split_at: Option<u64>,
}

impl Journals {
    /// Reads one journal, checking each run it says was written against the runs read
    /// (`read(stem)`); a big journal is read in `threads` pieces side by side. Returns the
    /// runs it names that were not read, in its order, when the journal is accepted (read for
    /// the first time, not the bytes of a journal read before).
    pub(crate) fn read_checked(
        &mut self,
        path: &Path,
        warnings: &mut Vec<String>,
        read: &(dyn Fn(&str) -> bool + Sync),
        threads: usize,
    ) -> Option<Vec<UnreadRun>> {
        let (file, size) = open_journal(path, warnings)?;
        let shown = path.display().to_string();
        let split_at = self.split_at.unwrap_or(SPLIT_JOURNAL_BYTES);
        let (chunk, digest) = if size < split_at || threads < 2 {
            let mut digest = self.hashed(size).then(Sha256::new);
            let mut reader = BufReader::with_capacity(1 << 18, (&file).take(MAX_JOURNAL_BYTES));
            (
                read_chunk(&mut reader, &shown, digest.as_mut(), read),
                digest,
            )
        } else {
            // Pieces that start at a line; the last one reads on to the end, as a journal
            // still being written grows.
            let mut bounds: Vec<u64> = (0..threads as u64)
                .map(|k| line_start(&file, k * size / threads as u64, size))
                .collect();
            bounds.push(MAX_JOURNAL_BYTES);
            let chunks: Vec<Chunk> = std::thread::scope(|s| {
                let pieces: Vec<_> = bounds
                    .windows(2)
                    .map(|w| {
                        let (file, shown) = (&file, &shown);
                        let (at, end) = (w[0], w[1]);
                        s.spawn(move || {
                            let mut reader =
                                BufReader::with_capacity(1 << 18, ReadAt { file, at, end });
                            read_chunk(&mut reader, shown, None, read)
                        })
                    })
                    .collect();
                pieces
                    .into_iter()
                    .map(|p| p.join().expect("a journal reader panicked"))
                    .collect()
            });
            let chunk = chunks.into_iter().reduce(Chunk::then).unwrap_or_default();
            (chunk, None)
        };
        let mut chunk = chunk;
        let missing = std::mem::take(&mut chunk.missing);
        self.accept(path, chunk, digest, warnings)
            .then_some(missing)
    }

    /// What was read, to compare readings (sweeps by id with status, pack, errors, journals).
    #[cfg(test)]
    fn sweeps(self) -> String {
        let mut errors = Vec::new();
        let mut warnings = Vec::new();
        let sweeps = self.close(BTreeMap::new(), &mut errors, &mut warnings);
        format!(
            "{}\n{}\n{warnings:?}",
            serde_json::to_string(&sweeps).unwrap(),
            serde_json::to_string(&errors).unwrap()
        )
    }

    /// Whether a journal of `size` bytes is hashed as it is read: only when one of its length
    /// was read before.
    fn hashed(&self, size: u64) -> bool {
        self.accepted.iter().any(|a| a.len == size)
    }

    /// Takes what a journal said, unless it said nothing a journal says or its bytes are those
    /// of a journal read before (`digest`: its hash, when it was hashed as it was read).
    fn accept(
        &mut self,
        path: &Path,
        chunk: Chunk,
        digest: Option<Sha256>,
        warnings: &mut Vec<String>,
    ) -> bool {
        let shown = path.display();
        if let Some(e) = &chunk.error {
            warnings.push(format!("journal {shown}: {e}"));
        }
        let mut skipped = Vec::new();
        if chunk.bad > 0 {
            skipped.push(format!("{} line(s) that are not journal events", chunk.bad));
        }
        if chunk.long > 0 {
            skipped.push(format!(
                "{} line(s) over {} MiB",
                chunk.long,
                MAX_JOURNAL_LINE >> 20
            ));
        }
        if chunk.by_sweep.is_empty() {
            if chunk.lines > 0 || chunk.long > 0 {
                let why = if skipped.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", skipped.join(", "))
                };
                warnings.push(format!(
                    "skipping journal {shown}: not a wt event journal{why}"
                ));
            }
            return false;
        }
        if !skipped.is_empty() {
            warnings.push(format!(
                "journal {shown}: skipped {}",
                skipped.join(" and ")
            ));
        }
        let len = chunk.len;
        let mut mine = digest.map(|d| <[u8; 32]>::from(d.finalize()));
        for a in self.accepted.iter_mut().filter(|a| a.len == len) {
            let theirs = *a.digest.get_or_insert_with(|| digest_of(&a.path, len));
            let mine = *mine.get_or_insert_with(|| digest_of(path, len));
            if theirs == mine {
                return false;
            }
        }
        self.accepted.push(Accepted {
            path: path.to_owned(),
            len,
            digest: mine,
        });
        self.segments.extend(chunk.by_sweep);
        true
    }

    /// The sweeps the journals (and the runs read, `runs_per_sweep`) tell of, with the
    /// scenarios that could not run and a warning per partial sweep.
    pub(crate) fn close(
        self,
        runs_per_sweep: BTreeMap<String, usize>,
        scenario_errors: &mut Vec<ScenarioError>,
        warnings: &mut Vec<String>,
    ) -> Vec<Sweep> {
        let mut sweeps: BTreeMap<String, Sweep> = BTreeMap::new();
        let new_sweep = |id: &str| Sweep {
            sweep_id: id.to_owned(),
            status: SweepStatus::NoJournal,
            pack: None,
            agent: None,
            started_at: None,
            hooks: Vec::new(),
            shards: Vec::new(),
            runs: 0,
            journals: Vec::new(),
        };
        for (id, seg) in self.segments {
            let s = sweeps.entry(id.clone()).or_insert_with(|| new_sweep(&id));
            if !s.journals.contains(&seg.journal) {
                s.journals.push(seg.journal);
            }
            if let Some(started) = seg.started {
                s.started_at = s.started_at.take().or(started.ts);
                s.pack = s.pack.take().or(started.pack);
                s.agent = s.agent.take().or(started.agent);
                if let Some(k) = started.shard.filter(|k| !s.shards.contains(k)) {
                    s.shards.push(k);
                }
                for h in started.hooks {
                    if !s.hooks.contains(&h) {
                        s.hooks.push(h);
                    }
                }
            }
            let status = match seg.ended {
                None => SweepStatus::Incomplete,
                Some(code) if code == crate::exit::INTERRUPTED => SweepStatus::Interrupted,
                Some(_) => SweepStatus::Complete,
            };
            // A sweep with several segments (shards sharing an id) is as partial as its
            // most partial segment.
            s.status = match (s.status, status) {
                (SweepStatus::Incomplete, _) | (_, SweepStatus::Incomplete) => {
                    SweepStatus::Incomplete
                }
                (SweepStatus::Interrupted, _) | (_, SweepStatus::Interrupted) => {
                    SweepStatus::Interrupted
                }
                _ => SweepStatus::Complete,
            };
            for (scenario_id, runs, error) in seg.errors {
                scenario_errors.push(ScenarioError {
                    sweep_id: id.clone(),
                    scenario_id,
                    runs,
                    error,
                });
            }
        }
        for (id, n) in runs_per_sweep {
            sweeps
                .entry(id.clone())
                .or_insert_with(|| new_sweep(&id))
                .runs += n;
        }
        warnings.extend(sweeps.values().filter_map(Sweep::partial_reason));
        sweeps.into_values().collect()
    }
}

/// Opens a journal within its bound, or says why not.
fn open_journal(path: &Path, warnings: &mut Vec<String>) -> Option<(File, u64)> {
    match open_bounded(path, MAX_JOURNAL_BYTES) {
        Ok(f) => Some(f),
        Err(why) => {
            warnings.push(format!("skipping journal {}: {why}", path.display()));
            None
        }
    }
}

/// SHA-256 of the first `len` bytes of a journal read before (to tell copies apart). A file
/// that can no longer be read hashes as its path, which no journal's bytes will equal.
fn digest_of(path: &Path, len: u64) -> [u8; 32] {
    let mut digest = Sha256::new();
    match open_bounded(path, MAX_JOURNAL_BYTES) {
        Ok((file, _)) => {
            let mut reader = BufReader::with_capacity(1 << 18, file.take(len));
            loop {
                match reader.fill_buf() {
                    Ok([]) | Err(_) => break,
                    Ok(chunk) => {
                        digest.update(chunk);
                        let n = chunk.len();
                        reader.consume(n);
                    }
                }
            }
        }
        Err(_) => {
            digest.update(b"\0unreadable\0");
            digest.update(path.as_os_str().as_encoded_bytes());
        }
    }
    digest.finalize().into()
}

/// Discards the rest of an overlong line in bounded chunks: the bytes it skipped, and false
/// at the end of the file.
fn skip_line(reader: &mut impl BufRead, mut digest: Option<&mut Sha256>) -> (u64, bool) {
    let mut chunk = Vec::new();
    let mut skipped = 0;
    loop {
        chunk.clear();
        match (&mut *reader)
            .take(MAX_JOURNAL_LINE)
            .read_until(b'\n', &mut chunk)
        {
            Ok(0) | Err(_) => return (skipped, false),
            Ok(n) => {
                skipped += n as u64;
                if let Some(d) = digest.as_mut() {
                    d.update(&chunk);
                }
                if chunk.last() == Some(&b'\n') {
                    return (skipped, true);
                }
            }
        }
    }
}

/// Only four events matter here; skip parsing the rest (most of a journal). The needles are
/// searched with `memchr`'s substring search.
fn is_interesting(line: &[u8]) -> bool {
    // Built once: a journal of a million runs has some twenty million lines.
    static NEEDLES: std::sync::LazyLock<[memchr::memmem::Finder<'static>; 4]> =
        std::sync::LazyLock::new(|| {
            [
                "\"SweepStarted\"",
                "\"SweepEnded\"",
                "\"ScenarioEnded\"",
                "\"RunEnded\"",
            ]
            .map(|n| memchr::memmem::Finder::new(n.as_bytes()))
        });
    NEEDLES.iter().any(|n| n.find(line).is_some())
}

/// A run's trace and score, read again without its artifacts: the score only when it is the
/// sidecar of that run (the sidecar rule).
pub(crate) fn read_trace_and_score(path: &Path) -> Result<(Trace, Option<Score>), String> {
    let bytes =
        read_bounded(path, MAX_TRACE_BYTES).map_err(|why| format!("{}: {why}", path.display()))?;
    let trace: Trace =
        parse_json(&bytes).map_err(|e| format!("{}: not a wt trace ({e})", path.display()))?;
    let (score, _) = read_score(path, &trace.run_id, &mut Vec::new());
    Ok((trace, score))
}

/// Longest journal line a run's events are read from; a longer one is skipped.
const MAX_EVENT_LINE: usize = 1 << 20;

/// The events of run `run_id` in `journals` (the lines naming its id), in file order; at most
/// `max`, each line at most [`MAX_EVENT_LINE`] bytes. A journal that cannot be opened as
/// [`open_bounded`] opens files is passed over.
pub(crate) fn run_events<'a>(
    journals: impl Iterator<Item = &'a Path>,
    run_id: &str,
    max: usize,
) -> Vec<serde_json::Value> {
    let mut out = Vec::new();
    for journal in journals {
        let Ok((file, _)) = open_bounded(journal, MAX_JOURNAL_BYTES) else {
            continue;
        };
        events_of(BufReader::new(file), run_id, max, &mut out);
        if out.len() == max {
            break;
        }
    }
    out
}

/// Like [`run_events`], from the `len` bytes of `journal` at `start` where an index says the
/// run's lines are; `None` when they hold none of them (the journal is not the one the index
/// was written beside), and the caller reads the journals whole.
pub(crate) fn run_events_at(
    journal: &Path,
    (start, len): (u64, u64),
    run_id: &str,
    max: usize,
) -> Option<Vec<serde_json::Value>> {
    use std::io::{Seek, SeekFrom};
    let (mut file, size) = open_bounded(journal, MAX_JOURNAL_BYTES).ok()?;
    if start.checked_add(len)? > size {
        return None;
    }
    file.seek(SeekFrom::Start(start)).ok()?;
    let mut out = Vec::new();
    events_of(BufReader::new(file.take(len)), run_id, max, &mut out);
    (!out.is_empty()).then_some(out)
}

/// Adds the lines of `reader` naming run `run_id` to `out`, up to `max` in all.
fn events_of(
    mut reader: impl std::io::BufRead,
    run_id: &str,
    max: usize,
    out: &mut Vec<serde_json::Value>,
) {
    let marker = format!(
        "\"run_id\":{}",
        serde_json::to_string(run_id).unwrap_or_default()
    );
    let marker = memchr::memmem::Finder::new(marker.as_bytes());
    let mut line = Vec::new();
    while let Some(whole) = read_line_bounded(&mut reader, &mut line, MAX_EVENT_LINE) {
        if out.len() == max {
            return;
        }
        if !whole || marker.find(&line).is_none() {
            continue;
        }
        if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&line)
            && v["run_id"] == run_id
        {
            out.push(v);
        }
    }
}

/// Reads the next line into `line` (without its newline), keeping at most `max` bytes:
/// `Some(true)` for a whole line, `Some(false)` for one that was longer (cut), `None` at the
/// end of the file or on an error.
pub(crate) fn read_line_bounded(
    r: &mut impl std::io::BufRead,
    line: &mut Vec<u8>,
    max: usize,
) -> Option<bool> {
    line.clear();
    let mut whole = true;
    let mut any = false;
    loop {
        let buf = r.fill_buf().ok()?;
        if buf.is_empty() {
            return any.then_some(whole);
        }
        any = true;
        let (part, found) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (&buf[..i], Some(i + 1)),
            None => (buf, None),
        };
        if line.len() + part.len() <= max {
            line.extend_from_slice(part);
        } else {
            whole = false;
        }
        let used = found.unwrap_or(buf.len());
        r.consume(used);
        if found.is_some() {
            return Some(whole);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store;
    use windtunnel_model::Verdict;

    fn write_run(dir: &Path, stem: &str, run_id: &str, score_for: &str) {
        let mut trace = Trace::new(run_id, "s");
        trace.sweep_id = "sw".into();
        let score = Score::new(score_for, "s", Verdict::Pass);
        store::write_json(&dir.join(format!("{stem}.json")), &trace).unwrap();
        store::write_json(&dir.join(format!("{stem}.score.json")), &score).unwrap();
    }

    /// Every run in `dir` as the reader hands it over whole, and its warnings.
    fn read_whole(dir: &Path) -> (Vec<LoadedRun>, crate::report::Report) {
        use crate::report::scan::{Want, scan};
        let want = Want {
            listing: true,
            ..Want::default()
        };
        let report = crate::report::Report::from_scan(scan(&[dir], want).unwrap());
        let runs = report
            .listing
            .as_ref()
            .unwrap()
            .whole_runs()
            .map(Result::unwrap)
            .collect();
        (runs, report)
    }

    #[test]
    fn a_line_longer_than_the_bound_is_cut_and_the_next_one_read_whole() {
        let text = format!("{}\nshort\nlast", "y".repeat(100));
        let mut r = std::io::BufReader::with_capacity(8, text.as_bytes());
        let mut line = Vec::new();
        assert_eq!(read_line_bounded(&mut r, &mut line, 10), Some(false));
        assert_eq!(read_line_bounded(&mut r, &mut line, 10), Some(true));
        assert_eq!(line, b"short");
        assert_eq!(read_line_bounded(&mut r, &mut line, 10), Some(true));
        assert_eq!(line, b"last");
        assert_eq!(read_line_bounded(&mut r, &mut line, 10), None);
    }

    #[test]
    fn a_score_of_another_run_is_not_this_runs_score() {
        let dir = tempfile::tempdir().unwrap();
        write_run(dir.path(), "t_aaaaaaaa", "aaaaaaaa-1", "aaaaaaaa-1");
        write_run(dir.path(), "t_bbbbbbbb", "bbbbbbbb-1", "someone-else");
        let (runs, l) = read_whole(dir.path());
        assert_eq!(runs.len(), 2);
        let b = runs
            .iter()
            .find(|r| r.trace.run_id == "bbbbbbbb-1")
            .unwrap();
        assert!(b.score.is_none());
        assert!(
            b.score_problem
                .as_ref()
                .unwrap()
                .contains("is for run someone-else")
        );
        assert_eq!(l.warnings.len(), 1, "{:?}", l.warnings);
    }

    #[test]
    fn journals_give_status_and_scenario_errors_and_are_read_once() {
        let dir = tempfile::tempdir().unwrap();
        let line = |sweep: &str, event: &str, extra: &str| {
            format!("{{\"v\":1,\"seq\":0,\"sweep_id\":\"{sweep}\",\"event\":\"{event}\"{extra}}}\n")
        };
        let long = format!(
            "{{\"event\":\"TurnStarted\",\"input\":\"{}\"}}\n",
            "x".repeat(2 << 20)
        );
        let done = [
            line(
                "a",
                "SweepStarted",
                ",\"pack\":\"p\",\"agent\":\"demo\",\"hooks\":[]",
            ),
            long,
            line(
                "a",
                "ScenarioEnded",
                ",\"scenario_id\":\"s\",\"runs\":3,\"error\":\"provisioning failed: x\"",
            ),
            line("a", "SweepEnded", ",\"exit_code\":3"),
        ]
        .concat();
        std::fs::write(dir.path().join("one.events.jsonl"), &done).unwrap();
        // The same bytes again (a copied directory): read once.
        std::fs::write(dir.path().join("copy.events.jsonl"), &done).unwrap();
        std::fs::write(
            dir.path().join("two.events.jsonl"),
            [
                line("b", "SweepStarted", ""),
                line("b", "SweepEnded", ",\"exit_code\":130"),
            ]
            .concat(),
        )
        .unwrap();
        std::fs::write(
            dir.path().join("three.events.jsonl"),
            line("c", "SweepStarted", ""),
        )
        .unwrap();
        let (_, l) = read_whole(dir.path());
        let status: Vec<(&str, SweepStatus)> = l
            .sweeps
            .iter()
            .map(|s| (s.sweep_id.as_str(), s.status))
            .collect();
        assert_eq!(
            status,
            [
                ("a", SweepStatus::Complete),
                ("b", SweepStatus::Interrupted),
                ("c", SweepStatus::Incomplete)
            ]
        );
        assert_eq!(l.scenario_errors.len(), 1, "copied journal counted once");
        assert_eq!(l.scenario_errors[0].runs, 3);
        assert_eq!(l.sweeps[0].pack.as_deref(), Some("p"));
        assert!(
            l.warnings
                .iter()
                .any(|w| w.contains("skipped 1 line(s) over 1 MiB")),
            "the overlong line: {:?}",
            l.warnings
        );
        assert_eq!(l.partial_sweeps().count(), 2);
    }

    /// A journal read in pieces side by side says what it says read in one go: the same
    /// sweeps, statuses, scenario errors, warnings and runs not read, in the same order.
    #[test]
    fn a_journal_read_in_pieces_is_the_journal_read_whole() {
        let dir = tempfile::tempdir().unwrap();
        let line = |sweep: &str, event: &str, extra: &str| {
            format!("{{\"v\":1,\"sweep_id\":\"{sweep}\",\"event\":\"{event}\"{extra}}}\n")
        };
        let mut text = String::new();
        for (k, sweep) in ["b", "a", "b"].iter().enumerate() {
            text += &line(
                sweep,
                "SweepStarted",
                &format!(",\"pack\":\"p{k}\",\"hooks\":[\"h\"]"),
            );
            for i in 0..40 {
                text += &line(sweep, "RunStarted", ",\"input\":\"some text\"");
                text += &line(
                    sweep,
                    "RunEnded",
                    &format!(",\"scenario_id\":\"s\",\"stem\":\"x{k}-{i:02}\""),
                );
                if i % 13 == 0 {
                    text += "{\"event\": \"RunEnded\", broken\n";
                    text += &format!(
                        "{{\"event\":\"TurnStarted\",\"input\":\"{}\"}}\n",
                        "y".repeat(1 << 20)
                    );
                }
            }
            text += &line(
                sweep,
                "ScenarioEnded",
                &format!(",\"scenario_id\":\"t\",\"runs\":{k},\"error\":\"e{k}\""),
            );
            text += &line(sweep, "SweepEnded", &format!(",\"exit_code\":{}", 129 + k));
        }
        text += "{\"sweep_id\":\"c\",\"event\":\"SweepStarted\""; // cut off mid-line
        let path = dir.path().join("big.events.jsonl");
        std::fs::write(&path, &text).unwrap();
        let read = |stem: &str| stem.ends_with('7');
        let whole = {
            let mut j = Journals::default();
            let mut w = Vec::new();
            let missing = j.read_checked(&path, &mut w, &read, 1).unwrap();
            (j.sweeps(), w, missing)
        };
        assert_eq!(whole.2.len(), 3 * 40 - 3 * 4, "runs not read");
        assert!(
            whole.1.iter().any(|w| w.contains(
                "skipped 13 line(s) that are not journal events and 12 line(s) over 1 MiB"
            )),
            "{:?}",
            whole.1
        );
        for threads in 2..9 {
            let mut j = Journals {
                split_at: Some(0),
                ..Journals::default()
            };
            let mut w = Vec::new();
            let missing = j.read_checked(&path, &mut w, &read, threads).unwrap();
            assert_eq!((j.sweeps(), w, missing), whole, "{threads} pieces");
        }
    }

    #[test]
    fn bounded_reads_refuse_links_fifos_and_big_files() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.json");
        std::fs::write(&file, b"0123456789").unwrap();
        assert_eq!(read_bounded(&file, 10).unwrap().len(), 10);
        assert!(matches!(
            read_bounded(&file, 9),
            Err(ReadProblem::TooLarge { size: 10, .. })
        ));
        let link = dir.path().join("l.json");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        assert!(matches!(
            read_bounded(&link, 100),
            Err(ReadProblem::NotRegular)
        ));
        let fifo = dir.path().join("f.json");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert!(matches!(
            read_bounded(&fifo, 100),
            Err(ReadProblem::NotRegular)
        ));
        assert!(matches!(
            read_bounded(&dir.path().join("none"), 100),
            Err(ReadProblem::Missing)
        ));
    }
}
