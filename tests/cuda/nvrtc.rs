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

/// `f` over `jobs` on two threads (CI has two cores), results in order.
fn on_two_threads<J: Sync, R: Send>(jobs: &[J], f: impl Fn(&J) -> R + Sync) -> Vec<R> {
    let f = &f;
    std::thread::scope(|s| {
        let handles: Vec<_> = jobs
            .chunks(jobs.len().div_ceil(2).max(1))
            .map(|chunk| s.spawn(move || chunk.iter().map(f).collect::<Vec<_>>()))
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    })
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
        on_two_threads(&jobs, |(f, b, a)| Compiled {
            file: f.clone(),
            arch: a,
            result: kernels::compile(f, b, a),
        })
    })
}

#[test]
fn every_kernel_file_compiles_for_compute_80_and_90() {
    let _shared = crate::common::shared();
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

/// The portable limit on a launch's parameter bytes (CUDA 12.1 raised it to
/// 32,764 on Volta and later, but only where driver and PTX both know it).
const PARAM_LIMIT: usize = 4096;

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
        let total: usize = rust.iter().sum();
        if total > PARAM_LIMIT {
            failures.push(format!(
                "{what}: {name} passes {total} bytes of parameters, over the {PARAM_LIMIT}-byte kernel parameter limit"
            ));
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
    let _shared = crate::common::shared();
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
    let _shared = crate::common::shared();
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
    let big =
        ptx_entries(".visible .entry k4(\n\t.param .align 8 .b8 k4_param_0[4100]\n)\n{ ret; }")
            .unwrap();
    let f = check_parameters("t", &big, &[row("k4", &[4100])]);
    assert!(
        f.len() == 1 && f[0].contains("4100 bytes of parameters"),
        "{f:?}"
    );
}

#[test]
fn every_kernel_file_is_embedded_and_every_embedded_file_exists() {
    let _shared = crate::common::shared();
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
    let _shared = crate::common::shared();
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

// ------------------------------------------------------------------ ptxas ---
//
// NVRTC only turns C++ into PTX: inline `asm` strings pass through it
// unchecked, and register or stack use is decided later, by the driver's
// assembler, on the GPU. So the PTX of every file is also assembled here
// with ptxas (from the `nvidia-cuda-nvcc` wheel, which `.ci/nvrtc-env.sh`
// installs and names in TENSORSCOPE_PTXAS) for sm_80 and sm_90, the real
// architectures of the two virtual ones above.

/// ptxas, or `None` (with a printed skip line) where it is not installed;
/// under `TENSORSCOPE_REQUIRE_NVRTC=1` (CI) a missing ptxas is a failure.
fn ptxas_or_skip(test: &str) -> Option<PathBuf> {
    let found = std::env::var_os("TENSORSCOPE_PTXAS")
        .map(PathBuf::from)
        .filter(|p| p.is_file());
    if found.is_none() {
        if std::env::var("TENSORSCOPE_REQUIRE_NVRTC").as_deref() == Ok("1") {
            panic!("TENSORSCOPE_REQUIRE_NVRTC=1 but TENSORSCOPE_PTXAS does not name ptxas; source .ci/nvrtc-env.sh");
        }
        eprintln!("skipped {test}: TENSORSCOPE_PTXAS is not set (.ci/nvrtc-env.sh installs ptxas and sets it)");
    }
    found
}

/// What ptxas reported for one kernel.
#[derive(Debug, Default, PartialEq)]
struct Sass {
    stack: usize,
    spill_stores: usize,
    spill_loads: usize,
    registers: usize,
}

/// Each kernel's figures, or ptxas's output when it failed.
type Assembled = Result<BTreeMap<String, Sass>, String>;

/// Assembles `ptx` for `sm` (e.g. `"sm_90"`) with `ptxas -v`. `Ok` holds
/// each kernel's figures, `Err` ptxas's output when it fails.
fn assemble(
    ptxas: &Path,
    ptx: &str,
    sm: &str,
    tag: &str,
) -> Result<BTreeMap<String, Sass>, String> {
    let dir = std::env::temp_dir().join(format!("tensorscope-ptxas-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let file = dir.join(format!("{tag}.{sm}.ptx"));
    std::fs::write(&file, ptx).map_err(|e| e.to_string())?;
    let out = std::process::Command::new(ptxas)
        .args([&format!("-arch={sm}"), "-v", "-o", "/dev/null"])
        .arg(&file)
        .output()
        .map_err(|e| format!("running {}: {e}", ptxas.display()))?;
    let _ = std::fs::remove_file(&file);
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if !out.status.success() {
        return Err(log);
    }
    parse_ptxas(&log)
}

/// The figures of `ptxas -v` output, per kernel: the `Function properties
/// for NAME` line is followed by `N bytes stack frame, S bytes spill stores,
/// L bytes spill loads`, and a later `Used R registers` line closes it.
fn parse_ptxas(log: &str) -> Result<BTreeMap<String, Sass>, String> {
    let num_before = |line: &str, word: &str| -> Option<usize> {
        let at = line.find(word)?;
        line[..at].split_whitespace().last()?.parse().ok()
    };
    let mut out = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in log.lines() {
        if let Some(rest) = line.split("Function properties for ").nth(1) {
            let name = rest.trim().to_string();
            out.insert(name.clone(), Sass::default());
            current = Some(name);
        } else if let Some(name) = &current {
            let s = out.get_mut(name).unwrap();
            if line.contains("bytes stack frame") {
                s.stack = num_before(line, "bytes stack frame").ok_or(line)?;
                s.spill_stores = num_before(line, "bytes spill stores").ok_or(line)?;
                s.spill_loads = num_before(line, "bytes spill loads").ok_or(line)?;
            } else if line.contains("Used ") && line.contains(" registers") {
                let at = line.find("Used ").unwrap() + 5;
                s.registers = line[at..]
                    .split_whitespace()
                    .next()
                    .and_then(|r| r.parse().ok())
                    .ok_or(line)?;
                current = None;
            }
        }
    }
    Ok(out)
}

/// Stack a kernel may use: the slow path of f32 sin/cos keeps a few words
/// there (32-40 bytes). A geometry struct (at least 208 bytes) copied out of
/// the parameter space because a kernel indexes it dynamically would not fit.
const MAX_STACK: usize = 64;

#[test]
fn every_kernel_assembles_for_sm_80_and_sm_90_without_spills() {
    let _shared = crate::common::shared();
    if !nvrtc_or_skip("every_kernel_assembles_for_sm_80_and_sm_90_without_spills") {
        return;
    }
    let Some(ptxas) = ptxas_or_skip("every_kernel_assembles_for_sm_80_and_sm_90_without_spills")
    else {
        return;
    };
    let jobs: Vec<&Compiled> = compiled().iter().filter(|c| c.result.is_ok()).collect();
    assert!(!jobs.is_empty());
    // ptxas runs are independent: two threads, as for NVRTC above.
    let results: Vec<(String, Assembled)> = on_two_threads(&jobs, |c| {
        let sm = c.arch.replace("compute_", "sm_");
        let ptx = c.result.as_ref().unwrap();
        let what = format!("kernels/{} for {sm}", c.file);
        (what, assemble(&ptxas, ptx, &sm, &c.file))
    });
    let mut failures = Vec::new();
    let mut kernels_seen = 0;
    let mut max_regs = 0;
    for (what, r) in &results {
        match r {
            Err(log) => failures.push(format!("{what}: ptxas failed:\n{log}")),
            Ok(map) => {
                kernels_seen += map.len();
                for (name, s) in map {
                    max_regs = max_regs.max(s.registers);
                    if s.spill_stores > 0 || s.spill_loads > 0 || s.stack > MAX_STACK {
                        failures.push(format!(
                            "{what}: {name}: {s:?} (no spills, stack <= {MAX_STACK} bytes)"
                        ));
                    }
                }
            }
        }
    }
    eprintln!(
        "{} PTX modules assembled, {kernels_seen} kernels, at most {max_regs} registers per thread",
        results.len()
    );
    assert!(kernels_seen > 0, "ptxas reported no kernel");
    assert!(
        failures.is_empty(),
        "{} failure(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// An `asm` typo that NVRTC accepts and only the assembler rejects: the
/// reason for the check above.
#[test]
fn ptxas_rejects_an_inline_asm_error_that_nvrtc_accepts() {
    let _shared = crate::common::shared();
    if !nvrtc_or_skip("ptxas_rejects_an_inline_asm_error_that_nvrtc_accepts") {
        return;
    }
    let Some(ptxas) = ptxas_or_skip("ptxas_rejects_an_inline_asm_error_that_nvrtc_accepts") else {
        return;
    };
    let bad = "KERNEL void badasm(float* x) {\n    float f;\n    asm(\"cvt.rn.f16.f99 %0, %1;\" : \"=f\"(f) : \"f\"(x[0]));\n    x[0] = f;\n}\n";
    let ptx = kernels::compile("badasm.cu", bad, "compute_90").expect("NVRTC passes asm through");
    let log = assemble(&ptxas, &ptx, "sm_90", "badasm").unwrap_err();
    assert!(log.contains("error"), "{log}");
    let good = "KERNEL void goodasm(float* x) {\n    u16 h;\n    asm(\"cvt.rn.f16.f32 %0, %1;\" : \"=h\"(h) : \"f\"(x[0]));\n    x[0] = (float)h;\n}\n";
    let ptx = kernels::compile("goodasm.cu", good, "compute_90").unwrap();
    let sass = assemble(&ptxas, &ptx, "sm_90", "goodasm").unwrap();
    assert!(sass["goodasm"].registers > 0, "{sass:?}");
}

#[test]
fn the_ptxas_report_parser_reads_every_figure() {
    let _shared = crate::common::shared();
    let log = "ptxas info    : 0 bytes gmem\n\
ptxas info    : Compiling entry function 'k1' for 'sm_90'\n\
ptxas info    : Function properties for k1\n\
    40 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads\n\
ptxas info    : Used 30 registers, used 0 barriers, 40 bytes cumulative stack size\n\
ptxas info    : Compiling entry function 'k2' for 'sm_90'\n\
ptxas info    : Function properties for k2\n\
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n\
ptxas info    : Used 16 registers, used 1 barriers, 1024 bytes smem\n";
    let m = parse_ptxas(log).unwrap();
    assert_eq!(
        m["k1"],
        Sass {
            stack: 40,
            spill_stores: 8,
            spill_loads: 12,
            registers: 30
        }
    );
    assert_eq!(
        m["k2"],
        Sass {
            stack: 0,
            spill_stores: 0,
            spill_loads: 0,
            registers: 16
        }
    );
}
