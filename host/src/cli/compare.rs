//! `wt compare BASE NEW`: did NEW make the agent better or worse, and is the difference
//! real? Each side is one or more run directories, read and merged as `wt report` reads
//! them; see [`crate::report::compare`].

use std::path::PathBuf;

use crate::exit::{self, CodedError};
use crate::report::compare::{self, Comparison, Settings};
use crate::report::stats::Correction;
use crate::report::{Report, scan};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Format {
    Table,
    Markdown,
    Json,
    Html,
}

/// Options of `wt compare`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct CompareArgs {
    /// The baseline run directory.
    #[arg(value_name = "BASE")]
    pub base: Option<PathBuf>,
    /// The run directory to judge against the baseline.
    #[arg(value_name = "NEW")]
    pub new: Option<PathBuf>,
    /// More baseline run directories (shards), merged with BASE.
    #[arg(long = "base", value_name = "DIR")]
    pub more_base: Vec<PathBuf>,
    /// More run directories for the NEW side, merged with NEW.
    #[arg(long = "new", value_name = "DIR")]
    pub more_new: Vec<PathBuf>,
    /// The false-alarm rate of the whole comparison (all scenarios and the pack together);
    /// intervals are shown at 1 − alpha.
    #[arg(long, default_value_t = 0.05, value_parser = parse_alpha)]
    pub alpha: f64,
    /// How scenarios' p-values are adjusted across the pack: `holm` (the chance of any false
    /// alarm stays under alpha), `bh` (Benjamini–Hochberg: the share of false alarms among
    /// alarms does), or `none` (each scenario on its own).
    #[arg(long, value_enum, default_value_t = Correction::Holm)]
    pub correction: Correction,
    /// Scenarios on one side only do not make the comparison incomplete.
    #[arg(long)]
    pub allow_missing: bool,
    /// Compare sides whose runs name different packs (refused otherwise, exit 2: scenarios
    /// of the same id in other packs are other tests).
    #[arg(long)]
    pub allow_other_pack: bool,
    /// With `--gate`: also exit 1 when a scenario's NEW pass rate is at or below RATE while
    /// its BASE rate was above it, however few the runs (0 makes a total collapse red).
    #[arg(long, value_name = "RATE", value_parser = parse_floor)]
    pub fail_on_drop_to: Option<f64>,
    /// Plan instead of compare (no run directories): how many runs a side the gate needs to
    /// catch a drop of `--drop` from `--from`, or, with `--runs`, which drop that many runs
    /// can catch — with `--power`, in a pack of `--scenarios`.
    #[arg(long)]
    pub plan: bool,
    /// Plan: the baseline pass rate (0–1).
    #[arg(long, value_name = "RATE", requires = "plan", value_parser = parse_rate)]
    pub from: Option<f64>,
    /// Plan: the drop of pass rate to catch, e.g. 0.2 for 90 % → 70 %.
    #[arg(long, value_name = "DROP", requires = "plan", value_parser = parse_rate, conflicts_with = "runs")]
    pub drop: Option<f64>,
    /// Plan: runs a side you have (or can afford).
    #[arg(long, value_name = "N", requires = "plan")]
    pub runs: Option<u64>,
    /// Plan: the chance of catching the drop to aim for.
    #[arg(long, default_value_t = 0.8, value_parser = parse_rate, requires = "plan")]
    pub power: f64,
    /// Plan: scenarios in the pack.
    #[arg(long, default_value_t = 1, requires = "plan")]
    pub scenarios: u64,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    #[command(flatten)]
    pub output: super::report::Output,
    /// Exit 1 when a scenario or the pack regressed significantly (or a scenario fell to
    /// `--fail-on-drop-to`), 3 when the comparison is incomplete (a side holds an incomplete
    /// sweep or misses a shard, or scenarios are on one side only), 0 otherwise.
    #[arg(long)]
    pub gate: bool,
    /// A calibration of the judges (`wt judge calibrate --format json`): a scenario whose
    /// verdicts rest on a judge it does not cover is named in a warning.
    #[arg(long, value_name = "FILE")]
    pub calibration: Option<PathBuf>,
}

/// A number strictly between 0 and 1; `what` says what was expected.
fn fraction(s: &str, what: &str) -> Result<f64, String> {
    let a: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if a > 0.0 && a < 1.0 {
        Ok(a)
    } else {
        Err(what.to_owned())
    }
}

fn parse_rate(s: &str) -> Result<f64, String> {
    fraction(s, "a rate strictly between 0 and 1, e.g. 0.9")
}

/// `wt compare --plan`.
fn plan(args: &CompareArgs) -> anyhow::Result<u8> {
    let Some(from) = args.from else {
        return Err(CodedError::usage(
            "--plan needs --from RATE (the baseline pass rate), and --drop DROP or --runs N",
        )
        .into());
    };
    if args.drop.is_none() && args.runs.is_none() {
        return Err(CodedError::usage("--plan needs --drop DROP (runs needed to catch it) or --runs N (the drop N runs can catch)").into());
    }
    if args.drop.is_some_and(|d| d > from) {
        return Err(CodedError::usage("--drop cannot be larger than --from").into());
    }
    let p = crate::report::plan::plan(
        args.alpha,
        args.power,
        args.scenarios,
        from,
        args.drop,
        args.runs,
    );
    let text = match args.format {
        Format::Json => {
            let mut t = serde_json::to_string_pretty(&p)?;
            t.push('\n');
            t
        }
        _ => p.text.iter().map(|l| format!("{l}\n")).collect(),
    };
    args.output.emit(&text)?;
    Ok(exit::SUCCESS)
}

fn parse_floor(s: &str) -> Result<f64, String> {
    let a: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if (0.0..1.0).contains(&a) {
        Ok(a)
    } else {
        Err("a pass rate from 0 up to (not including) 1, e.g. 0 or 0.5".to_owned())
    }
}

fn parse_alpha(s: &str) -> Result<f64, String> {
    fraction(s, "alpha must be between 0 and 1 (exclusive), e.g. 0.05")
}

pub(crate) fn run(args: CompareArgs) -> anyhow::Result<u8> {
    args.output.check()?;
    if args.plan {
        return plan(&args);
    }
    let base: Vec<PathBuf> = args.base.into_iter().chain(args.more_base).collect();
    let new: Vec<PathBuf> = args.new.into_iter().chain(args.more_new).collect();
    if base.is_empty() || new.is_empty() {
        return Err(CodedError::usage(
            "compare needs a BASE and a NEW run directory: wt compare BASE NEW \
             (more of either with --base DIR / --new DIR)",
        )
        .into());
    }
    let shown =
        |v: &[PathBuf]| -> Vec<String> { v.iter().map(|d| d.display().to_string()).collect() };
    let (base_names, new_names) = (shown(&base), shown(&new));
    // Each side counted as `wt report` counts it, with its failure reasons; runs read on both
    // sides are found by their run ids' hashes, BASE's held while NEW is read (unless a
    // directory is on both sides: that says it already).
    let ids = compare::dirs_on_both_sides(&base_names, &new_names).is_empty();
    let (base_dirs, new_dirs) = (super::run_dirs(base)?, super::run_dirs(new)?);
    let mut base_scan = scan::scan(
        &base_dirs,
        scan::Want {
            reasons: true,
            run_ids: ids,
            ..scan::Want::default()
        },
    )?;
    let base_ids = std::mem::take(&mut base_scan.run_ids);
    // What a side's directories cannot account for is said once, among the comparison's
    // `incomplete:` lines.
    let base_report =
        super::report::tell_report_but_gaps(Report::from_scan(base_scan), &base_dirs)?;
    let new_scan = scan::scan(
        &new_dirs,
        scan::Want {
            reasons: true,
            shared_with: ids.then_some(base_ids.as_slice()),
            ..scan::Want::default()
        },
    )?;
    drop(base_ids);
    let shared = new_scan.shared;
    let new_report = super::report::tell_report_but_gaps(Report::from_scan(new_scan), &new_dirs)?;
    if !args.allow_other_pack
        && let Some(why) =
            compare::other_pack(("BASE", &base_report.packs()), ("NEW", &new_report.packs()))
    {
        return Err(
            CodedError::usage(format!("{why}; --allow-other-pack compares them anyway")).into(),
        );
    }
    let calibrated = match &args.calibration {
        Some(file) => {
            crate::report::calibration::judges_in_file(file).map_err(CodedError::usage)?
        }
        None => Default::default(),
    };
    let mut c = Comparison::with_shared(
        &base_names,
        &base_report,
        &new_names,
        &new_report,
        Settings {
            alpha: args.alpha,
            correction: args.correction,
            allow_missing: args.allow_missing,
            fail_on_drop_to: args.fail_on_drop_to,
        },
        shared,
    );
    // A verdict a model graded is only as good as the judge: say where nobody has checked it.
    for (scenario, judges) in &new_report.ids.judges {
        let missing = judges.iter().filter(|j| !calibrated.contains(*j)).count();
        if missing > 0 {
            c.warnings.push(format!(
                "scenario `{scenario}`: its verdicts rest on {missing} judge(s) with no calibration (wt judge calibrate, then --calibration FILE)"
            ));
        }
    }
    let text = match args.format {
        Format::Table => super::report::for_terminal(&c.to_table()),
        Format::Markdown => super::report::for_reader(c.to_markdown()),
        Format::Json => c.to_json(),
        Format::Html => {
            super::report::for_reader(crate::report::html::compare_page(&c, &new_report))
        }
    };
    args.output.emit(&text)?;
    if args.format != Format::Table {
        crate::term::err_line(&c.summary);
    }
    for w in &c.warnings {
        crate::term::err_line(&format!("warning: {w}"));
    }
    for i in &c.incomplete {
        crate::term::err_line(&format!("incomplete: {i}"));
    }
    Ok(if args.gate { c.gate } else { exit::SUCCESS })
}
