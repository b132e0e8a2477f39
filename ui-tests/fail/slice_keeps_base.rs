// Dropping a base while a borrowed slice of it is alive.
//
// With an owned view (`base.narrow(..)`) this compiles and the one row keeps
// all of `base`'s storage alive. A borrowed view makes the compiler say so:
// copy the row (`deep_clone`) if only the row must survive.
use tensorscope::{DType, Device, Tensor};

fn main() {
    let base = Tensor::zeros(&[1000, 1000], DType::F32, Device::Cpu).unwrap();
    let row = base.select_ref(0, 0).unwrap();
    drop(base);
    println!("{:?}", row.shape());
}
