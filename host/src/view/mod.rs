//! `wt view`: every stored run, explorable in a browser.
//!
//! A local, read-only HTTP server (hyper on a small tokio runtime) over the runs
//! directories, read by the one reader of stored runs ([`index`]). It answers HTML pages
//! rendered on the server ([`pages`], and the [`summary`] it opens on: they work with scripts
//! off; a small script only submits the filter form on change, says when new runs arrived
//! and reads the `j`/`k`/`/` keys) and a JSON API
//! ([`api`]) the same questions answered as data. It reads the directories again when they
//! change (a run written, a journal grown), so a sweep in progress shows up as it runs.
//!
//! What comes from a runs directory is hostile: every page escapes it (maud, and
//! bidirectional controls written as visible escapes), a strict Content-Security-Policy
//! allows nothing but the server's own stylesheet and script, no endpoint writes anything,
//! a run whose files cannot be read is an answer saying so (never a server error), and the
//! server answers only requests addressed to an IP address, `localhost` or a name the user
//! allowed (a page of another site cannot reach it through a name it rebinds to this
//! machine). Clients are hostile too: connections are bounded in number, each costs a task
//! and a descriptor (no thread), a request's head must come within a timeout and a bound
//! in size, and pages are rendered by a fixed pool of workers.

mod api;
mod index;
mod pages;
mod state;
mod summary;
mod transcript;

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use bytes::Bytes;
use http_body_util::Full;
use hyper_util::rt::{TokioIo, TokioTimer};

use crate::exit::{self, CodedError};
use crate::term;
use state::{Reply, Side, State, WATCH_EVERY};

/// Requests rendered at once; the rest wait for one of these workers.
const WORKERS: usize = 4;
/// Threads that read and write the connections (each connection is a task on them).
const IO_THREADS: usize = 2;
/// Largest request head read: a longer one is answered 431 and its connection closed.
const MAX_HEAD_BYTES: usize = 64 << 10;
/// Descriptors kept for what is not a connection: the files read, the listener.
const RESERVED_FDS: u64 = 256;

/// What `wt view` serves, and where.
pub(crate) struct Options {
    pub dirs: Vec<PathBuf>,
    pub baseline: Vec<PathBuf>,
    pub host: IpAddr,
    pub port: u16,
    /// Host names requests may name besides `localhost` and IP addresses.
    pub allow_hosts: Vec<String>,
    /// How long a client has to send a request's head.
    pub header_timeout: Duration,
    /// Most connections open at once.
    pub max_connections: usize,
}

/// Serves until a signal stops it: exit 130.
pub(crate) fn serve(opts: Options) -> anyhow::Result<u8> {
    let mut names = vec!["localhost".to_owned()];
    for n in &opts.allow_hosts {
        names.push(allowed_name(n)?);
    }
    let runs = Side::read(opts.dirs.clone())?;
    let baseline = if opts.baseline.is_empty() {
        None
    } else {
        Some(Side::read(opts.baseline.clone())?)
    };
    let connections = connection_bound(opts.max_connections);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(IO_THREADS)
        .max_blocking_threads(WORKERS)
        .thread_name("wt-view")
        .enable_io()
        .enable_time()
        .build()
        .context("cannot start the server's runtime")?;
    let addr = SocketAddr::new(opts.host, opts.port);
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind(addr))
        .map_err(|e| CodedError::usage(format!("cannot listen on {addr}: {e}")))?;
    let bound = listener.local_addr().context("the server has no address")?;
    let state = Arc::new(State {
        runs,
        baseline,
        names,
    });
    stop_on_signals()?;
    announce(&opts, bound, &state);
    watch(state.clone())?;
    runtime.block_on(accept(listener, state, connections, opts.header_timeout));
    Ok(exit::INTERRUPTED)
}

/// Says where the server listens (warning first when anyone beyond this machine can reach it)
/// and what it read.
fn announce(opts: &Options, bound: SocketAddr, state: &State) {
    let url = match bound.ip() {
        IpAddr::V6(ip) => format!("http://[{ip}]:{}/", bound.port()),
        IpAddr::V4(ip) => format!("http://{ip}:{}/", bound.port()),
    };
    // The warning comes before the URL: whoever acts on the URL has been told.
    if !opts.host.is_loopback() {
        let dirs = opts
            .dirs
            .iter()
            .chain(&opts.baseline)
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(", ");
        term::err_line(&term::sanitize(&format!(
            "warning: wt view listens on {bound}, not on a loopback address: anyone who can reach it can read every trace, score and artifact under {dirs}; it answers requests addressed to an IP address or to {} (add a name with --allow-host NAME)",
            state.names.join(", ")
        )));
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
}

/// Reads the directories again whenever they change, on a thread of its own.
fn watch(watcher: Arc<State>) -> anyhow::Result<()> {
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
    Ok(())
}

/// A name `--allow-host` gave, as requests are compared with it.
fn allowed_name(given: &str) -> anyhow::Result<String> {
    let name = state::host_name(given);
    let ok = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '[' | ']' | ':'));
    if !ok {
        return Err(CodedError::usage(format!(
            "--allow-host takes a host name such as my-box.local, not {:?}",
            crate::report::html::cut_to(given, 100)
        ))
        .into());
    }
    Ok(name)
}

/// The connections served at once: `wanted`, within what the process may open. The soft
/// descriptor limit is raised toward the hard one when it is lower than that needs.
fn connection_bound(wanted: usize) -> usize {
    let need = wanted as u64 + RESERVED_FDS;
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the struct passed.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return wanted;
        }
        if lim.rlim_cur < need {
            let raised = libc::rlimit {
                rlim_cur: need.min(lim.rlim_max),
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                lim.rlim_cur = raised.rlim_cur;
            }
        }
    }
    let room = usize::try_from(lim.rlim_cur.saturating_sub(RESERVED_FDS)).unwrap_or(wanted);
    if room < wanted {
        term::err_line(&format!(
            "warning: wt view serves at most {room} connection(s) at once, not {wanted}: the process may open no more files"
        ));
    }
    wanted.min(room).max(1)
}

/// Accepts connections while fewer than `connections` are open; beyond that a new one
/// waits in the listen queue until one closes. Each connection is a task, closed when a
/// request's head does not arrive within `header_timeout` (an idle keep-alive one too).
async fn accept(
    listener: tokio::net::TcpListener,
    state: Arc<State>,
    connections: usize,
    header_timeout: Duration,
) {
    let slots = Arc::new(tokio::sync::Semaphore::new(connections));
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(_) => {
                // Out of descriptors and the like: pause rather than spin.
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let state = state.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                let state = state.clone();
                async move { Ok::<_, Infallible>(respond(state, request).await) }
            });
            // A client gone, slow or speaking something else is no concern of the server's.
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(header_timeout)
                .max_buf_size(MAX_HEAD_BYTES)
                .serve_connection(TokioIo::new(stream), service)
                .await;
            drop(slot);
        });
    }
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

/// What a request asks, as the workers read it.
struct Asked {
    method: http::Method,
    /// What the request names as its host: its `Host` header and its URI's authority.
    hosts: Vec<String>,
    path: String,
    query: String,
}

async fn respond(
    state: Arc<State>,
    request: http::Request<hyper::body::Incoming>,
) -> http::Response<Full<Bytes>> {
    let (parts, _body) = request.into_parts();
    let asked = Asked {
        hosts: parts
            .headers
            .get_all(http::header::HOST)
            .iter()
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .chain(parts.uri.authority().map(|a| a.as_str().to_owned()))
            .collect(),
        method: parts.method,
        path: parts.uri.path().to_owned(),
        query: parts.uri.query().unwrap_or("").to_owned(),
    };
    let reply = tokio::task::spawn_blocking(move || route(&state, &asked))
        .await
        .unwrap_or_else(|_| Reply::text(500, "wt view failed to answer: an internal error\n"));
    let mut response = http::Response::builder()
        .status(reply.status)
        .header(http::header::CONTENT_TYPE, reply.content_type)
        .header(http::header::CONTENT_SECURITY_POLICY, CSP)
        .header(http::header::X_CONTENT_TYPE_OPTIONS, "nosniff")
        .header(http::header::REFERRER_POLICY, "no-referrer")
        .header(http::header::CACHE_CONTROL, "no-store")
        .header("Cross-Origin-Resource-Policy", "same-origin");
    if reply.status == 405 {
        response = response.header(http::header::ALLOW, "GET, HEAD");
    }
    response
        .body(Full::new(Bytes::from(reply.body)))
        .unwrap_or_else(|_| http::Response::new(Full::new(Bytes::new())))
}

fn route(state: &State, request: &Asked) -> Reply {
    if !matches!(request.method, http::Method::GET | http::Method::HEAD) {
        return Reply::text(405, "wt view is read-only: GET and HEAD only\n");
    }
    if request.hosts.is_empty() || !request.hosts.iter().all(|h| state.addressed_to_us(h)) {
        return Reply::text(
            421,
            "wt view answers requests addressed to an IP address, localhost or a name given with --allow-host\n",
        );
    }
    let (path, query) = (request.path.as_str(), request.query.as_str());
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
    if segments.first() == Some(&"static")
        && let Err(why) = index::params(query, &[])
    {
        return Reply::text(400, &format!("{why}\n"));
    }
    match segments.as_slice() {
        [] => pages::list(state, query),
        ["runs", run_id] => pages::run(state, run_id, query),
        ["compare"] => pages::compare(state, query),
        ["compare", scenario] => pages::pair(state, scenario, query),
        ["api", "runs"] => api::runs(state, query),
        ["api", "runs", run_id] => api::run(state, run_id, query),
        ["api", "status"] => api::status(state, query),
        ["api", "summary"] => api::summary_of(state, query),
        ["static", "view.css"] => Reply {
            status: 200,
            content_type: "text/css; charset=utf-8",
            body: pages::CSS.as_bytes().to_vec(),
        },
        ["static", "favicon.svg"] | ["favicon.ico"] => Reply {
            status: 200,
            content_type: "image/svg+xml",
            body: pages::FAVICON.as_bytes().to_vec(),
        },
        ["static", "view.js"] => Reply {
            status: 200,
            content_type: "text/javascript; charset=utf-8",
            body: pages::SCRIPT.as_bytes().to_vec(),
        },
        _ => pages::not_found(path),
    }
}
