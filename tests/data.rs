//! The data module's datasets and samplers (issue 15, first part): samples
//! land in caller-given buffers, compositions index correctly, and every
//! sampler gives the orders PyTorch's does, reproducibly per (seed, epoch).

use std::collections::HashSet;
use std::sync::Arc;
use tensorscope::data::{
    random_split, BatchSampler, ConcatDataset, Dataset, DistributedSampler, RandomSampler, Sampler,
    SequentialSampler, Subset, TensorDataset, WeightedRandomSampler,
};
use tensorscope::{DType, Device, Error, Tensor};

/// `n` samples: x[i] = [i, i + 0.5] (f32), y[i] = 10 i (i64).
fn dataset(n: usize) -> TensorDataset {
    let xs: Vec<f32> = (0..n).flat_map(|i| [i as f32, i as f32 + 0.5]).collect();
    let ys: Vec<i64> = (0..n as i64).map(|i| 10 * i).collect();
    TensorDataset::new(vec![
        Tensor::from_slice(&xs, &[n, 2], Device::Cpu).unwrap(),
        Tensor::from_slice(&ys, &[n], Device::Cpu).unwrap(),
    ])
    .unwrap()
}

/// Sample `i` of `ds` as (x, y), read through a slot.
fn read(ds: &dyn Dataset, i: usize) -> tensorscope::Result<([f32; 2], i64)> {
    let (mut xb, mut yb) = ([0u8; 8], [0u8; 8]);
    {
        let mut bufs = [&mut xb[..], &mut yb[..]];
        let mut slot = ds.slot(&mut bufs)?;
        ds.get(i, &mut slot)?;
    }
    let x0 = f32::from_ne_bytes(xb[..4].try_into().unwrap());
    let x1 = f32::from_ne_bytes(xb[4..].try_into().unwrap());
    Ok(([x0, x1], i64::from_ne_bytes(yb)))
}

#[test]
fn tensor_dataset_writes_each_field_of_a_sample_into_its_buffer() {
    let ds = dataset(5);
    assert_eq!(ds.len(), 5);
    assert_eq!(ds.fields()[0].shape, vec![2]);
    assert_eq!(ds.fields()[1].dtype, DType::I64);
    for i in 0..5 {
        assert_eq!(
            read(&ds, i).unwrap(),
            ([i as f32, i as f32 + 0.5], 10 * i as i64)
        );
    }
    // A strided view is copied once into a contiguous host tensor.
    let t = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[2, 2], Device::Cpu).unwrap();
    let tds = TensorDataset::new(vec![t.t().unwrap()]).unwrap();
    let mut b = [0u8; 8];
    let mut bufs = [&mut b[..]];
    tds.get(1, &mut tds.slot(&mut bufs).unwrap()).unwrap();
    assert_eq!(f32::from_ne_bytes(b[..4].try_into().unwrap()), 2.0);
    assert_eq!(f32::from_ne_bytes(b[4..].try_into().unwrap()), 4.0);
}

#[test]
fn bad_datasets_slots_and_indices_are_errors_naming_the_call() {
    let a = Tensor::zeros(&[3, 2], DType::F32, Device::Cpu).unwrap();
    let b = Tensor::zeros(&[4], DType::I64, Device::Cpu).unwrap();
    let e = TensorDataset::new(vec![a, b]).err().unwrap();
    assert!(
        e.to_string().contains("TensorDataset::new") && e.to_string().contains("[3, 2]"),
        "{e}"
    );
    assert!(TensorDataset::new(vec![]).is_err());
    let s = Tensor::from_slice(&[1.0f32], &[], Device::Cpu).unwrap();
    assert!(TensorDataset::new(vec![s]).is_err());

    let ds = dataset(3);
    let e = read(&ds, 3).unwrap_err();
    assert!(
        matches!(
            e,
            Error::IndexOutOfRange {
                index: 3,
                size: 3,
                ..
            }
        ),
        "{e}"
    );
    // A slot with a wrongly sized buffer, or too few buffers.
    let (mut xb, mut yb) = ([0u8; 4], [0u8; 8]);
    let mut bufs = [&mut xb[..], &mut yb[..]];
    let e = ds.slot(&mut bufs).err().unwrap();
    assert!(
        e.to_string().contains("Slot::new") && e.to_string().contains("tensor 0"),
        "{e}"
    );
    let mut one = [0u8; 8];
    let mut bufs = [&mut one[..]];
    assert!(ds.slot(&mut bufs).is_err());
    // Typed writes check the dtype and the length.
    let (mut xb, mut yb) = ([0u8; 8], [0u8; 8]);
    let mut bufs = [&mut xb[..], &mut yb[..]];
    let mut slot = ds.slot(&mut bufs).unwrap();
    assert!(matches!(
        slot.write(0, &[1i64]),
        Err(Error::DTypeMismatch { .. })
    ));
    assert!(slot.write(0, &[1.0f32]).is_err());
    slot.write(0, &[7.0f32, 8.0]).unwrap();
    slot.write(1, &[42i64]).unwrap();
    assert_eq!(f32::from_ne_bytes(xb[4..].try_into().unwrap()), 8.0);
    assert_eq!(i64::from_ne_bytes(yb), 42);
}

#[test]
fn subsets_concatenations_and_random_splits_index_the_right_samples() {
    let base = Arc::new(dataset(10));
    let sub = Subset::new(base.clone(), vec![7, 2, 2]).unwrap();
    assert_eq!(sub.len(), 3);
    assert_eq!(read(&sub, 0).unwrap().1, 70);
    assert_eq!(read(&sub, 2).unwrap().1, 20);
    assert!(read(&sub, 3).is_err());
    assert!(Subset::new(base.clone(), vec![10]).is_err());

    let cat = ConcatDataset::new(vec![
        Arc::new(dataset(2)) as Arc<dyn Dataset>,
        Arc::new(dataset(0)),
        Arc::new(dataset(3)),
    ])
    .unwrap();
    assert_eq!(cat.len(), 5);
    let ys: Vec<i64> = (0..5).map(|i| read(&cat, i).unwrap().1).collect();
    assert_eq!(ys, vec![0, 10, 0, 10, 20]);
    assert!(read(&cat, 5).is_err());
    let other =
        TensorDataset::new(vec![Tensor::zeros(&[2], DType::F64, Device::Cpu).unwrap()]).unwrap();
    assert!(ConcatDataset::new(vec![
        Arc::new(dataset(2)) as Arc<dyn Dataset>,
        Arc::new(other)
    ])
    .is_err());

    let parts = random_split(base.clone(), &[6, 3, 1], 5).unwrap();
    assert_eq!(
        parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
        vec![6, 3, 1]
    );
    let all: HashSet<usize> = parts.iter().flat_map(|p| p.indices().to_vec()).collect();
    assert_eq!(all.len(), 10, "disjoint and covering");
    let again = random_split(base.clone(), &[6, 3, 1], 5).unwrap();
    assert_eq!(
        parts[0].indices(),
        again[0].indices(),
        "one seed, one split"
    );
    let other = random_split(base.clone(), &[6, 3, 1], 6).unwrap();
    assert_ne!(parts[0].indices(), other[0].indices());
    let e = random_split(base, &[6, 3], 5).err().unwrap();
    assert!(e.to_string().contains("random_split"), "{e}");
}

#[test]
fn samplers_give_permutations_per_epoch_reproducibly() {
    assert_eq!(SequentialSampler::new(4).indices(3), vec![0, 1, 2, 3]);
    let r = RandomSampler::new(50, 1);
    let (e0, e1) = (r.indices(0), r.indices(1));
    for e in [&e0, &e1] {
        let mut s = e.clone();
        s.sort();
        assert_eq!(s, (0..50).collect::<Vec<_>>());
    }
    assert_ne!(e0, e1, "a new order each epoch");
    assert_ne!(e0, (0..50).collect::<Vec<_>>());
    assert_eq!(
        e0,
        RandomSampler::new(50, 1).indices(0),
        "same seed and epoch, same order"
    );
    assert_ne!(e0, RandomSampler::new(50, 2).indices(0));
}

#[test]
fn weighted_sampling_follows_the_weights() {
    // With replacement: frequencies near 1:3, never the zero weight.
    let w = WeightedRandomSampler::new(vec![1.0, 0.0, 3.0], 40_000, true, 9).unwrap();
    let idx = w.indices(0);
    assert_eq!(idx.len(), 40_000);
    let count = |k| idx.iter().filter(|&&i| i == k).count() as f64;
    assert_eq!(count(1), 0.0);
    let frac = count(2) / 40_000.0;
    assert!((frac - 0.75).abs() < 0.02, "{frac}");
    // Without replacement: distinct indices, only positive weights.
    let w = WeightedRandomSampler::new(vec![5.0, 0.0, 1.0, 1.0], 3, false, 9).unwrap();
    for epoch in 0..20 {
        let mut s = w.indices(epoch);
        s.sort();
        assert_eq!(s, vec![0, 2, 3]);
    }
    // The heavy index comes first most of the time (5 / 7 of the first draws).
    let first0 = (0..2000).filter(|&e| w.indices(e)[0] == 0).count() as f64 / 2000.0;
    assert!((first0 - 5.0 / 7.0).abs() < 0.05, "{first0}");
    for bad in [
        WeightedRandomSampler::new(vec![1.0, -1.0], 1, true, 0),
        WeightedRandomSampler::new(vec![f64::NAN], 1, true, 0),
        WeightedRandomSampler::new(vec![0.0, 0.0], 1, true, 0),
        WeightedRandomSampler::new(vec![1.0, 0.0], 2, false, 0),
    ] {
        let e = bad.err().unwrap();
        assert!(e.to_string().contains("WeightedRandomSampler::new"), "{e}");
    }
}

#[test]
fn distributed_shares_are_disjoint_equal_and_padded_like_pytorch() {
    // 10 samples over 3 ranks, not shuffled: padded to 12 by repeating the
    // start, rank r takes r, r + 3, ... (PyTorch's DistributedSampler).
    let shares: Vec<Vec<usize>> = (0..3)
        .map(|r| {
            DistributedSampler::new(10, r, 3, false, 0, false)
                .unwrap()
                .indices(0)
        })
        .collect();
    assert_eq!(
        shares,
        vec![vec![0, 3, 6, 9], vec![1, 4, 7, 0], vec![2, 5, 8, 1]]
    );
    // drop_last: cut to 9.
    let d = DistributedSampler::new(10, 2, 3, false, 0, true).unwrap();
    assert_eq!((d.indices(0), d.len()), (vec![2, 5, 8], 3));
    // Shuffled: the ranks agree on the permutation of an epoch.
    let all: Vec<usize> = (0..4)
        .flat_map(|r| {
            DistributedSampler::new(20, r, 4, true, 3, false)
                .unwrap()
                .indices(7)
        })
        .collect();
    assert_eq!(all.iter().collect::<HashSet<_>>().len(), 20);
    assert!(DistributedSampler::new(10, 3, 3, false, 0, false).is_err());
    assert!(DistributedSampler::new(10, 0, 0, false, 0, false).is_err());
}

#[test]
fn batches_keep_or_drop_the_short_last_batch() {
    let b = BatchSampler::new(SequentialSampler::new(7), 3, false).unwrap();
    assert_eq!(b.batches(0), vec![vec![0, 1, 2], vec![3, 4, 5], vec![6]]);
    assert_eq!(b.len(), 3);
    let b = BatchSampler::new(SequentialSampler::new(7), 3, true).unwrap();
    assert_eq!(b.batches(0), vec![vec![0, 1, 2], vec![3, 4, 5]]);
    assert_eq!(b.len(), 2);
    assert!(BatchSampler::new(SequentialSampler::new(7), 0, true).is_err());
}
