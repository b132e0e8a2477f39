// Fused optimizer kernels: one pass per parameter, and the sum of squares
// behind clip_grad_norm_.
//
//   adam_step_<dtype>(Geom<5> g, i64 n, T* p, const T* grad, T* m, T* v, T* vmax, AdamK k)
//   sgd_step_<dtype>(Geom<3> g, i64 n, T* p, const T* grad, T* buf, SgdK k)
//   rule_step_<dtype>(Geom<5> g, i64 n, T* p, const T* grad, T* s0, T* s1, T* s2, RuleK k)
//   sum_squares_<dtype>(Geom<1> g, i64 n, const T* x, double* partials)
//   unscale_check_<dtype>(Geom<1> g, i64 n, T* x, float inv_scale, float* found_inf)
//
// The updates are those of src/backend/cpu/optim.rs (PyTorch's
// `_single_tensor_adam` / `_single_tensor_sgd`), operation for operation and
// in the same order, in the compute type (float for f32/f16/bf16, double for
// f64), the scalars converted from the host's doubles to it as the CPU does
// (`as`, round to nearest). Every operation is an explicitly rounded
// intrinsic (__fmul_rn, __fadd_rn, ...), so NVRTC cannot contract a multiply
// and an add into an FMA: the results should be the CPU's to the bit.
//
// Geometry operands: adam 0 p, 1 grad, 2 m, 3 v, 4 vmax (v's layout again
// when !k.ams, never touched then); sgd 0 p, 1 grad, 2 buf (p's layout when
// !k.has_buf, never touched then). The gradient may be strided or expanded;
// rank 0 is the all-dense fast path. Each element is read before it is
// written, by one thread, so a gradient sharing the parameter's storage
// element for element is fine.
//
// sum_squares: each block accumulates its grid-stride share in double
// (x*x of an f32/f16/bf16 value is exact in double), reduces it over the
// block in a fixed tree, and writes partials[blockIdx.x]; the host sums the
// partials in order. Deterministic for a given grid.

struct AdamK {
    double sign;             // 1 or -1 (maximize)
    double wd;               // L2 weight decay
    double decay;            // 1 - lr * weight_decay (AdamW), else 1
    double w1;               // 1 - beta1, the lerp weight
    double beta2;
    double one_minus_beta2;
    double bc2_sqrt;         // sqrt(1 - beta2^t)
    double eps;
    double neg_step;         // -(lr / (1 - beta1^t))
    i32 l2;                  // Adam with weight_decay != 0
    i32 w1_small;            // |w1| < 0.5: ATen's first lerp form
    i32 ams;                 // amsgrad: vmax is read and written
    i32 pad_;
};

struct SgdK {
    double sign;
    double wd;
    double momentum;
    double one_minus_dampening;
    double neg_lr;
    i32 l2;                  // weight_decay != 0
    i32 nesterov;
    i32 first;               // the buffer's first step: buf = g
    i32 has_buf;             // momentum != 0: buf is read and written
};

DEV float r_add(float a, float b) { return __fadd_rn(a, b); }
DEV double r_add(double a, double b) { return __dadd_rn(a, b); }
DEV float r_sub(float a, float b) { return __fsub_rn(a, b); }
DEV double r_sub(double a, double b) { return __dsub_rn(a, b); }
DEV float r_mul(float a, float b) { return __fmul_rn(a, b); }
DEV double r_mul(double a, double b) { return __dmul_rn(a, b); }
DEV float r_div(float a, float b) { return __fdiv_rn(a, b); }
DEV double r_div(double a, double b) { return __ddiv_rn(a, b); }
DEV float r_sqrt(float a) { return __fsqrt_rn(a); }
DEV double r_sqrt(double a) { return __dsqrt_rn(a); }

template <typename C> struct Nan;
template <> struct Nan<float> { static DEV float get() { return __int_as_float(0x7fc00000); } };
template <> struct Nan<double> { static DEV double get() { return __longlong_as_double(0x7ff8000000000000LL); } };

template <typename T>
DEV void adam_impl(const Geom<5>& g, i64 n, T* p, const T* gr, T* m, T* v, T* x, const AdamK& k) {
    typedef decltype(load(T{})) C;
    const C sign = (C)k.sign, wd = (C)k.wd, decay = (C)k.decay, w1 = (C)k.w1;
    const C one_minus_w1 = r_sub((C)1, w1);
    const C beta2 = (C)k.beta2, omb2 = (C)k.one_minus_beta2, bc2 = (C)k.bc2_sqrt;
    const C eps = (C)k.eps, neg_step = (C)k.neg_step;
    const bool l2 = k.l2 != 0, w1_small = k.w1_small != 0, ams = k.ams != 0;
    for_each<5>(g, n, [&](const i64* o) {
        C pv = load(p[o[0]]);
        C gv = r_mul(load(gr[o[1]]), sign);
        if (l2) gv = r_add(gv, r_mul(wd, pv));
        pv = r_mul(pv, decay);
        // exp_avg.lerp_(grad, 1 - beta1)
        C mv = load(m[o[2]]);
        mv = w1_small ? r_add(mv, r_mul(w1, r_sub(gv, mv))) : r_sub(gv, r_mul(r_sub(gv, mv), one_minus_w1));
        // exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        const C vv = r_add(r_mul(load(v[o[3]]), beta2), r_mul(r_mul(omb2, gv), gv));
        C den = vv;
        if (ams) {
            const C xo = load(x[o[4]]);
            const C xn = (is_nan(xo) || is_nan(vv)) ? Nan<C>::get() : (xo > vv ? xo : vv);
            x[o[4]] = Store<T>::from(xn);
            den = xn;
        }
        // denom = sqrt(v) / sqrt(bc2) + eps; p.addcdiv_(m, denom, -step_size)
        const C denom = r_add(r_div(r_sqrt(den), bc2), eps);
        p[o[0]] = Store<T>::from(r_add(pv, r_div(r_mul(neg_step, mv), denom)));
        m[o[2]] = Store<T>::from(mv);
        v[o[3]] = Store<T>::from(vv);
    });
}

template <typename T>
DEV void sgd_impl(const Geom<3>& g, i64 n, T* p, const T* gr, T* b, const SgdK& k) {
    typedef decltype(load(T{})) C;
    const C sign = (C)k.sign, wd = (C)k.wd, mom = (C)k.momentum;
    const C omd = (C)k.one_minus_dampening, neg_lr = (C)k.neg_lr;
    const bool l2 = k.l2 != 0, nesterov = k.nesterov != 0, first = k.first != 0, has_buf = k.has_buf != 0;
    for_each<3>(g, n, [&](const i64* o) {
        const C pv = load(p[o[0]]);
        C gv = r_mul(load(gr[o[1]]), sign);
        if (l2) gv = r_add(gv, r_mul(wd, pv));
        if (has_buf) {
            // buf = clone(g) on the first step, else buf.mul_(momentum).add_(g, alpha=1 - dampening)
            const C bv = first ? gv : r_add(r_mul(load(b[o[2]]), mom), r_mul(omd, gv));
            const C d = nesterov ? r_add(gv, r_mul(mom, bv)) : bv;
            b[o[2]] = Store<T>::from(bv);
            p[o[0]] = Store<T>::from(r_add(pv, r_mul(neg_lr, d)));
        } else {
            p[o[0]] = Store<T>::from(r_add(pv, r_mul(neg_lr, gv)));
        }
    });
}

template <typename T>
DEV void sum_squares_impl(const Geom<1>& g, i64 n, const T* x, double* partials) {
    __shared__ double scratch[TS_BLOCK];
    double acc = 0.0;
    for_each<1>(g, n, [&](const i64* o) {
        const double d = to_f64(x[o[0]]);
        acc = __dadd_rn(acc, __dmul_rn(d, d));
    });
    const double r = group_reduce(acc, scratch, TS_BLOCK, [](double a, double b) { return __dadd_rn(a, b); });
    if (threadIdx.x == 0) partials[blockIdx.x] = r;
}

// unscale_check: GradScaler's one pass over a gradient, PyTorch's
// `_amp_non_finite_check_and_unscale_`: x *= inv_scale in the compute type
// (float; double for f64), as the CPU,
// and *found_inf = 1 if any element was inf or NaN (a racy store of the
// same value: any thread that sees one writes 1.0, none writes 0).
template <typename T>
DEV void unscale_check_impl(const Geom<1>& g, i64 n, T* x, float inv, float* found) {
    typedef decltype(load(T{})) C;
    const C s = (C)inv;
    for_each<1>(g, n, [&](const i64* o) {
        const C v = load(x[o[0]]);
        if (!isfinite(v)) *found = 1.0f;
        x[o[0]] = Store<T>::from(r_mul(v, s));
    });
}

// rule_step_<dtype>(Geom<5> g, i64 n, T* p, const T* grad, T* s0, T* s1, T* s2, RuleK k)
//
// The optimizers of `UpdateRule` (src/backend/optim.rs), each the update of
// src/backend/cpu/optim.rs operation for operation: RMSprop (kind 0; slots
// square_avg, momentum_buffer when k.mom, grad_avg when k.centered),
// Adagrad (kind 1; slot sum) and Lion (kind 2; slot exp_avg). Geometry
// operands: 0 p, 1 grad, 2..4 the slots (p's layout for an unused slot,
// never touched then).
struct RuleK {
    double sign;             // 1 or -1 (maximize)
    double wd;               // L2 weight decay (RMSprop, Adagrad)
    double decay;            // Lion: 1 - lr * weight_decay
    double a;                // RMSprop: alpha; Lion: beta1
    double one_minus_a;      // 1 - a (RMSprop: the squares' and grad_avg's weight)
    double b;                // RMSprop: momentum; Lion: beta2
    double one_minus_b;      // Lion: 1 - beta2
    double eps;
    double neg_lr;           // -lr (Adagrad: -lr / (1 + (t - 1) * lr_decay))
    i32 kind;                // 0 RMSprop, 1 Adagrad, 2 Lion
    i32 l2;                  // weight_decay != 0 (RMSprop, Adagrad)
    i32 mom;                 // RMSprop: momentum > 0
    i32 centered;            // RMSprop: centered
    i32 w_small;             // RMSprop: |1 - alpha| < 0.5 (ATen's first lerp form)
    i32 pad_;
};

// torch.sign: 1, -1, or 0 for +-0 and NaN.
template <typename C>
DEV C sign_of(C x) { return x > (C)0 ? (C)1 : (x < (C)0 ? (C)-1 : (C)0); }

template <typename T>
DEV void rule_impl(const Geom<5>& g, i64 n, T* p, const T* gr, T* s0, T* s1, T* s2, const RuleK& k) {
    typedef decltype(load(T{})) C;
    const C sign = (C)k.sign, wd = (C)k.wd, decay = (C)k.decay, a = (C)k.a, oma = (C)k.one_minus_a;
    const C b = (C)k.b, omb = (C)k.one_minus_b, eps = (C)k.eps, neg_lr = (C)k.neg_lr;
    const C one_minus_oma = r_sub((C)1, oma);
    const bool l2 = k.l2 != 0, mom = k.mom != 0, centered = k.centered != 0, w_small = k.w_small != 0;
    const int kind = k.kind;
    for_each<5>(g, n, [&](const i64* o) {
        C pv = load(p[o[0]]);
        C gv = r_mul(load(gr[o[1]]), sign);
        if (kind == 2) {
            // Lion: p.mul_(1 - lr * wd); p.add_(sign(m * b1 + (1 - b1) * g), alpha=-lr);
            // m.mul_(b2).add_(g, alpha=1 - b2)
            pv = r_mul(pv, decay);
            const C m = load(s0[o[2]]);
            const C u = sign_of(r_add(r_mul(m, a), r_mul(oma, gv)));
            s0[o[2]] = Store<T>::from(r_add(r_mul(m, b), r_mul(omb, gv)));
            p[o[0]] = Store<T>::from(r_add(pv, r_mul(neg_lr, u)));
            return;
        }
        if (l2) gv = r_add(gv, r_mul(wd, pv));
        if (kind == 1) {
            // Adagrad: sum.addcmul_(g, g); p.addcdiv_(g, sqrt(sum) + eps, value=-clr)
            const C sum = r_add(load(s0[o[2]]), r_mul(gv, gv));
            s0[o[2]] = Store<T>::from(sum);
            p[o[0]] = Store<T>::from(r_add(pv, r_div(r_mul(neg_lr, gv), r_add(r_sqrt(sum), eps))));
            return;
        }
        // RMSprop: square_avg.mul_(alpha).addcmul_(g, g, value=1 - alpha)
        const C sq = r_add(r_mul(load(s0[o[2]]), a), r_mul(r_mul(oma, gv), gv));
        s0[o[2]] = Store<T>::from(sq);
        C avg;
        if (centered) {
            // grad_avg.lerp_(g, 1 - alpha); avg = sqrt(square_avg - grad_avg^2)
            const C ga0 = load(s2[o[4]]);
            const C ga = w_small ? r_add(ga0, r_mul(oma, r_sub(gv, ga0)))
                                 : r_sub(gv, r_mul(r_sub(gv, ga0), one_minus_oma));
            s2[o[4]] = Store<T>::from(ga);
            avg = r_sqrt(r_sub(sq, r_mul(ga, ga)));
        } else {
            avg = r_sqrt(sq);
        }
        avg = r_add(avg, eps);
        if (mom) {
            // buf.mul_(momentum).addcdiv_(g, avg); p.add_(buf, alpha=-lr)
            const C bv = r_add(r_mul(load(s1[o[3]]), b), r_div(gv, avg));
            s1[o[3]] = Store<T>::from(bv);
            p[o[0]] = Store<T>::from(r_add(pv, r_mul(neg_lr, bv)));
        } else {
            // p.addcdiv_(g, avg, value=-lr)
            p[o[0]] = Store<T>::from(r_add(pv, r_div(r_mul(neg_lr, gv), avg)));
        }
    });
}

#define OPTIM_KERNELS(SUF, T)                                                                         \
    KERNEL void adam_step_##SUF(Geom<5> g, i64 n, T* p, const T* grad, T* m, T* v, T* vmax, AdamK k) { \
        adam_impl<T>(g, n, p, grad, m, v, vmax, k);                                                   \
    }                                                                                                 \
    KERNEL void sgd_step_##SUF(Geom<3> g, i64 n, T* p, const T* grad, T* buf, SgdK k) {               \
        sgd_impl<T>(g, n, p, grad, buf, k);                                                           \
    }                                                                                                 \
    KERNEL void rule_step_##SUF(Geom<5> g, i64 n, T* p, const T* grad, T* s0, T* s1, T* s2, RuleK k) { \
        rule_impl<T>(g, n, p, grad, s0, s1, s2, k);                                                   \
    }                                                                                                 \
    KERNEL void sum_squares_##SUF(Geom<1> g, i64 n, const T* x, double* partials) {                  \
        sum_squares_impl<T>(g, n, x, partials);                                                       \
    }                                                                                                 \
    KERNEL void unscale_check_##SUF(Geom<1> g, i64 n, T* x, float inv, float* found) {               \
        unscale_check_impl<T>(g, n, x, inv, found);                                                   \
    }

OPTIM_KERNELS(f32, float)
OPTIM_KERNELS(f64, double)
OPTIM_KERNELS(f16, f16)
OPTIM_KERNELS(bf16, bf16)
