// Reductions over a set of dimensions.
//
//   reduce_<op>_<dtype>(RGeom g, i64 n_out, i64 n_red, O* out, const T* in, i32 group,
//                       u8* work, i64 splits)
//   reduce_var_<dtype>(RGeom g, i64 n_out, i64 n_red, T* out, const T* in, i32 group,
//                      i64 correction, i32 take_sqrt, u8* work, i64 splits)
//
// <op> is the lower-case `ReduceOp` variant: sum, mean, max, min, argmax,
// argmin, prod, or logsumexp. Output dtypes: sum and prod of integers and
// bool give i64, of floats the input dtype; mean, logsumexp and var are
// defined on floats only; max and min keep the dtype; argmax and argmin give
// i64 (the linear index over the reduced dimensions, row-major; for one
// dimension, the index along it). reduce_var divides the sum of squared
// deviations by max(0, N - correction) (0/0 is NaN, as in PyTorch) and takes
// the square root when take_sqrt != 0 (std).
//
// With splits == 1, one group of `group` threads (32: a warp, or TS_BLOCK:
// the whole block) reduces one output element; launch with TS_BLOCK threads
// per block, `work` unused (may be null).
//
// With splits > 1 (few outputs, long reductions: a full sum would otherwise
// run on one block of one multiprocessor), `splits` blocks share each
// output: block unit u = o * splits + s folds the s-th of `splits` equal
// slices of output o's reduction (group must be TS_BLOCK) and stores its
// accumulator in work[u] (slots of TS_PARTIAL bytes); the last block of an
// output to finish (a per-output u32 counter after the n_out * splits
// slots, zeroed by the host before the launch) folds the slots in slice
// order, so the result does not depend on which block finished last, and
// writes the output. `make` still sees the element's index over the whole
// reduction (argmax/argmin).
// Float sums, means, products and variances accumulate in f64 and round
// once to the output (T::from_f64), as the CPU backend does; logsumexp
// takes its max and exponentials in f32 (f64 for f64) and sums them in f64,
// also as the CPU does. Integers accumulate in 64 bits, wrapping.
// max/min propagate NaN; argmax/argmin return the first NaN if there is one,
// else the first occurrence of the extreme value. An empty reduction writes
// the identity (0 for sum, 1 for prod, NaN for mean and var, -inf for
// logsumexp, -1 for argmax/argmin, the lowest/highest value for max/min):
// the op layer refuses the undefined ones before launching.
//
//   matmul_<int dtype>(Geom<3> g, i64 n, T* out, const T* a, const T* b,
//                      i64 k, i64 a_stride_k, i64 b_stride_k)
//       integer matmul (cuBLAS has none): out[off0] = sum_p a[off1 + p*ak] * b[off2 + p*bk],
//       wrapping like the CPU's. Operand 0 walks the output, operand 1 the
//       rows of a (stride 0 along the output's columns), operand 2 the
//       columns of b (stride 0 along the output's rows). Grid-stride.

struct RGeom {
    i32 out_rank;
    i32 red_rank;
    i64 out_shape[TS_MAX_RANK];
    i64 out_stride[TS_MAX_RANK];  // output strides over the kept dimensions
    i64 in_stride[TS_MAX_RANK];   // input strides over the kept dimensions
    i64 red_shape[TS_MAX_RANK];
    i64 red_stride[TS_MAX_RANK];  // input strides over the reduced dimensions
};

DEV void kept_offsets(const RGeom& g, i64 o, i64& out_off, i64& in_off) {
    out_off = 0;
    in_off = 0;
    for (int d = g.out_rank - 1; d >= 0; --d) {
        const i64 s = g.out_shape[d];
        const i64 c = o % s;
        o /= s;
        out_off += c * g.out_stride[d];
        in_off += c * g.in_stride[d];
    }
}

DEV i64 red_offset(const RGeom& g, i64 r) {
    if (g.red_rank == 1) return r * g.red_stride[0];
    i64 off = 0;
    for (int d = g.red_rank - 1; d >= 0; --d) {
        const i64 s = g.red_shape[d];
        off += (r % s) * g.red_stride[d];
        r /= s;
    }
    return off;
}

// acc folded with in[in_off + red_offset(g, r)] for r = r, r + step, ...
// below `end`, in that order: the same combines in the same order as the
// plain loop (so the same result, bit for bit), but TS_UNROLL loads are
// issued before their combines, so each thread keeps that many loads in
// flight instead of one (a one-load loop left a full f32 sum at ~1.2 TB/s
// on an H200).
#define TS_UNROLL 8
template <typename Op, typename T>
DEV typename Op::Acc fold_range(typename Op::Acc acc, const T* in, i64 in_off, const RGeom& g, i64 r, i64 end,
                                i64 step) {
    for (; r + (TS_UNROLL - 1) * step < end; r += TS_UNROLL * step) {
        T v[TS_UNROLL];
#pragma unroll
        for (int k = 0; k < TS_UNROLL; ++k) v[k] = in[in_off + red_offset(g, r + k * step)];
#pragma unroll
        for (int k = 0; k < TS_UNROLL; ++k) acc = Op::combine(acc, Op::make(v[k], r + k * step));
    }
    for (; r < end; r += step) acc = Op::combine(acc, Op::make(in[in_off + red_offset(g, r)], r));
    return acc;
}

// Bytes of one partial accumulator slot of a split reduction (the largest
// accumulator, var's Welford triple, takes 24).
#define TS_PARTIAL 32

// The split form of reduce_impl (see the header comment).
template <typename Op, typename T, typename O>
DEV void reduce_split(const RGeom& g, i64 n_out, i64 n_red, O* out, const T* in, const Op& op, u8* work,
                      i64 splits) {
    typedef typename Op::Acc A;
    static_assert(sizeof(A) <= TS_PARTIAL, "a partial accumulator must fit its slot");
    __shared__ __align__(16) unsigned char smem[TS_BLOCK * sizeof(A)];
    __shared__ int last;
    A* scratch = (A*)smem;
    A* slots = (A*)work;
    u32* done = (u32*)(work + (u64)n_out * (u64)splits * TS_PARTIAL);
    const int tid = threadIdx.x;
    const i64 slice = (n_red + splits - 1) / splits;
    // `u` is the same for every thread of the block: uniform barriers.
    for (i64 u = blockIdx.x; u < n_out * splits; u += gridDim.x) {
        const i64 o = u / splits, sl = u % splits;
        const i64 r0 = sl * slice;
        const i64 r1 = r0 + slice < n_red ? r0 + slice : n_red;
        i64 out_off = 0, in_off = 0;
        kept_offsets(g, o, out_off, in_off);
        A acc = Op::identity();
        acc = fold_range<Op, T>(acc, in, in_off, g, r0 + tid, r1, TS_BLOCK);
        acc = group_reduce(acc, scratch, TS_BLOCK, [](A a, A b) { return Op::combine(a, b); });
        if (tid == 0) {
            *(A*)((u8*)slots + (u64)u * TS_PARTIAL) = acc;
            // Publish the slot before counting this block as done (release).
            __threadfence();
            const bool is_last = atomicAdd(&done[o], 1u) == (u32)(splits - 1);
            // Acquire, in the thread whose atomic observed the other blocks'
            // counts, before the barrier hands the result to the block: every
            // other block of `o` published its slot before its count, and the
            // barrier orders this fence before the other threads' reads (a
            // fence in each reading thread after the barrier does not follow
            // the observing atomic in that thread, so the PTX memory model
            // does not order it after the other blocks' stores; this is the
            // pattern of cooperative groups' grid sync).
            if (is_last) __threadfence();
            last = is_last;
        }
        __syncthreads();
        if (last) {
            A a = Op::identity();
            const volatile u8* base = (const volatile u8*)slots + (u64)o * (u64)splits * TS_PARTIAL;
            // Thread t folds slots t, t + TS_BLOCK, ... in order; the tree
            // then combines the threads in order: a fixed order overall.
            for (i64 k = tid; k < splits; k += TS_BLOCK) {
                A part;
                u8* dst = (u8*)&part;
                for (int b = 0; b < (int)sizeof(A); ++b) dst[b] = base[k * TS_PARTIAL + b];
                a = Op::combine(a, part);
            }
            a = group_reduce(a, scratch, TS_BLOCK, [](A x, A y) { return Op::combine(x, y); });
            if (tid == 0) out[out_off] = op.finish(a, n_red);
        }
        __syncthreads();
    }
}

// `op` supplies the fold through its static identity/make/combine and the
// result through `op.finish` (which may read run-time parameters of `op`,
// e.g. var's correction).
template <typename Op, typename T, typename O>
DEV void reduce_impl(const RGeom& g, i64 n_out, i64 n_red, O* out, const T* in, int group, const Op& op, u8* work,
                     i64 splits) {
    if (splits > 1) {
        reduce_split<Op, T, O>(g, n_out, n_red, out, in, op, work, splits);
        return;
    }
    typedef typename Op::Acc A;
    __shared__ __align__(16) unsigned char smem[TS_BLOCK * sizeof(A)];
    A* scratch = (A*)smem;
    const int tid = threadIdx.x;
    const int lane = tid % group;
    const i64 per_block = TS_BLOCK / group;
    // `base` is the same for every thread of the block, so every thread runs
    // the same number of iterations and reaches every barrier.
    for (i64 base = (i64)blockIdx.x * per_block; base < n_out; base += (i64)gridDim.x * per_block) {
        const i64 o = base + tid / group;
        const bool active = o < n_out;
        A acc = Op::identity();
        i64 out_off = 0, in_off = 0;
        if (active) {
            kept_offsets(g, o, out_off, in_off);
            acc = fold_range<Op, T>(acc, in, in_off, g, lane, n_red, group);
        }
        acc = group_reduce(acc, scratch, group, [](A a, A b) { return Op::combine(a, b); });
        if (active && lane == 0) out[out_off] = op.finish(acc, n_red);
    }
}

// Float accumulators are f64 for every float dtype, as on the CPU: an f32
// running sum over a long row loses digits (each of the 256 lanes of a
// block folds n/256 elements), and an f32 product or sum can overflow where
// the f64 one and the CPU's result do not (sum [3e38, 3e38, -3e38]). The
// result is rounded once with T::from_f64 semantics (FromF64: no double
// rounding through f32 for f16/bf16).
template <typename T> struct SumF {
    typedef double Acc;
    static DEV Acc identity() { return 0; }
    static DEV Acc make(T x, i64) { return to_f64(x); }
    static DEV Acc combine(Acc a, Acc b) { return a + b; }
    static DEV T finish(Acc a, i64) { return FromF64<T>::cvt(a); }
};
template <typename T> struct MeanF : SumF<T> {
    typedef double Acc;
    static DEV T finish(Acc a, i64 n) { return FromF64<T>::cvt(a / (double)n); }
};
template <typename T> struct ProdF : SumF<T> {
    typedef double Acc;
    static DEV Acc identity() { return 1; }
    static DEV Acc combine(Acc a, Acc b) { return a * b; }
};
// Integers (and bool) sum and multiply in u64, which wraps like i64.
template <typename T> struct SumI {
    typedef u64 Acc;
    static DEV Acc identity() { return 0; }
    static DEV Acc make(T x, i64) { return (u64)(i64)x; }
    static DEV Acc combine(Acc a, Acc b) { return a + b; }
    static DEV i64 finish(Acc a, i64) { return (i64)a; }
};
template <typename T> struct ProdI : SumI<T> {
    static DEV u64 identity() { return 1; }
    static DEV u64 combine(u64 a, u64 b) { return a * b; }
};


// max / min on the compute type; the identities are the extreme values.
template <typename C> struct Limits;
template <> struct Limits<float> { static DEV float lo() { return -__int_as_float(0x7f800000); } static DEV float hi() { return __int_as_float(0x7f800000); } };
template <> struct Limits<double> { static DEV double lo() { return -__longlong_as_double(0x7ff0000000000000LL); } static DEV double hi() { return __longlong_as_double(0x7ff0000000000000LL); } };
template <> struct Limits<i64> { static DEV i64 lo() { return (i64)0x8000000000000000ull; } static DEV i64 hi() { return 0x7fffffffffffffffLL; } };
template <> struct Limits<i32> { static DEV i32 lo() { return (i32)0x80000000u; } static DEV i32 hi() { return 0x7fffffff; } };
template <> struct Limits<u8> { static DEV u8 lo() { return 0; } static DEV u8 hi() { return 255; } };

template <typename T, bool MAX> struct ExtremeOp {
    typedef decltype(load(T())) Acc;
    static DEV Acc identity() { return MAX ? Limits<Acc>::lo() : Limits<Acc>::hi(); }
    static DEV Acc make(T x, i64) { return load(x); }
    static DEV Acc combine(Acc a, Acc b) {
        if (is_nan(a)) return a;
        if (is_nan(b)) return b;
        return MAX ? (a > b ? a : b) : (a < b ? a : b);
    }
    static DEV T finish(Acc a, i64) { return Store<T>::from(a); }
};

// bool max is `or`, min is `and`.
template <bool MAX> struct ExtremeBool {
    typedef u8 Acc;
    static DEV u8 identity() { return MAX ? 0 : 1; }
    static DEV u8 make(u8 x, i64) { return x != 0; }
    static DEV u8 combine(u8 a, u8 b) { return MAX ? (a | b) : (a & b); }
    static DEV u8 finish(u8 a, i64) { return a; }
};

template <typename C> struct ArgAcc {
    C v;
    i64 i;
};

template <typename T, bool MAX> struct ArgOp {
    typedef decltype(load(T())) C;
    typedef ArgAcc<C> Acc;
    static DEV Acc identity() {
        Acc a;
        a.v = C();
        a.i = -1;
        return a;
    }
    static DEV Acc make(T x, i64 r) {
        Acc a;
        a.v = load(x);
        a.i = r;
        return a;
    }
    static DEV Acc combine(Acc a, Acc b) {
        if (a.i < 0) return b;
        if (b.i < 0) return a;
        const bool an = is_nan(a.v), bn = is_nan(b.v);
        if (an || bn) {
            if (an && bn) return a.i < b.i ? a : b;
            return an ? a : b;
        }
        if (a.v == b.v) return a.i < b.i ? a : b;
        return (MAX ? a.v > b.v : a.v < b.v) ? a : b;
    }
    static DEV i64 finish(Acc a, i64) { return a.i; }
};

DEV float sqrt_(float x) { return sqrtf(x); }
DEV double sqrt_(double x) { return sqrt(x); }
DEV float exp_(float x) { return expf(x); }
DEV double exp_(double x) { return exp(x); }
DEV float log_(float x) { return logf(x); }
DEV double log_(double x) { return log(x); }

// Variance: (count, mean, sum of squared deviations), merged with Chan's
// formula (a single element is a Welford step).
template <typename C> struct Welford {
    i64 n;
    C mean;
    C m2;
};
template <typename T> struct VarOp {
    typedef double C;
    typedef Welford<C> Acc;
    i64 correction;
    i32 take_sqrt;
    static DEV Acc identity() {
        Acc a;
        a.n = 0;
        a.mean = 0;
        a.m2 = 0;
        return a;
    }
    static DEV Acc make(T x, i64) {
        Acc a;
        a.n = 1;
        a.mean = to_f64(x);
        a.m2 = 0;
        return a;
    }
    static DEV Acc combine(Acc a, Acc b) {
        if (a.n == 0) return b;
        if (b.n == 0) return a;
        Acc r;
        r.n = a.n + b.n;
        const C n = (C)r.n, na = (C)a.n, nb = (C)b.n;
        const C d = b.mean - a.mean;
        r.mean = a.mean + d * (nb / n);
        r.m2 = a.m2 + b.m2 + d * d * (na * nb / n);
        return r;
    }
    DEV T finish(Acc a, i64) const {
        C dof = (C)a.n - (C)correction;
        if (dof < 0) dof = 0;
        C v = a.m2 / dof;
        if (take_sqrt) v = sqrt_(v);
        return FromF64<T>::cvt(v);
    }
};

// log(sum(exp(x))) as a running (max, sum of exp(x - max)). A NaN element
// makes the sum NaN; an infinite max contributes exp(0) = 1 per element
// equal to it, so +inf gives +inf and an all -inf run gives -inf. The max
// and the exponentials are in the compute type C (f32, f64 for f64), the
// sum in f64, as on the CPU.
template <typename C> struct LseAcc {
    C m;
    double s;
};
template <typename T> struct FAcc { typedef float A; };
template <> struct FAcc<double> { typedef double A; };
template <typename T> struct LseOp {
    typedef typename FAcc<T>::A C;
    typedef LseAcc<C> Acc;
    static DEV double rel(C x, C m) { return x == m ? 1.0 : (double)exp_(x - m); }
    static DEV Acc identity() {
        Acc a;
        a.m = Limits<C>::lo();
        a.s = 0;
        return a;
    }
    static DEV Acc make(T x, i64) {
        const C v = (C)load(x);
        Acc a;
        if (is_nan(v)) {
            a.m = 0;
            a.s = (double)v;
        } else {
            a.m = v;
            a.s = 1;
        }
        return a;
    }
    static DEV Acc combine(Acc a, Acc b) {
        if (is_nan(a.s)) return a;
        if (is_nan(b.s)) return b;
        if (a.s == 0) return b;
        if (b.s == 0) return a;
        Acc r;
        r.m = a.m > b.m ? a.m : b.m;
        r.s = a.s * rel(a.m, r.m) + b.s * rel(b.m, r.m);
        return r;
    }
    static DEV T finish(Acc a, i64) {
        return FromF64<T>::cvt(a.s == 0 ? Limits<double>::lo() : (double)a.m + log_(a.s));
    }
};

#define REDUCE_KERNEL(NAME, SUF, T, O, ...)                                                          \
    KERNEL void reduce_##NAME##_##SUF(RGeom g, i64 n_out, i64 n_red, O* out, const T* in, i32 group, \
                                      u8* work, i64 splits) {                                        \
        reduce_impl<__VA_ARGS__>(g, n_out, n_red, out, in, group, __VA_ARGS__(), work, splits);     \
    }

#define REDUCE_FLOAT(SUF, T)                                \
    REDUCE_KERNEL(sum, SUF, T, T, SumF<T>)                  \
    REDUCE_KERNEL(mean, SUF, T, T, MeanF<T>)                \
    REDUCE_KERNEL(prod, SUF, T, T, ProdF<T>)                \
    REDUCE_KERNEL(max, SUF, T, T, ExtremeOp<T, true>)     \
    REDUCE_KERNEL(min, SUF, T, T, ExtremeOp<T, false>)    \
    REDUCE_KERNEL(argmax, SUF, T, i64, ArgOp<T, true>)    \
    REDUCE_KERNEL(argmin, SUF, T, i64, ArgOp<T, false>)    \
    REDUCE_KERNEL(logsumexp, SUF, T, T, LseOp<T>)           \
    KERNEL void reduce_var_##SUF(RGeom g, i64 n_out, i64 n_red, T* out, const T* in, i32 group, i64 correction, \
                                 i32 take_sqrt, u8* work, i64 splits) {                                      \
        VarOp<T> op;                                                                                      \
        op.correction = correction;                                                                       \
        op.take_sqrt = take_sqrt;                                                                         \
        reduce_impl<VarOp<T> >(g, n_out, n_red, out, in, group, op, work, splits);                        \
    }

#define REDUCE_INT(SUF, T)                                  \
    REDUCE_KERNEL(sum, SUF, T, i64, SumI<T>)                \
    REDUCE_KERNEL(prod, SUF, T, i64, ProdI<T>)              \
    REDUCE_KERNEL(max, SUF, T, T, ExtremeOp<T, true>)     \
    REDUCE_KERNEL(min, SUF, T, T, ExtremeOp<T, false>)    \
    REDUCE_KERNEL(argmax, SUF, T, i64, ArgOp<T, true>)    \
    REDUCE_KERNEL(argmin, SUF, T, i64, ArgOp<T, false>)   \
    KERNEL void matmul_##SUF(Geom<3> g, i64 n, T* out, const T* a, const T* b, i64 k, i64 ak, i64 bk) { \
        matmul_int<T>(g, n, out, a, b, k, ak, bk);                                                   \
    }

template <typename T>
DEV void matmul_int(const Geom<3>& g, i64 n, T* out, const T* a, const T* b, i64 k, i64 ak, i64 bk) {
    for_each<3>(g, n, [&](const i64* off) {
        u64 acc = 0;
        const T* pa = a + off[1];
        const T* pb = b + off[2];
        for (i64 p = 0; p < k; ++p) acc += (u64)(i64)pa[p * ak] * (u64)(i64)pb[p * bk];
        out[off[0]] = (T)acc;
    });
}

REDUCE_FLOAT(f32, float)
REDUCE_FLOAT(f64, double)
REDUCE_FLOAT(f16, f16)
REDUCE_FLOAT(bf16, bf16)
REDUCE_INT(i64, i64)
REDUCE_INT(i32, i32)
REDUCE_INT(u8, u8)
REDUCE_KERNEL(sum, bool, u8, i64, SumI<u8>)
REDUCE_KERNEL(prod, bool, u8, i64, ProdI<u8>)
REDUCE_KERNEL(max, bool, u8, u8, ExtremeBool<true>)
REDUCE_KERNEL(min, bool, u8, u8, ExtremeBool<false>)
// bool: argmax/argmin of 0/1 bytes (the first true / the first false).
REDUCE_KERNEL(argmax, bool, u8, i64, ArgOp<u8, true>)
REDUCE_KERNEL(argmin, bool, u8, i64, ArgOp<u8, false>)

// --------------------------------------------------------------- scans ---
//
//   scan_<dt>(const T* x, const T* a, T* out, i64 rows, i64 n, i32 kind)
//
// One thread per row of contiguous [rows, n] operands, the order of
// src/backend/cpu/scan.rs: kind 0 cumulative sum, 1 cumulative product,
// 2 the recurrence y_i = a_i * y_{i-1} + x_i (a read only then). Floats
// accumulate in double with explicitly rounded operations (no FMA, as the
// CPU) and round each output once; int64 wraps.
template <typename T>
DEV void scan_row(const T* x, const T* a, T* out, i64 n, i32 kind) {
    typedef decltype(load(T{})) C;
    double acc = kind == 1 ? 1.0 : 0.0;
    for (i64 i = 0; i < n; ++i) {
        const double v = to_f64(x[i]);
        acc = kind == 0 ? __dadd_rn(acc, v)
            : kind == 1 ? __dmul_rn(acc, v)
                        : __dadd_rn(__dmul_rn(to_f64(a[i]), acc), v);
        out[i] = Store<T>::from((C)acc);
    }
}

#define SCAN_KERNEL(SUF, T)                                                                 \
    KERNEL void scan_##SUF(const T* x, const T* a, T* out, i64 rows, i64 n, i32 kind) {     \
        for (i64 r = blockIdx.x * (i64)blockDim.x + threadIdx.x; r < rows;                  \
             r += (i64)gridDim.x * blockDim.x) {                                            \
            scan_row<T>(x + r * n, a + r * n, out + r * n, n, kind);                        \
        }                                                                                   \
    }

SCAN_KERNEL(f32, float)
SCAN_KERNEL(f64, double)
SCAN_KERNEL(f16, f16)
SCAN_KERNEL(bf16, bf16)

KERNEL void scan_i64(const i64* x, const i64* a, i64* out, i64 rows, i64 n, i32 kind) {
    for (i64 r = blockIdx.x * (i64)blockDim.x + threadIdx.x; r < rows; r += (i64)gridDim.x * blockDim.x) {
        u64 acc = kind == 1 ? 1u : 0u;
        for (i64 i = 0; i < n; ++i) {
            const u64 v = (u64)x[r * n + i];
            acc = kind == 1 ? acc * v : acc + v;
            out[r * n + i] = (i64)acc;
        }
    }
}
