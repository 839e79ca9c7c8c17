//! Fixtures shared by the suite's files: agents and packs for a plain sweep, stub servers
//! that hang, stream or follow a script, and checks over what a sweep wrote.

use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::harness::*;

/// Every file under `dir`, recursively, by path.
pub fn tree(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let p = e.path();
        let ft = e.file_type().unwrap();
        if ft.is_dir() {
            out.extend(tree(&p));
        } else if ft.is_file() {
            out.insert(p.clone(), std::fs::read(&p).unwrap_or_default());
        }
    }
    out
}

/// Asserts that `needle` appears in no file `wt` wrote under `dir` (the test's own agent
/// configs aside) and nowhere in `r`'s output.
pub fn nowhere(dir: &Path, r: &Run, needle: &str) {
    for (p, bytes) in tree(dir) {
        if p.extension().is_some_and(|e| e == "toml") {
            continue;
        }
        assert!(
            !String::from_utf8_lossy(&bytes).contains(needle),
            "{needle:?} leaked into {}",
            p.display()
        );
    }
    assert!(
        !r.stdout.contains(needle),
        "{needle:?} leaked to stdout: {r}"
    );
    assert!(
        !r.stderr.contains(needle),
        "{needle:?} leaked to stderr: {r}"
    );
}

/// Every `.json` file under `out` parses and no temporary file is left.
pub fn only_whole_files(out: &Path) {
    for (name, bytes) in files(out) {
        assert!(!name.starts_with(".wt-tmp-"), "temporary file left: {name}");
        if name.ends_with(".json") {
            serde_json::from_slice::<Value>(&bytes)
                .unwrap_or_else(|e| panic!("{name} is not whole: {e}"));
        }
        if name.ends_with(".jsonl") {
            for l in String::from_utf8(bytes).unwrap().lines() {
                serde_json::from_str::<Value>(l).unwrap_or_else(|e| panic!("{name}: {e}"));
            }
        }
    }
}

pub fn chat_completion(content: &str) -> String {
    json!({"choices": [{"message": {"role": "assistant", "content": content}}]}).to_string()
}

/// A pack with one scenario that expects nothing but a reply.
pub fn plain_pack(dir: &Path) -> PathBuf {
    write_pack(
        dir,
        &[(
            "hello.toml",
            "id = \"hello\"\nruns = 1\nturns = [\"Hello?\"]\n",
        )],
    )
}

/// An `openai` agent config named `<name>.toml` for the endpoint at `base`, with `extra`
/// TOML lines.
pub fn openai_agent(dir: &Path, name: &str, base: &str, extra: &str) -> PathBuf {
    agent_file(
        dir,
        &format!("{name}.toml"),
        &format!(
            "label = \"{name}\"\nruntime = \"openai\"\nmodel = \"m\"\nendpoint = \"{base}/v1\"\n{extra}"
        ),
    )
}

/// `wt run --pack PACK --agent AGENT --out OUT` in `dir`; returns the run and `dir/OUT`.
pub fn run_pack(dir: &Path, out: &str, pack: &Path, agent: &Path) -> (Run, PathBuf) {
    let r = Wt::new(dir)
        .args(["run", "--out", out, "--pack"])
        .arg(pack)
        .arg("--agent")
        .arg(agent)
        .run();
    (r, dir.join(out))
}

/// An `http` agent whose inject never answers within the test.
pub fn hanging_service() -> TestServer {
    TestServer::start(|s| {
        if s.url.starts_with("/inject") {
            std::thread::sleep(Duration::from_secs(40));
        }
        (200, "{}".into())
    })
}

/// An OpenAI-compatible endpoint whose answer is `body` (a reader: it may never end).
pub fn streaming_server(body: impl Fn() -> Box<dyn Read + Send> + Send + Sync + 'static) -> String {
    let server = tiny_http::Server::http("127.0.0.1:0").unwrap();
    let port = server.server_addr().to_ip().unwrap().port();
    let body = std::sync::Arc::new(body);
    std::thread::spawn(move || {
        for req in server.incoming_requests() {
            let body = body.clone();
            std::thread::spawn(move || {
                let resp = tiny_http::Response::new(200.into(), vec![], body(), None, None);
                let _ = req.respond(resp);
            });
        }
    });
    format!("http://127.0.0.1:{port}")
}

pub struct Endless;

impl Read for Endless {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        buf.fill(b'a');
        Ok(buf.len())
    }
}

pub fn pinned(dir: &Path, out: &str, extra: &[&str], plugins: Option<&Path>) -> Run {
    let mut wt = Wt::new(dir)
        .args(["run", "--seed", "1", "--out", out])
        .args(extra)
        .env("WT_FIXED_CLOCK", CLOCK);
    if let Some(p) = plugins {
        wt = wt.arg("--plugin-dir").arg(p);
    }
    wt.run()
}

/// A raw HTTP/1.1 server answering each connection with the next of `script`: `Some((status,
/// extra headers, body))`, or `None` to read the request and close without a response.
pub fn scripted_server(script: Vec<Option<(u16, &'static str, String)>>) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut script = script.into_iter();
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let step = script.next().unwrap_or(Some((500, "", "{}".into())));
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut length = 0usize;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0; length];
            let _ = reader.read_exact(&mut body);
            if let Some((status, headers, body)) = step {
                let resp = format!(
                    "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n{headers}\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(resp.as_bytes());
            }
            drop(stream);
        }
    });
    format!("http://127.0.0.1:{port}")
}

/// The process and its descendants (by `/proc/<pid>/task/*/children`).
pub fn process_tree(pid: u32) -> Vec<u32> {
    let mut all = vec![pid];
    let mut at = 0;
    while at < all.len() {
        let p = all[at];
        at += 1;
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) else {
            continue;
        };
        for t in tasks.flatten() {
            if let Ok(text) = std::fs::read_to_string(t.path().join("children")) {
                all.extend(
                    text.split_whitespace()
                        .filter_map(|c| c.parse::<u32>().ok()),
                );
            }
        }
    }
    all
}

/// A `/proc/<pid>/status` field in KiB (`VmHWM`, `VmRSS`).
pub fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// A pack with one scenario of `runs` one-turn runs that expects nothing but a reply.
pub fn pack_of(dir: &Path, runs: u32) -> PathBuf {
    write_pack(
        dir,
        &[(
            "hello.toml",
            &format!("id = \"hello\"\nruns = {runs}\nturns = [\"Hello?\"]\n"),
        )],
    )
}
