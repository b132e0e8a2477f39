//! `Tensor` is `Send` and `Sync` in practice: loader threads hand tensors
//! over channels, many threads read one shared `&Tensor`, and in-place writes
//! through aliases on several threads neither tear nor deadlock.

use std::sync::mpsc;
use std::time::Duration;
use tensorscope::{DType, Device, Tensor};

const CPU: Device = Device::Cpu;

fn assert_send_sync<T: Send + Sync>() {}

/// Runs `f` on a thread and fails the test if it does not finish in time (a
/// deadlock would otherwise hang the test run).
fn within<R: Send + 'static>(secs: u64, f: impl FnOnce() -> R + Send + 'static) -> R {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(secs))
        .expect("deadlock or far too slow: the work did not finish in time")
}

#[test]
fn tensor_is_send_and_sync() {
    let _shared = crate::common::shared();
    assert_send_sync::<Tensor>();
    assert_send_sync::<tensorscope::Error>();
}

#[test]
fn loader_threads_send_tensors_over_a_channel() {
    let _shared = crate::common::shared();
    let (tx, rx) = mpsc::sync_channel::<(usize, Tensor)>(4);
    let loaders: Vec<_> = (0..3)
        .map(|w| {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for b in 0..20 {
                    let id = w * 100 + b;
                    let x = Tensor::full(&[8, 16], id as f64, DType::F32, CPU).unwrap();
                    // a view and an op result cross too
                    let y = x.t().unwrap().mul_scalar(2.0).unwrap();
                    tx.send((id, x)).unwrap();
                    tx.send((id + 10_000, y)).unwrap();
                }
            })
        })
        .collect();
    drop(tx);
    let mut seen = 0;
    for (id, t) in rx {
        let (want, shape) = if id >= 10_000 {
            (2.0 * (id - 10_000) as f32, [16usize, 8])
        } else {
            (id as f32, [8, 16])
        };
        assert_eq!(t.shape(), shape);
        assert!(
            t.to_vec::<f32>().unwrap().iter().all(|&v| v == want),
            "batch {id}"
        );
        seen += 1;
    }
    for l in loaders {
        l.join().unwrap();
    }
    assert_eq!(seen, 120);
}

#[test]
fn many_threads_read_one_shared_tensor() {
    let _shared = crate::common::shared();
    let n = 300_000; // large enough that kernels run on rayon too
    let w = Tensor::arange(0.0, n as f64, 1.0, DType::F64, CPU).unwrap();
    let want: f64 = (0..n).map(|k| (2 * k) as f64).sum();
    let w = &w;
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..8)
            .map(|i| {
                s.spawn(move || {
                    let mut acc = 0.0;
                    for _ in 0..5 {
                        let y = w.add(w).unwrap();
                        let v = w.narrow(0, i, 10).unwrap().to_vec::<f64>().unwrap();
                        assert_eq!(v[0], i as f64);
                        acc = y.to_vec::<f64>().unwrap().iter().sum::<f64>();
                    }
                    acc
                })
            })
            .collect();
        for h in hs {
            assert_eq!(h.join().unwrap(), want);
        }
    });
}

#[test]
fn in_place_writes_through_an_alias_while_another_thread_reads_never_tear() {
    let _shared = crate::common::shared();
    let n = 200_000;
    let a = Tensor::zeros(&[n], DType::I64, CPU).unwrap();
    let mut writer = a.alias();
    let reader = a.alias();
    within(120, move || {
        std::thread::scope(|s| {
            s.spawn(move || {
                for _ in 0..300 {
                    writer.add_scalar_(1.0).unwrap();
                }
            });
            s.spawn(move || {
                for _ in 0..300 {
                    // Each read is a snapshot under the storage's lock: every
                    // element has the same value (all old or all new).
                    let v = reader.to_vec::<i64>().unwrap();
                    assert!(
                        v.iter().all(|&x| x == v[0]),
                        "torn read: {} vs {:?}",
                        v[0],
                        v.iter().find(|&&x| x != v[0])
                    );
                    let s = reader.sum_check();
                    assert_eq!(s % n as i64, 0);
                }
            });
        });
    });
    assert!(a.to_vec::<i64>().unwrap().iter().all(|&x| x == 300));
}

/// Sum of the elements, through an op (a reader that takes the lock inside a kernel).
trait SumCheck {
    fn sum_check(&self) -> i64;
}
impl SumCheck for Tensor {
    fn sum_check(&self) -> i64 {
        let c = self.mul_scalar(1.0).unwrap();
        c.to_vec::<i64>().unwrap().iter().sum()
    }
}

#[test]
fn two_storages_written_in_opposite_order_do_not_deadlock() {
    let _shared = crate::common::shared();
    // a.add_(&b) and b.add_(&a) concurrently: each locks both storages (one
    // for reading, one for writing), in opposite roles. 1000 iterations each.
    let n = 140_000; // above the parallel threshold: kernels use rayon inside the locks
    let a = Tensor::ones(&[n], DType::I64, CPU).unwrap();
    let b = Tensor::ones(&[n], DType::I64, CPU).unwrap();
    let (mut a1, b1) = (a.alias(), b.alias());
    let (mut b2, a2) = (b.alias(), a.alias());
    within(300, move || {
        std::thread::scope(|s| {
            s.spawn(move || {
                for _ in 0..1000 {
                    a1.add_(&b1).unwrap();
                }
            });
            s.spawn(move || {
                for _ in 0..1000 {
                    b2.add_(&a2).unwrap();
                }
            });
        });
    });
    // Each op saw a consistent snapshot of its input: both tensors stay
    // constant (all elements equal), whatever the interleaving; values wrap.
    let (va, vb) = (a.to_vec::<i64>().unwrap(), b.to_vec::<i64>().unwrap());
    assert!(va.iter().all(|&x| x == va[0]), "a torn");
    assert!(vb.iter().all(|&x| x == vb[0]), "b torn");
    assert_eq!(a.version(), 1000);
    assert_eq!(b.version(), 1000);
    assert_ne!(va[0], 1);
}

#[test]
fn out_form_and_in_place_on_shared_storage_across_threads() {
    let _shared = crate::common::shared();
    // Two threads write disjoint halves of one storage through views while a
    // third reads the whole; the final values are exact.
    let n = 100_000;
    let base = Tensor::zeros(&[2, n], DType::F32, CPU).unwrap();
    let mut top = base.select(0, 0).unwrap();
    let mut bottom = base.select(0, 1).unwrap();
    let whole = base.alias();
    within(120, move || {
        std::thread::scope(|s| {
            s.spawn(move || {
                for _ in 0..200 {
                    top.add_scalar_(1.0).unwrap();
                }
            });
            s.spawn(move || {
                let one = Tensor::ones(&[n], DType::F32, CPU).unwrap();
                for _ in 0..200 {
                    bottom.sub_(&one).unwrap();
                }
            });
            s.spawn(move || {
                for _ in 0..50 {
                    let v = whole.to_vec::<f32>().unwrap();
                    assert!(v[..n].iter().all(|&x| x == v[0]));
                    assert!(v[n..].iter().all(|&x| x == v[n]));
                }
            });
        });
    });
    let v = base.to_vec::<f32>().unwrap();
    assert!(v[..n].iter().all(|&x| x == 200.0));
    assert!(v[n..].iter().all(|&x| x == -200.0));
}

#[test]
fn in_place_ops_inside_rayon_tasks_on_one_storage_do_not_deadlock() {
    let _shared = crate::common::shared();
    // User code runs tensor ops inside its own rayon tasks, all writing one
    // large storage. A kernel that waited for the pool while holding the
    // storage's lock could steal one of these tasks, which then blocks on
    // that same lock: kernels inside a rayon worker run on that thread.
    let v = within(120, || {
        let x = Tensor::zeros(&[1_000_000], DType::F32, CPU).unwrap();
        let y = Tensor::ones(&[1_000_000], DType::F32, CPU).unwrap();
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(4)
            .build()
            .unwrap();
        for _ in 0..10 {
            pool.install(|| {
                use rayon::prelude::*;
                (0..16).into_par_iter().for_each(|_| {
                    x.alias().add_(&y).unwrap();
                });
            });
        }
        x.to_vec::<f32>().unwrap()
    });
    assert!(v.iter().all(|&e| e == 160.0));
}

#[test]
fn a_plain_thread_and_a_saturated_rayon_pool_share_a_storage_without_deadlock() {
    let _shared = crate::common::shared();
    // Every global rayon worker is blocked on a storage that a plain thread
    // holds while it runs a large kernel: that kernel's chunks must not need
    // those workers (they run on tensorscope's own kernel threads).
    let v = within(120, || {
        let x = Tensor::zeros(&[1_000_000], DType::F32, CPU).unwrap();
        let y = Tensor::ones(&[1_000_000], DType::F32, CPU).unwrap();
        std::thread::scope(|s| {
            s.spawn(|| {
                use rayon::prelude::*;
                (0..64).into_par_iter().for_each(|_| {
                    x.alias().add_(&y).unwrap();
                });
            });
            s.spawn(|| {
                for _ in 0..64 {
                    x.alias().add_(&y).unwrap();
                }
            });
        });
        x.to_vec::<f32>().unwrap()
    });
    assert!(v.iter().all(|&e| e == 128.0));
}
