//! Issue 48 item 2: rotary position embeddings against transformers'
//! `LlamaRotaryEmbedding` and `apply_rotary_pos_emb` (tests/fixtures/rope.py):
//! the inverse frequencies (default, linear and Llama 3 scaling), the
//! rotated values and their gradient, for one set of positions and per
//! sequence, on both devices; and the errors.

use crate::common;

#[cfg(feature = "cuda")]
use common::devices::on_both;
use common::{assert_close, read, tensor};
use tensorscope::nn::{rotate_half, RopeScaling, RotaryEmbedding};
use tensorscope::{DType, Device, Tensor};

/// One case of rope.txt.
struct Case {
    name: String,
    head_dim: usize,
    theta: f64,
    scaling: Option<RopeScaling>,
    inv_freq: Vec<f64>,
    positions: (Vec<usize>, Vec<f64>),
    x: (Vec<usize>, Vec<f64>),
    out: Vec<f64>,
    grad: Vec<f64>,
}

fn nums(s: &str) -> Vec<f64> {
    s.split_whitespace().map(|v| v.parse().unwrap()).collect()
}

/// `<shape> <n> <values>` as (shape, values).
fn shaped(s: &str) -> (Vec<usize>, Vec<f64>) {
    let (shape, rest) = s.split_once(' ').unwrap();
    let v = nums(rest);
    (
        shape.split(',').map(|d| d.parse().unwrap()).collect(),
        v[1..].to_vec(),
    )
}

fn cases() -> Vec<Case> {
    let text = include_str!("../fixtures/rope.txt");
    let mut out = Vec::new();
    for block in text.split("\nend").filter(|b| b.contains("case ")) {
        let mut c = Case {
            name: String::new(),
            head_dim: 0,
            theta: 0.0,
            scaling: None,
            inv_freq: vec![],
            positions: (vec![], vec![]),
            x: (vec![], vec![]),
            out: vec![],
            grad: vec![],
        };
        for line in block
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
        {
            let (key, rest) = line.split_once(' ').unwrap();
            match key {
                "case" => {
                    let f: Vec<&str> = rest.split(' ').collect();
                    c.name = f[0].to_string();
                    let param = |k: &str| {
                        f.iter()
                            .find_map(|p| p.strip_prefix(&format!("{k}=")))
                            .unwrap()
                    };
                    c.head_dim = param("head_dim").parse().unwrap();
                    c.theta = param("theta").parse().unwrap();
                    c.scaling = match param("scaling").split_once(':') {
                        None => None,
                        Some(("linear", v)) => Some(RopeScaling::Linear {
                            factor: v.parse().unwrap(),
                        }),
                        Some((_, v)) => {
                            let v: Vec<f64> = v.split(',').map(|x| x.parse().unwrap()).collect();
                            Some(RopeScaling::Llama3 {
                                factor: v[0],
                                low_freq_factor: v[1],
                                high_freq_factor: v[2],
                                original_max_position_embeddings: v[3] as usize,
                            })
                        }
                    };
                }
                "inv_freq" => c.inv_freq = nums(rest)[1..].to_vec(),
                "positions" => c.positions = shaped(rest),
                "x" => c.x = shaped(rest),
                "out" => c.out = nums(rest)[1..].to_vec(),
                "grad" => c.grad = nums(rest)[1..].to_vec(),
                other => panic!("rope.txt: unknown line {other}"),
            }
        }
        out.push(c);
    }
    out
}

/// Every case: the inverse frequencies to f32 rounding, the output and
/// the input's gradient to 1e-5 (the angles are transformers' f32
/// products; position 30000 checks the sine and cosine of large angles).
fn matches_transformers(dev: Device) {
    let all = cases();
    assert_eq!(all.len(), 4);
    for c in all {
        let rope = RotaryEmbedding::new(c.head_dim, c.theta, c.scaling, dev).unwrap();
        assert_close(&read(rope.inv_freq()), &c.inv_freq, 1e-7, &c.name);
        let x = tensor(&c.x.1, &c.x.0, DType::F32, dev)
            .requires_grad_(true)
            .unwrap();
        let pos = tensor(&c.positions.1, &c.positions.0, DType::I64, dev);
        let y = if c.positions.0.len() == 1 {
            let offset = c.positions.1[0] as usize;
            let contiguous =
                (0..c.positions.1.len()).all(|i| c.positions.1[i] == (offset + i) as f64);
            if contiguous {
                rope.apply(&x, offset).unwrap()
            } else {
                rope.apply_at(&x, &pos).unwrap()
            }
        } else {
            rope.apply_at(&x, &pos).unwrap()
        };
        assert_close(&read(&y), &c.out, 1e-5, &format!("{}: output", c.name));
        let w: Vec<f64> = (0..y.numel())
            .map(|i| ((i % 7) as f64 - 3.0) / 4.0)
            .collect();
        let w = tensor(&w, y.shape(), DType::F32, dev);
        y.mul(&w).unwrap().sum_all().unwrap().backward().unwrap();
        assert_close(
            &read(&x.grad().unwrap()),
            &c.grad,
            1e-5,
            &format!("{}: grad", c.name),
        );
    }
}

/// `apply` at an offset is `apply_at` with those positions, and position 0
/// is the identity; rotate_half is transformers' `[-x2, x1]`.
fn offsets_and_rotate_half(dev: Device) {
    let rope = RotaryEmbedding::new(8, 10_000.0, None, dev).unwrap();
    let x = Tensor::randn(&[2, 3, 4, 8], DType::F32, dev).unwrap();
    let pos = Tensor::arange(5.0, 9.0, 1.0, DType::I64, dev).unwrap();
    assert_eq!(
        read(&rope.apply(&x, 5).unwrap()),
        read(&rope.apply_at(&x, &pos).unwrap())
    );
    let first = rope.apply(&x.narrow(2, 0, 1).unwrap(), 0).unwrap();
    assert_close(
        &read(&first),
        &read(&x.narrow(2, 0, 1).unwrap()),
        0.0,
        "position 0",
    );
    let v = tensor(&[1.0, 2.0, 3.0, 4.0], &[1, 4], DType::F32, dev);
    assert_eq!(read(&rotate_half(&v).unwrap()), vec![-3.0, -4.0, 1.0, 2.0]);
}

/// Bad input: an `Err` naming what was called.
fn errors_name_the_call(dev: Device) {
    let e = |r: tensorscope::Result<Tensor>| r.unwrap_err().to_string();
    let rope = RotaryEmbedding::new(8, 10_000.0, None, dev).unwrap();
    let x = Tensor::zeros(&[1, 2, 3, 6], DType::F32, dev).unwrap();
    assert!(e(rope.apply(&x, 0)).starts_with("RotaryEmbedding"));
    let fpos = Tensor::zeros(&[3], DType::F32, dev).unwrap();
    let x8 = Tensor::zeros(&[1, 2, 3, 8], DType::F32, dev).unwrap();
    assert!(e(rope.apply_at(&x8, &fpos)).contains("integer positions"));
    assert!(
        e(rotate_half(&Tensor::zeros(&[3], DType::F32, dev).unwrap())).starts_with("rotate_half")
    );
    for bad in [
        RotaryEmbedding::new(7, 10_000.0, None, dev),
        RotaryEmbedding::new(8, -1.0, None, dev),
        RotaryEmbedding::new(8, 1e4, Some(RopeScaling::Linear { factor: 0.0 }), dev),
        RotaryEmbedding::new(
            8,
            1e4,
            Some(RopeScaling::Llama3 {
                factor: 8.0,
                low_freq_factor: 4.0,
                high_freq_factor: 1.0,
                original_max_position_embeddings: 8192,
            }),
            dev,
        ),
    ] {
        assert!(bad.unwrap_err().to_string().starts_with("RotaryEmbedding"));
    }
    let (cos, sin) = rope
        .cos_sin(
            &Tensor::arange(0.0, 4.0, 1.0, DType::I64, dev).unwrap(),
            DType::F32,
        )
        .unwrap();
    let r = tensorscope::nn::apply_rotary_pos_emb(&x8, &cos, &sin);
    assert!(
        e(r).starts_with("apply_rotary_pos_emb"),
        "L 3 against 4 positions"
    );
}

#[cfg(feature = "cuda")]
on_both!(
    matches_transformers,
    offsets_and_rotate_half,
    errors_name_the_call
);

#[cfg(not(feature = "cuda"))]
common::on_cpu!(
    matches_transformers,
    offsets_and_rotate_half,
    errors_name_the_call
);
