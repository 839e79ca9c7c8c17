//! A scenario's declared tools as an MCP server offers them: the listing (name, description,
//! input schema from the pack) and a compiled validator per schema, so a call whose
//! arguments do not match is a failed call that never reaches the world.

use std::sync::Arc;

use serde_json::Value;
use windtunnel_model::ToolSpec;

/// Why a scenario's tools cannot be served over MCP.
#[derive(Debug, thiserror::Error)]
pub enum ToolSetError {
    #[error("tool `{tool}`: `parameters` must be a JSON object (a JSON Schema of the arguments)")]
    NotAnObject { tool: String },
    #[error("tool `{tool}`: `parameters` is not a valid JSON Schema: {message}")]
    BadSchema { tool: String, message: String },
}

/// How many schema violations a failed call's error lists.
const SHOWN_VIOLATIONS: usize = 3;

/// The tools of one scenario, ready to be served.
pub struct ToolSet {
    specs: Vec<ToolSpec>,
    validators: Vec<jsonschema::Validator>,
    listing: Vec<rmcp::model::Tool>,
}

impl std::fmt::Debug for ToolSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolSet")
            .field(
                "tools",
                &self.specs.iter().map(|t| &t.name).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl ToolSet {
    /// Compiles every tool's schema. Schemas are closed over themselves: a `$ref` to
    /// anything outside the schema (a file, a URL) is an error, never a fetch.
    pub fn new(specs: &[ToolSpec]) -> Result<Arc<ToolSet>, ToolSetError> {
        let mut validators = Vec::with_capacity(specs.len());
        let mut listing = Vec::with_capacity(specs.len());
        for spec in specs {
            let Value::Object(schema) = &spec.parameters else {
                return Err(ToolSetError::NotAnObject {
                    tool: spec.name.clone(),
                });
            };
            let validator = jsonschema::validator_for(&spec.parameters).map_err(|e| {
                ToolSetError::BadSchema {
                    tool: spec.name.clone(),
                    message: e.to_string(),
                }
            })?;
            validators.push(validator);
            let description = (!spec.description.is_empty())
                .then(|| std::borrow::Cow::Owned(spec.description.clone()));
            listing.push(rmcp::model::Tool::new_with_raw(
                spec.name.clone(),
                description,
                Arc::new(schema.clone()),
            ));
        }
        Ok(Arc::new(ToolSet {
            specs: specs.to_vec(),
            validators,
            listing,
        }))
    }

    pub fn specs(&self) -> &[ToolSpec] {
        &self.specs
    }

    pub fn listing(&self) -> &[rmcp::model::Tool] {
        &self.listing
    }

    /// Do `args` match `spec`'s schema? `Err` names the first few violations.
    pub fn check(&self, spec: &ToolSpec, args: &Value) -> Result<(), String> {
        let Some(i) = self.specs.iter().position(|t| t.name == spec.name) else {
            return Err(format!("unknown tool `{}`", spec.name));
        };
        let validator = &self.validators[i];
        if validator.is_valid(args) {
            return Ok(());
        }
        let all: Vec<String> = validator
            .iter_errors(args)
            .map(|e| {
                let at = e.instance_path().to_string();
                if at.is_empty() {
                    e.to_string()
                } else {
                    format!("at {at}: {e}")
                }
            })
            .collect();
        let mut shown = all
            .iter()
            .take(SHOWN_VIOLATIONS)
            .cloned()
            .collect::<Vec<_>>()
            .join("; ");
        if all.len() > SHOWN_VIOLATIONS {
            shown.push_str(&format!(" (and {} more)", all.len() - SHOWN_VIOLATIONS));
        }
        Err(format!(
            "arguments do not match the schema of `{}`: {shown}",
            spec.name
        ))
    }
}
