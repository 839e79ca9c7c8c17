//! Strict reading of the files a person writes (pack manifests, scenarios, agent configs).
//!
//! The SDK's data model ignores fields it does not know, so a hook keeps working under a
//! newer `wt`; a file with a misspelt field must be refused instead, saying where. Reading
//! goes through `serde_ignored`, which reports every key the target type did not take; the
//! first one is an error placed at its line and column (`toml_edit` keeps the spans).
//! Free-form JSON members (a scenario's `world`, a tool's `parameters`) take every key, so
//! they are never refused.

use serde::de::DeserializeOwned;
use toml_edit::{ImDocument, Item};

/// Why a file was refused, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StrictError {
    pub message: String,
    /// 1-based line and column, when known.
    pub at: Option<(usize, usize)>,
}

impl StrictError {
    /// `line L, column C`, or empty when the place is unknown.
    pub fn place(&self) -> String {
        self.at
            .map(|(l, c)| format!("line {l}, column {c}"))
            .unwrap_or_default()
    }

    fn at_offset(text: &str, message: String, offset: Option<usize>) -> Self {
        StrictError {
            message,
            at: offset.map(|o| line_col(text, o)),
        }
    }
}

impl std::fmt::Display for StrictError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.at {
            Some((l, c)) => write!(f, "line {l}, column {c}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

/// 1-based line and column of byte `offset` in `text`.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
    (line, col)
}

/// One step of a path into a document.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    Key(String),
    Index(usize),
}

fn steps(path: &serde_ignored::Path<'_>, out: &mut Vec<Step>) {
    use serde_ignored::Path;
    match path {
        Path::Root => {}
        Path::Seq { parent, index } => {
            steps(parent, out);
            out.push(Step::Index(*index));
        }
        Path::Map { parent, key } => {
            steps(parent, out);
            out.push(Step::Key(key.clone()));
        }
        Path::Some { parent }
        | Path::NewtypeStruct { parent }
        | Path::NewtypeVariant { parent } => steps(parent, out),
    }
}

/// The byte offset of the last key of `path` in `doc` (of the deepest item reached, when
/// the key itself cannot be found).
fn offset_of(doc: &ImDocument<&str>, path: &[Step]) -> Option<usize> {
    let mut item: &Item = doc.as_item();
    let mut best = None;
    for (i, step) in path.iter().enumerate() {
        let next = match step {
            Step::Key(k) => {
                let table = item.as_table_like()?;
                if i == path.len() - 1 {
                    return table
                        .key(k)
                        .and_then(|k| k.span())
                        .map(|s| s.start)
                        .or(best);
                }
                table.get(k)
            }
            Step::Index(n) => item.get(*n),
        };
        item = next?;
        best = item.span().map(|s| s.start).or(best);
    }
    best
}

/// Reads a `T` from TOML `text`, refusing any key `T` does not define.
pub(crate) fn from_toml<T: DeserializeOwned>(text: &str) -> Result<T, StrictError> {
    let mut ignored: Vec<Vec<Step>> = Vec::new();
    let value: T = serde_ignored::deserialize(toml::Deserializer::new(text), |path| {
        let mut out = Vec::new();
        steps(&path, &mut out);
        ignored.push(out);
    })
    .map_err(|e| StrictError {
        message: e.message().trim_end().to_owned(),
        at: e.span().map(|s| line_col(text, s.start)),
    })?;
    let Some(first) = ignored.first() else {
        return Ok(value);
    };
    let name = match first.last() {
        Some(Step::Key(k)) => k.clone(),
        Some(Step::Index(n)) => n.to_string(),
        None => String::new(),
    };
    let offset = ImDocument::parse(text)
        .ok()
        .and_then(|doc| offset_of(&doc, first));
    Err(StrictError::at_offset(
        text,
        format!("unknown field `{name}`"),
        offset,
    ))
}

/// Where a scenario's tools' effects break the rules their `kind` sets: a kind that is not
/// `read`, `write` or `append`, or a field that does not apply to the kind (`value` on a
/// `read`, …). The data model reads such effects leniently (for hooks); a pack must not.
pub(crate) fn check_effects(text: &str) -> Result<(), StrictError> {
    const KINDS: [(&str, &[&str]); 4] = [
        ("read", &["kind", "path", "key_arg"]),
        ("write", &["kind", "path", "key_arg", "value_arg", "value"]),
        ("append", &["kind", "path", "value_arg"]),
        ("find", &["kind", "path", "by"]),
    ];
    let Ok(doc) = ImDocument::parse(text) else {
        return Ok(());
    };
    let Some(tools) = doc.as_item().get("tools") else {
        return Ok(());
    };
    for i in 0.. {
        let Some(tool) = tools.get(i) else { break };
        let Some(effect) = tool.get("effect").and_then(Item::as_table_like) else {
            continue;
        };
        let span_of_key = |k: &str| effect.key(k).and_then(|k| k.span()).map(|s| s.start);
        let Some(kind) = effect.get("kind").and_then(Item::as_str) else {
            continue;
        };
        let Some((_, fields)) = KINDS.iter().find(|(k, _)| *k == kind) else {
            let at = effect.get("kind").and_then(Item::span).map(|s| s.start);
            return Err(StrictError::at_offset(
                text,
                if kind == "server" {
                    "a world server's tools come from the server (`[world_server]`), not from `tools`".to_owned()
                } else {
                    format!(
                        "unknown variant `{kind}`, expected one of `read`, `write`, `append`, `find`"
                    )
                },
                at,
            ));
        };
        for (key, _) in effect.iter() {
            if !fields.contains(&key) {
                return Err(StrictError::at_offset(
                    text,
                    format!("field `{key}` does not apply to `{kind}` effects"),
                    span_of_key(key),
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use windtunnel_model::{AgentConfig, Scenario};

    #[test]
    fn an_unknown_key_is_refused_at_its_line_and_column_at_any_depth() {
        let e =
            from_toml::<Scenario>("id = \"s\"\nturns = [\"hi\"]\ncolour = \"red\"\n").unwrap_err();
        assert_eq!(
            (e.message.as_str(), e.at),
            ("unknown field `colour`", Some((3, 1)))
        );
        let text = "id = \"s\"\nturns = [\"hi\"]\n\n[[tools]]\nname = \"a\"\neffect = { kind = \"read\", path = \"p\" }\n\n[[tools]]\nname = \"b\"\neffect = { kind = \"read\", path = \"p\", key_ar = \"id\" }\n";
        let e = from_toml::<Scenario>(text).unwrap_err();
        assert_eq!(e.message, "unknown field `key_ar`");
        assert_eq!(e.at, Some((10, 39)));
        let e = from_toml::<AgentConfig>(
            "label = \"a\"\nruntime = \"demo\"\n[sampling]\ntemprature = 0.2\n",
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "line 4, column 1: unknown field `temprature`"
        );
    }

    #[test]
    fn free_form_json_and_known_fields_pass() {
        let text = "id = \"s\"\nturns = [\"hi\"]\nworld = { anything = { goes = 1 } }\n\n[[tools]]\nname = \"a\"\nparameters = { type = \"object\", whatever = true }\neffect = { kind = \"write\", path = \"p\", value = 3 }\n";
        let s: Scenario = from_toml(text).unwrap();
        assert_eq!(s.tools[0].name, "a");
        check_effects(text).unwrap();
    }

    #[test]
    fn effects_keep_to_their_kind() {
        let tool = |effect: &str| {
            format!("id = \"s\"\nturns = [\"x\"]\n[[tools]]\nname = \"t\"\neffect = {effect}\n")
        };
        let e = check_effects(&tool("{ kind = \"read\", path = \"p\", value = 1 }")).unwrap_err();
        assert_eq!(e.message, "field `value` does not apply to `read` effects");
        assert_eq!(e.at, Some((5, 39)));
        let e = check_effects(&tool(
            "{ kind = \"append\", path = \"p\", key_arg = \"k\" }",
        ))
        .unwrap_err();
        assert!(
            e.message.contains("`key_arg` does not apply to `append`"),
            "{e}"
        );
        let e = check_effects(&tool("{ kind = \"delete\", path = \"p\" }")).unwrap_err();
        assert!(e.message.starts_with("unknown variant `delete`"), "{e}");
        check_effects(&tool(
            "{ kind = \"append\", path = \"p\", value_arg = \"v\" }",
        ))
        .unwrap();
    }
}
