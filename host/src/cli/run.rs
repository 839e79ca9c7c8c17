//! `wt run`: load the pack and agent, run the sweep, show progress and a summary, and end
//! with the exit code of the worst run (see [`crate::exit`]).

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use windtunnel_model::{LAYERS, Scenario, Trace, Verdict};

use crate::clock::{Clock, Ids};
use crate::deadlines::Deadlines;
use crate::events::{self, Emitted, LiveLines, Sink};
use crate::exit::CodedError;
use crate::hooks::dispatch::Dispatcher;
use crate::hooks::observer::HookObserver;
use crate::hooks::registry::Source;
use crate::hooks::{NoopObserver, RunObserver};
use crate::interrupt::{self, Interrupt, SweepGuard};
use crate::limits::HookCaps;
use crate::pack::Pack;
use crate::report::SweepRuns;
use crate::runner::{self, RunConfig, Shard, Sweep};
use crate::term;
use crate::{runtime, store};

/// Options of `wt run`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct RunArgs {
    /// Pack directory (`pack.toml` + `scenarios/*.toml`); the embedded demo pack by default.
    #[arg(long, value_name = "DIR", env = "WT_PACK")]
    pub pack: Option<PathBuf>,
    /// Agent config file (TOML) or a built-in agent: demo, demo-leaky, demo-forbidden-tool,
    /// demo-slow, demo-garbled.
    #[arg(
        long,
        value_name = "FILE|NAME",
        default_value = "demo",
        env = "WT_AGENT"
    )]
    pub agent: String,
    /// Runs per scenario (overrides each scenario's `runs`).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub runs: Option<u32>,
    /// Lanes in parallel: a scenario's runs spread over lanes where the runtime's sessions
    /// are independent (demo, openai; http with `max_sessions`), and scenarios run side by
    /// side [default: the CPU count for the demo agent, 16 for network runtimes].
    #[arg(long, short = 'j', value_name = "N", env = "WT_JOBS", value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub jobs: Option<u32>,
    /// Run only shard K of N: a stable subset of the sweep's (scenario, run index) pairs.
    /// N shards on N machines run each pair once; `wt report DIR...` merges them.
    #[arg(long, value_name = "K/N", env = "WT_SHARD", value_parser = Shard::parse)]
    pub shard: Option<Shard>,
    /// Only scenarios whose id matches (glob with `*`/`?`, else substring).
    #[arg(long, value_name = "PATTERN")]
    pub filter: Option<String>,
    /// Directory for traces and score sidecars.
    #[arg(long, value_name = "DIR", default_value = "runs", env = "WT_OUT")]
    pub out: PathBuf,
    /// Confine every process a run starts (agents, world servers): `auto` with what the
    /// kernel offers, `require` or refuse to run, `off` not at all (docs/sandbox.md).
    #[arg(
        long,
        value_enum,
        value_name = "MODE",
        default_value = "auto",
        env = "WT_SANDBOX"
    )]
    pub sandbox: crate::sandbox::Mode,
    /// Also write a JUnit XML report of this sweep.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    /// Derive every id from this seed (with WT_FIXED_CLOCK, sweeps become byte-identical).
    #[arg(long, value_name = "N", env = "WT_SEED")]
    pub seed: Option<u64>,
    /// Continue the sweep last written into `--out`: make only its runs that have no
    /// committed trace there (and, with `--retry-errors`, its ERROR runs again). Refused
    /// unless pack, agent, seed, runs, shard, filter and hooks are the sweep's.
    #[arg(long, conflicts_with = "until_decided")]
    pub resume: bool,
    /// Make a run that ended ERROR on the wiring or harness rung (an endpoint down, a
    /// timeout, a 5xx, a simulated user's or judge's model that failed) again, up to N
    /// times, waiting `WT_RETRY_BACKOFF_S` (default 1 s, doubling, at most a minute) before each; a FAIL is
    /// never retried.
    #[arg(long, value_name = "N", default_value_t = 0, env = "WT_RETRY_ERRORS", value_parser = clap::value_parser!(u32).range(0..=20))]
    pub retry_errors: u32,
    /// The baseline run directory `--until-decided` compares with.
    #[arg(long, value_name = "DIR", requires = "until_decided")]
    pub baseline: Option<PathBuf>,
    /// Stop each scenario's runs as soon as its comparison with `--baseline` is decided —
    /// regressed, or not, whatever its remaining runs would do — making at most
    /// `--max-runs` runs of it. Close scenarios get every run; clear ones stop early.
    #[arg(long, requires = "baseline", conflicts_with_all = ["runs", "shard"])]
    pub until_decided: bool,
    /// With `--until-decided`: the most runs of each scenario (the fixed design it stops
    /// early), 1 to 10,000 (each look's exact test costs time in proportion).
    #[arg(long, value_name = "N", default_value_t = 20, requires = "until_decided", value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub max_runs: u32,
    /// With `--until-decided`: decide against a baseline that is incomplete (a shard or a
    /// sweep's end missing), on the runs it has; refused otherwise (exit 3).
    #[arg(long, requires = "until_decided")]
    pub allow_missing: bool,
    /// With `--until-decided`: accept a baseline whose runs name another pack (refused
    /// otherwise, exit 2: scenarios of the same id in other packs are other tests).
    #[arg(long, requires = "until_decided")]
    pub allow_other_pack: bool,
    /// Activate a hook (built-in or plugin); repeatable, fires in flag order. No --hook
    /// means no hooks at all.
    #[arg(long = "hook", value_name = "NAME", help_heading = "Hooks")]
    pub hooks: Vec<String>,
    #[command(flatten, next_help_heading = "Hooks")]
    pub plugin_dirs: crate::cli::hooks::PluginDirArgs,
    #[command(flatten, next_help_heading = "Hooks")]
    pub isolation: crate::cli::hooks::IsolationArgs,
    /// The policy revision stamped into every trace; required when a guard is active,
    /// refused when none is.
    #[arg(long, value_name = "REV", help_heading = "Hooks")]
    pub policy_revision: Option<String>,
    /// Stream the event journal live: `-` for stdout, or a file path. The journal is always
    /// written to `<out>/<sweep_stem>.events.jsonl` too.
    #[arg(long, value_name = "-|FILE")]
    pub events: Option<PathBuf>,
    #[command(flatten, next_help_heading = "Simulated users and judges")]
    pub models: ModelArgs,
}

/// The harness's own models (simulated users, judges).
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ModelArgs {
    /// `[models.<name>]` tables that replace (or add to) the pack's, e.g. to run a pack's
    /// simulated users and judges on another provider without editing it.
    #[arg(long = "models", value_name = "FILE", env = "WT_MODELS")]
    pub file: Option<PathBuf>,
}

impl ModelArgs {
    /// The models the pack's scenarios name, built and sealed; exit 2 on any problem.
    ///
    /// # Safety
    ///
    /// As [`crate::secrets::seal_env`]: no other thread may be reading the environment.
    pub(crate) unsafe fn build(&self, pack: &Pack) -> anyhow::Result<Arc<runtime::models::Models>> {
        // SAFETY: passed on to the caller.
        let models = unsafe { runtime::models::for_pack(pack, self.file.as_deref()) }
            .map_err(|e| CodedError::usage(e.to_string()))?;
        Ok(Arc::new(models))
    }
}

/// The active hooks of this invocation, checked before anything is provisioned: names
/// resolve (plugins load, one instance per lane), deadlines and caps parse, and the
/// policy-revision rule holds.
struct Hooks {
    observer: Option<Arc<HookObserver>>,
    provenance: Option<Vec<windtunnel_model::HookProvenance>>,
    /// The plugin hooks that run inside the sweep's process.
    in_process: Vec<String>,
}

fn hooks(
    args: &RunArgs,
    secrets: &mut crate::secrets::Redactor,
    stop: &Arc<Interrupt>,
    lanes: usize,
    sweep: &Sweep,
) -> anyhow::Result<Hooks> {
    let deadlines = Deadlines::from_env().map_err(CodedError::usage)?;
    let caps = HookCaps::from_env().map_err(CodedError::usage)?;
    let active = crate::cli::hooks::activate(
        &args.hooks,
        &args.plugin_dirs,
        &args.isolation,
        Some((&args.out, &sweep.stem)),
    )?;
    if active.len() > Dispatcher::MAX_HOOKS {
        return Err(CodedError::usage(format!(
            "{} hooks activated; at most {} can be active at once",
            active.len(),
            Dispatcher::MAX_HOOKS
        ))
        .into());
    }
    let guards: Vec<&str> = active
        .iter()
        .filter(|h| h.declares(windtunnel_abi::point::GUARD_CHECK))
        .map(|h| h.name.as_str())
        .collect();
    match (&args.policy_revision, guards.is_empty()) {
        (Some(rev), _) if rev.trim().is_empty() => {
            return Err(CodedError::usage("--policy-revision must not be empty").into());
        }
        (None, false) => {
            return Err(CodedError::usage(format!(
                "guard(s) {} active: --policy-revision REV is required",
                guards.join(", ")
            ))
            .into());
        }
        (Some(_), true) => {
            return Err(
                CodedError::usage("--policy-revision given but no active hook is a guard").into(),
            );
        }
        _ => {}
    }
    if active.is_empty() {
        return Ok(Hooks {
            observer: None,
            provenance: None,
            in_process: Vec::new(),
        });
    }
    for h in &active {
        secrets.extend(&crate::hooks::registry::hook_secrets(&h.name));
    }
    let provenance = active.iter().map(|h| h.provenance()).collect();
    let in_process = active
        .iter()
        .filter(|h| !h.is_isolated() && matches!(h.source, Source::Plugin(_)))
        .map(|h| h.name.clone())
        .collect();
    let dispatcher = Arc::new(
        Dispatcher::new(active, deadlines)
            .with_caps(caps)
            .with_secrets(secrets)
            .with_stop(stop.clone()),
    );
    let mut observer = HookObserver::new(dispatcher);
    observer
        .prepare_lanes(lanes)
        .map_err(|e| CodedError::usage(format!("cannot give each lane its hooks: {e}")))?;
    Ok(Hooks {
        observer: Some(Arc::new(observer)),
        provenance: Some(provenance),
        in_process,
    })
}

fn journal_sink(
    events: &Option<PathBuf>,
) -> anyhow::Result<Option<Box<dyn std::io::Write + Send>>> {
    Ok(match events {
        None => None,
        Some(p) if p.as_os_str() == "-" => Some(Box::new(std::io::stdout())),
        Some(p) => Some(Box::new(
            fs_err::File::create(p).map_err(|e| CodedError::usage(format!("--events: {e}")))?,
        )),
    })
}

fn load_pack(args: &RunArgs) -> anyhow::Result<Pack> {
    let mut pack = match &args.pack {
        Some(dir) => {
            Pack::load(dir).map_err(|e| CodedError::usage(format!("invalid pack: {e}")))?
        }
        None => Pack::demo(),
    };
    if let Some(pattern) = &args.filter {
        pack.filter(pattern);
        if pack.scenarios.is_empty() {
            return Err(CodedError::usage(format!(
                "no scenario in pack {} matches --filter {pattern:?}",
                pack.source
            ))
            .into());
        }
    }
    Ok(pack)
}

pub(crate) fn run(args: RunArgs) -> anyhow::Result<u8> {
    // Everything that can be wrong with the invocation is found before anything is written.
    crate::sandbox::set_mode(args.sandbox);
    if args.sandbox == crate::sandbox::Mode::Require {
        let missing = crate::sandbox::kernel().missing();
        if !missing.is_empty() {
            return Err(CodedError::usage(format!(
                "--sandbox require: this machine cannot enforce {} (--sandbox auto enforces what it can, and says what it did not)",
                missing.join("; ")
            ))
            .into());
        }
    }
    let pack = load_pack(&args)?;
    let agent =
        runtime::resolve_agent(&args.agent).map_err(|e| CodedError::usage(e.to_string()))?;
    // SAFETY: nothing but this thread runs yet: no runtime, plugin, signal handler or
    // MCP server has been started.
    unsafe { runtime::seal_secrets(&agent) };
    // SAFETY: as above.
    let models = unsafe { args.models.build(&pack) }?;
    runtime::validate_agent(&agent)
        .map_err(|e| CodedError::usage(format!("agent `{}`: {e}", agent.label)))?;
    if !agent.reaches_world() {
        crate::pack::check_reachable(&pack, &agent.label).map_err(CodedError::usage)?;
    }
    let rt = runtime::for_agent(&agent)
        .map_err(|e| CodedError::usage(format!("agent `{}`: {e}", agent.label)))?;
    let clock = Clock::from_env().map_err(|e| CodedError::usage(e.to_string()))?;
    let grace = interrupt::grace_from_env().map_err(CodedError::usage)?;
    let stop = Interrupt::new();
    let jobs = args
        .jobs
        .map_or_else(|| rt.default_jobs(), |j| j as usize)
        .max(1);
    // Signals are honoured from here on, through planning and loading hooks: a stop
    // requested before the first run starts none.
    if let Err(e) = interrupt::install(stop.clone(), grace) {
        tracing::warn!("cannot handle Ctrl-C, SIGTERM and SIGHUP: {e}");
    }
    let sequential = sequential(&args, &pack)?;
    // The runs directory is checked before hooks load and before the sweep is announced.
    store::check_runs_dir(&args.out, "--out").map_err(CodedError::usage)?;
    let runs = if args.until_decided {
        Some(args.max_runs)
    } else {
        args.runs
    };
    let retry_backoff = retry_backoff_from_env().map_err(CodedError::usage)?;
    let ids = args.seed.map_or_else(Ids::random, Ids::seeded);
    let identity = runner::SweepIdentity::of(&runner::Identified {
        pack_name: &pack.manifest.name,
        scenarios: &pack.scenarios,
        agent: &agent,
        models: &models,
        ids: &ids,
        runs,
        filter: args.filter.as_deref(),
        until_decided: args.until_decided,
    });
    // A resumed sweep is held to the sweep it continues before anything is written.
    let resume = if args.resume {
        let asked = runner::Asked {
            identity: &identity,
            agent: &agent.label,
            shard: args.shard,
            hooks: &args.hooks,
            policy_revision: args.policy_revision.as_deref(),
            retry_errors: args.retry_errors > 0,
        };
        let r =
            runner::Resume::open(&args.out, &pack.scenarios, &asked).map_err(CodedError::usage)?;
        for note in &r.notes {
            term::err_line(&format!("wt: resume: {note}"));
        }
        Some(r)
    } else {
        None
    };
    let planned = runner::planned_runs(&pack.scenarios, runs, args.shard, &stop)
        .saturating_sub(resume.as_ref().map_or(0, |r| r.standing_runs()));
    let lanes = usize::try_from(planned).unwrap_or(usize::MAX);
    // The sweep's identity comes first: isolated hooks' logs are named by its stem.
    let sweep = match &resume {
        Some(r) => r.sweep.clone(),
        None => Sweep::start(&clock, &ids),
    };
    // One redactor for the whole invocation: the agent's secrets, the harness's models',
    // the hooks'. Everything the sweep writes or prints passes through it.
    let mut secrets = runtime::redactor(&agent);
    secrets.extend(&runtime::models::redactor(&models));
    let hooks = hooks(&args, &mut secrets, &stop, jobs.min(lanes).max(1), &sweep)?;
    let observer: Arc<dyn RunObserver> = match &hooks.observer {
        Some(o) => o.clone(),
        None => Arc::new(NoopObserver),
    };
    // Every output is checked before the first run: a path that cannot be written would
    // otherwise be found only after the whole sweep.
    if let Some(path) = &args.junit {
        // A report inside the runs directory (`--junit runs/junit.xml`): that directory is
        // the sweep's to create, so it is created now.
        if path.parent().is_some_and(|p| p.starts_with(&args.out)) {
            store::ensure_dir(&args.out)?;
        }
        store::check_output(path, "--junit").map_err(CodedError::usage)?;
    }
    let live = journal_sink(&args.events)?;
    let total = planned;
    // The consumers of the sweep's event stream: the journal is the runner's own; the live
    // copy, the terminal and JUnit are ours.
    let mut cfg = RunConfig::new(agent, args.out.clone());
    if let Some(live) = live {
        cfg.sinks.push(Arc::new(LiveLines::new(live)));
    }
    cfg.sinks.push(Arc::new(CliProgress::new(total)));
    let junit = args.junit.as_ref().map(|_| Arc::new(SweepRuns::default()));
    if let Some(j) = &junit {
        cfg.sinks.push(j.clone());
    }
    cfg.pack_name = pack.manifest.name.clone();
    cfg.models = models;
    cfg.redactor = Arc::new(secrets);
    cfg.runs = runs;
    cfg.sequential = sequential;
    cfg.jobs = jobs;
    cfg.clock = clock;
    cfg.ids = ids;
    cfg.observer = observer;
    cfg.policy_revision = args.policy_revision.clone();
    cfg.hooks = hooks.provenance.clone();
    cfg.stop = stop.clone();
    cfg.shard = args.shard;
    cfg.filter = args.filter.clone();
    cfg.retry_errors = args.retry_errors;
    cfg.retry_backoff = retry_backoff;
    cfg.resume = resume;
    // From here until the summary, an exit that does not come through this function is an
    // aborted sweep, never a pass.
    let suspects: Vec<&str> = hooks.in_process.iter().map(String::as_str).collect();
    let guard = SweepGuard::enter(&suspects);
    let what = match &cfg.resume {
        Some(r) => format!("resuming sweep {}: ", r.sweep.id),
        None => String::new(),
    };
    term::err_line(&format!(
        "wt: {what}{} scenario(s), {total} run(s) of pack {} on agent `{}` → {}",
        pack.scenarios.len(),
        pack.manifest.name,
        cfg.agent.label,
        args.out.display()
    ));
    let result = runner::run_sweep_on(rt.as_ref(), &pack.scenarios, &cfg, &sweep)?;
    if let Some(e) = &result.journal_error {
        term::err_line(&format!("warning: event journal incomplete: {e}"));
    }
    print_summary(&pack.scenarios, &result, &args);
    if args.until_decided {
        print_sequential(&result, &args);
    }
    if let (Some(path), Some(junit)) = (&args.junit, &junit) {
        // This sweep's own runs, as they were scored, and the scenarios it could not run:
        // nothing else in --out counts.
        store::write_atomic(
            path,
            crate::cli::report::for_reader(junit.report().to_junit()).as_bytes(),
        )
        .with_context(|| format!("write JUnit report {}", path.display()))?;
    }
    drop(guard);
    if stop.requested() {
        term::err_line(&format!(
            "wt: interrupted by {}; every run that started was written",
            interrupt::signal_name(stop.signal())
        ));
        return Ok(crate::exit::INTERRUPTED);
    }
    Ok(result.exit_code())
}

/// `WT_RETRY_BACKOFF_S`: the wait before a run's first retry (seconds, 0 to 24 h; 1 unset).
fn retry_backoff_from_env() -> Result<Duration, String> {
    crate::deadlines::seconds_from_env("WT_RETRY_BACKOFF_S", 1.0, true)
}

/// `--until-decided`: the baseline's passes and runs per scenario of the pack. A scenario the
/// baseline does not have runs `--max-runs` times, with a warning. The baseline is held to the
/// gate's rules first: incomplete, it is refused (3) unless `--allow-missing`; of another
/// pack, refused (2) unless `--allow-other-pack`; a scenario edited since is named.
fn sequential(args: &RunArgs, pack: &Pack) -> anyhow::Result<Option<runner::Sequential>> {
    let Some(dir) = &args.baseline else {
        return Ok(None);
    };
    let base = crate::cli::report::load_report(&crate::cli::run_dirs(vec![dir.clone()])?)?;
    let shown = dir.display();
    if (!base.gaps.is_empty() || base.partial_sweeps().next().is_some()) && !args.allow_missing {
        return Err(CodedError {
            code: crate::exit::RUN_ERROR,
            message: format!(
                "--baseline {shown} is incomplete (why is said above): deciding against part of it would judge this sweep on fewer runs than the baseline had; run the missing part, or pass --allow-missing to decide against the runs it has"
            ),
        }
        .into());
    }
    let here = std::collections::BTreeSet::from([pack.manifest.name.clone()]);
    if let Some(why) =
        crate::report::compare::other_pack(("--baseline", &base.packs()), ("this sweep", &here))
    {
        if !args.allow_other_pack {
            return Err(CodedError::usage(format!(
                "{why}; --allow-other-pack decides against it anyway"
            ))
            .into());
        }
        term::err_line(&format!("warning: {why} (--allow-other-pack)"));
    }
    let digests: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> = pack
        .scenarios
        .iter()
        .map(|s| {
            (
                s.id.clone(),
                std::collections::BTreeSet::from([crate::pack::scenario_digest(s)]),
            )
        })
        .collect();
    for w in crate::report::compare::edited_scenarios(
        &base.ids.digests,
        &digests,
        "--baseline",
        "this pack",
    ) {
        term::err_line(&format!("warning: {w}"));
    }
    let mut baseline = std::collections::HashMap::new();
    for s in &base.scenarios {
        let a = &s.aggregate;
        baseline.insert(
            a.scenario_id.clone(),
            (u64::from(a.passed), u64::from(a.runs)),
        );
    }
    let missing: Vec<&str> = pack
        .scenarios
        .iter()
        .map(|s| s.id.as_str())
        .filter(|id| !baseline.contains_key(*id))
        .collect();
    if missing.len() == pack.scenarios.len() {
        return Err(CodedError::usage(format!(
            "--baseline {}: none of the pack's scenarios is in it",
            dir.display()
        ))
        .into());
    }
    if !missing.is_empty() {
        term::err_line(&format!(
            "warning: --baseline {} has no runs of {}: they run {} times, without stopping early",
            dir.display(),
            missing.join(", "),
            args.max_runs
        ));
    }
    Ok(Some(runner::Sequential {
        baseline,
        alpha: crate::report::REPORT_ALPHA,
    }))
}

/// `--until-decided`: where each scenario's comparison stood when its runs stopped, and the
/// runs that stopping saved.
fn print_sequential(result: &runner::SweepResult, args: &RunArgs) {
    let (mut made, mut planned) = (0u64, 0u64);
    term::err_line("until decided, against the baseline:");
    for s in &result.scenarios {
        let Some(q) = &s.sequential else { continue };
        made += q.runs + q.late;
        planned += q.planned;
        let decision = match q.decision {
            "regressed" => "regressed",
            "not_regressed" => "not regressed",
            "undetermined" => "undetermined (every run made; wt compare decides)",
            _ => "stopped before a decision",
        };
        let late = match q.late {
            0 => String::new(),
            n => format!("; {n} more were in flight when it was decided"),
        };
        term::err_line(&format!(
            "  {:<24} {decision} after {}/{} runs ({} passed{late})",
            s.aggregate.scenario_id, q.runs, q.planned, q.passed
        ));
    }
    if planned > 0 {
        term::err_line(&format!(
            "  {made} of {planned} planned runs made ({:.0}% saved); judge them with: wt compare {} {} --gate",
            100.0 * (planned - made.min(planned)) as f64 / planned as f64,
            args.baseline
                .as_ref()
                .map_or(String::new(), |b| b.display().to_string()),
            args.out.display()
        ));
    }
}

fn print_summary(scenarios: &[Scenario], result: &runner::SweepResult, args: &RunArgs) {
    let width = scenarios
        .iter()
        .map(|s| s.id.len())
        .max()
        .unwrap_or(8)
        .max(8);
    term::err_blank();
    for s in &result.scenarios {
        let a = &s.aggregate;
        let status = if a.error.is_some() || a.errored > 0 {
            "ERROR"
        } else if a.failed > 0 {
            "FAIL"
        } else {
            "PASS"
        };
        let layers: Vec<String> = LAYERS
            .iter()
            .filter_map(|l| a.layer_failures.get(*l).filter(|n| **n > 0).map(|n| (l, n)))
            .map(|(l, n)| format!("{l} ×{n}"))
            .collect();
        let mut why = String::new();
        if status == "FAIL" {
            why = layers.join(", ");
        }
        if let Some(p) = &s.first_problem {
            // The start says what failed, the end why (a server's last line of stderr).
            let p = term::head_and_end(p, 160);
            why = if why.is_empty() {
                p
            } else {
                format!("{why} — e.g. {p}")
            };
        }
        term::err_line(&format!(
            "{:<width$}  {:>7}  {status:<5}  {}",
            a.scenario_id,
            format!("{}/{}", a.passed, a.runs),
            why
        ));
    }
    let (runs, passed) = result.scenarios.iter().fold((0, 0), |(r, p), s| {
        (r + s.aggregate.runs, p + s.aggregate.passed)
    });
    term::err_blank();
    term::err_line(&format!(
        "{passed}/{runs} runs passed; traces in {} (details: wt report {})",
        args.out.display(),
        args.out.display()
    ));
}

/// Progress on stderr, from the sweep's event stream: a bar on a terminal, plain counter
/// lines otherwise; every run that did not pass, every scenario that could not run, every
/// warning.
struct CliProgress {
    bar: Option<ProgressBar>,
    done: AtomicU64,
    total: u64,
    last_line: Mutex<Instant>,
}

impl CliProgress {
    fn new(total: u64) -> Self {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::new(total);
            bar.set_style(
                ProgressStyle::with_template("{bar:30} {pos}/{len} runs  {elapsed_precise}  {msg}")
                    .expect("valid template"),
            );
            bar
        });
        CliProgress {
            bar,
            done: AtomicU64::new(0),
            total,
            last_line: Mutex::new(Instant::now() - Duration::from_secs(1)),
        }
    }

    fn line(&self, line: String) {
        match &self.bar {
            Some(bar) => bar.println(term::sanitize(&line)),
            None => term::err_line(&line),
        }
    }

    /// Whether a plain progress line for a passing run is due (at most one per 200 ms).
    fn due(&self) -> bool {
        let mut last = self
            .last_line
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if last.elapsed() >= Duration::from_millis(200) {
            *last = Instant::now();
            true
        } else {
            false
        }
    }

    fn run_done(&self, scenario: &str, trace: &Trace, score: &windtunnel_model::Score) {
        let run_index = trace.run_index;
        let n = self.done.fetch_add(1, Ordering::Relaxed) + 1;
        match &self.bar {
            Some(bar) => {
                bar.inc(1);
                if score.verdict != Verdict::Pass {
                    let why = score
                        .error
                        .clone()
                        .unwrap_or_else(|| score.failed_layers().join(", "));
                    self.line(format!("{} {scenario} #{run_index}: {why}", score.verdict));
                }
            }
            None => {
                let why = match (&score.error, score.verdict) {
                    (Some(e), _) => format!(": {e}"),
                    (None, Verdict::Fail) => {
                        format!(": {} failed", score.failed_layers().join(", "))
                    }
                    _ => String::new(),
                };
                // Every non-pass, the last run, and passes at most every 200 ms.
                if score.verdict != Verdict::Pass || n == self.total || self.due() {
                    self.line(format!(
                        "[{n}/{}] {scenario} #{run_index} {}{why}",
                        self.total, score.verdict
                    ));
                }
            }
        }
    }
}

impl Sink for CliProgress {
    fn event(&self, e: &Emitted<'_>) {
        let scenario = e.scope.scenario_id.as_deref();
        match (e.event, e.run) {
            (events::Event::RunEnded { .. }, Some(run)) => {
                self.run_done(scenario.unwrap_or_default(), run.trace, run.score);
            }
            (
                events::Event::ScenarioEnded {
                    runs,
                    error: Some(error),
                    ..
                },
                _,
            ) => {
                self.done.fetch_add(u64::from(*runs), Ordering::Relaxed);
                if let Some(bar) = &self.bar {
                    bar.inc(u64::from(*runs));
                }
                self.line(format!("ERROR {}: {error}", scenario.unwrap_or_default()));
            }
            (events::Event::Warning { message }, _) => match scenario {
                Some(scenario) => self.line(format!("warning: {scenario}: {message}")),
                None => self.line(format!("warning: {message}")),
            },
            _ => {}
        }
        if self.done.load(Ordering::Relaxed) >= self.total
            && let Some(bar) = &self.bar
        {
            bar.finish_and_clear();
        }
    }
}
