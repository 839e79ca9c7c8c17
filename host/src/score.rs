//! The four scorer layers and the verdict, computed from a [`Trace`] and the scenario's
//! expectations alone, so `wt rescore` judges stored traces exactly as `wt run` did.
//!
//! - outcome: the final reply (`reply_contains` / `reply_excludes`) and the final world.
//! - trajectory: required tools were called (and in order when `ordered`).
//! - constraint: no forbidden tool, at most `max_steps` tool calls, at most
//!   `max_steps_per_turn` in any turn.
//! - integrity: the evidence can be trusted — every turn answered with well-formed text, no
//!   transport error, one session.
//!
//! Verdict: ERROR when the run could not be judged (a run error or a turn error), else PASS
//! when all four layers pass, else FAIL. Aggregation over a scenario's runs lives here too.

use std::collections::BTreeMap;

use windtunnel_model::{
    AggregateResult, LAYERS, LatencyStats, LayerResult, Scenario, Score, Step, StepRef, Trace,
    Verdict,
};

fn pass(detail: impl Into<String>) -> LayerResult {
    LayerResult::pass(detail)
}

fn fail(problems: Vec<String>) -> LayerResult {
    LayerResult::fail(problems.join("; "))
}

/// A layer's problems as they are found: what each says, and the steps of the transcript
/// those that happened at one point at.
#[derive(Default)]
struct Problems {
    said: Vec<String>,
    at: Vec<StepRef>,
}

impl Problems {
    /// A problem of the run as a whole.
    fn push(&mut self, what: String) {
        self.said.push(what);
    }

    /// A problem that happened at `step`, `problem` saying what in a few words.
    fn push_at(&mut self, what: String, step: Step, problem: &str) {
        self.said.push(what);
        self.at.push(StepRef::new(step, problem));
    }

    /// The layer: passed with `passed` when there is no problem, else failed with them.
    fn result(self, passed: impl FnOnce() -> String) -> LayerResult {
        if self.said.is_empty() {
            return pass(passed());
        }
        let mut failed = fail(self.said);
        failed.at = self.at;
        failed
    }
}

fn tool_step(c: &windtunnel_model::ToolCall) -> Step {
    Step::ToolCall {
        turn: c.turn,
        step: c.step,
    }
}

/// Scores one run.
pub(crate) fn score(scenario: &Scenario, trace: &Trace) -> Score {
    let integrity = integrity(trace);
    let error = run_error(trace);
    let layers = [
        outcome(scenario, trace),
        trajectory(scenario, trace),
        constraint(scenario, trace),
    ];
    let all_pass = layers.iter().all(|l| l.passed) && integrity.passed;
    let verdict = match (&error, all_pass) {
        (Some(_), _) => Verdict::Error,
        (None, true) => Verdict::Pass,
        (None, false) => Verdict::Fail,
    };
    let [outcome, trajectory, constraint] = layers;
    let mut score = Score::new(&trace.run_id, &trace.scenario_id, verdict);
    score.outcome = outcome;
    score.trajectory = trajectory;
    score.constraint = constraint;
    score.integrity = integrity;
    score.error = error;
    score
}

/// Why the run could not be judged, if it could not.
fn run_error(trace: &Trace) -> Option<String> {
    if let Some(e) = &trace.error {
        return Some(e.clone());
    }
    if let Some(d) = &trace.denial {
        return Some(format!(
            "turn {} denied by guard `{}` ({}): {}",
            d.turn, d.guard, d.code, d.message
        ));
    }
    trace
        .turns
        .iter()
        .find_map(|t| t.error.as_ref().map(|e| format!("turn {}: {e}", t.index)))
}

fn final_reply(trace: &Trace) -> Option<&str> {
    trace.turns.last().and_then(|t| t.reply.as_deref())
}

fn outcome(s: &Scenario, trace: &Trace) -> LayerResult {
    let exp = &s.expect.outcome;
    let mut problems = Vec::new();
    let reply = final_reply(trace);
    let lower = reply.unwrap_or_default().to_lowercase();
    if reply.is_none() && !(exp.reply_contains.is_empty() && exp.reply_excludes.is_empty()) {
        problems.push("the last turn has no reply to check".to_owned());
    } else {
        for want in &exp.reply_contains {
            if !lower.contains(&want.to_lowercase()) {
                problems.push(format!(
                    "final reply does not mention {want:?} (reply: {})",
                    excerpt(reply.unwrap_or_default())
                ));
            }
        }
        for not in &exp.reply_excludes {
            if lower.contains(&not.to_lowercase()) {
                problems.push(format!(
                    "final reply mentions {not:?}, which it must not (reply: {})",
                    excerpt(reply.unwrap_or_default())
                ));
            }
        }
    }
    if !exp.world.is_empty() {
        match &trace.world {
            None => problems.push("no world observation recorded to check".to_owned()),
            Some(obs) => {
                for check in &exp.world {
                    if let Err(e) = crate::world::check_state(&obs.after, check) {
                        problems.push(format!("final world: {e}"));
                    }
                }
            }
        }
    }
    for check in &exp.files {
        let seen = trace.world.as_ref().and_then(|w| w.files.get(&check.path));
        if let Err(e) = file_check(check, seen) {
            problems.push(format!("file `{}`: {e}", check.path));
        }
    }
    if problems.is_empty() {
        let files = if exp.files.is_empty() {
            String::new()
        } else {
            format!(", {} file check(s)", exp.files.len())
        };
        pass(format!(
            "{} reply check(s) and {} world check(s){files} hold",
            exp.reply_contains.len() + exp.reply_excludes.len(),
            exp.world.len()
        ))
    } else {
        fail(problems)
    }
}

/// Does a file check hold on the file as observed after the last turn?
fn file_check(
    check: &windtunnel_model::FileCheck,
    seen: Option<&windtunnel_model::ObservedFile>,
) -> Result<(), String> {
    let Some(seen) = seen else {
        return Err("not observed (the run has no scratch directory)".into());
    };
    if let Some(want) = check.exists
        && want != seen.exists
    {
        return Err(match (want, &seen.note) {
            (true, Some(note)) => format!("should exist but does not ({note})"),
            (true, None) => "should exist but does not".into(),
            (false, _) => format!("should not exist but has {} bytes", seen.bytes),
        });
    }
    let wants_text = check.equals.is_some()
        || check.contains.is_some()
        || check.matches.is_some()
        || check.json.is_some();
    if !wants_text {
        return Ok(());
    }
    let Some(text) = &seen.text else {
        return Err(match &seen.note {
            Some(note) => format!("cannot be checked: {note}"),
            None if !seen.exists => "does not exist".into(),
            None => "cannot be checked: its text was not kept".into(),
        });
    };
    if let Some(want) = &check.equals
        && text != want
    {
        return Err(format!("is {}, expected {}", excerpt(text), excerpt(want)));
    }
    if let Some(want) = &check.contains
        && !text.contains(want.as_str())
    {
        return Err(format!(
            "does not contain {want:?} (it is {})",
            excerpt(text)
        ));
    }
    if let Some(pattern) = &check.matches
        && !crate::world::regex(pattern)?.is_match(text)
    {
        return Err(format!(
            "does not match /{}/ (it is {})",
            crate::term::sanitize(pattern),
            excerpt(text)
        ));
    }
    if let Some(j) = &check.json {
        let doc = if json_lines(check)? {
            // JSON Lines: an array of the lines, however many there are.
            text.lines()
                .enumerate()
                .filter(|(_, l)| !l.trim().is_empty())
                .map(|(i, l)| {
                    serde_json::from_str(l)
                        .map_err(|e| format!("line {} is not JSON ({e}): {}", i + 1, excerpt(l)))
                })
                .collect::<Result<Vec<_>, _>>()
                .map(serde_json::Value::Array)?
        } else {
            serde_json::from_str::<serde_json::Value>(text).map_err(|e| {
                format!(
                    "is not JSON ({e}); a JSON Lines file is read as one with `format = \"jsonl\"` or a name ending in .jsonl or .ndjson"
                )
            })?
        };
        crate::world::check_state(&doc, j)?;
    }
    Ok(())
}

/// Whether a file check's `json` reads its file as JSON Lines: its `format`, else its name
/// (`*.jsonl`, `*.ndjson`) — never its content, which may be one line either way.
fn json_lines(check: &windtunnel_model::FileCheck) -> Result<bool, String> {
    match check.format.as_deref() {
        Some("jsonl") => Ok(true),
        Some("json") => Ok(false),
        Some(other) => Err(format!("unknown `format` {other:?}")),
        None => {
            let name = check.path.to_ascii_lowercase();
            Ok(name.ends_with(".jsonl") || name.ends_with(".ndjson"))
        }
    }
}

/// The tools the run called successfully, in order: a call that failed its schema, errored
/// or was refused never happened as far as the trajectory is concerned.
fn tool_names(trace: &Trace) -> Vec<&str> {
    trace
        .evidence
        .tool_calls
        .iter()
        .filter(|c| c.error.is_none())
        .map(|c| c.name.as_str())
        .collect()
}

/// Every call of the run, failed ones marked: `lookup_order (failed) → refund`.
fn calls_shown(trace: &Trace) -> String {
    let calls = &trace.evidence.tool_calls;
    if calls.is_empty() {
        return "none".to_owned();
    }
    calls
        .iter()
        .map(|c| {
            if c.error.is_some() {
                format!("{} (failed)", c.name)
            } else {
                c.name.clone()
            }
        })
        .collect::<Vec<_>>()
        .join(" → ")
}

fn trajectory(s: &Scenario, trace: &Trace) -> LayerResult {
    let exp = &s.expect.trajectory;
    let called = tool_names(trace);
    let shown = calls_shown(trace);
    let missing: Vec<&str> = exp
        .required_tools
        .iter()
        .map(String::as_str)
        .filter(|t| !called.contains(t))
        .collect();
    if !missing.is_empty() {
        return fail(vec![format!(
            "required tool(s) never called successfully: {} (called: {shown})",
            missing.join(", ")
        )]);
    }
    if exp.ordered {
        let firsts: Vec<usize> = exp
            .required_tools
            .iter()
            .filter_map(|t| called.iter().position(|c| c == t))
            .collect();
        if let Some(w) = firsts.windows(2).position(|w| w[0] > w[1]) {
            return fail(vec![format!(
                "`{}` must first be called before `{}` (called: {shown})",
                exp.required_tools[w],
                exp.required_tools[w + 1]
            )]);
        }
    }
    pass(if exp.required_tools.is_empty() {
        format!("no required tools (called: {shown})")
    } else {
        format!(
            "required tools called{}: {}",
            if exp.ordered { " in order" } else { "" },
            exp.required_tools.join(", ")
        )
    })
}

fn constraint(s: &Scenario, trace: &Trace) -> LayerResult {
    let exp = &s.expect.constraint;
    let calls = &trace.evidence.tool_calls;
    let mut problems = Problems::default();
    for c in calls {
        if exp.forbidden_tools.contains(&c.name) {
            problems.push_at(
                format!(
                    "forbidden tool `{}` called (turn {}, step {}, arguments {})",
                    c.name, c.turn, c.step, c.arguments
                ),
                tool_step(c),
                "forbidden tool",
            );
        }
    }
    // A limit points at the first call beyond it.
    if let Some(max) = exp.max_steps
        && let Some(over) = calls.get(max as usize)
    {
        problems.push_at(
            format!(
                "{} tool calls in the run, at most {max} allowed",
                calls.len()
            ),
            tool_step(over),
            "over max_steps",
        );
    }
    if let Some(max) = exp.max_steps_per_turn {
        let mut per_turn: BTreeMap<u32, Vec<&windtunnel_model::ToolCall>> = BTreeMap::new();
        for c in calls {
            per_turn.entry(c.turn).or_default().push(c);
        }
        for (turn, made) in per_turn {
            if let Some(over) = made.get(max as usize) {
                problems.push_at(
                    format!(
                        "{} tool calls in turn {turn}, at most {max} allowed per turn",
                        made.len()
                    ),
                    tool_step(over),
                    "over max_steps_per_turn",
                );
            }
        }
    }
    problems.result(|| {
        format!(
            "{} tool call(s); no forbidden tool, within step limits",
            calls.len()
        )
    })
}

fn integrity(trace: &Trace) -> LayerResult {
    let mut problems = Problems::default();
    if let Some(e) = &trace.error {
        problems.push(format!("run error: {e}"));
    }
    if trace.turns.is_empty() {
        problems.push("no turn was injected".to_owned());
    }
    for t in &trace.turns {
        let turn = Step::Turn { turn: t.index };
        match (&t.error, &t.reply) {
            (Some(e), _) => problems.push_at(format!("turn {}: {e}", t.index), turn, "turn error"),
            (None, None) => {
                problems.push_at(format!("turn {} got no reply", t.index), turn, "no reply");
            }
            (None, Some(r)) if r.trim().is_empty() => {
                problems.push_at(
                    format!("turn {} got an empty reply", t.index),
                    turn,
                    "empty reply",
                );
            }
            (None, Some(r)) => {
                if let Some(why) = malformed(r) {
                    problems.push_at(
                        format!(
                            "turn {} reply is malformed ({why}): {}",
                            t.index,
                            excerpt(r)
                        ),
                        turn,
                        "malformed reply",
                    );
                }
            }
        }
    }
    if trace.session_id.is_empty() {
        problems.push("no session id recorded".to_owned());
    }
    // A reply the model stopped writing because it hit its token limit is not the reply
    // the agent meant: whatever it says cannot be trusted as evidence of the agent.
    for (i, c) in trace.evidence.model_calls.iter().enumerate() {
        // `length` (chat completions), `max_tokens` (Anthropic), `max_output_tokens`
        // (an incomplete Responses API response).
        if matches!(
            c.finish_reason.as_deref(),
            Some("length" | "max_tokens" | "max_output_tokens")
        ) {
            let turn = c
                .turn
                .map_or_else(|| "outside a turn".to_owned(), |t| format!("turn {t}"));
            problems.push_at(
                format!(
                    "reply truncated by max_tokens: model call {} ({turn}) stopped with finish_reason `{}`",
                    i + 1,
                    c.finish_reason.as_deref().unwrap_or_default()
                ),
                Step::ModelCall {
                    index: u32::try_from(i).unwrap_or(u32::MAX),
                },
                "truncated by max_tokens",
            );
        }
    }
    if let Some(c) = trace
        .evidence
        .tool_calls
        .iter()
        .find(|c| trace.turns.iter().all(|t| t.index != c.turn))
    {
        problems.push_at(
            format!(
                "tool call `{}` claims turn {}, which was never injected",
                c.name, c.turn
            ),
            tool_step(c),
            "turn never injected",
        );
    }
    problems.result(|| {
        format!(
            "{} turn(s) answered in one session, no transport errors",
            trace.turns.len()
        )
    })
}

/// What a run's model calls add up to; `None` when the run made none `wt` saw. The cost is
/// given only with `pricing` and when every call that reached the model reported its
/// usage: a sum that leaves calls out would be a cost that is false.
/// The agent's own calls only: the harness's (a simulated user's, `source = "user"`) are the
/// evaluation's cost ([`usage_of`], summed into the score's `eval_usage`).
pub(crate) fn usage(
    trace: &Trace,
    pricing: Option<&dyn Fn(&windtunnel_model::TokenUsage) -> f64>,
) -> Option<windtunnel_model::RunUsage> {
    usage_of(
        trace
            .evidence
            .model_calls
            .iter()
            .filter(|c| !is_harness_call(c)),
        pricing,
    )
}

/// Is this a call the harness made (a simulated user's or a judge's), not the agent?
pub(crate) fn is_harness_call(c: &windtunnel_model::ModelCall) -> bool {
    c.source == "user" || c.source == "judge"
}

/// What `calls` add up to; `None` when there are none. Costed as [`usage`] is.
pub(crate) fn usage_of<'a>(
    calls: impl IntoIterator<Item = &'a windtunnel_model::ModelCall>,
    pricing: Option<&dyn Fn(&windtunnel_model::TokenUsage) -> f64>,
) -> Option<windtunnel_model::RunUsage> {
    let mut calls = calls.into_iter().peekable();
    calls.peek()?;
    let mut u = windtunnel_model::RunUsage::default();
    let (mut failed, mut streamed) = (0u64, 0u64);
    for c in calls {
        u.model_calls += 1;
        match &c.usage {
            Some(t) => u.tokens.add(t),
            // A call refused before it reached the model used none.
            None if c.error.as_deref().is_some_and(|e| e.starts_with("refused")) => {}
            None => {
                u.unreported += 1;
                if c.error.is_some() {
                    failed += 1;
                } else if c.stream {
                    streamed += 1;
                }
            }
        }
    }
    if let Some(price) = pricing {
        if u.unreported == 0 {
            u.cost_usd = Some(windtunnel_model::round_cost(price(&u.tokens)));
        } else {
            // Unknown, never a 0 that reads as free: say which calls left it out.
            let mut why = Vec::new();
            if streamed > 0 {
                why.push(format!("{streamed} streamed without a usage chunk"));
            }
            if failed > 0 {
                why.push(format!("{failed} failed before its usage came"));
            }
            let other = u.unreported - streamed - failed;
            if other > 0 {
                why.push(format!("{other} answered without usage"));
            }
            u.cost_unknown = Some(format!(
                "{} of {} model call(s) reported no usage: {}",
                u.unreported,
                u.model_calls,
                why.join(", ")
            ));
        }
    }
    Some(u)
}

/// Two sums of model calls as one: the cost is known only when both are.
pub(crate) fn add_usage(
    a: Option<windtunnel_model::RunUsage>,
    b: Option<windtunnel_model::RunUsage>,
) -> Option<windtunnel_model::RunUsage> {
    let (mut a, b) = match (a, b) {
        (None, b) => return b,
        (a, None) => return a,
        (Some(a), Some(b)) => (a, b),
    };
    a.model_calls += b.model_calls;
    a.unreported += b.unreported;
    a.tokens.add(&b.tokens);
    let one_priced = a.cost_usd.is_some() != b.cost_usd.is_some();
    a.cost_usd = match (a.cost_usd, b.cost_usd) {
        (Some(x), Some(y)) => Some(windtunnel_model::round_cost(x + y)),
        _ => None,
    };
    a.cost_unknown = match (a.cost_unknown.take(), b.cost_unknown) {
        (Some(x), Some(y)) => Some(format!("{x}; {y}")),
        (x, y) => x.or(y),
    };
    if one_priced && a.cost_unknown.is_none() {
        // A sum that leaves a model's calls out would be a cost that is false.
        a.cost_unknown = Some("one of the models has no [pricing]".into());
    }
    Some(a)
}

/// Why a reply is not well-formed text, if it is not.
fn malformed(reply: &str) -> Option<String> {
    if let Some(c) = reply
        .chars()
        .find(|c| c.is_control() && !matches!(c, '\n' | '\r' | '\t'))
    {
        return Some(format!("control character U+{:04X}", c as u32));
    }
    if reply.contains('\u{FFFD}') {
        return Some("U+FFFD replacement character: the bytes were not valid UTF-8".into());
    }
    None
}

/// A short, printable excerpt of a reply for a detail line.
pub(crate) fn excerpt(s: &str) -> String {
    const MAX: usize = 120;
    let mut out = format!("{:?}", s.chars().take(MAX).collect::<String>());
    if s.chars().count() > MAX {
        out.push('…');
    }
    out
}

/// Accumulates a scenario's runs into an [`AggregateResult`] without keeping them: counts,
/// per-layer failures, and turn latencies as a histogram (one entry per distinct
/// millisecond value, however many runs), so that its memory does not grow with the runs and
/// two of them merge — or a run is taken back out — exactly, in any order.
#[derive(Clone, Debug, Default)]
pub(crate) struct Aggregator {
    agg: AggregateResult,
    latencies: BTreeMap<u64, u64>,
}

/// What one run adds to its scenario's aggregate.
#[derive(Clone, Debug, Default)]
pub(crate) struct Contribution {
    pub verdict: Option<Verdict>,
    /// The layers its score failed.
    pub failed_layers: Vec<&'static str>,
    /// The latencies of its turns that ended without an error.
    pub latencies: Vec<u64>,
    /// It took more than one attempt (`--retry-errors`).
    pub retried: bool,
}

impl Contribution {
    pub(crate) fn of(trace: &Trace, score: Option<&Score>) -> Contribution {
        Contribution::from_parts(
            score,
            trace
                .turns
                .iter()
                .filter(|t| t.error.is_none())
                .map(|t| t.latency_ms),
            trace.attempts,
        )
    }

    /// A run's contribution from its score, its counted turn latencies and its trace's
    /// `attempts`.
    pub(crate) fn from_parts(
        score: Option<&Score>,
        latencies: impl Iterator<Item = u64>,
        attempts: Option<u32>,
    ) -> Self {
        Contribution {
            verdict: score.map(|s| s.verdict),
            failed_layers: score.map(|s| s.failed_layers()).unwrap_or_default(),
            latencies: latencies.collect(),
            retried: attempts.is_some_and(|n| n > 1),
        }
    }
}

/// Where a run counts. Every reader that counts runs (`wt report`'s totals, `wt view`'s
/// header and its verdict filter) sorts them by this one rule, so their counts agree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Bucket {
    Pass,
    Fail,
    /// Not judged pass or fail: an ERROR verdict, or no usable score at all.
    Error,
}

impl Bucket {
    /// The bucket of a run whose score says `verdict` (`None`: no usable score).
    pub(crate) fn of(verdict: Option<Verdict>) -> Bucket {
        match verdict {
            Some(Verdict::Pass) => Bucket::Pass,
            Some(Verdict::Fail) => Bucket::Fail,
            Some(_) | None => Bucket::Error,
        }
    }
}

impl Aggregator {
    pub(crate) fn new(scenario_id: &str) -> Self {
        let mut agg = AggregateResult::new(scenario_id);
        for l in LAYERS {
            agg.layer_failures.insert(l.to_owned(), 0);
        }
        Aggregator {
            agg,
            latencies: BTreeMap::new(),
        }
    }

    pub(crate) fn add(&mut self, trace: &Trace, score: Option<&Score>) {
        self.add_run(&Contribution::of(trace, score));
    }

    /// Counts one run in.
    pub(crate) fn add_run(&mut self, c: &Contribution) {
        self.apply(c, true);
    }

    /// Takes one run counted in before back out (a duplicate found later).
    pub(crate) fn remove_run(&mut self, c: &Contribution) {
        self.apply(c, false);
    }

    fn apply(&mut self, c: &Contribution, add: bool) {
        let step = |n: &mut u32| {
            *n = if add { *n + 1 } else { n.saturating_sub(1) };
        };
        step(&mut self.agg.runs);
        if c.retried {
            step(&mut self.agg.retried);
        }
        match Bucket::of(c.verdict) {
            Bucket::Pass => step(&mut self.agg.passed),
            Bucket::Fail => step(&mut self.agg.failed),
            Bucket::Error => step(&mut self.agg.errored),
        }
        for name in &c.failed_layers {
            step(
                self.agg
                    .layer_failures
                    .entry((*name).to_owned())
                    .or_default(),
            );
        }
        for &ms in &c.latencies {
            if add {
                *self.latencies.entry(ms).or_default() += 1;
            } else if let Some(n) = self.latencies.get_mut(&ms) {
                *n -= 1;
                if *n == 0 {
                    self.latencies.remove(&ms);
                }
            }
        }
    }

    /// Adds everything `other` counted (of the same scenario).
    pub(crate) fn merge(&mut self, other: Aggregator) {
        let (a, b) = (&mut self.agg, other.agg);
        a.runs += b.runs;
        a.passed += b.passed;
        a.failed += b.failed;
        a.errored += b.errored;
        a.retried += b.retried;
        for (layer, n) in b.layer_failures {
            *a.layer_failures.entry(layer).or_default() += n;
        }
        for (ms, n) in other.latencies {
            *self.latencies.entry(ms).or_default() += n;
        }
    }

    /// Runs counted so far.
    pub(crate) fn runs(&self) -> u32 {
        self.agg.runs
    }

    /// The turn latencies counted so far: milliseconds → turns.
    pub(crate) fn latencies(&self) -> &BTreeMap<u64, u64> {
        &self.latencies
    }

    pub(crate) fn finish(mut self) -> AggregateResult {
        self.agg.latency = latency_stats(&self.latencies);
        self.agg
    }
}

/// Count, min, mean, p50, p95 and max of a latency histogram (value → occurrences): the
/// same figures as over the sorted list of every value (nearest rank).
fn latency_stats(hist: &BTreeMap<u64, u64>) -> LatencyStats {
    let n: u64 = hist.values().sum();
    if n == 0 {
        return LatencyStats::default();
    }
    let rank = |p: u64| (n * p).div_ceil(100).saturating_sub(1).min(n - 1);
    let at = |r: u64| {
        let mut seen = 0;
        for (&ms, &k) in hist {
            seen += k;
            if seen > r {
                return ms;
            }
        }
        0
    };
    let sum: u128 = hist
        .iter()
        .map(|(&ms, &k)| u128::from(ms) * u128::from(k))
        .sum();
    let mut stats = LatencyStats::default();
    stats.count = n;
    stats.min_ms = hist.keys().next().copied().unwrap_or(0);
    stats.mean_ms = u64::try_from(sum / u128::from(n)).unwrap_or(u64::MAX);
    stats.p50_ms = at(rank(50));
    stats.p95_ms = at(rank(95));
    stats.max_ms = hist.keys().next_back().copied().unwrap_or(0);
    stats
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use windtunnel_model::{TurnRecord, WorldObservation};

    fn scenario() -> Scenario {
        toml::from_str(
            r#"
id = "s"
turns = ["hi"]
[expect.outcome]
reply_contains = ["shipped"]
world = [{ path = "n", equals = 1 }]
[expect.trajectory]
required_tools = ["a", "b"]
ordered = true
[expect.constraint]
forbidden_tools = ["x"]
max_steps = 2
"#,
        )
        .unwrap()
    }

    fn trace(reply: &str, tools: &[&str]) -> Trace {
        let mut trace = Trace::default();
        trace.run_id = "r".into();
        trace.session_id = "sess".into();
        let mut turn = TurnRecord::default();
        turn.input = "hi".into();
        turn.reply = Some(reply.into());
        turn.latency_ms = 5;
        trace.turns.push(turn);
        trace.evidence.tool_calls = tools
            .iter()
            .enumerate()
            .map(|(i, n)| {
                crate::runtime::tool_call(0, i as u32, n, json!({}), json!(null), None, None)
            })
            .collect();
        let mut world = WorldObservation::default();
        world.before = json!({"n": 0});
        world.after = json!({"n": 1});
        trace.world = Some(world);
        trace
    }

    #[test]
    fn pass_and_each_layer_fails() {
        let s = scenario();
        assert_eq!(
            score(&s, &trace("It SHIPPED", &["a", "b"])).verdict,
            Verdict::Pass
        );
        let sc = score(&s, &trace("lost", &["a", "b"]));
        assert_eq!(sc.failed_layers(), ["outcome"]);
        assert!(sc.outcome.detail.contains("\"shipped\""));
        let sc = score(&s, &trace("shipped", &["b", "a"]));
        assert_eq!(sc.failed_layers(), ["trajectory"]);
        assert!(
            sc.trajectory
                .detail
                .contains("`a` must first be called before `b`")
        );
        let sc = score(&s, &trace("shipped", &["a", "x", "b"]));
        assert_eq!(sc.failed_layers(), ["constraint"]);
        assert!(sc.constraint.detail.contains("forbidden tool `x`"));
        assert!(sc.constraint.detail.contains("3 tool calls"));
        let sc = score(&s, &trace("shipped\u{0}", &["a", "b"]));
        assert_eq!(sc.failed_layers(), ["integrity"]);
        assert_eq!(sc.verdict, Verdict::Fail);
    }

    fn at(step: Step, problem: &str) -> StepRef {
        StepRef::new(step, problem)
    }

    fn call(turn: u32, step: u32) -> Step {
        Step::ToolCall { turn, step }
    }

    /// Adds a successful call of `name` at `turn`, `step` to `t`.
    fn push_call(t: &mut Trace, turn: u32, step: u32, name: &str) {
        t.evidence.tool_calls.push(crate::runtime::tool_call(
            turn,
            step,
            name,
            json!({}),
            json!(null),
            None,
            None,
        ));
    }

    #[test]
    fn a_failing_layer_points_at_the_steps_its_problems_happened_at() {
        let s = scenario();
        // A forbidden call, and the run's third call beyond `max_steps = 2`.
        let sc = score(&s, &trace("shipped", &["a", "x", "b"]));
        assert_eq!(
            sc.constraint.at,
            [
                at(call(0, 1), "forbidden tool"),
                at(call(0, 2), "over max_steps")
            ]
        );
        for (_, layer) in sc.layers() {
            if layer.passed {
                assert!(layer.at.is_empty(), "a passing layer points nowhere");
            }
        }
        assert!(sc.trajectory.at.is_empty() && sc.outcome.at.is_empty());

        // A turn beyond `max_steps_per_turn`: its first call over the limit.
        let mut s = scenario();
        s.expect.constraint.max_steps = None;
        s.expect.constraint.max_steps_per_turn = Some(1);
        let mut t = trace("shipped", &["a", "b"]);
        let mut second = t.turns[0].clone();
        second.index = 1;
        t.turns.push(second);
        push_call(&mut t, 1, 0, "a");
        let sc = score(&s, &t);
        assert_eq!(
            sc.constraint.at,
            [at(call(0, 1), "over max_steps_per_turn")]
        );
        assert!(sc.constraint.detail.contains("2 tool calls in turn 0"));

        // Each turn that went wrong, a truncated model call, a call claiming a turn that was
        // never injected; a problem of the whole run (no session) points nowhere.
        let mut t = trace("shipped", &["a", "b"]);
        let turn = t.turns[0].clone();
        let mut turns = Vec::new();
        for (i, (reply, error)) in [
            (Some("fine"), None),
            (None, Some("timed out after 1s")),
            (None, None),
            (Some("  "), None),
            (Some("bad\u{7}"), None),
        ]
        .into_iter()
        .enumerate()
        {
            let mut x = turn.clone();
            x.index = i as u32;
            x.reply = reply.map(str::to_owned);
            x.error = error.map(str::to_owned);
            turns.push(x);
        }
        t.turns = turns;
        t.session_id.clear();
        let mut cut = windtunnel_model::ModelCall::default();
        cut.turn = Some(0);
        cut.finish_reason = Some("length".into());
        t.evidence.model_calls = vec![windtunnel_model::ModelCall::default(), cut];
        push_call(&mut t, 7, 0, "ghost");
        let sc = score(&s, &t);
        assert_eq!(
            sc.integrity.at,
            [
                at(Step::Turn { turn: 1 }, "turn error"),
                at(Step::Turn { turn: 2 }, "no reply"),
                at(Step::Turn { turn: 3 }, "empty reply"),
                at(Step::Turn { turn: 4 }, "malformed reply"),
                at(Step::ModelCall { index: 1 }, "truncated by max_tokens"),
                at(call(7, 0), "turn never injected"),
            ]
        );
        assert!(sc.integrity.detail.contains("no session id recorded"));
        // What the sidecar says: the pointers beside the detail.
        let json = serde_json::to_value(&sc).unwrap();
        assert_eq!(
            json["integrity"]["at"][4],
            json!({"kind": "model_call", "index": 1, "problem": "truncated by max_tokens"})
        );
    }

    #[test]
    fn file_checks_read_the_observed_files() {
        use windtunnel_model::ObservedFile;
        let s: Scenario = toml::from_str(
            r#"
id = "s"
turns = ["hi"]
[[expect.outcome.files]]
path = "notes.txt"
contains = "delivered"
[[expect.outcome.files]]
path = "graph.jsonl"
json = { path = "1.name", equals = "b" }
[[expect.outcome.files]]
path = "gone.txt"
exists = false
"#,
        )
        .unwrap();
        let seen = |text: &str| {
            let mut f = ObservedFile::default();
            f.exists = true;
            f.bytes = text.len() as u64;
            f.text = Some(text.into());
            f
        };
        let mut t = trace("ok", &[]);
        let files = &mut t.world.as_mut().unwrap().files;
        files.insert("notes.txt".into(), seen("order 1 delivered"));
        files.insert(
            "graph.jsonl".into(),
            seen("{\"name\":\"a\"}\n{\"name\":\"b\"}\n"),
        );
        files.insert("gone.txt".into(), ObservedFile::default());
        assert_eq!(score(&s, &t).verdict, Verdict::Pass, "{:?}", score(&s, &t));
        let files = &mut t.world.as_mut().unwrap().files;
        files.insert("notes.txt".into(), seen("order 1 lost"));
        files.insert("graph.jsonl".into(), seen("{\"name\":\"a\"}\n"));
        files.insert("gone.txt".into(), seen("x"));
        let sc = score(&s, &t);
        assert_eq!(sc.failed_layers(), ["outcome"]);
        let d = &sc.outcome.detail;
        assert!(
            d.contains("file `notes.txt`: does not contain \"delivered\""),
            "{d}"
        );
        assert!(d.contains("file `graph.jsonl`: `1.name` is absent"), "{d}");
        assert!(d.contains("file `gone.txt`: should not exist"), "{d}");
        // A file too large to keep cannot pass a content check.
        let mut big = ObservedFile::default();
        big.exists = true;
        big.bytes = 5 << 20;
        big.note = Some("too large".into());
        t.world
            .as_mut()
            .unwrap()
            .files
            .insert("notes.txt".into(), big);
        assert!(
            score(&s, &t)
                .outcome
                .detail
                .contains("cannot be checked: too large")
        );
        // Not observed at all (no scratch directory): the check fails, never passes.
        t.world.as_mut().unwrap().files.clear();
        assert!(score(&s, &t).outcome.detail.contains("not observed"));
    }

    #[test]
    fn turn_error_is_error_verdict() {
        let s = scenario();
        let mut t = trace("", &[]);
        t.turns[0].reply = None;
        t.turns[0].error = Some("timed out after 1s".into());
        let sc = score(&s, &t);
        assert_eq!(sc.verdict, Verdict::Error);
        assert_eq!(sc.error.as_deref(), Some("turn 0: timed out after 1s"));
        assert!(!sc.integrity.passed);
    }

    #[test]
    fn aggregate_counts() {
        let s = scenario();
        let mut a = Aggregator::new("s");
        let t = trace("shipped", &["a", "b"]);
        a.add(&t, Some(&score(&s, &t)));
        let t2 = trace("nope", &["a", "b"]);
        a.add(&t2, Some(&score(&s, &t2)));
        let r = a.finish();
        assert_eq!((r.runs, r.passed, r.failed, r.errored), (2, 1, 1, 0));
        assert_eq!(r.layer_failures["outcome"], 1);
        assert_eq!(r.latency.p50_ms, 5);
    }
}
