// What borrowed views allow: reading while the base is alive, writing the
// base once the views are gone, writes through a mutable view, escaping on
// purpose with `into_owned`, and sharing a view with scoped threads.
use tensorscope::{DType, Device, Result, Tensor};

fn first_row(x: &Tensor) -> Result<Tensor> {
    // An owned result may leave; the borrowed view may not.
    let row = x.select_ref(0, 0)?;
    row.deep_clone()
}

pub fn main() -> Result<()> {
    let mut base = Tensor::arange(0.0, 6.0, 1.0, DType::F32, Device::Cpu)?.view(&[2, 3])?;
    let v = base.transpose_ref(0, 1)?;
    let w = v.narrow(0, 0, 2)?; // a view of a view keeps the base's lifetime
    let w2 = v.narrow(0, 1, 2)?;
    let sum = w.add(&w2)?;
    std::thread::scope(|t| {
        t.spawn(|| assert_eq!(v.shape(), &[3, 2]));
    });
    drop((w, w2));
    drop(v);
    base.mul_scalar_(2.0)?; // no view is alive any more
    base.narrow_mut(1, 0, 1)?.fill_(-1.0)?;
    let owned = base.narrow_ref(1, 2, 1)?.into_owned(); // an owned view, on purpose
    drop(base);
    assert_eq!(owned.to_vec::<f32>()?, [4.0, 10.0]);
    let row = first_row(&owned)?;
    assert_eq!(row.shape(), &[1]);
    assert_eq!(sum.shape(), &[2, 2]);
    Ok(())
}
