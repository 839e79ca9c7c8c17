//! The hooks `wt` knows about — built-ins and plugins found in the plugin directories —
//! and the resolution of `--hook NAME` flags into [`ActiveHook`]s.
//!
//! Discovery runs no plugin code. Only hooks that are activated get their library loaded,
//! so a broken plugin nobody asked for changes nothing. An activated plugin hook is loaded
//! either here or, isolated, by a child process of its own ([`crate::hooks::isolate`]); both are an
//! [`ActiveHook`], called the same way.

use std::{
    collections::HashMap,
    fmt,
    path::{Path, PathBuf},
    sync::Arc,
};

use abi_stable::{
    sabi_trait::TD_Opaque,
    std_types::{ROption, RResult, RStr, RString},
};
use serde::Serialize;
use windtunnel_abi::{FfiContext, FfiContext_TO, FfiHookBox, point};
use windtunnel_sdk::rules;

use crate::{
    hooks::isolate::{Isolated, Isolation},
    hooks::plugin::{self, Inspected, LoadedLibrary, Refusal},
};

/// A hook compiled into `wt`, written against the same SDK API as plugins.
pub struct BuiltIn {
    pub name: &'static str,
    pub points: u32,
    pub new: fn() -> FfiHookBox,
}

/// The built-in hooks. Their names are reserved: no plugin may reuse them.
pub fn builtins() -> Vec<BuiltIn> {
    vec![BuiltIn::of::<crate::hooks::debrief::Debrief>()]
}

impl BuiltIn {
    /// The built-in hook `H`, as the SDK's export macro describes it to `wt`.
    fn of<H: windtunnel_sdk::Hook>() -> BuiltIn {
        let entry = windtunnel_sdk::__private::HookEntry::of::<H>();
        BuiltIn {
            name: entry.name,
            points: entry.points,
            new: entry.new,
        }
    }
}

/// Where a hook comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    BuiltIn,
    Plugin(PathBuf),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::BuiltIn => f.write_str("built-in"),
            Source::Plugin(p) => write!(f, "{}", p.display()),
        }
    }
}

/// One row of `wt hooks list`: a hook, or a file that could not be read as a plugin.
#[derive(Debug, Clone)]
pub struct Entry {
    /// The hook's name; `None` for a refused file whose names could not be read.
    pub name: Option<String>,
    pub source: Source,
    pub version: Option<String>,
    pub sdk_version: Option<String>,
    pub points: u32,
    pub status: Result<(), Refusal>,
    /// The hook names this entry answers to: its own, or all a refused file claims.
    claims: Vec<String>,
    kind: EntryKind,
}

#[derive(Debug, Clone)]
enum EntryKind {
    BuiltIn(fn() -> FfiHookBox),
    Plugin(Box<Inspected>),
    Refused,
}

impl Entry {
    pub fn is_ok(&self) -> bool {
        self.status.is_ok()
    }

    /// Method names of the declared points.
    pub fn point_names(&self) -> Vec<&'static str> {
        point_names(self.points)
    }
}

/// Method names of the points set in `bits`, in dispatch order.
pub fn point_names(bits: u32) -> Vec<&'static str> {
    point::ALL
        .iter()
        .filter(|p| bits & point::bit(**p) != 0)
        .map(|p| point::name(*p))
        .collect()
}

/// JSON form of an [`Entry`] for `wt hooks list --json`.
#[derive(Debug, Serialize)]
pub struct EntryView {
    pub name: Option<String>,
    pub source: String,
    pub version: Option<String>,
    pub sdk_version: Option<String>,
    pub points: Vec<&'static str>,
    pub status: String,
}

impl From<&Entry> for EntryView {
    fn from(e: &Entry) -> Self {
        EntryView {
            name: e.name.clone(),
            source: e.source.to_string(),
            version: e.version.clone(),
            sdk_version: e.sdk_version.clone(),
            points: e.point_names(),
            status: match &e.status {
                Ok(()) => "ok".into(),
                Err(r) => format!("refused: {r}"),
            },
        }
    }
}

/// Every hook `wt` can see.
#[derive(Debug, Default)]
pub struct Registry {
    pub entries: Vec<Entry>,
    /// Shared libraries that carry neither a root module nor a metadata record: not
    /// plugins at all (e.g. other libraries in a build directory).
    pub foreign: Vec<PathBuf>,
}

/// Why `--hook` flags could not be resolved.
#[derive(Debug, thiserror::Error)]
pub enum ActivationError {
    #[error("unknown hook `{name}`; available: {available}")]
    Unknown { name: String, available: String },
    #[error("hook `{name}` cannot be used: {source_path}: refused: {refusal}")]
    Refused {
        name: String,
        source_path: String,
        refusal: Refusal,
    },
    #[error("hook `{0}` is activated twice")]
    Twice(String),
    #[error(
        "hooks `{0}` and `{1}` cannot be active together: their settings prefixes {2} and {3} overlap"
    )]
    PrefixCollision(String, String, String, String),
    #[error("--isolate-hook {0}: no --hook {0} is active")]
    IsolateInactive(String),
    #[error("--isolate-hook {0}: `{0}` is built into wt; only plugin hooks run isolated")]
    IsolateBuiltIn(String),
}

impl Registry {
    /// Built-ins plus every library in `dirs` (in order; the first of two same-named hooks
    /// wins and the second is refused).
    pub fn discover(dirs: &[PathBuf]) -> Registry {
        let files: Vec<PathBuf> = dirs.iter().flat_map(|d| plugin::library_files(d)).collect();
        Self::from_files(&files, true)
    }

    /// Built-ins plus exactly `files`. With `skip_foreign`, libraries that are not plugins
    /// at all are set aside in [`Registry::foreign`] instead of listed as refused.
    pub fn from_files(files: &[PathBuf], skip_foreign: bool) -> Registry {
        let mut reg = Registry::default();
        let mut owners: HashMap<String, Source> = HashMap::new();
        for b in builtins() {
            owners.insert(b.name.to_owned(), Source::BuiltIn);
            reg.entries.push(Entry {
                name: Some(b.name.to_owned()),
                source: Source::BuiltIn,
                version: Some(env!("CARGO_PKG_VERSION").to_owned()),
                sdk_version: Some(windtunnel_sdk::SDK_VERSION.to_owned()),
                points: b.points,
                status: Ok(()),
                claims: vec![b.name.to_owned()],
                kind: EntryKind::BuiltIn(b.new),
            });
        }
        let mut seen = HashMap::new();
        for path in files {
            match plugin::inspect(path, &mut seen) {
                Ok(inspected) => reg.add_plugin(inspected, &mut owners),
                Err(Refusal::NoRootModule) if skip_foreign && !has_metadata(path) => {
                    reg.foreign.push(path.clone());
                }
                Err(Refusal::NotElf) if skip_foreign => reg.foreign.push(path.clone()),
                Err(refusal) => reg.add_refused(path, refusal),
            }
        }
        reg
    }

    fn add_plugin(&mut self, inspected: Inspected, owners: &mut HashMap<String, Source>) {
        let source = Source::Plugin(inspected.path.clone());
        for hook in &inspected.metadata.hooks {
            let status = if let Some(why) = reserved(&hook.name) {
                Err(Refusal::ReservedName(hook.name.clone(), why))
            } else if let Some(by) = owners.get(&hook.name) {
                Err(Refusal::Duplicate {
                    name: hook.name.clone(),
                    by: by.to_string(),
                })
            } else {
                owners.insert(hook.name.clone(), source.clone());
                Ok(())
            };
            self.entries.push(Entry {
                name: Some(hook.name.clone()),
                source: source.clone(),
                version: Some(inspected.metadata.library_version.clone()),
                sdk_version: Some(inspected.metadata.sdk_version.to_string()),
                points: hook.points,
                status,
                claims: vec![hook.name.clone()],
                kind: EntryKind::Plugin(Box::new(inspected.clone())),
            });
        }
    }

    fn add_refused(&mut self, path: &Path, refusal: Refusal) {
        // One row per refused file. It names the hooks the file claims, when its record can
        // be read, so that `--hook NAME` can say why NAME is unusable rather than unknown.
        let meta = plugin::read_metadata(path);
        let claims: Vec<String> = meta
            .iter()
            .flat_map(|m| m.hooks.iter().map(|h| h.name.clone()))
            .collect();
        self.entries.push(Entry {
            name: (!claims.is_empty()).then(|| claims.join(", ")),
            claims,
            source: Source::Plugin(path.to_path_buf()),
            version: meta.as_ref().map(|m| m.library_version.clone()),
            sdk_version: meta.as_ref().map(|m| m.sdk_version.to_string()),
            points: meta
                .iter()
                .flat_map(|m| &m.hooks)
                .fold(0, |acc, h| acc | h.points),
            status: Err(refusal),
            kind: EntryKind::Refused,
        });
    }

    /// Names of the usable hooks with their sources, for error messages.
    pub fn available(&self) -> String {
        let names: Vec<String> = self
            .entries
            .iter()
            .filter(|e| e.is_ok())
            .filter_map(|e| Some(format!("{} ({})", e.name.as_ref()?, e.source)))
            .collect();
        if names.is_empty() {
            "none".into()
        } else {
            names.join(", ")
        }
    }

    /// Resolves `--hook` flags, in flag order, loading the plugins they name into this
    /// process. Each library is loaded once even when several of its hooks are active.
    pub fn activate(&self, names: &[String]) -> Result<Vec<ActiveHook>, ActivationError> {
        self.activate_with(names, &Isolation::none())
    }

    /// Like [`Registry::activate`], with the plugin hooks that `isolation` names each loaded
    /// by a child process of its own (after the same vetting) instead of into this process.
    pub fn activate_with(
        &self,
        names: &[String],
        isolation: &Isolation,
    ) -> Result<Vec<ActiveHook>, ActivationError> {
        if let Some(stray) = isolation.hooks.iter().find(|h| !names.contains(h)) {
            return Err(ActivationError::IsolateInactive(stray.clone()));
        }
        let mut chosen: Vec<&Entry> = Vec::new();
        for name in names {
            if chosen.iter().any(|e| e.claims.contains(name)) {
                return Err(ActivationError::Twice(name.clone()));
            }
            let mut candidates = self.entries.iter().filter(|e| e.claims.contains(name));
            let entry = match candidates.clone().find(|e| e.is_ok()) {
                Some(e) => e,
                None => match candidates.next() {
                    Some(refused) => {
                        return Err(ActivationError::Refused {
                            name: name.clone(),
                            source_path: refused.source.to_string(),
                            refusal: refused.status.clone().unwrap_err(),
                        });
                    }
                    None => {
                        return Err(ActivationError::Unknown {
                            name: name.clone(),
                            available: self.available(),
                        });
                    }
                },
            };
            chosen.push(entry);
        }
        check_prefixes(names)?;

        let mut libraries: HashMap<PathBuf, LoadedLibrary> = HashMap::new();
        let mut active = Vec::with_capacity(chosen.len());
        for (entry, name) in chosen.into_iter().zip(names) {
            let name = name.clone();
            let refused = |refusal: Refusal| ActivationError::Refused {
                name: name.clone(),
                source_path: entry.source.to_string(),
                refusal,
            };
            let (factory, sha256, first): (Factory, _, _) = match &entry.kind {
                EntryKind::BuiltIn(_) if isolation.hooks.contains(&name) => {
                    return Err(ActivationError::IsolateBuiltIn(name));
                }
                EntryKind::BuiltIn(new) => {
                    let new = *new;
                    (Arc::new(move || Ok(Instance::InProcess(new()))), None, None)
                }
                EntryKind::Plugin(inspected) if isolation.applies(&name) => {
                    // One child per instance: this one now, one more per lane later.
                    let spawn = isolation.spawn.clone();
                    let (path, hook_name) = (inspected.path.clone(), name.clone());
                    // Instance 0 is built below; the factory builds lane 1's, lane 2's, …
                    let instances = std::sync::atomic::AtomicUsize::new(1);
                    let factory: Factory = Arc::new(move || {
                        let n = instances.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        Isolated::spawn(&spawn, &path, &hook_name, n)
                            .map(|(child, _)| Instance::Isolated(Box::new(child)))
                            .map_err(|e| Refusal::Isolated(e.to_string()))
                    });
                    let (child, ready) =
                        Isolated::spawn(&isolation.spawn, &inspected.path, &name, 0)
                            .map_err(|e| refused(Refusal::Isolated(e.to_string())))?;
                    (
                        factory,
                        Some(ready.sha256),
                        Some(Instance::Isolated(Box::new(child))),
                    )
                }
                EntryKind::Plugin(inspected) => {
                    let lib = match libraries.get(&inspected.path) {
                        Some(lib) => lib.clone(),
                        None => {
                            let lib = plugin::load(inspected).map_err(refused)?;
                            libraries.insert(inspected.path.clone(), lib.clone());
                            lib
                        }
                    };
                    let sha256 = Some(lib.sha256.clone());
                    let hook_name = name.clone();
                    let factory: Factory =
                        Arc::new(move || lib.new_hook(&hook_name).map(Instance::InProcess));
                    (factory, sha256, None)
                }
                EntryKind::Refused => unreachable!("refused entries are never chosen"),
            };
            let hook = match first {
                Some(hook) => hook,
                None => factory().map_err(refused)?,
            };
            let sdk_version = entry.sdk_version.clone().unwrap_or_default();
            active.push(ActiveHook {
                name,
                source: entry.source.clone(),
                version: entry.version.clone().unwrap_or_default(),
                sdk_1_0: built_on_sdk_1_0(&sdk_version),
                turn_ids: knows_turn_ids(&sdk_version),
                sdk_version,
                points: entry.points,
                sha256,
                hook,
                factory,
            });
        }
        Ok(active)
    }
}

/// Why no hook may be named `name` (the SDK's rule, [`rules::reserved_name`]).
pub(crate) fn reserved(name: &str) -> Option<String> {
    rules::reserved_name(name)
}

fn has_metadata(path: &Path) -> bool {
    plugin::read_metadata(path).is_some()
}

/// The environment prefix of a hook's settings: `WT_` + the name upper-cased with `-` as
/// `_` + `_`.
pub fn env_prefix(name: &str) -> String {
    rules::settings_prefix(name)
}

/// Two active hooks may not have prefixes where one starts the other: `WT_FOO_BAR_X` would
/// be ambiguous between hooks `foo` and `foo_bar`.
fn check_prefixes(names: &[String]) -> Result<(), ActivationError> {
    for (i, a) in names.iter().enumerate() {
        for b in &names[i + 1..] {
            let (pa, pb) = (env_prefix(a), env_prefix(b));
            if pa.starts_with(&pb) || pb.starts_with(&pa) {
                return Err(ActivationError::PrefixCollision(
                    a.clone(),
                    b.clone(),
                    pa,
                    pb,
                ));
            }
        }
    }
    Ok(())
}

/// The settings of a hook: every `WT_<NAME>_*` variable, sorted. The value of a setting
/// whose own name (after the prefix) contains KEY, TOKEN, SECRET, PASSWORD or CREDENTIAL is
/// recorded as `[redacted]`.
pub fn hook_settings(name: &str) -> std::collections::BTreeMap<String, String> {
    let prefix = env_prefix(name);
    std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v)))
        .filter(|(k, _)| k.starts_with(&prefix))
        .map(|(k, v)| {
            let secret = crate::secrets::is_secret_name(&k[prefix.len()..]);
            let v = if secret {
                crate::secrets::REDACTED.to_owned()
            } else {
                v.to_string_lossy().into_owned()
            };
            (k, v)
        })
        .collect()
}

/// The values of a hook's secret settings (see [`hook_settings`]), to redact wherever they
/// would be printed or stored.
pub fn hook_secrets(name: &str) -> crate::secrets::Redactor {
    let prefix = env_prefix(name);
    let mut r = crate::secrets::Redactor::new();
    for (k, v) in std::env::vars_os() {
        let (Ok(k), Ok(v)) = (k.into_string(), v.into_string()) else {
            continue;
        };
        if k.starts_with(&prefix) && crate::secrets::is_secret_name(&k[prefix.len()..]) {
            r.add(&v);
        }
    }
    r
}

/// Builds a fresh instance of a hook (its `Default` value).
type Factory = Arc<dyn Fn() -> Result<Instance, Refusal> + Send + Sync>;

/// An activated hook, ready to call.
pub struct ActiveHook {
    pub name: String,
    pub source: Source,
    pub version: String,
    pub sdk_version: String,
    pub points: u32,
    /// SHA-256 of the plugin library; `None` for built-ins.
    pub sha256: Option<String>,
    hook: Instance,
    factory: Factory,
    /// Built against SDK 1.0.x, whose types refuse fields a newer `wt` adds.
    sdk_1_0: bool,
    /// Built against SDK 1.5 or later, which reads turn snapshot ids in the point value
    /// (`windtunnel_sdk::turn::ids`).
    turn_ids: bool,
}

fn built_on_sdk_1_0(sdk_version: &str) -> bool {
    semver::Version::parse(sdk_version).is_ok_and(|v| v.major == 1 && v.minor == 0)
}

fn knows_turn_ids(sdk_version: &str) -> bool {
    semver::Version::parse(sdk_version).is_ok_and(|v| v.major == 1 && v.minor >= 5)
}

/// Where a hook instance lives.
enum Instance {
    InProcess(FfiHookBox),
    Isolated(Box<Isolated>),
}

/// A failed hook call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    /// The hook returned an error, or panicked and the SDK caught it. The instance can be
    /// called again.
    #[error("{0}")]
    Failed(String),
    /// The instance is gone for good (its isolated process died or broke the protocol); the
    /// message names the cause. Calling it again fails the same way.
    #[error("{0}")]
    Fatal(String),
}

impl fmt::Debug for ActiveHook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ActiveHook")
            .field("name", &self.name)
            .field("source", &self.source)
            .field("points", &self.points)
            .field("isolated", &self.is_isolated())
            .finish_non_exhaustive()
    }
}

/// What the host offers a hook during one call. Implementations must never panic: a panic
/// here would unwind into plugin code across the FFI boundary.
pub trait HostServices {
    /// A context member as JSON text, `None` when absent at this point.
    fn member(&self, name: &str) -> Option<String>;
    /// A service (`converse`, `emit_artifact`, `warn`, …).
    fn call(&self, op: &str, arg: &str) -> Result<String, String>;
}

struct FfiHost<'a>(&'a dyn HostServices);

impl FfiContext for FfiHost<'_> {
    fn get(&self, member: RStr<'_>) -> ROption<RString> {
        self.0.member(member.as_str()).map(RString::from).into()
    }

    fn call(&self, op: RStr<'_>, arg: RStr<'_>) -> RResult<RString, RString> {
        match self.0.call(op.as_str(), arg.as_str()) {
            Ok(v) => RResult::ROk(v.into()),
            Err(e) => RResult::RErr(e.into()),
        }
    }
}

impl ActiveHook {
    /// A fresh instance of a built-in hook.
    #[cfg(test)]
    pub fn from_builtin(b: &BuiltIn) -> ActiveHook {
        let new = b.new;
        ActiveHook {
            name: b.name.to_owned(),
            source: Source::BuiltIn,
            version: env!("CARGO_PKG_VERSION").to_owned(),
            sdk_version: windtunnel_sdk::SDK_VERSION.to_owned(),
            points: b.points,
            sha256: None,
            hook: Instance::InProcess(new()),
            factory: Arc::new(move || Ok(Instance::InProcess(new()))),
            sdk_1_0: false,
            turn_ids: true,
        }
    }

    /// Does the instance live in a child process of its own?
    pub fn is_isolated(&self) -> bool {
        matches!(self.hook, Instance::Isolated(_))
    }

    /// Gives up on a call that overran its deadline: an isolated instance's process is
    /// killed now (its call then returns); an in-process call cannot be stopped and is left
    /// to its thread.
    pub fn abandon(&self) {
        if let Instance::Isolated(child) = &self.hook {
            child.abandon();
        }
    }

    /// Another instance of the same hook, from the same library: for a lane of its own.
    pub fn another(&self) -> Result<ActiveHook, Refusal> {
        Ok(ActiveHook {
            name: self.name.clone(),
            source: self.source.clone(),
            version: self.version.clone(),
            sdk_version: self.sdk_version.clone(),
            points: self.points,
            sha256: self.sha256.clone(),
            hook: (self.factory)()?,
            factory: self.factory.clone(),
            sdk_1_0: self.sdk_1_0,
            turn_ids: self.turn_ids,
        })
    }

    /// Was the hook built against SDK 1.0.x? Its members then come in 1.0's shape.
    pub fn reads_sdk_1_0(&self) -> bool {
        self.sdk_1_0
    }

    /// Whether its SDK reads turn snapshot ids in the point value.
    pub fn reads_turn_ids(&self) -> bool {
        self.turn_ids
    }

    /// Does the hook declare `point`?
    pub fn declares(&self, point: u32) -> bool {
        self.points & point::bit(point) != 0
    }

    /// Calls the hook at `point`. Panics inside the hook come back as
    /// [`CallError::Failed`]; a dead isolated process as [`CallError::Fatal`].
    pub fn call(&self, point: u32, host: &dyn HostServices) -> Result<String, CallError> {
        match &self.hook {
            Instance::InProcess(hook) => {
                let adapter = FfiHost(host);
                let ctx = FfiContext_TO::from_ptr(&adapter, TD_Opaque);
                match hook.on_event(point, ctx) {
                    // No value (every lifecycle point): nothing to copy out of the plugin's
                    // string (its allocator is not ours, so `into` would copy).
                    RResult::ROk(v) if v.is_empty() => Ok(String::new()),
                    RResult::ROk(v) => Ok(v.into()),
                    RResult::RErr(e) => Err(CallError::Failed(e.into())),
                }
            }
            Instance::Isolated(child) => child.call(point, host),
        }
    }

    /// The provenance record stamped into traces.
    pub fn provenance(&self) -> windtunnel_model::HookProvenance {
        let mut p = windtunnel_model::HookProvenance::default();
        p.name = self.name.clone();
        p.source = self.source.to_string();
        p.version = self.version.clone();
        p.sdk_version = self.sdk_version.clone();
        p.sha256 = self.sha256.clone();
        p.settings = hook_settings(&self.name);
        if let Instance::Isolated(child) = &self.hook {
            p.sandbox = Some(child.sandbox().clone());
        }
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_collide_when_one_starts_the_other() {
        let n = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(check_prefixes(&n(&["foo", "foo_bar"])).is_err());
        assert!(check_prefixes(&n(&["foo-bar", "foo_bar"])).is_err());
        assert!(check_prefixes(&n(&["foo", "foobar"])).is_ok());
        assert_eq!(env_prefix("acme-probe"), "WT_ACME_PROBE_");
    }

    #[test]
    fn unknown_names_list_the_builtins() {
        let reg = Registry::from_files(&[], true);
        let err = reg.activate(&["nope".to_string()]).unwrap_err();
        assert!(err.to_string().contains("debrief (built-in)"), "{err}");
    }
}
