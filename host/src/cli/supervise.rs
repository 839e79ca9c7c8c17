//! `wt run` as a supervisor: the sweep runs in a child `wt`, and the exit code comes from the
//! sweep's own completion record, never from how that process happened to end.
//!
//! In-process plugins run inside the sweep's process and can end it any way a process can
//! end: `exit(0)`, `_exit(0)`, `exit_group`, `abort()`, a segfault, `kill(getpid(), SIGKILL)`.
//! None of those may turn into a green exit code. So `wt run` starts the same command again
//! as a child (with [`RECORD_ENV`] naming a file in a private temporary directory), forwards
//! SIGINT, SIGTERM and SIGHUP to it, and waits. The child runs the sweep and, as the very
//! last thing `wt`'s own code does, writes the exit code it decided into that file. The
//! supervisor exits with that code; when there is no record, the sweep did not complete,
//! and it exits 4 (`exit::ABORTED`) with one line saying how the sweep's process ended.
//!
//! The child runs in a process group of its own, so a terminal's Ctrl-C or a signal sent to
//! the supervisor's group reaches the sweep once, through the supervisor. It dies with the
//! supervisor (`PR_SET_PDEATHSIG`): `kill -9` of `wt` still ends the sweep at once.

use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::Command;

use crate::{exit, term};

pub use exit::RECORD_ENV;
/// Set in the sweep's process: the supervisor's pid, to die with it.
const SUPERVISOR_ENV: &str = "WT_SWEEP_SUPERVISOR";

/// Whether this process is a supervised sweep (the child).
pub fn is_sweep() -> bool {
    std::env::var_os(RECORD_ENV).is_some()
}

/// In the sweep's process, before anything else: die with the supervisor.
pub fn sweep_starts() {
    let Some(parent) = std::env::var(SUPERVISOR_ENV)
        .ok()
        .and_then(|p| p.parse::<i32>().ok())
    else {
        return;
    };
    // SAFETY: prctl(PR_SET_PDEATHSIG) and getppid take and return plain integers.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
        // The supervisor may have died before the line above.
        if libc::getppid() != parent {
            libc::_exit(i32::from(exit::ABORTED));
        }
    }
}

/// In the sweep's process, as `wt`'s last act: record the exit code it decided.
pub fn sweep_ends(code: u8) {
    exit::record(code);
}

fn read_record(path: &Path) -> Option<u8> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// `wt run` itself: runs the sweep in a child and returns the exit code it recorded, or
/// [`exit::ABORTED`] when it recorded none.
pub fn supervise() -> u8 {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let fail = |what: String| {
        term::err_line(&format!("error: {what}"));
        exit::USAGE
    };
    let dir = match tempfile::Builder::new().prefix("wt-sweep-").tempdir() {
        Ok(d) => d,
        Err(e) => return fail(format!("cannot create the sweep's record directory: {e}")),
    };
    let record = dir.path().join("record");
    let exe = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => return fail(format!("cannot find wt's own executable: {e}")),
    };
    // Registered before the child exists: a signal in between is not lost.
    let mut signals = match signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP]) {
        Ok(s) => s,
        Err(e) => return fail(format!("cannot handle signals: {e}")),
    };
    let child = Command::new(exe)
        .args(std::env::args_os().skip(1))
        .env(RECORD_ENV, &record)
        .env(SUPERVISOR_ENV, std::process::id().to_string())
        .process_group(0)
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => return fail(format!("cannot start the sweep's process: {e}")),
    };
    let pid = i32::try_from(child.id()).unwrap_or(i32::MAX);
    let handle = signals.handle();
    let forwarded = std::sync::Arc::new(std::sync::atomic::AtomicI32::new(0));
    let seen = forwarded.clone();
    let forward = std::thread::spawn(move || {
        for signal in signals.forever() {
            seen.store(signal, std::sync::atomic::Ordering::SeqCst);
            // SAFETY: kill(2) with a pid this process started and has not reaped.
            unsafe { libc::kill(pid, signal) };
        }
    });
    let status = child.wait();
    handle.close();
    let _ = forward.join();
    if let Some(code) = read_record(&record) {
        return code;
    }
    // A signal the user sent that ended the sweep's process before it had taken over its
    // signals (while it was starting up): an interruption, as it would have been a moment
    // later. Never a pass either way.
    let sent = forwarded.load(std::sync::atomic::Ordering::SeqCst);
    if sent != 0
        && let Ok(s) = &status
        && s.signal() == Some(sent)
    {
        term::err_line(&format!(
            "wt: interrupted by {} before the sweep could take the signal; the runs written so far are on disk",
            signal_name(sent)
        ));
        return exit::INTERRUPTED;
    }
    let how = match status {
        Ok(s) => match (s.code(), s.signal()) {
            (Some(c), _) => format!("exited with status {c}"),
            (None, Some(sig)) => format!("was killed by signal {}", signal_name(sig)),
            _ => "ended".to_owned(),
        },
        Err(e) => format!("could not be waited for ({e})"),
    };
    term::err_line(&format!(
        "error: the sweep did not complete: its process {how} before wt recorded a result; the runs written so far are on disk, but there is no verdict"
    ));
    exit::ABORTED
}

fn signal_name(sig: i32) -> String {
    nix::sys::signal::Signal::try_from(sig)
        .map(|s| s.as_str().to_owned())
        .unwrap_or_else(|_| sig.to_string())
}
