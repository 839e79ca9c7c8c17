//! Files on disk (ARCHITECTURE §4): one directory per story, `<stem>.json` traces,
//! `<stem>.score.json` score sidecars and hook artifacts beside them.
//!
//! - [`is_sidecar`] is THE sidecar rule; every walker goes through the reading side's one
//!   reader (`report::scan`, also behind `report::load_runs`), which applies it, so a sidecar
//!   is never mistaken for a trace.
//! - Every write is atomic: a temporary file (`.wt-tmp-*`) in the target directory, then a
//!   rename, so a killed sweep leaves only whole files (no fsync: whole files on a crash of
//!   `wt`, not on a power cut). Temporary files in flight are tracked, so a second Ctrl-C or
//!   an aborted exit removes them ([`remove_temp_files`]).
//! - A run's score is created new ([`write_json_new`]): it claims the run's stem, so two
//!   sweeps writing into one directory can never overwrite each other's runs.
//! - Stems and names are validated at write time so a trace stem never contains a dot, and
//!   no hook artifact can take the name of one of `wt`'s own files ([`RESERVED_LABELS`]).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::Serialize;
use windtunnel_model::{Score, Trace, is_slug};

/// A file-system failure, naming the file.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("write {path}: it exists already")]
    Exists { path: PathBuf },
    #[error("write {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("parse {path}: {source}")]
    Parse {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("refuse to write {what} {name:?}: {why}")]
    BadName {
        what: &'static str,
        name: String,
        why: &'static str,
    },
}

/// The sidecar rule: a `*.json` file whose stem contains a dot is a sidecar (score, hook
/// artifact, pack-level artifact), never a trace. Non-JSON files are neither.
pub(crate) fn is_sidecar(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "json")
        && path
            .file_stem()
            .and_then(|s| s.to_str())
            .is_some_and(|s| s.contains('.'))
}

/// Is `path` a trace file (`*.json` and not a sidecar)?
pub(crate) fn is_trace(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "json") && !is_sidecar(path)
}

/// The stem of a run's files: `<UTC timestamp, no dots>_<run_id[:8]>`.
pub(crate) fn stem(compact_ts: &str, run_id: &str) -> Result<String, StoreError> {
    let short = run_id
        .char_indices()
        .nth(8)
        .map_or(run_id, |(at, _)| &run_id[..at]);
    let mut stem = String::with_capacity(compact_ts.len() + 1 + short.len());
    stem.push_str(compact_ts);
    stem.push('_');
    stem.push_str(short);
    if stem.bytes().any(|b| matches!(b, b'.' | b'/' | b'\\')) || short.is_empty() {
        return Err(StoreError::BadName {
            what: "trace stem",
            name: stem,
            why: "a trace stem must not contain dots or path separators",
        });
    }
    Ok(stem)
}

pub(crate) fn trace_path(dir: &Path, stem: &str) -> PathBuf {
    path_in(dir, stem, ".json")
}

pub(crate) fn score_path(dir: &Path, stem: &str) -> PathBuf {
    path_in(dir, stem, ".score.json")
}

/// `dir/<stem><ext>` (`stem` has no separator), in one allocation.
fn path_in(dir: &Path, stem: &str, ext: &str) -> PathBuf {
    let mut path = PathBuf::with_capacity(dir.as_os_str().len() + 1 + stem.len() + ext.len());
    path.push(dir);
    path.push(stem);
    path.as_mut_os_string().push(ext);
    path
}

/// Labels no artifact may carry (the SDK's rule): they would make its file look like one of
/// `wt`'s own.
pub(crate) use windtunnel_sdk::rules::RESERVED_LABELS;

/// Checks a hook name and an artifact label for use in a file name.
pub(crate) fn check_artifact_names(hook: &str, label: Option<&str>) -> Result<(), StoreError> {
    for (what, name) in [("hook name", Some(hook)), ("artifact label", label)] {
        if let Some(name) = name
            && !is_slug(name)
        {
            return Err(StoreError::BadName {
                what,
                name: name.to_owned(),
                why: "use 1-64 characters of a-z, 0-9, `_` and `-`",
            });
        }
    }
    if let Some(l) = label.filter(|l| RESERVED_LABELS.contains(l)) {
        return Err(StoreError::BadName {
            what: "artifact label",
            name: l.to_owned(),
            why: "`score` and `pack` are reserved for wt's own files",
        });
    }
    Ok(())
}

/// `<stem>.<hook>.json` or `<stem>.<hook>.<label>.json`; hook and label must be slugs.
pub(crate) fn artifact_path(
    dir: &Path,
    stem: &str,
    hook: &str,
    label: Option<&str>,
) -> Result<PathBuf, StoreError> {
    check_artifact_names(hook, label)?;
    Ok(dir.join(match label {
        Some(l) => format!("{stem}.{hook}.{l}.json"),
        None => format!("{stem}.{hook}.json"),
    }))
}

/// A scenario- or pack-scoped hook artifact, at the runs-directory root:
/// `<sweep_stem>.<hook>[.<label>].pack.json` for the pack,
/// `<sweep_stem>.<hook>.scenario.<scenario_id>[.<label>].pack.json` for a scenario. The
/// two cannot collide: a scenario's name has two segments more than the pack's.
pub(crate) fn scoped_artifact_path(
    dir: &Path,
    sweep_stem: &str,
    hook: &str,
    scenario_id: Option<&str>,
    label: Option<&str>,
) -> Result<PathBuf, StoreError> {
    check_artifact_names(hook, label)?;
    if let Some(id) = scenario_id.filter(|id| !is_slug(id)) {
        return Err(StoreError::BadName {
            what: "scenario id",
            name: id.to_owned(),
            why: "use 1-64 characters of a-z, 0-9, `_` and `-`",
        });
    }
    let mut name = format!("{sweep_stem}.{hook}");
    if let Some(id) = scenario_id {
        name.push_str(".scenario.");
        name.push_str(id);
    }
    if let Some(l) = label {
        name.push('.');
        name.push_str(l);
    }
    name.push_str(".pack.json");
    Ok(dir.join(name))
}

/// Temporary files being written right now.
// A list, not a set: it holds at most a file per writing thread, and a sweep adds and removes
// two or three a run (hashing a path cost more than finding it among a few).
static IN_FLIGHT: Mutex<Option<Vec<PathBuf>>> = Mutex::new(None);

/// A new temporary file in `dir`, on the list of those being written. It is created and
/// listed in one step, under the list's lock, so an exit's clean-up ([`remove_temp_files`])
/// never misses one; once `wt` is exiting none is created.
fn tracked_temp_file(dir: &Path) -> std::io::Result<tempfile::NamedTempFile> {
    static AT_STOP: std::sync::Once = std::sync::Once::new();
    AT_STOP.call_once(|| crate::interrupt::at_stop(remove_temp_files));
    let mut list = IN_FLIGHT.lock().unwrap_or_else(|e| e.into_inner());
    if crate::interrupt::exiting() {
        return Err(std::io::Error::other("wt is exiting"));
    }
    let file = temp_file(dir)?;
    list.get_or_insert_with(Vec::new)
        .push(file.path().to_owned());
    Ok(file)
}

fn untrack(path: &Path) {
    let mut list = IN_FLIGHT.lock().unwrap_or_else(|e| e.into_inner());
    let bytes = path.as_os_str().as_encoded_bytes();
    if let Some(list) = list.as_mut()
        && let Some(at) = list
            .iter()
            .rposition(|p| p.as_os_str().as_encoded_bytes() == bytes)
    {
        list.swap_remove(at);
    }
}

/// Checks, before any work, that a file can be written at `path` later (atomically, as
/// [`write_atomic`] does): not a directory, in a directory that exists and takes a new file;
/// or a device or FIFO, written into. `what` names the option, for the message.
pub(crate) fn check_output(path: &Path, what: &str) -> Result<(), String> {
    let shown = path.display();
    if path.is_dir() {
        return Err(format!("{what} {shown}: is a directory"));
    }
    if is_stream(path) {
        return Ok(());
    }
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    if !parent.is_dir() {
        return Err(format!(
            "{what} {shown}: no directory {} to write it in",
            parent.display()
        ));
    }
    probe(parent).map_err(|e| format!("{what} {shown}: {e}"))
}

/// Can a file be created in `dir`? Tries a temporary file, removed at once. The error names
/// the directory and the system's reason (not the temporary file's name).
fn probe(dir: &Path) -> Result<(), String> {
    temp_file(dir).map(drop).map_err(|e| {
        // tempfile adds the temporary file's name (`… at path "…"`): the cause is before it.
        let text = e.to_string();
        let why = text
            .rsplit_once(" at path \"")
            .map_or(text.as_str(), |(cause, _)| cause);
        format!("cannot write in {}: {why}", dir.display())
    })
}

/// Checks that runs can be written in `dir` (`what` names it in the message), or that it
/// can be created: a file, a directory without write permission or a place no file can be
/// created (`/proc`) is found before the sweep is announced, not at its first run. Nothing
/// is created but a temporary file, removed at once.
pub(crate) fn check_runs_dir(dir: &Path, what: &str) -> Result<(), String> {
    let shown = dir.display();
    // The directory, or the nearest of its ancestors that exists: the sweep creates the rest.
    let mut existing = dir;
    while !existing.as_os_str().is_empty() && std::fs::symlink_metadata(existing).is_err() {
        existing = existing.parent().unwrap_or(Path::new(""));
    }
    if existing.as_os_str().is_empty() {
        existing = Path::new(".");
    }
    if !existing.is_dir() {
        return Err(if existing == dir {
            format!("{what} {shown}: not a directory")
        } else {
            format!("{what} {shown}: {} is not a directory", existing.display())
        });
    }
    probe(existing).map_err(|e| format!("{what} {shown}: {e}"))
}

/// Removes the temporary files being written right now (before an exit that will not let
/// their writers finish). It waits only for a writer that is creating its file (the list's
/// lock is held for no longer), never for a write.
pub(crate) fn remove_temp_files() {
    let mut set = IN_FLIGHT.lock().unwrap_or_else(|e| e.into_inner());
    for p in set.take().unwrap_or_default() {
        let _ = std::fs::remove_file(p);
    }
}

/// Creates a new temporary file `.wt-tmp-XXXXXX` in `dir`: hidden, so no walker of a runs
/// directory takes it for a run; created new (`O_EXCL`), so never opened through a symlink;
/// 0644 less the umask, so the files left behind are ordinary ones, readable by whoever
/// collects the runs directory. Dropped, it is removed.
fn temp_file(dir: &Path) -> std::io::Result<tempfile::NamedTempFile> {
    use std::os::unix::fs::PermissionsExt;
    tempfile::Builder::new()
        .prefix(".wt-tmp-")
        .permissions(std::fs::Permissions::from_mode(0o644))
        .tempfile_in(dir)
}

/// Writes `bytes` to `path` atomically (temp file in the same directory, then rename); with
/// `new`, fails with [`StoreError::Exists`] instead of replacing a file.
fn write_file(path: &Path, bytes: &[u8], new: bool) -> Result<(), StoreError> {
    write_file_with(path, new, |f| f.write_all(bytes))
}

/// Writes what `fill` writes to `path` atomically, streamed through a buffer (a document too
/// big to hold, such as the JSON report of a million runs).
pub(crate) fn write_atomic_with(
    path: &Path,
    fill: impl FnOnce(&mut dyn std::io::Write) -> std::io::Result<()>,
) -> Result<(), StoreError> {
    if is_stream(path) {
        return write_stream(path, |f| {
            let mut w = std::io::BufWriter::with_capacity(1 << 16, f);
            fill(&mut w)?;
            w.flush()
        });
    }
    write_file_with(path, false, |f| {
        let mut w = std::io::BufWriter::with_capacity(1 << 16, f);
        fill(&mut w)?;
        w.flush()
    })
}

fn write_file_with(
    path: &Path,
    new: bool,
    fill: impl FnOnce(&mut std::fs::File) -> std::io::Result<()>,
) -> Result<(), StoreError> {
    let err = |source| StoreError::Write {
        path: path.to_owned(),
        source,
    };
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let mut file = tracked_temp_file(dir).map_err(err)?;
    let tmp = file.path().to_owned();
    // On any failure the temp file is dropped, and so removed: nothing half-written is left.
    let result = fill(file.as_file_mut()).map_err(err).and_then(|()| {
        let persisted = if new {
            file.persist_noclobber(path)
        } else {
            file.persist(path)
        };
        persisted.map(drop).map_err(|e| {
            if e.error.kind() == std::io::ErrorKind::AlreadyExists {
                StoreError::Exists {
                    path: path.to_owned(),
                }
            } else {
                err(e.error)
            }
        })
    });
    untrack(&tmp);
    result
}

/// Writes `bytes` to `path` atomically (temp file in the same directory, then rename).
/// Writes an output the user named: a file is replaced atomically; a character device or a
/// FIFO it names (`/dev/null`, `/dev/stdout`, a named pipe, also through a link) is written
/// into, never replaced by a file.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
    if is_stream(path) {
        return write_stream(path, |f| f.write_all(bytes));
    }
    write_file(path, bytes, false)
}

/// Whether `path` names (itself or through links) a character device or a FIFO.
fn is_stream(path: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::metadata(path).is_ok_and(|m| {
        let t = m.file_type();
        t.is_char_device() || t.is_fifo()
    })
}

/// Writes into the device or FIFO at `path` (it is neither created nor truncated).
fn write_stream(
    path: &Path,
    fill: impl FnOnce(&mut std::fs::File) -> std::io::Result<()>,
) -> Result<(), StoreError> {
    let err = |source| StoreError::Write {
        path: path.to_owned(),
        source,
    };
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(err)?;
    fill(&mut f).map_err(err)
}

pub(crate) fn write_json<T: Serialize + ?Sized>(path: &Path, value: &T) -> Result<(), StoreError> {
    write_json_to(path, value, false)
}

/// Like [`write_json`], but the file must not exist yet ([`StoreError::Exists`] if it does).
pub(crate) fn write_json_new<T: Serialize + ?Sized>(
    path: &Path,
    value: &T,
) -> Result<(), StoreError> {
    write_json_to(path, value, true)
}

fn write_json_to<T: Serialize + ?Sized>(
    path: &Path,
    value: &T,
    new: bool,
) -> Result<(), StoreError> {
    write_file(path, &json_bytes(value), new)
}

/// The bytes [`write_json`] writes of `value`.
pub(crate) fn json_bytes<T: Serialize + ?Sized>(value: &T) -> Vec<u8> {
    let mut bytes = serde_json::to_vec_pretty(value).expect("model types serialize");
    bytes.push(b'\n');
    bytes
}

/// Writes `bytes` (made by [`json_bytes`]) to `path` as [`write_json`] does.
pub(crate) fn write_json_bytes(path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
    write_file(path, bytes, false)
}

/// Creates the runs directory if needed.
pub(crate) fn ensure_dir(dir: &Path) -> Result<(), StoreError> {
    std::fs::create_dir_all(dir).map_err(|source| StoreError::Write {
        path: dir.to_owned(),
        source,
    })
}

/// One stored run.
pub(crate) type StoredRun = (Trace, Option<Score>, PathBuf);

/// The entries of a runs directory that any walker may look at, sorted by name: hidden
/// files (among them the `.wt-tmp-*` temp files a killed sweep leaves) and names that are
/// not UTF-8 are never among them. Nothing is opened or followed.
pub(crate) fn dir_entries(dir: &Path) -> Result<Vec<(String, PathBuf)>, StoreError> {
    let read_err = |source| StoreError::Read {
        path: dir.to_owned(),
        source,
    };
    let mut entries = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(read_err)? {
        let path = entry.map_err(read_err)?.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        if !name.starts_with('.') {
            entries.push((name.to_owned(), path));
        }
    }
    entries.sort();
    Ok(entries)
}

/// Takes a committed run out of `dir` so that it can be written again in place: its trace
/// first (the commit record: from then on the run is missing, never half-replaced), then
/// its score and hook artifacts (`<stem>.*.json`).
pub(crate) fn remove_run(dir: &Path, stem: &str) -> Result<(), StoreError> {
    let gone = |path: &Path| match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(StoreError::Write {
            path: path.to_owned(),
            source: e,
        }),
        _ => Ok(()),
    };
    gone(&trace_path(dir, stem))?;
    let prefix = format!("{stem}.");
    for (name, path) in dir_entries(dir)? {
        if name.starts_with(&prefix) && is_sidecar(&path) {
            gone(&path)?;
        }
    }
    Ok(())
}

/// The trace files of one directory, sorted by name.
pub(crate) fn trace_files(dir: &Path) -> Result<Vec<PathBuf>, StoreError> {
    Ok(dir_entries(dir)?
        .into_iter()
        .map(|(_, path)| path)
        .filter(|path| is_trace(path) && path.is_file())
        .collect())
}

#[cfg(test)]
pub(crate) fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, StoreError> {
    let bytes = std::fs::read(path).map_err(|source| StoreError::Read {
        path: path.to_owned(),
        source,
    })?;
    serde_json::from_slice(&bytes).map_err(|source| StoreError::Parse {
        path: path.to_owned(),
        source,
    })
}

#[cfg(test)]
mod output_tests {
    use std::io::Read;
    use std::os::unix::fs::FileTypeExt;

    use super::*;

    #[test]
    fn an_output_naming_a_fifo_is_written_into_never_replaced_by_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("pipe");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        // Also through a link, as `/dev/stdout` is one.
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&fifo, &link).unwrap();
        check_output(&link, "-o").unwrap();
        for (target, streamed) in [(&fifo, false), (&link, true)] {
            let reader = {
                let fifo = fifo.clone();
                std::thread::spawn(move || {
                    let mut got = String::new();
                    std::fs::File::open(fifo)
                        .unwrap()
                        .read_to_string(&mut got)
                        .unwrap();
                    got
                })
            };
            if streamed {
                write_atomic_with(target, |w| w.write_all(b"streamed")).unwrap();
            } else {
                write_atomic(target, b"whole").unwrap();
            }
            // Checked before the reader is waited for: a FIFO replaced by a file leaves it
            // waiting for a writer that never comes.
            assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo());
            assert!(std::fs::symlink_metadata(&link).unwrap().is_symlink());
            assert_eq!(
                reader.join().unwrap(),
                if streamed { "streamed" } else { "whole" }
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sidecar_rule() {
        for s in [
            "a_b.score.json",
            "a_b.debrief.json",
            "a_b.x.label.json",
            "20261130T051500Z.hook.scen.pack.json",
            "20261130T051500Z.hook.pack.json",
        ] {
            assert!(is_sidecar(Path::new(s)), "{s}");
            assert!(!is_trace(Path::new(s)), "{s}");
        }
        assert!(is_trace(Path::new("20261130T051500Z_abcd1234.json")));
        assert!(!is_trace(Path::new("20261130T051500Z.events.jsonl")));
        assert!(!is_sidecar(Path::new("20261130T051500Z.events.jsonl")));
    }

    #[test]
    fn names_are_checked() {
        assert_eq!(
            stem("20261130T051500Z", "abcdef0123456").unwrap(),
            "20261130T051500Z_abcdef01"
        );
        assert!(stem("2026.11", "abc").is_err());
        assert!(stem("20261130T051500Z", "ab/c").is_err());
        assert!(stem("20261130T051500Z", "").is_err());
        assert_eq!(stem("T", "éééééééééé").unwrap(), "T_éééééééé");
        for dir in ["", ".", "d", "/abs/d", "d/"] {
            let dir = Path::new(dir);
            assert_eq!(trace_path(dir, "s_1"), dir.join("s_1.json"));
            assert_eq!(score_path(dir, "s_1"), dir.join("s_1.score.json"));
        }
        assert!(artifact_path(Path::new("."), "s", "Bad.Hook", None).is_err());
        assert_eq!(
            artifact_path(Path::new("d"), "s", "debrief", Some("x")).unwrap(),
            Path::new("d/s.debrief.x.json")
        );
    }

    #[test]
    fn pack_artifacts_are_sidecars() {
        let p =
            scoped_artifact_path(Path::new("d"), "S", "debrief", Some("s-1"), Some("x")).unwrap();
        assert_eq!(p, Path::new("d/S.debrief.scenario.s-1.x.pack.json"));
        assert!(is_sidecar(&p));
        let p = scoped_artifact_path(Path::new("d"), "S", "debrief", None, None).unwrap();
        assert_eq!(p, Path::new("d/S.debrief.pack.json"));
        assert!(scoped_artifact_path(Path::new("d"), "t", "h", Some("a.b"), None).is_err());
        // A pack label equal to a scenario id, or to the marker, cannot collide.
        let d = Path::new("d");
        let pack = scoped_artifact_path(d, "S", "h", None, Some("s-1")).unwrap();
        let scen = scoped_artifact_path(d, "S", "h", Some("s-1"), None).unwrap();
        let marker = scoped_artifact_path(d, "S", "h", None, Some("scenario")).unwrap();
        assert_ne!(pack, scen);
        assert_ne!(marker, scen);
        for label in RESERVED_LABELS {
            assert!(artifact_path(d, "s", "h", Some(label)).is_err());
        }
    }

    #[test]
    fn a_new_file_is_never_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s.score.json");
        write_json_new(&p, &1).unwrap();
        assert!(matches!(
            write_json_new(&p, &2),
            Err(StoreError::Exists { .. })
        ));
        assert_eq!(std::fs::read(&p).unwrap(), b"1\n");
        // Nothing is left behind.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn atomic_write_replaces_whole_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f.json");
        write_atomic(&p, b"one").unwrap();
        write_atomic(&p, b"two").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&p).unwrap().permissions().mode();
            assert_eq!(
                mode & 0o044,
                0o044,
                "readable by group and others: {mode:o}"
            );
        }
    }

    #[test]
    fn a_symlink_at_a_file_s_name_is_replaced_or_refused_never_followed() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("target");
        std::fs::write(&target, "untouched").unwrap();
        let (replaced, refused) = (dir.path().join("a.json"), dir.path().join("b.json"));
        std::os::unix::fs::symlink(&target, &replaced).unwrap();
        std::os::unix::fs::symlink(&target, &refused).unwrap();
        write_json(&replaced, &1).unwrap();
        assert!(!std::fs::symlink_metadata(&replaced).unwrap().is_symlink());
        assert_eq!(std::fs::read(&replaced).unwrap(), b"1\n");
        assert!(matches!(
            write_json_new(&refused, &2),
            Err(StoreError::Exists { .. })
        ));
        assert!(std::fs::symlink_metadata(&refused).unwrap().is_symlink());
        assert_eq!(std::fs::read(&target).unwrap(), b"untouched");
    }

    #[test]
    fn a_file_is_written_under_a_hidden_temp_name_then_moved_into_place() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f.json");
        write_atomic_with(&p, |w| {
            w.write_all(b"x")?;
            let names: Vec<String> = std::fs::read_dir(dir.path())?
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect();
            assert_eq!(names.len(), 1, "{names:?}");
            assert!(names[0].starts_with(".wt-tmp-"), "{names:?}");
            assert!(dir_entries(dir.path()).unwrap().is_empty(), "{names:?}");
            assert!(
                IN_FLIGHT
                    .lock()
                    .unwrap()
                    .iter()
                    .flatten()
                    .any(|t| t.starts_with(dir.path()))
            );
            Ok(())
        })
        .unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"x");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_write_that_fails_midway_leaves_nothing_behind_and_nothing_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f.json");
        write_atomic(&p, b"one").unwrap();
        let failed = write_atomic_with(&p, |w| {
            w.write_all(b"half")?;
            Err(std::io::Error::other("the disk is full"))
        });
        assert!(
            matches!(&failed, Err(StoreError::Write { path, .. }) if path == &p),
            "{failed:?}"
        );
        assert_eq!(std::fs::read(&p).unwrap(), b"one");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        assert!(
            IN_FLIGHT
                .lock()
                .unwrap()
                .iter()
                .flatten()
                .all(|t| !t.starts_with(dir.path())),
            "no longer tracked"
        );
    }
}
