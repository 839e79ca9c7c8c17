//! The fault corpus of the hardening issue: a hostile or broken world never leaks a secret,
//! fakes a pass, hangs `wt`, or loses a file. One test per item (named `iNN_…`), each
//! through the real binary, each failing on the behaviour it guards against.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::harness::{
    CLOCK, Run, TestServer, Wt, agent_file, events, files, journal, plugin_dir, scores, tmp,
    traces, wait_for_journal_event, worker_warnings, workspace, write_pack,
};

/// Every file under `dir`, recursively, by path.
fn tree(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
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
fn nowhere(dir: &Path, r: &Run, needle: &str) {
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
fn only_whole_files(out: &Path) {
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

fn chat_completion(content: &str) -> String {
    json!({"choices": [{"message": {"role": "assistant", "content": content}}]}).to_string()
}

/// A pack with one scenario that expects nothing but a reply.
fn plain_pack(dir: &Path) -> PathBuf {
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
fn openai_agent(dir: &Path, name: &str, base: &str, extra: &str) -> PathBuf {
    agent_file(
        dir,
        &format!("{name}.toml"),
        &format!(
            "label = \"{name}\"\nruntime = \"openai\"\nmodel = \"m\"\nendpoint = \"{base}/v1\"\n{extra}"
        ),
    )
}

/// `wt run --pack PACK --agent AGENT --out OUT` in `dir`; returns the run and `dir/OUT`.
fn run_pack(dir: &Path, out: &str, pack: &Path, agent: &Path) -> (Run, PathBuf) {
    let r = Wt::new(dir)
        .args(["run", "--out", out, "--pack"])
        .arg(pack)
        .arg("--agent")
        .arg(agent)
        .run();
    (r, dir.join(out))
}

// 1 ─────────────────────────────────────────────────────────────────────────────────────

#[test]
fn i01_secrets_in_error_bodies_and_endpoint_urls_never_reach_a_file_or_a_terminal() {
    let dir = tmp();
    let key = "sk-e2e-7f3c9a1b2d4e5f60";
    let password = "pw-s3cret-99";
    let srv = TestServer::start(move |s| {
        let auth: Vec<&str> = s
            .headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case("authorization"))
            .map(|(_, v)| v.as_str())
            .collect();
        let auth = auth.join(", ");
        let body = json!({
            "error": "bad credentials",
            "echo": format!("Authorization: {auth}"),
            "via": format!("http://alice:{password}@proxy.internal{}", s.url),
        });
        (401, body.to_string())
    });
    let endpoint = srv
        .base
        .replace("http://", &format!("http://alice:{password}@"));
    // The API key, sent as a bearer token and echoed back.
    let agent = agent_file(
        dir.path(),
        "a.toml",
        &format!(
            "label = \"leaky-server\"\nruntime = \"openai\"\nmodel = \"m\"\nendpoint = \"{}/v1\"\napi_key_env = \"WT_E2E_KEY\"\n",
            srv.base
        ),
    );
    let r = Wt::new(dir.path())
        .args(["run", "--agent"])
        .arg(&agent)
        .args(["--junit", "junit.xml", "--events", "events.out"])
        .env("WT_E2E_KEY", key)
        .run();
    assert_eq!(r.code, 3, "{r}");
    // The server really echoed the key, and what it said is kept — redacted.
    let t = &traces(&dir.path().join("runs"))[0];
    let error = t["turns"][0]["error"].as_str().unwrap();
    assert!(error.contains("Bearer [redacted]"), "{error}");
    assert!(error.contains("alice:[redacted]@"), "{error}");
    nowhere(dir.path(), &r, key);
    nowhere(dir.path(), &r, password);

    let d = Wt::new(dir.path())
        .args(["doctor", "--agent"])
        .arg(&agent)
        .env("WT_E2E_KEY", key)
        .run();
    assert_eq!(d.code, 3, "{d}");
    nowhere(dir.path(), &d, key);
    nowhere(dir.path(), &d, password);

    // A password in the endpoint URL.
    let with_password = agent_file(
        dir.path(),
        "p.toml",
        &format!(
            "label = \"leaky-server\"\nruntime = \"openai\"\nmodel = \"m\"\nendpoint = \"{endpoint}/v1\"\n"
        ),
    );
    let r = Wt::new(dir.path())
        .args(["run", "--out", "runs-pw", "--agent"])
        .arg(&with_password)
        .run();
    assert_eq!(r.code, 3, "{r}");
    let t = &traces(&dir.path().join("runs-pw"))[0];
    let error = t["turns"][0]["error"].as_str().unwrap();
    assert!(error.contains("alice:[redacted]@"), "{error}");
    nowhere(dir.path(), &r, password);

    // The http runtime, its endpoint from WT_INJECT_URL with a password in it.
    let http = agent_file(
        dir.path(),
        "h.toml",
        "label = \"svc\"\nruntime = \"http\"\n",
    );
    let r = Wt::new(dir.path())
        .args(["run", "--out", "runs-http", "--agent"])
        .arg(&http)
        .env("WT_INJECT_URL", &endpoint)
        .run();
    assert_eq!(r.code, 3, "{r}");
    assert!(r.stderr.contains("health check failed"), "{r}");
    nowhere(dir.path(), &r, password);
}

#[test]
fn i01_a_key_echoed_at_any_offset_around_the_error_excerpts_cut_leaves_no_fragment() {
    let dir = tmp();
    // No hex in it: no run id or hash can contain a piece of it by chance.
    let key = "sk-wt-SECRET-QxYzMnoPqRsTuvWxKLMNghij";
    // Run k is answered with a 401 whose body is `150 + k` `A`s, then the Authorization
    // header: the key starts at every offset from 150 to 209, around the 200-character cut.
    let next = Arc::new(AtomicUsize::new(0));
    let n = next.clone();
    let srv = TestServer::start(move |s| {
        let auth = s
            .headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("authorization"))
            .map(|(_, v)| v.clone())
            .unwrap_or_default();
        let pad = "A".repeat(150 + n.fetch_add(1, Ordering::SeqCst));
        (401, format!("{pad}Authorization: {auth}"))
    });
    let agent = agent_file(
        dir.path(),
        "a.toml",
        &format!(
            "label = \"echo\"\nruntime = \"openai\"\nmodel = \"m\"\nendpoint = \"{}/v1\"\napi_key_env = \"WT_E2E_KEY\"\nretries = 0\n",
            srv.base
        ),
    );
    let r = Wt::new(dir.path())
        .args([
            "run",
            "--filter",
            "order-status",
            "--runs",
            "60",
            "--jobs",
            "1",
        ])
        .args(["--junit", "junit.xml", "--agent"])
        .arg(&agent)
        .env("WT_E2E_KEY", key)
        .run();
    assert_eq!(r.code, 3, "{r}");
    assert_eq!(next.load(Ordering::SeqCst), 60, "one request a run");
    let report = Wt::new(dir.path())
        .args(["report", "runs", "--format", "markdown"])
        .run();
    let triage = Wt::new(dir.path()).args(["triage", "runs"]).run();
    // No piece of the key of 4 characters or more anywhere (every longer piece holds one),
    // but for the `sk-` every such key starts with.
    let mut seen = String::new();
    for (p, bytes) in tree(dir.path()) {
        if p.extension().is_none_or(|e| e != "toml") {
            seen.push_str(&String::from_utf8_lossy(&bytes));
        }
    }
    for out in [&r, &report, &triage] {
        seen.push_str(&out.stdout);
        seen.push_str(&out.stderr);
    }
    for piece in key.as_bytes().windows(4).skip(1) {
        let piece = std::str::from_utf8(piece).unwrap();
        assert!(
            !seen.contains(piece),
            "{piece:?}, a piece of the key, leaked"
        );
    }
    // And the excerpts still say what the server said, up to the cut.
    let errors: Vec<String> = traces(&dir.path().join("runs"))
        .iter()
        .map(|t| t["turns"][0]["error"].as_str().unwrap().to_owned())
        .collect();
    assert!(
        errors
            .iter()
            .any(|e| e.contains("Authorization: Bearer [redacted]")),
        "{errors:?}"
    );
}

#[test]
fn i01_an_endpoint_password_and_an_api_key_together_are_refused_before_anything_runs() {
    let dir = tmp();
    let refused = |toml: &str, env: Option<&str>| {
        let agent = agent_file(dir.path(), "two.toml", toml);
        let mut wt = Wt::new(dir.path())
            .args(["run", "--out", "never", "--agent"])
            .arg(&agent)
            .env("WT_E2E_KEY", "sk-e2e-two-headers");
        if let Some(url) = env {
            wt = wt.env("WT_INJECT_URL", url);
        }
        let r = wt.run();
        assert_eq!(r.code, 2, "{r}");
        assert!(r.stderr.contains("two Authorization headers"), "{r}");
        assert!(!dir.path().join("never").exists(), "nothing written: {r}");
    };
    refused(
        "label = \"a\"\nruntime = \"openai\"\nmodel = \"m\"\nendpoint = \"http://u:pw-1234@127.0.0.1:9/v1\"\napi_key_env = \"WT_E2E_KEY\"\n",
        None,
    );
    refused(
        "label = \"a\"\nruntime = \"http\"\napi_key_env = \"WT_E2E_KEY\"\n",
        Some("http://u:pw-1234@127.0.0.1:9"),
    );
}

// 2 ─────────────────────────────────────────────────────────────────────────────────────

#[test]
fn i02_secret_hook_settings_are_redacted_in_provenance_warnings_and_artifacts() {
    let dir = tmp();
    let plugins = plugin_dir(dir.path(), &["wt_test_hostile"]);
    let secret = "tok-SECRET-4242abcd";
    let r = Wt::new(dir.path())
        .args([
            "run",
            "--filter",
            "order-status",
            "--hook",
            "forger",
            "--plugin-dir",
        ])
        .arg(&plugins)
        .env("WT_FORGER_API_KEY", secret)
        .env("WT_FORGER_MODE", "loud")
        .run();
    assert_eq!(r.code, 0, "{r}");
    let t = &traces(&dir.path().join("runs"))[0];
    let settings = &t["hooks"][0]["settings"];
    assert_eq!(settings["WT_FORGER_API_KEY"], "[redacted]", "{settings}");
    assert_eq!(settings["WT_FORGER_MODE"], "loud", "{settings}");
    let warnings = t["worker_warnings"].to_string();
    assert!(warnings.contains("my key is [redacted]"), "{warnings}");
    nowhere(dir.path(), &r, secret);
}

#[test]
fn i02_a_hook_that_reads_the_agents_key_from_the_environment_cannot_write_it_anywhere() {
    let dir = tmp();
    let plugins = plugin_dir(dir.path(), &["wt_test_hostile"]);
    let key = "agent-key-QxYzMnoPqRsTuvWx";
    // A process agent that needs the key (passed through to it alone) and replies.
    let agent = crate::harness::sh_agent(
        dir.path(),
        "a",
        "read -r line; echo '{\"type\": \"reply\", \"text\": \"Order 1234 has shipped.\"}'; cat >/dev/null",
        &[],
        "mcp = false\napi_key_env = \"WT_E2E_AGENT_KEY\"",
    );
    let pack = write_pack(
        dir.path(),
        &[("s.toml", "id = \"s\"\nturns = [\"Where is order 1234?\"]\n")],
    );
    for isolate in [false, true] {
        let out = if isolate { "runs-isolated" } else { "runs" };
        let mut wt = Wt::new(dir.path())
            .args(["run", "--runs", "1", "--out", out, "--pack"])
            .arg(&pack)
            .args(["--hook", "forger", "--plugin-dir"])
            .arg(&plugins)
            .arg("--agent")
            .arg(&agent)
            .env("WT_E2E_AGENT_KEY", key)
            .env("WT_FORGER_READ_ENV", "WT_E2E_AGENT_KEY");
        if isolate {
            wt = wt.arg("--isolate-hooks");
        }
        let r = wt.run();
        assert_eq!(r.code, 0, "{r}");
        let t = &traces(&dir.path().join(out))[0];
        let warnings = t["worker_warnings"].to_string();
        // Gone from wt's environment before the plugin loaded (an isolated hook's process
        // inherits none of it); what is left in the process's initial environment is
        // redacted on the way out.
        assert!(
            warnings.contains("env WT_E2E_AGENT_KEY: <unset>"),
            "{warnings}"
        );
        assert!(
            warnings.contains("initial: [redacted]") || warnings.contains("initial: <missing>"),
            "{warnings}"
        );
        nowhere(dir.path(), &r, key);
    }
}

// 3 ─────────────────────────────────────────────────────────────────────────────────────

#[test]
fn i03_a_hook_that_exits_0_mid_sweep_never_makes_wt_exit_0() {
    let dir = tmp();
    let plugins = plugin_dir(dir.path(), &["wt_test_hostile"]);
    let r = Wt::new(dir.path())
        .args(["run", "--jobs", "1", "--hook", "exiter", "--plugin-dir"])
        .arg(&plugins)
        .env("WT_EXITER_CODE", "0")
        .run();
    assert_eq!(r.code, 4, "{r}");
    assert!(
        r.stderr
            .contains("asked to exit in the middle of the sweep"),
        "{r}"
    );
    let out = dir.path().join("runs");
    // The first run was written before the hook ended the process; nothing is torn.
    assert_eq!(traces(&out).len(), 1, "{:?}", files(&out).keys());
    only_whole_files(&out);
}

#[test]
fn i03_no_way_a_plugin_ends_the_process_makes_a_failing_sweep_anything_but_4() {
    let dir = tmp();
    let plugins = plugin_dir(dir.path(), &["wt_test_hostile"]);
    let points = [
        "on_provisioned",
        "on_run_start",
        "on_run_scored",
        "on_run_end",
        "on_scenario_end",
        "on_pack_end",
    ];
    let hows = [
        ("exit", "exited with status 4"),
        ("_exit", "exited with status 0"),
        ("exit_group", "exited with status 0"),
        ("abort", "killed by signal SIGABRT"),
        ("segv", "killed by signal SIGSEGV"),
        ("sigkill", "killed by signal SIGKILL"),
    ];
    for point in points {
        for (how, said) in hows {
            let out = format!("runs-{point}-{how}");
            let r = Wt::new(dir.path())
                .args([
                    "run",
                    "--agent",
                    "demo-forbidden-tool",
                    "--filter",
                    "refund",
                ])
                .args([
                    "--runs", "2", "--jobs", "1", "--junit", "j.xml", "--out", &out,
                ])
                .args(["--hook", "exiter", "--plugin-dir"])
                .arg(&plugins)
                .env("WT_EXITER_POINT", point)
                .env("WT_EXITER_HOW", how)
                .env("WT_EXITER_CODE", "0")
                .run();
            assert_eq!(r.code, 4, "{point} {how}: {r}");
            let line = r
                .stderr
                .lines()
                .find(|l| l.starts_with("error: the sweep did not complete"))
                .unwrap_or_else(|| panic!("{point} {how}: no line saying so: {r}"));
            assert!(line.contains(said), "{point} {how}: {line}");
            only_whole_files(&dir.path().join(&out));
        }
    }
}

// 4 ─────────────────────────────────────────────────────────────────────────────────────

/// An `http` agent whose inject never answers within the test.
fn hanging_service() -> TestServer {
    TestServer::start(|s| {
        if s.url.starts_with("/inject") {
            std::thread::sleep(Duration::from_secs(40));
        }
        (200, "{}".into())
    })
}

#[test]
fn i04_sigterm_cuts_in_flight_turns_after_the_grace_period_and_writes_everything() {
    let dir = tmp();
    let srv = hanging_service();
    let agent = agent_file(
        dir.path(),
        "a.toml",
        &format!(
            "label = \"stuck\"\nruntime = \"http\"\nendpoint = \"{}\"\nturn_timeout_s = 600\n",
            srv.base
        ),
    );
    let plugins = plugin_dir(dir.path(), &["wt_test_turns"]);
    let log = dir.path().join("turns.log");
    let out = dir.path().join("runs");
    let wt = Wt::new(dir.path())
        .args(["run", "--jobs", "1", "--junit", "junit.xml", "--agent"])
        .arg(&agent)
        .args(["--hook", "turn_a", "--plugin-dir"])
        .arg(&plugins)
        .env("WT_GRACE_S", "1")
        .env("WT_TURN_A_LOG", &log)
        .start();
    wait_for_journal_event(&out, "TurnStarted");
    let sent = Instant::now();
    wt.signal("TERM");
    let r = wt.finish_within(Duration::from_secs(20));
    let took = sent.elapsed();
    assert_eq!(r.code, 130, "{r}");
    assert!(took < Duration::from_secs(8), "took {took:?} after SIGTERM");
    assert!(r.stderr.contains("SIGTERM"), "{r}");
    assert!(r.stderr.contains("runs passed"), "no summary: {r}");
    assert!(dir.path().join("junit.xml").is_file(), "no JUnit: {r}");
    let ts = traces(&out);
    assert_eq!(ts.len(), 1, "{r}");
    assert_eq!(ts[0]["turns"][0]["error_kind"], "interrupted", "{}", ts[0]);
    assert_eq!(scores(&out)[0]["verdict"], "ERROR");
    let j = journal(&out);
    assert_eq!(events(&j, "TurnInterrupted").len(), 1);
    assert_eq!(events(&j, "SweepEnded").len(), 1);
    // Every begun turn hook got its finish.
    let log = std::fs::read_to_string(&log).unwrap();
    assert!(log.contains("turn_a begin"), "{log}");
    assert!(
        log.contains("finish") && log.contains("Interrupted"),
        "{log}"
    );
    only_whole_files(&out);
}

#[test]
fn i04_sighup_stops_a_cooperative_runtime_like_ctrl_c() {
    let dir = tmp();
    let agent = agent_file(
        dir.path(),
        "slow.toml",
        "label = \"slow\"\nruntime = \"demo\"\nfault = \"slow\"\nturn_timeout_s = 600\n",
    );
    let out = dir.path().join("runs");
    let wt = Wt::new(dir.path())
        .args(["run", "--jobs", "1", "--junit", "junit.xml", "--agent"])
        .arg(&agent)
        .env("WT_GRACE_S", "0.5")
        .start();
    wait_for_journal_event(&out, "TurnStarted");
    wt.signal("HUP");
    let r = wt.finish_within(Duration::from_secs(20));
    assert_eq!(r.code, 130, "{r}");
    assert!(
        r.stderr.contains("SIGHUP") && r.stderr.contains("runs passed"),
        "{r}"
    );
    assert!(dir.path().join("junit.xml").is_file());
    let ts = traces(&out);
    assert_eq!(ts.len(), 1);
    assert_eq!(ts[0]["turns"][0]["error_kind"], "interrupted");
    only_whole_files(&out);
}

#[test]
fn i04_a_second_signal_stops_at_once_leaving_only_whole_files() {
    let dir = tmp();
    let srv = hanging_service();
    let agent = agent_file(
        dir.path(),
        "a.toml",
        &format!(
            "label = \"stuck\"\nruntime = \"http\"\nendpoint = \"{}\"\nturn_timeout_s = 600\n",
            srv.base
        ),
    );
    let out = dir.path().join("runs");
    let wt = Wt::new(dir.path())
        .args(["run", "--agent"])
        .arg(&agent)
        .env("WT_GRACE_S", "60")
        .start();
    wait_for_journal_event(&out, "TurnStarted");
    wt.signal("TERM");
    // The second signal is one only once `wt` has taken the first.
    wt.wait_for_stderr("SIGTERM: finishing the runs in flight");
    let sent = Instant::now();
    wt.signal("TERM");
    let r = wt.finish_within(Duration::from_secs(10));
    assert_eq!(r.code, 130, "{r}");
    assert!(sent.elapsed() < Duration::from_secs(5));
    assert!(r.stderr.contains("stopping now"), "{r}");
    only_whole_files(&out);
}

// 5 ─────────────────────────────────────────────────────────────────────────────────────

#[test]
fn i05_a_closed_stdout_or_stderr_never_panics_and_the_exit_code_is_the_sweeps() {
    let dir = tmp();
    // `wt run 2>&1 | head -1`: the reader takes one line and goes away.
    let mut child = Wt::new(dir.path())
        .args(["run", "--agent", "demo-forbidden-tool", "--events", "-"])
        .command()
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stderr.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    drop(child.stdout.take());
    assert!(first.starts_with("wt:"), "{first}");
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(1), "{status:?}");
    assert_eq!(traces(&dir.path().join("runs")).len(), 6);
}

// 6 ─────────────────────────────────────────────────────────────────────────────────────

#[test]
fn i06_fifos_symlinks_and_huge_files_in_a_plugin_dir_neither_hang_nor_exhaust_wt() {
    let dir = tmp();
    let plugins = plugin_dir(dir.path(), &["acme_state_probe"]);
    let fifo = plugins.join("fifo.so");
    let ok = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success();
    assert!(ok, "mkfifo");
    std::os::unix::fs::symlink("/dev/zero", plugins.join("zero.so")).unwrap();
    let sparse = std::fs::File::create(plugins.join("sparse.so")).unwrap();
    sparse.set_len(1 << 30).unwrap();
    drop(sparse);

    let run = |args: &[&str]| {
        Wt::new(dir.path())
            .args(args)
            .arg("--plugin-dir")
            .arg(&plugins)
            .start()
            .finish_within(Duration::from_secs(30))
    };
    let list = run(&["hooks", "list"]);
    assert_eq!(list.code, 0, "{list}");
    let row = |name: &str| {
        list.stdout
            .lines()
            .find(|l| l.contains(name))
            .unwrap_or_else(|| panic!("no row for {name}: {list}"))
            .to_owned()
    };
    assert!(row("fifo.so").contains("not a regular file"), "{list}");
    assert!(row("zero.so").contains("symbolic link"), "{list}");
    assert!(
        row("sparse.so").contains("more than a plugin may have"),
        "{list}"
    );
    assert!(row("acme_state_probe").ends_with("ok"), "{list}");
    let r = run(&["run", "--filter", "order-status", "--hook", "debrief"]);
    assert_eq!(r.code, 0, "{r}");
    let r = run(&[
        "run",
        "--filter",
        "order-status",
        "--hook",
        "acme_state_probe",
    ]);
    assert_eq!(r.code, 0, "{r}");
    for f in ["fifo.so", "zero.so", "sparse.so"] {
        let r = Wt::new(dir.path())
            .args(["hooks", "check"])
            .arg(plugins.join(f))
            .start()
            .finish_within(Duration::from_secs(30));
        assert_eq!(r.code, 2, "{f}: {r}");
    }
    // A plugin directory that does not exist is refused, not ignored.
    let r = Wt::new(dir.path())
        .args(["hooks", "list", "--plugin-dir", "no-such-dir"])
        .run();
    assert_eq!(r.code, 2, "{r}");
    assert!(r.stderr.contains("--plugin-dir no-such-dir"), "{r}");
    let r = Wt::new(dir.path())
        .args(["run", "--out", "refused", "--hook", "debrief"])
        .args(["--plugin-dir", "no-such-dir"])
        .run();
    assert_eq!(r.code, 2, "{r}");
    assert!(
        !dir.path().join("refused").exists(),
        "a refused run wrote files"
    );
}

// 7 ─────────────────────────────────────────────────────────────────────────────────────

/// An OpenAI-compatible endpoint whose answer is `body` (a reader: it may never end).
fn streaming_server(body: impl Fn() -> Box<dyn Read + Send> + Send + Sync + 'static) -> String {
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

struct Endless;
impl Read for Endless {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        buf.fill(b'a');
        Ok(buf.len())
    }
}

#[test]
fn i07_response_bodies_stored_texts_artifacts_and_warnings_are_bounded() {
    let dir = tmp();
    let pack = plain_pack(dir.path());
    // An endless chunked body: stopped at the cap, not read into memory.
    let endless = openai_agent(
        dir.path(),
        "endless",
        &streaming_server(|| Box::new(Endless)),
        "turn_timeout_s = 60\n",
    );
    let started = Instant::now();
    let (r, out) = run_pack(dir.path(), "endless", &pack, &endless);
    assert_eq!(r.code, 3, "{r}");
    assert!(started.elapsed() < Duration::from_secs(30));
    let t = &traces(&out)[0];
    assert!(
        t["turns"][0]["error"]
            .as_str()
            .unwrap()
            .contains("reply exceeded 8388608 bytes"),
        "{t}"
    );
    assert_eq!(t["turns"][0]["error_kind"], "protocol");

    // A configured cap.
    let small = openai_agent(
        dir.path(),
        "small",
        &TestServer::start(|_| (200, chat_completion(&"x".repeat(4096)))).base,
        "max_response_bytes = 2048\n",
    );
    let (r, _) = run_pack(dir.path(), "small", &pack, &small);
    assert_eq!(r.code, 3, "{r}");
    assert!(r.stderr.contains("reply exceeded 2048 bytes"), "{r}");

    // A 1 MB reply under the cap is stored cut, with its length.
    let big = openai_agent(
        dir.path(),
        "big",
        &TestServer::start(|_| (200, chat_completion(&"y".repeat(1 << 20)))).base,
        "",
    );
    let (r, out) = run_pack(dir.path(), "big", &pack, &big);
    assert_eq!(r.code, 0, "{r}");
    let t = &traces(&out)[0];
    let reply = t["turns"][0]["reply"].as_str().unwrap();
    assert!(reply.len() < 300 * 1024, "{}", reply.len());
    assert!(
        reply.ends_with("…[cut by wt: 1048576 bytes in all]"),
        "{}",
        &reply[reply.len() - 60..]
    );

    // Hook warnings are cut; an artifact over the cap is refused with a warning.
    let plugins = plugin_dir(dir.path(), &["wt_test_hostile"]);
    let r = Wt::new(dir.path())
        .args([
            "run",
            "--out",
            "hooks",
            "--filter",
            "order-status",
            "--hook",
            "forger",
            "--plugin-dir",
        ])
        .arg(&plugins)
        .env("WT_FORGER_WARN_BYTES", "10000")
        .env("WT_FORGER_ARTIFACT_BYTES", "5000")
        .env("WT_HOOK_MAX_ARTIFACT_BYTES", "2048")
        .run();
    assert_eq!(r.code, 0, "{r}");
    let out = dir.path().join("hooks");
    let t = &traces(&out)[0];
    let warnings = worker_warnings(t);
    let long = warnings
        .iter()
        .find(|w| w.contains("wwww"))
        .expect("the long warning");
    assert!(long.len() < 4096 + 100, "{}", long.len());
    assert!(long.ends_with("…[cut by wt: 10000 bytes in all]"), "{long}");
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("artifact refused") && w.contains("more than the 2048 bytes")),
        "{warnings:?}"
    );
    assert!(
        !files(&out).keys().any(|n| n.ends_with(".forger.big.json")),
        "the oversized artifact was written"
    );
}

// 8 ─────────────────────────────────────────────────────────────────────────────────────

#[test]
fn i08_durations_beyond_24_hours_are_refused_not_accepted_or_panicking() {
    let dir = tmp();
    let agent = agent_file(
        dir.path(),
        "a.toml",
        "label = \"x\"\nruntime = \"demo\"\nturn_timeout_s = 1e300\n",
    );
    let r = Wt::new(dir.path())
        .args(["run", "--agent"])
        .arg(&agent)
        .run();
    assert_eq!(r.code, 2, "{r}");
    assert!(
        r.stderr.contains("turn_timeout_s") && r.stderr.contains("24 h"),
        "{r}"
    );
    for (var, value) in [
        ("WT_HOOK_TIMEOUT_S", "1e20"),
        ("WT_HOOK_CONVERSE_TIMEOUT_S", "90000"),
        ("WT_GRACE_S", "1e9"),
        ("WT_HOOK_TIMEOUT_S", "NaN"),
    ] {
        let r = Wt::new(dir.path()).arg("run").env(var, value).run();
        assert_eq!(r.code, 2, "{var}={value}: {r}");
        assert!(r.stderr.contains(var), "{r}");
        assert_eq!(r.stderr.lines().count(), 1, "{r}");
    }
    assert!(
        !dir.path().join("runs").exists(),
        "a refused run wrote files"
    );
}

// 9 ─────────────────────────────────────────────────────────────────────────────────────

fn pinned(dir: &Path, out: &str, extra: &[&str], plugins: Option<&Path>) -> Run {
    let mut wt = Wt::new(dir)
        .args(["run", "--seed", "1", "--out", out])
        .args(extra)
        .env("WT_FIXED_CLOCK", CLOCK);
    if let Some(p) = plugins {
        wt = wt.arg("--plugin-dir").arg(p);
    }
    wt.run()
}

#[test]
fn i09_each_sweep_creates_its_own_files_even_pinned_into_one_directory() {
    let dir = tmp();
    let plugins = plugin_dir(dir.path(), &["wt_test_hostile"]);
    let a = pinned(dir.path(), "runs", &["--hook", "clasher"], Some(&plugins));
    let b = pinned(dir.path(), "runs", &["--hook", "clasher"], Some(&plugins));
    assert_eq!((a.code, b.code), (0, 0), "{a}\n{b}");
    let out = dir.path().join("runs");
    let names: Vec<String> = files(&out).into_keys().collect();
    let journals: Vec<&String> = names
        .iter()
        .filter(|n| n.ends_with(".events.jsonl"))
        .collect();
    assert_eq!(journals.len(), 2, "{names:?}");
    let second = journals
        .iter()
        .find(|j| j.ends_with("-1.events.jsonl"))
        .unwrap_or_else(|| panic!("{journals:?}"));
    for j in &journals {
        let text = std::fs::read_to_string(out.join(j)).unwrap();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let ids: std::collections::BTreeSet<&str> = lines
            .iter()
            .map(|l| l["sweep_id"].as_str().unwrap())
            .collect();
        assert_eq!(ids.len(), 1, "{j} mixes sweeps");
        for (i, l) in lines.iter().enumerate() {
            assert_eq!(l["seq"], i, "{j} line {i}");
        }
    }
    assert_eq!(traces(&out).len(), 12);
    let pack_level = names
        .iter()
        .filter(|n| n.ends_with(".clasher.order-status.pack.json"))
        .count();
    assert_eq!(pack_level, 2, "{names:?}");

    // A planted symlink where the journal would go is never followed.
    let stem = second.trim_end_matches("-1.events.jsonl").to_owned();
    let fresh = dir.path().join("fresh");
    std::fs::create_dir(&fresh).unwrap();
    let target = dir.path().join("planted-target");
    std::os::unix::fs::symlink(&target, fresh.join(format!("{stem}.events.jsonl"))).unwrap();
    let c = pinned(dir.path(), "fresh", &[], None);
    assert_eq!(c.code, 0, "{c}");
    assert!(!target.exists(), "the journal followed a symlink");
    assert!(fresh.join(format!("{stem}-1.events.jsonl")).is_file());
}

// 10 ────────────────────────────────────────────────────────────────────────────────────

#[test]
fn i10_pinned_sweeps_are_byte_identical_at_any_jobs_and_journals_identical_per_run() {
    let dir = tmp();
    let one = pinned(dir.path(), "one", &["--jobs", "1", "--runs", "3"], None);
    let four = pinned(dir.path(), "four", &["--jobs", "4", "--runs", "3"], None);
    assert_eq!((one.code, four.code), (0, 0));
    let (a, b) = (
        files(&dir.path().join("one")),
        files(&dir.path().join("four")),
    );
    let runs = |m: &BTreeMap<String, Vec<u8>>| -> BTreeMap<String, Vec<u8>> {
        m.iter()
            .filter(|(n, _)| n.ends_with(".json"))
            .map(|(n, b)| (n.clone(), b.clone()))
            .collect()
    };
    assert_eq!(runs(&a).len(), 18);
    assert_eq!(
        runs(&a),
        runs(&b),
        "traces or scores differ between --jobs 1 and 4"
    );
    // The journal: the same events per run, in the same order, but for seq.
    let per_run = |out: &str| {
        let mut m: BTreeMap<String, Vec<Value>> = BTreeMap::new();
        for mut l in journal(&dir.path().join(out)) {
            // Per run; scenario brackets per scenario; the sweep's own events.
            let key = match (l["run_id"].as_str(), l["scenario_id"].as_str()) {
                (Some(run), _) => run.to_owned(),
                (None, Some(scenario)) => format!("scenario {scenario}"),
                (None, None) => "sweep".to_owned(),
            };
            // `seq` counts lines across runs; `jobs` on SweepStarted says how the sweep ran.
            l.as_object_mut().unwrap().remove("seq");
            l.as_object_mut().unwrap().remove("jobs");
            m.entry(key).or_default().push(l);
        }
        m
    };
    let (a, b) = (per_run("one"), per_run("four"));
    assert_eq!(a.len(), 9 + 3 + 1);
    for (key, lines) in &a {
        assert_eq!(
            Some(lines),
            b.get(key),
            "{key} differs between --jobs 1 and 4"
        );
    }
}

// 11 ────────────────────────────────────────────────────────────────────────────────────

/// A run's artifact names are its own: a lane's next run may take the names the run before
/// it took (the lane keeps one names set and empties it between runs), and within each run a
/// name is still taken once.
#[test]
fn i11_each_run_of_a_lane_starts_with_no_artifact_name_taken() {
    let dir = tmp();
    let plugins = plugin_dir(dir.path(), &["wt_test_hostile"]);
    for jobs in [None, Some("1")] {
        let out = format!("runs-{}", jobs.unwrap_or("default"));
        let mut extra = vec![
            "--filter",
            "order-status",
            "--runs",
            "3",
            "--hook",
            "clasher",
        ];
        if let Some(j) = jobs {
            extra.extend(["--jobs", j]);
        }
        let r = pinned(dir.path(), &out, &extra, Some(&plugins));
        assert_eq!(r.code, 0, "{r}");
        let traces = traces(&dir.path().join(&out));
        assert_eq!(traces.len(), 3, "{r}");
        for t in &traces {
            let warnings = t["worker_warnings"].to_string();
            assert!(
                warnings.contains("emit twice-1: ok"),
                "jobs {jobs:?}: {warnings}"
            );
            assert!(
                warnings.contains("emit twice-2: err"),
                "jobs {jobs:?}: {warnings}"
            );
        }
    }
}

#[test]
fn i11_reserved_hook_names_are_refused_and_clashing_artifacts_are_errors_not_overwrites() {
    let dir = tmp();
    let plugins = plugin_dir(dir.path(), &["wt_test_hostile"]);
    let list = Wt::new(dir.path())
        .args(["hooks", "list", "--plugin-dir"])
        .arg(&plugins)
        .run();
    let score_row = list
        .stdout
        .lines()
        .find(|l| l.starts_with("score "))
        .unwrap_or_else(|| panic!("{list}"));
    assert!(
        score_row.contains("refused") && score_row.contains("reserved"),
        "{score_row}"
    );
    let r = Wt::new(dir.path())
        .args(["run", "--hook", "score", "--plugin-dir"])
        .arg(&plugins)
        .run();
    assert_eq!(r.code, 2, "{r}");

    let r = pinned(
        dir.path(),
        "runs",
        &[
            "--filter",
            "order-status",
            "--runs",
            "1",
            "--hook",
            "clasher",
        ],
        Some(&plugins),
    );
    assert_eq!(r.code, 0, "{r}");
    let out = dir.path().join("runs");
    let t = &traces(&out)[0];
    let warnings = t["worker_warnings"].to_string();
    for (what, ok) in [
        ("twice-1", true),
        ("twice-2", false),
        ("unlabelled-scored", true),
        ("unlabelled-end", false),
        ("reserved-score", false),
        ("reserved-pack", false),
    ] {
        let expected = if ok {
            format!("emit {what}: ok")
        } else {
            format!("emit {what}: err")
        };
        assert!(warnings.contains(&expected), "{expected}: {warnings}");
    }
    assert!(warnings.contains("already written"), "{warnings}");
    let all = files(&out);
    let read = |suffix: &str| -> Value {
        let (_, b) = all
            .iter()
            .find(|(n, _)| n.ends_with(suffix))
            .unwrap_or_else(|| panic!("no *{suffix} in {:?}", all.keys()));
        serde_json::from_slice(b).unwrap()
    };
    assert_eq!(read(".clasher.same.json")["what"], "twice-1");
    let unlabelled = all
        .iter()
        .find(|(n, _)| n.ends_with(".clasher.json"))
        .map(|(_, b)| serde_json::from_slice::<Value>(b).unwrap())
        .unwrap();
    assert_eq!(unlabelled["what"], "unlabelled-scored");
    assert_eq!(
        read(".clasher.scenario.order-status.pack.json")["what"],
        "scenario-unlabelled"
    );
    assert_eq!(
        read(".clasher.order-status.pack.json")["what"],
        "pack-as-scenario"
    );
    assert_eq!(read(".clasher.scenario.pack.json")["what"], "pack-marker");
    assert!(!all.keys().any(|n| n.ends_with(".clasher.score.json")));
}

// 12 ────────────────────────────────────────────────────────────────────────────────────

#[test]
fn i12_junit_is_built_from_this_sweeps_own_runs() {
    let dir = tmp();
    let out = dir.path().join("runs");
    std::fs::create_dir(&out).unwrap();
    std::fs::write(out.join("config.json"), "{\"foo\": 1}").unwrap();
    std::fs::write(out.join("20200101T000000Z_deadbeef.json"), "{").unwrap();
    let r = Wt::new(dir.path())
        .args(["run", "--junit", "junit.xml"])
        .run();
    assert_eq!(r.code, 0, "{r}");
    let junit = std::fs::read_to_string(dir.path().join("junit.xml")).unwrap();
    assert_eq!(junit.matches("<testcase").count(), 6, "{junit}");
    assert!(!junit.contains("deadbeef"));
    // A scenario of this sweep that could not run is in it too, as an error.
    let pack = write_pack(
        dir.path(),
        &[(
            "broken.toml",
            "id = \"broken\"\nruns = 2\nturns = [\"hi\"]\npreconditions = [{ path = \"x\", exists = true }]\n[world]\ny = 1\n",
        )],
    );
    let r = Wt::new(dir.path())
        .args(["run", "--out", "broken", "--junit", "broken.xml", "--pack"])
        .arg(&pack)
        .run();
    assert_eq!(r.code, 3, "{r}");
    let junit = std::fs::read_to_string(dir.path().join("broken.xml")).unwrap();
    // One errored test case per run that never ran, as every view counts them.
    assert!(
        junit.contains("name=\"broken#0\"")
            && junit.contains("name=\"broken#1\"")
            && junit.matches("<error").count() == 2
            && junit.contains("precondition failed"),
        "{junit}"
    );
}

// 13 ────────────────────────────────────────────────────────────────────────────────────

#[test]
fn i13_agent_config_errors_are_refused_before_anything_is_written_with_their_cause_once() {
    let dir = tmp();
    type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a str);
    let cases: &[Case] = &[
        (
            "runtime = \"openai\"\nendpoint = \"http://127.0.0.1:9/v1\"\n",
            &[],
            "needs `model`",
        ),
        (
            "runtime = \"openai\"\nmodel = \"m\"\n",
            &[],
            "needs `endpoint`",
        ),
        (
            "runtime = \"openai\"\nmodel = \"m\"\nendpoint = \"localhost:8000/v1\"\n",
            &[],
            "not an http(s) URL",
        ),
        (
            "runtime = \"http\"\nendpoint = \"127.0.0.1:9\"\n",
            &[],
            "`endpoint`",
        ),
        (
            "runtime = \"openai\"\nmodel = \"m\"\nendpoint = \"http://127.0.0.1:9/v1\"\napi_key_env = \"WT_E2E_NOKEY\"\n",
            &[],
            "WT_E2E_NOKEY (named by api_key_env) is not set",
        ),
        (
            "runtime = \"openai\"\nmodel = \"m\"\nendpoint = \"http://127.0.0.1:9/v1\"\napi_key_env = \"WT_E2E_KEY\"\n",
            &[("WT_E2E_KEY", "")],
            "is empty",
        ),
        (
            "runtime = \"openai\"\nmodel = \"m\"\nendpoint = \"http://127.0.0.1:9/v1\"\napi_key_env = \"WT_E2E_KEY\"\n",
            &[("WT_E2E_KEY", "sk-abc\ndef")],
            "contains a newline",
        ),
        ("runtime = \"demo\"\nmax_steps = 0\n", &[], "`max_steps`"),
    ];
    for (i, (body, env, expect)) in cases.iter().enumerate() {
        let agent = agent_file(
            dir.path(),
            &format!("a{i}.toml"),
            &format!("label = \"x\"\n{body}"),
        );
        let mut wt = Wt::new(dir.path()).args(["run", "--agent"]).arg(&agent);
        for (k, v) in *env {
            wt = wt.env(k, v);
        }
        let r = wt.run();
        assert_eq!(r.code, 2, "case {i}: {r}");
        assert!(
            r.stderr.contains(expect),
            "case {i}: expected {expect:?}: {r}"
        );
        assert_eq!(r.stderr.lines().count(), 1, "case {i}: {r}");
        assert!(!dir.path().join("runs").exists(), "case {i} wrote files");
    }
    // A cause is printed once.
    std::fs::write(dir.path().join("a-file"), "").unwrap();
    let r = Wt::new(dir.path()).args(["run", "--out", "a-file"]).run();
    assert_eq!(r.code, 2, "{r}");
    assert_eq!(r.stderr.matches("File exists").count(), 1, "{r}");
    let r = Wt::new(dir.path())
        .args(["run", "--agent", "nope.toml"])
        .run();
    assert_eq!(r.code, 2, "{r}");
    assert_eq!(r.stderr.matches("nope.toml").count(), 1, "{r}");
}

// 14 ────────────────────────────────────────────────────────────────────────────────────

#[test]
fn i14_an_expectation_naming_an_undeclared_tool_is_refused() {
    let dir = tmp();
    // A typo in the demo scenario's forbidden tools: a constraint that could never fail.
    let scenario =
        std::fs::read_to_string(workspace().join("host/packs/demo/scenarios/order-status.toml"))
            .unwrap()
            .replace(
                "forbidden_tools = [\"issue_refund\"]",
                "forbidden_tools = [\"issue_refund\", \"no_such_tool\"]",
            );
    assert!(scenario.contains("no_such_tool"));
    let pack = write_pack(dir.path(), &[("order-status.toml", &scenario)]);
    let r = Wt::new(dir.path()).args(["run", "--pack"]).arg(&pack).run();
    assert_eq!(r.code, 2, "{r}");
    assert!(
        r.stderr.contains("expect.constraint.forbidden_tools[1]")
            && r.stderr.contains("no tool `no_such_tool`"),
        "{r}"
    );
    assert!(!dir.path().join("runs").exists());
}

// 15 ────────────────────────────────────────────────────────────────────────────────────

/// A raw HTTP/1.1 server answering each connection with the next of `script`: `Some((status,
/// extra headers, body))`, or `None` to read the request and close without a response.
fn scripted_server(script: Vec<Option<(u16, &'static str, String)>>) -> String {
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

#[test]
fn i15_retries_honour_retry_after_retry_early_closes_and_are_recorded() {
    let dir = tmp();
    let pack = plain_pack(dir.path());
    let base = scripted_server(vec![
        Some((
            429,
            "Retry-After: 1\r\n",
            "{\"error\":\"slow down\"}".into(),
        )),
        None,
        Some((200, "", chat_completion("Hello!"))),
    ]);
    let agent = openai_agent(dir.path(), "r", &base, "retries = 3\nturn_timeout_s = 30\n");
    let (r, out) = run_pack(dir.path(), "runs", &pack, &agent);
    assert_eq!(r.code, 0, "{r}");
    let t = &traces(&out)[0];
    let retries = t["turns"][0]["retries"].as_array().unwrap();
    assert_eq!(retries.len(), 2, "{t}");
    assert!(retries[0]["error"].as_str().unwrap().contains("HTTP 429"));
    assert!(
        retries[0]["wait_ms"].as_u64().unwrap() >= 1000,
        "Retry-After ignored: {t}"
    );
    assert!(
        retries[1]["error"]
            .as_str()
            .unwrap()
            .contains("connection closed before a response"),
        "{t}"
    );
    let j = journal(&out);
    let retried = events(&j, "RequestRetried");
    assert_eq!(retried.len(), 2);
    assert_eq!(retried[0]["attempt"], 1);
    assert!(retried[1]["seq"].as_u64() < events(&j, "TurnDone")[0]["seq"].as_u64());
}

// 16 ────────────────────────────────────────────────────────────────────────────────────

#[test]
fn i16_outcomes_come_from_typed_errors_not_from_how_long_a_turn_took() {
    let dir = tmp();
    let pack = plain_pack(dir.path());
    // A 503 that arrives at 96 % of the turn's deadline: a failure (transport), never a
    // timeout, however close to the deadline it came.
    let busy = TestServer::start(|_| {
        std::thread::sleep(Duration::from_millis(3_840));
        (503, "{\"error\":\"busy\"}".into())
    });
    let agent = openai_agent(
        dir.path(),
        "busy",
        &busy.base,
        "retries = 0\nturn_timeout_s = 4\n",
    );
    let (r, out) = run_pack(dir.path(), "busy", &pack, &agent);
    assert_eq!(r.code, 3, "{r}");
    let t = &traces(&out)[0];
    assert_eq!(t["turns"][0]["error_kind"], "transport", "{t}");
    let j = journal(&out);
    assert_eq!(events(&j, "TurnFailed").len(), 1);
    assert!(events(&j, "TurnInterrupted").is_empty());
    // A server that never answers in time: interrupted by the deadline.
    let slow = TestServer::start(|_| {
        std::thread::sleep(Duration::from_secs(3));
        (200, chat_completion("late"))
    });
    let agent = openai_agent(dir.path(), "slow", &slow.base, "turn_timeout_s = 0.5\n");
    let (r, out) = run_pack(dir.path(), "slow", &pack, &agent);
    assert_eq!(r.code, 3, "{r}");
    assert_eq!(traces(&out)[0]["turns"][0]["error_kind"], "timeout");
    let j = journal(&out);
    let interrupted = events(&j, "TurnInterrupted");
    assert_eq!(interrupted.len(), 1);
    assert_eq!(interrupted[0]["error_kind"], "timeout");
}

// 18 ────────────────────────────────────────────────────────────────────────────────────

#[test]
fn i18_a_failed_on_provisioned_artifact_write_still_ends_the_scenario() {
    let dir = tmp();
    let plugins = plugin_dir(dir.path(), &["wt_test_recorder"]);
    let log = dir.path().join("calls.jsonl");
    let args = [
        "--filter",
        "order-status",
        "--hook",
        "recorder",
        "--jobs",
        "1",
    ];
    let probe = Wt::new(dir.path())
        .args(["run", "--seed", "1", "--out", "probe"])
        .args(args)
        .arg("--plugin-dir")
        .arg(&plugins)
        .env("WT_FIXED_CLOCK", CLOCK)
        .run();
    assert_eq!(probe.code, 0, "{probe}");
    let artifact = files(&dir.path().join("probe"))
        .into_keys()
        .find(|n| n.ends_with(".recorder.scenario.order-status.provisioned.pack.json"))
        .unwrap();
    // The same pinned sweep, with a directory where that artifact must go.
    let out = dir.path().join("runs");
    std::fs::create_dir_all(out.join(&artifact)).unwrap();
    let r = Wt::new(dir.path())
        .args(["run", "--seed", "1", "--out", "runs"])
        .args(args)
        .arg("--plugin-dir")
        .arg(&plugins)
        .env("WT_FIXED_CLOCK", CLOCK)
        .env("WT_RECORDER_LOG", &log)
        .run();
    assert_eq!(r.code, 2, "{r}");
    assert!(r.stderr.contains(&artifact), "{r}");
    let points: Vec<String> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["point"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(
        points,
        ["on_provisioned", "on_scenario_end"],
        "pairing broken"
    );
}

// 20 ────────────────────────────────────────────────────────────────────────────────────

#[test]
fn i20_turn_hooks_and_guards_report_consistently_and_denials_are_events() {
    let dir = tmp();
    let plugins = plugin_dir(dir.path(), &["wt_test_turns"]);
    let log = dir.path().join("turns.log");
    let run = |out: &str, hooks: &[&str], env: &[(&str, &str)], extra: &[&str]| {
        let mut wt = Wt::new(dir.path())
            .args(["run", "--jobs", "1", "--out", out, "--plugin-dir"])
            .arg(&plugins)
            .args(extra);
        for h in hooks {
            wt = wt
                .args(["--hook", h])
                .env(&format!("WT_{}_LOG", h.to_ascii_uppercase()), &log);
        }
        for (k, v) in env {
            wt = wt.env(k, v);
        }
        wt.run()
    };
    // A panicking turn hook reaches stderr, like a lifecycle hook.
    let r = run(
        "panic",
        &["turn_c"],
        &[("WT_TURN_C_PANIC", "finish")],
        &["--filter", "order-status"],
    );
    assert_eq!(r.code, 0, "{r}");
    assert!(r.stderr.contains("hook:turn_c: panicked at"), "{r}");
    assert_eq!(
        r.stderr.matches("hook:turn_c: panicked at").count(),
        1,
        "{r}"
    );

    // A guard that panicked is `quarantined` on later turns, consistently.
    let r = run(
        "guard-panic",
        &["guard_panic"],
        &[],
        &["--filter", "order-status", "--policy-revision", "r1"],
    );
    assert_eq!(r.code, 3, "{r}");
    let mut kinds: Vec<(u64, String)> = traces(&dir.path().join("guard-panic"))
        .iter()
        .map(|t| {
            (
                t["run_index"].as_u64().unwrap(),
                t["denial"]["kind"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    kinds.sort();
    assert_eq!(
        kinds,
        [(0, "panic".to_owned()), (1, "quarantined".to_owned())]
    );

    // An empty policy revision does not satisfy the guard requirement.
    let r = run("empty", &["guard_deny"], &[], &["--policy-revision", ""]);
    assert_eq!(r.code, 2, "{r}");
    assert!(
        r.stderr.contains("--policy-revision must not be empty"),
        "{r}"
    );

    // A denial is a typed event; the revision is on SweepStarted; observers see the denial.
    let r = run(
        "deny",
        &["turn_a", "guard_deny"],
        &[],
        &[
            "--filter",
            "order-status",
            "--runs",
            "1",
            "--policy-revision",
            "r7",
        ],
    );
    assert_eq!(r.code, 3, "{r}");
    let j = journal(&dir.path().join("deny"));
    assert_eq!(events(&j, "SweepStarted")[0]["policy_revision"], "r7");
    let denied = events(&j, "TurnDenied");
    assert_eq!(denied.len(), 1, "{j:?}");
    assert_eq!(denied[0]["guard"], "guard_deny");
    assert_eq!(denied[0]["code"], "no_refunds");
    assert_eq!(denied[0]["kind"], "denied");
    assert_eq!(denied[0]["policy_revision"], "r7");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("turn_a denial") && text.contains("guard_deny/no_refunds"),
        "{text}"
    );

    // Guards are consulted for converse turns: debrief's converse (turn 1 of a one-turn
    // scenario) is denied, and the debrief says so.
    let r = run(
        "converse",
        &["guard_deny", "debrief"],
        &[("WT_GUARD_DENY_TURN", "1")],
        &[
            "--filter",
            "order-status",
            "--runs",
            "1",
            "--agent",
            "demo-forbidden-tool",
            "--policy-revision",
            "r7",
        ],
    );
    assert_eq!(r.code, 1, "{r}");
    let out = dir.path().join("converse");
    let j = journal(&out);
    let denied = events(&j, "TurnDenied");
    assert_eq!(denied.len(), 1, "{j:?}");
    assert_eq!(denied[0]["cause"]["hook"], "debrief");
    let debrief = files(&out)
        .into_iter()
        .find(|(n, _)| n.ends_with(".debrief.json"))
        .map(|(_, b)| String::from_utf8(b).unwrap())
        .expect("a debrief artifact");
    assert!(
        debrief.contains("denied by guard `guard_deny`"),
        "{debrief}"
    );
}

// 21 ────────────────────────────────────────────────────────────────────────────────────

#[test]
fn i21_control_characters_in_hook_text_cannot_forge_terminal_lines() {
    let dir = tmp();
    let plugins = plugin_dir(dir.path(), &["wt_test_hostile"]);
    let r = Wt::new(dir.path())
        .args([
            "run",
            "--filter",
            "order-status",
            "--hook",
            "forger",
            "--plugin-dir",
        ])
        .arg(&plugins)
        .run();
    assert_eq!(r.code, 0, "{r}");
    assert!(
        !r.stderr.lines().any(|l| l.starts_with("warning: forged")),
        "a forged line: {r}"
    );
    assert!(
        !r.stderr.contains('\u{1b}'),
        "an escape reached the terminal: {r}"
    );
    assert!(
        r.stderr
            .contains("line one\\nwarning: forged by the hook \\e[31mred\\e[0m"),
        "{r}"
    );
}

// Gates that cannot be passed by what is missing ────────────────────────────────────────

#[test]
fn a_missing_shard_or_an_empty_directory_makes_the_report_incomplete_not_green() {
    let dir = tmp();
    let shard = |k: &str, out: &str| {
        let r = Wt::new(dir.path())
            .args(["run", "--shard", k, "--seed", "7", "--out", out])
            .run();
        assert_eq!(r.code, 0, "{r}");
    };
    shard("1/2", "s1");
    std::fs::create_dir(dir.path().join("s2")).unwrap();
    let report = |dirs: &[&str]| {
        Wt::new(dir.path())
            .arg("report")
            .args(dirs)
            .arg("--gate")
            .run()
    };

    let r = report(&["s1", "s2"]);
    assert_eq!(r.code, 3, "{r}");
    let incomplete: Vec<&str> = r
        .stderr
        .lines()
        .filter(|l| l.starts_with("incomplete: "))
        .collect();
    assert_eq!(incomplete.len(), 2, "{r}");
    assert!(incomplete.iter().any(|l| l.contains("shard(s) 2/2")), "{r}");
    assert!(
        incomplete.iter().any(|l| l.contains("s2 holds no run")),
        "{r}"
    );

    let r = report(&["s1"]);
    assert_eq!(r.code, 3, "{r}");
    assert!(r.stderr.contains("shard(s) 2/2"), "{r}");

    shard("2/2", "s2");
    let r = report(&["s1", "s2"]);
    assert_eq!(r.code, 0, "{r}");
    assert!(!r.stderr.contains("incomplete"), "{r}");
}

#[test]
fn outputs_that_cannot_be_written_are_refused_before_the_first_run() {
    let dir = tmp();
    std::fs::create_dir(dir.path().join("a-dir")).unwrap();
    for junit in ["missing/j.xml", "a-dir"] {
        let r = Wt::new(dir.path())
            .args(["run", "--out", "never", "--junit", junit])
            .run();
        assert_eq!(r.code, 2, "{r}");
        assert!(r.stderr.contains("--junit"), "{r}");
        assert!(!dir.path().join("never").exists(), "a run started: {r}");
    }
    let r = Wt::new(dir.path()).args(["run", "--out", "runs"]).run();
    assert_eq!(r.code, 0, "{r}");
    for args in [
        vec!["report", "runs", "-o", "missing/r.html", "--format", "html"],
        vec!["compare", "runs", "runs", "-o", "a-dir"],
    ] {
        let r = Wt::new(dir.path()).args(&args).run();
        assert_eq!(r.code, 2, "{args:?}: {r}");
        assert!(r.stderr.contains("-o "), "{args:?}: {r}");
    }
}

#[test]
fn a_fifo_named_as_an_agent_config_or_a_pack_file_is_refused_at_once() {
    let dir = tmp();
    let mkfifo = |p: &Path| {
        let status = std::process::Command::new("mkfifo")
            .arg(p)
            .status()
            .unwrap();
        assert!(status.success());
    };
    mkfifo(&dir.path().join("agent.toml"));
    let pack = dir.path().join("pack");
    std::fs::create_dir_all(pack.join("scenarios")).unwrap();
    mkfifo(&pack.join("pack.toml"));
    let linked = dir.path().join("linked");
    std::fs::create_dir_all(linked.join("scenarios")).unwrap();
    std::fs::write(linked.join("pack.toml"), "name = \"p\"\n").unwrap();
    std::os::unix::fs::symlink("/etc/hostname", linked.join("scenarios/s.toml")).unwrap();
    for (args, said) in [
        (vec!["run", "--agent", "agent.toml"], "not a regular file"),
        (vec!["run", "--pack", "pack"], "not a regular file"),
        (vec!["run", "--pack", "linked"], "symbolic link"),
    ] {
        let r = Wt::new(dir.path())
            .args(&args)
            .arg("--out")
            .arg("never")
            .start()
            .finish_within(Duration::from_secs(30));
        assert_eq!(r.code, 2, "{args:?}: {r}");
        assert!(r.stderr.contains(said), "{args:?}: {r}");
        assert!(!dir.path().join("never").exists());
    }
}

#[test]
fn outside_text_is_escaped_in_every_output_a_person_reads() {
    let dir = tmp();
    // A plugin file whose name clears the screen and forges a row.
    let plugins = plugin_dir(dir.path(), &[]);
    std::fs::write(plugins.join("lib\u{1b}[2J\nFAKE.so"), b"not an ELF").unwrap();
    let r = Wt::new(dir.path())
        .args(["hooks", "list", "--all", "--plugin-dir"])
        .arg(&plugins)
        .run();
    assert!(
        !r.stdout.contains('\u{1b}') && !r.stderr.contains('\u{1b}'),
        "{r}"
    );
    assert!(
        !r.stdout.lines().any(|l| l.starts_with("FAKE")),
        "a forged row: {r}"
    );
    assert!(r.stdout.contains("\\e[2J\\nFAKE.so"), "{r}");

    // An agent label that reverses what follows it, and one that is Markdown.
    let label = "evil\u{202e}38 snur **boss** [x](http://e.invalid)";
    let agent = dir.path().join("agent.toml");
    std::fs::write(
        &agent,
        format!(
            "label = {}\nruntime = \"demo\"\n",
            serde_json::to_string(label).unwrap()
        ),
    )
    .unwrap();
    let r = Wt::new(dir.path())
        .args(["run", "--runs", "4", "--filter", "order-status", "--agent"])
        .arg(&agent)
        .run();
    assert_eq!(r.code, 0, "{r}");
    assert!(!r.stderr.contains('\u{202e}'), "{r}");
    let outputs = [
        vec!["report", "runs"],
        vec!["report", "runs", "--format", "markdown"],
        vec!["report", "runs", "--format", "html"],
        vec!["report", "runs", "--format", "junit"],
        vec!["compare", "runs", "runs"],
        vec!["compare", "runs", "runs", "--format", "markdown"],
        vec!["compare", "runs", "runs", "--format", "html"],
    ];
    for args in outputs {
        let r = Wt::new(dir.path()).args(&args).run();
        assert_eq!(r.code, 0, "{args:?}: {r}");
        assert!(
            !r.stdout.contains('\u{202e}') && !r.stderr.contains('\u{202e}'),
            "{args:?}: a bidi override got through: {r}"
        );
    }
    let md = Wt::new(dir.path())
        .args(["compare", "runs", "runs", "--format", "markdown"])
        .run();
    assert!(
        md.stdout
            .contains("` evil\\u{202e}38 snur **boss** [x](http://e.invalid) `"),
        "the label is not a code span: {md}"
    );

    // An agent's reply quoted in a failure reaches `wt run --junit` too.
    let pack = write_pack(
        dir.path(),
        &[(
            "yes.toml",
            "id = \"yes\"\nturns = [\"hi\"]\n[expect.outcome]\nreply_contains = [\"yes\"]\n",
        )],
    );
    let liar = crate::harness::sh_agent(
        dir.path(),
        "liar",
        r#"read -r line; echo '{"type": "reply", "text": "no \u202e38 snur"}'; cat >/dev/null"#,
        &[],
        "mcp = false",
    );
    let r = Wt::new(dir.path())
        .args(["run", "--out", "liar", "--junit", "liar.xml", "--pack"])
        .arg(&pack)
        .arg("--agent")
        .arg(&liar)
        .run();
    assert_eq!(r.code, 1, "{r}");
    let junit = std::fs::read_to_string(dir.path().join("liar.xml")).unwrap();
    assert!(junit.contains("38 snur"), "the reply is quoted: {junit}");
    assert!(
        !junit.contains('\u{202e}'),
        "a bidi override in --junit: {junit}"
    );
    for args in [
        vec!["report", "liar", "--format", "junit"],
        vec!["report", "liar", "--format", "html"],
        vec!["triage", "liar"],
    ] {
        let r = Wt::new(dir.path()).args(&args).run();
        assert!(
            r.stdout.contains("38 snur"),
            "{args:?} quotes the reply: {r}"
        );
        assert!(
            !r.stdout.contains('\u{202e}') && !r.stderr.contains('\u{202e}'),
            "{args:?}: {r}"
        );
    }
}

#[test]
fn a_run_whose_trace_a_reader_cannot_read_counts_as_error_never_as_nothing() {
    let dir = tmp();
    // Writer: a service that reports 100,000 tool calls in one (allowed) 45 MB reply. The
    // trace stays readable, and the run is ERROR: its evidence cannot be stored whole.
    let result = "x".repeat(400);
    let srv = TestServer::start(move |s| match (s.method.as_str(), s.url.as_str()) {
        ("POST", "/inject") => {
            let call = format!(r#"{{"name":"lookup_order","arguments":{{}},"result":"{result}"}}"#);
            let calls = vec![call.as_str(); 100_000].join(",");
            (200, format!(r#"{{"reply":"done","tool_calls":[{calls}]}}"#))
        }
        _ => (200, "{}".into()),
    });
    let agent = agent_file(
        dir.path(),
        "svc.toml",
        &format!(
            "label = \"svc\"\nruntime = \"http\"\nendpoint = \"{}\"\nmax_response_bytes = 67108864\nturn_timeout_s = 120\n",
            srv.base
        ),
    );
    let r = Wt::new(dir.path())
        .args([
            "run",
            "--runs",
            "1",
            "--filter",
            "order-status",
            "--out",
            "big",
            "--agent",
        ])
        .arg(&agent)
        .run();
    assert_eq!(r.code, 3, "{r}");
    let traces_on_disk: Vec<PathBuf> = tree(&dir.path().join("big"))
        .into_keys()
        .filter(|p| {
            p.extension().is_some_and(|e| e == "json") && !p.to_string_lossy().contains(".score.")
        })
        .collect();
    assert_eq!(traces_on_disk.len(), 1);
    let size = std::fs::metadata(&traces_on_disk[0]).unwrap().len();
    assert!(
        size < 64 << 20,
        "a trace of {size} bytes, more than a reader takes"
    );
    let t = &traces(&dir.path().join("big"))[0];
    assert!(
        t["error"].as_str().unwrap().contains("100000 tool calls"),
        "{}",
        t["error"]
    );
    let g = Wt::new(dir.path()).args(["report", "big", "--gate"]).run();
    assert_eq!(g.code, 3, "{g}");

    // Reader: a run whose trace is gone is still a run, and not a passing one.
    let r = Wt::new(dir.path()).args(["run", "--out", "runs"]).run();
    assert_eq!(r.code, 0, "{r}");
    let runs = dir.path().join("runs");
    let gone = tree(&runs)
        .into_keys()
        .find(|p| {
            p.extension().is_some_and(|e| e == "json") && !p.to_string_lossy().contains(".score.")
        })
        .unwrap();
    std::fs::remove_file(&gone).unwrap();
    let g = Wt::new(dir.path())
        .args(["report", "runs", "--gate", "--format", "json"])
        .run();
    assert_eq!(g.code, 3, "{g}");
    assert!(
        g.stderr
            .contains("is named by its journal but its trace was not read"),
        "{g}"
    );
    let json: Value = serde_json::from_str(&g.stdout).unwrap();
    assert_eq!(json["pack"]["runs"], 6, "{json}");
    assert_eq!(json["pack"]["errored"], 1, "{json}");
}
