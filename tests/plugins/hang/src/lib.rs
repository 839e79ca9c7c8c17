//! Blocks forever in `on_run_start`: the host must abandon and quarantine it.

use windtunnel_sdk::{Context, Hook, Result, export_hooks, hook};

#[derive(Default)]
pub struct Hang;

#[hook]
impl Hook for Hang {
    const NAME: &'static str = "hang";

    fn on_run_start(&mut self, _ctx: &Context<'_>) -> Result {
        loop {
            std::thread::park();
        }
    }
    fn on_run_end(&mut self, _ctx: &Context<'_>) -> Result {
        Ok(())
    }
}

export_hooks!(Hang);
