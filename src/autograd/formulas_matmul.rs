//! Backward formulas of `matmul` and `linear` (as in `formulas.rs`).

use super::formulas::sum_to;
use super::{attach, needs_grad, BackwardFn, Saved};
use crate::error::Result;
use crate::tensor::Tensor;

/// `true` when the last two dims of `t` are a dense matrix stored
/// transposed (strides `[1, rows]`, e.g. `w.t()` of a dense `w`).
fn transposed_dense(t: &Tensor) -> bool {
    let (s, st, r) = (t.shape(), t.strides(), t.rank());
    r >= 2 && s[r - 2] > 1 && s[r - 1] > 1 && st[r - 2] == 1 && st[r - 1] == s[r - 2]
}

/// Records `out = a.matmul(b)` with torch.matmul's rank rules.
pub(crate) fn matmul(a: &Tensor, b: &Tensor, out: Tensor) -> Result<Tensor> {
    if !needs_grad(&[a, b]) {
        return Ok(out);
    }
    let (ra, rb) = (a.requires_grad(), b.requires_grad());
    let ka = if rb {
        Some(Saved::new(a, "MmBackward")?)
    } else {
        None
    };
    let kb = if ra {
        Some(Saved::new(b, "MmBackward")?)
    } else {
        None
    };
    let (sa, sb) = (a.shape().to_vec(), b.shape().to_vec());
    let (da, db) = (a.dtype(), b.dtype());
    let (a_t, b_t) = (transposed_dense(a), transposed_dense(b));
    let f: BackwardFn = Box::new(move |g| {
        // Lift vectors to matrices, as matmul does, and g to match.
        let lift_a = |t: &Tensor| {
            if sa.len() == 1 {
                t.unsqueeze(0)
            } else {
                Ok(t.alias())
            }
        };
        let lift_b = |t: &Tensor| {
            if sb.len() == 1 {
                t.unsqueeze(1)
            } else {
                Ok(t.alias())
            }
        };
        // Put back the dims matmul removed: m (last) first, then n before it.
        let mut g2 = g.alias();
        if sb.len() == 1 {
            g2 = g2.unsqueeze(-1)?;
        }
        if sa.len() == 1 {
            g2 = g2.unsqueeze(-2)?;
        }
        let sa2: Vec<usize> = if sa.len() == 1 {
            vec![1, sa[0]]
        } else {
            sa.clone()
        };
        let sb2: Vec<usize> = if sb.len() == 1 {
            vec![sb[0], 1]
        } else {
            sb.clone()
        };
        let unlift = |r: Tensor, s: &[usize]| {
            if s.len() == 1 {
                r.reshape(&[s[0] as isize])
            } else {
                Ok(r)
            }
        };
        // An operand stored transposed gets its gradient in its own layout
        // ((x^T y)^T = y^T x, written dense and seen transposed), so the
        // transpose that made it hands a dense gradient back without a copy.
        let ga = match &kb {
            Some(b) => {
                let b2 = lift_b(b.get()?)?;
                let p = if a_t {
                    b2.matmul(&g2.transpose(-1, -2)?)?.transpose(-1, -2)?
                } else {
                    g2.matmul(&b2.transpose(-1, -2)?)?
                };
                Some(unlift(sum_to(&p, &sa2, da)?, &sa)?)
            }
            None => None,
        };
        let gb = match &ka {
            Some(a) => {
                let a2 = lift_a(a.get()?)?;
                let p = if b_t {
                    g2.transpose(-1, -2)?.matmul(&a2)?.transpose(-1, -2)?
                } else {
                    a2.transpose(-1, -2)?.matmul(&g2)?
                };
                Some(unlift(sum_to(&p, &sb2, db)?, &sb)?)
            }
            None => None,
        };
        Ok(vec![ga, gb])
    });
    Ok(attach(out, "MmBackward", &[a, b], f))
}

/// Records `out = x @ w^T + b` (`x: [m, k]`, `w: [n, k]`, `b: [n]`) as one
/// node. The weight's gradient `g^T x` comes out dense in `w`'s own layout,
/// the bias's is one column sum of `g`.
pub(crate) fn linear(x: &Tensor, w: &Tensor, b: Option<&Tensor>, out: Tensor) -> Result<Tensor> {
    let mut inputs = vec![x, w];
    inputs.extend(b);
    if !needs_grad(&inputs) {
        return Ok(out);
    }
    let name = if b.is_some() {
        "AddmmBackward"
    } else {
        "MmBackward"
    };
    let kx = if w.requires_grad() {
        Some(Saved::new(x, name)?)
    } else {
        None
    };
    let kw = if x.requires_grad() {
        Some(Saved::new(w, name)?)
    } else {
        None
    };
    let rb = b.map(|b| b.requires_grad());
    let f: BackwardFn = Box::new(move |g| {
        let gx = match &kw {
            Some(w) => Some(g.matmul(w.get()?)?),
            None => None,
        };
        let gw = match &kx {
            Some(x) => Some(g.t()?.matmul(x.get()?)?),
            None => None,
        };
        let mut v = vec![gx, gw];
        if let Some(rb) = rb {
            v.push(if rb { Some(g.sum(&[0], false)?) } else { None });
        }
        Ok(v)
    });
    Ok(attach(out, name, &inputs, f))
}
