//! A run's transcript as its page shows it: each turn's user message, the model and tool
//! calls of the turn in the order they happened, the agent's reply. Every step has an id a
//! link can lead to (`turn-<n>`, `call-<turn>-<step>`, `model-<i>`), and the steps the failing
//! scorer layers point at ([`windtunnel_model::LayerResult::at`]) are marked with the layer
//! and the problem.

use std::collections::{BTreeMap, BTreeSet};

use maud::{Markup, html};
use windtunnel_model::{ModelCall, Score, StepRef, ToolCall, Trace, TurnRecord};

use crate::report::html::cut_to;

/// Longest text shown for one field on a run's page, in characters.
pub(super) const MAX_TEXT: usize = 20_000;

/// Texts longer than this many characters (or lines) are folded: a preview, and the whole
/// text behind a "show" that says its size.
const FOLD_CHARS: usize = 2_000;
const FOLD_LINES: usize = 40;
/// Characters a folded text's preview shows.
const PREVIEW_CHARS: usize = 600;

/// `s` cut at [`MAX_TEXT`] characters, saying how long it was.
pub(super) fn cut(s: &str) -> String {
    cut_to(s, MAX_TEXT)
}

/// A text to read in a `pre` of `class`: whole when short, else folded — its first
/// [`PREVIEW_CHARS`] characters, and the whole (still cut at [`MAX_TEXT`]) behind a summary
/// that says how long it is.
pub(super) fn long(class: &str, text: &str) -> Markup {
    let chars = text.chars().count();
    let lines = text.lines().count();
    if chars <= FOLD_CHARS && lines <= FOLD_LINES {
        return html! { pre class=(class) { (text) } };
    }
    let preview: String = text
        .lines()
        .take(FOLD_LINES / 4)
        .collect::<Vec<_>>()
        .join("\n");
    let preview: String = preview.chars().take(PREVIEW_CHARS).collect();
    html! {
        pre class=(format!("{class} preview")) { (preview) "…" }
        details.fold {
            summary { "show all " (chars) " characters, " (lines) " line(s)" }
            pre class=(class) { (text) }
        }
    }
}

pub(super) fn json_text(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => cut(s),
        v => cut(&serde_json::to_string_pretty(v).unwrap_or_default()),
    }
}

/// Longest problem or model name a mark repeats, in characters.
const MAX_LABEL: usize = 200;
/// Most pointers of one layer shown (and marked in the transcript).
pub(super) const MAX_POINTERS: usize = 200;

/// One step of a turn, in the order it happened.
pub(super) enum Step<'a> {
    Tool(&'a ToolCall),
    /// A model call and its place in `evidence.model_calls`.
    Model(usize, &'a ModelCall),
}

/// A turn's tool calls and model calls in the order they happened (a model call after the
/// tool calls recorded before it ended).
pub(super) fn steps_of(t: &Trace, turn: u32) -> Vec<Step<'_>> {
    let tools: Vec<&ToolCall> = t
        .evidence
        .tool_calls
        .iter()
        .filter(|c| c.turn == turn)
        .collect();
    let mut models: Vec<(usize, &ModelCall)> = t
        .evidence
        .model_calls
        .iter()
        .enumerate()
        .filter(|(_, c)| c.turn == Some(turn))
        .collect();
    models.sort_by_key(|(_, c)| c.after_tool_calls);
    let mut out = Vec::new();
    let mut m = models.into_iter().peekable();
    for (i, c) in tools.into_iter().enumerate() {
        while let Some((at, call)) = m.next_if(|(_, c)| c.after_tool_calls as usize <= i) {
            out.push(Step::Model(at, call));
        }
        out.push(Step::Tool(c));
    }
    out.extend(m.map(|(at, c)| Step::Model(at, c)));
    out
}

fn call_id(turn: u32, step: u32) -> String {
    format!("call-{turn}-{step}")
}

fn model_id(index: usize) -> String {
    format!("model-{index}")
}

fn turn_id(turn: u32) -> String {
    format!("turn-{turn}")
}

/// The id of the step `at` names on the run's page, when the page shows such a step (every
/// tool and model call the trace holds, every turn it recorded).
fn anchor(t: &Trace, at: &windtunnel_model::Step) -> Option<String> {
    use windtunnel_model::Step as At;
    match *at {
        At::ToolCall { turn, step } => t
            .evidence
            .tool_calls
            .iter()
            .any(|c| c.turn == turn && c.step == step)
            .then(|| call_id(turn, step)),
        At::ModelCall { index } => {
            let index = usize::try_from(index).ok()?;
            (index < t.evidence.model_calls.len()).then(|| model_id(index))
        }
        At::Turn { turn } => t
            .turns
            .iter()
            .any(|x| x.index == turn)
            .then(|| turn_id(turn)),
        _ => None,
    }
}

/// A failing layer's pointer, for its row of the layers table: the problem, and the step
/// it names ("turn 1, step 2 · `refund`") linked to it — as text when the page has no such
/// step.
pub(super) fn pointer(t: &Trace, p: &StepRef) -> Markup {
    use windtunnel_model::Step as At;
    let label = html! {
        @match p.step {
            At::ToolCall { turn, step } => {
                "turn " (turn) ", step " (step)
                @if let Some(c) = t.evidence.tool_calls.iter().find(|c| c.turn == turn && c.step == step) {
                    " · " code { (cut_to(&c.name, MAX_LABEL)) }
                }
            }
            At::ModelCall { index } => {
                // Counted from 1, as the layer's detail counts them.
                "model call " (u64::from(index) + 1)
                @if let Some(c) = usize::try_from(index).ok().and_then(|i| t.evidence.model_calls.get(i)) {
                    @if let Some(turn) = c.turn { " (turn " (turn) ")" }
                    " · " (cut_to(&c.source, MAX_LABEL))
                }
            }
            At::Turn { turn } => { "turn " (turn) }
            _ => { "a kind of step this wt does not know" }
        }
    };
    html! {
        (cut_to(&p.problem, MAX_LABEL)) ": "
        @match anchor(t, &p.step) {
            Some(id) => { a.at href=(format!("#{id}")) { (label) } }
            None => { span.muted { (label) " (not in the trace)" } }
        }
    }
}

/// What the failing layers point at in a run's transcript: by a step's id, the marks it
/// carries ("constraint: forbidden tool").
#[derive(Default)]
pub(super) struct Marks(BTreeMap<String, Vec<String>>);

impl Marks {
    pub(super) fn of(t: &Trace, score: Option<&Score>) -> Marks {
        let mut marks = Marks::default();
        let Some(score) = score else { return marks };
        for (name, layer) in score.layers() {
            if layer.passed {
                continue;
            }
            for p in layer.at.iter().take(MAX_POINTERS) {
                let Some(id) = anchor(t, &p.step) else {
                    continue;
                };
                let mark = format!("{name}: {}", cut_to(&p.problem, MAX_LABEL));
                let on = marks.0.entry(id).or_default();
                if !on.contains(&mark) {
                    on.push(mark);
                }
            }
        }
        marks
    }

    fn on(&self, id: &str) -> &[String] {
        self.0.get(id).map_or(&[], Vec::as_slice)
    }
}

/// A step's class: `base`, and `flagged` when a failing layer points at it.
fn class(base: &str, marks: &[String]) -> String {
    if marks.is_empty() {
        base.to_owned()
    } else {
        format!("{base} flagged")
    }
}

/// The badges of a step's marks.
fn badges(marks: &[String]) -> Markup {
    html! { @for m in marks { " " span.badge.flag { (m) } } }
}

/// A tool call: on a run's page with its `id` and the marks pointing at it; on a pair page
/// marked (`only BASE`, `only NEW`) when the other side did not make it.
pub(super) fn tool_step(
    c: &ToolCall,
    id: Option<&str>,
    marks: &[String],
    only: Option<&str>,
) -> Markup {
    let base = if only.is_some() {
        "step tool only-here"
    } else {
        "step tool"
    };
    html! {
        div class=(class(base, marks)) id=[id] {
            h4 { "tool call " (c.turn) "." (c.step) " · " code { (c.name) }
                @if let Some(s) = &c.server { " · world server " (s) }
                @if let Some(side) = only { " " span.badge.diff { "only " (side) } }
                (badges(marks)) }
            p.muted { "arguments" }
            (long("args", &json_text(&c.arguments)))
            p.muted { "result" }
            (long("result", &json_text(&c.result)))
            @if let Some(e) = &c.error { pre.error { "error: " (cut(e)) } }
        }
    }
}

/// A model call, on a run's page with its `id` and the marks pointing at it.
pub(super) fn model_step(c: &ModelCall, id: Option<&str>, marks: &[String]) -> Markup {
    html! {
        div class=(class("step model", marks)) id=[id] {
            h4 {
                "model call · " (c.source)
                @if let Some(m) = &c.model { " · " code { (m) } }
                @if let Some(f) = &c.finish_reason { " · finish " (f) }
                @if let Some(u) = &c.usage { " · " (u.prompt_tokens) " in / " (u.completion_tokens) " out tokens" }
                " · " (c.latency_ms) " ms"
                (badges(marks))
            }
            details {
                summary { "messages" }
                pre.messages { (json_text(&c.messages)) }
            }
            p.muted { "response" }
            (long("response", &json_text(&c.response)))
            @if let Some(r) = &c.refusal { pre.error { "refusal: " (cut(r)) } }
            @if let Some(e) = &c.error { pre.error { "error: " (cut(e)) } }
            @if !c.truncated.is_empty() { p.muted { "cut to keep the trace bounded: " (c.truncated.join(", ")) } }
        }
    }
}

/// A step of a run's page, with its id and marks.
fn step(s: Step<'_>, marks: &Marks) -> Markup {
    match s {
        Step::Tool(c) => {
            let id = call_id(c.turn, c.step);
            tool_step(c, Some(&id), marks.on(&id), None)
        }
        Step::Model(i, c) => {
            let id = model_id(i);
            model_step(c, Some(&id), marks.on(&id))
        }
    }
}

/// Where the simulated user's messages start among the recorded turns, and its model; `None`
/// when no simulated user wrote one. Its messages are injected after the scripted ones, so
/// they are the last `user.turns` — less one a guard denied, which has no turn.
fn simulated(t: &Trace) -> Option<(usize, &str)> {
    let user = t.user.as_ref().filter(|u| u.turns > 0)?;
    let denied = t
        .denial
        .as_ref()
        .is_some_and(|d| d.turn as usize == t.turns.len());
    let recorded = (user.turns as usize).saturating_sub(usize::from(denied));
    Some((t.turns.len().saturating_sub(recorded), &user.model))
}

/// A turn's user message: "simulated user · <model>" when the user model wrote it.
fn user_step(turn: &TurnRecord, by: Option<&str>) -> Markup {
    html! {
        div class=(if by.is_some() { "step user simulated" } else { "step user" }) {
            h4 {
                @if let Some(model) = by { "simulated user · " code { (cut_to(model, MAX_LABEL)) } } @else { "user" }
                " · turn " (turn.index)
            }
            (long("input", &cut(&turn.input)))
        }
    }
}

/// A turn's reply or error, with the marks pointing at the turn.
fn agent_step(turn: &TurnRecord, marks: &[String]) -> Markup {
    html! {
        div class=(class("step agent", marks)) {
            h4 { "agent · " (turn.latency_ms) " ms" @if !turn.retries.is_empty() { " · " (turn.retries.len()) " request(s) retried" } (badges(marks)) }
            @if let Some(reply) = &turn.reply { (long("reply", &cut(reply))) }
            @if let Some(e) = &turn.error {
                pre.error { "error" @if let Some(k) = turn.error_kind { " (" (k) ")" } ": " (cut(e)) }
            }
        }
    }
}

/// A run's conversation in order: each turn's user message, its tool and model calls, the
/// agent's reply; a guard's denial where it stopped a turn; then the calls of turns the run
/// has no record of, and model calls outside any turn.
pub(super) fn transcript(t: &Trace, marks: &Marks) -> Markup {
    let simulated = simulated(t);
    html! {
        @for (at, turn) in t.turns.iter().enumerate() {
            @let by = simulated.filter(|(from, _)| at >= *from).map(|(_, model)| model);
            div.turn id=(turn_id(turn.index)) {
                (user_step(turn, by))
                @if let Some(d) = t.denial.as_ref().filter(|d| d.turn == turn.index) {
                    div.step.denied {
                        h4 { "guard " code { (d.guard) } " denied this turn" }
                        pre { (d.code) " — " (cut(&d.message)) }
                    }
                }
                @for s in steps_of(t, turn.index) { (step(s, marks)) }
                (agent_step(turn, marks.on(&turn_id(turn.index))))
            }
        }
        (unrecorded(t, marks))
        @let orphans: Vec<(usize, &ModelCall)> = t.evidence.model_calls.iter().enumerate().filter(|(_, c)| c.turn.is_none()).collect();
        @if !orphans.is_empty() {
            h3 { "Model calls outside any turn (refused)" }
            @for (i, c) in orphans { (step(Step::Model(i, c), marks)) }
        }
    }
}

/// The calls that name a turn the run has no record of, turn by turn.
fn unrecorded(t: &Trace, marks: &Marks) -> Markup {
    let recorded: BTreeSet<u32> = t.turns.iter().map(|x| x.index).collect();
    let named: BTreeSet<u32> = t
        .evidence
        .tool_calls
        .iter()
        .map(|c| c.turn)
        .chain(t.evidence.model_calls.iter().filter_map(|c| c.turn))
        .filter(|n| !recorded.contains(n))
        .collect();
    html! {
        @for n in named {
            div.unrecorded {
                h3 { "Calls of turn " (n) ", which the run has no record of" }
                p.muted { "A simulated user's last call (its stop word or a failure, never sent), a turn a guard denied, or a turn never injected." }
                @for s in steps_of(t, n) { (step(s, marks)) }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use windtunnel_model::{Denial, Step as At, UserRecord};

    fn trace(turns: u32) -> Trace {
        let mut t = Trace::default();
        for i in 0..turns {
            let mut turn = TurnRecord::default();
            turn.index = i;
            t.turns.push(turn);
        }
        t
    }

    fn user(turns: u32) -> Option<UserRecord> {
        let mut u = UserRecord::default();
        u.model = "sim".into();
        u.turns = turns;
        Some(u)
    }

    #[test]
    fn the_simulated_users_turns_are_the_last_it_wrote_less_one_denied() {
        let mut t = trace(3);
        assert_eq!(simulated(&t), None, "no simulated user");
        t.user = user(0);
        assert_eq!(simulated(&t), None, "one that wrote nothing");
        t.user = user(2);
        assert_eq!(simulated(&t), Some((1, "sim")));
        // Its third message was denied: no turn holds it.
        t.user = user(3);
        let mut denial = Denial::default();
        denial.turn = 3;
        t.denial = Some(denial);
        assert_eq!(simulated(&t), Some((1, "sim")));
        // More than the turns (a file written by hand): every turn, never a panic.
        t.denial = None;
        t.user = user(9);
        assert_eq!(simulated(&t), Some((0, "sim")));
    }

    #[test]
    fn a_pointer_leads_only_to_a_step_the_page_shows() {
        let mut t = trace(1);
        t.evidence.tool_calls.push(crate::runtime::tool_call(
            0,
            1,
            "refund",
            serde_json::json!({}),
            serde_json::json!(null),
            None,
            None,
        ));
        t.evidence.model_calls.push(ModelCall::default());
        let anchors = [
            At::ToolCall { turn: 0, step: 1 },
            At::ToolCall { turn: 0, step: 2 },
            At::ModelCall { index: 0 },
            At::ModelCall { index: 1 },
            At::Turn { turn: 0 },
            At::Turn { turn: 1 },
            At::Unknown,
        ]
        .map(|at| anchor(&t, &at));
        assert_eq!(
            anchors,
            [
                Some("call-0-1".to_owned()),
                None,
                Some("model-0".to_owned()),
                None,
                Some("turn-0".to_owned()),
                None,
                None,
            ]
        );
        let text = pointer(
            &t,
            &StepRef::new(At::ToolCall { turn: 0, step: 1 }, "forbidden tool"),
        )
        .into_string();
        assert_eq!(
            text,
            "forbidden tool: <a class=\"at\" href=\"#call-0-1\">turn 0, step 1 · <code>refund</code></a>"
        );
    }
}
