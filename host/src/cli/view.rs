//! `wt view`: a local, read-only web server to explore stored runs (see [`crate::view`]).

use std::net::IpAddr;
use std::path::PathBuf;

use clap::Args;

use crate::exit::CodedError;

#[derive(Debug, Args)]
pub(crate) struct ViewArgs {
    /// Runs directories, read as `wt report` reads them (default: runs).
    pub dirs: Vec<PathBuf>,
    /// Runs directories of a baseline to compare with, side by side (repeatable).
    #[arg(long, value_name = "DIR")]
    pub baseline: Vec<PathBuf>,
    /// Port to listen on; 0 picks a free one.
    #[arg(long, default_value_t = 8700)]
    pub port: u16,
    /// Address to listen on. Anything but a loopback address lets anyone who can reach this
    /// machine read the traces (wt view says so).
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
}

pub(crate) fn run(args: ViewArgs) -> anyhow::Result<u8> {
    let host: IpAddr = match args.host.as_str() {
        "localhost" => IpAddr::from([127, 0, 0, 1]),
        h => h.parse().map_err(|_| {
            CodedError::usage(format!(
                "--host must be an IP address such as 127.0.0.1 or 0.0.0.0, not {h:?}"
            ))
        })?,
    };
    let dirs = super::run_dirs(args.dirs)?;
    let baseline = if args.baseline.is_empty() {
        Vec::new()
    } else {
        super::run_dirs(args.baseline)?
    };
    crate::view::serve(crate::view::Options {
        dirs,
        baseline,
        host,
        port: args.port,
    })
}
