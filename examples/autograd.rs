//! Autograd with an owner: the seed's common mistakes, each with what
//! tensorscope does and the memory it measures, and the memory impact of
//! `no_grad` and `inference_mode` on the same forward pass.
//!
//! `cargo run --release --example autograd`

use tensorscope::autograd::{self, checkpoint};
use tensorscope::{memory, DType, Device, Tensor};

const DEV: Device = Device::Cpu;

fn kib(b: usize) -> String {
    memory::fmt_bytes(b)
}

/// A small MLP: 4 layers of 512, tanh, on a batch of 256.
struct Mlp {
    ws: Vec<Tensor>,
}

impl Mlp {
    fn new() -> tensorscope::Result<Mlp> {
        tensorscope::manual_seed(0);
        let ws = (0..4)
            .map(|_| {
                Tensor::randn(&[512, 512], DType::F32, DEV)?
                    .mul_scalar(0.04)?
                    .requires_grad_(true)
            })
            .collect::<tensorscope::Result<_>>()?;
        Ok(Mlp { ws })
    }
    fn forward(&self, x: &Tensor) -> tensorscope::Result<Tensor> {
        let mut h = x.alias();
        for w in &self.ws {
            h = h.matmul(w)?.tanh()?;
        }
        Ok(h)
    }
    fn loss(&self, x: &Tensor) -> tensorscope::Result<Tensor> {
        self.forward(x)?.square()?.mean_all()
    }
}

fn main() -> tensorscope::Result<()> {
    let model = Mlp::new()?;
    let x = Tensor::randn(&[256, 512], DType::F32, DEV)?;
    let base = memory::memory_allocated(DEV);
    println!("model + input: {}\n", kib(base));

    // Mistake 1 and 3: keeping `loss` (and with it the whole graph) per step.
    println!("Mistake: pushing loss handles into a Vec keeps every graph");
    let mut kept = Vec::new();
    for step in 1..=4 {
        kept.push(model.loss(&x)?);
        println!(
            "    after step {step}: {} above the model",
            kib(memory::memory_allocated(DEV) - base)
        );
    }
    drop(kept);
    println!(
        "    dropped the Vec: {} above the model (graphs freed at once)",
        kib(memory::memory_allocated(DEV) - base)
    );
    println!("Fix: push loss.item()");
    let mut values = Vec::new();
    for step in 1..=4 {
        values.push(model.loss(&x)?.item::<f32>()?);
        println!(
            "    after step {step}: {} above the model",
            kib(memory::memory_allocated(DEV) - base)
        );
    }

    // Mistake 2: "deleting before backward". In tensorscope the graph owns
    // what backward needs, so dropping your handles early is harmless.
    println!("\nMistake: deleting outputs before backward");
    let out = model.forward(&x)?;
    let loss = out.square()?.mean_all()?;
    drop(out); // PyTorch: an error or a silent bug; here the graph keeps what it needs
    println!(
        "    output dropped before backward: {} still held by the graph",
        kib(memory::memory_allocated(DEV) - base)
    );
    loss.backward()?;
    println!("    after backward: {} above the model (saved tensors released; what is left is the gradients)", kib(memory::memory_allocated(DEV) - base));
    drop(loss);
    let grads: usize = model
        .ws
        .iter()
        .map(|w| w.grad().map_or(0, |g| memory::round_size(g.nbytes())))
        .sum();
    println!(
        "    loss dropped: {} above the model = the 4 gradients ({})",
        kib(memory::memory_allocated(DEV) - base),
        kib(grads)
    );
    for w in &model.ws {
        w.zero_grad();
    }

    // Mistake 4: in-place during autograd is an error, not silent corruption.
    println!("\nMistake: in-place writes during autograd");
    let mut w0 = model.ws[0].alias();
    println!(
        "    w.add_scalar_(1.0) on a parameter: {}",
        w0.add_scalar_(1.0).unwrap_err()
    );
    let mut scale = Tensor::ones(&[512], DType::F32, DEV)?;
    let y = x.matmul(&model.ws[0])?.mul(&scale)?.sum_all()?;
    scale.mul_scalar_(2.0)?; // `scale` was saved by MulBackward
    println!(
        "    backward after changing a saved tensor: {}",
        y.backward().unwrap_err()
    );
    autograd::no_grad(|| w0.sub_scalar_(0.0).map(|_| ()))?;
    println!(
        "    the same update under no_grad (how optimizers work): ok, version {}",
        w0.version()
    );
    drop((y, w0, scale));

    // The seed's "memory impact comparison".
    println!("\nPeak memory of one forward pass, above the model:");
    for (name, run) in [
        (
            "normal",
            Box::new(|| model.forward(&x)) as Box<dyn Fn() -> tensorscope::Result<Tensor>>,
        ),
        (
            "no_grad",
            Box::new(|| autograd::no_grad(|| model.forward(&x))),
        ),
        (
            "inference_mode",
            Box::new(|| autograd::inference_mode(|| model.forward(&x))),
        ),
    ] {
        memory::reset_peak_memory_stats(DEV);
        let out = run()?;
        let peak = memory::max_memory_allocated(DEV) - base;
        let after = memory::memory_allocated(DEV) - base;
        println!(
            "    {name:<15} peak {:>10}   held while the output lives {:>10}",
            kib(peak),
            kib(after)
        );
        drop(out);
    }

    // Gradient checkpointing: a deeper net, in segments of 4 layers.
    println!("\nGradient checkpointing, a 32-layer 128-wide MLP, batch 1024, segments of 4:");
    let deep: Vec<Tensor> = (0..32)
        .map(|_| {
            Tensor::randn(&[128, 128], DType::F32, DEV)?
                .mul_scalar(0.08)?
                .requires_grad_(true)
        })
        .collect::<tensorscope::Result<_>>()?;
    let xd = Tensor::randn(&[1024, 128], DType::F32, DEV)?;
    let base = memory::memory_allocated(DEV);
    for ckpt in [false, true] {
        memory::reset_peak_memory_stats(DEV);
        let mut h = xd.alias();
        for seg in deep.chunks(4) {
            let seg: Vec<Tensor> = seg.iter().map(|w| w.alias()).collect();
            let f = move |xs: &[Tensor]| {
                let mut h = xs[0].alias();
                for w in &seg {
                    h = h.matmul(w)?.tanh()?;
                }
                Ok(h)
            };
            h = if ckpt {
                checkpoint(f, &[&h])?
            } else {
                f(std::slice::from_ref(&h))?
            };
        }
        let loss = h.square()?.mean_all()?;
        drop(h);
        loss.backward()?;
        drop(loss);
        println!(
            "    {:<13} peak {:>10} above parameters and input",
            if ckpt { "checkpointed" } else { "plain" },
            kib(memory::max_memory_allocated(DEV) - base)
        );
        for w in &deep {
            w.zero_grad();
        }
    }
    Ok(())
}
