//! `wt hooks new NAME`: writes a hook crate that builds, tests, passes `wt hooks check` and
//! runs with `wt run --hook NAME` as it stands.
//!
//! The crate depends on the SDK this `wt` was built with: by path when `wt` runs from a
//! checkout whose `sdk/` is still that SDK, else the registry version `~MAJOR.MINOR` (a
//! `wt` accepts plugins built against its own SDK minor or an older one, never a newer
//! one). This module only writes files; it never runs cargo.

use std::{
    fmt::Write as _,
    path::{Path, PathBuf},
};

use anyhow::Context as _;
use clap::Args;
use windtunnel_abi::point;
use windtunnel_model::is_slug;
use windtunnel_sdk::SDK_VERSION;

use crate::{
    exit::{self, CodedError},
    hooks::registry::{self, env_prefix},
};

#[derive(Debug, Args)]
pub(crate) struct NewArgs {
    /// The hook's name: its `--hook` token, artifact discriminator and `WT_<NAME>_*`
    /// settings prefix (a slug: a-z, 0-9, `_`, `-`).
    #[arg(value_name = "NAME")]
    pub name: String,
    /// Where to create the crate (default: ./NAME). Must not exist, or be empty.
    #[arg(long, value_name = "DIR")]
    pub path: Option<PathBuf>,
    /// Lifecycle points to implement, comma-separated.
    #[arg(
        long,
        value_name = "POINTS",
        value_delimiter = ',',
        default_value = "on_run_end"
    )]
    pub points: Vec<String>,
    /// Also observe every turn (`turn_begin` / `turn_finish`). Implies on_run_end, which
    /// writes the turns' timings: wt writes no artifact emitted at a turn point.
    #[arg(long)]
    pub turn: bool,
    /// Also act as a guard that may deny turns (`guard_check`); `wt run` then needs
    /// `--policy-revision`.
    #[arg(long)]
    pub guard: bool,
    /// Depend on this SDK checkout (its `sdk/` directory) by path.
    #[arg(long, value_name = "DIR", conflicts_with = "registry_sdk")]
    pub sdk_path: Option<PathBuf>,
    /// Depend on the registry's SDK even when this `wt` runs from a checkout.
    #[arg(long)]
    pub registry_sdk: bool,
}

/// The six lifecycle points, in firing order.
const LIFECYCLE: [u32; 6] = [
    point::ON_PROVISIONED,
    point::ON_RUN_START,
    point::ON_RUN_SCORED,
    point::ON_RUN_END,
    point::ON_SCENARIO_END,
    point::ON_PACK_END,
];

/// Names cargo or rustc will not take as a package name.
const NOT_CRATE_NAMES: &[&str] = &[
    "test",
    "std",
    "core",
    "alloc",
    "proc_macro",
    "proc-macro",
    "build",
    "deps",
    "examples",
    "incremental",
];

const KEYWORDS: &[&str] = &[
    "as", "async", "await", "break", "const", "continue", "crate", "dyn", "else", "enum", "extern",
    "false", "fn", "for", "gen", "if", "impl", "in", "let", "loop", "match", "mod", "move", "mut",
    "pub", "ref", "return", "self", "static", "struct", "super", "trait", "true", "type", "unsafe",
    "use", "where", "while", "abstract", "become", "box", "do", "final", "macro", "override",
    "priv", "try", "typeof", "unsized", "virtual", "yield",
];

/// Why `NAME` cannot be a new hook's name; `None` when it can.
pub(crate) fn name_problem(name: &str) -> Option<String> {
    if !is_slug(name) {
        return Some(format!(
            "`{name}` is not a hook name: use 1-64 characters of a-z, 0-9, `_` and `-`"
        ));
    }
    if !name.starts_with(|c: char| c.is_ascii_lowercase()) {
        return Some(format!(
            "`{name}` cannot name a crate: start it with a letter"
        ));
    }
    if NOT_CRATE_NAMES.contains(&name) || KEYWORDS.contains(&name) {
        return Some(format!(
            "`{name}` cannot name a crate (cargo reserves it or it is a Rust keyword)"
        ));
    }
    if let Some(why) = registry::reserved(name) {
        return Some(format!("hook name `{name}` is reserved: {why}"));
    }
    // `WT_FOO_` and `WT_FOO_BAR_` overlap, and wt refuses to activate two hooks whose
    // prefixes do: a hook that could never run beside a built-in is refused now.
    let prefix = env_prefix(name);
    for builtin in registry::builtins() {
        let theirs = env_prefix(builtin.name);
        if builtin.name == name {
            return Some(format!("`{name}` is the name of a built-in hook"));
        }
        if prefix.starts_with(&theirs) || theirs.starts_with(&prefix) {
            return Some(format!(
                "hook name `{name}` clashes with the built-in `{}`: settings prefixes {prefix} \
                 and {theirs} overlap, so the two could never be active together",
                builtin.name
            ));
        }
    }
    None
}

/// Where the new crate takes the SDK from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SdkSource {
    /// A checkout's `sdk/` directory.
    Path(PathBuf),
    /// The registry, `~MAJOR.MINOR` of this `wt`'s SDK.
    Registry,
}

impl SdkSource {
    fn dependency(&self, features: &str) -> String {
        match self {
            SdkSource::Path(p) => {
                let path = toml::Value::String(p.display().to_string());
                format!("windtunnel-sdk = {{ path = {path}{features} }}")
            }
            SdkSource::Registry if features.is_empty() => {
                format!("windtunnel-sdk = \"{}\"", sdk_requirement())
            }
            SdkSource::Registry => {
                format!(
                    "windtunnel-sdk = {{ version = \"{}\"{features} }}",
                    sdk_requirement()
                )
            }
        }
    }

    fn describe(&self) -> String {
        match self {
            SdkSource::Path(p) => format!("the SDK at {}", p.display()),
            SdkSource::Registry => {
                format!("windtunnel-sdk {} from the registry", sdk_requirement())
            }
        }
    }
}

fn sdk_requirement() -> String {
    let v = semver::Version::parse(SDK_VERSION).expect("the SDK version is semver");
    format!("~{}.{}", v.major, v.minor)
}

/// Is `dir` the SDK this `wt` was built with (its manifest names `windtunnel-sdk` at
/// [`SDK_VERSION`])?
fn is_this_sdk(dir: &Path) -> bool {
    let Ok(text) = std::fs::read_to_string(dir.join("Cargo.toml")) else {
        return false;
    };
    let Ok(manifest) = text.parse::<toml::Table>() else {
        return false;
    };
    let package = manifest.get("package");
    let field = |k: &str| package.and_then(|p| p.get(k)).and_then(|v| v.as_str());
    field("name") == Some("windtunnel-sdk") && field("version") == Some(SDK_VERSION)
}

/// The SDK source for `args`: an explicit `--sdk-path`, the registry when asked, else the
/// checkout this `wt` was built from if its SDK is still the one compiled in.
pub(crate) fn sdk_source(args: &NewArgs) -> anyhow::Result<SdkSource> {
    if args.registry_sdk {
        return Ok(SdkSource::Registry);
    }
    if let Some(dir) = &args.sdk_path {
        let dir =
            fs_err::canonicalize(dir).map_err(|e| CodedError::usage(format!("--sdk-path: {e}")))?;
        if !is_this_sdk(&dir) {
            return Err(CodedError::usage(format!(
                "--sdk-path {}: not windtunnel-sdk {SDK_VERSION} (the SDK this wt was built \
                 with); point it at a checkout's sdk/ directory",
                dir.display()
            ))
            .into());
        }
        return Ok(SdkSource::Path(dir));
    }
    let built_from = Path::new(env!("CARGO_MANIFEST_DIR")).join("../sdk");
    match std::fs::canonicalize(&built_from) {
        Ok(dir) if is_this_sdk(&dir) => Ok(SdkSource::Path(dir)),
        _ => Ok(SdkSource::Registry),
    }
}

/// What to generate.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    pub name: String,
    /// Lifecycle points, in firing order.
    pub points: Vec<u32>,
    pub turn: bool,
    pub guard: bool,
    pub sdk: SdkSource,
}

impl Plan {
    fn has(&self, p: u32) -> bool {
        self.points.contains(&p)
    }

    fn type_name(&self) -> String {
        self.name
            .split(['_', '-'])
            .filter(|w| !w.is_empty())
            .map(|w| {
                let mut c = w.chars();
                c.next()
                    .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                    .unwrap_or_default()
            })
            .collect()
    }

    /// The library's file name once built (`lib<name with _>.so` on Linux).
    pub(crate) fn library_file(&self) -> String {
        format!(
            "{}{}{}",
            std::env::consts::DLL_PREFIX,
            self.name.replace('-', "_"),
            std::env::consts::DLL_SUFFIX
        )
    }

    /// The points `Sweep::demo().runs(2)` calls, in order.
    fn demo_sweep_points(&self) -> Vec<&'static str> {
        let mut out = Vec::new();
        let push = |out: &mut Vec<&'static str>, p: u32, on: bool| {
            if on {
                out.push(point::name(p));
            }
        };
        push(
            &mut out,
            point::ON_PROVISIONED,
            self.has(point::ON_PROVISIONED),
        );
        for _run in 0..2 {
            push(&mut out, point::ON_RUN_START, self.has(point::ON_RUN_START));
            push(&mut out, point::GUARD_CHECK, self.guard);
            push(&mut out, point::TURN_BEGIN, self.turn);
            push(&mut out, point::TURN_FINISH, self.turn);
            push(
                &mut out,
                point::ON_RUN_SCORED,
                self.has(point::ON_RUN_SCORED),
            );
            push(&mut out, point::ON_RUN_END, self.has(point::ON_RUN_END));
        }
        push(
            &mut out,
            point::ON_SCENARIO_END,
            self.has(point::ON_SCENARIO_END),
        );
        push(&mut out, point::ON_PACK_END, self.has(point::ON_PACK_END));
        out
    }

    pub(crate) fn cargo_toml(&self) -> String {
        format!(
            r#"[package]
name = "{name}"
version = "0.1.0"
edition = "2024"
description = "A Wind Tunnel hook."
publish = false

[lib]
# A shared library wt loads with `wt run --hook {name}`.
crate-type = ["cdylib"]

[dependencies]
{sdk}
serde_json = "1"

[dev-dependencies]
# The test kit (windtunnel_sdk::testing) for `cargo test`.
{sdk_testing}

# A workspace of its own, even when created inside another one.
[workspace]

[profile.release]
# wt catches a hook's panics only when they unwind; it refuses panic = "abort" plugins.
panic = "unwind"
"#,
            name = self.name,
            sdk = self.sdk.dependency(""),
            sdk_testing = self.sdk.dependency(r#", features = ["testing"]"#),
        )
    }

    pub(crate) fn lib_rs(&self) -> String {
        let ty = self.type_name();
        let name = &self.name;
        let mut uses = vec!["Context", "Hook", "Result", "export_hooks", "hook"];
        if self.turn {
            uses.extend(["TurnCall", "TurnResult"]);
        }
        if self.guard {
            uses.push("GuardDecision");
            if !self.turn {
                uses.push("TurnCall");
            }
        }
        uses.sort_unstable_by_key(|u| (u.chars().next().is_some_and(char::is_lowercase), *u));
        let mut fields = String::new();
        if self.has(point::ON_RUN_END) {
            fields.push_str("    /// Runs that ended so far in this `wt run`.\n    runs: u32,\n");
        }
        if self.turn {
            fields.push_str(
                "    /// When the current turn began.\n    turn_started: Option<std::time::Instant>,\n    \
                 /// The run's turns so far, written by `on_run_end`.\n    \
                 turns: Vec<serde_json::Value>,\n",
            );
        }
        let fields = if fields.is_empty() {
            ";".to_owned()
        } else {
            format!(" {{\n{fields}}}")
        };
        let mut methods = String::new();
        for p in LIFECYCLE.into_iter().filter(|p| self.has(*p)) {
            if p == point::ON_RUN_END && self.turn {
                methods.push_str(RUN_END_WITH_TURNS);
            } else {
                methods.push_str(lifecycle_method(p));
            }
        }
        if self.turn {
            methods.push_str(TURN_METHODS);
        }
        if self.guard {
            methods.push_str(&GUARD_METHOD.replace("{PREFIX}", &env_prefix(name)));
        }
        let mut out = String::new();
        let _ = write!(
            out,
            "//! `{name}`: a Wind Tunnel hook, created by `wt hooks new`.\n\
             //!\n\
             //! `cargo test` runs its unit tests (no `wt` needed); `cargo build --release`, then\n\
             //! `wt run --hook {name} --plugin-dir target/release`. Every point and capability is\n\
             //! documented, with an example, in the SDK's documentation (`cargo doc --open`).\n\n\
             use serde_json::json;\n\
             {uses}\n\n\
             /// The hook. `wt` builds one instance per `wt run` with `Default`, so what it keeps\n\
             /// lives for the whole sweep; it never calls one instance from two threads at once.\n\
             #[derive(Default)]\n\
             pub struct {ty}{fields}\n\n\
             /// `#[hook]` declares exactly the points defined below; `wt` calls nothing else.\n\
             #[hook]\n\
             impl Hook for {ty} {{\n    \
             /// The `--hook` token, the artifact discriminator and the `WT_{upper}_*` settings\n    \
             /// prefix. Renaming it breaks whatever reads its artifacts.\n    \
             const NAME: &'static str = \"{name}\";\n{methods}}}\n",
            uses = use_line("windtunnel_sdk", &uses),
            upper = env_prefix(name)
                .trim_start_matches("WT_")
                .trim_end_matches('_'),
        );
        if self.guard {
            out.push_str(GUARD_RULE);
        }
        let _ = write!(out, "\nexport_hooks!({ty});\n");
        out.push_str(&self.tests(&ty));
        if self.points.is_empty() && !self.turn {
            // Only a guard: no artifact, so `json!` would be unused.
            out = out.replace("use serde_json::json;\n", "");
        }
        out
    }

    fn tests(&self, ty: &str) -> String {
        let points = self.demo_sweep_points();
        let artifacts = points
            .iter()
            .filter(|p| !matches!(**p, "guard_check" | "turn_begin" | "turn_finish"))
            .count();
        let last_run_end = points.iter().rposition(|p| *p == "on_run_end");
        let mut t = format!(
            "\n#[cfg(test)]\n\
             mod tests {{\n    \
             use super::*;\n    \
             use windtunnel_sdk::testing::{{HookTester, Sweep}};\n\n    \
             /// Two runs of a demo scenario, through every point the hook declares, in the\n    \
             /// order `wt` calls them.\n    \
             #[test]\n    \
             fn runs_through_a_sweep() {{\n        \
             let log = HookTester::<{ty}>::new().run_sweep(&Sweep::demo().runs(2));\n        \
             assert!(log.errors().is_empty(), \"{{:?}}\", log.errors());\n        \
             {points_check}\n        \
             assert_eq!(log.artifacts().len(), {artifacts});\n",
            points_check = assert_eq_line("log.points()", &points),
        );
        if let Some(i) = last_run_end {
            let _ = write!(
                t,
                "        let last_run_end = &log.calls()[{i}];\n        \
                 assert_eq!(last_run_end.point, \"on_run_end\");\n        \
                 assert_eq!(last_run_end.artifacts[0].payload[\"runs_so_far\"], 2);\n",
            );
            if self.turn {
                t.push_str(
                    "        let turns = &last_run_end.artifacts[0].payload[\"turns\"];\n        \
                     assert_eq!(turns[0][\"outcome\"], \"Done\");\n",
                );
            }
        }
        t.push_str("    }\n");
        if self.guard {
            t.push_str(
                "\n    #[test]\n    \
                 fn the_guard_denies_only_turns_with_the_text() {\n        \
                 assert_eq!(\n            decide(\"please refund 5678\", \"refund\"),\n            \
                 GuardDecision::deny(\"denied_text\", \"the turn contains `refund`\")\n        \
                 );\n        \
                 assert_eq!(decide(\"where is my order?\", \"refund\"), GuardDecision::Allow);\n        \
                 assert_eq!(decide(\"anything\", \"\"), GuardDecision::Allow);\n    \
                 }\n",
            );
        }
        t.push_str("}\n");
        t
    }

    pub(crate) fn readme(&self) -> String {
        let name = &self.name;
        let lib = self.library_file();
        let policy = if self.guard {
            " --policy-revision my-policy-1"
        } else {
            ""
        };
        let mut points: Vec<String> = self
            .points
            .iter()
            .map(|p| format!("- `{}`: {}", point::name(*p), describe(*p)))
            .collect();
        if self.turn {
            points.push(
                "- `turn_begin` / `turn_finish`: times every turn; `on_run_end`'s artifact lists \
                 them (wt writes no artifact emitted at a turn point)."
                    .to_owned(),
            );
        }
        if self.guard {
            points.push(format!(
                "- `guard_check`: denies turns that contain the text in `{}DENY` (unset: \
                 allows every turn). With a guard active, `wt run` needs `--policy-revision`.",
                env_prefix(name)
            ));
        }
        format!(
            "# {name}\n\n\
             A Wind Tunnel hook, created by `wt hooks new`.\n\n\
             ## Build and run\n\n\
             ```sh\n\
             cargo build --release\n\
             wt run --hook {name}{policy} --plugin-dir target/release\n\
             ```\n\n\
             `--plugin-dir` refuses a group- or world-writable directory; if your umask makes\n\
             `target/release` one, `wt hooks install target/release/{lib}` instead and drop\n\
             `--plugin-dir`.\n\n\
             ## Test\n\n\
             ```sh\n\
             cargo test\n\
             wt hooks check target/release/{lib}\n\
             ```\n\n\
             `cargo test` runs the unit tests in `src/lib.rs`, which drive the hook through\n\
             `windtunnel_sdk::testing` without `wt`. `wt hooks check` makes every check `wt`\n\
             makes before it loads a plugin.\n\n\
             ## What it does\n\n\
             {points}\n\n\
             Artifacts land beside each run's trace (`<stem>.{name}[.<label>].json`), or at the\n\
             runs-directory root for scenario and pack points; they never change a verdict.\n\n\
             ## The SDK\n\n\
             This crate uses {sdk}. Any of these forms works:\n\n\
             ```toml\n\
             windtunnel-sdk = \"{req}\"\n\
             windtunnel-sdk = {{ git = \"https://…/windtunnel\", tag = \"…\" }}\n\
             windtunnel-sdk = {{ path = \"/path/to/windtunnel/sdk\" }}\n\
             ```\n\n\
             Keep the SDK's minor at or below your `wt`'s: `wt` refuses plugins built against a\n\
             newer one. The API reference, with an example for every point, is `cargo doc --open`.\n",
            points = points.join("\n"),
            sdk = self.sdk.describe(),
            req = sdk_requirement(),
        )
    }
}

/// `use krate::{a, b};` laid out as rustfmt would (one line up to 100 columns).
fn use_line(krate: &str, items: &[&str]) -> String {
    let one = format!("use {krate}::{{{}}};", items.join(", "));
    if one.len() <= 100 {
        one
    } else {
        format!("use {krate}::{{\n    {},\n}};", items.join(", "))
    }
}

/// `assert_eq!(left, ["a", "b"]);` at 8 columns, laid out as rustfmt would (its default
/// 60-column widths for call arguments and arrays).
fn assert_eq_line(left: &str, items: &[&str]) -> String {
    let quoted: Vec<String> = items.iter().map(|i| format!("\"{i}\"")).collect();
    let array = format!("[{}]", quoted.join(", "));
    if left.len() + 2 + array.len() <= 60 {
        return format!("assert_eq!({left}, {array});");
    }
    let array = if array.len() <= 60 {
        array
    } else {
        format!(
            "[\n{0}{1}\n            ]",
            " ".repeat(16),
            quoted.join(&format!(",\n{}", " ".repeat(16)))
        )
    };
    format!("assert_eq!(\n            {left},\n            {array}\n        );")
}

fn describe(p: u32) -> &'static str {
    match p {
        point::ON_PROVISIONED => {
            "once per scenario, before its runs: records the scenario and how many tools it \
             offers (`provisioned` artifact)."
        }
        point::ON_RUN_START => {
            "per run, before the first turn: records the run id (`start` artifact)."
        }
        point::ON_RUN_SCORED => {
            "per run, once scored (the session is still alive; `ctx.converse` works here): \
             records the verdict and failed layers (`scored` artifact)."
        }
        point::ON_RUN_END => "per run, when final: counts runs and records the verdict.",
        point::ON_SCENARIO_END => "once per scenario, after its runs: records the pass count.",
        point::ON_PACK_END => "once per `wt run`: records the pass count of the whole sweep.",
        _ => "",
    }
}

fn lifecycle_method(p: u32) -> &'static str {
    match p {
        point::ON_PROVISIONED => {
            r#"
    /// Once per scenario, after provisioning, before its runs.
    fn on_provisioned(&mut self, ctx: &Context<'_>) -> Result {
        let Some(scenario) = ctx.try_scenario()? else {
            return Ok(());
        };
        let summary = json!({"scenario": scenario.id, "tools": scenario.tools.len()});
        ctx.emit_artifact(&summary, Some("provisioned"))
    }
"#
        }
        point::ON_RUN_START => {
            r#"
    /// Per run, after the agent's state was reset, before the first turn.
    fn on_run_start(&mut self, ctx: &Context<'_>) -> Result {
        let run_id = ctx.try_run_id()?.unwrap_or_default();
        ctx.emit_artifact(&json!({"run_id": run_id}), Some("start"))
    }
"#
        }
        point::ON_RUN_SCORED => {
            r#"
    /// Per run, once it is scored. The session is still alive: `ctx.converse(text)` works
    /// here, and only here.
    fn on_run_scored(&mut self, ctx: &Context<'_>) -> Result {
        let Some(score) = ctx.try_score()? else {
            return Ok(());
        };
        let summary = json!({"verdict": score.verdict, "failed": score.failed_layers()});
        ctx.emit_artifact(&summary, Some("scored"))
    }
"#
        }
        point::ON_RUN_END => {
            r#"
    /// Per run, when its result is final.
    fn on_run_end(&mut self, ctx: &Context<'_>) -> Result {
        self.runs += 1;
        let verdict = ctx.try_score()?.map(|s| s.verdict);
        ctx.emit_artifact(&json!({"runs_so_far": self.runs, "verdict": verdict}), None)
    }
"#
        }
        point::ON_SCENARIO_END => {
            r#"
    /// Once per scenario, after its runs: `ctx.aggregate()` holds its pass count.
    fn on_scenario_end(&mut self, ctx: &Context<'_>) -> Result {
        let Some(agg) = ctx.try_aggregate()? else {
            return Ok(());
        };
        let summary = json!({"scenario": agg.scenario_id, "passed": agg.passed, "runs": agg.runs});
        ctx.emit_artifact(&summary, None)
    }
"#
        }
        point::ON_PACK_END => {
            r#"
    /// Once per `wt run`, after the sweep: `ctx.aggregates()` holds every scenario's.
    fn on_pack_end(&mut self, ctx: &Context<'_>) -> Result {
        let aggregates = ctx.try_aggregates()?.cloned().unwrap_or_default();
        let passed: u32 = aggregates.iter().map(|a| a.passed).sum();
        let runs: u32 = aggregates.iter().map(|a| a.runs).sum();
        ctx.emit_artifact(&json!({"passed": passed, "runs": runs}), None)
    }
"#
        }
        _ => "",
    }
}

const TURN_METHODS: &str = r#"
    /// Before each scenario turn starts. An error here is a warning; the turn still runs.
    fn turn_begin(&mut self, _call: &TurnCall, _ctx: &Context<'_>) -> Result {
        self.turn_started = Some(std::time::Instant::now());
        Ok(())
    }

    /// After each turn whose `turn_begin` returned Ok, once its end is in the journal. wt
    /// writes no artifact emitted at a turn point: `on_run_end` writes what is kept here.
    fn turn_finish(&mut self, result: &TurnResult, _ctx: &Context<'_>) -> Result {
        let elapsed = self.turn_started.take().map(|t| t.elapsed());
        let ms = elapsed.map(|d| d.as_millis() as u64);
        let turn = json!({"turn": result.call.turn, "outcome": result.outcome, "ms": ms});
        self.turns.push(turn);
        Ok(())
    }
"#;

const RUN_END_WITH_TURNS: &str = r#"
    /// Per run, when its result is final: writes the run's turns too.
    fn on_run_end(&mut self, ctx: &Context<'_>) -> Result {
        self.runs += 1;
        let verdict = ctx.try_score()?.map(|s| s.verdict);
        let turns = std::mem::take(&mut self.turns);
        let summary = json!({"runs_so_far": self.runs, "verdict": verdict, "turns": turns});
        ctx.emit_artifact(&summary, None)
    }
"#;

const GUARD_METHOD: &str = r#"
    /// Guard: before each turn starts, allow or deny it. An error or a panic denies (guards
    /// fail closed). This one denies turns containing the text in `{PREFIX}DENY`.
    fn guard_check(&mut self, call: &TurnCall, _ctx: &Context<'_>) -> Result<GuardDecision> {
        let deny = std::env::var("{PREFIX}DENY").unwrap_or_default();
        Ok(decide(&call.input, &deny))
    }
"#;

const GUARD_RULE: &str = r#"
/// The guard's rule, apart from where its setting comes from (so tests need no variable).
fn decide(input: &str, deny: &str) -> GuardDecision {
    if !deny.is_empty() && input.contains(deny) {
        GuardDecision::deny("denied_text", format!("the turn contains `{deny}`"))
    } else {
        GuardDecision::Allow
    }
}
"#;

/// The lifecycle points named by `--points`, in firing order.
fn parse_points(names: &[String]) -> Result<Vec<u32>, String> {
    let mut out = Vec::new();
    for raw in names {
        let name = raw.trim();
        if name.is_empty() {
            continue;
        }
        match LIFECYCLE.into_iter().find(|p| point::name(*p) == name) {
            Some(p) => out.push(p),
            None => {
                let all: Vec<&str> = LIFECYCLE.into_iter().map(point::name).collect();
                let hint = match name {
                    "turn_begin" | "turn_finish" => " (turn hooks: --turn)",
                    "guard_check" => " (guards: --guard)",
                    _ => "",
                };
                return Err(format!(
                    "unknown lifecycle point `{name}`{hint}; use some of {}",
                    all.join(", ")
                ));
            }
        }
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

pub(crate) fn run(args: NewArgs) -> anyhow::Result<u8> {
    if let Some(problem) = name_problem(&args.name) {
        return Err(CodedError::usage(problem).into());
    }
    let mut points = parse_points(&args.points).map_err(CodedError::usage)?;
    if args.turn && !points.contains(&point::ON_RUN_END) {
        points.push(point::ON_RUN_END);
        points.sort_unstable();
    }
    if points.is_empty() && !args.turn && !args.guard {
        return Err(CodedError::usage(
            "the hook would implement no point: name some with --points, or add --turn or --guard",
        )
        .into());
    }
    let dir = args
        .path
        .clone()
        .unwrap_or_else(|| PathBuf::from(&args.name));
    if dir.exists() {
        let empty = dir.is_dir()
            && fs_err::read_dir(&dir)
                .map(|mut d| d.next().is_none())
                .unwrap_or(false);
        if !empty {
            return Err(CodedError::usage(format!(
                "{} already exists and is not an empty directory; choose another --path",
                dir.display()
            ))
            .into());
        }
    }
    let plan = Plan {
        name: args.name.clone(),
        points,
        turn: args.turn,
        guard: args.guard,
        sdk: sdk_source(&args)?,
    };
    write(&dir, &plan)?;

    let lib = plan.library_file();
    let policy = if plan.guard {
        " --policy-revision REV"
    } else {
        ""
    };
    eprintln!(
        "created hook `{}` in {} ({})\n\
         next:\n  \
         cd {}\n  \
         cargo test\n  \
         cargo build --release\n  \
         wt hooks check target/release/{lib}\n  \
         wt run --hook {}{policy} --plugin-dir target/release",
        plan.name,
        dir.display(),
        plan.sdk.describe(),
        dir.display(),
        plan.name,
    );
    Ok(exit::SUCCESS)
}

fn write(dir: &Path, plan: &Plan) -> anyhow::Result<()> {
    fs_err::create_dir_all(dir.join("src"))?;
    let files = [
        ("Cargo.toml", plan.cargo_toml()),
        ("src/lib.rs", plan.lib_rs()),
        ("README.md", plan.readme()),
        (".gitignore", "/target\n".to_owned()),
    ];
    for (name, text) in files {
        let path = dir.join(name);
        fs_err::write(&path, text)
            .with_context(|| format!("failed to write {}", path.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_slugs_crate_names_and_clash_with_nothing() {
        assert_eq!(name_problem("acme_probe"), None);
        assert_eq!(name_problem("turn-timer2"), None);
        for (bad, why) in [
            ("Acme", "not a hook name"),
            ("a.b", "not a hook name"),
            ("2fast", "start it with a letter"),
            ("fn", "Rust keyword"),
            ("test", "cargo reserves it"),
            ("hook", "is reserved"),
            ("score", "is reserved"),
            ("debrief", "built-in"),
            (
                "debrief_extra",
                "settings prefixes WT_DEBRIEF_EXTRA_ and WT_DEBRIEF_ overlap",
            ),
        ] {
            let problem = name_problem(bad).unwrap_or_default();
            assert!(problem.contains(why), "{bad}: {problem:?}");
        }
    }

    #[test]
    fn points_are_lifecycle_names() {
        let p = parse_points(&["on_run_end".into(), "on_provisioned".into()]).unwrap();
        assert_eq!(p, [point::ON_PROVISIONED, point::ON_RUN_END]);
        let err = parse_points(&["turn_begin".into()]).unwrap_err();
        assert!(err.contains("(turn hooks: --turn)"), "{err}");
        let err = parse_points(&["on_run_ends".into()]).unwrap_err();
        assert!(
            err.starts_with("unknown lifecycle point `on_run_ends`"),
            "{err}"
        );
    }

    #[test]
    fn registry_dependency_stays_within_this_minor() {
        let plan = Plan {
            name: "x".into(),
            points: vec![point::ON_RUN_END],
            turn: false,
            guard: false,
            sdk: SdkSource::Registry,
        };
        let v = semver::Version::parse(SDK_VERSION).unwrap();
        let want = format!("windtunnel-sdk = \"~{}.{}\"", v.major, v.minor);
        assert!(plan.cargo_toml().contains(&want), "{}", plan.cargo_toml());
    }

    #[test]
    fn this_checkout_is_the_sdk_wt_was_built_with() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../sdk");
        assert!(is_this_sdk(&dir));
        assert!(!is_this_sdk(Path::new(env!("CARGO_MANIFEST_DIR"))));
    }
}
