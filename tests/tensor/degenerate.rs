//! Degenerate inputs that once broke a checked build (debug assertions and
//! overflow checks on; `.ci/run` runs this binary in the `checked`
//! profile too) or disagreed with PyTorch: empty views whose offset lies
//! past their storage, shapes whose partial products overflow although a
//! 0 makes them empty, rows that are constant along the normalised or
//! reduced dimension (an expanded, stride-0 input), and scalars outside an
//! integer dtype's range.

use crate::common;

use tensorscope::{memory, DType, Device, Error, Tensor};

const CPU: Device = Device::Cpu;

/// An in-place op on an empty view whose offset is past the end of its
/// storage touches no byte: PyTorch allows such a view, and so must the
/// bounds contract of the kernels.
#[test]
fn in_place_ops_on_an_empty_view_past_the_end_touch_nothing() {
    let _g = common::serial();
    let base = memory::memory_allocated(CPU);
    for dt in [DType::F64, DType::F32, DType::I64, DType::U8] {
        let t = Tensor::randn(&[3, 5, 4, 0], DType::F32, CPU)
            .unwrap()
            .to_dtype(dt)
            .unwrap();
        // select(0, 2) of a [3, 5, 4, 0] tensor: offset 2 * 0 = 0 here, so
        // build the offset explicitly too, past the storage's end.
        let mut views = vec![t.select(0, 2).unwrap()];
        let s = Tensor::zeros(&[4], dt, CPU).unwrap();
        views.push(s.as_strided(&[0, 3], &[3, 1], 7).unwrap());
        for mut v in views {
            assert_eq!(v.numel(), 0);
            let version = v.version();
            v.abs_().unwrap();
            v.neg_().unwrap();
            v.add_scalar_(1.0).unwrap();
            v.fill_(2.0).unwrap();
            v.copy_(&Tensor::zeros(v.shape(), dt, CPU).unwrap())
                .unwrap();
            assert!(
                v.version() > version,
                "{dt}: an in-place op bumps the version"
            );
            assert_eq!(v.to_vec::<f64>().unwrap(), [0.0; 0]);
            assert_eq!(v.abs().unwrap().shape(), v.shape());
            assert_eq!(v.sum(&[], false).unwrap().to_vec::<f64>().unwrap(), [0.0]);
        }
        assert_eq!(s.to_vec::<f64>().unwrap(), [0.0; 4], "{dt}");
    }
    assert_eq!(memory::memory_allocated(CPU), base);
}

/// A shape is refused, naming the op and the shape, when the product of
/// its dims with each 0 counted as 1 overflows isize, however empty it is
/// (PyTorch: "numel: integer multiplication overflow"): then no partial
/// product of a tensor's dims can overflow anywhere. `[2, 0]` expanded to
/// `[2^33, 2^33, 2, 0]` once reached a backward whose product of the two
/// leading dims overflowed.
#[test]
fn shapes_whose_partial_products_overflow_are_refused_by_every_maker() {
    let _g = common::serial();
    let base = memory::memory_allocated(CPU);
    {
        let leaf = || {
            Tensor::randn(&[1], DType::F32, CPU)
                .unwrap()
                .as_strided(&[2, 0], &[0, 1], 0)
                .unwrap()
                .detach()
                .requires_grad_(true)
                .unwrap()
        };
        let big = 1usize << 33;
        let huge = [big, big, 2, 0];
        let named = |r: tensorscope::Result<Tensor>, op: &str| {
            let e = r.expect_err(op).to_string();
            assert!(
                e.starts_with(&format!("{op}:")) && e.contains("8589934592"),
                "{op}: {e}"
            );
        };
        let t = leaf();
        named(t.expand(&[big as isize, big as isize, -1, -1]), "expand");
        named(Tensor::zeros(&huge, DType::F32, CPU), "zeros");
        named(Tensor::full(&[0, big, big], 1.0, DType::I64, CPU), "full");
        named(t.as_strided(&huge, &[0, 0, 0, 1], 0), "as_strided");
        named(t.reshape(&[0, big as isize, big as isize]), "reshape");
        named(t.view(&[big as isize, 0, big as isize]), "view");
        // Within the bound, the same empty expansion goes through the
        // forward and the backward, whose sum runs over 2^40 rows.
        let t = leaf();
        let m = 1isize << 20;
        let e = t.expand(&[m, m, -1, -1]).unwrap();
        assert_eq!(e.numel(), 0);
        let y = e.mul_scalar(3.0).unwrap().sum(&[], false).unwrap();
        assert_eq!(y.to_vec::<f32>().unwrap(), [0.0]);
        y.backward().unwrap();
        assert_eq!(t.grad().expect("the leaf's gradient").shape(), [2, 0]);
        for dims in [&[0isize, 1][..], &[0], &[1], &[0, 1, 2]] {
            assert_eq!(e.sum(dims, false).unwrap().numel(), 0, "sum over {dims:?}");
            assert_eq!(e.mean(dims, true).unwrap().numel(), 0, "mean over {dims:?}");
        }
    }
    assert_eq!(memory::memory_allocated(CPU), base);
}

/// The scalars an integer dtype cannot hold are refused, naming the op and
/// the scalar (GUIDE 10, deviation 30: PyTorch wraps an int scalar); u8
/// takes what a fill takes (-255..=255, two's complement).
#[test]
fn integer_scalars_out_of_range_are_an_error_naming_the_op() {
    let _g = common::shared();
    let cases: [(DType, f64, f64); 3] = [
        (DType::I64, 1e19, -1e19),
        (DType::I32, 2147483648.0, -2147483649.0),
        (DType::U8, 256.0, -256.0),
    ];
    for (dt, hi, lo) in cases {
        let t = Tensor::arange(0.0, 3.0, 1.0, dt, CPU).unwrap();
        for s in [hi, lo] {
            let e = t.add_scalar(s).unwrap_err();
            let msg = e.to_string();
            assert!(
                msg.contains("add") && msg.contains(&format!("{s}")),
                "{dt} {s}: {msg}"
            );
            assert!(
                matches!(e, Error::InvalidArgument { .. }),
                "{dt} {s}: {e:?}"
            );
            assert!(t.mul_scalar(s).is_err(), "{dt} mul {s}");
            assert!(t.sub_scalar(s).is_err(), "{dt} sub {s}");
            let mut u = t.deep_clone().unwrap();
            assert!(u.add_scalar_(s).is_err(), "{dt} add_ {s}");
            assert_eq!(u.to_vec::<f64>().unwrap(), [0.0, 1.0, 2.0]);
            assert!(Tensor::full(&[2], s, dt, CPU).is_err(), "{dt} full {s}");
            // Comparisons see the true value and never fail.
            assert_eq!(
                t.lt_scalar(s).unwrap().to_vec::<f64>().unwrap(),
                if s > 0.0 { [1.0; 3] } else { [0.0; 3] },
                "{dt} lt {s}"
            );
        }
    }
    // The edges themselves are accepted.
    let t = Tensor::arange(0.0, 2.0, 1.0, DType::U8, CPU).unwrap();
    assert_eq!(
        t.add_scalar(-255.0).unwrap().to_vec::<f64>().unwrap(),
        [1.0, 2.0]
    );
    assert_eq!(
        t.add_scalar(255.0).unwrap().to_vec::<f64>().unwrap(),
        [255.0, 0.0]
    );
    let t = Tensor::zeros(&[1], DType::I64, CPU).unwrap();
    let big = 9.223_372_036_854_775e18;
    assert_eq!(
        t.add_scalar(big).unwrap().to_vec::<i64>().unwrap(),
        [big as i64]
    );
    assert_eq!(
        t.add_scalar(i64::MIN as f64)
            .unwrap()
            .to_vec::<i64>()
            .unwrap(),
        [i64::MIN]
    );
}
