// Indexing: gather / index_select, scatter / index_copy, scatter_add /
// index_add, index_fill, masked_select.
//
//   gather_b<B>(IGeom g, i64 n, bits* out, const bits* src, const i64* index, i64* err)
//       iterates over out's shape: out[c] = src[c with c[dim] := index[c]]
//       (index_select: index strides 0 except along dim)
//   scatter_b<B>(IGeom g, i64 n, const bits* src, bits* dst, const i64* index, i64* err)
//       iterates over src's (= index's) shape: dst[c with c[dim] := index[c]] = src[c]
//   scatter_add_<dtype>(IGeom g, i64 n, const T* src, T* dst, const i64* index, i64* err)
//       the same with an atomic add (index_add: index strides 0 except along dim)
//   index_fill_b<B>(IGeom g, i64 n, u64 value, bits* dst, const i64* index, i64* err)
//       iterates over dst's shape with dim resized to the index length
//   masked_count(Geom<2> g, i64 n, const u8* mask, i64 chunk, i64* counts)
//   masked_select_b<B>(Geom<2> g, i64 n, bits* out, const bits* src, const u8* mask,
//                      i64 chunk, const i64* starts)
//       operand 0: src, operand 1: mask (broadcast to one shape). Block b
//       handles linear indices [b * chunk, (b + 1) * chunk): masked_count
//       writes its count, the host turns the counts into start positions,
//       masked_select_b<B> writes the selected elements in order. Launch
//       both with one block of TS_BLOCK threads per chunk.
//
// IGeom: strides[0] walks the iterated tensor, strides[1] the indexed one
// (its entry at `dim` multiplies the index), strides[2] the index tensor.
// An index outside [0, indexed_size) is skipped and reported in err[0..2]
// (see report_bad_index); the host turns that into Error::IndexOutOfRange.

struct IGeom {
    i32 rank;
    i32 dim;
    i64 shape[TS_MAX_RANK];
    i64 strides[3][TS_MAX_RANK];
    i64 indexed_size;
};

// Offsets of element i: o0 in the iterated tensor, o1 in the indexed one.
// false (and a report) if the index is out of range.
DEV bool index_walk(const IGeom& g, i64 i, const i64* index, i64* err, i64& o0, i64& o1) {
    i64 o2 = 0;
    o0 = 0;
    o1 = 0;
    for (int d = g.rank - 1; d >= 0; --d) {
        const i64 s = g.shape[d];
        const i64 c = i % s;
        i /= s;
        o0 += c * g.strides[0][d];
        o2 += c * g.strides[2][d];
        if (d != g.dim) o1 += c * g.strides[1][d];
    }
    const i64 k = index[o2];
    if (k < 0 || k >= g.indexed_size) {
        report_bad_index(err, k);
        return false;
    }
    o1 += k * g.strides[1][g.dim];
    return true;
}

#define INDEX_BITS_KERNELS(B)                                                                                 \
    KERNEL void gather_b##B(IGeom g, i64 n, Bits<B>::T* out, const Bits<B>::T* src, const i64* index,        \
                            i64* err) {                                                                       \
        GRID_LOOP(i, n) {                                                                                     \
            i64 o0, o1;                                                                                       \
            if (index_walk(g, i, index, err, o0, o1)) out[o0] = src[o1];                                       \
        }                                                                                                     \
    }                                                                                                         \
    KERNEL void scatter_b##B(IGeom g, i64 n, const Bits<B>::T* src, Bits<B>::T* dst, const i64* index,       \
                             i64* err) {                                                                      \
        GRID_LOOP(i, n) {                                                                                     \
            i64 o0, o1;                                                                                       \
            if (index_walk(g, i, index, err, o0, o1)) dst[o1] = src[o0];                                       \
        }                                                                                                     \
    }                                                                                                         \
    KERNEL void index_fill_b##B(IGeom g, i64 n, u64 value, Bits<B>::T* dst, const i64* index, i64* err) {    \
        const Bits<B>::T v = (Bits<B>::T)value;                                                               \
        GRID_LOOP(i, n) {                                                                                     \
            i64 o0, o1;                                                                                       \
            if (index_walk(g, i, index, err, o0, o1)) dst[o1] = v;                                             \
        }                                                                                                     \
    }                                                                                                         \
    KERNEL void masked_select_b##B(Geom<2> g, i64 n, Bits<B>::T* out, const Bits<B>::T* src, const u8* mask, \
                                   i64 chunk, const i64* starts) {                                            \
        masked_select_impl<Bits<B>::T>(g, n, out, src, mask, chunk, starts);                                   \
    }

#define SCATTER_ADD_KERNEL(SUF, T)                                                                            \
    KERNEL void scatter_add_##SUF(IGeom g, i64 n, const T* src, T* dst, const i64* index, i64* err) {        \
        GRID_LOOP(i, n) {                                                                                     \
            i64 o0, o1;                                                                                       \
            if (index_walk(g, i, index, err, o0, o1)) atomic_add(dst + o1, src[o0]);                           \
        }                                                                                                     \
    }

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
                            const i64* starts) {
    __shared__ i64 warp_base[TS_BLOCK / TS_WARP + 1];
    const int tid = threadIdx.x, lane = tid % TS_WARP, warp = tid / TS_WARP;
    const i64 start = (i64)blockIdx.x * chunk;
    const i64 end = start + chunk < n ? start + chunk : n;
    i64 pos = starts[blockIdx.x];
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
        if (sel) out[pos + warp_base[warp] + __popc(ballot & ((1u << lane) - 1u))] = src[elem_offset(g, i, 0)];
        pos += warp_base[TS_BLOCK / TS_WARP];
        __syncthreads();
    }
}

INDEX_BITS_KERNELS(1)
INDEX_BITS_KERNELS(2)
INDEX_BITS_KERNELS(4)
INDEX_BITS_KERNELS(8)

SCATTER_ADD_KERNEL(f32, float)
SCATTER_ADD_KERNEL(f64, double)
SCATTER_ADD_KERNEL(f16, f16)
SCATTER_ADD_KERNEL(bf16, bf16)
SCATTER_ADD_KERNEL(i64, i64)
SCATTER_ADD_KERNEL(i32, i32)
SCATTER_ADD_KERNEL(u8, u8)
