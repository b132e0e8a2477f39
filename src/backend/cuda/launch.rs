//! Kernel launch helpers: operand geometry passed to kernels by value, device
//! pointers, launch configurations.
//!
//! The structs here mirror the ones in `kernels/*.cu` field for field
//! (`#[repr(C)]`); they travel as kernel parameters (at most 1,208 bytes,
//! under the 4 KiB parameter limit), so a strided launch needs no
//! device allocation and no host-to-device copy of shapes and strides.

use super::device::{drv, Gpu};
use super::kernels::Kernel;
use super::stream::Stream;
use crate::backend::Operand;
use crate::error::{Error, Result};
use crate::layout::Layout;
use cudarc::driver::{DeviceRepr, LaunchConfig, PushKernelArg};
use std::marker::PhantomData;

/// Most dimensions a kernel walks (after merging), as `TS_MAX_RANK`:
/// PyTorch's CUDA limit (`MAX_DIMS` of its `OffsetCalculator`). The geometry
/// structs stay within the 4 KiB kernel-parameter limit (the largest, five
/// operands, is 1,208 bytes), and `tests/cuda/nvrtc.rs` assembles every kernel
/// with ptxas to check that walking them needs no local memory.
pub(crate) const MAX_RANK: usize = 25;
/// Threads per block of every launch (`TS_BLOCK`).
pub(crate) const BLOCK: u32 = 256;
/// Threads of a warp (`TS_WARP`).
pub(crate) const WARP: i32 = 32;

/// `Geom<N>`: the shape and one stride row per operand. `rank == 0` means
/// every operand is dense (element i at offset i).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Geom<const N: usize> {
    pub rank: i32,
    pub pad: i32,
    pub shape: [i64; MAX_RANK],
    pub strides: [[i64; MAX_RANK]; N],
}

// SAFETY: plain old data with the C layout of `Geom<N>` in the prelude.
unsafe impl<const N: usize> DeviceRepr for Geom<N> {}

/// Drops size-1 dimensions and merges neighbours that are contiguous in every
/// layout (the same rule as the CPU's `strided::Plan`). Returns the merged
/// shape and strides (all layouts must have one shape).
pub(crate) fn coalesce<const N: usize>(layouts: [&Layout; N]) -> (Vec<usize>, [Vec<usize>; N]) {
    let shape0 = layouts[0].shape();
    let mut shape: Vec<usize> = Vec::new();
    let mut strides: [Vec<usize>; N] = std::array::from_fn(|_| Vec::new());
    for (d, &size) in shape0.iter().enumerate() {
        if size == 1 {
            continue;
        }
        let merge = !shape.is_empty()
            && strides
                .iter()
                .zip(&layouts)
                .all(|(s, l)| *s.last().unwrap() == l.strides()[d] * size);
        if merge {
            *shape.last_mut().unwrap() *= size;
            for (s, l) in strides.iter_mut().zip(&layouts) {
                *s.last_mut().unwrap() = l.strides()[d];
            }
        } else {
            shape.push(size);
            for (s, l) in strides.iter_mut().zip(&layouts) {
                s.push(l.strides()[d]);
            }
        }
    }
    (shape, strides)
}

/// The layout of `l` over the dims `dims` alone, at offset 0 (a kernel's
/// view of the kept or the reduced dims).
pub(crate) fn sub_layout(l: &Layout, dims: &[usize]) -> Layout {
    Layout::from_parts(
        dims.iter().map(|&d| l.shape()[d]).collect(),
        dims.iter().map(|&d| l.strides()[d]).collect(),
        0,
    )
}

/// Writes `v` into the front of a geometry row of `MAX_RANK` entries.
pub(crate) fn fill_row(dst: &mut [i64; MAX_RANK], v: &[usize]) {
    for (d, &x) in v.iter().enumerate() {
        dst[d] = x as i64;
    }
}

pub(crate) fn too_many_dims(op: &'static str, shape: &[usize]) -> Error {
    Error::arg(
        op,
        format!(
            "CUDA kernels walk at most {MAX_RANK} dimensions that do not merge (PyTorch's CUDA limit too); this operand's merged shape {shape:?} has {}",
            shape.len()
        ),
    )
}

impl<const N: usize> Geom<N> {
    /// The geometry of `N` layouts of one shape.
    pub(crate) fn new(op: &'static str, layouts: [&Layout; N]) -> Result<Self> {
        debug_assert!(layouts.iter().all(|l| l.shape() == layouts[0].shape()));
        let (shape, strides) = coalesce(layouts);
        let mut g = Geom {
            rank: 0,
            pad: 0,
            shape: [1; MAX_RANK],
            strides: [[0; MAX_RANK]; N],
        };
        let dense = shape.len() <= 1 && strides.iter().all(|s| s.first().is_none_or(|&x| x == 1));
        if dense {
            return Ok(g);
        }
        if shape.len() > MAX_RANK {
            return Err(too_many_dims(op, &shape));
        }
        g.rank = shape.len() as i32;
        for (d, &s) in shape.iter().enumerate() {
            g.shape[d] = s as i64;
            for (row, st) in g.strides.iter_mut().zip(&strides) {
                row[d] = st[d] as i64;
            }
        }
        Ok(g)
    }

    /// `true` for the dense fast path.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn is_dense(&self) -> bool {
        self.rank == 0
    }
}

/// Device address of an operand's first element.
pub(crate) fn dptr(o: &Operand) -> u64 {
    (o.storage.addr() + o.layout.offset() * o.dtype.size_in_bytes()) as u64
}

/// The elements of an operand, as the kernels' `n`.
pub(crate) fn numel(o: &Operand) -> i64 {
    o.layout.numel() as i64
}

impl Gpu {
    /// A grid-stride configuration for `n` independent items: at most 32
    /// blocks of [`BLOCK`] threads per multiprocessor.
    pub(crate) fn grid(&self, n: i64) -> LaunchConfig {
        let want = (n.max(1) as u64).div_ceil(BLOCK as u64);
        let cap = self.sm_count as u64 * 32;
        LaunchConfig {
            grid_dim: (want.clamp(1, cap) as u32, 1, 1),
            block_dim: (BLOCK, 1, 1),
            shared_mem_bytes: 0,
        }
    }

    /// Exactly `blocks` blocks of [`BLOCK`] threads (kernels that map blocks
    /// to chunks of work).
    pub(crate) fn blocks(&self, blocks: u64) -> LaunchConfig {
        LaunchConfig {
            grid_dim: (blocks.max(1) as u32, 1, 1),
            block_dim: (BLOCK, 1, 1),
            shared_mem_bytes: 0,
        }
    }

    /// One block per row for `rows` rows, at most 32 per multiprocessor
    /// (the norm kernels stride over the rest).
    pub(crate) fn per_row(&self, rows: i64) -> LaunchConfig {
        self.groups(rows, BLOCK as i32)
    }

    /// Groups of `group` threads ([`WARP`] or [`BLOCK`]), one per item, for
    /// `items` items (reductions, softmax rows).
    pub(crate) fn groups(&self, items: i64, group: i32) -> LaunchConfig {
        let per_block = (BLOCK as i64 / group as i64).max(1);
        let want = (items.max(1) as u64).div_ceil(per_block as u64);
        let cap = self.sm_count as u64 * 32;
        LaunchConfig {
            grid_dim: (want.clamp(1, cap) as u32, 1, 1),
            block_dim: (BLOCK, 1, 1),
            shared_mem_bytes: 0,
        }
    }
}

/// The group size for a reduction of `n` elements per output: a warp for
/// short rows, the whole block for long ones.
pub(crate) fn group_for(n: i64) -> i32 {
    if n >= 1024 {
        BLOCK as i32
    } else {
        WARP
    }
}

/// A kernel's parameter list as a tuple of Rust types, in the kernel's
/// order: what a launch pushes, and (through [`Args::sizes`]) what
/// `tests/cuda/nvrtc.rs` compares with the parameter list of the compiled PTX.
pub(crate) trait Args {
    /// The byte size of each parameter, in order.
    fn sizes() -> Vec<usize>;
    /// Pushes every parameter onto a launch.
    fn push<'a>(&'a self, b: &mut cudarc::driver::LaunchArgs<'a>);
}

macro_rules! tuple_args {
    ($($T:ident $i:tt),+) => {
        impl<$($T: DeviceRepr),+> Args for ($($T,)+) {
            fn sizes() -> Vec<usize> {
                vec![$(std::mem::size_of::<$T>()),+]
            }
            fn push<'a>(&'a self, b: &mut cudarc::driver::LaunchArgs<'a>) {
                $(b.arg(&self.$i);)+
            }
        }
    };
}
tuple_args!(A 0);
tuple_args!(A 0, B 1);
tuple_args!(A 0, B 1, C 2);
tuple_args!(A 0, B 1, C 2, D 3);
tuple_args!(A 0, B 1, C 2, D 3, E 4);
tuple_args!(A 0, B 1, C 2, D 3, E 4, F 5);
tuple_args!(A 0, B 1, C 2, D 3, E 4, F 5, G 6);
tuple_args!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7);
tuple_args!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8);
tuple_args!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9);

/// A loaded kernel whose parameters are the tuple `A`: only
/// [`Gpu::kernel`] makes one, from a [`Kernel<A>`] of `kernels.rs`, so a
/// launch can only pass the argument types that table gives the kernel.
pub(crate) struct Function<A> {
    f: cudarc::driver::CudaFunction,
    _args: PhantomData<fn(A)>,
}

impl<A: Args> Function<A> {
    pub(super) fn new(f: cudarc::driver::CudaFunction) -> Self {
        Function {
            f,
            _args: PhantomData,
        }
    }

    /// Launches the kernel on `s` with `args`.
    ///
    /// # Safety
    /// Every pointer in `args` must be valid for what the kernel does with
    /// it (the parameter count and sizes are fixed by `A`, and
    /// `tests/cuda/nvrtc.rs` checks them against the PTX).
    pub(crate) unsafe fn launch(
        &self,
        op: &'static str,
        s: &Stream,
        cfg: LaunchConfig,
        args: &A,
    ) -> Result<()> {
        let mut b = s.cu().launch_builder(&self.f);
        args.push(&mut b);
        // SAFETY: `args` has the kernel's parameter types (the `Kernel<A>`
        // table, checked against the PTX by tests/cuda/nvrtc.rs), and the caller
        // guarantees every pointer in it is valid for the grid's accesses
        // (this function's contract).
        unsafe { b.launch(cfg) }.map(|_| ()).map_err(drv(op))
    }
}

/// The stream and function for a launch of kernel `k` on `g`.
pub(crate) fn prepare<A: Args>(
    g: &Gpu,
    op: &'static str,
    k: &Kernel<A>,
) -> Result<(Stream, Function<A>)> {
    let f = g.kernel(op, k)?;
    Ok((super::stream::current(g), f))
}
