//! Creating tensors: constants, ranges, identity, random (seeded and with an
//! explicit generator), from data, scalars, the `*_like` and `new_*` families,
//! and reading values back (`item`, `to_vec`).
//!
//! Tests that use the global generator hold `RNG` (tests run in parallel).

use crate::common;

use common::*;
use tensorscope::{bf16, f16, manual_seed, DType, Device, Error, Generator, Tensor};

fn rng_lock() -> crate::common::Guard {
    crate::common::serial()
}

#[track_caller]
fn assert_fresh(t: &Tensor, shape: &[usize], dt: DType) {
    assert_eq!(t.shape(), shape);
    assert_eq!(t.dtype(), dt);
    assert_eq!(t.device(), CPU);
    assert!(t.is_contiguous());
    assert_eq!(t.storage_offset(), 0);
    assert_eq!(t.numel(), shape.iter().product::<usize>());
    assert_eq!(t.storage_nbytes(), t.numel() * dt.size_in_bytes());
}

#[test]
fn zeros_ones_full_empty_every_dtype() {
    let _shared = crate::common::shared();
    for dt in ALL {
        for shape in [&[2usize, 3][..], &[4], &[], &[0, 5], &[1, 1, 7]] {
            let n: usize = shape.iter().product();
            let z = Tensor::zeros(shape, dt, CPU).unwrap();
            assert_fresh(&z, shape, dt);
            assert_eq!(read(&z), vec![0.0; n]);
            let o = Tensor::ones(shape, dt, CPU).unwrap();
            assert_fresh(&o, shape, dt);
            assert_eq!(read(&o), vec![1.0; n]);
            let f = Tensor::full(shape, 2.5, dt, CPU).unwrap();
            assert_eq!(read(&f), vec![store(dt, 2.5); n], "{dt}");
            let f = Tensor::full(shape, -3.0, dt, CPU).unwrap();
            let want = match dt {
                DType::U8 => 253.0, // wrapped, as PyTorch stores -3 into uint8
                _ => store(dt, -3.0),
            };
            assert_eq!(read(&f), vec![want; n], "{dt}");
            let e = Tensor::empty(shape, dt, CPU).unwrap();
            assert_fresh(&e, shape, dt);
            if dt == DType::Bool {
                assert_eq!(read(&e), vec![0.0; n], "bool empty is zeroed (valid bytes)");
            }
        }
    }
    let f = Tensor::full(&[2], f64::NAN, DType::F32, CPU).unwrap();
    assert!(read(&f).iter().all(|v| v.is_nan()));
    let f = Tensor::full(&[2], f64::INFINITY, DType::BF16, CPU).unwrap();
    assert_eq!(read(&f), vec![f64::INFINITY; 2]);
}

#[test]
fn arange_follows_pytorch() {
    let _shared = crate::common::shared();
    let cases: [(f64, f64, f64, Vec<f64>); 7] = [
        (0.0, 5.0, 1.0, vec![0.0, 1.0, 2.0, 3.0, 4.0]),
        (1.0, 2.5, 0.5, vec![1.0, 1.5, 2.0]),
        (10.0, 0.0, -3.0, vec![10.0, 7.0, 4.0, 1.0]),
        (0.0, 1.0, 0.3, vec![0.0, 0.3, 0.6, 0.8999999999999999]),
        (-1.0, 1.0, 0.5, vec![-1.0, -0.5, 0.0, 0.5]),
        (3.0, 3.0, 1.0, vec![]),
        (0.0, 10.0, 3.0, vec![0.0, 3.0, 6.0, 9.0]),
    ];
    for (start, end, step, want) in cases {
        let n = ((end - start) / step).ceil().max(0.0) as usize;
        assert_eq!(want.len(), n, "length is ceil((end - start) / step)");
        let t = Tensor::arange(start, end, step, DType::F64, CPU).unwrap();
        assert_fresh(&t, &[n], DType::F64);
        assert_close(&read(&t), &want, 1e-15, "arange f64");
        for dt in [DType::F32, DType::I64, DType::I32, DType::F16] {
            let t = Tensor::arange(start, end, step, dt, CPU).unwrap();
            let w: Vec<f64> = want.iter().map(|&v| store(dt, v)).collect();
            assert_eq!(read(&t), w, "arange({start}, {end}, {step}) {dt}");
        }
    }
    // 0.1 steps: 10 elements, not 11 (the end is excluded)
    assert_eq!(
        Tensor::arange(0.0, 1.0, 0.1, DType::F32, CPU)
            .unwrap()
            .numel(),
        10
    );
}

#[test]
fn linspace_includes_both_ends() {
    let _shared = crate::common::shared();
    let t = Tensor::linspace(-1.0, 1.0, 5, DType::F32, CPU).unwrap();
    assert_eq!(t.to_vec::<f32>().unwrap(), vec![-1.0, -0.5, 0.0, 0.5, 1.0]);
    let t = Tensor::linspace(0.0, 1.0, 7, DType::F64, CPU).unwrap();
    let v = read(&t);
    assert_eq!(v.len(), 7);
    assert_eq!((v[0], v[6]), (0.0, 1.0), "both ends exact");
    let want: Vec<f64> = (0..7).map(|i| i as f64 / 6.0).collect();
    assert_close(&v, &want, 1e-15, "linspace");
    // decreasing, one step, none
    assert_eq!(
        read(&Tensor::linspace(3.0, 1.0, 3, DType::F64, CPU).unwrap()),
        vec![3.0, 2.0, 1.0]
    );
    assert_eq!(
        read(&Tensor::linspace(2.0, 9.0, 1, DType::F64, CPU).unwrap()),
        vec![2.0]
    );
    assert_eq!(
        Tensor::linspace(2.0, 9.0, 0, DType::F64, CPU)
            .unwrap()
            .shape(),
        &[0]
    );
    // integer dtypes truncate, as PyTorch: 0, 3.33, 6.67, 10 -> 0, 3, 6, 10
    let t = Tensor::linspace(0.0, 10.0, 4, DType::I64, CPU).unwrap();
    assert_eq!(t.to_vec::<i64>().unwrap(), vec![0, 3, 6, 10]);
    // the end is exact even where start + (n - 1) * step would round away from it
    let t = Tensor::linspace(0.1, 0.7, 7, DType::F64, CPU).unwrap();
    assert_eq!(read(&t)[6], 0.7);
}

#[test]
fn eye_is_the_identity() {
    let _shared = crate::common::shared();
    for dt in ALL {
        for (n, m) in [(3usize, 3usize), (2, 4), (4, 2), (1, 1), (0, 3)] {
            let t = Tensor::eye(n, m, dt, CPU).unwrap();
            assert_fresh(&t, &[n, m], dt);
            let want: Vec<f64> = (0..n * m).map(|k| (k / m == k % m) as u8 as f64).collect();
            assert_eq!(read(&t), want, "eye({n}, {m}) {dt}");
        }
    }
}

fn mean_std(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    let var = v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / (n - 1.0);
    (mean, var.sqrt())
}

#[test]
fn manual_seed_makes_rand_and_randn_reproducible() {
    let _g = rng_lock();
    for dt in FLOATS {
        manual_seed(1234);
        let a = Tensor::randn(&[50, 4], dt, CPU).unwrap();
        let b = Tensor::rand(&[7], dt, CPU).unwrap();
        manual_seed(1234);
        let a2 = Tensor::randn(&[50, 4], dt, CPU).unwrap();
        let b2 = Tensor::rand(&[7], dt, CPU).unwrap();
        assert_eq!(read(&a), read(&a2), "{dt}");
        assert_eq!(read(&b), read(&b2), "{dt}");
        assert_fresh(&a, &[50, 4], dt);
        manual_seed(1235);
        assert_ne!(
            read(&Tensor::randn(&[50, 4], dt, CPU).unwrap()),
            read(&a),
            "{dt}"
        );
    }
    // The stream is drawn in f64: the f32 tensor is the f64 one rounded.
    manual_seed(9);
    let d = Tensor::randn(&[100], DType::F64, CPU).unwrap();
    manual_seed(9);
    let f = Tensor::randn(&[100], DType::F32, CPU).unwrap();
    let want: Vec<f64> = read(&d).iter().map(|&x| store(DType::F32, x)).collect();
    assert_eq!(read(&f), want);
    // Consecutive draws differ.
    let x = Tensor::rand(&[10], DType::F64, CPU).unwrap();
    let y = Tensor::rand(&[10], DType::F64, CPU).unwrap();
    assert_ne!(read(&x), read(&y));
}

#[test]
fn randn_has_mean_0_and_std_1_rand_is_uniform_on_0_1() {
    let _g = rng_lock();
    manual_seed(2024);
    for dt in [DType::F32, DType::F64] {
        let (m, s) = mean_std(&read(&Tensor::randn(&[100_000], dt, CPU).unwrap()));
        assert!(m.abs() < 0.02, "randn mean {m}");
        assert!((s - 1.0).abs() < 0.02, "randn std {s}");
        let v = read(&Tensor::rand(&[100_000], dt, CPU).unwrap());
        assert!(v.iter().all(|&x| (0.0..1.0).contains(&x)), "rand in [0, 1)");
        let (m, s) = mean_std(&v);
        assert!((m - 0.5).abs() < 0.01, "rand mean {m}");
        assert!((s - (1.0f64 / 12.0).sqrt()).abs() < 0.01, "rand std {s}");
        let below = v.iter().filter(|&&x| x < 0.25).count() as f64 / 1e5;
        assert!((below - 0.25).abs() < 0.01, "P(x < 0.25) = {below}");
    }
    // reduced precision: never rounds up to 1.0
    for dt in [DType::F16, DType::BF16] {
        let v = read(&Tensor::rand(&[100_000], dt, CPU).unwrap());
        assert!(
            v.iter().all(|&x| (0.0..1.0).contains(&x)),
            "{dt} rand in [0, 1)"
        );
        assert!(
            v.iter().any(|&x| x > 0.99),
            "{dt}: the top of the range is reached"
        );
    }
    // normal_ and uniform_ with parameters
    let mut t = Tensor::empty(&[100_000], DType::F64, CPU).unwrap();
    t.normal_(3.0, 0.5).unwrap();
    let (m, s) = mean_std(&read(&t));
    assert!(
        (m - 3.0).abs() < 0.01 && (s - 0.5).abs() < 0.01,
        "normal_(3, 0.5): {m} {s}"
    );
    t.uniform_(-2.0, 4.0).unwrap();
    let v = read(&t);
    assert!(v.iter().all(|&x| (-2.0..4.0).contains(&x)));
    let (m, _) = mean_std(&v);
    assert!((m - 1.0).abs() < 0.03, "uniform_(-2, 4) mean {m}");
}

#[test]
fn random_fills_do_not_depend_on_strides() {
    let _g = rng_lock();
    // Values are drawn in the row-major order of the tensor's shape, so a
    // transposed view gets the same logical values as a contiguous tensor.
    manual_seed(77);
    let mut c = Tensor::empty(&[4, 6], DType::F32, CPU).unwrap();
    c.normal_(0.0, 1.0).unwrap();
    manual_seed(77);
    let base = Tensor::zeros(&[6, 4], DType::F32, CPU).unwrap();
    let mut t = base.t().unwrap();
    let ver = base.version();
    t.normal_(0.0, 1.0).unwrap();
    assert_eq!(read(&t), read(&c));
    assert!(base.version() > ver, "an in-place write");
    // a stepped view fills only its elements
    let base = Tensor::full(&[10], 9.0, DType::F64, CPU).unwrap();
    base.slice(0, 1, 10, 2).unwrap().uniform_(0.0, 1.0).unwrap();
    let v = read(&base);
    for (k, x) in v.iter().enumerate() {
        if k % 2 == 0 {
            assert_eq!(*x, 9.0);
        } else {
            assert!((0.0..1.0).contains(x));
        }
    }
    // an expanded view cannot take random values in place
    let mut e = Tensor::zeros(&[1], DType::F32, CPU)
        .unwrap()
        .expand(&[3])
        .unwrap();
    assert!(matches!(
        e.normal_(0.0, 1.0),
        Err(Error::InvalidInPlace { .. })
    ));
}

#[test]
fn an_explicit_generator_is_reproducible_and_leaves_the_global_one_alone() {
    let _g = rng_lock();
    let mut g1 = Generator::new(5);
    let mut g2 = Generator::new(5);
    let a = Tensor::randn_with(&[3, 3], DType::F64, CPU, &mut g1).unwrap();
    let b = Tensor::randn_with(&[3, 3], DType::F64, CPU, &mut g2).unwrap();
    assert_eq!(read(&a), read(&b));
    let c = Tensor::randn_with(&[3, 3], DType::F64, CPU, &mut g1).unwrap();
    assert_ne!(read(&a), read(&c), "the generator advanced");
    let u = Tensor::rand_with(&[1000], DType::F32, CPU, &mut g1).unwrap();
    assert!(read(&u).iter().all(|&x| (0.0..1.0).contains(&x)));
    assert_ne!(
        read(&Tensor::rand_with(&[4], DType::F64, CPU, &mut Generator::new(6)).unwrap()),
        read(&Tensor::rand_with(&[4], DType::F64, CPU, &mut Generator::new(5)).unwrap())
    );
    // the global stream is untouched by explicit generators
    manual_seed(11);
    let x = Tensor::rand(&[5], DType::F64, CPU).unwrap();
    manual_seed(11);
    let _ = Tensor::rand_with(&[5], DType::F64, CPU, &mut Generator::new(11)).unwrap();
    let y = Tensor::rand(&[5], DType::F64, CPU).unwrap();
    assert_eq!(read(&x), read(&y));
    // a generator of seed s draws what manual_seed(s) does
    assert_eq!(
        read(&Tensor::rand_with(&[5], DType::F64, CPU, &mut Generator::new(11)).unwrap()),
        read(&x)
    );
    let e = Tensor::rand_with(&[2], DType::I32, CPU, &mut g1).unwrap_err();
    assert!(matches!(e, Error::DTypeMismatch { op: "rand", .. }), "{e}");
    // The first CUDA ordinal this machine lacks (cuda:0 without a GPU).
    let absent = Device::Cuda(tensorscope::backend::cuda::device_count());
    let e = Tensor::randn_with(&[2], DType::F32, absent, &mut g1).unwrap_err();
    assert!(matches!(e, Error::DeviceUnavailable { .. }), "{e}");
}

#[test]
fn from_slice_from_vec_and_scalar_for_every_element_type() {
    let _shared = crate::common::shared();
    fn check<T: tensorscope::Element + PartialEq>(v: Vec<T>, dt: DType) {
        let t = Tensor::from_slice(&v, &[2, 2], CPU).unwrap();
        assert_fresh(&t, &[2, 2], dt);
        assert_eq!(t.to_vec::<T>().unwrap(), v);
        let u = Tensor::from_vec(v.clone(), &[4], CPU).unwrap();
        assert_eq!(u.to_vec::<T>().unwrap(), v);
        assert!(!u.shares_storage(&t));
        let s = Tensor::scalar(v[1], CPU).unwrap();
        assert_fresh(&s, &[], dt);
        assert_eq!(s.item::<T>().unwrap(), v[1]);
        assert_eq!(s.to_vec::<T>().unwrap(), vec![v[1]]);
    }
    check(vec![1.5f32, -2.0, 0.0, 3.25], DType::F32);
    check(vec![1.5f64, -2.0, 1e300, 3.25], DType::F64);
    check(
        vec![f16::from_f32(1.5), f16::ZERO, f16::MAX, f16::MIN_POSITIVE],
        DType::F16,
    );
    check(
        vec![bf16::from_f32(1.5), bf16::ZERO, bf16::MAX, bf16::ONE],
        DType::BF16,
    );
    check(vec![i64::MIN, -1, 0, i64::MAX], DType::I64);
    check(vec![i32::MIN, -1, 0, i32::MAX], DType::I32);
    check(vec![0u8, 1, 128, 255], DType::U8);
    check(vec![true, false, false, true], DType::Bool);
    let e = Tensor::from_vec(vec![1.0f32; 5], &[2, 2], CPU).unwrap_err();
    assert!(
        matches!(
            e,
            Error::ElementCount {
                op: "from_slice",
                ..
            }
        ),
        "{e}"
    );
    let empty = Tensor::from_slice::<f32>(&[], &[0, 3], CPU).unwrap();
    assert_eq!(empty.shape(), &[0, 3]);
    assert_eq!(empty.to_vec::<f32>().unwrap(), Vec::<f32>::new());
}

#[test]
fn like_and_new_families_match_dtype_and_device() {
    let _g = rng_lock();
    for dt in ALL {
        let x = make(
            &data_for(dt, 12, 3, -3.0, 3.0),
            &[3, 4],
            dt,
            Lay::Transposed,
        );
        let z = x.zeros_like().unwrap();
        assert_fresh(&z, &[3, 4], dt);
        assert_eq!(read(&z), vec![0.0; 12]);
        assert!(!z.shares_storage(&x));
        assert_eq!(read(&x.ones_like().unwrap()), vec![1.0; 12]);
        assert_eq!(read(&x.full_like(2.0).unwrap()), vec![store(dt, 2.0); 12]);
        assert_fresh(&x.empty_like().unwrap(), &[3, 4], dt);
        assert_fresh(&x.new_zeros(&[2, 3]).unwrap(), &[2, 3], dt);
        assert_eq!(read(&x.new_ones(&[5]).unwrap()), vec![1.0; 5]);
        assert_eq!(
            read(&x.new_full(&[2, 2], 2.71).unwrap()),
            vec![store(dt, 2.71); 4]
        );
        assert_fresh(&x.new_empty(&[1, 2]).unwrap(), &[1, 2], dt);
        let n = x.new_tensor(&[1.5f64, -2.0], &[2]).unwrap();
        assert_fresh(&n, &[2], dt);
        let want = match dt {
            DType::U8 => vec![1.0, 254.0], // PyTorch's cast wraps -2 to 254
            _ => vec![store(dt, 1.5), store(dt, -2.0)],
        };
        assert_eq!(read(&n), want, "{dt}");
        if dt.is_float() {
            assert_fresh(&x.randn_like().unwrap(), &[3, 4], dt);
            let r = x.rand_like().unwrap();
            assert_fresh(&r, &[3, 4], dt);
            assert!(read(&r).iter().all(|&v| (0.0..1.0).contains(&v)));
        } else {
            assert!(matches!(x.randn_like(), Err(Error::DTypeMismatch { .. })));
        }
    }
    // the seed's example: x f64 -> zeros_like f64, new_full((2, 2), 2.71)
    let x = Tensor::randn(&[3, 4], DType::F64, CPU).unwrap();
    let z = x.new_full(&[2, 2], 2.71).unwrap();
    assert_eq!((z.dtype(), z.device()), (DType::F64, CPU));
    assert_eq!(read(&z), vec![2.71; 4]);
}

#[test]
fn item_and_to_vec_convert_with_pytorch_cast_semantics() {
    let _shared = crate::common::shared();
    let t = Tensor::from_slice(&[1.9f32, -1.9, 300.0, f32::NAN], &[4], CPU).unwrap();
    assert_eq!(t.to_vec::<i64>().unwrap(), vec![1, -1, 300, 0]);
    // Truncated, then wrapped: -1 is 255 and 300 is 44 (`.to(torch.uint8)`).
    assert_eq!(t.to_vec::<u8>().unwrap(), vec![1, 255, 44, 0]);
    assert_eq!(t.to_vec::<bool>().unwrap(), vec![true, true, true, true]);
    let v = t.to_vec::<f64>().unwrap();
    assert_eq!(v[0], 1.9f32 as f64);
    assert!(v[3].is_nan());
    // from any layout, in logical order
    let m = Tensor::from_slice(&[1i32, 2, 3, 4, 5, 6], &[2, 3], CPU).unwrap();
    assert_eq!(
        m.t().unwrap().to_vec::<i32>().unwrap(),
        vec![1, 4, 2, 5, 3, 6]
    );
    let e = m.select(1, 2).unwrap().item::<i32>().unwrap_err();
    assert!(
        matches!(
            e,
            Error::NotAScalar {
                op: "item",
                numel: 2,
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(
        m.select(1, 2)
            .unwrap()
            .select(0, 1)
            .unwrap()
            .item::<f64>()
            .unwrap(),
        6.0
    );
    assert_eq!(
        m.slice(1, 0, 3, 2).unwrap().to_vec::<f32>().unwrap(),
        vec![1.0, 3.0, 4.0, 6.0]
    );
    // reading converts without allocating a visible copy: the source is unchanged
    assert_eq!(m.dtype(), DType::I32);
    let h = Tensor::scalar(f16::from_f32(0.1), CPU).unwrap();
    assert_eq!(h.item::<f32>().unwrap(), f16::from_f32(0.1).to_f32());
    assert!(Tensor::scalar(true, CPU).unwrap().item::<bool>().unwrap());
    assert_eq!(Tensor::scalar(7u8, CPU).unwrap().item::<i64>().unwrap(), 7);
}
