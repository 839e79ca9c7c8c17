//! Model providers: the wire shape of one chat call, shared by the harness's own models
//! ([`super::models`]), the `openai` and `anthropic` runtimes and the model gateway's
//! records. A provider says where its calls go (its path, its base URL and key variables,
//! the header its key travels in), how a harness call's body is written, how a reply reads
//! as a [`ModelCall`] (its usage among it) and what text it carries; a call's cost is its
//! usage at the config's `[pricing]` ([`Pricing::cost`]).
//!
//! A provider is one file: `openai.rs` (`openai::Chat`) and `anthropic.rs`
//! (`anthropic::Messages`) hold theirs; [`super::models::PROVIDERS`] lists them by name.

use serde_json::{Map, Value};
use windtunnel_model::{ModelCall, Sampling, TokenUsage};

use super::agent::Pricing;

/// One model API's wire shape.
pub trait Provider: Sync {
    /// Its name: the runtime's, and a harness model's `provider`.
    fn name(&self) -> &'static str;
    /// The variable its base URL is read from when a config names none.
    fn base_var(&self) -> &'static str;
    /// The variable its key is read from when a config names none (and it is set).
    fn key_var(&self) -> &'static str;
    /// The path of a call beneath the base URL.
    fn path(&self) -> &'static str;
    /// The header the key travels in when `api_key_header` says nothing (`None`:
    /// `Authorization: Bearer`).
    fn key_header(&self) -> Option<&'static str> {
        None
    }
    /// Headers every call carries unless the config's headers name them.
    fn default_headers(&self) -> &'static [(&'static str, &'static str)] {
        &[]
    }
    /// A setting this API cannot honour, refused at load (`what` names the runtime or
    /// model, for the message).
    fn refuse(&self, sampling: &Sampling, what: &str) -> Result<(), String> {
        let _ = (sampling, what);
        Ok(())
    }
    /// The body of a harness call: `system`, then `messages` (`{"role", "content"}`);
    /// `json` asks for a JSON object where the API can (else the prompt says so), and `seed`
    /// is sent where the API takes one and neither `[sampling]` nor `extra` (`[body]`) sets
    /// one. The `[sampling]` and `[body]` fields are added by the caller.
    fn chat_body(&self, call: ChatCall<'_>) -> Value;
    /// Reads a reply into `call`: its message, finish reason, refusal, usage and ids.
    fn record(&self, call: &mut ModelCall, reply: &Value);
    /// The text of a reply, when it has one.
    fn text(&self, reply: &Value) -> Option<String>;
    /// What `usage` costs at `pricing`.
    fn cost(&self, pricing: &Pricing, usage: &TokenUsage) -> f64 {
        pricing.cost(usage)
    }
}

/// What a harness call says, for [`Provider::chat_body`].
pub struct ChatCall<'a> {
    pub model: Option<&'a str>,
    pub system: &'a str,
    pub messages: &'a [Value],
    pub sampling: &'a Sampling,
    /// The config's `[body]` fields.
    pub extra: &'a Map<String, Value>,
    pub json: bool,
    pub seed: Option<u64>,
}
