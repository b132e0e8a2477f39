//! Issue 17 item 5: `nonzero`, `count_nonzero`, `unique`,
//! `unique_consecutive`, `mode`, `index_put(_)` and `einsum` on the CPU and
//! on CUDA device 0 (`on_both!`), against naive f64 loops over random
//! inputs (with repeats, zeros, NaN), their gradients where they have one,
//! and the errors naming the op. Agreement with PyTorch itself is in the
//! differential suite (tests/fixtures/differential.py).

use crate::common;

use common::{ints, tensor, uniform};
use std::collections::BTreeMap;
use tensorscope::{DType, Device, Tensor};

common::on_devices!(
    nonzero_lists_coordinates,
    unique_is_the_sorted_set,
    unique_dim_is_the_sorted_set_of_slices,
    mode_is_the_smallest_most_frequent,
    index_put_writes_and_accumulates,
    einsum_matches_the_loop,
    errors_name_the_op,
);

fn f64s(t: &Tensor) -> Vec<f64> {
    t.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap()
}

fn i64s(t: &Tensor) -> Vec<i64> {
    t.to_dtype(DType::I64).unwrap().to_vec::<i64>().unwrap()
}

fn nonzero_lists_coordinates(dev: Device) {
    let shape = [3usize, 4, 5];
    let v = ints(60, 1, -2, 3); // about 2 in 5 are zero
    for dt in [DType::F32, DType::I64, DType::U8, DType::Bool, DType::BF16] {
        let vals: Vec<f64> = v
            .iter()
            .map(|&x| if dt == DType::U8 { x.abs() } else { x })
            .collect();
        let x = tensor(&vals, &shape, DType::F64, dev).to_dtype(dt).unwrap();
        let want: Vec<i64> = (0..60)
            .filter(|&i| vals[i] != 0.0)
            .flat_map(|i| [(i / 20) as i64, (i / 5 % 4) as i64, (i % 5) as i64])
            .collect();
        let nz = x.nonzero().unwrap();
        assert_eq!(nz.shape(), &[want.len() / 3, 3], "{dt}");
        assert_eq!(i64s(&nz), want, "{dt}");
        assert_eq!(i64s(&x.argwhere().unwrap()), want);
        let per_row: Vec<i64> = (0..3)
            .map(|r| (0..20).filter(|&j| vals[r * 20 + j] != 0.0).count() as i64)
            .collect();
        assert_eq!(i64s(&x.count_nonzero(&[1, 2]).unwrap()), per_row, "{dt}");
        assert_eq!(
            x.count_nonzero(&[]).unwrap().item::<i64>().unwrap(),
            (want.len() / 3) as i64
        );
    }
    // A transposed view: row-major order of the view, not of the storage.
    let base = tensor(&[0.0, 1.0, 2.0, 0.0, 0.0, 3.0], &[2, 3], DType::F32, dev);
    let t = base.t().unwrap(); // [[0, 0], [1, 0], [2, 3]]
    assert_eq!(i64s(&t.nonzero().unwrap()), vec![1, 0, 2, 0, 2, 1]);
    // NaN is nonzero; 0-d tensors give [1, 0] or [0, 0].
    let n = tensor(&[f64::NAN, 0.0], &[2], DType::F64, dev);
    assert_eq!(i64s(&n.nonzero().unwrap()), vec![0]);
    let s = Tensor::full(&[], 5.0, DType::F32, dev).unwrap();
    assert_eq!(s.nonzero().unwrap().shape(), &[1, 0]);
    let z = Tensor::zeros(&[], DType::F32, dev).unwrap();
    assert_eq!(z.nonzero().unwrap().shape(), &[0, 0]);
    let e = Tensor::zeros(&[0, 3], DType::F32, dev).unwrap();
    assert_eq!(e.nonzero().unwrap().shape(), &[0, 2]);
}

fn unique_is_the_sorted_set(dev: Device) {
    let v = ints(40, 7, -4, 5);
    for dt in [DType::F32, DType::F64, DType::I32, DType::I64] {
        let x = tensor(&v, &[5, 8], DType::F64, dev).to_dtype(dt).unwrap();
        let mut count = BTreeMap::new();
        for &e in &v {
            *count.entry(e as i64).or_insert(0i64) += 1;
        }
        let (vals, inv, counts) = x.unique_parts().unwrap();
        let want: Vec<f64> = count.keys().map(|&k| k as f64).collect();
        assert_eq!(f64s(&vals), want, "{dt}");
        assert_eq!(vals.dtype(), dt);
        assert_eq!(i64s(&counts), count.values().copied().collect::<Vec<_>>());
        assert_eq!(inv.shape(), &[5, 8]);
        let back: Vec<f64> = i64s(&inv).iter().map(|&i| want[i as usize]).collect();
        assert_eq!(back, v, "values[inverse] is the input ({dt})");
        assert_eq!(f64s(&x.unique().unwrap()), want);
    }
    // NaNs are all distinct and last (as PyTorch).
    let x = tensor(&[1.0, f64::NAN, 2.0, f64::NAN, 1.0], &[5], DType::F32, dev);
    let (vals, inv, counts) = x.unique_parts().unwrap();
    let got = f64s(&vals);
    assert_eq!(&got[..2], &[1.0, 2.0]);
    assert!(got.len() == 4 && got[2].is_nan() && got[3].is_nan());
    assert_eq!(i64s(&inv), vec![0, 2, 1, 3, 0]);
    assert_eq!(i64s(&counts), vec![2, 1, 1, 1]);
    // Consecutive runs, in row-major order of a transposed view.
    let base = tensor(&[1.0, 1.0, 2.0, 1.0, 2.0, 2.0], &[2, 3], DType::I64, dev);
    let t = base.t().unwrap(); // rows [1, 1], [1, 2], [2, 2]: 1 1 1 2 2 2
    let (vals, inv, counts) = t.unique_consecutive().unwrap();
    assert_eq!(i64s(&vals), vec![1, 2]);
    assert_eq!(i64s(&inv), vec![0, 0, 0, 1, 1, 1]);
    assert_eq!(inv.shape(), &[3, 2]);
    assert_eq!(i64s(&counts), vec![3, 3]);
    let e = Tensor::zeros(&[0], DType::F32, dev).unwrap();
    let (vals, inv, counts) = e.unique_parts().unwrap();
    assert_eq!((vals.numel(), inv.numel(), counts.numel()), (0, 0, 0));
    let b = tensor(&[1.0, 0.0, 1.0], &[3], DType::Bool, dev);
    assert_eq!(f64s(&b.unique().unwrap()), vec![0.0, 1.0]);
}

fn unique_dim_is_the_sorted_set_of_slices(dev: Device) {
    // [3, 10, 2] of 0/1 values: slices along dim 1 are [3, 2] blocks that
    // repeat; their order is lexicographic in row-major order of the rest.
    let (a, n, b) = (3usize, 10usize, 2usize);
    let v = ints(a * n * b, 11, 0, 1);
    for dt in [DType::F32, DType::I64, DType::U8, DType::Bool] {
        let x = tensor(&v, &[a, n, b], DType::F64, dev)
            .to_dtype(dt)
            .unwrap();
        let slice = |j: usize| -> Vec<i64> {
            (0..a)
                .flat_map(|i| (0..b).map(move |k| (i, k)))
                .map(|(i, k)| v[(i * n + j) * b + k] as i64)
                .collect()
        };
        let mut set = BTreeMap::new();
        for j in 0..n {
            *set.entry(slice(j)).or_insert(0i64) += 1;
        }
        let (vals, inv, counts) = x.unique_dim(1).unwrap();
        let k = set.len();
        assert_eq!(vals.shape(), &[a, k, b], "{dt}");
        assert_eq!(vals.dtype(), dt);
        let keys: Vec<&Vec<i64>> = set.keys().collect();
        for (u, key) in keys.iter().enumerate() {
            let got: Vec<i64> = i64s(&vals.select(1, u as isize).unwrap());
            assert_eq!(&got, *key, "{dt}: unique slice {u}");
        }
        assert_eq!(
            i64s(&counts),
            set.values().copied().collect::<Vec<_>>(),
            "{dt}"
        );
        for j in 0..n {
            assert_eq!(
                *keys[i64s(&inv)[j] as usize],
                slice(j),
                "{dt}: inverse of slice {j}"
            );
        }
        // Consecutive runs: the input's order, equal neighbours merged.
        let (vals, inv, counts) = x.unique_consecutive_dim(-2).unwrap();
        let mut runs: Vec<(Vec<i64>, i64)> = Vec::new();
        let mut want_inv = Vec::new();
        for j in 0..n {
            match runs.last_mut() {
                Some((s, c)) if *s == slice(j) => *c += 1,
                _ => runs.push((slice(j), 1)),
            }
            want_inv.push(runs.len() as i64 - 1);
        }
        assert_eq!(vals.shape(), &[a, runs.len(), b]);
        assert_eq!(i64s(&counts), runs.iter().map(|r| r.1).collect::<Vec<_>>());
        assert_eq!(i64s(&inv), want_inv);
    }
    // Slices holding NaN equal nothing and sort after numbers (deviation 29).
    let nan = f64::NAN;
    let x = tensor(
        &[nan, 1.0, 0.0, 1.0, nan, 1.0, 0.0, 1.0],
        &[4, 2],
        DType::F32,
        dev,
    );
    let (vals, inv, counts) = x.unique_dim(0).unwrap();
    let got = f64s(&vals);
    assert_eq!(&got[..2], &[0.0, 1.0]);
    assert!(
        got[2].is_nan() && got[4].is_nan() && got.len() == 6,
        "{got:?}"
    );
    assert_eq!(i64s(&counts), vec![2, 1, 1]);
    assert_eq!(i64s(&inv)[1], 0);
    assert_eq!(i64s(&inv)[3], 0);
    // Empty and refused shapes, as PyTorch.
    let e = Tensor::zeros(&[0, 3], DType::F32, dev).unwrap();
    let (vals, inv, counts) = e.unique_dim(0).unwrap();
    assert_eq!(
        (vals.shape(), inv.numel(), counts.numel()),
        (&[0usize, 3][..], 0, 0)
    );
    let msg = |r: tensorscope::Result<tensorscope::UniqueParts>| r.unwrap_err().to_string();
    let e = msg(Tensor::zeros(&[2, 0, 3], DType::F32, dev)
        .unwrap()
        .unique_dim(0));
    assert!(e.contains("unique_dim") && e.contains("[2, 0, 3]"), "{e}");
    let e = msg(Tensor::zeros(&[], DType::F32, dev)
        .unwrap()
        .unique_consecutive_dim(0));
    assert!(
        e.contains("unique_consecutive_dim") && e.contains("0-d"),
        "{e}"
    );
    let e = msg(x.unique_dim(2));
    assert!(e.contains("unique_dim"), "{e}");
}

fn mode_is_the_smallest_most_frequent(dev: Device) {
    let (r, n) = (6usize, 9usize);
    let v = ints(r * n, 3, 0, 4);
    let x = tensor(&v, &[r, n], DType::F64, dev)
        .requires_grad_(true)
        .unwrap();
    for (dim, keep) in [(1isize, false), (0, true), (-1, true)] {
        let (vals, idx) = x.mode(dim, keep).unwrap();
        let d = dim.rem_euclid(2) as usize;
        let (outer, len) = if d == 1 { (r, n) } else { (n, r) };
        let at = |o: usize, i: usize| if d == 1 { v[o * n + i] } else { v[i * n + o] };
        let mut wv = Vec::new();
        let mut wi = Vec::new();
        for o in 0..outer {
            let mut count = BTreeMap::new();
            for i in 0..len {
                *count.entry(at(o, i) as i64).or_insert(0) += 1;
            }
            let best = *count.values().max().unwrap();
            let val = *count.iter().find(|&(_, &c)| c == best).unwrap().0;
            let last = (0..len).rev().find(|&i| at(o, i) as i64 == val).unwrap();
            wv.push(val as f64);
            wi.push(last as i64);
        }
        assert_eq!(f64s(&vals), wv, "dim {dim}");
        assert_eq!(i64s(&idx), wi, "dim {dim}");
        let want_shape: Vec<usize> = match (d, keep) {
            (1, true) => vec![r, 1],
            (1, false) => vec![r],
            (_, true) => vec![1, n],
            _ => vec![n],
        };
        assert_eq!(vals.shape(), want_shape.as_slice());
    }
    // The gradient goes to the chosen element of each row.
    let (vals, idx) = x.mode(1, false).unwrap();
    vals.sum_all().unwrap().backward().unwrap();
    let g = f64s(&x.grad().unwrap());
    let idx = i64s(&idx);
    for row in 0..r {
        for i in 0..n {
            let want = if i as i64 == idx[row] { 1.0 } else { 0.0 };
            assert_eq!(g[row * n + i], want, "row {row} col {i}");
        }
    }
    assert!(Tensor::zeros(&[2, 0], DType::F32, dev)
        .unwrap()
        .mode(1, false)
        .is_err());
}

fn index_put_writes_and_accumulates(dev: Device) {
    let base = uniform(12, 5, -1.0, 1.0);
    let rows = [0i64, 2, -1, 2, 1];
    let cols = [1i64, 3, 1, 3, -4];
    let vals = uniform(5, 6, -1.0, 1.0);
    for acc in [true, false] {
        let mut want = base.clone();
        for k in 0..5 {
            if !acc && k == 1 {
                continue; // (2, 3) is written twice: keep one write per cell
            }
            let i = (rows[k].rem_euclid(3) * 4 + cols[k].rem_euclid(4)) as usize;
            want[i] = if acc { want[i] + vals[k] } else { vals[k] };
        }
        let keep: Vec<usize> = (0..5).filter(|&k| acc || k != 1).collect();
        let pick = |a: &[i64]| keep.iter().map(|&k| a[k] as f64).collect::<Vec<_>>();
        let ri = tensor(&pick(&rows), &[keep.len()], DType::I64, dev);
        let ci = tensor(&pick(&cols), &[keep.len()], DType::I32, dev);
        let vv: Vec<f64> = keep.iter().map(|&k| vals[k]).collect();
        let v = tensor(&vv, &[keep.len()], DType::F64, dev);
        let mut x = tensor(&base, &[3, 4], DType::F64, dev);
        x.index_put_(&[&ri, &ci], &v, acc).unwrap();
        common::assert_close(&f64s(&x), &want, 1e-12, &format!("in place, acc {acc}"));
        // Out of place, through a transposed view of the transposed data.
        let xt = tensor(&base, &[3, 4], DType::F64, dev)
            .t()
            .unwrap()
            .contiguous()
            .unwrap()
            .t()
            .unwrap();
        let y = xt.index_put(&[&ri, &ci], &v, acc).unwrap();
        common::assert_close(&f64s(&y), &want, 1e-12, &format!("out of place, acc {acc}"));
    }
    // One index over the rows (a row of values broadcast), into a
    // non-contiguous tensor in place (written back through its strides).
    let mut xt = Tensor::zeros(&[4, 3], DType::F32, dev)
        .unwrap()
        .t()
        .unwrap(); // [3, 4]
    let r = tensor(&[2.0, 0.0], &[2], DType::I64, dev);
    let row = tensor(&[1.0, 2.0, 3.0, 4.0], &[4], DType::F32, dev);
    xt.index_put_(&[&r], &row, false).unwrap();
    assert_eq!(
        f64s(&xt),
        vec![1., 2., 3., 4., 0., 0., 0., 0., 1., 2., 3., 4.]
    );
    // Two indices into layouts whose leading dimensions do not merge: a
    // transpose (written through a copy, then back) and a permutation with
    // a size-1 dimension (merges: its stride does not matter).
    let r2 = tensor(&[0.0, 2.0], &[2], DType::I64, dev);
    let c2 = tensor(&[3.0, 1.0], &[2], DType::I64, dev);
    let nine = Tensor::full(&[], 9.0, DType::F32, dev).unwrap();
    let mut xt = Tensor::zeros(&[4, 3], DType::F32, dev)
        .unwrap()
        .t()
        .unwrap();
    xt.index_put_(&[&r2, &c2], &nine, false).unwrap();
    let mut want = vec![0.0; 12];
    want[3] = 9.0;
    want[9] = 9.0;
    assert_eq!(f64s(&xt), want, "transposed, two indices");
    let mut xp = Tensor::zeros(&[3, 4, 1], DType::F32, dev)
        .unwrap()
        .permute(&[0, 2, 1])
        .unwrap(); // [3, 1, 4], strides [4, 1, 1]
    let z = tensor(&[0.0, 0.0], &[2], DType::I64, dev);
    xp.index_put_(&[&r2, &z], &nine, true).unwrap();
    let mut want = vec![0.0; 12];
    for i in [0, 1, 2, 3, 8, 9, 10, 11] {
        want[i] = 9.0;
    }
    assert_eq!(f64s(&xp), want, "permuted with a size-1 dimension");
    // A 0-d mask: True writes everything, False nothing.
    let mut all = Tensor::zeros(&[2, 2], DType::F32, dev).unwrap();
    let yes = Tensor::full(&[], 1.0, DType::Bool, dev).unwrap();
    let no = Tensor::full(&[], 0.0, DType::Bool, dev).unwrap();
    all.index_put_(&[&no], &nine, false).unwrap();
    assert_eq!(f64s(&all), vec![0.0; 4]);
    all.index_put_(&[&yes], &nine, false).unwrap();
    assert_eq!(f64s(&all), vec![9.0; 4]);
    // A bool mask.
    let mut m = Tensor::zeros(&[2, 3], DType::I64, dev).unwrap();
    let mask = tensor(&[1.0, 0.0, 1.0, 0.0, 0.0, 1.0], &[2, 3], DType::Bool, dev);
    let seven = Tensor::full(&[], 7.0, DType::I64, dev).unwrap();
    m.index_put_(&[&mask], &seven, false).unwrap();
    assert_eq!(i64s(&m), vec![7, 0, 7, 0, 0, 7]);
    // Gradients of the out-of-place form: self's is zero where written,
    // the values' is the gradient at their cells (summed over repeats).
    let x = tensor(&base, &[3, 4], DType::F64, dev)
        .requires_grad_(true)
        .unwrap();
    let v = tensor(&[1.0, 2.0, 3.0], &[3], DType::F64, dev)
        .requires_grad_(true)
        .unwrap();
    let ri = tensor(&[0.0, 2.0, 2.0], &[3], DType::I64, dev);
    let ci = tensor(&[1.0, 3.0, 3.0], &[3], DType::I64, dev);
    let w = tensor(
        &(0..12).map(|i| i as f64).collect::<Vec<_>>(),
        &[3, 4],
        DType::F64,
        dev,
    );
    let y = x.index_put(&[&ri, &ci], &v, true).unwrap();
    y.mul(&w).unwrap().sum_all().unwrap().backward().unwrap();
    assert_eq!(
        f64s(&x.grad().unwrap()),
        f64s(&w),
        "accumulate: self keeps its gradient"
    );
    assert_eq!(f64s(&v.grad().unwrap()), vec![1.0, 11.0, 11.0]);
    let x2 = tensor(&base, &[3, 4], DType::F64, dev)
        .requires_grad_(true)
        .unwrap();
    let ri = tensor(&[0.0, 2.0], &[2], DType::I64, dev);
    let ci = tensor(&[1.0, 3.0], &[2], DType::I64, dev);
    let v2 = tensor(&[1.0, 2.0], &[2], DType::F64, dev);
    let y = x2.index_put(&[&ri, &ci], &v2, false).unwrap();
    y.mul(&w).unwrap().sum_all().unwrap().backward().unwrap();
    let mut gw = f64s(&w);
    gw[1] = 0.0;
    gw[11] = 0.0;
    assert_eq!(
        f64s(&x2.grad().unwrap()),
        gw,
        "assignment: zero where written"
    );
}

/// A naive einsum over letters only: every assignment of the labels.
fn einsum_ref(eq: &str, xs: &[(&[f64], &[usize])]) -> (Vec<f64>, Vec<usize>) {
    let (lhs, out) = eq.split_once("->").unwrap();
    let terms: Vec<Vec<char>> = lhs.split(',').map(|t| t.chars().collect()).collect();
    let out: Vec<char> = out.chars().collect();
    let mut size = BTreeMap::new();
    for (t, (_, shape)) in terms.iter().zip(xs) {
        for (c, &n) in t.iter().zip(shape.iter()) {
            let e = size.entry(*c).or_insert(n);
            *e = (*e).max(n);
        }
    }
    let labels: Vec<char> = size.keys().copied().collect();
    let total: usize = labels.iter().map(|c| size[c]).product();
    let oshape: Vec<usize> = out.iter().map(|c| size[c]).collect();
    let mut res = vec![0.0; oshape.iter().product()];
    for flat in 0..total {
        let mut rem = flat;
        let mut at = BTreeMap::new();
        for c in labels.iter().rev() {
            at.insert(*c, rem % size[c]);
            rem /= size[c];
        }
        let mut p = 1.0;
        for (t, (v, shape)) in terms.iter().zip(xs) {
            let mut off = 0;
            for (c, &n) in t.iter().zip(shape.iter()) {
                off = off * n + if n == 1 { 0 } else { at[c] };
            }
            p *= v[off];
        }
        let mut o = 0;
        for (c, &n) in out.iter().zip(&oshape) {
            o = o * n + at[c];
        }
        res[o] += p;
    }
    (res, oshape)
}

fn einsum_matches_the_loop(dev: Device) {
    // (equation as given, the explicit form the loop reads, shapes)
    let cases: &[(&str, &str, &[&[usize]])] = &[
        ("ij,jk->ik", "ij,jk->ik", &[&[2, 3], &[3, 4]]),
        ("ij,jk", "ij,jk->ik", &[&[2, 3], &[3, 4]]),
        ("bij,bjk->bik", "bij,bjk->bik", &[&[2, 2, 3], &[2, 3, 2]]),
        ("i,i->", "i,i->", &[&[5], &[5]]),
        ("i,j->ij", "i,j->ij", &[&[3], &[4]]),
        ("ii->i", "ii->i", &[&[3, 3]]),
        ("ii", "ii->", &[&[3, 3]]),
        ("ji", "ji->ij", &[&[2, 3]]),
        ("ij->", "ij->", &[&[2, 3]]),
        ("...ij,...jk", "aij,jk->aik", &[&[2, 2, 3], &[3, 4]]),
        (
            "bn,anm,bm->ba",
            "bn,anm,bm->ba",
            &[&[2, 3], &[4, 3, 5], &[2, 5]],
        ),
        ("ij,ij->ij", "ij,ij->ij", &[&[2, 3], &[1, 3]]),
        ("i...->...", "iab->ab", &[&[4, 2, 3]]),
        ("ijk,jil->kl", "ijk,jil->kl", &[&[2, 3, 4], &[3, 2, 5]]),
        ("ij, jk -> ik", "ij,jk->ik", &[&[1, 3], &[3, 2]]),
    ];
    for (k, &(eq, explicit, shapes)) in cases.iter().enumerate() {
        let vals: Vec<Vec<f64>> = shapes
            .iter()
            .enumerate()
            .map(|(j, s)| uniform(s.iter().product(), (k * 10 + j) as u64, -1.0, 1.0))
            .collect();
        let refs: Vec<(&[f64], &[usize])> = vals
            .iter()
            .zip(shapes.iter())
            .map(|(v, s)| (v.as_slice(), *s))
            .collect();
        let (want, wshape) = einsum_ref(explicit, &refs);
        let ts: Vec<Tensor> = vals
            .iter()
            .zip(shapes.iter())
            .map(|(v, s)| tensor(v, s, DType::F64, dev).requires_grad_(true).unwrap())
            .collect();
        let tr: Vec<&Tensor> = ts.iter().collect();
        let y = Tensor::einsum(eq, &tr).unwrap();
        assert_eq!(y.shape(), wshape.as_slice(), "{eq}");
        common::assert_close(&f64s(&y), &want, 1e-12, eq);
        // The gradient of sum(y) with respect to each operand, by central
        // differences of the loop (exact: y is linear in each operand).
        y.sum_all().unwrap().backward().unwrap();
        for (j, t) in ts.iter().enumerate() {
            let g = f64s(&t.grad().unwrap());
            let num: Vec<f64> = (0..vals[j].len())
                .map(|e| {
                    let mut up = vals.clone();
                    up[j][e] += 0.5;
                    let mut dn = vals.clone();
                    dn[j][e] -= 0.5;
                    let f = |vv: &Vec<Vec<f64>>| -> f64 {
                        let r: Vec<(&[f64], &[usize])> = vv
                            .iter()
                            .zip(shapes.iter())
                            .map(|(v, s)| (v.as_slice(), *s))
                            .collect();
                        einsum_ref(explicit, &r).0.iter().sum()
                    };
                    f(&up) - f(&dn)
                })
                .collect();
            common::assert_close(&g, &num, 1e-10, &format!("{eq}: operand {j}'s gradient"));
        }
    }
    // f32 and integers.
    let a = tensor(&[1.0, 2.0, 3.0, 4.0], &[2, 2], DType::I64, dev);
    let b = tensor(&[1.0, 1.0, 0.0, 1.0], &[2, 2], DType::I64, dev);
    assert_eq!(
        i64s(&Tensor::einsum("ij,jk->ik", &[&a, &b]).unwrap()),
        vec![1, 3, 3, 7]
    );
    let a = tensor(&[1.0, 2.0, 3.0, 4.0], &[2, 2], DType::F32, dev);
    assert_eq!(f64s(&Tensor::einsum("ii", &[&a]).unwrap()), vec![5.0]);
    // A diagonal keeps an integer dtype (PyTorch's int32 result).
    let a = tensor(&[1.0, 2.0, 3.0, 4.0], &[2, 2], DType::I32, dev);
    let b = tensor(&[1.0, 1.0, 0.0, 1.0], &[2, 2], DType::I32, dev);
    let d = Tensor::einsum("ii,ij->ij", &[&a, &b]).unwrap();
    assert_eq!(d.dtype(), DType::I32);
    assert_eq!(i64s(&d), vec![1, 1, 0, 4]);
}

fn errors_name_the_op(dev: Device) {
    let msg = |r: tensorscope::Result<Tensor>| r.unwrap_err().to_string();
    let a = Tensor::ones(&[2, 3], DType::F32, dev).unwrap();
    let b = Tensor::ones(&[4, 5], DType::F32, dev).unwrap();
    let e = msg(Tensor::einsum("ij,jk->ik", &[&a, &b]));
    assert!(e.contains("einsum") && e.contains("sizes 3 and 4"), "{e}");
    let e = msg(Tensor::einsum("ijk->i", &[&a]));
    assert!(e.contains("einsum") && e.contains("rank 2"), "{e}");
    let e = msg(Tensor::einsum("i1->i", &[&a]));
    assert!(
        e.contains("einsum") && e.contains("invalid subscript"),
        "{e}"
    );
    let e = msg(Tensor::einsum("ij->ii", &[&a]));
    assert!(e.contains("more than once"), "{e}");
    let e = msg(Tensor::einsum("ij->k", &[&a]));
    assert!(e.contains("in no input"), "{e}");
    let e = msg(Tensor::einsum("ij,jk->ik", &[&a]));
    assert!(e.contains("2 terms for 1 operands"), "{e}");
    let i64a = Tensor::ones(&[3, 2], DType::I64, dev).unwrap();
    assert!(msg(Tensor::einsum("ij,jk->ik", &[&a, &i64a])).contains("einsum"));

    let mut x = Tensor::zeros(&[3, 4], DType::F32, dev).unwrap();
    let far = tensor(&[0.0, 3.0], &[2], DType::I64, dev);
    let v = Tensor::ones(&[2], DType::F32, dev).unwrap();
    let e = x.index_put_(&[&far], &v, false).unwrap_err().to_string();
    assert!(
        e.contains("index_put_") && e.contains("index 3") && e.contains("size 3"),
        "{e}"
    );
    assert_eq!(f64s(&x), vec![0.0; 12], "nothing written");
    let neg = tensor(&[-4.0], &[1], DType::I64, dev);
    assert!(x
        .index_put(&[&neg], &v, false)
        .unwrap_err()
        .to_string()
        .contains("index_put"));
    let ok = tensor(&[0.0], &[1], DType::I64, dev);
    let e = x
        .index_put(&[&ok, &ok, &ok], &v, false)
        .unwrap_err()
        .to_string();
    assert!(e.contains("too many indices"), "{e}");
    let vd = Tensor::ones(&[1], DType::F64, dev).unwrap();
    assert!(x
        .index_put(&[&ok], &vd, false)
        .unwrap_err()
        .to_string()
        .contains("dtype"));
    let fidx = Tensor::zeros(&[1], DType::F32, dev).unwrap();
    assert!(x.index_put(&[&fidx], &v, false).is_err());
    let e = msg(x.index_put(&[], &v, false));
    assert!(e.contains("index_put") && e.contains("no index"), "{e}");
    let short = Tensor::ones(&[2], DType::Bool, dev).unwrap();
    let e = msg(x.index_put(&[&short], &v, false));
    assert!(
        e.contains("index_put") && e.contains("[3, 4]") && e.contains("[2]"),
        "{e}"
    );
    let e = msg(x.index_put(&[&ok], &Tensor::ones(&[3], DType::F32, dev).unwrap(), false));
    assert!(e.contains("index_put") && e.contains("broadcast"), "{e}");
    let empty = Tensor::zeros(&[0], DType::F32, dev).unwrap();
    let e = empty.mode(0, false).unwrap_err().to_string();
    assert!(e.contains("mode") && e.contains("empty"), "{e}");
}
