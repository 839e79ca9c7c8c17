//! The library's top-level modules form layers that read as the pipeline, and no module
//! imports one above it: no import cycles. This test reads `host/src` and fails naming every
//! import that goes up (or sideways into a module of the same layer), and every module not
//! placed in a layer.
//!
//! Test code (`#[cfg(test)] mod tests { … }`, `tests.rs`) and comments are not imports.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Bottom to top. A module may import modules of lower layers only.
const LAYERS: &[&[&str]] = &[
    // Foundations.
    &[
        "clock",
        "deadlines",
        "events",
        "exit",
        "limits",
        "procs",
        "secrets",
        "strict",
        "term",
    ],
    // The fixture world, and the world servers it forwards to.
    &["world"],
    // Stopping, the pack, scoring.
    &["interrupt", "pack", "score"],
    // Files on disk.
    &["store"],
    // The agent's side (runtimes with the world's MCP door), hooks, the reading side.
    &["runtime", "hooks", "report"],
    // The run loop.
    &["runner"],
    // The subcommands.
    &["cli"],
];

fn rs_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rs_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The source without comments and without a trailing `#[cfg(test)] mod tests { … }`.
fn code(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests {") {
        Some(at) => &text[..at],
        None => text,
    };
    text.lines()
        .map(|l| match l.find("//") {
            Some(at) => &l[..at],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn ident_at(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// The top-level modules a piece of code names through `crate::`.
fn imports(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // `crate::{a::x, b, c::{y, z}}`: the first segment of each path at depth 1.
            let mut depth = 1;
            let mut start = true;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    ',' if depth == 1 => start = true,
                    c if c.is_whitespace() => {}
                    _ if start && depth == 1 => {
                        out.insert(ident_at(&group[i..]).to_owned());
                        start = false;
                    }
                    _ => {}
                }
            }
        } else {
            out.insert(ident_at(rest).to_owned());
        }
    }
    out
}

#[test]
fn no_module_imports_one_above_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let layer_of: BTreeMap<&str, usize> = LAYERS
        .iter()
        .enumerate()
        .flat_map(|(i, mods)| mods.iter().map(move |m| (*m, i)))
        .collect();
    let mut files = Vec::new();
    rs_files(&src, &mut files);
    let mut wrong = Vec::new();
    let mut modules = BTreeSet::new();
    for file in files {
        let rel = file.strip_prefix(&src).unwrap();
        let top = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_str()
            .unwrap()
            .trim_end_matches(".rs")
            .to_owned();
        if top == "lib" || top == "main" || rel.file_name().is_some_and(|n| n == "tests.rs") {
            continue;
        }
        modules.insert(top.clone());
        let Some(&mine) = layer_of.get(top.as_str()) else {
            wrong.push(format!(
                "{top}: not placed in a layer (LAYERS in this test)"
            ));
            continue;
        };
        let text = std::fs::read_to_string(&file).unwrap();
        for import in imports(&code(&text)) {
            if import == top || import == "self" {
                continue;
            }
            match layer_of.get(import.as_str()) {
                Some(&theirs) if theirs < mine => {}
                Some(_) => wrong.push(format!(
                    "{}: imports `{import}`, which is not below `{top}`",
                    rel.display()
                )),
                None => {}
            }
        }
    }
    // A layer entry with no module behind it is a stale table.
    for m in layer_of.keys() {
        if !modules.contains(*m) {
            wrong.push(format!("{m}: in LAYERS but not a module of host/src"));
        }
    }
    assert!(wrong.is_empty(), "layering broken:\n{}", wrong.join("\n"));
}

#[test]
fn the_import_reader_sees_grouped_and_nested_paths() {
    let found = imports(&code(
        "use crate::{a::x, b, c::{y, z}};\n// crate::commented\nfn f() { crate::d::g(); }\n\
         #[cfg(test)]\nmod tests {\n use crate::e;\n}",
    ));
    assert_eq!(found.into_iter().collect::<Vec<_>>(), ["a", "b", "c", "d"]);
}
