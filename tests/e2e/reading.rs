//! The reading side is never fooled into green: JUnit from the sweep's own runs, missing
//! shards, unreadable traces, journals it cannot read.

use serde_json::Value;
use std::path::PathBuf;

use crate::fixtures::*;
use crate::harness::*;

#[test]
fn junit_is_built_from_this_sweeps_own_runs() {
    let dir = tmp();
    let out = dir.path().join("runs");
    std::fs::create_dir(&out).unwrap();
    std::fs::write(out.join("config.json"), "{\"foo\": 1}").unwrap();
    std::fs::write(out.join("20200101T000000Z_deadbeef.json"), "{").unwrap();
    let r = Wt::new(dir.path())
        .args(["run", "--junit", "junit.xml"])
        .run();
    assert_eq!(r.code, 0, "{r}");
    let junit = std::fs::read_to_string(dir.path().join("junit.xml")).unwrap();
    assert_eq!(junit.matches("<testcase").count(), 6, "{junit}");
    assert!(!junit.contains("deadbeef"));
    // A scenario of this sweep that could not run is in it too, as an error.
    let pack = write_pack(
        dir.path(),
        &[(
            "broken.toml",
            "id = \"broken\"\nruns = 2\nturns = [\"hi\"]\npreconditions = [{ path = \"x\", exists = true }]\n[world]\ny = 1\n",
        )],
    );
    let r = Wt::new(dir.path())
        .args(["run", "--out", "broken", "--junit", "broken.xml", "--pack"])
        .arg(&pack)
        .run();
    assert_eq!(r.code, 3, "{r}");
    let junit = std::fs::read_to_string(dir.path().join("broken.xml")).unwrap();
    // One errored test case per run that never ran, as every view counts them.
    assert!(
        junit.contains("name=\"broken#0\"")
            && junit.contains("name=\"broken#1\"")
            && junit.matches("<error").count() == 2
            && junit.contains("precondition failed"),
        "{junit}"
    );
}

#[test]
fn a_missing_shard_or_an_empty_directory_makes_the_report_incomplete_not_green() {
    let dir = tmp();
    let shard = |k: &str, out: &str| {
        let r = Wt::new(dir.path())
            .args(["run", "--shard", k, "--seed", "7", "--out", out])
            .run();
        assert_eq!(r.code, 0, "{r}");
    };
    shard("1/2", "s1");
    std::fs::create_dir(dir.path().join("s2")).unwrap();
    let report = |dirs: &[&str]| {
        Wt::new(dir.path())
            .arg("report")
            .args(dirs)
            .arg("--gate")
            .run()
    };

    let r = report(&["s1", "s2"]);
    assert_eq!(r.code, 3, "{r}");
    let incomplete: Vec<&str> = r
        .stderr
        .lines()
        .filter(|l| l.starts_with("incomplete: "))
        .collect();
    assert_eq!(incomplete.len(), 2, "{r}");
    assert!(incomplete.iter().any(|l| l.contains("shard(s) 2/2")), "{r}");
    assert!(
        incomplete.iter().any(|l| l.contains("s2 holds no run")),
        "{r}"
    );

    let r = report(&["s1"]);
    assert_eq!(r.code, 3, "{r}");
    assert!(r.stderr.contains("shard(s) 2/2"), "{r}");

    shard("2/2", "s2");
    let r = report(&["s1", "s2"]);
    assert_eq!(r.code, 0, "{r}");
    assert!(!r.stderr.contains("incomplete"), "{r}");
}

#[test]
fn a_run_whose_trace_a_reader_cannot_read_counts_as_error_never_as_nothing() {
    let dir = tmp();
    // Writer: a service that reports 100,000 tool calls in one (allowed) 45 MB reply. The
    // trace stays readable, and the run is ERROR: its evidence cannot be stored whole.
    let result = "x".repeat(400);
    let srv = TestServer::start(move |s| match (s.method.as_str(), s.url.as_str()) {
        ("POST", "/inject") => {
            let call = format!(r#"{{"name":"lookup_order","arguments":{{}},"result":"{result}"}}"#);
            let calls = vec![call.as_str(); 100_000].join(",");
            (200, format!(r#"{{"reply":"done","tool_calls":[{calls}]}}"#))
        }
        _ => (200, "{}".into()),
    });
    let agent = agent_file(
        dir.path(),
        "svc.toml",
        &format!(
            "label = \"svc\"\nruntime = \"http\"\nendpoint = \"{}\"\nmax_response_bytes = 67108864\nturn_timeout_s = 120\n",
            srv.base
        ),
    );
    let r = Wt::new(dir.path())
        .args([
            "run",
            "--runs",
            "1",
            "--filter",
            "order-status",
            "--out",
            "big",
            "--agent",
        ])
        .arg(&agent)
        .run();
    assert_eq!(r.code, 3, "{r}");
    let traces_on_disk: Vec<PathBuf> = tree(&dir.path().join("big"))
        .into_keys()
        .filter(|p| {
            p.extension().is_some_and(|e| e == "json") && !p.to_string_lossy().contains(".score.")
        })
        .collect();
    assert_eq!(traces_on_disk.len(), 1);
    let size = std::fs::metadata(&traces_on_disk[0]).unwrap().len();
    assert!(
        size < 64 << 20,
        "a trace of {size} bytes, more than a reader takes"
    );
    let t = &traces(&dir.path().join("big"))[0];
    assert!(
        t["error"].as_str().unwrap().contains("100000 tool calls"),
        "{}",
        t["error"]
    );
    let g = Wt::new(dir.path()).args(["report", "big", "--gate"]).run();
    assert_eq!(g.code, 3, "{g}");

    // Reader: a run whose trace is gone is still a run, and not a passing one.
    let r = Wt::new(dir.path()).args(["run", "--out", "runs"]).run();
    assert_eq!(r.code, 0, "{r}");
    let runs = dir.path().join("runs");
    let gone = tree(&runs)
        .into_keys()
        .find(|p| {
            p.extension().is_some_and(|e| e == "json") && !p.to_string_lossy().contains(".score.")
        })
        .unwrap();
    std::fs::remove_file(&gone).unwrap();
    let g = Wt::new(dir.path())
        .args(["report", "runs", "--gate", "--format", "json"])
        .run();
    assert_eq!(g.code, 3, "{g}");
    assert!(
        g.stderr
            .contains("is named by its journal but its trace was not read"),
        "{g}"
    );
    let json: Value = serde_json::from_str(&g.stdout).unwrap();
    assert_eq!(json["pack"]["runs"], 6, "{json}");
    assert_eq!(json["pack"]["errored"], 1, "{json}");
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
fn a_trace_or_score_newer_than_this_wt_is_named_and_never_passes_the_gate() {
    let dir = tmp();
    let r = Wt::new(dir.path())
        .args(["run", "--seed", "3", "--out", "runs"])
        .run();
    assert_eq!(r.code, 0, "{r}");
    let runs = dir.path().join("runs");
    let first = trace_paths(&runs)[0].clone();
    let trace: Value = serde_json::from_slice(&std::fs::read(&first).unwrap()).unwrap();
    let score: Value =
        serde_json::from_slice(&std::fs::read(first.with_extension("score.json")).unwrap())
            .unwrap();
    // A copy of a run as a later wt would write it (another run id, schema_version 99), and
    // one whose trace this wt reads but whose score is of that later schema.
    let plant = |stem: &str, run_id: &str, trace_version: u32, score_version: u32| {
        let mut t = trace.clone();
        t["run_id"] = run_id.into();
        t["schema_version"] = trace_version.into();
        let mut s = score.clone();
        s["run_id"] = run_id.into();
        s["schema_version"] = score_version.into();
        std::fs::write(runs.join(format!("{stem}.score.json")), s.to_string()).unwrap();
        std::fs::write(runs.join(format!("{stem}.json")), t.to_string()).unwrap();
    };
    plant(
        "20991231T000000Z_ffffffff",
        "ffffffff-0000-4000-8000-000000000099",
        99,
        1,
    );
    plant(
        "20991231T000000Z_eeeeeeee",
        "eeeeeeee-0000-4000-8000-000000000099",
        1,
        99,
    );
    let g = Wt::new(dir.path())
        .args(["report", "runs", "--gate", "--format", "json"])
        .run();
    assert_eq!(g.code, 3, "{g}");
    let named: Vec<&str> = g
        .stderr
        .lines()
        .filter(|l| l.contains("20991231T000000Z_ffffffff.json"))
        .collect();
    assert_eq!(named.len(), 1, "{g}");
    assert!(
        named[0].contains("schema_version 99") && named[0].contains("newer than this wt reads"),
        "{}",
        named[0]
    );
    let json: Value = serde_json::from_str(&g.stdout).unwrap();
    // The newer trace is not a run; the run with a newer score is one, and not judged.
    assert_eq!(json["pack"]["runs"], 7, "{json}");
    assert_eq!(json["pack"]["errored"], 1, "{json}");
    assert!(
        g.stderr
            .lines()
            .any(|l| l.contains("20991231T000000Z_eeeeeeee.score.json")
                && l.contains("schema_version 99")),
        "{g}"
    );
    // Every reader goes through the same rule: compare's gate and triage neither.
    let c = Wt::new(dir.path())
        .args(["compare", "runs", "runs", "--gate"])
        .run();
    assert_ne!(c.code, 0, "{c}");
    assert!(c.stderr.contains("20991231T000000Z_ffffffff.json"), "{c}");
    let t = Wt::new(dir.path()).args(["triage", "runs", "--json"]).run();
    assert!(!t.stdout.contains("ffffffff-0000"), "{t}");
}
