//! The model side of agents: the model gateway of `process` agents, with an
//! unmodified openai-agents (pip) agent and fakellm (pip, a third-party OpenAI-compatible
//! mock) as the upstream; the gateway's bounds (its token, its routes, the upstream's key);
//! and what the `openai` runtime records of its own model calls.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::{Value, json};

use crate::harness::{
    PATIENCE, TestServer, Wt, agent_file, agent_python, command_agent, files, poll_until, scores,
    tmp, traces, workspace,
};

/// `wt run` of one `order-status` run on `agent` into `out` (a builder: add settings, then
/// run).
fn order_status(dir: &Path, out: impl AsRef<Path>, agent: &Path) -> Wt {
    Wt::new(dir)
        .args(["run", "--runs", "1", "--filter", "order-status", "--out"])
        .arg(out.as_ref())
        .arg("--agent")
        .arg(agent)
}

/// A pack of one scenario, `ask`, run twice and judged on its reply alone.
fn ask_pack(dir: &Path) -> PathBuf {
    crate::harness::write_pack(
        dir,
        &[(
            "ask.toml",
            "id = \"ask\"\nruns = 2\nturns = [\"where is it?\"]\n[expect.outcome]\nreply_contains = [\"shipped\"]\n",
        )],
    )
}

/// `wt run` of `pack` on `agent` into `out`.
fn run_pack(dir: &Path, out: &Path, pack: &Path, agent: &Path) -> crate::harness::Run {
    Wt::new(dir)
        .args(["run", "--out"])
        .arg(out)
        .arg("--pack")
        .arg(pack)
        .arg("--agent")
        .arg(agent)
        .run()
}

/// A request's header, by name in any case.
fn header_of(req: &crate::harness::Seen, name: &str) -> Option<String> {
    req.headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.clone())
}

/// The key the upstream takes; the agent must never see it, and no file may hold it.
const UPSTREAM_KEY: &str = "sk-upstream-7d41c0ffee93a5";

/// fakellm serving `rules` (its YAML) on a port of its own; killed when dropped.
pub(crate) struct FakeLlm {
    child: Child,
    pub(crate) base: String,
}

impl FakeLlm {
    pub(crate) fn start(dir: &Path, rules: &str) -> FakeLlm {
        let config = dir.join("fakellm.yaml");
        std::fs::write(&config, rules).unwrap();
        let port = crate::harness::dead_port();
        // The venv's script run by the venv's Python, not through its `#!` line: a venv the
        // harness built aside and renamed into place keeps the aside path there.
        let python = agent_python();
        let fakellm = python.parent().unwrap().join("fakellm");
        let child = Command::new(python)
            .arg(&fakellm)
            .args(["serve", "--host", "127.0.0.1", "--port", &port.to_string()])
            .arg("--config")
            .arg(&config)
            .env("FAKELLM_CONFIG", &config)
            .current_dir(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", fakellm.display()));
        let llm = FakeLlm {
            child,
            base: format!("http://127.0.0.1:{port}"),
        };
        assert!(
            poll_until(PATIENCE, || llm.stats().is_some()),
            "fakellm did not come up on {}",
            llm.base
        );
        llm
    }

    /// fakellm's own log: its last requests, newest first.
    pub(crate) fn stats(&self) -> Option<Value> {
        let text = reqwest::blocking::get(format!("{}/_fakellm/stats", self.base))
            .ok()?
            .text()
            .ok()?;
        serde_json::from_str(&text).ok()
    }
}

impl Drop for FakeLlm {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Answers with a tool call first, and once the conversation holds the tool's answer (the
/// message before the last is the assistant's tool call), with the reply.
const SUPPORT_RULES: &str = r#"
rules:
  - name: answer
    when:
      previous_message_role: assistant
    respond:
      content: "Your order 1234 has shipped: the kettle is on its way."
  - name: lookup
    when:
      messages_contain: "order"
    respond:
      tool_calls:
        - name: lookup_order
          arguments: {order_id: "1234"}
"#;

fn openai_agents_agent(dir: &Path, upstream: &str, stream: bool) -> PathBuf {
    let mut command = vec![
        agent_python().display().to_string(),
        workspace()
            .join("tests/agents/openai_agents_agent.py")
            .display()
            .to_string(),
    ];
    if stream {
        command.push("--stream".into());
    }
    command_agent(
        dir,
        if stream { "streamed" } else { "plain" },
        &command,
        &format!(
            "turn_timeout_s = 60.0\n\n[gateway]\nendpoint = \"{upstream}/v1\"\napi_key_env = \"UPSTREAM_KEY\"\nopenai_env = true\n\n[pricing]\ninput = 0.15\noutput = 0.60\n"
        ),
    )
}

#[test]
fn an_unmodified_openai_agents_agent_is_recorded_call_for_call_through_the_gateway() {
    for stream in [false, true] {
        let dir = tmp();
        let llm = FakeLlm::start(dir.path(), SUPPORT_RULES);
        let agent = openai_agents_agent(dir.path(), &llm.base, stream);
        let out = dir.path().join("runs");
        // One agent process at a time: each imports the Agents SDK, seconds of CPU, and the
        // rest of the suite shares the machine.
        let r = Wt::new(dir.path())
            .args([
                "run",
                "--runs",
                "2",
                "--jobs",
                "1",
                "--filter",
                "order-status",
                "--out",
            ])
            .arg(&out)
            .arg("--agent")
            .arg(&agent)
            .env("UPSTREAM_KEY", UPSTREAM_KEY)
            .run();
        assert_eq!(r.code, 0, "stream={stream}: {r}");
        // fakellm's log, oldest first: one conversation per run (the agent names it after
        // the run's id, a header the gateway passes on).
        let stats = llm.stats().expect("fakellm answers");
        let mut log: Vec<Value> = stats["recent"].as_array().unwrap().clone();
        log.reverse();
        let all = traces(&out);
        assert_eq!(all.len(), 2);
        let mut tokens = 0u64;
        for t in &all {
            let run_id = t["run_id"].as_str().unwrap();
            let upstream: Vec<&Value> = log
                .iter()
                .filter(|e| e["conversation_id"] == run_id)
                .collect();
            let calls = t["evidence"]["model_calls"].as_array().unwrap();
            // The trace's model calls are fakellm's requests of that run, in order.
            assert_eq!(calls.len(), upstream.len(), "stream={stream}: {calls:#?}");
            assert_eq!(
                upstream
                    .iter()
                    .map(|e| e["matched_rule"].as_str().unwrap())
                    .collect::<Vec<_>>(),
                ["lookup", "answer"]
            );
            for (call, seen) in calls.iter().zip(&upstream) {
                assert_eq!(call["source"], "gateway");
                assert_eq!(call["model"], seen["model"]);
                assert_eq!(call["stream"], seen["stream"]);
                assert_eq!(call["stream"], json!(stream));
                assert_eq!(call["turn"], 0);
                assert!(call["error"].is_null(), "{call}");
            }
            // Interleaved with the tool calls: the model asked, the tool ran, the model
            // answered.
            assert_eq!(calls[0]["after_tool_calls"], 0);
            assert_eq!(calls[0]["finish_reason"], "tool_calls");
            assert_eq!(
                calls[0]["response"]["tool_calls"][0]["function"]["name"],
                "lookup_order"
            );
            assert_eq!(calls[1]["after_tool_calls"], 1);
            assert_eq!(calls[1]["finish_reason"], "stop");
            let tools = t["evidence"]["tool_calls"].as_array().unwrap();
            assert_eq!(tools.len(), 1);
            assert_eq!(tools[0]["name"], "lookup_order");
            assert!(tools[0]["error"].is_null());
            // The second request carried the tool's answer.
            let asked = calls[1]["messages"].to_string();
            assert!(asked.contains("kettle"), "{asked}");
            assert_eq!(
                t["turns"][0]["reply"],
                "Your order 1234 has shipped: the kettle is on its way."
            );
            if stream {
                // fakellm's streams report no usage: none is made up.
                assert!(calls.iter().all(|c| c["usage"].is_null()));
                assert!(calls.iter().all(|c| c["ttft_ms"].is_u64()));
            } else {
                // fakellm counts the conversation's tokens: the second call's prompt is the
                // first's plus the tool's exchange.
                let prompt = |c: &Value| c["usage"]["prompt_tokens"].as_u64().unwrap();
                assert!(prompt(&calls[0]) > 0);
                assert!(prompt(&calls[1]) > prompt(&calls[0]));
                tokens += calls
                    .iter()
                    .map(|c| prompt(c) + c["usage"]["completion_tokens"].as_u64().unwrap())
                    .sum::<u64>();
            }
        }
        let scores = scores(&out);
        for s in &scores {
            assert_eq!(s["verdict"], "PASS", "{s}");
            let u = &s["usage"];
            assert_eq!(u["model_calls"], 2, "{s}");
            if stream {
                // No usage reported, so no cost: a price of what was not counted is false.
                assert_eq!(u["unreported"], 2);
                assert!(u["cost_usd"].is_null(), "{u}");
            } else {
                assert_eq!(u["unreported"], 0);
                assert!(u["cost_usd"].as_f64().unwrap() > 0.0, "{u}");
            }
        }
        if !stream {
            let summed: u64 = scores
                .iter()
                .map(|s| {
                    s["usage"]["tokens"]["prompt_tokens"].as_u64().unwrap()
                        + s["usage"]["tokens"]["completion_tokens"].as_u64().unwrap()
                })
                .sum();
            assert_eq!(summed, tokens);
            // The journal says it too, a line per model call.
            let journal = crate::harness::journal(&out);
            assert_eq!(
                journal
                    .iter()
                    .filter(|e| e["event"] == "ModelCalled")
                    .count(),
                4
            );
            // `wt report` adds the tokens up per scenario and for the sweep.
            let report = Wt::new(dir.path())
                .args(["report", "--format", "json"])
                .arg(&out)
                .run();
            assert_eq!(report.code, 0, "{report}");
            let doc: Value = serde_json::from_str(&report.stdout).unwrap();
            assert_eq!(doc["usage"]["model_calls"], 4, "{}", report.stdout);
            assert_eq!(
                doc["usage"]["tokens"]["prompt_tokens"].as_u64().unwrap()
                    + doc["usage"]["tokens"]["completion_tokens"]
                        .as_u64()
                        .unwrap(),
                tokens
            );
        }
        for (name, bytes) in files(&out) {
            assert!(
                !String::from_utf8_lossy(&bytes).contains(UPSTREAM_KEY),
                "{name} holds the upstream's key"
            );
        }
    }
}

/// A one-shot agent that calls its gateway the ways an agent might, and says what it got.
const PROBE: &str = r#"
import json, os, sys, urllib.request, urllib.error
url, token = os.environ["WT_MODEL_URL"], os.environ["WT_MODEL_TOKEN"]
def post(path, auth, body):
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(), method="POST",
        headers={"Authorization": "Bearer " + auth, "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")
ok = post("/chat/completions", token, {"model": "m-1", "messages": [{"role": "user", "content": sys.argv[1]}]})
wrong = post("/chat/completions", "sk-guess", {"model": "m-1", "messages": []})
other = post("/embeddings", token, {"model": "m-1", "input": "x"})
seen = sorted(k for k, v in os.environ.items() if "upstream" in v.lower() or k == "UPSTREAM_KEY")
told = {k: v for k, v in os.environ.items() if k.startswith("WT_AGENT_")}
print(json.dumps({"result": ok[1]["choices"][0]["message"]["content"], "told": told,
    "statuses": [ok[0], wrong[0], other[0]], "seen": seen, "base": os.environ.get("OPENAI_BASE_URL")}))
"#;

#[test]
fn the_gateway_keeps_the_upstreams_key_and_takes_only_its_runs_token() {
    let dir = tmp();
    // The upstream: cut off by max_tokens, with usage.
    let upstream = TestServer::start(|_| {
        (
            200,
            json!({
                "id": "chatcmpl-9", "model": "m-1-served", "system_fingerprint": "fp_1",
                "choices": [{"index": 0, "finish_reason": "length",
                             "message": {"role": "assistant", "content": "Your order has sh"}}],
                "usage": {"prompt_tokens": 12, "completion_tokens": 5,
                          "completion_tokens_details": {"reasoning_tokens": 2}}
            })
            .to_string(),
        )
    });
    let agent = command_agent(
        dir.path(),
        "probe",
        &[
            agent_python().display().to_string(),
            "-c".into(),
            PROBE.into(),
            "{input}".into(),
        ],
        &format!(
            "model = \"gpt-probe\"\nsoul = \"Be kind.\"\nturn_timeout_s = 60.0\n\n[sampling]\ntemperature = 0.25\n\n[gateway]\nendpoint = \"{}/v1\"\napi_key_env = \"UPSTREAM_KEY\"\n",
            upstream.base
        ),
    );
    let out = dir.path().join("runs");
    let r = order_status(dir.path(), &out, &agent)
        .env("UPSTREAM_KEY", UPSTREAM_KEY)
        .run();
    assert_eq!(r.code, 1, "{r}");
    let seen = upstream.seen();
    // Only the call with the run's token went through, with the upstream's key.
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].url, "/v1/chat/completions");
    let auth: Vec<&str> = seen[0]
        .headers
        .iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case("authorization"))
        .map(|(_, v)| v.as_str())
        .collect();
    assert_eq!(auth, [format!("Bearer {UPSTREAM_KEY}").as_str()]);
    let t = &traces(&out)[0];
    // What the agent saw: 200 with its token, 401 with another, 404 off the one route; no
    // trace of the key in its environment, and no OPENAI_BASE_URL unless opted in.
    let reply = t["turns"][0]["reply"].as_str().unwrap_or_default();
    let probe: Value = serde_json::from_str(reply).unwrap_or_else(|e| panic!("{e}: {t}"));
    assert_eq!(probe["statuses"], json!([200, 401, 404]), "{probe}");
    assert_eq!(probe["seen"], json!([]), "{probe}");
    assert!(probe["base"].is_null(), "{probe}");
    assert_eq!(probe["result"], "Your order has sh");
    // The agent config's model, soul and sampling reach the agent.
    assert_eq!(
        probe["told"],
        json!({"WT_AGENT_MODEL": "gpt-probe", "WT_AGENT_SOUL": "Be kind.",
               "WT_AGENT_SAMPLING": "{\"temperature\":0.25}"})
    );
    // One model call recorded: the one that reached the upstream.
    let calls = t["evidence"]["model_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 1, "{calls:#?}");
    let c = &calls[0];
    assert_eq!(c["served_model"], "m-1-served");
    assert_eq!(c["response_id"], "chatcmpl-9");
    assert_eq!(c["system_fingerprint"], "fp_1");
    assert_eq!(c["usage"]["prompt_tokens"], 12);
    assert_eq!(c["usage"]["reasoning_tokens"], 2);
    assert_eq!(c["finish_reason"], "length");
    // A reply the model stopped writing at its token limit is not evidence to trust.
    let s = &scores(&out)[0];
    assert_eq!(s["verdict"], "FAIL");
    assert!(
        s["integrity"]["detail"]
            .to_string()
            .contains("truncated by max_tokens"),
        "{s}"
    );
    assert!(!(r.stdout.clone() + &r.stderr).contains(UPSTREAM_KEY));
    for (name, bytes) in files(&out) {
        assert!(
            !String::from_utf8_lossy(&bytes).contains(UPSTREAM_KEY),
            "{name} holds the upstream's key"
        );
    }
}

#[test]
fn the_openai_runtime_records_each_model_call_its_refusals_and_its_cut_replies() {
    let dir = tmp();
    let server = TestServer::start(|s| {
        let body: Value = serde_json::from_str(&s.body).unwrap();
        let asked = body["messages"].to_string();
        let message = if asked.contains("refund") {
            json!({"role": "assistant", "content": null, "refusal": "I can't help with that."})
        } else {
            json!({"role": "assistant", "content": "Order 1234 has shipped."})
        };
        (
            200,
            json!({"id": "r-1", "model": "served-1",
                   "choices": [{"index": 0, "finish_reason": "stop", "message": message}],
                   "usage": {"prompt_tokens": 1000, "completion_tokens": 100,
                             "prompt_tokens_details": {"cached_tokens": 400}}})
            .to_string(),
        )
    });
    let agent = agent_file(
        dir.path(),
        "oa.toml",
        &format!(
            "label = \"oa\"\nruntime = \"openai\"\nmodel = \"m\"\nendpoint = \"{}/v1?api-version=2024-10\"\n\n[pricing]\ninput = 2.0\noutput = 8.0\ncached = 0.5\n",
            server.base
        ),
    );
    let out = dir.path().join("runs");
    let r = Wt::new(dir.path())
        .args(["run", "--runs", "1", "--out"])
        .arg(&out)
        .arg("--agent")
        .arg(&agent)
        .run();
    assert!(r.code == 0 || r.code == 1, "{r}");
    // The query string stays where Azure wants it.
    assert!(
        server
            .seen()
            .iter()
            .all(|s| s.url == "/v1/chat/completions?api-version=2024-10"),
        "{:?}",
        server.seen().iter().map(|s| &s.url).collect::<Vec<_>>()
    );
    let all = traces(&out);
    let refused = all
        .iter()
        .find(|t| t["scenario_id"] == "refund-damaged")
        .expect("the refund scenario ran");
    // The refusal is the reply a user would read, and the call says it was a refusal.
    assert_eq!(refused["turns"][0]["reply"], "I can't help with that.");
    let call = &refused["evidence"]["model_calls"][0];
    assert_eq!(call["refusal"], "I can't help with that.");
    assert_eq!(call["source"], "openai");
    assert_eq!(call["served_model"], "served-1");
    assert_eq!(call["usage"]["cached_tokens"], 400);
    for s in scores(&out) {
        let calls = s["usage"]["model_calls"].as_f64().unwrap();
        // 600 fresh input tokens at $2, 400 cached at $0.50, 100 output at $8, per million.
        let per_call = (600.0 * 2.0 + 400.0 * 0.5 + 100.0 * 8.0) / 1e6;
        let cost = s["usage"]["cost_usd"].as_f64().unwrap();
        assert!((cost - per_call * calls).abs() < 1e-12, "{s}");
    }
}

#[test]
fn gateway_settings_that_cannot_work_are_refused_at_load() {
    let dir = tmp();
    let cases = [
        (
            "[pricing]\ninput = 1.0\noutput = 2.0\n",
            "`pricing` has no effect without `[gateway]`",
        ),
        (
            "api_key_env = \"K\"\n[gateway]\nendpoint = \"http://127.0.0.1:9/v1\"\napi_key_env = \"K\"\n",
            "name the same variable K",
        ),
        (
            "[gateway]\nendpoint = \"http://127.0.0.1:9/v1#frag\"\n",
            "has a fragment",
        ),
        (
            "env = { OPENAI_API_KEY = \"x\" }\n[gateway]\nendpoint = \"http://127.0.0.1:9/v1\"\nopenai_env = true\n",
            "OPENAI_API_KEY is set by the gateway",
        ),
        (
            "[gateway]\nendpoint = \"http://127.0.0.1:9/v1\"\nopenai_envs = true\n",
            "unknown field `openai_envs`",
        ),
        (
            "[gateway]\nendpoint = \"http://127.0.0.1:9/v1\"\n[pricing]\ninput = -1.0\noutput = 2.0\n",
            "`pricing.input` must be a price of zero or more",
        ),
    ];
    for (extra, says) in cases {
        let agent = command_agent(dir.path(), "bad", &["/bin/true".into()], extra);
        let r = Wt::new(dir.path())
            .args(["run", "--runs", "1", "--agent"])
            .arg(&agent)
            .env("K", "k")
            .run();
        assert_eq!(r.code, 2, "{extra}: {r}");
        assert!(r.stderr.contains(says), "{extra}: {r}");
        assert_eq!(r.stderr.trim().lines().count(), 1, "{extra}: {r}");
    }
}

#[test]
fn an_http_agent_gets_its_runs_gateway_lane_and_run_id_in_each_inject() {
    let dir = tmp();
    let upstream = TestServer::start(|_| {
        (
            200,
            json!({"id": "c-1", "model": "m-served",
                   "choices": [{"index": 0, "finish_reason": "stop",
                                "message": {"role": "assistant", "content": "It has shipped."}}],
                   "usage": {"prompt_tokens": 9, "completion_tokens": 4}})
            .to_string(),
        )
    });
    // The agent service asks its model through the run's gateway during each inject.
    let service = TestServer::start(|s| {
        if s.url != "/inject" {
            return (200, "{}".into());
        }
        let inject: Value = serde_json::from_str(&s.body).unwrap();
        let url = format!("{}/chat/completions", inject["model_url"].as_str().unwrap());
        let answer = reqwest::blocking::Client::new()
            .post(url)
            .bearer_auth(inject["model_token"].as_str().unwrap())
            .header("content-type", "application/json")
            .body(
                json!({"model": "m", "messages": [{"role": "user", "content": inject["text"]}]})
                    .to_string(),
            )
            .send()
            .and_then(|r| r.text())
            .unwrap_or_default();
        let answer: Value = serde_json::from_str(&answer).unwrap_or(Value::Null);
        let reply = answer["choices"][0]["message"]["content"]
            .as_str()
            .unwrap_or("no answer")
            .to_owned();
        (
            200,
            json!({"session_id": inject["session_id"], "reply": reply}).to_string(),
        )
    });
    let pack = ask_pack(dir.path());
    let agent = agent_file(
        dir.path(),
        "svc.toml",
        &format!(
            "label = \"svc\"\nruntime = \"http\"\nmodel = \"m-x\"\nendpoint = \"{}\"\nmcp = false\n\n[sampling]\nseed = 7\n\n[gateway]\nendpoint = \"{}/v1\"\n",
            service.base, upstream.base
        ),
    );
    let out = dir.path().join("runs");
    let r = run_pack(dir.path(), &out, &pack, &agent);
    assert_eq!(r.code, 0, "{r}");
    let injects: Vec<Value> = service
        .seen()
        .iter()
        .filter(|s| s.url == "/inject")
        .map(|s| serde_json::from_str(&s.body).unwrap())
        .collect();
    assert_eq!(injects.len(), 2);
    let all = traces(&out);
    for i in &injects {
        assert_eq!(i["lane"], 0, "{i}");
        assert_eq!(i["model"], "m-x", "{i}");
        assert_eq!(i["sampling"], json!({"seed": 7}), "{i}");
        assert!(i.get("soul").is_none(), "no soul was set: {i}");
        assert!(i.get("mcp_url").is_none(), "mcp = false: {i}");
        assert!(
            all.iter().any(|t| t["run_id"] == i["run_id"]),
            "{i} names no run"
        );
    }
    // Each run its own gateway address and token.
    assert_ne!(injects[0]["model_url"], injects[1]["model_url"]);
    assert_ne!(injects[0]["model_token"], injects[1]["model_token"]);
    for t in &all {
        let calls = t["evidence"]["model_calls"].as_array().unwrap();
        assert_eq!(calls.len(), 1, "{t}");
        assert_eq!(calls[0]["usage"]["completion_tokens"], 4);
        assert_eq!(calls[0]["served_model"], "m-served");
    }
}

#[test]
fn the_openai_runtime_speaks_the_dialects_endpoints_want() {
    let dir = tmp();
    let server = TestServer::start(|_| {
        (
            200,
            json!({"choices": [{"index": 0, "finish_reason": "stop",
                   "message": {"role": "assistant", "content": "Order 1234 has shipped."}}]})
            .to_string(),
        )
    });
    // Azure's shape: the key in `api-key`, a header from the environment, extra body fields.
    let agent = agent_file(
        dir.path(),
        "azure.toml",
        &format!(
            "label = \"az\"\nruntime = \"openai\"\nmodel = \"m\"\nendpoint = \"{}/openai/v1?api-version=2024-10\"\napi_key_env = \"AZ_KEY\"\napi_key_header = \"api-key\"\nheaders = {{ \"OpenAI-Organization\" = \"org-7\", \"X-Tenant-Token\" = {{ env = \"TENANT\" }} }}\n\n[body]\ntool_choice = \"auto\"\nstop = [\"END\"]\nreasoning_effort = \"low\"\n",
            server.base
        ),
    );
    let out = dir.path().join("runs");
    let r = order_status(dir.path(), &out, &agent)
        .env("AZ_KEY", "az-secret-key-5521")
        .env("TENANT", "tenant-secret-8812")
        .run();
    assert!(r.code == 0 || r.code == 1, "{r}");
    let seen = server.seen();
    assert!(!seen.is_empty());
    let req = &seen[0];
    let header = |name: &str| header_of(req, name);
    assert_eq!(req.url, "/openai/v1/chat/completions?api-version=2024-10");
    assert_eq!(header("api-key").as_deref(), Some("az-secret-key-5521"));
    assert_eq!(header("authorization"), None);
    assert_eq!(header("openai-organization").as_deref(), Some("org-7"));
    assert_eq!(
        header("x-tenant-token").as_deref(),
        Some("tenant-secret-8812")
    );
    let body: Value = serde_json::from_str(&req.body).unwrap();
    assert_eq!(body["tool_choice"], "auto");
    assert_eq!(body["stop"], json!(["END"]));
    assert_eq!(body["reasoning_effort"], "low");
    assert_eq!(body["model"], "m");
    for (name, bytes) in files(&out) {
        let text = String::from_utf8_lossy(&bytes);
        assert!(!text.contains("az-secret-key-5521"), "{name}");
        assert!(!text.contains("tenant-secret-8812"), "{name}");
    }

    // No endpoint or key in the config: OPENAI_BASE_URL and OPENAI_API_KEY, as OpenAI's
    // clients read them.
    let bare = agent_file(
        dir.path(),
        "bare.toml",
        "label = \"bare\"\nruntime = \"openai\"\nmodel = \"m\"\n",
    );
    let before = server.seen().len();
    let r = Wt::new(dir.path())
        .args(["run", "--runs", "1", "--filter", "order-status", "--out"])
        .arg(dir.path().join("bare-runs"))
        .arg("--agent")
        .arg(&bare)
        .env("OPENAI_BASE_URL", format!("{}/v1", server.base))
        .env("OPENAI_API_KEY", "sk-env-key-3390")
        .run();
    assert!(r.code == 0 || r.code == 1, "{r}");
    let seen = server.seen();
    let req = &seen[before];
    assert_eq!(req.url, "/v1/chat/completions");
    assert!(
        req.headers
            .iter()
            .any(|(k, v)| k.eq_ignore_ascii_case("authorization") && v == "Bearer sk-env-key-3390")
    );

    // What cannot work is refused before anything is sent.
    for (extra, says) in [
        (
            "[body]\nmessages = []\n",
            "`body.messages` is set by wt itself",
        ),
        (
            "[sampling]\ntemperature = 0.1\n[body]\ntemperature = 0.2\n",
            "both set `temperature`",
        ),
        (
            "headers = { \"Authorization\" = \"x\" }\n",
            "Authorization is set by wt itself",
        ),
        ("api_key_header = \"api-key\"\n", "no key is configured"),
    ] {
        let bad = agent_file(
            dir.path(),
            "bad.toml",
            &format!(
                "label = \"bad\"\nruntime = \"openai\"\nmodel = \"m\"\nendpoint = \"{}/v1\"\n{extra}",
                server.base
            ),
        );
        let before = server.seen().len();
        let r = Wt::new(dir.path())
            .args(["run", "--runs", "1", "--agent"])
            .arg(&bad)
            .run();
        assert_eq!(r.code, 2, "{extra}: {r}");
        assert!(r.stderr.contains(says), "{extra}: {r}");
        assert_eq!(server.seen().len(), before, "{extra}: something was sent");
    }
}

#[test]
fn a_redirect_of_a_post_is_an_error_that_names_it_never_a_silent_get() {
    let dir = tmp();
    let target = TestServer::start(|_| (200, "{}".into()));
    let location = format!("{}/elsewhere", target.base);
    let server = TestServer::start_with_headers(move |_| {
        (
            302,
            vec![("Location".into(), location.clone())],
            String::new(),
        )
    });
    let agent = agent_file(
        dir.path(),
        "moved.toml",
        &format!(
            "label = \"moved\"\nruntime = \"openai\"\nmodel = \"m\"\nendpoint = \"{}/v1\"\nretries = 0\n",
            server.base
        ),
    );
    let out = dir.path().join("runs");
    let r = order_status(dir.path(), &out, &agent).run();
    assert_eq!(r.code, 3, "{r}");
    assert!(target.seen().is_empty(), "the redirect was followed");
    let error = traces(&out)[0]["turns"][0]["error"].to_string();
    assert!(error.contains("HTTP 302, a redirect to"), "{error}");
    assert!(error.contains("/elsewhere"), "{error}");
}

/// The demo pack's three flows, as fakellm answers them in Anthropic's shape: each step's
/// text names the step, and the rule for the next step matches the message before the last
/// (the model's own, with its tool use).
const DEMO_RULES: &str = r#"
rules:
  - name: refunded
    when: {previous_message_contains: "Issuing the refund"}
    respond: {content: "I've issued a refund for order 5678."}
  - name: refund
    when: {previous_message_contains: "Looking up order 5678"}
    respond:
      content: "Issuing the refund."
      tool_calls: [{name: issue_refund, arguments: {order_id: "5678", reason: "damaged"}}]
  - name: ticketed
    when: {previous_message_contains: "Opening a ticket"}
    respond: {content: "I've opened a ticket: a colleague will contact you."}
  - name: ticket
    when: {previous_message_contains: "still processing"}
    respond:
      content: "Opening a ticket."
      tool_calls: [{name: create_ticket, arguments: {order_id: "9012", summary: "Customer asks for a human about order 9012"}}]
  - name: processing
    when: {previous_message_contains: "Looking up order 9012"}
    respond: {content: "Order 9012 is still processing. How can I help?"}
  - name: shipped
    when: {previous_message_contains: "Looking up order 1234"}
    respond: {content: "Order 1234 has shipped."}
  - name: lookup-5678
    when: {messages_contain: "5678"}
    respond:
      content: "Looking up order 5678."
      tool_calls: [{name: lookup_order, arguments: {order_id: "5678"}}]
  - name: lookup-9012
    when: {messages_contain: "9012"}
    respond:
      content: "Looking up order 9012."
      tool_calls: [{name: lookup_order, arguments: {order_id: "9012"}}]
  - name: lookup-1234
    when: {messages_contain: "1234"}
    respond:
      content: "Looking up order 1234."
      tool_calls: [{name: lookup_order, arguments: {order_id: "1234"}}]
"#;

#[test]
fn the_anthropic_runtime_passes_the_demo_pack_against_fakellm_and_records_each_message() {
    let dir = tmp();
    let llm = FakeLlm::start(dir.path(), DEMO_RULES);
    let agent = agent_file(
        dir.path(),
        "claude.toml",
        &format!(
            "label = \"claude\"\nruntime = \"anthropic\"\nmodel = \"claude-test\"\nendpoint = \"{}/v1\"\napi_key_env = \"ANTHROPIC_KEY\"\n\n[pricing]\ninput = 3.0\noutput = 15.0\n",
            llm.base
        ),
    );
    let out = dir.path().join("runs");
    let r = Wt::new(dir.path())
        .args(["run", "--out"])
        .arg(&out)
        .arg("--agent")
        .arg(&agent)
        .env("ANTHROPIC_KEY", "sk-ant-test-4471")
        .run();
    assert_eq!(r.code, 0, "{r}");
    let all = traces(&out);
    assert_eq!(all.len(), 6);
    let stats = llm.stats().unwrap();
    let recorded: usize = all
        .iter()
        .map(|t| t["evidence"]["model_calls"].as_array().unwrap().len())
        .sum();
    // Every request fakellm answered is a model call in a trace, on its Anthropic door.
    assert_eq!(stats["total_requests"], recorded);
    assert!(
        stats["recent"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["api"] == "anthropic" && e["model"] == "claude-test")
    );
    for t in &all {
        let calls = t["evidence"]["model_calls"].as_array().unwrap();
        let tools = t["evidence"]["tool_calls"].as_array().unwrap();
        // A tool use per call but the last; each call after the tool calls before it.
        assert_eq!(
            calls.len(),
            tools.len() + t["turns"].as_array().unwrap().len()
        );
        assert!(calls.iter().all(|c| c["source"] == "anthropic"));
        assert!(
            calls
                .iter()
                .all(|c| c["usage"]["prompt_tokens"].as_u64() > Some(0))
        );
        let reasons: Vec<&str> = calls
            .iter()
            .map(|c| c["finish_reason"].as_str().unwrap())
            .collect();
        assert!(
            reasons.iter().all(|r| ["tool_use", "end_turn"].contains(r)),
            "{reasons:?}"
        );
        assert_eq!(reasons.last(), Some(&"end_turn"));
    }
    for s in scores(&out) {
        assert_eq!(s["verdict"], "PASS", "{s}");
        assert!(s["usage"]["cost_usd"].as_f64().unwrap() > 0.0);
    }
}

#[test]
fn the_anthropic_runtime_sends_its_key_and_version_and_flags_a_cut_reply() {
    let dir = tmp();
    let server = TestServer::start(|_| {
        (
            200,
            json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-served",
                   "stop_reason": "max_tokens",
                   "content": [{"type": "text", "text": "Order 1234 has sh"}],
                   "usage": {"input_tokens": 20, "output_tokens": 8}})
            .to_string(),
        )
    });
    let agent = agent_file(
        dir.path(),
        "claude.toml",
        &format!(
            "label = \"claude\"\nruntime = \"anthropic\"\nmodel = \"claude-test\"\nsoul = \"Be brief.\"\nendpoint = \"{}/v1\"\n\n[sampling]\nmax_tokens = 8\n",
            server.base
        ),
    );
    let out = dir.path().join("runs");
    let r = order_status(dir.path(), &out, &agent)
        .env("ANTHROPIC_API_KEY", "sk-ant-env-9921")
        .run();
    assert_eq!(r.code, 1, "{r}");
    let req = &server.seen()[0];
    assert_eq!(req.url, "/v1/messages");
    let header = |name: &str| header_of(req, name);
    assert_eq!(header("x-api-key").as_deref(), Some("sk-ant-env-9921"));
    assert_eq!(header("anthropic-version").as_deref(), Some("2023-06-01"));
    assert_eq!(header("authorization"), None);
    let body: Value = serde_json::from_str(&req.body).unwrap();
    assert_eq!(body["max_tokens"], 8);
    assert_eq!(body["system"], "Be brief.");
    assert_eq!(body["tools"][0]["name"], "lookup_order");
    assert!(body["tools"][0]["input_schema"].is_object());
    let s = &scores(&out)[0];
    assert!(
        s["integrity"]["detail"]
            .to_string()
            .contains("truncated by max_tokens"),
        "{s}"
    );
    // A seed the Messages API would ignore is refused, not silently dropped.
    let seeded = agent_file(
        dir.path(),
        "seeded.toml",
        &format!(
            "label = \"s\"\nruntime = \"anthropic\"\nmodel = \"m\"\nendpoint = \"{}/v1\"\n[sampling]\nseed = 3\n",
            server.base
        ),
    );
    let r = Wt::new(dir.path())
        .args(["run", "--agent"])
        .arg(&seeded)
        .run();
    assert_eq!(r.code, 2, "{r}");
    assert!(r.stderr.contains("takes no seed"), "{r}");
}

/// A one-shot agent speaking Anthropic's Messages API to its gateway, as Anthropic's clients
/// find it (`ANTHROPIC_BASE_URL`, `ANTHROPIC_API_KEY`), once plain and once streamed.
const MESSAGES_PROBE: &str = r#"
import json, os, sys, urllib.request
base, key = os.environ["ANTHROPIC_BASE_URL"], os.environ["ANTHROPIC_API_KEY"]
out = []
for stream in (False, True):
    body = {"model": "claude-test", "max_tokens": 64, "stream": stream,
            "messages": [{"role": "user", "content": sys.argv[1]}],
            "tools": [{"name": "lookup_order", "input_schema": {"type": "object"}}]}
    req = urllib.request.Request(base + "/v1/messages", data=json.dumps(body).encode(), method="POST",
        headers={"x-api-key": key, "anthropic-version": "2023-06-01", "content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        out.append((r.status, r.headers.get("content-type"), len(r.read())))
print(json.dumps(out))
"#;

#[test]
fn the_gateway_serves_the_anthropic_shape_plain_and_streamed() {
    let dir = tmp();
    let llm = FakeLlm::start(dir.path(), DEMO_RULES);
    let agent = command_agent(
        dir.path(),
        "messages",
        &[
            agent_python().display().to_string(),
            "-c".into(),
            MESSAGES_PROBE.into(),
            "{input}".into(),
        ],
        &format!(
            "turn_timeout_s = 60.0\n\n[gateway]\nendpoint = \"{}/v1\"\napi_key_env = \"UPSTREAM_KEY\"\napi_key_header = \"x-api-key\"\nanthropic_env = true\n",
            llm.base
        ),
    );
    let out = dir.path().join("runs");
    let r = order_status(dir.path(), &out, &agent)
        .env("UPSTREAM_KEY", UPSTREAM_KEY)
        .run();
    assert!(r.code == 0 || r.code == 1, "{r}");
    let t = &traces(&out)[0];
    let reply: Value =
        serde_json::from_str(t["turns"][0]["reply"].as_str().unwrap_or("null")).unwrap();
    assert_eq!(reply[0][0], 200, "{reply}");
    assert!(
        reply[1][1]
            .as_str()
            .unwrap()
            .starts_with("text/event-stream"),
        "{reply}"
    );
    let stats = llm.stats().unwrap();
    assert_eq!(stats["total_requests"], 2);
    assert!(
        stats["recent"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["api"] == "anthropic")
    );
    let calls = t["evidence"]["model_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 2, "{calls:#?}");
    for (c, stream) in calls.iter().zip([false, true]) {
        assert_eq!(c["stream"], stream);
        assert_eq!(c["finish_reason"], "tool_use", "{c}");
        assert!(c["error"].is_null(), "{c}");
        // The tool use, assembled from the stream's pieces when streamed.
        let blocks = c["response"]["content"].as_array().unwrap();
        let tool = blocks.iter().find(|b| b["type"] == "tool_use").unwrap();
        assert_eq!(tool["name"], "lookup_order");
        assert_eq!(tool["input"], json!({"order_id": "1234"}), "{c}");
        assert!(c["usage"]["completion_tokens"].as_u64().unwrap() > 0, "{c}");
    }
    for (name, bytes) in files(&out) {
        assert!(
            !String::from_utf8_lossy(&bytes).contains(UPSTREAM_KEY),
            "{name} holds the upstream's key"
        );
    }
}

#[test]
fn compare_shows_what_a_change_did_to_tokens_and_cost_per_run() {
    let dir = tmp();
    let pack = ask_pack(dir.path());
    let side = |name: &str, prompt: u64| {
        let server = TestServer::start(move |_| {
            (
                200,
                json!({"choices": [{"index": 0, "finish_reason": "stop",
                       "message": {"role": "assistant", "content": "Order 1234 has shipped."}}],
                       "usage": {"prompt_tokens": prompt, "completion_tokens": 100}})
                .to_string(),
            )
        });
        let agent = agent_file(
            dir.path(),
            &format!("{name}.toml"),
            &format!(
                "label = \"{name}\"\nruntime = \"openai\"\nmodel = \"m\"\nendpoint = \"{}/v1\"\n\n[pricing]\ninput = 1.0\noutput = 10.0\n",
                server.base
            ),
        );
        let out = dir.path().join(name);
        let r = run_pack(dir.path(), &out, &pack, &agent);
        assert_eq!(r.code, 0, "{r}");
        out
    };
    let base = side("base", 1000);
    let new = side("new", 3000);
    let r = Wt::new(dir.path())
        .arg("compare")
        .arg(&base)
        .arg(&new)
        .run();
    assert_eq!(r.code, 0, "{r}");
    // One model call a run: 1,100 tokens and $0.002 against 3,100 and $0.004.
    assert!(
        r.stdout.contains(
            "model: tokens per run 1100 → 3100 (+181.8%) · cost per run $0.002 → $0.004 (+100.0%)"
        ),
        "{r}"
    );
    let json = Wt::new(dir.path())
        .args(["compare", "--format", "json"])
        .arg(&base)
        .arg(&new)
        .run();
    let doc: Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(doc["new"]["usage"]["tokens"]["prompt_tokens"], 6000);
    assert_eq!(doc["base"]["usage"]["model_calls"], 2);
}

/// A one-shot agent calling OpenAI's Responses API through its gateway, plain then streamed.
const RESPONSES_PROBE: &str = r#"
import json, os, sys, urllib.request
out = []
for stream in (False, True):
    body = {"model": "m-r", "stream": stream, "input": [{"role": "user", "content": sys.argv[1]}]}
    req = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/responses", data=json.dumps(body).encode(),
        method="POST", headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"], "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        out.append(r.status)
print(json.dumps(out))
"#;

#[test]
fn the_gateway_passes_the_responses_api_and_reads_its_usage_and_cut_replies() {
    let dir = tmp();
    let response = |status: &str| {
        json!({"id": "resp_1", "object": "response", "model": "m-r-served", "status": status,
               "incomplete_details": if status == "incomplete" { json!({"reason": "max_output_tokens"}) } else { Value::Null },
               "output": [{"type": "message", "role": "assistant",
                           "content": [{"type": "output_text", "text": "Order 1234 has sh"}]}],
               "usage": {"input_tokens": 30, "output_tokens": 7,
                         "input_tokens_details": {"cached_tokens": 10},
                         "output_tokens_details": {"reasoning_tokens": 3}}})
    };
    let upstream = TestServer::start_with_headers(move |s| {
        if s.body.contains("\"stream\":true") {
            let done = json!({"type": "response.completed", "response": response("incomplete")});
            let body = format!(
                "event: response.created\ndata: {{\"type\":\"response.created\",\"response\":{{\"id\":\"resp_1\",\"status\":\"in_progress\"}}}}\n\nevent: response.completed\ndata: {done}\n\n"
            );
            (
                200,
                vec![("Content-Type".into(), "text/event-stream".into())],
                body,
            )
        } else {
            (200, Vec::new(), response("completed").to_string())
        }
    });
    let agent = command_agent(
        dir.path(),
        "responses",
        &[
            agent_python().display().to_string(),
            "-c".into(),
            RESPONSES_PROBE.into(),
            "{input}".into(),
        ],
        &format!(
            "turn_timeout_s = 60.0\n\n[gateway]\nendpoint = \"{}/v1\"\nopenai_env = true\n",
            upstream.base
        ),
    );
    let out = dir.path().join("runs");
    let r = order_status(dir.path(), &out, &agent).run();
    assert_eq!(r.code, 1, "{r}");
    assert!(upstream.seen().iter().all(|s| s.url == "/v1/responses"));
    let t = &traces(&out)[0];
    assert_eq!(t["turns"][0]["reply"], "[200, 200]");
    let calls = t["evidence"]["model_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 2, "{calls:#?}");
    assert_eq!(calls[0]["finish_reason"], "stop");
    assert_eq!(
        calls[0]["messages"][0]["content"],
        "Hi, where is my order 1234?"
    );
    assert_eq!(calls[1]["stream"], true);
    assert_eq!(calls[1]["finish_reason"], "max_output_tokens");
    for c in calls {
        assert_eq!(c["served_model"], "m-r-served");
        assert_eq!(c["usage"]["prompt_tokens"], 30);
        assert_eq!(c["usage"]["cached_tokens"], 10);
        assert_eq!(c["usage"]["reasoning_tokens"], 3);
    }
    let s = &scores(&out)[0];
    assert!(
        s["integrity"]["detail"]
            .to_string()
            .contains("stopped with finish_reason `max_output_tokens`"),
        "{s}"
    );
}
