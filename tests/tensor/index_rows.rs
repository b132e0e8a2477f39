//! Row gathers and row scatter-adds (issue 14, item 4d): `index_select`,
//! `index_add_`, `index_copy_` and `Embedding` copy or add whole slices when
//! the slices after the indexed dim are dense, and element by element
//! otherwise; both checked against plain loops.

use tensorscope::nn::{Embedding, Module};
use tensorscope::{DType, Device, Tensor};

const CPU: Device = Device::Cpu;

fn vals(t: &Tensor) -> Vec<f32> {
    t.contiguous().unwrap().to_vec::<f32>().unwrap()
}

/// `index_select(dim, idx)` of a contiguous `[a, b, c]` array, by loops.
fn select_ref(x: &[f32], shape: [usize; 3], dim: usize, idx: &[usize]) -> Vec<f32> {
    let mut out_shape = shape;
    out_shape[dim] = idx.len();
    let mut out = Vec::new();
    for i in 0..out_shape[0] {
        for j in 0..out_shape[1] {
            for k in 0..out_shape[2] {
                let mut p = [i, j, k];
                p[dim] = idx[p[dim]];
                out.push(x[(p[0] * shape[1] + p[1]) * shape[2] + p[2]]);
            }
        }
    }
    out
}

#[test]
fn index_select_gathers_rows_of_any_layout() {
    let _shared = crate::common::shared();
    let shape = [40, 6, 33];
    let n: usize = shape.iter().product();
    let data: Vec<f32> = (0..n).map(|v| v as f32).collect();
    let x = Tensor::from_slice(&data, &shape, CPU).unwrap();
    let idx = [39usize, 0, 7, 7, 12, 0];
    let iv: Vec<i64> = idx.iter().map(|&v| v as i64).collect();
    for dim in 0..3 {
        let len = shape[dim];
        let sel: Vec<i64> = iv.iter().map(|&v| v % len as i64).collect();
        let selu: Vec<usize> = sel.iter().map(|&v| v as usize).collect();
        let want = select_ref(&data, shape, dim, &selu);
        for index in [
            Tensor::from_slice(&sel, &[sel.len()], CPU).unwrap(),
            Tensor::from_slice(&sel, &[sel.len()], CPU)
                .unwrap()
                .to_dtype(DType::I32)
                .unwrap(),
        ] {
            assert_eq!(
                vals(&x.index_select(dim as isize, &index).unwrap()),
                want,
                "dim {dim}"
            );
        }
    }
    // Rows that are not dense: a transposed source, gathered along dim 0.
    let t = Tensor::from_slice(&data[..33 * 40], &[33, 40], CPU)
        .unwrap()
        .t()
        .unwrap(); // [40, 33], row stride 1
    let idx = Tensor::from_slice(&[5i64, 39, 5], &[3], CPU).unwrap();
    let got = vals(&t.index_select(0, &idx).unwrap());
    let want: Vec<f32> = [5usize, 39, 5]
        .iter()
        .flat_map(|&r| (0..33).map(move |c| (c * 40 + r) as f32))
        .collect();
    assert_eq!(got, want);
    // Into a transposed output.
    let mut out = Tensor::zeros(&[33, 3], DType::F32, CPU)
        .unwrap()
        .t()
        .unwrap();
    x.narrow(1, 0, 1)
        .unwrap()
        .reshape(&[40, 33])
        .unwrap()
        .index_select_out(0, &idx, &mut out)
        .unwrap();
    let want: Vec<f32> = [5usize, 39, 5]
        .iter()
        .flat_map(|&r| (0..33).map(move |c| (r * 6 * 33 + c) as f32))
        .collect();
    assert_eq!(vals(&out), want);
}

#[test]
fn a_large_row_gather_matches_loops() {
    let _shared = crate::common::shared();
    // Large enough to run in parallel chunks.
    let (rows, cols) = (5000, 256);
    let data: Vec<f32> = (0..rows * cols).map(|v| (v % 1013) as f32).collect();
    let table = Tensor::from_slice(&data, &[rows, cols], CPU).unwrap();
    let idx: Vec<i64> = (0..1024).map(|i| (i * 7919 % rows) as i64).collect();
    let got = vals(
        &table
            .index_select(0, &Tensor::from_slice(&idx, &[1024], CPU).unwrap())
            .unwrap(),
    );
    let want: Vec<f32> = idx
        .iter()
        .flat_map(|&r| {
            data[r as usize * cols..(r as usize + 1) * cols]
                .iter()
                .copied()
        })
        .collect();
    assert_eq!(got, want);
}

#[test]
fn index_add_and_index_copy_combine_whole_rows() {
    let _shared = crate::common::shared();
    let (rows, cols) = (10, 37);
    let idx = [3i64, 9, 3, 0, 3];
    let src: Vec<f32> = (0..idx.len() * cols).map(|v| v as f32 * 0.5).collect();
    let s = Tensor::from_slice(&src, &[idx.len(), cols], CPU).unwrap();
    let index = Tensor::from_slice(&idx, &[idx.len()], CPU).unwrap();
    // Dense destination rows, and a transposed destination (rows strided).
    for transposed in [false, true] {
        let mut acc = if transposed {
            Tensor::ones(&[cols, rows], DType::F32, CPU)
                .unwrap()
                .t()
                .unwrap()
        } else {
            Tensor::ones(&[rows, cols], DType::F32, CPU).unwrap()
        };
        acc.index_add_(0, &index, &s).unwrap();
        let mut want = vec![1.0f32; rows * cols];
        for (r, &i) in idx.iter().enumerate() {
            for c in 0..cols {
                want[i as usize * cols + c] += src[r * cols + c];
            }
        }
        assert_eq!(vals(&acc), want, "index_add_, transposed {transposed}");
        let mut cp = Tensor::zeros(&[rows, cols], DType::F32, CPU).unwrap();
        cp.index_copy_(0, &index, &s).unwrap();
        let mut want = vec![0.0f32; rows * cols];
        for (r, &i) in idx.iter().enumerate() {
            want[i as usize * cols..(i as usize + 1) * cols]
                .copy_from_slice(&src[r * cols..(r + 1) * cols]);
        }
        assert_eq!(vals(&cp), want, "index_copy_ (the last write wins)");
    }
    // A bad index still leaves the destination untouched.
    let mut acc = Tensor::zeros(&[rows, cols], DType::F32, CPU).unwrap();
    let bad = Tensor::from_slice(&[1i64, 10, 2, 0, 0], &[5], CPU).unwrap();
    assert!(acc.index_add_(0, &bad, &s).is_err());
    assert!(vals(&acc).iter().all(|&v| v == 0.0));
}

#[test]
fn embedding_rows_and_their_gradient() {
    let _shared = crate::common::shared();
    let emb = Embedding::new(50, 24).unwrap();
    let w = vals(&emb.weight);
    let idx = [7i64, 0, 49, 7, 7, 13];
    let i = Tensor::from_slice(&idx, &[2, 3], CPU).unwrap();
    let y = emb.forward(&i).unwrap();
    assert_eq!(y.shape(), &[2, 3, 24]);
    let want: Vec<f32> = idx
        .iter()
        .flat_map(|&r| w[r as usize * 24..(r as usize + 1) * 24].iter().copied())
        .collect();
    assert_eq!(vals(&y), want);
    let g = Tensor::arange(0.0, 6.0 * 24.0, 1.0, DType::F32, CPU)
        .unwrap()
        .view(&[2, 3, 24])
        .unwrap();
    y.mul(&g).unwrap().sum_all().unwrap().backward().unwrap();
    let grad = vals(&emb.weight.grad().unwrap());
    let mut want = vec![0.0f32; 50 * 24];
    for (p, &r) in idx.iter().enumerate() {
        for c in 0..24 {
            want[r as usize * 24 + c] += (p * 24 + c) as f32;
        }
    }
    assert_eq!(grad, want);
}
