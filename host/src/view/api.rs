//! The JSON API (documented in docs/reports.md): the list's questions and a run whole, as
//! data, for the page's script and for people who script against `wt view`.
//!
//! - `GET /api/runs?scenario=&agent=&model=&sweep=&verdict=&layer=&rung=&hook_warning=&q=&sort=&order=&offset=&limit=&cursor=`
//!   answers `{"total": N, "offset", "limit", "runs": [...], "unreadable": n, "next"}`:
//!   `total` counts every run that matches, not the page; `next` is the path of the next
//!   page (a cursor in it), absent on the last.
//! - `GET /api/summary`: the report's scenarios and pack as `wt report --format json` gives
//!   them, and the cells of the summary page (per scenario, agent, model and sweep).
//! - `GET /api/runs/<run_id>[?sweep=<sweep_id>]`: the run whole (trace, score, files,
//!   journal events).
//! - `GET /api/status`: how many runs, how many in each verdict filter's answer, and a
//!   number that grows each time the directories are read again.

use serde_json::{Value, json};
use windtunnel_model::Verdict;

use super::index::params;
use super::index::{Index, Query, VerdictWanted};
use super::state::{Reply, State};

/// A verdict as the API and the filters spell it.
pub(crate) fn verdict_str(v: Option<Verdict>) -> &'static str {
    match v {
        Some(Verdict::Pass) => "pass",
        Some(Verdict::Fail) => "fail",
        Some(_) => "error",
        None => "unscored",
    }
}

/// One run of a list; a run whose files cannot be read now has no `run_id` and says why
/// in `unreadable`.
fn summary(index: &Index, row: u32) -> Value {
    let r = &index.rows[row as usize];
    let b = index.brief(row);
    let (run_index, sweep) = (b.run_index, b.sweep);
    let (run_id, unreadable) = match index.run_id(row) {
        Ok(id) => (Some(id), None),
        Err(why) => (None, Some(why)),
    };
    json!({
        "run_id": run_id,
        "unreadable": unreadable,
        "scenario": index.scenario(row),
        "run_index": run_index,
        "sweep_id": sweep,
        "agent": b.agent,
        "model": (!b.model.is_empty()).then_some(b.model),
        "verdict": verdict_str(r.verdict),
        "failed_layers": r.failed_layers().collect::<Vec<_>>(),
        "rung": r.facts.rung.map(|r| r.as_str()),
        "turns": r.facts.turns,
        "tool_calls": r.facts.tool_calls,
        "model_calls": r.facts.model_calls,
        "tokens": r.facts.tokens,
        "cost_usd": r.facts.cost_usd,
        "eval_tokens": r.facts.eval_tokens,
        "eval_cost_usd": r.facts.eval_cost_usd,
        "duration_ms": r.duration_ms,
        "hook_warnings": r.facts.hook_warnings,
        "trace": index.path(row).display().to_string(),
    })
}

pub(crate) fn bad_request(why: &str) -> Reply {
    Reply::json(400, &json!({ "error": why }))
}

pub(crate) fn runs(state: &State, query: &str) -> Reply {
    let q = match Query::parse(query) {
        Ok(q) => q,
        Err(why) => return bad_request(&why),
    };
    let index = state.runs.now();
    let answer = index.answer(&q);
    let runs: Vec<Value> = answer.page.iter().map(|&r| summary(&index, r)).collect();
    let mut out = json!({
        "total": answer.total,
        "offset": answer.start,
        "limit": q.limit,
        "unreadable": answer.unreadable,
        "generation": state.runs.generation(),
        "runs": runs,
    });
    if let Some(c) = &answer.next {
        out["next"] = json!(format!("/api/runs?{}", q.to_cursor_string(c)));
    }
    Reply::json(200, &out)
}

/// `GET /api/summary`: what the summary page shows, as data. `scenarios`, `pack`, `usage`
/// and `eval_usage` are the report's own (as `wt report --format json` writes them for the
/// same directories); `cells` split each scenario's runs by agent, model and sweep.
pub(crate) fn summary_of(state: &State, query: &str) -> Reply {
    if let Err(why) = params(query, &[]) {
        return bad_request(&why);
    }
    let index = state.runs.now();
    let report = &index.report;
    Reply::json(
        200,
        &json!({
            "schema_version": report.schema_version,
            "scenarios": report.scenarios,
            "pack": report.pack,
            "usage": report.usage,
            "eval_usage": report.eval_usage,
            "cells": index.cells,
            "agents": index.distinct(|c| Some(&c.agent)),
            "models": index.distinct(|c| c.model.as_deref()),
            "sweeps": index.distinct(|c| Some(&c.sweep_id)),
            "generation": state.runs.generation(),
        }),
    )
}

/// The `sweep` parameter of a run's query string, the one parameter it takes.
pub(crate) fn sweep_param(query: &str) -> Result<Option<String>, String> {
    Ok(params(query, &["sweep"])?
        .into_iter()
        .next()
        .map(|(_, v)| v))
}

pub(crate) fn run(state: &State, run_id: &str, query: &str) -> Reply {
    let sweep = match sweep_param(query) {
        Ok(s) => s,
        Err(why) => return bad_request(&why),
    };
    let index = state.runs.now();
    let row = match index.pick(run_id, sweep.as_deref()) {
        Ok(row) => row,
        Err(rows) if rows.is_empty() => {
            return Reply::json(404, &json!({ "error": format!("no run {run_id}") }));
        }
        Err(rows) => {
            let sweeps: Vec<&str> = rows
                .iter()
                .map(|&r| index.run_index_and_sweep(r).1)
                .collect();
            return Reply::json(
                300,
                &json!({
                    "error": format!("{} runs have id {run_id}: name one with ?sweep=", rows.len()),
                    "sweeps": sweeps,
                }),
            );
        }
    };
    match index.load(row) {
        Ok(run) => {
            let events = index.events(row, run_id);
            Reply::json(
                200,
                &json!({
                    "summary": summary(&index, row),
                    "trace": run.trace,
                    "score": run.score,
                    "score_problem": run.score_problem,
                    "artifacts": run.artifacts.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
                    "events": events,
                }),
            )
        }
        // The run is there, its files are not readable now (rewritten as it was read, cut
        // short, removed): an answer about the run, not a failure of the server.
        Err(why) => Reply::json(
            200,
            &json!({
                "summary": summary(&index, row),
                "unreadable": why,
                "trace": null,
                "score": null,
                "score_problem": null,
                "artifacts": [],
                "events": index.events(row, run_id),
            }),
        ),
    }
}

pub(crate) fn status(state: &State, query: &str) -> Reply {
    if let Err(why) = params(query, &[]) {
        return bad_request(&why);
    }
    let index = state.runs.now();
    let counts: serde_json::Map<String, Value> = VerdictWanted::ALL
        .iter()
        .zip(index.counts)
        .map(|(w, n)| (w.as_str().to_owned(), json!(n)))
        .collect();
    Reply::json(
        200,
        &json!({
            "runs": index.rows.len(),
            "indexed": index.indexed,
            "counts": counts,
            "generation": state.runs.generation(),
            "baseline_runs": state.baseline.as_ref().map(|b| b.now().rows.len()),
        }),
    )
}
