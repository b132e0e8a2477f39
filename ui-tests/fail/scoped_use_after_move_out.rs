// Using a scoped handle after moving its tensor out of the scope.
//
// `move_out` consumes the `Scoped` handle and returns the owned `Tensor`; the
// scope no longer holds it, and neither does `x`.
use tensorscope::{scope, DType, Device};

fn main() {
    scope(|s| {
        let x = s.zeros(&[4], DType::F32, Device::Cpu).unwrap();
        let owned = s.move_out(x);
        println!("{:?} {:?}", owned.shape(), x.shape());
    });
}
