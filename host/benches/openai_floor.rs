//! The `openai` runtime alone, for `bench/openai_floor.sh`: the agent config's runtime
//! (through the redacting wrapper the runner uses) provisioned for one scenario of a pack and
//! sent its first turn RUNS times, each a fresh run (`reset_state`, a new session, a fresh
//! world), in place as the runner calls a cooperative handle — no runner, no trace, score or
//! journal, no files. What is left is the runtime's work per turn: its request, the HTTP
//! exchange, its reply and the model call's record. The script measures this process from
//! outside, as it does `wt run` and curl.
//!
//! `cargo bench -p windtunnel --bench openai_floor -- AGENT.toml PACK_DIR SCENARIO RUNS`
//! (prints the turns sent; exits 1 if a turn did not get its reply).

use std::path::Path;
use std::time::Duration;

use windtunnel::interrupt::Interrupt;
use windtunnel::pack::Pack;
use windtunnel::runtime::{self, TurnCtx};
use windtunnel::world::World;

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let [agent, pack, scenario, runs] = &args[..] else {
        eprintln!("usage: openai_floor AGENT.toml PACK_DIR SCENARIO RUNS");
        std::process::exit(2);
    };
    let runs: u32 = runs.parse().expect("RUNS is a number");
    let agent = runtime::resolve_agent(agent).unwrap_or_else(|e| panic!("{e}"));
    let pack = Pack::load(Path::new(pack)).unwrap_or_else(|e| panic!("{e}"));
    let scenario = pack
        .scenarios
        .iter()
        .find(|s| &s.id == scenario)
        .expect("the scenario is in the pack");
    let text = &scenario.turns[0];
    let runtime = runtime::for_agent(&agent).unwrap_or_else(|e| panic!("{e}"));
    let mut handle = runtime
        .provision(scenario)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        handle.cooperative(),
        "the runner calls this handle in place"
    );
    let stop = Interrupt::new();
    let timeout = Duration::from_secs_f64(agent.turn_timeout_s);
    for i in 0..runs {
        handle.reset_state().unwrap_or_else(|e| panic!("{e}"));
        let mut world = World::new(scenario.world.as_ref());
        let reply = handle.send(
            &format!("session-{i}"),
            text,
            TurnCtx {
                index: 0,
                world: &mut world,
                timeout,
                stop: &stop,
            },
        );
        if reply.text.is_none() || reply.model_calls.len() != 1 {
            eprintln!("turn {i}: no reply: {:?}", reply.error);
            std::process::exit(1);
        }
    }
    handle.teardown().unwrap_or_else(|e| panic!("{e}"));
    println!("{runs} turns");
}
