//! Through the real binary: what the gate and `wt compare` know of where runs come from —
//! a missing shard seen from the traces alone, a baseline of another pack or with edited
//! scenarios, each cause said once — and what they show first and fail on.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::harness::*;

/// Runs the demo pack's shard `k` (of the `--seed 7` sweep) into `dir/out`.
fn shard(dir: &Path, k: &str, out: &str) {
    let r = Wt::new(dir)
        .args(["run", "--shard", k, "--seed", "7", "--out", out])
        .run();
    assert_eq!(r.code, 0, "{r}");
}

fn remove_journals(dir: &Path) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.to_string_lossy().ends_with(".events.jsonl") {
            std::fs::remove_file(p).unwrap();
        }
    }
}

/// Whether no run was written in `out` (nor the directory made).
fn no_run_in(out: &Path) -> bool {
    !out.exists() || trace_paths(out).is_empty()
}

/// The lines of `text` that contain `needle`.
fn lines_with<'a>(text: &'a str, needle: &str) -> Vec<&'a str> {
    text.lines().filter(|l| l.contains(needle)).collect()
}

#[test]
fn a_missing_shard_is_seen_from_the_traces_alone_and_said_once() {
    let dir = tmp();
    for k in ["1/3", "2/3", "3/3"] {
        shard(dir.path(), k, &format!("s{}", &k[..1]));
    }
    // A CI artifact of `*.json` only: no journal anywhere.
    for s in ["s1", "s2", "s3"] {
        remove_journals(&dir.path().join(s));
    }
    assert!(
        traces(&dir.path().join("s1"))
            .iter()
            .all(|t| t["shard"] == "1/3"),
        "each trace says its shard"
    );
    let gate = |dirs: &[&str]| {
        Wt::new(dir.path())
            .arg("report")
            .args(dirs)
            .arg("--gate")
            .run()
    };
    let r = gate(&["s1", "s2"]);
    assert_eq!(r.code, 3, "{r}");
    assert_eq!(lines_with(&r.stderr, "3/3").len(), 1, "{r}");
    assert_eq!(gate(&["s1", "s2", "s3"]).code, 0);

    // A comparison with a shard missing on NEW: the cause once, on its side, never garbled.
    let r = Wt::new(dir.path())
        .args(["run", "--seed", "8", "--out", "full"])
        .run();
    assert_eq!(r.code, 0, "{r}");
    for format in ["table", "json", "markdown"] {
        let r = Wt::new(dir.path())
            .args([
                "compare", "full", "s1", "--new", "s2", "--gate", "--format", format,
            ])
            .run();
        assert_eq!(r.code, 3, "{format}: {r}");
        let said = lines_with(&r.stderr, "3/3");
        assert_eq!(said.len(), 1, "{format}: {r}");
        assert!(said[0].starts_with("incomplete: NEW: shard(s) 3/3"), "{r}");
        assert!(!r.stderr.contains("some runs never ran"), "{r}");
    }
    for format in ["markdown", "html"] {
        let r = Wt::new(dir.path())
            .args(["compare", "full", "s1", "--new", "s2", "--format", format])
            .run();
        assert_eq!(r.stdout.matches("shard(s) 3/3").count(), 1, "{format}: {r}");
    }
}

#[test]
fn until_decided_refuses_a_baseline_missing_a_shard() {
    let dir = tmp();
    shard(dir.path(), "1/2", "half");
    let decide = |extra: &[&str], out: &str| {
        Wt::new(dir.path())
            .args([
                "run",
                "--baseline",
                "half",
                "--until-decided",
                "--max-runs",
                "4",
            ])
            .args(["--out", out])
            .args(extra)
            .run()
    };
    let r = decide(&[], "refused");
    assert_eq!(r.code, 3, "{r}");
    assert!(
        r.stderr.contains("--baseline half is incomplete") && r.stderr.contains("--allow-missing"),
        "{r}"
    );
    assert_eq!(lines_with(&r.stderr, "2/2").len(), 1, "{r}");
    assert!(no_run_in(&dir.path().join("refused")), "no run made");
    let r = decide(&["--allow-missing"], "accepted");
    assert_eq!(r.code, 0, "{r}");
    assert!(!trace_paths(&dir.path().join("accepted")).is_empty());

    // A whole baseline whose sweep did not run to the end (its journal has no SweepEnded)
    // is refused the same way.
    let r = Wt::new(dir.path())
        .args(["run", "--seed", "8", "--out", "cut"])
        .run();
    assert_eq!(r.code, 0, "{r}");
    let journal = journal_file(&dir.path().join("cut"));
    let text = std::fs::read_to_string(&journal).unwrap();
    let kept: String = text
        .lines()
        .filter(|l| !l.contains("\"SweepEnded\""))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_ne!(kept, text);
    std::fs::write(&journal, kept).unwrap();
    let r = Wt::new(dir.path())
        .args([
            "run",
            "--baseline",
            "cut",
            "--until-decided",
            "--max-runs",
            "4",
        ])
        .args(["--out", "after-cut"])
        .run();
    assert_eq!(r.code, 3, "{r}");
    assert!(r.stderr.contains("--baseline cut is incomplete"), "{r}");
    assert!(no_run_in(&dir.path().join("after-cut")));
}

/// A session agent that replies "no" to a turn containing its first argument, "yes" to any
/// other.
const SAY: &str = r#"read -r line
case "$line" in *"$0"*) word=no;; *) word=yes;; esac
printf '{"type": "reply", "turn": 0, "text": "%s"}\n' "$word"
cat >/dev/null"#;

/// A pack named `name` in `dir/<dir_name>` of scenarios `q00`, `q01`, … (scenario k's turn
/// is `q<k> <turns[k]>`), each passing when the reply says "yes", run `runs` times.
fn say_pack(dir: &Path, dir_name: &str, name: &str, turns: &[&str], runs: u32) -> PathBuf {
    let turns: Vec<String> = turns
        .iter()
        .enumerate()
        .map(|(k, t)| format!("q{k:02} {t}"))
        .collect();
    yes_pack(dir, dir_name, name, "q", &turns, runs)
}

/// Scenario `id` of a comparison's JSON.
fn scenario<'a>(v: &'a Value, id: &str) -> &'a Value {
    v["scenarios"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["scenario_id"] == id)
        .unwrap()
}

/// Runs `pack` on the `SAY` agent that fails scenarios whose turn contains `fail`.
fn say_sweep(dir: &Path, pack: &Path, fail: &str, out: &str) -> Run {
    let agent = sh_agent(dir, &format!("say-{fail}"), SAY, &[fail], "mcp = false");
    Wt::new(dir)
        .args(["run", "--jobs", "2", "--out", out])
        .pack(pack)
        .agent(&agent)
        .run()
}

#[test]
fn another_pack_is_refused_and_an_edited_scenario_is_named_on_every_output() {
    let dir = tmp();
    let base = say_pack(dir.path(), "base-pack", "desk", &["hi", "hi"], 2);
    let other = say_pack(dir.path(), "other-pack", "shop", &["hi", "hi"], 2);
    let edited = say_pack(dir.path(), "edited-pack", "desk", &["hi", "bye"], 2);
    for (pack, out) in [(&base, "base"), (&other, "other"), (&edited, "edited")] {
        assert_eq!(say_sweep(dir.path(), pack, "nothing", out).code, 0);
    }
    // Another pack, same scenario ids: refused (2) by the gate and by --until-decided.
    let r = Wt::new(dir.path())
        .args(["compare", "base", "other", "--gate"])
        .run();
    assert_eq!(r.code, 2, "{r}");
    assert!(r.stdout.is_empty(), "refused before any output: {r}");
    assert!(
        r.stderr.contains("pack desk")
            && r.stderr.contains("pack shop")
            && r.stderr.contains("--allow-other-pack"),
        "{r}"
    );
    let r = Wt::new(dir.path())
        .args(["compare", "base", "other", "--gate", "--allow-other-pack"])
        .run();
    assert_eq!(r.code, 0, "{r}");
    assert_eq!(lines_with(&r.stderr, "pack shop").len(), 1, "{r}");
    // The journals are not what says it: the traces do.
    remove_journals(&dir.path().join("other"));
    let agent = sh_agent(dir.path(), "say-nothing", SAY, &["nothing"], "mcp = false");
    let until = |pack: &Path, extra: &[&str], out: &str| {
        Wt::new(dir.path())
            .args([
                "run",
                "--baseline",
                "other",
                "--until-decided",
                "--max-runs",
                "2",
            ])
            .args(["--out", out])
            .args(extra)
            .pack(pack)
            .agent(&agent)
            .run()
    };
    let r = until(&base, &[], "until-refused");
    assert_eq!(r.code, 2, "{r}");
    assert!(r.stderr.contains("--allow-other-pack"), "{r}");
    assert!(no_run_in(&dir.path().join("until-refused")));
    assert_eq!(until(&base, &["--allow-other-pack"], "until-ok").code, 0);

    // Traces of a `wt` that recorded no pack, journals gone: nothing says the pack, nothing
    // is refused (docs/reports.md says so).
    for path in trace_paths(&dir.path().join("other")) {
        let mut t: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        t.as_object_mut().unwrap().remove("pack");
        std::fs::write(&path, serde_json::to_vec_pretty(&t).unwrap()).unwrap();
    }
    let r = Wt::new(dir.path())
        .args(["compare", "base", "other", "--gate"])
        .run();
    assert_eq!(r.code, 0, "{r}");

    // The same pack with q01's turn edited: compared, and q01 named on every output.
    let warned = |text: &str| lines_with(text, "scenario q01 differs").len();
    for format in ["table", "json", "markdown", "html"] {
        let r = Wt::new(dir.path())
            .args(["compare", "base", "edited", "--gate", "--format", format])
            .run();
        assert_eq!(r.code, 0, "{format}: {r}");
        assert_eq!(warned(&r.stderr), 1, "{format}: {r}");
        assert!(!r.stderr.contains("q00 differs"), "{r}");
        match format {
            "json" => {
                let v: Value = serde_json::from_str(&r.stdout).unwrap();
                let w = v["warnings"].as_array().unwrap();
                assert_eq!(w.len(), 1, "{v}");
                assert!(w[0].as_str().unwrap().contains("scenario q01 differs"));
            }
            "markdown" | "html" => assert_eq!(warned(&r.stdout), 1, "{format}: {r}"),
            _ => {}
        }
    }
    // Merged into one report, the two versions of q01 are named: its counts mix them.
    let r = Wt::new(dir.path())
        .args(["report", "base", "edited", "--format", "json"])
        .run();
    assert_eq!(r.code, 0, "{r}");
    let mixed = lines_with(&r.stderr, "was run in 2 versions");
    assert_eq!(mixed.len(), 1, "{r}");
    assert!(mixed[0].contains("scenario q01 "), "{r}");
    let v: Value = serde_json::from_str(&r.stdout).unwrap();
    assert!(
        v["warnings"]
            .to_string()
            .contains("scenario q01 was run in 2 versions")
    );
    // More runs of the same scenarios is the same test: nothing is named.
    let more = say_pack(dir.path(), "more-pack", "desk", &["hi", "hi"], 3);
    assert_eq!(say_sweep(dir.path(), &more, "nothing", "more").code, 0);
    let r = Wt::new(dir.path())
        .args(["compare", "base", "more", "--gate"])
        .run();
    assert_eq!(r.code, 0, "{r}");
    assert!(!r.stderr.contains("differs"), "{r}");
    // --until-decided says it too, before the first run.
    let r = Wt::new(dir.path())
        .args([
            "run",
            "--baseline",
            "base",
            "--until-decided",
            "--max-runs",
            "2",
        ])
        .args(["--out", "until-edited"])
        .pack(&edited)
        .agent(&agent)
        .run();
    assert_eq!(r.code, 0, "{r}");
    assert_eq!(
        lines_with(&r.stderr, "scenario q01 differs").len(),
        1,
        "{r}"
    );
}

#[test]
fn the_biggest_moves_are_shown_first_where_rows_are_cut() {
    let dir = tmp();
    // 60 scenarios, 4 runs a side: one falls from 100 % to 0 %, which Holm's correction over
    // 60 does not flag (p = 1/70), so it sits among the unchanged — last by name.
    let pack = say_pack(dir.path(), "pack", "desk", &["hi"; 60], 4);
    assert_eq!(say_sweep(dir.path(), &pack, "nothing", "base").code, 0);
    assert_eq!(say_sweep(dir.path(), &pack, "q59", "new").code, 1);
    let md = Wt::new(dir.path())
        .args(["compare", "base", "new", "--format", "markdown"])
        .run();
    assert_eq!(md.code, 0, "{md}");
    let unchanged = md
        .stdout
        .split("unchanged scenario(s)")
        .nth(1)
        .unwrap_or("");
    let first = unchanged
        .lines()
        .find(|l| l.starts_with("| `q"))
        .unwrap_or_default();
    assert!(first.starts_with("| `q59` | 4/4"), "{}", md.stdout);
    let html = Wt::new(dir.path())
        .args(["compare", "base", "new", "--format", "html"])
        .run();
    let rows: Vec<usize> = ["scenario-q59", "scenario-q00"]
        .iter()
        .map(|id| html.stdout.find(&format!("id=\"{id}\"")).unwrap())
        .collect();
    assert!(rows[0] < rows[1], "the biggest move first in HTML too");
}

#[test]
fn a_drop_to_the_floor_fails_the_gate_when_asked_however_few_the_runs() {
    let dir = tmp();
    let pack = say_pack(dir.path(), "pack", "desk", &["hi", "hi"], 3);
    assert_eq!(say_sweep(dir.path(), &pack, "nothing", "base").code, 0);
    assert_eq!(say_sweep(dir.path(), &pack, "q01", "new").code, 1);
    let gate = |extra: &[&str]| {
        Wt::new(dir.path())
            .args(["compare", "base", "new", "--gate", "--format", "json"])
            .args(extra)
            .run()
    };
    // 3 runs a side: no test can tell, so the gate passes a total collapse by default.
    let r = gate(&[]);
    assert_eq!(r.code, 0, "{r}");
    let r = gate(&["--fail-on-drop-to", "0"]);
    assert_eq!(r.code, 1, "{r}");
    let v: Value = serde_json::from_str(&r.stdout).unwrap();
    let q01 = scenario(&v, "q01");
    assert_eq!(q01["verdict"], "regressed", "{q01}");
    assert_eq!(q01["dropped_to_floor"], true, "{q01}");
    assert!(r.stderr.contains("q01 100% → 0%"), "{r}");
    let q00 = scenario(&v, "q00");
    assert!(q00.get("dropped_to_floor").is_none(), "{q00}");
    let bad = gate(&["--fail-on-drop-to", "1"]);
    assert_eq!(bad.code, 2, "{bad}");
}
