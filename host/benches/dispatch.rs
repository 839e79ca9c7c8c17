//! Dispatch cost: one lifecycle point to 8 active no-op plugin hooks (loaded from a real
//! `.so`, deadlines enforced), with an empty context and with the real one (the trace, score,
//! scenario and agent snapshots the observer builds for `on_run_end`), against pluggy
//! dispatching one hook to 8 no-op Python implementations on the same machine in the same
//! run; plus the cost of a point no hook declared, and the time to vet and load one plugin.
//!
//! Every point goes to the lane's dispatch worker (`Dispatcher::dispatch`), which makes the
//! calls while the dispatching thread watches their deadlines. These are back-to-back calls,
//! a diagnostic: `bench/dispatch.sh` also prints the in-sweep cost (bench/hook_sweep.py).
//!
//! Run with `bash bench/dispatch.sh` (builds the plugin, installs pluggy if needed).
//! Prints medians of several batches and the ratio; asserts nothing.

use std::{
    hint::black_box,
    path::{Path, PathBuf},
    process::Command,
    time::Instant,
};

use windtunnel::{
    deadlines::Deadlines,
    hooks::dispatch::{CallData, Dispatcher},
    hooks::plugin,
    hooks::registry::Registry,
};
use windtunnel_abi::point;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn ns_per_call(batches: usize, n: usize, f: impl FnMut()) -> f64 {
    spread(batches, n, f).1
}

/// The fastest, median and slowest of `batches` batches of `n` calls, in ns per call.
fn spread(batches: usize, n: usize, mut f: impl FnMut()) -> (f64, f64, f64) {
    for _ in 0..n / 10 {
        f();
    }
    let mut samples: Vec<f64> = (0..batches)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..n {
                f();
            }
            t.elapsed().as_nanos() as f64 / n as f64
        })
        .collect();
    samples.sort_by(f64::total_cmp);
    (
        samples[0],
        median(samples.clone()),
        samples[samples.len() - 1],
    )
}

fn load_ms(lib: &Path) -> f64 {
    let dir = tempfile::tempdir().expect("temp dir");
    let samples = (0..15)
        .map(|i| {
            // A distinct inode each time, so every load is a real dlopen.
            let copy = dir.path().join(format!("libcopy{i}.so"));
            std::fs::copy(lib, &copy).expect("copy plugin");
            let t = Instant::now();
            let mut seen = Default::default();
            let inspected = plugin::inspect(&copy, &mut seen).expect("plugin passes vetting");
            let loaded = plugin::load(&inspected).expect("plugin loads");
            black_box(loaded.new_hook("noop0").expect("hook builds"));
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    median(samples)
}

/// A scenario of the demo pack, and the trace and score of one run of it on the demo agent.
fn real_run() -> (
    windtunnel_model::Scenario,
    windtunnel_model::Trace,
    windtunnel_model::Score,
) {
    use windtunnel::runner::{RunConfig, Sweep, run_sweep};
    let dir = tempfile::tempdir().expect("temp dir");
    let pack = windtunnel::pack::Pack::demo();
    let scenario = pack.scenarios[0].clone();
    let cfg = RunConfig::new(
        windtunnel::runtime::builtin_agent("demo").expect("demo agent"),
        dir.path(),
    );
    let sweep = Sweep::new(&cfg);
    run_sweep(std::slice::from_ref(&scenario), &cfg, &sweep).expect("one run");
    let (trace, score, _) = windtunnel::report::load_runs(&[dir.path()])
        .expect("runs load")
        .into_iter()
        .next()
        .expect("a run");
    (scenario, trace, score.expect("a score"))
}

fn main() {
    let dir = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("target/release"));
    let lib = dir.join("libwt_test_noop8.so");
    assert!(
        lib.exists(),
        "build it first: cargo build --release -p wt_test_noop8"
    );

    let registry = Registry::from_files(std::slice::from_ref(&lib), false);
    let names: Vec<String> = (0..8).map(|i| format!("noop{i}")).collect();
    let hooks = registry.activate(&names).expect("noop hooks activate");
    let dispatcher = Dispatcher::new(hooks, Deadlines::from_env().expect("deadlines"));

    let (fastest, eight, slowest) = spread(9, 200_000, || {
        let out = dispatcher.dispatch(point::ON_RUN_END, CallData::default(), None);
        black_box(out);
    });
    // The context the observer hands `on_run_end`: a real run's snapshots, shared as the
    // observer shares them (the scenario and agent built once per sweep, the trace and score
    // lent by the runner), and the run's artifact-name registry.
    let (scenario, trace, score) = real_run();
    let agent = windtunnel::runtime::builtin_agent("demo")
        .expect("demo agent")
        .to_sdk();
    let (scenario, agent) = (std::sync::Arc::new(scenario), std::sync::Arc::new(agent));
    let (trace, score) = (std::sync::Arc::new(trace), std::sync::Arc::new(score));
    let full = ns_per_call(7, 100_000, || {
        let data = CallData {
            scenario: Some(scenario.clone()),
            agent: Some(agent.clone()),
            run_id: Some(std::sync::Arc::from(trace.run_id.as_str())),
            session_id: Some(std::sync::Arc::from(trace.session_id.as_str())),
            trace: Some(trace.clone()),
            score: Some(score.clone()),
            artifact_names: Some(Default::default()),
            ..CallData::default()
        };
        let out = dispatcher.dispatch(point::ON_RUN_END, data, None);
        black_box(out);
    });
    let none = ns_per_call(7, 2_000_000, || {
        let out = dispatcher.dispatch(black_box(point::ON_PACK_END), CallData::default(), None);
        black_box(out);
    });
    let load = load_ms(&lib);

    // Diagnostic: the same 8 calls made inline on this thread (no hand-off, no deadline).
    struct Nothing;
    impl windtunnel::hooks::registry::HostServices for Nothing {
        fn member(&self, _: &str) -> Option<String> {
            None
        }
        fn call(&self, _: &str, _: &str) -> Result<String, String> {
            Ok(String::new())
        }
    }
    let inline_hooks = registry.activate(&names).expect("noop hooks activate");
    let inline = ns_per_call(7, 200_000, || {
        for h in &inline_hooks {
            black_box(h.call(point::ON_RUN_END, &Nothing).ok());
        }
    });

    println!(
        "wt   dispatch, 8 no-op plugin hooks, deadlines on: {eight:>9.1} ns (on the lane's worker)"
    );
    println!(
        "     batches of 200,000: fastest {fastest:.1} ns, slowest {slowest:.1} ns ({:+.0} % / {:+.0} % of the median)",
        (fastest / eight - 1.0) * 100.0,
        (slowest / eight - 1.0) * 100.0
    );
    println!("wt   the same with the real context (snapshots):   {full:>9.1} ns");
    println!("wt   dispatch, point with no active hook:          {none:>9.1} ns");
    println!("     (diagnostic: the 8 calls bare, no hand-off:    {inline:>9.1} ns)");
    println!("wt   vet + dlopen + instantiate one plugin:        {load:>9.3} ms");

    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../bench/pluggy_dispatch.py");
    match Command::new("python3").arg(&script).arg("100000").output() {
        Ok(out) if out.status.success() => {
            let text = String::from_utf8_lossy(&out.stdout);
            let pluggy: f64 = text.trim().parse().expect("pluggy prints ns");
            println!("pluggy dispatch, 8 no-op implementations:          {pluggy:>9.1} ns");
            println!(
                "ratio pluggy / wt: {:.1}x (back to back, a diagnostic: a sweep pays each point among its other work, see the in-sweep figures)",
                pluggy / eight
            );
        }
        Ok(out) => println!(
            "pluggy benchmark failed (pip install pluggy): {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ),
        Err(e) => println!("python3 not available for the pluggy comparison: {e}"),
    }
}
