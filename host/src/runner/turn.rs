//! One turn: guards check and turn observers begin (before `TurnStarted`), the turn is sent,
//! its steps and retries are journaled, the terminal event is written, and observers finish
//! in reverse order — every begin gets exactly one finish, also when a guard denied the turn.
//!
//! The turn's outcome comes from the runtime's typed error: a timeout or a cut is
//! *interrupted* (`TurnInterrupted`), any other error *failed* (`TurnFailed`).

use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use windtunnel_model::{
    Denial, SimulatedUser, Trace, TurnErrorKind, TurnRecord, UserEnded, UserRecord,
};
use windtunnel_sdk::turn::{Cause as TurnCause, Outcome, TurnCall, TurnResult};

use super::scenario::{Handle, ScenarioRunner};
use super::{RunConfig, lock};
use crate::events::{self, Scope};
use crate::hooks::{RunObserver, TurnOpen};
use crate::interrupt::Interrupt;
use crate::limits::{MAX_STORED_TEXT_BYTES, cut_text, cut_value};
use crate::runtime::{self, Reply, TurnCtx};
use crate::world::World;

pub(super) struct TurnRunner<'r, 'a> {
    pub sc: &'r ScenarioRunner<'a>,
    /// The lane's observer (its own hook instances).
    pub observer: &'r dyn RunObserver,
    /// The lane's turn snapshots, refilled for each turn (see [`Spare`]).
    pub spare: &'r Mutex<Spare>,
    pub handle: &'r Handle,
    pub world: &'r Arc<Mutex<World>>,
    pub scope: &'r Scope,
}

impl TurnRunner<'_, '_> {
    /// Injects the scenario's turns into the run's session, recording them in `trace`: the
    /// scripted ones, then the simulated user's, when the scenario has one.
    pub(super) fn inject(&self, trace: &mut Trace) {
        for (i, text) in self.sc.scenario.turns.iter().enumerate() {
            if !self.turn(trace, i as u32, text) {
                if let Some(user) = &self.sc.scenario.user {
                    trace.user = Some(user_record(user, UserEnded::RunEnded));
                }
                return;
            }
        }
        if let Some(user) = &self.sc.scenario.user {
            self.simulate(trace, user);
        }
    }

    /// The simulated user's side: the user model writes each next user message from its
    /// instruction and the conversation so far (roles swapped), which is injected as a turn
    /// like a scripted one, until it says its stop word, `max_turns` messages were written,
    /// or the run ends. A failed user-model call makes the run ERROR (the harness failed,
    /// not the agent).
    fn simulate(&self, trace: &mut Trace, user: &SimulatedUser) {
        let cfg = self.sc.cfg;
        let mut record = user_record(user, UserEnded::MaxTurns);
        let Some(model) = cfg.models.get(&user.model) else {
            trace.error = Some(format!(
                "harness: the simulated user's model `{}` is not declared",
                user.model
            ));
            record.ended_by = UserEnded::Error;
            trace.user = Some(record);
            return;
        };
        let system = user_prompt(user);
        while record.turns < user.max_turns {
            if cfg.stop.is_cut() {
                record.ended_by = UserEnded::RunEnded;
                trace
                    .error
                    .get_or_insert_with(|| "interrupted: the sweep was cut".into());
                break;
            }
            let index = trace.turns.len() as u32;
            let seed = cfg.ids.number("user", &[&trace.run_id, &index.to_string()]);
            let said = model.chat(
                "user",
                &system,
                &user_view(trace),
                false,
                seed,
                &cfg.stop,
                &cfg.redactor,
            );
            let mut call = said.call;
            call.turn = Some(index);
            call.after_tool_calls = 0;
            if cfg.clock.is_fixed() {
                pin_model_call(&mut call);
            }
            self.sc.publish(
                &Scope {
                    turn: Some(index),
                    ..self.scope.clone()
                },
                model_event(&call),
            );
            trace.evidence.model_calls.push(call);
            let text = match said.text {
                Ok(t) => t,
                Err(e) => {
                    // A cut ends the call without its model failing: the conversation ended
                    // with the run, as after a cut between turns.
                    let cut = cfg.stop.is_cut() || e.kind == TurnErrorKind::Interrupted;
                    record.ended_by = if cut {
                        UserEnded::RunEnded
                    } else {
                        UserEnded::Error
                    };
                    trace.error = Some(if cut {
                        "interrupted: the sweep was cut while the simulated user was writing".into()
                    } else {
                        format!(
                            "harness: the simulated user's model `{}` failed: {}",
                            user.model, e.message
                        )
                    });
                    break;
                }
            };
            let (text, stopped) = match text.find(&user.stop) {
                Some(at) => (text[..at].trim().to_owned(), true),
                None => (text.trim().to_owned(), false),
            };
            if stopped {
                // What it said before its stop word ends the conversation with it: the
                // agent's answer to it could not change the user's mind.
                record.ended_by = UserEnded::Stop;
                record.user_gave_up = true;
                break;
            }
            if text.is_empty() {
                record.ended_by = UserEnded::Error;
                trace.error = Some(format!(
                    "harness: the simulated user's model `{}` wrote an empty message",
                    user.model
                ));
                break;
            }
            record.turns += 1;
            if !self.turn(trace, index, &text) {
                record.ended_by = UserEnded::RunEnded;
                break;
            }
        }
        trace.user = Some(record);
    }

    /// One turn: guards and turn observers, the send, the terminal event, the record.
    /// Returns whether the conversation may go on (the turn was neither denied nor failed).
    fn turn(&self, trace: &mut Trace, index: u32, text: &str) -> bool {
        let sc = self.sc;
        let cfg = sc.cfg;
        let timeout = runtime::turn_timeout(&cfg.agent);
        let turn_hooks = self.observer.wants_turns();
        let scope = Scope {
            turn: Some(index),
            ..self.scope.clone()
        };
        let call = turn_hooks.then(|| {
            let mut call = lock(self.spare).call.take().unwrap_or_default();
            fill_turn_call(
                Arc::make_mut(&mut call),
                sc,
                &trace.run_id,
                &trace.session_id,
                index,
                text,
                TurnCause::Scenario,
            );
            call
        });
        let mut open = match &call {
            Some(call) => self.observer.begin_turn(call),
            None => TurnOpen::default(),
        };
        for w in std::mem::take(&mut open.warnings) {
            sc.warn(&w);
            trace.worker_warnings.push(w);
        }
        if let Some(denial) = open.denial.clone() {
            publish_denial(sc, &scope, &events::Cause::Scenario, &denial);
            trace.error = Some(denial_text(&denial));
            trace.denial = Some(denial.clone());
            let finished = finish(
                cfg,
                self.observer,
                open,
                call,
                Outcome::Denied,
                None,
                Some(denial),
                self.spare,
            );
            self.warnings(trace, finished);
            return false;
        }
        sc.emit(
            &scope,
            &events::Cause::Scenario,
            events::Event::TurnStarted {
                input: text.to_owned(),
            },
        );
        let watch = cfg.clock.stopwatch();
        let reply = send(
            cfg,
            self.handle,
            self.world,
            &trace.session_id,
            text,
            index,
            timeout,
        );
        let latency_ms = watch.elapsed_ms();
        let outcome = publish_terminal(sc, &scope, &events::Cause::Scenario, &reply, latency_ms);
        let failed = reply.error.is_some();
        let finished = finish(
            cfg,
            self.observer,
            open,
            call,
            outcome,
            reply.error.clone(),
            None,
            self.spare,
        );
        let (error, error_kind) = match reply.error {
            Some(e) => (Some(e.message), Some(e.kind)),
            None => (None, None),
        };
        let mut record = TurnRecord::default();
        record.index = index;
        record.input = text.to_owned();
        record.reply = reply.text;
        record.latency_ms = latency_ms;
        record.error = error;
        record.error_kind = error_kind;
        record.retries = reply.retries;
        trace.turns.push(record);
        trace.evidence.tool_calls.extend(reply.tool_calls);
        trace.evidence.model_calls.extend(reply.model_calls);
        self.warnings(trace, finished);
        // The session cannot be trusted after a failed turn; stop injecting.
        !failed
    }

    fn warnings(&self, trace: &mut Trace, warnings: Vec<String>) {
        for w in warnings {
            self.sc.warn(&w);
            trace.worker_warnings.push(w);
        }
    }
}

/// A simulated user's record before it has written anything.
fn user_record(user: &SimulatedUser, ended_by: UserEnded) -> UserRecord {
    let mut r = UserRecord::default();
    r.model = user.model.clone();
    r.ended_by = ended_by;
    r
}

/// What the user model is told: who it is and what it wants (the scenario's instruction),
/// and how to end. Quoted in docs/judging.md.
pub(super) fn user_prompt(user: &SimulatedUser) -> String {
    format!(
        "You are playing a user who is talking with a customer-facing AI assistant, to test it. \
Stay in character and follow the instruction below; never say that you are an AI or that this is a test.\n\
\n\
Instruction:\n{}\n\
\n\
Write only the user's next message, in plain words, one message at a time. Do not invent \
details the instruction does not give you; if the assistant asks for something you were not \
given, say that you do not know it. When your goal is met, or you see it cannot be met, \
end the conversation by writing {} alone.",
        user.instruction.trim(),
        user.stop
    )
}

/// What the user model opens with when no scripted turn came first (it needs a message to
/// answer): the conversation has not started.
pub(super) const USER_OPENING: &str =
    "(The conversation starts. Write your first message to the assistant.)";

/// The conversation so far with the roles swapped, as the user model sees it: the agent's
/// replies are the `user` messages it answers, its own earlier messages are `assistant`.
/// Never the agent's tools, the world or hook output.
fn user_view(trace: &Trace) -> Vec<serde_json::Value> {
    let mut messages = vec![serde_json::json!({"role": "user", "content": USER_OPENING})];
    for t in &trace.turns {
        messages.push(serde_json::json!({"role": "assistant", "content": t.input}));
        messages.push(serde_json::json!({
            "role": "user",
            "content": t.reply.as_deref().unwrap_or("(no reply)"),
        }));
    }
    messages
}

/// The one-line form of a denial, as the run's error.
pub(super) fn denial_text(d: &Denial) -> String {
    format!(
        "turn {} denied by guard `{}` ({}): {}: {}",
        d.turn, d.guard, d.kind, d.code, d.message
    )
}

/// Journals a denial: which guard, its code and kind, and the policy revision in force.
pub(super) fn publish_denial(
    sc: &ScenarioRunner<'_>,
    scope: &Scope,
    cause: &events::Cause,
    d: &Denial,
) {
    sc.emit(
        scope,
        cause,
        events::Event::TurnDenied {
            guard: d.guard.clone(),
            code: d.code.clone(),
            kind: d.kind.clone(),
            message: d.message.clone(),
            policy_revision: sc.cfg.policy_revision.clone(),
        },
    );
}

/// A lane's turn snapshots between turns: the begin's call and the finish's result, each
/// in the `Arc` hooks were handed, its strings' buffers kept. A turn refills them in place,
/// so once a lane's first turn is built its turns allocate nothing for their snapshots. A
/// snapshot a hook abandoned past its deadline may still hold is not kept: the next turn
/// builds anew.
#[derive(Default)]
pub(super) struct Spare {
    call: Option<Arc<TurnCall>>,
    result: Option<Arc<TurnResult>>,
}

/// Finishes the observers that began, in reverse order (after the terminal event is
/// durable); the turn's snapshots go back to `spare` for the next turn.
#[expect(
    clippy::too_many_arguments,
    reason = "one turn's ending, as the loop has it"
)]
fn finish(
    cfg: &RunConfig,
    observer: &dyn RunObserver,
    open: TurnOpen,
    call: Option<Arc<TurnCall>>,
    outcome: Outcome,
    error: Option<runtime::TurnError>,
    denial: Option<Denial>,
    spare: &Mutex<Spare>,
) -> Vec<String> {
    let Some(mut call) = call else {
        return Vec::new();
    };
    let mut result = lock(spare)
        .result
        .take()
        .unwrap_or_else(|| Arc::new(TurnResult::new(TurnCall::default(), outcome)));
    {
        let r = Arc::make_mut(&mut result);
        // The begin's snapshots are gone by now: the call moves into the result uncopied,
        // and the result's last call (its buffers) into the call's place.
        match Arc::get_mut(&mut call) {
            Some(c) => std::mem::swap(c, &mut r.call),
            None => r.call.clone_from(&call),
        }
        r.outcome = outcome;
        r.ended_at.clear();
        cfg.clock.push_rfc3339(&mut r.ended_at);
        r.error_kind = error.as_ref().map(|e| e.kind);
        r.error = error.map(|e| e.message);
        r.denial = denial;
    }
    let warnings = observer.finish_turn(open, &result);
    // The call goes back to its own place with its buffers for the next turn to refill.
    if let (Some(r), Some(c)) = (Arc::get_mut(&mut result), Arc::get_mut(&mut call)) {
        std::mem::swap(c, &mut r.call);
        let mut kept = lock(spare);
        kept.call = Some(call);
        kept.result = Some(result);
    }
    warnings
}

/// What turn hooks and guards are told of a turn about to start.
pub(super) fn turn_call(
    sc: &ScenarioRunner<'_>,
    run_id: &str,
    session_id: &str,
    index: u32,
    input: &str,
    cause: TurnCause,
) -> TurnCall {
    let mut call = TurnCall::default();
    fill_turn_call(&mut call, sc, run_id, session_id, index, input, cause);
    call
}

/// [`turn_call`] into `call`, reusing its strings' buffers (a lane's turns allocate nothing
/// for the snapshot once the first is built).
fn fill_turn_call(
    call: &mut TurnCall,
    sc: &ScenarioRunner<'_>,
    run_id: &str,
    session_id: &str,
    index: u32,
    input: &str,
    cause: TurnCause,
) {
    fn set(s: &mut String, v: &str) {
        s.clear();
        s.push_str(v);
    }
    set(&mut call.sweep_id, &sc.sweep.id);
    set(&mut call.scenario_id, &sc.scenario.id);
    set(&mut call.run_id, run_id);
    set(&mut call.session_id, session_id);
    set(&mut call.agent, &sc.cfg.agent.label);
    call.turn = index;
    set(&mut call.input, input);
    call.started_at.clear();
    sc.cfg.clock.push_rfc3339(&mut call.started_at);
    call.cause = cause;
}

/// The outcome a reply stands for.
pub(super) fn outcome(reply: &Reply) -> Outcome {
    match &reply.error {
        None => Outcome::Done,
        Some(e) if matches!(e.kind, TurnErrorKind::Timeout | TurnErrorKind::Interrupted) => {
            Outcome::Interrupted
        }
        Some(_) => Outcome::Failed,
    }
}

/// Journals a sent turn: its steps, its retries, then its terminal event (durable before
/// any finish runs). Returns the turn's outcome.
pub(super) fn publish_terminal(
    sc: &ScenarioRunner<'_>,
    scope: &Scope,
    cause: &events::Cause,
    reply: &Reply,
    latency_ms: u64,
) -> Outcome {
    for w in &reply.waits {
        sc.emit(
            scope,
            cause,
            events::Event::RequestWaited {
                reason: w.reason.to_owned(),
                wait_ms: w.wait_ms,
            },
        );
    }
    for r in &reply.retries {
        sc.emit(
            scope,
            cause,
            events::Event::RequestRetried {
                attempt: r.attempt,
                error: r.error.clone(),
                wait_ms: r.wait_ms,
            },
        );
    }
    for call in &reply.tool_calls {
        sc.emit(
            &Scope {
                step: Some(call.step),
                ..scope.clone()
            },
            cause,
            events::Event::StepDone {
                tool: call.name.clone(),
                error: call.error.clone(),
                server: call.server.clone(),
            },
        );
    }
    for call in &reply.model_calls {
        sc.emit(scope, cause, model_event(call));
    }
    let outcome = outcome(reply);
    let event = match &reply.error {
        Some(e) if outcome == Outcome::Interrupted => events::Event::TurnInterrupted {
            reason: e.message.clone(),
            error_kind: e.kind,
        },
        Some(e) => events::Event::TurnFailed {
            error: e.message.clone(),
            error_kind: e.kind,
        },
        None => events::Event::TurnDone { latency_ms },
    };
    sc.emit(scope, cause, event);
    outcome
}

/// Sends one turn and bounds what came back ([`crate::limits`]). A runtime that panics
/// gives a turn error instead of ending the sweep. A cooperative runtime is called in
/// place; any other on a thread of its own, which the runner stops waiting for when the
/// sweep is cut (the thread is left to finish or die with the process).
pub(super) fn send(
    cfg: &RunConfig,
    handle: &Handle,
    world: &Arc<Mutex<World>>,
    session_id: &str,
    text: &str,
    index: u32,
    timeout: Duration,
) -> Reply {
    if cfg.stop.is_cut() {
        // A turn cut earlier may still hold the handle; nothing new is sent once cut.
        return cut();
    }
    let send = Outgoing {
        handle: handle.clone(),
        world: world.clone(),
        session_id: session_id.to_owned(),
        text: text.to_owned(),
        index,
        timeout,
        stop: cfg.stop.clone(),
    };
    let mut reply = if lock(handle).cooperative() {
        send.in_place()
    } else {
        send.on_thread()
    };
    bound(&mut reply);
    if cfg.clock.is_fixed() {
        pin_durations(&mut reply);
    }
    reply
}

/// Under a pinned clock every duration `wt` records is 0 ms, as latencies are: how long a
/// request waited for the endpoint's limits, and the (jittered) delay before a retry, are
/// facts of the machine's timing, not of the agent, and would make two pinned sweeps differ.
fn pin_durations(reply: &mut Reply) {
    for w in &mut reply.waits {
        w.wait_ms = 0;
    }
    for r in &mut reply.retries {
        r.wait_ms = 0;
    }
    for c in &mut reply.model_calls {
        pin_model_call(c);
    }
}

/// A model call's durations, pinned to 0 ms (see [`pin_durations`]).
pub(super) use crate::clock::pin_model_call;

/// One turn to send, owned, so that it can go to a thread of its own.
struct Outgoing {
    handle: Handle,
    world: Arc<Mutex<World>>,
    session_id: String,
    text: String,
    index: u32,
    timeout: Duration,
    stop: Arc<Interrupt>,
}

impl Outgoing {
    fn in_place(&self) -> Reply {
        let sent = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut w = lock(&self.world);
            lock(&self.handle).send(
                &self.session_id,
                &self.text,
                TurnCtx {
                    index: self.index,
                    world: &mut w,
                    timeout: self.timeout,
                    stop: &self.stop,
                },
            )
        }));
        sent.unwrap_or_else(|panic| {
            Reply::failed(
                TurnErrorKind::Agent,
                format!("the agent runtime panicked: {}", panic_message(&*panic)),
                Vec::new(),
            )
        })
    }

    fn on_thread(self) -> Reply {
        let (tx, rx) = mpsc::sync_channel(1);
        let stop = self.stop.clone();
        let spawned = std::thread::Builder::new()
            .name("wt-turn".into())
            .spawn(move || {
                let _ = tx.send(self.in_place());
            });
        if let Err(e) = spawned {
            return Reply::failed(
                TurnErrorKind::Agent,
                format!("cannot start a thread for the turn: {e}"),
                Vec::new(),
            );
        }
        loop {
            match rx.recv_timeout(Duration::from_millis(25)) {
                Ok(reply) => return reply,
                Err(mpsc::RecvTimeoutError::Timeout) if stop.is_cut() => return cut(),
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Reply::failed(
                        TurnErrorKind::Agent,
                        "the agent runtime ended the turn without a reply",
                        Vec::new(),
                    );
                }
            }
        }
    }
}

/// The reply of a turn cut when `wt` stopped.
fn cut() -> Reply {
    Reply::failed(
        TurnErrorKind::Interrupted,
        "interrupted: wt was stopped and the grace period ran out",
        Vec::new(),
    )
}

/// The journal's line for a model call.
pub(super) fn model_event(call: &windtunnel_model::ModelCall) -> events::Event {
    events::Event::ModelCalled {
        model: call.served_model.clone().or_else(|| call.model.clone()),
        finish_reason: call.finish_reason.clone(),
        prompt_tokens: call.usage.map(|u| u.prompt_tokens),
        completion_tokens: call.usage.map(|u| u.completion_tokens),
        latency_ms: call.latency_ms,
        error: call.error.clone(),
    }
}

/// Cuts what a runtime returned to the sizes `wt` stores.
fn bound(reply: &mut Reply) {
    let max = MAX_STORED_TEXT_BYTES;
    if let Some(t) = &mut reply.text {
        cut_text(t, max);
    }
    if let Some(e) = &mut reply.error {
        cut_text(&mut e.message, max);
    }
    for r in &mut reply.retries {
        cut_text(&mut r.error, max);
    }
    for call in &mut reply.tool_calls {
        cut_value(&mut call.arguments, max);
        cut_value(&mut call.result, max);
        if let Some(e) = &mut call.error {
            cut_text(e, max);
        }
    }
    for call in &mut reply.model_calls {
        crate::limits::bound_model_call(call);
    }
}

pub(super) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_owned())
}
