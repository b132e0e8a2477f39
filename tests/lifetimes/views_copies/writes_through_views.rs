//! In-place writes through views change the base, as in PyTorch.

use super::*;

#[test]
fn in_place_through_views_changes_the_base() {
    let _g = lock();
    let fresh = || arange(12).view(&[3, 4]).unwrap();
    let expect = |f: &dyn Fn(usize, usize) -> f64| -> Vec<f64> {
        (0..12).map(|k| f(k / 4, k % 4)).collect()
    };
    // narrow: x.narrow(1, 1, 2).add_(100)
    let x = fresh();
    x.narrow(1, 1, 2).unwrap().add_scalar_(100.0).unwrap();
    let want = expect(&|i, j| (i * 4 + j) as f64 + if (1..3).contains(&j) { 100.0 } else { 0.0 });
    assert_eq!(read(&x), want);
    // select: x[1].mul_(-1)
    let x = fresh();
    x.select(0, 1).unwrap().mul_scalar_(-1.0).unwrap();
    let want = expect(&|i, j| (i * 4 + j) as f64 * if i == 1 { -1.0 } else { 1.0 });
    assert_eq!(read(&x), want);
    // transpose: x.t().add_(arange(3)) adds i to row i of x... of the transpose: column k gets k
    let x = fresh();
    x.t().unwrap().add_(&arange(3)).unwrap();
    let want = expect(&|i, j| (i * 4 + j + i) as f64);
    assert_eq!(read(&x), want);
    // stepped slice: x[:, ::2].fill_(-1)
    let x = fresh();
    x.slice(1, 0, 4, 2).unwrap().fill_(-1.0).unwrap();
    let want = expect(&|i, j| if j % 2 == 0 { -1.0 } else { (i * 4 + j) as f64 });
    assert_eq!(read(&x), want);
    // view: x.view(-1)[5:7].copy_([50, 60])
    let x = fresh();
    x.view(&[-1])
        .unwrap()
        .narrow(0, 5, 2)
        .unwrap()
        .copy_(&Tensor::from_slice(&[50.0f32, 60.0], &[2], CPU).unwrap())
        .unwrap();
    let want = expect(&|i, j| match i * 4 + j {
        5 => 50.0,
        6 => 60.0,
        k => k as f64,
    });
    assert_eq!(read(&x), want);
    // unary in place through a transposed, stepped view
    let x = fresh();
    x.t().unwrap().slice(0, 1, 4, 2).unwrap().neg_().unwrap();
    let want = expect(&|i, j| (i * 4 + j) as f64 * if j % 2 == 1 { -1.0 } else { 1.0 });
    assert_eq!(read(&x), want);
    // masked_fill_ through a view
    let x = fresh();
    let mut row = x.select(0, 2).unwrap();
    let mask = row.gt_scalar(9.5).unwrap();
    row.masked_fill_(&mask, 0.0).unwrap();
    let want = expect(&|i, j| {
        if i == 2 && j >= 2 {
            0.0
        } else {
            (i * 4 + j) as f64
        }
    });
    assert_eq!(read(&x), want);
}

#[test]
fn version_counter_is_shared_by_views_and_bumped_by_in_place_ops() {
    let _g = lock();
    let x = arange(12).view(&[3, 4]).unwrap();
    let v0 = x.version();
    let mut a = x.narrow(0, 0, 1).unwrap();
    let b = x.t().unwrap();
    let c = x.deep_clone().unwrap();
    assert_eq!(a.version(), v0);
    a.add_scalar_(1.0).unwrap();
    assert_eq!(x.version(), v0 + 1);
    assert_eq!(b.version(), v0 + 1, "every view sees the bump");
    assert_eq!(c.version(), 0, "a copy has its own counter");
    let mut bt = b.alias();
    bt.relu_().unwrap();
    bt.copy_(&b.deep_clone().unwrap()).unwrap();
    bt.fill_(1.0).unwrap();
    bt.zero_().unwrap();
    assert_eq!(x.version(), v0 + 5);
    // out-of-place ops and reads do not bump
    let _ = x.add(&x).unwrap();
    let _ = x.to_vec::<f32>().unwrap();
    assert_eq!(x.version(), v0 + 5);
    // a refused in-place op does not bump either
    let mut e = x
        .select(0, 0)
        .unwrap()
        .unsqueeze(0)
        .unwrap()
        .expand(&[2, 4])
        .unwrap();
    assert!(e.add_scalar_(1.0).is_err());
    assert_eq!(x.version(), v0 + 5);
}
