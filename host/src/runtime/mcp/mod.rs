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
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper_util::rt::{TokioIo, TokioTimer};
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use windtunnel_model::ModelCall;

use super::gateway;
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

/// What a turn's thread waits on: tool calls from the MCP door, model calls the gateway
/// finished, or its own agent's events.
#[derive(Debug)]
pub enum Inbox<T> {
    Tool(ToolRequest),
    Model(Box<ModelCall>),
    Agent(T),
}

type Gate = Box<dyn Fn(ToolRequest) -> Result<(), ToolRequest> + Send + Sync>;
type ModelGate = Box<dyn Fn(Box<ModelCall>) -> Result<(), Box<ModelCall>> + Send + Sync>;

/// How long [`McpRun::cut_model_calls`] waits for cut calls to be recorded: a cut ends a
/// forwarding within [`super::net::STOP_POLL`].
const CUT_WAIT: Duration = Duration::from_secs(2);

/// The most model calls a run keeps that no turn took; the rest are counted.
const MAX_KEPT_MODEL_CALLS: usize = 256;

/// One run's endpoint: its tools, and the gate to the thread running its current turn.
struct RunSlot {
    token: String,
    /// The run's tools (none when the run does not serve MCP).
    tools: Arc<ToolSet>,
    /// Does the run serve the fixture world over MCP?
    serves_mcp: bool,
    /// Open while a turn runs: delivers tool requests to the turn's thread.
    gate: Mutex<Option<Gate>>,
    /// Open while a turn runs: delivers finished model calls to the turn's thread.
    model_gate: Mutex<Option<ModelGate>>,
    /// The bearer token of the run's model gateway.
    model_token: String,
    /// Model calls no turn took, and how many more there were.
    model_kept: Mutex<(Vec<ModelCall>, u64)>,
    /// Model calls being forwarded; `settled` is told as each is recorded.
    model_in_flight: Mutex<Vec<Arc<gateway::InFlight>>>,
    settled: Condvar,
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

impl gateway::RunDoor for RunSlot {
    fn model_token(&self) -> &str {
        &self.model_token
    }

    fn begin(&self, call: Arc<gateway::InFlight>) {
        lock(&self.model_in_flight).push(call);
    }

    fn end(&self, call: &Arc<gateway::InFlight>) {
        lock(&self.model_in_flight).retain(|c| !Arc::ptr_eq(c, call));
        self.settled.notify_all();
    }

    fn turn_open(&self) -> bool {
        lock(&self.model_gate).is_some() && !self.ended.is_cancelled()
    }

    fn deliver(&self, call: Box<ModelCall>) -> Result<(), Box<ModelCall>> {
        match &*lock(&self.model_gate) {
            Some(gate) => gate(call),
            None => Err(call),
        }
    }

    fn keep(&self, call: ModelCall) {
        let mut k = lock(&self.model_kept);
        if k.0.len() < MAX_KEPT_MODEL_CALLS {
            k.0.push(call);
        } else {
            k.1 += 1;
        }
    }
}

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
    /// The model gateway's upstream, when the agent has one.
    gateway: Option<Arc<gateway::Upstream>>,
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
    /// Opens lane `index` on a fresh loopback port, serving each run's model gateway too
    /// when `gateway` is given.
    pub fn open(
        index: u32,
        gateway: Option<Arc<gateway::Upstream>>,
    ) -> Result<Lane, McpError> {
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
            gateway,
            current: Mutex::new(None),
            conns: Mutex::new(Vec::new()),
            closed: CancellationToken::new(),
        });
        rt.spawn(accept_loop(listener, inner.clone()));
        Ok(Lane { inner })
    }

    /// Starts a run on this lane: a fresh endpoint serving `tools` (`None`: the run serves
    /// only the model gateway). The previous run of the lane, if still open, ends first.
    pub fn start_run(&self, tools: Option<Arc<ToolSet>>) -> Result<McpRun, McpError> {
        let token = random_token()?;
        let model_token = format!("wt-run-{}", random_token()?);
        let ended = CancellationToken::new();
        let slot = Arc::new_cyclic(|weak: &std::sync::Weak<RunSlot>| RunSlot {
            token: token.clone(),
            serves_mcp: tools.is_some(),
            tools: tools.clone().unwrap_or_else(|| {
                ToolSet::new(&[]).expect("an empty tool set has no schema to refuse")
            }),
            gate: Mutex::new(None),
            model_gate: Mutex::new(None),
            model_token,
            model_kept: Mutex::new((Vec::new(), 0)),
            model_in_flight: Mutex::new(Vec::new()),
            settled: Condvar::new(),
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
            model_url: self
                .inner
                .gateway
                .as_ref()
                .map(|_| format!("http://{}/runs/{token}/v1", self.inner.addr)),
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
    model_url: Option<String>,
    slot: Arc<RunSlot>,
    lane: Arc<LaneInner>,
}

impl McpRun {
    /// The run's MCP endpoint (streamable HTTP).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The run's tools (none when the run serves only the model gateway).
    pub fn tools(&self) -> &Arc<ToolSet> {
        &self.slot.tools
    }

    /// Does this run serve the fixture world over MCP?
    pub fn serves_mcp(&self) -> bool {
        self.slot.serves_mcp
    }

    /// The run's model gateway (OpenAI-compatible base URL), when the agent has one.
    pub fn model_url(&self) -> Option<&str> {
        self.model_url.as_deref()
    }

    /// The bearer token the run's model gateway takes.
    pub fn model_token(&self) -> &str {
        &self.slot.model_token
    }

    /// Ends every model call of the run still being forwarded, each recorded with `why` as
    /// its error and what of its reply arrived, and waits (at most [`CUT_WAIT`]) until each
    /// is: with the turn's gate open, they reach the turn's inbox, else
    /// [`McpRun::take_model_calls`]. A call that started is never lost to the turn or run
    /// that ended before it.
    pub fn cut_model_calls(&self, why: &str) {
        let calls = lock(&self.slot.model_in_flight).clone();
        if calls.is_empty() {
            return;
        }
        for c in &calls {
            c.cut(why);
        }
        let until = std::time::Instant::now() + CUT_WAIT;
        let mut left = lock(&self.slot.model_in_flight);
        while !left.is_empty() {
            let wait = until.saturating_duration_since(std::time::Instant::now());
            if wait.is_zero() {
                break;
            }
            left = self
                .slot
                .settled
                .wait_timeout(left, wait)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
    }

    /// Model calls of the run that no turn took (refused between turns, or outliving
    /// their turn), and a note of how many more there were.
    pub fn take_model_calls(&self) -> Vec<ModelCall> {
        let (mut kept, more) = std::mem::take(&mut *lock(&self.slot.model_kept));
        if more > 0 {
            let mut note = ModelCall::default();
            note.source = gateway::SOURCE.to_owned();
            note.error = Some(format!("{more} more model call(s) outside a turn not kept"));
            kept.push(note);
        }
        kept
    }

    /// Opens the gate for a turn: tool calls go to `tx` as [`Inbox::Tool`] and finished
    /// model calls as [`Inbox::Model`] until [`McpRun::close_turn`].
    pub fn open_turn<T: Send + 'static>(&self, tx: std::sync::mpsc::Sender<Inbox<T>>) {
        let models = tx.clone();
        let gate: Gate = Box::new(move |req| {
            tx.send(Inbox::Tool(req)).map_err(|e| match e.0 {
                Inbox::Tool(req) => req,
                _ => unreachable!("only tool requests are sent through the gate"),
            })
        });
        let model_gate: ModelGate = Box::new(move |call| {
            models.send(Inbox::Model(call)).map_err(|e| match e.0 {
                Inbox::Model(call) => call,
                _ => unreachable!("only model calls are sent through the model gate"),
            })
        });
        *lock(&self.slot.gate) = Some(gate);
        *lock(&self.slot.model_gate) = Some(model_gate);
    }

    /// Closes the gate: calls from now on are refused until the next turn opens it. Calls
    /// already delivered but not executed are the caller's to refuse (see [`refuse_pending`]).
    pub fn close_turn(&self) {
        lock(&self.slot.gate).take();
        lock(&self.slot.model_gate).take();
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
    lock(&slot.model_gate).take();
    slot.ended.cancel();
    lane.close_connections();
}

/// Refuses every tool request still queued in `rx` (the turn is over), and returns the
/// model calls queued there: they happened during the turn, and are its evidence.
#[must_use]
pub fn refuse_pending<T>(rx: &std::sync::mpsc::Receiver<Inbox<T>>, why: &str) -> Vec<ModelCall> {
    let mut models = Vec::new();
    while let Ok(msg) = rx.try_recv() {
        match msg {
            Inbox::Tool(req) => req.respond(ToolOutcome::Refused(why.to_owned())),
            Inbox::Model(call) => models.push(*call),
            Inbox::Agent(_) => {}
        }
    }
    models
}

/// Runs `request` (an agent's turn over the network) on a thread of its own while the tool
/// calls that come through `run` are executed and its model calls recorded here, on the
/// thread that holds the turn's world. `cut` says, from the answer, why the model calls
/// still in flight were cut off, if they were; `lost` stands for an answer when the request
/// thread ended without one. The turn's MCP side closes before this returns: a call that
/// comes later is refused. Returns the answer, the tool calls and the model calls.
pub fn during_turn<T: Send + 'static>(
    run: &McpRun,
    ctx: &mut crate::runtime::TurnCtx<'_>,
    request: impl FnOnce() -> T + Send,
    lost: impl FnOnce() -> T,
    cut: impl FnOnce(&T) -> Option<&'static str>,
) -> (T, Vec<windtunnel_model::ToolCall>, Vec<ModelCall>) {
    let (tx, rx) = std::sync::mpsc::channel::<Inbox<T>>();
    run.open_turn(tx.clone());
    let mut calls = Vec::new();
    let mut models = Vec::new();
    let answer = std::thread::scope(|s| {
        let thread = s.spawn(move || {
            let _ = tx.send(Inbox::Agent(request()));
        });
        loop {
            match rx.recv_timeout(Duration::from_millis(25)) {
                Ok(Inbox::Tool(req)) => {
                    let step = calls.len() as u32;
                    calls.push(execute(ctx, run.tools(), step, req));
                }
                Ok(Inbox::Model(call)) => {
                    models.push(stamp_model(*call, ctx.index, calls.len()));
                }
                Ok(Inbox::Agent(answer)) => break answer,
                // The request thread ended without an answer (it panicked).
                Err(_) if thread.is_finished() => break lost(),
                Err(_) => {}
            }
        }
    });
    if let Some(why) = cut(&answer) {
        run.cut_model_calls(why);
    }
    run.close_turn();
    let late = refuse_pending(&rx, "refused: the turn ended before the call ran");
    models.extend(
        late.into_iter()
            .map(|c| stamp_model(c, ctx.index, calls.len())),
    );
    (answer, calls, models)
}

/// Why the model calls in flight at a failed turn's end were cut off: the turn's deadline,
/// or `wt`'s stop; `None` for any other failure.
pub fn cut_by(e: &crate::runtime::TurnError) -> Option<&'static str> {
    match e.kind {
        windtunnel_model::TurnErrorKind::Timeout => {
            Some("timed out: the turn timeout came before the reply")
        }
        windtunnel_model::TurnErrorKind::Interrupted => {
            Some("interrupted: wt was stopped before the reply came")
        }
        _ => None,
    }
}

/// Executes a delivered call on the turn's thread, through the one tool-execution path,
/// records it (marked `mcp`) and answers the client.
pub fn execute(
    ctx: &mut crate::runtime::TurnCtx<'_>,
    tools: &ToolSet,
    step: u32,
    req: ToolRequest,
) -> windtunnel_model::ToolCall {
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

/// A model call as evidence of turn `turn`, placed after the turn's first `tool_calls`
/// tool calls.
pub fn stamp_model(mut call: ModelCall, turn: u32, tool_calls: usize) -> ModelCall {
    call.turn = Some(turn);
    call.after_tool_calls = u32::try_from(tool_calls).unwrap_or(u32::MAX);
    call
}

/// The error of a model call still being forwarded when its run ended.
pub const RUN_ENDED_FIRST: &str = "cut off: the run ended before the reply came";

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

/// Sends a request to the run its path names, if that run is the lane's live one: its MCP
/// endpoint (`/runs/<token>/mcp`) or its model gateway (`/runs/<token>/v1/…`).
async fn route(lane: &LaneInner, req: http::Request<hyper::body::Incoming>) -> Response {
    let path = req.uri().path().to_owned();
    let (token, rest) = path
        .strip_prefix("/runs/")
        .and_then(|r| r.split_once('/'))
        .unwrap_or_default();
    let slot = lock(&lane.current)
        .clone()
        .filter(|s| s.token == token && !s.ended.is_cancelled());
    if let Some(model) = rest.strip_prefix("v1/") {
        return match (slot, &lane.gateway) {
            (Some(slot), Some(up)) => {
                let door: Arc<dyn gateway::RunDoor> = slot;
                gateway::serve(up.clone(), door, model, req).await
            }
            _ => refused(),
        };
    }
    match (rest == "mcp", slot) {
        (true, Some(slot)) if slot.serves_mcp => {
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
pub(crate) fn random_token() -> Result<String, McpError> {
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
