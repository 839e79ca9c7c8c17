//! Confined runs (docs/sandbox.md): a hostile `process` agent and a hostile world server try
//! to write outside their run's directory, read a planted credential, connect to a loopback
//! port that is not their run's, hold thousands of processes and allocate 16 GiB — each
//! refused by the kernel, the run still judged on what the agent did, nothing changed outside
//! the run, and the trace naming the confinement. The same programs with `--sandbox off`
//! succeed, so the test can fail.

use std::path::Path;

use serde_json::Value;

use crate::harness::*;

/// The attempts a hostile program makes, as its environment (`tests/agents/hostile.py`).
struct Targets {
    outside: std::path::PathBuf,
    listener: std::net::TcpListener,
    _outside_dir: tempfile::TempDir,
}

impl Targets {
    /// A credential planted under the test's `HOME` (`dir`, as the harness sets it), a file
    /// beside it, a path outside every run, and a listening port no run owns.
    fn plant(dir: &Path) -> Targets {
        std::fs::create_dir_all(dir.join(".ssh")).unwrap();
        std::fs::write(dir.join(".ssh/id_ed25519"), "PLANTED-KEY").unwrap();
        std::fs::write(dir.join("notes.txt"), "readable").unwrap();
        let outside_dir = tmp();
        Targets {
            outside: outside_dir.path().join("escaped.txt"),
            listener: std::net::TcpListener::bind("127.0.0.1:0").unwrap(),
            _outside_dir: outside_dir,
        }
    }

    /// TOML `key = "value"` lines of the hostile program's environment: `forks` processes at
    /// once, `gib` GiB allocated.
    fn env(&self, dir: &Path, forks: u32, gib: u32) -> String {
        let port = self.listener.local_addr().unwrap().port();
        [
            ("HOSTILE_OUTSIDE", self.outside.display().to_string()),
            (
                "HOSTILE_PLANTED",
                dir.join(".ssh/id_ed25519").display().to_string(),
            ),
            (
                "HOSTILE_BESIDE",
                dir.join("notes.txt").display().to_string(),
            ),
            ("HOSTILE_PORT", port.to_string()),
            ("HOSTILE_FORKS", forks.to_string()),
            ("HOSTILE_ALLOC_GIB", gib.to_string()),
        ]
        .iter()
        .map(|(k, v)| format!("{k} = {v:?}\n"))
        .collect()
    }
}

fn hostile() -> String {
    workspace()
        .join("tests/agents/hostile.py")
        .display()
        .to_string()
}

/// What each attempt came to, from the program's JSON (`{"attempted": {...}}`).
fn attempted(v: &Value) -> std::collections::BTreeMap<String, String> {
    v["attempted"]
        .as_object()
        .unwrap_or_else(|| panic!("no attempts in {v}"))
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
        .collect()
}

/// What a confined program must be refused.
const FORBIDDEN: [&str; 5] = [
    "write_outside",
    "read_secret",
    "connect_other_port",
    "fork",
    "allocate",
];

fn refused(seen: &std::collections::BTreeMap<String, String>, what: &str) {
    let said = seen
        .get(what)
        .unwrap_or_else(|| panic!("{what} not tried: {seen:?}"));
    assert!(said.starts_with("refused"), "{what}: {said} ({seen:?})");
}

fn allowed(seen: &std::collections::BTreeMap<String, String>, what: &str) {
    assert_eq!(
        seen.get(what).map(String::as_str),
        Some("ok"),
        "{what}: {seen:?}"
    );
}

/// A pack of one scenario whose run passes when the agent's reply says it attempted.
fn pack(dir: &Path, world: &str) -> std::path::PathBuf {
    write_pack(
        dir,
        &[(
            "h.toml",
            &format!(
                "id = \"h\"\nruns = 1\nturns = [\"go\"]\n[expect.outcome]\nreply_contains = [\"attempted\"]\n{world}"
            ),
        )],
    )
}

#[test]
fn a_hostile_agent_is_refused_by_the_kernel_and_the_trace_names_its_confinement() {
    let dir = tmp();
    let targets = Targets::plant(dir.path());
    let python = agent_python().display().to_string();
    let agent = |forks: u32, gib: u32| {
        agent_file(
            dir.path(),
            "hostile.toml",
            &format!(
                "label = \"hostile\"\nruntime = \"process\"\ncommand = [{python:?}, {:?}, \"agent\", \"{{input}}\"]\nmcp = false\nturn_timeout_s = 60.0\n[env]\n{}",
                hostile(),
                targets.env(dir.path(), forks, gib)
            ),
        )
    };
    let pack = pack(dir.path(), "");
    // Confined (the default): 2,000 processes against the limit of 1,024; 16 GiB against 16.
    let r = Wt::new(dir.path())
        .args(["run", "--out", "runs"])
        .pack(&pack)
        .agent(&agent(2000, 16))
        .run();
    assert_eq!(r.code, 0, "the run is judged on what the agent did: {r}");
    let trace = &traces(&dir.path().join("runs"))[0];
    let reply: Value = serde_json::from_str(trace["turns"][0]["reply"].as_str().unwrap()).unwrap();
    let seen = attempted(&reply);
    for what in FORBIDDEN {
        refused(&seen, what);
    }
    allowed(&seen, "write_scratch");
    allowed(&seen, "read_beside");
    assert!(
        !targets.outside.exists(),
        "a file was written outside the run"
    );
    let sandbox = &trace["processes"][0]["sandbox"];
    assert_eq!(sandbox["mode"], "auto", "{sandbox}");
    assert_eq!(sandbox["enforced"], true, "{sandbox}");
    assert_eq!(sandbox["user_namespace"], true, "{sandbox}");
    assert_eq!(sandbox["no_new_privs"], true, "{sandbox}");
    assert!(sandbox["landlock_abi"].as_u64().unwrap() >= 4, "{sandbox}");
    assert_eq!(sandbox["limits"]["processes"], 1024, "{sandbox}");
    // As root, the process limit holds by a real user of `nobody`, and the record says what
    // that costs (docs/sandbox.md).
    let root =
        std::fs::metadata("/proc/self").is_ok_and(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0);
    assert_eq!(
        sandbox.get("secure_execution").is_some_and(|v| v == true),
        root,
        "{sandbox}"
    );
    let unreadable = sandbox["unreadable"].to_string();
    assert!(unreadable.contains(".ssh"), "{sandbox}");
    // The run's directory is gone with the run.
    let wrote = sandbox["write"][0].as_str().unwrap();
    assert!(!Path::new(wrote).exists(), "{wrote} left behind");

    // Unconfined, the same attempts go through (fewer processes and bytes: this machine is
    // shared).
    let r = Wt::new(dir.path())
        .args(["run", "--out", "runs-off", "--sandbox", "off"])
        .pack(&pack)
        .agent(&agent(50, 1))
        .run();
    assert_eq!(r.code, 0, "{r}");
    let trace = &traces(&dir.path().join("runs-off"))[0];
    let reply: Value = serde_json::from_str(trace["turns"][0]["reply"].as_str().unwrap()).unwrap();
    let seen = attempted(&reply);
    for what in [
        "write_outside",
        "read_secret",
        "connect_other_port",
        "fork",
        "allocate",
        "write_scratch",
    ] {
        allowed(&seen, what);
    }
    assert!(targets.outside.exists());
    let sandbox = &trace["processes"][0]["sandbox"];
    assert_eq!(sandbox["mode"], "off", "{sandbox}");
    assert_eq!(sandbox["enforced"], false, "{sandbox}");
}

#[test]
fn a_hostile_world_server_is_confined_as_an_agent_is() {
    let dir = tmp();
    let targets = Targets::plant(dir.path());
    let python = agent_python().display().to_string();
    let world = |forks: u32, gib: u32| {
        format!(
            "[world_server]\nname = \"hostile\"\ncommand = [{python:?}, {:?}, \"world\"]\nstate = {{ tool = \"state\" }}\nstart_timeout_s = 60.0\n[world_server.env]\n{}",
            hostile(),
            targets.env(dir.path(), forks, gib)
        )
    };
    // An agent that answers and calls nothing: the run is judged on its reply.
    let agent = agent_file(
        dir.path(),
        "quiet.toml",
        &format!(
            "label = \"quiet\"\nruntime = \"process\"\ncommand = [{python:?}, \"-c\", \"print('attempted nothing')\", \"{{input}}\"]\n"
        ),
    );
    let run = |out: &str, world: String, extra: &[&str]| {
        let _ = std::fs::remove_dir_all(dir.path().join("pack"));
        let pack = pack(dir.path(), &world);
        let r = Wt::new(dir.path())
            .args(["run", "--out", out])
            .args(extra)
            .pack(&pack)
            .agent(&agent)
            .run();
        assert_eq!(r.code, 0, "{r}");
        traces(&dir.path().join(out)).remove(0)
    };
    let trace = run("runs", world(2000, 16), &[]);
    let seen = attempted(&trace["world"]["after"]);
    for what in FORBIDDEN {
        refused(&seen, what);
    }
    allowed(&seen, "write_scratch");
    assert!(!targets.outside.exists());
    let sandbox = &trace["world"]["server"]["sandbox"];
    assert_eq!(sandbox["enforced"], true, "{sandbox}");
    assert_eq!(sandbox["connect_ports"], serde_json::json!([]), "{sandbox}");

    let trace = run("runs-off", world(50, 1), &["--sandbox", "off"]);
    let seen = attempted(&trace["world"]["after"]);
    for what in ["write_outside", "read_secret", "connect_other_port", "fork"] {
        allowed(&seen, what);
    }
    assert_eq!(trace["world"]["server"]["sandbox"]["enforced"], false);
}

#[test]
fn require_refuses_in_one_line_where_the_kernel_cannot_enforce_every_rule() {
    let dir = tmp();
    let r = Wt::new(dir.path())
        .args(["run", "--out", "runs", "--sandbox", "require"])
        .env("WT_SANDBOX_SIMULATE_NO_LANDLOCK", "1")
        .run();
    assert_eq!(r.code, 2, "{r}");
    assert_eq!(r.stderr.trim().lines().count(), 1, "{r}");
    assert!(
        r.stderr.contains("--sandbox require") && r.stderr.contains("Landlock"),
        "{r}"
    );
    assert!(!dir.path().join("runs").exists());
    // Where the kernel can, `require` runs, and `wt doctor` says what it enforces.
    let r = Wt::new(dir.path())
        .args(["run", "--out", "runs", "--sandbox", "require"])
        .run();
    assert_eq!(r.code, 0, "{r}");
    let r = Wt::new(dir.path()).args(["doctor"]).run();
    assert!(
        r.stdout.contains("sandbox") && r.stdout.contains("Landlock ABI"),
        "{r}"
    );
}

/// An isolated hook's process is confined as an agent is, with no port at all: it writes only
/// its own temporary directory and what its `WT_<NAME>_SANDBOX_WRITE` names, reads no
/// credential, connects nowhere unless `WT_<NAME>_SANDBOX_NETWORK=allow`. With `--sandbox
/// off`, and in `wt`'s own process (not confined: docs/sandbox.md), the attempts go through.
#[test]
fn an_isolated_hook_is_confined_and_its_settings_open_what_it_needs() {
    let dir = tmp();
    let targets = Targets::plant(dir.path());
    let plugins = plugin_dir(dir.path(), &["wt_test_hostile"]);
    let port = targets.listener.local_addr().unwrap().port();
    let run = |out: &str, extra: &[&str], env: &[(&str, &Path)]| {
        let mut wt = Wt::new(dir.path())
            .args([
                "run",
                "--runs",
                "1",
                "--filter",
                "order-status",
                "--out",
                out,
            ])
            .args(["--hook", "trespasser", "--plugin-dir"])
            .arg(&plugins)
            .args(extra)
            .env("WT_TRESPASSER_OUTSIDE", &targets.outside)
            .env("WT_TRESPASSER_PLANTED", dir.path().join(".ssh/id_ed25519"))
            .env("WT_TRESPASSER_BESIDE", dir.path().join("notes.txt"))
            .env("WT_TRESPASSER_PORT", port.to_string());
        for (k, v) in env {
            wt = wt.env(k, v);
        }
        let r = wt.run();
        let out = dir.path().join(out);
        let artifact = std::fs::read_dir(&out)
            .ok()
            .into_iter()
            .flatten()
            .flatten()
            .find(|e| {
                e.file_name()
                    .to_string_lossy()
                    .ends_with(".trespasser.attempted.json")
            })
            .map(|e| serde_json::from_slice::<Value>(&std::fs::read(e.path()).unwrap()).unwrap());
        let seen: std::collections::BTreeMap<String, String> = artifact
            .iter()
            .flat_map(|a| a.as_object().unwrap())
            .filter(|(k, _)| *k != "kind")
            .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
            .collect();
        let trace = out
            .is_dir()
            .then(|| traces(&out).into_iter().next())
            .flatten();
        (r, seen, trace)
    };

    // Isolated, confined by default.
    let (r, seen, trace) = run("isolated", &["--isolate-hooks"], &[]);
    assert_eq!(r.code, 0, "{r}");
    for what in ["write_outside", "read_secret", "connect_other_port"] {
        refused(&seen, what);
    }
    allowed(&seen, "write_scratch");
    allowed(&seen, "read_beside");
    assert!(!targets.outside.exists(), "a hook wrote outside: {seen:?}");
    let sandbox = &trace.unwrap()["hooks"][0]["sandbox"];
    assert_eq!(sandbox["enforced"], true, "{sandbox}");
    assert_eq!(sandbox["user_namespace"], true, "{sandbox}");
    assert_eq!(sandbox["network"], "none", "{sandbox}");
    assert_eq!(sandbox["connect_ports"], serde_json::json!([]), "{sandbox}");
    assert_eq!(
        sandbox["limits"]["address_space_bytes"],
        2048u64 << 20,
        "the hook's own memory limit: {sandbox}"
    );
    // Its own limits, no process limit: so never the C library's secure-execution mode,
    // which would drop `LD_LIBRARY_PATH` and `TMPDIR` (its write to its temporary
    // directory above went there).
    assert!(sandbox["limits"].get("processes").is_none(), "{sandbox}");
    assert!(sandbox.get("secure_execution").is_none(), "{sandbox}");
    assert!(
        sandbox["unreadable"].to_string().contains(".ssh"),
        "{sandbox}"
    );
    // Its temporary directory is gone with its process.
    let scratch = sandbox["write"][0].as_str().unwrap();
    assert!(!Path::new(scratch).exists(), "{scratch} left behind");

    // Its settings open a directory to write and the network.
    let outside_dir = targets.outside.parent().unwrap();
    let (r, seen, trace) = run(
        "opened",
        &["--isolate-hooks"],
        &[
            ("WT_TRESPASSER_SANDBOX_WRITE", outside_dir),
            ("WT_TRESPASSER_SANDBOX_NETWORK", Path::new("allow")),
        ],
    );
    assert_eq!(r.code, 0, "{r}");
    allowed(&seen, "write_outside");
    allowed(&seen, "connect_other_port");
    refused(&seen, "read_secret");
    std::fs::remove_file(&targets.outside).unwrap();
    let sandbox = &trace.unwrap()["hooks"][0]["sandbox"];
    assert_eq!(sandbox["network"], "allow", "{sandbox}");

    // Unconfined, and in-process, the same attempts go through.
    for (out, extra) in [
        ("off", &["--isolate-hooks", "--sandbox", "off"][..]),
        ("in-process", &[][..]),
    ] {
        let (r, seen, trace) = run(out, extra, &[]);
        assert_eq!(r.code, 0, "{r}");
        for what in ["write_outside", "read_secret", "connect_other_port"] {
            allowed(&seen, what);
        }
        std::fs::remove_file(&targets.outside).unwrap();
        let hook = &trace.unwrap()["hooks"][0];
        match out {
            "off" => assert_eq!(hook["sandbox"]["enforced"], false, "{hook}"),
            _ => assert!(hook.get("sandbox").is_none(), "{hook}"),
        }
    }

    // A setting it cannot take is one line, before anything runs.
    let (r, seen, _) = run(
        "bad",
        &["--isolate-hooks"],
        &[("WT_TRESPASSER_SANDBOX_NETWORK", Path::new("open"))],
    );
    assert_eq!(r.code, 2, "{r}");
    assert!(seen.is_empty(), "{seen:?}");
    assert!(
        r.stderr
            .contains("`WT_TRESPASSER_SANDBOX_NETWORK` = \"open\": expected `none` or `allow`"),
        "{r}"
    );
}
