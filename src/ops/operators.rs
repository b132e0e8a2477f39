//! `std::ops` operators on tensors: `+`, `-`, `*`, `/` and unary `-`.
//!
//! **Every operator returns `Result<Tensor>`**, so an expression needs `?`
//! (or a `match`) before its value can be used:
//!
//! ```
//! use tensorscope::{DType, Device, Tensor};
//! let a = Tensor::ones(&[2, 3], DType::F32, Device::Cpu)?;
//! let b = Tensor::full(&[3], 2.0, DType::F32, Device::Cpu)?;
//! let c = (&a + &b)?;              // broadcasting, a fresh tensor
//! let d = ((&c * 0.5)? - &a)?;     // each step is fallible
//! let e = (-&d)?;
//! assert_eq!(e.to_vec::<f32>()?, vec![-0.5; 6]);
//! // Bad input is an Err, never a panic:
//! let bad = Tensor::ones(&[4], DType::F32, Device::Cpu)?;
//! assert!((&a + &bad).is_err());
//! # Ok::<(), tensorscope::Error>(())
//! ```
//!
//! Why `Result` and not `Tensor`: an operator cannot return an error any other
//! way, and a shape, dtype or device mismatch (or out-of-memory) must never
//! panic. The operators are exactly the methods [`Tensor::add`],
//! [`Tensor::sub`], [`Tensor::mul`], [`Tensor::div`] (and their `*_scalar`
//! forms) and [`Tensor::neg`]: same broadcasting, same type promotion, same
//! errors. They are implemented for every mix of `Tensor`/`&Tensor` operands
//! (an owned operand is consumed, as with any Rust operator) and for a tensor
//! with an `f64` scalar on either side.
//!
//! There is deliberately no `AddAssign` (`+=`) and friends: writing in place
//! is explicit in tensorscope (`a.add_(&b)?`), because it is visible to every
//! view of the storage and, once autograd exists, it can fail.

use crate::error::Result;
use crate::tensor::Tensor;
use std::ops::{Add, Div, Mul, Neg, Sub};

macro_rules! tensor_tensor {
    ($($trait:ident, $method:ident;)*) => {$(
        impl $trait<&Tensor> for &Tensor {
            type Output = Result<Tensor>;
            fn $method(self, rhs: &Tensor) -> Result<Tensor> {
                Tensor::$method(self, rhs)
            }
        }
        impl $trait<Tensor> for &Tensor {
            type Output = Result<Tensor>;
            fn $method(self, rhs: Tensor) -> Result<Tensor> {
                Tensor::$method(self, &rhs)
            }
        }
        impl $trait<&Tensor> for Tensor {
            type Output = Result<Tensor>;
            fn $method(self, rhs: &Tensor) -> Result<Tensor> {
                Tensor::$method(&self, rhs)
            }
        }
        impl $trait<Tensor> for Tensor {
            type Output = Result<Tensor>;
            fn $method(self, rhs: Tensor) -> Result<Tensor> {
                Tensor::$method(&self, &rhs)
            }
        }
    )*};
}

tensor_tensor! {
    Add, add;
    Sub, sub;
    Mul, mul;
    Div, div;
}

macro_rules! tensor_scalar {
    ($($trait:ident, $method:ident, $scalar:ident, $rev:expr;)*) => {$(
        impl $trait<f64> for &Tensor {
            type Output = Result<Tensor>;
            fn $method(self, rhs: f64) -> Result<Tensor> {
                self.$scalar(rhs)
            }
        }
        impl $trait<f64> for Tensor {
            type Output = Result<Tensor>;
            fn $method(self, rhs: f64) -> Result<Tensor> {
                self.$scalar(rhs)
            }
        }
        impl $trait<&Tensor> for f64 {
            type Output = Result<Tensor>;
            fn $method(self, rhs: &Tensor) -> Result<Tensor> {
                #[allow(clippy::redundant_closure_call)]
                ($rev)(self, rhs)
            }
        }
        impl $trait<Tensor> for f64 {
            type Output = Result<Tensor>;
            fn $method(self, rhs: Tensor) -> Result<Tensor> {
                #[allow(clippy::redundant_closure_call)]
                ($rev)(self, &rhs)
            }
        }
    )*};
}

tensor_scalar! {
    Add, add, add_scalar, |s: f64, t: &Tensor| t.add_scalar(s);
    Sub, sub, sub_scalar, |s: f64, t: &Tensor| t.rsub_scalar(s);
    Mul, mul, mul_scalar, |s: f64, t: &Tensor| t.mul_scalar(s);
    Div, div, div_scalar, |s: f64, t: &Tensor| t.rdiv_scalar(s);
}

impl Neg for &Tensor {
    type Output = Result<Tensor>;
    fn neg(self) -> Result<Tensor> {
        Tensor::neg(self)
    }
}

impl Neg for Tensor {
    type Output = Result<Tensor>;
    fn neg(self) -> Result<Tensor> {
        Tensor::neg(&self)
    }
}

#[cfg(test)]
mod tests {
    use crate::device::Device;
    use crate::dtype::DType;
    use crate::error::Error;
    use crate::tensor::Tensor;

    #[test]
    fn every_operand_mix() -> crate::error::Result<()> {
        let a = Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[3], Device::Cpu)?;
        let b = Tensor::from_slice(&[4.0f32, 5.0, 6.0], &[3], Device::Cpu)?;
        assert_eq!((&a + &b)?.to_vec::<f32>()?, vec![5.0, 7.0, 9.0]);
        assert_eq!((&a - b.alias())?.to_vec::<f32>()?, vec![-3.0; 3]);
        assert_eq!((a.alias() * &b)?.to_vec::<f32>()?, vec![4.0, 10.0, 18.0]);
        assert_eq!(
            (b.alias() / a.alias())?.to_vec::<f32>()?,
            vec![4.0, 2.5, 2.0]
        );
        assert_eq!((&a + 1.0)?.to_vec::<f32>()?, vec![2.0, 3.0, 4.0]);
        assert_eq!((10.0 - &a)?.to_vec::<f32>()?, vec![9.0, 8.0, 7.0]);
        assert_eq!((6.0 / a.alias())?.to_vec::<f32>()?, vec![6.0, 3.0, 2.0]);
        assert_eq!((2.0 * &a)?.to_vec::<f32>()?, vec![2.0, 4.0, 6.0]);
        assert_eq!((-a)?.to_vec::<f32>()?, vec![-1.0, -2.0, -3.0]);
        let i = Tensor::from_slice(&[1i64, 2, 4], &[3], Device::Cpu)?;
        let r = (1.0 / &i)?;
        assert_eq!(r.dtype(), DType::F32);
        assert_eq!(r.to_vec::<f32>()?, vec![1.0, 0.5, 0.25]);
        let r = (5.0 - &i)?;
        assert_eq!(r.dtype(), DType::I64);
        assert_eq!(r.to_vec::<i64>()?, vec![4, 3, 1]);
        let bad = Tensor::ones(&[2], DType::F32, Device::Cpu)?;
        assert!(matches!(
            &b + &bad,
            Err(Error::ShapeMismatch { op: "add", .. })
        ));
        Ok(())
    }
}
