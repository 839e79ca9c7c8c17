//! `wt triage [DIR]...`: failing runs, clustered and placed on the wiring → harness →
//! steering → model ladder (see [`crate::report::triage`]).

use std::{io::Write, path::PathBuf};

use crate::exit;
use crate::report::triage;

#[derive(Debug, clap::Args)]
pub(crate) struct TriageArgs {
    /// Run directories to read [default: runs].
    #[arg(value_name = "DIR")]
    pub dirs: Vec<PathBuf>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

pub(crate) fn run(args: TriageArgs) -> anyhow::Result<u8> {
    let dirs = super::run_dirs(args.dirs)?;
    let (runs, read) = super::whole_runs(&dirs)?;
    let clusters = triage::triage_all(&runs, &read.found.scenario_errors, true);
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &clusters)?;
        writeln!(out)?;
        return Ok(exit::SUCCESS);
    }
    if clusters.is_empty() {
        writeln!(out, "no failing runs among {} run(s)", runs.len())?;
        return Ok(exit::SUCCESS);
    }
    // Reasons, evidence and debrief excerpts quote agents: escaped like every terminal line.
    let mut text = String::new();
    for c in &clusters {
        text.push_str(&format!(
            "[{}] {} {}/{} runs {} — {}\n",
            c.rung.as_str(),
            c.scenario_id,
            c.runs.len(),
            c.of,
            c.verdict,
            if c.failed_layers.is_empty() {
                "no layer verdict".to_owned()
            } else {
                c.failed_layers.join(", ")
            }
        ));
        text.push_str(&format!("    reason:   {}\n", c.reason));
        text.push_str(&format!("    evidence: {}\n", c.evidence));
        for d in c.debriefs.iter().take(2) {
            text.push_str(&format!("    debrief:  {d}\n"));
        }
    }
    out.write_all(super::report::for_terminal(&text).as_bytes())?;
    Ok(exit::SUCCESS)
}
