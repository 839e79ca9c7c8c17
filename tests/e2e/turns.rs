//! Turn hooks, guards and the event journal through the real `wt run`. The turn-hook and
//! guard contracts are tested with the hooks in `wt`'s process and isolated in their own
//! (`both_modes!`).

use std::path::{Path, PathBuf};

use crate::harness::*;
use serde_json::Value;

const OBSERVERS: [&str; 4] = ["turn_a", "turn_b", "turn_c", "turn_d"];

struct Sweep {
    run: Run,
    out: PathBuf,
    log: Vec<String>,
}

/// `wt run` of the two-turn `escalate-human` scenario with the given hooks, each logging to
/// the same file.
fn sweep(
    tmp: &Path,
    name: &str,
    hooks: &[&str],
    extra: &[&str],
    env: &[(&str, &str)],
    mode: Mode,
) -> Sweep {
    let dir = plugin_dir(tmp, &["wt_test_turns"]);
    let out = tmp.join(name);
    let log = tmp.join(format!("{name}.log"));
    let mut cmd = wt(tmp);
    cmd.args([
        "run",
        "--jobs",
        "1",
        "--runs",
        "1",
        "--filter",
        "escalate-human",
        "--plugin-dir",
    ])
    .arg(&dir)
    .arg("--out")
    .arg(&out)
    .args(extra)
    .args(mode.args());
    for h in hooks {
        let prefix = format!("WT_{}_", h.to_ascii_uppercase());
        cmd.args(["--hook", h])
            .env(format!("{prefix}LOG"), &log)
            .env(format!("{prefix}JOURNAL_DIR"), &out)
            // Isolated, its process writes only where its settings allow.
            .env(format!("{prefix}SANDBOX_WRITE"), tmp);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let run = run(&mut cmd);
    let log = std::fs::read_to_string(&log)
        .unwrap_or_default()
        .lines()
        // Drop the run id: one run per sweep here.
        .map(|l| {
            let mut parts: Vec<&str> = l.split(' ').collect();
            if parts.len() > 2 {
                parts.remove(2);
            }
            parts.join(" ")
        })
        .collect();
    Sweep { run, out, log }
}

/// The sweep's one journal in `out`, every line of which must parse.
fn journal(out: &Path) -> Vec<Value> {
    windtunnel::events::read_journal(&journal_file(out)).unwrap()
}

/// The finish lines of one turn, in the order they ran.
fn finish_lines(log: &[String], turn: u32) -> Vec<String> {
    turn_lines(log, turn)
        .into_iter()
        .filter(|l| l.contains("finish"))
        .collect()
}

fn turn_lines(log: &[String], turn: u32) -> Vec<String> {
    log.iter()
        .filter(|l| l.split(' ').nth(2) == Some(&turn.to_string()))
        .cloned()
        .collect()
}

both_modes!(
    observers_begin_in_order_before_turn_started_and_finish_in_reverse_after_the_terminal,
    a_panicking_finish_does_not_stop_the_others_and_a_panicking_begin_does_not_stop_the_turn,
    a_guard_denial_stops_the_turn_before_it_starts_and_errors_the_run,
    the_policy_revision_is_required_with_a_guard_and_refused_without_one,
    events_stream_live_to_stdout_and_match_the_journal,
);

fn observers_begin_in_order_before_turn_started_and_finish_in_reverse_after_the_terminal(
    mode: Mode,
) {
    let tmp = tempfile::tempdir().unwrap();
    let s = sweep(tmp.path(), "order", &OBSERVERS, &[], &[], mode);
    assert_eq!(s.run.code, 0, "{}", s.run);
    for turn in [0, 1] {
        assert_eq!(
            turn_lines(&s.log, turn),
            [
                format!("turn_a begin {turn} started=no"),
                format!("turn_b begin {turn} started=no"),
                format!("turn_c begin {turn} started=no"),
                format!("turn_d begin {turn} started=no"),
                format!("turn_d finish {turn} Done terminal=yes"),
                format!("turn_c finish {turn} Done terminal=yes"),
                format!("turn_b finish {turn} Done terminal=yes"),
                format!("turn_a finish {turn} Done terminal=yes"),
            ]
        );
    }
    let events = journal(&s.out);
    let names: Vec<&str> = events
        .iter()
        .filter(|e| e["turn"] == 0 && e["cause"]["kind"] == "scenario")
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(names.first(), Some(&"TurnStarted"));
    assert_eq!(names.last(), Some(&"TurnDone"));
}

fn a_panicking_finish_does_not_stop_the_others_and_a_panicking_begin_does_not_stop_the_turn(
    mode: Mode,
) {
    let tmp = tempfile::tempdir().unwrap();
    let c = sweep(
        tmp.path(),
        "c",
        &OBSERVERS,
        &[],
        &[("WT_TURN_C_PANIC", "finish")],
        mode,
    );
    assert_eq!(c.run.code, 0, "{}", c.run);
    let finishes: Vec<String> = finish_lines(&c.log, 0);
    assert_eq!(
        finishes,
        [
            "turn_d finish 0 Done terminal=yes",
            "turn_c finish 0 Done terminal=yes",
            "turn_b finish 0 Done terminal=yes",
            "turn_a finish 0 Done terminal=yes",
        ]
    );
    let t = &traces(&c.out)[0];
    let warnings = worker_warnings(t);
    let panics: Vec<&&str> = warnings
        .iter()
        .filter(|w| w.contains("panicked at"))
        .collect();
    assert_eq!(panics.len(), 1, "{warnings:?}");
    assert!(
        panics[0].starts_with("hook:turn_c: panicked at")
            && panics[0].contains("turn_c panics in finish")
    );
    // Its instance is poisoned after the panic: in turn 1 its begin fails, so it is owed no
    // finish, and the others still finish in reverse order.
    assert!(
        warnings.iter().all(|w| w.starts_with("hook:turn_c:")),
        "{warnings:?}"
    );
    let turn1: Vec<String> = finish_lines(&c.log, 1);
    assert_eq!(
        turn1,
        [
            "turn_d finish 1 Done terminal=yes",
            "turn_b finish 1 Done terminal=yes",
            "turn_a finish 1 Done terminal=yes",
        ]
    );
    let terminals = journal(&c.out)
        .iter()
        .filter(|e| e["event"] == "TurnDone" && e["cause"]["kind"] == "scenario")
        .count();
    assert_eq!(terminals, 2);

    let b = sweep(
        tmp.path(),
        "b",
        &OBSERVERS,
        &[],
        &[("WT_TURN_B_PANIC", "begin")],
        mode,
    );
    assert_eq!(b.run.code, 0, "{}", b.run);
    let finishes: Vec<String> = finish_lines(&b.log, 0);
    assert_eq!(
        finishes,
        [
            "turn_d finish 0 Done terminal=yes",
            "turn_c finish 0 Done terminal=yes",
            "turn_a finish 0 Done terminal=yes",
        ]
    );
    assert_eq!(scores(&b.out)[0]["verdict"], "PASS");
}

fn assert_denied(s: &Sweep, kind: &str) -> Value {
    assert_eq!(s.run.code, 3, "{}", s.run);
    let t = &traces(&s.out)[0];
    assert_eq!(t["policy_revision"], "policy-2026-11", "{t}");
    assert_eq!(t["denial"]["kind"], kind, "{t}");
    assert_eq!(t["denial"]["turn"], 0);
    assert!(
        t["turns"].as_array().unwrap().is_empty(),
        "a denied turn never ran: {t}"
    );
    let score = &scores(&s.out)[0];
    assert_eq!(score["verdict"], "ERROR");
    let started = journal(&s.out)
        .iter()
        .filter(|e| e["event"] == "TurnStarted")
        .count();
    assert_eq!(started, 0, "no TurnStarted for a denied turn");
    // The begin that ran before the guard gets its finish, which sees the denial; the one
    // after never began.
    let guard = t["denial"]["guard"].as_str().unwrap();
    let denial = s
        .log
        .iter()
        .find(|l| l.starts_with("turn_a denial 0 "))
        .unwrap();
    assert!(
        denial.ends_with(&format!(
            " {guard}/{}",
            t["denial"]["code"].as_str().unwrap()
        )),
        "{denial}"
    );
    assert_eq!(
        s.log
            .iter()
            .filter(|l| l.starts_with("turn_") && !l.contains(" denial "))
            .cloned()
            .collect::<Vec<_>>(),
        [
            "turn_a begin 0 started=no",
            "turn_a finish 0 Denied terminal=no"
        ]
    );
    score.clone()
}

fn a_guard_denial_stops_the_turn_before_it_starts_and_errors_the_run(mode: Mode) {
    let tmp = tempfile::tempdir().unwrap();
    let rev = ["--policy-revision", "policy-2026-11"];
    let s = sweep(
        tmp.path(),
        "deny",
        &["turn_a", "guard_deny", "turn_b"],
        &rev,
        &[],
        mode,
    );
    let score = assert_denied(&s, "denied");
    let t = &traces(&s.out)[0];
    assert_eq!(t["denial"]["guard"], "guard_deny");
    assert_eq!(t["denial"]["code"], "no_refunds");
    assert_eq!(t["denial"]["message"], "refund requests are out of policy");
    let error = score["error"].as_str().unwrap();
    assert!(
        error.contains("guard `guard_deny`")
            && error.contains("no_refunds: refund requests are out of policy"),
        "{error}"
    );

    let s = sweep(
        tmp.path(),
        "panic",
        &["turn_a", "guard_panic", "turn_b"],
        &rev,
        &[],
        mode,
    );
    assert_denied(&s, "panic");
    assert!(
        traces(&s.out)[0]["denial"]["message"]
            .as_str()
            .unwrap()
            .contains("guard_panic exploded")
    );

    let s = sweep(
        tmp.path(),
        "hang",
        &["turn_a", "guard_hang", "turn_b"],
        &rev,
        &[("WT_HOOK_TIMEOUT_S", "1")],
        mode,
    );
    assert_denied(&s, "timeout");
}

fn the_policy_revision_is_required_with_a_guard_and_refused_without_one(mode: Mode) {
    let tmp = tempfile::tempdir().unwrap();
    let s = sweep(tmp.path(), "missing", &["guard_deny"], &[], &[], mode);
    assert_eq!(s.run.code, 2, "{}", s.run);
    assert!(
        s.run
            .stderr
            .contains("guard(s) guard_deny active: --policy-revision REV is required"),
        "{}",
        s.run
    );
    assert!(!s.out.exists(), "nothing may run");
    let s = sweep(
        tmp.path(),
        "extra",
        &["turn_a"],
        &["--policy-revision", "p1"],
        &[],
        mode,
    );
    assert_eq!(s.run.code, 2, "{}", s.run);
    assert!(
        s.run
            .stderr
            .contains("--policy-revision given but no active hook is a guard"),
        "{}",
        s.run
    );
    assert!(!s.out.exists(), "nothing may run");
}

/// Checks the journal's invariants: gapless sequence numbers, sweep brackets, and per run
/// RunStarted < (TurnStarted < StepDone* < terminal)* < RunScored < RunEnded.
fn check_journal(events: &[Value], runs: usize) {
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e["seq"], i as u64, "gap or disorder at line {}", i + 1);
        assert_eq!(e["v"], 1);
        assert!(e["ts"].is_string() && e["sweep_id"].is_string());
    }
    assert_eq!(events.first().unwrap()["event"], "SweepStarted");
    assert_eq!(events.last().unwrap()["event"], "SweepEnded");
    let mut run_ids: Vec<&str> = events.iter().filter_map(|e| e["run_id"].as_str()).collect();
    run_ids.dedup();
    let mut unique = run_ids.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), runs);
    for id in unique {
        let names: Vec<&str> = events
            .iter()
            .filter(|e| e["run_id"] == id && e["cause"]["kind"] == "scenario")
            .map(|e| e["event"].as_str().unwrap())
            .collect();
        assert_eq!(names.first(), Some(&"RunStarted"), "{names:?}");
        assert_eq!(
            &names[names.len() - 2..],
            ["RunScored", "RunEnded"],
            "{names:?}"
        );
        let mut open = false;
        for n in &names[1..names.len() - 2] {
            match *n {
                "TurnStarted" => {
                    assert!(!open, "{names:?}");
                    open = true;
                }
                "StepDone" => assert!(open, "{names:?}"),
                "TurnDone" | "TurnFailed" | "TurnInterrupted" => {
                    assert!(open, "{names:?}");
                    open = false;
                }
                other => panic!("unexpected {other} inside a run: {names:?}"),
            }
        }
        assert!(!open, "a turn without a terminal: {names:?}");
        let scenario = events.iter().find(|e| e["run_id"] == id).unwrap()["scenario_id"].clone();
        let pos = |name: &str| {
            events
                .iter()
                .position(|e| e["event"] == name && e["scenario_id"] == scenario)
                .unwrap()
        };
        let first = events.iter().position(|e| e["run_id"] == id).unwrap();
        let last = events.iter().rposition(|e| e["run_id"] == id).unwrap();
        assert!(pos("ScenarioStarted") < first && last < pos("ScenarioEnded"));
    }
}

#[test]
fn the_journal_of_a_two_by_three_sweep_is_ordered_and_gapless() {
    let tmp = tempfile::tempdir().unwrap();
    for jobs in ["1", "2"] {
        let out = tmp.path().join(format!("jobs{jobs}"));
        let pack = crate::hooks::two_scenario_pack(tmp.path());
        let r = run(wt(tmp.path())
            .args([
                "run",
                "--runs",
                "3",
                "--jobs",
                jobs,
                "--agent",
                "demo-forbidden-tool",
                "--hook",
                "debrief",
                "--pack",
            ])
            .arg(&pack)
            .arg("--out")
            .arg(&out));
        assert_eq!(r.code, 1, "{r}");
        let events = journal(&out);
        check_journal(&events, 6);
        let scenarios: std::collections::BTreeSet<&str> = events
            .iter()
            .filter_map(|e| e["scenario_id"].as_str())
            .collect();
        assert_eq!(scenarios.len(), 2, "{scenarios:?}");
        let steps = events.iter().filter(|e| e["event"] == "StepDone").count();
        assert!(steps > 0);
        assert!(
            events
                .iter()
                .any(|e| e["cause"]["kind"] == "converse" && e["cause"]["hook"] == "debrief")
        );
    }
}

#[test]
fn a_sweep_killed_with_sigkill_leaves_a_journal_whose_every_line_parses() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let mut child = wt(tmp.path())
        .args(["run", "--runs", "100000", "--jobs", "2", "--out"])
        .arg(&out)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut journal_path = None;
    wait_for("a journal of more than 64 KiB", PATIENCE, || {
        journal_path =
            find_journal(&out).filter(|p| std::fs::metadata(p).is_ok_and(|m| m.len() > 64 * 1024));
        journal_path.is_some()
    });
    let journal_path = journal_path.unwrap();
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let events = windtunnel::events::read_journal(&journal_path).expect("every line parses");
    assert!(events.len() > 100);
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e["seq"], i as u64);
    }
    // Every trace on disk is whole too.
    for t in traces(&out) {
        assert!(t["run_id"].is_string());
    }
}

fn events_stream_live_to_stdout_and_match_the_journal(mode: Mode) {
    let tmp = tempfile::tempdir().unwrap();
    let s = sweep(
        tmp.path(),
        "live",
        &["turn_a"],
        &["--events", "-"],
        &[],
        mode,
    );
    assert_eq!(s.run.code, 0, "{}", s.run);
    let journal_text = std::fs::read_to_string(journal_file(&s.out)).unwrap();
    assert_eq!(s.run.stdout, journal_text);
    assert!(s.run.stdout.lines().count() > 8);
}

#[test]
fn turn_hooks_and_guards_report_consistently_and_denials_are_events() {
    let dir = tmp();
    let plugins = plugin_dir(dir.path(), &["wt_test_turns"]);
    let log = dir.path().join("turns.log");
    let run = |out: &str, hooks: &[&str], env: &[(&str, &str)], extra: &[&str]| {
        let mut wt = Wt::new(dir.path())
            .args(["run", "--jobs", "1", "--out", out, "--plugin-dir"])
            .arg(&plugins)
            .args(extra);
        for h in hooks {
            wt = wt
                .args(["--hook", h])
                .env(&format!("WT_{}_LOG", h.to_ascii_uppercase()), &log)
                .env(
                    &format!("WT_{}_SANDBOX_WRITE", h.to_ascii_uppercase()),
                    dir.path(),
                );
        }
        for (k, v) in env {
            wt = wt.env(k, v);
        }
        wt.run()
    };
    // A panicking turn hook reaches stderr, like a lifecycle hook.
    let r = run(
        "panic",
        &["turn_c"],
        &[("WT_TURN_C_PANIC", "finish")],
        &["--filter", "order-status"],
    );
    assert_eq!(r.code, 0, "{r}");
    assert!(r.stderr.contains("hook:turn_c: panicked at"), "{r}");
    assert_eq!(
        r.stderr.matches("hook:turn_c: panicked at").count(),
        1,
        "{r}"
    );

    // A guard that panicked is `quarantined` on later turns, consistently.
    let r = run(
        "guard-panic",
        &["guard_panic"],
        &[],
        &["--filter", "order-status", "--policy-revision", "r1"],
    );
    assert_eq!(r.code, 3, "{r}");
    let mut kinds: Vec<(u64, String)> = traces(&dir.path().join("guard-panic"))
        .iter()
        .map(|t| {
            (
                t["run_index"].as_u64().unwrap(),
                t["denial"]["kind"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    kinds.sort();
    assert_eq!(
        kinds,
        [(0, "panic".to_owned()), (1, "quarantined".to_owned())]
    );

    // An empty policy revision does not satisfy the guard requirement.
    let r = run("empty", &["guard_deny"], &[], &["--policy-revision", ""]);
    assert_eq!(r.code, 2, "{r}");
    assert!(
        r.stderr.contains("--policy-revision must not be empty"),
        "{r}"
    );

    // A denial is a typed event; the revision is on SweepStarted; observers see the denial.
    let r = run(
        "deny",
        &["turn_a", "guard_deny"],
        &[],
        &[
            "--filter",
            "order-status",
            "--runs",
            "1",
            "--policy-revision",
            "r7",
        ],
    );
    assert_eq!(r.code, 3, "{r}");
    let j = journal(&dir.path().join("deny"));
    assert_eq!(events(&j, "SweepStarted")[0]["policy_revision"], "r7");
    let denied = events(&j, "TurnDenied");
    assert_eq!(denied.len(), 1, "{j:?}");
    assert_eq!(denied[0]["guard"], "guard_deny");
    assert_eq!(denied[0]["code"], "no_refunds");
    assert_eq!(denied[0]["kind"], "denied");
    assert_eq!(denied[0]["policy_revision"], "r7");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("turn_a denial") && text.contains("guard_deny/no_refunds"),
        "{text}"
    );

    // Guards are consulted for converse turns: debrief's converse (turn 1 of a one-turn
    // scenario) is denied, and the debrief says so.
    let r = run(
        "converse",
        &["guard_deny", "debrief"],
        &[("WT_GUARD_DENY_TURN", "1")],
        &[
            "--filter",
            "order-status",
            "--runs",
            "1",
            "--agent",
            "demo-forbidden-tool",
            "--policy-revision",
            "r7",
        ],
    );
    assert_eq!(r.code, 1, "{r}");
    let out = dir.path().join("converse");
    let j = journal(&out);
    let denied = events(&j, "TurnDenied");
    assert_eq!(denied.len(), 1, "{j:?}");
    assert_eq!(denied[0]["cause"]["hook"], "debrief");
    let debrief = files(&out)
        .into_iter()
        .find(|(n, _)| n.ends_with(".debrief.json"))
        .map(|(_, b)| String::from_utf8(b).unwrap())
        .expect("a debrief artifact");
    assert!(
        debrief.contains("denied by guard `guard_deny`"),
        "{debrief}"
    );
}
