//! The `process` runtime: the agent under test is a local command, and `wt` starts it.
//! The protocol is specified in `docs/process-runtime.md`.
//!
//! - Session mode (`command` without `{input}`): one process per run. Turns go to its stdin
//!   as JSON lines; replies come back as JSON lines on its stdout.
//! - One-shot mode (`command` with `{input}`): one process per turn; the reply is its stdout
//!   (or a field of the JSON it prints).
//!
//! The agent acts on the run's fixture world over MCP ([`crate::runtime::mcp`]): `WT_MCP_URL` in its
//! environment, or `{mcp_config}` on its command line. Its environment is explicit: a few
//! base variables, `env_passthrough`, `env`, and `wt`'s own `WT_*` — nothing else of `wt`'s.
//!
//! Every process starts in a process group of its own, and `wt` kills the whole group at a
//! turn or run deadline, when `wt` is stopped, and at the end of the run (one-shot: of the
//! turn): nothing the agent started outlives its run. A command line is never handed to a
//! shell. This module must not block a turn on the agent: stdin is written, and stdout and
//! stderr are read, on threads of their own, and everything read is bounded.

use std::collections::BTreeMap;
use std::io::{BufRead, Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
use nix::unistd::Pid;
use serde_json::{Value, json};
use windtunnel_model::{AgentProcess, ModelCall, Scenario, ToolCall, TurnErrorKind};

use super::{AgentHandle, Reply, RunEnd, RunInfo, Runtime, RuntimeError, TurnCtx};
use crate::procs::{Tail, read_tail};
use crate::runtime::mcp::{self, Inbox, McpRun, ToolSet};

/// Variables copied from `wt`'s environment to every agent process, when set.
pub(crate) const BASE_ENV: [&str; 7] =
    ["PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR", "TZ"];

/// How long a session process may take to exit after its stdin is closed at the end of a
/// run, before its group is killed.
pub(crate) const EXIT_GRACE: Duration = Duration::from_secs(5);

/// How often a waiting turn looks at its deadline and at `wt`'s stop state.
const TICK: Duration = Duration::from_millis(25);

/// Placeholders `command` may contain.
const PLACEHOLDERS: [&str; 6] = [
    "input",
    "mcp_config",
    "session_id",
    "turn",
    "run_id",
    "model_url",
];

/// Process groups alive right now, killed on `wt`'s abrupt exit paths ([`kill_all`]).
static LIVE: Mutex<Vec<i32>> = Mutex::new(Vec::new());

/// The live process groups, to add one: [`kill_all`] then runs on every way out of a sweep.
fn live_groups() -> std::sync::MutexGuard<'static, Vec<i32>> {
    static AT_STOP: std::sync::Once = std::sync::Once::new();
    AT_STOP.call_once(|| crate::interrupt::at_stop(kill_all));
    LIVE.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Kills every agent process group still alive. For exit paths that skip the normal
/// teardown (a second Ctrl-C, an `exit()` in the middle of a sweep); never blocks.
pub(crate) fn kill_all() {
    let groups = match LIVE.try_lock() {
        Ok(g) => g.clone(),
        Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner().clone(),
        Err(std::sync::TryLockError::WouldBlock) => return,
    };
    for g in groups {
        let _ = killpg(Pid::from_raw(g), Signal::SIGKILL);
    }
    // And what they started outside their groups.
    crate::procs::kill_sweep(crate::procs::sweep_tag());
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Session,
    OneShot,
    /// The process serves the agent over the network (an `a2a` agent `wt` starts): one per
    /// run, on a port `wt` gives it (`{port}`, `WT_A2A_PORT`), which it alone may listen on.
    Server,
}

/// The variable that tells a served agent its port.
pub(crate) const PORT_ENV: &str = "WT_A2A_PORT";

/// The placeholders in one argument, in order (`{name}` with `name` of `a-z` and `_`).
fn placeholders(arg: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = arg;
    while let Some(open) = rest.find('{') {
        let after = &rest[open + 1..];
        match after.find('}') {
            Some(close)
                if close > 0
                    && after[..close]
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b == b'_') =>
            {
                out.push(&after[..close]);
                rest = &after[close + 1..];
            }
            _ => rest = after,
        }
    }
    out
}

/// Checks the `process`-only fields of an agent config; one message naming the field.
pub(crate) fn validate(agent: &super::agent::Process) -> Result<(), String> {
    validate_for(agent, false)
}

/// [`validate`], for a served agent when `server` (`{port}` allowed, `{input}` not).
pub(crate) fn validate_for(agent: &super::agent::Process, server: bool) -> Result<(), String> {
    let Some(command) = &agent.command else {
        return Err("the process runtime needs `command` (the agent's command line, e.g. [\"python3\", \"agent.py\"])".into());
    };
    if command.is_empty() || command[0].trim().is_empty() {
        return Err("`command` must name a program as its first element".into());
    }
    if command.iter().any(|a| a.contains('\0')) {
        return Err("`command` must not contain a NUL character".into());
    }
    let used: Vec<&str> = command.iter().flat_map(|a| placeholders(a)).collect();
    if server && used.contains(&"input") {
        return Err("`command`: {input} has no place in a served agent's command (it is started once per run and spoken to over the network)".into());
    }
    if !server && used.contains(&"port") {
        return Err(
            "`command`: {port} is an a2a agent's placeholder (the port wt gives it)".into(),
        );
    }
    if let Some(bad) = used
        .iter()
        .find(|p| !(PLACEHOLDERS.contains(p) || (server && **p == "port")))
    {
        return Err(format!(
            "`command` has an unknown placeholder {{{bad}}} (known: {})",
            PLACEHOLDERS.map(|p| format!("{{{p}}}")).join(", ")
        ));
    }
    if placeholders(&command[0]).contains(&"input") {
        return Err("`command`: {input} cannot be the program itself".into());
    }
    let one_shot = used.contains(&"input");
    if !one_shot && used.contains(&"turn") {
        return Err("`command`: {turn} needs one-shot mode ({input} in `command`)".into());
    }
    if !one_shot && agent.reply_field.is_some() {
        return Err("`reply_field` applies to one-shot mode only ({input} in `command`)".into());
    }
    if agent.mcp == Some(false) && used.contains(&"mcp_config") {
        return Err("`command` uses {mcp_config} but `mcp = false`".into());
    }
    if agent.gateway.is_none() && used.contains(&"model_url") {
        return Err("`command` uses {model_url} but the agent has no `[gateway]`".into());
    }
    if let Some(g) = &agent.gateway {
        let mut taken = Vec::new();
        if g.openai_env {
            taken.extend(["OPENAI_BASE_URL", "OPENAI_API_KEY"].map(|n| (n, "openai_env")));
        }
        if g.anthropic_env {
            taken.extend(["ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY"].map(|n| (n, "anthropic_env")));
        }
        let named = agent.env.iter().flatten().map(|(k, _)| k);
        let passed = agent.env_passthrough.iter().flatten();
        for n in named.chain(passed) {
            if let Some((_, flag)) = taken.iter().find(|(t, _)| t == n) {
                return Err(format!(
                    "{n} is set by the gateway (`gateway.{flag} = true`); remove it from `env` and `env_passthrough`"
                ));
            }
        }
    }
    if let Some(f) = &agent.reply_field
        && (f.trim().is_empty() || f.split('.').any(str::is_empty))
    {
        return Err(format!(
            "`reply_field` = {f:?} is not a dotted path (e.g. \"result\" or \"message.text\")"
        ));
    }
    for (name, value) in agent.env.iter().flatten() {
        check_env_name(name).map_err(|why| format!("`env`: {why}"))?;
        if value.contains('\0') {
            return Err(format!(
                "`env`: the value of {name} contains a NUL character"
            ));
        }
    }
    for name in agent.env_passthrough.iter().flatten() {
        check_env_name(name).map_err(|why| format!("`env_passthrough`: {why}"))?;
    }
    if let Some(d) = &agent.state_dir
        && d.trim().is_empty()
    {
        return Err("`state_dir` must not be empty".into());
    }
    if let Some(s) = &agent.sandbox {
        crate::sandbox::check(s)?;
    }
    Ok(())
}

fn check_env_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if !ok {
        return Err(format!(
            "{name:?} is not a variable name (letters, digits and `_`)"
        ));
    }
    if name.starts_with("WT_") {
        return Err(format!(
            "{name} is set by wt itself (WT_MCP_URL, WT_MODEL_URL, WT_MODEL_TOKEN, WT_AGENT_*, WT_RUN_ID, WT_RUN_DIR, WT_SESSION_ID, WT_TURN)"
        ));
    }
    Ok(())
}

/// What every handle of the runtime shares.
struct Config {
    command: Vec<String>,
    mode: Mode,
    env: Vec<(String, String)>,
    mcp: bool,
    run_timeout: Option<Duration>,
    max_output: usize,
    reply_field: Option<String>,
    state_dir: Option<PathBuf>,
    /// The model gateway's upstream, when the agent has one.
    gateway: Option<Arc<super::gateway::Upstream>>,
    /// What its confinement allows beyond the defaults.
    sandbox: crate::sandbox::Settings,
    /// `wt`'s working directory, the agent's too: readable, not writable, when confined.
    cwd: PathBuf,
}

impl super::kind::RuntimeKind for super::agent::Process {
    fn name(&self) -> &'static str {
        "process"
    }

    fn build(&self, agent: &super::Agent) -> Result<Box<dyn Runtime>, RuntimeError> {
        Ok(Box::new(ProcessRuntime::new(agent, self)?))
    }

    fn validate(&self, _: &super::Agent) -> Result<(), String> {
        super::response_bytes(self.max_response_bytes)?;
        if let Some(t) = self.run_timeout_s {
            crate::deadlines::check_seconds(t, false)
                .map_err(|why| format!("`run_timeout_s` = {t} {why}"))?;
        }
        validate(self)
    }

    fn api_key_env(&self) -> Option<&str> {
        self.api_key_env.as_deref()
    }

    fn pricing(&self) -> Option<&super::agent::Pricing> {
        self.pricing.as_ref()
    }

    fn gateway(&self) -> Option<&super::agent::Gateway> {
        self.gateway.as_ref()
    }

    fn reaches_world(&self) -> bool {
        self.mcp.unwrap_or(true)
    }

    fn handed_vars(&self) -> Vec<(&'static str, &str)> {
        handed_vars(self.env_passthrough.as_deref())
    }

    fn add_secrets(&self, _: &super::Agent, r: &mut crate::secrets::Redactor) {
        add_env_secrets(self.env.as_ref(), self.env_passthrough.as_deref(), r);
    }

    fn to_sdk(&self, a: &mut windtunnel_model::AgentConfig) {
        a.command.clone_from(&self.command);
        a.env.clone_from(&self.env);
        a.env_passthrough.clone_from(&self.env_passthrough);
        a.api_key_env.clone_from(&self.api_key_env);
        a.reply_field.clone_from(&self.reply_field);
        a.run_timeout_s = self.run_timeout_s;
        a.state_dir.clone_from(&self.state_dir);
        a.mcp = self.mcp;
        a.max_response_bytes = self.max_response_bytes;
    }
}

/// The variables `env_passthrough` hands the agent, by the setting that names them.
pub(crate) fn handed_vars(passthrough: Option<&[String]>) -> Vec<(&'static str, &str)> {
    passthrough
        .unwrap_or_default()
        .iter()
        .map(|v| ("env_passthrough", v.as_str()))
        .collect()
}

/// The secrets of an agent's environment: values set or passed through under a secret
/// name, and values that are URLs (which may carry a password).
pub(crate) fn add_env_secrets(
    env: Option<&BTreeMap<String, String>>,
    passthrough: Option<&[String]>,
    r: &mut crate::secrets::Redactor,
) {
    for (name, value) in env.into_iter().flatten() {
        if crate::secrets::is_secret_name(name) || value.contains("://") {
            r.add(value);
        }
    }
    for name in passthrough.unwrap_or_default() {
        if crate::secrets::is_secret_name(name)
            && let Ok(value) = crate::secrets::env_secret(name)
        {
            r.add(&value);
        }
    }
}

/// The `process` runtime.
pub(crate) struct ProcessRuntime {
    config: Arc<Config>,
}

impl ProcessRuntime {
    pub(crate) fn new(
        whole: &super::Agent,
        agent: &super::agent::Process,
    ) -> Result<Self, RuntimeError> {
        Self::with_mode(whole, agent, false)
    }

    /// The runtime of an agent `wt` starts to serve it over the network (`a2a`): one process
    /// per run, confined as a session process is, listening on its own port.
    pub(crate) fn server(
        whole: &super::Agent,
        agent: &super::agent::Process,
    ) -> Result<Self, RuntimeError> {
        Self::with_mode(whole, agent, true)
    }

    fn with_mode(
        whole: &super::Agent,
        agent: &super::agent::Process,
        server: bool,
    ) -> Result<Self, RuntimeError> {
        validate_for(agent, server).map_err(RuntimeError)?;
        let gateway = match &agent.gateway {
            Some(g) => Some(Arc::new(super::gateway::Upstream::new(whole, g)?)),
            None => None,
        };
        let command = agent.command.clone().unwrap_or_default();
        let mode = if server {
            Mode::Server
        } else if command.iter().any(|a| placeholders(a).contains(&"input")) {
            Mode::OneShot
        } else {
            Mode::Session
        };
        let mut env: BTreeMap<String, String> = BASE_ENV
            .iter()
            .filter_map(|k| std::env::var(k).ok().map(|v| ((*k).to_owned(), v)))
            .collect();
        let mut passthrough: Vec<&String> = agent.env_passthrough.iter().flatten().collect();
        passthrough.extend(agent.api_key_env.as_ref());
        for name in passthrough {
            match crate::secrets::env_secret(name) {
                Ok(v) => {
                    env.insert(name.clone(), v);
                }
                Err(_) => {
                    return Err(RuntimeError(format!(
                        "environment variable {name} (named by env_passthrough) is not set or not UTF-8"
                    )));
                }
            }
        }
        for (k, v) in agent.env.iter().flatten() {
            env.insert(k.clone(), v.clone());
        }
        for (name, value) in super::told(whole) {
            let text = match value {
                Value::String(s) => s,
                other => other.to_string(),
            };
            env.insert(format!("WT_AGENT_{}", name.to_uppercase()), text);
        }
        if let Some(g) = &agent.gateway {
            super::gateway::refuse_sealed(
                g,
                env.iter()
                    .map(|(k, v)| (format!("the agent's environment variable {k}"), v.as_str())),
            )?;
            super::gateway::refuse_sealed(
                g,
                command
                    .iter()
                    .map(|a| ("an argument of `command`".to_owned(), a.as_str())),
            )?;
        }
        Ok(ProcessRuntime {
            config: Arc::new(Config {
                command,
                mode,
                env: env.into_iter().collect(),
                mcp: agent.mcp.unwrap_or(true),
                run_timeout: agent.run_timeout_s.map(Duration::from_secs_f64),
                max_output: usize::try_from(
                    agent
                        .max_response_bytes
                        .unwrap_or(super::DEFAULT_MAX_RESPONSE_BYTES),
                )
                .unwrap_or(usize::MAX),
                reply_field: agent.reply_field.clone(),
                state_dir: agent.state_dir.as_ref().map(PathBuf::from),
                gateway,
                sandbox: agent.sandbox.as_deref().cloned().unwrap_or_default(),
                cwd: std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/")),
            }),
        })
    }
}

impl Runtime for ProcessRuntime {
    fn provision(&self, scenario: &Scenario) -> Result<Box<dyn AgentHandle>, RuntimeError> {
        self.provision_lane(scenario, 0)
    }

    fn provision_lane(
        &self,
        scenario: &Scenario,
        lane: usize,
    ) -> Result<Box<dyn AgentHandle>, RuntimeError> {
        Ok(Box::new(self.agent(scenario, lane)?))
    }

    /// Every run is a fresh process with its own MCP endpoint: runs are independent, so a
    /// scenario may use as many lanes as `--jobs`.
    fn max_lanes(&self) -> Option<usize> {
        None
    }

    /// Starting an agent process costs CPU (an interpreter, its imports): one lane per CPU.
    fn default_jobs(&self) -> usize {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    }
}

impl ProcessRuntime {
    /// The handle of lane `lane`, as its concrete type (a served agent's runtime drives it).
    pub(crate) fn agent(
        &self,
        scenario: &Scenario,
        lane: usize,
    ) -> Result<ProcessAgent, RuntimeError> {
        // Each lane its own MCP listener: nothing one lane's agent does reaches another.
        let tools = match self.config.mcp {
            true => Some(ToolSet::new(&scenario.tools).map_err(|e| RuntimeError(e.to_string()))?),
            false => None,
        };
        let lane = match self.config.mcp || self.config.gateway.is_some() {
            true => Some(
                mcp::Lane::open(
                    u32::try_from(lane).unwrap_or(u32::MAX),
                    self.config.gateway.clone(),
                )
                .map_err(|e| RuntimeError(e.to_string()))?,
            ),
            false => None,
        };
        let dir = crate::procs::scratch_dir("agent")
            .map_err(|e| RuntimeError(format!("create a directory for the agent's files: {e}")))?;
        Ok(ProcessAgent {
            config: self.config.clone(),
            lane,
            tools,
            dir,
            run: None,
            processes: Vec::new(),
            refused: Vec::new(),
            turn_models: Vec::new(),
            outside_models: Vec::new(),
            scenario_id: scenario.id.clone(),
        })
    }
}

/// What a process's output threads report.
#[derive(Debug)]
enum Out {
    /// One stdout line (session mode), or why reading stopped.
    Line(Result<String, String>),
    /// All of stdout (one-shot mode), or why reading stopped.
    Whole(Result<Vec<u8>, String>),
    /// The process's stdout reached its end.
    Eof,
    /// The group leader exited (not yet reaped).
    Exited,
}

/// One agent process and its process group.
struct Proc {
    child: Child,
    pgid: i32,
    /// Its [`crate::procs`] tag: what it started carries it too, in any group or session.
    tag: String,
    /// What confined it.
    sandbox: windtunnel_model::SandboxRecord,
    turn: Option<u32>,
    stderr: Arc<Mutex<Tail>>,
    stderr_done: Receiver<()>,
    killed: Option<String>,
    reaped: bool,
}

enum StdoutMode {
    Lines(usize),
    Whole(usize),
    /// Read and dropped (a served agent's logs go nowhere but its stderr tail).
    Drain,
}

impl Proc {
    /// Starts `argv` in a new process group; stdout and stderr are read on threads that
    /// report to `tx`.
    fn spawn(
        argv: &[String],
        env: &[(String, String)],
        piped_stdin: bool,
        stdout: StdoutMode,
        turn: Option<u32>,
        tx: &Sender<Inbox<Out>>,
        sandbox: crate::sandbox::Confinement,
    ) -> std::io::Result<(Proc, Option<std::process::ChildStdin>)> {
        let (tag_env, tag) = crate::procs::new_tag();
        let record = sandbox.record();
        let mut cmd = Command::new(&argv[0]);
        sandbox.install(&mut cmd);
        cmd.args(&argv[1..])
            .env_clear()
            .envs(env.iter().map(|(k, v)| (k, v)))
            .env(tag_env, &tag)
            .stdin(if piped_stdin {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        let mut live = live_groups();
        let mut child = cmd.spawn()?;
        let pgid = i32::try_from(child.id()).unwrap_or(i32::MAX);
        live.push(pgid);
        drop(live);
        let stdin = child.stdin.take();
        let out = child.stdout.take().expect("stdout is piped");
        let err = child.stderr.take().expect("stderr is piped");
        let tx_out = tx.clone();
        std::thread::Builder::new()
            .name("wt-agent-stdout".into())
            .spawn(move || read_stdout(out, stdout, &tx_out))?;
        let stderr = Arc::new(Mutex::new(Tail::default()));
        let (done_tx, stderr_done) = mpsc::channel();
        let tail = stderr.clone();
        std::thread::Builder::new()
            .name("wt-agent-stderr".into())
            .spawn(move || {
                read_tail(err, &tail);
                let _ = done_tx.send(());
            })?;
        let tx_exit = tx.clone();
        std::thread::Builder::new()
            .name("wt-agent-wait".into())
            .spawn(move || {
                // Observes the exit without reaping: the group id stays reserved until the
                // owner has killed the group and reaped the leader.
                let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT;
                while let Err(nix::errno::Errno::EINTR) =
                    waitid(Id::Pid(Pid::from_raw(pgid)), flags)
                {}
                let _ = tx_exit.send(Inbox::Agent(Out::Exited));
            })?;
        Ok((
            Proc {
                child,
                pgid,
                tag,
                sandbox: record,
                turn,
                stderr,
                stderr_done,
                killed: None,
                reaped: false,
            },
            stdin,
        ))
    }

    /// Has the leader exited (it is not reaped here)?
    fn exited(&self) -> bool {
        let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT | WaitPidFlag::WNOHANG;
        !matches!(
            waitid(Id::Pid(Pid::from_raw(self.pgid)), flags),
            Ok(WaitStatus::StillAlive)
        )
    }

    /// Kills the whole group, remembering the first reason.
    fn kill(&mut self, why: &str) {
        if self.killed.is_none() && !self.exited() {
            self.killed = Some(why.to_owned());
        }
        self.kill_group();
    }

    fn kill_group(&self) {
        if !self.reaped {
            // ESRCH (the group is already empty) is the expected case after a clean exit.
            let _ = killpg(Pid::from_raw(self.pgid), Signal::SIGKILL);
        }
    }

    /// Kills what is left of the group, and whatever the agent started that left it, reaps
    /// the leader and says how it ended.
    fn finish(mut self) -> AgentProcess {
        self.kill_group();
        crate::procs::kill_tagged(&self.tag);
        let status = self.child.wait();
        self.reaped = true;
        unregister(self.pgid);
        // The stderr thread ends once every writer is gone; a process that left the group
        // (setsid) may keep it open, so the wait is bounded.
        let _ = self.stderr_done.recv_timeout(Duration::from_millis(200));
        let tail = lock(&self.stderr);
        let (exit, code) = match (&self.killed, status) {
            (Some(why), _) => (format!("killed by wt ({why})"), None),
            (None, Ok(s)) => match (s.code(), s.signal()) {
                (Some(c), _) => (format!("exited with status {c}"), Some(c)),
                (None, Some(sig)) => (format!("killed by signal {sig}"), None),
                _ => ("ended".to_owned(), None),
            },
            (None, Err(e)) => (format!("cannot be waited for: {e}"), None),
        };
        let mut record = AgentProcess::default();
        record.turn = self.turn;
        record.exit = exit;
        record.status = code;
        record.killed = self.killed.clone();
        record.stderr_tail = tail.text();
        record.stderr_bytes = tail.total;
        record.sandbox = Some(self.sandbox.clone());
        record
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if !self.reaped {
            self.kill_group();
            crate::procs::kill_tagged(&self.tag);
            let _ = self.child.wait();
            unregister(self.pgid);
        }
    }
}

fn unregister(pgid: i32) {
    let mut live = LIVE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    live.retain(|g| *g != pgid);
}

/// Reads and drops what the agent still writes, until its stdout closes: after a protocol
/// error `wt` kills the agent's group, and the record says so — the agent must not die first
/// of a broken pipe.
fn drain(reader: &mut impl Read) {
    let _ = std::io::copy(reader, &mut std::io::sink());
}

fn not_utf8(e: std::str::Utf8Error) -> String {
    format!(
        "stdout is not valid UTF-8 (after {} bytes): the reply cannot be read",
        e.valid_up_to()
    )
}

fn read_stdout(out: std::process::ChildStdout, mode: StdoutMode, tx: &Sender<Inbox<Out>>) {
    let send = |o: Out| tx.send(Inbox::Agent(o)).is_ok();
    match mode {
        StdoutMode::Lines(max) => {
            let mut reader = std::io::BufReader::new(out);
            let mut line = Vec::new();
            loop {
                line.clear();
                let limit = u64::try_from(max).unwrap_or(u64::MAX).saturating_add(1);
                match (&mut reader).take(limit).read_until(b'\n', &mut line) {
                    Ok(0) => break,
                    Ok(_) if line.len() > max && line.last() != Some(&b'\n') => {
                        send(Out::Line(Err(format!(
                            "a stdout line is longer than {max} bytes (max_response_bytes)"
                        ))));
                        drain(&mut reader);
                        return;
                    }
                    Ok(_) => {
                        // A reply that is not UTF-8 cannot be read as the agent meant it: a
                        // protocol error, as over http, never a lossy guess that is judged.
                        let text = match std::str::from_utf8(&line) {
                            Ok(t) => t,
                            Err(e) => {
                                send(Out::Line(Err(not_utf8(e))));
                                drain(&mut reader);
                                return;
                            }
                        };
                        let text = text.trim_end_matches(['\n', '\r']);
                        if !text.trim().is_empty() && !send(Out::Line(Ok(text.to_owned()))) {
                            return;
                        }
                    }
                    Err(e) => {
                        send(Out::Line(Err(format!("reading stdout: {e}"))));
                        return;
                    }
                }
            }
        }
        StdoutMode::Drain => drain(&mut std::io::BufReader::new(out)),
        StdoutMode::Whole(max) => {
            let mut all = Vec::new();
            let limit = u64::try_from(max).unwrap_or(u64::MAX).saturating_add(1);
            let r = out.take(limit).read_to_end(&mut all);
            let msg = match r {
                Ok(_) if all.len() > max => Err(format!(
                    "stdout is longer than {max} bytes (max_response_bytes)"
                )),
                Ok(_) => Ok(all),
                Err(e) => Err(format!("reading stdout: {e}")),
            };
            let failed = msg.is_err();
            send(Out::Whole(msg));
            if failed {
                return;
            }
        }
    }
    send(Out::Eof);
}

/// A run in progress on a handle.
struct LiveRun {
    info: RunInfo,
    mcp: Option<McpRun>,
    mcp_config: Option<PathBuf>,
    deadline: Option<Instant>,
    /// Session mode: the run's process, its stdin's writer, and its events.
    session: Option<Session>,
    /// The run's own directory (`WT_RUN_DIR`, its `TMPDIR` beneath): where a confined agent
    /// may write; removed when the run ends.
    scratch: tempfile::TempDir,
    /// The port a served agent listens on.
    port: Option<u16>,
}

struct Session {
    proc: Option<Proc>,
    lines: Option<Sender<String>>,
    tx: Sender<Inbox<Out>>,
    rx: Receiver<Inbox<Out>>,
    /// Set once stdout ended or the process exited: no turn can be answered any more.
    gone: Option<String>,
}

pub(crate) struct ProcessAgent {
    config: Arc<Config>,
    lane: Option<mcp::Lane>,
    tools: Option<Arc<ToolSet>>,
    dir: tempfile::TempDir,
    run: Option<LiveRun>,
    /// Processes of the current run that have ended.
    processes: Vec<AgentProcess>,
    /// Tool calls of the current run refused and not yet taken.
    refused: Vec<super::RefusedCall>,
    /// The model calls of the turn being answered.
    turn_models: Vec<ModelCall>,
    /// Model calls of the run that no turn took.
    outside_models: Vec<ModelCall>,
    /// The scenario this handle serves (in each session-mode turn line).
    scenario_id: String,
}

/// Why a wait for the agent ended early.
enum Stop {
    Deadline(&'static str),
    Cut,
}

impl Stop {
    /// The error of a model call this stop cut off.
    fn cuts_model_calls(&self) -> String {
        match self {
            Stop::Deadline(why) => format!("timed out: the {why} came before the reply"),
            Stop::Cut => "interrupted: wt was stopped before the reply came".to_owned(),
        }
    }
}

impl ProcessAgent {
    fn substitute(&self, run: &LiveRun, input: Option<(&str, u32)>) -> Vec<String> {
        self.config
            .command
            .iter()
            .map(|arg| {
                let mut a = arg.clone();
                if let Some((text, turn)) = input {
                    a = a.replace("{turn}", &turn.to_string());
                    // Last: the text itself may contain anything, placeholders included.
                    a = replace_placeholders(&a, run, Some(text));
                } else {
                    a = replace_placeholders(&a, run, None);
                }
                a
            })
            .collect()
    }

    fn env(&self, run: &LiveRun, turn: Option<u32>) -> Vec<(String, String)> {
        let mut env = self.config.env.clone();
        if let Some(m) = &run.mcp {
            if m.serves_mcp() {
                env.push(("WT_MCP_URL".into(), m.url().to_owned()));
            }
            if let Some(url) = m.model_url() {
                env.push(("WT_MODEL_URL".into(), url.to_owned()));
                env.push(("WT_MODEL_TOKEN".into(), m.model_token().to_owned()));
                let gateway = self.config.gateway.as_ref();
                if gateway.is_some_and(|g| g.openai_env) {
                    env.push(("OPENAI_BASE_URL".into(), url.to_owned()));
                    env.push(("OPENAI_API_KEY".into(), m.model_token().to_owned()));
                }
                if gateway.is_some_and(|g| g.anthropic_env) {
                    // Anthropic's clients add `/v1/messages` to their base URL.
                    let base = url.strip_suffix("/v1").unwrap_or(url);
                    env.push(("ANTHROPIC_BASE_URL".into(), base.to_owned()));
                    env.push(("ANTHROPIC_API_KEY".into(), m.model_token().to_owned()));
                }
            }
        }
        let scratch = run.scratch.path();
        env.push(("WT_RUN_DIR".into(), scratch.display().to_string()));
        let tmp = scratch.join("tmp").display().to_string();
        for var in ["TMPDIR", "TMP", "TEMP"] {
            env.retain(|(k, _)| k != var);
            env.push((var.into(), tmp.clone()));
        }
        if let Some(port) = run.port {
            env.push((PORT_ENV.into(), port.to_string()));
        }
        env.push(("WT_RUN_ID".into(), run.info.run_id.clone()));
        env.push(("WT_SESSION_ID".into(), run.info.session_id.clone()));
        if let Some(t) = turn {
            env.push(("WT_TURN".into(), t.to_string()));
        }
        env
    }

    /// The confinement of one of the run's processes: it writes the run's directory (and its
    /// `state_dir`), reads the system, its command, `wt`'s working directory and the lane's
    /// files, and connects to the run's MCP endpoint and model gateway only.
    fn confinement(
        &self,
        run: &LiveRun,
        argv: &[String],
        env: &[(String, String)],
    ) -> Result<crate::sandbox::Confinement, RuntimeError> {
        let path_var = env
            .iter()
            .rev()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| std::ffi::OsStr::new(v.as_str()));
        let read = [self.config.cwd.clone(), self.dir.path().to_path_buf()];
        let mut write = vec![run.scratch.path().to_path_buf()];
        if let Some(dir) = &self.config.state_dir {
            // The agent keeps its state there: a rule needs the directory to exist, and a
            // confined agent could not make it.
            let _ = std::fs::create_dir_all(dir);
            write.push(dir.clone());
        }
        let ports: Vec<u16> = run
            .mcp
            .iter()
            .flat_map(|m| [Some(m.url()), m.model_url()])
            .flatten()
            .filter_map(crate::sandbox::port_of)
            .collect();
        let bind: Vec<u16> = run.port.into_iter().collect();
        crate::sandbox::confine(&crate::sandbox::Request {
            role: crate::sandbox::Role::Agent,
            argv,
            path_var,
            read: &read,
            write: &write,
            ports: &ports,
            bind: &bind,
            settings: &self.config.sandbox,
        })
        .map_err(RuntimeError)
    }

    fn start(&mut self, info: &RunInfo) -> Result<(), RuntimeError> {
        self.finish_run();
        let mcp = match &self.lane {
            Some(lane) => Some(
                lane.start_run(self.tools.clone())
                    .map_err(|e| RuntimeError(e.to_string()))?,
            ),
            None => None,
        };
        let wants_config = self
            .config
            .command
            .iter()
            .any(|a| placeholders(a).contains(&"mcp_config"));
        let mcp_config = match (&mcp, wants_config) {
            (Some(m), true) if m.serves_mcp() => {
                let path = self.dir.path().join(format!("run-{}.mcp.json", info.index));
                let doc = json!({"mcpServers": {"wt": {"type": "http", "url": m.url()}}});
                crate::store::write_json(&path, &doc)
                    .map_err(|e| RuntimeError(format!("write the run's MCP config: {e}")))?;
                Some(path)
            }
            _ => None,
        };
        let scratch = tempfile::Builder::new()
            .prefix(&format!("run-{}-", info.index))
            .tempdir_in(self.dir.path())
            .and_then(|d| std::fs::create_dir(d.path().join("tmp")).map(|()| d))
            .map_err(|e| RuntimeError(format!("create the run's directory: {e}")))?;
        let port = match self.config.mode {
            Mode::Server => Some(free_port()?),
            _ => None,
        };
        let mut run = LiveRun {
            info: info.clone(),
            mcp,
            mcp_config,
            deadline: self.config.run_timeout.map(|d| Instant::now() + d),
            session: None,
            scratch,
            port,
        };
        if self.config.mode == Mode::Server {
            let (tx, rx) = mpsc::channel();
            let argv = self.substitute(&run, None);
            let env = self.env(&run, None);
            let sandbox = self.confinement(&run, &argv, &env)?;
            let (proc, _) = Proc::spawn(&argv, &env, false, StdoutMode::Drain, None, &tx, sandbox)
                .map_err(|e| {
                    RuntimeError(format!("cannot start the agent command `{}`: {e}", argv[0]))
                })?;
            run.session = Some(Session {
                proc: Some(proc),
                lines: None,
                tx,
                rx,
                gone: None,
            });
        }
        if self.config.mode == Mode::Session {
            let (tx, rx) = mpsc::channel();
            let argv = self.substitute(&run, None);
            let env = self.env(&run, None);
            let sandbox = self.confinement(&run, &argv, &env)?;
            let (proc, stdin) = Proc::spawn(
                &argv,
                &env,
                true,
                StdoutMode::Lines(self.config.max_output),
                None,
                &tx,
                sandbox,
            )
            .map_err(|e| {
                RuntimeError(format!("cannot start the agent command `{}`: {e}", argv[0]))
            })?;
            let (lines_tx, lines_rx) = mpsc::channel::<String>();
            if let Some(mut stdin) = stdin {
                std::thread::Builder::new()
                    .name("wt-agent-stdin".into())
                    .spawn(move || {
                        for line in lines_rx {
                            if stdin
                                .write_all(line.as_bytes())
                                .and_then(|()| stdin.flush())
                                .is_err()
                            {
                                return;
                            }
                        }
                    })
                    .map_err(|e| RuntimeError(format!("cannot start a thread: {e}")))?;
            }
            run.session = Some(Session {
                proc: Some(proc),
                lines: Some(lines_tx),
                tx,
                rx,
                gone: None,
            });
        }
        self.run = Some(run);
        Ok(())
    }

    /// Ends the current run: its MCP endpoint closes, its session process is asked to exit
    /// (stdin closed) and, after [`EXIT_GRACE`], its group killed.
    fn finish_run(&mut self) {
        let Some(mut run) = self.run.take() else {
            return;
        };
        // The run's MCP endpoint stays up while the agent exits (no turn is open, so no call
        // runs): a client may close its session politely.
        if let Some(mut s) = run.session.take() {
            drop(s.lines.take());
            if let Some(mut proc) = s.proc.take() {
                // A served agent never ends by itself: it is stopped at once.
                let grace = match self.config.mode {
                    Mode::Server => Duration::ZERO,
                    _ => EXIT_GRACE,
                };
                let until = Instant::now() + grace;
                while !proc.exited() && Instant::now() < until {
                    std::thread::sleep(Duration::from_millis(10));
                }
                if !proc.exited() {
                    proc.kill("end of run");
                }
                self.processes.push(proc.finish());
            }
        }
        if let Some(m) = run.mcp.take() {
            self.refused.extend(m.take_refused());
            m.cut_model_calls(mcp::RUN_ENDED_FIRST);
            self.outside_models.extend(m.take_model_calls());
        }
        if let Some(p) = run.mcp_config.take() {
            let _ = std::fs::remove_file(p);
        }
    }

    /// Waits for the agent: tool calls from the run's MCP endpoint are executed as they
    /// come, agent events go to `on_agent` until it returns a result.
    fn pump<R>(
        mcp: Option<&McpRun>,
        rx: &Receiver<Inbox<Out>>,
        ctx: &mut TurnCtx<'_>,
        calls: &mut Vec<ToolCall>,
        models: &mut Vec<ModelCall>,
        deadline: (Instant, &'static str),
        mut on_agent: impl FnMut(Out) -> Option<R>,
    ) -> Result<R, Stop> {
        loop {
            let left = deadline.0.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Stop::Deadline(deadline.1));
            }
            if ctx.stop.is_cut() {
                return Err(Stop::Cut);
            }
            match rx.recv_timeout(left.min(TICK)) {
                Ok(Inbox::Tool(req)) => match (mcp, mcp.map(|m| m.tools().clone())) {
                    (Some(_), Some(tools)) => {
                        let step = calls.len() as u32;
                        calls.push(mcp::execute(ctx, &tools, step, req));
                    }
                    _ => req.respond(mcp::ToolOutcome::Refused("no MCP for this agent".into())),
                },
                Ok(Inbox::Model(call)) => {
                    models.push(mcp::stamp_model(*call, ctx.index, calls.len()));
                }
                Ok(Inbox::Agent(out)) => {
                    if let Some(r) = on_agent(out) {
                        return Ok(r);
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    // Every sender is gone (cannot happen while the run holds one): treat
                    // it as the agent being gone.
                    if let Some(r) = on_agent(Out::Eof) {
                        return Ok(r);
                    }
                    std::thread::sleep(TICK);
                }
            }
        }
    }

    fn deadline(&self, ctx: &TurnCtx<'_>) -> (Instant, &'static str) {
        let turn = Instant::now() + ctx.timeout;
        match self.run.as_ref().and_then(|r| r.deadline) {
            Some(run) if run < turn => (run, "run timeout"),
            _ => (turn, "turn timeout"),
        }
    }

    fn send_session(&mut self, text: &str, mut ctx: TurnCtx<'_>) -> Reply {
        let index = ctx.index;
        let deadline = self.deadline(&ctx);
        let timeout_s = match deadline.1 {
            "run timeout" => self.config.run_timeout.unwrap_or_default(),
            _ => ctx.timeout,
        };
        let Some(run) = self.run.as_mut() else {
            return Reply::failed(TurnErrorKind::Agent, "no run in progress", Vec::new());
        };
        let Some(session) = run.session.as_mut() else {
            return Reply::failed(TurnErrorKind::Agent, "no agent process", Vec::new());
        };
        if let Some(gone) = &session.gone {
            return Reply::failed(
                TurnErrorKind::Agent,
                format!("turn {index}: the agent process is gone ({gone})"),
                Vec::new(),
            );
        }
        let line = json!({
            "type": "turn",
            "turn": index,
            "text": text,
            "session_id": run.info.session_id,
            "run_id": run.info.run_id,
            "scenario_id": self.scenario_id,
        });
        if let Some(m) = &run.mcp {
            m.open_turn(session.tx.clone());
        }
        let sent = session
            .lines
            .as_ref()
            .is_some_and(|l| l.send(format!("{line}\n")).is_ok());
        let mut calls = Vec::new();
        let mut models = Vec::new();
        let pgid = session.proc.as_ref().map(|p| p.pgid);
        let outcome = if sent {
            Self::pump(
                run.mcp.as_ref(),
                &session.rx,
                &mut ctx,
                &mut calls,
                &mut models,
                deadline,
                |out| match out {
                    Out::Line(Ok(l)) => session_line(&l, index),
                    Out::Line(Err(e)) => Some(Err((TurnErrorKind::Protocol, e))),
                    Out::Whole(_) => None,
                    Out::Exited => {
                        // The leader is gone (unreaped, so its group id is still its own):
                        // what it left running would keep stdout open.
                        if let Some(g) = pgid {
                            let _ = killpg(Pid::from_raw(g), Signal::SIGKILL);
                        }
                        None
                    }
                    // Lines the agent wrote before it went are read first.
                    Out::Eof => Some(Err((TurnErrorKind::Agent, String::new()))),
                },
            )
        } else {
            Ok(Err((TurnErrorKind::Agent, String::new())))
        };
        if let Some(m) = &run.mcp {
            if let Err(stop) = &outcome {
                m.cut_model_calls(&stop.cuts_model_calls());
            }
            m.close_turn();
            let late =
                mcp::refuse_pending(&session.rx, "refused: the turn ended before the call ran");
            models.extend(
                late.into_iter()
                    .map(|c| mcp::stamp_model(c, index, calls.len())),
            );
        }
        self.turn_models = models;
        match outcome {
            Ok(Ok(reply)) => Reply::text(reply, calls),
            Ok(Err((kind, message))) if message.is_empty() => {
                // The agent went away: say how, with its stderr.
                let how = session.proc.take().map(|p| {
                    // Give a dying process a moment to be observed exiting.
                    let until = Instant::now() + Duration::from_millis(500);
                    while !p.exited() && Instant::now() < until {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    p.finish()
                });
                let why = match &how {
                    Some(p) => format!(
                        "the agent process ended before replying to turn {index} ({}){}",
                        p.exit,
                        stderr_excerpt(p)
                    ),
                    None => format!("the agent process ended before replying to turn {index}"),
                };
                session.gone = Some("it ended".into());
                self.processes.extend(how);
                Reply::failed(kind, why, calls)
            }
            Ok(Err((kind, message))) => {
                if kind == TurnErrorKind::Protocol {
                    session.gone = Some(format!("protocol error: {message}"));
                    if let Some(p) = session.proc.as_mut() {
                        p.kill("protocol error");
                    }
                }
                Reply::failed(kind, format!("turn {index}: {message}"), calls)
            }
            Err(stop) => {
                let (kind, why, msg) = match stop {
                    Stop::Deadline(why) => (
                        TurnErrorKind::Timeout,
                        why,
                        format!(
                            "no reply within the {why} of {}; the agent's process group was killed",
                            crate::deadlines::human(timeout_s)
                        ),
                    ),
                    Stop::Cut => (
                        TurnErrorKind::Interrupted,
                        "interrupted",
                        "interrupted: wt was stopped; the agent's process group was killed"
                            .to_owned(),
                    ),
                };
                if let Some(mut p) = session.proc.take() {
                    p.kill(why);
                    self.processes.push(p.finish());
                }
                session.gone = Some(format!("killed at the {why}"));
                Reply::failed(kind, msg, calls)
            }
        }
    }

    fn send_one_shot(&mut self, text: &str, mut ctx: TurnCtx<'_>) -> Reply {
        let index = ctx.index;
        let deadline = self.deadline(&ctx);
        let timeout_s = match deadline.1 {
            "run timeout" => self.config.run_timeout.unwrap_or_default(),
            _ => ctx.timeout,
        };
        let Some(run) = self.run.as_ref() else {
            return Reply::failed(TurnErrorKind::Agent, "no run in progress", Vec::new());
        };
        let argv = self.substitute(run, Some((text, index)));
        let env = self.env(run, Some(index));
        let (tx, rx) = mpsc::channel();
        let sandbox = match self.confinement(run, &argv, &env) {
            Ok(s) => s,
            Err(e) => return Reply::failed(TurnErrorKind::Agent, e.0, Vec::new()),
        };
        let (mut proc, _) = match Proc::spawn(
            &argv,
            &env,
            false,
            StdoutMode::Whole(self.config.max_output),
            Some(index),
            &tx,
            sandbox,
        ) {
            Ok(p) => p,
            Err(e) => {
                return Reply::failed(
                    TurnErrorKind::Agent,
                    format!("cannot start the agent command `{}`: {e}", argv[0]),
                    Vec::new(),
                );
            }
        };
        let pgid = proc.pgid;
        if let Some(m) = &run.mcp {
            m.open_turn(tx.clone());
        }
        drop(tx);
        let mut calls = Vec::new();
        let mut models = Vec::new();
        let mut stdout: Option<Result<Vec<u8>, String>> = None;
        let mut exited = false;
        let outcome = Self::pump(
            run.mcp.as_ref(),
            &rx,
            &mut ctx,
            &mut calls,
            &mut models,
            deadline,
            |out| {
                match out {
                    Out::Whole(r) => {
                        let failed = r.is_err();
                        stdout = Some(r);
                        if failed {
                            return Some(());
                        }
                    }
                    Out::Exited => {
                        exited = true;
                        // Whatever the agent left running would hold stdout open.
                        let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
                    }
                    Out::Eof | Out::Line(_) => {}
                }
                (exited && stdout.is_some()).then_some(())
            },
        );
        if let Some(m) = &run.mcp {
            if let Err(stop) = &outcome {
                m.cut_model_calls(&stop.cuts_model_calls());
            }
            m.close_turn();
            let late = mcp::refuse_pending(&rx, "refused: the turn ended before the call ran");
            models.extend(
                late.into_iter()
                    .map(|c| mcp::stamp_model(c, index, calls.len())),
            );
        }
        self.turn_models = models;
        let stop = outcome.err();
        match &stop {
            Some(Stop::Deadline(why)) => proc.kill(why),
            Some(Stop::Cut) => proc.kill("interrupted"),
            None => {}
        }
        if matches!(stdout, Some(Err(_))) {
            proc.kill("protocol error");
        }
        let record = proc.finish();
        let reply = match (stop, stdout) {
            (Some(Stop::Deadline(why)), _) => Reply::failed(
                TurnErrorKind::Timeout,
                format!(
                    "no reply within the {why} of {}; the agent's process group was killed{}",
                    crate::deadlines::human(timeout_s),
                    stderr_excerpt(&record)
                ),
                calls,
            ),
            (Some(Stop::Cut), _) => Reply::failed(
                TurnErrorKind::Interrupted,
                "interrupted: wt was stopped; the agent's process group was killed",
                calls,
            ),
            (None, Some(Err(e))) => Reply::failed(TurnErrorKind::Protocol, e, calls),
            (None, out) if record.status != Some(0) => Reply::failed(
                TurnErrorKind::Agent,
                format!(
                    "the agent {}{}{}",
                    record.exit,
                    stderr_excerpt(&record),
                    match out {
                        Some(Ok(b)) if !b.is_empty() => format!(
                            "; stdout: {}",
                            crate::score::excerpt(&String::from_utf8_lossy(&b))
                        ),
                        _ => String::new(),
                    }
                ),
                calls,
            ),
            (None, out) => {
                let bytes = match out {
                    Some(Ok(b)) => b,
                    _ => Vec::new(),
                };
                match self.one_shot_reply(&bytes) {
                    Ok(text) => Reply::text(text, calls),
                    Err(e) => Reply::failed(TurnErrorKind::Protocol, e, calls),
                }
            }
        };
        self.processes.push(record);
        reply
    }

    fn one_shot_reply(&self, stdout: &[u8]) -> Result<String, String> {
        let text = std::str::from_utf8(stdout).map_err(not_utf8)?;
        let Some(field) = &self.config.reply_field else {
            return Ok(text.trim_end_matches(['\n', '\r']).to_owned());
        };
        let doc: Value = serde_json::from_str(text.trim()).map_err(|e| {
            format!(
                "stdout is not JSON ({e}), but `reply_field` = {field:?} expects it: {}",
                crate::score::excerpt(text)
            )
        })?;
        match crate::world::lookup(&doc, field) {
            Some(Value::String(s)) => Ok(s.clone()),
            Some(other) => Err(format!(
                "`{field}` in the agent's stdout is not a string: {}",
                crate::score::excerpt(&other.to_string())
            )),
            None => Err(format!(
                "the agent's stdout has no `{field}` (reply_field): {}",
                crate::score::excerpt(text)
            )),
        }
    }
}

fn replace_placeholders(arg: &str, run: &LiveRun, input: Option<&str>) -> String {
    // One pass, so a substituted value is never scanned for placeholders again.
    let mut out = String::with_capacity(arg.len());
    let mut rest = arg;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let name = after.find('}').map(|close| &after[..close]);
        let value = match name {
            Some("input") => input.map(str::to_owned),
            Some("mcp_config") => run.mcp_config.as_ref().map(|p| p.display().to_string()),
            Some("session_id") => Some(run.info.session_id.clone()),
            Some("port") => run.port.map(|p| p.to_string()),
            Some("run_id") => Some(run.info.run_id.clone()),
            Some("model_url") => run
                .mcp
                .as_ref()
                .and_then(|m| m.model_url())
                .map(str::to_owned),
            _ => None,
        };
        match (name, value) {
            (Some(n), Some(v)) => {
                out.push_str(&v);
                rest = &after[n.len() + 1..];
            }
            _ => {
                out.push('{');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// One stdout line of a session process: `Some` when it ends the turn.
fn session_line(line: &str, turn: u32) -> Option<Result<String, (TurnErrorKind, String)>> {
    let protocol = |why: String| Some(Err((TurnErrorKind::Protocol, why)));
    let v: Value = match serde_json::from_str(line) {
        Ok(v @ Value::Object(_)) => v,
        Ok(_) | Err(_) => {
            return protocol(format!(
                "stdout line is not a JSON object (logs belong on stderr): {}",
                crate::score::excerpt(line)
            ));
        }
    };
    let kind = v.get("type").and_then(Value::as_str).unwrap_or_default();
    if !matches!(kind, "reply" | "error") {
        // Other types (progress, logs) are allowed and ignored.
        return None;
    }
    if let Some(t) = v.get("turn")
        && t.as_u64() != Some(u64::from(turn))
    {
        return protocol(format!("answered turn {t}, expected {turn}"));
    }
    match kind {
        "reply" => match v.get("text") {
            Some(Value::String(s)) => Some(Ok(s.clone())),
            _ => protocol(format!(
                "a reply without a string `text`: {}",
                crate::score::excerpt(line)
            )),
        },
        _ => {
            let message = v
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("(no message)");
            Some(Err((
                TurnErrorKind::Agent,
                format!("the agent reported an error: {message}"),
            )))
        }
    }
}

fn stderr_excerpt(p: &AgentProcess) -> String {
    if p.stderr_tail.trim().is_empty() {
        String::new()
    } else {
        format!("; stderr (last bytes): {}", p.stderr_tail.trim_end())
    }
}

/// A free loopback port, for a served agent to listen on: bound and released, so the agent
/// can take it (another process taking it first makes the agent fail to start, plainly). It
/// is drawn at random below the kernel's range for the ports of outgoing connections, so a
/// client connecting anywhere on the machine in the meantime cannot be given it; when that
/// range leaves no room below it, the kernel picks one.
fn free_port() -> Result<u16, RuntimeError> {
    use std::hash::{BuildHasher, Hasher};
    const FLOOR: u16 = 10_000;
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32_768);
    if low > FLOOR + 1_000 {
        let span = u64::from(low - FLOOR);
        let seed = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish();
        for i in 0..32u64 {
            let port = FLOOR + (seed.wrapping_add(i.wrapping_mul(7_919)) % span) as u16;
            if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
                return Ok(port);
            }
        }
    }
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| RuntimeError(format!("cannot find a free port for the agent: {e}")))
}

/// What a served agent's runtime asks of its run.
impl ProcessAgent {
    /// The port the run's agent listens on.
    pub(crate) fn port(&self) -> Option<u16> {
        self.run.as_ref().and_then(|r| r.port)
    }

    /// The run's MCP endpoint.
    pub(crate) fn mcp_run(&self) -> Option<&McpRun> {
        self.run.as_ref().and_then(|r| r.mcp.as_ref())
    }

    /// Why the run's served agent can answer no more, if it cannot: it exited (how, and its
    /// stderr's last line).
    pub(crate) fn server_gone(&mut self) -> Option<String> {
        let s = self.run.as_mut()?.session.as_mut()?;
        if let Some(gone) = &s.gone {
            return Some(gone.clone());
        }
        let exited = s.proc.as_ref().is_some_and(Proc::exited);
        if !exited {
            return None;
        }
        let proc = s.proc.take()?;
        let record = proc.finish();
        let why = format!(
            "the agent process {}{}",
            record.exit,
            stderr_excerpt(&record)
        );
        self.processes.push(record);
        s.gone = Some(why.clone());
        Some(why)
    }
}

impl AgentHandle for ProcessAgent {
    fn reset_state(&mut self) -> Result<(), RuntimeError> {
        // Every run gets a fresh process; nothing of an earlier one may survive.
        self.finish_run();
        self.processes.clear();
        self.refused.clear();
        Ok(())
    }

    fn begin_run(&mut self, run: &RunInfo) -> Result<(), RuntimeError> {
        self.start(run)
    }

    fn send(&mut self, session_id: &str, text: &str, ctx: TurnCtx<'_>) -> Reply {
        if self
            .run
            .as_ref()
            .is_none_or(|r| r.info.session_id != session_id)
        {
            // A caller that starts no run (or another session) gets one started here.
            let info = RunInfo {
                run_id: session_id.to_owned(),
                session_id: session_id.to_owned(),
                index: 0,
            };
            if let Err(e) = self.start(&info) {
                return Reply::failed(TurnErrorKind::Agent, e.0, Vec::new());
            }
        }
        let mut reply = match self.config.mode {
            Mode::Session => self.send_session(text, ctx),
            Mode::OneShot => self.send_one_shot(text, ctx),
            Mode::Server => Reply::failed(
                TurnErrorKind::Agent,
                "a served agent is spoken to over the network, not its stdin",
                Vec::new(),
            ),
        };
        reply.model_calls = std::mem::take(&mut self.turn_models);
        reply
    }

    fn end_run(&mut self) -> RunEnd {
        self.finish_run();
        RunEnd {
            processes: std::mem::take(&mut self.processes),
            refused: std::mem::take(&mut self.refused),
            model_calls: std::mem::take(&mut self.outside_models),
            a2a: None,
        }
    }

    fn take_refused(&mut self) -> Vec<super::RefusedCall> {
        let mut refused = std::mem::take(&mut self.refused);
        if let Some(m) = self.run.as_ref().and_then(|r| r.mcp.as_ref()) {
            refused.extend(m.take_refused());
        }
        refused
    }

    fn probe_state(&mut self) -> Option<Value> {
        let dir = self.config.state_dir.as_ref()?;
        Some(state_listing(dir))
    }

    fn teardown(&mut self) -> Result<(), RuntimeError> {
        self.finish_run();
        self.processes.clear();
        Ok(())
    }
}

impl Drop for ProcessAgent {
    fn drop(&mut self) {
        self.finish_run();
    }
}

/// Most files a state listing names.
const STATE_MAX_FILES: usize = 1000;
/// Files larger than this are listed by size only.
const STATE_MAX_HASHED: u64 = 1 << 20;

/// The state directory as the state probe shows it: each file's path, size and SHA-256.
fn state_listing(dir: &std::path::Path) -> Value {
    use sha2::Digest;
    let mut files = serde_json::Map::new();
    let mut stack = vec![dir.to_path_buf()];
    let mut more = false;
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        let mut entries: Vec<_> = entries.filter_map(Result::ok).collect();
        entries.sort_by_key(std::fs::DirEntry::path);
        for e in entries {
            let path = e.path();
            let Ok(meta) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            if meta.is_dir() {
                stack.push(path);
                continue;
            }
            if files.len() >= STATE_MAX_FILES {
                more = true;
                break;
            }
            let rel = path
                .strip_prefix(dir)
                .unwrap_or(&path)
                .display()
                .to_string();
            let mut entry = json!({"bytes": meta.len()});
            if meta.is_file()
                && meta.len() <= STATE_MAX_HASHED
                && let Ok(bytes) = std::fs::read(&path)
            {
                let hash = sha2::Sha256::digest(&bytes);
                entry["sha256"] =
                    json!(hash.iter().map(|b| format!("{b:02x}")).collect::<String>());
            }
            files.insert(rel, entry);
        }
    }
    files.sort_keys();
    let mut doc = json!({"state_dir": dir.display().to_string(), "files": files});
    if more {
        doc["truncated_at"] = json!(STATE_MAX_FILES);
    }
    if !dir.exists() {
        doc["missing"] = json!(true);
    }
    doc
}

fn lock<T: ?Sized>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent(command: &[&str]) -> super::super::agent::Process {
        super::super::agent::Process {
            command: Some(command.iter().map(|s| (*s).to_owned()).collect()),
            ..Default::default()
        }
    }

    #[test]
    fn placeholders_are_found_and_checked() {
        assert_eq!(placeholders("--p={input}x{turn}"), ["input", "turn"]);
        assert!(placeholders("{\"a\": 1}").is_empty());
        assert!(validate(&agent(&["a", "{input}"])).is_ok());
        let e = validate(&agent(&["a", "{inpt}"])).unwrap_err();
        assert!(e.contains("{inpt}"), "{e}");
        let e = validate(&agent(&["a", "{turn}"])).unwrap_err();
        assert!(e.contains("one-shot"), "{e}");
        let e = validate(&agent(&[])).unwrap_err();
        assert!(e.contains("`command`"), "{e}");
        let mut a = agent(&["a", "{mcp_config}"]);
        a.mcp = Some(false);
        assert!(validate(&a).unwrap_err().contains("mcp = false"));
        let mut a = agent(&["a"]);
        a.env = Some(BTreeMap::from([("WT_RUN_ID".into(), "x".into())]));
        assert!(validate(&a).unwrap_err().contains("set by wt"));
        let mut a = agent(&["a"]);
        a.reply_field = Some("x".into());
        assert!(validate(&a).unwrap_err().contains("one-shot"));
        // {port} is a served agent's; {input} is not.
        let a = agent(&["srv", "--port={port}"]);
        assert!(
            validate(&a)
                .unwrap_err()
                .contains("a2a agent's placeholder")
        );
        assert!(validate_for(&a, true).is_ok());
        let a = agent(&["srv", "{input}"]);
        assert!(validate_for(&a, true).unwrap_err().contains("no place"));
    }

    #[test]
    fn substitution_is_one_pass() {
        let run = LiveRun {
            info: RunInfo {
                run_id: "r1".into(),
                session_id: "s1".into(),
                index: 0,
            },
            mcp: None,
            mcp_config: Some(PathBuf::from("/tmp/c.json")),
            deadline: None,
            session: None,
            scratch: tempfile::tempdir().unwrap(),
            port: Some(4242),
        };
        assert_eq!(
            replace_placeholders("-p={input}/{session_id}", &run, Some("say {session_id}")),
            "-p=say {session_id}/s1"
        );
        assert_eq!(
            replace_placeholders("{mcp_config}{x", &run, None),
            "/tmp/c.json{x"
        );
        assert_eq!(
            replace_placeholders("--port={port}", &run, None),
            "--port=4242"
        );
    }

    #[test]
    fn session_lines() {
        assert_eq!(
            session_line(r#"{"type":"reply","turn":0,"text":"hi"}"#, 0),
            Some(Ok("hi".into()))
        );
        assert_eq!(session_line(r#"{"type":"log","msg":"x"}"#, 0), None);
        assert!(matches!(
            session_line("hello", 0),
            Some(Err((TurnErrorKind::Protocol, _)))
        ));
        assert!(matches!(
            session_line(r#"{"type":"reply","turn":1,"text":"hi"}"#, 0),
            Some(Err((TurnErrorKind::Protocol, _)))
        ));
        assert!(matches!(
            session_line(r#"{"type":"error","message":"no"}"#, 0),
            Some(Err((TurnErrorKind::Agent, _)))
        ));
    }

    #[test]
    fn stderr_tail_keeps_the_last_bytes() {
        let mut t = Tail::default();
        t.bytes.extend("é".repeat(3000).bytes());
        t.total = 6000;
        let excess = t.bytes.len() - crate::procs::STDERR_TAIL_BYTES;
        t.bytes.drain(..excess);
        let text = t.text();
        let rest = text.strip_prefix('…').expect("a cut tail says so");
        assert!(rest.len() <= crate::procs::STDERR_TAIL_BYTES && rest.chars().all(|c| c == 'é'));
    }
}
