//! One table of point rules (`windtunnel_sdk::rules`) serves `wt`'s dispatcher and the SDK's
//! test kit: the same hook, run through the kit and through `wt run`, is refused the same
//! calls with the same messages, and gets the same artifacts written.

use serde_json::Value;
use windtunnel_sdk::testing::{HookTester, Sweep};
use wt_test_rules::RulesProbe;

use crate::harness::{Wt, files, plugin_dir, traces};

#[test]
fn the_test_kit_refuses_exactly_what_wt_refuses() {
    // Through the kit: the first run's turn and end.
    let log = HookTester::<RulesProbe>::new().run_sweep(&Sweep::demo());
    let first = log.calls()[0..]
        .iter()
        .find_map(|c| c.run_id.clone())
        .expect("a run");
    let in_first = |c: &&windtunnel_sdk::testing::Call| c.run_id.as_deref() == Some(&first);
    let kit: Vec<String> = log
        .calls()
        .iter()
        .filter(in_first)
        .filter(|c| c.point == "turn_begin" || c.point == "on_run_end")
        .flat_map(|c| c.warnings.clone())
        .collect();
    let kit_artifacts: Vec<Value> = log
        .calls()
        .iter()
        .filter(in_first)
        .flat_map(|c| c.artifacts.iter().map(|a| a.payload.clone()))
        .collect();

    // Through wt, as a plugin.
    let dir = tempfile::tempdir().unwrap();
    let plugins = plugin_dir(dir.path(), &["wt_test_rules"]);
    let r = Wt::new(dir.path())
        .args([
            "run",
            "--filter",
            "order-status",
            "--runs",
            "1",
            "--jobs",
            "1",
        ])
        .args(["--hook", "rules_probe", "--plugin-dir"])
        .arg(&plugins)
        .run();
    assert_eq!(r.code, 0, "{r}");
    let runs = dir.path().join("runs");
    let trace = &traces(&runs)[0];
    let wt: Vec<String> = trace["worker_warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| {
            w.as_str()
                .unwrap()
                .strip_prefix("hook:rules_probe: ")
                .expect("a warning of the probe")
                .to_owned()
        })
        .collect();
    assert_eq!(kit, wt, "the kit and wt disagree");

    // And what they agree on is the rules.
    let said = |case: &str| {
        wt.iter()
            .find(|w| w.starts_with(&format!("{case}: ")))
            .unwrap_or_else(|| panic!("no outcome for {case}: {wt:#?}"))
            .clone()
    };
    assert_eq!(said("first"), "first: ok");
    assert!(said("same name again").contains("`rules_probe.same` was already written"));
    assert!(said("reserved label").contains("reserved"));
    assert!(said("label no slug").contains("not a slug"));
    assert!(said("20 MB").contains("more than the 16777216 bytes"));
    assert!(said("artifact at turn_begin").contains("not at turn_begin"));
    assert!(said("probe_state at turn_begin").contains("valid only at run points"));
    assert!(said("converse at on_run_end").contains("valid only during on_run_scored"));
    assert!(
        wt.iter()
            .any(|w| w.contains("cut by wt: 10000 bytes in all"))
    );

    // One artifact written, the first of its name, on both sides.
    let written: Vec<(String, Vec<u8>)> = files(&runs)
        .into_iter()
        .filter(|(n, _)| n.contains(".rules_probe."))
        .collect();
    assert_eq!(
        written.len(),
        1,
        "{:?}",
        written.iter().map(|w| &w.0).collect::<Vec<_>>()
    );
    assert!(written[0].0.ends_with(".rules_probe.same.json"));
    let on_disk: Value = serde_json::from_slice(&written[0].1).unwrap();
    assert_eq!(on_disk["n"], 1);
    assert_eq!(kit_artifacts.len(), 1);
    assert_eq!(kit_artifacts[0]["n"], 1);
}
