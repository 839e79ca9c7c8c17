//! Issue 18's remaining items, through the real binary: planning at any size, endpoint
//! pauses, processes that try to outlive their run, third-party log lines, odd file names,
//! run identity and pinned determinism.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::harness::*;

/// The process and its descendants (by `/proc/<pid>/task/*/children`).
fn process_tree(pid: u32) -> Vec<u32> {
    let mut all = vec![pid];
    let mut at = 0;
    while at < all.len() {
        let p = all[at];
        at += 1;
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) else {
            continue;
        };
        for t in tasks.flatten() {
            if let Ok(text) = std::fs::read_to_string(t.path().join("children")) {
                all.extend(
                    text.split_whitespace()
                        .filter_map(|c| c.parse::<u32>().ok()),
                );
            }
        }
    }
    all
}

/// A `/proc/<pid>/status` field in KiB (`VmHWM`, `VmRSS`).
fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

// 8 ─────────────────────────────────────────────────────────────────────────────────────

#[test]
fn a_billion_planned_runs_cost_no_memory_and_a_signal_stops_the_sweep_at_any_moment() {
    let dir = tmp();
    // Runs start at once: memory stays what a ten-run sweep needs, and SIGTERM is honoured.
    let out = dir.path().join("all");
    let wt = Wt::new(dir.path())
        .args(["run", "--runs", "1000000000", "--out"])
        .arg(&out)
        .start();
    wait_for_journal_event(&out, "RunEnded");
    let peak: u64 = process_tree(wt.pid())
        .iter()
        .map(|p| status_kib(*p, "VmHWM"))
        .max()
        .unwrap();
    assert!(
        peak < 256 * 1024,
        "peak RSS {peak} KiB with 10^9 runs planned"
    );
    wt.signal("TERM");
    let r = wt.finish_within(PATIENCE);
    assert_eq!(r.code, 130, "{r}");
    assert!(r.stderr.contains("3000000000 run(s)"), "{r}");
    assert_eq!(events(&journal(&out), "SweepEnded").len(), 1);

    // A shard of a billion runs is counted without holding them; a signal while it is still
    // counting stops `wt` there, with nothing run.
    let out = dir.path().join("shard");
    let wt = Wt::new(dir.path())
        .args(["run", "--runs", "1000000000", "--shard", "1/2", "--out"])
        .arg(&out)
        .start();
    // The sweep's own process is up and planning.
    wait_for("the sweep's process", PATIENCE, || {
        process_tree(wt.pid()).len() > 1
    });
    std::thread::sleep(Duration::from_millis(300));
    let peak: u64 = process_tree(wt.pid())
        .iter()
        .map(|p| status_kib(*p, "VmHWM"))
        .max()
        .unwrap();
    assert!(peak < 256 * 1024, "peak RSS {peak} KiB while planning");
    let sent = Instant::now();
    wt.signal("TERM");
    let r = wt.finish_within(PATIENCE);
    assert_eq!(r.code, 130, "{r}");
    assert!(
        sent.elapsed() < Duration::from_secs(20),
        "the stop took {:?}",
        sent.elapsed()
    );
    assert!(trace_paths(&out).is_empty(), "{r}");
}

// 10 ────────────────────────────────────────────────────────────────────────────────────

/// A pack with one scenario of `runs` one-turn runs that expects nothing but a reply.
fn pack_of(dir: &Path, runs: u32) -> PathBuf {
    write_pack(
        dir,
        &[(
            "hello.toml",
            &format!("id = \"hello\"\nruns = {runs}\nturns = [\"Hello?\"]\n"),
        )],
    )
}

#[test]
fn a_retry_after_past_the_deadline_pauses_the_endpoint_and_says_until_when() {
    let dir = tmp();
    let srv = TestServer::start_with_headers(|s| {
        if s.url == "/inject" {
            (
                429,
                vec![("Retry-After".into(), "120".into())],
                "{\"error\":\"slow down\"}".into(),
            )
        } else {
            (200, Vec::new(), "{}".into())
        }
    });
    let agent = agent_file(
        dir.path(),
        "a.toml",
        &format!(
            "label = \"busy\"\nruntime = \"http\"\nendpoint = \"{}\"\nmcp = false\nturn_timeout_s = 2\nretries = 0\n",
            srv.base
        ),
    );
    let pack = pack_of(dir.path(), 3);
    let out = dir.path().join("runs");
    let r = Wt::new(dir.path())
        .args(["run", "--out"])
        .arg(&out)
        .pack(&pack)
        .agent(&agent)
        .run();
    assert_eq!(r.code, 3, "{r}");
    // Nothing was sent during the pause: one health check, the first run's reset and
    // inject, then nothing.
    let urls: Vec<String> = srv.seen().iter().map(|s| s.url.clone()).collect();
    assert_eq!(urls, ["/health", "/reset", "/inject"], "{r}");
    let scores = scores(&out);
    assert_eq!(scores.len(), 3);
    let text = serde_json::to_string(&scores).unwrap();
    assert!(text.contains("HTTP 429"), "{text}");
    let paused = scores
        .iter()
        .filter(|s| {
            s["error"]
                .as_str()
                .is_some_and(|e| e.contains("not sent: the endpoint is paused until 20"))
        })
        .count();
    assert_eq!(
        paused, 2,
        "later runs must say the endpoint is paused, not that they timed out: {text}"
    );
    assert!(!text.contains("timed out"), "{text}");
}

#[test]
fn lanes_waiting_for_a_concurrency_slot_wait_out_a_pause_too() {
    let dir = tmp();
    let first = std::sync::atomic::AtomicBool::new(true);
    let times = std::sync::Arc::new(std::sync::Mutex::new(Vec::<(Instant, u16)>::new()));
    let log = times.clone();
    let srv = TestServer::start_with_headers(move |_| {
        // The first request is slow and then refused with a 2 s pause; every other one is
        // answered at once.
        if first.swap(false, std::sync::atomic::Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(300));
            log.lock().unwrap().push((Instant::now(), 429));
            return (
                429,
                vec![("Retry-After".into(), "2".into())],
                "{\"error\":\"slow down\"}".into(),
            );
        }
        log.lock().unwrap().push((Instant::now(), 200));
        (
            200,
            Vec::new(),
            json!({"choices": [{"message": {"role": "assistant", "content": "Hello!"}}]})
                .to_string(),
        )
    });
    let agent = agent_file(
        dir.path(),
        "a.toml",
        &format!(
            "label = \"capped\"\nruntime = \"openai\"\nmodel = \"m\"\nendpoint = \"{}/v1\"\nmax_concurrency = 1\nretries = 2\nturn_timeout_s = 30\n",
            srv.base
        ),
    );
    let pack = pack_of(dir.path(), 4);
    let out = dir.path().join("runs");
    let r = Wt::new(dir.path())
        .args(["run", "--jobs", "4", "--out"])
        .arg(&out)
        .pack(&pack)
        .agent(&agent)
        .run();
    assert_eq!(r.code, 0, "{r}");
    let times = times.lock().unwrap().clone();
    assert_eq!(times.len(), 5, "4 runs and one retry");
    let (refused, _) = times.iter().find(|(_, s)| *s == 429).unwrap();
    // Requests are seen when answered; each later one arrived after the pause ended (the
    // server answers at once, so answer time ≈ arrival time).
    for (at, status) in &times {
        if *status == 200 {
            let after = at.saturating_duration_since(*refused);
            assert!(
                after >= Duration::from_millis(1_900),
                "a request went out {after:?} into a 2 s pause: {times:?}"
            );
        }
    }
    let waits: Vec<Value> = journal(&out)
        .into_iter()
        .filter(|e| e["event"] == "RequestWaited" && e["reason"] == "paused")
        .collect();
    assert!(
        waits.iter().any(|w| w["wait_ms"].as_u64() >= Some(1_500)),
        "the lane that waited for the slot waited the pause out: {waits:?}"
    );
}

// 11 ────────────────────────────────────────────────────────────────────────────────────

/// A session agent (`sh -c`) that first counts the processes earlier runs' agents left
/// (`wt-orphan-<pid>`), then leaves one itself — in a session of its own, so outside its
/// process group — and replies with the count.
const ORPHAN_MAKER: &str = "command -v pgrep >/dev/null || exit 9; n=$(pgrep -f 'wt-orphan-[0-9]' | wc -l); \
    setsid /bin/sh -c 'while :; do sleep 1; done' \"wt-orphan-$$\" </dev/null >/dev/null 2>&1 & \
    read -r line; echo \"{\\\"type\\\": \\\"reply\\\", \\\"text\\\": \\\"orphans before me: $n\\\"}\"; \
    cat >/dev/null";

#[test]
fn what_an_agent_starts_outside_its_group_ends_with_its_run() {
    let dir = tmp();
    let pack = write_pack(
        dir.path(),
        &[(
            "orphans.toml",
            "id = \"orphans\"\nruns = 3\nturns = [\"hello\"]\n[expect.outcome]\nreply_contains = [\"orphans before me: 0\"]\n",
        )],
    );
    let agent = sh_agent(dir.path(), "leaver", ORPHAN_MAKER, &[], "mcp = false");
    let r = Wt::new(dir.path())
        .args(["run", "--jobs", "1", "--pack"])
        .arg(&pack)
        .agent(&agent)
        .run();
    // Each run found nothing of the one before it.
    assert_eq!(r.code, 0, "{r}");
    // And nothing is left once `wt` has exited.
    let left = processes_mentioning(Path::new("wt-orphan-"));
    assert!(left.is_empty(), "left running: {left:?}");
}

#[test]
fn kill_9_of_wt_leaves_no_agent_and_nothing_an_agent_or_a_hook_started() {
    let dir = tmp();
    // The marker names every process of this test: the agent ($0), the process it leaves
    // behind in a session of its own, and the one an isolated hook leaves.
    let marker = dir.path().join("marker").display().to_string();
    let agent = sh_agent(
        dir.path(),
        "hanger",
        "setsid /bin/sh -c 'while :; do sleep 1; done' \"$0-orphan\" </dev/null >/dev/null 2>&1 & \
         read -r line; sleep 600",
        &[&marker],
        "mcp = false\nturn_timeout_s = 600",
    );
    let plugins = plugin_dir(dir.path(), &["wt_test_hostile"]);
    let pack = pack_of(dir.path(), 1);
    for isolated in [false, true] {
        let mut wt = Wt::new(dir.path())
            .args(["run", "--pack"])
            .arg(&pack)
            .agent(&agent)
            .args(["--hook", "spawner", "--plugin-dir"])
            .arg(&plugins)
            .env("WT_SPAWNER_MARKER", format!("{marker}-hook"));
        if isolated {
            wt = wt.arg("--isolate-hooks");
        }
        let wt = wt.start();
        wait_for("the agent's and the hook's processes", PATIENCE, || {
            let cmdlines: Vec<String> = processes_mentioning(Path::new(&marker))
                .iter()
                .filter_map(|p| std::fs::read(format!("/proc/{p}/cmdline")).ok())
                .map(|c| String::from_utf8_lossy(&c).into_owned())
                .collect();
            cmdlines.iter().any(|c| c.contains("-orphan"))
                && cmdlines.iter().any(|c| c.contains("-hook"))
        });
        wt.signal("KILL");
        let r = wt.finish();
        assert_eq!(r.code, -1, "killed: {r}");
        if let Err(left) = no_process_left(Path::new(&marker)) {
            panic!("isolated hooks {isolated}: left running after kill -9 of wt: {left:?}");
        }
    }
}

// 12 ────────────────────────────────────────────────────────────────────────────────────

#[test]
fn an_interrupted_run_records_how_its_agent_process_ended() {
    let dir = tmp();
    let agent = sh_agent(
        dir.path(),
        "hanger",
        "read -r line; sleep 600",
        &[],
        "mcp = false\nturn_timeout_s = 600",
    );
    let pack = pack_of(dir.path(), 1);
    for try_ in 0..3 {
        let out = dir.path().join(format!("runs{try_}"));
        let wt = Wt::new(dir.path())
            .args(["run", "--out"])
            .arg(&out)
            .pack(&pack)
            .agent(&agent)
            .env("WT_GRACE_S", "0.2")
            .start();
        wait_for_journal_event(&out, "TurnStarted");
        wt.signal("INT");
        let r = wt.finish_within(PATIENCE);
        assert_eq!(r.code, 130, "{r}");
        let t = &traces(&out)[0];
        assert_eq!(t["turns"][0]["error_kind"], "interrupted", "{t}");
        let processes = t["processes"].as_array().expect("a processes record");
        assert_eq!(processes.len(), 1, "try {try_}: {t}");
        assert!(
            processes[0]["exit"]
                .as_str()
                .is_some_and(|e| e.starts_with("killed by wt")),
            "{t}"
        );
    }
}

// 15 ────────────────────────────────────────────────────────────────────────────────────

/// A session agent that makes `n` calls of a tool that does not exist over raw MCP, each
/// refused, then replies.
const REFUSED_CALLER: &str = r#"
import json, os, sys, urllib.request
url = os.environ["WT_MCP_URL"]
session = None
def post(body):
    global session
    headers = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
    if session:
        headers["mcp-session-id"] = session
        headers["mcp-protocol-version"] = "2025-03-26"
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers, method="POST")
    with urllib.request.urlopen(req) as resp:
        session = resp.headers.get("mcp-session-id") or session
        return resp.read()
sys.stdin.readline()
post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "a", "version": "1"}}})
post({"jsonrpc": "2.0", "method": "notifications/initialized"})
for i in range(int(sys.argv[1])):
    post({"jsonrpc": "2.0", "id": i + 1, "method": "tools/call", "params": {"name": "no_such_tool\u001b[31m", "arguments": {}}})
print(json.dumps({"type": "reply", "text": "done"}), flush=True)
sys.stdin.read()
"#;

#[test]
fn library_log_lines_are_plain_and_a_flood_of_them_is_cut_to_a_few() {
    let dir = tmp();
    let command = [
        agent_python().display().to_string(),
        "-c".to_owned(),
        REFUSED_CALLER.to_owned(),
        "40".to_owned(),
    ];
    let agent = command_agent(dir.path(), "caller", &command, "turn_timeout_s = 60");
    let r = Wt::new(dir.path())
        .args(["run", "--runs", "1", "--filter", "order-status", "--agent"])
        .arg(&agent)
        .run();
    let t = &traces(&dir.path().join("runs"))[0];
    assert_eq!(
        t["turns"][0]["reply"], "done",
        "the agent made its calls: {t}\n{r}"
    );
    // Piped stderr: no colour codes, no raw escape from the tool name.
    assert!(!r.stderr.contains('\u{1b}'), "{r}");
    let library: Vec<&str> = r.stderr.lines().filter(|l| l.contains("rmcp")).collect();
    assert!(
        !library.is_empty() && library.len() <= 5,
        "40 refused calls: {library:#?}"
    );
    assert!(
        library
            .iter()
            .any(|l| l.contains("further ones are not shown")),
        "{library:#?}"
    );
}

// 16 ────────────────────────────────────────────────────────────────────────────────────

#[test]
fn a_plugin_whose_file_name_is_not_utf8_is_refused_in_one_line_everywhere() {
    use std::os::unix::ffi::OsStrExt;
    let dir = tmp();
    let plugins = dir.path().join("plugins");
    std::fs::create_dir(&plugins).unwrap();
    let odd = plugins.join(std::ffi::OsStr::from_bytes(b"libodd\xff.so"));
    std::fs::copy(plugin_lib("wt_test_hostile"), &odd).unwrap();
    set_mode(&odd, 0o755);
    let list = Wt::new(dir.path())
        .args(["hooks", "list", "--plugin-dir"])
        .arg(&plugins)
        .run();
    assert!(
        list.stdout.contains("not valid UTF-8") || list.stderr.contains("not valid UTF-8"),
        "hooks list: {list}"
    );
    let check = Wt::new(dir.path()).args(["hooks", "check"]).arg(&odd).run();
    assert_eq!(check.code, 2, "hooks check: {check}");
    assert!(check.stdout.contains("not valid UTF-8"), "{check}");
    let run = Wt::new(dir.path())
        .args(["run", "--runs", "1", "--hook", "forger", "--plugin-dir"])
        .arg(&plugins)
        .run();
    assert_eq!(run.code, 2, "run: {run}");
    let lines: Vec<&str> = run.stderr.lines().filter(|l| !l.is_empty()).collect();
    assert_eq!(lines.len(), 1, "{run}");
    assert!(lines[0].contains("not valid UTF-8"), "{run}");
}

#[test]
fn a_journal_whose_only_line_is_too_long_is_named_in_a_warning() {
    let dir = tmp();
    let runs = dir.path().join("runs");
    std::fs::create_dir(&runs).unwrap();
    let line = format!(
        "{{\"event\":\"SweepStarted\",\"pad\":\"{}\"}}\n",
        "x".repeat(2 << 20)
    );
    std::fs::write(runs.join("20261130T060000Z_abcdef12.events.jsonl"), line).unwrap();
    let r = Wt::new(dir.path()).args(["report"]).arg(&runs).run();
    assert!(
        r.stderr
            .contains("not a wt event journal (1 line(s) over 1 MiB)"),
        "{r}"
    );
}

#[test]
fn isolated_hook_logs_are_the_sweeps_own_and_say_what_the_cap_dropped() {
    let dir = tmp();
    let plugins = plugin_dir(dir.path(), &["wt_test_hostile"]);
    let out = dir.path().join("runs");
    // Two sweeps in the same (pinned) second, into one directory.
    for _ in 0..2 {
        let r = Wt::new(dir.path())
            .args(["run", "--runs", "1", "--filter", "order-status", "--out"])
            .arg(&out)
            .args(["--hook", "chatter", "--isolate-hooks", "--plugin-dir"])
            .arg(&plugins)
            .env("WT_FIXED_CLOCK", CLOCK)
            .env("WT_CHATTER_BYTES", (2u64 << 20).to_string())
            .run();
        assert_eq!(r.code, 0, "{r}");
    }
    let logs: Vec<(String, Vec<u8>)> = files(&out)
        .into_iter()
        .filter(|(n, _)| n.ends_with(".chatter.log"))
        .collect();
    assert_eq!(
        logs.len(),
        2,
        "one log per sweep: {:?}",
        logs.iter().map(|l| &l.0).collect::<Vec<_>>()
    );
    let stems: Vec<String> = files(&out)
        .into_keys()
        .filter_map(|n| n.strip_suffix(".events.jsonl").map(str::to_owned))
        .collect();
    for (name, bytes) in &logs {
        assert!(
            stems.iter().any(|s| name.starts_with(&format!("{s}."))),
            "{name} is named after neither sweep's stem {stems:?}"
        );
        let text = String::from_utf8_lossy(bytes);
        assert!(
            bytes.len() < (1 << 20) + 4096,
            "{name}: {} bytes",
            bytes.len()
        );
        assert!(text.contains("the log is limited to 1 MiB"), "{name}");
        assert!(
            text.contains(&format!(
                "[wt: {} more bytes of output dropped]",
                (2u64 << 20) - (1 << 20)
            )),
            "{name}: {}",
            &text[text.len().saturating_sub(300)..]
        );
    }
}

// 17 ────────────────────────────────────────────────────────────────────────────────────

#[test]
fn pinned_sweeps_racing_into_one_directory_keep_one_id_per_run_everywhere() {
    for concurrent in [false, true] {
        let dir = tmp();
        let out = dir.path().join("runs");
        // A failing agent, so that debrief writes an artifact per run.
        let agent = agent_file(
            dir.path(),
            "garbled.toml",
            "label = \"garbled\"\nruntime = \"demo\"\nfault = \"garbled\"\n",
        );
        let plugins = plugin_dir(dir.path(), &["wt_test_recorder"]);
        let log = dir.path().join("recorder.jsonl");
        let start = || {
            Wt::new(dir.path())
                .args(["run", "--seed", "1", "--runs", "3", "--hook", "debrief"])
                .args(["--hook", "recorder", "--plugin-dir"])
                .arg(&plugins)
                .agent(&agent)
                .arg("--out")
                .arg(&out)
                .env("WT_FIXED_CLOCK", CLOCK)
                .env("WT_RECORDER_LOG", &log)
                .start()
        };
        let runs = if concurrent {
            let (a, b) = (start(), start());
            [a.finish(), b.finish()]
        } else {
            let a = start().finish();
            [a, start().finish()]
        };
        for r in &runs {
            assert_eq!(r.code, 1, "{r}");
        }
        let all = files(&out);
        let traces: BTreeMap<String, Value> = json_files(&out, ".json")
            .into_iter()
            .filter(|(_, v)| v.get("turns").is_some())
            .collect();
        assert_eq!(traces.len(), 18, "concurrent {concurrent}");
        let ids: std::collections::BTreeSet<&str> = traces
            .values()
            .map(|t| t["run_id"].as_str().unwrap())
            .collect();
        assert_eq!(
            ids.len(),
            18,
            "two sweeps share run ids (concurrent {concurrent})"
        );
        // Every event of a run carries the id its trace carries, and the run's journal is
        // the one that says where its trace is.
        let mut ended = 0;
        for (name, bytes) in all.iter().filter(|(n, _)| n.ends_with(".events.jsonl")) {
            for line in String::from_utf8_lossy(bytes).lines() {
                let e: Value = serde_json::from_str(line).unwrap();
                if let Some(id) = e["run_id"].as_str() {
                    assert!(ids.contains(id), "{name}: event of no trace's run: {e}");
                }
                if e["event"] == "RunEnded" {
                    ended += 1;
                    let stem = e["stem"].as_str().unwrap();
                    let t = &traces[&format!("{stem}.json")];
                    assert_eq!(t["run_id"], e["run_id"], "{name}: {e}");
                }
            }
        }
        assert_eq!(ended, 18);
        // Hooks saw the same id: debrief's artifact of each run names its run.
        for (name, t) in &traces {
            let stem = name.trim_end_matches(".json");
            let debrief = json_files(&out, ".debrief.json")
                .into_iter()
                .find(|(n, _)| n.starts_with(&format!("{stem}.")))
                .unwrap_or_else(|| panic!("no debrief artifact for {stem}"))
                .1;
            assert_eq!(debrief["run_id"], t["run_id"], "{stem}");
        }
        // And a plugin hook was called with it, at every run point.
        let calls = std::fs::read_to_string(&log).unwrap();
        let mut started = std::collections::BTreeSet::new();
        for line in calls.lines() {
            let c: Value = serde_json::from_str(line).unwrap();
            if let Some(id) = c["run_id"].as_str() {
                assert!(ids.contains(id), "a hook call for no trace's run: {c}");
                if c["point"] == "on_run_start" {
                    started.insert(id.to_owned());
                }
            }
        }
        assert_eq!(started.len(), 18, "concurrent {concurrent}");
    }
}

// 18 ────────────────────────────────────────────────────────────────────────────────────

#[test]
fn pinned_sweeps_with_retries_waits_and_debriefs_are_byte_identical() {
    let dir = tmp();
    // Each run: a 500 (retried after a jittered backoff), a reply that fails the scenario,
    // then debrief's turn; every answer takes a moment, so durations are never 0 by chance.
    let count = std::sync::atomic::AtomicUsize::new(0);
    let srv = TestServer::start(move |_| {
        std::thread::sleep(Duration::from_millis(30));
        if count
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
            .is_multiple_of(3)
        {
            return (500, "{\"error\":\"flaky\"}".into());
        }
        (
            200,
            json!({"choices": [{"message": {"role": "assistant", "content": "nope"}}]}).to_string(),
        )
    });
    let agent = agent_file(
        dir.path(),
        "flaky.toml",
        &format!(
            "label = \"flaky\"\nruntime = \"openai\"\nmodel = \"m\"\nendpoint = \"{}/v1\"\nmax_concurrency = 1\nretries = 2\nturn_timeout_s = 30\n",
            srv.base
        ),
    );
    let pack = write_pack(
        dir.path(),
        &[(
            "yes.toml",
            "id = \"yes\"\nruns = 2\nturns = [\"Say yes\"]\n[expect.outcome]\nreply_contains = [\"yes\"]\n",
        )],
    );
    let sweep = |out: &str| {
        let r = Wt::new(dir.path())
            .args([
                "run", "--seed", "7", "--jobs", "1", "--hook", "debrief", "--out", out,
            ])
            .pack(&pack)
            .agent(&agent)
            .env("WT_FIXED_CLOCK", CLOCK)
            .run();
        assert_eq!(r.code, 1, "{r}");
        files(&dir.path().join(out))
    };
    let (a, b) = (sweep("a"), sweep("b"));
    let j = journal(&dir.path().join("a"));
    assert_eq!(
        events(&j, "RequestRetried").len(),
        2,
        "each run retried once"
    );
    assert!(
        a.keys().any(|n| n.ends_with(".debrief.json")),
        "{:?}",
        a.keys()
    );
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
    for (name, bytes) in &a {
        assert!(
            bytes == &b[name],
            "{name} differs:\n{}\n---\n{}",
            String::from_utf8_lossy(bytes),
            String::from_utf8_lossy(&b[name])
        );
    }
}
