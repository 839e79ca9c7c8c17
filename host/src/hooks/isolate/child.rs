//! The child side of an isolated hook: the hidden `wt hook-child` subcommand.
//!
//! Before any plugin code runs, the child moves the protocol off fds 0 and 1 (to
//! close-on-exec descriptors of its own), points fd 0 at `/dev/null` and fd 1 at fd 2 — so a
//! plugin's `println!` lands in the log, never in the protocol —, asks the kernel to kill it
//! when `wt` dies, and limits its address space. Then it vets and loads the plugin through
//! the same [`Registry`] path `wt` uses in-process, builds the one hook instance it serves,
//! says it is ready, and answers calls until its stdin closes.
//!
//! It hosts exactly one instance: more instances (one per lane) are more children. It must
//! never decide anything about failures — an error or a caught panic is returned as it is —
//! and never write to the protocol except through [`protocol`].

use std::{
    cell::RefCell,
    fs::File,
    io::{self, BufReader},
    os::fd::FromRawFd,
    path::PathBuf,
    time::Duration,
};

use super::protocol::{self, FrameError, PARENT_FRAME_LIMIT, tag};
use crate::hooks::registry::{ActivationError, CallError, HostServices, Registry};

/// How long the child polls for the parent's answer to a member read or a service before
/// its read sleeps (when the parent said a core is free).
const ANSWER_SPIN: Duration = Duration::from_micros(200);

/// Arguments of `wt hook-child` (set by the parent; not a user interface).
#[derive(Debug, Clone, clap::Args)]
pub struct ChildArgs {
    #[arg(long)]
    pub plugin: PathBuf,
    #[arg(long)]
    pub hook: String,
    #[arg(long)]
    pub memory_limit_mib: u64,
    #[arg(long)]
    pub parent_pid: i32,
}

/// The child's whole life. Returns its exit code once the parent closes its stdin.
pub fn run(args: ChildArgs) -> anyhow::Result<u8> {
    let (input, output) = take_protocol_fds()?;
    die_with_parent(args.parent_pid);
    limit_address_space(args.memory_limit_mib)?;
    let host = PipeHost {
        pipes: RefCell::new(Pipes {
            reader: BufReader::with_capacity(64 << 10, protocol::Eager::new(input)),
            writer: output,
            body: Vec::new(),
            out: Vec::new(),
        }),
        ahead: RefCell::new(Default::default()),
    };

    let registry = Registry::from_files(std::slice::from_ref(&args.plugin), false);
    let hook = match registry.activate(std::slice::from_ref(&args.hook)) {
        Ok(mut hooks) if hooks.len() == 1 => hooks.remove(0),
        Ok(_) => anyhow::bail!("activation returned no hook"),
        Err(e) => {
            let refusal = match e {
                ActivationError::Refused { refusal, .. } => refusal.to_string(),
                other => other.to_string(),
            };
            host.send(tag::REFUSED, &[refusal.as_bytes()])?;
            return Ok(crate::exit::USAGE);
        }
    };
    let ready = serde_json::json!({
        "protocol": protocol::VERSION,
        "sha256": hook.sha256,
    })
    .to_string();
    host.send(tag::READY, &[ready.as_bytes()])?;

    loop {
        let point = {
            let mut p = host.pipes.borrow_mut();
            let Pipes { reader, body, .. } = &mut *p;
            // The next call may be seconds away: wait for it asleep.
            reader.get_mut().spin = Duration::ZERO;
            match protocol::read_frame(reader, &[tag::CALL], PARENT_FRAME_LIMIT, body) {
                Ok(_) => {
                    let call = protocol::decode_call(body)?;
                    // Answers to this call's requests come within microseconds.
                    reader.get_mut().spin = if call.spin {
                        ANSWER_SPIN
                    } else {
                        Duration::ZERO
                    };
                    *host.ahead.borrow_mut() = call.ahead;
                    call.point
                }
                Err(FrameError::Eof) => return Ok(crate::exit::SUCCESS),
                Err(e) => return Err(e.into()),
            }
        };
        let result = hook.call(point, &host).map_err(|e| match e {
            CallError::Failed(e) | CallError::Fatal(e) => e,
        });
        host.send(tag::RETURN, &protocol::result_parts(&result))?;
    }
}

struct Pipes {
    reader: BufReader<protocol::Eager<File>>,
    writer: File,
    body: Vec<u8>,
    out: Vec<u8>,
}

/// The parent, as the hook's context sees it: every member not sent ahead with the call, and
/// every service, is one round trip.
struct PipeHost {
    pipes: RefCell<Pipes>,
    /// The members the call frame carried ([`protocol::AHEAD`]).
    ahead: RefCell<[Option<Option<String>>; protocol::AHEAD.len()]>,
}

impl PipeHost {
    fn send(&self, tag: u8, parts: &[&[u8]]) -> io::Result<()> {
        let mut p = self.pipes.borrow_mut();
        let Pipes { writer, out, .. } = &mut *p;
        protocol::write_frame(writer, tag, parts, out)
    }

    /// Sends a request and reads the parent's answer. A parent that is gone or speaks
    /// nonsense leaves this process nothing to do: it exits (it is called from inside the
    /// plugin, where neither a panic nor an error to unwind with is an option).
    fn ask(
        &self,
        tag: u8,
        parts: &[&[u8]],
        answer: u8,
        decode: impl FnOnce(&[u8]) -> Option<Answer>,
    ) -> Answer {
        let Ok(mut p) = self.pipes.try_borrow_mut() else {
            return Answer::Reply(Err("the context is in use".into()));
        };
        let Pipes {
            reader,
            writer,
            body,
            out,
        } = &mut *p;
        let answered = protocol::write_frame(writer, tag, parts, out)
            .map_err(FrameError::from)
            .and_then(|()| protocol::read_frame(reader, &[answer], PARENT_FRAME_LIMIT, body));
        match answered.ok().and_then(|_| decode(body)) {
            Some(a) => a,
            None => std::process::exit(i32::from(crate::exit::USAGE)),
        }
    }
}

enum Answer {
    Member(Option<String>),
    Reply(Result<String, String>),
}

impl HostServices for PipeHost {
    fn member(&self, name: &str) -> Option<String> {
        if let Some(i) = protocol::ahead_index(name)
            && let Ok(ahead) = self.ahead.try_borrow()
            && let Some(value) = &ahead[i]
        {
            return value.clone();
        }
        match self.ask(tag::GET, &[name.as_bytes()], tag::MEMBER, |b| {
            protocol::decode_member(b).ok().map(Answer::Member)
        }) {
            Answer::Member(m) => m,
            Answer::Reply(_) => None,
        }
    }

    fn call(&self, op: &str, arg: &str) -> Result<String, String> {
        let len = (op.len() as u32).to_le_bytes();
        match self.ask(
            tag::SERVICE,
            &[&len, op.as_bytes(), arg.as_bytes()],
            tag::REPLY,
            |b| protocol::decode_result(b).ok().map(Answer::Reply),
        ) {
            Answer::Reply(r) => r,
            Answer::Member(_) => Err("no reply".into()),
        }
    }
}

/// Moves the protocol to fresh close-on-exec descriptors and gives fds 0 and 1 to
/// `/dev/null` and the log, so nothing the plugin reads or prints touches the protocol.
fn take_protocol_fds() -> io::Result<(File, File)> {
    // SAFETY: fcntl, open, dup2 and close act on descriptors this process owns (0, 1, 2 and
    // the ones they return); each new descriptor is owned by exactly one `File` below.
    unsafe {
        let input = libc::fcntl(0, libc::F_DUPFD_CLOEXEC, 3);
        if input < 0 {
            return Err(io::Error::last_os_error());
        }
        let input = File::from_raw_fd(input);
        let output = libc::fcntl(1, libc::F_DUPFD_CLOEXEC, 3);
        if output < 0 {
            return Err(io::Error::last_os_error());
        }
        let output = File::from_raw_fd(output);
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
        if null < 0 {
            return Err(io::Error::last_os_error());
        }
        let moved = libc::dup2(null, 0) >= 0 && libc::dup2(2, 1) >= 0;
        libc::close(null);
        if !moved {
            return Err(io::Error::last_os_error());
        }
        Ok((input, output))
    }
}

/// A `wt` killed outright (SIGKILL, a crash) must not leave a hung hook process behind.
fn die_with_parent(parent: i32) {
    #[cfg(target_os = "linux")]
    // SAFETY: prctl(PR_SET_PDEATHSIG) and getppid take and return plain integers.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
        // The parent may have died before the line above.
        if libc::getppid() != parent {
            std::process::exit(i32::from(crate::exit::USAGE));
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = parent;
}

fn limit_address_space(mib: u64) -> io::Result<()> {
    let bytes = mib.saturating_mul(1 << 20) as libc::rlim_t;
    let limit = libc::rlimit {
        rlim_cur: bytes,
        rlim_max: bytes,
    };
    // SAFETY: setrlimit reads the struct we pass and nothing else.
    if unsafe { libc::setrlimit(libc::RLIMIT_AS, &limit) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
