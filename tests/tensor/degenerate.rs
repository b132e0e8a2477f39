//! Degenerate inputs that once panicked where debug assertions and overflow
//! checks are on: empty views whose offset lies past their storage, and
//! shapes whose partial products overflow although a 0 makes them empty.
//! Their classes, with constant rows and out-of-range integer scalars
//! (`tests/agreement/deviations.rs`, deviations 30 and 31), are also
//! thrown at random by `hostile.rs`.

use crate::common;

use tensorscope::{memory, DType, Device, Tensor};

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
        // select(0, 2) of a [3, 5, 4, 0] tensor: offset 2 * 20 = 40 into an
        // empty storage (strides count a 0 as 1); and an explicit offset 7
        // past a 4-element storage.
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
