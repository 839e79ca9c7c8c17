//! The model gateway: the model side of `process` and `http` agents.
//!
//! With `[gateway]` in its agent config, each run of the agent gets an OpenAI-compatible
//! chat-completions endpoint on its lane's loopback listener (the one that serves the run's
//! MCP endpoint), at `http://127.0.0.1:<port>/runs/<token>/v1`, and a per-run bearer token.
//! The agent learns both from `WT_MODEL_URL` and `WT_MODEL_TOKEN` (and, opted in, from
//! `OPENAI_BASE_URL` and `OPENAI_API_KEY`), an http agent from `model_url` and `model_token`
//! in each inject. Each call is forwarded to the upstream the config names, with the
//! upstream's key, which the agent never sees, under the upstream's limits (`max_concurrency`,
//! `requests_per_minute`, `Retry-After`, retries), exactly as the `openai` runtime's own
//! calls are ([`super::net::Net`]). The reply goes back to the agent as it arrives (a
//! streamed reply stays streamed), and the call is recorded as a [`ModelCall`] of the turn,
//! in order among the turn's tool calls.
//!
//! A call is served only while one of the run's turns is in progress, as a tool call is: one
//! made between turns is refused (HTTP 409) and recorded as refused; one whose token or
//! address is not the live run's is refused (HTTP 401 or 404) and never forwarded.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};
use windtunnel_model::{ModelCall, TokenUsage};

use super::agent::Gateway;
use super::net::{Log, Net, Request, Sink};
use super::{Agent, RuntimeError};
use crate::interrupt::Interrupt;
use crate::limits::{MAX_RECORDED_PART_BYTES, cut_text, cut_value, keep_last};

/// The `source` of calls through the gateway.
pub(crate) const SOURCE: &str = "gateway";

/// Largest request body the gateway accepts from an agent.
pub(crate) const MAX_REQUEST_BYTES: usize = 8 << 20;


/// The upstream's key, from the variable `gateway.api_key_env` names.
pub(crate) fn upstream_key(g: &Gateway) -> Result<Option<String>, RuntimeError> {
    super::secret_var(g.api_key_env.as_deref(), "gateway.api_key_env")
}

/// The variables the gateway keeps from the agent, with the setting naming each: the
/// upstream's key (`gateway.api_key_env`) and every `gateway.headers` value read from the
/// environment.
pub(crate) fn sealed_vars(g: &Gateway) -> Vec<(&str, String)> {
    let mut sealed: Vec<(&str, String)> = g
        .api_key_env
        .iter()
        .map(|v| (v.as_str(), "gateway.api_key_env".to_owned()))
        .collect();
    for (name, value) in g.headers.iter().flatten() {
        if let super::agent::HeaderValue::Env { env } = value {
            sealed.push((env.as_str(), format!("gateway.headers.{name}")));
        }
    }
    sealed
}

/// Refuses to hand the agent a sealed value under another name: `given` is what reaches
/// it (a variable of its environment, a field of an inject, a key it is sent), each named
/// for the message. A value is never shown.
pub(crate) fn refuse_sealed<'a>(
    g: &Gateway,
    given: impl IntoIterator<Item = (String, &'a str)>,
) -> Result<(), RuntimeError> {
    let values: Vec<(String, String)> = sealed_vars(g)
        .into_iter()
        .filter_map(|(var, field)| {
            let v = crate::secrets::env_secret(var).ok()?;
            (!v.trim().is_empty()).then_some((field, v))
        })
        .collect();
    for (what, value) in given {
        // A short secret would be found inside any long value by chance: it must be whole.
        if let Some((field, _)) = values
            .iter()
            .find(|(_, v)| value == v || (v.len() >= 8 && value.contains(v.as_str())))
        {
            return Err(RuntimeError(format!(
                "{what} holds the value of `{field}`, which the gateway keeps from the agent; remove it from the agent config"
            )));
        }
    }
    Ok(())
}

/// Where a gateway forwards to, shared by every lane of the sweep: one client, one set of
/// limits.
pub struct Upstream {
    url: String,
    /// `<endpoint>/messages`: the Anthropic shape.
    messages_url: String,
    /// `<endpoint>/responses`: OpenAI's Responses API.
    responses_url: String,
    key: Option<String>,
    /// Extra headers of every forwarded request (`gateway.headers`, the key in
    /// `gateway.api_key_header`).
    headers: Vec<(String, String)>,
    net: Net,
    /// How long one call may take, end to end (the agent's turn timeout).
    timeout: Duration,
    /// Set `OPENAI_BASE_URL` and `OPENAI_API_KEY` for process agents.
    pub(crate) openai_env: bool,
    /// Set `ANTHROPIC_BASE_URL` and `ANTHROPIC_API_KEY` for process agents.
    pub(crate) anthropic_env: bool,
}

/// The two API shapes the gateway serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Shape {
    /// OpenAI's chat completions (`/chat/completions`).
    Chat,
    /// Anthropic's Messages API (`/messages`).
    Messages,
    /// OpenAI's Responses API (`/responses`), the default of OpenAI's newer SDKs.
    Responses,
}

impl Upstream {
    pub fn new(agent: &Agent, g: &Gateway) -> Result<Upstream, RuntimeError> {
        let url = chat_url(g.endpoint.trim(), "`gateway.endpoint`")?;
        let messages_url = api_url(g.endpoint.trim(), "messages", "`gateway.endpoint`")?;
        let responses_url = api_url(g.endpoint.trim(), "responses", "`gateway.endpoint`")?;
        if g.api_key_env.is_some() && crate::secrets::has_password(&g.endpoint) {
            return Err(RuntimeError(
                "`gateway.endpoint` carries a user:password and `gateway.api_key_env` names an API key: a request would carry two Authorization headers; keep one of them".into(),
            ));
        }
        let (headers, key) = super::wire_headers(&g.wire(), upstream_key(g)?, "gateway.")?;
        Ok(Upstream {
            url,
            messages_url,
            responses_url,
            key,
            headers,
            net: Net::new(
                Duration::from_secs(10),
                &g.limits(),
                super::redactor(agent),
            )?,
            timeout: super::turn_timeout(agent),
            openai_env: g.openai_env,
            anthropic_env: g.anthropic_env,
        })
    }
}

/// `<base>/chat/completions`, the base's query string kept (Azure's `api-version`); a
/// fragment is refused.
pub(crate) fn chat_url(base: &str, what: &str) -> Result<String, RuntimeError> {
    api_url(base, "chat/completions", what)
}

/// `<base>/<path>`, the base's query string kept; a fragment is refused. A base that
/// already ends with `path` is taken as it is.
pub(crate) fn api_url(base: &str, path: &str, what: &str) -> Result<String, RuntimeError> {
    super::check_endpoint(base, what)?;
    let mut url = reqwest::Url::parse(base).map_err(|e| RuntimeError(format!("{what}: {e}")))?;
    if url.fragment().is_some() {
        return Err(RuntimeError(format!(
            "{what} has a fragment (`#…`), which is never sent to a server; remove it"
        )));
    }
    let base_path = url.path().trim_end_matches('/').to_owned();
    if !base_path.ends_with(&format!("/{path}")) {
        url.set_path(&format!("{base_path}/{path}"));
    }
    Ok(url.to_string())
}

/// A call being forwarded, as its run sees it: the run may end it before its reply does
/// (the turn's deadline, `wt` stopping, the run's end), and the call is recorded then with
/// what arrived and why it ended.
#[derive(Debug)]
pub(crate) struct InFlight {
    stop: Arc<Interrupt>,
    why: Mutex<Option<String>>,
}

impl InFlight {
    fn new() -> Arc<InFlight> {
        Arc::new(InFlight {
            stop: Interrupt::new(),
            why: Mutex::new(None),
        })
    }

    /// Ends the call's forwarding now; `why` becomes its record's error.
    pub(crate) fn cut(&self, why: &str) {
        self.why
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get_or_insert_with(|| why.to_owned());
        self.stop.cut();
    }

    fn why(&self) -> Option<String> {
        self.why
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

/// What the gateway needs of the run a call is addressed to (the lane's run slot).
pub(crate) trait RunDoor: Send + Sync {
    /// A call is being forwarded: the run may cut it ([`InFlight::cut`]).
    fn begin(&self, call: Arc<InFlight>);
    /// The call is recorded (delivered or kept): the run no longer waits for it.
    fn end(&self, call: &Arc<InFlight>);
    /// The run's bearer token.
    fn model_token(&self) -> &str;
    /// Is one of the run's turns in progress?
    fn turn_open(&self) -> bool;
    /// Hands a finished call to the turn in progress; gives it back when none takes it.
    fn deliver(&self, call: Box<ModelCall>) -> Result<(), Box<ModelCall>>;
    /// Keeps a call no turn took (refused between turns, or outliving its turn) for the
    /// run's record.
    fn keep(&self, call: ModelCall);
}

pub(crate) type Response = http::Response<http_body_util::combinators::BoxBody<Bytes, Infallible>>;

/// An error answer in the shape the agent's client reads.
fn error(shape: Shape, status: u16, kind: &str, message: &str) -> Response {
    let body = match shape {
        Shape::Chat | Shape::Responses => {
            json!({"error": {"message": message, "type": kind, "code": null}})
        }
        Shape::Messages => json!({"type": "error", "error": {"type": kind, "message": message}}),
    };
    http::Response::builder()
        .status(status)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body.to_string())).boxed())
        .unwrap_or_else(|_| http::Response::new(Full::new(Bytes::new()).boxed()))
}

/// Serves one request addressed to a run's gateway: `rest` is the path after `/v1/`.
pub(crate) async fn serve(
    upstream: Arc<Upstream>,
    door: Arc<dyn RunDoor>,
    rest: &str,
    req: http::Request<hyper::body::Incoming>,
) -> Response {
    let started = Instant::now();
    let shape = match rest {
        "chat/completions" => Shape::Chat,
        "messages" => Shape::Messages,
        "responses" => Shape::Responses,
        _ => {
            return error(
                Shape::Chat,
                404,
                "not_found",
                "wt's model gateway serves POST /chat/completions, /responses and /messages",
            );
        }
    };
    if req.method() != http::Method::POST {
        return error(shape, 405, "method_not_allowed", "use POST");
    }
    // The token as OpenAI's clients send a key (a bearer token) or as Anthropic's do.
    let header = |name: &str| {
        req.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .trim()
            .to_owned()
    };
    let bearer = header("authorization");
    let bearer = bearer.strip_prefix("Bearer ").unwrap_or_default();
    let token = door.model_token().as_bytes();
    if !same(bearer.trim().as_bytes(), token) && !same(header("x-api-key").as_bytes(), token) {
        return error(
            shape,
            401,
            "invalid_api_key",
            "this run's gateway takes its own token (WT_MODEL_TOKEN), as a bearer token or in x-api-key",
        );
    }
    let mut headers = forwarded_headers(req.headers());
    // The config's headers win over the agent's of the same name.
    headers.retain(|(n, _)| {
        !upstream
            .headers
            .iter()
            .any(|(c, _)| c.eq_ignore_ascii_case(n))
    });
    headers.extend(upstream.headers.iter().cloned());
    let body = match Limited::new(req.into_body(), MAX_REQUEST_BYTES).collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => {
            return error(
                shape,
                413,
                "request_too_large",
                &format!("a request to the gateway is at most {MAX_REQUEST_BYTES} bytes"),
            );
        }
    };
    let body: Value = match serde_json::from_slice(&body) {
        Ok(v @ Value::Object(_)) => v,
        _ => {
            return error(
                shape,
                400,
                "invalid_request_error",
                "the request body is not a JSON object",
            );
        }
    };
    let mut call = request_record(&body);
    let mut body = body;
    let hide_usage = ask_stream_usage(&mut body, shape);
    if !door.turn_open() {
        let why = "refused: no turn of this run is in progress (model calls go through only during a turn)";
        call.error = Some(why.to_owned());
        call.latency_ms = millis(started.elapsed());
        door.keep(call);
        return error(shape, 409, "wt_refused", why);
    }
    let (head_tx, head_rx) = oneshot::channel();
    let (body_tx, body_rx) = mpsc::channel::<Bytes>(32);
    let up = upstream.clone();
    let flight = InFlight::new();
    door.begin(flight.clone());
    let forwarding = tokio::task::spawn_blocking(move || {
        let mut sink = Forward {
            head: Some(head_tx),
            body: body_tx,
            stop: flight.stop.clone(),
            hide_usage,
            pending: Vec::new(),
            copy: Vec::new(),
            max_copy: usize::try_from(up.net.max_body()).unwrap_or(usize::MAX),
            first_byte: None,
            content_type: None,
        };
        let req = Request {
            headers: &headers,
            method: "POST",
            url: match shape {
                Shape::Chat => &up.url,
                Shape::Messages => &up.messages_url,
                Shape::Responses => &up.responses_url,
            },
            auth: up.key.as_deref(),
            body: Some(&body),
        };
        let mut log = Log::default();
        let sent = up.net.forward(
            &req,
            started + up.timeout,
            &flight.stop,
            &mut log,
            &mut sink,
        );
        sink.flush();
        call.retries = log.retries;
        call.latency_ms = millis(started.elapsed());
        call.ttft_ms = sink.first_byte.map(|t| millis(t - started));
        match sent {
            Ok(()) => response_record(&mut call, &sink.copy, sink.content_type.as_deref(), shape),
            Err((e, status)) => {
                // Cut by its run: why the run ended it, not how the cut looked from here.
                call.error = Some(flight.why().unwrap_or_else(|| e.message.clone()));
                if let Some(tx) = sink.head.take() {
                    let _ = tx.send(Err((e, status)));
                }
                // A reply cut off midway: what arrived is still what the agent saw.
                if !sink.copy.is_empty() {
                    response_record(&mut call, &sink.copy, sink.content_type.as_deref(), shape);
                }
            }
        }
        // A call that outlived its turn is kept for the run, without a turn: it happened,
        // and its tokens count.
        if let Err(call) = door.deliver(Box::new(call)) {
            door.keep(*call);
        }
        door.end(&flight);
    });
    match head_rx.await {
        Ok(Ok((status, content_type))) => {
            let mut resp = http::Response::builder().status(status);
            if let Some(ct) = content_type {
                resp = resp.header(http::header::CONTENT_TYPE, ct);
            }
            resp.body(ChannelBody(body_rx).boxed())
                .unwrap_or_else(|_| error(shape, 502, "wt_gateway_error", "bad upstream head"))
        }
        Ok(Err((e, status))) => {
            // The upstream's own refusal (a 4xx, a 429 that outlasted the retries too)
            // reaches the agent with its status; anything else is the gateway's failure to
            // get an answer.
            let code = match status {
                Some(s) if (400..500).contains(&s) => s,
                _ if e.kind == windtunnel_model::TurnErrorKind::Timeout => 504,
                _ => 502,
            };
            error(shape, code, "wt_gateway_error", &e.message)
        }
        Err(_) => {
            let _ = forwarding.await;
            error(
                shape,
                502,
                "wt_gateway_error",
                "the gateway's forwarding ended without an answer",
            )
        }
    }
}

/// The agent's own headers the gateway passes on: `OpenAI-*` and `X-*` ones (an
/// organization, a project, a trace id), never a credential. Everything else — the
/// connection's headers, `Authorization` (the run's token, replaced by the upstream's key),
/// `api-key`, cookies — stays here.
fn forwarded_headers(headers: &http::HeaderMap) -> Vec<(String, String)> {
    headers
        .iter()
        .filter(|(name, _)| {
            let n = name.as_str();
            (n.starts_with("openai-") || n.starts_with("anthropic-") || n.starts_with("x-"))
                && !matches!(n, "x-api-key" | "x-forwarded-for" | "x-real-ip")
                && !n.contains("auth")
                && !n.contains("token")
                && !n.contains("key")
        })
        .filter_map(|(name, value)| Some((name.as_str().to_owned(), value.to_str().ok()?.to_owned())))
        .take(32)
        .collect()
}

/// Compares two tokens in time independent of where they differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

type Head = Result<(u16, Option<String>), (super::TurnError, Option<u16>)>;

/// Hands the upstream's reply to the agent's response as it arrives, keeping a copy for the
/// record.
struct Forward {
    head: Option<oneshot::Sender<Head>>,
    body: mpsc::Sender<Bytes>,
    /// Cut by the run: stop waiting for the agent to take a chunk.
    stop: Arc<Interrupt>,
    /// The gateway asked for the stream's usage chunk and the agent did not: keep it from
    /// the agent. The events not yet whole wait in `pending`.
    hide_usage: bool,
    pending: Vec<u8>,
    copy: Vec<u8>,
    max_copy: usize,
    first_byte: Option<Instant>,
    content_type: Option<String>,
}

impl Sink for Forward {
    fn head(&mut self, status: u16, content_type: Option<&str>) -> bool {
        self.content_type = content_type.map(str::to_owned);
        self.head
            .take()
            .is_some_and(|tx| tx.send(Ok((status, self.content_type.clone()))).is_ok())
    }

    fn chunk(&mut self, bytes: &[u8]) -> bool {
        self.first_byte.get_or_insert_with(Instant::now);
        if self.copy.len() < self.max_copy {
            let room = self.max_copy - self.copy.len();
            self.copy.extend_from_slice(&bytes[..bytes.len().min(room)]);
        }
        if !self.hide_usage {
            return self.send(Bytes::copy_from_slice(bytes));
        }
        self.pending.extend_from_slice(bytes);
        let whole = events_end(&self.pending);
        if whole == 0 {
            return true;
        }
        let events: Vec<u8> = self.pending.drain(..whole).collect();
        let shown = without_usage_events(&events);
        shown.is_empty() || self.send(Bytes::from(shown))
    }
}

impl Forward {
    /// What is left of a stream whose last event never ended, as it came.
    fn flush(&mut self) {
        if !self.pending.is_empty() {
            let rest = std::mem::take(&mut self.pending);
            self.send(Bytes::from(rest));
        }
    }

    /// Hands bytes to the agent's response; `false` when the agent is gone or the run cut
    /// the call.
    fn send(&mut self, mut chunk: Bytes) -> bool {
        // An agent that stops reading must not hold the call past its run's cut.
        loop {
            match self.body.try_send(chunk) {
                Ok(()) => return true,
                Err(mpsc::error::TrySendError::Closed(_)) => return false,
                Err(mpsc::error::TrySendError::Full(back)) => {
                    if self.stop.is_cut() {
                        return false;
                    }
                    chunk = back;
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
        }
    }
}

/// Asks an OpenAI-shaped upstream for a streamed chat completion's usage
/// (`stream_options.include_usage`) when the agent's request did not: without it the call
/// has no tokens and the run no cost. Returns whether the agent did not ask, so that the
/// usage chunk (`choices: []`), which such a client may not expect, is kept from it.
fn ask_stream_usage(body: &mut Value, shape: Shape) -> bool {
    if shape != Shape::Chat || body.get("stream") != Some(&Value::Bool(true)) {
        return false;
    }
    let options = body
        .as_object_mut()
        .map(|o| o.entry("stream_options").or_insert_with(|| json!({})));
    match options {
        Some(Value::Object(o)) if o.get("include_usage") != Some(&Value::Bool(true)) => {
            o.insert("include_usage".into(), Value::Bool(true));
            true
        }
        _ => false,
    }
}

/// Where the whole events of a server-sent stream end in `bytes` (0: none whole yet).
fn events_end(bytes: &[u8]) -> usize {
    (1..bytes.len())
        .rev()
        .find(|&i| ends_event(bytes, i))
        .map_or(0, |i| i + 1)
}

/// Does the byte at `i` end an event (the `\n` of its blank line)?
fn ends_event(bytes: &[u8], i: usize) -> bool {
    bytes[i] == b'\n'
        && (bytes[i - 1] == b'\n' || (i >= 2 && bytes[i - 1] == b'\r' && bytes[i - 2] == b'\n'))
}

/// Whole events of a chat completion stream, less the usage chunk the agent did not ask
/// for (a chunk with an empty `choices` and a `usage`).
fn without_usage_events(events: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(events.len());
    let mut start = 0;
    while start < events.len() {
        let end = start + events_end_first(&events[start..]);
        let event = &events[start..end];
        let usage_only = String::from_utf8_lossy(event)
            .lines()
            .filter_map(|l| l.strip_prefix("data:").map(str::trim))
            .filter_map(|d| serde_json::from_str::<Value>(d).ok())
            .any(|c| {
                c.get("choices").and_then(Value::as_array).is_some_and(Vec::is_empty)
                    && c.get("usage").is_some_and(Value::is_object)
            });
        if !usage_only {
            out.extend_from_slice(event);
        }
        start = end;
    }
    out
}

/// Where the first event of `bytes` ends (after its blank line), or their end.
fn events_end_first(bytes: &[u8]) -> usize {
    (1..bytes.len())
        .find(|&i| ends_event(bytes, i))
        .map_or(bytes.len(), |i| i + 1)
}

/// A response body fed from a channel.
struct ChannelBody(mpsc::Receiver<Bytes>);

impl http_body::Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Infallible>>> {
        self.0
            .poll_recv(cx)
            .map(|b| b.map(|b| Ok(http_body::Frame::data(b))))
    }
}

/// The request's side of a call's record.
pub(crate) fn request_record(body: &Value) -> ModelCall {
    request_record_of(
        body.get("model").and_then(Value::as_str),
        body.get("stream").and_then(Value::as_bool).unwrap_or(false),
        // Chat completions and Messages send `messages`; the Responses API sends `input`.
        body.get("messages")
            .or_else(|| body.get("input"))
            .cloned()
            .unwrap_or(Value::Null),
        None,
        tool_names(body.get("tools")),
    )
}

/// The request's side of a call's record, from its parts: `messages_json_len`, when the
/// caller serialized the messages already, is the length of their JSON, which spares
/// measuring them again when they fit the record.
pub(crate) fn request_record_of(
    model: Option<&str>,
    stream: bool,
    mut messages: Value,
    messages_json_len: Option<usize>,
    tools: Vec<String>,
) -> ModelCall {
    let mut call = ModelCall::default();
    call.source = SOURCE.to_owned();
    call.model = model.map(str::to_owned);
    call.stream = stream;
    // An array's JSON is its items' and a comma or bracket each, plus one: the sizes
    // `keep_last` measures add up to one less than that.
    let fits = matches!(messages, Value::Array(_))
        && messages_json_len.is_some_and(|n| n.saturating_sub(1) <= MAX_RECORDED_PART_BYTES);
    if !fits && keep_last(&mut messages, MAX_RECORDED_PART_BYTES) {
        call.truncated.push("messages".into());
    }
    call.messages = messages;
    call.tools = tools;
    call
}

/// The names of the tools a request offers (`tools`: function tools, or named ones), as a
/// record keeps them: at most 256, each cut to 256 bytes.
pub(crate) fn tool_names(tools: Option<&Value>) -> Vec<String> {
    tools
        .and_then(Value::as_array)
        .map(|tools| {
            tools
                .iter()
                .filter_map(|t| {
                    t.get("function")
                        .and_then(|f| f.get("name"))
                        .or_else(|| t.get("name"))
                        .and_then(Value::as_str)
                })
                .take(256)
                .map(|n| {
                    let mut n = n.to_owned();
                    cut_text(&mut n, 256);
                    n
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Fills the response's side of a call's record from the reply's bytes: a chat completion
/// or a message, or the server-sent events of a streamed one.
pub(crate) fn response_record(
    call: &mut ModelCall,
    bytes: &[u8],
    content_type: Option<&str>,
    shape: Shape,
) {
    let text = String::from_utf8_lossy(bytes);
    let start = text.trim_start();
    let sse = content_type.is_some_and(|c| c.starts_with("text/event-stream"))
        || start.starts_with("data:")
        || start.starts_with("event:");
    if sse {
        call.stream = true;
        match shape {
            Shape::Chat => assemble_stream(call, &text),
            Shape::Messages => assemble_message_stream(call, &text),
            // The last event, `response.completed` (or `.incomplete`, `.failed`), carries
            // the whole response.
            Shape::Responses => {
                if let Some(r) = stream_data(&text)
                    .filter_map(|e| e.get("response").cloned())
                    .last()
                {
                    responses_record(call, &r);
                }
            }
        }
        if let Some(fault) = stream_fault(&text, shape) {
            call.error.get_or_insert(fault);
        }
    } else {
        match serde_json::from_str::<Value>(&text) {
            Ok(v) if shape == Shape::Messages => message_record(call, &v),
            Ok(v) if shape == Shape::Responses => responses_record(call, &v),
            Ok(v) => completion_record(call, &v),
            Err(e) => {
                call.error.get_or_insert_with(|| {
                    format!(
                        "the upstream's reply is not JSON ({e}): {}",
                        crate::score::excerpt(&text)
                    )
                });
            }
        }
    }
    if crate::limits::rough_len(&call.response) > MAX_RECORDED_PART_BYTES {
        cut_value(&mut call.response, MAX_RECORDED_PART_BYTES);
        call.truncated.push("response".into());
    }
}

/// What a chat completion says, into `call`: its first choice's message, finish reason,
/// refusal, usage, id, served model and fingerprint.
pub(crate) fn completion_record(call: &mut ModelCall, resp: &Value) {
    let s = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_owned);
    let choice = first_choice(resp);
    let message = choice.and_then(|c| c.get("message"));
    call.response_id = s(resp.get("id"));
    call.served_model = s(resp.get("model"));
    call.system_fingerprint = s(resp.get("system_fingerprint"));
    call.finish_reason = s(choice.and_then(|c| c.get("finish_reason")));
    call.refusal = s(message.and_then(|m| m.get("refusal")));
    call.usage = resp.get("usage").and_then(TokenUsage::from_openai);
    call.response = message.cloned().unwrap_or(Value::Null);
}

/// A chat completion's `choices[0]`, as `resp.pointer("/choices/0")` finds it (an object's
/// `"0"` too), without the allocations a pointer's path costs.
pub(crate) fn first_choice(resp: &Value) -> Option<&Value> {
    match resp.get("choices")? {
        Value::Array(a) => a.first(),
        Value::Object(m) => m.get("0"),
        _ => None,
    }
}

/// What makes a stream unreadable as a whole reply, if anything: an event whose data is not
/// JSON, or a stream that ended without the event that ends it (chat completions: `[DONE]`
/// or a finish reason; Messages: `message_stop`; Responses: the response's
/// `response.completed`, `.incomplete` or `.failed`). Its record is not a clean call.
fn stream_fault(text: &str, shape: Shape) -> Option<String> {
    let mut bad = 0usize;
    let mut first_bad = None;
    let mut ended = false;
    for data in text.lines().filter_map(|l| l.strip_prefix("data:").map(str::trim)) {
        if data == "[DONE]" {
            ended |= shape == Shape::Chat;
            continue;
        }
        let Ok(event) = serde_json::from_str::<Value>(data) else {
            bad += 1;
            first_bad.get_or_insert(data);
            continue;
        };
        ended |= match shape {
            Shape::Chat => first_choice(&event)
                .and_then(|c| c.get("finish_reason"))
                .is_some_and(Value::is_string),
            Shape::Messages => event["type"] == "message_stop",
            Shape::Responses => matches!(
                event["type"].as_str(),
                Some("response.completed" | "response.incomplete" | "response.failed")
            ),
        };
    }
    if let Some(first) = first_bad {
        return Some(format!(
            "malformed stream: {bad} event(s) whose data is not JSON, the first: {}",
            crate::score::excerpt(first)
        ));
    }
    (!ended).then(|| {
        let last = match shape {
            Shape::Chat => "`data: [DONE]` or a finish reason",
            Shape::Messages => "`message_stop`",
            Shape::Responses => "`response.completed`, `.incomplete` or `.failed`",
        };
        format!("malformed stream: it ended without {last}")
    })
}

/// The JSON payloads of a stream's `data:` lines.
fn stream_data(text: &str) -> impl Iterator<Item = Value> + '_ {
    text.lines()
        .filter_map(|l| l.strip_prefix("data:").map(str::trim))
        .filter(|d| *d != "[DONE]")
        .filter_map(|d| serde_json::from_str(d).ok())
}

/// Assembles a streamed Messages API reply (its events) into one message.
fn assemble_message_stream(call: &mut ModelCall, text: &str) {
    let mut message = json!({});
    let mut blocks: Vec<Value> = Vec::new();
    let mut usage = serde_json::Map::new();
    for event in stream_data(text) {
        match event.get("type").and_then(Value::as_str) {
            Some("message_start") => {
                message = event.get("message").cloned().unwrap_or_else(|| json!({}));
                if let Some(u) = message.get("usage").and_then(Value::as_object) {
                    usage.extend(u.clone());
                }
            }
            Some("content_block_start") => {
                let i = event.get("index").and_then(Value::as_u64).unwrap_or(0) as usize;
                if i < 256 {
                    while blocks.len() <= i {
                        blocks.push(Value::Null);
                    }
                    blocks[i] = event.get("content_block").cloned().unwrap_or(Value::Null);
                }
            }
            Some("content_block_delta") => {
                let i = event.get("index").and_then(Value::as_u64).unwrap_or(0) as usize;
                let (Some(block), Some(delta)) = (blocks.get_mut(i), event.get("delta")) else {
                    continue;
                };
                for (field, part) in [("text", "text"), ("partial_json", "partial_json")] {
                    if let Some(p) = delta.get(part).and_then(Value::as_str) {
                        let mut joined = block.get(field).and_then(Value::as_str).unwrap_or("").to_owned();
                        joined.push_str(p);
                        block[field] = json!(joined);
                    }
                }
            }
            Some("message_delta") => {
                if let Some(r) = event.pointer("/delta/stop_reason") {
                    message["stop_reason"] = r.clone();
                }
                if let Some(u) = event.get("usage").and_then(Value::as_object) {
                    usage.extend(u.clone());
                }
            }
            _ => {}
        }
    }
    // A tool use's input arrives as JSON text in pieces.
    for b in &mut blocks {
        if let Some(Ok(input)) = b
            .get("partial_json")
            .and_then(Value::as_str)
            .map(serde_json::from_str::<Value>)
        {
            b["input"] = input;
        }
        if let Some(o) = b.as_object_mut() {
            o.remove("partial_json");
        }
    }
    message["content"] = Value::Array(blocks);
    if !usage.is_empty() {
        message["usage"] = Value::Object(usage);
    }
    message_record(call, &message);
}

/// What a Responses API response says, into `call`: its output items, status (an
/// incomplete response's reason as the finish reason: `max_output_tokens` is a cut reply),
/// usage, id and model; a refusal's text.
pub(crate) fn responses_record(call: &mut ModelCall, resp: &Value) {
    let s = |p: &str| resp.pointer(p).and_then(Value::as_str).map(str::to_owned);
    call.response_id = s("/id");
    call.served_model = s("/model");
    call.finish_reason = match s("/status").as_deref() {
        Some("incomplete") => s("/incomplete_details/reason").or(Some("incomplete".into())),
        Some("completed") => {
            let calls_tool = resp
                .get("output")
                .and_then(Value::as_array)
                .is_some_and(|o| o.iter().any(|i| i["type"] == "function_call"));
            Some(if calls_tool { "tool_calls" } else { "stop" }.into())
        }
        other => other.map(str::to_owned),
    };
    let output = resp.get("output").cloned().unwrap_or(Value::Null);
    let refusal: String = output
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|i| i.get("content").and_then(Value::as_array).into_iter().flatten())
        .filter(|c| c["type"] == "refusal")
        .filter_map(|c| c.get("refusal").and_then(Value::as_str))
        .collect();
    if !refusal.is_empty() {
        call.refusal = Some(refusal);
    }
    call.response = json!({"output": output});
    if let Some(u) = resp.get("usage") {
        let n = |p: &str| u.pointer(p).and_then(Value::as_u64);
        if n("/input_tokens").is_some() || n("/output_tokens").is_some() {
            let mut t = TokenUsage::default();
            t.prompt_tokens = n("/input_tokens").unwrap_or(0);
            t.completion_tokens = n("/output_tokens").unwrap_or(0);
            t.cached_tokens = n("/input_tokens_details/cached_tokens").unwrap_or(0);
            t.reasoning_tokens = n("/output_tokens_details/reasoning_tokens").unwrap_or(0);
            call.usage = Some(t);
        }
    }
}

/// Assembles a streamed chat completion's chunks into one message.
fn assemble_stream(call: &mut ModelCall, text: &str) {
    let mut content = String::new();
    let mut refusal = String::new();
    let mut tool_calls: Vec<Value> = Vec::new();
    for line in text.lines() {
        let Some(data) = line.strip_prefix("data:").map(str::trim) else {
            continue;
        };
        if data == "[DONE]" {
            continue;
        }
        let Ok(chunk) = serde_json::from_str::<Value>(data) else {
            continue;
        };
        let s = |p: &str| chunk.pointer(p).and_then(Value::as_str).map(str::to_owned);
        call.response_id = call.response_id.take().or_else(|| s("/id"));
        call.served_model = call.served_model.take().or_else(|| s("/model"));
        call.system_fingerprint = call
            .system_fingerprint
            .take()
            .or_else(|| s("/system_fingerprint"));
        if let Some(u) = chunk.get("usage").and_then(TokenUsage::from_openai) {
            call.usage = Some(u);
        }
        let Some(choice) = chunk.pointer("/choices/0") else {
            continue;
        };
        if let Some(r) = choice.get("finish_reason").and_then(Value::as_str) {
            call.finish_reason = Some(r.to_owned());
        }
        let Some(delta) = choice.get("delta") else {
            continue;
        };
        if let Some(c) = delta.get("content").and_then(Value::as_str) {
            content.push_str(c);
        }
        if let Some(r) = delta.get("refusal").and_then(Value::as_str) {
            refusal.push_str(r);
        }
        for tc in delta
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let i = tc.get("index").and_then(Value::as_u64).unwrap_or(0) as usize;
            if i >= 256 {
                continue;
            }
            while tool_calls.len() <= i {
                tool_calls.push(json!({"id": null, "type": "function", "function": {"name": "", "arguments": ""}}));
            }
            let slot = &mut tool_calls[i];
            if let Some(id) = tc.get("id").and_then(Value::as_str) {
                slot["id"] = json!(id);
            }
            for part in ["name", "arguments"] {
                if let Some(p) = tc.pointer(&format!("/function/{part}")).and_then(Value::as_str)
                {
                    let mut joined = slot["function"][part].as_str().unwrap_or("").to_owned();
                    joined.push_str(p);
                    slot["function"][part] = json!(joined);
                }
            }
        }
    }
    let mut message = json!({"role": "assistant", "content": if content.is_empty() { Value::Null } else { json!(content) }});
    if !tool_calls.is_empty() {
        message["tool_calls"] = Value::Array(tool_calls);
    }
    if !refusal.is_empty() {
        message["refusal"] = json!(refusal);
        call.refusal = Some(refusal);
    }
    call.response = message;
}

/// What a Messages API response says, into `call`: its content, stop reason, usage, id and
/// model; a refusal's text.
pub(crate) fn message_record(call: &mut ModelCall, resp: &Value) {
    let s = |p: &str| resp.pointer(p).and_then(Value::as_str).map(str::to_owned);
    call.response_id = s("/id");
    call.served_model = s("/model");
    call.finish_reason = s("/stop_reason");
    let content = resp.get("content").cloned().unwrap_or(Value::Null);
    if call.finish_reason.as_deref() == Some("refusal") {
        call.refusal = Some(text_of(&content));
    }
    call.response = json!({"role": "assistant", "content": content});
    if let Some(u) = resp.get("usage") {
        let n = |k: &str| u.get(k).and_then(Value::as_u64).unwrap_or(0);
        if u.get("input_tokens").is_some() || u.get("output_tokens").is_some() {
            let cached = n("cache_read_input_tokens");
            let mut t = TokenUsage::default();
            // As OpenAI counts them: every input token, the cached ones among them.
            t.prompt_tokens = n("input_tokens") + cached + n("cache_creation_input_tokens");
            t.completion_tokens = n("output_tokens");
            t.cached_tokens = cached;
            call.usage = Some(t);
        }
    }
}

/// The text blocks of a content list, joined.
pub(crate) fn text_of(content: &Value) -> String {
    content
        .as_array()
        .into_iter()
        .flatten()
        .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
        .filter_map(|b| b.get("text").and_then(Value::as_str))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_from_a_known_length_is_the_record_from_the_body() {
        // The messages' sizes as `keep_last` measures them add up to their JSON's length
        // less one: around MAX_RECORDED_PART_BYTES, the known length decides as it does.
        let message = |n: usize| json!({"role": "user", "content": "x".repeat(n)});
        let overhead = serde_json::to_vec(&json!([message(0), message(0)])).unwrap().len();
        for extra in [0, 1, 2, 3, 10_000] {
            let content = MAX_RECORDED_PART_BYTES + 1 - overhead + extra;
            let messages = json!([message(content / 2), message(content - content / 2)]);
            let len = serde_json::to_vec(&messages).unwrap().len();
            assert_eq!(len, MAX_RECORDED_PART_BYTES + 1 + extra);
            let body = json!({"model": "m", "messages": messages, "tools": [
                {"type": "function", "function": {"name": "lookup"}}, {"name": "named"}
            ]});
            let known = request_record_of(
                Some("m"),
                false,
                messages.clone(),
                Some(len),
                tool_names(body.get("tools")),
            );
            assert_eq!(known, request_record(&body), "{extra}");
            assert_eq!(known.truncated.is_empty(), extra == 0, "{extra}");
            assert_eq!(known.tools, ["lookup", "named"]);
        }
    }

    #[test]
    fn the_first_choice_is_the_pointers() {
        for resp in [
            json!({"choices": [{"message": {"content": "a"}}, {"message": {}}]}),
            json!({"choices": {"0": {"message": {"content": "b"}}}}),
            json!({"choices": []}),
            json!({"choices": "none"}),
            json!({"id": "x"}),
            json!([1]),
        ] {
            assert_eq!(first_choice(&resp), resp.pointer("/choices/0"), "{resp}");
        }
        let mut call = ModelCall::default();
        completion_record(
            &mut call,
            &json!({"id": "c", "model": "m", "system_fingerprint": "fp", "choices": [{"finish_reason": "length", "message": {"role": "assistant", "content": null, "refusal": "no"}}], "usage": {"prompt_tokens": 3, "completion_tokens": 1}}),
        );
        assert_eq!(
            (
                call.response_id.as_deref(),
                call.served_model.as_deref(),
                call.system_fingerprint.as_deref(),
                call.finish_reason.as_deref(),
                call.refusal.as_deref()
            ),
            (Some("c"), Some("m"), Some("fp"), Some("length"), Some("no"))
        );
        assert_eq!(call.response["refusal"], "no");
        assert_eq!(call.usage.map(|u| u.prompt_tokens), Some(3));
    }

    #[test]
    fn a_query_string_is_kept_and_a_fragment_refused() {
        assert_eq!(
            chat_url("https://x.example/openai/v1?api-version=2024-10", "e").unwrap(),
            "https://x.example/openai/v1/chat/completions?api-version=2024-10"
        );
        assert_eq!(
            chat_url("http://h:1/v1/", "e").unwrap(),
            "http://h:1/v1/chat/completions"
        );
        assert_eq!(
            chat_url("http://h:1/v1/chat/completions", "e").unwrap(),
            "http://h:1/v1/chat/completions"
        );
        assert!(
            chat_url("http://h/v1#x", "e")
                .unwrap_err()
                .0
                .contains("fragment")
        );
    }

    #[test]
    fn a_streamed_reply_is_assembled_with_its_tool_calls_and_usage() {
        let sse = concat!(
            "data: {\"id\":\"c1\",\"model\":\"m-2\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\"}}]}\n\n",
            "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"t1\",\"function\":{\"name\":\"lookup\",\"arguments\":\"\"}}]}}]}\n\n",
            "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"id\\\":\"}}]}}]}\n\n",
            "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"1}\"}}]}}]}\n\n",
            "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n",
            "data: {\"id\":\"c1\",\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":3,\"prompt_tokens_details\":{\"cached_tokens\":2}}}\n\n",
            "data: [DONE]\n\n"
        );
        let mut call = ModelCall::default();
        response_record(&mut call, sse.as_bytes(), Some("text/event-stream"), Shape::Chat);
        assert!(call.stream);
        assert_eq!(call.response_id.as_deref(), Some("c1"));
        assert_eq!(call.served_model.as_deref(), Some("m-2"));
        assert_eq!(call.finish_reason.as_deref(), Some("tool_calls"));
        assert_eq!(
            call.response.pointer("/tool_calls/0/function/arguments"),
            Some(&json!("{\"id\":1}"))
        );
        let u = call.usage.unwrap();
        assert_eq!(
            (u.prompt_tokens, u.completion_tokens, u.cached_tokens),
            (7, 3, 2)
        );
    }

    #[test]
    fn a_stream_is_whole_only_with_its_end_and_every_event_json() {
        let ok = "data: {\"choices\":[{\"delta\":{}}]}\n\ndata: [DONE]\n\n";
        assert_eq!(stream_fault(ok, Shape::Chat), None);
        let bad = "data: {\"choices\":[{\"delta\":{}}]}\n\ndata: {oops\n\ndata: [DONE]\n\n";
        assert!(stream_fault(bad, Shape::Chat).unwrap().contains("1 event(s)"));
        let unended = "data: {\"choices\":[{\"delta\":{}}]}\n\n";
        assert!(stream_fault(unended, Shape::Chat).unwrap().contains("[DONE]"));
        let message = "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
        assert_eq!(stream_fault(message, Shape::Messages), None);
        assert!(stream_fault(ok, Shape::Messages).is_some());
        let done = "data: {\"type\":\"response.completed\",\"response\":{}}\n\n";
        assert_eq!(stream_fault(done, Shape::Responses), None);
    }

    #[test]
    fn only_the_usage_chunk_is_kept_from_an_agent_that_did_not_ask() {
        let events = "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}],\"usage\":null}\r\n\r\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":1}}\n\ndata: [DONE]\n\n";
        assert_eq!(events_end(events.as_bytes()), events.len());
        assert_eq!(events_end(b"data: {\"choices\":"), 0);
        let shown = String::from_utf8(without_usage_events(events.as_bytes())).unwrap();
        assert_eq!(
            shown,
            "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}],\"usage\":null}\r\n\r\ndata: [DONE]\n\n"
        );
        let mut asked = json!({"stream": true, "stream_options": {"include_usage": true}});
        assert!(!ask_stream_usage(&mut asked, Shape::Chat));
        let mut not = json!({"stream": true, "stream_options": {"other": 1}});
        assert!(ask_stream_usage(&mut not, Shape::Chat));
        assert_eq!(not["stream_options"], json!({"other": 1, "include_usage": true}));
        let mut plain = json!({"stream": false});
        assert!(!ask_stream_usage(&mut plain, Shape::Chat));
        assert_eq!(plain, json!({"stream": false}));
        let mut messages = json!({"stream": true});
        assert!(!ask_stream_usage(&mut messages, Shape::Messages));
    }

    #[test]
    fn long_conversations_keep_their_newest_messages() {
        let mut m = json!([
            {"role": "system", "content": "s".repeat(10_000)},
            {"role": "user", "content": "u".repeat(10_000)},
            {"role": "tool", "content": "newest"}
        ]);
        assert!(keep_last(&mut m, 12_000));
        let list = m.as_array().unwrap();
        assert_eq!(list[0], json!({"cut_by_wt": {"messages_not_kept": 1}}));
        assert_eq!(list.len(), 3);
        assert_eq!(list[2]["content"], "newest");
        let mut small = json!([{"role": "user", "content": "hi"}]);
        assert!(!keep_last(&mut small, 12_000));
        let mut one_huge = json!([{"role": "user", "content": "x".repeat(100_000)}]);
        assert!(keep_last(&mut one_huge, 12_000));
        assert!(serde_json::to_vec(&one_huge).unwrap().len() < 14_000);
    }
}
