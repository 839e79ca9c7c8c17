//! The second gate: loading an activated plugin through abi_stable.
//!
//! Several plugins share one root-module type, so this never uses
//! `RootModule::load_from_*` (which caches one library per type); each library goes
//! through `lib_header_from_path` + `init_root_module`. Libraries are never unloaded.

use abi_stable::{
    library::{LibraryError, lib_header_from_path},
    std_types::{RResult, RStr},
};
use sha2::{Digest, Sha256};
use windtunnel_abi::{FfiHookBox, HookLibRef};

use super::{Inspected, MetaHook, Metadata, Refusal, inspect::vet_metadata};

/// A library's descriptor, the JSON its root module returns, as `wt` reads it: what the
/// library says it is, checked against its metadata record. (The SDK writes it; the
/// reading side is `wt`'s.)
#[derive(Clone, Debug, PartialEq, serde::Deserialize)]
pub struct Descriptor {
    /// The SDK version the library was built against.
    pub sdk_version: String,
    /// The library crate's version.
    pub library_version: String,
    /// Whether the library unwinds on panic.
    pub panic_unwind: bool,
    /// `<arch>-<os>` the library was built for.
    pub target: String,
    /// The hooks it exports.
    pub hooks: Vec<DescriptorHook>,
}

/// One hook in a [`Descriptor`]: its name and capability bits.
#[derive(Clone, Debug, PartialEq, serde::Deserialize)]
pub struct DescriptorHook {
    pub name: String,
    pub points: u32,
}

/// A plugin library that is mapped into this process.
#[derive(Clone)]
pub struct LoadedLibrary {
    pub inspected: Inspected,
    pub descriptor: Descriptor,
    pub sha256: String,
    module: HookLibRef,
}

impl std::fmt::Debug for LoadedLibrary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedLibrary")
            .field("path", &self.inspected.path)
            .field("descriptor", &self.descriptor)
            .finish_non_exhaustive()
    }
}

impl LoadedLibrary {
    /// Builds a new instance of the hook `name` (its `Default` value).
    pub fn new_hook(&self, name: &str) -> Result<FfiHookBox, Refusal> {
        match (self.module.new_hook())(RStr::from_str(name)) {
            RResult::ROk(hook) => Ok(hook),
            RResult::RErr(e) => Err(Refusal::Init(e.into())),
        }
    }
}

/// dlopens a vetted plugin, runs abi_stable's version and layout checks, and checks that the
/// library's descriptor says what its metadata record said.
pub fn load(inspected: &Inspected) -> Result<LoadedLibrary, Refusal> {
    let (mut file, _) = super::inspect::open_plugin(&inspected.path)?;
    let mut hasher = Sha256::new();
    std::io::copy(&mut file, &mut hasher).map_err(|e| Refusal::Unreadable(e.to_string()))?;
    let sha256 = hex(&hasher.finalize());

    let header = lib_header_from_path(&inspected.path).map_err(refusal_of)?;
    let module = header
        .init_root_module::<HookLibRef>()
        .map_err(refusal_of)?;
    let json: String = (module.descriptor())().into();
    let descriptor: Descriptor = serde_json::from_str(&json)
        .map_err(|e| Refusal::Mismatch(format!("unreadable descriptor: {e}")))?;

    let declared = Metadata {
        sdk_version: semver::Version::parse(&descriptor.sdk_version)
            .map_err(|e| Refusal::Mismatch(format!("SDK version: {e}")))?,
        library_version: descriptor.library_version.clone(),
        unwind: descriptor.panic_unwind,
        target: descriptor.target.clone(),
        hooks: descriptor
            .hooks
            .iter()
            .map(|h| MetaHook {
                name: h.name.clone(),
                points: h.points,
            })
            .collect(),
    };
    vet_metadata(&declared)?;
    if declared != inspected.metadata {
        return Err(Refusal::Mismatch(format!(
            "record says {:?}, library says {:?}",
            summary(&inspected.metadata),
            summary(&declared)
        )));
    }
    Ok(LoadedLibrary {
        inspected: inspected.clone(),
        descriptor,
        sha256,
        module,
    })
}

fn summary(m: &Metadata) -> String {
    let hooks: Vec<String> = m
        .hooks
        .iter()
        .map(|h| format!("{}:{:#x}", h.name, h.points))
        .collect();
    format!(
        "sdk {} unwind {} hooks [{}]",
        m.sdk_version,
        m.unwind,
        hooks.join(", ")
    )
}

/// One line for the user; abi_stable's full report (thousands of lines for a layout
/// mismatch) goes to the debug log.
fn refusal_of(err: LibraryError) -> Refusal {
    let full = err.to_string();
    tracing::debug!(target: "wt::plugin", "abi_stable refused a library:\n{full}");
    let first_line = |s: &str| {
        s.lines()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .unwrap_or("unknown error")
            .to_owned()
    };
    match err {
        LibraryError::OpenError { .. } => Refusal::Open(first_line(&full)),
        LibraryError::GetSymbolError { .. } => Refusal::NoRootModule,
        LibraryError::AbiInstability(_) => {
            Refusal::Layout("built against a different windtunnel-abi layout".into())
        }
        LibraryError::IncompatibleVersionNumber {
            expected_version,
            actual_version,
            ..
        } => Refusal::Layout(format!(
            "windtunnel-abi {actual_version} is not compatible with {expected_version}"
        )),
        LibraryError::RootModule { .. } => Refusal::Init(first_line(&full)),
        _ => Refusal::Layout(first_line(&full)),
    }
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}
