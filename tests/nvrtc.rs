//! The GPU-free CUDA check: every `kernels/*.cu` compiles with NVRTC for
//! `compute_80` and `compute_90`, and every kernel in the Rust side's kernel
//! table (`kernels::expected_kernels`: name and the byte size of each
//! argument its launcher passes, fixed by the launcher's types) is an entry
//! of the PTX of its file with exactly that parameter list, and the PTX has
//! no entry the table lacks.
//!
//! Without libnvrtc on the loader path the tests print a skip line and pass,
//! unless `TENSORSCOPE_REQUIRE_NVRTC=1` (set by `.ci/nvrtc-check.sh`), which
//! turns a missing NVRTC into a failure.
#![cfg(feature = "cuda")]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use tensorscope::backend::cuda::kernels;

const ARCHS: [&str; 2] = ["compute_80", "compute_90"];

fn nvrtc_or_skip(test: &str) -> bool {
    if kernels::nvrtc_present() {
        return true;
    }
    let ld = std::env::var("LD_LIBRARY_PATH").unwrap_or_default();
    if std::env::var("TENSORSCOPE_REQUIRE_NVRTC").as_deref() == Ok("1") {
        panic!("TENSORSCOPE_REQUIRE_NVRTC=1 but libnvrtc could not be loaded (LD_LIBRARY_PATH={ld:?}); run .ci/nvrtc-check.sh");
    }
    eprintln!("skipped {test}: libnvrtc not found (LD_LIBRARY_PATH={ld:?}); .ci/nvrtc-check.sh installs it and runs this check");
    false
}

fn kernel_files() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("kernels");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "cu"))
        .collect();
    files.sort();
    files
}

/// One compilation: the file, the architecture, and the PTX or NVRTC's log.
struct Compiled {
    file: String,
    arch: &'static str,
    result: Result<String, String>,
}

/// Every kernel file compiled for every architecture, once per test binary
/// (two tests read it; the second waits for the first to compile).
fn compiled() -> &'static [Compiled] {
    static ALL: OnceLock<Vec<Compiled>> = OnceLock::new();
    ALL.get_or_init(|| {
        let files = kernel_files();
        assert!(!files.is_empty(), "no kernels/*.cu found");
        let jobs: Vec<(String, String, &'static str)> = files
            .iter()
            .flat_map(|p| {
                let name = p.file_name().unwrap().to_string_lossy().into_owned();
                let body = std::fs::read_to_string(p).unwrap();
                ARCHS.map(|a| (name.clone(), body.clone(), a))
            })
            .collect();
        // NVRTC programs are independent: compile on two threads.
        std::thread::scope(|s| {
            let handles: Vec<_> = jobs
                .chunks(jobs.len().div_ceil(2))
                .map(|chunk| {
                    s.spawn(move || {
                        chunk
                            .iter()
                            .map(|(f, b, a)| Compiled {
                                file: f.clone(),
                                arch: a,
                                result: kernels::compile(f, b, a),
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().unwrap())
                .collect()
        })
    })
}

#[test]
fn every_kernel_file_compiles_for_compute_80_and_90() {
    if !nvrtc_or_skip("every_kernel_file_compiles_for_compute_80_and_90") {
        return;
    }
    let mut failures = Vec::new();
    for c in compiled() {
        match &c.result {
            Err(log) => failures.push(format!("kernels/{} for {}:\n{log}", c.file, c.arch)),
            Ok(ptx) => eprintln!(
                "kernels/{} {}: ok, {} kernels",
                c.file,
                c.arch,
                ptx.matches(".entry ").count()
            ),
        }
    }
    assert!(
        failures.is_empty(),
        "NVRTC {:?}: {} failure(s):\n{}",
        kernels::nvrtc_version(),
        failures.len(),
        failures.join("\n\n")
    );
}

/// The byte size of a PTX parameter type (`.u64`, `.f32`, `.b8`, ...).
fn ptx_type_size(ty: &str) -> Option<usize> {
    let bits: usize = ty
        .strip_prefix(".u")
        .or_else(|| ty.strip_prefix(".s"))
        .or_else(|| ty.strip_prefix(".b"))
        .or_else(|| ty.strip_prefix(".f"))?
        .parse()
        .ok()?;
    matches!(bits, 8 | 16 | 32 | 64).then_some(bits / 8)
}

/// Every `.entry` of a PTX module with the byte size of each parameter, in
/// order: `.param .u64 name_param_1` is 8, `.param .align 8 .b8
/// name_param_0[200]` (a struct passed by value) is 200.
fn ptx_entries(ptx: &str) -> Result<BTreeMap<String, Vec<usize>>, String> {
    let mut out = BTreeMap::new();
    for part in ptx.split(".entry ").skip(1) {
        let open = part.find('(').ok_or("an .entry without '('")?;
        let name = part[..open].trim().to_string();
        let close = part.find(')').ok_or_else(|| format!("{name}: no ')'"))?;
        let mut sizes = Vec::new();
        for param in part[open + 1..close].split(',') {
            let toks: Vec<&str> = param.split_whitespace().collect();
            if toks.is_empty() {
                continue;
            }
            if toks[0] != ".param" {
                return Err(format!("{name}: unexpected parameter {param:?}"));
            }
            let elem = toks
                .iter()
                .find_map(|t| ptx_type_size(t))
                .ok_or_else(|| format!("{name}: no type in {param:?}"))?;
            let last = toks[toks.len() - 1];
            let count = match (last.find('['), last.find(']')) {
                (Some(a), Some(b)) => last[a + 1..b]
                    .parse::<usize>()
                    .map_err(|e| format!("{name}: {param:?}: {e}"))?,
                _ => 1,
            };
            sizes.push(elem * count);
        }
        out.insert(name, sizes);
    }
    Ok(out)
}

/// Compares the kernel table's rows for `file` (name, byte size of each
/// argument the Rust side passes) with the PTX's entries: every row must be
/// an entry with the same parameter count and sizes, and every entry a row.
fn check_parameters(
    what: &str,
    ptx: &BTreeMap<String, Vec<usize>>,
    table: &[(String, Vec<usize>)],
) -> Vec<String> {
    let mut failures = Vec::new();
    for (name, rust) in table {
        match ptx.get(name) {
            None => failures.push(format!(
                "{what}: no kernel named {name}, which the Rust side launches"
            )),
            Some(p) if p != rust => failures.push(format!(
                "{what}: {name} takes {} parameter(s) of {p:?} bytes in the PTX, the Rust launcher passes {} of {rust:?}",
                p.len(),
                rust.len()
            )),
            Some(_) => {}
        }
    }
    for name in ptx.keys() {
        if !table.iter().any(|(n, _)| n == name) {
            failures.push(format!(
                "{what}: kernel {name} is not in the kernel table (src/backend/cuda/kernels.rs): add a constructor with its parameter types"
            ));
        }
    }
    failures
}

#[test]
fn every_launch_passes_what_the_ptx_parameter_list_takes() {
    if !nvrtc_or_skip("every_launch_passes_what_the_ptx_parameter_list_takes") {
        return;
    }
    let mut failures = Vec::new();
    let mut checked = 0;
    for c in compiled() {
        let Ok(ptx) = &c.result else {
            continue; // reported by every_kernel_file_compiles_for_compute_80_and_90
        };
        let what = format!("kernels/{} for {}", c.file, c.arch);
        let table = kernels::expected_kernels(&c.file)
            .unwrap_or_else(|| panic!("kernels/{} has no kernel table", c.file));
        let entries = ptx_entries(ptx).unwrap_or_else(|e| panic!("{what}: {e}"));
        failures.extend(check_parameters(&what, &entries, &table));
        checked += table.len();
    }
    assert!(checked > 0, "no kernel was checked");
    eprintln!("{checked} (kernel, architecture) parameter lists checked");
    assert!(
        failures.is_empty(),
        "{} mismatch(es):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The parser and the comparison on a handwritten PTX header (no NVRTC
/// needed): they read a struct by value, pointers and scalars, and report
/// a wrong size, a wrong count, a missing kernel and an unlisted one.
#[test]
fn the_parameter_check_catches_wrong_sizes_and_counts() {
    let ptx = "
.visible .entry k1(
\t.param .align 8 .b8 k1_param_0[200],
\t.param .u64 k1_param_1,
\t.param .u64 .ptr .align 1 k1_param_2,
\t.param .u32 k1_param_3,
\t.param .f64 k1_param_4
)
{ ret; }
.visible .entry k2()
{ ret; }
";
    let e = ptx_entries(ptx).unwrap();
    assert_eq!(e["k1"], vec![200, 8, 8, 4, 8]);
    assert_eq!(e["k2"], Vec::<usize>::new());
    let row = |n: &str, s: &[usize]| (n.to_string(), s.to_vec());
    let good = [row("k1", &[200, 8, 8, 4, 8]), row("k2", &[])];
    assert!(check_parameters("t", &e, &good).is_empty());
    let size = [row("k1", &[200, 8, 8, 8, 8]), row("k2", &[])];
    let f = check_parameters("t", &e, &size);
    assert!(f.len() == 1 && f[0].contains("k1 takes 5"), "{f:?}");
    let count = [row("k1", &[200, 8, 8, 4]), row("k2", &[])];
    let f = check_parameters("t", &e, &count);
    assert!(f.len() == 1 && f[0].contains("passes 4"), "{f:?}");
    let missing = [row("k1", &[200, 8, 8, 4, 8]), row("k3", &[])];
    let f = check_parameters("t", &e, &missing);
    assert_eq!(f.len(), 2, "{f:?}");
    assert!(f[0].contains("no kernel named k3") && f[1].contains("k2 is not in the kernel table"));
}

#[test]
fn every_kernel_file_is_embedded_and_every_embedded_file_exists() {
    let on_disk: Vec<String> = kernel_files()
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    let embedded = kernels::embedded_files();
    for f in &on_disk {
        assert!(
            embedded.contains(&f.as_str()),
            "kernels/{f} exists but src/backend/cuda/kernels.rs does not embed it"
        );
    }
    for f in &embedded {
        assert!(
            on_disk.iter().any(|d| d == f),
            "kernels/{f} is embedded but missing"
        );
    }
}

#[test]
fn a_syntax_error_is_reported_with_file_and_line() {
    if !nvrtc_or_skip("a_syntax_error_is_reported_with_file_and_line") {
        return;
    }
    let bad = "KERNEL void broken(float* x) {\n    x[0] = 1.0f\n}\n";
    let log = kernels::compile("broken.cu", bad, "compute_90").unwrap_err();
    assert!(
        log.contains("broken.cu(2)") || log.contains("broken.cu(3)"),
        "{log}"
    );
    assert!(log.contains("error"), "{log}");
}
