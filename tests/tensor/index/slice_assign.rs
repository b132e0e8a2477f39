//! Slice assignment.

use super::*;

#[test]
fn slice_assign_writes_the_base() {
    let _g = lock();
    for &dtype in &DTYPES {
        for kind in KINDS {
            let shape = [4usize, 6];
            let bv = values(24, dtype, 3);
            for (d, start, end, step) in [
                (0usize, 1usize, 4usize, 1usize),
                (1, 0, 6, 2),
                (1, 1, 100, 3),
                (0, 3, 4, 5),
                (1, 6, 6, 1),
            ] {
                let mut t = make(&bv, &shape, dtype, kind);
                let keep = t.alias(); // another handle on the same tensor
                let before = storage_image(&t);
                let sel: Vec<usize> = (start..end.min(shape[d])).step_by(step).collect();
                let sshape = with_dim(&shape, d, sel.len());
                let sv = values(numel(&sshape), dtype, 11);
                let src = make(&sv, &sshape, DType::F64, KINDS[(d + 1) % 3]); // cross-dtype source
                let v0 = t.version();
                t.slice_assign_(d as isize, start, end, step, &src).unwrap();
                let mut want = bv.clone();
                for (i, &x) in sv.iter().enumerate() {
                    let idx = unravel(i, &sshape);
                    want[ravel(&with_dim(&idx, d, sel[idx[d]]), &shape)] = if dtype == DType::Bool {
                        (x != 0.0) as u8 as f64
                    } else {
                        x
                    };
                }
                assert_written(
                    &t,
                    &before,
                    &want,
                    &format!("slice_assign_ {dtype} {kind:?} {d} {start}:{end}:{step}"),
                );
                assert_eq!(vals(&keep), want);
                if !sel.is_empty() {
                    assert!(t.version() > v0);
                }
            }
        }
    }
}

#[test]
fn slice_assign_broadcasts_and_handles_overlap() {
    let _g = lock();
    let base = Tensor::zeros(&[3, 4], DType::F32, Device::Cpu).unwrap();
    let mut view = base.t().unwrap(); // [4, 3], writes go to base
    let row = Tensor::from_slice(&[1.0f32, 2., 3.], &[3], Device::Cpu).unwrap();
    view.slice_assign_(0, 1, 3, 1, &row).unwrap();
    assert_eq!(
        vals(&base),
        vec![0., 1., 1., 0., 0., 2., 2., 0., 0., 3., 3., 0.]
    );
    let five = Tensor::scalar(5i64, Device::Cpu).unwrap();
    view.slice_assign_(1, 2, 3, 1, &five).unwrap();
    assert_eq!(
        vals(&base),
        vec![0., 1., 1., 0., 0., 2., 2., 0., 5., 5., 5., 5.]
    );
    view.slice_fill_(0, 0, 4, 3, -1.0).unwrap();
    assert_eq!(
        vals(&base),
        vec![-1., 1., 1., -1., -1., 2., 2., -1., -1., 5., 5., -1.]
    );

    // x[1:5] = x[0:4] reads the old values (PyTorch copies overlapping sources).
    let mut x = Tensor::arange(0.0, 6.0, 1.0, DType::I32, Device::Cpu).unwrap();
    let src = x.narrow(0, 0, 4).unwrap();
    x.slice_assign_(0, 1, 5, 1, &src).unwrap();
    assert_eq!(x.to_vec::<i32>().unwrap(), vec![0, 0, 1, 2, 3, 5]);
}

#[test]
fn large_gathers_take_the_parallel_and_tiled_paths() {
    let _g = lock();
    // 600 x 300 = 180 000 output elements: above the parallel threshold, and
    // the transposed input makes the walk tiled.
    let (r, c) = (600usize, 300usize);
    let v: Vec<f64> = (0..r * c).map(|i| (i % 1000) as f64).collect();
    for kind in [Kind::Contiguous, Kind::Transposed] {
        let t = make(&v, &[r, c], DType::F32, kind);
        let ix: Vec<i64> = (0..c as i64).rev().collect();
        let index = Tensor::from_slice(&ix, &[c], Device::Cpu).unwrap();
        let out = t.index_select(1, &index).unwrap();
        let (want, _) = ref_index_select(&v, &[r, c], 1, &ix);
        assert_eq!(vals(&out), want, "index_select {kind:?}");
        let full: Vec<i64> = (0..r * c).map(|i| ((i * 7) % r) as i64).collect();
        let gi = Tensor::from_slice(&full, &[r, c], Device::Cpu).unwrap();
        let g = t.gather(0, &gi).unwrap();
        assert_eq!(
            vals(&g),
            ref_gather(&v, &[r, c], 0, &full, &[r, c]),
            "gather {kind:?}"
        );
    }
}
