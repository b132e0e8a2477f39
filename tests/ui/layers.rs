//! The layer table of ARCHITECTURE.md (Note [layers]): every top-level
//! module of `src/` has a layer, and no file imports from a higher one.
//! Ops use backends, backends use the allocator, the allocator knows no
//! backend; inside one layer modules may use each other (the circle of
//! `tensor`, `ops` and `autograd` is one layer, as in candle).

use super::architecture::{code, root_reexports, src_files};

/// Each top-level module of `src/` and its layer, lowest first.
const LAYERS: &[(&str, u8)] = &[
    // Values with no behaviour of their own.
    ("bytes", 0),
    ("device", 0),
    ("dtype", 0),
    ("error", 0),
    ("layout", 0),
    ("random", 0),
    ("unary_table", 0),
    // The caching allocator: bytes and blocks, no device code.
    ("alloc", 1),
    // Refcounted storage over a block.
    ("storage", 2),
    // Kernels over storage + layout + dtype; never a tensor.
    ("backend", 3),
    // Process-wide views of the allocator and the backends.
    ("leak", 4),
    ("memory", 4),
    ("profiler", 4),
    ("threads", 4),
    // The tensor, its ops and its graph.
    ("autocast", 5),
    ("autograd", 5),
    ("borrowed", 5),
    ("creation", 5),
    ("display", 5),
    ("ops", 5),
    ("scope", 5),
    ("tensor", 5),
    // Built on tensors.
    ("data", 6),
    ("distributed", 6),
    ("generation", 6),
    ("nn", 6),
    ("optim", 6),
    // Checks over everything (test-only or compile-time).
    ("internal_tests", 7),
    ("static_checks", 7),
];

/// Names the crate root defines itself, below every layer: the dtype macros
/// (`#[macro_export]` puts them at the root) and the re-exports of `half`.
const ROOT_ITEMS: &[&str] = &[
    "with_dtype",
    "with_float_dtype",
    "with_numeric_dtype",
    "half",
    "bf16",
    "f16",
];

fn layer_of(name: &str) -> Option<u8> {
    let module = root_reexports()
        .iter()
        .find(|(n, _)| n == name)
        .map_or(name, |(_, m)| m.as_str());
    LAYERS.iter().find(|(m, _)| *m == module).map(|&(_, l)| l)
}

fn ident_at(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// The first path segment of every `crate::` path in `text` (comments
/// stripped), with its line: `crate::a::b` gives `a`, and `crate::{a::b, c}`
/// gives `a` and `c`.
fn crate_imports(text: &str) -> Vec<(usize, String)> {
    let lines: Vec<&str> = text.lines().map(code).collect();
    let joined = lines.join("\n");
    let line_of = |at: usize| joined[..at].matches('\n').count() + 1;
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(k) = joined[from..].find("crate::") {
        let at = from + k;
        let rest = &joined[at + "crate::".len()..];
        from = at + "crate::".len();
        if let Some(group) = rest.strip_prefix('{') {
            // The names at depth 1 of the group.
            let (mut depth, mut start) = (1, true);
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
                    c if start && depth == 1 && (c.is_alphanumeric() || c == '_') => {
                        out.push((line_of(at), ident_at(&group[i..]).to_string()));
                        start = false;
                    }
                    c if !c.is_whitespace() => start = false,
                    _ => {}
                }
            }
        } else {
            out.push((line_of(at), ident_at(rest).to_string()));
        }
    }
    out
}

#[test]
fn crate_imports_reads_paths_and_groups() {
    let got = crate_imports(
        "use crate::a::b;\n// crate::hidden\nuse crate::{c::{d, e}, f};\nlet x = $crate::g!();",
    );
    let want = [(1, "a"), (3, "c"), (3, "f"), (4, "g")].map(|(l, s)| (l, s.to_string()));
    assert_eq!(got, want);
}

#[test]
fn every_module_imports_only_its_layer_or_below() {
    let mut bad = Vec::new();
    let mut unknown = Vec::new();
    let mut checked = 0;
    for (path, text) in src_files() {
        let rel = path.strip_prefix("src/").unwrap();
        if rel == "lib.rs" {
            continue;
        }
        let module = rel.split('/').next().unwrap().trim_end_matches(".rs");
        let Some(own) = layer_of(module) else {
            unknown.push(format!("{path}: module `{module}` has no layer"));
            continue;
        };
        for (line, name) in crate_imports(&text) {
            checked += 1;
            if ROOT_ITEMS.contains(&name.as_str()) || name == module {
                continue;
            }
            match layer_of(&name) {
                Some(l) if l <= own => {}
                Some(l) => bad.push(format!(
                    "{path}:{line}: `{module}` (layer {own}) imports `{name}` (layer {l})"
                )),
                None => unknown.push(format!(
                    "{path}:{line}: `crate::{name}` is no module of the table"
                )),
            }
        }
    }
    assert!(checked > 500, "checked only {checked} imports");
    assert!(unknown.is_empty(), "add these to LAYERS: {unknown:#?}");
    assert!(bad.is_empty(), "imports from a higher layer: {bad:#?}");
}
