//! The SDK as a product, through the real `wt`: `wt hooks new` writes a crate outside the
//! repository that builds against the SDK crates as `cargo package` ships them (no
//! `abi_stable` dependency, no workspace around it), passes its own unit test (written
//! with `windtunnel_sdk::testing`), `wt hooks check`, and runs with `wt run --hook`; from a
//! checkout it depends on the checkout's SDK; a bad NAME is refused.

use serde_json::Value;

use crate::harness::{Wt, json_files, plugin_dir, set_mode, workspace};
use crate::sdk_compat::{build_hook_crate, cargo_in_hook_crate, packaged_sdk};

#[test]
fn a_scaffolded_hook_builds_against_the_packaged_sdk_passes_its_test_and_check_and_runs() {
    let tmp = tempfile::tempdir().unwrap();
    assert!(
        !tmp.path().starts_with(workspace()),
        "outside the repository"
    );
    let dir = tmp.path().join("acme_audit");
    let all = "on_provisioned,on_run_start,on_run_scored,on_run_end,on_scenario_end,on_pack_end";
    let r = Wt::new(tmp.path())
        .args([
            "hooks",
            "new",
            "acme_audit",
            "--registry-sdk",
            "--turn",
            "--guard",
        ])
        .args(["--points", all, "--path"])
        .arg(&dir)
        .run();
    assert_eq!(r.code, 0, "{r}");
    assert!(
        r.stderr.contains("cargo build --release")
            && r.stderr
                .contains("wt run --hook acme_audit --policy-revision REV"),
        "{r}"
    );
    let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
    let v = semver::Version::parse(windtunnel_sdk::SDK_VERSION).unwrap();
    assert!(
        manifest.contains(&format!("windtunnel-sdk = \"~{}.{}\"", v.major, v.minor)),
        "{manifest}"
    );
    assert!(
        !manifest.contains("abi_stable"),
        "authors need not name abi_stable"
    );
    let readme = std::fs::read_to_string(dir.join("README.md")).unwrap();
    assert!(
        readme.contains("cargo build --release\nwt run --hook acme_audit"),
        "{readme}"
    );

    // Resolve the registry requirement to the packaged crates, as a registry would.
    let sdk = packaged_sdk();
    let patch = sdk.patch(sdk.dir("windtunnel-sdk"));
    let test = cargo_in_hook_crate(&dir, &patch, &["test"]);
    let test_out = String::from_utf8_lossy(&test.stdout);
    assert!(
        test_out.contains("test tests::runs_through_a_sweep ... ok")
            && test_out.contains("test tests::the_guard_denies_only_turns_with_the_text ... ok"),
        "{test_out}"
    );
    let lib = build_hook_crate(&dir, "acme_audit", &patch);

    let plugins = plugin_dir(tmp.path(), &[]);
    let installed = plugins.join("libacme_audit.so");
    std::fs::copy(&lib, &installed).unwrap();
    set_mode(&installed, 0o755);
    let r = Wt::new(tmp.path())
        .args(["hooks", "check"])
        .arg(&installed)
        .run();
    assert_eq!(r.code, 0, "{r}");
    let row = r
        .stdout
        .lines()
        .find(|l| l.starts_with("acme_audit"))
        .unwrap();
    assert!(
        row.contains(&format!(" {} ", windtunnel_sdk::SDK_VERSION))
            && row.contains("guard_check")
            && row.ends_with("ok"),
        "{row}"
    );

    let out = tmp.path().join("out");
    let r = Wt::new(tmp.path())
        .args([
            "run",
            "--runs",
            "1",
            "--hook",
            "acme_audit",
            "--policy-revision",
            "rev-1",
        ])
        .arg("--plugin-dir")
        .arg(&plugins)
        .arg("--out")
        .arg(&out)
        .env("WT_ACME_AUDIT_DENY", "damaged")
        .run();
    // The guard denies the demo pack's one turn that mentions a damaged order: that run is
    // ERROR (exit 3), every other run passes.
    assert_eq!(r.code, 3, "{r}");
    assert!(
        !r.stderr.contains("hook:acme_audit"),
        "no hook failure:\n{r}"
    );
    let artifacts = json_files(&out, ".json");
    let of = |suffix: &str| {
        artifacts
            .iter()
            .filter(|(n, _)| n.ends_with(suffix))
            .map(|(_, v)| v)
            .collect::<Vec<_>>()
    };
    let run_ends = of(".acme_audit.json");
    assert_eq!(run_ends.len(), 3, "one per run");
    let mut verdicts: Vec<&str> = run_ends
        .iter()
        .map(|a| a["verdict"].as_str().unwrap())
        .collect();
    verdicts.sort_unstable();
    assert_eq!(verdicts, ["ERROR", "PASS", "PASS"]);
    let turns: usize = run_ends
        .iter()
        .map(|a| a["turns"].as_array().unwrap().len())
        .sum();
    assert_eq!(turns, 3, "every turn but the denied one was timed");
    assert_eq!(of(".acme_audit.start.json").len(), 3);
    assert_eq!(of(".acme_audit.scored.json").len(), 3);
    assert_eq!(of(".provisioned.pack.json").len(), 3);
    let pack = artifacts
        .iter()
        .find(|(n, _)| n.ends_with(".acme_audit.pack.json"))
        .map(|(_, v)| v)
        .unwrap();
    assert_eq!(
        (&pack["passed"], &pack["runs"]),
        (&Value::from(2), &Value::from(3))
    );
    let denied = artifacts
        .iter()
        .find(|(n, v)| !n.trim_end_matches(".json").contains('.') && v["denial"].is_object())
        .map(|(_, v)| &v["denial"])
        .unwrap();
    assert_eq!(
        (&denied["guard"], &denied["code"]),
        (&Value::from("acme_audit"), &Value::from("denied_text"))
    );
}

#[test]
fn from_a_checkout_a_scaffolded_hook_depends_on_the_checkouts_sdk() {
    let tmp = tempfile::tempdir().unwrap();
    let r = Wt::new(tmp.path())
        .args(["hooks", "new", "plain_hook"])
        .run();
    assert_eq!(r.code, 0, "{r}");
    let dir = tmp.path().join("plain_hook");
    let sdk = std::fs::canonicalize(workspace().join("sdk")).unwrap();
    let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
    assert!(
        manifest.contains(&format!(
            "windtunnel-sdk = {{ path = \"{}\" }}",
            sdk.display()
        )),
        "{manifest}"
    );
    let meta = cargo_in_hook_crate(&dir, "", &["metadata", "--format-version", "1"]);
    let meta: Value = serde_json::from_slice(&meta.stdout).unwrap();
    let resolved = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "windtunnel-sdk")
        .unwrap();
    assert_eq!(
        resolved["manifest_path"],
        Value::from(sdk.join("Cargo.toml").display().to_string())
    );
    assert_eq!(resolved["version"], windtunnel_sdk::SDK_VERSION);
}

#[test]
fn wt_hooks_new_refuses_bad_names_points_and_occupied_directories() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::create_dir(tmp.path().join("taken")).unwrap();
    std::fs::write(tmp.path().join("taken/file"), "x").unwrap();
    for (args, says) in [
        (vec!["Acme.Probe"], "`Acme.Probe` is not a hook name"),
        (vec!["debrief"], "`debrief` is the name of a built-in hook"),
        (vec!["debrief_plus"], "clashes with the built-in `debrief`"),
        (vec!["hooks"], "hook name `hooks` is reserved"),
        (
            vec!["taken"],
            "taken already exists and is not an empty directory",
        ),
        (
            vec!["ok", "--points", "on_run_ends"],
            "unknown lifecycle point `on_run_ends`",
        ),
    ] {
        let r = Wt::new(tmp.path()).args(["hooks", "new"]).args(&args).run();
        assert_eq!(r.code, 2, "{args:?}: {r}");
        assert_eq!(r.stderr.lines().count(), 1, "{args:?}: one line\n{r}");
        assert!(r.stderr.contains(says), "{args:?}: {says:?}\n{r}");
    }
    let mut left: Vec<String> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort_unstable();
    assert_eq!(left, ["taken"], "a refused scaffold writes nothing");
}

/// The code block after `marker` in a Markdown text.
fn code_after<'t>(text: &'t str, marker: &str) -> &'t str {
    let start = text
        .find(marker)
        .unwrap_or_else(|| panic!("{marker:?} in the text"));
    let open = start + text[start..].find("```").unwrap();
    let body = open + text[open..].find('\n').unwrap() + 1;
    let close = body + text[body..].find("```").unwrap();
    &text[body..close]
}

#[test]
fn the_complete_hook_in_the_docs_is_the_sdk_example_its_doc_tests_build_and_run() {
    let docs = std::fs::read_to_string(workspace().join("docs/hooks.md")).unwrap();
    let lib = std::fs::read_to_string(workspace().join("sdk/src/lib.rs")).unwrap();
    let crate_docs: String = lib
        .lines()
        .filter_map(|l| l.strip_prefix("//!"))
        .map(|l| l.strip_prefix(' ').unwrap_or(l))
        .filter(|l| !l.starts_with("# ") && *l != "#")
        .collect::<Vec<_>>()
        .join("\n");
    for marker in ["`Cargo.toml`", "`src/lib.rs`"] {
        assert_eq!(
            code_after(&docs, marker).trim_end(),
            code_after(&crate_docs, marker).trim_end(),
            "docs/hooks.md and the SDK's crate example differ after {marker}"
        );
    }
}

#[test]
fn the_git_dependency_form_resolves_to_this_sdk() {
    let head = std::process::Command::new("git")
        .current_dir(workspace())
        .args(["rev-parse", "HEAD"])
        .output()
        .unwrap();
    assert!(head.status.success(), "the suite runs in a git checkout");
    let head = String::from_utf8(head.stdout).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let r = Wt::new(tmp.path())
        .args(["hooks", "new", "git_hook", "--registry-sdk"])
        .run();
    assert_eq!(r.code, 0, "{r}");
    let dir = tmp.path().join("git_hook");
    let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
    let git = format!(
        "{{ git = \"file://{}\", rev = \"{}\"",
        workspace().canonicalize().unwrap().display(),
        head.trim()
    );
    // The registry requirement, `"~MAJOR.MINOR"`, in both dependency tables.
    let version = manifest
        .lines()
        .find_map(|l| l.strip_prefix("windtunnel-sdk = \""))
        .map(|v| format!("\"{v}"))
        .unwrap();
    let manifest = manifest
        .replace(
            &format!("windtunnel-sdk = {version}"),
            &format!("windtunnel-sdk = {git} }}"),
        )
        .replace(
            &format!("{{ version = {version}, features"),
            &format!("{git}, features"),
        );
    assert_eq!(manifest.matches("git = ").count(), 2, "{manifest}");
    std::fs::write(dir.join("Cargo.toml"), &manifest).unwrap();
    std::fs::copy(workspace().join("Cargo.lock"), dir.join("Cargo.lock")).unwrap();
    // Online, but only for the local git repository: every registry crate is in the lock.
    let out = crate::harness::cargo()
        .current_dir(&dir)
        .args(["metadata", "--format-version", "1"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: Value = serde_json::from_slice(&out.stdout).unwrap();
    let sdk = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "windtunnel-sdk")
        .unwrap();
    // The repository also holds the frozen 1.0.1 SDK; the git form picks the current one.
    assert_eq!(sdk["version"], windtunnel_sdk::SDK_VERSION);
    assert!(
        sdk["manifest_path"]
            .as_str()
            .unwrap()
            .ends_with("/sdk/Cargo.toml"),
        "{sdk}"
    );
}
