//! Hook deadlines, from the environment.
//!
//! - `WT_HOOK_TIMEOUT_S` (default 60): every hook dispatch. A hook that overruns is abandoned
//!   and quarantined for the rest of the invocation.
//! - `WT_HOOK_CONVERSE_TIMEOUT_S` (default 30): each `ctx.converse()` call. A dispatch at
//!   `on_run_scored` is allowed at least this plus 5 s, so one converse that times out
//!   does not also cost the hook its dispatch.
//!
//! Every duration `wt` accepts, here and in agent configs, is at most [`MAX_DURATION_S`]
//! (24 h): a longer one is a usage error, not a deadline that never comes.

use std::time::Duration;

pub const HOOK_TIMEOUT_ENV: &str = "WT_HOOK_TIMEOUT_S";
pub const CONVERSE_TIMEOUT_ENV: &str = "WT_HOOK_CONVERSE_TIMEOUT_S";

/// The longest duration `wt` accepts anywhere, in seconds (24 h).
pub const MAX_DURATION_S: f64 = 86_400.0;

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
            dispatch: seconds_from_env(HOOK_TIMEOUT_ENV, 60.0, false)?,
            converse: seconds_from_env(CONVERSE_TIMEOUT_ENV, 30.0, false)?,
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

/// A number of seconds from `var` (`default` when unset): positive (or 0 with
/// `allow_zero`) and at most [`MAX_DURATION_S`]. Anything else is an error naming `var`.
pub fn seconds_from_env(var: &str, default: f64, allow_zero: bool) -> Result<Duration, String> {
    match std::env::var(var) {
        Err(_) => Ok(Duration::from_secs_f64(default)),
        Ok(text) => parse_seconds(&text, allow_zero).map_err(|why| format!("{var}={text:?} {why}")),
    }
}

/// Parses a positive number of seconds (or 0 with `allow_zero`), at most [`MAX_DURATION_S`].
pub fn parse_seconds(text: &str, allow_zero: bool) -> Result<Duration, String> {
    let s: f64 = text
        .trim()
        .parse()
        .map_err(|_| "is not a number of seconds".to_owned())?;
    check_seconds(s, allow_zero).map(Duration::from_secs_f64)
}

/// Checks a number of seconds: finite, positive (or 0 with `allow_zero`), at most 24 h.
pub fn check_seconds(s: f64, allow_zero: bool) -> Result<f64, String> {
    let low_ok = if allow_zero { s >= 0.0 } else { s > 0.0 };
    if s.is_finite() && low_ok && s <= MAX_DURATION_S {
        return Ok(s);
    }
    let low = if allow_zero {
        "at least 0"
    } else {
        "more than 0"
    };
    Err(format!(
        "is out of range: a duration must be {low} and at most {MAX_DURATION_S} seconds (24 h)"
    ))
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
