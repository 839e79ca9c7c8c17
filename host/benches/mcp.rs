//! Tool-call cost: the same `lookup_order` call executed by the built-in loop
//! (`TurnCtx::call_tool`, in process) and over MCP on loopback (a client on another thread
//! posting JSON-RPC to a real lane; the call crosses HTTP, rmcp, the hand-off to the turn's
//! thread and back). Prints p50 and p99 per call; asserts nothing.
//!
//! Run with `bash bench/mcp.sh`, which also measures the official Python SDK client and the
//! process start cost per run.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use windtunnel::interrupt::Interrupt;
use windtunnel::runtime::TurnCtx;
use windtunnel::runtime::mcp::{self, Inbox, Lane, ToolSet};
use windtunnel::world::World;
use windtunnel_model::{ToolEffect, ToolSpec};

fn percentiles(mut ns: Vec<u128>) -> (f64, f64) {
    ns.sort_unstable();
    let at = |q: f64| ns[((ns.len() as f64 - 1.0) * q).round() as usize] as f64 / 1000.0;
    (at(0.50), at(0.99))
}

fn spec() -> Vec<ToolSpec> {
    let mut spec = ToolSpec::new(
        "lookup_order",
        ToolEffect::Read {
            path: "orders".into(),
            key_arg: Some("order_id".into()),
        },
    );
    spec.description = "Look up an order.".into();
    spec.parameters = json!({"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]});
    vec![spec]
}

fn world() -> World {
    World::new(Some(
        &json!({"orders": {"1234": {"status": "shipped", "item": "kettle"}}}),
    ))
}

fn main() {
    let calls: usize = std::env::var("CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    let stop = Interrupt::default();

    // Built-in loop.
    let tools = spec();
    let mut w = world();
    let mut ctx = TurnCtx {
        index: 0,
        world: &mut w,
        timeout: Duration::from_secs(30),
        stop: &stop,
    };
    let mut builtin = Vec::with_capacity(calls * 10);
    for i in 0..calls * 10 {
        let t = Instant::now();
        let c = ctx.call_tool(
            &tools,
            i as u32,
            "lookup_order",
            json!({"order_id": "1234"}),
        );
        builtin.push(t.elapsed().as_nanos());
        std::hint::black_box(c);
    }
    let (b50, b99) = percentiles(builtin);

    // Over MCP, from a raw JSON-RPC client on loopback.
    let set = ToolSet::new(&spec()).unwrap();
    let lane = Lane::open(0, None).unwrap();
    let run = lane.start_run(Some(set.clone())).unwrap();
    let url = run.url().to_owned();
    let (tx, rx) = mpsc::channel::<Inbox<Vec<u128>>>();
    run.open_turn(tx.clone());
    let mut w = world();
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
        for i in 0..calls + 100 {
            let t = Instant::now();
            let text = post(
                json!({"jsonrpc": "2.0", "id": i + 1, "method": "tools/call",
                "params": {"name": "lookup_order", "arguments": {"order_id": "1234"}}}),
                Some(&session),
            )
            .text()
            .unwrap();
            assert!(text.contains("shipped"), "{text}");
            if i >= 100 {
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
    let (m50, m99) = percentiles(times);
    println!(
        "tool call, built-in loop (TurnCtx::call_tool):   p50 {b50:8.1} µs   p99 {b99:8.1} µs"
    );
    println!(
        "tool call over MCP, raw JSON-RPC client (Rust):  p50 {m50:8.1} µs   p99 {m99:8.1} µs"
    );
    println!(
        "MCP overhead per call (p50):                     {:8.1} µs",
        m50 - b50
    );
}
