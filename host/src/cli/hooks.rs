//! `wt hooks …`: list, check and install hook plugins.

use std::{
    io::Write,
    path::{Path, PathBuf},
};

use anyhow::Context as _;
use clap::{Args, Subcommand};

use crate::{
    exit::{self, CodedError},
    hooks::isolate::{self, Isolation, SpawnOptions},
    hooks::plugin::{self, Refusal},
    hooks::registry::{EntryView, Registry},
};

#[derive(Debug, Subcommand)]
pub(crate) enum HooksCommand {
    /// List built-in hooks and plugins with their status. Runs no plugin code.
    List(ListArgs),
    /// Fully validate plugin files (including loading them); exit 2 on any refusal.
    Check(CheckArgs),
    /// Validate a plugin, then install it into the per-user plugin directory.
    Install(InstallArgs),
    /// Show, per point, which of the given hooks run, in which order, under which deadline.
    Plan(PlanArgs),
    /// Create a hook crate that builds, tests and runs as it stands.
    New(super::hooks_new::NewArgs),
}

/// Where to look for plugins.
#[derive(Debug, Clone, Default, Args)]
pub(crate) struct PluginDirArgs {
    /// A directory of hook plugins (repeatable); searched before WT_PLUGIN_PATH and the
    /// per-user directory.
    #[arg(long = "plugin-dir", value_name = "DIR")]
    pub plugin_dirs: Vec<PathBuf>,
}

impl PluginDirArgs {
    /// Every directory searched, in order; a named directory that does not exist is a
    /// usage error.
    pub(crate) fn dirs(&self) -> Result<Vec<PathBuf>, CodedError> {
        plugin::plugin_dirs(&self.plugin_dirs).map_err(CodedError::usage)
    }
}

/// Which plugin hooks run in a child process of their own.
#[derive(Debug, Clone, Args)]
pub(crate) struct IsolationArgs {
    /// Run every plugin hook in a child process of its own: a crash, abort, exit, memory
    /// blow-up or hang costs that hook (quarantined, one warning), not the sweep.
    #[arg(
        long,
        env = "WT_ISOLATE_HOOKS",
        value_parser = clap::builder::FalseyValueParser::new(),
    )]
    pub isolate_hooks: bool,
    /// Run this plugin hook in a child process of its own (repeatable; the variable takes
    /// a comma-separated list).
    #[arg(
        long = "isolate-hook",
        value_name = "NAME",
        env = "WT_ISOLATE_HOOK",
        value_delimiter = ','
    )]
    pub isolate_hook: Vec<String>,
    /// Address-space limit of each isolated hook's process, in MiB.
    #[arg(
        long,
        value_name = "MIB",
        env = "WT_HOOK_MEMORY_LIMIT_MB",
        default_value_t = isolate::DEFAULT_MEMORY_LIMIT_MIB,
        value_parser = clap::value_parser!(u64).range(64..),
    )]
    pub hook_memory_limit: u64,
}

impl Default for IsolationArgs {
    fn default() -> Self {
        IsolationArgs {
            isolate_hooks: false,
            isolate_hook: Vec::new(),
            hook_memory_limit: isolate::DEFAULT_MEMORY_LIMIT_MIB,
        }
    }
}

impl IsolationArgs {
    /// The hooks named by `--isolate-hook` (an empty `WT_ISOLATE_HOOK`, or an empty item in
    /// its list, names none).
    fn named(&self) -> Vec<String> {
        self.isolate_hook
            .iter()
            .map(|n| n.trim())
            .filter(|n| !n.is_empty())
            .map(str::to_owned)
            .collect()
    }

    /// The isolation in force; an isolated hook's output goes to `<dir>/<stem>.<hook>.log`
    /// with `log = (dir, the sweep's stem)` (nowhere but memory without one).
    pub(crate) fn isolation(&self, log: Option<(&Path, &str)>) -> anyhow::Result<Isolation> {
        let deadlines = crate::deadlines::Deadlines::from_env().map_err(CodedError::usage)?;
        let log = log.map(|(dir, stem)| (dir.to_path_buf(), stem.to_owned()));
        Ok(Isolation {
            all: self.isolate_hooks,
            hooks: self.named(),
            spawn: SpawnOptions {
                memory_limit_mib: self.hook_memory_limit,
                log,
                // Loading is not a hook call: a short call deadline must not refuse a
                // plugin that loads slowly on a busy machine.
                start_timeout: deadlines.dispatch.max(isolate::MIN_START_TIMEOUT),
                ..SpawnOptions::default()
            },
        })
    }
}

#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    #[command(flatten)]
    pub dirs: PluginDirArgs,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Also list shared libraries that are not Wind Tunnel plugins at all.
    #[arg(long)]
    pub all: bool,
}

#[derive(Debug, Args)]
pub(crate) struct CheckArgs {
    /// Plugin files to check.
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Load each hook in a child process, as `wt run --isolate-hooks` would, instead of
    /// into this one: a plugin that crashes while loading is reported, not fatal.
    #[arg(long)]
    pub isolated: bool,
}

#[derive(Debug, Args)]
pub(crate) struct InstallArgs {
    /// The plugin file to install.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
}

#[derive(Debug, Args)]
pub(crate) struct PlanArgs {
    /// A hook to activate, as with `wt run --hook` (repeatable; order matters).
    #[arg(long = "hook", value_name = "NAME")]
    pub hooks: Vec<String>,
    #[command(flatten)]
    pub dirs: PluginDirArgs,
    #[command(flatten)]
    pub isolation: IsolationArgs,
}

/// Resolves `--hook` flags against the plugin directories, loading the named plugins (the
/// isolated ones each in a child process that logs to `log = (dir, the sweep's stem)`); the
/// errors are one line each and exit 2.
pub(crate) fn activate(
    names: &[String],
    dirs: &PluginDirArgs,
    isolation: &IsolationArgs,
    log: Option<(&Path, &str)>,
) -> anyhow::Result<Vec<crate::hooks::registry::ActiveHook>> {
    if names.is_empty() {
        if let Some(name) = isolation.named().first() {
            return Err(CodedError::usage(
                crate::hooks::registry::ActivationError::IsolateInactive(name.clone()).to_string(),
            )
            .into());
        }
        return Ok(Vec::new());
    }
    let isolation = isolation.isolation(log)?;
    let registry = Registry::discover(&dirs.dirs()?);
    registry
        .activate_with(names, &isolation)
        .map_err(|e| CodedError::usage(e.to_string()).into())
}

fn plan(args: PlanArgs) -> anyhow::Result<u8> {
    let deadlines = crate::deadlines::Deadlines::from_env().map_err(CodedError::usage)?;
    let active = activate(&args.hooks, &args.dirs, &args.isolation, None)?;
    let mut out = std::io::stdout().lock();
    for h in &active {
        let role = if h.declares(windtunnel_abi::point::GUARD_CHECK) {
            "guard: may deny turns; needs --policy-revision"
        } else {
            "observer"
        };
        let mode = if h.is_isolated() {
            format!(
                "isolated: own process, {} MiB",
                args.isolation.hook_memory_limit
            )
        } else {
            "in-process".to_owned()
        };
        let line = format!(
            "hook {}  ({}, {}, {role}, {mode})",
            h.name,
            h.source,
            crate::hooks::registry::env_prefix(&h.name) + "*"
        );
        writeln!(out, "{}", crate::term::sanitize(&line))?;
    }
    for point in windtunnel_abi::point::ALL {
        let runners: Vec<&str> = active
            .iter()
            .filter(|h| h.declares(point))
            .map(|h| h.name.as_str())
            .collect();
        let who = if runners.is_empty() {
            "(none: not dispatched)".to_owned()
        } else {
            runners.join(" -> ")
        };
        writeln!(
            out,
            "{:<16} {}  [deadline {}]",
            windtunnel_abi::point::name(point),
            who,
            crate::deadlines::human(deadlines.for_point(point))
        )?;
    }
    if !active.is_empty() {
        writeln!(
            out,
            "instances: one of each hook per lane (up to --jobs lanes run at once), built with \
             Default; a lane's instance sees the runs of that lane in order, never two calls at \
             once; scenario and pack points run on one lane's instance"
        )?;
    }
    Ok(exit::SUCCESS)
}

pub(crate) fn run(cmd: HooksCommand) -> anyhow::Result<u8> {
    match cmd {
        HooksCommand::List(args) => list(args),
        HooksCommand::Check(args) => check(args),
        HooksCommand::Install(args) => install(args),
        HooksCommand::Plan(args) => plan(args),
        HooksCommand::New(args) => super::hooks_new::run(args),
    }
}

fn list(args: ListArgs) -> anyhow::Result<u8> {
    let dirs = args.dirs.dirs()?;
    let registry = Registry::discover(&dirs);
    let mut views: Vec<EntryView> = registry.entries.iter().map(EntryView::from).collect();
    if args.all {
        views.extend(registry.foreign.iter().map(|p| EntryView {
            name: None,
            source: p.display().to_string(),
            version: None,
            sdk_version: None,
            points: vec![],
            status: format!("refused: {}", Refusal::NoRootModule),
        }));
    }
    print_views(&views, args.json)?;
    if !args.json && !args.all && !registry.foreign.is_empty() {
        crate::term::err_line(&format!(
            "({} shared libraries that are not Wind Tunnel plugins were skipped; --all lists them)",
            registry.foreign.len()
        ));
    }
    Ok(exit::SUCCESS)
}

/// Checks each file as `wt run --hook` would use it: every pre-load check, then loading it
/// and instantiating each hook it exports (in a child process with `--isolated`).
fn check(args: CheckArgs) -> anyhow::Result<u8> {
    let isolation = if args.isolated {
        IsolationArgs {
            isolate_hooks: true,
            ..IsolationArgs::default()
        }
        .isolation(None)?
    } else {
        Isolation::none()
    };
    let registry = Registry::from_files(&args.files, false);
    let mut views = Vec::new();
    let mut refused = false;
    for entry in registry
        .entries
        .iter()
        .filter(|e| e.source != crate::hooks::registry::Source::BuiltIn)
    {
        let mut view = EntryView::from(entry);
        if entry.is_ok() {
            let name = entry.name.clone().unwrap_or_default();
            if let Err(err) = registry.activate_with(std::slice::from_ref(&name), &isolation) {
                view.status = match err {
                    crate::hooks::registry::ActivationError::Refused { refusal, .. } => {
                        format!("refused: {refusal}")
                    }
                    other => format!("refused: {other}"),
                };
            }
        }
        refused |= view.status != "ok";
        views.push(view);
    }
    print_views(&views, args.json)?;
    Ok(if refused { exit::USAGE } else { exit::SUCCESS })
}

fn install(args: InstallArgs) -> anyhow::Result<u8> {
    let file = &args.file;
    let registry = Registry::from_files(std::slice::from_ref(file), false);
    let entries: Vec<_> = registry
        .entries
        .iter()
        .filter(|e| e.source != crate::hooks::registry::Source::BuiltIn)
        .collect();
    for e in &entries {
        if let Err(refusal) = &e.status {
            return Err(
                CodedError::usage(format!("{}: refused: {refusal}", file.display())).into(),
            );
        }
    }
    let names: Vec<String> = entries.iter().filter_map(|e| e.name.clone()).collect();
    registry
        .activate(&names)
        .map_err(|e| CodedError::usage(format!("{}: {e}", file.display())))?;

    let dir = plugin::user_plugin_dir().ok_or_else(|| {
        CodedError::usage("cannot find the per-user plugin directory: set HOME or XDG_DATA_HOME")
    })?;
    fs_err::create_dir_all(&dir)?;
    set_mode(&dir, 0o755)?;
    let file_name = file
        .file_name()
        .context("the plugin path has no file name")?;
    let dest = dir.join(file_name);

    // Another installed library must not already provide these names.
    let installed = Registry::discover(std::slice::from_ref(&dir));
    for e in installed.entries.iter() {
        if let crate::hooks::registry::Source::Plugin(p) = &e.source
            && p != &dest
            && e.name.as_ref().is_some_and(|n| names.contains(n))
        {
            return Err(CodedError::usage(format!(
                "hook `{}` is already installed from {}; remove that file first",
                e.name.as_deref().unwrap_or_default(),
                p.display()
            ))
            .into());
        }
    }

    // Copy beside the destination, then rename: a running `wt` that has the old library
    // mapped keeps a valid mapping, and nobody ever sees a half-written file.
    let mut tmp = tempfile::Builder::new()
        .prefix(".install-")
        .tempfile_in(&dir)
        .with_context(|| format!("failed to create a temporary file in {}", dir.display()))?;
    let mut src = fs_err::File::open(file)?;
    std::io::copy(&mut src, tmp.as_file_mut())?;
    tmp.as_file().sync_all()?;
    set_mode(tmp.path(), 0o755)?;
    tmp.persist(&dest)
        .with_context(|| format!("failed to install {}", dest.display()))?;
    crate::term::err_line(&format!(
        "installed {} ({}) to {}",
        names.join(", "),
        file.display(),
        dest.display()
    ));
    Ok(exit::SUCCESS)
}

fn set_mode(path: &std::path::Path, mode: u32) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    fs_err::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    Ok(())
}

fn print_views(views: &[EntryView], json: bool) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    if json {
        serde_json::to_writer_pretty(&mut out, views)?;
        writeln!(out)?;
        return Ok(());
    }
    // Every cell may hold outside text (a file name, a refusal quoting one): escaped before
    // the widths are measured, so no cell can repaint the screen or forge a row.
    let cell = |text: String| crate::term::sanitize(&text).into_owned();
    let rows: Vec<[String; 6]> = views
        .iter()
        .map(|v| {
            [
                v.name.clone().unwrap_or_else(|| "-".into()),
                v.source.clone(),
                v.version.clone().unwrap_or_else(|| "-".into()),
                v.sdk_version.clone().unwrap_or_else(|| "-".into()),
                if v.points.is_empty() {
                    "-".into()
                } else {
                    v.points.join(", ")
                },
                v.status.clone(),
            ]
            .map(cell)
        })
        .collect();
    let header = ["NAME", "SOURCE", "VERSION", "SDK", "POINTS", "STATUS"].map(String::from);
    let mut widths = header.clone().map(|h| h.len());
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    for row in std::iter::once(&header).chain(&rows) {
        let mut line = String::new();
        for (i, (cell, w)) in row.iter().zip(widths).enumerate() {
            if i + 1 == row.len() {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<w$}  "));
            }
        }
        writeln!(out, "{}", crate::term::sanitize(line.trim_end()))?;
    }
    Ok(())
}
