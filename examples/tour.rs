//! A tour of tensorscope: a tensor's life, views against copies, in-place
//! aliasing, and the memory statistics that prove each point.
//!
//! Run with `cargo run --release --example tour`. It uses CUDA device 0 when
//! a GPU is present (the `cuda` feature is a default) and the CPU otherwise.

use tensorscope::{memory, DType, Device, Tensor};

#[path = "digits.rs"]
mod digits;

fn mib(b: usize) -> String {
    memory::fmt_bytes(b)
}

fn show(dev: Device, label: &str) {
    println!(
        "    [{label:<34}] allocated {:>10}   reserved {:>10}",
        mib(memory::memory_allocated(dev)),
        mib(memory::memory_reserved(dev))
    );
}

fn main() -> tensorscope::Result<()> {
    let dev = Device::cuda_if_available();
    println!("tensorscope tour on {dev}\n");

    // 1. A tensor's life: bytes come from the caching allocator and go back
    //    the moment the last handle is dropped. No GC, no `using`, no `del`.
    println!("1. A tensor's life");
    show(dev, "start");
    let a = Tensor::randn(&[1024, 1024], DType::F32, dev)?; // 4 MiB
    show(dev, "after randn 1024x1024 f32");
    drop(a);
    show(dev, "after drop: back to the start");
    let stats = memory::memory_stats(dev);
    println!(
        "    the segment it came from stays cached for reuse: {} system allocation(s) so far",
        stats.num_sys_alloc
    );
    let b = Tensor::zeros(&[1024, 1024], DType::F32, dev)?;
    println!(
        "    a new tensor of the same size reuses it: {} system allocation(s)",
        memory::memory_stats(dev).num_sys_alloc
    );
    drop(b);
    memory::empty_cache(dev);
    show(dev, "after empty_cache");

    // 2. Views share storage; copies get their own.
    println!("\n2. Views against copies");
    let x = Tensor::arange(0.0, 12.0, 1.0, DType::F32, dev)?.view(&[3, 4])?;
    let before = memory::memory_allocated(dev);
    let views = [
        ("view(4, 3)", x.view(&[4, 3])?),
        ("transpose(0, 1)", x.transpose(0, 1)?),
        ("narrow(1, 1, 2)", x.narrow(1, 1, 2)?),
        ("slice(1, 0, 4, 2)", x.slice(1, 0, 4, 2)?),
        ("select(0, 2)", x.select(0, 2)?),
        ("unsqueeze(0)", x.unsqueeze(0)?),
        ("expand(2, 3, 4)", x.unsqueeze(0)?.expand(&[2, 3, 4])?),
        ("contiguous() (already)", x.contiguous()?),
    ];
    for (name, v) in &views {
        println!(
            "    {name:<24} shares storage: {:<5} shape {:?} strides {:?} offset {}",
            x.shares_storage(v),
            v.shape(),
            v.strides(),
            v.storage_offset()
        );
    }
    println!(
        "    bytes allocated by all those views: {}",
        memory::memory_allocated(dev) - before
    );
    drop(views);
    let before = memory::memory_allocated(dev);
    let t = x.t()?;
    let copies = [
        ("deep_clone()", x.deep_clone()?),
        ("t().contiguous()", t.contiguous()?),
        ("t().reshape(12)", t.reshape(&[12])?),
        ("to_dtype(F64)", x.to_dtype(DType::F64)?),
    ];
    for (name, c) in &copies {
        println!(
            "    {name:<24} shares storage: {:<5} bytes {}",
            x.shares_storage(c),
            c.storage_nbytes()
        );
    }
    println!(
        "    bytes allocated by the copies: {} (each rounded to the 512-byte block size)",
        memory::memory_allocated(dev) - before
    );
    drop(copies);

    // 3. In-place writes through a view change the base, as in PyTorch.
    println!("\n3. In-place aliasing");
    let mut base = Tensor::zeros(&[2, 4], DType::F32, dev)?;
    let before = memory::memory_allocated(dev);
    {
        let mut row = base.select(0, 1)?;
        row.add_scalar_(5.0)?;
        let mut col = base.narrow(1, 0, 1)?;
        col.fill_(-1.0)?;
    }
    base.mul_scalar_(2.0)?;
    println!(
        "    base after row.add_(5), col.fill_(-1), base.mul_(2): {:?}",
        base.to_vec::<f32>()?
    );
    println!(
        "    version counter (bumped by each in-place write): {}",
        base.version()
    );
    println!(
        "    bytes allocated by the in-place ops: {}",
        memory::memory_allocated(dev) - before
    );

    // 4. The statistics.
    drop((x, t, base));
    println!("\n4. Memory statistics");
    show(dev, "everything dropped");
    println!("{}", memory::memory_summary(dev));

    // 5. A real task: the digits MLP (examples/digits.rs), trained with Adam.
    println!("\n5. A real task: an MLP on the UCI handwritten digits");
    let before = memory::memory_allocated(dev);
    let acc = digits::run()?;
    println!(
        "    every tensor of the run is gone again: {} allocated on {dev} before, {} after (accuracy {:.2}%)",
        mib(before),
        mib(memory::memory_allocated(dev)),
        100.0 * acc
    );
    Ok(())
}
