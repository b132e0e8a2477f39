// Copies, casts, fills and selections.
//
//   copy_b<B>(Geom<2> g, i64 n, bits* out, const bits* a)      same dtype, B bytes per element
//   cast_<src>_<dst>(Geom<2> g, i64 n, D* out, const S* a)      every pair of distinct dtypes
//   fill_b<B>(Geom<1> g, i64 n, bits* out, u64 value)           value = the element's bits
//   where_b<B>(Geom<4> g, i64 n, bits* out, const u8* cond, const bits* a, const bits* b)
//   masked_fill_b<B>(Geom<2> g, i64 n, bits* out, const u8* mask, u64 value)
//
// Operand 0 of every geometry is the output. Casts follow Rust's `as`
// through f64, like the CPU backend (see the prelude).

#define COPY_KERNELS(B)                                                                          \
    KERNEL void copy_b##B(Geom<2> g, i64 n, Bits<B>::T* out, const Bits<B>::T* a) {               \
        for_each<2>(g, n, [&](const i64* o) { out[o[0]] = a[o[1]]; });                           \
    }                                                                                            \
    KERNEL void fill_b##B(Geom<1> g, i64 n, Bits<B>::T* out, u64 value) {                         \
        const Bits<B>::T v = (Bits<B>::T)value;                                                  \
        for_each<1>(g, n, [&](const i64* o) { out[o[0]] = v; });                                 \
    }                                                                                            \
    KERNEL void where_b##B(Geom<4> g, i64 n, Bits<B>::T* out, const u8* c, const Bits<B>::T* a,  \
                           const Bits<B>::T* b) {                                                \
        for_each<4>(g, n, [&](const i64* o) { out[o[0]] = c[o[1]] ? a[o[2]] : b[o[3]]; });      \
    }                                                                                            \
    KERNEL void masked_fill_b##B(Geom<2> g, i64 n, Bits<B>::T* out, const u8* mask, u64 value) { \
        const Bits<B>::T v = (Bits<B>::T)value;                                                  \
        for_each<2>(g, n, [&](const i64* o) {                                                     \
            if (mask[o[1]]) out[o[0]] = v;                                                       \
        });                                                                                      \
    }

COPY_KERNELS(1)
COPY_KERNELS(2)
COPY_KERNELS(4)
COPY_KERNELS(8)

// ----------------------------------------------------------------- casts ---

// PyTorch's casts, as the CPU's (src/backend/cpu/elementwise.rs, CastTo):
// to an integer, through i64 (truncated toward zero, saturating there, NaN
// 0) and then wrapped to the width (300.7 to u8 is 44, -1 is 255); between
// integers, two's complement wrapping without f64 (i64 263 to u8 is 7); to
// a float, rounded once from f64.
template <typename D> struct WrapF64 { static DEV D cvt(double d) { return FromF64<D>::cvt(d); } };
template <> struct WrapF64<i32> { static DEV i32 cvt(double d) { return (i32)(u32)(u64)FromF64<i64>::cvt(d); } };
template <> struct WrapF64<u8> { static DEV u8 cvt(double d) { return (u8)(u64)FromF64<i64>::cvt(d); } };
template <typename S, typename D> struct Cast {
    static DEV D cvt(S x) { return WrapF64<D>::cvt(to_f64(x)); }
};
#define INT_CAST(S, D, U) \
    template <> struct Cast<S, D> { static DEV D cvt(S x) { return (D)(U)(u64)(i64)x; } };
INT_CAST(i64, i32, u32)
INT_CAST(i64, u8, u8)
INT_CAST(i32, i64, u64)
INT_CAST(i32, u8, u8)
INT_CAST(u8, i64, u64)
INT_CAST(u8, i32, u32)
// Shortcuts that give the same results: f32 holds every f16/bf16 value
// exactly, and rounding an f32 once to f16/bf16 equals rounding its f64.
template <> struct Cast<f16, float> { static DEV float cvt(f16 x) { return f16_to_float(x); } };
template <> struct Cast<bf16, float> { static DEV float cvt(bf16 x) { return bf16_to_float(x); } };
template <> struct Cast<float, f16> { static DEV f16 cvt(float x) { return float_to_f16(x); } };
template <> struct Cast<float, bf16> { static DEV bf16 cvt(float x) { return float_to_bf16(x); } };
template <> struct Cast<f16, bf16> { static DEV bf16 cvt(f16 x) { return float_to_bf16(f16_to_float(x)); } };
template <> struct Cast<bf16, f16> { static DEV f16 cvt(bf16 x) { return float_to_f16(bf16_to_float(x)); } };

// bool is read and written as a byte: to bool means `!= 0` (NaN is true),
// from bool gives 0 or 1.
struct Bool { u8 v; };
template <typename S> struct Cast<S, Bool> {
    static DEV u8 cvt(S x) { return to_f64(x) != 0.0; }
};
template <typename D> struct Cast<Bool, D> {
    static DEV D cvt(u8 x) { return FromF64<D>::cvt(x ? 1.0 : 0.0); }
};

template <typename S> struct StoreTy { typedef S T; };
template <> struct StoreTy<Bool> { typedef u8 T; };

#define CAST_KERNEL(SS, S, DS, D)                                                                   \
    KERNEL void cast_##SS##_##DS(Geom<2> g, i64 n, StoreTy<D>::T* out, const StoreTy<S>::T* a) {     \
        for_each<2>(g, n, [&](const i64* o) { out[o[0]] = Cast<S, D>::cvt(a[o[1]]); });              \
    }

#define CAST_FROM(SS, S)                                     \
    CAST_TO_ALL_BUT(SS, S)

// Every destination but the source's own dtype (same-dtype copies use copy_b<B>).
#define CAST_TO_ALL_BUT(SS, S)                                          \
    CAST_IF_##SS##_f32(CAST_KERNEL(SS, S, f32, float))                  \
    CAST_IF_##SS##_f64(CAST_KERNEL(SS, S, f64, double))                 \
    CAST_IF_##SS##_f16(CAST_KERNEL(SS, S, f16, f16))                    \
    CAST_IF_##SS##_bf16(CAST_KERNEL(SS, S, bf16, bf16))                 \
    CAST_IF_##SS##_i64(CAST_KERNEL(SS, S, i64, i64))                    \
    CAST_IF_##SS##_i32(CAST_KERNEL(SS, S, i32, i32))                    \
    CAST_IF_##SS##_u8(CAST_KERNEL(SS, S, u8, u8))                       \
    CAST_IF_##SS##_bool(CAST_KERNEL(SS, S, bool, Bool))

#define TS_KEEP(x) x
#define TS_DROP(x)

// CAST_IF_<src>_<dst>(x) keeps x unless src == dst.
#define CAST_IF_f32_f32 TS_DROP
#define CAST_IF_f32_f64 TS_KEEP
#define CAST_IF_f32_f16 TS_KEEP
#define CAST_IF_f32_bf16 TS_KEEP
#define CAST_IF_f32_i64 TS_KEEP
#define CAST_IF_f32_i32 TS_KEEP
#define CAST_IF_f32_u8 TS_KEEP
#define CAST_IF_f32_bool TS_KEEP
#define CAST_IF_f64_f32 TS_KEEP
#define CAST_IF_f64_f64 TS_DROP
#define CAST_IF_f64_f16 TS_KEEP
#define CAST_IF_f64_bf16 TS_KEEP
#define CAST_IF_f64_i64 TS_KEEP
#define CAST_IF_f64_i32 TS_KEEP
#define CAST_IF_f64_u8 TS_KEEP
#define CAST_IF_f64_bool TS_KEEP
#define CAST_IF_f16_f32 TS_KEEP
#define CAST_IF_f16_f64 TS_KEEP
#define CAST_IF_f16_f16 TS_DROP
#define CAST_IF_f16_bf16 TS_KEEP
#define CAST_IF_f16_i64 TS_KEEP
#define CAST_IF_f16_i32 TS_KEEP
#define CAST_IF_f16_u8 TS_KEEP
#define CAST_IF_f16_bool TS_KEEP
#define CAST_IF_bf16_f32 TS_KEEP
#define CAST_IF_bf16_f64 TS_KEEP
#define CAST_IF_bf16_f16 TS_KEEP
#define CAST_IF_bf16_bf16 TS_DROP
#define CAST_IF_bf16_i64 TS_KEEP
#define CAST_IF_bf16_i32 TS_KEEP
#define CAST_IF_bf16_u8 TS_KEEP
#define CAST_IF_bf16_bool TS_KEEP
#define CAST_IF_i64_f32 TS_KEEP
#define CAST_IF_i64_f64 TS_KEEP
#define CAST_IF_i64_f16 TS_KEEP
#define CAST_IF_i64_bf16 TS_KEEP
#define CAST_IF_i64_i64 TS_DROP
#define CAST_IF_i64_i32 TS_KEEP
#define CAST_IF_i64_u8 TS_KEEP
#define CAST_IF_i64_bool TS_KEEP
#define CAST_IF_i32_f32 TS_KEEP
#define CAST_IF_i32_f64 TS_KEEP
#define CAST_IF_i32_f16 TS_KEEP
#define CAST_IF_i32_bf16 TS_KEEP
#define CAST_IF_i32_i64 TS_KEEP
#define CAST_IF_i32_i32 TS_DROP
#define CAST_IF_i32_u8 TS_KEEP
#define CAST_IF_i32_bool TS_KEEP
#define CAST_IF_u8_f32 TS_KEEP
#define CAST_IF_u8_f64 TS_KEEP
#define CAST_IF_u8_f16 TS_KEEP
#define CAST_IF_u8_bf16 TS_KEEP
#define CAST_IF_u8_i64 TS_KEEP
#define CAST_IF_u8_i32 TS_KEEP
#define CAST_IF_u8_u8 TS_DROP
#define CAST_IF_u8_bool TS_KEEP
#define CAST_IF_bool_f32 TS_KEEP
#define CAST_IF_bool_f64 TS_KEEP
#define CAST_IF_bool_f16 TS_KEEP
#define CAST_IF_bool_bf16 TS_KEEP
#define CAST_IF_bool_i64 TS_KEEP
#define CAST_IF_bool_i32 TS_KEEP
#define CAST_IF_bool_u8 TS_KEEP
#define CAST_IF_bool_bool TS_DROP

CAST_FROM(f32, float)
CAST_FROM(f64, double)
CAST_FROM(f16, f16)
CAST_FROM(bf16, bf16)
CAST_FROM(i64, i64)
CAST_FROM(i32, i32)
CAST_FROM(u8, u8)
CAST_FROM(bool, Bool)
