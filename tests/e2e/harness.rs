//! The suite's one harness: the workspace's binaries and plugins built from source once per
//! test process (cargo is a no-op when they are fresh), `wt` run in a sandbox or in the
//! background, tiny local HTTP servers, readers for what a sweep leaves on disk, and waits
//! on observable state (a journal line, a file, a line on stderr) — never a fixed sleep
//! hoping a sweep has got somewhere.
//!
//! Every `wt` the suite starts runs with no inherited `WT_*` variable, with its working
//! directory, `HOME` and `XDG_DATA_HOME` inside the test's own temp dir, so neither the
//! developer's plugins nor a stray `runs/` can leak in or out. Settings a test needs are
//! passed to that child (`Wt::env`), never set on the test process.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::Value;

/// The same fixed clock (`WT_FIXED_CLOCK`) for every pinned sweep of the suite.
pub const CLOCK: &str = "2026-11-30T06:00:00Z";

/// How long a test waits for a sweep to reach a state before it fails: generous, since a
/// loaded machine starts `wt`, Python agents and hook processes slowly.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// A fresh temporary directory for one test, removed when dropped.
pub fn tmp() -> tempfile::TempDir {
    tempfile::tempdir().expect("tempdir")
}

/// The workspace root.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ sits in the workspace")
        .to_path_buf()
}

/// `<target>/<profile>` of this test binary (it lives in `<target>/<profile>/deps/`).
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    exe.parent()
        .and_then(Path::parent)
        .expect("test binary lives in <target>/<profile>/deps")
        .to_path_buf()
}

pub fn target_dir() -> PathBuf {
    profile_dir()
        .parent()
        .expect("profile dir has a parent")
        .to_path_buf()
}

/// The cargo profile this test binary was built in (`dev`, `release`, …).
pub fn cargo_profile() -> String {
    match profile_dir().file_name().and_then(|n| n.to_str()) {
        Some("debug") | None => "dev".into(),
        Some(other) => other.into(),
    }
}

/// A cargo command in the workspace with this test binary's target dir and none of the
/// variables cargo sets for a test process: those look like changed build inputs to build
/// scripts that watch them (ring's watches `CARGO_MANIFEST_DIR`) and would force rebuilds.
pub fn cargo() -> Command {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(workspace())
        .env("CARGO_TARGET_DIR", target_dir());
    for (k, _) in std::env::vars() {
        if (k.starts_with("CARGO_") && k != "CARGO_HOME" && k != "CARGO_TARGET_DIR")
            || k == "OUT_DIR"
        {
            cmd.env_remove(k);
        }
    }
    cmd
}

/// Downloads every package of the workspace's lock file, for every platform, into cargo's
/// registry cache, once per process. Steps that run cargo `--offline` with a copy of that
/// lock file (the SDK's `cargo package`, the scaffolded and compatibility hook crates) need
/// it: `cargo metadata` reads the manifest of every locked package, also of those a Linux
/// build never compiles (`redox_syscall`, `windows-*`), and a fresh cargo home has none of
/// them. Online and `--locked`: it resolves nothing anew.
pub fn registry_cache_filled() {
    static FETCHED: OnceLock<()> = OnceLock::new();
    FETCHED.get_or_init(|| {
        let out = cargo()
            .args(["fetch", "--locked"])
            .output()
            .expect("run cargo fetch");
        assert!(
            out.status.success(),
            "cargo fetch --locked failed (the hook-crate tests need every locked package \
             in cargo's registry cache):\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    });
}

fn cargo_ok(args: &[&str]) {
    let status = cargo().args(args).status().expect("run cargo");
    assert!(status.success(), "cargo {args:?} failed");
}

/// Builds `wt` and every plugin in this test binary's profile, plus the `panic = "abort"`
/// test plugin in its own profile. Once per process.
///
/// Every crate this build shares with the test binary's own — the host library, the SDK, its
/// macros, abi_stable and what lies under them — is reused, not compiled a second time: the
/// build turns on the features the suite's dev-dependencies turn on (`windtunnel/internals`,
/// `windtunnel-sdk/testing`; neither changes what `wt` or a plugin does: one makes internal
/// modules public, the other adds the SDK's test kit), and leaves out the macros crate, which
/// as a build of its own would be compiled with the profile's debug info where as a
/// dependency it is not (cargo's `build-override`).
pub fn build() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let profile = cargo_profile();
        cargo_ok(&[
            "build",
            "-q",
            "--workspace",
            "--exclude",
            "wt_test_abort",
            "--exclude",
            "windtunnel-sdk-macros",
            "--features",
            "internals,testing",
            "--profile",
            &profile,
        ]);
        cargo_ok(&[
            "build",
            "-q",
            "-p",
            "wt_test_abort",
            "--profile",
            "abort-plugin",
        ]);
        profile_dir()
    })
}

/// The `wt` binary.
pub fn wt_bin() -> PathBuf {
    build().join("wt")
}

/// A built plugin library by crate name (`acme_state_probe`, `wt_test_recorder`, …).
pub fn plugin_lib(crate_name: &str) -> PathBuf {
    let dir = if crate_name == "wt_test_abort" {
        target_dir().join("abort-plugin")
    } else {
        build().to_path_buf()
    };
    build();
    dir.join(format!("lib{crate_name}.so"))
}

/// A `wt` command sandboxed in `dir`: working directory, `HOME` and the per-user plugin
/// directory inside it, and no inherited `WT_*` variable.
pub fn wt(dir: &Path) -> Command {
    let mut cmd = Command::new(wt_bin());
    for (k, _) in std::env::vars() {
        if k.starts_with("WT_") {
            cmd.env_remove(k);
        }
    }
    cmd.current_dir(dir)
        .env("HOME", dir)
        .env("XDG_DATA_HOME", dir.join("data"));
    cmd
}

/// The outcome of one `wt` invocation, as text.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn from(out: Output) -> Run {
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

impl std::fmt::Display for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {}\n--- stdout\n{}\n--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

/// Runs a command to completion.
pub fn run(cmd: &mut Command) -> Run {
    Run::from(cmd.output().expect("run wt"))
}

/// [`wt`] as a builder: `Wt::new(dir).args(["run"]).env("WT_SEED", "1").run()`.
pub struct Wt {
    cmd: Command,
}

impl Wt {
    pub fn new(dir: &Path) -> Wt {
        Wt { cmd: wt(dir) }
    }

    pub fn args<I, S>(mut self, args: I) -> Wt
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        self.cmd.args(args);
        self
    }

    pub fn arg(mut self, arg: impl AsRef<std::ffi::OsStr>) -> Wt {
        self.cmd.arg(arg);
        self
    }

    pub fn env(mut self, k: &str, v: impl AsRef<std::ffi::OsStr>) -> Wt {
        self.cmd.env(k, v);
        self
    }

    /// `--pack PACK`.
    pub fn pack(self, pack: &Path) -> Wt {
        self.arg("--pack").arg(pack)
    }

    /// `--agent AGENT`.
    pub fn agent(self, agent: &Path) -> Wt {
        self.arg("--agent").arg(agent)
    }

    /// The command itself, for spawning, piping or signalling.
    pub fn command(self) -> Command {
        self.cmd
    }

    pub fn run(mut self) -> Run {
        run(&mut self.cmd)
    }

    /// Starts the command in the background, to be watched, signalled and finished.
    pub fn start(self) -> Running {
        Running::start(self.cmd)
    }
}

/// Sends `sig` (`TERM`, `INT`, `HUP`, `KILL`, …) to process `pid`, as `kill -SIG` does.
pub fn signal(pid: u32, sig: &str) {
    let sent = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()
        .expect("run kill");
    assert!(sent.success(), "kill -{sig} {pid}");
}

/// A `wt` started in the background, its stderr read line by line as it comes, so that a
/// test can wait for what `wt` says (e.g. its answer to a signal) before acting again.
/// Dropped before it is finished (a test that failed half-way), it kills the process.
pub struct Running {
    child: Option<Child>,
    stderr: Arc<Mutex<String>>,
    reader: Option<JoinHandle<()>>,
}

impl Running {
    /// Spawns `cmd` with its stdout and stderr piped.
    pub fn start(mut cmd: Command) -> Running {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn wt");
        let pipe = child.stderr.take().expect("stderr is piped");
        let stderr = Arc::new(Mutex::new(String::new()));
        let sink = stderr.clone();
        let reader = std::thread::spawn(move || {
            let mut pipe = BufReader::new(pipe);
            let mut line = Vec::new();
            while pipe.read_until(b'\n', &mut line).is_ok_and(|n| n > 0) {
                sink.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&line));
                line.clear();
            }
        });
        Running {
            child: Some(child),
            stderr,
            reader: Some(reader),
        }
    }

    fn child(&mut self) -> &mut Child {
        self.child.as_mut().expect("not finished yet")
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("not finished yet").id()
    }

    /// Sends `sig` to the process (see [`signal`]).
    pub fn signal(&self, sig: &str) {
        signal(self.pid(), sig);
    }

    /// Waits (up to [`PATIENCE`]) until a line of stderr holds `needle`.
    pub fn wait_for_stderr(&self, needle: &str) {
        let said = || {
            self.stderr
                .lock()
                .unwrap()
                .lines()
                .any(|l| l.contains(needle))
        };
        if !poll_until(PATIENCE, said) {
            panic!(
                "waited {PATIENCE:?} for {needle:?} on wt's stderr; it said:\n{}",
                self.stderr.lock().unwrap()
            );
        }
    }

    /// Waits for the process to exit, however long it takes, and returns what it said.
    pub fn finish(mut self) -> Run {
        let out = self
            .child
            .take()
            .expect("not finished yet")
            .wait_with_output()
            .expect("wait for wt");
        if let Some(reader) = self.reader.take() {
            reader.join().expect("the stderr reader");
        }
        Run {
            stderr: self.stderr.lock().unwrap().clone(),
            ..Run::from(out)
        }
    }

    /// Waits at most `limit` for the process to exit; kills it and fails the test on
    /// overrun.
    pub fn finish_within(mut self, limit: Duration) -> Run {
        let child = self.child();
        if !poll_until(limit, || child.try_wait().expect("wait for wt").is_some()) {
            let _ = child.kill();
            panic!("wt did not finish within {limit:?}: {}", self.finish());
        }
        self.finish()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A private plugin directory (mode 0700) holding copies of the named plugin crates.
pub fn plugin_dir(root: &Path, crates: &[&str]) -> PathBuf {
    let dir = root.join("plugins");
    std::fs::create_dir_all(&dir).unwrap();
    set_mode(&dir, 0o700);
    for c in crates {
        std::fs::copy(plugin_lib(c), dir.join(format!("lib{c}.so"))).unwrap();
    }
    dir
}

pub fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Files in `dir` by name, and those in its directories (the judges' cache) by their path
/// under it; not the sweeps' indexes (`*.index.jsonl`: their lines name the files' inodes and
/// times, never the same twice; [`index_lines`] reads them).
pub fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(dir).expect("read dir") {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if name.ends_with(".index.jsonl") {
            continue;
        }
        if p.is_dir() {
            for (inner, bytes) in files(&p) {
                out.insert(format!("{name}/{inner}"), bytes);
            }
        } else {
            out.insert(name, std::fs::read(&p).unwrap());
        }
    }
    out
}

/// The lines of every index (`*.index.jsonl`) in `dir`, each parsed, by file name then line.
pub fn index_lines(dir: &Path) -> Vec<Value> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".index.jsonl"))
        .collect();
    paths.sort();
    paths
        .iter()
        .flat_map(|p| {
            std::fs::read_to_string(p)
                .unwrap()
                .lines()
                .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
                .collect::<Vec<Value>>()
        })
        .collect()
}

/// Trace files (`*.json` whose stem has no dot) in `dir`.
pub fn traces(dir: &Path) -> Vec<Value> {
    files(dir)
        .into_iter()
        .filter(|(n, _)| n.ends_with(".json") && !n.trim_end_matches(".json").contains('.'))
        .map(|(_, b)| serde_json::from_slice(&b).unwrap())
        .collect()
}

/// Trace files in `dir`, by name only, sorted: safe to call while a sweep writes there.
pub fn trace_paths(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let n = p.file_name().unwrap().to_string_lossy();
            !n.starts_with('.')
                && n.ends_with(".json")
                && !n.trim_end_matches(".json").contains('.')
        })
        .collect();
    v.sort();
    v
}

/// Score sidecars in `dir`.
pub fn scores(dir: &Path) -> Vec<Value> {
    files(dir)
        .into_iter()
        .filter(|(n, _)| n.ends_with(".score.json"))
        .map(|(_, b)| serde_json::from_slice(&b).unwrap())
        .collect()
}

/// Every event journal (`*.events.jsonl`) in `dir`, each line parsed, in file order.
pub fn journal(dir: &Path) -> Vec<Value> {
    files(dir)
        .into_iter()
        .filter(|(n, _)| n.ends_with(".events.jsonl"))
        .flat_map(|(n, b)| {
            String::from_utf8(b)
                .unwrap_or_else(|e| panic!("{n}: {e}"))
                .lines()
                .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{n}: {e}")))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// JSON files in `dir` whose names end with `suffix`, parsed, by name.
pub fn json_files(dir: &Path, suffix: &str) -> BTreeMap<String, Value> {
    files(dir)
        .into_iter()
        .filter(|(n, _)| n.ends_with(suffix))
        .map(|(n, b)| {
            let v = serde_json::from_slice(&b).unwrap_or_else(|e| panic!("{n}: {e}"));
            (n, v)
        })
        .collect()
}

/// The journal lines of `event` (`RunStarted`, `TurnDone`, …), in the order given.
pub fn events<'a>(lines: &'a [Value], event: &str) -> Vec<&'a Value> {
    lines.iter().filter(|l| l["event"] == event).collect()
}

/// The event journal a sweep writing into `dir` has created, if it has yet.
pub fn find_journal(dir: &Path) -> Option<PathBuf> {
    std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().ends_with(".events.jsonl"))
}

/// The event journal of the sweep that wrote `dir`.
pub fn journal_file(dir: &Path) -> PathBuf {
    find_journal(dir).unwrap_or_else(|| panic!("no event journal in {}", dir.display()))
}

/// The journal lines in `dir` while a sweep may still be writing there: nothing when no
/// journal exists yet, and a last line still being written is skipped.
pub fn journal_so_far(dir: &Path) -> Vec<Value> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().ends_with(".events.jsonl"))
        .filter_map(|p| std::fs::read(p).ok())
        .flat_map(|b| {
            String::from_utf8_lossy(&b)
                .lines()
                .filter_map(|l| serde_json::from_str(l).ok())
                .collect::<Vec<Value>>()
        })
        .collect()
}

/// Waits (up to [`PATIENCE`]) until the journal of the sweep writing into `dir` holds an
/// `event` line: the way to know a sweep has got somewhere (`RunStarted`, `TurnStarted`).
pub fn wait_for_journal_event(dir: &Path, event: &str) {
    wait_for(
        &format!("a {event} event in the journal under {}", dir.display()),
        PATIENCE,
        || !events(&journal_so_far(dir), event).is_empty(),
    );
}

/// The warnings a trace holds from its worker (hooks, runtimes), as text.
pub fn worker_warnings(trace: &Value) -> Vec<&str> {
    trace["worker_warnings"]
        .as_array()
        .unwrap_or_else(|| panic!("no worker_warnings in {trace}"))
        .iter()
        .map(|w| w.as_str().unwrap())
        .collect()
}

/// Writes a pack (`pack.toml` + `scenarios/<name>`) under `dir` and returns its path.
pub fn write_pack(dir: &Path, scenarios: &[(&str, &str)]) -> PathBuf {
    let pack = dir.join("pack");
    std::fs::create_dir_all(pack.join("scenarios")).unwrap();
    std::fs::write(pack.join("pack.toml"), "name = \"test\"\n").unwrap();
    for (name, text) in scenarios {
        std::fs::write(pack.join("scenarios").join(name), text).unwrap();
    }
    pack
}

/// A pack named `name` in `dir/<dir_name>` of one-turn scenarios `<prefix>00`, `<prefix>01`,
/// … (scenario k's turn is `turns[k]`), each passing when the reply says "yes", run `runs`
/// times.
pub fn yes_pack(
    dir: &Path,
    dir_name: &str,
    name: &str,
    prefix: &str,
    turns: &[String],
    runs: u32,
) -> PathBuf {
    let root = dir.join(dir_name);
    std::fs::create_dir_all(root.join("scenarios")).unwrap();
    std::fs::write(root.join("pack.toml"), format!("name = \"{name}\"\n")).unwrap();
    for (k, turn) in turns.iter().enumerate() {
        std::fs::write(
            root.join(format!("scenarios/{prefix}{k:02}.toml")),
            format!(
                "id = \"{prefix}{k:02}\"\nruns = {runs}\nturns = [{}]\n[expect.outcome]\nreply_contains = [\"yes\"]\n",
                serde_json::to_string(turn).unwrap()
            ),
        )
        .unwrap();
    }
    root
}

/// A request as a test server saw it.
#[derive(Clone, Debug)]
pub struct Seen {
    pub method: String,
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

/// A local HTTP server on 127.0.0.1 answering with `handler(request) -> (status, body)`,
/// each request on a thread of its own (so a slow answer does not block the others).
///
/// Every connection is served as long as the client keeps it (hyper, one task per
/// connection): lanes each keep a pooled keep-alive connection for a whole sweep, and a
/// server that served connections from a bounded thread pool would leave some lane's requests
/// unread until that lane's request timed out.
pub struct TestServer {
    pub base: String,
    pub seen: Arc<Mutex<Vec<Seen>>>,
}

/// A test server's handler: the request as seen, to its status, extra headers and body.
type Handler = dyn Fn(&Seen) -> (u16, Vec<(String, String)>, String) + Send + Sync;

impl TestServer {
    pub fn start<F>(handler: F) -> TestServer
    where
        F: Fn(&Seen) -> (u16, String) + Send + Sync + 'static,
    {
        TestServer::start_with_headers(move |s| {
            let (status, body) = handler(s);
            (status, Vec::new(), body)
        })
    }

    /// Like [`TestServer::start`], with extra response headers (a `Content-Type` among them
    /// replaces the default `application/json`).
    pub fn start_with_headers<F>(handler: F) -> TestServer
    where
        F: Fn(&Seen) -> (u16, Vec<(String, String)>, String) + Send + Sync + 'static,
    {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind test server");
        let port = listener.local_addr().expect("test server address").port();
        listener
            .set_nonblocking(true)
            .expect("non-blocking listener");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let handler: Arc<Handler> = Arc::new(handler);
        let log = seen.clone();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("test-server")
            .enable_all()
            .build()
            .expect("test server runtime");
        std::thread::spawn(move || {
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
                while let Ok((stream, _)) = listener.accept().await {
                    let (handler, log) = (handler.clone(), log.clone());
                    tokio::spawn(async move {
                        let service = hyper::service::service_fn(move |req| {
                            answer(req, handler.clone(), log.clone())
                        });
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                            .await;
                    });
                }
            });
        });
        TestServer {
            base: format!("http://127.0.0.1:{port}"),
            seen,
        }
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

/// One request to a [`TestServer`]: read whole, logged, answered by the handler on a
/// blocking thread (handlers sleep); a handler that panics answers 500.
async fn answer(
    req: hyper::Request<hyper::body::Incoming>,
    handler: Arc<Handler>,
    log: Arc<Mutex<Vec<Seen>>>,
) -> Result<hyper::Response<http_body_util::Full<bytes::Bytes>>, std::convert::Infallible> {
    use http_body_util::BodyExt;
    let (parts, body) = req.into_parts();
    let body = body
        .collect()
        .await
        .map(|b| String::from_utf8_lossy(&b.to_bytes()).into_owned())
        .unwrap_or_default();
    let s = Seen {
        method: parts.method.to_string(),
        url: parts.uri.to_string(),
        headers: parts
            .headers
            .iter()
            .map(|(k, v)| {
                (
                    k.to_string(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect(),
        body,
    };
    log.lock().unwrap().push(s.clone());
    let (status, headers, body) = tokio::task::spawn_blocking(move || handler(&s))
        .await
        .unwrap_or_else(|_| (500, Vec::new(), "handler panicked".into()));
    let mut resp = hyper::Response::new(http_body_util::Full::new(bytes::Bytes::from(body)));
    *resp.status_mut() = hyper::StatusCode::from_u16(status).expect("a status code");
    let h = resp.headers_mut();
    h.insert("content-type", "application/json".parse().unwrap());
    for (k, v) in headers {
        let name = hyper::header::HeaderName::from_bytes(k.as_bytes()).expect("a header name");
        let value = v.parse().expect("a header value");
        if name == hyper::header::CONTENT_TYPE {
            h.insert(name, value);
        } else {
            h.append(name, value);
        }
    }
    Ok(resp)
}

/// A port on 127.0.0.1 with nothing listening.
pub fn dead_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// Where `wt` loads plugin hooks in a test: into itself, or each in a child process of its
/// own (`--isolate-hooks`). Contract tests run in both, through [`both_modes!`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    InProcess,
    Isolated,
}

impl Mode {
    /// The `wt run` flags of this mode.
    pub fn args(self) -> &'static [&'static str] {
        match self {
            Mode::InProcess => &[],
            Mode::Isolated => &["--isolate-hooks"],
        }
    }
}

/// `both_modes!(some_test);` turns `fn some_test(mode: Mode)` into two tests,
/// `some_test::in_process` and `some_test::isolated`.
macro_rules! both_modes {
    ($($test:ident),+ $(,)?) => {$(
        mod $test {
            #[test]
            fn in_process() {
                super::$test($crate::harness::Mode::InProcess)
            }
            #[test]
            fn isolated() {
                super::$test($crate::harness::Mode::Isolated)
            }
        }
    )+};
}
pub(crate) use both_modes;

/// Processes whose command line mentions `needle` (e.g. a test's own plugin directory,
/// which every hook process it started names in its arguments).
pub fn processes_mentioning(needle: &Path) -> Vec<u32> {
    let needle = needle.as_os_str().as_encoded_bytes();
    std::fs::read_dir("/proc")
        .map(|d| {
            d.filter_map(|e| {
                let e = e.ok()?;
                let pid: u32 = e.file_name().to_str()?.parse().ok()?;
                let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
                cmdline
                    .windows(needle.len())
                    .any(|w| w == needle)
                    .then_some(pid)
            })
            .collect()
        })
        .unwrap_or_default()
}

/// Waits (up to 10 s) until no process mentions `needle`, and says which still do.
pub fn no_process_left(needle: &Path) -> Result<(), Vec<u32>> {
    let mut left = Vec::new();
    if poll_until(Duration::from_secs(10), || {
        left = processes_mentioning(needle);
        left.is_empty()
    }) {
        Ok(())
    } else {
        Err(left)
    }
}

/// Asks `ready` every 20 ms until it holds or `deadline` has passed; says whether it held.
/// The one sleep of the suite's waits: a back-off between looks at some state.
pub fn poll_until(deadline: Duration, mut ready: impl FnMut() -> bool) -> bool {
    let started = Instant::now();
    loop {
        if ready() {
            return true;
        }
        if started.elapsed() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until `ready` holds; past `deadline`, fails the test naming `what` it waited for.
pub fn wait_for(what: &str, deadline: Duration, ready: impl FnMut() -> bool) {
    assert!(
        poll_until(deadline, ready),
        "waited {deadline:?} for {what}, in vain"
    );
}

/// The Python of a venv with the official MCP SDK (`tests/agents/requirements.txt`), for the
/// scripted agents under `tests/agents/`: `<target>/py-agents`, built once per test process
/// when missing (`.ci/run` builds it first). A venv that cannot be built fails the calling
/// test with pip's own words.
pub fn agent_python() -> &'static Path {
    static PYTHON: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let built = PYTHON.get_or_init(|| {
        let venv = target_dir().join("py-agents");
        let python = venv.join("bin").join("python");
        let works = |py: &Path| {
            Command::new(py)
                .args(["-c", "import mcp, agents, fakellm, a2a.server.routes"])
                .output()
                .is_ok_and(|o| o.status.success())
        };
        if works(&python) {
            return Ok(python);
        }
        // Built aside and renamed into place, so concurrent test processes never see half
        // a venv. Its Python finds the venv wherever it lies, but the `#!` lines of its
        // scripts keep the aside path: run a script as `python <venv>/bin/<script>`.
        let tmp = target_dir().join(format!("py-agents.tmp-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        let step = |cmd: &mut Command, what: &str| -> Result<(), String> {
            let out = cmd
                .output()
                .map_err(|e| format!("{what}: cannot run it: {e}"))?;
            if out.status.success() {
                Ok(())
            } else {
                Err(format!(
                    "{what} failed ({}):\n{}{}",
                    out.status,
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                ))
            }
        };
        step(
            Command::new("python3").args(["-m", "venv"]).arg(&tmp),
            "python3 -m venv (the e2e agents need Python 3 with venv)",
        )?;
        step(
            Command::new(tmp.join("bin").join("python"))
                .args(["-m", "pip", "install", "-q", "-r"])
                .arg(workspace().join("tests/agents/requirements.txt")),
            "pip install -r tests/agents/requirements.txt (PyPI must be reachable)",
        )?;
        if std::fs::rename(&tmp, &venv).is_err() {
            // Another test process got there first; use its venv.
            let _ = std::fs::remove_dir_all(&tmp);
        }
        if works(&python) {
            Ok(python)
        } else {
            Err(format!(
                "{} cannot import mcp, agents, fakellm and a2a after the install",
                python.display()
            ))
        }
    });
    match built {
        Ok(p) => p,
        Err(why) => panic!("cannot build the venv of the e2e agents: {why}"),
    }
}

/// Writes an agent config `dir/name` holding `toml`; returns its path.
pub fn agent_file(dir: &Path, name: &str, toml: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, toml).unwrap();
    p
}

/// A `process` agent config `dir/<name>.toml` running `command`, plus `extra` TOML lines.
pub fn command_agent(dir: &Path, name: &str, command: &[String], extra: &str) -> PathBuf {
    agent_file(
        dir,
        &format!("{name}.toml"),
        &format!(
            "label = \"{name}\"\nruntime = \"process\"\ncommand = {}\n{extra}\n",
            serde_json::to_string(command).unwrap()
        ),
    )
}

/// A `process` agent config `dir/<name>.toml` running `/bin/sh -c script` with `args` after
/// it, plus `extra` TOML lines.
pub fn sh_agent(dir: &Path, name: &str, script: &str, args: &[&str], extra: &str) -> PathBuf {
    let mut command = vec!["/bin/sh".to_owned(), "-c".to_owned(), script.to_owned()];
    command.extend(args.iter().map(|a| (*a).to_owned()));
    command_agent(dir, name, &command, extra)
}

/// The directory of the npm-installed world servers' commands (`tests/worlds/package.json`,
/// locked): `<target>/npm-worlds/node_modules/.bin`, installed once per test process with
/// `npm ci` when missing (`tests/run.sh` installs it first). An install that fails fails the
/// calling test with npm's own words.
pub fn world_servers_bin() -> &'static Path {
    static BIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let root = BIN.get_or_init(|| {
        npm_install("npm-worlds", "tests/worlds", &[], |root| {
            root.join("node_modules/.bin/mcp-server-memory").exists()
        })
        .map(|root| root.join("node_modules").join(".bin"))
    });
    match root {
        Ok(p) => p,
        Err(why) => panic!("cannot install the e2e world servers: {why}"),
    }
}

/// The a2a runtime's JavaScript test agent (`tests/agents/js`, on the official A2A
/// JavaScript SDK), installed with its locked packages into `<target>/npm-agents` once per
/// test process when missing or out of date (`tests/run.sh` installs it first): the path of
/// its script there.
pub fn a2a_js_agent() -> &'static Path {
    static SCRIPT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let script = SCRIPT.get_or_init(|| {
        npm_install(
            "npm-agents",
            "tests/agents/js",
            &["a2a_js_agent.mjs"],
            |root| root.join("node_modules/@a2a-js/sdk/package.json").exists(),
        )
        .map(|root| root.join("a2a_js_agent.mjs"))
    });
    match script {
        Ok(p) => p,
        Err(why) => panic!("cannot install the e2e JavaScript A2A agent: {why}"),
    }
}

/// `npm ci` of the `package.json` and `package-lock.json` in `source` (beside `files`,
/// copied too) into `<target>/<name>`, unless it holds that lock file, the same `files` and
/// `works` says it is installed. Installed aside and renamed into place, so concurrent test
/// processes never see half an install. An install that fails says so with npm's words.
fn npm_install(
    name: &str,
    source: &str,
    files: &[&str],
    works: impl Fn(&Path) -> bool,
) -> Result<PathBuf, String> {
    let root = target_dir().join(name);
    let src = workspace().join(source);
    let all: Vec<&str> = ["package.json", "package-lock.json"]
        .into_iter()
        .chain(files.iter().copied())
        .collect();
    let same = |f: &&str| std::fs::read(root.join(f)).ok() == std::fs::read(src.join(f)).ok();
    if works(&root) && all.iter().all(same) {
        return Ok(root);
    }
    let tmp = target_dir().join(format!("{name}.tmp-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).map_err(|e| e.to_string())?;
    for f in &all {
        std::fs::copy(src.join(f), tmp.join(f)).map_err(|e| format!("{source}/{f}: {e}"))?;
    }
    let out = Command::new("npm")
        .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
        .current_dir(&tmp)
        .output()
        .map_err(|e| format!("npm ci: cannot run npm (node and npm must be installed): {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "npm ci in {source} failed ({}), the npm registry must be reachable:\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let _ = std::fs::remove_dir_all(&root);
    if std::fs::rename(&tmp, &root).is_err() {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    if works(&root) {
        Ok(root)
    } else {
        Err(format!("{} is not installed after npm ci", root.display()))
    }
}

/// `PATH` with the npm-installed world servers first.
pub fn path_with_world_servers() -> String {
    format!(
        "{}:{}",
        world_servers_bin().display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

// ---- A real browser (headless Chromium) ----------------------------------------------

const CHROMIUM: &str = "/usr/bin/chromium";

/// A fresh headless Chromium with no network features; fails (never skips) when it is not
/// installed.
pub fn chromium(dir: &Path) -> Command {
    assert!(
        Path::new(CHROMIUM).is_file(),
        "{CHROMIUM} not found: the HTML report tests render the page in a real browser. \
         Install it with `apt-get install -y chromium` (as root; .ci/run does this)."
    );
    let profile = tempfile::tempdir_in(dir).unwrap().keep();
    let mut cmd = Command::new(CHROMIUM);
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--enable-logging=stderr",
        "--v=0",
    ])
    .arg(format!("--user-data-dir={}", profile.display()));
    cmd
}

/// Renders `page` headless: the DOM after load, and the browser's stderr.
pub fn dump_dom(dir: &Path, page: &Path) -> (String, String) {
    let out = chromium(dir)
        .arg("--dump-dom")
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("run chromium");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "chromium failed: {stderr}");
    (String::from_utf8_lossy(&out.stdout).into_owned(), stderr)
}

/// Console messages (errors included) the page logged: Chromium prints them as
/// `...:CONSOLE:<line>] "message"` with `--enable-logging=stderr`.
pub fn console_lines(stderr: &str) -> Vec<&str> {
    stderr.lines().filter(|l| l.contains(":CONSOLE")).collect()
}

/// Renders the page at `url` headless (scripts run): the DOM after load, and the browser's
/// stderr.
pub fn dump_url(dir: &Path, url: &str) -> (String, String) {
    let out = chromium(dir)
        .arg("--dump-dom")
        .arg(url)
        .output()
        .expect("run chromium");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "chromium failed: {stderr}");
    (String::from_utf8_lossy(&out.stdout).into_owned(), stderr)
}

/// The test server answers every connection a client keeps open at once: lanes each keep a
/// pooled keep-alive connection for the whole sweep, so a server that serves connections from
/// a bounded pool would leave one lane's requests waiting until the client gives up.
#[test]
fn the_test_server_answers_every_keep_alive_connection_at_once() {
    use std::io::{BufRead, BufReader, Write};
    let server = TestServer::start(|s| (200, format!("{{\"url\":\"{}\"}}", s.url)));
    let addr = server.base.trim_start_matches("http://").to_owned();
    for round in 0..20 {
        let mut conns: Vec<_> = (0..16)
            .map(|i| {
                let mut c = std::net::TcpStream::connect(&addr).unwrap();
                c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                write!(
                    c,
                    "POST /r{round}c{i} HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\n{{}}"
                )
                .unwrap();
                BufReader::new(c)
            })
            .collect();
        for (i, c) in conns.iter_mut().enumerate() {
            let mut status = String::new();
            c.read_line(&mut status)
                .unwrap_or_else(|e| panic!("round {round}: connection {i} had no answer: {e}"));
            assert!(status.starts_with("HTTP/1.1 200"), "{status}");
        }
    }
}
