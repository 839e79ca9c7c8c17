//! Eight hooks that do nothing at `on_run_end`, and four turn observers that do nothing:
//! the benchmarks' subjects.

use windtunnel_sdk::{Context, Hook, Result, TurnCall, TurnResult, export_hooks, hook};

macro_rules! noop {
    ($($ty:ident = $name:literal),+) => {$(
        #[derive(Default)]
        pub struct $ty;

        #[hook]
        impl Hook for $ty {
            const NAME: &'static str = $name;
            fn on_run_end(&mut self, _ctx: &Context<'_>) -> Result {
                Ok(())
            }
        }
    )+};
}

noop!(
    Noop0 = "noop0",
    Noop1 = "noop1",
    Noop2 = "noop2",
    Noop3 = "noop3",
    Noop4 = "noop4",
    Noop5 = "noop5",
    Noop6 = "noop6",
    Noop7 = "noop7"
);

macro_rules! turn_noop {
    ($($ty:ident = $name:literal),+) => {$(
        #[derive(Default)]
        pub struct $ty;

        #[hook]
        impl Hook for $ty {
            const NAME: &'static str = $name;
            fn turn_begin(&mut self, _call: &TurnCall, _ctx: &Context<'_>) -> Result {
                Ok(())
            }
            fn turn_finish(&mut self, _result: &TurnResult, _ctx: &Context<'_>) -> Result {
                Ok(())
            }
        }
    )+};
}

turn_noop!(
    TurnNoop0 = "tnoop0",
    TurnNoop1 = "tnoop1",
    TurnNoop2 = "tnoop2",
    TurnNoop3 = "tnoop3"
);

export_hooks!(
    Noop0, Noop1, Noop2, Noop3, Noop4, Noop5, Noop6, Noop7, TurnNoop0, TurnNoop1, TurnNoop2,
    TurnNoop3
);
