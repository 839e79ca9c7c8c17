//! The end-to-end suite: builds the workspace's plugins from source and drives the real
//! `wt` binary.

mod fixtures;
mod loader;
mod plugins_cli;
mod sdk_compat;
