//! Layout helpers shared by tests/tensor/index/ and tests/tensor/shape.rs: tensors with
//! given row-major values laid out contiguously, transposed or stepped, and
//! the index arithmetic of the naive references.

use tensorscope::{DType, Device, Tensor};

pub const DTYPES: [DType; 8] = [
    DType::F32,
    DType::F64,
    DType::F16,
    DType::BF16,
    DType::I64,
    DType::I32,
    DType::U8,
    DType::Bool,
];

#[derive(Clone, Copy, Debug)]
pub enum Kind {
    Contiguous,
    Transposed,
    Stepped,
}
pub const KINDS: [Kind; 3] = [Kind::Contiguous, Kind::Transposed, Kind::Stepped];

/// Values exact in every dtype (bool: 0/1).
pub fn values(n: usize, dtype: DType, seed: usize) -> Vec<f64> {
    (0..n)
        .map(|i| {
            let v = ((i + seed) * 7 + 3) % 11;
            if dtype == DType::Bool {
                (v % 2) as f64
            } else {
                v as f64
            }
        })
        .collect()
}

pub fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

pub fn unravel(mut i: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        idx[d] = i % shape[d];
        i /= shape[d];
    }
    idx
}

pub fn ravel(idx: &[usize], shape: &[usize]) -> usize {
    idx.iter().zip(shape).fold(0, |acc, (&i, &s)| acc * s + i)
}

/// A tensor of `shape` and `dtype` whose row-major values are `v`, laid out
/// as `kind` says. Returns the tensor and asserts its layout is what was asked.
pub fn make(v: &[f64], shape: &[usize], dtype: DType, kind: Kind) -> Tensor {
    let r = shape.len();
    let t = match kind {
        Kind::Contiguous => Tensor::from_slice(v, shape, Device::Cpu)
            .unwrap()
            .to_dtype(dtype)
            .unwrap(),
        Kind::Transposed => {
            // base has the reversed shape; base[rev(idx)] = v[idx].
            let rshape: Vec<usize> = shape.iter().rev().copied().collect();
            let mut b = vec![0.0; v.len()];
            for (i, &x) in v.iter().enumerate() {
                let mut idx = unravel(i, shape);
                idx.reverse();
                b[ravel(&idx, &rshape)] = x;
            }
            let base = Tensor::from_slice(&b, &rshape, Device::Cpu)
                .unwrap()
                .to_dtype(dtype)
                .unwrap();
            let perm: Vec<isize> = (0..r as isize).rev().collect();
            base.permute(&perm).unwrap()
        }
        Kind::Stepped => {
            // Last dimension doubled, the wanted values at even positions.
            let mut bshape = shape.to_vec();
            bshape[r - 1] *= 2;
            let mut b = vec![1.0; numel(&bshape)];
            for (i, &x) in v.iter().enumerate() {
                let mut idx = unravel(i, shape);
                idx[r - 1] *= 2;
                b[ravel(&idx, &bshape)] = x;
            }
            let base = Tensor::from_slice(&b, &bshape, Device::Cpu)
                .unwrap()
                .to_dtype(dtype)
                .unwrap();
            base.slice(-1, 0, bshape[r - 1], 2).unwrap()
        }
    };
    assert_eq!(t.shape(), shape);
    if !matches!(kind, Kind::Contiguous)
        && numel(shape) > 1
        && shape.iter().filter(|&&d| d > 1).count() > 1
    {
        assert!(
            !t.is_contiguous(),
            "{kind:?} {shape:?} should be non-contiguous"
        );
    }
    t
}
