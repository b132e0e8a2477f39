//! The GPU-free CUDA check: every `kernels/*.cu` compiles with NVRTC for
//! `compute_80` and `compute_90`, and every kernel name the Rust side can
//! launch is an entry of the PTX of its file.
//!
//! Without libnvrtc on the loader path the tests print a skip line and pass,
//! unless `TENSORSCOPE_REQUIRE_NVRTC=1` (set by `.ci/nvrtc-check.sh`), which
//! turns a missing NVRTC into a failure.
#![cfg(feature = "cuda")]

use std::path::{Path, PathBuf};
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

#[test]
fn every_kernel_file_compiles_for_compute_80_and_90() {
    if !nvrtc_or_skip("every_kernel_file_compiles_for_compute_80_and_90") {
        return;
    }
    let files = kernel_files();
    assert!(!files.is_empty(), "no kernels/*.cu found");
    let jobs: Vec<(String, String, &str)> = files
        .iter()
        .flat_map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            let body = std::fs::read_to_string(p).unwrap();
            ARCHS.map(|a| (name.clone(), body.clone(), a))
        })
        .collect();
    // NVRTC programs are independent: compile on two threads.
    let results: Vec<(String, &str, Result<String, String>)> = std::thread::scope(|s| {
        let handles: Vec<_> = jobs
            .chunks(jobs.len().div_ceil(2))
            .map(|chunk| {
                s.spawn(move || {
                    chunk
                        .iter()
                        .map(|(f, b, a)| (f.clone(), *a, kernels::compile(f, b, a)))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    let mut failures = Vec::new();
    for (file, arch, r) in &results {
        match r {
            Err(log) => failures.push(format!("kernels/{file} for {arch}:\n{log}")),
            Ok(ptx) => {
                let entries = ptx.matches(".entry ").count();
                eprintln!("kernels/{file} {arch}: ok, {entries} kernels");
                if let Some(names) = kernels::expected_kernels(file) {
                    for n in names {
                        if !ptx.contains(&format!(".entry {n}(")) {
                            failures.push(format!(
                                "kernels/{file} for {arch}: no kernel named {n}, which the Rust side launches"
                            ));
                        }
                    }
                }
            }
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
