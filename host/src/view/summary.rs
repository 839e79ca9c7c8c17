//! The summary `wt view` opens on: per scenario, and in it per agent, model and sweep, the
//! runs, the pass rate with its Wilson interval, pass^k, errors, tokens and cost (the agent's
//! and the evaluation's apart) and how run durations and costs spread, with small charts
//! drawn as SVG on the server (no script). Each figure links to the runs it counts.

use maud::{Markup, html};
use windtunnel_model::RunUsage;

use super::index::Index;
use crate::report::ScenarioSummary;
use crate::report::cells::{Cell, Spread};
use crate::report::html::{cut_to, rate_bar};
use crate::report::table::pct;

/// Most rows the summary shows; `/api/summary` has every cell.
const MAX_ROWS: usize = 500;
/// Longest name (scenario, agent, model, sweep) shown in a cell, in characters.
const MAX_NAME: usize = 120;

fn name(s: &str) -> String {
    cut_to(s, MAX_NAME)
}

/// The list's address for the runs of a cell (`None` fields are not filtered on).
fn runs_href(
    scenario: &str,
    agent: Option<&str>,
    model: Option<&str>,
    sweep: Option<&str>,
    verdict: Option<&str>,
) -> String {
    let mut s = form_urlencoded::Serializer::new(String::new());
    s.append_pair("scenario", scenario);
    for (k, v) in [
        ("agent", agent),
        ("model", model),
        ("sweep", sweep),
        ("verdict", verdict),
    ] {
        if let Some(v) = v {
            s.append_pair(k, v);
        }
    }
    format!("/?{}", s.finish())
}

fn interval(rate: Option<f64>, w: Option<[f64; 2]>) -> String {
    match (rate, w) {
        (Some(r), Some([lo, hi])) => format!("{} [{}–{}]", pct(r), pct(lo), pct(hi)),
        _ => "-".to_owned(),
    }
}

fn pass_hat_k(at: &[crate::report::AtK]) -> String {
    match at.iter().rfind(|a| a.k > 1) {
        Some(a) => format!("{} (k={})", pct(a.value), a.k),
        None => "-".to_owned(),
    }
}

fn dollars(c: Option<f64>) -> String {
    c.map_or("-".to_owned(), |c| format!("${c:.4}"))
}

fn usage_tokens(u: Option<&RunUsage>) -> u64 {
    u.map_or(0, |u| {
        u.tokens
            .prompt_tokens
            .saturating_add(u.tokens.completion_tokens)
    })
}

/// A small histogram of a spread, with its percentiles as the title.
fn spark(s: &Spread, unit: &str, what: &str) -> Markup {
    if s.count == 0 {
        return html! { span.muted { "-" } };
    }
    let fmt = |x: f64| {
        if unit == "$" {
            format!("${x:.4}")
        } else {
            format!("{x:.0} {unit}")
        }
    };
    let top = s.bins.iter().copied().max().unwrap_or(1).max(1) as f64;
    let (w, h) = (96.0, 22.0);
    let bw = w / s.bins.len().max(1) as f64;
    html! {
        span.spread {
            (fmt(s.p50)) " / " (fmt(s.p95))
            svg class="spark" width="96" height="22" viewBox="0 0 96 22" role="img" {
                title { (what) ": " (s.count) " run(s), " (fmt(s.min)) " to " (fmt(s.max)) ", p50 " (fmt(s.p50)) ", p95 " (fmt(s.p95)) }
                @for (i, c) in s.bins.iter().enumerate() {
                    @let bh = if *c == 0 { 0.0 } else { (h * *c as f64 / top).max(1.0) };
                    rect x=(format!("{:.1}", i as f64 * bw)) y=(format!("{:.1}", h - bh)) width=(format!("{:.1}", bw - 1.0)) height=(format!("{bh:.1}")) {}
                }
            }
        }
    }
}

/// The row of a scenario's figures as the report counts them.
fn scenario_row(s: &ScenarioSummary, whole: Option<&Cell>, cols: usize) -> Markup {
    let a = &s.aggregate;
    let id = s.id();
    html! {
        tr.scenario data-scenario=(id) {
            th colspan=(cols) { a href=(runs_href(id, None, None, None, None)) { (name(id)) } }
            td.num { a href=(runs_href(id, None, None, None, None)) { (a.runs) } }
            td { (rate_bar(s.pass_rate, s.wilson95, &format!("{id}: {}", interval(s.pass_rate, s.wilson95)))) }
            td.num { (interval(s.pass_rate, s.wilson95)) }
            td.num { (pass_hat_k(&s.pass_hat_k)) }
            td.num { @if a.errored > 0 { a.error href=(runs_href(id, None, None, None, Some("error"))) { (a.errored) } } @else { "0" } }
            td.num { (usage_tokens(s.usage.as_ref())) " / " (usage_tokens(s.eval_usage.as_ref())) }
            td.num { (dollars(s.usage.as_ref().and_then(|u| u.cost_usd))) " / " (dollars(s.eval_usage.as_ref().and_then(|u| u.cost_usd))) }
            td { @if let Some(c) = whole { (spark(&c.duration_ms, "ms", "run duration")) } }
            td { @if let Some(c) = whole { (spark(&c.run_cost_usd, "$", "run cost")) } }
        }
    }
}

fn cell_row(c: &Cell, sweeps: bool) -> Markup {
    let href = |verdict| {
        runs_href(
            &c.scenario_id,
            Some(&c.agent),
            Some(c.model.as_deref().unwrap_or("")).filter(|m| !m.is_empty()),
            Some(&c.sweep_id),
            verdict,
        )
    };
    let label = format!(
        "{} · {}: {}",
        c.scenario_id,
        c.agent,
        interval(c.pass_rate, c.wilson95)
    );
    html! {
        tr.cell data-scenario=(c.scenario_id) data-agent=(c.agent) data-sweep=(c.sweep_id) {
            td { a href=(href(None)) { (name(&c.agent)) } }
            td { code { (name(c.model.as_deref().unwrap_or("-"))) } }
            @if sweeps { td { code { (name(&c.sweep_id)) } } }
            td.num { a href=(href(None)) { (c.runs) } }
            td { (rate_bar(c.pass_rate, c.wilson95, &label)) }
            td.num { (interval(c.pass_rate, c.wilson95)) }
            td.num { (pass_hat_k(&c.pass_hat_k)) }
            td.num { @if c.errored > 0 { a.error href=(href(Some("error"))) { (c.errored) } } @else { "0" } }
            td.num { (c.tokens) " / " (c.eval_tokens) }
            td.num {
                (dollars(c.cost_usd)) " / " (dollars(c.eval_cost_usd))
                @if c.unpriced > 0 && c.cost_usd.is_some() { br; span.muted { (c.unpriced) " unpriced" } }
            }
            td { (spark(&c.duration_ms, "ms", "run duration")) }
            td { (spark(&c.run_cost_usd, "$", "run cost")) }
        }
    }
}

/// The summary section of the landing page.
pub(crate) fn section(index: &Index) -> Markup {
    let report = &index.report;
    let sweeps = index.distinct(|c| Some(&c.sweep_id)).len() > 1;
    let cols = if sweeps { 3 } else { 2 };
    let mut shown = 0usize;
    let mut groups = Vec::new();
    for s in &report.scenarios {
        if shown >= MAX_ROWS {
            break;
        }
        let from = index
            .cells
            .partition_point(|c| c.scenario_id.as_str() < s.id());
        let mine: Vec<&Cell> = index.cells[from..]
            .iter()
            .take_while(|c| c.scenario_id == s.id())
            .collect();
        let whole = index
            .scenario_cells
            .binary_search_by(|c| c.scenario_id.as_str().cmp(s.id()))
            .ok()
            .map(|at| &index.scenario_cells[at]);
        shown += 1 + mine.len();
        groups.push((s, whole, mine));
    }
    let p = &report.pack;
    html! {
        section #summary {
            h2 { "Summary" }
            p.muted {
                (p.runs) " run(s) in " (p.scenarios) " scenario(s): " (p.passed) " passed, " (p.failed) " failed, " (p.errored) " error"
                " · tokens and cost are the agent's / the evaluation's (simulated user, judges); duration and cost per run are p50 / p95"
            }
            table #cells {
                thead {
                    tr {
                        th { "agent" } th { "model" } @if sweeps { th { "sweep" } }
                        th.num { "runs" } th { "pass rate" } th.num { "Wilson 95%" } th.num { "pass^k" } th.num { "ERROR" }
                        th.num { "tokens" } th.num { "cost" } th { "run duration" } th { "run cost" }
                    }
                }
                tbody {
                    @for (s, whole, mine) in &groups {
                        (scenario_row(s, *whole, cols))
                        @for c in mine { (cell_row(c, sweeps)) }
                    }
                }
            }
            @if shown >= MAX_ROWS { p.muted { "The first " (MAX_ROWS) " rows are shown; " a href="/api/summary" { "/api/summary" } " has every one." } }
        }
    }
}
