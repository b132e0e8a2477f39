//! Unit tests of the CUDA backend. The first group needs no GPU (geometry,
//! scalar encoding, the cuBLAS row/column-major plan against an emulated
//! column-major GEMM, the record_stream allocator over a fake source, the
//! kernel name manifest). The second group runs crate-internal kernels the
//! op layer does not reach through the dispatch (fused softmax backward,
//! random fills, layer norm, dropout) and the rank-2/3 cuBLAS entry point
//! against naive references, and prints a skip line without a GPU. The ops
//! behind the dispatch are tested on both devices in tests/cuda/cuda.rs,
//! tests/cuda/cuda_elementwise.rs and tests/cuda/cuda_ops/.

use super::alloc::{Fence, StreamAwareAllocator, StreamUse};
use super::blas::{plan, storage_order, GemmPlan, Mat};
use super::elementwise::scalar_bits;
use super::kernels::{self, Module};
use super::launch::{coalesce, Geom, MAX_RANK};
use crate::alloc::caching::SegmentSource;
use crate::alloc::{BlockSink, DeviceAllocator};
use crate::backend::cuda;
use crate::backend::{ReduceOp, Reduction};
use crate::device::Device;
use crate::dtype::DType;
use crate::error::Error;
use crate::layout::Layout;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

mod alloc;
mod gemm;
mod host;
