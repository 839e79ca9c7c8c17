//! What `wt` lets a hook do, point by point: one table, read by `wt`'s dispatcher and by the
//! [`testing`](crate::testing) kit alike, so a hook that passes its unit tests behaves the
//! same in a sweep — the same calls refused, with the same messages.
//!
//! | service | allowed at |
//! | --- | --- |
//! | [`warn`](crate::Context::warn) | every point |
//! | [`emit_artifact`](crate::Context::emit_artifact) | run, scenario and pack points (not turn points or guards) |
//! | [`converse`](crate::Context::converse) | `on_run_scored` |
//! | [`probe_state`](crate::Context::probe_state) | `on_run_start`, `on_run_scored`, `on_run_end` |
//!
//! An artifact is a JSON document of at most [`DEFAULT_MAX_ARTIFACT_BYTES`] (a sweep may set
//! another cap with [`MAX_ARTIFACT_ENV`]), with an optional label that is a slug and not
//! one of [`RESERVED_LABELS`]; one name (`<hook>` or `<hook>.<label>`) is written once per
//! scope (a run, a scenario, the pack). A warning is cut at [`DEFAULT_MAX_WARNING_BYTES`]
//! ([`MAX_WARNING_ENV`]). A hook may not be named one of [`reserved_name`]'s names.

use serde_json::Value;
use windtunnel_abi::{op, point};

use crate::model::is_slug;

/// Largest artifact, in bytes of JSON, unless the sweep sets another cap.
pub const DEFAULT_MAX_ARTIFACT_BYTES: usize = 16 << 20;
/// Longest warning, in bytes, unless the sweep sets another cap; a longer one is cut.
pub const DEFAULT_MAX_WARNING_BYTES: usize = 4 * 1024;
/// The variable that sets a sweep's artifact cap.
pub const MAX_ARTIFACT_ENV: &str = "WT_HOOK_MAX_ARTIFACT_BYTES";
/// The variable that sets a sweep's warning cap.
pub const MAX_WARNING_ENV: &str = "WT_HOOK_MAX_WARNING_BYTES";

/// Labels no artifact may carry: they would make its file look like one of `wt`'s own
/// (`<stem>.<hook>.score.json` next to score sidecars, `….pack.json` next to pack-scoped
/// artifacts).
pub const RESERVED_LABELS: [&str; 2] = ["score", "pack"];

/// Names no hook may take because their `WT_<NAME>_` settings prefix is `wt`'s own.
const RESERVED_FOR_SETTINGS: [&str; 13] = [
    "hook", "hooks", "plugin", "inject", "fixed", "log", "events", "policy", "grace", "isolate",
    "mcp", "run", "session",
];

/// Why no hook may be named `name`, if it may not: its artifacts would take the names of
/// `wt`'s own files, or its settings prefix is `wt`'s own.
pub fn reserved_name(name: &str) -> Option<String> {
    if RESERVED_LABELS.contains(&name) {
        return Some(format!(
            "its artifacts would be named like wt's own `.{name}.json` files"
        ));
    }
    RESERVED_FOR_SETTINGS.contains(&name).then(|| {
        format!(
            "its settings prefix {} belongs to wt itself",
            settings_prefix(name)
        )
    })
}

/// The prefix of a hook's settings in the environment: `WT_` + the name upper-cased with
/// `-` as `_` + `_`.
pub fn settings_prefix(name: &str) -> String {
    format!("WT_{}_", name.to_ascii_uppercase().replace('-', "_"))
}

/// Whether host service `op` may be called at `point`; `Err` is the message the hook gets.
/// An unknown service is refused too.
pub fn service_allowed(point: u32, op: &str) -> Result<(), String> {
    let here = point_here(point);
    match op {
        op::WARN => Ok(()),
        op::EMIT_ARTIFACT
            if matches!(
                point,
                point::TURN_BEGIN | point::TURN_FINISH | point::GUARD_CHECK
            ) =>
        {
            Err(format!(
                "artifacts are written at run, scenario and pack points, not at {here}; keep what the turn saw and emit it at on_run_end"
            ))
        }
        op::EMIT_ARTIFACT => Ok(()),
        op::CONVERSE if point == point::ON_RUN_SCORED => Ok(()),
        op::CONVERSE => Err(format!(
            "converse is valid only during on_run_scored, not {here}"
        )),
        op::PROBE_STATE
            if matches!(
                point,
                point::ON_RUN_START | point::ON_RUN_SCORED | point::ON_RUN_END
            ) =>
        {
            Ok(())
        }
        op::PROBE_STATE => Err(format!(
            "probe_state is valid only at run points, not {here}"
        )),
        other => Err(format!("this wt offers no host service `{other}`")),
    }
}

fn point_here(p: u32) -> String {
    if p == 0 {
        "outside a hook point".to_owned()
    } else {
        point::name(p).to_owned()
    }
}

/// An artifact a hook emitted, checked.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct CheckedArtifact {
    /// The label, a slug that is not reserved.
    pub label: Option<String>,
    /// The document to write.
    pub payload: Value,
    /// `<hook>` or `<hook>.<label>`: written once per scope.
    pub name: String,
}

/// Checks what hook `hook` passed to `emit_artifact` (`arg`: `{"label": …, "payload": …}`
/// as JSON) against a cap of `max_bytes`; `Err` is the message the hook gets.
pub fn check_artifact(hook: &str, arg: &str, max_bytes: usize) -> Result<CheckedArtifact, String> {
    if arg.len() > max_bytes {
        return Err(format!(
            "{} bytes is more than the {max_bytes} bytes an artifact may have ({MAX_ARTIFACT_ENV})",
            arg.len(),
        ));
    }
    let mut v: Value =
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
    if let Some(l) = label.as_deref().filter(|l| RESERVED_LABELS.contains(l)) {
        return Err(format!(
            "artifact label `{l}` is reserved: `score` and `pack` name wt's own files"
        ));
    }
    let name = match &label {
        Some(l) => format!("{hook}.{l}"),
        None => hook.to_owned(),
    };
    let payload = v.get_mut("payload").map(Value::take).unwrap_or(Value::Null);
    Ok(CheckedArtifact {
        label,
        payload,
        name,
    })
}

/// The message for an artifact whose name was already written in its scope.
pub fn artifact_written_twice(name: &str) -> String {
    format!("an artifact named `{name}` was already written here; give each artifact its own label")
}

/// A warning as recorded: cut to `max_bytes` (at a character boundary, with a marker
/// giving the original length).
pub fn cut_warning(text: &str, max_bytes: usize) -> String {
    let mut text = text.to_owned();
    if text.len() > max_bytes {
        let total = text.len();
        let mut end = max_bytes;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push_str(&format!("…[cut by wt: {total} bytes in all]"));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn services_are_allowed_where_the_table_says() {
        let all = point::ALL;
        let allowed = |op: &str| -> Vec<&str> {
            all.iter()
                .filter(|p| service_allowed(**p, op).is_ok())
                .map(|p| point::name(*p))
                .collect()
        };
        assert_eq!(allowed(op::WARN).len(), all.len());
        assert_eq!(
            allowed(op::EMIT_ARTIFACT),
            [
                "on_provisioned",
                "on_run_start",
                "on_run_scored",
                "on_run_end",
                "on_scenario_end",
                "on_pack_end"
            ]
        );
        assert_eq!(allowed(op::CONVERSE), ["on_run_scored"]);
        assert_eq!(
            allowed(op::PROBE_STATE),
            ["on_run_start", "on_run_scored", "on_run_end"]
        );
        assert!(service_allowed(point::ON_RUN_END, "teleport").is_err());
    }

    #[test]
    fn artifacts_are_checked_for_size_json_and_labels() {
        let ok = check_artifact("h", r#"{"label":"x","payload":{"a":1}}"#, 100).unwrap();
        assert_eq!(
            (ok.name.as_str(), ok.payload["a"].as_i64()),
            ("h.x", Some(1))
        );
        assert!(
            check_artifact("h", r#"{"payload":1}"#, 5)
                .unwrap_err()
                .contains("more than")
        );
        assert!(
            check_artifact("h", "{", 100)
                .unwrap_err()
                .contains("not JSON")
        );
        assert!(
            check_artifact("h", r#"{"label":"A B"}"#, 100)
                .unwrap_err()
                .contains("slug")
        );
        for l in RESERVED_LABELS {
            let arg = format!(r#"{{"label":"{l}"}}"#);
            assert!(
                check_artifact("h", &arg, 100)
                    .unwrap_err()
                    .contains("reserved")
            );
        }
    }

    #[test]
    fn warnings_are_cut_at_a_character_boundary_with_the_length() {
        assert_eq!(cut_warning("short", 10), "short");
        assert_eq!(cut_warning("ééé", 3), "é…[cut by wt: 6 bytes in all]");
    }

    #[test]
    fn reserved_names_say_why() {
        assert!(reserved_name("score").unwrap().contains(".score.json"));
        assert!(reserved_name("mcp").unwrap().contains("WT_MCP_"));
        assert_eq!(reserved_name("acme_probe"), None);
    }
}
