//! Lifecycle hooks through the real `wt run`: call counts and order, context members,
//! `converse` confinement, flag order, pairing on transport failure, containment of
//! panicking and hanging hooks, `debrief`, state probes, `wt doctor` and `wt triage`, and
//! byte-identity when no hook is active. Every contract a plugin hook relies on is tested
//! twice: with the hook in `wt`'s process and isolated in its own (`both_modes!`).

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
};

use serde_json::{Value, json};

use crate::harness::{
    CLOCK, Mode, PATIENCE, Run, TestServer, both_modes, files, json_files, no_process_left,
    plugin_dir, run, wait_for, worker_warnings, workspace, wt,
};

/// A pack holding two of the demo scenarios.
pub fn two_scenario_pack(root: &Path) -> PathBuf {
    let pack = root.join("pack2");
    std::fs::create_dir_all(pack.join("scenarios")).unwrap();
    std::fs::write(pack.join("pack.toml"), "name = \"two\"\n").unwrap();
    for s in ["order-status.toml", "refund-damaged.toml"] {
        std::fs::copy(
            workspace().join("host/packs/demo/scenarios").join(s),
            pack.join("scenarios").join(s),
        )
        .unwrap();
    }
    pack
}

fn log_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Trace files only (the sidecar rule: no dot in the stem).
fn trace_files(dir: &Path) -> BTreeMap<String, Value> {
    json_files(dir, ".json")
        .into_iter()
        .filter(|(n, _)| !n.trim_end_matches(".json").contains('.'))
        .collect()
}

both_modes!(
    recorder_sees_each_point_the_right_number_of_times_with_the_right_members,
    hooks_fire_in_flag_order,
    a_run_that_fails_in_transport_still_pairs_its_calls_and_cannot_converse,
    panicking_and_hanging_hooks_change_no_verdict_score_or_exit_code,
    acme_state_probe_reports_the_leaky_agent_and_stays_quiet_on_the_clean_one,
    acme_reads_an_agent_state_directory_when_configured,
);

fn recorder_sees_each_point_the_right_number_of_times_with_the_right_members(mode: Mode) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = plugin_dir(tmp.path(), &["wt_test_recorder"]);
    let pack = two_scenario_pack(tmp.path());
    let out = tmp.path().join("out");
    let log = tmp.path().join("calls.jsonl");
    let r = run(wt(tmp.path())
        .args([
            "run", "--runs", "3", "--jobs", "1", "--hook", "recorder", "--pack",
        ])
        .arg(&pack)
        .args(mode.args())
        .arg("--plugin-dir")
        .arg(&dir)
        .arg("--out")
        .arg(&out)
        .env("WT_RECORDER_LOG", &log)
        .env("WT_RECORDER_SANDBOX_WRITE", log.parent().unwrap()));
    assert_eq!(r.code, 0, "{r}");
    let calls = log_lines(&log);
    let count = |p: &str| calls.iter().filter(|c| c["point"] == p).count();
    assert_eq!(
        [
            count("on_provisioned"),
            count("on_run_start"),
            count("on_run_scored"),
            count("on_run_end"),
            count("on_scenario_end"),
            count("on_pack_end"),
        ],
        [2, 6, 6, 6, 2, 1]
    );
    // start → scored → end per run, all with the same run id, and runs never interleave.
    let run_points: Vec<(String, String)> = calls
        .iter()
        .filter(|c| !c["run_id"].is_null())
        .map(|c| {
            (
                c["run_id"].as_str().unwrap().to_owned(),
                c["point"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(run_points.len(), 18);
    for chunk in run_points.chunks(3) {
        assert!(chunk.iter().all(|(id, _)| *id == chunk[0].0), "{chunk:?}");
        let points: Vec<&str> = chunk.iter().map(|(_, p)| p.as_str()).collect();
        assert_eq!(points, ["on_run_start", "on_run_scored", "on_run_end"]);
    }
    let ids: BTreeSet<&String> = run_points.iter().map(|(id, _)| id).collect();
    assert_eq!(ids.len(), 6);

    let present = |p: &str| {
        let c = calls.iter().find(|c| c["point"] == p).unwrap();
        c["present"].clone()
    };
    assert_eq!(present("on_provisioned"), json!(["scenario", "agent"]));
    assert_eq!(
        present("on_run_start"),
        json!(["scenario", "agent", "run_id", "session_id"])
    );
    let full = json!([
        "scenario",
        "agent",
        "run_id",
        "session_id",
        "trace",
        "score"
    ]);
    assert_eq!(present("on_run_scored"), full);
    assert_eq!(present("on_run_end"), full);
    assert_eq!(
        present("on_scenario_end"),
        json!(["scenario", "agent", "aggregate"])
    );
    assert_eq!(present("on_pack_end"), json!(["aggregates"]));

    for c in &calls {
        let converse = c["converse"].as_str().unwrap();
        if c["point"] == "on_run_scored" {
            assert_eq!(converse, "ok", "{c}");
        } else {
            assert!(
                converse.starts_with("refused: converse is valid only during on_run_scored"),
                "{c}"
            );
        }
    }

    // Artifacts: beside each trace per run point, at the root for scenario and pack scope.
    let names: Vec<String> = files(&out).into_keys().collect();
    let with = |s: &str| names.iter().filter(|n| n.ends_with(s)).count();
    assert_eq!(with(".recorder.run-start.json"), 6);
    assert_eq!(with(".recorder.run-scored.json"), 6);
    assert_eq!(
        with(".recorder.scenario.order-status.provisioned.pack.json"),
        1
    );
    assert_eq!(
        with(".recorder.scenario.refund-damaged.scenario-end.pack.json"),
        1
    );
    assert_eq!(with(".recorder.pack-end.pack.json"), 1);
    let pack_end = json_files(&out, ".recorder.pack-end.pack.json");
    assert_eq!(
        pack_end.values().next().unwrap()["kind"],
        "recorder.pack-end"
    );

    // Never counted: the report sees exactly the six runs.
    let report = run(wt(tmp.path())
        .args(["report", "--format", "json"])
        .arg(&out));
    let doc: Value = serde_json::from_str(&report.stdout).unwrap();
    assert_eq!(
        doc["runs"].as_array().unwrap().len(),
        6,
        "{}",
        report.stdout
    );
    // Provenance of the active hook in every trace.
    for t in trace_files(&out).values() {
        assert_eq!(t["hooks"][0]["name"], "recorder");
        assert_eq!(t["hooks"][0]["sha256"].as_str().unwrap().len(), 64);
        assert!(
            t["hooks"][0]["settings"]["WT_RECORDER_LOG"].is_string(),
            "{t}"
        );
    }
}

fn hooks_fire_in_flag_order(mode: Mode) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = plugin_dir(tmp.path(), &["wt_test_recorder"]);
    let log = tmp.path().join("calls.jsonl");
    let r = run(wt(tmp.path())
        .args([
            "run",
            "--runs",
            "1",
            "--jobs",
            "1",
            "--filter",
            "order-status",
        ])
        .args(["--hook", "tape", "--hook", "recorder", "--plugin-dir"])
        .arg(&dir)
        .args(mode.args())
        .env("WT_TAPE_LOG", &log)
        .env("WT_TAPE_SANDBOX_WRITE", log.parent().unwrap())
        .env("WT_RECORDER_LOG", &log)
        .env("WT_RECORDER_SANDBOX_WRITE", log.parent().unwrap()));
    assert_eq!(r.code, 0, "{r}");
    let hooks: Vec<String> = log_lines(&log)
        .iter()
        .map(|c| {
            format!(
                "{}:{}",
                c["hook"].as_str().unwrap(),
                c["point"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        hooks,
        [
            "tape:on_provisioned",
            "recorder:on_provisioned",
            "tape:on_run_start",
            "recorder:on_run_start",
            "tape:on_run_scored",
            "recorder:on_run_scored",
            "tape:on_run_end",
            "recorder:on_run_end",
            "tape:on_scenario_end",
            "recorder:on_scenario_end",
            "tape:on_pack_end",
            "recorder:on_pack_end",
        ]
    );
}

fn a_run_that_fails_in_transport_still_pairs_its_calls_and_cannot_converse(mode: Mode) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = plugin_dir(tmp.path(), &["wt_test_recorder"]);
    let log = tmp.path().join("calls.jsonl");
    let r = run(wt(tmp.path())
        .args([
            "run",
            "--agent",
            "demo-slow",
            "--runs",
            "2",
            "--jobs",
            "1",
            "--filter",
            "order-status",
        ])
        .args(["--hook", "recorder", "--plugin-dir"])
        .arg(&dir)
        .args(mode.args())
        .env("WT_RECORDER_LOG", &log)
        .env("WT_RECORDER_SANDBOX_WRITE", log.parent().unwrap()));
    assert_eq!(r.code, 3, "{r}");
    let calls = log_lines(&log);
    let points: Vec<&str> = calls.iter().map(|c| c["point"].as_str().unwrap()).collect();
    assert_eq!(
        points,
        [
            "on_provisioned",
            "on_run_start",
            "on_run_scored",
            "on_run_end",
            "on_run_start",
            "on_run_scored",
            "on_run_end",
            "on_scenario_end",
            "on_pack_end",
        ]
    );
    let scored = calls
        .iter()
        .find(|c| c["point"] == "on_run_scored")
        .unwrap();
    assert!(
        scored["converse"]
            .as_str()
            .unwrap()
            .contains("session unusable"),
        "{scored}"
    );
}

fn pinned(
    tmp: &Path,
    out: &str,
    agent: &str,
    hooks: &[&str],
    dir: &Path,
    mode: Mode,
) -> (Run, PathBuf) {
    let out = tmp.join(out);
    let mut cmd = wt(tmp);
    cmd.args([
        "run", "--jobs", "1", "--seed", "7", "--agent", agent, "--out",
    ])
    .arg(&out)
    .args(mode.args())
    .env("WT_FIXED_CLOCK", CLOCK);
    for h in hooks {
        cmd.args(["--hook", h]);
    }
    if !hooks.is_empty() {
        cmd.arg("--plugin-dir").arg(dir);
    }
    (run(&mut cmd), out)
}

fn panicking_and_hanging_hooks_change_no_verdict_score_or_exit_code(mode: Mode) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = plugin_dir(tmp.path(), &["wt_test_panicky", "wt_test_hang"]);
    let (base, base_out) = pinned(tmp.path(), "base", "demo-forbidden-tool", &[], &dir, mode);
    assert_eq!(base.code, 1, "{base}");
    let (panicky, panicky_out) = pinned(
        tmp.path(),
        "panicky",
        "demo-forbidden-tool",
        &["panicky"],
        &dir,
        mode,
    );
    let (hang, hang_out) = {
        let out = tmp.path().join("hang");
        let r = run(wt(tmp.path())
            .args([
                "run",
                "--jobs",
                "1",
                "--seed",
                "7",
                "--agent",
                "demo-forbidden-tool",
                "--hook",
                "hang",
                "--out",
            ])
            .arg(&out)
            .arg("--plugin-dir")
            .arg(&dir)
            .args(mode.args())
            .env("WT_FIXED_CLOCK", CLOCK)
            .env("WT_HOOK_TIMEOUT_S", "1"));
        (r, out)
    };
    for (r, out) in [(&panicky, &panicky_out), (&hang, &hang_out)] {
        assert_eq!(r.code, base.code, "{r}");
        let scores = json_files(out, ".score.json");
        assert_eq!(scores.len(), 6);
        for (name, bytes) in files(&base_out)
            .iter()
            .filter(|(n, _)| n.ends_with(".score.json"))
        {
            assert_eq!(
                &files(out)[name],
                bytes,
                "{name} differs with a broken hook"
            );
        }
    }
    // The panicking hook: one panic is one warning and one `disabled` line, and the hook
    // is never called again (its instance is poisoned).
    let panics = panicky.stderr.matches("hook:panicky: panicked at").count();
    assert_eq!(panics, 1, "{panicky}");
    assert!(
        panicky
            .stderr
            .contains("panicky hook exploded in on_provisioned"),
        "{panicky}"
    );
    let disabled = "hook:panicky: disabled for the rest of this invocation after a panic";
    assert_eq!(panicky.stderr.matches(disabled).count(), 1, "{panicky}");
    assert!(
        !panicky.stderr.contains("consecutive failures")
            && !panicky.stderr.contains("disabled after an earlier panic"),
        "{panicky}"
    );
    let warnings: Vec<String> = trace_files(&panicky_out)
        .values()
        .flat_map(worker_warnings)
        .map(str::to_owned)
        .collect();
    assert!(warnings.is_empty(), "{warnings:?}");
    // The hanging hook: abandoned once, quarantined, and the sweep finished.
    let timeouts = hang
        .stderr
        .matches("hook:hang: timed out after 1s in on_run_start")
        .count();
    assert_eq!(timeouts, 1, "{hang}");
    assert_eq!(trace_files(&hang_out).len(), 6);
    // Isolated, the hung hook's process was killed: nothing of this test is left running.
    assert_eq!(no_process_left(&dir), Ok(()), "{hang}");
}

#[test]
fn debrief_writes_its_artifact_and_leaves_trace_and_score_untouched() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = plugin_dir(tmp.path(), &[]);
    let (base, base_out) = pinned(
        tmp.path(),
        "base",
        "demo-forbidden-tool",
        &[],
        &dir,
        Mode::InProcess,
    );
    let (with, with_out) = pinned(
        tmp.path(),
        "with",
        "demo-forbidden-tool",
        &["debrief"],
        &dir,
        Mode::InProcess,
    );
    assert_eq!((base.code, with.code), (1, 1), "{with}");
    let base_files = files(&base_out);
    let with_files = files(&with_out);
    let mut debriefs = 0;
    for (name, bytes) in &base_files {
        if name.ends_with(".score.json") {
            assert_eq!(&with_files[name], bytes, "{name}");
        } else if name.ends_with(".json") {
            // The trace with --hook differs only by the provenance of the active hooks.
            let mut a: Value = serde_json::from_slice(bytes).unwrap();
            let mut b: Value = serde_json::from_slice(&with_files[name]).unwrap();
            assert_eq!(b["hooks"][0]["name"], "debrief");
            assert!(a.get("hooks").is_none());
            b.as_object_mut().unwrap().remove("hooks");
            a.as_object_mut().unwrap().remove("hooks");
            assert_eq!(a, b, "{name}");
            let stem = name.trim_end_matches(".json");
            let art: Value =
                serde_json::from_slice(&with_files[&format!("{stem}.debrief.json")]).unwrap();
            debriefs += 1;
            let keys: BTreeSet<&str> = art
                .as_object()
                .unwrap()
                .keys()
                .map(String::as_str)
                .collect();
            assert_eq!(
                keys,
                BTreeSet::from([
                    "schema_version",
                    "run_id",
                    "scenario_id",
                    "agent",
                    "model",
                    "verdict",
                    "failed_layers",
                    "reasons",
                    "prompt",
                    "reply",
                    "tools_disabled",
                    "timed_out",
                    "duration_ms",
                    "error",
                    "kind",
                ])
            );
            assert_eq!(art["schema_version"], 2);
            assert_eq!(art["verdict"], "FAIL");
            assert_eq!(art["run_id"], a["run_id"]);
            assert_eq!(art["tools_disabled"], false);
            assert_eq!(art["timed_out"], false);
            assert!(
                art["reply"].as_str().unwrap().contains("Environment"),
                "{art}"
            );
            let prompt = art["prompt"].as_str().unwrap();
            assert!(prompt.find("Environment first").unwrap() < prompt.find("Blockers").unwrap());
            let score: Value =
                serde_json::from_slice(&base_files[&format!("{stem}.score.json")]).unwrap();
            for layer in ["outcome", "trajectory", "constraint", "integrity"] {
                assert_eq!(art["reasons"][layer], score[layer]["detail"]);
            }
        }
    }
    assert_eq!(debriefs, 6);
    // Passing runs are not debriefed unless WT_DEBRIEF_ON=all.
    let (ok, ok_out) = pinned(
        tmp.path(),
        "ok",
        "demo",
        &["debrief"],
        &dir,
        Mode::InProcess,
    );
    assert_eq!(ok.code, 0, "{ok}");
    assert_eq!(json_files(&ok_out, ".debrief.json").len(), 0);
}

#[test]
fn a_debrief_reply_past_the_converse_deadline_is_recorded_as_timed_out_and_dropped() {
    let late_reply_sent = Arc::new(AtomicBool::new(false));
    let sent = late_reply_sent.clone();
    let server = TestServer::start(move |req| {
        let body: Value = serde_json::from_str(&req.body).unwrap_or(Value::Null);
        let last = body["messages"]
            .as_array()
            .and_then(|m| m.last().cloned())
            .unwrap_or(Value::Null);
        let text = last["content"].as_str().unwrap_or_default().to_owned();
        let reply = if text.contains("This run has been scored") {
            // The slow model: the reply comes well past the 0.5 s converse deadline.
            std::thread::sleep(std::time::Duration::from_secs(2));
            sent.store(true, Ordering::SeqCst);
            "LATE-DEBRIEF-REPLY-MARKER"
        } else {
            "Your order is on its way."
        };
        (
            200,
            json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": reply}, "finish_reason": "stop"}]})
                .to_string(),
        )
    });
    let tmp = tempfile::tempdir().unwrap();
    let agent = tmp.path().join("agent.toml");
    std::fs::write(
        &agent,
        format!("label = \"local\"\nruntime = \"openai\"\nmodel = \"m\"\nendpoint = \"{}/v1\"\nturn_timeout_s = 10\n", server.base),
    )
    .unwrap();
    let out = tmp.path().join("out");
    let r = run(wt(tmp.path())
        .args([
            "run",
            "--runs",
            "1",
            "--jobs",
            "1",
            "--filter",
            "order-status",
            "--hook",
            "debrief",
            "--agent",
        ])
        .arg(&agent)
        .arg("--out")
        .arg(&out)
        .env("WT_HOOK_CONVERSE_TIMEOUT_S", "0.5"));
    assert_eq!(r.code, 1, "{r}");
    let arts = json_files(&out, ".debrief.json");
    assert_eq!(arts.len(), 1, "{r}");
    let art = arts.values().next().unwrap();
    assert_eq!(art["timed_out"], true, "{art}");
    assert_eq!(art["reply"], Value::Null);
    assert!(
        art["error"].as_str().unwrap().contains("timed out"),
        "{art}"
    );
    // Once the late reply is out, nothing of it may reach a file.
    wait_for(
        "the server to send the late debrief reply",
        PATIENCE,
        || late_reply_sent.load(Ordering::SeqCst),
    );
    for (name, bytes) in files(&out) {
        assert!(
            !String::from_utf8_lossy(&bytes).contains("LATE-DEBRIEF-REPLY-MARKER"),
            "the late reply leaked into {name}"
        );
    }
}

#[test]
fn no_hook_means_byte_identical_output_even_with_good_and_broken_plugins_installed() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = plugin_dir(
        tmp.path(),
        &[
            "wt_test_recorder",
            "acme_state_probe",
            "wt_test_panicky",
            "wt_test_plain",
        ],
    );
    std::fs::write(dir.join("libbroken.so"), b"\x7fELF garbage").unwrap();
    let sweep = |out: &str, with_plugins: bool| {
        let out = tmp.path().join(out);
        let mut cmd = wt(tmp.path());
        cmd.args(["run", "--jobs", "1", "--seed", "3", "--out"])
            .arg(&out)
            .env("WT_FIXED_CLOCK", CLOCK);
        if with_plugins {
            cmd.env("WT_PLUGIN_PATH", &dir)
                .arg("--plugin-dir")
                .arg(&dir);
            std::fs::create_dir_all(tmp.path().join("data/windtunnel")).unwrap();
        }
        let r = run(&mut cmd);
        assert_eq!(r.code, 0, "{r}");
        files(&out)
    };
    let plain = sweep("plain", false);
    let with = sweep("with", true);
    assert_eq!(plain.len(), 13);
    assert_eq!(plain, with);
}

fn acme_state_probe_reports_the_leaky_agent_and_stays_quiet_on_the_clean_one(mode: Mode) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = plugin_dir(tmp.path(), &["acme_state_probe"]);
    let (leaky, out) = pinned(
        tmp.path(),
        "leaky",
        "demo-leaky",
        &["acme_state_probe"],
        &dir,
        mode,
    );
    assert_eq!(leaky.code, 0, "hooks never gate: {leaky}");
    let violations = json_files(&out, ".acme_state_probe.violation.json");
    assert!(!violations.is_empty(), "{leaky}");
    for v in violations.values() {
        assert_eq!(v["kind"], "wt.state-probe.violation");
        assert_eq!(v["baseline"]["from"], "run");
        assert!(v["diff"].as_array().unwrap().len() <= 20);
        assert!(
            v["diff"][0]["path"]
                .as_str()
                .unwrap()
                .starts_with("/memory"),
            "{v}"
        );
    }
    let warned = trace_files(&out)
        .values()
        .filter(|t| {
            t["worker_warnings"].as_array().unwrap().iter().any(|w| {
                w.as_str()
                    .unwrap()
                    .starts_with("hook:acme_state_probe: state after reset differs")
            })
        })
        .count();
    assert_eq!(warned, violations.len());

    let (clean, out) = pinned(
        tmp.path(),
        "clean",
        "demo",
        &["acme_state_probe"],
        &dir,
        mode,
    );
    assert_eq!(clean.code, 0, "{clean}");
    assert!(json_files(&out, ".violation.json").is_empty(), "{clean}");
    assert!(!clean.stderr.contains("hook:acme_state_probe"), "{clean}");

    // A baseline written by `wt doctor` is named as the baseline's source.
    let baseline = tmp.path().join("baseline.json");
    let d = run(wt(tmp.path())
        .args(["doctor", "--write-baseline"])
        .arg(&baseline));
    assert_eq!(d.code, 0, "{d}");
    let r = run(wt(tmp.path())
        .args([
            "run",
            "--jobs",
            "1",
            "--agent",
            "demo-leaky",
            "--hook",
            "acme_state_probe",
            "--out",
        ])
        .arg(tmp.path().join("file-baseline"))
        .arg("--plugin-dir")
        .arg(&dir)
        .args(mode.args())
        .env("WT_ACME_STATE_PROBE_BASELINE", &baseline));
    assert_eq!(r.code, 0, "{r}");
    let v = json_files(&tmp.path().join("file-baseline"), ".violation.json");
    assert!(!v.is_empty());
    assert_eq!(
        v.values().next().unwrap()["baseline"],
        json!({"from": "file", "path": baseline.display().to_string()})
    );
}

fn acme_reads_an_agent_state_directory_when_configured(mode: Mode) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = plugin_dir(tmp.path(), &["acme_state_probe"]);
    let state = tmp.path().join("agent-state");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::write(state.join("memory.txt"), "clean").unwrap();
    let sweep = |out: &str, baseline: Option<&Path>| {
        let mut cmd = wt(tmp.path());
        cmd.args([
            "run",
            "--jobs",
            "1",
            "--runs",
            "1",
            "--hook",
            "acme_state_probe",
            "--plugin-dir",
        ])
        .arg(&dir)
        .args(mode.args())
        .arg("--out")
        .arg(tmp.path().join(out))
        .env("WT_ACME_STATE_PROBE_DIR", &state);
        if let Some(b) = baseline {
            cmd.env("WT_ACME_STATE_PROBE_BASELINE", b);
        }
        run(&mut cmd)
    };
    let r = sweep("out", None);
    assert_eq!(r.code, 0, "{r}");
    assert!(json_files(&tmp.path().join("out"), ".violation.json").is_empty());
    // A file the agent leaves behind between runs is a violation.
    let baseline = tmp.path().join("baseline.json");
    std::fs::write(&baseline, json!({"files": {}}).to_string()).unwrap();
    let r = sweep("out2", Some(&baseline));
    assert_eq!(r.code, 0, "{r}");
    let v = json_files(&tmp.path().join("out2"), ".violation.json");
    assert_eq!(v.len(), 3, "{r}");
    assert_eq!(
        v.values().next().unwrap()["diff"][0]["path"],
        "/files/memory.txt"
    );
}

#[test]
fn doctor_gates_on_isolation() {
    let tmp = tempfile::tempdir().unwrap();
    let ok = run(wt(tmp.path()).args(["doctor", "--seed", "1"]));
    assert_eq!(ok.code, 0, "{ok}");
    assert!(ok.stdout.contains("ok   reset canary"), "{ok}");
    let leaky = run(wt(tmp.path()).args(["doctor", "--seed", "1", "--agent", "demo-leaky"]));
    assert_eq!(leaky.code, 1, "{leaky}");
    assert!(
        leaky.stdout.contains(
            "FAIL reset canary  a fresh session after reset returned the nonce WT-CANARY-"
        ),
        "{leaky}"
    );
    assert!(leaky.stdout.contains("FAIL state probe"), "{leaky}");
}

#[test]
fn triage_places_failures_on_the_ladder_with_debrief_excerpts() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = plugin_dir(tmp.path(), &[]);
    let (_, out) = pinned(
        tmp.path(),
        "forbidden",
        "demo-forbidden-tool",
        &["debrief"],
        &dir,
        Mode::InProcess,
    );
    let (_, slow) = pinned(tmp.path(), "slow", "demo-slow", &[], &dir, Mode::InProcess);
    let r = run(wt(tmp.path())
        .args(["triage", "--json"])
        .arg(&out)
        .arg(&slow));
    assert_eq!(r.code, 0, "{r}");
    let clusters: Vec<Value> = serde_json::from_str(&r.stdout).unwrap();
    let escalate: Vec<&Value> = clusters
        .iter()
        .filter(|c| c["scenario_id"] == "escalate-human")
        .collect();
    assert_eq!(escalate.len(), 2, "{}", r.stdout);
    assert_eq!(escalate[0]["rung"], "wiring");
    assert!(
        escalate[0]["evidence"]
            .as_str()
            .unwrap()
            .contains("no reply within the turn timeout")
    );
    assert_eq!(escalate[1]["rung"], "steering");
    assert_eq!(escalate[1]["runs"].as_array().unwrap().len(), 2);
    assert!(
        escalate[1]["evidence"]
            .as_str()
            .unwrap()
            .contains("forbidden tool `issue_refund`")
    );
    assert!(
        escalate[1]["debriefs"][0]
            .as_str()
            .unwrap()
            .contains("issue_refund"),
        "{}",
        r.stdout
    );
    assert!(
        escalate[1]["reason"]
            .as_str()
            .unwrap()
            .contains("forbidden tool `…` called (turn N")
    );
}
