//! Runtimes: how `wt` reaches the agent under test. A runtime provisions one
//! [`AgentHandle`] per scenario; the runner drives it with `reset_state`, `begin_run`,
//! `send`, `end_run` and `teardown`. Built-ins: `demo` (in-process, deterministic, with
//! fault modes), `openai` (any OpenAI-compatible chat-completions endpoint, tool loop run by
//! the harness), `anthropic` (the Messages API, likewise), `http` (an agent service behind an inject endpoint; see
//! `docs/http-runtime-protocol.md`) and `process` (a local agent process; see
//! `docs/process-runtime.md`). The last two reach the fixture world over MCP
//! ([`crate::runtime::mcp`]).
//!
//! Runtimes report what happened; they never score.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use windtunnel_model::{
    AgentProcess, ModelCall, Retry, Scenario, Surface, ToolCall, ToolSpec, TurnErrorKind,
};

use crate::interrupt::Interrupt;
use crate::secrets::Redactor;
use crate::world::World;

pub use agent::{Agent, RUNTIMES, Settings};

pub(crate) mod a2a;
pub mod agent;
pub(crate) mod anthropic;
pub(crate) mod demo;
internal_mod!(gateway);
pub(crate) mod http;
pub mod kind;
internal_mod!(mcp);
pub mod models;
pub(crate) mod net;
pub(crate) mod openai;
pub(crate) mod process;
pub mod provider;

pub(crate) use net::DEFAULT_MAX_RESPONSE_BYTES;
pub use net::Wait;

/// What an agent config tells an agent `wt` does not drive itself (`process`, `http`):
/// `model`, `soul` and `[sampling]`, each only when set. A `process` agent gets them as
/// `WT_AGENT_MODEL`, `WT_AGENT_SOUL` and `WT_AGENT_SAMPLING` (JSON); an `http` agent as
/// `model`, `soul` and `sampling` in each inject.
pub(crate) fn told(agent: &Agent) -> Vec<(&'static str, Value)> {
    let mut told = Vec::new();
    if let Some(m) = &agent.model {
        told.push(("model", json!(m)));
    }
    if !agent.soul.is_empty() {
        told.push(("soul", json!(agent.soul)));
    }
    let sampling = serde_json::to_value(&agent.sampling).unwrap_or(Value::Null);
    if sampling.as_object().is_some_and(|o| !o.is_empty()) {
        told.push(("sampling", sampling));
    }
    told
}

/// Request headers, as names and values.
pub(crate) type Headers = Vec<(String, String)>;

/// The headers of every request to an OpenAI-compatible endpoint (`headers`, and the key
/// in `api_key_header`), and the key to send as `Authorization: Bearer` when it goes there.
/// `what` prefixes the settings' names in messages (`gateway.` for the gateway's).
pub(crate) fn wire_headers(
    wire: &agent::Wire,
    key: Option<String>,
    what: &str,
) -> Result<(Headers, Option<String>), RuntimeError> {
    let name_ok = |name: &str, field: &str| -> Result<(), RuntimeError> {
        if ::http::HeaderName::from_bytes(name.as_bytes()).is_err() {
            return Err(RuntimeError(format!(
                "`{what}{field}`: {name:?} is not a header name"
            )));
        }
        let lower = name.to_ascii_lowercase();
        if matches!(
            lower.as_str(),
            "authorization"
                | "host"
                | "content-length"
                | "content-type"
                | "transfer-encoding"
                | "connection"
        ) {
            return Err(RuntimeError(format!(
                "`{what}{field}`: {name} is set by wt itself"
            )));
        }
        Ok(())
    };
    let mut headers = Vec::new();
    for (name, value) in wire.headers.iter().flatten() {
        name_ok(name, "headers")?;
        let value = match value {
            agent::HeaderValue::Text(t) => t.clone(),
            agent::HeaderValue::Env { env } => {
                secret_var(Some(env), &format!("{what}headers.{name}"))?.unwrap_or_default()
            }
        };
        if ::http::HeaderValue::from_str(&value).is_err() {
            return Err(RuntimeError(format!(
                "`{what}headers.{name}`: the value is not a valid header value (a control character?)"
            )));
        }
        headers.push((name.clone(), value));
    }
    match (&wire.api_key_header, key) {
        (Some(h), Some(k)) => {
            name_ok(h, "api_key_header")?;
            headers.push((h.clone(), k));
            Ok((headers, None))
        }
        (Some(_), None) => Err(RuntimeError(format!(
            "`{what}api_key_header` names the header for a key, but no key is configured (`{what}api_key_env`)"
        ))),
        (None, key) => Ok((headers, key)),
    }
}

/// A provisioning, reset or teardown failure.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct RuntimeError(pub String);

/// Why a turn ended without a reply. The runner derives the turn's outcome from `kind`:
/// a timeout or a cut is *interrupted*, anything else *failed*.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TurnError {
    pub kind: TurnErrorKind,
    pub message: String,
}

impl TurnError {
    pub fn new(kind: TurnErrorKind, message: impl Into<String>) -> Self {
        TurnError {
            kind,
            message: message.into(),
        }
    }
}

impl std::fmt::Display for TurnError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// What one injected turn produced.
#[derive(Clone, Debug, Default)]
pub struct Reply {
    /// The final reply text; `None` when the turn produced none.
    pub text: Option<String>,
    /// Tool calls made during the turn, in order, with `turn` and `step` set.
    pub tool_calls: Vec<ToolCall>,
    /// What ended the turn without a reply (timeout, HTTP 500, bad JSON, …).
    pub error: Option<TurnError>,
    /// Requests of the turn that were retried.
    pub retries: Vec<Retry>,
    /// What the turn's requests waited for before they were sent (the endpoint's limits).
    pub waits: Vec<Wait>,
    /// Model calls of the turn, in order, with `turn` and `after_tool_calls` set.
    pub model_calls: Vec<ModelCall>,
}

impl Reply {
    pub fn failed(
        kind: TurnErrorKind,
        message: impl Into<String>,
        tool_calls: Vec<ToolCall>,
    ) -> Self {
        Reply {
            text: None,
            tool_calls,
            error: Some(TurnError::new(kind, message)),
            ..Reply::default()
        }
    }

    /// Attaches what the turn's requests retried and waited for.
    pub fn with_log(mut self, log: net::Log) -> Self {
        self.retries = log.retries;
        self.waits = log.waits;
        self
    }

    pub fn text(text: impl Into<String>, tool_calls: Vec<ToolCall>) -> Self {
        Reply {
            text: Some(text.into()),
            tool_calls,
            ..Reply::default()
        }
    }
}

/// What a turn may use: the run's fixture world, its deadline, and the sweep's stop state.
pub struct TurnCtx<'a> {
    pub index: u32,
    pub world: &'a mut World,
    pub timeout: Duration,
    /// Cut when `wt` stops: a cooperative runtime ends the turn at once.
    pub stop: &'a Interrupt,
}

impl TurnCtx<'_> {
    /// Executes a tool call against the fixture world and records it as evidence.
    pub fn call_tool(
        &mut self,
        tools: &[ToolSpec],
        step: u32,
        name: &str,
        args: Value,
    ) -> ToolCall {
        self.execute(tools, step, name, args, None, |_, _| Ok(()))
    }

    /// Executes a call that came through another door than the harness's own tool loop
    /// (MCP): the same execution and the same record as [`TurnCtx::call_tool`], marked with
    /// `source`. `check` vets the arguments first (the tool's schema); a call it refuses is
    /// recorded as a failed call and never reaches the world.
    pub fn call_tool_from(
        &mut self,
        source: &str,
        tools: &[ToolSpec],
        step: u32,
        name: &str,
        args: Value,
        check: impl FnOnce(&ToolSpec, &Value) -> Result<(), String>,
    ) -> ToolCall {
        self.execute(tools, step, name, args, Some(source), check)
    }

    fn execute(
        &mut self,
        tools: &[ToolSpec],
        step: u32,
        name: &str,
        args: Value,
        source: Option<&str>,
        check: impl FnOnce(&ToolSpec, &Value) -> Result<(), String>,
    ) -> ToolCall {
        let spec = tools.iter().find(|t| t.name == name);
        let (result, error) = match spec {
            None => (Value::Null, Some(format!("unknown tool `{name}`"))),
            Some(spec) => match check(spec, &args).and_then(|()| self.world.execute(spec, &args)) {
                Ok(v) => (v, None),
                Err(e) => (Value::Null, Some(e)),
            },
        };
        let mut call = tool_call(self.index, step, name, args, result, error, source);
        if let Some(ToolSpec {
            effect: windtunnel_model::ToolEffect::Server { server },
            ..
        }) = spec
        {
            call.server = Some(server.clone());
        }
        call
    }
}

/// A tool call as evidence.
pub(crate) fn tool_call(
    turn: u32,
    step: u32,
    name: &str,
    arguments: Value,
    result: Value,
    error: Option<String>,
    source: Option<&str>,
) -> ToolCall {
    let mut call = ToolCall::default();
    call.turn = turn;
    call.step = step;
    call.name = name.to_owned();
    call.arguments = arguments;
    call.result = result;
    call.error = error;
    call.source = source.map(str::to_owned);
    call
}

/// The run a handle is about to serve (see [`AgentHandle::begin_run`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunInfo {
    pub run_id: String,
    pub session_id: String,
    /// The run's index within its scenario.
    pub index: u32,
}

/// What a runtime knows of a run once it is over, for its trace.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunEnd {
    /// The agent processes of the run and how each ended (`process` runtime).
    pub processes: Vec<AgentProcess>,
    /// Tool calls refused since the last [`AgentHandle::take_refused`], up to the end of
    /// the run.
    pub refused: Vec<RefusedCall>,
    /// Model calls of the run that no turn took (made between turns, or outliving their
    /// turn).
    pub model_calls: Vec<ModelCall>,
    /// The `a2a` runtime's record of the run: the card, every call.
    pub a2a: Option<windtunnel_model::A2aRecord>,
}

/// A tool call the agent made that was refused and never ran (see [`mcp::Refused`]).
pub type RefusedCall = mcp::Refused;

/// A provisioned agent for one scenario. Calls are sequential (one run at a time).
pub trait AgentHandle: Send {
    /// Forgets everything from earlier runs (a fresh agent, as far as the runtime can tell).
    fn reset_state(&mut self) -> Result<(), RuntimeError>;
    /// A run starts: called after `reset_state` and before its first turn, with the run's
    /// ids. A failure makes the run ERROR without any turn (like a failed reset).
    fn begin_run(&mut self, run: &RunInfo) -> Result<(), RuntimeError> {
        let _ = run;
        Ok(())
    }
    /// The run is over: called after its last hook point (converse turns included), before
    /// its files are written. Nothing of the run may act on its world afterwards, and
    /// nothing the runtime started for it may outlive it.
    fn end_run(&mut self) -> RunEnd {
        RunEnd::default()
    }
    /// Tool calls the agent made through the run's MCP endpoint that were refused since the
    /// last look — no turn was in progress (after its reply, say), or the turn ended first.
    /// They never ran; the runner records them as evidence against the agent.
    fn take_refused(&mut self) -> Vec<RefusedCall> {
        Vec::new()
    }
    /// Injects one user turn into `session_id` and waits for the reply (at most `ctx.timeout`).
    fn send(&mut self, session_id: &str, text: &str, ctx: TurnCtx<'_>) -> Reply;
    /// The agent's internal state as JSON, where the runtime can see it (state probes).
    fn probe_state(&mut self) -> Option<Value> {
        None
    }
    /// Releases the agent.
    fn teardown(&mut self) -> Result<(), RuntimeError>;
    /// Does `send` return promptly once `ctx.stop` is cut? Such a handle is called in place;
    /// any other (network, processes) is called on a thread the runner can stop waiting for,
    /// so that a cut never waits for a slow server.
    fn cooperative(&self) -> bool {
        false
    }
}

/// Provisions [`AgentHandle`]s for a scenario: one per lane.
///
/// A *lane* is one agent session slot: a scenario's runs are spread over several lanes
/// (each with its own handle, reset before each of its runs) when the runtime's sessions
/// are independent. Lane 0 is the scenario's first.
pub trait Runtime: Send + Sync {
    fn provision(&self, scenario: &Scenario) -> Result<Box<dyn AgentHandle>, RuntimeError>;
    /// The handle of lane `lane` (lane 0 is [`Runtime::provision`]'s).
    fn provision_lane(
        &self,
        scenario: &Scenario,
        lane: usize,
    ) -> Result<Box<dyn AgentHandle>, RuntimeError> {
        let _ = lane;
        self.provision(scenario)
    }
    /// How many lanes a scenario may use at once; `None` for as many as `--jobs`. The
    /// default is 1: a runtime must say that its sessions are independent.
    fn max_lanes(&self) -> Option<usize> {
        Some(1)
    }
    /// The `--jobs` to use when none is given: the CPU count for in-process agents, more
    /// for agents that mostly wait on the network.
    fn default_jobs(&self) -> usize {
        DEFAULT_NETWORK_JOBS
    }
}

/// Default `--jobs` for runtimes that wait on a network or a process.
pub(crate) const DEFAULT_NETWORK_JOBS: usize = 16;

/// The API key from the environment variable the agent config names (`api_key_env`), if it
/// names one: set, not empty, and a single line. The key is only ever sent to the endpoint,
/// never stored or printed.
pub(crate) fn api_key(agent: &Agent) -> Result<Option<String>, RuntimeError> {
    secret_var(agent.api_key_env(), "api_key_env")
}

/// The secret in the environment variable `var` names, if it names one (`field` is the
/// setting that named it, for the message).
pub(crate) fn secret_var(var: Option<&str>, field: &str) -> Result<Option<String>, RuntimeError> {
    let Some(var) = var else {
        return Ok(None);
    };
    let bad = |why: &str| {
        RuntimeError(format!(
            "environment variable {var} (named by {field}) {why}"
        ))
    };
    match crate::secrets::env_secret(var) {
        Err(std::env::VarError::NotPresent) => Err(bad("is not set")),
        Err(std::env::VarError::NotUnicode(_)) => Err(bad("is not valid UTF-8")),
        Ok(v) if v.trim().is_empty() => Err(bad("is empty")),
        Ok(v) if v.chars().any(char::is_control) => {
            Err(bad("contains a newline or another control character"))
        }
        Ok(v) => Ok(Some(v)),
    }
}

/// Takes the agent's secret variables (its `api_key_env`, secret-named `env_passthrough`
/// names) out of `wt`'s environment, keeping their values for the runtime alone, before any
/// plugin loads or any process starts: see [`crate::secrets::seal_env`].
///
/// # Safety
///
/// As [`crate::secrets::seal_env`]: no other thread may be reading the environment.
pub(crate) unsafe fn seal_secrets(agent: &Agent) {
    // SAFETY: passed on to the caller.
    unsafe { crate::secrets::seal_env(kind::secret_vars(agent)) };
}

/// The secrets of an agent config: its API key and any password in its endpoint URLs.
pub(crate) fn redactor(agent: &Agent) -> Redactor {
    let mut r = Redactor::new();
    if let Ok(Some(key)) = api_key(agent) {
        r.add(&key);
    }
    if let Some(e) = agent.endpoint() {
        r.add(e);
    }
    if let Some(g) = agent.gateway() {
        if let Ok(Some(key)) = gateway::upstream_key(g) {
            r.add(&key);
        }
        r.add(&g.endpoint);
    }
    for var in kind::header_vars(agent) {
        if let Ok(value) = crate::secrets::env_secret(var) {
            r.add(&value);
        }
    }
    // Literal header values under a secret-looking name are secrets too.
    for (name, value) in agent
        .settings
        .kind()
        .headers()
        .into_iter()
        .chain(agent.gateway().and_then(|g| g.headers.as_ref()))
        .flatten()
    {
        if let agent::HeaderValue::Text(t) = value
            && (crate::secrets::is_secret_name(name) || name.to_ascii_lowercase().contains("auth"))
        {
            r.add(t);
        }
    }
    // A model runtime's endpoint from its provider's variable.
    if let Some(p) = models::provider_of(&agent.settings)
        && agent.endpoint().is_none()
        && let Ok(url) = std::env::var(p.base_var())
    {
        r.add(&url);
    }
    agent.settings.kind().add_secrets(agent, &mut r);
    r
}

/// The runtime named by `agent.runtime`, its output passed through the agent's
/// [`redactor`]: nothing a runtime returns or raises reaches a file or a terminal with a
/// secret in it.
pub fn for_agent(agent: &Agent) -> Result<Box<dyn Runtime>, RuntimeError> {
    let redactor = Arc::new(redactor(agent));
    let scrub = |e: RuntimeError| RuntimeError(redactor.scrub(&e.0).into_owned());
    let inner = agent.settings.kind().build(agent).map_err(scrub)?;
    Ok(Box::new(Redacting { inner, redactor }))
}

/// A runtime whose every output is scrubbed of the agent's secrets.
struct Redacting<T: ?Sized> {
    inner: Box<T>,
    redactor: Arc<Redactor>,
}

impl<T: ?Sized> Redacting<T> {
    fn error(&self, e: RuntimeError) -> RuntimeError {
        RuntimeError(self.redactor.scrub(&e.0).into_owned())
    }

    fn scrub_models(&self, calls: &mut [ModelCall]) {
        calls.iter_mut().for_each(|c| self.redactor.scrub_record(c));
    }

    fn scrub_refused(&self, refused: &mut [RefusedCall]) {
        for r in refused {
            self.redactor.scrub_value(&mut r.arguments);
            self.redactor.scrub_string(&mut r.name);
        }
    }
}

impl Runtime for Redacting<dyn Runtime> {
    fn provision(&self, scenario: &Scenario) -> Result<Box<dyn AgentHandle>, RuntimeError> {
        self.provision_lane(scenario, 0)
    }

    fn provision_lane(
        &self,
        scenario: &Scenario,
        lane: usize,
    ) -> Result<Box<dyn AgentHandle>, RuntimeError> {
        let inner = self
            .inner
            .provision_lane(scenario, lane)
            .map_err(|e| self.error(e))?;
        Ok(Box::new(Redacting {
            inner,
            redactor: self.redactor.clone(),
        }))
    }

    fn max_lanes(&self) -> Option<usize> {
        self.inner.max_lanes()
    }

    fn default_jobs(&self) -> usize {
        self.inner.default_jobs()
    }
}

impl AgentHandle for Redacting<dyn AgentHandle> {
    fn reset_state(&mut self) -> Result<(), RuntimeError> {
        self.inner.reset_state().map_err(|e| self.error(e))
    }

    fn begin_run(&mut self, run: &RunInfo) -> Result<(), RuntimeError> {
        self.inner.begin_run(run).map_err(|e| self.error(e))
    }

    fn end_run(&mut self) -> RunEnd {
        let mut end = self.inner.end_run();
        for p in &mut end.processes {
            self.redactor.scrub_string(&mut p.exit);
            self.redactor.scrub_string(&mut p.stderr_tail);
        }
        self.scrub_refused(&mut end.refused);
        self.scrub_models(&mut end.model_calls);
        if let Some(a2a) = &mut end.a2a {
            self.redactor.scrub_record(a2a);
        }
        end
    }

    fn take_refused(&mut self) -> Vec<RefusedCall> {
        let mut refused = self.inner.take_refused();
        self.scrub_refused(&mut refused);
        refused
    }

    fn send(&mut self, session_id: &str, text: &str, ctx: TurnCtx<'_>) -> Reply {
        let mut reply = self.inner.send(session_id, text, ctx);
        let r = &self.redactor;
        if let Some(t) = &mut reply.text {
            r.scrub_string(t);
        }
        if let Some(e) = &mut reply.error {
            r.scrub_string(&mut e.message);
        }
        for retry in &mut reply.retries {
            r.scrub_string(&mut retry.error);
        }
        for call in &mut reply.tool_calls {
            r.scrub_value(&mut call.arguments);
            r.scrub_value(&mut call.result);
            if let Some(e) = &mut call.error {
                r.scrub_string(e);
            }
        }
        self.scrub_models(&mut reply.model_calls);
        reply
    }

    fn probe_state(&mut self) -> Option<Value> {
        let mut state = self.inner.probe_state()?;
        self.redactor.scrub_value(&mut state);
        Some(state)
    }

    fn teardown(&mut self) -> Result<(), RuntimeError> {
        self.inner.teardown().map_err(|e| self.error(e))
    }

    fn cooperative(&self) -> bool {
        self.inner.cooperative()
    }
}

/// Tool schemas as offered to a model (OpenAI function-tool shape).
pub(crate) fn tool_schemas(tools: &[ToolSpec]) -> Vec<Value> {
    tools
        .iter()
        .map(|t| {
            json!({
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.parameters,
                }
            })
        })
        .collect()
}

/// What the agent sees in a scenario, frozen before the first inject. An agent that cannot
/// reach the world is offered no tools.
pub(crate) fn surface(agent: &Agent, scenario: &Scenario) -> Surface {
    let mut surface = Surface::default();
    surface.soul = agent.soul.clone();
    if agent.reaches_world() {
        surface.tools = tool_schemas(&scenario.tools);
    }
    surface.model = agent.model.clone();
    surface.sampling = agent.sampling.clone();
    surface
}

/// The built-in agent names accepted by `--agent`.
pub const BUILTIN_AGENTS: [&str; 5] = [
    "demo",
    "demo-leaky",
    "demo-forbidden-tool",
    "demo-slow",
    "demo-garbled",
];

/// A built-in agent config by name.
pub fn builtin_agent(name: &str) -> Option<Agent> {
    let fault = match name {
        "demo" => None,
        "demo-leaky" => Some("leaky"),
        "demo-forbidden-tool" => Some("forbidden-tool"),
        "demo-slow" => Some("slow"),
        "demo-garbled" => Some("garbled"),
        _ => return None,
    };
    let mut agent = Agent::new(
        name,
        Settings::Demo(agent::Demo {
            fault: fault.map(str::to_owned),
        }),
    );
    agent.model = Some("demo-1".to_owned());
    agent.soul =
        "You are the order-support agent of a small shop. Look orders up before answering, \
                  refund only damaged orders, and hand over to a human when asked."
            .to_owned();
    agent.sampling.temperature = Some(0.0);
    // The slow fault mode replies past this deadline; keep it short so sweeps stay quick.
    agent.turn_timeout_s = if fault == Some("slow") { 0.3 } else { 30.0 };
    agent.max_steps = 8;
    Some(agent)
}

/// Why `--agent` could not be resolved.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("read agent config {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("agent config {path}: {message}")]
    Invalid { path: String, message: String },
    #[error(
        "unknown agent `{0}`: pass an agent config file (TOML) or one of the built-in agents: {list}",
        list = BUILTIN_AGENTS.join(", ")
    )]
    Unknown(String),
}

/// `--agent FILE|NAME`: a TOML agent config ([`Agent::from_toml`]), or a built-in name.
pub fn resolve_agent(spec: &str) -> Result<Agent, AgentError> {
    // A built-in name wins over a same-named file in the working directory.
    if let Some(agent) = builtin_agent(spec) {
        return Ok(agent);
    }
    let path = Path::new(spec);
    if path.is_file() || spec.ends_with(".toml") {
        let text =
            crate::limits::read_input_file(path, false).map_err(|source| AgentError::Read {
                path: spec.to_owned(),
                source,
            })?;
        let agent = Agent::from_toml(&text).map_err(|e| AgentError::Invalid {
            path: spec.to_owned(),
            message: match e.at {
                Some((line, _)) => format!("line {line}: {}", e.message),
                None => e.message,
            },
        })?;
        validate_agent(&agent).map_err(|message| AgentError::Invalid {
            path: spec.to_owned(),
            message,
        })?;
        return Ok(agent);
    }
    builtin_agent(spec).ok_or_else(|| AgentError::Unknown(spec.to_owned()))
}

/// Checks an agent config as a whole, before anything runs: one message naming the field
/// (or environment variable) that is wrong. Building the runtime ([`for_agent`]) checks the
/// rest (endpoints, the API key variable).
pub fn validate_agent(agent: &Agent) -> Result<(), String> {
    if agent.label.trim().is_empty() {
        return Err("`label` must not be empty".into());
    }
    crate::deadlines::check_seconds(agent.turn_timeout_s, false)
        .map_err(|why| format!("`turn_timeout_s` = {} {why}", agent.turn_timeout_s))?;
    if agent.max_steps == 0 {
        return Err("`max_steps` must be at least 1".into());
    }
    if let Some(p) = agent.pricing() {
        p.check()?;
        if models::provider_of(&agent.settings).is_none()
            && !matches!(agent.settings, Settings::Demo(_))
            && agent.gateway().is_none()
        {
            return Err(format!(
                "`pricing` has no effect without `[gateway]`: `wt` sees the model calls of a {} agent only through its gateway",
                agent.runtime()
            ));
        }
    }
    if let Some(g) = agent.gateway() {
        let limits = g.limits();
        let field = |e: String| e.replacen('`', "`gateway.", 1);
        response_bytes(limits.max_response_bytes).map_err(field)?;
        if limits.retries.is_some_and(|r| r > MAX_RETRIES) {
            return Err(format!("`gateway.retries` must be at most {MAX_RETRIES}"));
        }
        endpoint_limit("max_concurrency", limits.max_concurrency).map_err(field)?;
        endpoint_limit("requests_per_minute", limits.requests_per_minute).map_err(field)?;
        // Every way a variable reaches the agent, by name: none may name a sealed one.
        let mut given: Vec<(&str, &str)> = Vec::new();
        given.extend(agent.api_key_env().map(|v| ("api_key_env", v)));
        given.extend(agent.settings.kind().handed_vars());
        for (sealed, field) in gateway::sealed_vars(g) {
            if let Some((way, _)) = given.iter().find(|(_, v)| *v == sealed) {
                return Err(format!(
                    "`{field}` and `{way}` name the same variable {sealed}: the gateway keeps the upstream's secrets from the agent, which gets a per-run token instead; remove {sealed} from `{way}`"
                ));
            }
        }
    }
    agent.settings.kind().validate(agent)
}

/// Checks `max_response_bytes`.
pub(crate) fn response_bytes(n: Option<u64>) -> Result<(), String> {
    match n {
        Some(n) if !(1024..=MAX_RESPONSE_BYTES_LIMIT).contains(&n) => Err(format!(
            "`max_response_bytes` = {n} is out of range: at least 1024 and at most {MAX_RESPONSE_BYTES_LIMIT}"
        )),
        _ => Ok(()),
    }
}

/// Checks a count limit (`max_sessions`, `max_concurrency`, `requests_per_minute`).
pub(crate) fn endpoint_limit(field: &str, value: Option<u32>) -> Result<(), String> {
    match value {
        Some(v) if !(1..=MAX_ENDPOINT_LIMIT).contains(&v) => Err(format!(
            "`{field}` = {v} is out of range: at least 1 and at most {MAX_ENDPOINT_LIMIT}"
        )),
        _ => Ok(()),
    }
}

/// Checks an endpoint's limits.
pub(crate) fn check_limits(l: &agent::EndpointLimits) -> Result<(), String> {
    response_bytes(l.max_response_bytes)?;
    if l.retries.is_some_and(|r| r > MAX_RETRIES) {
        return Err(format!("`retries` must be at most {MAX_RETRIES}"));
    }
    endpoint_limit("max_concurrency", l.max_concurrency)?;
    endpoint_limit("requests_per_minute", l.requests_per_minute)
}

/// The largest `max_response_bytes` an agent config may set (1 GiB).
pub(crate) const MAX_RESPONSE_BYTES_LIMIT: u64 = 1 << 30;

/// The largest `max_sessions`, `max_concurrency` and `requests_per_minute`.
pub(crate) const MAX_ENDPOINT_LIMIT: u32 = 100_000;

/// The most `retries` an agent config may set.
pub(crate) const MAX_RETRIES: u32 = 20;

/// An endpoint URL from an agent config or the environment: absolute `http` or `https`.
/// `what` names where it came from, for the message.
pub(crate) fn check_endpoint(url: &str, what: &str) -> Result<(), RuntimeError> {
    let shown = crate::secrets::scrub_url_passwords(url);
    match reqwest::Url::parse(url) {
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.has_host() => Ok(()),
        Ok(u) => Err(RuntimeError(format!(
            "{what} {shown:?} is not an http(s) URL (scheme `{}`)",
            u.scheme()
        ))),
        Err(e) => Err(RuntimeError(format!(
            "{what} {shown:?} is not a URL ({e}); write it in full, e.g. http://localhost:8000/v1"
        ))),
    }
}

/// One credential per request: an endpoint URL with `user:password@` makes the HTTP client
/// send `Authorization: Basic …`, and `api_key_env` sends `Authorization: Bearer …`; with
/// both, the request would carry two `Authorization` headers, and which one a server reads is
/// anyone's guess. `what` names where the URL came from.
pub(crate) fn check_one_credential(
    url: &str,
    what: &str,
    agent: &Agent,
) -> Result<(), RuntimeError> {
    if agent.api_key_env().is_some() && crate::secrets::has_password(url) {
        return Err(RuntimeError(format!(
            "{what} carries a user:password and `api_key_env` names an API key: a request would carry two Authorization headers; keep one of them"
        )));
    }
    Ok(())
}

/// `turn_timeout_s` as a duration (validated to be positive and at most 24 h).
pub(crate) fn turn_timeout(agent: &Agent) -> Duration {
    Duration::from_secs_f64(
        agent
            .turn_timeout_s
            .clamp(0.001, crate::deadlines::MAX_DURATION_S),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agents_resolve_by_name_or_file() {
        for name in BUILTIN_AGENTS {
            let a = resolve_agent(name).unwrap();
            assert_eq!(a.label, name);
            assert!(for_agent(&a).is_ok());
        }
        let e = resolve_agent("gpt-9").unwrap_err().to_string();
        assert!(
            e.contains("unknown agent `gpt-9`") && e.contains("demo-garbled"),
            "{e}"
        );
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("a.toml");
        std::fs::write(&f, "label = \"x\"\nruntime = \"openai\"\nmodle = \"m\"\n").unwrap();
        let e = resolve_agent(f.to_str().unwrap()).unwrap_err().to_string();
        assert!(
            e.contains("a.toml") && e.contains("line 3") && e.contains("modle"),
            "{e}"
        );
        std::fs::write(&f, "label = \"x\"\nruntime = \"openai\"\n").unwrap();
        let a = resolve_agent(f.to_str().unwrap()).unwrap();
        let e = for_agent(&a).err().unwrap().to_string();
        assert!(e.contains("needs `endpoint`"), "{e}");
    }
}
