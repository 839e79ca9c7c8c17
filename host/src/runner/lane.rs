//! A lane: one worker of the sweep's pool, with the observer its hook calls go through and
//! what it keeps from one of its runs to the next.

use std::sync::{Arc, Mutex};

use super::world::Kept;
use super::{RunConfig, lock};
use crate::hooks::RunObserver;

/// One worker of the pool, with the observer its hook calls go through.
pub(super) struct Lane {
    pub observer: Arc<dyn RunObserver>,
    /// The world server this lane keeps between its runs (`per = "lane"`).
    pub world: Mutex<Option<Kept>>,
    /// The hooks' provenance, lent to each of the lane's traces in turn (copied once per
    /// lane, not once per run).
    pub provenance: Mutex<Option<Vec<windtunnel_model::HookProvenance>>>,
}

impl Lane {
    /// The provenance a run's trace carries ([`RunConfig::hooks`]).
    pub(super) fn provenance(
        &self,
        cfg: &RunConfig,
    ) -> Option<Vec<windtunnel_model::HookProvenance>> {
        lock(&self.provenance).take().or_else(|| cfg.hooks.clone())
    }

    /// Takes back what [`Lane::provenance`] lent, once the run's trace is written.
    pub(super) fn keep_provenance(&self, p: Option<Vec<windtunnel_model::HookProvenance>>) {
        if p.is_some() {
            *lock(&self.provenance) = p;
        }
    }
}
