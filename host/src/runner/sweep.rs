//! The sweep as a pool of lanes.
//!
//! `--jobs N` worker threads each act as one *lane* at a time: a slot holding one agent
//! session of one scenario. A worker joins the first scenario (in pack order) that still has
//! runs to start and room for another lane — as many as the runtime allows at once
//! ([`Runtime::max_lanes`]), never more than the runs left —, provisions its own agent
//! handle, and takes that scenario's runs one at a time, each from the shared next index, so
//! run `#k` is the same run whatever the lane count. When no run is left it tears its
//! handle down and looks for another scenario.
//!
//! Per scenario: the first worker to reach it sets it up (provision, preconditions,
//! `on_provisioned`) while later ones wait; the last lane to close fires `on_scenario_end`.
//! Each worker has its own observer (its own hook instances), so lanes never wait for each
//! other's hooks.
//!
//! With `--until-decided`, a scenario has at most as many runs in flight as its next decision
//! could need ([`crate::report::gate::runs_to_decide`]): a run started beyond them would only
//! finish after a decision the first ones may bring, and be spent for nothing. A lane with no
//! run it may start leaves for a scenario that has room, or waits for the next run to end.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, PoisonError};

use windtunnel_model::Scenario;

use super::lane::Lane;
use super::scenario::{Handle, ScenarioRunner, Tally, Unable};
use super::{RunConfig, ScenarioOutcome, Shard, lock};
use crate::interrupt::Interrupt;
use crate::score::Aggregator;
use crate::store::StoreError;

/// Where a scenario is in its life.
enum Phase {
    /// No worker has reached it.
    Waiting,
    /// A worker is provisioning it.
    SettingUp,
    /// Runs are being taken; `lanes` lanes are open.
    Running { lanes: usize },
    /// Its outcome is known.
    Done,
}

/// A scenario's shared state across its lanes.
pub(super) struct ScenarioState<'a> {
    pub runner: ScenarioRunner<'a>,
    /// The runs this sweep (or shard) makes of the scenario, drawn as lanes take them.
    plan: Plan,
    /// Most lanes at once.
    cap: usize,
    phase: Mutex<Phase>,
    changed: Condvar,
    pub tally: Tally,
    outcome: Mutex<Option<Result<ScenarioOutcome, StoreError>>>,
    /// `--until-decided`: the baseline, the levels, and the tally so far.
    sequential: Option<SeqTally>,
    /// The sweep's: beats when a run of this scenario ends, a lane closes, it is settled.
    pulse: &'a Pulse,
}

/// A scenario's sequential comparison with its baseline.
pub(super) struct SeqTally {
    pub base: (u64, u64),
    /// α/2 / m and α/2 (see [`crate::report::gate::look`]).
    pub strict: f64,
    pub lenient: f64,
    pub seen: Mutex<Seen>,
    /// Runs that were in flight when the scenario was decided, finished after it (none, as
    /// long as no more runs are in flight than [`Seen::need`]).
    pub late: std::sync::atomic::AtomicU64,
}

/// Where a scenario's sequential comparison stands.
pub(super) struct Seen {
    pub passed: u64,
    pub runs: u64,
    pub look: crate::report::gate::Look,
    /// Runs started and not yet looked at.
    in_flight: u64,
    /// The fewest further runs the next decision needs ([`crate::report::gate::runs_to_decide`]).
    need: u64,
}

impl Default for Seen {
    fn default() -> Seen {
        Seen {
            passed: 0,
            runs: 0,
            look: crate::report::gate::Look::Continue,
            in_flight: 0,
            need: u64::MAX,
        }
    }
}

impl SeqTally {
    fn need(&self, seen: &Seen, max_runs: u64) -> u64 {
        crate::report::gate::runs_to_decide(
            self.base,
            seen.passed,
            seen.runs,
            max_runs,
            self.strict,
            self.lenient,
        )
    }
}

/// What a lane may do next on its scenario.
enum Take {
    Run(u32),
    /// Every run the next decision could need is in flight: wait for one to end.
    Wait,
    /// No further run of the scenario starts.
    Close,
}

/// Beats its pulse when dropped; bound before a lock guard, it beats once that is released.
struct Beat<'p>(&'p Pulse);

impl Drop for Beat<'_> {
    fn drop(&mut self) {
        self.0.beat();
    }
}

/// Wakes workers that wait for a change in any scenario: a run ended, a lane closed.
#[derive(Default)]
pub(super) struct Pulse {
    beats: Mutex<u64>,
    changed: Condvar,
}

impl Pulse {
    fn now(&self) -> u64 {
        *lock(&self.beats)
    }

    fn beat(&self) {
        *lock(&self.beats) += 1;
        self.changed.notify_all();
    }

    /// Returns once a beat came after `seen` (at once if one did already).
    fn wait_past(&self, seen: u64) {
        let mut beats = lock(&self.beats);
        while *beats == seen {
            beats = self
                .changed
                .wait(beats)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }
}

impl<'a> ScenarioState<'a> {
    pub(super) fn new(
        runner: ScenarioRunner<'a>,
        plan: Plan,
        cap: usize,
        sequential: Option<SeqTally>,
        pulse: &'a Pulse,
    ) -> Self {
        // A resumed sweep's scenario counts its committed runs first.
        let agg = runner
            .cfg
            .resume
            .as_ref()
            .and_then(|r| r.counted(&runner.scenario.id))
            .unwrap_or_else(|| Aggregator::new(&runner.scenario.id));
        if let Some(seq) = &sequential {
            let mut seen = lock(&seq.seen);
            seen.need = seq.need(&seen, u64::from(plan.count));
        }
        ScenarioState {
            runner,
            plan,
            cap: cap.max(1),
            phase: Mutex::new(Phase::Waiting),
            changed: Condvar::new(),
            tally: Tally::new(agg),
            outcome: Mutex::new(None),
            sequential,
            pulse,
        }
    }

    /// With `--until-decided`, counts a run that ended (`passed`: its verdict, `None` when
    /// its files could not be written) and looks: a decided scenario starts no further run.
    /// The look is journaled.
    fn ran(&self, passed: Option<bool>) {
        use crate::report::gate::Look;
        let Some(seq) = &self.sequential else {
            return;
        };
        let _beat = Beat(self.pulse);
        let mut seen = lock(&seq.seen);
        seen.in_flight = seen.in_flight.saturating_sub(1);
        let Some(passed) = passed else {
            return;
        };
        if matches!(seen.look, Look::Regressed | Look::NotRegressed) {
            // Decided already: a run that was in flight cannot change it, and is counted
            // apart (it is written and reported like any other).
            seq.late.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return;
        }
        seen.passed += u64::from(passed);
        seen.runs += 1;
        let max_runs = u64::from(self.plan.count);
        let (look, p_value) = crate::report::gate::look(
            seq.base,
            seen.passed,
            seen.runs,
            max_runs,
            seq.strict,
            seq.lenient,
        );
        seen.look = look;
        seen.need = seq.need(&seen, max_runs);
        self.runner.publish_scenario(crate::events::Event::Look {
            runs: seen.runs,
            passed: seen.passed,
            max_runs,
            p_value,
            decision: look.as_str().to_owned(),
        });
        if look != Look::Continue {
            self.plan.stop();
        }
    }

    /// Where the sequential comparison stood at the end.
    pub(super) fn sequential_outcome(&self) -> Option<super::SequentialOutcome> {
        let seq = self.sequential.as_ref()?;
        let seen = lock(&seq.seen);
        Some(super::SequentialOutcome {
            decision: seen.look.as_str(),
            runs: seen.runs,
            passed: seen.passed,
            late: seq.late.load(std::sync::atomic::Ordering::Relaxed),
            planned: u64::from(self.plan.count),
        })
    }

    /// How many runs this sweep runs of the scenario.
    pub(super) fn run_count(&self) -> u32 {
        self.plan.count
    }

    fn runs_left(&self) -> usize {
        self.plan.left() as usize
    }

    /// Whether no further run of this scenario will start.
    fn closed(&self, cfg: &RunConfig) -> bool {
        self.runs_left() == 0 || cfg.cancelled() || lock(&self.tally.write_failure).is_some()
    }

    /// The next run index for a lane, a wait, or the end of the lane.
    fn take_run(&self, cfg: &RunConfig) -> Take {
        if cfg.cancelled() || lock(&self.tally.write_failure).is_some() {
            return Take::Close;
        }
        let id = &self.runner.scenario.id;
        let Some(seq) = &self.sequential else {
            return self.plan.take(id).map_or(Take::Close, Take::Run);
        };
        let mut seen = lock(&seq.seen);
        if seen.look != crate::report::gate::Look::Continue {
            return Take::Close;
        }
        if seen.in_flight >= seen.need {
            return Take::Wait;
        }
        match self.plan.take(id) {
            Some(k) => {
                seen.in_flight += 1;
                Take::Run(k)
            }
            None => Take::Close,
        }
    }

    /// Whether another lane could take a run of this scenario now: with `--until-decided`,
    /// only while it has fewer lanes than runs its next decision could need.
    fn wants_lanes(&self, lanes: usize) -> bool {
        self.sequential
            .as_ref()
            .is_none_or(|seq| (lanes as u64) < lock(&seq.seen).need)
    }

    /// Records the scenario's result.
    fn settle(&self, outcome: Result<ScenarioOutcome, StoreError>) {
        *lock(&self.outcome) = Some(outcome);
        *lock(&self.phase) = Phase::Done;
        self.changed.notify_all();
        self.pulse.beat();
    }

    /// The scenario's result, once settled; a scenario no worker reached (the sweep was
    /// stopped first) is settled here as not run.
    pub(super) fn into_outcome(self) -> Result<ScenarioOutcome, StoreError> {
        if let Some(outcome) = lock(&self.outcome).take() {
            return outcome;
        }
        self.runner.never_reached(self.run_count())
    }
}

/// What a worker does: join scenarios, run their runs, leave, until nothing is left.
pub(super) fn work(lane: &Lane, states: &[ScenarioState<'_>], cfg: &RunConfig) {
    let Some(pulse) = states.first().map(|s| s.pulse) else {
        return;
    };
    loop {
        let beat = pulse.now();
        let Some((state, handle)) = join(lane, states, cfg) else {
            // With `--until-decided` a scenario whose runs in flight are all its decision
            // could need has no room now, but may have after its next look.
            if !may_get_room(states, cfg) {
                return;
            }
            pulse.wait_past(beat);
            continue;
        };
        let runner = super::run::RunRunner::new(&state.runner, &handle, lane);
        loop {
            let beat = pulse.now();
            let index = match state.take_run(cfg) {
                Take::Run(index) => index,
                Take::Close => break,
                Take::Wait => {
                    // Another lane of this scenario has a run in flight, so it stays open
                    // without this one.
                    if states
                        .iter()
                        .any(|s| !std::ptr::eq(s, state) && has_room(s, cfg))
                    {
                        break;
                    }
                    pulse.wait_past(beat);
                    continue;
                }
            };
            match runner.run(index, &state.tally.agg) {
                Ok(score) => {
                    state.ran(Some(score.verdict == windtunnel_model::Verdict::Pass));
                    if let Some(p) = super::problem(&score) {
                        let mut first = lock(&state.tally.first_problem);
                        if first.as_ref().is_none_or(|(i, _)| index < *i) {
                            *first = Some((index, p));
                        }
                    }
                }
                Err(e) => {
                    // Files cannot be written: stop this scenario, but keep hooks paired.
                    lock(&state.tally.write_failure).get_or_insert(e);
                    state.ran(None);
                }
            }
        }
        leave(lane, state, handle, cfg);
    }
}

/// Whether a lane joining `state` now would find a run to take (or the scenario to set up).
fn has_room(state: &ScenarioState<'_>, cfg: &RunConfig) -> bool {
    match &*lock(&state.phase) {
        Phase::Waiting => !cfg.cancelled(),
        Phase::Running { lanes } => {
            !state.closed(cfg)
                && *lanes < state.cap
                && *lanes < state.runs_left()
                && state.wants_lanes(*lanes)
        }
        Phase::SettingUp | Phase::Done => false,
    }
}

/// Whether a worker that found no scenario to join may find one later: a sequential
/// scenario still open may get room after its next look.
fn may_get_room(states: &[ScenarioState<'_>], cfg: &RunConfig) -> bool {
    !cfg.cancelled()
        && states.iter().any(|s| {
            s.sequential.is_some()
                && matches!(*lock(&s.phase), Phase::Running { .. } | Phase::SettingUp)
                && !s.closed(cfg)
        })
}

/// Finds a scenario for the lane and opens the lane on it, with the lane's own handle.
fn join<'s, 'a>(
    lane: &Lane,
    states: &'s [ScenarioState<'a>],
    cfg: &RunConfig,
) -> Option<(&'s ScenarioState<'a>, Handle)> {
    if cfg.cancelled() {
        return None;
    }
    // With `--until-decided`, a lane first takes a scenario no lane has yet: a second lane
    // on a scenario starts runs that its decision, when it comes, may not need (they are in
    // flight already), while a lane on a scenario of its own wastes nothing. Only when every
    // scenario has a lane do lanes double up.
    let sequential = states.iter().any(|s| s.sequential.is_some());
    for breadth_first in [sequential, false] {
        if let Some(joined) = join_one(lane, states, cfg, breadth_first) {
            return Some(joined);
        }
    }
    None
}

/// One pass of [`join`]: `breadth_first` passes by scenarios that have a lane already.
fn join_one<'s, 'a>(
    lane: &Lane,
    states: &'s [ScenarioState<'a>],
    cfg: &RunConfig,
    breadth_first: bool,
) -> Option<(&'s ScenarioState<'a>, Handle)> {
    for state in states {
        let mut phase = lock(&state.phase);
        // A scenario being set up gets its later lanes once it is ready.
        while matches!(*phase, Phase::SettingUp) {
            phase = state
                .changed
                .wait(phase)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        match &mut *phase {
            Phase::Done => continue,
            Phase::Waiting => {
                *phase = Phase::SettingUp;
                drop(phase);
                match state
                    .runner
                    .setup(lane.observer.as_ref(), state.run_count(), &state.tally)
                {
                    Ok(handle) => {
                        *lock(&state.phase) = Phase::Running { lanes: 1 };
                        state.changed.notify_all();
                        return Some((state, handle));
                    }
                    Err(Unable { why, warnings }) => {
                        let runs = state.run_count();
                        let agg = Aggregator::new(&state.runner.scenario.id);
                        state.settle(state.runner.unable(agg, runs, why, warnings));
                        continue;
                    }
                }
            }
            Phase::Running { lanes } => {
                if breadth_first
                    || state.closed(cfg)
                    || *lanes >= state.cap
                    || *lanes >= state.runs_left()
                    || !state.wants_lanes(*lanes)
                {
                    continue;
                }
                *lanes += 1;
                let this_lane = *lanes - 1;
                drop(phase);
                match state.runner.provision_lane(this_lane) {
                    Ok(handle) => return Some((state, handle)),
                    Err(w) => {
                        // This scenario goes on with the lanes it has.
                        state.runner.warn(&w);
                        lock(&state.tally.warnings).push(w);
                        close_lane(lane, state, cfg);
                        continue;
                    }
                }
            }
            Phase::SettingUp => unreachable!("waited above"),
        }
    }
    None
}

/// Tears the lane's handle down and closes the lane.
fn leave(lane: &Lane, state: &ScenarioState<'_>, handle: Handle, cfg: &RunConfig) {
    let mut warnings = Vec::new();
    state.runner.teardown(&handle, &mut warnings);
    lock(&state.tally.warnings).extend(warnings);
    close_lane(lane, state, cfg);
}

/// Closes one lane; the last lane of a scenario that will start no more runs ends it.
fn close_lane(lane: &Lane, state: &ScenarioState<'_>, cfg: &RunConfig) {
    let last = {
        let mut phase = lock(&state.phase);
        let Phase::Running { lanes } = &mut *phase else {
            return;
        };
        *lanes -= 1;
        *lanes == 0 && state.closed(cfg)
    };
    state.pulse.beat();
    if last {
        state.settle(state.runner.finish(
            lane.observer.as_ref(),
            &state.tally,
            state.sequential_outcome(),
        ));
    }
}

/// The runs of one scenario a sweep makes, planned lazily.
///
/// Nothing is held per planned run: a lane draws the next run index from a shared counter
/// when it is ready for a run, so `--runs 1000000000` costs no more memory than `--runs 10`,
/// and run `#k` is the same run whatever the lane count.
pub(crate) struct Plan {
    /// Run indices `0..of` are candidates.
    of: u32,
    /// Only this shard's indices are run.
    shard: Option<Shard>,
    /// How many candidates this sweep runs.
    count: u32,
    /// The next candidate index to look at (64 bits: lanes keep drawing past `of`).
    next: AtomicU64,
    /// How many runs were handed out.
    taken: AtomicU64,
    /// No further run starts (`--until-decided` decided the scenario).
    stopped: std::sync::atomic::AtomicBool,
    /// A resumed sweep's committed runs: not made again.
    committed: std::collections::HashSet<u32>,
}

impl Plan {
    /// The plan for `scenario`; with a shard, its count is found by going through the
    /// candidates once (no memory kept), stopping early when the sweep is stopped.
    pub(crate) fn new(cfg: &RunConfig, scenario: &Scenario) -> Plan {
        let of = cfg.runs_of(scenario);
        let committed: std::collections::HashSet<u32> = cfg
            .resume
            .as_ref()
            .map(|r| r.committed(&scenario.id))
            .unwrap_or_default()
            .into_iter()
            .filter(|k| *k < of && cfg.shard.is_none_or(|s| s.holds(&scenario.id, *k)))
            .collect();
        let all = count(&scenario.id, of, cfg.shard, &cfg.stop);
        Plan {
            of,
            shard: cfg.shard,
            count: all.saturating_sub(committed.len() as u32),
            next: AtomicU64::new(0),
            taken: AtomicU64::new(0),
            stopped: std::sync::atomic::AtomicBool::new(false),
            committed,
        }
    }

    /// Starts no further run.
    fn stop(&self) {
        self.stopped.store(true, Ordering::Release);
    }

    /// The next run index, or `None` when every run was handed out.
    fn take(&self, scenario_id: &str) -> Option<u32> {
        if self.stopped.load(Ordering::Acquire) {
            return None;
        }
        loop {
            let k = self.next.fetch_add(1, Ordering::AcqRel);
            let k = u32::try_from(k).ok().filter(|k| *k < self.of)?;
            if self.shard.is_none_or(|s| s.holds(scenario_id, k)) && !self.committed.contains(&k) {
                self.taken.fetch_add(1, Ordering::AcqRel);
                return Some(k);
            }
        }
    }

    fn left(&self) -> u64 {
        if self.stopped.load(Ordering::Acquire) {
            return 0;
        }
        u64::from(self.count).saturating_sub(self.taken.load(Ordering::Acquire))
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.count == 0
    }
}

/// How many of the run indices `0..of` of `scenario_id` a sweep with `shard` runs. A stop
/// request ends the count early (the sweep it plans will start no run).
pub(crate) fn count(scenario_id: &str, of: u32, shard: Option<Shard>, stop: &Interrupt) -> u32 {
    let Some(shard) = shard else {
        return of;
    };
    let mut n = 0;
    for k in 0..of {
        if k % 4096 == 0 && stop.requested() {
            break;
        }
        n += u32::from(shard.holds(scenario_id, k));
    }
    n
}
