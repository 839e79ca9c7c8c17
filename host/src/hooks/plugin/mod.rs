//! Hook plugins: `cdylib` libraries built against `windtunnel-sdk`.
//!
//! A plugin goes through two gates. [`inspect`] vets a file *without running any of its
//! code* — directory and file permissions, file type, inode, ELF header, root symbol and the
//! plain-data metadata record the SDK's `export_hooks!` embeds — which is all `wt hooks list`
//! needs. [`load`] then dlopens an activated plugin, lets abi_stable check versions and
//! layouts, and cross-checks the library's own descriptor against its metadata record.
//!
//! Every refusal is a [`Refusal`]: one line naming the file and what is wrong.

mod inspect;
mod load;

use std::path::{Path, PathBuf};

pub use inspect::{
    Inspected, MetaHook, Metadata, inspect, read_metadata,
};
pub use load::{LoadedLibrary, load};

/// Environment variable holding extra plugin directories, colon-separated.
pub const PLUGIN_PATH_ENV: &str = "WT_PLUGIN_PATH";

/// Why a plugin file was refused. Each message is one line and fits after "refused: ".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("cannot read: {0}")]
    Unreadable(String),
    #[error("directory {dir} is group- or world-writable (mode {mode:o}); run `chmod go-w {dir}`")]
    WritableDir { dir: String, mode: u32 },
    #[error("directory {dir} is owned by uid {uid}, neither you nor root")]
    ForeignDir { dir: String, uid: u32 },
    #[error("file is group- or world-writable (mode {mode:o}); run `chmod go-w` on it")]
    WritableFile { mode: u32 },
    #[error("file is owned by uid {uid}, neither you nor root")]
    ForeignFile { uid: u32 },
    #[error("is a symbolic link; install the library itself (e.g. `wt hooks install`)")]
    Symlink,
    #[error("not a regular file")]
    NotRegular,
    #[error("its file name is not valid UTF-8; rename it")]
    NameNotUtf8,
    #[error("{bytes} bytes is more than a plugin may have ({max})")]
    TooLarge { bytes: u64, max: u64 },
    #[error("same file as {0} (same inode); ignored")]
    SameInode(String),
    #[error("not an ELF shared library")]
    NotElf,
    #[error("corrupt ELF file: {0}")]
    CorruptElf(String),
    #[error("built for {found}, this wt runs on {expected}")]
    WrongTarget { found: String, expected: String },
    #[error(
        "not a Wind Tunnel plugin: no abi_stable root module (build it with windtunnel_sdk::export_hooks!)"
    )]
    NoRootModule,
    #[error("no Wind Tunnel metadata record (build it with windtunnel_sdk::export_hooks!)")]
    NoMetadata,
    #[error("malformed metadata record: {0}")]
    BadMetadata(String),
    #[error(
        "built against windtunnel-sdk {found}; this wt accepts {required} — rebuild it against a compatible SDK"
    )]
    IncompatibleSdk { found: String, required: String },
    #[error(
        "built with panic = \"abort\": a panic in it would kill wt; build it with panic = \"unwind\""
    )]
    PanicAbort,
    #[error("hook name `{0}` is not a slug ([a-z0-9_-]+, at most 64 characters)")]
    BadName(String),
    #[error("hook name `{0}` is reserved: {1}")]
    ReservedName(String, String),
    #[error("hook `{name}` is already provided by {by}")]
    Duplicate { name: String, by: String },
    #[error("hook `{name}` declares unknown capability bits {bits:#x}; it needs a newer wt")]
    UnknownCapabilities { name: String, bits: u32 },
    #[error("exports no hooks")]
    NoHooks,
    #[error("dlopen failed: {0}")]
    Open(String),
    #[error("incompatible ABI layout: {0} (details with WT_LOG=debug)")]
    Layout(String),
    #[error("plugin initialization failed: {0}")]
    Init(String),
    #[error("descriptor disagrees with the metadata record: {0}")]
    Mismatch(String),
    /// Refused, or died, in the child process that loads an isolated hook.
    #[error("{0}")]
    Isolated(String),
}

/// The plugin directories in search order: `--plugin-dir` flags, then `WT_PLUGIN_PATH`,
/// then the per-user directory. A directory named by a flag must exist and be a directory
/// (a typo is refused, never silently ignored); `WT_PLUGIN_PATH` is a search path, whose
/// missing entries are skipped as `PATH`'s are, and the per-user directory may be missing.
pub fn plugin_dirs(flags: &[PathBuf]) -> Result<Vec<PathBuf>, String> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    for d in flags {
        check_named_dir(d, "--plugin-dir")?;
        dirs.push(d.clone());
    }
    if let Some(path) = std::env::var_os(PLUGIN_PATH_ENV) {
        dirs.extend(std::env::split_paths(&path).filter(|p| !p.as_os_str().is_empty()));
    }
    if let Some(user) = user_plugin_dir() {
        dirs.push(user);
    }
    let mut seen = std::collections::HashSet::new();
    dirs.retain(|d| seen.insert(d.clone()));
    Ok(dirs)
}

fn check_named_dir(dir: &Path, by: &str) -> Result<(), String> {
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(format!("{by} {}: not a directory", dir.display())),
        Err(e) => Err(format!("{by} {}: {e}", dir.display())),
    }
}

/// `$XDG_DATA_HOME/windtunnel/plugins`, else `~/.local/share/windtunnel/plugins`.
pub fn user_plugin_dir() -> Option<PathBuf> {
    let nonempty = |v: std::ffi::OsString| (!v.is_empty()).then(|| PathBuf::from(v));
    if let Some(data) = std::env::var_os("XDG_DATA_HOME").and_then(nonempty) {
        return Some(data.join("windtunnel/plugins"));
    }
    std::env::var_os("HOME")
        .and_then(nonempty)
        .map(|home| home.join(".local/share/windtunnel/plugins"))
}

/// Shared libraries in `dir`, sorted by file name so listing order is stable. A missing
/// directory holds nothing.
pub fn library_files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| is_library_name(p))
        .collect();
    files.sort();
    files
}

/// A shared library's name: `*.so` or `*.so.*`, read as bytes, so that a name that is not
/// UTF-8 is found (and refused by [`inspect`]) rather than silently passed over.
fn is_library_name(path: &Path) -> bool {
    path.file_name().is_some_and(|n| {
        let n = n.as_encoded_bytes();
        n.ends_with(b".so") || n.windows(4).any(|w| w == b".so.")
    })
}
