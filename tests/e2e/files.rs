//! The files a sweep writes: each sweep its own, pinned sweeps byte-identical at any `--jobs`
//! (racing into one directory, with retries, waits and debriefs), artifact names that never
//! clash or overwrite.

use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;

use crate::fixtures::*;
use crate::harness::*;

#[test]
fn each_sweep_creates_its_own_files_even_pinned_into_one_directory() {
    let dir = tmp();
    let plugins = plugin_dir(dir.path(), &["wt_test_hostile"]);
    let a = pinned(dir.path(), "runs", &["--hook", "clasher"], Some(&plugins));
    let b = pinned(dir.path(), "runs", &["--hook", "clasher"], Some(&plugins));
    assert_eq!((a.code, b.code), (0, 0), "{a}\n{b}");
    let out = dir.path().join("runs");
    let names: Vec<String> = files(&out).into_keys().collect();
    let journals: Vec<&String> = names
        .iter()
        .filter(|n| n.ends_with(".events.jsonl"))
        .collect();
    assert_eq!(journals.len(), 2, "{names:?}");
    let second = journals
        .iter()
        .find(|j| j.ends_with("-1.events.jsonl"))
        .unwrap_or_else(|| panic!("{journals:?}"));
    for j in &journals {
        let text = std::fs::read_to_string(out.join(j)).unwrap();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let ids: std::collections::BTreeSet<&str> = lines
            .iter()
            .map(|l| l["sweep_id"].as_str().unwrap())
            .collect();
        assert_eq!(ids.len(), 1, "{j} mixes sweeps");
        for (i, l) in lines.iter().enumerate() {
            assert_eq!(l["seq"], i, "{j} line {i}");
        }
    }
    assert_eq!(traces(&out).len(), 12);
    let pack_level = names
        .iter()
        .filter(|n| n.ends_with(".clasher.order-status.pack.json"))
        .count();
    assert_eq!(pack_level, 2, "{names:?}");

    // A planted symlink where the journal would go is never followed.
    let stem = second.trim_end_matches("-1.events.jsonl").to_owned();
    let fresh = dir.path().join("fresh");
    std::fs::create_dir(&fresh).unwrap();
    let target = dir.path().join("planted-target");
    std::os::unix::fs::symlink(&target, fresh.join(format!("{stem}.events.jsonl"))).unwrap();
    let c = pinned(dir.path(), "fresh", &[], None);
    assert_eq!(c.code, 0, "{c}");
    assert!(!target.exists(), "the journal followed a symlink");
    assert!(fresh.join(format!("{stem}-1.events.jsonl")).is_file());
}

#[test]
fn pinned_sweeps_are_byte_identical_at_any_jobs_and_journals_identical_per_run() {
    let dir = tmp();
    let one = pinned(dir.path(), "one", &["--jobs", "1", "--runs", "3"], None);
    let four = pinned(dir.path(), "four", &["--jobs", "4", "--runs", "3"], None);
    assert_eq!((one.code, four.code), (0, 0));
    let (a, b) = (
        files(&dir.path().join("one")),
        files(&dir.path().join("four")),
    );
    let runs = |m: &BTreeMap<String, Vec<u8>>| -> BTreeMap<String, Vec<u8>> {
        m.iter()
            .filter(|(n, _)| n.ends_with(".json"))
            .map(|(n, b)| (n.clone(), b.clone()))
            .collect()
    };
    assert_eq!(runs(&a).len(), 18);
    assert_eq!(
        runs(&a),
        runs(&b),
        "traces or scores differ between --jobs 1 and 4"
    );
    // The journal: the same events per run, in the same order, but for seq.
    let per_run = |out: &str| {
        let mut m: BTreeMap<String, Vec<Value>> = BTreeMap::new();
        for mut l in journal(&dir.path().join(out)) {
            // Per run; scenario brackets per scenario; the sweep's own events.
            let key = match (l["run_id"].as_str(), l["scenario_id"].as_str()) {
                (Some(run), _) => run.to_owned(),
                (None, Some(scenario)) => format!("scenario {scenario}"),
                (None, None) => "sweep".to_owned(),
            };
            // `seq` counts lines across runs; `jobs` on SweepStarted says how the sweep ran.
            l.as_object_mut().unwrap().remove("seq");
            l.as_object_mut().unwrap().remove("jobs");
            m.entry(key).or_default().push(l);
        }
        m
    };
    let (a, b) = (per_run("one"), per_run("four"));
    assert_eq!(a.len(), 9 + 3 + 1);
    for (key, lines) in &a {
        assert_eq!(
            Some(lines),
            b.get(key),
            "{key} differs between --jobs 1 and 4"
        );
    }
}

/// A run's artifact names are its own: a lane's next run may take the names the run before
/// it took (the lane keeps one names set and empties it between runs), and within each run a
/// name is still taken once.
#[test]
fn each_run_of_a_lane_starts_with_no_artifact_name_taken() {
    let dir = tmp();
    let plugins = plugin_dir(dir.path(), &["wt_test_hostile"]);
    for jobs in [None, Some("1")] {
        let out = format!("runs-{}", jobs.unwrap_or("default"));
        let mut extra = vec![
            "--filter",
            "order-status",
            "--runs",
            "3",
            "--hook",
            "clasher",
        ];
        if let Some(j) = jobs {
            extra.extend(["--jobs", j]);
        }
        let r = pinned(dir.path(), &out, &extra, Some(&plugins));
        assert_eq!(r.code, 0, "{r}");
        let traces = traces(&dir.path().join(&out));
        assert_eq!(traces.len(), 3, "{r}");
        for t in &traces {
            let warnings = t["worker_warnings"].to_string();
            assert!(
                warnings.contains("emit twice-1: ok"),
                "jobs {jobs:?}: {warnings}"
            );
            assert!(
                warnings.contains("emit twice-2: err"),
                "jobs {jobs:?}: {warnings}"
            );
        }
    }
}

#[test]
fn reserved_hook_names_are_refused_and_clashing_artifacts_are_errors_not_overwrites() {
    let dir = tmp();
    let plugins = plugin_dir(dir.path(), &["wt_test_hostile"]);
    let list = Wt::new(dir.path())
        .args(["hooks", "list", "--plugin-dir"])
        .arg(&plugins)
        .run();
    let score_row = list
        .stdout
        .lines()
        .find(|l| l.starts_with("score "))
        .unwrap_or_else(|| panic!("{list}"));
    assert!(
        score_row.contains("refused") && score_row.contains("reserved"),
        "{score_row}"
    );
    let r = Wt::new(dir.path())
        .args(["run", "--hook", "score", "--plugin-dir"])
        .arg(&plugins)
        .run();
    assert_eq!(r.code, 2, "{r}");

    let r = pinned(
        dir.path(),
        "runs",
        &[
            "--filter",
            "order-status",
            "--runs",
            "1",
            "--hook",
            "clasher",
        ],
        Some(&plugins),
    );
    assert_eq!(r.code, 0, "{r}");
    let out = dir.path().join("runs");
    let t = &traces(&out)[0];
    let warnings = t["worker_warnings"].to_string();
    for (what, ok) in [
        ("twice-1", true),
        ("twice-2", false),
        ("unlabelled-scored", true),
        ("unlabelled-end", false),
        ("reserved-score", false),
        ("reserved-pack", false),
    ] {
        let expected = if ok {
            format!("emit {what}: ok")
        } else {
            format!("emit {what}: err")
        };
        assert!(warnings.contains(&expected), "{expected}: {warnings}");
    }
    assert!(warnings.contains("already written"), "{warnings}");
    let all = files(&out);
    let read = |suffix: &str| -> Value {
        let (_, b) = all
            .iter()
            .find(|(n, _)| n.ends_with(suffix))
            .unwrap_or_else(|| panic!("no *{suffix} in {:?}", all.keys()));
        serde_json::from_slice(b).unwrap()
    };
    assert_eq!(read(".clasher.same.json")["what"], "twice-1");
    let unlabelled = all
        .iter()
        .find(|(n, _)| n.ends_with(".clasher.json"))
        .map(|(_, b)| serde_json::from_slice::<Value>(b).unwrap())
        .unwrap();
    assert_eq!(unlabelled["what"], "unlabelled-scored");
    assert_eq!(
        read(".clasher.scenario.order-status.pack.json")["what"],
        "scenario-unlabelled"
    );
    assert_eq!(
        read(".clasher.order-status.pack.json")["what"],
        "pack-as-scenario"
    );
    assert_eq!(read(".clasher.scenario.pack.json")["what"], "pack-marker");
    assert!(!all.keys().any(|n| n.ends_with(".clasher.score.json")));
}

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
