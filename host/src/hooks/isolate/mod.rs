//! Hook process isolation (`wt run --isolate-hooks`): a plugin hook loaded and run by a
//! child process of `wt` instead of inside it, so that an abort, a segfault, an `exit`, a
//! runaway allocation or a hang costs that hook, not the sweep.
//!
//! - [`protocol`] — the frames on the pipes: the same JSON the FFI layer carries.
//! - [`parent`] — `wt`'s side: spawning a child, one call at a time, turning every way a
//!   child can die or misbehave into one fatal [`crate::hooks::registry::CallError`], killing it
//!   at a deadline.
//! - [`child`] — the hidden `wt hook-child` subcommand: vets and loads the plugin exactly as
//!   `wt` would in-process, then serves calls, proxying members and services back.
//!
//! The dispatcher never sees any of this: an isolated hook is an
//! [`crate::hooks::registry::ActiveHook`] like any other. This module must not decide anything the
//! in-process path decides (vetting, deadlines, quarantine, warnings): it only moves calls
//! across a process boundary and reports a dead child.

pub mod child;
pub mod parent;
pub mod protocol;

use std::{path::PathBuf, time::Duration};

use crate::hooks::registry::env_prefix;

pub use parent::Isolated;

/// Default address-space limit of a hook process, in MiB.
pub const DEFAULT_MEMORY_LIMIT_MIB: u64 = 2048;

/// How long a hook process may take, at least, to load its plugin and say it is ready
/// (longer when `WT_HOOK_TIMEOUT_S` is longer).
pub const MIN_START_TIMEOUT: Duration = Duration::from_secs(60);

/// The most a hook process may write to its log; the rest is counted and dropped.
pub const LOG_LIMIT: u64 = 1 << 20;

/// Which hooks run isolated, and how their processes are started.
#[derive(Debug, Clone)]
pub struct Isolation {
    /// Every plugin hook.
    pub all: bool,
    /// These hooks (by name), in addition.
    pub hooks: Vec<String>,
    pub spawn: SpawnOptions,
}

impl Isolation {
    /// Nothing isolated.
    pub fn none() -> Isolation {
        Isolation {
            all: false,
            hooks: Vec::new(),
            spawn: SpawnOptions::default(),
        }
    }

    /// Does the plugin hook `name` run in a child?
    pub fn applies(&self, name: &str) -> bool {
        self.all || self.hooks.iter().any(|h| h == name)
    }
}

/// How a hook process is started.
#[derive(Debug, Clone)]
pub struct SpawnOptions {
    /// The `wt` binary the child runs (`wt hook-child …`).
    pub program: PathBuf,
    /// `RLIMIT_AS` of the child, in MiB.
    pub memory_limit_mib: u64,
    /// Where the child's stdout and stderr go: `<dir>/<stem>.<hook>.log` (lane n > 0:
    /// `<stem>.<hook>.lane<n>.log`), `<stem>` being the sweep's, created when the child
    /// first writes, never shared: a name already taken gets a `-N` suffix. `None`: kept
    /// only in memory (the last lines name a crash's cause).
    pub log: Option<(PathBuf, String)>,
    /// How long the child may take to load the plugin and say it is ready.
    pub start_timeout: Duration,
}

impl Default for SpawnOptions {
    fn default() -> Self {
        SpawnOptions {
            program: std::env::current_exe().unwrap_or_else(|_| PathBuf::from("wt")),
            memory_limit_mib: DEFAULT_MEMORY_LIMIT_MIB,
            log: None,
            start_timeout: Duration::from_secs(60),
        }
    }
}

/// The settings of a hook's confinement, from its own `WT_<NAME>_SANDBOX_*` settings:
/// `_READ` and `_WRITE`, absolute paths separated by `:`, and `_NETWORK`, `none` (the
/// default) or `allow`. Errors name the setting.
pub fn sandbox_settings(hook: &str) -> Result<crate::sandbox::Settings, String> {
    let prefix = env_prefix(hook);
    let var = |suffix: &str| {
        let name = format!("{prefix}SANDBOX_{suffix}");
        let value = std::env::var_os(&name);
        (name, value)
    };
    let mut settings = crate::sandbox::Settings::default();
    for (suffix, paths) in [("READ", &mut settings.read), ("WRITE", &mut settings.write)] {
        let (name, value) = var(suffix);
        for p in value.iter().flat_map(std::env::split_paths) {
            if p.as_os_str().is_empty() {
                continue;
            }
            if !p.is_absolute() {
                return Err(format!(
                    "`{name}`: {} is not an absolute path",
                    crate::term::sanitize(&p.display().to_string())
                ));
            }
            paths.push(p);
        }
    }
    let (name, value) = var("NETWORK");
    let value = value.map(|v| v.to_string_lossy().into_owned());
    settings.network = match value.as_deref() {
        None | Some("") | Some("none") => crate::sandbox::Network::Run,
        Some("allow") => crate::sandbox::Network::Allow,
        Some(other) => {
            return Err(format!(
                "`{name}` = \"{}\": expected `none` or `allow`",
                crate::term::sanitize(other)
            ));
        }
    };
    crate::sandbox::check(&settings)?;
    Ok(settings)
}
