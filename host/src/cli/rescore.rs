//! `wt rescore [DIR] [--pack DIR] [--jobs N]`: score stored traces again with the pack's
//! current expectations, rewrite the score sidecars that change (atomically) and print what
//! changed.
//!
//! A rescore scores a run by the sweep's own scoring path ([`crate::judge::score_run`]):
//! the same layers, the same judge gradings reused or asked for, the same redaction, the
//! same sampling seeds under `--seed` and the same pinned durations under `WT_FIXED_CLOCK`.
//! With `--jobs N`, N runs are graded at once (each model's own limits hold its calls);
//! what is printed and written is the same as with `--jobs 1`, in the runs' order.

use std::io::IsTerminal;
use std::path::PathBuf;

use windtunnel_model::Score;

use crate::clock::{Clock, Ids};
use crate::exit::{self, CodedError};
use crate::judge::{AgentCost, Scoring};
use crate::pack::Pack;
use crate::report::{LoadedRun, scan};
use crate::{store, term};

/// Options of `wt rescore`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct RescoreArgs {
    /// Run directory [default: runs].
    #[arg(value_name = "DIR", default_value = "runs")]
    pub dir: PathBuf,
    /// Pack whose expectations to apply; the embedded demo pack by default.
    #[arg(long, value_name = "DIR", env = "WT_PACK")]
    pub pack: Option<PathBuf>,
    /// Runs scored at once: judge calls in flight, each model's `max_concurrency` and
    /// `requests_per_minute` holding its own. The output is the same at any N.
    #[arg(long, short = 'j', value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub jobs: u32,
    /// The sweep's `--seed`: judges asked again get the sampling seeds the sweep's got.
    #[arg(long, value_name = "N", env = "WT_SEED")]
    pub seed: Option<u64>,
    #[command(flatten, next_help_heading = "Judges")]
    pub models: crate::cli::run::ModelArgs,
    /// Ask the judges for every grading again, even those the stored score holds for the
    /// same judge and the same material.
    #[arg(long, help_heading = "Judges")]
    pub no_cache: bool,
}

/// What rescoring one run came to.
enum Rescored {
    /// Its scenario is not in the pack.
    Skipped(String),
    /// The stored score is the new one, byte for byte.
    Same,
    /// A new score: what it judges changed (`judged`), or only its gradings' record (calls
    /// asked again under `--no-cache` that came to the same verdicts).
    New { score: Box<Score>, judged: bool },
}

pub(crate) fn run(args: RescoreArgs) -> anyhow::Result<u8> {
    let pack = match &args.pack {
        Some(dir) => {
            Pack::load(dir).map_err(|e| CodedError::usage(format!("invalid pack: {e}")))?
        }
        None => Pack::demo(),
    };
    // SAFETY: nothing but this thread runs yet.
    let models = unsafe { args.models.build(&pack) }?;
    let clock = Clock::from_env().map_err(|e| CodedError::usage(e.to_string()))?;
    let ids = args.seed.map_or_else(Ids::random, Ids::seeded);
    let stop = crate::interrupt::Interrupt::new();
    // The secrets of this invocation: the models it may call (the sweep's agent is not
    // here, and what its runs say was redacted when they were written).
    let redactor = crate::runtime::models::redactor(&models);
    if !args.dir.is_dir() {
        return Err(
            CodedError::usage(format!("no run directory at {}", args.dir.display())).into(),
        );
    }
    let scoring = Scoring {
        models: &models,
        redactor: &redactor,
        stop: &stop,
        ids: &ids,
        pinned: clock.is_fixed(),
    };
    let want = scan::Want {
        listing: true,
        ..scan::Want::default()
    };
    let read = scan::scan(std::slice::from_ref(&args.dir), want)?;
    for w in &read.found.warnings {
        term::err_line(&format!("warning: {w}"));
    }
    for d in &read.duplicate_paths {
        term::err_line(&format!(
            "warning: skipping {}: it repeats the run_id of a trace already rescored",
            d.display()
        ));
    }
    let total: usize = read.listing.iter().map(|l| l.len()).sum();
    let bar = progress(total);
    let jobs = args.jobs as usize;
    // Runs are taken in windows of a few per lane: a rescore holds no more than those, and
    // prints and writes them in the runs' order, whatever order their gradings came back in.
    let window = jobs * 4;
    let mut tally = Tally {
        index: Some(index_for(&args.dir, &clock)),
        ..Tally::default()
    };
    let mut runs = read.listing.iter().flat_map(|l| l.whole_runs());
    loop {
        let mut batch = Vec::with_capacity(window);
        for run in runs.by_ref() {
            match run {
                Ok(r) => batch.push(r),
                Err(w) => {
                    bar.inc(1);
                    term::err_line(&format!("warning: {w}"));
                }
            }
            if batch.len() == window {
                break;
            }
        }
        if batch.is_empty() {
            break;
        }
        let results = rescore_all(&batch, &pack, &scoring, args.no_cache, jobs, &bar);
        for (run, result) in batch.iter().zip(results) {
            tally.record(run, result)?;
        }
    }
    bar.finish_and_clear();
    tally.summary(&pack);
    Ok(exit::SUCCESS)
}

/// The index of this rescore's rewritten scores, `<now>_rescore.index.jsonl` in `dir` (the
/// sweeps' lines for those runs no longer hold), made at its first line.
fn index_for(dir: &std::path::Path, clock: &Clock) -> scan::index::Writer {
    let stem = format!("{}_rescore", crate::clock::compact(clock.now()));
    scan::index::Writer::new(dir, &stem)
}

/// A progress bar on a terminal, nothing otherwise.
fn progress(total: usize) -> indicatif::ProgressBar {
    if !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(total as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} runs  {elapsed_precise}")
            .expect("valid template"),
    );
    bar
}

/// Scores `batch` on `jobs` threads; the results in the batch's order.
fn rescore_all(
    batch: &[LoadedRun],
    pack: &Pack,
    scoring: &Scoring<'_>,
    no_cache: bool,
    jobs: usize,
    bar: &indicatif::ProgressBar,
) -> Vec<Rescored> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let slots: Vec<std::sync::Mutex<Option<Rescored>>> =
        batch.iter().map(|_| std::sync::Mutex::new(None)).collect();
    std::thread::scope(|s| {
        for _ in 0..jobs.min(batch.len()) {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(run) = batch.get(i) else { break };
                    let result = rescore(run, pack, scoring, no_cache);
                    *slots[i].lock().unwrap_or_else(|e| e.into_inner()) = Some(result);
                    bar.inc(1);
                }
            });
        }
    });
    slots
        .into_iter()
        .map(|m| {
            m.into_inner()
                .unwrap_or_else(|e| e.into_inner())
                .expect("every run of the batch was scored")
        })
        .collect()
}

/// One run scored again by the sweep's scoring path.
fn rescore(run: &LoadedRun, pack: &Pack, scoring: &Scoring<'_>, no_cache: bool) -> Rescored {
    let (trace, old) = (&run.trace, run.score.as_ref());
    let Some(scenario) = pack.scenario(&trace.scenario_id) else {
        return Rescored::Skipped(trace.scenario_id.clone());
    };
    // What the agent's calls cost is the sweep's fact (its agent config's prices), not the
    // expectations': it is kept.
    let cost = AgentCost::Kept(old.and_then(|o| o.usage.as_ref()));
    let previous = old.filter(|_| !no_cache);
    let new = crate::judge::score_run(scenario, trace, cost, previous, scoring);
    if old == Some(&new) {
        return Rescored::Same;
    }
    let judged = old.is_none_or(|o| judgment(o) != judgment(&new));
    Rescored::New {
        score: Box::new(new),
        judged,
    }
}

/// What a score judges: its verdict, error, layers (whether each passed and why) and each
/// check's verdict and votes — not the record of the calls that graded it (their latency,
/// tokens, reasoning), nor where in the transcript a layer's problems happened.
fn judgment(s: &Score) -> impl PartialEq + '_ {
    let checks: Vec<_> = s
        .judges
        .iter()
        .map(|g| (g.check, &g.verdict, &g.votes, &g.error))
        .collect();
    (
        s.verdict,
        &s.error,
        s.layers()
            .into_iter()
            .map(|(_, l)| (l.passed, &l.detail))
            .collect::<Vec<_>>(),
        checks,
    )
}

/// Whether `new` differs from `old` only in its layers' pointers to the transcript.
fn pointers_only(old: Option<&Score>, new: &Score) -> bool {
    let Some(old) = old else { return false };
    let mut with = old.clone();
    for (layer, from) in [
        (&mut with.outcome, &new.outcome),
        (&mut with.trajectory, &new.trajectory),
        (&mut with.constraint, &new.constraint),
        (&mut with.integrity, &new.integrity),
    ] {
        layer.at.clone_from(&from.at);
    }
    with == *new
}

#[derive(Default)]
struct Tally {
    checked: usize,
    changed: usize,
    regraded: usize,
    /// Written again only to add the layers' pointers to the transcript (a score of an older
    /// `wt`).
    pointed: usize,
    unchanged: usize,
    skipped: Vec<String>,
    /// The index of the scores it rewrote, beside them.
    index: Option<scan::index::Writer>,
}

impl Tally {
    /// Writes and prints what rescoring `run` came to.
    fn record(&mut self, run: &LoadedRun, result: Rescored) -> anyhow::Result<()> {
        self.checked += 1;
        let (new, judged) = match result {
            Rescored::Skipped(id) => {
                self.skipped.push(id);
                return Ok(());
            }
            Rescored::Same => {
                self.unchanged += 1;
                return Ok(());
            }
            Rescored::New { score, judged } => (score, judged),
        };
        store::write_json(&run.path.with_extension("score.json"), &*new)?;
        if let Some(index) = &self.index {
            let artifacts: Vec<String> = run
                .artifacts
                .iter()
                .filter_map(|p| p.file_name()?.to_str().map(str::to_owned))
                .collect();
            index.append(&run.stem(), &new, &artifacts);
        }
        if !judged {
            if pointers_only(run.score.as_ref(), &new) {
                self.pointed += 1;
            } else {
                self.regraded += 1;
            }
            return Ok(());
        }
        self.changed += 1;
        let old = run.score.as_ref();
        let before = old.map_or("UNSCORED", |s| s.verdict.as_str());
        term::out_line(&format!(
            "{} {}: {before} → {}",
            run.stem(),
            run.trace.scenario_id,
            new.verdict
        ));
        for (name, layer) in new.layers() {
            let was = old.map(|o| {
                o.layers()
                    .into_iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, l)| l.clone())
                    .unwrap_or_default()
            });
            // Where its problems happened is no change of what it judges.
            if was.as_ref().map(|w| (w.passed, &w.detail)) != Some((layer.passed, &layer.detail)) {
                let state = if layer.passed { "passes" } else { "fails" };
                term::out_line(&format!("    {name} now {state}: {}", layer.detail));
            }
        }
        Ok(())
    }

    fn summary(mut self, pack: &Pack) {
        self.skipped.sort();
        self.skipped.dedup();
        let regraded = match self.regraded {
            0 => String::new(),
            n => format!(", {n} graded again to the same verdicts (their new gradings written)"),
        };
        let pointed = match self.pointed {
            0 => String::new(),
            n => format!(
                ", {n} written again with the steps their failing layers point at (the same verdicts)"
            ),
        };
        let skipped = if self.skipped.is_empty() {
            String::new()
        } else {
            format!(
                ", skipped runs of scenarios not in the pack: {}",
                self.skipped.join(", ")
            )
        };
        term::err_line(&format!(
            "checked {} run(s) against pack {}: {} changed, {} unchanged{regraded}{pointed}{skipped}",
            self.checked, pack.source, self.changed, self.unchanged
        ));
    }
}
