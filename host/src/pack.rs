//! Packs: a directory (`pack.toml` + `scenarios/*.toml`) or the demo pack embedded in the
//! binary. Loading validates everything before anything runs, and every error names the
//! file, the place in it and what is wrong. This module only reads and checks; it never
//! runs a scenario.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use windtunnel_model::{FileCheck, Scenario, ToolEffect, WorldCheck, WorldServer, is_slug};

use crate::world::lookup;

/// The pack manifest, `pack.toml`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PackManifest {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub version: Option<String>,
    /// A world server for every scenario of the pack that declares none of its own.
    #[serde(default)]
    pub world_server: Option<WorldServer>,
    /// Models the harness calls itself (simulated users, judges), by name: each table is
    /// read by [`crate::runtime::models`] when a sweep starts.
    #[serde(default)]
    pub models: BTreeMap<String, toml::Table>,
}

/// A validated pack.
#[derive(Clone, Debug)]
pub struct Pack {
    pub manifest: PackManifest,
    /// Where it came from: a directory, or `<embedded demo>`.
    pub source: String,
    /// Scenarios in file-name order.
    pub scenarios: Vec<Scenario>,
}

/// Why a pack was rejected.
#[derive(Debug, thiserror::Error)]
pub enum PackError {
    #[error("read pack {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{file}: {place}{message}")]
    Invalid {
        file: String,
        /// `line:col: ` or `field: `, empty when the whole file is meant.
        place: String,
        message: String,
    },
    #[error("{file}: duplicate scenario id `{id}` (also in {first})")]
    DuplicateId {
        file: String,
        id: String,
        first: String,
    },
    #[error("pack {dir} has no scenarios (expected scenarios/*.toml)")]
    Empty { dir: String },
}

impl PackError {
    fn invalid(file: &str, place: impl Into<String>, message: impl Into<String>) -> Self {
        let place = place.into();
        PackError::Invalid {
            file: file.to_owned(),
            place: if place.is_empty() {
                place
            } else {
                format!("{place}: ")
            },
            message: message.into(),
        }
    }
}

const DEMO_MANIFEST: &str = include_str!("../packs/demo/pack.toml");
const DEMO_SCENARIOS: &[(&str, &str)] = &[
    (
        "scenarios/escalate-human.toml",
        include_str!("../packs/demo/scenarios/escalate-human.toml"),
    ),
    (
        "scenarios/order-status.toml",
        include_str!("../packs/demo/scenarios/order-status.toml"),
    ),
    (
        "scenarios/refund-damaged.toml",
        include_str!("../packs/demo/scenarios/refund-damaged.toml"),
    ),
];

impl Pack {
    /// The demo pack embedded in the binary.
    pub fn demo() -> Pack {
        let files = DEMO_SCENARIOS
            .iter()
            .map(|(name, text)| (format!("<embedded demo>/{name}"), (*text).to_owned()))
            .collect();
        Pack::from_sources(
            "<embedded demo>",
            ("<embedded demo>/pack.toml", DEMO_MANIFEST),
            files,
        )
        .expect("the embedded demo pack is valid")
    }

    /// Loads and validates the pack in `dir`.
    pub fn load(dir: &Path) -> Result<Pack, PackError> {
        let io = |path: &Path| {
            let path = path.to_owned();
            move |source| PackError::Io { path, source }
        };
        let manifest_path = dir.join("pack.toml");
        // A pack is outside input: its files are read as regular files only, never through
        // a symbolic link, bounded.
        let manifest =
            crate::limits::read_input_file(&manifest_path, true).map_err(io(&manifest_path))?;
        let scen_dir = dir.join("scenarios");
        let mut paths = Vec::new();
        for entry in std::fs::read_dir(&scen_dir).map_err(io(&scen_dir))? {
            let path = entry.map_err(io(&scen_dir))?.path();
            if path.extension().is_some_and(|e| e == "toml") {
                paths.push(path);
            }
        }
        paths.sort();
        let mut files = Vec::new();
        for path in paths {
            let text = crate::limits::read_input_file(&path, true).map_err(io(&path))?;
            files.push((path.display().to_string(), text));
        }
        let mut pack = Pack::from_sources(
            &dir.display().to_string(),
            (&manifest_path.display().to_string(), &manifest),
            files,
        )?;
        // What a world server names relative to the pack is resolved now; `files` must be a
        // directory of the pack.
        let pack_dir = std::path::absolute(dir).map_err(io(dir))?;
        for s in &mut pack.scenarios {
            if let Some(ws) = &mut s.world_server {
                crate::world::server::resolve_files(ws, &pack_dir);
                if let Some(files) = &ws.files {
                    let meta = std::fs::symlink_metadata(files);
                    if !meta.as_ref().is_ok_and(std::fs::Metadata::is_dir) {
                        return Err(PackError::invalid(
                            &format!("scenario `{}`", s.id),
                            "world_server.files",
                            format!("{files} is not a directory of the pack"),
                        ));
                    }
                    // Copied into every run's scratch directory, and never through a link:
                    // a link there is refused now rather than in every run.
                    let scratch = tempfile::tempdir().map_err(io(dir))?;
                    crate::world::server::copy_files(std::path::Path::new(files), scratch.path())
                        .map_err(|e| {
                        PackError::invalid(&format!("scenario `{}`", s.id), "world_server.files", e)
                    })?;
                }
            }
        }
        Ok(pack)
    }

    /// Parses and validates a pack from file names and contents.
    pub fn from_sources(
        source: &str,
        manifest: (&str, &str),
        scenarios: Vec<(String, String)>,
    ) -> Result<Pack, PackError> {
        let manifest_file = manifest.0;
        let manifest: PackManifest = parse_toml(manifest.0, manifest.1)?;
        if scenarios.is_empty() {
            return Err(PackError::Empty {
                dir: source.to_owned(),
            });
        }
        let mut seen: BTreeMap<String, String> = BTreeMap::new();
        let mut out = Vec::new();
        if let Some(ws) = &manifest.world_server {
            validate_server(manifest_file, ws)?;
        }
        for (file, text) in scenarios {
            let mut scenario: Scenario = parse_toml(&file, &text)?;
            if scenario.world_server.is_none() {
                scenario.world_server = manifest.world_server.clone();
            }
            crate::strict::check_effects(&text)
                .map_err(|e| PackError::invalid(&file, e.place(), e.message))?;
            validate(&file, &scenario)?;
            if let Some(first) = seen.get(&scenario.id) {
                return Err(PackError::DuplicateId {
                    file,
                    id: scenario.id,
                    first: first.clone(),
                });
            }
            seen.insert(scenario.id.clone(), file);
            out.push(scenario);
        }
        Ok(Pack {
            manifest,
            source: source.to_owned(),
            scenarios: out,
        })
    }

    /// The models the scenarios name (a simulated user's, each judge's), with where.
    pub fn models_named(&self) -> Vec<(String, &str)> {
        let mut named = Vec::new();
        for s in &self.scenarios {
            if let Some(u) = &s.user {
                named.push((format!("scenario `{}`: user.model", s.id), u.model.as_str()));
            }
            for (i, j) in s.expect.judge.iter().enumerate() {
                named.push((
                    format!("scenario `{}`: expect.judge[{i}].model", s.id),
                    j.model.as_str(),
                ));
            }
        }
        named
    }

    /// The first model a scenario names that `declared` does not hold, as a one-line error.
    pub fn missing_model(&self, declared: impl Fn(&str) -> bool) -> Option<String> {
        self.models_named()
            .into_iter()
            .find(|(_, m)| !declared(m))
            .map(|(place, m)| {
                format!(
                    "{place}: no model `{m}` is declared (add [models.{m}] to pack.toml, or pass --models FILE)"
                )
            })
    }

    /// The scenario with this id.
    pub fn scenario(&self, id: &str) -> Option<&Scenario> {
        self.scenarios.iter().find(|s| s.id == id)
    }

    /// Keeps only the scenarios whose id matches `pattern` (a glob with `*` and `?`, or else
    /// a substring).
    pub fn filter(&mut self, pattern: &str) {
        self.scenarios.retain(|s| matches_pattern(pattern, &s.id));
    }
}

/// The content identity of a scenario as run: `sha256:<hex>` of its definition as JSON with
/// every object's keys sorted, leaving out what does not change the test (its run count,
/// description and tags). Recorded in every trace (`scenario_digest`), so a comparison can
/// tell an edited scenario from a changed agent.
pub fn scenario_digest(scenario: &Scenario) -> String {
    use sha2::{Digest, Sha256};
    fn sorted(v: serde_json::Value) -> serde_json::Value {
        match v {
            serde_json::Value::Object(m) => {
                let mut pairs: Vec<(String, serde_json::Value)> = m.into_iter().collect();
                pairs.sort_by(|a, b| a.0.cmp(&b.0));
                serde_json::Value::Object(pairs.into_iter().map(|(k, v)| (k, sorted(v))).collect())
            }
            serde_json::Value::Array(a) => {
                serde_json::Value::Array(a.into_iter().map(sorted).collect())
            }
            other => other,
        }
    }
    let mut value = serde_json::to_value(scenario).unwrap_or(serde_json::Value::Null);
    if let Some(m) = value.as_object_mut() {
        for volatile in ["runs", "description", "tags"] {
            m.remove(volatile);
        }
    }
    let bytes = serde_json::to_vec(&sorted(value)).unwrap_or_default();
    let hex: String = Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("sha256:{hex}")
}

/// Refuses, before anything runs, the scenarios an agent that cannot reach the fixture
/// world could not be judged on: those with tool expectations (its calls are not seen), and
/// world checks unless the world is a `url` server it can share with `wt`. `agent`
/// names the agent for the message.
pub(crate) fn check_reachable(pack: &Pack, agent: &str) -> Result<(), String> {
    for s in &pack.scenarios {
        let e = &s.expect;
        // A world server at a `url` runs on its own: an agent that cannot be handed the
        // run's world may share that server with `wt`, which reads its state all the same.
        let shared_world = s.world_server.as_ref().is_some_and(|w| w.url.is_some());
        let judged = if !e.outcome.world.is_empty() && !shared_world {
            Some("world checks (expect.outcome.world)")
        } else if !e.trajectory.required_tools.is_empty() {
            Some("required tools (expect.trajectory)")
        } else if !e.constraint.forbidden_tools.is_empty()
            || e.constraint.max_steps.is_some()
            || e.constraint.max_steps_per_turn.is_some()
        {
            Some("tool constraints (expect.constraint)")
        } else {
            None
        };
        if let Some(what) = judged {
            return Err(format!(
                "scenario `{}` judges {what}, but agent `{agent}` cannot reach the fixture world (`mcp = false`, or a remote `a2a` agent), so its tool calls are not seen; drop the scenario with --filter, let the agent use MCP, or judge it on a `url` world server it shares",
                s.id
            ));
        }
    }
    Ok(())
}

/// Glob (`*`, `?`) when the pattern has wildcards, substring otherwise.
pub(crate) fn matches_pattern(pattern: &str, text: &str) -> bool {
    if !pattern.contains(['*', '?']) {
        return text.contains(pattern);
    }
    fn glob(p: &[u8], t: &[u8]) -> bool {
        match (p.first(), t.first()) {
            (None, None) => true,
            (Some(b'*'), _) => glob(&p[1..], t) || (!t.is_empty() && glob(p, &t[1..])),
            (Some(b'?'), Some(_)) => glob(&p[1..], &t[1..]),
            (Some(a), Some(b)) if a == b => glob(&p[1..], &t[1..]),
            _ => false,
        }
    }
    glob(pattern.as_bytes(), text.as_bytes())
}

fn parse_toml<T: serde::de::DeserializeOwned>(file: &str, text: &str) -> Result<T, PackError> {
    // Strict: the data model tolerates unknown fields (for hooks), a pack file must not.
    crate::strict::from_toml(text).map_err(|e| PackError::invalid(file, e.place(), e.message))
}

fn validate(file: &str, s: &Scenario) -> Result<(), PackError> {
    let bad = |place: &str, msg: String| Err(PackError::invalid(file, place, msg));
    if !is_slug(&s.id) {
        return bad(
            "id",
            format!(
                "invalid scenario id {:?}: use 1-64 characters of a-z, 0-9, `_` and `-` (no dots)",
                s.id
            ),
        );
    }
    if s.turns.is_empty() && s.user.is_none() {
        return bad(
            "turns",
            "a scenario needs at least one turn, or a simulated [user]".into(),
        );
    }
    if let Some(u) = &s.user {
        if u.model.trim().is_empty() {
            return bad("user.model", "name one of the pack's [models]".into());
        }
        if u.instruction.trim().is_empty() {
            return bad(
                "user.instruction",
                "say who the user is and what they want".into(),
            );
        }
        if u.max_turns == 0 || u.max_turns > 100 {
            return bad("user.max_turns", "must be from 1 to 100".into());
        }
        if u.stop.trim().is_empty() {
            return bad(
                "user.stop",
                "the word the user model ends with cannot be empty".into(),
            );
        }
    }
    for (i, j) in s.expect.judge.iter().enumerate() {
        let place = format!("expect.judge[{i}]");
        if j.model.trim().is_empty() {
            return bad(
                &format!("{place}.model"),
                "name one of the pack's [models]".into(),
            );
        }
        if j.rubric.trim().is_empty() {
            return bad(
                &format!("{place}.rubric"),
                "say what a passing run does".into(),
            );
        }
        if j.samples == 0 || j.samples % 2 == 0 || j.samples > 15 {
            return bad(
                &format!("{place}.samples"),
                format!(
                    "must be odd, from 1 to 15, so a majority decides (got {})",
                    j.samples
                ),
            );
        }
    }
    if let Some(i) = s.turns.iter().position(|t| t.trim().is_empty()) {
        return bad(&format!("turns[{i}]"), "turn is empty".into());
    }
    if s.runs == 0 {
        return bad("runs", "must be at least 1".into());
    }
    let mut names = BTreeMap::new();
    for (i, tool) in s.tools.iter().enumerate() {
        let place = format!("tools[{i}] ({})", tool.name);
        if tool.name.is_empty()
            || !tool
                .name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        {
            return bad(
                &place,
                format!(
                    "invalid tool name {:?}: use letters, digits, `_` and `-`",
                    tool.name
                ),
            );
        }
        if let Some(first) = names.insert(tool.name.clone(), i) {
            return bad(&place, format!("duplicate tool name (also tools[{first}])"));
        }
        let Some(world) = &s.world else {
            return bad(
                &place,
                "tool acts on the fixture world, but the scenario has no `world`".into(),
            );
        };
        for (j, c) in tool.when.iter().enumerate() {
            let at = format!("{place}.when[{j}]");
            if c.path.is_some() == c.arg.is_some() {
                return bad(
                    &at,
                    "a condition reads the world (`path`) or the arguments (`arg`): name exactly one".into(),
                );
            }
            if c.equals.is_none() && c.exists.is_none() {
                return bad(
                    &at,
                    "a condition with neither `equals` nor `exists` would always hold".into(),
                );
            }
            if c.error.trim().is_empty() {
                return bad(
                    &at,
                    "`error` is empty: say what the agent is told when the condition does not hold"
                        .into(),
                );
            }
        }
        let (path, must_exist) = match &tool.effect {
            ToolEffect::Read { path, .. } => (path, true),
            ToolEffect::Find { path, by } => {
                if by.is_empty() {
                    return bad(
                        &format!("{place}.effect.by"),
                        "`by` is empty: name the fields to match (field = \"argument\")".into(),
                    );
                }
                (path, true)
            }
            ToolEffect::Write { path, key_arg, .. } => (path, key_arg.is_some()),
            ToolEffect::Append { path, .. } => (path, true),
            // Strict parsing refuses unknown kinds; a kind added to the SDK must be
            // validated here before packs may use it.
            _ => {
                return bad(
                    &format!("{place}.effect.kind"),
                    "this wt cannot run this tool effect".into(),
                );
            }
        };
        let checked = if must_exist {
            path.as_str()
        } else {
            path.rsplit_once('.').map_or("", |(parent, _)| parent)
        };
        match lookup(world, checked) {
            None => {
                return bad(
                    &format!("{place}.effect.path"),
                    format!("`{checked}` does not exist in the scenario's world"),
                );
            }
            Some(v) if matches!(tool.effect, ToolEffect::Append { .. }) && !v.is_array() => {
                return bad(
                    &format!("{place}.effect.path"),
                    format!("append target `{path}` is not an array in the world"),
                );
            }
            Some(_) => {}
        }
    }
    // A world check that says neither what must be there nor whether anything must be
    // would always hold.
    let checks = s
        .preconditions
        .iter()
        .enumerate()
        .map(|(i, c)| (format!("preconditions[{i}]"), c))
        .chain(
            s.expect
                .outcome
                .world
                .iter()
                .enumerate()
                .map(|(i, c)| (format!("expect.outcome.world[{i}]"), c)),
        );
    for (place, check) in checks {
        check_world_check(file, &place, "world check", check)?;
    }
    if let Some(ws) = &s.world_server {
        validate_server(file, ws)?;
        let reads_world = !s.preconditions.is_empty() || !s.expect.outcome.world.is_empty();
        if reads_world && ws.state.is_none() && s.world.is_none() {
            return bad(
                "world_server.state",
                "the scenario's world checks read the world server's state, but `[world_server]` has no `state` call".into(),
            );
        }
    }
    if !s.expect.outcome.files.is_empty()
        && s.world_server
            .as_ref()
            .is_none_or(|ws| ws.command.is_none())
    {
        return bad(
            "expect.outcome.files",
            "file checks read the run's scratch directory, which only a `command` world server has"
                .into(),
        );
    }
    for (i, f) in s.expect.outcome.files.iter().enumerate() {
        check_file_check(file, &format!("expect.outcome.files[{i}]"), f)?;
    }
    // A tool an expectation names but the scenario does not declare is a typo: a
    // constraint on it could never fail, a requirement never pass. A world server's tools
    // are known here when `tools` lists them; otherwise once the server lists them.
    let server_names_known = match &s.world_server {
        None => true,
        Some(ws) => match &ws.tools {
            Some(list) => {
                for (i, t) in list.iter().enumerate() {
                    names.insert(t.clone(), i);
                }
                true
            }
            None => false,
        },
    };
    if !names.is_empty() && server_names_known {
        let named = [
            (
                "expect.trajectory.required_tools",
                &s.expect.trajectory.required_tools,
            ),
            (
                "expect.constraint.forbidden_tools",
                &s.expect.constraint.forbidden_tools,
            ),
        ];
        for (place, list) in named {
            for (i, name) in list.iter().enumerate() {
                if !names.contains_key(name) {
                    let declared: Vec<&str> = names.keys().map(String::as_str).collect();
                    return bad(
                        &format!("{place}[{i}]"),
                        format!(
                            "no tool `{name}` is declared in this scenario (declared: {})",
                            declared.join(", ")
                        ),
                    );
                }
            }
        }
    }
    Ok(())
}

/// Checks a `[world_server]` table: a command or a URL, how long-lived, and what `wt` calls.
fn validate_server(file: &str, ws: &WorldServer) -> Result<(), PackError> {
    let bad = |place: &str, msg: String| Err(PackError::invalid(file, place, msg));
    match (&ws.command, &ws.url) {
        (Some(_), Some(_)) | (None, None) => {
            return bad(
                "world_server",
                "give either `command` (a stdio MCP server wt starts) or `url` (a streamable-HTTP one), not both".into(),
            );
        }
        (Some(argv), None) if argv.first().is_none_or(|p| p.trim().is_empty()) => {
            return bad("world_server.command", "is empty: name the program".into());
        }
        (None, Some(url)) => {
            if !(url.starts_with("http://") || url.starts_with("https://"))
                || reqwest::Url::parse(url).is_err()
            {
                return bad("world_server.url", format!("{url:?} is not an http(s) URL"));
            }
            if ws.reset.is_empty() {
                return bad(
                    "world_server.reset",
                    "a `url` world server keeps its state between runs: declare the `reset` calls that bring it back to its starting state".into(),
                );
            }
            if ws.files.is_some() {
                return bad(
                    "world_server.files",
                    "a `url` world server has no scratch directory of wt's to copy files into"
                        .into(),
                );
            }
        }
        _ => {}
    }
    match ws.per.as_deref() {
        None | Some("run") => {}
        Some("lane") if ws.url.is_none() => {
            if ws.reset.is_empty() {
                return bad(
                    "world_server.reset",
                    "`per = \"lane\"` keeps one server for a lane's runs: declare the `reset` calls that bring it back to its starting state between them".into(),
                );
            }
        }
        Some("lane") => {}
        Some(other) => {
            return bad(
                "world_server.per",
                format!(
                    "unknown value {other:?}: use \"run\" (a fresh server per run) or \"lane\""
                ),
            );
        }
    }
    if let Some(sandbox) = &ws.sandbox {
        if ws.command.is_none() {
            return bad(
                "world_server.sandbox",
                "only a `command` server is started by wt, and so confined".into(),
            );
        }
        if let Err(why) = crate::sandbox::check(sandbox) {
            return bad("world_server.sandbox", why);
        }
    }
    for (field, v) in [
        ("start_timeout_s", ws.start_timeout_s),
        ("call_timeout_s", ws.call_timeout_s),
    ] {
        if let Some(v) = v
            && !(v.is_finite() && v > 0.0 && v <= 3600.0)
        {
            return bad(
                &format!("world_server.{field}"),
                format!("{v} is not a number of seconds in (0, 3600]"),
            );
        }
    }
    for k in ws.env.keys() {
        if k.is_empty() || k.contains(['=', '\0']) {
            return bad(
                "world_server.env",
                format!("{k:?} is not an environment variable name"),
            );
        }
    }
    let calls = ws
        .setup
        .iter()
        .chain(&ws.reset)
        .chain(ws.state.as_ref())
        .map(|c| (c.tool.as_str(), &c.arguments));
    for (tool, args) in calls {
        if tool.trim().is_empty() || !args.is_object() {
            return bad(
                "world_server",
                format!(
                    "a call of wt's (setup, reset, state) needs a `tool` and an `arguments` table (got tool {tool:?})"
                ),
            );
        }
    }
    Ok(())
}

/// A file check names a path inside the run's scratch directory and says what must hold.
fn check_file_check(file: &str, place: &str, f: &FileCheck) -> Result<(), PackError> {
    let bad = |msg: String| Err(PackError::invalid(file, place, msg));
    let p = std::path::Path::new(&f.path);
    if f.path.is_empty()
        || p.is_absolute()
        || p.components()
            .any(|c| !matches!(c, std::path::Component::Normal(_)))
    {
        return bad(format!(
            "{:?} is not a path inside the run's scratch directory (relative, no `..`)",
            f.path
        ));
    }
    if f.exists.is_none()
        && f.equals.is_none()
        && f.contains.is_none()
        && f.matches.is_none()
        && f.json.is_none()
    {
        return bad(format!(
            "file check on `{}` has no `exists`, `equals`, `contains`, `matches` or `json`: it would always hold",
            f.path
        ));
    }
    if f.exists == Some(false)
        && (f.equals.is_some() || f.contains.is_some() || f.matches.is_some() || f.json.is_some())
    {
        return bad(format!(
            "file check on `{}` says `exists = false` and checks the file's content: it can never hold",
            f.path
        ));
    }
    if let Some(pattern) = &f.matches {
        crate::world::regex(pattern)
            .map_err(|e| PackError::invalid(file, place, format!("`matches`: {e}")))?;
    }
    match (f.format.as_deref(), &f.json) {
        (None, _) | (Some("json" | "jsonl"), Some(_)) => {}
        (Some("json" | "jsonl"), None) => {
            return bad(format!(
                "`format` says how the `json` check reads `{}`, and there is no `json` check",
                f.path
            ));
        }
        (Some(other), _) => {
            return bad(format!(
                "unknown `format` {other:?}: use \"json\" or \"jsonl\" (JSON Lines)"
            ));
        }
    }
    if let Some(j) = &f.json {
        check_world_check(file, &format!("{place}.json"), "the `json` check", j)?;
    }
    Ok(())
}

/// A world check (or a file's `json` check) says what must hold, can hold, and its
/// `matches` is a regular expression.
fn check_world_check(file: &str, place: &str, what: &str, c: &WorldCheck) -> Result<(), PackError> {
    let bad = |msg: String| Err(PackError::invalid(file, place, msg));
    let on = if c.path.is_empty() {
        "the whole value".to_owned()
    } else {
        format!("`{}`", c.path)
    };
    let values = c.equals.is_some()
        || c.contains.is_some()
        || c.matches.is_some()
        || c.gt.is_some()
        || c.ge.is_some()
        || c.lt.is_some()
        || c.le.is_some();
    if !values && c.exists.is_none() {
        return bad(format!(
            "{what} on {on} has no condition (`equals`, `exists`, `contains`, `matches`, `gt`, `ge`, `lt`, `le`): it would always hold"
        ));
    }
    if values && c.exists == Some(false) {
        return bad(format!(
            "{what} on {on} says `exists = false` and what the value must be: it can never hold"
        ));
    }
    if let Some(pattern) = &c.matches {
        crate::world::regex(pattern)
            .map_err(|e| PackError::invalid(file, place, format!("`matches`: {e}")))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(text: &str) -> Result<Pack, PackError> {
        Pack::from_sources(
            "t",
            ("pack.toml", "name = \"t\""),
            vec![("s.toml".into(), text.into())],
        )
    }

    #[test]
    fn demo_pack_is_valid() {
        let p = Pack::demo();
        assert_eq!(p.scenarios.len(), 3);
    }

    #[test]
    fn rejections_name_place_and_problem() {
        let e = one("id = \"a\"\nturns = [\"hi\"]\nbogus = 1\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("s.toml: line 3") && e.contains("bogus"), "{e}");
        let e = one("id = \"A.b\"\nturns = [\"hi\"]\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("s.toml: id: invalid scenario id"), "{e}");
        let e = one("id = \"a\"\nturns = []\n").unwrap_err().to_string();
        assert!(e.contains("turns: a scenario needs"), "{e}");
        let e = one(
            "id = \"a\"\nturns = [\"x\"]\nworld = { orders = {} }\n[[tools]]\nname = \"r\"\neffect = { kind = \"read\", path = \"ordres\" }\n",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("tools[0] (r).effect.path") && e.contains("`ordres`"),
            "{e}"
        );
    }

    #[test]
    fn duplicates() {
        let s = "id = \"a\"\nturns = [\"x\"]\n".to_string();
        let e = Pack::from_sources(
            "t",
            ("pack.toml", "name = \"t\""),
            vec![("one.toml".into(), s.clone()), ("two.toml".into(), s)],
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("two.toml: duplicate scenario id `a` (also in one.toml)"),
            "{e}"
        );
    }

    #[test]
    fn world_servers_and_new_checks_are_validated() {
        let err = |text: &str| one(text).unwrap_err().to_string();
        let base = "id = \"a\"\nturns = [\"x\"]\n";
        let e = err(&format!(
            "{base}[world_server]\ncommand = [\"srv\"]\nurl = \"http://127.0.0.1:1/mcp\"\n"
        ));
        assert!(
            e.contains("either `command`") && e.contains("not both"),
            "{e}"
        );
        let e = err(&format!(
            "{base}[world_server]\nurl = \"http://127.0.0.1:1/mcp\"\n"
        ));
        assert!(
            e.contains("world_server.reset") && e.contains("keeps its state"),
            "{e}"
        );
        let e = err(&format!(
            "{base}[world_server]\ncommand = [\"srv\"]\nper = \"lane\"\n"
        ));
        assert!(e.contains("world_server.reset"), "{e}");
        let e = err(&format!(
            "{base}[world_server]\ncommand = [\"srv\"]\nper = \"sweep\"\n"
        ));
        assert!(
            e.contains("world_server.per") && e.contains("\"sweep\""),
            "{e}"
        );
        let e = err(&format!(
            "{base}[world_server]\ncommand = [\"srv\"]\nbogus = 1\n"
        ));
        assert!(e.contains("bogus"), "{e}");
        let e = err(&format!(
            "{base}[[expect.outcome.world]]\npath = \"n\"\nequals = 1\n[world_server]\ncommand = [\"srv\"]\n"
        ));
        assert!(e.contains("no `state` call"), "{e}");
        let e = err(&format!(
            "{base}[[expect.outcome.files]]\npath = \"out.txt\"\nexists = true\n"
        ));
        assert!(e.contains("only a `command` world server has"), "{e}");
        let e = err(&format!(
            "{base}[world_server]\ncommand = [\"srv\"]\n[[expect.outcome.files]]\npath = \"../etc/passwd\"\nexists = true\n"
        ));
        assert!(e.contains("inside the run's scratch directory"), "{e}");
        let e = err(&format!(
            "{base}[world_server]\ncommand = [\"srv\"]\ntools = [\"look\"]\n[expect.trajectory]\nrequired_tools = [\"lookk\"]\n"
        ));
        assert!(e.contains("no tool `lookk`"), "{e}");
        // A server's tool named in `tools` may be required; one the server lists later is
        // checked when it lists them.
        one(&format!(
            "{base}[world_server]\ncommand = [\"srv\"]\ntools = [\"look\"]\n[expect.trajectory]\nrequired_tools = [\"look\"]\n"
        ))
        .unwrap();
        one(&format!(
            "{base}[world_server]\ncommand = [\"srv\"]\n[expect.trajectory]\nrequired_tools = [\"anything\"]\n"
        ))
        .unwrap();
        // A pack's own tools cannot claim to be a server's.
        let e = err(&format!(
            "{base}world = {{}}\n[[tools]]\nname = \"t\"\neffect = {{ kind = \"server\" }}\n"
        ));
        assert!(e.contains("come from the server"), "{e}");
        let e = err(&format!(
            "{base}world = {{ o = {{}} }}\n[[tools]]\nname = \"t\"\neffect = {{ kind = \"read\", path = \"o\" }}\nwhen = [{{ path = \"o\", arg = \"x\", exists = true, error = \"e\" }}]\n"
        ));
        assert!(e.contains("name exactly one"), "{e}");
        let e = err(&format!(
            "{base}world = {{ o = [] }}\n[[tools]]\nname = \"t\"\neffect = {{ kind = \"find\", path = \"o\", by = {{}} }}\n"
        ));
        assert!(e.contains("`by` is empty"), "{e}");
    }

    #[test]
    fn a_pack_level_world_server_serves_every_scenario() {
        let p = Pack::from_sources(
            "t",
            (
                "pack.toml",
                "name = \"t\"\n[world_server]\nname = \"m\"\ncommand = [\"srv\"]\n",
            ),
            vec![
                ("a.toml".into(), "id = \"a\"\nturns = [\"x\"]\n".into()),
                (
                    "b.toml".into(),
                    "id = \"b\"\nturns = [\"x\"]\n[world_server]\nname = \"own\"\ncommand = [\"other\"]\n"
                        .into(),
                ),
            ],
        )
        .unwrap();
        assert_eq!(p.scenarios[0].world_server.as_ref().unwrap().name, "m");
        assert_eq!(p.scenarios[1].world_server.as_ref().unwrap().name, "own");
    }

    #[test]
    fn patterns() {
        assert!(matches_pattern("refund", "refund-damaged"));
        assert!(matches_pattern("*-status", "order-status"));
        assert!(!matches_pattern("order-?", "order-status"));
    }
}
