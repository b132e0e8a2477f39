// Random fills from a counter-based generator (Philox 4x32-10, see the
// prelude): element values depend only on (seed, offset, element index), not
// on the launch configuration, so a fill is reproducible on any device.
//
//   rand_uniform_<dtype>(T* out, i64 n, u64 seed, u64 offset, double low, double high)
//   rand_normal_<dtype>(T* out, i64 n, u64 seed, u64 offset, double mean, double std)
//   rand_bernoulli_<dtype>(T* out, i64 n, u64 seed, u64 offset, double p)
//
// Float dtypes only, for uniform and normal; bernoulli writes 0/1 in any
// numeric dtype or bool. `out` is dense (the op layer fills a contiguous
// buffer and copies when the destination is strided). Philox counter q
// gives elements [4q, 4q + 4) for f32/f16/bf16 and bool/integers, and
// [2q, 2q + 2) for f64; the host advances its offset by that many counters.
// Normals use Box-Muller on pairs of uniforms.
//
// Uniforms are drawn on a grid of 2^-P, P the significand bits of the
// dtype (24 f32, 11 f16, 8 bf16, 53 f64), so rand's [0, 1) never rounds up
// to 1 when stored; for other bounds a value that rounds to `high` becomes
// `low` (PyTorch's reversed bound), so the range stays [low, high).

DEV float two_pi_f() { return 6.28318530717958647692f; }
DEV double two_pi_d() { return 6.28318530717958647692; }

template <typename T> DEV void put(T* out, i64 n, i64 j, float v) {
    if (j < n) out[j] = Store<T>::from(v);
}

// Uniform in [0, 1) on a grid of 2^-P, from 32 random bits.
template <int P> DEV float u01_grid(u32 x) { return (float)(x >> (32 - P)) * (1.0f / (float)(1u << P)); }

// lo + span * u stored in T, with a result that rounds to `hi` replaced by `lo`.
template <typename T> DEV void put_uniform(T* out, i64 n, i64 j, float lo, float span, float hi, float u) {
    if (j < n) {
        const T v = Store<T>::from(lo + span * u);
        out[j] = (span > 0.0f && load(v) >= hi) ? Store<T>::from(lo) : v;
    }
}

#define RAND_FLOAT_KERNELS(SUF, T, P)                                                                   \
    KERNEL void rand_uniform_##SUF(T* out, i64 n, u64 seed, u64 offset, double low, double high) {       \
        const float lo = (float)low, span = (float)(high - low), hi = (float)high;                       \
        GRID_LOOP(q, (n + 3) / 4) {                                                                      \
            const Philox p = philox(seed, offset + (u64)q);                                              \
            for (int k = 0; k < 4; ++k)                                                                  \
                put_uniform<T>(out, n, 4 * q + k, lo, span, hi, u01_grid<P>(p.v[k]));                    \
        }                                                                                                \
    }                                                                                                    \
    KERNEL void rand_normal_##SUF(T* out, i64 n, u64 seed, u64 offset, double mean, double std) {        \
        const float m = (float)mean, s = (float)std;                                                     \
        GRID_LOOP(q, (n + 3) / 4) {                                                                      \
            const Philox p = philox(seed, offset + (u64)q);                                              \
            for (int k = 0; k < 4; k += 2) {                                                             \
                const float u1 = 1.0f - u01f(p.v[k]), u2 = u01f(p.v[k + 1]);                             \
                const float r = sqrtf(-2.0f * logf(u1));                                                 \
                float sn, cs;                                                                            \
                sincosf(two_pi_f() * u2, &sn, &cs);                                                      \
                put<T>(out, n, 4 * q + k, m + s * r * cs);                                               \
                put<T>(out, n, 4 * q + k + 1, m + s * r * sn);                                           \
            }                                                                                            \
        }                                                                                                \
    }

RAND_FLOAT_KERNELS(f32, float, 24)
RAND_FLOAT_KERNELS(f16, f16, 11)
RAND_FLOAT_KERNELS(bf16, bf16, 8)

KERNEL void rand_uniform_f64(double* out, i64 n, u64 seed, u64 offset, double low, double high) {
    GRID_LOOP(q, (n + 1) / 2) {
        const Philox p = philox(seed, offset + (u64)q);
        for (int k = 0; k < 2; ++k) {
            const i64 j = 2 * q + k;
            if (j < n) {
                const double v = low + (high - low) * u01d(p.v[2 * k], p.v[2 * k + 1]);
                out[j] = (high > low && v >= high) ? low : v;
            }
        }
    }
}

KERNEL void rand_normal_f64(double* out, i64 n, u64 seed, u64 offset, double mean, double std) {
    GRID_LOOP(q, (n + 1) / 2) {
        const Philox p = philox(seed, offset + (u64)q);
        const double u1 = 1.0 - u01d(p.v[0], p.v[1]), u2 = u01d(p.v[2], p.v[3]);
        const double r = sqrt(-2.0 * log(u1));
        double sn, cs;
        sincos(two_pi_d() * u2, &sn, &cs);
        if (2 * q < n) out[2 * q] = mean + std * r * cs;
        if (2 * q + 1 < n) out[2 * q + 1] = mean + std * r * sn;
    }
}

// 1 with probability p (uniform < p), else 0.
#define BERNOULLI_KERNEL(SUF, T, ONE, ZERO)                                                      \
    KERNEL void rand_bernoulli_##SUF(T* out, i64 n, u64 seed, u64 offset, double p) {            \
        const float pf = (float)p;                                                                \
        GRID_LOOP(q, (n + 3) / 4) {                                                               \
            const Philox r = philox(seed, offset + (u64)q);                                       \
            for (int k = 0; k < 4; ++k) {                                                         \
                const i64 j = 4 * q + k;                                                          \
                if (j < n) out[j] = u01f(r.v[k]) < pf ? (ONE) : (ZERO);                            \
            }                                                                                     \
        }                                                                                         \
    }

BERNOULLI_KERNEL(f32, float, 1.0f, 0.0f)
BERNOULLI_KERNEL(f64, double, 1.0, 0.0)
BERNOULLI_KERNEL(f16, f16, float_to_f16(1.0f), float_to_f16(0.0f))
BERNOULLI_KERNEL(bf16, bf16, float_to_bf16(1.0f), float_to_bf16(0.0f))
BERNOULLI_KERNEL(i64, i64, 1, 0)
BERNOULLI_KERNEL(i32, i32, 1, 0)
BERNOULLI_KERNEL(u8, u8, 1, 0)
BERNOULLI_KERNEL(bool, u8, 1, 0)
