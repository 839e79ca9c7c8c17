//! The data model shared by `wt` and hooks: what a scenario asks ([`Scenario`]), who is
//! tested ([`AgentConfig`]), what a run recorded ([`Trace`]), how it was judged ([`Score`])
//! and what a scenario's runs add up to ([`AggregateResult`]). It is the crate
//! `windtunnel-model`, which `wt` uses too, so there is exactly one definition of each; a
//! tool that only reads runs can depend on that crate alone.
//!
//! Forward compatibility: every type ignores fields it does not know, every enum that may
//! grow has an `Unknown` variant (the original is still in [`Context::raw`](crate::Context::raw)),
//! and growing types are `#[non_exhaustive]`: build them with their constructors or
//! `Default`, and give every `match` a `_` arm.

pub use windtunnel_model::*;
