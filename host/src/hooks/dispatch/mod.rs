//! Calling active hooks at a point, under deadlines, without letting them hurt the run.
//!
//! Each dispatcher (one per lane of a sweep) has a worker thread. A point's calls go to the
//! worker in one hand-off and the dispatching thread waits, watching each call's deadline and
//! serving `ctx.converse()` and `ctx.probe_state()` on the run's session, which it owns. A
//! call that overruns its deadline is abandoned with its worker (an isolated hook's process is
//! killed), the hook is quarantined for the rest of the invocation, and the dispatch goes on
//! with the next hook on a new worker. The context a hook sees is an owned snapshot (`Arc`s),
//! so an abandoned call holds no borrow of the runner's state. A point nobody declared costs
//! one branch.
//!
//! What a dispatch must never do: change a verdict, or let a hook panic/err/hang stop the
//! run. Failures become warnings (`hook:<name>: …`); after [`FAILURE_LATCH`] consecutive
//! failures a hook is quarantined with one summary warning.
//!
//! Where things live: [`snapshot`] (what a hook sees), [`services`] (the host side of the
//! context), [`handoff`] (the worker thread, and the one decision per call between "it
//! returned" and "it was abandoned"), and this module (dispatch order, deadlines, latch and
//! quarantine).

mod handoff;
mod services;
mod snapshot;

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Duration,
};

use serde_json::Value;
use windtunnel_abi::point;

pub use snapshot::CallData;

use handoff::{CallRecord, Job, Worker};
use services::lock;
use snapshot::Snapshot;

use crate::{
    deadlines::{Deadlines, human},
    hooks::registry::ActiveHook,
    interrupt::{CUT_HOOK_DEADLINE, Interrupt},
    limits::{HookCaps, cut_text},
};

/// Whether the machine has a core no lane is using. Set by the runner for each sweep; a lane
/// polls briefly for its worker, and an isolated hook's parent and child for each other's
/// frames, only then.
static SPARE_CORE: AtomicBool = AtomicBool::new(false);

/// Says whether there is a core to spare for waiting on another thread or process.
pub fn set_spare_core(spare: bool) {
    SPARE_CORE.store(spare, Ordering::Relaxed);
}

/// Whether this sweep found a core to spare (see [`set_spare_core`]).
pub fn spare_core() -> bool {
    SPARE_CORE.load(Ordering::Relaxed)
}

/// Consecutive failures after which a hook is quarantined.
pub const FAILURE_LATCH: u32 = 3;

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

/// One hand-off to the worker: which hooks, at which point, in which order.
struct Batch<'a> {
    point: u32,
    /// `point` with the turn snapshot's id, for hooks that read turn ids.
    point_with_turn: u32,
    order: u64,
    reverse: bool,
    snapshot: &'a Arc<Snapshot>,
    session: Option<&'a dyn Session>,
}

struct Health {
    consecutive: u32,
    first_error: Option<String>,
}

/// The health of each hook for the whole invocation, shared by every lane's dispatcher: a
/// hook that hangs or keeps failing in one lane is quarantined in all of them.
struct Ledger {
    health: Mutex<Vec<Health>>,
    /// Bitmask of hooks whose last call failed (their health has a count to reset).
    failing: AtomicU64,
    /// Bitmask of quarantined hooks.
    quarantined: AtomicU64,
}

impl Ledger {
    fn quarantine(&self, slot: usize) -> bool {
        let bit = 1u64 << slot;
        self.quarantined.fetch_or(bit, Ordering::AcqRel) & bit == 0
    }
}

/// The active hooks of one invocation and everything needed to call them safely.
pub struct Dispatcher {
    hooks: Arc<[Arc<ActiveHook>]>,
    /// Per point, the bitmask of hooks that declared it.
    by_point: [u64; 10],
    /// The hooks that live in processes of their own.
    isolated: u64,
    deadlines: Deadlines,
    caps: HookCaps,
    /// The values of the hooks' secret settings (`WT_<HOOK>_API_KEY`, …) and the agent's
    /// secrets: never let through in a warning or an artifact.
    redactor: Arc<crate::secrets::Redactor>,
    ledger: Arc<Ledger>,
    /// Once cut, hook calls get at most [`CUT_HOOK_DEADLINE`].
    stop: Option<Arc<Interrupt>>,
    /// Top-level dispatches take turns: one hook instance is never called from two threads
    /// at once. A dispatch nested in one (on the thread that holds this) does not wait.
    serial: Mutex<()>,
    serial_owner: Mutex<Option<std::thread::ThreadId>>,
    /// The idle worker; a dispatch takes it out while it runs, so a dispatch nested in a
    /// converse (a guard consulted about a converse turn) gets a worker of its own.
    worker: Mutex<Option<Worker>>,
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
            redactor.extend(&crate::hooks::registry::hook_secrets(&h.name));
        }
        let isolated = hooks
            .iter()
            .enumerate()
            .filter(|(_, h)| h.is_isolated())
            .fold(0u64, |m, (i, _)| m | (1 << i));
        Dispatcher {
            hooks,
            by_point,
            isolated,
            deadlines,
            caps: HookCaps::default(),
            redactor: Arc::new(redactor),
            ledger: Arc::new(Ledger {
                health: Mutex::new(health),
                failing: AtomicU64::new(0),
                quarantined: AtomicU64::new(0),
            }),
            stop: None,
            serial: Mutex::new(()),
            serial_owner: Mutex::new(None),
            worker: Mutex::new(None),
        }
    }

    /// A dispatcher for another lane: fresh instances of the same hooks (each built with
    /// its `Default`), a worker of its own, and the same deadlines, caps and ledger — a hook
    /// quarantined in one lane is quarantined in all. Lanes never wait for each other.
    pub fn for_lane(&self) -> Result<Dispatcher, String> {
        let hooks = self
            .hooks
            .iter()
            .map(|h| {
                h.another()
                    .map(Arc::new)
                    .map_err(|e| format!("hook `{}`: another instance: {e}", h.name))
            })
            .collect::<Result<Arc<[_]>, _>>()?;
        Ok(Dispatcher {
            hooks,
            by_point: self.by_point,
            isolated: self.isolated,
            deadlines: self.deadlines,
            caps: self.caps,
            redactor: self.redactor.clone(),
            ledger: self.ledger.clone(),
            stop: self.stop.clone(),
            serial: Mutex::new(()),
            serial_owner: Mutex::new(None),
            worker: Mutex::new(None),
        })
    }

    /// Caps on what hooks hand back (artifact size, warning length).
    pub fn with_caps(mut self, caps: HookCaps) -> Dispatcher {
        self.caps = caps;
        self
    }

    /// More secrets to keep out of every warning and artifact: the agent's API key, its
    /// endpoint passwords — a hook may read them from wherever it finds them.
    pub fn with_secrets(mut self, secrets: &crate::secrets::Redactor) -> Dispatcher {
        std::sync::Arc::make_mut(&mut self.redactor).extend(secrets);
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
        self.ledger.quarantined.load(Ordering::Acquire)
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
        let point_with_turn = match data.turn_id {
            0 => point,
            id => windtunnel_sdk::turn::ids::with(point, id),
        };
        let snapshot = Arc::new(Snapshot::new(data));
        while order != 0 {
            let batch = Batch {
                point,
                point_with_turn,
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
            point_with_turn,
            order,
            reverse,
            snapshot,
            session,
        } = *batch;
        let idle = lock(&self.worker).take();
        let worker = match idle.map_or_else(|| Worker::spawn(self.hooks.clone()), Ok) {
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
        };
        let job = Job {
            point,
            point_with_turn,
            order,
            reverse,
            data: snapshot.clone(),
            has_session: session.is_some(),
            caps: self.caps,
        };
        let hung = worker.run(
            job,
            || self.deadline(point),
            session,
            self.deadlines.converse,
        );
        #[cfg(test)]
        if hung.is_some() {
            // Widens the window between "it hung" and retiring the worker, where a call that
            // returns late must not go on to the next hook.
            std::thread::sleep(Duration::from_micros(
                tests::WIDEN_ABANDON_WINDOW_US.load(Ordering::Relaxed),
            ));
        }
        let (records, quiet_ok) = worker.take_records();
        self.quiet_ok(quiet_ok, out);
        for r in records {
            self.absorb(r, out);
        }
        match hung {
            None => {
                let mut idle = lock(&self.worker);
                // A nested dispatch may have left its worker there; this one then retires.
                if idle.is_none() {
                    *idle = Some(worker);
                }
                Ok(())
            }
            Some(slot) => {
                drop(worker);
                // An isolated hook's process is killed now; its worker, already told the
                // call was abandoned, reaps it and calls nothing more.
                self.hooks[slot].abandon();
                self.timed_out(slot, point, self.deadline(point), out);
                Err(slot)
            }
        }
    }

    /// Counts the hooks in `bits` as having returned `Ok` with nothing to record.
    fn quiet_ok(&self, bits: u64, out: &mut DispatchOutput) {
        if bits == 0 {
            return;
        }
        out.ok |= bits;
        let failing = self.ledger.failing.load(Ordering::Acquire) & bits;
        if failing != 0 {
            self.ledger.failing.fetch_and(!failing, Ordering::AcqRel);
            for (slot, health) in lock(&self.ledger.health).iter_mut().enumerate() {
                if failing & (1 << slot) != 0 {
                    health.consecutive = 0;
                    health.first_error = None;
                }
            }
        }
    }

    /// Records that the hook in `slot` overran its deadline `after` at `point`, and
    /// quarantines it.
    fn timed_out(&self, slot: usize, point: u32, after: Duration, out: &mut DispatchOutput) {
        let name = &self.hooks[slot].name;
        self.ledger.quarantine(slot);
        let msg = format!(
            "hook:{name}: timed out after {} in {}; abandoned and quarantined for the rest of this invocation",
            human(after),
            point::name(point)
        );
        tracing::debug!("{msg}");
        out.warnings.push(msg);
        out.timed_out.push(slot);
    }

    fn absorb(&self, mut r: CallRecord, out: &mut DispatchOutput) {
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
            if r.conversed
                && let Value::Object(map) = &mut payload
            {
                map.insert("tools_disabled".into(), Value::Bool(false));
                map.insert("timed_out".into(), Value::Bool(r.converse_timed_out));
            }
            out.artifacts.push(Artifact {
                hook: name.clone(),
                label,
                payload,
            });
        }
        let mut healths = lock(&self.ledger.health);
        let health = &mut healths[r.slot];
        match &r.result {
            Ok(_) => {
                out.ok |= 1 << r.slot;
                health.consecutive = 0;
                health.first_error = None;
                self.ledger
                    .failing
                    .fetch_and(!(1 << r.slot), Ordering::AcqRel);
            }
            Err(e) if r.fatal => {
                if self.ledger.quarantine(r.slot) {
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
                self.ledger.failing.fetch_or(1 << r.slot, Ordering::AcqRel);
                let mut warning = format!("hook:{name}: {e}");
                cut_text(&mut warning, self.caps.warning_bytes);
                tracing::debug!("{warning}");
                out.warnings.push(warning);
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
                if let Some(why) = why.filter(|_| self.ledger.quarantine(r.slot)) {
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

#[cfg(test)]
mod tests {
    use std::sync::Mutex as StdMutex;
    use std::sync::atomic::AtomicU64;
    use std::time::Instant;

    use windtunnel_sdk::{Context, Hook, Result as HookResult, hook};

    use super::*;
    use crate::hooks::registry::BuiltIn;

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

    #[test]
    fn a_point_lets_go_of_its_members_before_it_returns() {
        let d = Dispatcher::new(vec![active::<OrderA>()], deadlines(5000));
        let run_id: Arc<str> = Arc::from("let-go");
        for _ in 0..3 {
            let data = CallData {
                run_id: Some(run_id.clone()),
                ..CallData::default()
            };
            let out = d.dispatch(point::ON_RUN_START, data, None);
            assert_eq!(out.ok, 1);
            // The runner takes its trace back with `Arc::unwrap_or_clone` right after a
            // point: nothing of the point may hold a member any more.
            assert_eq!(Arc::strong_count(&run_id), 1, "a member outlived its point");
        }
    }

    /// Reads the agent's state twice (each read is slow).
    #[derive(Default)]
    struct ProbesTwice;
    #[hook]
    impl Hook for ProbesTwice {
        const NAME: &'static str = "probes-twice";
        fn on_run_start(&mut self, ctx: &Context<'_>) -> HookResult {
            let _first = ctx.probe_state();
            let second = ctx.probe_state();
            SECOND_PROBE
                .lock()
                .unwrap()
                .push(second.map(|v| v.to_string()).map_err(|e| e.to_string()));
            Ok(())
        }
    }
    static SECOND_PROBE: StdMutex<Vec<Result<String, String>>> = StdMutex::new(Vec::new());

    /// A session whose state reads take 400 ms, counting them and whether one is in
    /// progress.
    #[derive(Default)]
    struct SlowSession {
        reads: AtomicU64,
        busy: std::sync::atomic::AtomicBool,
    }
    impl Session for SlowSession {
        fn converse(&self, _: &str, _: &str, _: Duration) -> Result<String, ConverseError> {
            Err(ConverseError::Failed("not here".into()))
        }
        fn probe_state(&self) -> Result<Value, String> {
            self.busy.store(true, Ordering::SeqCst);
            self.reads.fetch_add(1, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(400));
            self.busy.store(false, Ordering::SeqCst);
            Ok(serde_json::json!({"memory": []}))
        }
    }

    #[test]
    fn a_dispatch_goes_on_only_once_an_abandoned_call_let_go_of_the_session() {
        // The hook's deadline passes during its first (slow) state read. The dispatch returns
        // only after that read returned — the session serves one caller at a time —, and the
        // abandoned call's second read is refused: the session saw one.
        let d = Dispatcher::new(vec![active::<ProbesTwice>()], deadlines(150));
        let session = SlowSession::default();
        let out = d.dispatch(point::ON_RUN_START, data("slow"), Some(&session));
        let busy = session.busy.load(Ordering::SeqCst);
        assert!(!busy, "the lane went on while the abandoned call was inside the session");
        assert_eq!(out.timed_out, [0], "{:?}", out.warnings);
        // Let the abandoned call try its second read.
        for _ in 0..200 {
            if !SECOND_PROBE.lock().unwrap().is_empty() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let second = SECOND_PROBE.lock().unwrap().clone();
        assert_eq!(second, [Err("the hook call was abandoned".to_owned())]);
        assert_eq!(session.reads.load(Ordering::SeqCst), 1);
    }

    static SEEN_TURNS: StdMutex<Vec<String>> = StdMutex::new(Vec::new());

    macro_rules! turn_recorder {
        ($ty:ident, $name:literal) => {
            #[derive(Default)]
            struct $ty;
            #[hook]
            impl Hook for $ty {
                const NAME: &'static str = $name;
                fn turn_begin(
                    &mut self,
                    call: &windtunnel_sdk::TurnCall,
                    _: &Context<'_>,
                ) -> HookResult {
                    SEEN_TURNS.lock().unwrap().push(format!(
                        "{}:{}:{}:{}",
                        $name, call.run_id, call.turn, call.input
                    ));
                    Ok(())
                }
                fn turn_finish(
                    &mut self,
                    result: &windtunnel_sdk::TurnResult,
                    _: &Context<'_>,
                ) -> HookResult {
                    SEEN_TURNS.lock().unwrap().push(format!(
                        "{}:finish:{}:{:?}",
                        $name, result.call.input, result.outcome
                    ));
                    Ok(())
                }
            }
        };
    }
    turn_recorder!(TurnsA, "turns-a");
    turn_recorder!(TurnsB, "turns-b");

    #[test]
    fn hooks_of_one_library_read_each_turn_once_and_never_a_stale_one() {
        // Both hooks live in this binary (one "library", one thread's cache): each turn
        // snapshot id is read once and the next turn, with a new id, is read again — also
        // when its text is the same as the last one's, and without ids at all.
        use windtunnel_sdk::{Outcome, TurnCall, TurnResult};
        let d = Dispatcher::new(vec![active::<TurnsA>(), active::<TurnsB>()], deadlines(5000));
        let call = |run: &str, turn: u32, input: &str| Arc::new(TurnCall::new(run, turn, input));
        let begins = [
            (call("ids-1", 0, "first"), 901),
            (call("ids-1", 1, "second"), 902),
            (call("ids-2", 0, "first"), 903),
            (call("ids-2", 0, "first"), 0),
            (call("ids-3", 0, "third"), 0),
        ];
        let finish = Arc::new(TurnResult::new((*begins[1].0).clone(), Outcome::Done));
        {
            for (c, id) in &begins {
                let data = CallData {
                    turn_call: Some(c.clone()),
                    turn_id: *id,
                    ..CallData::default()
                };
                let out = d.dispatch_to(u64::MAX, false, point::TURN_BEGIN, data, None);
                assert_eq!(out.ok, 0b11, "{:?}", out.warnings);
            }
            let data = CallData {
                turn_result: Some(finish.clone()),
                turn_id: 904,
                ..CallData::default()
            };
            d.dispatch_to(u64::MAX, true, point::TURN_FINISH, data, None);
            // A finish whose tail names the call this thread read at a begin reads only the
            // result's own fields: its call is that begin's (here told apart by its input,
            // which a real finish never changes). A tail naming another begin's call than
            // the one held is read whole.
            let fifth = call("ids-5", 0, "fifth");
            let begin = |c: &Arc<TurnCall>, id| CallData {
                turn_call: Some(c.clone()),
                turn_id: id,
                ..CallData::default()
            };
            let finish = |input: &str, outcome, begun_as, id| CallData {
                turn_result: Some(Arc::new(TurnResult::new(
                    (*call("ids-5", 0, input)).clone(),
                    outcome,
                ))),
                turn_id: id,
                begun_as,
                ..CallData::default()
            };
            let steps = [
                (point::TURN_BEGIN, begin(&fifth, 905)),
                (point::TURN_FINISH, finish("not-read", Outcome::Done, 905, 906)),
                (point::TURN_BEGIN, begin(&call("ids-6", 0, "sixth"), 907)),
                (point::TURN_FINISH, finish("fifth", Outcome::Failed, 905, 908)),
                (point::TURN_FINISH, finish("fifth", Outcome::Interrupted, 0, 909)),
            ];
            for (p, data) in steps {
                let out = d.dispatch_to(u64::MAX, p == point::TURN_FINISH, p, data, None);
                assert_eq!(out.ok, 0b11, "{:?}", out.warnings);
            }
        }
        let seen: Vec<String> = SEEN_TURNS
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains(":ids-") || l.contains(":finish:"))
            .cloned()
            .collect();
        assert_eq!(
            seen,
            [
                "turns-a:ids-1:0:first",
                "turns-b:ids-1:0:first",
                "turns-a:ids-1:1:second",
                "turns-b:ids-1:1:second",
                "turns-a:ids-2:0:first",
                "turns-b:ids-2:0:first",
                "turns-a:ids-2:0:first",
                "turns-b:ids-2:0:first",
                "turns-a:ids-3:0:third",
                "turns-b:ids-3:0:third",
                "turns-b:finish:second:Done",
                "turns-a:finish:second:Done",
                "turns-a:ids-5:0:fifth",
                "turns-b:ids-5:0:fifth",
                "turns-b:finish:fifth:Done",
                "turns-a:finish:fifth:Done",
                "turns-a:ids-6:0:sixth",
                "turns-b:ids-6:0:sixth",
                "turns-b:finish:fifth:Failed",
                "turns-a:finish:fifth:Failed",
                "turns-b:finish:fifth:Interrupted",
                "turns-a:finish:fifth:Interrupted",
            ]
        );
    }
}
