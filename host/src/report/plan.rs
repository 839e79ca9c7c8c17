//! `wt compare --plan`: how many runs a side the gate needs to catch a drop, and which drop
//! a given number of runs can catch — for the gate as it decides ([`super::gate`]).
//!
//! - **One scenario drops** from `p0` to `p1` among `m`: found when its adjusted regression
//!   p-value is below α/2; with the other scenarios unchanged its p-value is the smallest,
//!   so Holm (and BH) hold it to α/2 / m. The power is exact: the sum, over every outcome of
//!   both sides (binomial), of the outcomes whose one-sided Fisher p-value is below that.
//!   Above 400 runs a side the normal approximation of the two-proportion test is used.
//! - **Every scenario drops** by the same amount: the pack test at α/2, by its normal
//!   approximation (its z grows with √(m·n)).
//!
//! The pack test can also find a single large drop among few scenarios; the plan leaves that
//! out, so the runs it asks for are enough.

use serde::Serialize;
use statrs::distribution::{Binomial, ContinuousCDF, Discrete, Normal};

use super::gate::SCENARIO_SHARE;
use super::stats;

/// The most runs a side the exact computation handles.
const EXACT_UP_TO: u64 = 400;
/// The most runs a side a plan proposes.
const MAX_RUNS: u64 = 100_000;

/// The power of the gate against one scenario dropping from `p0` to `p1`, with `n` runs a
/// side, its p-value held to `level`.
pub(crate) fn power_one(n: u64, p0: f64, p1: f64, level: f64) -> f64 {
    if n == 0 {
        return 0.0;
    }
    if n > EXACT_UP_TO {
        return normal_power(n as f64, p0, p1, level);
    }
    let (Ok(base), Ok(new)) = (Binomial::new(p0, n), Binomial::new(p1, n)) else {
        return 0.0;
    };
    let mut cdf = Vec::with_capacity(n as usize + 1);
    let mut acc = 0.0;
    for x in 0..=n {
        acc += new.pmf(x);
        cdf.push(acc);
    }
    // For each BASE outcome, NEW outcomes up to a cut are significant (the one-sided
    // p-value grows with NEW's passes), and the cut never moves down as BASE passes more.
    let mut power = 0.0;
    let mut cut: i64 = -1;
    for xb in 0..=n {
        while cut < n as i64 && stats::fisher_one_sided(xb, n, (cut + 1) as u64, n).0 < level {
            cut += 1;
        }
        if cut >= 0 {
            power += base.pmf(xb) * cdf[cut as usize];
        }
    }
    power.min(1.0)
}

/// The two-proportion z-test's power (one-sided, `level`), for large `n`.
fn normal_power(n: f64, p0: f64, p1: f64, level: f64) -> f64 {
    let normal = Normal::new(0.0, 1.0).expect("the standard normal exists");
    let pbar = (p0 + p1) / 2.0;
    let z_a = normal.inverse_cdf(1.0 - level);
    let se0 = (2.0 * pbar * (1.0 - pbar) / n).sqrt();
    let se1 = ((p0 * (1.0 - p0) + p1 * (1.0 - p1)) / n).sqrt();
    if se1 <= 0.0 {
        return if p0 > p1 { 1.0 } else { 0.0 };
    }
    normal.cdf(((p0 - p1) - z_a * se0) / se1)
}

/// The pack test's power against every one of `m` scenarios dropping from `p0` to `p1`.
pub(crate) fn power_pack(m: u64, n: u64, p0: f64, p1: f64, level: f64) -> f64 {
    let normal = Normal::new(0.0, 1.0).expect("the standard normal exists");
    let pbar = (p0 + p1) / 2.0;
    let var = pbar * (1.0 - pbar) / 2.0;
    if var <= 0.0 || m == 0 || n == 0 {
        return 0.0;
    }
    let z = (p0 - p1) / 2.0 * ((m * n) as f64).sqrt() / var.sqrt();
    normal.cdf(z - normal.inverse_cdf(1.0 - level))
}

/// The fewest runs a side at which `power(n)` reaches `target`, or `None` past
/// [`MAX_RUNS`].
fn fewest(target: f64, power: impl Fn(u64) -> f64) -> Option<u64> {
    let mut hi = 2;
    while power(hi) < target {
        hi *= 2;
        if hi > MAX_RUNS {
            return None;
        }
    }
    // The smallest n in (hi/2, hi] that reaches it (power is not strictly monotone in n:
    // discreteness), found by a linear scan over at most the last doubling.
    let lo = (hi / 2).max(1);
    let step = ((hi - lo) / 200).max(1);
    let mut n = lo;
    while n < hi && power(n) < target {
        n += step;
    }
    Some(n.min(hi))
}

/// A plan.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Plan {
    pub alpha: f64,
    pub power: f64,
    pub scenarios: u64,
    pub base_rate: f64,
    /// The drop asked about, or found for `runs`.
    pub drop: Option<f64>,
    /// Runs a side asked about, or found for `drop`.
    pub runs: Option<u64>,
    /// One scenario drops by `drop`: runs a side needed (for `drop`), or the smallest drop
    /// found with `power` (for `runs`).
    pub one_scenario: Option<f64>,
    /// Every scenario drops by `drop`: the same, for the pack test.
    pub every_scenario: Option<f64>,
    pub text: Vec<String>,
}

/// Answers "how many runs a side to catch a drop of `drop` from `base_rate`", or, with
/// `runs`, "what drop can `runs` runs a side catch", with probability `power`.
pub(crate) fn plan(
    alpha: f64,
    power: f64,
    scenarios: u64,
    base_rate: f64,
    drop: Option<f64>,
    runs: Option<u64>,
) -> Plan {
    let q = Question::new(alpha, power, scenarios, base_rate);
    let m = q.scenarios;
    let mut text = Vec::new();
    let (one, every) = match (drop, runs) {
        (Some(d), _) => q.runs_for_drop(d, &mut text),
        (None, Some(n)) => q.drop_for_runs(n, &mut text),
        (None, None) => (None, None),
    };
    text.push(if m > 1 {
        format!(
            "(the gate at α = {alpha}: one scenario held to α/2 / {m} = {:.2e} by the correction, the pack test to α/2 = {}, by its normal approximation)",
            q.scenario_level, q.pack_level
        )
    } else {
        format!(
            "(the gate at α = {alpha}: the scenario held to α/2 = {})",
            q.scenario_level
        )
    });
    Plan {
        alpha,
        power,
        scenarios: m,
        base_rate,
        drop,
        runs,
        one_scenario: one,
        every_scenario: every,
        text,
    }
}

/// What a plan is asked about: a pack of `scenarios` (at least one) passing at `base_rate`,
/// the levels the gate holds its tests to over it (a scenario's after the correction, and the
/// pack test's), and the power wanted.
struct Question {
    scenarios: u64,
    scenario_level: f64,
    pack_level: f64,
    power: f64,
    base_rate: f64,
}

impl Question {
    /// The question over `scenarios` scenarios for the gate at `alpha`.
    fn new(alpha: f64, power: f64, scenarios: u64, base_rate: f64) -> Question {
        let m = scenarios.max(1);
        Question {
            scenarios: m,
            scenario_level: alpha * SCENARIO_SHARE / m as f64,
            pack_level: alpha * (1.0 - SCENARIO_SHARE),
            power,
            base_rate,
        }
    }

    /// The runs a side the gate needs to catch a drop of `d`, in one scenario and in every
    /// one at once, said in `text`.
    fn runs_for_drop(&self, d: f64, text: &mut Vec<String>) -> (Option<f64>, Option<f64>) {
        let (m, base_rate, power) = (self.scenarios, self.base_rate, self.power);
        let p1 = (base_rate - d).max(0.0);
        let single = fewest(power, |n| power_one(n, base_rate, p1, self.scenario_level));
        let broad = fewest(power, |n| power_pack(m, n, base_rate, p1, self.pack_level));
        let shown = |n: Option<u64>| n.map_or(format!("more than {MAX_RUNS}"), |n| n.to_string());
        text.push(format!(
            "one scenario of {m} dropping from {} to {}: {} runs a side to catch it with {} power",
            whole_pct(base_rate),
            whole_pct(p1),
            shown(single),
            whole_pct(power)
        ));
        if m > 1 {
            text.push(format!(
                "every scenario dropping from {} to {}: {} runs a side (the pack test)",
                whole_pct(base_rate),
                whole_pct(p1),
                shown(broad)
            ));
        }
        (single.map(|n| n as f64), broad.map(|n| n as f64))
    }

    /// The smallest drop, in whole points, that `n` runs a side catch, in one scenario and in
    /// every one at once, said in `text`.
    fn drop_for_runs(&self, n: u64, text: &mut Vec<String>) -> (Option<f64>, Option<f64>) {
        let (m, base_rate, power) = (self.scenarios, self.base_rate, self.power);
        let smallest = |caught: &dyn Fn(f64) -> bool| {
            (1..=100)
                .map(|k| f64::from(k) / 100.0)
                .take_while(|d| *d <= base_rate + 1e-9)
                .find(|d| caught(*d))
        };
        let single =
            smallest(&|d| power_one(n, base_rate, base_rate - d, self.scenario_level) >= power);
        let broad =
            smallest(&|d| power_pack(m, n, base_rate, base_rate - d, self.pack_level) >= power);
        let shown = |d: Option<f64>| {
            d.map_or("none, down to 0%".to_owned(), |d| {
                format!(
                    "{} points (to {})",
                    (d * 100.0).round(),
                    whole_pct(base_rate - d)
                )
            })
        };
        text.push(format!(
            "with {n} runs a side, the smallest drop from {} in one scenario of {m} caught with {} power: {}",
            whole_pct(base_rate),
            whole_pct(power),
            shown(single)
        ));
        if m > 1 {
            text.push(format!(
                "the smallest drop in every scenario at once: {}",
                shown(broad)
            ));
        }
        (single, broad)
    }
}

/// `90%`: a rate in whole percent, as a plan states it.
fn whole_pct(x: f64) -> String {
    format!("{:.0}%", x * 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_power_matches_the_simulation() {
        // bench/compare_sim.sh: one scenario, 0.9 → 0.4 at 20 runs a side: 90.1 %; 0.9 → 0.7
        // at 20: 25.0 % (2,000 draws each, ±1 %).
        let p = power_one(20, 0.9, 0.4, 0.025);
        assert!((p - 0.901).abs() < 0.02, "{p}");
        let p = power_one(20, 0.9, 0.7, 0.025);
        assert!((p - 0.25).abs() < 0.02, "{p}");
        // More runs, more power; exact and normal agree where they meet.
        assert!(power_one(40, 0.9, 0.7, 0.025) > power_one(20, 0.9, 0.7, 0.025));
        let (exact, normal) = (
            power_one(400, 0.9, 0.85, 0.025),
            normal_power(400.0, 0.9, 0.85, 0.025),
        );
        assert!((exact - normal).abs() < 0.05, "{exact} {normal}");
    }

    #[test]
    fn plans_answer_both_questions_consistently() {
        let p = plan(0.05, 0.8, 30, 0.9, Some(0.2), None);
        let n = p.one_scenario.unwrap() as u64;
        // The runs it asks for reach the power; a few less do not.
        assert!(power_one(n, 0.9, 0.7, 0.025 / 30.0) >= 0.8);
        assert!(power_one(n * 3 / 4, 0.9, 0.7, 0.025 / 30.0) < 0.8);
        // And with those runs, a drop of 20 points (or less) is what it can catch.
        let back = plan(0.05, 0.8, 30, 0.9, None, Some(n));
        assert!(back.one_scenario.unwrap() <= 0.2 + 1e-9, "{back:?}");
        // A broad drop needs far fewer runs than a single one.
        assert!(p.every_scenario.unwrap() < p.one_scenario.unwrap());
    }
}
