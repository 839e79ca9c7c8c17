//! The run loop, as a library: provision → (reset → inject → capture evidence → score)×N →
//! teardown for each scenario, scenarios in parallel (`jobs`), runs within a scenario
//! sequential on one agent handle. Each run's trace, score and hook artifacts are written
//! (atomically) before the next run's reset; nothing of a run is kept in memory after that
//! except its contribution to the scenario's [`AggregateResult`].
//!
//! Lifecycle hooks plug in through [`RunObserver`]; the runner calls it at fixed points and
//! never lets it change what is judged. With [`NoopObserver`] (no hooks) the files written
//! are exactly those of a hook-less `wt`.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use windtunnel_sdk::model::{
    AgentConfig, AgentRef, AggregateResult, Denial, HookProvenance, SCHEMA_VERSION, Scenario,
    Score, Surface, Trace, TurnRecord, Verdict, WorldObservation,
};
use windtunnel_sdk::turn::{Cause as TurnCause, Outcome, TurnCall, TurnResult};

use crate::dispatch::{ConverseError, Session};
use crate::events::{self, Journal, Scope};

use crate::clock::{self, Clock, Ids};
use crate::runtime::{self, AgentHandle, Runtime, RuntimeError, TurnCtx};
use crate::score::{self, Aggregator};
use crate::store::{self, StoreError};
use crate::world::World;

/// What a hook point returns: warnings (run scope: into `trace.worker_warnings`) and
/// artifacts (run scope: beside the trace; scenario scope: at the runs-directory root).
#[derive(Debug, Default)]
pub struct RunHookOutput {
    pub warnings: Vec<String>,
    pub artifacts: Vec<Artifact>,
}

/// A hook artifact, written as `<stem>.<hook>.json` or `<stem>.<hook>.<label>.json`.
pub use crate::dispatch::Artifact;

/// What the turn hooks decided before a turn starts.
#[derive(Debug, Default)]
pub struct TurnOpen {
    /// Set when a guard denied the turn: it must not start.
    pub denial: Option<Denial>,
    pub warnings: Vec<String>,
    /// Which observers began (their finishes are owed), opaque to the runner.
    pub begun: Vec<usize>,
}

/// The seam lifecycle hooks plug into. Per run the order is: reset → mint session → capture
/// surface → `on_run_start` → inject (turn hooks around each turn) → evidence → trace →
/// score → `on_run_scored` → `on_run_end` → write. A run that errors still goes through
/// scored and end (pairing). `on_provisioned` / `on_scenario_end` pair per scenario that
/// provisioned.
#[expect(unused_variables, reason = "default no-op implementations")]
pub trait RunObserver: Send + Sync {
    fn on_provisioned(&self, scenario: &Scenario, agent: &AgentConfig) -> RunHookOutput {
        RunHookOutput::default()
    }
    fn on_run_start(
        &self,
        scenario: &Scenario,
        agent: &AgentConfig,
        run_id: &str,
        session_id: &str,
        session: &dyn Session,
    ) -> RunHookOutput {
        RunHookOutput::default()
    }
    fn on_run_scored(
        &self,
        scenario: &Scenario,
        agent: &AgentConfig,
        trace: &Trace,
        score: &Score,
        session: &dyn Session,
    ) -> RunHookOutput {
        RunHookOutput::default()
    }
    fn on_run_end(
        &self,
        scenario: &Scenario,
        agent: &AgentConfig,
        trace: &Trace,
        score: &Score,
        session: &dyn Session,
    ) -> RunHookOutput {
        RunHookOutput::default()
    }
    fn on_scenario_end(
        &self,
        scenario: &Scenario,
        agent: &AgentConfig,
        aggregate: &AggregateResult,
    ) -> RunHookOutput {
        RunHookOutput::default()
    }
    /// Guards check and observers begin, in activation order, before `TurnStarted`.
    fn begin_turn(&self, call: &TurnCall) -> TurnOpen {
        TurnOpen::default()
    }
    /// Observers that began finish, in reverse order, after the terminal event is durable.
    fn finish_turn(&self, open: TurnOpen, result: &TurnResult) -> Vec<String> {
        vec![]
    }
    /// Whether any turn hook or guard is active (skips building turn snapshots otherwise).
    fn wants_turns(&self) -> bool {
        false
    }
}

/// The observer used when no hooks are active.
#[derive(Debug, Default)]
pub struct NoopObserver;
impl RunObserver for NoopObserver {}

/// What the runner reports while it works (the CLI's progress display).
#[derive(Debug)]
pub enum Event<'a> {
    ScenarioStarted {
        scenario: &'a str,
        runs: u32,
    },
    RunDone {
        scenario: &'a str,
        run_index: u32,
        stem: &'a str,
        score: &'a Score,
    },
    ScenarioEnded {
        aggregate: &'a AggregateResult,
    },
    Warning {
        scenario: &'a str,
        message: &'a str,
    },
}

/// Receives [`Event`]s, from several threads.
pub trait Progress: Send + Sync {
    fn event(&self, event: &Event<'_>);
}

/// Ignores events.
#[derive(Debug, Default)]
pub struct NoProgress;
impl Progress for NoProgress {
    fn event(&self, _: &Event<'_>) {}
}

/// How to run a sweep.
pub struct RunConfig {
    pub agent: AgentConfig,
    pub out_dir: PathBuf,
    /// Overrides every scenario's `runs`.
    pub runs: Option<u32>,
    /// Scenarios in parallel (at least 1).
    pub jobs: usize,
    pub clock: Clock,
    pub ids: Ids,
    pub observer: Arc<dyn RunObserver>,
    pub progress: Arc<dyn Progress>,
    /// Copied into every trace; `None` leaves the field absent.
    pub policy_revision: Option<String>,
    /// Provenance of the active hooks, copied into every trace; `None` when none are active.
    pub hooks: Option<Vec<HookProvenance>>,
    /// The durable event journal (and live stream), when the caller keeps one.
    pub journal: Option<Arc<Journal>>,
    /// Set (e.g. on Ctrl-C) to stop after the current run: its files are written, hooks
    /// stay paired, scenarios not yet started are reported as not run.
    pub cancel: Arc<AtomicBool>,
}

impl RunConfig {
    /// Defaults: no hooks, no progress, system clock, random ids, one job.
    pub fn new(agent: AgentConfig, out_dir: impl Into<PathBuf>) -> Self {
        RunConfig {
            agent,
            out_dir: out_dir.into(),
            runs: None,
            jobs: 1,
            clock: Clock::System,
            ids: Ids::random(),
            observer: Arc::new(NoopObserver),
            progress: Arc::new(NoProgress),
            policy_revision: None,
            hooks: None,
            journal: None,
            cancel: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Publishes an event to the journal, if there is one.
    pub fn publish(&self, scope: &Scope, cause: &events::Cause, event: events::Event) {
        if let Some(j) = &self.journal {
            j.publish(scope, cause, &event);
        }
    }

    fn cancelled(&self) -> bool {
        self.cancel.load(Ordering::Relaxed)
    }

    pub fn runs_of(&self, scenario: &Scenario) -> u32 {
        self.runs.unwrap_or(scenario.runs)
    }
}

/// A sweep's identity, known before it starts (name pack-level files with `ts`).
#[derive(Clone, Debug)]
pub struct Sweep {
    pub id: String,
    /// Compact UTC timestamp for file names, e.g. `20261130T051500Z` (no dots).
    pub ts: String,
    pub started_at: String,
}

impl Sweep {
    pub fn new(cfg: &RunConfig) -> Sweep {
        Sweep::start(&cfg.clock, &cfg.ids)
    }

    /// The sweep's identity from a clock and an id source (before a [`RunConfig`] exists,
    /// e.g. to build hooks that name pack-level files after `ts`). Use the same `clock`
    /// and `ids` in the config.
    pub fn start(clock: &Clock, ids: &Ids) -> Sweep {
        let now = clock.now();
        Sweep {
            id: ids.mint("sweep", &[]),
            ts: clock::compact(now),
            started_at: clock::rfc3339(now),
        }
    }
}

/// One scenario's result.
#[derive(Clone, Debug)]
pub struct ScenarioOutcome {
    pub aggregate: AggregateResult,
    /// Warnings from `on_provisioned`, `on_scenario_end` and teardown.
    pub warnings: Vec<String>,
    /// The first reason a run did not pass (`error: …` or `<layer>: <detail>`), for summaries.
    pub first_problem: Option<String>,
}

/// All scenarios' results, in pack order (also those that failed to provision).
#[derive(Clone, Debug)]
pub struct SweepResult {
    pub sweep: Sweep,
    pub scenarios: Vec<ScenarioOutcome>,
    /// The sweep was cancelled before it finished.
    pub interrupted: bool,
}

impl SweepResult {
    pub fn aggregates(&self) -> Vec<AggregateResult> {
        self.scenarios.iter().map(|s| s.aggregate.clone()).collect()
    }

    /// 130 if interrupted, else 3 if any run (or scenario) could not be judged, else 1 if
    /// any run failed, else 0.
    pub fn exit_code(&self) -> u8 {
        if self.interrupted {
            return crate::exit::INTERRUPTED;
        }
        exit_code(self.scenarios.iter().map(|s| &s.aggregate))
    }
}

/// The exit code for a set of aggregates (ERROR wins over FAIL).
pub fn exit_code<'a>(aggs: impl IntoIterator<Item = &'a AggregateResult>) -> u8 {
    let mut code = crate::exit::SUCCESS;
    for a in aggs {
        if a.errored > 0 || a.error.is_some() {
            return crate::exit::RUN_ERROR;
        }
        if a.failed > 0 {
            code = crate::exit::RUN_FAILED;
        }
    }
    code
}

/// Why a sweep stopped.
#[derive(Debug, thiserror::Error)]
pub enum RunnerError {
    #[error("agent `{agent}`: {source}")]
    Runtime {
        agent: String,
        #[source]
        source: RuntimeError,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Runs `scenarios` and writes every run's files to `cfg.out_dir`.
pub fn run_sweep(
    scenarios: &[Scenario],
    cfg: &RunConfig,
    sweep: &Sweep,
) -> Result<SweepResult, RunnerError> {
    let runtime = runtime::for_agent(&cfg.agent).map_err(|source| RunnerError::Runtime {
        agent: cfg.agent.label.clone(),
        source,
    })?;
    run_sweep_on(runtime.as_ref(), scenarios, cfg, sweep)
}

/// [`run_sweep`] on a given runtime (tests, embedders with their own runtime).
pub fn run_sweep_on(
    runtime: &dyn Runtime,
    scenarios: &[Scenario],
    cfg: &RunConfig,
    sweep: &Sweep,
) -> Result<SweepResult, RunnerError> {
    store::ensure_dir(&cfg.out_dir)?;
    // Stems already in the directory count as taken: a sweep never overwrites a trace.
    let taken = store::trace_files(&cfg.out_dir)?
        .iter()
        .filter_map(|p| p.file_stem().and_then(|s| s.to_str()).map(stem_key))
        .collect();
    let stems = Mutex::new(taken);
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Result<ScenarioOutcome, StoreError>>>> =
        Mutex::new((0..scenarios.len()).map(|_| None).collect());
    let jobs = cfg.jobs.clamp(1, scenarios.len().max(1));
    std::thread::scope(|s| {
        for _ in 0..jobs {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(scenario) = scenarios.get(i) else {
                        break;
                    };
                    let surface = Mutex::new(runtime::surface(&cfg.agent, scenario));
                    let r = ScenarioRunner {
                        cfg,
                        surface: &surface,
                        sweep,
                        scenario,
                        runtime,
                        stems: &stems,
                    }
                    .run();
                    results.lock().expect("results lock")[i] = Some(r);
                }
            });
        }
    });
    let mut out = Vec::new();
    for r in results.into_inner().expect("results lock") {
        out.push(r.expect("every scenario ran")?);
    }
    Ok(SweepResult {
        sweep: sweep.clone(),
        scenarios: out,
        interrupted: cfg.cancelled(),
    })
}

struct ScenarioRunner<'a> {
    cfg: &'a RunConfig,
    /// The scenario's surface, built once, lent to each run's trace.
    surface: &'a Mutex<Surface>,
    sweep: &'a Sweep,
    scenario: &'a Scenario,
    runtime: &'a dyn Runtime,
    /// Keys of the stems taken (see [`stem_key`]).
    stems: &'a Mutex<HashSet<u64>>,
}

impl ScenarioRunner<'_> {
    fn warn(&self, message: &str) {
        self.cfg.progress.event(&Event::Warning {
            scenario: &self.scenario.id,
            message,
        });
    }

    fn scope(&self) -> Scope {
        Scope {
            scenario_id: Some(self.scenario.id.clone()),
            ..Scope::default()
        }
    }

    fn run(&self) -> Result<ScenarioOutcome, StoreError> {
        let (cfg, scenario) = (self.cfg, self.scenario);
        let runs = cfg.runs_of(scenario);
        cfg.progress.event(&Event::ScenarioStarted {
            scenario: &scenario.id,
            runs,
        });
        cfg.publish(
            &self.scope(),
            &events::Cause::Scenario,
            events::Event::ScenarioStarted { runs },
        );
        let mut agg = Aggregator::new(&scenario.id);
        let mut warnings = Vec::new();
        let unable = |agg: Aggregator, why: String, warnings: Vec<String>| {
            let mut a = agg.finish();
            a.runs = runs;
            a.errored = runs;
            a.error = Some(why);
            self.scenario_ended(&a);
            Ok(ScenarioOutcome {
                first_problem: a.error.clone(),
                aggregate: a,
                warnings,
            })
        };
        if cfg.cancelled() {
            return unable(agg, "not run: the sweep was interrupted".into(), warnings);
        }
        let handle = match self.runtime.provision(scenario) {
            Ok(h) => h,
            Err(e) => return unable(agg, format!("provisioning failed: {e}"), warnings),
        };
        let fixture = World::new(scenario.world.as_ref());
        let broken: Vec<String> = scenario
            .preconditions
            .iter()
            .filter_map(|c| fixture.check(c).err())
            .collect();
        let handle = Mutex::new(handle);
        if !broken.is_empty() {
            self.teardown(&handle, &mut warnings);
            let why = format!("precondition failed: {}", broken.join("; "));
            return unable(agg, why, warnings);
        }
        let provisioned = cfg.observer.on_provisioned(scenario, &cfg.agent);
        self.scoped(provisioned, &mut warnings)?;
        let mut first_problem = None;
        let mut write_failure = None;
        for index in 0..runs {
            if cfg.cancelled() {
                // Interrupted: runs that never started are not counted as run.
                break;
            }
            match self.run_one(index, &handle, &mut agg) {
                Ok(score) if first_problem.is_none() => first_problem = problem(&score),
                Ok(_) => {}
                Err(e) => {
                    // Files cannot be written: stop this scenario, but keep hooks paired.
                    write_failure = Some(e);
                    break;
                }
            }
        }
        self.teardown(&handle, &mut warnings);
        let aggregate = agg.finish();
        let end = cfg
            .observer
            .on_scenario_end(scenario, &cfg.agent, &aggregate);
        let scoped = self.scoped(end, &mut warnings);
        self.scenario_ended(&aggregate);
        if let Some(e) = write_failure {
            return Err(e);
        }
        scoped?;
        Ok(ScenarioOutcome {
            aggregate,
            warnings,
            first_problem,
        })
    }

    fn scenario_ended(&self, a: &AggregateResult) {
        self.cfg
            .progress
            .event(&Event::ScenarioEnded { aggregate: a });
        self.cfg.publish(
            &self.scope(),
            &events::Cause::Scenario,
            events::Event::ScenarioEnded {
                runs: a.runs,
                passed: a.passed,
                failed: a.failed,
                errored: a.errored,
                error: a.error.clone(),
            },
        );
    }

    /// Surfaces scenario-scoped hook output: warnings on the console, artifacts at the
    /// runs-directory root.
    fn scoped(&self, out: RunHookOutput, warnings: &mut Vec<String>) -> Result<(), StoreError> {
        for w in out.warnings {
            self.warn(&w);
            warnings.push(w);
        }
        for a in out.artifacts {
            let path = store::scoped_artifact_path(
                &self.cfg.out_dir,
                &self.sweep.ts,
                &a.hook,
                Some(&self.scenario.id),
                a.label.as_deref(),
            );
            match path {
                Ok(path) => store::write_json(&path, &a.payload)?,
                Err(e) => {
                    let w = format!("hook:{}: artifact not written: {e}", a.hook);
                    self.warn(&w);
                    warnings.push(w);
                }
            }
        }
        Ok(())
    }

    fn teardown(&self, handle: &Mutex<Box<dyn AgentHandle>>, warnings: &mut Vec<String>) {
        if let Err(e) = lock(handle).teardown() {
            let w = format!("teardown failed: {e}");
            self.warn(&w);
            warnings.push(w);
        }
    }

    /// Mints the run id, making the stem unique within the sweep and the directory.
    fn claim_stem(&self, index: u32, ts: &str) -> Result<(String, String), StoreError> {
        let idx = index.to_string();
        for attempt in 0u32.. {
            let attempt_s = attempt.to_string();
            let mut place = vec![self.scenario.id.as_str(), idx.as_str()];
            if attempt > 0 {
                place.push(&attempt_s);
            }
            let run_id = self.cfg.ids.mint("run", &place);
            let stem = store::stem(ts, &run_id)?;
            let fresh = self
                .stems
                .lock()
                .expect("stems lock")
                .insert(stem_key(&stem));
            if fresh {
                return Ok((run_id, stem));
            }
        }
        unreachable!("u32 attempts exhausted")
    }

    fn run_one(
        &self,
        index: u32,
        handle: &Mutex<Box<dyn AgentHandle>>,
        agg: &mut Aggregator,
    ) -> Result<Score, StoreError> {
        let (cfg, scenario) = (self.cfg, self.scenario);
        let started = cfg.clock.now();
        let (run_id, stem) = self.claim_stem(index, &clock::compact(started))?;
        let world = Mutex::new(World::new(scenario.world.as_ref()));
        let mut trace = Trace {
            schema_version: SCHEMA_VERSION,
            run_id: run_id.clone(),
            sweep_id: self.sweep.id.clone(),
            scenario_id: scenario.id.clone(),
            run_index: index,
            agent: AgentRef {
                label: cfg.agent.label.clone(),
                runtime: cfg.agent.runtime.clone(),
                model: cfg.agent.model.clone(),
            },
            started_at: clock::rfc3339(started),
            policy_revision: cfg.policy_revision.clone(),
            hooks: cfg.hooks.clone(),
            ..Trace::default()
        };
        if let Err(e) = lock(handle).reset_state() {
            trace.error = Some(format!("reset failed: {e}"));
        }
        trace.session_id = cfg.ids.mint("session", &[&scenario.id, &index.to_string()]);
        trace.surface = std::mem::take(&mut *lock(self.surface));
        let scope = Scope {
            scenario_id: Some(scenario.id.clone()),
            run_id: Some(run_id.clone()),
            session_id: Some(trace.session_id.clone()),
            turn: None,
            step: None,
        };
        cfg.publish(
            &scope,
            &events::Cause::Scenario,
            events::Event::RunStarted { run_index: index },
        );
        let before = lock(&world).state().clone();
        let mut session = SessionConverse {
            cfg,
            scope: scope.clone(),
            handle,
            world: &world,
            session_id: trace.session_id.clone(),
            next_turn: AtomicUsize::new(scenario.turns.len()),
            unusable: trace.error.clone(),
        };
        let start_out =
            cfg.observer
                .on_run_start(scenario, &cfg.agent, &run_id, &trace.session_id, &session);
        if trace.error.is_none() {
            self.inject(&mut trace, handle, &world, &scope);
        }
        if scenario.world.is_some() {
            trace.world = Some(WorldObservation {
                before,
                after: lock(&world).state().clone(),
            });
        }
        trace.ended_at = cfg.clock.now_rfc3339();
        let score = score::score(scenario, &trace);
        cfg.publish(
            &scope,
            &events::Cause::Scenario,
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
        let scored_out = cfg
            .observer
            .on_run_scored(scenario, &cfg.agent, &trace, &score, &session);
        let end_out = cfg
            .observer
            .on_run_end(scenario, &cfg.agent, &trace, &score, &session);
        let mut artifacts = Vec::new();
        for out in [start_out, scored_out, end_out] {
            for w in &out.warnings {
                self.warn(w);
            }
            trace.worker_warnings.extend(out.warnings);
            artifacts.extend(out.artifacts);
        }
        self.write(&stem, &mut trace, &score, artifacts)?;
        cfg.publish(
            &scope,
            &events::Cause::Scenario,
            events::Event::RunEnded { stem: stem.clone() },
        );
        cfg.progress.event(&Event::RunDone {
            scenario: &scenario.id,
            run_index: index,
            stem: &stem,
            score: &score,
        });
        agg.add(&trace, Some(&score));
        *lock(self.surface) = std::mem::take(&mut trace.surface);
        Ok(score)
    }

    fn inject(
        &self,
        trace: &mut Trace,
        handle: &Mutex<Box<dyn AgentHandle>>,
        world: &Mutex<World>,
        run_scope: &Scope,
    ) {
        let cfg = self.cfg;
        let timeout = runtime::turn_timeout(&cfg.agent);
        let turn_hooks = cfg.observer.wants_turns();
        for (i, text) in self.scenario.turns.iter().enumerate() {
            let index = i as u32;
            let scope = Scope {
                turn: Some(index),
                ..run_scope.clone()
            };
            let call = turn_hooks.then(|| TurnCall {
                sweep_id: self.sweep.id.clone(),
                scenario_id: self.scenario.id.clone(),
                run_id: trace.run_id.clone(),
                session_id: trace.session_id.clone(),
                agent: cfg.agent.label.clone(),
                turn: index,
                input: text.clone(),
                started_at: cfg.clock.now_rfc3339(),
                cause: TurnCause::Scenario,
            });
            let open = match &call {
                Some(call) => cfg.observer.begin_turn(call),
                None => TurnOpen::default(),
            };
            trace.worker_warnings.extend(open.warnings.iter().cloned());
            if let Some(denial) = &open.denial {
                trace.error = Some(format!(
                    "turn {index} denied by guard `{}` ({}): {}: {}",
                    denial.guard, denial.kind, denial.code, denial.message
                ));
                trace.denial = Some(denial.clone());
                let finished = self.finish(open, call, Outcome::Denied, None);
                trace.worker_warnings.extend(finished);
                break;
            }
            cfg.publish(
                &scope,
                &events::Cause::Scenario,
                events::Event::TurnStarted {
                    input: text.clone(),
                },
            );
            let watch = cfg.clock.stopwatch();
            let real = std::time::Instant::now();
            let reply = guarded_send(handle, world, &trace.session_id, text, index, timeout);
            for call in &reply.tool_calls {
                cfg.publish(
                    &Scope {
                        step: Some(call.step),
                        ..scope.clone()
                    },
                    &events::Cause::Scenario,
                    events::Event::StepDone {
                        tool: call.name.clone(),
                        error: call.error.clone(),
                    },
                );
            }
            let latency_ms = watch.elapsed_ms();
            let outcome = terminal(&reply.error, real.elapsed(), timeout);
            let event = match (&reply.error, outcome) {
                (Some(e), Outcome::Interrupted) => {
                    events::Event::TurnInterrupted { reason: e.clone() }
                }
                (Some(e), _) => events::Event::TurnFailed { error: e.clone() },
                (None, _) => events::Event::TurnDone { latency_ms },
            };
            // The terminal event is durable before any finish runs.
            cfg.publish(&scope, &events::Cause::Scenario, event);
            let failed = reply.error.is_some();
            let finished = self.finish(open, call, outcome, reply.error.clone());
            trace.turns.push(TurnRecord {
                index,
                input: text.clone(),
                reply: reply.text,
                latency_ms,
                error: reply.error,
            });
            trace.evidence.tool_calls.extend(reply.tool_calls);
            trace.worker_warnings.extend(finished);
            if failed {
                // The session cannot be trusted after a transport error; stop injecting.
                break;
            }
        }
    }

    fn finish(
        &self,
        open: TurnOpen,
        call: Option<TurnCall>,
        outcome: Outcome,
        error: Option<String>,
    ) -> Vec<String> {
        let Some(call) = call else {
            return Vec::new();
        };
        let result = TurnResult {
            call,
            ended_at: self.cfg.clock.now_rfc3339(),
            outcome,
            error,
        };
        self.cfg.observer.finish_turn(open, &result)
    }

    /// Writes score, artifacts, then the trace (last, so a trace on disk always has its
    /// score beside it).
    fn write(
        &self,
        stem: &str,
        trace: &mut Trace,
        score: &Score,
        artifacts: Vec<Artifact>,
    ) -> Result<(), StoreError> {
        let dir = &self.cfg.out_dir;
        store::write_json(&store::score_path(dir, stem), score)?;
        for a in artifacts {
            match store::artifact_path(dir, stem, &a.hook, a.label.as_deref()) {
                Ok(path) => store::write_json(&path, &a.payload)?,
                Err(e) => trace
                    .worker_warnings
                    .push(format!("hook:{}: artifact not written: {e}", a.hook)),
            }
        }
        store::write_json(&store::trace_path(dir, stem), trace)
    }
}

/// Sends one turn; a panicking runtime becomes a turn error instead of ending the sweep.
fn guarded_send(
    handle: &Mutex<Box<dyn AgentHandle>>,
    world: &Mutex<World>,
    session_id: &str,
    text: &str,
    index: u32,
    timeout: Duration,
) -> runtime::Reply {
    let sent = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut w = lock(world);
        lock(handle).send(
            session_id,
            text,
            TurnCtx {
                index,
                world: &mut w,
                timeout,
            },
        )
    }));
    sent.unwrap_or_else(|panic| {
        let msg = panic
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".to_owned());
        runtime::Reply::failed(format!("the agent runtime panicked: {msg}"), Vec::new())
    })
}

/// A turn that failed after using its whole deadline was interrupted by it; any other error
/// is a failure. (Every runtime honours the deadline, so this needs no runtime cooperation.)
fn terminal(error: &Option<String>, took: Duration, timeout: Duration) -> Outcome {
    match error {
        None => Outcome::Done,
        Some(_) if took >= timeout.mul_f64(0.95) => Outcome::Interrupted,
        Some(_) => Outcome::Failed,
    }
}

/// Why a run did not pass, in one line; `None` when it passed.
fn problem(score: &Score) -> Option<String> {
    match (&score.error, score.verdict) {
        (_, Verdict::Pass) => None,
        (Some(e), _) => Some(format!("error: {e}")),
        (None, _) => score
            .layers()
            .into_iter()
            .find(|(_, l)| !l.passed)
            .map(|(name, l)| format!("{name}: {}", l.detail)),
    }
}

/// A stem's 64-bit key: the taken-stems set stays small (8 bytes a run). A false clash
/// only re-mints an id.
fn stem_key(stem: &str) -> u64 {
    use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
    BuildHasherDefault::<DefaultHasher>::default().hash_one(stem)
}

fn lock<T: ?Sized>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic elsewhere must not stop the sweep from writing what it has.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The run's live session as hooks reach it: `converse` turns (journaled with the hook as
/// their cause, never added to the trace) and the runtime's state probe.
struct SessionConverse<'a> {
    cfg: &'a RunConfig,
    scope: Scope,
    handle: &'a Mutex<Box<dyn AgentHandle>>,
    world: &'a Mutex<World>,
    session_id: String,
    /// Turn index for the next converse turn (after the scenario's turns).
    next_turn: AtomicUsize,
    unusable: Option<String>,
}

impl Session for SessionConverse<'_> {
    fn converse(&self, hook: &str, text: &str, timeout: Duration) -> Result<String, ConverseError> {
        if let Some(why) = &self.unusable {
            return Err(ConverseError::Failed(format!("session unusable: {why}")));
        }
        let index = self.next_turn.fetch_add(1, Ordering::Relaxed) as u32;
        let scope = Scope {
            turn: Some(index),
            ..self.scope.clone()
        };
        let cause = events::Cause::Converse {
            hook: hook.to_owned(),
        };
        self.cfg.publish(
            &scope,
            &cause,
            events::Event::TurnStarted {
                input: text.to_owned(),
            },
        );
        let watch = self.cfg.clock.stopwatch();
        let real = std::time::Instant::now();
        let reply = guarded_send(
            self.handle,
            self.world,
            &self.session_id,
            text,
            index,
            timeout,
        );
        let outcome = terminal(&reply.error, real.elapsed(), timeout);
        let event = match (&reply.error, outcome) {
            (Some(e), Outcome::Interrupted) => events::Event::TurnInterrupted { reason: e.clone() },
            (Some(e), _) => events::Event::TurnFailed { error: e.clone() },
            (None, _) => events::Event::TurnDone {
                latency_ms: watch.elapsed_ms(),
            },
        };
        self.cfg.publish(&scope, &cause, event);
        match (reply.error, reply.text) {
            // Whatever arrives after the deadline is dropped with the reply; nothing of it
            // is recorded.
            (Some(_), _) if outcome == Outcome::Interrupted => {
                Err(ConverseError::TimedOut(timeout))
            }
            (Some(e), _) => Err(ConverseError::Failed(e)),
            (None, Some(t)) => Ok(t),
            (None, None) => Err(ConverseError::Failed("no reply".to_owned())),
        }
    }

    fn probe_state(&self) -> Result<Value, String> {
        lock(self.handle)
            .probe_state()
            .ok_or_else(|| format!("runtime `{}` offers no state probe", self.cfg.agent.runtime))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pack::Pack;

    #[derive(Default)]
    struct Recorder {
        log: Mutex<Vec<String>>,
    }

    impl RunObserver for Recorder {
        fn on_provisioned(&self, s: &Scenario, _: &AgentConfig) -> RunHookOutput {
            self.log
                .lock()
                .unwrap()
                .push(format!("provisioned {}", s.id));
            RunHookOutput::default()
        }
        fn on_run_start(
            &self,
            _: &Scenario,
            _: &AgentConfig,
            run: &str,
            _: &str,
            _: &dyn Session,
        ) -> RunHookOutput {
            self.log
                .lock()
                .unwrap()
                .push(format!("start {}", &run[..8]));
            RunHookOutput::default()
        }
        fn on_run_scored(
            &self,
            _: &Scenario,
            _: &AgentConfig,
            t: &Trace,
            _: &Score,
            session: &dyn Session,
        ) -> RunHookOutput {
            let reply = session.converse(
                "rec",
                "What do you remember from earlier?",
                Duration::from_secs(1),
            );
            self.log
                .lock()
                .unwrap()
                .push(format!("scored {}", &t.run_id[..8]));
            RunHookOutput {
                warnings: vec![format!("hook:rec: {}", reply.unwrap())],
                artifacts: vec![Artifact {
                    hook: "rec".into(),
                    label: Some("probe".into()),
                    payload: session.probe_state().unwrap(),
                }],
            }
        }
        fn on_run_end(
            &self,
            _: &Scenario,
            _: &AgentConfig,
            t: &Trace,
            _: &Score,
            _: &dyn Session,
        ) -> RunHookOutput {
            self.log
                .lock()
                .unwrap()
                .push(format!("end {}", &t.run_id[..8]));
            RunHookOutput::default()
        }
        fn on_scenario_end(
            &self,
            s: &Scenario,
            _: &AgentConfig,
            a: &AggregateResult,
        ) -> RunHookOutput {
            self.log
                .lock()
                .unwrap()
                .push(format!("scenario_end {} {}/{}", s.id, a.passed, a.runs));
            RunHookOutput::default()
        }
    }

    #[test]
    fn hook_points_fire_in_order_and_artifacts_land_beside_traces() {
        let dir = tempfile::tempdir().unwrap();
        let pack = Pack::demo();
        let scenarios: Vec<Scenario> = pack
            .scenarios
            .into_iter()
            .filter(|s| s.id == "order-status")
            .collect();
        let rec = Arc::new(Recorder::default());
        let mut cfg = RunConfig::new(runtime::builtin_agent("demo-leaky").unwrap(), dir.path());
        cfg.observer = rec.clone();
        cfg.ids = Ids::seeded(1);
        let sweep = Sweep::new(&cfg);
        let result = run_sweep(&scenarios, &cfg, &sweep).unwrap();
        assert_eq!(result.exit_code(), 0);
        let log = rec.log.lock().unwrap().clone();
        let kinds: Vec<&str> = log.iter().map(|l| l.split(' ').next().unwrap()).collect();
        assert_eq!(
            kinds,
            [
                "provisioned",
                "start",
                "scored",
                "end",
                "start",
                "scored",
                "end",
                "scenario_end"
            ]
        );
        let runs = store::load_runs(&[dir.path()]).unwrap();
        assert_eq!(runs.len(), 2);
        // The leaky agent remembers the first run's session in the second run.
        let second = runs.iter().find(|(t, _, _)| t.run_index == 1).unwrap();
        assert!(
            second.0.worker_warnings[0].contains("Earlier you told me"),
            "{:?}",
            second.0.worker_warnings
        );
        let stem = second.2.file_stem().unwrap().to_str().unwrap();
        let probe: Value =
            store::read_json(&dir.path().join(format!("{stem}.rec.probe.json"))).unwrap();
        assert!(probe["sessions"].as_array().unwrap().len() >= 2, "{probe}");
    }

    struct Panicky;
    struct PanickyHandle;
    impl Runtime for Panicky {
        fn provision(&self, _: &Scenario) -> Result<Box<dyn AgentHandle>, RuntimeError> {
            Ok(Box::new(PanickyHandle))
        }
    }
    impl AgentHandle for PanickyHandle {
        fn reset_state(&mut self) -> Result<(), RuntimeError> {
            Ok(())
        }
        fn send(&mut self, _: &str, _: &str, _: TurnCtx<'_>) -> runtime::Reply {
            panic!("boom")
        }
        fn teardown(&mut self) -> Result<(), RuntimeError> {
            Ok(())
        }
    }

    #[test]
    fn a_panicking_runtime_is_a_turn_error_not_a_crash() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = RunConfig::new(runtime::builtin_agent("demo").unwrap(), dir.path());
        let pack = Pack::demo();
        let sweep = Sweep::new(&cfg);
        let r = run_sweep_on(&Panicky, &pack.scenarios, &cfg, &sweep).unwrap();
        assert_eq!(r.exit_code(), 3);
        let runs = store::load_runs(&[dir.path()]).unwrap();
        assert_eq!(runs.len(), 6);
        let score = runs[0].1.as_ref().unwrap();
        assert_eq!(
            score.error.as_deref(),
            Some("turn 0: the agent runtime panicked: boom")
        );
    }

    #[test]
    fn provisioning_failure_is_scenario_error_and_sweep_continues() {
        let dir = tempfile::tempdir().unwrap();
        let mut agent = runtime::builtin_agent("demo").unwrap();
        agent.runtime = "http".into();
        agent.endpoint = Some("http://127.0.0.1:9".into());
        let cfg = RunConfig::new(agent, dir.path());
        let pack = Pack::demo();
        let sweep = Sweep::new(&cfg);
        let r = run_sweep(&pack.scenarios, &cfg, &sweep).unwrap();
        assert_eq!(r.scenarios.len(), 3);
        assert!(r.scenarios.iter().all(|s| {
            s.aggregate
                .error
                .as_deref()
                .unwrap()
                .contains("provisioning failed")
        }));
        assert_eq!(r.exit_code(), 3);
    }
}
