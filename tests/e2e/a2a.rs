//! The `a2a` runtime against the real thing: agents served by the official A2A SDKs —
//! Python (`a2a-sdk`, tests/agents/a2a_sdk_agent.py) and JavaScript (`@a2a-js/sdk`,
//! tests/agents/js/a2a_js_agent.mjs) — started by `wt` (confined, with the run's MCP world)
//! or reached remotely, over protocol 1.0 and 0.3, plain and streamed, at `--jobs 4`. Also a
//! hostile server (tests/agents/a2a_hostile.py): every bad answer is one clear line and an
//! ERROR, never a pass.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::Value;

use crate::harness::{
    Wt, a2a_js_agent, agent_file, agent_python, plugin_dir, poll_until, scores, tmp, traces,
    workspace, write_pack,
};

/// An `a2a` agent config `dir/<name>.toml` that starts `command`, plus `extra` TOML.
fn started(dir: &Path, name: &str, command: &[String], extra: &str) -> PathBuf {
    agent_file(
        dir,
        &format!("{name}.toml"),
        &format!(
            "label = \"{name}\"\nruntime = \"a2a\"\ncommand = {}\n{extra}\n",
            serde_json::to_string(command).unwrap()
        ),
    )
}

fn python_command(script: &str, args: &[&str]) -> Vec<String> {
    let mut c = vec![
        agent_python().display().to_string(),
        workspace()
            .join("tests/agents")
            .join(script)
            .display()
            .to_string(),
        "--port".to_owned(),
        "{port}".to_owned(),
    ];
    c.extend(args.iter().map(|a| (*a).to_owned()));
    c
}

/// The Python SDK's agent, started by `wt`, with `args`.
fn py_agent(dir: &Path, name: &str, args: &[&str], extra: &str) -> PathBuf {
    started(
        dir,
        name,
        &python_command("a2a_sdk_agent.py", args),
        &with_timeout(extra),
    )
}

/// `extra`, with room for a loaded machine's start-up unless it sets its own deadline.
fn with_timeout(extra: &str) -> String {
    if extra.contains("turn_timeout_s") {
        extra.to_owned()
    } else {
        format!("turn_timeout_s = 60\n{extra}")
    }
}

/// The JavaScript SDK's agent, started by `wt`, with `args`.
fn js_agent(dir: &Path, name: &str, args: &[&str], extra: &str) -> PathBuf {
    let mut c = vec![
        "node".to_owned(),
        a2a_js_agent().display().to_string(),
        "--port".to_owned(),
        "{port}".to_owned(),
    ];
    c.extend(args.iter().map(|a| (*a).to_owned()));
    started(dir, name, &c, &with_timeout(extra))
}

/// A scenario of the demo pack's `order-status` (its tools, world and checks) with another
/// id and other turns.
fn order_scenario(id: &str, turns: &[&str]) -> String {
    let demo =
        std::fs::read_to_string(workspace().join("host/packs/demo/scenarios/order-status.toml"))
            .unwrap();
    demo.lines()
        .map(|l| {
            if l.starts_with("id = ") {
                format!("id = {id:?}")
            } else if l.starts_with("turns = ") {
                format!("turns = {}", serde_json::to_string(turns).unwrap())
            } else if l.starts_with("runs = ") {
                "runs = 1".to_owned()
            } else {
                l.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The pack of what an agent may do besides answering: ask back, fail, ask to sign in,
/// reject, answer with data and a file.
fn faults_pack(dir: &Path) -> PathBuf {
    let s = |id: &str, turns: &[&str]| (format!("{id}.toml"), order_scenario(id, turns));
    let files = [
        s(
            "ask-back",
            &["Which order is mine? I forgot.", "It is order 1234."],
        ),
        s("warehouse-down", &["Where is order 1234? please fail"]),
        s("sign-in", &["Where is order 1234? log me in"]),
        s("refuse", &["Where is order 1234? reject this"]),
        s("receipt", &["Where is order 1234? as data"]),
    ];
    let refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(n, t)| (n.as_str(), t.as_str()))
        .collect();
    write_pack(dir, &refs)
}

fn by_id<'a>(all: &'a [Value], id: &str) -> &'a Value {
    all.iter()
        .find(|t| t["scenario_id"] == id)
        .unwrap_or_else(|| panic!("no trace of {id}"))
}

fn methods(trace: &Value) -> Vec<String> {
    trace["a2a"]["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["method"].as_str().unwrap().to_owned())
        .collect()
}

fn states(trace: &Value) -> Vec<Value> {
    trace["a2a"]["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["state"].clone())
        .collect()
}

/// The demo pack at `--jobs 4`, twice each, on `agent`: every run passes, acting on its own
/// world over MCP, its card and its calls in its trace, each run its own context and its own
/// confined process listening on the port the card names.
fn passes_the_demo_pack(agent: &Path, card_name: &str, protocol: &str, send: &str) {
    let dir = tmp();
    let r = Wt::new(dir.path())
        .args(["run", "--runs", "2", "--jobs", "4"])
        .agent(agent)
        .run();
    assert_eq!(r.code, 0, "{r}");
    assert!(r.stderr.contains("6/6 runs passed"), "{r}");
    let all = traces(&dir.path().join("runs"));
    assert_eq!(all.len(), 6);
    let mut contexts = Vec::new();
    for t in &all {
        let a2a = &t["a2a"];
        assert_eq!(a2a["card"]["name"], card_name, "{a2a}");
        assert_eq!(a2a["protocol"], protocol);
        assert!(
            a2a["card"]["digest"]
                .as_str()
                .unwrap()
                .starts_with("sha256:")
        );
        let turns = t["turns"].as_array().unwrap().len();
        assert_eq!(methods(t), vec![send.to_owned(); turns], "{a2a}");
        assert!(states(t).iter().all(|s| s == "completed"), "{a2a}");
        contexts.push(a2a["context_ids"][0].as_str().unwrap().to_owned());
        let calls = a2a["calls"].as_array().unwrap();
        assert!(
            calls
                .iter()
                .all(|c| c["context_id"] == a2a["context_ids"][0])
        );
        // Its own process, confined, listening only on the port its card sends calls to.
        let procs = t["processes"].as_array().unwrap();
        assert_eq!(procs.len(), 1, "{procs:?}");
        let sandbox = &procs[0]["sandbox"];
        assert_eq!(sandbox["enforced"], true, "{sandbox}");
        let port = sandbox["bind_ports"][0].as_u64().unwrap();
        assert!(
            a2a["endpoint"]
                .as_str()
                .unwrap()
                .contains(&format!(":{port}/")),
            "{a2a}"
        );
        let tools = t["evidence"]["tool_calls"].as_array().unwrap();
        assert!(!tools.is_empty() && tools.iter().all(|c| c["source"] == "mcp"));
    }
    contexts.sort();
    contexts.dedup();
    assert_eq!(contexts.len(), 6, "every run its own context");
    let refund = by_id(&all, "refund-damaged");
    assert_eq!(refund["world"]["after"]["refunds"][0]["order_id"], "5678");
    let escalate = by_id(&all, "escalate-human");
    assert_eq!(escalate["world"]["after"]["tickets"][0]["order_id"], "9012");
}

#[test]
fn an_agent_on_the_python_sdk_passes_the_demo_pack_at_four_jobs() {
    let dir = tmp();
    let agent = py_agent(dir.path(), "py", &[], "");
    passes_the_demo_pack(&agent, "Shop support (a2a-sdk)", "1.0", "SendMessage");
}

#[test]
fn an_agent_on_the_javascript_sdk_passes_the_demo_pack_streamed_at_four_jobs() {
    let dir = tmp();
    let agent = js_agent(dir.path(), "js", &["--stream"], "");
    passes_the_demo_pack(
        &agent,
        "Shop support (@a2a-js/sdk)",
        "1.0",
        "SendStreamingMessage",
    );
}

#[test]
fn the_protocol_and_streaming_come_from_the_card_unless_the_config_says() {
    let dir = tmp();
    let run = |agent: &Path| {
        let out = dir.path().join(agent.file_stem().unwrap());
        let r = Wt::new(dir.path())
            .args(["run", "--runs", "1", "--filter", "escalate-human", "--out"])
            .arg(&out)
            .agent(agent)
            .run();
        assert_eq!(r.code, 0, "{r}");
        traces(&out).remove(0)
    };
    // The Python agent's card offers 0.3 only: 0.3 is spoken, streamed as the card says.
    let t = run(&py_agent(
        dir.path(),
        "py03",
        &["--only-0.3", "--stream"],
        "",
    ));
    assert_eq!(t["a2a"]["protocol"], "0.3");
    assert_eq!(methods(&t), ["message/stream", "message/stream"]);
    assert!(t["a2a"]["calls"][0]["events"].as_u64().unwrap() >= 3);
    // Both offered: 1.0, the newest; `protocol` and `streaming` override the card.
    let t = run(&py_agent(
        dir.path(),
        "pyboth",
        &["--compat", "--stream"],
        "",
    ));
    assert_eq!(
        methods(&t),
        ["SendStreamingMessage", "SendStreamingMessage"]
    );
    let t = run(&py_agent(
        dir.path(),
        "pyold",
        &["--compat", "--stream"],
        "protocol = \"0.3\"\nstreaming = false",
    ));
    assert_eq!(methods(&t), ["message/send", "message/send"]);
    let ifaces = t["a2a"]["card"]["interfaces"].as_array().unwrap();
    let versions: Vec<&str> = ifaces
        .iter()
        .map(|i| i["protocol_version"].as_str().unwrap())
        .collect();
    assert!(
        versions.contains(&"1.0") && versions.contains(&"0.3"),
        "{ifaces:?}"
    );
    // The JavaScript SDK's 0.3 compatibility layer, streamed.
    let t = run(&js_agent(
        dir.path(),
        "js03",
        &["--compat", "--stream"],
        "protocol = \"0.3\"",
    ));
    assert_eq!(t["a2a"]["protocol"], "0.3");
    assert_eq!(methods(&t), ["message/stream", "message/stream"]);
}

/// The faults pack at `--jobs 4` on `agent`: the verdict and the trace of each scenario.
fn run_faults(dir: &Path, agent: &Path) -> (Vec<Value>, Vec<Value>) {
    let pack = faults_pack(dir);
    let r = Wt::new(dir)
        .args(["run", "--jobs", "4"])
        .pack(&pack)
        .agent(agent)
        .run();
    // Some runs ERROR: exit 3.
    assert_eq!(r.code, 3, "{r}");
    (traces(&dir.join("runs")), scores(&dir.join("runs")))
}

fn verdict<'a>(scores: &'a [Value], traces: &[Value], id: &str) -> &'a Value {
    let run = &by_id(traces, id)["run_id"];
    scores.iter().find(|s| s["run_id"] == *run).unwrap()
}

#[test]
fn task_states_are_judged_honestly_on_the_python_sdk_plain_and_streamed() {
    for (name, args) in [("plain", &[][..]), ("streamed", &["--stream"][..])] {
        let dir = tmp();
        let agent = py_agent(dir.path(), name, args, "");
        let (all, scored) = run_faults(dir.path(), &agent);
        let v = |id| {
            verdict(&scored, &all, id)["verdict"]
                .as_str()
                .unwrap()
                .to_owned()
        };
        // input-required is a reply; the next turn answers the same task.
        assert_eq!(v("ask-back"), "PASS", "{name}");
        let ask = by_id(&all, "ask-back");
        assert_eq!(states(ask), ["input-required", "completed"]);
        let calls = ask["a2a"]["calls"].as_array().unwrap();
        assert_eq!(calls[0]["task_id"], calls[1]["task_id"]);
        assert_eq!(
            ask["turns"][0]["reply"],
            "Which order number is this about?"
        );
        // failed, rejected, auth-required: a turn error, the run ERROR, in one line each.
        for (id, says) in [
            (
                "warehouse-down",
                "failed: \"failed: the warehouse is down\"",
            ),
            ("refuse", "the agent rejected task"),
            ("sign-in", "the agent asks for authentication"),
        ] {
            assert_eq!(v(id), "ERROR", "{name} {id}");
            let turn = &by_id(&all, id)["turns"][0];
            let e = turn["error"].as_str().unwrap();
            assert!(e.contains(says) && !e.contains('\n'), "{name} {id}: {e}");
            assert!(turn.get("reply").is_none_or(Value::is_null), "{turn}");
        }
        assert_eq!(
            by_id(&all, "warehouse-down")["turns"][0]["error_kind"],
            "agent"
        );
        // Data and file parts are recorded as such, the file by reference.
        assert_eq!(v("receipt"), "PASS");
        let parts = by_id(&all, "receipt")["a2a"]["parts"].as_array().unwrap();
        assert_eq!(parts[0]["kind"], "data");
        assert_eq!(parts[0]["data"]["order"], "1234");
        assert_eq!(parts[1]["kind"], "file");
        assert_eq!(parts[1]["uri"], "https://shop.example/receipt.pdf");
    }
}

#[test]
fn a_forbidden_action_fails_the_constraint_layer_on_both_sdks() {
    for (name, agent) in [
        ("py", py_agent as fn(&Path, &str, &[&str], &str) -> PathBuf),
        ("js", js_agent),
    ] {
        let dir = tmp();
        let agent = agent(dir.path(), name, &["--policy", "forbidden"], "");
        let r = Wt::new(dir.path())
            .args([
                "run",
                "--runs",
                "1",
                "--jobs",
                "4",
                "--filter",
                "order-status",
            ])
            .agent(&agent)
            .run();
        assert_eq!(r.code, 1, "{r}");
        let s = &scores(&dir.path().join("runs"))[0];
        assert_eq!(s["verdict"], "FAIL", "{name}: {s}");
        assert_eq!(s["constraint"]["passed"], false, "{name}: {s}");
        assert_eq!(
            s["outcome"]["passed"], false,
            "{name}: a refund was made: {s}"
        );
    }
}

#[test]
fn an_agent_on_the_javascript_sdk_asks_back_and_fails_its_task_at_its_layer() {
    let dir = tmp();
    let agent = js_agent(dir.path(), "js", &["--stream"], "");
    let (all, scored) = run_faults(dir.path(), &agent);
    let v = |id| {
        verdict(&scored, &all, id)["verdict"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert_eq!(v("ask-back"), "PASS");
    assert_eq!(
        states(by_id(&all, "ask-back")),
        ["input-required", "completed"]
    );
    assert_eq!(v("warehouse-down"), "ERROR");
    let e = by_id(&all, "warehouse-down")["turns"][0]["error"]
        .as_str()
        .unwrap();
    assert!(e.contains("failed: the warehouse is down"), "{e}");
}

#[test]
fn a_task_still_working_at_the_deadline_is_cut_and_canceled() {
    let pack_of = |dir: &Path| {
        write_pack(
            dir,
            &[(
                "slow.toml",
                &order_scenario("slow", &["Where is order 1234? take your time"]),
            )],
        )
    };
    let agents = tmp();
    let a = agents.path();
    // 1.0 plain (the send never answers: the context's tasks are listed), 1.0 streamed,
    // the JavaScript SDK streamed, 0.3 streamed.
    for (name, agent) in [
        ("py", py_agent(a, "py", &[], "turn_timeout_s = 4")),
        (
            "pystream",
            py_agent(a, "pys", &["--stream"], "turn_timeout_s = 4"),
        ),
        ("js", js_agent(a, "js", &["--stream"], "turn_timeout_s = 4")),
        (
            "py03",
            py_agent(a, "py03", &["--only-0.3", "--stream"], "turn_timeout_s = 4"),
        ),
    ] {
        let dir = tmp();
        let r = Wt::new(dir.path())
            .args(["run", "--jobs", "4"])
            .pack(&pack_of(dir.path()))
            .agent(&agent)
            .run();
        assert_eq!(r.code, 3, "{name}: {r}");
        let t = &traces(&dir.path().join("runs"))[0];
        assert_eq!(t["turns"][0]["error_kind"], "timeout", "{name}: {t}");
        let m = methods(t);
        let cancel = match t["a2a"]["protocol"].as_str() {
            Some("0.3") => "tasks/cancel",
            _ => "CancelTask",
        };
        assert!(m.contains(&cancel.to_owned()), "{name}: {m:?}");
        let orphan = &t["a2a"]["orphans"][0];
        assert_eq!(orphan["canceled"], true, "{name}: {orphan}");
        assert!(orphan["task_id"].is_string(), "{name}: {orphan}");
        assert_eq!(orphan["state"], "working", "{name}: {orphan}");
    }
}

#[test]
fn a_debrief_converses_in_the_run_context() {
    let dir = tmp();
    let plugins = plugin_dir(dir.path(), &["wt_test_recorder"]);
    let agent = py_agent(dir.path(), "py", &[], "");
    let r = Wt::new(dir.path())
        .args([
            "run",
            "--runs",
            "1",
            "--filter",
            "order-status",
            "--hook",
            "recorder",
        ])
        .arg("--plugin-dir")
        .arg(&plugins)
        .agent(&agent)
        .run();
    assert_eq!(r.code, 0, "{r}");
    let t = &traces(&dir.path().join("runs"))[0];
    let calls = t["a2a"]["calls"].as_array().unwrap();
    assert!(
        calls.len() > t["turns"].as_array().unwrap().len(),
        "{calls:?}"
    );
    let context = t["a2a"]["context_ids"][0].as_str().unwrap();
    assert!(calls.iter().all(|c| c["context_id"] == context));
    let stderr = t["processes"][0]["stderr_tail"].as_str().unwrap();
    assert!(
        stderr.contains(&format!("context {context}: recorder probe")),
        "{stderr}"
    );
}

/// A Python SDK server the test starts itself, on a free port: a remote agent.
struct Remote {
    child: Child,
    url: String,
}

impl Remote {
    /// Started to require `Authorization: Bearer <key>` on every request.
    fn start(key: &str) -> Remote {
        Remote::spawn(&["--require-bearer", "REMOTE_KEY"], &[("REMOTE_KEY", key)])
    }

    /// Started with `args` and `env` besides its port.
    fn spawn(args: &[&str], env: &[(&str, &str)]) -> Remote {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(agent_python())
            .arg(workspace().join("tests/agents/a2a_sdk_agent.py"))
            .args(["--port", &port.to_string()])
            .args(args)
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let url = format!("http://127.0.0.1:{port}");
        let card = format!("127.0.0.1:{port}");
        assert!(
            poll_until(crate::harness::PATIENCE, || std::net::TcpStream::connect(
                &card
            )
            .is_ok()),
            "the remote agent never listened"
        );
        Remote { child, url }
    }
}

impl Drop for Remote {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_remote_agent_is_judged_on_its_replies_one_context_per_run_its_key_kept_secret() {
    let remote = Remote::start("sk-remote-secret-1234");
    let dir = tmp();
    let pack = write_pack(
        dir.path(),
        &[(
            "hello.toml",
            "id = \"hello\"\nruns = 3\nturns = [\"hello\"]\n[expect.outcome]\nreply_contains = [\"which order\"]\n",
        )],
    );
    let agent = agent_file(
        dir.path(),
        "remote.toml",
        &format!(
            "label = \"remote\"\nruntime = \"a2a\"\nurl = \"{}\"\napi_key_env = \"SHOP_A2A_KEY\"\n\
             headers = {{ X-Shop-Token = {{ env = \"SHOP_A2A_TOKEN\" }} }}\n",
            remote.url
        ),
    );
    let r = Wt::new(dir.path())
        .args(["run", "--jobs", "4"])
        .pack(&pack)
        .agent(&agent)
        .env("SHOP_A2A_KEY", "sk-remote-secret-1234")
        .env("SHOP_A2A_TOKEN", "tok-remote-secret-5678")
        .run();
    assert_eq!(r.code, 0, "{r}");
    assert!(r.stderr.contains("3/3 runs passed"), "{r}");
    let all = traces(&dir.path().join("runs"));
    let mut contexts: Vec<&str> = all
        .iter()
        .map(|t| t["a2a"]["context_ids"][0].as_str().unwrap())
        .collect();
    contexts.sort_unstable();
    contexts.dedup();
    assert_eq!(contexts.len(), 3);
    // A message, not a task: the reply, no task id.
    assert!(all[0]["a2a"]["calls"][0].get("task_id").is_none());
    assert!(all[0]["processes"].is_null());
    assert_eq!(all[0]["surface"]["tools"].as_array().map_or(0, Vec::len), 0);
    for (_, bytes) in crate::harness::files(&dir.path().join("runs")) {
        let text = String::from_utf8_lossy(&bytes);
        assert!(!text.contains("remote-secret"), "a secret was written");
    }
    // Without its key, the agent refuses: one line, before any run.
    let r = Wt::new(dir.path())
        .args(["run"])
        .pack(&pack)
        .agent(&agent)
        .env("SHOP_A2A_KEY", "sk-wrong-key-000000")
        .env("SHOP_A2A_TOKEN", "tok-remote-secret-5678")
        .run();
    assert_eq!(r.code, 3, "{r}");
    assert!(
        r.stderr.contains("agent card") && r.stderr.contains("HTTP 401"),
        "{r}"
    );
    assert!(!r.stderr.contains("sk-wrong-key"), "{r}");
}

/// One run of the hostile server in `mode`: its trace and the run's stderr.
fn hostile(mode: &str, extra: &str) -> (Value, String) {
    let dir = tmp();
    let pack = write_pack(
        dir.path(),
        &[(
            "ask.toml",
            "id = \"ask\"\nturns = [\"Where is order 1234?\"]\n[expect.outcome]\nreply_contains = [\"shipped\"]\n",
        )],
    );
    let agent = started(
        dir.path(),
        mode,
        &python_command("a2a_hostile.py", &["--mode", mode]),
        &format!("mcp = false\n{extra}"),
    );
    let r = Wt::new(dir.path())
        .args(["run", "--runs", "1"])
        .pack(&pack)
        .agent(&agent)
        .run();
    assert_eq!(r.code, 3, "{mode}: {r}");
    assert!(r.stderr.contains("0/1 runs passed"), "{mode}: {r}");
    let t = traces(&dir.path().join("runs")).remove(0);
    let s = &scores(&dir.path().join("runs"))[0];
    assert_eq!(s["verdict"], "ERROR", "{mode}: {s}");
    (t, r.stderr)
}

#[test]
fn every_bad_answer_is_one_clear_line_and_an_error() {
    for (mode, says, extra) in [
        ("card-not-json", "is not JSON", ""),
        ("no-interface", "names no interface", ""),
        ("other-origin", "not where the card was read", ""),
        ("rpc-error", "JSON-RPC error -32601 (method not found)", ""),
        ("agent-error", "JSON-RPC error -32603 (internal error)", ""),
        (
            "task-changes",
            "the task id changed under us: \"t1\", then \"t2\"",
            "",
        ),
        ("stream-cut", "the event stream was cut mid-event", ""),
        ("huge-artifact", "max_response_bytes", ""),
        ("silent", "timed out", "turn_timeout_s = 2"),
    ] {
        let (t, stderr) = hostile(mode, extra);
        let error = t["error"]
            .as_str()
            .or_else(|| t["turns"][0]["error"].as_str())
            .unwrap_or_else(|| panic!("{mode}: no error in {t}"));
        assert!(error.contains(says), "{mode}: {error}");
        assert!(!error.contains('\n'), "{mode}: {error}");
        assert!(stderr.contains(says), "{mode}: {stderr}");
        assert!(
            t["turns"]
                .as_array()
                .is_none_or(|ts| ts.iter().all(|x| x["reply"].is_null())),
            "{mode}: {t}"
        );
    }
}

#[test]
fn bad_a2a_agent_configs_are_usage_errors_naming_the_field() {
    let dir = tmp();
    for (toml, says) in [
        ("", "needs `url`"),
        (
            "url = \"http://127.0.0.1:9\"\nenv = { A = \"b\" }\n",
            "`env` applies to an agent wt starts",
        ),
        (
            "command = [\"srv\"]\nurl = \"http://127.0.0.1:9\"\n",
            "has no {port}",
        ),
        (
            "url = \"http://127.0.0.1:9\"\nprotocol = \"2.0\"\n",
            "`protocol` = \"2.0\"",
        ),
        (
            "url = \"http://127.0.0.1:9\"\nreply_field = \"x\"\n",
            "`reply_field` is not a setting of the `a2a` runtime",
        ),
    ] {
        let agent = agent_file(
            dir.path(),
            "bad.toml",
            &format!("label = \"bad\"\nruntime = \"a2a\"\n{toml}"),
        );
        let r = Wt::new(dir.path()).args(["run"]).agent(&agent).run();
        assert_eq!(r.code, 2, "{toml}: {r}");
        assert!(r.stderr.contains(says), "{toml}: {r}");
    }
}

/// A remote agent is judged on what it did to a world server it shares with `wt` (a `url`
/// server, which runs on its own): `wt` resets it and reads its state before and after each
/// run, so the world check passes only where the agent acted. Its tool calls, which `wt`
/// never sees, are never judged: a scenario that asks for them is refused.
#[test]
fn a_remote_agent_is_judged_on_the_world_server_it_shares_with_wt() {
    let shelf = crate::worlds::shelf();
    let remote = Remote::spawn(&[], &[("WT_MCP_URL", shelf.url.as_str())]);
    let dir = tmp();
    let scenario = |id: &str, turn: &str, extra: &str| {
        format!(
            "id = \"{id}\"\nruns = 2\nturns = [\"{turn}\"]\n\n[expect.outcome]\nworld = [{{ path = \"items\", equals = [\"vase\"] }}]\n{extra}"
        )
    };
    let pack = write_pack(
        dir.path(),
        &[
            ("acts.toml", &scenario("acts", "do: put item=vase", "")),
            ("idle.toml", &scenario("idle", "hello", "")),
        ],
    );
    std::fs::write(
        pack.join("pack.toml"),
        format!(
            "name = \"shared\"\n\n[world_server]\nurl = \"{}\"\nstate = {{ tool = \"shelf\" }}\nreset = [{{ tool = \"clear\" }}]\ntools = [\"put\", \"shelf\"]\n",
            shelf.url
        ),
    )
    .unwrap();
    let agent = agent_file(
        dir.path(),
        "remote.toml",
        &format!(
            "label = \"remote\"\nruntime = \"a2a\"\nurl = \"{}\"\n",
            remote.url
        ),
    );
    let r = Wt::new(dir.path())
        .args(["run", "--jobs", "2"])
        .pack(&pack)
        .agent(&agent)
        .run();
    assert_eq!(r.code, 1, "the idle runs fail: {r}");
    let (all, scored) = (
        traces(&dir.path().join("runs")),
        scores(&dir.path().join("runs")),
    );
    assert_eq!(all.len(), 4);
    for t in &all {
        let s = scored.iter().find(|s| s["run_id"] == t["run_id"]).unwrap();
        // Reset before each run; what the agent put there, read after it.
        assert_eq!(t["world"]["before"]["items"], serde_json::json!([]), "{t}");
        let (after, verdict) = match t["scenario_id"].as_str().unwrap() {
            "acts" => (serde_json::json!(["vase"]), "PASS"),
            _ => (serde_json::json!([]), "FAIL"),
        };
        assert_eq!(t["world"]["after"]["items"], after, "{t}");
        assert_eq!(s["verdict"], verdict, "{s}");
        // `wt` saw no tool call: the agent reached the server itself.
        assert_eq!(t["evidence"]["tool_calls"], serde_json::json!([]), "{t}");
    }

    // What it called cannot be judged: refused before any run, in one line.
    std::fs::write(
        pack.join("scenarios/calls.toml"),
        scenario(
            "calls",
            "do: put item=vase",
            "\n[expect.trajectory]\nrequired_tools = [\"put\"]\n",
        ),
    )
    .unwrap();
    let r = Wt::new(dir.path())
        .args(["run", "--out", "refused"])
        .pack(&pack)
        .agent(&agent)
        .run();
    assert_eq!(r.code, 2, "{r}");
    assert!(
        r.stderr.contains("scenario `calls` judges required tools")
            && r.stderr.contains("its tool calls are not seen"),
        "{r}"
    );
}
