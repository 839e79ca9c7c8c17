//! The floor `bench/sweep.sh` and `bench/openai_floor.py` measure a sweep against: it only
//! writes `count` pairs of files of the given sizes atomically, the way `wt` writes a trace
//! and its score (a hidden temp file in the same directory, renamed into place; a score is
//! never put over an existing file), and optionally appends journal lines to one file, one
//! write per line, as the durable event journal does. Whatever a sweep costs beyond this is
//! `wt`'s own work.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use clap::Parser;

#[derive(Debug, Parser)]
struct Args {
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    #[arg(long)]
    count: u64,
    #[arg(long)]
    trace_bytes: usize,
    #[arg(long)]
    score_bytes: usize,
    /// Journal lines in all (spread evenly over the runs).
    #[arg(long, default_value_t = 0)]
    journal_lines: u64,
    #[arg(long, default_value_t = 0)]
    journal_line_bytes: usize,
}

/// Writes `bytes` to `path` through a temp file beside it; `new`: never replace a file.
fn write_atomic(path: &Path, bytes: &[u8], new: bool) -> anyhow::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::Builder::new()
        .prefix(".wt-tmp-")
        .permissions(std::fs::Permissions::from_mode(0o644))
        .tempfile_in(dir)?;
    tmp.write_all(bytes)?;
    if new {
        tmp.persist_noclobber(path)?;
    } else {
        tmp.persist(path)?;
    }
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    fs_err::create_dir_all(&args.out)?;
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
    let (trace, score) = (vec![b'x'; args.trace_bytes], vec![b'x'; args.score_bytes]);
    let mut written = 0u64;
    for i in 0..args.count {
        let stem = format!("20261130T051500Z_{i:08x}");
        write_atomic(&args.out.join(format!("{stem}.score.json")), &score, true)?;
        write_atomic(&args.out.join(format!("{stem}.json")), &trace, false)?;
        if let Some(j) = journal.as_mut() {
            let due = args.journal_lines * (i + 1) / args.count;
            while written < due {
                j.write_all(&line)?;
                written += 1;
            }
        }
    }
    Ok(())
}
