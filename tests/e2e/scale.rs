//! Scale through the real binary: lanes (a scenario's runs in parallel, each lane its own
//! agent session and hook instances) keep every ordering contract and pinned byte-identity;
//! `http` lanes follow `max_sessions`; endpoint limits hold across lanes; hooks do not
//! serialize lanes; shards together run exactly the unsharded sweep.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::fixtures::*;
use crate::harness::*;

/// Counts requests in flight and remembers the most at once.
#[derive(Default, Clone)]
struct Gauge {
    now: Arc<AtomicUsize>,
    max: Arc<AtomicUsize>,
}

impl Gauge {
    fn enter(&self) -> GaugeGuard {
        let n = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.max.fetch_max(n, Ordering::SeqCst);
        GaugeGuard(self.now.clone())
    }
    fn max(&self) -> usize {
        self.max.load(Ordering::SeqCst)
    }
}

struct GaugeGuard(Arc<AtomicUsize>);
impl Drop for GaugeGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// An `http` agent service that answers every inject after `delay`, measuring how many
/// scenario turns and how many debrief (converse) turns are in flight at once, and keeping
/// each reset's body.
struct Service {
    server: TestServer,
    turns: Gauge,
    converses: Gauge,
    resets: Arc<Mutex<Vec<Value>>>,
}

fn service(delay: Duration) -> Service {
    let (turns, converses) = (Gauge::default(), Gauge::default());
    let resets = Arc::new(Mutex::new(Vec::new()));
    let (t, c, r) = (turns.clone(), converses.clone(), resets.clone());
    let server = TestServer::start(move |s| {
        if s.url.starts_with("/reset") {
            r.lock()
                .unwrap()
                .push(serde_json::from_str(&s.body).unwrap());
            return (200, "{}".into());
        }
        if !s.url.starts_with("/inject") {
            return (200, "{}".into());
        }
        let body: Value = serde_json::from_str(&s.body).unwrap();
        let text = body["text"].as_str().unwrap_or_default();
        let _in = if text.contains("has been scored") {
            c.enter()
        } else {
            t.enter()
        };
        std::thread::sleep(delay);
        let reply = json!({"reply": "Order 1234 has shipped.", "session_id": body["session_id"]});
        (200, reply.to_string())
    });
    Service {
        server,
        turns,
        converses,
        resets,
    }
}

fn http_agent(dir: &Path, base: &str, extra: &str) -> PathBuf {
    let p = dir.join("agent.toml");
    std::fs::write(
        &p,
        format!("label = \"svc\"\nruntime = \"http\"\nendpoint = \"{base}\"\n{extra}"),
    )
    .unwrap();
    p
}

/// A pack with one one-turn scenario and no expectations beyond a reply.
fn one_scenario(dir: &Path, runs: u32) -> PathBuf {
    write_pack(
        dir,
        &[(
            "ask.toml",
            &format!("id = \"ask\"\nruns = {runs}\nturns = [\"Where is order 1234?\"]\n"),
        )],
    )
}

#[test]
fn http_lanes_follow_max_sessions_and_each_reset_names_its_lane() {
    let dir = tmp();
    let pack = one_scenario(dir.path(), 9);
    for (sessions, expect) in [(1usize, 1usize), (3, 3)] {
        let svc = service(Duration::from_millis(150));
        let agent = http_agent(
            dir.path(),
            &svc.server.base,
            &format!("max_sessions = {sessions}\n"),
        );
        let out = format!("s{sessions}");
        let r = Wt::new(dir.path())
            .args(["run", "--jobs", "6", "--out", &out, "--pack"])
            .arg(&pack)
            .arg("--agent")
            .arg(&agent)
            .run();
        assert_eq!(r.code, 0, "{r}");
        assert_eq!(traces(&dir.path().join(&out)).len(), 9);
        assert_eq!(svc.turns.max(), expect, "max_sessions = {sessions}");
        let lanes: BTreeSet<u64> = svc
            .resets
            .lock()
            .unwrap()
            .iter()
            .map(|b| b["lane"].as_u64().unwrap())
            .collect();
        assert_eq!(lanes, (0..expect as u64).collect(), "lanes reset");
    }
}

#[test]
fn lanes_keep_every_ordering_contract() {
    let dir = tmp();
    let svc = service(Duration::from_millis(60));
    let agent = http_agent(dir.path(), &svc.server.base, "max_sessions = 4\n");
    let pack = write_pack(
        dir.path(),
        &[
            (
                "a.toml",
                "id = \"a\"\nruns = 6\nturns = [\"one\", \"two\"]\n",
            ),
            ("b.toml", "id = \"b\"\nruns = 6\nturns = [\"one\"]\n"),
        ],
    );
    let plugins = plugin_dir(dir.path(), &["wt_test_recorder", "wt_test_turns"]);
    let log = dir.path().join("calls.jsonl");
    let turnlog = dir.path().join("turns.log");
    let r = Wt::new(dir.path())
        .args(["run", "--jobs", "4", "--pack"])
        .arg(&pack)
        .arg("--agent")
        .arg(&agent)
        .args(["--hook", "recorder", "--hook", "turn_a", "--hook", "turn_b"])
        .arg("--plugin-dir")
        .arg(&plugins)
        .env("WT_RECORDER_LOG", &log)
        .env("WT_TURN_A_LOG", &turnlog)
        .env("WT_TURN_B_LOG", &turnlog)
        .run();
    assert_eq!(r.code, 0, "{r}");
    assert!(
        svc.turns.max() >= 2,
        "runs never overlapped: {}",
        svc.turns.max()
    );
    let calls: Vec<Value> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let at = |pred: &dyn Fn(&Value) -> bool| -> Vec<usize> {
        calls
            .iter()
            .enumerate()
            .filter(|(_, c)| pred(c))
            .map(|(i, _)| i)
            .collect()
    };
    // Per run: start < scored < end.
    let mut runs: BTreeMap<String, Vec<(usize, String)>> = BTreeMap::new();
    for (i, c) in calls.iter().enumerate() {
        if let Some(run) = c["run_id"].as_str() {
            runs.entry(run.to_owned())
                .or_default()
                .push((i, c["point"].as_str().unwrap().to_owned()));
        }
    }
    assert_eq!(runs.len(), 12);
    for (run, points) in &runs {
        let names: Vec<&str> = points.iter().map(|(_, p)| p.as_str()).collect();
        assert_eq!(
            names,
            ["on_run_start", "on_run_scored", "on_run_end"],
            "{run}"
        );
    }
    // Per scenario: provisioned before its first run, ended after its last.
    for s in ["a", "b"] {
        let of =
            |point: &'static str| at(&move |c: &Value| c["scenario"] == s && c["point"] == point);
        let (prov, end) = (of("on_provisioned"), of("on_scenario_end"));
        assert_eq!((prov.len(), end.len()), (1, 1), "{s}");
        for i in of("on_run_start") {
            assert!(prov[0] < i, "{s}: a run started before on_provisioned");
        }
        for i in of("on_run_end") {
            assert!(i < end[0], "{s}: a run ended after on_scenario_end");
        }
    }
    let pack_end = at(&|c: &Value| c["point"] == "on_pack_end");
    assert_eq!(pack_end, [calls.len() - 1], "on_pack_end is last");

    // Turn hooks nest per turn: turn_a begins before turn_b, finishes after it.
    let lines: Vec<String> = std::fs::read_to_string(&turnlog)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    let mut per_turn: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for l in &lines {
        let f: Vec<&str> = l.split(' ').collect();
        per_turn
            .entry((f[2].to_owned(), f[3].to_owned()))
            .or_default()
            .push(format!("{} {}", f[0], f[1]));
    }
    assert_eq!(per_turn.len(), 6 * 2 + 6);
    for (turn, seq) in &per_turn {
        assert_eq!(
            seq,
            &[
                "turn_a begin",
                "turn_b begin",
                "turn_b finish",
                "turn_a finish"
            ],
            "{turn:?}"
        );
    }
}

#[test]
fn hooks_do_not_serialize_lanes() {
    let dir = tmp();
    let svc = service(Duration::from_millis(250));
    let agent = http_agent(dir.path(), &svc.server.base, "max_sessions = 4\n");
    // The reply never mentions a refund: every run fails, so debrief converses on each.
    let pack = write_pack(
        dir.path(),
        &[(
            "refund.toml",
            "id = \"refund\"\nruns = 4\nturns = [\"Refund order 1234.\"]\n[expect.outcome]\nreply_contains = [\"refund\"]\n",
        )],
    );
    let r = Wt::new(dir.path())
        .args(["run", "--jobs", "4", "--hook", "debrief", "--pack"])
        .arg(&pack)
        .arg("--agent")
        .arg(&agent)
        .run();
    assert_eq!(r.code, 1, "{r}");
    let debriefs = files(&dir.path().join("runs"))
        .keys()
        .filter(|n| n.ends_with(".debrief.json"))
        .count();
    assert_eq!(debriefs, 4);
    assert!(
        svc.converses.max() >= 2,
        "debrief's converse turns ran one at a time: {}",
        svc.converses.max()
    );
}

/// An OpenAI-compatible endpoint answering after `delay`, measuring requests in flight and
/// keeping their arrival times; `first` answers the very first request instead.
struct Stub {
    server: TestServer,
    gauge: Gauge,
    arrivals: Arc<Mutex<Vec<Instant>>>,
}

/// A canned HTTP answer: status, extra headers, body.
type Answer = (u16, Vec<(String, String)>, String);

fn stub(delay: Duration, first: Option<Answer>) -> Stub {
    let gauge = Gauge::default();
    let arrivals = Arc::new(Mutex::new(Vec::new()));
    let (g, a) = (gauge.clone(), arrivals.clone());
    let first = Mutex::new(first);
    let server = TestServer::start_with_headers(move |_| {
        a.lock().unwrap().push(Instant::now());
        if let Some(answer) = first.lock().unwrap().take() {
            return answer;
        }
        let _in = g.enter();
        std::thread::sleep(delay);
        let body = json!({"choices": [{"message": {"role": "assistant", "content": "ok"}}]});
        (200, vec![], body.to_string())
    });
    Stub {
        server,
        gauge,
        arrivals,
    }
}

fn openai_agent(dir: &Path, base: &str, extra: &str) -> PathBuf {
    let p = dir.join("openai.toml");
    std::fs::write(
        &p,
        format!(
            "label = \"m\"\nruntime = \"openai\"\nmodel = \"m\"\nendpoint = \"{base}/v1\"\nturn_timeout_s = 60\n{extra}"
        ),
    )
    .unwrap();
    p
}

fn run_openai(dir: &Path, out: &str, runs: u32, agent: &Path) -> (Run, PathBuf) {
    let pack = one_scenario(dir, runs);
    let r = Wt::new(dir)
        .args(["run", "--jobs", "6", "--out", out, "--pack"])
        .arg(&pack)
        .arg("--agent")
        .arg(agent)
        .run();
    (r, dir.join(out))
}

#[test]
fn endpoint_limits_hold_across_lanes() {
    let dir = tmp();
    // max_concurrency: never more in flight, across six lanes.
    let s = stub(Duration::from_millis(120), None);
    let agent = openai_agent(dir.path(), &s.server.base, "max_concurrency = 2\n");
    let (r, out) = run_openai(dir.path(), "conc", 12, &agent);
    assert_eq!(r.code, 0, "{r}");
    assert_eq!(s.gauge.max(), 2, "in flight at once");
    let waited = journal(&out)
        .iter()
        .filter(|e| e["event"] == "RequestWaited" && e["reason"] == "concurrency")
        .count();
    assert!(waited > 0, "waits are journaled");

    // requests_per_minute: evenly spaced, whatever the lanes.
    let s = stub(Duration::ZERO, None);
    let agent = openai_agent(dir.path(), &s.server.base, "requests_per_minute = 600\n");
    let started = Instant::now();
    let (r, out) = run_openai(dir.path(), "rate", 8, &agent);
    assert_eq!(r.code, 0, "{r}");
    let t = s.arrivals.lock().unwrap().clone();
    assert_eq!(t.len(), 8);
    // 600 a minute is one every 100 ms: the eighth request cannot leave `wt` before seven
    // gaps have passed since the first, so it cannot arrive before. (A bound from below: a
    // loaded machine only delays, where the spacing the server sees between two arrivals
    // can shrink when it is slow to read them.)
    let last = t.iter().max().unwrap().duration_since(started);
    assert!(
        last >= Duration::from_millis(700),
        "8 requests within {last:?}"
    );
    // And the spacing is the limiter's: requests waited their turn, as the journal says.
    let waited = journal(&out)
        .iter()
        .filter(|e| e["event"] == "RequestWaited" && e["reason"] == "rate")
        .count();
    assert!(waited > 0, "rate waits are journaled");

    // A 429 with Retry-After pauses the whole endpoint, not one lane.
    let s = stub(
        Duration::from_millis(20),
        Some((
            429,
            vec![("Retry-After".into(), "1".into())],
            "{\"error\":\"slow down\"}".into(),
        )),
    );
    let agent = openai_agent(dir.path(), &s.server.base, "");
    let (r, out) = run_openai(dir.path(), "paused", 6, &agent);
    assert_eq!(r.code, 0, "{r}");
    // Requests already in flight when the 429 came back are not paused; any sent after it
    // (the lanes' next runs) wait for the second.
    let t = s.arrivals.lock().unwrap().clone();
    let answered = t[0];
    let during = t[1..]
        .iter()
        .filter(|a| {
            let since = a.saturating_duration_since(answered);
            since > Duration::from_millis(100) && since < Duration::from_millis(900)
        })
        .count();
    assert_eq!(during, 0, "a lane sent while the endpoint was paused");
    assert!(t.len() > 6, "the 429 was retried");
    let paused = journal(&out)
        .iter()
        .filter(|e| e["event"] == "RequestWaited" && e["reason"] == "paused")
        .count();
    assert!(paused > 0);
}

#[test]
fn shards_together_run_exactly_the_unsharded_sweep() {
    let dir = tmp();
    let pinned = |out: &str, shard: Option<&str>| {
        let mut wt = Wt::new(dir.path())
            .args(["run", "--runs", "5", "--seed", "3", "--out", out])
            .env("WT_FIXED_CLOCK", CLOCK);
        if let Some(s) = shard {
            wt = wt.args(["--shard", s]);
        }
        wt.run()
    };
    let whole = pinned("whole", None);
    assert_eq!(whole.code, 0, "{whole}");
    let runs = |out: &str| -> BTreeMap<String, Vec<u8>> {
        files(&dir.path().join(out))
            .into_iter()
            .filter(|(n, _)| n.ends_with(".json"))
            .collect()
    };
    let mut union = BTreeMap::new();
    for k in 1..=3 {
        let out = format!("shard{k}");
        let r = pinned(&out, Some(&format!("{k}/3")));
        assert_eq!(r.code, 0, "{r}");
        let mine = runs(&out);
        // Each trace says its shard; apart from that line, it is the unsharded sweep's.
        let says = format!("  \"shard\": \"{k}/3\",\n");
        for (name, mut bytes) in mine {
            if !name.ends_with(".score.json") {
                let text = String::from_utf8(bytes).unwrap();
                assert_eq!(text.matches(&says).count(), 1, "{name}: {text}");
                bytes = text.replacen(&says, "", 1).into_bytes();
            }
            assert!(
                union.insert(name.clone(), bytes).is_none(),
                "{name} in two shards"
            );
        }
        // A shard provisions only the scenarios it has runs of.
        let j = journal(&dir.path().join(&out));
        let started: BTreeSet<&str> = j
            .iter()
            .filter(|e| e["event"] == "ScenarioStarted")
            .map(|e| e["scenario_id"].as_str().unwrap())
            .collect();
        let with_runs: BTreeSet<String> = traces(&dir.path().join(&out))
            .iter()
            .map(|t| t["scenario_id"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(
            started,
            with_runs
                .iter()
                .map(String::as_str)
                .collect::<BTreeSet<_>>()
        );
        assert_eq!(
            j[0]["shard"],
            format!("{k}/3"),
            "the journal says which shard"
        );
    }
    assert_eq!(
        union,
        runs("whole"),
        "the shards' runs are the sweep's, byte for byte"
    );
    let bad = Wt::new(dir.path()).args(["run", "--shard", "4/3"]).run();
    assert_eq!(bad.code, 2, "{bad}");
}

#[test]
fn jobs_default_to_the_runtime_and_follow_wt_jobs() {
    let dir = tmp();
    let sweep_started = |out: &str| journal(&dir.path().join(out))[0].clone();
    let r = Wt::new(dir.path()).args(["run", "--out", "demo"]).run();
    assert_eq!(r.code, 0, "{r}");
    let cpus = std::thread::available_parallelism().unwrap().get();
    assert_eq!(sweep_started("demo")["jobs"], cpus);
    let r = Wt::new(dir.path())
        .args(["run", "--out", "env"])
        .env("WT_JOBS", "3")
        .run();
    assert_eq!(r.code, 0, "{r}");
    assert_eq!(sweep_started("env")["jobs"], 3);
    let svc = service(Duration::ZERO);
    let agent = http_agent(dir.path(), &svc.server.base, "");
    let r = Wt::new(dir.path())
        .args(["run", "--out", "net", "--pack"])
        .arg(one_scenario(dir.path(), 1))
        .arg("--agent")
        .arg(&agent)
        .run();
    assert_eq!(r.code, 0, "{r}");
    assert_eq!(sweep_started("net")["jobs"], 16);
}

#[test]
fn a_billion_planned_runs_cost_no_memory_and_a_signal_stops_the_sweep_at_any_moment() {
    let dir = tmp();
    // Runs start at once: memory stays what a ten-run sweep needs, and SIGTERM is honoured.
    let out = dir.path().join("all");
    let wt = Wt::new(dir.path())
        .args(["run", "--runs", "1000000000", "--out"])
        .arg(&out)
        .start();
    wait_for_journal_event(&out, "RunEnded");
    let peak: u64 = process_tree(wt.pid())
        .iter()
        .map(|p| status_kib(*p, "VmHWM"))
        .max()
        .unwrap();
    assert!(
        peak < 256 * 1024,
        "peak RSS {peak} KiB with 10^9 runs planned"
    );
    wt.signal("TERM");
    let r = wt.finish_within(PATIENCE);
    assert_eq!(r.code, 130, "{r}");
    assert!(r.stderr.contains("3000000000 run(s)"), "{r}");
    assert_eq!(events(&journal(&out), "SweepEnded").len(), 1);

    // A shard of a billion runs is counted without holding them; a signal while it is still
    // counting stops `wt` there, with nothing run.
    let out = dir.path().join("shard");
    let wt = Wt::new(dir.path())
        .args(["run", "--runs", "1000000000", "--shard", "1/2", "--out"])
        .arg(&out)
        .start();
    // The sweep's own process is up and planning.
    wait_for("the sweep's process", PATIENCE, || {
        process_tree(wt.pid()).len() > 1
    });
    std::thread::sleep(Duration::from_millis(300));
    let peak: u64 = process_tree(wt.pid())
        .iter()
        .map(|p| status_kib(*p, "VmHWM"))
        .max()
        .unwrap();
    assert!(peak < 256 * 1024, "peak RSS {peak} KiB while planning");
    let sent = Instant::now();
    wt.signal("TERM");
    let r = wt.finish_within(PATIENCE);
    assert_eq!(r.code, 130, "{r}");
    assert!(
        sent.elapsed() < Duration::from_secs(20),
        "the stop took {:?}",
        sent.elapsed()
    );
    assert!(trace_paths(&out).is_empty(), "{r}");
}
