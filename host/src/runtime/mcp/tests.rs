//! The MCP door against raw JSON-RPC over real loopback HTTP: what is served, what is
//! refused, and that a bad client costs nothing to anyone else.

use std::io::{Read, Write};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use windtunnel_model::{ToolEffect, ToolSpec};

use super::*;
use crate::interrupt::Interrupt;
use crate::runtime::TurnCtx;
use crate::world::World;

fn spec(name: &str, description: &str, parameters: Value, effect: ToolEffect) -> ToolSpec {
    let mut spec = ToolSpec::new(name, effect);
    spec.description = description.into();
    spec.parameters = parameters;
    spec
}

fn tools() -> Arc<ToolSet> {
    ToolSet::new(&[
        spec(
            "lookup_order",
            "Look up an order.",
            json!({"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}),
            ToolEffect::Read {
                path: "orders".into(),
                key_arg: Some("order_id".into()),
            },
        ),
        spec(
            "add_note",
            "",
            json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
            ToolEffect::Append {
                path: "notes".into(),
                value_arg: Some("text".into()),
            },
        ),
    ])
    .unwrap()
}

fn world() -> World {
    World::new(Some(
        &json!({"orders": {"1234": {"status": "shipped"}}, "notes": []}),
    ))
}

/// A minimal MCP client over blocking HTTP (the legacy handshake, as most clients speak it).
struct Client {
    http: reqwest::blocking::Client,
    url: String,
    session: Option<String>,
    next_id: u64,
}

impl Client {
    fn new(url: &str) -> Client {
        Client {
            http: reqwest::blocking::Client::builder()
                .timeout(Duration::from_secs(10))
                .build()
                .unwrap(),
            url: url.to_owned(),
            session: None,
            next_id: 1,
        }
    }

    /// POSTs raw bytes; returns the status and the JSON-RPC message in the answer, if any.
    fn raw(&self, body: Vec<u8>) -> (u16, Option<Value>) {
        let mut req = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body);
        if let Some(s) = &self.session {
            req = req
                .header("mcp-session-id", s)
                .header("mcp-protocol-version", "2025-03-26");
        }
        let resp = req.send().unwrap();
        let status = resp.status().as_u16();
        let text = resp.text().unwrap_or_default();
        let message = serde_json::from_str::<Value>(&text).ok().or_else(|| {
            text.lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
                .find(|v| v.get("result").is_some() || v.get("error").is_some())
        });
        (status, message)
    }

    fn request(&mut self, method: &str, params: Value) -> (u16, Option<Value>) {
        let id = self.next_id;
        self.next_id += 1;
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.raw(body.to_string().into_bytes())
    }

    fn initialize(&mut self) {
        let body = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-03-26", "capabilities": {},
            "clientInfo": {"name": "wt-test", "version": "1"}}});
        let resp = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body.to_string())
            .send()
            .unwrap();
        assert_eq!(resp.status().as_u16(), 200, "initialize");
        self.session = resp
            .headers()
            .get("mcp-session-id")
            .map(|v| v.to_str().unwrap().to_owned());
        let _ = resp.text();
        let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let (status, _) = self.raw(note.to_string().into_bytes());
        assert!(status < 300, "initialized: {status}");
    }

    fn call(&mut self, name: &str, args: Value) -> (u16, Option<Value>) {
        self.request("tools/call", json!({"name": name, "arguments": args}))
    }
}

/// Runs a turn on this thread while `client` works on another: tool requests are executed
/// against `world` until the client is done. Returns the client's result and the calls.
fn turn<R: Send + 'static>(
    run: &McpRun,
    world: &mut World,
    client: impl FnOnce() -> R + Send,
) -> (R, Vec<windtunnel_model::ToolCall>) {
    let (tx, rx) = mpsc::channel::<Inbox<R>>();
    run.open_turn(tx.clone());
    let stop = Interrupt::default();
    let mut ctx = TurnCtx {
        index: 0,
        world,
        timeout: Duration::from_secs(10),
        stop: &stop,
    };
    let mut calls = Vec::new();
    let result = std::thread::scope(|s| {
        s.spawn(move || {
            let r = client();
            let _ = tx.send(Inbox::Agent(r));
        });
        loop {
            match rx
                .recv_timeout(Duration::from_secs(20))
                .expect("the client finishes")
            {
                Inbox::Tool(req) => {
                    let step = calls.len() as u32;
                    calls.push(execute(&mut ctx, run.tools(), step, req));
                }
                Inbox::Agent(r) => break r,
                Inbox::Model(_) => panic!("no model gateway here"),
            }
        }
    });
    run.close_turn();
    let _ = refuse_pending(&rx, "turn over");
    (result, calls)
}

#[test]
fn tools_are_listed_from_the_pack_and_calls_run_on_the_turns_world() {
    let lane = Lane::open(0, None).unwrap();
    let run = lane.start_run(Some(tools())).unwrap();
    let mut w = world();
    let url = run.url().to_owned();
    let ((list, ok, bad_args, unknown), calls) = turn(&run, &mut w, || {
        let mut c = Client::new(&url);
        c.initialize();
        let list = c.request("tools/list", json!({}));
        let ok = c.call("add_note", json!({"text": "hello"}));
        let bad_args = c.call("lookup_order", json!({"order_id": 1234}));
        let unknown = c.call("refund_everything", json!({}));
        (list, ok, bad_args, unknown)
    });
    let tools = list.1.unwrap()["result"]["tools"].clone();
    assert_eq!(tools[0]["name"], "lookup_order");
    assert_eq!(tools[0]["description"], "Look up an order.");
    assert_eq!(tools[0]["inputSchema"]["required"], json!(["order_id"]));
    assert_eq!(ok.1.unwrap()["result"]["content"][0]["text"], "1");
    // Off-schema arguments: a tool error the model can read, never run against the world.
    let bad = bad_args.1.unwrap();
    assert_eq!(bad["result"]["isError"], true, "{bad}");
    let text = bad["result"]["content"][0]["text"].as_str().unwrap();
    assert!(
        text.contains("do not match the schema of `lookup_order`"),
        "{text}"
    );
    let unknown = unknown.1.unwrap();
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");
    // Every call is evidence, in execution order, marked as coming through MCP.
    let shown: Vec<(&str, Option<&str>, Option<&str>)> = calls
        .iter()
        .map(|c| (c.name.as_str(), c.error.as_deref(), c.source.as_deref()))
        .collect();
    assert_eq!(shown.len(), 3, "{calls:?}");
    assert_eq!(
        (shown[0].0, shown[0].1, shown[0].2),
        ("add_note", None, Some("mcp"))
    );
    assert!(shown[1].1.unwrap().contains("do not match the schema"));
    assert_eq!(shown[2].1, Some("unknown tool `refund_everything`"));
    assert_eq!(calls.iter().map(|c| c.step).collect::<Vec<_>>(), [0, 1, 2]);
    assert_eq!(w.get("notes"), Some(&json!(["hello"])));
}

#[test]
fn calls_outside_a_turn_after_the_run_or_to_another_run_are_refused() {
    let lane = Lane::open(0, None).unwrap();
    let first = lane.start_run(Some(tools())).unwrap();
    let mut c = Client::new(first.url());
    c.initialize();
    // No turn in progress: not executed.
    let (_, m) = c.call("add_note", json!({"text": "between turns"}));
    assert_eq!(m.unwrap()["error"]["code"], -32001);
    let first_url = first.url().to_owned();
    let first_session = c.session.clone();
    let second = lane.start_run(Some(tools())).unwrap();
    drop(first);
    // The ended run's address is dead, even with its session. (Its connections were closed
    // with it, so this is a fresh one.)
    let mut c = Client {
        session: c.session.clone(),
        ..Client::new(&first_url)
    };
    let (status, m) = c.call("add_note", json!({"text": "late"}));
    assert_eq!(status, 404);
    assert_eq!(m.unwrap()["error"]["code"], -32001);
    // The live run does not know the old run's session.
    let mut cross = Client::new(second.url());
    cross.session = first_session;
    let (status, _) = cross.call("add_note", json!({"text": "crossing"}));
    assert!(status == 404 || status == 400, "{status}");
    assert_ne!(first_url, second.url());
    // A path that was never a run.
    let (status, _) = Client::new(&format!("http://{}/runs/0000/mcp", lane.inner.addr))
        .request("tools/list", json!({}));
    assert_eq!(status, 404);
}

#[test]
fn malformed_and_oversized_requests_are_refused_and_the_lane_keeps_serving() {
    let lane = Lane::open(0, None).unwrap();
    let run = lane.start_run(Some(tools())).unwrap();
    let mut c = Client::new(run.url());
    c.initialize();
    let (status, _) = c.raw(b"{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": ".to_vec());
    assert!((400..500).contains(&status), "malformed JSON: {status}");
    let (status, _) = c.raw(b"[1, 2, 3]".to_vec());
    assert!((400..500).contains(&status), "not JSON-RPC: {status}");
    let huge = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
        "params": {"name": "add_note", "arguments": {"text": "x".repeat(MAX_REQUEST_BYTES + 1)}}});
    let (status, _) = c.raw(huge.to_string().into_bytes());
    assert_eq!(status, 413);
    let mut w = world();
    let (r, calls) = turn(&run, &mut w, || {
        c.call("add_note", json!({"text": "still here"}))
    });
    assert_eq!(r.0, 200);
    assert_eq!(calls.len(), 1);
}

#[test]
fn a_client_that_never_finishes_blocks_nobody_and_is_cut_with_its_run() {
    let lane = Lane::open(0, None).unwrap();
    let other_lane = Lane::open(1, None).unwrap();
    let run = lane.start_run(Some(tools())).unwrap();
    let other = other_lane.start_run(Some(tools())).unwrap();
    // Half a request, never finished, on each lane.
    let mut stuck = Vec::new();
    for addr in [lane.inner.addr, other_lane.inner.addr] {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.write_all(b"POST /runs/").unwrap();
        stuck.push(s);
    }
    let mut body_stuck = std::net::TcpStream::connect(lane.inner.addr).unwrap();
    let path = run
        .url()
        .split_once(&lane.inner.addr.to_string())
        .unwrap()
        .1
        .to_owned();
    write!(
        body_stuck,
        "POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\naccept: application/json, text/event-stream\r\ncontent-length: 1000\r\n\r\n{{\"jsonrpc\""
    )
    .unwrap();
    // Both lanes serve others meanwhile.
    for r in [&run, &other] {
        let mut w = world();
        let url = r.url().to_owned();
        let (res, calls) = turn(r, &mut w, move || {
            let mut c = Client::new(&url);
            c.initialize();
            c.call("lookup_order", json!({"order_id": "1234"}))
        });
        assert_eq!(res.0, 200);
        assert_eq!(calls[0].result, json!({"status": "shipped"}));
    }
    // The run ends: its lane's connections are closed, the stuck ones included.
    drop(run);
    body_stuck
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let started = Instant::now();
    let mut buf = [0u8; 64];
    let closed = matches!(body_stuck.read(&mut buf), Ok(0) | Err(_));
    assert!(closed && started.elapsed() < Duration::from_secs(5));
    stuck[0]
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    assert!(matches!(stuck[0].read(&mut buf), Ok(0) | Err(_)));
}

#[test]
fn a_turn_that_ends_refuses_the_calls_it_did_not_run() {
    let lane = Lane::open(0, None).unwrap();
    let run = lane.start_run(Some(tools())).unwrap();
    let mut c = Client::new(run.url());
    c.initialize();
    let (tx, rx) = mpsc::channel::<Inbox<()>>();
    run.open_turn(tx);
    let url = run.url().to_owned();
    let session = c.session.clone();
    let waiter = std::thread::spawn(move || {
        let mut c = Client::new(&url);
        c.session = session;
        c.call("add_note", json!({"text": "too late"}))
    });
    // The call arrives; the turn ends without running it.
    let Inbox::Tool(req) = rx.recv_timeout(Duration::from_secs(10)).unwrap() else {
        panic!("expected a tool request")
    };
    run.close_turn();
    req.respond(ToolOutcome::Refused("refused: the turn ended".into()));
    let (_, m) = waiter.join().unwrap();
    let m = m.unwrap();
    assert_eq!(m["error"]["code"], -32001, "{m}");
}

#[test]
fn a_lane_closes_connections_beyond_its_cap_at_once() {
    let lane = Lane::open(0, None).unwrap();
    let run = lane.start_run(Some(tools())).unwrap();
    let mut idle = Vec::new();
    for _ in 0..MAX_CONNECTIONS_PER_LANE {
        idle.push(std::net::TcpStream::connect(lane.inner.addr).unwrap());
    }
    // Let the listener take them all.
    let deadline = Instant::now() + Duration::from_secs(10);
    while lock(&lane.inner.conns).len() < MAX_CONNECTIONS_PER_LANE && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut extra = std::net::TcpStream::connect(lane.inner.addr).unwrap();
    extra
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut buf = [0u8; 8];
    assert!(
        matches!(extra.read(&mut buf), Ok(0) | Err(_)),
        "over the cap: closed"
    );
    // Room again once some go away.
    drop(idle.drain(..4));
    let url = run.url().to_owned();
    let mut w = world();
    let deadline = Instant::now() + Duration::from_secs(10);
    let (r, _) = turn(&run, &mut w, move || {
        loop {
            let mut c = Client::new(&url);
            let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                c.initialize();
                c.call("lookup_order", json!({"order_id": "1234"}))
            }));
            match ok {
                Ok(r) => break r,
                Err(_) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                Err(e) => std::panic::resume_unwind(e),
            }
        }
    });
    assert_eq!(r.0, 200);
}

#[test]
fn schemas_that_cannot_be_served_are_refused_and_outside_refs_never_resolved() {
    let spec = |parameters: Value| {
        spec(
            "t",
            "",
            parameters,
            ToolEffect::Read {
                path: "x".into(),
                key_arg: None,
            },
        )
    };
    let e = ToolSet::new(&[spec(json!("object"))])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("tool `t`: `parameters` must be a JSON object"),
        "{e}"
    );
    let e = ToolSet::new(&[spec(json!({"type": 5}))])
        .unwrap_err()
        .to_string();
    assert!(e.contains("is not a valid JSON Schema"), "{e}");
    let started = Instant::now();
    let e = ToolSet::new(&[spec(json!({"$ref": "urn:wt:not-here"}))])
        .unwrap_err()
        .to_string();
    assert!(e.contains("is not a valid JSON Schema"), "{e}");
    assert!(started.elapsed() < Duration::from_secs(2));
}

/// A gateway run whose upstream is `upstream`, serving no MCP.
fn gateway_run(upstream: &str) -> (Lane, McpRun) {
    let gw = crate::runtime::agent::Gateway {
        endpoint: format!("{upstream}/v1"),
        ..Default::default()
    };
    let process = crate::runtime::agent::Process {
        gateway: Some(gw.clone()),
        ..Default::default()
    };
    let agent = crate::runtime::Agent::new("gw", crate::runtime::Settings::Process(process));
    let up = Arc::new(gateway::Upstream::new(&agent, &gw).unwrap());
    let lane = Lane::open(0, Some(up)).unwrap();
    let run = lane.start_run(None).unwrap();
    (lane, run)
}

fn post_model(url: &str, token: &str) -> (u16, Value) {
    let resp = reqwest::blocking::Client::new()
        .post(format!("{url}/chat/completions"))
        .bearer_auth(token)
        .header("content-type", "application/json")
        .body(json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).to_string())
        .send()
        .unwrap();
    let status = resp.status().as_u16();
    let text = resp.text().unwrap_or_default();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

#[test]
fn a_model_call_between_turns_is_refused_recorded_and_never_forwarded() {
    // The upstream is a port nobody listens on: a forwarded call would fail with 502.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let upstream = format!("http://{}", dead.local_addr().unwrap());
    drop(dead);
    let (_lane, run) = gateway_run(&upstream);
    let url = run.model_url().unwrap().to_owned();
    assert!(!run.serves_mcp());
    // No turn in progress: refused, recorded, not forwarded.
    let (status, body) = post_model(&url, run.model_token());
    assert_eq!(status, 409, "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("no turn"));
    // Another token: refused and not recorded (it is not this run's agent).
    assert_eq!(post_model(&url, "wt-run-guess").0, 401);
    let kept = run.take_model_calls();
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert_eq!(kept[0].turn, None);
    assert_eq!(kept[0].messages, json!([{"role": "user", "content": "hi"}]));
    assert!(kept[0].error.as_deref().unwrap().starts_with("refused"));
    // The MCP side is not served for a gateway-only run.
    let mcp = reqwest::blocking::Client::new()
        .post(run.url())
        .header("content-type", "application/json")
        .body(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).to_string())
        .send()
        .unwrap();
    assert_eq!(mcp.status().as_u16(), 404);
    // During a turn the call goes through (and fails upstream: 502, recorded for the turn).
    let (tx, rx) = mpsc::channel::<Inbox<()>>();
    run.open_turn(tx);
    let (status, _) = post_model(&url, run.model_token());
    assert_eq!(status, 502);
    match rx.recv_timeout(Duration::from_secs(10)).unwrap() {
        Inbox::Model(call) => {
            assert!(call.error.as_deref().unwrap().contains("cannot connect"), "{call:?}");
        }
        other => panic!("{other:?}"),
    }
    run.close_turn();
    // After the run, its address is refused.
    let model_url = url.clone();
    drop(run);
    assert_eq!(post_model(&model_url, "x").0, 404);
}

#[test]
fn a_gateway_request_too_large_or_not_json_is_refused_and_the_lane_keeps_serving() {
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let upstream = format!("http://{}", dead.local_addr().unwrap());
    drop(dead);
    let (_lane, run) = gateway_run(&upstream);
    let url = format!("{}/chat/completions", run.model_url().unwrap());
    let (tx, _rx) = mpsc::channel::<Inbox<()>>();
    run.open_turn(tx);
    let post = |body: Vec<u8>| {
        reqwest::blocking::Client::new()
            .post(&url)
            .bearer_auth(run.model_token())
            .header("content-type", "application/json")
            .body(body)
            .send()
            .map(|r| r.status().as_u16())
    };
    let huge = vec![b' '; crate::runtime::gateway::MAX_REQUEST_BYTES + 1];
    // The server may close the connection before the client has sent it all.
    assert!(post(huge).map_or(true, |s| s == 413));
    assert_eq!(post(b"[1, 2]".to_vec()).unwrap(), 400);
    assert_eq!(post(b"{not json".to_vec()).unwrap(), 400);
    // Refused before any forward: nothing recorded, and the lane still answers.
    assert!(run.take_model_calls().is_empty());
    assert_eq!(post(b"{}".to_vec()).unwrap(), 502);
    run.close_turn();
}
