//! `bernoulli_` and the generators' Philox offsets, on the CPU and on CUDA
//! device 0: the same bodies on both (`on_both!`, tests/common/devices.rs).
#![cfg(feature = "cuda")]

use crate::common;

use common::devices::on_both;
use common::{read, ALL};
use tensorscope::{manual_seed, DType, Device, Error, Generator, Tensor};

on_both!(bernoulli_fills, bernoulli_bad_input, philox_offsets);

/// Every dtype gets 0s and 1s at the asked rate, reproducibly from a seed;
/// p = 0 and p = 1 are exact; a strided view is filled in place and the
/// elements outside it are untouched.
fn bernoulli_fills(dev: Device) {
    let n = 10_000;
    for dt in ALL {
        for p in [0.1, 0.5, 0.9] {
            manual_seed(7);
            let mut t = Tensor::zeros(&[100, 100], dt, dev).unwrap();
            t.bernoulli_(p).unwrap();
            let v = read(&t);
            assert!(v.iter().all(|&x| x == 0.0 || x == 1.0), "{dt} p={p}: {v:?}");
            // 10,000 draws: the standard deviation of the rate is below 0.005.
            let rate = v.iter().sum::<f64>() / n as f64;
            assert!((rate - p).abs() < 0.025, "{dt} p={p}: rate {rate}");
            manual_seed(7);
            let mut again = Tensor::zeros(&[100, 100], dt, dev).unwrap();
            again.bernoulli_(p).unwrap();
            assert_eq!(read(&again), v, "{dt} p={p}: same seed, same draws");
            manual_seed(8);
            again.bernoulli_(p).unwrap();
            assert_ne!(read(&again), v, "{dt} p={p}: another seed");
        }
        let mut t = Tensor::full(&[3, 5], 7.0, dt, dev).unwrap();
        t.bernoulli_(0.0).unwrap();
        assert_eq!(read(&t), vec![0.0; 15], "{dt} p=0");
        t.bernoulli_(1.0).unwrap();
        assert_eq!(read(&t), vec![1.0; 15], "{dt} p=1");
        // Every other column of a transposed base.
        let base = Tensor::zeros(&[6, 4], dt, dev).unwrap();
        {
            let mut cols = base.t().unwrap().slice(0, 0, 4, 2).unwrap();
            assert!(!cols.is_contiguous());
            cols.bernoulli_(1.0).unwrap();
        }
        let v = read(&base);
        for (i, x) in v.iter().enumerate() {
            let want = if i % 4 % 2 == 0 { 1.0 } else { 0.0 };
            assert_eq!(*x, want, "{dt} strided fill at {i}: {v:?}");
        }
    }
    // An explicit generator: reproducible, and the global one is not used.
    let draw = |g: &mut Generator| {
        let mut t = Tensor::zeros(&[257], DType::F32, dev).unwrap();
        t.bernoulli_with(0.5, g).unwrap();
        read(&t)
    };
    manual_seed(3);
    let a = draw(&mut Generator::new(11));
    let b = draw(&mut Generator::new(11));
    assert_eq!(a, b);
    let mut g = Generator::new(11);
    let first = draw(&mut g);
    let second = draw(&mut g);
    assert_eq!(first, a);
    assert_ne!(first, second, "the generator moved on");
    let mut t = Tensor::zeros(&[257], DType::F32, dev).unwrap();
    manual_seed(3);
    t.bernoulli_(0.5).unwrap();
    let global_first = read(&t);
    manual_seed(3);
    draw(&mut Generator::new(99));
    t.bernoulli_(0.5).unwrap();
    assert_eq!(
        read(&t),
        global_first,
        "bernoulli_with left the global generator alone"
    );
}

fn bernoulli_bad_input(dev: Device) {
    let mut t = Tensor::full(&[4], 3.0, DType::F32, dev).unwrap();
    for p in [-0.1, 1.5, f64::NAN, f64::INFINITY] {
        let e = t.bernoulli_(p).unwrap_err();
        assert!(
            matches!(
                e,
                Error::InvalidArgument {
                    op: "bernoulli_",
                    ..
                }
            ),
            "p={p}: {e:?}"
        );
        assert!(e.to_string().contains("bernoulli_"), "{e}");
    }
    assert_eq!(read(&t), vec![3.0; 4], "nothing written");
}

/// A fill on CUDA advances that device's Philox offset by the counters it
/// used (4 elements a counter; 2 for f64 uniform and normal), and nothing
/// else; on the CPU the offset stays 0.
fn philox_offsets(dev: Device) {
    let mut g = Generator::new(5);
    let counters = |n: u64, per: u64| if dev.is_cuda() { n.div_ceil(per) } else { 0 };
    let mut t = Tensor::zeros(&[10], DType::F32, dev).unwrap();
    t.bernoulli_with(0.5, &mut g).unwrap();
    assert_eq!(g.philox_offset(dev), counters(10, 4));
    Tensor::rand_with(&[9], DType::F64, dev, &mut g).unwrap();
    assert_eq!(g.philox_offset(dev), counters(10, 4) + counters(9, 2));
    Tensor::randn_with(&[9], DType::F32, dev, &mut g).unwrap();
    let after = counters(10, 4) + counters(9, 2) + counters(9, 4);
    assert_eq!(g.philox_offset(dev), after);
    assert_eq!(
        g.philox_offset(Device::Cuda(1)),
        0,
        "other devices untouched"
    );
    assert_eq!(g.philox_offset(Device::Cpu), 0);
    assert_eq!(g.seed(), 5);
}
