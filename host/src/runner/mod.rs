//! The run loop, as a library: provision → (reset → inject → capture evidence → score)×N →
//! teardown for each scenario, scenarios in parallel (`jobs`), runs within a scenario
//! sequential on one agent handle. Each run's trace, score and hook artifacts are written
//! (atomically) before the next run's reset; nothing of a run is kept in memory after that
//! except its contribution to the scenario's [`AggregateResult`].
//!
//! The files read top down, each importing only those below it (no cycle: `host/tests/layers.rs`):
//! - this module: the sweep — configuration, results, sharding;
//! - [`sweep`]: the pool of lanes that runs a sweep's scenarios, several lanes per scenario
//!   where the runtime allows; it hands each run down to
//! - [`run`]: one run — reset, session, inject, evidence, score, hooks, files;
//! - [`session`]: the run's live session as hooks reach it (`converse`, `probe_state`);
//! - [`turn`]: one turn — guards and turn hooks around it, the send, its terminal event;
//! - [`lane`]: one worker of the pool and what it keeps between its runs;
//! - [`world`]: a run's world server, fresh or the lane's kept one;
//! - [`scenario`]: what a scenario's lanes share — its handle, provisioning,
//!   preconditions, teardown and the tally of its runs.
//!
//! Lifecycle hooks plug in through [`RunObserver`]; the runner calls it at fixed points and
//! never lets it change what is judged. With [`NoopObserver`] (no hooks) the files written
//! are exactly those of a hook-less `wt`.
//!
//! Stopping: when [`RunConfig::stop`] is requested no new run starts; when it is cut, turns
//! in flight end at once (see [`crate::interrupt`]). Every run that started is written whole
//! and its hooks stay paired.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use windtunnel_model::{AgentConfig, AggregateResult, HookProvenance, Scenario, Score};

use crate::events::{self, Journal, Scope, Sink, Stream};
use crate::hooks::{NoopObserver, RunObserver};
use crate::interrupt::Interrupt;

use crate::clock::{self, Clock, Ids};
use crate::runtime::{self, Agent, Runtime, RuntimeError};
use crate::store::{self, StoreError};

pub use crate::events::SweepIdentity;
pub use resume::{Asked, Resume};

mod lane;
mod resume;
mod run;
mod scenario;
mod session;
mod sweep;
mod turn;
mod world;

/// How to run a sweep.
pub struct RunConfig {
    pub agent: Agent,
    /// The SDK's view of `agent`, as hooks read it; built once, on first use.
    agent_view: std::sync::OnceLock<AgentConfig>,
    pub out_dir: PathBuf,
    /// Overrides every scenario's `runs`.
    pub runs: Option<u32>,
    /// Scenarios in parallel (at least 1).
    pub jobs: usize,
    pub clock: Clock,
    pub ids: Ids,
    pub observer: Arc<dyn RunObserver>,
    /// The consumers of the sweep's event stream besides its journal, which the runner
    /// always writes (`<out_dir>/<sweep stem>.events.jsonl`): the terminal, JUnit, the live
    /// `--events` copy ([`events::LiveLines`]), a caller's own.
    pub sinks: Vec<Arc<dyn Sink>>,
    /// The pack's name, for `SweepStarted`.
    pub pack_name: String,
    /// Copied into every trace; `None` leaves the field absent.
    pub policy_revision: Option<String>,
    /// Provenance of the active hooks, copied into every trace; `None` when none are active.
    pub hooks: Option<Vec<HookProvenance>>,
    /// Requested (Ctrl-C, SIGTERM, SIGHUP): no new run starts; runs in flight are written,
    /// hooks stay paired, scenarios not yet started are reported as not run. Cut: turns in
    /// flight end at once as interrupted.
    pub stop: Arc<Interrupt>,
    /// Run only this shard's (scenario, run index) pairs.
    pub shard: Option<Shard>,
    /// `--until-decided`: each scenario's runs stop as soon as its comparison with a
    /// baseline is decided ([`crate::report::gate::look`]).
    pub sequential: Option<Sequential>,
    /// Models the harness calls itself (simulated users, judges), by name.
    pub models: Arc<crate::runtime::models::Models>,
    /// Every secret of the invocation: [`RunConfig::new`] starts it with the agent's; a
    /// caller that sets `models` or hooks adds theirs
    /// ([`crate::runtime::models::redactor`]). Each run's trace, score and artifacts pass
    /// through it before they are written, published or shown.
    pub redactor: Arc<crate::secrets::Redactor>,
    /// The `--filter` the scenarios were chosen by, when they were: recorded on
    /// `SweepStarted` with the rest of what the sweep is ([`SweepIdentity::of`]).
    pub filter: Option<String>,
    /// `--retry-errors`: a run that ends ERROR on the wiring or harness rung is made again,
    /// in place, up to this many times.
    pub retry_errors: u32,
    /// The wait before a run's first retry; it doubles for each further one, up to a minute.
    pub retry_backoff: std::time::Duration,
    /// `--resume`: the sweep this one continues ([`Resume::open`]); only its missing runs
    /// are made, and its journal goes on.
    pub resume: Option<Resume>,
}

/// What decides a sweep's identity ([`SweepIdentity::of`]).
pub struct Identified<'a> {
    pub pack_name: &'a str,
    pub scenarios: &'a [Scenario],
    pub agent: &'a Agent,
    pub models: &'a crate::runtime::models::Models,
    pub ids: &'a Ids,
    pub runs: Option<u32>,
    pub filter: Option<&'a str>,
    pub until_decided: bool,
}

impl SweepIdentity {
    /// What a sweep is: the digest of its pack (its name, each scenario's content digest in
    /// order, each of its models' identity) and of its whole agent config, its seed, runs,
    /// filter and whether it stops when decided.
    pub fn of(s: &Identified<'_>) -> SweepIdentity {
        use sha2::{Digest, Sha256};
        let mut h = Sha256::new();
        for part in std::iter::once(s.pack_name.to_owned())
            .chain(s.scenarios.iter().map(crate::pack::scenario_digest))
            .chain(
                s.models
                    .iter()
                    .map(|(name, m)| format!("{name}={}", m.identity())),
            )
        {
            h.update(part.as_bytes());
            h.update([0]);
        }
        let agent = format!("{:?}", s.agent);
        SweepIdentity {
            pack_digest: format!("sha256:{:x}", h.finalize()),
            agent_digest: format!("sha256:{:x}", Sha256::digest(agent.as_bytes())),
            seed: s.ids.seed(),
            runs: s.runs,
            filter: s.filter.map(str::to_owned),
            until_decided: s.until_decided,
        }
    }
}

/// The baseline a sweep with `--until-decided` is compared with as it runs.
#[derive(Clone, Debug, Default)]
pub struct Sequential {
    /// Passes and runs of each scenario on the baseline.
    pub baseline: std::collections::HashMap<String, (u64, u64)>,
    /// The comparison's false-alarm rate (the gate's alpha).
    pub alpha: f64,
}

/// How a scenario of an `--until-decided` sweep ended.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SequentialOutcome {
    /// `regressed`, `not_regressed`, `undetermined` (every run made; `wt compare`
    /// decides), or `continue` (stopped before a decision: interrupted).
    pub decision: &'static str,
    /// Runs made, and how many passed, when it was decided.
    pub runs: u64,
    pub passed: u64,
    /// Runs that were in flight when it was decided: made, written and reported, but not
    /// needed for the decision.
    pub late: u64,
    /// Runs it would have made without stopping.
    pub planned: u64,
}

/// Shard `index` of `count` (1-based): a stable subset of a sweep's (scenario, run index)
/// pairs, chosen by a hash of the pair alone — it depends neither on the other shards, nor
/// on timing, nor on `--jobs`, so N shards on N machines together run every pair once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    pub index: u32,
    pub count: u32,
}

impl Shard {
    /// Parses `K/N` (1 ≤ K ≤ N).
    pub fn parse(text: &str) -> Result<Shard, String> {
        let bad = || format!("--shard {text:?}: expected K/N with 1 <= K <= N, e.g. 2/4");
        let (k, n) = text.split_once('/').ok_or_else(bad)?;
        let (index, count): (u32, u32) = (
            k.trim().parse().map_err(|_| bad())?,
            n.trim().parse().map_err(|_| bad())?,
        );
        if index == 0 || count == 0 || index > count {
            return Err(bad());
        }
        Ok(Shard { index, count })
    }

    /// Does this shard hold run `run_index` of `scenario_id`?
    pub fn holds(&self, scenario_id: &str, run_index: u32) -> bool {
        use sha2::{Digest, Sha256};
        let mut h = Sha256::new();
        h.update(scenario_id.as_bytes());
        h.update([0]);
        h.update(run_index.to_le_bytes());
        let d = h.finalize();
        let n = u64::from_le_bytes(d[..8].try_into().expect("8 bytes"));
        n % u64::from(self.count) == u64::from(self.index - 1)
    }
}

impl RunConfig {
    /// Defaults: no hooks, no sinks, system clock, random ids, one job.
    pub fn new(agent: Agent, out_dir: impl Into<PathBuf>) -> Self {
        let redactor = Arc::new(runtime::redactor(&agent));
        RunConfig {
            redactor,
            agent,
            agent_view: std::sync::OnceLock::new(),
            out_dir: out_dir.into(),
            runs: None,
            jobs: 1,
            clock: Clock::System,
            ids: Ids::random(),
            observer: Arc::new(NoopObserver),
            sinks: Vec::new(),
            pack_name: "scenarios".into(),
            policy_revision: None,
            hooks: None,
            stop: Interrupt::new(),
            shard: None,
            sequential: None,
            models: Arc::default(),
            filter: None,
            retry_errors: 0,
            retry_backoff: std::time::Duration::from_secs(1),
            resume: None,
        }
    }

    /// The agent as hooks see it ([`Agent::to_sdk`]).
    pub fn agent_view(&self) -> &AgentConfig {
        self.agent_view.get_or_init(|| self.agent.to_sdk())
    }

    /// How this sweep scores its runs ([`crate::judge::score_run`]).
    pub(crate) fn scoring(&self) -> crate::judge::Scoring<'_> {
        crate::judge::Scoring {
            models: &self.models,
            redactor: &self.redactor,
            stop: &self.stop,
            ids: &self.ids,
            pinned: self.clock.is_fixed(),
        }
    }

    fn cancelled(&self) -> bool {
        self.stop.requested()
    }

    pub fn runs_of(&self, scenario: &Scenario) -> u32 {
        self.runs.unwrap_or(scenario.runs)
    }
}

/// A sweep's identity, known before it starts.
#[derive(Clone, Debug)]
pub struct Sweep {
    pub id: String,
    /// Compact UTC timestamp, e.g. `20261130T051500Z` (no dots).
    pub ts: String,
    /// The stem of the sweep's own files (journal, scenario- and pack-scoped artifacts):
    /// `<ts>_<id[:8]>`, unique per sweep even within one second. The journal claims it in
    /// the runs directory ([`Journal::create`]); a stem already taken there gets a `-N`
    /// suffix, so pinned sweeps written to fresh directories still share their names.
    pub stem: String,
    pub started_at: String,
    /// 0, or `N` when the journal had to claim `<stem>-N` because a sweep of the same
    /// identity (pinned, same seed) already wrote to the directory: this sweep's run ids
    /// are minted with it, so they differ from that sweep's.
    pub claim: u32,
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
        let id = ids.mint("sweep", &[]);
        let ts = clock::compact(now);
        Sweep {
            stem: store::stem(&ts, &id).unwrap_or_else(|_| ts.clone()),
            id,
            ts,
            started_at: clock::rfc3339(now),
            claim: 0,
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
    /// With `--until-decided`: where the comparison with the baseline stood when the
    /// scenario's runs stopped.
    pub sequential: Option<SequentialOutcome>,
}

/// All scenarios' results, in pack order (also those that failed to provision).
#[derive(Clone, Debug)]
pub struct SweepResult {
    /// The sweep as it ran: its stem is the one its journal claimed.
    pub sweep: Sweep,
    pub scenarios: Vec<ScenarioOutcome>,
    /// The sweep was cancelled before it finished.
    pub interrupted: bool,
    /// The journal's path, and its first write error if it could not be written whole.
    pub journal: PathBuf,
    pub journal_error: Option<String>,
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
        crate::exit::of_aggregates(self.scenarios.iter().map(|s| &s.aggregate))
    }
}

/// Why a sweep stopped.
#[derive(Debug, thiserror::Error)]
pub enum RunnerError {
    #[error("agent `{agent}`")]
    Runtime {
        agent: String,
        #[source]
        source: RuntimeError,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Journal(#[from] events::JournalError),
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
///
/// The runner tells the whole story of the sweep, once, through its event stream: the
/// journal first, then `cfg.sinks` — `SweepStarted`, every scenario, run and turn,
/// `on_pack_end` and its pack-scoped artifacts, `SweepEnded`. A library caller gets the same
/// files as `wt run`.
pub fn run_sweep_on(
    runtime: &dyn Runtime,
    scenarios: &[Scenario],
    cfg: &RunConfig,
    sweep: &Sweep,
) -> Result<SweepResult, RunnerError> {
    store::ensure_dir(&cfg.out_dir)?;
    let mut sweep = sweep.clone();
    let clock = cfg.clock;
    let now = Box::new(move || clock.now_rfc3339());
    let resumed = cfg
        .resume
        .as_ref()
        .and_then(|r| Some((r, r.take_journal()?)));
    let journal = match resumed {
        // A resumed sweep is the sweep it resumes: its id, its stem, its journal.
        Some((r, (path, file, seq))) => {
            sweep = r.sweep.clone();
            Journal::open_at(path, file, seq, &sweep.id, now)
        }
        None => {
            let wanted = sweep.stem.clone();
            let journal = Journal::create(&cfg.out_dir, &mut sweep.stem, &sweep.id, now)?;
            sweep.claim = sweep
                .stem
                .strip_prefix(&wanted)
                .and_then(|rest| rest.strip_prefix('-'))
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            journal
        }
    }
    .with_redactor(cfg.redactor.clone());
    let mut sinks = cfg.sinks.clone();
    let index = crate::report::scan::index::Writer::new(&cfg.out_dir, &sweep.stem);
    sinks.insert(0, Arc::new(index));
    let stream = Stream::new(journal, sinks);
    let sweep_scope = Scope::default();
    let cause = events::Cause::Scenario;
    stream.emit(
        &sweep_scope,
        &cause,
        &events::Event::SweepStarted {
            pack: cfg.pack_name.clone(),
            agent: cfg.agent.label.clone(),
            scenarios: scenarios.len(),
            hooks: cfg.hooks.iter().flatten().map(|h| h.name.clone()).collect(),
            policy_revision: cfg.policy_revision.clone(),
            jobs: cfg.jobs,
            shard: cfg.shard.map(|s| format!("{}/{}", s.index, s.count)),
            identity: Some(SweepIdentity::of(&Identified {
                pack_name: &cfg.pack_name,
                scenarios,
                agent: &cfg.agent,
                models: &cfg.models,
                ids: &cfg.ids,
                runs: cfg.runs,
                filter: cfg.filter.as_deref(),
                until_decided: cfg.sequential.is_some(),
            })),
            resumed: cfg.resume.as_ref().map(|r| r.segment),
        },
        None,
    );
    let (scenarios, interrupted) = run_scenarios(runtime, scenarios, cfg, &sweep, &stream)?;
    // Pack-level point: every scenario's aggregate, provisioned or not.
    let aggregates: Vec<AggregateResult> = scenarios.iter().map(|s| s.aggregate.clone()).collect();
    let pack_end = cfg.observer.on_pack_end(&aggregates);
    let warn = |message: String| {
        stream.emit(
            &sweep_scope,
            &cause,
            &events::Event::Warning { message },
            None,
        );
    };
    for w in pack_end.warnings {
        warn(w);
    }
    let mut written = std::collections::HashSet::new();
    for a in pack_end.artifacts {
        let path = store::scoped_artifact_path(
            &cfg.out_dir,
            &sweep.stem,
            &a.hook,
            None,
            a.label.as_deref(),
        )
        .and_then(|p| {
            if written.insert(p.clone()) {
                store::write_json(&p, &a.payload).map(|()| p)
            } else {
                Err(StoreError::Exists { path: p })
            }
        });
        if let Err(e) = path {
            warn(format!("hook:{}: artifact not written: {e}", a.hook));
        }
    }
    let result = SweepResult {
        sweep,
        scenarios,
        interrupted,
        journal: stream.journal().path().to_owned(),
        journal_error: None,
    };
    stream.emit(
        &sweep_scope,
        &cause,
        &events::Event::SweepEnded {
            scenarios: result.scenarios.len(),
            exit_code: result.exit_code(),
        },
        None,
    );
    Ok(SweepResult {
        journal_error: stream.journal().error(),
        ..result
    })
}

/// The scenarios of a sweep on a pool of lanes; their outcomes in pack order, and whether
/// the sweep was stopped.
fn run_scenarios(
    runtime: &dyn Runtime,
    scenarios: &[Scenario],
    cfg: &RunConfig,
    sweep: &Sweep,
    stream: &Stream,
) -> Result<(Vec<ScenarioOutcome>, bool), RunnerError> {
    // Stems already in the directory count as taken: a sweep never overwrites a trace.
    let taken = store::trace_files(&cfg.out_dir)?
        .iter()
        .filter_map(|p| p.file_stem().and_then(|s| s.to_str()).map(stem_key))
        .collect();
    let stems = Mutex::new(taken);
    let pulse = sweep::Pulse::default();
    let cap = runtime
        .max_lanes()
        .unwrap_or(usize::MAX)
        .min(cfg.jobs.max(1));
    // A shard provisions only the scenarios it has runs of; a resumed sweep, only those
    // with runs left to make (the others' committed runs are counted as they stand).
    let mut standing: Vec<(usize, ScenarioOutcome)> = Vec::new();
    let mut planned: Vec<(&Scenario, sweep::Plan)> = Vec::new();
    let mut order = Vec::new();
    for (at, s) in scenarios.iter().enumerate() {
        let plan = sweep::Plan::new(cfg, s);
        if !plan.is_empty() {
            planned.push((s, plan));
            order.push(at);
        } else if let Some(agg) = cfg.resume.as_ref().and_then(|r| r.counted(&s.id)) {
            standing.push((
                at,
                ScenarioOutcome {
                    aggregate: agg.finish(),
                    warnings: Vec::new(),
                    first_problem: None,
                    sequential: None,
                },
            ));
        }
    }

    // Scenarios with a world server offer its tools too: listed once, before any run.
    let prepared = world::prepare(
        &planned.iter().map(|(s, _)| *s).collect::<Vec<_>>(),
        &cfg.stop,
    );
    let states: Vec<sweep::ScenarioState<'_>> = planned
        .into_iter()
        .zip(&prepared)
        .map(|((original, plan), prepared)| {
            let (s, unable) = match prepared {
                Ok(s) => (s, None),
                Err(why) => (original, Some(why.clone())),
            };
            let mut runner = scenario::ScenarioRunner::new(cfg, sweep, stream, s, runtime, &stems);
            runner.world_unable = unable;
            // The pack's definition, not the one a world server's tools were added to.
            runner.digest = crate::pack::scenario_digest(original);
            let seq = sequential_tally(cfg, scenarios, s);
            sweep::ScenarioState::new(runner, plan, cap, seq, &pulse)
        })
        .collect();
    let total: usize = states.iter().map(|s| s.run_count() as usize).sum();
    let workers = cfg.jobs.clamp(1, total.max(1));
    // A lane polls for its hook worker, and an isolated hook's two sides for each other's
    // frames, only when a core is left over by the lanes and by whatever else the machine
    // is running.
    crate::hooks::dispatch::set_spare_core(spare_core(workers));
    let lanes: Vec<lane::Lane> = (0..workers)
        .map(|index| lane::Lane {
            observer: cfg
                .observer
                .lane(index)
                .unwrap_or_else(|| cfg.observer.clone()),
            world: Mutex::new(None),
            provenance: Mutex::new(None),
        })
        .collect();
    // Each lane on a thread of its own; a panic in one is resumed here once all ended.
    std::thread::scope(|s| {
        for lane in &lanes {
            let states = &states;
            let spawned = std::thread::Builder::new()
                .name("wt-lane".into())
                .spawn_scoped(s, move || sweep::work(lane, states, cfg));
            if let Err(e) = spawned {
                // The lane never starts: its runs are taken by the other lanes (a sweep whose
                // every lane fails to start reports its scenarios as not run).
                tracing::warn!("cannot start a lane's thread: {e}");
            }
        }
    });
    let mut out = Vec::new();
    for (at, state) in order.into_iter().zip(states) {
        out.push((at, state.into_outcome()?));
    }
    // In pack order, with the scenarios a resume found whole.
    out.extend(standing);
    out.sort_by_key(|(at, _)| *at);
    Ok((out.into_iter().map(|(_, o)| o).collect(), cfg.cancelled()))
}

/// With `--until-decided`, a scenario's sequential comparison: its baseline, and the levels
/// the gate holds it to (m: the scenarios of this sweep that have a baseline).
fn sequential_tally(
    cfg: &RunConfig,
    scenarios: &[Scenario],
    s: &Scenario,
) -> Option<sweep::SeqTally> {
    let seq = cfg.sequential.as_ref()?;
    let base = *seq.baseline.get(&s.id)?;
    let m = scenarios
        .iter()
        .filter(|s| seq.baseline.contains_key(&s.id))
        .count()
        .max(1);
    let half = seq.alpha * crate::report::gate::SCENARIO_SHARE;
    Some(sweep::SeqTally {
        base,
        strict: half / m as f64,
        lenient: half,
        seen: Mutex::new(sweep::Seen::default()),
        late: Default::default(),
    })
}

/// How many runs a sweep of `scenarios` makes (with `runs` overriding each scenario's
/// count, and only `shard`'s share). Holds nothing per run; a stop request ends the count
/// early.
pub(crate) fn planned_runs(
    scenarios: &[Scenario],
    runs: Option<u32>,
    shard: Option<Shard>,
    stop: &Interrupt,
) -> u64 {
    scenarios
        .iter()
        .map(|s| u64::from(sweep::count(&s.id, runs.unwrap_or(s.runs), shard, stop)))
        .sum()
}

/// Whether a core is idle beyond `workers` busy lanes: the CPU count less the lanes and the
/// threads other processes have running right now (`/proc/loadavg`'s runnable count less
/// this process's own). The load average would count this very process's last sweep: a
/// benchmark or a CI job running sweeps back to back would never find a core to spare.
fn spare_core(workers: usize) -> bool {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    // The fewest seen over a few samples: a thread that wakes for a moment is no load.
    let sample = || Some(runnable_on_machine()?.saturating_sub(runnable_here()?));
    let busy = match (0..5)
        .map(|i| {
            if i > 0 {
                std::thread::sleep(std::time::Duration::from_micros(400));
            }
            sample()
        })
        .collect::<Option<Vec<usize>>>()
        .and_then(|seen| seen.into_iter().min())
    {
        Some(busy) => busy,
        None => {
            let mut load = [0f64; 1];
            // SAFETY: `getloadavg` writes at most `nelem` (1) values into the buffer it is given.
            let read = unsafe { libc::getloadavg(load.as_mut_ptr(), 1) };
            if read == 1 {
                load[0].round() as usize
            } else {
                cores
            }
        }
    };
    cores.saturating_sub(busy).saturating_sub(workers) >= 1
}

/// A small kernel file's text (at most 512 bytes).
fn proc_text(path: &std::path::Path) -> Option<String> {
    use std::io::Read;
    let mut text = String::new();
    std::fs::File::open(path)
        .ok()?
        .take(512)
        .read_to_string(&mut text)
        .ok()?;
    Some(text)
}

/// Threads runnable on the machine at this instant (Linux): `/proc/loadavg`'s fourth field
/// is `running/total`.
fn runnable_on_machine() -> Option<usize> {
    let text = proc_text("/proc/loadavg".as_ref())?;
    let field = text.split_whitespace().nth(3)?;
    field.split_once('/')?.0.parse().ok()
}

/// This process's threads that are runnable at this instant (Linux).
fn runnable_here() -> Option<usize> {
    let mut running = 0;
    for task in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        // "tid (comm) S ...": the state follows the last parenthesis (comm may hold any).
        let Some(stat) = proc_text(&task.path().join("stat")) else {
            continue;
        };
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next());
        running += usize::from(state == Some("R"));
    }
    Some(running)
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

/// The lock if nobody holds it (a poisoned one counts as free).
fn try_lock<T: ?Sized>(m: &Mutex<T>) -> Option<std::sync::MutexGuard<'_, T>> {
    match m.try_lock() {
        Ok(g) => Some(g),
        Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
        Err(std::sync::TryLockError::WouldBlock) => None,
    }
}

/// The lock once nobody holds it, waiting at most `patience` (a poisoned one counts as
/// free).
fn lock_within<T: ?Sized>(
    m: &Mutex<T>,
    patience: std::time::Duration,
) -> Option<std::sync::MutexGuard<'_, T>> {
    let until = std::time::Instant::now() + patience;
    loop {
        if let Some(g) = try_lock(m) {
            return Some(g);
        }
        if std::time::Instant::now() >= until {
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// Why a run did not pass, in one line; `None` when it passed.
fn problem(score: &Score) -> Option<String> {
    use windtunnel_model::Verdict;
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::Value;

    use super::*;
    use windtunnel_model::Trace;

    use crate::hooks::dispatch::Session;
    use crate::hooks::{Artifact, RunHookOutput};
    use crate::pack::Pack;
    use crate::runtime::{AgentHandle, TurnCtx};

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
            t: &Arc<Trace>,
            _: &Arc<Score>,
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
            t: &Arc<Trace>,
            _: &Arc<Score>,
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
        let runs = crate::report::load_runs(&[dir.path()]).unwrap();
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

    /// Converses about an order at `on_run_scored`, keeping the reply.
    #[derive(Default)]
    struct AsksAgain {
        replies: Mutex<Vec<String>>,
    }

    impl RunObserver for AsksAgain {
        fn on_run_scored(
            &self,
            _: &Scenario,
            _: &AgentConfig,
            _: &Arc<Trace>,
            _: &Arc<Score>,
            session: &dyn Session,
        ) -> RunHookOutput {
            let reply = session
                .converse("asks", "And order 9012?", Duration::from_secs(5))
                .unwrap_or_else(|e| format!("error: {e}"));
            self.replies.lock().unwrap().push(reply);
            RunHookOutput::default()
        }
    }

    #[test]
    fn a_converse_turn_acts_on_the_runs_world_after_it_was_observed() {
        // The world's final state moves into the trace when the run is observed; a converse
        // turn's tool calls must still find the world as the run left it.
        let dir = tempfile::tempdir().unwrap();
        let scenarios: Vec<Scenario> = Pack::demo()
            .scenarios
            .into_iter()
            .filter(|s| s.id == "order-status")
            .collect();
        let asks = Arc::new(AsksAgain::default());
        let mut cfg = RunConfig::new(runtime::builtin_agent("demo").unwrap(), dir.path());
        cfg.observer = asks.clone();
        cfg.runs = Some(1);
        let sweep = Sweep::new(&cfg);
        let result = run_sweep(&scenarios, &cfg, &sweep).unwrap();
        assert_eq!(result.exit_code(), 0);
        let replies = asks.replies.lock().unwrap().clone();
        assert_eq!(replies.len(), 1);
        assert!(replies[0].contains("processing"), "{replies:?}");
        // And the trace keeps the final state it was scored on.
        let runs = crate::report::load_runs(&[dir.path()]).unwrap();
        let world = runs[0].0.world.as_ref().unwrap();
        assert_eq!(world.after["orders"]["9012"]["status"], "processing");
        assert_eq!(world.before, world.after);
    }

    #[test]
    fn every_file_of_a_sweep_at_the_default_jobs_is_what_serde_json_writes() {
        // Under the settings users run with (the whole demo pack, the default lanes) every
        // byte of a trace, a score and a journal line is serde_json's: nothing of a sweep is
        // written by hand or spliced from pieces.
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = RunConfig::new(runtime::builtin_agent("demo").unwrap(), dir.path());
        cfg.runs = Some(4);
        // `wt run`'s default for the demo agent: one lane per CPU (at least two here).
        cfg.jobs = std::thread::available_parallelism().map_or(2, |n| n.get().max(2));
        let sweep = Sweep::new(&cfg);
        let result = run_sweep(&Pack::demo().scenarios, &cfg, &sweep).unwrap();
        assert_eq!(result.exit_code(), 0);
        let runs = crate::report::load_runs(&[dir.path()]).unwrap();
        assert_eq!(runs.len(), 12);
        for (trace, score, path) in &runs {
            let plain = serde_json::to_string_pretty(trace).unwrap() + "\n";
            assert_eq!(std::fs::read_to_string(path).unwrap(), plain, "{path:?}");
            let score_file = path.with_extension("score.json");
            let plain = serde_json::to_string_pretty(score).unwrap() + "\n";
            assert_eq!(std::fs::read_to_string(&score_file).unwrap(), plain);
        }
        let journal = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.to_string_lossy().ends_with(".events.jsonl"))
            .unwrap();
        let text = std::fs::read_to_string(&journal).unwrap();
        assert!(text.lines().count() > 12 * 5);
        for line in text.lines() {
            let value: serde_json::Value = serde_json::from_str(line).unwrap();
            assert_eq!(serde_json::to_string(&value).unwrap(), line);
        }
    }

    #[test]
    fn a_lane_hands_each_run_the_starting_world_whatever_the_run_before_did_to_it() {
        // A lane lends its runs the starting state (and the last run's final state, when no
        // tool wrote to it) and writes both from one rendering: a run that writes must not
        // leak into the next, and every trace must be what serde writes for it.
        let dir = tempfile::tempdir().unwrap();
        let demo = Pack::demo();
        let start = |id: &str| {
            demo.scenarios
                .iter()
                .find(|s| s.id == id)
                .and_then(|s| s.world.clone())
                .unwrap()
        };
        let scenarios: Vec<Scenario> = demo
            .scenarios
            .iter()
            .filter(|s| s.id == "refund-damaged" || s.id == "order-status")
            .cloned()
            .collect();
        let mut cfg = RunConfig::new(runtime::builtin_agent("demo").unwrap(), dir.path());
        cfg.runs = Some(3);
        cfg.jobs = 1;
        let sweep = Sweep::new(&cfg);
        let result = run_sweep(&scenarios, &cfg, &sweep).unwrap();
        assert_eq!(result.exit_code(), 0);
        let runs = crate::report::load_runs(&[dir.path()]).unwrap();
        assert_eq!(runs.len(), 6);
        for (trace, score, path) in &runs {
            // The score as serde_json writes it, too.
            let score_file = path.with_extension("score.json");
            let mut plain = serde_json::to_string_pretty(score).unwrap();
            plain.push('\n');
            assert_eq!(
                std::fs::read_to_string(&score_file).unwrap(),
                plain,
                "{score_file:?}"
            );
            let world = trace.world.as_ref().unwrap();
            assert_eq!(world.before, start(&trace.scenario_id), "{path:?}");
            if trace.scenario_id == "refund-damaged" {
                assert_eq!(world.after["refunds"].as_array().unwrap().len(), 1);
                assert_ne!(world.after, world.before);
            } else {
                assert_eq!(world.after, world.before);
            }
            let mut plain = serde_json::to_string_pretty(trace).unwrap();
            plain.push('\n');
            assert_eq!(std::fs::read_to_string(path).unwrap(), plain, "{path:?}");
        }
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
        let runs = crate::report::load_runs(&[dir.path()]).unwrap();
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
        agent.settings = runtime::Settings::Http(runtime::agent::Http {
            endpoint: Some("http://127.0.0.1:9".into()),
            ..Default::default()
        });
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
