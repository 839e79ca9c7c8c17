//! Calling active hooks at a point, under deadlines, without letting them hurt the run.
//!
//! A dispatch hands the whole point (every hook that declared it, in activation order) to
//! one worker thread in a single hand-off and waits for it: spinning briefly, then parking,
//! so a fast dispatch costs well under a microsecond per hook and an idle worker burns no
//! CPU. Each hook call has its own deadline. A hook that overruns is abandoned (the worker
//! is left to it and replaced), quarantined for the rest of the invocation, and the
//! dispatch goes on with the next hook. The context a hook sees is an owned snapshot
//! (`Arc`s), so an abandoned call holds no borrow of the runner's state.
//!
//! `ctx.converse()` is proxied back to the dispatching thread, which owns the agent
//! session; the worker waits for the reply. A point nobody declared costs one branch.
//!
//! What a dispatch must never do: change a verdict, or let a hook panic/err/hang stop the
//! run. Failures become warnings (`hook:<name>: …`); after [`FAILURE_LATCH`] consecutive
//! failures a hook is quarantined with one summary warning.

use std::{
    sync::{
        Arc, Mutex, MutexGuard, OnceLock,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    thread::Thread,
    time::{Duration, Instant},
};

use serde::Serialize;
use serde_json::Value;
use windtunnel_abi::{op, point};
use windtunnel_sdk::model::{AgentConfig, AggregateResult, Scenario, Score, Trace, is_slug};

use crate::{
    deadlines::{Deadlines, human},
    interrupt::{CUT_HOOK_DEADLINE, Interrupt},
    limits::{HookCaps, cut_text},
    registry::{ActiveHook, CallError, HostServices},
};

/// Consecutive failures after which a hook is quarantined.
pub const FAILURE_LATCH: u32 = 3;

/// Set in [`Shared::current`] by the waiting thread when it gives up on the call in
/// progress. The worker clears `current` when its call returns; one compare-and-swap on that
/// word decides whether the call returned or hung, so a call that returns in the same
/// instant it is abandoned can never be followed by its worker calling the next hook.
const ABANDONED: u64 = 1 << 63;

/// How long each side spins before parking.
const SPIN: Duration = Duration::from_micros(50);

/// The read-only members of a hook's context. Members are serialized to JSON only when a
/// hook reads them, once per dispatch.
#[derive(Default, Clone)]
pub struct CallData {
    pub scenario: Option<Arc<Scenario>>,
    pub agent: Option<Arc<AgentConfig>>,
    pub run_id: Option<Arc<str>>,
    pub session_id: Option<Arc<str>>,
    pub trace: Option<Arc<Trace>>,
    pub score: Option<Arc<Score>>,
    pub aggregate: Option<Arc<AggregateResult>>,
    pub aggregates: Option<Arc<Vec<AggregateResult>>>,
    /// Extra members for turn points (`turn_call`, `turn_result`), as JSON text.
    pub extra: Vec<(&'static str, Arc<str>)>,
    /// The artifact names already written in this call's scope (the run, the scenario or
    /// the pack), as `<hook>` or `<hook>.<label>`: a second artifact with a taken name is an
    /// error to the hook, never a silent overwrite.
    pub artifact_names: Option<Arc<Mutex<std::collections::HashSet<String>>>>,
}

struct Snapshot {
    data: CallData,
    cache: [OnceLock<Option<String>>; 8],
}

const MEMBERS: [&str; 8] = [
    "scenario",
    "agent",
    "run_id",
    "session_id",
    "trace",
    "score",
    "aggregate",
    "aggregates",
];

impl Snapshot {
    fn member(&self, name: &str) -> Option<String> {
        let Some(i) = MEMBERS.iter().position(|m| *m == name) else {
            return self
                .data
                .extra
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string());
        };
        fn json<T: Serialize + ?Sized>(v: &Option<Arc<T>>) -> Option<String> {
            v.as_ref().and_then(|v| serde_json::to_string(&**v).ok())
        }
        let d = &self.data;
        self.cache[i]
            .get_or_init(|| match i {
                0 => json(&d.scenario),
                1 => json(&d.agent),
                2 => json(&d.run_id),
                3 => json(&d.session_id),
                4 => json(&d.trace),
                5 => json(&d.score),
                6 => json(&d.aggregate),
                _ => json(&d.aggregates),
            })
            .clone()
    }
}

/// An artifact a hook emitted.
#[derive(Debug, Clone, PartialEq)]
pub struct Artifact {
    pub hook: String,
    pub label: Option<String>,
    pub payload: Value,
}

/// What a dispatch produced, in activation order.
#[derive(Debug, Default)]
pub struct DispatchOutput {
    /// `hook:<name>: <message>` lines: `ctx.warn` calls, errors, panics, timeouts.
    pub warnings: Vec<String>,
    pub artifacts: Vec<Artifact>,
    /// Slots (bit i = hook i) of the calls that returned `Ok`.
    pub ok: u64,
    /// What each call that returned something — a value, an error — returned, by slot, in
    /// call order. A call that returned `Ok` with nothing to say appears only in `ok`.
    pub returns: Vec<(usize, Result<String, String>)>,
    /// Slots of hooks that overran their deadline in this dispatch.
    pub timed_out: Vec<usize>,
}

/// Why a converse call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConverseError {
    /// No reply within the converse deadline; a late reply is discarded.
    TimedOut(Duration),
    Failed(String),
}

impl std::fmt::Display for ConverseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConverseError::TimedOut(d) => write!(f, "converse timed out after {}", human(*d)),
            ConverseError::Failed(e) => write!(f, "converse failed: {e}"),
        }
    }
}

/// The run's live session, for `ctx.converse()` and `ctx.probe_state()`. Implemented by
/// the runner; always called on the dispatching thread, never on a hook's worker.
pub trait Session {
    /// One turn into the run's session, bounded by `timeout`. Never recorded in the trace.
    fn converse(&self, hook: &str, text: &str, timeout: Duration) -> Result<String, ConverseError>;
    /// The agent's state as its runtime reports it.
    fn probe_state(&self) -> Result<Value, String>;
}

enum SessionRequest {
    /// Hook name, text.
    Converse(String, String),
    ProbeState,
}

/// One hook call's outcome as the worker saw it.
struct CallRecord {
    slot: usize,
    result: Result<String, String>,
    warnings: Vec<String>,
    artifacts: Vec<(Option<String>, Value)>,
    conversed: bool,
    converse_timed_out: bool,
    /// The instance is gone ([`CallError::Fatal`]): quarantine it now, with one line.
    fatal: bool,
}

struct Job {
    seq: u64,
    point: u32,
    /// Slots to call, as a bitmask (bit i = hook i).
    order: u64,
    /// Call in reverse activation order (turn finishes).
    reverse: bool,
    data: Arc<Snapshot>,
    has_session: bool,
    caps: HookCaps,
}

/// Keeps a value on a cache line of its own: the dispatching thread spins on `done` while
/// the worker writes `current` per hook, and sharing a line would bounce it between cores
/// on every call.
#[repr(align(128))]
struct Padded<T>(T);

impl<T> std::ops::Deref for Padded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// State shared by the dispatching thread and one worker generation.
struct Shared {
    job: Padded<Mutex<Option<Job>>>,
    submitted: Padded<AtomicU64>,
    done: Padded<AtomicU64>,
    /// The call in progress: `(call number << 16) | (slot + 1)`, 0 when idle. The waiting
    /// thread times each call from when it first sees its number, so the worker reads no
    /// clock.
    current: Padded<AtomicU64>,
    /// Slots of the current job's calls that returned `Ok` with no output at all: they need
    /// no record, so a job of quiet hooks moves one word between cores, not one record each.
    quiet_ok: Padded<AtomicU64>,
    records: Padded<Mutex<Vec<CallRecord>>>,
    request: Mutex<Option<SessionRequest>>,
    reply: Mutex<Option<Result<String, ConverseError>>>,
    abandoned: Padded<AtomicBool>,
    /// Set while that side is (about to be) parked, so the other side calls `unpark` only
    /// when it is needed: unparking a running thread still touches its state across cores.
    worker_parked: Padded<AtomicBool>,
    runner_parked: Padded<AtomicBool>,
    /// The hooks, held by the worker for its whole life (no per-job reference counting).
    hooks: Arc<[Arc<ActiveHook>]>,
    /// The thread waiting for the current job; replaced only when another thread
    /// dispatches, read only to wake it.
    runner: Mutex<Option<Thread>>,
}

impl Shared {
    fn wake_runner(&self) {
        if let Some(t) = lock(&self.runner).as_ref() {
            t.unpark();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A poisoned lock only means a panic elsewhere; the data is still usable here, and
    // panicking in code a plugin calls into would cross the FFI boundary.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

struct Worker {
    shared: Arc<Shared>,
    thread: Thread,
}

impl Worker {
    fn spawn(hooks: Arc<[Arc<ActiveHook>]>) -> std::io::Result<Worker> {
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
        // Wait for the next job: spin briefly (back-to-back dispatches), then park.
        let spin_until = Instant::now() + SPIN;
        let mut spins = 0u32;
        while shared.submitted.load(Ordering::Acquire) == seen {
            if shared.abandoned.load(Ordering::Acquire) {
                return;
            }
            spins = spins.wrapping_add(1);
            if spins % 64 == 0 && Instant::now() > spin_until {
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
        shared.done.store(job.seq, Ordering::SeqCst);
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

        let services = WorkerServices {
            shared,
            job,
            hook: &hook.name,
            warnings: Mutex::new(Vec::new()),
            artifacts: Mutex::new(Vec::new()),
            conversed: AtomicBool::new(false),
            timed_out: AtomicBool::new(false),
        };
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
        let warnings = services.warnings.into_inner().unwrap_or_default();
        let artifacts = services.artifacts.into_inner().unwrap_or_default();
        let conversed = services.conversed.load(Ordering::Acquire);
        if matches!(&result, Ok(v) if v.is_empty())
            && warnings.is_empty()
            && artifacts.is_empty()
            && !conversed
        {
            quiet |= 1 << slot;
            shared.quiet_ok.store(quiet, Ordering::Release);
            continue;
        }
        lock(&shared.records).push(CallRecord {
            slot,
            result,
            warnings,
            artifacts,
            conversed,
            converse_timed_out: services.timed_out.load(Ordering::Acquire),
            fatal,
        });
    }
}

/// The host side of a hook's context, on the worker thread.
struct WorkerServices<'a> {
    shared: &'a Arc<Shared>,
    job: &'a Job,
    hook: &'a str,
    warnings: Mutex<Vec<String>>,
    artifacts: Mutex<Vec<(Option<String>, Value)>>,
    conversed: AtomicBool,
    timed_out: AtomicBool,
}

impl HostServices for WorkerServices<'_> {
    fn member(&self, name: &str) -> Option<String> {
        self.job.data.member(name)
    }

    fn call(&self, op: &str, arg: &str) -> Result<String, String> {
        match op {
            op::WARN => {
                let mut text = arg.to_owned();
                cut_text(&mut text, self.job.caps.warning_bytes);
                lock(&self.warnings).push(format!("hook:{}: {text}", self.hook));
                Ok("null".into())
            }
            op::EMIT_ARTIFACT => self.emit_artifact(arg).inspect_err(|e| {
                lock(&self.warnings).push(format!("hook:{}: artifact refused: {e}", self.hook));
            }),
            op::CONVERSE => {
                if self.job.point != point::ON_RUN_SCORED {
                    return Err(format!(
                        "converse is valid only during on_run_scored, not {}",
                        point::name(self.job.point)
                    ));
                }
                if !self.job.has_session {
                    return Err("the run's session is unusable; converse is unavailable".into());
                }
                self.conversed.store(true, Ordering::Release);
                match self.ask(SessionRequest::Converse(
                    self.hook.to_owned(),
                    arg.to_owned(),
                )) {
                    Ok(reply) => serde_json::to_string(&reply).map_err(|e| e.to_string()),
                    Err(e) => {
                        if matches!(e, ConverseError::TimedOut(_)) {
                            self.timed_out.store(true, Ordering::Release);
                        }
                        Err(e.to_string())
                    }
                }
            }
            op::PROBE_STATE => {
                if !matches!(
                    self.job.point,
                    point::ON_RUN_START | point::ON_RUN_SCORED | point::ON_RUN_END
                ) {
                    return Err(format!(
                        "probe_state is valid only at run points, not {}",
                        point::name(self.job.point)
                    ));
                }
                if !self.job.has_session {
                    return Err("the run's session is unusable; probe_state is unavailable".into());
                }
                self.ask(SessionRequest::ProbeState).map_err(|e| match e {
                    ConverseError::Failed(e) => e,
                    other => other.to_string(),
                })
            }
            other => Err(format!("this wt offers no host service `{other}`")),
        }
    }
}

impl WorkerServices<'_> {
    fn emit_artifact(&self, arg: &str) -> Result<String, String> {
        let max = self.job.caps.artifact_bytes;
        if arg.len() > max {
            return Err(format!(
                "{} bytes is more than the {max} bytes an artifact may have ({})",
                arg.len(),
                crate::limits::MAX_ARTIFACT_ENV
            ));
        }
        let v: Value =
            serde_json::from_str(arg).map_err(|e| format!("artifact is not JSON: {e}"))?;
        let label = match v.get("label") {
            None | Some(Value::Null) => None,
            Some(Value::String(l)) if is_slug(l) => Some(l.clone()),
            Some(other) => {
                return Err(format!(
                    "artifact label {other} is not a slug ([a-z0-9_-]+, at most 64 characters)"
                ));
            }
        };
        crate::store::check_artifact_names(self.hook, label.as_deref())
            .map_err(|e| e.to_string())?;
        let name = match &label {
            Some(l) => format!("{}.{l}", self.hook),
            None => self.hook.to_owned(),
        };
        if let Some(names) = &self.job.data.data.artifact_names {
            if !lock(names).insert(name.clone()) {
                return Err(format!(
                    "an artifact named `{name}` was already written here; give each artifact its own label"
                ));
            }
        }
        let payload = v.get("payload").cloned().unwrap_or(Value::Null);
        lock(&self.artifacts).push((label, payload));
        Ok("null".into())
    }

    /// Posts a session request to the dispatching thread and waits for its reply.
    fn ask(&self, request: SessionRequest) -> Result<String, ConverseError> {
        *lock(&self.shared.reply) = None;
        *lock(&self.shared.request) = Some(request);
        self.shared.wake_runner();
        loop {
            if let Some(reply) = lock(&self.shared.reply).take() {
                return reply;
            }
            if self.shared.abandoned.load(Ordering::Acquire) {
                return Err(ConverseError::Failed("the hook call was abandoned".into()));
            }
            std::thread::park_timeout(Duration::from_millis(5));
        }
    }
}

/// One hand-off to the worker: which hooks, at which point, in which order.
struct Batch<'a> {
    point: u32,
    order: u64,
    reverse: bool,
    snapshot: &'a Arc<Snapshot>,
    session: Option<&'a dyn Session>,
}

struct Health {
    consecutive: u32,
    first_error: Option<String>,
}

struct Inner {
    /// The idle worker; a dispatch takes it out while it runs, so a dispatch nested in a
    /// converse (a guard consulted about a converse turn) gets a worker of its own.
    worker: Option<Worker>,
    health: Vec<Health>,
    /// Bitmask of quarantined hooks.
    quarantined: u64,
    seq: u64,
    /// A record buffer kept between dispatches so a dispatch allocates none.
    spare: Vec<CallRecord>,
}

/// The active hooks of one invocation and everything needed to call them safely.
pub struct Dispatcher {
    hooks: Arc<[Arc<ActiveHook>]>,
    /// Per point, the bitmask of hooks that declared it.
    by_point: [u64; 10],
    deadlines: Deadlines,
    caps: HookCaps,
    /// The values of the hooks' secret settings (`WT_<HOOK>_API_KEY`, …): never let through
    /// in a warning or an artifact.
    redactor: crate::secrets::Redactor,
    /// Once cut, hook calls get at most [`CUT_HOOK_DEADLINE`].
    stop: Option<Arc<Interrupt>>,
    /// Top-level dispatches take turns: one hook instance is never called from two threads
    /// at once. A dispatch nested in one (on the thread that holds this) does not wait.
    serial: Mutex<()>,
    serial_owner: Mutex<Option<std::thread::ThreadId>>,
    inner: Mutex<Inner>,
}

impl Dispatcher {
    /// At most 64 hooks can be active at once.
    pub const MAX_HOOKS: usize = 64;

    pub fn new(hooks: Vec<ActiveHook>, deadlines: Deadlines) -> Dispatcher {
        assert!(hooks.len() <= Self::MAX_HOOKS, "at most 64 active hooks");
        let hooks: Arc<[Arc<ActiveHook>]> = hooks.into_iter().map(Arc::new).collect();
        let mut by_point = [0u64; 10];
        for p in point::ALL {
            for (i, h) in hooks.iter().enumerate() {
                if h.declares(p) {
                    by_point[p as usize] |= 1 << i;
                }
            }
        }
        let health = hooks
            .iter()
            .map(|_| Health {
                consecutive: 0,
                first_error: None,
            })
            .collect();
        let mut redactor = crate::secrets::Redactor::new();
        for h in hooks.iter() {
            redactor.extend(&crate::registry::hook_secrets(&h.name));
        }
        Dispatcher {
            hooks,
            by_point,
            deadlines,
            caps: HookCaps::default(),
            redactor,
            stop: None,
            serial: Mutex::new(()),
            serial_owner: Mutex::new(None),
            inner: Mutex::new(Inner {
                worker: None,
                health,
                quarantined: 0,
                seq: 0,
                spare: Vec::new(),
            }),
        }
    }

    /// Caps on what hooks hand back (artifact size, warning length).
    pub fn with_caps(mut self, caps: HookCaps) -> Dispatcher {
        self.caps = caps;
        self
    }

    /// The sweep's stop state: once it is cut, each hook call gets at most
    /// [`CUT_HOOK_DEADLINE`].
    pub fn with_stop(mut self, stop: Arc<Interrupt>) -> Dispatcher {
        self.stop = Some(stop);
        self
    }

    pub fn hooks(&self) -> &[Arc<ActiveHook>] {
        &self.hooks
    }

    pub fn deadlines(&self) -> Deadlines {
        self.deadlines
    }

    /// Does any active hook declare `point`? (A dispatch to nobody is free.)
    #[inline]
    pub fn wants(&self, point: u32) -> bool {
        self.by_point
            .get(point as usize)
            .is_some_and(|&bits| bits != 0)
    }

    /// Calls every hook that declared `point`, in activation order, and returns what they
    /// produced. `session` is the run's live session at run points (None when the session
    /// is unusable, and at scenario and pack points).
    pub fn dispatch(
        &self,
        point: u32,
        data: CallData,
        session: Option<&dyn Session>,
    ) -> DispatchOutput {
        self.dispatch_to(u64::MAX, false, point, data, session)
    }

    /// Bitmask of the hooks that declared `point`.
    pub fn declared(&self, point: u32) -> u64 {
        self.by_point.get(point as usize).copied().unwrap_or(0)
    }

    /// Bitmask of quarantined hooks.
    pub fn quarantined(&self) -> u64 {
        lock(&self.inner).quarantined
    }

    /// Like [`Dispatcher::dispatch`], limited to the hooks in `mask`, optionally in reverse
    /// activation order.
    pub fn dispatch_to(
        &self,
        mask: u64,
        reverse: bool,
        point: u32,
        data: CallData,
        session: Option<&dyn Session>,
    ) -> DispatchOutput {
        if self.declared(point) & mask == 0 {
            return DispatchOutput::default();
        }
        let me = std::thread::current().id();
        let nested = *lock(&self.serial_owner) == Some(me);
        let _turn = if nested {
            None
        } else {
            let guard = lock(&self.serial);
            *lock(&self.serial_owner) = Some(me);
            Some(guard)
        };
        let out = self.dispatch_serial(mask, reverse, point, data, session);
        if !nested {
            *lock(&self.serial_owner) = None;
        }
        out
    }

    fn dispatch_serial(
        &self,
        mask: u64,
        reverse: bool,
        point: u32,
        data: CallData,
        session: Option<&dyn Session>,
    ) -> DispatchOutput {
        let mut order = self.by_point[point as usize] & mask & !self.quarantined();
        let mut out = DispatchOutput::default();
        if order == 0 {
            return out;
        }
        let snapshot = Arc::new(Snapshot {
            data,
            cache: Default::default(),
        });
        while order != 0 {
            let batch = Batch {
                point,
                order,
                reverse,
                snapshot: &snapshot,
                session,
            };
            match self.run_batch(&batch, &mut out) {
                Ok(()) => break,
                // Go on with the hooks after the one that hung.
                Err(hung) if reverse => order &= (1u64 << hung) - 1,
                Err(hung) => order &= !(u64::MAX >> (63 - hung)),
            }
            order &= !self.quarantined();
        }
        out
    }

    /// The deadline of one call at `point` now (shorter once the sweep is cut).
    fn deadline(&self, point: u32) -> Duration {
        let d = self.deadlines.for_point(point);
        match &self.stop {
            Some(stop) if stop.is_cut() => d.min(CUT_HOOK_DEADLINE),
            _ => d,
        }
    }

    /// Runs `order` on a worker. `Err(slot)` when the hook in `slot` overran its deadline
    /// and was abandoned (its warning is already recorded).
    fn run_batch(&self, batch: &Batch<'_>, out: &mut DispatchOutput) -> Result<(), usize> {
        let Batch {
            point,
            order,
            reverse,
            snapshot,
            session,
        } = *batch;
        let (worker, seq) = {
            let mut inner = lock(&self.inner);
            inner.seq += 1;
            (inner.worker.take(), inner.seq)
        };
        let worker = match worker {
            Some(w) => w,
            None => match Worker::spawn(self.hooks.clone()) {
                Ok(w) => w,
                Err(e) => {
                    for (i, h) in self.hooks.iter().enumerate() {
                        if order & (1 << i) != 0 {
                            out.warnings.push(format!(
                                "hook:{}: not called: cannot start a thread: {e}",
                                h.name
                            ));
                        }
                    }
                    return Ok(());
                }
            },
        };
        let shared = worker.shared.clone();
        *lock(&shared.runner) = Some(std::thread::current());
        shared.quiet_ok.store(0, Ordering::Relaxed);
        *lock(&shared.job) = Some(Job {
            seq,
            point,
            order,
            reverse,
            data: snapshot.clone(),
            has_session: session.is_some(),
            caps: self.caps,
        });
        shared.submitted.store(seq, Ordering::SeqCst);
        if shared.worker_parked.load(Ordering::SeqCst) {
            worker.thread.unpark();
        }

        let hung = wait(
            &shared,
            seq,
            || self.deadline(point),
            session,
            self.deadlines.converse,
            &worker.thread,
        );
        #[cfg(test)]
        if hung.is_some() {
            // Widens the window between "it hung" and retiring the worker, where a call that
            // returns late must not go on to the next hook.
            std::thread::sleep(Duration::from_micros(
                tests::WIDEN_ABANDON_WINDOW_US.load(Ordering::Relaxed),
            ));
        }

        let mut inner = lock(&self.inner);
        let quiet = shared.quiet_ok.load(Ordering::Acquire);
        if quiet != 0 {
            out.ok |= quiet;
            for (slot, health) in inner.health.iter_mut().enumerate() {
                if quiet & (1 << slot) != 0 {
                    health.consecutive = 0;
                    health.first_error = None;
                }
            }
        }
        let mut records = std::mem::take(&mut inner.spare);
        std::mem::swap(&mut records, &mut *lock(&shared.records));
        for r in records.drain(..) {
            self.absorb(&mut inner, r, out);
        }
        inner.spare = records;
        match hung {
            None => {
                if inner.worker.is_none() {
                    inner.worker = Some(worker);
                } else {
                    // A nested dispatch left its worker; this one retires.
                    retire(&worker);
                }
                Ok(())
            }
            Some(slot) => {
                retire(&worker);
                // An isolated hook's process is killed now; its worker, already told the
                // call was abandoned, reaps it and calls nothing more.
                self.hooks[slot].abandon();
                let name = &self.hooks[slot].name;
                inner.quarantined |= 1 << slot;
                let msg = format!(
                    "hook:{name}: timed out after {} in {}; abandoned and quarantined for the rest of this invocation",
                    human(self.deadline(point)),
                    point::name(point)
                );
                tracing::debug!("{msg}");
                out.warnings.push(msg);
                out.timed_out.push(slot);
                Err(slot)
            }
        }
    }

    fn absorb(&self, inner: &mut Inner, mut r: CallRecord, out: &mut DispatchOutput) {
        let name = &self.hooks[r.slot].name;
        for w in &mut r.warnings {
            self.redactor.scrub_string(w);
        }
        if let Err(e) = &mut r.result {
            self.redactor.scrub_string(e);
        }
        out.warnings.extend(r.warnings);
        for (label, mut payload) in r.artifacts {
            if !self.redactor.is_empty() {
                self.redactor.scrub_value(&mut payload);
            }
            if r.conversed {
                if let Value::Object(map) = &mut payload {
                    map.insert("tools_disabled".into(), Value::Bool(false));
                    map.insert("timed_out".into(), Value::Bool(r.converse_timed_out));
                }
            }
            out.artifacts.push(Artifact {
                hook: name.clone(),
                label,
                payload,
            });
        }
        let health = &mut inner.health[r.slot];
        match &r.result {
            Ok(_) => {
                out.ok |= 1 << r.slot;
                health.consecutive = 0;
                health.first_error = None;
            }
            Err(e) if r.fatal => {
                if inner.quarantined & (1 << r.slot) == 0 {
                    inner.quarantined |= 1 << r.slot;
                    let mut msg =
                        format!("hook:{name}: {e}; disabled for the rest of this invocation");
                    cut_text(&mut msg, self.caps.warning_bytes);
                    tracing::debug!("{msg}");
                    out.warnings.push(msg);
                }
            }
            Err(e) => {
                health.consecutive += 1;
                health.first_error.get_or_insert_with(|| e.clone());
                let mut warning = format!("hook:{name}: {e}");
                cut_text(&mut warning, self.caps.warning_bytes);
                tracing::debug!("{warning}");
                out.warnings.push(warning);
                let already = inner.quarantined & (1 << r.slot) != 0;
                // A panic leaves the instance disabled: quarantine it at once, with one line.
                let why = if is_panic(e) {
                    Some("after a panic".to_owned())
                } else if health.consecutive >= FAILURE_LATCH {
                    Some(format!(
                        "after {} consecutive failures (first: {})",
                        health.consecutive,
                        health.first_error.as_deref().unwrap_or("unknown")
                    ))
                } else {
                    None
                };
                if let (Some(why), false) = (why, already) {
                    inner.quarantined |= 1 << r.slot;
                    let mut msg =
                        format!("hook:{name}: disabled for the rest of this invocation {why}");
                    cut_text(&mut msg, self.caps.warning_bytes);
                    tracing::debug!("{msg}");
                    out.warnings.push(msg);
                }
            }
        }
        out.returns.push((r.slot, r.result));
    }
}

/// Is a hook's error the report of a panic caught in the plugin (the SDK's adapter reports
/// them as `panicked at <file>:<line>: <message>`)?
pub fn is_panic(error: &str) -> bool {
    error.starts_with("panicked at ") || error.starts_with("panicked: ")
}

/// Tells a worker to exit once it is idle (or leaves it to a hung call).
fn retire(worker: &Worker) {
    worker.shared.abandoned.store(true, Ordering::Release);
    worker.thread.unpark();
}

/// Waits for job `seq`, serving converse requests. Returns the slot of a hook that overran
/// its deadline (abandoned: the worker will call nothing more), or `None` when the job
/// completed.
fn wait(
    shared: &Shared,
    seq: u64,
    deadline: impl Fn() -> Duration,
    session: Option<&dyn Session>,
    converse_timeout: Duration,
    worker: &Thread,
) -> Option<usize> {
    let spin_until = Instant::now() + SPIN;
    let mut spins = 0u32;
    // The call in progress and when this thread first saw it.
    let mut observed = (0u64, Instant::now());
    loop {
        if shared.done.load(Ordering::Acquire) == seq {
            return None;
        }
        spins = spins.wrapping_add(1);
        if spins % 64 != 0 {
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

#[cfg(test)]
mod tests {
    use std::sync::Mutex as StdMutex;

    use windtunnel_sdk::{Context, Hook, Result as HookResult, hook};

    use super::*;
    use crate::registry::BuiltIn;

    static LOG: StdMutex<Vec<String>> = StdMutex::new(Vec::new());

    fn active<H: Hook>() -> ActiveHook {
        let e = windtunnel_sdk::__private::HookEntry::of::<H>();
        ActiveHook::from_builtin(&BuiltIn {
            name: e.name,
            points: e.points,
            new: e.new,
        })
    }

    fn deadlines(ms: u64) -> Deadlines {
        Deadlines {
            dispatch: Duration::from_millis(ms),
            converse: Duration::from_millis(ms),
        }
    }

    macro_rules! logging_hook {
        ($ty:ident, $name:literal) => {
            #[derive(Default)]
            struct $ty;
            #[hook]
            impl Hook for $ty {
                const NAME: &'static str = $name;
                fn on_run_start(&mut self, ctx: &Context<'_>) -> HookResult {
                    LOG.lock().unwrap().push(format!(
                        "{}:{}",
                        $name,
                        ctx.run_id().unwrap_or_default()
                    ));
                    Ok(())
                }
            }
        };
    }
    logging_hook!(OrderA, "order-a");
    logging_hook!(OrderB, "order-b");

    #[derive(Default)]
    struct Sleeper;
    #[hook]
    impl Hook for Sleeper {
        const NAME: &'static str = "sleeper";
        fn on_run_start(&mut self, _: &Context<'_>) -> HookResult {
            std::thread::sleep(Duration::from_secs(3));
            Ok(())
        }
    }

    #[derive(Default)]
    struct Failing;
    #[hook]
    impl Hook for Failing {
        const NAME: &'static str = "failing";
        fn on_run_end(&mut self, _: &Context<'_>) -> HookResult {
            Err(windtunnel_sdk::Error::msg("disk full"))
        }
    }

    #[derive(Default)]
    struct Boom;
    #[hook]
    impl Hook for Boom {
        const NAME: &'static str = "boom";
        fn on_run_end(&mut self, _: &Context<'_>) -> HookResult {
            panic!("boom went the hook")
        }
    }

    #[derive(Default)]
    struct Talker;
    #[hook]
    impl Hook for Talker {
        const NAME: &'static str = "talker";
        fn on_run_start(&mut self, ctx: &Context<'_>) -> HookResult {
            let err = ctx.converse("hello").unwrap_err();
            ctx.warn(err);
            Ok(())
        }
        fn on_run_scored(&mut self, ctx: &Context<'_>) -> HookResult {
            let reply = ctx.converse("how did it go?");
            ctx.emit_artifact(
                &serde_json::json!({"reply": reply.as_ref().ok(), "error": reply.err().map(|e| e.to_string())}),
                Some("self-report"),
            )?;
            Ok(())
        }
    }

    fn data(run: &str) -> CallData {
        CallData {
            run_id: Some(Arc::from(run)),
            ..CallData::default()
        }
    }

    #[test]
    fn hooks_run_in_activation_order_and_undeclared_points_are_skipped() {
        let d = Dispatcher::new(
            vec![active::<OrderB>(), active::<OrderA>()],
            deadlines(5000),
        );
        assert!(!d.wants(point::ON_PACK_END));
        let out = d.dispatch(point::ON_RUN_START, data("r1"), None);
        assert!(out.warnings.is_empty(), "{:?}", out.warnings);
        let log = LOG.lock().unwrap().clone();
        let mine: Vec<&String> = log.iter().filter(|l| l.ends_with(":r1")).collect();
        assert_eq!(mine, ["order-b:r1", "order-a:r1"]);
    }

    #[test]
    fn a_hook_that_overruns_is_abandoned_and_quarantined_and_the_next_hook_still_runs() {
        let d = Dispatcher::new(
            vec![active::<Sleeper>(), active::<OrderA>()],
            deadlines(500),
        );
        let started = Instant::now();
        let out = d.dispatch(point::ON_RUN_START, data("r-hang"), None);
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "dispatch waited for the hung hook"
        );
        assert_eq!(out.warnings.len(), 1, "{:?}", out.warnings);
        assert!(out.warnings[0].starts_with("hook:sleeper: timed out after 500ms in on_run_start"));
        assert!(LOG.lock().unwrap().contains(&"order-a:r-hang".to_string()));
        // Quarantined: the next dispatch does not wait for it again.
        let started = Instant::now();
        let out = d.dispatch(point::ON_RUN_START, data("r-hang-2"), None);
        assert!(started.elapsed() < Duration::from_millis(500));
        assert!(out.warnings.is_empty(), "{:?}", out.warnings);
        assert!(
            LOG.lock()
                .unwrap()
                .contains(&"order-a:r-hang-2".to_string())
        );
    }

    #[test]
    fn errors_and_panics_become_warnings_and_three_in_a_row_trip_the_latch() {
        let d = Dispatcher::new(vec![active::<Failing>(), active::<Boom>()], deadlines(5000));
        let out = d.dispatch(point::ON_RUN_END, data("x"), None);
        // One panic: one warning and one `disabled` line, at once.
        assert_eq!(out.warnings.len(), 3, "{:?}", out.warnings);
        assert_eq!(out.warnings[0], "hook:failing: disk full");
        assert!(
            out.warnings[1].starts_with("hook:boom: panicked at "),
            "{:?}",
            out.warnings
        );
        assert!(out.warnings[1].contains("boom went the hook"));
        assert_eq!(
            out.warnings[2],
            "hook:boom: disabled for the rest of this invocation after a panic"
        );
        let out2 = d.dispatch(point::ON_RUN_END, data("x"), None);
        assert_eq!(out2.warnings, ["hook:failing: disk full"]);
        let out3 = d.dispatch(point::ON_RUN_END, data("x"), None);
        assert_eq!(
            out3.warnings,
            [
                "hook:failing: disk full",
                "hook:failing: disabled for the rest of this invocation after 3 consecutive failures (first: disk full)"
            ]
        );
        // Both are now quarantined: nothing is called.
        let out4 = d.dispatch(point::ON_RUN_END, data("x"), None);
        assert!(out4.warnings.is_empty() && out4.returns.is_empty() && out4.ok == 0);
    }

    pub(super) static WIDEN_ABANDON_WINDOW_US: AtomicU64 = AtomicU64::new(0);
    static A_SLEEP_US: AtomicU64 = AtomicU64::new(0);
    static B_CALLS: StdMutex<Vec<String>> = StdMutex::new(Vec::new());

    /// Returns right around its deadline.
    #[derive(Default)]
    struct Borderline;
    #[hook]
    impl Hook for Borderline {
        const NAME: &'static str = "borderline";
        fn on_run_start(&mut self, _: &Context<'_>) -> HookResult {
            std::thread::sleep(Duration::from_micros(A_SLEEP_US.load(Ordering::Relaxed)));
            Ok(())
        }
    }

    /// Records each call's run id.
    #[derive(Default)]
    struct Once;
    #[hook]
    impl Hook for Once {
        const NAME: &'static str = "once";
        fn on_run_start(&mut self, ctx: &Context<'_>) -> HookResult {
            B_CALLS
                .lock()
                .unwrap()
                .push(ctx.run_id().unwrap_or_default().to_owned());
            Ok(())
        }
    }

    #[test]
    fn a_call_that_returns_as_it_is_abandoned_never_lets_two_threads_call_the_next_hook() {
        // The hook before `once` returns within microseconds of its deadline, so the
        // waiting thread's "it hung" and the worker's "it returned" race. Whichever wins,
        // `once` is called once per dispatch: by the old worker or by its replacement,
        // never by both.
        let deadline = Duration::from_millis(4);
        // The first half returns inside a widened window after the deadline; the second
        // half races the deadline itself.
        for i in 0..300u64 {
            let (sleep_us, widen_us) = if i < 150 {
                (5_000, 4_000)
            } else {
                (3_700 + (i % 7) * 100, 0)
            };
            A_SLEEP_US.store(sleep_us, Ordering::Relaxed);
            WIDEN_ABANDON_WINDOW_US.store(widen_us, Ordering::Relaxed);
            let d = Dispatcher::new(
                vec![active::<Borderline>(), active::<Once>()],
                Deadlines {
                    dispatch: deadline,
                    converse: deadline,
                },
            );
            d.dispatch(point::ON_RUN_START, data(&format!("race-{i}")), None);
        }
        // Give an abandoned worker time to run on into the next hook, if it (wrongly) would.
        std::thread::sleep(Duration::from_millis(200));
        let calls = B_CALLS.lock().unwrap().clone();
        let mut seen = std::collections::HashSet::new();
        let twice: Vec<&String> = calls.iter().filter(|c| !seen.insert(*c)).collect();
        assert!(twice.is_empty(), "called twice in one dispatch: {twice:?}");
        assert_eq!(calls.len(), 300);
    }

    struct Echo(Option<Duration>);
    impl Session for Echo {
        fn converse(
            &self,
            _hook: &str,
            text: &str,
            timeout: Duration,
        ) -> Result<String, ConverseError> {
            match self.0 {
                Some(_) => Err(ConverseError::TimedOut(timeout)),
                None => Ok(format!("echo: {text}")),
            }
        }
        fn probe_state(&self) -> Result<Value, String> {
            Ok(serde_json::json!({"memory": []}))
        }
    }

    #[test]
    fn converse_works_only_at_run_scored_and_stamps_the_artifacts() {
        let d = Dispatcher::new(vec![active::<Talker>()], deadlines(5000));
        let out = d.dispatch(point::ON_RUN_START, data("c"), Some(&Echo(None)));
        assert_eq!(
            out.warnings,
            ["hook:talker: converse is valid only during on_run_scored, not on_run_start"]
        );
        let out = d.dispatch(point::ON_RUN_SCORED, data("c"), Some(&Echo(None)));
        assert_eq!(out.artifacts.len(), 1);
        let a = &out.artifacts[0];
        assert_eq!(a.label.as_deref(), Some("self-report"));
        assert_eq!(a.payload["reply"], "echo: how did it go?");
        assert_eq!(a.payload["tools_disabled"], false);
        assert_eq!(a.payload["timed_out"], false);

        let out = d.dispatch(
            point::ON_RUN_SCORED,
            data("c"),
            Some(&Echo(Some(Duration::ZERO))),
        );
        let a = &out.artifacts[0];
        assert_eq!(a.payload["timed_out"], true);
        assert_eq!(a.payload["reply"], Value::Null);
        assert_eq!(a.payload["error"], "converse timed out after 5s");

        let out = d.dispatch(point::ON_RUN_SCORED, data("c"), None);
        assert_eq!(
            out.artifacts[0].payload["error"],
            "the run's session is unusable; converse is unavailable"
        );
    }
}
