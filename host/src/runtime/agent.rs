//! The agent config as `wt` reads it: what every runtime shares, then the settings of the
//! runtime it names — one type per runtime, so a setting another runtime owns cannot be
//! written, read or forgotten by this one.
//!
//! A file is read strictly per runtime: `runtime` is read first, then the whole file as that
//! runtime's file type, through [`crate::strict`], so a key the runtime does not have is
//! refused at its line ("`command` is not a setting of the `openai` runtime"). Hooks see the
//! SDK's flat [`AgentConfig`], projected by [`Agent::to_sdk`]; the SDK's type is the hook
//! contract, not `wt`'s model.

use std::collections::BTreeMap;

use serde::Deserialize;
use windtunnel_model::{AgentConfig, Sampling};

/// An agent under test.
#[derive(Clone, Debug, PartialEq)]
pub struct Agent {
    /// The agent's label in traces and reports.
    pub label: String,
    /// Model name, where the runtime has one.
    pub model: Option<String>,
    /// The system prompt.
    pub soul: String,
    /// Sampling settings.
    pub sampling: Sampling,
    /// Deadline of one turn, in seconds.
    pub turn_timeout_s: f64,
    /// Most model calls of a tool loop in one turn.
    pub max_steps: u32,
    /// The runtime and its own settings.
    pub settings: Settings,
}

/// A runtime and the settings only it has.
#[derive(Clone, Debug, PartialEq)]
pub enum Settings {
    Demo(Demo),
    OpenAi(OpenAi),
    /// Anthropic's Messages API: the same settings as `openai`, another wire.
    Anthropic(Anthropic),
    Http(Http),
    Process(Process),
    /// An agent served over A2A (docs/a2a.md).
    A2a(A2a),
}

/// The `anthropic` runtime's settings: the `openai` runtime's, for the Messages API.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Anthropic(pub OpenAi);

/// An agent served over the Agent2Agent protocol (docs/a2a.md).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct A2a {
    /// The agent's base URL: its card is at `<url>/.well-known/agent-card.json`. With
    /// `command`, `{port}` in it stands for the port `wt` gives the agent.
    pub url: Option<String>,
    /// The agent's server, started by `wt` for each run (confined as a `process` agent is);
    /// without it the agent is remote.
    pub command: Option<Vec<String>>,
    /// Variables set in a started agent's environment.
    pub env: Option<BTreeMap<String, String>>,
    /// Variables copied from `wt`'s environment into a started agent's.
    pub env_passthrough: Option<Vec<String>>,
    /// The variable holding a key sent as `Authorization: Bearer`.
    pub api_key_env: Option<String>,
    /// Extra request headers (auth), as for the `openai` runtime.
    pub headers: Option<BTreeMap<String, HeaderValue>>,
    /// The protocol generation: `1.0` or `0.3` (default: the newest the card offers).
    pub protocol: Option<String>,
    /// Stream turns (`SendStreamingMessage`, `message/stream`); default: when the card says
    /// the agent streams.
    pub streaming: Option<bool>,
    pub limits: EndpointLimits,
    /// Contexts the agent holds at once (lanes): default 1 for a remote agent, as many as
    /// `--jobs` for one `wt` starts (each run its own process).
    pub max_sessions: Option<u32>,
    /// Whether a started agent reaches the fixture world over MCP (default true).
    pub mcp: Option<bool>,
    /// How long a started agent may take to serve its card, in seconds (default 30).
    pub start_timeout_s: Option<f64>,
    /// The model gateway of a started agent.
    pub gateway: Option<Gateway>,
    /// The model's prices (with a gateway).
    pub pricing: Option<Pricing>,
    /// What a started agent's confinement allows beyond the defaults (docs/sandbox.md).
    pub sandbox: Option<Box<windtunnel_model::SandboxSettings>>,
}

/// The embedded demo agent.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct Demo {
    /// A fault mode: `leaky`, `forbidden-tool`, `slow`, `garbled`.
    pub fault: Option<String>,
}

/// The limits of an endpoint `wt` sends requests to, shared by all lanes.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct EndpointLimits {
    /// Retries on HTTP 429/5xx and early closes.
    pub retries: Option<u32>,
    /// Largest response body accepted, in bytes.
    pub max_response_bytes: Option<u64>,
    /// Most requests in flight at once.
    pub max_concurrency: Option<u32>,
    /// Most requests a minute, evenly spaced.
    pub requests_per_minute: Option<u32>,
}

/// An OpenAI-compatible chat-completions endpoint; `wt` runs the tool loop.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OpenAi {
    /// Base URL (else `OPENAI_BASE_URL`).
    pub endpoint: Option<String>,
    /// The variable holding the API key (else `OPENAI_API_KEY`, when set).
    pub api_key_env: Option<String>,
    pub limits: EndpointLimits,
    /// The model's prices.
    pub pricing: Option<Pricing>,
    /// How the endpoint is spoken to: extra headers, the key's header.
    pub wire: Wire,
    /// Extra fields of every request body (`tool_choice`, `response_format`, `stop`, …).
    pub body: Option<serde_json::Map<String, serde_json::Value>>,
}

/// How `wt` speaks to an OpenAI-compatible endpoint beyond its URL and key.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct Wire {
    /// Extra request headers: a value, or `{ env = "VAR" }` for one read from the
    /// environment (a secret, redacted like a key).
    #[serde(default)]
    pub headers: Option<BTreeMap<String, HeaderValue>>,
    /// The header that carries the API key, as is (e.g. Azure's `api-key`), instead of
    /// `Authorization: Bearer <key>`.
    #[serde(default)]
    pub api_key_header: Option<String>,
}

/// A header's value in an agent config.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum HeaderValue {
    Text(String),
    /// Read from this environment variable (a secret).
    Env {
        env: String,
    },
}

/// An agent service behind an inject endpoint.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Http {
    /// Base URL (or `WT_HTTP_INJECT_URL`).
    pub endpoint: Option<String>,
    /// The variable holding the API key.
    pub api_key_env: Option<String>,
    pub limits: EndpointLimits,
    /// Sessions the service holds at once (lanes; default 1).
    pub max_sessions: Option<u32>,
    /// Whether the service reaches the fixture world over MCP (default true).
    pub mcp: Option<bool>,
    /// The model gateway: the service's model calls go through `wt` to this upstream.
    pub gateway: Option<Gateway>,
    /// The model's prices (with a gateway).
    pub pricing: Option<Pricing>,
}

/// The model gateway of a `process` or `http` agent (`[gateway]`): per run, `wt` serves an
/// OpenAI-compatible endpoint on loopback and forwards each call to this upstream, recording
/// it. The fields mean what they mean for the `openai` runtime.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct Gateway {
    /// The upstream's base URL (e.g. `https://api.example.com/v1`).
    pub endpoint: String,
    /// The variable holding the upstream's API key; the agent never sees it.
    #[serde(default)]
    pub api_key_env: Option<String>,
    #[serde(default)]
    pub retries: Option<u32>,
    #[serde(default)]
    pub max_response_bytes: Option<u64>,
    #[serde(default)]
    pub max_concurrency: Option<u32>,
    #[serde(default)]
    pub requests_per_minute: Option<u32>,
    /// Also set `OPENAI_BASE_URL` and `OPENAI_API_KEY` for a `process` agent, so that an
    /// unmodified OpenAI client uses the gateway (default false).
    #[serde(default)]
    pub openai_env: bool,
    /// Also set `ANTHROPIC_BASE_URL` and `ANTHROPIC_API_KEY` for a `process` agent, so that
    /// an unmodified Anthropic client uses the gateway (default false).
    #[serde(default)]
    pub anthropic_env: bool,
    /// Extra headers to the upstream, as for the `openai` runtime.
    #[serde(default)]
    pub headers: Option<BTreeMap<String, HeaderValue>>,
    /// The header that carries the upstream's key, as for the `openai` runtime.
    #[serde(default)]
    pub api_key_header: Option<String>,
}

impl Settings {
    /// The settings of a harness-run model runtime.
    pub(crate) fn model_settings(&self) -> Result<&OpenAi, super::RuntimeError> {
        match self {
            Settings::OpenAi(s) | Settings::Anthropic(Anthropic(s)) => Ok(s),
            _ => Err(super::RuntimeError(
                "not a model runtime (openai, anthropic)".into(),
            )),
        }
    }
}

impl OpenAi {
    /// The variable holding the key: `api_key_env`, else `default` when it is set.
    pub(crate) fn key_var<'a>(&'a self, default: &'static str) -> Option<&'a str> {
        self.api_key_env.as_deref().or_else(|| {
            crate::secrets::env_secret(default)
                .is_ok()
                .then_some(default)
        })
    }
}

impl Gateway {
    /// How the upstream is spoken to.
    pub fn wire(&self) -> Wire {
        Wire {
            headers: self.headers.clone(),
            api_key_header: self.api_key_header.clone(),
        }
    }

    /// The upstream's limits.
    pub fn limits(&self) -> EndpointLimits {
        EndpointLimits {
            retries: self.retries,
            max_response_bytes: self.max_response_bytes,
            max_concurrency: self.max_concurrency,
            requests_per_minute: self.requests_per_minute,
        }
    }
}

/// Prices of the agent's model, in US dollars per million tokens (`[pricing]`). `wt` has no
/// price table of its own: without these, reports show tokens only.
#[derive(Clone, Copy, Debug, Default, PartialEq, Deserialize)]
pub struct Pricing {
    /// Per million input tokens not served from cache.
    pub input: f64,
    /// Per million output tokens (reasoning tokens included).
    pub output: f64,
    /// Per million input tokens served from cache (default: `input`).
    #[serde(default)]
    pub cached: Option<f64>,
}

impl Pricing {
    /// What `tokens` cost.
    pub fn cost(&self, t: &windtunnel_model::TokenUsage) -> f64 {
        let cached = t.cached_tokens.min(t.prompt_tokens);
        let fresh = t.prompt_tokens - cached;
        (fresh as f64 * self.input
            + cached as f64 * self.cached.unwrap_or(self.input)
            + t.completion_tokens as f64 * self.output)
            / 1e6
    }

    /// Refuses a negative or non-finite price.
    pub fn check(&self) -> Result<(), String> {
        for (name, v) in [
            ("input", Some(self.input)),
            ("output", Some(self.output)),
            ("cached", self.cached),
        ] {
            if let Some(v) = v
                && !(v.is_finite() && v >= 0.0)
            {
                return Err(format!(
                    "`pricing.{name}` must be a price of zero or more (US dollars per million tokens), not {v}"
                ));
            }
        }
        Ok(())
    }
}

/// A local command.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Process {
    /// The command line; with `{input}`, one process per turn.
    pub command: Option<Vec<String>>,
    /// Variables set in the agent's environment.
    pub env: Option<BTreeMap<String, String>>,
    /// Variables copied from `wt`'s environment.
    pub env_passthrough: Option<Vec<String>>,
    /// The variable holding an API key the agent needs (passed through).
    pub api_key_env: Option<String>,
    /// One-shot mode: the reply is this field of the JSON the process prints.
    pub reply_field: Option<String>,
    /// Deadline of a whole run, in seconds.
    pub run_timeout_s: Option<f64>,
    /// A directory where the agent keeps state, shown to state probes.
    pub state_dir: Option<String>,
    /// Whether the agent reaches the fixture world over MCP (default true).
    pub mcp: Option<bool>,
    /// Largest stdout (one-shot) or stdout line (session) accepted, in bytes.
    pub max_response_bytes: Option<u64>,
    /// The model gateway: the agent's model calls go through `wt` to this upstream.
    pub gateway: Option<Gateway>,
    /// The model's prices (with a gateway).
    pub pricing: Option<Pricing>,
    /// What its confinement allows beyond the defaults (docs/sandbox.md).
    pub sandbox: Option<Box<windtunnel_model::SandboxSettings>>,
}

/// The variable an `openai` agent takes its key from when it names none.
pub const OPENAI_API_KEY: &str = "OPENAI_API_KEY";

/// The variable an `openai` agent takes its endpoint from when it names none.
pub const OPENAI_BASE_URL: &str = "OPENAI_BASE_URL";

/// The variable an `anthropic` agent takes its key from when it names none.
pub const ANTHROPIC_API_KEY: &str = "ANTHROPIC_API_KEY";

/// The variable an `anthropic` agent takes its endpoint from when it names none.
pub const ANTHROPIC_BASE_URL: &str = "ANTHROPIC_BASE_URL";

/// The runtimes an agent config may name.
pub const RUNTIMES: [&str; 6] = ["demo", "openai", "anthropic", "http", "process", "a2a"];

impl Agent {
    /// An agent with this label, `settings`, and every shared setting at its default.
    pub fn new(label: impl Into<String>, settings: Settings) -> Agent {
        Agent {
            label: label.into(),
            model: None,
            soul: String::new(),
            sampling: Sampling::default(),
            turn_timeout_s: default_turn_timeout(),
            max_steps: default_max_steps(),
            settings,
        }
    }

    /// The runtime's name (one of [`RUNTIMES`]).
    pub fn runtime(&self) -> &'static str {
        self.settings.kind().name()
    }

    /// The variable naming the API key, for the runtimes that have one. An `openai` agent
    /// without `api_key_env` uses `OPENAI_API_KEY` when it is set, as OpenAI's clients do.
    pub fn api_key_env(&self) -> Option<&str> {
        self.settings.kind().api_key_env()
    }

    /// The endpoint URL as the agent config gives it, for the runtimes that have one.
    pub fn endpoint(&self) -> Option<&str> {
        self.settings.kind().endpoint()
    }

    /// The model's prices, for the runtimes that make model calls `wt` sees.
    pub fn pricing(&self) -> Option<&Pricing> {
        self.settings.kind().pricing()
    }

    /// The model gateway, for the runtimes that have one.
    pub fn gateway(&self) -> Option<&Gateway> {
        self.settings.kind().gateway()
    }

    /// Can the agent act on the fixture world? The harness's own loops (`demo`, `openai`)
    /// always can; `http` and `process` agents can over MCP unless `mcp = false`.
    pub fn reaches_world(&self) -> bool {
        self.settings.kind().reaches_world()
    }

    /// The SDK's view of this agent, as hooks read it.
    pub fn to_sdk(&self) -> AgentConfig {
        let mut a = AgentConfig::new(self.label.clone(), self.runtime());
        a.model.clone_from(&self.model);
        a.soul.clone_from(&self.soul);
        a.sampling = self.sampling.clone();
        a.turn_timeout_s = self.turn_timeout_s;
        a.max_steps = self.max_steps;
        self.settings.kind().to_sdk(&mut a);
        a
    }

    /// Reads an agent config file's text, strictly for the runtime it names.
    pub fn from_toml(text: &str) -> Result<Agent, crate::strict::StrictError> {
        #[derive(Deserialize)]
        struct Head {
            runtime: Option<toml::Value>,
        }
        let head: Head = toml::from_str(text).map_err(|e| crate::strict::StrictError {
            message: e.message().trim_end().to_owned(),
            at: None,
        })?;
        let runtime = match head.runtime {
            Some(toml::Value::String(r)) => r,
            Some(_) => return Err(plain("`runtime` must be a string")),
            None => return Err(plain("missing field `runtime`")),
        };
        let (shared, settings) = match runtime.as_str() {
            "demo" => read::<DemoFile>(text, "demo")?.split(),
            "openai" => read::<OpenAiFile>(text, "openai")?.split(),
            "anthropic" => {
                let (shared, settings) = read::<OpenAiFile>(text, "anthropic")?.split();
                match settings {
                    Settings::OpenAi(s) => (shared, Settings::Anthropic(Anthropic(s))),
                    other => (shared, other),
                }
            }
            "http" => read::<HttpFile>(text, "http")?.split(),
            "process" => read::<ProcessFile>(text, "process")?.split(),
            "a2a" => read::<A2aFile>(text, "a2a")?.split(),
            other => {
                return Err(plain(&format!(
                    "unknown runtime `{other}` (expected {})",
                    RUNTIMES.join(", ")
                )));
            }
        };
        Ok(Agent {
            label: shared.label,
            model: shared.model,
            soul: shared.soul,
            sampling: shared.sampling,
            turn_timeout_s: shared.turn_timeout_s,
            max_steps: shared.max_steps,
            settings,
        })
    }
}

fn plain(message: &str) -> crate::strict::StrictError {
    crate::strict::StrictError {
        message: message.to_owned(),
        at: None,
    }
}

/// Reads `text` as `F` strictly; a key `F` does not have is a setting of another runtime,
/// or of none.
fn read<F: serde::de::DeserializeOwned>(
    text: &str,
    runtime: &str,
) -> Result<F, crate::strict::StrictError> {
    crate::strict::from_toml::<F>(text).map_err(|mut e| {
        if let Some(field) = e
            .message
            .strip_prefix("unknown field `")
            .and_then(|r| r.strip_suffix('`'))
        {
            let owners: Vec<&str> = OWNERS
                .iter()
                .filter(|(f, _)| *f == field)
                .map(|(_, r)| *r)
                .collect();
            e.message = if owners.is_empty() {
                format!("unknown field `{field}`")
            } else {
                let listed = match owners.split_last() {
                    Some((last, rest)) if !rest.is_empty() => {
                        format!("{} and {last}", rest.join(", "))
                    }
                    _ => owners.join(""),
                };
                format!(
                    "`{field}` is not a setting of the `{runtime}` runtime (it is one of the {listed} runtime{})",
                    if owners.len() > 1 { "s" } else { "" }
                )
            };
        }
        e
    })
}

/// Which runtimes have each runtime-specific setting (for messages only: what a runtime
/// accepts is its file type).
const OWNERS: &[(&str, &str)] = &[
    ("fault", "demo"),
    ("endpoint", "openai"),
    ("endpoint", "anthropic"),
    ("endpoint", "http"),
    ("api_key_env", "openai"),
    ("api_key_env", "anthropic"),
    ("api_key_env", "http"),
    ("api_key_env", "process"),
    ("retries", "openai"),
    ("retries", "anthropic"),
    ("retries", "http"),
    ("max_response_bytes", "openai"),
    ("max_response_bytes", "anthropic"),
    ("max_response_bytes", "http"),
    ("max_response_bytes", "process"),
    ("max_concurrency", "openai"),
    ("max_concurrency", "anthropic"),
    ("max_concurrency", "http"),
    ("requests_per_minute", "openai"),
    ("requests_per_minute", "anthropic"),
    ("requests_per_minute", "http"),
    ("max_sessions", "http"),
    ("mcp", "http"),
    ("mcp", "process"),
    ("command", "process"),
    ("env", "process"),
    ("env_passthrough", "process"),
    ("reply_field", "process"),
    ("run_timeout_s", "process"),
    ("state_dir", "process"),
    ("sandbox", "process"),
    ("gateway", "http"),
    ("gateway", "process"),
    ("pricing", "openai"),
    ("pricing", "anthropic"),
    ("headers", "openai"),
    ("headers", "anthropic"),
    ("api_key_header", "openai"),
    ("api_key_header", "anthropic"),
    ("body", "openai"),
    ("body", "anthropic"),
    ("pricing", "http"),
    ("pricing", "process"),
    ("url", "a2a"),
    ("command", "a2a"),
    ("env", "a2a"),
    ("env_passthrough", "a2a"),
    ("api_key_env", "a2a"),
    ("headers", "a2a"),
    ("protocol", "a2a"),
    ("streaming", "a2a"),
    ("retries", "a2a"),
    ("max_response_bytes", "a2a"),
    ("max_concurrency", "a2a"),
    ("requests_per_minute", "a2a"),
    ("max_sessions", "a2a"),
    ("mcp", "a2a"),
    ("start_timeout_s", "a2a"),
    ("gateway", "a2a"),
    ("pricing", "a2a"),
    ("sandbox", "a2a"),
];

fn default_turn_timeout() -> f64 {
    30.0
}

fn default_max_steps() -> u32 {
    8
}

/// What every runtime's file has.
struct Shared {
    label: String,
    model: Option<String>,
    soul: String,
    sampling: Sampling,
    turn_timeout_s: f64,
    max_steps: u32,
}

/// A runtime's file type: the shared fields, then the runtime's own, all at the top level
/// of the file (no `flatten`, which would hide unknown keys from the strict reader).
macro_rules! agent_file {
    ($file:ident { $($field:ident : $ty:ty),* $(,)? } => |$f:ident| $settings:expr) => {
        #[derive(Deserialize)]
        struct $file {
            label: String,
            #[allow(dead_code)]
            runtime: String,
            #[serde(default)]
            model: Option<String>,
            #[serde(default)]
            soul: String,
            #[serde(default)]
            sampling: Sampling,
            #[serde(default = "default_turn_timeout")]
            turn_timeout_s: f64,
            #[serde(default = "default_max_steps")]
            max_steps: u32,
            $(
                #[serde(default)]
                $field: $ty,
            )*
        }

        impl $file {
            fn split(self) -> (Shared, Settings) {
                let shared = Shared {
                    label: self.label,
                    model: self.model,
                    soul: self.soul,
                    sampling: self.sampling,
                    turn_timeout_s: self.turn_timeout_s,
                    max_steps: self.max_steps,
                };
                let $f = ($(self.$field,)*);
                (shared, $settings)
            }
        }
    };
}

agent_file!(DemoFile { fault: Option<String> } => |f| Settings::Demo(Demo { fault: f.0 }));

agent_file!(OpenAiFile {
    endpoint: Option<String>,
    api_key_env: Option<String>,
    retries: Option<u32>,
    max_response_bytes: Option<u64>,
    max_concurrency: Option<u32>,
    requests_per_minute: Option<u32>,
    pricing: Option<Pricing>,
    headers: Option<BTreeMap<String, HeaderValue>>,
    api_key_header: Option<String>,
    body: Option<serde_json::Map<String, serde_json::Value>>,
} => |f| Settings::OpenAi(OpenAi {
    endpoint: f.0,
    api_key_env: f.1,
    limits: EndpointLimits {
        retries: f.2,
        max_response_bytes: f.3,
        max_concurrency: f.4,
        requests_per_minute: f.5,
    },
    pricing: f.6,
    wire: Wire {
        headers: f.7,
        api_key_header: f.8,
    },
    body: f.9,
}));

agent_file!(HttpFile {
    endpoint: Option<String>,
    api_key_env: Option<String>,
    retries: Option<u32>,
    max_response_bytes: Option<u64>,
    max_concurrency: Option<u32>,
    requests_per_minute: Option<u32>,
    max_sessions: Option<u32>,
    mcp: Option<bool>,
    gateway: Option<Gateway>,
    pricing: Option<Pricing>,
} => |f| Settings::Http(Http {
    endpoint: f.0,
    api_key_env: f.1,
    limits: EndpointLimits {
        retries: f.2,
        max_response_bytes: f.3,
        max_concurrency: f.4,
        requests_per_minute: f.5,
    },
    max_sessions: f.6,
    mcp: f.7,
    gateway: f.8,
    pricing: f.9,
}));

agent_file!(ProcessFile {
    command: Option<Vec<String>>,
    env: Option<BTreeMap<String, String>>,
    env_passthrough: Option<Vec<String>>,
    api_key_env: Option<String>,
    reply_field: Option<String>,
    run_timeout_s: Option<f64>,
    state_dir: Option<String>,
    mcp: Option<bool>,
    max_response_bytes: Option<u64>,
    gateway: Option<Gateway>,
    pricing: Option<Pricing>,
    sandbox: Option<Box<windtunnel_model::SandboxSettings>>,
} => |f| Settings::Process(Process {
    command: f.0,
    env: f.1,
    env_passthrough: f.2,
    api_key_env: f.3,
    reply_field: f.4,
    run_timeout_s: f.5,
    state_dir: f.6,
    mcp: f.7,
    max_response_bytes: f.8,
    gateway: f.9,
    pricing: f.10,
    sandbox: f.11,
}));

agent_file!(A2aFile {
    url: Option<String>,
    command: Option<Vec<String>>,
    env: Option<BTreeMap<String, String>>,
    env_passthrough: Option<Vec<String>>,
    api_key_env: Option<String>,
    headers: Option<BTreeMap<String, HeaderValue>>,
    protocol: Option<String>,
    streaming: Option<bool>,
    retries: Option<u32>,
    max_response_bytes: Option<u64>,
    max_concurrency: Option<u32>,
    requests_per_minute: Option<u32>,
    max_sessions: Option<u32>,
    mcp: Option<bool>,
    start_timeout_s: Option<f64>,
    gateway: Option<Gateway>,
    pricing: Option<Pricing>,
    sandbox: Option<Box<windtunnel_model::SandboxSettings>>,
} => |f| Settings::A2a(A2a {
    url: f.0,
    command: f.1,
    env: f.2,
    env_passthrough: f.3,
    api_key_env: f.4,
    headers: f.5,
    protocol: f.6,
    streaming: f.7,
    limits: EndpointLimits {
        retries: f.8,
        max_response_bytes: f.9,
        max_concurrency: f.10,
        requests_per_minute: f.11,
    },
    max_sessions: f.12,
    mcp: f.13,
    start_timeout_s: f.14,
    gateway: f.15,
    pricing: f.16,
    sandbox: f.17,
}));

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_setting_of_another_runtime_is_refused_at_its_line_naming_its_owner() {
        let e = Agent::from_toml(
            "label = \"x\"\nruntime = \"openai\"\nendpoint = \"http://h/v1\"\ncommand = [\"a\"]\n",
        )
        .unwrap_err();
        assert_eq!(e.at.map(|a| a.0), Some(4), "{e}");
        assert_eq!(
            e.message,
            "`command` is not a setting of the `openai` runtime (it is one of the process and a2a runtimes)"
        );
        let e = Agent::from_toml("label = \"x\"\nruntime = \"demo\"\nmcp = false\n").unwrap_err();
        assert!(
            e.message
                .contains("one of the http, process and a2a runtimes"),
            "{e}"
        );
        let e =
            Agent::from_toml("label = \"x\"\nruntime = \"process\"\nmodle = \"m\"\n").unwrap_err();
        assert_eq!(e.to_string(), "line 3, column 1: unknown field `modle`");
        let e = Agent::from_toml("label = \"x\"\nruntime = \"grpc\"\n").unwrap_err();
        assert!(e.message.contains("unknown runtime `grpc`"), "{e}");
    }

    #[test]
    fn every_setting_reaches_its_runtime_and_the_hooks_view() {
        let a = Agent::from_toml(
            "label = \"svc\"\nruntime = \"http\"\nmodel = \"m\"\nendpoint = \"http://h\"\n\
             api_key_env = \"K\"\nretries = 3\nmax_response_bytes = 2048\nmax_concurrency = 4\n\
             requests_per_minute = 60\nmax_sessions = 2\nmcp = false\nturn_timeout_s = 5\n",
        )
        .unwrap();
        let Settings::Http(h) = &a.settings else {
            panic!("{a:?}")
        };
        assert_eq!(
            (
                h.limits.retries,
                h.limits.max_concurrency,
                h.max_sessions,
                h.mcp
            ),
            (Some(3), Some(4), Some(2), Some(false))
        );
        assert!(!a.reaches_world());
        let sdk = a.to_sdk();
        assert_eq!(sdk.runtime, "http");
        assert_eq!(sdk.endpoint.as_deref(), Some("http://h"));
        assert_eq!(sdk.requests_per_minute, Some(60));
        assert_eq!(sdk.max_response_bytes, Some(2048));
        assert_eq!(sdk.turn_timeout_s, 5.0);
        assert_eq!(sdk.command, None);
    }
}
