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
        View::start_with(dir, args, &[])
    }

    /// Like [`View::start`], with environment variables set.
    fn start_with(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> View {
        let stderr = dir.join(format!("view-{}.err", args.join("_").replace('/', "_")));
        let mut child = wt(dir)
            .arg("view")
            .args(args)
            .args(["--port", "0"])
            .envs(env.iter().copied())
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
        dom.matches("<div class=\"step model\" id=\"model-").count(),
        model_calls
    );
    for i in 0..model_calls {
        assert!(
            dom.contains(&format!("id=\"model-{i}\"")),
            "model call {i}'s anchor"
        );
    }
    assert!(
        dom.contains("<div class=\"step tool\" id=\"call-0-0\">"),
        "the tool call's anchor"
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
    t["agent"]["label"] = json!(evil);
    t["agent"]["model"] = json!("<svg onload=\"console.error('svg')\">\u{202E}m");
    std::fs::write(trace, serde_json::to_vec(&t).unwrap()).unwrap();
    let id = t["run_id"].as_str().unwrap().to_owned();
    let view = View::start(dir.path(), &["runs"]);

    for path in [
        format!("/runs/{id}"),
        "/?q=quokka".to_owned(),
        "/".to_owned(),
    ] {
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
        } else if path == "/" {
            // The summary's cells and the list's agent column show the label as text, in
            // HTML, in attributes and in the charts' titles.
            assert!(dom.contains("id=\"summary\""));
            assert!(
                dom.contains("&lt;script&gt;console.error('ran')"),
                "agent shown as text"
            );
            assert!(dom.contains("&lt;svg onload="), "model shown as text");
            assert!(!dom.contains("<svg onload"), "{path}");
            assert!(
                dom.matches("data-agent=\"").count() >= 2,
                "a cell and a row"
            );
        } else {
            assert_eq!(listed(&dom), vec![id.clone()]);
        }
    }
    let raw = view.get("/api/summary").text().unwrap();
    assert!(!raw.contains('\u{202E}') && raw.contains("\\u202e"));
    let s: Value = serde_json::from_str(&raw).unwrap();
    assert!(
        s["cells"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["agent"] == evil)
    );
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
    let view = View::start(
        dir.path(),
        &["runs", "--host", "0.0.0.0", "--allow-host", "Box.Example"],
    );
    let port = view.url.rsplit(':').next().unwrap().to_owned();
    // Beyond loopback too, a request must name an address or an allowed name: a page that
    // rebinds its own name to this machine is refused.
    let client = reqwest::blocking::Client::new();
    let with_host = |host: &str| {
        client
            .get(format!("http://127.0.0.1:{port}/api/status"))
            .header("Host", host)
            .send()
            .unwrap()
    };
    for refused in [
        "evil.example".to_owned(),
        format!("evil.example:{port}"),
        format!("box.example.evil.example:{port}"),
    ] {
        let r = with_host(&refused);
        assert_eq!(r.status(), 421, "{refused}");
        let text = r.text().unwrap();
        assert_eq!(text.lines().count(), 1, "one line: {text}");
        assert!(text.contains("--allow-host"), "{text}");
    }
    for allowed in [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        format!("box.example:{port}"),
        "BOX.example".to_owned(),
        format!("0.0.0.0:{port}"),
    ] {
        assert_eq!(with_host(&allowed).status(), 200, "{allowed}");
    }
    drop(view);
    let said = std::fs::read_to_string(
        dir.path()
            .join("view-runs_--host_0.0.0.0_--allow-host_Box.Example.err"),
    )
    .unwrap();
    assert!(
        said.contains(&format!("warning: wt view listens on 0.0.0.0:{port}, not on a loopback address: anyone who can reach it can read every trace, score and artifact under runs; it answers requests addressed to an IP address or to localhost, box.example (add a name with --allow-host NAME)")),
        "{said}"
    );
    let r = Wt::new(dir.path())
        .args(["view", "runs", "--allow-host", "a b"])
        .run();
    assert_eq!(r.code, 2, "{r}");
    assert!(r.stderr.contains("--allow-host takes a host name"), "{r}");
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
    assert!(
        dom.contains("<strong class=\"chosen\">#1 demo · "),
        "BASE's run #1 chosen, labelled"
    );
    assert!(
        dom.contains("<strong class=\"chosen\">#2 demo-forbidden-tool · "),
        "NEW's run #2 chosen, labelled by agent and sweep"
    );
    assert!(
        dom.contains("<span class=\"badge diff\">only NEW</span>"),
        "NEW's extra call marked"
    );
    // Unasked, the pair is a failing NEW run against a passing BASE run.
    let dom = view.dom(dir.path(), "/compare/escalate-human");
    let chosen: Vec<&str> = dom.split("<strong class=\"chosen\">").skip(1).collect();
    assert_eq!(chosen.len(), 2);
    assert!(
        chosen[0]
            .split("</strong>")
            .next()
            .unwrap()
            .contains("badge pass"),
        "BASE passing"
    );
    assert!(
        chosen[1]
            .split("</strong>")
            .next()
            .unwrap()
            .contains("badge fail"),
        "NEW failing"
    );
    let differences: u64 = text_of(&dom, "differences")
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(differences >= 1, "the forbidden call is a difference");
    assert!(dom.contains("only-here"));
    // Without a baseline there is nothing to compare.
    let alone = View::start(dir.path(), &["new"]);
    assert_eq!(alone.get("/compare").status(), 404);
}

/// The text of the element with `id` in served HTML, tags stripped.
fn text_of(html: &str, id: &str) -> String {
    let at = html
        .find(&format!("id=\"{id}\""))
        .unwrap_or_else(|| panic!("no #{id}"));
    let start = at + html[at..].find('>').unwrap() + 1;
    let mut out = String::new();
    let mut depth = 0;
    let mut in_tag = false;
    let chars = html[start..].char_indices();
    for (i, c) in chars {
        match c {
            '<' if html[start + i..].starts_with("</") => {
                if depth == 0 {
                    break;
                }
                depth -= 1;
                in_tag = true;
            }
            '<' => {
                depth += 1;
                in_tag = true;
            }
            '>' => in_tag = false,
            c if !in_tag => out.push(c),
            _ => {}
        }
    }
    out
}

#[test]
fn a_trace_rewritten_while_it_is_read_is_shown_unreadable_never_a_server_error() {
    let dir = tmp();
    let runs = sweep(
        dir.path(),
        "runs",
        &["--filter", "order-status", "--runs", "2"],
    );
    let trace = trace_paths(&runs)[0].clone();
    let score = trace.with_extension("score.json");
    let (good, good_score) = (
        std::fs::read(&trace).unwrap(),
        std::fs::read(&score).unwrap(),
    );
    let t: Value = serde_json::from_slice(&good).unwrap();
    let id = t["run_id"].as_str().unwrap().to_owned();
    let view = View::start(dir.path(), &["runs"]);

    // One writer rewrites the trace as fast as it can, in turn atomically (a whole file
    // renamed over it) and in place (truncated, then written in two halves).
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (stop, trace, good) = (stop.clone(), trace.clone(), good.clone());
        let staging = dir.path().join("staging.json");
        std::thread::spawn(move || {
            use std::io::Write;
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                if n.is_multiple_of(2) {
                    std::fs::write(&staging, &good).unwrap();
                    std::fs::rename(&staging, &trace).unwrap();
                } else {
                    let mut f = std::fs::File::create(&trace).unwrap();
                    let half = good.len() / 2;
                    f.write_all(&good[..half]).unwrap();
                    f.flush().unwrap();
                    std::thread::yield_now();
                    f.write_all(&good[half..]).unwrap();
                }
                n += 1;
            }
            n
        })
    };
    let client = reqwest::blocking::Client::new();
    let paths = [
        format!("/runs/{id}"),
        format!("/api/runs/{id}"),
        "/".to_owned(),
        "/api/runs".to_owned(),
        "/api/runs?q=order".to_owned(),
    ];
    let mut answered = 0;
    for i in 0..600 {
        let path = &paths[i % paths.len()];
        let r = client.get(format!("{}{path}", view.url)).send().unwrap();
        let status = r.status().as_u16();
        assert!(
            status < 500,
            "{path} answered {status}: {}",
            r.text().unwrap_or_default()
        );
        answered += 1;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let rewrites = writer.join().unwrap();
    assert!(rewrites > 0 && answered == 600);

    // Whole again, the runs are read once more (a rename changes the directory) until the
    // reading holds both runs; then the files break in place, which leaves the directory
    // as it was, so the runs are not read again: the run's page and its JSON say it is
    // unreadable and why, and the list shows the run marked.
    let staging = dir.path().join("staging.json");
    let settled = poll_until(Duration::from_secs(60), || {
        std::fs::write(&staging, &good).unwrap();
        std::fs::rename(&staging, &trace).unwrap();
        std::thread::sleep(Duration::from_millis(1500));
        let g = view.api("/api/status")["generation"].clone();
        std::thread::sleep(Duration::from_millis(1500));
        view.api("/api/status")["generation"] == g && view.api("/api/runs")["total"] == 2
    });
    assert!(settled, "the runs are read whole again");
    std::fs::write(&trace, b"{\"run_id\": \"").unwrap();
    let page = view.get(&format!("/runs/{id}"));
    assert_eq!(page.status(), 200);
    let page = page.text().unwrap();
    let said = text_of(&page, "unreadable");
    assert!(
        said.starts_with("unreadable: ") && said.contains("not a wt trace"),
        "{said}"
    );
    let whole = view.api(&format!("/api/runs/{id}"));
    assert!(
        whole["unreadable"]
            .as_str()
            .unwrap()
            .contains("not a wt trace"),
        "{whole}"
    );
    assert_eq!(whole["trace"], Value::Null);
    std::fs::write(&score, b"").unwrap();
    let list = view.get("/");
    assert_eq!(list.status(), 200);
    assert!(
        list.text().unwrap().contains("unreadable: "),
        "the run is listed, marked"
    );
    let a = view.api("/api/runs");
    let marked: Vec<&Value> = a["runs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["unreadable"].is_string())
        .collect();
    assert_eq!(marked.len(), 1, "{a}");
    assert_eq!(marked[0]["run_id"], Value::Null);
    assert_eq!(view.get(&format!("/runs/{id}")).status(), 200);
    // Whole again, the run reads as before.
    std::fs::write(&trace, &good).unwrap();
    std::fs::write(&score, &good_score).unwrap();
    assert_eq!(view.api(&format!("/api/runs/{id}"))["trace"]["run_id"], id);
}

#[test]
fn the_header_counts_each_verdict_as_its_filter_and_wt_report_do() {
    let dir = tmp();
    let pass = sweep(dir.path(), "pass", &["--runs", "2"]);
    sweep(
        dir.path(),
        "fail",
        &["--runs", "1", "--agent", "demo-forbidden-tool"],
    );
    // One run without its score: unscored, an error as wt report counts it.
    let unscored = trace_paths(&pass)[0].with_extension("score.json");
    std::fs::remove_file(&unscored).unwrap();
    let view = View::start(dir.path(), &["pass", "fail"]);
    let page = view.get("/").text().unwrap();
    let totals = text_of(&page, "totals");
    let count = |word: &str| -> u64 {
        let before = totals[..totals
            .find(word)
            .unwrap_or_else(|| panic!("{word}: {totals}"))]
            .trim_end()
            .rsplit([' ', '('])
            .next()
            .unwrap()
            .to_owned();
        before
            .parse()
            .unwrap_or_else(|_| panic!("{word}: {totals}"))
    };
    let status = view.api("/api/status");
    let mut seen = 0;
    for (bucket, word) in [
        ("pass", " passed"),
        ("fail", " failed"),
        ("error", " error"),
        ("unscored", " unscored"),
    ] {
        let n = count(word);
        let a = view.api(&format!("/api/runs?verdict={bucket}&limit=1000"));
        assert_eq!(a["total"], n, "{bucket}: {totals}");
        assert_eq!(status["counts"][bucket], n, "{bucket}");
        let served = view
            .get(&format!("/?verdict={bucket}&limit=1000"))
            .text()
            .unwrap();
        assert_eq!(listed(&served).len() as u64, n, "{bucket}");
        if bucket != "unscored" {
            seen += n;
        }
    }
    assert_eq!(count("unscored"), 1, "{totals}");
    assert!(count("error") >= 1, "{totals}");
    assert_eq!(seen, count("run(s)"), "each run in one bucket: {totals}");
    let r = Wt::new(dir.path())
        .args(["report", "pass", "fail", "--format", "json"])
        .run();
    let report: Value = serde_json::from_str(&r.stdout).unwrap_or_else(|e| panic!("{e}: {r}"));
    for (key, word) in [
        ("runs", "run(s)"),
        ("passed", " passed"),
        ("failed", " failed"),
        ("errored", " error"),
    ] {
        assert_eq!(report["pack"][key], count(word), "{key}: {totals}");
    }
}

#[test]
fn an_unknown_parameter_or_value_is_a_400_naming_it_and_a_long_path_is_echoed_cut() {
    let dir = tmp();
    let runs = sweep(
        dir.path(),
        "runs",
        &["--filter", "order-status", "--runs", "1"],
    );
    let t = &traces(&runs)[0];
    let (id, sweep_id) = (
        t["run_id"].as_str().unwrap(),
        t["sweep_id"].as_str().unwrap(),
    );
    let view = View::start(dir.path(), &["runs"]);
    for (path, named) in [
        ("/?order=bogus".to_owned(), "order must be asc or desc, not"),
        ("/?bogus=1".to_owned(), "unknown parameter"),
        (
            "/api/runs?order=bogus".to_owned(),
            "order must be asc or desc",
        ),
        ("/api/runs?bogus=1".to_owned(), "unknown parameter"),
        ("/?hook_warning=maybe".to_owned(), "hook_warning must be"),
        ("/?verdict=pass&verdict=fail".to_owned(), "given twice"),
        (format!("/runs/{id}?bogus=1"), "unknown parameter"),
        (format!("/api/runs/{id}?bogus=1"), "unknown parameter"),
        ("/api/status?bogus=1".to_owned(), "unknown parameter"),
        ("/compare?bogus=1".to_owned(), "unknown parameter"),
        (
            "/compare/x?base=first".to_owned(),
            "base must be a whole number",
        ),
        ("/static/view.css?bogus=1".to_owned(), "unknown parameter"),
    ] {
        let r = view.get(&path);
        assert_eq!(r.status(), 400, "{path}");
        let body = r.text().unwrap();
        assert!(body.contains(named), "{path}: {body}");
        assert!(
            body.contains("bogus") || !path.contains("bogus"),
            "names it: {path}: {body}"
        );
    }
    // The pages and the API still answer what they know.
    assert_eq!(view.get("/?order=desc&hook_warning=0").status(), 200);
    assert_eq!(
        view.get(&format!("/api/runs/{id}?sweep={sweep_id}"))
            .status(),
        200
    );

    // A long path is repeated cut, and escaped.
    let long = format!("/<b>{}", "x".repeat(50_000));
    let r = view.get(&long);
    assert_eq!(r.status(), 404);
    let body = r.text().unwrap();
    assert!(body.len() < 5_000, "{} bytes", body.len());
    assert!(
        body.contains("/%3Cb%3Exxx") || body.contains("/&lt;b&gt;xxx"),
        "{body}"
    );
    assert!(!body.contains("<b>"));
    assert!(
        body.contains("… [cut: 5000") && body.contains(" characters in all]"),
        "{body}"
    );
}

/// Threads of process `pid`.
fn threads(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .count()
}

/// Opens `n` connections to `url`'s port; every other one sends half a request head.
fn idle_connections(url: &str, n: usize) -> Vec<std::net::TcpStream> {
    use std::io::Write;
    let addr = url.trim_start_matches("http://");
    (0..n)
        .map(|i| {
            let mut s = std::net::TcpStream::connect(addr).unwrap();
            if i % 2 == 1 {
                s.write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
                    .unwrap();
            }
            s
        })
        .collect()
}

/// Whether the server closed `s` (reading comes to its end, or the peer reset it).
fn closed_by_server(s: &mut std::net::TcpStream) -> bool {
    use std::io::Read;
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut sink = Vec::new();
    match s.read_to_end(&mut sink) {
        Ok(_) => true,
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
    }
}

#[test]
fn idle_connections_cost_no_thread_are_closed_after_the_header_timeout_and_a_request_is_answered() {
    let dir = tmp();
    sweep(
        dir.path(),
        "runs",
        &["--filter", "order-status", "--runs", "1"],
    );
    let view = View::start_with(dir.path(), &["runs"], &[("WT_VIEW_HEADER_TIMEOUT_S", "1")]);
    let pid = view.child.as_ref().unwrap().id();
    let before = threads(pid);
    let mut idle = idle_connections(&view.url, 300);
    // A request among 300 idle connections is answered (the docs' figure, within a second
    // under 1,000, is measured in bench notes, not here).
    let client = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let r = client
        .get(format!("{}/api/status", view.url))
        .send()
        .unwrap();
    assert_eq!(r.status(), 200);
    let during = threads(pid);
    assert!(
        during <= before + 8 && during < 40,
        "threads stay bounded: {before} before, {during} with 300 connections"
    );
    // Each idle connection is closed once its head has not come within the timeout.
    for (i, s) in idle.iter_mut().enumerate() {
        assert!(closed_by_server(s), "connection {i} still open");
    }

    // With the bound lower than the connections open, the rest wait to be accepted; a
    // request behind them is answered once the idle ones time out.
    let bounded = View::start_with(
        dir.path(),
        &["runs", "--max-connections", "50"],
        &[("WT_VIEW_HEADER_TIMEOUT_S", "1")],
    );
    let pid = bounded.child.as_ref().unwrap().id();
    let mut idle = idle_connections(&bounded.url, 120);
    let client = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let r = client
        .get(format!("{}/api/status", bounded.url))
        .send()
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(threads(pid) < 40, "{} threads", threads(pid));
    for (i, s) in idle.iter_mut().enumerate() {
        assert!(closed_by_server(s), "connection {i} still open");
    }
}

/// The run ids of `dir`'s traces whose trace says `pick`.
fn ids_where(dir: &Path, pick: impl Fn(&Value) -> bool) -> BTreeSet<String> {
    traces(dir)
        .iter()
        .filter(|t| pick(t))
        .map(|t| t["run_id"].as_str().unwrap().to_owned())
        .collect()
}

/// Every run id of an API answer, following `next` from `first` (limit 1,000).
fn every_page(view: &View, first: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut at = Some(first.to_owned());
    while let Some(path) = at {
        let a = view.api(&path);
        out.extend(
            a["runs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r["run_id"].as_str().unwrap().to_owned()),
        );
        at = a["next"].as_str().map(str::to_owned);
    }
    out
}

#[test]
fn the_summary_is_wt_reports_numbers_split_by_agent_and_sweep_and_its_cells_open_their_runs() {
    let dir = tmp();
    let a = sweep(dir.path(), "a", &["--runs", "3"]);
    let b = sweep(
        dir.path(),
        "b",
        &["--runs", "2", "--agent", "demo-forbidden-tool"],
    );
    let view = View::start(dir.path(), &["a", "b"]);
    let summary = view.api("/api/summary");
    let r = Wt::new(dir.path())
        .args(["report", "a", "b", "--format", "json"])
        .run();
    let report: Value = serde_json::from_str(&r.stdout).unwrap_or_else(|e| panic!("{e}: {r}"));
    for key in ["scenarios", "pack", "usage", "eval_usage"] {
        assert_eq!(summary[key], report[key], "{key} as wt report says");
    }

    // Each cell is exactly the runs the traces and scores say of its scenario, agent, sweep.
    let all: Vec<Value> = traces(&a).into_iter().chain(traces(&b)).collect();
    let passed: BTreeSet<String> = scores(&a)
        .into_iter()
        .chain(scores(&b))
        .filter(|s| s["verdict"] == "PASS")
        .map(|s| s["run_id"].as_str().unwrap().to_owned())
        .collect();
    let cells = summary["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 6, "3 scenarios × 2 agents: {cells:?}");
    for c in cells {
        let mine: Vec<&Value> = all
            .iter()
            .filter(|t| {
                t["scenario_id"] == c["scenario_id"]
                    && t["agent"]["label"] == c["agent"]
                    && t["sweep_id"] == c["sweep_id"]
            })
            .collect();
        assert_eq!(c["runs"], mine.len(), "{c}");
        let p = mine
            .iter()
            .filter(|t| passed.contains(t["run_id"].as_str().unwrap()))
            .count();
        assert_eq!(c["passed"], p, "{c}");
        assert_eq!(
            c["runs"].as_u64().unwrap(),
            c["passed"].as_u64().unwrap()
                + c["failed"].as_u64().unwrap()
                + c["errored"].as_u64().unwrap()
        );
        assert!(c["wilson95"][0].as_f64().unwrap() <= c["pass_rate"].as_f64().unwrap() + 1e-9);
        assert_eq!(c["duration_ms"]["count"], mine.len());
    }
    let forbidden = cells
        .iter()
        .find(|c| c["agent"] == "demo-forbidden-tool")
        .unwrap();
    assert_eq!(
        (&forbidden["passed"], &forbidden["runs"]),
        (&json!(0), &json!(2))
    );

    // Agent, model and sweep filters return exactly the runs the trace files say.
    for agent in ["demo", "demo-forbidden-tool"] {
        let want = ids_where(&a, |t| t["agent"]["label"] == agent)
            .into_iter()
            .chain(ids_where(&b, |t| t["agent"]["label"] == agent))
            .collect::<BTreeSet<_>>();
        let got = view.api(&format!("/api/runs?agent={agent}&limit=1000"));
        assert_eq!(ids_of(&got), want, "{agent}");
        assert!(
            got["runs"]
                .as_array()
                .unwrap()
                .iter()
                .all(|r| r["agent"] == agent)
        );
    }
    let sweep_b = traces(&b)[0]["sweep_id"].as_str().unwrap().to_owned();
    let got = view.api(&format!("/api/runs?sweep={sweep_b}&limit=1000"));
    assert_eq!(ids_of(&got), run_ids(&b));
    let model = all[0]["agent"]["model"].as_str().map(str::to_owned);
    if let Some(m) = model {
        let got = view.api(&format!("/api/runs?model={m}&limit=1000"));
        let want: BTreeSet<String> = all
            .iter()
            .filter(|t| t["agent"]["model"] == m.as_str())
            .map(|t| t["run_id"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(ids_of(&got), want);
    }
    let none = view.api("/api/runs?model=no-such-model");
    assert_eq!(none["total"], 0);

    // The landing page: a row per scenario and per cell, with its charts; a cell's link
    // lists exactly its runs, with the agent named in every row.
    let dom = view.dom(dir.path(), "/");
    assert!(dom.contains("id=\"summary\""));
    assert_eq!(dom.matches("<tr class=\"scenario\"").count(), 3);
    assert_eq!(dom.matches("<tr class=\"cell\"").count(), 6);
    assert!(
        dom.matches("<svg class=\"bar\"").count() >= 9,
        "a pass-rate bar per row"
    );
    assert!(
        dom.matches("<svg class=\"spark\"").count() >= 6,
        "duration spreads"
    );
    assert!(dom.contains("<th>sweep</th>"), "two sweeps: a sweep column");
    let cell = dom
        .split("<tr class=\"cell\"")
        .nth(1)
        .unwrap()
        .split("href=\"")
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap()
        .replace("&amp;", "&");
    assert!(
        cell.starts_with("/?scenario=") && cell.contains("agent="),
        "{cell}"
    );
    let c = &cells[0];
    let listed_dom = view.dom(dir.path(), &cell);
    assert_eq!(
        listed(&listed_dom).len() as u64,
        c["runs"].as_u64().unwrap()
    );
    assert!(
        !listed_dom.contains("id=\"summary\""),
        "a filtered list has no summary"
    );
    assert_eq!(
        listed_dom.matches("<td class=\"agent\">").count() as u64,
        c["runs"].as_u64().unwrap()
    );

    // The summary as a person sees it, light and dark.
    let light = screenshot(dir.path(), &format!("{}/", view.url), &[]);
    let dark = screenshot(
        dir.path(),
        &format!("{}/", view.url),
        &[
            "--force-dark-mode",
            "--blink-settings=preferredColorScheme=0",
        ],
    );
    let (lb, db) = (background(&light), background(&dark));
    assert!(lb.iter().all(|&c| c > 200), "light background: {lb:?}");
    assert!(db.iter().all(|&c| c < 60), "dark background: {db:?}");
    let icon = view.get("/favicon.ico");
    assert_eq!(icon.status(), 200);
    assert_eq!(icon.headers()["content-type"], "image/svg+xml");
}

/// A 1280×1800 screenshot of `url` (no console message allowed), as RGB rows.
fn screenshot(dir: &Path, url: &str, flags: &[&str]) -> (u32, Vec<u8>) {
    let shot = tempfile::NamedTempFile::with_suffix_in(".png", dir).unwrap();
    let out = crate::harness::chromium(dir)
        .args(flags)
        .arg(format!("--screenshot={}", shot.path().display()))
        .arg("--window-size=1280,1800")
        .arg(url)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(console_lines(&stderr).is_empty(), "{stderr}");
    let decoder = png::Decoder::new(std::io::BufReader::new(
        std::fs::File::open(shot.path()).unwrap(),
    ));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    assert_eq!((info.width, info.height), (1280, 1800));
    let channels = info.line_size / info.width as usize;
    let rgb = buf[..info.buffer_size()]
        .chunks(channels)
        .flat_map(|px| px[..3].to_vec())
        .collect();
    (info.width, rgb)
}

/// The page's background: the colour at the left edge, near the bottom of the window.
fn background((width, rgb): &(u32, Vec<u8>)) -> [u8; 3] {
    let at = ((1790 * *width + 4) * 3) as usize;
    [rgb[at], rgb[at + 1], rgb[at + 2]]
}

#[test]
fn following_next_gives_every_run_once_while_a_sweep_adds_runs() {
    let dir = tmp();
    let live = sweep(dir.path(), "live", &["--runs", "12"]);
    let before = run_ids(&live);
    assert_eq!(before.len(), 36);
    let view = View::start(dir.path(), &["live"]);
    let generation = view.api("/api/status")["generation"].as_u64().unwrap();
    let first = view.api("/api/runs?limit=4");
    assert!(first["next"].as_str().unwrap().contains("cursor="));

    // A second sweep of the same scenarios: its runs sort among those already read (run
    // index 0, 1, … of each scenario), where offsets would shift every later page.
    let mut adding = Wt::new(dir.path())
        .args(["run", "--out", "live", "--runs", "150", "--jobs", "1"])
        .command()
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut seen: Vec<String> = first["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["run_id"].as_str().unwrap().to_owned())
        .collect();
    let mut next = first["next"].as_str().map(str::to_owned);
    let mut grew_while_paging = false;
    while let Some(path) = next {
        std::thread::sleep(Duration::from_millis(400));
        let page = view.api(&path);
        grew_while_paging |= page["total"].as_u64().unwrap() > 36;
        for r in page["runs"].as_array().unwrap() {
            seen.push(r["run_id"].as_str().unwrap().to_owned());
        }
        let kept = page["next"].as_str().map(str::to_owned);
        if let Some(n) = &kept {
            assert!(n.starts_with("/api/runs?") && n.contains("limit=4"), "{n}");
        }
        next = kept;
    }
    assert!(adding.wait().unwrap().code().is_some());
    assert!(
        grew_while_paging,
        "the sweep wrote runs while the pages were read"
    );
    assert!(view.api("/api/status")["generation"].as_u64().unwrap() > generation);
    let unique: BTreeSet<&String> = seen.iter().collect();
    assert_eq!(unique.len(), seen.len(), "no run listed twice");
    for id in &before {
        assert_eq!(seen.iter().filter(|s| *s == id).count(), 1, "{id} once");
    }

    // The cursor keeps the filters and the sort; following it gives every match once.
    let passes = every_page(
        &view,
        "/api/runs?verdict=pass&sort=duration&order=desc&limit=7",
    );
    let passing = view.api("/api/runs?verdict=pass&limit=1000");
    assert_eq!(passes.len() as u64, passing["total"].as_u64().unwrap());
    assert_eq!(
        passes.iter().collect::<BTreeSet<_>>().len(),
        passes.len(),
        "each once"
    );
    // The HTML pager's next link is the same cursor.
    let page = view.get("/?limit=10").text().unwrap();
    assert!(
        page.contains("rel=\"next\" href=\"/?limit=10&amp;cursor="),
        "{page}"
    );
    // A forged cursor is a 400 naming it.
    let r = view.get("/api/runs?cursor=Zm9yZ2Vk");
    assert_eq!(r.status(), 400);
    assert!(
        r.text()
            .unwrap()
            .contains("cursor is not one this server wrote")
    );
}

#[test]
fn a_long_text_is_folded_with_its_size_and_the_page_stays_short() {
    let dir = tmp();
    let runs = sweep(
        dir.path(),
        "runs",
        &["--filter", "order-status", "--runs", "1"],
    );
    let trace = &trace_paths(&runs)[0];
    let mut t: Value = serde_json::from_slice(&std::fs::read(trace).unwrap()).unwrap();
    let wall = format!("{}END", "w".repeat(29_997));
    t["turns"][0]["reply"] = json!(wall);
    std::fs::write(trace, serde_json::to_vec(&t).unwrap()).unwrap();
    let id = t["run_id"].as_str().unwrap().to_owned();
    let view = View::start(dir.path(), &["runs"]);
    let dom = view.dom(dir.path(), &format!("/runs/{id}"));
    assert!(dom.contains("<pre class=\"reply preview\">"), "a preview");
    assert!(
        dom.contains("<summary>show all 200") && dom.contains(" characters, 1 line(s)</summary>"),
        "its size shown"
    );
    assert!(dom.contains("<details class=\"fold\">"));
    assert!(dom.contains("[cut: 30000 characters in all]"));
    assert!(
        dom.contains("<link rel=\"icon\" type=\"image/svg+xml\" href=\"/static/favicon.svg\">")
    );
    let shot = screenshot(dir.path(), &format!("{}/runs/{id}", view.url), &[]);
    assert_eq!(shot.1.len(), 1280 * 1800 * 3);
    // The keys are served with the page's one script.
    let script = view.get("/static/view.js").text().unwrap();
    assert!(script.contains("e.key === 'j'") && script.contains("e.key === '/'"));
}

/// Pixels of a screenshot in the tint of a marked step's background (`.step.flagged`, a
/// light red over the white card).
fn tinted((_, rgb): &(u32, Vec<u8>)) -> usize {
    rgb.chunks(3)
        .filter(|px| {
            let [r, g, b] = [px[0], px[1], px[2]];
            r >= 248 && (232..=246).contains(&g) && (232..=246).contains(&b) && g.abs_diff(b) <= 2
        })
        .count()
}

/// The HTML of the element that starts at `open` in `dom`, to its closing `</div>` at the
/// same depth.
fn div_at<'a>(dom: &'a str, open: &str) -> &'a str {
    let start = dom.find(open).unwrap_or_else(|| panic!("no {open}"));
    let mut depth = 0;
    let mut at = start;
    loop {
        let next_open = dom[at + 1..].find("<div").map(|i| at + 1 + i);
        let next_close = dom[at..].find("</div>").map(|i| at + i).unwrap();
        match next_open {
            Some(o) if o < next_close => {
                depth += 1;
                at = o;
            }
            _ if depth == 0 => return &dom[start..next_close + "</div>".len()],
            _ => {
                depth -= 1;
                at = next_close + 1;
            }
        }
    }
}

/// One run of order-status by the demo agent that calls a forbidden tool, in `dir/runs`.
pub(crate) fn one_forbidden_call(dir: &Path) -> PathBuf {
    sweep(
        dir,
        "runs",
        &[
            "--filter",
            "order-status",
            "--runs",
            "1",
            "--agent",
            "demo-forbidden-tool",
        ],
    )
}

#[test]
fn a_failing_layer_links_to_the_step_it_points_at_and_that_step_is_marked() {
    let dir = tmp();
    let runs = one_forbidden_call(dir.path());
    let t = &traces(&runs)[0];
    let id = t["run_id"].as_str().unwrap().to_owned();
    // The score sidecar points at the forbidden call, by its turn and step.
    let score = &scores(&runs)[0];
    let at = &score["constraint"]["at"];
    assert_eq!(at.as_array().unwrap().len(), 1, "{score}");
    assert_eq!(at[0]["kind"], "tool_call");
    assert_eq!(at[0]["problem"], "forbidden tool");
    let (turn, step) = (
        at[0]["turn"].as_u64().unwrap(),
        at[0]["step"].as_u64().unwrap(),
    );
    let called = t["evidence"]["tool_calls"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["turn"] == turn && c["step"] == step)
        .expect("the pointed-at call is in the trace");
    assert_eq!(called["name"], "issue_refund");
    assert!(
        score["integrity"].get("at").is_none(),
        "a passing layer points nowhere"
    );

    let view = View::start(dir.path(), &["runs"]);
    let dom = view.dom(dir.path(), &format!("/runs/{id}"));
    let anchor = format!("call-{turn}-{step}");
    assert!(
        dom.contains(&format!(
            "forbidden tool: <a class=\"at\" href=\"#{anchor}\">turn {turn}, step {step} · <code>issue_refund</code></a>"
        )),
        "the constraint layer links to the call: {dom}"
    );
    let marked = div_at(
        &dom,
        &format!("<div class=\"step tool flagged\" id=\"{anchor}\">"),
    );
    assert!(
        marked.contains("<span class=\"badge flag\">constraint: forbidden tool</span>"),
        "{marked}"
    );
    assert!(marked.contains("<code>issue_refund</code>"), "{marked}");
    assert_eq!(
        dom.matches("flagged").count(),
        1,
        "only the pointed-at step is marked"
    );
    // As a person sees it: the marked step's tint fills a band of the page.
    let url = format!("{}/runs/{id}", view.url);
    let shot = screenshot(dir.path(), &url, &[]);
    assert!(
        tinted(&shot) > 20_000,
        "the marked step is tinted: {}",
        tinted(&shot)
    );

    // A score written before pointers existed reads as before: no link, no mark.
    let trace_path = trace_paths(&runs)[0].clone();
    let score_path = trace_path.with_extension("score.json");
    let mut old: Value = serde_json::from_slice(&std::fs::read(&score_path).unwrap()).unwrap();
    for layer in ["outcome", "trajectory", "constraint", "integrity"] {
        old[layer].as_object_mut().unwrap().remove("at");
    }
    let rewrite = |score: &Value| {
        let aside = dir.path().join("score.aside");
        std::fs::write(&aside, serde_json::to_vec(score).unwrap()).unwrap();
        std::fs::rename(&aside, &score_path).unwrap();
        let pointers = |s: &Value| s["constraint"]["at"].as_array().map(Vec::len);
        assert!(
            poll_until(Duration::from_secs(20), || {
                pointers(&view.api(&format!("/api/runs/{id}"))["score"]) == pointers(score)
            }),
            "the rewritten score is read"
        );
    };
    rewrite(&old);
    let dom = view.dom(dir.path(), &format!("/runs/{id}"));
    assert!(
        dom.contains("forbidden tool `issue_refund` called"),
        "the detail"
    );
    assert!(!dom.contains("class=\"at\""), "no pointer to link");
    assert!(!dom.contains("flagged"), "no step marked");
    assert!(
        dom.contains(&format!("id=\"{anchor}\"")),
        "the steps keep their anchors"
    );
    let plain = screenshot(dir.path(), &url, &[]);
    assert!(tinted(&plain) < 2_000, "nothing tinted: {}", tinted(&plain));

    // A pointer at a step the trace does not have is text, never a broken link; its words are
    // the file's, escaped.
    let mut odd = old.clone();
    odd["constraint"]["at"] = json!([
        {"kind": "tool_call", "turn": 9, "step": 9, "problem": "<b>gone</b>"},
        {"kind": "teleport", "problem": "from a newer wt"},
        {"kind": "tool_call", "turn": turn, "step": step, "problem": "forbidden tool"}
    ]);
    rewrite(&odd);
    let dom = view.dom(dir.path(), &format!("/runs/{id}"));
    assert!(
        dom.contains("&lt;b&gt;gone&lt;/b&gt;: <span class=\"muted\">turn 9, step 9 (not in the trace)</span>"),
        "{dom}"
    );
    assert!(!dom.contains("href=\"#call-9-9\""));
    assert!(dom.contains("from a newer wt: <span class=\"muted\">a kind of step this wt does not know (not in the trace)</span>"));
    assert!(
        dom.contains(&format!("href=\"#{anchor}\"")),
        "the good pointer still links"
    );
    assert_eq!(dom.matches("flagged").count(), 1);
}

#[test]
fn a_simulated_users_turns_are_marked_with_its_model_and_scripted_turns_are_not() {
    let dir = tmp();
    let llm = crate::gateway::FakeLlm::start(dir.path(), crate::judging::RULES);
    let pack = crate::judging::small_pack(
        dir.path(),
        &format!(
            "name = \"sim\"\n[models.sim]\nprovider = \"openai\"\nendpoint = \"{}/v1\"\nmodel = \"sim-stop\"\n",
            llm.base
        ),
        &[(
            "greet-then-ask",
            "id = \"greet-then-ask\"\nturns = [\"Hello\"]\n[user]\nmodel = \"sim\"\ninstruction = \"Find out where order 1234 is.\"\n",
        )],
    );
    let agent = crate::judging::agent(dir.path(), &llm.base);
    let r = Wt::new(dir.path())
        .args(["run", "--out", "runs"])
        .pack(&pack)
        .agent(&agent)
        .run();
    assert_eq!(r.code, 0, "{r}");
    let runs = dir.path().join("runs");
    let t = &traces(&runs)[0];
    // One scripted turn, then the user model's one message before it said its stop word.
    assert_eq!(t["turns"].as_array().unwrap().len(), 2, "{t}");
    assert_eq!(t["user"]["turns"], 1, "{}", t["user"]);
    assert_eq!(t["user"]["ended_by"], "stop");
    let id = t["run_id"].as_str().unwrap();
    let view = View::start(dir.path(), &["runs"]);
    let dom = view.dom(dir.path(), &format!("/runs/{id}"));
    assert!(
        dom.contains("<div class=\"step user\"><h4>user · turn 0</h4>"),
        "the scripted turn as before: {dom}"
    );
    assert!(
        dom.contains(
            "<div class=\"step user simulated\"><h4>simulated user · <code>sim</code> · turn 1</h4>"
        ),
        "the user model's turn marked with its model: {dom}"
    );
    assert_eq!(dom.matches("step user simulated").count(), 1);
    assert!(dom.contains("Hi, where is my order 1234?"));
    // The user model's last call (its stop word, never sent) names a turn that has no record:
    // it is shown after the turns, like every model call, each with its anchor.
    assert!(
        dom.contains("Calls of turn 2, which the run has no record of"),
        "{dom}"
    );
    let calls = t["evidence"]["model_calls"].as_array().unwrap();
    assert_eq!(calls.last().unwrap()["source"], "user");
    assert_eq!(calls.last().unwrap()["turn"], 2);
    for i in 0..calls.len() {
        assert!(dom.contains(&format!("id=\"model-{i}\"")), "model call {i}");
    }
}

#[test]
fn a_runs_events_and_artifacts_are_read_where_the_index_says_and_are_the_runs_own() {
    let dir = tmp();
    let args = ["--runs", "4", "--jobs", "3", "--hook", "debrief"];
    let out = sweep(
        dir.path(),
        "runs",
        &[&args[..], &["--agent", "demo-forbidden-tool"]].concat(),
    );
    let lines = crate::harness::journal(&out);
    let names: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let events_of = |view: &View| {
        trace_paths(&out)
            .iter()
            .map(|path| {
                let t: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
                let id = t["run_id"].as_str().unwrap();
                let got = view.api(&format!("/api/runs/{id}"));
                let want: Vec<&Value> = lines.iter().filter(|e| e["run_id"] == id).collect();
                let events = got["events"].as_array().unwrap();
                assert_eq!(events.iter().collect::<Vec<_>>(), want, "{id}");
                // Its artifacts: the sidecars beside it but its score (as `wt view runs`
                // names them).
                let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
                let mut beside: Vec<String> = names
                    .iter()
                    .filter(|n| n.starts_with(&format!("{stem}.")))
                    .filter(|n| **n != format!("{stem}.json") && !n.ends_with(".score.json"))
                    .map(|n| format!("runs/{n}"))
                    .collect();
                beside.sort();
                assert!(!beside.is_empty(), "debrief wrote beside {stem}");
                assert_eq!(got["artifacts"], json!(beside), "{id}");
                (got["events"].clone(), got["artifacts"].clone())
            })
            .collect::<Vec<_>>()
    };
    let view = View::start(dir.path(), &["runs"]);
    let status = view.api("/api/status");
    assert_eq!(
        status["indexed"], status["runs"],
        "every run from the index"
    );
    let indexed = events_of(&view);
    drop(view);
    for e in std::fs::read_dir(&out).unwrap() {
        let p = e.unwrap().path();
        if p.to_string_lossy().ends_with(".index.jsonl") {
            std::fs::remove_file(p).unwrap();
        }
    }
    let view = View::start(dir.path(), &["runs"]);
    assert_eq!(view.api("/api/status")["indexed"], 0);
    assert_eq!(
        events_of(&view),
        indexed,
        "the same events and artifacts from the journal whole and the directory listed"
    );
}
