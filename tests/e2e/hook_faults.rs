//! Hooks that misbehave cannot change how a sweep ends or what it writes: a hook that ends
//! the process, an artifact that cannot be written.

use serde_json::Value;

use crate::fixtures::*;
use crate::harness::*;

#[test]
fn a_hook_that_exits_0_mid_sweep_never_makes_wt_exit_0() {
    let dir = tmp();
    let plugins = plugin_dir(dir.path(), &["wt_test_hostile"]);
    let r = Wt::new(dir.path())
        .args(["run", "--jobs", "1", "--hook", "exiter", "--plugin-dir"])
        .arg(&plugins)
        .env("WT_EXITER_CODE", "0")
        .run();
    assert_eq!(r.code, 4, "{r}");
    assert!(
        r.stderr
            .contains("asked to exit in the middle of the sweep"),
        "{r}"
    );
    let out = dir.path().join("runs");
    // The first run was written before the hook ended the process; nothing is torn.
    assert_eq!(traces(&out).len(), 1, "{:?}", files(&out).keys());
    only_whole_files(&out);
}

#[test]
fn no_way_a_plugin_ends_the_process_makes_a_failing_sweep_anything_but_4() {
    let dir = tmp();
    let plugins = plugin_dir(dir.path(), &["wt_test_hostile"]);
    let points = [
        "on_provisioned",
        "on_run_start",
        "on_run_scored",
        "on_run_end",
        "on_scenario_end",
        "on_pack_end",
    ];
    let hows = [
        ("exit", "exited with status 4"),
        ("_exit", "exited with status 0"),
        ("exit_group", "exited with status 0"),
        ("abort", "killed by signal SIGABRT"),
        ("segv", "killed by signal SIGSEGV"),
        ("sigkill", "killed by signal SIGKILL"),
    ];
    for point in points {
        for (how, said) in hows {
            let out = format!("runs-{point}-{how}");
            let r = Wt::new(dir.path())
                .args([
                    "run",
                    "--agent",
                    "demo-forbidden-tool",
                    "--filter",
                    "refund",
                ])
                .args([
                    "--runs", "2", "--jobs", "1", "--junit", "j.xml", "--out", &out,
                ])
                .args(["--hook", "exiter", "--plugin-dir"])
                .arg(&plugins)
                .env("WT_EXITER_POINT", point)
                .env("WT_EXITER_HOW", how)
                .env("WT_EXITER_CODE", "0")
                .run();
            assert_eq!(r.code, 4, "{point} {how}: {r}");
            let line = r
                .stderr
                .lines()
                .find(|l| l.starts_with("error: the sweep did not complete"))
                .unwrap_or_else(|| panic!("{point} {how}: no line saying so: {r}"));
            assert!(line.contains(said), "{point} {how}: {line}");
            only_whole_files(&dir.path().join(&out));
        }
    }
}

#[test]
fn a_thread_a_hook_leaves_behind_that_exits_0_ends_the_sweep_as_aborted_naming_the_hook() {
    // The point returns and the sweep goes on while the hook's own thread calls exit(0):
    // at the last point too, where the sweep is about to record its result and the exit
    // decides the status only if it comes first.
    let dir = tmp();
    let plugins = plugin_dir(dir.path(), &["wt_test_hostile"]);
    for point in ["on_run_start", "on_scenario_end", "on_pack_end"] {
        let out = format!("runs-{point}");
        let r = Wt::new(dir.path())
            .args(["run", "--jobs", "4", "--runs", "3", "--out", &out])
            .args(["--hook", "exiter", "--plugin-dir"])
            .arg(&plugins)
            .env("WT_EXITER_POINT", point)
            .env("WT_EXITER_THREAD", "1")
            .run();
        let named: Vec<_> = r
            .stderr
            .lines()
            .filter(|l| l.contains("asked to exit") && l.contains("in-process hook exiter"))
            .collect();
        only_whole_files(&dir.path().join(&out));
        if point == "on_pack_end" && r.code == 0 {
            // After the last point the exit races the recording of the result, and either
            // may come first. An exit that comes second leaves the recorded result
            // standing: a whole, green sweep, and at most a line saying what ended it.
            assert!(named.is_empty(), "{point}: {r}");
            assert!(r.stderr.contains("9/9 runs passed"), "{point}: {r}");
            let after = r
                .stderr
                .lines()
                .filter(|l| l.contains("after the sweep recorded its result"))
                .collect::<Vec<_>>();
            assert!(after.len() <= 1, "{point}: {r}");
            assert!(after.iter().all(|l| l.contains("exiter")), "{point}: {r}");
            continue;
        }
        assert_eq!(r.code, 4, "{point}: {r}");
        assert_eq!(named.len(), 1, "{point}: {r}");
    }
}

#[test]
fn a_thread_a_hook_leaves_behind_that_ends_the_process_after_the_result_is_named_and_the_result_stands()
 {
    // The hook's thread waits until `wt` is exiting with its recorded result, then calls
    // exit(0) (the exit handlers run on that thread: the sweep's own exit guard sees it is
    // not `wt`'s thread) or _exit(0) (no handler runs: the supervisor sees a status that is
    // not the recorded code). Either way the sweep's result stands and one line names the
    // hook.
    let dir = tmp();
    let plugins = plugin_dir(dir.path(), &["wt_test_hostile"]);
    for (agent, code, how) in [
        ("demo", 0, "exit"),
        ("demo-forbidden-tool", 1, "exit"),
        ("demo-forbidden-tool", 1, "_exit"),
    ] {
        let out = format!("runs-{agent}-{how}");
        let r = Wt::new(dir.path())
            .args(["run", "--agent", agent, "--filter", "refund"])
            .args(["--runs", "2", "--jobs", "1", "--out", &out])
            .args(["--hook", "exiter", "--plugin-dir"])
            .arg(&plugins)
            .env("WT_EXITER_POINT", "on_pack_end")
            .env("WT_EXITER_THREAD", "late")
            .env("WT_EXITER_HOW", how)
            .env("WT_EXITER_CODE", "0")
            .run();
        assert_eq!(r.code, code, "{agent} {how}: {r}");
        assert!(
            r.stderr.contains("runs passed"),
            "{agent} {how}: no summary: {r}"
        );
        let named: Vec<_> = r
            .stderr
            .lines()
            .filter(|l| l.contains("after the sweep recorded its result"))
            .collect();
        assert_eq!(named.len(), 1, "{agent} {how}: {r}");
        assert!(
            named[0].contains("in-process hook exiter")
                && named[0].contains(&format!("the result (exit {code}) stands")),
            "{agent} {how}: {}",
            named[0]
        );
        assert!(!r.stderr.contains("did not complete"), "{agent} {how}: {r}");
        only_whole_files(&dir.path().join(&out));
    }
}

#[test]
fn a_failed_on_provisioned_artifact_write_still_ends_the_scenario() {
    let dir = tmp();
    let plugins = plugin_dir(dir.path(), &["wt_test_recorder"]);
    let log = dir.path().join("calls.jsonl");
    let args = [
        "--filter",
        "order-status",
        "--hook",
        "recorder",
        "--jobs",
        "1",
    ];
    let probe = Wt::new(dir.path())
        .args(["run", "--seed", "1", "--out", "probe"])
        .args(args)
        .arg("--plugin-dir")
        .arg(&plugins)
        .env("WT_FIXED_CLOCK", CLOCK)
        .run();
    assert_eq!(probe.code, 0, "{probe}");
    let artifact = files(&dir.path().join("probe"))
        .into_keys()
        .find(|n| n.ends_with(".recorder.scenario.order-status.provisioned.pack.json"))
        .unwrap();
    // The same pinned sweep, with a directory where that artifact must go.
    let out = dir.path().join("runs");
    std::fs::create_dir_all(out.join(&artifact)).unwrap();
    let r = Wt::new(dir.path())
        .args(["run", "--seed", "1", "--out", "runs"])
        .args(args)
        .arg("--plugin-dir")
        .arg(&plugins)
        .env("WT_FIXED_CLOCK", CLOCK)
        .env("WT_RECORDER_LOG", &log)
        .run();
    assert_eq!(r.code, 2, "{r}");
    assert!(r.stderr.contains(&artifact), "{r}");
    let points: Vec<String> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["point"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(
        points,
        ["on_provisioned", "on_scenario_end"],
        "pairing broken"
    );
}
