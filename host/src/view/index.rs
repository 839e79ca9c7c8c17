//! What `wt view` holds of the runs directories, and the questions it answers over them.
//!
//! The runs are read by the one reader of stored runs ([`scan`], as `wt report` reads them:
//! sidecar rule, shards merged, copies counted once), with the [`Facts`] the list shows of
//! each run. A row per run holds those facts and the run's place in the reader's listing,
//! from which its trace is read again when a page needs it whole. Filters and sorts work
//! on the rows in memory; free text reads the traces of the runs the other filters leave,
//! in parallel, and its answer is kept for the next page.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use windtunnel_model::{Score, Trace, Verdict};

use crate::report::html::cut_to;
use crate::report::scan::{self, Facts, Listing};
use crate::report::triage::Rung;
use crate::report::{LoadedRun, Report, load};
use crate::score::Bucket;

/// The layers a run is judged on, in the order of [`Score::layers`] (bit `i` of
/// [`Facts::layers`] is the `i`-th).
pub(crate) const LAYERS: [&str; 4] = ["outcome", "trajectory", "constraint", "integrity"];

/// The rungs of the triage ladder, in its order.
pub(crate) const RUNGS: [Rung; 4] = [Rung::Wiring, Rung::Harness, Rung::Steering, Rung::Model];

/// Most runs one page or one answer of the API lists.
pub(crate) const MAX_LIMIT: usize = 1000;
/// Runs a page lists unless asked otherwise.
pub(crate) const DEFAULT_LIMIT: usize = 50;
/// Longest free-text query, in characters.
const MAX_QUERY: usize = 200;
/// Answers kept for the pages that follow (a query's next page, another sort of it).
const KEPT_ANSWERS: usize = 16;

/// One run in the list.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Row {
    /// Its place in the reader's listing (the report's order: scenario, run index, sweep).
    pub listed: u32,
    /// `None` for a run without a usable score.
    pub verdict: Option<Verdict>,
    pub facts: Facts,
    /// Turn latencies summed.
    pub duration_ms: u64,
}

impl Row {
    /// The names of the layers it failed, in the scorer's order.
    pub(crate) fn failed_layers(&self) -> impl Iterator<Item = &'static str> + '_ {
        LAYERS
            .iter()
            .enumerate()
            .filter(|(i, _)| self.facts.layers & 1 << i != 0)
            .map(|(_, l)| *l)
    }
}

/// The runs a verdict filter asks for: a [`Bucket`] (as `wt report` counts them), or the
/// runs without a usable score, a part of the error bucket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum VerdictWanted {
    Pass,
    Fail,
    Error,
    Unscored,
}

impl VerdictWanted {
    pub(crate) const ALL: [VerdictWanted; 4] = [
        VerdictWanted::Pass,
        VerdictWanted::Fail,
        VerdictWanted::Error,
        VerdictWanted::Unscored,
    ];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            VerdictWanted::Pass => "pass",
            VerdictWanted::Fail => "fail",
            VerdictWanted::Error => "error",
            VerdictWanted::Unscored => "unscored",
        }
    }

    pub(crate) fn admits(self, v: Option<Verdict>) -> bool {
        match self {
            VerdictWanted::Pass => Bucket::of(v) == Bucket::Pass,
            VerdictWanted::Fail => Bucket::of(v) == Bucket::Fail,
            VerdictWanted::Error => Bucket::of(v) == Bucket::Error,
            VerdictWanted::Unscored => v.is_none(),
        }
    }
}

/// A column of the list, to sort by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Column {
    /// The report's order: scenario, run index, sweep.
    Scenario,
    Verdict,
    Rung,
    Turns,
    ToolCalls,
    ModelCalls,
    Tokens,
    Cost,
    Duration,
}

impl Column {
    pub(crate) const ALL: [Column; 9] = [
        Column::Scenario,
        Column::Verdict,
        Column::Rung,
        Column::Turns,
        Column::ToolCalls,
        Column::ModelCalls,
        Column::Tokens,
        Column::Cost,
        Column::Duration,
    ];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Column::Scenario => "scenario",
            Column::Verdict => "verdict",
            Column::Rung => "rung",
            Column::Turns => "turns",
            Column::ToolCalls => "tool_calls",
            Column::ModelCalls => "model_calls",
            Column::Tokens => "tokens",
            Column::Cost => "cost",
            Column::Duration => "duration",
        }
    }
}

/// What a list page or `GET /api/runs` asks for.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Query {
    pub scenario: Option<String>,
    pub verdict: Option<VerdictWanted>,
    /// Runs that failed this layer (an index into [`LAYERS`]).
    pub layer: Option<usize>,
    pub rung: Option<Rung>,
    /// Runs some hook gave a warning on.
    pub hook_warning: bool,
    /// Free text, matched without regard to case.
    pub q: String,
    pub sort: Column,
    pub desc: bool,
    pub offset: usize,
    pub limit: usize,
}

impl Default for Query {
    fn default() -> Query {
        Query {
            scenario: None,
            verdict: None,
            layer: None,
            rung: None,
            hook_warning: false,
            q: String::new(),
            sort: Column::Scenario,
            desc: false,
            offset: 0,
            limit: DEFAULT_LIMIT,
        }
    }
}

impl Query {
    /// The parameters a list page and `GET /api/runs` take.
    pub(crate) const PARAMS: [&'static str; 10] = [
        "scenario",
        "verdict",
        "layer",
        "rung",
        "hook_warning",
        "q",
        "sort",
        "order",
        "offset",
        "limit",
    ];

    /// Reads a query string (`scenario=…&verdict=fail&…`); a parameter or a value `wt view`
    /// does not know is an error naming it (the page says so, the API answers 400).
    pub(crate) fn parse(query: &str) -> Result<Query, String> {
        let mut out = Query::default();
        for (k, v) in params(query, &Query::PARAMS)? {
            let v = v.trim();
            let shown = cut_to(v, 100);
            match &*k {
                "scenario" if !v.is_empty() => out.scenario = Some(v.to_owned()),
                "verdict" if !v.is_empty() => {
                    out.verdict = Some(
                        VerdictWanted::ALL
                            .into_iter()
                            .find(|w| w.as_str() == v.to_ascii_lowercase())
                            .ok_or_else(|| {
                                format!(
                                    "verdict must be pass, fail, error or unscored, not {shown:?}"
                                )
                            })?,
                    );
                }
                "layer" if !v.is_empty() => {
                    out.layer = Some(LAYERS.iter().position(|l| *l == v).ok_or_else(|| {
                        format!(
                            "layer must be outcome, trajectory, constraint or integrity, not {shown:?}"
                        )
                    })?);
                }
                "rung" if !v.is_empty() => {
                    out.rung =
                        Some(RUNGS.into_iter().find(|r| r.as_str() == v).ok_or_else(|| {
                            format!(
                                "rung must be wiring, harness, steering or model, not {shown:?}"
                            )
                        })?);
                }
                "hook_warning" => {
                    out.hook_warning = match v {
                        "1" | "true" | "on" | "yes" => true,
                        "" | "0" | "false" | "off" | "no" => false,
                        _ => return Err(format!("hook_warning must be 1 or 0, not {shown:?}")),
                    }
                }
                "q" => {
                    if v.chars().count() > MAX_QUERY {
                        return Err(format!("q is longer than {MAX_QUERY} characters"));
                    }
                    out.q = v.to_owned();
                }
                "sort" if !v.is_empty() => {
                    out.sort = Column::ALL
                        .into_iter()
                        .find(|c| c.as_str() == v)
                        .ok_or_else(|| format!("cannot sort by {shown:?}"))?;
                }
                "order" => {
                    out.desc = match v {
                        "" | "asc" => false,
                        "desc" => true,
                        _ => return Err(format!("order must be asc or desc, not {shown:?}")),
                    }
                }
                "offset" if !v.is_empty() => {
                    out.offset = v
                        .parse()
                        .map_err(|_| format!("offset must be a whole number, not {shown:?}"))?;
                }
                "limit" if !v.is_empty() => {
                    let n: usize = v
                        .parse()
                        .map_err(|_| format!("limit must be a whole number, not {shown:?}"))?;
                    if n == 0 || n > MAX_LIMIT {
                        return Err(format!("limit must be from 1 to {MAX_LIMIT}, not {n}"));
                    }
                    out.limit = n;
                }
                _ => {}
            }
        }
        Ok(out)
    }

    /// The query string of this query (what a link to it carries), with `offset` set.
    pub(crate) fn to_query_string(&self, offset: usize) -> String {
        let mut s = form_urlencoded::Serializer::new(String::new());
        if let Some(v) = &self.scenario {
            s.append_pair("scenario", v);
        }
        if let Some(v) = self.verdict {
            s.append_pair("verdict", v.as_str());
        }
        if let Some(l) = self.layer {
            s.append_pair("layer", LAYERS[l]);
        }
        if let Some(r) = self.rung {
            s.append_pair("rung", r.as_str());
        }
        if self.hook_warning {
            s.append_pair("hook_warning", "1");
        }
        if !self.q.is_empty() {
            s.append_pair("q", &self.q);
        }
        if self.sort != Column::Scenario {
            s.append_pair("sort", self.sort.as_str());
        }
        if self.desc {
            s.append_pair("order", "desc");
        }
        if offset > 0 {
            s.append_pair("offset", &offset.to_string());
        }
        if self.limit != DEFAULT_LIMIT {
            s.append_pair("limit", &self.limit.to_string());
        }
        s.finish()
    }

    /// What an answer is kept by: everything but the page asked for.
    fn answer_key(&self) -> Query {
        Query {
            offset: 0,
            limit: 0,
            ..self.clone()
        }
    }

    fn admits(&self, row: &Row, scenario: &str) -> bool {
        self.scenario.as_deref().is_none_or(|s| s == scenario)
            && self.verdict.is_none_or(|v| v.admits(row.verdict))
            && self.layer.is_none_or(|l| row.facts.layers & 1 << l != 0)
            && self.rung.is_none_or(|r| row.facts.rung == Some(r))
            && (!self.hook_warning || row.facts.hook_warnings > 0)
    }
}

/// A page of the answer to a query.
pub(crate) struct Answer {
    /// Every run that matches.
    pub total: usize,
    /// The rows of the page asked for, by their index in [`Index::rows`].
    pub page: Vec<u32>,
    /// Runs whose trace could not be read again for the free text (counted as not
    /// matching).
    pub unreadable: usize,
}

/// An answer kept: the query (without its page), every matching row, and how many runs
/// could not be read for its free text.
type Kept = (Query, Arc<Vec<u32>>, usize);

/// The runs of the directories read, as of one reading.
pub(crate) struct Index {
    /// The summary `wt report` would give of them (with the reader's listing).
    pub report: Report,
    /// One per run counted, in the report's order.
    pub rows: Vec<Row>,
    /// (hash of run id, row) sorted: finds a run by its id.
    by_run_id: Vec<(u64, u32)>,
    /// The scenarios, sorted.
    pub scenarios: Vec<String>,
    /// The rows in each verdict filter's answer, in [`VerdictWanted::ALL`]'s order.
    pub counts: [usize; 4],
    /// Answers kept, most recent last.
    answers: Mutex<Vec<Kept>>,
}

impl Index {
    /// Reads `dirs` as `wt report` does.
    pub(crate) fn read(dirs: &[PathBuf]) -> anyhow::Result<Index> {
        let mut found = scan::scan(
            dirs,
            scan::Want {
                listing: true,
                facts: true,
                reasons: true,
                ..scan::Want::default()
            },
        )?;
        let mut facts = std::mem::take(&mut found.facts);
        facts.sort_unstable_by_key(|f| f.identity);
        let report = Report::from_scan(found);
        let listing = report.listing.as_ref().expect("the scan kept its listing");
        let mut rows = Vec::with_capacity(listing.len());
        for i in 0..listing.len() {
            let identity = listing.identity(i);
            let f = facts
                .binary_search_by_key(&identity, |f| f.identity)
                .map(|at| facts[at])
                .unwrap_or_default();
            rows.push(Row {
                listed: u32::try_from(i).unwrap_or(u32::MAX),
                verdict: listing.brief(i).verdict,
                facts: f,
                duration_ms: listing.latency_ms(i),
            });
        }
        drop(facts);
        let mut by_run_id: Vec<(u64, u32)> = rows
            .iter()
            .enumerate()
            .map(|(i, r)| (r.facts.run_id_hash, i as u32))
            .collect();
        by_run_id.sort_unstable();
        let scenarios = report.scenarios.iter().map(|s| s.id().to_owned()).collect();
        let counts =
            VerdictWanted::ALL.map(|w| rows.iter().filter(|r| w.admits(r.verdict)).count());
        Ok(Index {
            report,
            rows,
            by_run_id,
            scenarios,
            counts,
            answers: Mutex::new(Vec::new()),
        })
    }

    fn listing(&self) -> &Listing {
        self.report
            .listing
            .as_ref()
            .expect("an index keeps its listing")
    }

    /// The scenario of a row.
    pub(crate) fn scenario(&self, row: u32) -> &str {
        self.listing()
            .brief(self.rows[row as usize].listed as usize)
            .scenario
    }

    /// The run index and sweep of a row.
    pub(crate) fn run_index_and_sweep(&self, row: u32) -> (u32, &str) {
        let b = self
            .listing()
            .brief(self.rows[row as usize].listed as usize);
        (b.run_index, b.sweep)
    }

    /// A row's trace file.
    pub(crate) fn path(&self, row: u32) -> PathBuf {
        self.listing()
            .path_at(self.rows[row as usize].listed as usize)
    }

    /// A row's run whole, with its hook artifacts; `Err` says why it cannot be read now.
    pub(crate) fn load(&self, row: u32) -> Result<LoadedRun, String> {
        let run = self
            .listing()
            .load_at(self.rows[row as usize].listed as usize)
            .map_err(|why| cut_to(&why, MAX_REASON))?;
        if scan::hash_run_id(&run.trace.run_id) != self.rows[row as usize].facts.run_id_hash {
            return Err(unreadable(&run.path, "it now holds another run"));
        }
        Ok(run)
    }

    /// The directories read.
    pub(crate) fn dirs(&self) -> &[PathBuf] {
        self.listing().dirs()
    }

    /// The rows whose run has id `run_id` (pinned sweeps of different agents may reuse one).
    pub(crate) fn find(&self, run_id: &str) -> Vec<u32> {
        let h = scan::hash_run_id(run_id);
        let from = self.by_run_id.partition_point(|(x, _)| *x < h);
        self.by_run_id[from..]
            .iter()
            .take_while(|(x, _)| *x == h)
            .map(|(_, row)| *row)
            .collect()
    }

    /// The runs that match `query`, the page asked for.
    pub(crate) fn answer(&self, query: &Query) -> Answer {
        let key = query.answer_key();
        let kept = {
            let answers = self.answers.lock().unwrap_or_else(|e| e.into_inner());
            answers
                .iter()
                .find(|(k, _, _)| *k == key)
                .map(|(_, rows, unreadable)| (rows.clone(), *unreadable))
        };
        let (all, unreadable) = match kept {
            Some(kept) => kept,
            None => {
                let (rows, unreadable) = self.matching(query);
                let rows = Arc::new(rows);
                let mut answers = self.answers.lock().unwrap_or_else(|e| e.into_inner());
                answers.retain(|(k, _, _)| *k != key);
                if answers.len() == KEPT_ANSWERS {
                    answers.remove(0);
                }
                answers.push((key, rows.clone(), unreadable));
                (rows, unreadable)
            }
        };
        let page = all
            .iter()
            .skip(query.offset)
            .take(query.limit)
            .copied()
            .collect();
        Answer {
            total: all.len(),
            page,
            unreadable,
        }
    }

    /// Every row matching `query`, in its order, and how many traces could not be read for
    /// its free text.
    fn matching(&self, query: &Query) -> (Vec<u32>, usize) {
        let mut rows: Vec<u32> = (0..self.rows.len() as u32)
            .filter(|&i| query.admits(&self.rows[i as usize], self.scenario(i)))
            .collect();
        let mut unreadable = 0;
        if !query.q.is_empty() {
            let (kept, unread) = self.with_text(&rows, &query.q);
            rows = kept;
            unreadable = unread;
        }
        let key = |i: &u32| -> (u64, f64) {
            let r = &self.rows[*i as usize];
            let f = &r.facts;
            match query.sort {
                Column::Scenario => (0, 0.0),
                Column::Verdict => (
                    match r.verdict {
                        Some(Verdict::Pass) => 0,
                        Some(Verdict::Fail) => 1,
                        Some(_) => 2,
                        None => 3,
                    },
                    0.0,
                ),
                Column::Rung => (
                    f.rung
                        .and_then(|r| RUNGS.iter().position(|x| *x == r))
                        .map_or(0, |p| p as u64 + 1),
                    0.0,
                ),
                Column::Turns => (u64::from(f.turns), 0.0),
                Column::ToolCalls => (u64::from(f.tool_calls), 0.0),
                Column::ModelCalls => (u64::from(f.model_calls), 0.0),
                Column::Tokens => (f.tokens, 0.0),
                Column::Cost => (u64::from(f.cost_usd.is_some()), f.cost_usd.unwrap_or(0.0)),
                Column::Duration => (r.duration_ms, 0.0),
            }
        };
        // Stable: equal keys keep the report's order, whichever way the column runs.
        rows.sort_by(|a, b| {
            let (ka, kb) = (key(a), key(b));
            let o = ka.0.cmp(&kb.0).then(ka.1.total_cmp(&kb.1));
            if query.desc { o.reverse() } else { o }
        });
        (rows, unreadable)
    }

    /// The rows of `rows` whose run holds `q` (without regard to case) in a turn's input or
    /// reply, a tool call's arguments, result or error, a model call's messages or response,
    /// a layer's evidence, a judge's reasoning, an error or a warning; and how many could not
    /// be read.
    fn with_text(&self, rows: &[u32], q: &str) -> (Vec<u32>, usize) {
        let needle = q.to_lowercase();
        let workers = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
            .clamp(1, 8);
        let chunk = rows.len().div_ceil(workers).max(1);
        let parts: Vec<(Vec<u32>, usize)> = std::thread::scope(|s| {
            let handles: Vec<_> = rows
                .chunks(chunk)
                .map(|part| {
                    let needle = &needle;
                    s.spawn(move || {
                        let mut kept = Vec::new();
                        let mut unread = 0;
                        for &row in part {
                            match self.read_run(row) {
                                Ok((trace, score)) => {
                                    if holds(&trace, score.as_ref(), needle) {
                                        kept.push(row);
                                    }
                                }
                                Err(_) => unread += 1,
                            }
                        }
                        (kept, unread)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_default())
                .collect()
        });
        let unread = parts.iter().map(|(_, n)| n).sum();
        (parts.into_iter().flat_map(|(k, _)| k).collect(), unread)
    }

    /// The row a page or API call names by run id, and sweep when several share the id: `Err`
    /// with every row of the id when it names none (empty) or several.
    pub(crate) fn pick(&self, run_id: &str, sweep: Option<&str>) -> Result<u32, Vec<u32>> {
        // A row whose files cannot be read now is kept by its id's hash: its page says it
        // cannot be read rather than that no such run exists.
        let rows: Vec<u32> = self
            .find(run_id)
            .into_iter()
            .filter(|&r| !self.run_id(r).is_ok_and(|id| id != run_id))
            .collect();
        let chosen: Vec<u32> = match sweep {
            Some(s) => rows
                .iter()
                .copied()
                .filter(|&r| self.run_index_and_sweep(r).1 == s)
                .collect(),
            None => rows.clone(),
        };
        match chosen.as_slice() {
            [one] => Ok(*one),
            _ => Err(rows),
        }
    }

    /// The journal events of a run (of its sweep's journals, the lines naming its id), in
    /// file order; at most [`MAX_EVENTS`], each line at most [`MAX_EVENT_LINE`] bytes.
    pub(crate) fn events(&self, row: u32, run_id: &str) -> Vec<serde_json::Value> {
        let (_, sweep) = self.run_index_and_sweep(row);
        let marker = format!(
            "\"run_id\":{}",
            serde_json::to_string(run_id).unwrap_or_default()
        );
        let mut out = Vec::new();
        for s in self.report.sweeps.iter().filter(|s| s.sweep_id == sweep) {
            for journal in &s.journals {
                let Ok(file) = open_plain(Path::new(journal)) else {
                    continue;
                };
                let mut reader = std::io::BufReader::new(file);
                let mut line = Vec::new();
                while let Some(whole) = read_line_bounded(&mut reader, &mut line, MAX_EVENT_LINE) {
                    if out.len() == MAX_EVENTS {
                        return out;
                    }
                    if !whole || !contains(&line, marker.as_bytes()) {
                        continue;
                    }
                    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&line)
                        && v["run_id"] == run_id
                    {
                        out.push(v);
                    }
                }
            }
        }
        out
    }

    /// A row's run id, read again from its score (small), else its trace; `Err` says why
    /// neither holds the id the run was read with (a file rewritten, truncated, removed).
    pub(crate) fn run_id(&self, row: u32) -> Result<String, String> {
        #[derive(serde::Deserialize)]
        struct Id {
            run_id: String,
        }
        let path = self.path(row);
        let want = self.rows[row as usize].facts.run_id_hash;
        let read = |p: &Path, limit: u64| -> Result<String, String> {
            let bytes = load::read_bounded(p, limit).map_err(|why| why.to_string())?;
            let id = load::parse_json::<Id>(&bytes)
                .map_err(|e| format!("not a wt trace ({e})"))?
                .run_id;
            if scan::hash_run_id(&id) == want {
                Ok(id)
            } else {
                Err("it now holds another run".to_owned())
            }
        };
        read(&path.with_extension("score.json"), load::MAX_SIDECAR_BYTES)
            .or_else(|_| read(&path, load::MAX_TRACE_BYTES))
            .map_err(|why| unreadable(&path, &why))
    }

    /// A row's trace and score, read again (without its artifacts).
    pub(crate) fn read_run(&self, row: u32) -> Result<(Trace, Option<Score>), String> {
        let path = self.path(row);
        let bytes = load::read_bounded(&path, load::MAX_TRACE_BYTES)
            .map_err(|why| format!("{}: {why}", path.display()))?;
        let trace: Trace = load::parse_json(&bytes)
            .map_err(|e| format!("{}: not a wt trace ({e})", path.display()))?;
        let score = load::read_bounded(&path.with_extension("score.json"), load::MAX_SIDECAR_BYTES)
            .ok()
            .and_then(|b| load::parse_json::<Score>(&b).ok())
            .filter(|s| s.run_id == trace.run_id);
        Ok((trace, score))
    }
}

/// Longest reason shown for a run that cannot be read, in characters.
const MAX_REASON: usize = 500;

/// Why the run at `path` cannot be read, bounded.
fn unreadable(path: &Path, why: &str) -> String {
    cut_to(&format!("{}: {why}", path.display()), MAX_REASON)
}

/// Most journal events a run's page shows.
pub(crate) const MAX_EVENTS: usize = 2000;
/// Longest journal line read; a longer one is skipped.
const MAX_EVENT_LINE: usize = 1 << 20;

/// Opens a file that is a regular file, never through a symbolic link.
fn open_plain(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    Ok(file)
}

/// Reads the next line into `line` (without its newline), keeping at most `max` bytes:
/// `Some(true)` for a whole line, `Some(false)` for one that was longer (cut), `None` at the
/// end of the file or on an error.
fn read_line_bounded(
    r: &mut impl std::io::BufRead,
    line: &mut Vec<u8>,
    max: usize,
) -> Option<bool> {
    line.clear();
    let mut whole = true;
    let mut any = false;
    loop {
        let buf = r.fill_buf().ok()?;
        if buf.is_empty() {
            return any.then_some(whole);
        }
        any = true;
        let (part, found) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (&buf[..i], Some(i + 1)),
            None => (buf, None),
        };
        if line.len() + part.len() <= max {
            line.extend_from_slice(part);
        } else {
            whole = false;
        }
        let used = found.unwrap_or(buf.len());
        r.consume(used);
        if found.is_some() {
            return Some(whole);
        }
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// Whether `needle` (lower case) is in what a person reads of a run.
fn holds(t: &Trace, score: Option<&Score>, needle: &str) -> bool {
    let has = |s: &str| s.to_lowercase().contains(needle);
    let has_json = |v: &serde_json::Value| match v {
        serde_json::Value::Null => false,
        serde_json::Value::String(s) => has(s),
        v => has(&v.to_string()),
    };
    t.turns.iter().any(|turn| {
        has(&turn.input)
            || turn.reply.as_deref().is_some_and(has)
            || turn.error.as_deref().is_some_and(has)
    }) || t.evidence.tool_calls.iter().any(|c| {
        has(&c.name)
            || has_json(&c.arguments)
            || has_json(&c.result)
            || c.error.as_deref().is_some_and(has)
    }) || t.evidence.model_calls.iter().any(|c| {
        has_json(&c.messages) || has_json(&c.response) || c.error.as_deref().is_some_and(has)
    }) || t.error.as_deref().is_some_and(has)
        || t.worker_warnings.iter().any(|w| has(w))
        || score.is_some_and(|s| {
            s.error.as_deref().is_some_and(has)
                || s.layers().iter().any(|(_, l)| has(&l.detail))
                || s.judges.iter().any(|g| {
                    g.reasoning.iter().any(|r| has(r)) || g.error.as_deref().is_some_and(has)
                })
        })
}

/// What tells whether the runs directories changed since they were read: each directory's
/// modification time (a run written adds its files) and each journal's length and time
/// (a sweep's events, its end among them).
pub(crate) fn fingerprint(
    dirs: &[PathBuf],
    journals: &[PathBuf],
) -> Vec<(u64, Option<std::time::SystemTime>)> {
    let stat = |p: &Path| {
        std::fs::symlink_metadata(p)
            .map(|m| (m.len(), m.modified().ok()))
            .unwrap_or((u64::MAX, None))
    };
    dirs.iter().chain(journals).map(|p| stat(p)).collect()
}

/// The parameters of a query string, each checked against the ones the endpoint knows:
/// one it does not know, or one given twice, is an error naming it (a mistyped filter
/// must not be answered as if it were absent).
pub(crate) fn params(query: &str, known: &[&str]) -> Result<Vec<(String, String)>, String> {
    let mut out: Vec<(String, String)> = Vec::new();
    for (k, v) in form_urlencoded::parse(query.as_bytes()) {
        if !known.contains(&&*k) {
            let k = crate::report::html::cut_to(&k, 100);
            return Err(if known.is_empty() {
                format!("unknown parameter {k:?}: this address takes none")
            } else {
                format!(
                    "unknown parameter {k:?}: this address takes {}",
                    known.join(", ")
                )
            });
        }
        if out.iter().any(|(seen, _)| *seen == k) {
            return Err(format!("parameter {k:?} given twice"));
        }
        out.push((k.into_owned(), v.into_owned()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_survives_its_own_link() {
        let q = Query::parse(
            "scenario=order%20status&verdict=FAIL&layer=constraint&rung=steering&hook_warning=1&q=a%26b+c&sort=cost&order=desc&offset=150&limit=75",
        )
        .unwrap();
        assert_eq!(q.scenario.as_deref(), Some("order status"));
        assert_eq!(q.verdict, Some(VerdictWanted::Fail));
        assert_eq!(q.layer, Some(2));
        assert_eq!(q.rung, Some(Rung::Steering));
        assert!(q.hook_warning);
        assert_eq!(q.q, "a&b c");
        assert_eq!(
            (q.sort, q.desc, q.offset, q.limit),
            (Column::Cost, true, 150, 75)
        );
        assert_eq!(Query::parse(&q.to_query_string(150)).unwrap(), q);
        assert_eq!(Query::parse("").unwrap(), Query::default());
        assert_eq!(Query::default().to_query_string(0), "");
    }

    #[test]
    fn a_value_it_does_not_know_is_named() {
        for (query, said) in [
            ("verdict=maybe", "verdict must be"),
            ("layer=style", "layer must be"),
            ("rung=top", "rung must be"),
            ("sort=color", "cannot sort by"),
            ("offset=-1", "offset must be"),
            ("limit=0", "limit must be from 1 to 1000"),
            ("limit=1001", "limit must be from 1 to 1000"),
            ("order=bogus", "order must be asc or desc, not \"bogus\""),
            ("hook_warning=maybe", "hook_warning must be 1 or 0"),
            (
                "bogus=1",
                "unknown parameter \"bogus\": this address takes scenario, verdict",
            ),
            (
                "verdict=pass&verdict=fail",
                "parameter \"verdict\" given twice",
            ),
        ] {
            let e = Query::parse(query).unwrap_err();
            assert!(e.contains(said), "{query}: {e}");
        }
        let long = format!("q={}", "x".repeat(MAX_QUERY + 1));
        assert!(Query::parse(&long).unwrap_err().contains("longer than"));
    }

    #[test]
    fn a_line_longer_than_the_bound_is_cut_and_the_next_one_read_whole() {
        let text = format!("{}\nshort\nlast", "y".repeat(100));
        let mut r = std::io::BufReader::with_capacity(8, text.as_bytes());
        let mut line = Vec::new();
        assert_eq!(read_line_bounded(&mut r, &mut line, 10), Some(false));
        assert_eq!(read_line_bounded(&mut r, &mut line, 10), Some(true));
        assert_eq!(line, b"short");
        assert_eq!(read_line_bounded(&mut r, &mut line, 10), Some(true));
        assert_eq!(line, b"last");
        assert_eq!(read_line_bounded(&mut r, &mut line, 10), None);
    }

    #[test]
    fn verdict_filters_admit_their_own() {
        assert!(VerdictWanted::Pass.admits(Some(Verdict::Pass)));
        assert!(!VerdictWanted::Pass.admits(Some(Verdict::Fail)));
        assert!(VerdictWanted::Error.admits(Some(Verdict::Error)));
        // A run without a score is an error as `wt report` counts it, and unscored too.
        assert!(VerdictWanted::Error.admits(None));
        assert!(VerdictWanted::Unscored.admits(None));
        assert!(!VerdictWanted::Unscored.admits(Some(Verdict::Error)));
    }

    #[test]
    fn a_parameter_it_does_not_know_or_given_twice_is_named() {
        assert_eq!(
            params("a=1&b=2", &["a", "b"]).unwrap(),
            vec![("a".into(), "1".into()), ("b".into(), "2".into())]
        );
        let e = params("a=1&bogus=2", &["a"]).unwrap_err();
        assert_eq!(e, "unknown parameter \"bogus\": this address takes a");
        let e = params("x", &[]).unwrap_err();
        assert!(e.contains("takes none"), "{e}");
        assert!(
            params("a=1&a=2", &["a"])
                .unwrap_err()
                .contains("given twice")
        );
        let long = params(&"k".repeat(5000), &[]).unwrap_err();
        assert!(long.len() < 300, "the name is cut: {}", long.len());
    }
}
