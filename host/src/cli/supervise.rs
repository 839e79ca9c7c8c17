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
//!
//! Before the sweep, the supervisor starts the sweep's watchdog ([`crate::procs::watch`]), a
//! `wt` in a process group of its own reading a pipe only the supervisor holds. When the
//! supervisor ends — by returning or by `kill -9` —, the watchdog kills every process the
//! sweep started (agents, isolated hooks, and what they started, in any group or session).
//! The supervisor waits for it before it exits.

use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::Command;

use crate::{exit, term};

pub(crate) use exit::RECORD_ENV;
/// Set in the sweep's process: the supervisor's pid, to die with it.
const SUPERVISOR_ENV: &str = "WT_SWEEP_SUPERVISOR";

/// How long the supervisor waits for the watchdog to finish killing what the sweep left.
const WATCHDOG_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// `wt sweep-watchdog`'s arguments.
#[derive(Debug, clap::Args)]
pub(crate) struct WatchdogArgs {
    /// The sweep's tag prefix.
    #[arg(long)]
    pub tag: String,
}

/// Whether this process is a supervised sweep (the child).
pub(crate) fn is_sweep() -> bool {
    std::env::var_os(RECORD_ENV).is_some()
}

/// In the sweep's process, before anything else: die with the supervisor, and tag this
/// process's environment, so what an in-process hook starts is the sweep's too.
///
/// # Safety
/// No other thread may be running (it sets an environment variable).
pub(crate) unsafe fn sweep_starts() {
    let tag = format!("{}/wt", crate::procs::sweep_tag());
    // SAFETY: the caller guarantees no other thread runs yet.
    unsafe { std::env::set_var(crate::procs::TAG_ENV, tag) };
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
pub(crate) fn sweep_ends(code: u8) {
    crate::interrupt::sweep_recorded(code);
}

fn read_record(path: &Path) -> Option<u8> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// `wt run` itself: runs the sweep in a child and returns the exit code it recorded, or
/// [`exit::ABORTED`] when it recorded none.
pub(crate) fn supervise() -> u8 {
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
    let tag = crate::procs::fresh_sweep_tag();
    let watchdog = start_watchdog(&exe, &tag);
    if let Err(e) = &watchdog {
        tracing::warn!(
            "cannot start the sweep's watchdog ({e}): if wt is killed, what the sweep started may outlive it"
        );
    }
    let child = Command::new(&exe)
        .args(std::env::args_os().skip(1))
        .env(RECORD_ENV, &record)
        .env(crate::procs::SWEEP_TAG_ENV, &tag)
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
    if let Ok(w) = watchdog {
        w.finish();
    }
    let sent = forwarded.load(std::sync::atomic::Ordering::SeqCst);
    let hooks = std::fs::read_to_string(exit::suspects_path(&record))
        .ok()
        .filter(|h| !h.trim().is_empty());
    let by = || match &hooks {
        Some(h) => format!("in-process hook {}, or the agent runtime", h.trim()),
        None => "the agent runtime".to_owned(),
    };
    if let Some(code) = read_record(&record) {
        // `wt` ends the process with the code it recorded; any other end came from code
        // left running after the record (a hook's thread that calls `exit`, `_exit` or
        // crashes). A stop at once after the record rewrites it to 130 instead.
        let stopped_at_once = code == exit::INTERRUPTED && sent != 0;
        if let Ok(s) = &status
            && s.code() != Some(i32::from(code))
            && !stopped_at_once
        {
            term::err_line(&format!(
                "warning: the sweep's process {} after the sweep recorded its result: code other than wt's ended it ({}); the result (exit {code}) stands",
                how_it_ended(s),
                by()
            ));
        }
        return code;
    }
    // A signal the user sent that ended the sweep's process before it had taken over its
    // signals (while it was starting up): an interruption, as it would have been a moment
    // later. Never a pass either way.
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
        Ok(s) => how_it_ended(&s),
        Err(e) => format!("could not be waited for ({e})"),
    };
    let suspects = match &hooks {
        Some(_) => format!(" (code other than wt's ended it: {})", by()),
        None => String::new(),
    };
    term::err_line(&format!(
        "error: the sweep did not complete: its process {how} before wt recorded a result{suspects}; the runs written so far are on disk, but there is no verdict"
    ));
    exit::ABORTED
}

fn how_it_ended(s: &std::process::ExitStatus) -> String {
    match (s.code(), s.signal()) {
        (Some(c), _) => format!("exited with status {c}"),
        (None, Some(sig)) => format!("was killed by signal {}", signal_name(sig)),
        _ => "ended".to_owned(),
    }
}

fn signal_name(sig: i32) -> String {
    nix::sys::signal::Signal::try_from(sig)
        .map(|s| s.as_str().to_owned())
        .unwrap_or_else(|_| sig.to_string())
}

/// The sweep's watchdog, seen from the supervisor: the write end of its pipe, and the
/// process.
struct Watchdog {
    pipe: std::io::PipeWriter,
    process: std::process::Child,
}

impl Watchdog {
    /// Ends the pipe (the watchdog kills what the sweep left) and waits for it, bounded.
    fn finish(self) {
        let Watchdog { pipe, mut process } = self;
        drop(pipe);
        let until = std::time::Instant::now() + WATCHDOG_GRACE;
        while std::time::Instant::now() < until {
            if !matches!(process.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        let _ = process.kill();
        let _ = process.wait();
    }
}

/// Starts `wt sweep-watchdog --tag TAG` in a process group of its own, its standard input a
/// pipe whose only writer is this process (the write end is close-on-exec: neither the
/// sweep nor anything it starts holds it).
fn start_watchdog(exe: &Path, tag: &str) -> std::io::Result<Watchdog> {
    let (reader, pipe) = std::io::pipe()?;
    let process = Command::new(exe)
        .args(["sweep-watchdog", "--tag", tag])
        .stdin(reader)
        .stdout(std::process::Stdio::null())
        .process_group(0)
        .spawn()?;
    Ok(Watchdog { pipe, process })
}
