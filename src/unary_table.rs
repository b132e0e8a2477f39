//! The definition of every elementwise unary op: one line each.
//!
//! This table is the one place an op is named. Every layer that needs the
//! list expands it with a macro of its own, so a new op is **three touch
//! points**:
//!
//! 1. a line here: the `UnaryOp` variant, the method (its PyTorch name, which
//!    also names both kernels), the in-place method, the dtypes it is defined
//!    on, its doc line, its autograd node and its derivative;
//! 2. the CPU kernel: a function of that name in `src/backend/cpu/unary.rs`
//!    (`float::NAME` over the compute type for `float` and `numeric` ops;
//!    `typed::NAME` in the storage type for `numeric` ops on integers and for
//!    `exact` ops on every dtype);
//! 3. the CUDA kernel: `op_NAME` and its `UNARY_*_DTYPES(NAME)` line in
//!    `kernels/elementwise.cu`.
//!
//! From this table come the `UnaryOp` enum, its `name`/`needs_float`, the
//! list of kernels the CUDA build checks against the compiled PTX, the
//! public methods `Tensor::NAME`, `Tensor::NAME_` and `Tensor::NAME_out`,
//! the CPU dispatch, and
//! the backward formula. A missing CPU kernel does not compile; a missing
//! CUDA kernel fails `tests/cuda/nvrtc.rs` (every kernel the table implies must
//! exist in the compiled PTX).
//!
//! Columns, in order:
//!
//! * `Variant`: the `UnaryOp` variant;
//! * `name`, `name_`, `name_out`: the methods (PyTorch's names; `name` is
//!   also the kernel name and the op's name in errors; `name_out` writes
//!   into a given tensor, PyTorch's `out=`);
//! * `float`, `numeric` or `exact`: `float` ops are defined on floats only
//!   (an integer or bool input computes in f32, as in PyTorch; in place it
//!   is an error); `numeric` ops also on integers, in the integer type;
//!   `exact` ops (a sign flip or a compare: no rounding anywhere) run in the
//!   storage type for every dtype, f16 and bf16 included, with no
//!   conversion (several times faster there than through f32:
//!   Note [exact ops in storage type] in `bench/results/ops-why.md`);
//! * the doc line of the method;
//! * `"NodeBackward"`: the autograd node's name;
//! * the derivative: the gradient of the input given the output's gradient
//!   `g`, a block of type `Result<Tensor>` after `grad(g)` (nothing saved),
//!   `output(g, y)` (saves the output `y`) or `input(g, x)` (saves the input
//!   `x`); `g`, `x` and `y` are `&Tensor`. The result is
//!   converted to the input's dtype. Formulas run under `no_grad`; they may
//!   build one fresh buffer and update it in place so that a backward step
//!   holds one temporary, not a chain of them.
//!
//! `clamp` takes bounds, so it is written by hand next to each expansion
//! (`UnaryOp::Clamp`).

/// Calls `$m!` with the table (see the module docs for the columns).
macro_rules! unary_table {
    ($m:ident) => {
        $m! {
            Neg neg neg_ neg_out exact "Negation, `-x` (wrapping on integers)."
                "NegBackward" grad(g) { g.neg() };
            Abs abs abs_ abs_out exact "Absolute value (wrapping on integers: `abs(i64::MIN)` is `i64::MIN`)."
                "AbsBackward" input(g, x) { g.mul(&x.sign()?) };
            Exp exp exp_ exp_out float "`e^x`."
                "ExpBackward" output(g, y) { g.mul(y) };
            Log log log_ log_out float "Natural logarithm."
                "LogBackward" input(g, x) { g.mul(&x.reciprocal()?) };
            Log1p log1p log1p_ log1p_out float "`ln(1 + x)`, accurate for `x` near 0."
                "Log1pBackward" input(g, x) { g.div(&x.add_scalar(1.0)?) };
            Sqrt sqrt sqrt_ sqrt_out float "Square root."
                "SqrtBackward" output(g, y) {
                    let mut d = g.div(y)?;
                    d.mul_scalar_(0.5)?;
                    Ok(d)
                };
            Rsqrt rsqrt rsqrt_ rsqrt_out float "`1 / sqrt(x)`."
                "RsqrtBackward" output(g, y) {
                    let mut d = y.square()?;
                    d.mul_(y)?.mul_scalar_(-0.5)?.mul_(g)?;
                    Ok(d)
                };
            Sin sin sin_ sin_out float "Sine."
                "SinBackward" input(g, x) { g.mul(&x.cos()?) };
            Cos cos cos_ cos_out float "Cosine."
                "CosBackward" input(g, x) { g.mul(&x.sin()?.neg()?) };
            Tan tan tan_ tan_out float "Tangent."
                "TanBackward" output(g, y) {
                    let mut d = y.square()?;
                    d.add_scalar_(1.0)?.mul_(g)?;
                    Ok(d)
                };
            Asin asin asin_ asin_out float "Arcsine (NaN outside `[-1, 1]`)."
                "AsinBackward" input(g, x) {
                    let mut d = x.square()?;
                    d.neg_()?.add_scalar_(1.0)?.rsqrt_()?.mul_(g)?;
                    Ok(d)
                };
            Acos acos acos_ acos_out float "Arccosine (NaN outside `[-1, 1]`)."
                "AcosBackward" input(g, x) {
                    let mut d = x.square()?;
                    d.neg_()?.add_scalar_(1.0)?.rsqrt_()?.mul_(g)?.neg_()?;
                    Ok(d)
                };
            Atan atan atan_ atan_out float "Arctangent."
                "AtanBackward" input(g, x) {
                    let mut d = x.square()?;
                    d.add_scalar_(1.0)?;
                    g.div(&d)
                };
            Sinh sinh sinh_ sinh_out float "Hyperbolic sine."
                "SinhBackward" input(g, x) { g.mul(&x.cosh()?) };
            Cosh cosh cosh_ cosh_out float "Hyperbolic cosine."
                "CoshBackward" input(g, x) { g.mul(&x.sinh()?) };
            Expm1 expm1 expm1_ expm1_out float "`e^x - 1`, accurate for `x` near 0."
                "Expm1Backward" output(g, y) { g.mul(&y.add_scalar(1.0)?) };
            Exp2 exp2 exp2_ exp2_out float "`2^x`."
                "Exp2Backward" output(g, y) { g.mul(&y.mul_scalar(std::f64::consts::LN_2)?) };
            Log2 log2 log2_ log2_out float "Base-2 logarithm."
                "Log2Backward" input(g, x) { g.div(&x.mul_scalar(std::f64::consts::LN_2)?) };
            Tanh tanh tanh_ tanh_out float "Hyperbolic tangent."
                "TanhBackward" output(g, y) {
                    fused_grad(UnaryGrad::Tanh, g, y, || {
                        let mut d = y.square()?;
                        d.neg_()?.add_scalar_(1.0)?.mul_(g)?;
                        Ok(d)
                    })
                };
            Sigmoid sigmoid sigmoid_ sigmoid_out float "Logistic sigmoid, `1 / (1 + e^-x)`."
                "SigmoidBackward" output(g, y) {
                    fused_grad(UnaryGrad::Sigmoid, g, y, || {
                        let mut d = y.neg()?;
                        d.add_scalar_(1.0)?.mul_(y)?.mul_(g)?;
                        Ok(d)
                    })
                };
            Relu relu relu_ relu_out exact "`max(x, 0)`; NaN passes through."
                "ReluBackward" output(g, y) { relu_backward(g, y) };
            Gelu gelu gelu_ gelu_out float "GELU, exact (erf) form, as `torch.nn.functional.gelu`."
                "GeluBackward" input(g, x) {
                    fused_grad(UnaryGrad::Gelu, g, x, || g.mul(&gelu_derivative(x)?))
                };
            Silu silu silu_ silu_out float "SiLU (swish), `x * sigmoid(x)`, as `torch.nn.functional.silu`."
                "SiluBackward" input(g, x) {
                    fused_grad(UnaryGrad::Silu, g, x, || silu_derivative(x)?.mul(g))
                };
            Softplus softplus softplus_ softplus_out float "`ln(1 + e^x)`, and `x` above 20, as `torch.nn.functional.softplus` with its defaults (beta 1, threshold 20)."
                "SoftplusBackward" input(g, x) {
                    fused_grad(UnaryGrad::Softplus, g, x, || softplus_derivative(x)?.mul(g))
                };
            GeluTanh gelu_tanh gelu_tanh_ gelu_tanh_out float "GELU, tanh form: `torch.nn.functional.gelu(x, approximate=\"tanh\")`."
                "GeluBackward" input(g, x) {
                    fused_grad(UnaryGrad::GeluTanh, g, x, || gelu_tanh_derivative(x)?.mul(g))
                };
            Erf erf erf_ erf_out float "The error function."
                "ErfBackward" input(g, x) {
                    // d/dx erf(x) = 2 / sqrt(pi) * exp(-x^2)
                    fused_grad(UnaryGrad::Erf, g, x, || {
                        g.mul(&x.mul(x)?.neg()?.exp()?.mul_scalar(std::f64::consts::FRAC_2_SQRT_PI)?)
                    })
                };
            Floor floor floor_ floor_out numeric "Largest integer not above `x` (the identity on integers)."
                "FloorBackward" grad(g) { g.zeros_like() };
            Ceil ceil ceil_ ceil_out numeric "Smallest integer not below `x` (the identity on integers)."
                "CeilBackward" grad(g) { g.zeros_like() };
            Trunc trunc trunc_ trunc_out numeric "`x` rounded toward zero (the identity on integers)."
                "TruncBackward" grad(g) { g.zeros_like() };
            Round round round_ round_out numeric "Nearest integer, halves to even (the identity on integers)."
                "RoundBackward" grad(g) { g.zeros_like() };
            Sign sign sign_ sign_out numeric "-1, 0 or 1 by the sign of `x` (NaN gives 0, as in PyTorch)."
                "SignBackward" grad(g) { g.zeros_like() };
            Recip reciprocal reciprocal_ reciprocal_out float "`1 / x`."
                "ReciprocalBackward" output(g, y) {
                    let mut d = y.square()?;
                    d.neg_()?.mul_(g)?;
                    Ok(d)
                };
            Square square square_ square_out numeric "`x * x` (wrapping on integers)."
                "SquareBackward" input(g, x) { g.mul(&x.mul_scalar(2.0)?) };
        }
    };
}

pub(crate) use unary_table;
