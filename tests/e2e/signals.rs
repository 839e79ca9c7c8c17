//! Signals and closed output streams: SIGTERM, SIGHUP, a second signal, a closed stdout or
//! stderr — a sweep stops in time, writes whole files and exits with the sweep's code.

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::fixtures::*;
use crate::harness::*;

#[test]
fn sigterm_cuts_in_flight_turns_after_the_grace_period_and_writes_everything() {
    let dir = tmp();
    let srv = hanging_service();
    let agent = agent_file(
        dir.path(),
        "a.toml",
        &format!(
            "label = \"stuck\"\nruntime = \"http\"\nendpoint = \"{}\"\nturn_timeout_s = 600\n",
            srv.base
        ),
    );
    let plugins = plugin_dir(dir.path(), &["wt_test_turns"]);
    let log = dir.path().join("turns.log");
    let out = dir.path().join("runs");
    let wt = Wt::new(dir.path())
        .args(["run", "--jobs", "1", "--junit", "junit.xml", "--agent"])
        .arg(&agent)
        .args(["--hook", "turn_a", "--plugin-dir"])
        .arg(&plugins)
        .env("WT_GRACE_S", "1")
        .env("WT_TURN_A_LOG", &log)
        .start();
    wait_for_journal_event(&out, "TurnStarted");
    let sent = Instant::now();
    wt.signal("TERM");
    let r = wt.finish_within(Duration::from_secs(20));
    let took = sent.elapsed();
    assert_eq!(r.code, 130, "{r}");
    assert!(took < Duration::from_secs(8), "took {took:?} after SIGTERM");
    assert!(r.stderr.contains("SIGTERM"), "{r}");
    assert!(r.stderr.contains("runs passed"), "no summary: {r}");
    assert!(dir.path().join("junit.xml").is_file(), "no JUnit: {r}");
    let ts = traces(&out);
    assert_eq!(ts.len(), 1, "{r}");
    assert_eq!(ts[0]["turns"][0]["error_kind"], "interrupted", "{}", ts[0]);
    assert_eq!(scores(&out)[0]["verdict"], "ERROR");
    let j = journal(&out);
    assert_eq!(events(&j, "TurnInterrupted").len(), 1);
    assert_eq!(events(&j, "SweepEnded").len(), 1);
    // Every begun turn hook got its finish.
    let log = std::fs::read_to_string(&log).unwrap();
    assert!(log.contains("turn_a begin"), "{log}");
    assert!(
        log.contains("finish") && log.contains("Interrupted"),
        "{log}"
    );
    only_whole_files(&out);
}

#[test]
fn sighup_stops_a_cooperative_runtime_like_ctrl_c() {
    let dir = tmp();
    let agent = agent_file(
        dir.path(),
        "slow.toml",
        "label = \"slow\"\nruntime = \"demo\"\nfault = \"slow\"\nturn_timeout_s = 600\n",
    );
    let out = dir.path().join("runs");
    let wt = Wt::new(dir.path())
        .args(["run", "--jobs", "1", "--junit", "junit.xml", "--agent"])
        .arg(&agent)
        .env("WT_GRACE_S", "0.5")
        .start();
    wait_for_journal_event(&out, "TurnStarted");
    wt.signal("HUP");
    let r = wt.finish_within(Duration::from_secs(20));
    assert_eq!(r.code, 130, "{r}");
    assert!(
        r.stderr.contains("SIGHUP") && r.stderr.contains("runs passed"),
        "{r}"
    );
    assert!(dir.path().join("junit.xml").is_file());
    let ts = traces(&out);
    assert_eq!(ts.len(), 1);
    assert_eq!(ts[0]["turns"][0]["error_kind"], "interrupted");
    only_whole_files(&out);
}

#[test]
fn a_second_signal_stops_at_once_leaving_only_whole_files() {
    let dir = tmp();
    let srv = hanging_service();
    let agent = agent_file(
        dir.path(),
        "a.toml",
        &format!(
            "label = \"stuck\"\nruntime = \"http\"\nendpoint = \"{}\"\nturn_timeout_s = 600\n",
            srv.base
        ),
    );
    let out = dir.path().join("runs");
    let wt = Wt::new(dir.path())
        .args(["run", "--agent"])
        .arg(&agent)
        .env("WT_GRACE_S", "60")
        .start();
    wait_for_journal_event(&out, "TurnStarted");
    wt.signal("TERM");
    // The second signal is one only once `wt` has taken the first.
    wt.wait_for_stderr("SIGTERM: finishing the runs in flight");
    let sent = Instant::now();
    wt.signal("TERM");
    let r = wt.finish_within(Duration::from_secs(10));
    assert_eq!(r.code, 130, "{r}");
    assert!(sent.elapsed() < Duration::from_secs(5));
    assert!(r.stderr.contains("stopping now"), "{r}");
    only_whole_files(&out);
    // No run was written, but the journal says a sweep started and never ended: an
    // incomplete sweep, which the gate holds as 3 and says so — never "no runs found".
    assert!(trace_paths(&out).is_empty(), "{:?}", files(&out).keys());
    let g = Wt::new(dir.path())
        .args(["report", "--gate"])
        .arg(&out)
        .run();
    assert_eq!(g.code, 3, "{g}");
    assert!(
        g.stderr
            .lines()
            .any(|l| l.starts_with("incomplete: ") && l.contains("wrote no run")),
        "{g}"
    );
    // A directory with nothing of wt's in it stays a usage error.
    let foreign = dir.path().join("foreign");
    std::fs::create_dir(&foreign).unwrap();
    std::fs::write(foreign.join("notes.json"), "{}").unwrap();
    let g = Wt::new(dir.path())
        .args(["report", "--gate"])
        .arg(&foreign)
        .run();
    assert_eq!(g.code, 2, "{g}");
    assert!(g.stderr.contains("no runs found"), "{g}");
}

#[test]
fn a_closed_stdout_or_stderr_never_panics_and_the_exit_code_is_the_sweeps() {
    let dir = tmp();
    // `wt run 2>&1 | head -1`: the reader takes one line and goes away.
    let mut child = Wt::new(dir.path())
        .args(["run", "--agent", "demo-forbidden-tool", "--events", "-"])
        .command()
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stderr.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    drop(child.stdout.take());
    assert!(first.starts_with("wt:"), "{first}");
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(1), "{status:?}");
    assert_eq!(traces(&dir.path().join("runs")).len(), 6);
}

#[test]
fn sigterm_ends_a_wait_for_an_agent_reset_that_hangs() {
    // A wait the runner makes outside a turn (the agent's reset) ends at the stop deadline
    // too, not at its own timeout.
    let dir = tmp();
    let srv = TestServer::start(|s| {
        if s.url.starts_with("/reset") {
            std::thread::sleep(Duration::from_secs(40));
        }
        (200, "{}".into())
    });
    let agent = agent_file(
        dir.path(),
        "a.toml",
        &format!(
            "label = \"stuck-reset\"\nruntime = \"http\"\nendpoint = \"{}\"\nturn_timeout_s = 600\n",
            srv.base
        ),
    );
    let out = dir.path().join("runs");
    let wt = Wt::new(dir.path())
        .args(["run", "--jobs", "1", "--agent"])
        .arg(&agent)
        .env("WT_GRACE_S", "1")
        .start();
    let reset_seen = || {
        srv.seen
            .lock()
            .unwrap()
            .iter()
            .any(|s| s.url.starts_with("/reset"))
    };
    assert!(poll_until(PATIENCE, reset_seen), "no reset was asked for");
    let sent = Instant::now();
    wt.signal("TERM");
    let r = wt.finish_within(Duration::from_secs(30));
    let took = sent.elapsed();
    assert_eq!(r.code, 130, "{r}");
    assert!(
        took < Duration::from_secs(8),
        "took {took:?} after SIGTERM: {r}"
    );
    let ts = traces(&out);
    assert_eq!(ts.len(), 1, "{r}");
    assert!(
        ts[0]["error"]
            .as_str()
            .is_some_and(|e| e.contains("reset failed")),
        "{}",
        ts[0]
    );
    assert_eq!(scores(&out)[0]["verdict"], "ERROR");
    only_whole_files(&out);
}
