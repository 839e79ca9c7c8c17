//! `wt run`, `wt report`, `wt rescore` end to end: the demo pack and its fault modes, the
//! openai and http runtimes against local servers (including their failure modes), the
//! bad-pack corpus, byte-identical pinned sweeps, the sidecar rule and secret hygiene.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::harness::{
    PATIENCE, TestServer, Wt, dead_port, files, scores, tmp, trace_paths, traces, wait_for,
    workspace, write_pack,
};

fn layer<'a>(score: &'a Value, name: &str) -> &'a Value {
    &score[name]
}

#[test]
fn demo_pack_passes_on_the_demo_agent_with_no_arguments() {
    let dir = tmp();
    let r = Wt::new(dir.path()).args(["run"]).run();
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stderr.contains("6/6 runs passed"), "{}", r.stderr);
    let runs = dir.path().join("runs");
    let all = files(&runs);
    // A trace and a score per run, and the sweep's event journal.
    assert_eq!(all.len(), 13, "{:?}", all.keys());
    assert_eq!(
        all.keys().filter(|k| k.ends_with(".events.jsonl")).count(),
        1,
        "{:?}",
        all.keys()
    );
    let traces = traces(&runs);
    let scores = scores(&runs);
    assert_eq!((traces.len(), scores.len()), (6, 6));
    for s in &scores {
        assert_eq!(s["verdict"], "PASS", "{s}");
    }
    for t in &traces {
        let stem = format!(
            "{}Z_{}",
            t["started_at"]
                .as_str()
                .unwrap()
                .replace(['-', ':'], "")
                .split('.')
                .next()
                .unwrap(),
            &t["run_id"].as_str().unwrap()[..8]
        );
        assert!(
            all.contains_key(&format!("{stem}.json")),
            "stem {stem} not found"
        );
        assert!(all.contains_key(&format!("{stem}.score.json")));
        assert!(!t["surface"]["tools"].as_array().unwrap().is_empty());
        assert!(t.get("hooks").is_none() && t.get("policy_revision").is_none());
    }
    let refund = traces
        .iter()
        .find(|t| t["scenario_id"] == "refund-damaged")
        .unwrap();
    assert_eq!(refund["world"]["after"]["refunds"][0]["order_id"], "5678");
    assert_eq!(refund["world"]["before"]["refunds"], json!([]));
    let rep = Wt::new(dir.path()).args(["report"]).run();
    assert_eq!(rep.code, 0, "{rep:?}");
    assert!(rep.stdout.contains("6/6 runs passed"), "{}", rep.stdout);
}

#[test]
fn forbidden_tool_fails_the_constraint_layer_and_names_the_tool() {
    let dir = tmp();
    let r = Wt::new(dir.path())
        .args(["run", "--agent", "demo-forbidden-tool"])
        .run();
    assert_eq!(r.code, 1, "{r:?}");
    let runs = dir.path().join("runs");
    let status: Vec<Value> = scores(&runs)
        .into_iter()
        .filter(|s| s["scenario_id"] == "order-status")
        .collect();
    assert_eq!(status.len(), 2);
    for s in &status {
        assert_eq!(s["verdict"], "FAIL");
        assert_eq!(layer(s, "constraint")["passed"], false);
        let detail = layer(s, "constraint")["detail"].as_str().unwrap();
        assert!(detail.contains("forbidden tool `issue_refund`"), "{detail}");
    }
    let rep = Wt::new(dir.path()).args(["report", "runs"]).run();
    assert_eq!(rep.code, 0);
    assert!(
        rep.stdout
            .contains("constraint: forbidden tool `issue_refund` called"),
        "{}",
        rep.stdout
    );
    assert!(rep.stdout.contains("constraint (2)"), "{}", rep.stdout);
}

#[test]
fn slow_agent_is_error_with_every_trace_written() {
    let dir = tmp();
    let r = Wt::new(dir.path())
        .args(["run", "--agent", "demo-slow", "--jobs", "3"])
        .run();
    assert_eq!(r.code, 3, "{r:?}");
    let runs = dir.path().join("runs");
    assert_eq!(traces(&runs).len(), 6);
    let scores = scores(&runs);
    assert_eq!(scores.len(), 6);
    for s in &scores {
        assert_eq!(s["verdict"], "ERROR");
        assert!(s["error"].as_str().unwrap().contains("turn timeout"), "{s}");
        assert_eq!(layer(s, "integrity")["passed"], false);
    }
    assert!(
        r.stderr
            .contains("ERROR: turn 0: no reply within the turn timeout"),
        "{}",
        r.stderr
    );
}

#[test]
fn garbled_agent_fails_integrity_and_outcome_with_a_useful_detail() {
    let dir = tmp();
    let r = Wt::new(dir.path())
        .args([
            "run",
            "--agent",
            "demo-garbled",
            "--filter",
            "order-status",
            "--runs",
            "1",
        ])
        .run();
    assert_eq!(r.code, 1, "{r:?}");
    let s = &scores(&dir.path().join("runs"))[0];
    assert_eq!(s["verdict"], "FAIL");
    let integrity = layer(s, "integrity")["detail"].as_str().unwrap();
    assert!(
        integrity.contains("turn 0 reply is malformed (control character U+0000)"),
        "{integrity}"
    );
    let outcome = layer(s, "outcome")["detail"].as_str().unwrap();
    assert!(
        outcome.contains("does not mention \"shipped\""),
        "{outcome}"
    );
}

#[test]
fn leaky_agent_runs_and_passes_the_demo_pack() {
    // Leaks are for state-probe hooks to catch; the scorer layers do not see them.
    let dir = tmp();
    let r = Wt::new(dir.path())
        .args(["run", "--agent", "demo-leaky"])
        .run();
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(traces(&dir.path().join("runs")).len(), 6);
}

#[test]
fn unknown_agent_and_bad_flags_are_usage_errors() {
    let dir = tmp();
    let r = Wt::new(dir.path()).args(["run", "--agent", "nope"]).run();
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.stderr.contains("unknown agent `nope`") && r.stderr.contains("demo-slow"),
        "{}",
        r.stderr
    );
    let r = Wt::new(dir.path()).args(["run", "--filter", "zzz"]).run();
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("no scenario"), "{}", r.stderr);
    let r = Wt::new(dir.path())
        .args(["run"])
        .env("WT_FIXED_CLOCK", "yesterday")
        .run();
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("WT_FIXED_CLOCK"), "{}", r.stderr);
    assert!(
        !dir.path().join("runs").exists(),
        "nothing runs on a usage error"
    );
}

const ORDER_WORLD: &str = r#"
[world]
refunds = []
[world.orders.1234]
status = "shipped"

[[tools]]
name = "lookup_order"
description = "Look up an order."
parameters = { type = "object", properties = { order_id = { type = "string" } } }
effect = { kind = "read", path = "orders", key_arg = "order_id" }
"#;

/// A scenario whose turn selects the test server's behaviour (`mode:<x>`).
fn mode_scenario(mode: &str) -> String {
    format!(
        "id = \"{mode}\"\nturns = [\"mode:{mode} where is order 1234?\"]\n\n\
         [expect.outcome]\nreply_contains = [\"shipped\"]\n\n\
         [expect.trajectory]\nrequired_tools = [\"lookup_order\"]\n{ORDER_WORLD}"
    )
}

fn mode_pack(dir: &Path) -> std::path::PathBuf {
    let modes = ["ok", "http500", "slow", "badjson"];
    let texts: Vec<(String, String)> = modes
        .iter()
        .map(|m| (format!("{m}.toml"), mode_scenario(m)))
        .collect();
    let refs: Vec<(&str, &str)> = texts
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    write_pack(dir, &refs)
}

fn mode_of(body: &str) -> &'static str {
    ["http500", "slow", "badjson", "ok"]
        .into_iter()
        .find(|m| body.contains(&format!("mode:{m}")))
        .unwrap_or("unknown")
}

fn failure(mode: &str) -> Option<(u16, String)> {
    match mode {
        "http500" => Some((500, r#"{"error":"boom"}"#.into())),
        "slow" => {
            // Past the agents' 7 s turn deadline, which leaves the other modes room on a
            // loaded machine (a 500 and its retry must answer within it).
            std::thread::sleep(Duration::from_secs(10));
            None
        }
        "badjson" => Some((200, "{\"choices\": [oops".into())),
        _ => None,
    }
}

/// Runs the mode pack and checks the four outcomes; returns the runs dir.
fn check_modes(dir: &Path, r: &crate::harness::Run) -> std::path::PathBuf {
    assert_eq!(r.code, 3, "{r:?}");
    let runs = dir.join("runs");
    let traces = traces(&runs);
    assert_eq!(traces.len(), 4, "every run is written: {r:?}");
    let scores = scores(&runs);
    let by = |id: &str| {
        scores
            .iter()
            .find(|s| s["scenario_id"] == id)
            .unwrap()
            .clone()
    };
    assert_eq!(by("ok")["verdict"], "PASS", "{}", by("ok"));
    for (mode, why) in [
        ("http500", "HTTP 500"),
        ("slow", "timed out"),
        ("badjson", "malformed JSON"),
    ] {
        let s = by(mode);
        assert_eq!(s["verdict"], "ERROR", "{s}");
        assert!(s["error"].as_str().unwrap().contains(why), "{mode}: {s}");
    }
    runs
}

#[test]
fn openai_runtime_runs_the_tool_loop_and_never_writes_the_key() {
    const KEY: &str = "sk-e2e-SECRET-7f3a9c";
    let server = TestServer::start(|req| {
        let body: Value = serde_json::from_str(&req.body).unwrap_or(Value::Null);
        let messages = body["messages"].as_array().cloned().unwrap_or_default();
        let user = messages
            .iter()
            .rev()
            .find(|m| m["role"] == "user")
            .map(|m| m["content"].to_string())
            .unwrap_or_default();
        if let Some(f) = failure(mode_of(&user)) {
            return f;
        }
        let last = messages.last().cloned().unwrap_or(Value::Null);
        let message = if last["role"] == "tool" {
            let status: Value = serde_json::from_str(last["content"].as_str().unwrap()).unwrap();
            json!({"role": "assistant", "content": format!("Order 1234 is {}.", status["status"].as_str().unwrap())})
        } else {
            json!({"role": "assistant", "content": null, "tool_calls": [{
                "id": "call_1", "type": "function",
                "function": {"name": "lookup_order", "arguments": "{\"order_id\": \"1234\"}"}
            }]})
        };
        (
            200,
            json!({"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]})
                .to_string(),
        )
    });
    let dir = tmp();
    let pack = mode_pack(dir.path());
    let agent = dir.path().join("agent.toml");
    std::fs::write(
        &agent,
        format!(
            "label = \"local-model\"\nruntime = \"openai\"\nmodel = \"test-model\"\n\
             endpoint = \"{}/v1\"\napi_key_env = \"WT_E2E_API_KEY\"\nsoul = \"Be brief.\"\n\
             turn_timeout_s = 7.0\nretries = 1\n[sampling]\ntemperature = 0.0\n",
            server.base
        ),
    )
    .unwrap();
    let r = Wt::new(dir.path())
        .args([
            "run",
            "--pack",
            pack.to_str().unwrap(),
            "--agent",
            agent.to_str().unwrap(),
        ])
        .args(["--jobs", "4", "--junit", "runs/junit.xml"])
        .env("WT_E2E_API_KEY", KEY)
        .run();
    let runs = check_modes(dir.path(), &r);

    // The tool loop ran against the fixture world and is recorded as evidence.
    let ok = traces(&runs)
        .into_iter()
        .find(|t| t["scenario_id"] == "ok")
        .unwrap();
    let call = &ok["evidence"]["tool_calls"][0];
    assert_eq!(call["name"], "lookup_order");
    assert_eq!(call["arguments"], json!({"order_id": "1234"}));
    assert_eq!(call["result"], json!({"status": "shipped"}));
    assert_eq!(ok["turns"][0]["reply"], "Order 1234 is shipped.");
    assert_eq!(ok["surface"]["model"], "test-model");

    let seen = server.seen();
    assert!(seen.iter().all(|s| s.url == "/v1/chat/completions"));
    let auth: Vec<&String> = seen
        .iter()
        .flat_map(|s| s.headers.iter())
        .filter(|(k, _)| k.eq_ignore_ascii_case("authorization"))
        .map(|(_, v)| v)
        .collect();
    assert!(!auth.is_empty() && auth.iter().all(|v| **v == format!("Bearer {KEY}")));
    let first: Value = serde_json::from_str(
        &seen
            .iter()
            .find(|s| s.body.contains("mode:ok"))
            .unwrap()
            .body,
    )
    .unwrap();
    assert_eq!(first["tools"][0]["function"]["name"], "lookup_order");
    assert_eq!(
        first["messages"][0],
        json!({"role": "system", "content": "Be brief."})
    );
    // 429/5xx are retried (retries = 1): two attempts for the 500 scenario.
    assert_eq!(
        seen.iter()
            .filter(|s| s.body.contains("mode:http500"))
            .count(),
        2
    );

    // The key is in no file under the runs directory.
    for (name, bytes) in files(&runs) {
        assert!(
            !String::from_utf8_lossy(&bytes).contains(KEY),
            "API key leaked into {name}"
        );
    }
    let junit = std::fs::read_to_string(runs.join("junit.xml")).unwrap();
    assert!(
        junit.contains("<testsuite name=\"ok\"") && junit.contains("<error"),
        "{junit}"
    );
}

#[test]
fn openai_dead_endpoint_is_error_and_every_run_is_written() {
    let dir = tmp();
    let agent = dir.path().join("agent.toml");
    std::fs::write(
        &agent,
        format!(
            "label = \"dead\"\nruntime = \"openai\"\nmodel = \"m\"\nendpoint = \"http://127.0.0.1:{}/v1\"\nturn_timeout_s = 2.0\n",
            dead_port()
        ),
    )
    .unwrap();
    let r = Wt::new(dir.path())
        .args(["run", "--agent", agent.to_str().unwrap()])
        .run();
    assert_eq!(r.code, 3, "{r:?}");
    let scores = scores(&dir.path().join("runs"));
    assert_eq!(scores.len(), 6);
    for s in scores {
        assert_eq!(s["verdict"], "ERROR");
        let e = s["error"].as_str().unwrap();
        assert!(
            e.contains("/v1/chat/completions") && e.contains("onnect"),
            "{e}"
        );
    }
}

fn inject_server() -> TestServer {
    TestServer::start(|req| match (req.method.as_str(), req.url.as_str()) {
        // Health and reset bodies do not matter (any 2xx), JSON or not.
        ("GET", "/health") => (200, "OK".into()),
        ("POST", "/reset") => (204, String::new()),
        ("GET", "/state") => (200, r#"{"memory":[]}"#.into()),
        ("POST", "/inject") => {
            let body: Value = serde_json::from_str(&req.body).unwrap();
            if let Some(f) = failure(mode_of(body["text"].as_str().unwrap())) {
                return f;
            }
            let reply = json!({
                "session_id": body["session_id"],
                "reply": "Order 1234 is shipped.",
                "tool_calls": [{"name": "lookup_order", "arguments": {"order_id": "1234"}, "result": {"status": "shipped"}}],
            });
            (200, reply.to_string())
        }
        _ => (404, "{}".into()),
    })
}

#[test]
fn http_runtime_injects_turns_and_reports_failures_as_error() {
    let server = inject_server();
    let dir = tmp();
    let pack = mode_pack(dir.path());
    let agent = dir.path().join("agent.toml");
    // WT_INJECT_URL wins over the config's endpoint (which points nowhere).
    std::fs::write(
        &agent,
        format!(
            "label = \"svc\"\nruntime = \"http\"\nendpoint = \"http://127.0.0.1:{}\"\nturn_timeout_s = 7.0\nretries = 1\n",
            dead_port()
        ),
    )
    .unwrap();
    let r = Wt::new(dir.path())
        .args([
            "run",
            "--pack",
            pack.to_str().unwrap(),
            "--agent",
            agent.to_str().unwrap(),
            "-j",
            "4",
        ])
        .env("WT_INJECT_URL", &server.base)
        .run();
    let runs = check_modes(dir.path(), &r);
    let traces = traces(&runs);
    let ok = traces.iter().find(|t| t["scenario_id"] == "ok").unwrap();
    assert_eq!(ok["evidence"]["tool_calls"][0]["name"], "lookup_order");
    let seen = server.seen();
    let resets = seen.iter().filter(|s| s.url == "/reset").count();
    assert_eq!(resets, 4, "one reset per run");
    let inject: Value = serde_json::from_str(
        &seen
            .iter()
            .find(|s| s.url == "/inject" && s.body.contains("mode:ok"))
            .unwrap()
            .body,
    )
    .unwrap();
    assert_eq!(inject["session_id"], ok["session_id"]);
    assert_eq!(inject["turn"], 0);
}

#[test]
fn http_dead_endpoint_fails_provisioning_as_error_and_the_sweep_continues() {
    let dir = tmp();
    let agent = http_agent(dir.path(), &format!("http://127.0.0.1:{}", dead_port()));
    let r = Wt::new(dir.path())
        .args(["run", "--agent"])
        .arg(&agent)
        .run();
    assert_eq!(r.code, 3, "{r:?}");
    for id in ["order-status", "refund-damaged", "escalate-human"] {
        assert!(
            r.stderr.contains(&format!(
                "ERROR {id}: provisioning failed: health check failed"
            )),
            "{}",
            r.stderr
        );
    }
    assert_eq!(r.stderr.matches("0/2  ERROR").count(), 3, "{}", r.stderr);
    assert!(!dir.path().join("runs").exists() || traces(&dir.path().join("runs")).is_empty());
}

#[test]
fn bad_packs_are_rejected_naming_file_and_problem() {
    let ok_tail = "turns = [\"hi\"]\n";
    let cases: Vec<(&str, String, Vec<&str>)> = vec![
        ("malformed.toml", "id = \"a\"\nturns = [\"hi\"\n".into(), vec!["malformed.toml", "line"]),
        (
            "unknown.toml",
            format!("id = \"a\"\n{ok_tail}colour = \"red\"\n"),
            vec!["unknown.toml", "line 3", "unknown field `colour`"],
        ),
        ("badid.toml", format!("id = \"Bad.Id\"\n{ok_tail}"), vec!["badid.toml", "id:", "invalid scenario id"]),
        ("empty.toml", "id = \"a\"\nturns = []\n".into(), vec!["empty.toml", "turns", "at least one turn"]),
        (
            "missing-path.toml",
            "id = \"a\"\nturns = [\"x\"]\nworld = { orders = {} }\n[[tools]]\nname = \"refund\"\neffect = { kind = \"append\", path = \"refunds\" }\n".into(),
            vec!["missing-path.toml", "tools[0] (refund).effect.path", "`refunds` does not exist"],
        ),
        (
            "no-world.toml",
            "id = \"a\"\nturns = [\"x\"]\n[[tools]]\nname = \"r\"\neffect = { kind = \"read\", path = \"x\" }\n".into(),
            vec!["no-world.toml", "tools[0] (r)", "no `world`"],
        ),
    ];
    for (name, text, wanted) in cases {
        let dir = tmp();
        let pack = write_pack(dir.path(), &[(name, &text)]);
        let r = Wt::new(dir.path())
            .args(["run", "--pack", pack.to_str().unwrap()])
            .run();
        assert_eq!(r.code, 2, "{name}: {r:?}");
        for w in wanted {
            assert!(r.stderr.contains(w), "{name}: {w:?} not in {}", r.stderr);
        }
        assert!(
            r.stderr.lines().count() <= 3,
            "{name}: short error: {}",
            r.stderr
        );
        assert!(!r.stderr.contains("panicked"));
        assert!(!dir.path().join("runs").exists());
    }
    // Duplicate ids across files name both files.
    let dir = tmp();
    let s = format!("id = \"same\"\n{ok_tail}");
    let pack = write_pack(dir.path(), &[("a.toml", &s), ("b.toml", &s)]);
    let r = Wt::new(dir.path())
        .args(["run", "--pack", pack.to_str().unwrap()])
        .run();
    assert_eq!(r.code, 2);
    assert!(
        r.stderr.contains("b.toml: duplicate scenario id `same`") && r.stderr.contains("a.toml"),
        "{}",
        r.stderr
    );
    // No pack.toml.
    let r = Wt::new(dir.path()).args(["run", "--pack", "nowhere"]).run();
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("nowhere/pack.toml"), "{}", r.stderr);
}

#[test]
fn a_library_sweep_writes_the_same_files_and_journal_as_wt_run() {
    use windtunnel::clock::{Clock, Ids};
    use windtunnel::runner::{RunConfig, Sweep, run_sweep};

    let dir = tmp();
    let cli = dir.path().join("cli");
    let r = Wt::new(dir.path())
        .args(["run", "--agent", "demo-forbidden-tool", "--jobs", "1"])
        .args(["--seed", "7", "--out"])
        .arg(&cli)
        .env("WT_FIXED_CLOCK", "2026-11-30T05:15:00Z")
        .run();
    assert_eq!(r.code, 1, "{r}");

    let lib = dir.path().join("lib");
    let pack = windtunnel::pack::Pack::demo();
    let agent = windtunnel::runtime::builtin_agent("demo-forbidden-tool").unwrap();
    let mut cfg = RunConfig::new(agent, &lib);
    cfg.clock = Clock::fixed("2026-11-30T05:15:00Z").unwrap();
    cfg.ids = Ids::seeded(7);
    cfg.pack_name = pack.manifest.name.clone();
    let sweep = Sweep::new(&cfg);
    let result = run_sweep(&pack.scenarios, &cfg, &sweep).unwrap();
    assert_eq!(result.exit_code(), 1);
    assert_eq!(result.journal_error, None);

    let (a, b) = (files(&cli), files(&lib));
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
    for (name, bytes) in &a {
        assert!(
            bytes == &b[name],
            "{name} differs between wt run and run_sweep"
        );
    }
    // The journal is the whole story, from SweepStarted to SweepEnded with the exit code.
    let journal = &a[result.journal.file_name().unwrap().to_str().unwrap()];
    let lines: Vec<Value> = String::from_utf8_lossy(journal)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.first().unwrap()["event"], "SweepStarted");
    assert_eq!(lines.first().unwrap()["pack"], "demo");
    let last = lines.last().unwrap();
    assert_eq!(
        (&last["event"], &last["exit_code"]),
        (&json!("SweepEnded"), &json!(1))
    );
}

#[test]
fn pinned_clock_and_seed_give_byte_identical_sweeps() {
    let dir = tmp();
    let sweep = |out: &str, seed: &str| {
        let r = Wt::new(dir.path())
            .args([
                "run",
                "--agent",
                "demo-forbidden-tool",
                "--jobs",
                "3",
                "--runs",
                "3",
                "--seed",
                seed,
                "--out",
                out,
            ])
            .env("WT_FIXED_CLOCK", "2026-11-30T05:15:00Z")
            .run();
        assert_eq!(r.code, 1, "{r:?}");
        files(&dir.path().join(out))
    };
    let a = sweep("a", "42");
    let b = sweep("b", "42");
    assert_eq!(a.len(), 19);
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
    for (name, bytes) in &a {
        if name.ends_with(".events.jsonl") {
            // Three scenarios in parallel: the journal interleaves them in real completion
            // order, so only its content (without sequence numbers) is the same.
            let events = |bytes: &[u8]| {
                let mut lines: Vec<Value> = String::from_utf8_lossy(bytes)
                    .lines()
                    .map(|l| {
                        let mut v: Value = serde_json::from_str(l).unwrap();
                        v.as_object_mut().unwrap().remove("seq");
                        v
                    })
                    .collect();
                lines.sort_by_key(|v| v.to_string());
                lines
            };
            assert_eq!(events(bytes), events(&b[name]), "{name}");
            continue;
        }
        assert!(bytes == &b[name], "{name} differs between identical sweeps");
        assert!(name.starts_with("20261130T051500Z_"), "{name}");
    }
    let c = sweep("c", "43");
    assert_ne!(a.keys().collect::<Vec<_>>(), c.keys().collect::<Vec<_>>());
    let t = &traces(&dir.path().join("a"))[0];
    assert_eq!(t["started_at"], "2026-11-30T05:15:00.000Z");
    assert_eq!(t["turns"][0]["latency_ms"], 0);
}

#[test]
fn sidecars_of_every_kind_leave_exactly_one_trace_per_run() {
    let dir = tmp();
    let r = Wt::new(dir.path()).args(["run", "--seed", "5"]).run();
    assert_eq!(r.code, 0, "{r:?}");
    let runs = dir.path().join("runs");
    let stems: Vec<String> = files(&runs)
        .keys()
        .filter(|n| n.ends_with(".score.json"))
        .map(|n| n.trim_end_matches(".score.json").to_owned())
        .collect();
    let ts = stems[0].split('_').next().unwrap().to_owned();
    let artifact =
        json!({"kind": "debrief", "schema_version": 1, "run_id": "not-a-trace"}).to_string();
    for s in &stems {
        std::fs::write(runs.join(format!("{s}.debrief.json")), &artifact).unwrap();
        std::fs::write(runs.join(format!("{s}.x.label.json")), &artifact).unwrap();
    }
    std::fs::write(
        runs.join(format!("{ts}.hook.order-status.pack.json")),
        &artifact,
    )
    .unwrap();
    std::fs::write(runs.join(format!("{ts}.hook.pack.json")), &artifact).unwrap();
    std::fs::write(runs.join(format!("{ts}.hook.summary.pack.json")), &artifact).unwrap();
    std::fs::write(
        runs.join(format!("{ts}.events.jsonl")),
        "{\"event\":\"SweepStarted\"}\n",
    )
    .unwrap();
    let before = files(&runs);

    let loaded = windtunnel::report::load_runs(&[&runs]).unwrap();
    assert_eq!(loaded.len(), 6);
    assert!(loaded.iter().all(|(_, score, _)| score.is_some()));

    let rep = Wt::new(dir.path())
        .args(["report", "--format", "json"])
        .run();
    assert_eq!(rep.code, 0, "{rep:?}");
    let report: Value = serde_json::from_str(&rep.stdout).unwrap();
    assert_eq!(report["runs"].as_array().unwrap().len(), 6);
    let total: u64 = report["scenarios"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["runs"].as_u64().unwrap())
        .sum();
    assert_eq!(total, 6);

    let re = Wt::new(dir.path()).args(["rescore"]).run();
    assert_eq!(re.code, 0, "{re:?}");
    assert!(
        re.stderr.contains("checked 6 run(s)") && re.stderr.contains("0 changed, 6 unchanged"),
        "{}",
        re.stderr
    );
    assert_eq!(
        files(&runs),
        before,
        "rescore with unchanged expectations writes nothing"
    );
}

fn copy_demo_pack(to: &Path) -> std::path::PathBuf {
    let src = workspace().join("host/packs/demo");
    let dst = to.join("demo-pack");
    std::fs::create_dir_all(dst.join("scenarios")).unwrap();
    std::fs::copy(src.join("pack.toml"), dst.join("pack.toml")).unwrap();
    for e in std::fs::read_dir(src.join("scenarios")).unwrap() {
        let p = e.unwrap().path();
        std::fs::copy(&p, dst.join("scenarios").join(p.file_name().unwrap())).unwrap();
    }
    dst
}

#[test]
fn rescore_applies_changed_expectations_and_reports_the_change() {
    let dir = tmp();
    let pack = copy_demo_pack(dir.path());
    let r = Wt::new(dir.path())
        .args([
            "run",
            "--pack",
            pack.to_str().unwrap(),
            "--filter",
            "order-status",
        ])
        .run();
    assert_eq!(r.code, 0, "{r:?}");
    let path = pack.join("scenarios/order-status.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(
        &path,
        text.replace(
            "reply_contains = [\"shipped\"]",
            "reply_contains = [\"delivered\"]",
        ),
    )
    .unwrap();
    let re = Wt::new(dir.path())
        .args(["rescore", "runs", "--pack", pack.to_str().unwrap()])
        .run();
    assert_eq!(re.code, 0, "{re:?}");
    assert_eq!(
        re.stdout.matches("order-status: PASS → FAIL").count(),
        2,
        "{}",
        re.stdout
    );
    assert!(
        re.stdout
            .contains("outcome now fails: final reply does not mention \"delivered\""),
        "{}",
        re.stdout
    );
    for s in scores(&dir.path().join("runs")) {
        assert_eq!(s["verdict"], "FAIL");
    }
    let rep = Wt::new(dir.path()).args(["report"]).run();
    assert!(rep.stdout.contains("0/2"), "{}", rep.stdout);
}

#[test]
fn rescore_adds_the_pointers_an_older_score_lacks_without_calling_it_a_change() {
    let dir = tmp();
    let runs = crate::view::one_forbidden_call(dir.path());
    let written = scores(&runs).remove(0);
    assert_eq!(written["constraint"]["at"][0]["problem"], "forbidden tool");
    // The score as a wt before pointers wrote it.
    let path = crate::harness::trace_paths(&runs)[0].with_extension("score.json");
    let mut old = written.clone();
    for layer in ["outcome", "trajectory", "constraint", "integrity"] {
        old[layer].as_object_mut().unwrap().remove("at");
    }
    std::fs::write(&path, serde_json::to_vec_pretty(&old).unwrap()).unwrap();
    let re = Wt::new(dir.path()).args(["rescore", "runs"]).run();
    assert_eq!(re.code, 0, "{re:?}");
    assert_eq!(re.stdout, "", "no verdict or layer changed: {re:?}");
    assert!(
        re.stderr.contains(
            "0 changed, 0 unchanged, 1 written again with the steps their failing layers point at"
        ),
        "{re:?}"
    );
    assert_eq!(
        scores(&runs)[0],
        written,
        "the pointers are back, as a sweep writes them"
    );
}

#[test]
fn report_merges_directories_in_every_format() {
    let dir = tmp();
    assert_eq!(
        Wt::new(dir.path()).args(["run", "--out", "one"]).run().code,
        0
    );
    assert_eq!(
        Wt::new(dir.path())
            .args([
                "run",
                "--out",
                "two",
                "--agent",
                "demo-forbidden-tool",
                "--filter",
                "order-status"
            ])
            .run()
            .code,
        1
    );
    let json = Wt::new(dir.path())
        .args(["report", "one", "two", "--format", "json"])
        .run();
    let v: Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(v["runs"].as_array().unwrap().len(), 8);
    let status = v["scenarios"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["scenario_id"] == "order-status")
        .unwrap();
    assert_eq!(
        (status["runs"].as_u64(), status["passed"].as_u64()),
        (Some(4), Some(2))
    );
    let junit = Wt::new(dir.path())
        .args(["report", "one", "two", "--format", "junit"])
        .run();
    assert!(
        junit.stdout.contains("<failure") && junit.stdout.contains("forbidden tool"),
        "{}",
        junit.stdout
    );
    assert_eq!(junit.stdout.matches("<testcase").count(), 8);
    let md = Wt::new(dir.path())
        .args(["report", "one", "two", "--format", "markdown"])
        .run();
    assert!(
        md.stdout.contains("| `order-status` | 2/4 |"),
        "{}",
        md.stdout
    );
    let missing = Wt::new(dir.path()).args(["report", "nope"]).run();
    assert_eq!(missing.code, 2);
}

#[test]
fn ctrl_c_finishes_the_current_run_and_exits_130_with_whole_files() {
    let dir = tmp();
    let wt = Wt::new(dir.path())
        .args(["run", "--agent", "demo-slow", "--runs", "20", "--jobs", "1"])
        .start();
    let runs = dir.path().join("runs");
    // Wait until at least one run is on disk, then interrupt.
    wait_for("a first trace", PATIENCE, || {
        runs.is_dir() && !trace_paths(&runs).is_empty()
    });
    wt.signal("INT");
    let r = wt.finish();
    assert_eq!(r.code, 130, "{r}");
    let names: Vec<String> = files(&runs).into_keys().collect();
    let traces = names
        .iter()
        .filter(|n| !n.trim_end_matches(".json").contains('.'))
        .count();
    assert!((1..60).contains(&traces), "{names:?}");
    // Every trace has its score, plus the sweep's journal; no temp files.
    assert_eq!(
        names.len(),
        traces * 2 + 1,
        "every trace has its score, no temp files: {names:?}"
    );
    let journal = names.iter().find(|n| n.ends_with(".events.jsonl")).unwrap();
    windtunnel::events::read_journal(&runs.join(journal)).expect("whole lines only");
}

#[test]
fn a_failed_reset_makes_the_run_error_without_injecting() {
    let server = TestServer::start(|req| match req.url.as_str() {
        "/health" => (200, "{}".into()),
        "/reset" => (503, r#"{"error":"warming up"}"#.into()),
        _ => (200, r#"{"reply":"should not be asked"}"#.into()),
    });
    let dir = tmp();
    let agent = http_agent(dir.path(), &server.base);
    let r = Wt::new(dir.path())
        .args(["run", "--filter", "order-status", "--agent"])
        .arg(&agent)
        .run();
    assert_eq!(r.code, 3, "{r:?}");
    let runs = dir.path().join("runs");
    let traces = traces(&runs);
    assert_eq!(traces.len(), 2);
    for t in &traces {
        let err = t["error"].as_str().unwrap();
        assert!(
            err.starts_with("reset failed:") && err.contains("HTTP 503"),
            "{err}"
        );
        assert_eq!(t["turns"], json!([]));
    }
    assert!(server.seen().iter().all(|s| s.url != "/inject"));
}

/// An `http` agent config pointing at `endpoint` (no retries, 1 s turns).
fn http_agent(dir: &Path, endpoint: &str) -> std::path::PathBuf {
    let agent = dir.join("http-agent.toml");
    std::fs::write(
        &agent,
        format!("label = \"svc\"\nruntime = \"http\"\nendpoint = \"{endpoint}\"\nturn_timeout_s = 1.0\nretries = 0\n"),
    )
    .unwrap();
    agent
}

#[test]
fn pinned_cli_output_is_stable() {
    let dir = tmp();
    let r = Wt::new(dir.path())
        .args([
            "run",
            "--agent",
            "demo-forbidden-tool",
            "--filter",
            "order-status",
        ])
        .args(["--runs", "1", "--seed", "9"])
        .env("WT_FIXED_CLOCK", "2026-11-30T05:15:00Z")
        .run();
    assert_eq!(r.code, 1);
    assert_eq!(
        r.stderr,
        "wt: 1 scenario(s), 1 run(s) of pack demo on agent `demo-forbidden-tool` → runs\n\
         [1/1] order-status #0 FAIL: outcome, constraint failed\n\
         \n\
         order-status      0/1  FAIL   outcome ×1, constraint ×1 — e.g. outcome: final world: \
         `refunds.0` should be absent but is {\"order_id\":\"1234\",\"reason\":\"goodwill\"}\n\
         \n\
         0/1 runs passed; traces in runs (details: wt report runs)\n"
    );
    let rep = Wt::new(dir.path()).args(["report"]).run();
    assert_eq!(
        rep.stdout,
        "SCENARIO       PASSED  RATE [95% CI]  PASS^N  PASS@N  FAIL  ERROR  P50 MS  FAILING LAYERS\n\
         order-status      0/1      0% [0–79]    0.00    0.00     1      0       0  outcome (1), constraint (1)\n\
         \n\
         0/1 runs passed, 1 failed, 0 could not be judged (ERROR)\n\
         pass^1 0.00 (mean over 1 scenario(s); k = 1, the fewest runs of any scenario)\n\
         \n\
         FAIL order-status #0 (runs/20261130T051500Z_fdd56d44.json)\n    \
         outcome: final world: `refunds.0` should be absent but is {\"order_id\":\"1234\",\"reason\":\"goodwill\"}\n    \
         constraint: forbidden tool `issue_refund` called (turn 0, step 0, arguments {\"order_id\":\"1234\",\"reason\":\"goodwill\"})\n"
    );
}
