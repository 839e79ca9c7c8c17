//! Log lines of libraries and isolated hooks: plain, the sweep's own, and capped.

use crate::harness::*;

/// A session agent that makes `n` calls of a tool that does not exist over raw MCP, each
/// refused, then replies.
const REFUSED_CALLER: &str = r#"
import json, os, sys, urllib.request
url = os.environ["WT_MCP_URL"]
session = None
def post(body):
    global session
    headers = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
    if session:
        headers["mcp-session-id"] = session
        headers["mcp-protocol-version"] = "2025-03-26"
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers, method="POST")
    with urllib.request.urlopen(req) as resp:
        session = resp.headers.get("mcp-session-id") or session
        return resp.read()
sys.stdin.readline()
post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "a", "version": "1"}}})
post({"jsonrpc": "2.0", "method": "notifications/initialized"})
for i in range(int(sys.argv[1])):
    post({"jsonrpc": "2.0", "id": i + 1, "method": "tools/call", "params": {"name": "no_such_tool\u001b[31m", "arguments": {}}})
print(json.dumps({"type": "reply", "text": "done"}), flush=True)
sys.stdin.read()
"#;

#[test]
fn library_log_lines_are_plain_and_a_flood_of_them_is_cut_to_a_few() {
    let dir = tmp();
    let command = [
        agent_python().display().to_string(),
        "-c".to_owned(),
        REFUSED_CALLER.to_owned(),
        "40".to_owned(),
    ];
    let agent = command_agent(dir.path(), "caller", &command, "turn_timeout_s = 60");
    let r = Wt::new(dir.path())
        .args(["run", "--runs", "1", "--filter", "order-status", "--agent"])
        .arg(&agent)
        .run();
    let t = &traces(&dir.path().join("runs"))[0];
    assert_eq!(
        t["turns"][0]["reply"], "done",
        "the agent made its calls: {t}\n{r}"
    );
    // Piped stderr: no colour codes, no raw escape from the tool name.
    assert!(!r.stderr.contains('\u{1b}'), "{r}");
    let library: Vec<&str> = r.stderr.lines().filter(|l| l.contains("rmcp")).collect();
    assert!(
        !library.is_empty() && library.len() <= 5,
        "40 refused calls: {library:#?}"
    );
    assert!(
        library
            .iter()
            .any(|l| l.contains("further ones are not shown")),
        "{library:#?}"
    );
}

#[test]
fn isolated_hook_logs_are_the_sweeps_own_and_say_what_the_cap_dropped() {
    let dir = tmp();
    let plugins = plugin_dir(dir.path(), &["wt_test_hostile"]);
    let out = dir.path().join("runs");
    // Two sweeps in the same (pinned) second, into one directory.
    for _ in 0..2 {
        let r = Wt::new(dir.path())
            .args(["run", "--runs", "1", "--filter", "order-status", "--out"])
            .arg(&out)
            .args(["--hook", "chatter", "--isolate-hooks", "--plugin-dir"])
            .arg(&plugins)
            .env("WT_FIXED_CLOCK", CLOCK)
            .env("WT_CHATTER_BYTES", (2u64 << 20).to_string())
            .run();
        assert_eq!(r.code, 0, "{r}");
    }
    let logs: Vec<(String, Vec<u8>)> = files(&out)
        .into_iter()
        .filter(|(n, _)| n.ends_with(".chatter.log"))
        .collect();
    assert_eq!(
        logs.len(),
        2,
        "one log per sweep: {:?}",
        logs.iter().map(|l| &l.0).collect::<Vec<_>>()
    );
    let stems: Vec<String> = files(&out)
        .into_keys()
        .filter_map(|n| n.strip_suffix(".events.jsonl").map(str::to_owned))
        .collect();
    for (name, bytes) in &logs {
        assert!(
            stems.iter().any(|s| name.starts_with(&format!("{s}."))),
            "{name} is named after neither sweep's stem {stems:?}"
        );
        let text = String::from_utf8_lossy(bytes);
        assert!(
            bytes.len() < (1 << 20) + 4096,
            "{name}: {} bytes",
            bytes.len()
        );
        assert!(text.contains("the log is limited to 1 MiB"), "{name}");
        assert!(
            text.contains(&format!(
                "[wt: {} more bytes of output dropped]",
                (2u64 << 20) - (1 << 20)
            )),
            "{name}: {}",
            &text[text.len().saturating_sub(300)..]
        );
    }
}
