//! Hooks that ship inside `wt`. They are written against the public SDK exactly like
//! plugins and go through the same FFI adapter, so built-ins and plugins share one path.

pub mod debrief;
pub mod observer;
