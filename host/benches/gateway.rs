//! The model gateway's cost per model call: the same chat completion posted straight to a
//! local upstream and through a run's gateway (a real lane: hyper, the token check, the
//! forward on a blocking thread with the upstream's limits, the reply streamed back, the
//! record handed to the turn's thread). Non-streamed and streamed (server-sent events, five
//! chunks). One keep-alive client, blocks of calls alternated between the two paths.
//! Prints p50 and p99 per call and the gateway's overhead; asserts nothing.
//!
//! Run with `cargo bench -p windtunnel --bench gateway` (`CALLS=2000` by default).

use std::sync::{Arc, mpsc};
use std::time::Instant;

use windtunnel::runtime::agent::{Gateway, Process};
use windtunnel::runtime::gateway::Upstream;
use windtunnel::runtime::mcp::{Inbox, Lane};
use windtunnel::runtime::{Agent, Settings};

const COMPLETION: &str = r#"{"id":"c-1","model":"m","choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"Your order has shipped."}}],"usage":{"prompt_tokens":20,"completion_tokens":6}}"#;

fn stream_body() -> String {
    let mut body = String::new();
    for word in ["Your", " order", " has", " shipped", "."] {
        body.push_str(&format!(
            "data: {{\"id\":\"c-1\",\"model\":\"m\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{word}\"}}}}]}}\n\n"
        ));
    }
    body.push_str("data: {\"id\":\"c-1\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n");
    body
}

/// A local upstream answering every chat completion at once, on two threads.
fn upstream() -> String {
    let server = Arc::new(tiny_http::Server::http("127.0.0.1:0").unwrap());
    let port = server.server_addr().to_ip().unwrap().port();
    let stream = stream_body();
    for _ in 0..2 {
        let server = server.clone();
        let stream = stream.clone();
        std::thread::spawn(move || {
            for mut req in server.incoming_requests() {
                let mut body = String::new();
                let _ = req.as_reader().read_to_string(&mut body);
                let (text, ctype) = if body.contains("\"stream\":true") {
                    (stream.clone(), "text/event-stream")
                } else {
                    (COMPLETION.to_owned(), "application/json")
                };
                let resp = tiny_http::Response::from_string(text)
                    .with_header(tiny_http::Header::from_bytes("Content-Type", ctype).unwrap());
                let _ = req.respond(resp);
            }
        });
    }
    format!("http://127.0.0.1:{port}")
}

fn percentiles(mut us: Vec<f64>) -> (f64, f64) {
    us.sort_by(f64::total_cmp);
    let at = |q: f64| us[((us.len() as f64 - 1.0) * q).round() as usize];
    (at(0.50), at(0.99))
}

fn main() {
    let calls: usize = std::env::var("CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    let base = upstream();
    let gateway = Gateway {
        endpoint: format!("{base}/v1"),
        ..Gateway::default()
    };
    let process = Process {
        gateway: Some(gateway.clone()),
        ..Process::default()
    };
    let agent = Agent::new("bench", Settings::Process(process));
    let up = Arc::new(Upstream::new(&agent, &gateway).unwrap());
    let lane = Lane::open(0, Some(up)).unwrap();
    let run = lane.start_run(None).unwrap();
    // The turn's thread: takes each call's record, as a runtime's turn loop does.
    let (tx, rx) = mpsc::channel::<Inbox<()>>();
    run.open_turn(tx);
    let taker = std::thread::spawn(move || rx.iter().count());
    let via = format!("{}/chat/completions", run.model_url().unwrap());
    let direct = format!("{base}/v1/chat/completions");
    let client = reqwest::blocking::Client::new();
    let token = run.model_token().to_owned();
    for stream in [false, true] {
        let body = format!(
            r#"{{"model":"m","stream":{stream},"messages":[{{"role":"system","content":"You help customers."}},{{"role":"user","content":"Where is my order 1234?"}}]}}"#
        );
        let call = |url: &str| {
            let t = Instant::now();
            let text = client
                .post(url)
                .bearer_auth(&token)
                .header("content-type", "application/json")
                .body(body.clone())
                .send()
                .and_then(|r| r.text())
                .unwrap();
            std::hint::black_box(text);
            t.elapsed().as_secs_f64() * 1e6
        };
        // Warm both paths (connections, the blocking pool).
        for _ in 0..50 {
            call(&direct);
            call(&via);
        }
        let (mut a, mut b) = (Vec::new(), Vec::new());
        let block = 100;
        for _ in 0..calls.div_ceil(block) {
            a.extend((0..block).map(|_| call(&direct)));
            b.extend((0..block).map(|_| call(&via)));
        }
        let ((a50, a99), (b50, b99)) = (percentiles(a), percentiles(b));
        let kind = if stream { "streamed" } else { "plain" };
        println!(
            "{kind:>8}: direct p50 {a50:>7.1} µs p99 {a99:>7.1} µs | gateway p50 {b50:>7.1} µs p99 {b99:>7.1} µs | overhead p50 {:>6.1} µs ({:.2}x)",
            b50 - a50,
            b50 / a50
        );
    }
    run.close_turn();
    drop(run);
    let recorded = taker.join().unwrap();
    println!("model calls recorded: {recorded}");
}
