//! One library exporting two hooks with different points.

use windtunnel_sdk::{Context, Hook, Result, export_hooks, hook};

#[derive(Default)]
pub struct PairFirst;

#[hook]
impl Hook for PairFirst {
    const NAME: &'static str = "pair_first";

    fn on_provisioned(&mut self, ctx: &Context<'_>) -> Result {
        ctx.warn("pair_first saw on_provisioned");
        Ok(())
    }
}

#[derive(Default)]
pub struct PairSecond;

#[hook]
impl Hook for PairSecond {
    const NAME: &'static str = "pair_second";

    fn on_scenario_end(&mut self, _ctx: &Context<'_>) -> Result {
        Ok(())
    }
    fn on_pack_end(&mut self, _ctx: &Context<'_>) -> Result {
        Ok(())
    }
}

export_hooks!(PairFirst, PairSecond);
