//! Hooks called through the real loader (dlopen + abi_stable) in this process: the context
//! crosses the boundary, declared points are honoured, and a panicking hook comes back as
//! an error while the host lives on.

use std::{cell::RefCell, collections::HashMap};

use windtunnel::hooks::registry::{HostServices, Registry};
use windtunnel_abi::point;

use crate::harness::*;
use std::time::Duration;

/// A host context with fixed members that records every service call.
#[derive(Default)]
struct FakeHost {
    members: HashMap<&'static str, String>,
    calls: RefCell<Vec<(String, String)>>,
}

impl HostServices for FakeHost {
    fn member(&self, name: &str) -> Option<String> {
        self.members.get(name).cloned()
    }
    fn call(&self, op: &str, arg: &str) -> Result<String, String> {
        self.calls
            .borrow_mut()
            .push((op.to_owned(), arg.to_owned()));
        match op {
            "converse" => Err("converse is valid only during on_run_scored".into()),
            _ => Ok("null".into()),
        }
    }
}

#[test]
fn a_panicking_hook_becomes_an_error_and_the_host_lives_on() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = plugin_dir(tmp.path(), &["wt_test_panicky"]);
    let reg = Registry::discover(&[dir]);
    let hooks = reg
        .activate(&["panicky".to_string()])
        .expect("panicky loads");
    let host = FakeHost::default();

    let err = hooks[0]
        .call(point::ON_RUN_START, &host)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("panicky hook exploded in on_run_start"),
        "{err}"
    );
    assert!(
        err.contains("panicked at") && err.contains("lib.rs"),
        "{err}"
    );
    // The instance is poisoned: later calls fail cleanly instead of running on torn state.
    let err = hooks[0]
        .call(point::ON_RUN_END, &host)
        .unwrap_err()
        .to_string();
    assert!(err.contains("disabled after an earlier panic"), "{err}");
    // Still alive: a fresh instance from the same (already loaded) library works the same.
    let again = reg.activate(&["panicky".to_string()]).unwrap();
    assert!(
        again[0]
            .call(point::ON_PROVISIONED, &host)
            .unwrap_err()
            .to_string()
            .contains("on_provisioned")
    );
}

#[test]
fn the_context_crosses_the_boundary_and_services_reach_the_host() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = plugin_dir(tmp.path(), &["wt_test_recorder"]);
    let reg = Registry::discover(&[dir]);
    let hooks = reg.activate(&["recorder".to_string()]).unwrap();
    let recorder = &hooks[0];
    assert!(recorder.declares(point::ON_PACK_END) && !recorder.declares(point::TURN_BEGIN));

    let mut host = FakeHost::default();
    host.members.insert("run_id", "\"run-123\"".into());
    host.members.insert("session_id", "\"s-1\"".into());
    recorder
        .call(point::ON_RUN_START, &host)
        .expect("recorder succeeds");

    let calls = host.calls.borrow();
    let ops: Vec<&str> = calls.iter().map(|(op, _)| op.as_str()).collect();
    assert_eq!(ops, ["converse", "emit_artifact"]);
    // What the plugin saw, as it reported it back through `emit_artifact`.
    let emitted: serde_json::Value = serde_json::from_str(&calls[1].1).unwrap();
    assert_eq!(emitted["label"], "run-start");
    let line = &emitted["payload"];
    assert_eq!(line["point"], "on_run_start");
    assert_eq!(line["run_id"], "run-123");
    assert_eq!(line["present"], serde_json::json!(["run_id", "session_id"]));
    assert_eq!(
        line["converse"],
        "refused: converse is valid only during on_run_scored"
    );
}

#[test]
fn two_hooks_of_one_library_are_independent_instances_with_their_own_points() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = plugin_dir(tmp.path(), &["wt_test_pair", "acme_state_probe"]);
    let reg = Registry::discover(&[dir]);
    let hooks = reg
        .activate(&[
            "pair_second".into(),
            "acme_state_probe".into(),
            "pair_first".into(),
        ])
        .unwrap();
    let names: Vec<&str> = hooks.iter().map(|h| h.name.as_str()).collect();
    assert_eq!(names, ["pair_second", "acme_state_probe", "pair_first"]);
    assert!(hooks[2].declares(point::ON_PROVISIONED) && !hooks[0].declares(point::ON_PROVISIONED));
    let host = FakeHost::default();
    hooks[2].call(point::ON_PROVISIONED, &host).unwrap();
    assert_eq!(
        host.calls.borrow()[0],
        (
            "warn".to_owned(),
            "pair_first saw on_provisioned".to_owned()
        )
    );
    let prov = hooks[1].provenance();
    assert_eq!(prov.sha256.as_ref().map(String::len), Some(64));
    assert!(prov.source.ends_with("libacme_state_probe.so"));
}

#[test]
fn fifos_symlinks_and_huge_files_in_a_plugin_dir_neither_hang_nor_exhaust_wt() {
    let dir = tmp();
    let plugins = plugin_dir(dir.path(), &["acme_state_probe"]);
    let fifo = plugins.join("fifo.so");
    let ok = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success();
    assert!(ok, "mkfifo");
    std::os::unix::fs::symlink("/dev/zero", plugins.join("zero.so")).unwrap();
    let sparse = std::fs::File::create(plugins.join("sparse.so")).unwrap();
    sparse.set_len(1 << 30).unwrap();
    drop(sparse);

    let run = |args: &[&str]| {
        Wt::new(dir.path())
            .args(args)
            .arg("--plugin-dir")
            .arg(&plugins)
            .start()
            .finish_within(Duration::from_secs(30))
    };
    let list = run(&["hooks", "list"]);
    assert_eq!(list.code, 0, "{list}");
    let row = |name: &str| {
        list.stdout
            .lines()
            .find(|l| l.contains(name))
            .unwrap_or_else(|| panic!("no row for {name}: {list}"))
            .to_owned()
    };
    assert!(row("fifo.so").contains("not a regular file"), "{list}");
    assert!(row("zero.so").contains("symbolic link"), "{list}");
    assert!(
        row("sparse.so").contains("more than a plugin may have"),
        "{list}"
    );
    assert!(row("acme_state_probe").ends_with("ok"), "{list}");
    let r = run(&["run", "--filter", "order-status", "--hook", "debrief"]);
    assert_eq!(r.code, 0, "{r}");
    let r = run(&[
        "run",
        "--filter",
        "order-status",
        "--hook",
        "acme_state_probe",
    ]);
    assert_eq!(r.code, 0, "{r}");
    for f in ["fifo.so", "zero.so", "sparse.so"] {
        let r = Wt::new(dir.path())
            .args(["hooks", "check"])
            .arg(plugins.join(f))
            .start()
            .finish_within(Duration::from_secs(30));
        assert_eq!(r.code, 2, "{f}: {r}");
    }
    // A plugin directory that does not exist is refused, not ignored.
    let r = Wt::new(dir.path())
        .args(["hooks", "list", "--plugin-dir", "no-such-dir"])
        .run();
    assert_eq!(r.code, 2, "{r}");
    assert!(r.stderr.contains("--plugin-dir no-such-dir"), "{r}");
    let r = Wt::new(dir.path())
        .args(["run", "--out", "refused", "--hook", "debrief"])
        .args(["--plugin-dir", "no-such-dir"])
        .run();
    assert_eq!(r.code, 2, "{r}");
    assert!(
        !dir.path().join("refused").exists(),
        "a refused run wrote files"
    );
}

#[test]
fn a_plugin_whose_file_name_is_not_utf8_is_refused_in_one_line_everywhere() {
    use std::os::unix::ffi::OsStrExt;
    let dir = tmp();
    let plugins = dir.path().join("plugins");
    std::fs::create_dir(&plugins).unwrap();
    let odd = plugins.join(std::ffi::OsStr::from_bytes(b"libodd\xff.so"));
    std::fs::copy(plugin_lib("wt_test_hostile"), &odd).unwrap();
    set_mode(&odd, 0o755);
    let list = Wt::new(dir.path())
        .args(["hooks", "list", "--plugin-dir"])
        .arg(&plugins)
        .run();
    assert!(
        list.stdout.contains("not valid UTF-8") || list.stderr.contains("not valid UTF-8"),
        "hooks list: {list}"
    );
    let check = Wt::new(dir.path()).args(["hooks", "check"]).arg(&odd).run();
    assert_eq!(check.code, 2, "hooks check: {check}");
    assert!(check.stdout.contains("not valid UTF-8"), "{check}");
    let run = Wt::new(dir.path())
        .args(["run", "--runs", "1", "--hook", "forger", "--plugin-dir"])
        .arg(&plugins)
        .run();
    assert_eq!(run.code, 2, "run: {run}");
    let lines: Vec<&str> = run.stderr.lines().filter(|l| !l.is_empty()).collect();
    assert_eq!(lines.len(), 1, "{run}");
    assert!(lines[0].contains("not valid UTF-8"), "{run}");
}
