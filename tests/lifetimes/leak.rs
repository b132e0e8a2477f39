//! The leak-check API: live tensors and bytes (global and per device),
//! snapshots, `LeakCheck`, `check_leaks`, `assert_no_leaks`, and the count of
//! tensors held by open scopes. The counters are global, so every test takes
//! `LOCK`.

use std::panic::{catch_unwind, AssertUnwindSafe};
use tensorscope::leak::{self, LeakCheck, LeakSnapshot};
use tensorscope::memory::{self, round_size};
use tensorscope::{scope, DType, Device, Result, Tensor};

fn lock() -> crate::common::Guard {
    crate::common::serial()
}

const CPU: Device = Device::Cpu;

#[test]
fn live_tensor_counts_follow_handles() -> Result<()> {
    let _g = lock();
    let n = leak::live_tensors();
    let n_cpu = leak::live_tensors_on(CPU);
    let x = Tensor::zeros(&[10, 10], DType::F32, CPU)?;
    assert_eq!(leak::live_tensors(), n + 1);
    assert_eq!(leak::live_tensors_on(CPU), n_cpu + 1);
    let a = x.alias(); // the same tensor: not counted again
    assert_eq!(leak::live_tensors(), n + 1);
    let v = x.t()?; // a view is a tensor of its own
    let d = x.detach();
    assert_eq!(leak::live_tensors(), n + 3);
    let r = v.add(&d)?.relu()?; // the intermediate `add` result is gone already
    assert_eq!(leak::live_tensors(), n + 4);
    drop((x, v));
    assert_eq!(leak::live_tensors(), n + 3); // `a` still holds x's tensor
    drop((a, d, r));
    assert_eq!(leak::live_tensors(), n);
    assert_eq!(leak::live_tensors_on(CPU), n_cpu);
    // No CUDA in this build: nothing lives there.
    assert_eq!(leak::live_tensors_on(Device::Cuda(0)), 0);
    assert_eq!(leak::live_bytes_on(Device::Cuda(0)), 0);
    Ok(())
}

#[test]
fn live_bytes_are_the_allocators_bytes() -> Result<()> {
    let _g = lock();
    let b = leak::live_bytes_on(CPU);
    assert_eq!(b, memory::memory_allocated(CPU));
    let x = Tensor::ones(&[333], DType::F64, CPU)?;
    let y = Tensor::ones(&[5], DType::U8, CPU)?;
    let _v = x.narrow(0, 1, 3)?; // no bytes of its own
    assert_eq!(
        leak::live_bytes_on(CPU) - b,
        round_size(333 * 8) + round_size(5)
    );
    // cached bytes are not live: freeing returns them to the cache, not the system
    drop((x, y, _v));
    assert_eq!(leak::live_bytes_on(CPU), b);
    assert!(memory::memory_reserved(CPU) >= round_size(333 * 8));
    assert_eq!(leak::live_bytes(), leak::live_bytes_on(CPU));
    Ok(())
}

#[test]
fn snapshots_list_the_cpu_and_add_up() -> Result<()> {
    let _g = lock();
    let s0 = leak::snapshot();
    assert_eq!(s0.devices[0].device, CPU);
    assert_eq!(s0.tensors(), leak::live_tensors());
    assert_eq!(s0.bytes(), leak::live_bytes());
    let t = Tensor::zeros(&[1024], DType::F32, CPU)?;
    let s1 = LeakSnapshot::now();
    assert_eq!(s1.on(CPU).tensors, s0.on(CPU).tensors + 1);
    assert_eq!(s1.on(CPU).bytes, s0.on(CPU).bytes + 4096);
    let none = s1.on(Device::Cuda(3));
    assert_eq!((none.tensors, none.bytes), (0, 0));
    drop(t);
    assert_eq!(LeakSnapshot::now(), s0);
    Ok(())
}

#[test]
fn leak_check_reports_exact_growth() -> Result<()> {
    let _g = lock();
    let check = LeakCheck::begin();
    assert!(check.finish().is_ok());
    let kept = vec![
        Tensor::zeros(&[1000], DType::F32, CPU)?,
        Tensor::zeros(&[10], DType::I64, CPU)?,
    ];
    let _view = kept[0].narrow(0, 0, 10)?;
    let report = check.finish().unwrap_err();
    let expect_bytes = (round_size(4000) + round_size(80)) as i64;
    assert_eq!(report.leaks(), vec![(CPU, 3, expect_bytes)]);
    let msg = report.to_string();
    assert!(msg.starts_with("leak check:"), "{msg}");
    assert!(msg.contains("cpu: +3 tensor(s)"), "{msg}");
    assert!(msg.contains(&format!("+{expect_bytes} bytes")), "{msg}");
    assert_eq!(report.before, *check.before());
    drop((kept, _view));
    assert!(check.finish().is_ok());
    check.assert_clean();
    Ok(())
}

#[test]
fn freeing_older_tensors_is_not_a_leak() -> Result<()> {
    let _g = lock();
    let old = Tensor::ones(&[100], DType::F32, CPU)?;
    let check = LeakCheck::begin();
    drop(old);
    let _new = Tensor::ones(&[10], DType::F32, CPU)?; // fewer bytes and the same count
    assert!(check.finish().is_ok());
    Ok(())
}

#[test]
fn assert_no_leaks_passes_clean_blocks_and_panics_on_leaks() -> Result<()> {
    let _g = lock();
    let v = leak::assert_no_leaks(|| -> Result<f64> {
        let x = Tensor::full(&[8, 8], 2.0, DType::F32, CPU)?;
        let y = x.mul(&x)?.t()?.add_scalar(1.0)?;
        y.narrow(0, 0, 1)?.narrow(1, 0, 1)?.item()
    })?;
    assert_eq!(v, 5.0);

    let mut stash = Vec::new();
    let r = catch_unwind(AssertUnwindSafe(|| {
        leak::assert_no_leaks(|| {
            stash.push(Tensor::zeros(&[256], DType::F32, CPU).unwrap());
        })
    }));
    let payload = r.unwrap_err();
    let msg = payload
        .downcast_ref::<String>()
        .expect("a formatted message");
    assert!(msg.contains("cpu: +1 tensor(s)"), "{msg}");
    assert!(msg.contains("+1024 bytes"), "{msg}");
    drop(stash);

    let (out, outcome) = leak::check_leaks(|| Tensor::zeros(&[3], DType::F32, CPU));
    let report = outcome.unwrap_err(); // the returned tensor is still alive
    assert_eq!(report.leaks()[0].1, 1);
    drop(out);
    Ok(())
}

#[test]
fn open_scopes_are_counted() -> Result<()> {
    let _g = lock();
    assert_eq!(leak::live_scoped_tensors(), 0);
    scope(|outer| -> Result<()> {
        let _a = outer.zeros(&[4], DType::F32, CPU)?;
        let b = outer.zeros(&[4], DType::F32, CPU)?;
        assert_eq!(leak::live_scoped_tensors(), 2);
        scope(|inner| -> Result<()> {
            let _c = inner.keep(b.add_scalar(1.0)?);
            let d = inner.ones(&[4], DType::F32, CPU)?;
            assert_eq!(leak::live_scoped_tensors(), 4);
            assert_eq!(leak::snapshot().scoped, 4);
            let _d = inner.move_to(d, outer); // still held by a scope
            assert_eq!(leak::live_scoped_tensors(), 4);
            Ok(())
        })?;
        assert_eq!(leak::live_scoped_tensors(), 3);
        outer.free(b);
        assert_eq!(leak::live_scoped_tensors(), 2);
        let r = catch_unwind(AssertUnwindSafe(|| {
            scope(|s| {
                let _e = s.zeros(&[4], DType::F32, CPU).unwrap();
                assert_eq!(leak::live_scoped_tensors(), 3);
                panic!("leave");
            })
        }));
        assert!(r.is_err());
        assert_eq!(leak::live_scoped_tensors(), 2);
        Ok(())
    })?;
    assert_eq!(leak::live_scoped_tensors(), 0);
    Ok(())
}

#[test]
fn tensors_made_on_other_threads_are_counted() -> Result<()> {
    let _g = lock();
    let check = LeakCheck::begin();
    let t = std::thread::spawn(|| Tensor::ones(&[64], DType::F64, CPU))
        .join()
        .unwrap()?;
    let report = check.finish().unwrap_err();
    assert_eq!(report.leaks(), vec![(CPU, 1, round_size(64 * 8) as i64)]);
    std::thread::spawn(move || drop(t)).join().unwrap();
    check.assert_clean();
    Ok(())
}
