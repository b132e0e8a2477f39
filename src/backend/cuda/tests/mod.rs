//! Unit tests of the CUDA backend. The first group needs no GPU (geometry,
//! scalar encoding, the cuBLAS row/column-major plan against an emulated
//! column-major GEMM, the record_stream allocator over a fake source, the
//! kernel name manifest). The kernels called through the backend with
//! tensors are `src/internal_tests/cuda_kernels.rs`'s; the ops behind the
//! dispatch are tested on both devices in tests/cuda/cuda.rs,
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
