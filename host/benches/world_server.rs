//! World-server cost, on the reference memory server (`mcp-server-memory` on `PATH`, or
//! `WT_MEMORY_SERVER`):
//!
//! 1. One `open_nodes` call made directly on the server's stdio (wt's own client, nothing in
//!    between) against the same call as an agent makes it through wt: a raw JSON-RPC client
//!    posting to a real lane, the hand-off to the turn's thread, the schema check, the record,
//!    and the forward to the server. p50 and p99 per call, and the difference.
//! 2. What a run's fresh state costs: a fresh server per run (scratch directory, start,
//!    handshake, setup, state) against a lane's kept server (reset, setup, state).
//!
//! Run with `bash bench/world_server.sh`, which installs the server and adds the in-sweep
//! figures. Asserts nothing.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use windtunnel::interrupt::Interrupt;
use windtunnel::runtime::TurnCtx;
use windtunnel::runtime::mcp::{self, Inbox, Lane, ToolSet};
use windtunnel::world::World;
use windtunnel::world::server::{self, Server};
use windtunnel_model::{ServerCall, WorldServer};

fn percentiles(mut ns: Vec<u128>) -> (f64, f64) {
    ns.sort_unstable();
    let at = |q: f64| ns[((ns.len() as f64 - 1.0) * q).round() as usize] as f64 / 1000.0;
    (at(0.50), at(0.99))
}

fn call(tool: &str, arguments: Value) -> ServerCall {
    let mut c = ServerCall::default();
    c.tool = tool.into();
    c.arguments = arguments;
    c
}

fn spec() -> WorldServer {
    let mut s = WorldServer::default();
    s.name = "memory".into();
    s.command = Some(vec![
        std::env::var("WT_MEMORY_SERVER").unwrap_or_else(|_| "mcp-server-memory".into()),
    ]);
    s.env
        .insert("MEMORY_FILE_PATH".into(), "{run_dir}/memory.jsonl".into());
    s.state = Some(call("read_graph", json!({})));
    s.setup = vec![call(
        "create_entities",
        json!({"entities": [{"name": "order-1234", "entityType": "order", "observations": ["status: shipped"]}]}),
    )];
    s.reset = vec![call(
        "delete_entities",
        json!({"entityNames": ["order-1234"]}),
    )];
    s
}

fn main() {
    let calls: usize = std::env::var("CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let starts: usize = std::env::var("STARTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let spec = spec();
    let never = windtunnel::interrupt::Interrupt::new();
    let args = json!({"names": ["order-1234"]});

    // 1a. Direct: wt's stdio client on the server, nothing in between.
    let dir = server::scratch(&spec).unwrap();
    let mut direct = Server::start(&spec, dir.path(), &never).unwrap();
    for c in &spec.setup {
        direct.call_own("setup", c).unwrap();
    }
    let mut times = Vec::with_capacity(calls);
    for i in 0..calls + 50 {
        let t = Instant::now();
        let r = direct.call("open_nodes", &args).unwrap();
        if i >= 50 {
            times.push(t.elapsed().as_nanos());
        }
        std::hint::black_box(r);
    }
    let (d50, d99) = percentiles(times);
    let listed = direct.list_tools().unwrap();
    let _ = direct.stop();

    // 1b. Through wt: an MCP client on a lane, the turn's thread, the forward.
    let tools = server::specs_from(&spec, &listed).unwrap();
    let set = ToolSet::new(&tools).unwrap();
    let lane = Lane::open(0, None).unwrap();
    let run = lane.start_run(Some(set.clone())).unwrap();
    let url = run.url().to_owned();
    let dir = server::scratch(&spec).unwrap();
    let mut forwarded = Server::start(&spec, dir.path(), &never).unwrap();
    for c in &spec.setup {
        forwarded.call_own("setup", c).unwrap();
    }
    let mut w = World::new(None);
    w.attach(forwarded, spec.state.clone());
    let stop = Interrupt::default();
    let (tx, rx) = mpsc::channel::<Inbox<Vec<u128>>>();
    run.open_turn(tx.clone());
    let mut ctx = TurnCtx {
        index: 0,
        world: &mut w,
        timeout: Duration::from_secs(30),
        stop: &stop,
    };
    let client = std::thread::spawn(move || {
        let http = reqwest::blocking::Client::new();
        let post = |body: Value, session: Option<&str>| {
            let mut r = http
                .post(&url)
                .header("content-type", "application/json")
                .header("accept", "application/json, text/event-stream")
                .body(body.to_string());
            if let Some(s) = session {
                r = r
                    .header("mcp-session-id", s)
                    .header("mcp-protocol-version", "2025-03-26");
            }
            r.send().unwrap()
        };
        let init = post(
            json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}}),
            None,
        );
        let session = init.headers()["mcp-session-id"]
            .to_str()
            .unwrap()
            .to_owned();
        let _ = init.text();
        let _ = post(
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            Some(&session),
        )
        .text();
        let mut times = Vec::with_capacity(calls);
        for i in 0..calls + 50 {
            let t = Instant::now();
            let text = post(
                json!({"jsonrpc": "2.0", "id": i + 1, "method": "tools/call",
                "params": {"name": "open_nodes", "arguments": {"names": ["order-1234"]}}}),
                Some(&session),
            )
            .text()
            .unwrap();
            assert!(text.contains("shipped"), "{text}");
            if i >= 50 {
                times.push(t.elapsed().as_nanos());
            }
        }
        let _ = tx.send(Inbox::Agent(times));
    });
    let mut step = 0;
    let times = loop {
        match rx.recv().unwrap() {
            Inbox::Tool(req) => {
                std::hint::black_box(mcp::execute(&mut ctx, &set, step, req));
                step += 1;
            }
            Inbox::Agent(times) => break times,
            Inbox::Model(_) => unreachable!("no model gateway here"),
        }
    };
    client.join().unwrap();
    let (f50, f99) = percentiles(times);
    println!(
        "open_nodes, direct on the server's stdio:        p50 {d50:8.1} µs   p99 {d99:8.1} µs"
    );
    println!(
        "open_nodes, an agent's MCP call through wt:      p50 {f50:8.1} µs   p99 {f99:8.1} µs"
    );
    println!(
        "forwarding overhead per call:                    p50 {:8.1} µs   p99 {:8.1} µs",
        f50 - d50,
        f99 - d99
    );

    // 2. A run's fresh state.
    let mut fresh = Vec::with_capacity(starts);
    for _ in 0..starts {
        let t = Instant::now();
        let dir = server::scratch(&spec).unwrap();
        let mut w = World::new(None);
        w.attach(
            Server::start(&spec, dir.path(), &never).unwrap(),
            spec.state.clone(),
        );
        for c in &spec.setup {
            w.server_mut().unwrap().call_own("setup", c).unwrap();
        }
        w.refresh().unwrap();
        let _ = w.detach().unwrap().stop();
        fresh.push(t.elapsed().as_nanos());
    }
    let dir = server::scratch(&spec).unwrap();
    let mut w = World::new(None);
    w.attach(
        Server::start(&spec, dir.path(), &never).unwrap(),
        spec.state.clone(),
    );
    for c in &spec.setup {
        w.server_mut().unwrap().call_own("setup", c).unwrap();
    }
    let mut kept = Vec::with_capacity(starts);
    for _ in 0..starts {
        let t = Instant::now();
        let s = w.server_mut().unwrap();
        for c in &spec.reset {
            s.call_own("reset", c).unwrap();
        }
        for c in &spec.setup {
            s.call_own("setup", c).unwrap();
        }
        w.refresh().unwrap();
        kept.push(t.elapsed().as_nanos());
    }
    let (s50, s99) = percentiles(fresh);
    let (k50, k99) = percentiles(kept);
    println!(
        "a run's fresh state, new server per run:         p50 {:8.1} ms   p99 {:8.1} ms",
        s50 / 1000.0,
        s99 / 1000.0
    );
    println!(
        "a run's fresh state, lane's server + reset:      p50 {:8.1} ms   p99 {:8.1} ms",
        k50 / 1000.0,
        k99 / 1000.0
    );
}
