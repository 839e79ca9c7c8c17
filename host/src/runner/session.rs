//! The run's live session as hooks reach it: `converse` turns (journaled with the hook as
//! their cause, never added to the trace) and the runtime's state probe.
//!
//! A converse turn is a real turn into the agent: guards are consulted first (all but the
//! conversing hook itself), it is bounded by the converse deadline, and it is journaled.
//! Turn observers do not observe it: their contract is the scenario's turns.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use windtunnel_model::TurnErrorKind;
use windtunnel_sdk::turn::{Cause as TurnCause, Outcome};

use super::scenario::{Handle, ScenarioRunner};
use super::turn::{denial_text, publish_denial, publish_terminal, send, turn_call};
use crate::events::{self, Scope};
use crate::hooks::RunObserver;
use crate::hooks::dispatch::{ConverseError, Session};
use crate::world::World;

pub(super) struct SessionConverse<'s, 'a> {
    pub sc: &'s ScenarioRunner<'a>,
    /// The lane's observer: guards are consulted through it.
    pub observer: &'s dyn RunObserver,
    /// The run's scope: its run and session ids are the session's.
    pub scope: &'s Scope,
    pub handle: Handle,
    pub world: Arc<Mutex<World>>,
    /// Turn index for the next converse turn (after the scenario's turns).
    pub next_turn: AtomicUsize,
    pub unusable: Option<String>,
    /// The run's trace once it is observed: its world's final state was moved into it, and
    /// a converse turn puts a copy back into the world before it starts.
    pub observed: Option<Arc<windtunnel_model::Trace>>,
}

impl SessionConverse<'_, '_> {
    fn run_id(&self) -> &str {
        self.scope.run_id.as_deref().unwrap_or_default()
    }

    fn session_id(&self) -> &str {
        self.scope.session_id.as_deref().unwrap_or_default()
    }
}

impl Session for SessionConverse<'_, '_> {
    fn converse(&self, hook: &str, text: &str, timeout: Duration) -> Result<String, ConverseError> {
        if let Some(why) = &self.unusable {
            return Err(ConverseError::Failed(format!("session unusable: {why}")));
        }
        let cfg = self.sc.cfg;
        let index = self.next_turn.fetch_add(1, Ordering::Relaxed) as u32;
        let scope = Scope {
            turn: Some(index),
            ..self.scope.clone()
        };
        let cause = events::Cause::Converse {
            hook: hook.to_owned(),
        };
        if self.observer.wants_turns() {
            let call = Arc::new(turn_call(
                self.sc,
                self.run_id(),
                self.session_id(),
                index,
                text,
                TurnCause::Converse {
                    hook: hook.to_owned(),
                },
            ));
            let open = self.observer.begin_turn(&call);
            for w in &open.warnings {
                self.sc.warn(w);
            }
            if let Some(denial) = &open.denial {
                publish_denial(self.sc, &scope, &cause, denial);
                return Err(ConverseError::Failed(denial_text(denial)));
            }
        }
        if let Some(seen) = self.observed.as_ref().and_then(|t| t.world.as_ref())
            && let Some(mut w) = super::try_lock(&self.world)
        {
            w.restore(|| seen.after.clone());
        }
        self.sc.emit(
            &scope,
            &cause,
            events::Event::TurnStarted {
                input: text.to_owned(),
            },
        );
        let watch = cfg.clock.stopwatch();
        let reply = send(
            cfg,
            &self.handle,
            &self.world,
            self.session_id(),
            text,
            index,
            timeout,
        );
        let outcome = publish_terminal(self.sc, &scope, &cause, &reply, watch.elapsed_ms());
        match (reply.error, reply.text) {
            // Whatever arrives after the deadline is dropped with the reply; nothing of it
            // is recorded.
            (Some(e), _) if outcome == Outcome::Interrupted && e.kind == TurnErrorKind::Timeout => {
                Err(ConverseError::TimedOut(timeout))
            }
            (Some(e), _) => Err(ConverseError::Failed(e.message)),
            (None, Some(t)) => Ok(t),
            (None, None) => Err(ConverseError::Failed("no reply".to_owned())),
        }
    }

    fn probe_state(&self) -> Result<Value, String> {
        // A turn cut when wt stopped may still hold the handle on its own thread.
        let Some(mut handle) = super::try_lock(&self.handle) else {
            return Err("the agent is busy with a turn cut when wt stopped".into());
        };
        handle.probe_state().ok_or_else(|| {
            format!(
                "runtime `{}` offers no state probe",
                self.sc.cfg.agent.runtime()
            )
        })
    }
}
