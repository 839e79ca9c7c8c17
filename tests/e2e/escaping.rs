//! Text from outside is escaped in every output a person reads: terminal, Markdown, HTML,
//! JUnit, control and bidi characters included.

use crate::harness::*;

#[test]
fn outside_text_is_escaped_in_every_output_a_person_reads() {
    let dir = tmp();
    // A plugin file whose name clears the screen and forges a row.
    let plugins = plugin_dir(dir.path(), &[]);
    std::fs::write(plugins.join("lib\u{1b}[2J\nFAKE.so"), b"not an ELF").unwrap();
    let r = Wt::new(dir.path())
        .args(["hooks", "list", "--all", "--plugin-dir"])
        .arg(&plugins)
        .run();
    assert!(
        !r.stdout.contains('\u{1b}') && !r.stderr.contains('\u{1b}'),
        "{r}"
    );
    assert!(
        !r.stdout.lines().any(|l| l.starts_with("FAKE")),
        "a forged row: {r}"
    );
    assert!(r.stdout.contains("\\e[2J\\nFAKE.so"), "{r}");

    // An agent label that reverses what follows it, and one that is Markdown.
    let label = "evil\u{202e}38 snur **boss** [x](http://e.invalid)";
    let agent = dir.path().join("agent.toml");
    std::fs::write(
        &agent,
        format!(
            "label = {}\nruntime = \"demo\"\n",
            serde_json::to_string(label).unwrap()
        ),
    )
    .unwrap();
    let r = Wt::new(dir.path())
        .args(["run", "--runs", "4", "--filter", "order-status", "--agent"])
        .arg(&agent)
        .run();
    assert_eq!(r.code, 0, "{r}");
    assert!(!r.stderr.contains('\u{202e}'), "{r}");
    let outputs = [
        vec!["report", "runs"],
        vec!["report", "runs", "--format", "markdown"],
        vec!["report", "runs", "--format", "html"],
        vec!["report", "runs", "--format", "junit"],
        vec!["compare", "runs", "runs"],
        vec!["compare", "runs", "runs", "--format", "markdown"],
        vec!["compare", "runs", "runs", "--format", "html"],
    ];
    for args in outputs {
        let r = Wt::new(dir.path()).args(&args).run();
        assert_eq!(r.code, 0, "{args:?}: {r}");
        assert!(
            !r.stdout.contains('\u{202e}') && !r.stderr.contains('\u{202e}'),
            "{args:?}: a bidi override got through: {r}"
        );
    }
    let md = Wt::new(dir.path())
        .args(["compare", "runs", "runs", "--format", "markdown"])
        .run();
    assert!(
        md.stdout
            .contains("` evil\\u{202e}38 snur **boss** [x](http://e.invalid) `"),
        "the label is not a code span: {md}"
    );

    // An agent's reply quoted in a failure reaches `wt run --junit` too.
    let pack = write_pack(
        dir.path(),
        &[(
            "yes.toml",
            "id = \"yes\"\nturns = [\"hi\"]\n[expect.outcome]\nreply_contains = [\"yes\"]\n",
        )],
    );
    let liar = crate::harness::sh_agent(
        dir.path(),
        "liar",
        r#"read -r line; echo '{"type": "reply", "text": "no \u202e38 snur"}'; cat >/dev/null"#,
        &[],
        "mcp = false",
    );
    let r = Wt::new(dir.path())
        .args(["run", "--out", "liar", "--junit", "liar.xml", "--pack"])
        .arg(&pack)
        .arg("--agent")
        .arg(&liar)
        .run();
    assert_eq!(r.code, 1, "{r}");
    let junit = std::fs::read_to_string(dir.path().join("liar.xml")).unwrap();
    assert!(junit.contains("38 snur"), "the reply is quoted: {junit}");
    assert!(
        !junit.contains('\u{202e}'),
        "a bidi override in --junit: {junit}"
    );
    for args in [
        vec!["report", "liar", "--format", "junit"],
        vec!["report", "liar", "--format", "html"],
        vec!["triage", "liar"],
    ] {
        let r = Wt::new(dir.path()).args(&args).run();
        assert!(
            r.stdout.contains("38 snur"),
            "{args:?} quotes the reply: {r}"
        );
        assert!(
            !r.stdout.contains('\u{202e}') && !r.stderr.contains('\u{202e}'),
            "{args:?}: {r}"
        );
    }
}

#[test]
fn control_characters_in_hook_text_cannot_forge_terminal_lines() {
    let dir = tmp();
    let plugins = plugin_dir(dir.path(), &["wt_test_hostile"]);
    let r = Wt::new(dir.path())
        .args([
            "run",
            "--filter",
            "order-status",
            "--hook",
            "forger",
            "--plugin-dir",
        ])
        .arg(&plugins)
        .run();
    assert_eq!(r.code, 0, "{r}");
    assert!(
        !r.stderr.lines().any(|l| l.starts_with("warning: forged")),
        "a forged line: {r}"
    );
    assert!(
        !r.stderr.contains('\u{1b}'),
        "an escape reached the terminal: {r}"
    );
    assert!(
        r.stderr
            .contains("line one\\nwarning: forged by the hook \\e[31mred\\e[0m"),
        "{r}"
    );
}
