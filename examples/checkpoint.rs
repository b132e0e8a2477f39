//! Loading a checkpoint without holding the weights twice (issue 48, item 1).
//!
//! Saves a 4-layer MLP (16 MiB of f32), then loads it three ways and
//! prints what each costs the CPU caching allocator and the mappings:
//! into an existing f32 model, into a bf16 model (converted on the way),
//! and as layers built over the file's bytes (`from_parts`, no copy).
//!
//! ```text
//! cargo run --release --example checkpoint
//! ```

use tensorscope::memory::reset_peak_memory_stats;
use tensorscope::memory::{mapped_memory, max_memory_allocated, memory_allocated};
use tensorscope::nn::{save_safetensors, Checkpoint, Linear, LoadOptions, Module, Sequential};
use tensorscope::{DType, Device, Result, Tensor};

const CPU: Device = Device::Cpu;
const WIDTH: usize = 1024;
const LAYERS: usize = 4;

fn mlp(dtype: DType) -> Result<Sequential> {
    let mut net = Sequential::new();
    for _ in 0..LAYERS {
        net.add(Linear::with_options(WIDTH, WIDTH, true, dtype, CPU)?);
    }
    Ok(net)
}

fn mib(b: usize) -> f64 {
    b as f64 / (1 << 20) as f64
}

fn main() -> Result<()> {
    let path = std::env::temp_dir().join("tensorscope_example_checkpoint.safetensors");
    let trained = mlp(DType::F32)?;
    save_safetensors(&trained, &path)?;
    let x = Tensor::randn(&[8, WIDTH], DType::F32, CPU)?;
    let want = tensorscope::autograd::no_grad(|| trained.forward(&x))?.to_vec::<f32>()?;
    drop(trained);

    let ckpt = Checkpoint::open(&path)?;
    println!(
        "checkpoint: {} tensors, {:.1} MiB in {}",
        ckpt.len(),
        mib(ckpt.nbytes()),
        path.display()
    );

    for dtype in [DType::F32, DType::BF16] {
        let mut model = mlp(dtype)?;
        let params = memory_allocated(CPU);
        reset_peak_memory_stats(CPU);
        let report = ckpt.load_into(&mut model, &LoadOptions::new())?;
        let peak = max_memory_allocated(CPU) - params;
        println!(
            "load_into a {dtype} model: {} tensors, allocator peak +{:.2} MiB over the {:.1} MiB live before (model, input)",
            report.loaded,
            mib(peak),
            mib(params)
        );
        assert_eq!(peak, 0, "the load copies from the file into the parameters");
        let got = tensorscope::autograd::no_grad(|| model.forward(&x.to_dtype(dtype)?))?;
        let err = got
            .to_dtype(DType::F32)?
            .to_vec::<f32>()?
            .iter()
            .zip(&want)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        println!("  output vs the saved model's: max |diff| {err:.2e}");
    }

    // Layers over the file: nothing allocated, the bytes mapped.
    let (alloc0, mapped0) = (memory_allocated(CPU), mapped_memory());
    let mut net = Sequential::new();
    for i in 0..LAYERS {
        let w = ckpt.get(&format!("{i}.weight"))?;
        let b = ckpt.get(&format!("{i}.bias"))?;
        net.add(Linear::from_parts(w, Some(b))?);
    }
    println!(
        "from_parts over the file: allocator +{:.2} MiB, mapped +{:.1} MiB",
        mib(memory_allocated(CPU) - alloc0),
        mib(mapped_memory() - mapped0)
    );
    let got = tensorscope::autograd::no_grad(|| net.forward(&x))?.to_vec::<f32>()?;
    assert_eq!(got, want, "the same weights, bit for bit");
    println!("  output vs the saved model's: identical");
    drop((net, ckpt));
    std::fs::remove_file(&path).ok();
    Ok(())
}
