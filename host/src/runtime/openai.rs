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
use windtunnel_sdk::model::ModelCall;

/// The `source` of the runtime's own model calls.
const SOURCE: &str = "openai";
use super::{Agent, AgentHandle, Reply, Runtime, RuntimeError, TurnCtx, tool_schemas};

/// Where a harness-run model runtime (`openai`, `anthropic`) sends its calls and how: the
/// URL, the key, the headers, the extra body fields and one client with the endpoint's
/// limits, shared by every lane.
#[derive(Clone)]
pub(super) struct Endpoint {
    pub url: String,
    /// Sent as `Authorization: Bearer`; `None` when the key goes in a header of its own.
    pub key: Option<String>,
    /// Extra headers of every request (`headers`, the key in `api_key_header`).
    pub headers: Arc<super::Headers>,
    /// Extra fields of every request body (`[body]`).
    pub body: serde_json::Map<String, Value>,
    pub net: Net,
}

impl Endpoint {
    /// The endpoint of `settings`: its `endpoint`, else the variable `base_var`, with `path`
    /// appended; `key_header` is where the key goes when `api_key_header` does not say.
    pub(super) fn new(
        agent: &Agent,
        settings: &super::agent::OpenAi,
        base_var: &str,
        path: &str,
        key_header: Option<&str>,
    ) -> Result<Endpoint, RuntimeError> {
        let runtime = agent.runtime();
        // The config's endpoint, else the variable the provider's own clients read.
        let from_env = std::env::var(base_var)
            .ok()
            .filter(|v| !v.trim().is_empty());
        let (base, what) = match (&settings.endpoint, &from_env) {
            (Some(e), _) => (e.as_str(), "`endpoint`"),
            (None, Some(e)) => (e.as_str(), base_var),
            (None, None) => {
                return Err(RuntimeError(format!(
                    "the {runtime} runtime needs `endpoint` (base URL, e.g. http://localhost:8000/v1) or {base_var}"
                )));
            }
        };
        if agent.model.as_deref().is_none_or(|m| m.trim().is_empty()) {
            return Err(RuntimeError(format!("the {runtime} runtime needs `model`")));
        }
        let url = gateway::api_url(base.trim(), path, what)?;
        super::check_one_credential(base.trim(), what, agent)?;
        let mut wire = settings.wire.clone();
        if wire.api_key_header.is_none() {
            wire.api_key_header = key_header.map(str::to_owned);
        }
        let key = super::api_key(agent)?;
        let (headers, key) = if key.is_none() && settings.wire.api_key_header.is_none() {
            // No key: a default key header has nothing to carry.
            wire.api_key_header = None;
            super::wire_headers(&wire, None, "")?
        } else {
            super::wire_headers(&wire, key, "")?
        };
        if let Some(body) = &settings.body {
            check_body(body, agent)?;
        }
        Ok(Endpoint {
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

    /// A request body with the set `[sampling]` fields (same names in both APIs) and the
    /// config's `[body]` fields added.
    pub(super) fn complete(
        &self,
        mut body: Value,
        sampling: &windtunnel_sdk::model::Sampling,
    ) -> Value {
        if let Ok(Value::Object(set)) = serde_json::to_value(sampling) {
            for (k, v) in set {
                body[k] = v;
            }
        }
        for (k, v) in &self.body {
            body[k] = v.clone();
        }
        body
    }

    /// One call of a tool loop, recorded: the request, the reply or the failure, and the
    /// retries it took. `fill` reads the reply into the record.
    pub(super) fn call(
        &self,
        body: &Value,
        deadline: Instant,
        log: &mut Log,
        record: &mut ModelCall,
        fill: impl FnOnce(&mut ModelCall, &Value),
    ) -> Result<Value, super::TurnError> {
        let req = Request {
            headers: &self.headers,
            method: "POST",
            url: &self.url,
            auth: self.key.as_deref(),
            body: Some(body),
        };
        let started = Instant::now();
        let retried = log.retries.len();
        let sent = self.net.json(&req, deadline, log);
        record.latency_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        record.retries = log.retries[retried..].to_vec();
        match &sent {
            Ok(r) => fill(record, r),
            Err(e) => record.error = Some(e.message.clone()),
        }
        sent
    }
}

/// The `openai` runtime.
pub(crate) struct OpenAiRuntime {
    agent: Agent,
    endpoint: Endpoint,
}

impl OpenAiRuntime {
    pub(crate) fn new(
        agent: &Agent,
        settings: &super::agent::OpenAi,
    ) -> Result<Self, RuntimeError> {
        Ok(OpenAiRuntime {
            agent: agent.clone(),
            endpoint: Endpoint::new(
                agent,
                settings,
                super::agent::OPENAI_BASE_URL,
                "chat/completions",
                None,
            )?,
        })
    }
}

/// The request fields `wt` owns, which `[body]` may not set.
const OWNED_FIELDS: [&str; 4] = ["model", "messages", "tools", "stream"];

/// Refuses a `[body]` field `wt` sets itself, or one `[sampling]` sets too.
pub(super) fn check_body(
    body: &serde_json::Map<String, Value>,
    agent: &Agent,
) -> Result<(), RuntimeError> {
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
            endpoint: self.endpoint.clone(),
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
    endpoint: Endpoint,
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
        self.endpoint.complete(body, &self.agent.sampling)
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
            // Every call is evidence, a failed one too.
            let mut record =
                super::mcp::stamp_model(gateway::request_record(&body), ctx.index, calls.len());
            record.source = SOURCE.to_owned();
            let sent = self.endpoint.call(
                &body,
                deadline,
                &mut log,
                &mut record,
                gateway::completion_record,
            );
            models.push(record);
            let resp = match sent {
                Ok(r) => r,
                Err(e) => {
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
                        self.endpoint.url,
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
