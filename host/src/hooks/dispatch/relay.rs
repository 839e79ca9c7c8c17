//! Hook calls made on the lane's own thread, and the lane handed to a new thread when a call
//! overruns its deadline.
//!
//! A lane of a sweep is a future (the runner's code is `async` from the lane down to the hook
//! points) driven by one thread, its *driver*. At a hook point the future does not call the
//! hooks itself: it leaves the point's calls with its [`Relay`] and suspends
//! ([`Relay::calls`]); the driver makes them one after another, outside the future, on its
//! own stack, and polls the future again with their results. No other thread is woken, so a
//! hook call costs about a function call — no hand-off, no spinning core, no futex wake per
//! point.
//!
//! Deadlines stay: the thread that started the lanes watches them ([`run_lanes`]). A few
//! times per deadline it looks at each lane's call in progress; a call seen for longer than
//! its deadline is abandoned — one compare-and-swap on the lane's state word decides between
//! "it returned" and "it hung" —, an isolated hook's process is killed, and a new driver
//! takes the lane over: it records [`Hung`] for that call (the dispatcher quarantines the
//! hook), makes the point's remaining calls and resumes the future, so the run goes on, on
//! another thread. The old
//! driver is left to the hung call; if the call ever returns, the old driver sees it was
//! abandoned and ends without touching anything of the lane.
//!
//! Why the lane futures may borrow the sweep's state although their drivers are detached
//! threads (a hung call must not keep the sweep from ending): [`run_lanes`] returns only once
//! every future has completed and been dropped, and it aborts the process rather than unwind
//! before that. A driver touches a future only while it owns it (taken out of the relay's
//! slot); a driver making a call holds only what the call owns (`Arc`s) and, for `converse`
//! and `probe_state`, a [`SessionRef`] that is usable only while its call is the lane's
//! current one: a new driver waits until no old one is inside the session before it resumes
//! the future.
//!
//! Must not: call a hook from two threads at once (a hung hook is quarantined before its
//! lane goes on), or let a panic of the runner's own code pass silently (it is resumed on
//! the thread that started the lanes once every lane ended).

use std::{
    any::Any,
    future::Future,
    panic::AssertUnwindSafe,
    pin::Pin,
    sync::{
        Arc, Condvar, Mutex,
        atomic::{AtomicU32, AtomicU64, Ordering},
    },
    task::{Context, Poll, Waker},
    time::{Duration, Instant},
};

use serde_json::Value;

use super::{
    ConverseError, Session,
    handoff::lock,
    services::{CallServices, Frame, Outputs},
    snapshot::{CallData, Snapshot},
};
use crate::{
    hooks::registry::{ActiveHook, CallError},
    interrupt::{CUT_HOOK_DEADLINE, Interrupt},
    limits::HookCaps,
};

/// A lane: the runner's code for one worker of the sweep, from its first scenario to its
/// last.
pub type LaneFuture<'env> = Pin<Box<dyn Future<Output = ()> + Send + 'env>>;

/// Set in the state word by the watchdog when it gives up on the call in progress.
const ABANDONED: u64 = 1 << 63;

/// The outcome of a relayed call: what the hook returned and what else it left, or
/// [`Hung`].
pub(super) type Reply = Result<(Result<String, CallError>, Option<Box<Outputs>>), Hung>;

/// A call that overran its deadline and was abandoned.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Hung {
    /// The deadline it overran.
    pub(crate) after: Duration,
}

/// What a point's calls share, owned (an abandoned call holds nothing of the lane's): the
/// hooks, the members, the session, the caps.
pub(super) struct Point {
    /// The dispatcher's hooks: a call names its hook by its slot here.
    pub(super) hooks: Arc<[Arc<ActiveHook>]>,
    pub(super) snapshot: Snapshot,
    pub(super) point: u32,
    /// The point value for hooks that read turn snapshot ids: `point` with the snapshot's.
    pub(super) point_with_turn: u32,
    pub(super) caps: HookCaps,
    pub(super) session: Option<SessionRef>,
    pub(super) converse_timeout: Duration,
}

impl Point {
    /// A point of `point` with members `data`, in `spare`'s place when no abandoned call
    /// holds it (its snapshot emptied by [`Point::empty`]).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn make(
        spare: Option<Arc<Point>>,
        hooks: &Arc<[Arc<ActiveHook>]>,
        data: CallData,
        point: u32,
        point_with_turn: u32,
        caps: HookCaps,
        session: Option<SessionRef>,
        converse_timeout: Duration,
    ) -> Arc<Point> {
        if let Some(mut spare) = spare
            && let Some(p) = Arc::get_mut(&mut spare)
        {
            if !Arc::ptr_eq(&p.hooks, hooks) {
                p.hooks = hooks.clone();
            }
            p.snapshot.data = data;
            p.point = point;
            p.point_with_turn = point_with_turn;
            p.caps = caps;
            p.session = session;
            p.converse_timeout = converse_timeout;
            return spare;
        }
        Arc::new(Point {
            hooks: hooks.clone(),
            snapshot: Snapshot::new(data),
            point,
            point_with_turn,
            caps,
            session,
            converse_timeout,
        })
    }

    /// Lets go of what the point held (its members, the JSON read of them, the session).
    fn empty(&mut self) {
        self.snapshot.empty();
        self.session = None;
    }
}

/// One hook call a lane wants made at a [`Point`]: no `Arc` of the hook per call (the
/// point holds the dispatcher's hooks), so a call costs no reference count.
pub(super) struct Call {
    /// The hook's place in its dispatcher ([`Point::hooks`]), handed back with the reply.
    pub(super) slot: usize,
    pub(super) deadline: Duration,
}

/// A point's calls not made yet.
struct Batch {
    point: Arc<Point>,
    /// Last call first: the next one is popped.
    calls: Vec<Call>,
}

/// What the watchdog needs to know of the call in progress (its hook is the pending
/// point's in `slot`).
#[derive(Clone, Copy)]
struct Current {
    slot: usize,
    deadline: Duration,
}

/// Who may use the run's session: the driver of the lane's current call, and nobody once
/// that call was abandoned.
#[derive(Default)]
struct Gate {
    /// Bumped when a call is abandoned: session refs of older calls stop working.
    generation: AtomicU64,
    /// Callers inside the session right now.
    inside: AtomicU32,
}

/// What a lane's point has and has not done yet.
#[derive(Default)]
pub(super) struct InPoint {
    /// The point's calls not made yet, in order; `None` when the future is not waiting.
    pending: Option<Batch>,
    /// The replies of the point's calls made so far, in order, with each call's slot.
    replies: Vec<(usize, Reply)>,
    /// What the watchdog needs to know of the call in progress.
    current: Option<Current>,
    /// The last point's calls' buffer, empty, for the next point's.
    pub(super) spare_calls: Vec<Call>,
    /// The point whose calls were all made, until its future takes it back with the replies.
    spent: Option<Arc<Point>>,
    /// The last point, emptied, for the next one: a point allocates nothing.
    pub(super) spare_point: Option<Arc<Point>>,
}

/// One lane's relay: where its future waits, the calls it wants made, and their replies.
pub struct Relay {
    future: Mutex<Option<LaneFuture<'static>>>,
    /// The point's calls, their replies and the call in progress: one lock a call.
    point: Mutex<InPoint>,
    /// The call in progress: `(call number << 8) | 1`, 0 when idle, with [`ABANDONED`] once
    /// the watchdog gave up on it.
    state: AtomicU64,
    calls: AtomicU64,
    gate: Arc<Gate>,
    /// Completion of the group of lanes this relay belongs to.
    group: Mutex<Option<Arc<Group>>>,
}

impl Default for Relay {
    fn default() -> Self {
        Relay::new()
    }
}

impl Relay {
    pub fn new() -> Relay {
        Relay {
            future: Mutex::new(None),
            point: Mutex::new(InPoint::default()),
            state: AtomicU64::new(0),
            calls: AtomicU64::new(0),
            gate: Arc::default(),
            group: Mutex::new(None),
        }
    }

    /// Has the lane's driver make `calls`, in order: the future suspends until every reply
    /// is in (one per call, in the same order), and comes back with them and the point.
    pub(super) fn calls(
        &self,
        point: Arc<Point>,
        mut calls: Vec<Call>,
    ) -> impl Future<Output = (Vec<(usize, Reply)>, Option<Arc<Point>>)> + '_ {
        calls.reverse();
        CallsFuture {
            relay: self,
            batch: Some(Batch { point, calls }),
        }
    }

    /// A point to fill and an empty buffer for its calls: the last point's, so a point
    /// allocates nothing (a point is new only when an abandoned call still holds the last).
    pub(super) fn spares(&self) -> (Vec<Call>, Option<Arc<Point>>) {
        let mut p = lock(&self.point);
        (std::mem::take(&mut p.spare_calls), p.spare_point.take())
    }

    /// The run's session, for hook calls relayed while the caller holds `session`: usable
    /// from the driver's call until that call is abandoned.
    pub(crate) fn session_ref(&self, session: &dyn Session) -> SessionRef {
        let ptr: *const (dyn Session + '_) = session;
        // SAFETY: only the lifetime is erased. The pointer is dereferenced only through
        // `SessionRef::with`, by the driver of one of this lane's calls while the future that
        // holds `session` is suspended at that call (so `session` is alive and not in use),
        // and only while the gate's generation is the one of this ref: once the call is
        // abandoned the generation moves on, and the new driver waits for every caller that
        // got in before that to leave before it resumes the future (see `rescue`).
        let ptr: *const (dyn Session + 'static) = unsafe { std::mem::transmute(ptr) };
        SessionRef {
            ptr,
            gate: self.gate.clone(),
            generation: self.gate.generation.load(Ordering::SeqCst),
        }
    }

    /// Hands back the buffer a point's replies came in and the point, emptied, so the next
    /// point allocates nothing. A point an abandoned call still holds is left to it.
    pub(super) fn recycle(&self, mut replies: Vec<(usize, Reply)>, point: Option<Arc<Point>>) {
        replies.clear();
        let point = point.and_then(|mut point| {
            Arc::get_mut(&mut point)?.empty();
            Some(point)
        });
        let mut kept = lock(&self.point);
        if kept.replies.capacity() == 0 {
            kept.replies = replies;
        }
        if point.is_some() {
            kept.spare_point = point;
        }
    }

    /// The relay's point state, for tests of what it keeps between points.
    #[cfg(test)]
    pub(super) fn point_for_test(&self) -> std::sync::MutexGuard<'_, InPoint> {
        lock(&self.point)
    }

    /// Drives `future` to completion on this thread, making its calls here, with no
    /// watchdog: for benchmarks and tests of the relayed path itself.
    #[cfg(any(test, feature = "internals"))]
    pub fn block_on<F: Future<Output = ()> + Send>(&self, future: F) {
        let waker = Waker::noop();
        let mut cx = Context::from_waker(waker);
        let mut future = std::pin::pin!(future);
        loop {
            match future.as_mut().poll(&mut cx) {
                Poll::Ready(()) => return,
                Poll::Pending => {
                    assert!(
                        lock(&self.point).pending.is_some(),
                        "a future driven by a relay suspends only at relayed calls"
                    );
                    assert!(self.make_pending(), "nobody abandons calls without a watchdog");
                }
            }
        }
    }

    /// Makes the pending calls on this thread, one after another, recording each reply;
    /// `false` when the watchdog abandoned one of them meanwhile (the lane is someone
    /// else's now, and so are the calls left).
    fn make_pending(&self) -> bool {
        let mut point: Option<Arc<Point>> = None;
        let mut done = None;
        loop {
            // One lock a call: the last call's reply in, the next call out and made current.
            let call = {
                let mut p = lock(&self.point);
                if let Some(reply) = done.take() {
                    p.replies.push(reply);
                }
                let Some(batch) = p.pending.as_mut() else {
                    return true;
                };
                let Some(call) = batch.calls.pop() else {
                    if let Some(batch) = p.pending.take() {
                        p.spare_calls = batch.calls;
                        p.spent = Some(batch.point);
                    }
                    return true;
                };
                if point.is_none() {
                    point = Some(batch.point.clone());
                }
                p.current = Some(Current {
                    slot: call.slot,
                    deadline: call.deadline,
                });
                call
            };
            let slot = call.slot;
            let point = point.as_deref().expect("taken with the first call");
            match self.make(point, call) {
                Some(reply) => done = Some((slot, reply)),
                None => return false,
            }
        }
    }

    /// Makes one call on this thread, the relay's current one; `None` when the watchdog
    /// abandoned it meanwhile.
    fn make(&self, point: &Point, call: Call) -> Option<Reply> {
        let hook = &point.hooks[call.slot];
        // Only the lane's driver makes calls, one at a time (a new driver starts only after
        // the old one's call was abandoned): a load and a store, not a locked add.
        let n = self.calls.load(Ordering::Relaxed) + 1;
        self.calls.store(n, Ordering::Relaxed);
        let tag = (n << 8) | 1;
        self.state.store(tag, Ordering::Release);
        // Plugins' panics are caught on their side of the boundary; this catches the host's
        // own (an isolated hook's parent side), which must not end the lane's driver.
        let services = CallServices {
            frame: Frame::new(
                &point.snapshot,
                point.point,
                point.caps,
                &hook.name,
                point.session.is_some(),
                hook.reads_sdk_1_0(),
            ),
            session: point.session.as_ref(),
            converse_timeout: point.converse_timeout,
        };
        let value = if hook.reads_turn_ids() {
            point.point_with_turn
        } else {
            point.point
        };
        let result = std::panic::catch_unwind(AssertUnwindSafe(|| {
            hook.call(value, &services)
        }))
        .unwrap_or_else(|p| {
            Err(CallError::Failed(format!(
                "panicked: {}",
                panic_text(&*p)
            )))
        });
        self.state
            .compare_exchange(tag, 0, Ordering::AcqRel, Ordering::Acquire)
            .ok()?;
        Some(Ok((result, services.frame.into_outputs())))
    }

    fn group(&self) -> Option<Arc<Group>> {
        lock(&self.group).clone()
    }
}

/// The future of one point's relayed calls.
struct CallsFuture<'r> {
    relay: &'r Relay,
    batch: Option<Batch>,
}

impl Future for CallsFuture<'_> {
    type Output = (Vec<(usize, Reply)>, Option<Arc<Point>>);

    fn poll(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Self::Output> {
        if let Some(batch) = self.batch.take() {
            let mut p = lock(&self.relay.point);
            p.replies.clear();
            p.pending = Some(batch);
            return Poll::Pending;
        }
        let mut p = lock(&self.relay.point);
        Poll::Ready((std::mem::take(&mut p.replies), p.spent.take()))
    }
}

/// The run's session as a relayed call reaches it (see [`Relay::session_ref`]).
pub(crate) struct SessionRef {
    ptr: *const (dyn Session + 'static),
    gate: Arc<Gate>,
    generation: u64,
}

// SAFETY: the pointee is used only under the gate's protocol (see `Relay::session_ref`): by
// one thread at a time, while the lane's future that owns it is suspended.
unsafe impl Send for SessionRef {}
// SAFETY: as above; `with` admits callers one generation at a time.
unsafe impl Sync for SessionRef {}

impl SessionRef {
    /// Runs `f` on the session, unless the call this ref was made for was abandoned.
    fn with<R>(&self, f: impl FnOnce(&dyn Session) -> R) -> Option<R> {
        self.gate.inside.fetch_add(1, Ordering::SeqCst);
        let result = (self.gate.generation.load(Ordering::SeqCst) == self.generation)
            // SAFETY: see `Relay::session_ref`: the generation is still this call's, and the
            // driver that would resume the future waits for `inside` to drop to 0 first.
            .then(|| f(unsafe { &*self.ptr }));
        self.gate.inside.fetch_sub(1, Ordering::SeqCst);
        result
    }

    pub(crate) fn converse(
        &self,
        hook: &str,
        text: &str,
        timeout: Duration,
    ) -> Result<String, ConverseError> {
        self.with(|s| s.converse(hook, text, timeout))
            .unwrap_or_else(|| Err(ConverseError::Failed("the hook call was abandoned".into())))
    }

    pub(crate) fn probe_state(&self) -> Result<Value, String> {
        self.with(|s| s.probe_state())
            .unwrap_or_else(|| Err("the hook call was abandoned".into()))
    }
}

/// Lanes started together, and how they ended.
struct Group {
    left: Mutex<usize>,
    ended: Condvar,
    panic: Mutex<Option<Box<dyn Any + Send>>>,
}

impl Group {
    fn lane_ended(&self, panic: Option<Box<dyn Any + Send>>) {
        if let Some(p) = panic {
            lock(&self.panic).get_or_insert(p);
        }
        *lock(&self.left) -= 1;
        self.ended.notify_all();
    }
}

/// How the watchdog watches: how often it looks, and the sweep's stop state (once cut, every
/// call gets at most [`CUT_HOOK_DEADLINE`]).
#[derive(Clone)]
pub struct Watch {
    pub tick: Duration,
    pub stop: Option<Arc<Interrupt>>,
}

impl Watch {
    /// Looks a few times per `shortest` deadline, at most every 100 ms, at least every 1 ms.
    pub fn for_deadline(shortest: Duration, stop: Option<Arc<Interrupt>>) -> Watch {
        Watch {
            tick: (shortest / 10).clamp(Duration::from_millis(1), Duration::from_millis(100)),
            stop,
        }
    }
}

/// Aborts the process if dropped armed: the lanes' futures borrow the caller's state, which
/// must not go away while a driver may still poll one.
struct MustFinish;

impl Drop for MustFinish {
    fn drop(&mut self) {
        eprintln!("wt: internal error: the sweep's lanes were left running; aborting");
        std::process::abort();
    }
}

/// Runs `lanes` (each with its own relay), one driver thread each, until every one has
/// ended; with `watch`, this thread watches their calls' deadlines meanwhile. A panic in a
/// lane is resumed here once all of them ended.
pub fn run_lanes<'env>(lanes: Vec<(Arc<Relay>, LaneFuture<'env>)>, watch: Option<Watch>) {
    let group = Arc::new(Group {
        left: Mutex::new(lanes.len()),
        ended: Condvar::new(),
        panic: Mutex::new(None),
    });
    let relays: Vec<Arc<Relay>> = lanes.iter().map(|(r, _)| r.clone()).collect();
    let armed = MustFinish;
    for (relay, future) in lanes {
        // SAFETY: only the lifetime is erased. This function does not return (nor unwind:
        // `armed` aborts) before every lane future has completed and been dropped by its
        // driver, so nothing a future borrows from `'env` is used after `'env` ends. See the
        // module docs for why an abandoned driver never touches a future again.
        let future: LaneFuture<'static> = unsafe { std::mem::transmute(future) };
        *lock(&relay.group) = Some(group.clone());
        *lock(&relay.future) = Some(future);
        let spawned = std::thread::Builder::new()
            .name("wt-lane".into())
            .spawn({
                let relay = relay.clone();
                move || drive(&relay)
            });
        if let Err(e) = spawned {
            // The lane never starts: its runs are taken by the other lanes (a sweep whose
            // every lane fails to start reports its scenarios as not run).
            tracing::warn!("cannot start a lane's thread: {e}");
            let future = lock(&relay.future).take();
            drop(future);
            group.lane_ended(None);
        }
    }
    let mut seen = vec![(0u64, Instant::now()); relays.len()];
    let mut left = lock(&group.left);
    while *left > 0 {
        match &watch {
            None => {
                left = group
                    .ended
                    .wait(left)
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
            }
            Some(w) => {
                left = group
                    .ended
                    .wait_timeout(left, w.tick)
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .0;
                if *left > 0 {
                    drop(left);
                    look(&relays, &mut seen, w);
                    left = lock(&group.left);
                }
            }
        }
    }
    drop(left);
    std::mem::forget(armed);
    for r in &relays {
        *lock(&r.group) = None;
    }
    if let Some(p) = lock(&group.panic).take() {
        std::panic::resume_unwind(p);
    }
}

/// One look at every lane's call in progress: a call seen for longer than its deadline is
/// abandoned and its lane handed to a new driver.
fn look(relays: &[Arc<Relay>], seen: &mut [(u64, Instant)], watch: &Watch) {
    let now = Instant::now();
    let cut = watch.stop.as_ref().is_some_and(|s| s.is_cut());
    for (relay, seen) in relays.iter().zip(seen.iter_mut()) {
        let state = relay.state.load(Ordering::Acquire);
        if state == 0 || state & ABANDONED != 0 || state != seen.0 {
            *seen = (state, now);
            continue;
        }
        let Some(current) = lock(&relay.point).current else {
            continue;
        };
        let deadline = if cut {
            current.deadline.min(CUT_HOOK_DEADLINE)
        } else {
            current.deadline
        };
        if now.saturating_duration_since(seen.1) <= deadline {
            continue;
        }
        if relay
            .state
            .compare_exchange(
                state,
                state | ABANDONED,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_err()
        {
            // It returned in the meantime.
            continue;
        }
        // Sessions refs of the abandoned call stop working from here on.
        relay.gate.generation.fetch_add(1, Ordering::SeqCst);
        // An isolated hook's process dies now; the old driver then sees its call fail and
        // finds it abandoned. (The abandoned driver leaves the pending point as it is, so the
        // call's hook is still there.)
        let hook = lock(&relay.point)
            .pending
            .as_ref()
            .map(|batch| batch.point.hooks[current.slot].clone());
        if let Some(hook) = hook {
            hook.abandon();
        }
        let hung = (current.slot, Hung { after: deadline });
        let spawned = std::thread::Builder::new()
            .name("wt-lane".into())
            .spawn({
                let relay = relay.clone();
                move || rescue(&relay, hung)
            });
        if let Err(e) = spawned {
            // No thread to go on with: this thread takes the lane over itself (deadlines go
            // unwatched until the lane ends, but the run and its hooks' pairing hold).
            tracing::warn!("cannot start a thread to take over a lane: {e}");
            rescue(relay, hung);
        }
    }
}

/// Takes a lane over from a driver whose call (in `slot`) was abandoned, and drives it on.
fn rescue(relay: &Relay, (slot, hung): (usize, Hung)) {
    // A caller let into the session before the call was abandoned finishes first (a
    // converse turn is bounded by its own deadline); none gets in after.
    while relay.gate.inside.load(Ordering::SeqCst) != 0 {
        std::thread::sleep(Duration::from_millis(1));
    }
    lock(&relay.point).replies.push((slot, Err(hung)));
    relay.state.store(0, Ordering::Release);
    // The point's calls after the hung one, then the lane.
    if relay.make_pending() {
        drive(relay);
    }
}

/// Polls the lane's future, making its calls, until it completes or a call of this driver's
/// is abandoned.
fn drive(relay: &Relay) {
    let waker = Waker::noop();
    let mut cx = Context::from_waker(waker);
    loop {
        let Some(mut future) = lock(&relay.future).take() else {
            return;
        };
        match std::panic::catch_unwind(AssertUnwindSafe(|| future.as_mut().poll(&mut cx))) {
            Ok(Poll::Ready(())) => {
                drop(future);
                finish(relay, None);
                return;
            }
            Err(panic) => {
                // Dropping what a panic left may panic again; the first panic is the news.
                let _ = std::panic::catch_unwind(AssertUnwindSafe(move || drop(future)));
                finish(relay, Some(panic));
                return;
            }
            Ok(Poll::Pending) => {
                if lock(&relay.point).pending.is_none() {
                    let _ = std::panic::catch_unwind(AssertUnwindSafe(move || drop(future)));
                    finish(
                        relay,
                        Some(Box::new("a lane suspended without relayed calls")),
                    );
                    return;
                }
                // The future goes back first: if a call is abandoned, the new driver finds it
                // there.
                *lock(&relay.future) = Some(future);
                if !relay.make_pending() {
                    return;
                }
            }
        }
    }
}

fn finish(relay: &Relay, panic: Option<Box<dyn Any + Send>>) {
    if let Some(g) = relay.group() {
        g.lane_ended(panic);
    }
}

fn panic_text(panic: &(dyn Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".to_owned())
}
