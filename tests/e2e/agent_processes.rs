//! What an agent process starts ends with its run: processes outside its group, `kill -9` of
//! `wt`, and how an interrupted agent process ended.

use std::path::Path;

use crate::fixtures::*;
use crate::harness::*;

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
