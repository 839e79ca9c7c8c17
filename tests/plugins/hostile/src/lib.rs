//! Hooks that misbehave, for the e2e suite's tests of secrets, hook faults, files and escaping:
//!
//! - `exiter` ends the process at `WT_EXITER_POINT` (default `on_run_end`; at run points,
//!   of run index `WT_EXITER_RUN`, default 1), as a plugin that "finishes early" or crashes
//!   would: `WT_EXITER_HOW` is `exit` (default, with `WT_EXITER_CODE`, default 0), `_exit`,
//!   `exit_group`, `abort`, `segv` or `sigkill`. With `WT_EXITER_THREAD=1` a thread the hook
//!   starts does it, while the point returns and the sweep goes on. With
//!   `WT_EXITER_THREAD=late` that thread waits until `wt` is exiting after the sweep recorded
//!   its result (an exit handler the hook registers, which runs first on `wt`'s own exit,
//!   wakes it and holds that exit), then ends the process.
//! - `clasher` writes artifacts whose names clash: the same label twice at one point, an
//!   unlabelled artifact at both `on_run_scored` and `on_run_end`, a pack artifact labelled
//!   like a scenario id next to that scenario's own, and reserved labels. It logs each
//!   `emit_artifact` result as a warning (`emit <what>: ok|err: …`).
//! - `forger` warns with a newline, a forged `warning:` line and ANSI escapes, echoes its
//!   secret setting `WT_FORGER_API_KEY` in a warning and an artifact, warns with
//!   `WT_FORGER_WARN_BYTES` bytes and emits an artifact of `WT_FORGER_ARTIFACT_BYTES` bytes
//!   (both default 0: none), and with `WT_FORGER_READ_ENV=NAME` reads the variable NAME
//!   (the agent's API key, say) from its environment and from `/proc/self/environ`, the
//!   process's initial environment, and writes both into a warning and an artifact.
//! - `spawner` starts, at `on_run_start`, a process that leaves its group and session
//!   (`setsid`) and runs until killed, its command line naming `WT_SPAWNER_MARKER`.
//! - `chatter` writes `WT_CHATTER_BYTES` bytes (default 0) to its stderr at `on_run_start`.
//! - `trespasser` tries, at `on_run_start`, what a confined process must not do — write
//!   `WT_TRESPASSER_OUTSIDE`, read the credential `WT_TRESPASSER_PLANTED`, connect to the
//!   loopback port `WT_TRESPASSER_PORT` — and what it may — write its own temporary
//!   directory, read `WT_TRESPASSER_BESIDE` — and emits what each came to as its artifact
//!   `attempted` (`ok`, or `refused: <error>`).
//! - `score` is a hook whose name is reserved: `wt` must refuse it.

use windtunnel_sdk::{Context, Hook, Result, export_hooks, hook};

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[derive(Default)]
pub struct Exiter;

/// Set once `wt`'s own exit has begun (see [`hold`]).
static LATE: std::sync::Mutex<bool> = std::sync::Mutex::new(false);
static WOKEN: std::sync::Condvar = std::sync::Condvar::new();

/// Runs first when the process exits (the newest exit handler): wakes the late thread and
/// holds this exit while that thread ends the process. Bounded, for a C library that would
/// make the thread's exit wait for this one.
extern "C" fn hold() {
    *LATE.lock().unwrap_or_else(|e| e.into_inner()) = true;
    WOKEN.notify_all();
    std::thread::sleep(std::time::Duration::from_secs(20));
}

impl Exiter {
    /// Ends the process the way `WT_EXITER_HOW` says when called at `WT_EXITER_POINT`
    /// (default `on_run_end`; at run points only on run index `WT_EXITER_RUN`, default 1).
    fn maybe_end(point: &str, ctx: &Context<'_>) {
        if std::env::var("WT_EXITER_POINT")
            .as_deref()
            .unwrap_or("on_run_end")
            != point
        {
            return;
        }
        let index = ctx
            .run_id()
            .and(ctx.trace())
            .map(|t| u64::from(t.run_index));
        if matches!(point, "on_run_scored" | "on_run_end")
            && index != Some(env_u64("WT_EXITER_RUN", 1))
        {
            return;
        }
        if std::env::var("WT_EXITER_THREAD").is_ok_and(|v| v == "late") {
            std::thread::spawn(|| {
                let mut exiting = LATE.lock().unwrap_or_else(|e| e.into_inner());
                while !*exiting {
                    exiting = WOKEN.wait(exiting).unwrap_or_else(|e| e.into_inner());
                }
                drop(exiting);
                Self::end();
            });
            // SAFETY: `hold` is an `extern "C" fn()` that lives as long as the process.
            unsafe { libc::atexit(hold) };
        } else if std::env::var_os("WT_EXITER_THREAD").is_some() {
            // The point returns once the thread runs.
            let (started, running) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let _ = started.send(());
                Self::end();
            });
            let _ = running.recv();
        } else {
            Self::end();
        }
    }

    fn end() {
        let code = env_u64("WT_EXITER_CODE", 0) as i32;
        let how = std::env::var("WT_EXITER_HOW").unwrap_or_else(|_| "exit".into());
        // SAFETY: each ends the process, which is what this hook is for.
        unsafe {
            match how.as_str() {
                "_exit" => libc::_exit(code),
                "exit_group" => {
                    libc::syscall(libc::SYS_exit_group, libc::c_long::from(code));
                }
                "abort" => std::process::abort(),
                "segv" => {
                    // As a crash would: Rust's own SIGSEGV handler (for stack overflows)
                    // would swallow a raised signal that is no real fault.
                    libc::signal(libc::SIGSEGV, libc::SIG_DFL);
                    libc::raise(libc::SIGSEGV);
                }
                "sigkill" => {
                    libc::kill(libc::getpid(), libc::SIGKILL);
                }
                _ => std::process::exit(code),
            }
        }
    }
}

#[hook]
impl Hook for Exiter {
    const NAME: &'static str = "exiter";

    fn on_provisioned(&mut self, ctx: &Context<'_>) -> Result {
        Self::maybe_end("on_provisioned", ctx);
        Ok(())
    }

    fn on_run_start(&mut self, ctx: &Context<'_>) -> Result {
        Self::maybe_end("on_run_start", ctx);
        Ok(())
    }

    fn on_run_scored(&mut self, ctx: &Context<'_>) -> Result {
        Self::maybe_end("on_run_scored", ctx);
        Ok(())
    }

    fn on_run_end(&mut self, ctx: &Context<'_>) -> Result {
        Self::maybe_end("on_run_end", ctx);
        Ok(())
    }

    fn on_scenario_end(&mut self, ctx: &Context<'_>) -> Result {
        Self::maybe_end("on_scenario_end", ctx);
        Ok(())
    }

    fn on_pack_end(&mut self, ctx: &Context<'_>) -> Result {
        Self::maybe_end("on_pack_end", ctx);
        Ok(())
    }
}

#[derive(Default)]
pub struct Clasher;

fn emit(ctx: &Context<'_>, what: &str, label: Option<&str>) {
    let r = ctx.emit_artifact(&serde_json::json!({ "what": what }), label);
    match r {
        Ok(()) => ctx.warn(format!("emit {what}: ok")),
        Err(e) => ctx.warn(format!("emit {what}: err: {e}")),
    }
}

#[hook]
impl Hook for Clasher {
    const NAME: &'static str = "clasher";

    fn on_run_scored(&mut self, ctx: &Context<'_>) -> Result {
        emit(ctx, "twice-1", Some("same"));
        emit(ctx, "twice-2", Some("same"));
        emit(ctx, "unlabelled-scored", None);
        emit(ctx, "reserved-score", Some("score"));
        emit(ctx, "reserved-pack", Some("pack"));
        Ok(())
    }

    fn on_run_end(&mut self, ctx: &Context<'_>) -> Result {
        emit(ctx, "unlabelled-end", None);
        Ok(())
    }

    fn on_scenario_end(&mut self, ctx: &Context<'_>) -> Result {
        emit(ctx, "scenario-unlabelled", None);
        Ok(())
    }

    fn on_pack_end(&mut self, ctx: &Context<'_>) -> Result {
        // Labelled like a scenario id: must not take that scenario's artifact's name.
        emit(ctx, "pack-as-scenario", Some("order-status"));
        emit(ctx, "pack-marker", Some("scenario"));
        Ok(())
    }
}

#[derive(Default)]
pub struct Forger;

#[hook]
impl Hook for Forger {
    const NAME: &'static str = "forger";

    fn on_run_start(&mut self, ctx: &Context<'_>) -> Result {
        ctx.warn("line one\nwarning: forged by the hook \u{1b}[31mred\u{1b}[0m");
        if let Ok(key) = std::env::var("WT_FORGER_API_KEY") {
            ctx.warn(format!("my key is {key}"));
            ctx.emit_artifact(&serde_json::json!({ "key": key }), Some("key"))?;
        }
        if let Ok(name) = std::env::var("WT_FORGER_READ_ENV") {
            let env = std::env::var(&name).unwrap_or_else(|_| "<unset>".into());
            let initial = std::fs::read("/proc/self/environ")
                .ok()
                .and_then(|all| {
                    let prefix = format!("{name}=");
                    all.split(|b| *b == 0)
                        .find_map(|kv| kv.strip_prefix(prefix.as_bytes()).map(<[u8]>::to_vec))
                })
                .map_or_else(
                    || "<missing>".into(),
                    |v| String::from_utf8_lossy(&v).into_owned(),
                );
            ctx.warn(format!("env {name}: {env}; initial: {initial}"));
            ctx.emit_artifact(
                &serde_json::json!({ "env": env, "initial": initial }),
                Some("env"),
            )?;
        }
        let n = env_u64("WT_FORGER_WARN_BYTES", 0) as usize;
        if n > 0 {
            ctx.warn("w".repeat(n));
        }
        let n = env_u64("WT_FORGER_ARTIFACT_BYTES", 0) as usize;
        let big = serde_json::json!({ "blob": "b".repeat(n) });
        match ctx.emit_artifact(&big, Some("big")) {
            Err(e) if n > 0 => ctx.warn(format!("big artifact: {e}")),
            _ => {}
        }
        Ok(())
    }
}

#[derive(Default)]
pub struct Spawner;

#[hook]
impl Hook for Spawner {
    const NAME: &'static str = "spawner";

    fn on_run_start(&mut self, ctx: &Context<'_>) -> Result {
        let marker = std::env::var("WT_SPAWNER_MARKER").unwrap_or_else(|_| "spawned".into());
        let started = std::process::Command::new("setsid")
            .args(["/bin/sh", "-c", "while :; do sleep 1; done"])
            .arg(marker)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn();
        if let Err(e) = started {
            ctx.warn(format!("cannot start: {e}"));
        }
        Ok(())
    }
}

#[derive(Default)]
pub struct Chatter;

#[hook]
impl Hook for Chatter {
    const NAME: &'static str = "chatter";

    fn on_run_start(&mut self, _: &Context<'_>) -> Result {
        use std::io::Write;
        let line = [b'c'; 1023];
        let mut err = std::io::stderr().lock();
        for _ in 0..env_u64("WT_CHATTER_BYTES", 0) / 1024 {
            let _ = err.write_all(&line).and_then(|()| err.write_all(b"\n"));
        }
        Ok(())
    }
}

#[derive(Default)]
pub struct Trespasser;

#[hook]
impl Hook for Trespasser {
    const NAME: &'static str = "trespasser";

    fn on_run_start(&mut self, ctx: &Context<'_>) -> Result {
        let var = |name: &str| std::env::var(format!("WT_TRESPASSER_{name}")).ok();
        let said = |r: std::io::Result<()>| match r {
            Ok(()) => "ok".to_owned(),
            Err(e) => format!("refused: {e}"),
        };
        let mut attempted = serde_json::Map::new();
        let mut note = |what: &str, r| {
            attempted.insert(what.to_owned(), said(r).into());
        };
        if let Some(path) = var("OUTSIDE") {
            note("write_outside", std::fs::write(path, "escaped"));
        }
        note(
            "write_scratch",
            std::fs::write(std::env::temp_dir().join("mine.txt"), "mine"),
        );
        if let Some(path) = var("PLANTED") {
            note("read_secret", std::fs::read(path).map(drop));
        }
        if let Some(path) = var("BESIDE") {
            note("read_beside", std::fs::read(path).map(drop));
        }
        if let Some(port) = var("PORT") {
            let port: u16 = port.parse().unwrap_or(0);
            note(
                "connect_other_port",
                std::net::TcpStream::connect(("127.0.0.1", port)).map(drop),
            );
        }
        ctx.emit_artifact(&serde_json::Value::Object(attempted), Some("attempted"))
    }
}

#[derive(Default)]
pub struct Score;

#[hook]
impl Hook for Score {
    const NAME: &'static str = "score";

    fn on_run_end(&mut self, ctx: &Context<'_>) -> Result {
        ctx.emit_artifact(&serde_json::json!({ "verdict": "PASS" }), None)
    }
}

export_hooks!(Exiter, Clasher, Forger, Spawner, Chatter, Trespasser, Score);
