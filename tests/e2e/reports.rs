//! The reading side through the real `wt`: the one reader (foreign, corrupt, oversized,
//! linked and leftover files; dedupe; journals), `wt report` merging directories and its
//! `--gate`, pass^k in every format, `wt compare` with its statistics and gate, and the HTML
//! pages rendered in a real browser (headless Chromium).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::harness::{
    PATIENCE, Run, Wt, chromium, console_lines, dead_port, dump_dom, files, journal_file, signal,
    tmp, trace_paths, wait_for,
};

/// `wt run` into `dir/<out>` with extra arguments; returns the run directory.
fn sweep(dir: &Path, out: &str, args: &[&str], code: i32) -> PathBuf {
    let r = Wt::new(dir).args(["run", "--out", out]).args(args).run();
    assert_eq!(r.code, code, "wt run {args:?}: {r}");
    dir.join(out)
}

fn wt(dir: &Path, args: &[&str]) -> Run {
    Wt::new(dir).args(args).run()
}

fn json(r: &Run) -> Value {
    serde_json::from_str(&r.stdout).unwrap_or_else(|e| panic!("{e}: {r}"))
}

fn scenario<'a>(report: &'a Value, id: &str) -> &'a Value {
    report["scenarios"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["scenario_id"] == id)
        .unwrap_or_else(|| panic!("no scenario {id} in {report}"))
}

fn warnings(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| l.starts_with("warning: "))
        .collect()
}

// ---- the reader ----------------------------------------------------------------------------

#[test]
fn foreign_corrupt_oversized_and_linked_files_are_skipped_with_one_warning_each() {
    let dir = tmp();
    let runs = sweep(dir.path(), "runs", &["--agent", "demo-forbidden-tool"], 1);
    let a_trace = trace_paths(&runs)[0].clone();
    std::fs::write(
        runs.join("config.json"),
        r#"{"model": "gpt", "retries": 3}"#,
    )
    .unwrap();
    std::fs::write(runs.join("20250101T000000Z_deadbeef.json"), "{\"run_id\": ").unwrap();
    // 65 MiB, sparse: refused by size before a byte is read.
    let big = std::fs::File::create(runs.join("20250101T000000Z_bigbigbi.json")).unwrap();
    big.set_len(65 << 20).unwrap();
    std::os::unix::fs::symlink(&a_trace, runs.join("20250101T000000Z_linklink.json")).unwrap();
    let fifo = runs.join("20250101T000000Z_fifofifo.json");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let before = files_except_fifo(&runs);

    let rep = wt(dir.path(), &["report", "runs", "--format", "json"]);
    assert_eq!(rep.code, 0, "{rep}");
    let v = json(&rep);
    assert_eq!(v["runs"].as_array().unwrap().len(), 6, "{rep}");
    let w = warnings(&rep.stderr);
    assert_eq!(w.len(), 5, "one line per bad file: {}", rep.stderr);
    for (name, why) in [
        ("config.json", "not a wt trace"),
        ("20250101T000000Z_deadbeef.json", "not a wt trace"),
        ("20250101T000000Z_bigbigbi.json", "over the 64 MiB limit"),
        (
            "20250101T000000Z_linklink.json",
            "symbolic links are not followed",
        ),
        ("20250101T000000Z_fifofifo.json", "not a regular file"),
    ] {
        assert!(
            w.iter()
                .any(|l| l.contains(&format!("skipping runs/{name}: ")) && l.contains(why)),
            "{name}: {}",
            rep.stderr
        );
    }
    assert_eq!(v["warnings"].as_array().unwrap().len(), 5);

    // Each side of a comparison is read (and warned about) on its own.
    for (args, lines) in [
        (&["triage", "runs"][..], 5),
        (&["rescore", "runs"], 5),
        // Both sides' warnings, and that the sides are one directory.
        (&["compare", "runs", "runs"], 11),
    ] {
        let r = wt(dir.path(), args);
        assert_eq!(r.code, 0, "{args:?}: {r}");
        assert_eq!(warnings(&r.stderr).len(), lines, "{args:?}: {}", r.stderr);
    }
    assert_eq!(files_except_fifo(&runs), before, "nothing was changed");
}

fn files_except_fifo(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| std::fs::symlink_metadata(p).unwrap().is_file())
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&p).unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

#[test]
fn a_corrupt_score_sidecar_makes_that_run_error_not_the_directory() {
    let dir = tmp();
    let runs = sweep(dir.path(), "runs", &[], 0);
    let trace = trace_paths(&runs)[0].clone();
    std::fs::write(trace.with_extension("score.json"), "not json").unwrap();
    let rep = wt(dir.path(), &["report", "--format", "json", "--gate"]);
    assert_eq!(rep.code, 3, "an unscorable run cannot be judged: {rep}");
    let v = json(&rep);
    assert_eq!(v["pack"]["errored"], 1);
    assert_eq!(v["pack"]["passed"], 5);
    assert_eq!(warnings(&rep.stderr).len(), 1, "{}", rep.stderr);
    assert!(rep.stderr.contains("does not parse"), "{}", rep.stderr);
}

#[test]
fn report_counts_each_run_once_across_repeated_and_copied_directories() {
    let dir = tmp();
    let runs = sweep(dir.path(), "runs", &[], 0);
    let copy = dir.path().join("copy");
    std::fs::create_dir(&copy).unwrap();
    for (name, bytes) in files(&runs) {
        std::fs::write(copy.join(name), bytes).unwrap();
    }
    for args in [
        &["report", "runs", "runs", "--format", "json"][..],
        &["report", "runs", "copy", "./runs", "--format", "json"],
    ] {
        let rep = wt(dir.path(), args);
        assert_eq!(rep.code, 0, "{rep}");
        let v = json(&rep);
        assert_eq!(v["runs"].as_array().unwrap().len(), 6, "{args:?}");
        assert_eq!(v["pack"]["runs"], 6, "{args:?}");
    }
    let md = wt(
        dir.path(),
        &["report", "runs", "copy", "--format", "markdown"],
    );
    assert!(md.stdout.contains("| `order-status` | 2/2 |"), "{md}");
    let junit = wt(dir.path(), &["report", "runs", "copy", "--format", "junit"]);
    assert_eq!(junit.stdout.matches("<testcase").count(), 6, "{junit}");
    assert!(junit.stderr.contains("repeat a run_id"), "{junit}");
    // Pinned sweeps of different agents reuse run ids; they are different runs all the same.
    for (out, agent) in [("pin-a", "demo"), ("pin-b", "demo-forbidden-tool")] {
        let r = Wt::new(dir.path())
            .args(["run", "--out", out, "--seed", "7", "--agent", agent])
            .env("WT_FIXED_CLOCK", "2026-11-30T05:15:00Z")
            .run();
        assert!(r.code <= 1, "{r}");
    }
    let pinned = json(&wt(
        dir.path(),
        &["report", "pin-a", "pin-b", "--format", "json"],
    ));
    assert_eq!(pinned["pack"]["runs"], 12);
    assert_eq!(pinned["pack"]["passed"], 6);
    // A trace copied under another stem in the same directory is rescored once (the first
    // by name wins).
    let trace = trace_paths(&runs)[0].clone();
    std::fs::copy(&trace, runs.join("20991231T000000Z_copycopy.json")).unwrap();
    let re = wt(dir.path(), &["rescore", "runs"]);
    assert_eq!(re.code, 0, "{re}");
    assert!(re.stderr.contains("checked 6 run(s)"), "{re}");
    assert!(
        re.stderr.contains(
            "warning: skipping runs/20991231T000000Z_copycopy.json: it repeats the run_id"
        ),
        "{re}"
    );
}

#[test]
fn orphan_scores_artifacts_and_temp_files_of_a_killed_sweep_are_ignored() {
    let dir = tmp();
    let runs = sweep(dir.path(), "runs", &["--agent", "demo-forbidden-tool"], 1);
    // A sweep killed between writing a run's score and its trace (the commit record), and
    // while a temp file was open.
    let trace = trace_paths(&runs)[0].clone();
    let stem = trace.file_stem().unwrap().to_string_lossy().into_owned();
    std::fs::write(
        runs.join(format!("{stem}.debrief.json")),
        "{\"kind\":\"debrief\"}",
    )
    .unwrap();
    std::fs::remove_file(&trace).unwrap();
    // Killed before the trace, the run never reached its `RunEnded`: the journal does not
    // name it (a run it names but whose trace is gone counts as ERROR; see reading.rs).
    let journal = crate::harness::journal_file(&runs);
    let kept: String = std::fs::read_to_string(&journal)
        .unwrap()
        .lines()
        .filter(|l| !(l.contains("\"RunEnded\"") && l.contains(&stem)))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&journal, kept).unwrap();
    std::fs::write(runs.join(".wt-tmp-AbC123"), "{\"half\": ").unwrap();
    std::fs::write(runs.join(".wt-tmp-empty"), "").unwrap();
    for args in [
        &["report", "--format", "json"][..],
        &["triage", "--json"],
        &["rescore"],
    ] {
        let r = wt(dir.path(), args);
        assert_eq!(r.code, 0, "{args:?}: {r}");
        assert!(warnings(&r.stderr).is_empty(), "{args:?}: {}", r.stderr);
    }
    let v = json(&wt(dir.path(), &["report", "--format", "json"]));
    assert_eq!(v["pack"]["runs"], 5);
    assert!(
        !runs.join(format!("{stem}.json")).exists(),
        "rescore made no trace"
    );
}

#[test]
fn a_sweep_without_sweep_ended_is_incomplete_and_never_gates_green() {
    let dir = tmp();
    let runs = sweep(dir.path(), "runs", &[], 0);
    let ok = wt(dir.path(), &["report", "--gate"]);
    assert_eq!(ok.code, 0, "{ok}");
    assert!(warnings(&ok.stderr).is_empty(), "{}", ok.stderr);
    // Killed before the end: the journal's last lines never made it.
    let j = journal_file(&runs);
    let text = std::fs::read_to_string(&j).unwrap();
    let cut: String = text
        .lines()
        .filter(|l| !l.contains("\"SweepEnded\""))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&j, cut).unwrap();
    let sweep_id = serde_json::from_str::<Value>(text.lines().next().unwrap()).unwrap()["sweep_id"]
        .as_str()
        .unwrap()
        .to_owned();

    let plain = wt(dir.path(), &["report"]);
    assert_eq!(plain.code, 0, "without --gate report only reports: {plain}");
    assert!(
        plain
            .stderr
            .contains(&format!("warning: sweep {sweep_id} is incomplete")),
        "{}",
        plain.stderr
    );
    let gate = wt(dir.path(), &["report", "--gate", "--format", "json"]);
    assert_eq!(gate.code, 3, "{gate}");
    let v = json(&gate);
    assert_eq!(v["sweeps"][0]["status"], "incomplete");
    assert_eq!(v["gate"], 3);
    let html = wt(dir.path(), &["report", "--format", "html"]);
    assert!(html.stdout.contains("is incomplete"), "the page says so");
    // Nor does a comparison with a partial side pass its gate.
    let cmp = wt(dir.path(), &["compare", "runs", "runs", "--gate"]);
    assert_eq!(cmp.code, 3, "{cmp}");
    assert!(
        cmp.stdout.contains("The comparison is incomplete")
            && cmp
                .stderr
                .contains(&format!("incomplete: BASE: sweep {sweep_id} is incomplete"))
            && !cmp.stderr.contains(&format!("warning: sweep {sweep_id}")),
        "{cmp}"
    );
}

/// Starts a long sweep of passing runs, waits for its first trace, then sends `signal`
/// (`KILL` or `INT`). Every run written passes: only the sweep's end can fail the gate.
fn cut_sweep(dir: &Path, out: &str, sig: &str) -> PathBuf {
    let mut child = Wt::new(dir)
        .args([
            "run",
            "--out",
            out,
            "--filter",
            "order-status",
            "--runs",
            "100000",
        ])
        .command()
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let runs = dir.join(out);
    wait_for("a first trace", PATIENCE, || {
        runs.is_dir() && !trace_paths(&runs).is_empty()
    });
    signal(child.id(), sig);
    child.wait().unwrap();
    runs
}

#[test]
fn a_killed_or_interrupted_sweep_is_reported_as_such_and_gates_as_error() {
    let dir = tmp();
    cut_sweep(dir.path(), "killed", "KILL");
    let r = wt(
        dir.path(),
        &["report", "killed", "--gate", "--format", "json"],
    );
    assert_eq!(r.code, 3, "{r}");
    assert!(r.stderr.contains("is incomplete"), "{}", r.stderr);
    assert_eq!(json(&r)["sweeps"][0]["status"], "incomplete");

    cut_sweep(dir.path(), "stopped", "INT");
    let r = wt(
        dir.path(),
        &["report", "stopped", "--gate", "--format", "json"],
    );
    assert_eq!(r.code, 3, "{r}");
    assert!(r.stderr.contains("was interrupted"), "{}", r.stderr);
    assert_eq!(json(&r)["sweeps"][0]["status"], "interrupted");
}

// ---- merging run directories and the gate -------------------------------------------------

#[test]
fn report_gate_is_the_exit_code_of_the_sweep() {
    let dir = tmp();
    for (agent, code) in [("demo", 0), ("demo-forbidden-tool", 1), ("demo-slow", 3)] {
        sweep(dir.path(), agent, &["--agent", agent, "--runs", "1"], code);
        for format in ["table", "json", "junit", "markdown", "html"] {
            let r = wt(dir.path(), &["report", agent, "--gate", "--format", format]);
            assert_eq!(r.code, code, "{agent} {format}: {r}");
        }
    }
}

/// Per scenario: (id, runs, passed, failed, errored).
fn counts(v: &Value) -> Vec<(String, u64, u64, u64, u64)> {
    v["scenarios"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let n = |k: &str| s[k].as_u64().unwrap();
            (
                s["scenario_id"].as_str().unwrap().to_owned(),
                n("runs"),
                n("passed"),
                n("failed"),
                n("errored"),
            )
        })
        .collect()
}

#[test]
fn shards_merge_into_the_unsharded_result_with_its_gate() {
    let dir = tmp();
    for (agent, code) in [("demo-forbidden-tool", 1), ("demo", 0)] {
        let whole = format!("{agent}-whole");
        sweep(dir.path(), &whole, &["--agent", agent, "--runs", "4"], code);
        let one = wt(
            dir.path(),
            &["report", &whole, "--format", "json", "--gate"],
        );
        assert_eq!(one.code, code, "{one}");
        let mut merged_args = vec!["report".to_owned()];
        for k in 1..=3 {
            let out = format!("{agent}-shard{k}");
            let shard = format!("{k}/3");
            let r = Wt::new(dir.path())
                .args(["run", "--out", &out, "--agent", agent, "--runs", "4"])
                .args(["--shard", &shard])
                .run();
            assert!(r.code == 0 || r.code == code, "{r}");
            merged_args.push(out);
        }
        for format in ["table", "markdown", "junit", "html", "json"] {
            let mut args = merged_args.clone();
            args.extend(["--gate".into(), "--format".into(), format.into()]);
            let r = Wt::new(dir.path()).args(&args).run();
            assert_eq!(r.code, code, "{agent} {format}: {r}");
            if format == "json" {
                let (merged, one) = (json(&r), json(&one));
                assert_eq!(counts(&merged), counts(&one), "{agent}");
                assert_eq!(merged["pack"]["runs"], 12);
            }
        }
    }
    // Pinned shards share their sweep id: one sweep, its shards listed, complete.
    let mut args = vec!["report".to_owned()];
    for k in 1..=2 {
        let out = format!("pinned{k}");
        let r = Wt::new(dir.path())
            .args([
                "run",
                "--out",
                &out,
                "--seed",
                "5",
                "--shard",
                &format!("{k}/2"),
            ])
            .run();
        assert_eq!(r.code, 0, "{r}");
        args.push(out);
    }
    args.extend(["--format".into(), "json".into()]);
    let v = json(&Wt::new(dir.path()).args(&args).run());
    assert_eq!(v["sweeps"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(v["sweeps"][0]["shards"], serde_json::json!(["1/2", "2/2"]));
    assert_eq!(v["sweeps"][0]["status"], "complete");
    assert_eq!(v["pack"]["runs"], 6);
}

#[test]
fn a_scenario_that_could_not_provision_gates_as_error_from_the_journal() {
    let dir = tmp();
    let agent = dir.path().join("dead.toml");
    std::fs::write(
        &agent,
        format!(
            "label = \"svc\"\nruntime = \"http\"\nendpoint = \"http://127.0.0.1:{}\"\nturn_timeout_s = 1.0\nretries = 0\n",
            dead_port()
        ),
    )
    .unwrap();
    let broken = sweep(
        dir.path(),
        "broken",
        &[
            "--agent",
            agent.to_str().unwrap(),
            "--filter",
            "order-status",
        ],
        3,
    );
    assert!(
        trace_paths(&broken).is_empty(),
        "no trace: only the journal knows"
    );
    sweep(dir.path(), "fine", &["--filter", "refund-damaged"], 0);

    let r = wt(
        dir.path(),
        &["report", "fine", "broken", "--gate", "--format", "json"],
    );
    assert_eq!(r.code, 3, "{r}");
    let v = json(&r);
    let s = scenario(&v, "order-status");
    assert_eq!(
        (s["runs"].as_u64(), s["errored"].as_u64()),
        (Some(2), Some(2))
    );
    assert!(
        s["error"].as_str().unwrap().contains("provisioning failed"),
        "{s}"
    );
    assert_eq!(scenario(&v, "refund-damaged")["passed"], 2);
    let table = wt(dir.path(), &["report", "fine", "broken"]);
    assert!(
        table.stdout.contains("ERROR order-status (sweep ")
            && table.stdout.contains("2 run(s) never ran"),
        "{table}"
    );
    let junit = wt(dir.path(), &["report", "broken", "--format", "junit"]);
    assert!(
        junit.stdout.contains("name=\"order-status#1\"")
            && junit.stdout.matches("<error").count() == 2,
        "{junit}"
    );
    let only = wt(dir.path(), &["report", "broken", "--gate"]);
    assert_eq!(
        only.code, 3,
        "a directory with no trace but a failed scenario: {only}"
    );
}

#[test]
fn journals_are_told_apart_by_sweep_id_not_file_name() {
    let dir = tmp();
    let runs = sweep(dir.path(), "runs", &[], 0);
    let j = journal_file(&runs);
    // Any stem: the reader goes by the `.events.jsonl` suffix and the ids inside.
    let renamed = runs.join("whatever-name.events.jsonl");
    std::fs::rename(&j, &renamed).unwrap();
    let v = json(&wt(dir.path(), &["report", "--format", "json", "--gate"]));
    assert_eq!(v["sweeps"].as_array().unwrap().len(), 1);
    assert_eq!(v["sweeps"][0]["status"], "complete");
    // A foreign file with the journal suffix is skipped with a warning.
    std::fs::write(runs.join("notes.events.jsonl"), "hello\n").unwrap();
    let r = wt(dir.path(), &["report", "--gate"]);
    assert_eq!(r.code, 0, "{r}");
    assert_eq!(warnings(&r.stderr).len(), 1, "{}", r.stderr);
    assert!(r.stderr.contains("not a wt event journal"), "{}", r.stderr);
}

// ---- pass^k and pass@k ---------------------------------------------------------------------

#[test]
fn pass_hat_k_and_pass_at_k_in_every_format() {
    let dir = tmp();
    // 3 runs that pass; then rescore one of them as FAIL by editing its expectations.
    let runs = sweep(
        dir.path(),
        "runs",
        &["--filter", "order-status", "--runs", "3"],
        0,
    );
    let trace = trace_paths(&runs)[1].clone();
    let score_file = trace.with_extension("score.json");
    let mut score: Value = serde_json::from_slice(&std::fs::read(&score_file).unwrap()).unwrap();
    score["verdict"] = "FAIL".into();
    score["outcome"]["passed"] = false.into();
    std::fs::write(&score_file, score.to_string()).unwrap();

    let v = json(&wt(dir.path(), &["report", "--format", "json"]));
    let s = scenario(&v, "order-status");
    // c = 2 of n = 3: pass^1 = 2/3, pass^3 = 0; pass@3 = 1.
    assert_eq!(s["pass_hat_k"][0]["k"], 1);
    assert!((s["pass_hat_k"][0]["value"].as_f64().unwrap() - 2.0 / 3.0).abs() < 1e-9);
    assert_eq!(
        s["pass_hat_k"][1],
        serde_json::json!({"k": 3, "value": 0.0})
    );
    assert_eq!(s["pass_at_k"][1], serde_json::json!({"k": 3, "value": 1.0}));
    let wilson = s["wilson95"].as_array().unwrap();
    assert!((wilson[0].as_f64().unwrap() - 0.2077).abs() < 1e-4, "{s}");
    assert!((wilson[1].as_f64().unwrap() - 0.9385).abs() < 1e-4, "{s}");
    assert_eq!(v["pack"]["k"], 3);

    let table = wt(dir.path(), &["report"]).stdout;
    assert!(
        table.contains("order-status      2/3    67% [21–94]    0.00    1.00"),
        "{table}"
    );
    assert!(
        table.contains("pass^1 0.67 · pass^3 0.00 · pass@3 1.00"),
        "{table}"
    );
    let md = wt(dir.path(), &["report", "--format", "markdown"]).stdout;
    assert!(
        md.contains("| `order-status` | 2/3 | 67% [21–94] | 0.00 | 1.00 |"),
        "{md}"
    );
    let html = wt(dir.path(), &["report", "--format", "html"]).stdout;
    assert!(html.contains("pass^3") && html.contains("pass@3"), "html");
}

// ---- wt compare ----------------------------------------------------------------------------

#[test]
fn compare_flags_a_significant_regression_and_gates_on_it() {
    let dir = tmp();
    sweep(dir.path(), "base", &["--runs", "6", "--seed", "1"], 0);
    sweep(
        dir.path(),
        "new",
        &[
            "--agent",
            "demo-forbidden-tool",
            "--runs",
            "6",
            "--seed",
            "2",
            "--filter",
            "*s*",
        ],
        1,
    );
    // NEW ran a subset of BASE's scenarios: the comparison is incomplete (gate 3), saying
    // which, unless that is accepted.
    let r = wt(dir.path(), &["compare", "base", "new", "--gate"]);
    assert_eq!(r.code, 3, "{r}");
    assert!(
        r.stderr.contains(
            "incomplete: 1 scenario(s) only in BASE, not judged against NEW: refund-damaged"
        ),
        "{r}"
    );
    let r = wt(
        dir.path(),
        &[
            "compare",
            "base",
            "new",
            "--format",
            "json",
            "--gate",
            "--allow-missing",
        ],
    );
    assert_eq!(r.code, 1, "{r}");
    let v = json(&r);
    let s = v["scenarios"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["scenario_id"] == "order-status")
        .unwrap();
    assert_eq!(s["verdict"], "regressed");
    // 6/6 against 0/6: Fisher's one-sided p = 1 / C(12, 6) = 0.001082; Holm over the two
    // scenarios compared doubles the smaller.
    assert!(
        (s["p_value"].as_f64().unwrap() - 1.0 / 924.0).abs() < 1e-9,
        "{s}"
    );
    assert!(
        (s["p_adjusted"].as_f64().unwrap() - 2.0 / 924.0).abs() < 1e-9,
        "{s}"
    );
    assert_eq!(v["correction"], "holm");
    assert_eq!(v["pack"]["regressed"], true, "{v}");
    assert_eq!(s["difference"], -1.0);
    assert_eq!(s["base"]["passed"], 6);
    assert!(
        (s["new"]["interval"][1].as_f64().unwrap() - 0.3903).abs() < 1e-4,
        "{s}"
    );
    let appeared: Vec<&str> = s["appeared"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["layer"].as_str().unwrap())
        .collect();
    assert_eq!(appeared, ["outcome", "constraint"], "{s}");
    assert_eq!(s["layers"][1]["status"], "appeared");
    assert_eq!(v["only_in_base"][0]["scenario_id"], "refund-damaged");
    assert_eq!(v["counts"]["regressed"], 2);
    assert!(
        v["summary"]
            .as_str()
            .unwrap()
            .starts_with("NEW is worse: 2 scenario(s) regressed"),
        "{v}"
    );
    assert!(r.stderr.contains("NEW is worse"), "summary on stderr: {r}");

    let table = wt(dir.path(), &["compare", "base", "new"]);
    assert_eq!(table.code, 0, "without --gate: {table}");
    assert!(table.stdout.contains("regressed"), "{table}");
    assert!(
        table
            .stdout
            .contains("appeared    constraint: forbidden tool `…` called"),
        "{table}"
    );
    assert!(
        table
            .stdout
            .contains("only in BASE: refund-damaged (6/6 passed)"),
        "{table}"
    );
    let md = wt(
        dir.path(),
        &["compare", "base", "new", "--format", "markdown"],
    );
    assert!(
        md.stdout
            .contains("| `order-status` | 6/6 100% [61–100] | 0/6 0% [0–39] | -100 pp | 0.0011 (0.0022) | 🔴 regressed |"),
        "{md}"
    );
    // Swapped, the same difference is an improvement: the gate passes.
    let back = wt(
        dir.path(),
        &[
            "compare",
            "new",
            "base",
            "--format",
            "json",
            "--gate",
            "--allow-missing",
        ],
    );
    assert_eq!(back.code, 0, "{back}");
    assert_eq!(json(&back)["counts"]["improved"], 2);
}

#[test]
fn compare_does_not_flap_on_noise_and_needs_enough_runs() {
    let dir = tmp();
    sweep(dir.path(), "base", &["--filter", "order-status"], 0);
    sweep(
        dir.path(),
        "new",
        &["--filter", "order-status", "--agent", "demo-forbidden-tool"],
        1,
    );
    // 2/2 against 0/2: no outcome of 2 runs a side can be significant.
    let r = wt(
        dir.path(),
        &["compare", "base", "new", "--gate", "--format", "json"],
    );
    assert_eq!(r.code, 0, "{r}");
    let v = json(&r);
    assert_eq!(v["scenarios"][0]["verdict"], "not_enough_runs");
    assert!(
        v["scenarios"][0]["why"]
            .as_str()
            .unwrap()
            .contains("needs at least 4 runs per side"),
        "{v}"
    );
    // A stricter alpha widens the intervals and needs more runs still.
    let strict = json(&wt(
        dir.path(),
        &[
            "compare", "base", "new", "--alpha", "0.01", "--format", "json",
        ],
    ));
    assert_eq!(strict["alpha"], 0.01);
    assert!(
        strict["scenarios"][0]["why"]
            .as_str()
            .unwrap()
            .contains("needs at least 5 runs per side"),
        "{strict}"
    );
    for bad in ["0", "1", "x"] {
        let r = wt(dir.path(), &["compare", "base", "new", "--alpha", bad]);
        assert_eq!(r.code, 2, "--alpha {bad}: {r}");
    }
    let missing = wt(dir.path(), &["compare", "base"]);
    assert_eq!(missing.code, 2, "{missing}");
    assert!(
        missing.stderr.contains("needs a BASE and a NEW"),
        "{missing}"
    );
}

#[test]
fn compare_reports_latency_deltas_and_merges_several_directories_a_side() {
    let dir = tmp();
    let base = sweep(
        dir.path(),
        "base",
        &["--filter", "order-status", "--seed", "1"],
        0,
    );
    let base2 = sweep(
        dir.path(),
        "base2",
        &["--filter", "order-status", "--seed", "2"],
        0,
    );
    // NEW: the same runs, 120 ms slower per turn.
    let new = dir.path().join("new");
    std::fs::create_dir(&new).unwrap();
    for (name, bytes) in files(&base).into_iter().chain(files(&base2)) {
        let mut bytes = bytes;
        if name.ends_with(".json") && !name.trim_end_matches(".json").contains('.') {
            let mut t: Value = serde_json::from_slice(&bytes).unwrap();
            for turn in t["turns"].as_array_mut().unwrap() {
                let ms = turn["latency_ms"].as_u64().unwrap();
                turn["latency_ms"] = (ms + 120).into();
            }
            bytes = serde_json::to_vec(&t).unwrap();
        }
        std::fs::write(new.join(name), bytes).unwrap();
    }
    let v = json(&wt(
        dir.path(),
        &[
            "compare", "base", "new", "--base", "base2", "--format", "json",
        ],
    ));
    let s = &v["scenarios"][0];
    assert_eq!(s["base"]["runs"], 4, "both base directories merged: {s}");
    assert_eq!(s["new"]["runs"], 4);
    assert_eq!(s["verdict"], "unchanged");
    assert_eq!(s["p_value"], 1.0);
    assert_eq!(s["p50_delta_ms"], 120);
    assert_eq!(s["p95_delta_ms"], 120);
    assert_eq!(v["base"]["dirs"], serde_json::json!(["base", "base2"]));
}

// ---- HTML, in a real browser ---------------------------------------------------------------

/// Width and height from a PNG's IHDR chunk.
fn png_size(path: &Path) -> (u32, u32) {
    let b = std::fs::read(path).unwrap();
    assert_eq!(&b[..8], b"\x89PNG\r\n\x1a\n", "not a PNG");
    let be = |i: usize| u32::from_be_bytes(b[i..i + 4].try_into().unwrap());
    (be(16), be(20))
}

#[test]
fn html_report_renders_in_chromium_with_rows_counts_failures_and_escaped_text() {
    let dir = tmp();
    let runs = sweep(
        dir.path(),
        "runs",
        &["--agent", "demo-forbidden-tool", "--hook", "debrief"],
        1,
    );
    // A hostile reply: markup that must be shown, not run.
    let trace = trace_paths(&runs)
        .into_iter()
        .find(|p| {
            std::fs::read_to_string(p)
                .unwrap()
                .contains("\"order-status\"")
        })
        .unwrap();
    let mut t: Value = serde_json::from_slice(&std::fs::read(&trace).unwrap()).unwrap();
    let evil = "<script>document.title='pwned';console.error('ran')</script><img src=x onerror=\"console.error('img')\">";
    t["turns"][0]["reply"] = evil.into();
    let run_id = t["run_id"].as_str().unwrap().to_owned();
    std::fs::write(&trace, serde_json::to_vec_pretty(&t).unwrap()).unwrap();

    let page = dir.path().join("report.html");
    let r = wt(
        dir.path(),
        &["report", "runs", "--format", "html", "-o", "report.html"],
    );
    assert_eq!(r.code, 0, "{r}");
    assert!(r.stdout.is_empty(), "the page went to the file: {r}");
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(
        !html.contains("http://") && !html.contains("https://"),
        "no network reference"
    );

    let (dom, stderr) = dump_dom(dir.path(), &page);
    assert!(
        console_lines(&stderr).is_empty(),
        "console: {:?}",
        console_lines(&stderr)
    );
    // Scenario rows with their counts.
    for id in ["order-status", "refund-damaged", "escalate-human"] {
        let row =
            format!("<tr class=\"scenario-row\" id=\"scenario-{id}\" data-scenario=\"{id}\">");
        let at = dom
            .find(&row)
            .unwrap_or_else(|| panic!("row {id} in {dom}"));
        assert!(
            dom[at..].contains("<td class=\"num passed\">0/2</td>"),
            "{id}"
        );
    }
    assert_eq!(dom.matches("class=\"scenario-row\"").count(), 3);
    assert!(
        dom.contains("<b class=\"fail failed\">6</b>"),
        "six failed runs"
    );
    // Failing-run details: grouped on the ladder, expandable, with the scorer's evidence.
    assert!(dom.contains("steering — "), "the steering rung");
    assert_eq!(dom.matches("<details class=\"run\"").count(), 6);
    assert!(dom.contains(&format!("id=\"run-{run_id}\"")));
    assert!(dom.contains("forbidden tool `issue_refund` called"));
    assert!(dom.contains("issue_refund</code>"), "the tool call");
    assert!(
        dom.contains(".debrief.json</a>"),
        "the debrief artifact beside its run"
    );
    assert!(dom.contains("Debrief</h3>"), "the debrief excerpt");
    assert!(dom.contains("<code>debrief</code>"), "hook provenance");
    // The reply is text: escaped in the DOM, no element made of it, nothing ran.
    assert!(
        dom.contains(
            "&lt;script&gt;document.title='pwned';console.error('ran')&lt;/script&gt;&lt;img src=x"
        ),
        "reply shown as text"
    );
    assert!(!dom.contains("<script"), "no script element");
    assert!(!dom.contains("<img"), "no image element");
    assert!(dom.contains("<title>wt report: demo-forbidden-tool</title>"));

    let shot = dir.path().join("report.png");
    let out = chromium(dir.path())
        .arg(format!("--screenshot={}", shot.display()))
        .arg("--window-size=1280,1800")
        .arg(format!("file://{}", page.display()))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(console_lines(&stderr).is_empty(), "{stderr}");
    assert_eq!(png_size(&shot), (1280, 1800));
    if let Ok(keep) = std::env::var("WT_TEST_KEEP_SCREENSHOT") {
        std::fs::copy(&shot, keep).unwrap();
    }
}

#[test]
fn html_compare_renders_both_sides_with_verdicts() {
    let dir = tmp();
    sweep(
        dir.path(),
        "base",
        &["--runs", "5", "--filter", "order-status"],
        0,
    );
    sweep(
        dir.path(),
        "new",
        &[
            "--runs",
            "5",
            "--filter",
            "order-status",
            "--agent",
            "demo-forbidden-tool",
        ],
        1,
    );
    let r = wt(
        dir.path(),
        &[
            "compare",
            "base",
            "new",
            "--format",
            "html",
            "-o",
            "compare.html",
            "--gate",
        ],
    );
    assert_eq!(r.code, 1, "{r}");
    let (dom, stderr) = dump_dom(dir.path(), &dir.path().join("compare.html"));
    assert!(console_lines(&stderr).is_empty(), "{stderr}");
    assert!(
        dom.contains(
            "<tr class=\"scenario-row\" id=\"scenario-order-status\" data-verdict=\"regressed\">"
        ),
        "{dom}"
    );
    assert!(
        dom.contains("<td class=\"num\">5/5</td>") && dom.contains("<td class=\"num\">0/5</td>")
    );
    assert!(dom.contains("NEW is worse"));
    assert!(dom.contains("appeared — constraint"));
    // Rates and intervals as text, the pack test, and the regressed scenario's failing runs.
    assert!(
        dom.contains("100% [57–100]") && dom.contains("0% [0–43]"),
        "{dom}"
    );
    assert!(dom.contains("Pack: regressed across scenarios"), "{dom}");
    assert!(
        dom.contains("Failing runs of regressed scenarios (NEW)")
            && dom.contains("order-status — 5 run(s) did not pass")
            && dom.contains("#0 FAIL — "),
        "{dom}"
    );
}

#[test]
fn html_report_of_a_large_sweep_stays_bounded_and_states_its_sampling() {
    let dir = tmp();
    let agent = [
        "--agent",
        "demo-forbidden-tool",
        "--seed",
        "4",
        "--jobs",
        "2",
    ];
    let mut small_args = agent.to_vec();
    small_args.extend(["--runs", "20"]);
    sweep(dir.path(), "small", &small_args, 1);
    let mut big_args = agent.to_vec();
    big_args.extend(["--runs", "400"]);
    sweep(dir.path(), "big", &big_args, 1);
    let small = wt(dir.path(), &["report", "small", "--format", "html"]).stdout;
    let big = wt(dir.path(), &["report", "big", "--format", "html"]).stdout;
    assert!(
        big.contains("Showing full details for <strong>15</strong> of <strong>1200</strong> runs that did not pass"),
        "sampling stated"
    );
    assert_eq!(
        big.matches("<details class=\"run\"").count(),
        15,
        "5 per cluster"
    );
    assert!(big.contains("395 more run(s) in this cluster not shown in full."));
    // 20× the runs, about the same page: details do not grow with the sweep.
    let (s, b) = (small.len() as f64, big.len() as f64);
    assert!(b < s * 1.1, "small {s} bytes, big {b} bytes");
}

// ---- reports at scale ----------------------------------------------------------------------

#[test]
fn the_table_lists_ten_not_passed_runs_a_scenario_and_every_view_counts_them_all() {
    let dir = tmp();
    let failing = [
        "--agent",
        "demo-forbidden-tool",
        "--filter",
        "order-status",
        "--runs",
        "13",
        "--seed",
        "3",
        "--jobs",
        "2",
    ];
    sweep(dir.path(), "runs", &failing, 1);
    sweep(
        dir.path(),
        "runs",
        &["--filter", "refund-damaged", "--runs", "2"],
        0,
    );
    let table = wt(dir.path(), &["report", "runs"]);
    assert_eq!(table.code, 0, "{table}");
    let listed = |text: &str, prefix: &str| text.lines().filter(|l| l.starts_with(prefix)).count();
    assert_eq!(listed(&table.stdout, "FAIL order-status #"), 10, "{table}");
    assert!(
        table.stdout.contains(
            "… and 3 more run(s) of order-status that did not pass (`wt report --format json` lists every run)"
        ),
        "{table}"
    );
    assert!(
        table.stdout.contains("2/15 runs passed, 13 failed"),
        "{table}"
    );
    let md = wt(dir.path(), &["report", "runs", "--format", "markdown"]).stdout;
    assert_eq!(listed(&md, "| `order-status` #"), 10, "{md}");
    assert!(md.contains("… and 3 more run(s) of order-status"), "{md}");

    let v = json(&wt(dir.path(), &["report", "runs", "--format", "json"]));
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 15, "the JSON lists every run");
    let mut failed: Vec<u64> = runs
        .iter()
        .filter(|r| r["verdict"] == "FAIL")
        .map(|r| r["run_index"].as_u64().unwrap())
        .collect();
    failed.sort_unstable();
    assert_eq!(failed, (0..13).collect::<Vec<u64>>());
    assert!(
        runs.iter()
            .all(|r| r["trace"].as_str().unwrap().starts_with("runs/"))
    );

    let junit = wt(
        dir.path(),
        &["report", "runs", "--format", "junit", "-o", "j.xml"],
    );
    assert_eq!(junit.code, 0, "{junit}");
    let xml = std::fs::read_to_string(dir.path().join("j.xml")).unwrap();
    assert!(xml.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"wt\" tests=\"15\" failures=\"13\" errors=\"0\">"), "{xml}");
    assert_eq!(xml.matches("<testcase ").count(), 15);
    assert_eq!(xml.matches("</testcase>").count(), 15);
    assert_eq!(
        xml.matches("<failure message=\"failed layers: ").count(),
        13
    );
    assert!(xml.ends_with("</testsuites>\n"));

    let page = wt(dir.path(), &["report", "runs", "--format", "html"]).stdout;
    assert!(
        page.contains("Showing full details for <strong>5</strong> of <strong>13</strong>"),
        "sampled"
    );
    assert_eq!(page.matches("<details class=\"run\"").count(), 5);
    assert!(page.contains("8 more run(s) in this cluster not shown in full."));
    assert!(
        page.contains(">13/13 runs</span>"),
        "the cluster counts every run"
    );

    // The compare page lists a regressed scenario's first failing runs and counts them all.
    sweep(
        dir.path(),
        "base",
        &["--filter", "order-status", "--runs", "13", "--jobs", "2"],
        0,
    );
    let cmp = wt(
        dir.path(),
        &[
            "compare",
            "base",
            "runs",
            "--format",
            "html",
            "--allow-missing",
        ],
    );
    assert_eq!(cmp.code, 0, "{cmp}");
    assert!(
        cmp.stdout
            .contains("order-status — 13 run(s) did not pass, 5 shown"),
        "{}",
        cmp.stdout
    );
}

#[test]
fn compare_counts_the_runs_read_on_both_sides_by_their_ids() {
    let dir = tmp();
    for (out, agent) in [("a", "demo"), ("b", "demo-forbidden-tool")] {
        let r = Wt::new(dir.path())
            .args(["run", "--out", out, "--seed", "7", "--agent", agent])
            .args(["--filter", "order-status", "--runs", "4"])
            .env("WT_FIXED_CLOCK", "2026-11-30T05:15:00Z")
            .run();
        assert!(r.code <= 1, "{r}");
    }
    // A run of b copied under another name is one run still.
    let t = trace_paths(&dir.path().join("b"))[0].clone();
    std::fs::copy(&t, dir.path().join("b/copied-run.json")).unwrap();
    let r = wt(dir.path(), &["compare", "a", "b", "--format", "json"]);
    assert_eq!(r.code, 0, "{r}");
    let v = json(&r);
    assert_eq!(
        v["warnings"],
        serde_json::json!([
            "4 run(s) are on both sides (the same run ids): the sides are not independent samples"
        ]),
        "{r}"
    );
    assert_eq!(v["new"]["runs"], 4);
    assert!(
        r.stderr.contains("note: 1 trace file(s) repeat a run_id"),
        "{r}"
    );
    let same = json(&wt(dir.path(), &["compare", "a", "a", "--format", "json"]));
    assert_eq!(
        same["warnings"],
        serde_json::json!(["a is on both sides: the comparison is of a sample with itself"])
    );
    // Unpinned sweeps share no run: no warning.
    sweep(
        dir.path(),
        "c",
        &["--filter", "order-status", "--runs", "4"],
        0,
    );
    let other = json(&wt(dir.path(), &["compare", "a", "c", "--format", "json"]));
    assert_eq!(other["warnings"], serde_json::json!([]));
}
