//! The hand-off between a dispatching thread and its worker: one job per point, one lock
//! and two condition variables, and the one decision per call — under that lock — between
//! "it returned" and "it was abandoned".
//!
//! Must not: touch latch or quarantine state (the dispatcher owns it), or block the worker
//! on anything but a hook call or a session reply.

use std::{
    panic::AssertUnwindSafe,
    sync::{
        Arc, Condvar, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use serde_json::Value;

use super::{
    ConverseError, Session,
    services::{Frame, Outputs, SessionRequest, lock},
    snapshot::Snapshot,
};
use crate::{
    hooks::registry::{ActiveHook, CallError, HostServices},
    limits::HookCaps,
};

/// How long the dispatching thread sleeps at most before it looks at the call in progress
/// again: a sweep cut meanwhile shortens every deadline.
const TICK: Duration = Duration::from_millis(50);

/// How long the dispatching thread polls for the job's end before it sleeps, when a core is
/// spare: a no-op hook's job ends within microseconds, and waking a sleeping thread on a
/// virtual machine costs tens of them.
const SPIN: Duration = Duration::from_micros(30);

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
    fn new(
        slot: usize,
        result: Result<String, String>,
        fatal: bool,
        out: Option<Box<Outputs>>,
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

pub(super) struct Job {
    pub(super) point: u32,
    /// `point` with the turn snapshot's id, for hooks that read turn ids.
    pub(super) point_with_turn: u32,
    /// Slots to call, as a bitmask (bit i = hook i).
    pub(super) order: u64,
    /// Call in reverse activation order (turn finishes).
    pub(super) reverse: bool,
    pub(super) data: Arc<Snapshot>,
    pub(super) has_session: bool,
    pub(super) caps: HookCaps,
}

/// What the dispatching thread and its worker share, under one lock.
#[derive(Default)]
struct State {
    job: Option<Job>,
    /// The call in progress: its slot and when it began.
    current: Option<(usize, Instant)>,
    /// Set by the dispatching thread when it gives up on the call in progress or retires
    /// the worker: the worker calls nothing more.
    abandoned: bool,
    /// The job's calls are all made.
    done: bool,
    /// The records of the job's calls so far; a call that returned `Ok` with no output at
    /// all needs none and only sets its bit in `quiet_ok`.
    records: Vec<CallRecord>,
    quiet_ok: u64,
    request: Option<SessionRequest>,
    reply: Option<Result<String, ConverseError>>,
}

struct Shared {
    state: Mutex<State>,
    /// Wakes the worker: a job, a session reply, or retirement.
    to_worker: Condvar,
    /// Wakes the dispatching thread: the job done, or a session request.
    to_dispatcher: Condvar,
    /// `done`, readable without the lock, for the dispatching thread's polling.
    finished: AtomicBool,
    /// The hooks, held by the worker for its whole life.
    hooks: Arc<[Arc<ActiveHook>]>,
}

/// A dispatch worker: a thread that makes a dispatcher's hook calls, one job at a time.
/// Dropping it retires the thread once it is idle, or leaves it to a hung call.
pub(super) struct Worker {
    shared: Arc<Shared>,
}

impl Drop for Worker {
    fn drop(&mut self) {
        lock(&self.shared.state).abandoned = true;
        self.shared.to_worker.notify_one();
    }
}

impl Worker {
    pub(super) fn spawn(hooks: Arc<[Arc<ActiveHook>]>) -> std::io::Result<Worker> {
        let shared = Arc::new(Shared {
            state: Mutex::default(),
            to_worker: Condvar::new(),
            to_dispatcher: Condvar::new(),
            finished: AtomicBool::new(false),
            hooks,
        });
        let for_thread = shared.clone();
        std::thread::Builder::new()
            .name("wt-hook-dispatch".into())
            .spawn(move || worker_loop(&for_thread))?;
        Ok(Worker { shared })
    }

    /// Hands `job` to the worker and waits for it, serving the session requests of its
    /// calls. Returns the slot of a hook that overran `deadline` (abandoned: the worker will
    /// call nothing more), or `None` when the job completed.
    pub(super) fn run(
        &self,
        job: Job,
        deadline: impl Fn() -> Duration,
        session: Option<&dyn Session>,
        converse_timeout: Duration,
    ) -> Option<usize> {
        let shared = &*self.shared;
        {
            let mut st = lock(&shared.state);
            st.job = Some(job);
            st.done = false;
            shared.finished.store(false, Ordering::Relaxed);
        }
        // Woken after the lock is let go, the worker does not wake only to wait for it.
        shared.to_worker.notify_one();
        if super::spare_core() {
            let until = Instant::now() + SPIN;
            while !shared.finished.load(Ordering::Acquire) && Instant::now() < until {
                std::hint::spin_loop();
            }
        }
        let mut st = lock(&shared.state);
        loop {
            if st.done {
                return None;
            }
            if let Some(request) = st.request.take() {
                drop(st);
                let reply = serve(session, request, converse_timeout);
                st = lock(&shared.state);
                st.reply = Some(reply);
                shared.to_worker.notify_one();
                continue;
            }
            let sleep = match st.current {
                Some((slot, began)) => {
                    let (limit, spent) = (deadline(), began.elapsed());
                    if spent > limit {
                        // The call has not returned (it would have cleared `current` under
                        // this lock): from here on it is abandoned, whatever it does.
                        st.abandoned = true;
                        return Some(slot);
                    }
                    (limit - spent).min(TICK)
                }
                None => TICK,
            };
            st = shared
                .to_dispatcher
                .wait_timeout(st, sleep)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
    }

    /// What the last job's calls left: their records, and the slots of those that returned
    /// `Ok` with nothing to record.
    pub(super) fn take_records(&self) -> (Vec<CallRecord>, u64) {
        let mut st = lock(&self.shared.state);
        (
            std::mem::take(&mut st.records),
            std::mem::take(&mut st.quiet_ok),
        )
    }

}

/// The host side of a hook's context on a dispatch worker: the session is the dispatching
/// thread's, asked over the hand-off.
struct WorkerServices<'a> {
    shared: &'a Shared,
    frame: Frame<'a>,
}

impl WorkerServices<'_> {
    /// Posts a session request to the dispatching thread and waits for its reply.
    fn ask(&self, request: SessionRequest) -> Result<String, ConverseError> {
        let shared = self.shared;
        let mut st = lock(&shared.state);
        st.reply = None;
        st.request = Some(request);
        shared.to_dispatcher.notify_one();
        loop {
            if let Some(reply) = st.reply.take() {
                return reply;
            }
            if st.abandoned {
                return Err(ConverseError::Failed("the hook call was abandoned".into()));
            }
            st = shared
                .to_worker
                .wait(st)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
    }
}

impl HostServices for WorkerServices<'_> {
    fn member(&self, name: &str) -> Option<String> {
        self.frame.member(name)
    }

    fn call(&self, op: &str, arg: &str) -> Result<String, String> {
        self.frame.serve(op, arg, |request| self.ask(request))
    }
}

fn serve(
    session: Option<&dyn Session>,
    request: SessionRequest,
    converse_timeout: Duration,
) -> Result<String, ConverseError> {
    match (session, request) {
        (None, _) => Err(ConverseError::Failed("no session".into())),
        (Some(s), SessionRequest::Converse(hook, text)) => {
            s.converse(&hook, &text, converse_timeout)
        }
        (Some(s), SessionRequest::ProbeState) => s
            .probe_state()
            .map(|v| v.to_string())
            .map_err(ConverseError::Failed),
    }
}

fn worker_loop(shared: &Shared) {
    loop {
        let job = {
            let mut st = lock(&shared.state);
            loop {
                if st.abandoned {
                    return;
                }
                if let Some(job) = st.job.take() {
                    break job;
                }
                st = shared
                    .to_worker
                    .wait(st)
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
            }
        };
        if !run_job(shared, &job) {
            return;
        }
        // Let go of the snapshot before saying done: the runner takes its trace and score
        // back without a copy when nobody else holds them.
        drop(job);
        let mut st = lock(&shared.state);
        if st.abandoned {
            return;
        }
        st.done = true;
        shared.finished.store(true, Ordering::Release);
        drop(st);
        shared.to_dispatcher.notify_one();
    }
}

/// Makes the job's calls; `false` once one of them was abandoned.
fn run_job(shared: &Shared, job: &Job) -> bool {
    let mut bits = job.order;
    while bits != 0 {
        let slot = if job.reverse {
            63 - bits.leading_zeros() as usize
        } else {
            bits.trailing_zeros() as usize
        };
        bits &= !(1u64 << slot);
        let hook = &shared.hooks[slot];
        {
            let mut st = lock(&shared.state);
            if st.abandoned {
                return false;
            }
            st.current = Some((slot, Instant::now()));
        }
        let services = WorkerServices {
            shared,
            frame: Frame::new(
                &job.data,
                job.point,
                job.caps,
                &hook.name,
                job.has_session,
                hook.reads_sdk_1_0(),
            ),
        };
        let point = if hook.reads_turn_ids() {
            job.point_with_turn
        } else {
            job.point
        };
        // Plugins' panics are caught on their side of the boundary; this catches the host's
        // own (an isolated hook's parent side), which must not end the worker unrecorded.
        let called = std::panic::catch_unwind(AssertUnwindSafe(|| hook.call(point, &services)))
            .unwrap_or_else(|p| Err(CallError::Failed(format!("panicked: {}", panic_text(&*p)))));
        let (result, fatal) = match called {
            Ok(v) => (Ok(v), false),
            Err(CallError::Failed(e)) => (Err(e), false),
            Err(CallError::Fatal(e)) => (Err(e), true),
        };
        let out = services.frame.into_outputs();
        let mut st = lock(&shared.state);
        if st.abandoned {
            // The dispatching thread gave up on this call first: it owns what comes next.
            return false;
        }
        st.current = None;
        if matches!(&result, Ok(v) if v.is_empty()) && out.is_none() {
            st.quiet_ok |= 1 << slot;
        } else {
            st.records.push(CallRecord::new(slot, result, fatal, out));
        }
    }
    true
}

fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".to_owned())
}
