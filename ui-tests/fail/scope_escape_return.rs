// A scoped tensor returned from its scope.
//
// `scope` lends the closure a `&'s Scope<'s>` for a lifetime `'s` chosen
// inside the call (`for<'s>`). The closure's result type cannot name `'s`, so
// a `Scoped<'s>` (a borrow of the scope's arena, freed when `scope` returns)
// cannot be its result.
use tensorscope::{scope, DType, Device};

fn main() {
    let escaped = scope(|s| s.zeros(&[4], DType::F32, Device::Cpu).unwrap());
    println!("{:?}", escaped.shape());
}
