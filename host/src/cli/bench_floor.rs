//! `wt bench-floor` (hidden): the benchmark's floor. It only writes `count` pairs of files
//! of the given sizes atomically, the same way the runner writes a trace and its score, so
//! `bench/sweep.sh` can report the sweep's wall time as a ratio to pure file writing.
//! With `--journal-lines`, it also appends that many lines of `--journal-line-bytes` to one
//! journal file, one write per line, as the durable event journal requires.

use std::io::Write;
use std::path::PathBuf;

use crate::{exit, store};

/// Options of `wt bench-floor`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct BenchFloorArgs {
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    #[arg(long)]
    pub count: u64,
    #[arg(long)]
    pub trace_bytes: usize,
    #[arg(long)]
    pub score_bytes: usize,
    /// Journal lines per run pair (spread evenly over the runs).
    #[arg(long, default_value_t = 0)]
    pub journal_lines: u64,
    #[arg(long, default_value_t = 0)]
    pub journal_line_bytes: usize,
}

pub(crate) fn run(args: BenchFloorArgs) -> anyhow::Result<u8> {
    store::ensure_dir(&args.out)?;
    let mut journal = if args.journal_lines > 0 {
        Some(
            fs_err::OpenOptions::new()
                .create(true)
                .append(true)
                .open(args.out.join("20261130T051500Z.events.jsonl"))?,
        )
    } else {
        None
    };
    let mut line = vec![b'x'; args.journal_line_bytes.max(1)];
    if let Some(last) = line.last_mut() {
        *last = b'\n';
    }
    let mut written = 0u64;
    for i in 0..args.count {
        let stem = format!("20261130T051500Z_{i:08x}");
        let score = vec![b'x'; args.score_bytes];
        store::write_atomic(&store::score_path(&args.out, &stem), &score)?;
        let trace = vec![b'x'; args.trace_bytes];
        store::write_atomic(&store::trace_path(&args.out, &stem), &trace)?;
        if let Some(j) = journal.as_mut() {
            let due = args.journal_lines * (i + 1) / args.count;
            while written < due {
                j.write_all(&line)?;
                written += 1;
            }
        }
    }
    Ok(exit::SUCCESS)
}
