//! The fixture world served over MCP: the door through which an agent outside `wt` (a
//! child process, an agent service) acts on the world of the run it is in.
//!
//! Shape:
//!
//! - One [`Lane`] per agent session slot: its own listener on 127.0.0.1, its own connections.
//!   A client that misbehaves on one lane (never closes, floods connections, sends garbage)
//!   costs that lane only. Today the runner has one lane per scenario, so each provisioned
//!   handle opens one lane; with lanes, each lane's handle opens its own.
//! - One [`McpRun`] per run on a lane: a fresh MCP endpoint at
//!   `http://127.0.0.1:<port>/runs/<token>/mcp`, where `<token>` is 128 random bits. The
//!   URL is the capability: it is handed to that run's agent only, it serves that run's tools
//!   and world only, and it dies with the run. Any other path — an ended run, another run,
//!   a guess — is refused with HTTP 404. Each run has its own MCP service and session
//!   manager, so an MCP session opened in one run is unknown to every other.
//! - Tool calls are not executed here. A `tools/call` is handed, as a [`ToolRequest`], to the
//!   thread that is running the run's turn, which executes it through
//!   [`crate::runtime::TurnCtx::call_tool_from`] — the one tool-execution path, the one that
//!   records evidence — and sends the result back. Outside a turn there is nobody to execute
//!   a call, and it is refused.
//!
//! Bounds: a request body of at most [`MAX_REQUEST_BYTES`], request headers within
//! [`HEADER_TIMEOUT`], at most [`MAX_CONNECTIONS_PER_LANE`] open connections per lane (more
//! are closed at once), and every connection of a lane is closed when its run ends.
//!
//! This module never scores and never touches a world itself; the HTTP server runs on a
//! small tokio runtime of its own, so nothing here blocks a runner thread.

mod door;
mod tools;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper_util::rt::{TokioIo, TokioTimer};
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

pub use tools::ToolSet;

/// Largest MCP request body accepted, in bytes. Tool arguments are small; a larger body is
/// answered with HTTP 413 and never read whole.
pub const MAX_REQUEST_BYTES: usize = 1 << 20;

/// How long a client may take to send a request's headers.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// Open connections per lane; connections beyond it are closed at once.
pub const MAX_CONNECTIONS_PER_LANE: usize = 64;

/// Why the MCP server or a lane could not start.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    #[error("start the MCP server's runtime: {0}")]
    Runtime(String),
    #[error("listen on 127.0.0.1 for a lane's MCP endpoint: {0}")]
    Listen(#[source] std::io::Error),
    #[error("read /dev/urandom for a run's MCP address: {0}")]
    Random(#[source] std::io::Error),
}

/// A `tools/call` waiting for the turn's thread to execute it.
#[derive(Debug)]
pub struct ToolRequest {
    pub name: String,
    pub arguments: Value,
    respond: oneshot::Sender<ToolOutcome>,
}

/// What the turn's thread made of a [`ToolRequest`], as the MCP client will see it.
#[derive(Clone, Debug, PartialEq)]
pub enum ToolOutcome {
    /// The tool ran; its result.
    Done(Value),
    /// The tool exists but the call failed (arguments off schema, an effect that failed).
    Failed(String),
    /// No tool of that name in the scenario.
    Unknown(String),
    /// Not executed: no turn in progress, or the turn ended first.
    Refused(String),
}

impl ToolRequest {
    /// Answers the client. A client that gave up meanwhile is not an error.
    pub fn respond(self, outcome: ToolOutcome) {
        let _ = self.respond.send(outcome);
    }
}

/// What a turn's thread waits on: tool calls from the MCP door, or its own agent's events.
#[derive(Debug)]
pub enum Inbox<T> {
    Tool(ToolRequest),
    Agent(T),
}

type Gate = Box<dyn Fn(ToolRequest) -> Result<(), ToolRequest> + Send + Sync>;

/// One run's endpoint: its tools, and the gate to the thread running its current turn.
struct RunSlot {
    token: String,
    tools: Arc<ToolSet>,
    /// Open while a turn runs: delivers tool requests to the turn's thread.
    gate: Mutex<Option<Gate>>,
    service: door::Service,
    ended: CancellationToken,
    /// Calls refused while the run lives (no turn in progress, the turn ended first), and
    /// how many more were refused than kept.
    refused: Mutex<(Vec<Refused>, u64)>,
}

/// A tool call the door refused — no turn of the run was in progress, or the turn ended
/// before the call ran. It never touched the world, but it is evidence of what the agent
/// tried: the runner records it in the trace and the journal.
#[derive(Clone, Debug, PartialEq)]
pub struct Refused {
    pub name: String,
    pub arguments: Value,
    pub why: String,
}

/// The most refused calls kept per run; the rest are counted.
const MAX_REFUSED: usize = 256;

impl RunSlot {
    fn record_refused(&self, name: String, arguments: Value, why: &str) {
        let mut r = lock(&self.refused);
        if r.0.len() < MAX_REFUSED {
            r.0.push(Refused {
                name,
                arguments,
                why: why.to_owned(),
            });
        } else {
            r.1 += 1;
        }
    }

    fn deliver(&self, req: ToolRequest) -> Result<(), ToolRequest> {
        match &*lock(&self.gate) {
            Some(gate) => gate(req),
            None => Err(req),
        }
    }
}

/// The process-wide runtime the MCP endpoints run on (two worker threads: the handlers
/// only parse, route and wait).
fn runtime() -> Result<&'static tokio::runtime::Runtime, McpError> {
    static RT: OnceLock<Result<tokio::runtime::Runtime, String>> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("wt-mcp")
            .enable_io()
            .enable_time()
            .build()
            .map_err(|e| e.to_string())
    })
    .as_ref()
    .map_err(|e| McpError::Runtime(e.clone()))
}

struct LaneInner {
    addr: SocketAddr,
    current: Mutex<Option<Arc<RunSlot>>>,
    /// Open connections (finished ones are pruned as new ones arrive).
    conns: Mutex<Vec<tokio::task::AbortHandle>>,
    closed: CancellationToken,
}

impl LaneInner {
    fn close_connections(&self) {
        for c in lock(&self.conns).drain(..) {
            c.abort();
        }
    }
}

/// One agent session slot's MCP listener. Dropping it stops the listener and closes every
/// connection.
pub struct Lane {
    inner: Arc<LaneInner>,
}

impl Lane {
    /// Opens lane `index` on a fresh loopback port.
    pub fn open(index: u32) -> Result<Lane, McpError> {
        let rt = runtime()?;
        let std_listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(McpError::Listen)?;
        std_listener
            .set_nonblocking(true)
            .map_err(McpError::Listen)?;
        let addr = std_listener.local_addr().map_err(McpError::Listen)?;
        let listener = {
            let _entered = rt.enter();
            tokio::net::TcpListener::from_std(std_listener).map_err(McpError::Listen)?
        };
        tracing::debug!("MCP lane {index} listens on {addr}");
        let inner = Arc::new(LaneInner {
            addr,
            current: Mutex::new(None),
            conns: Mutex::new(Vec::new()),
            closed: CancellationToken::new(),
        });
        rt.spawn(accept_loop(listener, inner.clone()));
        Ok(Lane { inner })
    }

    /// Starts a run on this lane: a fresh endpoint serving `tools`. The previous run of the
    /// lane, if still open, ends first.
    pub fn start_run(&self, tools: Arc<ToolSet>) -> Result<McpRun, McpError> {
        let token = random_token()?;
        let ended = CancellationToken::new();
        let slot = Arc::new_cyclic(|weak: &std::sync::Weak<RunSlot>| RunSlot {
            token: token.clone(),
            tools: tools.clone(),
            gate: Mutex::new(None),
            service: door::service(weak.clone(), ended.clone()),
            ended: ended.clone(),
            refused: Mutex::new((Vec::new(), 0)),
        });
        let previous = lock(&self.inner.current).replace(slot.clone());
        if let Some(previous) = previous {
            end_slot(&self.inner, &previous);
        }
        Ok(McpRun {
            url: format!("http://{}/runs/{token}/mcp", self.inner.addr),
            slot,
            lane: self.inner.clone(),
        })
    }
}

impl Drop for Lane {
    fn drop(&mut self) {
        self.inner.closed.cancel();
        if let Some(slot) = lock(&self.inner.current).take() {
            slot.ended.cancel();
        }
        self.inner.close_connections();
    }
}

/// A run's MCP endpoint. Dropping it ends the run's MCP side: the URL is refused from then
/// on, its sessions and streams close, and so does every connection of the lane.
pub struct McpRun {
    url: String,
    slot: Arc<RunSlot>,
    lane: Arc<LaneInner>,
}

impl McpRun {
    /// The run's MCP endpoint (streamable HTTP).
    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn tools(&self) -> &Arc<ToolSet> {
        &self.slot.tools
    }

    /// Opens the gate for a turn: tool calls go to `tx` as [`Inbox::Tool`] until
    /// [`McpRun::close_turn`].
    pub fn open_turn<T: Send + 'static>(&self, tx: std::sync::mpsc::Sender<Inbox<T>>) {
        let gate: Gate = Box::new(move |req| {
            tx.send(Inbox::Tool(req)).map_err(|e| match e.0 {
                Inbox::Tool(req) => req,
                Inbox::Agent(_) => unreachable!("only tool requests are sent through the gate"),
            })
        });
        *lock(&self.slot.gate) = Some(gate);
    }

    /// Closes the gate: calls from now on are refused until the next turn opens it. Calls
    /// already delivered but not executed are the caller's to refuse (see [`refuse_pending`]).
    pub fn close_turn(&self) {
        lock(&self.slot.gate).take();
    }

    /// The calls refused since the last look, and how many more were refused than kept
    /// (a note of it is the last entry).
    pub fn take_refused(&self) -> Vec<Refused> {
        let (mut kept, more) = std::mem::take(&mut *lock(&self.slot.refused));
        if more > 0 {
            kept.push(Refused {
                name: String::new(),
                arguments: Value::Null,
                why: format!("{more} more refused call(s) not kept"),
            });
        }
        kept
    }
}

impl Drop for McpRun {
    fn drop(&mut self) {
        let mut current = lock(&self.lane.current);
        if current.as_ref().is_some_and(|c| Arc::ptr_eq(c, &self.slot)) {
            current.take();
        }
        drop(current);
        end_slot(&self.lane, &self.slot);
    }
}

fn end_slot(lane: &LaneInner, slot: &RunSlot) {
    lock(&slot.gate).take();
    slot.ended.cancel();
    lane.close_connections();
}

/// Refuses every tool request still queued in `rx` (the turn is over).
pub fn refuse_pending<T>(rx: &std::sync::mpsc::Receiver<Inbox<T>>, why: &str) {
    while let Ok(msg) = rx.try_recv() {
        if let Inbox::Tool(req) = msg {
            req.respond(ToolOutcome::Refused(why.to_owned()));
        }
    }
}

/// Executes a delivered call on the turn's thread, through the one tool-execution path,
/// records it (marked `mcp`) and answers the client.
pub fn execute(
    ctx: &mut crate::runtime::TurnCtx<'_>,
    tools: &ToolSet,
    step: u32,
    req: ToolRequest,
) -> windtunnel_sdk::model::ToolCall {
    let call = ctx.call_tool_from(
        SOURCE,
        tools.specs(),
        step,
        &req.name,
        req.arguments.clone(),
        |spec, args| tools.check(spec, args),
    );
    let outcome = match &call.error {
        None => ToolOutcome::Done(call.result.clone()),
        Some(e) if !tools.specs().iter().any(|t| t.name == call.name) => {
            ToolOutcome::Unknown(e.clone())
        }
        Some(e) => ToolOutcome::Failed(e.clone()),
    };
    req.respond(outcome);
    call
}

/// The `source` of calls that came through this door.
pub const SOURCE: &str = "mcp";

async fn accept_loop(listener: tokio::net::TcpListener, lane: Arc<LaneInner>) {
    loop {
        let accepted = tokio::select! {
            _ = lane.closed.cancelled() => return,
            a = listener.accept() => a,
        };
        let Ok((stream, _)) = accepted else {
            // Out of descriptors and the like: pause rather than spin.
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let mut conns = lock(&lane.conns);
        conns.retain(|c| !c.is_finished());
        if conns.len() >= MAX_CONNECTIONS_PER_LANE {
            drop(stream);
            continue;
        }
        let _ = stream.set_nodelay(true);
        let lane_for_conn = lane.clone();
        let task = tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let lane = lane_for_conn.clone();
                async move { Ok::<_, Infallible>(route(&lane, req).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
        conns.push(task.abort_handle());
    }
}

type Response = http::Response<BoxBody<Bytes, Infallible>>;

/// Sends a request to the run its path names, if that run is the lane's live one.
async fn route(lane: &LaneInner, req: http::Request<hyper::body::Incoming>) -> Response {
    let token = req
        .uri()
        .path()
        .strip_prefix("/runs/")
        .and_then(|rest| rest.strip_suffix("/mcp"))
        .map(str::to_owned);
    let slot = lock(&lane.current).clone();
    match (token, slot) {
        (Some(t), Some(slot)) if t == slot.token && !slot.ended.is_cancelled() => {
            let mut service = slot.service.clone();
            match tower_service::Service::call(&mut service, req).await {
                Ok(resp) => resp,
                Err(never) => match never {},
            }
        }
        _ => refused(),
    }
}

fn refused() -> Response {
    let body = json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": {
            "code": -32001,
            "message": "no live run at this address: the run has ended, or the address belongs to another run",
        }
    });
    http::Response::builder()
        .status(http::StatusCode::NOT_FOUND)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body.to_string())).boxed())
        .unwrap_or_else(|_| http::Response::new(Full::new(Bytes::new()).boxed()))
}

/// 128 random bits as hex, from the OS.
fn random_token() -> Result<String, McpError> {
    use std::io::Read;
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(McpError::Random)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

fn lock<T: ?Sized>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests;
