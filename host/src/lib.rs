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
//! 5. [`runner`] — the run loop, the only author of a sweep's events;
//! 6. [`cli`] — one file per subcommand and the one place that maps errors to exit codes.

pub mod cli;
pub mod clock;
pub mod deadlines;
pub mod events;
pub mod exit;
pub mod hooks;
pub mod interrupt;
pub mod limits;
pub mod pack;
pub mod procs;
pub mod report;
pub mod runner;
pub mod runtime;
pub mod score;
pub mod secrets;
pub mod store;
pub mod strict;
pub mod term;
pub mod world;
