// Elementwise kernels: unary ops, binary ops and binary ops with a scalar.
//
//   unary_<op>_<dtype>(Geom<2> g, i64 n, T* out, const T* a)
//   unary_clamp_<dtype>(Geom<2> g, i64 n, T* out, const T* a, u64 lo, u64 hi, i32 has)
//   binary_<op>_<dtype>(Geom<3> g, i64 n, O* out, const T* a, const T* b)
//   bscalar_<op>_<dtype>(Geom<2> g, i64 n, O* out, const T* a, u64 s)
//
// <op> is `UnaryOp::name()` / `BinaryOp::name()`. Operand 0 of the geometry
// is the output. O is T, or bool (u8) for comparisons. Scalars arrive as
// the bits of a value already converted to T on the host (`T::from_f64`),
// clamp bounds likewise (`has` bit 0: lower bound present, bit 1: upper).
//
// Semantics follow the CPU backend (src/backend/cpu/elementwise.rs and
// num.rs): float ops compute in f32 (f64 for f64) and round once; integer
// arithmetic wraps; integer division floors and gives 0 on division by 0;
// float maximum/minimum propagate NaN; bool add/maximum are `or`, the other
// bool arithmetic is `and`.

// ----------------------------------------------------------------- unary ---

// Float-only ops (the op layer promotes integers to f32 first).
#define FLOAT_UNARY(NAME, EXPR_F, EXPR_D)                   \
    DEV float op_##NAME(float x) { return EXPR_F; }          \
    DEV double op_##NAME(double x) { return EXPR_D; }

FLOAT_UNARY(exp, expf(x), exp(x))
FLOAT_UNARY(log, logf(x), log(x))
FLOAT_UNARY(log1p, log1pf(x), log1p(x))
FLOAT_UNARY(sqrt, sqrtf(x), sqrt(x))
FLOAT_UNARY(rsqrt, 1.0f / sqrtf(x), 1.0 / sqrt(x))
FLOAT_UNARY(sin, sinf(x), sin(x))
FLOAT_UNARY(cos, cosf(x), cos(x))
FLOAT_UNARY(tanh, tanhf(x), tanh(x))
FLOAT_UNARY(sigmoid, 1.0f / (1.0f + expf(-x)), 1.0 / (1.0 + exp(-x)))
// f64 gelu as the CPU's gelu_f64: below 0, x/2 * erfc(-x/sqrt 2), because
// 1 + erf(x/sqrt 2) cancels to 0 in the tail (gelu(-10) is -7.6e-23, not -0).
FLOAT_UNARY(gelu, 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)),
            x >= 0.0 ? 0.5 * x * (1.0 + erf(x * 0.70710678118654752))
                     : 0.5 * x * erfc(-(x * 0.70710678118654752)))
// silu, softplus and gelu_tanh as PyTorch's CUDA kernels compute them.
FLOAT_UNARY(silu, x / (1.0f + expf(-x)), x / (1.0 + exp(-x)))
FLOAT_UNARY(softplus, x > 20.0f ? x : log1pf(expf(x)), x > 20.0 ? x : log1p(exp(x)))
FLOAT_UNARY(gelu_tanh, 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x))),
            0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))))
FLOAT_UNARY(erf, erff(x), erf(x))
FLOAT_UNARY(reciprocal, 1.0f / x, 1.0 / x)
FLOAT_UNARY(tan, tanf(x), tan(x))
FLOAT_UNARY(asin, asinf(x), asin(x))
FLOAT_UNARY(acos, acosf(x), acos(x))
FLOAT_UNARY(atan, atanf(x), atan(x))
FLOAT_UNARY(sinh, sinhf(x), sinh(x))
FLOAT_UNARY(cosh, coshf(x), cosh(x))
FLOAT_UNARY(expm1, expm1f(x), expm1(x))
FLOAT_UNARY(exp2, exp2f(x), exp2(x))
FLOAT_UNARY(log2, log2f(x), log2(x))

// Ops defined on every numeric type. Floats: f, integers: i (wrapping).
#define NUM_UNARY(NAME, EXPR_F, EXPR_D, EXPR_I64, EXPR_I32, EXPR_U8) \
    DEV float op_##NAME(float x) { return EXPR_F; }                   \
    DEV double op_##NAME(double x) { return EXPR_D; }                 \
    DEV i64 op_##NAME(i64 x) { return EXPR_I64; }                     \
    DEV i32 op_##NAME(i32 x) { return EXPR_I32; }                     \
    DEV u8 op_##NAME(u8 x) { return EXPR_U8; }

NUM_UNARY(neg, -x, -x, (i64)(0ull - (u64)x), (i32)(0u - (u32)x), (u8)(0u - (u32)x))
NUM_UNARY(abs, fabsf(x), fabs(x), x < 0 ? (i64)(0ull - (u64)x) : x, x < 0 ? (i32)(0u - (u32)x) : x, x)
NUM_UNARY(relu, (x > 0.0f || x != x) ? x : 0.0f, (x > 0.0 || x != x) ? x : 0.0, x > 0 ? x : 0,
          x > 0 ? x : 0, x)
NUM_UNARY(square, x * x, x * x, (i64)((u64)x * (u64)x), (i32)((u32)x * (u32)x), (u8)((u32)x * (u32)x))
NUM_UNARY(floor, floorf(x), floor(x), x, x, x)
NUM_UNARY(ceil, ceilf(x), ceil(x), x, x, x)
NUM_UNARY(trunc, truncf(x), trunc(x), x, x, x)
NUM_UNARY(round, rintf(x), rint(x), x, x, x)
// sign is (x > 0) - (x < 0), as PyTorch: NaN and -0 give 0.
NUM_UNARY(sign, x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : 0.0f), x > 0.0 ? 1.0 : (x < 0.0 ? -1.0 : 0.0),
          (i64)(x > 0 ? 1 : (x < 0 ? -1 : 0)), x > 0 ? 1 : (x < 0 ? -1 : 0), (u8)(x > 0 ? 1 : 0))

#define UNARY_KERNEL(NAME, SUF, T)                                                        \
    KERNEL void unary_##NAME##_##SUF(Geom<2> g, i64 n, T* out, const T* a) {               \
        for_each<2>(g, n, [&](const i64* o) { out[o[0]] = Store<T>::from(op_##NAME(load(a[o[1]]))); }); \
    }

#define UNARY_FLOAT_DTYPES(NAME)      \
    UNARY_KERNEL(NAME, f32, float)    \
    UNARY_KERNEL(NAME, f64, double)   \
    UNARY_KERNEL(NAME, f16, f16)      \
    UNARY_KERNEL(NAME, bf16, bf16)

#define UNARY_NUM_DTYPES(NAME)   \
    UNARY_FLOAT_DTYPES(NAME)     \
    UNARY_KERNEL(NAME, i64, i64) \
    UNARY_KERNEL(NAME, i32, i32) \
    UNARY_KERNEL(NAME, u8, u8)

UNARY_FLOAT_DTYPES(exp)
UNARY_FLOAT_DTYPES(log)
UNARY_FLOAT_DTYPES(log1p)
UNARY_FLOAT_DTYPES(sqrt)
UNARY_FLOAT_DTYPES(rsqrt)
UNARY_FLOAT_DTYPES(sin)
UNARY_FLOAT_DTYPES(cos)
UNARY_FLOAT_DTYPES(tanh)
UNARY_FLOAT_DTYPES(sigmoid)
UNARY_FLOAT_DTYPES(gelu)
UNARY_FLOAT_DTYPES(silu)
UNARY_FLOAT_DTYPES(softplus)
UNARY_FLOAT_DTYPES(gelu_tanh)
UNARY_FLOAT_DTYPES(erf)
UNARY_FLOAT_DTYPES(reciprocal)
UNARY_FLOAT_DTYPES(tan)
UNARY_FLOAT_DTYPES(asin)
UNARY_FLOAT_DTYPES(acos)
UNARY_FLOAT_DTYPES(atan)
UNARY_FLOAT_DTYPES(sinh)
UNARY_FLOAT_DTYPES(cosh)
UNARY_FLOAT_DTYPES(expm1)
UNARY_FLOAT_DTYPES(exp2)
UNARY_FLOAT_DTYPES(log2)
UNARY_NUM_DTYPES(neg)
UNARY_NUM_DTYPES(abs)
UNARY_NUM_DTYPES(relu)
UNARY_NUM_DTYPES(square)
UNARY_NUM_DTYPES(floor)
UNARY_NUM_DTYPES(ceil)
UNARY_NUM_DTYPES(trunc)
UNARY_NUM_DTYPES(round)
UNARY_NUM_DTYPES(sign)

// Clamp compares in the storage type's value (bounds already converted to T).
#define CLAMP_KERNEL(SUF, T)                                                                   \
    KERNEL void unary_clamp_##SUF(Geom<2> g, i64 n, T* out, const T* a, u64 lo, u64 hi, i32 has) { \
        const auto l = load(from_bits<T>(lo));                                                 \
        const auto h = load(from_bits<T>(hi));                                                 \
        for_each<2>(g, n, [&](const i64* o) {                                                   \
            auto x = load(a[o[1]]);                                                            \
            if ((has & 1) && x < l) x = l;                                                     \
            if ((has & 2) && x > h) x = h;                                                     \
            out[o[0]] = Store<T>::from(x);                                                      \
        });                                                                                    \
    }

CLAMP_KERNEL(f32, float)
CLAMP_KERNEL(f64, double)
CLAMP_KERNEL(f16, f16)
CLAMP_KERNEL(bf16, bf16)
CLAMP_KERNEL(i64, i64)
CLAMP_KERNEL(i32, i32)
CLAMP_KERNEL(u8, u8)

// ---------------------------------------------------------------- binary ---

DEV float op_add(float a, float b) { return a + b; }
DEV double op_add(double a, double b) { return a + b; }
DEV float op_sub(float a, float b) { return a - b; }
DEV double op_sub(double a, double b) { return a - b; }
DEV float op_mul(float a, float b) { return a * b; }
DEV double op_mul(double a, double b) { return a * b; }
DEV float op_div(float a, float b) { return a / b; }
DEV double op_div(double a, double b) { return a / b; }
DEV float op_pow(float a, float b) { return powf(a, b); }
DEV double op_pow(double a, double b) { return pow(a, b); }
DEV float op_maximum(float a, float b) { return (a != a || b != b) ? __int_as_float(0x7fc00000) : (a > b ? a : b); }
DEV double op_maximum(double a, double b) { return (a != a || b != b) ? __longlong_as_double(0x7ff8000000000000LL) : (a > b ? a : b); }
DEV float op_minimum(float a, float b) { return (a != a || b != b) ? __int_as_float(0x7fc00000) : (a < b ? a : b); }
DEV double op_minimum(double a, double b) { return (a != a || b != b) ? __longlong_as_double(0x7ff8000000000000LL) : (a < b ? a : b); }
DEV float op_atan2(float a, float b) { return atan2f(a, b); }
DEV double op_atan2(double a, double b) { return atan2(a, b); }
DEV float op_fmod(float a, float b) { return fmodf(a, b); }
DEV double op_fmod(double a, double b) { return fmod(a, b); }
// ATen's remainder: fmod moved to the divisor's sign.
DEV float op_remainder(float a, float b) {
    const float m = fmodf(a, b);
    return (m != 0.f && ((b < 0.f) != (m < 0.f))) ? m + b : m;
}
DEV double op_remainder(double a, double b) {
    const double m = fmod(a, b);
    return (m != 0.0 && ((b < 0.0) != (m < 0.0))) ? m + b : m;
}
// ATen's div_floor_floating (see cpu/num.rs).
DEV float op_floor_divide(float a, float b) {
    if (b == 0.f) return a / b;
    const float m = fmodf(a, b);
    float d = (a - m) / b;
    if (m != 0.f && ((b < 0.f) != (m < 0.f))) d -= 1.f;
    if (d != 0.f) {
        const float f = floorf(d);
        return (d - f > 0.5f) ? f + 1.f : f;
    }
    return copysignf(0.f, a / b);
}
DEV double op_floor_divide(double a, double b) {
    if (b == 0.0) return a / b;
    const double m = fmod(a, b);
    double d = (a - m) / b;
    if (m != 0.0 && ((b < 0.0) != (m < 0.0))) d -= 1.0;
    if (d != 0.0) {
        const double f = floor(d);
        return (d - f > 0.5) ? f + 1.0 : f;
    }
    return copysign(0.0, a / b);
}

// Integer arithmetic wraps (computed in the unsigned type of the same width).
#define INT_BINARY(T, U)                                                             \
    DEV T op_add(T a, T b) { return (T)((U)a + (U)b); }                              \
    DEV T op_sub(T a, T b) { return (T)((U)a - (U)b); }                              \
    DEV T op_mul(T a, T b) { return (T)((U)a * (U)b); }                              \
    DEV T op_maximum(T a, T b) { return a > b ? a : b; }                             \
    DEV T op_minimum(T a, T b) { return a < b ? a : b; }                             \
    /* A negative exponent gives 1/a truncated: 1 for 1, +-1 for -1 (by the   */ \
    /* exponent's parity), 0 otherwise; the whole u64 exponent range counts.   */ \
    DEV T op_pow(T a, T b) {                                                          \
        if (b < 0) return a == 1 ? (T)1 : (a == (T)-1 ? ((b & 1) ? (T)-1 : (T)1) : (T)0); \
        u64 e = (u64)b;                                                               \
        U base = (U)a, r = 1;                                                         \
        while (e) {                                                                   \
            if (e & 1u) r = r * base;                                                 \
            base = base * base;                                                       \
            e >>= 1;                                                                  \
        }                                                                             \
        return (T)r;                                                                  \
    }

INT_BINARY(i64, u64)
INT_BINARY(i32, u32)

// Floor division; 0 for a zero divisor; MIN / -1 wraps to MIN.
DEV i64 op_div(i64 a, i64 b) {
    if (b == 0) return 0;
    if (b == -1) return (i64)(0ull - (u64)a);
    i64 q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) q -= 1;
    return q;
}
DEV i32 op_div(i32 a, i32 b) {
    if (b == 0) return 0;
    if (b == -1) return (i32)(0u - (u32)a);
    i32 q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) q -= 1;
    return q;
}

// fmod truncates, remainder floors (the divisor's sign); 0 for a zero
// divisor, and for -1 (MIN % -1 would trap; every x % -1 is 0).
#define INT_REM(T, U)                                                                  \
    DEV T op_fmod(T a, T b) { return (b == 0 || b == (T)-1) ? (T)0 : (T)(a % b); }     \
    DEV T op_remainder(T a, T b) {                                                     \
        if (b == 0 || b == (T)-1) return 0;                                            \
        const T r = a % b;                                                             \
        return (r != 0 && ((r < 0) != (b < 0))) ? (T)((U)r + (U)b) : r;                \
    }                                                                                  \
    DEV T op_floor_divide(T a, T b) { return op_div(a, b); }

INT_REM(i64, u64)
INT_REM(i32, u32)

DEV u8 op_add(u8 a, u8 b) { return (u8)(a + b); }
DEV u8 op_sub(u8 a, u8 b) { return (u8)(a - b); }
DEV u8 op_mul(u8 a, u8 b) { return (u8)((u32)a * (u32)b); }
DEV u8 op_div(u8 a, u8 b) { return b == 0 ? 0 : (u8)(a / b); }
DEV u8 op_fmod(u8 a, u8 b) { return b == 0 ? 0 : (u8)(a % b); }
DEV u8 op_remainder(u8 a, u8 b) { return op_fmod(a, b); }
DEV u8 op_floor_divide(u8 a, u8 b) { return op_div(a, b); }
DEV u8 op_maximum(u8 a, u8 b) { return a > b ? a : b; }
DEV u8 op_minimum(u8 a, u8 b) { return a < b ? a : b; }
DEV u8 op_pow(u8 a, u8 b) {
    u32 e = b, base = a, r = 1;
    while (e) {
        if (e & 1u) r = (r * base) & 0xffu;
        base = (base * base) & 0xffu;
        e >>= 1;
    }
    return (u8)r;
}

template <typename C> DEV u8 op_eq(C a, C b) { return a == b; }
template <typename C> DEV u8 op_ne(C a, C b) { return a != b; }
template <typename C> DEV u8 op_lt(C a, C b) { return a < b; }
template <typename C> DEV u8 op_le(C a, C b) { return a <= b; }
template <typename C> DEV u8 op_gt(C a, C b) { return a > b; }
template <typename C> DEV u8 op_ge(C a, C b) { return a >= b; }

// Arithmetic: out is T.
#define BINARY_KERNEL(NAME, SUF, T)                                                            \
    KERNEL void binary_##NAME##_##SUF(Geom<3> g, i64 n, T* out, const T* a, const T* b) {       \
        if (g.rank == 0) {                                                                     \
            dense_map2(n, out, a, b, [](T x, T y) { return Store<T>::from(op_##NAME(load(x), load(y))); }); \
            return;                                                                            \
        }                                                                                      \
        for_each<3>(g, n, [&](const i64* o) {                                                   \
            out[o[0]] = Store<T>::from(op_##NAME(load(a[o[1]]), load(b[o[2]])));                \
        });                                                                                    \
    }                                                                                          \
    KERNEL void bscalar_##NAME##_##SUF(Geom<2> g, i64 n, T* out, const T* a, u64 sb) {          \
        const auto s = load(from_bits<T>(sb));                                                 \
        for_each<2>(g, n, [&](const i64* o) {                                                   \
            out[o[0]] = Store<T>::from(op_##NAME(load(a[o[1]]), s));                            \
        });                                                                                    \
    }

// Comparisons: out is bool.
#define COMPARE_KERNEL(NAME, SUF, T)                                                           \
    KERNEL void binary_##NAME##_##SUF(Geom<3> g, i64 n, u8* out, const T* a, const T* b) {      \
        for_each<3>(g, n, [&](const i64* o) { out[o[0]] = op_##NAME(load(a[o[1]]), load(b[o[2]])); }); \
    }                                                                                          \
    KERNEL void bscalar_##NAME##_##SUF(Geom<2> g, i64 n, u8* out, const T* a, u64 sb) {         \
        const auto s = load(from_bits<T>(sb));                                                 \
        for_each<2>(g, n, [&](const i64* o) { out[o[0]] = op_##NAME(load(a[o[1]]), s); });      \
    }

#define BINARY_ALL_OPS(SUF, T)        \
    BINARY_KERNEL(add, SUF, T)        \
    BINARY_KERNEL(sub, SUF, T)        \
    BINARY_KERNEL(mul, SUF, T)        \
    BINARY_KERNEL(div, SUF, T)        \
    BINARY_KERNEL(pow, SUF, T)        \
    BINARY_KERNEL(maximum, SUF, T)    \
    BINARY_KERNEL(minimum, SUF, T)    \
    COMPARE_KERNEL(eq, SUF, T)        \
    COMPARE_KERNEL(ne, SUF, T)        \
    COMPARE_KERNEL(lt, SUF, T)        \
    COMPARE_KERNEL(le, SUF, T)        \
    COMPARE_KERNEL(gt, SUF, T)        \
    COMPARE_KERNEL(ge, SUF, T)

// Not on bool (BinaryOp::computes_in): fmod, remainder, floor_divide on
// every numeric dtype, atan2 on floats only.
#define BINARY_NUMERIC_OPS(SUF, T)     \
    BINARY_ALL_OPS(SUF, T)             \
    BINARY_KERNEL(fmod, SUF, T)        \
    BINARY_KERNEL(remainder, SUF, T)   \
    BINARY_KERNEL(floor_divide, SUF, T)

#define BINARY_FLOAT_OPS(SUF, T)       \
    BINARY_NUMERIC_OPS(SUF, T)         \
    BINARY_KERNEL(atan2, SUF, T)

BINARY_FLOAT_OPS(f32, float)
BINARY_FLOAT_OPS(f64, double)
BINARY_FLOAT_OPS(f16, f16)
BINARY_FLOAT_OPS(bf16, bf16)
BINARY_NUMERIC_OPS(i64, i64)
BINARY_NUMERIC_OPS(i32, i32)
BINARY_NUMERIC_OPS(u8, u8)

// bool: add/maximum are `or`; sub/mul/div/pow/minimum are `and` (the op layer
// refuses sub/div/pow on bool); comparisons order false < true.
DEV u8 bool_or(u8 a, u8 b) { return (u8)((a != 0) | (b != 0)); }
DEV u8 bool_and(u8 a, u8 b) { return (u8)((a != 0) & (b != 0)); }
DEV u8 bool_cmp_eq(u8 a, u8 b) { return (a != 0) == (b != 0); }
DEV u8 bool_cmp_ne(u8 a, u8 b) { return (a != 0) != (b != 0); }
DEV u8 bool_cmp_lt(u8 a, u8 b) { return (a == 0) & (b != 0); }
DEV u8 bool_cmp_le(u8 a, u8 b) { return (a == 0) | (b != 0); }
DEV u8 bool_cmp_gt(u8 a, u8 b) { return (a != 0) & (b == 0); }
DEV u8 bool_cmp_ge(u8 a, u8 b) { return (a != 0) | (b == 0); }

#define BOOL_KERNEL(NAME, FN)                                                                  \
    KERNEL void binary_##NAME##_bool(Geom<3> g, i64 n, u8* out, const u8* a, const u8* b) {     \
        for_each<3>(g, n, [&](const i64* o) { out[o[0]] = FN(a[o[1]], b[o[2]]); });              \
    }                                                                                          \
    KERNEL void bscalar_##NAME##_bool(Geom<2> g, i64 n, u8* out, const u8* a, u64 sb) {         \
        const u8 s = (u8)(sb & 0xff);                                                          \
        for_each<2>(g, n, [&](const i64* o) { out[o[0]] = FN(a[o[1]], s); });                    \
    }

BOOL_KERNEL(add, bool_or)
BOOL_KERNEL(maximum, bool_or)
BOOL_KERNEL(sub, bool_and)
BOOL_KERNEL(mul, bool_and)
BOOL_KERNEL(div, bool_and)
BOOL_KERNEL(pow, bool_and)
BOOL_KERNEL(minimum, bool_and)
BOOL_KERNEL(eq, bool_cmp_eq)
BOOL_KERNEL(ne, bool_cmp_ne)
BOOL_KERNEL(lt, bool_cmp_lt)
BOOL_KERNEL(le, bool_cmp_le)
BOOL_KERNEL(gt, bool_cmp_gt)
BOOL_KERNEL(ge, bool_cmp_ge)
