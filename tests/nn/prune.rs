//! Issue 17 item 7, pruning (`nn::prune`, PyTorch's
//! `torch.nn.utils.prune`): which entries each method masks (against
//! direct host computations), that a pruned layer's forward and gradients
//! use the mask, the names (`weight_orig`, `weight_mask`), the exact memory
//! figures (masking costs one weight-sized buffer, `remove` gives it back,
//! `drop_pruned_units` makes the pair smaller), and the errors. The masks
//! PyTorch itself computes are in the differential suite.

use crate::common;

#[cfg(feature = "cuda")]
use common::devices::on_both;
use common::{assert_close, read, tensor};
use tensorscope::nn::{prune, Conv2d, Linear, Module, ReLU, Sequential, GELU};
use tensorscope::optim::{Optimizer, Sgd, SgdConfig};
use tensorscope::{memory, ConvOptions, DType, Device, Tensor};

const F32: DType = DType::F32;

/// Distinct magnitudes: entry i has |v| = (i + 1) / 100 in a scrambled
/// order, alternating in sign.
fn distinct(n: usize) -> Vec<f64> {
    (0..n)
        .map(|i| {
            let k = (i * 7 + 3) % n; // a permutation when gcd(7, n) = 1
            let s = if i % 2 == 0 { 1.0 } else { -1.0 };
            s * (k + 1) as f64 / 100.0
        })
        .collect()
}

fn linear(inp: usize, out: usize, bias: bool, dev: Device) -> Linear {
    let mut l = Linear::with_options(inp, out, bias, F32, dev).unwrap();
    l.weight = tensor(&distinct(inp * out), &[out, inp], F32, dev)
        .requires_grad_(true)
        .unwrap();
    l
}

fn names(v: Vec<(String, &Tensor)>) -> Vec<String> {
    v.into_iter().map(|(n, _)| n).collect()
}

/// Bytes one f32 tensor of `shape` takes from `dev`'s allocator.
fn bytes_of(shape: &[usize], dev: Device) -> usize {
    let before = memory::memory_allocated(dev);
    let t = Tensor::zeros(shape, F32, dev).unwrap();
    let b = memory::memory_allocated(dev) - before;
    drop(t);
    b
}

fn mask_of(m: &dyn Module, name: &str) -> Vec<f64> {
    let b = m.named_buffers();
    read(b.iter().find(|(n, _)| n == name).expect("mask").1)
}

fn l1_masks_the_smallest_and_the_layer_uses_the_mask(dev: Device) {
    let mut fc = linear(5, 4, true, dev); // 20 weights, |w| in 0.01..0.20
    let w = read(&fc.weight);
    let dense = memory::memory_allocated(dev);
    prune::l1_unstructured(&mut fc, "weight", 0.3).unwrap();
    // The mask is one more weight-sized buffer.
    assert_eq!(
        memory::memory_allocated(dev) - dense,
        bytes_of(&[4, 5], dev)
    );
    assert_eq!(names(fc.named_parameters()), ["weight_orig", "bias"]);
    assert_eq!(names(fc.named_buffers()), ["weight_mask"]);
    assert_eq!(
        names(fc.named_state()),
        ["weight_orig", "bias", "weight_mask"]
    );
    assert!(prune::is_pruned(&fc));
    let mask = mask_of(&fc, "weight_mask");
    // 0.3 * 20 = 6: the six smallest magnitudes, 0.01..0.06.
    for (m, v) in mask.iter().zip(&w) {
        assert_eq!(*m, if v.abs() < 0.065 { 0.0 } else { 1.0 }, "w = {v}");
    }
    // The field still holds the original values.
    assert_eq!(read(&fc.weight), w);
    let eff = read(&prune::masked(&fc, "weight").unwrap());
    let want: Vec<f64> = w.iter().zip(&mask).map(|(a, b)| a * b).collect();
    assert_eq!(eff, want);
    // Forward: x (w * mask)^T + b; backward: the gradient of weight_orig is
    // masked.
    let x = tensor(&distinct(15), &[3, 5], F32, dev);
    let y = fc.forward(&x).unwrap();
    let (xv, b) = (read(&x), read(fc.bias.as_ref().unwrap()));
    let mut yw = vec![0.0; 12];
    for r in 0..3 {
        for o in 0..4 {
            yw[r * 4 + o] = b[o] + (0..5).map(|i| xv[r * 5 + i] * want[o * 5 + i]).sum::<f64>();
        }
    }
    assert_close(&read(&y), &yw, 1e-6, "pruned forward");
    y.sum_all().unwrap().backward().unwrap();
    let g = read(&fc.weight.grad().unwrap());
    for o in 0..4 {
        for i in 0..5 {
            let dense_g: f64 = (0..3).map(|r| xv[r * 5 + i]).sum();
            let k = o * 5 + i;
            assert_close(&[g[k]], &[dense_g * mask[k]], 1e-6, "masked gradient");
        }
    }
    // remove: the masked values in place, the name back, the mask freed.
    fc.zero_grad();
    drop((y, x));
    prune::remove(&mut fc, "weight").unwrap();
    assert_eq!(memory::memory_allocated(dev), dense);
    assert_eq!(names(fc.named_parameters()), ["weight", "bias"]);
    assert!(fc.named_buffers().is_empty() && !prune::is_pruned(&fc));
    assert_eq!(read(&fc.weight), want);
    assert!(fc.weight.requires_grad() && fc.weight.is_leaf());
}

fn repeated_pruning_counts_what_is_left(dev: Device) {
    let mut fc = linear(5, 4, false, dev);
    let w = read(&fc.weight);
    prune::l1_unstructured(&mut fc, "weight", 0.5).unwrap();
    prune::l1_unstructured(&mut fc, "weight", 0.5).unwrap();
    // 10 of 20, then 5 of the 10 left: the 15 smallest.
    let mask = mask_of(&fc, "weight_mask");
    for (m, v) in mask.iter().zip(&w) {
        assert_eq!(*m, if v.abs() < 0.155 { 0.0 } else { 1.0 }, "w = {v}");
    }
    // A count, then rows: 2 entries, then half of the rows that have an
    // entry left, by the L1 norm of the masked weight (PyTorch's
    // `module.weight`).
    let mut fc = linear(5, 4, false, dev);
    prune::l1_unstructured(&mut fc, "weight", 2usize).unwrap();
    prune::ln_structured(&mut fc, "weight", 0.5, 1.0, 0).unwrap();
    let mask = mask_of(&fc, "weight_mask");
    let norms: Vec<f64> = (0..4)
        .map(|o| {
            w[o * 5..o * 5 + 5]
                .iter()
                .filter(|v| v.abs() > 0.025)
                .map(|v| v.abs())
                .sum()
        })
        .collect();
    let mut order: Vec<usize> = (0..4).collect();
    order.sort_by(|&a, &b| norms[b].total_cmp(&norms[a]));
    let kept = &order[..2];
    for o in 0..4 {
        for i in 0..5 {
            let k = o * 5 + i;
            let first = if w[k].abs() < 0.025 { 0.0 } else { 1.0 };
            let want = if kept.contains(&o) { first } else { 0.0 };
            assert_eq!(mask[k], want, "row {o} col {i}");
        }
    }
}

fn ln_structured_prunes_whole_channels(dev: Device) {
    let mut conv =
        Conv2d::with_options(3, 4, [2, 2], ConvOptions::default(), true, F32, dev).unwrap();
    conv.weight = tensor(&distinct(48), &[4, 3, 2, 2], F32, dev)
        .requires_grad_(true)
        .unwrap();
    let w = read(&conv.weight);
    for (n, dim) in [(2.0, 0isize), (1.0, 1), (f64::INFINITY, -3)] {
        let mut c =
            Conv2d::with_options(3, 4, [2, 2], ConvOptions::default(), true, F32, dev).unwrap();
        c.weight = conv.weight.detach().deep_clone().unwrap();
        prune::ln_structured(&mut c, "weight", 0.5, n, dim).unwrap();
        let d = dim.rem_euclid(4) as usize;
        let shape = [4usize, 3, 2, 2];
        let inner: usize = shape[d + 1..].iter().product();
        let ch = |k: usize| (k / inner) % shape[d];
        let mut norms = vec![0.0f64; shape[d]];
        for (k, v) in w.iter().enumerate() {
            let a = v.abs();
            norms[ch(k)] = if n == 2.0 {
                norms[ch(k)] + a * a
            } else if n == 1.0 {
                norms[ch(k)] + a
            } else {
                norms[ch(k)].max(a)
            };
        }
        let mut order: Vec<usize> = (0..shape[d]).collect();
        order.sort_by(|&a, &b| norms[b].total_cmp(&norms[a]));
        let keep = shape[d] - (0.5 * shape[d] as f64).round_ties_even() as usize;
        let mask = mask_of(&c, "weight_mask");
        for (k, m) in mask.iter().enumerate() {
            let want = if order[..keep].contains(&ch(k)) {
                1.0
            } else {
                0.0
            };
            assert_eq!(*m, want, "n = {n}, dim = {dim}, entry {k}");
        }
        // The convolution runs with the masked weight.
        let x = tensor(&distinct(50), &[1, 2, 5, 5], F32, dev)
            .repeat(&[1, 2, 1, 1])
            .unwrap()
            .narrow(1, 0, 3)
            .unwrap();
        let got = c.forward(&x).unwrap();
        let eff = prune::masked(&c, "weight").unwrap();
        let want = x
            .conv2d(&eff, c.bias.as_ref(), &ConvOptions::default())
            .unwrap();
        assert_eq!(read(&got), read(&want));
    }
}

fn global_pruning_cuts_at_one_threshold(dev: Device) {
    let mut net = Sequential::new();
    let mut a = linear(5, 4, true, dev);
    let mut b = linear(4, 3, true, dev);
    // The second layer's weights are ten times larger: it loses fewer.
    b.weight = b
        .weight
        .mul_scalar(10.0)
        .unwrap()
        .detach()
        .requires_grad_(true)
        .unwrap();
    a.weight = a.weight.detach().requires_grad_(true).unwrap();
    net.add(a).add(ReLU).add(b);
    let before: Vec<Vec<f64>> = net
        .named_parameters()
        .iter()
        .filter(|(n, _)| n.ends_with("weight"))
        .map(|(_, t)| read(t))
        .collect();
    prune::global_unstructured(
        &mut net,
        &["0.weight", "2.weight"],
        prune::Unstructured::L1,
        0.5,
    )
    .unwrap();
    assert_eq!(
        names(net.named_buffers()),
        ["0.weight_mask", "2.weight_mask"]
    );
    let (m0, m2) = (
        mask_of(&net, "0.weight_mask"),
        mask_of(&net, "2.weight_mask"),
    );
    // 0.5 * 32 = 16 entries, at one threshold across both layers.
    let zeros = m0.iter().chain(&m2).filter(|&&m| m == 0.0).count();
    assert_eq!(zeros, 16);
    let all: Vec<(f64, f64)> = before[0]
        .iter()
        .zip(&m0)
        .chain(before[1].iter().zip(&m2))
        .map(|(v, m)| (v.abs(), *m))
        .collect();
    let cut = all
        .iter()
        .filter(|p| p.1 == 0.0)
        .map(|p| p.0)
        .fold(0.0, f64::max);
    let kept = all
        .iter()
        .filter(|p| p.1 == 1.0)
        .map(|p| p.0)
        .fold(f64::INFINITY, f64::min);
    assert!(cut < kept, "pruned up to {cut}, kept from {kept}");
    assert!(m2.iter().filter(|&&m| m == 0.0).count() < 12 / 2);
    // The pruned network's forward uses both masks; the optimizer updates
    // weight_orig, and the masked entries stay zero in the effective weight.
    let mut opt = Sgd::new(SgdConfig {
        lr: 0.1,
        ..SgdConfig::default()
    })
    .unwrap();
    let x = tensor(&distinct(10), &[2, 5], F32, dev);
    let orig0 = read(net.named_parameters()[0].1);
    net.forward(&x)
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    opt.step(&mut net).unwrap();
    let after = read(net.named_parameters()[0].1);
    for k in 0..20 {
        if m0[k] == 0.0 {
            assert_eq!(after[k], orig0[k], "a pruned entry got a gradient");
        }
    }
    let eff = read(&prune::masked(&net, "0.weight").unwrap());
    assert!(eff.iter().zip(&m0).all(|(v, m)| *m == 1.0 || *v == 0.0));
}

fn random_pruning_is_exact_in_count_and_seeded(dev: Device) {
    let run = |seed: u64| {
        tensorscope::manual_seed(seed);
        let mut fc = linear(7, 6, false, dev);
        prune::random_unstructured(&mut fc, "weight", 0.4).unwrap();
        prune::random_structured(&mut fc, "weight", 1usize, 1).unwrap();
        mask_of(&fc, "weight_mask")
    };
    let (a, b, c) = (run(3), run(3), run(4));
    assert_eq!(a, b, "the same seed, the same mask");
    assert_ne!(a, c);
    // 0.4 * 42 = 16.8 -> 17 entries, then one whole column of 7.
    let zero_cols: Vec<usize> = (0..7)
        .filter(|&i| (0..6).all(|o| a[o * 7 + i] == 0.0))
        .collect();
    assert!(!zero_cols.is_empty());
    let zeros = a.iter().filter(|&&m| m == 0.0).count();
    let in_col: usize = (0..6).filter(|&o| a[o * 7 + zero_cols[0]] == 0.0).count();
    assert!(zeros >= 17 && zeros <= 17 + in_col, "{zeros} zeros");
}

fn dropping_pruned_units_keeps_the_function_and_frees_memory(dev: Device) {
    let fc1 = linear(8, 10, true, dev);
    let fc2 = linear(10, 3, true, dev);
    let mut fc1 = fc1;
    prune::ln_structured(&mut fc1, "weight", 0.4, 2.0, 0).unwrap();
    let x = tensor(&distinct(16), &[2, 8], F32, dev);
    for act in [&ReLU as &dyn Module, &GELU] {
        let want = read(
            &fc2.forward(&act.forward(&fc1.forward(&x).unwrap()).unwrap())
                .unwrap(),
        );
        let before = memory::memory_allocated(dev);
        let (a, b) = prune::drop_pruned_units(&fc1, act, &fc2).unwrap();
        assert_eq!(
            (a.weight.shape(), b.weight.shape()),
            (&[6, 8][..], &[3, 6][..])
        );
        // The new pair: 6 * 8 + 6 + 3 * 6 + 3 floats, each its own tensor.
        let grown = memory::memory_allocated(dev) - before;
        let want_bytes = bytes_of(&[6, 8], dev)
            + bytes_of(&[6], dev)
            + bytes_of(&[3, 6], dev)
            + bytes_of(&[3], dev);
        assert_eq!(grown, want_bytes);
        let got = read(
            &b.forward(&act.forward(&a.forward(&x).unwrap()).unwrap())
                .unwrap(),
        );
        // The dead units' constant act(bias) went into the second bias.
        assert_close(&got, &want, 1e-5, "the smaller pair");
        assert!(a.weight.requires_grad() && b.bias.as_ref().unwrap().requires_grad());
    }
}

fn a_pruned_layer_moves_and_saves_with_its_mask(dev: Device) {
    let mut fc = linear(5, 4, true, Device::Cpu);
    prune::l1_unstructured(&mut fc, "bias", 0.5).unwrap();
    prune::l1_unstructured(&mut fc, "weight", 0.5).unwrap();
    assert_eq!(
        names(fc.named_state()),
        ["weight_orig", "bias_orig", "bias_mask", "weight_mask"]
    );
    let want = read(
        &fc.forward(&tensor(&distinct(5), &[1, 5], F32, Device::Cpu))
            .unwrap(),
    );
    fc.to_device(dev).unwrap();
    for (n, t) in fc.named_state() {
        assert_eq!(t.device(), dev, "{n}");
    }
    let got = read(
        &fc.forward(&tensor(&distinct(5), &[1, 5], F32, dev))
            .unwrap(),
    );
    assert_close(&got, &want, 1e-6, "after to_device");
    // remove one, the other stays pruned.
    prune::remove(&mut fc, "bias").unwrap();
    assert_eq!(
        names(fc.named_state()),
        ["weight_orig", "bias", "weight_mask"]
    );
}

fn bad_arguments_are_errors_naming_the_call(dev: Device) {
    let msg = |r: tensorscope::Result<()>| r.unwrap_err().to_string();
    let mut fc = linear(5, 4, true, dev);
    let e = msg(prune::l1_unstructured(&mut fc, "weight", 1.5));
    assert!(
        e.contains("prune::l1_unstructured") && e.contains("1.5"),
        "{e}"
    );
    let e = msg(prune::l1_unstructured(&mut fc, "weight", f64::NAN));
    assert!(e.contains("NaN"), "{e}");
    let e = msg(prune::l1_unstructured(&mut fc, "weight", 21usize));
    assert!(e.contains("21") && e.contains("20"), "{e}");
    let e = msg(prune::random_unstructured(&mut fc, "wieght", 0.1));
    assert!(
        e.contains("prune::random_unstructured") && e.contains("wieght") && e.contains("bias"),
        "{e}"
    );
    let e = msg(prune::ln_structured(&mut fc, "bias", 0.5, 2.0, 0));
    assert!(
        e.contains("two or more dimensions") && e.contains("[4]"),
        "{e}"
    );
    let e = msg(prune::ln_structured(&mut fc, "weight", 0.5, 2.0, 2));
    assert!(e.contains("prune::ln_structured"), "{e}");
    let e = msg(prune::ln_structured(&mut fc, "weight", 0.5, f64::NAN, 0));
    assert!(e.contains("NaN"), "{e}");
    let e = msg(prune::remove(&mut fc, "weight"));
    assert!(e.contains("prune::remove") && e.contains("pruned"), "{e}");
    let bad = Tensor::ones(&[5, 4], F32, dev).unwrap();
    let e = msg(prune::custom_from_mask(&mut fc, "weight", &bad));
    assert!(e.contains("[4, 5]") && e.contains("[5, 4]"), "{e}");
    let mut net = Sequential::new();
    net.add(linear(3, 3, false, dev));
    let e = msg(prune::global_unstructured(
        &mut net,
        &[],
        prune::Unstructured::L1,
        0.5,
    ));
    assert!(e.contains("prune::global_unstructured"), "{e}");
    let e = msg(prune::global_unstructured(
        &mut net,
        &["0.weight", "0.weight"],
        prune::Unstructured::L1,
        0.5,
    ));
    assert!(e.contains("twice"), "{e}");
    // Nothing was pruned by the refused calls.
    assert!(!prune::is_pruned(&fc) && !prune::is_pruned(&net));
    let (a, b) = (linear(5, 4, true, dev), linear(3, 2, true, dev));
    let e = prune::drop_pruned_units(&a, &ReLU, &b)
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("prune::drop_pruned_units") && e.contains("[4, 5]"),
        "{e}"
    );
}

/// Cases where an earlier version differed from PyTorch 2.15, with the masks
/// PyTorch printed: a second structured pruning ranks the *masked* weight's
/// channels; a mask value other than 0 and 1 is neither pruned nor
/// prunable; a NaN makes a channel's inf-norm NaN (kept first); and an
/// optimizer keeps a parameter's state through pruning.
fn where_pytorch_and_an_earlier_version_differed(dev: Device) {
    let layer = |w: &[f64], shape: &[usize]| {
        Linear::from_parts(
            tensor(w, shape, F32, dev).requires_grad_(true).unwrap(),
            None,
        )
        .unwrap()
    };
    let mut fc = layer(&[1.0, 3.0, 2.9, 0.5], &[2, 2]);
    prune::ln_structured(&mut fc, "weight", 1usize, 2.0, 0).unwrap();
    prune::ln_structured(&mut fc, "weight", 1usize, 2.0, 1).unwrap();
    assert_eq!(mask_of(&fc, "weight_mask"), [0.0, 1.0, 0.0, 0.0]);
    let mut fc = layer(&[3.0, 1.0, 1.0, 2.0], &[2, 2]);
    let custom = tensor(&[0.0, 1.0, 1.0, 1.0], &[2, 2], F32, dev);
    prune::custom_from_mask(&mut fc, "weight", &custom).unwrap();
    prune::ln_structured(&mut fc, "weight", 1usize, 2.0, 0).unwrap();
    assert_eq!(mask_of(&fc, "weight_mask"), [0.0, 0.0, 1.0, 1.0]);
    let mut fc = layer(&(1..=10).map(f64::from).collect::<Vec<_>>(), &[2, 5]);
    let half = Tensor::full(&[2, 5], 0.5, F32, dev).unwrap();
    prune::custom_from_mask(&mut fc, "weight", &half).unwrap();
    prune::l1_unstructured(&mut fc, "weight", 0.5).unwrap();
    assert_eq!(mask_of(&fc, "weight_mask"), [0.5; 10]);
    let mut fc = layer(&[f64::NAN, 0.1, 1.0, 1.0], &[2, 2]);
    prune::ln_structured(&mut fc, "weight", 1usize, f64::INFINITY, 0).unwrap();
    assert_eq!(mask_of(&fc, "weight_mask"), [1.0, 1.0, 0.0, 0.0]);
    // Adam's state carries on through prune and remove: two steps with a
    // rename in between equal two plain steps.
    let run = |rename: bool| {
        let mut net = Sequential::new();
        net.add(layer(&distinct(6), &[2, 3]));
        let mut opt = tensorscope::optim::Adam::new(Default::default()).unwrap();
        let x = tensor(&distinct(3), &[1, 3], F32, dev);
        for step in 0..3 {
            if rename && step == 1 {
                prune::identity(&mut net, "0.weight").unwrap();
            }
            if rename && step == 2 {
                prune::remove(&mut net, "0.weight").unwrap();
            }
            net.zero_grad();
            net.forward(&x)
                .unwrap()
                .square()
                .unwrap()
                .sum_all()
                .unwrap()
                .backward()
                .unwrap();
            opt.step(&mut net).unwrap();
        }
        read(net.named_parameters()[0].1)
    };
    assert_eq!(run(true), run(false));
    // A field given another shape than its mask's is an Err, not a panic.
    let mut fc = linear(5, 4, false, dev);
    prune::l1_unstructured(&mut fc, "weight", 0.5).unwrap();
    fc.weight = Tensor::zeros(&[3, 5], F32, dev).unwrap();
    let e = prune::l1_unstructured(&mut fc, "weight", 0.5)
        .unwrap_err()
        .to_string();
    assert!(e.contains("[3, 5]") && e.contains("[4, 5]"), "{e}");
}

#[cfg(feature = "cuda")]
on_both!(
    l1_masks_the_smallest_and_the_layer_uses_the_mask,
    repeated_pruning_counts_what_is_left,
    ln_structured_prunes_whole_channels,
    global_pruning_cuts_at_one_threshold,
    random_pruning_is_exact_in_count_and_seeded,
    dropping_pruned_units_keeps_the_function_and_frees_memory,
    a_pruned_layer_moves_and_saves_with_its_mask,
    bad_arguments_are_errors_naming_the_call,
    where_pytorch_and_an_earlier_version_differed,
);

#[cfg(not(feature = "cuda"))]
common::on_cpu!(
    l1_masks_the_smallest_and_the_layer_uses_the_mask,
    repeated_pruning_counts_what_is_left,
    ln_structured_prunes_whole_channels,
    global_pruning_cuts_at_one_threshold,
    random_pruning_is_exact_in_count_and_seeded,
    dropping_pruned_units_keeps_the_function_and_frees_memory,
    a_pruned_layer_moves_and_saves_with_its_mask,
    bad_arguments_are_errors_naming_the_call,
    where_pytorch_and_an_earlier_version_differed,
);
