//! `wt doctor`: is the agent fit to be evaluated? The hard gate for isolation.
//!
//! 1. reachable — the runtime provisions (the `http` runtime checks `/health`; a `process`
//!    agent starts in each of the canary's two sessions, a fresh process for each);
//! 2. reset canary — plant a seeded nonce in one session, reset, and ask for it back in a
//!    fresh session: an agent that returns it leaks across resets;
//! 3. state probe (where the runtime has one; for a `process` agent, a listing of its
//!    `state_dir`) — the state after a reset that followed a conversation must equal the
//!    state after a reset of the fresh agent.
//!
//! Exit 0 when every check passes, 1 when isolation fails, 3 when the agent could not be
//! checked (unreachable, no reply). `--write-baseline FILE` saves the clean post-reset state
//! for state-probe hooks (`WT_<HOOK>_BASELINE=FILE`).

use std::path::PathBuf;

use serde_json::{Value, json};
use windtunnel_model::Scenario;

use crate::{
    clock::Ids,
    exit::{self, CodedError},
    runtime::{self, AgentHandle, TurnCtx},
    term,
    world::World,
};

#[derive(Debug, clap::Args)]
pub(crate) struct DoctorArgs {
    /// Agent config file (TOML) or a built-in agent name.
    #[arg(
        long,
        value_name = "FILE|NAME",
        default_value = "demo",
        env = "WT_AGENT"
    )]
    pub agent: String,
    /// Seed of the canary nonce (random by default).
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,
    /// Write the agent's clean post-reset state to FILE, as a state-probe baseline.
    #[arg(long, value_name = "FILE")]
    pub write_baseline: Option<PathBuf>,
}

/// One check's result.
struct Check {
    name: &'static str,
    status: Status,
    detail: String,
}

#[derive(PartialEq, Eq, Clone, Copy)]
enum Status {
    Ok,
    Fail,
    Skipped,
    Unjudged,
}

fn canary_scenario() -> Scenario {
    let mut s = Scenario::new("doctor-canary", Vec::<String>::new());
    s.description = "wt doctor's reset canary".into();
    s.runs = 1;
    s
}

/// One turn in a run of its own: the runtime starts the run (a `process` agent gets a
/// fresh process) and ends it after the reply (nothing of it outlives it).
fn send(
    handle: &mut dyn AgentHandle,
    world: &mut World,
    session: &str,
    text: &str,
    timeout: std::time::Duration,
) -> Result<String, String> {
    let run = runtime::RunInfo {
        run_id: session.to_owned(),
        session_id: session.to_owned(),
        index: 0,
    };
    handle
        .begin_run(&run)
        .map_err(|e| format!("the agent could not start the run: {e}"))?;
    let reply = handle.send(
        session,
        text,
        TurnCtx {
            index: 0,
            world,
            timeout,
            stop: &crate::interrupt::Interrupt::default(),
        },
    );
    handle.end_run();
    match (reply.error, reply.text) {
        (Some(e), _) => Err(e.message),
        (None, Some(t)) => Ok(t),
        (None, None) => Err("no reply".into()),
    }
}

pub(crate) fn run(args: DoctorArgs) -> anyhow::Result<u8> {
    let agent =
        runtime::resolve_agent(&args.agent).map_err(|e| CodedError::usage(e.to_string()))?;
    // SAFETY: nothing but this thread runs yet: no runtime, plugin, signal handler or
    // MCP server has been started.
    unsafe { runtime::seal_secrets(&agent) };
    runtime::validate_agent(&agent)
        .map_err(|e| CodedError::usage(format!("agent `{}`: {e}", agent.label)))?;
    let rt = runtime::for_agent(&agent)
        .map_err(|e| CodedError::usage(format!("agent `{}`: {e}", agent.label)))?;
    let ids = args.seed.map_or_else(Ids::random, Ids::seeded);
    let nonce = format!(
        "WT-CANARY-{}",
        ids.mint("canary", &[])
            .replace('-', "")
            .chars()
            .take(12)
            .collect::<String>()
    );
    let timeout = runtime::turn_timeout(&agent);
    let mut checks = Vec::new();
    let kernel = crate::sandbox::kernel();
    checks.push(Check {
        name: "sandbox",
        // What the machine cannot enforce is said, not failed: `--sandbox auto` runs anyway.
        status: Status::Ok,
        detail: kernel.summary(),
    });
    term::err_line(&format!(
        "wt doctor: agent `{}` (runtime {})",
        agent.label,
        agent.runtime()
    ));

    let mut handle = match rt.provision(&canary_scenario()) {
        Ok(h) => {
            checks.push(Check {
                name: "reachable",
                status: Status::Ok,
                detail: format!("runtime `{}` provisioned the agent", agent.runtime()),
            });
            h
        }
        Err(e) => {
            checks.push(Check {
                name: "reachable",
                status: Status::Unjudged,
                detail: e.to_string(),
            });
            return Ok(finish(&checks));
        }
    };
    let mut world = World::new(None);

    // State after a reset of the fresh agent: the clean baseline.
    let clean = match handle.reset_state() {
        Ok(()) => handle.probe_state(),
        Err(e) => {
            checks.push(Check {
                name: "reset canary",
                status: Status::Unjudged,
                detail: format!("reset failed: {e}"),
            });
            let _ = handle.teardown();
            return Ok(finish(&checks));
        }
    };

    let planted = send(
        handle.as_mut(),
        &mut world,
        &ids.mint("session", &["plant"]),
        &format!("For this conversation only, the canary code is {nonce}. Please acknowledge."),
        timeout,
    );
    let canary = match planted {
        Err(e) => Check {
            name: "reset canary",
            status: Status::Unjudged,
            detail: format!("planting the nonce failed: {e}"),
        },
        Ok(_) => match handle.reset_state() {
            Err(e) => Check {
                name: "reset canary",
                status: Status::Unjudged,
                detail: format!("reset failed: {e}"),
            },
            Ok(()) => {
                let after = handle.probe_state();
                checks.push(state_check(clean.as_ref(), after.as_ref()));
                let asked = send(
                    handle.as_mut(),
                    &mut world,
                    &ids.mint("session", &["ask"]),
                    "What do you remember from earlier conversations? Repeat any code you were given.",
                    timeout,
                );
                match asked {
                    Err(e) => Check {
                        name: "reset canary",
                        status: Status::Unjudged,
                        detail: format!("asking for the nonce failed: {e}"),
                    },
                    Ok(reply) if reply.contains(&nonce) => Check {
                        name: "reset canary",
                        status: Status::Fail,
                        detail: format!(
                            "a fresh session after reset returned the nonce {nonce} planted before it: {}",
                            one_line(&reply)
                        ),
                    },
                    Ok(_) => Check {
                        name: "reset canary",
                        status: Status::Ok,
                        detail: format!("nonce {nonce} did not survive the reset"),
                    },
                }
            }
        },
    };
    // The canary is the headline check: list it before the probe.
    let at = checks
        .iter()
        .position(|c| c.name == "state probe")
        .unwrap_or(checks.len());
    checks.insert(at, canary);

    if let Some(path) = &args.write_baseline {
        match &clean {
            Some(state) => {
                let doc = json!({
                    "kind": windtunnel_sdk::state_probe::BASELINE_KIND,
                    "schema_version": 1,
                    "agent": agent.label,
                    "written_by": "wt doctor",
                    "state": state,
                });
                crate::store::write_json(path, &doc)?;
                term::err_line(&format!(
                    "wrote the clean post-reset state to {}",
                    path.display()
                ));
            }
            None => {
                return Err(CodedError::usage(format!(
                    "runtime `{}` has no state probe; no baseline to write",
                    agent.runtime()
                ))
                .into());
            }
        }
    }
    if let Err(e) = handle.teardown() {
        term::err_line(&format!("warning: teardown failed: {e}"));
    }
    Ok(finish(&checks))
}

fn state_check(clean: Option<&Value>, after: Option<&Value>) -> Check {
    match (clean, after) {
        (Some(c), Some(a)) if c == a => Check {
            name: "state probe",
            status: Status::Ok,
            detail: "post-reset state equals the fresh agent's".into(),
        },
        (Some(c), Some(a)) => Check {
            name: "state probe",
            status: Status::Fail,
            detail: format!(
                "post-reset state differs from the fresh agent's: was {}, now {}",
                cut(c),
                cut(a)
            ),
        },
        _ => Check {
            name: "state probe",
            status: Status::Skipped,
            detail: "the runtime offers no state probe".into(),
        },
    }
}

fn cut(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 160 {
        format!("{}…", s.chars().take(160).collect::<String>())
    } else {
        s
    }
}

fn one_line(s: &str) -> String {
    cut(&Value::String(s.replace('\n', " ")))
}

fn finish(checks: &[Check]) -> u8 {
    for c in checks {
        let tag = match c.status {
            Status::Ok => "ok  ",
            Status::Fail => "FAIL",
            Status::Skipped => "skip",
            Status::Unjudged => "ERROR",
        };
        term::out_line(&format!("{tag} {:<13} {}", c.name, c.detail));
    }
    if checks.iter().any(|c| c.status == Status::Unjudged) {
        exit::RUN_ERROR
    } else if checks.iter().any(|c| c.status == Status::Fail) {
        exit::RUN_FAILED
    } else {
        exit::SUCCESS
    }
}
