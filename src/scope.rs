//! Scope blocks: many tensors, one lifetime, checked by the compiler.
//!
//! A [`Tensor`] already frees its bytes when its last handle goes; a scope is
//! for the cases where you want a *group* of tensors to share one lifetime
//! (TorchSharp's `DisposeScope`), to see what a block of code held, and to
//! move the few results you want out of it:
//!
//! ```
//! use tensorscope::{scope, DType, Device, Tensor};
//! let x = Tensor::arange(-2.0, 2.0, 1.0, DType::F32, Device::Cpu)?;
//! let y: Tensor = scope(|s| -> tensorscope::Result<Tensor> {
//!     let a = s.keep(x.relu()?);            // bound to the scope
//!     let b = s.ones(&[4], DType::F32, Device::Cpu)?;
//!     let c = s.keep(a.add(&b)?);
//!     Ok(s.move_out(c))                     // the one result leaves as an owned Tensor
//! })?;                                      // `a`, `b` are freed here
//! assert_eq!(y.to_vec::<f32>()?, [1.0, 1.0, 1.0, 2.0]);
//! # Ok::<(), tensorscope::Error>(())
//! ```
//!
//! # How it is built, and why that is sound
//!
//! * [`scope`] makes a [`Scope`] on its own stack frame and lends it to the
//!   closure as `&'s Scope<'s>`, for a lifetime `'s` chosen *inside* the call
//!   (`for<'s>`, as `std::thread::scope`). Nothing the closure returns can
//!   mention `'s`, so no [`Scoped`] handle can leave the closure.
//! * `'s` is **invariant** (`PhantomData<fn(&'s ()) -> &'s ()>`): it can be
//!   neither shortened nor lengthened, so a handle of one scope is never
//!   accepted where another scope's is expected (e.g. `inner.move_out(x)` for
//!   an `x` of the outer scope does not compile). With a covariant brand it
//!   would: both lifetimes would shrink to the call.
//! * The tensors live in a [`typed_arena::Arena`] owned by the `Scope`, that
//!   is, by `scope()`'s frame; a [`Scoped`] is only a borrow of one arena slot.
//!   The arena is dropped when `scope()` returns, returns an `Err` the closure
//!   produced, or unwinds from a panic. Freeing never depends on a value the
//!   user holds: `mem::forget` of a `Scoped` forgets a borrow, and the tensor
//!   is freed with the arena all the same. (The user never owns the `Scope`
//!   itself, so it cannot be forgotten.) The frame's own drop *is* the guard
//!   here, so no `scopeguard` is needed.
//! * A [`Scoped`] is not `Send` (nor `Sync`): a scope and its handles belong to
//!   the thread that opened it. Reads from other threads go through `&Tensor`
//!   (`let r: &Tensor = &x;`), which is `Send` because `Tensor` is `Sync`; to
//!   hand a tensor over, [`move_out`](Scope::move_out) and send the `Tensor`.
//!
//! # What a scope does not do
//!
//! Ops called inside a scope return ordinary owned [`Tensor`]s; only what you
//! [`keep`](Scope::keep) (or make with the scope's constructors) belongs to the
//! scope. Temporaries in an expression are freed at the end of the statement
//! anyway. An owned view or [`alias`](Tensor::alias) taken from a scoped
//! tensor is a new owner of the storage and may leave the closure: that is an
//! explicit copy of the handle, like `move_out`, and it keeps the storage alive.

use crate::device::Device;
use crate::dtype::{DType, Element};
use crate::error::Result;
use crate::tensor::Tensor;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::Ordering;
use typed_arena::Arena;

/// The scope's brand: invariant in `'s`, `Send`, `Sync`, no drop glue.
type Brand<'s> = PhantomData<fn(&'s ()) -> &'s ()>;

/// One arena slot. `key`/`bytes` are the storage the tensor had when the scope
/// got it, so the accounting stays consistent whatever is done through
/// `DerefMut` later. `pending` is the slot's index in [`Index::pending`] plus
/// one, or 0 if the slot was counted in the map from the start.
struct Slot {
    tensor: Option<Tensor>,
    key: usize,
    bytes: usize,
    pending: usize,
}

/// What a scope did, counted in tensors (and bytes of distinct storages).
///
/// At any time `created + adopted == moved_out + freed_early + freed_at_exit + live`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScopeStats {
    /// Tensors made through the scope's constructors ([`Scope::zeros`], ...).
    pub created: usize,
    /// Tensors handed to the scope: [`Scope::keep`], and [`Scope::move_to`] from another scope.
    pub adopted: usize,
    /// Tensors that left: [`Scope::move_out`] and [`Scope::move_to`] another scope.
    pub moved_out: usize,
    /// Tensors freed before the end with [`Scope::free`].
    pub freed_early: usize,
    /// Tensors the scope still held when it ended (0 while it is open).
    pub freed_at_exit: usize,
    /// Tensors the scope holds now (0 once it has ended).
    pub live: usize,
    /// Allocator bytes (rounded blocks) of the distinct storages the scope's
    /// tensors use now: two views of one storage count it once.
    pub live_bytes: usize,
    /// The highest `live_bytes` reached.
    pub peak_bytes: usize,
}

/// A multiplicative hasher for storage ids (addresses): cheap and good enough.
#[derive(Default)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
    }
    fn write_usize(&mut self, v: usize) {
        self.0 = (v as u64)
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
            .rotate_left(29);
    }
}

type StorageMap = HashMap<usize, usize, BuildHasherDefault<IdHasher>>;

/// Which storages the scope's slots use, to count each storage's bytes once.
///
/// Most tensors handed to a scope are the only handle to a fresh storage
/// ("exclusive": nothing else, so no other slot, can hold it). Those only
/// append their key to `pending` (a sequential write). The map from storage
/// to the number of slots holding it is brought up to date from `pending`
/// only when a tensor that shares its storage arrives, since only then can
/// two slots hold one storage. A scope that never sees a shared storage never
/// builds the map (see `benches/scope.rs` for what that saves).
#[derive(Default)]
struct Index {
    /// storage id -> slots holding it, for slots `< flushed` in `pending` and
    /// every slot that arrived sharing its storage
    map: StorageMap,
    /// keys of exclusive slots in arrival order; 0 once the slot is emptied
    pending: Vec<usize>,
    /// `pending[..flushed]` are counted in `map`
    flushed: usize,
}

impl Index {
    fn flush(&mut self) {
        for &key in &self.pending[self.flushed..] {
            if key != 0 {
                *self.map.entry(key).or_insert(0) += 1;
            }
        }
        self.flushed = self.pending.len();
    }
}

/// A scope's state. It has no lifetime parameter, so its `Drop` does not make
/// the borrow checker think the brand is used at the drop.
struct ScopeInner {
    arena: Arena<Slot>,
    stats: Cell<ScopeStats>,
    storages: RefCell<Index>,
}

impl Drop for ScopeInner {
    fn drop(&mut self) {
        // Runs on every exit (return, `Err`, panic); the arena drops right after.
        crate::leak::SCOPED.fetch_sub(self.stats.get().live, Ordering::Relaxed);
    }
}

/// A scope opened by [`scope`]: the owner of the tensors made through it or
/// handed to it, all freed together when the block ends.
///
/// You only ever see it as `&'s Scope<'s>`. See the [module docs](mod@crate::scope)
/// for the guarantees.
pub struct Scope<'s> {
    inner: ScopeInner,
    _brand: Brand<'s>,
}

/// A tensor that belongs to a scope: a borrow of one slot of the scope's
/// arena. It dereferences to [`Tensor`] (`&x` works wherever `&Tensor` does,
/// and in-place ops work on a `let mut` handle) and lives until the scope ends,
/// [`move_out`](Scope::move_out), [`move_to`](Scope::move_to) or
/// [`free`](Scope::free). Dropping the handle itself does nothing.
///
/// One pointer wide; neither `Copy`, `Clone`, `Send` nor `Sync`.
///
/// The scope's byte statistics follow the tensor it was handed: replacing the
/// tensor behind a handle (`std::mem::swap(&mut *x, &mut other)`) is safe, and
/// the scope frees whatever the slot holds at its end, but the statistics
/// still count the storage that was handed in.
pub struct Scoped<'s> {
    slot: &'s mut Slot,
    _brand: Brand<'s>,
    /// Not `Send`, not `Sync`, zero-sized; a primitive type, so compiler
    /// messages about it name no library type.
    _not_send: [*const (); 0],
}

/// Runs `f` with a fresh scope and frees every tensor the scope still holds
/// when `f` ends: by returning, by returning an `Err` (a `?`), or by
/// panicking.
///
/// ```
/// use tensorscope::{memory, scope, DType, Device};
/// let before = memory::memory_allocated(Device::Cpu);
/// let r: tensorscope::Result<()> = scope(|s| {
///     let a = s.zeros(&[1000], DType::F32, Device::Cpu)?;
///     let b = s.zeros(&[7], DType::F32, Device::Cpu)?;
///     a.add(&b)?;                     // shape mismatch: the `?` leaves the scope
///     Ok(())
/// });
/// assert!(r.is_err());
/// assert_eq!(memory::memory_allocated(Device::Cpu), before);
/// ```
pub fn scope<R>(f: impl for<'s> FnOnce(&'s Scope<'s>) -> R) -> R {
    let s = Scope::new();
    f(&s)
}

/// [`scope`], also returning the scope's [`ScopeStats`] at its end.
///
/// ```
/// use tensorscope::{scope_with_stats, DType, Device};
/// let (kept, stats) = scope_with_stats(|s| -> tensorscope::Result<_> {
///     let a = s.zeros(&[256], DType::F32, Device::Cpu)?;
///     let _v = s.keep(a.narrow(0, 0, 8)?);     // a view: same storage
///     let b = s.ones(&[256], DType::F32, Device::Cpu)?;
///     Ok(s.move_out(b))
/// });
/// let kept = kept?;
/// assert_eq!((stats.created, stats.adopted, stats.moved_out, stats.freed_at_exit), (2, 1, 1, 2));
/// assert_eq!(stats.peak_bytes, 2 * 1024); // two storages of 1 KiB, not three
/// # Ok::<(), tensorscope::Error>(())
/// ```
pub fn scope_with_stats<R>(f: impl for<'s> FnOnce(&'s Scope<'s>) -> R) -> (R, ScopeStats) {
    let s = Scope::new();
    let r = f(&s);
    let mut st = s.inner.stats.get();
    st.freed_at_exit = st.live;
    st.live = 0;
    st.live_bytes = 0;
    (r, st)
    // `s` drops here: the tensors counted in `freed_at_exit` are freed.
}

impl<'s> Scope<'s> {
    fn new() -> Self {
        Scope {
            inner: ScopeInner {
                arena: Arena::new(),
                stats: Cell::new(ScopeStats::default()),
                storages: RefCell::new(Index::default()),
            },
            _brand: PhantomData,
        }
    }

    fn update(&self, f: impl FnOnce(&mut ScopeStats)) {
        let mut st = self.inner.stats.get();
        f(&mut st);
        self.inner.stats.set(st);
    }

    fn put(&'s self, t: Tensor, created: bool) -> Scoped<'s> {
        let (key, bytes) = (t.storage().id(), t.storage().block_bytes());
        // The only handle to its storage: no slot can hold that storage yet.
        let exclusive = t.is_exclusive();
        let (new_storage, pending) = {
            let mut ix = self.inner.storages.borrow_mut();
            if exclusive {
                ix.pending.push(key);
                (true, ix.pending.len())
            } else {
                ix.flush();
                let n = ix.map.entry(key).or_insert(0);
                *n += 1;
                (*n == 1, 0)
            }
        };
        self.update(|st| {
            if created {
                st.created += 1;
            } else {
                st.adopted += 1;
            }
            st.live += 1;
            if new_storage {
                st.live_bytes += bytes;
                st.peak_bytes = st.peak_bytes.max(st.live_bytes);
            }
        });
        crate::leak::SCOPED.fetch_add(1, Ordering::Relaxed);
        let slot = self.inner.arena.alloc(Slot {
            tensor: Some(t),
            key,
            bytes,
            pending,
        });
        Scoped {
            slot,
            _brand: PhantomData,
            _not_send: [],
        }
    }

    /// Takes the tensor out of its slot and updates the accounting.
    fn take(&self, x: Scoped<'s>, f: impl FnOnce(&mut ScopeStats)) -> Tensor {
        let (key, bytes, pending) = (x.slot.key, x.slot.bytes, x.slot.pending);
        let t = x
            .slot
            .tensor
            .take()
            .expect("a Scoped handle's slot is full");
        let gone = {
            let mut ix = self.inner.storages.borrow_mut();
            if pending > ix.flushed {
                // Not in the map: no other slot arrived sharing its storage.
                ix.pending[pending - 1] = 0;
                true
            } else {
                match ix.map.get_mut(&key) {
                    Some(n) if *n > 1 => {
                        *n -= 1;
                        false
                    }
                    Some(_) => {
                        ix.map.remove(&key);
                        true
                    }
                    None => false,
                }
            }
        };
        self.update(|st| {
            f(st);
            st.live -= 1;
            if gone {
                st.live_bytes = st.live_bytes.saturating_sub(bytes);
            }
        });
        crate::leak::SCOPED.fetch_sub(1, Ordering::Relaxed);
        t
    }

    /// Hands `t` to the scope: it is freed when the scope ends (unless moved
    /// out first). Counted in [`ScopeStats::adopted`].
    pub fn keep(&'s self, t: Tensor) -> Scoped<'s> {
        self.put(t, false)
    }

    /// Moves `x` out of the scope as an owned [`Tensor`] (TorchSharp's
    /// `MoveToOuter`). `x` must belong to this very scope: a handle of any
    /// other scope does not compile here.
    pub fn move_out(&self, x: Scoped<'s>) -> Tensor {
        self.take(x, |st| st.moved_out += 1)
    }

    /// Moves `x` from this scope to the scope `to` (typically an enclosing
    /// one, captured by the inner closure): it is then freed when `to` ends.
    ///
    /// ```
    /// use tensorscope::{scope, DType, Device};
    /// scope(|outer| -> tensorscope::Result<()> {
    ///     let mut results = Vec::new();
    ///     for i in 0..3 {
    ///         scope(|inner| -> tensorscope::Result<()> {
    ///             let tmp = inner.full(&[4], i as f64, DType::F32, Device::Cpu)?;
    ///             let r = inner.keep(tmp.mul_scalar(2.0)?);
    ///             results.push(inner.move_to(r, outer)); // `tmp` dies with `inner`
    ///             Ok(())
    ///         })?;
    ///     }
    ///     assert_eq!(outer.stats().live, 3);
    ///     assert_eq!(results[2].to_vec::<f32>()?, [4.0; 4]);
    ///     Ok(())
    /// })?;
    /// # Ok::<(), tensorscope::Error>(())
    /// ```
    pub fn move_to<'o>(&self, x: Scoped<'s>, to: &'o Scope<'o>) -> Scoped<'o> {
        let t = self.take(x, |st| st.moved_out += 1);
        to.put(t, false)
    }

    /// Frees `x` now instead of at the end of the scope. Counted in
    /// [`ScopeStats::freed_early`].
    pub fn free(&self, x: Scoped<'s>) {
        drop(self.take(x, |st| st.freed_early += 1));
    }

    /// The statistics so far.
    pub fn stats(&self) -> ScopeStats {
        self.inner.stats.get()
    }

    fn made(&'s self, t: Result<Tensor>) -> Result<Scoped<'s>> {
        Ok(self.put(t?, true))
    }

    /// [`Tensor::zeros`], bound to the scope.
    pub fn zeros(&'s self, shape: &[usize], dtype: DType, device: Device) -> Result<Scoped<'s>> {
        self.made(Tensor::zeros(shape, dtype, device))
    }

    /// [`Tensor::ones`], bound to the scope.
    pub fn ones(&'s self, shape: &[usize], dtype: DType, device: Device) -> Result<Scoped<'s>> {
        self.made(Tensor::ones(shape, dtype, device))
    }

    /// [`Tensor::full`], bound to the scope.
    pub fn full(
        &'s self,
        shape: &[usize],
        value: f64,
        dtype: DType,
        device: Device,
    ) -> Result<Scoped<'s>> {
        self.made(Tensor::full(shape, value, dtype, device))
    }

    /// [`Tensor::empty`], bound to the scope.
    pub fn empty(&'s self, shape: &[usize], dtype: DType, device: Device) -> Result<Scoped<'s>> {
        self.made(Tensor::empty(shape, dtype, device))
    }

    /// [`Tensor::from_slice`], bound to the scope.
    pub fn from_slice<T: Element>(
        &'s self,
        data: &[T],
        shape: &[usize],
        device: Device,
    ) -> Result<Scoped<'s>> {
        self.made(Tensor::from_slice(data, shape, device))
    }

    /// [`Tensor::arange`], bound to the scope.
    pub fn arange(
        &'s self,
        start: f64,
        end: f64,
        step: f64,
        dtype: DType,
        device: Device,
    ) -> Result<Scoped<'s>> {
        self.made(Tensor::arange(start, end, step, dtype, device))
    }

    /// [`Tensor::rand`], bound to the scope.
    pub fn rand(&'s self, shape: &[usize], dtype: DType, device: Device) -> Result<Scoped<'s>> {
        self.made(Tensor::rand(shape, dtype, device))
    }

    /// [`Tensor::randn`], bound to the scope.
    pub fn randn(&'s self, shape: &[usize], dtype: DType, device: Device) -> Result<Scoped<'s>> {
        self.made(Tensor::randn(shape, dtype, device))
    }
}

impl fmt::Debug for Scope<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scope")
            .field("stats", &self.stats())
            .finish()
    }
}

impl Deref for Scoped<'_> {
    type Target = Tensor;
    fn deref(&self) -> &Tensor {
        match &self.slot.tensor {
            Some(t) => t,
            None => unreachable!("a Scoped handle's slot is full until the handle is consumed"),
        }
    }
}

impl DerefMut for Scoped<'_> {
    fn deref_mut(&mut self) -> &mut Tensor {
        match &mut self.slot.tensor {
            Some(t) => t,
            None => unreachable!("a Scoped handle's slot is full until the handle is consumed"),
        }
    }
}

impl AsRef<Tensor> for Scoped<'_> {
    fn as_ref(&self) -> &Tensor {
        self
    }
}

impl fmt::Debug for Scoped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Scoped({:?})", &**self)
    }
}
