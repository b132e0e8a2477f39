//! Scope blocks: every byte comes back on every exit path, move-out keeps
//! exactly what was moved, nested scopes, statistics, and the temporaries of
//! one expression. Byte counts are the CPU allocator's (global), so every
//! test takes `LOCK`.

use std::panic::{catch_unwind, AssertUnwindSafe};
use tensorscope::memory::{self, round_size};
use tensorscope::{leak, scope, scope_with_stats, DType, Device, Error, Result, Tensor};

fn lock() -> crate::common::Guard {
    crate::common::serial()
}

const CPU: Device = Device::Cpu;

fn allocated() -> usize {
    memory::memory_allocated(CPU)
}

/// Block bytes of a fresh tensor of `numel` elements of `dtype`.
fn block(numel: usize, dtype: DType) -> usize {
    round_size(numel * dtype.size_in_bytes())
}

/// The usual counters, to compare before and after.
fn counters() -> (usize, usize, usize) {
    (
        allocated(),
        leak::live_tensors(),
        leak::live_scoped_tensors(),
    )
}

#[test]
fn normal_exit_returns_every_byte() -> Result<()> {
    let _g = lock();
    let before = counters();
    let outside = Tensor::arange(0.0, 12.0, 1.0, DType::F32, CPU)?.view(&[3, 4])?;
    let base = allocated();
    let sum = scope(|s| -> Result<f64> {
        let a = s.zeros(&[1000], DType::F32, CPU)?;
        let b = s.ones(&[3, 5], DType::F64, CPU)?;
        let c = s.keep(outside.t()?); // a view of an outside tensor: no new bytes
        let d = s.keep(c.mul_scalar(2.0)?); // a result: new bytes
        let e = s.full(&[7], 1.0, DType::I64, CPU)?;
        let expect = block(1000, DType::F32)
            + block(15, DType::F64)
            + block(12, DType::F32)
            + block(7, DType::I64);
        assert_eq!(allocated() - base, expect);
        // The scope counts the outside storage too: it holds a handle to it.
        assert_eq!(s.stats().live_bytes, expect + block(12, DType::F32));
        assert_eq!(leak::live_scoped_tensors(), 5);
        assert_eq!(a.numel() + b.numel() + e.numel(), 1022);
        d.narrow(0, 3, 1)?.narrow(1, 2, 1)?.item::<f64>()
    });
    // d = 2 * outside^T, so d[3][2] = 2 * outside[2][3] = 2 * 11
    assert_eq!(sum?, 22.0);
    assert_eq!(allocated(), base);
    drop(outside);
    assert_eq!(counters(), before);
    Ok(())
}

#[test]
fn err_exit_returns_every_byte() {
    let _g = lock();
    let before = counters();
    let r: Result<()> = scope(|s| {
        let a = s.randn(&[64, 64], DType::F32, CPU)?;
        let b = s.keep(a.t()?.contiguous()?);
        let c = s.zeros(&[63], DType::F32, CPU)?;
        assert!(allocated() >= before.0 + 2 * block(64 * 64, DType::F32));
        let _bad = b.add(&c)?; // [64, 64] + [63]: the `?` leaves the scope
        unreachable!("the shapes do not broadcast");
    });
    match r {
        Err(Error::ShapeMismatch { op, lhs, rhs, .. }) => {
            assert_eq!(op, "add");
            assert_eq!((lhs, rhs), (vec![64, 64], vec![63]));
        }
        other => panic!("expected a shape mismatch from add, got {other:?}"),
    }
    assert_eq!(counters(), before);
}

#[test]
fn early_return_returns_every_byte() -> Result<()> {
    let _g = lock();
    let before = counters();
    let mut seen = Vec::new();
    for limit in [0.0, 2.5, 100.0] {
        let r = scope(|s| -> Result<usize> {
            let x = s.arange(0.0, 5.0, 1.0, DType::F64, CPU)?;
            for i in 0..5 {
                let v = s.keep(x.narrow(0, i, 1)?.add_scalar(0.5)?);
                if v.item::<f64>()? > limit {
                    return Ok(i); // early return in the middle of the loop
                }
            }
            Ok(usize::MAX)
        })?;
        seen.push(r);
        assert_eq!(counters(), before);
    }
    // values 0.5, 1.5, ...: the first above 0 is #0, the first above 2.5 is #3
    assert_eq!(seen, [0, 3, usize::MAX]);
    Ok(())
}

#[test]
fn panic_exit_returns_every_byte() {
    let _g = lock();
    let before = counters();
    let r = catch_unwind(AssertUnwindSafe(|| {
        scope(|s| {
            let _a = s.zeros(&[4096], DType::F32, CPU).unwrap();
            let _b = s.keep(Tensor::ones(&[9, 9], DType::F64, CPU).unwrap());
            assert_eq!(leak::live_scoped_tensors(), 2);
            assert!(allocated() > before.0);
            panic!("boom inside the scope");
        })
    }));
    let msg = r.unwrap_err();
    assert_eq!(msg.downcast_ref::<&str>(), Some(&"boom inside the scope"));
    assert_eq!(counters(), before);
}

#[test]
fn panic_in_inner_scope_frees_only_the_inner_scope() -> Result<()> {
    let _g = lock();
    let before = counters();
    scope(|outer| -> Result<()> {
        let keep = outer.full(&[100], 3.0, DType::F32, CPU)?;
        let with_outer = allocated();
        let r = catch_unwind(AssertUnwindSafe(|| {
            scope(|inner| {
                let _t = inner.zeros(&[5000], DType::F64, CPU).unwrap();
                panic!("inner");
            })
        }));
        assert!(r.is_err());
        assert_eq!(allocated(), with_outer); // the inner tensor is gone ...
        assert_eq!(leak::live_scoped_tensors(), 1); // ... the outer one is not
        assert_eq!(keep.to_vec::<f32>()?, vec![3.0; 100]);
        Ok(())
    })?;
    assert_eq!(counters(), before);
    Ok(())
}

#[test]
fn move_out_keeps_exactly_the_moved_tensors() -> Result<()> {
    let _g = lock();
    let before = counters();
    let sizes = [10usize, 300, 1000, 7, 2048];
    let (moved, stats) = scope_with_stats(|s| -> Result<Vec<Tensor>> {
        let mut handles = Vec::new();
        for (i, &n) in sizes.iter().enumerate() {
            handles.push(s.full(&[n], i as f64 + 0.5, DType::F32, CPU)?);
        }
        // move out #3 and #1; dropping the other handles does nothing
        let h3 = handles.remove(3);
        let h1 = handles.remove(1);
        drop(handles);
        let out = vec![s.move_out(h3), s.move_out(h1)];
        assert_eq!(s.stats().live, 3);
        Ok(out)
    });
    let moved = moved?;
    assert_eq!(
        (stats.created, stats.moved_out, stats.freed_at_exit),
        (5, 2, 3)
    );
    assert_eq!(
        allocated() - before.0,
        block(7, DType::F32) + block(300, DType::F32)
    );
    assert_eq!(leak::live_tensors(), before.1 + 2);
    assert_eq!(leak::live_scoped_tensors(), 0);
    assert_eq!(moved[0].to_vec::<f64>()?, vec![3.5; 7]);
    assert_eq!(moved[1].to_vec::<f64>()?, vec![1.5; 300]);
    drop(moved);
    assert_eq!(counters(), before);
    Ok(())
}

#[test]
fn nested_scopes_move_to_the_enclosing_scope() -> Result<()> {
    let _g = lock();
    let before = counters();
    let (total, outer_stats) = scope_with_stats(|outer| -> Result<Tensor> {
        let w = outer.arange(0.0, 6.0, 1.0, DType::F32, CPU)?;
        let w = outer.keep(w.view(&[2, 3])?.t()?); // [3, 2], non-contiguous
        let mut results = Vec::new();
        for i in 0..3 {
            let base = allocated();
            let (r, inner_stats) = scope_with_stats(|inner| -> Result<()> {
                let tmp = inner.full(&[3, 2], i as f64, DType::F32, CPU)?;
                let r = inner.keep(tmp.mul(&w)?); // an outer handle as an operand
                let _scratch = inner.zeros(&[10_000], DType::F32, CPU)?;
                results.push(inner.move_to(r, outer));
                Ok(())
            });
            r?;
            assert_eq!(
                (
                    inner_stats.created,
                    inner_stats.adopted,
                    inner_stats.moved_out,
                    inner_stats.freed_at_exit,
                    inner_stats.live
                ),
                (2, 1, 1, 2, 0)
            );
            // one [3, 2] f32 result survives each inner scope
            assert_eq!(allocated() - base, block(6, DType::F32));
        }
        assert_eq!(outer.stats().live, 2 + 3);
        assert_eq!(outer.stats().adopted, 1 + 3);
        let mut acc = outer.zeros(&[3, 2], DType::F32, CPU)?;
        for r in &results {
            acc.add_(r)?;
        }
        Ok(outer.move_out(acc))
    });
    // acc = (0 + 1 + 2) * w^T
    let expect: Vec<f32> = [0.0, 3.0, 1.0, 4.0, 2.0, 5.0]
        .iter()
        .map(|v| 3.0 * v)
        .collect();
    let total = total?;
    assert_eq!(total.to_vec::<f32>()?, expect);
    assert_eq!(
        (
            outer_stats.created,
            outer_stats.adopted,
            outer_stats.moved_out,
            outer_stats.freed_at_exit
        ),
        (2, 4, 1, 5)
    );
    drop(total);
    assert_eq!(counters(), before);
    Ok(())
}

#[test]
fn statistics_match_what_happened() -> Result<()> {
    let _g = lock();
    let before = counters();
    memory::reset_peak_memory_stats(CPU);
    let (r, st) = scope_with_stats(|s| -> Result<Tensor> {
        let a = s.zeros(&[256], DType::F32, CPU)?; // 1024 B
        let b = s.ones(&[100], DType::F64, CPU)?; // 800 B -> 1024
        let c = s.full(&[10], 2.0, DType::F32, CPU)?; // 40 B -> 512
        let _v = s.keep(a.narrow(0, 10, 20)?); // a's storage again: no new bytes
        let d = s.keep(a.add_scalar(1.0)?); // 1024 B
        let st = s.stats();
        assert_eq!((st.created, st.adopted, st.live), (3, 2, 5));
        assert_eq!(st.live_bytes, 1024 + 1024 + 512 + 1024);
        assert_eq!(st.peak_bytes, st.live_bytes);
        s.free(c);
        assert_eq!(s.stats().live_bytes, 1024 + 1024 + 1024);
        let d = s.move_out(d);
        let st = s.stats();
        assert_eq!(st.live_bytes, 1024 + 1024);
        assert_eq!(st.peak_bytes, 1024 + 1024 + 512 + 1024);
        assert_eq!((st.freed_early, st.moved_out, st.live), (1, 1, 3));
        assert_eq!(b.numel(), 100);
        Ok(d)
    });
    let d = r?;
    assert_eq!(
        (
            st.created,
            st.adopted,
            st.moved_out,
            st.freed_early,
            st.freed_at_exit,
            st.live,
            st.live_bytes
        ),
        (3, 2, 1, 1, 3, 0, 0)
    );
    assert_eq!(
        st.created + st.adopted,
        st.moved_out + st.freed_early + st.freed_at_exit
    );
    // The scope's peak, counted by storage, is the allocator's peak: nothing
    // else was allocated in between.
    assert_eq!(st.peak_bytes, memory::max_memory_allocated(CPU) - before.0);
    assert_eq!(allocated() - before.0, 1024);
    assert_eq!(d.to_vec::<f32>()?, vec![1.0; 256]);
    drop(d);
    assert_eq!(counters(), before);
    Ok(())
}

#[test]
fn peak_bytes_count_each_storage_once() -> Result<()> {
    let _g = lock();
    let before = counters();
    scope(|s| -> Result<()> {
        let x = s.zeros(&[64, 64], DType::F32, CPU)?; // 16 KiB
        let blk = block(64 * 64, DType::F32);
        let views = [
            s.keep(x.alias()),
            s.keep(x.t()?),
            s.keep(x.slice(0, 1, 64, 3)?),
            s.keep(x.select(1, 5)?),
            s.keep(x.detach()),
        ];
        assert_eq!(s.stats().live, 6);
        assert_eq!(s.stats().live_bytes, blk);
        // moving views out keeps the storage counted while the scope holds any handle to it
        let [v0, v1, v2, v3, v4] = views;
        let owned: Vec<Tensor> = [v0, v1, v2, v3]
            .into_iter()
            .map(|v| s.move_out(v))
            .collect();
        assert_eq!(s.stats().live_bytes, blk);
        s.free(v4);
        assert_eq!(s.stats().live_bytes, blk);
        let y = s.ones(&[10], DType::F16, CPU)?;
        assert_eq!(s.stats().live_bytes, blk + block(10, DType::F16));
        s.free(x);
        assert_eq!(s.stats().live_bytes, block(10, DType::F16));
        assert_eq!(s.stats().peak_bytes, blk + block(10, DType::F16));
        // the storage is still alive: the moved-out views own it now
        assert_eq!(allocated() - before.0, blk + block(10, DType::F16));
        drop(owned);
        assert_eq!(allocated() - before.0, block(10, DType::F16));
        assert_eq!(y.dtype(), DType::F16);
        Ok(())
    })?;
    assert_eq!(counters(), before);
    Ok(())
}

#[test]
// Clippy agrees: forgetting a `Scoped` is the same as dropping it. That is the point.
#[allow(clippy::forget_non_drop)]
fn forgetting_a_scoped_handle_does_not_leak() -> Result<()> {
    let _g = lock();
    let before = counters();
    scope(|s| -> Result<()> {
        let a = s.zeros(&[5000], DType::F32, CPU)?;
        let b = s.keep(a.add_scalar(1.0)?);
        std::mem::forget(a); // forgets a borrow of the arena, nothing else
        std::mem::forget(b);
        assert_eq!(allocated() - before.0, 2 * block(5000, DType::F32));
        Ok(())
    })?;
    assert_eq!(counters(), before);
    Ok(())
}

#[test]
fn free_returns_the_bytes_at_once() -> Result<()> {
    let _g = lock();
    let before = counters();
    scope(|s| -> Result<()> {
        let mut kept = 0;
        for i in 0..50 {
            let t = s.full(&[1000], i as f64, DType::F64, CPU)?;
            if i % 10 == 0 {
                kept += 1;
            } else {
                s.free(t);
            }
            assert_eq!(allocated() - before.0, kept * block(1000, DType::F64));
        }
        let st = s.stats();
        assert_eq!((st.created, st.freed_early, st.live), (50, 45, 5));
        // five kept, plus the one made before it is freed
        assert_eq!(st.peak_bytes, 6 * block(1000, DType::F64));
        Ok(())
    })?;
    assert_eq!(counters(), before);
    Ok(())
}

/// The seed's `total_acc += (predicted_labels.argmax(1) == labels).sum().item()`:
/// every temporary of the expression is freed by the end of the statement.
#[test]
fn temporaries_in_one_expression_are_freed_by_the_end_of_the_statement() -> Result<()> {
    let _g = lock();
    let before = counters();
    let (n, k) = (64usize, 10usize);
    // predictions as a transposed (non-contiguous) [n, k] view, labels broadcast along k
    let raw: Vec<f32> = (0..n * k)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) / 10.0)
        .collect();
    let pred = Tensor::from_slice(&raw, &[k, n], CPU)?.t()?; // pred[i][j] = raw[j * n + i]
    let lab: Vec<i64> = (0..n).map(|i| (i % k) as i64).collect();
    let labels = Tensor::from_slice(&lab, &[n], CPU)?;
    let base = allocated();
    let live = leak::live_tensors();
    memory::reset_peak_memory_stats(CPU);

    // The seed's expression, one statement, four temporaries.
    let hits: i64 = pred.argmax(1, false)?.eq(&labels)?.sum_all()?.item()?;

    // Every temporary is gone ...
    assert_eq!(allocated(), base);
    assert_eq!(leak::live_tensors(), live);
    // ... and there were temporaries: the i64 argmax [n] and the bool
    // compare [n] were alive together at some point.
    let peak = memory::max_memory_allocated(CPU) - base;
    assert!(
        peak >= block(n, DType::I64) + block(n, DType::Bool),
        "peak {peak}"
    );
    // Naive reference: argmax of each row of pred, compared with the labels.
    let expect = (0..n)
        .filter(|&i| {
            let row: Vec<f32> = (0..k).map(|j| raw[j * n + i]).collect();
            let am = (0..k).fold(0, |b, j| if row[j] > row[b] { j } else { b });
            am as i64 == lab[i]
        })
        .count() as i64;
    assert_eq!(hits, expect);
    drop((pred, labels));
    assert_eq!(counters(), before);
    Ok(())
}

#[test]
fn in_place_ops_on_scoped_tensors() -> Result<()> {
    let _g = lock();
    let before = counters();
    let out = scope(|s| -> Result<Tensor> {
        let mut a = s.arange(0.0, 6.0, 1.0, DType::F32, CPU)?;
        let b = s.keep(Tensor::from_slice(&[10.0f64, 20.0], &[2, 1], CPU)?);
        a.mul_scalar_(2.0)?;
        let mut m = s.keep(a.view(&[2, 3])?); // a view: writes reach `a`
        m.add_(&b)?; // broadcast [2, 1] f64 into [2, 3] f32
        assert_eq!(a.to_vec::<f32>()?, [10.0, 12.0, 14.0, 26.0, 28.0, 30.0]);
        let mut t = s.keep(m.t()?);
        t.relu_()?;
        Ok(s.move_out(m))
    })?;
    assert_eq!(out.shape(), &[2, 3]);
    assert_eq!(out.to_vec::<i64>()?, [10, 12, 14, 26, 28, 30]);
    drop(out);
    assert_eq!(counters(), before);
    Ok(())
}

#[test]
fn constructors_report_errors_and_count_nothing() {
    let _g = lock();
    let before = counters();
    scope(|s| {
        let e = s.from_slice(&[1.0f32, 2.0], &[3], CPU).unwrap_err();
        assert!(
            matches!(
                e,
                Error::ElementCount {
                    op: "from_slice",
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(e.to_string().contains("from_slice"));
        let e = s.arange(0.0, 1.0, 0.0, DType::F32, CPU).unwrap_err();
        assert!(
            matches!(e, Error::InvalidArgument { op: "arange", .. }),
            "{e:?}"
        );
        // The first CUDA ordinal this machine lacks (cuda:0 without a GPU).
        let absent = Device::Cuda(tensorscope::backend::cuda::device_count());
        let e = s.zeros(&[2], DType::F32, absent).unwrap_err();
        assert!(matches!(e, Error::DeviceUnavailable { .. }), "{e:?}");
        assert_eq!(s.stats(), Default::default());
        assert_eq!(leak::live_scoped_tensors(), 0);
    });
    assert_eq!(counters(), before);
}

#[test]
fn every_dtype_is_accounted() -> Result<()> {
    let _g = lock();
    let before = counters();
    let dts = [
        DType::F32,
        DType::F64,
        DType::F16,
        DType::BF16,
        DType::I64,
        DType::I32,
        DType::U8,
        DType::Bool,
    ];
    let (_, st) = scope_with_stats(|s| -> Result<()> {
        let mut expect = 0;
        for (i, &dt) in dts.iter().enumerate() {
            let n = 100 + 300 * i;
            let t = s.ones(&[n], dt, CPU)?;
            expect += block(n, dt);
            assert_eq!(t.to_vec::<f64>()?, vec![1.0; n]);
            assert_eq!(s.stats().live_bytes, expect);
            assert_eq!(allocated() - before.0, expect);
        }
        Ok(())
    });
    assert_eq!(st.freed_at_exit, dts.len());
    assert_eq!(counters(), before);
    Ok(())
}

#[test]
fn scopes_on_several_threads_are_independent() -> Result<()> {
    let _g = lock();
    let before = counters();
    let results: Vec<Result<(usize, f64)>> = std::thread::scope(|ts| {
        let hs: Vec<_> = (0..3)
            .map(|i| {
                ts.spawn(move || {
                    scope_with_stats(|s| -> Result<f64> {
                        let x = s.full(&[100], i as f64, DType::F64, CPU)?;
                        let y = s.keep(x.mul(&x)?);
                        y.narrow(0, 0, 1)?.item()
                    })
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                let (r, st) = h.join().unwrap();
                r.map(|v| (st.freed_at_exit, v))
            })
            .collect()
    });
    for (i, r) in results.into_iter().enumerate() {
        assert_eq!(r?, (2, (i * i) as f64));
    }
    assert_eq!(counters(), before);
    Ok(())
}

/// Byte accounting against a naive model over a long random sequence of
/// operations: new tensors, views, aliases, frees and moves out, in any order.
#[test]
fn live_and_peak_bytes_match_a_naive_model() -> Result<()> {
    let _g = lock();
    let before = counters();
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut next = move |n: usize| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        (rng % n as u64) as usize
    };
    let mut outside = Vec::new(); // moved-out tensors, kept alive for a while
    scope(|s| -> Result<()> {
        let mut slots = Vec::new(); // Option<Scoped>
        let mut model: Vec<Option<(usize, usize)>> = Vec::new(); // (storage_ptr, block bytes)
        let mut peak = 0usize;
        for step in 0..600 {
            let live: Vec<usize> = (0..slots.len()).filter(|&i| model[i].is_some()).collect();
            let op = if live.is_empty() { 0 } else { next(6) };
            match op {
                0 | 1 => {
                    let n = 1 + next(3000);
                    let t = s.zeros(&[n], DType::F32, CPU)?;
                    model.push(Some((t.storage_ptr(), round_size(t.storage_nbytes()))));
                    slots.push(Some(t));
                }
                2 | 3 => {
                    let i = live[next(live.len())];
                    let src: &Tensor = slots[i].as_ref().unwrap();
                    let v = if op == 2 {
                        src.narrow(0, 0, 1)?
                    } else {
                        src.alias()
                    };
                    let v = s.keep(v);
                    model.push(model[i]);
                    slots.push(Some(v));
                }
                4 => {
                    let i = live[next(live.len())];
                    s.free(slots[i].take().unwrap());
                    model[i] = None;
                }
                _ => {
                    let i = live[next(live.len())];
                    outside.push(s.move_out(slots[i].take().unwrap()));
                    model[i] = None;
                    if outside.len() > 5 {
                        outside.remove(0);
                    }
                }
            }
            let mut seen: Vec<(usize, usize)> = model.iter().flatten().copied().collect();
            seen.sort();
            seen.dedup();
            let expect: usize = seen.iter().map(|&(_, b)| b).sum();
            peak = peak.max(expect);
            let st = s.stats();
            assert_eq!(st.live_bytes, expect, "step {step}, op {op}");
            assert_eq!(st.peak_bytes, peak, "step {step}");
            assert_eq!(st.live, model.iter().flatten().count());
        }
        Ok(())
    })?;
    drop(outside);
    assert_eq!(counters(), before);
    Ok(())
}
