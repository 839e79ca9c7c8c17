//! `wt report [DIR]...`: merge run directories and show what happened, as a table (the
//! default), JSON, JUnit XML, Markdown or a self-contained HTML page, on stdout or in a file
//! (`-o`). With `--gate`, exit with the code the sweep itself would have had.

use std::path::{Path, PathBuf};

use anyhow::Context as _;

use crate::exit::{self, CodedError};
use crate::report::{self, Report, scan};
use crate::store;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Format {
    Table,
    Json,
    Junit,
    Markdown,
    Html,
}

/// Options of `wt report`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ReportArgs {
    /// Run directories to merge (shards of one sweep, or several sweeps) [default: runs].
    #[arg(value_name = "DIR")]
    pub dirs: Vec<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    #[command(flatten)]
    pub output: Output,
    /// Exit with the code the sweep would have had: 3 if any run or scenario could not be
    /// judged or a sweep is incomplete, else 1 if any run failed, else 0.
    #[arg(long)]
    pub gate: bool,
}

pub(crate) fn run(args: ReportArgs) -> anyhow::Result<u8> {
    args.output.check()?;
    let dirs = super::run_dirs(args.dirs.clone())?;
    // Every view counts as it reads; the JSON and JUnit views list every run, so they keep
    // where each run is (a key each) and read the rows again as they write them; the page
    // gathers its clusters and the few runs it shows in full.
    let want = scan::Want {
        listing: matches!(args.format, Format::Json | Format::Junit),
        page: args.format == Format::Html,
        ..scan::Want::default()
    };
    let report = scan_report(&dirs, want)?;
    let text = match args.format {
        Format::Table => for_terminal(&report.to_table()),
        Format::Json => {
            args.output.emit_with(|w| report.write_json(w))?;
            return Ok(gate(&args, &report));
        }
        Format::Junit => {
            args.output.emit_with(|w| report.write_junit(w, true))?;
            return Ok(gate(&args, &report));
        }
        Format::Markdown => for_reader(report.to_markdown()),
        Format::Html => {
            let base = args.output.file.as_deref().and_then(Path::parent);
            for_reader(report::html::report_page(&report, base))
        }
    };
    args.output.emit(&text)?;
    Ok(gate(&args, &report))
}

fn gate(args: &ReportArgs, report: &Report) -> u8 {
    if args.gate {
        report.gate
    } else {
        exit::SUCCESS
    }
}

/// A table for a terminal: every line's control and bidirectional characters escaped (the
/// outside text in it — labels, reasons — can neither repaint the screen nor reverse a line).
pub(crate) fn for_terminal(table: &str) -> String {
    let mut out = String::with_capacity(table.len());
    for line in table.lines() {
        out.push_str(&crate::term::sanitize(line));
        out.push('\n');
    }
    out
}

/// A document a person reads rendered (HTML, Markdown, JUnit in a CI page), which escapes its
/// own markup already: its bidirectional controls written as visible escapes.
pub(crate) fn for_reader(doc: String) -> String {
    match crate::term::escape_bidi(&doc) {
        std::borrow::Cow::Borrowed(_) => doc,
        std::borrow::Cow::Owned(clean) => clean,
    }
}

/// The counts over `dirs` (a scan that keeps nothing per run), its warnings printed on
/// stderr. No runs at all (and no scenario that could not run) is a usage error.
pub(crate) fn load_report(dirs: &[PathBuf]) -> anyhow::Result<Report> {
    scan_report(dirs, scan::Want::default())
}

/// The model of `dirs` through the scan (report/scan.rs: counted as read, in parallel, with
/// what `want` asks beyond the counts), its warnings printed on stderr.
pub(crate) fn scan_report(dirs: &[PathBuf], want: scan::Want<'_>) -> anyhow::Result<Report> {
    tell_report(Report::from_scan(scan::scan(dirs, want)?), dirs)
}

/// `report`, once what the reading side found beside its runs is printed (see [`tell`]).
pub(crate) fn tell_report(report: Report, dirs: &[PathBuf]) -> anyhow::Result<Report> {
    tell(&report, dirs, true)?;
    Ok(report)
}

/// [`tell_report`] without what makes the report incomplete (its gaps, its partial sweeps),
/// for a caller that says it itself (`wt compare`, among its own `incomplete:` lines).
pub(crate) fn tell_report_but_gaps(report: Report, dirs: &[PathBuf]) -> anyhow::Result<Report> {
    tell(&report, dirs, false)?;
    Ok(report)
}

/// Prints what the reading side found beside the runs on stderr; no runs at all (and no
/// scenario that could not run, and no sweep that started and wrote none) is a usage error.
fn tell(report: &Report, dirs: &[PathBuf], incomplete: bool) -> anyhow::Result<()> {
    let runs: u64 = report.pack.runs;
    // A journal saying a sweep started and did not end, with no run written: an incomplete
    // sweep (the gate's 3), not a directory without runs; said once, below.
    let unfinished: Vec<&report::load::Sweep> = report
        .sweeps
        .iter()
        .filter(|s| s.status.is_partial() && s.runs == 0)
        .collect();
    let said_apart: Vec<String> = if incomplete {
        unfinished
            .iter()
            .filter(|_| runs == 0)
            .filter_map(|s| s.partial_reason())
            .collect()
    } else {
        report
            .partial_sweeps()
            .filter_map(|s| s.partial_reason())
            .collect()
    };
    for w in report.warnings.iter().filter(|w| !said_apart.contains(w)) {
        crate::term::err_line(&format!("warning: {w}"));
    }
    for g in report.gaps.iter().filter(|_| incomplete) {
        crate::term::err_line(&format!("incomplete: {g}"));
    }
    for s in unfinished.iter().filter(|_| incomplete && runs == 0) {
        crate::term::err_line(&format!(
            "incomplete: sweep {} started but wrote no run before it stopped ({} says it {}); nothing of it can be judged",
            s.sweep_id,
            s.journals.join(", "),
            match s.status {
                report::load::SweepStatus::Interrupted => "was interrupted",
                _ => "never ended",
            }
        ));
    }
    for u in &report.unread {
        crate::term::err_line(&format!(
            "error: run {} of scenario `{}` is named by its journal but its trace was not read; counted as ERROR",
            u.stem, u.scenario_id
        ));
    }
    if report.duplicates > 0 {
        crate::term::err_line(&format!(
            "note: {} trace file(s) repeat a run_id already read; each run is counted once",
            report.duplicates
        ));
    }
    if runs == 0
        && report.scenario_errors.is_empty()
        && report.unread.is_empty()
        && unfinished.is_empty()
    {
        let shown: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
        return Err(CodedError::usage(format!("no runs found in {}", shown.join(", "))).into());
    }
    Ok(())
}

/// Where machine output goes: stdout, or a file written atomically.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct Output {
    /// Write to FILE (atomically) instead of stdout.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub file: Option<PathBuf>,
}

impl Output {
    /// Checks, before any work, that the output file (if any) can be written.
    pub(crate) fn check(&self) -> anyhow::Result<()> {
        if let Some(path) = &self.file {
            store::check_output(path, "-o").map_err(CodedError::usage)?;
        }
        Ok(())
    }

    /// Like [`Output::emit`], streamed: `fill` writes the document piece by piece.
    pub(crate) fn emit_with(
        &self,
        fill: impl FnOnce(&mut dyn std::io::Write) -> std::io::Result<()>,
    ) -> anyhow::Result<()> {
        match &self.file {
            Some(path) => store::write_atomic_with(path, fill)
                .with_context(|| format!("write {}", path.display())),
            None => {
                let mut out = std::io::BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
                match fill(&mut out).and_then(|()| std::io::Write::flush(&mut out)) {
                    Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
                    other => other.context("write to stdout"),
                }
            }
        }
    }

    pub(crate) fn emit(&self, text: &str) -> anyhow::Result<()> {
        match &self.file {
            Some(path) => store::write_atomic(path, text.as_bytes())
                .with_context(|| format!("write {}", path.display())),
            None => {
                use std::io::Write as _;
                let mut out = std::io::stdout().lock();
                // A closed pipe (`wt report | head`) is not an error of the report.
                match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
                    Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
                    other => other.context("write to stdout"),
                }
            }
        }
    }
}
