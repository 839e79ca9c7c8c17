//! Hook process isolation (`--isolate-hooks`) against hooks that end their process: abort,
//! SIGSEGV, `exit(0)`, `exit(3)`, a 50 GB allocation, an infinite loop, a panic in a
//! destructor, a 200 MB artifact, garbage on the pipe (all in `tests/plugins/crash`). Each
//! sweep must complete with every trace, score, the JUnit report and the summary of the same
//! sweep without that hook, the same exit code, exactly one warning naming the cause, the
//! hook's output in its log and nowhere else, and no process left behind. Plus: a hung
//! hook's process is killed at the deadline, `wt hooks plan` shows each hook's mode, and
//! `wt hooks check --isolated` survives a plugin that dies while loading.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    time::Duration,
};

use serde_json::Value;
use windtunnel::{
    deadlines::Deadlines,
    hooks::dispatch::{CallData, Dispatcher},
    hooks::isolate::{Isolation, SpawnOptions},
    hooks::registry::Registry,
};
use windtunnel_abi::point;

use crate::harness::{
    CLOCK, PATIENCE, Run, files, no_process_left, plugin_dir, processes_mentioning, run, set_mode,
    traces, wait_for, worker_warnings, wt, wt_bin,
};

struct Sweep {
    run: Run,
    out: PathBuf,
    junit: PathBuf,
}

/// `wt run` of the demo pack, two runs per scenario, on an agent that fails some runs,
/// with clock and ids pinned; with `hook`, that hook isolated.
fn sweep(tmp: &Path, name: &str, hook: Option<&str>, dir: &Path, env: &[(&str, &str)]) -> Sweep {
    let out = tmp.join(name);
    let junit = tmp.join(format!("{name}.xml"));
    let mut cmd = wt(tmp);
    cmd.args([
        "run",
        "--jobs",
        "1",
        "--runs",
        "2",
        "--seed",
        "7",
        "--agent",
        "demo-forbidden-tool",
        "--out",
    ])
    .arg(&out)
    .arg("--junit")
    .arg(&junit)
    .env("WT_FIXED_CLOCK", CLOCK)
    // Set on `wt`, never visible to an isolated hook, which sees only its own settings.
    .env("WT_RECORDER_LOG", tmp.join("not-for-crash-hooks"));
    if let Some(h) = hook {
        cmd.args(["--hook", h, "--isolate-hooks", "--plugin-dir"])
            .arg(dir);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    Sweep {
        run: run(&mut cmd),
        out,
        junit,
    }
}

/// The end of `wt run`'s stderr: the per-scenario table and the totals, with the output
/// directory's name taken out.
fn summary(s: &Sweep) -> Vec<String> {
    let lines: Vec<&str> = s.run.stderr.lines().collect();
    let start = lines.iter().rposition(|l| l.is_empty()).unwrap_or(0);
    let table_start = lines[..start]
        .iter()
        .rposition(|l| l.is_empty())
        .unwrap_or(start);
    lines[table_start..]
        .iter()
        .map(|l| l.replace(&s.out.display().to_string(), "OUT"))
        .collect()
}

/// The traces (in file-name order) without what an active hook adds: its provenance and
/// its warnings.
fn traces_without(out: &Path, hook: &str) -> Vec<Value> {
    let mut all = traces(out);
    for t in &mut all {
        let t = t.as_object_mut().unwrap();
        t.remove("hooks");
        if let Some(Value::Array(w)) = t.get_mut("worker_warnings") {
            w.retain(|w| !w.as_str().unwrap().starts_with(&format!("hook:{hook}:")));
        }
    }
    all
}

fn hook_warnings_in_traces(out: &Path, hook: &str) -> Vec<String> {
    traces(out)
        .iter()
        .flat_map(worker_warnings)
        .filter(|w| w.starts_with(&format!("hook:{hook}:")))
        .map(str::to_owned)
        .collect()
}

/// Runs the sweep without `hook`, then with it isolated, and checks everything the fault
/// suite promises. Returns the one warning.
fn contained(hook: &str, cause: &[&str], env: &[(&str, &str)]) -> String {
    let tmp = tempfile::tempdir().unwrap();
    let dir = plugin_dir(tmp.path(), &["wt_test_crash"]);
    let base = sweep(tmp.path(), "base", None, &dir, &[]);
    assert_eq!(base.run.code, 1, "{}", base.run);
    let notes = tmp.path().join("notes.txt");
    let log_var = format!("WT_{}_LOG", hook.to_ascii_uppercase());
    // An isolated hook's process writes only where its settings allow.
    let write_var = format!("WT_{}_SANDBOX_WRITE", hook.to_ascii_uppercase());
    let mut env = env.to_vec();
    env.push((&log_var, notes.to_str().unwrap()));
    env.push((&write_var, tmp.path().to_str().unwrap()));
    let s = sweep(tmp.path(), "fault", Some(hook), &dir, &env);

    // Same exit code, same scores byte for byte, same traces but for the hook's own marks.
    assert_eq!(s.run.code, base.run.code, "{}", s.run);
    let scores = |out: &Path| -> BTreeMap<String, Vec<u8>> {
        files(out)
            .into_iter()
            .filter(|(n, _)| n.ends_with(".score.json"))
            .collect()
    };
    assert_eq!(scores(&s.out).len(), 6, "{}", s.run);
    assert_eq!(scores(&s.out), scores(&base.out));
    assert_eq!(
        traces_without(&s.out, hook),
        traces_without(&base.out, hook)
    );
    // JUnit and the summary are written, and are those of the sweep without the hook.
    let junit = |s: &Sweep| {
        std::fs::read_to_string(&s.junit)
            .expect("JUnit written")
            .replace(&s.out.display().to_string(), "OUT")
    };
    assert_eq!(junit(&s), junit(&base));
    assert_eq!(summary(&s), summary(&base), "{}", s.run);
    assert!(s.run.stderr.contains("runs passed; traces in"), "{}", s.run);

    // Exactly one warning, naming the cause: on stderr and in the trace of the run it hit.
    let warned: Vec<&str> = s
        .run
        .stderr
        .lines()
        .filter(|l| l.contains(&format!("hook:{hook}:")))
        .collect();
    assert_eq!(warned.len(), 1, "{}", s.run);
    for part in cause {
        assert!(warned[0].contains(part), "{:?} lacks {part:?}", warned[0]);
    }
    let in_traces = hook_warnings_in_traces(&s.out, hook);
    assert_eq!(in_traces.len(), 1, "{in_traces:?}");
    assert!(
        warned[0].ends_with(&in_traces[0]),
        "{warned:?} vs {in_traces:?}"
    );

    // Called once (the first run's on_run_end), never again (not even on_pack_end), and it
    // saw no environment but its own settings, the loader's, its private temporary directory
    // and the process tag that ends what it starts with it.
    let called = std::fs::read_to_string(&notes).unwrap_or_default();
    let called: Vec<&str> = called.lines().collect();
    assert_eq!(called.len(), 1, "{called:?}");
    let env_seen = called[0].split(" env=").nth(1).unwrap();
    for var in env_seen.split(',') {
        assert!(
            var.starts_with(&log_var[..log_var.len() - 3])
                || var == "LD_LIBRARY_PATH"
                || var == "TMPDIR"
                || var == "WT_PROCESS_TAG",
            "the hook saw {var}: {env_seen}"
        );
    }

    // Its output went to its log beside the sweep, never to wt's.
    let log = files(&s.out)
        .into_iter()
        .find(|(n, _)| n.ends_with(&format!(".{hook}.log")))
        .map(|(_, b)| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_else(|| panic!("no log for {hook} in {}", s.out.display()));
    let hello = format!("{hook} says hello on stdout");
    assert!(log.contains(&hello), "{log}");
    assert!(
        !s.run.stdout.contains(&hello) && !s.run.stderr.contains(&hello),
        "{}",
        s.run
    );

    assert_eq!(no_process_left(&dir), Ok(()), "{}", s.run);
    warned[0].to_owned()
}

#[test]
fn abort_is_contained() {
    contained(
        "crash_abort",
        &["hook:crash_abort: isolated process killed by SIGABRT in on_run_end; its output is in "],
        &[],
    );
}

#[test]
fn sigsegv_is_contained() {
    contained(
        "crash_segv",
        &["hook:crash_segv: isolated process killed by SIGSEGV in on_run_end"],
        &[],
    );
}

#[test]
fn exit_0_is_contained() {
    contained(
        "crash_exit0",
        &[
            "hook:crash_exit0: isolated process exited with status 0 in on_run_end; its output",
            "; disabled for the rest of this invocation",
        ],
        &[],
    );
}

#[test]
fn exit_3_is_contained() {
    contained(
        "crash_exit3",
        &["hook:crash_exit3: isolated process exited with status 3 in on_run_end"],
        &[],
    );
}

#[test]
fn a_50_gb_allocation_hits_the_memory_limit_and_is_contained() {
    contained(
        "crash_alloc",
        &[
            "hook:crash_alloc: isolated process killed by SIGABRT in on_run_end (an allocation of 50000000000 bytes failed; memory limit 512 MiB); its output is in ",
        ],
        &[("WT_HOOK_MEMORY_LIMIT_MB", "512")],
    );
}

#[test]
fn an_infinite_loop_is_killed_at_the_deadline() {
    contained(
        "crash_loop",
        &["hook:crash_loop: timed out after 1s in on_run_end"],
        &[("WT_HOOK_TIMEOUT_S", "1")],
    );
}

#[test]
fn a_panic_in_a_destructor_is_contained() {
    contained(
        "crash_dtor",
        &[
            "hook:crash_dtor: isolated process killed by SIGABRT in on_run_end (a panic while unwinding a panic); its output is in ",
        ],
        &[],
    );
}

#[test]
fn a_200_mb_artifact_is_refused_at_the_frame_limit_without_reaching_wt() {
    contained(
        "crash_artifact",
        &[
            "hook:crash_artifact: isolated process sent a frame of 200000055 bytes, over the 17 MiB frame limit; killed in on_run_end",
        ],
        &[],
    );
}

#[test]
fn garbage_on_the_pipe_is_contained() {
    contained(
        "crash_garbage",
        &[
            "hook:crash_garbage: isolated process sent garbage on the pipe (frame tag 0x67); killed in on_run_end",
        ],
        &[],
    );
}

#[test]
fn a_guard_whose_process_died_denies_every_turn() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = plugin_dir(tmp.path(), &["wt_test_crash"]);
    let out = tmp.path().join("out");
    let r = run(wt(tmp.path())
        .args([
            "run",
            "--jobs",
            "1",
            "--runs",
            "2",
            "--filter",
            "escalate-human",
        ])
        .args([
            "--hook",
            "crash_guard",
            "--isolate-hooks",
            "--policy-revision",
            "p1",
        ])
        .arg("--plugin-dir")
        .arg(&dir)
        .arg("--out")
        .arg(&out));
    assert_eq!(r.code, 3, "a denied turn makes the run ERROR: {r}");
    let mut kinds: Vec<(String, String)> = traces(&out)
        .iter()
        .map(|t| {
            assert!(t["turns"].as_array().unwrap().is_empty(), "{t}");
            (
                t["denial"]["kind"].as_str().unwrap().to_owned(),
                t["denial"]["message"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    kinds.sort();
    assert_eq!(kinds.len(), 2, "{r}");
    assert_eq!(kinds[0].0, "error");
    assert!(
        kinds[0]
            .1
            .starts_with("isolated process killed by SIGABRT in guard_check"),
        "{kinds:?}"
    );
    assert_eq!(kinds[1].0, "quarantined");
    let warnings = hook_warnings_in_traces(&out, "crash_guard");
    assert_eq!(warnings.len(), 1, "one warning: {warnings:?}");
    assert!(warnings[0].contains("killed by SIGABRT"), "{warnings:?}");
}

#[test]
fn a_hook_process_does_not_outlive_a_killed_wt() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = plugin_dir(tmp.path(), &["wt_test_crash"]);
    let notes = tmp.path().join("notes.txt");
    // `wt`'s temporary directory, where the hook process's private one is made.
    let temp = tmp.path().join("temp");
    std::fs::create_dir(&temp).unwrap();
    let mut wt = wt(tmp.path())
        .env("TMPDIR", &temp)
        .args([
            "run",
            "--jobs",
            "1",
            "--hook",
            "crash_loop",
            "--isolate-hooks",
        ])
        .arg("--plugin-dir")
        .arg(&dir)
        .arg("--out")
        .arg(tmp.path().join("out"))
        .env("WT_CRASH_LOOP_LOG", &notes)
        .env("WT_CRASH_LOOP_SANDBOX_WRITE", tmp.path())
        .env("WT_HOOK_TIMEOUT_S", "600")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Wait until the hook is spinning in its process, then kill `wt` outright.
    wait_for("the hook to run (its notes file)", PATIENCE, || {
        notes.exists()
    });
    // `wt run` supervises the sweep in a child `wt`: three processes in all.
    assert_eq!(
        processes_mentioning(&dir).len(),
        3,
        "wt, its sweep and its hook process"
    );
    let hook_dirs = || {
        std::fs::read_dir(&temp)
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("wt-hook-"))
            .count()
    };
    assert_eq!(hook_dirs(), 1, "the hook process's own directory");
    wt.kill().unwrap();
    wt.wait().unwrap();
    assert_eq!(no_process_left(&dir), Ok(()));
    // Its private directory goes with it (the watchdog removes it).
    wait_for("the hook's directory to be removed", PATIENCE, || {
        hook_dirs() == 0
    });
}

/// A child that never says it is ready — here a script that ignores its arguments and
/// waits on a subprocess of its own — is killed, with its process group, at the start
/// timeout.
#[test]
fn a_hook_process_that_never_gets_ready_is_killed_at_the_start_timeout() {
    let tmp = tempfile::tempdir().unwrap();
    let program = tmp.path().join("never-ready");
    // A copy of sleep, so that the subprocess too names this test's directory.
    let sleep = tmp.path().join("never-ready-sleep");
    std::fs::copy("/bin/sleep", &sleep).unwrap();
    std::fs::write(
        &program,
        format!("#!/bin/sh\n{} 300 &\nwait\n", sleep.display()),
    )
    .unwrap();
    set_mode(&program, 0o755);
    let opts = SpawnOptions {
        program,
        start_timeout: Duration::from_millis(500),
        ..SpawnOptions::default()
    };
    let err =
        windtunnel::hooks::isolate::Isolated::spawn(&opts, &tmp.path().join("lib.so"), "x", 0)
            .err()
            .expect("never ready");
    assert_eq!(
        err.to_string(),
        "its isolated process did not load the plugin within 500ms; killed before it was ready"
    );
    assert_eq!(no_process_left(tmp.path()), Ok(()));
}

/// Lanes (`--jobs`) each have hook instances of their own; isolated, each is a process of its
/// own, and each answers its own lane's calls.
#[test]
fn each_lane_gets_a_hook_process_of_its_own() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = plugin_dir(tmp.path(), &["wt_test_noop8"]);
    let isolation = Isolation {
        all: true,
        hooks: Vec::new(),
        spawn: SpawnOptions {
            program: wt_bin(),
            ..SpawnOptions::default()
        },
    };
    let hooks = Registry::discover(std::slice::from_ref(&dir))
        .activate_with(&["noop0".to_owned()], &isolation)
        .expect("noop0 starts");
    let deadlines = Deadlines {
        dispatch: Duration::from_secs(30),
        converse: Duration::from_secs(30),
    };
    let lane0 = Dispatcher::new(hooks, deadlines);
    assert_eq!(processes_mentioning(&dir).len(), 1);
    let lane1 = lane0.for_lane().expect("a second instance starts");
    let pids = processes_mentioning(&dir);
    assert_eq!(pids.len(), 2, "one process per lane: {pids:?}");
    for lane in [&lane0, &lane1] {
        let out = lane.dispatch(point::ON_RUN_END, CallData::default(), None);
        assert!(out.warnings.is_empty(), "{:?}", out.warnings);
        assert_eq!(out.ok, 1);
    }
}

/// Through the library, so the test can watch the process while the dispatcher that owns
/// it is still alive: a deadline kills and reaps the hung child then, not when `wt` exits.
#[test]
fn a_hung_hook_process_is_killed_and_reaped_at_the_deadline() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = plugin_dir(tmp.path(), &["wt_test_crash"]);
    let isolation = Isolation {
        all: true,
        hooks: Vec::new(),
        spawn: SpawnOptions {
            program: wt_bin(),
            ..SpawnOptions::default()
        },
    };
    let hooks = Registry::discover(std::slice::from_ref(&dir))
        .activate_with(&["crash_loop".to_owned()], &isolation)
        .expect("crash_loop starts");
    assert!(hooks[0].is_isolated());
    let pids = processes_mentioning(&dir);
    assert_eq!(pids.len(), 1, "one process per hook: {pids:?}");
    let proc_dir = PathBuf::from(format!("/proc/{}", pids[0]));

    let d = Dispatcher::new(
        hooks,
        Deadlines {
            dispatch: Duration::from_millis(500),
            converse: Duration::from_millis(500),
        },
    );
    let out = d.dispatch(point::ON_RUN_END, CallData::default(), None);
    assert_eq!(out.warnings.len(), 1, "{:?}", out.warnings);
    assert!(
        out.warnings[0].starts_with("hook:crash_loop: timed out after 500ms in on_run_end"),
        "{:?}",
        out.warnings
    );
    // Gone from the process table altogether (killed, and reaped by us: no zombie).
    wait_for(
        &format!(
            "the hung hook process {} to leave the process table",
            pids[0]
        ),
        Duration::from_secs(10),
        || !proc_dir.exists(),
    );
    // Quarantined: the next dispatch calls nothing.
    let out = d.dispatch(point::ON_RUN_END, CallData::default(), None);
    assert!(out.warnings.is_empty() && out.returns.is_empty());
}

#[test]
fn plan_shows_each_hooks_mode_and_the_memory_limit() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = plugin_dir(tmp.path(), &["wt_test_crash", "wt_test_recorder"]);
    let plan = |extra: &[&str], env: &[(&str, &str)]| {
        let mut cmd = wt(tmp.path());
        cmd.args([
            "hooks",
            "plan",
            "--hook",
            "recorder",
            "--hook",
            "crash_segv",
        ])
        .args(["--hook", "debrief", "--plugin-dir"])
        .arg(&dir)
        .args(extra);
        for (k, v) in env {
            cmd.env(k, v);
        }
        run(&mut cmd)
    };
    let line = |r: &Run, hook: &str| -> String {
        r.stdout
            .lines()
            .find(|l| l.starts_with(&format!("hook {hook} ")))
            .unwrap_or_else(|| panic!("no line for {hook}: {r}"))
            .to_owned()
    };
    let r = plan(&[], &[]);
    assert_eq!(r.code, 0, "{r}");
    for h in ["recorder", "crash_segv", "debrief"] {
        assert!(line(&r, h).ends_with(", in-process)"), "{r}");
    }
    // An empty variable isolates nothing; a list isolates each hook it names.
    let r = plan(&[], &[("WT_ISOLATE_HOOK", ""), ("WT_ISOLATE_HOOKS", "")]);
    assert_eq!(r.code, 0, "{r}");
    assert!(line(&r, "crash_segv").ends_with(", in-process)"), "{r}");
    let r = plan(&[], &[("WT_ISOLATE_HOOK", "crash_segv, recorder")]);
    assert_eq!(r.code, 0, "{r}");
    assert!(line(&r, "recorder").contains(", isolated: "), "{r}");
    assert!(line(&r, "crash_segv").contains(", isolated: "), "{r}");
    let r = plan(&["--isolate-hook", "crash_segv"], &[]);
    assert_eq!(r.code, 0, "{r}");
    assert!(line(&r, "recorder").ends_with(", in-process)"), "{r}");
    assert!(
        line(&r, "crash_segv").ends_with(", isolated: own process, 2048 MiB)"),
        "{r}"
    );
    // All plugin hooks, through the environment mirror; a built-in stays in-process.
    let r = plan(
        &[],
        &[
            ("WT_ISOLATE_HOOKS", "1"),
            ("WT_HOOK_MEMORY_LIMIT_MB", "768"),
        ],
    );
    assert_eq!(r.code, 0, "{r}");
    for h in ["recorder", "crash_segv"] {
        assert!(
            line(&r, h).ends_with(", isolated: own process, 768 MiB)"),
            "{r}"
        );
    }
    assert!(line(&r, "debrief").ends_with(", in-process)"), "{r}");
    let r = plan(&["--isolate-hook", "debrief"], &[]);
    assert_eq!(r.code, 2, "{r}");
    assert!(r.stderr.contains("only plugin hooks run isolated"), "{r}");
    let r = plan(&["--isolate-hook", "tape"], &[]);
    assert_eq!(r.code, 2, "{r}");
    assert!(
        r.stderr
            .contains("--isolate-hook tape: no --hook tape is active"),
        "{r}"
    );
    assert_eq!(no_process_left(&dir), Ok(()));
}

#[test]
fn check_isolated_reports_a_plugin_that_dies_while_loading_and_lives_on() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = plugin_dir(tmp.path(), &["wt_test_crash"]);
    let lib = dir.join("libwt_test_crash.so");
    let check = |isolated: bool| {
        let mut cmd = wt(tmp.path());
        cmd.args(["hooks", "check", "--json"]);
        if isolated {
            cmd.arg("--isolated");
        }
        cmd.arg(&lib).env("WT_CRASH_ABORT_AT", "load");
        run(&mut cmd)
    };
    // In-process, the plugin takes `wt hooks check` down with it.
    let r = check(false);
    assert_ne!(r.code, 0, "{r}");
    assert!(r.stdout.is_empty(), "{r}");
    // Isolated, the dead loader is one refusal among ten rows, and every other hook loads.
    let r = check(true);
    assert_eq!(r.code, 2, "{r}");
    let rows: Vec<Value> = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(rows.len(), 10, "{r}");
    for row in &rows {
        let status = row["status"].as_str().unwrap();
        if row["name"] == "crash_abort" {
            assert_eq!(
                status, "refused: its isolated process killed by SIGABRT before it was ready",
                "{r}"
            );
        } else {
            assert_eq!(status, "ok", "{row}");
        }
    }
    // The same vetting as in-process comes first: a group-writable file never reaches a
    // child.
    set_mode(&lib, 0o664);
    let r = run(wt(tmp.path())
        .args([
            "run",
            "--hook",
            "crash_segv",
            "--isolate-hooks",
            "--plugin-dir",
        ])
        .arg(&dir));
    assert_eq!(r.code, 2, "{r}");
    assert!(r.stderr.contains("group- or world-writable"), "{r}");
    assert_eq!(no_process_left(&dir), Ok(()));
}
