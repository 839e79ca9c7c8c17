//! Panics at every lifecycle point: the host must survive and record a warning.

use windtunnel_sdk::{Context, Hook, Result, export_hooks, hook};

#[derive(Default)]
pub struct Panicky;

#[hook]
impl Hook for Panicky {
    const NAME: &'static str = "panicky";

    fn on_provisioned(&mut self, _ctx: &Context<'_>) -> Result {
        panic!("panicky hook exploded in on_provisioned")
    }
    fn on_run_start(&mut self, _ctx: &Context<'_>) -> Result {
        panic!("panicky hook exploded in on_run_start")
    }
    fn on_run_scored(&mut self, _ctx: &Context<'_>) -> Result {
        panic!("panicky hook exploded in on_run_scored")
    }
    fn on_run_end(&mut self, _ctx: &Context<'_>) -> Result {
        panic!("panicky hook exploded in on_run_end")
    }
}

export_hooks!(Panicky);
