//! `wt judge calibrate [DIR]... --labels FILE`: how far each judge check can be trusted,
//! from runs a person labelled (see [`crate::report::calibration`]). It reads the gradings
//! the stored scores hold; it makes no model call.

use std::io::Write;
use std::path::PathBuf;

use crate::exit::{self, CodedError};
use crate::report::calibration::{self, Graded};

#[derive(Debug, clap::Subcommand)]
pub(crate) enum JudgeCommand {
    /// Compare the judges' gradings of stored runs with a person's labels: per judge check,
    /// n, agreement, Cohen's kappa, the confusion matrix, and the true-pass and true-fail
    /// rates with 95 % Wilson intervals.
    Calibrate(CalibrateArgs),
}

#[derive(Debug, clap::Args)]
pub(crate) struct CalibrateArgs {
    /// Run directories whose scores hold the gradings [default: runs].
    #[arg(value_name = "DIR")]
    pub dirs: Vec<PathBuf>,
    /// The labels, JSON Lines: `{"run_id": "...", "check": 0, "label": "pass"}` a line.
    #[arg(long, value_name = "FILE")]
    pub labels: PathBuf,
    /// `table` (default) or `json` (what `wt compare --calibration` reads).
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Format {
    Table,
    Json,
}

pub(crate) fn run(cmd: JudgeCommand) -> anyhow::Result<u8> {
    let JudgeCommand::Calibrate(args) = cmd;
    let labels = calibration::read_labels(&args.labels).map_err(CodedError::usage)?;
    let dirs = super::run_dirs(args.dirs)?;
    let (runs, _) = super::whole_runs(&dirs)?;
    let graded = runs.iter().flat_map(|r| {
        r.score.iter().flat_map(move |s| {
            s.judges.iter().map(move |g| Graded {
                run_id: &r.trace.run_id,
                stem: r
                    .path
                    .file_stem()
                    .and_then(|s| s.to_str())
                    .unwrap_or_default(),
                scenario_id: &r.trace.scenario_id,
                grade: g,
            })
        })
    });
    let c = calibration::calibrate(&labels, graded);
    if c.checks.is_empty() {
        return Err(CodedError::usage(format!(
            "none of the {} label(s) in {} matches a grading in the runs read (is it the right directory, and were the runs graded?)",
            labels.len(),
            args.labels.display()
        ))
        .into());
    }
    let mut out = std::io::stdout().lock();
    match args.format {
        Format::Json => {
            serde_json::to_writer_pretty(&mut out, &c)?;
            writeln!(out)?;
        }
        // Scenario ids and model names are the pack's: escaped like every terminal line.
        Format::Table => write!(out, "{}", super::report::for_terminal(&c.to_table()))?,
    }
    Ok(exit::SUCCESS)
}
