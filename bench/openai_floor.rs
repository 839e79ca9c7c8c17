//! The OpenAI-compatible stub of `bench/openai_floor.sh` (std only; the script builds it with
//! `rustc -O`). Every `POST /v1/chat/completions` is answered at once with the same chat
//! completion (no tool calls), in one write, on a keep-alive connection; both sides of the
//! benchmark (`wt run` and curl) talk to this same process, so what it costs is the same for
//! both and is reported separately.
//!
//! - `GET /stats` answers `{"requests": R, "connections": C, "cpu_us": U}`: completions served,
//!   connections accepted (a client that keeps one connection adds 1 per sweep), and the
//!   stub's own CPU time (user + system, all threads, `getrusage`), so the script can
//!   subtract it from a side's figures.
//! - With `CAPTURE` (a path), the first completion request is written there as it arrived:
//!   the head (request line and headers) and the body, separated by an empty line. The
//!   script builds curl's requests from it, so curl sends what `wt` sends.
//!
//! - With `STUB_CONTENT` set, the completion's message says that text instead (a judge's JSON
//!   verdict, for `bench/judging.sh`).
//!
//! Usage: `openai_floor_stub [CAPTURE]` prints `ready PORT` once it listens on 127.0.0.1.
//! A benchmark tool, not a server: it trusts its client (bounded reads all the same).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

const ANSWER: &str = r#"{"id":"chatcmpl-floor","object":"chat.completion","created":1764566100,"model":"m","system_fingerprint":"fp_floor","choices":[{"index":0,"message":{"role":"assistant","content":"Your order 1234 has shipped and is on its way."},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":182,"completion_tokens":12,"total_tokens":194}}"#;

/// The answer, with `STUB_CONTENT` as its message's text when set.
fn answer() -> String {
    match std::env::var("STUB_CONTENT") {
        Ok(text) => {
            let escaped = text.replace('\\', "\\\\").replace('"', "\\\"");
            ANSWER.replace("Your order 1234 has shipped and is on its way.", &escaped)
        }
        Err(_) => ANSWER.to_owned(),
    }
}

/// The most a request head or body may be (the script's requests are a few KiB).
const MAX_REQUEST: usize = 1 << 20;

#[repr(C)]
struct Rusage {
    utime: [i64; 2],
    stime: [i64; 2],
    rest: [i64; 14],
}

unsafe extern "C" {
    fn getrusage(who: i32, usage: *mut Rusage) -> i32;
}

/// This process's CPU time (user + system, every thread, exited ones too), in µs.
fn cpu_us() -> u64 {
    let mut r = Rusage {
        utime: [0; 2],
        stime: [0; 2],
        rest: [0; 14],
    };
    // SAFETY: RUSAGE_SELF (0) and a struct of the kernel's `struct rusage` size and layout
    // on 64-bit Linux (two timevals, then 14 longs).
    if unsafe { getrusage(0, &mut r) } != 0 {
        return 0;
    }
    let us = |t: [i64; 2]| (t[0] * 1_000_000 + t[1]) as u64;
    us(r.utime) + us(r.stime)
}

struct Stats {
    requests: AtomicU64,
    connections: AtomicU64,
    captured: AtomicBool,
    capture: Option<String>,
}

fn main() {
    let capture = std::env::args().nth(1);
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
    let port = listener.local_addr().expect("local address").port();
    let stats = Arc::new(Stats {
        requests: AtomicU64::new(0),
        connections: AtomicU64::new(0),
        captured: AtomicBool::new(false),
        capture,
    });
    println!("ready {port}");
    std::io::stdout().flush().ok();
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        stats.connections.fetch_add(1, Ordering::Relaxed);
        let stats = stats.clone();
        std::thread::spawn(move || serve(stream, &stats));
    }
}

/// Serves one connection's requests until the client closes it.
fn serve(mut stream: TcpStream, stats: &Stats) {
    let answer = answer();
    // The answer goes out in one write; no delay waiting for more.
    stream.set_nodelay(true).ok();
    let mut buf: Vec<u8> = Vec::with_capacity(16 << 10);
    let mut chunk = [0u8; 16 << 10];
    loop {
        // The head.
        let head_end = loop {
            if let Some(i) = find(&buf, b"\r\n\r\n") {
                break i + 4;
            }
            if buf.len() > MAX_REQUEST {
                return;
            }
            match stream.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
        let length = head
            .lines()
            .filter_map(|l| l.split_once(':'))
            .find(|(k, _)| k.trim().eq_ignore_ascii_case("content-length"))
            .and_then(|(_, v)| v.trim().parse::<usize>().ok())
            .unwrap_or(0)
            .min(MAX_REQUEST);
        while buf.len() < head_end + length {
            match stream.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        let close = head.lines().any(|l| {
            l.split_once(':').is_some_and(|(k, v)| {
                k.trim().eq_ignore_ascii_case("connection")
                    && v.trim().eq_ignore_ascii_case("close")
            })
        });
        let target = head.split(' ').nth(1).unwrap_or("");
        let body = if head.starts_with("GET /stats ") {
            format!(
                r#"{{"requests":{},"connections":{},"cpu_us":{}}}"#,
                stats.requests.load(Ordering::Relaxed),
                stats.connections.load(Ordering::Relaxed),
                cpu_us()
            )
        } else if head.starts_with("POST ") && target.ends_with("/chat/completions") {
            stats.requests.fetch_add(1, Ordering::Relaxed);
            if let Some(path) = &stats.capture
                && !stats.captured.swap(true, Ordering::Relaxed)
            {
                let mut record = buf[..head_end].to_vec();
                record.extend_from_slice(&buf[head_end..head_end + length]);
                std::fs::write(path, record).ok();
            }
            answer.clone()
        } else {
            let answer = b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n";
            if stream.write_all(answer).is_err() {
                return;
            }
            buf.drain(..head_end + length);
            continue;
        };
        let answer = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        if stream.write_all(answer.as_bytes()).is_err() || close {
            return;
        }
        buf.drain(..head_end + length);
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}
