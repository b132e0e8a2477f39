// Fused kernels for the nn layer: layer norm, RMS norm and dropout.
//
//   layer_norm_fwd_<dtype>(const T* x, const T* gamma, const T* beta, T* y, A* mean, A* rstd,
//                          i64 rows, i64 cols, double eps)
//       per row of a dense [rows, cols] x: y = (x - mean) * rstd * gamma + beta
//       (mean and variance: the corrected two-pass moments);
//       gamma and beta may be null (no affine transform); mean and rstd
//       (A: f32, or f64 for f64) are saved for the backward pass (either may
//       be null: not saved).
//   layer_norm_bwd_<dtype>(const T* dy, const T* x, const T* gamma, const A* mean, const A* rstd,
//                          T* dx, i64 rows, i64 cols)
//       dx = rstd * (dy*gamma - mean(dy*gamma) - xhat * mean(dy*gamma*xhat))
//   layer_norm_bwd_params_<dtype>(const T* dy, const T* x, const A* mean, const A* rstd,
//                                 T* dgamma, T* dbeta, i64 rows, i64 cols)
//       one thread per column (no atomics, deterministic):
//       dgamma = sum over rows of dy * xhat, dbeta = sum over rows of dy (either may be null)
//   rms_norm_fwd_<dtype>(const T* x, const T* gamma, T* y, A* rstd, i64 rows, i64 cols, double eps)
//       per row: rstd = 1 / sqrt(mean(x^2) + eps), y = x * rstd * gamma (gamma may be
//       null; rstd may be null: not saved)
//   rms_norm_bwd_<dtype>(const T* dy, const T* x, const T* gamma, const A* rstd, T* dx,
//                        i64 rows, i64 cols)
//       dx = rstd * (dy*gamma - xhat * mean(dy*gamma*xhat)), xhat = x * rstd
//   rms_norm_bwd_params_<dtype>(const T* dy, const T* x, const A* rstd, T* dgamma, i64 rows,
//                               i64 cols)
//       one thread per column: dgamma = sum over rows of dy * xhat
//   dropout_<dtype>(const T* x, T* y, u8* mask, i64 n, double p, u64 seed, u64 offset)
//       keep with probability 1 - p (Philox counter q covers elements
//       [4q, 4q + 4)): y = keep ? x / (1 - p) : 0, mask = keep
//   dropout_bwd_<dtype>(const T* dy, const u8* mask, T* dx, i64 n, double p)
//       dx = mask ? dy / (1 - p) : 0
//   max_pool2d_<dtype>(const T* x, T* y, i64* idx, i64 planes, i64 h, i64 w, i64 oh, i64 ow,
//                      PoolWindow win)
//       one thread per output of contiguous [planes, h, w] -> [planes, oh, ow]: the
//       window's in-bounds taps row by row, starting from the first one, a tap
//       replacing the best when greater or NaN (PyTorch's rule: the last NaN wins);
//       idx (may be null) gets the flat in-plane position row * w + col
//   col2im_<dtype>(const T* cols, T* dx, i64 n, i64 c, i64 h, i64 w, i64 oh, i64 ow, PoolWindow win)
//       one thread per element of contiguous dx [n, c, h, w]: the sum (in A, taps in order) of
//       cols [c, kh, kw, n, oh, ow] over every tap and output position landing on it
//   im2col_<dtype>(const T* x, T* cols, i64 n, i64 c, i64 h, i64 w, i64 oh, i64 ow, i64 rs, PoolWindow win)
//       one thread per element of cols [c, kh, kw, n, oh, ow] (rows of n * oh * ow, rs apart): the
//       element of contiguous x [n, c, h, w] under that tap at that output position, 0 in the padding
//
// Float dtypes only. Launch the row kernels with TS_BLOCK threads per block
// (one block per row, grid-stride over rows).

template <typename T> struct NAcc { typedef float A; };
template <> struct NAcc<double> { typedef double A; };

DEV float rsqrt_(float x) { return 1.0f / sqrtf(x); }
DEV double rsqrt_(double x) { return 1.0 / sqrt(x); }

template <typename T>
DEV void layer_norm_fwd(const T* x, const T* gamma, const T* beta, T* y, typename NAcc<T>::A* mean,
                        typename NAcc<T>::A* rstd, i64 rows, i64 cols, double eps) {
    typedef typename NAcc<T>::A A;
    __shared__ A scratch[TS_BLOCK];
    for (i64 r = blockIdx.x; r < rows; r += gridDim.x) {
        const T* xr = x + r * cols;
        A s = 0;
        for (i64 j = threadIdx.x; j < cols; j += TS_BLOCK) s += (A)load(xr[j]);
        s = group_reduce(s, scratch, TS_BLOCK, [](A a, A b) { return a + b; });
        const A m0 = s / (A)cols;
        // The corrected two-pass moments: the residual sum refines the
        // mean, so a constant row has its own value as the mean and a
        // variance of exactly 0. (The CPU's row_stats sweeps for the
        // residual only where it can matter; here it rides along the
        // variance sweep and its reduction.)
        A v = 0, res = 0;
        for (i64 j = threadIdx.x; j < cols; j += TS_BLOCK) {
            const A d = (A)load(xr[j]) - m0;
            v += d * d;
            res += d;
        }
        v = group_reduce(v, scratch, TS_BLOCK, [](A a, A b) { return a + b; });
        res = group_reduce(res, scratch, TS_BLOCK, [](A a, A b) { return a + b; });
        const A mu = m0 + res / (A)cols;
        const A var = (v - res * res / (A)cols) / (A)cols;
        const A rs = rsqrt_((var > (A)0 ? var : (A)0) + (A)eps);
        if (threadIdx.x == 0) {
            if (mean) mean[r] = mu;
            if (rstd) rstd[r] = rs;
        }
        for (i64 j = threadIdx.x; j < cols; j += TS_BLOCK) {
            A h = ((A)load(xr[j]) - mu) * rs;
            if (gamma) h *= (A)load(gamma[j]);
            if (beta) h += (A)load(beta[j]);
            y[r * cols + j] = Store<T>::from(h);
        }
    }
}

template <typename T>
DEV void layer_norm_bwd(const T* dy, const T* x, const T* gamma, const typename NAcc<T>::A* mean,
                        const typename NAcc<T>::A* rstd, T* dx, i64 rows, i64 cols) {
    typedef typename NAcc<T>::A A;
    __shared__ A scratch[TS_BLOCK];
    for (i64 r = blockIdx.x; r < rows; r += gridDim.x) {
        const A mu = mean[r], rs = rstd[r];
        A s1 = 0, s2 = 0;
        for (i64 j = threadIdx.x; j < cols; j += TS_BLOCK) {
            const A gg = (A)load(dy[r * cols + j]) * (gamma ? (A)load(gamma[j]) : (A)1);
            const A xh = ((A)load(x[r * cols + j]) - mu) * rs;
            s1 += gg;
            s2 += gg * xh;
        }
        s1 = group_reduce(s1, scratch, TS_BLOCK, [](A a, A b) { return a + b; });
        s2 = group_reduce(s2, scratch, TS_BLOCK, [](A a, A b) { return a + b; });
        const A m1 = s1 / (A)cols, m2 = s2 / (A)cols;
        for (i64 j = threadIdx.x; j < cols; j += TS_BLOCK) {
            const A gg = (A)load(dy[r * cols + j]) * (gamma ? (A)load(gamma[j]) : (A)1);
            const A xh = ((A)load(x[r * cols + j]) - mu) * rs;
            dx[r * cols + j] = Store<T>::from(rs * (gg - m1 - xh * m2));
        }
    }
}

template <typename T>
DEV void layer_norm_bwd_params(const T* dy, const T* x, const typename NAcc<T>::A* mean,
                               const typename NAcc<T>::A* rstd, T* dgamma, T* dbeta, i64 rows, i64 cols) {
    typedef typename NAcc<T>::A A;
    GRID_LOOP(j, cols) {
        A sg = 0, sb = 0;
        for (i64 r = 0; r < rows; ++r) {
            const A g = (A)load(dy[r * cols + j]);
            sg += g * (((A)load(x[r * cols + j]) - mean[r]) * rstd[r]);
            sb += g;
        }
        if (dgamma) dgamma[j] = Store<T>::from(sg);
        if (dbeta) dbeta[j] = Store<T>::from(sb);
    }
}

template <typename T>
DEV void rms_norm_fwd(const T* x, const T* gamma, T* y, typename NAcc<T>::A* rstd, i64 rows, i64 cols,
                      double eps) {
    typedef typename NAcc<T>::A A;
    __shared__ A scratch[TS_BLOCK];
    for (i64 r = blockIdx.x; r < rows; r += gridDim.x) {
        const T* xr = x + r * cols;
        A s = 0;
        for (i64 j = threadIdx.x; j < cols; j += TS_BLOCK) {
            const A v = (A)load(xr[j]);
            s += v * v;
        }
        s = group_reduce(s, scratch, TS_BLOCK, [](A a, A b) { return a + b; });
        const A rs = rsqrt_(s / (A)cols + (A)eps);
        if (threadIdx.x == 0 && rstd) rstd[r] = rs;
        for (i64 j = threadIdx.x; j < cols; j += TS_BLOCK) {
            A h = (A)load(xr[j]) * rs;
            if (gamma) h *= (A)load(gamma[j]);
            y[r * cols + j] = Store<T>::from(h);
        }
    }
}

template <typename T>
DEV void rms_norm_bwd(const T* dy, const T* x, const T* gamma, const typename NAcc<T>::A* rstd, T* dx, i64 rows,
                      i64 cols) {
    typedef typename NAcc<T>::A A;
    __shared__ A scratch[TS_BLOCK];
    for (i64 r = blockIdx.x; r < rows; r += gridDim.x) {
        const A rs = rstd[r];
        A s2 = 0;
        for (i64 j = threadIdx.x; j < cols; j += TS_BLOCK) {
            const A gg = (A)load(dy[r * cols + j]) * (gamma ? (A)load(gamma[j]) : (A)1);
            s2 += gg * ((A)load(x[r * cols + j]) * rs);
        }
        s2 = group_reduce(s2, scratch, TS_BLOCK, [](A a, A b) { return a + b; });
        const A m2 = s2 / (A)cols;
        for (i64 j = threadIdx.x; j < cols; j += TS_BLOCK) {
            const A gg = (A)load(dy[r * cols + j]) * (gamma ? (A)load(gamma[j]) : (A)1);
            const A xh = (A)load(x[r * cols + j]) * rs;
            dx[r * cols + j] = Store<T>::from(rs * (gg - xh * m2));
        }
    }
}

template <typename T>
DEV void rms_norm_bwd_params(const T* dy, const T* x, const typename NAcc<T>::A* rstd, T* dgamma, i64 rows,
                             i64 cols) {
    typedef typename NAcc<T>::A A;
    GRID_LOOP(j, cols) {
        A sg = 0;
        for (i64 r = 0; r < rows; ++r) sg += (A)load(dy[r * cols + j]) * ((A)load(x[r * cols + j]) * rstd[r]);
        dgamma[j] = Store<T>::from(sg);
    }
}

template <typename T> DEV void dropout(const T* x, T* y, u8* mask, i64 n, double p, u64 seed, u64 offset) {
    typedef typename NAcc<T>::A A;
    const A scale = (A)(1.0 / (1.0 - p));
    const float pf = (float)p;
    GRID_LOOP(q, (n + 3) / 4) {
        const Philox r = philox(seed, offset + (u64)q);
        for (int k = 0; k < 4; ++k) {
            const i64 j = 4 * q + k;
            if (j < n) {
                const bool keep = u01f(r.v[k]) >= pf;
                mask[j] = keep;
                y[j] = Store<T>::from(keep ? (A)load(x[j]) * scale : (A)0);
            }
        }
    }
}

template <typename T> DEV void dropout_bwd(const T* dy, const u8* mask, T* dx, i64 n, double p) {
    typedef typename NAcc<T>::A A;
    const A scale = (A)(1.0 / (1.0 - p));
    GRID_LOOP(j, n) dx[j] = Store<T>::from(mask[j] ? (A)load(dy[j]) * scale : (A)0);
}

struct PoolWindow {
    int kh, kw, sh, sw, ph, pw, dh, dw;
};

template <typename T>
DEV void max_pool2d(const T* x, T* y, i64* idx, i64 planes, i64 h, i64 w, i64 oh, i64 ow, PoolWindow g) {
    typedef typename NAcc<T>::A A;
    const A neg_inf = -__int_as_float(0x7f800000);
    GRID_LOOP(o, planes * oh * ow) {
        const i64 p = o / (oh * ow), r = o % (oh * ow);
        const i64 hs = (r / ow) * g.sh - g.ph, ws = (r % ow) * g.sw - g.pw;
        const T* xp = x + p * h * w;
        i64 at = -1;  // the first in-bounds tap until a better one
        A best = neg_inf;
        for (int i = 0; i < g.kh; ++i) {
            const i64 ih = hs + (i64)i * g.dh;
            if (ih < 0 || ih >= h) continue;
            for (int j = 0; j < g.kw; ++j) {
                const i64 iw = ws + (i64)j * g.dw;
                if (iw < 0 || iw >= w) continue;
                const A v = (A)load(xp[ih * w + iw]);
                const bool better = v > best || v != v;
                if (at < 0 || better) at = ih * w + iw;
                if (better) best = v;
            }
        }
        // The chosen element itself (exact, NaN payloads included).
        y[o] = at >= 0 ? xp[at] : Store<T>::from(best);
        if (idx) idx[o] = at >= 0 ? at : 0;
    }
}

template <typename T>
DEV void col2im(const T* cols, T* dx, i64 n, i64 c, i64 h, i64 w, i64 oh, i64 ow, PoolWindow g) {
    typedef typename NAcc<T>::A A;
    const i64 l = oh * ow;
    GRID_LOOP(e, n * c * h * w) {
        const i64 x = e % w, y = (e / w) % h, ci = (e / (h * w)) % c, ni = e / (c * h * w);
        A acc = 0;
        for (int i = 0; i < g.kh; ++i) {
            const i64 ty = y + g.ph - (i64)i * g.dh;
            if (ty < 0 || ty % g.sh != 0 || ty / g.sh >= oh) continue;
            for (int j = 0; j < g.kw; ++j) {
                const i64 tx = x + g.pw - (i64)j * g.dw;
                if (tx < 0 || tx % g.sw != 0 || tx / g.sw >= ow) continue;
                acc += (A)load(cols[(((ci * g.kh + i) * g.kw + j) * n + ni) * l + (ty / g.sh) * ow + tx / g.sw]);
            }
        }
        dx[e] = Store<T>::from(acc);
    }
}

template <typename T>
DEV void im2col(const T* x, T* cols, i64 n, i64 c, i64 h, i64 w, i64 oh, i64 ow, i64 rs, PoolWindow g) {
    typedef typename NAcc<T>::A A;
    const i64 l = oh * ow, nl = n * l;
    GRID_LOOP(e, c * g.kh * g.kw * nl) {
        const i64 q = e % nl, r = e / nl;
        const i64 o = q % ow, ro = (q / ow) % oh, ni = q / l;
        const i64 j = r % g.kw, i = (r / g.kw) % g.kh, ci = r / ((i64)g.kh * g.kw);
        const i64 y = ro * g.sh + i * g.dh - g.ph, xx = o * g.sw + j * g.dw - g.pw;
        cols[r * rs + q] = (y >= 0 && y < h && xx >= 0 && xx < w) ? x[((ni * c + ci) * h + y) * w + xx]
                                                                  : Store<T>::from((A)0);
    }
}

#define NN_KERNELS(SUF, T, A)                                                                                     \
    KERNEL void layer_norm_fwd_##SUF(const T* x, const T* gamma, const T* beta, T* y, A* mean, A* rstd, i64 rows,  \
                                     i64 cols, double eps) {                                                      \
        layer_norm_fwd<T>(x, gamma, beta, y, mean, rstd, rows, cols, eps);                                         \
    }                                                                                                             \
    KERNEL void layer_norm_bwd_##SUF(const T* dy, const T* x, const T* gamma, const A* mean, const A* rstd, T* dx, \
                                     i64 rows, i64 cols) {                                                        \
        layer_norm_bwd<T>(dy, x, gamma, mean, rstd, dx, rows, cols);                                               \
    }                                                                                                             \
    KERNEL void layer_norm_bwd_params_##SUF(const T* dy, const T* x, const A* mean, const A* rstd, T* dgamma,     \
                                            T* dbeta, i64 rows, i64 cols) {                                       \
        layer_norm_bwd_params<T>(dy, x, mean, rstd, dgamma, dbeta, rows, cols);                                    \
    }                                                                                                             \
    KERNEL void rms_norm_fwd_##SUF(const T* x, const T* gamma, T* y, A* rstd, i64 rows, i64 cols, double eps) {     \
        rms_norm_fwd<T>(x, gamma, y, rstd, rows, cols, eps);                                                       \
    }                                                                                                             \
    KERNEL void rms_norm_bwd_##SUF(const T* dy, const T* x, const T* gamma, const A* rstd, T* dx, i64 rows,       \
                                   i64 cols) {                                                                    \
        rms_norm_bwd<T>(dy, x, gamma, rstd, dx, rows, cols);                                                       \
    }                                                                                                             \
    KERNEL void rms_norm_bwd_params_##SUF(const T* dy, const T* x, const A* rstd, T* dgamma, i64 rows, i64 cols) { \
        rms_norm_bwd_params<T>(dy, x, rstd, dgamma, rows, cols);                                                   \
    }                                                                                                             \
    KERNEL void dropout_##SUF(const T* x, T* y, u8* mask, i64 n, double p, u64 seed, u64 offset) {                \
        dropout<T>(x, y, mask, n, p, seed, offset);                                                                \
    }                                                                                                             \
    KERNEL void dropout_bwd_##SUF(const T* dy, const u8* mask, T* dx, i64 n, double p) {                          \
        dropout_bwd<T>(dy, mask, dx, n, p);                                                                        \
    }                                                                                                             \
    KERNEL void max_pool2d_##SUF(const T* x, T* y, i64* idx, i64 planes, i64 h, i64 w, i64 oh, i64 ow,            \
                                 PoolWindow g) {                                                                  \
        max_pool2d<T>(x, y, idx, planes, h, w, oh, ow, g);                                                         \
    }                                                                                                             \
    KERNEL void col2im_##SUF(const T* cols, T* dx, i64 n, i64 c, i64 h, i64 w, i64 oh, i64 ow, PoolWindow g) {    \
        col2im<T>(cols, dx, n, c, h, w, oh, ow, g);                                                                \
    }                                                                                                             \
    KERNEL void im2col_##SUF(const T* x, T* cols, i64 n, i64 c, i64 h, i64 w, i64 oh, i64 ow, i64 rs,             \
                             PoolWindow g) {                                                                      \
        im2col<T>(x, cols, n, c, h, w, oh, ow, rs, g);                                                             \
    }

NN_KERNELS(f32, float, float)
NN_KERNELS(f64, double, double)
NN_KERNELS(f16, f16, float)
NN_KERNELS(bf16, bf16, float)
