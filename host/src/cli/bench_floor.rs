//! `wt bench-floor` (hidden): the benchmark's floor. It only writes `count` pairs of files
//! of the given sizes atomically, the same way the runner writes a trace and its score, so
//! `bench/sweep.sh` can report the sweep's wall time as a ratio to pure file writing.

use std::path::PathBuf;

use crate::{exit, store};

/// Options of `wt bench-floor`.
#[derive(Debug, Clone, clap::Args)]
pub struct BenchFloorArgs {
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    #[arg(long)]
    pub count: u64,
    #[arg(long)]
    pub trace_bytes: usize,
    #[arg(long)]
    pub score_bytes: usize,
}

pub fn run(args: BenchFloorArgs) -> anyhow::Result<u8> {
    store::ensure_dir(&args.out)?;
    for i in 0..args.count {
        let stem = format!("20261130T051500Z_{i:08x}");
        let score = vec![b'x'; args.score_bytes];
        store::write_atomic(&store::score_path(&args.out, &stem), &score)?;
        let trace = vec![b'x'; args.trace_bytes];
        store::write_atomic(&store::trace_path(&args.out, &stem), &trace)?;
    }
    Ok(exit::SUCCESS)
}
