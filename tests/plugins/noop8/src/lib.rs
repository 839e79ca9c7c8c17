//! Eight hooks that do nothing at `on_run_end`, one that does nothing at every lifecycle
//! point, four turn observers that do nothing, and one that reads the trace and the score:
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

/// Does nothing at all six lifecycle points: the in-sweep cost of one active hook.
#[derive(Default)]
pub struct NoopAll;

#[hook]
impl Hook for NoopAll {
    const NAME: &'static str = "noopall";
    fn on_provisioned(&mut self, _ctx: &Context<'_>) -> Result {
        Ok(())
    }
    fn on_run_start(&mut self, _ctx: &Context<'_>) -> Result {
        Ok(())
    }
    fn on_run_scored(&mut self, _ctx: &Context<'_>) -> Result {
        Ok(())
    }
    fn on_run_end(&mut self, _ctx: &Context<'_>) -> Result {
        Ok(())
    }
    fn on_scenario_end(&mut self, _ctx: &Context<'_>) -> Result {
        Ok(())
    }
    fn on_pack_end(&mut self, _ctx: &Context<'_>) -> Result {
        Ok(())
    }
}

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

/// Reads the full context at `on_run_end` — the trace and the score, as JSON — and does
/// nothing with it: the isolation benchmark's "full context" subject.
#[derive(Default)]
pub struct Reader;

#[hook]
impl Hook for Reader {
    const NAME: &'static str = "reader";
    fn on_run_end(&mut self, ctx: &Context<'_>) -> Result {
        let trace = ctx.raw("trace").map_or(0, |t| t.len());
        let score = ctx.raw("score").map_or(0, |s| s.len());
        std::hint::black_box(trace + score);
        Ok(())
    }
}

export_hooks!(
    Noop0, Noop1, Noop2, Noop3, Noop4, Noop5, Noop6, Noop7, NoopAll, TurnNoop0, TurnNoop1,
    TurnNoop2, TurnNoop3, Reader
);
