// An in-place op on a base while a borrowed view of it is alive.
//
// `add_scalar_` takes `&mut self`; `row` still borrows `base` immutably, so
// the write would change the elements `row` is about to read.
use tensorscope::{DType, Device, Tensor};

fn main() {
    let mut base = Tensor::zeros(&[4, 4], DType::F32, Device::Cpu).unwrap();
    let row = base.select_ref(0, 0).unwrap();
    base.add_scalar_(1.0).unwrap();
    println!("{:?}", row.to_vec::<f32>());
}
