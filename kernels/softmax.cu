// softmax and log_softmax along one dimension, forward and backward.
//
//   softmax_<dtype>(SGeom<2> g, i64 rows, T* out, const T* in, i32 group)
//   log_softmax_<dtype>(SGeom<2> g, i64 rows, T* out, const T* in, i32 group)
//   softmax_bwd_<dtype>(SGeom<3> g, i64 rows, T* dx, const T* dy, const T* y, i32 group)
//       dx = y * (dy - sum(dy * y))              (y: the forward output)
//   log_softmax_bwd_<dtype>(SGeom<3> g, i64 rows, T* dx, const T* dy, const T* y, i32 group)
//       dx = dy - exp(y) * sum(dy)               (y: the forward output)
//
// Float dtypes only; f16/bf16/f32 compute in f32, f64 in f64. A "row" is one
// index of the kept dimensions; `group` threads (a warp, or the whole block
// of TS_BLOCK) handle one row. Operand 0 is the output.

template <typename T> struct FAccS { typedef float A; };
template <> struct FAccS<double> { typedef double A; };

DEV float exp_(float x) { return expf(x); }
DEV double exp_(double x) { return exp(x); }
DEV float log_(float x) { return logf(x); }
DEV double log_(double x) { return log(x); }

template <int N> struct SGeom {
    i32 rank;  // kept dimensions
    i32 pad_;
    i64 shape[TS_MAX_RANK];
    i64 strides[N][TS_MAX_RANK];
    i64 dim_size;
    i64 dim_stride[N];
};

template <int N> DEV void row_offsets(const SGeom<N>& g, i64 r, i64* off) {
#pragma unroll
    for (int k = 0; k < N; ++k) off[k] = 0;
    for (int d = g.rank - 1; d >= 0; --d) {
        const i64 s = g.shape[d];
        const i64 c = r % s;
        r /= s;
#pragma unroll
        for (int k = 0; k < N; ++k) off[k] += c * g.strides[k][d];
    }
}

// Runs `body(off, lane)` for each row handled by this thread's group; every
// thread of the block runs the same number of iterations (barriers inside).
template <int N, typename F> DEV void for_rows(const SGeom<N>& g, i64 rows, int group, F body) {
    const int tid = threadIdx.x;
    const i64 per_block = TS_BLOCK / group;
    for (i64 base = (i64)blockIdx.x * per_block; base < rows; base += (i64)gridDim.x * per_block) {
        const i64 r = base + tid / group;
        i64 off[N];
        const bool active = r < rows;
        if (active) row_offsets<N>(g, r, off);
        else {
#pragma unroll
            for (int k = 0; k < N; ++k) off[k] = 0;
        }
        body(active, off, tid % group);
    }
}

template <typename T, bool LOG> DEV void softmax_fwd(const SGeom<2>& g, i64 rows, T* out, const T* in, int group) {
    typedef typename FAccS<T>::A A;
    __shared__ A scratch[TS_BLOCK];
    const i64 n = g.dim_size, si = g.dim_stride[1], so = g.dim_stride[0];
    for_rows<2>(g, rows, group, [&](bool active, const i64* off, int lane) {
        A m = -__int_as_float(0x7f800000);
        if (active)
            for (i64 j = lane; j < n; j += group) {
                const A x = (A)load(in[off[1] + j * si]);
                m = (x > m || x != x) ? x : m;
            }
        m = group_reduce(m, scratch, group, [](A a, A b) { return (a > b || a != a) ? a : b; });
        A s = 0;
        if (active)
            for (i64 j = lane; j < n; j += group) s += exp_(((A)load(in[off[1] + j * si])) - m);
        s = group_reduce(s, scratch, group, [](A a, A b) { return a + b; });
        if (active) {
            const A ls = log_(s);
            for (i64 j = lane; j < n; j += group) {
                const A x = (A)load(in[off[1] + j * si]) - m;
                out[off[0] + j * so] = Store<T>::from(LOG ? x - ls : exp_(x) / s);
            }
        }
    });
}

template <typename T, bool LOG> DEV void softmax_bwd(const SGeom<3>& g, i64 rows, T* dx, const T* dy, const T* y, int group) {
    typedef typename FAccS<T>::A A;
    __shared__ A scratch[TS_BLOCK];
    const i64 n = g.dim_size, s0 = g.dim_stride[0], s1 = g.dim_stride[1], s2 = g.dim_stride[2];
    for_rows<3>(g, rows, group, [&](bool active, const i64* off, int lane) {
        A s = 0;
        if (active)
            for (i64 j = lane; j < n; j += group) {
                const A gy = (A)load(dy[off[1] + j * s1]);
                s += LOG ? gy : gy * (A)load(y[off[2] + j * s2]);
            }
        s = group_reduce(s, scratch, group, [](A a, A b) { return a + b; });
        if (active)
            for (i64 j = lane; j < n; j += group) {
                const A gy = (A)load(dy[off[1] + j * s1]);
                const A yy = (A)load(y[off[2] + j * s2]);
                dx[off[0] + j * s0] = Store<T>::from(LOG ? gy - exp_(yy) * s : yy * (gy - s));
            }
    });
}

#define SOFTMAX_KERNELS(SUF, T)                                                                                 \
    KERNEL void softmax_##SUF(SGeom<2> g, i64 rows, T* out, const T* in, i32 group) {                           \
        softmax_fwd<T, false>(g, rows, out, in, group);                                                          \
    }                                                                                                           \
    KERNEL void log_softmax_##SUF(SGeom<2> g, i64 rows, T* out, const T* in, i32 group) {                       \
        softmax_fwd<T, true>(g, rows, out, in, group);                                                           \
    }                                                                                                           \
    KERNEL void softmax_bwd_##SUF(SGeom<3> g, i64 rows, T* dx, const T* dy, const T* y, i32 group) {            \
        softmax_bwd<T, false>(g, rows, dx, dy, y, group);                                                        \
    }                                                                                                           \
    KERNEL void log_softmax_bwd_##SUF(SGeom<3> g, i64 rows, T* dx, const T* dy, const T* y, i32 group) {        \
        softmax_bwd<T, true>(g, rows, dx, dy, y, group);                                                         \
    }

SOFTMAX_KERNELS(f32, float)
SOFTMAX_KERNELS(f64, double)
SOFTMAX_KERNELS(f16, f16)
SOFTMAX_KERNELS(bf16, bf16)
