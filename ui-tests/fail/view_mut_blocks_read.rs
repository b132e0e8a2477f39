// Reading a base while a mutable borrowed view of it is alive.
//
// `narrow_mut` borrows `base` mutably: while `cols` can write, nothing else
// may read `base` through this handle.
use tensorscope::{DType, Device, Tensor};

fn main() {
    let mut base = Tensor::zeros(&[4, 4], DType::F32, Device::Cpu).unwrap();
    let mut cols = base.narrow_mut(1, 0, 2).unwrap();
    let total = base.add_scalar(1.0).unwrap();
    cols.fill_(7.0).unwrap();
    println!("{:?}", total.shape());
}
