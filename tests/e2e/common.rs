//! Shared helpers: locating (and building) the `wt` binary, running it, and tiny local
//! HTTP servers for runtime tests.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, Mutex, OnceLock};

/// The workspace root.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_owned()
}

/// `<target>/<profile>/wt`, built once per test process (cargo is a no-op when fresh).
pub fn wt_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let exe = std::env::current_exe().expect("current exe");
        // <target>/<profile>/deps/e2e-<hash>
        let profile_dir = exe.parent().and_then(Path::parent).expect("profile dir");
        let target = profile_dir.parent().expect("target dir");
        let profile = profile_dir
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("debug");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.args(["build", "-q", "-p", "windtunnel", "--bin", "wt"])
            .current_dir(workspace())
            .env("CARGO_TARGET_DIR", target);
        // Variables cargo sets for the test process would look like changed build inputs
        // (ring's build script watches CARGO_MANIFEST_DIR) and force a rebuild every time.
        for (k, _) in std::env::vars() {
            let package_var =
                k.starts_with("CARGO_") && k != "CARGO_HOME" && k != "CARGO_TARGET_DIR";
            if package_var || k == "OUT_DIR" {
                cmd.env_remove(k);
            }
        }
        if profile == "release" {
            cmd.arg("--release");
        }
        let status = cmd.status().expect("run cargo build");
        assert!(status.success(), "cargo build -p windtunnel failed");
        let bin = profile_dir.join("wt");
        assert!(bin.is_file(), "no wt binary at {}", bin.display());
        bin
    })
}

/// The outcome of one `wt` invocation.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    fn from(out: Output) -> Run {
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

/// A `wt` command with a clean `WT_*` environment, run in `cwd`.
pub struct Wt {
    cmd: Command,
}

impl Wt {
    pub fn new(cwd: &Path) -> Wt {
        let mut cmd = Command::new(wt_bin());
        cmd.current_dir(cwd);
        for (k, _) in std::env::vars() {
            if k.starts_with("WT_") {
                cmd.env_remove(k);
            }
        }
        Wt { cmd }
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

    pub fn env(mut self, k: &str, v: &str) -> Wt {
        self.cmd.env(k, v);
        self
    }

    pub fn run(mut self) -> Run {
        Run::from(self.cmd.output().expect("spawn wt"))
    }
}

/// Files in `dir` by name.
pub fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .expect("read dir")
        .map(|e| {
            let p = e.unwrap().path();
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&p).unwrap())
        })
        .collect()
}

/// Trace files (`*.json` whose stem has no dot) in `dir`.
pub fn traces(dir: &Path) -> Vec<serde_json::Value> {
    files(dir)
        .into_iter()
        .filter(|(n, _)| n.ends_with(".json") && !n.trim_end_matches(".json").contains('.'))
        .map(|(_, b)| serde_json::from_slice(&b).unwrap())
        .collect()
}

/// Score sidecars in `dir`.
pub fn scores(dir: &Path) -> Vec<serde_json::Value> {
    files(dir)
        .into_iter()
        .filter(|(n, _)| n.ends_with(".score.json"))
        .map(|(_, b)| serde_json::from_slice(&b).unwrap())
        .collect()
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
/// each request on its own thread (so a slow answer does not block the others).
pub struct TestServer {
    pub base: String,
    pub seen: Arc<Mutex<Vec<Seen>>>,
}

impl TestServer {
    pub fn start<F>(handler: F) -> TestServer
    where
        F: Fn(&Seen) -> (u16, String) + Send + Sync + 'static,
    {
        let server = tiny_http::Server::http("127.0.0.1:0").expect("bind test server");
        let port = server.server_addr().to_ip().expect("ip addr").port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let handler = Arc::new(handler);
        let log = seen.clone();
        std::thread::spawn(move || {
            for mut req in server.incoming_requests() {
                let mut body = String::new();
                let _ = req.as_reader().read_to_string(&mut body);
                let s = Seen {
                    method: req.method().to_string(),
                    url: req.url().to_owned(),
                    headers: req
                        .headers()
                        .iter()
                        .map(|h| (h.field.to_string(), h.value.to_string()))
                        .collect(),
                    body,
                };
                log.lock().unwrap().push(s.clone());
                let handler = handler.clone();
                std::thread::spawn(move || {
                    let (status, body) = handler(&s);
                    let resp = tiny_http::Response::from_string(body)
                        .with_status_code(status)
                        .with_header(
                            tiny_http::Header::from_bytes("Content-Type", "application/json")
                                .unwrap(),
                        );
                    let _ = req.respond(resp);
                });
            }
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

/// A port on 127.0.0.1 with nothing listening.
pub fn dead_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
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
