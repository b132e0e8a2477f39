//! The data module: samples land in caller-given buffers, compositions
//! index correctly, every sampler gives the orders PyTorch's does
//! (reproducibly per seed and epoch), and the loader delivers every sample
//! once, in order, from a ring allocated once, and stops cleanly on a bad
//! sample.

#[cfg(feature = "cuda")]
use crate::common::devices::on_both;
use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tensorscope::data::{
    random_split, BatchSampler, ConcatDataset, DataLoader, Dataset, DistributedSampler, Field,
    RandomSampler, Sampler, SequentialSampler, Slot, Subset, TensorDataset, WeightedRandomSampler,
};
use tensorscope::{memory, DType, Device, Error, Tensor};

/// The loader tests count the CPU allocator's allocations, which are
/// process-wide: every test of this file holds this.
fn lock() -> crate::common::Guard {
    crate::common::serial()
}

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
    let _l = lock();
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
    let _l = lock();
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
    let _l = lock();
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
    let _l = lock();
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
    let _l = lock();
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
    let _l = lock();
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
fn a_distributed_loader_reads_its_ranks_share_in_the_shared_order() {
    let _l = lock();
    let ds = Arc::new(dataset(10));
    let mut seen = Vec::new();
    for r in 0..3 {
        let want = DistributedSampler::new(10, r, 3, true, 5, false)
            .unwrap()
            .indices(2);
        let mut loader = DataLoader::builder(ds.clone())
            .batch_size(3)
            .shuffle(5)
            .distributed(r, 3)
            .build()
            .unwrap();
        assert_eq!(loader.len(), 2, "4 samples a rank: batches of 3 and 1");
        let mut got = Vec::new();
        let mut epoch = loader.epoch_at(2);
        while let Some(b) = epoch.next() {
            got.extend_from_slice(b.unwrap().indices());
        }
        assert_eq!(got, want, "rank {r}");
        seen.extend(got);
    }
    assert_eq!(
        seen.iter().collect::<HashSet<_>>().len(),
        10,
        "every sample, 2 twice"
    );
    let e = DataLoader::builder(ds.clone())
        .distributed(3, 3)
        .build()
        .err()
        .unwrap();
    assert!(
        e.to_string().starts_with("DataLoader::build") && e.to_string().contains("rank 3"),
        "{e}"
    );
    let e = DataLoader::builder(ds)
        .sampler(SequentialSampler::new(10))
        .distributed(0, 2)
        .build()
        .err()
        .unwrap();
    assert!(
        e.to_string().contains("both a sampler and distributed"),
        "{e}"
    );
}

#[test]
fn batches_keep_or_drop_the_short_last_batch() {
    let _l = lock();
    let b = BatchSampler::new(SequentialSampler::new(7), 3, false).unwrap();
    assert_eq!(b.batches(0), vec![vec![0, 1, 2], vec![3, 4, 5], vec![6]]);
    assert_eq!(b.len(), 3);
    let b = BatchSampler::new(SequentialSampler::new(7), 3, true).unwrap();
    assert_eq!(b.batches(0), vec![vec![0, 1, 2], vec![3, 4, 5]]);
    assert_eq!(b.len(), 2);
    assert!(BatchSampler::new(SequentialSampler::new(7), 0, true).is_err());
}

/// `n` samples of x: f32 [8] (x[i][j] = 8 i + j) and y: i64 [4] (y[i] = i):
/// a batch of 16 is 512 bytes per field, the allocator's rounding unit, so
/// the ring's bytes are exact.
fn big(n: usize) -> Arc<TensorDataset> {
    let xs: Vec<f32> = (0..n * 8).map(|v| v as f32).collect();
    let ys: Vec<i64> = (0..n as i64).flat_map(|i| [i; 4]).collect();
    Arc::new(
        TensorDataset::new(vec![
            Tensor::from_slice(&xs, &[n, 8], Device::Cpu).unwrap(),
            Tensor::from_slice(&ys, &[n, 4], Device::Cpu).unwrap(),
        ])
        .unwrap(),
    )
}

/// Every batch of an epoch checked against its indices: x row r is sample
/// indices[r]'s. Returns the indices in delivery order.
fn drain<D: Dataset + 'static>(loader: &mut DataLoader<D>, epoch: u64) -> Vec<usize> {
    let mut seen = Vec::new();
    let mut e = loader.epoch_at(epoch);
    while let Some(b) = e.next() {
        let b = b.unwrap();
        let x = b.field(0).unwrap().to_vec::<f32>().unwrap();
        let y = b.field(1).unwrap().to_vec::<i64>().unwrap();
        assert_eq!(x.len(), b.len() * 8);
        for (r, &i) in b.indices().iter().enumerate() {
            assert_eq!(
                x[r * 8 + 3],
                (8 * i + 3) as f32,
                "row {r} of {:?}",
                b.indices()
            );
            assert_eq!(y[r * 4], i as i64);
        }
        seen.extend_from_slice(b.indices());
    }
    seen
}

#[test]
fn the_loader_delivers_every_sample_in_order_with_any_workers_and_ring() {
    let _l = lock();
    for workers in [0, 1, 3] {
        for buffers in [1, 2, 3] {
            let mut l = DataLoader::builder(big(50))
                .batch_size(16)
                .num_workers(workers)
                .buffers(buffers)
                .build()
                .unwrap();
            assert_eq!(l.len(), 4);
            assert_eq!(
                drain(&mut l, 0),
                (0..50).collect::<Vec<_>>(),
                "{workers} {buffers}"
            );
            let mut l = DataLoader::builder(big(50))
                .batch_size(16)
                .drop_last(true)
                .num_workers(workers)
                .buffers(buffers)
                .build()
                .unwrap();
            assert_eq!(drain(&mut l, 0), (0..48).collect::<Vec<_>>());
        }
    }
    // Shuffled: a permutation per epoch, new each epoch, the same whatever
    // the worker count.
    let order = |workers| {
        let mut l = DataLoader::builder(big(50))
            .batch_size(16)
            .shuffle(7)
            .num_workers(workers)
            .build()
            .unwrap();
        (drain(&mut l, 0), drain(&mut l, 1))
    };
    let (a0, a1) = order(0);
    assert_eq!(order(3), (a0.clone(), a1.clone()));
    assert_ne!(a0, a1);
    let mut s = a0.clone();
    s.sort();
    assert_eq!(s, (0..50).collect::<Vec<_>>());
}

#[test]
fn the_ring_is_allocated_once_and_an_epoch_allocates_nothing() {
    let _l = lock();
    let ds = big(100);
    for buffers in [2, 3] {
        let before = memory::memory_stats(Device::Cpu);
        let mut l = DataLoader::builder(ds.clone())
            .batch_size(16)
            .num_workers(2)
            .buffers(buffers)
            .build()
            .unwrap();
        let built = memory::memory_stats(Device::Cpu);
        // Exactly N x batch bytes: 2 fields x 512 bytes per slot.
        assert_eq!(l.ring_bytes(), buffers * 2 * 512);
        assert_eq!(
            built.allocated_bytes.all.current - before.allocated_bytes.all.current,
            (buffers * 2 * 512) as i64
        );
        assert_eq!(
            built.allocation.all.allocated - before.allocation.all.allocated,
            (buffers * 2) as u64
        );
        for epoch in 0..3 {
            assert_eq!(drain(&mut l, epoch).len(), 100);
        }
        let after = memory::memory_stats(Device::Cpu);
        assert_eq!(
            after.allocation.all.allocated, built.allocation.all.allocated,
            "0 allocations per batch"
        );
        drop(l);
        let gone = memory::memory_stats(Device::Cpu);
        assert_eq!(
            gone.allocated_bytes.all.current,
            before.allocated_bytes.all.current
        );
    }
}

/// Fails (or panics) on one index; fine elsewhere.
struct Faulty {
    fields: Vec<Field>,
    bad: usize,
    panic: bool,
}

impl Dataset for Faulty {
    fn len(&self) -> usize {
        64
    }
    fn fields(&self) -> &[Field] {
        &self.fields
    }
    fn get(&self, index: usize, slot: &mut Slot<'_>) -> tensorscope::Result<()> {
        if index == self.bad {
            if self.panic {
                panic!("corrupt record {index}");
            }
            return Err(Error::InvalidArgument {
                op: "Faulty::get",
                msg: format!("cannot read /data/part-3.bin for sample {index}"),
            });
        }
        slot.write(0, &[index as f32; 2])
    }
}

#[test]
fn a_failing_sample_is_an_error_naming_it_and_the_loader_stops_cleanly() {
    let _l = lock();
    let before = memory::memory_stats(Device::Cpu)
        .allocated_bytes
        .all
        .current;
    for panic in [false, true] {
        for workers in [0, 2] {
            let ds = Arc::new(Faulty {
                fields: vec![Field::new("x", &[2], DType::F32)],
                bad: 37,
                panic,
            });
            let mut l = DataLoader::builder(ds)
                .batch_size(8)
                .num_workers(workers)
                .build()
                .unwrap();
            for _ in 0..2 {
                let mut e = l.epoch();
                let mut ok = 0;
                let err = loop {
                    match e.next() {
                        Some(Ok(b)) => ok += b.len(),
                        Some(Err(err)) => break err,
                        None => panic!("the error was lost"),
                    }
                };
                assert_eq!(ok, 32, "the batches before the bad one");
                assert!(matches!(err, Error::Data { index: 37, .. }), "{err}");
                let msg = err.to_string();
                assert!(
                    msg.contains("DataLoader::next") && msg.contains("sample 37"),
                    "{msg}"
                );
                assert!(
                    msg.contains(if panic {
                        "corrupt record 37"
                    } else {
                        "part-3.bin"
                    }),
                    "{msg}"
                );
                assert!(e.next().is_none(), "stopped after the error");
            }
            // An epoch dropped half way joins its workers.
            let mut e = l.epoch();
            let first = e.next().unwrap().unwrap();
            assert_eq!(first.len(), 8);
            drop(first);
            drop(e);
        }
    }
    assert_eq!(
        memory::memory_stats(Device::Cpu)
            .allocated_bytes
            .all
            .current,
        before,
        "every ring freed"
    );
}

#[test]
fn bad_loader_settings_are_errors() {
    let _l = lock();
    let e = DataLoader::builder(big(10))
        .batch_size(0)
        .build()
        .err()
        .unwrap();
    assert!(e.to_string().contains("DataLoader::build"), "{e}");
    assert!(DataLoader::builder(big(10)).buffers(0).build().is_err());
    for (buffers, prefetch) in [(2, 0), (2, 3)] {
        let e = DataLoader::builder(big(10))
            .buffers(buffers)
            .prefetch(prefetch)
            .build()
            .err()
            .unwrap();
        let msg = e.to_string();
        assert!(
            msg.contains("DataLoader::build") && msg.contains(&format!("prefetch {prefetch}")),
            "{msg}"
        );
    }
    assert!(DataLoader::builder(big(10))
        .shuffle(1)
        .sampler(SequentialSampler::new(10))
        .build()
        .is_err());
    // A batch's field index out of range.
    let mut l = DataLoader::builder(big(10)).batch_size(4).build().unwrap();
    let mut e = l.epoch();
    let b = e.next().unwrap().unwrap();
    assert!(matches!(b.field(2), Err(Error::IndexOutOfRange { .. })));
    // `to_owned` copies outlive the batch and its slot's reuse.
    let kept = b.to_owned().unwrap();
    drop(b);
    let _next = e.next().unwrap().unwrap();
    assert_eq!(kept[1].to_vec::<i64>().unwrap()[..4], [0, 0, 0, 0]);
}

/// A tensor autograd saved from a batch sees the slot's next batch once the
/// ring reuses it: the refill bumps the storage's version, so the backward
/// is refused instead of computing a gradient from the wrong inputs.
#[test]
fn a_reused_slot_invalidates_what_autograd_saved_from_it() {
    let _l = lock();
    let mut l = DataLoader::builder(big(32))
        .batch_size(16)
        .buffers(1)
        .build()
        .unwrap();
    let w = Tensor::ones(&[8, 1], DType::F32, Device::Cpu)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let mut e = l.epoch();
    let loss = {
        let b = e.next().unwrap().unwrap();
        let x = b.field(0).unwrap();
        x.matmul(&w).unwrap().sum_all().unwrap()
    };
    // Within its batch the backward works ...
    let loss2 = {
        let b = e.next().unwrap().unwrap();
        let x = b.field(0).unwrap();
        let l2 = x.matmul(&w).unwrap().sum_all().unwrap();
        l2.backward().unwrap();
        l2
    };
    drop(loss2);
    // ... after the one slot was refilled for the second batch it is refused.
    let err = loss.backward().unwrap_err();
    assert!(matches!(err, Error::Autograd { .. }), "{err}");
}

/// Leaks: a batch leaked with workers and a ring of one is an error from
/// `next`, not a hang; a loader dropped after an epoch was leaked (its
/// workers waiting for slots) stops them and frees the ring.
#[test]
fn leaked_batches_and_epochs_neither_hang_nor_keep_the_ring() {
    let _l = lock();
    let mut l = DataLoader::builder(big(64))
        .batch_size(16)
        .num_workers(2)
        .buffers(1)
        .build()
        .unwrap();
    {
        let mut e = l.epoch();
        std::mem::forget(e.next().unwrap().unwrap());
        let err = e.next().unwrap().err().unwrap();
        assert!(err.to_string().contains("leaked"), "{err}");
        assert!(e.next().is_none());
    }
    let ds = big(64);
    let before = memory::memory_stats(Device::Cpu)
        .allocated_bytes
        .all
        .current;
    let mut l = DataLoader::builder(ds.clone())
        .batch_size(16)
        .num_workers(2)
        .buffers(2)
        .build()
        .unwrap();
    {
        let mut e = l.epoch();
        drop(e.next().unwrap().unwrap());
        std::mem::forget(e);
    }
    drop(l);
    assert_eq!(
        memory::memory_stats(Device::Cpu)
            .allocated_bytes
            .all
            .current,
        before,
        "the ring is freed once the leaked epoch's workers are stopped"
    );
}

/// An epoch leaked half way (`mem::forget`, safe Rust) cannot leave its
/// workers writing the ring: the next epoch stops and waits for them first,
/// then delivers every sample intact.
#[test]
fn a_leaked_epoch_does_not_corrupt_the_next_one() {
    let _l = lock();
    let mut l = DataLoader::builder(big(200))
        .batch_size(16)
        .num_workers(3)
        .buffers(3)
        .build()
        .unwrap();
    {
        let mut e = l.epoch();
        drop(e.next().unwrap().unwrap());
        std::mem::forget(e);
    }
    assert_eq!(drain(&mut l, 5), (0..200).collect::<Vec<_>>());
}

/// `big`'s samples, recording the highest index any worker has started.
struct Watched {
    inner: Arc<TensorDataset>,
    started: AtomicUsize,
}

impl Dataset for Watched {
    fn len(&self) -> usize {
        self.inner.len()
    }
    fn fields(&self) -> &[Field] {
        self.inner.fields()
    }
    fn get(&self, index: usize, slot: &mut Slot<'_>) -> tensorscope::Result<()> {
        self.started.fetch_max(index, Ordering::SeqCst);
        self.inner.get(index, slot)
    }
}

#[test]
fn prefetch_bounds_how_far_the_workers_run_ahead() {
    let _l = lock();
    for prefetch in [1, 2] {
        let ds = Arc::new(Watched {
            inner: big(12),
            started: AtomicUsize::new(0),
        });
        // Batches of one sample, so a batch number is a sample index; a
        // ring of 3 would let the workers run 2 batches ahead of the held
        // one if `prefetch` were ignored.
        let mut l = DataLoader::builder(ds.clone())
            .num_workers(2)
            .buffers(3)
            .prefetch(prefetch)
            .build()
            .unwrap();
        let mut e = l.epoch();
        let mut k = 0;
        while let Some(b) = e.next() {
            let b = b.unwrap();
            assert_eq!(b.indices(), [k]);
            // The workers do reach `k + prefetch` (waited for, however slow
            // this machine is), and then go no further while `b` is held.
            let target = (k + prefetch).min(11);
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while ds.started.load(Ordering::SeqCst) < target {
                assert!(
                    std::time::Instant::now() < deadline,
                    "prefetch {prefetch}: sample {target} never started while the loop holds {k}"
                );
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
            let started = ds.started.load(Ordering::SeqCst);
            assert!(
                started <= k + prefetch,
                "prefetch {prefetch}: sample {started} started while the loop holds {k}"
            );
            k += 1;
        }
        assert_eq!(k, 12);
    }
}

#[cfg(feature = "cuda")]
on_both!(the_ring_lives_on_the_target_device_and_an_epoch_allocates_nothing);

#[cfg(not(feature = "cuda"))]
#[test]
fn the_ring_lives_on_the_cpu_and_an_epoch_allocates_nothing() {
    the_ring_lives_on_the_target_device_and_an_epoch_allocates_nothing(Device::Cpu)
}

/// A loader delivering to `dev` (on a GPU: pinned host buffers, copies on
/// the loader's stream): every sample once in order, the device half of the
/// ring exactly N x batch bytes allocated by `build`, no allocation on the
/// device or the host per epoch, and everything back after the drop.
fn the_ring_lives_on_the_target_device_and_an_epoch_allocates_nothing(dev: Device) {
    let _l = lock();
    let ds = big(100);
    let (cpu0, dev0) = (memory::memory_stats(Device::Cpu), memory::memory_stats(dev));
    let mut l = DataLoader::builder(ds.clone())
        .batch_size(16)
        .num_workers(2)
        .buffers(3)
        .pin_memory(true)
        .device(dev)
        .build()
        .unwrap();
    assert_eq!(l.is_pinned(), dev.is_cuda(), "pinned only for a device");
    let ring = 3 * 2 * 512;
    assert_eq!(l.ring_bytes(), if dev.is_cuda() { 2 * ring } else { ring });
    let (cpu1, dev1) = (memory::memory_stats(Device::Cpu), memory::memory_stats(dev));
    assert_eq!(
        dev1.allocated_bytes.all.current - dev0.allocated_bytes.all.current,
        ring as i64
    );
    {
        let mut e = l.epoch_at(7);
        let b = e.next().unwrap().unwrap();
        assert_eq!(b.field(0).unwrap().device(), dev);
        assert_eq!(b.field(1).unwrap().device(), dev);
    }
    // The loader's own work: epochs whose batches are taken (every sample
    // once, in order) allocate nothing on the device or the host (on a GPU
    // the host half is pinned, outside the CPU allocator).
    for epoch in 0..3 {
        let mut seen = Vec::new();
        let mut e = l.epoch_at(epoch);
        while let Some(b) = e.next() {
            seen.extend_from_slice(b.unwrap().indices());
        }
        assert_eq!(seen, (0..100).collect::<Vec<_>>());
    }
    let (cpu2, dev2) = (memory::memory_stats(Device::Cpu), memory::memory_stats(dev));
    assert_eq!(dev2.allocation.all.allocated, dev1.allocation.all.allocated);
    assert_eq!(cpu2.allocation.all.allocated, cpu1.allocation.all.allocated);
    // Their values, read on the caller's stream, which waits for each
    // batch's copy. (The reads copy to the host, which allocates there: on
    // the H200 each read of a device field also allocated one device
    // block, so the reads are kept out of the counts above.)
    for epoch in 3..5 {
        assert_eq!(drain(&mut l, epoch), (0..100).collect::<Vec<_>>());
    }
    drop(l);
    assert_eq!(
        memory::memory_stats(dev).allocated_bytes.all.current,
        dev0.allocated_bytes.all.current
    );
    assert_eq!(
        memory::memory_stats(Device::Cpu)
            .allocated_bytes
            .all
            .current,
        cpu0.allocated_bytes.all.current
    );
}
