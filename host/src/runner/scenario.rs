//! One scenario: provision, check preconditions, fire `on_provisioned`, run its runs one
//! after another on one agent handle, tear down, fire `on_scenario_end`.
//!
//! Pairing holds on every path: a scenario that fired `on_provisioned` fires
//! `on_scenario_end` once and is torn down, also when its files cannot be written.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use windtunnel_model::{AggregateResult, Scenario, Surface};

use super::{RunConfig, ScenarioOutcome, Sweep, lock, stem_key};
use crate::events::{self, Scope, Stream};
use crate::hooks::{RunHookOutput, RunObserver};
use crate::runtime::{self, AgentHandle, Runtime};
use crate::score::Aggregator;
use crate::store::{self, StoreError};
use crate::world::World;

/// The agent handle of a scenario, shared with the threads that may carry a turn.
pub(super) type Handle = Arc<Mutex<Box<dyn AgentHandle>>>;

/// Why a scenario cannot run, with the warnings gathered on the way.
pub(super) struct Unable {
    pub why: String,
    pub warnings: Vec<String>,
}

/// What a scenario's lanes add up as its runs finish, read once its last lane closed.
pub(super) struct Tally {
    pub agg: Mutex<Aggregator>,
    pub warnings: Mutex<Vec<String>>,
    /// The first reason a run did not pass, by run index (stable across lane counts).
    pub first_problem: Mutex<Option<(u32, String)>>,
    pub write_failure: Mutex<Option<StoreError>>,
}

impl Tally {
    pub(super) fn new(agg: Aggregator) -> Tally {
        Tally {
            agg: Mutex::new(agg),
            warnings: Mutex::default(),
            first_problem: Mutex::default(),
            write_failure: Mutex::default(),
        }
    }
}

pub(super) struct ScenarioRunner<'a> {
    pub cfg: &'a RunConfig,
    /// The scenario's surface, built once, copied into each run's trace.
    pub surface: Surface,
    pub sweep: &'a Sweep,
    /// The sweep's event stream: every event of the scenario goes through it once.
    pub stream: &'a Stream,
    pub scenario: &'a Scenario,
    runtime: &'a dyn Runtime,
    /// Keys of the stems taken (see [`stem_key`]).
    stems: &'a Mutex<HashSet<u64>>,
    /// Why the scenario's world server cannot serve it (it did not start, or its tools do
    /// not fit the scenario): every run is ERROR.
    pub world_unable: Option<String>,
    /// The scenario's content identity as the pack defines it ([`crate::pack::scenario_digest`]),
    /// copied into each run's trace.
    pub digest: String,
}

impl<'a> ScenarioRunner<'a> {
    pub(super) fn new(
        cfg: &'a RunConfig,
        sweep: &'a Sweep,
        stream: &'a Stream,
        scenario: &'a Scenario,
        runtime: &'a dyn Runtime,
        stems: &'a Mutex<HashSet<u64>>,
    ) -> Self {
        ScenarioRunner {
            cfg,
            surface: runtime::surface(&cfg.agent, scenario),
            sweep,
            stream,
            scenario,
            runtime,
            stems,
            world_unable: None,
            digest: crate::pack::scenario_digest(scenario),
        }
    }

    /// A warning for the stream's live consumers (run warnings go into the trace too, by
    /// the caller).
    pub(super) fn warn(&self, message: &str) {
        self.publish(
            &self.scope(),
            events::Event::Warning {
                message: message.to_owned(),
            },
        );
    }

    /// Emits a scenario-scoped event on the sweep's stream.
    pub(super) fn publish_scenario(&self, event: events::Event) {
        self.publish(&self.scope(), event);
    }

    /// Emits a scenario-caused event (not a hook's converse) on the sweep's stream.
    pub(super) fn publish(&self, scope: &Scope, event: events::Event) {
        self.emit(scope, &events::Cause::Scenario, event);
    }

    /// Emits an event on the sweep's stream.
    pub(super) fn emit(&self, scope: &Scope, cause: &events::Cause, event: events::Event) {
        self.stream.emit(scope, cause, &event, None);
    }

    fn scope(&self) -> Scope {
        Scope {
            scenario_id: Some(self.scenario.id.clone()),
            ..Scope::default()
        }
    }

    /// Sets the scenario up on the first lane: provisions its handle, checks the world
    /// preconditions, fires `on_provisioned`. A failure makes the whole scenario ERROR.
    pub(super) fn setup(
        &self,
        observer: &dyn RunObserver,
        runs: u32,
        tally: &Tally,
    ) -> Result<Handle, Unable> {
        let (cfg, scenario) = (self.cfg, self.scenario);
        self.publish(&self.scope(), events::Event::ScenarioStarted { runs });
        let mut warnings = Vec::new();
        if cfg.cancelled() {
            return Err(Unable {
                why: "not run: the sweep was interrupted".into(),
                warnings,
            });
        }
        if let Some(why) = &self.world_unable {
            return Err(Unable {
                why: why.clone(),
                warnings,
            });
        }
        let handle: Handle = match self.runtime.provision(scenario) {
            Ok(h) => Arc::new(Mutex::new(h)),
            Err(e) => {
                return Err(Unable {
                    why: format!("provisioning failed: {e}"),
                    warnings,
                });
            }
        };
        // A world server's state is known only once a run's server is up: its
        // preconditions are checked per run, on the state before the first turn.
        let fixture = World::new(scenario.world.as_ref());
        let per_run = scenario
            .world_server
            .as_ref()
            .is_some_and(|ws| ws.state.is_some());
        let broken: Vec<String> = scenario
            .preconditions
            .iter()
            .filter(|_| !per_run)
            .filter_map(|c| fixture.check(c).err())
            .collect();
        if !broken.is_empty() {
            self.teardown(&handle, &mut warnings);
            return Err(Unable {
                why: format!("precondition failed: {}", broken.join("; ")),
                warnings,
            });
        }
        let provisioned = observer.on_provisioned(scenario, cfg.agent_view());
        // A write failure stops the scenario, but never skips teardown or its end point.
        if let Err(e) = self.scoped(provisioned, &mut warnings) {
            lock(&tally.write_failure).get_or_insert(e);
        }
        lock(&tally.warnings).extend(warnings);
        Ok(handle)
    }

    /// The handle of an extra lane, or a warning saying why there is none.
    pub(super) fn provision_lane(&self, lane: usize) -> Result<Handle, String> {
        self.runtime
            .provision_lane(self.scenario, lane)
            .map(|h| Arc::new(Mutex::new(h)))
            .map_err(|e| format!("lane {lane}: provisioning failed: {e}"))
    }

    /// A scenario that cannot run: every run counts as errored, with `why`.
    pub(super) fn unable(
        &self,
        agg: Aggregator,
        runs: u32,
        why: String,
        warnings: Vec<String>,
    ) -> Result<ScenarioOutcome, StoreError> {
        let mut a = agg.finish();
        a.runs = runs;
        a.errored = runs;
        a.error = Some(why);
        self.scenario_ended(&a);
        Ok(ScenarioOutcome {
            first_problem: a.error.clone(),
            aggregate: a,
            warnings,
            sequential: None,
        })
    }

    /// A scenario no lane reached before the sweep was stopped: reported as not run.
    pub(super) fn never_reached(&self, runs: u32) -> Result<ScenarioOutcome, StoreError> {
        self.publish(&self.scope(), events::Event::ScenarioStarted { runs });
        let agg = Aggregator::new(&self.scenario.id);
        self.unable(
            agg,
            runs,
            "not run: the sweep was interrupted".into(),
            Vec::new(),
        )
    }

    /// Ends the scenario after its last lane closed: `on_scenario_end`, its artifacts, the
    /// `ScenarioEnded` event.
    pub(super) fn finish(
        &self,
        observer: &dyn RunObserver,
        tally: &Tally,
        sequential: Option<super::SequentialOutcome>,
    ) -> Result<ScenarioOutcome, StoreError> {
        let agg = std::mem::take(&mut *lock(&tally.agg));
        let aggregate = agg.finish();
        let mut warnings = std::mem::take(&mut *lock(&tally.warnings));
        let end = observer.on_scenario_end(self.scenario, self.cfg.agent_view(), &aggregate);
        let scoped = self.scoped(end, &mut warnings);
        self.scenario_ended(&aggregate);
        if let Some(e) = lock(&tally.write_failure).take() {
            return Err(e);
        }
        scoped?;
        Ok(ScenarioOutcome {
            aggregate,
            warnings,
            first_problem: lock(&tally.first_problem).take().map(|(_, p)| p),
            sequential,
        })
    }

    fn scenario_ended(&self, a: &AggregateResult) {
        self.publish(
            &self.scope(),
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
        let mut written = HashSet::new();
        for a in out.artifacts {
            let path = store::scoped_artifact_path(
                &self.cfg.out_dir,
                &self.sweep.stem,
                &a.hook,
                Some(&self.scenario.id),
                a.label.as_deref(),
            );
            match path {
                Ok(path) if written.insert(path.clone()) => store::write_json(&path, &a.payload)?,
                Ok(path) => {
                    let w = format!(
                        "hook:{}: artifact not written: {} was already written at this point",
                        a.hook,
                        path.display()
                    );
                    self.warn(&w);
                    warnings.push(w);
                }
                Err(e) => {
                    let w = format!("hook:{}: artifact not written: {e}", a.hook);
                    self.warn(&w);
                    warnings.push(w);
                }
            }
        }
        Ok(())
    }

    pub(super) fn teardown(&self, handle: &Handle, warnings: &mut Vec<String>) {
        // A turn cut at the end of the grace period may still hold the handle on its own
        // thread; `wt` is stopping, so it is left to the process exit.
        let Some(mut h) = super::try_lock(handle) else {
            let w = "teardown skipped: the agent is still busy with a turn cut when wt stopped"
                .to_owned();
            self.warn(&w);
            warnings.push(w);
            return;
        };
        if let Err(e) = h.teardown() {
            let w = format!("teardown failed: {e}");
            self.warn(&w);
            warnings.push(w);
        }
    }

    /// Mints the run id and claims its stem, unique within the sweep and among the traces
    /// the directory held when the sweep began. A run id whose stem is taken is minted
    /// again (a later `place`), before anything has seen it. A sweep whose journal had to
    /// take a `-N` stem (another sweep of the same identity writes here: pinned, same seed)
    /// mints its run ids with that `N`, so no two sweeps in one directory share a run id.
    pub(super) fn claim_stem(&self, index: u32, ts: &str) -> Result<(String, String), StoreError> {
        let mut idx = itoa::Buffer::new();
        let idx = idx.format(index);
        let claim = (self.sweep.claim > 0).then(|| format!("claim{}", self.sweep.claim));
        let mut attempt = 0u32;
        let mut attempt_s = itoa::Buffer::new();
        loop {
            let mut place = [self.scenario.id.as_str(), idx, "", ""];
            let mut len = 2;
            if attempt > 0 {
                place[len] = attempt_s.format(attempt);
                len += 1;
            }
            if let Some(claim) = &claim {
                place[len] = claim;
                len += 1;
            }
            let run_id = self.cfg.ids.mint("run", &place[..len]);
            let stem = store::stem(ts, &run_id)?;
            if lock(self.stems).insert(stem_key(&stem)) {
                return Ok((run_id, stem));
            }
            attempt += 1;
        }
    }

    /// `stem` with a `-n` suffix (or a later one) not taken in this sweep: for a run whose
    /// file name another process took first while the run was under way.
    pub(super) fn claim_suffixed(&self, stem: &str, n: u32) -> String {
        let mut n = n;
        loop {
            let candidate = format!("{stem}-{n}");
            if lock(self.stems).insert(stem_key(&candidate)) {
                return candidate;
            }
            n += 1;
        }
    }
}
