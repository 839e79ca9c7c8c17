//! The event stream: what happened in a sweep, as JSON lines.
//!
//! Durable: `<sweep_stem>.events.jsonl` in the runs directory, created new (never appended
//! to, never through a symlink): the sweep's stem is unique per sweep, and a stem already
//! taken in the directory is not reused. Each event is one line, written with a single
//! `write(2)` to a file opened for appending, so a sweep killed at any point (even with
//! SIGKILL) leaves a journal whose every line parses. Live: the same lines go to
//! `wt run --events -` (stdout) or `--events FILE` as they happen.
//!
//! Every event carries the schema version, a per-sweep sequence number (gapless, in file
//! order), a timestamp, the sweep/scenario/run/session ids and turn/step indexes where they
//! apply, and a cause: a scenario turn, or the `converse` of the hook named. Consumers must
//! not assume any hook was installed; hooks cannot replace or alter events. The schema is
//! documented in `docs/events.md`.

use std::{
    fs::File,
    io::Write,
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
};

use serde::Serialize;
use serde_json::Value;
use windtunnel_model::{Score, Trace, TurnErrorKind};

/// Takes an advisory lock on `file` (`flock`, exclusive or shared) without waiting:
/// `Ok(false)` when another open file holds a lock that conflicts. Released when the file is
/// closed, however the process ends.
pub(crate) fn try_lock_file(file: &std::fs::File, exclusive: bool) -> std::io::Result<bool> {
    let locked = if exclusive {
        file.try_lock()
    } else {
        file.try_lock_shared()
    };
    match locked {
        Ok(()) => Ok(true),
        Err(std::fs::TryLockError::WouldBlock) => Ok(false),
        Err(std::fs::TryLockError::Error(e)) => Err(e),
    }
}

/// What a sweep is, as `SweepStarted` records it: a resumed sweep must be the same one.
/// Two sweeps with the same identity make the same runs (with `--seed`, the same run ids).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct SweepIdentity {
    /// `sha256:<hex>` of the pack's name, each scenario's content digest (in order) and
    /// each of its models' identity.
    pub pack_digest: String,
    /// `sha256:<hex>` of the whole agent config (the label is `agent`).
    pub agent_digest: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// `--runs` (or `--max-runs` with `--until-decided`), when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runs: Option<u32>,
    /// `--filter`, when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub until_decided: bool,
}

/// Version of the event schema.
pub const EVENTS_SCHEMA_VERSION: u32 = 1;

/// The events, with their own fields.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "event")]
pub enum Event {
    SweepStarted {
        pack: String,
        agent: String,
        scenarios: usize,
        hooks: Vec<String>,
        /// The policy revision in force, when guards are active.
        #[serde(skip_serializing_if = "Option::is_none")]
        policy_revision: Option<String>,
        /// Lanes run at once (`--jobs`).
        jobs: usize,
        /// `K/N` when the sweep is one shard of a larger one.
        #[serde(skip_serializing_if = "Option::is_none")]
        shard: Option<String>,
        /// What makes the sweep the sweep it is (`wt run --resume` holds a resume to it);
        /// the runner always records it.
        #[serde(flatten)]
        identity: Option<SweepIdentity>,
        /// `wt run --resume`: the how-manieth resumption of the sweep this segment of its
        /// journal is (1 for the first); absent from the sweep's first segment.
        #[serde(skip_serializing_if = "Option::is_none")]
        resumed: Option<u32>,
    },
    ScenarioStarted {
        runs: u32,
    },
    RunStarted {
        run_index: u32,
        /// The attempt this is, from 2 on, when `--retry-errors` makes the run again.
        #[serde(skip_serializing_if = "Option::is_none")]
        attempt: Option<u32>,
    },
    /// The run's attempt ended ERROR on the wiring or harness rung and the run is made
    /// again (`--retry-errors`) after `wait_ms`, as attempt `attempt`.
    RunRetried {
        attempt: u32,
        error: String,
        wait_ms: u64,
    },
    TurnStarted {
        input: String,
    },
    /// A tool call the agent made during a turn.
    StepDone {
        tool: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        /// The world server that executed the call, when one did.
        #[serde(skip_serializing_if = "Option::is_none")]
        server: Option<String>,
    },
    /// A model call of the turn (the `openai` runtime's own, or an agent's through its
    /// model gateway).
    ModelCalled {
        #[serde(skip_serializing_if = "Option::is_none")]
        model: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        finish_reason: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        prompt_tokens: Option<u64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        completion_tokens: Option<u64>,
        latency_ms: u64,
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// A request of the turn waited for the endpoint's limits before it was sent:
    /// `paused` (a `Retry-After`), `rate` (`requests_per_minute`), `concurrency`
    /// (`max_concurrency`).
    RequestWaited {
        reason: String,
        wait_ms: u64,
    },
    /// A request of the turn failed and is tried again after `wait_ms`.
    RequestRetried {
        attempt: u32,
        error: String,
        wait_ms: u64,
    },
    TurnDone {
        latency_ms: u64,
    },
    TurnFailed {
        error: String,
        error_kind: TurnErrorKind,
    },
    TurnInterrupted {
        reason: String,
        error_kind: TurnErrorKind,
    },
    /// A guard denied the turn before it started (it has no `TurnStarted` and no terminal
    /// event).
    TurnDenied {
        guard: String,
        code: String,
        /// `denied`, or the guard failure that denied: `error`, `panic`, `timeout`,
        /// `quarantined`.
        kind: String,
        message: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        policy_revision: Option<String>,
    },
    /// A tool call the agent made that was refused and never ran — no turn of the run was in
    /// progress (after its reply, say), or the turn ended first. It is evidence against the
    /// agent: in the trace with its reason, and counted by the constraint layer.
    ToolRefused {
        tool: String,
        reason: String,
    },
    RunScored {
        verdict: String,
        failed_layers: Vec<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// The run's verdict changed after its hooks ran: tool calls refused after it was
    /// scored (`ToolRefused`, just before) count against the agent. The score written is
    /// this one.
    RunRescored {
        verdict: String,
        failed_layers: Vec<String>,
    },
    RunEnded {
        stem: String,
    },
    /// `wt run --until-decided`: after a run of the scenario, where its comparison with the
    /// baseline stands — `continue`, `regressed`, `not_regressed` (both whatever the
    /// remaining runs do: its runs stop), or `undetermined` (every run made; `wt compare`
    /// decides). `p_value`: the one-sided regression p-value if the remaining runs pass as
    /// the ones so far did.
    Look {
        runs: u64,
        passed: u64,
        max_runs: u64,
        p_value: f64,
        decision: String,
    },
    ScenarioEnded {
        runs: u32,
        passed: u32,
        failed: u32,
        errored: u32,
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    SweepEnded {
        scenarios: usize,
        exit_code: u8,
    },
    /// A warning for the person watching (a hook's, a teardown's, a lane's): live only, never
    /// in the journal; run warnings are in the run's trace, scenario warnings in the
    /// scenario's outcome.
    #[serde(skip)]
    Warning {
        message: String,
    },
}

impl Event {
    /// The event's name, as written in its `event` field.
    pub fn name(&self) -> &'static str {
        match self {
            Event::SweepStarted { .. } => "SweepStarted",
            Event::ScenarioStarted { .. } => "ScenarioStarted",
            Event::RunStarted { .. } => "RunStarted",
            Event::RunRetried { .. } => "RunRetried",
            Event::TurnStarted { .. } => "TurnStarted",
            Event::StepDone { .. } => "StepDone",
            Event::ModelCalled { .. } => "ModelCalled",
            Event::RequestRetried { .. } => "RequestRetried",
            Event::RequestWaited { .. } => "RequestWaited",
            Event::TurnDenied { .. } => "TurnDenied",
            Event::TurnDone { .. } => "TurnDone",
            Event::TurnFailed { .. } => "TurnFailed",
            Event::TurnInterrupted { .. } => "TurnInterrupted",
            Event::ToolRefused { .. } => "ToolRefused",
            Event::RunScored { .. } => "RunScored",
            Event::RunRescored { .. } => "RunRescored",
            Event::RunEnded { .. } => "RunEnded",
            Event::Look { .. } => "Look",
            Event::ScenarioEnded { .. } => "ScenarioEnded",
            Event::SweepEnded { .. } => "SweepEnded",
            Event::Warning { .. } => "Warning",
        }
    }

    /// Whether the event goes into the journal (every event but [`Event::Warning`]).
    pub fn durable(&self) -> bool {
        !matches!(self, Event::Warning { .. })
    }
}

/// What caused an event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Cause {
    /// The sweep itself, a scenario turn, or anything not caused by a hook.
    Scenario,
    /// A hook's `ctx.converse()`.
    Converse { hook: String },
}

/// Where an event happened.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Scope {
    pub scenario_id: Option<String>,
    pub run_id: Option<String>,
    pub session_id: Option<String>,
    pub turn: Option<u32>,
    pub step: Option<u32>,
}

/// A journal line: `{"v":…,"seq":…,"ts":…,"sweep_id":…,` the scope's fields, `"cause":…,`
/// then the event's own fields, its name first.
#[derive(Serialize)]
struct Line<'a> {
    v: u32,
    seq: u64,
    ts: &'a str,
    sweep_id: &'a str,
    #[serde(flatten)]
    scope: &'a Scope,
    cause: &'a Cause,
    #[serde(flatten)]
    event: &'a Event,
}

/// Why the journal could not be written.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error("failed to create the event journal {path}")]
    Open {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// A run as it was written, handed to sinks with its `RunEnded` event (never serialized).
#[derive(Clone, Copy)]
pub struct RunWritten<'a> {
    pub trace: &'a Trace,
    pub score: &'a Score,
    /// The trace file's bytes.
    pub trace_bytes: &'a [u8],
    /// The file names of the hook artifacts written beside it, sorted.
    pub artifacts: &'a [String],
}

/// One event as every sink sees it.
pub struct Emitted<'a> {
    pub sweep_id: &'a str,
    pub scope: &'a Scope,
    pub cause: &'a Cause,
    pub event: &'a Event,
    /// The journal line, newline included (`None` for live-only events).
    pub line: Option<&'a [u8]>,
    /// Where the line begins in the journal file (`None` for live-only events, or when the
    /// line could not be written).
    pub offset: Option<u64>,
    /// With `RunEnded`: the run's trace and score as written.
    pub run: Option<RunWritten<'a>>,
}

/// A consumer of the sweep's event stream: the terminal progress, the JUnit aggregator, the
/// live `--events` copy, a library caller's own. Called for every event, in `seq` order,
/// one event at a time (never from two threads at once), after the event is in the journal.
/// A sink must be quick: the lanes wait for it.
pub trait Sink: Send + Sync {
    fn event(&self, e: &Emitted<'_>);
}

/// The live copy of the journal (`wt run --events -|FILE`): the same bytes, line by line.
pub(crate) struct LiveLines(Mutex<Box<dyn Write + Send>>);

impl LiveLines {
    pub(crate) fn new(out: Box<dyn Write + Send>) -> Self {
        LiveLines(Mutex::new(out))
    }
}

impl Sink for LiveLines {
    fn event(&self, e: &Emitted<'_>) {
        if let Some(line) = e.line {
            let mut out = self.0.lock().unwrap_or_else(|e| e.into_inner());
            // A closed pipe on the live stream must not stop the sweep.
            let _ = out.write_all(line).and_then(|()| out.flush());
        }
    }
}

struct Inner {
    file: File,
    seq: u64,
    /// The first write error; later events are still attempted.
    failed: Option<String>,
    /// The line being written, its allocation kept from line to line.
    line: Vec<u8>,
    /// Where the next line begins in the file (`None` once a write failed: the file's end is
    /// then not known).
    end: Option<u64>,
}

/// The sweep's journal: the durable first stage of its [`Stream`].
pub(crate) struct Journal {
    path: PathBuf,
    sweep_id: String,
    /// The invocation's secrets: no line is written with one in it.
    redactor: Arc<crate::secrets::Redactor>,
    now: Box<dyn Fn() -> String + Send + Sync>,
    inner: Mutex<Inner>,
}

impl Journal {
    /// Creates `<dir>/<stem>.events.jsonl` — a new file, never one that exists and never
    /// through a symlink. When the stem is taken in `dir` (another sweep, or a pinned sweep
    /// run twice into one directory), `stem` becomes the first free `<stem>-N`.
    pub(crate) fn create(
        dir: &Path,
        stem: &mut String,
        sweep_id: &str,
        now: Box<dyn Fn() -> String + Send + Sync>,
    ) -> Result<Journal, JournalError> {
        use std::os::unix::fs::OpenOptionsExt;
        let base = stem.clone();
        let mut n = 0u32;
        let (path, file) = loop {
            let candidate = if n == 0 {
                base.clone()
            } else {
                format!("{base}-{n}")
            };
            let path = dir.join(format!("{candidate}.events.jsonl"));
            let opened = std::fs::OpenOptions::new()
                .append(true)
                .create_new(true)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&path);
            match opened {
                Ok(file) => {
                    *stem = candidate;
                    break (path, file);
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && n < 10_000 => n += 1,
                Err(source) => return Err(JournalError::Open { path, source }),
            }
        };
        // Held for the sweep's life: `wt run --resume` refuses a sweep still running. A
        // file system without locks costs only that check.
        let _ = try_lock_file(&file, true);
        Ok(Journal::open_at(path, file, 0, sweep_id, now))
    }

    /// The journal in `file` (opened for appending) whose next line takes `seq`: a new one
    /// (0), or that of a sweep being resumed (opened and locked by the resume), so that its
    /// story goes on in one file.
    pub(crate) fn open_at(
        path: PathBuf,
        file: std::fs::File,
        seq: u64,
        sweep_id: &str,
        now: Box<dyn Fn() -> String + Send + Sync>,
    ) -> Journal {
        let end = file.metadata().ok().map(|m| m.len());
        Journal {
            path,
            sweep_id: sweep_id.to_owned(),
            redactor: Arc::default(),
            now,
            inner: Mutex::new(Inner {
                file,
                seq,
                failed: None,
                line: Vec::with_capacity(512),
                end,
            }),
        }
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Redacts every line with `redactor` (the invocation's secrets) before it is written.
    pub(crate) fn with_redactor(mut self, redactor: Arc<crate::secrets::Redactor>) -> Self {
        self.redactor = redactor;
        self
    }

    /// Writes one event durably and returns its sequence number.
    #[cfg(test)]
    pub(crate) fn publish(&self, scope: &Scope, cause: &Cause, event: &Event) -> u64 {
        self.publish_then(scope, cause, event, |_, _| ())
    }

    /// Writes a durable event's line to the file (a live-only event gets none), then calls
    /// `then` with the line and where it begins while still holding the journal: whoever
    /// publishes a terminal event can rely on it being in the file, and what `then` delivers
    /// follows `seq` order.
    fn publish_then(
        &self,
        scope: &Scope,
        cause: &Cause,
        event: &Event,
        then: impl FnOnce(Option<&[u8]>, Option<u64>),
    ) -> u64 {
        let durable = event.durable();
        let ts = if durable { (self.now)() } else { String::new() };
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let seq = inner.seq;
        if !durable {
            then(None, None);
            return seq;
        }
        let Inner {
            file,
            seq: next,
            failed,
            line,
            end,
        } = &mut *inner;
        line.clear();
        let written = Line {
            v: EVENTS_SCHEMA_VERSION,
            seq,
            ts: &ts,
            sweep_id: &self.sweep_id,
            scope,
            cause,
            event,
        };
        // Each line goes through its JSON form: a secret is found in any field of any event
        // (however the line would escape it), and a line's URL passwords are blanked.
        let redacted = serde_json::to_value(&written).map(|mut v| {
            self.redactor.scrub_value(&mut v);
            v
        });
        match redacted.and_then(|v| serde_json::to_writer(&mut *line, &v)) {
            Ok(()) => {}
            Err(e) => {
                failed.get_or_insert(format!("event {}: {e}", event.name()));
                then(None, None);
                return seq;
            }
        };
        line.push(b'\n');
        *next += 1;
        // One write of the whole line: O_APPEND makes it atomic with respect to the file's
        // end, and a killed process leaves either the whole line or none of it.
        let at = *end;
        match file.write_all(line) {
            Ok(()) => *end = at.map(|at| at + line.len() as u64),
            Err(e) => {
                failed.get_or_insert(format!("{}: {e}", self.path.display()));
                *end = None;
            }
        }
        then(Some(line), at.filter(|_| end.is_some()));
        if line.capacity() > 1 << 16 {
            // Do not keep an outsized buffer after a huge event.
            *line = Vec::with_capacity(512);
        }
        seq
    }

    /// The first write error, if any.
    pub(crate) fn error(&self) -> Option<String> {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .failed
            .clone()
    }
}

/// A sweep's event stream: every event once, into the journal first, then to each sink in
/// order. The runner is its only author.
pub(crate) struct Stream {
    journal: Journal,
    sinks: Vec<Arc<dyn Sink>>,
}

impl Stream {
    pub(crate) fn new(journal: Journal, sinks: Vec<Arc<dyn Sink>>) -> Self {
        Stream { journal, sinks }
    }

    pub(crate) fn journal(&self) -> &Journal {
        &self.journal
    }

    /// Emits one event: durable in the journal when this returns, and seen by every sink.
    pub(crate) fn emit(
        &self,
        scope: &Scope,
        cause: &Cause,
        event: &Event,
        run: Option<RunWritten<'_>>,
    ) {
        let sweep_id = self.journal.sweep_id.as_str();
        self.journal
            .publish_then(scope, cause, event, |line, offset| {
                let e = Emitted {
                    sweep_id,
                    scope,
                    cause,
                    event,
                    line,
                    offset,
                    run,
                };
                for sink in &self.sinks {
                    sink.event(&e);
                }
            });
    }
}

/// Reads a journal back: every line as JSON. A line that does not parse is an error naming
/// its number.
pub fn read_journal(path: &Path) -> Result<Vec<Value>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    text.lines()
        .enumerate()
        .map(|(i, l)| {
            serde_json::from_str(l).map_err(|e| format!("{}:{}: {e}", path.display(), i + 1))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_is_its_header_then_the_scope_the_cause_and_the_event_s_fields() {
        let dir = tempfile::tempdir().unwrap();
        let mut stem = "s".to_owned();
        let j = Journal::create(
            dir.path(),
            &mut stem,
            "sw",
            Box::new(|| "2026-12-01T00:00:00.000Z".into()),
        )
        .unwrap();
        let scope = Scope {
            scenario_id: Some("order-status".into()),
            run_id: Some("r \"1\"".into()),
            session_id: None,
            turn: Some(3),
            step: None,
        };
        let cause = Cause::Converse {
            hook: "debrief".into(),
        };
        let event = Event::StepDone {
            tool: "lookup".into(),
            error: Some("no\n".into()),
            server: None,
        };
        j.publish(&scope, &cause, &event);
        assert_eq!(
            std::fs::read_to_string(j.path()).unwrap(),
            concat!(
                r#"{"v":1,"seq":0,"ts":"2026-12-01T00:00:00.000Z","sweep_id":"sw","#,
                r#""scenario_id":"order-status","run_id":"r \"1\"","session_id":null,"#,
                r#""turn":3,"step":null,"cause":{"kind":"converse","hook":"debrief"},"#,
                r#""event":"StepDone","tool":"lookup","error":"no\n"}"#,
                "\n"
            )
        );
    }

    #[test]
    fn lines_carry_ids_sequence_and_cause() {
        let dir = tempfile::tempdir().unwrap();
        let mut stem = "20261130T000000Z_sw-1".to_owned();
        let j = Journal::create(
            dir.path(),
            &mut stem,
            "sw-1",
            Box::new(|| "2026-11-30T00:00:00Z".into()),
        )
        .unwrap();
        let scope = Scope {
            scenario_id: Some("refund".into()),
            run_id: Some("r1".into()),
            session_id: Some("s1".into()),
            turn: Some(0),
            step: None,
        };
        j.publish(
            &scope,
            &Cause::Scenario,
            &Event::TurnStarted { input: "hi".into() },
        );
        j.publish(
            &scope,
            &Cause::Converse {
                hook: "debrief".into(),
            },
            &Event::TurnDone { latency_ms: 3 },
        );
        // A second sweep with the same stem gets its own file; a planted symlink is refused.
        let mut again = stem.clone();
        let j2 = Journal::create(dir.path(), &mut again, "sw-1", Box::new(String::new)).unwrap();
        assert_eq!(again, "20261130T000000Z_sw-1-1");
        assert_ne!(j2.path(), j.path());
        let mut planted = "planted".to_owned();
        std::os::unix::fs::symlink(
            dir.path().join("elsewhere"),
            dir.path().join("planted.events.jsonl"),
        )
        .unwrap();
        Journal::create(dir.path(), &mut planted, "sw-1", Box::new(String::new)).unwrap();
        assert_eq!(planted, "planted-1");
        assert!(!dir.path().join("elsewhere").exists());
        let lines = read_journal(j.path()).unwrap();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0]["event"], "TurnStarted");
        assert_eq!(lines[0]["seq"], 0);
        assert_eq!(lines[0]["sweep_id"], "sw-1");
        assert_eq!(lines[0]["run_id"], "r1");
        assert_eq!(lines[0]["turn"], 0);
        assert_eq!(lines[0]["step"], Value::Null);
        assert_eq!(lines[0]["cause"]["kind"], "scenario");
        assert_eq!(lines[1]["seq"], 1);
        assert_eq!(lines[1]["cause"]["hook"], "debrief");
        assert_eq!(lines[1]["latency_ms"], 3);
        assert_eq!(
            j.path().file_name().unwrap(),
            "20261130T000000Z_sw-1.events.jsonl"
        );
    }

    /// Collects what a sink is handed.
    #[derive(Default)]
    struct Collect(Mutex<Vec<(String, Option<Vec<u8>>)>>);
    impl Sink for Collect {
        fn event(&self, e: &Emitted<'_>) {
            self.0
                .lock()
                .unwrap()
                .push((e.event.name().to_owned(), e.line.map(<[u8]>::to_vec)));
        }
    }

    #[test]
    fn every_sink_sees_every_event_once_in_journal_order_and_warnings_stay_live() {
        let dir = tempfile::tempdir().unwrap();
        let mut stem = "s".to_owned();
        let journal = Journal::create(dir.path(), &mut stem, "sw", Box::new(String::new)).unwrap();
        let path = journal.path().to_owned();
        let (a, b) = (Arc::new(Collect::default()), Arc::new(Collect::default()));
        let stream = Stream::new(journal, vec![a.clone(), b.clone()]);
        let scope = Scope::default();
        std::thread::scope(|s| {
            for t in 0..4 {
                let (stream, scope) = (&stream, &scope);
                s.spawn(move || {
                    for i in 0..50 {
                        let event = if i % 10 == 0 {
                            Event::Warning {
                                message: format!("w{t}"),
                            }
                        } else {
                            Event::RunStarted {
                                run_index: i,
                                attempt: None,
                            }
                        };
                        stream.emit(scope, &Cause::Scenario, &event, None);
                    }
                });
            }
        });
        let (a, b) = (a.0.lock().unwrap(), b.0.lock().unwrap());
        assert_eq!(a.len(), 200);
        assert_eq!(*a, *b, "two sinks saw different streams");
        // The durable lines, in the order the sinks saw them, are the journal, byte for byte.
        let lines: Vec<u8> = a.iter().filter_map(|(_, l)| l.clone()).flatten().collect();
        assert_eq!(lines, std::fs::read(&path).unwrap());
        let journal = read_journal(&path).unwrap();
        assert_eq!(journal.len(), 180);
        assert!(journal.iter().all(|l| l["event"] == "RunStarted"));
        assert!(
            journal
                .iter()
                .enumerate()
                .all(|(i, l)| l["seq"] == i as u64)
        );
        assert!(
            a.iter()
                .filter(|(n, _)| n == "Warning")
                .all(|(_, l)| l.is_none())
        );
    }
}
