//! The statistics behind reports and comparisons: Wilson score intervals for a pass rate,
//! Fisher's exact test for the difference of two pass rates, and the unbiased pass^k and
//! pass@k estimators. Distributions come from `statrs`; this module only combines them.
//! Formulas and their sources are in docs/reports.md.

use statrs::distribution::{ContinuousCDF, Discrete, Hypergeometric, Normal};

/// The two-sided standard-normal quantile for confidence level `1 - alpha`
/// (1.959964… for alpha = 0.05).
pub fn z_for(alpha: f64) -> f64 {
    let normal = Normal::new(0.0, 1.0).expect("the standard normal exists");
    normal.inverse_cdf(1.0 - alpha / 2.0)
}

/// The Wilson score interval for `passed` successes out of `runs` at confidence `1 - alpha`
/// (Wilson 1927; method 3 of Newcombe 1998, without continuity correction). `None` with no
/// runs.
pub fn wilson(passed: u64, runs: u64, alpha: f64) -> Option<(f64, f64)> {
    if runs == 0 {
        return None;
    }
    let n = runs as f64;
    let p = passed as f64 / n;
    let z = z_for(alpha);
    let z2 = z * z;
    let centre = (p + z2 / (2.0 * n)) / (1.0 + z2 / n);
    let half = z / (1.0 + z2 / n) * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt();
    Some(((centre - half).max(0.0), (centre + half).min(1.0)))
}

/// One-sided p-values of Fisher's exact test for BASE (`a`) against NEW (`b`): with the
/// margins fixed, the probability that NEW passes at most as often as it did (`lower`: the
/// evidence of a regression) and at least as often (`upper`: of an improvement). Both 1 when
/// a side has no runs.
pub fn fisher_one_sided(a_pass: u64, a_runs: u64, b_pass: u64, b_runs: u64) -> (f64, f64) {
    if a_runs == 0 || b_runs == 0 {
        return (1.0, 1.0);
    }
    let population = a_runs + b_runs;
    let successes = a_pass + b_pass;
    let Ok(dist) = Hypergeometric::new(population, successes, b_runs) else {
        return (1.0, 1.0);
    };
    let lo = successes.saturating_sub(a_runs);
    let hi = successes.min(b_runs);
    let lower: f64 = (lo..=b_pass).map(|x| dist.pmf(x)).sum();
    let upper: f64 = (b_pass..=hi).map(|x| dist.pmf(x)).sum();
    (lower.min(1.0), upper.min(1.0))
}

/// The smallest one-sided p-value Fisher's test can give for `a_runs` against `b_runs`:
/// every BASE run passed and every NEW run failed (or the other way round; equal).
pub fn fisher_one_sided_floor(a_runs: u64, b_runs: u64) -> f64 {
    fisher_one_sided(a_runs, a_runs, 0, b_runs).0
}

/// How p-values of many scenarios are adjusted so that the comparison as a whole keeps its
/// error rate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Correction {
    /// Holm's step-down procedure: the chance of any false alarm (family-wise error) stays
    /// at most alpha, whatever the scenarios' dependence.
    Holm,
    /// Benjamini–Hochberg: the expected share of false alarms among the alarms (false
    /// discovery rate) stays at most alpha; with no real change anywhere that is the chance
    /// of any false alarm too. More power than Holm on many real changes.
    Bh,
    /// None: each scenario on its own (the false-alarm chance grows with the pack).
    None,
}

/// `p` adjusted for multiplicity: a scenario is significant at level `alpha` when its
/// adjusted p-value is below `alpha`.
pub fn adjust(p: &[f64], correction: Correction) -> Vec<f64> {
    let m = p.len();
    let mut order: Vec<usize> = (0..m).collect();
    order.sort_by(|&i, &j| p[i].total_cmp(&p[j]).then(i.cmp(&j)));
    let mut out = vec![1.0; m];
    match correction {
        Correction::None => out.copy_from_slice(p),
        Correction::Holm => {
            let mut running = 0.0f64;
            for (rank, &i) in order.iter().enumerate() {
                running = running.max(((m - rank) as f64 * p[i]).min(1.0));
                out[i] = running;
            }
        }
        Correction::Bh => {
            let mut running = 1.0f64;
            for (rank, &i) in order.iter().enumerate().rev() {
                running = running.min((m as f64 / (rank + 1) as f64 * p[i]).min(1.0));
                out[i] = running;
            }
        }
    }
    out
}

/// The Cochran–Mantel–Haenszel test across scenarios (strata), one-sided for a regression:
/// are NEW's passes, over all scenarios together, fewer than equal pass rates would give?
/// Each scenario `(base_pass, base_runs, new_pass, new_runs)` contributes NEW's passes, their
/// expectation and hypergeometric variance under no change; `z` is the standardized total
/// with a continuity correction of ½ toward no change, and the p-value its lower normal tail.
/// A broad small drop that no single scenario shows is caught here. `(z, p)`; `(0, 1)` when
/// no scenario has runs on both sides and a mixed outcome.
pub fn cmh_regression(strata: &[(u64, u64, u64, u64)]) -> (f64, f64) {
    let (mut diff, mut var) = (0.0f64, 0.0f64);
    for &(bp, bn, np, nn) in strata {
        let total = (bn + nn) as f64;
        if bn == 0 || nn == 0 || total < 2.0 {
            continue;
        }
        let passes = (bp + np) as f64;
        let expected = nn as f64 * passes / total;
        let v = bn as f64 * nn as f64 * passes * (total - passes) / (total * total * (total - 1.0));
        diff += np as f64 - expected;
        var += v;
    }
    if var <= 0.0 {
        return (0.0, 1.0);
    }
    let z = (diff + 0.5) / var.sqrt();
    let normal = Normal::new(0.0, 1.0).expect("the standard normal exists");
    (z, normal.cdf(z))
}

/// The fewest runs per side (equal on both) at which some outcome could reach a one-sided
/// `p < alpha`.
pub fn runs_needed_one_sided(alpha: f64) -> u64 {
    (1..=1000)
        .find(|&n| fisher_one_sided_floor(n, n) < alpha)
        .unwrap_or(1000)
}

/// pass^k: the probability that `k` runs drawn without replacement from these `runs` all
/// passed, C(c, k) / C(n, k), the unbiased estimator of the τ-bench paper. `None` unless
/// 1 ≤ k ≤ n.
pub fn pass_hat_k(passed: u64, runs: u64, k: u64) -> Option<f64> {
    if k == 0 || k > runs {
        return None;
    }
    Some(ratio_of_binomials(passed, runs, k))
}

/// pass@k: the probability that at least one of `k` runs drawn without replacement passed,
/// 1 − C(n − c, k) / C(n, k) (the unbiased estimator of the Codex paper). `None` unless
/// 1 ≤ k ≤ n.
pub fn pass_at_k(passed: u64, runs: u64, k: u64) -> Option<f64> {
    if k == 0 || k > runs {
        return None;
    }
    Some(1.0 - ratio_of_binomials(runs - passed.min(runs), runs, k))
}

/// C(m, k) / C(n, k) for m ≤ n as the product ∏ (m − i) / (n − i), which stays finite where
/// the binomials themselves overflow.
fn ratio_of_binomials(m: u64, n: u64, k: u64) -> f64 {
    if m < k {
        return 0.0;
    }
    (0..k).map(|i| (m - i) as f64 / (n - i) as f64).product()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    /// Newcombe (1998), "Two-sided confidence intervals for the single proportion", Table I,
    /// method 3 (Wilson score, no continuity correction), to the four places printed there.
    #[test]
    fn wilson_matches_newcombe_table_i() {
        for (c, n, lo, hi) in [
            (81, 263, 0.2553, 0.3662),
            (15, 148, 0.0624, 0.1605),
            (0, 20, 0.0, 0.1611),
            (1, 29, 0.0061, 0.1718),
        ] {
            let (l, h) = wilson(c, n, 0.05).unwrap();
            assert!(close(l, lo, 5e-5) && close(h, hi, 5e-5), "{c}/{n}: {l} {h}");
        }
        assert_eq!(wilson(0, 0, 0.05), None);
        assert!(close(wilson(5, 5, 0.05).unwrap().1, 1.0, 1e-12));
    }

    #[test]
    fn z_is_the_normal_quantile() {
        assert!(close(z_for(0.05), 1.959964, 1e-6));
        assert!(close(z_for(0.01), 2.575829, 1e-6));
    }

    /// Published two-sided values: Fisher's tea-tasting table (R's `fisher.test` example:
    /// p = 0.4857) and the 2×2 example of the Wikipedia article on the test
    /// ([[1, 9], [11, 3]]: p = 0.002759).
    /// Reference values from scipy 1.17.1 (`fisher_exact(alternative=...)`) and statsmodels
    /// 0.15.0 (`multipletests`, `StratifiedTable.test_null_odds(correction=True)`).
    #[test]
    fn one_sided_fisher_corrections_and_cmh_match_scipy_and_statsmodels() {
        for ((ap, an, bp, bn), (lower, upper)) in [
            ((9, 10, 4, 10), (0.028637770897832815, 0.9984520123839009)),
            ((7, 12, 9, 11), (0.9553102705613138, 0.22237178624310133)),
            ((20, 20, 13, 20), (0.004158004158004158, 1.0)),
            ((0, 5, 0, 5), (1.0, 1.0)),
            ((3, 7, 3, 7), (0.703962703962704, 0.703962703962704)),
        ] {
            let (l, u) = fisher_one_sided(ap, an, bp, bn);
            assert!(close(l, lower, 1e-12) && close(u, upper, 1e-12), "{l} {u}");
        }
        let p = [0.01, 0.04, 0.03, 0.005, 0.5, 0.2];
        let holm = adjust(&p, Correction::Holm);
        for (a, b) in holm.iter().zip([0.05, 0.12, 0.12, 0.03, 0.5, 0.4]) {
            assert!(close(*a, b, 1e-12), "{holm:?}");
        }
        let bh = adjust(&p, Correction::Bh);
        for (a, b) in bh.iter().zip([0.03, 0.06, 0.06, 0.03, 0.5, 0.24]) {
            assert!(close(*a, b, 1e-12), "{bh:?}");
        }
        assert_eq!(adjust(&p, Correction::None), p);
        let strata = [
            (9, 10, 8, 10),
            (7, 10, 5, 10),
            (10, 10, 9, 10),
            (6, 12, 4, 11),
        ];
        let (z, one_sided) = cmh_regression(&strata);
        assert!(close(z * z, 1.424089357825608, 1e-12), "{z}");
        // statrs and scipy normal tails agree to about 1e-11 here.
        assert!(close(one_sided, 0.11636574292481827, 1e-9), "{one_sided}");
    }

    #[test]
    fn fisher_matches_published_p_values() {
        // One-sided at 0.025 (the gate's half of 0.05): 4 vs 4 reaches 1/70.
        assert!(close(fisher_one_sided_floor(3, 3), 0.05, 1e-9));
        assert!(close(fisher_one_sided_floor(4, 4), 1.0 / 70.0, 1e-9));
        assert_eq!(runs_needed_one_sided(0.025), 4);
    }

    #[test]
    fn pass_k_estimators() {
        // τ-bench: C(c, k) / C(n, k).
        assert_eq!(pass_hat_k(3, 5, 1), Some(0.6));
        assert!(close(pass_hat_k(3, 5, 2).unwrap(), 3.0 / 10.0, 1e-12));
        assert_eq!(pass_hat_k(4, 5, 5), Some(0.0));
        assert_eq!(pass_hat_k(5, 5, 5), Some(1.0));
        assert_eq!(pass_hat_k(1, 5, 6), None);
        // pass@k = 1 − C(n − c, k) / C(n, k).
        assert!(close(pass_at_k(1, 5, 2).unwrap(), 1.0 - 6.0 / 10.0, 1e-12));
        assert_eq!(pass_at_k(0, 5, 5), Some(0.0));
        assert_eq!(pass_at_k(1, 5, 5), Some(1.0));
        // Finite where C(n, k) overflows an f64.
        let big = pass_hat_k(9_000, 10_000, 2_000).unwrap();
        assert!(big > 0.0 && big < 1e-50, "{big}");
    }
}
