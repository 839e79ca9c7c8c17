//! The SDK's compatibility promise, through real plugins and the real `wt`:
//!
//! - a plugin built against the frozen SDK 1.0.1 (`tests/compat/sdk-1.0.1`, the SDK before
//!   1.1) loads in today's `wt` and reads every context member at every point, exactly;
//! - the same plugin source, built against the current SDK as `cargo package` ships it,
//!   does too (a hook written for 1.0 compiles unchanged against 1.1);
//! - that build also reads every member under a host whose members all carry unknown
//!   fields and unknown enum variants (what a newer `wt` may send), keeping every known
//!   value and decoding the unknown variants as `Unknown`;
//! - a plugin built against SDK 1.0 still reads the agent and scenario when they carry
//!   fields 1.0 never knew (its types refused unknown fields there): `wt` hands it those
//!   members in 1.0's shape;
//! - a plugin built against a newer SDK minor than this `wt`'s is refused.
//!
//! A frozen 1.0.1 plugin cannot pass the third check: its data model refuses unknown fields
//! (that is what 1.1 fixed), so the third check runs on the current SDK, where it fails if
//! `deny_unknown_fields` comes back on any context type.
//!
//! Each plugin crate is built once per test process in a workspace of its own (two crates
//! named `windtunnel-sdk` cannot share one) that reuses this workspace's lock file and
//! target directory, so only the SDK crates and the plugin compile, offline — after the
//! harness has fetched every package of that lock file once ([`registry_cache_filled`]),
//! so nothing depends on what the machine's cargo cache happened to hold.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    sync::{Mutex, OnceLock},
};

use serde_json::{Map, Value, json};
use windtunnel::hooks::registry::{HostServices, Registry};
use windtunnel_abi::point;

use crate::harness::{
    cargo, cargo_profile, files, plugin_dir, profile_dir, registry_cache_filled, run, set_mode,
    target_dir, workspace, wt,
};

/// Writes `bytes` to `path` unless it already holds them, so that cargo's mtime-based
/// fingerprints see no change and nothing is rebuilt.
fn write_if_changed(path: &Path, bytes: &[u8]) {
    if std::fs::read(path).ok().as_deref() == Some(bytes) {
        return;
    }
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, bytes).unwrap();
}

/// Mirrors the files under `from` into `to` with [`write_if_changed`], removing files `from`
/// does not have.
fn sync_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    let mut keep = Vec::new();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let dest = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            sync_tree(&entry.path(), &dest);
        } else {
            write_if_changed(&dest, &std::fs::read(entry.path()).unwrap());
        }
        keep.push(entry.file_name());
    }
    for entry in std::fs::read_dir(to).unwrap() {
        let entry = entry.unwrap();
        if !keep.contains(&entry.file_name()) {
            let p = entry.path();
            if p.is_dir() {
                std::fs::remove_dir_all(p).unwrap();
            } else {
                std::fs::remove_file(p).unwrap();
            }
        }
    }
}

/// The four SDK crates as `cargo package` ships them, unpacked.
pub struct PackagedSdk {
    /// `name-version` directory of each crate, by name.
    crates: BTreeMap<String, PathBuf>,
}

impl PackagedSdk {
    pub fn dir(&self, name: &str) -> &Path {
        &self.crates[name]
    }

    /// A `[patch.crates-io]` table resolving the SDK crates to the packaged ones, and
    /// `windtunnel-sdk` itself to `sdk`.
    pub fn patch(&self, sdk: &Path) -> String {
        let path = |p: &Path| toml_string(&p.display().to_string());
        format!(
            "\n[patch.crates-io]\nwindtunnel-sdk = {{ path = {} }}\nwindtunnel-sdk-macros = {{ path = {} }}\nwindtunnel-abi = {{ path = {} }}\nwindtunnel-model = {{ path = {} }}\n",
            path(sdk),
            path(self.dir("windtunnel-sdk-macros")),
            path(self.dir("windtunnel-abi")),
            path(self.dir("windtunnel-model")),
        )
    }
}

fn toml_string(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// Packages the four SDK crates with `cargo package` and unpacks them, once per process.
pub fn packaged_sdk() -> &'static PackagedSdk {
    static SDK: OnceLock<PackagedSdk> = OnceLock::new();
    SDK.get_or_init(|| {
        registry_cache_filled();
        let out = cargo()
            .args(["package", "--no-verify", "--offline", "--allow-dirty", "-q"])
            .args([
                "-p",
                "windtunnel-abi",
                "-p",
                "windtunnel-model",
                "-p",
                "windtunnel-sdk-macros",
                "-p",
                "windtunnel-sdk",
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "cargo package failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let staging = tempfile::tempdir().unwrap();
        let dest = profile_dir().join("packaged-sdk");
        let mut crates = BTreeMap::new();
        for (name, version) in [
            ("windtunnel-abi", "1.0.0"),
            ("windtunnel-model", "1.0.0"),
            ("windtunnel-sdk-macros", windtunnel_sdk::SDK_VERSION),
            ("windtunnel-sdk", windtunnel_sdk::SDK_VERSION),
        ] {
            let file = target_dir()
                .join("package")
                .join(format!("{name}-{version}.crate"));
            let status = std::process::Command::new("tar")
                .arg("-xzf")
                .arg(&file)
                .arg("-C")
                .arg(staging.path())
                .status()
                .unwrap();
            assert!(status.success(), "cannot unpack {}", file.display());
            let unpacked = format!("{name}-{version}");
            sync_tree(&staging.path().join(&unpacked), &dest.join(&unpacked));
            crates.insert(name.to_owned(), dest.join(unpacked));
        }
        PackagedSdk { crates }
    })
}

/// Runs cargo in the hook crate at `dir`, in the test profile, offline, with this
/// workspace's lock file (so nothing is resolved anew) and target directory (so only the
/// SDK crates and the hook compile); `patch` is appended to its manifest first, once.
/// Returns cargo's output; fails the test when cargo fails.
pub fn cargo_in_hook_crate(dir: &Path, patch: &str, args: &[&str]) -> std::process::Output {
    registry_cache_filled();
    let manifest = dir.join("Cargo.toml");
    let text = std::fs::read_to_string(&manifest).unwrap();
    if !text.contains("[patch.crates-io]") {
        write_if_changed(&manifest, (text + patch).as_bytes());
    }
    write_if_changed(
        &dir.join("Cargo.lock"),
        &std::fs::read(workspace().join("Cargo.lock")).unwrap(),
    );
    let mut cmd = cargo();
    cmd.current_dir(dir).args(args).arg("--offline");
    if matches!(args.first(), Some(&"build" | &"test")) {
        cmd.arg("--profile").arg(cargo_profile());
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "cargo {args:?} in {} failed:\n{}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Builds the hook crate at `dir` (see [`cargo_in_hook_crate`]) and returns its library.
pub fn build_hook_crate(dir: &Path, package: &str, patch: &str) -> PathBuf {
    cargo_in_hook_crate(dir, patch, &["build", "-q"]);
    profile_dir().join(format!("lib{}.so", package.replace('-', "_")))
}

/// The reader plugin (`tests/compat/reader`), built as package `package` against `sdk`.
fn build_reader(package: &str, sdk: &Path) -> PathBuf {
    let dir = profile_dir().join("compat").join(package);
    let src = workspace().join("tests/compat/reader");
    sync_tree(&src.join("src"), &dir.join("src"));
    let manifest = std::fs::read_to_string(src.join("Cargo.toml"))
        .unwrap()
        .replace("name = \"compat_reader\"", &format!("name = \"{package}\""))
        + "\n[workspace]\n"
        + &packaged_sdk().patch(sdk);
    write_if_changed(&dir.join("Cargo.toml"), manifest.as_bytes());
    build_hook_crate(&dir, package, "")
}

const FROZEN: &str = "compat_reader_v1_0";
const CURRENT: &str = "compat_reader_current";

/// Both readers, built once per process: against the frozen 1.0.1 SDK and against the
/// packaged current SDK.
fn readers() -> &'static [(String, PathBuf); 2] {
    static READERS: OnceLock<[(String, PathBuf); 2]> = OnceLock::new();
    READERS.get_or_init(|| {
        [
            (
                FROZEN.to_owned(),
                build_reader(FROZEN, &workspace().join("tests/compat/sdk-1.0.1")),
            ),
            (
                CURRENT.to_owned(),
                build_reader(CURRENT, packaged_sdk().dir("windtunnel-sdk")),
            ),
        ]
    })
}

/// A private plugin directory in `root` holding both readers.
fn reader_dir(root: &Path) -> PathBuf {
    let dir = plugin_dir(root, &[]);
    for (name, lib) in readers() {
        let dest = dir.join(format!("lib{name}.so"));
        std::fs::copy(lib, &dest).unwrap();
        set_mode(&dest, 0o755);
    }
    dir
}

/// What both readers emitted during one `wt run` of the demo pack (one run per scenario).
fn todays_reports() -> &'static Vec<Value> {
    static REPORTS: OnceLock<Vec<Value>> = OnceLock::new();
    REPORTS.get_or_init(|| {
        let tmp = tempfile::tempdir().unwrap();
        let dir = reader_dir(tmp.path());
        let out = tmp.path().join("out");
        let r = run(wt(tmp.path())
            .args(["run", "--runs", "1", "--hook", FROZEN, "--hook", CURRENT])
            .arg("--plugin-dir")
            .arg(&dir)
            .arg("--out")
            .arg(&out));
        assert_eq!(r.code, 0, "{r}");
        assert!(
            !r.stderr.contains("hook:"),
            "no hook warned or failed:\n{r}"
        );
        let mut reports = Vec::new();
        for (name, bytes) in files(&out) {
            if !name.contains(".compat_reader_") {
                continue;
            }
            let report: Value = serde_json::from_slice(&bytes).unwrap();
            match report["turns"].as_array() {
                // The turn points' reports, emitted at `on_run_end`.
                Some(turns) => reports.extend(turns.iter().cloned()),
                None => reports.push(report),
            }
        }
        reports
    })
}

/// The members `wt` passes at each point (docs/hooks.md, `windtunnel_sdk::member`).
fn expected_members(point: &str) -> &'static [&'static str] {
    match point {
        "on_provisioned" => &["scenario", "agent"],
        "on_run_start" => &["scenario", "agent", "run_id", "session_id"],
        "on_run_scored" | "on_run_end" => &[
            "scenario",
            "agent",
            "run_id",
            "session_id",
            "trace",
            "score",
        ],
        "on_scenario_end" => &["scenario", "agent", "aggregate"],
        "on_pack_end" => &["aggregates"],
        "turn_begin" => &["run_id", "session_id", "turn_call"],
        "turn_finish" => &["run_id", "session_id", "turn_call", "turn_result"],
        other => panic!("unexpected point {other}"),
    }
}

#[test]
fn plugins_built_against_sdk_1_0_and_the_packaged_sdk_read_every_member_under_this_wt() {
    let reports = todays_reports();
    for hook in [FROZEN, CURRENT] {
        let mine: Vec<&Value> = reports.iter().filter(|r| r["hook"] == hook).collect();
        let mut points: BTreeMap<String, usize> = BTreeMap::new();
        for r in &mine {
            let point = r["point"].as_str().unwrap();
            *points.entry(point.to_owned()).or_default() += 1;
            let members = r["members"].as_object().unwrap();
            let mut present: Vec<&str> = members.keys().map(String::as_str).collect();
            present.sort_unstable();
            let mut want = expected_members(point).to_vec();
            want.sort_unstable();
            assert_eq!(present, want, "{hook} at {point}");
            for (name, m) in members {
                assert_eq!(
                    m["typed"], m["raw"],
                    "{hook} at {point}: member `{name}` did not read back as sent"
                );
            }
        }
        // The demo pack: three scenarios, one run each, four turns in all.
        let counts: Vec<(&str, usize)> = points.iter().map(|(p, n)| (p.as_str(), *n)).collect();
        assert_eq!(
            counts,
            [
                ("on_pack_end", 1),
                ("on_provisioned", 3),
                ("on_run_end", 3),
                ("on_run_scored", 3),
                ("on_run_start", 3),
                ("on_scenario_end", 3),
                ("turn_begin", 4),
                ("turn_finish", 4),
            ],
            "{hook}"
        );
    }

    // `wt hooks list` tells the two builds apart by the SDK they were built against.
    let tmp = tempfile::tempdir().unwrap();
    let dir = reader_dir(tmp.path());
    let r = run(wt(tmp.path())
        .args(["hooks", "list", "--plugin-dir"])
        .arg(&dir));
    assert_eq!(r.code, 0, "{r}");
    for (hook, sdk) in [(FROZEN, "1.0.1"), (CURRENT, windtunnel_sdk::SDK_VERSION)] {
        let row = r.stdout.lines().find(|l| l.starts_with(hook)).unwrap();
        assert!(
            row.contains(&format!(" {sdk} ")) && row.ends_with("ok"),
            "{row}"
        );
    }
}

#[test]
fn a_plugin_built_against_sdk_1_0_reads_an_agent_config_with_fields_1_0_never_knew() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = reader_dir(tmp.path());
    // An `http` service (answering every request) whose config carries fields SDK 1.0
    // never knew.
    let service = crate::harness::TestServer::start(|req| match req.url.as_str() {
        "/inject" => (200, r#"{"reply": "Order 1234 has shipped."}"#.into()),
        _ => (200, "{}".into()),
    });
    let agent = tmp.path().join("agent.toml");
    std::fs::write(
        &agent,
        format!(
            "label = \"newer\"\nruntime = \"http\"\nendpoint = \"{}\"\nmcp = false\nmax_response_bytes = 1048576\nmax_sessions = 2\nrequests_per_minute = 6000\n",
            service.base
        ),
    )
    .unwrap();
    let pack = crate::harness::write_pack(
        tmp.path(),
        &[(
            "status.toml",
            "id = \"status\"\nturns = [\"Where is order 1234?\"]\n[expect.outcome]\nreply_contains = [\"shipped\"]\n",
        )],
    );
    let out = tmp.path().join("out");
    let r = run(wt(tmp.path())
        .args(["run", "--runs", "1", "--hook", FROZEN])
        .args(["--hook", CURRENT, "--agent"])
        .arg(&agent)
        .arg("--pack")
        .arg(&pack)
        .arg("--plugin-dir")
        .arg(&dir)
        .arg("--out")
        .arg(&out));
    assert_eq!(r.code, 0, "{r}");
    assert!(!r.stderr.contains("hook:"), "a reader failed:\n{r}");
    let mut seen = 0;
    for (name, bytes) in files(&out) {
        if !name.contains(".compat_reader_") {
            continue;
        }
        let report: Value = serde_json::from_slice(&bytes).unwrap();
        let Some(agent) = report["members"].get("agent") else {
            continue;
        };
        seen += 1;
        assert_eq!(agent["typed"]["label"], "newer", "{name}: {agent}");
        assert_eq!(agent["typed"], agent["raw"], "{name}");
        let newer = agent["raw"].get("max_sessions").is_some();
        // 1.0's reader gets 1.0's shape; the current one gets every field.
        assert_eq!(newer, report["hook"] == CURRENT, "{name}: {agent}");
    }
    assert!(seen >= 2, "no reader reported the agent");
}

/// Members that are maps (a key → a value of one type), not structs: a newer `wt` adds
/// entries of that type to them, not fields.
const MAPS: [&str; 2] = ["settings", "layer_failures"];

/// Adds an unknown field to every JSON object that is a struct, at any depth.
fn with_unknown_fields(v: &mut Value) {
    match v {
        Value::Object(map) => {
            for (key, child) in map.iter_mut() {
                match child {
                    Value::Object(entries) if MAPS.contains(&key.as_str()) => {
                        entries.values_mut().for_each(with_unknown_fields);
                    }
                    _ => with_unknown_fields(child),
                }
            }
            map.insert(
                "x_added_by_a_newer_wt".into(),
                json!({"nested": [1, {"deeper": true}]}),
            );
        }
        Value::Array(items) => items.iter_mut().for_each(with_unknown_fields),
        _ => {}
    }
}

fn without_unknown_fields(v: &Value) -> Value {
    match v {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, _)| *k != "x_added_by_a_newer_wt")
                .map(|(k, v)| (k.clone(), without_unknown_fields(v)))
                .collect::<Map<_, _>>(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_unknown_fields).collect()),
        other => other.clone(),
    }
}

/// Replaces every enum value in `member` by a variant no SDK knows. Returns the member as
/// the SDK must read it: the unknown variants as `Unknown`, everything else unchanged.
fn with_unknown_variants(name: &str, member: &mut Value) -> Value {
    let mut expected = member.clone();
    let tools = member["tools"].as_array().map_or(0, Vec::len);
    let mut swap = |path: &[&str], unknown: Value, read_as: Value| {
        let (Some(m), Some(e)) = (pointer_mut(member, path), pointer_mut(&mut expected, path))
        else {
            panic!("{name} has no {path:?}")
        };
        *m = unknown;
        *e = read_as;
    };
    match name {
        "score" => swap(&["verdict"], json!("PARTIAL"), json!("UNKNOWN")),
        "turn_call" => swap(
            &["cause"],
            json!({"kind": "replay", "of": "run-0"}),
            json!({"kind": "unknown"}),
        ),
        "turn_result" => {
            swap(&["outcome"], json!("Cancelled"), json!("Unknown"));
            swap(
                &["call", "cause"],
                json!({"kind": "replay", "of": "run-0"}),
                json!({"kind": "unknown"}),
            );
        }
        "scenario" => {
            assert!(tools > 0, "the demo scenarios declare tools");
            for i in 0..tools {
                let i = i.to_string();
                swap(
                    &["tools", &i, "effect"],
                    json!({"kind": "teleport", "path": "orders", "speed": 9}),
                    json!({"kind": "unknown"}),
                );
            }
        }
        _ => {}
    }
    expected
}

fn pointer_mut<'v>(v: &'v mut Value, path: &[&str]) -> Option<&'v mut Value> {
    path.iter().try_fold(v, |v, key| match v {
        Value::Array(items) => items.get_mut(key.parse::<usize>().ok()?),
        other => other.get_mut(*key),
    })
}

/// A host serving the members of the point being called, with what a newer `wt` would add,
/// and collecting what the hook emits.
#[derive(Default)]
struct NewerHost {
    members: Mutex<BTreeMap<String, String>>,
    emitted: Mutex<Vec<Value>>,
    warnings: Mutex<Vec<String>>,
}

impl HostServices for NewerHost {
    fn member(&self, name: &str) -> Option<String> {
        self.members.lock().unwrap().get(name).cloned()
    }

    fn call(&self, op: &str, arg: &str) -> Result<String, String> {
        match op {
            "emit_artifact" => {
                let v: Value = serde_json::from_str(arg).map_err(|e| e.to_string())?;
                self.emitted.lock().unwrap().push(v["payload"].clone());
                Ok("null".into())
            }
            "warn" => {
                self.warnings.lock().unwrap().push(arg.to_owned());
                Ok("null".into())
            }
            other => Err(format!("{other} is not offered here")),
        }
    }
}

#[test]
fn the_packaged_sdk_reads_members_with_unknown_fields_and_variants_from_a_newer_wt() {
    // Real member JSON, as today's `wt` sent it to the current reader at each point.
    let mut seen = BTreeMap::new();
    for r in todays_reports().iter().filter(|r| r["hook"] == CURRENT) {
        seen.entry(r["point"].as_str().unwrap().to_owned())
            .or_insert_with(|| r["members"].clone());
    }
    let tmp = tempfile::tempdir().unwrap();
    let registry = Registry::discover(&[reader_dir(tmp.path())]);
    let hook = registry.activate(&[CURRENT.to_owned()]).unwrap().remove(0);
    let host = NewerHost::default();
    let mut expected = BTreeMap::new();
    // One run, in the order `wt` calls the points.
    for p in [
        point::ON_PROVISIONED,
        point::ON_RUN_START,
        point::TURN_BEGIN,
        point::TURN_FINISH,
        point::ON_RUN_SCORED,
        point::ON_RUN_END,
        point::ON_SCENARIO_END,
        point::ON_PACK_END,
    ] {
        let name = point::name(p);
        let at_point = seen
            .get(name)
            .unwrap_or_else(|| panic!("no report at {name}; saw {:?}", seen.keys()));
        let mut members = BTreeMap::new();
        let mut want = BTreeMap::new();
        for (member, m) in at_point.as_object().unwrap() {
            let mut raw = m["raw"].clone();
            want.insert(member.clone(), with_unknown_variants(member, &mut raw));
            with_unknown_fields(&mut raw);
            members.insert(member.clone(), raw.to_string());
        }
        expected.insert(name, want);
        *host.members.lock().unwrap() = members;
        hook.call(p, &host)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    assert_eq!(*host.warnings.lock().unwrap(), Vec::<String>::new());

    let mut reports = Vec::new();
    for payload in host.emitted.lock().unwrap().iter() {
        match payload["turns"].as_array() {
            Some(turns) => reports.extend(turns.iter().cloned()),
            None => reports.push(payload.clone()),
        }
    }
    let points: Vec<&str> = reports
        .iter()
        .map(|r| r["point"].as_str().unwrap())
        .collect();
    assert_eq!(
        points.len(),
        expected.len(),
        "one report per point: {points:?}"
    );
    let mut unknown_variants = 0;
    for report in &reports {
        let name = report["point"].as_str().unwrap();
        for (member, want) in &expected[name] {
            let typed = &report["members"][member]["typed"];
            assert!(
                !typed.is_null(),
                "{name}: `{member}` with unknown fields or variants read as None"
            );
            assert_eq!(
                without_unknown_fields(typed),
                without_unknown_fields(want),
                "{name}: `{member}` lost or changed a known value"
            );
            unknown_variants += typed.to_string().matches("nknown").count();
        }
    }
    // verdict ×2, outcome, cause ×3, and at least one tool effect per scenario member.
    assert!(
        unknown_variants >= 6,
        "unknown variants read: {unknown_variants}"
    );
}

#[test]
fn a_member_that_cannot_be_read_is_a_warning_naming_it_never_a_silent_none() {
    let tmp = tempfile::tempdir().unwrap();
    let registry = Registry::discover(&[reader_dir(tmp.path())]);
    let hook = registry.activate(&[CURRENT.to_owned()]).unwrap().remove(0);
    let host = NewerHost::default();
    *host.members.lock().unwrap() = BTreeMap::from([
        ("run_id".to_owned(), "\"run-1\"".to_owned()),
        ("score".to_owned(), r#"{"run_id": 7}"#.to_owned()),
    ]);
    // The reader uses the plain accessors of the 1.0 API: `ctx.score()` is `None`, and
    // the SDK says why through the host's warning channel.
    hook.call(point::ON_RUN_END, &host).unwrap();
    let warnings = host.warnings.lock().unwrap();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].starts_with(
            "cannot read context member `score`: invalid type: integer `7`, expected a string"
        ),
        "{warnings:?}"
    );
    let emitted = host.emitted.lock().unwrap();
    let report = emitted.iter().find(|r| r["point"] == "on_run_end").unwrap();
    assert!(report["members"]["score"]["typed"].is_null());
    assert_eq!(report["members"]["run_id"]["typed"], "run-1");
}

#[test]
fn a_plugin_built_against_a_newer_sdk_minor_is_refused() {
    let current = semver::Version::parse(windtunnel_sdk::SDK_VERSION).unwrap();
    let newer = semver::Version::new(current.major, current.minor + 1, 0);
    let (from, to) = (format!("sdk {current}\n"), format!("sdk {newer}\n"));
    assert_eq!(from.len(), to.len(), "the patch keeps the record's length");

    let tmp = tempfile::tempdir().unwrap();
    let dir = plugin_dir(tmp.path(), &[]);
    let lib = dir.join("libcompat_reader_newer.so");
    let mut bytes = std::fs::read(&readers()[1].1).unwrap();
    let at = bytes
        .windows(from.len())
        .position(|w| w == from.as_bytes())
        .expect("the metadata record names the SDK version");
    bytes[at..at + to.len()].copy_from_slice(to.as_bytes());
    std::fs::write(&lib, bytes).unwrap();
    set_mode(&lib, 0o755);

    let r = run(wt(tmp.path()).args(["hooks", "check"]).arg(&lib));
    assert_eq!(r.code, 2, "{r}");
    let want = format!(
        "built against windtunnel-sdk {newer}; this wt accepts >={}.0.0, <{newer}",
        current.major
    );
    assert!(r.stdout.contains(&want), "{want:?} in\n{r}");
}

#[test]
fn input_files_stay_strict_though_the_data_model_is_tolerant() {
    let tmp = tempfile::tempdir().unwrap();
    let scenario = "id = \"s\"\nturns = [\"hi\"]\nworld = { orders = {} }\n\n[[tools]]\nname = \"lookup\"\neffect = { kind = \"read\", path = \"orders\", key_ar = \"id\" }\n";
    let pack = crate::harness::write_pack(tmp.path(), &[("s.toml", scenario)]);
    let r = run(wt(tmp.path()).arg("run").arg("--pack").arg(&pack));
    assert_eq!(r.code, 2, "{r}");
    assert!(
        r.stderr.contains("s.toml: line 7") && r.stderr.contains("unknown field `key_ar`"),
        "{r}"
    );
    let agent = tmp.path().join("agent.toml");
    std::fs::write(
        &agent,
        "label = \"a\"\nruntime = \"demo\"\n[sampling]\ntemprature = 0.2\n",
    )
    .unwrap();
    let r = run(wt(tmp.path()).arg("run").arg("--agent").arg(&agent));
    assert_eq!(r.code, 2, "{r}");
    assert!(
        r.stderr.contains("line 4") && r.stderr.contains("unknown field `temprature`"),
        "{r}"
    );
}
