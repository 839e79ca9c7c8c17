//! Through the real binary: verdicts that nothing but a successful call satisfies,
//! and a merge gate that holds at pack scale.

use std::path::{Path, PathBuf};

use serde_json::json;

use crate::harness::*;

// Verdicts: nothing that did not happen satisfies one ──────────────────────────────────────

/// One scenario over an order world: `lookup_order` (read, `order_id` required) and
/// `issue_refund` (append); it requires a successful lookup and forbids refunds.
fn order_pack(dir: &Path) -> PathBuf {
    write_pack(
        dir,
        &[(
            "status.toml",
            r#"id = "status"
turns = ["Where is order 1234?"]

[[tools]]
name = "lookup_order"
description = "Look up an order."
parameters = { type = "object", properties = { order_id = { type = "string" } }, required = ["order_id"], additionalProperties = false }
effect = { kind = "read", path = "orders", key_arg = "order_id" }

[[tools]]
name = "issue_refund"
description = "Refund an order."
effect = { kind = "append", path = "refunds" }

[expect.outcome]
reply_contains = ["shipped"]

[expect.trajectory]
required_tools = ["lookup_order"]

[expect.constraint]
forbidden_tools = ["issue_refund"]

[world]
refunds = []
[world.orders.1234]
status = "shipped"
"#,
        )],
    )
}

fn raw_agent(dir: &Path, mode: &str) -> PathBuf {
    let command = [
        agent_python().display().to_string(),
        workspace()
            .join("tests/agents/mcp_raw_agent.py")
            .display()
            .to_string(),
        mode.to_owned(),
    ];
    command_agent(dir, mode, &command, "turn_timeout_s = 60")
}

#[test]
fn a_call_rejected_for_its_arguments_does_not_satisfy_a_required_tool() {
    let dir = tmp();
    let pack = order_pack(dir.path());
    let agent = raw_agent(dir.path(), "bad-args");
    let out = dir.path().join("runs");
    let r = Wt::new(dir.path())
        .args(["run", "--out"])
        .arg(&out)
        .pack(&pack)
        .agent(&agent)
        .run();
    assert_eq!(r.code, 1, "{r}");
    let s = &scores(&out)[0];
    assert_eq!(s["verdict"], "FAIL");
    let detail = s["trajectory"]["detail"].as_str().unwrap();
    assert!(
        detail.contains("never called successfully: lookup_order")
            && detail.contains("lookup_order (failed)"),
        "{detail}"
    );
    let t = &traces(&out)[0];
    assert!(t["evidence"]["tool_calls"][0]["error"].is_string(), "{t}");
}

#[test]
fn a_forbidden_call_after_the_reply_is_refused_recorded_and_fails_the_run() {
    let dir = tmp();
    let pack = order_pack(dir.path());
    // The agent looks nothing up: only the constraint layer is of interest here.
    let text = std::fs::read_to_string(pack.join("scenarios/status.toml")).unwrap();
    std::fs::write(
        pack.join("scenarios/status.toml"),
        text.replace("required_tools = [\"lookup_order\"]", "required_tools = []"),
    )
    .unwrap();
    let agent = raw_agent(dir.path(), "after-reply");
    let out = dir.path().join("runs");
    let r = Wt::new(dir.path())
        .args(["run", "--out"])
        .arg(&out)
        .pack(&pack)
        .agent(&agent)
        .run();
    assert_eq!(r.code, 1, "{r}");
    let s = &scores(&out)[0];
    assert_eq!(s["verdict"], "FAIL", "{s}");
    assert!(
        s["constraint"]["detail"]
            .as_str()
            .unwrap()
            .contains("forbidden tool `issue_refund` called"),
        "{s}"
    );
    let t = &traces(&out)[0];
    let call = &t["evidence"]["tool_calls"][0];
    assert_eq!(call["name"], "issue_refund", "{t}");
    assert!(
        call["error"]
            .as_str()
            .unwrap()
            .contains("no turn of this run is in progress"),
        "{call}"
    );
    // The world was never touched.
    assert_eq!(t["world"]["after"]["refunds"], json!([]), "{t}");
    let j = journal(&out);
    let refused = events(&j, "ToolRefused");
    assert_eq!(refused.len(), 1, "{j:?}");
    assert_eq!(refused[0]["tool"], "issue_refund");
    // The journal's last word on the verdict agrees with the score file.
    let last = j
        .iter()
        .rfind(|e| e["event"] == "RunScored" || e["event"] == "RunRescored")
        .unwrap();
    assert_eq!(last["verdict"], "FAIL", "{j:?}");
}

#[test]
fn a_world_check_with_no_condition_is_refused_at_load() {
    let dir = tmp();
    let pack = write_pack(
        dir.path(),
        &[(
            "vague.toml",
            "id = \"vague\"\nturns = [\"hi\"]\n[world]\na = 1\n[expect.outcome]\nworld = [{ path = \"a\" }]\n",
        )],
    );
    let r = Wt::new(dir.path()).args(["run", "--pack"]).arg(&pack).run();
    assert_eq!(r.code, 2, "{r}");
    assert!(
        r.stderr.contains("expect.outcome.world[0]") && r.stderr.contains("has no condition"),
        "{r}"
    );
}

// The gate at pack scale ────────────────────────────────────────────────────────────────

/// A session agent with a known pass probability: the turn's text says `p=NN` (percent), and
/// the agent says "yes" when a hash of its run id falls below it, "no" otherwise — so a sweep
/// with `--seed` is reproducible and different seeds are independent samples.
const COIN_AGENT: &str = r#"read -r line
p=$(printf '%s' "$line" | sed -n 's/.*p=\([0-9]*\).*/\1/p')
h=$(printf '%s' "$WT_RUN_ID" | cksum | cut -d' ' -f1)
if [ $((h % 100)) -lt "$p" ]; then word=yes; else word=no; fi
printf '{"type": "reply", "turn": 0, "text": "%s"}\n' "$word"
cat >/dev/null"#;

/// A pack `coin` in `dir/<name>` of `rates.len()` one-turn scenarios `s00`, `s01`, …,
/// scenario k passing with `rates[k]` percent, each run `runs` times. Packs of one name
/// compare; a scenario whose rate differs is an edited one, and the comparison says so.
fn coin_pack(dir: &Path, name: &str, rates: &[u32], runs: u32) -> PathBuf {
    let turns: Vec<String> = rates.iter().map(|p| format!("p={p}")).collect();
    yes_pack(dir, name, "coin", "s", &turns, runs)
}

/// `wt compare BASE NEW --gate --format json`: the run and the comparison.
fn gated(dir: &Path, base: &str, new: &str) -> (Run, serde_json::Value) {
    let r = Wt::new(dir)
        .args(["compare", base, new, "--gate", "--format", "json"])
        .run();
    let v = serde_json::from_str(&r.stdout).unwrap_or(serde_json::Value::Null);
    (r, v)
}

/// The scenarios a comparison found regressed.
fn regressed(v: &serde_json::Value) -> Vec<&str> {
    v["scenarios"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|s| s["verdict"] == "regressed")
        .filter_map(|s| s["scenario_id"].as_str())
        .collect()
}

/// Runs `pack` with `--seed seed` into `dir/out`.
fn coin_sweep(dir: &Path, agent: &Path, pack: &Path, seed: u32, out: &str) {
    let r = Wt::new(dir)
        .args([
            "run",
            "--jobs",
            "2",
            "--seed",
            &seed.to_string(),
            "--out",
            out,
        ])
        .pack(pack)
        .agent(agent)
        .run();
    assert!(r.code == 0 || r.code == 1, "{r}");
}

#[test]
fn the_gate_holds_on_identical_agents_and_catches_a_broad_drop_and_a_big_one() {
    let dir = tmp();
    let agent = sh_agent(dir.path(), "coin", COIN_AGENT, &[], "mcp = false");
    // The same agent on both sides of a 30-scenario pack, three times: under the old
    // per-scenario rule each comparison raised a false alarm with a chance of about 16 %;
    // of these seeds' comparisons, the second and third did (`--correction none` still
    // fails them: the correction is what holds).
    let same = coin_pack(dir.path(), "same", &[70; 30], 10);
    for (k, (a, b)) in [(1, 2), (9, 10), (11, 12)].into_iter().enumerate() {
        let (base, new) = (format!("aa{k}-base"), format!("aa{k}-new"));
        coin_sweep(dir.path(), &agent, &same, a, &base);
        coin_sweep(dir.path(), &agent, &same, b, &new);
        let r = Wt::new(dir.path())
            .args(["compare", &base, &new, "--gate", "--format", "json"])
            .run();
        assert_eq!(r.code, 0, "A/A comparison {k} raised an alarm: {r}");
        if k > 0 {
            let none = Wt::new(dir.path())
                .args(["compare", &base, &new, "--gate", "--correction", "none"])
                .run();
            assert_eq!(
                none.code, 1,
                "uncorrected, this pair is a false alarm: {none}"
            );
        }
    }
    // Every scenario a little worse (90 % → 75 %): no scenario alone shows it, the pack does.
    let base = coin_pack(dir.path(), "base", &[90; 30], 10);
    let worse = coin_pack(dir.path(), "worse", &[75; 30], 10);
    coin_sweep(dir.path(), &agent, &base, 7, "broad-base");
    coin_sweep(dir.path(), &agent, &worse, 8, "broad-new");
    let (r, v) = gated(dir.path(), "broad-base", "broad-new");
    assert_eq!(r.code, 1, "{r}");
    assert_eq!(v["pack"]["regressed"], true, "{}", v["pack"]);
    // One scenario collapses (90 % → 0 %) among 29 unchanged: found, and named.
    let mut rates = vec![90; 30];
    rates[17] = 0;
    let one = coin_pack(dir.path(), "one", &rates, 10);
    coin_sweep(dir.path(), &agent, &one, 9, "one-new");
    let (r, v) = gated(dir.path(), "broad-base", "one-new");
    assert_eq!(r.code, 1, "{r}");
    assert_eq!(regressed(&v), ["s17"], "{v}");
}

#[test]
fn plan_says_how_many_runs_catch_a_drop_and_which_drop_runs_catch() {
    let dir = tmp();
    let r = Wt::new(dir.path())
        .args([
            "compare",
            "--plan",
            "--from",
            "0.9",
            "--drop",
            "0.2",
            "--scenarios",
            "30",
        ])
        .args(["--format", "json"])
        .run();
    assert_eq!(r.code, 0, "{r}");
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    let n = v["one_scenario"].as_f64().unwrap() as u64;
    assert!((60..400).contains(&n), "{v}");
    assert!(v["every_scenario"].as_f64().unwrap() < n as f64, "{v}");
    // With those runs, that drop (or a smaller one) is what the gate catches.
    let back = Wt::new(dir.path())
        .args([
            "compare",
            "--plan",
            "--from",
            "0.9",
            "--runs",
            &n.to_string(),
        ])
        .args(["--scenarios", "30", "--format", "json"])
        .run();
    let b: serde_json::Value = serde_json::from_str(&back.stdout).unwrap();
    assert!(b["one_scenario"].as_f64().unwrap() <= 0.2 + 1e-9, "{b}");
    // Missing what it needs: one line, exit 2.
    let bad = Wt::new(dir.path())
        .args(["compare", "--plan", "--from", "0.9"])
        .run();
    assert_eq!(bad.code, 2, "{bad}");
    assert!(bad.stderr.contains("--drop DROP"), "{bad}");
}

#[test]
fn a_scenario_that_could_not_run_counts_the_same_in_every_view() {
    let dir = tmp();
    // `fine` runs 2 times and passes; `broken`'s world precondition fails, so its 3 runs
    // never run.
    let pack = write_pack(
        dir.path(),
        &[
            (
                "fine.toml",
                "id = \"fine\"\nruns = 2\nturns = [\"hello\"]\n",
            ),
            (
                "broken.toml",
                "id = \"broken\"\nruns = 3\nturns = [\"hello\"]\npreconditions = [{ path = \"ready\", equals = true }]\n[world]\nready = false\n",
            ),
        ],
    );
    let r = Wt::new(dir.path())
        .args(["run", "--junit", "junit.xml", "--pack"])
        .arg(&pack)
        .run();
    assert_eq!(r.code, 3, "{r}");
    let report = Wt::new(dir.path())
        .args(["report", "--format", "json"])
        .run();
    let v: serde_json::Value = serde_json::from_str(&report.stdout).unwrap();
    assert_eq!(
        (v["pack"]["runs"].as_u64(), v["pack"]["errored"].as_u64()),
        (Some(5), Some(3)),
        "{v}"
    );
    let junit = std::fs::read_to_string(dir.path().join("junit.xml")).unwrap();
    assert_eq!(junit.matches("<testcase").count(), 5, "{junit}");
    assert_eq!(junit.matches("<error").count(), 3, "{junit}");
    let j = Wt::new(dir.path())
        .args(["report", "--format", "junit"])
        .run();
    assert_eq!(j.stdout.matches("<testcase").count(), 5, "{j}");
    let triage = Wt::new(dir.path()).args(["triage", "--json"]).run();
    let t: serde_json::Value = serde_json::from_str(&triage.stdout).unwrap();
    let broken = t
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["scenario_id"] == "broken")
        .unwrap_or_else(|| panic!("triage leaves it out: {t}"));
    assert_eq!(broken["runs"].as_array().unwrap().len(), 3, "{broken}");
    let html = Wt::new(dir.path())
        .args(["report", "--format", "html"])
        .run();
    assert!(
        html.stdout
            .contains("of <strong>3</strong> runs that did not pass"),
        "the page counts them"
    );
}

#[test]
fn until_decided_stops_clear_scenarios_early_and_journals_each_look() {
    let dir = tmp();
    let agent = sh_agent(dir.path(), "coin", COIN_AGENT, &[], "mcp = false");
    let base = coin_pack(dir.path(), "base", &[90; 3], 20);
    coin_sweep(dir.path(), &agent, &base, 1, "baseline");
    // NEW: s01 collapses; s00 and s02 are as good as ever.
    let new = coin_pack(dir.path(), "new", &[90, 0, 90], 20);
    let r = Wt::new(dir.path())
        .args(["run", "--jobs", "1", "--seed", "2", "--out", "new-runs"])
        .args([
            "--baseline",
            "baseline",
            "--until-decided",
            "--max-runs",
            "20",
            "--pack",
        ])
        .arg(&new)
        .agent(&agent)
        .run();
    assert_eq!(r.code, 1, "{r}");
    assert!(
        r.stderr.contains("until decided, against the baseline:"),
        "{r}"
    );
    let j = journal(&dir.path().join("new-runs"));
    let looks = events(&j, "Look");
    let last = |id: &str| {
        looks
            .iter()
            .rfind(|l| l["scenario_id"] == id)
            .unwrap_or_else(|| panic!("no look at {id}: {looks:?}"))
            .to_owned()
    };
    let collapsed = last("s01");
    assert_eq!(collapsed["decision"], "regressed", "{collapsed}");
    assert!(collapsed["runs"].as_u64().unwrap() < 20, "{collapsed}");
    for id in ["s00", "s02"] {
        let l = last(id);
        assert_eq!(l["decision"], "not_regressed", "{l}");
        assert!(l["runs"].as_u64().unwrap() < 20, "{l}");
    }
    // Every look is journaled, one per run made; the runs made are the traces written.
    let traces = trace_paths(&dir.path().join("new-runs")).len();
    assert_eq!(looks.len(), traces, "{looks:?}");
    assert!(traces < 60, "{traces} runs made of 60");
    // And the comparison of what ran agrees.
    let (cmp, v) = gated(dir.path(), "baseline", "new-runs");
    assert_eq!(cmp.code, 1, "{cmp}");
    assert_eq!(regressed(&v), ["s01"], "{v}");
}

#[test]
fn until_decided_at_many_jobs_starts_no_run_its_decision_cannot_use() {
    // Copies of a demo scenario the demo agent always passes: against a baseline of its own,
    // each is decided `not regressed` after 16 runs at --jobs 1. At more lanes than
    // scenarios a scenario gets several lanes, but never more runs in flight than its next
    // decision could need: no run is left in flight when it is decided, so every --jobs
    // makes exactly the runs --jobs 1 makes.
    let dir = tmp();
    let copies = |name: &str, n: usize| {
        let pack = dir.path().join(name);
        std::fs::create_dir_all(pack.join("scenarios")).unwrap();
        std::fs::write(pack.join("pack.toml"), format!("name = \"{name}\"\n")).unwrap();
        let original = std::fs::read_to_string(
            workspace().join("host/packs/demo/scenarios/order-status.toml"),
        )
        .unwrap();
        for k in 0..n {
            std::fs::write(
                pack.join("scenarios").join(format!("s{k:02}.toml")),
                original.replace("id = \"order-status\"", &format!("id = \"s{k:02}\"")),
            )
            .unwrap();
        }
        pack
    };
    for (pack, scenarios, jobs) in [(copies("few", 2), 2, "8"), (copies("many", 12), 12, "4")] {
        let sweep = |out: &str, extra: &[&str]| {
            let r = Wt::new(dir.path())
                .args(["run", "--seed", "2", "--out", out, "--pack"])
                .arg(&pack)
                .args(extra)
                .run();
            assert_eq!(r.code, 0, "{r}");
            r
        };
        let tag = |s: &str| format!("{s}-{scenarios}");
        sweep(&tag("base"), &["--runs", "20"]);
        let base = tag("base");
        let decided = ["--baseline", &base, "--until-decided", "--max-runs", "20"];
        sweep(&tag("one"), &[&decided[..], &["--jobs", "1"]].concat());
        let one = trace_paths(&dir.path().join(tag("one"))).len();
        assert_eq!(
            one,
            scenarios * 16,
            "at --jobs 1 each scenario is decided after 16 runs"
        );
        let r = sweep(&tag("many"), &[&decided[..], &["--jobs", jobs]].concat());
        let many = trace_paths(&dir.path().join(tag("many"))).len();
        assert_eq!(
            many, one,
            "{many} runs made at --jobs {jobs}, {one} at --jobs 1: {r}"
        );
        assert!(
            !r.stderr.contains("in flight when"),
            "a run was in flight at a decision: {r}"
        );
        assert!(
            r.stderr
                .contains(&format!("{many} of {} planned runs made", scenarios * 20)),
            "{r}"
        );
        // Each run is looked at once, and the last look of each scenario decides it.
        let j = journal(&dir.path().join(tag("many")));
        let looks = events(&j, "Look");
        assert_eq!(looks.len(), many, "{looks:?}");
        for k in 0..scenarios {
            let id = format!("s{k:02}");
            let last = looks
                .iter()
                .rfind(|l| l["scenario_id"] == id.as_str())
                .unwrap();
            assert_eq!(last["decision"], "not_regressed", "{last}");
            assert_eq!(last["runs"], 16, "{last}");
        }
    }
}
