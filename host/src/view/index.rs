//! What `wt view` holds of the runs directories, and the questions it answers over them.
//!
//! The runs are read by the one reader of stored runs ([`scan`], as `wt report` reads them:
//! sidecar rule, shards merged, copies counted once), with the [`Facts`] the list shows of
//! each run. A row per run holds those facts and the run's place in the reader's listing,
//! from which its trace is read again when a page needs it whole. Filters and sorts work
//! on the rows in memory; free text reads the traces of the runs the other filters leave,
//! in parallel, and its answer is kept for the next page.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use windtunnel_model::{Score, Trace, Verdict};

use crate::report::cells::{self, Cell, CellRun};
use crate::report::html::cut_to;
use crate::report::scan::{self, Brief, Facts, LAYERS, Listing};
use crate::report::triage::Rung;
use crate::report::{LoadedRun, Report, load};
use crate::score::Bucket;

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
    /// Runs of this agent (its label).
    pub agent: Option<String>,
    /// Runs whose agent has this model.
    pub model: Option<String>,
    pub sweep: Option<String>,
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
    /// Where the page starts: after the run this cursor names (see [`Cursor`]).
    pub cursor: Option<Cursor>,
}

impl Default for Query {
    fn default() -> Query {
        Query {
            scenario: None,
            agent: None,
            model: None,
            sweep: None,
            cursor: None,
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
    pub(crate) const PARAMS: [&'static str; 14] = [
        "scenario",
        "agent",
        "model",
        "sweep",
        "cursor",
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
            out.set(&k, v.trim())?;
        }
        if let Some(c) = &out.cursor {
            if out.offset > 0 {
                return Err("cursor and offset cannot be given together".to_owned());
            }
            if (c.sort.as_str(), c.desc) != (out.sort.as_str(), out.desc) {
                return Err(
                    "this cursor belongs to another sort: follow the list's own next link"
                        .to_owned(),
                );
            }
        }
        Ok(out)
    }

    /// Sets parameter `k` to `v` (an empty value leaves most parameters as they are).
    fn set(&mut self, k: &str, v: &str) -> Result<(), String> {
        let shown = cut_to(v, 100);
        let owned = || Some(v.to_owned());
        match k {
            _ if v.is_empty() && !matches!(k, "hook_warning" | "q" | "order") => {}
            "scenario" => self.scenario = owned(),
            "agent" => self.agent = owned(),
            "model" => self.model = owned(),
            "sweep" => self.sweep = owned(),
            "cursor" => self.cursor = Some(Cursor::parse(v)?),
            "verdict" => {
                let v = v.to_ascii_lowercase();
                self.verdict = Some(one_of(
                    VerdictWanted::ALL,
                    |w| w.as_str() == v,
                    || format!("verdict must be pass, fail, error or unscored, not {shown:?}"),
                )?);
            }
            "layer" => {
                self.layer = Some(one_of(
                    0..LAYERS.len(),
                    |&l| LAYERS[l] == v,
                    || {
                        format!(
                            "layer must be outcome, trajectory, constraint or integrity, not {shown:?}"
                        )
                    },
                )?);
            }
            "rung" => {
                self.rung = Some(one_of(
                    RUNGS,
                    |r| r.as_str() == v,
                    || format!("rung must be wiring, harness, steering or model, not {shown:?}"),
                )?);
            }
            "hook_warning" => {
                self.hook_warning = match v {
                    "1" | "true" | "on" | "yes" => true,
                    "" | "0" | "false" | "off" | "no" => false,
                    _ => return Err(format!("hook_warning must be 1 or 0, not {shown:?}")),
                }
            }
            "q" if v.chars().count() > MAX_QUERY => {
                return Err(format!("q is longer than {MAX_QUERY} characters"));
            }
            "q" => self.q = v.to_owned(),
            "sort" => {
                self.sort = one_of(
                    Column::ALL,
                    |c| c.as_str() == v,
                    || format!("cannot sort by {shown:?}"),
                )?;
            }
            "order" => {
                self.desc = match v {
                    "" | "asc" => false,
                    "desc" => true,
                    _ => return Err(format!("order must be asc or desc, not {shown:?}")),
                }
            }
            "offset" => {
                self.offset = v
                    .parse()
                    .map_err(|_| format!("offset must be a whole number, not {shown:?}"))?;
            }
            "limit" => {
                let n: usize = v
                    .parse()
                    .map_err(|_| format!("limit must be a whole number, not {shown:?}"))?;
                if n == 0 || n > MAX_LIMIT {
                    return Err(format!("limit must be from 1 to {MAX_LIMIT}, not {n}"));
                }
                self.limit = n;
            }
            _ => {}
        }
        Ok(())
    }

    /// The query string of this query (what a link to it carries), with `offset` set and
    /// without a cursor.
    pub(crate) fn to_query_string(&self, offset: usize) -> String {
        self.query_string(offset, None)
    }

    /// The query string of the page that starts after `cursor`.
    pub(crate) fn to_cursor_string(&self, cursor: &Cursor) -> String {
        self.query_string(0, Some(cursor))
    }

    fn query_string(&self, offset: usize, cursor: Option<&Cursor>) -> String {
        let mut s = form_urlencoded::Serializer::new(String::new());
        if let Some(v) = &self.scenario {
            s.append_pair("scenario", v);
        }
        for (k, v) in [
            ("agent", &self.agent),
            ("model", &self.model),
            ("sweep", &self.sweep),
        ] {
            if let Some(v) = v {
                s.append_pair(k, v);
            }
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
        if let Some(c) = cursor {
            s.append_pair("cursor", &c.encode());
        }
        s.finish()
    }

    /// What an answer is kept by: everything but the page asked for.
    fn answer_key(&self) -> Query {
        Query {
            offset: 0,
            limit: 0,
            cursor: None,
            ..self.clone()
        }
    }

    fn admits(&self, row: &Row, b: &Brief<'_>) -> bool {
        self.scenario.as_deref().is_none_or(|s| s == b.scenario)
            && self.agent.as_deref().is_none_or(|s| s == b.agent)
            && self.model.as_deref().is_none_or(|s| s == b.model)
            && self.sweep.as_deref().is_none_or(|s| s == b.sweep)
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
    /// Where the page starts in the answer: the query's offset, or the place after its
    /// cursor.
    pub start: usize,
    /// The cursor of the page after this one; `None` on the last page.
    pub next: Option<Cursor>,
    /// The rows of the page asked for, by their index in [`Index::rows`].
    pub page: Vec<u32>,
    /// Runs whose trace could not be read again for the free text (counted as not
    /// matching).
    pub unreadable: usize,
}

/// Where a run sorts in a query's answer (see [`Index::sort_key`]).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct SortKey<'a> {
    desc: bool,
    value: (u64, f64),
    scenario: Cow<'a, str>,
    run_index: u32,
    sweep: Cow<'a, str>,
    agent: Cow<'a, str>,
    identity: u64,
}

impl SortKey<'_> {
    fn owned(self) -> SortKey<'static> {
        SortKey {
            scenario: Cow::Owned(self.scenario.into_owned()),
            sweep: Cow::Owned(self.sweep.into_owned()),
            agent: Cow::Owned(self.agent.into_owned()),
            ..self
        }
    }
}

/// Where a page of a list starts: after the run whose sort key it holds, in the list's sort.
/// Written into a `next` link as opaque text (URL-safe base64 of JSON); following it gives
/// the runs after that one as the directories are read now, so a run is never listed twice
/// and a run read before the first page is never skipped, whatever a sweep adds meanwhile.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Cursor {
    pub sort: Column,
    pub desc: bool,
    key: SortKey<'static>,
}

/// Longest cursor read, in characters.
const MAX_CURSOR: usize = 4096;

impl Cursor {
    pub(crate) fn encode(&self) -> String {
        use base64::Engine as _;
        let text = serde_json::to_vec(&(self.sort.as_str(), &self.key)).unwrap_or_default();
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(text)
    }

    fn parse(text: &str) -> Result<Cursor, String> {
        use base64::Engine as _;
        let bad =
            || "cursor is not one this server wrote: follow the list's own next link".to_owned();
        if text.len() > MAX_CURSOR {
            return Err(bad());
        }
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(text)
            .map_err(|_| bad())?;
        let (sort, key): (String, SortKey<'static>) =
            serde_json::from_slice(&bytes).map_err(|_| bad())?;
        let sort = Column::ALL
            .into_iter()
            .find(|c| c.as_str() == sort)
            .ok_or_else(bad)?;
        Ok(Cursor {
            sort,
            desc: key.desc,
            key,
        })
    }
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
    /// What the runs of each scenario add up to per agent, model and sweep.
    pub cells: Vec<Cell>,
    /// The same, per scenario (every agent, model and sweep together).
    pub scenario_cells: Vec<Cell>,
    /// Answers kept, most recent last.
    answers: Mutex<Vec<Kept>>,
    /// Free-text answers kept (in row order, by filters and text without the sort), most
    /// recent last.
    texts: Mutex<Vec<Kept>>,
    /// The index files the runs counted from a line name ([`Facts::line`]).
    indexes: Vec<PathBuf>,
    /// How many runs were read from the directories' indexes rather than their files.
    pub indexed: usize,
}

/// Keeps an answer, the oldest dropped past [`KEPT_ANSWERS`].
fn keep(kept: &Mutex<Vec<Kept>>, key: Query, rows: Arc<Vec<u32>>, unreadable: usize) {
    let mut kept = kept.lock().unwrap_or_else(|e| e.into_inner());
    kept.retain(|(k, _, _)| *k != key);
    if kept.len() == KEPT_ANSWERS {
        kept.remove(0);
    }
    kept.push((key, rows, unreadable));
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
        let (indexes, indexed) = (std::mem::take(&mut found.indexes), found.indexed);
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
        let cell_runs = |whole: bool| {
            rows.iter().map(move |r| {
                let b = listing.brief(r.listed as usize);
                let part = |v| if whole { "" } else { v };
                CellRun {
                    scenario: b.scenario,
                    agent: part(b.agent),
                    model: part(b.model),
                    sweep: part(b.sweep),
                    verdict: r.verdict,
                    duration_ms: r.duration_ms,
                    tokens: r.facts.tokens,
                    cost_usd: r.facts.cost_usd,
                    eval_tokens: r.facts.eval_tokens,
                    eval_cost_usd: r.facts.eval_cost_usd,
                }
            })
        };
        let cells = cells::cells(cell_runs(false));
        let scenario_cells = cells::cells(cell_runs(true));
        Ok(Index {
            report,
            rows,
            by_run_id,
            scenarios,
            counts,
            cells,
            scenario_cells,
            answers: Mutex::new(Vec::new()),
            texts: Mutex::new(Vec::new()),
            indexes,
            indexed,
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
        self.brief(row).scenario
    }

    /// What the listing holds of a row: scenario, run index, sweep, agent, model, verdict.
    pub(crate) fn brief(&self, row: u32) -> Brief<'_> {
        self.listing()
            .brief(self.rows[row as usize].listed as usize)
    }

    /// The distinct values of a field of the cells (agents, models, sweeps), sorted; empty
    /// ones left out.
    pub(crate) fn distinct(&self, field: fn(&Cell) -> Option<&str>) -> Vec<&str> {
        let set: std::collections::BTreeSet<&str> = self
            .cells
            .iter()
            .filter_map(field)
            .filter(|v| !v.is_empty())
            .collect();
        set.into_iter().collect()
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

    /// A row's index line, read again (with the index's path), when the run was counted from
    /// one and the line is still there.
    fn line(&self, row: u32) -> Option<(&Path, scan::index::Entry)> {
        let place = self.rows[row as usize].facts.line?;
        let index = self.indexes.get(place.index as usize)?;
        let path = self.path(row);
        let trace = path.file_name()?.to_str()?;
        let e = scan::index::entry_at(index, place.offset, trace)?;
        Some((index.as_path(), e))
    }

    /// A row's run whole, with its hook artifacts (those its index line names, when it was
    /// counted from one; else those found beside it); `Err` says why it cannot be read now.
    pub(crate) fn load(&self, row: u32) -> Result<LoadedRun, String> {
        let listed = self.rows[row as usize].listed as usize;
        let run = match self.line(row) {
            Some((_, e)) => self.listing().load_at_with(listed, &e.artifacts),
            None => self.listing().load_at(listed),
        }
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
                keep(&self.answers, key, rows.clone(), unreadable);
                (rows, unreadable)
            }
        };
        let start = match &query.cursor {
            Some(c) => {
                all.partition_point(|&r| self.order(&self.sort_key(query, r), &c.key).is_le())
            }
            None => query.offset.min(all.len()),
        };
        let page: Vec<u32> = all.iter().skip(start).take(query.limit).copied().collect();
        let next = match page.last() {
            Some(&last) if start + page.len() < all.len() => Some(Cursor {
                sort: query.sort,
                desc: query.desc,
                key: self.sort_key(query, last).owned(),
            }),
            _ => None,
        };
        Answer {
            total: all.len(),
            start,
            next,
            page,
            unreadable,
        }
    }

    /// Where a row sorts in a query's answer, by a key that does not depend on the other
    /// runs read: the column's value, then the report's order (scenario, run index, sweep),
    /// agent and the run's identity. A run keeps its key from one reading to the next, so a
    /// cursor finds its place again however many runs were added since.
    fn sort_key(&self, query: &Query, row: u32) -> SortKey<'_> {
        let r = &self.rows[row as usize];
        let f = &r.facts;
        let b = self.brief(row);
        let value = match query.sort {
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
        };
        SortKey {
            desc: query.desc,
            value,
            scenario: Cow::Borrowed(b.scenario),
            run_index: b.run_index,
            sweep: Cow::Borrowed(b.sweep),
            agent: Cow::Borrowed(b.agent),
            identity: f.identity,
        }
    }

    /// The order of two keys of one query: the column's value as the query runs it, ties
    /// in the report's order whichever way the column runs.
    fn order(&self, a: &SortKey, b: &SortKey) -> std::cmp::Ordering {
        let by_value = a
            .value
            .0
            .cmp(&b.value.0)
            .then(a.value.1.total_cmp(&b.value.1));
        let by_value = if a.desc { by_value.reverse() } else { by_value };
        by_value
            .then_with(|| a.scenario.cmp(&b.scenario))
            .then(a.run_index.cmp(&b.run_index))
            .then_with(|| a.sweep.cmp(&b.sweep))
            .then_with(|| a.agent.cmp(&b.agent))
            .then(a.identity.cmp(&b.identity))
    }

    /// Every row matching `query`, in its order, and how many traces could not be read for
    /// its free text.
    fn matching(&self, query: &Query) -> (Vec<u32>, usize) {
        let (rows, unreadable) = if query.q.is_empty() {
            (self.filtered(query), 0)
        } else {
            let (rows, unreadable) = self.text_answer(query);
            (rows.to_vec(), unreadable)
        };
        let keys: Vec<SortKey> = rows.iter().map(|&r| self.sort_key(query, r)).collect();
        let mut order: Vec<usize> = (0..rows.len()).collect();
        order.sort_unstable_by(|&a, &b| self.order(&keys[a], &keys[b]));
        let rows = order.into_iter().map(|i| rows[i]).collect();
        (rows, unreadable)
    }

    /// The rows the filters other than free text admit, in row order.
    fn filtered(&self, query: &Query) -> Vec<u32> {
        (0..self.rows.len() as u32)
            .filter(|&i| query.admits(&self.rows[i as usize], &self.brief(i)))
            .collect()
    }

    /// The rows matching a query with free text, in row order, and how many traces could not
    /// be read: kept by the filters and text alone, so that another sort of the same query
    /// reads no trace again.
    fn text_answer(&self, query: &Query) -> (Arc<Vec<u32>>, usize) {
        let key = Query {
            sort: Column::Scenario,
            desc: false,
            ..query.answer_key()
        };
        let kept = {
            let texts = self.texts.lock().unwrap_or_else(|e| e.into_inner());
            texts
                .iter()
                .find(|(k, _, _)| *k == key)
                .map(|(_, rows, unreadable)| (rows.clone(), *unreadable))
        };
        if let Some(kept) = kept {
            return kept;
        }
        let (rows, unreadable) = self.with_text(&self.filtered(query), &query.q);
        let rows = Arc::new(rows);
        keep(&self.texts, key, rows.clone(), unreadable);
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
    /// file order, as [`load::run_events`] reads them: from where the index says they are
    /// when it does (and they are there), else from its sweep's journals whole.
    pub(crate) fn events(&self, row: u32, run_id: &str) -> Vec<serde_json::Value> {
        if let Some((index, e)) = self.line(row)
            && let Some((start, end)) = e.journal
            && let Some(events) = load::run_events_at(
                &scan::index::journal_of(index),
                (start, end.saturating_sub(start)),
                run_id,
                MAX_EVENTS,
            )
        {
            return events;
        }
        let (_, sweep) = self.run_index_and_sweep(row);
        let journals = self
            .report
            .sweeps
            .iter()
            .filter(|s| s.sweep_id == sweep)
            .flat_map(|s| s.journals.iter().map(Path::new));
        load::run_events(journals, run_id, MAX_EVENTS)
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
        load::read_trace_and_score(&self.path(row))
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

/// The one of `options` that `is` picks, else the error `why` says.
fn one_of<T>(
    options: impl IntoIterator<Item = T>,
    is: impl Fn(&T) -> bool,
    why: impl FnOnce() -> String,
) -> Result<T, String> {
    options.into_iter().find(is).ok_or_else(why)
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
    fn a_text_answer_is_kept_for_another_sort_and_read_again_with_other_filters() {
        use crate::runner::{RunConfig, Sweep, run_sweep};
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = RunConfig::new(crate::runtime::builtin_agent("demo").unwrap(), dir.path());
        cfg.runs = Some(2);
        let sweep = Sweep::new(&cfg);
        run_sweep(&crate::pack::Pack::demo().scenarios, &cfg, &sweep).unwrap();
        let mut traces: Vec<PathBuf> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| crate::store::is_trace(p))
            .collect();
        traces.sort();
        let planted = &traces[1];
        let edit = |reply: &str| {
            let mut t: serde_json::Value =
                serde_json::from_slice(&std::fs::read(planted).unwrap()).unwrap();
            t["turns"][0]["reply"] = serde_json::json!(reply);
            // In place: the directory does not change, so nothing tells the view to read
            // the runs again.
            std::fs::write(planted, serde_json::to_vec(&t).unwrap()).unwrap();
        };
        edit("Shipped: OKAPI-31 is on its way.");
        let index = Index::read(&[dir.path().to_owned()]).unwrap();
        let total = |query: &str| index.answer(&Query::parse(query).unwrap()).total;
        assert_eq!(total("q=okapi-31"), 1);
        edit("Shipped.");
        // Another sort and order of the same query: the answer kept, no trace read again.
        assert_eq!(total("q=okapi-31&sort=cost&order=desc"), 1);
        assert_eq!(total("q=okapi-31&sort=duration&limit=5"), 1);
        // Other filters are another question: the traces are read for it.
        assert_eq!(total("q=okapi-31&sort=cost&hook_warning=0&verdict=pass"), 0);
        assert_eq!(
            Index::read(&[dir.path().to_owned()])
                .unwrap()
                .answer(&Query::parse("q=okapi-31").unwrap())
                .total,
            0
        );
    }

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
                "unknown parameter \"bogus\": this address takes scenario, agent, model, sweep, cursor, verdict",
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
    fn a_cursor_survives_its_link_and_a_forged_or_foreign_one_is_refused() {
        let c = Cursor {
            sort: Column::Cost,
            desc: true,
            key: SortKey {
                desc: true,
                value: (1, 0.125),
                scenario: Cow::Borrowed("order <status>"),
                run_index: 7,
                sweep: Cow::Borrowed("w&1"),
                agent: Cow::Borrowed("a\u{202e}b"),
                identity: u64::MAX,
            },
        };
        let q = Query {
            agent: Some("demo".into()),
            sort: Column::Cost,
            desc: true,
            ..Query::default()
        };
        let back = Query::parse(&q.to_cursor_string(&c)).unwrap();
        assert_eq!(back.cursor.as_ref(), Some(&c));
        assert_eq!(back.agent.as_deref(), Some("demo"));
        assert_eq!(
            Query {
                cursor: None,
                ..back
            },
            q
        );
        let link = q.to_cursor_string(&c);
        let cursor = link.rsplit("cursor=").next().unwrap();
        for (query, said) in [
            (
                "cursor=bm90IGEgY3Vyc29y".to_owned(),
                "not one this server wrote",
            ),
            ("cursor=%%%".to_owned(), "not one this server wrote"),
            (
                format!("cursor={}", "A".repeat(5000)),
                "not one this server wrote",
            ),
            (format!("cursor={cursor}"), "belongs to another sort"),
            (
                format!("sort=cost&order=desc&offset=5&cursor={cursor}"),
                "cannot be given together",
            ),
        ] {
            let e = Query::parse(&query).unwrap_err();
            assert!(e.contains(said), "{query}: {e}");
        }
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
