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
