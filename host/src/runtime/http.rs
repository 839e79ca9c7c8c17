//! The `http` runtime: an agent service behind an inject endpoint. The protocol
//! (health, reset, inject, optional state probe) is specified in
//! `docs/http-runtime-protocol.md`. The base URL comes from `WT_INJECT_URL`, else from the
//! agent config's `endpoint`. The service runs its own tools; the tool calls it reports
//! become the run's evidence.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use windtunnel_sdk::model::{AgentConfig, Scenario, ToolCall};

use super::{
    AgentHandle, Reply, Runtime, RuntimeError, TurnCtx, http_json, http_text, with_retries,
};

/// The environment variable that overrides the inject endpoint.
pub const INJECT_URL_ENV: &str = "WT_INJECT_URL";

/// The `http` runtime.
pub struct HttpRuntime {
    agent: AgentConfig,
    base: String,
}

impl HttpRuntime {
    pub fn new(agent: &AgentConfig) -> Result<Self, RuntimeError> {
        let base = std::env::var(INJECT_URL_ENV)
            .ok()
            .filter(|v| !v.trim().is_empty())
            .or_else(|| agent.endpoint.clone())
            .ok_or_else(|| {
                RuntimeError(format!(
                    "agent `{}`: the http runtime needs {INJECT_URL_ENV} or `endpoint` in the agent config",
                    agent.label
                ))
            })?;
        Ok(HttpRuntime {
            agent: agent.clone(),
            base: base.trim_end_matches('/').to_owned(),
        })
    }
}

impl Runtime for HttpRuntime {
    fn provision(&self, scenario: &Scenario) -> Result<Box<dyn AgentHandle>, RuntimeError> {
        let key = super::api_key(&self.agent)?;
        let handle = HttpAgent {
            http: super::http_client(Duration::from_secs(5))?,
            base: self.base.clone(),
            key,
            scenario_id: scenario.id.clone(),
            timeout: super::turn_timeout(&self.agent),
            retries: self.agent.retries.unwrap_or(2),
        };
        handle
            .call_ok("GET", "/health", None, handle.timeout)
            .map_err(|e| RuntimeError(format!("health check failed: {e}")))?;
        Ok(Box::new(handle))
    }
}

struct HttpAgent {
    http: super::HttpClient,
    base: String,
    key: Option<String>,
    scenario_id: String,
    timeout: Duration,
    retries: u32,
}

impl HttpAgent {
    fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
        timeout: Duration,
    ) -> Result<Value, String> {
        let url = format!("{}{path}", self.base);
        with_retries(self.retries, Instant::now() + timeout, |left| {
            http_json(&self.http, method, &url, self.key.as_deref(), body, left)
        })
    }

    /// Like [`Self::call`], for endpoints whose body does not matter (any 2xx succeeds).
    fn call_ok(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
        timeout: Duration,
    ) -> Result<(), String> {
        let url = format!("{}{path}", self.base);
        with_retries(self.retries, Instant::now() + timeout, |left| {
            http_text(&self.http, method, &url, self.key.as_deref(), body, left).map(drop)
        })
    }
}

fn parse_tool_calls(turn: u32, v: Option<&Value>) -> Result<Vec<ToolCall>, String> {
    let Some(v) = v else { return Ok(Vec::new()) };
    let arr = v.as_array().ok_or("`tool_calls` is not an array")?;
    arr.iter()
        .enumerate()
        .map(|(i, c)| {
            let name = c
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| format!("tool_calls[{i}] has no string `name`"))?;
            Ok(ToolCall {
                turn,
                step: i as u32,
                name: name.to_owned(),
                arguments: c.get("arguments").cloned().unwrap_or(json!({})),
                result: c.get("result").cloned().unwrap_or(Value::Null),
                error: c.get("error").and_then(Value::as_str).map(str::to_owned),
            })
        })
        .collect()
}

impl AgentHandle for HttpAgent {
    fn reset_state(&mut self) -> Result<(), RuntimeError> {
        self.call_ok(
            "POST",
            "/reset",
            Some(&json!({"scenario_id": self.scenario_id})),
            self.timeout,
        )
        .map_err(|e| RuntimeError(format!("reset failed: {e}")))
    }

    fn send(&mut self, session_id: &str, text: &str, ctx: TurnCtx<'_>) -> Reply {
        let body = json!({
            "session_id": session_id,
            "scenario_id": self.scenario_id,
            "turn": ctx.index,
            "text": text,
        });
        let resp = match self.call("POST", "/inject", Some(&body), ctx.timeout) {
            Ok(r) => r,
            Err(e) => return Reply::failed(e, Vec::new()),
        };
        let url = format!("{}/inject", self.base);
        let calls = match parse_tool_calls(ctx.index, resp.get("tool_calls")) {
            Ok(c) => c,
            Err(e) => return Reply::failed(format!("POST {url}: {e}"), Vec::new()),
        };
        if let Some(s) = resp.get("session_id").and_then(Value::as_str) {
            if s != session_id {
                return Reply::failed(
                    format!("POST {url}: answered in session {s:?}, not {session_id:?}"),
                    calls,
                );
            }
        }
        match resp.get("reply") {
            Some(Value::String(r)) => Reply {
                text: Some(r.clone()),
                tool_calls: calls,
                error: None,
            },
            _ => Reply::failed(
                format!(
                    "POST {url}: response has no string `reply`: {}",
                    crate::score::excerpt(&resp.to_string())
                ),
                calls,
            ),
        }
    }

    fn probe_state(&mut self) -> Option<Value> {
        let url = format!("{}/state", self.base);
        http_json(
            &self.http,
            "GET",
            &url,
            self.key.as_deref(),
            None,
            self.timeout,
        )
        .ok()
    }

    fn teardown(&mut self) -> Result<(), RuntimeError> {
        Ok(())
    }
}
