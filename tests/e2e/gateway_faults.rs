//! The model gateway when the upstream or the config misbehaves: calls cut off by the
//! turn's deadline, replies the gateway cannot read, a rate limit that outlasts the retries,
//! costs with and without usage, and the upstream's secrets kept from the agent by every
//! way into it.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use crate::harness::{
    TestServer, Wt, agent_python, command_agent, scores, tmp, traces, write_pack,
};

/// The key the upstream takes; no refusal message may show it.
const UPSTREAM_KEY: &str = "sk-upstream-5e1ab0d2c7f94e";

/// A one-shot agent that sends its gateway one chat completion (`MODE`: `plain`, or
/// `stream` with `stream: true`) and replies with the status and the raw body it got.
const CALLER: &str = r#"
import json, os, sys, urllib.request, urllib.error
stream = os.environ["MODE"] == "stream"
body = {"model": "m-1", "stream": stream, "messages": [{"role": "user", "content": sys.argv[1]}]}
req = urllib.request.Request(os.environ["WT_MODEL_URL"] + "/chat/completions",
    data=json.dumps(body).encode(), method="POST",
    headers={"Authorization": "Bearer " + os.environ["WT_MODEL_TOKEN"], "Content-Type": "application/json"})
try:
    with urllib.request.urlopen(req, timeout=120) as r:
        status, raw = r.status, r.read().decode()
except urllib.error.HTTPError as e:
    status, raw = e.code, e.read().decode()
print(json.dumps({"status": status, "raw": raw}))
"#;

/// A pack of one scenario of one turn, run once.
fn one_turn(dir: &Path) -> PathBuf {
    write_pack(
        dir,
        &[(
            "ask.toml",
            "id = \"ask\"\nruns = 1\nturns = [\"hi\"]\n[expect.outcome]\nreply_contains = [\"status\"]\n",
        )],
    )
}

/// A [`CALLER`] agent in `mode`, its gateway forwarding to `upstream`, priced.
fn caller(dir: &Path, name: &str, mode: &str, upstream: &str, turn_timeout_s: f64) -> PathBuf {
    command_agent(
        dir,
        name,
        &[
            agent_python().display().to_string(),
            "-c".into(),
            CALLER.into(),
            "{input}".into(),
        ],
        &format!(
            "turn_timeout_s = {turn_timeout_s:?}\nenv = {{ MODE = \"{mode}\" }}\n\n[gateway]\nendpoint = \"{upstream}/v1\"\napi_key_env = \"UPSTREAM_KEY\"\nretries = 1\n\n[pricing]\ninput = 0.3\noutput = 0.6\n"
        ),
    )
}

/// `wt run` of [`one_turn`] on `agent`; its trace and score.
fn run(dir: &Path, name: &str, agent: &Path) -> (crate::harness::Run, Value, Value) {
    let out = dir.join(format!("runs-{name}"));
    let r = Wt::new(dir)
        .args(["run", "--out"])
        .arg(&out)
        .arg("--pack")
        .arg(one_turn(dir))
        .arg("--agent")
        .arg(agent)
        .env("UPSTREAM_KEY", UPSTREAM_KEY)
        .run();
    // 3: a turn that timed out is an error, not a failure.
    assert!(matches!(r.code, 0 | 1 | 3), "{r}");
    (r, traces(&out).remove(0), scores(&out).remove(0))
}

/// What the agent replied: the status and body its call got.
fn got(trace: &Value) -> Value {
    let reply = trace["turns"][0]["reply"].as_str().unwrap_or_default();
    serde_json::from_str(reply).unwrap_or_else(|e| panic!("{e}: {trace}"))
}

/// The trace's model calls, exactly one expected.
fn the_call(trace: &Value) -> &Value {
    let calls = trace["evidence"]["model_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 1, "{calls:#?}");
    &calls[0]
}

/// An upstream on 127.0.0.1 that reads each request, then answers 200 with a server-sent
/// stream that never ends: one chunk every 50 ms until the connection goes.
fn endless_stream() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            std::thread::spawn(move || {
                let mut seen = Vec::new();
                let mut buf = [0u8; 4096];
                // The head, then as many body bytes as it says.
                while let Ok(n) = conn.read(&mut buf) {
                    if n == 0 {
                        return;
                    }
                    seen.extend_from_slice(&buf[..n]);
                    let text = String::from_utf8_lossy(&seen).to_string();
                    if let Some(end) = text.find("\r\n\r\n") {
                        let len = text[..end]
                            .lines()
                            .find_map(|l| {
                                let (k, v) = l.split_once(':')?;
                                k.eq_ignore_ascii_case("content-length")
                                    .then(|| v.trim().parse::<usize>().ok())?
                            })
                            .unwrap_or(0);
                        if seen.len() >= end + 4 + len {
                            break;
                        }
                    }
                }
                let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
                if conn.write_all(head.as_bytes()).is_err() {
                    return;
                }
                let tick = "data: {\"id\":\"c-endless\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"tick \"}}]}\n\n";
                while conn.write_all(tick.as_bytes()).is_ok() {
                    std::thread::sleep(Duration::from_millis(50));
                }
            });
        }
    });
    base
}

#[test]
fn a_model_call_the_turns_deadline_cuts_off_is_recorded_as_timed_out_with_what_arrived() {
    let dir = tmp();
    // An upstream that hangs past the turn's deadline, before any byte of its answer.
    let hangs = TestServer::start(|_| {
        std::thread::sleep(Duration::from_secs(30));
        (200, "{}".into())
    });
    let agent = caller(dir.path(), "hangs", "plain", &hangs.base, 2.0);
    let (_, t, _) = run(dir.path(), "hangs", &agent);
    assert_eq!(hangs.seen().len(), 1);
    assert_eq!(t["turns"][0]["error_kind"], "timeout", "{t}");
    let c = the_call(&t);
    assert_eq!(c["turn"], 0, "{c}");
    let error = c["error"].as_str().unwrap_or_default();
    assert!(error.starts_with("timed out"), "{c}");
    // A stream that never ends: recorded with what of it arrived.
    let endless = endless_stream();
    let agent = caller(dir.path(), "endless", "stream", &endless, 2.0);
    let (_, t, s) = run(dir.path(), "endless", &agent);
    let c = the_call(&t);
    assert_eq!(c["turn"], 0, "{c}");
    assert!(
        c["error"]
            .as_str()
            .unwrap_or_default()
            .starts_with("timed out"),
        "{c}"
    );
    assert!(c["stream"].as_bool().unwrap(), "{c}");
    assert_eq!(c["response_id"], "c-endless", "{c}");
    assert!(
        c["response"]["content"]
            .as_str()
            .unwrap_or_default()
            .starts_with("tick tick "),
        "{c}"
    );
    // It used tokens nobody reported: its cost is unknown, and says why.
    assert!(s["usage"]["cost_usd"].is_null(), "{s}");
    assert!(
        s["usage"]["cost_unknown"]
            .as_str()
            .unwrap_or_default()
            .contains("1 failed before its usage came"),
        "{s}"
    );
}

#[test]
fn an_unreadable_stream_is_an_error_and_a_persisting_429_reaches_the_agent_as_429() {
    let dir = tmp();
    let malformed = TestServer::start_with_headers(|_| {
        (
            200,
            vec![("content-type".into(), "text/event-stream".into())],
            concat!(
                "data: {\"id\":\"c-bad\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n",
                "data: {\"choices\": [oops\n\n",
                "data: [DONE]\n\n"
            )
            .into(),
        )
    });
    let agent = caller(dir.path(), "malformed", "stream", &malformed.base, 30.0);
    let (_, t, _) = run(dir.path(), "malformed", &agent);
    let c = the_call(&t);
    assert_eq!(c["response"]["content"], "hi", "{c}");
    let error = c["error"].as_str().unwrap_or_default();
    assert!(error.contains("malformed stream: 1 event(s)"), "{c}");
    // A stream that stops without its end is not a whole reply either.
    let unended = TestServer::start_with_headers(|_| {
        (
            200,
            vec![("content-type".into(), "text/event-stream".into())],
            "data: {\"id\":\"c-cut\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n".into(),
        )
    });
    let agent = caller(dir.path(), "unended", "stream", &unended.base, 30.0);
    let (_, t, _) = run(dir.path(), "unended", &agent);
    let error = the_call(&t)["error"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(error.contains("ended without `data: [DONE]`"), "{t}");
    // A rate limit that outlasts the retries: the agent gets the 429, not a 502.
    let limited =
        TestServer::start(|_| (429, json!({"error": {"message": "slow down"}}).to_string()));
    let agent = caller(dir.path(), "limited", "plain", &limited.base, 30.0);
    let (_, t, _) = run(dir.path(), "limited", &agent);
    assert_eq!(limited.seen().len(), 2, "one retry");
    assert_eq!(got(&t)["status"], 429, "{t}");
    let c = the_call(&t);
    assert!(
        c["error"].as_str().unwrap_or_default().contains("HTTP 429"),
        "{c}"
    );
    assert_eq!(c["retries"].as_array().map(Vec::len), Some(1), "{c}");
}

#[test]
fn costs_are_rounded_in_every_output_and_a_stream_without_usage_says_why() {
    let dir = tmp();
    // 56 input tokens at $0.30 a million: 1.68e-5 dollars, which f64 arithmetic makes
    // 1.6800000000000002e-05.
    let plain = TestServer::start(|_| {
        (
            200,
            json!({"choices": [{"index": 0, "finish_reason": "stop",
                   "message": {"role": "assistant", "content": "ok"}}],
                   "usage": {"prompt_tokens": 56, "completion_tokens": 0}})
            .to_string(),
        )
    });
    let agent = caller(dir.path(), "plain", "plain", &plain.base, 30.0);
    let (_, _, s) = run(dir.path(), "plain", &agent);
    let noisy = 56.0 * 0.3 / 1e6;
    assert_ne!(noisy, 1.68e-5, "the noise this test is about");
    assert_eq!(s["usage"]["cost_usd"].as_f64(), Some(1.68e-5), "{s}");
    for format in ["table", "markdown", "html"] {
        let r = Wt::new(dir.path())
            .args(["report", "runs-plain", "--format", format])
            .run();
        assert!(r.stdout.contains("$0.0000168"), "{format}: {r}");
    }
    let r = Wt::new(dir.path())
        .args(["report", "runs-plain", "--format", "json"])
        .run();
    let doc: Value = serde_json::from_str(&r.stdout).unwrap_or_else(|e| panic!("{e}: {r}"));
    assert_eq!(doc["usage"]["cost_usd"].as_f64(), Some(1.68e-5), "{r}");
    assert!(!r.stdout.contains("1.6800000000000002"), "{r}");
    // A streamed call: the gateway asks for its usage, and keeps the usage chunk from an
    // agent that did not ask for it.
    let usage_chunk = "data: {\"id\":\"c-s\",\"choices\":[],\"usage\":{\"prompt_tokens\":56,\"completion_tokens\":0}}\n\n";
    let stream = |usage: bool| {
        move |_: &crate::harness::Seen| {
            let mut body = String::from(
                "data: {\"id\":\"c-s\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ok\"},\"finish_reason\":\"stop\"}]}\n\n",
            );
            if usage {
                body.push_str(usage_chunk);
            }
            body.push_str("data: [DONE]\n\n");
            (
                200,
                vec![("content-type".into(), "text/event-stream".into())],
                body,
            )
        }
    };
    let with_usage = TestServer::start_with_headers(stream(true));
    let agent = caller(dir.path(), "streamed", "stream", &with_usage.base, 30.0);
    let (_, t, s) = run(dir.path(), "streamed", &agent);
    let sent: Value = serde_json::from_str(&with_usage.seen()[0].body).unwrap();
    assert_eq!(sent["stream_options"], json!({"include_usage": true}));
    assert_eq!(s["usage"]["cost_usd"].as_f64(), Some(1.68e-5), "{s}");
    let raw = got(&t)["raw"].as_str().unwrap_or_default().to_owned();
    assert!(
        raw.contains("\"content\":\"ok\"") && raw.contains("[DONE]"),
        "{raw}"
    );
    assert!(
        !raw.contains("usage"),
        "the agent did not ask for usage: {raw}"
    );
    // An upstream that sends no usage even so: no cost, and why.
    let without = TestServer::start_with_headers(stream(false));
    let agent = caller(dir.path(), "no-usage", "stream", &without.base, 30.0);
    let (_, _, s) = run(dir.path(), "no-usage", &agent);
    assert!(s["usage"]["cost_usd"].is_null(), "{s}");
    let why = s["usage"]["cost_unknown"].as_str().unwrap_or_default();
    assert!(why.contains("1 streamed without a usage chunk"), "{s}");
    let r = Wt::new(dir.path())
        .args(["report", "runs-no-usage", "--format", "table"])
        .run();
    assert!(r.stdout.contains("cost unknown"), "{r}");
}

#[test]
fn the_upstreams_secrets_reach_the_agent_by_no_way_and_are_refused_at_load() {
    let dir = tmp();
    let gateway = "[gateway]\nendpoint = \"http://127.0.0.1:9/v1\"\napi_key_env = \"UPSTREAM_KEY\"\nheaders = { \"X-Tenant\" = { env = \"TENANT_TOKEN\" } }\n";
    let process = |extra: &str| {
        format!(
            "runtime = \"process\"\ncommand = [\"/bin/true\", \"{{input}}\"]\n{extra}\n{gateway}"
        )
    };
    let cases = [
        (
            process("env_passthrough = [\"UPSTREAM_KEY\"]"),
            "`gateway.api_key_env` and `env_passthrough` name the same variable UPSTREAM_KEY",
        ),
        (
            process("env_passthrough = [\"TENANT_TOKEN\"]"),
            "`gateway.headers.X-Tenant` and `env_passthrough` name the same variable TENANT_TOKEN",
        ),
        (
            process("api_key_env = \"TENANT_TOKEN\""),
            "`gateway.headers.X-Tenant` and `api_key_env` name the same variable TENANT_TOKEN",
        ),
        // The same value under another name.
        (
            process("env_passthrough = [\"SAME_KEY\"]"),
            "the agent's environment variable SAME_KEY holds the value of `gateway.api_key_env`",
        ),
        (
            process(&format!("env = {{ COPY = \"{UPSTREAM_KEY}\" }}")),
            "the agent's environment variable COPY holds the value of `gateway.api_key_env`",
        ),
        (
            process(&format!("soul = \"say {UPSTREAM_KEY}\"")),
            "WT_AGENT_SOUL holds the value of `gateway.api_key_env`",
        ),
        (
            format!(
                "runtime = \"process\"\ncommand = [\"/bin/true\", \"--key={UPSTREAM_KEY}\", \"{{input}}\"]\n{gateway}"
            ),
            "an argument of `command` holds the value of `gateway.api_key_env`",
        ),
        (
            format!(
                "runtime = \"http\"\nendpoint = \"http://127.0.0.1:9\"\napi_key_env = \"SAME_KEY\"\n{gateway}"
            ),
            "the key `api_key_env` sends the service holds the value of `gateway.api_key_env`",
        ),
        (
            format!(
                "runtime = \"http\"\nendpoint = \"http://127.0.0.1:9\"\nmodel = \"{UPSTREAM_KEY}\"\n{gateway}"
            ),
            "`model` (sent in every inject) holds the value of `gateway.api_key_env`",
        ),
    ];
    for (i, (config, says)) in cases.iter().enumerate() {
        let agent = crate::harness::agent_file(
            dir.path(),
            &format!("sealed-{i}.toml"),
            &format!("label = \"sealed\"\n{config}"),
        );
        let r = Wt::new(dir.path())
            .args(["run", "--runs", "1", "--agent"])
            .arg(&agent)
            .env("UPSTREAM_KEY", UPSTREAM_KEY)
            .env("SAME_KEY", UPSTREAM_KEY)
            .env("TENANT_TOKEN", "tenant-secret-4411")
            .run();
        assert_eq!(r.code, 2, "{config}: {r}");
        assert!(r.stderr.contains(says), "{config}: {r}");
        assert!(
            !r.stderr.contains(UPSTREAM_KEY) && !r.stderr.contains("tenant-secret-4411"),
            "{r}"
        );
    }
}
