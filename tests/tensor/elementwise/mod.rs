//! Elementwise ops against naive f64 references: every binary op, comparison,
//! scalar form, unary op and `where`, their in-place and `_out` forms, over
//! every dtype where they are defined, with contiguous, transposed, stepped and
//! broadcast inputs; PyTorch's type promotion; in-place dtype and aliasing rules.
//!
//! Every test holds `LOCK`: the `_out` test asserts that the allocator's
//! running totals do not move, and other tests of this binary allocate.

use crate::common;

use common::*;
use tensorscope::{memory, DType, Error, Result, Tensor};

fn lock() -> crate::common::Guard {
    crate::common::serial()
}

mod binary;
use binary::*;
// The per-op tolerance of `binary`, not common's per-dtype one.
use binary::tol;
mod comparisons;
use comparisons::*;
mod scalar_forms;
mod unary;
use unary::*;
mod borrowed_layouts;
mod fuzz;
mod in_place;
mod operators;
mod out_forms;
mod where_op;
