//! Processes `wt` starts, and everything they start: none outlives its run, its hook or `wt`.
//!
//! A process group is not enough: a grandchild may call `setsid()` (or `setpgid`) and leave
//! it, and a group is only killed by someone still alive to kill it. So every process `wt`
//! starts — process agents, isolated hooks — carries a tag in its environment,
//! `WT_PROCESS_TAG=<sweep>/<n>`, and its descendants inherit it through forks, `setsid()`
//! and double forks alike (`/proc/<pid>/environ` is the environment a process started with).
//!
//! - When `wt` ends such a process (the end of a run, a hook stopped), it kills the process
//!   group and then every process carrying that exact tag ([`kill_tagged`]).
//! - `wt run` starts a watchdog, a small `wt` process in a group of its own, before the
//!   sweep ([`watch`]). It waits for the end of a pipe only the supervising `wt` holds, so it
//!   wakes when that process ends, however it ends — `kill -9` included — and kills every
//!   process whose tag carries the sweep's prefix. The supervisor waits for it, so when `wt`
//!   has exited, nothing it started is left.
//!
//! A descendant that starts a program with a scrubbed environment sheds the tag; only a
//! cgroup would hold it. `wt` does not require one.

use std::collections::VecDeque;
use std::io::Read;
use std::sync::Mutex;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// The variable every process `wt` starts carries.
pub(crate) const TAG_ENV: &str = "WT_PROCESS_TAG";

/// Set by the supervising `wt` in the sweep's process: the sweep's tag prefix.
pub(crate) const SWEEP_TAG_ENV: &str = "WT_SWEEP_TAG";

/// The most of a process's initial environment read when looking for a tag.
const ENVIRON_LIMIT: u64 = 1 << 20;

/// Kill rounds before giving up on processes that keep forking.
const ROUNDS: usize = 50;

/// A fresh sweep tag: 16 hex digits, unique per sweep on this machine.
pub(crate) fn fresh_sweep_tag() -> String {
    use std::hash::BuildHasher;
    let seed = (
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    format!(
        "{:016x}",
        std::collections::hash_map::RandomState::new().hash_one(seed)
    )
}

/// This process's sweep tag: the supervisor's ([`SWEEP_TAG_ENV`]) or one of its own.
pub(crate) fn sweep_tag() -> &'static str {
    static TAG: OnceLock<String> = OnceLock::new();
    TAG.get_or_init(|| {
        std::env::var(SWEEP_TAG_ENV)
            .ok()
            .filter(|t| !t.is_empty() && t.len() <= 64 && t.bytes().all(|b| b.is_ascii_hexdigit()))
            .unwrap_or_else(fresh_sweep_tag)
    })
}

/// A tag for one more process `wt` starts: `(TAG_ENV, "<sweep>/<n>")`, to set in its
/// environment.
pub(crate) fn new_tag() -> (&'static str, String) {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    (TAG_ENV, format!("{}/{n}", sweep_tag()))
}

/// The value of [`TAG_ENV`] in the initial environment of `pid`, if it has one.
fn tag_of(pid: u32) -> Option<Vec<u8>> {
    let file = std::fs::File::open(format!("/proc/{pid}/environ")).ok()?;
    let mut all = Vec::new();
    file.take(ENVIRON_LIMIT).read_to_end(&mut all).ok()?;
    let key = format!("{TAG_ENV}=");
    all.split(|b| *b == 0)
        .find_map(|kv| kv.strip_prefix(key.as_bytes()))
        .map(<[u8]>::to_vec)
}

/// Processes (other than this one) whose tag satisfies `wanted`.
fn tagged(wanted: &dyn Fn(&[u8]) -> bool) -> Vec<u32> {
    let me = std::process::id();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| *pid != me)
        .filter(|pid| tag_of(*pid).is_some_and(|t| wanted(&t)))
        .collect()
}

/// SIGKILLs every process whose tag satisfies `wanted`, round after round until none is
/// found (a process may fork while it is being killed). Returns how many were killed.
fn kill_where(wanted: &dyn Fn(&[u8]) -> bool) -> usize {
    let mut killed = 0;
    for _ in 0..ROUNDS {
        let pids = tagged(wanted);
        if pids.is_empty() {
            break;
        }
        for pid in pids {
            // SAFETY: kill(2) takes plain integers. A pid is reused only after its process
            // was reaped by its parent; the window between the scan and the kill is short.
            if unsafe { libc::kill(pid as i32, libc::SIGKILL) } == 0 {
                killed += 1;
            }
        }
        // Killed processes stay visible (with their environment) until they are gone.
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    killed
}

/// Kills every process carrying exactly `tag` (a process `wt` started, and what it left).
pub(crate) fn kill_tagged(tag: &str) -> usize {
    kill_where(&|t| t == tag.as_bytes())
}

/// Kills every process carrying a tag of the sweep `sweep_tag`.
pub(crate) fn kill_sweep(sweep_tag: &str) -> usize {
    let prefix = format!("{sweep_tag}/");
    kill_where(&|t| t.starts_with(prefix.as_bytes()))
}

/// The watchdog's life: waits until its standard input ends (the supervising `wt` ended,
/// whichever way), then kills every process of the sweep `sweep_tag`.
pub(crate) fn watch(sweep_tag: &str) -> u8 {
    let mut sink = [0u8; 64];
    let mut stdin = std::io::stdin().lock();
    loop {
        match stdin.read(&mut sink) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    kill_sweep(sweep_tag);
    remove_scratch_dirs(sweep_tag);
    0
}

/// A private directory for one process `wt` starts (`kind`: `agent`, `world`, `hook`), in
/// the system's temporary directory, named by the sweep's tag: removed when dropped, and by
/// the watchdog when `wt` ends without dropping it (a `kill -9`).
pub(crate) fn scratch_dir(kind: &str) -> std::io::Result<tempfile::TempDir> {
    tempfile::Builder::new()
        .prefix(&format!("wt-{kind}-{}-", sweep_tag()))
        .tempdir()
}

/// Removes what [`scratch_dir`] made for the sweep `sweep_tag` and was left behind: only
/// directories (never through a link) of this user's.
fn remove_scratch_dirs(sweep_tag: &str) {
    use std::os::unix::fs::MetadataExt;
    let tmp = std::env::temp_dir();
    let Ok(entries) = std::fs::read_dir(&tmp) else {
        return;
    };
    let me = nix::unistd::geteuid().as_raw();
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(name) = name.to_str() else {
            continue;
        };
        let ours = ["agent", "world", "hook"]
            .iter()
            .any(|kind| name.starts_with(&format!("wt-{kind}-{sweep_tag}-")));
        let Ok(meta) = std::fs::symlink_metadata(e.path()) else {
            continue;
        };
        if ours && meta.is_dir() && meta.uid() == me {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// The most of a process's stderr a trace keeps: its last bytes.
pub(crate) const STDERR_TAIL_BYTES: usize = 4096;

/// The last bytes of a stream, and how many there were.
#[derive(Default)]
pub(crate) struct Tail {
    pub(crate) bytes: VecDeque<u8>,
    pub(crate) total: u64,
}

impl Tail {
    /// The tail as text, starting with `…` when earlier bytes were dropped: the redactor
    /// treats the place after a `…` as a cut edge, where a secret may have been split.
    pub(crate) fn text(&self) -> String {
        let bytes: Vec<u8> = self.bytes.iter().copied().collect();
        let text = String::from_utf8_lossy(&bytes);
        // The cut may have split a character at the front: drop the replacement it made.
        let text = text.trim_start_matches('\u{FFFD}');
        if self.total > self.bytes.len() as u64 {
            format!("…{text}")
        } else {
            text.to_owned()
        }
    }
}

/// Reads `err` to its end into `tail`, keeping the last [`STDERR_TAIL_BYTES`].
pub(crate) fn read_tail(mut err: impl Read, tail: &Mutex<Tail>) {
    let mut buf = [0u8; 8192];
    loop {
        match err.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                let mut t = tail
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                t.total += n as u64;
                t.bytes.extend(&buf[..n]);
                let excess = t.bytes.len().saturating_sub(STDERR_TAIL_BYTES);
                t.bytes.drain(..excess);
            }
        }
    }
}
