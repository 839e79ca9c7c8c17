//! Shared fixtures: the workspace's binaries and plugins, built from source once per test
//! process (cargo is a no-op when they are fresh), and helpers to run the real `wt`.

use std::{
    path::{Path, PathBuf},
    process::{Command, Output},
    sync::OnceLock,
};

/// The workspace root.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ sits in the workspace")
        .to_path_buf()
}

/// `<target>/<profile>` of this test binary (it lives in `<target>/<profile>/deps/`).
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    exe.parent()
        .and_then(Path::parent)
        .expect("test binary lives in <target>/<profile>/deps")
        .to_path_buf()
}

fn target_dir() -> PathBuf {
    profile_dir()
        .parent()
        .expect("profile dir has a parent")
        .to_path_buf()
}

fn cargo_profile() -> String {
    match profile_dir().file_name().and_then(|n| n.to_str()) {
        Some("debug") => "dev".into(),
        Some(other) => other.into(),
        None => "dev".into(),
    }
}

fn cargo(args: &[&str]) {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(args)
        .arg("--target-dir")
        .arg(target_dir())
        .current_dir(workspace());
    // Variables cargo sets for the test process would look like changed build inputs to
    // build scripts that watch them, and force rebuilds.
    for (k, _) in std::env::vars() {
        if (k.starts_with("CARGO_") && k != "CARGO_HOME") || k == "OUT_DIR" {
            cmd.env_remove(k);
        }
    }
    let status = cmd.status().expect("run cargo");
    assert!(status.success(), "cargo {args:?} failed");
}

/// Builds `wt` and every plugin in this test binary's profile, plus the `panic = "abort"`
/// test plugin in its own profile. Once per process.
pub fn build() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let profile = cargo_profile();
        cargo(&[
            "build",
            "--workspace",
            "--exclude",
            "wt_test_abort",
            "--profile",
            &profile,
        ]);
        cargo(&["build", "-p", "wt_test_abort", "--profile", "abort-plugin"]);
        profile_dir()
    })
}

/// The `wt` binary.
pub fn wt_bin() -> PathBuf {
    build().join("wt")
}

/// A built plugin library by crate name (`acme_state_probe`, `wt_test_recorder`, …).
pub fn plugin_lib(crate_name: &str) -> PathBuf {
    let dir = if crate_name == "wt_test_abort" {
        target_dir().join("abort-plugin")
    } else {
        build().to_path_buf()
    };
    build();
    dir.join(format!("lib{crate_name}.so"))
}

/// A `wt` command with a clean environment for plugin discovery: no WT_* variables and a
/// per-user data directory inside `home`, so the developer's own plugins never leak in.
pub fn wt(home: &Path) -> Command {
    let mut cmd = Command::new(wt_bin());
    for (k, _) in std::env::vars() {
        if k.starts_with("WT_") {
            cmd.env_remove(k);
        }
    }
    cmd.env("HOME", home)
        .env("XDG_DATA_HOME", home.join("data"));
    cmd
}

/// Output as text, for assertions with context.
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn from(out: Output) -> Run {
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

impl std::fmt::Display for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {}\n--- stdout\n{}\n--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

pub fn run(cmd: &mut Command) -> Run {
    Run::from(cmd.output().expect("run wt"))
}

/// A private plugin directory (mode 0700) holding copies of the named plugin crates.
pub fn plugin_dir(root: &Path, crates: &[&str]) -> PathBuf {
    let dir = root.join("plugins");
    std::fs::create_dir_all(&dir).unwrap();
    set_mode(&dir, 0o700);
    for c in crates {
        std::fs::copy(plugin_lib(c), dir.join(format!("lib{c}.so"))).unwrap();
    }
    dir
}

pub fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}
