//! Worlds with logic: MCP servers as scenario worlds, through the real `wt`.
//!
//! - The example pack `examples/memory-world` runs on the reference memory server from the npm
//!   registry (`@modelcontextprotocol/server-memory`, installed by `tests/run.sh`), judged from
//!   the server's own state and its graph file: a scripted `process` agent over MCP (official
//!   Python SDK) and the `openai` runtime on fakellm, each right and wrong.
//! - `tests/worlds/flaky_server.py` breaks on purpose (exits, hangs, writes garbage, will not
//!   start) — each costs only its run; `tests/worlds/shelf_server.py` (official Python SDK,
//!   streamable HTTP) is a `url` world shared by every run, reset between them.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::fixtures::only_whole_files;
use crate::gateway::FakeLlm;
use crate::harness::{
    PATIENCE, Wt, agent_python, command_agent, path_with_world_servers, poll_until, scores, tmp,
    traces, workspace,
};

fn memory_pack() -> PathBuf {
    workspace().join("examples/memory-world")
}

/// The scripted MCP agent (`tests/agents/world_agent.py`) with `policy`.
pub(crate) fn world_agent(dir: &Path, policy: &str) -> PathBuf {
    let command = [
        agent_python().display().to_string(),
        workspace()
            .join("tests/agents/world_agent.py")
            .display()
            .to_string(),
        "--policy".into(),
        policy.into(),
    ];
    command_agent(dir, policy, &command, "turn_timeout_s = 60.0\n")
}

/// `wt run` of `pack` on the world agent that follows its turns' scripts.
fn scripted(dir: &Path, pack: &Path) -> Wt {
    Wt::new(dir)
        .arg("run")
        .arg("--pack")
        .arg(pack)
        .arg("--agent")
        .arg(world_agent(dir, "script"))
}

pub(crate) fn by_scenario(out: &Path) -> std::collections::BTreeMap<String, (Value, Value)> {
    let scores = scores(out);
    traces(out)
        .into_iter()
        .map(|t| {
            let s = scores
                .iter()
                .find(|s| s["run_id"] == t["run_id"])
                .expect("a score beside each trace")
                .clone();
            (
                format!(
                    "{}#{}",
                    t["scenario_id"].as_str().unwrap(),
                    t["run_index"].as_u64().unwrap()
                ),
                (t, s),
            )
        })
        .collect()
}

pub(crate) fn failed_layers(score: &Value) -> Vec<&str> {
    ["outcome", "trajectory", "constraint", "integrity"]
        .into_iter()
        .filter(|l| score[*l]["passed"] == false)
        .collect()
}

fn run_memory(dir: &Path, agent: &Path, extra: &[&str]) -> (crate::harness::Run, PathBuf) {
    let out = dir.join(format!(
        "runs-{}",
        agent.file_stem().unwrap().to_string_lossy()
    ));
    let r = Wt::new(dir)
        .arg("run")
        .arg("--pack")
        .arg(memory_pack())
        .args(extra.iter().copied())
        .arg("--agent")
        .arg(agent)
        .arg("--out")
        .arg(&out)
        .env("PATH", path_with_world_servers())
        .run();
    (r, out)
}

#[test]
fn the_memory_world_judges_a_process_agent_from_the_servers_own_state() {
    let dir = tmp();
    let (r, out) = run_memory(
        dir.path(),
        &world_agent(dir.path(), "correct"),
        &["--jobs", "2"],
    );
    assert_eq!(r.code, 0, "{r}");
    let runs = by_scenario(&out);
    let (t, s) = &runs["record-delivery#0"];
    assert_eq!(s["verdict"], "PASS", "{s:#}");
    // The call went through wt's MCP door to the memory server, and is recorded as such.
    let call = &t["evidence"]["tool_calls"][0];
    assert_eq!(call["name"], "add_observations");
    assert_eq!(call["source"], "mcp");
    assert_eq!(call["server"], "memory");
    assert_eq!(
        call["result"]["results"][0]["addedObservations"],
        json!(["status: delivered"])
    );
    // The state before is what the setup calls made; after, the server's own graph.
    let world = &t["world"];
    assert_eq!(
        world["before"]["entities"][0]["observations"],
        json!(["status: shipped", "item: kettle"])
    );
    assert_eq!(
        world["after"]["entities"][0]["observations"],
        json!(["status: shipped", "item: kettle", "status: delivered"])
    );
    // The graph file the server wrote in the run's scratch directory, as checked.
    let file = &world["files"]["memory.jsonl"];
    assert_eq!(file["exists"], true);
    assert!(
        file["text"].as_str().unwrap().contains("status: delivered"),
        "{file}"
    );
    assert_eq!(world["server"]["name"], "memory");
    assert!(
        world["server"]["stderr_tail"]
            .as_str()
            .unwrap()
            .contains("Knowledge Graph MCP Server running on stdio"),
        "{world:#}"
    );
    // Tools not in `tools` are neither offered nor callable: the surface lists exactly four.
    let offered: Vec<&str> = t["surface"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        offered,
        [
            "open_nodes",
            "search_nodes",
            "add_observations",
            "delete_entities"
        ]
    );
    let (t, s) = &runs["order-status#0"];
    assert_eq!(s["verdict"], "PASS", "{s:#}");
    assert!(
        t["turns"][0]["reply"]
            .as_str()
            .unwrap()
            .contains("delivered")
    );
    // The journal tells the same story: each forwarded call is a step of its turn.
    let journal = crate::harness::journal(&out);
    assert!(
        journal.iter().any(|e| e["event"] == "StepDone"
            && e["tool"] == "open_nodes"
            && e["server"] == "memory"),
        "{journal:#?}"
    );
}

#[test]
fn a_wrong_or_forbidden_agent_fails_on_the_servers_state_and_its_files() {
    let dir = tmp();
    let (r, out) = run_memory(
        dir.path(),
        &world_agent(dir.path(), "wrong"),
        &["--jobs", "2", "--hook", "debrief"],
    );
    assert_eq!(r.code, 1, "{r}");
    let runs = by_scenario(&out);
    let (_, s) = &runs["record-delivery#0"];
    assert_eq!(failed_layers(s), ["outcome"], "{s:#}");
    let detail = s["outcome"]["detail"].as_str().unwrap();
    assert!(
        detail.contains(
            "`entities.0.observations.2` is \"status: lost\", expected \"status: delivered\""
        ),
        "{detail}"
    );
    assert!(
        detail.contains("file `memory.jsonl`: `0.observations.2` is \"status: lost\""),
        "{detail}"
    );
    let (_, s) = &runs["order-status#0"];
    assert_eq!(failed_layers(s), ["outcome", "trajectory"], "{s:#}");
    // The report shows, for a failed run, which server ran each call and how it ended.
    let html = Wt::new(dir.path())
        .arg("report")
        .arg(&out)
        .args(["--format", "html"])
        .run();
    assert_eq!(html.code, 0, "{html}");
    assert!(
        html.stdout.contains("world server memory"),
        "{}",
        html.stdout
    );
    assert!(
        html.stdout
            .contains("Knowledge Graph MCP Server running on stdio")
    );

    // The server outlives the scoring: a hook's converse turn (debrief) reaches it, and it
    // is stopped when the run ends.
    let debrief = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.to_string_lossy().ends_with(".debrief.json")
                && std::fs::read_to_string(p)
                    .unwrap()
                    .contains("record-delivery")
        })
        .unwrap_or_else(|| {
            panic!(
                "no debrief of the failed record-delivery run in {:?}\n{r}",
                std::fs::read_dir(&out)
                    .unwrap()
                    .map(|e| e.unwrap().file_name())
                    .collect::<Vec<_>>()
            )
        });
    let debrief: Value = serde_json::from_str(&std::fs::read_to_string(debrief).unwrap()).unwrap();
    assert_eq!(
        debrief["reply"],
        "Looking again, order-1234 shows: status: shipped, item: kettle, status: lost",
        "{debrief:#}"
    );
    let (t, _) = &runs["record-delivery#0"];
    assert_eq!(
        t["world"]["server"]["exit"], "stopped by wt (its run ended)",
        "{t:#}"
    );

    let (r, out) = run_memory(
        dir.path(),
        &world_agent(dir.path(), "forbidden"),
        &["--filter", "record-delivery"],
    );
    assert_eq!(r.code, 1, "{r}");
    let runs = by_scenario(&out);
    let (t, s) = &runs["record-delivery#0"];
    assert!(failed_layers(s).contains(&"constraint"), "{s:#}");
    // The deletion happened in the server, and the state shows it.
    assert_eq!(t["world"]["after"]["entities"].as_array().unwrap().len(), 1);
}

/// fakellm as the model of the `openai` runtime: the harness's own tool loop calls the
/// memory server's tools through wt.
const MEMORY_RULES: &str = r#"
rules:
  - name: recorded
    when:
      messages_contain: "addedObservations"
    respond:
      content: "Done: order 1234 is recorded as delivered."
  - name: answered
    when:
      messages_contain: "toaster"
    respond:
      content: "Order 5678 has been delivered."
  - name: record
    when:
      messages_contain: "arrived"
    respond:
      tool_calls:
        - name: add_observations
          arguments: {observations: [{entityName: "order-1234", contents: ["STATUS"]}]}
  - name: look
    when:
      messages_contain: "5678"
    respond:
      tool_calls:
        - name: open_nodes
          arguments: {names: ["order-5678"]}
"#;

#[test]
fn the_memory_world_judges_the_openai_runtime_on_fakellm() {
    for (status, verdict) in [("status: delivered", "PASS"), ("status: lost", "FAIL")] {
        let dir = tmp();
        let llm = FakeLlm::start(dir.path(), &MEMORY_RULES.replace("STATUS", status));
        let agent = crate::harness::agent_file(
            dir.path(),
            "oa.toml",
            &format!(
                "label = \"oa\"\nruntime = \"openai\"\nmodel = \"m\"\nendpoint = \"{}/v1\"\n",
                llm.base
            ),
        );
        let (r, out) = run_memory(dir.path(), &agent, &[]);
        let runs = by_scenario(&out);
        let (t, s) = &runs["record-delivery#0"];
        assert_eq!(s["verdict"], verdict, "{status}: {s:#}\n{r}");
        let call = &t["evidence"]["tool_calls"][0];
        assert_eq!(call["server"], "memory");
        assert!(
            call.get("source").is_none(),
            "the harness's own loop: {call}"
        );
        assert_eq!(
            t["world"]["after"]["entities"][0]["observations"][2],
            json!(status)
        );
        let (_, s) = &runs["order-status#0"];
        assert_eq!(s["verdict"], "PASS", "{s:#}");
        assert_eq!(r.code, if verdict == "PASS" { 0 } else { 1 }, "{r}");
    }
}

#[test]
fn eight_lanes_each_see_only_their_own_server() {
    let dir = tmp();
    let (r, out) = run_memory(
        dir.path(),
        &world_agent(dir.path(), "correct"),
        &["--filter", "record-delivery", "--runs", "8", "--jobs", "8"],
    );
    assert_eq!(r.code, 0, "{r}");
    let all = traces(&out);
    assert_eq!(all.len(), 8);
    for t in &all {
        // Every run starts from the setup state and adds exactly its own observation: a
        // shared server would show another run's.
        assert_eq!(
            t["world"]["before"]["entities"][0]["observations"],
            json!(["status: shipped", "item: kettle"]),
            "{t:#}"
        );
        assert_eq!(
            t["world"]["after"]["entities"][0]["observations"],
            json!(["status: shipped", "item: kettle", "status: delivered"]),
            "{t:#}"
        );
    }
}

/// A pack on the flaky server; `scenarios` are (id, turn, extra world_server lines).
fn flaky_pack(dir: &Path, server: &str, scenarios: &[(&str, &str, &str)]) -> PathBuf {
    let pack = dir.join("flaky-pack");
    std::fs::create_dir_all(pack.join("scenarios")).unwrap();
    std::fs::write(pack.join("pack.toml"), "name = \"flaky\"\n").unwrap();
    let python = agent_python().display().to_string();
    let script = workspace()
        .join("tests/worlds/flaky_server.py")
        .display()
        .to_string();
    // The server tells the test what it did (its pids, its starts) through files in `dir`.
    let out = dir.display().to_string();
    for (id, turn, extra) in scenarios {
        std::fs::write(
            pack.join("scenarios").join(format!("{id}.toml")),
            format!(
                "id = \"{id}\"\nturns = [{turn:?}]\n\n[world_server]\nname = \"flaky\"\ncommand = [{python:?}, {script:?}]\nstate = {{ tool = \"notes\" }}\nsandbox = {{ write = [{out:?}] }}\n{server}\n{extra}\n"
            ),
        )
        .unwrap();
    }
    pack
}

fn alive(pid: u64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        !s.rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

#[test]
fn a_server_that_crashes_hangs_garbles_or_will_not_start_costs_only_its_run() {
    let dir = tmp();
    let pids = dir.path().join("hang-pids.json");
    let pack = flaky_pack(
        dir.path(),
        &format!(
            "call_timeout_s = 3.0\nstart_timeout_s = 5.0\nenv = {{ FLAKY_PIDS = {:?} }}",
            pids.display().to_string()
        ),
        &[
            ("ok", "do: note text=kept | fail | env | notes", ""),
            ("huge", "do: huge", ""),
            ("crash", "do: note text=a | crash | notes", ""),
            ("hang", "do: hang | notes", ""),
            ("garbage", "do: garbage", ""),
        ],
    );
    // Two more, each with a server that never comes up.
    let python = agent_python().display().to_string();
    let script = workspace()
        .join("tests/worlds/flaky_server.py")
        .display()
        .to_string();
    for (id, start) in [("exits", "exit"), ("silent", "silent")] {
        std::fs::write(
            pack.join("scenarios").join(format!("{id}.toml")),
            format!(
                "id = \"{id}\"\nturns = [\"do: notes\"]\n\n[world_server]\nname = \"flaky\"\ncommand = [{python:?}, {script:?}]\nstart_timeout_s = 3.0\nenv = {{ FLAKY_START = \"{start}\" }}\n"
            ),
        )
        .unwrap();
    }
    let r = scripted(dir.path(), &pack)
        .args(["--jobs", "3"])
        .arg("--out")
        .arg(dir.path().join("runs"))
        .env("WT_TEST_SECRET", "s3cr3t")
        .run();
    assert_eq!(r.code, 3, "{r}");
    let runs = by_scenario(&dir.path().join("runs"));
    let (t, s) = &runs["ok#0"];
    assert_eq!(s["verdict"], "PASS", "{s:#}\n{r}");
    // A tool that fails is the agent's failed call, not a broken server.
    let calls = t["evidence"]["tool_calls"].as_array().unwrap();
    assert_eq!(calls[1]["error"], "the ledger is closed on Sundays");
    // The server's environment is what the pack gives it, a few locale and path variables,
    // and wt's process tag: nothing else of wt's.
    for name in calls[2]["result"].as_array().unwrap() {
        let name = name.as_str().unwrap();
        assert!(
            [
                "PATH",
                "HOME",
                "LANG",
                "LC_ALL",
                "TMPDIR",
                "TZ",
                "FLAKY_PIDS",
                "WT_PROCESS_TAG"
            ]
            .contains(&name),
            "the server sees {name}"
        );
    }
    assert_eq!(t["world"]["after"]["notes"], json!(["kept"]));
    let error = |id: &str| {
        let (t, s) = runs
            .get(id)
            .unwrap_or_else(|| panic!("no run {id} among {:?}\n{r}", runs.keys()));
        assert_eq!(s["verdict"], "ERROR", "{id}: {s:#}");
        (t.clone(), s["error"].as_str().unwrap().to_owned())
    };
    let (t, e) = error("crash#0");
    assert!(e.starts_with("world server `flaky`: "), "{e}");
    assert!(
        e.contains("closed its stdout") && e.contains("exited with status 3"),
        "{e}"
    );
    assert!(e.contains("segfault in the ledger"), "{e}");
    let server = &t["world"]["server"];
    assert!(
        server["stderr_tail"]
            .as_str()
            .unwrap()
            .contains("segfault in the ledger"),
        "{server:#}"
    );
    assert_eq!(server["exit"], "exited with status 3", "{server:#}");
    let (t, e) = error("hang#0");
    assert!(e.contains("did not answer `tools/call` in time"), "{e}");
    assert!(
        t["world"]["server"]["exit"]
            .as_str()
            .unwrap()
            .starts_with("stopped by wt"),
        "{t:#}"
    );
    let (_, e) = error("huge#0");
    assert!(e.contains("a message longer than 8388608 bytes"), "{e}");
    let (_, e) = error("garbage#0");
    assert!(
        e.contains("not JSON-RPC") && e.contains("<html>oops</html>"),
        "{e}"
    );
    // A server that never comes up cannot even list its tools: its scenario is ERROR
    // before any run, with the reason in the summary (and the sweep's aggregate).
    let line = |id: &str| {
        r.stderr
            .lines()
            .find(|l| l.starts_with(id) && l.contains("ERROR"))
            .unwrap_or_else(|| panic!("no summary line for {id}:\n{r}"))
            .to_owned()
    };
    let e = line("exits ");
    assert!(
        e.contains("world server `flaky`: ")
            && e.contains("exited with status 2")
            && e.contains("cannot open the ledger database"),
        "{e}"
    );
    assert!(line("silent ").contains("did not answer `initialize` in time"));
    // Nothing the hanging server started outlives its run.
    let recorded: Value = serde_json::from_str(&std::fs::read_to_string(&pids).unwrap()).unwrap();
    for pid in recorded["pids"].as_array().unwrap() {
        assert!(
            !alive(pid.as_u64().unwrap()),
            "process {pid} outlived its run"
        );
    }
}

#[test]
fn a_lane_keeps_its_server_and_resets_it_between_runs() {
    let dir = tmp();
    let log = dir.path().join("starts.log");
    let pack = flaky_pack(
        dir.path(),
        &format!(
            "per = \"lane\"\nreset = [{{ tool = \"reset\" }}]\nenv = {{ FLAKY_LOG = {:?} }}",
            log.display().to_string()
        ),
        &[("notes", "do: note text=mine | notes", "")],
    );
    std::fs::write(
        pack.join("scenarios/notes.toml"),
        std::fs::read_to_string(pack.join("scenarios/notes.toml")).unwrap()
            + "\n[[expect.outcome.world]]\npath = \"notes\"\nequals = [\"mine\"]\n\n[[expect.outcome.files]]\npath = \"notes.txt\"\nequals = \"mine\\n\"\n",
    )
    .unwrap();
    let r = scripted(dir.path(), &pack)
        .args(["--runs", "4", "--jobs", "1"])
        .arg("--out")
        .arg(dir.path().join("runs"))
        .run();
    assert_eq!(r.code, 0, "{r}");
    let all = traces(&dir.path().join("runs"));
    assert_eq!(all.len(), 4);
    let pids: std::collections::BTreeSet<u64> = all
        .iter()
        .map(|t| t["world"]["after"]["pid"].as_u64().unwrap())
        .collect();
    assert_eq!(pids.len(), 1, "one server for the lane's four runs");
    for t in &all {
        assert_eq!(
            t["world"]["before"]["notes"],
            json!([]),
            "reset before each run"
        );
        assert_eq!(t["world"]["after"]["notes"], json!(["mine"]));
    }
    // Started twice in all: once to list its tools, once for the lane.
    let starts = std::fs::read_to_string(&log).unwrap();
    assert_eq!(starts.lines().count(), 2, "{starts}");
}

pub(crate) struct Shelf {
    child: Child,
    port: u16,
    pub(crate) url: String,
}

impl Drop for Shelf {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The shelf server (tests/worlds/shelf_server.py) on a port of its own, up.
pub(crate) fn shelf() -> Shelf {
    let port = crate::harness::dead_port();
    let child = Command::new(agent_python())
        .arg(workspace().join("tests/worlds/shelf_server.py"))
        .arg(port.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let shelf = Shelf {
        child,
        port,
        url: format!("http://127.0.0.1:{port}/mcp"),
    };
    assert!(
        poll_until(PATIENCE, || std::net::TcpStream::connect((
            "127.0.0.1",
            port
        ))
        .is_ok()),
        "the shelf server did not come up"
    );
    shelf
}

#[test]
fn a_url_server_is_reset_for_each_run_and_never_shared_by_two_at_once() {
    let dir = tmp();
    let shelf = shelf();
    let pack = dir.path().join("shelf-pack");
    std::fs::create_dir_all(pack.join("scenarios")).unwrap();
    std::fs::write(
        pack.join("pack.toml"),
        format!(
            "name = \"shelf\"\n\n[world_server]\nurl = \"{}\"\nstate = {{ tool = \"shelf\" }}\nreset = [{{ tool = \"clear\" }}]\ntools = [\"put\", \"shelf\"]\n\n[[world_server.setup]]\ntool = \"put\"\narguments = {{ item = \"lamp\" }}\n",
            shelf.url
        ),
    )
    .unwrap();
    std::fs::write(
        pack.join("scenarios/put.toml"),
        "id = \"put\"\nturns = [\"do: put item=vase | shelf\"]\npreconditions = [{ path = \"items\", equals = [\"lamp\"] }]\n\n[expect.outcome]\nworld = [{ path = \"items\", equals = [\"lamp\", \"vase\"] }]\n\n[expect.trajectory]\nrequired_tools = [\"put\"]\n",
    )
    .unwrap();
    let r = scripted(dir.path(), &pack)
        .args(["--runs", "4", "--jobs", "4"])
        .arg("--out")
        .arg(dir.path().join("runs"))
        .run();
    assert_eq!(r.code, 0, "{r}");
    let all = traces(&dir.path().join("runs"));
    assert_eq!(all.len(), 4);
    for t in &all {
        assert_eq!(t["world"]["before"]["items"], json!(["lamp"]));
        assert_eq!(t["world"]["after"]["items"], json!(["lamp", "vase"]));
        assert_eq!(
            t["evidence"]["tool_calls"][0]["server"],
            format!("127.0.0.1:{}", shelf.port)
        );
    }
}

#[test]
fn built_in_tools_fail_on_their_conditions_and_find_by_fields() {
    let dir = tmp();
    let pack = dir.path().join("desk");
    std::fs::create_dir_all(pack.join("scenarios")).unwrap();
    std::fs::write(pack.join("pack.toml"), "name = \"desk\"\n").unwrap();
    std::fs::write(
        pack.join("scenarios/refund.toml"),
        r#"id = "refund"
turns = ["do: refund id=2 | refund id=1 | find_orders customer=ann"]
world = { orders = { "1" = { status = "delivered", customer = "ann" }, "2" = { status = "shipped", customer = "ann" } } }

[[tools]]
name = "refund"
parameters = { type = "object", properties = { id = { type = ["string", "integer"] } }, required = ["id"] }
effect = { kind = "write", path = "orders", key_arg = "id", value = { status = "refunded", customer = "ann" } }
when = [{ path = "orders.{id}.status", equals = "delivered", error = "only a delivered order can be refunded" }]

[[tools]]
name = "find_orders"
parameters = { type = "object", properties = { customer = { type = "string" } } }
effect = { kind = "find", path = "orders", by = { customer = "customer" } }

[expect.outcome]
world = [{ path = "orders.1.status", equals = "refunded" }, { path = "orders.2.status", equals = "shipped" }]
"#,
    )
    .unwrap();
    let r = scripted(dir.path(), &pack)
        .arg("--out")
        .arg(dir.path().join("runs"))
        .run();
    assert_eq!(r.code, 0, "{r}");
    let t = &traces(&dir.path().join("runs"))[0];
    let calls = t["evidence"]["tool_calls"].as_array().unwrap();
    assert_eq!(calls[0]["error"], "only a delivered order can be refunded");
    assert!(calls[1].get("error").is_none(), "{:#}", calls[1]);
    let found = calls[2]["result"].as_array().unwrap();
    assert_eq!(found.len(), 2, "{found:#?}");
    assert!(
        t["turns"][0]["reply"]
            .as_str()
            .unwrap()
            .starts_with("refund: error"),
        "the agent was told: {}",
        t["turns"][0]["reply"]
    );
}

#[test]
fn a_world_server_does_not_outlive_a_wt_killed_outright() {
    let dir = tmp();
    let pids = dir.path().join("hang-pids.json");
    let pack = flaky_pack(
        dir.path(),
        &format!(
            "call_timeout_s = 600.0\nenv = {{ FLAKY_PIDS = {:?} }}",
            pids.display().to_string()
        ),
        &[("hang", "do: hang", "")],
    );
    let wt = scripted(dir.path(), &pack)
        .arg("--out")
        .arg(dir.path().join("runs"))
        .start();
    crate::harness::wait_for("the hanging server's pids", PATIENCE, || {
        std::fs::read_to_string(&pids)
            .ok()
            .and_then(|t| serde_json::from_str::<Value>(&t).ok())
            .is_some()
    });
    let recorded: Value = serde_json::from_str(&std::fs::read_to_string(&pids).unwrap()).unwrap();
    wt.signal("KILL");
    let r = wt.finish();
    assert_eq!(r.code, -1, "killed: {r}");
    for pid in recorded["pids"].as_array().unwrap() {
        let pid = pid.as_u64().unwrap();
        crate::harness::wait_for(
            &format!("world server process {pid} to be killed by wt's watchdog"),
            PATIENCE,
            || !alive(pid),
        );
    }
}

#[test]
fn a_new_user_without_the_server_installed_is_told_what_is_missing() {
    let dir = tmp();
    let r = Wt::new(dir.path())
        .arg("run")
        .arg("--pack")
        .arg(memory_pack())
        .arg("--agent")
        .arg(world_agent(dir.path(), "correct"))
        .arg("--out")
        .arg(dir.path().join("runs"))
        .env("PATH", "/usr/bin:/bin")
        .run();
    assert_eq!(r.code, 3, "{r}");
    assert!(
        r.stderr.contains(
            "world server `memory`: cannot start `mcp-server-memory`: not found (is it installed, and on PATH?)"
        ),
        "{r}"
    );
}

#[test]
fn a_link_in_a_world_servers_files_is_refused_when_the_pack_loads() {
    let dir = tmp();
    let pack = dir.path().join("linked");
    std::fs::create_dir_all(pack.join("scenarios")).unwrap();
    std::fs::create_dir_all(pack.join("files")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", pack.join("files/passwd")).unwrap();
    std::fs::write(
        pack.join("pack.toml"),
        "name = \"linked\"\n[world_server]\ncommand = [\"mcp-server-memory\"]\nfiles = \"files\"\n",
    )
    .unwrap();
    std::fs::write(
        pack.join("scenarios/a.toml"),
        "id = \"a\"\nturns = [\"hi\"]\n",
    )
    .unwrap();
    let r = Wt::new(dir.path())
        .arg("run")
        .arg("--pack")
        .arg(&pack)
        .arg("--agent")
        .arg(world_agent(dir.path(), "correct"))
        .run();
    assert_eq!(r.code, 2, "{r}");
    assert!(
        r.stderr.contains("world_server.files") && r.stderr.contains("is a symbolic link"),
        "{r}"
    );
}

#[test]
fn a_sigterm_ends_every_wait_for_a_hung_world_server_at_the_stop_deadline() {
    // Each wait would last a minute; one SIGTERM (grace 1 s) must end it within seconds:
    // at the tool listing before any run, at a run's own server start, in a setup call.
    let cases = [
        (
            "listing",
            "env = { FLAKY_HANG = \"tools/list\", FLAKY_LOG = \"@LOG@\" }",
            1,
        ),
        (
            "run-start",
            "env = { FLAKY_HANG = \"initialize:2\", FLAKY_LOG = \"@LOG@\" }",
            2,
        ),
        (
            "setup",
            "env = { FLAKY_PIDS = \"@PIDS@\", FLAKY_LOG = \"@LOG@\" }\nsetup = [{ tool = \"hang\" }]",
            2,
        ),
    ];
    for (case, env, starts) in cases {
        let dir = tmp();
        let log = dir.path().join("starts.log");
        let env = env.replace("@LOG@", &log.display().to_string()).replace(
            "@PIDS@",
            &dir.path().join("pids.json").display().to_string(),
        );
        let pack = flaky_pack(
            dir.path(),
            &format!("call_timeout_s = 60.0\nstart_timeout_s = 60.0\n{env}"),
            &[("stuck", "do: notes", "")],
        );
        let out = dir.path().join("runs");
        let wt = scripted(dir.path(), &pack)
            .arg("--out")
            .arg(&out)
            .env("WT_GRACE_S", "1")
            .start();
        // The server that hangs has started, and has had its request.
        if !poll_until(PATIENCE, || {
            std::fs::read_to_string(&log).is_ok_and(|l| l.lines().count() >= starts)
        }) {
            wt.signal("KILL");
            panic!("{case}: the server never started: {}", wt.finish());
        }
        std::thread::sleep(Duration::from_millis(500));
        let sent = Instant::now();
        wt.signal("TERM");
        let r = wt.finish_within(Duration::from_secs(40));
        let took = sent.elapsed();
        assert_eq!(r.code, 130, "{case}: {r}");
        assert!(
            took < Duration::from_secs(8),
            "{case}: took {took:?} after SIGTERM: {r}"
        );
        // A run that was waiting is an ERROR saying why, never a pass.
        for s in scores(&out) {
            assert_eq!(s["verdict"], "ERROR", "{case}: {s}");
        }
        only_whole_files(&out);
    }
}
