//! The host side of a hook's context: members from the snapshot, and the services (`warn`,
//! `emit_artifact`, `converse`, `probe_state`) with their rules — which point allows what,
//! artifact names and sizes, warning lengths. Two ways to reach the run's session: a call
//! relayed on the lane's own thread uses it directly ([`CallServices`], through a
//! [`SessionRef`]); a call on a dispatch worker asks the dispatching thread
//! ([`WorkerServices`]).
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
    relay::SessionRef,
    snapshot::Snapshot,
};
use crate::{hooks::registry::HostServices, limits::HookCaps};

/// What one call sees and what it produced: its point, members, caps, and the warnings,
/// artifacts and converse flags it left.
pub(crate) struct Frame {
    pub(super) snapshot: Arc<Snapshot>,
    pub(super) point: u32,
    pub(super) caps: HookCaps,
    pub(super) hook: Arc<str>,
    pub(super) has_session: bool,
    /// The hook was built against SDK 1.0: members come in the shape it reads.
    pub(super) sdk_1_0: bool,
    pub(super) warnings: Mutex<Vec<String>>,
    pub(super) artifacts: Mutex<Vec<(Option<String>, Value)>>,
    pub(super) conversed: AtomicBool,
    pub(super) timed_out: AtomicBool,
}

impl Frame {
    pub(super) fn new(
        snapshot: Arc<Snapshot>,
        point: u32,
        caps: HookCaps,
        hook: Arc<str>,
        has_session: bool,
        sdk_1_0: bool,
    ) -> Frame {
        Frame {
            snapshot,
            point,
            caps,
            hook,
            has_session,
            sdk_1_0,
            warnings: Mutex::new(Vec::new()),
            artifacts: Mutex::new(Vec::new()),
            conversed: AtomicBool::new(false),
            timed_out: AtomicBool::new(false),
        }
    }

    /// Whether the call left nothing to record (no warning, artifact or converse).
    pub(super) fn is_quiet(&self) -> bool {
        lock(&self.warnings).is_empty()
            && lock(&self.artifacts).is_empty()
            && !self.conversed.load(Ordering::Acquire)
    }


    fn member(&self, name: &str) -> Option<String> {
        self.snapshot.member_for(name, self.sdk_1_0)
    }

    /// A service, with `session` doing what needs the run's live session.
    fn serve(
        &self,
        op: &str,
        arg: &str,
        session: impl FnOnce(SessionRequest) -> Result<String, ConverseError>,
    ) -> Result<String, String> {
        rules::service_allowed(self.point, op)?;
        match op {
            op::WARN => {
                let text = rules::cut_warning(arg, self.caps.warning_bytes);
                lock(&self.warnings).push(format!("hook:{}: {text}", self.hook));
                Ok("null".into())
            }
            op::EMIT_ARTIFACT => self.emit_artifact(arg).inspect_err(|e| {
                lock(&self.warnings).push(format!("hook:{}: artifact refused: {e}", self.hook));
            }),
            op::CONVERSE => {
                if !self.has_session {
                    return Err("the run's session is unusable; converse is unavailable".into());
                }
                self.conversed.store(true, Ordering::Release);
                match session(SessionRequest::Converse(self.hook.to_string(), arg.to_owned())) {
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
        let a = rules::check_artifact(&self.hook, arg, self.caps.artifact_bytes)?;
        if let Some(names) = &self.snapshot.data.artifact_names
            && !lock(names).insert(a.name.clone())
        {
            return Err(rules::artifact_written_twice(&a.name));
        }
        lock(&self.artifacts).push((a.label, a.payload));
        Ok("null".into())
    }
}

/// The host side of a call relayed on the lane's thread: owned, so that an abandoned call
/// holds nothing of the lane's but a [`SessionRef`] that stops working when it is abandoned.
pub(crate) struct CallServices {
    pub(super) frame: Frame,
    pub(super) session: Option<Arc<SessionRef>>,
    pub(super) converse_timeout: Duration,
}

impl HostServices for CallServices {
    fn member(&self, name: &str) -> Option<String> {
        self.frame.member(name)
    }

    fn call(&self, op: &str, arg: &str) -> Result<String, String> {
        self.frame.serve(op, arg, |request| {
            let Some(session) = &self.session else {
                return Err(ConverseError::Failed("no session".into()));
            };
            match request {
                SessionRequest::Converse(hook, text) => {
                    session.converse(&hook, &text, self.converse_timeout)
                }
                SessionRequest::ProbeState => session
                    .probe_state()
                    .map(|v| v.to_string())
                    .map_err(ConverseError::Failed),
            }
        })
    }
}

/// The host side of a hook's context on a dispatch worker: the session is the dispatching
/// thread's, asked over the hand-off.
pub(super) struct WorkerServices<'a> {
    pub(super) shared: &'a Arc<Shared>,
    pub(super) frame: Frame,
}

impl WorkerServices<'_> {
    pub(super) fn new<'a>(shared: &'a Arc<Shared>, job: &Job, hook: &Arc<str>, sdk_1_0: bool) -> WorkerServices<'a> {
        WorkerServices {
            shared,
            frame: Frame::new(
                job.data.clone(),
                job.point,
                job.caps,
                hook.clone(),
                job.has_session,
                sdk_1_0,
            ),
        }
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

impl HostServices for WorkerServices<'_> {
    fn member(&self, name: &str) -> Option<String> {
        self.frame.member(name)
    }

    fn call(&self, op: &str, arg: &str) -> Result<String, String> {
        self.frame.serve(op, arg, |request| self.ask(request))
    }
}
