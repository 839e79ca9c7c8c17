//! The text views of a [`Report`]: the terminal table (`--format table`) and Markdown.

use std::fmt::Write as _;

use windtunnel_model::{AggregateResult, LAYERS, RunUsage, Verdict};

use super::{AtK, PackSummary, Report, RunRow, SHOWN_PER_SCENARIO, ScenarioSummary};

/// `67% [21–94]`: a pass rate with its interval, in whole percent.
pub(crate) fn rate_with_interval(rate: Option<f64>, interval: Option<[f64; 2]>) -> String {
    match (rate, interval) {
        (Some(r), Some([lo, hi])) => format!("{} [{}–{}]", pct(r), pct_bare(lo), pct_bare(hi)),
        _ => "-".to_owned(),
    }
}

pub(crate) fn pct(x: f64) -> String {
    format!("{}%", pct_bare(x))
}

/// A rate in whole percent, except where rounding would say something false: a rate below
/// 1 never reads 100 (999/1000 is `99.9`, 9999/10000 `>99.9`) and one above 0 never reads 0
/// (`0.1`, `<0.1`).
fn pct_bare(x: f64) -> String {
    // Float noise at the ends (a Wilson bound of 1e-17) is the end itself.
    let x = if x < 1e-9 {
        0.0
    } else if x > 1.0 - 1e-9 {
        1.0
    } else {
        x
    };
    let whole = (x * 100.0).round();
    if x < 1.0 && whole >= 100.0 {
        let tenths = (x * 1000.0).floor();
        return if x * 1000.0 > 999.0 {
            ">99.9".to_owned()
        } else {
            format!("{:.1}", tenths / 10.0)
        };
    }
    if x > 0.0 && whole <= 0.0 {
        return if x * 1000.0 < 1.0 {
            "<0.1".to_owned()
        } else {
            format!("{:.1}", (x * 1000.0).ceil() / 10.0)
        };
    }
    format!("{whole:.0}")
}

/// A p-value as text: `0.016`, `0.0021`, or `<0.001` (never `0.000`).
pub(crate) fn p_shown(p: f64) -> String {
    if p < 0.001 {
        "<0.001".to_owned()
    } else if p < 0.01 {
        format!("{p:.4}")
    } else {
        format!("{p:.3}")
    }
}

/// `p = 0.016` or `p < 0.001`.
pub(crate) fn p_is(p: f64) -> String {
    let shown = p_shown(p);
    match shown.strip_prefix('<') {
        Some(rest) => format!("p < {rest}"),
        None => format!("p = {shown}"),
    }
}

/// The value at the largest k of a list of estimates, with two decimals.
fn at_largest_k(v: &[AtK]) -> String {
    v.last()
        .map_or("-".to_owned(), |a| format!("{:.2}", a.value))
}

/// `pass^1 0.67 · pass^3 0.30 · pass@3 0.93 (mean over 2 scenarios; k = 3, the fewest runs
/// of any scenario)`.
pub(crate) fn pack_line(p: &PackSummary) -> String {
    let mut parts: Vec<String> = p
        .pass_hat_k
        .iter()
        .map(|a| format!("pass^{} {:.2}", a.k, a.value))
        .collect();
    parts.extend(
        p.pass_at_k
            .iter()
            .filter(|a| a.k > 1)
            .map(|a| format!("pass@{} {:.2}", a.k, a.value)),
    );
    format!(
        "{} (mean over {} scenario(s); k = {}, the fewest runs of any scenario)",
        parts.join(" · "),
        p.scenarios,
        p.k
    )
}

/// `4 model calls · 116 tokens in (12 cached) · 52 out (8 reasoning) · $0.0000486`; calls
/// that reported no usage are counted, and then the cost is unknown, and says why.
pub(crate) fn usage_line(u: &RunUsage) -> String {
    let mut parts = vec![format!("{} model call(s)", u.model_calls)];
    if u.unreported > 0 {
        parts.push(format!("{} without usage", u.unreported));
    }
    let t = &u.tokens;
    let mut input = format!("{} tokens in", t.prompt_tokens);
    if t.cached_tokens > 0 {
        input.push_str(&format!(" ({} cached)", t.cached_tokens));
    }
    parts.push(input);
    let mut output = format!("{} out", t.completion_tokens);
    if t.reasoning_tokens > 0 {
        output.push_str(&format!(" ({} reasoning)", t.reasoning_tokens));
    }
    parts.push(output);
    if let Some(c) = u.cost_usd {
        parts.push(dollars(c));
    } else if let Some(why) = &u.cost_unknown {
        parts.push(format!("cost unknown ({why})"));
    }
    parts.join(" · ")
}

/// US dollars as every output gives them ([`windtunnel_model::round_cost`]), at least to the
/// cent: `$12.34`, `$0.0000168`.
pub(crate) fn dollars(c: f64) -> String {
    let places = usize::try_from(windtunnel_model::COST_DECIMALS).unwrap_or(9);
    let text = format!("{:.places$}", windtunnel_model::round_cost(c));
    let (whole, frac) = text.split_once('.').unwrap_or((&text, ""));
    let frac = frac.trim_end_matches('0');
    format!("${whole}.{frac:0<2}")
}

pub(crate) fn failing_layers(a: &AggregateResult) -> String {
    let mut parts: Vec<String> = LAYERS
        .iter()
        .filter_map(|l| a.layer_failures.get(*l).filter(|n| **n > 0).map(|n| (l, n)))
        .map(|(l, n)| format!("{l} ({n})"))
        .collect();
    if let Some(e) = &a.error {
        parts.push(format!("scenario error: {e}"));
    }
    if parts.is_empty() {
        "-".to_owned()
    } else {
        parts.join(", ")
    }
}

fn cells(s: &ScenarioSummary) -> [String; 8] {
    let a = &s.aggregate;
    [
        format!("{}/{}", a.passed, a.runs),
        rate_with_interval(s.pass_rate, s.wilson95),
        at_largest_k(&s.pass_hat_k),
        at_largest_k(&s.pass_at_k),
        a.failed.to_string(),
        a.errored.to_string(),
        a.latency.p50_ms.to_string(),
        failing_layers(a),
    ]
}

fn not_passed(r: &Report) -> impl Iterator<Item = &RunRow> {
    r.runs.iter().filter(|r| r.verdict != Some(Verdict::Pass))
}

/// A line of the list of runs that did not pass.
enum Listed<'a> {
    Run(&'a RunRow),
    /// How many more of the scenario's runs did not pass than are listed.
    More(&'a str, usize),
}

/// The runs that did not pass, as the table and Markdown list them: per scenario the first
/// [`SHOWN_PER_SCENARIO`], then how many more there are (every run is in the JSON view).
fn listed(r: &Report) -> Vec<Listed<'_>> {
    let rows: Vec<&RunRow> = not_passed(r).collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < rows.len() {
        let scenario = rows[i].scenario_id.as_str();
        let j = i + rows[i..]
            .iter()
            .take_while(|row| row.scenario_id == scenario)
            .count();
        let shown = (j - i).min(SHOWN_PER_SCENARIO);
        out.extend(rows[i..i + shown].iter().map(|row| Listed::Run(row)));
        let total = r.not_passed.get(scenario).copied().unwrap_or(j - i);
        if total > shown {
            out.push(Listed::More(scenario, total - shown));
        }
        i = j;
    }
    out
}

fn more_line(scenario: &str, more: usize) -> String {
    format!(
        "… and {more} more run(s) of {scenario} that did not pass (`wt report --format json` lists every run)"
    )
}

impl Report {
    /// The human table: one line per scenario, the pack's figures, then every run that did
    /// not pass with its reasons.
    pub(crate) fn to_table(&self) -> String {
        let mut out = String::new();
        let width = self
            .scenarios
            .iter()
            .map(|s| s.id().len())
            .max()
            .unwrap_or(8)
            .max(8);
        let _ = writeln!(
            out,
            "{:<width$}  {:>7}  {:>13}  {:>6}  {:>6}  {:>4}  {:>5}  {:>6}  FAILING LAYERS",
            "SCENARIO", "PASSED", "RATE [95% CI]", "PASS^N", "PASS@N", "FAIL", "ERROR", "P50 MS"
        );
        for s in &self.scenarios {
            let [passed, rate, hat, at, failed, errored, p50, layers] = cells(s);
            let _ = writeln!(
                out,
                "{:<width$}  {passed:>7}  {rate:>13}  {hat:>6}  {at:>6}  {failed:>4}  {errored:>5}  {p50:>6}  {layers}",
                s.id()
            );
        }
        self.table_totals(&mut out, width);
        self.table_not_passed(&mut out);
        out
    }

    /// The table's figures for the whole report: its counts, the pack's estimates, retries,
    /// and what the agent and the evaluation cost, in all and per scenario (ids `width` wide).
    fn table_totals(&self, out: &mut String, width: usize) {
        let (runs, passed, failed, errored) = self.totals();
        let _ = writeln!(
            out,
            "\n{passed}/{runs} runs passed, {failed} failed, {errored} could not be judged (ERROR)"
        );
        let _ = writeln!(out, "{}", pack_line(&self.pack));
        let retried: u32 = self.scenarios.iter().map(|s| s.aggregate.retried).sum();
        if retried > 0 {
            let _ = writeln!(
                out,
                "{retried} run(s) needed a retry (--retry-errors): each counts once, by its last attempt"
            );
        }
        self.table_usage(out, width, "model", self.usage.as_ref(), |s| {
            s.usage.as_ref()
        });
        // What the evaluation itself cost (simulated users, judges), apart from the agent.
        self.table_usage(out, width, "evaluation", self.eval_usage.as_ref(), |s| {
            s.eval_usage.as_ref()
        });
    }

    /// The table's lines of one kind of usage (`label`): `total`, when there is any, then
    /// each scenario's (`of`).
    fn table_usage(
        &self,
        out: &mut String,
        width: usize,
        label: &str,
        total: Option<&RunUsage>,
        of: impl Fn(&ScenarioSummary) -> Option<&RunUsage>,
    ) {
        let Some(u) = total else {
            return;
        };
        let _ = writeln!(out, "{label}: {}", usage_line(u));
        for s in &self.scenarios {
            if let Some(u) = of(s) {
                let _ = writeln!(out, "  {:<width$}  {}", s.id(), usage_line(u));
            }
        }
    }

    /// The table's list of the runs that did not pass, with their reasons, then of the
    /// scenarios that could not run.
    fn table_not_passed(&self, out: &mut String) {
        let bad = listed(self);
        if !bad.is_empty() {
            out.push('\n');
        }
        for line in bad {
            let r = match line {
                Listed::Run(r) => r,
                Listed::More(scenario, more) => {
                    let _ = writeln!(out, "{}", more_line(scenario, more));
                    continue;
                }
            };
            let verdict = r.verdict.map_or("UNSCORED", Verdict::as_str);
            let _ = writeln!(
                out,
                "{verdict} {} #{} ({})",
                r.scenario_id, r.run_index, r.trace
            );
            if let Some(e) = &r.error {
                let _ = writeln!(out, "    error: {e}");
            }
            for (layer, detail) in &r.failures {
                let _ = writeln!(out, "    {layer}: {detail}");
            }
        }
        for e in &self.scenario_errors {
            let _ = writeln!(
                out,
                "ERROR {} (sweep {}, {} run(s) never ran)\n    error: {}",
                e.scenario_id, e.sweep_id, e.runs, e.error
            );
        }
    }

    /// Markdown for a pull-request comment or a CI summary.
    pub(crate) fn to_markdown(&self) -> String {
        let mut out = String::from(
            "| Scenario | Passed | Rate [95% CI] | pass^n | pass@n | Failed | Error | p50 ms | Failing layers |\n\
             |---|---:|---:|---:|---:|---:|---:|---:|---|\n",
        );
        for s in &self.scenarios {
            let [passed, rate, hat, at, failed, errored, p50, layers] = cells(s);
            let _ = writeln!(
                out,
                "| `{}` | {passed} | {rate} | {hat} | {at} | {failed} | {errored} | {p50} | {} |",
                s.id(),
                md(&layers)
            );
        }
        let _ = writeln!(out, "\n{}", md(&pack_line(&self.pack)));
        if let Some(u) = &self.usage {
            let _ = writeln!(out, "\nModel: {}", md(&usage_line(u)));
        }
        if let Some(u) = &self.eval_usage {
            let _ = writeln!(
                out,
                "\nEvaluation (simulated users, judges): {}",
                md(&usage_line(u))
            );
        }
        let bad = listed(self);
        if !bad.is_empty() {
            out.push_str(
                "\n### Runs that did not pass\n\n| Run | Verdict | Why |\n|---|---|---|\n",
            );
            for line in bad {
                let r = match line {
                    Listed::Run(r) => r,
                    Listed::More(scenario, more) => {
                        let _ = writeln!(out, "| | | {} |", md(&more_line(scenario, more)));
                        continue;
                    }
                };
                let mut why: Vec<String> = r.error.iter().map(|e| format!("error: {e}")).collect();
                why.extend(r.failures.iter().map(|(l, d)| format!("{l}: {d}")));
                let _ = writeln!(
                    out,
                    "| `{}` #{} | {} | {} |",
                    r.scenario_id,
                    r.run_index,
                    r.verdict.map_or("UNSCORED", Verdict::as_str),
                    md(&why.join("<br>"))
                );
            }
        }
        out
    }
}

/// Text safe inside a Markdown table cell: no cell breaks, no line breaks, no raw HTML, and
/// no inline markup (emphasis, links, images, code) that outside text could smuggle in.
pub(crate) fn md(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' | '`' | '*' | '_' | '[' | ']' | '~' | '!' => {
                out.push('\\');
                out.push(c);
            }
            _ => out.push(c),
        }
    }
    out.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace("&lt;br&gt;", "<br>")
        .replace('|', "\\|")
        .replace(['\n', '\r'], " ")
}

/// Outside text as a Markdown code span: shown as written, never rendered as markup (a
/// label, a pack name, a directory).
pub(crate) fn md_code(s: &str) -> String {
    let clean = s.replace(['\n', '\r'], " ").replace('|', "\\|");
    let mut longest = 0;
    let mut run = 0;
    for c in clean.chars() {
        run = if c == '`' { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    let fence = "`".repeat(longest + 1);
    format!("{fence} {clean} {fence}")
}

#[cfg(test)]
mod tests {
    use super::super::tests::run;
    use super::*;

    #[test]
    fn dollars_give_the_rounded_digits_at_least_to_the_cent() {
        assert_eq!(dollars(56.0 * 0.3 / 1e6), "$0.0000168");
        assert_eq!(dollars(12.34), "$12.34");
        assert_eq!(dollars(1.5), "$1.50");
        assert_eq!(dollars(0.002), "$0.002");
        assert_eq!(dollars(0.0), "$0.00");
        assert_eq!(dollars(1e-12), "$0.00");
    }

    #[test]
    fn table_and_markdown() {
        let runs = vec![
            run("b", 0, Verdict::Pass),
            run("a", 1, Verdict::Error),
            run("a", 0, Verdict::Fail),
        ];
        let r = Report::from_runs(&runs);
        let table = r.to_table();
        assert!(
            table.contains("1/3 runs passed, 1 failed, 1 could not be judged"),
            "{table}"
        );
        assert!(
            table.contains("    constraint: forbidden tool `x` called"),
            "{table}"
        );
        assert!(table.contains("    error: turn 0: timed out"), "{table}");
        assert!(table.contains("pass^1 0.50"), "{table}");
        let md = r.to_markdown();
        assert!(md.contains("| `a` | 0/2 | 0% [0–66] |"), "{md}");
        assert!(
            md.contains("| `b` | 1/1 | 100% [21–100] | 1.00 | 1.00 |"),
            "{md}"
        );
    }

    #[test]
    fn markdown_cells_cannot_break_out() {
        assert_eq!(md("a|b\n<script>"), "a\\|b &lt;script&gt;");
        assert_eq!(md("x<br>y"), "x<br>y");
    }
}
