//! Borrowed views, and the handle operations whose point is ownership:
//! [`detach`](Tensor::detach) and [`into_contiguous`](Tensor::into_contiguous).
//!
//! tensorscope has two kinds of views (ndarray's `Array` / `ArrayView<'a>`
//! split, over PyTorch's storage model):
//!
//! * **Owned views** (`x.narrow(..)`, `x.t()`, `x.view(..)`, ...) return a
//!   [`Tensor`]. They share the storage by reference count and live as long
//!   as you like: a row of a 400 MB matrix keeps all 400 MB alive after the
//!   matrix's own handle is gone.
//! * **Borrowed views** ([`as_view`](Tensor::as_view),
//!   [`narrow_ref`](Tensor::narrow_ref), ...) return a [`TensorView<'a>`]
//!   that borrows the base handle. The compiler then guarantees that the view
//!   does not outlive the base (so it cannot be what keeps a big storage
//!   alive), and that the base is not written in place through `&mut` while
//!   the view is alive. [`TensorViewMut<'a>`] borrows the base mutably: writes
//!   go through the view and the base cannot be read meanwhile.
//!
//! A borrowed view costs what an owned view costs (one small handle
//! allocation, no data copied); what it adds is checked at compile time and
//! is free at run time. It dereferences to [`Tensor`], so every op accepts it.
//!
//! The guarantee is about *handles*: other owned views of the same storage
//! made earlier can still write to it (tensorscope's per-storage locks keep
//! that free of data races), and `into_owned` / `alias` on a view make an
//! owned handle on purpose.

use crate::error::Result;
use crate::tensor::Tensor;
use std::fmt;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};

/// A view that borrows its base tensor for `'a` (ndarray's `ArrayView<'a>`).
///
/// Made by [`Tensor::as_view`] and the `*_ref` methods; its own view methods
/// ([`narrow`](TensorView::narrow), [`t`](TensorView::t), ...) return views of
/// the same base with the same `'a`. It dereferences to [`Tensor`].
///
/// ```
/// use tensorscope::{DType, Device, Tensor};
/// let mut x = Tensor::arange(0.0, 6.0, 1.0, DType::F32, Device::Cpu)?.view(&[2, 3])?;
/// let row = x.select_ref(0, 1)?;             // borrows `x`
/// assert_eq!(row.to_vec::<f32>()?, [3.0, 4.0, 5.0]);
/// let total = row.add(&row)?;                // any op takes a view
/// drop(row);                                 // the borrow ends here ...
/// x.add_scalar_(1.0)?;                       // ... so `x` can be written again
/// assert_eq!(total.to_vec::<f32>()?, [6.0, 8.0, 10.0]);
/// # Ok::<(), tensorscope::Error>(())
/// ```
///
/// One pointer wide; `Send` and `Sync`; neither `Copy` nor `Clone`.
pub struct TensorView<'a> {
    t: Tensor,
    _base: PhantomData<&'a Tensor>,
}

/// A view that borrows its base tensor mutably for `'a` (ndarray's
/// `ArrayViewMut<'a>`): in-place ops through the view write the base's
/// elements, and the base can be used again once the view is gone.
///
/// ```
/// use tensorscope::{DType, Device, Tensor};
/// let mut x = Tensor::zeros(&[2, 3], DType::F32, Device::Cpu)?;
/// x.narrow_mut(1, 1, 2)?.fill_(7.0)?;        // writes columns 1..3 of `x`
/// assert_eq!(x.to_vec::<f32>()?, [0.0, 7.0, 7.0, 0.0, 7.0, 7.0]);
/// # Ok::<(), tensorscope::Error>(())
/// ```
///
/// One pointer wide; `Send` and `Sync`; neither `Copy` nor `Clone`.
pub struct TensorViewMut<'a> {
    t: Tensor,
    _base: PhantomData<&'a mut Tensor>,
}

impl<'a> TensorView<'a> {
    fn wrap(t: Tensor) -> Self {
        TensorView {
            t,
            _base: PhantomData,
        }
    }

    /// The view as an owned [`Tensor`]: it no longer borrows the base, and it
    /// keeps the whole storage alive for as long as it lives (the "a slice
    /// keeps the whole storage alive" case, now on purpose). To keep only the
    /// viewed elements, use [`deep_clone`](Tensor::deep_clone) instead.
    pub fn into_owned(self) -> Tensor {
        self.t
    }

    /// [`Tensor::view`] as a borrowed view of the same base.
    pub fn view(&self, shape: &[isize]) -> Result<TensorView<'a>> {
        Ok(TensorView::wrap(self.t.view(shape)?))
    }
    /// [`Tensor::narrow`] as a borrowed view of the same base.
    pub fn narrow(&self, dim: isize, start: usize, len: usize) -> Result<TensorView<'a>> {
        Ok(TensorView::wrap(self.t.narrow(dim, start, len)?))
    }
    /// [`Tensor::slice`] as a borrowed view of the same base.
    pub fn slice(
        &self,
        dim: isize,
        start: usize,
        end: usize,
        step: usize,
    ) -> Result<TensorView<'a>> {
        Ok(TensorView::wrap(self.t.slice(dim, start, end, step)?))
    }
    /// [`Tensor::select`] as a borrowed view of the same base.
    pub fn select(&self, dim: isize, index: isize) -> Result<TensorView<'a>> {
        Ok(TensorView::wrap(self.t.select(dim, index)?))
    }
    /// [`Tensor::transpose`] as a borrowed view of the same base.
    pub fn transpose(&self, d0: isize, d1: isize) -> Result<TensorView<'a>> {
        Ok(TensorView::wrap(self.t.transpose(d0, d1)?))
    }
    /// [`Tensor::t`] as a borrowed view of the same base.
    pub fn t(&self) -> Result<TensorView<'a>> {
        Ok(TensorView::wrap(self.t.t()?))
    }
    /// [`Tensor::permute`] as a borrowed view of the same base.
    pub fn permute(&self, dims: &[isize]) -> Result<TensorView<'a>> {
        Ok(TensorView::wrap(self.t.permute(dims)?))
    }
    /// [`Tensor::expand`] as a borrowed view of the same base.
    pub fn expand(&self, shape: &[isize]) -> Result<TensorView<'a>> {
        Ok(TensorView::wrap(self.t.expand(shape)?))
    }
    /// [`Tensor::unsqueeze`] as a borrowed view of the same base.
    pub fn unsqueeze(&self, dim: isize) -> Result<TensorView<'a>> {
        Ok(TensorView::wrap(self.t.unsqueeze(dim)?))
    }
}

impl<'a> TensorViewMut<'a> {
    fn wrap(t: Tensor) -> Self {
        TensorViewMut {
            t,
            _base: PhantomData,
        }
    }

    /// The view as an owned [`Tensor`] (see [`TensorView::into_owned`]).
    pub fn into_owned(self) -> Tensor {
        self.t
    }

    /// A mutable sub-view, [`Tensor::narrow`]; borrows this view.
    pub fn narrow(&mut self, dim: isize, start: usize, len: usize) -> Result<TensorViewMut<'_>> {
        Ok(TensorViewMut::wrap(self.t.narrow(dim, start, len)?))
    }
    /// A mutable sub-view, [`Tensor::slice`]; borrows this view.
    pub fn slice(
        &mut self,
        dim: isize,
        start: usize,
        end: usize,
        step: usize,
    ) -> Result<TensorViewMut<'_>> {
        Ok(TensorViewMut::wrap(self.t.slice(dim, start, end, step)?))
    }
    /// A mutable sub-view, [`Tensor::select`]; borrows this view.
    pub fn select(&mut self, dim: isize, index: isize) -> Result<TensorViewMut<'_>> {
        Ok(TensorViewMut::wrap(self.t.select(dim, index)?))
    }
}

impl Tensor {
    /// A borrowed view of the whole tensor (same layout).
    pub fn as_view(&self) -> TensorView<'_> {
        TensorView::wrap(self.fresh_handle())
    }
    /// A borrowed [`view`](Tensor::view).
    pub fn view_ref(&self, shape: &[isize]) -> Result<TensorView<'_>> {
        Ok(TensorView::wrap(self.view(shape)?))
    }
    /// A borrowed [`narrow`](Tensor::narrow).
    pub fn narrow_ref(&self, dim: isize, start: usize, len: usize) -> Result<TensorView<'_>> {
        Ok(TensorView::wrap(self.narrow(dim, start, len)?))
    }
    /// A borrowed [`slice`](Tensor::slice).
    pub fn slice_ref(
        &self,
        dim: isize,
        start: usize,
        end: usize,
        step: usize,
    ) -> Result<TensorView<'_>> {
        Ok(TensorView::wrap(self.slice(dim, start, end, step)?))
    }
    /// A borrowed [`select`](Tensor::select).
    pub fn select_ref(&self, dim: isize, index: isize) -> Result<TensorView<'_>> {
        Ok(TensorView::wrap(self.select(dim, index)?))
    }
    /// A borrowed [`transpose`](Tensor::transpose).
    pub fn transpose_ref(&self, d0: isize, d1: isize) -> Result<TensorView<'_>> {
        Ok(TensorView::wrap(self.transpose(d0, d1)?))
    }

    /// A mutable borrowed view of the whole tensor.
    pub fn as_view_mut(&mut self) -> TensorViewMut<'_> {
        TensorViewMut::wrap(self.fresh_handle())
    }
    /// A mutable borrowed [`narrow`](Tensor::narrow).
    pub fn narrow_mut(
        &mut self,
        dim: isize,
        start: usize,
        len: usize,
    ) -> Result<TensorViewMut<'_>> {
        Ok(TensorViewMut::wrap(self.narrow(dim, start, len)?))
    }
    /// A mutable borrowed [`slice`](Tensor::slice).
    pub fn slice_mut(
        &mut self,
        dim: isize,
        start: usize,
        end: usize,
        step: usize,
    ) -> Result<TensorViewMut<'_>> {
        Ok(TensorViewMut::wrap(self.slice(dim, start, end, step)?))
    }
    /// A mutable borrowed [`select`](Tensor::select).
    pub fn select_mut(&mut self, dim: isize, index: isize) -> Result<TensorViewMut<'_>> {
        Ok(TensorViewMut::wrap(self.select(dim, index)?))
    }

    /// A new tensor over the same storage and layout, with its own handle
    /// implementation (so it is not an [`alias`](Tensor::alias)).
    fn fresh_handle(&self) -> Tensor {
        self.with_layout(self.layout().clone())
    }

    /// PyTorch's `detach()`: a new tensor that shares this one's storage (and
    /// layout) but not its autograd identity. Writes through either are seen
    /// by both; for an independent snapshot use `x.detach().deep_clone()`.
    ///
    /// tensorscope has no autograd yet, so today "drops autograd" holds
    /// trivially and the difference from [`alias`](Tensor::alias) is identity:
    /// `alias` is the same tensor (one implementation, counted once by
    /// [`leak::live_tensors`](crate::leak::live_tensors)), `detach` is a new
    /// one. The autograd issue adds `requires_grad` and `grad_fn` to a tensor;
    /// `alias` will share them and `detach` will drop them.
    ///
    /// ```
    /// use tensorscope::{leak, DType, Device, Tensor};
    /// let x = Tensor::zeros(&[3], DType::F32, Device::Cpu)?;
    /// let n = leak::live_tensors();
    /// let d = x.detach();
    /// assert!(d.shares_storage(&x));
    /// assert_eq!(leak::live_tensors(), n + 1);   // a tensor of its own
    /// let a = x.alias();
    /// assert_eq!(leak::live_tensors(), n + 1);   // the same tensor again
    /// # drop((d, a));
    /// # Ok::<(), tensorscope::Error>(())
    /// ```
    pub fn detach(&self) -> Tensor {
        self.detach_impl()
    }

    /// In-place [`detach`](Tensor::detach) (PyTorch's `detach_`): this
    /// handle stops tracking gradients and lets go of its graph at once
    /// (the nodes and saved tensors only it kept alive are freed now). The
    /// storage and values are unchanged.
    ///
    /// Unlike PyTorch, where every Python reference is the one tensor, a
    /// second handle made by [`alias`](Tensor::alias) keeps its own view of
    /// the graph: a handle is owned, and this one changes only itself.
    ///
    /// ```
    /// use tensorscope::{DType, Device, Tensor};
    /// let w = Tensor::ones(&[3], DType::F32, Device::Cpu)?.requires_grad_(true)?;
    /// let mut y = w.mul_scalar(2.0)?;
    /// assert!(y.requires_grad());
    /// y.detach_();
    /// assert!(!y.requires_grad() && y.grad_fn_name().is_none());
    /// assert_eq!(y.to_vec::<f32>()?, vec![2.0; 3]);
    /// # Ok::<(), tensorscope::Error>(())
    /// ```
    pub fn detach_(&mut self) -> &mut Tensor {
        *self = self.detach_impl();
        self
    }

    /// Consumes the handle and returns a contiguous tensor: the same handle if
    /// it is already contiguous (nothing copied, nothing allocated), otherwise
    /// a contiguous copy, after which the input handle is dropped (freeing its
    /// storage if it was the last one). `x` cannot be used afterwards.
    ///
    /// ```
    /// use tensorscope::{DType, Device, Tensor};
    /// let x = Tensor::arange(0.0, 6.0, 1.0, DType::F32, Device::Cpu)?.view(&[2, 3])?;
    /// let y = x.t()?.into_contiguous()?;         // the transposed handle is consumed
    /// assert!(y.is_contiguous() && !y.shares_storage(&x));
    /// assert_eq!(y.to_vec::<f32>()?, [0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
    /// # Ok::<(), tensorscope::Error>(())
    /// ```
    pub fn into_contiguous(self) -> Result<Tensor> {
        if self.is_contiguous() {
            Ok(self)
        } else {
            self.deep_clone()
        }
    }
}

impl Deref for TensorView<'_> {
    type Target = Tensor;
    fn deref(&self) -> &Tensor {
        &self.t
    }
}

impl AsRef<Tensor> for TensorView<'_> {
    fn as_ref(&self) -> &Tensor {
        &self.t
    }
}

impl Deref for TensorViewMut<'_> {
    type Target = Tensor;
    fn deref(&self) -> &Tensor {
        &self.t
    }
}

impl DerefMut for TensorViewMut<'_> {
    fn deref_mut(&mut self) -> &mut Tensor {
        &mut self.t
    }
}

impl AsRef<Tensor> for TensorViewMut<'_> {
    fn as_ref(&self) -> &Tensor {
        &self.t
    }
}

impl fmt::Debug for TensorView<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TensorView({:?})", self.t)
    }
}

impl fmt::Debug for TensorViewMut<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TensorViewMut({:?})", self.t)
    }
}
