//! `wt run`: load the pack and agent, run the sweep, show progress and a summary, and end
//! with the exit code of the worst run (see [`crate::exit`]).

use std::io::IsTerminal;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use windtunnel_sdk::model::{LAYERS, Scenario, Verdict};

use crate::clock::{Clock, Ids};
use crate::deadlines::Deadlines;
use crate::dispatch::Dispatcher;
use crate::events::{self, Journal, Scope};
use crate::exit::CodedError;
use crate::hooks::observer::HookObserver;
use crate::pack::Pack;
use crate::report::Report;
use crate::runner::{self, Event, NoopObserver, Progress, RunConfig, RunObserver, Sweep};
use crate::{runtime, store};

/// Options of `wt run`.
#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
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
    /// Scenarios run in parallel [default: CPU count, at most 8].
    #[arg(long, short = 'j', value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub jobs: Option<u32>,
    /// Only scenarios whose id matches (glob with `*`/`?`, else substring).
    #[arg(long, value_name = "PATTERN")]
    pub filter: Option<String>,
    /// Directory for traces and score sidecars.
    #[arg(long, value_name = "DIR", default_value = "runs", env = "WT_OUT")]
    pub out: PathBuf,
    /// Also write a JUnit XML report of this sweep.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    /// Derive every id from this seed (with WT_FIXED_CLOCK, sweeps become byte-identical).
    #[arg(long, value_name = "N", env = "WT_SEED")]
    pub seed: Option<u64>,
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
    /// written to `<out>/<sweep_ts>.events.jsonl` too.
    #[arg(long, value_name = "-|FILE")]
    pub events: Option<PathBuf>,
}

/// The active hooks of this invocation, checked before anything is provisioned: names
/// resolve (plugins load), deadlines parse, and the policy-revision rule holds.
struct Hooks {
    observer: Option<Arc<HookObserver>>,
    provenance: Option<Vec<windtunnel_sdk::model::HookProvenance>>,
}

fn hooks(args: &RunArgs) -> anyhow::Result<Hooks> {
    let deadlines = Deadlines::from_env().map_err(CodedError::usage)?;
    let active = crate::cli::hooks::activate(
        &args.hooks,
        &args.plugin_dirs,
        &args.isolation,
        Some(&args.out),
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
        });
    }
    let provenance = active.iter().map(|h| h.provenance()).collect();
    let dispatcher = Arc::new(Dispatcher::new(active, deadlines));
    Ok(Hooks {
        observer: Some(Arc::new(HookObserver::new(dispatcher))),
        provenance: Some(provenance),
    })
}

fn journal_sink(events: &Option<PathBuf>) -> anyhow::Result<Option<Box<dyn Write + Send>>> {
    Ok(match events {
        None => None,
        Some(p) if p.as_os_str() == "-" => Some(Box::new(std::io::stdout())),
        Some(p) => Some(Box::new(
            fs_err::File::create(p).map_err(|e| CodedError::usage(e.to_string()))?,
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

pub fn run(args: RunArgs) -> anyhow::Result<u8> {
    let pack = load_pack(&args)?;
    let agent =
        runtime::resolve_agent(&args.agent).map_err(|e| CodedError::usage(e.to_string()))?;
    let clock = Clock::from_env().map_err(|e| CodedError::usage(e.to_string()))?;
    let hooks = hooks(&args)?;
    let observer: Arc<dyn RunObserver> = match &hooks.observer {
        Some(o) => o.clone(),
        None => Arc::new(NoopObserver),
    };
    let live = journal_sink(&args.events)?;
    let cancel = interrupt_flag();
    let jobs = args.jobs.map_or_else(
        || std::thread::available_parallelism().map_or(1, |n| n.get().min(8)),
        |j| j as usize,
    );
    let total: u64 = pack
        .scenarios
        .iter()
        .map(|s| u64::from(args.runs.unwrap_or(s.runs)))
        .sum();
    let cfg = RunConfig {
        agent,
        out_dir: args.out.clone(),
        runs: args.runs,
        jobs,
        clock,
        ids: args.seed.map_or_else(Ids::random, Ids::seeded),
        observer,
        progress: Arc::new(CliProgress::new(total)),
        policy_revision: args.policy_revision.clone(),
        hooks: hooks.provenance.clone(),
        journal: None,
        cancel: cancel.clone(),
    };
    let sweep = Sweep::new(&cfg);
    store::ensure_dir(&cfg.out_dir)?;
    let journal_clock = cfg.clock;
    let journal = Journal::create(
        &cfg.out_dir,
        &sweep.ts,
        &sweep.id,
        live,
        Box::new(move || journal_clock.now_rfc3339()),
    )?;
    let cfg = RunConfig {
        journal: Some(Arc::new(journal)),
        ..cfg
    };
    cfg.publish(
        &Scope::default(),
        &events::Cause::Scenario,
        events::Event::SweepStarted {
            pack: pack.manifest.name.clone(),
            agent: cfg.agent.label.clone(),
            scenarios: pack.scenarios.len(),
            hooks: args.hooks.clone(),
        },
    );
    eprintln!(
        "wt: {} scenario(s), {total} run(s) of pack {} on agent `{}` → {}",
        pack.scenarios.len(),
        pack.manifest.name,
        cfg.agent.label,
        args.out.display()
    );
    let result = runner::run_sweep(&pack.scenarios, &cfg, &sweep).map_err(|e| match e {
        runner::RunnerError::Runtime { .. } => anyhow::Error::new(CodedError::usage(e.to_string())),
        other => anyhow::Error::new(other),
    })?;
    // Pack-level point: every scenario's aggregate, provisioned or not.
    if let Some(observer) = &hooks.observer {
        let out = observer.on_pack_end(result.aggregates());
        for w in &out.warnings {
            eprintln!("warning: {w}");
        }
        for a in out.artifacts {
            let path = store::scoped_artifact_path(
                &args.out,
                &sweep.ts,
                &a.hook,
                None,
                a.label.as_deref(),
            )
            .and_then(|p| store::write_json(&p, &a.payload).map(|()| p));
            if let Err(e) = path {
                eprintln!("warning: hook:{}: artifact not written: {e}", a.hook);
            }
        }
    }
    cfg.publish(
        &Scope::default(),
        &events::Cause::Scenario,
        events::Event::SweepEnded {
            scenarios: result.scenarios.len(),
            exit_code: result.exit_code(),
        },
    );
    if let Some(e) = cfg.journal.as_ref().and_then(|j| j.error()) {
        eprintln!("warning: event journal incomplete: {e}");
    }
    print_summary(&pack.scenarios, &result, &args);
    if let Some(path) = &args.junit {
        let runs: Vec<_> = store::load_runs(&[&args.out])?
            .into_iter()
            .filter(|(t, _, _)| t.sweep_id == sweep.id)
            .collect();
        store::write_atomic(path, Report::from_runs(&runs).to_junit().as_bytes())
            .with_context(|| format!("write JUnit report {}", path.display()))?;
    }
    if cancel.load(Ordering::SeqCst) {
        eprintln!("wt: interrupted; every run that started was written");
        return Ok(crate::exit::INTERRUPTED);
    }
    Ok(result.exit_code())
}

/// Ctrl-C once: finish the current run (files written, hooks paired) and stop with 130.
/// Twice: stop at once.
fn interrupt_flag() -> Arc<AtomicBool> {
    let flag = Arc::new(AtomicBool::new(false));
    let seen = flag.clone();
    let installed = ctrlc::set_handler(move || {
        if seen.swap(true, Ordering::SeqCst) {
            std::process::exit(i32::from(crate::exit::INTERRUPTED));
        }
        eprintln!("interrupted: finishing the current run (Ctrl-C again to stop at once)");
    });
    if let Err(e) = installed {
        tracing::warn!("cannot handle Ctrl-C: {e}");
    }
    flag
}

fn print_summary(scenarios: &[Scenario], result: &runner::SweepResult, args: &RunArgs) {
    let width = scenarios
        .iter()
        .map(|s| s.id.len())
        .max()
        .unwrap_or(8)
        .max(8);
    eprintln!();
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
            let p: String = p.chars().take(160).collect();
            why = if why.is_empty() {
                p
            } else {
                format!("{why} — e.g. {p}")
            };
        }
        eprintln!(
            "{:<width$}  {:>7}  {status:<5}  {}",
            a.scenario_id,
            format!("{}/{}", a.passed, a.runs),
            why
        );
    }
    let (runs, passed) = result.scenarios.iter().fold((0, 0), |(r, p), s| {
        (r + s.aggregate.runs, p + s.aggregate.passed)
    });
    eprintln!(
        "\n{passed}/{runs} runs passed; traces in {} (details: wt report {})",
        args.out.display(),
        args.out.display()
    );
}

/// Progress on stderr: a bar on a terminal, plain counter lines otherwise.
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

    fn line(&self, mut line: String) {
        match &self.bar {
            Some(bar) => bar.println(line),
            None => {
                // One write per line: stderr is unbuffered and `eprintln!` writes piecewise.
                line.push('\n');
                let _ = std::io::stderr().lock().write_all(line.as_bytes());
            }
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
}

impl Progress for CliProgress {
    fn event(&self, event: &Event<'_>) {
        match event {
            Event::RunDone {
                scenario,
                run_index,
                score,
                ..
            } => {
                let n = self.done.fetch_add(1, Ordering::Relaxed) + 1;
                match &self.bar {
                    Some(bar) => {
                        bar.inc(1);
                        if score.verdict != Verdict::Pass {
                            let why = score
                                .error
                                .clone()
                                .unwrap_or_else(|| score.failed_layers().join(", "));
                            bar.println(format!(
                                "{} {scenario} #{run_index}: {why}",
                                score.verdict
                            ));
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
            Event::ScenarioEnded { aggregate } => {
                if let Some(e) = &aggregate.error {
                    self.done
                        .fetch_add(u64::from(aggregate.runs), Ordering::Relaxed);
                    if let Some(bar) = &self.bar {
                        bar.inc(u64::from(aggregate.runs));
                    }
                    self.line(format!("ERROR {}: {e}", aggregate.scenario_id));
                }
            }
            Event::Warning { scenario, message } => {
                self.line(format!("warning: {scenario}: {message}"));
            }
            Event::ScenarioStarted { .. } => {}
        }
        if self.done.load(Ordering::Relaxed) >= self.total {
            if let Some(bar) = &self.bar {
                bar.finish_and_clear();
            }
        }
    }
}
