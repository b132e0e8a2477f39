//! A world of one process: every collective gives the single-process
//! result, and every check of a real world applies.

use crate::data::{ops, reduced, tensor};
use tensorscope::distributed::{ProcessGroup, ReduceOp};
use tensorscope::{DType, Device, Error, Tensor};

fn is_err_of(e: &Error, op: &str, needle: &str) -> bool {
    let m = e.to_string();
    m.starts_with(op) && m.contains(needle)
}

#[test]
fn collectives_of_one_rank_are_the_identity_for_every_dtype() {
    let _g = crate::common::shared();
    let pg = ProcessGroup::single();
    assert_eq!((pg.rank(), pg.world_size()), (0, 1));
    for dtype in DType::ALL {
        let x = tensor(dtype, 1, 0, &[3, 5]).unwrap();
        let want = x.to_vec::<f64>().unwrap();
        for op in ops(dtype) {
            // The reference of one rank is that rank's tensor.
            let r: Vec<f64> = (0..15).map(|i| reduced(dtype, 1, op, i)).collect();
            assert_eq!(r, want, "{dtype} {op:?}: the reference");
            let mut t = x.deep_clone().unwrap();
            let v0 = t.version();
            pg.all_reduce(&mut t, op).unwrap();
            assert_eq!(t.to_vec::<f64>().unwrap(), want, "{dtype} {op:?}");
            assert!(t.version() > v0, "an in-place write bumps the version");
            let t = pg.all_reduce_async(t, op).unwrap().wait().unwrap();
            assert_eq!(t.to_vec::<f64>().unwrap(), want, "{dtype} {op:?} async");
            let r = pg.reduce_scatter(&x, op).unwrap();
            assert_eq!(r.shape(), [3, 5]);
            assert_eq!(r.to_vec::<f64>().unwrap(), want);
        }
        let mut b = x.deep_clone().unwrap();
        pg.broadcast(&mut b, 0).unwrap();
        assert_eq!(b.to_vec::<f64>().unwrap(), want);
        let g = pg.all_gather(&x).unwrap();
        assert_eq!((g.shape(), g.dtype()), (&[1, 3, 5][..], dtype));
        assert_eq!(g.to_vec::<f64>().unwrap(), want);
    }
    pg.barrier().unwrap();
    let sub = pg.new_group(&[0]).unwrap().expect("rank 0 is a member");
    assert_eq!(sub.world_size(), 1);
}

#[test]
fn bad_calls_are_errors_naming_the_op_and_leave_the_tensor() {
    let _g = crate::common::shared();
    let pg = ProcessGroup::single();
    let base = Tensor::arange(0.0, 12.0, 1.0, DType::F32, Device::Cpu)
        .unwrap()
        .reshape(&[3, 4])
        .unwrap();
    let mut t = base.t().unwrap();
    let e = pg.all_reduce(&mut t, ReduceOp::Sum).unwrap_err();
    assert!(is_err_of(&e, "all_reduce", "contiguous"), "{e}");
    assert!(e.to_string().contains("[4, 3]"), "{e}");

    let mut i = Tensor::ones(&[4], DType::I64, Device::Cpu).unwrap();
    let e = pg.all_reduce(&mut i, ReduceOp::Avg).unwrap_err();
    assert!(is_err_of(&e, "all_reduce", "float"), "{e}");
    assert_eq!(i.to_vec::<i64>().unwrap(), [1, 1, 1, 1]);

    let mut b = base.deep_clone().unwrap();
    let e = pg.broadcast(&mut b, 1).unwrap_err();
    assert!(is_err_of(&e, "broadcast", "root 1"), "{e}");
    let e = pg.reduce_scatter(
        &Tensor::ones(&[], DType::F32, Device::Cpu).unwrap(),
        ReduceOp::Sum,
    );
    assert!(is_err_of(
        &e.unwrap_err(),
        "reduce_scatter",
        "multiple of the world size"
    ));
    let e = pg.send(&base, 0, 0).unwrap_err();
    assert!(is_err_of(&e, "send", "this rank itself"), "{e}");
    let e = pg.recv(&mut b, 3, 0).unwrap_err();
    assert!(is_err_of(&e, "recv", "not a rank"), "{e}");
    for ranks in [&[][..], &[0, 0], &[1]] {
        let e = pg.new_group(ranks).err().expect("a bad rank list");
        assert!(is_err_of(&e, "new_group", ""), "{e}");
    }

    // The background form needs the only handle: an alias would read it
    // while it is being written.
    let a = base.deep_clone().unwrap();
    let _view = a.alias();
    let e = pg
        .all_reduce_async(a, ReduceOp::Sum)
        .err()
        .expect("a shared storage");
    assert!(is_err_of(&e, "all_reduce_async", "another handle"), "{e}");

    // A leaf that requires grad is not written in place.
    let mut w = base.deep_clone().unwrap().requires_grad_(true).unwrap();
    let e = pg.all_reduce(&mut w, ReduceOp::Sum).unwrap_err();
    assert!(e.to_string().starts_with("all_reduce"), "{e}");
}

#[test]
fn a_cuda_tensor_is_a_device_error_not_a_crash() {
    let _g = crate::common::shared();
    // Runs where a GPU is (the device tool's machines).
    let dev = Device::cuda_if_available();
    if dev.is_cpu() {
        return;
    }
    let pg = ProcessGroup::single();
    let mut t = Tensor::ones(&[2], DType::F32, dev).unwrap();
    let e = pg.all_reduce(&mut t, ReduceOp::Sum).unwrap_err();
    assert!(
        matches!(
            e,
            Error::DeviceMismatch {
                op: "all_reduce",
                ..
            }
        ),
        "{e}"
    );
}
