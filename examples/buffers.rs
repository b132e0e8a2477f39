//! Pre-allocated buffers and the caching allocator: the seed's "Pattern 2"
//! (reuse an output buffer), "pre-allocated buffers for matmul" and
//! "index_select with a preallocated buffer", measured with the allocator's
//! counters. Also the OOM path: a limit, a clean error, and recovery.
//!
//! `cargo run --release --example buffers`

use tensorscope::memory::{self, MemoryLimit};
use tensorscope::{DType, Device, Tensor};

const DEV: Device = Device::Cpu;

fn allocations() -> u64 {
    memory::memory_stats(DEV).allocation.all.allocated
}

fn main() -> tensorscope::Result<()> {
    let a = Tensor::randn(&[256, 256], DType::F32, DEV)?;
    let b = Tensor::randn(&[256, 256], DType::F32, DEV)?;
    let idx = Tensor::from_slice(&[3i64, 1, 4, 1, 5], &[5], DEV)?;

    println!("1000 iterations of matmul, add, mul and index_select:");
    // Without buffers: every op returns a fresh tensor.
    let (allocs0, sys0) = (allocations(), memory::memory_stats(DEV).num_sys_alloc);
    for _ in 0..1000 {
        let c = a.matmul(&b)?;
        let d = c.add(&a)?.mul(&b)?;
        let _rows = d.index_select(0, &idx)?;
    }
    println!(
        "    fresh results:  {:>5} blocks handed out, {} new system allocations (all served from the cache)",
        allocations() - allocs0,
        memory::memory_stats(DEV).num_sys_alloc - sys0
    );

    // With buffers: the `_out` forms write into tensors we already own.
    let mut c = Tensor::empty(&[256, 256], DType::F32, DEV)?;
    let mut d = Tensor::empty(&[256, 256], DType::F32, DEV)?;
    let mut e = Tensor::empty(&[256, 256], DType::F32, DEV)?;
    let mut rows = Tensor::empty(&[5, 256], DType::F32, DEV)?;
    let allocs0 = allocations();
    for _ in 0..1000 {
        a.matmul_out(&b, &mut c)?;
        c.add_out(&a, &mut d)?;
        d.mul_out(&b, &mut e)?;
        e.index_select_out(0, &idx, &mut rows)?;
    }
    println!(
        "    `_out` buffers: {:>5} blocks handed out",
        allocations() - allocs0
    );

    // In place: the same storage, a new version each write.
    let v0 = e.version();
    for _ in 0..10 {
        e.mul_scalar_(0.5)?.add_(&a)?;
    }
    println!(
        "    20 in-place writes: {} blocks, version {} -> {}",
        allocations() - allocs0,
        v0,
        e.version()
    );

    // A limit, an OOM, and recovery.
    println!("\nA 64 MiB limit on the CPU allocator:");
    memory::set_memory_limit(DEV, MemoryLimit::Bytes(64 << 20))?;
    match Tensor::zeros(&[100 << 20], DType::F32, DEV) {
        Ok(_) => println!("    unexpectedly allocated 400 MiB"),
        Err(e) => println!("    {e}"),
    }
    let small = Tensor::zeros(&[1 << 20], DType::F32, DEV)?;
    println!(
        "    and the process goes on: a 4 MiB tensor is fine ({} allocated)",
        memory::fmt_bytes(memory::memory_allocated(DEV))
    );
    let s = memory::memory_stats(DEV);
    println!(
        "    OOMs counted: {}, release-and-retry attempts: {}",
        s.num_ooms, s.num_alloc_retries
    );
    drop(small);
    memory::set_memory_limit(DEV, MemoryLimit::Unlimited)?;
    Ok(())
}
