//! Kernel launch helpers: operand geometry passed to kernels by value, device
//! pointers, launch configurations.
//!
//! The structs here mirror the ones in `kernels/*.cu` field for field
//! (`#[repr(C)]`); they travel as kernel parameters (a few hundred bytes,
//! well under the 4 KiB parameter limit), so a strided launch needs no
//! device allocation and no host-to-device copy of shapes and strides.

use super::device::{drv, Gpu};
use super::kernels::Module;
use super::stream::Stream;
use crate::backend::Operand;
use crate::error::{Error, Result};
use crate::layout::Layout;
use cudarc::driver::{DeviceRepr, LaunchConfig, PushKernelArg};

/// Most dimensions a kernel walks (after merging), as `TS_MAX_RANK`.
pub(crate) const MAX_RANK: usize = 8;
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

pub(crate) fn too_many_dims(op: &'static str, shape: &[usize]) -> Error {
    Error::arg(
        op,
        format!(
            "CUDA kernels walk at most {MAX_RANK} non-mergeable dimensions; this operand (merged shape {shape:?}) has {}: make it contiguous first",
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

/// One kernel launch on a stream: the function, then the arguments in the
/// kernel's order, then [`Launch::run`].
pub(crate) struct Launch<'a> {
    op: &'static str,
    args: cudarc::driver::LaunchArgs<'a>,
}

impl<'a> Launch<'a> {
    pub(crate) fn new(
        op: &'static str,
        stream: &'a Stream,
        f: &'a cudarc::driver::CudaFunction,
    ) -> Launch<'a> {
        Launch {
            op,
            args: stream.cu().launch_builder(f),
        }
    }

    /// Adds an argument. It must outlive the launch (hence the reference).
    pub(crate) fn arg<T: DeviceRepr>(&mut self, v: &'a T) -> &mut Self {
        self.args.arg(v);
        self
    }

    /// Launches.
    ///
    /// # Safety
    /// The arguments must match the kernel's parameters in number, order and
    /// type, and every pointer must be valid for what the kernel does with it.
    pub(crate) unsafe fn run(&mut self, cfg: LaunchConfig) -> Result<()> {
        unsafe { self.args.launch(cfg) }
            .map(|_| ())
            .map_err(drv(self.op))
    }
}

/// The stream and function for a launch of `name` from module `m` on `g`.
pub(crate) fn prepare(
    g: &Gpu,
    op: &'static str,
    m: Module,
    name: &str,
) -> Result<(Stream, cudarc::driver::CudaFunction)> {
    let f = g.function(op, m, name)?;
    Ok((super::stream::current(g), f))
}
