//! Runtimes: how `wt` reaches the agent under test. A runtime provisions one
//! [`AgentHandle`] per scenario; the runner drives it with `reset_state`, `send` and
//! `teardown`. Built-ins: `demo` (in-process, deterministic, with fault modes), `openai`
//! (any OpenAI-compatible chat-completions endpoint, tool loop run by the harness) and
//! `http` (an agent service behind an inject endpoint; see `docs/http-runtime-protocol.md`).
//!
//! Runtimes report what happened; they never score.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use windtunnel_sdk::model::{
    AgentConfig, Retry, Sampling, Scenario, Surface, ToolCall, ToolSpec, TurnErrorKind,
};

use crate::interrupt::Interrupt;
use crate::secrets::Redactor;
use crate::world::World;

pub mod demo;
pub mod http;
pub(crate) mod net;
pub mod openai;

pub use net::{DEFAULT_MAX_RESPONSE_BYTES, DEFAULT_RETRIES, Wait};

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
        let (result, error) = match tools.iter().find(|t| t.name == name) {
            None => (Value::Null, Some(format!("unknown tool `{name}`"))),
            Some(spec) => match self.world.execute(spec, &args) {
                Ok(v) => (v, None),
                Err(e) => (Value::Null, Some(e)),
            },
        };
        ToolCall {
            turn: self.index,
            step,
            name: name.to_owned(),
            arguments: args,
            result,
            error,
        }
    }
}

/// A provisioned agent for one scenario. Calls are sequential (one run at a time).
pub trait AgentHandle: Send {
    /// Forgets everything from earlier runs (a fresh agent, as far as the runtime can tell).
    fn reset_state(&mut self) -> Result<(), RuntimeError>;
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
pub const DEFAULT_NETWORK_JOBS: usize = 16;

/// The API key from the environment variable the agent config names (`api_key_env`), if it
/// names one: set, not empty, and a single line. The key is only ever sent to the endpoint,
/// never stored or printed.
pub fn api_key(agent: &AgentConfig) -> Result<Option<String>, RuntimeError> {
    let Some(var) = &agent.api_key_env else {
        return Ok(None);
    };
    let bad = |why: &str| {
        RuntimeError(format!(
            "environment variable {var} (named by api_key_env) {why}"
        ))
    };
    match std::env::var(var) {
        Err(std::env::VarError::NotPresent) => Err(bad("is not set")),
        Err(std::env::VarError::NotUnicode(_)) => Err(bad("is not valid UTF-8")),
        Ok(v) if v.trim().is_empty() => Err(bad("is empty")),
        Ok(v) if v.chars().any(char::is_control) => {
            Err(bad("contains a newline or another control character"))
        }
        Ok(v) => Ok(Some(v)),
    }
}

/// The secrets of an agent config: its API key and any password in its endpoint URLs.
pub fn redactor(agent: &AgentConfig) -> Redactor {
    let mut r = Redactor::new();
    if let Ok(Some(key)) = api_key(agent) {
        r.add(&key);
    }
    if let Some(e) = &agent.endpoint {
        r.add(e);
    }
    if let Ok(url) = std::env::var(http::INJECT_URL_ENV) {
        r.add(&url);
    }
    r
}

/// The runtime named by `agent.runtime`, its output passed through the agent's
/// [`redactor`]: nothing a runtime returns or raises reaches a file or a terminal with a
/// secret in it.
pub fn for_agent(agent: &AgentConfig) -> Result<Box<dyn Runtime>, RuntimeError> {
    let redactor = Arc::new(redactor(agent));
    let scrub = |e: RuntimeError| RuntimeError(redactor.scrub(&e.0).into_owned());
    let inner: Box<dyn Runtime> = match agent.runtime.as_str() {
        "demo" => Box::new(demo::DemoRuntime::new(agent).map_err(scrub)?),
        "openai" => Box::new(openai::OpenAiRuntime::new(agent).map_err(scrub)?),
        "http" => Box::new(http::HttpRuntime::new(agent).map_err(scrub)?),
        other => {
            return Err(RuntimeError(format!(
                "unknown runtime `{other}` (expected demo, openai or http)"
            )));
        }
    };
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
pub fn tool_schemas(tools: &[ToolSpec]) -> Vec<Value> {
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

/// What the agent sees in a scenario, frozen before the first inject.
pub fn surface(agent: &AgentConfig, scenario: &Scenario) -> Surface {
    Surface {
        soul: agent.soul.clone(),
        tools: tool_schemas(&scenario.tools),
        model: agent.model.clone(),
        sampling: agent.sampling.clone(),
    }
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
pub fn builtin_agent(name: &str) -> Option<AgentConfig> {
    let fault = match name {
        "demo" => None,
        "demo-leaky" => Some("leaky"),
        "demo-forbidden-tool" => Some("forbidden-tool"),
        "demo-slow" => Some("slow"),
        "demo-garbled" => Some("garbled"),
        _ => return None,
    };
    Some(AgentConfig {
        label: name.to_owned(),
        runtime: "demo".to_owned(),
        model: Some("demo-1".to_owned()),
        soul: "You are the order-support agent of a small shop. Look orders up before answering, \
               refund only damaged orders, and hand over to a human when asked."
            .to_owned(),
        sampling: Sampling {
            temperature: Some(0.0),
            ..Sampling::default()
        },
        endpoint: None,
        api_key_env: None,
        // The slow fault mode replies past this deadline; keep it short so sweeps stay quick.
        turn_timeout_s: if fault == Some("slow") { 0.3 } else { 30.0 },
        max_steps: 8,
        retries: None,
        fault: fault.map(str::to_owned),
        max_response_bytes: None,
        max_sessions: None,
        max_concurrency: None,
        requests_per_minute: None,
    })
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

/// `--agent FILE|NAME`: a TOML file deserializing into [`AgentConfig`], or a built-in name.
pub fn resolve_agent(spec: &str) -> Result<AgentConfig, AgentError> {
    // A built-in name wins over a same-named file in the working directory.
    if let Some(agent) = builtin_agent(spec) {
        return Ok(agent);
    }
    let path = Path::new(spec);
    if path.is_file() || spec.ends_with(".toml") {
        let text = std::fs::read_to_string(path).map_err(|source| AgentError::Read {
            path: spec.to_owned(),
            source,
        })?;
        let agent: AgentConfig = toml::from_str(&text).map_err(|e| {
            let line = e
                .span()
                .map(|s| format!("line {}: ", text[..s.start].matches('\n').count() + 1))
                .unwrap_or_default();
            AgentError::Invalid {
                path: spec.to_owned(),
                message: format!("{line}{}", e.message().trim_end()),
            }
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
pub fn validate_agent(agent: &AgentConfig) -> Result<(), String> {
    if agent.label.trim().is_empty() {
        return Err("`label` must not be empty".into());
    }
    crate::deadlines::check_seconds(agent.turn_timeout_s, false)
        .map_err(|why| format!("`turn_timeout_s` = {} {why}", agent.turn_timeout_s))?;
    if agent.max_steps == 0 {
        return Err("`max_steps` must be at least 1".into());
    }
    if let Some(n) = agent.max_response_bytes {
        if !(1024..=MAX_RESPONSE_BYTES_LIMIT).contains(&n) {
            return Err(format!(
                "`max_response_bytes` = {n} is out of range: at least 1024 and at most {MAX_RESPONSE_BYTES_LIMIT}"
            ));
        }
    }
    if agent.retries.is_some_and(|r| r > MAX_RETRIES) {
        return Err(format!("`retries` must be at most {MAX_RETRIES}"));
    }
    for (field, value) in [
        ("max_sessions", agent.max_sessions),
        ("max_concurrency", agent.max_concurrency),
        ("requests_per_minute", agent.requests_per_minute),
    ] {
        if let Some(v) = value.filter(|v| !(1..=MAX_ENDPOINT_LIMIT).contains(v)) {
            return Err(format!(
                "`{field}` = {v} is out of range: at least 1 and at most {MAX_ENDPOINT_LIMIT}"
            ));
        }
    }
    if !["demo", "openai", "http"].contains(&agent.runtime.as_str()) {
        return Err(format!(
            "unknown runtime `{}` (expected demo, openai or http)",
            agent.runtime
        ));
    }
    Ok(())
}

/// The largest `max_response_bytes` an agent config may set (1 GiB).
pub const MAX_RESPONSE_BYTES_LIMIT: u64 = 1 << 30;

/// The largest `max_sessions`, `max_concurrency` and `requests_per_minute`.
pub const MAX_ENDPOINT_LIMIT: u32 = 100_000;

/// The most `retries` an agent config may set.
pub const MAX_RETRIES: u32 = 20;

/// An endpoint URL from an agent config or the environment: absolute `http` or `https`.
/// `what` names where it came from, for the message.
pub fn check_endpoint(url: &str, what: &str) -> Result<(), RuntimeError> {
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

/// `turn_timeout_s` as a duration (validated to be positive and at most 24 h).
pub fn turn_timeout(agent: &AgentConfig) -> Duration {
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
