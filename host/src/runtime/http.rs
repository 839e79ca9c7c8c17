//! The `http` runtime: an agent service behind an inject endpoint. The protocol
//! (health, reset, inject, optional state probe) is specified in
//! `docs/http-runtime-protocol.md`. The base URL comes from `WT_INJECT_URL`, else from the
//! agent config's `endpoint`.
//!
//! Unless the agent config says `mcp = false`, each run gets its own MCP endpoint on the
//! fixture world ([`crate::runtime::mcp`]), sent with every inject as `mcp_url`: the tools the service
//! calls there act on the run's world and are recorded by `wt`. Tool calls the service
//! reports in its inject response are recorded too, after them, as the service reported them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use windtunnel_model::{ModelCall, Scenario, ToolCall, TurnErrorKind};

use super::net::{Log, Net, Request};
use super::{
    Agent, AgentHandle, Reply, RunEnd, RunInfo, Runtime, RuntimeError, TurnCtx, TurnError,
};
use crate::runtime::mcp::{self, McpRun, ToolSet};

/// The environment variable that overrides the inject endpoint.
pub(crate) const INJECT_URL_ENV: &str = "WT_INJECT_URL";

impl super::kind::RuntimeKind for super::agent::Http {
    fn name(&self) -> &'static str {
        "http"
    }

    fn build(&self, agent: &Agent) -> Result<Box<dyn Runtime>, RuntimeError> {
        Ok(Box::new(HttpRuntime::new(agent, self)?))
    }

    fn validate(&self, _: &Agent) -> Result<(), String> {
        super::check_limits(&self.limits)?;
        super::endpoint_limit("max_sessions", self.max_sessions)
    }

    fn api_key_env(&self) -> Option<&str> {
        self.api_key_env.as_deref()
    }

    fn endpoint(&self) -> Option<&str> {
        self.endpoint.as_deref()
    }

    fn pricing(&self) -> Option<&super::agent::Pricing> {
        self.pricing.as_ref()
    }

    fn gateway(&self) -> Option<&super::agent::Gateway> {
        self.gateway.as_ref()
    }

    fn reaches_world(&self) -> bool {
        self.mcp.unwrap_or(true)
    }

    fn add_secrets(&self, _: &Agent, r: &mut crate::secrets::Redactor) {
        if let Ok(url) = std::env::var(INJECT_URL_ENV) {
            r.add(&url);
        }
    }

    fn to_sdk(&self, a: &mut windtunnel_model::AgentConfig) {
        a.endpoint.clone_from(&self.endpoint);
        a.api_key_env.clone_from(&self.api_key_env);
        super::kind::sdk_limits(a, &self.limits);
        a.max_sessions = self.max_sessions;
        a.mcp = self.mcp;
    }
}

/// The `http` runtime.
pub(crate) struct HttpRuntime {
    agent: Agent,
    settings: super::agent::Http,
    base: String,
    key: Option<String>,
    /// One client and one set of limits for the endpoint, shared by every lane.
    net: Net,
    /// The model gateway's upstream, when the agent has one.
    gateway: Option<Arc<super::gateway::Upstream>>,
}

impl HttpRuntime {
    pub(crate) fn new(agent: &Agent, settings: &super::agent::Http) -> Result<Self, RuntimeError> {
        let from_env = std::env::var(INJECT_URL_ENV)
            .ok()
            .filter(|v| !v.trim().is_empty());
        let (base, what) = match (&from_env, &settings.endpoint) {
            (Some(url), _) => (url.clone(), INJECT_URL_ENV),
            (None, Some(url)) => (url.clone(), "`endpoint`"),
            (None, None) => {
                return Err(RuntimeError(format!(
                    "the http runtime needs {INJECT_URL_ENV} or `endpoint` (the service's base URL) in the agent config"
                )));
            }
        };
        super::check_endpoint(base.trim(), what)?;
        super::check_one_credential(base.trim(), what, agent)?;
        let gateway = match &settings.gateway {
            Some(g) => Some(Arc::new(super::gateway::Upstream::new(agent, g)?)),
            None => None,
        };
        let key = super::api_key(agent)?;
        if let Some(g) = &settings.gateway {
            // What reaches the service: its key, and the fields of every inject.
            let told = super::told(agent);
            let told: Vec<(String, String)> = told
                .iter()
                .map(|(n, v)| (format!("`{n}` (sent in every inject)"), v.to_string()))
                .collect();
            super::gateway::refuse_sealed(
                g,
                key.iter()
                    .map(|k| {
                        (
                            "the key `api_key_env` sends the service".to_owned(),
                            k.as_str(),
                        )
                    })
                    .chain(told.iter().map(|(n, v)| (n.clone(), v.as_str()))),
            )?;
        }
        Ok(HttpRuntime {
            gateway,
            agent: agent.clone(),
            settings: settings.clone(),
            base: base.trim().trim_end_matches('/').to_owned(),
            key,
            net: Net::new(
                Duration::from_secs(5),
                &settings.limits,
                super::redactor(agent),
            )?,
        })
    }
}

impl Runtime for HttpRuntime {
    fn provision(&self, scenario: &Scenario) -> Result<Box<dyn AgentHandle>, RuntimeError> {
        self.provision_lane(scenario, 0)
    }

    fn provision_lane(
        &self,
        scenario: &Scenario,
        lane: usize,
    ) -> Result<Box<dyn AgentHandle>, RuntimeError> {
        // Each lane its own MCP listener: nothing one session's client does reaches another.
        let tools = match self.agent.reaches_world() {
            true => Some(ToolSet::new(&scenario.tools).map_err(|e| RuntimeError(e.to_string()))?),
            false => None,
        };
        let door = match tools.is_some() || self.gateway.is_some() {
            true => Some(
                mcp::Lane::open(
                    u32::try_from(lane).unwrap_or(u32::MAX),
                    self.gateway.clone(),
                )
                .map_err(|e| RuntimeError(e.to_string()))?,
            ),
            false => None,
        };
        let handle = HttpAgent {
            door,
            tools,
            run: None,
            net: self.net.clone(),
            base: self.base.clone(),
            key: self.key.clone(),
            scenario_id: scenario.id.clone(),
            told: super::told(&self.agent),
            run_id: None,
            outside_models: Vec::new(),
            lane,
            timeout: super::turn_timeout(&self.agent),
        };
        handle
            .call_ok("GET", "/health", None)
            .map_err(|e| RuntimeError(format!("health check failed: {e}")))?;
        Ok(Box::new(handle))
    }

    /// As many lanes as the service says it holds sessions (`max_sessions`, default 1: a
    /// stateful service sees one run at a time).
    fn max_lanes(&self) -> Option<usize> {
        Some(self.settings.max_sessions.unwrap_or(1) as usize)
    }
}

struct HttpAgent {
    /// The lane's MCP listener (absent with `mcp = false`).
    door: Option<mcp::Lane>,
    tools: Option<Arc<ToolSet>>,
    /// The current run's MCP endpoint.
    run: Option<McpRun>,
    net: Net,
    base: String,
    key: Option<String>,
    scenario_id: String,
    /// What the agent config tells the agent (`model`, `soul`, `sampling`).
    told: Vec<(&'static str, Value)>,
    /// The run in progress.
    run_id: Option<String>,
    /// Model calls of the run that no turn took.
    outside_models: Vec<windtunnel_model::ModelCall>,
    /// The session slot this handle drives; its reset names it.
    lane: usize,
    timeout: Duration,
}

impl HttpAgent {
    fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
        timeout: Duration,
        log: &mut Log,
    ) -> Result<Value, TurnError> {
        let url = format!("{}{path}", self.base);
        let req = Request {
            headers: &[],
            method,
            url: &url,
            auth: self.key.as_deref(),
            body,
        };
        self.net.json(&req, Instant::now() + timeout, log)
    }

    /// Like [`Self::call`], for endpoints whose body does not matter (any 2xx succeeds).
    fn call_ok(&self, method: &str, path: &str, body: Option<&Value>) -> Result<(), TurnError> {
        let url = format!("{}{path}", self.base);
        let req = Request {
            headers: &[],
            method,
            url: &url,
            auth: self.key.as_deref(),
            body,
        };
        self.net
            .text(&req, Instant::now() + self.timeout, &mut Log::default())
            .map(drop)
    }
}

/// Tool calls the service reports, numbered after the `first` calls `wt` already recorded.
fn parse_tool_calls(turn: u32, first: usize, v: Option<&Value>) -> Result<Vec<ToolCall>, String> {
    let Some(v) = v else { return Ok(Vec::new()) };
    let arr = v.as_array().ok_or("`tool_calls` is not an array")?;
    arr.iter()
        .enumerate()
        .map(|(i, c)| {
            let name = c
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| format!("tool_calls[{i}] has no string `name`"))?;
            Ok(super::tool_call(
                turn,
                (first + i) as u32,
                name,
                c.get("arguments").cloned().unwrap_or(json!({})),
                c.get("result").cloned().unwrap_or(Value::Null),
                c.get("error").and_then(Value::as_str).map(str::to_owned),
                None,
            ))
        })
        .collect()
}

impl HttpAgent {
    /// Posts the inject; meanwhile, executes the tool calls the service makes on the run's
    /// MCP endpoint (on this thread, the one that holds the turn's world).
    fn inject(
        &self,
        body: &Value,
        ctx: &mut TurnCtx<'_>,
    ) -> (Result<Value, TurnError>, Vec<ToolCall>, Vec<ModelCall>, Log) {
        let Some(run) = &self.run else {
            let mut log = Log::default();
            let resp = self.call("POST", "/inject", Some(body), ctx.timeout, &mut log);
            return (resp, Vec::new(), Vec::new(), log);
        };
        let timeout = ctx.timeout;
        let ((resp, log), calls, models) = mcp::during_turn(
            run,
            ctx,
            move || {
                let mut log = Log::default();
                let resp = self.call("POST", "/inject", Some(body), timeout, &mut log);
                (resp, log)
            },
            || {
                let e = TurnError::new(
                    TurnErrorKind::Transport,
                    "the inject request ended without an answer",
                );
                (Err(e), Log::default())
            },
            |(resp, _)| resp.as_ref().err().and_then(mcp::cut_by),
        );
        (resp, calls, models, log)
    }
}

impl AgentHandle for HttpAgent {
    fn reset_state(&mut self) -> Result<(), RuntimeError> {
        self.call_ok(
            "POST",
            "/reset",
            Some(&json!({"scenario_id": self.scenario_id, "lane": self.lane})),
        )
        .map_err(|e| RuntimeError(e.message))
    }

    fn begin_run(&mut self, run: &RunInfo) -> Result<(), RuntimeError> {
        self.run = None;
        self.run_id = Some(run.run_id.clone());
        if let Some(door) = &self.door {
            self.run = Some(
                door.start_run(self.tools.clone())
                    .map_err(|e| RuntimeError(e.to_string()))?,
            );
        }
        Ok(())
    }

    fn end_run(&mut self) -> RunEnd {
        let refused = self.take_refused();
        let mut model_calls = std::mem::take(&mut self.outside_models);
        if let Some(run) = self.run.take() {
            run.cut_model_calls(mcp::RUN_ENDED_FIRST);
            model_calls.extend(run.take_model_calls());
        }
        self.run_id = None;
        RunEnd {
            refused,
            model_calls,
            ..RunEnd::default()
        }
    }

    fn take_refused(&mut self) -> Vec<super::RefusedCall> {
        self.run
            .as_ref()
            .map(McpRun::take_refused)
            .unwrap_or_default()
    }

    fn send(&mut self, session_id: &str, text: &str, mut ctx: TurnCtx<'_>) -> Reply {
        let mut body = json!({
            "session_id": session_id,
            "scenario_id": self.scenario_id,
            "turn": ctx.index,
            "text": text,
            "lane": self.lane,
        });
        if let Some(id) = &self.run_id {
            body["run_id"] = json!(id);
        }
        for (name, value) in &self.told {
            body[*name] = value.clone();
        }
        if let Some(run) = &self.run {
            if run.serves_mcp() {
                body["mcp_url"] = json!(run.url());
            }
            if let Some(url) = run.model_url() {
                body["model_url"] = json!(url);
                body["model_token"] = json!(run.model_token());
            }
        }
        let (resp, mcp_calls, models, log) = self.inject(&body, &mut ctx);
        let url = format!("{}/inject", self.base);
        let protocol = |message: String, mut calls: Vec<ToolCall>, reported: Vec<ToolCall>| {
            calls.extend(reported);
            Reply::failed(TurnErrorKind::Protocol, message, calls)
        };
        let reply = match resp {
            Err(e) => Reply {
                error: Some(e),
                tool_calls: mcp_calls,
                ..Reply::default()
            },
            Ok(resp) => {
                match parse_tool_calls(ctx.index, mcp_calls.len(), resp.get("tool_calls")) {
                    Err(e) => protocol(format!("POST {url}: {e}"), mcp_calls, Vec::new()),
                    Ok(reported) => match (
                        resp.get("session_id").and_then(Value::as_str),
                        resp.get("reply"),
                    ) {
                        (Some(s), _) if s != session_id => protocol(
                            format!("POST {url}: answered in session {s:?}, not {session_id:?}"),
                            mcp_calls,
                            reported,
                        ),
                        (_, Some(Value::String(r))) => {
                            let mut calls = mcp_calls;
                            calls.extend(reported);
                            Reply::text(r.clone(), calls)
                        }
                        _ => protocol(
                            format!(
                                "POST {url}: response has no string `reply`: {}",
                                crate::score::excerpt(&resp.to_string())
                            ),
                            mcp_calls,
                            reported,
                        ),
                    },
                }
            }
        };
        let mut reply = reply.with_log(log);
        reply.model_calls = models;
        reply
    }

    fn probe_state(&mut self) -> Option<Value> {
        self.call("GET", "/state", None, self.timeout, &mut Log::default())
            .ok()
    }

    fn teardown(&mut self) -> Result<(), RuntimeError> {
        self.run = None;
        Ok(())
    }
}
