//! The `openai` runtime: any OpenAI-compatible chat-completions endpoint (vLLM, llama.cpp
//! server, Ollama, hosted APIs). The harness runs the tool loop: the scenario's tools are
//! offered as function tools, every tool call is executed against the fixture world and
//! recorded as evidence, until the model answers without tool calls or `max_steps` model
//! calls were made.
//!
//! The API key is read from the environment variable named by `api_key_env` at provision
//! time and only ever sent in the `Authorization` header; it is never written anywhere.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use windtunnel_sdk::model::{Scenario, ToolSpec, TurnErrorKind};

use super::gateway;
use super::net::{Log, Net, Request};

/// The `source` of the runtime's own model calls.
const SOURCE: &str = "openai";
use super::{Agent, AgentHandle, Reply, Runtime, RuntimeError, TurnCtx, tool_schemas};

/// The `openai` runtime.
pub(crate) struct OpenAiRuntime {
    agent: Agent,
    url: String,
    key: Option<String>,
    /// Extra headers of every request (`headers`, the key in `api_key_header`).
    headers: Arc<Vec<(String, String)>>,
    /// Extra fields of every request body (`[body]`).
    body: serde_json::Map<String, Value>,
    /// One client and one set of limits for the endpoint, shared by every lane.
    net: Net,
}

impl OpenAiRuntime {
    pub(crate) fn new(
        agent: &Agent,
        settings: &super::agent::OpenAi,
    ) -> Result<Self, RuntimeError> {
        // The config's endpoint, else OPENAI_BASE_URL, as OpenAI's clients read it.
        let from_env = std::env::var(super::agent::OPENAI_BASE_URL)
            .ok()
            .filter(|v| !v.trim().is_empty());
        let (base, what) = match (&settings.endpoint, &from_env) {
            (Some(e), _) => (e.as_str(), "`endpoint`"),
            (None, Some(e)) => (e.as_str(), super::agent::OPENAI_BASE_URL),
            (None, None) => {
                return Err(RuntimeError(
                    "the openai runtime needs `endpoint` (base URL, e.g. http://localhost:8000/v1) or OPENAI_BASE_URL"
                        .into(),
                ));
            }
        };
        if agent.model.as_deref().is_none_or(|m| m.trim().is_empty()) {
            return Err(RuntimeError("the openai runtime needs `model`".into()));
        }
        let url = gateway::chat_url(base.trim(), what)?;
        super::check_one_credential(base.trim(), what, agent)?;
        let (headers, key) = super::wire_headers(&settings.wire, super::api_key(agent)?, "")?;
        if let Some(body) = &settings.body {
            check_body(body, agent)?;
        }
        Ok(OpenAiRuntime {
            agent: agent.clone(),
            url,
            key,
            headers: Arc::new(headers),
            body: settings.body.clone().unwrap_or_default(),
            net: Net::new(
                Duration::from_secs(10),
                &settings.limits,
                super::redactor(agent),
            )?,
        })
    }
}

/// The request fields `wt` owns, which `[body]` may not set.
const OWNED_FIELDS: [&str; 4] = ["model", "messages", "tools", "stream"];

/// Refuses a `[body]` field `wt` sets itself, or one `[sampling]` sets too.
fn check_body(body: &serde_json::Map<String, Value>, agent: &Agent) -> Result<(), RuntimeError> {
    if let Some(k) = body.keys().find(|k| OWNED_FIELDS.contains(&k.as_str())) {
        return Err(RuntimeError(format!(
            "`body.{k}` is set by wt itself (it owns {}); remove it",
            OWNED_FIELDS.join(", ")
        )));
    }
    let sampling = serde_json::to_value(&agent.sampling).unwrap_or(Value::Null);
    if let Some(k) = body
        .keys()
        .find(|k| sampling.get(k.as_str()).is_some_and(|v| !v.is_null()))
    {
        return Err(RuntimeError(format!(
            "`body.{k}` and `[sampling]` both set `{k}`; set it in one place"
        )));
    }
    Ok(())
}

impl Runtime for OpenAiRuntime {
    fn provision(&self, scenario: &Scenario) -> Result<Box<dyn AgentHandle>, RuntimeError> {
        Ok(Box::new(OpenAiAgent {
            net: self.net.clone(),
            url: self.url.clone(),
            key: self.key.clone(),
            headers: self.headers.clone(),
            body: self.body.clone(),
            agent: self.agent.clone(),
            tools: scenario.tools.clone(),
            schemas: tool_schemas(&scenario.tools),
            sessions: HashMap::new(),
        }))
    }

    /// The conversation lives in `wt`: lanes never share one.
    fn max_lanes(&self) -> Option<usize> {
        None
    }
}

struct OpenAiAgent {
    net: Net,
    url: String,
    key: Option<String>,
    headers: Arc<Vec<(String, String)>>,
    body: serde_json::Map<String, Value>,
    agent: Agent,
    tools: Vec<ToolSpec>,
    schemas: Vec<Value>,
    /// Conversation so far, per session (the model is stateless; the session is ours).
    sessions: HashMap<String, Vec<Value>>,
}

impl OpenAiAgent {
    fn request(&self, messages: &[Value]) -> Value {
        let mut body = json!({
            "model": self.agent.model,
            "messages": messages,
        });
        if !self.schemas.is_empty() {
            body["tools"] = Value::from(self.schemas.clone());
        }
        let s = &self.agent.sampling;
        if let Some(t) = s.temperature {
            body["temperature"] = json!(t);
        }
        if let Some(p) = s.top_p {
            body["top_p"] = json!(p);
        }
        if let Some(m) = s.max_tokens {
            body["max_tokens"] = json!(m);
        }
        if let Some(seed) = s.seed {
            body["seed"] = json!(seed);
        }
        for (k, v) in &self.body {
            body[k] = v.clone();
        }
        body
    }
}

impl AgentHandle for OpenAiAgent {
    fn reset_state(&mut self) -> Result<(), RuntimeError> {
        self.sessions.clear();
        Ok(())
    }

    fn send(&mut self, session_id: &str, text: &str, mut ctx: TurnCtx<'_>) -> Reply {
        let deadline = Instant::now() + ctx.timeout;
        let mut messages = self.sessions.get(session_id).cloned().unwrap_or_else(|| {
            if self.agent.soul.is_empty() {
                Vec::new()
            } else {
                vec![json!({"role": "system", "content": self.agent.soul})]
            }
        });
        messages.push(json!({"role": "user", "content": text}));
        let mut calls = Vec::new();
        let mut models = Vec::new();
        let mut log = Log::default();
        for _ in 0..self.agent.max_steps {
            let body = self.request(&messages);
            let req = Request {
                headers: &self.headers,
                method: "POST",
                url: &self.url,
                auth: self.key.as_deref(),
                body: Some(&body),
            };
            let started = Instant::now();
            let retried = log.retries.len();
            let sent = self.net.json(&req, deadline, &mut log);
            // Every call is evidence, a failed one too.
            let mut record =
                super::mcp::stamp_model(gateway::request_record(&body), ctx.index, calls.len());
            record.source = SOURCE.to_owned();
            record.latency_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
            record.retries = log.retries[retried..].to_vec();
            let resp = match sent {
                Ok(r) => {
                    gateway::completion_record(&mut record, &r);
                    models.push(record);
                    r
                }
                Err(e) => {
                    record.error = Some(e.message.clone());
                    models.push(record);
                    return Reply {
                        error: Some(e),
                        tool_calls: calls,
                        model_calls: models,
                        ..Reply::default()
                    }
                    .with_log(log);
                }
            };
            let Some(message) = resp.pointer("/choices/0/message").filter(|m| m.is_object()) else {
                let mut reply = Reply::failed(
                    TurnErrorKind::Protocol,
                    format!(
                        "malformed chat completion from {}: no choices[0].message in {}",
                        self.url,
                        crate::score::excerpt(&resp.to_string())
                    ),
                    calls,
                );
                reply.model_calls = models;
                return reply.with_log(log);
            };
            let tool_calls = message
                .get("tool_calls")
                .and_then(Value::as_array)
                .filter(|a| !a.is_empty())
                .cloned();
            let Some(tool_calls) = tool_calls else {
                let mut content = match message.get("content") {
                    Some(Value::String(s)) => s.clone(),
                    Some(Value::Null) | None => String::new(),
                    Some(other) => other.to_string(),
                };
                // A refusal is the model's answer: the user would read it, so it is judged
                // as the reply (and recorded as a refusal on the model call).
                if content.trim().is_empty()
                    && let Some(refusal) = message.get("refusal").and_then(Value::as_str)
                {
                    content = refusal.to_owned();
                }
                messages.push(json!({"role": "assistant", "content": content}));
                self.sessions.insert(session_id.to_owned(), messages);
                let mut reply = Reply::text(content, calls);
                reply.model_calls = models;
                return reply.with_log(log);
            };
            messages.push(json!({
                "role": "assistant",
                "content": message.get("content").cloned().unwrap_or(Value::Null),
                "tool_calls": tool_calls,
            }));
            for tc in &tool_calls {
                let id = tc
                    .get("id")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                let name = tc
                    .pointer("/function/name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                let raw = tc
                    .pointer("/function/arguments")
                    .cloned()
                    .unwrap_or(json!("{}"));
                let step = calls.len() as u32;
                let call = match &raw {
                    Value::String(s) => {
                        match serde_json::from_str::<Value>(if s.trim().is_empty() {
                            "{}"
                        } else {
                            s
                        }) {
                            Ok(args) => ctx.call_tool(&self.tools, step, &name, args),
                            Err(e) => super::tool_call(
                                ctx.index,
                                step,
                                &name,
                                raw.clone(),
                                Value::Null,
                                Some(format!("arguments are not valid JSON: {e}")),
                                None,
                            ),
                        }
                    }
                    args => ctx.call_tool(&self.tools, step, &name, args.clone()),
                };
                let content = match &call.error {
                    Some(e) => json!({"error": e}).to_string(),
                    None => call.result.to_string(),
                };
                messages.push(json!({"role": "tool", "tool_call_id": id, "content": content}));
                calls.push(call);
            }
        }
        let mut reply = Reply::failed(
            TurnErrorKind::Agent,
            format!(
                "no final reply after {} model calls (max_steps); the model kept calling tools",
                self.agent.max_steps
            ),
            calls,
        );
        reply.model_calls = models;
        reply.with_log(log)
    }

    fn teardown(&mut self) -> Result<(), RuntimeError> {
        self.sessions.clear();
        Ok(())
    }
}
