//! End-to-end suite: drives the real `wt` binary (built on first use, see `common`).

mod common;
mod runner;
