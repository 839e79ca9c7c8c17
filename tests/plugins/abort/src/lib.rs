//! Built with `-C panic=abort` by the test suite; the host must refuse it before any call,
//! since a panic here could not be caught.

use windtunnel_sdk::{Context, Hook, Result, export_hooks, hook};

#[derive(Default)]
pub struct AbortHook;

#[hook]
impl Hook for AbortHook {
    const NAME: &'static str = "abort_hook";

    fn on_run_end(&mut self, _ctx: &Context<'_>) -> Result {
        Ok(())
    }
}

export_hooks!(AbortHook);
