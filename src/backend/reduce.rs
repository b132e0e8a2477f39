//! Dispatch of reduction, softmax and matmul kernels (to be written).
