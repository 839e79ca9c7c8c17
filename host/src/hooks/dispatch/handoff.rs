//! The hand-off between a dispatching thread and its worker: one job per point, a
//! spin-then-park slot each way, hot atomics on cache lines of their own, and the one state
//! word per call that decides whether a call returned or was abandoned.
//!
//! Must not: touch latch or quarantine state (the dispatcher owns it), or block the worker
//! on anything but a hook call or a session reply.

use std::{
    sync::{
        Arc, Mutex, MutexGuard,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    thread::Thread,
    time::{Duration, Instant},
};

use serde_json::Value;

use super::{ConverseError, Session, services::WorkerServices, snapshot::Snapshot};
use crate::{
    hooks::registry::{ActiveHook, CallError},
    limits::HookCaps,
};

/// Set in [`Shared::current`] by the waiting thread when it gives up on the call in
/// progress. The worker clears `current` when its call returns; one compare-and-swap on that
/// word decides whether the call returned or hung, so a call that returns in the same
/// instant it is abandoned can never be followed by its worker calling the next hook.
const ABANDONED: u64 = 1 << 63;

/// How long each side spins before parking. Dispatches on a worker are the rare ones
/// (scenario and pack points, guards consulted about a converse turn): the sweep's per-run
/// and per-turn points are relayed on the lane's own thread ([`super::relay`]).
const SPIN: Duration = Duration::from_micros(50);

/// Whether the machine has a core no lane is using. Set by the runner for each sweep; an
/// isolated hook's parent and child poll for each other's frames only then.
static SPARE_CORE: AtomicBool = AtomicBool::new(false);

/// Says whether there is a core to spare for waiting on another process's frames.
pub fn set_spare_core(spare: bool) {
    SPARE_CORE.store(spare, Ordering::Relaxed);
}

/// Whether this sweep found a core to spare (see [`set_spare_core`]).
pub fn spare_core() -> bool {
    SPARE_CORE.load(Ordering::Relaxed)
}

pub(super) enum SessionRequest {
    /// Hook name, text.
    Converse(String, String),
    ProbeState,
}

/// One hook call's outcome.
pub(super) struct CallRecord {
    pub(super) slot: usize,
    pub(super) result: Result<String, String>,
    pub(super) warnings: Vec<String>,
    pub(super) artifacts: Vec<(Option<String>, Value)>,
    pub(super) conversed: bool,
    pub(super) converse_timed_out: bool,
    /// The instance is gone ([`CallError::Fatal`]): quarantine it now, with one line.
    pub(super) fatal: bool,
}

impl CallRecord {
    pub(super) fn new(
        slot: usize,
        result: Result<String, String>,
        fatal: bool,
        out: Option<Box<super::services::Outputs>>,
    ) -> CallRecord {
        let out = out.map(|o| *o).unwrap_or_default();
        CallRecord {
            slot,
            result,
            warnings: out.warnings,
            artifacts: out.artifacts,
            conversed: out.conversed,
            converse_timed_out: out.timed_out,
            fatal,
        }
    }
}

pub(crate) struct Job {
    pub(super) seq: u64,
    pub(super) point: u32,
    /// Slots to call, as a bitmask (bit i = hook i).
    pub(super) order: u64,
    /// Call in reverse activation order (turn finishes).
    pub(super) reverse: bool,
    pub(super) data: Arc<Snapshot>,
    pub(super) has_session: bool,
    pub(super) caps: HookCaps,
}

/// Keeps a value on a cache line of its own: the dispatching thread spins on `done` while
/// the worker writes `current` per hook, and sharing a line would bounce it between cores
/// on every call.
#[repr(align(128))]
pub(super) struct Padded<T>(T);

impl<T> std::ops::Deref for Padded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// State shared by the dispatching thread and one worker generation.
pub(super) struct Shared {
    pub(super) job: Padded<Mutex<Option<Job>>>,
    pub(super) submitted: Padded<AtomicU64>,
    pub(super) done: Padded<AtomicU64>,
    /// The call in progress: `(call number << 16) | (slot + 1)`, 0 when idle. The waiting
    /// thread times each call from when it first sees its number, so the worker reads no
    /// clock.
    pub(super) current: Padded<AtomicU64>,
    /// Slots of the current job's calls that returned `Ok` with no output at all: they need
    /// no record, so a job of quiet hooks moves one word between cores, not one record each.
    pub(super) quiet_ok: Padded<AtomicU64>,
    pub(super) records: Padded<Mutex<Vec<CallRecord>>>,
    pub(super) request: Mutex<Option<SessionRequest>>,
    pub(super) reply: Mutex<Option<Result<String, ConverseError>>>,
    pub(super) abandoned: Padded<AtomicBool>,
    /// Set while that side is (about to be) parked, so the other side calls `unpark` only
    /// when it is needed: unparking a running thread still touches its state across cores.
    pub(super) worker_parked: Padded<AtomicBool>,
    pub(super) runner_parked: Padded<AtomicBool>,
    /// The hooks, held by the worker for its whole life (no per-job reference counting).
    pub(super) hooks: Arc<[Arc<ActiveHook>]>,
    /// The thread waiting for the current job; replaced only when another thread
    /// dispatches, read only to wake it.
    pub(super) runner: Mutex<Option<Thread>>,
}

impl Shared {
    pub(super) fn wake_runner(&self) {
        if let Some(t) = lock(&self.runner).as_ref() {
            t.unpark();
        }
    }
}

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A poisoned lock only means a panic elsewhere; the data is still usable here, and
    // panicking in code a plugin calls into would cross the FFI boundary.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

pub(super) struct Worker {
    pub(super) shared: Arc<Shared>,
    pub(super) thread: Thread,
}

impl Worker {
    pub(super) fn spawn(hooks: Arc<[Arc<ActiveHook>]>) -> std::io::Result<Worker> {
        let shared = Arc::new(Shared {
            job: Padded(Mutex::new(None)),
            submitted: Padded(AtomicU64::new(0)),
            done: Padded(AtomicU64::new(0)),
            current: Padded(AtomicU64::new(0)),
            quiet_ok: Padded(AtomicU64::new(0)),
            records: Padded(Mutex::new(Vec::new())),
            request: Mutex::new(None),
            reply: Mutex::new(None),
            abandoned: Padded(AtomicBool::new(false)),
            worker_parked: Padded(AtomicBool::new(false)),
            runner_parked: Padded(AtomicBool::new(false)),
            hooks,
            runner: Mutex::new(None),
        });
        let for_thread = shared.clone();
        let handle = std::thread::Builder::new()
            .name("wt-hook-dispatch".into())
            .spawn(move || worker_loop(&for_thread))?;
        Ok(Worker {
            shared,
            thread: handle.thread().clone(),
        })
    }
}

fn worker_loop(shared: &Arc<Shared>) {
    let mut seen = 0u64;
    loop {
        // Wait for the next job: spin a moment, then park.
        let spin_until = Instant::now() + SPIN;
        let mut spins = 0u32;
        while shared.submitted.load(Ordering::Acquire) == seen {
            if shared.abandoned.load(Ordering::Acquire) {
                return;
            }
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(64) && Instant::now() > spin_until {
                // Announce the park, then look again: a submission that raced the store
                // either is seen here or sees the flag and unparks us.
                shared.worker_parked.store(true, Ordering::SeqCst);
                if shared.submitted.load(Ordering::SeqCst) == seen
                    && !shared.abandoned.load(Ordering::SeqCst)
                {
                    std::thread::park();
                }
                shared.worker_parked.store(false, Ordering::SeqCst);
            } else {
                std::hint::spin_loop();
            }
        }
        let Some(job) = lock(&shared.job).take() else {
            continue;
        };
        seen = job.seq;
        run_job(shared, &job);
        if shared.abandoned.load(Ordering::Acquire) {
            return;
        }
        // Let go of the snapshot before saying done: the runner takes its trace and score
        // back without a copy when nobody else holds them.
        drop(job);
        shared.done.store(seen, Ordering::SeqCst);
        if shared.runner_parked.load(Ordering::SeqCst) {
            shared.wake_runner();
        }
    }
}

fn run_job(shared: &Arc<Shared>, job: &Job) {
    let mut quiet = 0u64;
    let mut bits = job.order;
    let mut call = job.seq << 8;
    while bits != 0 {
        let slot = if job.reverse {
            63 - bits.leading_zeros() as usize
        } else {
            bits.trailing_zeros() as usize
        };
        bits &= !(1u64 << slot);
        let hook = &shared.hooks[slot];
        call += 1;
        let tag = (call << 16) | (slot as u64 + 1);
        if shared
            .current
            .compare_exchange(0, tag, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            // Abandoned between calls (cannot happen: only a call in progress is abandoned),
            // or a bug: either way, call nothing more.
            return;
        }

        let services = WorkerServices::new(shared, job, &hook.name, hook.reads_sdk_1_0());
        let (result, fatal) = match hook.call(job.point, &services) {
            Ok(v) => (Ok(v), false),
            Err(CallError::Failed(e)) => (Err(e), false),
            Err(CallError::Fatal(e)) => (Err(e), true),
        };
        if shared
            .current
            .compare_exchange(tag, 0, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            // The waiting thread gave up on this call first: it owns what comes next.
            return;
        }
        let out = services.frame.into_outputs();
        if matches!(&result, Ok(v) if v.is_empty()) && out.is_none() {
            quiet |= 1 << slot;
            shared.quiet_ok.store(quiet, Ordering::Release);
            continue;
        }
        lock(&shared.records).push(CallRecord::new(slot, result, fatal, out));
    }
}

/// Tells a worker to exit once it is idle (or leaves it to a hung call).
pub(super) fn retire(worker: &Worker) {
    worker.shared.abandoned.store(true, Ordering::Release);
    worker.thread.unpark();
}

/// Waits for job `seq`, serving converse requests. Returns the slot of a hook that overran
/// its deadline (abandoned: the worker will call nothing more), or `None` when the job
/// completed.
pub(super) fn wait(
    shared: &Shared,
    seq: u64,
    deadline: impl Fn() -> Duration,
    session: Option<&dyn Session>,
    converse_timeout: Duration,
    worker: &Thread,
    spin: bool,
) -> Option<usize> {
    // Spinning only pays when the worker answers within microseconds; a call into another
    // process (an isolated hook) needs the cores the spin would take.
    let spin_until = Instant::now() + if spin { SPIN } else { Duration::ZERO };
    let mut spins = 0u32;
    // The call in progress and when this thread first saw it.
    let mut observed = (0u64, Instant::now());
    loop {
        if shared.done.load(Ordering::Acquire) == seq {
            return None;
        }
        spins = spins.wrapping_add(1);
        if !spins.is_multiple_of(64) {
            std::hint::spin_loop();
            continue;
        }
        let request = lock(&shared.request).take();
        if let Some(req) = request {
            let reply = match (session, req) {
                (None, _) => Err(ConverseError::Failed("no session".into())),
                (Some(s), SessionRequest::Converse(hook, text)) => {
                    s.converse(&hook, &text, converse_timeout)
                }
                (Some(s), SessionRequest::ProbeState) => s
                    .probe_state()
                    .map(|v| v.to_string())
                    .map_err(ConverseError::Failed),
            };
            *lock(&shared.reply) = Some(reply);
            worker.unpark();
            continue;
        }
        let now = Instant::now();
        let current = shared.current.load(Ordering::Acquire);
        if current != observed.0 {
            observed = (current, now);
        } else if current != 0 && now.saturating_duration_since(observed.1) > deadline() {
            // Abandon exactly this call, unless it returned in the meantime.
            if shared
                .current
                .compare_exchange(
                    current,
                    current | ABANDONED,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .is_ok()
            {
                return Some((current & 0xffff) as usize - 1);
            }
            continue;
        }
        if now > spin_until {
            shared.runner_parked.store(true, Ordering::SeqCst);
            if shared.done.load(Ordering::SeqCst) != seq {
                std::thread::park_timeout(Duration::from_millis(2));
            }
            shared.runner_parked.store(false, Ordering::SeqCst);
        }
    }
}
