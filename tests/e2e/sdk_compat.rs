//! A plugin built against an earlier SDK patch release loads and runs in the current host.
//!
//! The earlier release is the current SDK source with the previous patch version, built in
//! its own workspace (two crates named `windtunnel-sdk` cannot share one) that uses this
//! workspace's lock file and target directory, so only the SDK crate and the plugin are
//! compiled. It depends on the same frozen `windtunnel-abi` 1.0.0 and macros crate, as a
//! real earlier patch release does.

use std::path::Path;

use windtunnel::registry::{HostServices, Registry};
use windtunnel_abi::point;

use crate::harness::{cargo, cargo_profile, plugin_dir, profile_dir, run, set_mode, workspace, wt};

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let dest = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &dest);
        } else {
            std::fs::copy(entry.path(), dest).unwrap();
        }
    }
}

fn set_package_version(manifest: &Path, version: &str) {
    let text = std::fs::read_to_string(manifest).unwrap();
    let mut done = false;
    let out: Vec<String> = text
        .lines()
        .map(|l| {
            if !done && l.starts_with("version = ") {
                done = true;
                format!("version = \"{version}\"")
            } else {
                l.to_owned()
            }
        })
        .collect();
    std::fs::write(manifest, out.join("\n") + "\n").unwrap();
}

fn previous_patch(version: &str) -> String {
    let v = semver::Version::parse(version).unwrap();
    assert!(
        v.patch > 0,
        "the SDK is at {v}: there is no earlier patch release to test against; \
         keep at least one patch release in the 1.x line before changing this test"
    );
    format!("{}.{}.{}", v.major, v.minor, v.patch - 1)
}

struct Quiet;
impl HostServices for Quiet {
    fn member(&self, _: &str) -> Option<String> {
        None
    }
    fn call(&self, op: &str, arg: &str) -> Result<String, String> {
        if op == "warn" && arg == "pair_first saw on_provisioned" {
            Ok("null".into())
        } else {
            Err(format!("unexpected {op}({arg})"))
        }
    }
}

#[test]
fn a_plugin_built_against_the_previous_sdk_patch_release_loads() {
    let root = workspace();
    let old = profile_dir().join("old-sdk-workspace");
    let _ = std::fs::remove_dir_all(old.join("sdk"));
    copy_tree(&root.join("sdk/src"), &old.join("sdk/src"));
    std::fs::copy(root.join("sdk/Cargo.toml"), old.join("sdk/Cargo.toml")).unwrap();
    copy_tree(
        &root.join("tests/plugins/pair/src"),
        &old.join("plugin/src"),
    );
    let current = windtunnel_sdk::SDK_VERSION;
    let earlier = previous_patch(current);
    set_package_version(&old.join("sdk/Cargo.toml"), &earlier);

    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let start = manifest.find("members = [").unwrap();
    let end = start + manifest[start..].find(']').unwrap() + 1;
    let manifest = format!(
        "{}members = [\"sdk\", \"plugin\"]{}",
        &manifest[..start],
        &manifest[end..]
    )
    .replace(
        "path = \"sdk/abi\"",
        &format!("path = \"{}/sdk/abi\"", root.display()),
    )
    .replace(
        "path = \"sdk/macros\"",
        &format!("path = \"{}/sdk/macros\"", root.display()),
    );
    std::fs::write(old.join("Cargo.toml"), manifest).unwrap();
    let plugin_manifest = std::fs::read_to_string(root.join("tests/plugins/pair/Cargo.toml"))
        .unwrap()
        .replace("name = \"wt_test_pair\"", "name = \"wt_test_pair_oldsdk\"");
    std::fs::write(old.join("plugin/Cargo.toml"), plugin_manifest).unwrap();
    std::fs::copy(root.join("Cargo.lock"), old.join("Cargo.lock")).unwrap();

    let status = cargo()
        .args(["build", "-q", "-p", "wt_test_pair_oldsdk", "--profile"])
        .arg(cargo_profile())
        .current_dir(&old)
        .status()
        .unwrap();
    assert!(status.success());

    let tmp = tempfile::tempdir().unwrap();
    let dir = plugin_dir(tmp.path(), &[]);
    let lib = dir.join("libwt_test_pair_oldsdk.so");
    std::fs::copy(profile_dir().join("libwt_test_pair_oldsdk.so"), &lib).unwrap();
    set_mode(&lib, 0o755);

    let r = run(wt(tmp.path()).args(["hooks", "check"]).arg(&lib));
    assert_eq!(r.code, 0, "{r}");
    let row = r
        .stdout
        .lines()
        .find(|l| l.starts_with("pair_first"))
        .unwrap();
    assert!(
        row.contains(&format!(" {earlier} ")) && row.ends_with("ok"),
        "{row}"
    );

    let reg = Registry::discover(&[dir]);
    let hooks = reg.activate(&["pair_first".into()]).unwrap();
    assert_eq!(hooks[0].sdk_version, earlier);
    hooks[0].call(point::ON_PROVISIONED, &Quiet).unwrap();
    assert_ne!(earlier, current);
}
