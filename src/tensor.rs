//! The tensor handle.

use crate::device::Device;
use crate::dtype::{DType, Element};
use crate::error::{bail, Error, Result};
use crate::layout::Layout;
use crate::storage::Storage;
use std::mem::ManuallyDrop;
use std::sync::Arc;

/// An owned handle to a tensor: a [`Layout`] over a refcounted storage.
///
/// * `Tensor` is not `Copy` and not `Clone`: a second handle is made only on
///   purpose, with [`alias`](Tensor::alias) (same tensor), a view (same storage,
///   new layout) or [`deep_clone`](Tensor::deep_clone) (independent copy).
/// * Every operation returns a fresh handle. Dropping the last handle to a
///   storage returns its bytes to the device's caching allocator at once.
/// * The handle is one pointer wide.
/// * The operators `+ - * /` and unary `-` work on `&Tensor`, `Tensor` and
///   `f64` operands and return `Result<Tensor>`, so they need `?`:
///   `let c = (&a + &b)?;`. Bad input (shapes that do not broadcast, bool
///   arithmetic, ...) is an `Err` naming the op, never a panic. There is no
///   `+=`: writing in place is explicit (`a.add_(&b)?`).
/// * It is `Send` (data-loading threads hand tensors over) and `Sync`: shared
///   `&Tensor`s can be read from many threads, e.g. model weights in a server.
///   Every storage has a reader-writer lock, so an in-place write through one
///   alias never races with a read through another.
///
/// ```
/// use tensorscope::{Tensor, DType, Device};
/// let a = Tensor::arange(0.0, 6.0, 1.0, DType::F32, Device::Cpu)?;
/// let v = a.view(&[2, 3])?;          // a view: same storage
/// assert!(a.shares_storage(&v));
/// let c = v.deep_clone()?;            // a copy: its own storage
/// assert!(!a.shares_storage(&c));
/// # Ok::<(), tensorscope::Error>(())
/// ```
pub struct Tensor {
    /// Taken by `Tensor`'s `Drop`, which recycles the allocation of an
    /// implementation no one else holds (see [`impl_pool`]).
    pub(crate) inner: ManuallyDrop<Arc<TensorImpl>>,
}

impl Drop for Tensor {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: taken once, here; `self.inner` is not used again.
        impl_pool::release(unsafe { ManuallyDrop::take(&mut self.inner) });
    }
}

/// Recycled `Arc<TensorImpl>` allocations, per thread.
///
/// Most tensors are op results that live for one statement and have one
/// handle. When such a handle is dropped, its implementation is dropped in
/// place and the `Arc`'s allocation (counts included, still strong 1 / no
/// weak) is kept for the next tensor made on this thread: no `free` and no
/// atomic decrements now, no `malloc` later. A shared implementation (an
/// alias, an autograd edge, a weak reference) is released as any `Arc`.
mod impl_pool {
    use super::TensorImpl;
    use std::cell::RefCell;
    use std::mem::MaybeUninit;
    use std::sync::atomic::{fence, Ordering};
    use std::sync::Arc;

    /// Spare allocations kept per thread at most.
    const MAX: usize = 32;

    thread_local! {
        /// Unique `Arc`s whose value has been dropped.
        static SPARE: RefCell<Vec<Arc<MaybeUninit<TensorImpl>>>> = const { RefCell::new(Vec::new()) };
    }

    /// Drops the caller's handle to `arc`; its allocation is kept when it
    /// was the only one.
    #[inline]
    pub(super) fn release(arc: Arc<TensorImpl>) {
        // Unique: no other `Arc` and no `Weak`, and none can appear (making
        // one takes a handle, and this is the last). The fence orders the
        // uses through handles released before (their release decrements)
        // before the drop below, as `Arc`'s own drop does.
        if Arc::strong_count(&arc) != 1 || Arc::weak_count(&arc) != 0 {
            drop(arc);
            return;
        }
        fence(Ordering::Acquire);
        let raw = Arc::into_raw(arc).cast_mut();
        // SAFETY: this is the only reference to the value, which is dropped
        // once and never read again (as in `Arc::get_mut` + `drop_in_place`).
        unsafe { std::ptr::drop_in_place(raw) };
        // SAFETY: `raw` comes from `Arc::into_raw`, and `MaybeUninit<T>` has
        // the size and alignment of `T` (`Arc::from_raw`'s requirement).
        let spare = unsafe { Arc::from_raw(raw.cast_const().cast::<MaybeUninit<TensorImpl>>()) };
        // When full, or during thread exit, `spare` is dropped: freed (a
        // `MaybeUninit` drops nothing).
        let _ = SPARE.try_with(move |s| {
            if let Ok(mut v) = s.try_borrow_mut()
                && v.len() < MAX
            {
                v.push(spare);
            }
        });
    }

    /// `Arc::new(value)`, in a spare allocation when there is one.
    #[inline]
    pub(super) fn new(value: TensorImpl) -> Arc<TensorImpl> {
        let spare = SPARE
            .try_with(|s| s.try_borrow_mut().ok().and_then(|mut v| v.pop()))
            .ok()
            .flatten();
        match spare {
            Some(u) => {
                let raw = Arc::into_raw(u).cast_mut();
                // SAFETY: a spare `Arc` is unique (checked when it was
                // released; it has been in this thread's list since) and
                // holds no value: writing one is the only access.
                unsafe {
                    raw.write(MaybeUninit::new(value));
                    Arc::from_raw(raw.cast_const().cast::<TensorImpl>())
                }
            }
            None => Arc::new(value),
        }
    }
}

pub(crate) struct TensorImpl {
    pub(crate) storage: Storage,
    pub(crate) layout: Layout,
    pub(crate) dtype: DType,
    /// `None` for tensors that do not require grad (the fast path).
    pub(crate) autograd: Option<Box<crate::autograd::AutogradMeta>>,
    /// Made in inference mode: may never be saved for backward.
    pub(crate) inference: bool,
}

impl Drop for TensorImpl {
    fn drop(&mut self) {
        crate::leak::tensor_dropped(self.storage.device());
    }
}

impl Tensor {
    /// Wraps a storage and a layout. The layout must fit the storage.
    pub(crate) fn from_parts(storage: Storage, layout: Layout, dtype: DType) -> Tensor {
        debug_assert!(
            layout.storage_span().saturating_mul(dtype.size_in_bytes())
                <= storage
                    .nbytes()
                    .max(layout.offset().saturating_mul(dtype.size_in_bytes()))
        );
        crate::leak::tensor_created(storage.device());
        let inference = crate::autograd::is_inference_mode();
        Tensor {
            inner: ManuallyDrop::new(impl_pool::new(TensorImpl {
                storage,
                layout,
                dtype,
                autograd: None,
                inference,
            })),
        }
    }

    /// A new tensor implementation over the same storage and layout, with no
    /// autograd state (the body of `detach`).
    pub(crate) fn detach_impl(&self) -> Tensor {
        let mut t = Tensor::from_parts(
            self.inner.storage.clone(),
            self.inner.layout.clone(),
            self.inner.dtype,
        );
        if let Some(i) = Arc::get_mut(&mut t.inner) {
            i.inference = self.inner.inference;
        }
        t
    }

    /// This tensor with autograd state (a fresh implementation if this one is shared).
    pub(crate) fn with_autograd(mut self, meta: crate::autograd::AutogradMeta) -> Tensor {
        match Arc::get_mut(&mut self.inner) {
            Some(i) => {
                i.autograd = Some(Box::new(meta));
                self
            }
            None => {
                let mut t = self.detach_impl();
                Arc::get_mut(&mut t.inner).expect("fresh").autograd = Some(Box::new(meta));
                t
            }
        }
    }

    /// A new tensor over the same storage with another layout (a view).
    pub(crate) fn with_layout(&self, layout: Layout) -> Tensor {
        Tensor::from_parts(self.inner.storage.clone(), layout, self.inner.dtype)
    }

    /// Allocates an uninitialised contiguous tensor.
    pub(crate) fn alloc(shape: &[usize], dtype: DType, device: Device) -> Result<Tensor> {
        let bytes = crate::layout::checked_numel("alloc", shape)?
            .checked_mul(dtype.size_in_bytes())
            .ok_or_else(|| {
                Error::arg(
                    "alloc",
                    format!("shape {shape:?} of {dtype} overflows the address space"),
                )
            })?;
        // An empty tensor holds no block, but the device must still exist:
        // an empty CUDA tensor without a CUDA backend is an error.
        let storage = Storage::new_in(crate::backend::allocator(device)?, bytes)?;
        Ok(Tensor::from_parts(
            storage,
            Layout::contiguous(shape),
            dtype,
        ))
    }

    /// `true` when this handle is provably the only way to reach its
    /// storage: no other handle to this tensor (no alias, no autograd edge,
    /// no weak reference) and no other tensor over its storage (no view, no
    /// tensor saved for backward). The one test of uniqueness: a kernel
    /// writing without the storage's lock, a layer donating its input, a
    /// scope indexing its storages.
    ///
    /// The answer holds while the caller keeps this handle by value or by
    /// `&mut`: then no other borrow of it exists, so nothing else, on any
    /// thread, can make a second handle or reach the storage until that
    /// borrow ends. A fresh op result is always exclusive.
    #[inline]
    pub(crate) fn is_exclusive(&self) -> bool {
        // Counts can only grow through a handle, and every handle is counted.
        // The acquire fence orders the uses through handles dropped before
        // these loads (their release decrements) before our writes.
        let unique = Arc::strong_count(&self.inner) == 1
            && Arc::weak_count(&self.inner) == 0
            && self.inner.storage.ref_count() == 1;
        if unique {
            std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
        }
        unique
    }

    pub(crate) fn storage(&self) -> &Storage {
        &self.inner.storage
    }

    /// A new handle to this same tensor: same storage, same layout, and (once
    /// autograd exists) the same autograd identity. Nothing is copied. This is
    /// TorchSharp's `alias()`: use it to return a fresh handle from a function
    /// that would otherwise return its input.
    pub fn alias(&self) -> Tensor {
        Tensor {
            inner: ManuallyDrop::new(Arc::clone(&self.inner)),
        }
    }

    /// The shape.
    pub fn shape(&self) -> &[usize] {
        self.inner.layout.shape()
    }
    /// The shape (PyTorch's name).
    pub fn dims(&self) -> &[usize] {
        self.shape()
    }
    /// The size of one dimension (negative counts from the end).
    pub fn size(&self, dim: isize) -> Result<usize> {
        let d = crate::layout::normalize_dim("size", dim, self.rank())?;
        Ok(self.shape()[d])
    }
    /// The strides, in elements.
    pub fn strides(&self) -> &[usize] {
        self.inner.layout.strides()
    }
    /// Offset of the first element in the storage, in elements.
    pub fn storage_offset(&self) -> usize {
        self.inner.layout.offset()
    }
    /// The layout (shape, strides, offset).
    pub fn layout(&self) -> &Layout {
        &self.inner.layout
    }
    /// Number of dimensions.
    pub fn rank(&self) -> usize {
        self.inner.layout.rank()
    }
    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.inner.layout.numel()
    }
    /// The element type.
    pub fn dtype(&self) -> DType {
        self.inner.dtype
    }
    /// The device.
    pub fn device(&self) -> Device {
        self.inner.storage.device()
    }
    /// `true` if the elements are row-major with no gaps.
    pub fn is_contiguous(&self) -> bool {
        self.inner.layout.is_contiguous()
    }
    /// Address of the first element (host address, or device pointer on CUDA).
    pub fn data_ptr(&self) -> usize {
        self.inner.storage.addr() + self.storage_offset() * self.dtype().size_in_bytes()
    }
    /// Address of the first byte of the underlying storage.
    pub fn storage_ptr(&self) -> usize {
        self.inner.storage.addr()
    }
    /// Bytes of the underlying storage (what keeping this tensor alive costs).
    pub fn storage_nbytes(&self) -> usize {
        self.inner.storage.nbytes()
    }
    /// Bytes of this tensor's elements (`numel * element size`).
    pub fn nbytes(&self) -> usize {
        // An expanded view can have more bytes than fit in usize: saturate.
        self.numel().saturating_mul(self.dtype().size_in_bytes())
    }
    /// `true` if both tensors view the same storage (PyTorch's
    /// `a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()`).
    pub fn shares_storage(&self, other: &Tensor) -> bool {
        self.inner.storage.same(&other.inner.storage)
    }
    /// How many tensors (handles' implementations, views included) keep this
    /// storage alive.
    pub fn storage_use_count(&self) -> usize {
        self.inner.storage.ref_count()
    }
    /// The storage's version counter: bumped by every in-place write, shared
    /// by every view.
    pub fn version(&self) -> u64 {
        self.inner.storage.version()
    }

    /// Checks that `self` and `other` are on one device.
    pub(crate) fn same_device(&self, op: &'static str, other: &Tensor) -> Result<()> {
        if self.device() != other.device() {
            bail!(Error::DeviceMismatch {
                op,
                lhs: self.device(),
                rhs: other.device()
            });
        }
        Ok(())
    }

    /// The elements in row-major order, converted to `T` with `as` semantics.
    /// On CUDA this copies to the host.
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        let src = if self.device().is_cpu() {
            self.alias()
        } else {
            self.to_device(Device::Cpu)?
        };
        let c = src.to_dtype(T::DTYPE)?.contiguous()?;
        let _l = crate::storage::lock(&[c.storage()], &[]);
        // SAFETY: `c` is contiguous, of dtype T, on the CPU, and its storage
        // holds offset + numel elements when numel > 0 (an empty view's
        // offset may lie past the end; `slice` reads nothing then); we hold
        // a read lock.
        let s =
            unsafe { crate::backend::cpu::slice::<T>(c.storage(), c.storage_offset(), c.numel()) };
        Ok(s.to_vec())
    }

    /// The single element of a one-element tensor (any shape), converted to `T`.
    /// An error for any other number of elements.
    pub fn item<T: Element>(&self) -> Result<T> {
        if self.numel() != 1 {
            bail!(Error::NotAScalar {
                op: "item",
                shape: self.shape().to_vec(),
                numel: self.numel()
            });
        }
        Ok(self.to_vec::<T>()?[0])
    }
}

impl std::fmt::Debug for Tensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Tensor[shape={:?}, strides={:?}, offset={}, dtype={}, device={}]",
            self.shape(),
            self.strides(),
            self.storage_offset(),
            self.dtype(),
            self.device()
        )
    }
}
