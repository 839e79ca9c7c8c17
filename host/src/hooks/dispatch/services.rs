//! The host side of a hook's context, on the worker thread: members from the snapshot, and
//! the services (`warn`, `emit_artifact`, `converse`, `probe_state`) with their rules —
//! which point allows what, artifact names and sizes, warning lengths.
//!
//! Must not panic: a panic here would unwind into plugin code across the FFI boundary.

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use serde_json::Value;
use windtunnel_abi::{op, point};
use windtunnel_sdk::model::is_slug;

use super::{
    ConverseError,
    handoff::{Job, SessionRequest, Shared, lock},
};
use crate::{hooks::registry::HostServices, limits::cut_text};

/// The host side of a hook's context, on the worker thread.
pub(super) struct WorkerServices<'a> {
    pub(super) shared: &'a Arc<Shared>,
    pub(super) job: &'a Job,
    pub(super) hook: &'a str,
    pub(super) warnings: Mutex<Vec<String>>,
    pub(super) artifacts: Mutex<Vec<(Option<String>, Value)>>,
    pub(super) conversed: AtomicBool,
    pub(super) timed_out: AtomicBool,
    /// The hook was built against SDK 1.0: members come in the shape it reads.
    pub(super) sdk_1_0: bool,
}

impl HostServices for WorkerServices<'_> {
    fn member(&self, name: &str) -> Option<String> {
        self.job.data.member_for(name, self.sdk_1_0)
    }

    fn call(&self, op: &str, arg: &str) -> Result<String, String> {
        match op {
            op::WARN => {
                let mut text = arg.to_owned();
                cut_text(&mut text, self.job.caps.warning_bytes);
                lock(&self.warnings).push(format!("hook:{}: {text}", self.hook));
                Ok("null".into())
            }
            op::EMIT_ARTIFACT
                if matches!(
                    self.job.point,
                    point::TURN_BEGIN | point::TURN_FINISH | point::GUARD_CHECK
                ) =>
            {
                Err(format!(
                    "artifacts are written at run, scenario and pack points, not at {}; keep what the turn saw and emit it at on_run_end",
                    point::name(self.job.point)
                ))
            }
            op::EMIT_ARTIFACT => self.emit_artifact(arg).inspect_err(|e| {
                lock(&self.warnings).push(format!("hook:{}: artifact refused: {e}", self.hook));
            }),
            op::CONVERSE => {
                if self.job.point != point::ON_RUN_SCORED {
                    return Err(format!(
                        "converse is valid only during on_run_scored, not {}",
                        point::name(self.job.point)
                    ));
                }
                if !self.job.has_session {
                    return Err("the run's session is unusable; converse is unavailable".into());
                }
                self.conversed.store(true, Ordering::Release);
                match self.ask(SessionRequest::Converse(
                    self.hook.to_owned(),
                    arg.to_owned(),
                )) {
                    Ok(reply) => serde_json::to_string(&reply).map_err(|e| e.to_string()),
                    Err(e) => {
                        if matches!(e, ConverseError::TimedOut(_)) {
                            self.timed_out.store(true, Ordering::Release);
                        }
                        Err(e.to_string())
                    }
                }
            }
            op::PROBE_STATE => {
                if !matches!(
                    self.job.point,
                    point::ON_RUN_START | point::ON_RUN_SCORED | point::ON_RUN_END
                ) {
                    return Err(format!(
                        "probe_state is valid only at run points, not {}",
                        point::name(self.job.point)
                    ));
                }
                if !self.job.has_session {
                    return Err("the run's session is unusable; probe_state is unavailable".into());
                }
                self.ask(SessionRequest::ProbeState).map_err(|e| match e {
                    ConverseError::Failed(e) => e,
                    other => other.to_string(),
                })
            }
            other => Err(format!("this wt offers no host service `{other}`")),
        }
    }
}

impl WorkerServices<'_> {
    fn emit_artifact(&self, arg: &str) -> Result<String, String> {
        let max = self.job.caps.artifact_bytes;
        if arg.len() > max {
            return Err(format!(
                "{} bytes is more than the {max} bytes an artifact may have ({})",
                arg.len(),
                crate::limits::MAX_ARTIFACT_ENV
            ));
        }
        let v: Value =
            serde_json::from_str(arg).map_err(|e| format!("artifact is not JSON: {e}"))?;
        let label = match v.get("label") {
            None | Some(Value::Null) => None,
            Some(Value::String(l)) if is_slug(l) => Some(l.clone()),
            Some(other) => {
                return Err(format!(
                    "artifact label {other} is not a slug ([a-z0-9_-]+, at most 64 characters)"
                ));
            }
        };
        crate::store::check_artifact_names(self.hook, label.as_deref())
            .map_err(|e| e.to_string())?;
        let name = match &label {
            Some(l) => format!("{}.{l}", self.hook),
            None => self.hook.to_owned(),
        };
        if let Some(names) = &self.job.data.data.artifact_names
            && !lock(names).insert(name.clone())
        {
            return Err(format!(
                "an artifact named `{name}` was already written here; give each artifact its own label"
            ));
        }
        let payload = v.get("payload").cloned().unwrap_or(Value::Null);
        lock(&self.artifacts).push((label, payload));
        Ok("null".into())
    }

    /// Posts a session request to the dispatching thread and waits for its reply.
    fn ask(&self, request: SessionRequest) -> Result<String, ConverseError> {
        *lock(&self.shared.reply) = None;
        *lock(&self.shared.request) = Some(request);
        self.shared.wake_runner();
        loop {
            if let Some(reply) = lock(&self.shared.reply).take() {
                return reply;
            }
            if self.shared.abandoned.load(Ordering::Acquire) {
                return Err(ConverseError::Failed("the hook call was abandoned".into()));
            }
            std::thread::park_timeout(Duration::from_millis(5));
        }
    }
}
