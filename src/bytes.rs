//! Byte counts as people read them: the one formatting every message,
//! summary and report uses (the error messages included, so it sits below
//! the allocator).

/// Formats a byte count the way PyTorch's summary does (`B`, `KiB`, `MiB`, `GiB`).
pub fn fmt_bytes(b: usize) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u < units.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.2} {}", units[u])
    }
}
