// A borrowed view outliving its base.
//
// `as_view` borrows `base`; the view cannot be used after `base` is gone.
use tensorscope::{DType, Device, Tensor};

fn main() {
    let view;
    {
        let base = Tensor::zeros(&[4, 4], DType::F32, Device::Cpu).unwrap();
        view = base.narrow_ref(0, 0, 2).unwrap();
    }
    println!("{:?}", view.shape());
}
