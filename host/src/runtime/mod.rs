//! Runtimes: how `wt` reaches the agent under test. A runtime provisions one
//! [`AgentHandle`] per scenario; the runner drives it with `reset_state`, `send` and
//! `teardown`. Built-ins: `demo` (in-process, deterministic, with fault modes), `openai`
//! (any OpenAI-compatible chat-completions endpoint, tool loop run by the harness) and
//! `http` (an agent service behind an inject endpoint; see `docs/http-runtime-protocol.md`).
//!
//! Runtimes report what happened; they never score.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use windtunnel_sdk::model::{AgentConfig, Sampling, Scenario, Surface, ToolCall, ToolSpec};

use crate::world::World;

pub mod demo;
pub mod http;
pub mod openai;

/// A provisioning, reset or teardown failure.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct RuntimeError(pub String);

/// What one injected turn produced.
#[derive(Clone, Debug, Default)]
pub struct Reply {
    /// The final reply text; `None` when the turn produced none.
    pub text: Option<String>,
    /// Tool calls made during the turn, in order, with `turn` and `step` set.
    pub tool_calls: Vec<ToolCall>,
    /// A transport or protocol error that ended the turn (timeout, HTTP 500, bad JSON).
    pub error: Option<String>,
}

impl Reply {
    pub fn failed(error: impl Into<String>, tool_calls: Vec<ToolCall>) -> Self {
        Reply {
            text: None,
            tool_calls,
            error: Some(error.into()),
        }
    }
}

/// What a turn may use: the run's fixture world and its deadline.
pub struct TurnCtx<'a> {
    pub index: u32,
    pub world: &'a mut World,
    pub timeout: Duration,
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
}

/// Provisions an [`AgentHandle`] for a scenario.
pub trait Runtime: Send + Sync {
    fn provision(&self, scenario: &Scenario) -> Result<Box<dyn AgentHandle>, RuntimeError>;
}

/// The API key from the environment variable the agent config names (`api_key_env`), if it
/// names one. The key is only ever sent to the endpoint, never stored.
pub fn api_key(agent: &AgentConfig) -> Result<Option<String>, RuntimeError> {
    let Some(var) = &agent.api_key_env else {
        return Ok(None);
    };
    std::env::var(var).map(Some).map_err(|_| {
        RuntimeError(format!(
            "agent `{}`: environment variable {var} (named by api_key_env) is not set",
            agent.label
        ))
    })
}

/// The runtime named by `agent.runtime`.
pub fn for_agent(agent: &AgentConfig) -> Result<Box<dyn Runtime>, RuntimeError> {
    match agent.runtime.as_str() {
        "demo" => Ok(Box::new(demo::DemoRuntime::new(agent)?)),
        "openai" => Ok(Box::new(openai::OpenAiRuntime::new(agent)?)),
        "http" => Ok(Box::new(http::HttpRuntime::new(agent)?)),
        other => Err(RuntimeError(format!(
            "agent `{}`: unknown runtime `{other}` (expected demo, openai or http)",
            agent.label
        ))),
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
        let agent: AgentConfig = windtunnel_sdk::model::strict::deserialize(
            toml::Deserializer::new(&text),
        )
        .map_err(|e| {
            let line = e
                .span()
                .map(|s| format!("line {}: ", text[..s.start].matches('\n').count() + 1))
                .unwrap_or_default();
            AgentError::Invalid {
                path: spec.to_owned(),
                message: format!("{line}{}", e.message().trim_end()),
            }
        })?;
        let invalid = |message: String| AgentError::Invalid {
            path: spec.to_owned(),
            message,
        };
        if agent.label.is_empty() {
            return Err(invalid("`label` must not be empty".into()));
        }
        if !(agent.turn_timeout_s > 0.0 && agent.turn_timeout_s.is_finite()) {
            return Err(invalid("`turn_timeout_s` must be a positive number".into()));
        }
        if agent.max_steps == 0 {
            return Err(invalid("`max_steps` must be at least 1".into()));
        }
        if !["demo", "openai", "http"].contains(&agent.runtime.as_str()) {
            return Err(invalid(format!(
                "unknown runtime `{}` (expected demo, openai or http)",
                agent.runtime
            )));
        }
        return Ok(agent);
    }
    builtin_agent(spec).ok_or_else(|| AgentError::Unknown(spec.to_owned()))
}

/// `turn_timeout_s` as a duration.
pub fn turn_timeout(agent: &AgentConfig) -> Duration {
    Duration::from_secs_f64(agent.turn_timeout_s.clamp(0.001, 86_400.0))
}

/// Retries on 429/5xx with exponential backoff (100 ms, 200 ms, … capped at 2 s), within
/// `deadline`. Shared by the HTTP-based runtimes.
pub(crate) fn with_retries<T>(
    retries: u32,
    deadline: std::time::Instant,
    mut attempt: impl FnMut(Duration) -> Result<T, HttpFailure>,
) -> Result<T, String> {
    let mut tries = 0;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err("timed out".into());
        }
        match attempt(left) {
            Ok(v) => return Ok(v),
            Err(HttpFailure::Retryable(msg)) if tries < retries => {
                let backoff =
                    Duration::from_millis(100u64 << tries.min(4)).min(Duration::from_secs(2));
                let left = deadline.saturating_duration_since(std::time::Instant::now());
                if backoff >= left {
                    return Err(format!("{msg} (no time left to retry)"));
                }
                tracing::debug!("retrying after {msg}");
                std::thread::sleep(backoff);
                tries += 1;
            }
            Err(HttpFailure::Retryable(msg)) if tries > 0 => {
                return Err(format!("{msg} (after {} attempts)", tries + 1));
            }
            Err(HttpFailure::Retryable(msg) | HttpFailure::Fatal(msg)) => return Err(msg),
        }
    }
}

/// An HTTP attempt's failure.
pub(crate) enum HttpFailure {
    /// 429 or 5xx: worth retrying.
    Retryable(String),
    Fatal(String),
}

/// Sends `body` as JSON (POST) or nothing (GET) and returns the parsed JSON reply.
pub(crate) fn http_json(
    agent: &HttpClient,
    method: &str,
    url: &str,
    auth: Option<&str>,
    body: Option<&Value>,
    timeout: Duration,
) -> Result<Value, HttpFailure> {
    let text = http_text(agent, method, url, auth, body, timeout)?;
    if text.trim().is_empty() {
        return Ok(Value::Null);
    }
    serde_json::from_str(&text).map_err(|e| {
        HttpFailure::Fatal(format!(
            "{method} {url}: malformed JSON in the response ({e}): {}",
            crate::score::excerpt(&text)
        ))
    })
}

/// An HTTP client for one provisioned agent.
pub(crate) fn http_client(connect_timeout: Duration) -> Result<HttpClient, RuntimeError> {
    HttpClient::builder()
        .connect_timeout(connect_timeout)
        .build()
        .map_err(|e| RuntimeError(format!("cannot build an HTTP client: {}", chain(&e))))
}

pub(crate) type HttpClient = reqwest::blocking::Client;

/// An error with its causes, on one line.
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let part = cause.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = cause.source();
    }
    text
}

/// The innermost cause of an error (e.g. `tcp connect error: Connection refused`).
fn root_cause(e: &dyn std::error::Error) -> String {
    let mut cause = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}

/// Sends `body` as JSON (POST) or nothing (GET) and returns the 2xx reply's body.
pub(crate) fn http_text(
    client: &HttpClient,
    method: &str,
    url: &str,
    auth: Option<&str>,
    body: Option<&Value>,
    timeout: Duration,
) -> Result<String, HttpFailure> {
    let verb = reqwest::Method::from_bytes(method.as_bytes())
        .map_err(|e| HttpFailure::Fatal(format!("{method} {url}: {e}")))?;
    let mut req = client.request(verb, url).timeout(timeout);
    if let Some(key) = auth {
        req = req.bearer_auth(key);
    }
    if let Some(b) = body {
        req = req
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(b.to_string());
    }
    let transport = |e: reqwest::Error, reading: bool| {
        let what = match (e.is_timeout(), reading) {
            (true, false) => "timed out".to_owned(),
            (true, true) => "timed out reading the body".to_owned(),
            (false, _) if e.is_connect() => format!("cannot connect: {}", root_cause(&e)),
            (false, false) => chain(&e),
            (false, true) => format!("reading the body: {}", chain(&e)),
        };
        HttpFailure::Fatal(format!("{method} {url}: {what}"))
    };
    let resp = req.send().map_err(|e| transport(e, false))?;
    let status = resp.status();
    let text = resp.text().map_err(|e| transport(e, true))?;
    if !status.is_success() {
        let body: String = text.chars().take(200).collect();
        let msg = format!("{method} {url}: HTTP {}: {}", status.as_u16(), body.trim());
        return Err(if status.as_u16() == 429 || status.is_server_error() {
            HttpFailure::Retryable(msg)
        } else {
            HttpFailure::Fatal(msg)
        });
    }
    Ok(text)
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

    #[test]
    fn retries_only_retryable_failures_within_the_deadline() {
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let mut n = 0;
        let r: Result<(), String> = with_retries(2, deadline, |_| {
            n += 1;
            Err(HttpFailure::Retryable("HTTP 503".into()))
        });
        assert_eq!(n, 3);
        assert!(r.unwrap_err().contains("after 3 attempts"));
        let mut n = 0;
        let r: Result<(), String> = with_retries(2, deadline, |_| {
            n += 1;
            Err(HttpFailure::Fatal("HTTP 400".into()))
        });
        assert_eq!((n, r.unwrap_err().as_str()), (1, "HTTP 400"));
    }
}
