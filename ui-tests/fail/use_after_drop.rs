// Use after `drop`.
//
// `drop(x)` frees the tensor (its bytes go back to the allocator at once);
// the handle cannot be used afterwards. TorchSharp's `Dispose()` leaves a
// disposed handle around and fails only when it is used.
use tensorscope::{DType, Device, Tensor};

fn main() {
    let x = Tensor::zeros(&[4, 4], DType::F32, Device::Cpu).unwrap();
    drop(x);
    println!("{:?}", x.shape());
}
