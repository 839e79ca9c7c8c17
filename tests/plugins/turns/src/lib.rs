//! Turn hooks for the test suite. Every call appends a line to the file named by the hook's
//! own `WT_<NAME>_LOG` (each hook reads only its own settings, as an isolated hook must):
//!
//! - observers `turn_a` … `turn_d`: `<name> begin <run8> <turn> started=<yes|no>` and
//!   `<name> finish <run8> <turn> <outcome> terminal=<yes|no>`, where `terminal` says whether
//!   the turn's terminal event was already in the journal (`*.events.jsonl` in
//!   `WT_<NAME>_JOURNAL_DIR`) when the finish ran. `WT_<NAME>_PANIC=begin|finish` makes
//!   that observer panic there (after logging). A finish of a denied turn also logs
//!   `<name> denial <run8> <turn> <guard>/<code>`, as the turn result carries it.
//! - guards: `guard_deny` denies turn `WT_GUARD_DENY_TURN` (default 0) with code
//!   `no_refunds`; `guard_panic` panics; `guard_hang` never returns. Each logs
//!   `<name> check <run8> <turn>` first.

use std::io::Write;

use windtunnel_sdk::{
    Context, GuardDecision, Hook, Result, TurnCall, TurnResult, export_hooks, hook,
};

fn setting(name: &str, key: &str) -> Option<String> {
    std::env::var(format!("WT_{}_{key}", name.to_ascii_uppercase())).ok()
}

fn log(name: &str, line: String) {
    let Some(path) = setting(name, "LOG") else {
        return;
    };
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        // One write per line: lanes append to the same log at once.
        let _ = f.write_all(format!("{line}\n").as_bytes());
    }
}

fn short(run: &str) -> &str {
    &run[..run.len().min(8)]
}

fn panics_at(name: &str, at: &str) -> bool {
    setting(name, "PANIC").is_some_and(|v| v == at)
}

/// Is an event of (run, turn) among `names` already in the journal?
fn in_journal(hook: &str, run: &str, turn: u32, names: &[&str]) -> bool {
    let Some(dir) = setting(hook, "JOURNAL_DIR") else {
        return false;
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    for e in entries.flatten() {
        let p = e.path();
        if !p.to_string_lossy().ends_with(".events.jsonl") {
            continue;
        }
        let text = std::fs::read_to_string(&p).unwrap_or_default();
        for line in text.lines() {
            let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            let wanted = v["event"].as_str().is_some_and(|e| names.contains(&e));
            if wanted && v["run_id"] == run && v["turn"] == turn && v["cause"]["kind"] == "scenario"
            {
                return true;
            }
        }
    }
    false
}

macro_rules! observer {
    ($($ty:ident = $name:literal),+) => {$(
        #[derive(Default)]
        pub struct $ty;

        #[hook]
        impl Hook for $ty {
            const NAME: &'static str = $name;

            fn turn_begin(&mut self, call: &TurnCall, _ctx: &Context<'_>) -> Result {
                let started = in_journal($name, &call.run_id, call.turn, &["TurnStarted"]);
                log($name, format!(
                    "{} begin {} {} started={}",
                    $name,
                    short(&call.run_id),
                    call.turn,
                    if started { "yes" } else { "no" }
                ));
                if panics_at($name, "begin") {
                    panic!("{} panics in begin", $name);
                }
                Ok(())
            }

            fn turn_finish(&mut self, result: &TurnResult, _ctx: &Context<'_>) -> Result {
                let seen = in_journal(
                    $name,
                    &result.call.run_id,
                    result.call.turn,
                    &["TurnDone", "TurnFailed", "TurnInterrupted"],
                );
                log($name, format!(
                    "{} finish {} {} {:?} terminal={}",
                    $name,
                    short(&result.call.run_id),
                    result.call.turn,
                    result.outcome,
                    if seen { "yes" } else { "no" }
                ));
                if let Some(d) = &result.denial {
                    log($name, format!(
                        "{} denial {} {} {}/{}",
                        $name,
                        short(&result.call.run_id),
                        result.call.turn,
                        d.guard,
                        d.code
                    ));
                }
                if panics_at($name, "finish") {
                    panic!("{} panics in finish", $name);
                }
                Ok(())
            }
        }
    )+};
}

observer!(
    TurnA = "turn_a",
    TurnB = "turn_b",
    TurnC = "turn_c",
    TurnD = "turn_d"
);

#[derive(Default)]
pub struct GuardDeny;

#[hook]
impl Hook for GuardDeny {
    const NAME: &'static str = "guard_deny";

    fn guard_check(&mut self, call: &TurnCall, _ctx: &Context<'_>) -> Result<GuardDecision> {
        log(
            Self::NAME,
            format!("guard_deny check {} {}", short(&call.run_id), call.turn),
        );
        let deny_turn: u32 = std::env::var("WT_GUARD_DENY_TURN")
            .ok()
            .and_then(|t| t.parse().ok())
            .unwrap_or(0);
        Ok(if call.turn == deny_turn {
            GuardDecision::deny("no_refunds", "refund requests are out of policy")
        } else {
            GuardDecision::Allow
        })
    }
}

#[derive(Default)]
pub struct GuardPanic;

#[hook]
impl Hook for GuardPanic {
    const NAME: &'static str = "guard_panic";

    fn guard_check(&mut self, call: &TurnCall, _ctx: &Context<'_>) -> Result<GuardDecision> {
        log(
            Self::NAME,
            format!("guard_panic check {} {}", short(&call.run_id), call.turn),
        );
        panic!("guard_panic exploded")
    }
}

#[derive(Default)]
pub struct GuardHang;

#[hook]
impl Hook for GuardHang {
    const NAME: &'static str = "guard_hang";

    fn guard_check(&mut self, call: &TurnCall, _ctx: &Context<'_>) -> Result<GuardDecision> {
        log(
            Self::NAME,
            format!("guard_hang check {} {}", short(&call.run_id), call.turn),
        );
        loop {
            std::thread::park();
        }
    }
}

export_hooks!(TurnA, TurnB, TurnC, TurnD, GuardDeny, GuardPanic, GuardHang);
