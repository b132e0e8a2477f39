//! Elementwise ops: binary (with broadcasting and PyTorch's type promotion),
//! scalar forms, comparisons, unary ops, `where`, their in-place forms
//! (`&mut self`) and their `out` forms (which allocate nothing).
//!
//! **Promotion**: two tensor operands compute in `DType::promote` of their
//! dtypes; true division and float-only unary ops on integers compute in f32;
//! an integer tensor with a non-integral scalar computes in f32 (PyTorch's
//! result type). Arithmetic on bool tensors other than `add`/`mul`/
//! `maximum`/`minimum` (which are `or`/`and`) is an error. (Unlike PyTorch, a
//! rank-0 tensor promotes like any other tensor: `f32 [n] + f64 []` is f64.)
//!
//! **Scalars** take the tensor's dtype: rounded into a float dtype, wrapped
//! into an integer one (`u8 + -2.0` adds 254, wrapping, as PyTorch does).
//! An integral scalar that the integer dtype cannot hold is an error
//! (`i64 + 1e19`; u8 takes -255..=255, as a fill does): GUIDE 10,
//! deviation 30.
//! Comparisons see the scalar's true value (`u8 == -2.0` is false
//! everywhere). An integer tensor to a negative integer power is an error.
//!
//! **In place and `out`**: the other operand must broadcast to `self`'s shape, the
//! result dtype must be castable to `self`'s (PyTorch's `canCast`: a float
//! result into an integer or bool tensor, or a numeric result into a bool one,
//! is an error), and `self` must not be an expanded view
//! (several elements sharing one memory location). An operand that overlaps
//! `self` in memory with a different layout is copied first, so the result is
//! always as if the right-hand side were evaluated before the write.

use crate::backend::{self, BinaryOp, Operand, UnaryOp};
use crate::dtype::DType;
use crate::error::{bail, Error, Result};
use crate::layout::{broadcast_shapes, check_broadcasts_to, dims_eq};
use crate::tensor::Tensor;

/// The dtype `op` computes in for operand dtypes `a` and `b`.
fn compute_dtype(op: BinaryOp, a: DType, b: DType) -> Result<DType> {
    if op == BinaryOp::Sub && (a == DType::Bool || b == DType::Bool) {
        // PyTorch: "Subtraction, the `-` operator, with a bool tensor is not
        // supported" (f32 - bool too, though it would promote).
        bail!(Error::dtype(
            op.name(),
            "a numeric dtype for both operands (subtraction with a bool tensor is not supported; use logical_not or xor)",
            DType::Bool
        ));
    }
    let dt = a.promote(b);
    if op.is_comparison() {
        return Ok(dt);
    }
    match (op, dt) {
        (BinaryOp::Div | BinaryOp::Atan2, d) if !d.is_float() => Ok(DType::F32),
        (BinaryOp::Add | BinaryOp::Mul | BinaryOp::Maximum | BinaryOp::Minimum, DType::Bool) => {
            Ok(DType::Bool)
        }
        (_, DType::Bool) => bail!(Error::dtype(
            op.name(),
            "a numeric dtype (this op is not defined on bool tensors)",
            DType::Bool
        )),
        (_, d) => Ok(d),
    }
}

/// PyTorch's `canCast`: whether a result of dtype `from` may be stored in a
/// tensor of dtype `to` (in place or through `out`). A float result never
/// goes into an integer or bool tensor, nor a numeric result into a bool one.
fn can_cast(from: DType, to: DType) -> bool {
    !((from.is_float() && !to.is_float()) || (from != DType::Bool && to == DType::Bool))
}

/// The error for a result of dtype `res` that cannot be stored in `dst`.
fn cast_error(op: &'static str, res: DType, dst: DType) -> Error {
    Error::dtype(
        op,
        format!("an output dtype that the result type {res} can be cast to (result type {res} can't be cast to the desired output type {dst})"),
        dst,
    )
}

/// `true` if the integral value `s` is representable in integer dtype `d`:
/// what a fill takes, less u8's negative values, which a fill wraps.
fn fits_int(d: DType, s: f64) -> bool {
    d.scalar_fits(s) && !(d == DType::U8 && s < 0.0)
}

/// The dtype a tensor of dtype `a` with a scalar computes in.
fn scalar_compute_dtype(op: BinaryOp, a: DType, s: f64) -> Result<DType> {
    let integral = s.fract() == 0.0 && s.is_finite();
    if a == DType::Bool && op == BinaryOp::Sub {
        bail!(Error::dtype(
            op.name(),
            "a numeric dtype (subtraction is not defined on bool tensors; use logical ops)",
            DType::Bool
        ));
    }
    if (a.is_int() || a == DType::Bool) && op == BinaryOp::Pow && integral && s < 0.0 {
        bail!(Error::arg(
            op.name(),
            format!("integers to negative integer powers are not allowed (a {a} tensor to the power {s})")
        ));
    }
    let dt = match a {
        d if d.is_float() => d,
        DType::Bool if op.is_comparison() => {
            if integral {
                DType::I64
            } else {
                DType::F32
            }
        }
        DType::Bool => match op {
            BinaryOp::Div | BinaryOp::Atan2 => DType::F32,
            _ if integral => DType::I64,
            _ => DType::F32,
        },
        d => {
            if integral && op.is_comparison() && !fits_int(d, s) {
                // Compare against the true value, not a wrapped one.
                if fits_int(DType::I64, s) {
                    DType::I64
                } else {
                    DType::F64
                }
            } else if integral && !matches!(op, BinaryOp::Div | BinaryOp::Atan2) {
                d
            } else {
                DType::F32
            }
        }
    };
    if dt.is_int() && !op.is_comparison() {
        // A wrapped scalar is never what was meant: the fill rule (GUIDE 10,
        // deviation 30: PyTorch wraps an int scalar, promotes a float one).
        super::check_fill_value(op.name(), dt, s)?;
    }
    let divides = matches!(
        op,
        BinaryOp::Fmod | BinaryOp::Remainder | BinaryOp::FloorDivide
    );
    // The scalar as the kernel sees it: wrapped into the integer dtype by
    // the same conversion the backends use.
    let wraps_to_zero = || {
        crate::with_numeric_dtype!(dt, T => crate::dtype::Element::to_f64(
            <T as crate::dtype::Element>::wrap_from_f64(s)) == 0.0, _ => s == 0.0)
    };
    if divides && !dt.is_float() && wraps_to_zero() {
        // A tensor divisor's zeros give 0 (GUIDE 10, deviation 23): finding
        // them would cost a pass, and on CUDA a synchronisation, per call.
        bail!(Error::arg(
            op.name(),
            format!("integer division by zero (a {a} tensor and the scalar {s}, which is 0 in {dt}; PyTorch raises ZeroDivisionError)")
        ));
    }
    Ok(dt)
}

/// `true` when both clamp bounds (where given) are integral, so an integer
/// tensor can be clamped in its own dtype.
fn clamp_bounds_integral(min: Option<f64>, max: Option<f64>) -> bool {
    [min, max]
        .iter()
        .flatten()
        .all(|v| v.is_finite() && v.fract() == 0.0)
}

/// The tensor converted to `dt` if needed (a new handle otherwise).
fn as_dtype(t: &Tensor, dt: DType) -> Result<Tensor> {
    t.to_dtype(dt)
}

impl Tensor {
    /// Refuses writes that would be ill-defined. Autograd adds its checks here.
    pub(crate) fn check_writable(&self, op: &'static str) -> Result<()> {
        crate::autograd::check_inplace(self, op)?;
        if self.layout().has_internal_overlap() {
            bail!(Error::InvalidInPlace {
                op,
                msg: format!("unsupported operation: more than one element of the written-to tensor (shape {:?}, strides {:?}) refers to a single memory location; call contiguous() first", self.shape(), self.strides()),
            });
        }
        Ok(())
    }

    /// `other` ready to be read while `self` is written: copied if it overlaps
    /// `self`'s storage with a different layout.
    fn detangle(&self, other: &Tensor) -> Result<Tensor> {
        if self.shares_storage(other) && self.layout() != other.layout() {
            other.deep_clone()
        } else {
            Ok(other.alias())
        }
    }

    fn binary_op(&self, op: BinaryOp, other: &Tensor) -> Result<Tensor> {
        if op == BinaryOp::Pow
            && let Some(c) =
                crate::autocast::cast(&crate::autocast::POW, &[Some(self), Some(other)])?
        {
            return c.get(0).binary_op(op, c.get(1));
        }
        let _op = crate::alloc::history::op_context_with(op.name(), || {
            vec![self.shape().to_vec(), other.shape().to_vec()]
        });
        self.same_device(op.name(), other)?;
        let dt = self.dtype();
        // The common case: one shape, one dtype, and it is the compute dtype.
        // Nothing to broadcast or convert: the kernel borrows both operands'
        // own layouts. (The checks and errors are those of the general path:
        // equal shapes always broadcast.)
        if dims_eq(self.shape(), other.shape())
            && other.dtype() == dt
            && compute_dtype(op, dt, dt)? == dt
        {
            let out_dt = if op.is_comparison() { DType::Bool } else { dt };
            let mut out = Tensor::alloc(self.shape(), out_dt, self.device())?;
            let (o, fresh) = Operand::output(&mut out);
            backend::binary_into(op, &Operand::of(self), &Operand::of(other), &o, fresh)?;
            return crate::autograd::formulas::binary(op, self, other, out);
        }
        self.binary_op_general(op, other)
    }

    /// [`binary_op`](Self::binary_op) with broadcasting and type promotion.
    fn binary_op_general(&self, op: BinaryOp, other: &Tensor) -> Result<Tensor> {
        // Equal shapes need no broadcast shape.
        let bshape;
        let shape: &[usize] = if dims_eq(self.shape(), other.shape()) {
            self.shape()
        } else {
            bshape = broadcast_shapes(op.name(), self.shape(), other.shape())?;
            &bshape
        };
        let dt = compute_dtype(op, self.dtype(), other.dtype())?;
        // Borrow operands that already have the compute dtype (no new handle).
        let (ca, cb);
        let a = if self.dtype() == dt {
            self
        } else {
            ca = as_dtype(self, dt)?;
            &ca
        };
        let b = if other.dtype() == dt {
            other
        } else {
            cb = as_dtype(other, dt)?;
            &cb
        };
        let out_dt = if op.is_comparison() { DType::Bool } else { dt };
        let mut out = Tensor::alloc(shape, out_dt, self.device())?;
        let (o, fresh) = Operand::output(&mut out);
        backend::binary_into(
            op,
            &Operand::broadcast(a, shape)?,
            &Operand::broadcast(b, shape)?,
            &o,
            fresh,
        )?;
        crate::autograd::formulas::binary(op, a, b, out)
    }

    fn scalar_op(&self, op: BinaryOp, s: f64) -> Result<Tensor> {
        if op == BinaryOp::Pow
            && let Some(c) = crate::autocast::cast(&crate::autocast::POW, &[Some(self)])?
        {
            return c.get(0).scalar_op(op, s);
        }
        let _op = crate::alloc::history::op_context_with(op.name(), || vec![self.shape().to_vec()]);
        let dt = scalar_compute_dtype(op, self.dtype(), s)?;
        // Borrow the operand when it already has the compute dtype (no new handle).
        let ca;
        let a = if self.dtype() == dt {
            self
        } else {
            ca = as_dtype(self, dt)?;
            &ca
        };
        let out_dt = if op.is_comparison() { DType::Bool } else { dt };
        let mut out = Tensor::alloc(self.shape(), out_dt, self.device())?;
        let (o, fresh) = Operand::output(&mut out);
        backend::binary_scalar_into(op, &Operand::of(a), s, &o, fresh)?;
        crate::autograd::formulas::binary_scalar(op, a, s, out)
    }

    /// Writes `op(self, other)` into `out`, which must have the broadcast
    /// shape and a dtype the result casts to. Allocates nothing when the
    /// operands already have the compute dtype.
    fn binary_into(&self, op: BinaryOp, other: &Tensor, out: &mut Tensor) -> Result<()> {
        crate::autograd::check_unrecorded_inputs(op.name(), &[self, other])?;
        self.same_device(op.name(), other)?;
        self.same_device(op.name(), out)?;
        let shape = broadcast_shapes(op.name(), self.shape(), other.shape())?;
        if shape.as_slice() != out.shape() {
            bail!(Error::shape(
                op.name(),
                &shape,
                out.shape(),
                "the output must have the broadcast shape of the inputs"
            ));
        }
        out.check_writable(op.name())?;
        let dt = compute_dtype(op, self.dtype(), other.dtype())?;
        let res_dt = if op.is_comparison() { DType::Bool } else { dt };
        if !can_cast(res_dt, out.dtype()) {
            bail!(cast_error(op.name(), res_dt, out.dtype()));
        }
        let a = out.detangle(&as_dtype(self, dt)?)?;
        let b = out.detangle(&as_dtype(other, dt)?)?;
        let (oa, ob) = (
            Operand::broadcast(&a, &shape)?,
            Operand::broadcast(&b, &shape)?,
        );
        out.write_result(res_dt, |dst| backend::binary(op, &oa, &ob, dst))
    }

    /// The end of every `_out` form: `run` writes a result of dtype
    /// `res_dt` and `self`'s shape, straight into `self` when the dtypes
    /// match, else into one temporary that is then cast into `self`
    /// (PyTorch's `out=` casting); the version counter moves once.
    fn write_result(
        &mut self,
        res_dt: DType,
        run: impl FnOnce(&Operand) -> Result<()>,
    ) -> Result<()> {
        if res_dt == self.dtype() {
            run(&Operand::of(self))?;
        } else {
            let tmp = Tensor::alloc(self.shape(), res_dt, self.device())?;
            run(&Operand::of(&tmp))?;
            backend::copy(&Operand::of(&tmp), &Operand::of(self))?;
        }
        self.storage().bump_version();
        Ok(())
    }

    fn binary_inplace(&mut self, op: BinaryOp, other: &Tensor) -> Result<&mut Tensor> {
        check_broadcasts_to(
            op.name(),
            self.shape(),
            other.shape(),
            "in place, the other operand must broadcast to self's shape",
        )?;
        let a = self.alias();
        a.binary_into(op, other, self)?;
        Ok(self)
    }

    fn scalar_inplace(&mut self, op: BinaryOp, s: f64) -> Result<&mut Tensor> {
        self.check_writable(op.name())?;
        let dt = scalar_compute_dtype(op, self.dtype(), s)?;
        if dt != self.dtype() {
            if !can_cast(dt, self.dtype()) {
                bail!(cast_error(op.name(), dt, self.dtype()));
            }
            let r = self.scalar_op(op, s)?;
            backend::copy(&Operand::of(&r), &Operand::of(self))?;
        } else {
            backend::binary_scalar(op, &Operand::of(self), s, &Operand::of(self))?;
        }
        self.storage().bump_version();
        Ok(self)
    }

    fn unary_op(&self, op: UnaryOp) -> Result<Tensor> {
        if let Some(c) = crate::autocast::cast_unary(op.name(), self)? {
            return c.get(0).unary_op(op);
        }
        let _op = crate::alloc::history::op_context_with(op.name(), || vec![self.shape().to_vec()]);
        // Borrow the input when it already has the compute dtype (no new handle).
        let converted = self.unary_input(op)?;
        let src = converted.as_ref().unwrap_or(self);
        let mut out = Tensor::alloc(src.shape(), src.dtype(), src.device())?;
        let (o, fresh) = Operand::output(&mut out);
        backend::unary_into(op, &Operand::of(src), &o, fresh)?;
        crate::autograd::formulas_unary::unary(op, src, out)
    }

    /// The input converted to the dtype `op` computes in, or `None` when it
    /// already has it.
    fn unary_input(&self, op: UnaryOp) -> Result<Option<Tensor>> {
        match self.dtype() {
            // Float ops compute in f32 from bool as from integers (PyTorch:
            // exp(bool) is float32).
            DType::Bool if op.needs_float() => self.to_dtype(DType::F32).map(Some),
            DType::Bool if !matches!(op, UnaryOp::Floor | UnaryOp::Round) => {
                bail!(Error::dtype(op.name(), "a numeric dtype", DType::Bool))
            }
            d if op.needs_float() && !d.is_float() => self.to_dtype(DType::F32).map(Some),
            _ => Ok(None),
        }
    }

    /// `op(self)` written into `out` (same shape and device; any dtype the
    /// result can be cast to, as PyTorch's `out=`). Allocates nothing when
    /// `out` has the compute dtype and the input needs no conversion.
    fn unary_out(&self, op: UnaryOp, out: &mut Tensor) -> Result<()> {
        crate::autograd::check_unrecorded_inputs(op.name(), &[self])?;
        self.same_device(op.name(), out)?;
        if self.shape() != out.shape() {
            bail!(Error::shape(
                op.name(),
                self.shape(),
                out.shape(),
                "the output must have the input's shape"
            ));
        }
        out.check_writable(op.name())?;
        let converted = self.unary_input(op)?;
        let src = out.detangle(converted.as_ref().unwrap_or(self))?;
        if !can_cast(src.dtype(), out.dtype()) {
            bail!(cast_error(op.name(), src.dtype(), out.dtype()));
        }
        out.write_result(src.dtype(), |dst| {
            backend::unary(op, &Operand::of(&src), dst)
        })
    }

    fn unary_inplace(&mut self, op: UnaryOp) -> Result<&mut Tensor> {
        self.check_writable(op.name())?;
        if op.needs_float() && !self.dtype().is_float() {
            bail!(Error::dtype(op.name(), "a float tensor (the result of this op cannot be stored in place in an integer tensor)", self.dtype()));
        }
        if self.dtype() == DType::Bool {
            bail!(Error::dtype(op.name(), "a numeric dtype", DType::Bool));
        }
        backend::unary(op, &Operand::of(self), &Operand::of(self))?;
        self.storage().bump_version();
        Ok(self)
    }

    /// `where(cond, a, b)`: elements of `a` where `cond` is true (bool, or
    /// u8 nonzero, as PyTorch still takes), of `b` elsewhere; all three
    /// broadcast together; `a` and `b` promote.
    pub fn where_cond(cond: &Tensor, a: &Tensor, b: &Tensor) -> Result<Tensor> {
        let _op = crate::alloc::history::op_context("where");
        let cond = &match cond.dtype() {
            DType::Bool => cond.alias(),
            DType::U8 => cond.ne_scalar(0.0)?,
            other => bail!(Error::dtype("where", "bool or u8 (the condition)", other)),
        };
        cond.same_device("where", a)?;
        cond.same_device("where", b)?;
        let shape = broadcast_shapes("where", cond.shape(), a.shape())?;
        let shape = broadcast_shapes("where", &shape, b.shape())?;
        let dt = a.dtype().promote(b.dtype());
        let (a, b) = (as_dtype(a, dt)?, as_dtype(b, dt)?);
        let out = Tensor::alloc(&shape, dt, cond.device())?;
        backend::where_cond(
            &Operand::broadcast(cond, &shape)?,
            &Operand::broadcast(&a, &shape)?,
            &Operand::broadcast(&b, &shape)?,
            &Operand::of(&out),
        )?;
        crate::autograd::formulas::where_cond(cond, &a, &b, out)
    }

    /// Writes `value` where `mask` is true (mask broadcasts to `self`'s shape).
    pub fn masked_fill_(&mut self, mask: &Tensor, value: f64) -> Result<&mut Tensor> {
        self.check_writable("masked_fill_")?;
        let keep = self.alias();
        keep.masked_fill_into("masked_fill_", mask, value, self)?;
        self.storage().bump_version();
        Ok(self)
    }

    /// `dst = where(mask, value, self)` in one pass, `dst` of `self`'s shape
    /// and dtype (`self` itself for the in-place form); errors name `op`.
    fn masked_fill_into(
        &self,
        op: &'static str,
        mask: &Tensor,
        value: f64,
        dst: &Tensor,
    ) -> Result<()> {
        if mask.dtype() != DType::Bool {
            bail!(Error::dtype(op, "bool (the mask)", mask.dtype()));
        }
        self.same_device(op, mask)?;
        super::check_fill_value(op, self.dtype(), value)?;
        let shape = check_broadcasts_to(
            op,
            self.shape(),
            mask.shape(),
            "the mask must broadcast to self's shape",
        )?;
        let mask = dst.detangle(mask)?;
        let v = Tensor::full_wrapped(&[], value, self.dtype(), self.device())?;
        backend::where_cond(
            &Operand::broadcast(&mask, &shape)?,
            &Operand::broadcast(&v, &shape)?,
            &Operand::of(self),
            &Operand::of(dst),
        )
    }

    /// Out-of-place [`masked_fill_`](Tensor::masked_fill_).
    pub fn masked_fill(&self, mask: &Tensor, value: f64) -> Result<Tensor> {
        let _op = crate::alloc::history::op_context("masked_fill");
        super::check_fill_value("masked_fill", self.dtype(), value)?;
        if crate::autograd::needs_grad(&[self]) {
            // Differentiable form: the gradient flows where the mask is false.
            let v = Tensor::full_wrapped(&[], value, self.dtype(), self.device())?;
            return Tensor::where_cond(mask, &v, self);
        }
        // One pass into a fresh tensor, where a deep copy and then
        // `masked_fill_` would be two (Note [one pass, not two] in
        // bench/results/ops-why.md).
        let out = Tensor::alloc(self.shape(), self.dtype(), self.device())?;
        self.masked_fill_into("masked_fill", mask, value, &out)?;
        Ok(out)
    }

    /// Copies `src` into `self` in place: `src` broadcasts to `self`'s shape,
    /// and may have another dtype (converted) or live on another device.
    pub fn copy_(&mut self, src: &Tensor) -> Result<&mut Tensor> {
        self.check_writable("copy_")?;
        crate::autograd::check_unrecorded_inputs("copy_", &[src])?;
        let shape = check_broadcasts_to(
            "copy_",
            self.shape(),
            src.shape(),
            "the source must broadcast to the destination's shape",
        )?;
        let src = self.detangle(src)?;
        backend::copy(&Operand::broadcast(&src, &shape)?, &Operand::of(self))?;
        self.storage().bump_version();
        Ok(self)
    }

    /// Writes `value` into every element.
    pub fn fill_(&mut self, value: f64) -> Result<&mut Tensor> {
        self.check_writable("fill_")?;
        super::check_fill_value("fill_", self.dtype(), value)?;
        backend::fill(&Operand::of(self), value)?;
        self.storage().bump_version();
        Ok(self)
    }

    /// Writes zeros into every element.
    pub fn zero_(&mut self) -> Result<&mut Tensor> {
        self.fill_(0.0)
    }

    /// Clamps to `[min, max]` (either may be `None`; if `min > max` every
    /// element becomes `max`, as in PyTorch). NaN elements stay NaN. An
    /// integer tensor with a non-integral bound computes in f32 (PyTorch's
    /// result type for a tensor and a float scalar).
    pub fn clamp(&self, min: Option<f64>, max: Option<f64>) -> Result<Tensor> {
        if self.dtype().is_int() && !clamp_bounds_integral(min, max) {
            return self.to_dtype(DType::F32)?.clamp(min, max);
        }
        self.unary_op(UnaryOp::Clamp(
            min.unwrap_or(f64::NAN),
            max.unwrap_or(f64::NAN),
        ))
    }

    /// In-place [`clamp`](Tensor::clamp). An error on an integer tensor with a
    /// non-integral bound (the f32 result cannot be stored in place).
    pub fn clamp_(&mut self, min: Option<f64>, max: Option<f64>) -> Result<&mut Tensor> {
        if self.dtype().is_int() && !clamp_bounds_integral(min, max) {
            bail!(cast_error("clamp", DType::F32, self.dtype()));
        }
        self.unary_inplace(UnaryOp::Clamp(
            min.unwrap_or(f64::NAN),
            max.unwrap_or(f64::NAN),
        ))
    }

    /// `s - self` (PyTorch's `rsub`), with the dtype rules of
    /// [`sub_scalar`](Tensor::sub_scalar). This is what `s - &t` computes.
    pub fn rsub_scalar(&self, s: f64) -> Result<Tensor> {
        let dt = scalar_compute_dtype(BinaryOp::Sub, self.dtype(), s)?;
        Tensor::full_wrapped(&[], s, dt, self.device())?.binary_op(BinaryOp::Sub, self)
    }

    /// `s / self`, with the dtype rules of [`div_scalar`](Tensor::div_scalar)
    /// (integers divide in f32). This is what `s / &t` computes.
    pub fn rdiv_scalar(&self, s: f64) -> Result<Tensor> {
        let dt = scalar_compute_dtype(BinaryOp::Div, self.dtype(), s)?;
        Tensor::full_wrapped(&[], s, dt, self.device())?.binary_op(BinaryOp::Div, self)
    }
}

macro_rules! binary_methods {
    ($($op:ident: $name:ident, $scalar:ident, $inplace:ident, $scalar_inplace:ident, $out:ident;)*) => {
        impl Tensor {
            $(
                #[doc = concat!("Elementwise `", stringify!($name), "` with broadcasting and type promotion.")]
                pub fn $name(&self, other: &Tensor) -> Result<Tensor> {
                    self.binary_op(BinaryOp::$op, other)
                }
                #[doc = concat!("Elementwise `", stringify!($name), "` with a scalar.")]
                pub fn $scalar(&self, s: f64) -> Result<Tensor> {
                    self.scalar_op(BinaryOp::$op, s)
                }
                #[doc = concat!("In-place `", stringify!($name), "`: `other` broadcasts to `self`'s shape.")]
                pub fn $inplace(&mut self, other: &Tensor) -> Result<&mut Tensor> {
                    self.binary_inplace(BinaryOp::$op, other)
                }
                #[doc = concat!("In-place `", stringify!($name), "` with a scalar.")]
                pub fn $scalar_inplace(&mut self, s: f64) -> Result<&mut Tensor> {
                    self.scalar_inplace(BinaryOp::$op, s)
                }
                #[doc = concat!("`", stringify!($name), "` written into `out` (broadcast shape); allocates nothing when dtypes already match.")]
                pub fn $out(&self, other: &Tensor, out: &mut Tensor) -> Result<()> {
                    self.binary_into(BinaryOp::$op, other, out)
                }
            )*
        }
    };
}

binary_methods! {
    Add: add, add_scalar, add_, add_scalar_, add_out;
    Sub: sub, sub_scalar, sub_, sub_scalar_, sub_out;
    Mul: mul, mul_scalar, mul_, mul_scalar_, mul_out;
    Div: div, div_scalar, div_, div_scalar_, div_out;
    Pow: pow, pow_scalar, pow_, pow_scalar_, pow_out;
    Maximum: maximum, maximum_scalar, maximum_, maximum_scalar_, maximum_out;
    Minimum: minimum, minimum_scalar, minimum_, minimum_scalar_, minimum_out;
    Atan2: atan2, atan2_scalar, atan2_, atan2_scalar_, atan2_out;
    Fmod: fmod, fmod_scalar, fmod_, fmod_scalar_, fmod_out;
    Remainder: remainder, remainder_scalar, remainder_, remainder_scalar_, remainder_out;
    FloorDivide: floor_divide, floor_divide_scalar, floor_divide_, floor_divide_scalar_, floor_divide_out;
}

macro_rules! compare_methods {
    ($($op:ident: $name:ident, $scalar:ident, $out:ident;)*) => {
        impl Tensor {
            $(
                #[doc = concat!("Elementwise `", stringify!($name), "` comparison; returns a bool tensor.")]
                pub fn $name(&self, other: &Tensor) -> Result<Tensor> {
                    self.binary_op(BinaryOp::$op, other)
                }
                #[doc = concat!("Elementwise `", stringify!($name), "` against a scalar; returns a bool tensor.")]
                pub fn $scalar(&self, s: f64) -> Result<Tensor> {
                    self.scalar_op(BinaryOp::$op, s)
                }
                #[doc = concat!("`", stringify!($name), "` written into a bool (or numeric) `out`.")]
                pub fn $out(&self, other: &Tensor, out: &mut Tensor) -> Result<()> {
                    self.binary_into(BinaryOp::$op, other, out)
                }
            )*
        }
    };
}

compare_methods! {
    Eq: eq, eq_scalar, eq_out;
    Ne: ne, ne_scalar, ne_out;
    Lt: lt, lt_scalar, lt_out;
    Le: le, le_scalar, le_out;
    Gt: gt, gt_scalar, gt_out;
    Ge: ge, ge_scalar, ge_out;
}

macro_rules! unary_methods {
    ($($variant:ident $name:ident $inplace:ident $out:ident $domain:ident $doc:literal
       $node:literal $saves:ident ($($arg:ident),*) $body:block);* $(;)?) => {
        impl Tensor {
            $(
                #[doc = $doc]
                #[doc = ""]
                #[doc = unary_methods!(@dtypes $domain)]
                pub fn $name(&self) -> Result<Tensor> {
                    self.unary_op(UnaryOp::$variant)
                }

                #[doc = concat!("In-place [`", stringify!($name), "`](Tensor::", stringify!($name), ").")]
                pub fn $inplace(&mut self) -> Result<&mut Tensor> {
                    self.unary_inplace(UnaryOp::$variant)
                }

                #[doc = concat!("[`", stringify!($name), "`](Tensor::", stringify!($name), ") written into `out` \
                    (the input's shape and device; a dtype the result casts to): PyTorch's `out=`. \
                    Allocates nothing when `out` has the result's dtype, so a serving loop can reuse \
                    its buffers. Refused in grad mode when the input requires grad (not recorded).")]
                pub fn $out(&self, out: &mut Tensor) -> Result<()> {
                    self.unary_out(UnaryOp::$variant, out)
                }
            )*
        }
    };
    (@dtypes float) => {
        "Defined on floats; an integer or bool input computes in f32 (as in PyTorch)."
    };
    (@dtypes numeric) => {
        "Defined on every numeric dtype, in that dtype."
    };
    (@dtypes exact) => {
        "Defined on every numeric dtype, in that dtype (exact: no rounding)."
    };
}
crate::unary_table::unary_table!(unary_methods);
