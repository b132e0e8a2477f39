//! Peak memory of a row in a fresh process, shared by benches/e2e.rs and
//! benches/interop.rs (bench/torch_timing.py is the PyTorch side): the
//! bench runs itself again with `--peak ROW`, and that process prints its
//! resident set's high-water mark over its size before the row's setup.

use super::timing::R;

/// A `/proc/self/status` field (`"VmRSS:"`, `"VmHWM:"`) in bytes; 0 where
/// it cannot be read.
pub fn status_bytes(field: &str) -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .unwrap_or(0)
        * 1024
}

/// Prints the growth of the resident set's peak since `before` (a
/// `status_bytes("VmRSS:")` taken before the setup): `--peak`'s output.
pub fn print_peak_since(before: u64) {
    println!("{}", status_bytes("VmHWM:").saturating_sub(before));
}

/// `row`'s peak in a fresh process (this binary with `--peak ROW`); its
/// stderr is passed on, and the figure printed `over` what.
pub fn peak_in_fresh_process(row: &str, over: &str) -> R<u64> {
    let out = std::process::Command::new(std::env::current_exe()?)
        .args(["--peak", row])
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let bytes = text
        .trim()
        .parse::<u64>()
        .map_err(|e| format!("--peak {row}: {e}: {text:?}"))?;
    eprint!("{}", String::from_utf8_lossy(&out.stderr));
    eprintln!(
        "    peak over the process before {over}: {:.1} MiB",
        bytes as f64 / 1048576.0
    );
    Ok(bytes)
}
