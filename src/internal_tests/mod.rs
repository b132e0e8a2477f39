//! Unit tests that cross the layers: they build tensors through the op layer
//! and look at the backend's internals, so they live above both (the backend's
//! own tests, under `src/backend/`, see storages and layouts only).

#[cfg(target_arch = "x86_64")]
mod cpu_dispatch;
#[cfg(feature = "cuda")]
mod cuda_kernels;
