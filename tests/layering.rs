//! The layers of docs/architecture.md, checked: every `crate::…` path in `src/` (a `use` or an
//! inline path, grouped imports included) is an edge between two top-level modules; an edge
//! from a lower layer to a higher one, a module missing from the table, or a cycle between
//! top-level modules (within one layer too) fails the test with the file and line.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Bottom up. A module may use its own layer and the ones below it (no cycles, though); this
/// is the table docs/architecture.md draws.
const LAYERS: &[&[&str]] = &[
    &["util", "paths"],
    &["protocol"],
    &["run"],
    &["costmodel", "selfcost"],
    &["gpu", "supervisor", "store", "sim"],
    &["app"],
    &["keys", "config"],
    &["engine"],
    &["detect", "plan"],
    &["ui", "report"],
    &["cli"],
    &[
        "tui", "headless", "query", "loadgen", "bench", "tune", "agent",
    ],
];

/// Edges the layers allow but the design does not: `ui` draws the view model and nothing else,
/// so it reads no store, runs no supervisor code and resolves no paths (the app layer does, and
/// hands the result over in the model).
const FORBIDDEN: &[(&str, &[&str])] = &[("ui", &["store", "supervisor", "paths"])];

/// One reference from a file of module `from` to module `to`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Edge {
    from: String,
    to: String,
    at: String,
}

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&module))
}

/// The top-level modules `text` names through `crate::` (comments ignored).
fn referenced(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let code = line.split("//").next().unwrap_or("");
        let mut rest = code;
        while let Some(i) = rest.find("crate::") {
            // `ddptop_crate::x` or `the_crate::` are other paths: `crate` must start a word.
            let before = rest[..i].chars().next_back();
            rest = &rest[i + "crate::".len()..];
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue;
            }
            if let Some(group) = rest.strip_prefix('{') {
                for item in top_level_items(group) {
                    if let Some(m) = first_ident(item) {
                        out.push((n + 1, m));
                    }
                }
            } else if let Some(m) = first_ident(rest) {
                out.push((n + 1, m));
            }
        }
    }
    out
}

/// The comma-separated items of a `{…}` group up to its closing brace (nested groups kept whole).
fn top_level_items(group: &str) -> Vec<&str> {
    let mut items = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                items.push(&group[start..i]);
                return items;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&group[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    // A group spanning lines: what this line holds.
    items.push(&group[start..]);
    items
}

fn first_ident(s: &str) -> Option<String> {
    let id: String = s
        .trim_start()
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    (!id.is_empty() && id != "self").then_some(id)
}

/// Grouped imports over several lines (`use crate::{\n a,\n b::c,\n};`) joined onto one line
/// each, so that `referenced` sees the whole group (at the line that closes it).
fn join_groups(text: &str) -> String {
    let mut out = String::new();
    let mut open: Option<String> = None;
    for line in text.lines() {
        match open.as_mut() {
            Some(acc) => {
                acc.push(' ');
                acc.push_str(line.split("//").next().unwrap_or("").trim());
                if line.contains("};") {
                    out.push_str(acc);
                    out.push('\n');
                    open = None;
                } else {
                    out.push('\n'); // keep the line count
                }
            }
            None if line.contains("crate::{") && !line.contains('}') => {
                open = Some(line.to_string());
            }
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Every cross-module edge of the crate in `src`.
fn edges(src: &Path) -> Vec<Edge> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let rel = f.strip_prefix(src).unwrap();
        let top = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy();
        let from = top.trim_end_matches(".rs").to_string();
        // The binary and the crate root are above every layer.
        if from == "main" || from == "lib" {
            continue;
        }
        let text = join_groups(&std::fs::read_to_string(&f).unwrap());
        for (line, to) in referenced(&text) {
            if to != from {
                out.push(Edge {
                    from: from.clone(),
                    to,
                    at: format!("src/{}:{line}", rel.display()),
                });
            }
        }
    }
    out
}

/// What is wrong with `edges` against `LAYERS`: one line each.
fn violations(modules: &BTreeSet<String>, edges: &[Edge]) -> Vec<String> {
    let mut bad = Vec::new();
    for m in modules {
        if layer_of(m).is_none() {
            bad.push(format!(
                "module `{m}` is in no layer: add it to LAYERS and the doc"
            ));
        }
    }
    for e in edges {
        if let (Some(a), Some(b)) = (layer_of(&e.from), layer_of(&e.to))
            && b > a
        {
            bad.push(format!(
                "{}: `{}` (layer {a}) uses `{}` (layer {b}), a higher layer",
                e.at, e.from, e.to
            ));
        }
    }
    for e in edges {
        if FORBIDDEN
            .iter()
            .any(|(from, to)| *from == e.from && to.contains(&e.to.as_str()))
        {
            bad.push(format!(
                "{}: `{}` uses `{}`, which it must not (FORBIDDEN: it reads only the view model)",
                e.at, e.from, e.to
            ));
        }
    }
    for cycle in cycles(modules, edges) {
        let at: Vec<&str> = edges
            .iter()
            .filter(|e| cycle.contains(&e.from) && cycle.contains(&e.to))
            .map(|e| e.at.as_str())
            .collect();
        bad.push(format!(
            "import cycle between {}: {}",
            cycle.iter().cloned().collect::<Vec<_>>().join(", "),
            at.join(", ")
        ));
    }
    bad
}

/// The strongly connected components with more than one module (Tarjan).
fn cycles(modules: &BTreeSet<String>, edges: &[Edge]) -> Vec<BTreeSet<String>> {
    let mut graph: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for m in modules {
        graph.entry(m).or_default();
    }
    for e in edges {
        graph.entry(&e.from).or_default().insert(&e.to);
        graph.entry(&e.to).or_default();
    }
    struct Tarjan<'a> {
        graph: &'a BTreeMap<&'a str, BTreeSet<&'a str>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        out: Vec<BTreeSet<String>>,
    }
    impl<'a> Tarjan<'a> {
        fn visit(&mut self, v: &'a str) {
            let i = self.index.len();
            self.index.insert(v, i);
            self.low.insert(v, i);
            self.stack.push(v);
            self.on_stack.insert(v);
            for &w in &self.graph[v] {
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let lw = self.low[w];
                    let lv = self.low.get_mut(v).unwrap();
                    *lv = (*lv).min(lw);
                } else if self.on_stack.contains(w) {
                    let iw = self.index[w];
                    let lv = self.low.get_mut(v).unwrap();
                    *lv = (*lv).min(iw);
                }
            }
            if self.low[v] == self.index[v] {
                let mut scc = BTreeSet::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    scc.insert(w.to_string());
                    if w == v {
                        break;
                    }
                }
                if scc.len() > 1 {
                    self.out.push(scc);
                }
            }
        }
    }
    let mut t = Tarjan {
        graph: &graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for &v in graph.keys() {
        if !t.index.contains_key(v) {
            t.visit(v);
        }
    }
    t.out
}

fn top_level_modules(src: &Path) -> BTreeSet<String> {
    std::fs::read_dir(src)
        .unwrap()
        .flatten()
        .map(|e| {
            e.file_name()
                .to_string_lossy()
                .trim_end_matches(".rs")
                .to_string()
        })
        .filter(|m| m != "main" && m != "lib")
        .collect()
}

#[test]
fn no_lower_layer_imports_a_higher_one_and_no_cycles() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let modules = top_level_modules(&src);
    let edges = edges(&src);
    assert!(
        edges.len() > 100,
        "the parser found only {} edges: it is broken",
        edges.len()
    );
    let bad = violations(&modules, &edges);
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn every_declared_module_exists() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let modules = top_level_modules(&src);
    for m in LAYERS.iter().flat_map(|l| l.iter()) {
        assert!(modules.contains(*m), "LAYERS names `{m}`, which src/ lacks");
    }
}

#[test]
fn a_synthetic_upward_edge_and_a_cycle_are_reported() {
    let modules: BTreeSet<String> = ["gpu", "ui", "store", "supervisor", "app"]
        .map(String::from)
        .into();
    let edge = |from: &str, to: &str| Edge {
        from: from.into(),
        to: to.into(),
        at: format!("src/{from}.rs:1"),
    };
    // Down and sideways without a cycle: fine.
    assert!(violations(&modules, &[edge("ui", "gpu"), edge("store", "supervisor")]).is_empty());
    // gpu → ui goes up a layer.
    let bad = violations(&modules, &[edge("gpu", "ui")]);
    assert!(
        bad.iter().any(|b| b.contains("`gpu` (layer 4) uses `ui`")),
        "{bad:?}"
    );
    // Two modules of one layer using each other: a cycle, though neither goes up.
    let bad = violations(
        &modules,
        &[edge("store", "supervisor"), edge("supervisor", "store")],
    );
    assert_eq!(bad.len(), 1, "{bad:?}");
    assert!(
        bad[0].contains("import cycle between store, supervisor"),
        "{bad:?}"
    );
    // ui → store is downwards, but forbidden.
    let bad = violations(&modules, &[edge("ui", "store")]);
    assert!(
        bad.iter()
            .any(|b| b.contains("src/ui.rs:1: `ui` uses `store`, which it must not")),
        "{bad:?}"
    );
    // A module outside the table.
    let mut more = modules.clone();
    more.insert("newfamily".into());
    assert!(
        violations(&more, &[])
            .iter()
            .any(|b| b.contains("`newfamily` is in no layer"))
    );
}

#[test]
fn the_parser_reads_grouped_inline_and_multiline_paths() {
    let text = "use crate::app::{State, View};\n\
                use crate::{gpu::GpuView, run::{RunSpec, Experiment}, util};\n\
                // use crate::ui::Theme; (a comment)\n\
                let x = crate::store::Store::open(p);\n\
                use other_crate::thing;\n\
                use crate::{\n    keys::KeyMap,\n    config,\n};\n";
    let got: Vec<String> = referenced(&join_groups(text))
        .into_iter()
        .map(|(_, m)| m)
        .collect();
    assert_eq!(
        got,
        ["app", "gpu", "run", "util", "store", "keys", "config"]
    );
}

// ---- Inside a folder: the files of one folder form no import circle. ----
//
// Every folder of `src/` (and its sub-folders) is checked alone: its files (a sub-folder or a
// `x.rs` + `x/` pair counts as one) are the nodes, and a reference from one to another is an
// edge: `crate::run::spec::X`, `super::spec::X` (from `run/curve.rs`) or `super::X` /
// `crate::run::X` where the folder's root (`mod.rs`, or `x.rs` for `x/`) re-exports `X` from
// `spec` (`pub use spec::X`, or `pub use spec::*` and `spec` defines `X`). The root itself is
// the folder's door, not a node: its own items belong to no file, and it may name all of them.

/// A path as written after `crate::` / `super::`: its segments, one entry per item of a group.
fn expand_path(s: &str) -> Vec<Vec<String>> {
    let mut segs: Vec<String> = Vec::new();
    let mut rest = s.trim_start();
    loop {
        if let Some(group) = rest.strip_prefix('{') {
            let mut out = Vec::new();
            for item in top_level_items(group) {
                for tail in expand_path(item) {
                    let mut p = segs.clone();
                    p.extend(tail);
                    out.push(p);
                }
            }
            return out;
        }
        let id: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if id.is_empty() {
            break;
        }
        rest = &rest[id.len()..];
        if id != "self" {
            segs.push(id);
        }
        match rest.strip_prefix("::") {
            Some(r) => rest = r.trim_start(),
            None => break,
        }
    }
    vec![segs]
}

/// The absolute module paths a file at module path `module` names, with their lines:
/// `crate::…` as written, `super::…` resolved from the file (or from an inline `mod x {` in
/// it, which rustfmt closes with a `}` at the indentation that opened it). Lines under
/// `#[cfg(test)]` are left out.
fn module_refs(text: &str, module: &[String]) -> Vec<(usize, Vec<String>)> {
    let mut out = Vec::new();
    // (indent, name, under `#[cfg(test)]`) of the open inline mods.
    let mut inline: Vec<(usize, String, bool)> = Vec::new();
    let mut prev = "";
    for (n, line) in text.lines().enumerate() {
        let indent = line.len() - line.trim_start().len();
        if let Some((i, _, _)) = inline.last()
            && *i == indent
            && line.trim() == "}"
        {
            inline.pop();
        }
        let t = line.trim_start();
        let cfg_test = std::mem::replace(&mut prev, t) == "#[cfg(test)]";
        let t = t.strip_prefix("pub ").unwrap_or(t);
        if let Some(rest) = t.strip_prefix("mod ")
            && rest.trim_end().ends_with('{')
        {
            let name = rest.trim_end_matches('{').trim().to_string();
            inline.push((indent, name, cfg_test));
            continue;
        }
        // Test code may use any file of its folder: a test's fixture is no import of the
        // program's (the top-level check above still reads it).
        if cfg_test || inline.iter().any(|(_, _, test)| *test) {
            continue;
        }
        let mut here: Vec<String> = module.to_vec();
        here.extend(inline.iter().map(|(_, m, _)| m.clone()));
        let code = line.split("//").next().unwrap_or("");
        let mut i = 0;
        while i < code.len() {
            let rest = &code[i..];
            let before = code[..i].chars().next_back();
            let word_start = !before.is_some_and(|c| c.is_alphanumeric() || c == '_');
            let (base, tail) = if word_start && rest.starts_with("crate::") {
                (Vec::new(), &rest["crate::".len()..])
            } else if word_start && rest.starts_with("super::") {
                let mut base = here.clone();
                let mut tail = rest;
                while let Some(t) = tail.strip_prefix("super::") {
                    base.pop();
                    tail = t.trim_start();
                }
                (base, tail)
            } else {
                i += rest.chars().next().map_or(1, char::len_utf8);
                continue;
            };
            for p in expand_path(tail) {
                let mut abs = base.clone();
                abs.extend(p);
                out.push((n + 1, abs));
            }
            i = code.len() - tail.len();
        }
    }
    out
}

/// A file's module path: `src/app/state.rs` → `[app, state]`, `src/app/mod.rs` → `[app]`.
fn module_of(rel: &Path) -> Vec<String> {
    let mut m: Vec<String> = rel
        .iter()
        .map(|c| c.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if m.last().is_some_and(|l| l == "mod") {
        m.pop();
    }
    m
}

/// The names a file defines as `pub` items (what a glob re-export of it brings).
fn pub_items(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("pub ") else {
            continue;
        };
        for kw in [
            "struct ", "enum ", "fn ", "trait ", "type ", "const ", "static ", "mod ",
        ] {
            if let Some(r) = rest.strip_prefix(kw)
                && let Some(name) = first_ident(r)
            {
                out.insert(name);
            }
        }
    }
    out
}

/// A folder's root re-exports: item name → the file (node) that defines it.
fn reexports(
    root: &str,
    units: &BTreeSet<String>,
    files: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for stmt in root.split(';') {
        let s = stmt.trim();
        let Some(body) = s.strip_prefix("pub use ") else {
            continue;
        };
        let body = body.strip_prefix("self::").unwrap_or(body);
        for p in expand_path(body) {
            let Some(unit) = p.first().filter(|u| units.contains(*u)) else {
                continue;
            };
            match p.get(1) {
                Some(name) if p.len() == 2 => {
                    out.insert(name.clone(), unit.clone());
                }
                None if body.contains('*') => {
                    for name in pub_items(files.get(unit).map_or("", String::as_str)) {
                        out.insert(name, unit.clone());
                    }
                }
                _ => {}
            }
        }
    }
    out
}

/// Edges between the files of every folder under `src`, as `(folder, edges)`.
fn folder_edges(src: &Path) -> BTreeMap<String, (BTreeSet<String>, Vec<Edge>)> {
    let mut paths = Vec::new();
    rust_files(src, &mut paths);
    paths.sort();
    let files: Vec<(Vec<String>, String, String)> = paths
        .iter()
        .map(|f| {
            let rel = f.strip_prefix(src).unwrap();
            let text = std::fs::read_to_string(f).unwrap();
            (module_of(rel), format!("src/{}", rel.display()), text)
        })
        .collect();
    let mut folders: BTreeSet<Vec<String>> = BTreeSet::new();
    for (m, _, _) in &files {
        for n in 1..m.len() {
            folders.insert(m[..n].to_vec());
        }
    }
    let mut out = BTreeMap::new();
    for folder in folders {
        let d = folder.len();
        let inside: Vec<&(Vec<String>, String, String)> = files
            .iter()
            .filter(|(m, _, _)| m.len() > d && m[..d] == folder[..])
            .collect();
        let units: BTreeSet<String> = inside.iter().map(|(m, _, _)| m[d].clone()).collect();
        // A unit's own text (`x.rs`, or `x/mod.rs`) for its glob re-exports.
        let unit_text: BTreeMap<String, String> = inside
            .iter()
            .filter(|(m, _, _)| m.len() == d + 1)
            .map(|(m, _, t)| (m[d].clone(), t.clone()))
            .collect();
        let root = files
            .iter()
            .find(|(m, _, _)| *m == folder)
            .map_or(String::new(), |(_, _, t)| t.clone());
        let names = reexports(&root, &units, &unit_text);
        let mut edges = Vec::new();
        for (m, at, text) in &inside {
            let from = &m[d];
            for (line, p) in module_refs(&join_groups(text), m) {
                if p.len() <= d || p[..d] != folder[..] {
                    continue;
                }
                let to = if units.contains(&p[d]) {
                    Some(&p[d])
                } else {
                    names.get(&p[d])
                };
                if let Some(to) = to.filter(|to| *to != from) {
                    edges.push(Edge {
                        from: from.clone(),
                        to: to.clone(),
                        at: format!("{at}:{line}"),
                    });
                }
            }
        }
        out.insert(folder.join("/"), (units, edges));
    }
    out
}

/// The circles among one folder's files: one line each, with every edge's file:line.
fn folder_cycles(folder: &str, units: &BTreeSet<String>, edges: &[Edge]) -> Vec<String> {
    cycles(units, edges)
        .into_iter()
        .map(|cycle| {
            let mut at: Vec<&str> = edges
                .iter()
                .filter(|e| cycle.contains(&e.from) && cycle.contains(&e.to))
                .map(|e| e.at.as_str())
                .collect();
            at.dedup();
            format!(
                "import circle inside src/{folder}/ between {}: {}",
                cycle.iter().cloned().collect::<Vec<_>>().join(", "),
                at.join(", ")
            )
        })
        .collect()
}

#[test]
fn no_import_circles_between_the_files_of_a_folder() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let all = folder_edges(&src);
    let n: usize = all.values().map(|(_, e)| e.len()).sum();
    assert!(
        n > 100,
        "the parser found only {n} in-folder edges: it is broken"
    );
    let bad: Vec<String> = all
        .iter()
        .flat_map(|(f, (units, edges))| folder_cycles(f, units, edges))
        .collect();
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn in_folder_paths_resolve_and_a_circle_is_reported() {
    let m = |s: &str| s.split('/').map(String::from).collect::<Vec<_>>();
    // `run/curve.rs`: `super::` is `run`; inside an inline `mod inner {`, `super::` is the file;
    // test code is left out.
    let text = "use super::spec::{Experiment, RunSpec};\n\
                use crate::run::{family::Family, Batch};\n\
                let x = super::super::util::now();\n\
                mod inner {\n    use super::helper;\n}\n\
                #[cfg(test)]\n\
                mod tests {\n    use crate::run::view::RunView;\n}\n\
                use super::view::RunView;\n";
    let got: Vec<(usize, String)> = module_refs(&join_groups(text), &m("run/curve"))
        .into_iter()
        .map(|(n, p)| (n, p.join("/")))
        .collect();
    let want = [
        (1, "run/spec/Experiment"),
        (1, "run/spec/RunSpec"),
        (2, "run/family/Family"),
        (2, "run/Batch"),
        (3, "util/now"),
        (5, "run/curve/helper"),
        (11, "run/view/RunView"),
    ];
    assert_eq!(got, want.map(|(n, p)| (n, p.to_string())));
    // Re-exports of a folder's root name the file that defines the item.
    let units: BTreeSet<String> = ["spec", "curve", "messages"].map(String::from).into();
    let texts: BTreeMap<String, String> = [(
        "messages".to_string(),
        "pub struct Hello {}\npub fn parse() {}\n".to_string(),
    )]
    .into();
    let names = reexports(
        "pub use curve::{Batch, CurveKey};\npub use messages::*;\npub use other::X;\n",
        &units,
        &texts,
    );
    let names: Vec<(&str, &str)> = names
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    assert_eq!(
        names,
        [
            ("Batch", "curve"),
            ("CurveKey", "curve"),
            ("Hello", "messages"),
            ("parse", "messages")
        ]
    );
    // Two files naming each other: one circle, with both places.
    let edge = |from: &str, to: &str, at: &str| Edge {
        from: from.into(),
        to: to.into(),
        at: at.into(),
    };
    let edges = [
        edge("spec", "curve", "src/run/spec.rs:4"),
        edge("curve", "spec", "src/run/curve.rs:6"),
        edge("curve", "messages", "src/run/curve.rs:7"),
    ];
    let bad = folder_cycles("run", &units, &edges);
    assert_eq!(
        bad,
        [
            "import circle inside src/run/ between curve, spec: src/run/spec.rs:4, src/run/curve.rs:6"
        ]
    );
    assert!(folder_cycles("run", &units, &edges[..1]).is_empty());
}

// ---- Family dispatch (issue 49): what a family does is asked of the family (`run/family/`).

/// Most lines outside `src/run/family/` that may name a family variant. The ones left are listed
/// in docs/architecture.md ("Adding a family"); lower it as they go, never raise it.
const MAX_DISPATCH_LINES: usize = 10;

/// The variants of `pub enum {name} {` in `text`: the identifiers that open a line one level
/// inside the enum (attributes, doc comments and struct-variant fields skipped).
fn enum_variants(text: &str, name: &str) -> Vec<String> {
    let open = format!("pub enum {name} {{");
    let mut lines = text.lines().skip_while(|l| l.trim() != open);
    let Some(first) = lines.next() else {
        return Vec::new();
    };
    let indent = first.len() - first.trim_start().len() + 4;
    let mut out = Vec::new();
    for l in lines {
        let t = l.trim_start();
        if t == "}" && l.len() - t.len() + 4 == indent {
            break;
        }
        if l.len() - t.len() == indent && t.starts_with(|c: char| c.is_ascii_uppercase()) {
            out.extend(first_ident(t));
        }
    }
    out
}

/// A dispatch line: a line of program code (not a comment, not under `#[cfg(test)]`) that names
/// a family variant as a path, `Experiment::Weak` or `Family::Fsdp { .. }`, also through a
/// module path (`crate::run::Experiment::Jax`; `TuneExperiment::Weak` is another enum). Every
/// such line counts: a comparison, a `match` arm, a `matches!` and a construction alike, since
/// each chooses behaviour by a family's name, which is the family's own file's business. Test
/// code is left out: a test builds a run of a named family on purpose.
fn dispatch_lines(text: &str, variants: &[(&str, Vec<String>)]) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    // (indent, under `#[cfg(test)]`) of the open inline mods, as `module_refs` reads them.
    let mut inline: Vec<(usize, bool)> = Vec::new();
    let mut prev = "";
    for (n, line) in text.lines().enumerate() {
        let indent = line.len() - line.trim_start().len();
        if inline.last().is_some_and(|(i, _)| *i == indent) && line.trim() == "}" {
            inline.pop();
        }
        let t = line.trim_start();
        let cfg_test = std::mem::replace(&mut prev, t) == "#[cfg(test)]";
        let m = t.strip_prefix("pub ").unwrap_or(t);
        if m.starts_with("mod ") && m.trim_end().ends_with('{') {
            inline.push((indent, cfg_test));
            continue;
        }
        if cfg_test || inline.iter().any(|(_, test)| *test) {
            continue;
        }
        let code = line.split("//").next().unwrap_or("");
        let names = |e: &str, vs: &[String]| {
            let pat = format!("{e}::");
            code.match_indices(&pat).any(|(i, _)| {
                let before = code[..i].chars().next_back();
                let word_start = !before.is_some_and(|c| c.is_alphanumeric() || c == '_');
                word_start && first_ident(&code[i + pat.len()..]).is_some_and(|v| vs.contains(&v))
            })
        };
        if variants.iter().any(|(e, vs)| names(e, vs)) {
            out.push((n + 1, line.trim().to_string()));
        }
    }
    out
}

/// Every dispatch line under `src` outside `src/run/family/`, as `file:line: code`.
fn family_dispatch(src: &Path) -> Vec<String> {
    let family = std::fs::read_to_string(src.join("run/family/mod.rs")).unwrap();
    let variants = [
        ("Experiment", enum_variants(&family, "Experiment")),
        ("Family", enum_variants(&family, "Family")),
    ];
    for (e, vs) in &variants {
        assert!(
            vs.len() >= 8,
            "found only {vs:?} in enum {e}: the parser is broken"
        );
    }
    named_outside(src, &variants, |rel| rel.starts_with("run/family"))
}

/// Every dispatch line naming one of `variants` under `src`, in the files `own` does not claim
/// (paths relative to `src`), as `file:line: code`.
fn named_outside(
    src: &Path,
    variants: &[(&str, Vec<String>)],
    own: impl Fn(&Path) -> bool,
) -> Vec<String> {
    let mut paths = Vec::new();
    rust_files(src, &mut paths);
    paths.sort();
    let mut out = Vec::new();
    for f in paths {
        let rel = f.strip_prefix(src).unwrap();
        if own(rel) {
            continue;
        }
        let text = std::fs::read_to_string(&f).unwrap();
        for (n, line) in dispatch_lines(&text, variants) {
            out.push(format!("src/{}:{n}: {line}", rel.display()));
        }
    }
    out
}

#[test]
fn code_outside_the_family_files_asks_the_family_instead_of_naming_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let lines = family_dispatch(&src);
    assert!(
        lines.len() <= MAX_DISPATCH_LINES,
        "{} dispatch lines outside src/run/family/ (at most {MAX_DISPATCH_LINES}): ask the family \
         (`experiment.kind()`, docs/architecture.md \"Adding a family\") instead of naming it:\n{}",
        lines.len(),
        lines.join("\n")
    );
}

/// The protocol's word for each family, `protocol::FamilyResult` (a layer below `run`, so not
/// `Experiment`), is named only in its own file, `src/protocol/result.rs`: code elsewhere asks a
/// result for what it carries (`attach()`, `torch()`, `jax()`) and never chooses by its family.
#[test]
fn a_results_family_is_named_only_where_it_is_defined() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let own = std::fs::read_to_string(src.join("protocol/result.rs")).unwrap();
    let variants = [("FamilyResult", enum_variants(&own, "FamilyResult"))];
    assert!(
        variants[0].1.len() >= 9,
        "found only {:?} in FamilyResult: the parser is broken",
        variants[0].1
    );
    let out = named_outside(&src, &variants, |rel| {
        rel == Path::new("protocol/result.rs")
    });
    assert!(
        out.is_empty(),
        "a result's family named outside src/protocol/result.rs (ask the result instead):\n{}",
        out.join("\n")
    );
}

#[test]
fn a_dispatch_line_is_a_named_variant_in_program_code() {
    let family = "pub enum Experiment {\n    /// Doc.\n    #[value(skip)]\n    Weak,\n    Jax {\n        sharding: X,\n    },\n}\n";
    let vs = enum_variants(family, "Experiment");
    assert_eq!(vs, ["Weak", "Jax"]);
    let variants = [("Experiment", vs)];
    let text = "fn f(e: Experiment) {\n\
                \x20   if e == Experiment::Weak {}\n\
                \x20   let k = Experiment::kind(e);\n\
                \x20   let t = TuneExperiment::Weak;\n\
                \x20   // Experiment::Jax in a comment\n\
                \x20   match e { crate::run::Experiment::Jax => {} _ => {} }\n\
                }\n\
                #[cfg(test)]\n\
                mod tests {\n\
                \x20   fn g() { let _ = Experiment::Weak; }\n\
                }\n\
                fn h() -> Experiment { Experiment::Jax }\n";
    let lines: Vec<usize> = dispatch_lines(text, &variants)
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(lines, [2, 6, 12]);
}

/// Issue 49: a function of `src/` longer than this many lines (signature to closing brace) is
/// split by what it draws or decides.
const MAX_FN_LINES: usize = 120;

/// `text` with the insides of comments, string and char literals blanked to spaces (line breaks
/// kept), so that braces and `fn` in them count for nothing.
fn code_only(text: &str) -> String {
    let c: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let blank = |out: &mut String, ch: char| out.push(if ch == '\n' { '\n' } else { ' ' });
    let ident = |ch: char| ch.is_alphanumeric() || ch == '_';
    let mut i = 0;
    while i < c.len() {
        let prev_ident = i > 0 && ident(c[i - 1]);
        if c[i] == '/' && c.get(i + 1) == Some(&'/') {
            while i < c.len() && c[i] != '\n' {
                blank(&mut out, c[i]);
                i += 1;
            }
        } else if c[i] == '/' && c.get(i + 1) == Some(&'*') {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    blank(&mut out, c[i]);
                    i += 1;
                }
            }
        } else if !prev_ident && (c[i] == 'r' || (c[i] == 'b' && c.get(i + 1) == Some(&'r'))) && {
            let j = i + if c[i] == 'b' { 2 } else { 1 };
            let k = (j..c.len()).find(|&k| c[k] != '#').unwrap_or(c.len());
            c.get(k) == Some(&'"')
        } {
            // A raw string: r"…", r#"…"#, br"…".
            let j = i + if c[i] == 'b' { 2 } else { 1 };
            let k = (j..c.len()).find(|&k| c[k] != '#').unwrap_or(c.len());
            let hashes = k - j;
            out.extend(std::iter::repeat_n(' ', k + 1 - i));
            i = k + 1;
            while i < c.len() {
                if c[i] == '"' && (1..=hashes).all(|h| c.get(i + h) == Some(&'#')) {
                    out.extend(std::iter::repeat_n(' ', hashes + 1));
                    i += hashes + 1;
                    break;
                }
                blank(&mut out, c[i]);
                i += 1;
            }
        } else if c[i] == '"' {
            out.push(' ');
            i += 1;
            while i < c.len() && c[i] != '"' {
                if c[i] == '\\' {
                    blank(&mut out, c[i]);
                    i += 1;
                }
                if i < c.len() {
                    blank(&mut out, c[i]);
                    i += 1;
                }
            }
            out.push(' ');
            i += 1;
        } else if c[i] == '\'' && (c.get(i + 1) == Some(&'\\') || c.get(i + 2) == Some(&'\'')) {
            // A char literal ('{', '\n', '\''); a lifetime ('a) has no closing quote.
            out.push(' ');
            i += 1;
            if c.get(i) == Some(&'\\') {
                out.push(' ');
                i += 1;
            }
            while i < c.len() && c[i] != '\'' {
                out.push(' ');
                i += 1;
            }
            out.push(' ');
            i += 1;
        } else {
            out.push(c[i]);
            i += 1;
        }
    }
    out
}

/// Every `fn` with a body in `text` before its first `#[cfg(test)]` line: (line of `fn`, name,
/// lines from the `fn` line to the closing brace).
fn fn_lengths(text: &str) -> Vec<(usize, String, usize)> {
    let program: String = text
        .lines()
        .take_while(|l| !l.trim_start().starts_with("#[cfg(test)]"))
        .map(|l| format!("{l}\n"))
        .collect();
    let code: Vec<char> = code_only(&program).chars().collect();
    let ident = |ch: char| ch.is_alphanumeric() || ch == '_';
    let line_at = |i: usize| 1 + code[..i].iter().filter(|&&ch| ch == '\n').count();
    let mut out = Vec::new();
    for i in 0..code.len() {
        let word = code[i..].starts_with(&['f', 'n'])
            && (i == 0 || !ident(code[i - 1]))
            && code.get(i + 2).is_some_and(|ch| ch.is_whitespace());
        if !word {
            continue;
        }
        let mut j = i + 2;
        while code.get(j).is_some_and(|ch| ch.is_whitespace()) {
            j += 1;
        }
        let name: String = code[j..].iter().take_while(|&&ch| ident(ch)).collect();
        if name.is_empty() {
            continue; // a `fn(…)` pointer type
        }
        // The body opens at the first `{` (a declaration ends at `;` first).
        let Some(open) = (j..code.len()).find(|&k| code[k] == '{' || code[k] == ';') else {
            continue;
        };
        if code[open] == ';' {
            continue;
        }
        let mut depth = 0;
        for (k, &ch) in code.iter().enumerate().skip(open) {
            match ch {
                '{' => depth += 1,
                '}' => depth -= 1,
                _ => continue,
            }
            if depth == 0 {
                let start = line_at(i);
                out.push((start, name, line_at(k) - start + 1));
                break;
            }
        }
    }
    out
}

/// `path:line name N lines` for every function of `src` over [`MAX_FN_LINES`].
fn long_functions(src: &Path) -> Vec<String> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let rel = format!("src/{}", f.strip_prefix(src).unwrap().display());
        let text = std::fs::read_to_string(&f).unwrap();
        for (line, name, n) in fn_lengths(&text) {
            if n > MAX_FN_LINES {
                out.push(format!("{rel}:{line} {name} {n} lines"));
            }
        }
    }
    out
}

#[test]
fn no_function_in_src_is_longer_than_120_lines() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let long = long_functions(&src);
    assert!(
        long.is_empty(),
        "functions over {MAX_FN_LINES} lines in src/ (split them by what they draw or \
         decide):\n{}",
        long.join("\n")
    );
}

#[test]
fn the_function_counter_counts_signature_to_brace_and_ignores_literals() {
    let body = |n: usize| "    let _ = 1;\n".repeat(n - 2);
    // Braces in strings, raw strings, chars and comments do not count; lifetimes are no chars.
    let text = format!(
        "fn long<'a>(x: &'a str) -> char {{\n{}    let _ = \"}}\";\n    let _ = r#\"{{\"#;\n    \
         // }}\n    '}}'\n}}\n\nfn exact() {{\n{}}}\nfn decl();\nfn short() {{ let f: fn(u8) = g; }}\n\
         #[cfg(test)]\nmod tests {{\n    fn hidden() {{\n{}    }}\n}}\n",
        body(121 - 4),
        body(120),
        body(200),
    );
    let lens = fn_lengths(&text);
    let got: Vec<(&str, usize)> = lens.iter().map(|(_, n, l)| (n.as_str(), *l)).collect();
    assert_eq!(got, [("long", 121), ("exact", 120), ("short", 1)]);
    let long: Vec<&str> = lens
        .iter()
        .filter(|(_, _, l)| *l > MAX_FN_LINES)
        .map(|(_, n, _)| n.as_str())
        .collect();
    assert_eq!(long, ["long"]);
    assert_eq!(lens[0].0, 1);
    assert_eq!(lens[1].0, 123);
}
