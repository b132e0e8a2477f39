//! The collectives across real processes: each test starts `mpirun -np N`
//! over this binary filtered to itself, and each rank compares its result
//! with the single-process reference of `data.rs`.

use crate::data::{ops, reduced, tensor, value};
use std::time::Duration;
use tensorscope::distributed::{ProcessGroup, ReduceOp};
use tensorscope::{DType, Device, Tensor};

/// Whether this process is the launcher: outside `mpirun` it runs
/// `mpirun -np np` over this binary, filtered to `test`, and asserts that
/// every rank passed; inside, it returns false and the rank runs the body.
pub(crate) fn launched(np: usize, test: &str) -> bool {
    if std::env::var_os("OMPI_COMM_WORLD_SIZE").is_some() {
        return false;
    }
    let exe = std::env::current_exe().unwrap();
    let mut child = std::process::Command::new("mpirun")
        .args(["--allow-run-as-root", "--oversubscribe", "-np", &np.to_string()])
        .arg(exe)
        .args(["--exact", test, "--test-threads", "1", "--nocapture"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("mpirun (Open MPI) must be installed for the `mpi` feature's tests: .ci/run installs it");
    // A hang is a failure, not a stuck test run.
    let start = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(120) {
            child.kill().ok();
            panic!("mpirun -np {np} {test}: no end after 120 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "mpirun -np {np} {test}:\n{text}");
    // mpirun fails if any rank does; and the ranks ran the test itself, not
    // 0 tests through a bad filter (their output interleaves, so no count).
    assert!(
        text.contains("1 passed") && !text.contains("running 0 tests"),
        "{text}"
    );
    true
}

macro_rules! mpi_test {
    ($(#[$doc:meta])* $name:ident, $np:expr, |$pg:ident| $body:block) => {
        $(#[$doc])*
        #[test]
        fn $name() {
            // One job at a time: ranks oversubscribe the cores already.
            let _g = crate::common::serial();
            // This test's path as the harness names it (no crate prefix).
            let path = module_path!().split_once("::").map_or("", |p| p.1);
            if crate::mpi::launched($np, &format!("{path}::{}", stringify!($name))) {
                return;
            }
            let $pg = tensorscope::distributed::ProcessGroup::mpi().unwrap();
            // A rank that fails leaves the others waiting: they give up.
            $pg.set_timeout(std::time::Duration::from_secs(30));
            assert_eq!($pg.world_size(), $np);
            $body
        }
    };
}

fn check(what: &str, t: &Tensor, want: impl Fn(usize) -> f64) {
    let got = t.to_vec::<f64>().unwrap();
    for (i, g) in got.iter().enumerate() {
        assert_eq!(*g, want(i), "{what}: element {i} of {got:?}");
    }
}

fn all_reduce_body(pg: &ProcessGroup) {
    let (w, r) = (pg.world_size(), pg.rank());
    for dtype in DType::ALL {
        for op in ops(dtype) {
            let mut t = tensor(dtype, w, r, &[3, 5]).unwrap();
            pg.all_reduce(&mut t, op).unwrap();
            assert_eq!((t.shape(), t.dtype()), (&[3, 5][..], dtype));
            check(&format!("{dtype} {op:?}"), &t, |i| reduced(dtype, w, op, i));
            let t = tensor(dtype, w, r, &[7]).unwrap();
            let t = pg.all_reduce_async(t, op).unwrap().wait().unwrap();
            check(&format!("{dtype} {op:?} async"), &t, |i| {
                reduced(dtype, w, op, i)
            });
        }
    }
    // Two in flight at once, waited in the other order.
    let a = pg
        .all_reduce_async(tensor(DType::F32, w, r, &[4]).unwrap(), ReduceOp::Sum)
        .unwrap();
    let b = pg
        .all_reduce_async(tensor(DType::I64, w, r, &[4]).unwrap(), ReduceOp::Max)
        .unwrap();
    check("second", &b.wait().unwrap(), |i| {
        reduced(DType::I64, w, ReduceOp::Max, i)
    });
    check("first", &a.wait().unwrap(), |i| {
        reduced(DType::F32, w, ReduceOp::Sum, i)
    });
}

mpi_test!(
    /// Every dtype and op, blocking and in the background.
    all_reduce_on_2_ranks, 2, |pg| { all_reduce_body(&pg) }
);
mpi_test!(all_reduce_on_4_ranks, 4, |pg| { all_reduce_body(&pg) });

fn movement_body(pg: &ProcessGroup) {
    let (w, r) = (pg.world_size(), pg.rank());
    for dtype in DType::ALL {
        for root in [0, w - 1] {
            let mut t = tensor(dtype, w, r, &[2, 3]).unwrap();
            pg.broadcast(&mut t, root).unwrap();
            check(&format!("{dtype} broadcast from {root}"), &t, |i| {
                value(dtype, w, root, i)
            });
        }
        let g = pg
            .all_gather(&tensor(dtype, w, r, &[2, 3]).unwrap())
            .unwrap();
        assert_eq!(g.shape(), [w, 2, 3]);
        check(&format!("{dtype} all_gather"), &g, |i| {
            value(dtype, w, i / 6, i % 6)
        });
        for op in ops(dtype) {
            let full = tensor(dtype, w, r, &[2 * w, 3]).unwrap();
            let piece = pg.reduce_scatter(&full, op).unwrap();
            assert_eq!(piece.shape(), [2, 3]);
            check(&format!("{dtype} {op:?} reduce_scatter"), &piece, |i| {
                reduced(dtype, w, op, r * 6 + i)
            });
        }
    }
    pg.barrier().unwrap();
}

mpi_test!(
    /// broadcast from either end, all_gather, reduce_scatter, every dtype.
    broadcast_gather_scatter_on_2_ranks, 2, |pg| { movement_body(&pg) }
);
mpi_test!(broadcast_gather_scatter_on_4_ranks, 4, |pg| {
    movement_body(&pg)
});

mpi_test!(
    /// A ring of sends; a receive of another shape is an `Err` that leaves
    /// the tensor, and the group goes on.
    send_and_recv_in_a_ring, 2, |pg| {
        let (w, r) = (pg.world_size(), pg.rank());
        let (next, prev) = ((r + 1) % w, (r + w - 1) % w);
        let mine = tensor(DType::F64, w, r, &[4]).unwrap();
        let mut got = Tensor::zeros(&[4], DType::F64, Device::Cpu).unwrap();
        if r == 0 {
            pg.send(&mine, next, 7).unwrap();
            pg.recv(&mut got, prev, 7).unwrap();
        } else {
            pg.recv(&mut got, prev, 7).unwrap();
            pg.send(&mine, next, 7).unwrap();
        }
        check("ring", &got, |i| value(DType::F64, w, prev, i));
        // Rank 0 sends [3] f32; rank 1 expects [4] f32.
        if r == 0 {
            pg.send(&Tensor::ones(&[3], DType::F32, Device::Cpu).unwrap(), 1, 9).unwrap();
        } else {
            let mut t = Tensor::full(&[4], 2.0, DType::F32, Device::Cpu).unwrap();
            let e = pg.recv(&mut t, 0, 9).unwrap_err();
            assert!(e.to_string().starts_with("recv: rank 1: rank 0 sent a tensor other than [4] float32"), "{e}");
            assert_eq!(t.to_vec::<f32>().unwrap(), [2.0; 4]);
        }
        let mut t = tensor(DType::F32, w, r, &[5]).unwrap();
        pg.all_reduce(&mut t, ReduceOp::Sum).unwrap();
        check("after", &t, |i| reduced(DType::F32, w, ReduceOp::Sum, i));
    }
);

mpi_test!(
    /// Ranks that disagree on the shape, the op, the root, or one whose own
    /// checks fail: an `Err` on every rank, no data moved, and the group
    /// still works.
    mismatched_calls_are_errors_on_every_rank, 2, |pg| {
        let (w, r) = (pg.world_size(), pg.rank());
        let mut t = Tensor::ones(&[2 + r], DType::F32, Device::Cpu).unwrap();
        let e = pg.all_reduce(&mut t, ReduceOp::Sum).unwrap_err();
        assert!(e.to_string().contains("different tensors or arguments"), "{e}");
        assert_eq!(t.to_vec::<f32>().unwrap(), vec![1.0; 2 + r], "untouched");
        let mut t = Tensor::ones(&[3], DType::F32, Device::Cpu).unwrap();
        let op = if r == 0 { ReduceOp::Sum } else { ReduceOp::Max };
        assert!(pg.all_reduce(&mut t, op).is_err());
        assert!(pg.broadcast(&mut t, r).is_err(), "different roots");
        // Rank 1 passes a transposed view: its own error, and rank 0's
        // error says the ranks disagreed.
        let base = Tensor::ones(&[2, 3], DType::F32, Device::Cpu).unwrap();
        let mut v = if r == 1 { base.t().unwrap() } else { base.deep_clone().unwrap().reshape(&[3, 2]).unwrap() };
        let e = pg.all_reduce(&mut v, ReduceOp::Sum).unwrap_err();
        let want = if r == 1 { "contiguous" } else { "different tensors" };
        assert!(e.to_string().contains(want), "rank {r}: {e}");
        let mut t = tensor(DType::I32, w, r, &[6]).unwrap();
        pg.all_reduce(&mut t, ReduceOp::Min).unwrap();
        check("after", &t, |i| reduced(DType::I32, w, ReduceOp::Min, i));
    }
);

mpi_test!(
    /// `new_group(&[3, 1])` of 4: ranks 3 and 1 become 0 and 1 of the new
    /// group, the others get `None`, and the sub-group reduces over its
    /// members only.
    sub_groups_number_and_reduce_their_members, 4, |pg| {
        let (w, r) = (pg.world_size(), pg.rank());
        let sub = pg.new_group(&[3, 1]).unwrap();
        match r {
            3 | 1 => {
                let sub = sub.expect("a member");
                assert_eq!((sub.rank(), sub.world_size()), (if r == 3 { 0 } else { 1 }, 2));
                let mut t = tensor(DType::F32, w, r, &[5]).unwrap();
                sub.all_reduce(&mut t, ReduceOp::Sum).unwrap();
                check("sub", &t, |i| value(DType::F32, w, 3, i) + value(DType::F32, w, 1, i));
            }
            _ => assert!(sub.is_none()),
        }
        let mut t = tensor(DType::F32, w, r, &[5]).unwrap();
        pg.all_reduce(&mut t, ReduceOp::Sum).unwrap();
        check("world after", &t, |i| reduced(DType::F32, w, ReduceOp::Sum, i));
    }
);

mpi_test!(
    /// A rank that does not come: the waiting rank's collective is
    /// an `Err` after the group's timeout, and the group then refuses work.
    a_late_rank_is_a_timeout_not_a_hang, 2, |pg| {
        if pg.rank() == 0 {
            pg.set_timeout(Duration::from_millis(500));
            let t0 = std::time::Instant::now();
            let e = pg.barrier().unwrap_err();
            assert!(e.to_string().contains("timed out after 500ms"), "{e}");
            assert!(t0.elapsed() < Duration::from_secs(5));
            let mut t = Tensor::ones(&[2], DType::F32, Device::Cpu).unwrap();
            let e = pg.all_reduce(&mut t, ReduceOp::Sum).unwrap_err();
            assert!(e.to_string().contains("stopped after an earlier failure"), "{e}");
        } else {
            // Never comes: it outlives rank 0's timeout, then stops MPI.
            std::thread::sleep(Duration::from_millis(1500));
        }
    }
);
