//! The pages of `wt view`, rendered on the server with maud (which escapes every piece of
//! text): the runs list, a run, and with `--baseline` the comparison and a pair of runs side
//! by side. Each works with scripts off; the one script submits the filter form when a
//! choice changes and says when new runs have arrived.

use std::collections::BTreeMap;

use maud::{DOCTYPE, Markup, html};
use serde_json::Value;
use windtunnel_model::{JudgeVerdict, Trace, TurnRecord};

use super::api::{sweep_param, verdict_str};
use super::index::params;
use super::index::{Column, Index, Query, RUNGS, VerdictWanted};
use super::state::{Reply, State};
use super::transcript::{
    MAX_POINTERS, Marks, Step, cut, json_text, model_step, pointer, steps_of, tool_step, transcript,
};
use crate::report::LoadedRun;
use crate::report::compare::{Comparison, Settings};
use crate::report::html::cut_to;
use crate::report::scan::LAYERS;
use crate::report::stats::Correction;

/// Longest part of an address a page repeats, in characters.
const MAX_ECHO: usize = 200;
/// Most runs without a readable trace the list names.
const MAX_TRACELESS: usize = 20;
/// Most runs of a scenario a pair page offers to choose from, per side.
const MAX_CHOICES: usize = 200;

pub(crate) const CSS: &str = r#"
:root{--fg:#1d2330;--muted:#5b6474;--line:#dde1e8;--bg:#f6f7f9;--card:#fff;--pass:#2f9e5b;--fail:#d64545;--error:#c7861b;--accent:#3461c1}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;color:var(--fg);background:var(--bg)}
header{background:#1d2330;color:#fff;padding:14px 24px}
header h1{margin:0 0 4px;font-size:19px}
header p{margin:0;color:#c9cfdb}
header a{color:#c9d8ff}
nav a{margin-right:14px}
main{padding:16px 24px}
section{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:12px 16px;margin:0 0 14px}
h2{font-size:16px;margin:0 0 10px}
h3{font-size:14px;margin:12px 0 6px}
table{border-collapse:collapse;width:100%}
th,td{text-align:left;padding:4px 8px;border-bottom:1px solid var(--line);vertical-align:top}
th{font-weight:600;color:var(--muted);font-size:12px}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
.pass{color:var(--pass)}.fail{color:var(--fail)}.error,.unscored{color:var(--error)}
.badge{display:inline-block;border-radius:10px;padding:0 8px;font-size:12px;font-weight:600;color:#fff;background:var(--muted)}
.badge.pass,.badge.improved{background:var(--pass)}.badge.fail,.badge.regressed{background:var(--fail)}
.badge.error,.badge.unscored{background:var(--error)}
.muted{color:var(--muted)}
.warn{background:#fff7e6;border-color:#f0d49a}
form.filters{display:flex;flex-wrap:wrap;gap:8px;align-items:end}
form.filters label{display:flex;flex-direction:column;font-size:12px;color:var(--muted)}
pre{white-space:pre-wrap;word-break:break-word;margin:0;font:12px/1.4 ui-monospace,"DejaVu Sans Mono",monospace}
code{font:12px ui-monospace,"DejaVu Sans Mono",monospace}
.step{border-left:3px solid var(--line);margin:6px 0;padding:4px 10px}
.step.user{border-color:var(--accent)}.step.agent{border-color:var(--pass)}.step.tool{border-color:#8e44ad}.step.model{border-color:#7b8496}.step.denied{border-color:var(--fail)}
.step h4{margin:0 0 4px;font-size:12px;color:var(--muted);text-transform:uppercase}
.diff-added{color:var(--pass)}.diff-removed{color:var(--fail)}.diff-changed{color:var(--error)}
.pager a{margin-right:10px}
#live{display:none}
#live.shown{display:block}
.pair{display:grid;grid-template-columns:1fr 1fr;gap:10px}
.spark{vertical-align:middle;margin-left:6px}.spark rect{fill:var(--accent)}
tr.scenario th{color:var(--fg);font-size:13px;padding-top:10px}
details.fold>summary{cursor:pointer;color:var(--accent);font-size:12px}
.only-here{background:rgba(214,69,69,.12);border-color:var(--fail)}
.differs{background:rgba(199,134,27,.12)}
.badge.diff{background:var(--fail)}
tr.current,div.turn.current{outline:2px solid var(--accent);outline-offset:-2px}
.step.user.simulated{border-color:#b07cc6}
.step.flagged{border-left-width:6px;border-color:var(--fail);background:rgba(214,69,69,.08)}
.badge.flag{background:var(--fail);text-transform:none}
ul.at{margin:4px 0 0;padding-left:18px}
@media (prefers-color-scheme: dark){
:root{--fg:#e3e7ee;--muted:#9aa3b2;--line:#343b48;--bg:#12151a;--card:#1b1f27;--accent:#7aa2ff}
header{background:#0b0d11}
.warn{background:#2e2614;border-color:#5c4a1f}
a{color:#8fb1ff}
input,select,button{background:#232833;color:var(--fg);border:1px solid var(--line)}
svg.bar rect:first-of-type{fill:#343b48}svg.bar line{stroke:#e3e7ee}
}
"#;

/// The page's icon: a wind tunnel's three streamlines.
pub(crate) const FAVICON: &str = r##"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 32 32"><rect width="32" height="32" rx="6" fill="#3461c1"/><path d="M5 10h16a4 4 0 1 0-4-4M5 16h22M5 22h14a4 4 0 1 1-4 4" fill="none" stroke="#fff" stroke-width="2.5" stroke-linecap="round"/></svg>"##;

/// Submits the filter form when a choice changes, says when the directories have been
/// read again since the page was made, and reads the keys: `j`/`k` move to the next or
/// previous run of a list (turn of a run), Enter opens it, `/` goes to the text filter.
pub(crate) const SCRIPT: &str = r#"
document.addEventListener('DOMContentLoaded', function () {
  var items = document.querySelectorAll('tr.run, div.turn');
  var at = -1;
  document.addEventListener('keydown', function (e) {
    var t = e.target;
    if (e.ctrlKey || e.metaKey || e.altKey || (t && /^(INPUT|SELECT|TEXTAREA)$/.test(t.tagName))) { return; }
    if (e.key === '/') {
      var q = document.querySelector('input[name=q]');
      if (q) { e.preventDefault(); q.focus(); }
      return;
    }
    if (e.key === 'Enter' && at >= 0) {
      var link = items[at].querySelector('a[href]');
      if (link) { window.location.href = link.getAttribute('href'); }
      return;
    }
    var step = e.key === 'j' ? 1 : e.key === 'k' ? -1 : 0;
    if (!step || !items.length) { return; }
    if (at >= 0) { items[at].classList.remove('current'); }
    at = Math.max(0, Math.min(items.length - 1, at + step));
    items[at].classList.add('current');
    items[at].scrollIntoView({block: 'nearest'});
  });
  var form = document.querySelector('form.filters');
  if (form) {
    form.querySelectorAll('select, input[type=checkbox]').forEach(function (el) {
      el.addEventListener('change', function () { form.submit(); });
    });
  }
  var live = document.getElementById('live');
  if (!live) { return; }
  var seen = live.getAttribute('data-generation');
  setInterval(function () {
    fetch('/api/status').then(function (r) { return r.json(); }).then(function (s) {
      if (String(s.generation) !== seen) {
        live.textContent = 'New runs have been read (' + s.runs + ' in all): reload to see them.';
        live.className = 'shown warn';
      }
    }).catch(function () {});
  }, 2000);
});
"#;

fn page(title: &str, header: Markup, body: Markup) -> String {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) }
                link rel="stylesheet" href="/static/view.css";
                link rel="icon" type="image/svg+xml" href="/static/favicon.svg";
                script src="/static/view.js" defer {}
            }
            body {
                header { (header) }
                main { (body) }
            }
        }
    }
    .into_string()
}

fn nav(state: &State) -> Markup {
    html! {
        nav {
            a href="/" { "Runs" }
            @if state.baseline.is_some() { a href="/compare" { "Compare with baseline" } }
            a href="/api/runs" { "JSON" }
        }
    }
}

fn error_page(state: &State, status: u16, title: &str, why: &str) -> Reply {
    Reply::html(
        status,
        page(
            title,
            html! { h1 { (title) } (nav(state)) },
            html! { section.warn { p { (why) } } },
        ),
    )
}

pub(crate) fn not_found(path: &str) -> Reply {
    Reply::html(
        404,
        page(
            "wt view: not found",
            html! { h1 { "Not found" } nav { a href="/" { "Runs" } } },
            html! { section { p { "Nothing is at " code { (cut_to(path, MAX_ECHO)) } "." } } },
        ),
    )
}

/// A query string a page cannot answer: 400, naming what it does not know.
pub(crate) fn bad_query(state: &State, why: &str) -> Reply {
    error_page(state, 400, "wt view: a query it cannot read", why)
}

fn dirs_line(index: &Index) -> String {
    index
        .dirs()
        .iter()
        .map(|d| d.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

fn run_href(run_id: &str, sweep: &str) -> String {
    let mut s = form_urlencoded::Serializer::new(String::new());
    s.append_pair("sweep", sweep);
    format!(
        "/runs/{}?{}",
        percent_encoding::utf8_percent_encode(run_id, percent_encoding::NON_ALPHANUMERIC),
        s.finish()
    )
}

fn select<T: Copy + PartialEq>(
    name: &str,
    label: &str,
    options: &[(T, &str)],
    chosen: Option<T>,
    any: &str,
) -> Markup {
    html! {
        label {
            (label)
            select name=(name) {
                option value="" selected[chosen.is_none()] { (any) }
                @for (v, text) in options {
                    option value=(text) selected[chosen == Some(*v)] { (text) }
                }
            }
        }
    }
}

/// `GET /`: every run, filtered, sorted and paged as the query says.
pub(crate) fn list(state: &State, query: &str) -> Reply {
    let q = match Query::parse(query) {
        Ok(q) => q,
        Err(why) => return bad_query(state, &why),
    };
    let index = state.runs.now();
    let answer = index.answer(&q);
    let report = &index.report;
    // Runs `wt report` counts as ERROR that have no trace to list: named by a journal but
    // unreadable, or of a scenario that could not start.
    let traceless = usize::try_from(report.totals().0)
        .unwrap_or(usize::MAX)
        .saturating_sub(index.rows.len());
    let sweeps = Choices::of(&index, |c| Some(&c.sweep_id), &q.sweep);
    let body = html! {
        p #live data-generation=(state.runs.generation()) {}
        @if query.is_empty() { (super::summary::section(&index)) }
        @if !report.warnings.is_empty() || !report.gaps.is_empty() {
            section.warn {
                @for w in report.gaps.iter().chain(&report.warnings).take(20) { p { (w) } }
            }
        }
        @if traceless > 0 { (traceless_runs(report, traceless)) }
        section { (filter_form(&index, &q, &sweeps)) }
        section {
            (list_count(&answer))
            (pager(&q, &answer))
            (runs_table(&index, &q, &answer.page, sweeps.all.len() > 1))
        }
    };
    let [passed, failed, errored, unscored] = index.counts;
    let header = html! {
        h1 { "wt view" }
        p #totals {
            (index.rows.len()) " run(s): " span.pass { (passed) " passed" } ", " span.fail { (failed) " failed" } ", " span.error { (errored) " error" }
            @if unscored > 0 { " (" (unscored) " unscored)" }
            @if traceless > 0 { ", and " (traceless) " without a readable trace" }
            " · " (index.scenarios.len()) " scenario(s) · " (dirs_line(&index))
        }
        (nav(state))
    };
    Reply::html(200, page("wt view: runs", header, body))
}

/// The runs the report counts that have no trace to list, named (at most
/// [`MAX_TRACELESS`] of each kind).
fn traceless_runs(report: &crate::report::Report, traceless: usize) -> Markup {
    html! {
        section.warn #traceless {
            h2 { (traceless) " run(s) without a readable trace (counted as error by wt report, not listed)" }
            ul {
                @for u in report.unread.iter().take(MAX_TRACELESS) {
                    li { "unreadable: " (u.scenario_id) " of sweep " code { (u.sweep_id) } ": its journal names " code { (u.stem) } ", whose trace cannot be read" }
                }
                @for e in report.scenario_errors.iter().take(MAX_TRACELESS) {
                    li { (u64::from(e.runs)) " run(s) of " (e.scenario_id) " (sweep " code { (e.sweep_id) } ") never ran: " (cut(&e.error)) }
                }
            }
        }
    }
}

/// The distinct values of a field of the runs (agents, models, sweeps), and which of them a
/// query chose.
struct Choices<'a> {
    all: Vec<&'a str>,
    chosen: Option<usize>,
}

impl<'a> Choices<'a> {
    fn of(
        index: &'a Index,
        field: fn(&crate::report::cells::Cell) -> Option<&str>,
        chosen: &Option<String>,
    ) -> Self {
        let all = index.distinct(field);
        let chosen = chosen
            .as_deref()
            .and_then(|c| all.iter().position(|x| *x == c));
        Choices { all, chosen }
    }

    /// A choice among them named `name`, or a text field when they are too many to list.
    fn field(&self, name: &str, given: &Option<String>) -> Markup {
        let options: Vec<(usize, &str)> = self.all.iter().copied().enumerate().collect();
        html! {
            @if options.len() <= 1000 {
                (select(name, name, &options, self.chosen, "any"))
            } @else {
                label { (name) input type="text" name=(name) value=(given.as_deref().unwrap_or("")); }
            }
        }
    }
}

/// The list's filters, sort and order, as the query has them.
fn filter_form(index: &Index, q: &Query, sweeps: &Choices) -> Markup {
    let scenarios: Vec<(usize, &str)> = index
        .scenarios
        .iter()
        .enumerate()
        .map(|(i, s)| (i, s.as_str()))
        .collect();
    let chosen_scenario = q
        .scenario
        .as_deref()
        .and_then(|s| index.scenarios.iter().position(|x| x == s));
    let verdicts: Vec<(VerdictWanted, &str)> = VerdictWanted::ALL
        .iter()
        .map(|v| (*v, v.as_str()))
        .collect();
    let layers: Vec<(usize, &str)> = LAYERS.iter().copied().enumerate().collect();
    let rungs: Vec<_> = RUNGS.iter().map(|r| (*r, r.as_str())).collect();
    let sorts: Vec<(Column, &str)> = Column::ALL.iter().map(|c| (*c, c.as_str())).collect();
    let agents = Choices::of(index, |c| Some(&c.agent), &q.agent);
    let models = Choices::of(index, |c| c.model.as_deref(), &q.model);
    html! {
        form.filters method="get" action="/" {
            @if scenarios.len() <= 1000 {
                (select("scenario", "scenario", &scenarios, chosen_scenario, "any"))
            } @else {
                label { "scenario" input type="text" name="scenario" value=(q.scenario.as_deref().unwrap_or("")); }
            }
            (agents.field("agent", &q.agent))
            (models.field("model", &q.model))
            (sweeps.field("sweep", &q.sweep))
            (select("verdict", "verdict", &verdicts, q.verdict, "any"))
            (select("layer", "failed layer", &layers, q.layer, "any"))
            (select("rung", "triage rung", &rungs, q.rung, "any"))
            label { "hook warning" input type="checkbox" name="hook_warning" value="1" checked[q.hook_warning]; }
            label { "text" input type="search" name="q" value=(q.q) placeholder="replies, tool calls, evidence"; }
            (select("sort", "sort by", &sorts, Some(q.sort), "scenario"))
            label { "order" select name="order" { option value="asc" selected[!q.desc] { "ascending" } option value="desc" selected[q.desc] { "descending" } } }
            @if q.limit != super::index::DEFAULT_LIMIT { input type="hidden" name="limit" value=(q.limit); }
            button type="submit" { "Apply" }
            a href="/" { "Clear" }
        }
    }
}

/// How many runs match and which of them the page shows.
fn list_count(answer: &super::index::Answer) -> Markup {
    let (from, to) = (
        (answer.start + 1).min(answer.total),
        (answer.start + answer.page.len()).min(answer.total),
    );
    html! {
        h2 #count {
            @if answer.total == 0 { "No run matches" }
            @else { "Runs " (from) "–" (to) " of " (answer.total) }
        }
        @if answer.unreadable > 0 {
            p.warn { (answer.unreadable) " run(s) could not be read again for the text search; they are not counted as matches." }
        }
    }
}

/// The links to the first, previous, next and last pages, those there are.
fn pager(q: &Query, answer: &super::index::Answer) -> Markup {
    let last_offset = answer.total.saturating_sub(1) / q.limit * q.limit;
    html! {
        p.pager {
            @if answer.start > 0 {
                a rel="first" href=(format!("/?{}", q.to_query_string(0))) { "« first" }
                @if q.cursor.is_none() {
                    a rel="prev" href=(format!("/?{}", q.to_query_string(q.offset.saturating_sub(q.limit)))) { "‹ previous" }
                }
            }
            @if let Some(next) = &answer.next {
                a rel="next" href=(format!("/?{}", q.to_cursor_string(next))) { "next ›" }
                a rel="last" href=(format!("/?{}", q.to_query_string(last_offset))) { "last »" }
            }
        }
    }
}

/// A column's heading: a link that sorts by it (the other way when it is the sort already).
fn sort_header(q: &Query, c: Column, text: &str, num: bool) -> Markup {
    let desc = if q.sort == c { !q.desc } else { false };
    let next = Query {
        sort: c,
        desc,
        ..q.clone()
    };
    let href = format!("/?{}", next.to_query_string(0));
    let arrow = match (q.sort == c, q.desc) {
        (true, false) => " ▲",
        (true, true) => " ▼",
        _ => "",
    };
    html! { th class=[num.then_some("num")] { a href=(href) { (text) (arrow) } } }
}

/// The page's runs, a row each (with a sweep column when there are several).
fn runs_table(index: &Index, q: &Query, page: &[u32], many_sweeps: bool) -> Markup {
    html! {
        table #runs {
            thead {
                tr {
                    (sort_header(q, Column::Scenario, "scenario #", false))
                    th { "agent" }
                    @if many_sweeps { th { "sweep" } }
                    (sort_header(q, Column::Verdict, "verdict", false))
                    th { "failed layers" }
                    (sort_header(q, Column::Rung, "rung", false))
                    (sort_header(q, Column::Turns, "turns", true))
                    (sort_header(q, Column::ToolCalls, "tool calls", true))
                    (sort_header(q, Column::ModelCalls, "model calls", true))
                    (sort_header(q, Column::Tokens, "tokens", true))
                    (sort_header(q, Column::Cost, "cost $", true))
                    (sort_header(q, Column::Duration, "ms", true))
                    th { "run" }
                }
            }
            tbody {
                @for &row in page { (run_row(index, row, many_sweeps)) }
            }
        }
    }
}

/// One run of the list.
fn run_row(index: &Index, row: u32, many_sweeps: bool) -> Markup {
    let r = &index.rows[row as usize];
    let b = index.brief(row);
    let (run_index, sweep) = (b.run_index, b.sweep);
    let id = index.run_id(row);
    let run_id = id.as_deref().unwrap_or("");
    let verdict = verdict_str(r.verdict);
    html! {
        tr.run data-run-id=(run_id) data-verdict=(verdict) data-agent=(b.agent) data-sweep=(sweep) {
            td {
                @match &id {
                    Ok(id) => { a href=(run_href(id, sweep)) { (index.scenario(row)) " #" (run_index) } }
                    Err(why) => { (index.scenario(row)) " #" (run_index) " " span.unreadable.error { "unreadable: " (why) } }
                }
            }
            td.agent { (cut_to(b.agent, MAX_ECHO)) @if !b.model.is_empty() { br; code.muted { (cut_to(b.model, MAX_ECHO)) } } }
            @if many_sweeps { td { code { (cut_to(sweep, MAX_ECHO)) } } }
            td { span class=(format!("badge {verdict}")) { (verdict) } }
            td { (r.failed_layers().collect::<Vec<_>>().join(", ")) }
            td { (r.facts.rung.map_or("", |r| r.as_str())) }
            td.num { (r.facts.turns) }
            td.num { (r.facts.tool_calls) }
            td.num { (r.facts.model_calls) }
            td.num { (r.facts.tokens) }
            td.num { (r.facts.cost_usd.map(|c| format!("{c:.6}")).unwrap_or_default()) }
            td.num { (r.duration_ms) }
            td {
                code { (run_id.chars().take(12).collect::<String>()) }
                @if r.facts.hook_warnings > 0 { " " span.badge.error title="hook warnings" { "⚠ " (r.facts.hook_warnings) } }
            }
        }
    }
}

/// The leaves of a JSON value by pointer (`/a/0/b`).
fn leaves(v: &Value, at: String, out: &mut BTreeMap<String, Value>) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, x) in m {
                leaves(
                    x,
                    format!("{at}/{}", k.replace('~', "~0").replace('/', "~1")),
                    out,
                );
            }
        }
        Value::Array(a) if !a.is_empty() => {
            for (i, x) in a.iter().enumerate() {
                leaves(x, format!("{at}/{i}"), out);
            }
        }
        v => {
            out.insert(at, v.clone());
        }
    }
}

/// The world before and after, as the leaves that were added, removed or changed.
fn world_diff(before: &Value, after: &Value) -> Markup {
    let (mut b, mut a) = (BTreeMap::new(), BTreeMap::new());
    leaves(before, String::new(), &mut b);
    leaves(after, String::new(), &mut a);
    let keys: std::collections::BTreeSet<&String> = b.keys().chain(a.keys()).collect();
    let changes: Vec<(&String, Option<&Value>, Option<&Value>)> = keys
        .into_iter()
        .map(|k| (k, b.get(k), a.get(k)))
        .filter(|(_, x, y)| x != y)
        // An empty list or object that gained (or lost) members is shown by its members.
        .filter(|(k, x, y)| {
            let empty = |v: Option<&Value>| {
                matches!(v, Some(Value::Array(a)) if a.is_empty())
                    || matches!(v, Some(Value::Object(m)) if m.is_empty())
            };
            let prefix = format!("{k}/");
            let filled =
                |side: &BTreeMap<String, Value>| side.keys().any(|o| o.starts_with(&prefix));
            !(empty(*x) && y.is_none() && filled(&a) || empty(*y) && x.is_none() && filled(&b))
        })
        .collect();
    html! {
        @if changes.is_empty() {
            p.muted { "The world's state did not change." }
        } @else {
            table.world-diff {
                tr { th { "where" } th { "before" } th { "after" } }
                @for (k, x, y) in changes.iter().take(2000) {
                    @let class = match (x, y) { (None, _) => "diff-added", (_, None) => "diff-removed", _ => "diff-changed" };
                    tr class=(class) {
                        td { code { (if k.is_empty() { "/" } else { k.as_str() }) } }
                        td { @if let Some(x) = x { pre { (json_text(x)) } } @else { span.muted { "(absent)" } } }
                        td { @if let Some(y) = y { pre { (json_text(y)) } } @else { span.muted { "(absent)" } } }
                    }
                }
            }
            @if changes.len() > 2000 { p.muted { (changes.len() - 2000) " more change(s) not shown." } }
        }
    }
}

/// A run's layers with their evidence, usage and model-graded checks; with `pointers` (the
/// run's own page), each failing layer's pointers linked to the steps of the transcript.
fn layers_table(run: &LoadedRun, pointers: bool) -> Markup {
    html! {
        @if let Some(score) = &run.score {
            table.layers {
                @for (name, layer) in score.layers() {
                    tr {
                        td { (name) }
                        td class=(if layer.passed { "pass" } else { "fail" }) { (if layer.passed { "pass" } else { "FAIL" }) }
                        td {
                            pre { (cut(&layer.detail)) }
                            @if pointers && !layer.passed && !layer.at.is_empty() { (layer_pointers(&run.trace, &layer.at)) }
                        }
                    }
                }
            }
            @if let Some(u) = &score.usage {
                p.muted {
                    (u.model_calls) " model call(s), " (u.tokens.prompt_tokens) " input and " (u.tokens.completion_tokens) " output tokens"
                    @if let Some(c) = u.cost_usd { ", $" (format!("{c:.6}")) }
                    @if let Some(why) = &u.cost_unknown { " (cost unknown: " (why) ")" }
                }
            }
            @if !score.judges.is_empty() { (judges_table(&score.judges)) }
            @if let Some(u) = &score.eval_usage {
                p.muted {
                    "Evaluation (simulated user, judges): " (u.model_calls) " model call(s), " (u.tokens.prompt_tokens) " input and " (u.tokens.completion_tokens) " output tokens"
                    @if let Some(c) = u.cost_usd { ", $" (format!("{c:.6}")) }
                }
            }
            @if let Some(user) = &run.trace.user {
                p.muted {
                    "Simulated user " code { (cut(&user.model)) } ": " (user.turns) " message(s), ended by " (user.ended_by)
                }
            }
        } @else {
            p.warn { "No score: " (run.score_problem.as_deref().unwrap_or("the sidecar is missing")) }
        }
    }
}

/// A failing layer's pointers (at most [`MAX_POINTERS`]), each linked to its step.
fn layer_pointers(t: &Trace, at: &[windtunnel_model::StepRef]) -> Markup {
    html! {
        ul.at {
            @for p in at.iter().take(MAX_POINTERS) { li { (pointer(t, p)) } }
        }
        @if at.len() > MAX_POINTERS { p.muted { (at.len() - MAX_POINTERS) " more not shown." } }
    }
}

/// The model-graded checks: each one's verdict, votes, reasoning and what was cut.
fn judges_table(judges: &[windtunnel_model::JudgeGrade]) -> Markup {
    html! {
        h3 { "Model-graded checks" }
        table.judges {
            tr { th { "check" } th { "judge" } th { "verdict" } th { "votes" } th { "reasoning" } }
            @for g in judges {
                tr {
                    td.num { (g.check) }
                    td { code { (cut(&g.model)) } @if g.cached > 0 { " (" (g.cached) " cached)" } }
                    td class=(match g.verdict { Some(JudgeVerdict::Pass) => "pass", _ => "fail" }) {
                        (match g.verdict { Some(JudgeVerdict::Pass) => "pass", Some(_) => "FAIL", None => "ERROR" })
                    }
                    td { (g.votes.iter().map(|v| v.as_str()).collect::<Vec<_>>().join(", ")) }
                    td {
                        @for r in &g.reasoning { pre { (cut(r)) } }
                        @if let Some(e) = &g.error { pre.warn { (cut(e)) } }
                        @if let Some(c) = &g.input_cut { p.muted { "Material cut: " (c) } }
                    }
                }
            }
        }
    }
}

fn artifact_preview(path: &std::path::Path) -> String {
    match crate::report::load::read_bounded(path, 64 << 10) {
        Ok(b) => cut(&String::from_utf8_lossy(&b)),
        Err(why) => format!("(cannot read: {why})"),
    }
}

/// `GET /runs/<run_id>`: one run's whole story.
pub(crate) fn run(state: &State, run_id: &str, query: &str) -> Reply {
    let sweep = match sweep_param(query) {
        Ok(s) => s,
        Err(why) => return bad_query(state, &why),
    };
    let index = state.runs.now();
    let row = match index.pick(run_id, sweep.as_deref()) {
        Ok(row) => row,
        Err(rows) if rows.is_empty() => {
            return error_page(
                state,
                404,
                "wt view: no such run",
                &format!("No run has id {run_id}."),
            );
        }
        Err(rows) => return which_run(state, &index, run_id, &rows),
    };
    match index.load(row) {
        Ok(run) => run_page(state, &index, row, run_id, &run),
        // The run is listed; its files are not readable now (rewritten as it was read, cut
        // short, removed). That is what the page is about, not a failure of the server.
        Err(why) => unreadable_run(state, &index, row, run_id, &why),
    }
}

/// 300: the runs that have `run_id` (pinned sweeps reuse ids), to choose from.
fn which_run(state: &State, index: &Index, run_id: &str, rows: &[u32]) -> Reply {
    let body = html! {
        section {
            p { (rows.len()) " runs have id " code { (run_id) } " (pinned sweeps reuse ids); choose one:" }
            ul { @for &r in rows {
                @let (i, sweep) = index.run_index_and_sweep(r);
                li { a href=(run_href(run_id, sweep)) { (index.scenario(r)) " #" (i) " of sweep " (sweep) } }
            } }
        }
    };
    Reply::html(
        300,
        page(
            "wt view: which run?",
            html! { h1 { "Which run?" } (nav(state)) },
            body,
        ),
    )
}

/// A listed run whose files cannot be read now, and why.
fn unreadable_run(state: &State, index: &Index, row: u32, run_id: &str, why: &str) -> Reply {
    let (i, sweep) = index.run_index_and_sweep(row);
    let title = format!("{} #{i}", index.scenario(row));
    Reply::html(
        200,
        page(
            &format!("wt view: {title} (unreadable)"),
            html! {
                h1 { (title) " " span.badge.error { "unreadable" } }
                p { "run " code { (run_id) } " · sweep " code { (sweep) } }
                (nav(state))
            },
            html! { section.warn #unreadable { p { "unreadable: " (why) } } },
        ),
    )
}

/// A run read whole: its error, layers, transcript, world, warnings, hooks, journal and files.
fn run_page(state: &State, index: &Index, row: u32, run_id: &str, run: &LoadedRun) -> Reply {
    let events = index.events(row, run_id);
    let t = &run.trace;
    let r = &index.rows[row as usize];
    let verdict = verdict_str(r.verdict);
    let header = html! {
        h1 { (t.scenario_id) " #" (t.run_index) " " span class=(format!("badge {verdict}")) { (verdict) } }
        p {
            "run " code { (t.run_id) } " · sweep " code { (t.sweep_id) } " · agent " (t.agent.label)
            " · " (t.started_at) " → " (t.ended_at)
        }
        (nav(state))
    };
    let body = html! {
        @if let Some(e) = run.score.as_ref().and_then(|s| s.error.as_ref()).or(t.error.as_ref()) {
            section.warn { h2 { "Error" } pre.error { (cut(e)) } }
        }
        section {
            h2 { "Scorer layers" }
            @if let Some(rung) = r.facts.rung { p { "Triage rung: " strong { (rung.as_str()) } } }
            (layers_table(run, true))
        }
        section {
            h2 { "Transcript (" (t.turns.len()) " turn(s), " (t.evidence.tool_calls.len()) " tool call(s), " (t.evidence.model_calls.len()) " model call(s))" }
            (transcript(t, &Marks::of(t, run.score.as_ref())))
        }
        @if let Some(w) = &t.world { (world_section(w)) }
        @if !t.worker_warnings.is_empty() {
            section.warn { h2 { "Warnings" } ul { @for w in &t.worker_warnings { li { (cut(w)) } } } }
        }
        (hooks_section(run))
        (events_section(&events))
        (files_section(run, run_id))
    };
    Reply::html(
        200,
        page(
            &format!("wt view: {} #{}", t.scenario_id, t.run_index),
            header,
            body,
        ),
    )
}

/// The world's state before and after, its files and its server.
fn world_section(w: &windtunnel_model::WorldObservation) -> Markup {
    html! {
        section {
            h2 { "World: before → after" }
            (world_diff(&w.before, &w.after))
            @if !w.files.is_empty() {
                h3 { "Files" }
                table { tr { th { "file" } th { "exists" } th.num { "bytes" } th { "text" } }
                    @for (name, f) in &w.files {
                        tr { td { code { (name) } } td { (f.exists) } td.num { (f.bytes) }
                            td { @if let Some(x) = &f.text { pre { (cut(x)) } } @if let Some(n) = &f.note { span.muted { (n) } } } }
                    }
                }
            }
            @if let Some(server) = &w.server {
                h3 { "World server " code { (server.name) } }
                @if let Some(exit) = &server.exit { p { (exit) } }
                @if !server.stderr_tail.trim().is_empty() { pre { (cut(&server.stderr_tail)) } }
            }
        }
    }
}

/// The hooks that were active and every artifact beside the run.
fn hooks_section(run: &LoadedRun) -> Markup {
    html! {
        section {
            h2 { "Hooks and their artifacts" }
            @if let Some(hooks) = &run.trace.hooks {
                p { "Active: " @for (i, h) in hooks.iter().enumerate() { @if i > 0 { ", " } code { (h.name) } " " span.muted { (h.source) " " (h.version) } } }
            } @else { p.muted { "No hook was active." } }
            @for a in &run.artifacts {
                details.artifact {
                    summary { code { (a.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()) } }
                    pre { (artifact_preview(a)) }
                }
            }
        }
    }
}

/// The journal's events naming the run, without the fields every line has.
fn events_section(events: &[Value]) -> Markup {
    html! {
        section {
            h2 { "Journal events (" (events.len()) ")" }
            @if events.is_empty() { p.muted { "No journal line names this run." } }
            @else {
                table.events {
                    tr { th.num { "seq" } th { "at" } th { "event" } th { "fields" } }
                    @for e in events {
                        @let mut rest = e.clone();
                        @let _ = rest.as_object_mut().map(|m| {
                            for k in ["seq", "at", "ts", "event", "v", "schema_version", "sweep_id", "run_id", "scenario_id", "session_id"] { m.remove(k); }
                            m.retain(|_, v| !v.is_null());
                        });
                        tr {
                            td.num { (e["seq"]) }
                            td { (e.get("at").or(e.get("ts")).and_then(Value::as_str).unwrap_or("")) }
                            td { code { (e["event"].as_str().unwrap_or("")) } }
                            td { pre { (json_text(&rest)) } }
                        }
                    }
                }
                @if events.len() == super::index::MAX_EVENTS { p.muted { "Only the first " (super::index::MAX_EVENTS) " events are shown." } }
            }
        }
    }
}

/// Where the run's trace is, and the run as JSON.
fn files_section(run: &LoadedRun, run_id: &str) -> Markup {
    fn encode(s: &str) -> percent_encoding::PercentEncode<'_> {
        percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC)
    }
    html! {
        section {
            h2 { "Files" }
            p { "trace: " code { (run.path.display()) } }
            p { a href=(format!("/api/runs/{}?sweep={}", encode(run_id), encode(&run.trace.sweep_id))) { "this run as JSON" } }
        }
    }
}

fn settings() -> Settings {
    Settings {
        alpha: 0.05,
        correction: Correction::Holm,
        allow_missing: false,
        fail_on_drop_to: None,
    }
}

fn comparison(state: &State) -> Option<(std::sync::Arc<Index>, std::sync::Arc<Index>, Comparison)> {
    let base = state.baseline.as_ref()?.now();
    let new = state.runs.now();
    let names = |i: &Index| {
        i.dirs()
            .iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
    };
    let c = Comparison::with_shared(
        &names(&base),
        &base.report,
        &names(&new),
        &new.report,
        settings(),
        0,
    );
    Some((base, new, c))
}

fn no_baseline(state: &State) -> Reply {
    error_page(
        state,
        404,
        "wt view: no baseline",
        "Start wt view with --baseline DIR to compare two sweeps.",
    )
}

/// `GET /compare`: per scenario, both sides' pass rates and the comparison's verdict.
pub(crate) fn compare(state: &State, query: &str) -> Reply {
    if let Err(why) = params(query, &[]) {
        return bad_query(state, &why);
    }
    let Some((base, new, c)) = comparison(state) else {
        return no_baseline(state);
    };
    let header = html! {
        h1 { "Baseline → these runs" }
        p { "BASE " (dirs_line(&base)) " · NEW " (dirs_line(&new)) }
        (nav(state))
    };
    let body = html! {
        section {
            h2 { (c.summary) }
            @for line in &c.incomplete { p.warn { "incomplete: " (line) } }
            @for line in &c.warnings { p.muted { (line) } }
            p.muted { "Fisher's exact test per scenario, Holm-corrected at alpha 0.05 (as wt compare by default)." }
            table #scenarios {
                tr { th { "scenario" } th { "BASE" } th { "NEW" } th.num { "change" } th.num { "p (adjusted)" } th { "verdict" } }
                @for s in &c.scenarios {
                    tr.scenario data-scenario=(s.scenario_id) data-verdict=(s.verdict.as_str()) {
                        td { a href=(format!("/compare/{}", percent_encoding::utf8_percent_encode(&s.scenario_id, percent_encoding::NON_ALPHANUMERIC))) { (s.scenario_id) } }
                        td { (s.base.display()) }
                        td { (s.new.display()) }
                        td.num { (format!("{:+.0}%", s.difference * 100.0)) }
                        td.num { (format!("{:.3}", s.p_adjusted)) }
                        td { span class=(format!("badge {}", s.verdict.as_str().replace(' ', "-"))) { (s.verdict.as_str()) } }
                    }
                }
                @for s in &c.only_in_base { tr { td { (s.scenario_id) } td colspan="5" { "only in BASE" } } }
                @for s in &c.only_in_new { tr { td { (s.scenario_id) } td colspan="5" { "only in NEW" } } }
            }
        }
    };
    Reply::html(200, page("wt view: compare", header, body))
}

/// The rows of `scenario` in `index`, in the report's order (at most [`MAX_CHOICES`]).
fn rows_of(index: &Index, scenario: &str) -> Vec<u32> {
    let q = Query {
        scenario: Some(scenario.to_owned()),
        limit: MAX_CHOICES,
        ..Query::default()
    };
    index.answer(&q).page
}

/// The `base` and `new` of a pair page's query (`None` when absent).
fn pair_params(query: &str) -> Result<(Option<usize>, Option<usize>), String> {
    let (mut base, mut new) = (None, None);
    for (k, v) in params(query, &["base", "new"])? {
        let n = v
            .parse()
            .map_err(|_| format!("{k} must be a whole number, not {:?}", cut_to(&v, MAX_ECHO)))?;
        if k == "base" {
            base = Some(n)
        } else {
            new = Some(n)
        }
    }
    Ok((base, new))
}

/// The first of `rows` whose verdict is in `bucket`.
fn first_in(index: &Index, rows: &[u32], bucket: crate::score::Bucket) -> Option<usize> {
    rows.iter()
        .position(|&r| crate::score::Bucket::of(index.rows[r as usize].verdict) == bucket)
}

/// The names of a turn's tool calls, each with how many times it was called.
fn tool_names(t: &Trace, turn: u32) -> BTreeMap<&str, usize> {
    let mut out = BTreeMap::new();
    for c in t.evidence.tool_calls.iter().filter(|c| c.turn == turn) {
        *out.entry(c.name.as_str()).or_default() += 1;
    }
    out
}

/// `GET /compare/<scenario>?base=I&new=J`: one run of each side, turn by turn.
pub(crate) fn pair(state: &State, scenario: &str, query: &str) -> Reply {
    let (asked_base, asked_new) = match pair_params(query) {
        Ok(p) => p,
        Err(why) => return bad_query(state, &why),
    };
    let Some(base_side) = &state.baseline else {
        return no_baseline(state);
    };
    let (base, new) = (base_side.now(), state.runs.now());
    let (base_rows, new_rows) = (rows_of(&base, scenario), rows_of(&new, scenario));
    if base_rows.is_empty() && new_rows.is_empty() {
        return error_page(
            state,
            404,
            "wt view: no such scenario",
            &format!("Neither side has runs of {scenario}."),
        );
    }
    let (bi, ni) = pair_chosen(&base, &base_rows, &new, &new_rows, asked_base, asked_new);
    let load = |index: &Index, rows: &[u32], i: usize| rows.get(i).map(|&r| index.load(r));
    let (b, n) = (load(&base, &base_rows, bi), load(&new, &new_rows, ni));
    let href = |b: usize, n: usize| {
        format!(
            "/compare/{}?base={b}&new={n}",
            percent_encoding::utf8_percent_encode(scenario, percent_encoding::NON_ALPHANUMERIC)
        )
    };
    let (trace_b, trace_n) = (trace_of(&b), trace_of(&n));
    let mut differences = 0usize;
    let tb = pair_turns(&trace_b, &trace_n, "BASE", &mut differences);
    let tn = pair_turns(&trace_n, &trace_b, "NEW", &mut differences);
    let header = html! { h1 { (scenario) ": BASE and NEW side by side" } (nav(state)) };
    let body = html! {
        section {
            div.pair {
                div { h2 { "BASE" } (chooser(&base, &base_rows, bi, |i| href(i, ni))) (pair_side(&b)) }
                div { h2 { "NEW" } (chooser(&new, &new_rows, ni, |i| href(bi, i))) (pair_side(&n)) }
            }
        }
        section {
            h2 { "Turn by turn" }
            p #differences { (differences) " difference(s) marked: a tool call only one side made, a reply that differs." }
            table.aligned {
                tr { th { "turn" } th { "BASE" } th { "NEW" } }
                @for k in 0..tb.len().max(tn.len()) {
                    tr.turn-pair {
                        td { (k) }
                        td { @if let Some(m) = tb.get(k) { (m) } @else { span.muted { "(no such turn)" } } }
                        td { @if let Some(m) = tn.get(k) { (m) } @else { span.muted { "(no such turn)" } } }
                    }
                }
            }
        }
    };
    Reply::html(200, page(&format!("wt view: {scenario}"), header, body))
}

/// The runs a pair page shows, by their place in each side's rows: those asked for, else a
/// NEW run that did not pass against a BASE run that did, else the first of each.
fn pair_chosen(
    base: &Index,
    base_rows: &[u32],
    new: &Index,
    new_rows: &[u32],
    asked_base: Option<usize>,
    asked_new: Option<usize>,
) -> (usize, usize) {
    use crate::score::Bucket;
    let failing_new =
        first_in(new, new_rows, Bucket::Fail).or_else(|| first_in(new, new_rows, Bucket::Error));
    let passing_base = first_in(base, base_rows, Bucket::Pass);
    match (failing_new, passing_base) {
        (Some(n), Some(b)) => (asked_base.unwrap_or(b), asked_new.unwrap_or(n)),
        _ => (asked_base.unwrap_or(0), asked_new.unwrap_or(0)),
    }
}

/// A side's runs to choose from, each linked to `href` of its place; the chosen one marked.
fn chooser(index: &Index, rows: &[u32], chosen: usize, href: impl Fn(usize) -> String) -> Markup {
    html! {
        p.choices {
            @for (i, &r) in rows.iter().enumerate() {
                @let v = verdict_str(index.rows[r as usize].verdict);
                @let b = index.brief(r);
                @let label = format!("#{} {} · {}", b.run_index, cut_to(b.agent, MAX_ECHO), cut_to(b.sweep, MAX_ECHO));
                @if i == chosen { strong.chosen { (label) " " span class=(format!("badge {v}")) { (v) } } " " }
                @else { a href=(href(i)) { (label) } " " span class=(v) { (v) } " " }
            }
        }
    }
}

fn trace_of(run: &Option<Result<LoadedRun, String>>) -> Option<Trace> {
    match run {
        Some(Ok(r)) => Some(r.trace.clone()),
        _ => None,
    }
}

/// A side of a pair page: its run's link and layers, or why there is none.
fn pair_side(run: &Option<Result<LoadedRun, String>>) -> Markup {
    html! {
        @match run {
            Some(Ok(r)) => { p { a href=(run_href(&r.trace.run_id, &r.trace.sweep_id)) { "run " code { (r.trace.run_id) } } } (layers_table(r, false)) }
            Some(Err(why)) => { p.warn { "unreadable: " (why) } }
            None => { p.muted { "No run on this side." } }
        }
    }
}

/// A side's turns, with what the other side did differently marked and counted in
/// `differences`: a tool call it did not make (beyond as many calls of that name as it
/// made), a reply that differs.
fn pair_turns(
    mine: &Option<Trace>,
    other: &Option<Trace>,
    side: &str,
    differences: &mut usize,
) -> Vec<Markup> {
    let Some(t) = mine else { return Vec::new() };
    t.turns
        .iter()
        .map(|turn| pair_turn(t, turn, other.as_ref(), side, differences))
        .collect()
}

/// One turn of a side, beside `other`'s turn of the same index.
fn pair_turn(
    t: &Trace,
    turn: &TurnRecord,
    other: Option<&Trace>,
    side: &str,
    differences: &mut usize,
) -> Markup {
    let theirs = other.and_then(|o| {
        o.turns
            .iter()
            .find(|x| x.index == turn.index)
            .map(|x| (o, x))
    });
    let mut left = theirs
        .map(|(o, _)| tool_names(o, turn.index))
        .unwrap_or_default();
    let reply_differs = theirs.is_some_and(|(_, x)| x.reply != turn.reply);
    let steps: Vec<Markup> = steps_of(t, turn.index)
        .into_iter()
        .map(|step| match step {
            Step::Tool(c) => {
                let matched = left
                    .get_mut(c.name.as_str())
                    .filter(|n| **n > 0)
                    .map(|n| *n -= 1)
                    .is_some();
                let only = (other.is_some() && !matched).then_some(side);
                if only.is_some() {
                    *differences += 1;
                }
                tool_step(c, None, &[], only)
            }
            Step::Model(_, c) => model_step(c, None, &[]),
        })
        .collect();
    if reply_differs {
        *differences += 1;
    }
    html! {
        div.step.user { h4 { "user · turn " (turn.index) } pre { (cut(&turn.input)) } }
        @for m in &steps { (m) }
        div class=(if reply_differs { "step agent differs" } else { "step agent" }) {
            h4 { "agent" @if reply_differs { " " span.badge.diff { "reply differs" } } }
            @if let Some(reply) = &turn.reply { pre.reply { (cut(reply)) } }
            @if let Some(e) = &turn.error { pre.error { (cut(e)) } }
        }
    }
}
