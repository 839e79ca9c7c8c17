//! The `a2a` runtime: an agent served over the Agent2Agent protocol (docs/a2a.md), 1.0 or
//! the 0.3 generation, over its JSON-RPC binding.
//!
//! The agent's card (`<url>/.well-known/agent-card.json`) is read and checked when a lane is
//! provisioned (a remote agent) or when its run's process serves it (an agent `wt` starts
//! with `command`, one process per run, confined and given the run's MCP world and gateway
//! as a `process` agent is). The card says which protocol to speak (the newest it offers,
//! unless `protocol` says), where, and whether to stream. A run is one A2A context: each
//! turn is a message in it; a reset starts a new one. The card and every call are recorded
//! in the trace's `a2a`.

pub(crate) mod wire;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;
use windtunnel_model::{
    A2aCall, A2aCard, A2aInterface, A2aOrphan, A2aPart, A2aRecord, ModelCall, Scenario, ToolCall,
    TurnErrorKind,
};

use super::net::{Log, Net, Request, Sink};
use super::process::{ProcessAgent, ProcessRuntime};
use super::{
    Agent, AgentHandle, Reply, RunEnd, RunInfo, Runtime, RuntimeError, TurnCtx, TurnError,
};
use crate::interrupt::Interrupt;
use wire::{Event, Message, Part, Protocol, RpcError, State};

/// Where an agent's card is, beneath its URL.
pub(crate) const CARD_PATH: &str = "/.well-known/agent-card.json";

/// A started agent's URL when the config names none.
const SERVED_URL: &str = "http://127.0.0.1:{port}";

/// How long a started agent may take to serve its card, by default.
const DEFAULT_START_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a `CancelTask` of a cut turn may take.
const CANCEL_TIMEOUT: Duration = Duration::from_secs(2);

/// The most bytes of a data part or of the card's capabilities a trace keeps.
const MAX_RECORDED_PART: usize = 16 * 1024;

impl super::kind::RuntimeKind for super::agent::A2a {
    fn name(&self) -> &'static str {
        "a2a"
    }

    fn build(&self, agent: &Agent) -> Result<Box<dyn Runtime>, RuntimeError> {
        Ok(Box::new(A2aRuntime::new(agent, self)?))
    }

    fn validate(&self, agent: &Agent) -> Result<(), String> {
        super::check_limits(&self.limits)?;
        super::endpoint_limit("max_sessions", self.max_sessions)?;
        if let Some(t) = self.start_timeout_s {
            crate::deadlines::check_seconds(t, false)
                .map_err(|why| format!("`start_timeout_s` = {t} {why}"))?;
        }
        if let Some(p) = &self.protocol
            && Protocol::of(p).is_none()
        {
            return Err(format!(
                "`protocol` = {p:?} is not a protocol wt speaks (1.0 or 0.3)"
            ));
        }
        match &self.command {
            Some(_) => {
                let url = self.url.as_deref().unwrap_or(SERVED_URL);
                if !url.contains("{port}") {
                    return Err(format!(
                        "`url` = {url:?} has no {{port}}: an agent wt starts listens on the port wt gives it (e.g. \"http://127.0.0.1:{{port}}\")"
                    ));
                }
                super::process::validate_for(&served(self), true)
            }
            None => {
                let Some(url) = &self.url else {
                    return Err("the a2a runtime needs `url` (the agent's base URL, where its card is) or `command` (to start the agent)".into());
                };
                if url.contains("{port}") {
                    return Err(
                        "`url` has {port}, which only an agent wt starts (`command`) has".into(),
                    );
                }
                let only_started = [
                    ("env", self.env.is_some()),
                    ("env_passthrough", self.env_passthrough.is_some()),
                    ("mcp", self.mcp.is_some()),
                    ("gateway", self.gateway.is_some()),
                    ("sandbox", self.sandbox.is_some()),
                    ("start_timeout_s", self.start_timeout_s.is_some()),
                ];
                if let Some((field, _)) = only_started.iter().find(|(_, set)| *set) {
                    return Err(format!(
                        "`{field}` applies to an agent wt starts (`command`); a remote agent at `url` has none"
                    ));
                }
                let _ = agent;
                Ok(())
            }
        }
    }

    fn api_key_env(&self) -> Option<&str> {
        self.api_key_env.as_deref()
    }

    fn endpoint(&self) -> Option<&str> {
        self.url.as_deref()
    }

    fn pricing(&self) -> Option<&super::agent::Pricing> {
        self.pricing.as_ref()
    }

    fn gateway(&self) -> Option<&super::agent::Gateway> {
        self.gateway.as_ref()
    }

    /// A started agent reaches the run's world over MCP (unless `mcp = false`); a remote
    /// one is judged on its replies and on a world it shares with `wt`.
    fn reaches_world(&self) -> bool {
        self.command.is_some() && self.mcp.unwrap_or(true)
    }

    fn headers(&self) -> Option<&std::collections::BTreeMap<String, super::agent::HeaderValue>> {
        self.headers.as_ref()
    }

    fn handed_vars(&self) -> Vec<(&'static str, &str)> {
        super::process::handed_vars(self.env_passthrough.as_deref())
    }

    fn add_secrets(&self, _: &Agent, r: &mut crate::secrets::Redactor) {
        super::process::add_env_secrets(self.env.as_ref(), self.env_passthrough.as_deref(), r);
    }

    fn to_sdk(&self, a: &mut windtunnel_model::AgentConfig) {
        a.endpoint.clone_from(&self.url);
        a.command.clone_from(&self.command);
        a.env.clone_from(&self.env);
        a.env_passthrough.clone_from(&self.env_passthrough);
        a.api_key_env.clone_from(&self.api_key_env);
        super::kind::sdk_limits(a, &self.limits);
        a.max_sessions = self.max_sessions;
        a.mcp = self.mcp;
    }
}

/// The `process` settings of an agent `wt` starts.
fn served(s: &super::agent::A2a) -> super::agent::Process {
    super::agent::Process {
        command: s.command.clone(),
        env: s.env.clone(),
        env_passthrough: s.env_passthrough.clone(),
        mcp: s.mcp,
        gateway: s.gateway.clone(),
        pricing: s.pricing,
        sandbox: s.sandbox.clone(),
        ..super::agent::Process::default()
    }
}

/// What every lane of the runtime shares.
struct Shared {
    /// The agent's base URL (`{port}` in it for a started agent).
    url: String,
    net: Net,
    headers: Vec<(String, String)>,
    key: Option<String>,
    protocol: Option<Protocol>,
    streaming: Option<bool>,
    start_timeout: Duration,
}

/// The `a2a` runtime.
pub(crate) struct A2aRuntime {
    shared: Arc<Shared>,
    /// Starts the agent of each run, when `wt` starts it.
    served: Option<ProcessRuntime>,
    max_sessions: Option<u32>,
}

impl A2aRuntime {
    fn new(agent: &Agent, s: &super::agent::A2a) -> Result<A2aRuntime, RuntimeError> {
        use super::kind::RuntimeKind;
        s.validate(agent).map_err(RuntimeError)?;
        let url = match (&s.url, &s.command) {
            (Some(u), _) => u.trim().trim_end_matches('/').to_owned(),
            (None, _) => SERVED_URL.to_owned(),
        };
        super::check_endpoint(&url.replace("{port}", "1"), "`url`")?;
        super::check_one_credential(&url, "`url`", agent)?;
        let wire = super::agent::Wire {
            headers: s.headers.clone(),
            api_key_header: None,
        };
        let (mut headers, key) = super::wire_headers(&wire, super::api_key(agent)?, "")?;
        headers.push((
            "Accept".into(),
            "application/json, text/event-stream".into(),
        ));
        let served = match &s.command {
            Some(_) => Some(ProcessRuntime::server(agent, &served(s))?),
            None => None,
        };
        Ok(A2aRuntime {
            shared: Arc::new(Shared {
                url,
                net: Net::new(Duration::from_secs(5), &s.limits, super::redactor(agent))?,
                headers,
                key,
                protocol: s.protocol.as_deref().and_then(Protocol::of),
                streaming: s.streaming,
                start_timeout: s
                    .start_timeout_s
                    .map_or(DEFAULT_START_TIMEOUT, Duration::from_secs_f64),
            }),
            served,
            max_sessions: s.max_sessions,
        })
    }
}

impl Runtime for A2aRuntime {
    fn provision(&self, scenario: &Scenario) -> Result<Box<dyn AgentHandle>, RuntimeError> {
        self.provision_lane(scenario, 0)
    }

    fn provision_lane(
        &self,
        scenario: &Scenario,
        lane: usize,
    ) -> Result<Box<dyn AgentHandle>, RuntimeError> {
        let served = match &self.served {
            Some(rt) => Some(rt.agent(scenario, lane)?),
            None => None,
        };
        // A remote agent's card is read now: an agent that cannot be reached, or whose card
        // is wrong, fails the scenario before any run.
        let conn = match served {
            Some(_) => None,
            None => Some(
                connect(&self.shared, &self.shared.url, None)
                    .map_err(|e| RuntimeError(format!("agent card: {e}")))?,
            ),
        };
        Ok(Box::new(A2aAgent {
            shared: self.shared.clone(),
            served,
            conn,
            context: new_id("ctx")?,
            pending: None,
            record: None,
            ids: AtomicU64::new(0),
        }))
    }

    /// A started agent is a fresh process per run: as many lanes as `max_sessions` says, or
    /// as `--jobs`. A remote agent holds `max_sessions` contexts at once (default 1).
    fn max_lanes(&self) -> Option<usize> {
        match (&self.served, self.max_sessions) {
            (_, Some(n)) => Some(n as usize),
            (Some(_), None) => None,
            (None, None) => Some(1),
        }
    }

    fn default_jobs(&self) -> usize {
        match &self.served {
            Some(rt) => rt.default_jobs(),
            None => super::DEFAULT_NETWORK_JOBS,
        }
    }
}

/// A fresh random id, `<prefix>-<hex>`.
fn new_id(prefix: &str) -> Result<String, RuntimeError> {
    super::mcp::random_token()
        .map(|t| format!("{prefix}-{t}"))
        .map_err(|e| RuntimeError(e.to_string()))
}

/// The card as `wt` reads it, and what it chose from it.
#[derive(Clone)]
struct Conn {
    endpoint: String,
    protocol: Protocol,
    streaming: bool,
    card: A2aCard,
}

/// Reads and checks the card at `base`, and chooses the interface to speak to. `served`
/// (a started agent) makes a refused connection worth waiting for, until its start timeout.
fn connect(shared: &Shared, base: &str, served: Option<&mut ProcessAgent>) -> Result<Conn, String> {
    let card_url = format!("{base}{CARD_PATH}");
    let req = Request {
        headers: &shared.headers,
        method: "GET",
        url: &card_url,
        auth: shared.key.as_deref(),
        body: None,
    };
    let started = Instant::now();
    let mut served = served;
    let text = loop {
        let deadline = Instant::now() + Duration::from_secs(10).min(shared.start_timeout);
        match shared.net.text(&req, deadline, &mut Log::default()) {
            Ok(t) => break t,
            Err(e) if served.is_some() && e.kind == TurnErrorKind::Transport => {
                if let Some(why) = served.as_deref_mut().and_then(ProcessAgent::server_gone) {
                    return Err(format!("{why} before it served its card"));
                }
                if started.elapsed() >= shared.start_timeout {
                    return Err(format!(
                        "the agent did not serve its card within {:?} (start_timeout_s): {}",
                        shared.start_timeout, e.message
                    ));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => return Err(e.message),
        }
    };
    read_card(shared, base, &card_url, &text)
}

/// The checks of a card's text, and the interface chosen from it.
fn read_card(shared: &Shared, base: &str, card_url: &str, text: &str) -> Result<Conn, String> {
    let card: Value = serde_json::from_str(text).map_err(|e| {
        format!(
            "the agent card at {card_url} is not JSON ({e}): {}",
            crate::score::excerpt(text)
        )
    })?;
    let name = card
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| format!("the agent card at {card_url} has no string `name`"))?;
    let mut interfaces = Vec::new();
    let s = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
    for i in card
        .get("supportedInterfaces")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let mut iface = A2aInterface::default();
        iface.url = s(i, "url").unwrap_or_default();
        iface.binding = s(i, "protocolBinding").unwrap_or_default();
        iface.protocol_version = s(i, "protocolVersion").unwrap_or_default();
        interfaces.push(iface);
    }
    // The 0.3 card: `url`, `preferredTransport`, `protocolVersion`, `additionalInterfaces`.
    let old_version = s(&card, "protocolVersion").unwrap_or_else(|| "0.3".into());
    let mut old = |url: Option<String>, binding: Option<String>| {
        let mut iface = A2aInterface::default();
        iface.url = url.unwrap_or_default();
        iface.binding = binding.unwrap_or_else(|| "JSONRPC".into());
        iface.protocol_version = old_version.clone();
        if !interfaces.contains(&iface) && !iface.url.is_empty() {
            interfaces.push(iface);
        }
    };
    if card.get("url").is_some() {
        old(s(&card, "url"), s(&card, "preferredTransport"));
    }
    for i in card
        .get("additionalInterfaces")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        old(s(i, "url"), s(i, "transport"));
    }
    if interfaces.is_empty() {
        return Err(format!(
            "the agent card at {card_url} names no interface (neither `supportedInterfaces` nor `url`)"
        ));
    }
    let offered = |p: Protocol| {
        interfaces.iter().find(|i| {
            i.binding.eq_ignore_ascii_case("JSONRPC")
                && Protocol::of(&i.protocol_version) == Some(p)
        })
    };
    let chosen = match shared.protocol {
        Some(p) => offered(p).map(|i| (p, i)),
        None => [Protocol::V1, Protocol::V03]
            .into_iter()
            .find_map(|p| offered(p).map(|i| (p, i))),
    };
    let listed: Vec<String> = interfaces
        .iter()
        .map(|i| format!("{} {} at {}", i.binding, i.protocol_version, i.url))
        .collect();
    let Some((protocol, iface)) = chosen else {
        let wanted = shared
            .protocol
            .map_or("1.0 or 0.3".to_owned(), |p| p.version().to_owned());
        return Err(format!(
            "the agent card at {card_url} offers no JSON-RPC interface for protocol {wanted} (it offers {})",
            listed.join("; ")
        ));
    };
    let endpoint = same_origin(base, &iface.url).ok_or_else(|| {
        format!(
            "the agent card at {card_url} sends its calls to {}, which is not where the card was read ({base}): wt sends the agent's requests (and its key) only where the config names",
            iface.url
        )
    })?;
    let capabilities = card.get("capabilities").cloned().unwrap_or(Value::Null);
    let streams = capabilities.get("streaming").and_then(Value::as_bool) == Some(true);
    let mut record = A2aCard::default();
    record.url = card_url.to_owned();
    record.name = name.to_owned();
    record.version = s(&card, "version");
    record.capabilities = capabilities;
    crate::limits::cut_value(&mut record.capabilities, MAX_RECORDED_PART);
    record.interfaces = interfaces;
    record.digest = {
        use sha2::{Digest, Sha256};
        format!("sha256:{:x}", Sha256::digest(text.as_bytes()))
    };
    Ok(Conn {
        endpoint,
        protocol,
        streaming: shared.streaming.unwrap_or(streams),
        card: record,
    })
}

/// `url` when it has the origin of `base` (scheme, host, port; any loopback name for a
/// loopback host).
fn same_origin(base: &str, url: &str) -> Option<String> {
    let (b, u) = (
        reqwest::Url::parse(base).ok()?,
        reqwest::Url::parse(url).ok()?,
    );
    let loopback = |h: Option<&str>| matches!(h, Some("127.0.0.1" | "localhost" | "[::1]" | "::1"));
    let host_ok =
        b.host_str() == u.host_str() || (loopback(b.host_str()) && loopback(u.host_str()));
    (b.scheme() == u.scheme() && host_ok && b.port_or_known_default() == u.port_or_known_default())
        .then(|| url.to_owned())
}

struct A2aAgent {
    shared: Arc<Shared>,
    /// The run's process, for an agent `wt` starts.
    served: Option<ProcessAgent>,
    /// The card and the interface chosen (a started agent's: of its current run).
    conn: Option<Conn>,
    /// The run's context.
    context: String,
    /// The task that asked for input, which the next turn answers.
    pending: Option<String>,
    /// The current run's record.
    record: Option<A2aRecord>,
    /// The last JSON-RPC request id of the lane.
    ids: AtomicU64,
}

/// A turn's reading of the agent's answers: the ids it must keep, the task's state, its
/// message, status message and artifacts.
#[derive(Default)]
struct Turn {
    context: String,
    /// The task the turn's message continues.
    sent_task: Option<String>,
    task_id: Option<String>,
    state: Option<State>,
    message: Option<Message>,
    status_message: Option<Message>,
    artifacts: Vec<(String, Vec<Part>)>,
    done: bool,
    /// Whether the answers come as a stream.
    streaming: bool,
    /// Answers (results, stream events) read so far.
    seen: u32,
}

impl Turn {
    fn ids(&mut self, task: Option<&str>, context: Option<&str>) -> Result<(), String> {
        if let Some(c) = context
            && c != self.context
        {
            return Err(format!(
                "the agent answered in context {c:?}, not the run's {:?}",
                self.context
            ));
        }
        let Some(t) = task else { return Ok(()) };
        match (&self.task_id, &self.sent_task) {
            (Some(x), _) if x != t => {
                Err(format!("the task id changed under us: {x:?}, then {t:?}"))
            }
            (None, Some(s)) if s != t => Err(format!(
                "asked to continue task {s:?}, the agent answered with task {t:?}"
            )),
            _ => {
                self.task_id = Some(t.to_owned());
                Ok(())
            }
        }
    }

    fn apply(&mut self, ev: Event) -> Result<(), String> {
        let applied = self.apply_event(ev);
        self.seen += 1;
        applied
    }

    fn apply_event(&mut self, ev: Event) -> Result<(), String> {
        match ev {
            Event::Message(m) => {
                self.ids(m.task_id.as_deref(), m.context_id.as_deref())?;
                self.message = Some(m);
                self.done = true;
            }
            Event::Task {
                id,
                context_id,
                state,
                status_message,
                artifacts,
            } => {
                self.ids(Some(&id), context_id.as_deref())?;
                // A stream that continues a task may open with its snapshot, still in the
                // state this turn's message answers: that ends nothing.
                let stale = self.streaming
                    && self.seen == 0
                    && self.sent_task.is_some()
                    && matches!(state, State::InputRequired | State::AuthRequired);
                self.done = state.ends_turn() && !stale;
                self.state = Some(state);
                self.status_message = if stale { None } else { status_message };
                self.artifacts = artifacts;
            }
            Event::Status {
                task_id,
                context_id,
                state,
                message,
            } => {
                self.ids(Some(&task_id), context_id.as_deref())?;
                self.done = state.ends_turn();
                self.state = Some(state);
                self.status_message = message;
            }
            Event::Artifact {
                task_id,
                context_id,
                id,
                parts,
                append,
            } => {
                self.ids(Some(&task_id), context_id.as_deref())?;
                match self.artifacts.iter_mut().find(|(a, _)| *a == id) {
                    Some((_, have)) if append => have.extend(parts),
                    Some((_, have)) => *have = parts,
                    None => self.artifacts.push((id, parts)),
                }
            }
        }
        Ok(())
    }

    /// Every part of the answer: the message's, else the status message's and the
    /// artifacts'.
    fn parts(&self) -> Vec<&Part> {
        match &self.message {
            Some(m) => m.parts.iter().collect(),
            None => self
                .status_message
                .iter()
                .flat_map(|m| &m.parts)
                .chain(self.artifacts.iter().flat_map(|(_, p)| p))
                .collect(),
        }
    }

    /// The text parts, joined.
    fn text(&self) -> String {
        let texts: Vec<&str> = self
            .parts()
            .into_iter()
            .filter_map(|p| match p {
                Part::Text(t) => Some(t.as_str()),
                _ => None,
            })
            .collect();
        texts.join("\n")
    }
}

/// How one exchange went.
struct Exchange {
    turn: Turn,
    error: Option<TurnError>,
    events: Option<u32>,
    log: Log,
    latency_ms: u64,
}

/// Reads a JSON-RPC response (or stream event) into the turn; an error says which layer.
fn take(protocol: Protocol, turn: &mut Turn, body: &Value, id: u64) -> Result<(), TurnError> {
    let result = wire::result(body, id).map_err(|e| match e {
        RpcError::Protocol(m) => TurnError::new(TurnErrorKind::Protocol, m),
        RpcError::Rpc { code, message } => TurnError::new(
            if wire::code_is_protocol(code) {
                TurnErrorKind::Protocol
            } else {
                TurnErrorKind::Agent
            },
            format!(
                "the agent answered JSON-RPC error {code} ({}): {message}",
                wire::code_name(code)
            ),
        ),
    })?;
    let ev =
        wire::event(protocol, result).map_err(|m| TurnError::new(TurnErrorKind::Protocol, m))?;
    turn.apply(ev)
        .map_err(|m| TurnError::new(TurnErrorKind::Protocol, m))
}

/// A stream's reader: events as they come, until the turn is done.
struct Stream<'a> {
    protocol: Protocol,
    id: u64,
    turn: &'a mut Turn,
    sse: wire::Sse,
    /// Bytes of a UTF-8 character split across chunks.
    partial: Vec<u8>,
    /// The body of a reply that is not a stream (a JSON-RPC error, say).
    plain: Option<Vec<u8>>,
    error: Option<TurnError>,
    events: u32,
}

impl Sink for Stream<'_> {
    fn head(&mut self, _: u16, content_type: Option<&str>) -> bool {
        if !content_type.is_some_and(|c| c.starts_with("text/event-stream")) {
            self.plain = Some(Vec::new());
        }
        true
    }

    fn chunk(&mut self, bytes: &[u8]) -> bool {
        if let Some(plain) = &mut self.plain {
            plain.extend_from_slice(bytes);
            return true;
        }
        self.partial.extend_from_slice(bytes);
        let text = match std::str::from_utf8(&self.partial) {
            Ok(t) => t.to_owned(),
            Err(e) if e.error_len().is_none() => {
                let valid = e.valid_up_to();
                let t = String::from_utf8_lossy(&self.partial[..valid]).into_owned();
                self.partial.drain(..valid);
                let events = self.sse.feed(&t);
                return self.events(events);
            }
            Err(_) => {
                self.error = Some(TurnError::new(
                    TurnErrorKind::Protocol,
                    "the event stream is not valid UTF-8",
                ));
                return false;
            }
        };
        self.partial.clear();
        let events = self.sse.feed(&text);
        self.events(events)
    }
}

impl Stream<'_> {
    fn events(&mut self, events: Vec<String>) -> bool {
        for data in events {
            self.events += 1;
            let body: Value = match serde_json::from_str(&data) {
                Ok(v) => v,
                Err(e) => {
                    self.error = Some(TurnError::new(
                        TurnErrorKind::Protocol,
                        format!(
                            "stream event {} is not JSON ({e}): {}",
                            self.events,
                            crate::score::excerpt(&data)
                        ),
                    ));
                    return false;
                }
            };
            if let Err(e) = take(self.protocol, self.turn, &body, self.id) {
                self.error = Some(e);
                return false;
            }
            if self.turn.done {
                return false;
            }
        }
        true
    }
}

impl A2aAgent {
    fn next_id(&self) -> u64 {
        self.ids.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// The headers of a call: the config's, and `A2A-Version` for 1.0.
    fn headers(shared: &Shared, protocol: Protocol) -> Vec<(String, String)> {
        let mut h = shared.headers.clone();
        if protocol == Protocol::V1 {
            h.push(("A2A-Version".into(), "1.0".into()));
        }
        h
    }

    /// One send (streamed or not), then, for a task still working, its state polled
    /// (`GetTask`) until it ends the turn or the deadline comes.
    fn exchange(
        shared: &Shared,
        conn: &Conn,
        turn: Turn,
        body: &Value,
        id: u64,
        deadline: Instant,
        stop: &Interrupt,
    ) -> Exchange {
        let headers = Self::headers(shared, conn.protocol);
        let req = Request {
            headers: &headers,
            method: "POST",
            url: &conn.endpoint,
            auth: shared.key.as_deref(),
            body: Some(body),
        };
        let started = Instant::now();
        let mut log = Log::default();
        let mut turn = turn;
        let mut events = None;
        let error = if conn.streaming {
            let mut sink = Stream {
                protocol: conn.protocol,
                id,
                turn: &mut turn,
                sse: wire::Sse::default(),
                partial: Vec::new(),
                plain: None,
                error: None,
                events: 0,
            };
            let sent = shared
                .net
                .forward(&req, deadline, stop, &mut log, &mut sink);
            events = Some(sink.events);
            let plain = sink.plain.take();
            let cut = sink.sse.cut_mid_event() || !sink.partial.is_empty();
            match (sink.error.take(), sent) {
                (Some(e), _) => Some(e),
                (None, _) if sink.turn.done => None,
                (None, Ok(())) => match plain {
                    Some(bytes) => match serde_json::from_slice::<Value>(&bytes) {
                        Ok(v) => take(conn.protocol, sink.turn, &v, id).err(),
                        Err(e) => Some(TurnError::new(
                            TurnErrorKind::Protocol,
                            format!(
                                "the reply to a streamed send is neither an event stream nor JSON ({e}): {}",
                                crate::score::excerpt(&String::from_utf8_lossy(&bytes))
                            ),
                        )),
                    },
                    None if cut => Some(TurnError::new(
                        TurnErrorKind::Protocol,
                        format!(
                            "the event stream was cut mid-event (after {} whole events)",
                            sink.events
                        ),
                    )),
                    None => Some(TurnError::new(
                        TurnErrorKind::Protocol,
                        format!(
                            "the event stream ended before the task ended the turn (state {})",
                            sink.turn.state.as_ref().map_or("none", State::as_str)
                        ),
                    )),
                },
                (None, Err((mut e, _))) => {
                    if cut && e.kind == TurnErrorKind::Transport {
                        e.kind = TurnErrorKind::Protocol;
                        e.message = format!("the event stream was cut mid-event: {}", e.message);
                    }
                    Some(e)
                }
            }
        } else {
            match shared.net.text(&req, deadline, &mut log) {
                Err(e) => Some(e),
                Ok(text) => match serde_json::from_str::<Value>(&text) {
                    Ok(v) => take(conn.protocol, &mut turn, &v, id).err(),
                    Err(e) => Some(TurnError::new(
                        TurnErrorKind::Protocol,
                        format!(
                            "POST {}: the reply is not JSON ({e}): {}",
                            conn.endpoint,
                            crate::score::excerpt(&text)
                        ),
                    )),
                },
            }
        };
        Exchange {
            turn,
            error,
            events,
            log,
            latency_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        }
    }

    /// Polls a task still working until it ends the turn, the deadline comes or `wt` stops.
    fn poll(
        shared: &Shared,
        conn: &Conn,
        turn: &mut Turn,
        ids: &AtomicU64,
        deadline: Instant,
        stop: &Interrupt,
    ) -> (Option<TurnError>, u32) {
        let Some(task) = turn.task_id.clone() else {
            return (None, 0);
        };
        let headers = Self::headers(shared, conn.protocol);
        let method = match conn.protocol {
            Protocol::V1 => "GetTask",
            Protocol::V03 => "tasks/get",
        };
        let mut polls = 0u32;
        let mut wait = Duration::from_millis(20);
        while !turn.done {
            if stop.is_cut() {
                return (
                    Some(TurnError::new(
                        TurnErrorKind::Interrupted,
                        "interrupted: wt was stopped",
                    )),
                    polls,
                );
            }
            if Instant::now() + wait >= deadline {
                return (
                    Some(TurnError::new(
                        TurnErrorKind::Timeout,
                        format!(
                            "timed out: task {task:?} was still {} at the turn deadline",
                            turn.state.as_ref().map_or("working", State::as_str)
                        ),
                    )),
                    polls,
                );
            }
            std::thread::sleep(wait);
            wait = (wait * 2).min(Duration::from_millis(250));
            let id = ids.fetch_add(1, Ordering::Relaxed) + 1;
            polls += 1;
            let body = Protocol::request(method, id, serde_json::json!({"id": task}));
            let req = Request {
                headers: &headers,
                method: "POST",
                url: &conn.endpoint,
                auth: shared.key.as_deref(),
                body: Some(&body),
            };
            let answer = shared
                .net
                .json(&req, deadline, &mut Log::default())
                .and_then(|v| take(conn.protocol, turn, &v, id));
            if let Err(e) = answer {
                return (Some(e), polls);
            }
        }
        (None, polls)
    }

    /// One JSON-RPC call beside a turn's send (a cancel, a listing), within
    /// [`CANCEL_TIMEOUT`]: its result or why there is none (one line), and its record.
    fn side_call(
        &self,
        conn: &Conn,
        method: &str,
        params: Value,
        turn: u32,
    ) -> (Result<Value, String>, A2aCall) {
        let id = self.next_id();
        let body = Protocol::request(method, id, params);
        let headers = Self::headers(&self.shared, conn.protocol);
        let req = Request {
            headers: &headers,
            method: "POST",
            url: &conn.endpoint,
            auth: self.shared.key.as_deref(),
            body: Some(&body),
        };
        let started = Instant::now();
        let sent = self
            .shared
            .net
            .json(&req, Instant::now() + CANCEL_TIMEOUT, &mut Log::default());
        let mut call = A2aCall::default();
        call.turn = Some(turn);
        call.method = method.to_owned();
        call.context_id = Some(self.context.clone());
        call.latency_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let result = sent.map_err(|e| e.message).and_then(|v| {
            wire::result(&v, id).cloned().map_err(|e| match e {
                RpcError::Protocol(m) => m,
                RpcError::Rpc { code, message } => format!(
                    "JSON-RPC error {code} ({}): {message}",
                    wire::code_name(code)
                ),
            })
        });
        call.error = result.as_ref().err().cloned();
        (result, call)
    }

    /// Sends `CancelTask` for a cut turn's task: whether the agent accepted it, and a note.
    fn cancel(&mut self, conn: &Conn, task: &str, turn: u32) -> (bool, String) {
        let method = conn.protocol.cancel();
        let (result, mut call) =
            self.side_call(conn, method, serde_json::json!({"id": task}), turn);
        call.task_id = Some(task.to_owned());
        if let Ok(r) = &result
            && let Ok(Event::Task { state, .. }) = wire::event(conn.protocol, r)
        {
            call.state = Some(state.as_str().to_owned());
        }
        self.push_call(call);
        match result {
            Ok(_) => (
                true,
                format!("{method} sent and accepted; the agent may still finish work it started"),
            ),
            Err(e) => (
                false,
                format!("{method} sent and refused ({e}): the task may still be worked on"),
            ),
        }
    }

    /// The run's context's tasks that have not ended a turn (`ListTasks`, 1.0 only), with
    /// their states; `None` when they cannot be listed.
    fn unfinished(&mut self, conn: &Conn, turn: u32) -> Option<Vec<(String, String)>> {
        if conn.protocol != Protocol::V1 {
            return None;
        }
        let params = serde_json::json!({"contextId": self.context});
        let (result, mut call) = self.side_call(conn, "ListTasks", params, turn);
        let listed = result.and_then(|r| {
            let tasks = r
                .get("tasks")
                .and_then(Value::as_array)
                .ok_or("the listing has no `tasks` list")?;
            let open: Vec<(String, String)> = tasks
                .iter()
                .filter_map(|t| match wire::event(Protocol::V1, t) {
                    Ok(Event::Task { id, state, .. }) if !state.ends_turn() => {
                        Some((id, state.as_str().to_owned()))
                    }
                    _ => None,
                })
                .collect();
            Ok(open)
        });
        if let Err(e) = &listed {
            call.error = Some(e.clone());
        }
        call.events = listed
            .as_ref()
            .ok()
            .map(|l| u32::try_from(l.len()).unwrap_or(u32::MAX));
        self.push_call(call);
        listed.ok()
    }

    fn push_call(&mut self, call: A2aCall) {
        if let Some(r) = &mut self.record {
            r.calls.push(call);
        }
    }

    /// Starts the run of a started agent, and reads its card.
    fn start_served(&mut self, info: &RunInfo) -> Result<(), RuntimeError> {
        let Some(served) = &mut self.served else {
            return Ok(());
        };
        served.begin_run(info)?;
        let port = served
            .port()
            .ok_or_else(|| RuntimeError("the agent's run has no port".into()))?;
        let base = self.shared.url.replace("{port}", &port.to_string());
        let conn = connect(&self.shared, &base, Some(served))
            .map_err(|e| RuntimeError(format!("agent card: {e}")))?;
        self.conn = Some(conn);
        Ok(())
    }
}

impl AgentHandle for A2aAgent {
    fn reset_state(&mut self) -> Result<(), RuntimeError> {
        if let Some(s) = &mut self.served {
            s.reset_state()?;
        }
        self.context = new_id("ctx")?;
        self.pending = None;
        if let Some(r) = &mut self.record {
            r.context_ids.push(self.context.clone());
        }
        Ok(())
    }

    fn begin_run(&mut self, run: &RunInfo) -> Result<(), RuntimeError> {
        self.record = None;
        self.start_served(run)?;
        let conn = self
            .conn
            .as_ref()
            .ok_or_else(|| RuntimeError("the agent's card was never read".into()))?;
        let mut record = A2aRecord::default();
        record.card = conn.card.clone();
        record.protocol = conn.protocol.version().to_owned();
        record.streaming = conn.streaming;
        record.endpoint = conn.endpoint.clone();
        record.context_ids = vec![self.context.clone()];
        self.record = Some(record);
        Ok(())
    }

    fn end_run(&mut self) -> RunEnd {
        let mut end = match &mut self.served {
            Some(s) => {
                let end = s.end_run();
                self.conn = None;
                end
            }
            None => RunEnd::default(),
        };
        end.a2a = self.record.take();
        end
    }

    fn take_refused(&mut self) -> Vec<super::RefusedCall> {
        self.served
            .as_mut()
            .map(AgentHandle::take_refused)
            .unwrap_or_default()
    }

    fn send(&mut self, session_id: &str, text: &str, mut ctx: TurnCtx<'_>) -> Reply {
        if self.served.is_some() && self.conn.is_none() {
            // A caller that starts no run gets one started here.
            let info = RunInfo {
                run_id: session_id.to_owned(),
                session_id: session_id.to_owned(),
                index: 0,
            };
            if let Err(e) = self.begin_run(&info) {
                return Reply::failed(TurnErrorKind::Agent, e.0, Vec::new());
            }
        }
        if let Some(why) = self.served.as_mut().and_then(ProcessAgent::server_gone) {
            return Reply::failed(TurnErrorKind::Agent, why, Vec::new());
        }
        let Some(conn) = self.conn.clone() else {
            return Reply::failed(
                TurnErrorKind::Agent,
                "the agent's card was never read",
                Vec::new(),
            );
        };
        let message_id = match new_id("msg") {
            Ok(m) => m,
            Err(e) => return Reply::failed(TurnErrorKind::Agent, e.0, Vec::new()),
        };
        let id = self.next_id();
        let method = conn.protocol.send(conn.streaming);
        let params =
            conn.protocol
                .send_params(text, &message_id, &self.context, self.pending.as_deref());
        let body = Protocol::request(method, id, params);
        let turn = Turn {
            context: self.context.clone(),
            sent_task: self.pending.clone(),
            streaming: conn.streaming,
            ..Turn::default()
        };
        let deadline = Instant::now() + ctx.timeout;
        let stop = ctx.stop;
        let shared = self.shared.clone();
        let index = ctx.index;
        let ids = &self.ids;
        let work = || {
            let mut ex = Self::exchange(&shared, &conn, turn, &body, id, deadline, stop);
            let mut polls = 0;
            if ex.error.is_none() && !ex.turn.done {
                let (e, n) = Self::poll(&shared, &conn, &mut ex.turn, ids, deadline, stop);
                ex.error = e;
                polls = n;
            }
            (ex, polls)
        };
        let (answer, tool_calls, model_calls): ((Exchange, u32), Vec<ToolCall>, Vec<ModelCall>) =
            match self.served.as_ref().and_then(ProcessAgent::mcp_run) {
                Some(run) => super::mcp::during_turn(
                    run,
                    &mut ctx,
                    work,
                    || {
                        let ex = Exchange {
                            turn: Turn::default(),
                            error: Some(TurnError::new(
                                TurnErrorKind::Transport,
                                "the A2A request ended without an answer",
                            )),
                            events: None,
                            log: Log::default(),
                            latency_ms: 0,
                        };
                        (ex, 0)
                    },
                    |(ex, _)| ex.error.as_ref().and_then(super::mcp::cut_by),
                ),
                None => (work(), Vec::new(), Vec::new()),
            };
        let (ex, polls) = answer;
        let mut call = A2aCall::default();
        call.turn = Some(index);
        call.method = method.to_owned();
        call.context_id = Some(self.context.clone());
        call.task_id.clone_from(&ex.turn.task_id);
        call.state = ex.turn.state.as_ref().map(|s| s.as_str().to_owned());
        call.events = ex.events;
        call.latency_ms = ex.latency_ms;
        call.error = ex.error.as_ref().map(|e| e.message.clone());
        self.push_call(call);
        if polls > 0 {
            let mut get = A2aCall::default();
            get.turn = Some(index);
            get.method = match conn.protocol {
                Protocol::V1 => "GetTask",
                Protocol::V03 => "tasks/get",
            }
            .to_owned();
            get.context_id = Some(self.context.clone());
            get.task_id.clone_from(&ex.turn.task_id);
            get.state = ex.turn.state.as_ref().map(|s| s.as_str().to_owned());
            get.events = Some(polls);
            self.push_call(get);
        }
        let mut reply = self.conclude(&conn, index, &ex);
        reply.tool_calls = tool_calls;
        reply.model_calls = model_calls;
        reply.with_log(ex.log)
    }

    fn teardown(&mut self) -> Result<(), RuntimeError> {
        if let Some(s) = &mut self.served {
            s.teardown()?;
        }
        Ok(())
    }
}

impl A2aAgent {
    /// The reply a turn's exchange stands for, its parts recorded, its orphan too.
    fn conclude(&mut self, conn: &Conn, index: u32, ex: &Exchange) -> Reply {
        let turn = &ex.turn;
        if let Some(r) = &mut self.record {
            for p in turn.parts() {
                let mut part = A2aPart::default();
                part.turn = index;
                match p {
                    Part::Text(_) => continue,
                    Part::Data(d) => {
                        part.kind = "data".into();
                        let mut d = d.clone();
                        crate::limits::cut_value(&mut d, MAX_RECORDED_PART);
                        part.data = Some(d);
                    }
                    Part::File {
                        uri,
                        name,
                        media_type,
                        inline_bytes,
                    } => {
                        part.kind = "file".into();
                        part.uri.clone_from(uri);
                        part.name.clone_from(name);
                        part.media_type.clone_from(media_type);
                        part.inline_bytes = *inline_bytes;
                    }
                }
                r.parts.push(part);
            }
        }
        let task = turn.task_id.as_deref().unwrap_or("(unnamed)");
        let said = || {
            let t = turn.text();
            if t.is_empty() {
                String::new()
            } else {
                format!(": {}", crate::score::excerpt(&t))
            }
        };
        if let Some(e) = &ex.error {
            let cut = matches!(e.kind, TurnErrorKind::Timeout | TurnErrorKind::Interrupted);
            let unfinished = !turn.state.as_ref().is_some_and(State::ends_turn);
            if cut && unfinished {
                // The task the cut leaves behind: the one the agent named, else (a send that
                // did not answer) the context's unfinished tasks, where the protocol can
                // list them.
                let tasks: Vec<(Option<String>, Option<String>)> = match &turn.task_id {
                    Some(t) => vec![(
                        Some(t.clone()),
                        turn.state.as_ref().map(|s| s.as_str().to_owned()),
                    )],
                    None => match self.unfinished(conn, index) {
                        Some(found) => found.into_iter().map(|(t, s)| (Some(t), Some(s))).collect(),
                        None => vec![(None, None)],
                    },
                };
                for (task_id, state) in tasks {
                    let (canceled, note) = match &task_id {
                        Some(t) => self.cancel(conn, t, index),
                        None => (
                            false,
                            "the agent never named its task (the send did not answer, and 0.3 cannot list a context's tasks): it may still be worked on".to_owned(),
                        ),
                    };
                    let mut orphan = A2aOrphan::default();
                    orphan.turn = index;
                    orphan.task_id = task_id;
                    orphan.state = state;
                    orphan.canceled = canceled;
                    orphan.note = note;
                    if let Some(r) = &mut self.record {
                        r.orphans.push(orphan);
                    }
                }
            }
            self.pending = None;
            return Reply::failed(e.kind, e.message.clone(), Vec::new());
        }
        self.pending = None;
        match &turn.state {
            _ if turn.message.is_some() => Reply::text(turn.text(), Vec::new()),
            Some(State::Completed) => Reply::text(turn.text(), Vec::new()),
            Some(State::InputRequired) => {
                self.pending.clone_from(&turn.task_id);
                Reply::text(turn.text(), Vec::new())
            }
            Some(State::Failed) => Reply::failed(
                TurnErrorKind::Agent,
                format!("the agent's task {task} failed{}", said()),
                Vec::new(),
            ),
            Some(State::Rejected) => Reply::failed(
                TurnErrorKind::Agent,
                format!("the agent rejected task {task}{}", said()),
                Vec::new(),
            ),
            Some(State::Canceled) => Reply::failed(
                TurnErrorKind::Interrupted,
                format!("the agent canceled task {task}: the turn is cut{}", said()),
                Vec::new(),
            ),
            Some(State::AuthRequired) => Reply::failed(
                TurnErrorKind::Agent,
                format!(
                    "the agent asks for authentication (task {task} is auth-required){}; wt signs in for no one: give the agent its credentials (`headers`, `api_key_env`)",
                    said()
                ),
                Vec::new(),
            ),
            other => Reply::failed(
                TurnErrorKind::Protocol,
                format!(
                    "the agent ended the turn with task {task} in state {}",
                    other.as_ref().map_or("none", State::as_str)
                ),
                Vec::new(),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn shared(protocol: Option<Protocol>) -> Shared {
        Shared {
            url: "http://127.0.0.1:9".into(),
            net: super::super::net::tests::net(&Default::default()),
            headers: Vec::new(),
            key: None,
            protocol,
            streaming: None,
            start_timeout: DEFAULT_START_TIMEOUT,
        }
    }

    #[test]
    fn a_card_is_checked_and_its_newest_protocol_chosen() {
        let base = "http://127.0.0.1:9";
        let url = "http://127.0.0.1:9/.well-known/agent-card.json";
        let card = json!({"name": "x", "version": "1", "capabilities": {"streaming": true},
            "supportedInterfaces": [{"url": "http://127.0.0.1:9/", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
            "url": "http://localhost:9/", "protocolVersion": "0.3.0", "preferredTransport": "JSONRPC"})
        .to_string();
        let c = read_card(&shared(None), base, url, &card).unwrap();
        assert_eq!((c.protocol, c.streaming), (Protocol::V1, true));
        assert_eq!(c.card.interfaces.len(), 2);
        let c = read_card(&shared(Some(Protocol::V03)), base, url, &card).unwrap();
        assert_eq!(
            (c.protocol, c.endpoint.as_str()),
            (Protocol::V03, "http://localhost:9/")
        );
        let e = read_card(&shared(None), base, url, "<html>").err().unwrap();
        assert!(e.contains("is not JSON"), "{e}");
        let e = read_card(&shared(None), base, url, "{\"name\": \"x\"}")
            .err()
            .unwrap();
        assert!(e.contains("names no interface"), "{e}");
        let elsewhere = json!({"name": "x", "supportedInterfaces": [
            {"url": "http://evil.example/", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}]});
        let e = read_card(&shared(None), base, url, &elsewhere.to_string())
            .err()
            .unwrap();
        assert!(e.contains("not where the card was read"), "{e}");
        let grpc = json!({"name": "x", "supportedInterfaces": [
            {"url": "http://127.0.0.1:9/", "protocolBinding": "GRPC", "protocolVersion": "1.0"}]});
        let e = read_card(&shared(None), base, url, &grpc.to_string())
            .err()
            .unwrap();
        assert!(e.contains("offers no JSON-RPC interface"), "{e}");
    }

    #[test]
    fn a_turn_keeps_its_ids() {
        let mut t = Turn {
            context: "c".into(),
            ..Turn::default()
        };
        let status = |task: &str, state: &str| Event::Status {
            task_id: task.into(),
            context_id: Some("c".into()),
            state: State::parse(state),
            message: None,
        };
        t.apply(status("t1", "working")).unwrap();
        let e = t.apply(status("t2", "completed")).unwrap_err();
        assert!(e.contains("changed under us"), "{e}");
        let mut t = Turn {
            context: "c".into(),
            sent_task: Some("t1".into()),
            ..Turn::default()
        };
        assert!(
            t.apply(status("t9", "completed"))
                .unwrap_err()
                .contains("continue task")
        );
        let mut t = Turn {
            context: "c".into(),
            ..Turn::default()
        };
        let other = Event::Message(Message {
            context_id: Some("d".into()),
            ..Message::default()
        });
        assert!(t.apply(other).unwrap_err().contains("context"));
        // A stream continuing a task opens with its snapshot, still asking for input.
        let snapshot = |state: &str| Event::Task {
            id: "t1".into(),
            context_id: Some("c".into()),
            state: State::parse(state),
            status_message: None,
            artifacts: Vec::new(),
        };
        let mut t = Turn {
            context: "c".into(),
            sent_task: Some("t1".into()),
            streaming: true,
            ..Turn::default()
        };
        t.apply(snapshot("TASK_STATE_INPUT_REQUIRED")).unwrap();
        assert!(!t.done);
        t.apply(status("t1", "input-required")).unwrap();
        assert!(t.done, "asked again: the turn ends");
    }
}
