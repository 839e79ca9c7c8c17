//! Stopping a sweep: what Ctrl-C, SIGTERM and SIGHUP do, and what a process exit in the
//! middle of a sweep does.
//!
//! - The first signal *requests* a stop: no new run starts, and the runs in flight go on for
//!   a grace period (`WT_GRACE_S`, default [`DEFAULT_GRACE`]). When it runs out the stop
//!   becomes a *cut*: in-flight turns end at once as interrupted, hooks get at most
//!   [`CUT_HOOK_DEADLINE`] per call, every begun turn hook still gets its finish, and every
//!   run that started is written whole. The summary, the journal's `SweepEnded` and JUnit are
//!   written as usual, and `wt` exits 130. CI runners send SIGKILL about 10 s after SIGTERM;
//!   the default grace leaves time for all of that.
//! - A second signal stops at once: temporary files are removed, agent process groups
//!   (`process` runtime) are killed, and `wt` exits 130 with only whole files on disk.
//! - While a sweep runs, a process exit that does not come through `wt`'s own completion
//!   path — a plugin or runtime calling `exit(0)` — ends the process with
//!   [`crate::exit::ABORTED`], never with the status it asked for: a cut-short sweep is never
//!   a pass.

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Default grace period between the first signal and the cut.
pub(crate) const DEFAULT_GRACE: Duration = Duration::from_secs(5);

/// The environment variable that sets the grace period, in seconds.
pub(crate) const GRACE_ENV: &str = "WT_GRACE_S";

/// Longest a hook call may take once a sweep is cut.
pub(crate) const CUT_HOOK_DEADLINE: Duration = Duration::from_secs(1);

/// The stop state of one sweep, shared by the signal thread, the runner and the dispatcher.
#[derive(Debug, Default)]
pub struct Interrupt {
    requested: AtomicBool,
    cut: AtomicBool,
    signal: AtomicI32,
    lock: Mutex<()>,
    changed: Condvar,
}

impl Interrupt {
    pub fn new() -> Arc<Interrupt> {
        Arc::new(Interrupt::default())
    }

    /// Asks the sweep to stop: no new run starts. Returns whether this was the first request.
    pub fn request(&self, signal: i32) -> bool {
        self.signal
            .compare_exchange(0, signal, Ordering::SeqCst, Ordering::SeqCst)
            .ok();
        let first = !self.requested.swap(true, Ordering::SeqCst);
        self.notify();
        first
    }

    /// Ends the grace period: in-flight turns end now.
    pub fn cut(&self) {
        self.requested.store(true, Ordering::SeqCst);
        self.cut.store(true, Ordering::SeqCst);
        self.notify();
    }

    fn notify(&self) {
        let _guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        self.changed.notify_all();
    }

    /// Has a stop been requested (no new run may start)?
    #[inline]
    pub fn requested(&self) -> bool {
        self.requested.load(Ordering::Relaxed)
    }

    /// Has the grace period run out (in-flight work ends now)?
    #[inline]
    pub fn is_cut(&self) -> bool {
        self.cut.load(Ordering::Relaxed)
    }

    /// The signal that requested the stop, 0 when none did.
    pub fn signal(&self) -> i32 {
        self.signal.load(Ordering::Relaxed)
    }

    /// Sleeps for `d`, or less if the sweep is cut meanwhile. Returns `false` when cut.
    pub fn sleep(&self, d: Duration) -> bool {
        let until = Instant::now() + d;
        let mut guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if self.is_cut() {
                return false;
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return true;
            }
            guard = self
                .changed
                .wait_timeout(guard, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

/// The grace period from `WT_GRACE_S` (0 to 24 h).
pub(crate) fn grace_from_env() -> Result<Duration, String> {
    crate::deadlines::seconds_from_env(GRACE_ENV, DEFAULT_GRACE.as_secs_f64(), true)
}

/// The name of a signal, for messages.
pub(crate) fn signal_name(signal: i32) -> &'static str {
    match signal {
        libc::SIGINT => "SIGINT",
        libc::SIGTERM => "SIGTERM",
        libc::SIGHUP => "SIGHUP",
        _ => "a signal",
    }
}

static SWEEP_ACTIVE: AtomicBool = AtomicBool::new(false);

/// Set once `wt` is about to `_exit` (a second signal, an `exit()` in the middle of a sweep):
/// the clean-ups have run or are running, and nothing new may be started that they would
/// miss (a temporary file).
static EXITING: AtomicBool = AtomicBool::new(false);

/// Is `wt` about to `_exit`?
pub(crate) fn exiting() -> bool {
    EXITING.load(Ordering::SeqCst)
}

/// What must be undone on every way out of a sweep, registered by the modules that create
/// it (the store's temporary files, the process runtime's process groups): this module
/// sits below them and reaches them only through these callbacks.
static AT_STOP: [OnceLock<fn()>; 8] = [const { OnceLock::new() }; 8];

/// Registers `clean` to run when a sweep ends (its [`SweepGuard`] drops) and on `wt`'s
/// abrupt exits (a second signal, an `exit()` in the middle of a sweep). Call it once per
/// callback. `clean` must never wait for long: it may run in an exit handler.
pub(crate) fn at_stop(clean: fn()) {
    if !AT_STOP.iter().any(|slot| slot.set(clean).is_ok()) {
        tracing::warn!("no room for another clean-up at exit");
    }
}

fn run_at_stop() {
    for clean in AT_STOP.iter().filter_map(OnceLock::get) {
        clean();
    }
}

/// Marks the sweep as in progress until its result is recorded ([`sweep_recorded`]):
/// meanwhile any process exit ends with [`crate::exit::ABORTED`] and one line saying so.
/// Dropping the guard runs the clean-ups registered with [`at_stop`].
pub(crate) struct SweepGuard(());

/// Held while the sweep's result is recorded, and by an exit in the middle of the sweep:
/// whichever comes first decides how the process ends.
static ENDING: Mutex<()> = Mutex::new(());

/// The in-process plugin hooks of this sweep, named by the line an exit bypass prints.
static SUSPECTS: OnceLock<String> = OnceLock::new();

impl SweepGuard {
    /// `suspects`: the sweep's in-process plugin hooks, any of which (or the agent runtime)
    /// may end the process behind `wt`'s back.
    pub(crate) fn enter(suspects: &[&str]) -> SweepGuard {
        static REGISTER: std::sync::Once = std::sync::Once::new();
        if SUSPECTS.set(suspects.join(", ")).is_ok() {
            crate::exit::record_suspects(SUSPECTS.get().map_or("", String::as_str));
        }
        REGISTER.call_once(|| {
            // SAFETY: `on_exit` is an `extern "C" fn()` that lives for the whole process.
            let rc = unsafe { libc::atexit(on_exit) };
            if rc != 0 {
                tracing::warn!("cannot register the exit guard; a plugin's exit() would end wt with its own status");
            }
        });
        SWEEP_ACTIVE.store(true, Ordering::SeqCst);
        SweepGuard(())
    }
}

impl Drop for SweepGuard {
    fn drop(&mut self) {
        // A turn abandoned at a cut may still own an agent process group; the sweep is
        // over, and nothing it started may outlive it.
        run_at_stop();
    }
}

/// Records `code` as the sweep's result (the supervising `wt` exits with it), as `wt`'s
/// last act: from here on an exit is no longer one in the middle of the sweep. Until this,
/// a thread a hook left behind that calls `exit(0)` after the last point ends the sweep
/// as aborted, never with a green record written behind it.
pub(crate) fn sweep_recorded(code: u8) {
    let _ending = ENDING.lock().unwrap_or_else(|e| e.into_inner());
    if exiting() {
        // A stop at once (or an exit in the middle of the sweep) is ending the process and
        // decides its code; what the sweep decided meanwhile came of that clean-up (a file it
        // could no longer write), and must not replace it.
        drop(_ending);
        wait_for_exit();
    }
    crate::exit::record(code);
    let _ = RECORDED.set((code, this_thread()));
    SWEEP_ACTIVE.store(false, Ordering::SeqCst);
}

/// The sweep's recorded code, and the thread that recorded it (the one whose return from
/// `main` ends the process).
static RECORDED: OnceLock<(u8, libc::pid_t)> = OnceLock::new();

fn this_thread() -> libc::pid_t {
    nix::unistd::gettid().as_raw()
}

/// Parks the calling thread for good: the process is being ended by another thread.
pub(crate) fn wait_for_exit() -> ! {
    loop {
        std::thread::park();
    }
}

extern "C" fn on_exit() {
    if !SWEEP_ACTIVE.load(Ordering::SeqCst) {
        after_record();
        return;
    }
    // The main thread may be recording the result right now: wait for it, then look again.
    let _ending = ENDING.lock().unwrap_or_else(|e| e.into_inner());
    if !SWEEP_ACTIVE.load(Ordering::SeqCst) {
        drop(_ending);
        after_record();
        return;
    }
    EXITING.store(true, Ordering::SeqCst);
    run_at_stop();
    let line = match SUSPECTS.get().filter(|s| !s.is_empty()) {
        Some(hooks) => format!(
            "error: the process was asked to exit in the middle of the sweep (by in-process hook {hooks}, or the agent runtime); the sweep did not finish\n"
        ),
        None => "error: the process was asked to exit in the middle of the sweep (the agent runtime called exit); the sweep did not finish\n".to_owned(),
    };
    // SAFETY: writing a buffer to fd 2 and `_exit` need no state; `_exit` skips the
    // remaining exit handlers, which could otherwise pick the status.
    unsafe {
        libc::write(2, line.as_ptr().cast(), line.len());
        libc::_exit(i32::from(crate::exit::ABORTED));
    }
}

/// An exit after the sweep recorded its result, on a thread other than the one that
/// recorded it: not `wt`'s return from `main` but code a hook left running (or the agent
/// runtime's). The result stands; the person is told what ended the process.
fn after_record() {
    let Some(&(code, recorder)) = RECORDED.get() else {
        return;
    };
    if this_thread() == recorder {
        return;
    }
    let by = match SUSPECTS.get().filter(|s| !s.is_empty()) {
        Some(hooks) => format!("by in-process hook {hooks}'s code, or the agent runtime's"),
        None => "by the agent runtime's code".to_owned(),
    };
    let line = format!(
        "warning: the sweep's process was ended {by} (an exit from a thread of its own) after the sweep recorded its result; the result (exit {code}) stands\n"
    );
    // SAFETY: as in `on_exit`; `_exit` with the recorded code keeps the status from being
    // the one the stray exit asked for.
    unsafe {
        libc::write(2, line.as_ptr().cast(), line.len());
        libc::_exit(i32::from(code));
    }
}

/// Stops at once (a second signal): removes temporary files and exits 130 without running
/// exit handlers.
pub(crate) fn exit_now() -> ! {
    // Before the clean-up: what it removes (temporary files, agent processes) makes the
    // sweep's own threads fail, and a failure they record must never replace this stop's
    // code. `sweep_recorded` sees the flag under the lock held from here to `_exit`.
    EXITING.store(true, Ordering::SeqCst);
    let ending = ENDING.lock().unwrap_or_else(|e| e.into_inner());
    // Temporary files, and agent processes, which live in process groups of their own and
    // would outlive `wt`.
    run_at_stop();
    // A stop at once is `wt`'s own decision: the supervising `wt` exits 130 with it.
    crate::exit::record(crate::exit::INTERRUPTED);
    std::mem::forget(ending);
    // SAFETY: `_exit` ends the process; nothing is left to run.
    unsafe { libc::_exit(i32::from(crate::exit::INTERRUPTED)) }
}

/// The stop the signal handlers drive, once [`install`]ed.
static INSTALLED: OnceLock<Arc<Interrupt>> = OnceLock::new();

/// The stop the signal handlers drive, once [`install`]ed: a wait that was handed no stop of
/// its own (an agent's reset, the gateway's upstream call) still ends when it is cut.
pub(crate) fn installed() -> Option<&'static Interrupt> {
    INSTALLED.get().map(|i| &**i)
}

/// Installs the handlers for SIGINT, SIGTERM and SIGHUP: the first requests a stop and
/// starts the grace period, the second stops at once.
pub(crate) fn install(interrupt: Arc<Interrupt>, grace: Duration) -> std::io::Result<()> {
    let _ = INSTALLED.set(interrupt.clone());
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])?;
    std::thread::Builder::new()
        .name("wt-signals".into())
        .spawn(move || {
            for signal in signals.forever() {
                if !interrupt.request(signal) {
                    crate::term::err_line(&format!(
                        "{}: stopping now",
                        signal_name(signal)
                    ));
                    exit_now();
                }
                crate::term::err_line(&format!(
                    "{}: finishing the runs in flight (at most {}), then stopping; send it again to stop at once",
                    signal_name(signal),
                    crate::deadlines::human(grace)
                ));
                let timer = interrupt.clone();
                let _ = std::thread::Builder::new()
                    .name("wt-grace".into())
                    .spawn(move || {
                        std::thread::sleep(grace);
                        timer.cut();
                    });
            }
        })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sleep_ends_early_on_cut() {
        let i = Interrupt::new();
        let j = i.clone();
        let t = std::thread::spawn(move || j.sleep(Duration::from_secs(30)));
        assert!(i.request(libc::SIGTERM));
        assert!(
            !i.request(libc::SIGINT),
            "a second request is not the first"
        );
        assert_eq!(i.signal(), libc::SIGTERM);
        i.cut();
        assert!(!t.join().unwrap());
        assert!(!i.sleep(Duration::ZERO));
    }
}
