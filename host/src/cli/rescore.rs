//! `wt rescore [DIR] [--pack DIR]`: score stored traces again with the pack's current
//! expectations, rewrite the score sidecars that change (atomically) and print what changed.

use std::path::PathBuf;

use crate::exit::{self, CodedError};
use crate::pack::Pack;
use crate::report::scan;
use crate::term;
use crate::{score, store};

/// Options of `wt rescore`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct RescoreArgs {
    /// Run directory [default: runs].
    #[arg(value_name = "DIR", default_value = "runs")]
    pub dir: PathBuf,
    /// Pack whose expectations to apply; the embedded demo pack by default.
    #[arg(long, value_name = "DIR", env = "WT_PACK")]
    pub pack: Option<PathBuf>,
    #[command(flatten, next_help_heading = "Judges")]
    pub models: crate::cli::run::ModelArgs,
    /// Ask the judges for every grading again, even those the stored score holds for the
    /// same judge and the same material.
    #[arg(long, help_heading = "Judges")]
    pub no_cache: bool,
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
    let stop = crate::interrupt::Interrupt::new();
    // The secrets of this invocation: the models it may call (the sweep's agent is not
    // here, and what its runs say was redacted when they were written).
    let redactor = crate::runtime::models::redactor(&models);
    if !args.dir.is_dir() {
        return Err(
            CodedError::usage(format!("no run directory at {}", args.dir.display())).into(),
        );
    }
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
    // One run whole at a time: a rescore holds no more than the run it scores.
    let (mut checked, mut changed, mut unchanged, mut skipped) = (0, 0, 0, Vec::new());
    for run in read.listing.iter().flat_map(|l| l.whole_runs()) {
        let run = match run {
            Ok(r) => r,
            Err(w) => {
                term::err_line(&format!("warning: {w}"));
                continue;
            }
        };
        checked += 1;
        let (trace, old, path) = (&run.trace, &run.score, &run.path);
        let Some(scenario) = pack.scenario(&trace.scenario_id) else {
            skipped.push(trace.scenario_id.clone());
            continue;
        };
        let mut new = score::score(scenario, trace);
        // What the agent's calls cost is the sweep's fact (its agent config's prices), not
        // the expectations': it is kept.
        new.usage = old.as_ref().and_then(|o| o.usage.clone());
        let judging = crate::judge::Judging {
            models: &models,
            previous: old.as_ref().filter(|_| !args.no_cache),
            redactor: &redactor,
            stop: &stop,
            ids: None,
        };
        crate::judge::apply(scenario, trace, &mut new, &judging);
        new.eval_usage = crate::judge::eval_usage(scenario, trace, &new, &models);
        redactor.scrub_record(&mut new);
        if old.as_ref() == Some(&new) {
            unchanged += 1;
            continue;
        }
        let score_file = path.with_extension("score.json");
        store::write_json(&score_file, &new)?;
        changed += 1;
        let stem = path
            .file_stem()
            .map(|s| s.to_string_lossy())
            .unwrap_or_default();
        let before = old.as_ref().map_or("UNSCORED", |s| s.verdict.as_str());
        term::out_line(&format!(
            "{stem} {}: {before} → {}",
            trace.scenario_id, new.verdict
        ));
        for (name, layer) in new.layers() {
            let was = old.as_ref().map(|o| {
                o.layers()
                    .into_iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, l)| l.clone())
                    .unwrap_or_default()
            });
            if was.as_ref() != Some(layer) {
                let state = if layer.passed { "passes" } else { "fails" };
                term::out_line(&format!("    {name} now {state}: {}", layer.detail));
            }
        }
    }
    skipped.sort();
    skipped.dedup();
    term::err_line(&format!(
        "checked {checked} run(s) against pack {}: {changed} changed, {unchanged} unchanged{}",
        pack.source,
        if skipped.is_empty() {
            String::new()
        } else {
            format!(
                ", skipped runs of scenarios not in the pack: {}",
                skipped.join(", ")
            )
        }
    ));
    Ok(exit::SUCCESS)
}
