//! Dispatch of index, gather/scatter, cat and mask kernels (to be written).
