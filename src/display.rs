//! Display: a PyTorch-like printout that truncates large tensors (the
//! format is documented on the `Display` impl of [`Tensor`]).

use crate::device::Device;
use crate::dtype::DType;
use crate::error::Result;
use crate::tensor::Tensor;
use std::fmt;

const THRESHOLD: usize = 1000;
const EDGE: usize = 3;
const LINEWIDTH: usize = 80;
const PRECISION: usize = 4;

/// A PyTorch-like printout: `format!("{t}")` follows `torch.Tensor.__repr__`
/// with PyTorch's default print options (precision 4, threshold 1000, 3 edge
/// items, line width 80):
///
/// ```
/// # use tensorscope::{Tensor, DType, Device};
/// let x = Tensor::from_slice(&[1.0f32, 2., 3., 4.], &[2, 2], Device::Cpu)?;
/// assert_eq!(x.to_string(), "tensor([[1., 2.],\n        [3., 4.]])");
/// let y = Tensor::from_slice(&[1.5f64, -0.25], &[2], Device::Cpu)?;
/// assert_eq!(y.to_string(), "tensor([ 1.5000, -0.2500], dtype=float64)");
/// assert_eq!(Tensor::scalar(3.5f32, Device::Cpu)?.to_string(), "tensor(3.5000)");
/// # Ok::<(), tensorscope::Error>(())
/// ```
///
/// The format, precisely:
///
/// * **Floats** share one style per tensor, chosen from its finite non-zero
///   values: all integral: `1.`, `-3.`; otherwise fixed with 4 decimals
///   (`0.2500`); scientific (`1.0000e+08`) when the largest magnitude exceeds
///   1e8, when largest / smallest exceeds 1000, or (non-integral values) when
///   the smallest is below 1e-4. Every element is right-aligned to the widest.
///   Non-finite values print as `nan`, `inf`, `-inf`. A precision given to the
///   formatter (`{:.2}`) replaces the 4 decimals.
/// * **Integers** print as integers; **bools** as `True` / `False` (PyTorch's
///   spelling), right-aligned to the widest.
/// * **Suffixes**: `dtype=NAME` (the names of [`DType::name`], e.g.
///   `dtype=int32`, without PyTorch's `torch.` prefix) unless the dtype is
///   float32, int64 or bool, as in PyTorch; `device=cuda:0` for a tensor not
///   on the CPU. Suffixes move to a new line when the line would pass 80
///   columns.
/// * **Empty tensors** print `tensor([])`, with `size=(0, 3)` when the rank is
///   not 1 and `dtype=...` unless float32 (nothing shows an empty tensor's type).
/// * **Large tensors** (more than 1000 elements) show the first and last 3
///   entries of every dimension longer than 6, with `...` between them. Only
///   those entries are copied for printing.
/// * Rows wrap at 80 columns, continuing under the first element.
/// * A tensor whose values cannot be read (its device unavailable) prints
///   `tensor(<unprintable: REASON>)`: `Display` never panics.
impl fmt::Display for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match render(self, f.precision().unwrap_or(PRECISION)) {
            Ok(s) => f.write_str(&s),
            Err(e) => write!(f, "tensor(<unprintable: {e}>)"),
        }
    }
}

fn render(t: &Tensor, precision: usize) -> Result<String> {
    let prefix = "tensor(";
    let indent = prefix.len();
    let mut suffixes = Vec::new();
    if t.device() != Device::Cpu {
        suffixes.push(format!("device={}", t.device()));
    }
    let body = if t.numel() == 0 {
        if t.rank() != 1 {
            let dims: Vec<String> = t.shape().iter().map(|d| d.to_string()).collect();
            suffixes.push(format!("size=({})", dims.join(", ")));
        }
        if t.dtype() != DType::F32 {
            suffixes.push(format!("dtype={}", t.dtype()));
        }
        "[]".to_string()
    } else {
        if !matches!(t.dtype(), DType::F32 | DType::I64 | DType::Bool) {
            suffixes.push(format!("dtype={}", t.dtype()));
        }
        body(t, indent, precision)?
    };
    Ok(add_suffixes(format!("{prefix}{body}"), &suffixes, indent))
}

/// PyTorch's `_add_suffixes`.
fn add_suffixes(s: String, suffixes: &[String], indent: usize) -> String {
    let mut out = s;
    let nl = out.rfind('\n').map_or(-1, |p| p as isize);
    let mut last_line_len = (out.len() as isize - nl + 1) as usize;
    for suffix in suffixes {
        if last_line_len + suffix.len() + 2 > LINEWIDTH {
            out.push_str(",\n");
            out.push_str(&" ".repeat(indent));
            out.push_str(suffix);
            last_line_len = indent + suffix.len();
        } else {
            out.push_str(", ");
            out.push_str(suffix);
            last_line_len += suffix.len() + 2;
        }
    }
    out.push(')');
    out
}

/// The first and last `EDGE` entries of every dimension longer than
/// `2 * EDGE` (when `on`), copied to the CPU.
fn summarize(t: &Tensor, d: usize, on: bool) -> Result<Tensor> {
    if d == t.rank() {
        return t.to_device(Device::Cpu);
    }
    let n = t.shape()[d];
    if on && n > 2 * EDGE {
        let a = summarize(&t.narrow(d as isize, 0, EDGE)?, d + 1, on)?;
        let b = summarize(&t.narrow(d as isize, n - EDGE, EDGE)?, d + 1, on)?;
        Tensor::cat(&[&a, &b], d as isize)
    } else {
        summarize(t, d + 1, on)
    }
}

fn body(t: &Tensor, indent: usize, precision: usize) -> Result<String> {
    let on = t.numel() > THRESHOLD;
    let data = summarize(t, 0, on)?;
    let cut: Vec<bool> = t.shape().iter().map(|&n| on && n > 2 * EDGE).collect();
    let (strs, width) = if t.dtype().is_float() {
        format_floats(&data.to_vec::<f64>()?, precision)
    } else if t.dtype() == DType::Bool {
        let v = data.to_vec::<bool>()?;
        pad(v
            .iter()
            .map(|&b| if b { "True" } else { "False" }.to_string()))
    } else {
        pad(data.to_vec::<i64>()?.iter().map(|v| v.to_string()))
    };
    Ok(tensor_str(&strs, data.shape(), &cut, indent, width))
}

/// Right-aligns every string to the widest; returns them and that width.
fn pad(it: impl Iterator<Item = String>) -> (Vec<String>, usize) {
    let v: Vec<String> = it.collect();
    let w = v.iter().map(|s| s.len()).max().unwrap_or(1).max(1);
    (v.into_iter().map(|s| format!("{s:>w$}")).collect(), w)
}

/// Python's spelling of a non-finite float.
fn non_finite(v: f64) -> String {
    if v.is_nan() {
        "nan".into()
    } else if v > 0.0 {
        "inf".into()
    } else {
        "-inf".into()
    }
}

/// Python's `f"{v:.{p}e}"`: a signed exponent of at least two digits.
fn sci(v: f64, p: usize) -> String {
    if !v.is_finite() {
        return non_finite(v);
    }
    let s = format!("{v:.p$e}");
    let (mant, exp) = s.split_once('e').unwrap_or((&s, "0"));
    let e: i32 = exp.parse().unwrap_or(0);
    let sign = if e < 0 { '-' } else { '+' };
    format!("{mant}e{sign}{:02}", e.abs())
}

/// PyTorch's `_Formatter` for a float tensor: one style for all values.
/// Returns the strings and the formatter's width.
fn format_floats(vals: &[f64], p: usize) -> (Vec<String>, usize) {
    let nz: Vec<f64> = vals
        .iter()
        .copied()
        .filter(|v| v.is_finite() && *v != 0.0)
        .collect();
    let (mut int_mode, mut sci_mode) = (true, false);
    if !nz.is_empty() {
        let abs = nz.iter().map(|v| v.abs());
        let min = abs.clone().fold(f64::INFINITY, f64::min);
        let max = abs.fold(0.0, f64::max);
        int_mode = nz.iter().all(|v| v.ceil() == *v);
        sci_mode = max / min > 1000.0 || max > 1.0e8 || (!int_mode && min < 1.0e-4);
    }
    let one = |v: f64| -> String {
        if sci_mode {
            sci(v, p)
        } else if !v.is_finite() {
            non_finite(v)
        } else if int_mode {
            format!("{v:.0}.")
        } else {
            format!("{v:.p$}")
        }
    };
    // The width comes from the finite non-zero values only (as in PyTorch).
    let width = nz.iter().map(|&v| one(v).len()).max().unwrap_or(1).max(1);
    let strs = vals
        .iter()
        .map(|&v| format!("{:>width$}", one(v)))
        .collect();
    (strs, width)
}

/// PyTorch's `_tensor_str_with_formatter` over row-major formatted values of
/// the (summarized) `shape`; `cut[d]` marks a summarized dimension (6
/// entries: 3 from the front, 3 from the back).
fn tensor_str(
    vals: &[String],
    shape: &[usize],
    cut: &[bool],
    indent: usize,
    width: usize,
) -> String {
    match shape.len() {
        0 => vals[0].clone(),
        1 => {
            let mut items: Vec<&str> = vals.iter().map(|s| s.as_str()).collect();
            if cut[0] {
                items.insert(EDGE, " ...");
            }
            let per_line = ((LINEWIDTH.saturating_sub(indent)) / (width + 2)).max(1);
            let lines: Vec<String> = items.chunks(per_line).map(|c| c.join(", ")).collect();
            format!(
                "[{}]",
                lines.join(&format!(",\n{}", " ".repeat(indent + 1)))
            )
        }
        r => {
            let inner = crate::layout::numel(&shape[1..]);
            let mut slices: Vec<String> = (0..shape[0])
                .map(|i| {
                    tensor_str(
                        &vals[i * inner..(i + 1) * inner],
                        &shape[1..],
                        &cut[1..],
                        indent + 1,
                        width,
                    )
                })
                .collect();
            if cut[0] {
                slices.insert(EDGE, "...".to_string());
            }
            let sep = format!(",{}{}", "\n".repeat(r - 1), " ".repeat(indent + 1));
            format!("[{}]", slices.join(&sep))
        }
    }
}
