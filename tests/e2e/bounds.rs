//! Everything from outside is bounded: response bodies, stored texts, artifacts, warnings.

use std::time::{Duration, Instant};

use crate::fixtures::*;
use crate::harness::*;

#[test]
fn response_bodies_stored_texts_artifacts_and_warnings_are_bounded() {
    let dir = tmp();
    let pack = plain_pack(dir.path());
    // An endless chunked body: stopped at the cap, not read into memory.
    let endless = openai_agent(
        dir.path(),
        "endless",
        &streaming_server(|| Box::new(Endless)),
        "turn_timeout_s = 60\n",
    );
    let started = Instant::now();
    let (r, out) = run_pack(dir.path(), "endless", &pack, &endless);
    assert_eq!(r.code, 3, "{r}");
    assert!(started.elapsed() < Duration::from_secs(30));
    let t = &traces(&out)[0];
    assert!(
        t["turns"][0]["error"]
            .as_str()
            .unwrap()
            .contains("reply exceeded 8388608 bytes"),
        "{t}"
    );
    assert_eq!(t["turns"][0]["error_kind"], "protocol");

    // A configured cap.
    let small = openai_agent(
        dir.path(),
        "small",
        &TestServer::start(|_| (200, chat_completion(&"x".repeat(4096)))).base,
        "max_response_bytes = 2048\n",
    );
    let (r, _) = run_pack(dir.path(), "small", &pack, &small);
    assert_eq!(r.code, 3, "{r}");
    assert!(r.stderr.contains("reply exceeded 2048 bytes"), "{r}");

    // A 1 MB reply under the cap is stored cut, with its length.
    let big = openai_agent(
        dir.path(),
        "big",
        &TestServer::start(|_| (200, chat_completion(&"y".repeat(1 << 20)))).base,
        "",
    );
    let (r, out) = run_pack(dir.path(), "big", &pack, &big);
    assert_eq!(r.code, 0, "{r}");
    let t = &traces(&out)[0];
    let reply = t["turns"][0]["reply"].as_str().unwrap();
    assert!(reply.len() < 300 * 1024, "{}", reply.len());
    assert!(
        reply.ends_with("…[cut by wt: 1048576 bytes in all]"),
        "{}",
        &reply[reply.len() - 60..]
    );

    // Hook warnings are cut; an artifact over the cap is refused with a warning.
    let plugins = plugin_dir(dir.path(), &["wt_test_hostile"]);
    let r = Wt::new(dir.path())
        .args([
            "run",
            "--out",
            "hooks",
            "--filter",
            "order-status",
            "--hook",
            "forger",
            "--plugin-dir",
        ])
        .arg(&plugins)
        .env("WT_FORGER_WARN_BYTES", "10000")
        .env("WT_FORGER_ARTIFACT_BYTES", "5000")
        .env("WT_HOOK_MAX_ARTIFACT_BYTES", "2048")
        .run();
    assert_eq!(r.code, 0, "{r}");
    let out = dir.path().join("hooks");
    let t = &traces(&out)[0];
    let warnings = worker_warnings(t);
    let long = warnings
        .iter()
        .find(|w| w.contains("wwww"))
        .expect("the long warning");
    assert!(long.len() < 4096 + 100, "{}", long.len());
    assert!(long.ends_with("…[cut by wt: 10000 bytes in all]"), "{long}");
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("artifact refused") && w.contains("more than the 2048 bytes")),
        "{warnings:?}"
    );
    assert!(
        !files(&out).keys().any(|n| n.ends_with(".forger.big.json")),
        "the oversized artifact was written"
    );
}
