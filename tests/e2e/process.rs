//! Real agents over MCP, end to end: the real `wt` starts a scripted Python agent built on
//! the official MCP SDK (`tests/agents/support_agent.py`) with the `process` runtime, in
//! session and one-shot mode, and that agent acts on the run's fixture world over MCP. Also:
//! the `http` runtime's `mcp_url`, the refusal of agents that cannot reach the world, agent
//! config checks, secrets in the agent's environment, and `wt doctor`.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::harness::{
    PATIENCE, TestServer, Wt, agent_python, command_agent, poll_until, scores, sh_agent, tmp,
    traces, wait_for, wait_for_journal_event, workspace, write_pack,
};

/// A pack with one scenario judged on its reply alone (no world, no tools).
fn reply_pack(dir: &Path, contains: &str) -> PathBuf {
    let s = format!(
        "id = \"echo\"\nturns = [\"hello there\"]\n[expect.outcome]\nreply_contains = [\"{contains}\"]\n"
    );
    write_pack(dir, &[("echo.toml", &s)])
}

fn run_pack(dir: &Path, pack: &Path, agent: &Path) -> crate::harness::Run {
    Wt::new(dir)
        .args(["run", "--pack"])
        .arg(pack)
        .arg("--agent")
        .arg(agent)
        .run()
}

fn agent_script() -> String {
    workspace()
        .join("tests/agents/support_agent.py")
        .display()
        .to_string()
}

/// A `process` agent config running the scripted agent with `args`, plus `extra` TOML. The
/// scripted agent tells the test what it did through files in `dir` (its pids, its state,
/// where it met the other run): its `[sandbox]` lets it write there.
fn process_agent(dir: &Path, name: &str, args: &[&str], extra: &str) -> PathBuf {
    scripted_agent(dir, name, args, extra, "")
}

/// [`process_agent`] with the network open: the tests of `wt`'s own MCP endpoints reaching
/// another run's address check what the endpoint refuses, which the kernel's refusal of
/// another run's port would otherwise hide (tests/e2e/sandbox.rs checks that one).
fn open_process_agent(dir: &Path, name: &str, args: &[&str], extra: &str) -> PathBuf {
    scripted_agent(dir, name, args, extra, "network = \"allow\"\n")
}

fn scripted_agent(dir: &Path, name: &str, args: &[&str], extra: &str, sandbox: &str) -> PathBuf {
    let mut command = vec![agent_python().display().to_string(), agent_script()];
    command.extend(args.iter().map(|a| (*a).to_owned()));
    let extra = format!(
        "{extra}\n[sandbox]\nwrite = [{:?}]\n{sandbox}",
        dir.display().to_string()
    );
    command_agent(dir, name, &command, &extra)
}

/// `wt run` of one `order-status` run on `agent` (a builder: add settings, then run).
fn order_status(dir: &Path, agent: &Path) -> Wt {
    Wt::new(dir)
        .args(["run", "--runs", "1", "--filter", "order-status", "--agent"])
        .arg(agent)
}

/// The scripted agent in session mode with `policy`, and room for a loaded machine's
/// Python start-up.
fn policy_agent(dir: &Path, policy: &str) -> PathBuf {
    process_agent(dir, policy, &["--policy", policy], "turn_timeout_s = 60.0")
}

fn by_scenario<'a>(all: &'a [Value], id: &str) -> Vec<&'a Value> {
    all.iter().filter(|t| t["scenario_id"] == id).collect()
}

#[test]
fn session_mode_agent_passes_the_demo_pack_acting_on_the_world_over_mcp() {
    let dir = tmp();
    let agent = process_agent(
        dir.path(),
        "py",
        &["--policy", "correct"],
        "turn_timeout_s = 60.0",
    );
    let r = Wt::new(dir.path())
        .args(["run", "--runs", "1", "--jobs", "3", "--agent"])
        .arg(&agent)
        .run();
    assert_eq!(r.code, 0, "{r}");
    assert!(r.stderr.contains("3/3 runs passed"), "{}", r.stderr);
    let traces = traces(&dir.path().join("runs"));
    let refund = by_scenario(&traces, "refund-damaged")[0];
    // Ground truth: the agent changed the run's world, and wt recorded each call.
    assert_eq!(refund["world"]["after"]["refunds"][0]["order_id"], "5678");
    let calls = refund["evidence"]["tool_calls"].as_array().unwrap();
    let names: Vec<&str> = calls.iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["lookup_order", "issue_refund"]);
    assert!(calls.iter().all(|c| c["source"] == "mcp"), "{calls:?}");
    assert_eq!(calls[0]["result"]["status"], "delivered");
    // Two turns of one session in one process: the agent remembered the order.
    let escalate = by_scenario(&traces, "escalate-human")[0];
    assert_eq!(escalate["world"]["after"]["tickets"][0]["order_id"], "9012");
    assert_eq!(escalate["turns"].as_array().unwrap().len(), 2);
    let procs = escalate["processes"].as_array().unwrap();
    assert_eq!(procs.len(), 1, "one process per run: {procs:?}");
    assert_eq!(procs[0]["exit"], "exited with status 0");
    assert!(procs[0].get("turn").is_none());
    assert!(
        procs[0]["stderr_tail"]
            .as_str()
            .unwrap()
            .contains("turn 1: Please let me talk to a human."),
        "{procs:?}"
    );
}

#[test]
fn one_shot_agent_passes_the_demo_pack_with_its_mcp_config_and_reply_field() {
    let dir = tmp();
    let state = dir.path().join("agent-state");
    std::fs::create_dir(&state).unwrap();
    let agent = process_agent(
        dir.path(),
        "cli",
        &[
            "--policy",
            "correct",
            "--input",
            "{input}",
            "--mcp-config",
            "{mcp_config}",
            "--session",
            "{session_id}",
            "--turn",
            "{turn}",
            "--json",
        ],
        &format!(
            "reply_field = \"result\"\nturn_timeout_s = 60.0\n[env]\nAGENT_STATE = \"{}\"\n",
            state.display()
        ),
    );
    let r = Wt::new(dir.path())
        .args(["run", "--runs", "1", "--jobs", "3", "--agent"])
        .arg(&agent)
        .run();
    assert_eq!(r.code, 0, "{r}");
    let traces = traces(&dir.path().join("runs"));
    let escalate = by_scenario(&traces, "escalate-human")[0];
    // One process per turn, each recorded with its turn.
    let procs = escalate["processes"].as_array().unwrap();
    let turns: Vec<&Value> = procs.iter().map(|p| &p["turn"]).collect();
    assert_eq!(turns, [&json!(0), &json!(1)], "{procs:?}");
    assert!(procs.iter().all(|p| p["status"] == 0));
    // The reply is the configured field of the JSON the agent printed, not its whole stdout.
    let reply = escalate["turns"][1]["reply"].as_str().unwrap();
    assert!(
        reply.starts_with("I've opened ticket #1 for order 9012"),
        "{reply}"
    );
    assert_eq!(escalate["world"]["after"]["tickets"][0]["order_id"], "9012");
    // The per-run MCP config file the agent read is gone with its run.
    let tail = procs[0]["stderr_tail"].as_str().unwrap();
    let config = tail
        .lines()
        .find_map(|l| l.strip_prefix("mcp_config="))
        .expect("the agent names its config");
    assert!(config.ends_with("run-0.mcp.json"), "{config}");
    assert!(!Path::new(config).exists(), "{config} outlived its run");
}

#[test]
fn a_forbidden_tool_called_over_mcp_fails_the_constraint_layer() {
    let dir = tmp();
    let agent = policy_agent(dir.path(), "forbidden");
    let r = order_status(dir.path(), &agent).run();
    assert_eq!(r.code, 1, "{r}");
    let s = &scores(&dir.path().join("runs"))[0];
    assert_eq!(s["verdict"], "FAIL");
    assert_eq!(s["constraint"]["passed"], false);
    let detail = s["constraint"]["detail"].as_str().unwrap();
    assert!(detail.contains("forbidden tool `issue_refund`"), "{detail}");
    // The refund really happened in the run's world, so the outcome layer sees it too.
    assert_eq!(s["outcome"]["passed"], false, "{s}");
}

#[test]
fn wrong_arguments_are_recorded_as_failed_calls_that_never_touch_the_world() {
    let dir = tmp();
    let agent = policy_agent(dir.path(), "wrong-args");
    let r = order_status(dir.path(), &agent).run();
    assert_eq!(r.code, 0, "{r}");
    let t = &traces(&dir.path().join("runs"))[0];
    let calls = t["evidence"]["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert_eq!(calls[0]["arguments"], json!({"order_id": 1234}));
    assert_eq!(calls[0]["result"], Value::Null);
    assert_eq!(calls[0]["source"], "mcp");
    let error = calls[0]["error"].as_str().unwrap();
    assert!(
        error.contains("arguments do not match the schema of `lookup_order`")
            && error.contains("/order_id"),
        "{error}"
    );
    assert!(calls[1].get("error").is_none());
    assert_eq!(
        (calls[0]["step"].clone(), calls[1]["step"].clone()),
        (json!(0), json!(1))
    );
}

#[test]
fn a_crashing_agent_is_error_with_its_stderr_tail_and_its_environment_is_explicit() {
    const KEY: &str = "sk-proc-SECRET-0f9e8d";
    let dir = tmp();
    let agent = process_agent(
        dir.path(),
        "crashy",
        &["--policy", "crash"],
        &format!(
            "env_passthrough = [\"PASSED_THROUGH\"]\n[env]\nAGENT_API_KEY = \"{KEY}\"\nDB_URL = \"postgres://app:pw-SECRET-77aa@db/x\"\n"
        ),
    );
    let r = order_status(dir.path(), &agent)
        .env("PASSED_THROUGH", "yes")
        .env("NOT_PASSED", "leaked")
        .run();
    assert_eq!(r.code, 3, "{r}");
    let runs = dir.path().join("runs");
    let s = &scores(&runs)[0];
    assert_eq!(s["verdict"], "ERROR");
    let error = s["error"].as_str().unwrap();
    assert!(
        error.contains("exited with status 1")
            && error.contains("RuntimeError: boom: the agent crashed"),
        "{error}"
    );
    let t = &traces(&runs)[0];
    assert_eq!(t["turns"][0]["error_kind"], "agent");
    let p = &t["processes"][0];
    assert_eq!(p["status"], 1);
    let tail = p["stderr_tail"].as_str().unwrap();
    assert!(tail.contains("PASSED_THROUGH=yes"), "{tail}");
    assert!(tail.contains("NOT_PASSED=unset"), "{tail}");
    assert!(tail.contains("AGENT_API_KEY=[redacted]"), "{tail}");
    assert!(
        tail.contains("DB_URL=postgres://app:[redacted]@db/x"),
        "{tail}"
    );
    for (name, bytes) in crate::harness::files(&runs) {
        let text = String::from_utf8_lossy(&bytes);
        assert!(
            !text.contains(KEY) && !text.contains("pw-SECRET-77aa"),
            "{name} holds a secret"
        );
    }
    assert!(!r.stderr.contains(KEY));
}

/// Processes of `pgid` still running once the kills sent to them have landed (SIGKILL is
/// delivered asynchronously; zombies are dead and do not count). Waits at most 10 s.
fn left_in_group(pgid: i64) -> Vec<String> {
    let mut alive = Vec::new();
    poll_until(std::time::Duration::from_secs(10), || {
        alive = alive_in_group(pgid);
        alive.is_empty()
    });
    alive
}

/// Processes of `pgid` that are running right now (zombies are dead and do not count).
fn alive_in_group(pgid: i64) -> Vec<String> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(Result::ok)
        .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
        .filter(|stat| {
            // pid (comm) state ppid pgrp ...: comm may hold spaces, so split after ')'.
            let Some((_, rest)) = stat.rsplit_once(") ") else {
                return false;
            };
            let fields: Vec<&str> = rest.split_whitespace().collect();
            fields.len() > 2 && fields[0] != "Z" && fields[2] == pgid.to_string()
        })
        .collect()
}

fn hang_and_check(extra: &str, args: &[&str], why: &str) {
    let dir = tmp();
    let pids = dir.path().join("pids.json");
    let mut all = vec!["--policy", "hang", "--pids", pids.to_str().unwrap()];
    all.extend(args);
    let agent = process_agent(dir.path(), "stuck", &all, extra);
    let r = order_status(dir.path(), &agent).run();
    assert_eq!(r.code, 3, "{r}");
    let s = &scores(&dir.path().join("runs"))[0];
    let error = s["error"].as_str().unwrap();
    assert!(
        error.contains(&format!("no reply within the {why}"))
            && error.contains("process group was killed"),
        "{error}"
    );
    let t = &traces(&dir.path().join("runs"))[0];
    assert_eq!(t["turns"][0]["error_kind"], "timeout");
    assert_eq!(t["processes"][0]["killed"], why, "{}", t["processes"]);
    let recorded: Value =
        serde_json::from_str(&std::fs::read_to_string(&pids).expect("the agent started")).unwrap();
    let pgid = recorded["pgid"].as_i64().unwrap();
    assert_eq!(
        recorded["pids"][0].as_i64(),
        Some(pgid),
        "the agent leads its own group"
    );
    let left = left_in_group(pgid);
    assert!(left.is_empty(), "still running in group {pgid}: {left:?}");
}

#[test]
fn a_hanging_session_agent_is_killed_at_the_turn_deadline_with_its_whole_group() {
    hang_and_check("turn_timeout_s = 5.0", &[], "turn timeout");
}

#[test]
fn a_hanging_one_shot_agent_is_killed_at_the_run_deadline_with_its_whole_group() {
    hang_and_check(
        "turn_timeout_s = 60.0\nrun_timeout_s = 5.0",
        &[
            "--input",
            "{input}",
            "--mcp-config",
            "{mcp_config}",
            "--session",
            "{session_id}",
        ],
        "run timeout",
    );
}

const ISOLATION_TOOLS: &str = r#"
[[tools]]
name = "lookup_order"
parameters = { type = "object", properties = { order_id = { type = "string" } }, required = ["order_id"] }
effect = { kind = "read", path = "orders", key_arg = "order_id" }

[[tools]]
name = "add_note"
parameters = { type = "object", properties = { text = { type = "string" } }, required = ["text"] }
effect = { kind = "append", path = "notes", value_arg = "text" }
"#;

fn isolation_scenario(id: &str, mine: &str, theirs: &str) -> String {
    format!(
        "id = \"{id}\"\nturns = [\"Check orders {mine} and {theirs}.\"]\n{ISOLATION_TOOLS}\n[world]\nnotes = []\n[world.orders.{mine}]\nstatus = \"shipped\"\n"
    )
}

#[test]
fn two_runs_at_once_see_only_their_own_world() {
    let dir = tmp();
    let meet = dir.path().join("meet");
    std::fs::create_dir(&meet).unwrap();
    let left = isolation_scenario("left", "1111", "2222");
    let right = isolation_scenario("right", "2222", "1111");
    let pack = write_pack(dir.path(), &[("left.toml", &left), ("right.toml", &right)]);
    let agent = open_process_agent(
        dir.path(),
        "pair",
        &["--policy", "isolation", "--meet", meet.to_str().unwrap()],
        "turn_timeout_s = 60.0",
    );
    let r = Wt::new(dir.path())
        .args(["run", "--jobs", "2", "--pack"])
        .arg(&pack)
        .arg("--agent")
        .arg(&agent)
        .run();
    let traces = traces(&dir.path().join("runs"));
    // On failure, each agent's own words: the end of its stderr.
    let tails: Vec<&Value> = traces
        .iter()
        .flat_map(|t| t["processes"].as_array().into_iter().flatten())
        .map(|p| &p["stderr_tail"])
        .collect();
    assert_eq!(r.code, 0, "{r}\nagents' stderr: {tails:#?}");
    for (id, mine) in [("left", "1111"), ("right", "2222")] {
        let t = by_scenario(&traces, id)[0];
        // Both agents met, so both runs were live at once; each found only its own order,
        // and a session opened on its own address was refused at the other's.
        assert_eq!(
            t["turns"][0]["reply"], "own=found peer=missing cross-session=404",
            "{id}"
        );
        assert_eq!(
            t["world"]["after"]["notes"],
            json!([format!("note from {mine}")]),
            "{id}"
        );
    }
}

#[test]
fn the_address_of_an_ended_run_is_refused() {
    let dir = tmp();
    let meet = dir.path().join("meet");
    std::fs::create_dir(&meet).unwrap();
    let s = isolation_scenario("twice", "1111", "2222")
        .replace("id = \"twice\"", "id = \"twice\"\nruns = 2");
    let pack = write_pack(dir.path(), &[("twice.toml", &s)]);
    let agent = open_process_agent(
        dir.path(),
        "late",
        &["--policy", "late", "--meet", meet.to_str().unwrap()],
        "turn_timeout_s = 60.0",
    );
    // One lane: the second run starts after the first has ended.
    let r = Wt::new(dir.path())
        .args(["run", "--jobs", "1", "--pack"])
        .arg(&pack)
        .arg("--agent")
        .arg(&agent)
        .run();
    assert_eq!(r.code, 0, "{r}");
    let traces = traces(&dir.path().join("runs"));
    let second = traces.iter().find(|t| t["run_index"] == 1).unwrap();
    assert_eq!(second["turns"][0]["reply"], "old address answered HTTP 404");
}

/// A minimal MCP client for the test service below: the legacy handshake, then one call.
fn mcp_call(url: &str, name: &str, args: Value) -> Value {
    let http = reqwest::blocking::Client::new();
    let post = |body: Value, session: Option<&str>| {
        let mut req = http
            .post(url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body.to_string());
        if let Some(s) = session {
            req = req
                .header("mcp-session-id", s)
                .header("mcp-protocol-version", "2025-03-26");
        }
        req.send().unwrap()
    };
    let init = post(
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-03-26", "capabilities": {},
            "clientInfo": {"name": "svc", "version": "1"}}}),
        None,
    );
    let session = init.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let _ = init.text();
    let _ = post(
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        Some(&session),
    )
    .text();
    let text = post(
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name, "arguments": args}}),
        Some(&session),
    )
    .text()
    .unwrap();
    text.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
        .find(|v| v.get("result").is_some() || v.get("error").is_some())
        .or_else(|| serde_json::from_str(&text).ok())
        .unwrap_or(Value::Null)
}

#[test]
fn an_http_service_acts_on_the_world_through_the_mcp_url_of_its_inject() {
    let server = TestServer::start(|req| match (req.method.as_str(), req.url.as_str()) {
        ("GET", "/health") | ("POST", "/reset") => (200, "{}".into()),
        ("POST", "/inject") => {
            let body: Value = serde_json::from_str(&req.body).unwrap();
            let url = body["mcp_url"].as_str().unwrap_or_default().to_owned();
            let found = mcp_call(&url, "lookup_order", json!({"order_id": "5678"}));
            let refund = mcp_call(
                &url,
                "issue_refund",
                json!({"order_id": "5678", "reason": "arrived damaged"}),
            );
            let reply = json!({
                "session_id": body["session_id"],
                "reply": format!("I've issued a refund for order 5678 ({} / {}).",
                    found["result"]["content"][0]["text"], refund["result"]["content"][0]["text"]),
                "tool_calls": [{"name": "send_email", "arguments": {"to": "customer"}, "result": "sent"}],
            });
            (200, reply.to_string())
        }
        _ => (404, "{}".into()),
    });
    let dir = tmp();
    let agent = dir.path().join("svc.toml");
    std::fs::write(
        &agent,
        format!(
            "label = \"svc\"\nruntime = \"http\"\nendpoint = \"{}\"\nturn_timeout_s = 20.0\n",
            server.base
        ),
    )
    .unwrap();
    let r = Wt::new(dir.path())
        .args([
            "run",
            "--filter",
            "refund-damaged",
            "--runs",
            "1",
            "--agent",
        ])
        .arg(&agent)
        .run();
    assert_eq!(r.code, 0, "{r}");
    let t = &traces(&dir.path().join("runs"))[0];
    assert_eq!(t["world"]["after"]["refunds"][0]["order_id"], "5678");
    let calls = t["evidence"]["tool_calls"].as_array().unwrap();
    // The calls made through MCP first, then the one the service reported, numbered after.
    let shown: Vec<(&str, Value, Value)> = calls
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap(),
                c["step"].clone(),
                c["source"].clone(),
            )
        })
        .collect();
    assert_eq!(
        shown,
        [
            ("lookup_order", json!(0), json!("mcp")),
            ("issue_refund", json!(1), json!("mcp")),
            ("send_email", json!(2), Value::Null),
        ]
    );
    let inject: Value = serde_json::from_str(
        &server
            .seen()
            .iter()
            .find(|s| s.url == "/inject")
            .unwrap()
            .body,
    )
    .unwrap();
    let url = inject["mcp_url"].as_str().unwrap();
    assert!(
        url.starts_with("http://127.0.0.1:") && url.ends_with("/mcp"),
        "{url}"
    );
}

#[test]
fn an_agent_that_cannot_reach_the_world_is_refused_scenarios_that_judge_it() {
    let dir = tmp();
    let agent = dir.path().join("blind.toml");
    std::fs::write(
        &agent,
        "label = \"blind\"\nruntime = \"http\"\nendpoint = \"http://127.0.0.1:9\"\nmcp = false\n",
    )
    .unwrap();
    let r = Wt::new(dir.path())
        .args(["run", "--agent"])
        .arg(&agent)
        .run();
    assert_eq!(r.code, 2, "{r}");
    let lines: Vec<&str> = r.stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{}", r.stderr);
    assert!(
        lines[0].contains("scenario `escalate-human` judges world checks")
            && lines[0].contains("agent `blind` cannot reach the fixture world"),
        "{}",
        lines[0]
    );
    assert!(!dir.path().join("runs").exists());
}

#[test]
fn bad_process_agent_configs_are_usage_errors_naming_the_field() {
    let dir = tmp();
    for (extra, field) in [
        ("command = [\"agent\", \"{inptu}\"]", "{inptu}"),
        (
            "command = [\"agent\"]\nrun_timeout_s = 90000.0",
            "`run_timeout_s`",
        ),
        ("command = [\"agent\"]\n[env]\nWT_RUN_ID = \"x\"", "`env`"),
        (
            "command = [\"agent\"]\nenv_passthrough = [\"NO_SUCH_VAR_FOR_WT\"]",
            "NO_SUCH_VAR_FOR_WT",
        ),
        (
            "command = [\"agent\", \"{mcp_config}\"]\nmcp = false",
            "mcp = false",
        ),
        ("", "`command`"),
    ] {
        let agent = dir.path().join("a.toml");
        std::fs::write(
            &agent,
            format!("label = \"a\"\nruntime = \"process\"\n{extra}\n"),
        )
        .unwrap();
        let r = Wt::new(dir.path())
            .args(["run", "--agent"])
            .arg(&agent)
            .run();
        assert_eq!(r.code, 2, "{extra}: {r}");
        assert!(r.stderr.contains(field), "{extra}: {}", r.stderr);
    }
    let agent = dir.path().join("o.toml");
    std::fs::write(
        &agent,
        "label = \"o\"\nruntime = \"openai\"\nendpoint = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\nmcp = true\n",
    )
    .unwrap();
    let r = Wt::new(dir.path())
        .args(["run", "--agent"])
        .arg(&agent)
        .run();
    assert_eq!(r.code, 2, "{r}");
    assert!(
        r.stderr.contains(
            "line 5: `mcp` is not a setting of the `openai` runtime (it is one of the http, process and a2a runtimes)"
        ),
        "{}",
        r.stderr
    );
}

#[test]
fn doctor_checks_a_process_agent_with_a_fresh_process_per_session_and_its_state_dir() {
    let dir = tmp();
    let state = dir.path().join("state");
    std::fs::create_dir(&state).unwrap();
    std::fs::write(state.join("memory.json"), "{}").unwrap();
    let agent = process_agent(
        dir.path(),
        "py",
        &["--policy", "correct"],
        &format!("turn_timeout_s = 60.0\nstate_dir = \"{}\"", state.display()),
    );
    let baseline = dir.path().join("baseline.json");
    let r = Wt::new(dir.path())
        .args(["doctor", "--agent"])
        .arg(&agent)
        .arg("--write-baseline")
        .arg(&baseline)
        .run();
    assert_eq!(r.code, 0, "{r}");
    assert!(r.stdout.contains("ok   reachable"), "{}", r.stdout);
    assert!(r.stdout.contains("ok   reset canary"), "{}", r.stdout);
    assert!(r.stdout.contains("ok   state probe"), "{}", r.stdout);
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&baseline).unwrap()).unwrap();
    assert_eq!(doc["state"]["files"]["memory.json"]["bytes"], 2, "{doc}");
}

#[test]
fn a_one_shot_reply_is_stdout_and_a_failing_exit_is_an_agent_error() {
    let dir = tmp();
    let pack = reply_pack(dir.path(), "you said: hello there (turn 0)");
    // $0 is {input}; WT_TURN is set by wt.
    let ok = sh_agent(
        dir.path(),
        "echo",
        "printf 'you said: %s (turn %s)\\n' \"$0\" \"$WT_TURN\"",
        &["{input}"],
        "mcp = false",
    );
    let r = run_pack(dir.path(), &pack, &ok);
    assert_eq!(r.code, 0, "{r}");
    let t = &traces(&dir.path().join("runs"))[0];
    assert_eq!(t["turns"][0]["reply"], "you said: hello there (turn 0)");
    assert_eq!(t["processes"][0]["turn"], 0);
    assert_eq!(t["surface"]["tools"], json!([]));

    let dir = tmp();
    let pack = reply_pack(dir.path(), "x");
    let failing = sh_agent(
        dir.path(),
        "fails",
        "echo oops-on-stderr >&2; exit 3",
        &["{input}"],
        "mcp = false",
    );
    let r = run_pack(dir.path(), &pack, &failing);
    assert_eq!(r.code, 3, "{r}");
    let t = &traces(&dir.path().join("runs"))[0];
    assert_eq!(t["turns"][0]["error_kind"], "agent");
    let error = t["turns"][0]["error"].as_str().unwrap();
    assert!(
        error.contains("exited with status 3") && error.contains("oops-on-stderr"),
        "{error}"
    );
    assert_eq!(t["processes"][0]["status"], 3);
}

#[test]
fn session_protocol_errors_end_the_turn_as_protocol_errors() {
    for (name, script, extra, why) in [
        (
            "chatty",
            "read -r line; echo 'thinking...'; sleep 30",
            "",
            "is not a JSON object",
        ),
        (
            "verbose",
            "read -r line; head -c 3000 /dev/zero | tr '\\0' a; echo; sleep 30",
            "max_response_bytes = 1024",
            "longer than 1024 bytes (max_response_bytes)",
        ),
        (
            "confused",
            "read -r line; echo '{\"type\": \"reply\", \"turn\": 7, \"text\": \"hi\"}'; sleep 30",
            "",
            "answered turn 7, expected 0",
        ),
    ] {
        let dir = tmp();
        let pack = reply_pack(dir.path(), "hi");
        let agent = sh_agent(
            dir.path(),
            name,
            script,
            &[],
            &format!("mcp = false\n{extra}"),
        );
        let r = run_pack(dir.path(), &pack, &agent);
        assert_eq!(r.code, 3, "{name}: {r}");
        let t = &traces(&dir.path().join("runs"))[0];
        assert_eq!(t["turns"][0]["error_kind"], "protocol", "{name}");
        let error = t["turns"][0]["error"].as_str().unwrap();
        assert!(error.contains(why), "{name}: {error}");
        // The untrustworthy process was killed, not left to its sleep.
        assert_eq!(
            t["processes"][0]["killed"], "protocol error",
            "{name}: {}",
            t["processes"]
        );
    }
}

#[test]
fn a_session_agent_that_ignores_the_end_of_its_input_is_killed_after_the_grace() {
    let dir = tmp();
    let pack = reply_pack(dir.path(), "ok");
    let agent = sh_agent(
        dir.path(),
        "stubborn",
        "read -r line; echo '{\"type\": \"reply\", \"text\": \"ok\"}'; trap '' HUP TERM; while :; do sleep 1; done",
        &[],
        "mcp = false",
    );
    let r = run_pack(dir.path(), &pack, &agent);
    assert_eq!(r.code, 0, "{r}");
    let t = &traces(&dir.path().join("runs"))[0];
    assert_eq!(
        t["processes"][0]["killed"], "end of run",
        "{}",
        t["processes"]
    );
    assert_eq!(t["processes"][0]["exit"], "killed by wt (end of run)");
}

/// Starts `wt run` on a hanging agent, waits until the agent recorded its group and its
/// turn began, sends SIGINT `signals` times, and checks that wt exits 130 leaving nothing
/// of the group.
fn interrupt_hanging_agent(signals: usize) {
    let dir = tmp();
    let pids = dir.path().join("pids.json");
    let agent = process_agent(
        dir.path(),
        "stuck",
        &["--policy", "hang", "--pids", pids.to_str().unwrap()],
        "turn_timeout_s = 120.0",
    );
    let wt = order_status(dir.path(), &agent)
        .env("WT_GRACE_S", "0.5")
        .start();
    // The agent writes the file as it starts its grandchild: wait for all of it.
    let mut recorded = Value::Null;
    wait_for("the agent to record its process group", PATIENCE, || {
        recorded = std::fs::read_to_string(&pids)
            .ok()
            .and_then(|text| serde_json::from_str(&text).ok())
            .unwrap_or(Value::Null);
        recorded["pgid"].is_i64()
    });
    wait_for_journal_event(&dir.path().join("runs"), "TurnStarted");
    let pgid = recorded["pgid"].as_i64().unwrap();
    assert!(!alive_in_group(pgid).is_empty(), "the agent runs");
    for n in 0..signals {
        if n > 0 {
            // A second signal is one only once `wt` has taken the first.
            wt.wait_for_stderr("SIGINT: finishing the runs in flight");
        }
        wt.signal("INT");
    }
    let r = wt.finish();
    assert_eq!(r.code, 130, "{r}");
    let left = left_in_group(pgid);
    assert!(left.is_empty(), "still running in group {pgid}: {left:?}");
}

#[test]
fn stopping_wt_kills_the_agents_group_after_the_grace_period() {
    interrupt_hanging_agent(1);
}

#[test]
fn stopping_wt_at_once_still_kills_the_agents_group() {
    interrupt_hanging_agent(2);
}

#[test]
fn an_http_agent_without_mcp_gets_no_address_and_is_offered_no_tools() {
    let server = TestServer::start(|req| match (req.method.as_str(), req.url.as_str()) {
        ("GET", "/health") | ("POST", "/reset") => (200, "{}".into()),
        ("POST", "/inject") => {
            let body: Value = serde_json::from_str(&req.body).unwrap();
            (
                200,
                json!({"reply": "hi", "session_id": body["session_id"]}).to_string(),
            )
        }
        _ => (404, "{}".into()),
    });
    let dir = tmp();
    let s = format!(
        "id = \"chat\"\nturns = [\"hello\"]\n{ISOLATION_TOOLS}\n[world]\nnotes = []\norders = {{}}\n[expect.outcome]\nreply_contains = [\"hi\"]\n"
    );
    let pack = write_pack(dir.path(), &[("chat.toml", &s)]);
    let agent = dir.path().join("blind.toml");
    std::fs::write(
        &agent,
        format!(
            "label = \"blind\"\nruntime = \"http\"\nendpoint = \"{}\"\nmcp = false\n",
            server.base
        ),
    )
    .unwrap();
    let r = run_pack(dir.path(), &pack, &agent);
    assert_eq!(r.code, 0, "{r}");
    let inject: Value = serde_json::from_str(
        &server
            .seen()
            .iter()
            .find(|s| s.url == "/inject")
            .unwrap()
            .body,
    )
    .unwrap();
    assert!(inject.get("mcp_url").is_none(), "{inject}");
    let t = &traces(&dir.path().join("runs"))[0];
    assert_eq!(t["surface"]["tools"], json!([]));
}

#[test]
fn a_reply_that_is_not_utf8_is_a_protocol_error_in_both_modes() {
    let dir = tmp();
    // Session mode: one JSON line per turn whose text holds a byte that is no UTF-8.
    let session = r#"while read -r _; do printf '{"type":"reply","text":"shipped \377"}\n'; done"#;
    // One-shot mode: the whole stdout is the reply.
    let one_shot = r#"printf 'shipped \377\n'"#;
    for (name, command) in [
        ("session", vec!["sh", "-c", session]),
        ("one-shot", vec!["sh", "-c", one_shot, "sh", "{input}"]),
    ] {
        let agent = dir.path().join(format!("{name}.toml"));
        std::fs::write(
            &agent,
            format!(
                "label = \"{name}\"\nruntime = \"process\"\ncommand = {}\n",
                serde_json::to_string(&command).unwrap()
            ),
        )
        .unwrap();
        let out = format!("runs-{name}");
        let r = Wt::new(dir.path())
            .args([
                "run", "--runs", "1", "--filter", "refund", "--out", &out, "--agent",
            ])
            .arg(&agent)
            .run();
        assert_eq!(r.code, 3, "{name}: {r}");
        let t = &traces(&dir.path().join(&out))[0];
        assert_eq!(t["turns"][0]["error_kind"], "protocol", "{name}: {t}");
        let error = t["turns"][0]["error"].as_str().unwrap();
        assert!(error.contains("not valid UTF-8"), "{name}: {error}");
    }
}

#[test]
fn the_official_python_client_keeps_one_connection_for_all_its_calls() {
    let dir = tmp();
    let command = [
        agent_python().display().to_string(),
        workspace()
            .join("tests/agents/mcp_reuse_agent.py")
            .display()
            .to_string(),
        "100".to_owned(),
    ];
    let agent = command_agent(dir.path(), "reuse", &command, "turn_timeout_s = 120");
    let r = order_status(dir.path(), &agent).run();
    let t = &traces(&dir.path().join("runs"))[0];
    let reply = t["turns"][0]["reply"].as_str().unwrap_or_default();
    let left: usize = reply
        .strip_prefix("calls=100 connections=")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{reply:?}: {r}"));
    // One connection is two sockets (both ends on this machine); a reconnecting client left
    // about 100 in TIME-WAIT.
    assert!(left <= 4, "{left} sockets after 100 calls: {reply}");
    assert_eq!(t["evidence"]["tool_calls"].as_array().unwrap().len(), 100);
}
