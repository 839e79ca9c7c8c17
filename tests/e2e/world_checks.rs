//! What world and file checks can say, through the real `wt`: JSON Lines files read as such
//! by their name or `format` (never by guessing from their content), `contains`, `matches`
//! and the numeric bounds on a world server's state and on files, a state call's result that
//! is text rather than JSON, and the checks a pack may not hold — refused before any run.
//! And what a message quotes of a world server's stderr: its end, where the cause is.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::harness::{
    Wt, agent_python, events, journal, path_with_world_servers, tmp, workspace, write_pack,
};
use crate::worlds::{by_scenario, failed_layers, world_agent};

/// A memory-server scenario whose graph file is `file`: setup creates two orders, the turn
/// deletes `delete`, and `checks` are its file checks.
fn memory_scenario(id: &str, file: &str, delete: &str, checks: &str) -> (String, String) {
    (
        format!("{id}.toml"),
        format!(
            r#"id = "{id}"
turns = ['do: delete_entities entityNames=["{delete}"]']

[world_server]
name = "memory"
command = ["mcp-server-memory"]
env = {{ MEMORY_FILE_PATH = "{{run_dir}}/{file}" }}
state = {{ tool = "read_graph" }}

[[world_server.setup]]
tool = "create_entities"
arguments = {{ entities = [
    {{ name = "order-1234", entityType = "order", observations = ["status: shipped"] }},
    {{ name = "order-5678", entityType = "order", observations = ["status: delivered"] }},
] }}

[expect.outcome]
files = [{checks}]
"#
        ),
    )
}

fn run(dir: &Path, pack: &Path) -> (crate::harness::Run, PathBuf) {
    let out = dir.join("runs");
    let r = Wt::new(dir)
        .arg("run")
        .arg("--pack")
        .arg(pack)
        .arg("--agent")
        .arg(world_agent(dir, "script"))
        .arg("--out")
        .arg(&out)
        .env("PATH", path_with_world_servers())
        .run();
    (r, out)
}

fn detail(score: &Value) -> &str {
    score["outcome"]["detail"].as_str().unwrap_or_default()
}

#[test]
fn a_json_lines_file_of_one_line_is_read_as_json_lines_by_its_name_or_its_format() {
    let dir = tmp();
    // Once one order is deleted, the memory server's graph file is one line: still an array
    // of one entity, whichever way the file is known to be JSON Lines.
    let one_left = r#"json = { path = "0.name", equals = "order-1234" } }, { path = "FILE", json = { path = "1", exists = false }"#;
    let scenarios = [
        memory_scenario(
            "by-jsonl-name",
            "graph.jsonl",
            "order-5678",
            &format!(
                "{{ path = \"graph.jsonl\", {} }}",
                one_left.replace("FILE", "graph.jsonl")
            ),
        ),
        memory_scenario(
            "by-ndjson-name",
            "graph.ndjson",
            "order-5678",
            &format!(
                "{{ path = \"graph.ndjson\", {} }}",
                one_left.replace("FILE", "graph.ndjson")
            ),
        ),
        memory_scenario(
            "by-format",
            "graph.data",
            "order-5678",
            r#"{ path = "graph.data", format = "jsonl", json = { path = "0.observations", contains = "status: shipped" } }"#,
        ),
        // Named as JSON, the one line is one JSON document, not an array.
        memory_scenario(
            "json-by-name",
            "graph.json",
            "order-5678",
            r#"{ path = "graph.json", json = { path = "name", equals = "order-1234" } }"#,
        ),
        // The wrong order deleted: the same check fails, saying what it found.
        memory_scenario(
            "wrong-order",
            "graph.jsonl",
            "order-1234",
            r#"{ path = "graph.jsonl", json = { path = "0.name", equals = "order-1234" } }"#,
        ),
        // Two lines in a file named as JSON: not JSON, and the check says how to read it.
        memory_scenario(
            "two-lines-as-json",
            "graph.json",
            "order-9",
            r#"{ path = "graph.json", json = { path = "0.name", exists = true } }"#,
        ),
    ];
    let scenarios: Vec<(&str, &str)> = scenarios
        .iter()
        .map(|(n, t)| (n.as_str(), t.as_str()))
        .collect();
    let pack = write_pack(dir.path(), &scenarios);
    let (r, out) = run(dir.path(), &pack);
    assert_eq!(r.code, 1, "{r}");
    let runs = by_scenario(&out);
    for id in [
        "by-jsonl-name",
        "by-ndjson-name",
        "by-format",
        "json-by-name",
    ] {
        let (t, s) = &runs[&format!("{id}#0")];
        assert_eq!(s["verdict"], "PASS", "{id}: {s:#}\n{t:#}");
    }
    let (_, s) = &runs["wrong-order#0"];
    assert_eq!(failed_layers(s), ["outcome"], "{s:#}");
    assert!(
        detail(s)
            .contains("file `graph.jsonl`: `0.name` is \"order-5678\", expected \"order-1234\""),
        "{s:#}"
    );
    let (_, s) = &runs["two-lines-as-json#0"];
    assert_eq!(failed_layers(s), ["outcome"], "{s:#}");
    assert!(
        detail(s).contains("file `graph.json`: is not JSON (")
            && detail(s).contains("`format = \"jsonl\"`"),
        "{s:#}"
    );
}

/// A pack on the flaky server (`tests/worlds/flaky_server.py`): each scenario is (id, turn,
/// state tool, its `[expect.outcome]` lines).
fn flaky_pack(dir: &Path, scenarios: &[(&str, &str, &str, &str)]) -> PathBuf {
    let python = agent_python().display().to_string();
    let script = workspace()
        .join("tests/worlds/flaky_server.py")
        .display()
        .to_string();
    let texts: Vec<(String, String)> = scenarios
        .iter()
        .map(|(id, turn, state, outcome)| {
            (
                format!("{id}.toml"),
                format!(
                    "id = \"{id}\"\nturns = [{turn:?}]\n\n[world_server]\nname = \"flaky\"\ncommand = [{python:?}, {script:?}]\nstate = {{ tool = \"{state}\" }}\n\n[expect.outcome]\n{outcome}\n"
                ),
            )
        })
        .collect();
    let texts: Vec<(&str, &str)> = texts
        .iter()
        .map(|(n, t)| (n.as_str(), t.as_str()))
        .collect();
    write_pack(dir, &texts)
}

#[test]
fn contains_matches_and_bounds_check_state_files_and_text_results_and_fail_on_what_is_not_there() {
    let dir = tmp();
    // The state is {"notes": [...], "count": n, "pid": …}; notes.txt has a line per note.
    let checks = r#"world = [
    { path = "notes", contains = "kept" },
    { path = "notes.0", contains = "ep" },
    { path = "notes.1", matches = "^al+so$" },
    { path = "count", ge = 2 },
    { path = "count", gt = 1.5, lt = 3, le = 2 },
]
files = [{ path = "notes.txt", matches = "(?m)^also$" }]"#;
    // Wrong kinds and absent values: every one of these must fail, never pass.
    let wrong = r#"world = [
    { path = "notes", gt = 1 },
    { path = "count", matches = "2" },
    { path = "count", contains = 2 },
    { path = "missing", contains = "x" },
    { path = "missing", le = 5 },
]"#;
    // The ledger answers like mcp-server-sqlite, with text that is not JSON: a check without
    // a path reads it whole.
    let text = r#"world = [
    { contains = "'note': 'kept'" },
    { matches = "^\\[\\{'id': 1, " },
]"#;
    let pack = flaky_pack(
        dir.path(),
        &[
            (
                "both",
                "do: note text=kept | note text=also",
                "notes",
                checks,
            ),
            ("one", "do: note text=kept", "notes", checks),
            (
                "kinds",
                "do: note text=kept | note text=also",
                "notes",
                wrong,
            ),
            ("text", "do: note text=kept", "ledger", text),
            ("text-wrong", "do: note text=lost", "ledger", text),
        ],
    );
    let (r, out) = run(dir.path(), &pack);
    assert_eq!(r.code, 1, "{r}");
    let runs = by_scenario(&out);
    for id in ["both", "text"] {
        let (t, s) = &runs[&format!("{id}#0")];
        assert_eq!(s["verdict"], "PASS", "{id}: {s:#}\n{t:#}");
    }
    let (t, _) = &runs["text#0"];
    assert_eq!(t["world"]["after"], "[{'id': 1, 'note': 'kept'}]", "{t:#}");

    let (_, s) = &runs["one#0"];
    assert_eq!(failed_layers(s), ["outcome"], "{s:#}");
    let d = detail(s);
    for want in [
        "final world: `notes.1` is absent, expected a string that matches /^al+so$/",
        "final world: `count` is 1, expected a number at least 2",
        "final world: `count` is 1, expected a number greater than 1.5",
        "file `notes.txt`: does not match /(?m)^also$/",
    ] {
        assert!(d.contains(want), "{want}\n{d}");
    }
    assert!(!d.contains("`notes` is"), "the membership held: {d}");

    let (_, s) = &runs["kinds#0"];
    let d = detail(s);
    for want in [
        "`notes` is [\"kept\",\"also\"], expected a number greater than 1",
        "`count` is 2, expected a string that matches /2/",
        "`count` is 2, neither a string nor an array, expected it to contain 2",
        "`missing` is absent, expected it to contain \"x\"",
        "`missing` is absent, expected a number at most 5",
    ] {
        assert!(d.contains(want), "{want}\n{d}");
    }

    let (_, s) = &runs["text-wrong#0"];
    let d = detail(s);
    assert!(
        d.contains("the whole value is \"[{'id': 1, 'note': 'lost'}]\", expected it to contain \"'note': 'kept'\""),
        "{d}"
    );
}

#[test]
fn a_malformed_check_is_refused_in_one_line_before_any_run() {
    let cases = [
        (
            r#"world = [{ path = "n", matches = "(unclosed" }]"#,
            "expect.outcome.world[0]: `matches`: \"(unclosed\" is not a regular expression: unclosed group",
        ),
        (
            r#"world = [{ path = "n", gt = "5" }]"#,
            "expected a JSON number",
        ),
        (r#"world = [{ path = "n", lt = nan }]"#, "not a JSON number"),
        (
            r#"files = [{ path = "f.txt", format = "yaml", json = { path = "a", exists = true } }]"#,
            "expect.outcome.files[0]: unknown `format` \"yaml\": use \"json\" or \"jsonl\"",
        ),
        (
            r#"files = [{ path = "f.txt", format = "jsonl", contains = "x" }]"#,
            "expect.outcome.files[0]: `format` says how the `json` check reads `f.txt`, and there is no `json` check",
        ),
        (
            r#"files = [{ path = "f.jsonl", json = { path = "0", matches = "[" } }]"#,
            "expect.outcome.files[0].json: `matches`: \"[\" is not a regular expression",
        ),
        (
            r#"files = [{ path = "f.txt", matches = "a{99999999}" }]"#,
            "expect.outcome.files[0]: `matches`: \"a{99999999}\" is not a regular expression",
        ),
        (
            r#"world = [{ path = "n" }]"#,
            "expect.outcome.world[0]: world check on `n` has no condition",
        ),
        (
            r#"world = [{ path = "n", exists = false, contains = "x" }]"#,
            "expect.outcome.world[0]: world check on `n` says `exists = false` and what the value must be: it can never hold",
        ),
    ];
    for (outcome, want) in cases {
        let dir = tmp();
        let text = format!(
            "id = \"s\"\nturns = [\"hi\"]\n\n[world_server]\ncommand = [\"mcp-server-memory\"]\nstate = {{ tool = \"read_graph\" }}\n\n[expect.outcome]\n{outcome}\n"
        );
        let pack = write_pack(dir.path(), &[("s.toml", &text)]);
        let (r, out) = run(dir.path(), &pack);
        assert_eq!(r.code, 2, "{outcome}: {r}");
        let errors: Vec<&str> = r
            .stderr
            .lines()
            .filter(|l| l.starts_with("error:"))
            .collect();
        assert_eq!(errors.len(), 1, "{outcome}: {r}");
        assert!(errors[0].contains(want), "{outcome}: want {want:?}\n{r}");
        // Refused before any run: nothing was written.
        assert!(!out.exists(), "{outcome}: a run directory was made\n{r}");
    }
}

#[test]
fn a_world_servers_traceback_is_quoted_by_its_last_line_everywhere() {
    let dir = tmp();
    let python = agent_python().display().to_string();
    let script = workspace()
        .join("tests/worlds/flaky_server.py")
        .display()
        .to_string();
    let scenario = |id: &str, turn: &str, start: &str| {
        format!(
            "id = \"{id}\"\nturns = [{turn:?}]\n\n[world_server]\nname = \"flaky\"\ncommand = [{python:?}, {script:?}]\nstate = {{ tool = \"notes\" }}\nenv = {{ FLAKY_START = \"{start}\" }}\n"
        )
    };
    // One server dies with a traceback while its tools are listed, one in the middle of a run.
    let pack = write_pack(
        dir.path(),
        &[
            (
                "at-start.toml",
                &scenario("at-start", "do: notes", "traceback"),
            ),
            (
                "in-run.toml",
                &scenario("in-run", "do: note text=a | traceback", ""),
            ),
        ],
    );
    let (r, out) = run(dir.path(), &pack);
    assert_eq!(r.code, 3, "{r}");
    let cause = "AttributeError: 'Server' object has no attribute 'list_resources'";
    // On the terminal: each scenario's summary line ends with the cause.
    for id in ["at-start ", "in-run "] {
        let line = r
            .stderr
            .lines()
            .find(|l| l.starts_with(id) && l.contains("ERROR"))
            .unwrap_or_else(|| panic!("no summary line for {id}:\n{r}"));
        assert!(
            line.contains("world server `flaky`: ") && line.ends_with(cause),
            "{line}"
        );
    }
    // In the trace: the run's error quotes the end of stderr, marked as cut at its start.
    let runs = by_scenario(&out);
    let (t, s) = &runs["in-run#0"];
    assert_eq!(s["verdict"], "ERROR", "{s:#}");
    let error = s["error"].as_str().unwrap();
    assert!(
        error.contains("(exited with status 1); stderr (last bytes): …")
            && error.ends_with(cause)
            && error.chars().count() < 1000,
        "{error}"
    );
    assert_eq!(t["error"].as_str(), Some(error), "{t:#}");
    // The trace keeps the server's stderr whole (its last 4 KiB) besides.
    assert!(
        t["world"]["server"]["stderr_tail"]
            .as_str()
            .is_some_and(|tail| tail.trim_end().ends_with(cause)),
        "{t:#}"
    );
    // In the journal: the run's score says the same, and so does the end of the scenario
    // that never ran.
    let lines = journal(&out);
    let ends_with_cause = |event: &str| {
        events(&lines, event)
            .iter()
            .any(|e| e["error"].as_str().is_some_and(|e| e.ends_with(cause)))
    };
    assert!(ends_with_cause("RunScored"), "{lines:#?}");
    assert!(ends_with_cause("ScenarioEnded"), "{lines:#?}");
    // In the HTML report: the server's stderr, longer than the page quotes, keeps its end.
    let html = dir.path().join("report.html");
    let r = Wt::new(dir.path())
        .args(["report", "runs", "--format", "html", "-o"])
        .arg(&html)
        .run();
    assert_eq!(r.code, 0, "{r}");
    let page = std::fs::read_to_string(&html).unwrap();
    let at = page
        .find("World server")
        .expect("the run's world server section");
    let block = &page[at..];
    let block = &block[block.find("<pre>").unwrap()..block.find("</pre>").unwrap()];
    assert!(
        block.contains("has no attribute") && block.contains("list_resources"),
        "{block}"
    );
    assert!(block.contains("[cut: "), "{block}");
}
