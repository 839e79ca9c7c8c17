//! Triage: cluster failing runs and place each cluster on the ladder
//! wiring → harness → steering → model, with the evidence for the placement.
//!
//! - **wiring**: the agent could not be reached or answered out of protocol (transport
//!   errors, timeouts, malformed output, a reset that failed). Fix the connection first.
//! - **harness**: the environment misbehaved: tool calls came back with errors, a guard
//!   denied a turn, the harness's own models (a simulated user, a judge) failed. Fix the
//!   fixture, tools, policy or those models' settings.
//! - **steering**: the agent did what its instructions should have prevented: a forbidden
//!   tool, a required step skipped or out of order, a step limit exceeded. Fix the soul.
//! - **model**: everything around it worked and the result is still wrong. Only now is it
//!   the model.
//!
//! Debrief artifacts, where present, are attached as leads (the agent's self-report); they
//! never change a placement. Hook artifacts are read, never counted.

use std::collections::BTreeMap;

use serde::Serialize;
use windtunnel_model::{Score, Trace, Verdict};

use super::LoadedRun;

/// The rungs, in the order a failure is attributed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Rung {
    Wiring,
    Harness,
    Steering,
    Model,
}

impl Rung {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Rung::Wiring => "wiring",
            Rung::Harness => "harness",
            Rung::Steering => "steering",
            Rung::Model => "model",
        }
    }
}

/// Failing runs that share a scenario, failed layers and normalized reason.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Cluster {
    pub scenario_id: String,
    pub verdict: Verdict,
    pub failed_layers: Vec<String>,
    /// The reason with ids, numbers and quoted values replaced by placeholders.
    pub reason: String,
    pub rung: Rung,
    /// Why it sits on that rung.
    pub evidence: String,
    pub runs: Vec<String>,
    /// How many runs of the scenario were looked at.
    pub of: usize,
    /// Excerpts of debrief replies for runs in the cluster.
    pub debriefs: Vec<String>,
}

/// A cluster as the report page lists it: its runs counted, not named.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Head {
    pub scenario_id: String,
    pub verdict: Verdict,
    pub failed_layers: Vec<String>,
    pub reason: String,
    pub rung: Rung,
    pub evidence: String,
    /// Runs in the cluster.
    pub runs: usize,
    /// Runs of the scenario looked at.
    pub of: usize,
}

impl Head {
    pub(crate) fn of(c: &Cluster) -> Head {
        Head {
            scenario_id: c.scenario_id.clone(),
            verdict: c.verdict,
            failed_layers: c.failed_layers.clone(),
            reason: c.reason.clone(),
            rung: c.rung,
            evidence: c.evidence.clone(),
            runs: c.runs.len(),
            of: c.of,
        }
    }

    /// The cluster of the runs of a scenario that could not run at all.
    pub(crate) fn of_scenario_error(e: &super::ScenarioError) -> Head {
        Head::of(&scenario_error(e))
    }
}

/// Replaces what varies between runs of the same failure: quoted text, ids, numbers.
pub(crate) fn normalize(reason: &str) -> String {
    let mut out = String::with_capacity(reason.len());
    let mut chars = reason.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '`' | '"' => {
                let close = c;
                out.push(close);
                out.push('…');
                for d in chars.by_ref() {
                    if d == close {
                        break;
                    }
                }
                out.push(close);
            }
            '{' => {
                let mut depth = 1;
                for d in chars.by_ref() {
                    match d {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                out.push_str("{…}");
            }
            c if c.is_ascii_digit() => {
                while chars
                    .peek()
                    .is_some_and(|d| d.is_ascii_alphanumeric() || *d == '.')
                {
                    chars.next();
                }
                out.push('N');
            }
            c => out.push(c),
        }
    }
    out
}

/// The rung of a failing run, from what decides it: its score, whether a guard denied a turn,
/// whether a tool call came back with an error ([`place`] gives the same rung, with the
/// evidence).
pub(crate) fn rung(score: &Score, denied: bool, tool_errors: bool) -> Rung {
    if score.verdict == Verdict::Error {
        return if denied || harness_error(score) {
            Rung::Harness
        } else {
            Rung::Wiring
        };
    }
    if !score.integrity.passed {
        return Rung::Wiring;
    }
    if tool_errors {
        return Rung::Harness;
    }
    if !score.constraint.passed || !score.trajectory.passed {
        return Rung::Steering;
    }
    Rung::Model
}

/// Did the harness's own side fail (a simulated user's or a judge's model)? Such errors
/// start with `harness:`.
fn harness_error(score: &Score) -> bool {
    score
        .error
        .as_deref()
        .is_some_and(|e| e.starts_with("harness:"))
}

/// Where a failing run sits on the ladder, and the evidence for it.
pub(crate) fn place(trace: &Trace, score: &Score) -> (Rung, String) {
    if score.verdict == Verdict::Error {
        if let Some(d) = &trace.denial {
            return (
                Rung::Harness,
                format!(
                    "guard `{}` denied turn {} ({}: {})",
                    d.guard, d.turn, d.code, d.message
                ),
            );
        }
        let why = score.error.clone().unwrap_or_else(|| "run error".into());
        if harness_error(score) {
            // The harness's own models (a simulated user, a judge) failed, not the agent.
            return (Rung::Harness, format!("the run could not be judged: {why}"));
        }
        return (Rung::Wiring, format!("the run could not be judged: {why}"));
    }
    if !score.integrity.passed {
        return (
            Rung::Wiring,
            format!("integrity: {}", score.integrity.detail),
        );
    }
    let tool_errors: Vec<String> = trace
        .evidence
        .tool_calls
        .iter()
        .filter_map(|c| {
            c.error
                .as_ref()
                .map(|e| format!("`{}` (turn {}, step {}): {e}", c.name, c.turn, c.step))
        })
        .collect();
    if !tool_errors.is_empty() {
        return (
            Rung::Harness,
            format!("tool calls returned errors: {}", tool_errors.join("; ")),
        );
    }
    if !score.constraint.passed {
        return (
            Rung::Steering,
            format!("constraint: {}", score.constraint.detail),
        );
    }
    if !score.trajectory.passed {
        return (
            Rung::Steering,
            format!("trajectory: {}", score.trajectory.detail),
        );
    }
    (
        Rung::Model,
        format!(
            "wiring, tools and steering held; outcome: {}",
            score.outcome.detail
        ),
    )
}

fn reason(score: &Score) -> String {
    if let Some(e) = &score.error {
        return e.clone();
    }
    score
        .layers()
        .into_iter()
        .filter(|(_, l)| !l.passed)
        .map(|(n, l)| format!("{n}: {}", l.detail))
        .collect::<Vec<_>>()
        .join("; ")
}

/// What clusters a run that did not pass: its verdict, failed layers and normalized reason
/// (`problem`: why it has no score, when it has none); `None` for a run that passed.
pub(crate) fn cluster_key(
    score: Option<&Score>,
    problem: Option<&str>,
) -> Option<(Verdict, Vec<&'static str>, String)> {
    match score {
        None => Some((
            Verdict::Error,
            Vec::new(),
            normalize(problem.unwrap_or("no score")),
        )),
        Some(s) if s.verdict == Verdict::Pass => None,
        Some(s) => Some((s.verdict, s.failed_layers(), normalize(&reason(s)))),
    }
}

/// A failing run's cluster key parts, rung and evidence. A run without a readable score is
/// placed on the harness rung: the run's own files are broken.
pub(crate) fn judge(run: &LoadedRun) -> Option<(Verdict, Vec<String>, String, Rung, String)> {
    let (verdict, layers, norm) = cluster_key(run.score.as_ref(), run.score_problem.as_deref())?;
    let layers = layers.into_iter().map(str::to_owned).collect();
    let (rung, evidence) = match &run.score {
        Some(score) => place(&run.trace, score),
        None => {
            let why = run.score_problem.as_deref().unwrap_or("no score");
            (Rung::Harness, format!("the run has no usable score: {why}"))
        }
    };
    Some((verdict, layers, norm, rung, evidence))
}

/// The failing runs among `runs`, clustered, plus one cluster per scenario that could not
/// run at all (with `debriefs`, debrief excerpts are read into the clusters):
/// each of its runs counts as an ERROR run that never ran, as in every other view, on the
/// wiring rung (the agent could not be set up for it, or its world's preconditions failed).
pub(crate) fn triage_all(
    runs: &[LoadedRun],
    scenario_errors: &[super::ScenarioError],
    debriefs: bool,
) -> Vec<Cluster> {
    let mut out = unsorted(runs, debriefs);
    out.extend(scenario_errors.iter().map(scenario_error));
    out.sort_by(|a, b| {
        order(
            a.rung,
            a.runs.len(),
            &a.scenario_id,
            b.rung,
            b.runs.len(),
            &b.scenario_id,
        )
    });
    out
}

fn scenario_error(e: &super::ScenarioError) -> Cluster {
    let n = e.runs as usize;
    Cluster {
        scenario_id: e.scenario_id.clone(),
        verdict: Verdict::Error,
        failed_layers: Vec::new(),
        reason: normalize(&e.error),
        rung: Rung::Wiring,
        evidence: format!(
            "the scenario could not run: its {n} run(s) never ran (sweep {}): {}",
            e.sweep_id, e.error
        ),
        runs: (0..n)
            .map(|k| format!("{}#{k} (never ran)", e.scenario_id))
            .collect(),
        of: n,
        debriefs: Vec::new(),
    }
}

/// The clusters' order: lowest rung first, then most frequent, then by scenario (a stable
/// sort keeps the rest as it was: by scenario, failed layers and reason).
fn order(
    a_rung: Rung,
    a_runs: usize,
    a_scenario: &str,
    b_rung: Rung,
    b_runs: usize,
    b_scenario: &str,
) -> std::cmp::Ordering {
    a_rung
        .cmp(&b_rung)
        .then(b_runs.cmp(&a_runs))
        .then(a_scenario.cmp(b_scenario))
}

/// The page's clusters in [`triage_all`]'s order (for a stable sort).
pub(crate) fn head_order(a: &Head, b: &Head) -> std::cmp::Ordering {
    order(
        a.rung,
        a.runs,
        &a.scenario_id,
        b.rung,
        b.runs,
        &b.scenario_id,
    )
}

/// The clusters of the failing runs, in no particular order; lowest rung first, then most
/// frequent, once sorted.
fn unsorted(runs: &[LoadedRun], debriefs: bool) -> Vec<Cluster> {
    let mut per_scenario: BTreeMap<&str, usize> = BTreeMap::new();
    for r in runs {
        *per_scenario.entry(&r.trace.scenario_id).or_default() += 1;
    }
    let mut clusters: BTreeMap<(String, Vec<String>, String), Cluster> = BTreeMap::new();
    for run in runs {
        let Some((verdict, layers, norm, rung, evidence)) = judge(run) else {
            continue;
        };
        let trace = &run.trace;
        let key = (trace.scenario_id.clone(), layers.clone(), norm.clone());
        let c = clusters.entry(key).or_insert_with(|| Cluster {
            scenario_id: trace.scenario_id.clone(),
            verdict,
            failed_layers: layers,
            reason: norm,
            rung,
            evidence,
            runs: Vec::new(),
            of: per_scenario
                .get(trace.scenario_id.as_str())
                .copied()
                .unwrap_or(0),
            debriefs: Vec::new(),
        });
        c.runs.push(trace.run_id.clone());
        if debriefs && let Some(d) = run.debrief_excerpt() {
            c.debriefs.push(d);
        }
    }
    clusters.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The scan places a run from its score and two facts of its trace; the page's evidence
    /// comes from the whole trace: both must name the same rung.
    #[test]
    fn the_rung_from_a_runs_facts_is_the_rung_placed_from_its_trace() {
        use windtunnel_model::{Denial, LayerResult};
        for bits in 0u32..128 {
            let on = |i: u32| bits >> i & 1 == 1;
            let verdict = if on(0) { Verdict::Error } else { Verdict::Fail };
            let mut score = Score::new("r", "s", verdict);
            let layer = |ok: bool| {
                if ok {
                    LayerResult::pass("ok")
                } else {
                    LayerResult::fail("bad")
                }
            };
            score.integrity = layer(on(1));
            score.constraint = layer(on(2));
            score.trajectory = layer(on(3));
            score.outcome = layer(on(4));
            let mut trace = Trace::new("r", "s");
            if on(5) {
                trace.denial = Some(Denial::default());
            }
            if on(6) {
                let mut call = windtunnel_model::ToolCall::default();
                call.error = Some("boom".into());
                trace.evidence.tool_calls.push(call);
            }
            assert_eq!(
                rung(&score, on(5), on(6)),
                place(&trace, &score).0,
                "case {bits:07b}"
            );
        }
    }

    #[test]
    fn normalization_folds_what_varies_between_runs() {
        assert_eq!(
            normalize("forbidden tool `issue_refund` called (turn 0, step 1, arguments {\"a\":1})"),
            "forbidden tool `…` called (turn N, step N, arguments {…})"
        );
        assert_eq!(
            normalize("turn 0: no reply within the turn timeout of 0.2s"),
            "turn N: no reply within the turn timeout of N"
        );
    }
}
