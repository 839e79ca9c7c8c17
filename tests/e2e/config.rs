//! Configuration that cannot work is refused before anything runs or is written: agent
//! configs, durations, expectations, outputs, FIFOs named as files.

use std::path::Path;
use std::time::Duration;

use crate::harness::*;

#[test]
fn durations_beyond_24_hours_are_refused_not_accepted_or_panicking() {
    let dir = tmp();
    let agent = agent_file(
        dir.path(),
        "a.toml",
        "label = \"x\"\nruntime = \"demo\"\nturn_timeout_s = 1e300\n",
    );
    let r = Wt::new(dir.path())
        .args(["run", "--agent"])
        .arg(&agent)
        .run();
    assert_eq!(r.code, 2, "{r}");
    assert!(
        r.stderr.contains("turn_timeout_s") && r.stderr.contains("24 h"),
        "{r}"
    );
    for (var, value) in [
        ("WT_HOOK_TIMEOUT_S", "1e20"),
        ("WT_HOOK_CONVERSE_TIMEOUT_S", "90000"),
        ("WT_GRACE_S", "1e9"),
        ("WT_HOOK_TIMEOUT_S", "NaN"),
    ] {
        let r = Wt::new(dir.path()).arg("run").env(var, value).run();
        assert_eq!(r.code, 2, "{var}={value}: {r}");
        assert!(r.stderr.contains(var), "{r}");
        assert_eq!(r.stderr.lines().count(), 1, "{r}");
    }
    assert!(
        !dir.path().join("runs").exists(),
        "a refused run wrote files"
    );
}

#[test]
fn agent_config_errors_are_refused_before_anything_is_written_with_their_cause_once() {
    let dir = tmp();
    type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a str);
    let cases: &[Case] = &[
        (
            "runtime = \"openai\"\nendpoint = \"http://127.0.0.1:9/v1\"\n",
            &[],
            "needs `model`",
        ),
        (
            "runtime = \"openai\"\nmodel = \"m\"\n",
            &[],
            "needs `endpoint`",
        ),
        (
            "runtime = \"openai\"\nmodel = \"m\"\nendpoint = \"localhost:8000/v1\"\n",
            &[],
            "not an http(s) URL",
        ),
        (
            "runtime = \"http\"\nendpoint = \"127.0.0.1:9\"\n",
            &[],
            "`endpoint`",
        ),
        (
            "runtime = \"openai\"\nmodel = \"m\"\nendpoint = \"http://127.0.0.1:9/v1\"\napi_key_env = \"WT_E2E_NOKEY\"\n",
            &[],
            "WT_E2E_NOKEY (named by api_key_env) is not set",
        ),
        (
            "runtime = \"openai\"\nmodel = \"m\"\nendpoint = \"http://127.0.0.1:9/v1\"\napi_key_env = \"WT_E2E_KEY\"\n",
            &[("WT_E2E_KEY", "")],
            "is empty",
        ),
        (
            "runtime = \"openai\"\nmodel = \"m\"\nendpoint = \"http://127.0.0.1:9/v1\"\napi_key_env = \"WT_E2E_KEY\"\n",
            &[("WT_E2E_KEY", "sk-abc\ndef")],
            "contains a newline",
        ),
        ("runtime = \"demo\"\nmax_steps = 0\n", &[], "`max_steps`"),
    ];
    for (i, (body, env, expect)) in cases.iter().enumerate() {
        let agent = agent_file(
            dir.path(),
            &format!("a{i}.toml"),
            &format!("label = \"x\"\n{body}"),
        );
        let mut wt = Wt::new(dir.path()).args(["run", "--agent"]).arg(&agent);
        for (k, v) in *env {
            wt = wt.env(k, v);
        }
        let r = wt.run();
        assert_eq!(r.code, 2, "case {i}: {r}");
        assert!(
            r.stderr.contains(expect),
            "case {i}: expected {expect:?}: {r}"
        );
        assert_eq!(r.stderr.lines().count(), 1, "case {i}: {r}");
        assert!(!dir.path().join("runs").exists(), "case {i} wrote files");
    }
    // A cause is printed once.
    std::fs::write(dir.path().join("a-file"), "").unwrap();
    let r = Wt::new(dir.path()).args(["run", "--out", "a-file"]).run();
    assert_eq!(r.code, 2, "{r}");
    assert_eq!(r.stderr.matches("not a directory").count(), 1, "{r}");
    assert_eq!(r.stderr.lines().count(), 1, "{r}");
    let r = Wt::new(dir.path())
        .args(["run", "--agent", "nope.toml"])
        .run();
    assert_eq!(r.code, 2, "{r}");
    assert_eq!(r.stderr.matches("nope.toml").count(), 1, "{r}");
}

#[test]
fn an_expectation_naming_an_undeclared_tool_is_refused() {
    let dir = tmp();
    // A typo in the demo scenario's forbidden tools: a constraint that could never fail.
    let scenario =
        std::fs::read_to_string(workspace().join("host/packs/demo/scenarios/order-status.toml"))
            .unwrap()
            .replace(
                "forbidden_tools = [\"issue_refund\"]",
                "forbidden_tools = [\"issue_refund\", \"no_such_tool\"]",
            );
    assert!(scenario.contains("no_such_tool"));
    let pack = write_pack(dir.path(), &[("order-status.toml", &scenario)]);
    let r = Wt::new(dir.path()).args(["run", "--pack"]).arg(&pack).run();
    assert_eq!(r.code, 2, "{r}");
    assert!(
        r.stderr.contains("expect.constraint.forbidden_tools[1]")
            && r.stderr.contains("no tool `no_such_tool`"),
        "{r}"
    );
    assert!(!dir.path().join("runs").exists());
}

#[test]
fn outputs_that_cannot_be_written_are_refused_before_the_first_run() {
    let dir = tmp();
    std::fs::create_dir(dir.path().join("a-dir")).unwrap();
    for junit in ["missing/j.xml", "a-dir"] {
        let r = Wt::new(dir.path())
            .args(["run", "--out", "never", "--junit", junit])
            .run();
        assert_eq!(r.code, 2, "{r}");
        assert!(r.stderr.contains("--junit"), "{r}");
        assert!(!dir.path().join("never").exists(), "a run started: {r}");
    }
    let r = Wt::new(dir.path()).args(["run", "--out", "runs"]).run();
    assert_eq!(r.code, 0, "{r}");
    for args in [
        vec!["report", "runs", "-o", "missing/r.html", "--format", "html"],
        vec!["compare", "runs", "runs", "-o", "a-dir"],
    ] {
        let r = Wt::new(dir.path()).args(&args).run();
        assert_eq!(r.code, 2, "{args:?}: {r}");
        assert!(r.stderr.contains("-o "), "{args:?}: {r}");
    }
}

#[test]
fn a_fifo_named_as_an_agent_config_or_a_pack_file_is_refused_at_once() {
    let dir = tmp();
    let mkfifo = |p: &Path| {
        let status = std::process::Command::new("mkfifo")
            .arg(p)
            .status()
            .unwrap();
        assert!(status.success());
    };
    mkfifo(&dir.path().join("agent.toml"));
    let pack = dir.path().join("pack");
    std::fs::create_dir_all(pack.join("scenarios")).unwrap();
    mkfifo(&pack.join("pack.toml"));
    let linked = dir.path().join("linked");
    std::fs::create_dir_all(linked.join("scenarios")).unwrap();
    std::fs::write(linked.join("pack.toml"), "name = \"p\"\n").unwrap();
    std::os::unix::fs::symlink("/etc/hostname", linked.join("scenarios/s.toml")).unwrap();
    for (args, said) in [
        (vec!["run", "--agent", "agent.toml"], "not a regular file"),
        (vec!["run", "--pack", "pack"], "not a regular file"),
        (vec!["run", "--pack", "linked"], "symbolic link"),
    ] {
        let r = Wt::new(dir.path())
            .args(&args)
            .arg("--out")
            .arg("never")
            .start()
            .finish_within(Duration::from_secs(30));
        assert_eq!(r.code, 2, "{args:?}: {r}");
        assert!(r.stderr.contains(said), "{args:?}: {r}");
        assert!(!dir.path().join("never").exists());
    }
}

#[test]
fn an_unwritable_out_is_refused_in_one_line_before_the_sweep_is_announced() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tmp();
    std::fs::write(dir.path().join("a-file"), "x").unwrap();
    let locked = dir.path().join("locked");
    std::fs::create_dir(&locked).unwrap();
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o555)).unwrap();
    // Root writes anywhere: the permission case holds only for an ordinary user.
    let root = std::fs::write(locked.join("probe"), "").is_ok();
    let _ = std::fs::remove_file(locked.join("probe"));
    let mut outs = vec!["a-file", "a-file/runs", "/proc/wt-runs"];
    if !root {
        outs.push("locked/runs");
    }
    for out in outs {
        let r = Wt::new(dir.path()).args(["run", "--out", out]).run();
        assert_eq!(r.code, 2, "{out}: {r}");
        assert!(!r.stderr.contains("scenario(s)"), "announced first: {r}");
        let lines: Vec<_> = r.stderr.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(lines.len(), 1, "{out}: {r}");
        assert!(lines[0].contains("--out"), "{out}: {r}");
        // The cause, not the name of the probe's temporary file.
        assert!(!lines[0].contains(".wt-tmp"), "{out}: {r}");
    }
    assert_eq!(
        std::fs::read_to_string(dir.path().join("a-file")).unwrap(),
        "x"
    );
}
