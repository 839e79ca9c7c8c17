//! The host side of a hook's context: members from the snapshot, and the services (`warn`,
//! `emit_artifact`, `converse`, `probe_state`) with their rules — which point allows what,
//! artifact names and sizes, warning lengths. What needs the run's live session is asked of
//! whoever holds it (the dispatching thread, see [`super::handoff`]).
//!
//! Must not panic: a panic here would unwind into plugin code across the FFI boundary.

use std::sync::{Mutex, MutexGuard};

use serde_json::Value;
use windtunnel_abi::op;
use windtunnel_sdk::rules;

use super::{ConverseError, snapshot::Snapshot};
use crate::limits::HookCaps;

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A poisoned lock only means a panic elsewhere; the data is still usable here, and
    // panicking in code a plugin calls into would cross the FFI boundary.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What a service needs of the run's live session.
pub(super) enum SessionRequest {
    /// Hook name, text.
    Converse(String, String),
    ProbeState,
}

/// What one call left besides its return value; allocated only when it left something.
#[derive(Default)]
pub(super) struct Outputs {
    pub(super) warnings: Vec<String>,
    pub(super) artifacts: Vec<(Option<String>, Value)>,
    pub(super) conversed: bool,
    /// A converse of the call timed out.
    pub(super) timed_out: bool,
}

/// What one call sees: its point, members and caps; and what it left ([`Outputs`]).
pub(super) struct Frame<'a> {
    pub(super) snapshot: &'a Snapshot,
    pub(super) point: u32,
    pub(super) caps: HookCaps,
    pub(super) hook: &'a str,
    pub(super) has_session: bool,
    /// The hook was built against SDK 1.0: members come in the shape it reads.
    pub(super) sdk_1_0: bool,
    out: Mutex<Option<Box<Outputs>>>,
}

impl<'a> Frame<'a> {
    pub(super) fn new(
        snapshot: &'a Snapshot,
        point: u32,
        caps: HookCaps,
        hook: &'a str,
        has_session: bool,
        sdk_1_0: bool,
    ) -> Frame<'a> {
        Frame {
            snapshot,
            point,
            caps,
            hook,
            has_session,
            sdk_1_0,
            out: Mutex::new(None),
        }
    }

    /// What the call left (`None`: nothing — no warning, artifact or converse).
    pub(super) fn into_outputs(self) -> Option<Box<Outputs>> {
        self.out.into_inner().unwrap_or_else(|e| e.into_inner())
    }

    fn left(&self, f: impl FnOnce(&mut Outputs)) {
        f(lock(&self.out).get_or_insert_with(Box::default));
    }

    pub(super) fn member(&self, name: &str) -> Option<String> {
        self.snapshot.member_for(name, self.sdk_1_0)
    }

    /// A service, with `session` doing what needs the run's live session.
    pub(super) fn serve(
        &self,
        op: &str,
        arg: &str,
        session: impl FnOnce(SessionRequest) -> Result<String, ConverseError>,
    ) -> Result<String, String> {
        rules::service_allowed(self.point, op)?;
        match op {
            op::WARN => {
                let text = rules::cut_warning(arg, self.caps.warning_bytes);
                let line = format!("hook:{}: {text}", self.hook);
                self.left(|o| o.warnings.push(line));
                Ok("null".into())
            }
            op::EMIT_ARTIFACT => self.emit_artifact(arg).inspect_err(|e| {
                let line = format!("hook:{}: artifact refused: {e}", self.hook);
                self.left(|o| o.warnings.push(line));
            }),
            op::CONVERSE => {
                if !self.has_session {
                    return Err("the run's session is unusable; converse is unavailable".into());
                }
                self.left(|o| o.conversed = true);
                match session(SessionRequest::Converse(self.hook.to_owned(), arg.to_owned())) {
                    Ok(reply) => serde_json::to_string(&reply).map_err(|e| e.to_string()),
                    Err(e) => {
                        if matches!(e, ConverseError::TimedOut(_)) {
                            self.left(|o| o.timed_out = true);
                        }
                        Err(e.to_string())
                    }
                }
            }
            op::PROBE_STATE => {
                if !self.has_session {
                    return Err("the run's session is unusable; probe_state is unavailable".into());
                }
                session(SessionRequest::ProbeState).map_err(|e| match e {
                    ConverseError::Failed(e) => e,
                    other => other.to_string(),
                })
            }
            other => Err(format!("this wt offers no host service `{other}`")),
        }
    }

    /// Checks the artifact by the SDK's rules ([`rules::check_artifact`]) and claims its
    /// name in the call's scope.
    fn emit_artifact(&self, arg: &str) -> Result<String, String> {
        let a = rules::check_artifact(self.hook, arg, self.caps.artifact_bytes)?;
        if let Some(names) = &self.snapshot.data.artifact_names
            && !lock(names).insert(a.name.clone())
        {
            return Err(rules::artifact_written_twice(&a.name));
        }
        self.left(|o| o.artifacts.push((a.label, a.payload)));
        Ok("null".into())
    }
}
