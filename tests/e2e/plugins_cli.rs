//! `wt hooks list|check|install|plan` on real plugins built from source, and the refusal
//! corpus: each bad file is refused with one line that names it and says why.

use std::path::{Path, PathBuf};

use crate::harness::{plugin_dir, plugin_lib, run, set_mode, wt};

/// Replaces `from` with `to` (same length) inside the file's metadata record.
fn patch_meta(path: &Path, from: &str, to: &str) {
    assert_eq!(from.len(), to.len());
    let mut bytes = std::fs::read(path).unwrap();
    let start = find(&bytes, b"WTMETA1\n").expect("metadata record present");
    let end = start + 200.min(bytes.len() - start);
    let at = start + find(&bytes[start..end], from.as_bytes()).expect("text in record");
    bytes[at..at + from.len()].copy_from_slice(to.as_bytes());
    std::fs::write(path, bytes).unwrap();
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn copy_lib(crate_name: &str, dir: &Path, file: &str) -> PathBuf {
    let dest = dir.join(file);
    std::fs::copy(plugin_lib(crate_name), &dest).unwrap();
    set_mode(&dest, 0o755);
    dest
}

/// The line of `hooks check` output about `file`.
fn line_for<'a>(out: &'a str, file: &Path) -> &'a str {
    let name = file.to_str().unwrap();
    let lines: Vec<&str> = out.lines().filter(|l| l.contains(name)).collect();
    assert_eq!(lines.len(), 1, "expected one line for {name} in:\n{out}");
    lines[0]
}

fn check_refuses(files: &[PathBuf], expect: &[(&PathBuf, &str)]) {
    let tmp = tempfile::tempdir().unwrap();
    let r = run(wt(tmp.path()).args(["hooks", "check"]).args(files));
    assert_eq!(r.code, 2, "{r}");
    for (file, reason) in expect {
        let line = line_for(&r.stdout, file);
        assert!(
            line.contains("refused: ") && line.contains(reason),
            "{file:?}: `{reason}` not in `{line}`"
        );
    }
}

#[test]
fn list_shows_acme_with_its_points_and_runs_no_plugin_code() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = plugin_dir(
        tmp.path(),
        &["acme_state_probe", "wt_test_recorder", "wt_test_plain"],
    );
    // A broken file beside them must change nothing for the others.
    std::fs::write(dir.join("libbroken.so"), b"\x7fELF not really").unwrap();
    let log = tmp.path().join("calls.log");
    let r = run(wt(tmp.path())
        .args(["hooks", "list", "--plugin-dir"])
        .arg(&dir)
        .env("WT_RECORDER_LOG", &log));
    assert_eq!(r.code, 0, "{r}");
    let acme = r
        .stdout
        .lines()
        .find(|l| l.starts_with("acme_state_probe"))
        .expect("acme listed");
    assert!(
        acme.contains("on_run_start, on_run_end") && acme.ends_with("ok"),
        "{acme}"
    );
    assert!(
        r.stdout
            .lines()
            .any(|l| l.starts_with("debrief") && l.contains("built-in"))
    );
    assert!(
        r.stdout.contains("libbroken.so") && r.stdout.contains("corrupt ELF"),
        "{r}"
    );
    assert!(
        r.stderr.contains("not Wind Tunnel plugins were skipped"),
        "{r}"
    );
    assert!(!log.exists(), "listing must not run plugin code");

    let r = run(wt(tmp.path())
        .args(["hooks", "list", "--json", "--plugin-dir"])
        .arg(&dir));
    let rows: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    let acme = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "acme_state_probe")
        .unwrap();
    assert_eq!(
        acme["points"],
        serde_json::json!(["on_run_start", "on_run_end"])
    );
    assert_eq!(
        acme["sdk_version"],
        serde_json::json!(windtunnel_sdk_version())
    );
}

fn windtunnel_sdk_version() -> String {
    let toml = std::fs::read_to_string(crate::harness::workspace().join("sdk/Cargo.toml")).unwrap();
    toml.lines()
        .find_map(|l| l.strip_prefix("version = \""))
        .and_then(|l| l.strip_suffix('"'))
        .unwrap()
        .to_owned()
}

#[test]
fn check_accepts_good_plugins_including_a_library_with_two_hooks() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = plugin_dir(tmp.path(), &["acme_state_probe", "wt_test_pair"]);
    let r = run(wt(tmp.path())
        .args(["hooks", "check"])
        .arg(dir.join("libacme_state_probe.so"))
        .arg(dir.join("libwt_test_pair.so")));
    assert_eq!(r.code, 0, "{r}");
    for name in ["acme_state_probe", "pair_first", "pair_second"] {
        let line = r
            .stdout
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("{name} in {r}"));
        assert!(line.ends_with("ok"), "{line}");
    }
}

#[test]
fn refusal_corpus_each_file_gets_one_line() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("corpus");
    std::fs::create_dir(&dir).unwrap();
    set_mode(&dir, 0o700);

    let writable = copy_lib("acme_state_probe", &dir, "libwritable.so");
    set_mode(&writable, 0o666);
    let target = copy_lib("wt_test_pair", &dir, "libpair.so");
    let link = dir.join("liblink.so");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let hardlink = dir.join("libpair-again.so");
    std::fs::hard_link(&target, &hardlink).unwrap();
    let not_elf = dir.join("libnotes.so");
    std::fs::write(&not_elf, "just some text\n").unwrap();
    set_mode(&not_elf, 0o644);
    let class32 = copy_lib("acme_state_probe", &dir, "libclass32.so");
    patch_byte(&class32, 4, 1);
    let arm = copy_lib("acme_state_probe", &dir, "libarm.so");
    patch_byte(&arm, 18, 183);
    patch_byte(&arm, 19, 0);
    let truncated = dir.join("libtruncated.so");
    std::fs::write(
        &truncated,
        &std::fs::read(plugin_lib("acme_state_probe")).unwrap()[..4096],
    )
    .unwrap();
    let plain = copy_lib("wt_test_plain", &dir, "libplain.so");
    let future_sdk = copy_lib("acme_state_probe", &dir, "libfuture.so");
    patch_meta(&future_sdk, "sdk 1.", "sdk 9.");
    let layout = copy_lib("wt_test_badlayout", &dir, "libbadlayout.so");
    let bad_name = copy_lib("wt_test_recorder", &dir, "libbadname.so");
    patch_meta(&bad_name, "hook recorder ", "hook Rec.rder ");
    let impostor = copy_lib("wt_test_panicky", &dir, "libimpostor.so");
    patch_meta(&impostor, "hook panicky ", "hook debrief ");
    let abort = copy_lib("wt_test_abort", &dir, "libabort.so");
    let caps = copy_lib("acme_state_probe", &dir, "libcaps.so");
    patch_meta(&caps, " 0000000a\n", " 8000000a\n");
    let liar = copy_lib("acme_state_probe", &dir, "libliar.so");
    patch_meta(&liar, " 0000000a\n", " 0000000b\n");
    let first = copy_lib("wt_test_hang", &dir, "libhang-1.so");
    let second = copy_lib("wt_test_hang", &dir, "libhang-2.so");

    check_refuses(
        &[
            writable.clone(),
            link.clone(),
            target.clone(),
            hardlink.clone(),
            not_elf.clone(),
            class32.clone(),
            arm.clone(),
            truncated.clone(),
            plain.clone(),
            future_sdk.clone(),
            layout.clone(),
            bad_name.clone(),
            impostor.clone(),
            abort.clone(),
            caps.clone(),
            liar.clone(),
            first.clone(),
            second.clone(),
        ],
        &[
            (&writable, "group- or world-writable (mode 666)"),
            (&link, "is a symbolic link"),
            (&hardlink, "same inode"),
            (&not_elf, "not an ELF shared library"),
            (&class32, "built for 32-bit ELF, this wt runs on 64-bit ELF"),
            (&arm, "built for aarch64, this wt runs on x86_64"),
            (&truncated, "corrupt ELF file"),
            (&plain, "no abi_stable root module"),
            (&future_sdk, "built against windtunnel-sdk 9."),
            (&layout, "incompatible ABI layout"),
            (&bad_name, "hook name `Rec.rder` is not a slug"),
            (&impostor, "hook `debrief` is already provided by built-in"),
            (&abort, "built with panic = \"abort\""),
            (&caps, "unknown capability bits 0x80000000"),
            (&liar, "descriptor disagrees with the metadata record"),
            (&second, "is already provided by"),
        ],
    );
}

fn patch_byte(path: &Path, at: usize, value: u8) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[at] = value;
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn a_group_writable_plugin_directory_is_refused_for_every_file_in_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = plugin_dir(tmp.path(), &["acme_state_probe"]);
    set_mode(&dir, 0o777);
    let r = run(wt(tmp.path())
        .args(["hooks", "list", "--plugin-dir"])
        .arg(&dir));
    let acme = r
        .stdout
        .lines()
        .find(|l| l.starts_with("acme_state_probe"))
        .expect("listed");
    assert!(
        acme.contains("is group- or world-writable (mode 777)"),
        "{acme}"
    );
    let r = run(wt(tmp.path())
        .args([
            "hooks",
            "plan",
            "--hook",
            "acme_state_probe",
            "--plugin-dir",
        ])
        .arg(&dir));
    assert!(r.stderr.contains("group- or world-writable"), "{r}");
    assert_eq!(r.code, 2, "{r}");
}

#[test]
fn unknown_hook_is_a_hard_error_listing_names_and_sources() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = plugin_dir(tmp.path(), &["acme_state_probe"]);
    let r = run(wt(tmp.path())
        .args(["hooks", "plan", "--hook", "nosuch", "--plugin-dir"])
        .arg(&dir));
    assert_eq!(r.code, 2, "{r}");
    let line = r.stderr.trim();
    assert_eq!(line.lines().count(), 1, "{r}");
    assert!(line.contains("unknown hook `nosuch`"), "{line}");
    assert!(line.contains("debrief (built-in)"), "{line}");
    assert!(
        line.contains(&format!(
            "acme_state_probe ({})",
            dir.join("libacme_state_probe.so").display()
        )),
        "{line}"
    );
}

#[test]
fn a_plugin_reusing_debrief_cannot_shadow_the_builtin() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = plugin_dir(tmp.path(), &["wt_test_panicky"]);
    patch_meta(
        &dir.join("libwt_test_panicky.so"),
        "hook panicky ",
        "hook debrief ",
    );
    // Activating `debrief` resolves to the built-in, never to the plugin.
    let r = run(wt(tmp.path())
        .args(["hooks", "plan", "--hook", "debrief", "--plugin-dir"])
        .arg(&dir));
    assert_eq!(r.code, 0, "{r}");
    assert!(r.stdout.contains("hook debrief  (built-in"), "{r}");
    let r = run(wt(tmp.path())
        .args(["hooks", "list", "--plugin-dir"])
        .arg(&dir));
    assert!(
        r.stdout
            .contains("hook `debrief` is already provided by built-in"),
        "{r}"
    );
}

#[test]
fn a_refused_plugin_named_by_hook_says_why() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = plugin_dir(tmp.path(), &["wt_test_abort"]);
    let r = run(wt(tmp.path())
        .args(["hooks", "plan", "--hook", "abort_hook", "--plugin-dir"])
        .arg(&dir));
    assert_eq!(r.code, 2, "{r}");
    assert!(
        r.stderr.contains("hook `abort_hook` cannot be used")
            && r.stderr.contains("panic = \"abort\""),
        "{r}"
    );
}

#[test]
fn colliding_settings_prefixes_cannot_be_active_together() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = plugin_dir(tmp.path(), &["wt_test_pair"]);
    patch_meta(
        &dir.join("libwt_test_pair.so"),
        "hook pair_second ",
        "hook pair_first_ ",
    );
    let r = run(wt(tmp.path())
        .args([
            "hooks",
            "plan",
            "--hook",
            "pair_first",
            "--hook",
            "pair_first_",
            "--plugin-dir",
        ])
        .arg(&dir));
    assert_eq!(r.code, 2, "{r}");
    assert!(
        r.stderr
            .contains("WT_PAIR_FIRST_ and WT_PAIR_FIRST__ overlap"),
        "{r}"
    );
}

#[test]
fn plan_follows_flag_order_and_skips_undeclared_points() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = plugin_dir(tmp.path(), &["wt_test_recorder", "acme_state_probe"]);
    let r = run(wt(tmp.path())
        .args([
            "hooks",
            "plan",
            "--hook",
            "acme_state_probe",
            "--hook",
            "recorder",
            "--plugin-dir",
        ])
        .arg(&dir)
        .env("WT_HOOK_TIMEOUT_S", "7"));
    assert_eq!(r.code, 0, "{r}");
    let line = |p: &str| {
        r.stdout
            .lines()
            .find(|l| l.starts_with(p))
            .unwrap()
            .to_owned()
    };
    assert!(
        line("on_run_start ").contains("acme_state_probe -> recorder  [deadline 7s]"),
        "{r}"
    );
    assert!(
        line("on_provisioned ").contains("recorder  [deadline 7s]"),
        "{r}"
    );
    assert!(
        line("turn_begin ").contains("(none: not dispatched)"),
        "{r}"
    );
}

#[test]
fn install_validates_then_copies_into_the_user_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = plugin_dir(tmp.path(), &["acme_state_probe", "wt_test_plain"]);
    let r = run(wt(tmp.path())
        .args(["hooks", "install"])
        .arg(dir.join("libwt_test_plain.so")));
    assert_eq!(r.code, 2, "{r}");
    assert!(r.stderr.contains("no abi_stable root module"), "{r}");
    let installed = tmp
        .path()
        .join("data/windtunnel/plugins/libacme_state_probe.so");
    assert!(!installed.exists());

    let r = run(wt(tmp.path())
        .args(["hooks", "install"])
        .arg(dir.join("libacme_state_probe.so")));
    assert_eq!(r.code, 0, "{r}");
    assert_eq!(
        std::fs::read(&installed).unwrap(),
        std::fs::read(dir.join("libacme_state_probe.so")).unwrap()
    );
    // Found without --plugin-dir now.
    let r = run(wt(tmp.path()).args(["hooks", "list"]));
    assert!(
        r.stdout
            .lines()
            .any(|l| l.starts_with("acme_state_probe") && l.ends_with("ok")),
        "{r}"
    );
}

#[test]
fn wt_plugin_path_is_searched() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = plugin_dir(tmp.path(), &["acme_state_probe"]);
    let r = run(wt(tmp.path())
        .args(["hooks", "list"])
        .env("WT_PLUGIN_PATH", format!("/nonexistent:{}", dir.display())));
    assert!(
        r.stdout
            .lines()
            .any(|l| l.starts_with("acme_state_probe") && l.ends_with("ok")),
        "{r}"
    );
}
