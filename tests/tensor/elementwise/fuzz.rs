//! random layouts (fuzz)

use super::*;

/// A random view of a fresh f64 tensor: permuted, stepped, narrowed and
/// expanded dims. Returns the view and its logical values computed by index
/// arithmetic on the base (independent of the library's strided walk).
fn random_view(r: &mut Rng, shape: &[usize]) -> (Tensor, Vec<f64>) {
    let rank = shape.len();
    // base dims: each logical dim d gets a base extent with room for a step and start
    let steps: Vec<usize> = (0..rank).map(|_| r.int(1, 3) as usize).collect();
    let starts: Vec<usize> = (0..rank).map(|_| r.int(0, 2) as usize).collect();
    let expanded: Vec<bool> = (0..rank)
        .map(|_| shape.len() > 1 && r.int(0, 5) == 0)
        .collect();
    let ext: Vec<usize> = (0..rank)
        .map(|d| {
            if expanded[d] {
                1
            } else {
                starts[d] + (shape[d].max(1) - 1) * steps[d] + 1
            }
        })
        .collect();
    // random permutation: the base is laid out in `perm` order
    let mut perm: Vec<usize> = (0..rank).collect();
    for i in (1..rank).rev() {
        perm.swap(i, r.int(0, i as i64) as usize);
    }
    let bshape: Vec<usize> = perm.iter().map(|&d| ext[d]).collect();
    let bn: usize = bshape.iter().product();
    let bvals: Vec<f64> = (0..bn).map(|_| r.int(-50, 50) as f64).collect();
    let base = Tensor::from_slice(&bvals, &bshape, CPU).unwrap();
    // undo the permutation: logical dim d is base dim inv[d]
    let mut inv = vec![0; rank];
    for (i, &d) in perm.iter().enumerate() {
        inv[d] = i;
    }
    let inv_i: Vec<isize> = inv.iter().map(|&i| i as isize).collect();
    let mut v = base.permute(&inv_i).unwrap();
    for d in 0..rank {
        if !expanded[d] {
            let end = starts[d] + shape[d] * steps[d];
            v = v
                .slice(d as isize, starts[d], end.min(ext[d]), steps[d])
                .unwrap();
        }
    }
    let want_shape: Vec<isize> = shape.iter().map(|&s| s as isize).collect();
    let v = v.expand(&want_shape).unwrap();
    assert_eq!(v.shape(), shape);
    let bstrides = row_major(&bshape);
    let n: usize = shape.iter().product();
    let vals = (0..n)
        .map(|lin| {
            let idx = unravel(lin, shape);
            let off: usize = (0..rank)
                .map(|d| {
                    let i = if expanded[d] {
                        0
                    } else {
                        starts[d] + idx[d] * steps[d]
                    };
                    i * bstrides[inv[d]]
                })
                .sum();
            bvals[off]
        })
        .collect();
    (v, vals)
}

#[test]
fn random_layouts_small_and_large_against_index_arithmetic() {
    let _g = lock();
    let mut r = Rng::new(4242);
    let mut shapes: Vec<Vec<usize>> = vec![
        vec![],
        vec![1],
        vec![0, 3],
        vec![300, 500],     // parallel chunks, tiles when transposed
        vec![2, 129, 1100], // parallel, rank 3
        vec![70_000, 3],    // long outer dim
    ];
    for _ in 0..60 {
        let rank = r.int(1, 4) as usize;
        shapes.push((0..rank).map(|_| r.int(1, 7) as usize).collect());
    }
    for shape in &shapes {
        for _ in 0..3 {
            let (a, va) = random_view(&mut r, shape);
            let (b, vb) = random_view(&mut r, shape);
            let ctx = format!(
                "{shape:?} a {:?}/{:?} b {:?}/{:?}",
                a.strides(),
                a.storage_offset(),
                b.strides(),
                b.storage_offset()
            );
            let want: Vec<f64> = va.iter().zip(&vb).map(|(x, y)| x - 2.0 * y).collect();
            let got = a.sub(&b.mul_scalar(2.0).unwrap()).unwrap();
            assert_exact(&read(&got), &want, &ctx);
            assert_exact(&read(&a.contiguous().unwrap()), &va, &ctx);
            // in place into a (non-expanded) random view: the base sees it
            if !a.layout().has_internal_overlap() {
                let mut w = a.alias();
                w.add_(&b).unwrap();
                let want: Vec<f64> = va.iter().zip(&vb).map(|(x, y)| x + y).collect();
                assert_exact(&read(&a), &want, &ctx);
            }
            // out= into a transposed output
            if shape.len() == 2 {
                let o = Tensor::zeros(&[shape[1], shape[0]], DType::F64, CPU).unwrap();
                let mut ot = o.t().unwrap();
                a.maximum_out(&b, &mut ot).unwrap();
                let av = read(&a);
                let want: Vec<f64> = av.iter().zip(&vb).map(|(x, y)| x.max(*y)).collect();
                assert_exact(&read(&ot), &want, &ctx);
            }
        }
    }
}
