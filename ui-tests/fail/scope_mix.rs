// Two scopes' tensors mixed where the design forbids it: a tensor of one
// scope moved out through another scope.
//
// Even when `outer` is known to outlive `inner` (`'o: 'i`), a `Scoped<'o>` is
// not a `Scoped<'i>`: the brand is invariant, so each scope accepts only its
// own handles. With a covariant brand `'o` would shrink to `'i` and this would
// compile, and `inner` would "move out" a tensor it never held. (Written as a
// function so the mismatch is reported once; the same code inside nested
// `scope` closures is refused too.)
use tensorscope::{Scope, Scoped, Tensor};

pub fn finish<'o: 'i, 'i>(inner: &'i Scope<'i>, x: Scoped<'o>) -> Tensor {
    inner.move_out(x)
}

fn main() {}
