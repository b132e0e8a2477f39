//! Issue 17 item 5: `randint`, `randperm`, `bernoulli` (a tensor of
//! probabilities) and `multinomial` on the CPU and on CUDA device 0
//! (`on_both!`). The numbers come from this library's generators, not
//! PyTorch's (deviation 9), so the tests check what the draws must satisfy:
//! ranges, permutations, distinctness, the frequencies against their
//! expectations (bounds of about 5 standard deviations), determinism under
//! a seeded generator, and the errors PyTorch raises.

use crate::common;

#[cfg(feature = "cuda")]
use common::devices::on_both;
use tensorscope::{DType, Device, Generator, Tensor};

#[cfg(feature = "cuda")]
on_both!(
    randint_ranges,
    randperm_permutes,
    bernoulli_frequencies,
    multinomial_draws
);

#[cfg(not(feature = "cuda"))]
common::on_cpu!(
    randint_ranges,
    randperm_permutes,
    bernoulli_frequencies,
    multinomial_draws
);

fn ints(t: &Tensor) -> Vec<i64> {
    t.to_dtype(DType::I64).unwrap().to_vec::<i64>().unwrap()
}

fn randint_ranges(dev: Device) {
    for dt in [
        DType::I64,
        DType::I32,
        DType::U8,
        DType::F32,
        DType::F64,
        DType::F16,
    ] {
        let (lo, hi) = if dt == DType::U8 { (3, 10) } else { (-4, 5) };
        let t = Tensor::randint(lo, hi, &[50, 40], dt, dev).unwrap();
        assert_eq!((t.shape(), t.dtype()), (&[50usize, 40][..], dt));
        let v = ints(&t);
        assert!(v.iter().all(|x| (lo..hi).contains(x)), "{dt}: {v:?}");
        // 2000 draws over 7 or 9 values: each about 220-290 times.
        for x in lo..hi {
            let c = v.iter().filter(|&&y| y == x).count() as f64;
            let e = 2000.0 / (hi - lo) as f64;
            assert!(
                (c - e).abs() < 5.0 * e.sqrt(),
                "{dt}: {x} drawn {c} times, expected {e}"
            );
        }
    }
    // A seeded generator repeats itself.
    let a = Tensor::randint_with(0, 1000, &[64], DType::I64, dev, &mut Generator::new(5)).unwrap();
    let b = Tensor::randint_with(0, 1000, &[64], DType::I64, dev, &mut Generator::new(5)).unwrap();
    assert_eq!(ints(&a), ints(&b));
    // Wide ranges near i64's ends.
    let t = Tensor::randint(i64::MIN, i64::MIN + 7, &[100], DType::I64, dev).unwrap();
    assert!(ints(&t)
        .iter()
        .all(|x| (i64::MIN..i64::MIN + 7).contains(x)));
    let t = Tensor::randint(i64::MAX - 10, i64::MAX, &[100], DType::I64, dev).unwrap();
    assert!(ints(&t)
        .iter()
        .all(|x| (i64::MAX - 10..i64::MAX).contains(x)));
    // Errors, naming the op: an empty range, a range f64 cannot cover, a
    // dtype that cannot hold the range.
    let e = |r: tensorscope::Result<Tensor>| r.unwrap_err().to_string();
    assert!(e(Tensor::randint(3, 3, &[2], DType::I64, dev)).contains("randint"));
    assert!(e(Tensor::randint(0, i64::MAX, &[2], DType::I64, dev)).contains("2^53"));
    assert!(e(Tensor::randint(0, 300, &[2], DType::U8, dev)).contains("out of bounds"));
    assert!(e(Tensor::randint(0, 5000, &[2], DType::F16, dev)).contains("out of bounds"));
    assert!(Tensor::randint(0, 2, &[2], DType::Bool, dev).is_err());
    // An empty shape needs no valid range (PyTorch too).
    assert_eq!(
        Tensor::randint(3, 3, &[0], DType::I64, dev)
            .unwrap()
            .numel(),
        0
    );
}

fn randperm_permutes(dev: Device) {
    for n in [0usize, 1, 2, 17, 1000] {
        let p = Tensor::randperm(n, dev).unwrap();
        assert_eq!((p.shape(), p.dtype()), (&[n][..], DType::I64));
        let mut v = ints(&p);
        v.sort_unstable();
        assert_eq!(v, (0..n as i64).collect::<Vec<_>>(), "n = {n}");
    }
    // Position 0 is uniform over 0..4 across 4000 permutations.
    let mut g = Generator::new(11);
    let mut counts = [0f64; 4];
    for _ in 0..4000 {
        let p = Tensor::randperm_with(4, dev, &mut g).unwrap();
        counts[ints(&p)[0] as usize] += 1.0;
    }
    for c in counts {
        assert!(
            (c - 1000.0).abs() < 5.0 * 1000f64.sqrt() * 0.87,
            "{counts:?}"
        );
    }
}

fn bernoulli_frequencies(dev: Device) {
    let probs: [f64; 5] = [0.0, 0.1, 0.5, 0.9, 1.0];
    for dt in [DType::F32, DType::F64, DType::BF16] {
        let p: Vec<f64> = (0..5000).map(|i| probs[i % 5]).collect();
        let pt = Tensor::from_slice(&p, &[1000, 5], dev)
            .unwrap()
            .to_dtype(dt)
            .unwrap();
        let b = pt.bernoulli().unwrap();
        assert_eq!((b.shape(), b.dtype()), (&[1000usize, 5][..], dt));
        let v = b.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap();
        assert!(v.iter().all(|&x| x == 0.0 || x == 1.0));
        for (k, &q) in probs.iter().enumerate() {
            let ones: f64 = v.iter().skip(k).step_by(5).sum();
            let sd = (1000.0 * q * (1.0 - q)).sqrt();
            assert!(
                (ones - 1000.0 * q).abs() <= 5.0 * sd + 1e-9,
                "{dt}: p {q}, {ones} of 1000"
            );
        }
    }
    // A small p in a half type is compared in f32, not on bf16's 2^-8 grid
    // of uniforms (which would give 1/256 for every p below it): p = 2^-12
    // over 100,000 draws, about 24 ones.
    let small = Tensor::full(&[100_000], 1.0 / 4096.0, DType::BF16, dev).unwrap();
    let ones: f64 = small
        .bernoulli()
        .unwrap()
        .to_dtype(DType::F64)
        .unwrap()
        .sum_all()
        .unwrap()
        .item()
        .unwrap();
    assert!(
        ones < 24.4 + 5.0 * 24.4f64.sqrt(),
        "bf16 p = 2^-12: {ones} of 100000"
    );
    // No gradient flows; probabilities outside [0, 1] or NaN are errors;
    // integer probabilities are refused.
    let p = Tensor::full(&[3], 0.5, DType::F32, dev)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    assert!(!p.bernoulli().unwrap().requires_grad());
    for bad in [1.5, -0.1, f64::NAN] {
        let t = Tensor::full(&[3], bad, DType::F32, dev).unwrap();
        let e = t.bernoulli().unwrap_err().to_string();
        assert!(e.contains("bernoulli") && e.contains("[0, 1]"), "{e}");
    }
    assert!(Tensor::ones(&[2], DType::I64, dev)
        .unwrap()
        .bernoulli()
        .is_err());
}

fn multinomial_draws(dev: Device) {
    let w: [f64; 6] = [1.0, 0.0, 2.0, 5.0, 0.0, 2.0]; // sum 10
    let wt = Tensor::from_slice(&w, &[6], dev).unwrap();
    // With replacement: frequencies of 5000 draws, never a zero weight.
    let s = wt
        .to_dtype(DType::F32)
        .unwrap()
        .multinomial(5000, true)
        .unwrap();
    assert_eq!((s.shape(), s.dtype()), (&[5000usize][..], DType::I64));
    let v = ints(&s);
    for (k, &q) in w.iter().enumerate() {
        let c = v.iter().filter(|&&i| i == k as i64).count() as f64;
        let p = q / 10.0;
        let sd = (5000.0 * p * (1.0 - p)).sqrt();
        assert!(
            (c - 5000.0 * p).abs() <= 5.0 * sd + 1e-9,
            "category {k}: {c} of 5000"
        );
    }
    // Without replacement: distinct, only positive weights; the first draw
    // follows the weights (the exponential race).
    let mut first = [0f64; 6];
    let mut g = Generator::new(3);
    for _ in 0..2000 {
        let d = ints(&wt.multinomial_with(4, false, &mut g).unwrap());
        let mut sorted = d.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, [0, 2, 3, 5], "all four positive categories");
        first[d[0] as usize] += 1.0;
    }
    for (k, &q) in w.iter().enumerate() {
        let p = q / 10.0;
        let sd = (2000.0 * p * (1.0 - p)).sqrt();
        assert!(
            (first[k] - 2000.0 * p).abs() <= 5.0 * sd + 1e-9,
            "first draw {k}: {first:?}"
        );
    }
    // Weights whose sum overflows f64, and a zero weight last: never drawn.
    let huge = Tensor::from_slice(&[1e308, 1e308, 0.0], &[3], dev).unwrap();
    let h = ints(&huge.multinomial(2000, true).unwrap());
    assert!(h.iter().all(|&i| i == 0 || i == 1), "{h:?}");
    let c0 = h.iter().filter(|&&i| i == 0).count() as f64;
    assert!((c0 - 1000.0).abs() < 5.0 * 500f64.sqrt(), "{c0} of 2000");
    // Rows: [rows, k], each row from its own weights.
    let rows = Tensor::from_slice(&[0.0, 1.0, 0.0, 1.0, 0.0, 0.0], &[2, 3], dev).unwrap();
    let r = ints(&rows.multinomial(3, true).unwrap());
    assert_eq!(r, [1, 1, 1, 0, 0, 0]);
    // Errors naming the op.
    let e = |r: tensorscope::Result<Tensor>| r.unwrap_err().to_string();
    assert!(e(wt.multinomial(5, false)).contains("positive weight"));
    assert!(e(wt.multinomial(7, false)).contains("without replacement"));
    assert!(e(wt.multinomial(0, true)).contains("num_samples"));
    let neg = Tensor::from_slice(&[1.0, -1.0], &[2], dev).unwrap();
    assert!(e(neg.multinomial(1, true)).contains("non-negative"));
    let zero = Tensor::zeros(&[2, 3], DType::F32, dev).unwrap();
    assert!(e(zero.multinomial(1, true)).contains("positive sum"));
    let nan = Tensor::from_slice(&[1.0, f64::NAN], &[2], dev).unwrap();
    assert!(e(nan.multinomial(1, true)).contains("multinomial"));
    assert!(e(Tensor::ones(&[2, 2, 2], DType::F32, dev)
        .unwrap()
        .multinomial(1, true))
    .contains("[rows, n]"));
    assert!(Tensor::ones(&[3], DType::I64, dev)
        .unwrap()
        .multinomial(1, true)
        .is_err());
}
