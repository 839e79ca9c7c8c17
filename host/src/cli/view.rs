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
    /// A host name requests may be addressed to, besides localhost and any IP address
    /// (repeatable): the name this machine is reached by. Requests naming another host are
    /// refused, so a web page cannot reach wt view by rebinding its own name.
    #[arg(long = "allow-host", value_name = "NAME")]
    pub allow_host: Vec<String>,
    /// Seconds a client has to send a request's head before its connection is closed.
    #[arg(long, env = "WT_VIEW_HEADER_TIMEOUT_S", value_name = "SECONDS", default_value_t = 10,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub header_timeout: u64,
    /// Most connections open at once; more wait to be accepted until one closes.
    #[arg(long, env = "WT_VIEW_MAX_CONNECTIONS", value_name = "N", default_value_t = 1024,
          value_parser = clap::value_parser!(u32).range(1..=65536))]
    pub max_connections: u32,
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
        allow_hosts: args.allow_host,
        header_timeout: std::time::Duration::from_secs(args.header_timeout),
        max_connections: args.max_connections as usize,
    })
}
