//! World servers: an MCP server as (part of) a scenario's world.
//!
//! `wt` is the server's only client. It starts the server (`command`, over stdio, in the run's
//! scratch directory) or connects to it (`url`, streamable HTTP), lists its tools once per
//! scenario ([`discover`]), and then, per run, forwards the agent's calls to it — the calls
//! come through `wt`'s one tool path ([`crate::runtime::TurnCtx`]), so they are checked
//! against their schema, gated to turns, bounded and recorded like built-in tools — and
//! reads its state with the pack's `state` call.
//!
//! The transport is written here rather than taken from an MCP client library because what
//! `wt` needs of it is its bounds: every message is at most [`MAX_MESSAGE_BYTES`], every
//! exchange has a deadline, a server that writes something that is not JSON-RPC is broken
//! at once, and nothing the server started outlives it (process group and
//! [`crate::procs`] tag). A server that breaks makes its run ERROR, naming it.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use windtunnel_model::{ServerCall, ToolEffect, ToolSpec, WorldServer, WorldServerRecord};

use crate::interrupt::Interrupt;
use crate::procs::Tail;

/// Largest message a world server may send, in bytes.
pub const MAX_MESSAGE_BYTES: usize = 8 << 20;

/// Default time a server has to start and answer `initialize`.
pub const DEFAULT_START_TIMEOUT: Duration = Duration::from_secs(20);

/// Default time one call may take.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// The most pages of `tools/list` read.
const MAX_LIST_PAGES: usize = 50;

/// Why a stdio server can no longer answer.
const CLOSED_STDOUT: &str = "closed its stdout";

/// The MCP protocol version `wt` speaks as a client.
const PROTOCOL_VERSION: &str = "2025-06-18";

/// The variables of `wt`'s own environment a server process gets (beside its `env`).
const PASSED_ENV: [&str; 6] = ["PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "TZ"];

/// The most bytes of a scratch directory's `files` copied per run.
const MAX_FILES_BYTES: u64 = 256 << 20;

/// The server's name: its `name`, else its program's file name, else its URL's host.
pub fn name_of(spec: &WorldServer) -> String {
    if !spec.name.is_empty() {
        return spec.name.clone();
    }
    if let Some(argv) = &spec.command
        && let Some(program) = argv.first()
    {
        let base = Path::new(program)
            .file_name()
            .map_or_else(|| program.clone(), |n| n.to_string_lossy().into_owned());
        // `node server.js`, `python -m x`: the script says more than the interpreter.
        if matches!(base.as_str(), "node" | "python" | "python3" | "uv" | "npx" | "deno")
            && let Some(next) = argv.iter().skip(1).find(|a| !a.starts_with('-'))
        {
            return Path::new(next)
                .file_stem()
                .map_or_else(|| next.clone(), |n| n.to_string_lossy().into_owned());
        }
        return base;
    }
    spec.url
        .as_deref()
        .and_then(|u| reqwest::Url::parse(u).ok())
        .and_then(|u| u.host_str().map(|h| format!("{h}:{}", u.port_or_known_default().unwrap_or(0))))
        .unwrap_or_else(|| "world-server".into())
}

fn start_timeout(spec: &WorldServer) -> Duration {
    spec.start_timeout_s
        .map_or(DEFAULT_START_TIMEOUT, Duration::from_secs_f64)
}

fn call_timeout(spec: &WorldServer) -> Duration {
    spec.call_timeout_s
        .map_or(DEFAULT_CALL_TIMEOUT, Duration::from_secs_f64)
}

/// What a forwarded call came to.
#[derive(Debug, PartialEq)]
pub enum Called {
    /// The tool ran; its result (structured content, else JSON text parsed, else the text).
    Done(Value),
    /// The tool ran and said it failed (`isError`), or refused the call (a JSON-RPC error).
    Failed(String),
}

/// A connection to a world server: its process (for `command` servers), its transport, and
/// whether it broke.
pub struct Server {
    name: String,
    conn: Conn,
    proc: Option<ServerProc>,
    /// Why the server can no longer be used; every call fails from then on.
    broken: Option<String>,
    next_id: u64,
    call_timeout: Duration,
    /// The sweep's stop: every wait for the server ends once it is cut.
    stop: Arc<Interrupt>,
    /// Held while a `url` server is in use: runs of one URL never overlap.
    _lease: Option<Lease>,
}

enum Conn {
    Stdio {
        stdin: ChildStdin,
        rx: Receiver<Result<Value, String>>,
    },
    Http {
        client: reqwest::blocking::Client,
        url: String,
        session: Option<String>,
    },
}

struct ServerProc {
    child: Child,
    pgid: i32,
    tag: String,
    stderr: Arc<Mutex<Tail>>,
    stderr_done: Receiver<()>,
    killed: Option<String>,
    reaped: bool,
    /// Its stderr reached its end (and the tail is whole).
    stderr_closed: bool,
    /// What confined it.
    sandbox: windtunnel_model::SandboxRecord,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("name", &self.name)
            .field("broken", &self.broken)
            .finish_non_exhaustive()
    }
}

impl Server {
    /// Starts (or connects to) the server with `dir` as its scratch directory and completes
    /// the MCP handshake. A stop requested ends the wait for a `url` server's lease; a cut
    /// ends every wait for an answer, this one's and every later call's, within
    /// [`STOP_POLL`].
    pub fn start(spec: &WorldServer, dir: &Path, stop: &Arc<Interrupt>) -> Result<Server, String> {
        let name = name_of(spec);
        let deadline = Instant::now() + start_timeout(spec);
        let mut server = match (&spec.command, &spec.url) {
            (Some(argv), _) => {
                let settings = spec.sandbox.clone().unwrap_or_default();
                let (proc, stdin, rx) = ServerProc::spawn(argv, &spec.env, dir, &settings)?;
                Server {
                    name,
                    conn: Conn::Stdio { stdin, rx },
                    proc: Some(proc),
                    broken: None,
                    next_id: 0,
                    call_timeout: call_timeout(spec),
                    stop: stop.clone(),
                    _lease: None,
                }
            }
            (None, Some(url)) => {
                let lease =
                    Lease::take(url, &|| stop.requested()).ok_or("not started: wt is stopping")?;
                let client = reqwest::blocking::Client::builder()
                    .redirect(reqwest::redirect::Policy::none())
                    .connect_timeout(Duration::from_secs(5))
                    .build()
                    .map_err(|e| format!("cannot build an HTTP client: {e}"))?;
                Server {
                    name,
                    conn: Conn::Http {
                        client,
                        url: url.clone(),
                        session: None,
                    },
                    proc: None,
                    broken: None,
                    next_id: 0,
                    call_timeout: call_timeout(spec),
                    stop: stop.clone(),
                    _lease: Some(lease),
                }
            }
            (None, None) => return Err("has neither `command` nor `url`".into()),
        };
        let init = server.request(
            "initialize",
            json!({
                "protocolVersion": PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "wt", "version": env!("CARGO_PKG_VERSION")},
            }),
            deadline,
        );
        match init {
            Ok(result) if result.get("protocolVersion").is_some() => {}
            Ok(other) => {
                return Err(server.fail(format!(
                    "answered `initialize` without a protocol version: {}",
                    excerpt(&other.to_string())
                )));
            }
            Err(e) => return Err(server.fail(e.to_string())),
        }
        server
            .notify("notifications/initialized", json!({}))
            .map_err(|e| server.fail(e))?;
        Ok(server)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Why the server broke, if it did.
    pub fn broken(&self) -> Option<&str> {
        self.broken.as_deref()
    }

    /// Marks the server broken (the first reason stays) and returns the reason, with the
    /// end of its stderr when it has one.
    fn fail(&mut self, why: String) -> String {
        let mut why = why;
        if let Some(p) = &mut self.proc {
            // A server that closed its stdout is usually on its way out: a moment for it to
            // finish, so that the reason says how it ended.
            let patience = if why.starts_with(CLOSED_STDOUT) {
                Duration::from_secs(1)
            } else {
                Duration::ZERO
            };
            if let Some(exit) = p.exited(patience) {
                why.push_str(&format!(" ({exit})"));
            }
            let tail = lock(&p.stderr).text();
            if !tail.trim().is_empty() {
                why.push_str(&format!("; stderr (last bytes): {}", stderr_excerpt(&tail)));
            }
        }
        self.broken.get_or_insert(why).clone()
    }

    /// Every tool the server lists, as MCP tool objects.
    pub fn list_tools(&mut self) -> Result<Vec<Value>, String> {
        let mut tools = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..MAX_LIST_PAGES {
            let params = match &cursor {
                Some(c) => json!({ "cursor": c }),
                None => json!({}),
            };
            let deadline = Instant::now() + self.call_timeout;
            let page = self
                .request("tools/list", params, deadline)
                .map_err(|e| self.fail(e.to_string()))?;
            let Some(list) = page.get("tools").and_then(Value::as_array) else {
                return Err(self.fail(format!(
                    "answered `tools/list` without a `tools` array: {}",
                    excerpt(&page.to_string())
                )));
            };
            tools.extend(list.iter().cloned());
            match page.get("nextCursor").and_then(Value::as_str) {
                Some(c) if !c.is_empty() => cursor = Some(c.to_owned()),
                _ => return Ok(tools),
            }
        }
        Err(self.fail(format!(
            "`tools/list` still had more pages after {MAX_LIST_PAGES}"
        )))
    }

    /// Calls `tool`. `Err` means the server itself failed (it is broken from then on); a tool
    /// that failed is [`Called::Failed`].
    pub fn call(&mut self, tool: &str, arguments: &Value) -> Result<Called, String> {
        if let Some(why) = &self.broken {
            return Err(why.clone());
        }
        let deadline = Instant::now() + self.call_timeout;
        let result = match self.request(
            "tools/call",
            json!({ "name": tool, "arguments": arguments }),
            deadline,
        ) {
            Ok(r) => r,
            Err(RpcError::Refused(why)) => return Ok(Called::Failed(why)),
            Err(e) => return Err(self.fail(e.to_string())),
        };
        Ok(read_result(&result))
    }

    /// Makes a call of `wt`'s own (setup, reset, state): a failed tool is an error too.
    pub fn call_own(&mut self, what: &str, call: &ServerCall) -> Result<Value, String> {
        match self.call(&call.tool, &call.arguments)? {
            Called::Done(v) => Ok(v),
            Called::Failed(why) => Err(format!("its {what} call `{}` failed: {why}", call.tool)),
        }
    }

    /// Ends the connection (and kills the process and what it started) and says how the
    /// server ended.
    pub fn stop(mut self) -> WorldServerRecord {
        let mut record = WorldServerRecord::default();
        record.name = self.name.clone();
        if let Conn::Http {
            client,
            url,
            session: Some(session),
        } = &self.conn
        {
            // Ends the session politely; a server that does not support it says 405.
            let _ = client
                .delete(url)
                .header("Mcp-Session-Id", session)
                .timeout(Duration::from_secs(2))
                .send();
        }
        if let Some(p) = self.proc.take() {
            record.sandbox = Some(p.sandbox.clone());
            let (exit, tail, total) = p.finish();
            record.exit = Some(exit);
            record.stderr_tail = tail;
            record.stderr_bytes = total;
        }
        record
    }

    /// The stderr the server wrote so far (kept servers are recorded per run this way).
    pub fn record(&self) -> WorldServerRecord {
        let mut record = WorldServerRecord::default();
        record.name = self.name.clone();
        if let Some(p) = &self.proc {
            let t = lock(&p.stderr);
            record.stderr_tail = t.text();
            record.stderr_bytes = t.total;
            record.sandbox = Some(p.sandbox.clone());
        }
        record
    }

    fn notify(&mut self, method: &str, params: Value) -> Result<(), String> {
        let msg = json!({"jsonrpc": "2.0", "method": method, "params": params});
        match &mut self.conn {
            Conn::Stdio { stdin, .. } => write_line(stdin, &msg),
            Conn::Http {
                client,
                url,
                session,
            } => {
                let (client, url, session) = (client.clone(), url.clone(), session.clone());
                let sent = until_cut(&self.stop, move || {
                    post(&client, &url, session.as_deref(), &msg, Duration::from_secs(10))
                        .map(|resp| resp.status())
                });
                match sent {
                    None => Err(stopped(method)),
                    Some(Ok(status)) if status.is_success() => Ok(()),
                    Some(Ok(status)) => Err(format!("answered `{method}` with HTTP {status}")),
                    Some(Err(e)) => Err(e),
                }
            }
        }
    }

    fn request(&mut self, method: &str, params: Value, deadline: Instant) -> Result<Value, RpcError> {
        self.next_id += 1;
        let id = self.next_id;
        let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        match &mut self.conn {
            Conn::Stdio { stdin, rx } => {
                write_line(stdin, &msg).map_err(RpcError::Broken)?;
                loop {
                    let left = deadline.saturating_duration_since(Instant::now());
                    let m = match rx.recv_timeout(left.min(STOP_POLL)) {
                        Ok(Ok(m)) => m,
                        Ok(Err(why)) => return Err(RpcError::Broken(why)),
                        Err(RecvTimeoutError::Timeout) if self.stop.is_cut() => {
                            return Err(RpcError::Broken(stopped(method)));
                        }
                        Err(RecvTimeoutError::Timeout) if left > STOP_POLL => continue,
                        Err(RecvTimeoutError::Timeout) => {
                            return Err(RpcError::Broken(format!(
                                "did not answer `{method}` in time"
                            )));
                        }
                        Err(RecvTimeoutError::Disconnected) => {
                            return Err(RpcError::Broken(CLOSED_STDOUT.into()));
                        }
                    };
                    match classify(&m, id) {
                        Msg::Answer(r) => return r.map_err(|e| on_error(method, e)),
                        Msg::Request(req_id, req_method) => {
                            // `wt` offers the server nothing (no roots, sampling or
                            // elicitation): a ping is answered, anything else refused.
                            let answer = if req_method == "ping" {
                                json!({"jsonrpc": "2.0", "id": req_id, "result": {}})
                            } else {
                                json!({"jsonrpc": "2.0", "id": req_id, "error": {"code": -32601, "message": "wt offers a world server no client features"}})
                            };
                            write_line(stdin, &answer).map_err(RpcError::Broken)?;
                        }
                        Msg::Other => {}
                        Msg::Garbage(why) => return Err(RpcError::Broken(why)),
                    }
                }
            }
            Conn::Http {
                client,
                url,
                session,
            } => {
                let left = deadline.saturating_duration_since(Instant::now());
                let (client, url, asked) = (client.clone(), url.clone(), session.clone());
                let asked_for = method.to_owned();
                let answered = until_cut(&self.stop, move || {
                    http_request(&client, &url, asked, &msg, &asked_for, id, left)
                });
                let Some((given, answer)) = answered else {
                    return Err(RpcError::Broken(stopped(method)));
                };
                if given.is_some() {
                    *session = given;
                }
                answer
            }
        }
    }
}

/// How often a wait for a world server looks at the sweep's stop.
const STOP_POLL: Duration = Duration::from_millis(25);

fn stopped(method: &str) -> String {
    format!("stopped waiting for its answer to `{method}`: wt is stopping")
}

/// Runs `f` (a blocking exchange with a `url` server) on a thread of its own and waits for
/// it until `stop` is cut (`None` then): the thread is left to end at its own timeout.
fn until_cut<T: Send + 'static>(stop: &Interrupt, f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("wt-world-http".into())
        .spawn(move || {
            let _ = tx.send(f());
        })
        .ok()?;
    loop {
        match rx.recv_timeout(STOP_POLL) {
            Ok(v) => return Some(v),
            Err(RecvTimeoutError::Timeout) if !stop.is_cut() => {}
            Err(_) => return None,
        }
    }
}

/// One JSON-RPC request to a `url` server: the session id it gave (if any), and its answer.
fn http_request(
    client: &reqwest::blocking::Client,
    url: &str,
    session: Option<String>,
    msg: &Value,
    method: &str,
    id: u64,
    left: Duration,
) -> (Option<String>, Result<Value, RpcError>) {
    let mut given = None;
    let answer = (|| {
        let resp = post(client, url, session.as_deref(), msg, left).map_err(RpcError::Broken)?;
        let status = resp.status();
        if !status.is_success() {
            let body = read_bounded(resp).unwrap_or_default();
            return Err(RpcError::Broken(format!(
                "answered `{method}` with HTTP {status}: {}",
                excerpt(&String::from_utf8_lossy(&body))
            )));
        }
        given = resp
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let sse = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|t| t.starts_with("text/event-stream"));
        if sse {
            // Read event by event and stop at the answer: a server may keep the stream
            // open after it.
            return match sse_answer(resp, id) {
                Ok(Some(r)) => r.map_err(|e| on_error(method, e)),
                Ok(None) => Err(RpcError::Broken(format!(
                    "answered `{method}` without a JSON-RPC response to it"
                ))),
                Err(why) => Err(RpcError::Broken(why)),
            };
        }
        let body = read_bounded(resp).map_err(RpcError::Broken)?;
        let message: Value = serde_json::from_slice(&body).map_err(|e| {
            RpcError::Broken(format!(
                "answered `{method}` with something that is not JSON ({e}): {}",
                excerpt(&String::from_utf8_lossy(&body))
            ))
        })?;
        if let Msg::Answer(r) = classify(&message, id) {
            return r.map_err(|e| on_error(method, e));
        }
        Err(RpcError::Broken(format!(
            "answered `{method}` without a JSON-RPC response to it"
        )))
    })();
    (given, answer)
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(p) = self.proc.take() {
            let _ = p.finish();
        }
    }
}

#[derive(Debug)]
enum RpcError {
    /// The server is unusable: it died, hung, or broke the protocol.
    Broken(String),
    /// A JSON-RPC error answer: the server is fine, the request was refused.
    Refused(String),
}

impl std::fmt::Display for RpcError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RpcError::Broken(s) | RpcError::Refused(s) => f.write_str(s),
        }
    }
}

impl From<RpcError> for String {
    fn from(e: RpcError) -> String {
        e.to_string()
    }
}

fn on_error(method: &str, error: Value) -> RpcError {
    let message = error
        .get("message")
        .and_then(Value::as_str)
        .map_or_else(|| error.to_string(), str::to_owned);
    RpcError::Refused(format!("`{method}` refused: {}", excerpt(&message)))
}

enum Msg {
    /// The answer to our request: its result, or its error object.
    Answer(Result<Value, Value>),
    /// A request from the server: its id and method.
    Request(Value, String),
    /// A notification, or an answer to something else.
    Other,
    Garbage(String),
}

fn classify(m: &Value, id: u64) -> Msg {
    let Some(obj) = m.as_object() else {
        return Msg::Garbage(format!(
            "wrote a message that is not a JSON-RPC object: {}",
            excerpt(&m.to_string())
        ));
    };
    if let Some(method) = obj.get("method").and_then(Value::as_str) {
        return match obj.get("id") {
            Some(req_id) if !req_id.is_null() => Msg::Request(req_id.clone(), method.to_owned()),
            _ => Msg::Other,
        };
    }
    if obj.get("id").and_then(Value::as_u64) != Some(id) {
        return Msg::Other;
    }
    if let Some(e) = obj.get("error") {
        return Msg::Answer(Err(e.clone()));
    }
    match obj.get("result") {
        Some(r) => Msg::Answer(Ok(r.clone())),
        None => Msg::Garbage(format!(
            "answered without `result` or `error`: {}",
            excerpt(&m.to_string())
        )),
    }
}

/// A `tools/call` result as the tool's result: `isError` is a failed call; structured
/// content wins; one text block that is JSON is that JSON; other text is the text.
fn read_result(result: &Value) -> Called {
    let texts: Vec<&str> = result
        .get("content")
        .and_then(Value::as_array)
        .map(|c| {
            c.iter()
                .filter_map(|b| b.get("text").and_then(Value::as_str))
                .collect()
        })
        .unwrap_or_default();
    if result.get("isError").and_then(Value::as_bool) == Some(true) {
        let why = if texts.is_empty() {
            "the tool failed without saying why".to_owned()
        } else {
            texts.join("\n")
        };
        return Called::Failed(why);
    }
    if let Some(s) = result.get("structuredContent")
        && !s.is_null()
    {
        return Called::Done(s.clone());
    }
    match texts.as_slice() {
        [] => Called::Done(result.get("content").cloned().unwrap_or(Value::Null)),
        [one] => Called::Done(
            serde_json::from_str(one).unwrap_or_else(|_| Value::String((*one).to_owned())),
        ),
        many => Called::Done(Value::Array(
            many.iter()
                .map(|t| serde_json::from_str(t).unwrap_or_else(|_| Value::String((*t).to_owned())))
                .collect(),
        )),
    }
}

fn write_line(stdin: &mut ChildStdin, msg: &Value) -> Result<(), String> {
    let mut line = msg.to_string();
    line.push('\n');
    stdin
        .write_all(line.as_bytes())
        .and_then(|()| stdin.flush())
        .map_err(|e| format!("cannot write to its stdin ({e}): it has exited or closed it"))
}

fn post(
    client: &reqwest::blocking::Client,
    url: &str,
    session: Option<&str>,
    msg: &Value,
    timeout: Duration,
) -> Result<reqwest::blocking::Response, String> {
    let mut req = client
        .post(url)
        .timeout(timeout.max(Duration::from_millis(1)))
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .header(reqwest::header::ACCEPT, "application/json, text/event-stream")
        .header("MCP-Protocol-Version", PROTOCOL_VERSION)
        .body(msg.to_string());
    if let Some(s) = session {
        req = req.header("Mcp-Session-Id", s);
    }
    req.send().map_err(|e| {
        if e.is_timeout() {
            "did not answer in time".to_owned()
        } else {
            format!("cannot be reached: {}", chain(&e))
        }
    })
}

/// An error with its causes, `: `-separated.
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let text = c.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        cause = c.source();
    }
    out
}

fn read_bounded(resp: reqwest::blocking::Response) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    resp.take(MAX_MESSAGE_BYTES as u64 + 1)
        .read_to_end(&mut body)
        .map_err(|e| format!("reading its answer: {e}"))?;
    if body.len() > MAX_MESSAGE_BYTES {
        return Err(format!("sent an answer larger than {MAX_MESSAGE_BYTES} bytes"));
    }
    Ok(body)
}

/// Reads an SSE response event by event until the answer to request `id`: `Some` of it,
/// or `None` when the stream ended without one. At most [`MAX_MESSAGE_BYTES`] are read.
#[allow(clippy::type_complexity)]
fn sse_answer(resp: impl Read, id: u64) -> Result<Option<Result<Value, Value>>, String> {
    let mut reader = BufReader::new(resp.take(MAX_MESSAGE_BYTES as u64 + 1));
    let mut data = String::new();
    let mut line = Vec::new();
    let mut read = 0usize;
    loop {
        line.clear();
        let n = reader
            .read_until(b'\n', &mut line)
            .map_err(|e| format!("reading its answer: {e}"))?;
        read += n;
        if read > MAX_MESSAGE_BYTES {
            return Err(format!(
                "sent an answer larger than {MAX_MESSAGE_BYTES} bytes"
            ));
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end_matches(['\n', '\r']);
        if n == 0 || text.is_empty() {
            if !data.is_empty()
                && let Ok(m) = serde_json::from_str::<Value>(&data)
                && let Msg::Answer(r) = classify(&m, id)
            {
                return Ok(Some(r));
            }
            data.clear();
            if n == 0 {
                return Ok(None);
            }
        } else if let Some(d) = text.strip_prefix("data:") {
            if !data.is_empty() {
                data.push('\n');
            }
            data.push_str(d.strip_prefix(' ').unwrap_or(d));
        }
    }
}

impl ServerProc {
    #[allow(clippy::type_complexity)]
    fn spawn(
        argv: &[String],
        env: &BTreeMap<String, String>,
        dir: &Path,
        settings: &windtunnel_model::SandboxSettings,
    ) -> Result<(ServerProc, ChildStdin, Receiver<Result<Value, String>>), String> {
        let Some(program) = argv.first() else {
            return Err("`command` is empty".into());
        };
        let run_dir = dir.to_string_lossy();
        let fill = |s: &str| s.replace("{run_dir}", &run_dir);
        let (tag_env, tag) = crate::procs::new_tag();
        let argv: Vec<String> = argv.iter().map(|a| fill(a)).collect();
        // Confined to its scratch directory: it reads the system and its command's files, and
        // reaches no network (it speaks over stdio).
        let sandbox = crate::sandbox::confine(&crate::sandbox::Request {
            role: crate::sandbox::Role::WorldServer,
            argv: &argv,
            path_var: std::env::var_os("PATH").as_deref(),
            read: &[],
            write: &[dir.to_path_buf()],
            ports: &[],
            bind: &[],
            settings,
        })?;
        let record = sandbox.record();
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..]).current_dir(dir).env_clear();
        sandbox.install(&mut cmd);
        for k in PASSED_ENV {
            if let Some(v) = std::env::var_os(k) {
                cmd.env(k, v);
            }
        }
        cmd.envs(env.iter().map(|(k, v)| (k, fill(v))))
            .env(tag_env, &tag)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        // Not registered with the agents' process groups: every way out of a sweep that skips
        // teardown kills the sweep's tagged processes, and this one carries the tag.
        let mut child = cmd
            .spawn()
            .map_err(|e| {
                if e.kind() == std::io::ErrorKind::NotFound {
                    format!("cannot start `{program}`: not found (is it installed, and on PATH?)")
                } else {
                    format!(
                        "cannot start `{program}`: {e}{}",
                        crate::sandbox::hint(&e, &record)
                    )
                }
            })?;
        let pgid = i32::try_from(child.id()).unwrap_or(i32::MAX);
        let stdin = child.stdin.take().expect("stdin is piped");
        let out = child.stdout.take().expect("stdout is piped");
        let err = child.stderr.take().expect("stderr is piped");
        let (tx, rx) = mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name("wt-world-stdout".into())
            .spawn(move || read_messages(out, &tx));
        let stderr = Arc::new(Mutex::new(Tail::default()));
        let (done_tx, stderr_done) = mpsc::channel();
        let tail = stderr.clone();
        let spawned_err = std::thread::Builder::new()
            .name("wt-world-stderr".into())
            .spawn(move || {
                crate::procs::read_tail(err, &tail);
                let _ = done_tx.send(());
            });
        let proc = ServerProc {
            child,
            pgid,
            tag,
            stderr,
            stderr_done,
            killed: None,
            reaped: false,
            stderr_closed: false,
            sandbox: record,
        };
        if let Err(e) = spawned.and(spawned_err) {
            return Err(format!("cannot start a thread to read it: {e}"));
        }
        Ok((proc, stdin, rx))
    }

    /// How the leader ended, if it has (it is not reaped: its group id stays reserved);
    /// then its stderr is read to the end first, briefly, so that the tail says why.
    fn exited(&mut self, patience: Duration) -> Option<String> {
        use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
        let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT | WaitPidFlag::WNOHANG;
        let until = Instant::now() + patience;
        let how = loop {
            match waitid(Id::Pid(nix::unistd::Pid::from_raw(self.pgid)), flags) {
                Ok(WaitStatus::Exited(_, code)) => break format!("exited with status {code}"),
                Ok(WaitStatus::Signaled(_, sig, _)) => break format!("killed by {sig}"),
                _ if Instant::now() < until => std::thread::sleep(Duration::from_millis(10)),
                _ => return None,
            }
        };
        if !self.stderr_closed {
            self.stderr_closed = self.stderr_done.recv_timeout(Duration::from_secs(1)).is_ok();
        }
        Some(how)
    }

    /// Kills the group and everything tagged, reaps the leader, and says how it ended.
    fn finish(mut self) -> (String, String, u64) {
        use nix::sys::signal::{Signal, killpg};
        let alive = matches!(self.child.try_wait(), Ok(None));
        if alive {
            self.killed = Some("its run ended".into());
        }
        let _ = killpg(nix::unistd::Pid::from_raw(self.pgid), Signal::SIGKILL);
        crate::procs::kill_tagged(&self.tag);
        let status = self.child.wait();
        self.reaped = true;
        if !self.stderr_closed {
            let _ = self.stderr_done.recv_timeout(Duration::from_secs(2));
        }
        let exit = match (&self.killed, status) {
            (Some(why), _) => format!("stopped by wt ({why})"),
            (None, Ok(s)) => match (s.code(), s.signal()) {
                (Some(c), _) => format!("exited with status {c}"),
                (None, Some(sig)) => format!("killed by signal {sig}"),
                _ => "ended".to_owned(),
            },
            (None, Err(e)) => format!("cannot be waited for: {e}"),
        };
        let t = lock(&self.stderr);
        (exit, t.text(), t.total)
    }
}

impl Drop for ServerProc {
    fn drop(&mut self) {
        if !self.reaped {
            use nix::sys::signal::{Signal, killpg};
            let _ = killpg(nix::unistd::Pid::from_raw(self.pgid), Signal::SIGKILL);
            crate::procs::kill_tagged(&self.tag);
            let _ = self.child.wait();
            }
    }
}

/// Reads newline-delimited JSON-RPC messages, each at most [`MAX_MESSAGE_BYTES`].
fn read_messages(out: std::process::ChildStdout, tx: &mpsc::Sender<Result<Value, String>>) {
    let mut reader = BufReader::new(out);
    let mut line = Vec::new();
    loop {
        line.clear();
        let limit = MAX_MESSAGE_BYTES as u64 + 1;
        match (&mut reader).take(limit).read_until(b'\n', &mut line) {
            Ok(0) => {
                let _ = tx.send(Err(CLOSED_STDOUT.into()));
                return;
            }
            Ok(_) if line.len() > MAX_MESSAGE_BYTES => {
                let _ = tx.send(Err(format!(
                    "wrote a message longer than {MAX_MESSAGE_BYTES} bytes"
                )));
                return;
            }
            Ok(_) => {
                let text = String::from_utf8_lossy(&line);
                let text = text.trim();
                if text.is_empty() {
                    continue;
                }
                let msg = serde_json::from_str::<Value>(text).map_err(|_| {
                    format!(
                        "wrote something on stdout that is not JSON-RPC: {}",
                        excerpt(text)
                    )
                });
                let bad = msg.is_err();
                if tx.send(msg).is_err() || bad {
                    // Keep reading so the server never dies of a broken pipe before it is
                    // stopped; what it writes is dropped.
                    let _ = std::io::copy(&mut reader, &mut std::io::sink());
                    return;
                }
            }
            Err(e) => {
                let _ = tx.send(Err(format!("reading its stdout: {e}")));
                return;
            }
        }
    }
}

/// The most characters of a server's stderr a message quotes.
const STDERR_EXCERPT_CHARS: usize = 600;

/// The end of a server's stderr, where the cause is (a traceback's last line): its last
/// lines within [`STDERR_EXCERPT_CHARS`], on one line, control characters escaped, with `…`
/// in front when the start was cut.
fn stderr_excerpt(tail: &str) -> String {
    crate::term::sanitize(&crate::term::last_lines(tail.trim(), STDERR_EXCERPT_CHARS)).into_owned()
}

/// At most 300 characters of `s` from its start (an answer, a line of stdout: what it says
/// first is what it is), on one line, with control characters escaped.
pub fn excerpt(s: &str) -> String {
    let cut: String = s.chars().take(300).collect();
    let more = if s.chars().count() > 300 { "…" } else { "" };
    format!("{}{more}", crate::term::sanitize(&cut))
}

/// One `url` world server in use at a time: a run holds its URL's lease from connecting to
/// the end of the run, so runs on different lanes never see each other's state.
struct Lease {
    url: String,
}

fn leases() -> &'static (Mutex<Vec<String>>, Condvar) {
    static L: OnceLock<(Mutex<Vec<String>>, Condvar)> = OnceLock::new();
    L.get_or_init(|| (Mutex::new(Vec::new()), Condvar::new()))
}

impl Lease {
    fn take(url: &str, stop: &dyn Fn() -> bool) -> Option<Lease> {
        let (held, freed) = leases();
        let mut h = lock(held);
        while h.iter().any(|u| u == url) {
            if stop() {
                return None;
            }
            h = freed
                .wait_timeout(h, Duration::from_millis(100))
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
        h.push(url.to_owned());
        Some(Lease {
            url: url.to_owned(),
        })
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let (held, freed) = leases();
        lock(held).retain(|u| u != &self.url);
        freed.notify_all();
    }
}

/// Copies the regular files and directories under `from` into `to`: never through a
/// symbolic link, at most [`MAX_FILES_BYTES`] in all.
pub fn copy_files(from: &Path, to: &Path) -> Result<(), String> {
    fn walk(from: &Path, to: &Path, budget: &mut u64) -> Result<(), String> {
        let entries = std::fs::read_dir(from).map_err(|e| format!("read {}: {e}", from.display()))?;
        for entry in entries {
            let entry = entry.map_err(|e| format!("read {}: {e}", from.display()))?;
            let path = entry.path();
            let meta = std::fs::symlink_metadata(&path)
                .map_err(|e| format!("read {}: {e}", path.display()))?;
            let dest = to.join(entry.file_name());
            if meta.file_type().is_symlink() {
                return Err(format!(
                    "{} is a symbolic link: `files` holds regular files and directories only",
                    path.display()
                ));
            } else if meta.is_dir() {
                std::fs::create_dir_all(&dest).map_err(|e| format!("create {}: {e}", dest.display()))?;
                walk(&path, &dest, budget)?;
            } else if meta.is_file() {
                *budget = budget.checked_sub(meta.len()).ok_or_else(|| {
                    format!("`files` holds more than {MAX_FILES_BYTES} bytes")
                })?;
                std::fs::copy(&path, &dest)
                    .map_err(|e| format!("copy {}: {e}", path.display()))?;
            } else {
                return Err(format!(
                    "{} is not a regular file or directory",
                    path.display()
                ));
            }
        }
        Ok(())
    }
    let mut budget = MAX_FILES_BYTES;
    walk(from, to, &mut budget)
}

/// A scratch directory with the spec's `files` in it.
pub fn scratch(spec: &WorldServer) -> Result<tempfile::TempDir, String> {
    let dir = crate::procs::scratch_dir("world")
        .map_err(|e| format!("cannot create a scratch directory: {e}"))?;
    if let Some(files) = &spec.files {
        copy_files(Path::new(files), dir.path())?;
    }
    Ok(dir)
}

/// The tools the server offers a scenario, as tool specs: listed by a server started in a
/// scratch directory of its own (then stopped), filtered by `tools`, with `descriptions`
/// applied.
pub fn discover(spec: &WorldServer, stop: &Arc<Interrupt>) -> Result<Vec<ToolSpec>, String> {
    let dir = scratch(spec)?;
    let mut server = Server::start(spec, dir.path(), stop)?;
    let listed = server.list_tools();
    let record = server.stop();
    let listed = listed.map_err(|e| with_tail(e, &record))?;
    specs_from(spec, &listed)
}

fn with_tail(why: String, record: &WorldServerRecord) -> String {
    if why.contains("stderr (last bytes)") || record.stderr_tail.trim().is_empty() {
        why
    } else {
        format!(
            "{why}; stderr (last bytes): {}",
            stderr_excerpt(&record.stderr_tail)
        )
    }
}

/// Tool specs from a `tools/list` answer.
pub fn specs_from(spec: &WorldServer, listed: &[Value]) -> Result<Vec<ToolSpec>, String> {
    let name = name_of(spec);
    let mut by_name: BTreeMap<String, ToolSpec> = BTreeMap::new();
    let mut order = Vec::new();
    for t in listed {
        let Some(tool) = t.get("name").and_then(Value::as_str) else {
            return Err(format!(
                "listed a tool without a name: {}",
                excerpt(&t.to_string())
            ));
        };
        let mut s = ToolSpec::new(tool, ToolEffect::Server {
            server: name.clone(),
        });
        s.description = t
            .get("description")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        s.parameters = t
            .get("inputSchema")
            .cloned()
            .unwrap_or_else(|| json!({"type": "object"}));
        if let Some(d) = spec.descriptions.get(tool) {
            s.description = d.clone();
        }
        if by_name.insert(tool.to_owned(), s).is_none() {
            order.push(tool.to_owned());
        }
    }
    let wanted: Vec<String> = match &spec.tools {
        Some(w) => w.clone(),
        None => order,
    };
    let mut out = Vec::new();
    for w in &wanted {
        match by_name.remove(w) {
            // Offered as a model's function tool, the name must be one a model API takes.
            Some(_)
                if w.is_empty()
                    || w.len() > 64
                    || !w
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-') =>
            {
                return Err(format!(
                    "lists a tool named {:?}, which cannot be offered to an agent (use letters, digits, `_` and `-`, at most 64); leave it out with `tools`",
                    excerpt(w)
                ));
            }
            Some(s) => out.push(s),
            None => {
                return Err(format!(
                    "does not list a tool `{w}` (`tools` names it); it lists: {}",
                    listed
                        .iter()
                        .filter_map(|t| t.get("name").and_then(Value::as_str))
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
        }
    }
    for d in spec.descriptions.keys() {
        if !out.iter().any(|s| &s.name == d) {
            return Err(format!(
                "`descriptions` names `{d}`, which is not among the tools offered"
            ));
        }
    }
    Ok(out)
}

/// Resolves what a pack's `[world_server]` says relative to the pack: `{pack_dir}` in the
/// command and env, and the `files` directory.
pub fn resolve_files(spec: &mut WorldServer, pack_dir: &Path) {
    let pd = pack_dir.to_string_lossy();
    if let Some(argv) = &mut spec.command {
        for a in argv.iter_mut() {
            *a = a.replace("{pack_dir}", &pd);
        }
    }
    for v in spec.env.values_mut() {
        *v = v.replace("{pack_dir}", &pd);
    }
    if let Some(f) = &mut spec.files {
        *f = pack_dir.join(&*f).to_string_lossy().into_owned();
    }
}

fn lock<T: ?Sized>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_read_structured_then_json_text_then_text() {
        assert_eq!(
            read_result(&json!({"content": [{"type": "text", "text": "{\"a\":1}"}], "structuredContent": {"b": 2}})),
            Called::Done(json!({"b": 2}))
        );
        assert_eq!(
            read_result(&json!({"content": [{"type": "text", "text": "{\"a\":1}"}]})),
            Called::Done(json!({"a": 1}))
        );
        assert_eq!(
            read_result(&json!({"content": [{"type": "text", "text": "hello"}]})),
            Called::Done(json!("hello"))
        );
        assert_eq!(
            read_result(&json!({"content": [{"type": "text", "text": "no such order"}], "isError": true})),
            Called::Failed("no such order".into())
        );
    }

    #[test]
    fn an_sse_answer_is_read_up_to_the_answer_only() {
        // A notification first, then the answer, then a stream that never ends: the reader
        // stops at the answer.
        let head = b"event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\n\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\ndata: \"id\":7,\"result\":{\"ok\":1}}\n\n";
        let endless = std::io::repeat(b':');
        let body = std::io::Read::chain(&head[..], endless);
        assert_eq!(sse_answer(body, 7).unwrap(), Some(Ok(json!({"ok": 1}))));
        assert_eq!(sse_answer(&b"data: {}\n\n"[..], 7).unwrap(), None);
        let flood = std::io::Read::chain(&b"data: "[..], std::io::repeat(b'x'));
        assert!(sse_answer(flood, 7).unwrap_err().contains("larger than"));
    }

    #[test]
    fn names_come_from_the_script_or_the_program() {
        let mut s = WorldServer::default();
        s.command = Some(vec!["node".into(), "/x/dist/index.js".into()]);
        assert_eq!(name_of(&s), "index");
        s.command = Some(vec!["/usr/bin/mcp-server-memory".into()]);
        assert_eq!(name_of(&s), "mcp-server-memory");
        s.name = "memory".into();
        assert_eq!(name_of(&s), "memory");
    }

    #[test]
    fn the_tools_filter_names_listed_tools_only() {
        let mut s = WorldServer::default();
        s.name = "m".into();
        let listed = vec![json!({"name": "a", "inputSchema": {"type": "object"}}), json!({"name": "b"})];
        s.tools = Some(vec!["b".into()]);
        let specs = specs_from(&s, &listed).unwrap();
        assert_eq!(specs.len(), 1);
        assert_eq!(specs[0].name, "b");
        s.tools = Some(vec!["c".into()]);
        let e = specs_from(&s, &listed).unwrap_err();
        assert!(e.contains("`c`") && e.contains("a, b"), "{e}");
        // A name no model API takes is refused when offered, fine when filtered out.
        let listed = vec![json!({"name": "a"}), json!({"name": "fs.read\u{202e}"})];
        s.tools = None;
        let e = specs_from(&s, &listed).unwrap_err();
        assert!(e.contains("cannot be offered") && e.contains("\\u{202e}"), "{e}");
        s.tools = Some(vec!["a".into()]);
        assert_eq!(specs_from(&s, &listed).unwrap().len(), 1);
    }
}
