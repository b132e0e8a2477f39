//! Creating tensors: constant fills, ranges, identity, random, from data, and
//! the `*_like` / `new_*` families (which match dtype and device).

use crate::backend::{self, Dist, Operand};
use crate::device::Device;
use crate::dtype::{DType, Element};
use crate::error::{bail, Error, Result};
use crate::random::{with_global, Generator};
use crate::tensor::Tensor;

/// Significand bits of a float dtype (53 for f64 and anything else).
fn mantissa_bits(dtype: DType) -> u32 {
    match dtype {
        DType::F32 => 24,
        DType::F16 => 11,
        DType::BF16 => 8,
        _ => 53,
    }
}

/// Uniform in `[0, 1)` on a grid of `2^-p`: exact in a dtype with `p`
/// significand bits, so `rand` never rounds up to 1.0 in f32/f16/bf16. For
/// f64 (`p = 53`) this is the generator's `next_f64`.
fn unit(g: &mut Generator, p: u32) -> f64 {
    (g.next_u64() >> (64 - p)) as f64 / (1u64 << p) as f64
}

impl Tensor {
    /// A tensor of uninitialised values (in practice: whatever the cached block
    /// held; never uninitialised memory in Rust's sense, and bool tensors are
    /// zeroed so every byte is a valid bool).
    pub fn empty(shape: &[usize], dtype: DType, device: Device) -> Result<Tensor> {
        let _op = crate::alloc::history::op_context("empty");
        let mut t = Tensor::alloc(shape, dtype, device).map_err(|e| e.in_op("empty"))?;
        if dtype == DType::Bool {
            t.fill_(0.0)?;
        }
        Ok(t)
    }

    /// A tensor filled with `value` (converted to `dtype`).
    ///
    /// Integer dtypes take PyTorch's range: `-1` into u8 is 255, but `300`
    /// (or NaN) is an overflow `Err`.
    pub fn full(shape: &[usize], value: f64, dtype: DType, device: Device) -> Result<Tensor> {
        Tensor::full_checked("full", shape, value, dtype, device)
    }

    /// [`full`](Tensor::full) for the public op `op` (named in its errors).
    fn full_checked(
        op: &'static str,
        shape: &[usize],
        value: f64,
        dtype: DType,
        device: Device,
    ) -> Result<Tensor> {
        let _op = crate::alloc::history::op_context(op);
        crate::ops::check_fill_value(op, dtype, value)?;
        Tensor::full_wrapped(shape, value, dtype, device).map_err(|e| e.in_op(op))
    }

    /// A tensor filled with `value` stored as PyTorch stores a number, with
    /// no overflow check (integers wrap: scalar arithmetic, and fills whose
    /// value was checked by their op).
    pub(crate) fn full_wrapped(
        shape: &[usize],
        value: f64,
        dtype: DType,
        device: Device,
    ) -> Result<Tensor> {
        let t = Tensor::alloc(shape, dtype, device)?;
        backend::fill(&Operand::of(&t), value)?;
        Ok(t)
    }

    /// Zeros.
    pub fn zeros(shape: &[usize], dtype: DType, device: Device) -> Result<Tensor> {
        Tensor::full_checked("zeros", shape, 0.0, dtype, device)
    }

    /// Ones.
    pub fn ones(shape: &[usize], dtype: DType, device: Device) -> Result<Tensor> {
        Tensor::full_checked("ones", shape, 1.0, dtype, device)
    }

    /// A rank-0 tensor holding `v`.
    pub fn scalar<T: Element>(v: T, device: Device) -> Result<Tensor> {
        Tensor::from_slice(&[v], &[], device)
    }

    /// A tensor with the elements of `data` (row-major) and `shape`.
    pub fn from_slice<T: Element>(data: &[T], shape: &[usize], device: Device) -> Result<Tensor> {
        let _op = crate::alloc::history::op_context("from_slice");
        let n = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
        if n != Some(data.len()) {
            bail!(Error::ElementCount {
                op: "from_slice",
                from: vec![data.len()],
                from_numel: data.len(),
                to: shape.iter().map(|&d| d as isize).collect(),
            });
        }
        let n = data.len();
        let t = Tensor::alloc(shape, T::DTYPE, Device::Cpu).map_err(|e| e.in_op("from_slice"))?;
        {
            let _l = crate::storage::lock(&[], &[t.storage()]);
            // SAFETY: fresh contiguous CPU storage of n elements of T; exclusive lock held.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    data.as_ptr(),
                    crate::backend::cpu::ptr::<T>(t.storage()),
                    n,
                )
            };
        }
        t.to_device(device).map_err(|e| e.reported_as("from_slice"))
    }

    /// Like [`from_slice`](Tensor::from_slice), taking the vector.
    pub fn from_vec<T: Element>(data: Vec<T>, shape: &[usize], device: Device) -> Result<Tensor> {
        let _op = crate::alloc::history::op_context("from_vec");
        Tensor::from_slice(&data, shape, device)
    }

    /// `start, start + step, ...` below `end` (PyTorch's `arange`).
    pub fn arange(start: f64, end: f64, step: f64, dtype: DType, device: Device) -> Result<Tensor> {
        let _op = crate::alloc::history::op_context("arange");
        if step == 0.0 || !step.is_finite() || !start.is_finite() || !end.is_finite() {
            bail!(Error::arg(
                "arange",
                format!(
                    "start {start}, end {end} and step {step} must be finite and step non-zero"
                )
            ));
        }
        if (end - start) * step < 0.0 {
            bail!(Error::arg(
                "arange",
                format!("step {step} goes away from end {end} (start {start})")
            ));
        }
        let n = ((end - start) / step).ceil().max(0.0) as usize;
        Tensor::from_fn_f64(&[n], |i| start + i as f64 * step)
            .and_then(|t| t.to_dtype(dtype)?.to_device(device))
            .map_err(|e| e.in_op("arange"))
    }

    /// A contiguous f64 CPU tensor of `shape` with `f(i)` at row-major index
    /// `i`, in order. The buffer comes from the allocator, so a size that
    /// cannot be served is an `Err`, not an abort.
    fn from_fn_f64(shape: &[usize], mut f: impl FnMut(usize) -> f64) -> Result<Tensor> {
        let t = Tensor::alloc(shape, DType::F64, Device::Cpu)?;
        let n = t.numel();
        let _l = crate::storage::lock(&[], &[t.storage()]);
        let p = crate::backend::cpu::ptr::<f64>(t.storage());
        for i in 0..n {
            // SAFETY: fresh contiguous CPU storage of n f64; exclusive lock held.
            unsafe { p.add(i).write(f(i)) };
        }
        drop(_l);
        Ok(t)
    }

    /// `steps` points evenly spaced from `start` to `end`, both included.
    pub fn linspace(
        start: f64,
        end: f64,
        steps: usize,
        dtype: DType,
        device: Device,
    ) -> Result<Tensor> {
        let n = steps;
        let step = if n > 1 {
            (end - start) / (n - 1) as f64
        } else {
            0.0
        };
        // PyTorch fills the second half from the end, so `end` is exact.
        Tensor::from_fn_f64(&[n], |i| {
            if n == 1 {
                start
            } else if i < n / 2 {
                start + step * i as f64
            } else {
                end - step * (n - 1 - i) as f64
            }
        })
        .and_then(|t| t.to_dtype(dtype)?.to_device(device))
        .map_err(|e| e.in_op("linspace"))
    }

    /// The `n x m` identity (ones on the main diagonal).
    pub fn eye(n: usize, m: usize, dtype: DType, device: Device) -> Result<Tensor> {
        let t = Tensor::full_checked("eye", &[n, m], 0.0, dtype, device)?;
        if n.min(m) == 0 {
            return Ok(t); // no diagonal (and m + 1 may not exist: eye(0, usize::MAX))
        }
        // The diagonal is a strided view: stride m + 1 (m < usize::MAX here:
        // an [n >= 1, m] tensor was allocated).
        let mut diag = t.as_strided(&[n.min(m)], &[m + 1], 0)?;
        diag.fill_(1.0)?;
        Ok(t)
    }

    /// Uniform in `[0, 1)` from the global generator.
    pub fn rand(shape: &[usize], dtype: DType, device: Device) -> Result<Tensor> {
        if !dtype.is_float() {
            bail!(Error::dtype("rand", "a float dtype", dtype));
        }
        let mut t = Tensor::alloc(shape, dtype, device).map_err(|e| e.in_op("rand"))?;
        t.uniform_(0.0, 1.0)?;
        Ok(t)
    }

    /// Standard normal from the global generator.
    pub fn randn(shape: &[usize], dtype: DType, device: Device) -> Result<Tensor> {
        let _op = crate::alloc::history::op_context("randn");
        if !dtype.is_float() {
            bail!(Error::dtype("randn", "a float dtype", dtype));
        }
        let mut t = Tensor::alloc(shape, dtype, device).map_err(|e| e.in_op("randn"))?;
        t.normal_(0.0, 1.0)?;
        Ok(t)
    }

    /// Uniform in `[0, 1)` from an explicit generator.
    pub fn rand_with(
        shape: &[usize],
        dtype: DType,
        device: Device,
        generator: &mut Generator,
    ) -> Result<Tensor> {
        let mut t = Tensor::alloc(shape, dtype, device).map_err(|e| e.in_op("rand_with"))?;
        t.random_fill(
            "rand",
            generator,
            Dist::Uniform {
                low: 0.0,
                high: 1.0,
            },
        )?;
        Ok(t)
    }

    /// Standard normal from an explicit generator.
    pub fn randn_with(
        shape: &[usize],
        dtype: DType,
        device: Device,
        generator: &mut Generator,
    ) -> Result<Tensor> {
        let mut t = Tensor::alloc(shape, dtype, device).map_err(|e| e.in_op("randn_with"))?;
        t.random_fill(
            "randn",
            generator,
            Dist::Normal {
                mean: 0.0,
                std: 1.0,
            },
        )?;
        Ok(t)
    }

    /// Fills in place from `dist`. On the CPU the values are drawn on the
    /// host from `generator`'s stream, in row-major order of this tensor's shape
    /// (so they do not depend on strides). On CUDA they are generated on the
    /// device at `generator`'s Philox offset, which advances by the counters used:
    /// in place when this tensor is dense, else into a dense temporary that
    /// is then copied in (element `i` in row-major order either way).
    fn random_fill(
        &mut self,
        op: &'static str,
        generator: &mut Generator,
        dist: Dist,
    ) -> Result<&mut Tensor> {
        self.check_writable(op)?;
        if !self.dtype().is_float() && !matches!(dist, Dist::Bernoulli { .. }) {
            bail!(Error::dtype(op, "a float dtype", self.dtype()));
        }
        if let Device::Cuda(ordinal) = self.device() {
            if self.is_contiguous() {
                let dst = Operand::of(self);
                generator.philox(ordinal, |seed, offset| {
                    backend::philox_fill(&dst, dist, seed, offset)
                })?;
                drop(dst);
                self.storage().bump_version();
                return Ok(self);
            }
            let tmp = Tensor::alloc(self.shape(), self.dtype(), self.device())?;
            let dst = Operand::of(&tmp);
            generator.philox(ordinal, |seed, offset| {
                backend::philox_fill(&dst, dist, seed, offset)
            })?;
            return self.copy_(&tmp);
        }
        // On the CPU: drawn on the host straight into this tensor's
        // elements, in row-major order (no buffer: 0 new bytes).
        let p = mantissa_bits(self.dtype());
        let dst = Operand::of(self);
        match dist {
            Dist::Uniform { low, high } => {
                backend::host_fill(op, &dst, || low + (high - low) * unit(generator, p))?
            }
            Dist::Normal { mean, std } => {
                backend::host_fill(op, &dst, || mean + std * generator.next_normal())?
            }
            Dist::Bernoulli { p } => {
                backend::host_fill(op, &dst, || f64::from(u8::from(generator.next_f64() < p)))?
            }
        };
        drop(dst);
        self.storage().bump_version();
        Ok(self)
    }

    /// Fills in place, uniform in `[low, high)`, from the global generator.
    pub fn uniform_(&mut self, low: f64, high: f64) -> Result<&mut Tensor> {
        let ok = low.is_finite() && high.is_finite() && low <= high;
        if !ok {
            bail!(Error::arg(
                "uniform_",
                format!("low {low} and high {high} must be finite, with low <= high")
            ));
        }
        with_global(|g| {
            self.random_fill("uniform_", g, Dist::Uniform { low, high })
                .map(|_| ())
        })?;
        Ok(self)
    }

    /// Fills in place, normal with `mean` and `std`, from the global generator.
    pub fn normal_(&mut self, mean: f64, std: f64) -> Result<&mut Tensor> {
        let ok = std.is_finite() && std >= 0.0;
        if !ok {
            bail!(Error::arg(
                "normal_",
                format!("std must be finite and non-negative, got {std}")
            ));
        }
        with_global(|g| {
            self.random_fill("normal_", g, Dist::Normal { mean, std })
                .map(|_| ())
        })?;
        Ok(self)
    }

    /// Fills in place with 1 where a draw from the global generator falls
    /// below `p`, else 0: each element is 1 with probability `p`
    /// (PyTorch's `bernoulli_(p)`). Any dtype, `bool` included. `p` must
    /// lie in `[0, 1]`. On CUDA the draws are made on the device (see
    /// [`Generator`]).
    ///
    /// ```
    /// # use tensorscope::{DType, Device, Tensor};
    /// let mut m = Tensor::empty(&[1000], DType::Bool, Device::Cpu)?;
    /// m.bernoulli_(0.25)?;
    /// let kept = m.to_vec::<bool>()?.iter().filter(|&&b| b).count();
    /// assert!((150..350).contains(&kept));
    /// assert!(m.bernoulli_(1.5).is_err());
    /// # Ok::<(), tensorscope::Error>(())
    /// ```
    pub fn bernoulli_(&mut self, p: f64) -> Result<&mut Tensor> {
        with_global(|g| self.bernoulli_with(p, g).map(|_| ()))?;
        Ok(self)
    }

    /// [`bernoulli_`](Tensor::bernoulli_) from an explicit generator.
    pub fn bernoulli_with(&mut self, p: f64, generator: &mut Generator) -> Result<&mut Tensor> {
        if !(0.0..=1.0).contains(&p) {
            bail!(Error::arg(
                "bernoulli_",
                format!("p must be in [0, 1], got {p}")
            ));
        }
        self.random_fill("bernoulli_", generator, Dist::Bernoulli { p })
    }

    /// Zeros with this tensor's shape, dtype and device.
    pub fn zeros_like(&self) -> Result<Tensor> {
        Tensor::zeros(self.shape(), self.dtype(), self.device())
    }
    /// Ones with this tensor's shape, dtype and device.
    pub fn ones_like(&self) -> Result<Tensor> {
        Tensor::ones(self.shape(), self.dtype(), self.device())
    }
    /// `value` with this tensor's shape, dtype and device.
    pub fn full_like(&self, value: f64) -> Result<Tensor> {
        Tensor::full_checked(
            "full_like",
            self.shape(),
            value,
            self.dtype(),
            self.device(),
        )
    }
    /// Uninitialised, with this tensor's shape, dtype and device.
    pub fn empty_like(&self) -> Result<Tensor> {
        Tensor::empty(self.shape(), self.dtype(), self.device())
    }
    /// Uniform `[0, 1)` with this tensor's shape, dtype and device.
    pub fn rand_like(&self) -> Result<Tensor> {
        Tensor::rand(self.shape(), self.dtype(), self.device())
    }
    /// Standard normal with this tensor's shape, dtype and device.
    pub fn randn_like(&self) -> Result<Tensor> {
        Tensor::randn(self.shape(), self.dtype(), self.device())
    }
    /// Zeros of `shape` with this tensor's dtype and device.
    pub fn new_zeros(&self, shape: &[usize]) -> Result<Tensor> {
        Tensor::zeros(shape, self.dtype(), self.device())
    }
    /// Ones of `shape` with this tensor's dtype and device.
    pub fn new_ones(&self, shape: &[usize]) -> Result<Tensor> {
        Tensor::ones(shape, self.dtype(), self.device())
    }
    /// `value` in `shape` with this tensor's dtype and device.
    pub fn new_full(&self, shape: &[usize], value: f64) -> Result<Tensor> {
        Tensor::full_checked("new_full", shape, value, self.dtype(), self.device())
    }
    /// Uninitialised `shape` with this tensor's dtype and device.
    pub fn new_empty(&self, shape: &[usize]) -> Result<Tensor> {
        Tensor::empty(shape, self.dtype(), self.device())
    }
    /// `data` in `shape`, converted to this tensor's dtype, on its device.
    pub fn new_tensor<T: Element>(&self, data: &[T], shape: &[usize]) -> Result<Tensor> {
        Tensor::from_slice(data, shape, Device::Cpu)?
            .to_dtype(self.dtype())?
            .to_device(self.device())
    }
}
