//! The CNN of `examples/cnn.rs` (issue 17 item 8), shared with
//! `benches/e2e.rs`'s `cnn_train_step` row so that the benchmark times the
//! example's own model: three 3x3 convolutions (`same` padding), two 2x2
//! max-pools and a linear layer over 8x8 one-channel digits.

use tensorscope::nn::{Conv2d, Flatten, Linear, MaxPool2d, Module, ReLU, Sequential};
use tensorscope::{ConvOptions, Device, Padding, PoolOptions};

/// The network on `dev`: 1 -> 16 -> 32 channels at 8x8, pool, 32 at 4x4,
/// pool, then 128 features to 10 classes.
pub fn model(dev: Device) -> tensorscope::Result<Sequential> {
    let same = ConvOptions {
        padding: Padding::Same,
        ..ConvOptions::default()
    };
    let pool = MaxPool2d {
        kernel: [2, 2],
        options: PoolOptions::default(),
    };
    let mut net = Sequential::new();
    net.add_named("conv1", Conv2d::new(1, 16, [3, 3], same)?)?
        .add(ReLU)
        .add_named("conv2", Conv2d::new(16, 32, [3, 3], same)?)?
        .add(ReLU)
        .add(pool) // 8x8 -> 4x4
        .add_named("conv3", Conv2d::new(32, 32, [3, 3], same)?)?
        .add(ReLU)
        .add(pool) // 4x4 -> 2x2
        .add(Flatten::default())
        .add_named("fc", Linear::new(32 * 2 * 2, 10)?)?;
    net.to_device(dev)?;
    Ok(net)
}
