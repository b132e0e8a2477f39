//! Borrowed views (values against a naive reference on non-contiguous bases,
//! writes through mutable views, errors), the "a slice keeps the whole
//! storage alive" pitfall and its fix, `detach` and `into_contiguous`.
//! Byte counts are global, so every test takes `LOCK`.

use tensorscope::memory::{self, round_size};
use tensorscope::{leak, DType, Device, Error, Result, Tensor};

fn lock() -> crate::common::Guard {
    crate::common::serial()
}

const CPU: Device = Device::Cpu;

fn allocated() -> usize {
    memory::memory_allocated(CPU)
}

/// A naive strided array: shape, strides, offset over a flat Vec<f64>.
#[derive(Clone, Debug)]
struct Naive {
    data: Vec<f64>,
    shape: Vec<usize>,
    strides: Vec<usize>,
    offset: usize,
}

impl Naive {
    fn new(data: Vec<f64>, shape: &[usize]) -> Naive {
        let mut strides = vec![1; shape.len()];
        for i in (0..shape.len().saturating_sub(1)).rev() {
            strides[i] = strides[i + 1] * shape[i + 1];
        }
        Naive {
            data,
            shape: shape.to_vec(),
            strides,
            offset: 0,
        }
    }
    fn transpose(&self, a: usize, b: usize) -> Naive {
        let mut n = self.clone();
        n.shape.swap(a, b);
        n.strides.swap(a, b);
        n
    }
    fn slice(&self, d: usize, start: usize, end: usize, step: usize) -> Naive {
        let mut n = self.clone();
        let end = end.min(self.shape[d]);
        n.offset += start * self.strides[d];
        n.shape[d] = (end - start).div_ceil(step);
        n.strides[d] *= step;
        n
    }
    fn select(&self, d: usize, i: usize) -> Naive {
        let mut n = self.clone();
        n.offset += i * self.strides[d];
        n.shape.remove(d);
        n.strides.remove(d);
        n
    }
    /// Flat indices into `data`, row-major over the view.
    fn indices(&self) -> Vec<usize> {
        let numel: usize = self.shape.iter().product();
        (0..numel)
            .map(|mut lin| {
                let mut off = self.offset;
                for d in (0..self.shape.len()).rev() {
                    off += (lin % self.shape[d]) * self.strides[d];
                    lin /= self.shape[d];
                }
                off
            })
            .collect()
    }
    fn values(&self) -> Vec<f64> {
        self.indices().into_iter().map(|i| self.data[i]).collect()
    }
}

fn data(n: usize) -> Vec<f64> {
    (0..n).map(|i| (i as f64) * 1.5 - 7.0).collect()
}

const DTYPES: [DType; 4] = [DType::F32, DType::F64, DType::I64, DType::F16];

fn base(dt: DType, shape: &[usize]) -> Result<Tensor> {
    let n: usize = shape.iter().product();
    // f16 holds these values exactly (small multiples of 0.5); i64 truncates them
    Tensor::from_slice(&data(n), shape, CPU)?.to_dtype(dt)
}

fn naive_for(dt: DType, shape: &[usize]) -> Naive {
    let n: usize = shape.iter().product();
    let v = data(n)
        .into_iter()
        .map(|x| if dt.is_float() { x } else { x.trunc() })
        .collect();
    Naive::new(v, shape)
}

#[test]
fn borrowed_views_match_a_naive_reference_without_allocating() -> Result<()> {
    let _g = lock();
    for dt in DTYPES {
        let x = base(dt, &[4, 6, 5])?;
        let nx = naive_for(dt, &[4, 6, 5]);
        // non-contiguous bases: a transpose and a stepped slice
        let xt = x.transpose(0, 2)?; // [5, 6, 4]
        let nxt = nx.transpose(0, 2);
        let before = allocated();
        let v1 = xt.slice_ref(1, 1, 6, 2)?; // [5, 3, 4]
        assert_eq!(v1.to_vec::<f64>()?, nxt.slice(1, 1, 6, 2).values(), "{dt}");
        let v2 = v1.select(0, 3)?; // a view of a view: [3, 4]
        assert_eq!(
            v2.to_vec::<f64>()?,
            nxt.slice(1, 1, 6, 2).select(0, 3).values()
        );
        let v3 = v2.t()?; // [4, 3]
        assert_eq!(
            v3.to_vec::<f64>()?,
            nxt.slice(1, 1, 6, 2).select(0, 3).transpose(0, 1).values()
        );
        let v4 = xt.narrow_ref(2, 1, 2)?; // [5, 6, 2]
        assert_eq!(v4.to_vec::<f64>()?, nxt.slice(2, 1, 3, 1).values());
        let v5 = x.select_ref(1, 4)?.transpose(0, 1)?; // [5, 4]
        assert_eq!(
            v5.to_vec::<f64>()?,
            nx.select(1, 4).transpose(0, 1).values()
        );
        let v6 = x.transpose_ref(1, 2)?.narrow(0, 1, 2)?; // [2, 5, 6]
        assert_eq!(
            v6.to_vec::<f64>()?,
            nx.transpose(1, 2).slice(0, 1, 3, 1).values()
        );
        let v7 = x.view_ref(&[24, -1])?.slice(0, 0, 24, 5)?; // [5, 5]
        assert_eq!(
            v7.to_vec::<f64>()?,
            Naive::new(nx.data.clone(), &[24, 5])
                .slice(0, 0, 24, 5)
                .values()
        );
        let v8 = x.as_view().unsqueeze(0)?.expand(&[2, -1, -1, -1])?; // [2, 4, 6, 5]
        let mut twice = nx.values();
        twice.extend(nx.values());
        assert_eq!(v8.to_vec::<f64>()?, twice);
        let v9 = x.as_view().permute(&[2, 1, 0])?.view(&[5, 24]);
        assert!(matches!(v9, Err(Error::NotViewable { op: "view", .. })));
        for v in [&v1, &v2, &v3, &v4, &v5, &v6, &v7, &v8] {
            assert!(v.shares_storage(&x));
        }
        // views allocate no element bytes (to_vec's copies are gone again)
        assert_eq!(allocated(), before);
    }
    Ok(())
}

#[test]
fn mutable_views_write_exactly_their_elements() -> Result<()> {
    let _g = lock();
    for dt in [DType::F32, DType::F64, DType::I64] {
        // on a transposed base
        let x = base(dt, &[6, 4])?;
        let mut xt = x.t()?; // [4, 6], an owned view of x's storage
        let nxt = naive_for(dt, &[6, 4]).transpose(0, 1);
        let mut expect = nxt.data.clone();
        xt.slice_mut(1, 1, 6, 2)?.fill_(100.0)?;
        for i in nxt.slice(1, 1, 6, 2).indices() {
            expect[i] = 100.0;
        }
        {
            let mut rows = xt.narrow_mut(0, 2, 2)?;
            rows.add_scalar_(3.0)?;
            rows.select(1, 0)?.mul_scalar_(-1.0)?; // a sub-view of a mutable view
        }
        for i in nxt.slice(0, 2, 4, 1).indices() {
            expect[i] += 3.0;
        }
        for i in nxt.slice(0, 2, 4, 1).select(1, 0).indices() {
            expect[i] *= -1.0;
        }
        xt.select_mut(1, 5)?.zero_()?;
        for i in nxt.select(1, 5).indices() {
            expect[i] = 0.0;
        }
        xt.as_view_mut()
            .slice(0, 0, 4, 3)?
            .narrow(1, 0, 1)?
            .fill_(-2.0)?;
        for i in nxt.slice(0, 0, 4, 3).slice(1, 0, 1, 1).indices() {
            expect[i] = -2.0;
        }
        // x (row-major over the same storage) sees every write
        assert_eq!(x.to_vec::<f64>()?, expect, "{dt}");
    }
    Ok(())
}

#[test]
fn borrowed_view_errors_name_the_op() {
    let _g = lock();
    let mut x = Tensor::zeros(&[3, 4], DType::F32, CPU).unwrap();
    let e = x.narrow_ref(1, 2, 3).unwrap_err();
    assert!(
        matches!(
            e,
            Error::IndexOutOfRange {
                op: "narrow",
                size: 4,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().starts_with("narrow:"));
    let e = x.select_ref(0, 3).unwrap_err();
    assert!(
        matches!(
            e,
            Error::IndexOutOfRange {
                op: "select",
                index: 3,
                ..
            }
        ),
        "{e:?}"
    );
    let e = x.slice_ref(1, 0, 4, 0).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { op: "slice", .. }),
        "{e:?}"
    );
    let e = x.transpose_ref(0, 2).unwrap_err();
    assert!(
        matches!(
            e,
            Error::DimOutOfRange {
                op: "transpose",
                dim: 2,
                rank: 2
            }
        ),
        "{e:?}"
    );
    let e = x.view_ref(&[5, -1]).unwrap_err();
    assert!(e.to_string().contains("view"), "{e}");
    let e = x.as_view().expand(&[2, 3]).unwrap_err();
    assert!(e.to_string().contains("expand"), "{e}");
    let e = x.as_view().permute(&[0, 0]).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { op: "permute", .. }),
        "{e:?}"
    );
    let e = x.as_view().unsqueeze(4).unwrap_err();
    assert!(
        matches!(
            e,
            Error::DimOutOfRange {
                op: "unsqueeze",
                ..
            }
        ),
        "{e:?}"
    );
    let e = x.narrow_mut(0, 4, 0).unwrap_err();
    assert!(
        matches!(e, Error::IndexOutOfRange { op: "narrow", .. }),
        "{e:?}"
    );
    let e = x.slice_mut(2, 0, 1, 1).unwrap_err();
    assert!(
        matches!(e, Error::DimOutOfRange { op: "slice", .. }),
        "{e:?}"
    );
    let e = x.select_mut(-3, 0).unwrap_err();
    assert!(
        matches!(e, Error::DimOutOfRange { op: "select", .. }),
        "{e:?}"
    );
    let mut m = x.as_view_mut();
    let e = m.narrow(0, 1, 3).unwrap_err();
    assert!(
        matches!(e, Error::IndexOutOfRange { op: "narrow", .. }),
        "{e:?}"
    );
    let e = m.select(1, -5).unwrap_err();
    assert!(
        matches!(
            e,
            Error::IndexOutOfRange {
                op: "select",
                index: -5,
                ..
            }
        ),
        "{e:?}"
    );
    // a start past the size: an empty view, as Python's m[4:5]
    assert_eq!(m.slice(0, 4, 5, 1).unwrap().shape()[0], 0);
}

/// The seed's "a slice keeps the whole storage alive", with owned views, and
/// both fixes: a borrowed view (which cannot outlive the base) or a copy.
#[test]
fn a_slice_keeps_the_whole_storage_alive_and_the_fix() -> Result<()> {
    let _g = lock();
    let before = allocated();
    let big = round_size(1000 * 1000 * 4);
    let row_block = round_size(1000 * 4);

    // Owned view: the row keeps all 4 MB.
    let x = Tensor::randn(&[1000, 1000], DType::F32, CPU)?;
    let row = x.select(0, 7)?;
    drop(x);
    assert_eq!(allocated() - before, big);
    assert_eq!(row.storage_nbytes(), 1000 * 1000 * 4);
    drop(row);
    assert_eq!(allocated(), before);

    // A borrowed view cannot outlive `x` (see ui-tests/fail/slice_keeps_base.rs);
    // keeping only the row means a copy, after which the 4 MB go.
    let x = Tensor::randn(&[1000, 1000], DType::F32, CPU)?;
    let expect = x.select(0, 7)?.to_vec::<f32>()?;
    let row = x.select_ref(0, 7)?.deep_clone()?;
    drop(x);
    assert_eq!(allocated() - before, row_block);
    assert_eq!(row.to_vec::<f32>()?, expect);
    drop(row);

    // `into_owned` turns a borrowed view back into an owned one, on purpose.
    let x = Tensor::randn(&[1000, 1000], DType::F32, CPU)?;
    let row = x.select_ref(0, 7)?.into_owned();
    drop(x);
    assert_eq!(allocated() - before, big);
    drop(row);
    let mut x = Tensor::zeros(&[1000, 1000], DType::F32, CPU)?;
    let col = x.narrow_mut(1, 3, 1)?.into_owned();
    drop(x);
    assert_eq!(allocated() - before, big);
    drop(col);
    assert_eq!(allocated(), before);
    Ok(())
}

#[test]
fn detach_shares_storage_but_is_a_new_tensor() -> Result<()> {
    let _g = lock();
    let live = leak::live_tensors();
    let bytes = allocated();
    let x = Tensor::arange(0.0, 6.0, 1.0, DType::F32, CPU)?
        .view(&[2, 3])?
        .t()?;
    assert_eq!(leak::live_tensors(), live + 1); // the arange result died with the statement
    let mut d = x.detach();
    assert_eq!(leak::live_tensors(), live + 2); // a tensor of its own ...
    assert!(d.shares_storage(&x)); // ... over the same bytes
    assert_eq!((d.shape(), d.strides()), (x.shape(), x.strides()));
    assert_eq!(allocated() - bytes, round_size(6 * 4));
    let a = x.alias();
    assert_eq!(leak::live_tensors(), live + 2); // an alias is the same tensor
    d.narrow_mut(0, 1, 1)?.fill_(-1.0)?; // writes through the detached tensor
    assert_eq!(x.to_vec::<f32>()?, [0.0, 3.0, -1.0, -1.0, 2.0, 5.0]);
    assert_eq!(a.version(), d.version()); // one storage, one version counter
    drop((x, a));
    assert_eq!(leak::live_tensors(), live + 1);
    assert_eq!(d.to_vec::<f32>()?, [0.0, 3.0, -1.0, -1.0, 2.0, 5.0]);
    drop(d);
    assert_eq!(leak::live_tensors(), live);
    assert_eq!(allocated(), bytes);
    Ok(())
}

#[test]
fn into_contiguous_consumes_its_input() -> Result<()> {
    let _g = lock();
    let live = leak::live_tensors();
    let bytes = allocated();
    for dt in DTYPES {
        // already contiguous: the same tensor back, nothing allocated
        let x = base(dt, &[3, 5])?;
        let (ptr, n) = (x.data_ptr(), allocated());
        let y = x.into_contiguous()?;
        assert_eq!((y.data_ptr(), allocated()), (ptr, n));
        assert_eq!(leak::live_tensors(), live + 1);
        // transposed: a copy; the consumed view is dropped (the base remains)
        let yt = y.t()?;
        let c = yt.into_contiguous()?;
        assert!(c.is_contiguous() && !c.shares_storage(&y));
        assert_eq!(leak::live_tensors(), live + 2);
        assert_eq!(
            c.to_vec::<f64>()?,
            naive_for(dt, &[3, 5]).transpose(0, 1).values(),
            "{dt}"
        );
        // a stepped slice that is the last handle to its storage: the copy
        // replaces it, so only the small block is left
        let s = y.slice(1, 0, 5, 2)?;
        drop(y);
        let c2 = s.into_contiguous()?;
        assert_eq!(
            c2.to_vec::<f64>()?,
            naive_for(dt, &[3, 5]).slice(1, 0, 5, 2).values()
        );
        assert_eq!(
            allocated() - bytes,
            round_size(15 * dt.size_in_bytes()) + round_size(9 * dt.size_in_bytes())
        );
        drop((c, c2));
        assert_eq!(allocated(), bytes);
    }
    assert_eq!(leak::live_tensors(), live);
    Ok(())
}
