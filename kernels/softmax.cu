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

// A group-wide fold by warp shuffles: within each warp, then (for a whole
// block) across the TS_BLOCK / TS_WARP warp results through `scratch` in
// warp order. Every thread gets the result. Two barriers per block-wide call
// (one before `scratch` is written, so back-to-back calls are safe).
template <typename A, typename F> DEV A shfl_reduce(A v, A* scratch, int width, F combine) {
#pragma unroll
    for (int o = TS_WARP / 2; o > 0; o >>= 1) v = combine(v, __shfl_xor_sync(0xffffffffu, v, o));
    if (width == TS_WARP) return v;
    __syncthreads();
    if (threadIdx.x % TS_WARP == 0) scratch[threadIdx.x / TS_WARP] = v;
    __syncthreads();
    A r = scratch[0];
#pragma unroll
    for (int w = 1; w < TS_BLOCK / TS_WARP; ++w) r = combine(r, scratch[w]);
    return r;
}

// The register path of softmax_fwd, for rows that are contiguous in both
// operands and at most K * group long: each thread loads its K elements
// (j = lane + k * group, coalesced, all loads in flight at once) once,
// and the row is written from registers: one read and one write of global
// memory per element, where the general path reads each element three
// times. The same arithmetic, in the same order per element, as the
// general path; the sums are folded in another order (shuffles).
template <typename T, bool LOG, int K> DEV void softmax_fwd_regs(const SGeom<2>& g, i64 rows, T* out, const T* in, int group) {
    typedef typename FAccS<T>::A A;
    __shared__ A scratch[TS_BLOCK / TS_WARP];
    const i64 n = g.dim_size;
    const A neg_inf = -__int_as_float(0x7f800000);
    for_rows<2>(g, rows, group, [&](bool active, const i64* off, int lane) {
        A v[K];
        A m = neg_inf;
#pragma unroll
        for (int k = 0; k < K; ++k) {
            const i64 j = lane + (i64)k * group;
            v[k] = (active && j < n) ? (A)load(in[off[1] + j]) : neg_inf;
        }
#pragma unroll
        for (int k = 0; k < K; ++k) m = (v[k] > m || v[k] != v[k]) ? v[k] : m;
        m = shfl_reduce(m, scratch, group, [](A a, A b) { return (a > b || a != a) ? a : b; });
        A s = 0;
#pragma unroll
        for (int k = 0; k < K; ++k) {
            const i64 j = lane + (i64)k * group;
            if (j < n) {
                v[k] -= m;
                const A e = exp_(v[k]);
                s += e;
                if (!LOG) v[k] = e;
            }
        }
        s = shfl_reduce(s, scratch, group, [](A a, A b) { return a + b; });
        if (active) {
            const A ls = log_(s);
#pragma unroll
            for (int k = 0; k < K; ++k) {
                const i64 j = lane + (i64)k * group;
                if (j < n) out[off[0] + j] = Store<T>::from(LOG ? v[k] - ls : v[k] / s);
            }
        }
    });
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

// The register path for block-wide rows (1024 to K * TS_BLOCK elements)
// that are contiguous in both operands, else the general three-pass path.
// The branch is uniform over the grid. (A warp-wide register path for
// short rows, 32 elements per lane, raised the kernel to 95 registers and
// left two blocks per multiprocessor: the kernel's register count is that
// of its largest path. The forward kernels are bounded by __launch_bounds__
// to three blocks per multiprocessor at least, 85 registers: f32 takes 56,
// four blocks; f64 needs more than 64.)
template <typename T, bool LOG> DEV void softmax_dispatch(const SGeom<2>& g, i64 rows, T* out, const T* in, int group) {
    // 16 values per thread (8 in f64, which otherwise spills).
    constexpr int K = sizeof(typename FAccS<T>::A) == 8 ? 8 : 16;
    const bool unit = g.dim_stride[0] == 1 && g.dim_stride[1] == 1;
    if (unit && group == TS_BLOCK && g.dim_size <= K * TS_BLOCK) softmax_fwd_regs<T, LOG, K>(g, rows, out, in, group);
    else softmax_fwd<T, LOG>(g, rows, out, in, group);
}

#define SOFTMAX_KERNELS(SUF, T)                                                                                 \
    KERNEL void __launch_bounds__(TS_BLOCK, 3) softmax_##SUF(SGeom<2> g, i64 rows, T* out, const T* in, i32 group) {                           \
        softmax_dispatch<T, false>(g, rows, out, in, group);                                                     \
    }                                                                                                           \
    KERNEL void __launch_bounds__(TS_BLOCK, 3) log_softmax_##SUF(SGeom<2> g, i64 rows, T* out, const T* in, i32 group) {                       \
        softmax_dispatch<T, true>(g, rows, out, in, group);                                                      \
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
