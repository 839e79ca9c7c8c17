//! Hook deadlines, from the environment.
//!
//! - `WT_HOOK_TIMEOUT_S` (default 60): every hook dispatch. A hook that overruns is abandoned
//!   and quarantined for the rest of the invocation.
//! - `WT_HOOK_CONVERSE_TIMEOUT_S` (default 30): each `ctx.converse()` call. A dispatch at
//!   `on_run_scored` is allowed at least this plus 5 s, so one converse that times out
//!   does not also cost the hook its dispatch.

use std::time::Duration;

pub const HOOK_TIMEOUT_ENV: &str = "WT_HOOK_TIMEOUT_S";
pub const CONVERSE_TIMEOUT_ENV: &str = "WT_HOOK_CONVERSE_TIMEOUT_S";

/// The deadlines in force for one invocation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Deadlines {
    pub dispatch: Duration,
    pub converse: Duration,
}

impl Deadlines {
    /// Reads both variables; a value that is not a positive number is a usage error.
    pub fn from_env() -> Result<Deadlines, String> {
        Ok(Deadlines {
            dispatch: seconds(HOOK_TIMEOUT_ENV, 60.0)?,
            converse: seconds(CONVERSE_TIMEOUT_ENV, 30.0)?,
        })
    }

    /// The deadline of one dispatch at `point`.
    pub fn for_point(&self, point: u32) -> Duration {
        if point == windtunnel_abi::point::ON_RUN_SCORED {
            self.dispatch.max(self.converse + Duration::from_secs(5))
        } else {
            self.dispatch
        }
    }
}

fn seconds(var: &str, default: f64) -> Result<Duration, String> {
    match std::env::var(var) {
        Err(_) => Ok(Duration::from_secs_f64(default)),
        Ok(text) => match text.trim().parse::<f64>() {
            Ok(s) if s > 0.0 && s.is_finite() => Ok(Duration::from_secs_f64(s)),
            _ => Err(format!(
                "{var}={text:?} is not a positive number of seconds"
            )),
        },
    }
}

/// `1.5s`, `60s`, `250ms`.
pub fn human(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{}ms", d.as_millis())
    } else if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{:.1}s", d.as_secs_f64())
    }
}
