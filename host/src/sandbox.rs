//! Confined runs: every process `wt` starts for a run — a `process` agent, a world server,
//! an isolated hook's process — is confined between `fork` and `exec`, with what the kernel offers, and the trace records
//! what was enforced ([`SandboxRecord`]).
//!
//! - **A user namespace of its own**, mapping only `wt`'s own user: the process holds no
//!   capability outside it, even when `wt` runs as root, so it cannot raise its limits, undo
//!   its rules, or bypass `RLIMIT_NPROC` the way root does.
//! - **Limits** (`setrlimit`, soft and hard): processes (threads count), address space, file
//!   size, open files.
//! - **`no_new_privs`**: no setuid, no file capabilities.
//! - **Landlock**: writes only beneath the run's scratch directory (and `/dev/null` and its
//!   kind); reads only the system (`/usr`, `/etc`, …), the command's own files, the paths the
//!   caller names and `[sandbox] read` adds — never a credential location beneath them
//!   (`~/.ssh`, `~/.aws`, …, `/etc/shadow`: their siblings are allowed one by one instead);
//!   TCP connects only to the run's own ports and binds only an A2A agent's own; signals and abstract unix sockets
//!   only within its own domain.
//!
//! Everything is built in the parent before the fork; the child only makes system calls (no
//! allocation, no lock), as `pre_exec` requires. `auto` (the default) enforces what the
//! kernel offers and says what it could not; `require` refuses to start a process it cannot
//! confine fully; `off` confines nothing and says so.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, NetPort, PathBeneath, PathFd,
    Ruleset, RulesetAttr, RulesetCreated, RulesetCreatedAttr, Scope,
};
use windtunnel_model::SandboxRecord;

/// `--sandbox`: how hard `wt` confines what it starts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// Confine with what the kernel offers; the trace says what was not enforced.
    #[default]
    Auto,
    /// Refuse, before any run, when the kernel cannot enforce every rule.
    Require,
    /// Confine nothing (recorded in every trace).
    Off,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Auto => "auto",
            Mode::Require => "require",
            Mode::Off => "off",
        }
    }
}

static MODE: OnceLock<Mode> = OnceLock::new();

/// Sets the invocation's mode (once, before any process starts).
pub fn set_mode(mode: Mode) {
    let _ = MODE.set(mode);
}

/// The invocation's mode: [`set_mode`]'s, else `auto`.
pub fn mode() -> Mode {
    MODE.get().copied().unwrap_or_default()
}

/// `[sandbox]` of an agent config or a world server.
pub use windtunnel_model::SandboxNetwork as Network;
pub use windtunnel_model::SandboxSettings as Settings;

/// Generous enough for node and Python agents with their thread pools.
pub const DEFAULT_PROCESSES: u64 = 1024;
/// 16 GiB of address space: V8 and Go reserve far more than they touch.
pub const DEFAULT_ADDRESS_SPACE: u64 = 16 << 30;
pub const DEFAULT_FILE_SIZE: u64 = 4 << 30;
pub const DEFAULT_OPEN_FILES: u64 = 4096;

/// Checks what a `[sandbox]` says, naming the field.
pub fn check(settings: &Settings) -> Result<(), String> {
    for (name, value, low) in [
        ("max_processes", settings.max_processes, 8),
        ("max_memory_bytes", settings.max_memory_bytes, 64 << 20),
        ("max_file_bytes", settings.max_file_bytes, 1 << 20),
        ("max_open_files", settings.max_open_files, 64),
    ] {
        if let Some(v) = value
            && v < low
        {
            return Err(format!(
                "`sandbox.{name}` = {v} is out of range: at least {low}"
            ));
        }
    }
    for p in settings.read.iter().chain(&settings.write) {
        if !p.is_absolute() {
            return Err(format!("`sandbox` path {} must be absolute", p.display()));
        }
    }
    Ok(())
}

/// The limits of `settings`, with the defaults: name, resource, value.
fn limits(settings: &Settings) -> [(&'static str, nix::sys::resource::Resource, u64); 4] {
    use nix::sys::resource::Resource;
    [
        (
            "processes",
            Resource::RLIMIT_NPROC,
            settings.max_processes.unwrap_or(DEFAULT_PROCESSES),
        ),
        (
            "address_space_bytes",
            Resource::RLIMIT_AS,
            settings.max_memory_bytes.unwrap_or(DEFAULT_ADDRESS_SPACE),
        ),
        (
            "file_size_bytes",
            Resource::RLIMIT_FSIZE,
            settings.max_file_bytes.unwrap_or(DEFAULT_FILE_SIZE),
        ),
        (
            "open_files",
            Resource::RLIMIT_NOFILE,
            settings.max_open_files.unwrap_or(DEFAULT_OPEN_FILES),
        ),
    ]
}

/// What this machine's kernel can enforce, found once.
#[derive(Clone, Debug)]
pub struct Kernel {
    /// The Landlock ABI, when Landlock is there and enabled.
    pub landlock_abi: Option<u32>,
    /// Whether a process can be started in a user namespace of its own; why not, otherwise.
    pub user_namespace: Result<(), String>,
}

/// The ABI below which the network and scope rules do not exist.
const NET_ABI: u32 = 4;
const SCOPE_ABI: u32 = 6;

impl Kernel {
    /// What `require` needs and this kernel lacks.
    pub fn missing(&self) -> Vec<String> {
        let mut missing = Vec::new();
        match self.landlock_abi {
            None => missing.push("Landlock (not in this kernel, or not enabled at boot)".into()),
            Some(abi) if abi < NET_ABI => missing.push(format!(
                "Landlock's network rules (ABI {NET_ABI}; this kernel has {abi})"
            )),
            Some(abi) if abi < SCOPE_ABI => missing.push(format!(
                "Landlock's signal and socket scoping (ABI {SCOPE_ABI}; this kernel has {abi})"
            )),
            _ => {}
        }
        if let Err(why) = &self.user_namespace {
            missing.push(format!("a user namespace ({why})"));
        }
        missing
    }

    /// One line for `wt doctor`.
    pub fn summary(&self) -> String {
        let landlock = match self.landlock_abi {
            Some(abi) => format!("Landlock ABI {abi}"),
            None => "no Landlock".into(),
        };
        let userns = match &self.user_namespace {
            Ok(()) => "user namespaces".to_owned(),
            Err(why) => format!("no user namespace ({why})"),
        };
        let missing = self.missing();
        if missing.is_empty() {
            format!("{landlock}, {userns}: every rule is enforced")
        } else {
            format!(
                "{landlock}, {userns}: not enforced here: {}",
                missing.join("; ")
            )
        }
    }
}

/// A test seam: `WT_SANDBOX_SIMULATE_NO_LANDLOCK=1` makes `wt` act as on a kernel without
/// Landlock (the suite's `require` test).
const SIMULATE_NO_LANDLOCK: &str = "WT_SANDBOX_SIMULATE_NO_LANDLOCK";

/// What this kernel can enforce (probed on first use).
pub fn kernel() -> &'static Kernel {
    static KERNEL: OnceLock<Kernel> = OnceLock::new();
    KERNEL.get_or_init(|| Kernel {
        landlock_abi: if std::env::var_os(SIMULATE_NO_LANDLOCK).is_some_and(|v| v == "1") {
            None
        } else {
            landlock_abi()
        },
        user_namespace: probe_user_namespace(),
    })
}

fn landlock_abi() -> Option<u32> {
    // The `landlock` crate keeps its own query private (a ruleset is built best-effort
    // instead); the trace and `wt doctor` need the number itself.
    // SAFETY: the documented way to ask for the ABI version: no ruleset attribute, size 0,
    // the VERSION flag; it reads and writes no memory.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            1u32,
        )
    };
    u32::try_from(v).ok().filter(|&v| v > 0)
}

/// Starts `true` in a user namespace of its own, as a confined process would be.
fn probe_user_namespace() -> Result<(), String> {
    let program = ["/usr/bin/true", "/bin/true"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .ok_or("no `true` to probe with")?;
    let maps = IdMaps::new(true);
    let mut cmd = Command::new(program);
    // SAFETY: the closure makes system calls only (see `IdMaps::enter`).
    unsafe {
        cmd.pre_exec(move || maps.enter());
    }
    match cmd.status() {
        Ok(s) if s.success() => Ok(()),
        Ok(s) => Err(format!("the probe ended with {s}")),
        Err(e) => Err(e.to_string()),
    }
}

/// The one-user maps of a new user namespace, written by the child itself.
struct IdMaps {
    uid_map: CString,
    gid_map: CString,
    /// `wt` runs as root and the process is held to a process limit: its real user becomes
    /// `nobody`.
    split: bool,
}

/// The user a confined process of root's runs as, inside its namespace and as its real user.
const NOBODY: u32 = 65534;

impl IdMaps {
    /// With `limit_processes`, a process of root's gets `nobody` as its real user, so that
    /// its process limit holds (see [`IdMaps::enter`]).
    fn new(limit_processes: bool) -> IdMaps {
        let (uid, gid) = (
            nix::unistd::getuid().as_raw(),
            nix::unistd::getgid().as_raw(),
        );
        // Root outside is `nobody` inside: from its exec on, the process holds no capability
        // even within its namespace.
        let inside = |id: u32| if id == 0 { NOBODY } else { id };
        IdMaps {
            uid_map: CString::new(format!("{} {uid} 1", inside(uid))).expect("no NUL"),
            gid_map: CString::new(format!("{} {gid} 1", inside(gid))).expect("no NUL"),
            split: uid == 0 && limit_processes,
        }
    }

    /// In the child: a new user namespace, its maps written. System calls only.
    fn enter(&self) -> std::io::Result<()> {
        use nix::sched::{CloneFlags, unshare};
        use nix::unistd::Uid;
        if self.split {
            // The kernel never holds root's own processes to `RLIMIT_NPROC`, whatever their
            // namespace: the real user becomes `nobody`, the effective one stays root (for the
            // files it may read), and the seccomp filter keeps it from changing back. The
            // price: a real user that is not the effective one puts the program in the C
            // library's secure-execution mode (`LD_LIBRARY_PATH`, `LD_PRELOAD` and `TMPDIR`
            // are dropped by the dynamic loader), which the record says.
            nix::unistd::setresuid(Uid::from_raw(NOBODY), Uid::from_raw(0), Uid::from_raw(0))
                .map_err(std::io::Error::from)?;
        }
        unshare(CloneFlags::CLONE_NEWUSER).map_err(std::io::Error::from)?;
        write_file(c"/proc/self/setgroups", b"deny")?;
        write_file(c"/proc/self/uid_map", self.uid_map.as_bytes())?;
        write_file(c"/proc/self/gid_map", self.gid_map.as_bytes())?;
        // The capabilities the new namespace gave are dropped at exec: its user is not root
        // there.
        Ok(())
    }
}

/// Writes `bytes` to `path` with system calls only.
fn write_file(path: &std::ffi::CStr, bytes: &[u8]) -> std::io::Result<()> {
    use nix::fcntl::{OFlag, open};
    use nix::sys::stat::Mode;
    let fd = open(path, OFlag::O_WRONLY | OFlag::O_CLOEXEC, Mode::empty())
        .map_err(std::io::Error::from)?;
    let written = nix::unistd::write(&fd, bytes).map_err(std::io::Error::from)?;
    if written != bytes.len() {
        return Err(std::io::Error::other("short write"));
    }
    Ok(())
}

/// Whom a confinement is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Agent,
    WorldServer,
    /// An isolated hook's process: it has no run ports (its services reach it over its
    /// pipes), so unless its network is opened it connects nowhere.
    Hook,
}

/// What a process to confine is and may touch.
pub struct Request<'a> {
    pub role: Role,
    /// The command, as it will be started.
    pub argv: &'a [String],
    /// Its `PATH`, to find the command's own files.
    pub path_var: Option<&'a std::ffi::OsStr>,
    /// Directories it may read besides the system and its command (its working directory,
    /// the pack).
    pub read: &'a [PathBuf],
    /// Where it may write: its scratch directory (and a state directory its config names).
    pub write: &'a [PathBuf],
    /// Its run's own TCP ports.
    pub ports: &'a [u16],
    /// The TCP ports it may listen on (an agent that serves, e.g. over A2A: its own port).
    pub bind: &'a [u16],
    pub settings: &'a Settings,
}

/// What to add to an error starting a confined process that the kernel refused: where to
/// allow its path.
pub fn hint(e: &std::io::Error, record: &SandboxRecord) -> &'static str {
    if record.enforced && e.kind() == std::io::ErrorKind::PermissionDenied {
        " (the sandbox may refuse its path: add the directory it is installed in to `[sandbox] read`, see docs/sandbox.md)"
    } else {
        ""
    }
}

/// The port of a `http://host:port/…` URL.
pub fn port_of(url: &str) -> Option<u16> {
    let rest = url.split_once("://")?.1;
    let authority = &rest[..rest.find('/').unwrap_or(rest.len())];
    authority.rsplit_once(':')?.1.parse().ok()
}

/// The system's directories a process may read: what every program needs to run.
const SYSTEM_READ: [&str; 11] = [
    "/usr", "/lib", "/lib32", "/lib64", "/bin", "/sbin", "/etc", "/opt", "/proc", "/sys", "/run",
];

/// Device files a process may write.
const DEVICES: [&str; 6] = [
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
];

/// Locations of credentials, beneath the home directory: never readable, even when a parent
/// directory is.
const HOME_CREDENTIALS: [&str; 18] = [
    ".ssh",
    ".aws",
    ".azure",
    ".config/gcloud",
    ".config/gh",
    ".netrc",
    ".docker",
    ".kube",
    ".gnupg",
    ".git-credentials",
    ".npmrc",
    ".pypirc",
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".password-store",
    ".local/share/keyrings",
    ".terraform.d",
    ".vault-token",
];

/// Credentials of the system: readable by their owner, and a confined process keeps `wt`'s
/// user (root on CI) for the files it touches.
const SYSTEM_CREDENTIALS: [&str; 7] = [
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/sudoers",
    "/etc/sudoers.d",
    "/etc/ssh",
];

/// The system's credential locations, canonical, that exist.
fn system_credentials() -> &'static [PathBuf] {
    static CREDS: OnceLock<Vec<PathBuf>> = OnceLock::new();
    CREDS.get_or_init(|| canonical(SYSTEM_CREDENTIALS.iter().map(PathBuf::from)))
}

/// The credential locations beneath the home directory, canonical, that exist.
fn home_credentials() -> &'static [PathBuf] {
    static CREDS: OnceLock<Vec<PathBuf>> = OnceLock::new();
    CREDS.get_or_init(|| match std::env::var_os("HOME") {
        Some(home) => canonical(HOME_CREDENTIALS.iter().map(|c| Path::new(&home).join(c))),
        None => Vec::new(),
    })
}

fn canonical(paths: impl Iterator<Item = PathBuf>) -> Vec<PathBuf> {
    paths
        .filter_map(|p| std::fs::canonicalize(p).ok())
        .collect()
}

/// The first of a confined process's two Landlock layers, built once: it reads anything but
/// the system's credentials (every entry of `/` and of `/etc` but those, one by one). The
/// second layer, built for each process, holds what that process may touch; with the first
/// beneath it, it allows `/etc` whole. `None` without Landlock.
fn system_layer(abi: ABI) -> Option<&'static RulesetCreated> {
    static LAYER: OnceLock<Option<RulesetCreated>> = OnceLock::new();
    LAYER
        .get_or_init(|| {
            let build = || -> Result<RulesetCreated, landlock::RulesetError> {
                let read = AccessFs::from_read(abi);
                let mut created = Ruleset::default()
                    .set_compatibility(CompatLevel::BestEffort)
                    .handle_access(read)?
                    .create()?;
                let mut allowed = Vec::new();
                expand(Path::new("/"), system_credentials(), &mut allowed, 0);
                for p in outermost(allowed) {
                    if let Ok(fd) = PathFd::new(&p) {
                        created = created.add_rule(PathBeneath::new(fd, read))?;
                    }
                }
                Ok(created)
            };
            build()
                .map_err(|e| tracing::warn!("the sandbox's system layer: {e}"))
                .ok()
        })
        .as_ref()
}

/// A confinement ready to apply to one command.
pub struct Confinement {
    record: SandboxRecord,
    /// Applied in the child; `None` when nothing is enforced.
    apply: Option<Apply>,
}

struct Apply {
    maps: Option<IdMaps>,
    limits: Vec<(nix::sys::resource::Resource, u64)>,
    seccomp: Option<seccompiler::BpfProgram>,
    /// The system layer (shared, duplicated for this process), then its own.
    base: Option<RulesetCreated>,
    ruleset: Option<RulesetCreated>,
}

impl Confinement {
    /// What the trace records.
    pub fn record(&self) -> SandboxRecord {
        self.record.clone()
    }

    /// Installs the confinement on `cmd`: applied between its fork and its exec.
    pub fn install(self, cmd: &mut Command) {
        let Some(mut apply) = self.apply else {
            return;
        };
        // SAFETY: the closure makes system calls only: setresuid, unshare, open/write/close
        // of the maps, setrlimit, prctl, seccomp and landlock_restrict_self, with every
        // buffer, filter and file descriptor prepared before the fork.
        unsafe {
            cmd.pre_exec(move || {
                if let Some(maps) = &apply.maps {
                    maps.enter()?;
                }
                for (resource, value) in &apply.limits {
                    nix::sys::resource::setrlimit(*resource, *value, *value)
                        .map_err(std::io::Error::from)?;
                }
                if let Some(filter) = &apply.seccomp {
                    seccompiler::apply_filter(filter).map_err(std::io::Error::other)?;
                }
                if let Some(base) = apply.base.take() {
                    base.restrict_self().map_err(std::io::Error::other)?;
                }
                match apply.ruleset.take() {
                    Some(ruleset) => {
                        ruleset.restrict_self().map_err(std::io::Error::other)?;
                    }
                    None => nix::sys::prctl::set_no_new_privs().map_err(std::io::Error::from)?,
                }
                Ok(())
            });
        }
    }
}

/// The confinement of one process, by the invocation's [`mode`]. `Err` only under
/// `require`, when the kernel cannot enforce every rule.
pub fn confine(req: &Request<'_>) -> Result<Confinement, String> {
    let mode = mode();
    let mut record = SandboxRecord::default();
    record.mode = mode.as_str().to_owned();
    // A network setting other than `allow` confines.
    let open = req.settings.network == Network::Allow;
    record.network = match (open, req.role) {
        (true, _) => "allow",
        (false, Role::Hook) => "none",
        (false, _) => "run",
    }
    .to_owned();
    if mode == Mode::Off {
        return Ok(Confinement {
            record,
            apply: None,
        });
    }
    let kernel = kernel();
    let missing = kernel.missing();
    if mode == Mode::Require && !missing.is_empty() {
        return Err(format!(
            "--sandbox require: this kernel cannot enforce {}",
            missing.join("; ")
        ));
    }
    record.enforced = true;
    record.not_enforced = missing;
    // An isolated hook keeps its own limits: no process limit, and so no secure-execution
    // mode for the plugin's own libraries on `LD_LIBRARY_PATH`.
    let limit_processes = req.role != Role::Hook;
    let maps = kernel
        .user_namespace
        .is_ok()
        .then(|| IdMaps::new(limit_processes));
    record.user_namespace = maps.is_some();
    record.secure_execution = maps.as_ref().is_some_and(|m| m.split);
    record.no_new_privs = true;
    let limits: Vec<_> = limits(req.settings)
        .into_iter()
        .filter(|(name, _, _)| limit_processes || *name != "processes")
        .collect();
    record.limits = limits
        .iter()
        .map(|(name, _, v)| ((*name).to_owned(), *v))
        .collect::<BTreeMap<_, _>>();
    let mut base = None;
    let ruleset = match kernel.landlock_abi {
        Some(abi) => {
            let layer = system_layer(ABI::from(i32::try_from(abi).unwrap_or(i32::MAX)))
                .ok_or_else(|| format!("cannot build the sandbox's rules for `{}`", req.argv[0]))?;
            base = Some(layer.try_clone().map_err(|e| {
                format!(
                    "cannot build the sandbox's rules for `{}`: {e}",
                    req.argv[0]
                )
            })?);
            let (ruleset, read, write) = ruleset(req, abi).map_err(|e| {
                format!(
                    "cannot build the sandbox's rules for `{}`: {e}",
                    req.argv[0]
                )
            })?;
            record.landlock_abi = Some(abi);
            record.read = read.iter().map(|p| p.display().to_string()).collect();
            record.unreadable = system_credentials()
                .iter()
                .chain(
                    home_credentials()
                        .iter()
                        .filter(|c| read.iter().any(|r| c.starts_with(r))),
                )
                .map(|c| c.display().to_string())
                .collect();
            record.write = write.iter().map(|p| p.display().to_string()).collect();
            if !open && abi >= NET_ABI {
                record.connect_ports = req.ports.to_vec();
                record.bind_ports = req.bind.to_vec();
            }
            Some(ruleset)
        }
        None => None,
    };
    let seccomp = match filter(req.settings.network == Network::Allow) {
        Ok(f) => Some(f),
        Err(e) => {
            record
                .not_enforced
                .push(format!("the system-call filter ({e})"));
            None
        }
    };
    Ok(Confinement {
        record,
        apply: Some(Apply {
            maps,
            limits: limits.iter().map(|(_, r, v)| (*r, *v)).collect(),
            seccomp,
            base,
            ruleset,
        }),
    })
}

/// The system-call filter: no change of user (a process of root's stays `nobody` as its
/// real user, held to its process limit), and unless the network is open, no UDP or
/// unix-domain socket (Landlock's network rules on this kernel are TCP's; a named socket,
/// a container daemon's say, is not a file Landlock guards). Refused calls fail with `EPERM`.
fn filter(network_open: bool) -> Result<seccompiler::BpfProgram, String> {
    use seccompiler::{
        SeccompAction, SeccompCmpArgLen as Len, SeccompCmpOp as Op, SeccompCondition as Cond,
        SeccompFilter, SeccompRule, TargetArch,
    };
    let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(|e| e.to_string())?;
    let e = |e: seccompiler::BackendError| e.to_string();
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = [
        libc::SYS_setuid,
        libc::SYS_setreuid,
        libc::SYS_setresuid,
        libc::SYS_setfsuid,
    ]
    .into_iter()
    .map(|call| (call, Vec::new()))
    .collect();
    if !network_open {
        let domain = |d: i32| Cond::new(0, Len::Dword, Op::Eq, d as u64).map_err(e);
        // The type's low bits; SOCK_NONBLOCK and SOCK_CLOEXEC may be or-ed in.
        let datagram =
            || Cond::new(1, Len::Dword, Op::MaskedEq(0xf), libc::SOCK_DGRAM as u64).map_err(e);
        rules.insert(
            libc::SYS_socket,
            vec![
                SeccompRule::new(vec![domain(libc::AF_UNIX)?]).map_err(e)?,
                SeccompRule::new(vec![domain(libc::AF_INET)?, datagram()?]).map_err(e)?,
                SeccompRule::new(vec![domain(libc::AF_INET6)?, datagram()?]).map_err(e)?,
            ],
        );
    }
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .map_err(e)?;
    seccompiler::BpfProgram::try_from(filter).map_err(e)
}

/// The Landlock ruleset of `req`, and the paths it lets the process read and write.
fn ruleset(
    req: &Request<'_>,
    abi: u32,
) -> Result<(RulesetCreated, Vec<PathBuf>, Vec<PathBuf>), landlock::RulesetError> {
    let abi = ABI::from(i32::try_from(abi).unwrap_or(i32::MAX));
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(abi))?;
    if req.settings.network != Network::Allow {
        ruleset = ruleset.handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp)?;
    }
    let ruleset = ruleset.scope(Scope::AbstractUnixSocket | Scope::Signal)?;
    let mut created = ruleset.create()?;

    let mut read: Vec<PathBuf> = SYSTEM_READ.iter().map(PathBuf::from).collect();
    read.extend(command_roots(req.argv, req.path_var));
    read.extend(req.read.iter().cloned());
    read.extend(req.settings.read.iter().cloned());
    let (read, read_shown) = allowed(read);
    let mut write = req.write.to_vec();
    write.extend(req.settings.write.iter().cloned());
    let (write, write_shown) = allowed(write);

    let read_access = AccessFs::from_read(abi);
    for p in &read {
        if let Ok(fd) = PathFd::new(p) {
            created = created.add_rule(PathBeneath::new(fd, read_access))?;
        }
    }
    // `/dev`: listed and read; its null, zero and random devices written.
    if let Ok(fd) = PathFd::new("/dev") {
        created = created.add_rule(PathBeneath::new(fd, read_access))?;
    }
    for d in DEVICES {
        if let Ok(fd) = PathFd::new(d) {
            created = created.add_rule(PathBeneath::new(fd, AccessFs::from_file(abi)))?;
        }
    }
    for p in &write {
        if let Ok(fd) = PathFd::new(p) {
            created = created.add_rule(PathBeneath::new(fd, AccessFs::from_all(abi)))?;
        }
    }
    if req.settings.network != Network::Allow {
        for &port in req.ports {
            created = created.add_rule(NetPort::new(port, AccessNet::ConnectTcp))?;
        }
        for &port in req.bind {
            created = created.add_rule(NetPort::new(port, AccessNet::BindTcp))?;
        }
    }
    Ok((created, read_shown, write_shown))
}

/// Where a command's own files are: for each path among its words (the program found on
/// `PATH`, a script given by path), the installation it belongs to — the directory above a
/// `bin` (a virtualenv, a Python or node install), the `node_modules` directory it is in,
/// else its own directory — as written and with links resolved.
fn command_roots(argv: &[String], path_var: Option<&std::ffi::OsStr>) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for (i, word) in argv.iter().enumerate() {
        let mut candidates = Vec::new();
        let given = Path::new(word);
        if given.is_absolute() || word.contains('/') {
            candidates.push(given.to_path_buf());
        } else if i == 0
            && let Some(paths) = path_var
        {
            candidates.extend(
                std::env::split_paths(paths)
                    .map(|d| d.join(word))
                    .filter(|p| p.is_file())
                    .take(1),
            );
        }
        for c in candidates {
            let Ok(absolute) = std::path::absolute(&c) else {
                continue;
            };
            if !absolute.exists() {
                continue;
            }
            found.push(root_of(&absolute));
            if let Ok(real) = std::fs::canonicalize(&absolute) {
                found.push(root_of(&real));
            }
        }
    }
    found
}

/// The installation a file belongs to (see [`command_roots`]).
fn root_of(path: &Path) -> PathBuf {
    let dir = if path.is_dir() {
        path
    } else {
        path.parent().unwrap_or(path)
    };
    for ancestor in dir.ancestors() {
        if ancestor.file_name().is_some_and(|n| n == "node_modules") {
            return ancestor.to_path_buf();
        }
    }
    match dir.file_name() {
        // A `bin` of an installation, node's `.bin`, pyenv's or rbenv's `shims` (which run
        // the installation's own programs).
        Some(n) if n == "bin" || n == ".bin" || n == "shims" => {
            dir.parent().unwrap_or(dir).to_path_buf()
        }
        _ => dir.to_path_buf(),
    }
}

/// `paths`, canonical, deduplicated, with every credential location taken out: a path that is
/// one is dropped, and a path above one is replaced by its entries, one by one, but the one
/// leading to it. Also the paths as they are shown in the trace: those asked for (canonical),
/// each credential location beneath them marked `(not …)`.
fn allowed(paths: Vec<PathBuf>) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let creds = home_credentials();
    let mut out = Vec::new();
    let mut shown = Vec::new();
    for p in paths {
        let Ok(real) = std::fs::canonicalize(&p) else {
            continue;
        };
        if creds.iter().any(|c| real.starts_with(c)) {
            continue;
        }
        expand(&real, creds, &mut out, 0);
        shown.push(real);
    }
    (outermost(out), outermost(shown))
}

/// `paths` sorted, without those beneath another (they add nothing).
fn outermost(mut paths: Vec<PathBuf>) -> Vec<PathBuf> {
    paths.sort();
    paths.dedup();
    let mut kept: Vec<PathBuf> = Vec::new();
    for p in paths {
        if !kept.iter().any(|k| p.starts_with(k)) {
            kept.push(p);
        }
    }
    kept
}

fn expand(path: &Path, creds: &[PathBuf], out: &mut Vec<PathBuf>, depth: usize) {
    if creds.iter().any(|c| path.starts_with(c)) {
        return;
    }
    if !creds.iter().any(|c| c.starts_with(path)) {
        out.push(path.to_path_buf());
        return;
    }
    // Deep trees of credentials are not worth following: beyond a few levels, leave out.
    if depth > 4 {
        return;
    }
    let Ok(entries) = std::fs::read_dir(path) else {
        return;
    };
    for e in entries.flatten() {
        let Ok(real) = std::fs::canonicalize(e.path()) else {
            continue;
        };
        // An entry that links back above a credential location would open it again.
        if creds.iter().any(|c| c.starts_with(&real)) && !real.starts_with(path) {
            continue;
        }
        if real.starts_with(path) && real != e.path() {
            // A link within: its target is reached as its own entry.
            continue;
        }
        expand(&real, creds, out, depth + 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_credential_location_is_never_allowed_even_beneath_an_allowed_path() {
        let dir = tempfile::tempdir().unwrap();
        let home = std::fs::canonicalize(dir.path()).unwrap();
        for d in ["a", ".ssh", "b/c", "b/.aws-not", "b/secret"] {
            std::fs::create_dir_all(home.join(d)).unwrap();
        }
        let creds = vec![home.join(".ssh"), home.join("b/secret")];
        let mut out = Vec::new();
        expand(&home, &creds, &mut out, 0);
        out.sort();
        assert_eq!(
            out,
            vec![home.join("a"), home.join("b/.aws-not"), home.join("b/c")]
        );
        let mut out = Vec::new();
        expand(&home.join(".ssh"), &creds, &mut out, 0);
        assert!(out.is_empty());
    }

    #[test]
    fn a_command_s_files_are_its_installation() {
        assert_eq!(
            root_of(Path::new("/opt/venv/bin/python")),
            PathBuf::from("/opt/venv")
        );
        assert_eq!(
            root_of(Path::new("/w/node_modules/.bin/srv")),
            PathBuf::from("/w/node_modules")
        );
        assert_eq!(
            root_of(Path::new("/w/node_modules/@x/srv/dist/index.js")),
            PathBuf::from("/w/node_modules")
        );
        assert_eq!(
            root_of(Path::new("/w/agents/agent.py")),
            PathBuf::from("/w/agents")
        );
    }

    /// `sh -c script` confined with a fresh scratch directory, allowed to connect to `ports`:
    /// its exit status and output.
    fn confined_sh(script: &str, ports: &[u16]) -> (i32, String) {
        let scratch = tempfile::tempdir().unwrap();
        let argv = vec!["/bin/sh".to_owned(), "-c".to_owned(), script.to_owned()];
        let settings = Settings::default();
        let c = confine(&Request {
            role: Role::Agent,
            argv: &argv,
            path_var: None,
            read: &[],
            write: &[scratch.path().to_path_buf()],
            ports,
            bind: &[],
            settings: &settings,
        })
        .unwrap();
        assert!(c.record().enforced, "{:?}", c.record());
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..]).current_dir(scratch.path());
        c.install(&mut cmd);
        let out = cmd.output().unwrap();
        (
            out.status.code().unwrap_or(-1),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    }

    #[test]
    fn a_confined_process_writes_its_scratch_only_and_holds_no_capability() {
        let outside = tempfile::tempdir().unwrap();
        let target = outside.path().join("x");
        let (code, out) = confined_sh(
            &format!(
                "echo ok > here && cat here && echo no > {} ; grep Cap /proc/self/status; cat /etc/passwd >/dev/null && echo passwd-read; cat /etc/shadow >/dev/null 2>&1 || echo shadow-refused",
                target.display()
            ),
            &[],
        );
        assert_eq!(code, 0, "{out}");
        assert!(out.starts_with("ok\n"), "{out}");
        assert!(!target.exists(), "{out}");
        assert!(out.contains("CapEff:\t0000000000000000"), "{out}");
        // `/etc` is read, but for its credentials (the system layer).
        assert!(
            out.contains("passwd-read") && out.contains("shadow-refused"),
            "{out}"
        );
    }

    #[test]
    fn a_confined_process_cannot_hold_more_processes_than_its_limit_nor_change_its_user() {
        // 1,100 background sleepers against the default 1,024: the shell's fork fails.
        let (_, out) = confined_sh(
            "n=0; while [ $n -lt 1100 ] && sleep 5 & do n=$((n+1)); done; echo held $n; kill 0",
            &[],
        );
        let held: Option<u32> = out
            .lines()
            .find_map(|l| l.strip_prefix("held "))
            .and_then(|n| n.trim().parse().ok());
        assert!(
            out.contains("Cannot fork") || held.is_some_and(|n| n < 1100),
            "{out}"
        );
        let (code, out) = confined_sh(
            "python3 -c 'import os; os.setuid(0)' 2>&1 || echo refused",
            &[],
        );
        assert!(out.contains("refused") || code != 0, "{out}");
    }

    #[test]
    fn settings_out_of_range_are_named() {
        let mut s = Settings::default();
        s.max_processes = Some(1);
        assert!(check(&s).unwrap_err().contains("sandbox.max_processes"));
        let mut s = Settings::default();
        s.read = vec!["relative".into()];
        assert!(check(&s).unwrap_err().contains("absolute"));
    }
}
