//! `Tensor::record_stream`: keeps a CUDA tensor's block out of the pool
//! while another stream may still use it.

use crate::backend::cuda::{self, Stream};
use crate::error::Result;
use crate::tensor::Tensor;

impl Tensor {
    /// Marks this tensor's memory as used by work queued on `stream`
    /// (PyTorch's `Tensor.record_stream`).
    ///
    /// Without this, when the last handle to the tensor is dropped its block
    /// goes straight back to the pool of the stream it was allocated on, and
    /// the next allocation there may overwrite it while `stream` is still
    /// reading it. With it, the block is kept out of the pool until the work
    /// queued on `stream` at the time of the drop has finished. The bytes
    /// stop counting in [`memory_allocated`](crate::memory::memory_allocated)
    /// at the drop, as in PyTorch; they stay in `active_bytes` until then.
    /// A CPU tensor, or a stream of another device, is an `Err`.
    pub fn record_stream(&self, stream: &Stream) -> Result<()> {
        cuda::record_stream(
            self.device(),
            self.storage_ptr(),
            self.storage_nbytes(),
            stream,
        )
    }
}
