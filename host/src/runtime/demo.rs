//! The demo agent: embedded, in-process and deterministic. It solves the demo pack by
//! calling the right tools against the fixture world, and its fault modes (`fault` in the
//! agent config, or the built-in names `demo-leaky`, `demo-forbidden-tool`, `demo-slow`,
//! `demo-garbled`) make each scorer layer and hook show a failure without a network:
//!
//! - `leaky`: `reset_state` forgets nothing; its state probe shows earlier sessions and it
//!   repeats earlier-session content when asked what it remembers.
//! - `forbidden-tool`: issues a refund on every order it sees (the constraint layer catches it).
//! - `slow`: never answers within the turn timeout (ERROR).
//! - `garbled`: answers with a broken, binary-looking payload (integrity and outcome fail).

use std::time::Duration;

use serde_json::{Value, json};
use windtunnel_model::{Scenario, ToolCall, ToolSpec, TurnErrorKind};

use super::{AgentHandle, Reply, Runtime, RuntimeError, TurnCtx};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    None,
    Leaky,
    ForbiddenTool,
    Slow,
    Garbled,
}

/// The `demo` runtime.
impl super::kind::RuntimeKind for super::agent::Demo {
    fn name(&self) -> &'static str {
        "demo"
    }

    fn build(&self, _: &super::Agent) -> Result<Box<dyn Runtime>, RuntimeError> {
        Ok(Box::new(DemoRuntime::new(self)?))
    }

    fn to_sdk(&self, a: &mut windtunnel_model::AgentConfig) {
        a.fault.clone_from(&self.fault);
    }
}

pub(crate) struct DemoRuntime {
    fault: Fault,
}

impl DemoRuntime {
    pub(crate) fn new(settings: &super::agent::Demo) -> Result<Self, RuntimeError> {
        let fault = match settings.fault.as_deref() {
            None | Some("") | Some("none") => Fault::None,
            Some("leaky") => Fault::Leaky,
            Some("forbidden-tool") => Fault::ForbiddenTool,
            Some("slow") => Fault::Slow,
            Some("garbled") => Fault::Garbled,
            Some(other) => {
                return Err(RuntimeError(format!(
                    "unknown demo fault `{other}` (expected leaky, forbidden-tool, slow or garbled)"
                )));
            }
        };
        Ok(DemoRuntime { fault })
    }
}

impl Runtime for DemoRuntime {
    fn provision(&self, scenario: &Scenario) -> Result<Box<dyn AgentHandle>, RuntimeError> {
        Ok(Box::new(DemoAgent {
            fault: self.fault,
            tools: scenario.tools.clone(),
            memory: Vec::new(),
        }))
    }

    /// Each lane is an agent of its own: sessions never meet.
    fn max_lanes(&self) -> Option<usize> {
        None
    }

    /// The agent runs in `wt`'s own threads: one lane per CPU.
    fn default_jobs(&self) -> usize {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    }
}

struct Memory {
    session: String,
    text: String,
    order: Option<String>,
}

struct DemoAgent {
    fault: Fault,
    tools: Vec<ToolSpec>,
    memory: Vec<Memory>,
}

fn order_number(text: &str) -> Option<String> {
    text.split(|c: char| !c.is_ascii_digit())
        .find(|w| w.len() >= 3)
        .map(str::to_owned)
}

/// Whether `lower` (a message, lowercased once) holds any of `words`.
fn mentions(lower: &str, words: &[&str]) -> bool {
    words.iter().any(|w| lower.contains(w))
}

struct Turn<'a, 'b> {
    ctx: TurnCtx<'a>,
    tools: &'b [ToolSpec],
    calls: Vec<ToolCall>,
}

impl Turn<'_, '_> {
    /// Calls `name` if the scenario offers it; returns its result (as the call's evidence
    /// holds it).
    fn call(&mut self, name: &str, args: Value) -> Option<&Value> {
        if !self.tools.iter().any(|t| t.name == name) {
            return None;
        }
        let step = self.calls.len() as u32;
        let call = self.ctx.call_tool(self.tools, step, name, args);
        self.calls.push(call);
        let call = self.calls.last().expect("just pushed");
        call.error.is_none().then_some(&call.result)
    }
}

impl AgentHandle for DemoAgent {
    fn reset_state(&mut self) -> Result<(), RuntimeError> {
        if self.fault != Fault::Leaky {
            self.memory.clear();
        }
        Ok(())
    }

    fn send(&mut self, session_id: &str, text: &str, ctx: TurnCtx<'_>) -> Reply {
        let timeout = ctx.timeout;
        match self.fault {
            Fault::Slow => {
                // Replies only after the deadline; the runtime stops waiting at it (or at a
                // cut, when `wt` is stopping).
                if !ctx.stop.sleep(timeout) {
                    return Reply::failed(
                        TurnErrorKind::Interrupted,
                        "interrupted: wt is stopping",
                        Vec::new(),
                    );
                }
                return Reply::failed(
                    TurnErrorKind::Timeout,
                    format!("no reply within the turn timeout of {}", show_secs(timeout)),
                    Vec::new(),
                );
            }
            Fault::Garbled => {
                self.remember(session_id, text, None);
                return Reply::text(
                    "\u{0}\u{FFFD}\u{FFFD}{\"choices\":[{\"mess\u{1b}[0m",
                    Vec::new(),
                );
            }
            _ => {}
        }
        let order = order_number(text).or_else(|| {
            self.memory
                .iter()
                .rev()
                .filter(|m| self.fault == Fault::Leaky || m.session == session_id)
                .find_map(|m| m.order.clone())
        });
        let earlier: Vec<String> = self
            .memory
            .iter()
            .filter(|m| m.session != session_id)
            .map(|m| m.text.clone())
            .collect();
        self.remember(session_id, text, order.clone());
        let mut turn = Turn {
            ctx,
            tools: &self.tools,
            calls: Vec::new(),
        };
        let reply = respond(self.fault, text, order.as_deref(), &earlier, &mut turn);
        Reply::text(reply, turn.calls)
    }

    fn probe_state(&mut self) -> Option<Value> {
        let sessions: Vec<&str> = self.memory.iter().fold(Vec::new(), |mut acc, m| {
            if !acc.contains(&m.session.as_str()) {
                acc.push(m.session.as_str());
            }
            acc
        });
        // What the agent retains, not bookkeeping: a reset counter would differ after every
        // reset of even a perfectly clean agent.
        Some(json!({
            "sessions": sessions,
            "memory": self.memory.iter().map(|m| json!({"session": m.session, "text": m.text})).collect::<Vec<_>>(),
        }))
    }

    fn teardown(&mut self) -> Result<(), RuntimeError> {
        self.memory.clear();
        Ok(())
    }

    fn cooperative(&self) -> bool {
        true
    }
}

impl DemoAgent {
    fn remember(&mut self, session: &str, text: &str, order: Option<String>) {
        self.memory.push(Memory {
            session: session.to_owned(),
            text: text.to_owned(),
            order,
        });
    }
}

fn show_secs(d: Duration) -> String {
    format!("{}s", d.as_secs_f64())
}

fn respond(
    fault: Fault,
    text: &str,
    order: Option<&str>,
    earlier: &[String],
    turn: &mut Turn<'_, '_>,
) -> String {
    let lower = &text.to_lowercase();
    if mentions(lower, &["this run has been scored"]) {
        // A debrief: answer in the order asked, from what this agent knows of its fault.
        let differently = match fault {
            Fault::ForbiddenTool => {
                "I would not call issue_refund unless the customer asked for a refund."
            }
            Fault::Leaky => "I would not rely on what I remembered from earlier sessions.",
            _ => "I would follow the required steps in order.",
        };
        return format!(
            "1. Environment: no tool call returned an error or an unexpected shape.\n\
             2. Blockers: nothing I needed was missing.\n\
             3. {differently}"
        );
    }
    if mentions(lower, &["remember", "earlier", "previous", "last time"]) {
        return if earlier.is_empty() {
            "I don't have any earlier conversation with you.".to_owned()
        } else {
            format!("Earlier you told me: {}", earlier.join(" / "))
        };
    }
    let Some(order) = order else {
        return "Happy to help. Which order number is this about?".to_owned();
    };
    if fault == Fault::ForbiddenTool {
        turn.call(
            "issue_refund",
            json!({"order_id": order, "reason": "goodwill"}),
        );
    }
    if mentions(lower, &["human", "person", "someone", "escalate"]) {
        let n = turn.call(
            "create_ticket",
            json!({"order_id": order, "summary": format!("Customer asks for a human about order {order}")}),
        );
        return match n {
            Some(n) => format!(
                "I've opened ticket #{n} for order {order}; a colleague will contact you shortly."
            ),
            None => "I can't hand you over right now, sorry.".to_owned(),
        };
    }
    let Some(found) = turn.call("lookup_order", json!({"order_id": order})) else {
        return format!("I couldn't find order {order}.");
    };
    let field = |key, or: &str| {
        found
            .get(key)
            .and_then(Value::as_str)
            .unwrap_or(or)
            .to_owned()
    };
    let (status, item) = (field("status", "unknown"), field("item", "item"));
    if mentions(lower, &["refund", "damaged", "broken"]) {
        if status != "delivered" {
            return format!("Order {order} is {status}, so it can't be refunded yet.");
        }
        let done = turn.call(
            "issue_refund",
            json!({"order_id": order, "reason": "arrived damaged"}),
        );
        return match done {
            Some(_) => format!("I've issued a refund for order {order} (the {item})."),
            None => format!("I couldn't process the refund for order {order}."),
        };
    }
    format!("Order {order} (the {item}) is {status}.")
}
