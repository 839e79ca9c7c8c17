//! The HTML views: `wt report --format html` and `wt compare --format html`.
//!
//! One self-contained file: inline CSS, inline SVG drawn here, no script, no font, no image
//! and no request of any kind (a Content-Security-Policy of `default-src 'none'` says so to
//! the browser). Every piece of text that came from a runs directory goes through `maud`,
//! which escapes it, so a reply containing `<script>` is shown as text.
//!
//! Size stays bounded whatever the sweep: the tables grow with the number of scenarios, not
//! runs; full details are shown for runs that did not pass only, at most
//! [`MAX_DETAILED_RUNS`] of them ([`MAX_PER_CLUSTER`] per triage cluster, evenly spaced),
//! each text cut at [`MAX_TEXT`] characters, and the page says what it left out.

use std::collections::BTreeMap;
use std::path::Path;

use maud::{DOCTYPE, Markup, PreEscaped, html};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use windtunnel_model::{HookProvenance, ToolCall, Trace, TurnRecord};

use super::compare::{Change, Comparison, SideStats};
use super::scan::{Details, MAX_CLUSTERS, MAX_DETAILED_RUNS, MAX_PER_CLUSTER};
use super::table::{failing_layers, pack_line, pct, usage_line};
use super::triage::{Head, Rung};
use super::{LoadedRun, Report, ScenarioSummary};

/// Longest text shown for one field (reply, input, arguments, detail), in characters.
pub(crate) const MAX_TEXT: usize = 1000;
/// Most turns and tool calls shown per run.
pub(crate) const MAX_TURNS: usize = 12;

/// The turns a run's details show: all of them, or the first `MAX_TURNS - 1` and the last
/// (the final reply, which the outcome layer judges, is never the one cut).
fn shown_turns<T>(turns: &[T]) -> Vec<&T> {
    if turns.len() <= MAX_TURNS {
        return turns.iter().collect();
    }
    turns[..MAX_TURNS - 1].iter().chain(turns.last()).collect()
}
pub(crate) const MAX_TOOL_CALLS: usize = 20;

const CSP: &str = "default-src 'none'; style-src 'unsafe-inline'";

const CSS: &str = r#"
:root{--fg:#1d2330;--muted:#5b6474;--line:#dde1e8;--bg:#f6f7f9;--card:#fff;--pass:#2f9e5b;--fail:#d64545;--error:#c7861b;--accent:#3461c1}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;color:var(--fg);background:var(--bg)}
header{background:#1d2330;color:#fff;padding:18px 28px}
header h1{margin:0 0 4px;font-size:20px}
header p{margin:0;color:#c9cfdb}
main{padding:18px 28px;max-width:1400px}
section{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:14px 18px;margin:0 0 16px}
h2{font-size:16px;margin:0 0 10px}
h3{font-size:14px;margin:14px 0 6px}
table{border-collapse:collapse;width:100%}
th,td{text-align:left;padding:5px 8px;border-bottom:1px solid var(--line);vertical-align:top}
th{font-weight:600;color:var(--muted);font-size:12px;text-transform:uppercase;letter-spacing:.03em}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
td.nowrap,tr.scenario-row td:first-child{white-space:nowrap}
.tiles{display:flex;flex-wrap:wrap;gap:10px}
.tile{border:1px solid var(--line);border-radius:6px;padding:8px 14px;min-width:120px}
.tile b{display:block;font-size:22px}
.tile span{color:var(--muted);font-size:12px}
.pass{color:var(--pass)}.fail{color:var(--fail)}.error{color:var(--error)}
.badge{display:inline-block;border-radius:10px;padding:0 8px;font-size:12px;font-weight:600;color:#fff;background:var(--muted)}
.badge.PASS,.badge.improved{background:var(--pass)}.badge.FAIL,.badge.regressed{background:var(--fail)}
.badge.ERROR,.badge.UNSCORED{background:var(--error)}.badge.unchanged{background:#7b8496}
.muted{color:var(--muted)}
.warn{background:#fff7e6;border-color:#f0d49a}
.cluster{border-left:4px solid var(--line);padding:4px 0 4px 12px;margin:10px 0}
.rung-wiring .cluster{border-color:#8e44ad}.rung-harness .cluster{border-color:var(--error)}
.rung-steering .cluster{border-color:var(--fail)}.rung-model .cluster{border-color:var(--accent)}
details.run{border:1px solid var(--line);border-radius:6px;margin:6px 0;background:#fbfbfc}
details.run>summary{cursor:pointer;padding:6px 10px}
details.run>div{padding:4px 12px 10px}
pre{white-space:pre-wrap;word-break:break-word;margin:0;font:12px/1.4 ui-monospace,"DejaVu Sans Mono",monospace}
.layer-ok{color:var(--pass)}.layer-bad{color:var(--fail);font-weight:600}
svg text{font:11px system-ui,sans-serif;fill:var(--muted)}
code{font:12px ui-monospace,"DejaVu Sans Mono",monospace}
"#;

/// Characters escaped in link paths: everything but unreserved characters and `/`, so no
/// part of a directory name can read as a scheme, query or fragment.
const PATH: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~')
    .remove(b'/');

/// Text cut at [`MAX_TEXT`] characters, with a note of the full length.
fn cut(s: &str) -> String {
    cut_to(s, MAX_TEXT)
}

/// Text cut at `max` characters, with a note of the full length: every page that shows
/// text read from a runs directory (this one, `wt view`'s) bounds it so.
pub(crate) fn cut_to(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        None => s.to_owned(),
        Some((end, _)) => {
            let n = max + s[end..].chars().count();
            format!("{}… [cut: {n} characters in all]", &s[..end])
        }
    }
}

/// An error or a stderr tail cut at about [`MAX_TEXT`] characters, keeping the end, where
/// the cause is (a quoted stderr's last line), with a note of the full length.
fn cut_keeping_end(s: &str) -> String {
    let n = s.chars().count();
    if n <= MAX_TEXT {
        s.to_owned()
    } else {
        let kept = crate::term::head_and_end(s, MAX_TEXT);
        format!("{kept} [cut: {n} characters in all]")
    }
}

fn json_text(v: &serde_json::Value) -> String {
    cut(&serde_json::to_string(v).unwrap_or_default())
}

fn f1(x: f64) -> String {
    format!("{x:.1}")
}

fn page(title: &str, header: Markup, body: Markup) -> String {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta http-equiv="Content-Security-Policy" content=(CSP);
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) }
                style { (PreEscaped(CSS)) }
            }
            body {
                header { (header) }
                main { (body) }
            }
        }
    }
    .into_string()
}

/// A pass-rate bar with its interval as a whisker.
pub(crate) fn rate_bar(rate: Option<f64>, interval: Option<[f64; 2]>, label: &str) -> Markup {
    const W: f64 = 160.0;
    let Some(rate) = rate else {
        return html! { span.muted { "-" } };
    };
    let colour = if rate >= 0.999 {
        "#2f9e5b"
    } else if rate >= 0.5 {
        "#c7861b"
    } else {
        "#d64545"
    };
    let [lo, hi] = interval.unwrap_or([rate, rate]);
    html! {
        svg class="bar" width="170" height="16" viewBox="0 0 170 16" role="img" {
            title { (label) }
            rect x="0" y="3" width=(f1(W)) height="10" rx="2" fill="#e6e9ef" {}
            rect x="0" y="3" width=(f1(W * rate)) height="10" rx="2" fill=(colour) {}
            line x1=(f1(W * lo)) x2=(f1(W * hi)) y1="8" y2="8" stroke="#1d2330" stroke-width="1.5" {}
            line x1=(f1(W * lo)) x2=(f1(W * lo)) y1="4" y2="12" stroke="#1d2330" stroke-width="1.5" {}
            line x1=(f1(W * hi)) x2=(f1(W * hi)) y1="4" y2="12" stroke="#1d2330" stroke-width="1.5" {}
        }
    }
}

fn interval_text(s: &ScenarioSummary) -> String {
    match (s.pass_rate, s.wilson95) {
        (Some(r), Some([lo, hi])) => format!("{} [{}–{}]", pct(r), pct(lo), pct(hi)),
        _ => "-".to_owned(),
    }
}

/// A histogram of turn latencies (20 bins between the fastest and slowest turn), from
/// `latencies`: milliseconds → turns.
fn latency_histogram(latencies: &BTreeMap<u64, u64>) -> Markup {
    let n: u64 = latencies.values().sum();
    let (Some(&min), Some(&max)) = (latencies.keys().next(), latencies.keys().next_back()) else {
        return html! { p.muted { "No completed turns." } };
    };
    let bins = 20usize;
    let span = (max - min).max(1) as f64;
    let mut counts = vec![0u64; bins];
    for (&l, &k) in latencies {
        // All turns equally fast (a pinned clock): one bar in the middle.
        let i = if max == min {
            bins / 2
        } else {
            (((l - min) as f64 / span) * bins as f64) as usize
        };
        counts[i.min(bins - 1)] += k;
    }
    let top = counts.iter().copied().max().unwrap_or(1).max(1) as f64;
    // Nearest rank, as over the sorted list of every turn.
    let pick = |p: u64| {
        let rank = (n * p).div_ceil(100).saturating_sub(1);
        let mut seen = 0;
        for (&ms, &k) in latencies {
            seen += k;
            if seen > rank {
                return ms;
            }
        }
        max
    };
    let (w, h, bw) = (640.0, 140.0, 640.0 / bins as f64);
    html! {
        svg class="histogram" width="660" height="180" viewBox="0 0 660 180" role="img" {
            title { "Turn latency distribution, " (n) " turns" }
            @for (i, c) in counts.iter().enumerate() {
                @let bh = h * (*c as f64) / top;
                rect x=(f1(10.0 + i as f64 * bw)) y=(f1(10.0 + h - bh)) width=(f1(bw - 2.0)) height=(f1(bh)) fill="#3461c1" {
                    title { (c) " turn(s)" }
                }
            }
            line x1="10" x2=(f1(10.0 + w)) y1="150" y2="150" stroke="#9aa3b2" {}
            text x="10" y="166" { (min) " ms" }
            text x=(f1(10.0 + w)) y="166" text-anchor="end" { (max) " ms" }
            text x=(f1(10.0 + w / 2.0)) y="178" text-anchor="middle" {
                (n) " turns · p50 " (pick(50)) " ms · p95 " (pick(95)) " ms"
            }
        }
    }
}

fn link(path: &Path, base: Option<&Path>) -> String {
    let target = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
    let rel = match base {
        Some(b) => {
            let b = if b.as_os_str().is_empty() {
                Path::new(".")
            } else {
                b
            };
            let b = std::path::absolute(b).unwrap_or_else(|_| b.to_owned());
            pathdiff::diff_paths(&target, &b).unwrap_or(target)
        }
        None => path.to_owned(),
    };
    let s = rel.to_string_lossy();
    let encoded = utf8_percent_encode(&s, PATH).to_string();
    if encoded.starts_with('/') {
        encoded
    } else {
        format!("./{encoded}")
    }
}

fn verdict_of(run: &LoadedRun) -> &'static str {
    run.score
        .as_ref()
        .map_or("UNSCORED", |s| s.verdict.as_str())
}

/// A run's details, open when `open`: what went wrong, the scorer's evidence, the turns and
/// tool calls, the world server, warnings, files and the debrief.
fn run_details(run: &LoadedRun, base: Option<&Path>, open: bool) -> Markup {
    let t = &run.trace;
    let verdict = verdict_of(run);
    let debrief = run.debrief_excerpt();
    html! {
        details.run open[open] id=(format!("run-{}", t.run_id)) {
            summary {
                span class=(format!("badge {verdict}")) { (verdict) } " "
                strong { (t.scenario_id) " #" (t.run_index) }
                " " span.muted { "run " code { (t.run_id) } " · " (t.agent.label) " · " (t.started_at) }
            }
            div {
                @if let Some(e) = run.score.as_ref().and_then(|s| s.error.as_ref()).or(run.score_problem.as_ref()).or(t.error.as_ref()) {
                    p.error { "Error: " (cut_keeping_end(e)) }
                }
                @if let Some(d) = &t.denial {
                    p.error { "Guard " code { (d.guard) } " denied turn " (d.turn) ": " (d.code) " — " (cut(&d.message)) }
                }
                (scorer_evidence(run))
                (turns_table(&t.turns))
                (tool_calls_table(&t.evidence.tool_calls))
                (world_server(t))
                @if !t.worker_warnings.is_empty() {
                    h3 { "Warnings" }
                    ul { @for w in t.worker_warnings.iter().take(MAX_TURNS) { li { (cut(w)) } } }
                }
                (run_files(run, base))
                @if let Some(d) = debrief {
                    h3 { "Debrief" }
                    blockquote.debrief { (d) }
                }
            }
        }
    }
}

/// A run's score, layer by layer, with each layer's detail.
fn scorer_evidence(run: &LoadedRun) -> Markup {
    html! {
        h3 { "Scorer evidence" }
        @if let Some(score) = &run.score {
            table.layers {
                @for (name, layer) in score.layers() {
                    tr {
                        td { (name) }
                        td class=(if layer.passed { "layer-ok" } else { "layer-bad" }) {
                            (if layer.passed { "pass" } else { "FAIL" })
                        }
                        td { pre { (cut(&layer.detail)) } }
                    }
                }
            }
        } @else {
            p.muted { "No score." }
        }
    }
}

/// A run's turns (at most [`MAX_TURNS`], the last always among them): input, reply or
/// error, retries and latency.
fn turns_table(turns: &[TurnRecord]) -> Markup {
    html! {
        h3 { "Turns (" (turns.len()) ")" }
        table.turns {
            tr { th { "#" } th { "input" } th { "reply" } th.num { "ms" } }
            @for (k, turn) in shown_turns(turns).into_iter().enumerate() {
                @if k + 1 == MAX_TURNS && turns.len() > MAX_TURNS {
                    tr { td colspan="4" { p.muted { (turns.len() - MAX_TURNS) " more turn(s) not shown; the last turn, which the outcome is judged on, follows." } } }
                }
                tr {
                    td { (turn.index) }
                    td { pre { (cut(&turn.input)) } }
                    td {
                        @if let Some(reply) = &turn.reply { pre.reply { (cut(reply)) } }
                        @if let Some(e) = &turn.error {
                            pre.error {
                                "error" @if let Some(k) = turn.error_kind { " (" (k) ")" } ": " (cut_keeping_end(e))
                            }
                        }
                        @if !turn.retries.is_empty() { p.muted { (turn.retries.len()) " request(s) retried" } }
                    }
                    td.num { (turn.latency_ms) }
                }
            }
        }
    }
}

/// A run's tool calls (at most [`MAX_TOOL_CALLS`]): where, which tool, its arguments and
/// its result or error.
fn tool_calls_table(calls: &[ToolCall]) -> Markup {
    html! {
        h3 { "Tool calls (" (calls.len()) ")" }
        @if !calls.is_empty() {
            table.tools {
                tr { th { "turn.step" } th { "tool" } th { "arguments" } th { "result" } }
                @for c in calls.iter().take(MAX_TOOL_CALLS) {
                    tr {
                        td { (c.turn) "." (c.step) }
                        td {
                            code { (c.name) }
                            @if let Some(server) = &c.server { br; span.muted { "world server " (cut(server)) } }
                        }
                        td { pre { (json_text(&c.arguments)) } }
                        td {
                            pre { (json_text(&c.result)) }
                            @if let Some(e) = &c.error { pre.error { "error: " (cut_keeping_end(e)) } }
                        }
                    }
                }
            }
        }
        @if calls.len() > MAX_TOOL_CALLS {
            p.muted { (calls.len() - MAX_TOOL_CALLS) " more tool call(s) not shown." }
        }
    }
}

/// A run's world server, when it had one: its name, how it exited and its stderr's tail.
fn world_server(t: &Trace) -> Markup {
    html! {
        @if let Some(server) = t.world.as_ref().and_then(|w| w.server.as_ref()) {
            h3 { "World server" }
            p {
                code { (cut(&server.name)) }
                @if let Some(exit) = &server.exit { ": " (cut(exit)) }
            }
            @if !server.stderr_tail.trim().is_empty() {
                pre { (cut_keeping_end(&server.stderr_tail)) }
            }
        }
    }
}

/// Links to a run's trace and hook artifacts, relative to `base`.
fn run_files(run: &LoadedRun, base: Option<&Path>) -> Markup {
    html! {
        h3 { "Files" }
        ul.files {
            li { a href=(link(&run.path, base)) { (run.path.display()) } " (trace)" }
            @for a in &run.artifacts {
                li {
                    a href=(link(a, base)) { (a.file_name().map(|n| n.to_string_lossy()).unwrap_or_default()) }
                    @if let Some(kind) = LoadedRun::artifact_kind(a) { " " span.muted { "(" (kind) ")" } }
                }
            }
        }
    }
}

fn rung_blurb(r: Rung) -> &'static str {
    match r {
        Rung::Wiring => {
            "The agent could not be reached or answered out of protocol. Fix the connection first."
        }
        Rung::Harness => {
            "The environment misbehaved: tool errors, a denied turn, broken run files."
        }
        Rung::Steering => {
            "The agent did what its instructions should have prevented: a forbidden tool, a skipped step."
        }
        Rung::Model => "Everything around it worked and the result is still wrong.",
    }
}

fn failures_section(details: &Details, base: Option<&Path>) -> Markup {
    let detailed: usize = details.listed.iter().map(|(_, s)| s.len()).sum();
    // The first run shown opens by itself, so the page shows one failure whole at a glance.
    let first_open = details
        .listed
        .first()
        .and_then(|(_, s)| s.first())
        .map(|r| r.trace.run_id.as_str());
    let mut by_rung: BTreeMap<Rung, Vec<&(Head, Vec<LoadedRun>)>> = BTreeMap::new();
    for p in &details.listed {
        by_rung.entry(p.0.rung).or_default().push(p);
    }
    html! {
        section #failures {
            h2 { "Runs that did not pass, by the triage ladder" }
            @if details.listed.is_empty() && details.hidden == 0 {
                p.pass { "Every run passed." }
            } @else {
                p.sampling {
                    "Showing full details for " strong { (detailed) } " of " strong { (details.not_passed) }
                    " runs that did not pass (at most " (MAX_PER_CLUSTER) " per cluster, evenly spaced, "
                    (MAX_DETAILED_RUNS) " in all; text cut at " (MAX_TEXT) " characters). "
                    "Every run is counted in the tables above."
                    @if details.hidden > 0 {
                        " " (details.hidden) " further cluster(s) are counted but not listed."
                    }
                }
                @for (rung, items) in &by_rung {
                    div class=(format!("rung rung-{}", rung.as_str())) {
                        h3 { (rung.as_str()) " — " span.muted { (rung_blurb(*rung)) } }
                        @for (c, shown) in items.iter().map(|p| (&p.0, &p.1)) {
                            div.cluster {
                                p {
                                    span class=(format!("badge {}", c.verdict)) { (c.verdict) } " "
                                    strong { (c.scenario_id) } " · "
                                    span.count { (c.runs) "/" (c.of) " runs" } " · "
                                    @if c.failed_layers.is_empty() { "no layer verdict" } @else { (c.failed_layers.join(", ")) }
                                }
                                p { "Reason: " code { (cut(&c.reason)) } }
                                p.muted { "Evidence: " (cut(&c.evidence)) }
                                @for r in shown.iter() {
                                    (run_details(r, base, first_open == Some(r.trace.run_id.as_str())))
                                }
                                @if c.runs > shown.len() {
                                    p.muted { (c.runs - shown.len()) " more run(s) in this cluster not shown in full." }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

fn warnings_section(warnings: &[String]) -> Markup {
    html! {
        @if !warnings.is_empty() {
            section.warn #warnings {
                h2 { "Warnings (" (warnings.len()) ")" }
                ul { @for w in warnings.iter().take(MAX_CLUSTERS) { li { (cut(w)) } } }
                @if warnings.len() > MAX_CLUSTERS { p.muted { (warnings.len() - MAX_CLUSTERS) " more." } }
            }
        }
    }
}

fn gate_text(code: u8) -> &'static str {
    match code {
        0 => "0 — every run passed",
        1 => "1 — a run failed",
        _ => "3 — a run or scenario could not be judged, or a sweep is incomplete",
    }
}

/// `wt report --format html`. Links to trace and artifact files are relative to `base`, the
/// directory the page is written to (the working directory when `None`).
pub(crate) fn report_page(report: &Report, base: Option<&Path>) -> String {
    // Runs held in memory (not read from a directory) have no details to show.
    let none = Details::default();
    let details = report.details.as_ref().unwrap_or(&none);
    let title = format!("wt report: {}", report.agents.join(", "));
    let body = html! {
        (summary_section(report))
        (warnings_section(&report.warnings))
        (scenarios_section(report))
        section #latency {
            h2 { "Turn latency" }
            (latency_histogram(&details.latencies))
        }
        (failures_section(details, base))
        (sweeps_section(report, &details.hooks))
    };
    page(&title, report_header(report, details), body)
}

/// The report page's header: agents, packs, runs and scenarios, and when the runs ran.
fn report_header(report: &Report, details: &Details) -> Markup {
    let p = &report.pack;
    let agents = &report.agents;
    let packs: Vec<String> = {
        let mut v: Vec<String> = report
            .sweeps
            .iter()
            .filter_map(|s| s.pack.clone())
            .collect();
        v.sort();
        v.dedup();
        v
    };
    let (first, last) = (details.first.as_deref(), details.last.as_deref());
    html! {
        h1 { "Wind Tunnel report" }
        p {
            "agent " strong { (agents.join(", ")) }
            " · pack " strong { @if packs.is_empty() { "?" } @else { (packs.join(", ")) } }
            " · " (p.runs) " runs in " (p.scenarios) " scenario(s)"
            @if let (Some(a), Some(b)) = (first, last) { " · " (a) " → " (b) }
        }
    }
}

/// The report's summary: the pack's counts and estimates as tiles, usage and the gate.
fn summary_section(report: &Report) -> Markup {
    let p = &report.pack;
    html! {
        section #summary {
            h2 { "Summary" }
            div.tiles {
                div.tile { b.total { (p.runs) } span { "runs" } }
                div.tile { b.pass.passed { (p.passed) } span { "passed" } }
                div.tile { b.fail.failed { (p.failed) } span { "failed" } }
                div.tile { b.error.errored { (p.errored) } span { "could not be judged (ERROR)" } }
                @for a in &p.pass_hat_k { div.tile { b { (format!("{:.2}", a.value)) } span { "pass^" (a.k) } } }
                @for a in p.pass_at_k.iter().filter(|a| a.k > 1) { div.tile { b { (format!("{:.2}", a.value)) } span { "pass@" (a.k) } } }
            }
            p.muted { (pack_line(p)) }
            @if let Some(u) = &report.usage {
                p.muted { "Model: " (usage_line(u)) }
            }
            @if let Some(u) = &report.eval_usage {
                p.muted { "Evaluation (simulated users, judges): " (usage_line(u)) }
            }
            p { "Gate (" code { "wt report --gate" } "): " strong.gate { (gate_text(report.gate)) } }
            @if report.duplicates > 0 {
                p.muted { (report.duplicates) " trace file(s) repeat a run already read and are counted once." }
            }
        }
    }
}

/// The report's table of scenarios, one row each.
fn scenarios_section(report: &Report) -> Markup {
    html! {
        section #scenarios {
            h2 { "Scenarios" }
            table {
                tr {
                    th { "scenario" } th.num { "passed" } th { "pass rate (95% Wilson interval)" }
                    th.num { "failed" } th.num { "error" } th.num { "pass^n" } th.num { "pass@n" }
                    th.num { "p50 ms" } th.num { "p95 ms" } th { "failing layers" }
                }
                @for s in &report.scenarios {
                    @let a = &s.aggregate;
                    tr.scenario-row id=(format!("scenario-{}", a.scenario_id)) data-scenario=(a.scenario_id) {
                        td { strong { (a.scenario_id) } }
                        td.num.passed { (a.passed) "/" (a.runs) }
                        td.nowrap { (rate_bar(s.pass_rate, s.wilson95, &interval_text(s))) " " span.muted { (interval_text(s)) } }
                        td.num { (a.failed) }
                        td.num { (a.errored) }
                        td.num { (s.pass_hat_k.last().map_or("-".into(), |x| format!("{:.2}", x.value))) }
                        td.num { (s.pass_at_k.last().map_or("-".into(), |x| format!("{:.2}", x.value))) }
                        td.num { (a.latency.p50_ms) }
                        td.num { (a.latency.p95_ms) }
                        td { (failing_layers(a)) }
                    }
                }
            }
        }
    }
}

/// The report's sweeps, one row each, and the hooks their traces recorded.
fn sweeps_section(report: &Report, hooks: &[HookProvenance]) -> Markup {
    html! {
        section #sweeps {
            h2 { "Sweeps" }
            table {
                tr { th { "sweep" } th { "status" } th { "shards" } th { "pack" } th { "agent" } th { "started" } th.num { "runs" } th { "hooks" } }
                @for s in &report.sweeps {
                    tr {
                        td { code { (s.sweep_id) } }
                        td class=(if s.status.is_partial() { "error" } else { "" }) { (s.status.as_str()) }
                        td { (s.shards.join(", ")) }
                        td { (s.pack.clone().unwrap_or_default()) }
                        td { (s.agent.clone().unwrap_or_default()) }
                        td { (s.started_at.clone().unwrap_or_default()) }
                        td.num { (s.runs) }
                        td { (s.hooks.join(", ")) }
                    }
                }
            }
            @if !hooks.is_empty() {
                h3 { "Hooks (provenance recorded in the traces)" }
                table {
                    tr { th { "hook" } th { "version" } th { "SDK" } th { "source" } th { "sha256" } th { "settings" } }
                    @for h in hooks {
                        tr {
                            td { code { (h.name) } }
                            td { (h.version) }
                            td { (h.sdk_version) }
                            td { (cut(&h.source)) }
                            td { code { (h.sha256.as_deref().map_or("", |s| &s[..s.len().min(16)])) } }
                            td { @for (k, v) in &h.settings { code { (k) "=" (cut(v)) } " " } }
                        }
                    }
                }
            }
        }
    }
}

fn side_cells(s: &SideStats) -> Markup {
    html! {
        td.num { (s.passed) "/" (s.runs) }
        // The rate and its interval as text, not only in the bar's tooltip.
        td { (rate_bar(s.pass_rate, s.interval, &s.display())) " " span.num { (crate::report::table::rate_with_interval(s.pass_rate, s.interval)) } }
    }
}

/// Most failing NEW runs listed per regressed scenario on the compare page.
const MAX_REGRESSED_RUNS: usize = 5;

/// `wt compare --format html`: the two sides' pass rates side by side, with the verdicts,
/// and for each regressed scenario some of NEW's runs that did not pass (`new`, the NEW
/// side's report).
pub(crate) fn compare_page(c: &Comparison, new: &Report) -> String {
    let header = html! {
        h1 { "Wind Tunnel comparison" }
        p { (c.summary) }
    };
    let body = html! {
        (sides_section(c))
        (warnings_section(&c.warnings))
        (verdicts_section(c))
        (layers_section(c))
        (regressed_runs_section(c, new))
        @if !c.only_in_base.is_empty() || !c.only_in_new.is_empty() {
            section #one-sided {
                h2 { "Scenarios on one side only" }
                ul {
                    @for o in &c.only_in_base { li { "only in BASE: " strong { (o.scenario_id) } " (" (o.passed) "/" (o.runs) " passed)" } }
                    @for o in &c.only_in_new { li { "only in NEW: " strong { (o.scenario_id) } " (" (o.passed) "/" (o.runs) " passed)" } }
                }
            }
        }
    };
    page("wt compare", header, body)
}

/// The comparison's sides, how it decides, the pack test, usage, and why it is incomplete.
fn sides_section(c: &Comparison) -> Markup {
    html! {
        section #sides {
            h2 { "Sides" }
            table {
                tr { th { "side" } th { "what" } }
                tr { td { strong { "BASE" } } td { (c.base.describe()) } }
                tr { td { strong { "NEW" } } td { (c.new.describe()) } }
            }
            p.muted {
                (c.method()) ". Gate (" code { "--gate" } "): " strong.gate { (c.gate) }
            }
            p { "Pack: " (c.pack_line()) }
            @if let Some(u) = c.usage_line() {
                p { "Model: " (u) }
            }
            @if let Some(u) = c.eval_line() {
                p { "Evaluation: " (u) }
            }
            @for i in &c.incomplete {
                p.warn { "Incomplete: " (i) }
            }
        }
    }
}

/// The comparison's table of scenarios on both sides: the rates, their difference, the test
/// and the verdict.
fn verdicts_section(c: &Comparison) -> Markup {
    html! {
        section #scenarios {
            h2 { "Scenarios" }
            table {
                tr {
                    th { "scenario" } th.num { "base" } th { "base rate" } th.num { "new" } th { "new rate" }
                    th.num { "diff" } th.num { "p" } th { "verdict" } th.num { "p50 Δ" } th.num { "p95 Δ" } th { "why" }
                }
                @for s in &c.scenarios {
                    tr.scenario-row id=(format!("scenario-{}", s.scenario_id)) data-verdict=(s.verdict.as_str()) {
                        td { strong { (s.scenario_id) } }
                        (side_cells(&s.base))
                        (side_cells(&s.new))
                        td.num { (format!("{:+.0} pp", s.difference * 100.0)) }
                        td.num { (super::compare::p_cell(s)) }
                        td { span class=(format!("badge {}", if s.verdict == Change::NotEnoughRuns { "unchanged" } else { s.verdict.as_str() })) { (s.verdict.as_str()) } }
                        td.num { (format!("{:+}", s.p50_delta_ms)) " ms" }
                        td.num { (format!("{:+}", s.p95_delta_ms)) " ms" }
                        td.muted { (s.why) }
                    }
                }
            }
        }
    }
}

/// Per scenario whose failures changed, each layer's failures on both sides and the reasons
/// that appeared or disappeared.
fn layers_section(c: &Comparison) -> Markup {
    let changed: Vec<_> = c
        .scenarios
        .iter()
        .filter(|s| !s.appeared.is_empty() || !s.disappeared.is_empty() || !s.layers.is_empty())
        .collect();
    html! {
        @if !changed.is_empty() {
            section #layers {
                h2 { "Failures by layer" }
                @for s in changed {
                    h3 { (s.scenario_id) }
                    table {
                        tr { th { "layer" } th.num { "base failed" } th.num { "new failed" } th { "" } }
                        @for l in &s.layers {
                            tr { td { (l.layer) } td.num { (l.base_failed) "/" (s.base.runs) } td.num { (l.new_failed) "/" (s.new.runs) } td { (l.status) } }
                        }
                    }
                    ul {
                        @for r in &s.appeared { li.fail { "appeared — " (r.layer) ": " code { (cut(&r.reason)) } " (" (r.new_runs) "/" (s.new.runs) " runs)" } }
                        @for r in &s.disappeared { li.pass { "disappeared — " (r.layer) ": " code { (cut(&r.reason)) } " (was " (r.base_runs) "/" (s.base.runs) " runs)" } }
                    }
                }
            }
        }
    }
}

/// Per regressed scenario, the first [`MAX_REGRESSED_RUNS`] of NEW's runs that did not pass
/// (`new`, the NEW side's report), with why.
fn regressed_runs_section(c: &Comparison, new: &Report) -> Markup {
    let regressed: Vec<&str> = c
        .scenarios
        .iter()
        .filter(|s| s.verdict == Change::Regressed)
        .map(|s| s.scenario_id.as_str())
        .collect();
    html! {
        @if !regressed.is_empty() {
            section #regressed-runs {
                h2 { "Failing runs of regressed scenarios (NEW)" }
                @for id in &regressed {
                    @let (failing, count) = new.not_passed_of(id);
                    h3 { (id) " — " (count) " run(s) did not pass" @if count > MAX_REGRESSED_RUNS { ", " (MAX_REGRESSED_RUNS) " shown" } }
                    ul {
                        @for r in failing.iter().take(MAX_REGRESSED_RUNS) {
                            li.fail {
                                "#" (r.run_index) " " (r.verdict.map_or("UNSCORED", |v| v.as_str())) " — "
                                @if let Some(e) = &r.error { (cut(e)) }
                                @else { @for (l, d) in &r.failures { strong { (l) } ": " (cut(d)) " " } }
                                " · " code { (r.trace) }
                            }
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::tests::{run, scanned};
    use windtunnel_model::Verdict;

    #[test]
    fn trace_text_is_escaped_and_the_page_is_self_contained() {
        let mut runs = vec![run("a", 0, Verdict::Fail), run("a", 1, Verdict::Pass)];
        let mut turn = windtunnel_model::TurnRecord::default();
        turn.input = "hi".into();
        turn.reply = Some("<script>alert(1)</script> & \"q\"".into());
        turn.latency_ms = 3;
        runs[0].0.turns.push(turn);
        let (_dir, report) = scanned(&runs);
        let page = report_page(&report, None);
        assert!(page.contains("&lt;script&gt;alert(1)&lt;/script&gt; &amp; &quot;q&quot;"));
        assert!(!page.contains("<script"), "no script element at all");
        assert!(!page.contains("http://") && !page.contains("https://"));
        assert!(page.contains("default-src 'none'"));
        assert!(page.contains("data-scenario=\"a\""));
    }

    #[test]
    fn sampling_is_even_and_bounded() {
        use crate::report::scan::{budgets, positions};
        assert_eq!(positions(50, 5), vec![0, 10, 20, 30, 40]);
        assert_eq!(positions(3, 5), vec![0, 1, 2]);
        assert_eq!(positions(7, 0), Vec::<usize>::new());
        // Five a cluster, a hundred in all.
        let b = budgets(&[3; 40].iter().chain(&[9; 30]).copied().collect::<Vec<_>>());
        assert_eq!(&b[..2], &[3, 3]);
        assert_eq!(b.iter().sum::<usize>(), MAX_DETAILED_RUNS);
        assert!(b[40..].iter().all(|&n| n <= MAX_PER_CLUSTER));
        let long = cut(&"x".repeat(MAX_TEXT + 5));
        assert!(
            long.starts_with(&format!("{}…", "x".repeat(MAX_TEXT))),
            "{long}"
        );
        assert!(long.ends_with(&format!("[cut: {} characters in all]", MAX_TEXT + 5)));
    }

    #[test]
    fn runs_turns_and_clusters_are_bounded_and_the_page_says_so() {
        // One failing run in each of MAX_CLUSTERS + 1 scenarios: one cluster each.
        let mut runs: Vec<_> = (0..=MAX_CLUSTERS)
            .map(|i| run(&format!("s{i:03}"), 0, Verdict::Fail))
            .collect();
        runs[0].0.turns = (0..MAX_TURNS as u32 + 3)
            .map(|index| {
                let mut turn = windtunnel_model::TurnRecord::default();
                turn.index = index;
                turn.input = "x".repeat(MAX_TEXT + 1);
                turn
            })
            .collect();
        let (_dir, report) = scanned(&runs);
        let page = report_page(&report, None);
        assert!(page.contains("1 further cluster(s) are counted but not listed."));
        assert_eq!(
            page.matches("<details class=\"run\"").count(),
            MAX_DETAILED_RUNS
        );
        assert!(
            page.contains("Showing full details for <strong>100</strong> of <strong>201</strong>")
        );
        assert!(page.contains("3 more turn(s) not shown; the last turn"));
        // The last turn (index MAX_TURNS + 2) is shown, the ones before it after the cut not.
        assert!(
            page.contains(&format!("<td>{}</td>", MAX_TURNS + 2)),
            "the final turn"
        );
        assert!(!page.contains(&format!("<td>{}</td>", MAX_TURNS + 1)));
        assert!(page.contains(&format!("[cut: {} characters in all]", MAX_TEXT + 1)));
        assert_eq!(
            page.matches("class=\"scenario-row\"").count(),
            MAX_CLUSTERS + 1
        );
    }

    #[test]
    fn links_are_relative_and_cannot_become_a_scheme() {
        let l = link(Path::new("javascript:x/a b#c.json"), Some(Path::new("")));
        assert_eq!(l, "./javascript%3Ax/a%20b%23c.json");
    }
}
