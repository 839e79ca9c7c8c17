//! `wt report [DIR]...`: merge run directories and show what happened, as a table (the
//! default), JSON, JUnit XML or Markdown on stdout.

use std::path::PathBuf;

use crate::exit::{self, CodedError};
use crate::report::Report;
use crate::store;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Table,
    Json,
    Junit,
    Markdown,
}

/// Options of `wt report`.
#[derive(Debug, Clone, clap::Args)]
pub struct ReportArgs {
    /// Run directories to merge [default: runs].
    #[arg(value_name = "DIR")]
    pub dirs: Vec<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

pub fn run(args: ReportArgs) -> anyhow::Result<u8> {
    let dirs = super::run_dirs(args.dirs)?;
    let runs = store::load_runs(&dirs)?;
    if runs.is_empty() {
        let shown: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
        return Err(CodedError::usage(format!("no runs found in {}", shown.join(", "))).into());
    }
    let report = Report::from_runs(&runs);
    let text = match args.format {
        Format::Table => report.to_table(),
        Format::Json => report.to_json(),
        Format::Junit => report.to_junit(),
        Format::Markdown => report.to_markdown(),
    };
    print!("{text}");
    Ok(exit::SUCCESS)
}
