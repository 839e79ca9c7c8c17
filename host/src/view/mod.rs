//! `wt view`: every stored run, explorable in a browser.
//!
//! A local, read-only HTTP server (tiny_http, a worker thread per connection slot) over the
//! runs directories, read by the one reader of stored runs ([`index`]). It answers HTML
//! pages rendered on the server ([`pages`]: they work with scripts off; a small script only
//! submits the filter form on change and says when new runs arrived) and a JSON API
//! ([`api`]) the same questions answered as data. It reads the directories again when they
//! change (a run written, a journal grown), so a sweep in progress shows up as it runs.
//!
//! What comes from a runs directory is hostile: every page escapes it (maud, and
//! bidirectional controls written as visible escapes), a strict Content-Security-Policy
//! allows nothing but the server's own stylesheet and script, no endpoint writes anything,
//! and the server answers only requests addressed to the host it listens on (a page of
//! another site cannot reach it through a name that resolves to 127.0.0.1).

mod api;
mod index;
mod pages;
mod state;

use std::io::Cursor;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;

use crate::exit::{self, CodedError};
use crate::term;
use state::{Reply, Side, State, WATCH_EVERY};

/// Requests answered at once.
const WORKERS: usize = 4;

/// What `wt view` serves, and where.
pub(crate) struct Options {
    pub dirs: Vec<PathBuf>,
    pub baseline: Vec<PathBuf>,
    pub host: IpAddr,
    pub port: u16,
}

/// Serves until a signal stops it: exit 130.
pub(crate) fn serve(opts: Options) -> anyhow::Result<u8> {
    let runs = Side::read(opts.dirs.clone())?;
    let baseline = if opts.baseline.is_empty() {
        None
    } else {
        Some(Side::read(opts.baseline.clone())?)
    };
    let addr = SocketAddr::new(opts.host, opts.port);
    let server = tiny_http::Server::http(addr)
        .map_err(|e| CodedError::usage(format!("cannot listen on {addr}: {e}")))?;
    let bound = server
        .server_addr()
        .to_ip()
        .context("the server has no IP address")?;
    let hosts = if opts.host.is_loopback() {
        let port = bound.port();
        vec![
            format!("127.0.0.1:{port}"),
            format!("localhost:{port}"),
            format!("[::1]:{port}"),
            bound.to_string(),
        ]
    } else {
        Vec::new()
    };
    let state = Arc::new(State {
        runs,
        baseline,
        hosts,
    });
    stop_on_signals()?;
    let url = match bound.ip() {
        IpAddr::V6(ip) => format!("http://[{ip}]:{}/", bound.port()),
        IpAddr::V4(ip) => format!("http://{ip}:{}/", bound.port()),
    };
    // The warning comes before the URL: whoever acts on the URL has been told.
    if !opts.host.is_loopback() {
        term::err_line(&format!(
            "warning: wt view listens on {bound}, not on a loopback address: anyone who can reach this machine can read these traces"
        ));
    }
    term::out_line(&url);
    let index = state.runs.now();
    term::err_line(&format!(
        "wt view: {} run(s) in {} scenario(s){}; Ctrl-C stops",
        index.rows.len(),
        index.scenarios.len(),
        state
            .baseline
            .as_ref()
            .map(|b| format!(", baseline {} run(s)", b.now().rows.len()))
            .unwrap_or_default()
    ));
    drop(index);

    let watcher = state.clone();
    std::thread::Builder::new()
        .name("wt-view-watch".into())
        .spawn(move || {
            let mut seen = index::fingerprint(&watcher.runs.dirs, &watcher.runs.journals());
            let mut seen_base = watcher
                .baseline
                .as_ref()
                .map(|b| index::fingerprint(&b.dirs, &b.journals()))
                .unwrap_or_default();
            loop {
                std::thread::sleep(WATCH_EVERY);
                watcher.runs.refresh(&mut seen);
                if let Some(b) = &watcher.baseline {
                    b.refresh(&mut seen_base);
                }
            }
        })?;

    let server = Arc::new(server);
    let workers: Vec<_> = (0..WORKERS)
        .map(|i| {
            let (server, state) = (server.clone(), state.clone());
            std::thread::Builder::new()
                .name(format!("wt-view-{i}"))
                .spawn(move || {
                    while let Ok(request) = server.recv() {
                        answer(&state, request);
                    }
                })
        })
        .collect::<Result<_, _>>()?;
    for w in workers {
        let _ = w.join();
    }
    Ok(exit::INTERRUPTED)
}

/// Ends the process with 130 on SIGINT, SIGTERM or SIGHUP: nothing is being written.
fn stop_on_signals() -> anyhow::Result<()> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])?;
    std::thread::Builder::new()
        .name("wt-signals".into())
        .spawn(move || {
            if signals.forever().next().is_some() {
                std::process::exit(i32::from(exit::INTERRUPTED));
            }
        })?;
    Ok(())
}

/// Only the server's own stylesheet and script; no frame, no form elsewhere, no request
/// anywhere else.
const CSP: &str = "default-src 'none'; style-src 'self'; script-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

fn answer(state: &State, request: tiny_http::Request) {
    let reply = route(state, &request);
    let header = |k: &str, v: &str| {
        tiny_http::Header::from_bytes(k.as_bytes(), v.as_bytes()).expect("a valid header")
    };
    let mut response = tiny_http::Response::new(
        tiny_http::StatusCode(reply.status),
        vec![
            header("Content-Type", reply.content_type),
            header("Content-Security-Policy", CSP),
            header("X-Content-Type-Options", "nosniff"),
            header("Referrer-Policy", "no-referrer"),
            header("Cache-Control", "no-store"),
            header("Cross-Origin-Resource-Policy", "same-origin"),
        ],
        Cursor::new(reply.body.clone()),
        Some(reply.body.len()),
        None,
    );
    if reply.status == 405 {
        response.add_header(header("Allow", "GET, HEAD"));
    }
    // A client gone before its answer is no concern of the server's.
    let _ = request.respond(response);
}

fn route(state: &State, request: &tiny_http::Request) -> Reply {
    if !matches!(
        request.method(),
        tiny_http::Method::Get | tiny_http::Method::Head
    ) {
        return Reply::text(405, "wt view is read-only: GET and HEAD only\n");
    }
    if !state.hosts.is_empty() {
        let host = request
            .headers()
            .iter()
            .find(|h| h.field.equiv("Host"))
            .map(|h| h.value.as_str().to_ascii_lowercase());
        if !host.is_some_and(|h| state.hosts.contains(&h)) {
            return Reply::text(421, "wt view answers requests for its own address only\n");
        }
    }
    let (path, query) = request.url().split_once('?').unwrap_or((request.url(), ""));
    let segments: Vec<String> = path
        .split('/')
        .filter(|s| !s.is_empty())
        .map(|s| {
            percent_encoding::percent_decode_str(s)
                .decode_utf8_lossy()
                .into_owned()
        })
        .collect();
    let segments: Vec<&str> = segments.iter().map(String::as_str).collect();
    match segments.as_slice() {
        [] => pages::list(state, query),
        ["runs", run_id] => pages::run(state, run_id, query),
        ["compare"] => pages::compare(state),
        ["compare", scenario] => pages::pair(state, scenario, query),
        ["api", "runs"] => api::runs(state, query),
        ["api", "runs", run_id] => api::run(state, run_id, query),
        ["api", "status"] => api::status(state),
        ["static", "view.css"] => Reply {
            status: 200,
            content_type: "text/css; charset=utf-8",
            body: pages::CSS.as_bytes().to_vec(),
        },
        ["static", "view.js"] => Reply {
            status: 200,
            content_type: "text/javascript; charset=utf-8",
            body: pages::SCRIPT.as_bytes().to_vec(),
        },
        _ => pages::not_found(path),
    }
}
