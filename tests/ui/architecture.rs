//! The structural rules of ARCHITECTURE.md, checked on the source tree:
//! file size, the allocator's independence from the backends, imports from
//! the defining module (not the crate root), and a `# Safety` contract on
//! every `unsafe fn`. (`// SAFETY:` on every `unsafe` block and impl is
//! clippy's `undocumented_unsafe_blocks`, denied in CI.)

use std::fs;
use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let p = entry.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

pub(crate) fn src_files() -> Vec<(String, String)> {
    let files = files_under(&["src"]);
    assert!(
        files.len() > 50,
        "found only {} files under src/",
        files.len()
    );
    files
}

/// The `.rs` files under the crate's directories `dirs`, sorted, as
/// (path from the crate root, text).
fn files_under(dirs: &[&str]) -> Vec<(String, String)> {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for d in dirs {
        rust_files(&manifest.join(d), &mut files);
    }
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let rel = p.strip_prefix(manifest).unwrap().display().to_string();
            (rel, fs::read_to_string(&p).unwrap())
        })
        .collect()
}

/// The line without a trailing `//` comment, or "" for a comment line
/// (strings containing `//` are rare enough in `use` lines and paths to
/// ignore).
pub(crate) fn code(line: &str) -> &str {
    let t = line.trim_start();
    if t.starts_with("//") {
        return "";
    }
    match line.find("//") {
        Some(i) => &line[..i],
        None => line,
    }
}

/// The rule covers the tests, benchmarks and examples too: a test binary
/// that grows is a directory (`tests/<name>/main.rs` and one file per
/// concern), which stays one binary.
#[test]
fn no_source_file_is_over_1000_lines() {
    let mut files = src_files();
    let others = files_under(&["tests", "benches", "examples"]);
    assert!(
        others.len() > 50,
        "found only {} test, bench and example files",
        others.len()
    );
    files.extend(others);
    let long: Vec<String> = files
        .iter()
        .filter(|(_, text)| text.lines().count() > 1000)
        .map(|(p, text)| format!("{p}: {} lines", text.lines().count()))
        .collect();
    assert!(long.is_empty(), "split these by concern: {long:#?}");
}

/// Sizes are multiplied in one place: `layout::numel` / `numel_of`, whose
/// bound (`checked_numel`, met by every tensor's shape) is what keeps a
/// product of dims from overflowing; a hand-written `.product()` panics on
/// overflow in a debug build and wraps in release.
#[test]
fn shape_products_go_through_numel() {
    let bad: Vec<String> = src_files()
        .iter()
        .filter(|(p, _)| p != "src/layout.rs")
        .flat_map(|(p, text)| {
            text.lines()
                .enumerate()
                .filter(|(_, l)| code(l).contains(".product"))
                .map(move |(i, l)| format!("{p}:{}: {}", i + 1, l.trim()))
        })
        .collect();
    assert!(
        bad.is_empty(),
        "use crate::layout::numel or numel_of: {bad:#?}"
    );
}

/// The layer table (`layers.rs`) keeps `crate::backend` and
/// `crate::storage` out of `src/alloc/`; this keeps out the CUDA driver
/// crate, which no `crate::` path names.
#[test]
fn the_allocator_imports_no_backend() {
    let mut seen = 0;
    let mut bad = Vec::new();
    for (path, text) in src_files() {
        if !path.starts_with("src/alloc/") {
            continue;
        }
        seen += 1;
        for (i, line) in text.lines().enumerate() {
            let c = code(line);
            if c.contains("cudarc") {
                bad.push(format!("{path}:{}: {}", i + 1, line.trim()));
            }
        }
    }
    assert!(seen >= 4, "src/alloc/ has only {seen} files");
    assert!(
        bad.is_empty(),
        "the allocator layer must not know a backend: {bad:#?}"
    );
}

/// The names the crate root re-exports for users, with the module that
/// defines each: read from `src/lib.rs`'s `pub use module::...::{A, B};`
/// lines (`half` for the re-exports of the `half` crate). Inside the crate
/// they are imported from that module; `#[macro_export]` macros, whose
/// expansion cannot name a private module, use `$crate::Name` (the layer
/// table counts that as an import of the defining module).
pub(crate) fn root_reexports() -> &'static [(String, String)] {
    static NAMES: std::sync::OnceLock<Vec<(String, String)>> = std::sync::OnceLock::new();
    NAMES.get_or_init(|| {
        let lib =
            fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs")).unwrap();
        let mut out = Vec::new();
        for line in lib.lines() {
            let Some(rest) = code(line).trim().strip_prefix("pub use ") else {
                continue;
            };
            let path = rest
                .strip_suffix(';')
                .expect("src/lib.rs: one `pub use` per line (this parser reads lines)");
            // `pub use half;`: a crate re-exported whole names no item.
            let Some((_, last)) = path.rsplit_once("::") else {
                continue;
            };
            let module = path.split("::").next().unwrap_or_default();
            for name in last.trim_matches(['{', '}']).split(',').map(str::trim) {
                if !name.is_empty() {
                    out.push((name.to_string(), module.to_string()));
                }
            }
        }
        for (n, m) in [
            ("Tensor", "tensor"),
            ("PoolOptions", "ops"),
            ("bf16", "half"),
        ] {
            assert!(
                out.iter().any(|(a, b)| a == n && b == m),
                "{n} from {m} not among src/lib.rs's re-exports: {out:?}"
            );
        }
        out
    })
}

fn is_root_name(word: &str) -> bool {
    root_reexports().iter().any(|(n, _)| n == word)
}

#[test]
fn nothing_imports_through_the_crate_root() {
    let mut bad = Vec::new();
    for (path, text) in src_files() {
        if path == "src/lib.rs" {
            continue;
        }
        // `use crate::{A, b::C, ...};` may span lines: join each statement.
        let mut stmt = String::new();
        for (i, line) in text.lines().enumerate() {
            let c = code(line);
            let t = c.trim_start();
            if stmt.is_empty()
                && !(t.starts_with("use crate::")
                    || t.starts_with("pub use crate::")
                    || t.starts_with("pub(crate) use crate::"))
            {
                // Paths in expressions and types: `crate::Tensor::zeros(..)`.
                let mut rest = c;
                while let Some(k) = rest.find("crate::") {
                    let after = &rest[k + "crate::".len()..];
                    let word: String = after
                        .chars()
                        .take_while(|ch| ch.is_alphanumeric() || *ch == '_')
                        .collect();
                    let before = &rest[..k];
                    let is_dollar = before.ends_with('$');
                    // `crate::scope::..` is the module, `crate::Tensor::..` the type.
                    let module_path = after[word.len()..].starts_with("::")
                        && word.starts_with(|c: char| c.is_lowercase());
                    if is_root_name(&word) && !is_dollar && !module_path {
                        bad.push(format!("{path}:{}: crate::{word}", i + 1));
                    }
                    rest = after;
                }
                continue;
            }
            stmt.push_str(c);
            if !c.contains(';') {
                continue;
            }
            let s = std::mem::take(&mut stmt);
            let body = s.split("crate::").nth(1).unwrap_or("");
            if let Some(group) = body.strip_prefix('{') {
                // Top-level names of the group: depth-0 words before `,` or `}`.
                let mut depth = 0;
                let mut word = String::new();
                let mut top = Vec::new();
                let mut at_start = true;
                for ch in group.chars() {
                    match ch {
                        '{' => depth += 1,
                        '}' if depth == 0 => break,
                        '}' => depth -= 1,
                        ',' if depth == 0 => {
                            at_start = true;
                            continue;
                        }
                        _ => {}
                    }
                    if depth == 0 && at_start {
                        if ch.is_alphanumeric() || ch == '_' {
                            word.push(ch);
                            continue;
                        }
                        if !word.is_empty() {
                            // Followed by `::`: a module path, not a name.
                            if ch != ':' {
                                top.push(std::mem::take(&mut word));
                            } else {
                                word.clear();
                            }
                            at_start = false;
                        } else if !ch.is_whitespace() {
                            at_start = false;
                        }
                    }
                }
                if !word.is_empty() {
                    top.push(word);
                }
                for w in top {
                    if is_root_name(&w) {
                        bad.push(format!("{path}:{}: use crate::{{{w}}}", i + 1));
                    }
                }
            } else {
                let word: String = body
                    .chars()
                    .take_while(|ch| ch.is_alphanumeric() || *ch == '_')
                    .collect();
                let next = body[word.len()..].chars().next();
                if is_root_name(&word) && next != Some(':') {
                    bad.push(format!("{path}:{}: use crate::{word}", i + 1));
                }
            }
        }
    }
    assert!(
        bad.is_empty(),
        "import these from their defining module (crate::tensor::Tensor, crate::device::Device, ...): {bad:#?}"
    );
}

/// The name of the function declared on a line containing `unsafe fn `.
fn unsafe_fn_name(line: &str) -> String {
    let after = line.split("unsafe fn ").nth(1).unwrap_or("");
    after
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect()
}

/// `true` if the comment and attribute lines right above line `i` state a
/// safety contract (`# Safety`) or argument (`SAFETY:`).
fn documented_above(lines: &[&str], i: usize) -> bool {
    let mut j = i;
    while j > 0 {
        j -= 1;
        let t = lines[j].trim_start();
        if t.starts_with("///") || t.starts_with("//") || t.starts_with("#[") {
            if t.contains("# Safety") || t.contains("SAFETY:") {
                return true;
            }
        } else {
            return false;
        }
    }
    false
}

/// Every `unsafe fn` states its contract in a `# Safety` section. A trait
/// method's implementation (an `unsafe fn` inside an `impl Trait for Type`
/// block) inherits the contract of a documented `unsafe fn` of that name.
#[test]
fn every_unsafe_fn_states_its_contract() {
    let files = src_files();
    let mut declared = std::collections::HashSet::new();
    let mut sites = Vec::new();
    for (path, text) in &files {
        let lines: Vec<&str> = text.lines().collect();
        let mut in_trait_impl = false;
        for (i, line) in lines.iter().enumerate() {
            let c = code(line);
            let t = c.trim_start();
            if t.starts_with("impl ") || t.starts_with("impl<") {
                in_trait_impl = t.contains(" for ");
            }
            if !c.contains("unsafe fn ") {
                continue;
            }
            let name = unsafe_fn_name(c);
            let documented = documented_above(&lines, i);
            if documented {
                declared.insert(name.clone());
            }
            let site = format!("{path}:{}: {}", i + 1, line.trim());
            sites.push((site, name, documented, in_trait_impl));
        }
    }
    assert!(
        sites.len() > 10,
        "only {} unsafe fns found: is the scan broken?",
        sites.len()
    );
    let bad: Vec<&String> = sites
        .iter()
        .filter(|(_, name, documented, in_impl)| {
            !(*documented || *in_impl && declared.contains(name))
        })
        .map(|(site, ..)| site)
        .collect();
    assert!(
        bad.is_empty(),
        "give each unsafe fn a `# Safety` doc section stating the caller's contract: {bad:#?}"
    );
}

/// The body of the function whose `fn` line is `lines[start]`: its lines up
/// to the one that closes its first brace (braces in strings are rare
/// enough in tests to ignore).
fn fn_body(lines: &[&str], start: usize) -> String {
    let (mut depth, mut opened) = (0i64, false);
    let mut body = String::new();
    for l in &lines[start..] {
        let c = code(l);
        body.push_str(c);
        body.push('\n');
        depth += c.matches('{').count() as i64 - c.matches('}').count() as i64;
        opened |= c.contains('{');
        if opened && depth <= 0 {
            break;
        }
    }
    body
}

/// Whether `body` calls a function named `name` (a word, then `(`).
fn calls(body: &str, name: &str) -> bool {
    let pat = format!("{name}(");
    body.match_indices(&pat).any(|(i, _)| {
        !body[..i]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '_')
    })
}

/// Note [test binaries]: in the family binaries (`tests/<family>/`) every
/// `#[test]` takes the binary's one lock, alone (`serial()`, or a helper
/// that calls it, such as a module's `lock()`) or shared (`shared()`), so
/// that a test counting the allocator's bytes never runs beside another
/// test of its binary that allocates.
#[test]
fn every_family_test_takes_the_binary_lock() {
    let files = files_under(&["tests"]);
    let families: Vec<&(String, String)> = files
        .iter()
        .filter(|(p, _)| {
            let parts: Vec<&str> = p.split('/').collect();
            // `ui` is not a family: compile and source checks, and the
            // pass cases, none of which counts bytes.
            parts.len() >= 3 && !["common", "fixtures", "ui"].contains(&parts[1])
        })
        .collect();
    assert!(families.len() > 40, "found {} family files", families.len());
    let mut bad = Vec::new();
    let mut checked = 0;
    for (path, text) in families {
        let lines: Vec<&str> = text.lines().collect();
        // The functions of this file that take the lock, directly or
        // through another such function.
        let fns: Vec<(String, String)> = lines
            .iter()
            .enumerate()
            .filter_map(|(i, l)| {
                let c = code(l).trim_start();
                let c = c.strip_prefix("pub ").unwrap_or(c);
                let name = c.strip_prefix("fn ")?.split(['(', '<']).next()?;
                Some((name.to_string(), fn_body(&lines, i)))
            })
            .collect();
        let mut lockers: Vec<String> = ["serial", "shared", "lock"].map(String::from).to_vec();
        loop {
            let more: Vec<String> = fns
                .iter()
                .filter(|(n, b)| !lockers.contains(n) && lockers.iter().any(|l| calls(b, l)))
                .map(|(n, _)| n.clone())
                .collect();
            if more.is_empty() {
                break;
            }
            lockers.extend(more);
        }
        for (i, l) in lines.iter().enumerate() {
            if l.trim() != "#[test]" {
                continue;
            }
            let Some(f) = (i + 1..lines.len()).find(|&j| code(lines[j]).contains("fn ")) else {
                continue;
            };
            checked += 1;
            let body = fn_body(&lines, f);
            if !lockers.iter().any(|n| calls(&body, n)) {
                bad.push(format!("{path}:{}", f + 1));
            }
        }
    }
    assert!(checked > 100, "checked only {checked} tests");
    assert!(
        bad.is_empty(),
        "start these tests with `let _shared = crate::common::shared();` (or take \
         `common::serial()` if they read global statistics): {bad:#?}"
    );
}
