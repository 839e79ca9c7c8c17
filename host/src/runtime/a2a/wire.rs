//! The A2A JSON-RPC binding, both generations: 1.0 (`SendMessage`, `SendStreamingMessage`,
//! `GetTask`, `CancelTask`; proto-JSON names: `ROLE_USER`, `TASK_STATE_COMPLETED`, results
//! as `{"task"}`, `{"message"}`, `{"statusUpdate"}`, `{"artifactUpdate"}`, parts as
//! `{"text"}`, `{"data"}`, `{"url"}`, `{"raw"}`) and 0.3 (`message/send`, `message/stream`,
//! `tasks/get`, `tasks/cancel`; `kind`-tagged objects, `user`, `completed`). Only what `wt`
//! sends and reads, as JSON values checked field by field: a field of the wrong type is a
//! protocol error naming it.

use serde_json::{Value, json};

/// A protocol generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Protocol {
    V1,
    V03,
}

impl Protocol {
    /// `1.0` or `0.3`.
    pub(crate) fn version(self) -> &'static str {
        match self {
            Protocol::V1 => "1.0",
            Protocol::V03 => "0.3",
        }
    }

    /// The generation a version string names (`1.0`, `1.0.0`, `0.3`, `0.3.0`).
    pub(crate) fn of(version: &str) -> Option<Protocol> {
        let v = version.trim();
        let major_minor: Vec<&str> = v.split('.').take(2).collect();
        match major_minor.as_slice() {
            ["1", "0"] | ["1"] => Some(Protocol::V1),
            ["0", "3"] => Some(Protocol::V03),
            _ => None,
        }
    }

    pub(crate) fn send(self, stream: bool) -> &'static str {
        match (self, stream) {
            (Protocol::V1, false) => "SendMessage",
            (Protocol::V1, true) => "SendStreamingMessage",
            (Protocol::V03, false) => "message/send",
            (Protocol::V03, true) => "message/stream",
        }
    }

    pub(crate) fn cancel(self) -> &'static str {
        match self {
            Protocol::V1 => "CancelTask",
            Protocol::V03 => "tasks/cancel",
        }
    }

    /// The params of a send: one user text message in `context`, answering `task` when the
    /// agent asked for input.
    pub(crate) fn send_params(
        self,
        text: &str,
        message_id: &str,
        context: &str,
        task: Option<&str>,
    ) -> Value {
        let mut message = match self {
            Protocol::V1 => json!({
                "messageId": message_id,
                "role": "ROLE_USER",
                "contextId": context,
                "parts": [{"text": text}],
            }),
            Protocol::V03 => json!({
                "kind": "message",
                "messageId": message_id,
                "role": "user",
                "contextId": context,
                "parts": [{"kind": "text", "text": text}],
            }),
        };
        if let Some(t) = task {
            message["taskId"] = json!(t);
        }
        match self {
            Protocol::V1 => json!({"message": message}),
            Protocol::V03 => json!({"message": message, "configuration": {"blocking": true}}),
        }
    }

    /// A JSON-RPC request.
    pub(crate) fn request(method: &str, id: u64, params: Value) -> Value {
        json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
    }
}

/// A task's state, as either generation writes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum State {
    Submitted,
    Working,
    Completed,
    InputRequired,
    Failed,
    Rejected,
    Canceled,
    AuthRequired,
    /// A state neither generation names (or `unknown`).
    Other(String),
}

impl State {
    pub(crate) fn parse(s: &str) -> State {
        let name = s
            .strip_prefix("TASK_STATE_")
            .map(|n| n.to_ascii_lowercase().replace('_', "-"))
            .unwrap_or_else(|| s.to_owned());
        match name.as_str() {
            "submitted" => State::Submitted,
            "working" => State::Working,
            "completed" => State::Completed,
            "input-required" => State::InputRequired,
            "failed" => State::Failed,
            "rejected" => State::Rejected,
            "canceled" | "cancelled" => State::Canceled,
            "auth-required" => State::AuthRequired,
            _ => State::Other(s.to_owned()),
        }
    }

    /// As a trace records it: `completed`, `input-required`, …
    pub(crate) fn as_str(&self) -> &str {
        match self {
            State::Submitted => "submitted",
            State::Working => "working",
            State::Completed => "completed",
            State::InputRequired => "input-required",
            State::Failed => "failed",
            State::Rejected => "rejected",
            State::Canceled => "canceled",
            State::AuthRequired => "auth-required",
            State::Other(s) => s,
        }
    }

    /// Does the turn end here (a final state, or the agent waits for the user)?
    pub(crate) fn ends_turn(&self) -> bool {
        !matches!(self, State::Submitted | State::Working | State::Other(_))
    }
}

/// One part of a message or an artifact.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Part {
    Text(String),
    Data(Value),
    /// A file: by URL, or inline (its size only: its bytes are not kept).
    File {
        uri: Option<String>,
        name: Option<String>,
        media_type: Option<String>,
        inline_bytes: Option<u64>,
    },
}

/// A message's parts and ids.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Message {
    pub context_id: Option<String>,
    pub task_id: Option<String>,
    pub parts: Vec<Part>,
}

/// What one result (or stream event) says.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Event {
    Message(Message),
    Task {
        id: String,
        context_id: Option<String>,
        state: State,
        status_message: Option<Message>,
        artifacts: Vec<(String, Vec<Part>)>,
    },
    Status {
        task_id: String,
        context_id: Option<String>,
        state: State,
        message: Option<Message>,
    },
    Artifact {
        task_id: String,
        context_id: Option<String>,
        id: String,
        parts: Vec<Part>,
        append: bool,
    },
}

fn str_field(v: &Value, field: &str, what: &str) -> Result<Option<String>, String> {
    match v.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(format!("{what}: `{field}` is not a string")),
    }
}

fn required(v: &Value, field: &str, what: &str) -> Result<String, String> {
    str_field(v, field, what)?.ok_or_else(|| format!("{what} has no `{field}`"))
}

/// A JSON-RPC response's result, or the error it carries (its code named).
pub(crate) fn result(body: &Value, id: u64) -> Result<&Value, RpcError> {
    let bad = |m: String| RpcError::Protocol(m);
    if !body.is_object() {
        return Err(bad("the reply is not a JSON-RPC response object".into()));
    }
    if body.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(bad(
            "the reply is not JSON-RPC 2.0 (`jsonrpc` is not \"2.0\")".into(),
        ));
    }
    match body.get("id") {
        Some(v) if v.as_u64() == Some(id) || v.as_str() == Some(&id.to_string()) => {}
        // An error about a request the server could not read may carry a null id.
        Some(Value::Null) | None if body.get("error").is_some() => {}
        other => {
            return Err(bad(format!(
                "the reply answers request id {}, not {id}",
                other.map_or("(none)".to_owned(), Value::to_string)
            )));
        }
    }
    if let Some(e) = body.get("error") {
        let code = e.get("code").and_then(Value::as_i64).unwrap_or(0);
        let message = e
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("(no message)");
        return Err(RpcError::Rpc {
            code,
            message: crate::score::excerpt(message),
        });
    }
    body.get("result")
        .ok_or_else(|| bad("the reply has neither `result` nor `error`".into()))
}

/// Why a JSON-RPC call gave no result.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum RpcError {
    /// The reply is not a JSON-RPC response to the request.
    Protocol(String),
    /// The agent answered with an error.
    Rpc { code: i64, message: String },
}

/// The name of a JSON-RPC error code: JSON-RPC's own and A2A's.
pub(crate) fn code_name(code: i64) -> &'static str {
    match code {
        -32700 => "parse error",
        -32600 => "invalid request",
        -32601 => "method not found",
        -32602 => "invalid params",
        -32603 => "internal error",
        -32001 => "task not found",
        -32002 => "task not cancelable",
        -32003 => "push notifications not supported",
        -32004 => "unsupported operation",
        -32005 => "content type not supported",
        -32006 => "invalid agent response",
        -32007 => "extended agent card not configured",
        -32008 => "extension support required",
        -32009 => "version not supported",
        -32099..=-32000 => "server error",
        _ => "application error",
    }
}

/// Does the code say `wt` and the agent do not speak the same protocol (rather than the
/// agent failing at its task)?
pub(crate) fn code_is_protocol(code: i64) -> bool {
    matches!(
        code,
        -32700 | -32600 | -32601 | -32602 | -32004 | -32005 | -32009
    )
}

/// Reads a result (a send's, a stream event's, a get's).
pub(crate) fn event(p: Protocol, v: &Value) -> Result<Event, String> {
    let (kind, body) = match p {
        Protocol::V1 => {
            let obj = v
                .as_object()
                .ok_or("the result is not an object".to_owned())?;
            let found = ["task", "message", "statusUpdate", "artifactUpdate"]
                .into_iter()
                .find(|k| obj.contains_key(*k));
            match found {
                Some(k) => (k, &v[k]),
                // A bare task (a `GetTask` result).
                None if obj.contains_key("status") && obj.contains_key("id") => ("task", v),
                None => {
                    return Err(format!(
                        "the result is none of task, message, statusUpdate, artifactUpdate: {}",
                        crate::score::excerpt(&v.to_string())
                    ));
                }
            }
        }
        Protocol::V03 => {
            let kind = v.get("kind").and_then(Value::as_str).unwrap_or_default();
            let k = match kind {
                "task" => "task",
                "message" => "message",
                "status-update" => "statusUpdate",
                "artifact-update" => "artifactUpdate",
                other => {
                    return Err(format!(
                        "the result's `kind` is {other:?}, none of task, message, status-update, artifact-update"
                    ));
                }
            };
            (k, v)
        }
    };
    match kind {
        "message" => message(p, body).map(Event::Message),
        "task" => {
            let id = required(body, "id", "the task")?;
            let status = body.get("status").ok_or("the task has no `status`")?;
            let (state, status_message) = status_of(p, status)?;
            let mut artifacts = Vec::new();
            if let Some(list) = body.get("artifacts") {
                let list = list
                    .as_array()
                    .ok_or("the task's `artifacts` is not a list")?;
                for a in list {
                    artifacts.push(artifact(p, a)?);
                }
            }
            Ok(Event::Task {
                id,
                context_id: str_field(body, "contextId", "the task")?,
                state,
                status_message,
                artifacts,
            })
        }
        "statusUpdate" => {
            let status = body
                .get("status")
                .ok_or("a status update has no `status`")?;
            let (state, message) = status_of(p, status)?;
            Ok(Event::Status {
                task_id: required(body, "taskId", "a status update")?,
                context_id: str_field(body, "contextId", "a status update")?,
                state,
                message,
            })
        }
        _ => {
            let a = body
                .get("artifact")
                .ok_or("an artifact update has no `artifact`")?;
            let (id, parts) = artifact(p, a)?;
            Ok(Event::Artifact {
                task_id: required(body, "taskId", "an artifact update")?,
                context_id: str_field(body, "contextId", "an artifact update")?,
                id,
                parts,
                append: body.get("append").and_then(Value::as_bool).unwrap_or(false),
            })
        }
    }
}

fn status_of(p: Protocol, status: &Value) -> Result<(State, Option<Message>), String> {
    let state = required(status, "state", "the task's status")?;
    let message = match status.get("message") {
        None | Some(Value::Null) => None,
        Some(m) => Some(message(p, m)?),
    };
    Ok((State::parse(&state), message))
}

fn artifact(p: Protocol, a: &Value) -> Result<(String, Vec<Part>), String> {
    let id = str_field(a, "artifactId", "an artifact")?.unwrap_or_default();
    Ok((id, parts(p, a.get("parts"), "an artifact")?))
}

fn message(p: Protocol, m: &Value) -> Result<Message, String> {
    Ok(Message {
        context_id: str_field(m, "contextId", "a message")?,
        task_id: str_field(m, "taskId", "a message")?,
        parts: parts(p, m.get("parts"), "a message")?,
    })
}

fn parts(p: Protocol, v: Option<&Value>, what: &str) -> Result<Vec<Part>, String> {
    let Some(v) = v else { return Ok(Vec::new()) };
    let list = v
        .as_array()
        .ok_or_else(|| format!("{what}'s `parts` is not a list"))?;
    list.iter().map(|x| part(p, x, what)).collect()
}

fn part(p: Protocol, v: &Value, what: &str) -> Result<Part, String> {
    let s = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
    // Base64 text of `n` characters holds about 3n/4 bytes.
    let inline = |b: &str| (b.len() as u64) * 3 / 4;
    match p {
        Protocol::V1 => {
            if let Some(t) = v.get("text") {
                return t
                    .as_str()
                    .map(|t| Part::Text(t.to_owned()))
                    .ok_or_else(|| format!("{what} has a text part whose `text` is not a string"));
            }
            if let Some(d) = v.get("data") {
                return Ok(Part::Data(d.clone()));
            }
            if v.get("url").is_some() || v.get("raw").is_some() {
                return Ok(Part::File {
                    uri: s(v, "url"),
                    name: s(v, "filename"),
                    media_type: s(v, "mediaType"),
                    inline_bytes: v.get("raw").and_then(Value::as_str).map(inline),
                });
            }
            Err(format!(
                "{what} has a part that is none of text, data, url, raw: {}",
                crate::score::excerpt(&v.to_string())
            ))
        }
        Protocol::V03 => match v.get("kind").and_then(Value::as_str) {
            Some("text") => s(v, "text")
                .map(Part::Text)
                .ok_or_else(|| format!("{what} has a text part without a string `text`")),
            Some("data") => Ok(Part::Data(v.get("data").cloned().unwrap_or(Value::Null))),
            Some("file") => {
                let f = v.get("file").cloned().unwrap_or(Value::Null);
                Ok(Part::File {
                    uri: s(&f, "uri"),
                    name: s(&f, "name"),
                    media_type: s(&f, "mimeType"),
                    inline_bytes: f.get("bytes").and_then(Value::as_str).map(inline),
                })
            }
            other => Err(format!(
                "{what} has a part of kind {other:?}, none of text, data, file"
            )),
        },
    }
}

/// Server-sent events, fed as they arrive: each event's `data` lines joined.
#[derive(Default)]
pub(crate) struct Sse {
    buf: String,
}

impl Sse {
    /// The events `chunk` completes.
    pub(crate) fn feed(&mut self, chunk: &str) -> Vec<String> {
        self.buf.push_str(chunk);
        let mut out = Vec::new();
        loop {
            let normalized = self.buf.replace("\r\n", "\n");
            if normalized.len() != self.buf.len() {
                self.buf = normalized;
            }
            let Some(end) = self.buf.find("\n\n") else {
                break;
            };
            let event: String = self.buf.drain(..end + 2).collect();
            let data: Vec<&str> = event
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(|d| d.strip_prefix(' ').unwrap_or(d))
                .collect();
            if !data.is_empty() {
                out.push(data.join("\n"));
            }
        }
        out
    }

    /// Whether the stream stopped inside an event (bytes after the last complete one).
    pub(crate) fn cut_mid_event(&self) -> bool {
        !self.buf.trim().is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_generations_read_as_the_same_events() {
        let v1 = json!({"task": {"id": "t", "contextId": "c",
            "status": {"state": "TASK_STATE_INPUT_REQUIRED",
                       "message": {"role": "ROLE_AGENT", "parts": [{"text": "Which order?"}]}},
            "artifacts": [{"artifactId": "a", "parts": [{"text": "x"}, {"data": {"n": 1}},
                                                       {"url": "https://f/x.pdf", "mediaType": "application/pdf"}]}]}});
        let v03 = json!({"kind": "task", "id": "t", "contextId": "c",
            "status": {"state": "input-required",
                       "message": {"kind": "message", "role": "agent", "parts": [{"kind": "text", "text": "Which order?"}]}},
            "artifacts": [{"artifactId": "a", "parts": [{"kind": "text", "text": "x"}, {"kind": "data", "data": {"n": 1}},
                                                       {"kind": "file", "file": {"uri": "https://f/x.pdf", "mimeType": "application/pdf"}}]}]});
        let a = event(Protocol::V1, &v1).unwrap();
        assert_eq!(a, event(Protocol::V03, &v03).unwrap());
        let Event::Task {
            state, artifacts, ..
        } = a
        else {
            panic!()
        };
        assert_eq!(state, State::InputRequired);
        assert!(state.ends_turn() && !State::Working.ends_turn());
        assert!(
            matches!(&artifacts[0].1[2], Part::File { uri: Some(u), .. } if u == "https://f/x.pdf")
        );
        let e = event(Protocol::V1, &json!({"nothing": 1})).unwrap_err();
        assert!(e.contains("none of task"), "{e}");
        let e = event(
            Protocol::V03,
            &json!({"kind": "task", "id": 5, "status": {}}),
        )
        .unwrap_err();
        assert_eq!(e, "the task: `id` is not a string");
    }

    #[test]
    fn json_rpc_errors_are_named_and_a_wrong_id_is_refused() {
        let err = json!({"jsonrpc": "2.0", "id": 3, "error": {"code": -32601, "message": "Method not found"}});
        assert_eq!(
            result(&err, 3),
            Err(RpcError::Rpc {
                code: -32601,
                message: "\"Method not found\"".into()
            })
        );
        assert_eq!(code_name(-32601), "method not found");
        assert!(code_is_protocol(-32601) && !code_is_protocol(-32001));
        let other = json!({"jsonrpc": "2.0", "id": 4, "result": {}});
        assert!(
            matches!(result(&other, 3), Err(RpcError::Protocol(m)) if m.contains("request id 4"))
        );
        assert!(matches!(result(&json!([1]), 3), Err(RpcError::Protocol(_))));
    }

    #[test]
    fn events_split_across_chunks_and_a_cut_one_is_seen() {
        let mut sse = Sse::default();
        assert!(sse.feed("data: {\"a\":").is_empty());
        assert_eq!(sse.feed("1}\r\n\r\ndata: {\"b\"").len(), 1);
        assert!(sse.cut_mid_event());
        assert_eq!(sse.feed(":2}\n\n"), vec!["{\"b\":2}"]);
        assert!(!sse.cut_mid_event());
        assert_eq!(Protocol::of("0.3.0"), Some(Protocol::V03));
        assert_eq!(Protocol::of("1.0"), Some(Protocol::V1));
        assert_eq!(Protocol::of("2.1"), None);
    }
}
