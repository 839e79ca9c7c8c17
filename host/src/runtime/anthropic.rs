//! The `anthropic` runtime: Anthropic's Messages API (and the servers that speak it). As with
//! `openai`, the harness runs the tool loop: the scenario's tools are offered as tools, every
//! `tool_use` block is executed against the fixture world and recorded as evidence, and its
//! `tool_result` goes back, until the model answers without a tool use or `max_steps` model
//! calls were made.
//!
//! The settings are the `openai` runtime's; the wire differs: `POST <endpoint>/messages`, the
//! key in `x-api-key` (unless `api_key_header` says otherwise), `anthropic-version`, and
//! `max_tokens` always sent (`[sampling] max_tokens`, default [`DEFAULT_MAX_TOKENS`]).

use std::collections::HashMap;
use std::time::Instant;

use bytes::Bytes;
use serde_json::{Value, json};
use windtunnel_model::{Scenario, ToolSpec, TurnErrorKind};

use super::gateway;
use super::net::Log;
use super::openai::Endpoint;
use super::{Agent, AgentHandle, Reply, Runtime, RuntimeError, TurnCtx};

/// The `source` of the runtime's model calls.
const SOURCE: &str = "anthropic";

/// The API version sent when the agent config's headers name none.
pub(crate) const ANTHROPIC_VERSION: &str = "2023-06-01";

/// `max_tokens` when `[sampling]` sets none (the Messages API requires one).
pub(crate) const DEFAULT_MAX_TOKENS: u32 = 4096;

/// The `anthropic` runtime.
pub(crate) struct AnthropicRuntime {
    agent: Agent,
    endpoint: Endpoint,
}

impl AnthropicRuntime {
    pub(crate) fn new(
        agent: &Agent,
        settings: &super::agent::OpenAi,
    ) -> Result<Self, RuntimeError> {
        use super::provider::Provider;
        Messages
            .refuse(&agent.sampling, "the anthropic runtime")
            .map_err(RuntimeError)?;
        Ok(AnthropicRuntime {
            agent: agent.clone(),
            endpoint: endpoint(agent, settings)?,
        })
    }
}

/// The Messages API endpoint of `settings`: the key in `x-api-key` unless `api_key_header`
/// says otherwise, and `anthropic-version` unless the headers name one.
pub(super) fn endpoint(
    agent: &Agent,
    settings: &super::agent::OpenAi,
) -> Result<Endpoint, RuntimeError> {
    Endpoint::new(agent, settings, &Messages)
}

impl super::kind::RuntimeKind for super::agent::Anthropic {
    fn name(&self) -> &'static str {
        "anthropic"
    }

    fn build(&self, agent: &Agent) -> Result<Box<dyn Runtime>, RuntimeError> {
        Ok(Box::new(AnthropicRuntime::new(agent, &self.0)?))
    }

    fn validate(&self, agent: &Agent) -> Result<(), String> {
        self.0.validate(agent)
    }

    fn api_key_env(&self) -> Option<&str> {
        self.0.key_var(super::agent::ANTHROPIC_API_KEY)
    }

    fn endpoint(&self) -> Option<&str> {
        self.0.endpoint()
    }

    fn pricing(&self) -> Option<&super::agent::Pricing> {
        self.0.pricing()
    }

    fn headers(&self) -> Option<&std::collections::BTreeMap<String, super::agent::HeaderValue>> {
        self.0.headers()
    }

    fn to_sdk(&self, a: &mut windtunnel_model::AgentConfig) {
        self.0.to_sdk(a);
    }
}

/// Anthropic's Messages API, as a [`super::provider::Provider`].
pub(crate) struct Messages;

impl super::provider::Provider for Messages {
    fn name(&self) -> &'static str {
        "anthropic"
    }

    fn base_var(&self) -> &'static str {
        super::agent::ANTHROPIC_BASE_URL
    }

    fn key_var(&self) -> &'static str {
        super::agent::ANTHROPIC_API_KEY
    }

    fn path(&self) -> &'static str {
        "messages"
    }

    fn key_header(&self) -> Option<&'static str> {
        Some("x-api-key")
    }

    fn default_headers(&self) -> &'static [(&'static str, &'static str)] {
        &[("anthropic-version", ANTHROPIC_VERSION)]
    }

    fn refuse(&self, sampling: &windtunnel_model::Sampling, what: &str) -> Result<(), String> {
        match sampling.seed {
            Some(_) => Err(format!(
                "`sampling.seed` has no effect on {what}: the Messages API takes no seed; remove it"
            )),
            None => Ok(()),
        }
    }

    /// The Messages API has no JSON mode (the prompt asks for JSON) and takes no seed.
    fn chat_body(&self, c: super::provider::ChatCall<'_>) -> Value {
        json!({
            "model": c.model,
            "max_tokens": c.sampling.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
            "system": c.system,
            "messages": c.messages,
        })
    }

    fn record(&self, call: &mut windtunnel_model::ModelCall, reply: &Value) {
        gateway::message_record(call, reply);
    }

    fn text(&self, reply: &Value) -> Option<String> {
        reply
            .get("content")
            .filter(|c| c.is_array())
            .map(gateway::text_of)
    }
}

impl Runtime for AnthropicRuntime {
    fn provision(&self, scenario: &Scenario) -> Result<Box<dyn AgentHandle>, RuntimeError> {
        Ok(Box::new(AnthropicAgent {
            endpoint: self.endpoint.clone(),
            agent: self.agent.clone(),
            schemas: scenario.tools.iter().map(tool_schema).collect(),
            tools: scenario.tools.clone(),
            sessions: HashMap::new(),
        }))
    }

    /// The conversation lives in `wt`: lanes never share one.
    fn max_lanes(&self) -> Option<usize> {
        None
    }
}

/// A tool as the Messages API takes it.
fn tool_schema(t: &ToolSpec) -> Value {
    json!({"name": t.name, "description": t.description, "input_schema": t.parameters})
}

struct AnthropicAgent {
    endpoint: Endpoint,
    agent: Agent,
    tools: Vec<ToolSpec>,
    schemas: Vec<Value>,
    /// Conversation so far, per session.
    sessions: HashMap<String, Vec<Value>>,
}

impl AnthropicAgent {
    fn request(&self, messages: &[Value]) -> Value {
        let s = &self.agent.sampling;
        let mut body = json!({
            "model": self.agent.model,
            "max_tokens": s.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
            "messages": messages,
        });
        if !self.agent.soul.is_empty() {
            body["system"] = json!(self.agent.soul);
        }
        if !self.schemas.is_empty() {
            body["tools"] = Value::from(self.schemas.clone());
        }
        // `seed` was refused at load; `max_tokens` is the one set above.
        self.endpoint.complete(body, s)
    }
}

impl AgentHandle for AnthropicAgent {
    fn reset_state(&mut self) -> Result<(), RuntimeError> {
        self.sessions.clear();
        Ok(())
    }

    fn send(&mut self, session_id: &str, text: &str, mut ctx: TurnCtx<'_>) -> Reply {
        let deadline = Instant::now() + ctx.timeout;
        let mut messages = self.sessions.get(session_id).cloned().unwrap_or_default();
        messages.push(json!({"role": "user", "content": text}));
        let mut calls = Vec::new();
        let mut models = Vec::new();
        let mut log = Log::default();
        let done = |mut reply: Reply, models, log| {
            reply.model_calls = models;
            reply.with_log(log)
        };
        for _ in 0..self.agent.max_steps {
            let body = self.request(&messages);
            let mut record =
                super::mcp::stamp_model(gateway::request_record(&body), ctx.index, calls.len());
            record.source = SOURCE.to_owned();
            // A JSON value always serializes.
            let sent = self.endpoint.call(
                Bytes::from(serde_json::to_vec(&body).unwrap_or_default()),
                deadline,
                ctx.stop,
                &mut log,
                &mut record,
                gateway::message_record,
            );
            models.push(record);
            let resp = match sent {
                Ok(r) => r,
                Err(e) => {
                    let reply = Reply {
                        error: Some(e),
                        tool_calls: calls,
                        ..Reply::default()
                    };
                    return done(reply, models, log);
                }
            };
            let Some(content) = resp.get("content").and_then(Value::as_array) else {
                let reply = Reply::failed(
                    TurnErrorKind::Protocol,
                    format!(
                        "malformed message from {}: no `content` list in {}",
                        self.endpoint.url,
                        crate::score::excerpt(&resp.to_string())
                    ),
                    calls,
                );
                return done(reply, models, log);
            };
            let uses: Vec<&Value> = content
                .iter()
                .filter(|b| b.get("type").and_then(Value::as_str) == Some("tool_use"))
                .collect();
            messages.push(json!({"role": "assistant", "content": content}));
            if uses.is_empty() {
                let reply = gateway::text_of(&Value::Array(content.clone()));
                self.sessions.insert(session_id.to_owned(), messages);
                return done(Reply::text(reply, calls), models, log);
            }
            let mut results = Vec::new();
            for u in uses {
                let name = u.get("name").and_then(Value::as_str).unwrap_or_default();
                let input = u.get("input").cloned().unwrap_or_else(|| json!({}));
                let step = calls.len() as u32;
                let call = ctx.call_tool(&self.tools, step, name, input);
                let (text, is_error) = match &call.error {
                    Some(e) => (e.clone(), true),
                    None => (call.result.to_string(), false),
                };
                results.push(json!({
                    "type": "tool_result",
                    "tool_use_id": u.get("id").cloned().unwrap_or(Value::Null),
                    "content": text,
                    "is_error": is_error,
                }));
                calls.push(call);
            }
            messages.push(json!({"role": "user", "content": results}));
        }
        let reply = Reply::failed(
            TurnErrorKind::Agent,
            format!(
                "no final reply after {} model calls (max_steps); the model kept calling tools",
                self.agent.max_steps
            ),
            calls,
        );
        done(reply, models, log)
    }

    fn teardown(&mut self) -> Result<(), RuntimeError> {
        self.sessions.clear();
        Ok(())
    }

    /// Called in place, as the `openai` runtime is ([`super::openai::in_place`]).
    fn cooperative(&self) -> bool {
        super::openai::in_place(&self.tools)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use windtunnel_model::ModelCall;

    #[test]
    fn a_message_reads_as_a_model_call() {
        let mut call = ModelCall::default();
        gateway::message_record(
            &mut call,
            &json!({
                "id": "msg_1", "model": "claude-x", "stop_reason": "max_tokens",
                "content": [{"type": "text", "text": "Your order has sh"}],
                "usage": {"input_tokens": 10, "output_tokens": 5,
                          "cache_read_input_tokens": 30, "cache_creation_input_tokens": 2}
            }),
        );
        assert_eq!(call.response_id.as_deref(), Some("msg_1"));
        assert_eq!(call.finish_reason.as_deref(), Some("max_tokens"));
        let u = call.usage.unwrap();
        assert_eq!(
            (u.prompt_tokens, u.cached_tokens, u.completion_tokens),
            (42, 30, 5)
        );
        let mut refused = ModelCall::default();
        gateway::message_record(
            &mut refused,
            &json!({"stop_reason": "refusal", "content": [{"type": "text", "text": "No."}]}),
        );
        assert_eq!(refused.refusal.as_deref(), Some("No."));
        assert!(refused.usage.is_none());
    }
}
