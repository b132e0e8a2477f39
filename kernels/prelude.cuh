// tensorscope kernel prelude.
//
// Prepended to every kernels/*.cu before NVRTC compiles it (the Rust side
// does the concatenation; see src/backend/cuda/kernels.rs), so the kernels
// need no include path and no CUDA toolkit header.
//
// Conventions shared with the Rust side:
// * element types are named f32 f64 f16 bf16 i64 i32 u8 bool, exactly as
//   `DType`'s kernel suffixes (`bool` is stored as one byte, 0 or 1);
// * kernel names are `<family>_<op>_<dtype>` with <op> the name of the
//   matching `UnaryOp` / `BinaryOp` / `ReduceOp` variant (`UnaryOp::name()`),
//   or `<family>_b<bytes>` for kernels that only move bits;
// * strided operands are described by `Geom<N>` (shape plus one stride row
//   per operand, at most TS_MAX_RANK dimensions after the host has dropped
//   size-1 dimensions and merged contiguous ones). `rank == 0` means every
//   operand is dense (element i is at offset i), the fast path;
// * pointers arrive already offset to the operand's first element;
// * conversions between dtypes follow Rust's `as` through f64, as the CPU
//   backend does (`D::from_f64(s.to_f64())`): float to integer truncates and
//   saturates, NaN becomes 0, and anything non-zero (NaN included) is `true`.

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
typedef int i32;
typedef long long i64;

#define TS_MAX_RANK 25
#define KERNEL extern "C" __global__
#define DEV __device__ __forceinline__

// Grid-stride loop over [0, n).
#define GRID_LOOP(i, n) \
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < (i64)(n); i += (i64)blockDim.x * gridDim.x)

// ---------------------------------------------------------------------------
// Half-precision storage types and their conversions.
// ---------------------------------------------------------------------------

struct __align__(2) f16 { u16 bits; };
struct __align__(2) bf16 { u16 bits; };

DEV float f16_to_float(f16 h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h.bits));
    return f;
}
DEV f16 float_to_f16(float f) {
    f16 h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.bits) : "f"(f));
    return h;
}
DEV float bf16_to_float(bf16 h) { return __uint_as_float(((u32)h.bits) << 16); }
// Round to nearest even; NaN stays a (quiet) NaN. Same as half::bf16::from_f32.
DEV bf16 float_to_bf16(float f) {
    u32 u = __float_as_uint(f);
    bf16 r;
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        r.bits = (u16)((u >> 16) | 0x40u);
        return r;
    }
    u += 0x7fffu + ((u >> 16) & 1u);
    r.bits = (u16)(u >> 16);
    return r;
}
// f64 -> f32 rounding to odd: a second rounding to a format at least two bits
// narrower (f16, bf16) is then exactly the correctly rounded f64 -> f16/bf16.
DEV float double_to_float_odd(double d) {
    float f = __double2float_rz(d);
    if (d == d && (double)f != d) f = __uint_as_float(__float_as_uint(f) | 1u);
    return f;
}

// ---------------------------------------------------------------------------
// Compute types: each storage type T is loaded as C = ctype<T>.
// f16/bf16/f32 compute in float, f64 in double, integers as themselves,
// bool as u8 (0/1).
// ---------------------------------------------------------------------------

DEV float load(f16 x) { return f16_to_float(x); }
DEV float load(bf16 x) { return bf16_to_float(x); }
DEV float load(float x) { return x; }
DEV double load(double x) { return x; }
DEV i64 load(i64 x) { return x; }
DEV i32 load(i32 x) { return x; }
DEV u8 load(u8 x) { return x; }

// NaN test of a computed value (any type with `!=`; false for integers).
template <typename C> DEV bool is_nan(C x) { return x != x; }

template <typename T> struct Store;
template <> struct Store<f16> { static DEV f16 from(float v) { return float_to_f16(v); } };
template <> struct Store<bf16> { static DEV bf16 from(float v) { return float_to_bf16(v); } };
template <> struct Store<float> { static DEV float from(float v) { return v; } };
template <> struct Store<double> { static DEV double from(double v) { return v; } };
template <> struct Store<i64> { static DEV i64 from(i64 v) { return v; } };
template <> struct Store<i32> { static DEV i32 from(i32 v) { return v; } };
template <> struct Store<u8> { static DEV u8 from(u8 v) { return v; } };

// Conversions through f64 with Rust `as` semantics (see the header comment).
DEV double to_f64(f16 x) { return (double)f16_to_float(x); }
DEV double to_f64(bf16 x) { return (double)bf16_to_float(x); }
DEV double to_f64(float x) { return (double)x; }
DEV double to_f64(double x) { return x; }
DEV double to_f64(i64 x) { return (double)x; }
DEV double to_f64(i32 x) { return (double)x; }
DEV double to_f64(u8 x) { return (double)x; }

template <typename T> struct FromF64;
template <> struct FromF64<f16> { static DEV f16 cvt(double d) { return float_to_f16(double_to_float_odd(d)); } };
template <> struct FromF64<bf16> { static DEV bf16 cvt(double d) { return float_to_bf16(double_to_float_odd(d)); } };
template <> struct FromF64<float> { static DEV float cvt(double d) { return (float)d; } };
template <> struct FromF64<double> { static DEV double cvt(double d) { return d; } };
template <> struct FromF64<i64> {
    static DEV i64 cvt(double d) {
        if (d != d) return 0;
        if (d >= 9223372036854775807.0) return 9223372036854775807LL;
        if (d <= -9223372036854775808.0) return (i64)(-9223372036854775807LL - 1);
        return (i64)d;
    }
};
template <> struct FromF64<i32> {
    static DEV i32 cvt(double d) {
        if (d != d) return 0;
        if (d >= 2147483647.0) return 2147483647;
        if (d <= -2147483648.0) return (i32)(-2147483647 - 1);
        return (i32)d;
    }
};
template <> struct FromF64<u8> {
    static DEV u8 cvt(double d) {
        if (d != d) return 0;
        if (d >= 255.0) return 255;
        if (d <= 0.0) return 0;
        return (u8)d;
    }
};

// ---------------------------------------------------------------------------
// Strided geometry.
// ---------------------------------------------------------------------------

template <int N> struct Geom {
    i32 rank;  // 0: every operand is dense
    i32 pad_;
    i64 shape[TS_MAX_RANK];
    i64 strides[N][TS_MAX_RANK];
};

// Element offsets of linear (row-major) index i in each of the N operands.
template <int N> DEV void geom_offsets(const Geom<N>& g, i64 i, i64* off) {
#pragma unroll
    for (int k = 0; k < N; ++k) off[k] = 0;
    for (int d = g.rank - 1; d >= 0; --d) {
        const i64 s = g.shape[d];
        const i64 idx = i % s;
        i /= s;
#pragma unroll
        for (int k = 0; k < N; ++k) off[k] += idx * g.strides[k][d];
    }
}

// Calls f(off) for every element, off[k] being operand k's offset.
template <int N, typename F> DEV void for_each(const Geom<N>& g, i64 n, F f) {
    i64 off[N];
    if (g.rank == 0) {
        GRID_LOOP(i, n) {
#pragma unroll
            for (int k = 0; k < N; ++k) off[k] = i;
            f(off);
        }
    } else {
        GRID_LOOP(i, n) {
            geom_offsets<N>(g, i, off);
            f(off);
        }
    }
}

// Dense operands only (every layout contiguous, rank 0): out[i] = f(a[i],
// b[i]). Each thread loads four elements, a grid stride apart, before it
// stores any, so four loads per operand are in flight (for_each's loop
// issues one load, then waits for it before the store, and reached 83% of
// a copy's bandwidth on an H100). The loads of a step come before its
// stores, so `out` may be `a` or `b` itself (an in-place op); an operand
// that overlaps `out` otherwise was copied by the op layer first (GUIDE 10,
// row 2), so no partial overlap reaches a kernel.
template <typename O, typename A, typename B, typename F>
DEV void dense_map2(i64 n, O* out, const A* a, const B* b, F f) {
    const i64 stride = (i64)blockDim.x * gridDim.x;
    i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n; i += 4 * stride) {
        A x[4];
        B y[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            x[u] = a[i + u * stride];
            y[u] = b[i + u * stride];
        }
#pragma unroll
        for (int u = 0; u < 4; ++u) out[i + u * stride] = f(x[u], y[u]);
    }
    for (; i < n; i += stride) out[i] = f(a[i], b[i]);
}

// Bit patterns of 1, 2, 4 and 8 bytes, for kernels that only move bits.
template <int B> struct Bits;
template <> struct Bits<1> { typedef u8 T; };
template <> struct Bits<2> { typedef u16 T; };
template <> struct Bits<4> { typedef u32 T; };
template <> struct Bits<8> { typedef u64 T; };

// The value of a scalar argument passed as its element's bits in a u64.
template <typename T> DEV T from_bits(u64 b) {
    T v;
    const u8* src = (const u8*)&b;
    u8* dst = (u8*)&v;
#pragma unroll
    for (int i = 0; i < (int)sizeof(T); ++i) dst[i] = src[i];
    return v;
}

// ---------------------------------------------------------------------------
// Block reductions through shared memory, for any accumulator type.
// ---------------------------------------------------------------------------

#define TS_BLOCK 256
#define TS_WARP 32

// Reduces `v` over the `width` threads of one group (a whole block of
// TS_BLOCK threads, or one warp) with `combine`; `scratch` holds one slot per
// thread of the block. The result is valid in the group's first thread.
template <typename A, typename F>
DEV A group_reduce(A v, A* scratch, int width, F combine) {
    const int tid = threadIdx.x;
    const int base = tid - (tid % width);
    scratch[tid] = v;
    if (width == TS_WARP) __syncwarp(); else __syncthreads();
    for (int s = width / 2; s > 0; s >>= 1) {
        const int lane = tid - base;
        if (lane < s) scratch[tid] = combine(scratch[tid], scratch[tid + s]);
        if (width == TS_WARP) __syncwarp(); else __syncthreads();
    }
    A r = scratch[base];
    if (width == TS_WARP) __syncwarp(); else __syncthreads();
    return r;
}

// The bits of `v` in the low bytes of a u64 (the inverse of from_bits).
template <typename T> DEV u64 to_bits(T v) {
    u64 b = 0;
    const u8* src = (const u8*)&v;
    u8* dst = (u8*)&b;
#pragma unroll
    for (int i = 0; i < (int)sizeof(T); ++i) dst[i] = src[i];
    return b;
}

// Atomic read-modify-write of a 1- or 2-byte value through a CAS loop on the
// aligned 32-bit word that holds it.
template <typename T, typename F> DEV void atomic_update_small(T* p, F f) {
    const u64 addr = (u64)p;
    u32* word = (u32*)(addr & ~(u64)3);
    const u32 shift = (u32)(addr & 3) * 8;
    const u32 mask = (sizeof(T) == 1 ? 0xffu : 0xffffu) << shift;
    u32 old = *word, assumed;
    do {
        assumed = old;
        T cur = from_bits<T>((u64)((assumed & mask) >> shift));
        const u32 repl = (assumed & ~mask) | (((u32)to_bits(f(cur)) << shift) & mask);
        old = atomicCAS(word, assumed, repl);
    } while (assumed != old);
}

DEV void atomic_add(float* p, float v) { atomicAdd(p, v); }
DEV void atomic_add(double* p, double v) { atomicAdd(p, v); }
DEV void atomic_add(i32* p, i32 v) { atomicAdd(p, v); }
DEV void atomic_add(i64* p, i64 v) { atomicAdd((u64*)p, (u64)v); }
DEV void atomic_add(f16* p, f16 v) {
    const float a = f16_to_float(v);
    atomic_update_small(p, [a](f16 x) { return float_to_f16(f16_to_float(x) + a); });
}
DEV void atomic_add(bf16* p, bf16 v) {
    const float a = bf16_to_float(v);
    atomic_update_small(p, [a](bf16 x) { return float_to_bf16(bf16_to_float(x) + a); });
}
DEV void atomic_add(u8* p, u8 v) {
    atomic_update_small(p, [v](u8 x) { return (u8)(x + v); });
}

// Records the first out-of-range index a kernel met: err[0] becomes 1 and
// err[1] the index. The host reads both after the launch.
DEV void report_bad_index(i64* err, i64 idx) {
    if (atomicCAS((u64*)err, 0ull, 1ull) == 0ull) err[1] = idx;
}

// ---------------------------------------------------------------------------
// Philox 4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2,
// 3"): counter-based, so element i's random bits depend only on (seed, i).
// ---------------------------------------------------------------------------

struct Philox { u32 v[4]; };

DEV Philox philox(u64 seed, u64 counter) {
    u32 c0 = (u32)counter, c1 = (u32)(counter >> 32), c2 = 0, c3 = 0;
    u32 k0 = (u32)seed, k1 = (u32)(seed >> 32);
#pragma unroll
    for (int r = 0; r < 10; ++r) {
        const u32 hi0 = __umulhi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
        const u32 hi1 = __umulhi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    Philox p;
    p.v[0] = c0; p.v[1] = c1; p.v[2] = c2; p.v[3] = c3;
    return p;
}

// Uniform in [0, 1) from 24 random bits (float) or 53 (double).
DEV float u01f(u32 x) { return (float)(x >> 8) * (1.0f / 16777216.0f); }
DEV double u01d(u32 hi, u32 lo) {
    return (double)((((u64)hi) << 21) ^ (u64)(lo >> 11)) * (1.0 / 9007199254740992.0);
}
