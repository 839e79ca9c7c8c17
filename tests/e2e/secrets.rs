//! Secrets never reach a file, a terminal or a hook: error bodies, endpoint URLs, hook
//! settings and the agent's key, through the real binary.

use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::fixtures::*;
use crate::harness::*;

#[test]
fn secrets_in_error_bodies_and_endpoint_urls_never_reach_a_file_or_a_terminal() {
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
fn a_key_echoed_at_any_offset_around_the_error_excerpts_cut_leaves_no_fragment() {
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
fn an_endpoint_password_and_an_api_key_together_are_refused_before_anything_runs() {
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

#[test]
fn secret_hook_settings_are_redacted_in_provenance_warnings_and_artifacts() {
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
fn a_hook_that_reads_the_agents_key_from_the_environment_cannot_write_it_anywhere() {
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
