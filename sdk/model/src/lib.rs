//! # Wind Tunnel's data model
//!
//! What a scenario asks ([`Scenario`]), who is tested ([`AgentConfig`]), what a run recorded
//! ([`Trace`]), how it was judged ([`Score`]) and what a scenario's runs add up to
//! ([`AggregateResult`]). `wt` writes these types to disk and hands them to hooks as JSON,
//! so there is exactly one definition of each: this crate, which `wt` and the hook SDK
//! (`windtunnel-sdk`, as `windtunnel_sdk::model`) both use. A tool that only reads a runs
//! directory needs this crate alone.
//!
//! # Forward compatibility
//!
//! A hook built today keeps reading what a newer `wt` sends it:
//!
//! - every type ignores fields it does not know (a newer `wt` may add some);
//! - every enum that may grow has an `Unknown` variant that a value from a newer `wt`
//!   deserializes to (a hook still finds the original in `Context::raw`);
//! - structs and enums that will grow are `#[non_exhaustive]`: build them with their
//!   constructors or `Default` and set the public fields, and give every `match` on an
//!   enum a `_` arm. New fields and variants then arrive in minor releases without breaking
//!   your code.
//!
//! Input files are a different matter: `wt` reads packs and agent files strictly, refusing
//! unknown fields, so a typo never passes silently. That is `wt`'s own business; hooks
//! only ever read the tolerant model.
//!
//! Every persisted document carries [`SCHEMA_VERSION`]. Fields added later are optional and
//! skipped when absent, so files written by older versions keep parsing.

/// Hidden since SDK 1.2, removed in SDK 2.0: `wt` reads its input files itself
/// (`serde_ignored`, in the host), and hooks only read the tolerant model. It still works
/// for 1.x callers (`windtunnel_sdk::model::strict`).
#[doc(hidden)]
pub mod strict;

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

/// Schema version of traces, scores and aggregates of this version of the model.
pub const SCHEMA_VERSION: u32 = 1;

fn default_runs() -> u32 {
    1
}

/// One scenario of a pack: what to inject and what each scorer layer expects.
///
/// ```
/// use windtunnel_model::Scenario;
///
/// let mut s = Scenario::new("order-status", ["Where is my order 1234?"]);
/// s.tags.push("read".into());
/// assert_eq!(s.runs, 1);
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Scenario {
    /// Slug id, `[a-z0-9_-]+`; never contains a dot.
    pub id: String,
    /// What the scenario is about, for people.
    #[serde(default)]
    pub description: String,
    /// How many times the scenario runs in a sweep.
    #[serde(default = "default_runs")]
    pub runs: u32,
    /// Free-form labels (`refund`, `write`, …).
    #[serde(default)]
    pub tags: Vec<String>,
    /// The user turns injected in order (none when a simulated [`Scenario::user`] opens
    /// the conversation).
    #[serde(default)]
    pub turns: Vec<String>,
    /// The fixture world: JSON state the scenario's tools read and change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub world: Option<Value>,
    /// Tools offered to the agent; each acts on the fixture world.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolSpec>,
    /// World checks that must hold before any run starts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub preconditions: Vec<WorldCheck>,
    /// What each scorer layer checks.
    #[serde(default)]
    pub expect: Expectations,
    /// An MCP server that is (part of) the world: its tools are offered beside `tools`, its
    /// state tool is what world checks read (since 1.4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub world_server: Option<WorldServer>,
    /// A simulated user that talks with the agent after the scripted `turns` (or instead
    /// of them). Optional: older plugins skip it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<SimulatedUser>,
}

/// A model across the table from the agent: it sees its instruction (never shown to the
/// agent) and the conversation with the roles swapped, and writes the next user message
/// until it says `stop` or `max_turns` user messages were written. Optional: older plugins skip it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct SimulatedUser {
    /// The pack's model (`[models.<name>]` in `pack.toml`) that plays the user.
    pub model: String,
    /// Who the user is and what they want; the agent never sees it.
    pub instruction: String,
    /// Most user messages the model writes (the scripted turns not counted).
    #[serde(default = "default_max_user_turns")]
    pub max_turns: u32,
    /// What the user model says to end the conversation.
    #[serde(default = "default_stop")]
    pub stop: String,
}

fn default_max_user_turns() -> u32 {
    10
}

fn default_stop() -> String {
    "###STOP###".to_owned()
}

/// What a model-graded check is shown of a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JudgeSees {
    /// The agent's final reply.
    Reply,
    /// Every turn (user message and reply) and every tool call with its result.
    #[default]
    Transcript,
    /// The transcript, and the world's state before and after.
    World,
}

/// A model-graded check of the outcome layer (`[[expect.judge]]`). Optional: older plugins skip it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct JudgeCheck {
    /// The pack's model (`[models.<name>]`) that grades.
    pub model: String,
    /// What a passing run does, in words.
    pub rubric: String,
    /// What the judge is shown.
    #[serde(default)]
    pub sees: JudgeSees,
    /// Gradings whose majority decides (odd).
    #[serde(default = "default_samples")]
    pub samples: u32,
}

fn default_samples() -> u32 {
    1
}

impl Scenario {
    /// A scenario with this id and these turns, run once, with no world, tools or
    /// expectations.
    pub fn new(id: impl Into<String>, turns: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Scenario {
            id: id.into(),
            description: String::new(),
            runs: 1,
            tags: Vec::new(),
            turns: turns.into_iter().map(Into::into).collect(),
            world: None,
            tools: Vec::new(),
            preconditions: Vec::new(),
            expect: Expectations::default(),
            world_server: None,
            user: None,
        }
    }
}

/// A tool the agent may call, and what it does to the fixture world.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ToolSpec {
    /// The name the agent calls it by.
    pub name: String,
    /// What the tool does, as offered to the model.
    #[serde(default)]
    pub description: String,
    /// JSON Schema of the arguments object, as offered to the model.
    #[serde(default = "empty_object_schema")]
    pub parameters: Value,
    /// What a call does to the world.
    pub effect: ToolEffect,
    /// Conditions a call must meet to run; the first that does not hold fails the call with
    /// its `error` (since 1.4).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub when: Vec<ToolCondition>,
}

impl ToolSpec {
    /// A tool with this name and effect, no description, and an empty arguments schema.
    pub fn new(name: impl Into<String>, effect: ToolEffect) -> Self {
        ToolSpec {
            name: name.into(),
            description: String::new(),
            parameters: empty_object_schema(),
            effect,
            when: Vec::new(),
        }
    }
}

fn empty_object_schema() -> Value {
    serde_json::json!({"type": "object", "properties": {}})
}

/// The effect of a tool call on the fixture world. Paths are dotted (`orders.1234.status`).
///
/// Serialized with a `kind` tag: `{"kind": "read", "path": "orders", "key_arg": "order_id"}`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum ToolEffect {
    /// Returns the value at `path`; with `key_arg`, at `path.<value of that argument>`.
    Read {
        /// Where to read.
        path: String,
        /// The argument whose value extends `path`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        key_arg: Option<String>,
    },
    /// Sets the value at `path` (extended by `key_arg` as for `Read`) to the argument
    /// `value_arg`, or to `value` when given. Returns the new value.
    Write {
        /// Where to write.
        path: String,
        /// The argument whose value extends `path`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        key_arg: Option<String>,
        /// The argument holding the value to write.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        value_arg: Option<String>,
        /// A fixed value to write.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        value: Option<Value>,
    },
    /// Appends the argument `value_arg` (or the whole arguments object) to the array at
    /// `path`. Returns the new length.
    Append {
        /// The array to append to.
        path: String,
        /// The argument to append; the whole arguments object when absent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        value_arg: Option<String>,
    },
    /// Returns the elements of the array (or the values of the object) at `path` whose
    /// fields equal the arguments `by` names: `by = { customer = "customer_id" }` selects
    /// the elements whose `customer` is the call's `customer_id` (since 1.4).
    Find {
        /// The array (or object) to search.
        path: String,
        /// Element field → the argument whose value it must equal.
        by: BTreeMap<String, String>,
    },
    /// A tool of the scenario's world server: the call is forwarded to it (since 1.4). Set
    /// by `wt` from the server's `tools/list`; a pack never declares it.
    Server {
        /// The world server's name.
        server: String,
    },
    /// An effect kind this version of the model does not know (from a newer `wt`).
    Unknown,
}

const EFFECT_KINDS: &[&str] = &["read", "write", "append", "find"];

// Written by hand rather than derived: derived internally tagged enums buffer their fields,
// which hides unknown fields from `strict::deserialize`. Reading the fields as one struct
// lets strict parsing (pack files) refuse typos while hooks ignore fields from newer hosts.
impl<'de> Deserialize<'de> for ToolEffect {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error as _;

        #[derive(Deserialize)]
        #[serde(rename = "ToolEffect")]
        struct Fields {
            kind: String,
            #[serde(default)]
            path: Option<String>,
            #[serde(default)]
            key_arg: Option<String>,
            #[serde(default)]
            value_arg: Option<String>,
            #[serde(default)]
            value: Option<Value>,
            #[serde(default)]
            by: Option<BTreeMap<String, String>>,
            #[serde(default)]
            server: Option<String>,
        }

        let f = Fields::deserialize(deserializer)?;
        let strict = strict::active();
        let refuse = |field: &str, present: bool| {
            if strict && present {
                Err(D::Error::custom(format!(
                    "field `{field}` does not apply to `{}` effects",
                    f.kind
                )))
            } else {
                Ok(())
            }
        };
        let path = |p: Option<String>| p.ok_or_else(|| D::Error::missing_field("path"));
        if f.kind != "find" {
            refuse("by", f.by.is_some())?;
        }
        match f.kind.as_str() {
            "read" => {
                refuse("value_arg", f.value_arg.is_some())?;
                refuse("value", f.value.is_some())?;
                Ok(ToolEffect::Read {
                    path: path(f.path)?,
                    key_arg: f.key_arg,
                })
            }
            "write" => Ok(ToolEffect::Write {
                path: path(f.path)?,
                key_arg: f.key_arg,
                value_arg: f.value_arg,
                value: f.value,
            }),
            "append" => {
                refuse("key_arg", f.key_arg.is_some())?;
                refuse("value", f.value.is_some())?;
                Ok(ToolEffect::Append {
                    path: path(f.path)?,
                    value_arg: f.value_arg,
                })
            }
            "find" => {
                refuse("key_arg", f.key_arg.is_some())?;
                refuse("value_arg", f.value_arg.is_some())?;
                refuse("value", f.value.is_some())?;
                Ok(ToolEffect::Find {
                    path: path(f.path)?,
                    by: f.by.ok_or_else(|| D::Error::missing_field("by"))?,
                })
            }
            // A world server's tools come from the server, never from a pack.
            "server" if !strict => Ok(ToolEffect::Server {
                server: f.server.unwrap_or_default(),
            }),
            other if strict => Err(D::Error::unknown_variant(other, EFFECT_KINDS)),
            _ => Ok(ToolEffect::Unknown),
        }
    }
}

/// A check on the fixture world: the value at `path` and what must hold of it — `equals`,
/// `exists`, `contains`, `matches` and the numeric bounds `gt`, `ge`, `lt`, `le`.
/// Every condition given must hold; a value that is absent or of the wrong kind for one
/// (`matches` on a number, `gt` on a string) fails it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct WorldCheck {
    /// A dotted path into the world; empty (or left out) for the whole value, such
    /// as a state call's result that is text rather than JSON.
    #[serde(default)]
    pub path: String,
    /// The value expected there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub equals: Option<Value>,
    /// Whether something must (or must not) be there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exists: Option<bool>,
    /// A substring of the string there, or an element of the array there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contains: Option<Value>,
    /// A regular expression (`regex` crate syntax) that the string there matches somewhere;
    /// anchor it with `^…$` for the whole string.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matches: Option<String>,
    /// The number there is greater than this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gt: Option<serde_json::Number>,
    /// The number there is greater than or equal to this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ge: Option<serde_json::Number>,
    /// The number there is less than this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lt: Option<serde_json::Number>,
    /// The number there is less than or equal to this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub le: Option<serde_json::Number>,
}

impl WorldCheck {
    /// The value at `path` must equal `value`.
    pub fn equals(path: impl Into<String>, value: impl Into<Value>) -> Self {
        WorldCheck {
            path: path.into(),
            equals: Some(value.into()),
            ..WorldCheck::default()
        }
    }

    /// Something must (`true`) or must not (`false`) be at `path`.
    pub fn exists(path: impl Into<String>, exists: bool) -> Self {
        WorldCheck {
            path: path.into(),
            exists: Some(exists),
            ..WorldCheck::default()
        }
    }
}

/// A condition a tool call must meet to run (`ToolSpec::when`): a check on the world
/// (`path`, where `{arg}` stands for the value of the call's argument `arg`) or on the call's
/// arguments (`arg`, a dotted path into them), with the precondition syntax (`equals`,
/// `exists`). When it does not hold, the call fails with `error` and changes nothing.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ToolCondition {
    /// A dotted path into the world; `{name}` is replaced by the argument `name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// A dotted path into the call's arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arg: Option<String>,
    /// The value expected there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub equals: Option<Value>,
    /// Whether something must (or must not) be there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exists: Option<bool>,
    /// What the agent is told when the condition does not hold.
    pub error: String,
}

/// An MCP server that serves (part of) a scenario's world (`[world_server]` in a scenario
/// or in `pack.toml`). `wt` starts it (`command`, over stdio) or connects to it (`url`,
/// streamable HTTP), offers its tools to the agent through `wt`'s own tool path, and reads
/// its state with the `state` call for world checks.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct WorldServer {
    /// The server's name in traces and errors (default: from its command or URL).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// The program and its arguments, started in the run's scratch directory;
    /// `{run_dir}` and `{pack_dir}` are replaced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// A streamable-HTTP MCP endpoint that runs on its own, instead of `command`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Environment of the server process; values may use `{run_dir}` and `{pack_dir}`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// The tools offered to the agent (default: every tool the server lists).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<String>>,
    /// Descriptions that replace the server's, by tool name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub descriptions: BTreeMap<String, String>,
    /// The call whose result is the world that checks read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<ServerCall>,
    /// Calls made before the first turn (not evidence).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub setup: Vec<ServerCall>,
    /// A directory (relative to the pack) copied into each run's scratch directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files: Option<String>,
    /// `run` (default): a fresh server per run; `lane`: one server per lane, with `reset`
    /// called before each run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per: Option<String>,
    /// Calls that bring a kept server back to its starting state (`per = "lane"`, `url`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reset: Vec<ServerCall>,
    /// Seconds the server may take to start and answer `initialize` (default 20).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_timeout_s: Option<f64>,
    /// Seconds one call may take (default 30).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_timeout_s: Option<f64>,
    /// What its confined process may do beyond the defaults (`command` servers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxSettings>,
}

/// A call `wt` itself makes to a world server (setup, reset, state).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ServerCall {
    /// The server's tool.
    pub tool: String,
    /// Its arguments.
    #[serde(default = "empty_object")]
    pub arguments: Value,
}

fn empty_object() -> Value {
    Value::Object(serde_json::Map::new())
}

/// A check on a file of the run's scratch directory after the last turn
/// (`expect.outcome.files`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct FileCheck {
    /// Relative to the run's scratch directory.
    pub path: String,
    /// Whether the file must (or must not) exist.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exists: Option<bool>,
    /// The whole text it must have.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub equals: Option<String>,
    /// Text it must contain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contains: Option<String>,
    /// A regular expression its text must match somewhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matches: Option<String>,
    /// A check on the file read as JSON, or as JSON Lines (an array of its lines).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json: Option<WorldCheck>,
    /// How `json` reads the file: `"json"` or `"jsonl"`. Left out, a file named
    /// `*.jsonl` or `*.ndjson` is JSON Lines and any other is JSON — never a guess from
    /// its content.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<String>,
}

/// What each scorer layer checks.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Expectations {
    /// The outcome layer.
    #[serde(default)]
    pub outcome: OutcomeExpect,
    /// The trajectory layer.
    #[serde(default)]
    pub trajectory: TrajectoryExpect,
    /// The constraint layer.
    #[serde(default)]
    pub constraint: ConstraintExpect,
    /// Model-graded checks, part of the outcome layer. Optional: older plugins skip it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub judge: Vec<JudgeCheck>,
}

/// Outcome layer: the final reply and the final world state.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct OutcomeExpect {
    /// Case-insensitive substrings the final reply must contain.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reply_contains: Vec<String>,
    /// Case-insensitive substrings the final reply must not contain.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reply_excludes: Vec<String>,
    /// Checks on the world after the last turn.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub world: Vec<WorldCheck>,
    /// Checks on files of the run's scratch directory after the last turn (since 1.4).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<FileCheck>,
}

/// Trajectory layer: which tools were called, and in which order.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct TrajectoryExpect {
    /// Tools the agent must call.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub required_tools: Vec<String>,
    /// The required tools must first appear in the listed order.
    #[serde(default)]
    pub ordered: bool,
}

/// Constraint layer: what the agent must not do.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ConstraintExpect {
    /// Tools the agent must never call.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub forbidden_tools: Vec<String>,
    /// Most tool calls allowed in the whole run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_steps: Option<u32>,
    /// Most tool calls allowed in any one turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_steps_per_turn: Option<u32>,
}

/// Sampling settings handed to the model.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Sampling {
    /// Sampling temperature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// Nucleus sampling mass.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    /// Most tokens in one completion.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Sampling seed, where the endpoint supports one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
}

fn default_turn_timeout() -> f64 {
    30.0
}
fn default_max_steps() -> u32 {
    8
}

/// The agent under test: which runtime drives it and what it is told.
///
/// ```
/// use windtunnel_model::AgentConfig;
///
/// let mut agent = AgentConfig::new("support-bot", "openai");
/// agent.model = Some("gpt-4o-mini".into());
/// assert_eq!(agent.turn_timeout_s, 30.0);
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct AgentConfig {
    /// The agent's label in traces and reports.
    pub label: String,
    /// `demo`, `openai`, `http` or `process`.
    pub runtime: String,
    /// Model name, where the runtime has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The system prompt.
    #[serde(default)]
    pub soul: String,
    /// Sampling settings.
    #[serde(default)]
    pub sampling: Sampling,
    /// Base URL (`openai`, `http`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// Name of the environment variable holding the API key. The key itself is never stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// Deadline of one turn, in seconds.
    #[serde(default = "default_turn_timeout")]
    pub turn_timeout_s: f64,
    /// Most model calls of the tool loop in one turn.
    #[serde(default = "default_max_steps")]
    pub max_steps: u32,
    /// Retries on HTTP 429/5xx, with backoff.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retries: Option<u32>,
    /// Demo runtime only: a fault mode (`leaky`, `forbidden-tool`, `slow`, `garbled`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fault: Option<String>,
    /// Largest response body accepted from the agent's endpoint, in bytes (default 8 MiB);
    /// a larger one ends the turn with a protocol error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_response_bytes: Option<u64>,
    /// `http` runtime: how many sessions the service holds at once, i.e. how many of a
    /// scenario's runs may be in flight together (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_sessions: Option<u32>,
    /// Most requests in flight to the endpoint at once, across all lanes (default: no cap).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrency: Option<u32>,
    /// Most requests a minute to the endpoint, across all lanes, evenly spaced (default: no
    /// cap).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests_per_minute: Option<u32>,
    /// `process` runtime: the agent's command line. With `{input}` in it, one process per
    /// turn (one-shot mode); without, one process per run speaking JSON lines (session mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// `process` runtime: variables set in the agent's environment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<BTreeMap<String, String>>,
    /// `process` runtime: names of variables copied from `wt`'s environment to the agent's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env_passthrough: Option<Vec<String>>,
    /// `process` runtime, one-shot mode: the reply is this field (a dotted path) of the JSON
    /// the process prints, instead of the whole of its stdout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_field: Option<String>,
    /// `process` runtime: deadline of a whole run, in seconds; at it the agent's process
    /// group is killed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_timeout_s: Option<f64>,
    /// `process` runtime: a directory where the agent keeps state, shown to state probes
    /// (`wt doctor`) as a listing of its files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_dir: Option<String>,
    /// `http` and `process` runtimes: whether the agent reaches the fixture world over MCP
    /// (default true). An agent that cannot is refused scenarios that judge the world or
    /// tool calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp: Option<bool>,
}

impl AgentConfig {
    /// An agent with this label and runtime and every other setting at its default.
    pub fn new(label: impl Into<String>, runtime: impl Into<String>) -> Self {
        AgentConfig {
            label: label.into(),
            runtime: runtime.into(),
            model: None,
            soul: String::new(),
            sampling: Sampling::default(),
            endpoint: None,
            api_key_env: None,
            turn_timeout_s: default_turn_timeout(),
            max_steps: default_max_steps(),
            retries: None,
            fault: None,
            max_response_bytes: None,
            max_sessions: None,
            max_concurrency: None,
            requests_per_minute: None,
            command: None,
            env: None,
            env_passthrough: None,
            reply_field: None,
            run_timeout_s: None,
            state_dir: None,
            mcp: None,
        }
    }
}

/// What the agent saw, frozen before the first inject.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Surface {
    /// The system prompt.
    pub soul: String,
    /// Tool schemas as offered to the model.
    pub tools: Vec<Value>,
    /// Model name, where the runtime has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Sampling settings.
    pub sampling: Sampling,
}

/// Which agent a trace is about (the config minus anything secret).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct AgentRef {
    /// The agent's label.
    pub label: String,
    /// Its runtime.
    pub runtime: String,
    /// Its model, where the runtime has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

/// One injected turn and what came back.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct TurnRecord {
    /// 0-based index of the turn within its run.
    pub index: u32,
    /// The text injected.
    pub input: String,
    /// The normalized reply; `None` when the turn produced none.
    pub reply: Option<String>,
    /// Wall time of the turn.
    pub latency_ms: u64,
    /// A transport or protocol error that ended the turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What kind of error `error` is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_kind: Option<TurnErrorKind>,
    /// Requests of this turn that were retried, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub retries: Vec<Retry>,
}

/// Why a turn ended without a reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum TurnErrorKind {
    /// The turn's deadline passed.
    Timeout,
    /// The agent could not be reached: connection refused or reset, HTTP 429/5xx.
    Transport,
    /// The agent answered outside its protocol: malformed JSON, a missing field, a reply
    /// over the size limit, another session's reply.
    Protocol,
    /// The agent answered and failed: it declared an error, crashed, or kept calling tools.
    Agent,
    /// `wt` was stopped (Ctrl-C, SIGTERM, SIGHUP) and cut the turn after its grace period.
    Interrupted,
    /// A kind this version of the model does not know (written by a newer `wt`).
    #[serde(other)]
    Unknown,
}

impl TurnErrorKind {
    /// `timeout`, `transport`, `protocol`, `agent`, `interrupted` or `unknown`.
    pub fn as_str(self) -> &'static str {
        match self {
            TurnErrorKind::Timeout => "timeout",
            TurnErrorKind::Transport => "transport",
            TurnErrorKind::Protocol => "protocol",
            TurnErrorKind::Agent => "agent",
            TurnErrorKind::Interrupted => "interrupted",
            TurnErrorKind::Unknown => "unknown",
        }
    }
}

impl std::fmt::Display for TurnErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A request that failed and was tried again.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Retry {
    /// 1 for the first retry.
    pub attempt: u32,
    /// Why the previous attempt failed.
    pub error: String,
    /// How long `wt` waited before this attempt (backoff, or the server's `Retry-After`).
    pub wait_ms: u64,
}

/// A tool call the agent made, as executed against the fixture world.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ToolCall {
    /// The turn it happened in.
    pub turn: u32,
    /// 0-based index of the call within its turn.
    pub step: u32,
    /// The tool's name.
    pub name: String,
    /// The arguments the agent passed.
    pub arguments: Value,
    /// What the tool returned.
    pub result: Value,
    /// Why the call failed, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Which door the call came through when it was not the harness's own tool loop
    /// (`mcp`); absent for the built-in loop.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// The world server that executed the call, when a world server did (since 1.4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
}

/// How an agent process of the `process` runtime ended.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct AgentProcess {
    /// The turn it served (one-shot mode); absent for a run's session process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<u32>,
    /// `exited with status N`, `killed by signal N`, or how `wt` ended it.
    pub exit: String,
    /// The exit status, when it exited by itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<i32>,
    /// Why `wt` killed its process group, when it did (`turn timeout`, `run timeout`,
    /// `end of run`, `interrupted`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub killed: Option<String>,
    /// The last bytes of its stderr (at most 4 KiB, cut at a character boundary).
    pub stderr_tail: String,
    /// How many bytes it wrote to stderr in all.
    pub stderr_bytes: u64,
    /// What confined it; absent from older traces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxRecord>,
}

/// An `a2a` run's record: the agent's card as `wt` read it, the protocol it spoke, the
/// contexts of the run, every A2A call, what the replies carried besides text, and the tasks
/// a cut turn left behind.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct A2aRecord {
    pub card: A2aCard,
    /// The protocol generation spoken: `1.0` or `0.3`.
    pub protocol: String,
    /// Whether turns were streamed.
    pub streaming: bool,
    /// The JSON-RPC endpoint the calls went to.
    pub endpoint: String,
    /// The run's contexts, in order: one, and one more after each reset.
    pub context_ids: Vec<String>,
    /// Every A2A call of the run, in order.
    pub calls: Vec<A2aCall>,
    /// Data parts and file parts of the replies (files by reference: never fetched).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parts: Vec<A2aPart>,
    /// Tasks a cut turn left behind (the deadline came, or `wt` stopped): what became of them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub orphans: Vec<A2aOrphan>,
}

/// An agent card, as recorded.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct A2aCard {
    /// Where it was read.
    pub url: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Its `capabilities` object (streaming, push notifications, extensions).
    #[serde(default)]
    pub capabilities: serde_json::Value,
    /// The interfaces it offers.
    pub interfaces: Vec<A2aInterface>,
    /// SHA-256 of its bytes, `sha256:<hex>`.
    pub digest: String,
}

/// One interface an agent card offers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct A2aInterface {
    pub url: String,
    /// `JSONRPC`, `HTTP+JSON`, `GRPC`.
    pub binding: String,
    /// `1.0`, `0.3`, …
    pub protocol_version: String,
}

/// One A2A call.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct A2aCall {
    /// The turn it served; absent for a call between turns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<u32>,
    /// `SendMessage`, `message/stream`, `CancelTask`, …
    pub method: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    /// The task's last state, as the agent said it (`completed`, `input-required`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// Stream events read (streamed calls).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub events: Option<u32>,
    pub latency_ms: u64,
    /// What went wrong, when something did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A non-text part of a reply.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct A2aPart {
    pub turn: u32,
    /// `data` or `file`.
    pub kind: String,
    /// A data part's value (bounded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<serde_json::Value>,
    /// A file part's URL, as given (never fetched).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uri: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    /// The size of a file part's inline bytes (base64-decoded length estimate); its bytes
    /// are not kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inline_bytes: Option<u64>,
}

/// A task a cut turn left behind.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct A2aOrphan {
    pub turn: u32,
    /// Absent when the agent never said which task it was (a send that did not answer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    /// Its state when the turn was cut.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// Whether `CancelTask` was sent and accepted.
    pub canceled: bool,
    /// What happened: as the converse caveat says, an abandoned task may still be worked on.
    pub note: String,
}

/// `[sandbox]` of a `process` agent or a world server: what its confined process may do
/// beyond the defaults (docs/sandbox.md).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct SandboxSettings {
    /// More paths it may read (and run), e.g. a virtualenv under the home directory.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub read: Vec<std::path::PathBuf>,
    /// More paths it may write.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub write: Vec<std::path::PathBuf>,
    /// The network it may reach.
    #[serde(default)]
    pub network: SandboxNetwork,
    /// Processes and threads at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_processes: Option<u64>,
    /// Address space, in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_memory_bytes: Option<u64>,
    /// The largest file it may write, in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_file_bytes: Option<u64>,
    /// Open files at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_open_files: Option<u64>,
}

/// The network a confined process may reach.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum SandboxNetwork {
    /// Only its run's own loopback ports (the gateway, the MCP world).
    #[default]
    Run,
    /// Anything: opened deliberately, and recorded.
    Allow,
}

/// What `wt` enforced on a process it started for a run (an agent's, a world server's): the
/// kernel mechanisms, the paths it may read and write, the ports it may connect to, its
/// limits, and what could not be enforced here.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SandboxRecord {
    /// `auto`, `require` or `off` (`--sandbox`).
    pub mode: String,
    /// Whether any confinement was applied (false with `off`, or where the kernel offers none).
    pub enforced: bool,
    /// The Landlock ABI the rules were enforced at; absent without Landlock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub landlock_abi: Option<u32>,
    /// Whether the process ran in a user namespace of its own (no capabilities outside it,
    /// even when `wt` runs as root).
    #[serde(default)]
    pub user_namespace: bool,
    /// Whether `no_new_privs` was set (no setuid, no file capabilities).
    #[serde(default)]
    pub no_new_privs: bool,
    /// Whether the program ran in the C library's secure-execution mode: `wt` runs as root
    /// and the process's real user is `nobody`, so that its process limit holds; the dynamic
    /// loader then ignores `LD_LIBRARY_PATH`, `LD_PRELOAD` and `TMPDIR` (docs/sandbox.md).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub secure_execution: bool,
    /// The paths it may read (and run), beneath each.
    #[serde(default)]
    pub read: Vec<String>,
    /// Credential locations beneath those paths that it may not read all the same.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unreadable: Vec<String>,
    /// The paths it may write, beneath each.
    #[serde(default)]
    pub write: Vec<String>,
    /// `run` (only the run's own ports), `none` (an isolated hook's process: no port at all)
    /// or `allow` (the network was opened by its sandbox settings).
    #[serde(default)]
    pub network: String,
    /// The TCP ports it may connect to (on loopback: its run's doors).
    #[serde(default)]
    pub connect_ports: Vec<u16>,
    /// The TCP ports it may listen on (an `a2a` agent `wt` starts: its own).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bind_ports: Vec<u16>,
    /// Its limits: `processes`, `address_space_bytes`, `file_size_bytes`, `open_files`.
    #[serde(default)]
    pub limits: std::collections::BTreeMap<String, u64>,
    /// What was asked for and could not be enforced on this kernel.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_enforced: Vec<String>,
}

/// Evidence captured during a run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Evidence {
    /// Every tool call, in order.
    pub tool_calls: Vec<ToolCall>,
    /// Every model call `wt` saw, in order (the `openai` runtime's own calls, and calls
    /// through the model gateway of `process` and `http` agents). Since SDK 1.3.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub model_calls: Vec<ModelCall>,
}

/// One call to a model: what was asked, what came back, and what it cost in tokens.
/// Since SDK 1.3.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ModelCall {
    /// The turn it happened in; absent for a call made while no turn was in progress
    /// (such a call is refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<u32>,
    /// How many of the turn's tool calls were recorded before this call ended: its place
    /// among them (`tool_calls` with `turn` equal and `step` below this came first).
    pub after_tool_calls: u32,
    /// `openai` (the harness's own tool loop) or `gateway` (an agent's call through `wt`'s
    /// model gateway).
    pub source: String,
    /// The model the request asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The model the response says served it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub served_model: Option<String>,
    /// The response's `id`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_id: Option<String>,
    /// The response's `system_fingerprint`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_fingerprint: Option<String>,
    /// Was the response streamed (server-sent events)?
    #[serde(default)]
    pub stream: bool,
    /// The request's messages, bounded (see `truncated`).
    #[serde(default)]
    pub messages: Value,
    /// The names of the tools the request offered.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<String>,
    /// The response's first choice: the message (a streamed response assembled), bounded.
    #[serde(default)]
    pub response: Value,
    /// Why the model stopped: `stop`, `tool_calls`, `length`, `content_filter`, ….
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<String>,
    /// The model's refusal, when it refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refusal: Option<String>,
    /// Tokens, as the response reported them; absent when it reported none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<TokenUsage>,
    /// Wall time from the request to the end of the response.
    pub latency_ms: u64,
    /// Time to the first byte of the response body (streamed responses).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_ms: Option<u64>,
    /// Why the call failed or was refused, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Attempts of this call that failed and were tried again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub retries: Vec<Retry>,
    /// Request or response parts cut to keep the trace bounded (`messages`, `response`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub truncated: Vec<String>,
}

/// Token counts of one model call, or summed over several. Since SDK 1.3.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct TokenUsage {
    /// Input tokens (`prompt_tokens`).
    pub prompt_tokens: u64,
    /// Output tokens (`completion_tokens`).
    pub completion_tokens: u64,
    /// Input tokens served from the provider's cache (`prompt_tokens_details.cached_tokens`).
    #[serde(default)]
    pub cached_tokens: u64,
    /// Output tokens spent on reasoning (`completion_tokens_details.reasoning_tokens`).
    #[serde(default)]
    pub reasoning_tokens: u64,
}

impl TokenUsage {
    /// Counts from an OpenAI-style `usage` object; `None` when it has neither count.
    pub fn from_openai(usage: &Value) -> Option<TokenUsage> {
        let n = |p: &str| usage.pointer(p).and_then(Value::as_u64);
        let (prompt, completion) = (n("/prompt_tokens"), n("/completion_tokens"));
        if prompt.is_none() && completion.is_none() {
            return None;
        }
        Some(TokenUsage {
            prompt_tokens: prompt.unwrap_or(0),
            completion_tokens: completion.unwrap_or(0),
            cached_tokens: n("/prompt_tokens_details/cached_tokens").unwrap_or(0),
            reasoning_tokens: n("/completion_tokens_details/reasoning_tokens").unwrap_or(0),
        })
    }

    /// Adds `other` to these counts.
    pub fn add(&mut self, other: &TokenUsage) {
        self.prompt_tokens += other.prompt_tokens;
        self.completion_tokens += other.completion_tokens;
        self.cached_tokens += other.cached_tokens;
        self.reasoning_tokens += other.reasoning_tokens;
    }
}

/// What a run's model calls added up to, in its score. Since SDK 1.3.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RunUsage {
    /// Model calls recorded.
    pub model_calls: u64,
    /// Of them, calls whose response reported no usage.
    #[serde(default)]
    pub unreported: u64,
    /// The tokens of the calls that reported usage.
    pub tokens: TokenUsage,
    /// Their cost in US dollars, from the agent config's `[pricing]`; absent without prices,
    /// and when a call reported no usage. Rounded to [`COST_DECIMALS`] places ([`round_cost`]).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "serialize_cost"
    )]
    pub cost_usd: Option<f64>,
    /// With prices, why there is no cost: which calls reported no usage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_unknown: Option<String>,
}

/// Decimal places of a cost in US dollars (a billionth of a dollar): finer than one token at
/// any listed price, and free of the binary float's noise (`1.6800000000000002e-05`).
pub const COST_DECIMALS: i32 = 9;

/// A cost in US dollars rounded to [`COST_DECIMALS`] places: what every output shows.
pub fn round_cost(usd: f64) -> f64 {
    let scale = 10f64.powi(COST_DECIMALS);
    (usd * scale).round() / scale
}

fn serialize_cost<S: serde::Serializer>(c: &Option<f64>, s: S) -> Result<S::Ok, S::Error> {
    match c {
        Some(c) => s.serialize_some(&round_cost(*c)),
        None => s.serialize_none(),
    }
}

/// The fixture world before the first turn and after the last.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct WorldObservation {
    /// Before the first turn.
    pub before: Value,
    /// After the last turn.
    pub after: Value,
    /// The files `expect.outcome.files` checks, as found after the last turn (since 1.4).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub files: BTreeMap<String, ObservedFile>,
    /// The world server of the run, and how it ended (since 1.4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<WorldServerRecord>,
}

/// A file of the run's scratch directory as found after the last turn.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ObservedFile {
    /// Was there a regular file?
    pub exists: bool,
    /// Its size.
    #[serde(default)]
    pub bytes: u64,
    /// Its text, when it is UTF-8 and small enough to keep.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Why the text is not kept (too large, not UTF-8, not a regular file, a link).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// A run's world server: which, and how its process ended.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct WorldServerRecord {
    /// Its name.
    pub name: String,
    /// How its process ended (`command` servers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit: Option<String>,
    /// The last bytes it wrote to stderr.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub stderr_tail: String,
    /// How many bytes it wrote to stderr in all.
    #[serde(default)]
    pub stderr_bytes: u64,
    /// What confined its process (`command` servers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxRecord>,
}

/// Where an active hook came from, recorded in each trace when hooks are active.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct HookProvenance {
    /// The hook's name.
    pub name: String,
    /// `built-in`, or the path of the plugin library.
    pub source: String,
    /// The plugin library's version.
    pub version: String,
    /// The SDK version the library was built against.
    pub sdk_version: String,
    /// SHA-256 of the library file; absent for built-ins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// The resolved `WT_<HOOK>_*` settings.
    #[serde(default)]
    pub settings: BTreeMap<String, String>,
    /// What confined the hook's process, when it runs isolated (`--isolate-hooks`); absent
    /// in-process and in older traces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxRecord>,
}

/// A turn a guard denied.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Denial {
    /// The turn that was denied.
    pub turn: u32,
    /// The guard that denied it.
    pub guard: String,
    /// The guard's machine-readable reason.
    pub code: String,
    /// The guard's message for people.
    pub message: String,
    /// `denied`, or the guard failure that denied (`panic`, `error`, `timeout`).
    pub kind: String,
}

/// Everything one run recorded.
///
/// ```
/// use windtunnel_model::{Trace, TurnRecord};
///
/// let mut trace = Trace::new("run-1", "order-status");
/// let mut turn = TurnRecord::default();
/// turn.input = "Where is my order?".into();
/// turn.reply = Some("It shipped yesterday.".into());
/// trace.turns.push(turn);
/// assert_eq!(trace.turns.len(), 1);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Trace {
    /// [`SCHEMA_VERSION`] of the writer.
    pub schema_version: u32,
    /// The run's id.
    pub run_id: String,
    /// The id of the sweep (`wt run` invocation) the run belongs to.
    pub sweep_id: String,
    /// The scenario's id.
    pub scenario_id: String,
    /// 0-based index of the run within its scenario.
    pub run_index: u32,
    /// The agent session the run used.
    pub session_id: String,
    /// The agent under test.
    pub agent: AgentRef,
    /// RFC 3339 start time.
    pub started_at: String,
    /// RFC 3339 end time.
    pub ended_at: String,
    /// What the agent saw.
    pub surface: Surface,
    /// The injected turns, in order.
    pub turns: Vec<TurnRecord>,
    /// Tool calls and other evidence.
    pub evidence: Evidence,
    /// The fixture world before and after.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub world: Option<WorldObservation>,
    /// Non-fatal diagnostics, e.g. `hook:<name>: <message>`.
    #[serde(default)]
    pub worker_warnings: Vec<String>,
    /// A run-level error that kept the run from finishing (reset failed, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The policy revision in force when guards were active.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_revision: Option<String>,
    /// The turn a guard denied, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub denial: Option<Denial>,
    /// Provenance of the active hooks; absent when none was active.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hooks: Option<Vec<HookProvenance>>,
    /// The agent processes of the run and how each ended (`process` runtime, and an `a2a`
    /// agent `wt` started).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub processes: Vec<AgentProcess>,
    /// What an `a2a` agent's card said and every A2A call of the run; absent for other
    /// runtimes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub a2a: Option<A2aRecord>,
    /// The name of the pack the scenario came from; absent in traces of older `wt`s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pack: Option<String>,
    /// `K/N` when the run was made by shard K of a sweep run in N shards;
    /// absent when the sweep was not sharded, and in traces of older `wt`s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<String>,
    /// `sha256:<hex>` of the scenario's definition as run (turns, expectations, world,
    /// tools, everything but its run count), canonical JSON with sorted keys: equal digests
    /// are the same test; absent in traces of older `wt`s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scenario_digest: Option<String>,
    /// How the simulated user's side of the conversation went, when the scenario has one.
    /// Optional: older plugins skip it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<UserRecord>,
    /// How many times the run was made, when more than once: `wt run --retry-errors` made
    /// it again after it ended ERROR on the wiring or harness rung. The trace is its last
    /// attempt's. Optional: older plugins skip it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempts: Option<u32>,
    /// The attempts before the last one, in order, each with why it was ERROR. Optional:
    /// older plugins skip it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub earlier_attempts: Vec<EarlierAttempt>,
    /// The run was cut when `wt` stopped (Ctrl-C, SIGTERM, SIGHUP) and could not be judged:
    /// `wt run --resume` makes it again. Optional: older plugins skip it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub interrupted: bool,
}

/// An attempt of a run that ended ERROR and was made again (`--retry-errors`). Optional:
/// older plugins skip it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct EarlierAttempt {
    /// 1 for the first attempt.
    pub attempt: u32,
    /// Why it was ERROR.
    pub error: String,
    pub started_at: String,
    pub ended_at: String,
    /// What the agent's model calls of that attempt added up to (the score's `usage` is the
    /// last attempt's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<RunUsage>,
    /// How long `wt` waited before the next attempt (0 under `WT_FIXED_CLOCK`).
    pub wait_ms: u64,
}

/// Why a simulated user's conversation ended.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum UserEnded {
    /// It said its stop word.
    Stop,
    /// It wrote `max_turns` messages.
    #[default]
    MaxTurns,
    /// A turn failed or the run was cut.
    RunEnded,
    /// Its model failed (the run is ERROR).
    Error,
    /// A reason this version of the model does not know (from a newer `wt`).
    #[serde(other)]
    Unknown,
}

impl UserEnded {
    /// `stop`, `max_turns`, `run_ended`, `error` or `unknown`, as written in a trace.
    pub fn as_str(self) -> &'static str {
        match self {
            UserEnded::Stop => "stop",
            UserEnded::MaxTurns => "max_turns",
            UserEnded::RunEnded => "run_ended",
            UserEnded::Error => "error",
            UserEnded::Unknown => "unknown",
        }
    }
}

impl std::fmt::Display for UserEnded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A judge's verdict on one check, or one vote of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum JudgeVerdict {
    Pass,
    Fail,
    /// A verdict this version of the model does not know (from a newer `wt`, or an edited
    /// file): never counted as either.
    #[serde(other)]
    Unknown,
}

impl JudgeVerdict {
    /// `pass`, `fail` or `unknown`, as written in a score.
    pub fn as_str(self) -> &'static str {
        match self {
            JudgeVerdict::Pass => "pass",
            JudgeVerdict::Fail => "fail",
            JudgeVerdict::Unknown => "unknown",
        }
    }
}

impl std::fmt::Display for JudgeVerdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a simulated user did in a run. Optional: older plugins skip it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct UserRecord {
    /// The pack's model that played the user.
    pub model: String,
    /// User messages it wrote (injected as turns after the scripted ones).
    pub turns: u32,
    /// Why the conversation with it ended.
    pub ended_by: UserEnded,
    /// Whether the user model ended the conversation itself (said its stop word) rather
    /// than `wt` ending it.
    pub user_gave_up: bool,
}

impl Trace {
    /// An empty trace of this run and scenario, at the current [`SCHEMA_VERSION`].
    pub fn new(run_id: impl Into<String>, scenario_id: impl Into<String>) -> Self {
        Trace {
            schema_version: SCHEMA_VERSION,
            run_id: run_id.into(),
            scenario_id: scenario_id.into(),
            ..Trace::default()
        }
    }
}

/// The verdict of a run.
///
/// ```
/// use windtunnel_model::Verdict;
///
/// fn label(v: Verdict) -> &'static str {
///     match v {
///         Verdict::Pass => "green",
///         Verdict::Fail => "red",
///         _ => "grey", // Error, Unknown, and whatever a later wt adds
///     }
/// }
/// assert_eq!(label(Verdict::Error), "grey");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
#[non_exhaustive]
pub enum Verdict {
    /// Every layer passed.
    Pass,
    /// A layer failed.
    Fail,
    /// The run could not be judged (transport failure, denied turn, …).
    Error,
    /// A verdict this version of the model does not know (from a newer `wt`).
    #[serde(other)]
    Unknown,
}

impl Verdict {
    /// `PASS`, `FAIL`, `ERROR` or `UNKNOWN`.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Pass => "PASS",
            Verdict::Fail => "FAIL",
            Verdict::Error => "ERROR",
            Verdict::Unknown => "UNKNOWN",
        }
    }
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One scorer layer's result.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct LayerResult {
    /// Whether the layer passed.
    pub passed: bool,
    /// What a person can act on: why it failed, or what was checked.
    pub detail: String,
    /// The steps of the transcript its problems happened at (a forbidden tool call, a turn
    /// without a reply, a truncated model call), in the order `detail` names them; a problem
    /// of the run as a whole points nowhere. Optional: older plugins skip it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub at: Vec<StepRef>,
}

impl LayerResult {
    /// A passing layer.
    pub fn pass(detail: impl Into<String>) -> Self {
        LayerResult {
            passed: true,
            detail: detail.into(),
            at: Vec::new(),
        }
    }

    /// A failing layer and why.
    pub fn fail(detail: impl Into<String>) -> Self {
        LayerResult {
            passed: false,
            detail: detail.into(),
            at: Vec::new(),
        }
    }
}

/// A step of a run's transcript that a layer's result points at, and what is wrong there.
/// Optional: older plugins skip it.
///
/// Serialized flat, the step's `kind` beside its fields:
/// `{"kind": "tool_call", "turn": 1, "step": 2, "problem": "forbidden tool"}`.
///
/// ```
/// use windtunnel_model::{Step, StepRef};
///
/// let at = StepRef::new(Step::ToolCall { turn: 1, step: 2 }, "forbidden tool");
/// let json = serde_json::to_value(&at).unwrap();
/// assert_eq!(json["kind"], "tool_call");
/// assert_eq!(serde_json::from_value::<StepRef>(json).unwrap(), at);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct StepRef {
    /// The step.
    #[serde(flatten)]
    pub step: Step,
    /// What is wrong there, in a few words (`forbidden tool`, `empty reply`).
    #[serde(default)]
    pub problem: String,
}

impl StepRef {
    /// A pointer at `step`, saying what is wrong there.
    pub fn new(step: Step, problem: impl Into<String>) -> Self {
        StepRef {
            step,
            problem: problem.into(),
        }
    }
}

/// A step of a run's transcript, named as the trace names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Step {
    /// A tool call, by its [`ToolCall::turn`] and [`ToolCall::step`].
    ToolCall {
        /// The call's turn.
        turn: u32,
        /// The call's step in its turn.
        step: u32,
    },
    /// A model call, by its place in `evidence.model_calls` (the first is 0).
    ModelCall {
        /// The call's index.
        index: u32,
    },
    /// A turn (its agent's reply or error), by its [`TurnRecord::index`].
    Turn {
        /// The turn's index.
        turn: u32,
    },
    /// A kind of step this version of the model does not know (from a newer `wt`).
    #[serde(other)]
    Unknown,
}

/// The four layers, in reporting order.
pub const LAYERS: [&str; 4] = ["outcome", "trajectory", "constraint", "integrity"];

/// How a run was judged.
///
/// ```
/// use windtunnel_model::{LayerResult, Score, Verdict};
///
/// let mut score = Score::new("run-1", "order-status", Verdict::Fail);
/// score.constraint = LayerResult::fail("called forbidden tool `issue_refund`");
/// assert_eq!(score.failed_layers(), ["constraint"]);
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Score {
    /// [`SCHEMA_VERSION`] of the writer.
    pub schema_version: u32,
    /// The run's id.
    pub run_id: String,
    /// The scenario's id.
    pub scenario_id: String,
    /// The verdict.
    pub verdict: Verdict,
    /// Did the run achieve the scenario's goal?
    pub outcome: LayerResult,
    /// Did it take the expected steps?
    pub trajectory: LayerResult,
    /// Did it stay within limits?
    pub constraint: LayerResult,
    /// Is the evidence sound?
    pub integrity: LayerResult,
    /// Why the run is ERROR, when it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The run's model calls and tokens; absent when `wt` saw no model call. Since SDK 1.3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<RunUsage>,
    /// The gradings of the scenario's model-graded checks, in order. Optional: older plugins skip it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub judges: Vec<JudgeGrade>,
    /// What the evaluation itself cost: the simulated user's and the judges' model calls
    /// (the agent's own are in `usage`). Optional: older plugins skip it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eval_usage: Option<RunUsage>,
}

/// One model-graded check of a run: its verdict, the votes and the judge's reasoning.
/// Optional: older plugins skip it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct JudgeGrade {
    /// The check's index in the scenario's `[[expect.judge]]`.
    pub check: u32,
    /// The pack's model that graded.
    pub model: String,
    /// The majority of the votes; absent when the judge failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<JudgeVerdict>,
    /// Each grading's verdict, in order.
    #[serde(default)]
    pub votes: Vec<JudgeVerdict>,
    /// Each grading's reasoning, in order.
    #[serde(default)]
    pub reasoning: Vec<String>,
    /// Why there is no verdict: the judge's answer could not be read after one re-ask, or
    /// its call failed. The run is ERROR then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// How many of the gradings were read from an earlier grading rather than asked for
    /// (kept as it was when `wt rescore` reuses a stored grade whole).
    #[serde(default)]
    pub cached: u32,
    /// `sha256:<hex>` of the judge (the model's settings and the rubric): what a calibration
    /// is of.
    pub judge: String,
    /// What the judge was shown was cut to fit its bound; says what.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_cut: Option<String>,
    /// `sha256:<hex>` of what the judge read: `wt rescore` reuses these gradings only for the
    /// same judge and the same material.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub material: String,
    /// The model calls made for this check (none when every grading was cached).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub calls: Vec<ModelCall>,
}

impl Score {
    /// A score with this verdict whose four layers pass with an empty detail.
    pub fn new(
        run_id: impl Into<String>,
        scenario_id: impl Into<String>,
        verdict: Verdict,
    ) -> Self {
        Score {
            schema_version: SCHEMA_VERSION,
            run_id: run_id.into(),
            scenario_id: scenario_id.into(),
            verdict,
            outcome: LayerResult::pass(""),
            trajectory: LayerResult::pass(""),
            constraint: LayerResult::pass(""),
            integrity: LayerResult::pass(""),
            error: None,
            usage: None,
            judges: Vec::new(),
            eval_usage: None,
        }
    }

    /// The layers with their names, in reporting order.
    pub fn layers(&self) -> [(&'static str, &LayerResult); 4] {
        [
            ("outcome", &self.outcome),
            ("trajectory", &self.trajectory),
            ("constraint", &self.constraint),
            ("integrity", &self.integrity),
        ]
    }

    /// Names of the layers that failed.
    pub fn failed_layers(&self) -> Vec<&'static str> {
        self.layers()
            .into_iter()
            .filter(|(_, l)| !l.passed)
            .map(|(n, _)| n)
            .collect()
    }
}

/// Latency over a scenario's turns, in milliseconds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct LatencyStats {
    /// How many turns were timed.
    pub count: u64,
    /// Fastest turn.
    pub min_ms: u64,
    /// Mean turn.
    pub mean_ms: u64,
    /// Median turn.
    pub p50_ms: u64,
    /// 95th percentile.
    pub p95_ms: u64,
    /// Slowest turn.
    pub max_ms: u64,
}

/// What a scenario's runs add up to.
///
/// ```
/// use windtunnel_model::AggregateResult;
///
/// let mut agg = AggregateResult::new("order-status");
/// agg.runs = 5;
/// agg.passed = 3;
/// agg.failed = 2;
/// assert_eq!(agg.pass_rate(), Some(0.6));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct AggregateResult {
    /// [`SCHEMA_VERSION`] of the writer.
    pub schema_version: u32,
    /// The scenario's id.
    pub scenario_id: String,
    /// Runs attempted.
    pub runs: u32,
    /// Runs whose verdict is PASS.
    pub passed: u32,
    /// Runs whose verdict is FAIL.
    pub failed: u32,
    /// Runs that could not be judged (ERROR).
    pub errored: u32,
    /// Per layer, how many runs failed it.
    pub layer_failures: BTreeMap<String, u32>,
    /// Turn latency over all runs.
    pub latency: LatencyStats,
    /// Why the scenario could not run at all (provisioning failed, precondition broken).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Runs that took more than one attempt (`wt run --retry-errors`), each counted once
    /// above, by its last attempt. Optional: older plugins skip it.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub retried: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl AggregateResult {
    /// An empty aggregate of this scenario, at the current [`SCHEMA_VERSION`].
    pub fn new(scenario_id: impl Into<String>) -> Self {
        AggregateResult {
            schema_version: SCHEMA_VERSION,
            scenario_id: scenario_id.into(),
            ..AggregateResult::default()
        }
    }

    /// `passed / runs`; `None` when nothing ran.
    pub fn pass_rate(&self) -> Option<f64> {
        (self.runs > 0).then(|| f64::from(self.passed) / f64::from(self.runs))
    }
}

/// Is `s` a valid slug (`[a-z0-9_-]+`, at most 64 characters)? Hook names, labels and
/// scenario ids must be; a slug can never contain a dot, which the sidecar rule relies on.
///
/// ```
/// assert!(windtunnel_model::is_slug("acme_state-probe2"));
/// assert!(!windtunnel_model::is_slug("Acme.probe"));
/// ```
pub fn is_slug(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn slugs() {
        assert!(is_slug("acme_state-probe2"));
        for bad in ["", "a.b", "A", "x y", "é", &"a".repeat(65)] {
            assert!(!is_slug(bad), "{bad:?} accepted");
        }
    }

    #[test]
    fn verdict_serializes_uppercase() {
        assert_eq!(serde_json::to_string(&Verdict::Error).unwrap(), "\"ERROR\"");
    }

    #[test]
    fn unknown_fields_and_variants_from_a_newer_host_are_tolerated() {
        let scenario: Scenario = serde_json::from_value(json!({
            "id": "s", "turns": ["hi"], "new_field": 1,
            "tools": [{"name": "t", "effect": {"kind": "teleport", "path": "x", "speed": 9}}],
            "expect": {"outcome": {"reply_contains": ["a"], "tone": "kind"}, "vibes": {}}
        }))
        .unwrap();
        assert_eq!(scenario.tools[0].effect, ToolEffect::Unknown);
        assert_eq!(scenario.expect.outcome.reply_contains, ["a"]);
        let score: Score = serde_json::from_value(json!({
            "schema_version": 1, "run_id": "r", "scenario_id": "s", "verdict": "PARTIAL",
            "outcome": {"passed": true, "detail": "", "weight": 2},
            "trajectory": {"passed": true, "detail": ""},
            "constraint": {"passed": true, "detail": ""},
            "integrity": {"passed": true, "detail": ""},
            "cost_usd": 0.1
        }))
        .unwrap();
        assert_eq!(score.verdict, Verdict::Unknown);
        assert!(
            score.outcome.at.is_empty(),
            "a score without pointers reads"
        );
        let layer: LayerResult = serde_json::from_value(json!({
            "passed": false, "detail": "d",
            "at": [
                {"kind": "turn", "turn": 3, "problem": "no reply"},
                {"kind": "wormhole", "depth": 9, "problem": "far"},
                {"kind": "model_call", "index": 0, "note": "extra"}
            ]
        }))
        .unwrap();
        assert_eq!(
            layer.at,
            [
                StepRef::new(Step::Turn { turn: 3 }, "no reply"),
                StepRef::new(Step::Unknown, "far"),
                StepRef::new(Step::ModelCall { index: 0 }, ""),
            ]
        );
    }

    #[test]
    fn a_layer_without_pointers_is_written_as_before() {
        let mut layer = LayerResult::fail("forbidden tool `x` called");
        assert_eq!(
            serde_json::to_value(&layer).unwrap(),
            json!({"passed": false, "detail": "forbidden tool `x` called"})
        );
        layer.at.push(StepRef::new(
            Step::ToolCall { turn: 0, step: 1 },
            "forbidden tool",
        ));
        assert_eq!(
            serde_json::to_value(&layer).unwrap()["at"],
            json!([{"kind": "tool_call", "turn": 0, "step": 1, "problem": "forbidden tool"}])
        );
    }

    #[test]
    fn tool_effects_read_as_before() {
        let effect: ToolEffect =
            serde_json::from_value(json!({"kind": "read", "path": "orders", "key_arg": "id"}))
                .unwrap();
        assert_eq!(
            effect,
            ToolEffect::Read {
                path: "orders".into(),
                key_arg: Some("id".into())
            }
        );
        assert_eq!(
            serde_json::to_value(&effect).unwrap(),
            json!({"kind": "read", "path": "orders", "key_arg": "id"})
        );
        let err = serde_json::from_value::<ToolEffect>(json!({"kind": "append"})).unwrap_err();
        assert!(err.to_string().contains("missing field `path`"), "{err}");
    }
}
