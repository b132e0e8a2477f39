//! Reductions, arg-reductions, softmax, matmul, the index ops and the fused
//! optimizer steps (Adam, AdamW, SGD, clip_grad_norm_) on the CPU and on
//! CUDA device 0, the same bodies on both (`on_both!`,
//! tests/common/devices.rs), over contiguous, permuted, stepped and
//! expanded layouts, against naive f64 references and, on CUDA, against
//! the CPU on the same layouts.
#![cfg(feature = "cuda")]

use crate::common;

use common::devices::{also_cpu, cast_ref, layout_456, on_both, sample, tensor, wrap};
use common::optim_ref::{adam_option_sets, ref_adam, ref_sgd, sgd_option_sets};
use common::optim_steps::{check_cases, grad_vals, laid_out, Case, Lay};
use common::{assert_close, read, store, tol, Params, ALL, FLOATS, NUMERIC};
use tensorscope::nn::{LayerNorm, Module};
use tensorscope::optim::{clip_grad_norm_, Adam, AdamW, Sgd};
use tensorscope::{memory, DType, Device, Error, Tensor};

on_both!(
    reductions,
    long_reductions,
    arg_reductions,
    softmax_family,
    matmul_ranks,
    linear_with_bias,
    index_ops,
    optimizer_steps,
    clip_grad_norm_on_device,
    layer_norm_forward_backward,
);

mod reductions;
use reductions::*;
mod matmul;
use matmul::*;
mod index;
use index::*;
mod optimizers;
use optimizers::*;
mod layer_norm;
use layer_norm::*;
mod kernel_review;
