//! Sequential: results, parameter naming, donation decisions and counts, and
//! memory measured exactly through the allocator (inference peak independent
//! of depth; zero extra bytes for an all-elementwise chain on an owned input;
//! in training exactly the saved activations stay alive after forward).

use tensorscope::nn::{
    BatchNorm1d, DonationStats, Dropout, Linear, Module, ReLU, Sequential, Sigmoid, Tanh, GELU,
};
use tensorscope::{autograd, memory, DType, Device, Generator, Tensor};
fn lock() -> crate::common::Guard {
    crate::common::serial()
}

const CPU: Device = Device::Cpu;

fn randn(shape: &[usize], seed: u64) -> Tensor {
    let mut g = Generator::new(seed);
    Tensor::randn_with(shape, DType::F32, CPU, &mut g).unwrap()
}

fn vals(t: &Tensor) -> Vec<f64> {
    t.to_vec::<f64>().unwrap()
}

fn mlp(n: usize, w: usize) -> Sequential {
    let mut s = Sequential::new();
    for _ in 0..n {
        s.add(Linear::new(w, w).unwrap()).add(ReLU);
    }
    s
}

fn elementwise_chain() -> Sequential {
    let mut d = Dropout::new(0.5).unwrap();
    d.eval();
    let mut s = Sequential::new();
    s.add(ReLU)
        .add(GELU)
        .add(Tanh)
        .add(Sigmoid)
        .add(d)
        .add(ReLU)
        .add(Tanh);
    s
}

#[test]
fn output_matches_layer_by_layer() {
    let _g = lock();
    let net = mlp(3, 16);
    let x = randn(&[4, 16], 1);
    let mut r = x.deep_clone().unwrap();
    for l in net.layers() {
        r = l.forward(&r).unwrap();
    }
    let y = net.forward(&x).unwrap();
    assert_eq!(vals(&y), vals(&r));
    let y2 = autograd::no_grad(|| net.forward_owned(x.deep_clone().unwrap())).unwrap();
    assert_eq!(vals(&y2), vals(&r));
    // An empty Sequential is the identity.
    let e = Sequential::new();
    assert!(e.is_empty());
    assert_eq!(vals(&e.forward(&x).unwrap()), vals(&x));
}

#[test]
fn parameters_then_buffers_and_train_eval() {
    let _g = lock();
    let mut net = Sequential::new();
    net.add(Linear::new(3, 4).unwrap())
        .add(BatchNorm1d::new(4).unwrap())
        .add(ReLU)
        .add(Linear::new(4, 2).unwrap());
    let names: Vec<String> = net.named_parameters().into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        names,
        ["0.weight", "0.bias", "1.weight", "1.bias", "3.weight", "3.bias"]
    );
    let names: Vec<String> = net
        .named_parameters_mut()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(
        names,
        [
            "0.weight",
            "0.bias",
            "1.weight",
            "1.bias",
            "3.weight",
            "3.bias",
            "1.running_mean",
            "1.running_var",
            "1.num_batches_tracked"
        ]
    );
    assert!(net.parameters().iter().all(|p| p.requires_grad()));
    assert!(net.is_training() && net.layers()[1].is_training());
    net.eval();
    assert!(!net.is_training() && !net.layers()[1].is_training());
    net.train(true);
    assert!(net.layers()[1].is_training());
}

#[test]
fn donation_taken_when_unique() {
    let _g = lock();
    let mut net = Sequential::new();
    net.add(Linear::new(8, 8).unwrap()).add(ReLU).add(Tanh);
    let x = randn(&[2, 8], 2);
    let y = autograd::no_grad(|| net.forward_owned(x)).unwrap();
    assert_eq!(y.shape(), &[2, 8]);
    assert_eq!(
        net.donation_stats(),
        DonationStats {
            offered: 2,
            taken: 2,
            ..Default::default()
        }
    );
    net.reset_donation_stats();
    assert_eq!(net.donation_stats(), DonationStats::default());

    // An all-elementwise chain on an owned input: everything in place, the
    // result is the input's buffer.
    let chain = elementwise_chain();
    let x = randn(&[3, 5], 3);
    let ptr = x.data_ptr();
    let r: Vec<f64> = {
        let mut t = x.deep_clone().unwrap();
        for l in chain.layers() {
            t = l.forward(&t).unwrap();
        }
        vals(&t)
    };
    let y = chain.forward_owned(x).unwrap();
    assert_eq!(y.data_ptr(), ptr);
    assert_eq!(vals(&y), r);
    assert_eq!(
        chain.donation_stats(),
        DonationStats {
            offered: 7,
            taken: 7,
            ..Default::default()
        }
    );
}

#[test]
fn donation_refused_when_the_caller_keeps_an_alias_or_a_view() {
    let _g = lock();
    let chain = elementwise_chain();
    let x = randn(&[3, 5], 4);
    let keep = x.alias();
    let before = vals(&keep);
    let y = chain.forward_owned(x).unwrap();
    assert_eq!(vals(&keep), before, "the caller's alias is not written");
    assert!(!y.shares_storage(&keep));
    // The first layer refuses; its fresh output is then donated down the chain.
    assert_eq!(
        chain.donation_stats(),
        DonationStats {
            offered: 7,
            taken: 6,
            refused_shared: 1,
            ..Default::default()
        }
    );

    chain.reset_donation_stats();
    let x = randn(&[3, 5], 5);
    let view = x.view(&[15]).unwrap();
    let before = vals(&view);
    let _y = chain.forward_owned(x).unwrap();
    assert_eq!(vals(&view), before, "a view of the input is not written");
    assert_eq!(chain.donation_stats().refused_shared, 1);

    // A borrowed input is never offered.
    chain.reset_donation_stats();
    let x = randn(&[3, 5], 6);
    let before = vals(&x);
    let _y = chain.forward(&x).unwrap();
    assert_eq!(vals(&x), before);
    let s = chain.donation_stats();
    assert_eq!((s.borrowed, s.offered, s.taken), (1, 6, 6));

    // An expanded input (one element at many places) is not written.
    chain.reset_donation_stats();
    let x = randn(&[1, 5], 7).expand(&[3, 5]).unwrap();
    let y = chain.forward_owned(x).unwrap();
    assert_eq!(y.shape(), &[3, 5]);
    assert_eq!(
        chain.donation_stats(),
        DonationStats {
            offered: 7,
            taken: 6,
            refused_other: 1,
            ..Default::default()
        }
    );

    // Dropout in eval passes a shared buffer through untouched; the next
    // in-place layer then refuses it.
    let mut d = Dropout::new(0.5).unwrap();
    d.eval();
    let mut net = Sequential::new();
    net.add(d).add(ReLU);
    let x = randn(&[3, 5], 8);
    let keep = x.alias();
    let before = vals(&keep);
    let y = net.forward_owned(x).unwrap();
    assert_eq!(vals(&keep), before);
    assert_eq!(
        vals(&y),
        before.iter().map(|v| v.max(0.0)).collect::<Vec<_>>()
    );
    assert_eq!(
        net.donation_stats(),
        DonationStats {
            offered: 2,
            refused_shared: 2,
            ..Default::default()
        }
    );
}

#[test]
fn donation_refused_when_autograd_needs_the_input() {
    let _g = lock();
    let mut net = Sequential::new();
    net.add(ReLU).add(Tanh);
    let leaf = randn(&[4, 3], 8)
        .to_dtype(DType::F64)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let xv = vals(&leaf);
    let y = net.forward_owned(leaf.alias()).unwrap();
    // ReLU: the input requires grad (and here the caller also keeps it).
    // Tanh: ReLU's output is saved by ReluBackward, so it is shared.
    let s = net.donation_stats();
    assert_eq!((s.offered, s.taken), (2, 0));
    assert_eq!(s.refused_shared, 2);
    y.sum_all().unwrap().backward().unwrap();
    let g = vals(&leaf.grad().unwrap());
    for (x, g) in xv.iter().zip(&g) {
        let r = if *x > 0.0 {
            1.0 - x.tanh().powi(2)
        } else {
            0.0
        };
        assert!((g - r).abs() < 1e-12);
    }

    // The only handle to a tensor that requires grad, in grad mode: refused for autograd.
    net.reset_donation_stats();
    let mut lin = Sequential::new();
    lin.add(Linear::with_options(3, 3, true, DType::F64, CPU).unwrap())
        .add(Sigmoid);
    let x = randn(&[4, 3], 9).to_dtype(DType::F64).unwrap();
    let _y = lin.forward_owned(x).unwrap();
    assert_eq!(
        lin.donation_stats(),
        DonationStats {
            offered: 1,
            refused_autograd: 1,
            ..Default::default()
        }
    );
    // Under no_grad the same forward writes in place.
    lin.reset_donation_stats();
    let x = randn(&[4, 3], 9).to_dtype(DType::F64).unwrap();
    let _y = autograd::no_grad(|| lin.forward_owned(x)).unwrap();
    assert_eq!(
        lin.donation_stats(),
        DonationStats {
            offered: 1,
            taken: 1,
            ..Default::default()
        }
    );
}

/// Peak bytes above the baseline (parameters and input alive) of `f`, and
/// what it leaves allocated above the baseline.
fn peak_of(f: impl FnOnce() -> Tensor) -> (usize, isize, Tensor) {
    let base = memory::memory_allocated(CPU);
    memory::reset_peak_memory_stats(CPU);
    let y = f();
    let peak = memory::max_memory_allocated(CPU) - base;
    let left = memory::memory_allocated(CPU) as isize - base as isize;
    (peak, left, y)
}

const W: usize = 64;
const B: usize = 8;
const ACT: usize = W * B * 4; // 2 KiB: a multiple of the 512-byte block

#[test]
fn inference_peak_is_at_most_two_activations_whatever_the_depth() {
    let _g = lock();
    let mut peaks = Vec::new();
    for n in [4, 16] {
        let net = mlp(n, W);
        let _ng = autograd::no_grad_guard();
        let x = randn(&[B, W], 10);
        let (borrowed, left, y) = peak_of(|| net.forward(&x).unwrap());
        assert_eq!(left, ACT as isize, "only the output stays");
        drop(y);
        let x = randn(&[B, W], 10);
        let (owned, left, y) = peak_of(|| net.forward_owned(x).unwrap());
        assert_eq!(left, 0, "the output replaces the consumed input");
        drop(y);
        let s = net.donation_stats();
        assert_eq!(
            (s.taken, s.offered),
            (2 * n, 2 * n),
            "every ReLU wrote in place"
        );
        peaks.push((borrowed, owned));
    }
    assert_eq!(
        peaks[0], peaks[1],
        "the peak does not depend on depth: {peaks:?}"
    );
    let (borrowed, owned) = peaks[0];
    assert!(
        borrowed <= 2 * ACT,
        "borrowed input: peak {borrowed} > 2 activations of {ACT}"
    );
    assert!(
        owned <= 2 * ACT,
        "owned input: peak {owned} > 2 activations of {ACT}"
    );
    assert_eq!(borrowed, 2 * ACT);
    assert_eq!(owned, ACT);
}

#[test]
fn elementwise_chain_on_owned_input_allocates_nothing() {
    let _g = lock();
    let chain = elementwise_chain();
    for grad_mode in [false, true] {
        // In grad mode too: the input does not require grad.
        let _m = if grad_mode {
            autograd::enable_grad_guard()
        } else {
            autograd::no_grad_guard()
        };
        let x = randn(&[B, W], 11);
        let ptr = x.data_ptr();
        let (peak, left, y) = peak_of(|| chain.forward_owned(x).unwrap());
        assert_eq!((peak, left), (0, 0), "grad mode {grad_mode}");
        assert_eq!(y.data_ptr(), ptr);
    }
    // A naive loop keeping every intermediate holds one activation per layer.
    let x = randn(&[B, W], 11);
    let (peak, _, v) = peak_of(|| {
        let mut all = vec![x.alias()];
        for l in chain.layers() {
            let y = l.forward(all.last().unwrap()).unwrap();
            all.push(y);
        }
        Tensor::stack(&all.iter().collect::<Vec<_>>(), 0).unwrap()
    });
    drop(v);
    assert!(peak >= 6 * ACT, "naive peak {peak}");
}

#[test]
fn training_keeps_exactly_what_backward_needs() {
    let _g = lock();
    let n = 3;
    let before_model = memory::memory_allocated(CPU);
    let net = mlp(n, W);
    let model_bytes = memory::memory_allocated(CPU) - before_model;
    let x = randn(&[B, W], 12);
    let base = memory::memory_allocated(CPU);
    let y = net.forward(&x).unwrap();
    // Each Linear saves its input (x: already counted; then ReLU outputs) and
    // the weight's transpose (a view: no bytes); each ReLU saves its output.
    // The pre-activations are freed as soon as ReLU has consumed them.
    assert_eq!(
        memory::memory_allocated(CPU) - base,
        n * ACT,
        "the {n} ReLU outputs"
    );
    let s = net.donation_stats();
    assert_eq!((s.offered, s.refused_autograd, s.taken), (n, n, 0));
    let loss = y.sum_all().unwrap();
    loss.backward().unwrap();
    drop(loss);
    drop(y);
    assert_eq!(
        memory::memory_allocated(CPU) - base,
        model_bytes,
        "parameters + one gradient per parameter"
    );
    assert!(net.parameters().iter().all(|p| p.grad().is_some()));
    net.zero_grad();
    assert_eq!(memory::memory_allocated(CPU), base);
}

#[test]
fn nested_sequential_and_dropout_in_training() {
    let _g = lock();
    // A nested all-in-place Sequential can itself take a donation.
    let mut inner = Sequential::new();
    inner.add(ReLU).add(Tanh);
    assert!(inner.can_work_in_place());
    let mut outer = Sequential::new();
    outer.add(Linear::new(W, W).unwrap()).add(inner);
    assert!(!outer.can_work_in_place());
    let x = randn(&[B, W], 13);
    let _ng = autograd::no_grad_guard();
    let y = outer.forward(&x).unwrap();
    assert_eq!(
        outer.donation_stats(),
        DonationStats {
            offered: 1,
            taken: 1,
            ..Default::default()
        }
    );
    let r: Vec<f64> = {
        let l = outer.layers()[0].forward(&x).unwrap();
        vals(&l).into_iter().map(|v| v.max(0.0).tanh()).collect()
    };
    let got = vals(&y);
    assert!(got.iter().zip(&r).all(|(a, b)| (a - b).abs() < 1e-6));

    // Dropout in training mode on a donated buffer: the mask is applied in
    // place; only the mask and its temporaries are allocated, and freed.
    let mut net = Sequential::new();
    net.add(Dropout::new(0.5).unwrap());
    let x = Tensor::ones(&[B, W], DType::F32, CPU).unwrap();
    let ptr = x.data_ptr();
    let (peak, left, y) = peak_of(|| net.forward_owned(x).unwrap());
    assert_eq!(y.data_ptr(), ptr);
    assert_eq!(left, 0);
    // Only the mask (ACT): the random fill draws straight into it (it
    // staged 2 ACT of f64 before issue 13's in-place random fills).
    assert_eq!(peak, ACT, "only the mask");
    assert!(vals(&y).iter().all(|v| *v == 0.0 || *v == 2.0));
    assert_eq!(net.donation_stats().taken, 1);
}

/// `Identity` passes its input through without a copy, and a `Sequential`
/// does not count it as a donation taken (it writes nothing).
#[test]
fn identity_is_an_alias_and_no_donation() {
    use tensorscope::nn::Identity;
    let _l = lock();
    let mut net = Sequential::new();
    net.add(Identity).add(ReLU);
    let x = Tensor::full(&[4], -1.0, DType::F32, Device::Cpu).unwrap();
    let y = Identity.forward(&x).unwrap();
    assert_eq!(y.storage_ptr(), x.storage_ptr());
    drop(y);
    net.reset_donation_stats();
    let before = memory::memory_stats(Device::Cpu).allocation.all.allocated;
    let out = tensorscope::autograd::no_grad(|| net.forward_owned(x)).unwrap();
    assert_eq!(out.to_vec::<f32>().unwrap(), [0.0; 4]);
    // ReLU took the buffer Identity passed on: nothing allocated.
    assert_eq!(
        memory::memory_stats(Device::Cpu).allocation.all.allocated,
        before
    );
    let d = net.donation_stats();
    assert_eq!((d.offered, d.taken), (1, 1));
}
