//! One scenario: provision, check preconditions, fire `on_provisioned`, run its runs one
//! after another on one agent handle, tear down, fire `on_scenario_end`.
//!
//! Pairing holds on every path: a scenario that fired `on_provisioned` fires
//! `on_scenario_end` once and is torn down, also when its files cannot be written.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use windtunnel_sdk::model::{AggregateResult, Scenario, Surface};

use super::{Event, RunConfig, RunHookOutput, ScenarioOutcome, Sweep, lock, problem, stem_key};
use crate::events::{self, Scope};
use crate::runtime::{self, AgentHandle, Runtime};
use crate::score::Aggregator;
use crate::store::{self, StoreError};
use crate::world::World;

/// The agent handle of a scenario, shared with the threads that may carry a turn.
pub(super) type Handle = Arc<Mutex<Box<dyn AgentHandle>>>;

pub(super) struct ScenarioRunner<'a> {
    pub cfg: &'a RunConfig,
    /// The scenario's surface, built once, lent to each run's trace.
    pub surface: Mutex<Surface>,
    pub sweep: &'a Sweep,
    pub scenario: &'a Scenario,
    runtime: &'a dyn Runtime,
    /// Keys of the stems taken (see [`stem_key`]).
    stems: &'a Mutex<HashSet<u64>>,
}

impl<'a> ScenarioRunner<'a> {
    pub fn new(
        cfg: &'a RunConfig,
        sweep: &'a Sweep,
        scenario: &'a Scenario,
        runtime: &'a dyn Runtime,
        stems: &'a Mutex<HashSet<u64>>,
    ) -> Self {
        ScenarioRunner {
            cfg,
            surface: Mutex::new(runtime::surface(&cfg.agent, scenario)),
            sweep,
            scenario,
            runtime,
            stems,
        }
    }

    /// A warning on the console (and, for run warnings, in the trace by the caller).
    pub fn warn(&self, message: &str) {
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

    pub fn run(&self) -> Result<ScenarioOutcome, StoreError> {
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
        let handle: Handle = match self.runtime.provision(scenario) {
            Ok(h) => Arc::new(Mutex::new(h)),
            Err(e) => return unable(agg, format!("provisioning failed: {e}"), warnings),
        };
        let fixture = World::new(scenario.world.as_ref());
        let broken: Vec<String> = scenario
            .preconditions
            .iter()
            .filter_map(|c| fixture.check(c).err())
            .collect();
        if !broken.is_empty() {
            self.teardown(&handle, &mut warnings);
            let why = format!("precondition failed: {}", broken.join("; "));
            return unable(agg, why, warnings);
        }
        let provisioned = cfg.observer.on_provisioned(scenario, &cfg.agent);
        // A write failure stops the scenario, but never skips teardown or its end point.
        let mut write_failure = self.scoped(provisioned, &mut warnings).err();
        let mut first_problem = None;
        for index in 0..runs {
            if write_failure.is_some() || cfg.cancelled() {
                // Interrupted: runs that never started are not counted as run.
                break;
            }
            match super::run::RunRunner::new(self, &handle).run(index, &mut agg) {
                Ok(score) if first_problem.is_none() => first_problem = problem(&score),
                Ok(_) => {}
                Err(e) => write_failure = Some(e),
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

    fn teardown(&self, handle: &Handle, warnings: &mut Vec<String>) {
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

    /// Mints the run id, making the stem unique within the sweep and the directory.
    /// `attempt` starts at 0; a caller that finds the stem taken on disk asks again with
    /// the next attempt.
    pub fn claim_stem(
        &self,
        index: u32,
        ts: &str,
        first_attempt: u32,
    ) -> Result<(String, String, u32), StoreError> {
        let idx = index.to_string();
        let mut attempt = first_attempt;
        loop {
            let attempt_s = attempt.to_string();
            let mut place = vec![self.scenario.id.as_str(), idx.as_str()];
            if attempt > 0 {
                place.push(&attempt_s);
            }
            let run_id = self.cfg.ids.mint("run", &place);
            let stem = store::stem(ts, &run_id)?;
            if lock(self.stems).insert(stem_key(&stem)) {
                return Ok((run_id, stem, attempt));
            }
            attempt += 1;
        }
    }
}
