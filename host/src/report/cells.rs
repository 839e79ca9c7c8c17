//! What the runs of each scenario add up to per agent, model and sweep: the cells of the
//! summary `wt view` opens on. Counted by the buckets [`Report`](super::Report) counts by,
//! with the same interval and estimators; a scenario's cells add up to its line of the
//! report, less the runs that have no trace to place in a cell (named by a journal but
//! unreadable, or of a scenario that could not start).

use std::collections::BTreeMap;

use serde::Serialize;
use windtunnel_model::Verdict;

use super::{AtK, REPORT_ALPHA, at_ks, ks, stats};
use crate::score::Bucket;

/// Bars of a cell's distributions (run duration, run cost).
pub(crate) const BINS: usize = 12;

/// One run, as far as its cell counts it.
pub(crate) struct CellRun<'a> {
    pub scenario: &'a str,
    pub agent: &'a str,
    /// Empty when the agent's runtime has no model.
    pub model: &'a str,
    pub sweep: &'a str,
    pub verdict: Option<Verdict>,
    /// Turn latencies summed.
    pub duration_ms: u64,
    pub tokens: u64,
    pub cost_usd: Option<f64>,
    pub eval_tokens: u64,
    pub eval_cost_usd: Option<f64>,
}

/// How values of a cell's runs spread: nearest-rank percentiles and a histogram of
/// [`BINS`] bars between the least and the greatest.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub(crate) struct Spread {
    pub count: u64,
    pub min: f64,
    pub p50: f64,
    pub p95: f64,
    pub max: f64,
    /// Runs per bar, from `min` to `max`.
    pub bins: Vec<u64>,
}

impl Spread {
    fn of(mut values: Vec<f64>) -> Spread {
        values.sort_by(f64::total_cmp);
        let n = values.len();
        let (Some(&min), Some(&max)) = (values.first(), values.last()) else {
            return Spread::default();
        };
        let rank = |p: usize| values[(n * p).div_ceil(100).saturating_sub(1).min(n - 1)];
        let mut bins = vec![0u64; BINS];
        for v in &values {
            let i = if max > min {
                ((v - min) / (max - min) * BINS as f64) as usize
            } else {
                BINS / 2
            };
            bins[i.min(BINS - 1)] += 1;
        }
        Spread {
            count: n as u64,
            min,
            p50: rank(50),
            p95: rank(95),
            max,
            bins,
        }
    }
}

/// The runs of one scenario by one agent (and model) in one sweep.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Cell {
    pub scenario_id: String,
    pub agent: String,
    pub model: Option<String>,
    pub sweep_id: String,
    pub runs: u64,
    pub passed: u64,
    pub failed: u64,
    /// ERROR verdicts and runs without a usable score, as the report counts them.
    pub errored: u64,
    /// passed / runs.
    pub pass_rate: Option<f64>,
    /// The 95 % Wilson score interval of the pass rate.
    pub wilson95: Option<[f64; 2]>,
    /// pass^k for k = 1 and k = runs.
    pub pass_hat_k: Vec<AtK>,
    /// The agent's tokens (input and output) over the cell's runs.
    pub tokens: u64,
    /// The agent's cost over the runs priced; `None` when none was.
    pub cost_usd: Option<f64>,
    /// Runs with no cost known (no pricing, or a call without usage).
    pub unpriced: u64,
    /// What evaluating the runs cost (simulated users, judges), apart.
    pub eval_tokens: u64,
    pub eval_cost_usd: Option<f64>,
    /// Each run's duration (turn latencies summed), in milliseconds.
    pub duration_ms: Spread,
    /// Each priced run's cost, agent and evaluation together, in dollars.
    pub run_cost_usd: Spread,
}

#[derive(Default)]
struct Acc {
    passed: u64,
    failed: u64,
    errored: u64,
    tokens: u64,
    cost: Option<f64>,
    unpriced: u64,
    eval_tokens: u64,
    eval_cost: Option<f64>,
    durations: Vec<f64>,
    costs: Vec<f64>,
}

/// The cells of `runs`, ordered by scenario, agent, model and sweep.
pub(crate) fn cells<'a>(runs: impl IntoIterator<Item = CellRun<'a>>) -> Vec<Cell> {
    let mut by: BTreeMap<(&str, &str, &str, &str), Acc> = BTreeMap::new();
    for r in runs {
        let a = by
            .entry((r.scenario, r.agent, r.model, r.sweep))
            .or_default();
        match Bucket::of(r.verdict) {
            Bucket::Pass => a.passed += 1,
            Bucket::Fail => a.failed += 1,
            Bucket::Error => a.errored += 1,
        }
        a.tokens = a.tokens.saturating_add(r.tokens);
        a.eval_tokens = a.eval_tokens.saturating_add(r.eval_tokens);
        match r.cost_usd {
            Some(c) => *a.cost.get_or_insert(0.0) += c,
            None => a.unpriced += 1,
        }
        if let Some(c) = r.eval_cost_usd {
            *a.eval_cost.get_or_insert(0.0) += c;
        }
        a.durations.push(r.duration_ms as f64);
        if let Some(c) = r.cost_usd {
            a.costs.push(c + r.eval_cost_usd.unwrap_or(0.0));
        }
    }
    by.into_iter()
        .map(|((scenario, agent, model, sweep), a)| {
            let runs = a.passed + a.failed + a.errored;
            Cell {
                scenario_id: scenario.to_owned(),
                agent: agent.to_owned(),
                model: (!model.is_empty()).then(|| model.to_owned()),
                sweep_id: sweep.to_owned(),
                runs,
                passed: a.passed,
                failed: a.failed,
                errored: a.errored,
                pass_rate: (runs > 0).then(|| a.passed as f64 / runs as f64),
                wilson95: stats::wilson(a.passed, runs, REPORT_ALPHA).map(|(l, h)| [l, h]),
                pass_hat_k: at_ks(&ks(&[1, runs]), |k| stats::pass_hat_k(a.passed, runs, k)),
                tokens: a.tokens,
                cost_usd: a.cost,
                unpriced: a.unpriced,
                eval_tokens: a.eval_tokens,
                eval_cost_usd: a.eval_cost,
                duration_ms: Spread::of(a.durations),
                run_cost_usd: Spread::of(a.costs),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run<'a>(agent: &'a str, sweep: &'a str, verdict: Option<Verdict>, ms: u64) -> CellRun<'a> {
        CellRun {
            scenario: "s",
            agent,
            model: "",
            sweep,
            verdict,
            duration_ms: ms,
            tokens: 10,
            cost_usd: ms.is_multiple_of(2).then_some(0.5),
            eval_tokens: 3,
            eval_cost_usd: Some(0.25),
        }
    }

    #[test]
    fn each_agent_and_sweep_is_counted_apart_by_the_reports_buckets() {
        let got = cells([
            run("b", "w1", Some(Verdict::Pass), 10),
            run("a", "w1", Some(Verdict::Pass), 20),
            run("a", "w1", Some(Verdict::Fail), 30),
            run("a", "w1", None, 40),
            run("a", "w1", Some(Verdict::Error), 51),
            run("a", "w2", Some(Verdict::Pass), 60),
        ]);
        let keys: Vec<(&str, &str)> = got
            .iter()
            .map(|c| (c.agent.as_str(), c.sweep_id.as_str()))
            .collect();
        assert_eq!(keys, [("a", "w1"), ("a", "w2"), ("b", "w1")]);
        let a = &got[0];
        assert_eq!((a.runs, a.passed, a.failed, a.errored), (4, 1, 1, 2));
        assert_eq!(a.pass_rate, Some(0.25));
        let (lo, hi) = stats::wilson(1, 4, REPORT_ALPHA).unwrap();
        assert_eq!(a.wilson95, Some([lo, hi]));
        assert_eq!(a.pass_hat_k[0], AtK { k: 1, value: 0.25 });
        assert_eq!(a.pass_hat_k[1], AtK { k: 4, value: 0.0 });
        assert_eq!((a.tokens, a.eval_tokens), (40, 12));
        assert_eq!((a.cost_usd, a.unpriced), (Some(1.5), 1));
        assert_eq!(a.eval_cost_usd, Some(1.0));
        assert_eq!(
            (a.duration_ms.p50, a.duration_ms.p95, a.duration_ms.max),
            (30.0, 51.0, 51.0)
        );
        assert_eq!(a.duration_ms.bins.iter().sum::<u64>(), 4);
        assert_eq!(a.run_cost_usd.count, 3);
        assert_eq!(a.run_cost_usd.min, 0.75);
        assert_eq!(a.model, None);
    }

    #[test]
    fn one_value_sits_in_the_middle_bar_and_none_is_empty() {
        let s = Spread::of(vec![7.0, 7.0]);
        assert_eq!(s.bins[BINS / 2], 2);
        assert_eq!((s.p50, s.p95), (7.0, 7.0));
        assert_eq!(Spread::of(Vec::new()), Spread::default());
    }
}
