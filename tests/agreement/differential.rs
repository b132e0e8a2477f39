//! The differential suite (issue 13): replays tests/fixtures/differential.txt,
//! which tests/fixtures/differential.py wrote with PyTorch 2.15 (CPU): every
//! case's inputs (dtype, shape, layout, exact values), PyTorch's output
//! (dtype, shape, values) or its refusal, and the gradients of
//! `(out * w).sum()` with respect to each float32/float64 input. The file
//! documents the format and what is left out (GUIDE 10's deviations).
//!
//! Each case must give the same dtype and shape, values within the dtype's
//! tolerance, an `Err` where PyTorch raised, and the same gradients. All
//! mismatches are collected and printed before the test fails.
//!
//! Tolerances (relative to `|want|`, plus the same amount absolute, as the
//! inputs are O(1)): float64 1e-10 (different summation orders and libm);
//! float32 2e-5 (a few ulps of the transcendental functions and of sums of
//! up to 24 terms); float16 2e-3 (two ulps: PyTorch and tensorscope both
//! compute in f32 and round once, but f32 results that sit near a rounding
//! boundary may round apart); bfloat16 1.6e-2 (two ulps, likewise).
//! Integer and bool results are exact.
//!
//! `on_both!`: the CUDA variant replays the same file on cuda:0 (a skip line
//! without a GPU); the CPU-only build replays it on the CPU.

use crate::common;

#[cfg(feature = "cuda")]
use common::devices::on_both;
use common::Params;
use tensorscope::nn::{
    bce_with_logits, binary_cross_entropy, cross_entropy, huber_loss, kl_div, l1_loss, mse_loss,
    nll_loss, prune, scaled_dot_product_attention_with, smooth_l1_loss, BatchNorm2d, CausalVariant,
    GroupNorm, LayerNorm, Linear, MhaForward, MhaOptions, Module, MultiheadAttention, SdpaOptions,
    Sequential,
};
use tensorscope::optim::{
    Adagrad, AdagradConfig, Adam, AdamConfig, AdamW, Lion, LionConfig, Optimizer, RMSprop,
    RMSpropConfig, Sgd, SgdConfig,
};
use tensorscope::{ConvOptions, ConvTransposeOptions, Padding, PoolOptions};
use tensorscope::{
    DType, Device, InterpolateMode, InterpolateSize, Interpolation, PadMode, Result, ScatterReduce,
    Tensor,
};

const FIXTURE: &str = include_str!("../fixtures/differential.txt");

#[cfg(feature = "cuda")]
on_both!(replay);

/// The CPU-only build (`--no-default-features`) replays on the CPU.
#[cfg(not(feature = "cuda"))]
#[test]
fn replay_on_the_cpu() {
    let _shared = crate::common::shared();
    replay(Device::Cpu)
}

struct Input {
    dtype: DType,
    shape: Vec<usize>,
    layout: char,
    values: Vec<f64>,
}

struct Case {
    id: usize,
    op: String,
    params: Vec<(String, String)>,
    inputs: Vec<Input>,
    /// `None`: PyTorch refused the call.
    out: Option<(DType, Vec<usize>, Vec<f64>)>,
    grads: Vec<Vec<f64>>,
}

impl Case {
    fn param(&self, k: &str) -> &str {
        self.params
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
            .unwrap_or_else(|| panic!("case {}: no parameter {k}", self.id))
    }
    fn f(&self, k: &str) -> f64 {
        num(self.param(k))
    }
    /// `true` if the case has parameter `k` (an optional one).
    fn has(&self, k: &str) -> bool {
        self.params.iter().any(|(key, _)| key == k)
    }
    fn opt(&self, k: &str) -> Option<f64> {
        match self.param(k) {
            "none" => None,
            v => Some(num(v)),
        }
    }
    fn dims(&self) -> Vec<isize> {
        self.param("dims")
            .split(',')
            .map(|d| d.parse().unwrap())
            .collect()
    }
    /// A parameter `a,b` as a pair.
    fn pair(&self, k: &str) -> [usize; 2] {
        let v: Vec<usize> = self
            .param(k)
            .split(',')
            .map(|d| d.parse().unwrap())
            .collect();
        [v[0], v[1]]
    }
    fn keep(&self) -> bool {
        self.param("keep") == "1"
    }
}

fn num(s: &str) -> f64 {
    match s {
        "nan" => f64::NAN,
        "inf" => f64::INFINITY,
        "-inf" => f64::NEG_INFINITY,
        _ => s.parse().unwrap_or_else(|_| panic!("not a number: {s:?}")),
    }
}

fn dtype(s: &str) -> DType {
    match s {
        "float32" => DType::F32,
        "float64" => DType::F64,
        "float16" => DType::F16,
        "bfloat16" => DType::BF16,
        "int32" => DType::I32,
        "int64" => DType::I64,
        "uint8" => DType::U8,
        "bool" => DType::Bool,
        _ => panic!("unknown dtype {s:?}"),
    }
}

fn shape(s: &str) -> Vec<usize> {
    if s == "-" {
        Vec::new()
    } else {
        s.split(',').map(|d| d.parse().unwrap()).collect()
    }
}

/// `n` values from the tokens.
fn values<'a>(it: &mut impl Iterator<Item = &'a str>) -> Vec<f64> {
    let n: usize = it.next().unwrap().parse().unwrap();
    (0..n).map(|_| num(it.next().unwrap())).collect()
}

fn parse(text: &str) -> Vec<Case> {
    let mut cases = Vec::new();
    let mut cur: Option<Case> = None;
    for line in text.lines() {
        let mut it = line.split_whitespace();
        match it.next() {
            Some("case") => {
                let id = it.next().unwrap().parse().unwrap();
                let op = it.next().unwrap().to_string();
                let params = it
                    .map(|kv| {
                        let (k, v) = kv.split_once('=').unwrap();
                        (k.to_string(), v.to_string())
                    })
                    .collect();
                cur = Some(Case {
                    id,
                    op,
                    params,
                    inputs: Vec::new(),
                    out: None,
                    grads: Vec::new(),
                });
            }
            Some("in") => {
                let c = cur.as_mut().unwrap();
                let dt = dtype(it.next().unwrap());
                let sh = shape(it.next().unwrap());
                let layout = it.next().unwrap().chars().next().unwrap();
                c.inputs.push(Input {
                    dtype: dt,
                    shape: sh,
                    layout,
                    values: values(&mut it),
                });
            }
            Some("out") => {
                let c = cur.as_mut().unwrap();
                let t = it.next().unwrap();
                if t != "err" {
                    let sh = shape(it.next().unwrap());
                    c.out = Some((dtype(t), sh, values(&mut it)));
                }
            }
            Some("grad") => cur.as_mut().unwrap().grads.push(values(&mut it)),
            Some("end") => cases.push(cur.take().unwrap()),
            _ => {}
        }
    }
    cases
}

/// The stored (leaf) tensor and the view the op sees.
fn make(inp: &Input, dev: Device, grad: bool) -> Result<(Tensor, Tensor)> {
    let mut stored = inp.shape.clone();
    match inp.layout {
        't' => {
            let r = stored.len();
            stored.swap(r - 2, r - 1);
        }
        'e' => stored[0] = 1,
        'z' => {
            if let Some(last) = stored.last_mut() {
                *last = 1;
            }
        }
        's' => stored.iter_mut().for_each(|d| *d = 1),
        _ => {}
    }
    let mut leaf = Tensor::from_slice(&inp.values, &stored, Device::Cpu)?
        .to_dtype(inp.dtype)?
        .to_device(dev)?;
    if grad {
        leaf = leaf.requires_grad_(true)?;
    }
    let view = match inp.layout {
        't' => leaf.transpose(-2, -1)?,
        'e' | 'z' | 's' => {
            leaf.expand(&inp.shape.iter().map(|&d| d as isize).collect::<Vec<_>>())?
        }
        _ => leaf.alias(),
    };
    Ok((leaf, view))
}

fn run(c: &Case, x: &[Tensor]) -> Result<Tensor> {
    let a = &x[0];
    let b = || &x[1];
    Ok(match c.op.as_str() {
        "neg" => a.neg()?,
        "abs" => a.abs()?,
        "exp" => a.exp()?,
        "log" => a.log()?,
        "log1p" => a.log1p()?,
        "tan" => a.tan()?,
        "asin" => a.asin()?,
        "acos" => a.acos()?,
        "atan" => a.atan()?,
        "sinh" => a.sinh()?,
        "cosh" => a.cosh()?,
        "expm1" => a.expm1()?,
        "exp2" => a.exp2()?,
        "log2" => a.log2()?,
        "ceil" => a.ceil()?,
        "trunc" => a.trunc()?,
        "sqrt" => a.sqrt()?,
        "rsqrt" => a.rsqrt()?,
        "sin" => a.sin()?,
        "cos" => a.cos()?,
        "tanh" => a.tanh()?,
        "sigmoid" => a.sigmoid()?,
        "relu" => a.relu()?,
        "gelu" => a.gelu()?,
        "gelu_tanh" => a.gelu_tanh()?,
        "silu" => a.silu()?,
        "softplus" => a.softplus()?,
        "erf" => a.erf()?,
        "floor" => a.floor()?,
        "round" => a.round()?,
        "sign" => a.sign()?,
        "reciprocal" => a.reciprocal()?,
        "square" => a.square()?,
        "add" => a.add(b())?,
        "sub" => a.sub(b())?,
        "mul" => a.mul(b())?,
        "div" => a.div(b())?,
        "maximum" => a.maximum(b())?,
        "minimum" => a.minimum(b())?,
        "pow" => a.pow(b())?,
        "atan2" => a.atan2(b())?,
        "fmod" => a.fmod(b())?,
        "remainder" => a.remainder(b())?,
        "floor_divide" => a.floor_divide(b())?,
        "any" => a.any(&c.dims(), c.keep())?,
        "all" => a.all(&c.dims(), c.keep())?,
        "var_mean" | "std_mean" => {
            let corr = c.f("corr") as usize;
            let (v, m) = if c.op == "var_mean" {
                a.var_mean(&c.dims(), corr, c.keep())?
            } else {
                a.std_mean(&c.dims(), corr, c.keep())?
            };
            Tensor::cat(&[&v.reshape(&[-1])?, &m.reshape(&[-1])?], 0)?
        }
        "vector_norm" => a.vector_norm(c.f("ord"), &c.dims(), c.keep())?,
        "one_hot" => {
            let n = c.f("classes");
            a.one_hot((n >= 0.0).then_some(n as usize))?
        }
        "diag" => a.diag(c.f("k") as i64)?,
        "clamp_tensor" => {
            let b = c.param("bounds");
            let lo = b.contains("lo").then(|| &x[1]);
            let hi = b.contains("hi").then(|| &x[x.len() - 1]);
            a.clamp_tensor(lo, hi)?
        }
        "sort" | "topk" | "median" => {
            let (v, i) = match c.op.as_str() {
                "sort" => a.sort(c.f("dim") as isize, c.f("desc") == 1.0)?,
                "topk" => a.topk(
                    c.f("k") as usize,
                    c.f("dim") as isize,
                    c.f("largest") == 1.0,
                )?,
                _ => a.median(c.f("dim") as isize, c.keep())?,
            };
            if c.has("values") {
                v
            } else {
                let f = |t: &Tensor| t.to_dtype(DType::F64)?.reshape(&[-1]);
                Tensor::cat(&[&f(&v)?, &f(&i)?], 0)?
            }
        }
        "nonzero" => a.nonzero()?,
        "unique" | "unique_consecutive" | "unique_dim" | "unique_consecutive_dim" => {
            let (v, i, n) = match c.op.as_str() {
                "unique" => a.unique_parts()?,
                "unique_consecutive" => a.unique_consecutive()?,
                "unique_dim" => a.unique_dim(c.f("dim") as isize)?,
                _ => a.unique_consecutive_dim(c.f("dim") as isize)?,
            };
            let f = |t: &Tensor| t.to_dtype(DType::F64)?.reshape(&[-1]);
            Tensor::cat(&[&f(&v)?, &f(&i)?, &f(&n)?], 0)?
        }
        "mode" => {
            let (v, i) = a.mode(c.f("dim") as isize, c.keep())?;
            let f = |t: &Tensor| t.to_dtype(DType::F64)?.reshape(&[-1]);
            Tensor::cat(&[&f(&v)?, &f(&i)?], 0)?
        }
        "index_put" => {
            let idx: Vec<&Tensor> = x[1..x.len() - 1].iter().collect();
            a.index_put(&idx, &x[x.len() - 1], c.f("acc") == 1.0)?
        }
        "einsum" => {
            let ops: Vec<&Tensor> = x.iter().collect();
            Tensor::einsum(c.param("eq"), &ops)?
        }
        "argsort" => a.argsort(c.f("dim") as isize, c.f("desc") == 1.0)?,
        "cumsum" => a.cumsum(c.f("dim") as isize)?,
        "cumprod" => a.cumprod(c.f("dim") as isize)?,
        "quantile" | "nanquantile" => {
            let qs: Vec<f64> = c.param("q").split(',').map(num).collect();
            let dim = (c.param("dim") != "none").then(|| c.f("dim") as isize);
            let how = match c.param("how") {
                "lower" => Interpolation::Lower,
                "higher" => Interpolation::Higher,
                "midpoint" => Interpolation::Midpoint,
                "nearest" => Interpolation::Nearest,
                _ => Interpolation::Linear,
            };
            if c.op == "quantile" {
                a.quantiles(&qs, dim, c.keep(), how)?
            } else {
                a.nanquantiles(&qs, dim, c.keep(), how)?
            }
        }
        "fmod_scalar" => a.fmod_scalar(c.f("s"))?,
        "remainder_scalar" => a.remainder_scalar(c.f("s"))?,
        "floor_divide_scalar" => a.floor_divide_scalar(c.f("s"))?,
        "eq" => a.eq(b())?,
        "ne" => a.ne(b())?,
        "lt" => a.lt(b())?,
        "le" => a.le(b())?,
        "gt" => a.gt(b())?,
        "ge" => a.ge(b())?,
        "add_scalar" => a.add_scalar(c.f("s"))?,
        "sub_scalar" => a.sub_scalar(c.f("s"))?,
        "mul_scalar" => a.mul_scalar(c.f("s"))?,
        "div_scalar" => a.div_scalar(c.f("s"))?,
        "rsub_scalar" => a.rsub_scalar(c.f("s"))?,
        "maximum_scalar" => a.maximum_scalar(c.f("s"))?,
        "pow_scalar" => a.pow_scalar(c.f("s"))?,
        "sum" => a.sum(&c.dims(), c.keep())?,
        "mean" => a.mean(&c.dims(), c.keep())?,
        "prod" => a.prod(&c.dims(), c.keep())?,
        "amax" => a.max(&c.dims(), c.keep())?,
        "amin" => a.min(&c.dims(), c.keep())?,
        "var" => a.var(&c.dims(), 1, c.keep())?,
        "std" => a.std(&c.dims(), 1, c.keep())?,
        "logsumexp" => a.logsumexp(&c.dims(), c.keep())?,
        "sum_all" => a.sum_all()?,
        "mean_all" => a.mean_all()?,
        "softmax" => a.softmax(c.f("dim") as isize)?,
        "log_softmax" => a.log_softmax(c.f("dim") as isize)?,
        "matmul" => a.matmul(b())?,
        "clamp" => a.clamp(c.opt("min"), c.opt("max"))?,
        "linear" => a.linear(b(), Some(&x[2]))?,
        "linear_nobias" => a.linear(b(), None)?,
        "layer_norm" => {
            let n = *a.shape().last().unwrap();
            LayerNorm::with_options(&[n], 1e-5, a.dtype(), a.device())?.forward(a)?
        }
        "cross_entropy" => cross_entropy(a, b())?,
        "mse_loss" => mse_loss(a, b())?,
        "bce_with_logits" => bce_with_logits(a, b())?,
        "leaky_relu" => a.leaky_relu(0.1)?,
        "elu" => a.elu(0.7)?,
        "mish" => a.mish()?,
        "hardswish" => a.hardswish()?,
        "hardsigmoid" => a.hardsigmoid()?,
        "l1_loss" => l1_loss(a, b())?,
        "smooth_l1_loss" => smooth_l1_loss(a, b(), c.f("beta"))?,
        "huber_loss" => huber_loss(a, b(), c.f("delta"))?,
        "nll_loss" => nll_loss(a, b())?,
        "kl_div" => kl_div(a, b())?,
        "binary_cross_entropy" => binary_cross_entropy(a, b())?,
        "lerp" => a.lerp(b(), c.f("weight"))?,
        "mm" => a.mm(b())?,
        "bmm" => a.bmm(b())?,
        "addmm" => a.addmm(b(), &x[2], c.f("beta"), c.f("alpha"))?,
        "outer" => a.outer(b())?,
        "dot" => a.dot(b())?,
        "tril" => a.tril(c.f("k") as i64)?,
        "triu" => a.triu(c.f("k") as i64)?,
        "flip" => a.flip(&c.dims())?,
        "roll" => {
            let shifts: Vec<i64> = c
                .param("shifts")
                .split(',')
                .map(|v| v.parse().unwrap())
                .collect();
            let dims: Vec<isize> = match c.param("dims") {
                "none" => Vec::new(),
                _ => c.dims(),
            };
            a.roll(&shifts, &dims)?
        }
        "logical_and" => a.logical_and(b())?,
        "logical_or" => a.logical_or(b())?,
        "logical_xor" => a.logical_xor(b())?,
        "logical_not" => a.logical_not()?,
        "index_select" => a.index_select(c.f("dim") as isize, b())?,
        "gather" => a.gather(c.f("dim") as isize, b())?,
        "scatter_add" => a.scatter_add(c.f("dim") as isize, b(), &x[2])?,
        "scatter_reduce" => {
            let r: ScatterReduce = c.param("reduce").parse()?;
            a.scatter_reduce(c.f("dim") as isize, b(), &x[2], r, c.f("self") == 1.0)?
        }
        "cat" => Tensor::cat(&[a, b()], c.f("dim") as isize)?,
        "stack" => Tensor::stack(&[a, b()], c.f("dim") as isize)?,
        "where" => Tensor::where_cond(a, b(), &x[2])?,
        "meshgrid" => {
            let g = Tensor::meshgrid(&x.iter().collect::<Vec<_>>(), c.param("indexing"))?;
            Tensor::stack(&g.iter().collect::<Vec<_>>(), 0)?
        }
        "round_decimals" => a.round_decimals(c.f("decimals") as i32)?,
        "pad" => {
            let mode = match c.param("mode") {
                "constant" => PadMode::Constant(c.f("value")),
                "reflect" => PadMode::Reflect,
                "replicate" => PadMode::Replicate,
                _ => PadMode::Circular,
            };
            let pads: Vec<isize> = c
                .param("pad")
                .split(',')
                .map(|d| d.parse().unwrap())
                .collect();
            a.pad(&pads, mode)?
        }
        "interpolate" => {
            let list = |k: &str| c.param(k).split(',').map(num).collect::<Vec<f64>>();
            let size = if c.params.iter().any(|(k, _)| k == "size") {
                InterpolateSize::Size(list("size").iter().map(|&v| v as usize).collect())
            } else {
                InterpolateSize::Scale(list("scale"))
            };
            let mode = match c.param("mode") {
                "nearest" => InterpolateMode::Nearest,
                _ => InterpolateMode::Linear {
                    align_corners: c.f("align") == 1.0,
                },
            };
            a.interpolate(&size, mode)?
        }
        "sgd" | "adam" | "adamw" | "rmsprop" | "adagrad" | "lion" => optimize(c, x)?,
        "conv2d" | "conv1d" => convolve(c, x)?,
        "mha" => attend(c, x)?,
        "sdpa" => {
            let o = SdpaOptions {
                attn_mask: x.get(3),
                is_causal: c.f("causal") > 0.0,
                causal_variant: if c.f("causal") == 2.0 {
                    CausalVariant::LowerRight
                } else {
                    CausalVariant::UpperLeft
                },
                // Only the cases since issue 48 have `gqa`.
                enable_gqa: c.params.iter().any(|(k, v)| k == "gqa" && v == "1"),
                scale: c.opt("scale"),
                ..Default::default()
            };
            scaled_dot_product_attention_with(a, b(), &x[2], &o)?
        }
        "conv_transpose2d" => {
            let o = ConvTransposeOptions {
                stride: c.pair("stride"),
                padding: c.pair("padding"),
                output_padding: c.pair("output_padding"),
                groups: c.f("groups") as usize,
                dilation: c.pair("dilation"),
            };
            a.conv_transpose2d(b(), x.get(2), &o)?
        }
        "max_pool2d" | "avg_pool2d" => {
            let [k, p] = [c.pair("kernel"), c.pair("padding")];
            let o = PoolOptions {
                stride: (c.param("stride") != "none").then(|| c.pair("stride")),
                padding: p,
                dilation: if c.op == "max_pool2d" {
                    c.pair("dilation")
                } else {
                    [1, 1]
                },
                count_include_pad: c.op == "max_pool2d" || c.param("count_include_pad") == "1",
                ceil_mode: c.has("ceil_mode") && c.param("ceil_mode") == "1",
            };
            if c.op == "max_pool2d" {
                a.max_pool2d(k, &o)?
            } else {
                a.avg_pool2d(k, &o)?
            }
        }
        "adaptive_avg_pool2d" => a.adaptive_avg_pool2d(c.pair("output"))?,
        "prune" => prune_steps(c, a)?,
        "batch_norm2d" => {
            let mut bn = BatchNorm2d::with_options(a.shape()[1], 1e-5, 0.1, a.dtype(), a.device())?;
            (bn.weight, bn.bias) = (Some(b().alias()), Some(x[2].alias()));
            bn.forward(a)?
        }
        "group_norm" => {
            let (g, ch) = (c.f("groups") as usize, a.shape()[1]);
            let mut gn = GroupNorm::with_options(g, ch, 1e-5, true, a.dtype(), a.device())?;
            (gn.weight, gn.bias) = (Some(b().alias()), Some(x[2].alias()));
            gn.forward(a)?
        }
        "prune_global" => prune_global(c, a, b())?,
        op => panic!("case {}: unknown op {op}", c.id),
    })
}

/// A module of its own holding one prunable parameter (the public
/// `PruneMasks` / `PruneTarget` path a user's module takes).
struct Holder {
    weight: Tensor,
    masks: prune::PruneMasks,
}

impl Holder {
    fn new(w: &Tensor) -> Result<Holder> {
        Ok(Holder {
            weight: w.detach().deep_clone()?.requires_grad_(true)?,
            masks: prune::PruneMasks::default(),
        })
    }
    fn mask(&self) -> Tensor {
        self.masks.get("weight").expect("pruned").alias()
    }
}

impl Module for Holder {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let w = self.masks.masked("weight", &self.weight)?;
        x.mul(w.as_ref().unwrap_or(&self.weight))
    }
    fn named_parameters(&self) -> Vec<(String, &Tensor)> {
        vec![(self.masks.param_name("weight"), &self.weight)]
    }
    fn named_buffers(&self) -> Vec<(String, &Tensor)> {
        self.masks.named_buffers()
    }
    fn named_parameters_mut(&mut self) -> Vec<(String, &mut Tensor)> {
        let mut v = vec![(self.masks.param_name("weight"), &mut self.weight)];
        v.extend(self.masks.named_buffers_mut());
        v
    }
    fn prune_target(&mut self, name: &str) -> Option<prune::PruneTarget<'_>> {
        (name == "weight")
            .then(|| prune::PruneTarget::new(&mut self.weight, &mut self.masks, "weight"))
    }
}

/// An amount as the fixture writes it: a fraction has a `.`.
fn amount(a: &str) -> prune::Amount {
    if a.contains('.') {
        prune::Amount::Fraction(a.parse().unwrap())
    } else {
        prune::Amount::Count(a.parse().unwrap())
    }
}

/// The case's pruning steps on a holder of `w`; the final mask.
fn prune_steps(c: &Case, w: &Tensor) -> Result<Tensor> {
    let mut m = Holder::new(w)?;
    for step in c.param("steps").split(';') {
        let f: Vec<&str> = step.split(':').collect();
        match f[0] {
            "l1" => prune::l1_unstructured(&mut m, "weight", amount(f[1]))?,
            "ln" => prune::ln_structured(
                &mut m,
                "weight",
                amount(f[1]),
                f[2].parse().unwrap(),
                f[3].parse().unwrap(),
            )?,
            s => panic!("case {}: unknown step {s}", c.id),
        }
    }
    Ok(m.mask())
}

/// `global_unstructured` over holders of `x` and `y`: both masks, flat.
fn prune_global(c: &Case, x: &Tensor, y: &Tensor) -> Result<Tensor> {
    let mut s = Sequential::new();
    s.add(Holder::new(x)?).add(Holder::new(y)?);
    prune::global_unstructured(
        &mut s,
        &["0.weight", "1.weight"],
        prune::Unstructured::L1,
        amount(c.param("amount")),
    )?;
    let masks: Vec<Tensor> = s
        .named_buffers()
        .into_iter()
        .map(|(_, m)| m.reshape(&[-1]))
        .collect::<Result<_>>()?;
    Tensor::cat(&[&masks[0], &masks[1]], 0)
}

/// `MultiheadAttention` (seq-first) over the case's inputs: the query (and
/// key and value for cross-attention), the four parameters, the masks named
/// by `masks`; `weights` returns the output and the averaged weights,
/// flattened and concatenated.
fn attend(c: &Case, x: &[Tensor]) -> Result<Tensor> {
    let kind = c.param("kind");
    let nin = if kind == "cross" { 3 } else { 1 };
    let (q, k, v) = if nin == 1 {
        (&x[0], &x[0], &x[0])
    } else {
        (&x[0], &x[1], &x[2])
    };
    let p = &x[nin..nin + 4];
    let out = Linear::from_parts(p[2].alias(), Some(p[3].alias()))?;
    let heads = c.f("heads") as usize;
    let mha = MultiheadAttention::from_parts(
        p[0].alias(),
        Some(p[1].alias()),
        out,
        heads,
        MhaOptions::default(),
    )?;
    let names: Vec<&str> = match c.param("masks") {
        "none" => vec![],
        m => m.split(',').collect(),
    };
    let mask = |n: &str| names.iter().position(|&m| m == n).map(|i| &x[nin + 4 + i]);
    let f = MhaForward {
        key_padding_mask: mask("kpm"),
        attn_mask: mask("attn"),
        need_weights: kind == "weights",
        ..Default::default()
    };
    let (y, w) = mha.attend(q, k, v, &f)?;
    match w {
        Some(w) => Tensor::cat(&[&y.reshape(&[-1])?, &w.reshape(&[-1])?], 0),
        None => Ok(y),
    }
}

/// `conv2d` / `conv1d` with the case's options (`x[2]`, if present, is
/// the bias).
fn convolve(c: &Case, x: &[Tensor]) -> Result<Tensor> {
    let list =
        |k: &str| -> Vec<usize> { c.param(k).split(',').map(|v| v.parse().unwrap()).collect() };
    let groups = c.f("groups") as usize;
    let (st, dl) = (list("stride"), list("dilation"));
    let bias = x.get(2);
    if c.op == "conv2d" {
        let padding = match c.param("padding") {
            "same" => Padding::Same,
            "valid" => Padding::Valid,
            _ => Padding::Explicit(c.pair("padding")),
        };
        let o = ConvOptions {
            stride: [st[0], st[1]],
            padding,
            dilation: [dl[0], dl[1]],
            groups,
        };
        x[0].conv2d(&x[1], bias, &o)
    } else {
        let padding = match c.param("padding") {
            "same" => Padding::Same,
            "valid" => Padding::Valid,
            _ => Padding::Explicit([list("padding")[0]]),
        };
        let o = ConvOptions {
            stride: [st[0]],
            padding,
            dilation: [dl[0]],
            groups,
        };
        x[0].conv1d(&x[1], bias, &o)
    }
}

/// Three steps of the case's optimizer on the parameter `x[0]` with the
/// gradients `x[1..4]`; the parameter after them.
fn optimize(c: &Case, x: &[Tensor]) -> Result<Tensor> {
    let flag = |k: &str| c.param(k) == "1";
    let mut opt: Box<dyn Optimizer> = if c.op == "sgd" {
        Box::new(Sgd::new(SgdConfig {
            lr: c.f("lr"),
            momentum: c.f("momentum"),
            dampening: c.f("dampening"),
            weight_decay: c.f("weight_decay"),
            nesterov: flag("nesterov"),
            maximize: flag("maximize"),
        })?)
    } else if c.op == "rmsprop" {
        Box::new(RMSprop::new(RMSpropConfig {
            lr: c.f("lr"),
            alpha: c.f("alpha"),
            eps: c.f("eps"),
            weight_decay: c.f("weight_decay"),
            momentum: c.f("momentum"),
            centered: flag("centered"),
            maximize: flag("maximize"),
        })?)
    } else if c.op == "adagrad" {
        Box::new(Adagrad::new(AdagradConfig {
            lr: c.f("lr"),
            lr_decay: c.f("lr_decay"),
            weight_decay: c.f("weight_decay"),
            initial_accumulator_value: c.f("initial_accumulator_value"),
            eps: c.f("eps"),
            maximize: flag("maximize"),
        })?)
    } else if c.op == "lion" {
        Box::new(Lion::new(LionConfig {
            lr: c.f("lr"),
            betas: (c.f("beta1"), c.f("beta2")),
            weight_decay: c.f("weight_decay"),
            maximize: flag("maximize"),
        })?)
    } else {
        let cfg = AdamConfig {
            lr: c.f("lr"),
            betas: (c.f("beta1"), c.f("beta2")),
            eps: c.f("eps"),
            weight_decay: c.f("weight_decay"),
            amsgrad: flag("amsgrad"),
            maximize: flag("maximize"),
        };
        if c.op == "adam" {
            Box::new(Adam::new(cfg)?)
        } else {
            Box::new(AdamW::new(cfg)?)
        }
    };
    let mut params = Params(vec![("p".into(), x[0].deep_clone()?.requires_grad_(true)?)]);
    for g in &x[1..4] {
        params.0[0].1.set_grad(Some(g.deep_clone()?))?;
        opt.step(&mut params)?;
    }
    Ok(params.0[0].1.detach())
}

/// (relative, absolute) tolerance of `dt`.
fn tolerance(dt: DType) -> f64 {
    match dt {
        DType::F64 => 1e-10,
        DType::F32 => 2e-5,
        DType::F16 => 2e-3,
        DType::BF16 => 1.6e-2,
        _ => 0.0,
    }
}

fn close(got: f64, want: f64, tol: f64) -> bool {
    (got.is_nan() && want.is_nan()) || got == want || (got - want).abs() <= tol * (1.0 + want.abs())
}

/// The first index where `got` and `want` differ beyond `tol`, if any.
fn first_diff(got: &[f64], want: &[f64], tol: f64) -> Option<String> {
    if got.len() != want.len() {
        return Some(format!("{} values, want {}", got.len(), want.len()));
    }
    let i = (0..got.len()).find(|&i| !close(got[i], want[i], tol))?;
    Some(format!("[{i}] = {}, want {}", got[i], want[i]))
}

fn host(t: &Tensor) -> Result<Vec<f64>> {
    t.to_device(Device::Cpu)?
        .to_dtype(DType::F64)?
        .to_vec::<f64>()
}

/// One case; `Err(message)` on a mismatch.
fn check(c: &Case, dev: Device) -> std::result::Result<(), String> {
    let wants_grad = !c.grads.is_empty();
    let mut leaves = Vec::new();
    let mut views = Vec::new();
    for inp in &c.inputs {
        let g = wants_grad && matches!(inp.dtype, DType::F32 | DType::F64);
        let (l, v) = make(inp, dev, g).map_err(|e| format!("making the input: {e}"))?;
        if g {
            leaves.push(l);
        }
        views.push(v);
    }
    let got = run(c, &views);
    let Some((dt, sh, want)) = &c.out else {
        return match got {
            Err(_) => Ok(()),
            Ok(t) => Err(format!(
                "PyTorch refused it; tensorscope gave {:?} {}",
                t.shape(),
                t.dtype()
            )),
        };
    };
    let out = got.map_err(|e| format!("Err where PyTorch computed: {e}"))?;
    if out.dtype() != *dt || out.shape() != sh.as_slice() {
        return Err(format!(
            "{:?} {}, want {sh:?} {dt}",
            out.shape(),
            out.dtype()
        ));
    }
    let tol = tolerance(*dt);
    let vals = host(&out).map_err(|e| e.to_string())?;
    if let Some(d) = first_diff(&vals, want, tol) {
        return Err(format!("output {d}"));
    }
    if wants_grad {
        let n = out.numel();
        let w: Vec<f64> = (0..n).map(|i| ((i % 7) as f64 - 3.0) / 4.0).collect();
        let w = Tensor::from_slice(&w, out.shape(), Device::Cpu)
            .and_then(|w| w.to_dtype(out.dtype()))
            .and_then(|w| w.to_device(dev))
            .map_err(|e| e.to_string())?;
        out.mul(&w)
            .and_then(|l| l.sum_all())
            .and_then(|l| l.backward())
            .map_err(|e| format!("backward: {e}"))?;
        for (k, (leaf, want)) in leaves.iter().zip(&c.grads).enumerate() {
            let g = match leaf.grad() {
                Some(g) => host(&g).map_err(|e| e.to_string())?,
                None => vec![0.0; leaf.numel()],
            };
            if let Some(d) = first_diff(&g, want, tolerance(leaf.dtype())) {
                return Err(format!("gradient of input {k}: {d}"));
            }
        }
    }
    Ok(())
}

fn replay(dev: Device) {
    let cases = parse(FIXTURE);
    assert!(cases.len() >= 2000, "{} cases", cases.len());
    let mut bad = Vec::new();
    for c in &cases {
        if let Err(m) = check(c, dev) {
            let ins: Vec<String> = c
                .inputs
                .iter()
                .map(|i| format!("{} {:?} {}", i.dtype, i.shape, i.layout))
                .collect();
            let params: Vec<String> = c.params.iter().map(|(k, v)| format!("{k}={v}")).collect();
            bad.push(format!(
                "case {} {} {} [{}]: {m}",
                c.id,
                c.op,
                params.join(" "),
                ins.join("; ")
            ));
        }
    }
    for b in &bad {
        eprintln!("{b}");
    }
    let grads = cases.iter().filter(|c| !c.grads.is_empty()).count();
    let errs = cases.iter().filter(|c| c.out.is_none()).count();
    eprintln!(
        "differential on {dev}: {} cases ({grads} with gradients, {errs} refused by PyTorch), {} differ",
        cases.len(),
        bad.len()
    );
    assert!(
        bad.is_empty(),
        "{} of {} cases differ from PyTorch on {dev} (listed above)",
        bad.len(),
        cases.len()
    );
}
