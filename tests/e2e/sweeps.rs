//! Long sweeps that survive: a pinned sweep killed with SIGKILL at 10 %, 50 % and 99 % and
//! resumed (`wt run --resume`) leaves the uninterrupted sweep's bytes, at `--jobs 1` and 4,
//! with a hook, in a shard and with a judge; a resume of another sweep is refused; runs the
//! harness failed are made again (`--retry-errors`), failures never; `wt rescore --jobs N`
//! writes and prints what `--jobs 1` does.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::Value;

use crate::harness::{
    CLOCK, PATIENCE, TestServer, Wt, agent_file, events, files, index_lines, journal,
    no_process_left, tmp, traces,
};
use crate::judging::completion;

/// Committed traces in `dir` (a missing directory holds none).
fn committed(dir: &Path) -> usize {
    std::fs::read_dir(dir).map_or(0, |d| {
        d.flatten()
            .filter(|e| {
                let name = e.file_name();
                let name = name.to_string_lossy();
                !name.starts_with('.') && name.ends_with(".json") && name.matches('.').count() == 1
            })
            .count()
    })
}

/// Every file of a runs directory but its journal (and its index, which `files` leaves out),
/// by name.
fn run_files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    files(dir)
        .into_iter()
        .filter(|(name, _)| !name.ends_with(".events.jsonl"))
        .collect()
}

/// The inode of the score beside trace `name` in `dir`.
fn score_ino(dir: &Path, name: &Value) -> u64 {
    let trace = dir.join(name.as_str().unwrap());
    std::os::unix::fs::MetadataExt::ino(
        &std::fs::metadata(trace.with_extension("score.json")).unwrap(),
    )
}

/// Checks the index of runs directory `out` against its files: every line names a trace that
/// is there, `lanes` runs at most are committed without a line (a sweep killed between a
/// run's commit and its line), and `wt report --format json` says the same with the index as
/// without it.
fn assert_index_holds(dir: &Path, out: &Path, lanes: usize) {
    let indexes: Vec<_> = std::fs::read_dir(out)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().ends_with(".index.jsonl"))
        .collect();
    assert!(!indexes.is_empty(), "{} has no index", out.display());
    let mut named = BTreeSet::new();
    for e in index_lines(out) {
        let trace = e["trace"].as_str().unwrap().to_owned();
        assert!(
            out.join(&trace).is_file(),
            "the index names {trace}, which is missing"
        );
        named.insert(trace);
    }
    let runs = committed(out);
    assert!(
        named.len() <= runs && runs <= named.len() + lanes,
        "{} lines for {runs} runs",
        named.len()
    );
    let report = || {
        Wt::new(dir)
            .args(["report", "--format", "json"])
            .arg(out)
            .run()
            .stdout
    };
    let with = report();
    let away = out.with_extension("away");
    std::fs::create_dir_all(&away).unwrap();
    for index in &indexes {
        std::fs::rename(index, away.join(index.file_name().unwrap())).unwrap();
    }
    assert_eq!(with, report(), "the index answers as the files do");
    for index in &indexes {
        std::fs::rename(away.join(index.file_name().unwrap()), index).unwrap();
    }
    std::fs::remove_dir(&away).unwrap();
}

/// Starts `sweep`, SIGKILLs `wt` once `at` traces are committed in `out` (or once it ended
/// on its own: the caller sees whether the cut came before the end), and waits until no
/// process of it is left.
fn kill_at(sweep: Wt, out: &Path, at: usize) {
    let mut child = sweep
        .command()
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn wt");
    let started = std::time::Instant::now();
    while committed(out) < at && child.try_wait().unwrap().is_none() {
        assert!(
            started.elapsed() < PATIENCE,
            "{at} runs were not committed in time"
        );
        std::thread::sleep(Duration::from_micros(200));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    // The sweep's own process dies with its supervisor.
    no_process_left(out).expect("the sweep's process is gone");
}

/// What a resume must leave: every pair once, no temporary file, the journal's story told
/// in two segments, and a gate that finds the sweep complete.
fn assert_whole(dir: &Path, out: &Path, pairs: usize, reference: &Path) {
    let t = traces(out);
    let places: BTreeSet<(String, u64)> = t
        .iter()
        .map(|t| {
            (
                t["scenario_id"].as_str().unwrap().to_owned(),
                t["run_index"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!((t.len(), places.len()), (pairs, pairs), "every pair once");
    let hidden: Vec<String> = std::fs::read_dir(out)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(hidden.is_empty(), "temporary files left: {hidden:?}");
    let j = journal(out);
    let started = events(&j, "SweepStarted");
    assert_eq!(started.len(), 2, "one segment per invocation");
    assert!(started[0].get("resumed").is_none());
    assert_eq!(started[1]["resumed"], 1);
    assert_eq!(started[0]["sweep_id"], started[1]["sweep_id"]);
    let seqs: Vec<u64> = j.iter().map(|l| l["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (0..j.len() as u64).collect::<Vec<_>>(), "seq goes on");
    // The gate says of the resumed sweep what it says of the uninterrupted one.
    let gate = |d: &Path| Wt::new(dir).args(["report", "--gate"]).arg(d).run();
    let (r, want) = (gate(out), gate(reference));
    assert_eq!(r.code, want.code, "{r}");
    assert!(!r.stderr.contains("has no SweepEnded"), "{r}");
}

#[test]
fn a_sweep_killed_at_10_50_and_99_percent_resumes_to_the_uninterrupted_sweeps_bytes() {
    let dir = tmp();
    // 600 runs of the demo pack by an agent that fails two of its scenarios, so that the
    // debrief hook converses with it and writes an artifact beside most traces.
    let sweep = |out: &str, jobs: &str, shard: Option<&str>| {
        let mut w = Wt::new(dir.path())
            .args(["run", "--agent", "demo-forbidden-tool", "--hook", "debrief"])
            .args([
                "--runs", "200", "--seed", "21", "--jobs", jobs, "--out", out,
            ])
            .env("WT_FIXED_CLOCK", CLOCK);
        if let Some(k) = shard {
            w = w.args(["--shard", k]);
        }
        w
    };
    let whole = |out: &str, shard: Option<&str>| {
        let r = sweep(out, "1", shard).run();
        assert_eq!(r.code, 1, "{r}");
        run_files(&dir.path().join(out))
    };
    let reference = whole("whole", None);
    assert_eq!(committed(&dir.path().join("whole")), 600);
    let shard_reference = whole("whole-shard", Some("2/3"));
    let shard_runs = committed(&dir.path().join("whole-shard"));
    let cases = [
        ("1", 10, None),
        ("1", 50, None),
        ("1", 99, None),
        ("4", 10, None),
        ("4", 50, None),
        ("4", 99, None),
        ("4", 50, Some("2/3")),
    ];
    for (jobs, percent, shard) in cases {
        let name = format!("cut-{jobs}-{percent}-{}", shard.is_some());
        let out = dir.path().join(&name);
        let total = if shard.is_some() { shard_runs } else { 600 };
        // A run of the demo agent takes well under a millisecond in release: the last runs
        // may all be written before the kill lands. Then the cut is tried again a little
        // earlier (never the sweep's end: a cut that missed proves nothing).
        let mut at = total * percent / 100;
        let left = loop {
            kill_at(sweep(&name, jobs, shard), &out, at);
            let left = committed(&out);
            if left < total {
                break left;
            }
            assert!(
                at > total * 9 / 10,
                "{name}: every cut came after the sweep ended"
            );
            std::fs::remove_dir_all(&out).unwrap();
            at -= (total / 100).max(1);
        };
        let r = sweep(&name, jobs, shard).arg("--resume").run();
        assert_eq!(r.code, 1, "{name}: {r}");
        assert!(
            r.stderr
                .contains(&format!("{} run(s) of pack demo", total - left)),
            "{name}: the resume makes exactly the runs missing: {r}"
        );
        let got = run_files(&out);
        let want = if shard.is_some() {
            &shard_reference
        } else {
            &reference
        };
        assert_eq!(
            got.keys().collect::<Vec<_>>(),
            want.keys().collect::<Vec<_>>(),
            "{name}: the same files"
        );
        for (file, bytes) in want {
            assert!(got[file] == *bytes, "{name}: {file} differs");
        }
        let whole = if shard.is_some() {
            "whole-shard"
        } else {
            "whole"
        };
        assert_whole(dir.path(), &out, total, &dir.path().join(whole));
    }
}

#[test]
fn a_killed_judged_sweep_resumes_to_the_same_bytes_and_pays_for_no_grading_twice() {
    let dir = tmp();
    let judged = Arc::new(AtomicUsize::new(0));
    let count = judged.clone();
    let server = TestServer::start(move |seen| {
        let body: Value = serde_json::from_str(&seen.body).unwrap_or_default();
        if body["model"] == "grader" {
            count.fetch_add(1, Ordering::SeqCst);
            return (
                200,
                completion(r#"{"verdict": "pass", "reasoning": "It answers."}"#),
            );
        }
        (200, completion("Your order 1234 has shipped."))
    });
    let (pack, agent) = one_turn(dir.path(), &server, 150, true);
    let sweep = |out: &str| {
        Wt::new(dir.path())
            .args(["run", "--seed", "4", "--jobs", "4", "--out", out])
            .pack(&pack)
            .agent(&agent)
            .env("WT_FIXED_CLOCK", CLOCK)
    };
    let r = sweep("whole").run();
    assert_eq!(r.code, 0, "{r}");
    assert_eq!(judged.swap(0, Ordering::SeqCst), 150);
    let out = dir.path().join("cut");
    kill_at(sweep("cut"), &out, 75);
    assert!(committed(&out) < 150, "killed after the sweep ended");
    assert_index_holds(dir.path(), &out, 4);
    let r = sweep("cut").arg("--resume").run();
    assert_eq!(r.code, 0, "{r}");
    assert_index_holds(dir.path(), &out, 4);
    let (got, want) = (run_files(&out), run_files(&dir.path().join("whole")));
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        want.keys().collect::<Vec<_>>()
    );
    for (file, bytes) in &want {
        assert!(got[file] == *bytes, "{file} differs");
    }
    // A run whose score was written before the kill keeps its grading: only the runs whose
    // judge was still being asked when the sweep was killed (at most one per lane) are
    // graded twice.
    let calls = judged.load(Ordering::SeqCst);
    assert!((150..=154).contains(&calls), "{calls} judge calls");
    assert_whole(dir.path(), &out, 150, &dir.path().join("whole"));
}

#[test]
fn a_resume_of_another_sweep_is_refused_in_one_line_naming_what_differs() {
    let dir = tmp();
    let run = |extra: &[&str]| {
        Wt::new(dir.path())
            .args(["run", "--out", "runs"])
            .args(extra)
            .env("WT_FIXED_CLOCK", CLOCK)
            .run()
    };
    let same = ["--runs", "2", "--seed", "3"];
    assert_eq!(run(&same).code, 0);
    let before = files(&dir.path().join("runs"));
    let pack = crate::harness::write_pack(
        dir.path(),
        &[(
            "a.toml",
            "id = \"a\"\nturns = [\"hi\"]\n[expect.outcome]\nreply_contains = [\"x\"]\n",
        )],
    );
    let pack = pack.to_str().unwrap();
    for (extra, names) in [
        (
            &["--runs", "2", "--seed", "4"][..],
            "--seed (4 here, 3 in the sweep)",
        ),
        (
            &["--runs", "2", "--seed", "3", "--pack", pack][..],
            "the pack (sha256:",
        ),
        (
            &["--runs", "2", "--seed", "3", "--agent", "demo-leaky"][..],
            "the agent (`demo-leaky`",
        ),
        (
            &["--runs", "3", "--seed", "3"][..],
            "--runs (3 here, 2 in the sweep)",
        ),
        (
            &["--runs", "2", "--seed", "3", "--hook", "debrief"][..],
            "the hooks ([debrief] here, [] in the sweep)",
        ),
    ] {
        let r = run(&[&["--resume"], extra].concat());
        assert_eq!(r.code, 2, "{extra:?}: {r}");
        let lines: Vec<&str> = r.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{extra:?}: {r}");
        assert!(
            lines[0].contains("--resume: this is not the sweep of"),
            "{r}"
        );
        assert!(lines[0].contains(names), "{extra:?}: {r}");
    }
    // Nothing to resume, or a sequential sweep: refused too.
    let r = Wt::new(dir.path())
        .args(["run", "--resume", "--out", "empty"])
        .run();
    assert_eq!(r.code, 2, "{r}");
    assert!(r.stderr.contains("holds no sweep's event journal"), "{r}");
    let r = run(&[
        &same[..],
        &["--resume", "--until-decided", "--baseline", "runs"],
    ]
    .concat());
    assert_eq!(r.code, 2, "{r}");
    assert_eq!(files(&dir.path().join("runs")), before, "nothing written");
    // The same sweep, every run committed: nothing is made, and it stays complete.
    let r = run(&[&same[..], &["--resume"]].concat());
    assert_eq!(r.code, 0, "{r}");
    assert!(r.stderr.contains(", 0 run(s) of pack demo"), "{r}");
    assert_eq!(run_files(&dir.path().join("runs")).len(), 12);
}

/// An `openai` agent on `server` with no retry of its own, and a one-turn pack of `runs`
/// runs that passes when the reply says "shipped" — and, `judged`, when the judge `grader`
/// (on `server` too) passes it.
fn one_turn(
    dir: &Path,
    server: &TestServer,
    runs: u32,
    judged: bool,
) -> (std::path::PathBuf, std::path::PathBuf) {
    let judge = if judged {
        "[[expect.judge]]\nmodel = \"grader\"\nrubric = \"Says where the order is.\"\n"
    } else {
        ""
    };
    let pack = crate::harness::write_pack(
        dir,
        &[(
            "order.toml",
            &format!(
                "id = \"order\"\nruns = {runs}\nturns = [\"Where is order 1234?\"]\n[expect.outcome]\nreply_contains = [\"shipped\"]\n{judge}"
            ),
        )],
    );
    if judged {
        std::fs::write(
            pack.join("pack.toml"),
            format!(
                "name = \"judged\"\n[models.grader]\nprovider = \"openai\"\nendpoint = \"{}/v1\"\nmodel = \"grader\"\n",
                server.base
            ),
        )
        .unwrap();
    }
    let agent = agent_file(
        dir,
        "agent.toml",
        &format!(
            "label = \"bot\"\nruntime = \"openai\"\nmodel = \"bot\"\nendpoint = \"{}/v1\"\nretries = 0\n",
            server.base
        ),
    );
    (pack, agent)
}

#[test]
fn a_flaky_agent_passes_with_retry_errors_and_a_failing_one_is_never_retried() {
    let dir = tmp();
    // The first call of each attempt pair answers 503 (the lane is one: calls alternate).
    let calls = Arc::new(AtomicUsize::new(0));
    let failing = Arc::new(AtomicBool::new(false));
    let (n, fails) = (calls.clone(), failing.clone());
    let server = TestServer::start(move |_| {
        if fails.load(Ordering::SeqCst) {
            n.fetch_add(1, Ordering::SeqCst);
            return (200, completion("I cannot say."));
        }
        if n.fetch_add(1, Ordering::SeqCst) % 2 == 0 {
            (503, r#"{"error": {"message": "overloaded"}}"#.to_owned())
        } else {
            (200, completion("Your order 1234 has shipped."))
        }
    });
    let (pack, agent) = one_turn(dir.path(), &server, 12, false);
    let sweep = |out: &str, extra: &[&str]| {
        Wt::new(dir.path())
            .args(["run", "--jobs", "1", "--seed", "8", "--out", out])
            .args(extra)
            .pack(&pack)
            .agent(&agent)
            .env("WT_RETRY_BACKOFF_S", "0.01")
            .env("WT_FIXED_CLOCK", CLOCK)
            .run()
    };
    let r = sweep("flaky", &["--retry-errors", "2"]);
    assert_eq!(r.code, 0, "{r}");
    assert_eq!(calls.load(Ordering::SeqCst), 24);
    let out = dir.path().join("flaky");
    for t in traces(&out) {
        assert_eq!(t["attempts"], 2, "{t}");
        let earlier = t["earlier_attempts"].as_array().unwrap();
        assert_eq!(earlier.len(), 1);
        assert_eq!(earlier[0]["attempt"], 1);
        assert!(earlier[0]["error"].as_str().unwrap().contains("503"), "{t}");
        assert_eq!(earlier[0]["wait_ms"], 0, "pinned");
    }
    let j = journal(&out);
    assert_eq!(events(&j, "RunRetried").len(), 12);
    assert_eq!(events(&j, "RunStarted").len(), 24);
    assert_eq!(events(&j, "RunEnded").len(), 12, "a retry is the same run");
    let r = Wt::new(dir.path()).args(["report", "flaky"]).run();
    assert!(r.stdout.contains("12/12 runs passed"), "{r}");
    assert!(r.stdout.contains("12 run(s) needed a retry"), "{r}");

    // Without retries half the runs are ERROR; resuming the finished sweep with
    // --retry-errors makes those again, in place, and leaves the passing ones as they were.
    calls.store(0, Ordering::SeqCst);
    let r = sweep("once", &[]);
    assert_eq!(r.code, 3, "{r}");
    let out = dir.path().join("once");
    let before = run_files(&out);
    let passed: Vec<String> = traces(&out)
        .iter()
        .filter(|t| t.get("attempts").is_none() && t["run_index"].as_u64().unwrap() % 2 == 1)
        .map(|t| t["run_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(passed.len(), 6);
    let r = sweep("once", &["--resume", "--retry-errors", "2"]);
    assert_eq!(r.code, 0, "{r}");
    assert!(r.stderr.contains("6 run(s) of pack"), "{r}");
    let after = run_files(&out);
    assert_eq!(
        before.keys().collect::<Vec<_>>(),
        after.keys().collect::<Vec<_>>(),
        "each run keeps its file name"
    );
    for t in traces(&out) {
        let id = t["run_id"].as_str().unwrap();
        if passed.iter().any(|p| p == id) {
            assert!(t.get("attempts").is_none(), "{t}");
        } else {
            // The first sweep's attempt, then the resume's 503 and its success.
            assert_eq!(t["attempts"], 3, "{t}");
        }
    }
    for (name, bytes) in &before {
        if passed
            .iter()
            .any(|p| String::from_utf8_lossy(bytes).contains(p.as_str()))
        {
            assert!(after[name] == *bytes, "{name}: a passing run was touched");
        }
    }

    // A failing agent fails once per run: a FAIL is never retried.
    failing.store(true, Ordering::SeqCst);
    calls.store(0, Ordering::SeqCst);
    let r = sweep("failing", &["--retry-errors", "2"]);
    assert_eq!(r.code, 1, "{r}");
    assert_eq!(calls.load(Ordering::SeqCst), 12);
    let out = dir.path().join("failing");
    assert!(traces(&out).iter().all(|t| t.get("attempts").is_none()));
    assert!(events(&journal(&out), "RunRetried").is_empty());
}

#[test]
fn rescore_at_jobs_8_writes_and_prints_what_jobs_1_does() {
    let dir = tmp();
    // A judge that takes 100 ms an answer; its reasoning changes between the sweep and the
    // rescores, its verdicts do not.
    let second = Arc::new(AtomicBool::new(false));
    let again = second.clone();
    let server = TestServer::start(move |seen| {
        let body: Value = serde_json::from_str(&seen.body).unwrap_or_default();
        if body["model"] != "grader" {
            return (200, completion("Your order 1234 has shipped."));
        }
        std::thread::sleep(Duration::from_millis(100));
        let why = if again.load(Ordering::SeqCst) {
            "Looked again: it answers."
        } else {
            "It answers."
        };
        (
            200,
            completion(&format!(r#"{{"verdict": "pass", "reasoning": "{why}"}}"#)),
        )
    });
    let (pack, agent) = one_turn(dir.path(), &server, 24, true);
    let r = Wt::new(dir.path())
        .args(["run", "--jobs", "8", "--seed", "5", "--out", "runs"])
        .pack(&pack)
        .agent(&agent)
        .env("WT_FIXED_CLOCK", CLOCK)
        .run();
    assert_eq!(r.code, 0, "{r}");
    second.store(true, Ordering::SeqCst);
    let copy = |name: &str| {
        let to = dir.path().join(name);
        std::fs::create_dir(&to).unwrap();
        for (file, bytes) in files(&dir.path().join("runs")) {
            std::fs::write(to.join(file), bytes).unwrap();
        }
        to
    };
    let rescore = |out: &Path, jobs: &str| {
        let r = Wt::new(dir.path())
            .args(["rescore", "--no-cache", "--seed", "5", "--jobs", jobs])
            .arg(out)
            .pack(&pack)
            .env("WT_FIXED_CLOCK", CLOCK)
            .run();
        assert_eq!(r.code, 0, "{r}");
        r
    };
    let (one, eight) = (copy("one"), copy("eight"));
    let r1 = rescore(&one, "1");
    let r8 = rescore(&eight, "8");
    // Graded again, to the same verdicts: no run changed, the new gradings are written.
    assert_eq!(r1.stdout, "", "{r1}");
    assert!(
        r1.stderr
            .contains("0 changed, 0 unchanged, 24 graded again to the same verdicts"),
        "{r1}"
    );
    assert_eq!((r1.stdout, r1.stderr), (r8.stdout, r8.stderr));
    let (a, b) = (files(&one), files(&eight));
    assert_eq!(a, b, "--jobs 8 writes what --jobs 1 does");
    assert_ne!(
        a,
        files(&dir.path().join("runs")),
        "the new gradings are written"
    );
    // The rescore indexes the scores it wrote: a line for each, naming the file now there
    // (the sweep's lines, copied with the directory, name other inodes).
    let rescored: Vec<Value> = index_lines(&one)
        .into_iter()
        .filter(|e| e["stamps"][1]["ino"] == score_ino(&one, &e["trace"]))
        .collect();
    assert_eq!(rescored.len(), 24);
    assert_index_holds(dir.path(), &one, 0);
    assert_index_holds(dir.path(), &eight, 0);
    let scores: Vec<_> = a
        .iter()
        .filter(|(n, _)| n.ends_with(".score.json"))
        .collect();
    assert_eq!(scores.len(), 24);
    for (name, bytes) in scores {
        assert!(
            String::from_utf8_lossy(bytes).contains("Looked again"),
            "{name}"
        );
    }
}

#[test]
fn a_run_cut_when_wt_stopped_is_made_again_in_place_by_a_resume() {
    let dir = tmp();
    // The agent's model hangs until told to answer.
    let hang = Arc::new(AtomicBool::new(true));
    let hanging = hang.clone();
    let server = TestServer::start(move |_| {
        while hanging.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(20));
        }
        (200, completion("Your order 1234 has shipped."))
    });
    let (pack, agent) = one_turn(dir.path(), &server, 2, false);
    let sweep = || {
        Wt::new(dir.path())
            .args(["run", "--jobs", "1", "--seed", "2", "--out", "runs"])
            .pack(&pack)
            .agent(&agent)
            .env("WT_GRACE_S", "0")
    };
    let out = dir.path().join("runs");
    let running = sweep().start();
    crate::harness::wait_for_journal_event(&out, "TurnStarted");
    running.signal("TERM");
    let r = running.finish();
    assert_eq!(r.code, 130, "{r}");
    let cut = traces(&out);
    assert_eq!(cut.len(), 1, "the run in flight is written whole");
    assert_eq!(cut[0]["interrupted"], true, "{}", cut[0]);
    let (id, path) = (cut[0]["run_id"].clone(), crate::harness::trace_paths(&out));
    hang.store(false, Ordering::SeqCst);
    let r = sweep().arg("--resume").run();
    assert_eq!(r.code, 0, "{r}");
    assert!(
        r.stderr
            .contains("1 run(s) cut when wt stopped are made again"),
        "{r}"
    );
    let t = traces(&out);
    assert_eq!(t.len(), 2, "{t:?}");
    let again = t
        .iter()
        .find(|t| t["run_id"] == id)
        .expect("the same run id");
    assert!(again.get("interrupted").is_none() && again.get("attempts").is_none());
    assert!(path[0].exists(), "the same file name");
    let r = Wt::new(dir.path()).args(["report", "--gate", "runs"]).run();
    assert_eq!(r.code, 0, "{r}");
}
