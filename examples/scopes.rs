//! Scopes, chapter by chapter: live tensors and bytes before, inside and
//! after a scope; moving results out; one scope per loop iteration; the
//! `Err` and panic exits; `mem::forget`; the temporaries of one expression;
//! and the slice that keeps a whole storage alive.
//!
//! Run it with `cargo run --release --example scopes`.

use std::panic::{catch_unwind, AssertUnwindSafe};
use tensorscope::memory::fmt_bytes;
use tensorscope::{leak, scope, scope_with_stats, DType, Device, Result, ScopeStats, Tensor};

const CPU: Device = Device::Cpu;

fn show(label: &str) {
    println!(
        "    [{label:<44}] live tensors {:>3}   live bytes {:>10}   held by scopes {:>2}",
        leak::live_tensors(),
        fmt_bytes(leak::live_bytes()),
        leak::live_scoped_tensors()
    );
}

fn stats(label: &str, st: &ScopeStats) {
    println!(
        "    {label}: created {}, adopted {}, moved out {}, freed early {}, freed at exit {}, peak {}",
        st.created,
        st.adopted,
        st.moved_out,
        st.freed_early,
        st.freed_at_exit,
        fmt_bytes(st.peak_bytes)
    );
}

fn main() -> Result<()> {
    tensorscope::manual_seed(7); // the same figures on every run
    println!("1. One scope: everything made inside is freed at its end, except what is moved out");
    let input = Tensor::randn(&[256, 512], DType::F32, CPU)?;
    let weight = Tensor::randn(&[512], DType::F32, CPU)?;
    show("before the scope (input, weight)");
    let (out, st) = scope_with_stats(|s| -> Result<Tensor> {
        let h = s.keep(input.mul(&weight)?); // [256, 512], broadcast
        show("inside: h = input * weight");
        let a = s.keep(h.relu()?);
        let b = s.keep(a.add_scalar(1.0)?.log()?); // the add_scalar temporary is already gone
        show("inside: a = relu(h), b = log(a + 1)");
        let y = s.keep(b.narrow(1, 0, 16)?.mul_scalar(0.5)?);
        show("inside: y = 0.5 * b[:, :16]");
        stats("scope so far", &s.stats());
        Ok(s.move_out(y))
    });
    let out = out?;
    show("after: only `out` was added");
    stats("scope at exit", &st);
    println!("    out: {:?}", out);
    drop(out);
    show("after drop(out)");

    println!();
    println!("2. One scope per iteration, results moved to the enclosing scope");
    let (sum, st) = scope_with_stats(|outer| -> Result<f64> {
        let mut results = Vec::new();
        for i in 0..4 {
            let (r, inner) = scope_with_stats(|s| -> Result<()> {
                let batch = s.full(&[1024, 256], i as f64, DType::F32, CPU)?;
                let act = s.keep(batch.mul(&batch)?.sqrt()?);
                // a copy of one element: a view (even `contiguous()` of it) would keep all of `act`
                let r = s.keep(act.narrow(0, 0, 1)?.narrow(1, 0, 1)?.deep_clone()?);
                results.push(s.move_to(r, outer));
                Ok(())
            });
            r?;
            if i == 0 {
                stats("inner scope 0 at exit", &inner);
            }
            show(&format!("after inner scope {i}"));
        }
        let mut total = 0.0;
        for r in &results {
            total += r.item::<f64>()?;
        }
        Ok(total)
    });
    stats("outer scope at exit", &st);
    println!("    sum of the kept results: {}", sum?);
    show("after the outer scope");

    println!();
    println!("3. Leaving by `?` and by panic frees the same way");
    let r: Result<()> = scope(|s| {
        let a = s.zeros(&[1000, 1000], DType::F32, CPU)?;
        let b = s.zeros(&[999], DType::F32, CPU)?;
        show("inside, before the failing op");
        a.add(&b)?;
        Ok(())
    });
    println!("    the scope returned: {}", r.unwrap_err());
    show("after the Err exit");
    let prev = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let r = catch_unwind(AssertUnwindSafe(|| {
        scope(|s| {
            let _a = s.zeros(&[1000, 1000], DType::F32, CPU).unwrap();
            show("inside, before the panic");
            panic!("boom");
        })
    }));
    std::panic::set_hook(prev);
    println!("    caught a panic: {}", r.is_err());
    show("after the panic exit");

    println!();
    println!("4. mem::forget of a scoped handle forgets a borrow, not the tensor");
    scope(|s| -> Result<()> {
        let t = s.zeros(&[1 << 20], DType::F32, CPU)?;
        #[allow(clippy::forget_non_drop)] // clippy agrees: the same as dropping the handle
        std::mem::forget(t);
        show("inside, after mem::forget");
        Ok(())
    })?;
    show("after the scope");

    println!();
    println!("5. The temporaries of one expression die with the statement");
    let pred = Tensor::randn(&[512, 10], DType::F32, CPU)?;
    let labels = Tensor::ones(&[512, 1], DType::F32, CPU)?;
    show("before the expression");
    tensorscope::memory::reset_peak_memory_stats(CPU);
    let base = leak::live_bytes();
    // with reductions: pred.argmax(1)?.eq(&labels)?.sum()?.item()
    let v: f64 = pred
        .gt_scalar(0.0)?
        .to_dtype(DType::F32)?
        .eq(&labels)?
        .to_dtype(DType::F32)?
        .narrow(0, 0, 1)?
        .narrow(1, 0, 1)?
        .item()?;
    let peak = tensorscope::memory::max_memory_allocated(CPU) - base;
    println!(
        "    value {v}; the temporaries peaked at {} above the start",
        fmt_bytes(peak)
    );
    show("after the statement");
    drop((pred, labels));

    println!();
    println!("6. A slice keeps the whole storage alive; a borrowed view cannot, a copy does not");
    drop((input, weight));
    show("start");
    let x = Tensor::randn(&[1000, 1000], DType::F32, CPU)?;
    let row = x.select(0, 0)?; // an owned view
    drop(x);
    show("owned row of a 1000x1000, base dropped");
    drop(row);
    let x = Tensor::randn(&[1000, 1000], DType::F32, CPU)?;
    let row = x.select_ref(0, 0)?.deep_clone()?; // `drop(x)` with a live borrowed view does not compile
    drop(x);
    show("copied row, base dropped");
    drop(row);
    show("end");
    Ok(())
}
