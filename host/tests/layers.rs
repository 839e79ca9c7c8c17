//! The library's top-level modules form layers that read as the pipeline, and no module
//! imports one above it: no import cycles. This test reads `host/src` and fails naming every
//! import that goes up (or sideways into a module of the same layer), and every module not
//! placed in a layer. Inside each folder the files form no cycle either: a folder reads as a
//! small pipeline of its own (the second test names every cycle it finds).
//!
//! Test code (`#[cfg(test)] mod tests { … }`, `tests.rs`) and comments are not imports.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Bottom to top. A module may import modules of lower layers only.
const LAYERS: &[&[&str]] = &[
    // What every way out redacts with.
    &["secrets"],
    // Foundations.
    &[
        "clock",
        "deadlines",
        "events",
        "exit",
        "limits",
        "procs",
        "sandbox",
        "strict",
        "term",
    ],
    // Stopping: every wait above ends at its cut.
    &["interrupt"],
    // The fixture world, and the world servers it forwards to.
    &["world"],
    // The pack, scoring.
    &["pack", "score"],
    // Files on disk.
    &["store"],
    // The agent's side (runtimes with the world's MCP door), hooks, the reading side.
    &["runtime", "hooks", "report"],
    // Model-graded checks, on the harness's own models.
    &["judge"],
    // The run loop.
    &["runner", "view"],
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
    heads_after(code, "crate::")
}

/// The first segment of every path that follows `prefix` in `code` (each path of a group).
fn heads_after(code: &str, prefix: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = code;
    while let Some(at) = rest.find(prefix) {
        let word_start = at == 0
            || !rest[..at]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':');
        rest = &rest[at + prefix.len()..];
        if !word_start {
            continue;
        }
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

/// The files (and subfolders) of one folder, by module name, each with the sibling modules it
/// imports: through `super::`, through `crate::<folder>::`, or through a name the folder's
/// `mod.rs` re-exports from a sibling.
fn sibling_imports(src: &Path, dir: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut nodes: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_str().unwrap().to_owned();
        if path.is_dir() {
            let mut files = Vec::new();
            rs_files(&path, &mut files);
            nodes.insert(name, files);
        } else if path.extension().is_some_and(|e| e == "rs") && name != "mod" && name != "tests" {
            nodes.insert(name, vec![path]);
        }
    }
    // Names `mod.rs` re-exports from a sibling (`pub use sibling::{A, b::C};`) lead to it.
    let mut reexported: BTreeMap<String, String> = BTreeMap::new();
    if let Ok(text) = std::fs::read_to_string(dir.join("mod.rs")) {
        let text = code(&text);
        let mut rest = text.as_str();
        while let Some(at) = rest.find("use ") {
            rest = &rest[at + "use ".len()..];
            let end = rest.find(';').unwrap_or(rest.len());
            let path = rest[..end].trim().trim_start_matches("self::");
            let head = ident_at(path);
            if nodes.contains_key(head) {
                for word in path[head.len()..]
                    .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .filter(|w| !w.is_empty())
                {
                    reexported.insert(word.to_owned(), head.to_owned());
                }
            }
        }
    }
    let module_path = dir
        .strip_prefix(src)
        .unwrap()
        .to_str()
        .unwrap()
        .replace('/', "::");
    let mut edges = BTreeMap::new();
    for (name, files) in &nodes {
        let mut to = BTreeSet::new();
        for file in files {
            if file.file_name().is_some_and(|n| n == "tests.rs") {
                continue;
            }
            let text = code(&std::fs::read_to_string(file).unwrap());
            // A file directly in the folder (or a subfolder's mod.rs) names its siblings
            // with one `super::`; a file deeper in a subfolder with two.
            let direct = file.parent() == Some(dir)
                || (file.parent().and_then(Path::parent) == Some(dir)
                    && file.file_name().is_some_and(|n| n == "mod.rs"));
            let up = if direct { "super::" } else { "super::super::" };
            let mut heads = heads_after(&text, up);
            heads.extend(heads_after(&text, &format!("crate::{module_path}::")));
            for head in heads {
                let target = if nodes.contains_key(&head) {
                    Some(head)
                } else {
                    reexported.get(&head).cloned()
                };
                if let Some(target) = target.filter(|t| t != name) {
                    to.insert(target);
                }
            }
        }
        edges.insert(name.clone(), to);
    }
    edges
}

/// Every module of `edges` from which `from` can be reached, `from` itself excluded unless
/// it lies on a cycle.
fn reaching(edges: &BTreeMap<String, BTreeSet<String>>, from: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut todo: Vec<&str> = edges[from].iter().map(String::as_str).collect();
    while let Some(m) = todo.pop() {
        if seen.insert(m.to_owned()) {
            todo.extend(edges.get(m).into_iter().flatten().map(String::as_str));
        }
    }
    seen
}

fn dirs(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.push(path.clone());
            dirs(&path, out);
        }
    }
}

#[test]
fn no_folder_has_an_import_cycle_among_its_files() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut folders = Vec::new();
    dirs(&src, &mut folders);
    let mut cycles = Vec::new();
    for dir in folders {
        let edges = sibling_imports(&src, &dir);
        let mut reported = BTreeSet::new();
        for m in edges.keys() {
            let from_m = reaching(&edges, m);
            if !from_m.contains(m) || reported.contains(m) {
                continue;
            }
            // The cycle's members: what `m` reaches that also reaches `m`.
            let members: Vec<&String> = from_m
                .iter()
                .filter(|o| reaching(&edges, o).contains(m))
                .collect();
            reported.extend(members.iter().map(|s| s.to_string()));
            let imports: Vec<String> = members
                .iter()
                .map(|o| {
                    let to: Vec<&str> = edges[*o]
                        .iter()
                        .filter(|t| members.contains(t))
                        .map(String::as_str)
                        .collect();
                    format!("{o} -> {}", to.join(", "))
                })
                .collect();
            cycles.push(format!(
                "{}: {}",
                dir.strip_prefix(&src).unwrap().display(),
                imports.join("; ")
            ));
        }
    }
    assert!(
        cycles.is_empty(),
        "import cycles inside folders:\n{}",
        cycles.join("\n")
    );
}

#[test]
fn sibling_imports_follow_super_crate_paths_and_reexports() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    let folder = src.join("f");
    std::fs::create_dir_all(folder.join("sub")).unwrap();
    let write = |p: &str, t: &str| std::fs::write(folder.join(p), t).unwrap();
    write(
        "mod.rs",
        "mod a;\nmod b;\npub(crate) use b::{Thing, other::Deep};\n",
    );
    write("a.rs", "use super::Thing;\nfn f() { crate::f::c::g(); }\n");
    write(
        "b.rs",
        "// super::a::x is a comment\nuse super::{sub, a as _};\n",
    );
    write(
        "c.rs",
        "fn g() {}\n#[cfg(test)]\nmod tests {\n use super::super::a;\n}",
    );
    write("sub/mod.rs", "use super::c;\n");
    write(
        "sub/deep.rs",
        "use super::super::b;\nuse super::sibling_in_sub;\n",
    );
    let edges = sibling_imports(src, &folder);
    let show = |m: &str| edges[m].iter().cloned().collect::<Vec<_>>();
    assert_eq!(show("a"), ["b", "c"]);
    assert_eq!(show("b"), ["a", "sub"]);
    assert!(show("c").is_empty());
    assert_eq!(show("sub"), ["b", "c"]);
    assert!(reaching(&edges, "a").contains("a"));
    assert!(!reaching(&edges, "c").contains("c"));
}

/// `report`'s reading side (the one reader of runs directories, the rules it reads by, the
/// triage ladder and the statistics it counts with) imports none of the views drawn from it:
/// a view depends on the reader, never the reverse.
#[test]
fn the_reader_imports_no_view_of_it() {
    const READER: [&str; 4] = ["scan", "load", "triage", "stats"];
    const VIEWS: [&str; 8] = [
        "html",
        "table",
        "junit",
        "compare",
        "cells",
        "gate",
        "calibration",
        "plan",
    ];
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let edges = sibling_imports(&src, &src.join("report"));
    let mut files: Vec<&String> = edges.keys().collect();
    files.retain(|f| f.as_str() != "mod");
    // Every file of the folder is on one side: a new one is placed here.
    let unplaced: Vec<&&String> = files
        .iter()
        .filter(|f| !READER.contains(&f.as_str()) && !VIEWS.contains(&f.as_str()))
        .collect();
    assert!(
        unplaced.is_empty(),
        "report files on neither side: {unplaced:?}"
    );
    let wrong: Vec<String> = READER
        .iter()
        .flat_map(|r| {
            reaching(&edges, r)
                .into_iter()
                .filter(|t| VIEWS.contains(&t.as_str()))
                .map(move |t| format!("{r} reaches {t}"))
        })
        .collect();
    assert!(
        wrong.is_empty(),
        "the reader imports a view:\n{}",
        wrong.join("\n")
    );
}
