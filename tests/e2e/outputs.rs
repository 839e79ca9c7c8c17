//! Snapshots of the text people read: the terminal's progress and summary of a sweep, the
//! one-line errors of invocations that cannot work, and `wt report`'s table and Markdown.
//! Pinned sweeps (`--seed`, `WT_FIXED_CLOCK`) make ids, stems and latencies stable; the only
//! redaction is the test's own temporary directory. A change to any of these outputs shows up
//! as a snapshot diff to review (`INSTA_UPDATE=always` rewrites them, `cargo insta review`
//! where cargo-insta is installed).

use std::path::Path;

use crate::harness::*;

/// Settings of every snapshot here: the test's temporary directory reads `[TMP]`.
fn settings(dir: &Path) -> insta::Settings {
    let mut s = insta::Settings::clone_current();
    s.set_snapshot_path("snapshots");
    s.set_prepend_module_to_snapshot(false);
    let tmp = regex_escape(&dir.display().to_string());
    s.add_filter(&tmp, "[TMP]");
    s
}

fn regex_escape(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '/' || c == '_' || c == '-' {
                c.to_string()
            } else {
                format!("\\{c}")
            }
        })
        .collect()
}

/// A pinned sweep of the demo pack on a faulty demo agent, one run at a time (the progress
/// lines' order then does not depend on lanes).
fn pinned_sweep(dir: &Path) -> Run {
    Wt::new(dir)
        .args([
            "run",
            "--seed",
            "1",
            "--jobs",
            "1",
            "--agent",
            "demo-forbidden-tool",
        ])
        .args(["--out", "runs"])
        .env("WT_FIXED_CLOCK", CLOCK)
        .run()
}

#[test]
fn a_sweep_s_terminal_progress_and_summary() {
    let dir = tmp();
    let r = pinned_sweep(dir.path());
    assert_eq!(r.code, 1, "{r}");
    settings(dir.path()).bind(|| {
        insta::assert_snapshot!("run_stderr", r.stderr);
        insta::assert_snapshot!("run_stdout", r.stdout);
    });
}

#[test]
fn wt_report_s_table_and_markdown() {
    let dir = tmp();
    assert_eq!(pinned_sweep(dir.path()).code, 1);
    let table = Wt::new(dir.path()).args(["report", "runs"]).run();
    assert_eq!(table.code, 0, "{table}");
    let markdown = Wt::new(dir.path())
        .args(["report", "runs", "--format", "markdown"])
        .run();
    assert_eq!(markdown.code, 0, "{markdown}");
    settings(dir.path()).bind(|| {
        insta::assert_snapshot!("report_table", table.stdout);
        insta::assert_snapshot!("report_markdown", markdown.stdout);
    });
}

#[test]
fn invocations_that_cannot_work_say_so_in_one_line() {
    let dir = tmp();
    let bad_pack = write_pack(dir.path(), &[("a.toml", "id = \"a\"\nturns = 3\n")]);
    let typo_agent = agent_file(
        dir.path(),
        "typo.toml",
        "label = \"x\"\nruntime = \"openai\"\nmodel = \"m\"\nendpoint = \"http://127.0.0.1:9/v1\"\ntemprature = 0.2\n",
    );
    let cases: Vec<(&str, Vec<String>)> = vec![
        (
            "unknown hook",
            vec!["run".into(), "--hook".into(), "no_such_hook".into()],
        ),
        (
            "unknown agent",
            vec!["run".into(), "--agent".into(), "no-such-agent".into()],
        ),
        (
            "malformed pack",
            vec![
                "run".into(),
                "--pack".into(),
                bad_pack.display().to_string(),
            ],
        ),
        (
            "agent config typo",
            vec![
                "run".into(),
                "--agent".into(),
                typo_agent.display().to_string(),
            ],
        ),
        (
            "bad shard",
            vec!["run".into(), "--shard".into(), "5/4".into()],
        ),
        ("no runs directory", vec!["report".into(), "nowhere".into()]),
    ];
    let mut said = String::new();
    for (what, args) in &cases {
        let r = Wt::new(dir.path()).args(args).run();
        assert_eq!(r.code, 2, "{what}: {r}");
        // clap adds its pointer to `--help` under a usage error.
        let lines = r
            .stderr
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.starts_with("For more information"))
            .count();
        assert_eq!(lines, 1, "{what}: {r}");
        assert!(r.stdout.is_empty(), "{what}: {r}");
        said.push_str(&format!(
            "{what}: exit {}\n{}\n",
            r.code,
            r.stderr.trim_end()
        ));
    }
    settings(dir.path()).bind(|| insta::assert_snapshot!("error_lines", said));
}
