//! What the report page shows of single runs, planned by the reader once the runs are in the
//! report's order: the triage clusters in the ladder's order, the runs each shows in full,
//! the sweep's span and its hooks. The page ([`super::super::html`]) only draws it.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use windtunnel_model::{HookProvenance, Verdict};

use super::key::{FAIL, Key, Listing, NO_CLUSTER};
use super::part::{Clusters, Extras, HookKey, hook_key};
use super::projection::read_projection;
use crate::report::load::LoadedRun;
use crate::report::triage::{self, Head, Rung};
use crate::score::Aggregator;

/// Most runs shown with full details on one page.
pub(crate) const MAX_DETAILED_RUNS: usize = 100;
/// Most runs shown with full details per triage cluster.
pub(crate) const MAX_PER_CLUSTER: usize = 5;
/// Most clusters listed; the rest are counted.
pub(crate) const MAX_CLUSTERS: usize = 200;

/// How many runs each listed cluster shows in full, in the ladder's order, from the runs each
/// has to show (`available`): at most [`MAX_PER_CLUSTER`], [`MAX_DETAILED_RUNS`] in all.
pub(crate) fn budgets(available: &[usize]) -> Vec<usize> {
    let mut left = MAX_DETAILED_RUNS;
    available
        .iter()
        .map(|&n| {
            let shown = n.min(MAX_PER_CLUSTER.min(left));
            left -= shown;
            shown
        })
        .collect()
}

/// Which of a cluster's `len` runs (their places in the report's order) it shows when it shows
/// `budget`: evenly spaced over the cluster.
pub(crate) fn positions(len: usize, budget: usize) -> Vec<usize> {
    if len <= budget {
        return (0..len).collect();
    }
    (0..budget).map(|i| i * len / budget).collect()
}

/// What the report page shows beyond the model's numbers, gathered by the reader.
#[derive(Clone, Debug, Default)]
pub(crate) struct Details {
    /// The earliest start and the latest end of a run.
    pub first: Option<String>,
    pub last: Option<String>,
    /// Each hook recorded, with the provenance the first run in the report's order recorded.
    pub hooks: Vec<HookProvenance>,
    /// Turn latencies of every run: milliseconds → turns.
    pub latencies: BTreeMap<u64, u64>,
    /// The clusters listed, at most [`MAX_CLUSTERS`] in the ladder's order, each with the runs
    /// it shows in full (read whole).
    pub listed: Vec<(Head, Vec<LoadedRun>)>,
    /// Clusters counted but not listed.
    pub hidden: usize,
    /// The runs that did not pass, over every cluster.
    pub not_passed: usize,
}

/// What the page's details are planned from, once the keys are in the report's order.
pub(super) struct Page<'a> {
    pub(super) listing: &'a Listing,
    pub(super) clusters: &'a Clusters,
    pub(super) cluster_runs: &'a [usize],
    pub(super) cluster_first: &'a [Option<usize>],
    pub(super) aggs: &'a BTreeMap<String, Aggregator>,
    pub(super) scenario_errors: &'a [crate::report::ScenarioError],
}

impl Page<'_> {
    /// Everything the page shows beyond the numbers; `clean` as [`Page::extras`] takes it.
    pub(super) fn all(&self, mut extras: Extras, clean: bool) -> Details {
        let mut latencies: BTreeMap<u64, u64> = BTreeMap::new();
        for a in self.aggs.values() {
            for (&ms, &n) in a.latencies() {
                *latencies.entry(ms).or_default() += n;
            }
        }
        let mut details = self.details(latencies);
        self.extras(&mut extras, clean);
        details.first = extras.first;
        details.last = extras.last;
        details.hooks = extras.hooks.into_values().map(|(h, _)| h).collect();
        details
    }

    /// The clusters in the ladder's order, each listed one with its evidence (from its first
    /// run, read again) and the runs it shows in full.
    pub(super) fn details(&self, latencies: BTreeMap<u64, u64>) -> Details {
        let heads = self.heads();
        // Triage's stable sort, of indexes in that order.
        let mut order: Vec<usize> = (0..heads.len()).collect();
        order.sort_by(|&a, &b| triage::head_order(&heads[a].0, &heads[b].0));
        let not_passed = heads.iter().map(|(h, _)| h.runs).sum();
        let hidden = heads.len().saturating_sub(MAX_CLUSTERS);
        let listed: Vec<usize> = order.into_iter().take(MAX_CLUSTERS).collect();
        let picked = self.picked(&heads, &listed);
        let artifacts = self.listing.artifacts(picked.values().flatten().copied());
        let listed = listed
            .into_iter()
            .map(|i| {
                let (mut head, cluster) = heads[i].clone();
                let Some(c) = cluster else {
                    return (head, Vec::new());
                };
                self.judge_first(&mut head, c);
                let runs = picked
                    .get(&c)
                    .into_iter()
                    .flatten()
                    .filter_map(|&i| self.listing.load(&self.listing.keys[i], &artifacts).ok())
                    .collect();
                (head, runs)
            })
            .collect();
        Details {
            first: None,
            last: None,
            hooks: Vec::new(),
            latencies,
            listed,
            hidden,
            not_passed,
        }
    }

    /// Every cluster with runs (with its number) and every scenario that could not run (with
    /// none), in triage's order before its sort: scenario, failed layers, reason.
    fn heads(&self) -> Vec<(Head, Option<usize>)> {
        let mut ids: Vec<usize> = (0..self.clusters.keys.len())
            .filter(|&c| self.cluster_runs[c] > 0)
            .collect();
        ids.sort_by(|&a, &b| {
            let (a, b) = (&self.clusters.keys[a], &self.clusters.keys[b]);
            (&a.scenario, &a.layers, &a.reason).cmp(&(&b.scenario, &b.layers, &b.reason))
        });
        let mut heads: Vec<(Head, Option<usize>)> = ids
            .iter()
            .map(|&c| {
                let key = &self.clusters.keys[c];
                let first = self.cluster_first[c].map(|i| &self.listing.keys[i]);
                let head = Head {
                    scenario_id: key.scenario.clone(),
                    verdict: Verdict::Error,
                    failed_layers: key.layers.iter().map(|l| (*l).to_owned()).collect(),
                    reason: key.reason.clone(),
                    rung: first.map_or(Rung::Wiring, Key::rung),
                    evidence: String::new(),
                    runs: self.cluster_runs[c],
                    of: self
                        .aggs
                        .get(&key.scenario)
                        .map_or(0, |a| a.runs() as usize),
                };
                (head, Some(c))
            })
            .collect();
        heads.extend(
            self.scenario_errors
                .iter()
                .map(|e| (Head::of_scenario_error(e), None)),
        );
        heads
    }

    /// The runs each listed cluster shows in full (indexes of keys, by cluster): its budget's
    /// worth, evenly spaced, found in one walk of the listing.
    fn picked(
        &self,
        heads: &[(Head, Option<usize>)],
        listed: &[usize],
    ) -> HashMap<usize, Vec<usize>> {
        let available: Vec<usize> = listed
            .iter()
            .map(|&i| {
                if heads[i].1.is_some() {
                    heads[i].0.runs
                } else {
                    0
                }
            })
            .collect();
        let budgets = budgets(&available);
        let mut wanted: HashMap<usize, (Vec<usize>, usize)> = HashMap::new();
        for (&i, (&len, &b)) in listed.iter().zip(available.iter().zip(&budgets)) {
            if let (Some(c), true) = (heads[i].1, b > 0) {
                wanted.insert(c, (positions(len, b), 0));
            }
        }
        let mut picked: HashMap<usize, Vec<usize>> = HashMap::new();
        if wanted.is_empty() {
            return picked;
        }
        let mut seen = vec![0usize; self.clusters.keys.len()];
        for (i, k) in self.listing.keys.iter().enumerate() {
            if k.cluster == NO_CLUSTER {
                continue;
            }
            let c = k.cluster as usize;
            let at = seen[c];
            seen[c] += 1;
            if let Some((positions, next)) = wanted.get_mut(&c)
                && positions.get(*next) == Some(&at)
            {
                *next += 1;
                picked.entry(c).or_default().push(i);
            }
        }
        picked
    }

    /// A cluster's verdict and evidence, from its first run judged again.
    fn judge_first(&self, head: &mut Head, cluster: usize) {
        let first = self.cluster_first[cluster].map(|i| &self.listing.keys[i]);
        match first
            .and_then(|k| self.listing.load(k, &HashMap::new()).ok())
            .and_then(|run| triage::judge(&run))
        {
            Some((verdict, _, _, _, evidence)) => {
                head.verdict = verdict;
                head.evidence = evidence;
            }
            None => {
                head.verdict = match first.map(Key::verdict) {
                    Some(FAIL) => Verdict::Fail,
                    _ => Verdict::Error,
                };
                head.evidence = "the run's files changed while the report read them".to_owned();
            }
        }
    }

    /// Settles what the readers gathered from every file for the runs counted: a hook
    /// recorded differently by different runs takes the first run's provenance in the
    /// report's order, and when a duplicate differed from the run it repeats (`clean` false),
    /// the span and hooks are gathered again from the runs counted alone.
    pub(super) fn extras(&self, extras: &mut Extras, clean: bool) {
        let listing = self.listing;
        if !clean {
            let mut again = Extras::default();
            for k in &listing.keys {
                if let Ok(t) = read_projection(&listing.path(k)) {
                    again.add(&t);
                }
            }
            *extras = again;
        }
        let mut open: BTreeSet<HookKey> = extras
            .hooks
            .iter()
            .filter(|(_, (_, varies))| *varies)
            .map(|(k, _)| k.clone())
            .collect();
        for k in &listing.keys {
            if open.is_empty() {
                break;
            }
            let Ok(t) = read_projection(&listing.path(k)) else {
                continue;
            };
            for h in t.hooks.iter().flatten() {
                let key = hook_key(h);
                if open.remove(&key)
                    && let Some(slot) = extras.hooks.get_mut(&key)
                {
                    slot.0 = h.clone();
                }
            }
        }
    }
}
