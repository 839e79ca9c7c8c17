//! Runtimes as one trait: each runtime's settings type answers what `wt` asks of a runtime
//! before it runs — its name, its checks, how it is built, which of its settings are secrets
//! and which variables to seal, what hooks see of it. [`Settings::kind`] is the one place
//! that lists every runtime; [`super::for_agent`] is the factory. Once built, a runtime is
//! a [`Runtime`]: how it provisions lanes, whether its sessions are independent; its
//! handles are [`super::AgentHandle`]s: how they start, reset, send and what they record.
//!
//! Adding a runtime: a settings type and its file type in `agent.rs`, a variant of
//! [`Settings`], an `impl RuntimeKind` and a [`Runtime`] in its own file (docs/runtimes.md).

use std::collections::BTreeMap;

use windtunnel_model::AgentConfig;

use super::agent::{Gateway, HeaderValue, Pricing, Settings};
use super::{Agent, Runtime, RuntimeError};
use crate::secrets::Redactor;

/// What one runtime says about itself.
pub trait RuntimeKind: Sync {
    /// `runtime = "<name>"`.
    fn name(&self) -> &'static str;
    /// Builds the runtime (its endpoints checked, its keys read).
    fn build(&self, agent: &Agent) -> Result<Box<dyn Runtime>, RuntimeError>;
    /// Checks its own settings, before anything runs: one message naming the field.
    fn validate(&self, agent: &Agent) -> Result<(), String> {
        let _ = agent;
        Ok(())
    }
    /// The variable naming its API key, when it has one.
    fn api_key_env(&self) -> Option<&str> {
        None
    }
    /// Its endpoint URL as the config gives it.
    fn endpoint(&self) -> Option<&str> {
        None
    }
    /// Its model's prices.
    fn pricing(&self) -> Option<&Pricing> {
        None
    }
    /// Its model gateway.
    fn gateway(&self) -> Option<&Gateway> {
        None
    }
    /// Can the agent act on the fixture world?
    fn reaches_world(&self) -> bool {
        true
    }
    /// Extra request headers (`headers`), some read from the environment.
    fn headers(&self) -> Option<&BTreeMap<String, HeaderValue>> {
        None
    }
    /// Variables it hands the agent as they are (`env_passthrough`), with the setting that
    /// names them: none may be a secret the gateway keeps.
    fn handed_vars(&self) -> Vec<(&'static str, &str)> {
        Vec::new()
    }
    /// Secrets of its own beyond its key, its endpoint, its gateway and its headers (which
    /// every runtime's redactor holds): values it sets or passes under a secret name.
    fn add_secrets(&self, agent: &Agent, r: &mut Redactor) {
        let _ = (agent, r);
    }
    /// What hooks see of its own settings.
    fn to_sdk(&self, a: &mut AgentConfig);
}

impl Settings {
    /// The runtime these settings are for.
    pub fn kind(&self) -> &dyn RuntimeKind {
        match self {
            Settings::Demo(s) => s,
            Settings::OpenAi(s) => s,
            Settings::Anthropic(s) => s,
            Settings::Http(s) => s,
            Settings::Process(s) => s,
            Settings::A2a(s) => s,
        }
    }
}

/// The variables an agent config reads secrets from: its key, its gateway's key, its
/// headers' and gateway headers' variables, and the secret-named variables it hands the
/// agent.
pub(crate) fn secret_vars(agent: &Agent) -> Vec<&str> {
    let kind = agent.settings.kind();
    let gateway_key = agent.gateway().and_then(|g| g.api_key_env.as_deref());
    agent
        .api_key_env()
        .into_iter()
        .chain(gateway_key)
        .chain(header_vars(agent))
        .chain(
            kind.handed_vars()
                .into_iter()
                .map(|(_, v)| v)
                .filter(|n| crate::secrets::is_secret_name(n)),
        )
        .collect()
}

/// The environment variables an agent config's headers (and its gateway's) are read from.
pub(crate) fn header_vars(agent: &Agent) -> Vec<&str> {
    let gateway = agent.gateway().and_then(|g| g.headers.as_ref());
    agent
        .settings
        .kind()
        .headers()
        .into_iter()
        .chain(gateway)
        .flatten()
        .filter_map(|(_, v)| match v {
            HeaderValue::Env { env } => Some(env.as_str()),
            HeaderValue::Text(_) => None,
        })
        .collect()
}

/// What hooks see of an endpoint's limits.
pub(crate) fn sdk_limits(a: &mut AgentConfig, l: &super::agent::EndpointLimits) {
    a.retries = l.retries;
    a.max_response_bytes = l.max_response_bytes;
    a.max_concurrency = l.max_concurrency;
    a.requests_per_minute = l.requests_per_minute;
}
