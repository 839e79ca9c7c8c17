//! Agent endpoints that fail, pause or answer late: retries with Retry-After, early closes,
//! outcomes from typed errors, endpoint-wide pauses shared by lanes.

use serde_json::{Value, json};
use std::time::{Duration, Instant};

use crate::fixtures::*;
use crate::harness::*;

#[test]
fn retries_honour_retry_after_retry_early_closes_and_are_recorded() {
    let dir = tmp();
    let pack = plain_pack(dir.path());
    let base = scripted_server(vec![
        Some((
            429,
            "Retry-After: 1\r\n",
            "{\"error\":\"slow down\"}".into(),
        )),
        None,
        Some((200, "", chat_completion("Hello!"))),
    ]);
    let agent = openai_agent(dir.path(), "r", &base, "retries = 3\nturn_timeout_s = 30\n");
    let (r, out) = run_pack(dir.path(), "runs", &pack, &agent);
    assert_eq!(r.code, 0, "{r}");
    let t = &traces(&out)[0];
    let retries = t["turns"][0]["retries"].as_array().unwrap();
    assert_eq!(retries.len(), 2, "{t}");
    assert!(retries[0]["error"].as_str().unwrap().contains("HTTP 429"));
    assert!(
        retries[0]["wait_ms"].as_u64().unwrap() >= 1000,
        "Retry-After ignored: {t}"
    );
    assert!(
        retries[1]["error"]
            .as_str()
            .unwrap()
            .contains("connection closed before a response"),
        "{t}"
    );
    let j = journal(&out);
    let retried = events(&j, "RequestRetried");
    assert_eq!(retried.len(), 2);
    assert_eq!(retried[0]["attempt"], 1);
    assert!(retried[1]["seq"].as_u64() < events(&j, "TurnDone")[0]["seq"].as_u64());
}

#[test]
fn outcomes_come_from_typed_errors_not_from_how_long_a_turn_took() {
    let dir = tmp();
    let pack = plain_pack(dir.path());
    // A 503 that comes late in the turn: a failure (transport), never a timeout, however
    // late it came. The stub holds the answer until the test lets it go, three seconds into
    // the four-second deadline, so a loaded machine still has a second to read it.
    let (arrived_tx, arrived) = std::sync::mpsc::channel::<()>();
    let (release, released) = std::sync::mpsc::channel::<()>();
    let released = std::sync::Mutex::new(released);
    let busy = TestServer::start(move |_| {
        let _ = arrived_tx.send(());
        let _ = released
            .lock()
            .unwrap()
            .recv_timeout(Duration::from_secs(30));
        (503, "{\"error\":\"busy\"}".into())
    });
    let releaser = std::thread::spawn(move || {
        if arrived.recv_timeout(Duration::from_secs(120)).is_ok() {
            std::thread::sleep(Duration::from_secs(3));
            let _ = release.send(());
        }
    });
    let agent = openai_agent(
        dir.path(),
        "busy",
        &busy.base,
        "retries = 0\nturn_timeout_s = 4\n",
    );
    let (r, out) = run_pack(dir.path(), "busy", &pack, &agent);
    releaser.join().unwrap();
    assert_eq!(r.code, 3, "{r}");
    let t = &traces(&out)[0];
    assert_eq!(t["turns"][0]["error_kind"], "transport", "{t}");
    let j = journal(&out);
    assert_eq!(events(&j, "TurnFailed").len(), 1);
    assert!(events(&j, "TurnInterrupted").is_empty());
    // A server that never answers in time: interrupted by the deadline.
    let slow = TestServer::start(|_| {
        std::thread::sleep(Duration::from_secs(3));
        (200, chat_completion("late"))
    });
    let agent = openai_agent(dir.path(), "slow", &slow.base, "turn_timeout_s = 0.5\n");
    let (r, out) = run_pack(dir.path(), "slow", &pack, &agent);
    assert_eq!(r.code, 3, "{r}");
    assert_eq!(traces(&out)[0]["turns"][0]["error_kind"], "timeout");
    let j = journal(&out);
    let interrupted = events(&j, "TurnInterrupted");
    assert_eq!(interrupted.len(), 1);
    assert_eq!(interrupted[0]["error_kind"], "timeout");
}

#[test]
fn a_retry_after_past_the_deadline_pauses_the_endpoint_and_says_until_when() {
    let dir = tmp();
    let srv = TestServer::start_with_headers(|s| {
        if s.url == "/inject" {
            (
                429,
                vec![("Retry-After".into(), "120".into())],
                "{\"error\":\"slow down\"}".into(),
            )
        } else {
            (200, Vec::new(), "{}".into())
        }
    });
    let agent = agent_file(
        dir.path(),
        "a.toml",
        &format!(
            "label = \"busy\"\nruntime = \"http\"\nendpoint = \"{}\"\nmcp = false\nturn_timeout_s = 2\nretries = 0\n",
            srv.base
        ),
    );
    let pack = pack_of(dir.path(), 3);
    let out = dir.path().join("runs");
    let r = Wt::new(dir.path())
        .args(["run", "--out"])
        .arg(&out)
        .pack(&pack)
        .agent(&agent)
        .run();
    assert_eq!(r.code, 3, "{r}");
    // Nothing was sent during the pause: one health check, the first run's reset and
    // inject, then nothing.
    let urls: Vec<String> = srv.seen().iter().map(|s| s.url.clone()).collect();
    assert_eq!(urls, ["/health", "/reset", "/inject"], "{r}");
    let scores = scores(&out);
    assert_eq!(scores.len(), 3);
    let text = serde_json::to_string(&scores).unwrap();
    assert!(text.contains("HTTP 429"), "{text}");
    let paused = scores
        .iter()
        .filter(|s| {
            s["error"]
                .as_str()
                .is_some_and(|e| e.contains("not sent: the endpoint is paused until 20"))
        })
        .count();
    assert_eq!(
        paused, 2,
        "later runs must say the endpoint is paused, not that they timed out: {text}"
    );
    assert!(!text.contains("timed out"), "{text}");
}

#[test]
fn lanes_waiting_for_a_concurrency_slot_wait_out_a_pause_too() {
    let dir = tmp();
    let first = std::sync::atomic::AtomicBool::new(true);
    let times = std::sync::Arc::new(std::sync::Mutex::new(Vec::<(Instant, u16)>::new()));
    let log = times.clone();
    let srv = TestServer::start_with_headers(move |_| {
        // The first request is slow and then refused with a 2 s pause; every other one is
        // answered at once.
        if first.swap(false, std::sync::atomic::Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(300));
            log.lock().unwrap().push((Instant::now(), 429));
            return (
                429,
                vec![("Retry-After".into(), "2".into())],
                "{\"error\":\"slow down\"}".into(),
            );
        }
        log.lock().unwrap().push((Instant::now(), 200));
        (
            200,
            Vec::new(),
            json!({"choices": [{"message": {"role": "assistant", "content": "Hello!"}}]})
                .to_string(),
        )
    });
    let agent = agent_file(
        dir.path(),
        "a.toml",
        &format!(
            "label = \"capped\"\nruntime = \"openai\"\nmodel = \"m\"\nendpoint = \"{}/v1\"\nmax_concurrency = 1\nretries = 2\nturn_timeout_s = 30\n",
            srv.base
        ),
    );
    let pack = pack_of(dir.path(), 4);
    let out = dir.path().join("runs");
    let r = Wt::new(dir.path())
        .args(["run", "--jobs", "4", "--out"])
        .arg(&out)
        .pack(&pack)
        .agent(&agent)
        .run();
    assert_eq!(r.code, 0, "{r}");
    let times = times.lock().unwrap().clone();
    assert_eq!(times.len(), 5, "4 runs and one retry");
    let (refused, _) = times.iter().find(|(_, s)| *s == 429).unwrap();
    // Requests are seen when answered; each later one arrived after the pause ended (the
    // server answers at once, so answer time ≈ arrival time).
    for (at, status) in &times {
        if *status == 200 {
            let after = at.saturating_duration_since(*refused);
            assert!(
                after >= Duration::from_millis(1_900),
                "a request went out {after:?} into a 2 s pause: {times:?}"
            );
        }
    }
    let waits: Vec<Value> = journal(&out)
        .into_iter()
        .filter(|e| e["event"] == "RequestWaited" && e["reason"] == "paused")
        .collect();
    assert!(
        waits.iter().any(|w| w["wait_ms"].as_u64() >= Some(1_500)),
        "the lane that waited for the slot waited the pause out: {waits:?}"
    );
}
