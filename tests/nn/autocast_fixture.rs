//! Issue 49 item 6: every case of tests/fixtures/autocast.py (PyTorch 2.15
//! under `torch.autocast("cpu", dtype=torch.bfloat16)`) replayed in a CPU
//! bf16 region: the same output dtype, and values within bf16's rounding.

use crate::common::{self, assert_close, read, tol};
use tensorscope::autocast::autocast_guard;
use tensorscope::nn::{
    bce_with_logits, binary_cross_entropy, cross_entropy, huber_loss, l1_loss, mse_loss, nll_loss,
    scaled_dot_product_attention, smooth_l1_loss, LayerNorm, Module,
};
use tensorscope::{
    ConvOptions, ConvTransposeOptions, DType, Device, DeviceType, PadMode, Result, Tensor,
};

const CPU: Device = Device::Cpu;

/// The fixture's inputs: `((i * 7 + seed * 3) % 17) / 8 - 1`, exact in bf16.
fn vals(shape: &[usize], seed: usize) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n)
        .map(|i| ((i * 7 + seed * 3) % 17) as f32 / 8.0 - 1.0)
        .collect();
    Tensor::from_vec(v, shape, CPU).unwrap()
}

fn bf(t: Tensor) -> Tensor {
    t.to_dtype(DType::BF16).unwrap()
}

/// `(vals + 1) / 2.5`: probabilities in (0, 1).
fn t01(shape: &[usize], seed: usize) -> Tensor {
    vals(shape, seed)
        .add_scalar(1.0)
        .unwrap()
        .div_scalar(2.5)
        .unwrap()
}

fn classes() -> Tensor {
    Tensor::from_slice(&[0i64, 2, 5, 1], &[4], CPU).unwrap()
}

/// The case named `name`, run by tensorscope.
fn case(name: &str) -> Result<Tensor> {
    let (x, w) = (vals(&[4, 8], 1), vals(&[8, 6], 2));
    Ok(match name {
        "matmul" => x.matmul(&w)?,
        "linear" => x.linear(&vals(&[6, 8], 2), Some(&vals(&[6], 3)))?,
        "mm" => x.mm(&w)?,
        "bmm" => vals(&[2, 3, 4], 1).bmm(&vals(&[2, 4, 5], 2))?,
        "addmm" => vals(&[6], 3).addmm(&x, &w, 1.0, 1.0)?,
        "conv2d" => vals(&[1, 2, 5, 5], 1).conv2d(
            &vals(&[3, 2, 3, 3], 2),
            Some(&vals(&[3], 3)),
            &ConvOptions::default(),
        )?,
        "conv1d" => vals(&[1, 2, 7], 1).conv1d(
            &vals(&[3, 2, 3], 2),
            Some(&vals(&[3], 3)),
            &ConvOptions::default(),
        )?,
        "conv_transpose2d" => vals(&[1, 2, 4, 4], 1).conv_transpose2d(
            &vals(&[2, 3, 3, 3], 2),
            Some(&vals(&[3], 3)),
            &ConvTransposeOptions::default(),
        )?,
        "sdpa" => scaled_dot_product_attention(
            &vals(&[1, 2, 4, 8], 1),
            &vals(&[1, 2, 4, 8], 2),
            &vals(&[1, 2, 4, 8], 3),
        )?,
        "einsum" => Tensor::einsum("ij,jk->ik", &[&x, &w])?,
        "cross_entropy" => cross_entropy(&vals(&[4, 6], 1), &classes())?,
        "cross_entropy_bf16_logits" => cross_entropy(&bf(vals(&[4, 6], 1)), &classes())?,
        "nll_loss" => nll_loss(&bf(vals(&[4, 6], 1)), &classes())?,
        "mse_loss" => mse_loss(&bf(vals(&[4, 6], 1)), &vals(&[4, 6], 2))?,
        "l1_loss" => l1_loss(&bf(vals(&[4, 6], 1)), &vals(&[4, 6], 2))?,
        "smooth_l1_loss" => smooth_l1_loss(&bf(vals(&[4, 6], 1)), &vals(&[4, 6], 2), 0.5)?,
        "huber_loss" => huber_loss(&bf(vals(&[4, 6], 1)), &vals(&[4, 6], 2), 0.5)?,
        "bce_with_logits" => bce_with_logits(&bf(vals(&[4, 6], 1)), &t01(&[4, 6], 2))?,
        "binary_cross_entropy" => binary_cross_entropy(&bf(t01(&[4, 6], 1)), &t01(&[4, 6], 2))?,
        "prod" => bf(vals(&[6], 1).add_scalar(1.5)?).prod(&[], false)?,
        "quantile" => bf(vals(&[9], 1))
            .to_dtype(DType::F32)?
            .quantile(0.3, None, false)?,
        "pad_reflect" => bf(vals(&[1, 2, 5], 1)).pad(&[2, 1], PadMode::Reflect)?,
        "pad_constant" => bf(vals(&[1, 2, 5], 1)).pad(&[2, 1], PadMode::Constant(0.5))?,
        "cat" => Tensor::cat(&[&vals(&[2, 3], 1), &bf(vals(&[2, 3], 2))], 0)?,
        "stack" => Tensor::stack(&[&vals(&[2, 3], 1), &bf(vals(&[2, 3], 2))], 0)?,
        "index_copy" => vals(&[4, 3], 1).index_copy(
            0,
            &Tensor::from_slice(&[2i64, 0], &[2], CPU)?,
            &bf(vals(&[2, 3], 2)),
        )?,
        "softmax_bf16" => bf(vals(&[3, 5], 1)).softmax(-1)?,
        "layer_norm_mixed" => LayerNorm::from_parts(vals(&[8], 2), vals(&[8], 3), 1e-5)?
            .forward(&bf(vals(&[3, 8], 1)))?,
        "exp_bf16" => bf(vals(&[6], 1)).exp()?,
        "sum_bf16" => bf(vals(&[3, 5], 1)).sum_all()?,
        "relu_bf16" => bf(vals(&[6], 1)).relu()?,
        "add_mixed" => bf(vals(&[6], 1)).add(&vals(&[6], 2))?,
        other => panic!("no tensorscope case for the fixture's {other}"),
    })
}

#[test]
fn pytorch_autocast_cases_replay() {
    let _shared = common::shared();
    let text = include_str!("../fixtures/autocast.txt");
    let mut n = 0;
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (name, dtype) = (f[0], f[1]);
        let want: Vec<f64> = f[3..].iter().map(|s| s.parse().unwrap()).collect();
        assert_eq!(want.len(), f[2].parse::<usize>().unwrap(), "{name}");
        let y = {
            let _ac = autocast_guard(DeviceType::Cpu, DType::BF16).unwrap();
            case(name).unwrap_or_else(|e| panic!("{name}: {e}"))
        };
        let dt = match dtype {
            "bf16" => DType::BF16,
            "f32" => DType::F32,
            d => panic!("{name}: dtype {d}"),
        };
        assert_eq!(y.dtype(), dt, "{name}: the output dtype");
        // bf16 inputs or outputs round each value once or twice.
        assert_close(&read(&y), &want, 2.0 * tol(DType::BF16), name);
        n += 1;
    }
    assert_eq!(n, 32, "every case replayed");
}
