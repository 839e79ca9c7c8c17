//! Size limits on what enters `wt` from outside, in one place (documented in
//! docs/runner.md, "Limits").
//!
//! - Response bodies: `max_response_bytes` in the agent config (default 8 MiB); a larger one
//!   ends the turn with a protocol error ("reply exceeded N bytes").
//! - Stored text: every text a runtime hands back (replies, errors, tool-call arguments and
//!   results) is cut at [`MAX_STORED_TEXT_BYTES`] before it is scored and stored, with a
//!   marker that gives the original length, so traces stay bounded and a rescore sees what
//!   the score saw.
//! - Hook artifacts: at most `WT_HOOK_MAX_ARTIFACT_BYTES` of JSON (default 16 MiB); a larger
//!   one is refused (an error to the hook and a warning).
//! - Hook warnings: cut at `WT_HOOK_MAX_WARNING_BYTES` (default 4 KiB), with a marker.
//! - Input files (pack files, agent configs): regular files of at most
//!   [`MAX_INPUT_FILE_BYTES`], opened without blocking, so a FIFO or a device named as one
//!   is refused at once instead of hanging `wt`.

use serde_json::Value;

/// The most bytes of JSON a run's evidence (its tool calls) may take in its trace: with the
/// rest of the trace, well under the 64 MiB a reader accepts (`report::load::MAX_TRACE_BYTES`),
/// so no trace `wt` writes is one its own readers skip.
pub(crate) const MAX_EVIDENCE_BYTES: usize = 32 << 20;

/// Keeps the tool calls of `calls` that fit in [`MAX_EVIDENCE_BYTES`] of JSON, in order;
/// returns how many there were when some had to go.
pub(crate) fn bound_evidence(calls: &mut Vec<windtunnel_model::ToolCall>) -> Option<usize> {
    let rough = |c: &windtunnel_model::ToolCall| {
        rough_len(&c.arguments)
            + rough_len(&c.result)
            + c.name.len()
            + c.error.as_ref().map_or(0, String::len)
            + 96
    };
    // An escaped character takes at most 6 bytes: most evidence is settled without
    // serializing anything.
    if calls.iter().map(rough).sum::<usize>().saturating_mul(6) <= MAX_EVIDENCE_BYTES {
        return None;
    }
    let total = calls.len();
    let mut used = 0usize;
    let keep = calls
        .iter()
        .take_while(|c| {
            used += serde_json::to_vec(c).map_or(usize::MAX / 2, |v| v.len() + 1);
            used <= MAX_EVIDENCE_BYTES
        })
        .count();
    (keep < total).then(|| {
        calls.truncate(keep);
        total
    })
}

/// The most model calls a run's trace keeps; the rest are counted in a note. With
/// [`bound_model_call`], they take at most about 20 MiB beside the tool calls'
/// [`MAX_EVIDENCE_BYTES`].
pub(crate) const MAX_MODEL_CALLS: usize = 512;

/// The most bytes a recorded model call keeps of its request's messages, and of its
/// response.
pub(crate) const MAX_RECORDED_PART_BYTES: usize = 16 << 10;

/// Keeps the last messages of `messages` that fit in about `max` bytes of JSON (the newest
/// ones: what this call added to the conversation), with a note of how many went first.
/// Returns whether it cut.
pub(crate) fn keep_last(messages: &mut Value, max: usize) -> bool {
    let Value::Array(list) = messages else {
        let before = rough_len(messages);
        cut_value(messages, max);
        return rough_len(messages) != before;
    };
    let sizes: Vec<usize> = list
        .iter()
        .map(|m| serde_json::to_vec(m).map_or(usize::MAX / 4, |v| v.len() + 1))
        .collect();
    if sizes.iter().sum::<usize>() <= max {
        return false;
    }
    let mut used = 0usize;
    let keep = sizes
        .iter()
        .rev()
        .take_while(|s| {
            used += **s;
            used <= max
        })
        .count();
    let dropped = list.len() - keep;
    let mut kept: Vec<Value> = list.split_off(dropped);
    if kept.is_empty()
        && let Some(mut last) = list.pop()
    {
        // Even the newest message alone is too long: it is kept, cut.
        cut_value(&mut last, max);
        kept.push(last);
    }
    let dropped = dropped - usize::from(kept.len() > keep);
    let mut out = vec![serde_json::json!({"cut_by_wt": {"messages_not_kept": dropped}})];
    out.extend(kept);
    *list = out;
    true
}

/// Cuts a model call's record to the sizes `wt` stores: its messages to their newest, its
/// response and texts to [`MAX_RECORDED_PART_BYTES`].
pub(crate) fn bound_model_call(call: &mut windtunnel_model::ModelCall) {
    if keep_last(&mut call.messages, MAX_RECORDED_PART_BYTES)
        && !call.truncated.iter().any(|t| t == "messages")
    {
        call.truncated.push("messages".into());
    }
    if rough_len(&call.response) > MAX_RECORDED_PART_BYTES {
        cut_value(&mut call.response, MAX_RECORDED_PART_BYTES);
        if !call.truncated.iter().any(|t| t == "response") {
            call.truncated.push("response".into());
        }
    }
    for text in [
        &mut call.error,
        &mut call.refusal,
        &mut call.model,
        &mut call.served_model,
    ]
    .into_iter()
    .flatten()
    {
        cut_text(text, 4096);
    }
    for r in &mut call.retries {
        cut_text(&mut r.error, 4096);
    }
    call.tools.truncate(256);
}

/// Keeps the first [`MAX_MODEL_CALLS`] model calls of a run; returns how many there were
/// when some had to go.
pub(crate) fn bound_model_calls(calls: &mut Vec<windtunnel_model::ModelCall>) -> Option<usize> {
    (calls.len() > MAX_MODEL_CALLS).then(|| {
        let total = calls.len();
        calls.truncate(MAX_MODEL_CALLS);
        total
    })
}

/// The largest pack file or agent config `wt` reads.
pub(crate) const MAX_INPUT_FILE_BYTES: u64 = 4 << 20;

/// Reads an input file a person wrote: a regular file (not a FIFO, device or socket; with
/// `no_symlink`, not a symbolic link either) of at most [`MAX_INPUT_FILE_BYTES`], as UTF-8.
/// Opening never blocks.
pub(crate) fn read_input_file(path: &std::path::Path, no_symlink: bool) -> std::io::Result<String> {
    use std::io::{Error, ErrorKind, Read};
    use std::os::unix::fs::OpenOptionsExt;
    let mut flags = libc::O_NONBLOCK | libc::O_NOCTTY;
    if no_symlink {
        flags |= libc::O_NOFOLLOW;
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) if no_symlink => Error::new(
                ErrorKind::InvalidInput,
                "is a symbolic link; name the file itself",
            ),
            _ => e,
        })?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            "is not a regular file (a FIFO, device, socket or directory)",
        ));
    }
    if meta.len() > MAX_INPUT_FILE_BYTES {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            format!(
                "is {} bytes, more than the {MAX_INPUT_FILE_BYTES} an input file may have",
                meta.len()
            ),
        ));
    }
    let mut text = String::new();
    file.take(MAX_INPUT_FILE_BYTES + 1)
        .read_to_string(&mut text)?;
    Ok(text)
}

/// Longest text `wt` stores from a runtime, per field, in bytes.
pub(crate) const MAX_STORED_TEXT_BYTES: usize = 256 * 1024;

/// Hook caps and their variables: the SDK's rules, which the test kit applies too.
pub(crate) use windtunnel_sdk::rules::{
    DEFAULT_MAX_ARTIFACT_BYTES, DEFAULT_MAX_WARNING_BYTES, MAX_ARTIFACT_ENV, MAX_WARNING_ENV,
};

/// What hooks may hand back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HookCaps {
    pub artifact_bytes: usize,
    pub warning_bytes: usize,
}

impl Default for HookCaps {
    fn default() -> Self {
        HookCaps {
            artifact_bytes: DEFAULT_MAX_ARTIFACT_BYTES,
            warning_bytes: DEFAULT_MAX_WARNING_BYTES,
        }
    }
}

impl HookCaps {
    /// The caps from the environment; a value that is not a whole number of bytes in range
    /// is an error naming the variable.
    pub fn from_env() -> Result<HookCaps, String> {
        Ok(HookCaps {
            artifact_bytes: bytes_from_env(
                MAX_ARTIFACT_ENV,
                DEFAULT_MAX_ARTIFACT_BYTES,
                1024,
                1 << 30,
            )?,
            warning_bytes: bytes_from_env(MAX_WARNING_ENV, DEFAULT_MAX_WARNING_BYTES, 64, 1 << 20)?,
        })
    }
}

fn bytes_from_env(var: &str, default: usize, min: usize, max: usize) -> Result<usize, String> {
    let Ok(text) = std::env::var(var) else {
        return Ok(default);
    };
    match text.trim().parse::<usize>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(format!(
            "{var}={text:?} is not a number of bytes from {min} to {max}"
        )),
    }
}

/// Cuts `text` to at most `max` bytes (at a character boundary) and appends a marker with
/// the original length — the one cut of `wt`, the SDK's rule for warnings too
/// ([`windtunnel_sdk::rules::cut_warning`]). Returns whether it cut.
pub(crate) fn cut_text(text: &mut String, max: usize) -> bool {
    if text.len() <= max {
        return false;
    }
    *text = windtunnel_sdk::rules::cut_warning(text, max);
    true
}

/// Bounds `value`'s JSON to about `max` bytes: when it is longer, every string inside is cut
/// to half of `max` as [`cut_text`] does, and if the JSON is still longer (a huge array of
/// short strings), the whole value is replaced by `{"cut_by_wt": {"bytes", "excerpt"}}`.
pub(crate) fn cut_value(value: &mut Value, max: usize) {
    if let Value::String(s) = value {
        cut_text(s, max);
        return;
    }
    // Most values are small: a walk that allocates nothing settles them (an escaped
    // character takes at most 6 bytes).
    if rough_len(value).saturating_mul(6) <= max {
        return;
    }
    let len = serde_json::to_vec(value).map_or(0, |b| b.len());
    if len <= max {
        return;
    }
    fn strings(v: &mut Value, max: usize) {
        match v {
            Value::String(s) => {
                cut_text(s, max);
            }
            Value::Array(a) => a.iter_mut().for_each(|v| strings(v, max)),
            Value::Object(m) => m.values_mut().for_each(|v| strings(v, max)),
            _ => {}
        }
    }
    strings(value, max / 2);
    if serde_json::to_vec(value).map_or(0, |b| b.len()) > max {
        let mut excerpt = value.to_string();
        cut_text(&mut excerpt, 1024.min(max / 2));
        *value = serde_json::json!({"cut_by_wt": {"bytes": len, "excerpt": excerpt}});
    }
}

/// About how long `value`'s JSON is, counting each string's bytes once.
pub(crate) fn rough_len(value: &Value) -> usize {
    match value {
        Value::Null | Value::Bool(_) => 5,
        Value::Number(_) => 24,
        Value::String(s) => s.len() + 2,
        Value::Array(a) => a.iter().map(|v| rough_len(v) + 1).sum::<usize>() + 2,
        Value::Object(m) => {
            m.iter()
                .map(|(k, v)| k.len() + 4 + rough_len(v))
                .sum::<usize>()
                + 2
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_cut_at_a_char_boundary_with_its_length() {
        let mut s = "é".repeat(10); // 20 bytes
        assert!(cut_text(&mut s, 5));
        assert_eq!(s, "éé…[cut by wt: 20 bytes in all]");
        let mut short = "ok".to_owned();
        assert!(!cut_text(&mut short, 5));
        assert_eq!(short, "ok");
    }

    #[test]
    fn values_are_cut_inside_and_as_a_whole() {
        let small = serde_json::json!({"a": "x".repeat(50)});
        let mut v = small.clone();
        cut_value(&mut v, 200);
        assert_eq!(v, small);
        let mut v = serde_json::json!({"a": "x".repeat(300)});
        cut_value(&mut v, 200);
        assert_eq!(
            v["a"],
            format!("{}…[cut by wt: 300 bytes in all]", "x".repeat(100))
        );
        let mut big = serde_json::json!(vec!["ab"; 100]);
        cut_value(&mut big, 100);
        assert_eq!(big["cut_by_wt"]["bytes"], 501);
    }

    #[test]
    fn a_trace_keeps_at_most_512_model_calls_each_bounded() {
        use windtunnel_model::ModelCall;
        let mut huge = ModelCall::default();
        huge.messages = serde_json::json!([{"role": "user", "content": "x".repeat(100_000)}]);
        huge.response = serde_json::json!({"content": "y".repeat(100_000)});
        huge.error = Some("e".repeat(10_000));
        bound_model_call(&mut huge);
        let bytes = serde_json::to_vec(&huge).unwrap().len();
        assert!(bytes < 2 * MAX_RECORDED_PART_BYTES + 6_000, "{bytes}");
        assert_eq!(huge.truncated, ["messages", "response"]);
        let mut calls = vec![ModelCall::default(); MAX_MODEL_CALLS + 3];
        assert_eq!(bound_model_calls(&mut calls), Some(MAX_MODEL_CALLS + 3));
        assert_eq!(calls.len(), MAX_MODEL_CALLS);
        assert_eq!(bound_model_calls(&mut calls), None);
    }
}
