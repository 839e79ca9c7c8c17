//! Wind Tunnel: a harness that evaluates AI agents.
//!
//! The `wt` binary is a thin shell over this library. The top-level modules form layers that
//! read as the pipeline; a module imports only modules of lower layers (checked by
//! `host/tests/layers.rs`):
//!
//! 1. foundations — [`clock`], [`deadlines`], [`events`] (the event stream: journal and
//!    sinks), [`exit`], [`limits`], [`procs`] (what `wt` starts never outlives it), [`secrets`], [`strict`] (reading the files people write),
//!    [`term`], [`world`];
//! 2. [`interrupt`] (stopping; reaches what must be undone only through callbacks the lower
//!    modules register), [`pack`] (scenarios), [`score`] (the four layers);
//! 3. [`store`] — files on disk;
//! 4. [`runtime`] — the agents, with the world's MCP door ([`runtime::mcp`]); [`hooks`] —
//!    plugins, the registry, dispatch, isolation, and the runner's seam
//!    ([`hooks::RunObserver`]); [`report`] — the reading side (report, compare, triage, the
//!    HTML page);
//! 5. `judge` — model-graded checks, on the harness's own models ([`runtime::models`]);
//! 6. [`runner`] — the run loop, the only author of a sweep's events;
//! 7. [`cli`] — one file per subcommand and the one place that maps errors to exit codes.

//!
//! The library's API is small: run a sweep ([`runner`]) on an agent ([`runtime`]) with a
//! pack ([`pack`]), observe it ([`events`], [`hooks::RunObserver`]), read runs back
//! ([`report`]). Everything else is `pub(crate)`. The modules the workspace's end-to-end
//! suite and benchmarks drive directly — the hook dispatcher, registry, plugin loader and
//! isolation, the MCP door, the fixture world, deadlines — are public only with the
//! `internals` feature, which the workspace's dev builds turn on; `unreachable_pub` is
//! checked there, so a `pub` that nothing outside can reach does not land.
#![cfg_attr(feature = "internals", warn(unreachable_pub))]

/// A module that is public with the `internals` feature (for the workspace's tests and
/// benchmarks) and private to the crate otherwise.
macro_rules! internal_mod {
    ($name:ident) => {
        #[cfg(feature = "internals")]
        #[doc(hidden)]
        pub mod $name;
        #[cfg(not(feature = "internals"))]
        pub(crate) mod $name;
    };
}

pub mod cli;
pub mod clock;
internal_mod!(deadlines);
pub mod events;
pub mod exit;
pub mod hooks;
pub mod interrupt;
pub(crate) mod judge;
pub(crate) mod limits;
pub mod pack;
pub(crate) mod procs;
pub mod report;
pub mod runner;
pub mod runtime;
pub mod sandbox;
pub(crate) mod score;
pub(crate) mod secrets;
pub(crate) mod store;
pub(crate) mod strict;
pub(crate) mod term;
internal_mod!(world);
pub(crate) mod view;
