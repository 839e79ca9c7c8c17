//! World servers in a sweep: each scenario's server tools are listed once before its runs
//! ([`prepare`]); each run gets a server in a fresh state ([`open`]) — a fresh process in a
//! fresh scratch directory, or its lane's kept one after the `reset` calls — and gives it up
//! when its turns are over ([`close`]), with the state and the checked files observed.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};

use windtunnel_model::{FileCheck, ObservedFile, Scenario, WorldServer, WorldServerRecord};

use crate::interrupt::Interrupt;
use crate::world::World;
use crate::world::server::{self, Server};

/// The most bytes of a checked file kept in the trace.
pub(crate) const MAX_OBSERVED_FILE_BYTES: u64 = 1 << 20;

/// A lane's server kept between its runs (`per = "lane"`).
pub(super) struct Kept {
    spec: WorldServer,
    server: Server,
    dir: tempfile::TempDir,
}

/// Each scenario as it runs: with a world server, its tools are the declared ones followed by
/// the server's (listed by a server started for the purpose). `Err` says why the scenario
/// cannot run, naming the server.
pub(super) fn prepare(
    scenarios: &[&Scenario],
    stop: &Arc<Interrupt>,
) -> Vec<Result<Scenario, String>> {
    let mut listed: HashMap<String, Result<Vec<windtunnel_model::ToolSpec>, String>> =
        HashMap::new();
    scenarios
        .iter()
        .map(|s| {
            let mut s = (*s).clone();
            let Some(ws) = &s.world_server else {
                return Ok(s);
            };
            // Scenarios whose servers differ only in what wt calls (setup, state, reset) list
            // the same tools: one listing serves them all.
            let mut listing = ws.clone();
            listing.setup.clear();
            listing.reset.clear();
            listing.state = None;
            listing.per = None;
            listing.call_timeout_s = None;
            let key = serde_json::to_string(&listing).unwrap_or_default();
            let tools = listed
                .entry(key)
                .or_insert_with(|| server::discover(ws, stop))
                .clone()
                .map_err(|e| format!("world server `{}`: {e}", server::name_of(ws)))?;
            for t in tools {
                if s.tools.iter().any(|d| d.name == t.name) {
                    return Err(format!(
                        "world server `{}` lists a tool `{}`, which the scenario declares too",
                        server::name_of(ws),
                        t.name
                    ));
                }
                s.tools.push(t);
            }
            let exp = &s.expect;
            for name in exp
                .trajectory
                .required_tools
                .iter()
                .chain(&exp.constraint.forbidden_tools)
            {
                if !s.tools.iter().any(|t| &t.name == name) {
                    return Err(format!(
                        "the scenario's expectations name a tool `{name}` that neither the scenario nor world server `{}` offers",
                        server::name_of(ws)
                    ));
                }
            }
            Ok(s)
        })
        .collect()
}

/// A run's hold on its world server.
pub(super) struct RunWorld {
    spec: WorldServer,
    dir: Option<tempfile::TempDir>,
}

impl RunWorld {
    /// The server's name.
    pub(super) fn name(&self) -> String {
        server::name_of(&self.spec)
    }

    /// The run's scratch directory (none for a `url` server).
    pub(super) fn dir(&self) -> Option<&Path> {
        self.dir.as_ref().map(tempfile::TempDir::path)
    }
}

/// Gives the run a world server in its starting state, attached to `world`: the lane's kept
/// one (in `slot`) after its `reset` calls, or a fresh one (for a `url` server, a fresh session after
/// them); then the `setup` calls, then the first state snapshot. The error names what
/// failed; a server that started is attached (and the hold returned) even then, so that
/// [`close`] stops it and records how it ended.
pub(super) fn open(
    spec: &WorldServer,
    slot: &Mutex<Option<Kept>>,
    world: &mut World,
    stop: &Arc<Interrupt>,
) -> (Option<RunWorld>, Result<(), String>) {
    let per_lane = spec.url.is_none() && spec.per.as_deref() == Some("lane");
    let kept = if per_lane {
        super::lock(slot)
            .take()
            .filter(|k| k.spec == *spec && k.server.broken().is_none())
    } else {
        None
    };
    let reused = kept.is_some();
    let (server, dir) = match kept {
        Some(k) => (k.server, Some(k.dir)),
        None => {
            let dir = match spec.url {
                Some(_) => None,
                None => match server::scratch(spec) {
                    Ok(d) => Some(d),
                    Err(e) => return (None, Err(e)),
                },
            };
            let at = dir
                .as_ref()
                .map_or_else(std::env::temp_dir, |d| d.path().to_owned());
            match Server::start(spec, &at, stop) {
                Ok(s) => (s, dir),
                Err(e) => return (None, Err(e)),
            }
        }
    };
    world.attach(server, spec.state.clone());
    let run_world = RunWorld {
        spec: spec.clone(),
        dir,
    };
    let ready = (|| {
        let server = world.server_mut().expect("just attached");
        if reused || spec.url.is_some() {
            for call in &spec.reset {
                server.call_own("reset", call)?;
            }
        }
        for call in &spec.setup {
            server.call_own("setup", call)?;
        }
        world.refresh()
    })();
    (Some(run_world), ready)
}

/// The checked files of the run's scratch directory, as found now (after the last turn).
pub(super) fn files_of(
    run_world: &RunWorld,
    checks: &[FileCheck],
) -> BTreeMap<String, ObservedFile> {
    match run_world.dir() {
        Some(dir) => checks
            .iter()
            .map(|c| (c.path.clone(), observe(dir, &c.path)))
            .collect(),
        None => BTreeMap::new(),
    }
}

/// The run is over for its world server (its hooks included): it is stopped, or kept by
/// the lane (in `slot`) when it lives per lane and is sound. Returns how it ended.
pub(super) fn release(
    run_world: RunWorld,
    slot: &Mutex<Option<Kept>>,
    world: &mut World,
) -> Option<WorldServerRecord> {
    let server = world.detach()?;
    let per_lane = run_world.spec.url.is_none() && run_world.spec.per.as_deref() == Some("lane");
    Some(if per_lane && server.broken().is_none() {
        let record = server.record();
        if let Some(dir) = run_world.dir {
            *super::lock(slot) = Some(Kept {
                spec: run_world.spec,
                server,
                dir,
            });
        }
        record
    } else {
        server.stop()
    })
}

/// A file of the scratch directory as found now: never read through a symbolic link (in
/// any component), at most [`MAX_OBSERVED_FILE_BYTES`] kept.
pub(super) fn observe(dir: &Path, rel: &str) -> ObservedFile {
    let mut seen = ObservedFile::default();
    let mut at = dir.to_path_buf();
    let parts: Vec<_> = Path::new(rel).components().collect();
    for (i, c) in parts.iter().enumerate() {
        at.push(c);
        match std::fs::symlink_metadata(&at) {
            Err(_) => return seen,
            Ok(m) if m.file_type().is_symlink() => {
                seen.note = Some(format!(
                    "`{}` is a symbolic link: wt does not follow links out of the scratch directory",
                    Path::new(rel)
                        .components()
                        .take(i + 1)
                        .collect::<std::path::PathBuf>()
                        .display()
                ));
                return seen;
            }
            Ok(m) if i + 1 < parts.len() && !m.is_dir() => return seen,
            Ok(_) => {}
        }
    }
    let meta = match std::fs::symlink_metadata(&at) {
        Ok(m) => m,
        Err(_) => return seen,
    };
    if !meta.is_file() {
        seen.note = Some("not a regular file".into());
        return seen;
    }
    seen.exists = true;
    seen.bytes = meta.len();
    if meta.len() > MAX_OBSERVED_FILE_BYTES {
        seen.note = Some(format!(
            "{} bytes, more than the {MAX_OBSERVED_FILE_BYTES} a checked file may have",
            meta.len()
        ));
        return seen;
    }
    match crate::limits::read_input_file(&at, true) {
        Ok(text) => seen.text = Some(text),
        Err(e) => seen.note = Some(format!("cannot be read as text: {e}")),
    }
    seen
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observed_files_are_never_read_through_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret.txt"), "s3cr3t").unwrap();
        std::fs::write(dir.path().join("plain.txt"), "hello").unwrap();
        std::os::unix::fs::symlink(
            outside.path().join("secret.txt"),
            dir.path().join("link.txt"),
        )
        .unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("sub")).unwrap();
        let plain = observe(dir.path(), "plain.txt");
        assert!(plain.exists);
        assert_eq!(plain.text.as_deref(), Some("hello"));
        for rel in ["link.txt", "sub/secret.txt"] {
            let seen = observe(dir.path(), rel);
            assert!(!seen.exists, "{rel}");
            assert!(seen.text.is_none(), "{rel}");
            assert!(seen.note.unwrap().contains("symbolic link"), "{rel}");
        }
        let absent = observe(dir.path(), "none.txt");
        assert!(!absent.exists && absent.note.is_none());
        std::fs::write(
            dir.path().join("big.txt"),
            vec![b'x'; MAX_OBSERVED_FILE_BYTES as usize + 1],
        )
        .unwrap();
        let big = observe(dir.path(), "big.txt");
        assert!(big.exists && big.text.is_none());
        assert!(big.note.unwrap().contains("more than"));
    }
}
