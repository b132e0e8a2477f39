//! `einsum`: PyTorch's `torch.einsum(equation, *operands)` with letters `a-z
//! A-Z`, one `...` per term, an explicit (`->`) or implicit output (the
//! labels that appear once, in ASCII order, after the broadcast `...`
//! dimensions), repeated labels within a term (diagonals) and size-1
//! dimensions broadcast against their label's size, as PyTorch does.
//!
//! How: each operand first loses its diagonals (a product with an
//! equality mask, summed: differentiable) and the labels no other term
//! and not the output has (summed); then the operands are contracted left
//! to right, each pair as one batched `matmul` (`[batch, left,
//! contracted] x [batch, contracted, right]`, permuted and reshaped into
//! place), and the result is permuted into the output's order. Every step
//! is an op with autograd on both devices, so `einsum` is differentiable
//! and runs wherever `matmul` does.

use crate::alloc::history::op_context;
use crate::dtype::DType;
use crate::error::{bail, Error, Result};
use crate::tensor::Tensor;

const OP: &str = "einsum";

/// A label: a letter (its ASCII code) or the `j`-th broadcast dimension of
/// `...` (`256 + j`, after every letter in the implicit output's order).
type Label = u32;

const ELLIPSIS_BASE: Label = 256;

fn err(equation: &str, msg: impl std::fmt::Display) -> Error {
    Error::arg(OP, format!("equation {equation:?}: {msg}"))
}

/// One term's letters before and after its `...` (if it has one).
struct Term {
    before: Vec<Label>,
    after: Vec<Label>,
    ellipsis: bool,
}

fn parse_term(eq: &str, s: &str) -> Result<Term> {
    let mut t = Term {
        before: Vec::new(),
        after: Vec::new(),
        ellipsis: false,
    };
    let mut rest = s;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix("...") {
            if t.ellipsis {
                return Err(err(eq, format!("term {s:?} has more than one '...'")));
            }
            t.ellipsis = true;
            rest = r;
            continue;
        }
        let c = rest.chars().next().unwrap_or(' ');
        if !c.is_ascii_alphabetic() {
            return Err(err(
                eq,
                format!("invalid subscript {c:?} (letters and '...' only)"),
            ));
        }
        if t.ellipsis {
            t.after.push(c as Label);
        } else {
            t.before.push(c as Label);
        }
        rest = &rest[c.len_utf8()..];
    }
    Ok(t)
}

impl Term {
    /// The labels of an operand of `rank` dimensions, `...` standing for
    /// the last of `ell` broadcast labels.
    fn labels(&self, eq: &str, which: usize, shape: &[usize], ell: usize) -> Result<Vec<Label>> {
        let named = self.before.len() + self.after.len();
        let rank = shape.len();
        if rank < named || (!self.ellipsis && rank != named) {
            return Err(err(
                eq,
                format!(
                    "term {which} has {named} subscripts for operand {which} of shape {shape:?} (rank {rank})"
                ),
            ));
        }
        let e = rank - named;
        let mut v = self.before.clone();
        v.extend((ell - e..ell).map(|j| ELLIPSIS_BASE + j as Label));
        v.extend(&self.after);
        Ok(v)
    }
}

/// An intermediate: a tensor and the label of each of its dimensions.
struct Part {
    t: Tensor,
    labels: Vec<Label>,
}

impl Part {
    /// The diagonal of every label that repeats (`ii -> i`): a product
    /// with the equality mask of the two dimensions, summed over the
    /// second.
    fn diagonals(mut self, eq: &str) -> Result<Part> {
        while let Some((a, b)) = first_repeat(&self.labels) {
            let n = self.t.shape()[a];
            if self.t.shape()[b] != n {
                return Err(err(
                    eq,
                    format!(
                        "a repeated subscript has sizes {n} and {} in one operand",
                        self.t.shape()[b]
                    ),
                ));
            }
            let dev = self.t.device();
            let r = self.t.rank();
            let mut sa = vec![1isize; r];
            sa[a] = n as isize;
            let mut sb = vec![1isize; r];
            sb[b] = n as isize;
            let ia = Tensor::arange(0.0, n as f64, 1.0, DType::I64, dev)?.reshape(&sa)?;
            let ib = Tensor::arange(0.0, n as f64, 1.0, DType::I64, dev)?.reshape(&sb)?;
            let dt = self.t.dtype();
            let mask = ia.eq(&ib)?.to_dtype(dt)?;
            // `sum` widens integers to int64: back to the operand's dtype.
            self.t = self.t.mul(&mask)?.sum(&[b as isize], false)?.to_dtype(dt)?;
            self.labels.remove(b);
        }
        Ok(self)
    }

    /// Sums the dimensions whose labels `keep` rejects.
    fn sum_out(self, keep: impl Fn(Label) -> bool) -> Result<Part> {
        let dims: Vec<isize> = (0..self.labels.len())
            .filter(|&i| !keep(self.labels[i]))
            .map(|i| i as isize)
            .collect();
        if dims.is_empty() {
            return Ok(self);
        }
        let labels = self.labels.iter().copied().filter(|&l| keep(l)).collect();
        Ok(Part {
            t: self.t.sum(&dims, false)?,
            labels,
        })
    }

    /// The tensor permuted to `order` (a permutation of its labels), each
    /// dimension expanded to `sizes`' size for its label.
    fn arranged(&self, order: &[Label], sizes: &dyn Fn(Label) -> usize) -> Result<Tensor> {
        let mut perm = Vec::with_capacity(order.len());
        for l in order {
            let Some(i) = self.labels.iter().position(|x| x == l) else {
                bail!(Error::arg(
                    OP,
                    format!("internal: subscript {} lost", show(*l))
                ));
            };
            perm.push(i as isize);
        }
        let shape: Vec<isize> = order.iter().map(|&l| sizes(l) as isize).collect();
        self.t.permute(&perm)?.expand(&shape)
    }
}

fn first_repeat(labels: &[Label]) -> Option<(usize, usize)> {
    for b in 1..labels.len() {
        if let Some(a) = labels[..b].iter().position(|&x| x == labels[b]) {
            return Some((a, b));
        }
    }
    None
}

/// `a * b * ...` of the sizes of `labels`.
fn prod(labels: &[Label], sizes: &dyn Fn(Label) -> usize) -> usize {
    crate::layout::numel_of(labels.iter().map(|&l| sizes(l)))
}

impl Tensor {
    /// `torch.einsum(equation, *operands)`: the sum over the labels that
    /// are not in the output of the product of the operands, as the
    /// equation names their dimensions (see the module docs for what the
    /// equation may hold). Operands of one dtype (not bool) and device.
    /// Differentiable. An `Err` naming `einsum` and the equation for a
    /// malformed equation, a term that does not match its operand's rank,
    /// or sizes of one label that differ (other than 1).
    ///
    /// ```
    /// # use tensorscope::{Tensor, Device};
    /// let a = Tensor::from_slice(&[1.0f32, 2., 3., 4., 5., 6.], &[2, 3], Device::Cpu)?;
    /// let b = Tensor::from_slice(&[1.0f32, 0., 0., 1., 1., 1.], &[3, 2], Device::Cpu)?;
    /// assert_eq!(Tensor::einsum("ij,jk->ik", &[&a, &b])?.to_vec::<f32>()?, vec![4., 5., 10., 11.]);
    /// assert_eq!(Tensor::einsum("ij->", &[&a])?.item::<f32>()?, 21.0);
    /// assert_eq!(Tensor::einsum("ij", &[&a])?.shape(), &[2, 3]);
    /// assert_eq!(Tensor::einsum("ji", &[&a])?.shape(), &[3, 2]);
    /// # Ok::<(), tensorscope::Error>(())
    /// ```
    pub fn einsum(equation: &str, operands: &[&Tensor]) -> Result<Tensor> {
        let ts: Vec<Option<&Tensor>> = operands.iter().map(|&t| Some(t)).collect();
        if let Some(c) = crate::autocast::cast(&crate::autocast::EINSUM, &ts)? {
            return Tensor::einsum(equation, &c.all());
        }
        let _op = op_context(OP);
        einsum_impl(equation, operands).map_err(|e| e.reported_as(OP))
    }
}

fn einsum_impl(eq: &str, operands: &[&Tensor]) -> Result<Tensor> {
    let compact: String = eq.chars().filter(|c| !c.is_whitespace()).collect();
    let (lhs, rhs) = match compact.split_once("->") {
        Some((l, r)) => (l, Some(r)),
        None => (compact.as_str(), None),
    };
    let terms: Vec<Term> = lhs
        .split(',')
        .map(|s| parse_term(eq, s))
        .collect::<Result<_>>()?;
    if operands.is_empty() || terms.len() != operands.len() {
        bail!(err(
            eq,
            format!("{} terms for {} operands", terms.len(), operands.len())
        ));
    }
    for o in &operands[1..] {
        operands[0].same_device(OP, o)?;
        if o.dtype() != operands[0].dtype() {
            bail!(Error::dtype(
                OP,
                format!("{} (the first operand's dtype)", operands[0].dtype()),
                o.dtype()
            ));
        }
    }
    // The broadcast dimensions of `...`: as many as the largest need.
    let mut ell = 0;
    for (t, o) in terms.iter().zip(operands) {
        let named = t.before.len() + t.after.len();
        if t.ellipsis && o.rank() > named {
            ell = ell.max(o.rank() - named);
        }
    }
    let mut parts = Vec::with_capacity(operands.len());
    for (which, (t, o)) in terms.iter().zip(operands).enumerate() {
        let labels = t.labels(eq, which, o.shape(), ell)?;
        parts.push(Part {
            t: o.alias(),
            labels,
        });
    }
    // Every label's size: equal, or 1 (broadcast).
    let mut size = std::collections::BTreeMap::<Label, usize>::new();
    for p in &parts {
        for (i, &l) in p.labels.iter().enumerate() {
            let n = p.t.shape()[i];
            let e = size.entry(l).or_insert(n);
            if *e == 1 {
                *e = n;
            } else if n != 1 && n != *e {
                let shapes: Vec<&[usize]> = operands.iter().map(|o| o.shape()).collect();
                bail!(err(
                    eq,
                    format!(
                        "subscript {} has sizes {} and {n} (operand shapes {shapes:?})",
                        show(l),
                        *e
                    )
                ));
            }
        }
    }
    let out: Vec<Label> = match rhs {
        Some(r) => {
            let t = parse_term(eq, r)?;
            let mut v = t.before.clone();
            if t.ellipsis {
                v.extend((0..ell).map(|j| ELLIPSIS_BASE + j as Label));
            }
            v.extend(&t.after);
            for (i, &l) in v.iter().enumerate() {
                if !size.contains_key(&l) {
                    bail!(err(
                        eq,
                        format!("output subscript {} is in no input", show(l))
                    ));
                }
                if v[..i].contains(&l) {
                    bail!(err(
                        eq,
                        format!("output subscript {} appears more than once", show(l))
                    ));
                }
            }
            v
        }
        None => {
            let mut count = std::collections::BTreeMap::<Label, usize>::new();
            for t in &terms {
                for &l in t.before.iter().chain(&t.after) {
                    *count.entry(l).or_insert(0) += 1;
                }
            }
            let mut v: Vec<Label> = (0..ell).map(|j| ELLIPSIS_BASE + j as Label).collect();
            v.extend(count.iter().filter(|&(_, &c)| c == 1).map(|(&l, _)| l));
            v
        }
    };
    let sizes = |l: Label| size.get(&l).copied().unwrap_or(1);

    let n = parts.len();
    let mut acc: Option<Part> = None;
    let mut rest: Vec<Option<Part>> = parts.into_iter().map(Some).collect();
    for i in 0..n {
        let later: Vec<Label> = rest[i + 1..]
            .iter()
            .flatten()
            .flat_map(|p| p.labels.iter().copied())
            .chain(out.iter().copied())
            .collect();
        let b = rest[i].take().expect("each operand once").diagonals(eq)?;
        acc = Some(match acc {
            None => b.sum_out(|l| later.contains(&l))?,
            Some(a) => {
                let a = a.sum_out(|l| later.contains(&l) || b.labels.contains(&l))?;
                let b = b.sum_out(|l| later.contains(&l) || a.labels.contains(&l))?;
                contract(a, b, &later, &sizes)?
            }
        });
    }
    let last = acc.expect("at least one operand");
    let last = last.sum_out(|l| out.contains(&l))?;
    // A single operand permuted (`ij->ji`) is a view of it, as PyTorch's.
    last.arranged(&out, &sizes)
}

/// `a` times `b`, summed over the labels both have that `later` lacks, as
/// one batched matmul.
fn contract(a: Part, b: Part, later: &[Label], sizes: &dyn Fn(Label) -> usize) -> Result<Part> {
    let both: Vec<Label> = a
        .labels
        .iter()
        .copied()
        .filter(|l| b.labels.contains(l))
        .collect();
    let batch: Vec<Label> = both.iter().copied().filter(|l| later.contains(l)).collect();
    let summed: Vec<Label> = both
        .iter()
        .copied()
        .filter(|l| !later.contains(l))
        .collect();
    let left: Vec<Label> = a
        .labels
        .iter()
        .copied()
        .filter(|l| !both.contains(l))
        .collect();
    let right: Vec<Label> = b
        .labels
        .iter()
        .copied()
        .filter(|l| !both.contains(l))
        .collect();
    let (nb, m, k, nn) = (
        prod(&batch, sizes),
        prod(&left, sizes),
        prod(&summed, sizes),
        prod(&right, sizes),
    );
    let order_a: Vec<Label> = batch.iter().chain(&left).chain(&summed).copied().collect();
    let order_b: Vec<Label> = batch.iter().chain(&summed).chain(&right).copied().collect();
    let ta = a
        .arranged(&order_a, sizes)?
        .reshape(&[nb as isize, m as isize, k as isize])?;
    let tb = b
        .arranged(&order_b, sizes)?
        .reshape(&[nb as isize, k as isize, nn as isize])?;
    let prod_t = ta.matmul(&tb)?;
    let labels: Vec<Label> = batch.iter().chain(&left).chain(&right).copied().collect();
    let shape: Vec<isize> = labels.iter().map(|&l| sizes(l) as isize).collect();
    Ok(Part {
        t: prod_t.reshape(&shape)?,
        labels,
    })
}

fn show(l: Label) -> String {
    if l >= ELLIPSIS_BASE {
        "...".into()
    } else {
        char::from_u32(l).map(String::from).unwrap_or_default()
    }
}
