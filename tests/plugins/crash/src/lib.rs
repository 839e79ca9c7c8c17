//! Hooks that each end their process in a different way at `on_run_end` of the first run,
//! for the isolation fault suite (only ever activated with `--isolate-hooks`; in-process
//! each would take `wt` down, which is the point). Every hook first prints a line to its
//! stdout (which must land in its log, never in `wt`'s output) and appends
//! `<name> <run id> env=<names of its environment variables>` to the file named by
//! `WT_<NAME>_LOG`, when set, so a test can see that the hook ran once, what it could see,
//! and that it was not called again.
//!
//! `crash_abort` also aborts while being built when `WT_CRASH_ABORT_AT=load`: a plugin
//! that dies while loading.
//!
//! | hook | fault |
//! | --- | --- |
//! | `crash_abort` | `abort()` |
//! | `crash_segv` | a write through a null pointer (SIGSEGV) |
//! | `crash_exit0`, `crash_exit3` | `exit(0)`, `exit(3)` in the middle of a call |
//! | `crash_alloc` | a 50 GB allocation |
//! | `crash_loop` | an infinite busy loop |
//! | `crash_dtor` | a panic in a destructor while a panic unwinds (Rust aborts) |
//! | `crash_artifact` | a 200 MB artifact |
//! | `crash_garbage` | bytes that are not a frame, written to every pipe it may write to |
//!
//! Each also declares `on_pack_end`, which must never be reached once it crashed.
//! `crash_guard` is a guard whose check aborts (a guard in a dead process must deny).

use std::io::Write;

use windtunnel_sdk::{Context, GuardDecision, Hook, Result, TurnCall, export_hooks, hook};

fn note(name: &str, ctx: &Context<'_>) {
    println!("{name} says hello on stdout");
    let var = format!("WT_{}_LOG", name.to_ascii_uppercase());
    if let Ok(path) = std::env::var(var) {
        let mut env: Vec<String> = std::env::vars_os()
            .map(|(k, _)| k.to_string_lossy().into_owned())
            .collect();
        env.sort();
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            let _ = writeln!(
                f,
                "{name} {} env={}",
                ctx.run_id().unwrap_or_default(),
                env.join(",")
            );
        }
    }
}

struct PanicsOnDrop;

impl Drop for PanicsOnDrop {
    fn drop(&mut self) {
        panic!("crash_dtor: a destructor panics during unwinding");
    }
}

/// Writes bytes that are not a frame to every descriptor above stderr that is a pipe open
/// for writing: the protocol pipe is the only one a hook process has.
fn write_garbage() {
    for fd in 3..256 {
        // SAFETY: fstat and fcntl only inspect `fd`; write reads our own buffer. A closed
        // or unrelated descriptor makes them fail, which is fine.
        unsafe {
            let mut st: libc::stat = std::mem::zeroed();
            if libc::fstat(fd, &mut st) != 0 || st.st_mode & libc::S_IFMT != libc::S_IFIFO {
                continue;
            }
            let flags = libc::fcntl(fd, libc::F_GETFL);
            if flags < 0 || flags & libc::O_ACCMODE != libc::O_WRONLY {
                continue;
            }
            let junk = b"garbage, not a frame\n";
            libc::write(fd, junk.as_ptr().cast(), junk.len());
        }
    }
}

macro_rules! crash {
    ($($ty:ident = $name:literal => $fault:expr),+ $(,)?) => {$(
        pub struct $ty;

        impl Default for $ty {
            fn default() -> Self {
                if $name == "crash_abort"
                    && std::env::var("WT_CRASH_ABORT_AT").is_ok_and(|v| v == "load")
                {
                    std::process::abort();
                }
                $ty
            }
        }

        #[hook]
        impl Hook for $ty {
            const NAME: &'static str = $name;

            fn on_run_end(&mut self, ctx: &Context<'_>) -> Result {
                note($name, ctx);
                let fault: fn(&Context<'_>) -> Result = $fault;
                fault(ctx)
            }

            fn on_pack_end(&mut self, ctx: &Context<'_>) -> Result {
                note($name, ctx);
                Ok(())
            }
        }
    )+};
}

crash!(
    Abort = "crash_abort" => |_| std::process::abort(),
    Segv = "crash_segv" => |_| {
        // SAFETY: none; this is the fault under test.
        unsafe { std::ptr::null_mut::<u64>().write_volatile(7) };
        Ok(())
    },
    Exit0 = "crash_exit0" => |_| std::process::exit(0),
    Exit3 = "crash_exit3" => |_| std::process::exit(3),
    Alloc = "crash_alloc" => |_| {
        let big = std::hint::black_box(vec![1u8; 50_000_000_000]);
        Err(windtunnel_sdk::Error::msg(format!("allocated {} bytes", big.len())))
    },
    Loop = "crash_loop" => |_| loop {
        std::hint::spin_loop();
    },
    Dtor = "crash_dtor" => |_| {
        let _armed = PanicsOnDrop;
        panic!("crash_dtor: the first panic");
    },
    Artifact = "crash_artifact" => |ctx| {
        let payload = serde_json::json!({"blob": "x".repeat(200_000_000)});
        ctx.emit_artifact(&payload, Some("huge"))
    },
    Garbage = "crash_garbage" => |_| {
        write_garbage();
        Ok(())
    },
);

#[derive(Default)]
pub struct Guard;

#[hook]
impl Hook for Guard {
    const NAME: &'static str = "crash_guard";

    fn guard_check(&mut self, _call: &TurnCall, ctx: &Context<'_>) -> Result<GuardDecision> {
        note(Self::NAME, ctx);
        std::process::abort()
    }
}

export_hooks!(
    Abort, Segv, Exit0, Exit3, Alloc, Loop, Dtor, Artifact, Garbage, Guard
);
