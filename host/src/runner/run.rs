//! One run: reset → mint session → capture surface → `on_run_start` → inject (turn hooks
//! around each turn) → evidence → trace → score → `on_run_scored` → `on_run_end` → write.
//!
//! A run that errors still goes through scored and end (pairing). Files: the score first —
//! created new, so two sweeps can never claim one stem —, then the hook artifacts, then the
//! trace, the commit record: a trace on disk always has its score beside it.

use std::collections::HashSet;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};

use windtunnel_model::{Score, Trace, Verdict, WorldObservation};

use super::lane::Lane;
use super::lock;
use super::scenario::{Handle, ScenarioRunner};
use super::session::SessionConverse;
use crate::clock;
use crate::events::{self, Scope};
use crate::hooks::dispatch::Artifact;
use crate::score::Aggregator;
use crate::store::{self, StoreError};
use crate::world::World;

/// How long the end of a run waits for a turn cut when `wt` stopped to let go of the agent.
const END_RUN_PATIENCE: std::time::Duration = std::time::Duration::from_secs(2);

pub(super) struct RunRunner<'s, 'a> {
    pub sc: &'s ScenarioRunner<'a>,
    pub handle: &'s Handle,
    pub lane: &'s Lane,
    /// The scenario's surface, lent to each of this lane's traces in turn (copied once per
    /// lane, not once per run).
    surface: Mutex<Option<windtunnel_model::Surface>>,
    /// The built-in world's starting state, lent to each trace as its `world.before`.
    start: Mutex<Option<serde_json::Value>>,
    /// The built-in world's starting state as the next run's world: the last run's final
    /// state, when no tool wrote to it (a copy saved, not made, per run).
    fresh: Mutex<Option<serde_json::Value>>,
    /// The turn snapshots turn hooks are handed, refilled for each turn.
    turn_call: Mutex<super::turn::Spare>,
}

impl<'s, 'a> RunRunner<'s, 'a> {
    pub(super) fn new(sc: &'s ScenarioRunner<'a>, handle: &'s Handle, lane: &'s Lane) -> Self {
        RunRunner {
            sc,
            handle,
            lane,
            surface: Mutex::new(None),
            start: Mutex::new(None),
            fresh: Mutex::new(None),
            turn_call: Mutex::default(),
        }
    }

    /// Run `index`: its attempts (more than one when `--retry-errors` makes it again after an
    /// ERROR on the wiring or harness rung), then its files, the last attempt's.
    pub(super) fn run(&self, index: u32, agg: &Mutex<Aggregator>) -> Result<Score, StoreError> {
        let sc = self.sc;
        let (cfg, scenario) = (sc.cfg, sc.scenario);
        let resume = cfg.resume.as_ref();
        // A committed run made again keeps its id and its file name; any other is new.
        let remake = resume.and_then(|r| r.remake(&scenario.id, index));
        let in_place = remake.is_some();
        let (run_id, mut stem, mut earlier) = match remake {
            Some(r) => (r.run_id, r.stem, r.earlier),
            None => {
                let ts = clock::compact(cfg.clock.now());
                let (run_id, stem) = sc.claim_stem(index, &ts)?;
                (run_id, stem, Vec::new())
            }
        };
        // The gradings of the score a cut sweep wrote for this run stand again when the run
        // comes out the same (the judges read the same material).
        let mut previous = resume.and_then(|r| r.orphan_score(&scenario.id, index));
        let mut retries = 0;
        let (mut trace, score, artifacts, untouched, scope) = loop {
            let made = self.attempt(index, &run_id, &earlier, previous.take());
            let (trace, score) = (&made.0, &made.1);
            if retries >= cfg.retry_errors
                || cfg.cancelled()
                || !super::resume::retryable(trace, score)
            {
                break made;
            }
            retries += 1;
            let wait = backoff(cfg.retry_backoff, retries);
            if !self.wait(wait) {
                break made;
            }
            let mut a = windtunnel_model::EarlierAttempt::default();
            a.attempt = earlier.len() as u32 + 1;
            a.error = score.error.clone().unwrap_or_default();
            a.started_at.clone_from(&trace.started_at);
            a.ended_at.clone_from(&trace.ended_at);
            a.usage.clone_from(&score.usage);
            a.wait_ms = if cfg.clock.is_fixed() {
                0
            } else {
                u64::try_from(wait.as_millis()).unwrap_or(u64::MAX)
            };
            sc.publish(
                &made.4,
                events::Event::RunRetried {
                    attempt: a.attempt + 1,
                    error: a.error.clone(),
                    wait_ms: a.wait_ms,
                },
            );
            earlier.push(a);
        };
        if in_place {
            // The committed files go first, the trace (the commit) before the rest: cut
            // from here on, the run is missing, and the next resume makes it.
            store::remove_run(&cfg.out_dir, &stem)?;
        }
        let mut clash = 1;
        let (artifact_names, trace_bytes) = loop {
            match self.write(&stem, &mut trace, &score, &artifacts) {
                Err(StoreError::Exists { .. }) => {
                    // Another sweep writing to this directory took the file name first (its
                    // run id shares the first 8 characters in the same second). The run
                    // keeps its id — journal, hooks and files already carry it —; only its
                    // file name changes.
                    clash += 1;
                    stem = sc.claim_suffixed(&stem, clash);
                }
                other => break other?,
            }
        };
        sc.stream.emit(
            &scope,
            &events::Cause::Scenario,
            &events::Event::RunEnded { stem },
            Some(events::RunWritten {
                trace: &trace,
                score: &score,
                trace_bytes: &trace_bytes,
                artifacts: &artifact_names,
            }),
        );
        lock(agg).add(&trace, Some(&score));
        self.lane.keep_provenance(trace.hooks.take());
        *lock(&self.surface) = Some(std::mem::take(&mut trace.surface));
        if scenario.world_server.is_none()
            && let Some(seen) = trace.world.as_mut()
        {
            *lock(&self.start) = Some(std::mem::take(&mut seen.before));
            if untouched {
                *lock(&self.fresh) = Some(std::mem::take(&mut seen.after));
            }
        }
        Ok(score)
    }

    /// Waits `d` before a retry; `false` when the sweep is stopping (no new attempt starts).
    fn wait(&self, d: std::time::Duration) -> bool {
        let stop = &self.sc.cfg.stop;
        let until = std::time::Instant::now() + d;
        loop {
            if stop.requested() {
                return false;
            }
            let left = until.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return true;
            }
            stop.sleep(left.min(std::time::Duration::from_millis(50)));
        }
    }

    /// One attempt of run `index`, up to its files: the trace, the score, the hooks'
    /// artifacts, whether the built-in world was left untouched, and the run's scope.
    fn attempt(
        &self,
        index: u32,
        run_id: &str,
        earlier: &[windtunnel_model::EarlierAttempt],
        previous: Option<Score>,
    ) -> Made {
        let sc = self.sc;
        let (cfg, scenario) = (sc.cfg, sc.scenario);
        let observer = &self.lane.observer;
        let started = cfg.clock.now();
        let attempt = earlier.len() as u32 + 1;
        // The built-in world (which a world server's scenario does not have) is what can be
        // lent from run to run: it starts the same for every run.
        let builtin = scenario
            .world
            .as_ref()
            .filter(|_| scenario.world_server.is_none());
        let world = match (builtin, lock(&self.fresh).take()) {
            (Some(_), Some(fresh)) => World::starting_at(fresh),
            _ => World::new(scenario.world.as_ref()),
        };
        let world = Arc::new(Mutex::new(world));
        let mut trace = Trace::new(run_id, &scenario.id);
        trace.attempts = (attempt > 1).then_some(attempt);
        trace.earlier_attempts = earlier.to_vec();
        trace.sweep_id = sc.sweep.id.clone();
        trace.run_index = index;
        trace.agent.label = cfg.agent.label.clone();
        trace.agent.runtime = cfg.agent.runtime().to_owned();
        trace.agent.model = cfg.agent.model.clone();
        trace.started_at = clock::rfc3339(started);
        trace.policy_revision = cfg.policy_revision.clone();
        trace.hooks = self.lane.provenance(cfg);
        trace.pack = Some(cfg.pack_name.clone());
        trace.shard = cfg.shard.map(|s| format!("{}/{}", s.index, s.count));
        trace.scenario_digest = Some(sc.digest.clone());
        if let Err(e) = lock(self.handle).reset_state() {
            trace.error = Some(format!("reset failed: {e}"));
        }
        trace.session_id = cfg.ids.mint("session", &[&scenario.id, &index.to_string()]);
        if trace.error.is_none() {
            let info = crate::runtime::RunInfo {
                run_id: run_id.to_owned(),
                session_id: trace.session_id.clone(),
                index,
            };
            if let Err(e) = lock(self.handle).begin_run(&info) {
                trace.error = Some(format!("the agent could not start the run: {e}"));
            }
        }
        trace.surface = lock(&self.surface)
            .take()
            .unwrap_or_else(|| sc.surface.clone());
        // The run's world server, in its starting state; the scenario's preconditions are
        // checked on its state.
        let mut run_world = None;
        if trace.error.is_none()
            && let Some(ws) = &scenario.world_server
        {
            let mut w = lock(&world);
            let (hold, ready) = super::world::open(ws, &self.lane.world, &mut w, &cfg.stop);
            run_world = hold;
            match ready {
                Err(e) => {
                    trace.error = Some(format!(
                        "world server `{}`: {e}",
                        crate::world::server::name_of(ws)
                    ));
                }
                Ok(()) if ws.state.is_some() => {
                    let broken: Vec<String> = scenario
                        .preconditions
                        .iter()
                        .filter_map(|c| w.check(c).err())
                        .collect();
                    if !broken.is_empty() {
                        trace.error = Some(format!("precondition failed: {}", broken.join("; ")));
                    }
                }
                Ok(()) => {}
            }
        }
        let scope = Scope {
            scenario_id: Some(scenario.id.clone()),
            run_id: Some(run_id.to_owned()),
            session_id: Some(trace.session_id.clone()),
            turn: None,
            step: None,
        };
        sc.publish(
            &scope,
            events::Event::RunStarted {
                run_index: index,
                attempt: (attempt > 1).then_some(attempt),
            },
        );
        // The built-in world starts the same for every run: its starting state is lent, not
        // copied (a world server's is read from the server each run).
        let before = match scenario.world_server {
            None => lock(&self.start)
                .take()
                .unwrap_or_else(|| lock(&world).state().clone()),
            Some(_) => lock(&world).state().clone(),
        };
        let mut session = SessionConverse {
            sc,
            observer: observer.as_ref(),
            scope: &scope,
            handle: self.handle.clone(),
            world: world.clone(),
            next_turn: AtomicUsize::new(scenario.turns.len()),
            unusable: trace.error.clone(),
            observed: None,
        };
        let start_out = observer.on_run_start(
            scenario,
            cfg.agent_view(),
            run_id,
            &trace.session_id,
            &session,
        );
        if trace.error.is_none() {
            super::turn::TurnRunner {
                sc,
                observer: observer.as_ref(),
                spare: &self.turn_call,
                handle: self.handle,
                world: &world,
                scope: &scope,
            }
            .inject(&mut trace);
        }
        // Whether the trace's final world state is its starting state, untouched.
        let mut untouched = false;
        if scenario.world.is_some() || scenario.world_server.is_some() {
            // A turn cut when wt stopped may still hold the world on its own thread; the run
            // is ERROR then, and its world is not observed.
            match super::try_lock(&world) {
                Some(mut w) => {
                    let mut seen = WorldObservation::default();
                    seen.before = before;
                    if let Some(hold) = &run_world {
                        // The state after the last turn; a server that broke on the way
                        // makes the run ERROR, naming it. The server itself stays up for
                        // the run's hooks (a converse may call its tools) until the run ends.
                        let read = if trace.error.is_none() {
                            w.refresh()
                        } else {
                            Ok(())
                        };
                        let broke = w
                            .server_broken()
                            .or_else(|| read.err().map(|e| (hold.name(), e)));
                        if let Some((name, why)) = broke {
                            trace
                                .error
                                .get_or_insert(format!("world server `{name}`: {why}"));
                        }
                        seen.server = w.server_mut().map(|s| s.record());
                        seen.files = super::world::files_of(hold, &scenario.expect.outcome.files);
                    }
                    // Moved, not copied: a hook's converse turn, the only thing that can act
                    // on the world from here on, puts it back first (see `SessionConverse`).
                    untouched = builtin.is_some() && !w.written();
                    seen.after = w.take_state();
                    trace.world = Some(seen);
                }
                None => trace
                    .worker_warnings
                    .push("world not observed: a turn cut when wt stopped still holds it".into()),
            }
        }
        // Calls the agent made that were refused (after its reply, say) are evidence too.
        if let Some(mut h) = super::try_lock(self.handle) {
            let refused = h.take_refused();
            drop(h);
            record_refused(sc, &scope, &mut trace, refused);
        }
        trace.ended_at = cfg.clock.now_rfc3339();
        // A trace too large for `wt`'s own readers would be skipped by every report: the run
        // is ERROR instead, with the evidence that fits kept.
        if let Some(total) = crate::limits::bound_evidence(&mut trace.evidence.tool_calls) {
            let kept = trace.evidence.tool_calls.len();
            trace.error.get_or_insert(format!(
                "the run's evidence is too large to store: {total} tool calls, of which the first {kept} fit in {} MiB; the run cannot be judged",
                crate::limits::MAX_EVIDENCE_BYTES >> 20
            ));
        }
        bound_model_calls(&mut trace);
        let mut score = self.score(&trace, previous.as_ref());
        // A run cut when wt stopped was never judged: a resume makes it again.
        trace.interrupted = score.verdict == Verdict::Error && cfg.stop.is_cut();
        // From here on, what the run says is published, handed to hooks and written: every
        // secret of the invocation is taken out first, whoever echoed it.
        cfg.redactor.scrub_record(&mut trace);
        cfg.redactor.scrub_record(&mut score);
        sc.publish(
            &scope,
            events::Event::RunScored {
                verdict: score.verdict.to_string(),
                failed_layers: score
                    .failed_layers()
                    .into_iter()
                    .map(str::to_owned)
                    .collect(),
                error: score.error.clone(),
            },
        );
        if score.verdict == Verdict::Error {
            session.unusable = Some(score.error.clone().unwrap_or_default());
        }
        // Hooks read the trace and score where they are (no copy per run); the runner takes
        // them back once both points returned. A hook abandoned past its deadline may still
        // hold them: then the runner goes on with copies.
        let (shared_trace, shared_score) = (Arc::new(trace), Arc::new(score));
        session.observed = Some(shared_trace.clone());
        let scored_out = observer.on_run_scored(
            scenario,
            cfg.agent_view(),
            &shared_trace,
            &shared_score,
            &session,
        );
        let end_out = observer.on_run_end(
            scenario,
            cfg.agent_view(),
            &shared_trace,
            &shared_score,
            &session,
        );
        session.observed = None;
        let mut trace = Arc::unwrap_or_clone(shared_trace);
        let score = Arc::unwrap_or_clone(shared_score);
        // The run is over for the agent too: its world closes and what the runtime started
        // for it stops. A turn cut when wt stopped may still hold the handle: a runtime
        // that watches the stop (as `process` does) lets go of it within moments, and its
        // record of how the agent's processes ended belongs in the trace. One that does not
        // is left to its own drop.
        let mut score = score;
        if let Some(mut h) = super::lock_within(self.handle, END_RUN_PATIENCE) {
            let end = h.end_run();
            drop(h);
            trace.processes = end.processes;
            trace.a2a = end.a2a;
            if !end.model_calls.is_empty() {
                for mut call in end.model_calls {
                    crate::limits::bound_model_call(&mut call);
                    if cfg.clock.is_fixed() {
                        super::turn::pin_model_call(&mut call);
                    }
                    sc.publish(&scope, super::turn::model_event(&call));
                    trace.evidence.model_calls.push(call);
                }
                bound_model_calls(&mut trace);
            }
            if !end.refused.is_empty() {
                // Refused after the run was scored: they count all the same.
                record_refused(sc, &scope, &mut trace, end.refused);
                let rescored = self.score(&trace, None);
                if rescored.verdict != score.verdict {
                    trace.worker_warnings.push(format!(
                        "verdict changed from {} to {} after the hooks ran: the agent made tool calls after the run was scored, which were refused",
                        score.verdict, rescored.verdict
                    ));
                    sc.publish(
                        &scope,
                        events::Event::RunRescored {
                            verdict: rescored.verdict.to_string(),
                            failed_layers: rescored
                                .failed_layers()
                                .into_iter()
                                .map(str::to_owned)
                                .collect(),
                        },
                    );
                }
                score = rescored;
            }
            // The calls the end of the run reported (a gateway's) cost too.
            score.usage = self.cost().of(&trace);
        }
        // The run's world server ends with the run: stopped, or kept by the lane. A turn cut
        // when wt stopped may still hold the world; the server then goes with it.
        if let Some(hold) = run_world.take()
            && let Some(mut w) = super::try_lock(&world)
        {
            if let Some((name, why)) = w.server_broken()
                && !trace.error.as_deref().is_some_and(|e| e.contains(&why))
            {
                trace.worker_warnings.push(format!(
                    "world server `{name}` broke after the run was scored (in a hook's converse turn): {why}"
                ));
            }
            let record = super::world::release(hold, &self.lane.world, &mut w);
            if let (Some(seen), Some(record)) = (trace.world.as_mut(), record) {
                seen.server = Some(record);
            }
        }
        let mut artifacts = Vec::new();
        for out in [start_out, scored_out, end_out] {
            for w in &out.warnings {
                sc.warn(w);
            }
            trace.worker_warnings.extend(out.warnings);
            artifacts.extend(out.artifacts);
        }
        // What was added since the run was scored (its end, the world's record, the hooks'
        // warnings) is redacted as the rest was.
        cfg.redactor.scrub_record(&mut trace);
        cfg.redactor.scrub_record(&mut score);
        for a in &mut artifacts {
            cfg.redactor.scrub_value(&mut a.payload);
        }
        (trace, score, artifacts, untouched, scope)
    }

    /// The run's score, by the one scoring path a rescore takes too
    /// ([`crate::judge::score_run`]): the agent's cost with its config's prices, every
    /// grading asked for (each run's gradings are its own).
    fn score(&self, trace: &Trace, previous: Option<&Score>) -> Score {
        let (cfg, scenario) = (self.sc.cfg, self.sc.scenario);
        crate::judge::score_run(scenario, trace, self.cost(), previous, &cfg.scoring())
    }

    /// What the agent's own model calls cost: with its config's prices.
    fn cost(&self) -> crate::judge::AgentCost<'static> {
        crate::judge::AgentCost::Priced(self.sc.cfg.agent.pricing().copied())
    }

    /// Writes the score (created new), the artifacts, then the trace: the artifacts' file
    /// names, sorted, and the trace's bytes.
    fn write(
        &self,
        stem: &str,
        trace: &mut Trace,
        score: &Score,
        artifacts: &[Artifact],
    ) -> Result<(Vec<String>, Vec<u8>), StoreError> {
        let dir = &self.sc.cfg.out_dir;
        store::write_json_new(&store::score_path(dir, stem), score)?;
        let mut written = HashSet::new();
        for a in artifacts {
            match store::artifact_path(dir, stem, &a.hook, a.label.as_deref()) {
                Ok(path) if written.insert(path.clone()) => store::write_json(&path, &a.payload)?,
                Ok(path) => trace.worker_warnings.push(format!(
                    "hook:{}: artifact not written: {} was already written for this run",
                    a.hook,
                    path.file_name()
                        .map(|n| n.to_string_lossy())
                        .unwrap_or_default()
                )),
                Err(e) => trace
                    .worker_warnings
                    .push(format!("hook:{}: artifact not written: {e}", a.hook)),
            }
        }
        let bytes = store::json_bytes(trace);
        store::write_json_bytes(&store::trace_path(dir, stem), &bytes)?;
        let mut names: Vec<String> = written
            .iter()
            .filter_map(|p| p.file_name()?.to_str().map(str::to_owned))
            .collect();
        names.sort();
        Ok((names, bytes))
    }
}

/// What an attempt of a run made: its trace, score, hook artifacts, whether the built-in
/// world was left untouched, and the run's scope.
type Made = (Trace, Score, Vec<Artifact>, bool, Scope);

/// The wait before retry `n` (1 for the first): `base`, doubling, at most a minute.
fn backoff(base: std::time::Duration, n: u32) -> std::time::Duration {
    base.saturating_mul(1 << (n - 1).min(16))
        .min(std::time::Duration::from_secs(60))
}

/// Keeps the first model calls of a run that fit, with a warning counting the rest.
fn bound_model_calls(trace: &mut Trace) {
    if let Some(total) = crate::limits::bound_model_calls(&mut trace.evidence.model_calls) {
        let w = format!(
            "{total} model calls: the trace keeps the first {}",
            crate::limits::MAX_MODEL_CALLS
        );
        if !trace.worker_warnings.contains(&w) {
            trace.worker_warnings.push(w);
        }
    }
}

/// Records tool calls the agent made that were refused: in the trace's evidence (after the
/// last turn's calls, with the refusal as their error, so the constraint layer counts a
/// forbidden attempt and the trajectory layer never counts them as done) and in the
/// journal (`ToolRefused`).
fn record_refused(
    sc: &ScenarioRunner<'_>,
    scope: &Scope,
    trace: &mut Trace,
    refused: Vec<crate::runtime::RefusedCall>,
) {
    let turn = u32::try_from(trace.turns.len().saturating_sub(1)).unwrap_or(u32::MAX);
    for r in refused {
        sc.publish(
            scope,
            events::Event::ToolRefused {
                tool: r.name.clone(),
                reason: r.why.clone(),
            },
        );
        if r.name.is_empty() {
            // The count of refused calls not kept.
            trace.worker_warnings.push(r.why);
            continue;
        }
        let step = trace
            .evidence
            .tool_calls
            .iter()
            .filter(|c| c.turn == turn)
            .map(|c| c.step + 1)
            .max()
            .unwrap_or(0);
        let mut call = windtunnel_model::ToolCall::default();
        call.turn = turn;
        call.step = step;
        call.name = r.name;
        call.arguments = r.arguments;
        call.error = Some(r.why);
        call.source = Some(crate::runtime::mcp::SOURCE.to_owned());
        trace.evidence.tool_calls.push(call);
    }
}
