//! Isolation cost: a plugin hook in its own process (`--isolate-hooks`) against the same
//! hook in `wt`'s process, same machine, same run. Per hook: the child's start (spawn, vet,
//! dlopen, instantiate, ready), and one dispatch's latency (p50, p90) with a small context
//! (no member read) and with a full one (the hook reads a real trace and score). Plus the
//! floor under it all: one round trip over a pipe pair to another process.
//!
//! Run with `bash bench/isolation.sh` (builds `wt` and the plugin in release). Prints figures
//! and ratios; asserts nothing.

use std::{
    hint::black_box,
    io::{Read, Write},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::Arc,
    time::Instant,
};

use windtunnel::{
    deadlines::Deadlines,
    hooks::dispatch::{CallData, Dispatcher},
    hooks::isolate::{Isolated, Isolation, SpawnOptions},
    hooks::plugin,
    hooks::registry::Registry,
};
use windtunnel_abi::point;
use windtunnel_model::{Score, Trace};

const SAMPLES: usize = 3000;

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p) as usize]
}

/// Latency of each of `SAMPLES` calls (after a warm-up), sorted, in µs.
fn latencies(mut f: impl FnMut()) -> Vec<f64> {
    for _ in 0..SAMPLES / 10 {
        f();
    }
    let mut v: Vec<f64> = (0..SAMPLES)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    v.sort_by(f64::total_cmp);
    v
}

/// A real trace and score: one run of the demo pack by the `wt` under test.
fn real_run(wt: &Path) -> (Trace, Score, usize, usize) {
    let dir = tempfile::tempdir().expect("temp dir");
    let status = Command::new(wt)
        .args([
            "run",
            "--runs",
            "1",
            "--jobs",
            "1",
            "--filter",
            "escalate-human",
        ])
        .args(["--agent", "demo-forbidden-tool", "--out"])
        .arg(dir.path())
        .stderr(Stdio::null())
        .status()
        .expect("run wt");
    assert!(status.code().is_some(), "wt died");
    let mut trace = None;
    let mut score = None;
    for e in std::fs::read_dir(dir.path()).expect("read runs") {
        let p = e.expect("entry").path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(&p).unwrap_or_default();
        if name.ends_with(".score.json") {
            score = Some(text);
        } else if name.ends_with(".json") && !name.trim_end_matches(".json").contains('.') {
            trace = Some(text);
        }
    }
    let (trace, score) = (trace.expect("a trace"), score.expect("a score"));
    (
        serde_json::from_str(&trace).expect("trace parses"),
        serde_json::from_str(&score).expect("score parses"),
        trace.len(),
        score.len(),
    )
}

/// One round trip of 5 bytes over a pipe pair to a `cat` process: the OS floor of any
/// cross-process call.
fn pipe_round_trip() -> Vec<f64> {
    let mut cat = Command::new("cat")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("cat");
    let mut to = cat.stdin.take().unwrap();
    let mut from = cat.stdout.take().unwrap();
    let mut buf = [0u8; 5];
    let v = latencies(|| {
        to.write_all(b"ping!").unwrap();
        from.read_exact(&mut buf).unwrap();
    });
    drop(to);
    let _ = cat.wait();
    v
}

fn main() {
    let dir = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("target/release"));
    let lib = dir.join("libwt_test_noop8.so");
    let wt = dir.join("wt");
    assert!(
        lib.exists() && wt.exists(),
        "build them first: cargo build --release -p windtunnel -p wt_test_noop8"
    );
    let spawn = SpawnOptions {
        program: wt.clone(),
        ..SpawnOptions::default()
    };
    let deadlines = Deadlines::from_env().expect("deadlines");

    // Start: in-process = vet + dlopen + instantiate (a fresh copy each time, so each is a
    // real dlopen); isolated = spawn + the same in the child + ready.
    let copies = tempfile::tempdir().expect("temp dir");
    let mut load = Vec::new();
    let mut start = Vec::new();
    for i in 0..30 {
        let copy = copies.path().join(format!("libcopy{i}.so"));
        std::fs::copy(&lib, &copy).expect("copy plugin");
        let t = Instant::now();
        let inspected = plugin::inspect(&copy, &mut Default::default()).expect("vetted");
        let loaded = plugin::load(&inspected).expect("loads");
        black_box(loaded.new_hook("noop0").expect("builds"));
        load.push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        let child = Isolated::spawn(&spawn, &lib, "noop0", 0).expect("child starts");
        start.push(t.elapsed().as_secs_f64() * 1e3);
        drop(child);
    }
    load.sort_by(f64::total_cmp);
    start.sort_by(f64::total_cmp);

    let (trace, score, trace_len, score_len) = real_run(&wt);
    let (trace, score) = (Arc::new(trace), Arc::new(score));
    let full = || CallData {
        trace: Some(trace.clone()),
        score: Some(score.clone()),
        ..CallData::default()
    };
    let registry = Registry::from_files(std::slice::from_ref(&lib), false);
    let names = ["noop0".to_owned(), "reader".to_owned()];
    let isolation = Isolation {
        all: true,
        hooks: Vec::new(),
        spawn,
    };
    let mut rows = Vec::new();
    for (label, hook, data) in [
        ("small context (no member read)", 0, false),
        ("full context (reads trace + score)", 1, true),
    ] {
        let name = std::slice::from_ref(&names[hook]);
        let in_process = Dispatcher::new(registry.activate(name).expect("activates"), deadlines);
        let isolated = Dispatcher::new(
            registry
                .activate_with(name, &isolation)
                .expect("activates isolated"),
            deadlines,
        );
        // As a sweep's lane calls a run point: on its worker, deadline watched.
        let run = |d: &Dispatcher| {
            latencies(|| {
                let data = if data { full() } else { CallData::default() };
                black_box(d.dispatch(point::ON_RUN_END, data, None));
            })
        };
        let a = run(&in_process);
        // Without a spare core both sides sleep between frames; with one (a sweep whose
        // lanes leave a core idle) they poll briefly first.
        windtunnel::hooks::dispatch::set_spare_core(false);
        let b = run(&isolated);
        windtunnel::hooks::dispatch::set_spare_core(true);
        let c = run(&isolated);
        windtunnel::hooks::dispatch::set_spare_core(false);
        rows.push((label, a, b, c));
    }
    let rtt = pipe_round_trip();
    // Diagnostic: the isolated call made directly on this thread (no dispatcher hand-off).
    struct Nothing;
    impl windtunnel::hooks::registry::HostServices for Nothing {
        fn member(&self, _: &str) -> Option<String> {
            None
        }
        fn call(&self, _: &str, _: &str) -> Result<String, String> {
            Ok(String::new())
        }
    }
    let direct_hook = registry
        .activate_with(std::slice::from_ref(&names[0]), &isolation)
        .expect("activates isolated");
    let direct = latencies(|| {
        black_box(direct_hook[0].call(point::ON_RUN_END, &Nothing).ok());
    });

    println!("isolation cost, one hook, {SAMPLES} dispatches per row (p50 / p90):");
    println!(
        "start         in-process vet+dlopen+build {:>8.3} ms | isolated spawn..ready {:>8.3} ms  ({:.1}x; goal <= 5 ms)",
        percentile(&load, 0.5),
        percentile(&start, 0.5),
        percentile(&start, 0.5) / percentile(&load, 0.5)
    );
    for (label, a, b, c) in &rows {
        println!(
            "dispatch, {label:<36} in-process {:>7.1} / {:>7.1} µs | isolated {:>7.1} / {:>7.1} µs; with a spare core {:>7.1} / {:>7.1} µs  (goal <= 100 µs p50)",
            percentile(a, 0.5),
            percentile(a, 0.9),
            percentile(b, 0.5),
            percentile(b, 0.9),
            percentile(c, 0.5),
            percentile(c, 0.9),
        );
    }
    let (_, small_a, small_b, small_c) = &rows[0];
    let (_, full_a, full_b, full_c) = &rows[1];
    let p50 = |v: &Vec<f64>| percentile(v, 0.5);
    println!("where the time goes (p50):");
    println!(
        "  floor: one 5-byte round trip over a pipe pair to another process: {:>7.1} µs",
        percentile(&rtt, 0.5)
    );
    println!(
        "  the isolated small call made directly, without the dispatcher: {:>7.1} µs",
        percentile(&direct, 0.5)
    );
    println!(
        "  isolation on a small call (call + return frames, two process wake-ups): {:>7.1} µs; with a spare core (no sleep) {:>7.1} µs",
        p50(small_b) - p50(small_a),
        p50(small_c) - p50(small_a)
    );
    println!(
        "  reading trace ({trace_len} B) + score ({score_len} B): in-process {:>7.1} µs (serialize), isolated {:>7.1} µs (serialize + copies; both sent ahead with the call); with a spare core {:>7.1} µs",
        p50(full_a) - p50(small_a),
        p50(full_b) - p50(small_b),
        p50(full_c) - p50(small_c)
    );
}
