// Indexing: gather (index_select, gather, fancy indexing, the values of
// max_dim/min_dim), scatter (scatter_, index_copy_, index_fill_ and
// scatter_value_ through a one-element broadcast source), scatter_add
// (scatter_add_, index_add_), scatter_mul/max/min (scatter_reduce_),
// masked_select.
//
// These mirror the dispatch functions of src/backend/index.rs: the host
// passes *walk layouts* (the indexed operand's strides with the indexed
// dimension's stride set to 0, in the shape of the walk), so one Geom<3>
// walks the three operands together and the index only moves along the
// indexed dimension (`stride` elements per step, `size` steps).
//
//   index_check_<I>(Geom<1> g, i64 n, const I* index, i64 size, i32 negative, i64* err)
//       checks every element of the index (seen through its own layout):
//       valid are 0..size, and -size..0 too when `negative` != 0. The first
//       bad one met is recorded in err[0..2] (see report_bad_index).
//   gather_<I>_b<B>(Geom<3> g, i64 n, bits* dst, const bits* src, const I* index,
//                   i64 size, i64 stride, const i64* err)
//       operand 0: dst, 1: src walk, 2: index walk.
//       dst[o0] = src[o1 + resolve(index[o2]) * stride]
//   scatter_<I>_b<B>(Geom<3> g, i64 n, bits* dst, const bits* src, const I* index,
//                    i64 size, i64 stride, const i64* err)
//       operand 0: dst walk, 1: src, 2: index walk.
//       dst[o0 + resolve(index[o2]) * stride] = src[o1]
//   scatter_add_<I>_<dtype>(same parameters)
//       the same with an atomic add (numeric dtypes).
//   scatter_mul_<I>_<dtype>, scatter_max_<I>_<dtype>, scatter_min_<I>_<dtype>
//       (same parameters; numeric dtypes) the same with an atomic multiply,
//       maximum or minimum (scatter_reduce_). Float maximum and minimum
//       propagate NaN, as torch.maximum does. A bool destination uses the u8
//       kernels: on 0 and 1, max is `or`, min and mul are `and`.
//
// `err` (may be null) is the buffer index_check_<I> wrote, earlier on the
// same stream: when it holds a report the kernel writes nothing, so a bad
// index leaves the destination untouched (the host then returns
// Error::IndexOutOfRange). Negative indices count from the end; an index
// still out of range is skipped (never an out-of-bounds access). With
// repeated indices, scatter_ keeps one of the writes (which one is not
// specified, as in PyTorch on CUDA); scatter_add_ adds them all, in no fixed
// order.
//
//   masked_count(Geom<2> g, i64 n, const u8* mask, i64 chunk, i64* counts)
//   masked_select_b<B>(Geom<2> g, i64 n, bits* out, const bits* src, const u8* mask,
//                      i64 chunk, const i64* counts, i64 cap)
//       operand 0: src, operand 1: mask (broadcast to one shape). Block b
//       handles linear indices [b * chunk, (b + 1) * chunk): masked_count
//       writes its count; masked_select_b<B> starts at the sum of the counts
//       of the blocks before it (read on the device: the host only reads
//       the total, to size `out`) and writes the selected elements in
//       order, never at or past `cap` (out's length), whatever the mask
//       holds by then. Launch both with one block of TS_BLOCK threads per
//       chunk.

template <typename I> DEV void index_check(const Geom<1>& g, i64 n, const I* index, i64 size, i32 negative, i64* err) {
    for_each<1>(g, n, [&](const i64* off) {
        const i64 k = (i64)index[off[0]];
        const bool ok = (k >= 0 && k < size) || (negative && k < 0 && k >= -size);
        if (!ok) report_bad_index(err, k);
    });
}

// The index as a position in [0, size), or -1.
template <typename I> DEV i64 resolve(I v, i64 size) {
    i64 k = (i64)v;
    if (k < 0) k += size;
    return (k >= 0 && k < size) ? k : -1;
}

DEV bool reported(const i64* err) { return err != nullptr && err[0] != 0; }

template <typename I, typename T>
DEV void gather_impl(const Geom<3>& g, i64 n, T* dst, const T* src, const I* index, i64 size, i64 stride,
                     const i64* err) {
    if (reported(err)) return;
    for_each<3>(g, n, [&](const i64* off) {
        const i64 k = resolve(index[off[2]], size);
        if (k >= 0) dst[off[0]] = src[off[1] + k * stride];
    });
}

template <typename I, typename T>
DEV void scatter_impl(const Geom<3>& g, i64 n, T* dst, const T* src, const I* index, i64 size, i64 stride,
                      const i64* err) {
    if (reported(err)) return;
    for_each<3>(g, n, [&](const i64* off) {
        const i64 k = resolve(index[off[2]], size);
        if (k >= 0) dst[off[0] + k * stride] = src[off[1]];
    });
}

template <typename I, typename T>
DEV void scatter_add_impl(const Geom<3>& g, i64 n, T* dst, const T* src, const I* index, i64 size, i64 stride,
                          const i64* err) {
    if (reported(err)) return;
    for_each<3>(g, n, [&](const i64* off) {
        const i64 k = resolve(index[off[2]], size);
        if (k >= 0) atomic_add(dst + off[0] + k * stride, src[off[1]]);
    });
}

#define INDEX_CHECK_KERNEL(IS, I)                                                                             \
    KERNEL void index_check_##IS(Geom<1> g, i64 n, const I* index, i64 size, i32 negative, i64* err) {        \
        index_check<I>(g, n, index, size, negative, err);                                                     \
    }

#define INDEX_BITS_KERNELS(IS, I, B)                                                                          \
    KERNEL void gather_##IS##_b##B(Geom<3> g, i64 n, Bits<B>::T* dst, const Bits<B>::T* src, const I* index,  \
                                   i64 size, i64 stride, const i64* err) {                                    \
        gather_impl<I, Bits<B>::T>(g, n, dst, src, index, size, stride, err);                                 \
    }                                                                                                         \
    KERNEL void scatter_##IS##_b##B(Geom<3> g, i64 n, Bits<B>::T* dst, const Bits<B>::T* src, const I* index, \
                                    i64 size, i64 stride, const i64* err) {                                   \
        scatter_impl<I, Bits<B>::T>(g, n, dst, src, index, size, stride, err);                                \
    }

// The combinations of scatter_reduce_. Integer products wrap (computed
// unsigned: no signed overflow); f16 and bf16 go through float and round
// once; max and min return one of their operands, so they round nothing.
template <typename T> DEV T red_mul(T a, T b) { return a * b; }
DEV i32 red_mul(i32 a, i32 b) { return (i32)((u32)a * (u32)b); }
DEV i64 red_mul(i64 a, i64 b) { return (i64)((u64)a * (u64)b); }
DEV u8 red_mul(u8 a, u8 b) { return (u8)((u32)a * (u32)b); }
DEV f16 red_mul(f16 a, f16 b) { return float_to_f16(load(a) * load(b)); }
DEV bf16 red_mul(bf16 a, bf16 b) { return float_to_bf16(load(a) * load(b)); }
template <typename T> DEV T red_max(T a, T b) {
    if (is_nan(load(a))) return a;
    if (is_nan(load(b))) return b;
    return load(a) < load(b) ? b : a;
}
template <typename T> DEV T red_min(T a, T b) {
    if (is_nan(load(a))) return a;
    if (is_nan(load(b))) return b;
    return load(b) < load(a) ? b : a;
}

// Atomic `*p = f(*p)` for any element: a CAS loop on the element (4 or 8
// bytes) or on the aligned word holding it (1 or 2 bytes). Stops without a
// write when f changes nothing (a maximum already in place).
template <typename T, typename F> DEV void atomic_update(T* p, F f) {
    if constexpr (sizeof(T) <= 2) {
        atomic_update_small(p, f);
    } else {
        typedef typename Bits<sizeof(T)>::T W;  // u32 or u64: atomicCAS takes both
        W* w = (W*)p;
        W old = *w, assumed;
        do {
            assumed = old;
            const T cur = from_bits<T>((u64)assumed);
            const T nxt = f(cur);
            if (to_bits(cur) == to_bits(nxt)) return;
            old = atomicCAS(w, assumed, (W)to_bits(nxt));
        } while (assumed != old);
    }
}

template <typename I, typename T, typename F>
DEV void scatter_reduce_impl(const Geom<3>& g, i64 n, T* dst, const T* src, const I* index, i64 size, i64 stride,
                             const i64* err, F combine) {
    if (reported(err)) return;
    for_each<3>(g, n, [&](const i64* off) {
        const i64 k = resolve(index[off[2]], size);
        if (k < 0) return;
        const T v = src[off[1]];
        atomic_update(dst + off[0] + k * stride, [&](T x) { return combine(x, v); });
    });
}

#define SCATTER_REDUCE_KERNEL(NAME, IS, I, SUF, T, COMBINE)                                                   \
    KERNEL void scatter_##NAME##_##IS##_##SUF(Geom<3> g, i64 n, T* dst, const T* src, const I* index,         \
                                              i64 size, i64 stride, const i64* err) {                         \
        scatter_reduce_impl<I, T>(g, n, dst, src, index, size, stride, err,                                   \
                                  [](T a, T b) { return COMBINE(a, b); });                                    \
    }

#define SCATTER_ADD_KERNEL(IS, I, SUF, T)                                                                     \
    KERNEL void scatter_add_##IS##_##SUF(Geom<3> g, i64 n, T* dst, const T* src, const I* index, i64 size,    \
                                         i64 stride, const i64* err) {                                        \
        scatter_add_impl<I, T>(g, n, dst, src, index, size, stride, err);                                     \
    }                                                                                                         \
    SCATTER_REDUCE_KERNEL(mul, IS, I, SUF, T, red_mul)                                                        \
    SCATTER_REDUCE_KERNEL(max, IS, I, SUF, T, red_max)                                                        \
    SCATTER_REDUCE_KERNEL(min, IS, I, SUF, T, red_min)

#define INDEX_KERNELS(IS, I)                 \
    INDEX_CHECK_KERNEL(IS, I)                \
    INDEX_BITS_KERNELS(IS, I, 1)             \
    INDEX_BITS_KERNELS(IS, I, 2)             \
    INDEX_BITS_KERNELS(IS, I, 4)             \
    INDEX_BITS_KERNELS(IS, I, 8)             \
    SCATTER_ADD_KERNEL(IS, I, f32, float)    \
    SCATTER_ADD_KERNEL(IS, I, f64, double)   \
    SCATTER_ADD_KERNEL(IS, I, f16, f16)      \
    SCATTER_ADD_KERNEL(IS, I, bf16, bf16)    \
    SCATTER_ADD_KERNEL(IS, I, i64, i64)      \
    SCATTER_ADD_KERNEL(IS, I, i32, i32)      \
    SCATTER_ADD_KERNEL(IS, I, u8, u8)

INDEX_KERNELS(i64, i64)
INDEX_KERNELS(i32, i32)

// ------------------------------------------------------------ masks ---

DEV i64 elem_offset(const Geom<2>& g, i64 i, int k) {
    if (g.rank == 0) return i;
    i64 off[2];
    geom_offsets<2>(g, i, off);
    return off[k];
}

KERNEL void masked_count(Geom<2> g, i64 n, const u8* mask, i64 chunk, i64* counts) {
    __shared__ i64 scratch[TS_BLOCK];
    const i64 start = (i64)blockIdx.x * chunk;
    const i64 end = start + chunk < n ? start + chunk : n;
    i64 c = 0;
    for (i64 i = start + threadIdx.x; i < end; i += TS_BLOCK) c += mask[elem_offset(g, i, 1)] != 0;
    c = group_reduce(c, scratch, TS_BLOCK, [](i64 a, i64 b) { return a + b; });
    if (threadIdx.x == 0) counts[blockIdx.x] = c;
}

// Writes the selected elements of this block's chunk in order, one tile of
// TS_BLOCK elements at a time: a ballot per warp, then a prefix over warps.
template <typename T>
DEV void masked_select_impl(const Geom<2>& g, i64 n, T* out, const T* src, const u8* mask, i64 chunk,
                            const i64* counts, i64 cap) {
    __shared__ i64 warp_base[TS_BLOCK / TS_WARP + 1];
    __shared__ i64 scratch[TS_BLOCK];
    const int tid = threadIdx.x, lane = tid % TS_WARP, warp = tid / TS_WARP;
    const i64 start = (i64)blockIdx.x * chunk;
    const i64 end = start + chunk < n ? start + chunk : n;
    // This block's first output position: the counts of the blocks before it.
    i64 before = 0;
    for (i64 b = tid; b < (i64)blockIdx.x; b += TS_BLOCK) before += counts[b];
    i64 pos = group_reduce(before, scratch, TS_BLOCK, [](i64 a, i64 b) { return a + b; });
    if (tid != 0) pos = 0;
    if (tid == 0) warp_base[0] = pos;
    __syncthreads();
    pos = warp_base[0];
    __syncthreads();
    for (i64 t = start; t < end; t += TS_BLOCK) {
        const i64 i = t + tid;
        const bool in = i < end;
        const bool sel = in && mask[elem_offset(g, i, 1)] != 0;
        const u32 ballot = __ballot_sync(0xffffffffu, sel);
        if (lane == 0) warp_base[warp + 1] = __popc(ballot);
        __syncthreads();
        if (tid == 0) {
            warp_base[0] = 0;
            for (int w = 1; w <= TS_BLOCK / TS_WARP; ++w) warp_base[w] += warp_base[w - 1];
        }
        __syncthreads();
        const i64 at = pos + warp_base[warp] + __popc(ballot & ((1u << lane) - 1u));
        if (sel && at < cap) out[at] = src[elem_offset(g, i, 0)];
        pos += warp_base[TS_BLOCK / TS_WARP];
        __syncthreads();
    }
}

#define MASKED_SELECT_KERNEL(B)                                                                               \
    KERNEL void masked_select_b##B(Geom<2> g, i64 n, Bits<B>::T* out, const Bits<B>::T* src, const u8* mask, \
                                   i64 chunk, const i64* counts, i64 cap) {                                   \
        masked_select_impl<Bits<B>::T>(g, n, out, src, mask, chunk, counts, cap);                              \
    }

MASKED_SELECT_KERNEL(1)
MASKED_SELECT_KERNEL(2)
MASKED_SELECT_KERNEL(4)
MASKED_SELECT_KERNEL(8)

// ------------------------------------------------------------ argsort ---
//
//   argsort_<dt>(const T* x, i64* idx, i64 rows, i64 n, i32 descending)
//
// One thread per row of the contiguous [rows, n] input: the row of idx
// becomes the stable sorting permutation of the row of x, the order of
// src/backend/cpu/sort.rs (NaN after every number ascending, before every
// number descending; equal elements in their original order, by keying
// the heap sort on (value, index)). O(n log n) per row in one thread: a
// first version, for correctness; long single rows are slow.
template <typename T>
DEV bool sort_before(const T* row, i64 a, i64 b, bool desc) {
    const auto va = load(row[a]);
    const auto vb = load(row[b]);
    const bool na = va != va, nb = vb != vb;
    if (na || nb) {
        if (na && nb) return a < b;
        return desc ? na : nb;
    }
    if (va < vb) return !desc;
    if (vb < va) return desc;
    return a < b;
}

template <typename T>
DEV void argsort_row(const T* row, i64* idx, i64 n, bool desc) {
    for (i64 i = 0; i < n; ++i) idx[i] = i;
    auto sift = [&](i64 root, i64 end) {
        for (;;) {
            i64 child = 2 * root + 1;
            if (child >= end) return;
            if (child + 1 < end && sort_before(row, idx[child], idx[child + 1], desc)) child += 1;
            if (!sort_before(row, idx[root], idx[child], desc)) return;
            const i64 t = idx[root];
            idx[root] = idx[child];
            idx[child] = t;
            root = child;
        }
    };
    for (i64 s = n / 2 - 1; s >= 0; --s) sift(s, n);
    for (i64 e = n - 1; e > 0; --e) {
        const i64 t = idx[0];
        idx[0] = idx[e];
        idx[e] = t;
        sift(0, e);
    }
}

#define ARGSORT_KERNEL(SUF, T)                                                              \
    KERNEL void argsort_##SUF(const T* x, i64* idx, i64 rows, i64 n, i32 desc) {            \
        for (i64 r = blockIdx.x * (i64)blockDim.x + threadIdx.x; r < rows;                  \
             r += (i64)gridDim.x * blockDim.x) {                                            \
            argsort_row<T>(x + r * n, idx + r * n, n, desc != 0);                           \
        }                                                                                   \
    }

ARGSORT_KERNEL(f32, float)
ARGSORT_KERNEL(f64, double)
ARGSORT_KERNEL(f16, f16)
ARGSORT_KERNEL(bf16, bf16)
ARGSORT_KERNEL(i64, i64)
ARGSORT_KERNEL(i32, i32)
ARGSORT_KERNEL(u8, u8)
ARGSORT_KERNEL(bool, u8)
