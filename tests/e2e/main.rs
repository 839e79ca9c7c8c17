//! The end-to-end suite: builds the workspace's binaries and plugins from source and drives
//! the real `wt` binary.

mod gate;
mod gateway;
mod hardening;
mod harness;
mod hooks;
mod hostile;
mod isolation;
mod loader;
mod plugins_cli;
mod process;
mod reports;
mod rules;
mod runner;
mod scale;
mod sdk_compat;
mod sdk_product;
mod turns;
mod worlds;
