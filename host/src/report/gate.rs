//! The merge gate's decision over a pack: which scenarios regressed or improved, whether the
//! pack as a whole regressed, and whether `wt compare --gate` fails — with the false-alarm
//! rate of the *whole* comparison at most alpha, however many scenarios the pack has.
//!
//! - Each scenario: one-sided Fisher exact tests, NEW worse than BASE (regression) and NEW
//!   better (improvement).
//! - Across scenarios: the regression p-values, and separately the improvement p-values,
//!   are adjusted ([`Correction`]: Holm by default, Benjamini–Hochberg, or none) and compared
//!   with half of alpha. A scenario whose run counts could not reach that level with any
//!   outcome is "not enough runs" and left out of the family.
//! - The pack: a one-sided Cochran–Mantel–Haenszel test over all scenarios at the other half
//!   of alpha, which catches a broad small drop that no scenario shows on its own.
//!
//! The gate fails when a scenario regressed or the pack did. With no real change anywhere,
//! each half raises a false alarm with probability at most alpha / 2 (Holm: family-wise; BH:
//! its false discovery rate, which then equals the family-wise rate), so the gate does with
//! probability at most alpha (Bonferroni over the two halves). `bench/compare_sim.sh`
//! measures it, and the power, against the old rule (each scenario on its own, two-sided).

use serde::Serialize;

use super::stats::{self, Correction};

/// The share of alpha spent on the scenarios; the pack test gets the rest.
pub const SCENARIO_SHARE: f64 = 0.5;

/// What happened to a scenario between BASE and NEW.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    Regressed,
    Improved,
    Unchanged,
    NotEnoughRuns,
}

impl Change {
    pub fn as_str(self) -> &'static str {
        match self {
            Change::Regressed => "regressed",
            Change::Improved => "improved",
            Change::Unchanged => "unchanged",
            Change::NotEnoughRuns => "not enough runs",
        }
    }
}

/// One scenario's runs: passes and runs of BASE, then of NEW.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tally {
    pub base_pass: u64,
    pub base_runs: u64,
    pub new_pass: u64,
    pub new_runs: u64,
}

/// One scenario's decision.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ScenarioDecision {
    /// One-sided p-value of a regression (NEW passes this rarely or more rarely).
    pub p_regression: f64,
    /// One-sided p-value of an improvement.
    pub p_improvement: f64,
    /// The p-value of the observed direction, adjusted across the pack (1 for a scenario
    /// left out of the family).
    pub p_adjusted: f64,
    pub change: Change,
}

/// The pack-level test.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct PackTest {
    /// The standardized difference of NEW's passes from what equal rates would give
    /// (negative: fewer passes).
    pub z: f64,
    /// Its one-sided p-value (a regression).
    pub p_value: f64,
    /// The level it is held to.
    pub alpha: f64,
    pub regressed: bool,
}

/// The gate's decision over a pack.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    /// Per scenario, in the order given.
    pub scenarios: Vec<ScenarioDecision>,
    pub pack: PackTest,
    /// The level each scenario's adjusted p-value is held to.
    pub scenario_alpha: f64,
}

impl Decision {
    /// Did the comparison find a regression (a scenario, or the pack)?
    pub fn regressed(&self) -> bool {
        self.pack.regressed || self.scenarios.iter().any(|s| s.change == Change::Regressed)
    }
}

/// Decides a pack: see the module's documentation.
pub fn decide(tallies: &[Tally], alpha: f64, correction: Correction) -> Decision {
    let scenario_alpha = alpha * SCENARIO_SHARE;
    let pack_alpha = alpha - scenario_alpha;
    let sided: Vec<(f64, f64)> = tallies
        .iter()
        .map(|t| stats::fisher_one_sided(t.base_pass, t.base_runs, t.new_pass, t.new_runs))
        .collect();
    // Scenarios that could reach the level with some outcome form the family.
    let in_family: Vec<usize> = (0..tallies.len())
        .filter(|&i| {
            let t = &tallies[i];
            stats::fisher_one_sided_floor(t.base_runs, t.new_runs) < scenario_alpha
        })
        .collect();
    let regression: Vec<f64> = in_family.iter().map(|&i| sided[i].0).collect();
    let improvement: Vec<f64> = in_family.iter().map(|&i| sided[i].1).collect();
    let (regression, improvement) = (
        stats::adjust(&regression, correction),
        stats::adjust(&improvement, correction),
    );
    let mut scenarios: Vec<ScenarioDecision> = sided
        .iter()
        .map(|&(p_regression, p_improvement)| ScenarioDecision {
            p_regression,
            p_improvement,
            p_adjusted: 1.0,
            change: Change::NotEnoughRuns,
        })
        .collect();
    for (k, &i) in in_family.iter().enumerate() {
        let t = &tallies[i];
        // NEW's rate against BASE's, compared without division.
        let worse = t.new_pass * t.base_runs < t.base_pass * t.new_runs;
        let better = t.new_pass * t.base_runs > t.base_pass * t.new_runs;
        let s = &mut scenarios[i];
        s.p_adjusted = if worse { regression[k] } else { improvement[k] };
        s.change = if worse && regression[k] < scenario_alpha {
            Change::Regressed
        } else if better && improvement[k] < scenario_alpha {
            Change::Improved
        } else {
            Change::Unchanged
        };
    }
    let strata: Vec<(u64, u64, u64, u64)> = tallies
        .iter()
        .map(|t| (t.base_pass, t.base_runs, t.new_pass, t.new_runs))
        .collect();
    let (z, p_value) = stats::cmh_regression(&strata);
    Decision {
        scenarios,
        pack: PackTest {
            z,
            p_value,
            alpha: pack_alpha,
            regressed: p_value < pack_alpha,
        },
        scenario_alpha,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(bp: u64, bn: u64, np: u64, nn: u64) -> Tally {
        Tally {
            base_pass: bp,
            base_runs: bn,
            new_pass: np,
            new_runs: nn,
        }
    }

    #[test]
    fn one_big_drop_is_a_regression_at_any_pack_size_and_noise_is_not() {
        let drop = t(10, 10, 2, 10);
        let d = decide(&[drop], 0.05, Correction::Holm);
        assert_eq!(d.scenarios[0].change, Change::Regressed);
        assert!(d.regressed());
        // Among 29 unchanged scenarios, still a regression (Holm's first step: 0.025 / 30).
        let mut pack = vec![t(9, 10, 9, 10); 29];
        pack.push(drop);
        let d = decide(&pack, 0.05, Correction::Holm);
        assert_eq!(
            d.scenarios[29].change,
            Change::Regressed,
            "{:?}",
            d.scenarios[29]
        );
        assert!(
            d.scenarios[..29]
                .iter()
                .all(|s| s.change == Change::Unchanged)
        );
        // A drop that is significant alone (one-sided p ≈ 0.016 < 0.025) is not among 30.
        let modest = t(10, 10, 5, 10);
        assert_eq!(
            decide(&[modest], 0.05, Correction::Holm).scenarios[0].change,
            Change::Regressed
        );
        let mut pack = vec![t(9, 10, 9, 10); 29];
        pack.push(modest);
        let d = decide(&pack, 0.05, Correction::Holm);
        assert_eq!(d.scenarios[29].change, Change::Unchanged);
        assert!(!d.regressed(), "{:?}", d.pack);
    }

    #[test]
    fn a_broad_small_drop_is_caught_by_the_pack_test() {
        // 9/10 → 8/10 in each of 30 scenarios: no scenario is significant, the pack is.
        let pack = vec![t(9, 10, 8, 10); 30];
        let d = decide(&pack, 0.05, Correction::Holm);
        assert!(d.scenarios.iter().all(|s| s.change == Change::Unchanged));
        assert!(d.pack.regressed, "{:?}", d.pack);
        assert!(d.pack.z < -2.0);
        // The same counts the other way round are no regression.
        let pack = vec![t(8, 10, 9, 10); 30];
        assert!(!decide(&pack, 0.05, Correction::Holm).regressed());
    }

    #[test]
    fn too_few_runs_are_left_out_of_the_family() {
        let d = decide(&[t(3, 3, 0, 3), t(10, 10, 0, 10)], 0.05, Correction::Holm);
        assert_eq!(d.scenarios[0].change, Change::NotEnoughRuns);
        assert_eq!(d.scenarios[0].p_adjusted, 1.0);
        // Holm over a family of one: the unadjusted p.
        assert_eq!(d.scenarios[1].p_adjusted, d.scenarios[1].p_regression);
    }
}

/// A look of `wt run --until-decided` at one scenario.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Look {
    /// The remaining runs could still change the decision.
    Continue,
    /// Regressed, whatever the remaining runs do.
    Regressed,
    /// Not regressed, whatever the remaining runs do.
    NotRegressed,
    /// All runs made, and the p-value falls between the strictest and the most lenient level
    /// the correction can hold it to: `wt compare` decides, with the other scenarios.
    Undetermined,
}

impl Look {
    pub fn as_str(self) -> &'static str {
        match self {
            Look::Continue => "continue",
            Look::Regressed => "regressed",
            Look::NotRegressed => "not_regressed",
            Look::Undetermined => "undetermined",
        }
    }
}

/// The sequential rule of `wt run --until-decided`: the gate's fixed-size test at `max_runs`
/// runs a side, *curtailed* — a scenario stops as soon as the runs it has not made cannot
/// change that test's outcome. Regressed is decided when NEW would be significantly worse
/// even if every remaining run passed, at `strict` (α/2 / m: Holm's strictest step, so the
/// scenario is regressed whatever the others do); not regressed when it would not be even if
/// every remaining run failed, at `lenient` (α/2: Holm's most lenient step). Each look only
/// computes early what the final test will say, so looks cost no error rate: the decisions
/// are those of the fixed-size design. Returns the look and the p-value if the remaining
/// runs split as the passes so far did.
pub fn look(
    base: (u64, u64),
    passed: u64,
    runs: u64,
    max_runs: u64,
    strict: f64,
    lenient: f64,
) -> (Look, f64) {
    let (bp, bn) = base;
    let left = max_runs.saturating_sub(runs);
    let total = runs + left;
    let best = stats::fisher_one_sided(bp, bn, passed + left, total).0;
    let worst = stats::fisher_one_sided(bp, bn, passed, total).0;
    let likely = if runs == 0 {
        worst
    } else {
        let expected = passed + (left as f64 * passed as f64 / runs as f64).round() as u64;
        stats::fisher_one_sided(bp, bn, expected.min(total), total).0
    };
    let look = if best < strict {
        Look::Regressed
    } else if worst >= lenient {
        Look::NotRegressed
    } else if left == 0 {
        Look::Undetermined
    } else {
        Look::Continue
    };
    (look, likely)
}

/// How many further runs a scenario needs at the least before a look could decide it: the
/// fewest `k` such that `k` more passes, or `k` more failures, make [`look`] say anything but
/// `Continue` (the last run, when no such `k` is shorter). Runs started beyond these could
/// only finish after a decision that came with the first `k`, so `wt run --until-decided`
/// keeps at most this many of a scenario's runs in flight. 0 when no run is left.
pub fn runs_to_decide(
    base: (u64, u64),
    passed: u64,
    runs: u64,
    max_runs: u64,
    strict: f64,
    lenient: f64,
) -> u64 {
    let left = max_runs.saturating_sub(runs);
    if left == 0 {
        return 0;
    }
    // The extremes suffice: any other split of `k` runs lies between them, and Fisher's
    // p-value moves one way with the passes. A decision possible after `k` runs stays
    // possible after more, and one is certain after `left`: a binary search finds the first.
    let decides = |k: u64| {
        look(base, passed + k, runs + k, max_runs, strict, lenient).0 != Look::Continue
            || look(base, passed, runs + k, max_runs, strict, lenient).0 != Look::Continue
    };
    let (mut lo, mut hi) = (1, left);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if decides(mid) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    lo
}

#[cfg(test)]
mod look_tests {
    use super::*;

    #[test]
    fn runs_to_decide_is_the_fewest_runs_after_which_some_outcome_decides() {
        for (base, max, strict) in [((19, 20), 20, 0.01), ((20, 20), 20, 0.05 / 2.0 / 30.0), ((7, 10), 30, 0.025)] {
            for runs in 0..=max {
                for passed in 0..=runs {
                    let (now, _) = look(base, passed, runs, max, strict, 0.025);
                    if now != Look::Continue {
                        continue;
                    }
                    let need = runs_to_decide(base, passed, runs, max, strict, 0.025);
                    let decided_after = |k: u64| {
                        (0..=k).any(|j| {
                            look(base, passed + j, runs + k, max, strict, 0.025).0 != Look::Continue
                        })
                    };
                    assert!(need >= 1 && need <= max - runs, "{passed}/{runs}: {need}");
                    assert!(decided_after(need), "{passed}/{runs}: nothing decides after {need}");
                    for k in 1..need {
                        assert!(!decided_after(k), "{passed}/{runs}: {k} < {need} runs decide");
                    }
                }
            }
        }
        // 16 passes of 20 decide a scenario as good as its 20/20 baseline; 7 failures would
        // decide it regressed sooner (at a 30-scenario pack's strictest level).
        assert_eq!(runs_to_decide((20, 20), 0, 0, 20, 0.05 / 2.0 / 30.0, 0.025), 9);
        assert_eq!(runs_to_decide((20, 20), 12, 12, 20, 0.05 / 2.0 / 30.0, 0.025), 4);
        assert_eq!(runs_to_decide((20, 20), 3, 20, 20, 0.01, 0.025), 0);
    }

    #[test]
    fn a_look_stops_only_when_the_remaining_runs_cannot_change_the_outcome() {
        let base = (19, 20);
        // Nothing known yet.
        assert_eq!(look(base, 0, 0, 20, 0.025, 0.025).0, Look::Continue);
        // 0 of 8 passed: even 12 more passes leave 12/20 against 19/20 — regressed.
        assert_eq!(look(base, 0, 8, 20, 0.025, 0.025).0, Look::Regressed);
        // 15 of 15 passed: even 5 failures leave 15/20 — never significant.
        assert_eq!(look(base, 15, 15, 20, 0.025, 0.025).0, Look::NotRegressed);
        // Close: keep going.
        assert_eq!(look(base, 12, 15, 20, 0.025, 0.025).0, Look::Continue);
        // Each early decision agrees with every way the remaining runs could go.
        for runs in 0..=20u64 {
            for passed in 0..=runs {
                let (l, _) = look(base, passed, runs, 20, 0.01, 0.025);
                let left = 20 - runs;
                for more in 0..=left {
                    let p = stats::fisher_one_sided(19, 20, passed + more, 20).0;
                    match l {
                        Look::Regressed => assert!(p < 0.01),
                        Look::NotRegressed => assert!(p >= 0.025),
                        _ => {}
                    }
                }
            }
        }
    }
}
