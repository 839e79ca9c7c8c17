//! `wt compare`: two [`Report`]s (BASE and NEW), scenario by scenario and as a pack. Per
//! scenario: pass rates with Wilson intervals, their difference, one-sided Fisher tests
//! adjusted across the pack, a verdict (regressed / improved / unchanged / not enough runs),
//! which failure reasons appeared or disappeared per layer, and latency deltas; for the
//! pack, a stratified test of a broad drop ([`super::gate`]). Views: table, Markdown, JSON
//! (the model serialized) and HTML ([`super::html::compare_page`]).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use serde::Serialize;
use windtunnel_model::{LAYERS, RunUsage, SCHEMA_VERSION};

pub(crate) use super::gate::Change;
use super::gate::{self, PackTest, ScenarioDecision, Tally};
use super::stats::Correction;
use super::table::{dollars, md, md_code, p_is, p_shown, pct, rate_with_interval};
use super::{Report, ScenarioSummary, stats};
use crate::exit;
use std::collections::HashSet;

/// One side of a scenario's comparison.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct SideStats {
    pub runs: u32,
    pub passed: u32,
    pub failed: u32,
    pub errored: u32,
    pub pass_rate: Option<f64>,
    /// Wilson interval at the comparison's confidence level.
    pub interval: Option<[f64; 2]>,
    pub p50_ms: u64,
    pub p95_ms: u64,
}

impl SideStats {
    fn new(s: &ScenarioSummary, alpha: f64) -> SideStats {
        let a = &s.aggregate;
        SideStats {
            runs: a.runs,
            passed: a.passed,
            failed: a.failed,
            errored: a.errored,
            pass_rate: s.pass_rate,
            interval: stats::wilson(u64::from(a.passed), u64::from(a.runs), alpha)
                .map(|(l, h)| [l, h]),
            p50_ms: a.latency.p50_ms,
            p95_ms: a.latency.p95_ms,
        }
    }

    /// `3/5 60% [23–88]`.
    pub(crate) fn display(&self) -> String {
        format!(
            "{}/{} {}",
            self.passed,
            self.runs,
            rate_with_interval(self.pass_rate, self.interval)
        )
    }
}

/// A failure reason (layer and normalized detail) and how many runs of each side had it.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct ReasonChange {
    pub layer: String,
    pub reason: String,
    pub base_runs: u32,
    pub new_runs: u32,
}

/// A layer's failure counts on both sides.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct LayerChange {
    pub layer: String,
    pub base_failed: u32,
    pub new_failed: u32,
    /// `appeared` (no base run failed it), `disappeared` (no new run does), or `persists`.
    pub status: &'static str,
}

/// One scenario present on both sides.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct ScenarioComparison {
    pub scenario_id: String,
    pub base: SideStats,
    pub new: SideStats,
    /// NEW's pass rate minus BASE's.
    pub difference: f64,
    /// One-sided p-value of Fisher's exact test in the direction of the difference (of a
    /// regression when NEW passes less often, of an improvement otherwise).
    pub p_value: f64,
    /// `p_value` adjusted across the pack's scenarios (`correction`); 1 for a scenario
    /// without enough runs. The verdict compares it with `scenario_alpha`.
    pub p_adjusted: f64,
    pub verdict: Change,
    /// NEW's pass rate fell to `--fail-on-drop-to` or below from above it: the gate fails on
    /// it whatever the test says.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub dropped_to_floor: bool,
    /// The verdict in words.
    pub why: String,
    pub layers: Vec<LayerChange>,
    /// Failure reasons seen on one side only.
    pub appeared: Vec<ReasonChange>,
    pub disappeared: Vec<ReasonChange>,
    pub p50_delta_ms: i64,
    pub p95_delta_ms: i64,
}

/// A scenario present on one side only.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct OneSided {
    pub scenario_id: String,
    pub runs: u32,
    pub passed: u32,
}

/// What a side is made of.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct SideInfo {
    pub dirs: Vec<String>,
    pub agents: Vec<String>,
    pub packs: Vec<String>,
    pub sweeps: Vec<String>,
    pub runs: u64,
    pub passed: u64,
    /// Sweeps that may not have run to the end.
    pub partial_sweeps: Vec<String>,
    /// Why each of them may not have, in its order.
    #[serde(skip)]
    partial_reasons: Vec<String>,
    /// What the directories cannot account for (missing shards, empty directories).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub gaps: Vec<String>,
    /// The side's model calls and tokens, when `wt` saw any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<RunUsage>,
    /// What evaluating the side cost (simulated users, judges), when it made model calls.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub eval_usage: Option<RunUsage>,
}

impl SideInfo {
    fn new(dirs: &[String], r: &Report) -> SideInfo {
        SideInfo {
            dirs: dirs.to_vec(),
            agents: r.agents.clone(),
            packs: r.packs().into_iter().collect(),
            sweeps: r.sweeps.iter().map(|s| s.sweep_id.clone()).collect(),
            runs: r.pack.runs,
            passed: r.pack.passed,
            partial_sweeps: r.partial_sweeps().map(|s| s.sweep_id.clone()).collect(),
            partial_reasons: r
                .partial_sweeps()
                .filter_map(|s| s.partial_reason())
                .collect(),
            gaps: r.gaps.clone(),
            usage: r.usage.clone(),
            eval_usage: r.eval_usage.clone(),
        }
    }

    /// Tokens per run, and the cost per run when known, of `u` (the agent's usage or the
    /// evaluation's).
    fn per_run(&self, u: Option<&RunUsage>) -> Option<(f64, Option<f64>)> {
        let u = u?;
        let runs = self.runs.max(1) as f64;
        let tokens = (u.tokens.prompt_tokens + u.tokens.completion_tokens) as f64;
        Some((tokens / runs, u.cost_usd.map(|c| c / runs)))
    }

    /// `demo on pack demo: 6 runs in runs/ (sweep 1a2b…)`.
    pub(crate) fn describe(&self) -> String {
        self.describe_quoting(|s| s.to_owned())
    }

    /// [`SideInfo::describe`] with each outside string (agent, pack, directory) put through
    /// `quote`.
    fn describe_quoting(&self, quote: impl Fn(&str) -> String) -> String {
        let list = |v: &[String]| {
            if v.is_empty() {
                "?".to_owned()
            } else {
                v.iter().map(|s| quote(s)).collect::<Vec<_>>().join(", ")
            }
        };
        format!(
            "agent {} · pack {} · {}/{} runs passed · {}",
            list(&self.agents),
            list(&self.packs),
            self.passed,
            self.runs,
            self.dirs
                .iter()
                .map(|d| quote(d))
                .collect::<Vec<_>>()
                .join(" ")
        )
    }
}

/// Counts of verdicts.
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct Counts {
    pub regressed: usize,
    pub improved: usize,
    pub unchanged: usize,
    pub not_enough_runs: usize,
}

/// The comparison of BASE and NEW.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Comparison {
    pub schema_version: u32,
    /// The false-alarm rate of the whole comparison; intervals are at 1 − alpha.
    pub alpha: f64,
    /// How scenarios' p-values are adjusted across the pack.
    pub correction: Correction,
    /// The level each scenario's adjusted p-value is held to (half of alpha).
    pub scenario_alpha: f64,
    /// The pack-level test (Cochran–Mantel–Haenszel, one-sided) at the other half.
    pub pack: PackTest,
    pub base: SideInfo,
    pub new: SideInfo,
    /// Scenarios on both sides, regressions first; within a verdict, the largest change first.
    pub scenarios: Vec<ScenarioComparison>,
    pub only_in_base: Vec<OneSided>,
    pub only_in_new: Vec<OneSided>,
    pub counts: Counts,
    /// One sentence: what changed.
    pub summary: String,
    /// Why the comparison is incomplete, one line each (a side holds a partial sweep,
    /// scenarios on one side only): `--gate` is then 3.
    pub incomplete: Vec<String>,
    /// Things worth knowing that do not decide anything (a directory on both sides, runs
    /// shared by both).
    pub warnings: Vec<String>,
    /// The exit code of `--gate`: 3 when the comparison is incomplete, else 1 when a
    /// scenario or the pack regressed significantly, else 0.
    pub gate: u8,
}

/// How `wt compare` decides.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Settings {
    pub alpha: f64,
    pub correction: Correction,
    /// Scenarios on one side only do not make the comparison incomplete.
    pub allow_missing: bool,
    /// A scenario whose NEW pass rate is at or below this, from above it on BASE, fails the
    /// gate whatever the test says (`--fail-on-drop-to`).
    pub fail_on_drop_to: Option<f64>,
}

/// Why BASE and NEW are not the same test, when the traces (or journals) name their packs
/// and no pack is on both sides.
pub(crate) fn other_pack(
    (base_label, base): (&str, &BTreeSet<String>),
    (new_label, new): (&str, &BTreeSet<String>),
) -> Option<String> {
    if base.is_empty() || new.is_empty() || !base.is_disjoint(new) {
        return None;
    }
    let list = |v: &BTreeSet<String>| v.iter().cloned().collect::<Vec<_>>().join(", ");
    Some(format!(
        "{base_label} is of pack {} and {new_label} of pack {}: scenarios of the same id in other packs are other tests",
        list(base),
        list(new)
    ))
}

/// One warning per scenario whose definition (turns, expectations, world, tools) differs
/// between the sides, by the digests their traces record: a change in its pass rate may be
/// the edit, not the agent. `base` and `new` map scenarios to their digests; a scenario
/// whose traces record none on a side is not judged.
pub(crate) fn edited_scenarios(
    base: &BTreeMap<String, BTreeSet<String>>,
    new: &BTreeMap<String, BTreeSet<String>>,
    base_label: &str,
    new_label: &str,
) -> Vec<String> {
    base.iter()
        .filter_map(|(id, b)| {
            let n = new.get(id)?;
            (b != n).then(|| {
                format!(
                    "scenario {id} differs between {base_label} and {new_label} (its turns, expectations, world or tools were edited): a change in its pass rate may be the edit, not the agent"
                )
            })
        })
        .collect()
}

/// The directories given on both sides (canonically the same), one warning each: the sides
/// are then not two independent samples.
pub(crate) fn dirs_on_both_sides(base_dirs: &[String], new_dirs: &[String]) -> Vec<String> {
    let canonical = |d: &String| std::fs::canonicalize(d).unwrap_or_else(|_| d.into());
    let base_set: HashSet<_> = base_dirs.iter().map(canonical).collect();
    new_dirs
        .iter()
        .filter(|d| base_set.contains(&canonical(d)))
        .map(|d| format!("{d} is on both sides: the comparison is of a sample with itself"))
        .collect()
}

/// How many of NEW's runs have a run id also read on BASE's side, from the rows a report
/// holds (a scan counts them itself: `scan::Want::shared_with`).
#[cfg(test)]
pub(crate) fn shared_runs(base: &Report, new: &Report) -> usize {
    let base_ids: HashSet<&str> = base.runs.iter().map(|r| r.run_id.as_str()).collect();
    new.runs
        .iter()
        .filter(|r| base_ids.contains(r.run_id.as_str()))
        .count()
}

/// The most table rows (and list items) of each kind in `--format markdown`, so that a
/// comparison of any pack fits a pull-request comment (GitHub's limit is 65,536
/// characters): the rest is counted.
const MD_MAX_ROWS: usize = 50;

impl Comparison {
    /// The comparison of two reports over all their rows (runs held in memory).
    #[cfg(test)]
    pub(crate) fn new(
        base_dirs: &[String],
        base: &Report,
        new_dirs: &[String],
        new: &Report,
        settings: Settings,
    ) -> Comparison {
        let shared = shared_runs(base, new);
        Comparison::with_shared(base_dirs, base, new_dirs, new, settings, shared)
    }

    /// The comparison of BASE and NEW, `shared` of NEW's runs having a run id read on BASE's
    /// side too.
    pub(crate) fn with_shared(
        base_dirs: &[String],
        base: &Report,
        new_dirs: &[String],
        new: &Report,
        settings: Settings,
        shared: usize,
    ) -> Comparison {
        let alpha = settings.alpha;
        let (base_by, new_by) = (by_id(base), by_id(new));
        let pairs: Vec<Pair<'_>> = base_by
            .iter()
            .filter_map(|(id, b)| new_by.get(id).map(|n| (*id, *b, *n)))
            .collect();
        let tallies: Vec<Tally> = pairs.iter().map(|(_, b, n)| tally(b, n)).collect();
        let decision = gate::decide(&tallies, alpha, settings.correction);
        let (mut scenarios, mut counts) = judged(&pairs, base, new, alpha, &decision);
        if let Some(floor) = settings.fail_on_drop_to {
            for c in &mut scenarios {
                drop_to_floor(c, floor, &mut counts);
            }
        }
        sort_by_verdict(&mut scenarios);
        let base_info = SideInfo::new(base_dirs, base);
        let new_info = SideInfo::new(new_dirs, new);
        let (only_in_base, only_in_new) =
            (one_sided(&base_by, &new_by), one_sided(&new_by, &base_by));
        let mut incomplete = side_gaps(&base_info, &new_info);
        if !settings.allow_missing {
            incomplete.extend(missing(&only_in_base, &only_in_new));
        }
        let warnings = warnings((base_dirs, base), (new_dirs, new), shared);
        let gate = if !incomplete.is_empty() {
            exit::RUN_ERROR
        } else if decision.regressed() || scenarios.iter().any(|s| s.dropped_to_floor) {
            exit::RUN_FAILED
        } else {
            exit::SUCCESS
        };
        let mut c = Comparison {
            schema_version: SCHEMA_VERSION,
            alpha,
            correction: settings.correction,
            scenario_alpha: decision.scenario_alpha,
            pack: decision.pack,
            base: base_info,
            new: new_info,
            only_in_base,
            only_in_new,
            scenarios,
            counts,
            summary: String::new(),
            incomplete,
            warnings,
            gate,
        };
        c.summary = summary(&c);
        c
    }

    /// How the comparison decides, in one sentence.
    pub(crate) fn method(&self) -> String {
        let correction = match self.correction {
            Correction::Holm => "Holm-adjusted",
            Correction::Bh => "Benjamini–Hochberg-adjusted",
            Correction::None => "unadjusted",
        };
        format!(
            "pass rates with {} Wilson intervals; per scenario, one-sided Fisher tests, {correction}, at {}; \
             for the pack, a one-sided Cochran–Mantel–Haenszel test at {}; false-alarm rate of the whole comparison at most {}",
            self.confidence_pct(),
            self.scenario_alpha,
            self.pack.alpha,
            self.alpha
        )
    }

    /// `tokens per run 116 → 140 (+20.7%) · cost per run $0.000012 → $0.000015 (+25.0%)`,
    /// when either side made model calls `wt` saw.
    pub(crate) fn usage_line(&self) -> Option<String> {
        self.per_run_line(|s| s.usage.as_ref())
    }

    /// The same for what the evaluation cost (simulated users, judges), when either side's
    /// evaluation made model calls.
    pub(crate) fn eval_line(&self) -> Option<String> {
        self.per_run_line(|s| s.eval_usage.as_ref())
    }

    fn per_run_line(&self, of: impl Fn(&SideInfo) -> Option<&RunUsage>) -> Option<String> {
        let (b, n) = (
            self.base.per_run(of(&self.base)),
            self.new.per_run(of(&self.new)),
        );
        if b.is_none() && n.is_none() {
            return None;
        }
        let change = |from: f64, to: f64| {
            if from > 0.0 {
                format!(" ({:+.1}%)", (to - from) / from * 100.0)
            } else {
                String::new()
            }
        };
        let tokens =
            |x: Option<(f64, Option<f64>)>| x.map_or("-".to_owned(), |(t, _)| format!("{t:.0}"));
        let mut line = format!("tokens per run {} → {}", tokens(b), tokens(n));
        if let (Some((bt, _)), Some((nt, _))) = (b, n) {
            line.push_str(&change(bt, nt));
        }
        match (b.and_then(|x| x.1), n.and_then(|x| x.1)) {
            (Some(bc), Some(nc)) => {
                line.push_str(&format!(
                    " · cost per run {} → {}{}",
                    dollars(bc),
                    dollars(nc),
                    change(bc, nc)
                ));
            }
            (Some(_), None) | (None, Some(_)) => {
                line.push_str(" · cost known on one side only");
            }
            (None, None) => {}
        }
        Some(line)
    }

    /// The pack-level test's result.
    pub(crate) fn pack_line(&self) -> String {
        let p = &self.pack;
        if p.regressed {
            format!(
                "regressed across scenarios (z = {:.2}, {}, below {})",
                p.z,
                p_is(p.p_value),
                p.alpha
            )
        } else {
            format!(
                "no drop across scenarios (z = {:.2}, {}, not below {})",
                p.z,
                p_is(p.p_value),
                p.alpha
            )
        }
    }

    pub(crate) fn confidence_pct(&self) -> String {
        format!("{}%", ((1.0 - self.alpha) * 1000.0).round() / 10.0)
    }

    pub(crate) fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).expect("comparison serializes");
        s.push('\n');
        s
    }

    /// The terminal view.
    pub(crate) fn to_table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "BASE  {}", self.base.describe());
        let _ = writeln!(out, "NEW   {}", self.new.describe());
        let _ = writeln!(out, "({})", self.method());
        let _ = writeln!(out, "pack: {}", self.pack_line());
        if let Some(u) = self.usage_line() {
            let _ = writeln!(out, "model: {u}");
        }
        if let Some(u) = self.eval_line() {
            let _ = writeln!(out, "evaluation: {u}");
        }
        out.push('\n');
        let width = self
            .scenarios
            .iter()
            .map(|s| s.scenario_id.len())
            .max()
            .unwrap_or(8)
            .max(8);
        let rows: Vec<[String; 8]> = self.scenarios.iter().map(cells).collect();
        let w = |i: usize, head: &str| {
            rows.iter()
                .map(|r| r[i].chars().count())
                .max()
                .unwrap_or(0)
                .max(head.len())
        };
        let heads = [
            "BASE", "NEW", "DIFF", "P (ADJ)", "VERDICT", "P50 Δ", "P95 Δ", "WHY",
        ];
        let widths: Vec<usize> = heads.iter().enumerate().map(|(i, h)| w(i, h)).collect();
        let line = |first: &str, cells: &[String]| {
            let mut l = format!("{first:<width$}");
            for (i, c) in cells.iter().enumerate() {
                if i + 1 == cells.len() {
                    let _ = write!(l, "  {c}");
                } else {
                    let _ = write!(l, "  {c:<w$}", w = widths[i]);
                }
            }
            l
        };
        let heads: Vec<String> = heads.iter().map(|h| (*h).to_owned()).collect();
        let _ = writeln!(out, "{}", line("SCENARIO", &heads));
        for (s, cells) in self.scenarios.iter().zip(&rows) {
            let _ = writeln!(out, "{}", line(&s.scenario_id, cells));
            for r in &s.appeared {
                let _ = writeln!(
                    out,
                    "    appeared    {}: {} ({}/{} runs)",
                    r.layer, r.reason, r.new_runs, s.new.runs
                );
            }
            for r in &s.disappeared {
                let _ = writeln!(
                    out,
                    "    disappeared {}: {} (was {}/{} runs)",
                    r.layer, r.reason, r.base_runs, s.base.runs
                );
            }
        }
        for (label, list) in [
            ("only in BASE", &self.only_in_base),
            ("only in NEW", &self.only_in_new),
        ] {
            for o in list {
                let _ = writeln!(
                    out,
                    "{label}: {} ({}/{} passed)",
                    o.scenario_id, o.passed, o.runs
                );
            }
        }
        let _ = writeln!(out, "\n{}", self.summary);
        out
    }

    /// Markdown that fits a pull-request comment.
    pub(crate) fn to_markdown(&self) -> String {
        let mut out = self.md_sides();
        self.md_scenarios(&mut out);
        self.md_failure_changes(&mut out);
        self.md_one_sided(&mut out);
        out
    }

    /// The Markdown's head: the summary in bold, then the sides, the method, the pack test,
    /// usage, and what makes the comparison incomplete or is worth a warning.
    fn md_sides(&self) -> String {
        let mut out = format!("**{}**\n\n", md(&self.summary));
        let _ = writeln!(out, "- BASE: {}", self.base.describe_quoting(md_code));
        let _ = writeln!(out, "- NEW: {}", self.new.describe_quoting(md_code));
        let _ = writeln!(out, "- {}", self.method());
        let _ = writeln!(out, "- pack: {}", self.pack_line());
        if let Some(u) = self.usage_line() {
            let _ = writeln!(out, "- model: {}", md(&u));
        }
        if let Some(u) = self.eval_line() {
            let _ = writeln!(out, "- evaluation: {}", md(&u));
        }
        for i in &self.incomplete {
            let _ = writeln!(out, "- **incomplete:** {}", md(i));
        }
        for w in &self.warnings {
            let _ = writeln!(out, "- **warning:** {}", md(w));
        }
        out.push('\n');
        out
    }

    /// The Markdown's scenario tables: changed scenarios first, in full up to a cap; unchanged
    /// ones collapsed.
    fn md_scenarios(&self, out: &mut String) {
        let (changed, unchanged): (Vec<&ScenarioComparison>, Vec<&ScenarioComparison>) = self
            .scenarios
            .iter()
            .partition(|s| s.verdict != Change::Unchanged);
        if !changed.is_empty() {
            md_table(out, &changed);
            if changed.len() > MD_MAX_ROWS {
                let _ = writeln!(
                    out,
                    "\n… and {} more scenario(s) with a verdict (see `--format json`)",
                    changed.len() - MD_MAX_ROWS
                );
            }
        }
        if !unchanged.is_empty() {
            let _ = writeln!(
                out,
                "\n<details><summary>{} unchanged scenario(s)</summary>\n",
                unchanged.len()
            );
            md_table(out, &unchanged);
            if unchanged.len() > MD_MAX_ROWS {
                let _ = writeln!(out, "\n… and {} more", unchanged.len() - MD_MAX_ROWS);
            }
            out.push_str("\n</details>\n");
        }
    }

    /// The Markdown's list of failure reasons that appeared or disappeared, up to a cap.
    fn md_failure_changes(&self, out: &mut String) {
        let changes: Vec<String> = self
            .scenarios
            .iter()
            .flat_map(|s| {
                let appeared = s.appeared.iter().map(move |r| {
                    format!(
                        "- `{}` appeared: {}: {} ({}/{} runs)",
                        s.scenario_id,
                        r.layer,
                        md(&r.reason),
                        r.new_runs,
                        s.new.runs
                    )
                });
                let gone = s.disappeared.iter().map(move |r| {
                    format!(
                        "- `{}` disappeared: {}: {} (was {}/{} runs)",
                        s.scenario_id,
                        r.layer,
                        md(&r.reason),
                        r.base_runs,
                        s.base.runs
                    )
                });
                appeared.chain(gone)
            })
            .collect();
        if !changes.is_empty() {
            let _ = writeln!(out, "\n#### Failures that appeared or disappeared\n");
            for c in changes.iter().take(MD_MAX_ROWS) {
                let _ = writeln!(out, "{c}");
            }
            if changes.len() > MD_MAX_ROWS {
                let _ = writeln!(out, "- … and {} more", changes.len() - MD_MAX_ROWS);
            }
        }
    }

    /// The Markdown's lines of scenarios on one side only, up to a cap each.
    fn md_one_sided(&self, out: &mut String) {
        for (label, list) in [
            ("Only in BASE", &self.only_in_base),
            ("Only in NEW", &self.only_in_new),
        ] {
            if !list.is_empty() {
                let mut names: Vec<String> = list
                    .iter()
                    .take(MD_MAX_ROWS)
                    .map(|o| format!("`{}` ({}/{})", o.scenario_id, o.passed, o.runs))
                    .collect();
                if list.len() > MD_MAX_ROWS {
                    names.push(format!("… and {} more", list.len() - MD_MAX_ROWS));
                }
                let _ = writeln!(out, "\n{label}: {}", names.join(", "));
            }
        }
    }
}

/// A Markdown table of the first [`MD_MAX_ROWS`] of `scenarios`, with its head.
fn md_table(out: &mut String, scenarios: &[&ScenarioComparison]) {
    out.push_str(
        "| Scenario | Base | New | Diff | p (adj.) | Verdict | p50 Δ | p95 Δ | Why |\n\
         |---|---:|---:|---:|---:|---|---:|---:|---|\n",
    );
    for s in scenarios.iter().take(MD_MAX_ROWS) {
        out.push_str(&md_row(s));
    }
}

/// A scenario's row of the Markdown table, its verdict marked when it is a change.
fn md_row(s: &ScenarioComparison) -> String {
    let [b, n, d, p, v, p50, p95, why] = cells(s);
    let mark = match s.verdict {
        Change::Regressed => "🔴 ",
        Change::Improved => "🟢 ",
        _ => "",
    };
    format!(
        "| `{}` | {b} | {n} | {d} | {p} | {mark}{v} | {p50} | {p95} | {} |\n",
        s.scenario_id,
        md(&why)
    )
}

/// `0.016`, or `0.016 (0.48)` with the adjusted value when it differs.
pub(crate) fn p_cell(s: &ScenarioComparison) -> String {
    if (s.p_adjusted - s.p_value).abs() > f64::EPSILON {
        format!("{} ({})", p_shown(s.p_value), p_shown(s.p_adjusted))
    } else {
        p_shown(s.p_value)
    }
}

/// The row cells: base, new, diff, p, verdict, p50 Δ, p95 Δ, why.
pub(crate) fn cells(s: &ScenarioComparison) -> [String; 8] {
    [
        s.base.display(),
        s.new.display(),
        format!("{:+.0} pp", s.difference * 100.0),
        p_cell(s),
        s.verdict.as_str().to_owned(),
        format!("{:+} ms", s.p50_delta_ms),
        format!("{:+} ms", s.p95_delta_ms),
        s.why.clone(),
    ]
}

/// A report's scenarios by id.
type ById<'a> = BTreeMap<&'a str, &'a ScenarioSummary>;

/// A scenario on both sides: its id, BASE's summary and NEW's.
type Pair<'a> = (&'a str, &'a ScenarioSummary, &'a ScenarioSummary);

/// The scenarios of `r` by id.
fn by_id(r: &Report) -> ById<'_> {
    r.scenarios.iter().map(|s| (s.id(), s)).collect()
}

/// A scenario's passes and runs on both sides, as the gate counts them.
fn tally(b: &ScenarioSummary, n: &ScenarioSummary) -> Tally {
    Tally {
        base_pass: u64::from(b.aggregate.passed),
        base_runs: u64::from(b.aggregate.runs),
        new_pass: u64::from(n.aggregate.passed),
        new_runs: u64::from(n.aggregate.runs),
    }
}

/// Each scenario on both sides compared by the gate's `decision`, in the order of `pairs`,
/// and the counts of their verdicts.
fn judged(
    pairs: &[Pair<'_>],
    base: &Report,
    new: &Report,
    alpha: f64,
    decision: &gate::Decision,
) -> (Vec<ScenarioComparison>, Counts) {
    let empty = BTreeMap::new();
    let mut scenarios = Vec::new();
    let mut counts = Counts::default();
    for ((id, b, n), d) in pairs.iter().zip(&decision.scenarios) {
        let c = compare_one(
            b,
            n,
            base.reasons.get(*id).unwrap_or(&empty),
            new.reasons.get(*id).unwrap_or(&empty),
            alpha,
            decision.scenario_alpha,
            d,
        );
        match c.verdict {
            Change::Regressed => counts.regressed += 1,
            Change::Improved => counts.improved += 1,
            Change::Unchanged => counts.unchanged += 1,
            Change::NotEnoughRuns => counts.not_enough_runs += 1,
        }
        scenarios.push(c);
    }
    (scenarios, counts)
}

/// Regressions first; within a verdict, the largest changes first: a view that shows only the
/// first rows of a kind never hides the biggest moves behind smaller ones.
fn sort_by_verdict(scenarios: &mut [ScenarioComparison]) {
    scenarios.sort_by(|a, b| {
        a.verdict
            .cmp(&b.verdict)
            .then(b.difference.abs().total_cmp(&a.difference.abs()))
            .then(a.scenario_id.cmp(&b.scenario_id))
    });
}

/// The scenarios of `of` that `other` does not have.
fn one_sided(of: &ById<'_>, other: &ById<'_>) -> Vec<OneSided> {
    of.iter()
        .filter(|(id, _)| !other.contains_key(*id))
        .map(|(id, s)| OneSided {
            scenario_id: (*id).to_owned(),
            runs: s.aggregate.runs,
            passed: s.aggregate.passed,
        })
        .collect()
}

/// What each side's directories cannot vouch for (a partial sweep, a missing shard), one line
/// each, naming the side.
fn side_gaps(base: &SideInfo, new: &SideInfo) -> Vec<String> {
    let mut incomplete = Vec::new();
    for (side, info) in [("BASE", base), ("NEW", new)] {
        for why in &info.partial_reasons {
            incomplete.push(format!("{side}: {why}"));
        }
        for g in &info.gaps {
            incomplete.push(format!("{side}: {g}"));
        }
    }
    incomplete
}

/// One line per side that has scenarios the other lacks: without `--allow-missing` they make
/// the comparison incomplete.
fn missing(only_in_base: &[OneSided], only_in_new: &[OneSided]) -> Vec<String> {
    let mut incomplete = Vec::new();
    for (side, other, list) in [("BASE", "NEW", only_in_base), ("NEW", "BASE", only_in_new)] {
        if !list.is_empty() {
            let names: Vec<&str> = list.iter().map(|o| o.scenario_id.as_str()).collect();
            incomplete.push(format!(
                "{} scenario(s) only in {side}, not judged against {other}: {} (--allow-missing accepts this)",
                list.len(),
                names.join(", ")
            ));
        }
    }
    incomplete
}

/// What is worth knowing about the sides (each its directories and report) that decides
/// nothing: a directory or runs on both, other packs, edited scenarios.
fn warnings(
    (base_dirs, base): (&[String], &Report),
    (new_dirs, new): (&[String], &Report),
    shared: usize,
) -> Vec<String> {
    let mut warnings = dirs_on_both_sides(base_dirs, new_dirs);
    if shared > 0 && warnings.is_empty() {
        warnings.push(format!(
            "{shared} run(s) are on both sides (the same run ids): the sides are not independent samples"
        ));
    }
    if let Some(why) = other_pack(("BASE", &base.packs()), ("NEW", &new.packs())) {
        warnings.push(format!("{why} (compared anyway: --allow-other-pack)"));
    }
    warnings.extend(edited_scenarios(
        &base.ids.digests,
        &new.ids.digests,
        "BASE",
        "NEW",
    ));
    warnings
}

/// Failure reasons (layer and normalized detail) and how many runs of a side had each.
type Reasons = BTreeMap<(String, String), u32>;

/// One scenario on both sides compared, `d` being the gate's decision on it.
fn compare_one(
    b: &ScenarioSummary,
    n: &ScenarioSummary,
    base_reasons: &Reasons,
    new_reasons: &Reasons,
    alpha: f64,
    scenario_alpha: f64,
    d: &ScenarioDecision,
) -> ScenarioComparison {
    let (base, new) = (SideStats::new(b, alpha), SideStats::new(n, alpha));
    let difference = new.pass_rate.unwrap_or(0.0) - base.pass_rate.unwrap_or(0.0);
    let p_value = if difference < 0.0 {
        d.p_regression
    } else {
        d.p_improvement
    };
    ScenarioComparison {
        scenario_id: b.id().to_owned(),
        difference,
        p_value,
        p_adjusted: d.p_adjusted,
        verdict: d.change,
        dropped_to_floor: false,
        why: why(&base, &new, p_value, scenario_alpha, d),
        layers: layer_changes(b, n),
        appeared: reasons_only(new_reasons, base_reasons, true),
        disappeared: reasons_only(base_reasons, new_reasons, false),
        p50_delta_ms: new.p50_ms as i64 - base.p50_ms as i64,
        p95_delta_ms: new.p95_ms as i64 - base.p95_ms as i64,
        base,
        new,
    }
}

/// `90% → 40%`: the pass rates of BASE and NEW.
fn rates(base: Option<f64>, new: Option<f64>) -> String {
    format!(
        "{} → {}",
        base.map_or("-".into(), pct),
        new.map_or("-".into(), pct)
    )
}

/// The verdict `d` in words: the rates, and the p-value in the verdict's direction (with its
/// adjusted value when that differs) against the level, or why no difference could reach it.
fn why(
    base: &SideStats,
    new: &SideStats,
    p_value: f64,
    scenario_alpha: f64,
    d: &ScenarioDecision,
) -> String {
    let (bn, nn) = (u64::from(base.runs), u64::from(new.runs));
    let rates = rates(base.pass_rate, new.pass_rate);
    let adjusted = if (d.p_adjusted - p_value).abs() > f64::EPSILON {
        format!(" (adjusted: {})", p_is(d.p_adjusted))
    } else {
        String::new()
    };
    match d.change {
        Change::NotEnoughRuns => format!(
            "{rates}; with {bn} and {nn} run(s) no difference can reach p < {scenario_alpha} \
             (needs at least {} runs per side)",
            stats::runs_needed_one_sided(scenario_alpha)
        ),
        Change::Regressed | Change::Improved => format!(
            "{rates}, {}{adjusted}, below {scenario_alpha}",
            p_is(p_value)
        ),
        Change::Unchanged => format!(
            "{rates}, {}{adjusted}, not below {scenario_alpha}: no real difference",
            p_is(p_value)
        ),
    }
}

/// The layers some run of either side failed, with their counts on both.
fn layer_changes(b: &ScenarioSummary, n: &ScenarioSummary) -> Vec<LayerChange> {
    LAYERS
        .iter()
        .filter_map(|l| {
            let bf = b.aggregate.layer_failures.get(*l).copied().unwrap_or(0);
            let nf = n.aggregate.layer_failures.get(*l).copied().unwrap_or(0);
            let status = match (bf, nf) {
                (0, 0) => return None,
                (0, _) => "appeared",
                (_, 0) => "disappeared",
                _ => "persists",
            };
            Some(LayerChange {
                layer: (*l).to_owned(),
                base_failed: bf,
                new_failed: nf,
                status,
            })
        })
        .collect()
}

/// The reasons of `of` that `other` never saw, in reporting order of the layers, as
/// everywhere else (`of_is_new`: `of` is NEW's side).
fn reasons_only(of: &Reasons, other: &Reasons, of_is_new: bool) -> Vec<ReasonChange> {
    let mut v = of
        .iter()
        .filter(|(k, _)| !other.contains_key(*k))
        .map(|((layer, reason), &count)| ReasonChange {
            layer: layer.clone(),
            reason: reason.clone(),
            base_runs: if of_is_new { 0 } else { count },
            new_runs: if of_is_new { count } else { 0 },
        })
        .collect::<Vec<_>>();
    v.sort_by_key(|r| LAYERS.iter().position(|l| *l == r.layer));
    v
}

/// `--fail-on-drop-to FLOOR`: a scenario whose NEW pass rate fell to `floor` or below from
/// above it is a regression for the gate, however few its runs; its verdict and counts say
/// so, and its reason says the test alone did not find it.
fn drop_to_floor(c: &mut ScenarioComparison, floor: f64, counts: &mut Counts) {
    let (Some(b), Some(n)) = (c.base.pass_rate, c.new.pass_rate) else {
        return;
    };
    if !(n <= floor && b > floor) {
        return;
    }
    c.dropped_to_floor = true;
    if c.verdict == Change::Regressed {
        c.why
            .push_str(&format!("; at or below --fail-on-drop-to {floor}"));
        return;
    }
    match c.verdict {
        Change::Improved => counts.improved -= 1,
        Change::Unchanged => counts.unchanged -= 1,
        Change::NotEnoughRuns => counts.not_enough_runs -= 1,
        Change::Regressed => {}
    }
    counts.regressed += 1;
    c.verdict = Change::Regressed;
    c.why = format!(
        "{}, at or below --fail-on-drop-to {floor} (the test alone: {})",
        rates(c.base.pass_rate, c.new.pass_rate),
        p_is(c.p_value)
    );
}

fn summary(c: &Comparison) -> String {
    let names = |v: Change| {
        c.scenarios
            .iter()
            .filter(|s| s.verdict == v)
            .map(|s| {
                format!(
                    "{} {}",
                    s.scenario_id,
                    s.why.split(',').next().unwrap_or_default()
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    };
    let k = &c.counts;
    let mut parts = Vec::new();
    let head = match (k.regressed, k.improved, c.pack.regressed) {
        (0, 0, false) => format!("No significant change at α = {}", c.alpha),
        (0, 0, true) => "NEW is worse across the pack".to_owned(),
        (_, 0, _) => "NEW is worse".to_owned(),
        (0, _, false) => "NEW is better".to_owned(),
        _ => "Mixed".to_owned(),
    };

    if k.regressed > 0 {
        parts.push(format!(
            "{} scenario(s) regressed ({})",
            k.regressed,
            names(Change::Regressed)
        ));
    }
    if k.improved > 0 {
        parts.push(format!(
            "{} improved ({})",
            k.improved,
            names(Change::Improved)
        ));
    }
    if c.pack.regressed {
        parts.push(format!(
            "the pack regressed as a whole (z = {:.2}, {})",
            c.pack.z,
            p_is(c.pack.p_value)
        ));
    }
    parts.push(format!("{} unchanged", k.unchanged));
    if k.not_enough_runs > 0 {
        parts.push(format!(
            "{} without enough runs to tell (at least {} per side needed)",
            k.not_enough_runs,
            stats::runs_needed_one_sided(c.scenario_alpha)
        ));
    }
    if !c.only_in_base.is_empty() || !c.only_in_new.is_empty() {
        parts.push(format!(
            "{} only in BASE, {} only in NEW",
            c.only_in_base.len(),
            c.only_in_new.len()
        ));
    }
    let mut s = format!("{head}: {}.", parts.join(", "));
    if !c.incomplete.is_empty() {
        let _ = write!(
            s,
            " The comparison is incomplete ({} reason(s) below): --gate exits 3.",
            c.incomplete.len()
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::super::tests::run;
    use super::*;
    use windtunnel_model::Verdict;

    fn report(scenario: &str, pass: u32, fail: u32) -> Report {
        let runs: Vec<_> = (0..pass + fail)
            .map(|i| {
                run(
                    scenario,
                    i,
                    if i < pass {
                        Verdict::Pass
                    } else {
                        Verdict::Fail
                    },
                )
            })
            .collect();
        Report::from_runs(&runs)
    }

    const SETTINGS: Settings = Settings {
        alpha: 0.05,
        correction: Correction::Holm,
        allow_missing: false,
        fail_on_drop_to: None,
    };

    /// The comparison of a scenario's passes and fails on each side, `(scenario, passed,
    /// failed)`, read from the same directory.
    fn compared(base: (&str, u32, u32), new: (&str, u32, u32), settings: Settings) -> Comparison {
        let dirs = ["d".to_owned()];
        let (base, new) = (report(base.0, base.1, base.2), report(new.0, new.1, new.2));
        Comparison::new(&dirs, &base, &dirs, &new, settings)
    }

    #[test]
    fn verdicts_follow_fisher_and_the_run_floor() {
        let c = compared(("s", 10, 0), ("s", 2, 8), SETTINGS);
        let s = &c.scenarios[0];
        assert_eq!(s.verdict, Change::Regressed, "{}", s.why);
        // One-sided (scipy: fisher_exact([[2, 8], [10, 0]], alternative="less")).
        assert!((s.p_value - 0.000_357_2).abs() < 1e-6, "{}", s.p_value);
        assert_eq!(c.gate, exit::RUN_FAILED);
        assert_eq!(s.appeared.len(), 1);
        assert_eq!(s.appeared[0].layer, "constraint");
        assert_eq!(s.layers[0].status, "appeared");
        assert!(
            c.summary
                .starts_with("NEW is worse: 1 scenario(s) regressed (s 100% → 20%"),
            "{}",
            c.summary
        );

        let c = compared(("s", 2, 8), ("s", 10, 0), SETTINGS);
        assert_eq!(c.scenarios[0].verdict, Change::Improved);
        assert_eq!(c.scenarios[0].disappeared.len(), 1);
        assert_eq!(c.gate, exit::SUCCESS);

        let c = compared(("s", 9, 1), ("s", 8, 2), SETTINGS);
        assert_eq!(c.scenarios[0].verdict, Change::Unchanged);
        assert_eq!(c.gate, exit::SUCCESS);

        let c = compared(("s", 3, 0), ("s", 0, 3), SETTINGS);
        assert_eq!(c.scenarios[0].verdict, Change::NotEnoughRuns);
        assert_eq!(c.gate, exit::SUCCESS);

        let c = compared(("a", 1, 0), ("b", 1, 0), SETTINGS);
        assert_eq!(
            (c.only_in_base.len(), c.only_in_new.len(), c.scenarios.len()),
            (1, 1, 0)
        );
        // Scenarios on one side only: incomplete, unless allowed.
        assert_eq!(c.gate, exit::RUN_ERROR);
        assert_eq!(c.incomplete.len(), 2, "{:?}", c.incomplete);
        let allowed = Settings {
            allow_missing: true,
            fail_on_drop_to: None,
            ..SETTINGS
        };
        let c = compared(("a", 1, 0), ("b", 1, 0), allowed);
        assert_eq!(c.gate, exit::SUCCESS);
        // A directory on both sides is worth a warning.
        assert!(c.warnings[0].contains("on both sides"), "{:?}", c.warnings);
    }

    #[test]
    fn markdown_of_a_large_pack_fits_a_pull_request_comment() {
        let runs = |pass: u32| -> Vec<_> {
            (0..300)
                .flat_map(|k| {
                    (0..10).map(move |i| {
                        let v = if i < pass {
                            Verdict::Pass
                        } else {
                            Verdict::Fail
                        };
                        run(&format!("scenario-{k:03}"), i, v)
                    })
                })
                .collect()
        };
        let (base, new) = (Report::from_runs(&runs(9)), Report::from_runs(&runs(8)));
        let dirs = ["d".to_owned()];
        let c = Comparison::new(&dirs, &base, &dirs, &new, SETTINGS);
        let md = c.to_markdown();
        assert!(md.len() < 65_536, "{} characters", md.len());
        assert!(
            md.contains("<details><summary>300 unchanged scenario(s)</summary>"),
            "{md}"
        );
        assert!(md.contains("… and 250 more"), "{md}");
        // 9/10 → 8/10 everywhere: the pack test says what no scenario can.
        assert!(c.pack.regressed && c.gate == exit::RUN_FAILED);
    }
}
