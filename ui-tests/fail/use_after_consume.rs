// Use after a move into an op that consumes its input.
//
// `into_contiguous(self)` takes the handle by value (it may hand the same
// tensor back, or copy it and free the original), so `x` is gone.
use tensorscope::{DType, Device, Tensor};

fn main() {
    let x = Tensor::zeros(&[4, 4], DType::F32, Device::Cpu).unwrap();
    let y = x.into_contiguous().unwrap();
    println!("{:?} {:?}", y.shape(), x.shape());
}
