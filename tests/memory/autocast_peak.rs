//! Issue 49 item 5: under a bf16 autocast region the activations saved
//! for backward are bf16, so a training step of the GUIDE's GPT
//! (`examples/models/gpt.rs`, as `examples/amp.rs` trains it: 16 windows of
//! 128 tokens) peaks at no more than 0.6 times the f32 step, measured by
//! the allocator over the step.

#[path = "../../examples/models/gpt.rs"]
#[allow(dead_code)]
mod gpt;

use gpt::{corpus, Gpt, SEQ};
use tensorscope::autocast::autocast_guard;
use tensorscope::nn::{cross_entropy, Module};
use tensorscope::optim::{Adam, AdamConfig, Optimizer};
use tensorscope::{memory, DType, Device, Result, Tensor};

const BATCH: usize = 16;

/// The peak over its start of the second training step (the first makes
/// Adam's state), under a region of `region` when given.
fn step_peak(region: Option<DType>) -> Result<usize> {
    let dev = Device::Cpu;
    let (ids, chars) = corpus();
    let vocab = chars.len();
    tensorscope::manual_seed(1);
    let mut model = Gpt::new(vocab, dev)?;
    let mut opt = Adam::new(AdamConfig::default())?;
    let x = Tensor::from_slice(&ids[..BATCH * SEQ], &[BATCH, SEQ], dev)?;
    let y = Tensor::from_slice(&ids[1..BATCH * SEQ + 1], &[BATCH * SEQ], dev)?;
    let mut peak = 0;
    for _ in 0..2 {
        let (r, m) = memory::measure(dev, || -> Result<()> {
            opt.zero_grad(&model);
            let loss = {
                let _ac = region
                    .map(|dt| autocast_guard(dev.device_type(), dt))
                    .transpose()?;
                cross_entropy(&model.forward(&x)?.reshape(&[-1, vocab as isize])?, &y)?
            };
            loss.backward()?;
            opt.step(&mut model)
        })?;
        r?;
        peak = m.peak_delta;
    }
    Ok(peak)
}

#[test]
fn a_bf16_autocast_step_peaks_at_most_0_6_of_the_f32_step() {
    let _g = crate::common::serial();
    let f32_peak = step_peak(None).unwrap();
    let bf16_peak = step_peak(Some(DType::BF16)).unwrap();
    let ratio = bf16_peak as f64 / f32_peak as f64;
    eprintln!("peak memory: f32 {f32_peak} B, bf16 autocast {bf16_peak} B ({ratio:.3}x)");
    assert!(
        ratio <= 0.6,
        "bf16 autocast step {bf16_peak} B vs f32 {f32_peak} B: {ratio:.3}x"
    );
}
