// `Tensor` has no implicit `clone()`.
//
// Which copy is wanted must be said: `alias()` (same tensor), `detach()`
// (same storage, new tensor) or `deep_clone()` (independent bytes).
use tensorscope::{DType, Device, Tensor};

fn main() {
    let a = Tensor::ones(&[4], DType::F32, Device::Cpu).unwrap();
    let b = a.clone();
    println!("{:?}", b.shape());
}
