//! Display: a PyTorch-like printout that truncates large tensors.
