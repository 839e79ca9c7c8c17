//! The `wt` command line: argument parsing and one module per subcommand. Human output goes
//! to stderr; machine output to stdout or files.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::{exit, term};

pub(crate) mod compare;
pub(crate) mod doctor;
pub(crate) mod hooks;
pub(crate) mod hooks_new;
pub(crate) mod judge;
pub(crate) mod logging;
pub(crate) mod report;
pub(crate) mod rescore;
pub(crate) mod run;
pub(crate) mod supervise;
pub(crate) mod triage;
pub(crate) mod view;

/// Wind Tunnel: evaluate AI agents against packs of scenarios.
#[derive(Debug, Parser)]
#[command(name = "wt", version, about, long_about = None)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run a pack of scenarios against an agent and write traces and scores.
    Run(Box<run::RunArgs>),
    /// Summarize one or more run directories (table, JSON, JUnit, Markdown or HTML).
    Report(report::ReportArgs),
    /// Compare two sets of run directories (BASE and NEW): per-scenario verdicts with
    /// statistics.
    Compare(compare::CompareArgs),
    /// Re-score stored traces with a pack's current expectations.
    Rescore(rescore::RescoreArgs),
    /// Inspect, check and install hook plugins.
    #[command(subcommand)]
    Hooks(hooks::HooksCommand),
    /// Check that an agent is reachable and isolated across resets (the hard gate).
    Doctor(doctor::DoctorArgs),
    /// Cluster failing runs and place each cluster on the wiring → harness → steering →
    /// model ladder.
    Triage(triage::TriageArgs),
    /// Explore every stored run in a browser: a local, read-only server (prints its URL).
    View(view::ViewArgs),
    /// Model-graded checks: how far each judge can be trusted (`wt judge calibrate`).
    #[command(subcommand)]
    Judge(judge::JudgeCommand),
    /// An isolated hook's process (started by `wt` itself; speaks a binary protocol).
    #[command(hide = true, name = "hook-child")]
    HookChild(crate::hooks::isolate::child::ChildArgs),
    /// A sweep's watchdog (started by `wt run` itself): when its standard input ends, kills
    /// every process the sweep started.
    #[command(hide = true, name = "sweep-watchdog")]
    SweepWatchdog(supervise::WatchdogArgs),
}

/// The run directories a reading command works on: those given, else `runs`. Each must
/// exist; a missing one is a usage error naming it.
pub(crate) fn run_dirs(dirs: Vec<std::path::PathBuf>) -> anyhow::Result<Vec<std::path::PathBuf>> {
    let dirs = if dirs.is_empty() {
        vec![std::path::PathBuf::from("runs")]
    } else {
        dirs
    };
    for d in &dirs {
        if !d.is_dir() {
            return Err(
                exit::CodedError::usage(format!("no run directory at {}", d.display())).into(),
            );
        }
    }
    Ok(dirs)
}

/// Every stored run of `dirs`, read whole (trace, score, artifacts), with the scan that found
/// them; what could not be read is a warning on stderr.
pub(crate) fn whole_runs(
    dirs: &[std::path::PathBuf],
) -> anyhow::Result<(Vec<crate::report::LoadedRun>, crate::report::scan::Scan)> {
    use crate::report::scan;
    let read = scan::scan(
        dirs,
        scan::Want {
            listing: true,
            ..scan::Want::default()
        },
    )?;
    for w in &read.found.warnings {
        crate::term::err_line(&format!("warning: {w}"));
    }
    let mut runs = Vec::new();
    for run in read.listing.iter().flat_map(|l| l.whole_runs()) {
        match run {
            Ok(r) => runs.push(r),
            Err(w) => crate::term::err_line(&format!("warning: {w}")),
        }
    }
    Ok((runs, read))
}

/// Parses the command line, runs the subcommand and maps the outcome to an exit code.
pub fn main() -> ExitCode {
    logging::init();
    let cli = Cli::parse();
    let sweep = matches!(cli.command, Command::Run(_));
    if sweep && !supervise::is_sweep() {
        return ExitCode::from(supervise::supervise());
    }
    if sweep {
        // SAFETY: nothing but this thread runs yet (logging starts no thread).
        unsafe { supervise::sweep_starts() };
    }
    let result = match cli.command {
        Command::Run(args) => run::run(*args),
        Command::Report(args) => report::run(args),
        Command::Compare(args) => compare::run(args),
        Command::Rescore(args) => rescore::run(args),
        Command::Hooks(cmd) => hooks::run(cmd),
        Command::Doctor(args) => doctor::run(args),
        Command::Triage(args) => triage::run(args),
        Command::View(args) => view::run(args),
        Command::Judge(cmd) => judge::run(cmd),
        Command::HookChild(args) => crate::hooks::isolate::child::run(args),
        Command::SweepWatchdog(args) => Ok(crate::procs::watch(&args.tag)),
    };
    let code = match result {
        Ok(code) => code,
        // A stop at once ends the process with its own code; a failure it caused (a file
        // its clean-up removed) is not the sweep's to report.
        Err(_) if sweep && crate::interrupt::exiting() => crate::interrupt::wait_for_exit(),
        Err(err) => {
            term::err_line(&format!("error: {}", one_line(&err)));
            exit::code_for(&err)
        }
    };
    if sweep {
        supervise::sweep_ends(code);
    }
    ExitCode::from(code)
}

/// An error and its causes on one line, each cause once: a cause whose text its context
/// already quotes is not repeated.
pub(crate) fn one_line(err: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in err.chain() {
        let part = cause.to_string();
        if part.is_empty() || text.contains(&part) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&part);
    }
    text
}
