//! No crate of the workspace has a module cycle: neither between two modules (files) nor between
//! two top-level folders (capabilities and the shared part they stand on). A cycle means a
//! capability cannot be read, moved or replaced on its own.
//!
//! Dependencies are read from the source as text: every `crate::a::b` and `super::x` path
//! outside comments and trailing `#[cfg(test)]` modules, resolved to the longest module it names.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

type Graph = BTreeMap<String, BTreeSet<String>>;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap().map(Result::unwrap) {
        let path = entry.path();
        if path.is_dir() {
            // `src/bin/*` are crates of their own.
            if path.file_name().is_some_and(|n| n != "bin") {
                rust_files(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `a/b.rs` → `a::b`; `a/mod.rs` → `a`; `lib.rs` → `` (the crate root).
fn module_of(src: &Path, file: &Path) -> String {
    let relative = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = relative
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts.join("::")
}

/// The module's code without comment lines and without a trailing test module.
fn code(text: &str) -> String {
    let end = text.find("#[cfg(test)]\nmod ").unwrap_or(text.len());
    text[..end]
        .lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The module paths written after each `marker` (`crate::`, `super::`): `a::b::c` for
/// `crate::a::b::c::Item`, lower-case segments only.
fn paths_after<'a>(code: &'a str, marker: &str) -> Vec<Vec<&'a str>> {
    let mut found = Vec::new();
    for (at, _) in code.match_indices(marker) {
        let before = code[..at].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
            continue;
        }
        let segments = code[at + marker.len()..]
            .split("::")
            .map(|s| {
                let end = s
                    .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
                    .unwrap_or(s.len());
                (&s[..end], end == s.len())
            })
            .scan(true, |go_on, (segment, whole)| {
                let keep = *go_on && !segment.is_empty();
                *go_on = whole;
                keep.then_some(segment)
            })
            .collect();
        found.push(segments);
    }
    found
}

/// The longest module named by `parts`, if any.
fn resolve(modules: &BTreeSet<String>, parts: &[&str]) -> Option<String> {
    (1..=parts.len())
        .rev()
        .map(|n| parts[..n].join("::"))
        .find(|candidate| modules.contains(candidate))
}

fn dependencies(src: &Path) -> Graph {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let sources: BTreeMap<String, String> = files
        .iter()
        .map(|file| {
            (
                module_of(src, file),
                code(&fs::read_to_string(file).unwrap()),
            )
        })
        .collect();
    let modules: BTreeSet<String> = sources.keys().cloned().collect();
    let mut graph = Graph::new();
    for (module, code) in &sources {
        let parent: Vec<&str> = module.split("::").filter(|s| !s.is_empty()).collect();
        let parent = &parent[..parent.len().saturating_sub(1)];
        let targets = paths_after(code, "crate::")
            .into_iter()
            .filter_map(|path| resolve(&modules, &path))
            .chain(paths_after(code, "super::").into_iter().filter_map(|path| {
                let full: Vec<&str> = parent.iter().copied().chain(path).collect();
                resolve(&modules, &full)
            }));
        let edges = graph.entry(module.clone()).or_default();
        for target in targets {
            // A module using its own parent's items is not a dependency between siblings.
            let ancestor = target.is_empty() || module.starts_with(&format!("{target}::"));
            if target != *module && !ancestor {
                edges.insert(target);
            }
        }
    }
    graph
}

/// The strongly connected components with more than one member (Tarjan).
fn cycles(graph: &Graph) -> Vec<Vec<String>> {
    struct Walk<'g> {
        graph: &'g Graph,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        found: Vec<Vec<String>>,
    }
    fn visit<'g>(walk: &mut Walk<'g>, node: &'g str) {
        let n = walk.index.len();
        walk.index.insert(node, n);
        walk.low.insert(node, n);
        walk.stack.push(node);
        for next in walk.graph.get(node).into_iter().flatten() {
            if !walk.index.contains_key(next.as_str()) {
                visit(walk, next);
                let low = walk.low[node].min(walk.low[next.as_str()]);
                walk.low.insert(node, low);
            } else if walk.stack.contains(&next.as_str()) {
                let low = walk.low[node].min(walk.index[next.as_str()]);
                walk.low.insert(node, low);
            }
        }
        if walk.low[node] == walk.index[node] {
            let at = walk.stack.iter().rposition(|m| *m == node).unwrap();
            let mut component: Vec<String> = walk.stack.drain(at..).map(str::to_owned).collect();
            component.sort();
            if component.len() > 1 {
                walk.found.push(component);
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        found: Vec::new(),
    };
    for node in graph.keys() {
        if !walk.index.contains_key(node.as_str()) {
            visit(&mut walk, node);
        }
    }
    walk.found
}

/// The same graph between top-level folders (`lock`, `core`, `config`, …) only.
fn folders(graph: &Graph) -> Graph {
    let top = |module: &str| module.split("::").next().unwrap_or_default().to_owned();
    let mut folders = Graph::new();
    for (module, targets) in graph {
        for target in targets {
            let (from, to) = (top(module), top(target));
            if !from.is_empty() && !to.is_empty() && from != to {
                folders.entry(from).or_default().insert(to);
            }
        }
    }
    folders
}

#[test]
fn no_crate_has_a_module_cycle() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("../crates");
    let mut checked = 0;
    let mut found = Vec::new();
    for entry in fs::read_dir(&crates).unwrap().map(Result::unwrap) {
        let src = entry.path().join("src");
        if !src.is_dir() {
            continue;
        }
        checked += 1;
        let name = entry.file_name().to_string_lossy().into_owned();
        let graph = dependencies(&src);
        for cycle in cycles(&graph) {
            found.push(format!("{name}: modules {}", cycle.join(" <-> ")));
        }
        for cycle in cycles(&folders(&graph)) {
            found.push(format!("{name}: folders {}", cycle.join(" <-> ")));
        }
    }
    assert!(checked >= 6, "only {checked} crates found under {crates:?}");
    assert!(found.is_empty(), "module cycles:\n{}", found.join("\n"));
}

/// The folder edges of `graph` that do not lead into the shared folder `shared`: a capability
/// folder may use the shared part only, and the shared part no capability.
fn edges_between_capabilities(graph: &Graph, shared: &str) -> Vec<String> {
    folders(graph)
        .into_iter()
        .flat_map(|(from, targets)| targets.into_iter().map(move |to| (from.clone(), to)))
        .filter(|(_, to)| to != shared)
        .map(|(from, to)| format!("{from} -> {to}"))
        .collect()
}

#[test]
fn lock_redis_capabilities_stand_on_the_core_alone() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../crates/lock-redis/src");
    let graph = dependencies(&src);
    assert!(graph.contains_key("core::client") && graph.contains_key("lock"));
    let edges = edges_between_capabilities(&graph, "core");
    assert!(
        edges.is_empty(),
        "lock-redis folders that use a folder other than core/: {edges:?}"
    );
}

#[test]
fn the_check_finds_a_cycle_and_resolves_paths() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    fs::create_dir_all(src.join("lock")).unwrap();
    fs::write(src.join("lib.rs"), "mod lock;\nmod core;\n").unwrap();
    fs::write(
        src.join("lock/mod.rs"),
        "mod inner;\nuse crate::core::client::Client;\n",
    )
    .unwrap();
    fs::write(src.join("lock/inner.rs"), "use super::Thing;\n").unwrap();
    fs::write(
        src.join("core.rs"),
        "// crate::lock::Ignored in a comment\nfn f() -> crate::lock::inner::X { todo!() }\n\
         #[cfg(test)]\nmod tests { use crate::lock::Y; }\n",
    )
    .unwrap();
    let graph = dependencies(src);
    assert_eq!(graph["lock"], BTreeSet::from(["core".to_owned()]));
    assert!(
        graph["lock::inner"].is_empty(),
        "a child using its parent is no edge"
    );
    assert_eq!(graph["core"], BTreeSet::from(["lock::inner".to_owned()]));
    assert!(cycles(&graph).is_empty());
    assert_eq!(cycles(&folders(&graph)), [["core", "lock"]]);
    assert_eq!(edges_between_capabilities(&graph, "core"), ["core -> lock"]);
    assert_eq!(edges_between_capabilities(&graph, "lock"), ["lock -> core"]);
}
