//! The index of a runs directory (docs/reports.md, "The index"): a line per run that `wt run`
//! committed, written beside its journal as `<sweep stem>.index.jsonl` once the run's trace is
//! in place, holding what the reader keeps of the run — its [`Digest`] and its score — and
//! the stamps of its two files. The reader counts a run from its line only while both files
//! are the ones the line was written for (same inode, size, modification and change times);
//! every other run, and every run of a directory without an index, is read from its files,
//! so an index that is missing, cut short, stale or forged in part gives the same answer as
//! none (a line can only stand for files that are exactly as they were when it was written).
//!
//! Written by the sweep ([`Writer`], a sink of its event stream) and by `wt rescore` for the
//! scores it rewrites (`<time>_rescore.index.jsonl`), read by [`read`]; never by a reader.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError, mpsc};

use serde::{Deserialize, Serialize};
use windtunnel_model::{Score, is_slug};

use super::key::{pack_stem, unpack_stem};
use super::part::{Part, Shared};
use super::projection::{Digest, LinePlace, Projection};
use crate::events::{Emitted, Event, Sink};
use crate::report::load::{self, DirFd};
use crate::store;

/// The index's format: a line of another version is not read (its runs are read from their
/// files). Raised whenever what a [`Digest`] keeps of a trace changes.
pub(crate) const INDEX_VERSION: u32 = 1;
/// The suffix of an index file; its stem is its sweep's.
pub(crate) const SUFFIX: &str = ".index.jsonl";
/// A longer line is not read (its run is read from its files).
const MAX_LINE: usize = 4 << 20;
/// What is read of an index file at most (a thousand times a million runs' lines).
const MAX_INDEX_BYTES: u64 = 1 << 40;
/// Lines handed to a reader thread at a time.
const BLOCK_LINES: usize = 256;

/// What says a file is the one a line was written for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Stamp {
    pub ino: u64,
    pub size: u64,
    /// Modification and change times: seconds and nanoseconds.
    pub mtime: (i64, i64),
    pub ctime: (i64, i64),
}

impl Stamp {
    fn of(m: &std::fs::Metadata) -> Option<Stamp> {
        m.file_type().is_file().then(|| Stamp {
            ino: m.ino(),
            size: m.size(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        })
    }

    /// The stamp of the regular file at `path`, looked up by its name in `dir` when given
    /// (never through a symbolic link).
    fn at(dir: Option<&DirFd>, path: &Path) -> Option<Stamp> {
        match (dir, path.file_name().and_then(|n| n.to_str())) {
            (Some(d), Some(name)) => {
                let st = d.stat(name)?;
                (st.st_mode & libc::S_IFMT == libc::S_IFREG).then_some(Stamp {
                    ino: st.st_ino,
                    size: u64::try_from(st.st_size).ok()?,
                    mtime: (st.st_mtime, st.st_mtime_nsec),
                    ctime: (st.st_ctime, st.st_ctime_nsec),
                })
            }
            _ => Stamp::of(&std::fs::symlink_metadata(path).ok()?),
        }
    }
}

/// One run's line.
#[derive(Serialize, Deserialize)]
pub(crate) struct Entry {
    pub v: u32,
    /// The trace's file name in the directory.
    pub trace: String,
    /// The trace's and the score's.
    pub stamps: [Stamp; 2],
    /// Where the run's lines are in its sweep's journal: from its first line to the end of
    /// its `RunEnded` line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub journal: Option<(u64, u64)>,
    /// The file names of its hook artifacts, sorted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub artifacts: Vec<String>,
    pub run: Digest,
    pub score: Score,
}

/// The traces counted from a line, which the directories' listing skips: by directory and
/// stem (packed as [`pack_stem`] packs it, else whole), sorted once every line is read.
#[derive(Default)]
pub(super) struct Covered {
    packed: Vec<(u16, u64, u32)>,
    odd: Vec<(u16, Box<str>)>,
}

impl Covered {
    fn add(&mut self, dir: u16, name: &str) {
        let stem = &name[..name.len() - ".json".len()];
        match pack_stem(stem) {
            Some((hi, lo)) => self.packed.push((dir, hi, lo)),
            None => self.odd.push((dir, stem.into())),
        }
    }

    fn merge(&mut self, other: Covered) {
        self.packed.extend(other.packed);
        self.odd.extend(other.odd);
    }

    /// Sorts what was added; the first trace added twice (by two valid lines), if any.
    fn sort(&mut self) -> Option<(u16, String)> {
        self.packed.sort_unstable();
        self.odd.sort_unstable();
        let packed = self.packed.windows(2).find(|w| w[0] == w[1]);
        let odd = self.odd.windows(2).find(|w| w[0] == w[1]);
        match (packed, odd) {
            (Some(w), _) => Some((w[0].0, format!("{}.json", unpack_stem(w[0].1, w[0].2)))),
            (None, Some(w)) => Some((w[0].0, format!("{}.json", w[0].1))),
            (None, None) => None,
        }
    }

    pub(super) fn has(&self, dir: u16, name: &str) -> bool {
        let Some(stem) = name.strip_suffix(".json") else {
            return false;
        };
        match pack_stem(stem) {
            Some((hi, lo)) => self.packed.binary_search(&(dir, hi, lo)).is_ok(),
            None => self
                .odd
                .binary_search_by(|(d, s)| (*d, &**s).cmp(&(dir, stem)))
                .is_ok(),
        }
    }

    /// How many runs were counted from the index.
    pub(super) fn len(&self) -> usize {
        self.packed.len() + self.odd.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Counts every run the directories' index files hold a valid line for, with a reader thread
/// per CPU (`readers`): what each counted, the traces they counted, and the index files read.
/// When two valid lines stand for one trace (a copy of an index beside it, or one edited by
/// hand), nothing is counted from the indexes, and a warning says so: every run is then read
/// from its files.
pub(super) fn read(shared: &Shared<'_>, readers: usize) -> (Vec<Part>, Covered, Vec<PathBuf>) {
    // (The index files read come back last: a run's `LinePlace` names one by its place.)
    let files: Vec<(u16, PathBuf)> = shared
        .dirs
        .iter()
        .enumerate()
        .flat_map(|(i, dir)| index_files(dir).into_iter().map(move |p| (i as u16, p)))
        .collect();
    if files.is_empty() {
        return (Vec::new(), Covered::default(), Vec::new());
    }
    let (tx, rx) = mpsc::sync_channel::<Block>(readers * 4);
    let rx = Mutex::new(rx);
    let counted: Vec<(Part, Covered)> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..readers)
            .map(|_| s.spawn(|| count_lines(&rx, shared)))
            .collect();
        for (i, (dir, path)) in files.iter().enumerate() {
            if !send_lines((*dir, i as u32), path, &tx) {
                break;
            }
        }
        drop(tx);
        workers
            .into_iter()
            .map(|w| w.join().expect("an index reader panicked"))
            .collect()
    });
    let mut covered = Covered::default();
    let mut parts = Vec::with_capacity(counted.len());
    for (part, c) in counted {
        parts.push(part);
        covered.merge(c);
    }
    let indexes = files.into_iter().map(|(_, p)| p).collect();
    match covered.sort() {
        None => (parts, covered, indexes),
        Some((dir, name)) => {
            let mut part = Part::default();
            let path = shared.dirs[usize::from(dir)].join(&name);
            part.warn(
                dir,
                &name,
                format!(
                    "the indexes hold two lines for {}; every run is read from its files",
                    path.display()
                ),
            );
            (vec![part], Covered::default(), Vec::new())
        }
    }
}

/// The journal an index file was written beside.
pub(crate) fn journal_of(index: &Path) -> PathBuf {
    let name = index
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    let stem = name.strip_suffix(SUFFIX).unwrap_or(name);
    index.with_file_name(format!("{stem}.events.jsonl"))
}

/// The index files of `dir`, by name.
fn index_files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            !name.starts_with('.') && name.ends_with(SUFFIX)
        })
        .map(|e| e.path())
        .collect();
    found.sort();
    found
}

/// Lines of an index file for a reader: its directory, the file's place in the list of index
/// files read, and the lines with where each begins.
type Block = ((u16, u32), Vec<(u64, Vec<u8>)>);

/// A buffered reader that counts the bytes consumed: where the next line begins.
struct Counted<R> {
    inner: R,
    at: u64,
}

impl<R: BufRead> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.at += n as u64;
        Ok(n)
    }
}

impl<R: BufRead> BufRead for Counted<R> {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        self.inner.fill_buf()
    }

    fn consume(&mut self, n: usize) {
        self.at += n as u64;
        self.inner.consume(n);
    }
}

/// Hands the lines of index file `path` (of directory and place `file`) to the readers, a
/// block at a time; false when they are gone.
fn send_lines(file_at: (u16, u32), path: &Path, tx: &mpsc::SyncSender<Block>) -> bool {
    let Ok((file, _)) = load::open_bounded(path, MAX_INDEX_BYTES) else {
        return true;
    };
    let mut reader = Counted {
        inner: BufReader::with_capacity(1 << 18, file.take(MAX_INDEX_BYTES)),
        at: 0,
    };
    let mut block = Vec::with_capacity(BLOCK_LINES);
    loop {
        let mut line = Vec::new();
        let at = reader.at;
        match load::read_line_bounded(&mut reader, &mut line, MAX_LINE) {
            Some(true) => block.push((at, line)),
            Some(false) => {}
            None => break,
        }
        if block.len() == BLOCK_LINES {
            let full = std::mem::replace(&mut block, Vec::with_capacity(BLOCK_LINES));
            if tx.send((file_at, full)).is_err() {
                return false;
            }
        }
    }
    block.is_empty() || tx.send((file_at, block)).is_ok()
}

/// One reader thread: counts the runs of the lines it is handed whose files are as written.
fn count_lines(rx: &Mutex<mpsc::Receiver<Block>>, shared: &Shared<'_>) -> (Part, Covered) {
    let mut part = Part::default();
    let mut covered = Covered::default();
    let mut open: Option<(u16, Option<DirFd>)> = None;
    loop {
        let job = rx.lock().unwrap_or_else(PoisonError::into_inner).recv();
        let Ok(((dir, file), lines)) = job else { break };
        if open.as_ref().is_none_or(|(d, _)| *d != dir) {
            open = Some((dir, DirFd::open(&shared.dirs[usize::from(dir)])));
        }
        let fd = open.as_ref().and_then(|(_, fd)| fd.as_ref());
        for (offset, line) in lines {
            let Some(e) = valid(shared, dir, fd, &line) else {
                continue;
            };
            covered.add(dir, &e.trace);
            let place = LinePlace {
                index: file,
                offset,
            };
            let run = (&e.run, Some(&e.score), None);
            part.add_run(shared, dir, &e.trace, run, Some(place));
        }
    }
    (part, covered)
}

/// The line's entry when it holds for the files in `dir` now: a run this `wt` reads whole,
/// whose trace and score are the files it was written for.
fn valid(shared: &Shared<'_>, dir: u16, fd: Option<&DirFd>, line: &[u8]) -> Option<Entry> {
    let e: Entry = load::parse_json(line).ok()?;
    let plain = !e.trace.starts_with('.') && !e.trace.contains('/');
    if e.v != INDEX_VERSION || !plain || !store::is_trace(Path::new(&e.trace)) {
        return None;
    }
    let fresh = |v| load::newer_than_read(Some(v), &[]).is_none();
    if !fresh(e.run.schema_version) || !fresh(e.score.schema_version) {
        return None;
    }
    if e.run.run_id.is_empty() || e.score.run_id != e.run.run_id || !is_slug(&e.run.scenario_id) {
        return None;
    }
    let trace = shared.dirs[usize::from(dir)].join(&e.trace);
    let score = trace.with_extension("score.json");
    let now = [Stamp::at(fd, &trace)?, Stamp::at(fd, &score)?];
    (now == e.stamps).then_some(e)
}

/// Writes the index of a sweep as its runs are committed: a sink of its event stream, which
/// sees each run's `RunEnded` once its trace is in place. A failure to write is said once and
/// costs only the index (readers then read those runs from their files).
pub(crate) struct Writer {
    dir: PathBuf,
    path: PathBuf,
    state: Mutex<WriterState>,
}

struct WriterState {
    /// Opened at the first line.
    file: Option<File>,
    /// Set once a line could not be written: the rest go unindexed.
    failed: bool,
    /// Where each run still going began in the journal.
    first: HashMap<String, u64>,
    line: Vec<u8>,
}

impl Writer {
    /// The index `<dir>/<stem>.index.jsonl`, made (or, for a resumed sweep, gone on with) at
    /// its first line, never through a symbolic link.
    pub(crate) fn new(dir: &Path, stem: &str) -> Writer {
        Writer {
            dir: dir.to_owned(),
            path: dir.join(format!("{stem}{SUFFIX}")),
            state: Mutex::new(WriterState {
                file: None,
                failed: false,
                first: HashMap::new(),
                line: Vec::new(),
            }),
        }
    }

    /// Opens the index for appending: a regular file, never through a symbolic link, and
    /// never a FIFO someone put at its name (opened without waiting for a reader, then
    /// refused).
    fn open(&self) -> Result<File, String> {
        use std::os::unix::fs::OpenOptionsExt;
        let refused =
            |why: String| format!("the index {} cannot be written: {why}", self.path.display());
        let file = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&self.path)
            .map_err(|e| refused(e.to_string()))?;
        match file.metadata() {
            Ok(m) if m.is_file() => Ok(file),
            Ok(_) => Err(refused("it is not a regular file".into())),
            Err(e) => Err(refused(e.to_string())),
        }
    }

    /// Appends the line of run `stem` for the score just written: `wt rescore`'s, for a
    /// score it rewrote, in an index of its own. The digest is made of the trace file's bytes.
    pub(crate) fn append(&self, stem: &str, score: &Score, artifacts: &[String]) {
        let mut guard = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        self.write(&mut guard, (stem, None, score, artifacts), None);
    }

    /// Writes the line of run `stem` (its digest made of the trace's bytes when given, else
    /// of its file).
    fn write(
        &self,
        state: &mut WriterState,
        run: (&str, Option<&[u8]>, &Score, &[String]),
        journal: Option<(u64, u64)>,
    ) {
        if state.failed {
            return;
        }
        let line = &mut state.line;
        let written = entry_line(&self.dir, run, journal, line).and_then(|()| {
            let file = match &mut state.file {
                Some(f) => f,
                empty => empty.insert(self.open()?),
            };
            file.write_all(line)
                .map_err(|e| format!("{}: {e}", self.path.display()))
        });
        if let Err(why) = written {
            // The rest goes unindexed; what was written stays whole (a line is one write,
            // and a cut line is never read).
            crate::term::err_line(&format!(
                "warning: {why}; the runs from here on are read from their files, not the index"
            ));
            (state.failed, state.file) = (true, None);
        }
        if line.capacity() > 1 << 16 {
            *line = Vec::new();
        }
    }
}

impl Sink for Writer {
    fn event(&self, e: &Emitted<'_>) {
        let Some(run_id) = e.scope.run_id.as_deref() else {
            return;
        };
        let mut guard = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let state = &mut *guard;
        if state.failed {
            return;
        }
        if let Some(at) = e.offset
            && !state.first.contains_key(run_id)
        {
            state.first.insert(run_id.to_owned(), at);
        }
        let (Event::RunEnded { stem }, Some(run)) = (e.event, e.run) else {
            return;
        };
        let first = state.first.remove(run_id);
        let end = e
            .offset
            .zip(e.line)
            .map(|(at, line)| at + line.len() as u64);
        let written = (
            stem.as_str(),
            Some(run.trace_bytes),
            run.score,
            run.artifacts,
        );
        self.write(state, written, first.zip(end));
    }
}

/// The index line of run `stem` of `dir` as written (the trace's bytes when given, else read
/// from its file; `score`; its artifacts' file names), its journal lines at `journal`, into
/// `out`.
fn entry_line(
    dir: &Path,
    (stem, trace, score, artifacts): (&str, Option<&[u8]>, &Score, &[String]),
    journal: Option<(u64, u64)>,
    out: &mut Vec<u8>,
) -> Result<(), String> {
    let trace_path = store::trace_path(dir, stem);
    let score_path = store::score_path(dir, stem);
    let stamp =
        |p: &Path| Stamp::at(None, p).ok_or_else(|| format!("{} is not a file", p.display()));
    let stamps = [stamp(&trace_path)?, stamp(&score_path)?];
    // The digest as the reader makes it of the trace's bytes.
    let read;
    let bytes = match trace {
        Some(bytes) => bytes,
        None => {
            read = load::read_bounded(&trace_path, load::MAX_TRACE_BYTES)
                .map_err(|e| format!("{}: {e}", trace_path.display()))?;
            &read[..]
        }
    };
    let run = Digest::from(load::parse_json::<Projection>(bytes).map_err(|e| e.to_string())?);
    let entry = Entry {
        v: INDEX_VERSION,
        trace: format!("{stem}.json"),
        stamps,
        journal,
        artifacts: artifacts.to_vec(),
        run,
        score: score.clone(),
    };
    out.clear();
    serde_json::to_writer(&mut *out, &entry).map_err(|e| e.to_string())?;
    out.push(b'\n');
    Ok(())
}

/// The line at `offset` of index file `path`, when it is whole and parses, and is the line of
/// trace `trace` (the run's page reads it again: where its journal lines are, its artifacts).
pub(crate) fn entry_at(path: &Path, offset: u64, trace: &str) -> Option<Entry> {
    use std::io::{Seek, SeekFrom};
    let (mut file, _) = load::open_bounded(path, MAX_INDEX_BYTES).ok()?;
    file.seek(SeekFrom::Start(offset)).ok()?;
    let mut reader = BufReader::new(file.take(MAX_LINE as u64 + 1));
    let mut line = Vec::new();
    if load::read_line_bounded(&mut reader, &mut line, MAX_LINE) != Some(true) {
        return None;
    }
    let e: Entry = load::parse_json(&line).ok()?;
    (e.v == INDEX_VERSION && e.trace == trace).then_some(e)
}

/// An index file's entries: every line that parses, in order.
#[cfg(test)]
pub(crate) fn entries(path: &Path) -> Vec<Entry> {
    let Ok((file, _)) = load::open_bounded(path, MAX_INDEX_BYTES) else {
        return Vec::new();
    };
    let mut reader = BufReader::new(file.take(MAX_INDEX_BYTES));
    let mut out = Vec::new();
    let mut line = Vec::new();
    while let Some(whole) = load::read_line_bounded(&mut reader, &mut line, MAX_LINE) {
        if whole && let Ok(e) = load::parse_json::<Entry>(&line) {
            out.push(e);
        }
    }
    out
}
