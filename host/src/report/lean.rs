//! A trace as far as a report reads it ([`Trace`]), validated exactly as
//! [`windtunnel_sdk::model::Trace`] is: the same files parse, and the same ones fail with the
//! same message, so the scan ([`super::scan`]) skips what the loader skips and says so in the
//! same words.
//!
//! Every field of a trace is here, in the SDK's order, with the SDK's defaults and names; what
//! a report does not keep is checked and dropped as it is parsed: strings as [`Text`] (a string,
//! never allocated), JSON values as [`Json`] (any JSON value under `serde_json::Value`'s rules:
//! numbers in range, valid escapes, the nesting limit), maps as [`MapOf`]. What this must not
//! do: grow a field the SDK does not have, or drop one it does (the tests mutate every field of
//! a full trace and compare with the SDK's own parse).

use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use windtunnel_sdk::model::{Denial, HookProvenance, Retry, Sampling, TokenUsage, TurnErrorKind};

/// A string, checked and not kept.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Text;

impl<'de> Deserialize<'de> for Text {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Text, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Text;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                // What `String` says, so that messages are the SDK's.
                f.write_str("a string")
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Text, E> {
                Ok(Text)
            }
        }
        d.deserialize_string(V)
    }
}

/// Any JSON value, checked as `serde_json::Value` checks it, and not kept.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Json;

impl<'de> Deserialize<'de> for Json {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Json, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Json;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any valid JSON value")
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Json, E> {
                Ok(Json)
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Json, E> {
                Ok(Json)
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Json, E> {
                Ok(Json)
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Json, E> {
                Ok(Json)
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Json, E> {
                Ok(Json)
            }
            fn visit_none<E: de::Error>(self) -> Result<Json, E> {
                Ok(Json)
            }
            fn visit_unit<E: de::Error>(self) -> Result<Json, E> {
                Ok(Json)
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Json, D::Error> {
                Json::deserialize(d)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Json, A::Error> {
                while seq.next_element::<Json>()?.is_some() {}
                Ok(Json)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Json, A::Error> {
                while map.next_key::<Text>()?.is_some() {
                    map.next_value::<Json>()?;
                }
                Ok(Json)
            }
        }
        d.deserialize_any(V)
    }
}

/// A map of strings to `T` (a `BTreeMap<String, T>` in the SDK), checked and not kept.
pub(crate) struct MapOf<T>(PhantomData<T>);

impl<T> Default for MapOf<T> {
    fn default() -> Self {
        MapOf(PhantomData)
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for MapOf<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<MapOf<T>, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = MapOf<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<MapOf<T>, A::Error> {
                while map.next_key::<Text>()?.is_some() {
                    map.next_value::<T>()?;
                }
                Ok(MapOf(PhantomData))
            }
        }
        d.deserialize_map(V(PhantomData))
    }
}

/// `windtunnel_sdk::model::Trace`, keeping what a report counts, shows or orders by. (The
/// types here have the SDK's names: serde's messages name them.)
#[derive(Deserialize)]
pub(crate) struct Trace {
    #[serde(rename = "schema_version")]
    _schema_version: u32,
    pub run_id: String,
    pub sweep_id: String,
    pub scenario_id: String,
    pub run_index: u32,
    #[serde(rename = "session_id")]
    _session_id: Text,
    pub agent: AgentRef,
    pub started_at: String,
    pub ended_at: String,
    #[serde(rename = "surface")]
    _surface: Surface,
    pub turns: Vec<TurnRecord>,
    pub evidence: Evidence,
    #[serde(default, rename = "world")]
    _world: Option<WorldObservation>,
    #[serde(default, rename = "worker_warnings")]
    _worker_warnings: Vec<Text>,
    #[serde(default, rename = "error")]
    _error: Option<Text>,
    #[serde(default, rename = "policy_revision")]
    _policy_revision: Option<Text>,
    #[serde(default)]
    pub denial: Option<Denial>,
    #[serde(default)]
    pub hooks: Option<Vec<HookProvenance>>,
    #[serde(default, rename = "processes")]
    _processes: Vec<AgentProcess>,
}

/// The lean trace, by the name the rest of the reading side knows it.
pub(crate) type LeanTrace = Trace;

impl Trace {
    /// Whether a tool call of the run came back with an error (the harness rung of triage).
    pub(crate) fn tool_errors(&self) -> bool {
        self.evidence.tool_calls.iter().any(|c| c.error.is_some())
    }
}

#[derive(Deserialize)]
pub(crate) struct AgentRef {
    pub label: String,
    #[serde(rename = "runtime")]
    _runtime: Text,
    #[serde(default, rename = "model")]
    _model: Option<Text>,
}

#[derive(Deserialize)]
struct Surface {
    #[serde(rename = "soul")]
    _soul: Text,
    #[serde(rename = "tools")]
    _tools: Vec<Json>,
    #[serde(default, rename = "model")]
    _model: Option<Text>,
    #[serde(rename = "sampling")]
    _sampling: Sampling,
}

#[derive(Deserialize)]
pub(crate) struct TurnRecord {
    #[serde(rename = "index")]
    _index: u32,
    #[serde(rename = "input")]
    _input: Text,
    #[serde(rename = "reply")]
    _reply: Option<Text>,
    pub latency_ms: u64,
    #[serde(default)]
    pub error: Option<Text>,
    #[serde(default, rename = "error_kind")]
    _error_kind: Option<TurnErrorKind>,
    #[serde(default, rename = "retries")]
    _retries: Vec<Retry>,
}

#[derive(Deserialize)]
pub(crate) struct Evidence {
    tool_calls: Vec<ToolCall>,
    #[serde(default, rename = "model_calls")]
    _model_calls: Vec<ModelCall>,
}

#[derive(Deserialize)]
struct ToolCall {
    #[serde(rename = "turn")]
    _turn: u32,
    #[serde(rename = "step")]
    _step: u32,
    #[serde(rename = "name")]
    _name: Text,
    #[serde(rename = "arguments")]
    _arguments: Json,
    #[serde(rename = "result")]
    _result: Json,
    #[serde(default)]
    error: Option<Text>,
    #[serde(default, rename = "source")]
    _source: Option<Text>,
    #[serde(default, rename = "server")]
    _server: Option<Text>,
}

#[derive(Deserialize)]
struct ModelCall {
    #[serde(default, rename = "turn")]
    _turn: Option<u32>,
    #[serde(rename = "after_tool_calls")]
    _after_tool_calls: u32,
    #[serde(rename = "source")]
    _source: Text,
    #[serde(default, rename = "model")]
    _model: Option<Text>,
    #[serde(default, rename = "served_model")]
    _served_model: Option<Text>,
    #[serde(default, rename = "response_id")]
    _response_id: Option<Text>,
    #[serde(default, rename = "system_fingerprint")]
    _system_fingerprint: Option<Text>,
    #[serde(default, rename = "stream")]
    _stream: bool,
    #[serde(default, rename = "messages")]
    _messages: Json,
    #[serde(default, rename = "tools")]
    _tools: Vec<Text>,
    #[serde(default, rename = "response")]
    _response: Json,
    #[serde(default, rename = "finish_reason")]
    _finish_reason: Option<Text>,
    #[serde(default, rename = "refusal")]
    _refusal: Option<Text>,
    #[serde(default, rename = "usage")]
    _usage: Option<TokenUsage>,
    #[serde(rename = "latency_ms")]
    _latency_ms: u64,
    #[serde(default, rename = "ttft_ms")]
    _ttft_ms: Option<u64>,
    #[serde(default, rename = "error")]
    _error: Option<Text>,
    #[serde(default, rename = "retries")]
    _retries: Vec<Retry>,
    #[serde(default, rename = "truncated")]
    _truncated: Vec<Text>,
}

#[derive(Deserialize)]
struct WorldObservation {
    #[serde(rename = "before")]
    _before: Json,
    #[serde(rename = "after")]
    _after: Json,
    #[serde(default, rename = "files")]
    _files: MapOf<ObservedFile>,
    #[serde(default, rename = "server")]
    _server: Option<WorldServerRecord>,
}

#[derive(Deserialize)]
struct ObservedFile {
    #[serde(rename = "exists")]
    _exists: bool,
    #[serde(default, rename = "bytes")]
    _bytes: u64,
    #[serde(default, rename = "text")]
    _text: Option<Text>,
    #[serde(default, rename = "note")]
    _note: Option<Text>,
}

#[derive(Deserialize)]
struct WorldServerRecord {
    #[serde(rename = "name")]
    _name: Text,
    #[serde(default, rename = "exit")]
    _exit: Option<Text>,
    #[serde(default, rename = "stderr_tail")]
    _stderr_tail: Text,
    #[serde(default, rename = "stderr_bytes")]
    _stderr_bytes: u64,
}

#[derive(Deserialize)]
struct AgentProcess {
    #[serde(default, rename = "turn")]
    _turn: Option<u32>,
    #[serde(rename = "exit")]
    _exit: Text,
    #[serde(default, rename = "status")]
    _status: Option<i32>,
    #[serde(default, rename = "killed")]
    _killed: Option<Text>,
    #[serde(rename = "stderr_tail")]
    _stderr_tail: Text,
    #[serde(rename = "stderr_bytes")]
    _stderr_bytes: u64,
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    /// A trace with every field the SDK has, optional ones set.
    fn full() -> Value {
        json!({
            "schema_version": 1,
            "run_id": "r-1",
            "sweep_id": "s-1",
            "scenario_id": "order-status",
            "run_index": 3,
            "session_id": "sess",
            "agent": {"label": "demo", "runtime": "demo", "model": "m"},
            "started_at": "2026-12-01T00:00:00Z",
            "ended_at": "2026-12-01T00:00:01Z",
            "surface": {
                "soul": "be nice",
                "tools": [{"type": "function", "function": {"name": "x"}}],
                "model": "m",
                "sampling": {"temperature": 0.5, "top_p": 1.0, "max_tokens": 10, "seed": 7}
            },
            "turns": [{
                "index": 0, "input": "hi", "reply": "hello", "latency_ms": 12,
                "error": "e", "error_kind": "timeout",
                "retries": [{"attempt": 1, "error": "503", "wait_ms": 5}]
            }],
            "evidence": {
                "tool_calls": [{
                    "turn": 0, "step": 0, "name": "lookup", "arguments": {"a": [1, 2.5, null]},
                    "result": "ok", "error": "bad", "source": "mcp", "server": "mem"
                }],
                "model_calls": [{
                    "turn": 0, "after_tool_calls": 1, "source": "gateway", "model": "m",
                    "served_model": "m2", "response_id": "id", "system_fingerprint": "fp",
                    "stream": true, "messages": [{"role": "user"}], "tools": ["lookup"],
                    "response": {"content": "x"}, "finish_reason": "stop", "refusal": "no",
                    "usage": {"prompt_tokens": 1, "completion_tokens": 2, "cached_tokens": 0,
                              "reasoning_tokens": 0},
                    "latency_ms": 3, "ttft_ms": 1, "error": "boom",
                    "retries": [{"attempt": 1, "error": "x", "wait_ms": 1}],
                    "truncated": ["messages"]
                }]
            },
            "world": {
                "before": {"n": 0}, "after": {"n": 1},
                "files": {"notes.txt": {"exists": true, "bytes": 3, "text": "abc", "note": "n"}},
                "server": {"name": "mem", "exit": "exited", "stderr_tail": "t", "stderr_bytes": 1}
            },
            "worker_warnings": ["w"],
            "error": "run error",
            "policy_revision": "p1",
            "denial": {"turn": 0, "guard": "g", "code": "c", "message": "m", "kind": "denied"},
            "hooks": [{"name": "h", "source": "built-in", "version": "1", "sdk_version": "1.4",
                       "sha256": "ab", "settings": {"WT_H_X": "1"}}],
            "processes": [{"turn": 0, "exit": "exited with status 0", "status": 0,
                           "killed": "end of run", "stderr_tail": "", "stderr_bytes": 0}]
        })
    }

    /// Both parses, as `Ok(())` or the error's message.
    fn both(bytes: &[u8]) -> (Result<(), String>, Result<(), String>) {
        let sdk = serde_json::from_slice::<windtunnel_sdk::model::Trace>(bytes)
            .map(drop)
            .map_err(|e| e.to_string());
        // As the scan parses it.
        let lean = crate::report::load::parse_json::<LeanTrace>(bytes)
            .map(drop)
            .map_err(|e| e.to_string());
        (sdk, lean)
    }

    /// Every place in `v`: a path of object keys and array indexes.
    fn places(v: &Value, at: &mut Vec<Value>, out: &mut Vec<Vec<Value>>) {
        match v {
            Value::Object(m) => {
                for (k, x) in m {
                    at.push(Value::String(k.clone()));
                    out.push(at.clone());
                    places(x, at, out);
                    at.pop();
                }
            }
            Value::Array(a) => {
                for (i, x) in a.iter().enumerate() {
                    at.push(Value::from(i));
                    out.push(at.clone());
                    places(x, at, out);
                    at.pop();
                }
            }
            _ => {}
        }
    }

    fn at<'a>(v: &'a mut Value, path: &[Value]) -> &'a mut Value {
        path.iter().fold(v, |v, p| match p {
            Value::String(k) => &mut v[k.as_str()],
            Value::Number(i) => &mut v[i.as_u64().unwrap() as usize],
            _ => unreachable!(),
        })
    }

    #[test]
    fn every_field_of_a_trace_is_checked_as_the_sdk_checks_it() {
        let full = full();
        let sdk: windtunnel_sdk::model::Trace = serde_json::from_value(full.clone()).unwrap();
        // The full trace really is full: serialized again, nothing is missing.
        assert_eq!(serde_json::to_value(&sdk).unwrap(), full);
        let mut paths = Vec::new();
        places(&full, &mut Vec::new(), &mut paths);
        let replacements = [
            json!(null),
            json!(true),
            json!(1),
            json!(-1),
            json!(4_294_967_296u64),
            json!(1.5),
            json!("s"),
            json!([]),
            json!([1]),
            json!({}),
        ];
        let mut checked = 0;
        for path in &paths {
            for r in &replacements {
                let mut v = full.clone();
                *at(&mut v, path) = r.clone();
                let bytes = serde_json::to_vec(&v).unwrap();
                let (a, b) = both(&bytes);
                assert_eq!(a, b, "{path:?} = {r}");
                checked += 1;
            }
            // And the field left out.
            if let Some((Value::String(key), parent)) = path.split_last() {
                let mut v = full.clone();
                at(&mut v, parent).as_object_mut().unwrap().remove(key);
                let (a, b) = both(&serde_json::to_vec(&v).unwrap());
                assert_eq!(a, b, "{path:?} removed");
            }
        }
        assert!(checked > 1000, "{checked}");
        // A trace as an array of its fields, in order, parses too (serde's sequence form).
        let fields: Vec<Value> = full.as_object().unwrap().values().cloned().collect();
        let (a, b) = both(&serde_json::to_vec(&fields).unwrap());
        assert_eq!(a, b);
        let (a, b) = both(&serde_json::to_vec(&fields[..3]).unwrap());
        assert_eq!(a, b);
        assert!(a.is_err());
    }

    #[test]
    fn what_json_values_allow_is_what_the_sdk_allows() {
        let text = serde_json::to_string(&full()).unwrap();
        let nested = format!("{}1{}", "[".repeat(200), "]".repeat(200));
        for (from, to) in [
            // Out of range, a lone surrogate, nesting past serde_json's limit, a bad escape.
            ("{\"a\":[1,2.5,null]}", "1e400"),
            ("{\"a\":[1,2.5,null]}", "\"\\ud800\""),
            ("{\"a\":[1,2.5,null]}", nested.as_str()),
            ("{\"a\":[1,2.5,null]}", "\"\\q\""),
            ("{\"a\":[1,2.5,null]}", "-0"),
            ("{\"a\":[1,2.5,null]}", "{\"k\":1,\"k\":2}"),
            // A duplicate field, in a typed struct and at the top.
            ("\"soul\":\"be nice\"", "\"soul\":\"a\",\"soul\":\"b\""),
            (
                "\"session_id\":\"sess\"",
                "\"session_id\":\"a\",\"session_id\":\"b\"",
            ),
            ("\"turn\":0,\"step\":0", "\"turn\":0,\"turn\":0,\"step\":0"),
            // Unknown fields are fine.
            (
                "\"session_id\":\"sess\"",
                "\"session_id\":\"sess\",\"x\":{\"y\":1e400}",
            ),
            (
                "\"error_kind\":\"timeout\"",
                "\"error_kind\":{\"timeout\":null}",
            ),
            ("\"error_kind\":\"timeout\"", "\"error_kind\":\"whatever\""),
        ] {
            assert!(text.contains(from), "{from}");
            let changed = text.replacen(from, to, 1);
            let (a, b) = both(changed.as_bytes());
            assert_eq!(a, b, "{to}");
        }
        // Bytes that are not UTF-8, in a string the report keeps and in one it drops.
        for at in ["\"demo\"", "\"be nice\""] {
            let i = text.find(at).unwrap() + 2;
            let mut bytes = text.clone().into_bytes();
            bytes.insert(i, 0xff);
            let (a, b) = both(&bytes);
            assert!(a.is_err());
            assert_eq!(a, b, "{at}");
        }
        for cut in [0, 1, 10, text.len() / 2, text.len() - 1] {
            let (a, b) = both(&text.as_bytes()[..cut]);
            assert!(a.is_err());
            assert_eq!(a, b, "cut at {cut}");
        }
        for foreign in [
            "{\"model\": \"gpt\", \"retries\": 3}",
            "[]",
            "null",
            "7",
            "\"x\"",
        ] {
            let (a, b) = both(foreign.as_bytes());
            assert!(a.is_err());
            assert_eq!(a, b, "{foreign}");
        }
    }
}
