// An implicit copy of a handle: `let b = a;` then use `a`.
//
// `Tensor` is neither `Copy` nor `Clone`: `let b = a;` moves the one handle.
// A second handle is made on purpose: `a.alias()`, a view, or `a.deep_clone()`.
use tensorscope::{DType, Device, Tensor};

fn main() {
    let a = Tensor::ones(&[4], DType::F32, Device::Cpu).unwrap();
    let b = a;
    println!("{:?} {:?}", b.shape(), a.relu());
}
