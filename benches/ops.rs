//! The op matrix of issue 14 (item 7): tensorscope's side.
//!
//! Every elementwise unary and binary op, scalar ops, reductions over each
//! dim and over all, softmax, log_softmax, LayerNorm, cross-entropy,
//! `linear` at a skinny and a square shape, matmul, batched matmul,
//! `index_select`, `Embedding`, transpose + contiguous and the attention
//! block of the issue, on the CPU in f32, at three sizes:
//!
//! | size   | elementwise, reductions, norms | matrix ops (matmul, linear, transpose) |
//! |--------|--------------------------------|----------------------------------------|
//! | small  | `[8, 8]` (64 elements)         | `[64, 64]`                             |
//! | medium | `[512, 1024]`                  | `[512, 1024]` by `[1024, 1024]`        |
//! | large  | `[4096, 4096]`                 | `[4096, 4096]` by `[4096, 4096]`       |
//!
//! Ops with one fixed shape (the issue's: skinny linear, batched matmul,
//! index_select, embedding, cross-entropy, attention) are tagged `medium`,
//! and a few forward + backward rows (`NAME_fwd_bwd`) run at the medium size.
//! Forward rows run under `no_grad`, as `bench/torch_ops.py` does.
//!
//! `bench/torch_ops.py` is the PyTorch twin: the same rows, shapes, input
//! distributions and sample rule (`timing::measure_budget`), and
//! `bench/run_ops.sh` runs both in one run and writes `bench/results/ops.md`.
//!
//! ```text
//! cargo bench --bench ops -- [--json PATH] [--filter A,B,..]
//! ```
//!
//! `--filter` keeps the rows whose name (`op/size`) contains any of the
//! comma-separated strings. A new unary op is one line in [`unary_ops`]
//! (and one in `UNARY` of `bench/torch_ops.py`).

use std::hint::black_box;
use tensorscope::autograd::no_grad_guard;
use tensorscope::nn::{
    cross_entropy, scaled_dot_product_attention, scaled_dot_product_attention_with, CausalVariant,
    Embedding, LayerNorm, Module, SdpaKernel, SdpaOptions,
};
use tensorscope::{ConvOptions, DType, Device, Padding, PoolOptions, Tensor};

#[path = "common/timing.rs"]
mod timing;
use timing::{arg_after, filter_arg, fmt_s, measure_budget, write_json, Measured, R};

const CPU: Device = Device::Cpu;
const F32: DType = DType::F32;

/// A size class: the shapes and the timing budget of its rows.
#[derive(Clone, Copy)]
enum Size {
    Small,
    Medium,
    Large,
}

impl Size {
    const ALL: [Size; 3] = [Size::Small, Size::Medium, Size::Large];

    fn label(self) -> &'static str {
        match self {
            Size::Small => "small",
            Size::Medium => "medium",
            Size::Large => "large",
        }
    }

    /// `[rows, cols]` of the elementwise, reduction and norm rows.
    fn ew(self) -> [usize; 2] {
        match self {
            Size::Small => [8, 8],
            Size::Medium => [512, 1024],
            Size::Large => [4096, 4096],
        }
    }

    /// `(m, k, n)` of the matrix rows: `[m, k]` by `[k, n]`.
    fn mm(self) -> (usize, usize, usize) {
        match self {
            Size::Small => (64, 64, 64),
            Size::Medium => (512, 1024, 1024),
            Size::Large => (4096, 4096, 4096),
        }
    }

    /// Seconds of samples per row (one row's figure is their median) and
    /// the least number of samples.
    fn budget(self) -> (f64, usize) {
        match self {
            Size::Small => (0.15, 5),
            Size::Medium => (0.3, 5),
            Size::Large => (0.6, 3),
        }
    }
}

/// The input distribution of a unary op (the same in `bench/torch_ops.py`).
#[derive(Clone, Copy)]
enum Domain {
    /// `randn`.
    Any,
    /// `rand + 0.5`: in [0.5, 1.5), for ops defined on positive numbers.
    Pos,
}

type Unary = fn(&Tensor) -> tensorscope::Result<Tensor>;
type Binary = fn(&Tensor, &Tensor) -> tensorscope::Result<Tensor>;

/// Every elementwise unary op of `src/unary_table.rs`, plus `clamp`: the
/// row's name (PyTorch's), its input domain and the method.
fn unary_ops() -> Vec<(&'static str, Domain, Unary)> {
    use Domain::{Any, Pos};
    vec![
        ("neg", Any, Tensor::neg),
        ("abs", Any, Tensor::abs),
        ("exp", Any, Tensor::exp),
        ("log", Pos, Tensor::log),
        ("log1p", Pos, Tensor::log1p),
        ("log2", Pos, Tensor::log2),
        ("exp2", Any, Tensor::exp2),
        ("expm1", Any, Tensor::expm1),
        ("tan", Any, Tensor::tan),
        ("asin", Any, Tensor::asin),
        ("acos", Any, Tensor::acos),
        ("atan", Any, Tensor::atan),
        ("sinh", Any, Tensor::sinh),
        ("cosh", Any, Tensor::cosh),
        ("ceil", Any, Tensor::ceil),
        ("trunc", Any, Tensor::trunc),
        ("sqrt", Pos, Tensor::sqrt),
        ("rsqrt", Pos, Tensor::rsqrt),
        ("sin", Any, Tensor::sin),
        ("cos", Any, Tensor::cos),
        ("tanh", Any, Tensor::tanh),
        ("sigmoid", Any, Tensor::sigmoid),
        ("relu", Any, Tensor::relu),
        ("gelu", Any, Tensor::gelu),
        ("erf", Any, Tensor::erf),
        ("floor", Any, Tensor::floor),
        ("round", Any, Tensor::round),
        ("sign", Any, Tensor::sign),
        ("reciprocal", Pos, Tensor::reciprocal),
        ("square", Any, Tensor::square),
        ("clamp", Any, |x| x.clamp(Some(-0.5), Some(0.5))),
        ("silu", Any, Tensor::silu),
        ("softplus", Any, Tensor::softplus),
        ("gelu_tanh", Any, Tensor::gelu_tanh),
    ]
}

/// Unary ops that also get a forward + backward row at the medium size.
const UNARY_FWD_BWD: &[&str] = &["exp", "tanh", "sigmoid", "gelu", "erf", "silu", "gelu_tanh"];

/// Binary ops on two `[rows, cols]` operands (the first one is positive for
/// `pow`: `rand + 0.5`; every other operand is `randn`).
fn binary_ops() -> Vec<(&'static str, Binary)> {
    vec![
        ("add", Tensor::add),
        ("sub", Tensor::sub),
        ("mul", Tensor::mul),
        ("div", Tensor::div),
        ("pow", Tensor::pow),
        ("maximum", Tensor::maximum),
        ("minimum", Tensor::minimum),
        ("gt", Tensor::gt),
    ]
}

/// Ops with a scalar (`x OP s`; `pow_scalar` on a positive input).
fn scalar_ops() -> Vec<(&'static str, Domain, Unary)> {
    use Domain::{Any, Pos};
    vec![
        ("add_scalar", Any, |x| x.add_scalar(1.0)),
        ("mul_scalar", Any, |x| x.mul_scalar(3.0)),
        ("div_scalar", Any, |x| x.div_scalar(3.0)),
        ("rsub_scalar", Any, |x| x.rsub_scalar(1.0)),
        ("pow_scalar_1.5", Pos, |x| x.pow_scalar(1.5)),
    ]
}

/// Reductions and row-wise ops on a `[rows, cols]` input.
fn reduction_ops() -> Vec<(&'static str, Unary)> {
    vec![
        ("sum_dim0", |x| x.sum(&[0], false)),
        ("sum_dim1", |x| x.sum(&[1], false)),
        ("sum_all", |x| x.sum_all()),
        ("mean_dim0", |x| x.mean(&[0], false)),
        ("mean_dim1", |x| x.mean(&[1], false)),
        ("mean_all", |x| x.mean_all()),
        ("max_dim0", |x| x.max(&[0], false)),
        ("max_dim1", |x| x.max(&[1], false)),
        ("max_all", |x| x.max_all()),
        ("argmax_dim1", |x| x.argmax(1, false)),
        ("softmax", |x| x.softmax(-1)),
        ("log_softmax", |x| x.log_softmax(-1)),
    ]
}

/// The rows of one run, filtered by `--filter`.
struct Rows {
    filter: Vec<String>,
    out: Vec<Measured>,
}

impl Rows {
    fn want(&self, name: &str) -> bool {
        self.filter.is_empty() || self.filter.iter().any(|f| name.contains(f.as_str()))
    }

    /// Times `op` as the row `name/size` (budget of `size`); `what` is the shape.
    fn run(
        &mut self,
        name: &str,
        size: Size,
        what: String,
        mut op: impl FnMut() -> R<()>,
    ) -> R<()> {
        let full = format!("{name}/{}", size.label());
        if !self.want(&full) {
            return Ok(());
        }
        let (budget, min_reps) = size.budget();
        let m = measure_budget(leak(full), leak(what), budget, min_reps, &mut op)?;
        eprintln!(
            "{:<28} {:>12} ({} samples)",
            m.name,
            fmt_s(m.median()),
            m.samples.len()
        );
        self.out.push(m);
        Ok(())
    }
}

/// Row names and descriptions live as long as the process (a bench).
fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

fn input(shape: &[usize], d: Domain) -> R<Tensor> {
    Ok(match d {
        Domain::Any => Tensor::randn(shape, F32, CPU)?,
        Domain::Pos => Tensor::rand(shape, F32, CPU)?.add_scalar(0.5)?,
    })
}

/// `n` indices in `0..hi` (i64) from a fixed LCG (the indices' values do
/// not matter to the timing; `bench/torch_ops.py` draws them with randint).
fn indices(n: usize, hi: usize, shape: &[usize]) -> R<Tensor> {
    let mut s: u64 = 0x9E37_79B9_7F4A_7C15;
    let v: Vec<i64> = (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 33) % hi as u64) as i64
        })
        .collect();
    Ok(Tensor::from_vec(v, shape, CPU)?)
}

fn shape_str(s: &[usize]) -> String {
    format!("{s:?}").replace(' ', "")
}

/// Forward rows of one size class.
fn forward_rows(rows: &mut Rows, size: Size) -> R<()> {
    let _g = no_grad_guard();
    let sh = size.ew();
    let ews = shape_str(&sh);
    let any = input(&sh, Domain::Any)?;
    let pos = input(&sh, Domain::Pos)?;
    let other = input(&sh, Domain::Any)?;
    let pick = |d: Domain| match d {
        Domain::Any => &any,
        Domain::Pos => &pos,
    };

    for (name, d, f) in unary_ops() {
        let x = pick(d);
        rows.run(name, size, ews.clone(), || {
            black_box(f(x)?);
            Ok(())
        })?;
    }
    for (name, f) in binary_ops() {
        let a = if name == "pow" { &pos } else { &any };
        rows.run(name, size, format!("{ews} {name} {ews}"), || {
            black_box(f(a, &other)?);
            Ok(())
        })?;
    }
    let row = input(&[1, sh[1]], Domain::Any)?;
    let col = input(&[sh[0], 1], Domain::Any)?;
    for (name, b) in [("add_row", &row), ("add_col", &col)] {
        rows.run(
            name,
            size,
            format!("{ews} + {}", shape_str(b.shape())),
            || {
                black_box(any.add(b)?);
                Ok(())
            },
        )?;
    }
    for (name, d, f) in scalar_ops() {
        let x = pick(d);
        rows.run(name, size, ews.clone(), || {
            black_box(f(x)?);
            Ok(())
        })?;
    }
    let mask = other.gt_scalar(0.0)?;
    rows.run("masked_fill", size, format!("{ews}, bool mask"), || {
        black_box(any.masked_fill(&mask, f64::NEG_INFINITY)?);
        Ok(())
    })?;
    for (name, f) in reduction_ops() {
        rows.run(name, size, ews.clone(), || {
            black_box(f(&any)?);
            Ok(())
        })?;
    }
    let ln = LayerNorm::new(&[sh[1]])?;
    rows.run(
        "layer_norm",
        size,
        format!("{ews} over the last dim, affine"),
        || {
            black_box(ln.forward(&any)?);
            Ok(())
        },
    )?;
    drop((any, pos, other, row, col, mask));

    let (m, k, n) = size.mm();
    let a = input(&[m, k], Domain::Any)?;
    let b = input(&[k, n], Domain::Any)?;
    let w = input(&[n, k], Domain::Any)?;
    let bias = input(&[n], Domain::Any)?;
    rows.run("matmul", size, format!("[{m},{k}]@[{k},{n}]"), || {
        black_box(a.matmul(&b)?);
        Ok(())
    })?;
    rows.run(
        "linear",
        size,
        format!("x[{m},{k}] W[{n},{k}] + b[{n}]"),
        || {
            black_box(a.linear(&w, Some(&bias))?);
            Ok(())
        },
    )?;
    rows.run(
        "transpose_contiguous",
        size,
        format!("[{m},{k}].t().contiguous()"),
        || {
            black_box(a.t()?.contiguous()?);
            Ok(())
        },
    )?;
    Ok(())
}

/// The fixed-shape rows of the issue (tagged medium).
fn fixed_rows(rows: &mut Rows) -> R<()> {
    let _g = no_grad_guard();
    let size = Size::Medium;
    {
        let x = input(&[512, 1024], Domain::Any)?;
        let w = input(&[16, 1024], Domain::Any)?;
        let b = input(&[16], Domain::Any)?;
        rows.run(
            "linear_skinny",
            size,
            "x[512,1024] W[16,1024] + b[16]".into(),
            || {
                black_box(x.linear(&w, Some(&b))?);
                Ok(())
            },
        )?;
        let t = indices(512, 1024, &[512])?;
        rows.run(
            "cross_entropy",
            size,
            "logits [512,1024], targets [512], mean".into(),
            || {
                black_box(cross_entropy(&x, &t)?);
                Ok(())
            },
        )?;
    }
    {
        let a = input(&[64, 128, 64], Domain::Any)?;
        let b = input(&[64, 64, 128], Domain::Any)?;
        rows.run("bmm", size, "[64,128,64]@[64,64,128]".into(), || {
            black_box(a.matmul(&b)?);
            Ok(())
        })?;
    }
    {
        let table = input(&[50000, 256], Domain::Any)?;
        let idx = indices(512, 50000, &[512])?;
        rows.run(
            "index_select",
            size,
            "512 rows of [50000,256]".into(),
            || {
                black_box(table.index_select(0, &idx)?);
                Ok(())
            },
        )?;
        drop(table);
        let emb = Embedding::new(50000, 256)?;
        let tok = indices(512, 50000, &[16, 32])?;
        rows.run(
            "embedding",
            size,
            "Embedding(50000,256), idx [16,32]".into(),
            || {
                black_box(emb.forward(&tok)?);
                Ok(())
            },
        )?;
    }
    {
        let q = input(&[8, 4, 64, 64], Domain::Any)?;
        let k = input(&[8, 4, 64, 64], Domain::Any)?;
        let v = input(&[8, 4, 64, 64], Domain::Any)?;
        rows.run(
            "attention",
            size,
            "softmax(q k^T / 8) v, q,k,v [8,4,64,64]".into(),
            || {
                black_box(attention(&q, &k, &v)?);
                Ok(())
            },
        )?;
        rows.run(
            "sdpa",
            size,
            "scaled_dot_product_attention, q,k,v [8,4,64,64]".into(),
            || {
                black_box(scaled_dot_product_attention(&q, &k, &v)?);
                Ok(())
            },
        )?;
    }
    for seq in SDPA_SEQS {
        let q = input(&[1, 8, seq, 64], Domain::Any)?;
        let k = input(&[1, 8, seq, 64], Domain::Any)?;
        let v = input(&[1, 8, seq, 64], Domain::Any)?;
        rows.run(
            &format!("sdpa_causal_{seq}"),
            size,
            format!("scaled_dot_product_attention, causal, q,k,v [1,8,{seq},64]"),
            || {
                black_box(scaled_dot_product_attention_with(&q, &k, &v, &CAUSAL)?);
                Ok(())
            },
        )?;
    }
    {
        // A ResNet stage's 3x3 convolution, and a 2x2 max-pool.
        let x = input(&[8, 64, 32, 32], Domain::Any)?;
        let w = input(&[64, 64, 3, 3], Domain::Any)?;
        let pad = ConvOptions {
            padding: Padding::Explicit([1, 1]),
            ..ConvOptions::default()
        };
        rows.run(
            "conv2d",
            size,
            "x[8,64,32,32] W[64,64,3,3] padding 1".into(),
            || {
                black_box(x.conv2d(&w, None, &pad)?);
                Ok(())
            },
        )?;
        rows.run("max_pool2d", size, "x[8,64,32,32] 2x2".into(), || {
            black_box(x.max_pool2d([2, 2], &PoolOptions::default())?);
            Ok(())
        })?;
    }
    Ok(())
}

/// The sequence lengths of the causal attention rows (issue 17 item 9).
const SDPA_SEQS: [usize; 3] = [128, 512, 2048];

const CAUSAL: SdpaOptions<'static> = SdpaOptions {
    attn_mask: None,
    dropout_p: 0.0,
    is_causal: true,
    causal_variant: CausalVariant::UpperLeft,
    enable_gqa: false,
    scale: None,
    kernel: SdpaKernel::Auto,
};

fn attention(q: &Tensor, k: &Tensor, v: &Tensor) -> tensorscope::Result<Tensor> {
    q.matmul(&k.transpose(-2, -1)?)?
        .div_scalar(8.0)?
        .softmax(-1)?
        .matmul(v)
}

/// Forward + backward rows at the medium size: the output's gradient is a
/// fixed `randn` tensor; gradients are reset to `None` after each step.
fn fwd_bwd_rows(rows: &mut Rows) -> R<()> {
    let size = Size::Medium;
    let sh = Size::Medium.ew();
    let ews = shape_str(&sh);
    let g = input(&sh, Domain::Any)?;
    for (name, d, f) in unary_ops() {
        if !UNARY_FWD_BWD.contains(&name) {
            continue;
        }
        let x = input(&sh, d)?.requires_grad_(true)?;
        rows.run(&format!("{name}_fwd_bwd"), size, ews.clone(), || {
            f(&x)?.backward_with(&g, false)?;
            x.zero_grad();
            Ok(())
        })?;
    }
    let x = input(&sh, Domain::Any)?.requires_grad_(true)?;
    for (name, f) in [
        ("softmax", (|x: &Tensor| x.softmax(-1)) as Unary),
        ("log_softmax", |x| x.log_softmax(-1)),
    ] {
        rows.run(&format!("{name}_fwd_bwd"), size, ews.clone(), || {
            f(&x)?.backward_with(&g, false)?;
            x.zero_grad();
            Ok(())
        })?;
    }
    let ln = LayerNorm::new(&[sh[1]])?;
    rows.run(
        "layer_norm_fwd_bwd",
        size,
        format!("{ews} over the last dim, affine"),
        || {
            ln.forward(&x)?.backward_with(&g, false)?;
            x.zero_grad();
            ln.zero_grad();
            Ok(())
        },
    )?;
    let t = indices(512, 1024, &[512])?;
    rows.run(
        "cross_entropy_fwd_bwd",
        size,
        "logits [512,1024], targets [512], mean".into(),
        || {
            cross_entropy(&x, &t)?.backward()?;
            x.zero_grad();
            Ok(())
        },
    )?;
    let w = input(&[1024, 1024], Domain::Any)?.requires_grad_(true)?;
    let b = input(&[1024], Domain::Any)?.requires_grad_(true)?;
    rows.run(
        "linear_fwd_bwd",
        size,
        "x[512,1024] W[1024,1024] + b[1024]".into(),
        || {
            x.linear(&w, Some(&b))?.backward_with(&g, false)?;
            for p in [&x, &w, &b] {
                p.zero_grad();
            }
            Ok(())
        },
    )?;
    let q = input(&[8, 4, 64, 64], Domain::Any)?.requires_grad_(true)?;
    let k = input(&[8, 4, 64, 64], Domain::Any)?.requires_grad_(true)?;
    let v = input(&[8, 4, 64, 64], Domain::Any)?.requires_grad_(true)?;
    let ga = input(&[8, 4, 64, 64], Domain::Any)?;
    rows.run(
        "attention_fwd_bwd",
        size,
        "softmax(q k^T / 8) v, q,k,v [8,4,64,64]".into(),
        || {
            attention(&q, &k, &v)?.backward_with(&ga, false)?;
            for p in [&q, &k, &v] {
                p.zero_grad();
            }
            Ok(())
        },
    )?;
    rows.run(
        "sdpa_fwd_bwd",
        size,
        "scaled_dot_product_attention, q,k,v [8,4,64,64]".into(),
        || {
            scaled_dot_product_attention(&q, &k, &v)?.backward_with(&ga, false)?;
            for p in [&q, &k, &v] {
                p.zero_grad();
            }
            Ok(())
        },
    )?;
    for seq in SDPA_SEQS {
        let q = input(&[1, 8, seq, 64], Domain::Any)?.requires_grad_(true)?;
        let k = input(&[1, 8, seq, 64], Domain::Any)?.requires_grad_(true)?;
        let v = input(&[1, 8, seq, 64], Domain::Any)?.requires_grad_(true)?;
        let ga = input(&[1, 8, seq, 64], Domain::Any)?;
        rows.run(
            &format!("sdpa_causal_{seq}_fwd_bwd"),
            size,
            format!("scaled_dot_product_attention, causal, q,k,v [1,8,{seq},64]"),
            || {
                scaled_dot_product_attention_with(&q, &k, &v, &CAUSAL)?
                    .backward_with(&ga, false)?;
                for p in [&q, &k, &v] {
                    p.zero_grad();
                }
                Ok(())
            },
        )?;
    }
    let x = input(&[8, 64, 32, 32], Domain::Any)?.requires_grad_(true)?;
    let w = input(&[64, 64, 3, 3], Domain::Any)?.requires_grad_(true)?;
    let gy = input(&[8, 64, 32, 32], Domain::Any)?;
    let pad = ConvOptions {
        padding: Padding::Explicit([1, 1]),
        ..ConvOptions::default()
    };
    rows.run(
        "conv2d_fwd_bwd",
        size,
        "x[8,64,32,32] W[64,64,3,3] padding 1".into(),
        || {
            x.conv2d(&w, None, &pad)?.backward_with(&gy, false)?;
            for p in [&x, &w] {
                p.zero_grad();
            }
            Ok(())
        },
    )?;
    Ok(())
}

fn main() -> R<()> {
    let json = arg_after("--json");
    let filter = filter_arg();
    let threads = rayon::current_num_threads();
    tensorscope::manual_seed(0);
    // Issue 16's overhead check: the same matrix with the memory history on.
    if std::env::var_os("TENSORSCOPE_BENCH_HISTORY").is_some() {
        tensorscope::memory::record_history(tensorscope::Device::Cpu, true, 1_000_000)?;
        eprintln!("memory history: on (1,000,000 entries)");
    }
    eprintln!(
        "tensorscope {} op matrix (rayon threads: {threads}, SIMD level: {})",
        env!("CARGO_PKG_VERSION"),
        tensorscope::cpu_capability()
    );
    let mut rows = Rows {
        filter,
        out: Vec::new(),
    };
    for size in Size::ALL {
        forward_rows(&mut rows, size)?;
    }
    fixed_rows(&mut rows)?;
    fwd_bwd_rows(&mut rows)?;
    write_json(json, threads, &rows.out)?;
    Ok(())
}
