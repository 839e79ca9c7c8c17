//! Eight hooks that do nothing at `on_run_end`: the dispatch benchmark's subjects.

use windtunnel_sdk::{Context, Hook, Result, export_hooks, hook};

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

export_hooks!(Noop0, Noop1, Noop2, Noop3, Noop4, Noop5, Noop6, Noop7);
