//! `wt view` through the real binary: started on real sweeps, read through its JSON API and
//! rendered by a real browser (headless Chromium, scripts on).

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::fixtures::{openai_agent, plain_pack};
use crate::harness::{
    TestServer, Wt, console_lines, dump_url, poll_until, scores, signal, tmp, trace_paths, traces,
    wt,
};

/// A `wt view` serving in the background on a free port; killed when dropped.
pub(crate) struct View {
    child: Option<Child>,
    url: String,
    stderr: PathBuf,
}

impl View {
    pub(crate) fn start(dir: &Path, args: &[&str]) -> View {
        let stderr = dir.join(format!("view-{}.err", args.join("_").replace('/', "_")));
        let mut child = wt(dir)
            .arg("view")
            .args(args)
            .args(["--port", "0"])
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .expect("spawn wt view");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert!(
            line.starts_with("http://") && line.ends_with("/\n"),
            "the first line is the URL: {line:?}; stderr: {}",
            std::fs::read_to_string(&stderr).unwrap_or_default()
        );
        View {
            child: Some(child),
            url: line.trim_end().trim_end_matches('/').to_owned(),
            stderr,
        }
    }

    fn get(&self, path: &str) -> reqwest::blocking::Response {
        reqwest::blocking::Client::new()
            .get(format!("{}{path}", self.url))
            .send()
            .unwrap()
    }

    pub(crate) fn api(&self, path: &str) -> Value {
        let r = self.get(path);
        assert_eq!(r.status(), 200, "{path}");
        serde_json::from_str(&r.text().unwrap()).unwrap()
    }

    /// The page at `path` as Chromium renders it; no console message allowed (a CSP
    /// violation or a script error would be one).
    pub(crate) fn dom(&self, dir: &Path, path: &str) -> String {
        let (dom, stderr) = dump_url(dir, &format!("{}{path}", self.url));
        assert!(
            console_lines(&stderr).is_empty(),
            "console on {path}: {:?}",
            console_lines(&stderr)
        );
        dom
    }
}

impl Drop for View {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The run ids of a page's run rows, in order.
fn listed(dom: &str) -> Vec<String> {
    dom.split("data-run-id=\"")
        .skip(1)
        .map(|s| s[..s.find('"').unwrap()].to_owned())
        .collect()
}

fn run_ids(dir: &Path) -> BTreeSet<String> {
    traces(dir)
        .iter()
        .map(|t| t["run_id"].as_str().unwrap().to_owned())
        .collect()
}

fn sweep(dir: &Path, out: &str, args: &[&str]) -> PathBuf {
    let r = Wt::new(dir).args(["run", "--out", out]).args(args).run();
    assert!(r.code == 0 || r.code == 1, "wt run {args:?}: {r}");
    dir.join(out)
}

#[test]
fn the_list_shows_every_run_of_a_ten_thousand_run_sweep_page_by_page() {
    let dir = tmp();
    let runs = sweep(dir.path(), "big", &["--runs", "3334", "--jobs", "2"]);
    let want = run_ids(&runs);
    assert_eq!(want.len(), 10_002);
    let view = View::start(dir.path(), &["big"]);

    let mut seen = Vec::new();
    let mut offset = 0;
    loop {
        let dom = view.dom(dir.path(), &format!("/?limit=1000&offset={offset}"));
        let page = listed(&dom);
        if offset == 0 {
            assert!(
                dom.contains("Runs 1–1000 of 10002"),
                "the count of all runs"
            );
        }
        if page.is_empty() {
            break;
        }
        assert!(page.len() <= 1000);
        // The pager links to the next page while there is one.
        assert_eq!(
            dom.contains("rel=\"next\""),
            offset + page.len() < 10_002,
            "offset {offset}"
        );
        seen.extend(page);
        offset += 1000;
    }
    assert_eq!(seen.len(), 10_002, "each run once");
    assert_eq!(seen.into_iter().collect::<BTreeSet<_>>(), want);

    // The API's total is every match, not the page; a sort by a column holds across pages.
    let a = view.api("/api/runs?limit=5&sort=tool_calls&order=desc");
    assert_eq!(a["total"], 10_002);
    assert_eq!(a["runs"].as_array().unwrap().len(), 5);
    let most = traces(&runs)
        .iter()
        .map(|t| t["evidence"]["tool_calls"].as_array().unwrap().len())
        .max()
        .unwrap();
    assert_eq!(a["runs"][0]["tool_calls"], most);
    let calls: Vec<u64> = a["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["tool_calls"].as_u64().unwrap())
        .collect();
    assert!(calls.windows(2).all(|w| w[0] >= w[1]), "{calls:?}");
}

/// What the traces and scores of `dirs` say, by run id: the text a person reads of the run
/// (its turns, tool calls, model calls, errors and warnings, and its score; not the world's
/// state, which holds the whole fixture in every run), and the score.
fn stored(dirs: &[&Path]) -> Vec<(String, String, Value)> {
    let mut out = Vec::new();
    for d in dirs {
        let scores: Vec<Value> = scores(d);
        for p in trace_paths(d) {
            let t: Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
            let id = t["run_id"].as_str().unwrap().to_owned();
            let score = scores
                .iter()
                .find(|s| s["run_id"] == id.as_str())
                .cloned()
                .unwrap();
            let read = [
                t["turns"].to_string(),
                t["evidence"].to_string(),
                t["error"].to_string(),
                t["worker_warnings"].to_string(),
                score.to_string(),
            ]
            .join("\n");
            out.push((id, read, score));
        }
    }
    out
}

fn ids_of(v: &Value) -> BTreeSet<String> {
    v["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["run_id"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn filters_by_verdict_layer_and_free_text_return_exactly_the_runs_the_traces_say() {
    let dir = tmp();
    let pass = sweep(dir.path(), "pass", &["--runs", "4"]);
    let fail = sweep(
        dir.path(),
        "fail",
        &["--runs", "3", "--agent", "demo-forbidden-tool"],
    );
    // One reply holds a marker, in another case than the query's.
    let planted = trace_paths(&pass)[5].clone();
    let mut t: Value = serde_json::from_slice(&std::fs::read(&planted).unwrap()).unwrap();
    t["turns"][0]["reply"] = json!("All done: ZEBRA-marker-77 was shipped.");
    std::fs::write(&planted, serde_json::to_vec(&t).unwrap()).unwrap();
    let marked = t["run_id"].as_str().unwrap().to_owned();
    // Another run's hook warned.
    let warned_path = trace_paths(&fail)[2].clone();
    let mut w: Value = serde_json::from_slice(&std::fs::read(&warned_path).unwrap()).unwrap();
    w["worker_warnings"] = json!(["hook:probe: the state looked odd", "not a hook's"]);
    std::fs::write(&warned_path, serde_json::to_vec(&w).unwrap()).unwrap();
    let warned = w["run_id"].as_str().unwrap().to_owned();
    let all = stored(&[&pass, &fail]);
    let view = View::start(dir.path(), &["pass", "fail"]);

    let failed: BTreeSet<String> = all
        .iter()
        .filter(|(_, _, s)| s["verdict"] == "FAIL")
        .map(|(id, _, _)| id.clone())
        .collect();
    assert_eq!(failed.len(), 9);
    let dom = view.dom(dir.path(), "/?verdict=fail&limit=1000");
    assert_eq!(listed(&dom).into_iter().collect::<BTreeSet<_>>(), failed);
    assert!(dom.contains("Runs 1–9 of 9"));
    // The filter is in the URL, and the form shows it chosen.
    assert!(dom.contains("<option value=\"fail\" selected=\"\">fail</option>"));
    // The page as served, before any script runs: the server filtered it.
    let served = view.get("/?verdict=fail&limit=1000").text().unwrap();
    assert_eq!(listed(&served).into_iter().collect::<BTreeSet<_>>(), failed);

    let constraint: BTreeSet<String> = all
        .iter()
        .filter(|(_, _, s)| s["constraint"]["passed"] == false)
        .map(|(id, _, _)| id.clone())
        .collect();
    let a = view.api("/api/runs?layer=constraint&limit=1000");
    assert_eq!(a["total"], constraint.len());
    assert_eq!(ids_of(&a), constraint);

    // Free text, whatever its case: exactly the runs whose replies, tool calls or evidence
    // hold it.
    for (q, needle) in [
        ("zebra-MARKER-77", "zebra-marker-77"),
        ("HEADPHONES", "headphones"),
    ] {
        let want: BTreeSet<String> = all
            .iter()
            .filter(|(_, text, _)| text.to_lowercase().contains(needle))
            .map(|(id, _, _)| id.clone())
            .collect();
        assert!(!want.is_empty(), "{needle} is somewhere");
        let dom = view.dom(dir.path(), &format!("/?q={q}&limit=1000"));
        assert_eq!(
            listed(&dom).into_iter().collect::<BTreeSet<_>>(),
            want,
            "{q}"
        );
        let a = view.api(&format!("/api/runs?q={q}&limit=1000"));
        assert_eq!(a["total"], want.len(), "{q}");
        if needle.starts_with("zebra") {
            assert_eq!(want, BTreeSet::from([marked.clone()]));
        }
    }
    // With another filter: the intersection.
    let a = view.api("/api/runs?q=headphones&verdict=pass&limit=1000");
    for r in a["runs"].as_array().unwrap() {
        assert_eq!(r["verdict"], "pass");
    }

    let a = view.api("/api/runs?hook_warning=1");
    assert_eq!(ids_of(&a), BTreeSet::from([warned.clone()]));
    assert_eq!(
        a["runs"][0]["hook_warnings"], 1,
        "the hook's warning, not the other"
    );
    let dom = view.dom(dir.path(), "/?hook_warning=1");
    assert_eq!(listed(&dom), vec![warned]);
    assert!(dom.contains("title=\"hook warnings\">⚠ 1</span>"));

    let bad = view.get("/api/runs?verdict=maybe");
    assert_eq!(bad.status(), 400);
    assert!(
        bad.text()
            .unwrap()
            .contains("verdict must be pass, fail, error or unscored")
    );
}

/// An OpenAI-compatible endpoint that asks for `lookup_order` first, then answers;
/// `delay` before each answer.
fn tool_calling_model(delay: Duration) -> TestServer {
    TestServer::start(move |s| {
        std::thread::sleep(delay);
        let usage = json!({"prompt_tokens": 11, "completion_tokens": 7});
        let body = if s.body.contains("\"role\":\"tool\"") {
            json!({"choices": [{"message": {"role": "assistant", "content": "Order 1234 has shipped."}, "finish_reason": "stop"}], "usage": usage})
        } else {
            json!({"choices": [{"message": {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "lookup_order", "arguments": "{\"order_id\":\"1234\"}"}}]}, "finish_reason": "tool_calls"}], "usage": usage})
        };
        (200, body.to_string())
    })
}

#[test]
fn a_runs_page_shows_its_transcript_tool_calls_model_calls_and_journal() {
    let dir = tmp();
    let server = tool_calling_model(Duration::ZERO);
    let agent = openai_agent(dir.path(), "tooly", &server.base, "");
    let runs = Wt::new(dir.path())
        .args([
            "run",
            "--out",
            "runs",
            "--filter",
            "order-status",
            "--runs",
            "1",
        ])
        .agent(&agent)
        .run();
    assert!(runs.code == 0 || runs.code == 1, "{runs}");
    let t = &traces(&dir.path().join("runs"))[0];
    let id = t["run_id"].as_str().unwrap();
    let model_calls = t["evidence"]["model_calls"].as_array().unwrap().len();
    assert!(model_calls >= 2, "{t}");
    let view = View::start(dir.path(), &["runs"]);

    let a = view.api("/api/runs");
    assert_eq!(a["runs"][0]["model_calls"], model_calls);
    assert_eq!(a["runs"][0]["tokens"], 18 * model_calls as u64);

    let dom = view.dom(dir.path(), &format!("/runs/{id}"));
    assert!(dom.contains(&format!("<code>{id}</code>")));
    assert!(
        dom.contains("tool call 0.0 · <code>lookup_order</code>"),
        "{dom}"
    );
    assert!(dom.contains("\"order_id\": \"1234\""), "the arguments");
    assert_eq!(
        dom.matches("<div class=\"step model\">").count(),
        model_calls
    );
    assert!(dom.contains("finish tool_calls"));
    assert!(dom.contains("11 in / 7 out tokens"));
    assert!(dom.contains("Order 1234 has shipped."), "the reply");
    // The model call that asked for the tool comes before the tool call, the answer after.
    let (ask, tool, answer) = (
        dom.find("finish tool_calls").unwrap(),
        dom.find("tool call 0.0").unwrap(),
        dom.find("finish stop").unwrap(),
    );
    assert!(ask < tool && tool < answer, "in the order they happened");
    for layer in ["outcome", "trajectory", "constraint", "integrity"] {
        assert!(dom.contains(&format!("<td>{layer}</td>")), "{layer}");
    }
    assert!(
        dom.contains("<code>RunStarted</code>"),
        "the journal's events"
    );
    assert!(dom.contains("World: before → after"));

    let whole = view.api(&format!("/api/runs/{id}"));
    assert_eq!(whole["trace"]["run_id"], id);
    assert_eq!(whole["score"]["run_id"], id);
    assert!(!whole["events"].as_array().unwrap().is_empty());
    assert_eq!(view.get("/api/runs/no-such-run").status(), 404);
    assert_eq!(view.get("/runs/no-such-run").status(), 404);
}

#[test]
fn hostile_text_is_shown_as_text_and_the_server_is_read_only_and_local() {
    let dir = tmp();
    let runs = sweep(
        dir.path(),
        "runs",
        &["--filter", "order-status", "--runs", "2"],
    );
    let trace = &trace_paths(&runs)[0];
    let mut t: Value = serde_json::from_slice(&std::fs::read(trace).unwrap()).unwrap();
    let evil = "<script>console.error('ran')</script><img src=x onerror=\"console.error('img')\"> \u{202E}txt.exe QUOKKA";
    t["turns"][0]["reply"] = json!(evil);
    t["turns"][0]["input"] = json!("</pre><b>bold</b>");
    std::fs::write(trace, serde_json::to_vec(&t).unwrap()).unwrap();
    let id = t["run_id"].as_str().unwrap().to_owned();
    let view = View::start(dir.path(), &["runs"]);

    for path in [format!("/runs/{id}"), "/?q=quokka".to_owned()] {
        let dom = view.dom(dir.path(), &path);
        assert_eq!(
            dom.matches("<script").count(),
            1,
            "only wt's own script: {path}"
        );
        assert!(dom.contains("<script src=\"/static/view.js\" defer=\"\"></script>"));
        assert!(!dom.contains("<img"), "{path}");
        assert!(
            !dom.contains('\u{202E}'),
            "no bidi control reaches the page: {path}"
        );
        if path.starts_with("/runs") {
            assert!(dom.contains("&lt;script&gt;console.error('ran')&lt;/script&gt;&lt;img src=x"));
            assert!(
                dom.contains("\\u{202e}txt.exe QUOKKA"),
                "the control shown escaped"
            );
            assert!(dom.contains("&lt;/pre&gt;&lt;b&gt;bold&lt;/b&gt;"));
            assert!(!dom.contains("<b>bold"));
        } else {
            assert_eq!(listed(&dom), vec![id.clone()]);
        }
    }
    // The API keeps the data and escapes the control.
    let raw = view.get(&format!("/api/runs/{id}")).text().unwrap();
    assert!(!raw.contains('\u{202E}') && raw.contains("\\u202e"));
    let v: Value = serde_json::from_str(&raw).unwrap();
    assert_eq!(v["trace"]["turns"][0]["reply"], evil);

    // Every answer carries a strict policy; nothing is written; other hosts are refused.
    let r = view.get("/");
    let csp = r.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(csp.starts_with("default-src 'none'") && csp.contains("script-src 'self'"));
    let before = crate::harness::files(&runs);
    let client = reqwest::blocking::Client::new();
    for m in [
        reqwest::Method::POST,
        reqwest::Method::PUT,
        reqwest::Method::DELETE,
    ] {
        let r = client
            .request(m.clone(), format!("{}/api/runs", view.url))
            .send()
            .unwrap();
        assert_eq!(r.status(), 405, "{m}");
    }
    assert_eq!(crate::harness::files(&runs), before, "nothing written");
    let r = client
        .get(format!("{}/", view.url))
        .header("Host", "attacker.example:80")
        .send()
        .unwrap();
    assert_eq!(
        r.status(),
        421,
        "a page of another site cannot read it by DNS rebinding"
    );

    // Ctrl-C stops it with 130.
    let mut view = view;
    let child = view.child.take().unwrap();
    signal(child.id(), "INT");
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130));
    let said = std::fs::read_to_string(&view.stderr).unwrap();
    assert!(said.contains("2 run(s) in 1 scenario(s)"), "{said}");
}

#[test]
fn listening_beyond_loopback_says_who_can_read_and_a_bad_host_is_refused() {
    let dir = tmp();
    sweep(
        dir.path(),
        "runs",
        &["--filter", "order-status", "--runs", "1"],
    );
    let view = View::start(dir.path(), &["runs", "--host", "0.0.0.0"]);
    let port = view.url.rsplit(':').next().unwrap().to_owned();
    drop(view);
    let said = std::fs::read_to_string(dir.path().join("view-runs_--host_0.0.0.0.err")).unwrap();
    assert!(
        said.contains(&format!("warning: wt view listens on 0.0.0.0:{port}, not on a loopback address: anyone who can reach this machine can read these traces")),
        "{said}"
    );
    let r = Wt::new(dir.path())
        .args(["view", "runs", "--host", "example.com"])
        .run();
    assert_eq!(r.code, 2, "{r}");
    assert!(r.stderr.contains("--host must be an IP address"), "{r}");
    let r = Wt::new(dir.path()).args(["view", "nowhere"]).run();
    assert_eq!(r.code, 2, "{r}");
    assert_eq!(r.stderr.lines().count(), 1, "one line: {r}");
}

#[test]
fn a_run_written_by_a_sweep_in_progress_appears_without_restart() {
    let dir = tmp();
    std::fs::create_dir(dir.path().join("live")).unwrap();
    let view = View::start(dir.path(), &["live"]);
    assert_eq!(view.api("/api/runs")["total"], 0);
    let generation = view.api("/api/status")["generation"].as_u64().unwrap();

    // Each model answer takes a while: the sweep runs for seconds.
    let server = tool_calling_model(Duration::from_millis(150));
    let agent = openai_agent(dir.path(), "slow", &server.base, "");
    let pack = plain_pack(dir.path());
    let mut sweep = Wt::new(dir.path())
        .args(["run", "--out", "live", "--runs", "12", "--jobs", "1"])
        .pack(&pack)
        .agent(&agent)
        .command()
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut during = None;
    let seen_during = poll_until(Duration::from_secs(60), || {
        let total = view.api("/api/runs")["total"].as_u64().unwrap();
        if total > 0 && sweep.try_wait().unwrap().is_none() {
            during = Some(total);
            return true;
        }
        false
    });
    assert!(seen_during, "runs appeared while the sweep ran");
    assert!(during.unwrap() < 12);
    assert!(view.api("/api/status")["generation"].as_u64().unwrap() > generation);
    assert!(sweep.wait().unwrap().success());
    assert!(
        poll_until(Duration::from_secs(30), || view.api("/api/runs")["total"]
            == 12),
        "every run, once the sweep ended"
    );
    let dom = view.dom(dir.path(), "/");
    assert_eq!(
        listed(&dom).into_iter().collect::<BTreeSet<_>>(),
        run_ids(&dir.path().join("live"))
    );
}

#[test]
fn two_sweeps_side_by_side_with_the_comparison_and_turns_aligned() {
    let dir = tmp();
    sweep(dir.path(), "base", &["--runs", "8"]);
    sweep(
        dir.path(),
        "new",
        &["--runs", "8", "--agent", "demo-forbidden-tool"],
    );
    let view = View::start(dir.path(), &["new", "--baseline", "base"]);
    let dom = view.dom(dir.path(), "/compare");
    for id in ["order-status", "refund-damaged", "escalate-human"] {
        let row =
            format!("<tr class=\"scenario\" data-scenario=\"{id}\" data-verdict=\"regressed\">");
        assert!(dom.contains(&row), "{id} regressed: {dom}");
    }
    assert!(dom.contains("8/8 100%"), "BASE's pass rate");
    assert!(dom.contains("0/8 0%"), "NEW's pass rate");

    let dom = view.dom(dir.path(), "/compare/escalate-human?base=1&new=2");
    let t = traces(&dir.path().join("new"))
        .into_iter()
        .find(|t| t["scenario_id"] == "escalate-human")
        .unwrap();
    let turns = t["turns"].as_array().unwrap().len();
    assert_eq!(dom.matches("<tr class=\"turn-pair\">").count(), turns);
    assert!(dom.contains("<h2>BASE</h2>") && dom.contains("<h2>NEW</h2>"));
    assert!(
        dom.contains("issue_refund"),
        "NEW's forbidden call, beside BASE's turn"
    );
    assert!(dom.contains("<strong>#1 "), "BASE's run #1 chosen");
    assert!(dom.contains("<strong>#2 "), "NEW's run #2 chosen");
    // Without a baseline there is nothing to compare.
    let alone = View::start(dir.path(), &["new"]);
    assert_eq!(alone.get("/compare").status(), 404);
}
