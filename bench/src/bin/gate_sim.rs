//! `bench/compare_sim.sh`'s simulation of `wt compare --gate`: a seeded simulation on packs of 1, 30 and 300 scenarios, through the gate's own decision
//! ([`crate::report::gate::decide`]), against the per-scenario rule it replaced (each
//! scenario on its own, two-sided Fisher at alpha). For each pack size and runs per side it
//! prints how often each rule fails the gate:
//!
//! - A/A: the same agent on both sides (every scenario passes with 0.7): a false alarm;
//! - one scenario drops (0.9 → 0.7, 0.9 → 0.4; the others stay at 0.9): power;
//! - every scenario drops 0.9 → 0.8 (a broad small drop): power.
//!
//! And `wt run --until-decided` against the same baseline draws (NEW's runs made one at a time, each
//! scenario stopping once its comparison is decided, at most `runs` runs): how often it finds
//! a regression, against the fixed-size design it curtails (each scenario at α/2 / m, every
//! run made), and the share of runs it saves.
//!
//! No network, no files; the seed fixes every draw.

use clap::Parser;
use statrs::distribution::{Discrete, Hypergeometric};
use windtunnel::report::gate::{self, Tally};
use windtunnel::report::stats::{self, Correction};

#[derive(Debug, Clone, Parser)]
struct Args {
    /// Simulated comparisons per cell.
    #[arg(long, default_value_t = 2000)]
    reps: u32,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[arg(long, value_delimiter = ',', default_value = "1,30,300")]
    scenarios: Vec<usize>,
    #[arg(long, value_delimiter = ',', default_value = "10,20")]
    runs: Vec<u64>,
    #[arg(long, default_value_t = 0.05)]
    alpha: f64,
    #[arg(long, value_enum, default_value_t = Correction::Holm)]
    correction: Correction,
}

/// splitmix64: small, seeded, and good enough for Bernoulli draws.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Passes out of `n` runs that each pass with `p`.
    fn binomial(&mut self, n: u64, p: f64) -> u64 {
        (0..n)
            .filter(|_| ((self.next() >> 11) as f64 / (1u64 << 53) as f64) < p)
            .count() as u64
    }
}

/// A case: each scenario's pass probability on BASE and on NEW.
struct Case {
    name: &'static str,
    rates: fn(usize, usize) -> (f64, f64),
}

const CASES: [Case; 4] = [
    Case {
        name: "A/A (0.7 = 0.7)",
        rates: |_, _| (0.7, 0.7),
    },
    Case {
        name: "one drops 0.9 → 0.7",
        rates: |i, _| if i == 0 { (0.9, 0.7) } else { (0.9, 0.9) },
    },
    Case {
        name: "one drops 0.9 → 0.4",
        rates: |i, _| if i == 0 { (0.9, 0.4) } else { (0.9, 0.9) },
    },
    Case {
        name: "all drop 0.9 → 0.8",
        rates: |_, _| (0.9, 0.8),
    },
];

fn main() {
    let args = Args::parse();
    let mut rng = Rng(args.seed);
    println!(
        "wt compare --gate, simulated: {} comparisons per cell, alpha {}, correction {:?}, seed {}",
        args.reps, args.alpha, args.correction, args.seed
    );
    println!(
        "{:<22} {:>9} {:>5}  {:>9} {:>9}  {:>6}  {:>9} {:>9} {:>11}",
        "case",
        "scenarios",
        "runs",
        "gate",
        "old rule",
        "±1 se",
        "fixed m",
        "sequential",
        "runs saved"
    );
    for case in &CASES {
        for &m in &args.scenarios {
            for &n in &args.runs {
                let (mut gate_fails, mut old_fails) = (0u32, 0u32);
                let (mut fixed_fails, mut seq_fails, mut seq_runs) = (0u32, 0u32, 0u64);
                let half = args.alpha * gate::SCENARIO_SHARE;
                let strict = half / m as f64;
                let mut tallies = vec![
                    Tally {
                        base_pass: 0,
                        base_runs: n,
                        new_pass: 0,
                        new_runs: n,
                    };
                    m
                ];
                for _ in 0..args.reps {
                    for (i, t) in tallies.iter_mut().enumerate() {
                        let (pb, pn) = (case.rates)(i, m);
                        t.base_pass = rng.binomial(n, pb);
                        t.new_pass = rng.binomial(n, pn);
                    }
                    if gate::decide(&tallies, args.alpha, args.correction).regressed() {
                        gate_fails += 1;
                    }
                    if old_rule_regressed(&tallies, args.alpha) {
                        old_fails += 1;
                    }
                    // The fixed design `--until-decided` curtails, on these draws; then the
                    // sequential one, NEW's runs drawn one at a time.
                    if tallies
                        .iter()
                        .any(|t| stats::fisher_one_sided(t.base_pass, n, t.new_pass, n).0 < strict)
                    {
                        fixed_fails += 1;
                    }
                    let mut found = false;
                    for (i, t) in tallies.iter().enumerate() {
                        let (_, pn) = (case.rates)(i, m);
                        let (mut passed, mut runs) = (0u64, 0u64);
                        loop {
                            passed += rng.binomial(1, pn);
                            runs += 1;
                            let (look, _) =
                                gate::look((t.base_pass, n), passed, runs, n, strict, half);
                            match look {
                                gate::Look::Continue => continue,
                                gate::Look::Regressed => found = true,
                                _ => {}
                            }
                            break;
                        }
                        seq_runs += runs;
                    }
                    if found {
                        seq_fails += 1;
                    }
                }
                let rate = |k: u32| f64::from(k) / f64::from(args.reps.max(1));
                let (g, o) = (rate(gate_fails), rate(old_fails));
                let se = (g.max(0.001) * (1.0 - g).max(0.001) / f64::from(args.reps.max(1))).sqrt();
                let planned = u64::from(args.reps) * m as u64 * n;
                let saved =
                    100.0 * (planned - seq_runs.min(planned)) as f64 / planned.max(1) as f64;
                println!(
                    "{:<22} {m:>9} {n:>5}  {:>8.1}% {:>8.1}%  {:>5.1}%  {:>8.1}% {:>9.1}% {:>10.0}%",
                    case.name,
                    g * 100.0,
                    o * 100.0,
                    se * 100.0,
                    rate(fixed_fails) * 100.0,
                    rate(seq_fails) * 100.0,
                    saved
                );
            }
        }
    }
}

/// The per-scenario rule `wt compare --gate` applied before this module: each scenario on its own, two-sided Fisher
/// at alpha, failing on any drop found.
fn old_rule_regressed(tallies: &[Tally], alpha: f64) -> bool {
    tallies.iter().any(|t| {
        t.new_pass * t.base_runs < t.base_pass * t.new_runs
            && fisher_floor(t.base_runs, t.new_runs) < alpha
            && fisher_two_sided(t.base_pass, t.base_runs, t.new_pass, t.new_runs) < alpha
    })
}

/// Two-sided p-value of Fisher's exact test on the 2×2 table
/// `[[a_pass, a_runs - a_pass], [b_pass, b_runs - b_pass]]`: the probability, with the
/// margins fixed, of every table at most as likely as the observed one (R's `fisher.test`
/// rule, including its relative tolerance of 1e-7 for ties). 1 when either side has no runs.
fn fisher_two_sided(a_pass: u64, a_runs: u64, b_pass: u64, b_runs: u64) -> f64 {
    if a_runs == 0 || b_runs == 0 {
        return 1.0;
    }
    let population = a_runs + b_runs;
    let successes = a_pass + b_pass;
    let Ok(dist) = Hypergeometric::new(population, successes, a_runs) else {
        return 1.0;
    };
    let lo = successes.saturating_sub(b_runs);
    let hi = successes.min(a_runs);
    let observed = dist.ln_pmf(a_pass);
    let cutoff = observed + (1.0f64 + 1e-7).ln();
    let p: f64 = (lo..=hi)
        .map(|x| dist.ln_pmf(x))
        .filter(|&l| l <= cutoff)
        .map(f64::exp)
        .sum();
    p.min(1.0)
}

/// The smallest p-value Fisher's test can give for `a_runs` against `b_runs` runs, whatever
/// the outcomes: one side all passes, the other all failures. When it is not below alpha, no
/// result could count as a real difference.
fn fisher_floor(a_runs: u64, b_runs: u64) -> f64 {
    fisher_two_sided(a_runs, a_runs, 0, b_runs).min(fisher_two_sided(0, a_runs, b_runs, b_runs))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    #[test]
    fn fisher_two_sided_matches_published_p_values() {
        assert!(close(fisher_two_sided(3, 4, 1, 4), 0.485_714, 1e-6));
        assert!(close(fisher_two_sided(1, 10, 11, 14), 0.002_759, 1e-6));
        // Symmetric in the sides and the outcome labels.
        assert!(close(fisher_two_sided(11, 14, 1, 10), 0.002_759, 1e-6));
        assert!(close(fisher_two_sided(9, 10, 3, 14), 0.002_759, 1e-6));
        assert_eq!(fisher_two_sided(3, 3, 3, 3), 1.0);
        assert_eq!(fisher_two_sided(0, 0, 3, 3), 1.0);
        // 3 vs 3 can never be significant at 0.05 (floor 0.1); 4 vs 4 can (2/70).
        assert!(close(fisher_floor(3, 3), 0.1, 1e-9));
        assert!(close(fisher_floor(4, 4), 2.0 / 70.0, 1e-9));
        // Large sweeps stay finite.
        let p = fisher_two_sided(5000, 10_000, 4800, 10_000);
        assert!(p > 0.0 && p < 0.01, "{p}");
    }

    #[test]
    fn the_old_rule_fails_on_any_significant_drop_alone() {
        let t = |base_pass, new_pass| Tally {
            base_pass,
            base_runs: 10,
            new_pass,
            new_runs: 10,
        };
        assert!(old_rule_regressed(&[t(10, 2)], 0.05));
        assert!(!old_rule_regressed(&[t(10, 8)], 0.05));
        assert!(
            !old_rule_regressed(&[t(2, 10)], 0.05),
            "an improvement is no regression"
        );
    }
}
