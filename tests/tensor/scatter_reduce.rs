//! Issue 17 item 5: `scatter_reduce(_)` on the CPU and on CUDA device 0
//! (`on_devices!`): every reduction with and without `self` against a naive
//! f64 loop, NaN and i64's extremes, the gradients' tie and zero rules,
//! sources that share `self`'s storage, the errors (which leave `self` as it
//! was) and the memory it takes. Agreement with PyTorch itself, gradients
//! included, is in the differential suite (tests/fixtures/differential.py,
//! "scatter_reduce").

use crate::common;

use common::ints;
use tensorscope::{memory, DType, Device, Error, ScatterReduce, Tensor};

common::on_devices!(
    reductions_match_the_loop,
    nan_and_integer_extremes,
    gradients_share_ties_and_route_around_zeros,
    a_source_sharing_self_is_read_first,
    errors_name_the_op_and_leave_self,
    the_out_of_place_form_takes_one_output,
    many_values_into_one_position,
);

const ALL: [ScatterReduce; 5] = [
    ScatterReduce::Sum,
    ScatterReduce::Prod,
    ScatterReduce::Mean,
    ScatterReduce::Amax,
    ScatterReduce::Amin,
];

fn f64s(t: &Tensor) -> Vec<f64> {
    t.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap()
}

fn on(v: &[f64], shape: &[usize], dt: DType, dev: Device) -> Tensor {
    common::tensor(v, shape, DType::F64, dev)
        .to_dtype(dt)
        .unwrap()
}

/// The reference: `x` [R, C] with `src`/`index` [R, K] along dim 1, in f64,
/// integer means floored, bool as or/and.
fn reference(
    x: &[f64],
    src: &[f64],
    index: &[i64],
    (r, c, k): (usize, usize, usize),
    reduce: ScatterReduce,
    include_self: bool,
    dt: DType,
) -> Vec<f64> {
    let mut out = x.to_vec();
    for i in 0..r {
        for j in 0..c {
            let mut vals: Vec<f64> = (0..k)
                .filter(|&t| index[i * k + t] as usize == j)
                .map(|t| src[i * k + t])
                .collect();
            if vals.is_empty() {
                continue;
            }
            if include_self {
                vals.push(x[i * c + j]);
            }
            let n = vals.len() as f64;
            let any_nan = vals.iter().any(|v| v.is_nan());
            out[i * c + j] = match reduce {
                ScatterReduce::Sum if dt == DType::Bool => {
                    vals.iter().any(|&v| v != 0.0) as u8 as f64
                }
                ScatterReduce::Sum => vals.iter().sum(),
                ScatterReduce::Prod => vals.iter().product(),
                ScatterReduce::Mean if dt.is_float() => vals.iter().sum::<f64>() / n,
                ScatterReduce::Mean => (vals.iter().sum::<f64>() / n).floor(),
                _ if any_nan => f64::NAN,
                ScatterReduce::Amax => vals.iter().cloned().fold(f64::NEG_INFINITY, f64::max),
                ScatterReduce::Amin => vals.iter().cloned().fold(f64::INFINITY, f64::min),
            };
        }
    }
    out
}

fn same(a: &[f64], b: &[f64], tol: f64) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(&p, &q)| {
            (p.is_nan() && q.is_nan()) || p == q || (p - q).abs() <= tol * (1.0 + q.abs())
        })
}

fn reductions_match_the_loop(dev: Device) {
    let (r, c, k) = (4, 5, 9);
    let index: Vec<i64> = ints(r * k, 7, 0, c as i64 - 1)
        .iter()
        .map(|&v| v as i64)
        .collect();
    let idx = common::tensor(&index, &[r, k], DType::I64, dev);
    let idx32 = idx.to_dtype(DType::I32).unwrap();
    for dt in [
        DType::F32,
        DType::F64,
        DType::BF16,
        DType::I64,
        DType::I32,
        DType::U8,
        DType::Bool,
    ] {
        let (lo, hi) = match dt {
            DType::U8 | DType::Bool => (0, 1),
            _ => (-2, 2),
        };
        let x = ints(r * c, 1, lo, hi);
        let s = ints(r * k, 2, lo, hi);
        for reduce in ALL {
            for include_self in [true, false] {
                if dt == DType::Bool && reduce == ScatterReduce::Mean {
                    continue;
                }
                let want = reference(&x, &s, &index, (r, c, k), reduce, include_self, dt);
                // Sums and products of up to 10 values in [-2, 2] are exact
                // in every float dtype; a mean's division rounds once.
                let tol = match dt {
                    DType::BF16 => 1e-2,
                    DType::F32 => 1e-6,
                    _ => 1e-12,
                };
                let what = format!("{dt} {reduce:?} include_self={include_self} on {dev:?}");
                // In place on a transposed view, then out of place with an i32 index.
                let base = on(&x, &[r, c], dt, dev).t().unwrap().contiguous().unwrap();
                let mut xt = base.t().unwrap();
                let src = on(&s, &[r, k], dt, dev);
                xt.scatter_reduce_(1, &idx, &src, reduce, include_self)
                    .unwrap();
                assert!(
                    same(&f64s(&xt), &want, tol),
                    "{what}: {:?} vs {want:?}",
                    f64s(&xt)
                );
                let xc = on(&x, &[r, c], dt, dev);
                let y = xc
                    .scatter_reduce(-1, &idx32, &src, reduce, include_self)
                    .unwrap();
                assert!(same(&f64s(&y), &want, tol), "{what} (out of place)");
                assert_eq!(
                    f64s(&xc),
                    f64s(&on(&x, &[r, c], dt, dev)),
                    "{what}: self kept"
                );
            }
        }
    }
}

fn nan_and_integer_extremes(dev: Device) {
    let x = on(&[1.0, f64::NAN, 2.0], &[3], DType::F32, dev);
    let idx = common::tensor(&[0i64, 1, 2], &[3], DType::I64, dev);
    let s = on(&[f64::NAN, 5.0, 1.0], &[3], DType::F32, dev);
    for (reduce, last) in [(ScatterReduce::Amax, 2.0), (ScatterReduce::Amin, 1.0)] {
        let y = f64s(&x.scatter_reduce(0, &idx, &s, reduce, true).unwrap());
        assert!(y[0].is_nan() && y[1].is_nan(), "{reduce:?}: {y:?}");
        assert_eq!(y[2], last);
    }
    // Left out, `self` is replaced by the identity, exactly: i64's extremes
    // are no f64 fill value.
    let big = Tensor::from_slice(&[0i64, 0], &[2], Device::Cpu)
        .unwrap()
        .to_device(dev)
        .unwrap();
    let i = common::tensor(&[0i64, 1], &[2], DType::I64, dev);
    let s = Tensor::from_slice(&[i64::MAX, i64::MIN], &[2], Device::Cpu)
        .unwrap()
        .to_device(dev)
        .unwrap();
    let lo = big
        .scatter_reduce(0, &i, &s, ScatterReduce::Amin, false)
        .unwrap();
    assert_eq!(lo.to_vec::<i64>().unwrap(), vec![i64::MAX, i64::MIN]);
    let hi = big
        .scatter_reduce(0, &i, &s, ScatterReduce::Amax, false)
        .unwrap();
    assert_eq!(hi.to_vec::<i64>().unwrap(), vec![i64::MAX, i64::MIN]);
    // Integer means floor, as PyTorch's: (4 - 7) / 2 -> -2, -7 / 2 -> -4.
    let x = common::tensor(&[9i64, -7], &[2], DType::I64, dev);
    let i = common::tensor(&[0i64, 0], &[2], DType::I64, dev);
    let s = common::tensor(&[4i64, -7], &[2], DType::I64, dev);
    let m = x
        .scatter_reduce(0, &i, &s, ScatterReduce::Mean, false)
        .unwrap();
    assert_eq!(m.to_vec::<i64>().unwrap(), vec![-2, -7]);
    let z = common::tensor(&[0i64], &[1], DType::I64, dev);
    let m = x
        .scatter_reduce(0, &z, &z, ScatterReduce::Mean, true)
        .unwrap();
    assert_eq!(m.to_vec::<i64>().unwrap()[0], 4); // (9 + 0) / 2 floored
    let neg = common::tensor(&[-7i64], &[1], DType::I64, dev);
    let m = neg
        .scatter_reduce(0, &z, &z, ScatterReduce::Mean, true)
        .unwrap();
    assert_eq!(m.to_vec::<i64>().unwrap(), vec![-4]);
}

fn gradients_share_ties_and_route_around_zeros(dev: Device) {
    let leaf = |v: &[f64]| {
        on(v, &[v.len()], DType::F64, dev)
            .requires_grad_(true)
            .unwrap()
    };
    let idx = common::tensor(&[0i64, 0, 1], &[3], DType::I64, dev);
    // amax: out = [max(1, 1, 0), max(2, 2)] = [1, 2]; each tie halves.
    let (x, s) = (leaf(&[1.0, 2.0]), leaf(&[1.0, 0.0, 2.0]));
    let y = x
        .scatter_reduce(0, &idx, &s, ScatterReduce::Amax, true)
        .unwrap();
    assert_eq!(f64s(&y), vec![1.0, 2.0]);
    y.sum_all().unwrap().backward().unwrap();
    assert_eq!(f64s(&x.grad().unwrap()), vec![0.5, 0.5]);
    assert_eq!(f64s(&s.grad().unwrap()), vec![0.5, 0.0, 0.5]);
    // prod with one zero factor: the zero gets the product of the others;
    // the others get 0. x = [3, 5], src = [0, 2, 4] -> out = [0, 20].
    let (x, s) = (leaf(&[3.0, 5.0]), leaf(&[0.0, 2.0, 4.0]));
    let y = x
        .scatter_reduce(0, &idx, &s, ScatterReduce::Prod, true)
        .unwrap();
    assert_eq!(f64s(&y), vec![0.0, 20.0]);
    y.sum_all().unwrap().backward().unwrap();
    assert_eq!(f64s(&x.grad().unwrap()), vec![0.0, 4.0]);
    assert_eq!(f64s(&s.grad().unwrap()), vec![6.0, 0.0, 5.0]);
    // Left out, self gets no gradient where written; mean divides by the count.
    let (x, s) = (leaf(&[3.0, 5.0, 7.0]), leaf(&[1.0, 2.0, 4.0]));
    let y = x
        .scatter_reduce(0, &idx, &s, ScatterReduce::Mean, false)
        .unwrap();
    assert_eq!(f64s(&y), vec![1.5, 4.0, 7.0]);
    y.sum_all().unwrap().backward().unwrap();
    assert_eq!(f64s(&x.grad().unwrap()), vec![0.0, 0.0, 1.0]);
    assert_eq!(f64s(&s.grad().unwrap()), vec![0.5, 0.5, 1.0]);
    // A source larger than the index: zeros where it was not read
    // (PyTorch refuses this backward: GUIDE 10, deviation 28).
    let (x, s) = (leaf(&[3.0, 5.0]), leaf(&[1.0, 2.0, 4.0, 8.0]));
    let y = x
        .scatter_reduce(0, &idx, &s, ScatterReduce::Sum, true)
        .unwrap();
    y.sum_all().unwrap().backward().unwrap();
    assert_eq!(f64s(&s.grad().unwrap()), vec![1.0, 1.0, 1.0, 0.0]);
}

fn a_source_sharing_self_is_read_first(dev: Device) {
    // src = self's own first 3 elements; left out, self's named positions
    // are reset before the reduction, which must not reach the source.
    let x0 = [4.0, -1.0, 6.0, 2.0];
    let idx = common::tensor(&[3i64, 3, 0], &[3], DType::I64, dev);
    for reduce in ALL {
        let mut x = on(&x0, &[4], DType::F32, dev);
        let src = x.narrow(0, 0, 3).unwrap();
        x.scatter_reduce_(0, &idx, &src, reduce, false).unwrap();
        let copy = on(&x0[..3], &[3], DType::F32, dev);
        let want = on(&x0, &[4], DType::F32, dev)
            .scatter_reduce(0, &idx, &copy, reduce, false)
            .unwrap();
        assert_eq!(f64s(&x), f64s(&want), "{reduce:?}");
    }
}

fn errors_name_the_op_and_leave_self(dev: Device) {
    let x0 = [1.0, 2.0, 3.0];
    let s = on(&[5.0, 6.0], &[2], DType::F32, dev);
    let mut x = on(&x0, &[3], DType::F32, dev);
    // A bad index is found before anything is written, even when self is
    // left out (which writes twice).
    let bad = common::tensor(&[0i64, 3], &[2], DType::I64, dev);
    for reduce in ALL {
        for include_self in [true, false] {
            let e = x
                .scatter_reduce_(0, &bad, &s, reduce, include_self)
                .unwrap_err();
            let what = format!("{reduce:?} include_self={include_self}: {e}");
            assert!(matches!(e, Error::IndexOutOfRange { .. }), "{what}");
            assert!(e.to_string().contains("scatter_reduce_"), "{what}");
            assert_eq!(f64s(&x), x0.to_vec(), "{what}");
            let e = x
                .scatter_reduce(0, &bad, &s, reduce, include_self)
                .unwrap_err();
            assert!(e.to_string().contains("scatter_reduce"), "{what}");
        }
    }
    let idx = common::tensor(&[0i64, 2], &[2], DType::I64, dev);
    let e = x
        .scatter_reduce_(
            0,
            &idx,
            &s.to_dtype(DType::F64).unwrap(),
            ScatterReduce::Sum,
            true,
        )
        .unwrap_err();
    assert!(e.to_string().contains("scatter_reduce_"), "{e}");
    let b = on(&[1.0, 0.0], &[2], DType::Bool, dev);
    let e = b
        .scatter_reduce(
            0,
            &idx.narrow(0, 0, 1).unwrap(),
            &b,
            ScatterReduce::Mean,
            true,
        )
        .unwrap_err();
    assert!(
        e.to_string().contains("scatter_reduce") && e.to_string().contains("bool"),
        "{e}"
    );
    let e = x
        .scatter_reduce(1, &idx, &s, ScatterReduce::Sum, true)
        .unwrap_err();
    assert!(e.to_string().contains("scatter_reduce"), "{e}");
    let e = "max".parse::<ScatterReduce>().unwrap_err();
    assert!(e.to_string().contains("amax"), "{e}");
    assert_eq!(
        "amin".parse::<ScatterReduce>().unwrap(),
        ScatterReduce::Amin
    );
    assert_eq!(f64s(&x), x0.to_vec());
}

fn the_out_of_place_form_takes_one_output(dev: Device) {
    let n = 1 << 16;
    let x = on(&vec![1.0; n], &[n], DType::F32, dev);
    let idx = common::tensor(
        &(0..n as i64).rev().collect::<Vec<_>>(),
        &[n],
        DType::I64,
        dev,
    );
    let s = on(&vec![2.0; n], &[n], DType::F32, dev);
    let bytes = n * 4;
    for reduce in ALL {
        for include_self in [true, false] {
            let before = memory::memory_allocated(dev);
            memory::reset_peak_memory_stats(dev);
            let y = x.scatter_reduce(0, &idx, &s, reduce, include_self).unwrap();
            let what = format!("{reduce:?} include_self={include_self}");
            assert_eq!(memory::memory_allocated(dev) - before, bytes, "{what}");
            // The mean's counts (one self-sized tensor, and the ones it
            // adds) live only during the call.
            let extra = memory::max_memory_allocated(dev) - before;
            if reduce == ScatterReduce::Mean {
                assert!(extra <= 4 * bytes, "{what}: peak {extra}");
            } else {
                assert!(extra <= bytes + 1024, "{what}: peak {extra}");
            }
            drop(y);
            assert_eq!(memory::memory_allocated(dev), before, "{what}");
        }
    }
}

fn many_values_into_one_position(dev: Device) {
    // 65,536 values into position 0 (on CUDA, as many threads contending
    // for one element through the CAS loop), a few into position 1. The
    // values are small integers, so every dtype holds the results exactly.
    let n = 1usize << 16;
    let maxes: Vec<f64> = (0..n).map(|i| ((i * 7919) % 251) as f64 - 125.0).collect();
    let signs: Vec<f64> = (0..n)
        .map(|i| if i % 3 == 0 { -1.0 } else { 1.0 })
        .collect();
    let index: Vec<i64> = (0..n).map(|i| i64::from(i % 4096 == 5)).collect();
    let idx = common::tensor(&index, &[n], DType::I64, dev);
    let at1: Vec<usize> = (0..n).filter(|&i| index[i] == 1).collect();
    for dt in [DType::F32, DType::BF16, DType::F16, DType::I64, DType::I32] {
        let x = on(&[0.5, 3.0], &[2], DType::F64, dev).to_dtype(dt).unwrap();
        let x0 = f64s(&x);
        let what = |r: &str| format!("{dt} {r} on {dev:?}");
        let s = on(&maxes, &[n], dt, dev);
        let hi = f64s(
            &x.scatter_reduce(0, &idx, &s, ScatterReduce::Amax, false)
                .unwrap(),
        );
        let want1 = at1
            .iter()
            .map(|&i| maxes[i])
            .fold(f64::NEG_INFINITY, f64::max);
        assert_eq!(hi, vec![125.0, want1], "{}", what("amax"));
        let lo = f64s(
            &x.scatter_reduce(0, &idx, &s, ScatterReduce::Amin, true)
                .unwrap(),
        );
        let want1 = at1.iter().map(|&i| maxes[i]).fold(x0[1], f64::min);
        assert_eq!(lo, vec![-125.0, want1], "{}", what("amin"));
        // The signs: n / 3 rounded up of them are -1.
        let s = on(&signs, &[n], dt, dev);
        let p = f64s(
            &x.scatter_reduce(0, &idx, &s, ScatterReduce::Prod, true)
                .unwrap(),
        );
        let neg0 = (0..n).filter(|&i| index[i] == 0 && signs[i] < 0.0).count();
        let neg1 = at1.iter().filter(|&&i| signs[i] < 0.0).count();
        let sign = |k: usize| if k.is_multiple_of(2) { 1.0 } else { -1.0 };
        assert_eq!(
            p,
            vec![x0[0] * sign(neg0), x0[1] * sign(neg1)],
            "{}",
            what("prod")
        );
        if matches!(dt, DType::F32 | DType::I64 | DType::I32) {
            // Sums of integers below 2^24: exact in any order.
            let s = on(&maxes, &[n], dt, dev);
            let sum = f64s(
                &x.scatter_reduce(0, &idx, &s, ScatterReduce::Sum, false)
                    .unwrap(),
            );
            let want0: f64 = (0..n).filter(|&i| index[i] == 0).map(|i| maxes[i]).sum();
            let want1: f64 = at1.iter().map(|&i| maxes[i]).sum();
            assert_eq!(sum, vec![want0, want1], "{}", what("sum"));
        }
    }
}
