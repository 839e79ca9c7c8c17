//! `wt`'s side of an isolated hook: one child process per hook instance, spoken to over its
//! stdin and stdout, its stderr (where the child also sends its stdout) drained into a
//! bounded log.
//!
//! A call writes the point, then answers the child's member and service requests through
//! the [`HostServices`] the dispatcher passed, exactly as the FFI context would, until the
//! child returns. Anything else — end of file, a broken pipe, a tag the parent does not
//! expect, a frame over the limit, bytes that do not decode — ends the child: it is killed
//! if still alive, reaped, and the call fails with [`CallError::Fatal`] naming the cause
//! (`killed by SIGSEGV`, `exited with status 0`, …). Every later call fails the same way
//! without touching a process.
//!
//! This side never decides what a failure means for the sweep (the dispatcher does), never
//! reads a frame past the limit, and never signals a process it has already reaped: the pid
//! lives in a lock that the reaper empties before it waits, and a kill happens only under
//! that lock.

use std::{
    collections::VecDeque,
    ffi::OsString,
    io::{BufReader, Read, Write},
    os::unix::fs::FileExt,
    os::unix::process::{CommandExt, ExitStatusExt},
    path::{Path, PathBuf},
    process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Stdio},
    sync::{Arc, Condvar, Mutex, MutexGuard, mpsc},
    time::{Duration, Instant},
};

use windtunnel_abi::point;

use super::{
    LOG_LIMIT, SpawnOptions,
    protocol::{self, CHILD_FRAME_LIMIT, FrameError, tag},
};
use crate::hooks::registry::{CallError, HostServices, env_prefix};

/// The hidden subcommand the child runs.
pub const CHILD_SUBCOMMAND: &str = "hook-child";

/// How long the parent polls for a child's frame before its read sleeps (with a core to
/// spare only).
const SPIN: Duration = Duration::from_micros(100);

/// How long a child that closed its pipe gets to finish exiting before it is killed (so its
/// own exit status, not our SIGKILL, is what the warning names).
const EXIT_GRACE: Duration = Duration::from_secs(2);

/// How long, once the child's process group is killed, its output may take to drain into
/// the log (and, after a crash, to be quoted). Only a process that left both the group and
/// the sweep's tag can hold the pipe that long; otherwise the drain ends as soon as the
/// reader thread is scheduled, which on a loaded machine can take well over 200 ms.
const OUTPUT_GRACE: Duration = Duration::from_secs(2);

/// How much of the child's most recent output is kept in memory.
const TAIL: usize = 4096;

/// Why a hook process could not be started.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    #[error("cannot start its isolated process: {0}")]
    Spawn(std::io::Error),
    /// The child vetted or loaded the plugin and refused it (the same refusal `wt` would
    /// give in-process).
    #[error("{0}")]
    Refused(String),
    #[error("its isolated process {0} before it was ready")]
    Died(String),
    /// Its confinement could not be built, or its sandbox settings are wrong.
    #[error("cannot confine its isolated process: {0}")]
    Sandbox(String),
}

/// A hook instance living in a child process.
pub struct Isolated {
    /// The child's pid, which is also its process group; `None` once it is being reaped.
    pid: Mutex<Option<i32>>,
    state: Mutex<State>,
    output: Arc<Output>,
    memory_limit_mib: u64,
    /// The hook's name, for the warning when its process ends on its own.
    hook: String,
    /// What confines the child.
    sandbox: windtunnel_model::SandboxRecord,
    /// The child's private temporary directory (its `TMPDIR`, the one place it may write
    /// unless its settings name more): removed once the child is reaped.
    _scratch: tempfile::TempDir,
}

struct State {
    child: Child,
    /// Its [`crate::procs`] tag: what the plugin started carries it too.
    tag: String,
    to_child: Option<ChildStdin>,
    from_child: BufReader<protocol::Eager<ChildStdout>>,
    /// Frame buffers kept between calls, so a call allocates nothing.
    body: Vec<u8>,
    out: Vec<u8>,
    /// Why the child is gone, once it is.
    dead: Option<String>,
    /// Per point, the members ([`protocol::AHEAD`] bits) the hook read there: sent ahead
    /// with its next call at that point.
    read_before: [u16; 16],
}

/// What a child says when it has loaded the plugin and built the hook.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct Ready {
    pub protocol: u32,
    pub sha256: String,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The child's environment: nothing of `wt`'s but the hook's own `WT_<NAME>_*` settings and
/// what the dynamic loader needs to find the plugin's own dependencies.
pub fn child_env(hook: &str) -> Vec<(OsString, OsString)> {
    let prefix = env_prefix(hook);
    std::env::vars_os()
        .filter(|(k, _)| {
            k.to_str()
                .is_some_and(|k| k.starts_with(&prefix) || k == "LD_LIBRARY_PATH")
        })
        .collect()
}

/// The private temporary directories of hook processes, removed when each is dropped and
/// at `wt`'s end whatever happens (the end of the sweep, a stop, an exit), when a child may
/// still be holding its own.
static SCRATCH: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// A new private temporary directory for a hook process, on the list [`SCRATCH`].
fn scratch_dir() -> std::io::Result<tempfile::TempDir> {
    static AT_STOP: std::sync::Once = std::sync::Once::new();
    AT_STOP.call_once(|| crate::interrupt::at_stop(remove_scratch));
    let dir = crate::procs::scratch_dir("hook")?;
    lock(&SCRATCH).push(dir.path().to_owned());
    Ok(dir)
}

fn remove_scratch() {
    for dir in lock(&SCRATCH).drain(..) {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// The confinement of a hook's child: it reads the system, `wt`'s own binary, the plugin's
/// directory, the directories of `LD_LIBRARY_PATH` (the plugin's own libraries) and `wt`'s
/// working directory, and writes only its private `scratch`; it connects nowhere; its
/// address space is the hook's memory limit. `WT_<NAME>_SANDBOX_*` adds to that.
fn confinement(
    opts: &SpawnOptions,
    plugin: &Path,
    hook: &str,
    scratch: &Path,
) -> Result<crate::sandbox::Confinement, SpawnError> {
    let mut settings = super::sandbox_settings(hook).map_err(SpawnError::Sandbox)?;
    settings.max_memory_bytes = Some(opts.memory_limit_mib.saturating_mul(1 << 20));
    let mut read: Vec<PathBuf> = plugin.parent().map(Path::to_path_buf).into_iter().collect();
    if let Some(dirs) = std::env::var_os("LD_LIBRARY_PATH") {
        read.extend(std::env::split_paths(&dirs).filter(|d| d.is_absolute()));
    }
    read.extend(std::env::current_dir().ok());
    let argv = [opts.program.display().to_string()];
    crate::sandbox::confine(&crate::sandbox::Request {
        role: crate::sandbox::Role::Hook,
        argv: &argv,
        path_var: None,
        read: &read,
        write: &[scratch.to_path_buf()],
        ports: &[],
        bind: &[],
        settings: &settings,
    })
    .map_err(SpawnError::Sandbox)
}

impl Isolated {
    /// Starts a child that vets and loads `plugin` and builds the hook `hook`, and waits
    /// (at most `opts.start_timeout`) until it is ready. `instance` numbers the hook's
    /// instances (0, then one per further lane); it only names the log.
    pub fn spawn(
        opts: &SpawnOptions,
        plugin: &Path,
        hook: &str,
        instance: usize,
    ) -> Result<(Isolated, Ready), SpawnError> {
        let (tag_env, tag) = crate::procs::new_tag();
        let scratch = scratch_dir().map_err(SpawnError::Spawn)?;
        let confinement = confinement(opts, plugin, hook, scratch.path())?;
        let sandbox = confinement.record();
        let mut cmd = Command::new(&opts.program);
        cmd.arg(CHILD_SUBCOMMAND)
            .arg("--plugin")
            .arg(plugin)
            .arg("--hook")
            .arg(hook)
            .arg("--memory-limit-mib")
            .arg(opts.memory_limit_mib.to_string())
            .arg("--parent-pid")
            .arg(std::process::id().to_string())
            .env_clear()
            .envs(child_env(hook))
            .env(tag_env, &tag)
            .env("TMPDIR", scratch.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own process group: a kill reaches whatever the plugin started, and a
            // terminal's Ctrl-C reaches only `wt`, which finishes the run and then ends it.
            .process_group(0);
        confinement.install(&mut cmd);
        let mut child = cmd.spawn().map_err(SpawnError::Spawn)?;
        let pid = child.id() as i32;
        let (Some(to_child), Some(from_child), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            kill_group(pid);
            let _ = child.wait();
            return Err(SpawnError::Spawn(std::io::Error::other("no pipes")));
        };
        let output = Arc::new(Output::default());
        let log = opts.log.as_ref().map(|(dir, stem)| {
            let name = match instance {
                0 => format!("{stem}.{hook}.log"),
                n => format!("{stem}.{hook}.lane{n}.log"),
            };
            (dir.clone(), name)
        });
        {
            let output = output.clone();
            std::thread::Builder::new()
                .name(format!("wt-hook-log-{hook}"))
                .spawn(move || drain(stderr, log, &output))
                .map_err(SpawnError::Spawn)?;
        }
        let isolated = Isolated {
            pid: Mutex::new(Some(pid)),
            state: Mutex::new(State {
                child,
                tag,
                to_child: Some(to_child),
                from_child: BufReader::with_capacity(64 << 10, protocol::Eager::new(from_child)),
                body: Vec::new(),
                out: Vec::new(),
                dead: None,
                read_before: [0; 16],
            }),
            output,
            memory_limit_mib: opts.memory_limit_mib,
            hook: hook.to_owned(),
            sandbox,
            _scratch: scratch,
        };

        // A plugin constructor that hangs, or a child that writes half a frame and stops,
        // must not hang `wt`: past the start timeout the child is killed, which ends the read.
        let (disarm, armed) = mpsc::channel::<()>();
        let timeout = opts.start_timeout;
        let watchdog = std::thread::spawn(move || {
            let fired = armed.recv_timeout(timeout) == Err(mpsc::RecvTimeoutError::Timeout);
            if fired {
                kill_group(pid);
            }
            fired
        });
        let mut st = lock(&isolated.state);
        let State {
            from_child, body, ..
        } = &mut *st;
        let first = protocol::read_frame(
            from_child,
            &[tag::READY, tag::REFUSED],
            CHILD_FRAME_LIMIT,
            body,
        );
        drop(disarm);
        let fired = watchdog.join().unwrap_or(false);
        let ready = match first {
            Ok(tag::READY) => serde_json::from_slice::<Ready>(body)
                .ok()
                .filter(|r| r.protocol == protocol::VERSION)
                .ok_or(FrameError::Malformed("unreadable ready frame")),
            Ok(_) => {
                let refusal = String::from_utf8_lossy(body).into_owned();
                isolated.reap(&mut st, EXIT_GRACE);
                return Err(SpawnError::Refused(refusal));
            }
            Err(e) => Err(e),
        };
        match ready {
            Ok(ready) => {
                drop(st);
                Ok((isolated, ready))
            }
            Err(_) if fired => {
                isolated.reap(&mut st, Duration::ZERO);
                Err(SpawnError::Died(format!(
                    "did not load the plugin within {}; killed",
                    crate::deadlines::human(timeout)
                )))
            }
            Err(e) => {
                let (what, detail) = isolated.bury(&mut st, e);
                Err(SpawnError::Died(format!("{what}{detail}")))
            }
        }
    }

    /// What confines the child, for the trace.
    pub fn sandbox(&self) -> &windtunnel_model::SandboxRecord {
        &self.sandbox
    }

    /// Calls the hook at `point` in the child, serving its requests from `host`.
    pub fn call(&self, point: u32, host: &dyn HostServices) -> Result<String, CallError> {
        let mut st = lock(&self.state);
        if let Some(cause) = &st.dead {
            return Err(CallError::Fatal(cause.clone()));
        }
        match exchange(&mut st, point, host) {
            Ok(result) => result.map_err(CallError::Failed),
            Err(e) => {
                let (what, detail) = self.bury(&mut st, e);
                let at = point::name(windtunnel_sdk::turn::ids::split(point).0);
                let cause = format!("isolated process {what} in {at}{detail}");
                st.dead = Some(cause.clone());
                Err(CallError::Fatal(cause))
            }
        }
    }

    /// Kills the child now (a call overran its deadline). The call waiting on it then sees
    /// the pipe close, reaps the child and returns.
    pub fn abandon(&self) {
        if let Some(pid) = *lock(&self.pid) {
            kill_group(pid);
        }
    }

    /// Ends a child that broke the protocol or went away: reaps it (killing it first if it
    /// broke the protocol, or if it does not finish exiting) and says what happened, in
    /// `wt`'s own words: a crash the Rust runtime explained in its output (an allocation
    /// over the memory limit, a panic during a panic) is named, and the log is pointed to.
    /// The child's own text is never quoted: its output stays in its log.
    fn bury(&self, st: &mut State, e: FrameError) -> (String, String) {
        if e.is_violation() {
            self.reap(st, Duration::ZERO);
            return (format!("{e}; killed"), String::new());
        }
        let status = self.reap(st, EXIT_GRACE);
        let mut detail = String::new();
        let tail = self.output.tail(OUTPUT_GRACE);
        if (status.signal().is_some() || status.code() != Some(0))
            && let Some(why) = diagnose(&tail, self.memory_limit_mib)
        {
            detail = format!(" ({why})");
        }
        if let Some(path) = lock(&self.output.log_path).as_ref() {
            detail.push_str(&format!("; its output is in {}", path.display()));
        }
        (describe(status), detail)
    }

    fn reap(&self, st: &mut State, grace: Duration) -> ExitStatus {
        reap(&self.pid, st, grace)
    }
}

/// Reaps the child, killing its process group if it has not exited within `grace`.
fn reap(pid: &Mutex<Option<i32>>, st: &mut State, grace: Duration) -> ExitStatus {
    // From here on nobody else may signal this pid: once reaped it can belong to anyone.
    let Some(pid) = lock(pid).take() else {
        return ExitStatus::from_raw(0);
    };
    st.to_child = None;
    let until = Instant::now() + grace;
    let mut nap = Duration::from_micros(200);
    while !has_exited(pid) && Instant::now() < until {
        std::thread::sleep(nap);
        nap = (nap * 2).min(Duration::from_millis(20));
    }
    // Exited or not, the child is not reaped yet, so its pid (the group's id) is still
    // ours: kill the group, which also ends whatever the plugin left running in it, and
    // what it started that left the group.
    kill_group(pid);
    crate::procs::kill_tagged(&st.tag);
    st.child
        .wait()
        .unwrap_or_else(|_| ExitStatus::from_raw(libc::SIGKILL))
}

/// Has the child exited? Asks without reaping it, so the pid stays ours.
fn has_exited(pid: i32) -> bool {
    // SAFETY: `info` is a plain C struct that waitid fills; WNOWAIT leaves the child
    // waitable, so `Child::wait` still reaps it later.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let rc = libc::waitid(
            libc::P_PID,
            pid as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        );
        rc != 0 || info.si_pid() != 0
    }
}

impl Drop for Isolated {
    fn drop(&mut self) {
        // Closing its stdin tells a healthy child to exit; one that does not is killed.
        let st = self.state.get_mut().unwrap_or_else(|e| e.into_inner());
        // One that exited before it was told to (a thread the plugin left behind called
        // exit after the last point) is said, never taken for a clean end.
        let pid = *self.pid.get_mut().unwrap_or_else(|e| e.into_inner());
        let on_its_own = st.dead.is_none() && pid.is_some_and(has_exited);
        let status = reap(&self.pid, st, Duration::from_millis(100));
        if on_its_own {
            crate::term::err_line(&format!(
                "warning: hook:{}: isolated process {} on its own after its last point; its artifacts so far are kept",
                crate::term::sanitize(&self.hook),
                describe(status)
            ));
        }
        // Its log gets its last lines (and the count of what was dropped) before `wt` goes.
        let _ = self.output.tail(OUTPUT_GRACE);
    }
}

/// One call: the point out, then the child's requests answered until it returns.
fn exchange(
    st: &mut State,
    point: u32,
    host: &dyn HostServices,
) -> Result<Result<String, String>, FrameError> {
    let State {
        to_child,
        from_child,
        body,
        out,
        read_before,
        ..
    } = st;
    let to_child = to_child.as_mut().ok_or(FrameError::Eof)?;
    // The point proper, without a turn snapshot id (`windtunnel_sdk::turn::ids`).
    let learned = read_before.get_mut(windtunnel_sdk::turn::ids::split(point).0 as usize);
    let want = learned.as_deref().copied().unwrap_or(0);
    let ahead: Vec<(usize, Option<String>)> = (0..protocol::AHEAD.len())
        .filter(|i| want & (1 << i) != 0)
        .map(|i| (i, host.member(protocol::AHEAD[i])))
        .collect();
    let mut learned = learned;
    // With a core to spare, both sides wait for each other's frames spinning a little
    // before they sleep: a member read is then a round trip of microseconds, not two
    // process wake-ups.
    let spin = crate::hooks::dispatch::spare_core();
    from_child.get_mut().spin = if spin { SPIN } else { Duration::ZERO };
    let mut call = std::mem::take(body);
    protocol::call_body(point, spin, &ahead, &mut call);
    drop(ahead);
    let sent = protocol::write_frame(to_child, tag::CALL, &[&call], out);
    *body = call;
    sent?;
    let result = loop {
        match protocol::read_frame(
            from_child,
            &[tag::GET, tag::SERVICE, tag::RETURN],
            CHILD_FRAME_LIMIT,
            body,
        )? {
            tag::GET => {
                let name = protocol::utf8(body)?;
                if let (Some(i), Some(l)) = (protocol::ahead_index(&name), learned.as_deref_mut()) {
                    *l |= 1 << i;
                }
                match host.member(&name) {
                    Some(json) => protocol::write_frame(
                        to_child,
                        tag::MEMBER,
                        &[b"\x01", json.as_bytes()],
                        out,
                    )?,
                    None => protocol::write_frame(to_child, tag::MEMBER, &[b"\x00"], out)?,
                }
            }
            tag::SERVICE => {
                let (op, arg) = protocol::decode_service(body)?;
                let reply = host.call(&op, &arg);
                protocol::write_frame(to_child, tag::REPLY, &protocol::result_parts(&reply), out)?;
            }
            _ => break protocol::decode_result(body)?,
        }
    };
    // One large artifact must not pin its buffer for the rest of the sweep.
    if body.capacity() > 1 << 20 {
        *body = Vec::new();
    }
    Ok(result)
}

/// `killed by SIGSEGV`, `exited with status 3`.
pub fn describe(status: ExitStatus) -> String {
    match (status.signal(), status.code()) {
        (Some(sig), _) => format!("killed by {}", signal_name(sig)),
        (None, Some(code)) => format!("exited with status {code}"),
        _ => status.to_string(),
    }
}

fn signal_name(sig: i32) -> String {
    let name = match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        libc::SIGSYS => "SIGSYS",
        _ => return format!("signal {sig}"),
    };
    name.to_owned()
}

fn kill_group(pid: i32) {
    // SAFETY: kill(2) has no memory-safety preconditions. Callers hold the pid lock or own
    // the unreaped child, so `pid` still names our child's process group.
    unsafe {
        libc::kill(-pid, libc::SIGKILL);
    }
}

/// The line counting what the log cap dropped, always [`COUNT_LINE_WIDTH`] bytes.
fn count_line(dropped: u64) -> String {
    let line = format!("[wt: {dropped} more bytes of output dropped]");
    format!("{line:<width$}\n", width = COUNT_LINE_WIDTH - 1)
}

const COUNT_LINE_WIDTH: usize = 64;

/// Creates `<dir>/<name>`, or `<name>` with `-2`, `-3`, … before `.log` when taken: a log is
/// never shared, nor followed through a link.
fn create_log(dir: &Path, name: &str) -> Option<(PathBuf, std::fs::File)> {
    use std::os::unix::fs::OpenOptionsExt;
    let base = name.strip_suffix(".log").unwrap_or(name);
    for n in 1..1000u32 {
        let path = match n {
            1 => dir.join(name),
            n => dir.join(format!("{base}-{n}.log")),
        };
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
        {
            Ok(f) => return Some((path, f)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(_) => return None,
        }
    }
    None
}

/// The child's output as it arrives: the last [`TAIL`] bytes in memory, and everything up
/// to [`LOG_LIMIT`] in the log file.
#[derive(Default)]
struct Output {
    tail: Mutex<(VecDeque<u8>, bool)>,
    finished: Condvar,
    /// The log file, once the child wrote something to it.
    log_path: Mutex<Option<PathBuf>>,
}

impl Output {
    /// The child's last output, once it has ended (waiting at most `grace` for that).
    fn tail(&self, grace: Duration) -> String {
        let guard = lock(&self.tail);
        let (guard, _) = self
            .finished
            .wait_timeout_while(guard, grace, |(_, done)| !*done)
            .unwrap_or_else(|e| e.into_inner());
        let bytes: Vec<u8> = guard.0.iter().copied().collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

/// What the Rust runtime said before it aborted the child, in `wt`'s words.
fn diagnose(tail: &str, memory_limit_mib: u64) -> Option<String> {
    if let Some(at) = tail.rfind("memory allocation of ") {
        let bytes: String = tail[at + 21..]
            .chars()
            .take_while(char::is_ascii_digit)
            .take(20)
            .collect();
        return Some(format!(
            "an allocation of {bytes} bytes failed; memory limit {memory_limit_mib} MiB"
        ));
    }
    [
        "panic in a destructor",
        "non-unwinding panic",
        "panicked while processing panic",
    ]
    .iter()
    .any(|m| tail.contains(m))
    .then(|| "a panic while unwinding a panic".to_owned())
}

fn drain(mut from: impl Read, log: Option<(PathBuf, String)>, output: &Output) {
    let mut file: Option<std::fs::File> = None;
    let mut open_failed = false;
    let mut written = 0u64;
    let mut dropped = 0u64;
    // Where the count of dropped bytes is, once the cap is reached.
    let mut count_at: Option<u64> = None;
    let mut chunk = [0u8; 8192];
    loop {
        let n = match from.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let bytes = &chunk[..n];
        {
            let mut tail = lock(&output.tail);
            tail.0.extend(bytes);
            let excess = tail.0.len().saturating_sub(TAIL);
            tail.0.drain(..excess);
        }
        if file.is_none() && !open_failed {
            file = log.as_ref().and_then(|(dir, name)| {
                std::fs::create_dir_all(dir).ok()?;
                let (path, f) = create_log(dir, name)?;
                *lock(&output.log_path) = Some(path);
                Some(f)
            });
            open_failed = file.is_none();
        }
        if let Some(f) = file.as_mut() {
            let room = LOG_LIMIT.saturating_sub(written).min(n as u64) as usize;
            if f.write_all(&bytes[..room]).is_ok() {
                written += room as u64;
            }
            if room < n {
                if count_at.is_none() {
                    let notice = format!(
                        "\n[wt: the log is limited to {} MiB; what follows is counted, not kept]\n",
                        LOG_LIMIT >> 20
                    );
                    if f.write_all(notice.as_bytes()).is_ok() {
                        count_at = Some(written + notice.len() as u64);
                    }
                }
                dropped += (n - room) as u64;
                // The count is kept current in place, in a line of fixed width: `wt` may end
                // (or be killed) before the hook's output does.
                if let Some(at) = count_at {
                    let _ = f.write_all_at(count_line(dropped).as_bytes(), at);
                }
            }
        }
    }
    lock(&output.tail).1 = true;
    output.finished.notify_all();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_statuses_read_as_causes() {
        assert_eq!(
            describe(ExitStatus::from_raw(libc::SIGSEGV)),
            "killed by SIGSEGV"
        );
        assert_eq!(
            describe(ExitStatus::from_raw(3 << 8)),
            "exited with status 3"
        );
        assert_eq!(describe(ExitStatus::from_raw(0)), "exited with status 0");
        assert_eq!(describe(ExitStatus::from_raw(64)), "killed by signal 64");
    }

    #[test]
    fn the_log_is_bounded_and_says_how_much_it_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let output = Output::default();
        let big = vec![b'x'; (LOG_LIMIT as usize) + 1000];
        let mut input = big.clone();
        input.extend_from_slice(b"\nmemory allocation of 123 bytes failed\n");
        drain(
            &input[..],
            Some((dir.path().to_path_buf(), "h.log".into())),
            &output,
        );
        let log = std::fs::read_to_string(dir.path().join("h.log")).unwrap();
        assert!(log.len() < LOG_LIMIT as usize + 200);
        assert!(
            log.contains("[wt: the log is limited to 1 MiB; what follows is counted, not kept]"),
            "{}",
            &log[log.len() - 200..]
        );
        // The count line has a fixed width: it is kept current in place.
        let last = log.lines().last().unwrap();
        assert_eq!(last.trim_end(), "[wt: 1039 more bytes of output dropped]");
        assert_eq!(last.len() + 1, COUNT_LINE_WIDTH);
        // A second hook (or sweep) never shares the log.
        drain(
            &b"second\n"[..],
            Some((dir.path().to_path_buf(), "h.log".into())),
            &Output::default(),
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("h-2.log")).unwrap(),
            "second\n"
        );
        assert_eq!(
            diagnose(&output.tail(Duration::ZERO), 64).as_deref(),
            Some("an allocation of 123 bytes failed; memory limit 64 MiB")
        );
        assert_eq!(
            diagnose("thread caused non-unwinding panic. aborting.\n", 64).as_deref(),
            Some("a panic while unwinding a panic")
        );
        assert_eq!(diagnose("anything else\n", 64), None);
    }

    #[test]
    fn the_child_sees_only_its_own_settings() {
        // Built from the real environment, so checked by shape rather than by setting one.
        for (k, _) in child_env("acme") {
            let k = k.to_string_lossy().into_owned();
            assert!(k.starts_with("WT_ACME_") || k == "LD_LIBRARY_PATH", "{k}");
        }
    }
}
