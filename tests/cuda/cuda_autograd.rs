//! Autograd and `nn` on the CPU and on CUDA device 0, the same bodies on
//! both (`on_both!`, tests/common/devices.rs): finite-difference gradchecks
//! run on the device (f64 leaves on it), an MLP trained with Adam and SGD
//! against a naive forward and naive optimizer updates (and, on CUDA,
//! against the same steps on the CPU), and the allocator's exact byte
//! counts around a graph and a training loop. On CUDA every analytic
//! gradient is also compared with the CPU's.
#![cfg(feature = "cuda")]

use crate::common;

use common::devices::on_both;
use common::grad::{gradcheck, randn};
use common::optim_ref::RefOpt;
use common::{assert_close, read, CPU};
use tensorscope::nn::{cross_entropy, mse_loss, LayerNorm, Linear, Module, ReLU, Sequential};
use tensorscope::optim::{Adam, AdamConfig, Optimizer, Sgd, SgdConfig};
use tensorscope::{manual_seed, memory, DType, Device, Error, Result, Tensor};

on_both!(
    gradients_through_ops,
    mlp_training_matches_cpu,
    graph_memory_is_freed_deterministically,
    training_loop_memory_is_flat,
);

// ------------------------------------------------------- gradchecks ---

/// A standard-normal f64 leaf on `dev` (made on the CPU from `seed`, then
/// moved, then marked: a leaf of `dev`, not a copy made by a recorded op).
fn dleaf(shape: &[usize], seed: u64, dev: Device) -> Tensor {
    let t = randn(shape, DType::F64, seed)
        .to_device(dev)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    assert!(
        t.is_leaf() && t.requires_grad(),
        "a leaf that requires grad"
    );
    assert_eq!(t.device(), dev);
    t
}

/// A non-contiguous f64 leaf on `dev` of logical shape `[r, c]` (the
/// transpose of a `[c, r]` storage).
fn dleaf_t(r: usize, c: usize, seed: u64, dev: Device) -> Tensor {
    let t = randn(&[c, r], DType::F64, seed)
        .to_device(dev)
        .unwrap()
        .t()
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    assert!(t.is_leaf() && t.requires_grad() && !t.is_contiguous());
    assert_eq!(t.device(), dev);
    t
}

/// An index (or mask) tensor on `like`'s device.
fn on<T: tensorscope::Element>(v: &[T], shape: &[usize], like: &Tensor) -> Result<Tensor> {
    Tensor::from_slice(v, shape, CPU)?.to_device(like.device())
}

/// A fixed boolean mask of `shape` (every third element false).
fn mask(shape: &[usize], like: &Tensor) -> Result<Tensor> {
    let n: usize = shape.iter().product();
    let v: Vec<bool> = (0..n).map(|i| i % 3 != 1).collect();
    on(&v, shape, like)
}

type Fun = Box<dyn Fn(&[Tensor]) -> Result<Tensor>>;
type Leaves = Box<dyn Fn(Device) -> Vec<Tensor>>;

/// Gradcheck of `f` (finite differences on `dev`) on the leaves `mk(dev)`;
/// on CUDA, the output and every analytic gradient also equal the CPU's
/// (the same leaves made on the CPU, the same weight as gradcheck's).
fn check(name: &str, dev: Device, mk: &Leaves, f: &Fun) {
    let xs = mk(dev);
    for x in &xs {
        assert_eq!(x.device(), dev, "{name}: leaf device");
        assert!(x.numel() <= 24, "{name}: keep the inputs tiny");
    }
    gradcheck(name, &xs, f);
    let out = f(&xs).unwrap();
    assert_eq!(out.device(), dev, "{name}: output device");
    let grads: Vec<Tensor> = xs
        .iter()
        .enumerate()
        .map(|(k, x)| {
            let g = x
                .grad()
                .unwrap_or_else(|| panic!("{name}: input {k} got no gradient"));
            assert_eq!(g.device(), dev, "{name}: gradient {k} device");
            assert_eq!(g.dtype(), DType::F64, "{name}: gradient {k} dtype");
            assert_eq!(g.shape(), x.shape(), "{name}: gradient {k} shape");
            g
        })
        .collect();
    if dev.is_cuda() {
        let cs = mk(CPU);
        let c_out = f(&cs).unwrap();
        assert_eq!(c_out.shape(), out.shape(), "{name}: output shape");
        assert_close(
            &read(&out),
            &read(&c_out),
            1e-10,
            &format!("{name}: output (CUDA vs CPU)"),
        );
        let w = randn(c_out.shape(), DType::F64, 99);
        c_out
            .mul(&w)
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
        for (k, (g, c)) in grads.iter().zip(&cs).enumerate() {
            assert_close(
                &read(g),
                &read(&c.grad().unwrap()),
                1e-10,
                &format!("{name}: gradient {k} (CUDA vs CPU)"),
            );
        }
    }
}

/// Every case: a name, the leaves it takes, and the function of them.
fn cases() -> Vec<(&'static str, Leaves, Fun)> {
    let a34: fn(Device) -> Vec<Tensor> = |d| vec![dleaf_t(3, 4, 1, d)];
    let a234: fn(Device) -> Vec<Tensor> = |d| vec![dleaf(&[2, 3, 4], 2, d)];
    let mut v: Vec<(&'static str, Leaves, Fun)> = vec![
        // matmul with a broadcast bias
        (
            "matmul 2-D (transposed lhs) + bias [2]",
            Box::new(|d| vec![dleaf_t(3, 4, 3, d), dleaf(&[4, 2], 4, d), dleaf(&[2], 5, d)]),
            Box::new(|x| x[0].matmul(&x[1])?.add(&x[2])),
        ),
        (
            "matmul 3-D batched + bias [3, 1]",
            Box::new(|d| {
                vec![
                    dleaf(&[2, 3, 4], 6, d),
                    dleaf(&[2, 4, 2], 7, d),
                    dleaf(&[3, 1], 8, d),
                ]
            }),
            Box::new(|x| x[0].matmul(&x[1])?.add(&x[2])),
        ),
        (
            "matmul 3-D x broadcast 2-D (transposed rhs) + bias",
            Box::new(|d| {
                vec![
                    dleaf(&[2, 3, 4], 9, d),
                    dleaf_t(4, 2, 10, d),
                    dleaf(&[2], 11, d),
                ]
            }),
            Box::new(|x| x[0].matmul(&x[1])?.add(&x[2])?.tanh()),
        ),
        // unary
        ("relu", Box::new(a34), Box::new(|x| x[0].relu())),
        ("gelu", Box::new(a34), Box::new(|x| x[0].gelu())),
        ("tanh", Box::new(a34), Box::new(|x| x[0].tanh())),
        ("sigmoid", Box::new(a34), Box::new(|x| x[0].sigmoid())),
        ("exp", Box::new(a34), Box::new(|x| x[0].exp())),
        (
            "log (positive input)",
            Box::new(a34),
            Box::new(|x| x[0].abs()?.add_scalar(0.5)?.log()),
        ),
        (
            "log1p (input > -1)",
            Box::new(a34),
            Box::new(|x| x[0].abs()?.add_scalar(-0.5)?.log1p()),
        ),
        // softmax family
        (
            "softmax dim -1",
            Box::new(a34),
            Box::new(|x| x[0].softmax(-1)),
        ),
        (
            "softmax dim 0",
            Box::new(a34),
            Box::new(|x| x[0].softmax(0)),
        ),
        (
            "softmax middle dim",
            Box::new(a234),
            Box::new(|x| x[0].softmax(1)),
        ),
        (
            "log_softmax dim 1",
            Box::new(a34),
            Box::new(|x| x[0].log_softmax(1)),
        ),
        (
            "log_softmax middle dim",
            Box::new(a234),
            Box::new(|x| x[0].log_softmax(1)),
        ),
        // reductions
        (
            "sum dim 1 keepdim",
            Box::new(a234),
            Box::new(|x| x[0].sum(&[1], true)),
        ),
        (
            "sum dims 0, 2",
            Box::new(a234),
            Box::new(|x| x[0].sum(&[0, 2], false)),
        ),
        (
            "mean dim -1 keepdim",
            Box::new(a234),
            Box::new(|x| x[0].mean(&[-1], true)),
        ),
        (
            "mean dims 0, 1 (transposed)",
            Box::new(a34),
            Box::new(|x| x[0].mean(&[0, 1], false)),
        ),
        (
            "var dim 1",
            Box::new(a34),
            Box::new(|x| x[0].var(&[1], 1, false)),
        ),
        (
            "var dims 0, 2 population keepdim",
            Box::new(a234),
            Box::new(|x| x[0].var(&[0, 2], 0, true)),
        ),
        (
            "std dim 2 keepdim",
            Box::new(a234),
            Box::new(|x| x[0].std(&[2], 1, true)),
        ),
        (
            "logsumexp dim 1",
            Box::new(a234),
            Box::new(|x| x[0].logsumexp(&[1], false)),
        ),
        (
            "logsumexp dim 0 keepdim (transposed)",
            Box::new(a34),
            Box::new(|x| x[0].logsumexp(&[0], true)),
        ),
        (
            "max values dim 1",
            Box::new(a234),
            Box::new(|x| x[0].max(&[1], false)),
        ),
        (
            "max values dims 0, 2 keepdim",
            Box::new(a234),
            Box::new(|x| x[0].max(&[0, 2], true)),
        ),
        (
            "max_dim values",
            Box::new(a34),
            Box::new(|x| Ok(x[0].max_dim(1, false)?.0)),
        ),
        // views
        (
            "transpose",
            Box::new(a234),
            Box::new(|x| x[0].transpose(0, 2)?.exp()),
        ),
        (
            "narrow",
            Box::new(a234),
            Box::new(|x| x[0].narrow(2, 1, 2)?.exp()),
        ),
        (
            "expand",
            Box::new(|d| vec![dleaf(&[3, 1], 12, d)]),
            Box::new(|x| x[0].expand(&[2, 3, 4])?.sin()),
        ),
        (
            "view",
            Box::new(a234),
            Box::new(|x| x[0].view(&[6, 4])?.tanh()),
        ),
        (
            "reshape of a transposed leaf",
            Box::new(a34),
            Box::new(|x| x[0].reshape(&[2, 6])?.exp()),
        ),
        // cat and the index ops
        (
            "cat dim 0",
            Box::new(|d| vec![dleaf_t(3, 4, 13, d), dleaf(&[2, 4], 14, d)]),
            Box::new(|x| Tensor::cat(&[&x[0], &x[1]], 0)?.exp()),
        ),
        (
            "cat dim 1",
            Box::new(|d| vec![dleaf_t(3, 4, 15, d), dleaf(&[3, 2], 16, d)]),
            Box::new(|x| Tensor::cat(&[&x[0], &x[1]], 1)?.tanh()),
        ),
        (
            "index_select (repeated index)",
            Box::new(|d| vec![dleaf_t(4, 3, 17, d)]),
            Box::new(|x| {
                x[0].index_select(0, &on(&[2i64, 0, 2, 3], &[4], &x[0])?)?
                    .exp()
            }),
        ),
        (
            "index_select dim 1",
            Box::new(a234),
            Box::new(|x| x[0].index_select(1, &on(&[1i64, 1], &[2], &x[0])?)),
        ),
        (
            "gather",
            Box::new(a34),
            Box::new(|x| {
                let idx = on(&[0i64, 3, 3, 1, 2, 2], &[3, 2], &x[0])?;
                x[0].gather(1, &idx)?.exp()
            }),
        ),
        (
            "masked_select",
            Box::new(a34),
            Box::new(|x| x[0].masked_select(&mask(&[3, 4], &x[0])?)?.exp()),
        ),
        (
            "where (broadcast other)",
            Box::new(|d| vec![dleaf_t(3, 4, 18, d), dleaf(&[4], 19, d)]),
            Box::new(|x| Tensor::where_cond(&mask(&[3, 4], &x[0])?, &x[0], &x[1])?.exp()),
        ),
        // nn
        (
            "cross_entropy (i64 targets)",
            Box::new(|d| vec![dleaf_t(4, 3, 20, d)]),
            Box::new(|x| cross_entropy(&x[0], &on(&[2i64, 0, 1, 2], &[4], &x[0])?)),
        ),
        (
            "mse_loss (both sides)",
            Box::new(|d| vec![dleaf_t(3, 4, 21, d), dleaf(&[3, 4], 22, d)]),
            Box::new(|x| mse_loss(&x[0], &x[1])),
        ),
        (
            "LayerNorm([4]) forward (input, weight, bias)",
            Box::new(|d| {
                vec![
                    dleaf(&[2, 3, 4], 23, d),
                    dleaf(&[4], 24, d),
                    dleaf(&[4], 25, d),
                ]
            }),
            Box::new(|x| {
                let mut ln = LayerNorm::with_options(&[4], 1e-5, DType::F64, x[0].device())?;
                ln.weight = x[1].alias();
                ln.bias = x[2].alias();
                ln.forward(&x[0])
            }),
        ),
        (
            "LayerNorm([3, 4]) forward of a permuted input",
            Box::new(|d| {
                vec![
                    dleaf(&[4, 3, 2], 26, d),
                    dleaf(&[3, 4], 27, d),
                    dleaf(&[3, 4], 28, d),
                ]
            }),
            Box::new(|x| {
                let mut ln = LayerNorm::with_options(&[3, 4], 1e-5, DType::F64, x[0].device())?;
                ln.weight = x[1].alias();
                ln.bias = x[2].alias();
                ln.forward(&x[0].permute(&[2, 1, 0])?)
            }),
        ),
    ];
    // A composite: the MLP's layers in f64, through one graph.
    v.push((
        "Linear, ReLU, LayerNorm, Linear, cross_entropy",
        Box::new(|d| {
            vec![
                dleaf(&[5, 3], 29, d),
                dleaf(&[4, 3], 30, d),
                dleaf(&[4], 31, d),
                dleaf(&[2, 4], 32, d),
            ]
        }),
        Box::new(|x| {
            let dev = x[0].device();
            let h = x[0].matmul(&x[1].t()?)?.add(&x[2])?.relu()?;
            let h = LayerNorm::with_options(&[4], 1e-5, DType::F64, dev)?.forward(&h)?;
            let logits = h.matmul(&x[3].t()?)?;
            cross_entropy(&logits, &on(&[0i64, 1, 1, 0, 1], &[5], &x[0])?)
        }),
    ));
    v
}

/// Finite differences (on the device) against the analytic gradient of
/// every differentiable op the nn layers use; on CUDA also against the CPU.
fn gradients_through_ops(dev: Device) {
    let all = cases();
    assert!(all.len() >= 40);
    for (name, mk, f) in &all {
        check(name, dev, mk, f);
    }
    // Moving a CPU leaf that requires grad records the copy (on the CPU the
    // move is the same tensor): the gradient comes back to the CPU leaf.
    let host = randn(&[3], DType::F64, 40).requires_grad_(true).unwrap();
    let moved = host.to_device(dev).unwrap();
    assert_eq!(moved.device(), dev);
    assert_eq!(moved.is_leaf(), dev == CPU, "a recorded copy is not a leaf");
    moved
        .mul_scalar(2.0)
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    let g = host.grad().unwrap();
    assert_eq!(g.device(), CPU, "the gradient lands on the CPU leaf");
    assert_eq!(read(&g), vec![2.0; 3]);
}

// ----------------------------------------------------- MLP training ---

/// Linear(8, 16), ReLU, LayerNorm(16), Linear(16, 4), f32, from a fixed
/// seed on the CPU, moved to `dev`.
fn mlp(dev: Device) -> Sequential {
    manual_seed(1234);
    let mut net = Sequential::new();
    net.add(Linear::new(8, 16).unwrap())
        .add(ReLU)
        .add(LayerNorm::new(&[16]).unwrap())
        .add(Linear::new(16, 4).unwrap());
    net.to_device(dev).unwrap();
    for (name, p) in net.named_parameters() {
        assert_eq!(p.device(), dev, "{name}");
        assert!(p.is_leaf() && p.requires_grad(), "{name}");
    }
    net
}

const N: usize = 12;

/// The fixed batch: inputs `randn [12, 8]` f32 (seed 5), labels `7i mod 4`.
fn batch(dev: Device) -> (Tensor, Tensor) {
    let x = randn(&[N, 8], DType::F32, 5).to_device(dev).unwrap();
    let y: Vec<i64> = (0..N as i64).map(|i| 7 * i % 4).collect();
    let y = Tensor::from_slice(&y, &[N], CPU)
        .unwrap()
        .to_device(dev)
        .unwrap();
    (x, y)
}

/// The parameter named `name`, row-major, as f64.
fn param(net: &Sequential, name: &str) -> Vec<f64> {
    let ps = net.named_parameters();
    let p = ps.iter().find(|(n, _)| n == name).expect(name);
    read(p.1)
}

/// The MLP's cross-entropy on `x` (`[N, 8]`), `y` in plain f64 from the
/// net's current parameters.
fn ref_loss(net: &Sequential, x: &[f64], y: &[i64]) -> f64 {
    let (w1, b1) = (param(net, "0.weight"), param(net, "0.bias"));
    let (g, beta) = (param(net, "2.weight"), param(net, "2.bias"));
    let (w2, b2) = (param(net, "3.weight"), param(net, "3.bias"));
    let mut total = 0.0;
    for n in 0..N {
        let h: Vec<f64> = (0..16)
            .map(|j| {
                let s: f64 = (0..8).map(|k| x[n * 8 + k] * w1[j * 8 + k]).sum();
                (s + b1[j]).max(0.0)
            })
            .collect();
        let mean = h.iter().sum::<f64>() / 16.0;
        let var = h.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / 16.0;
        let r = 1.0 / (var + 1e-5).sqrt();
        let z: Vec<f64> = (0..16)
            .map(|j| (h[j] - mean) * r * g[j] + beta[j])
            .collect();
        let o: Vec<f64> = (0..4)
            .map(|c| (0..16).map(|j| z[j] * w2[c * 16 + j]).sum::<f64>() + b2[c])
            .collect();
        let m = o.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let lse = m + o.iter().map(|v| (v - m).exp()).sum::<f64>().ln();
        total += lse - o[y[n] as usize];
    }
    total / N as f64
}

/// `steps` training steps of a fresh MLP on `dev` with `opt`; each step's
/// loss is checked against `ref_loss` and each update against `reference`
/// (the naive optimizer on the parameters and gradients read back).
/// Returns the losses and the final parameters.
fn train(
    dev: Device,
    opt: &mut dyn Optimizer,
    mut reference: RefOpt,
    steps: usize,
) -> (Vec<f64>, Vec<Vec<f64>>) {
    let mut net = mlp(dev);
    let (x, y) = batch(dev);
    let (xv, yv) = (read(&x), y.to_vec::<i64>().unwrap());
    let mut losses = vec![];
    for t in 1..=steps {
        opt.zero_grad(&net);
        let loss = cross_entropy(&net.forward(&x).unwrap(), &y).unwrap();
        assert_eq!(loss.device(), dev);
        let l = loss.item::<f32>().unwrap() as f64;
        assert_close(
            &[l],
            &[ref_loss(&net, &xv, &yv)],
            1e-5,
            &format!("step {t}: loss against the naive forward"),
        );
        losses.push(l);
        loss.backward().unwrap();
        drop(loss);
        let mut want: Vec<Vec<f64>> = vec![];
        for (k, (name, p)) in net.named_parameters().into_iter().enumerate() {
            let g = p.grad().unwrap_or_else(|| panic!("{name}: no gradient"));
            assert_eq!(g.device(), dev, "{name}: gradient device");
            let mut pv = read(p);
            reference.update(k, &mut pv, &read(&g), t);
            want.push(pv);
        }
        opt.step(&mut net).unwrap();
        for ((name, p), w) in net.named_parameters().into_iter().zip(&want) {
            assert_close(
                &read(p),
                w,
                2e-5,
                &format!("step {t}: {name} against the naive update"),
            );
        }
    }
    let params = net.parameters().into_iter().map(read).collect();
    (losses, params)
}

/// Five Adam steps (and five SGD-with-momentum steps) of the MLP on `dev`:
/// every loss against a naive f64 forward, every update against a naive
/// optimizer, the loss decreasing; on CUDA the losses and the final
/// parameters equal a CPU run of the same steps to f32 rounding.
fn mlp_training_matches_cpu(dev: Device) {
    let adam = AdamConfig {
        lr: 5e-3,
        ..Default::default()
    };
    let sgd = SgdConfig {
        lr: 0.1,
        momentum: 0.9,
        ..Default::default()
    };
    type Make = Box<dyn Fn() -> (Box<dyn Optimizer>, RefOpt)>;
    let runs: [(&str, Make); 2] = [
        (
            "Adam",
            Box::new(move || {
                (
                    Box::new(Adam::new(adam).unwrap()) as Box<dyn Optimizer>,
                    RefOpt::adam(adam, false, DType::F32),
                )
            }),
        ),
        (
            "SGD momentum",
            Box::new(move || {
                (
                    Box::new(Sgd::new(sgd).unwrap()) as Box<dyn Optimizer>,
                    RefOpt::sgd(sgd, DType::F32),
                )
            }),
        ),
    ];
    for (what, make) in &runs {
        let (mut opt, reference) = make();
        let (losses, params) = train(dev, opt.as_mut(), reference, 5);
        assert_eq!(losses.len(), 5);
        assert!(
            losses[4] < losses[0],
            "{what}: the loss decreases over 5 steps: {losses:?}"
        );
        if dev.is_cuda() {
            let (mut opt, reference) = make();
            let (c_losses, c_params) = train(CPU, opt.as_mut(), reference, 5);
            assert_close(
                &losses,
                &c_losses,
                1e-4,
                &format!("{what}: losses (CUDA vs CPU)"),
            );
            for (k, (p, c)) in params.iter().zip(&c_params).enumerate() {
                assert_close(p, c, 1e-4, &format!("{what}: parameter {k} (CUDA vs CPU)"));
            }
        }
    }
}

// ----------------------------------------------------------- memory ---

/// Bytes of one f32 tensor of `n` elements (its rounded block).
fn f32_block(n: usize) -> usize {
    memory::round_size(n * 4)
}

/// A graph over `x`, `w`, `b`, `w2` whose ops save tensors (matmul saves
/// its operands, tanh and sigmoid their outputs, log_softmax its output,
/// mul both sides); only the scalar loss is returned.
fn graph(x: &Tensor, w: &Tensor, b: &Tensor, w2: &Tensor) -> Tensor {
    let a = x.matmul(w).unwrap().add(b).unwrap().tanh().unwrap();
    let s = a.matmul(w2).unwrap().sigmoid().unwrap();
    let l = s.mul(&s).unwrap().log_softmax(1).unwrap();
    l.mean_all().unwrap()
}

/// Exact allocator counts on `dev`: a graph holds memory beyond its
/// leaves; backward frees every saved tensor (what is left is exactly the
/// leaves, their gradients and the loss, by rounded sizes); an identical
/// second graph holds exactly as much as the first; dropping everything
/// returns to the baseline byte for byte.
fn graph_memory_is_freed_deterministically(dev: Device) {
    let make = || {
        let x = randn(&[32, 24], DType::F32, 50).to_device(dev).unwrap();
        let leaf = |s: &[usize], seed| {
            randn(s, DType::F32, seed)
                .to_device(dev)
                .unwrap()
                .requires_grad_(true)
                .unwrap()
        };
        (x, leaf(&[24, 16], 51), leaf(&[16], 52), leaf(&[16, 8], 53))
    };
    // Warm-up: whatever a device sets up on first use is not counted.
    {
        let (x, w, b, w2) = make();
        graph(&x, &w, &b, &w2).backward().unwrap();
    }
    let base = memory::memory_allocated(dev);
    let (x, w, b, w2) = make();
    let leaves = f32_block(32 * 24) + f32_block(24 * 16) + f32_block(16) + f32_block(16 * 8);
    assert_eq!(
        memory::memory_allocated(dev) - base,
        leaves,
        "the leaves, by rounded sizes"
    );
    let loss = graph(&x, &w, &b, &w2);
    let held = memory::memory_allocated(dev) - base - leaves;
    // At least tanh's and sigmoid's saved outputs and the loss.
    assert!(
        held >= f32_block(32 * 16) + f32_block(32 * 8) + f32_block(1),
        "the graph holds its saved tensors: {held} bytes"
    );
    let again = graph(&x, &w, &b, &w2);
    assert_eq!(
        memory::memory_allocated(dev) - base - leaves,
        2 * held,
        "an identical graph holds exactly as much"
    );
    drop(again);
    assert_eq!(memory::memory_allocated(dev) - base - leaves, held);
    loss.backward().unwrap();
    let grads = f32_block(24 * 16) + f32_block(16) + f32_block(16 * 8);
    assert_eq!(
        memory::memory_allocated(dev) - base,
        leaves + grads + f32_block(1),
        "after backward: leaves, their gradients and the loss"
    );
    for p in [&w, &b, &w2] {
        assert_eq!(p.grad().unwrap().device(), dev);
    }
    assert!(x.grad().is_none(), "no gradient for a tensor without grad");
    // The saved tensors are gone: a second backward fails.
    let e = loss.backward().expect_err("second backward");
    assert!(matches!(e, Error::Autograd { .. }), "{e}");
    drop(loss);
    assert_eq!(memory::memory_allocated(dev) - base, leaves + grads);
    w.zero_grad();
    assert_eq!(
        memory::memory_allocated(dev) - base,
        leaves + grads - f32_block(24 * 16),
        "zero_grad frees the gradient"
    );
    drop((x, w, b, w2));
    assert_eq!(memory::memory_allocated(dev), base, "back to the baseline");
}

/// Three Adam steps of the MLP on `dev`: after the first step (which
/// allocates the optimizer's state) the allocated bytes are exactly the
/// parameters, their gradients, Adam's two moments and the batch, the
/// same after steps 2 and 3; dropping net, optimizer and batch returns to
/// the baseline.
fn training_loop_memory_is_flat(dev: Device) {
    let step = |net: &mut Sequential, opt: &mut Adam, x: &Tensor, y: &Tensor| {
        opt.zero_grad(net);
        let loss = cross_entropy(&net.forward(x).unwrap(), y).unwrap();
        loss.backward().unwrap();
        drop(loss);
        opt.step(net).unwrap();
    };
    // Warm-up, as above.
    {
        let mut net = mlp(dev);
        let mut opt = Adam::new(AdamConfig::default()).unwrap();
        let (x, y) = batch(dev);
        step(&mut net, &mut opt, &x, &y);
    }
    let base = memory::memory_allocated(dev);
    let mut net = mlp(dev);
    let params: usize = net.parameters().iter().map(|p| f32_block(p.numel())).sum();
    let (x, y) = batch(dev);
    let data = f32_block(N * 8) + memory::round_size(N * 8);
    assert_eq!(memory::memory_allocated(dev) - base, params + data);
    let mut opt = Adam::new(AdamConfig::default()).unwrap();
    let mut after = vec![];
    for _ in 0..3 {
        step(&mut net, &mut opt, &x, &y);
        after.push(memory::memory_allocated(dev) - base);
    }
    assert_eq!(
        after[0],
        4 * params + data,
        "parameters, gradients, two moments and the batch"
    );
    assert_eq!(after[1], after[2], "no growth from step 2 to step 3");
    assert_eq!(after[0], after[1], "no growth from step 1 to step 2");
    drop(opt);
    assert_eq!(memory::memory_allocated(dev) - base, 2 * params + data);
    drop(net);
    drop((x, y));
    assert_eq!(memory::memory_allocated(dev), base, "back to the baseline");
}
