//! Elementwise activations: `ReLU`, `GELU` (exact, erf form), `Sigmoid`, `Tanh`.
//!
//! They have no parameters, preserve the shape and can work in place: given
//! an owned input (see [`Sequential`](super::Sequential)) that is the only
//! handle to its storage and that no graph needs, they overwrite it
//! (`relu_`, ...) and allocate nothing; otherwise they allocate.

use super::{donation_verdict, Module, Verdict};
use crate::error::Result;
use crate::tensor::Tensor;

macro_rules! activation {
    ($(#[$doc:meta])* $name:ident, $op:ident, $op_:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, Default)]
        pub struct $name;

        impl Module for $name {
            fn forward(&self, x: &Tensor) -> Result<Tensor> {
                x.$op()
            }

            fn forward_owned(&self, mut x: Tensor) -> Result<Tensor> {
                if donation_verdict(&x) == Verdict::Taken {
                    x.$op_()?;
                    Ok(x)
                } else {
                    self.forward(&x)
                }
            }

            fn can_work_in_place(&self) -> bool {
                true
            }

            fn named_parameters(&self) -> Vec<(String, &Tensor)> {
                Vec::new()
            }

            fn named_parameters_mut(&mut self) -> Vec<(String, &mut Tensor)> {
                Vec::new()
            }
        }
    };
}

activation!(
    /// `max(x, 0)`.
    ReLU, relu, relu_
);
activation!(
    /// `x * Φ(x) = x/2 * (1 + erf(x / sqrt(2)))` (PyTorch's default, exact GELU).
    GELU, gelu, gelu_
);
activation!(
    /// `1 / (1 + exp(-x))`.
    Sigmoid, sigmoid, sigmoid_
);
activation!(
    /// `tanh(x)`.
    Tanh, tanh, tanh_
);
