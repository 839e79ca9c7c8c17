//! The end-to-end suite: builds the workspace's binaries and plugins from source and drives
//! the real `wt` binary.

mod agent_processes;
mod bounds;
mod config;
mod endpoints;
mod escaping;
mod files;
mod fixtures;
mod gate;
mod gateway;
mod gateway_faults;
mod harness;
mod hook_faults;
mod hooks;
mod isolation;
mod judging;
mod loader;
mod logs;
mod outputs;
mod plugins_cli;
mod process;
mod reading;
mod reports;
mod rules;
mod runner;
mod sandbox;
mod scale;
mod sdk_compat;
mod sdk_product;
mod secrets;
mod sides;
mod signals;
mod turns;
mod view;
mod world_checks;
mod worlds;
