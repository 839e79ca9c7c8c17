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
use windtunnel_abi::op;
use windtunnel_sdk::rules;

use super::{
    ConverseError,
    handoff::{Job, SessionRequest, Shared, lock},
};
use crate::hooks::registry::HostServices;

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
        rules::service_allowed(self.job.point, op)?;
        match op {
            op::WARN => {
                let text = rules::cut_warning(arg, self.job.caps.warning_bytes);
                lock(&self.warnings).push(format!("hook:{}: {text}", self.hook));
                Ok("null".into())
            }
            op::EMIT_ARTIFACT => self.emit_artifact(arg).inspect_err(|e| {
                lock(&self.warnings).push(format!("hook:{}: artifact refused: {e}", self.hook));
            }),
            op::CONVERSE => {
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
    /// Checks the artifact by the SDK's rules ([`rules::check_artifact`]) and claims its
    /// name in the call's scope.
    fn emit_artifact(&self, arg: &str) -> Result<String, String> {
        let a = rules::check_artifact(self.hook, arg, self.job.caps.artifact_bytes)?;
        if let Some(names) = &self.job.data.data.artifact_names
            && !lock(names).insert(a.name.clone())
        {
            return Err(rules::artifact_written_twice(&a.name));
        }
        lock(&self.artifacts).push((a.label, a.payload));
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
