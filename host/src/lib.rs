//! Wind Tunnel: a harness that evaluates AI agents.
//!
//! The `wt` binary is a thin shell over this library. Where things live:
//!
//! - [`cli`] — one file per subcommand (`run`, `report`, `rescore`, `hooks`, …) and the one
//!   place that maps errors to exit codes ([`exit`]).
//! - [`plugin`] — finding, vetting and loading hook plugins (`cdylib`s built against the SDK).
//! - [`registry`] — built-in hooks plus plugins, and `--hook NAME` resolution.
//! - [`isolate`] — running a plugin hook in a child process (`--isolate-hooks`).
//! - [`pack`], [`runtime`], [`runner`], [`score`], [`store`], [`report`] — the evaluation
//!   core: scenarios, the agents they drive, the run loop, the four scorer layers, files on
//!   disk and the reports over them.
//! - [`mcp`] — the fixture world served over MCP to agents outside `wt` (`http`, `process`).

pub mod cli;
pub mod clock;
pub mod deadlines;
pub mod dispatch;
pub mod events;
pub mod exit;
pub mod hooks;
pub mod interrupt;
pub mod isolate;
pub mod limits;
pub mod mcp;
pub mod pack;
pub mod plugin;
pub mod registry;
pub mod report;
pub mod runner;
pub mod runtime;
pub mod score;
pub mod secrets;
pub mod store;
pub mod triage;
pub mod world;
