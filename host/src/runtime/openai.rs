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

use bytes::Bytes;
use serde_json::{Value, json};
use windtunnel_model::{Scenario, ToolSpec, TurnErrorKind};

use super::gateway;
use super::net::{Log, Net, Request};
use crate::interrupt::Interrupt;
use windtunnel_model::ModelCall;

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
    /// The endpoint of `settings` for `provider`: its `endpoint`, else the provider's base
    /// variable, with the provider's path appended; the key goes in the provider's key
    /// header when `api_key_header` does not say, and the provider's default headers are
    /// added unless the config's headers name them.
    pub(super) fn new(
        agent: &Agent,
        settings: &super::agent::OpenAi,
        provider: &dyn super::provider::Provider,
    ) -> Result<Endpoint, RuntimeError> {
        let runtime = agent.runtime();
        let base_var = provider.base_var();
        let path = provider.path();
        let key_header = provider.key_header();
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
        let mut headers = headers;
        for (name, value) in provider.default_headers() {
            if !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case(name)) {
                headers.push(((*name).to_owned(), (*value).to_owned()));
            }
        }
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
    pub(super) fn complete(&self, mut body: Value, sampling: &windtunnel_model::Sampling) -> Value {
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
    /// retries it took. `fill` reads the reply into the record. The call ends (interrupted)
    /// within [`super::net::STOP_POLL`] once `stop` is cut.
    pub(super) fn call(
        &self,
        body: Bytes,
        deadline: Instant,
        stop: &Interrupt,
        log: &mut Log,
        record: &mut ModelCall,
        fill: impl FnOnce(&mut ModelCall, &Value),
    ) -> Result<Value, super::TurnError> {
        let req = Request {
            headers: &self.headers,
            method: "POST",
            url: &self.url,
            auth: self.key.as_deref(),
            body: None,
        };
        let started = Instant::now();
        let retried = log.retries.len();
        let sent = self.net.json_until(&req, body, deadline, stop, log);
        record.latency_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        record.retries = log.retries[retried..].to_vec();
        match &sent {
            Ok(r) => fill(record, r),
            Err(e) => record.error = Some(e.message.clone()),
        }
        sent
    }
}

impl super::kind::RuntimeKind for super::agent::OpenAi {
    fn name(&self) -> &'static str {
        "openai"
    }

    fn build(&self, agent: &Agent) -> Result<Box<dyn Runtime>, RuntimeError> {
        Ok(Box::new(OpenAiRuntime::new(agent, self)?))
    }

    fn validate(&self, _: &Agent) -> Result<(), String> {
        super::check_limits(&self.limits)
    }

    fn api_key_env(&self) -> Option<&str> {
        self.key_var(super::agent::OPENAI_API_KEY)
    }

    fn endpoint(&self) -> Option<&str> {
        self.endpoint.as_deref()
    }

    fn pricing(&self) -> Option<&super::agent::Pricing> {
        self.pricing.as_ref()
    }

    fn headers(&self) -> Option<&std::collections::BTreeMap<String, super::agent::HeaderValue>> {
        self.wire.headers.as_ref()
    }

    fn to_sdk(&self, a: &mut windtunnel_model::AgentConfig) {
        a.endpoint.clone_from(&self.endpoint);
        a.api_key_env.clone_from(&self.api_key_env);
        super::kind::sdk_limits(a, &self.limits);
    }
}

/// OpenAI's chat completions, as a [`super::provider::Provider`].
pub(crate) struct Chat;

impl super::provider::Provider for Chat {
    fn name(&self) -> &'static str {
        "openai"
    }

    fn base_var(&self) -> &'static str {
        super::agent::OPENAI_BASE_URL
    }

    fn key_var(&self) -> &'static str {
        super::agent::OPENAI_API_KEY
    }

    fn path(&self) -> &'static str {
        "chat/completions"
    }

    fn chat_body(&self, c: super::provider::ChatCall<'_>) -> Value {
        let mut all = Vec::with_capacity(c.messages.len() + 1);
        all.push(json!({"role": "system", "content": c.system}));
        all.extend_from_slice(c.messages);
        let mut body = json!({"model": c.model, "messages": all});
        if c.json && !c.extra.contains_key("response_format") {
            body["response_format"] = json!({"type": "json_object"});
        }
        if let Some(seed) = c.seed
            && c.sampling.seed.is_none()
            && !c.extra.contains_key("seed")
        {
            body["seed"] = json!(seed);
        }
        body
    }

    fn record(&self, call: &mut ModelCall, reply: &Value) {
        gateway::completion_record(call, reply);
    }

    fn text(&self, reply: &Value) -> Option<String> {
        gateway::first_choice(reply)
            .and_then(|c| c.pointer("/message/content"))
            .and_then(Value::as_str)
            .map(str::to_owned)
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
            endpoint: Endpoint::new(agent, settings, &Chat)?,
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
        let schemas = tool_schemas(&scenario.tools);
        Ok(Box::new(OpenAiAgent {
            wire: Wire::new(&self.endpoint, &self.agent, &schemas),
            tool_names: gateway::tool_names(Some(&Value::from(schemas))),
            endpoint: self.endpoint.clone(),
            agent: self.agent.clone(),
            tools: scenario.tools.clone(),
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
    /// What every request body of the scenario shares, serialized once.
    wire: Wire,
    /// The names of the tools offered, as a model call's record keeps them.
    tool_names: Vec<String>,
    /// Conversation so far, per session (the model is stateless; the session is ours).
    sessions: HashMap<String, Vec<Value>>,
}

/// A chat-completions request body in two fixed parts around its messages, the one part
/// that changes from call to call: `{"model":…,"messages":` before, and after it the tools,
/// the `[sampling]` fields and the `[body]` fields, in that order. Serialized once per
/// scenario, so a call serializes only its messages and copies nothing else.
struct Wire {
    head: Vec<u8>,
    tail: Vec<u8>,
}

impl Wire {
    fn new(endpoint: &Endpoint, agent: &Agent, schemas: &[Value]) -> Wire {
        fn json<T: serde::Serialize + ?Sized>(v: &T) -> Vec<u8> {
            // Strings, JSON values and lists of them always serialize.
            serde_json::to_vec(v).unwrap_or_default()
        }
        let mut head = b"{\"model\":".to_vec();
        head.extend(json(&agent.model));
        head.extend_from_slice(b",\"messages\":");
        let mut tail = Vec::new();
        if !schemas.is_empty() {
            tail.extend_from_slice(b",\"tools\":");
            tail.extend(json(schemas));
        }
        // The fields `Endpoint::complete` adds, in its order (none of them is `model`,
        // `messages` or `tools`: `check_body` refused those).
        if let Value::Object(extra) = endpoint.complete(json!({}), &agent.sampling) {
            for (k, v) in &extra {
                tail.push(b',');
                tail.extend(json(k));
                tail.push(b':');
                tail.extend(json(v));
            }
        }
        tail.push(b'}');
        Wire { head, tail }
    }

    /// The body of a request with `messages`, and the length of their JSON.
    fn body(&self, messages: &[Value]) -> (Bytes, usize) {
        let mut body = Vec::with_capacity(self.head.len() + self.tail.len() + 1024);
        body.extend_from_slice(&self.head);
        let start = body.len();
        // Writing JSON values into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut body, messages);
        let messages_len = body.len() - start;
        body.extend_from_slice(&self.tail);
        (Bytes::from(body), messages_len)
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
            let (body, messages_len) = self.wire.body(&messages);
            // Every call is evidence, a failed one too.
            let record = gateway::request_record_of(
                self.agent.model.as_deref(),
                false,
                Value::Array(messages.clone()),
                Some(messages_len),
                self.tool_names.clone(),
            );
            let mut record = super::mcp::stamp_model(record, ctx.index, calls.len());
            record.source = SOURCE.to_owned();
            let sent = self.endpoint.call(
                body,
                deadline,
                ctx.stop,
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
            let Some(message) = gateway::first_choice(&resp)
                .and_then(|c| c.get("message"))
                .filter(|m| m.is_object())
            else {
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

    /// Called in place (no thread of its own per turn): see [`in_place`].
    fn cooperative(&self) -> bool {
        in_place(&self.tools)
    }
}

/// Whether a model runtime's turn may be called in place: its model calls end within
/// [`super::net::STOP_POLL`] of a cut (waits and retries included), and its tool calls run in
/// process — unless a tool is a world server's, whose call may take the server's
/// `call_timeout_s`: such a turn keeps a thread of its own, which the runner can stop waiting
/// for.
pub(super) fn in_place(tools: &[ToolSpec]) -> bool {
    !tools
        .iter()
        .any(|t| matches!(t.effect, windtunnel_model::ToolEffect::Server { .. }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::net::tests::server;
    use std::sync::atomic::Ordering;
    use windtunnel_model::ToolEffect;

    fn agent(url: &str, rest: &str) -> Agent {
        Agent::from_toml(&format!(
            "label = \"x\"\nruntime = \"openai\"\nendpoint = \"{url}\"\n{rest}"
        ))
        .unwrap()
    }

    fn endpoint(agent: &Agent) -> Endpoint {
        let super::super::Settings::OpenAi(s) = &agent.settings else {
            unreachable!()
        };
        OpenAiRuntime::new(agent, s).unwrap().endpoint
    }

    fn scenario(tools: Vec<ToolSpec>) -> Scenario {
        let mut s = Scenario::new("s", ["Where is order 1234?"]);
        s.tools = tools;
        s
    }

    fn lookup() -> ToolSpec {
        let mut t = ToolSpec::new(
            "lookup_order",
            ToolEffect::Read {
                path: "orders".into(),
                key_arg: Some("order_id".into()),
            },
        );
        t.description = "Look up an order by \"its\" number.".into();
        t.parameters = json!({"type": "object", "properties": {"order_id": {"type": "string"}}});
        t
    }

    /// The body as it was built before it came from fixed parts: a JSON value of the
    /// model, the messages, the tools, then what `Endpoint::complete` adds.
    fn built(endpoint: &Endpoint, agent: &Agent, schemas: &[Value], messages: &[Value]) -> Value {
        let mut body = json!({"model": agent.model, "messages": messages});
        if !schemas.is_empty() {
            body["tools"] = Value::from(schemas.to_vec());
        }
        endpoint.complete(body, &agent.sampling)
    }

    #[test]
    fn a_request_body_is_the_json_its_fields_make_in_their_order() {
        let messages = [
            json!({"role": "system", "content": "Be brief. \u{1b}[31m é"}),
            json!({"role": "user", "content": "Where is \"1234\"?"}),
            json!({"role": "assistant", "content": null, "tool_calls": [{"id": "t", "type": "function", "function": {"name": "lookup_order", "arguments": "{\"order_id\":\"1234\"}"}}]}),
            json!({"role": "tool", "tool_call_id": "t", "content": "{\"status\":\"shipped\"}"}),
        ];
        for (rest, tools) in [
            ("model = \"m\"\n", vec![]),
            ("model = \"gpt-\\\"4o\\\"\"\n", vec![lookup(), lookup()]),
            (
                "model = \"m\"\n[sampling]\ntemperature = 0.2\nmax_tokens = 64\nseed = 7\n\n[body]\ntool_choice = \"auto\"\nstop = [\"END\"]\nresponse_format = { type = \"json_object\" }\n",
                vec![lookup()],
            ),
        ] {
            let a = agent("http://127.0.0.1:9/v1", rest);
            let e = endpoint(&a);
            let schemas = tool_schemas(&tools);
            let wire = Wire::new(&e, &a, &schemas);
            for n in [0, 1, messages.len()] {
                let (body, messages_len) = wire.body(&messages[..n]);
                let want = built(&e, &a, &schemas, &messages[..n]);
                assert_eq!(
                    String::from_utf8_lossy(&body),
                    serde_json::to_string(&want).unwrap(),
                    "{rest}"
                );
                assert_eq!(
                    messages_len,
                    serde_json::to_vec(&messages[..n]).unwrap().len()
                );
            }
        }
    }

    #[test]
    fn a_turn_sends_its_body_and_records_what_it_sent_and_got() {
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let s = seen.clone();
        let srv = server(move |body| {
            s.lock().unwrap().push(body.to_owned());
            Some((
                200,
                "",
                json!({"id": "c-1", "model": "m-served", "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "It has shipped."}}], "usage": {"prompt_tokens": 9, "completion_tokens": 4}}).to_string(),
            ))
        });
        let base = srv.url.trim_end_matches("/chat/completions").to_owned();
        let a = agent(
            &base,
            "model = \"m\"\nsoul = \"Be brief.\"\n[sampling]\ntemperature = 0.0\n",
        );
        let sc = scenario(vec![lookup()]);
        let mut handle = super::super::for_agent(&a).unwrap().provision(&sc).unwrap();
        assert!(handle.cooperative());
        let stop = Interrupt::new();
        let mut world = crate::world::World::new(None);
        let reply = handle.send(
            "s-1",
            &sc.turns[0],
            TurnCtx {
                index: 0,
                world: &mut world,
                timeout: Duration::from_secs(30),
                stop: &stop,
            },
        );
        assert_eq!(
            reply.text.as_deref(),
            Some("It has shipped."),
            "{:?}",
            reply.error
        );
        let messages = json!([
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Where is order 1234?"}
        ]);
        let e = endpoint(&a);
        let schemas = tool_schemas(&sc.tools);
        let want = built(&e, &a, &schemas, messages.as_array().unwrap());
        assert_eq!(*seen.lock().unwrap(), [want.to_string()]);
        let [call] = &reply.model_calls[..] else {
            panic!("{:?}", reply.model_calls)
        };
        assert_eq!(call.source, "openai");
        assert_eq!(call.model.as_deref(), Some("m"));
        assert_eq!(call.served_model.as_deref(), Some("m-served"));
        assert_eq!(call.messages, messages);
        assert_eq!(call.tools, ["lookup_order"]);
        assert_eq!(call.finish_reason.as_deref(), Some("stop"));
        assert_eq!(call.response["content"], "It has shipped.");
        assert_eq!(call.usage.map(|u| u.completion_tokens), Some(4));
        assert!(call.truncated.is_empty());
        assert_eq!(srv.connections.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_turn_cut_while_its_model_call_waits_ends_interrupted_and_records_the_call() {
        let srv = server(|_| None);
        let base = srv.url.trim_end_matches("/chat/completions").to_owned();
        let a = agent(&base, "model = \"m\"\nturn_timeout_s = 120\n");
        let sc = scenario(vec![lookup()]);
        let mut handle = super::super::for_agent(&a).unwrap().provision(&sc).unwrap();
        let stop = Interrupt::new();
        let cutter = stop.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            cutter.cut();
        });
        let mut world = crate::world::World::new(None);
        let reply = handle.send(
            "s-1",
            &sc.turns[0],
            TurnCtx {
                index: 0,
                world: &mut world,
                timeout: Duration::from_secs(120),
                stop: &stop,
            },
        );
        let error = reply.error.expect("the turn failed");
        assert_eq!(error.kind, TurnErrorKind::Interrupted, "{error:?}");
        let [call] = &reply.model_calls[..] else {
            panic!("{:?}", reply.model_calls)
        };
        assert!(
            call.error
                .as_deref()
                .is_some_and(|e| e.contains("interrupted")),
            "{call:?}"
        );
        assert_eq!(srv.requests.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_turn_is_called_in_place_unless_a_tool_is_a_world_servers() {
        assert!(in_place(&[]));
        assert!(in_place(&[lookup()]));
        let server_tool = ToolSpec::new(
            "remember",
            ToolEffect::Server {
                server: "memory".into(),
            },
        );
        assert!(!in_place(&[lookup(), server_tool.clone()]));
        let a = agent("http://127.0.0.1:9/v1", "model = \"m\"\n");
        let runtime = super::super::for_agent(&a).unwrap();
        assert!(
            runtime
                .provision(&scenario(vec![lookup()]))
                .unwrap()
                .cooperative()
        );
        assert!(
            !runtime
                .provision(&scenario(vec![lookup(), server_tool]))
                .unwrap()
                .cooperative()
        );
    }
}
