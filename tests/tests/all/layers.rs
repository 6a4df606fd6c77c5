//! The host's modules form layers: no module reaches, through the modules
//! it uses, back to itself (issue 38). Read from the `use` lines and paths
//! of the source, so that a new circle fails here, with the path that
//! closes it, rather than growing unseen. JSON reading sits in its own
//! crate (`sluice-json`), below all of them: a circle through it cannot
//! compile.
//!
//! The same holds among the modules of the CLI's `serve`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Which sibling modules each module of `dir` refers to: a file under
/// `dir/<m>/` or `dir/<m>.rs` belongs to module `m`; it refers to sibling
/// `n` by `<prefix>n` (e.g. `crate::n` for the crate's top modules), by a
/// `use <prefix>{.., n, ..}` group, or by `super::n` from a file directly
/// in `dir` (a top file of `dir`'s module). Comments and `#[cfg(test)]`
/// parts are left out: tests may reach anywhere.
fn module_graph(dir: &Path, prefix: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut modules = BTreeSet::new();
    for entry in std::fs::read_dir(dir).expect("read the source directory") {
        let path = entry.expect("directory entry").path();
        let name = path
            .file_stem()
            .expect("a name")
            .to_string_lossy()
            .into_owned();
        let is_module = path.is_dir() || path.extension().is_some_and(|e| e == "rs");
        if is_module && !["mod", "lib", "main"].contains(&name.as_str()) {
            modules.insert(name);
        }
    }
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for module in &modules {
        let mut files = Vec::new();
        collect_rust_files(&dir.join(module), &mut files);
        files.push(dir.join(format!("{module}.rs")));
        let edges = graph.entry(module.clone()).or_default();
        for file in files.iter().filter(|file| file.is_file()) {
            let source = std::fs::read_to_string(file).expect("read a source file");
            let code = without_tests_and_comments(&source);
            let is_top_file = file.parent() == Some(dir)
                || (file.parent() == Some(&dir.join(module)) && file.ends_with("mod.rs"));
            let mut mentioned = names_after(&code, prefix);
            if is_top_file && prefix != "super::" {
                // `super::x` from `dir/m.rs` or `dir/m/mod.rs` is a sibling.
                mentioned.extend(names_after(&code, "super::"));
            }
            for name in mentioned {
                if name != *module && modules.contains(&name) {
                    edges.insert(name);
                }
            }
        }
    }
    graph
}

fn collect_rust_files(dir: &Path, files: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            collect_rust_files(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") && !path.ends_with("tests.rs") {
            files.push(path);
        }
    }
}

/// The code of `source` before its first `#[cfg(test)]`, without comment
/// lines (doc links name modules without using them).
fn without_tests_and_comments(source: &str) -> String {
    let code = source.split("#[cfg(test)]").next().unwrap_or_default();
    code.lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The identifiers that follow `prefix` in `code`: `prefix name` and every
/// first name in a `prefix{a, b::c, d}` group.
fn names_after(code: &str, prefix: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let identifier = |text: &str| -> String {
        text.chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    for (at, _) in code.match_indices(prefix) {
        let rest = &code[at + prefix.len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let group = group.split('}').next().unwrap_or_default();
            let mut depth = 0;
            let mut start = 0;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        names.insert(identifier(group[start..].trim_start()));
                        start = i + 1;
                    }
                    _ => {}
                }
            }
            names.insert(identifier(group[start..].trim_start()));
        } else {
            names.insert(identifier(rest));
        }
    }
    names.remove("");
    names
}

/// A circle in `graph` (its modules, the first repeated at the end), if any.
fn find_circle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Open,
        Done,
    }
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        marks: &mut BTreeMap<String, Mark>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        match marks.get(node) {
            Some(Mark::Done) => return None,
            Some(Mark::Open) => {
                let start = path.iter().position(|n| n == node).unwrap_or_default();
                let mut circle = path[start..].to_vec();
                circle.push(node.to_string());
                return Some(circle);
            }
            None => {}
        }
        marks.insert(node.to_string(), Mark::Open);
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(circle) = visit(next, graph, marks, path) {
                return Some(circle);
            }
        }
        path.pop();
        marks.insert(node.to_string(), Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    graph
        .keys()
        .find_map(|node| visit(node, graph, &mut marks, &mut Vec::new()))
}

/// The modules in layers, lowest first: each uses only modules of the
/// layers below it.
fn layers(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    let mut placed: BTreeSet<String> = BTreeSet::new();
    let mut layers = Vec::new();
    while placed.len() < graph.len() {
        let layer: Vec<String> = graph
            .iter()
            .filter(|(node, uses)| !placed.contains(*node) && uses.is_subset(&placed))
            .map(|(node, _)| node.clone())
            .collect();
        assert!(!layer.is_empty(), "a circle remains among {graph:?}");
        placed.extend(layer.iter().cloned());
        layers.push(layer);
    }
    layers
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace")
        .to_path_buf()
}

fn assert_layered(dir: &Path, prefix: &str, expect_at_least: usize) {
    let graph = module_graph(dir, prefix);
    assert!(
        graph.len() >= expect_at_least,
        "found only {:?} under {}",
        graph.keys(),
        dir.display()
    );
    if let Some(circle) = find_circle(&graph) {
        panic!(
            "an import circle among the modules of {}: {}",
            dir.display(),
            circle.join(" -> ")
        );
    }
    for (level, layer) in layers(&graph).iter().enumerate() {
        println!("{} layer {level}: {}", dir.display(), layer.join(", "));
    }
}

#[test]
fn the_host_modules_use_each_other_without_a_circle() {
    assert_layered(&workspace().join("host/src"), "crate::", 12);
}

#[test]
fn the_serve_modules_use_each_other_without_a_circle() {
    assert_layered(&workspace().join("cli/src/serve"), "crate::serve::", 10);
}

/// The longest source file a module may have (issue 38): past it a file
/// holds more than one concept, and a newcomer scrolls instead of reading.
const MOST_LINES: usize = 800;

#[test]
fn no_source_file_of_the_host_or_the_cli_is_over_800_lines() {
    let mut long = Vec::new();
    for dir in ["host/src", "json/src", "cli/src"] {
        let mut files = Vec::new();
        collect_rust_files(&workspace().join(dir), &mut files);
        for file in files {
            let lines = std::fs::read_to_string(&file)
                .expect("read a source file")
                .lines()
                .count();
            if lines > MOST_LINES {
                long.push(format!("{} ({lines} lines)", file.display()));
            }
        }
    }
    assert!(
        long.is_empty(),
        "split these by concept: {}",
        long.join(", ")
    );
}

#[test]
fn the_checker_sees_a_circle() {
    let code = "use crate::{a::X, b};\nlet y = crate::c::f();\n// crate::d\n";
    let names = names_after(&without_tests_and_comments(code), "crate::");
    assert_eq!(
        names,
        ["a", "b", "c"].map(String::from).into_iter().collect()
    );
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("a", vec!["b"]),
        ("b", vec!["c"]),
        ("c", vec!["a"]),
        ("d", vec![]),
    ]
    .into_iter()
    .map(|(n, uses)| (n.to_string(), uses.into_iter().map(String::from).collect()))
    .collect();
    assert_eq!(
        find_circle(&graph),
        Some(["a", "b", "c", "a"].map(String::from).to_vec())
    );
}
