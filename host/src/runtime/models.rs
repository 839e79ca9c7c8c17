//! Models the harness itself calls, not the agent: the simulated user and the judges of
//! model-graded checks. A pack declares them by name in `pack.toml` (`[models.<name>]`), and
//! `--models FILE` (the same tables) may replace them. Each is an `openai` or `anthropic`
//! endpoint with the settings those runtimes have (key, headers, limits, retries, `[body]`,
//! `[sampling]`, `[pricing]`), read as strictly as an agent config: `provider` names the
//! runtime. A call is one request, recorded as a [`ModelCall`] with its own `source`
//! (`user` or `judge`), so what the evaluation cost is counted apart from the agent.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use serde_json::{Value, json};
use windtunnel_model::ModelCall;

use super::agent::Pricing;
use super::agent::Settings;
use super::gateway;
use super::net::Log;
use super::openai::Endpoint;
use super::provider::{ChatCall, Provider};
use super::{Agent, RuntimeError, TurnError};
use crate::interrupt::Interrupt;
use crate::secrets::Redactor;

/// Every model provider, by name: what a model's `provider` may name.
pub static PROVIDERS: [&dyn Provider; 2] = [&super::openai::Chat, &super::anthropic::Messages];

/// The provider called `name`.
pub fn named(name: &str) -> Option<&'static dyn Provider> {
    PROVIDERS.iter().copied().find(|p| p.name() == name)
}

/// The providers' names, for messages (`openai or anthropic`).
pub fn names() -> String {
    let names: Vec<&str> = PROVIDERS.iter().map(|p| p.name()).collect();
    names.join(" or ")
}

/// The provider of a harness-run model runtime's settings (`openai`, `anthropic`).
pub fn provider_of(settings: &Settings) -> Option<&'static dyn Provider> {
    named(settings.kind().name())
}

/// A model of the harness, ready to call.
pub struct HarnessModel {
    /// Its name in the pack (`[models.<name>]`).
    pub name: String,
    /// The wire shape of its calls.
    provider: &'static dyn Provider,
    agent: Agent,
    endpoint: Endpoint,
    /// `sha256:<hex>` of what decides its answers: provider, endpoint, model, sampling,
    /// `[body]` (never the key).
    identity: String,
}

/// The models of a sweep, by name.
pub type Models = BTreeMap<String, Arc<HarnessModel>>;

/// The settings tables of models, by name, as `pack.toml` and `--models FILE` hold them.
pub type ModelTables = BTreeMap<String, toml::Table>;

/// What one call said, and its record.
pub struct Said {
    pub text: Result<String, TurnError>,
    pub call: ModelCall,
}

impl HarnessModel {
    /// Reads the model `name` from its settings table.
    pub fn from_table(name: &str, table: &toml::Table) -> Result<HarnessModel, RuntimeError> {
        let agent = agent_of(name, table)?;
        let provider =
            provider_of(&agent.settings).expect("agent_of admits the providers' runtimes only");
        let endpoint = provider
            .refuse(&agent.sampling, "a harness model")
            .map_err(RuntimeError)
            .and_then(|()| Endpoint::new(&agent, agent.settings.model_settings()?, provider))
            .map_err(|e| RuntimeError(format!("model `{name}`: {e}")))?;
        let identity = {
            use sha2::{Digest, Sha256};
            let settings = json!({
                "provider": agent.runtime(),
                "endpoint": endpoint.url,
                "model": agent.model,
                "sampling": agent.sampling,
                "body": endpoint.body,
            });
            format!(
                "sha256:{:x}",
                Sha256::digest(settings.to_string().as_bytes())
            )
        };
        Ok(HarnessModel {
            name: name.to_owned(),
            provider,
            agent,
            endpoint,
            identity,
        })
    }

    /// What decides its answers, as a hash: the part of a judge's identity that is the model.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// The model's prices, when its table sets `[pricing]`.
    pub fn pricing(&self) -> Option<Pricing> {
        self.agent.pricing().copied()
    }

    /// One request: `system`, then `messages` (`{"role", "content"}` objects). With `json`,
    /// an `openai` model is asked for a JSON object (`response_format`, unless its `[body]`
    /// sets one); an `anthropic` model has no such mode and is told in the prompt. `seed`
    /// (a pinned sweep's) is sent to an `openai` model whose settings set none; the Messages
    /// API takes none. Ends within moments of a cut of `stop`, and at the model's
    /// `turn_timeout_s`. What it said and its record come back scrubbed by `redactor` (the
    /// invocation's: this model's secrets, every other model's, the agent's, the hooks').
    #[expect(
        clippy::too_many_arguments,
        reason = "one request's parts, each its own"
    )]
    pub fn chat(
        &self,
        source: &str,
        system: &str,
        messages: &[Value],
        json: bool,
        seed: Option<u64>,
        stop: &Interrupt,
        redactor: &Redactor,
    ) -> Said {
        let body = self.provider.chat_body(ChatCall {
            model: self.agent.model.as_deref(),
            system,
            messages,
            sampling: &self.agent.sampling,
            extra: &self.endpoint.body,
            json,
            seed,
        });
        let body = self.endpoint.complete(body, &self.agent.sampling);
        let mut call = gateway::request_record(&body);
        call.source = source.to_owned();
        let deadline = Instant::now() + super::turn_timeout(&self.agent);
        let mut log = Log::default();
        let provider = self.provider;
        let fill = |call: &mut ModelCall, reply: &Value| provider.record(call, reply);
        // A JSON value always serializes.
        let bytes = Bytes::from(serde_json::to_vec(&body).unwrap_or_default());
        let sent = self
            .endpoint
            .call(bytes, deadline, stop, &mut log, &mut call, fill);
        // Redacted before anything is cut or excerpted, so no cut can split a secret.
        redactor.scrub_record(&mut call);
        crate::limits::bound_model_call(&mut call);
        let text = sent.and_then(|mut resp| {
            redactor.scrub_value(&mut resp);
            let text = self.provider.text(&resp);
            text.ok_or_else(|| {
                TurnError::new(
                    windtunnel_model::TurnErrorKind::Protocol,
                    format!(
                        "model `{}` answered without a text reply: {}",
                        self.name,
                        crate::score::excerpt(&resp.to_string())
                    ),
                )
            })
        });
        let text = match text {
            Ok(t) => Ok(redactor.scrub(&t).into_owned()),
            Err(mut e) => {
                redactor.scrub_string(&mut e.message);
                call.error.get_or_insert_with(|| e.message.clone());
                Err(e)
            }
        };
        Said { text, call }
    }

    /// Its secrets: its key, its secret headers' values, any password in its endpoint.
    pub(crate) fn secrets(&self) -> Redactor {
        super::redactor(&self.agent)
    }

    /// The environment variables its settings read secrets from (to seal).
    pub(crate) fn secret_vars(&self) -> Vec<&str> {
        super::kind::secret_vars(&self.agent)
    }
}

/// The agent config a model's table reads as: `provider` is the runtime, the name the label.
fn agent_of(name: &str, table: &toml::Table) -> Result<Agent, RuntimeError> {
    let bad = |m: String| RuntimeError(format!("model `{name}`: {m}"));
    let mut table = table.clone();
    let provider = match table.remove("provider") {
        Some(toml::Value::String(p)) if named(&p).is_some() => p,
        Some(toml::Value::String(p)) => {
            return Err(bad(format!(
                "unknown provider `{p}` (expected {})",
                names()
            )));
        }
        Some(_) => return Err(bad("`provider` must be a string".into())),
        None => {
            return Err(bad(format!("missing field `provider` ({})", names())));
        }
    };
    if table.contains_key("runtime") {
        return Err(bad(
            "`runtime` is not a setting of a model; `provider` names its API".into(),
        ));
    }
    if table.contains_key("soul") {
        return Err(bad(
            "`soul` is not a setting of a model: the harness writes its prompts".into(),
        ));
    }
    table.insert("runtime".into(), toml::Value::String(provider));
    table
        .entry("label")
        .or_insert_with(|| toml::Value::String(name.to_owned()));
    let text = toml::to_string(&table).map_err(|e| bad(e.to_string()))?;
    let agent = Agent::from_toml(&text).map_err(|e| bad(e.message))?;
    // The settings a model shares with an agent are held to the same ranges, by the same
    // function.
    super::validate_agent(&agent).map_err(bad)?;
    Ok(agent)
}

/// Where a model's table was written, to point at the line of an error in it.
struct Origin<'a> {
    path: &'a Path,
    text: &'a str,
}

impl Origin<'_> {
    /// `error` (about model `name`) prefixed with the file and the line it is about: the line
    /// of the first field the message names (in backticks) inside the model's tables, else
    /// the model's own `[models.<name>]` line.
    fn locate(&self, name: &str, error: RuntimeError) -> RuntimeError {
        let field = error
            .0
            .strip_prefix(&format!("model `{name}`: "))
            .and_then(|m| m.split('`').nth(1))
            .map(|f| f.rsplit('.').next().unwrap_or(f).to_owned());
        let header = format!("models.{name}");
        let mut in_table = false;
        let mut table_line = None;
        let mut field_line = None;
        for (i, line) in self.text.lines().enumerate() {
            let t = line.trim();
            if let Some(h) = t.strip_prefix('[') {
                let h = h.trim_matches(|c| c == '[' || c == ']').trim();
                in_table = h == header || h.starts_with(&format!("{header}."));
                if in_table && table_line.is_none() {
                    table_line = Some(i + 1);
                }
                continue;
            }
            let key = t
                .split('=')
                .next()
                .unwrap_or_default()
                .trim()
                .trim_matches('"');
            if in_table && field.as_deref() == Some(key) && t.contains('=') {
                field_line = Some(i + 1);
                break;
            }
        }
        match field_line.or(table_line) {
            Some(line) => RuntimeError(format!("{}:{line}: {}", self.path.display(), error.0)),
            None => RuntimeError(format!("{}: {}", self.path.display(), error.0)),
        }
    }
}

/// The secrets of every model of `models`.
pub fn redactor(models: &Models) -> Redactor {
    let mut r = Redactor::new();
    for m in models.values() {
        r.extend(&m.secrets());
    }
    r
}

/// The models `tables` declare, each read and checked (its key variable set, its endpoint
/// well formed): the first problem is an error naming the model.
pub fn build(tables: &ModelTables) -> Result<Models, RuntimeError> {
    tables
        .iter()
        .map(|(name, t)| Ok((name.clone(), Arc::new(HarnessModel::from_table(name, t)?))))
        .collect()
}

/// The models a pack's scenarios name, built from the pack's tables with `--models FILE`'s
/// replacing those of the same name, then sealed ([`crate::secrets::seal_env`]): every
/// declared table must read (unknown fields, a bad provider), every named model must be
/// declared and reachable as configured (its key variable set). One line per problem.
///
/// # Safety
///
/// As [`crate::secrets::seal_env`]: no other thread may be reading the environment.
pub unsafe fn for_pack(
    pack: &crate::pack::Pack,
    file: Option<&Path>,
) -> Result<Models, RuntimeError> {
    let manifest = Path::new(&pack.source).join("pack.toml");
    // The pack's own text, to say which line of it an error is on (the embedded demo pack
    // declares no model).
    let manifest_text = if pack.manifest.models.is_empty() {
        String::new()
    } else {
        crate::limits::read_input_file(&manifest, true).unwrap_or_default()
    };
    let from_pack = Origin {
        path: &manifest,
        text: &manifest_text,
    };
    let mut tables = pack.manifest.models.clone();
    let mut replaced = ModelTables::new();
    let file_text;
    let from_file = match file {
        Some(file) => {
            let (text, read) = read_file_text(file)?;
            file_text = text;
            replaced = read;
            Some(Origin {
                path: file,
                text: &file_text,
            })
        }
        None => None,
    };
    tables.extend(replaced.clone());
    let origin = |name: &str| match &from_file {
        Some(o) if replaced.contains_key(name) => o,
        _ => &from_pack,
    };
    for (name, t) in &tables {
        agent_of(name, t).map_err(|e| origin(name).locate(name, e))?;
    }
    if let Some(missing) = pack.missing_model(|m| tables.contains_key(m)) {
        return Err(RuntimeError(missing));
    }
    let named: std::collections::BTreeSet<&str> =
        pack.models_named().into_iter().map(|(_, m)| m).collect();
    let mut models = Models::new();
    for name in named {
        let model = HarnessModel::from_table(name, &tables[name])
            .map_err(|e| origin(name).locate(name, e))?;
        models.insert(name.to_owned(), Arc::new(model));
    }
    let vars: Vec<String> = models
        .values()
        .flat_map(|m| m.secret_vars())
        .map(str::to_owned)
        .collect();
    // SAFETY: passed on to the caller.
    unsafe { crate::secrets::seal_env(vars.iter().map(String::as_str)) };
    Ok(models)
}

/// Reads a `--models FILE`: `[models.<name>]` tables, as in `pack.toml`; nothing else.
pub fn read_file(path: &Path) -> Result<ModelTables, RuntimeError> {
    read_file_text(path).map(|(_, tables)| tables)
}

/// [`read_file`], with the file's text.
fn read_file_text(path: &Path) -> Result<(String, ModelTables), RuntimeError> {
    let text = crate::limits::read_input_file(path, true)
        .map_err(|e| RuntimeError(format!("read {}: {e}", path.display())))?;
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct File {
        #[serde(default)]
        models: ModelTables,
    }
    let file: File = toml::from_str(&text).map_err(|e| {
        let line = e.span().map(|s| {
            1 + text.as_bytes()[..s.start.min(text.len())]
                .iter()
                .filter(|&&b| b == b'\n')
                .count()
        });
        let at = line.map(|l| format!(":{l}")).unwrap_or_default();
        RuntimeError(format!(
            "{}{at}: {}",
            path.display(),
            e.message().trim_end()
        ))
    })?;
    Ok((text, file.models))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(text: &str) -> toml::Table {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn each_provider_writes_and_reads_its_own_shape() {
        let sampling = windtunnel_model::Sampling::default();
        let extra = serde_json::Map::new();
        let call = |p: &dyn Provider| {
            p.chat_body(ChatCall {
                model: Some("m"),
                system: "be brief",
                messages: &[json!({"role": "user", "content": "hi"})],
                sampling: &sampling,
                extra: &extra,
                json: true,
                seed: Some(7),
            })
        };
        let openai = call(named("openai").unwrap());
        assert_eq!(openai["messages"][0]["role"], "system");
        assert_eq!(openai["response_format"]["type"], "json_object");
        assert_eq!(openai["seed"], 7);
        let anthropic = call(named("anthropic").unwrap());
        assert_eq!(anthropic["system"], "be brief");
        assert_eq!(anthropic["messages"][0]["role"], "user");
        assert!(anthropic.get("seed").is_none() && anthropic["max_tokens"].is_u64());
        let mut c = ModelCall::default();
        let reply = json!({"content": [{"type": "text", "text": "ok"}],
                           "usage": {"input_tokens": 3, "output_tokens": 2}});
        let p = named("anthropic").unwrap();
        p.record(&mut c, &reply);
        assert_eq!(p.text(&reply).as_deref(), Some("ok"));
        assert_eq!(c.usage.unwrap().completion_tokens, 2);
        let price = Pricing {
            input: 1.0,
            output: 2.0,
            cached: None,
        };
        assert!((p.cost(&price, &c.usage.unwrap()) - 7e-6).abs() < 1e-12);
        assert_eq!(names(), "openai or anthropic");
        assert!(named("grpc").is_none());
    }

    #[test]
    fn a_models_table_is_read_as_strictly_as_an_agent_config() {
        let ok = table(
            "provider = \"openai\"\nendpoint = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\n[pricing]\ninput = 1.0\noutput = 2.0\n",
        );
        let m = HarnessModel::from_table("sim", &ok).unwrap();
        assert!(m.pricing().is_some());
        assert!(m.identity().starts_with("sha256:"));
        let e = HarnessModel::from_table("sim", &table("provider = \"openai\"\nendpoint = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\nbogus = 1\n"))
            .err()
            .unwrap()
            .to_string();
        assert!(e.starts_with("model `sim`: ") && e.contains("bogus"), "{e}");
        let e = HarnessModel::from_table("sim", &table("endpoint = \"http://x/v1\"\n"))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("missing field `provider`"), "{e}");
        let e = HarnessModel::from_table("sim", &table("provider = \"process\"\n"))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("unknown provider `process`"), "{e}");
        let e = HarnessModel::from_table(
            "sim",
            &table("provider = \"openai\"\nendpoint = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\napi_key_env = \"WT_TEST_NO_SUCH_KEY_VAR\"\n"),
        )
        .err()
        .unwrap()
        .to_string();
        assert!(
            e.contains("WT_TEST_NO_SUCH_KEY_VAR") && e.contains("not set"),
            "{e}"
        );
    }

    #[test]
    fn the_identity_changes_with_what_decides_the_answers_only() {
        let id = |t: &str| {
            HarnessModel::from_table("j", &table(t))
                .unwrap()
                .identity()
                .to_owned()
        };
        let base = "provider = \"openai\"\nendpoint = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\n";
        assert_eq!(id(base), id(&format!("{base}max_concurrency = 2\n")));
        assert_ne!(
            id(base),
            id(&format!("{base}[sampling]\ntemperature = 0.5\n"))
        );
        assert_ne!(
            id(base),
            id("provider = \"openai\"\nendpoint = \"http://127.0.0.1:9/v1\"\nmodel = \"n\"\n")
        );
    }
}
