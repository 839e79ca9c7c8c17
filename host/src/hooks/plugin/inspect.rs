//! The first gate: vetting a plugin file without running any of its code.

use std::{
    collections::HashMap,
    fs::File,
    os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt},
    path::{Path, PathBuf},
};

use object::{Object, ObjectSection, ObjectSymbol, ReadCache, ReadRef};
use semver::{Version, VersionReq};
use windtunnel_abi::{META_MAGIC, META_SECTION, point};
use windtunnel_model::is_slug;

use super::Refusal;

/// The dynamic symbol abi_stable's `#[export_root_module]` defines.
pub(super) const ROOT_SYMBOL: &str = "_1as_0lib_1header_0root_bmodule_bloader";

/// The largest plugin file `wt` looks at (256 MiB; a release plugin is about 1 MB, a debug
/// one about 11 MB). Vetting reads only the parts of a file it needs — the ELF header, the
/// section and dynamic-symbol tables, the metadata record — never the whole file.
pub(super) const MAX_PLUGIN_BYTES: u64 = 256 << 20;

/// The largest metadata record `wt` reads.
const MAX_METADATA_BYTES: u64 = 64 << 10;

/// Opens a plugin file for reading: never through a symlink, never blocking (a FIFO), and
/// only a regular file of at most [`MAX_PLUGIN_BYTES`].
pub(crate) fn open_plugin(path: &Path) -> Result<(File, std::fs::Metadata), Refusal> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => Refusal::Symlink,
            _ => Refusal::Unreadable(e.to_string()),
        })?;
    let meta = file
        .metadata()
        .map_err(|e| Refusal::Unreadable(e.to_string()))?;
    let ft = meta.file_type();
    if !ft.is_file() || ft.is_fifo() || ft.is_socket() {
        return Err(Refusal::NotRegular);
    }
    check_size(meta.len())?;
    Ok((file, meta))
}

fn check_size(bytes: u64) -> Result<(), Refusal> {
    if bytes > MAX_PLUGIN_BYTES {
        return Err(Refusal::TooLarge {
            bytes,
            max: MAX_PLUGIN_BYTES,
        });
    }
    Ok(())
}

/// What a plugin's metadata record says about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Metadata {
    pub sdk_version: Version,
    pub library_version: String,
    pub unwind: bool,
    pub target: String,
    pub hooks: Vec<MetaHook>,
}

/// One hook in a metadata record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaHook {
    pub name: String,
    pub points: u32,
}

/// A file that passed every check that can be made without loading it.
#[derive(Debug, Clone)]
pub struct Inspected {
    pub path: PathBuf,
    pub metadata: Metadata,
}

/// The SDK versions this host accepts: the same major, up to the host's own minor (a plugin
/// built against a newer minor may ask for host services this `wt` lacks).
pub(super) fn sdk_requirement() -> VersionReq {
    let host = Version::parse(windtunnel_sdk::SDK_VERSION).expect("the SDK version is semver");
    let req = format!(">={}.0.0, <{}.{}.0", host.major, host.major, host.minor + 1);
    VersionReq::parse(&req).expect("the requirement is well-formed")
}

/// Vets `path`. `seen` maps `(device, inode)` to the first path it was seen at, so a library
/// reachable under two names is considered once.
pub fn inspect(path: &Path, seen: &mut HashMap<(u64, u64), PathBuf>) -> Result<Inspected, Refusal> {
    if path.file_name().is_some_and(|n| n.to_str().is_none()) {
        // Every name `wt` prints, logs or records must be text.
        return Err(Refusal::NameNotUtf8);
    }
    check_dir(path)?;
    let meta = std::fs::symlink_metadata(path).map_err(|e| Refusal::Unreadable(e.to_string()))?;
    let ft = meta.file_type();
    if ft.is_symlink() {
        return Err(Refusal::Symlink);
    }
    if !ft.is_file() || ft.is_fifo() || ft.is_socket() {
        return Err(Refusal::NotRegular);
    }
    check_size(meta.len())?;
    check_owner_mode(meta.uid(), meta.mode()).map_err(|(uid, mode)| match uid {
        Some(uid) => Refusal::ForeignFile { uid },
        None => Refusal::WritableFile { mode },
    })?;
    let inode = (meta.dev(), meta.ino());
    if let Some(first) = seen.get(&inode) {
        return Err(Refusal::SameInode(first.display().to_string()));
    }
    seen.insert(inode, path.to_path_buf());

    let (file, _) = open_plugin(path)?;
    let data = ReadCache::new(file);
    let metadata = read_record(&data)?;
    vet_metadata(&metadata)?;
    Ok(Inspected {
        path: path.to_path_buf(),
        metadata,
    })
}

/// Reads what vetting needs from an open plugin file: the ELF header, the root symbol, the
/// metadata record. Only those parts of the file are read.
fn read_record<'d, R: ReadRef<'d>>(data: R) -> Result<Metadata, Refusal> {
    let header = data
        .read_bytes_at(0, 64)
        .or_else(|()| data.read_bytes_at(0, 20))
        .or_else(|()| data.read_bytes_at(0, 4))
        .map_err(|()| Refusal::NotElf)?;
    check_elf_header(header)?;
    let file = object::File::parse(data).map_err(|e| Refusal::CorruptElf(e.to_string()))?;
    let has_root = file
        .dynamic_symbols()
        .any(|s| s.name() == Ok(ROOT_SYMBOL) && !s.is_undefined());
    if !has_root {
        return Err(Refusal::NoRootModule);
    }
    let section = file
        .section_by_name(META_SECTION)
        .ok_or(Refusal::NoMetadata)?;
    if section.size() > MAX_METADATA_BYTES {
        return Err(Refusal::BadMetadata(format!(
            "the record is {} bytes, more than {MAX_METADATA_BYTES}",
            section.size()
        )));
    }
    let record = section
        .data()
        .map_err(|e| Refusal::CorruptElf(e.to_string()))?;
    parse_metadata(record)
}

/// The checks on what a library declares, shared by the metadata record (before loading)
/// and the descriptor (after).
pub(crate) fn vet_metadata(m: &Metadata) -> Result<(), Refusal> {
    let required = sdk_requirement();
    if !required.matches(&m.sdk_version) {
        return Err(Refusal::IncompatibleSdk {
            found: m.sdk_version.to_string(),
            required: required.to_string(),
        });
    }
    if !m.unwind {
        return Err(Refusal::PanicAbort);
    }
    if m.hooks.is_empty() {
        return Err(Refusal::NoHooks);
    }
    for h in &m.hooks {
        if !is_slug(&h.name) {
            return Err(Refusal::BadName(h.name.clone()));
        }
        let unknown = h.points & !point::KNOWN_BITS;
        if unknown != 0 {
            return Err(Refusal::UnknownCapabilities {
                name: h.name.clone(),
                bits: unknown,
            });
        }
    }
    Ok(())
}

fn check_dir(path: &Path) -> Result<(), Refusal> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let meta = std::fs::metadata(dir).map_err(|e| Refusal::Unreadable(e.to_string()))?;
    check_owner_mode(meta.uid(), meta.mode()).map_err(|(uid, mode)| {
        let dir = dir.display().to_string();
        match uid {
            Some(uid) => Refusal::ForeignDir { dir, uid },
            None => Refusal::WritableDir {
                dir,
                mode: mode & 0o7777,
            },
        }
    })
}

/// Refuses what sudo refuses for its plugins: group- or world-writable, or owned by someone
/// other than the current user or root. `Err((Some(uid), _))` for the owner,
/// `Err((None, mode))` for the mode.
fn check_owner_mode(uid: u32, mode: u32) -> Result<(), (Option<u32>, u32)> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    if uid != me && uid != 0 {
        return Err((Some(uid), mode));
    }
    if mode & 0o022 != 0 {
        return Err((None, mode & 0o7777));
    }
    Ok(())
}

const fn host_elf_class() -> u8 {
    if cfg!(target_pointer_width = "64") {
        2
    } else {
        1
    }
}

fn host_machine() -> u16 {
    elf_machine_of(std::env::consts::ARCH)
}

fn elf_machine_of(arch: &str) -> u16 {
    match arch {
        "x86" => 3,
        "arm" => 40,
        "x86_64" => 62,
        "aarch64" => 183,
        "riscv64" => 243,
        _ => 0,
    }
}

fn machine_name(machine: u16) -> String {
    match machine {
        3 => "x86".into(),
        40 => "arm".into(),
        62 => "x86_64".into(),
        183 => "aarch64".into(),
        243 => "riscv64".into(),
        other => format!("ELF machine {other}"),
    }
}

fn check_elf_header(data: &[u8]) -> Result<(), Refusal> {
    if data.len() < 4 || &data[..4] != b"\x7fELF" {
        return Err(Refusal::NotElf);
    }
    if data.len() < 20 {
        return Err(Refusal::CorruptElf("truncated header".into()));
    }
    let class = data[4];
    if class != host_elf_class() {
        let bits = |c: u8| match c {
            1 => "32-bit",
            2 => "64-bit",
            _ => "unknown-class",
        };
        return Err(Refusal::WrongTarget {
            found: format!("{} ELF", bits(class)),
            expected: format!("{} ELF", bits(host_elf_class())),
        });
    }
    let little = data[5] == 1;
    let read_u16 = |at: usize| {
        let b = [data[at], data[at + 1]];
        if little {
            u16::from_le_bytes(b)
        } else {
            u16::from_be_bytes(b)
        }
    };
    if cfg!(target_endian = "little") != little {
        return Err(Refusal::WrongTarget {
            found: if little {
                "little-endian"
            } else {
                "big-endian"
            }
            .into(),
            expected: if little {
                "big-endian"
            } else {
                "little-endian"
            }
            .into(),
        });
    }
    let e_type = read_u16(16);
    if e_type != 3 {
        return Err(Refusal::CorruptElf(format!(
            "ELF type {e_type} is not a shared object"
        )));
    }
    let machine = read_u16(18);
    if machine != host_machine() {
        return Err(Refusal::WrongTarget {
            found: machine_name(machine),
            expected: machine_name(host_machine()),
        });
    }
    Ok(())
}

/// Best-effort read of a file's metadata record, to name the hooks of a refused file. Runs no
/// plugin code, and reads as little as [`inspect`] does: never a symlink's target, a FIFO,
/// or a file over [`MAX_PLUGIN_BYTES`].
pub fn read_metadata(path: &Path) -> Option<Metadata> {
    let (file, _) = open_plugin(path).ok()?;
    let data = ReadCache::new(file);
    let file = object::File::parse(&data).ok()?;
    let section = file.section_by_name(META_SECTION)?;
    if section.size() > MAX_METADATA_BYTES {
        return None;
    }
    parse_metadata(section.data().ok()?).ok()
}

/// Parses the record written by `windtunnel_sdk::export_hooks!` (format documented in
/// `windtunnel_sdk::export`).
pub(super) fn parse_metadata(record: &[u8]) -> Result<Metadata, Refusal> {
    let bad = |why: &str| Refusal::BadMetadata(why.to_owned());
    let body = record
        .strip_prefix(META_MAGIC.as_slice())
        .ok_or_else(|| bad("unknown record format"))?;
    let text = std::str::from_utf8(body).map_err(|_| bad("not UTF-8"))?;
    let text = text.trim_end_matches('\0');
    let (mut sdk, mut version, mut unwind, mut target) = (None, None, None, None);
    let mut hooks = Vec::new();
    for line in text.lines().filter(|l| !l.is_empty()) {
        let (key, value) = line
            .split_once(' ')
            .ok_or_else(|| bad("line without a value"))?;
        match key {
            "sdk" => {
                sdk =
                    Some(Version::parse(value).map_err(|e| {
                        Refusal::BadMetadata(format!("SDK version `{value}`: {e}"))
                    })?);
            }
            "version" => version = Some(value.to_owned()),
            "unwind" => unwind = Some(value == "1"),
            "target" => target = Some(value.to_owned()),
            "hook" => {
                let (name, bits) = value.split_once(' ').ok_or_else(|| bad("hook line"))?;
                let points = u32::from_str_radix(bits, 16)
                    .map_err(|_| bad("hook capability bits are not hexadecimal"))?;
                hooks.push(MetaHook {
                    name: name.to_owned(),
                    points,
                });
            }
            // Later SDKs may add keys; older hosts ignore them.
            _ => {}
        }
    }
    Ok(Metadata {
        sdk_version: sdk.ok_or_else(|| bad("no SDK version"))?,
        library_version: version.ok_or_else(|| bad("no library version"))?,
        unwind: unwind.ok_or_else(|| bad("no panic strategy"))?,
        target: target.ok_or_else(|| bad("no target"))?,
        hooks,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(body: &str) -> Vec<u8> {
        let mut v = META_MAGIC.to_vec();
        v.extend_from_slice(body.as_bytes());
        v
    }

    #[test]
    fn parses_a_record() {
        let m = parse_metadata(&record(
            "sdk 1.0.0\nversion 0.3.1\nunwind 1\ntarget x86_64-linux\nhook a 00000003\nhook b-2 00000020\n",
        ))
        .unwrap();
        assert_eq!(m.sdk_version, Version::new(1, 0, 0));
        assert_eq!(m.hooks.len(), 2);
        assert_eq!(m.hooks[1].points, 0x20);
        assert!(m.unwind);
    }

    #[test]
    fn refuses_records_missing_fields() {
        let err = parse_metadata(&record("version 1\nunwind 1\ntarget t\n")).unwrap_err();
        assert_eq!(err, Refusal::BadMetadata("no SDK version".into()));
        assert_eq!(
            parse_metadata(b"garbage").unwrap_err(),
            Refusal::BadMetadata("unknown record format".into())
        );
    }

    #[test]
    fn requirement_accepts_patches_and_older_minors_only() {
        let req = sdk_requirement();
        let host = Version::parse(windtunnel_sdk::SDK_VERSION).unwrap();
        assert!(req.matches(&Version::new(host.major, host.minor, 0)));
        assert!(req.matches(&Version::new(host.major, 0, 0)));
        assert!(req.matches(&Version::new(host.major, host.minor, host.patch + 7)));
        assert!(!req.matches(&Version::new(host.major, host.minor + 1, 0)));
        assert!(!req.matches(&Version::new(host.major + 1, 0, 0)));
    }

    #[test]
    fn vets_declarations() {
        let mut m = Metadata {
            sdk_version: Version::parse(windtunnel_sdk::SDK_VERSION).unwrap(),
            library_version: "0.1.0".into(),
            unwind: true,
            target: "x86_64-linux".into(),
            hooks: vec![MetaHook {
                name: "ok".into(),
                points: 1,
            }],
        };
        assert_eq!(vet_metadata(&m), Ok(()));
        m.hooks[0].points = 1 << 20;
        assert!(matches!(
            vet_metadata(&m),
            Err(Refusal::UnknownCapabilities { .. })
        ));
        m.hooks[0].points = 1;
        m.unwind = false;
        assert_eq!(vet_metadata(&m), Err(Refusal::PanicAbort));
    }
}
