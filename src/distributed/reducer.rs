//! The gradient reducer of [`DistributedDataParallel`](super::DistributedDataParallel):
//! parameters packed, in reverse order, into flat buckets allocated once;
//! each bucket summed across the ranks in place as soon as backward has
//! finished its last gradient (Note [leaf sink]), the buckets always in
//! the same order on every rank; then one small status sum that tells every
//! rank whether any rank failed and which parameters some rank used.

use super::group::{host, ProcessGroup};
use super::transport::Pending;
use crate::autograd::leaf_sink::{leaf_key, LeafSink};
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::tensor::Tensor;
use std::collections::HashMap;

const OP: &str = "DistributedDataParallel::backward";

/// PyTorch's first bucket: small, so that the first reduction starts early.
const FIRST_BUCKET_BYTES: usize = 1 << 20;

/// Where one trainable parameter's gradient lives in the buckets.
struct Slot {
    name: String,
    shape: Vec<usize>,
    view: Vec<isize>,
    dtype: DType,
    bucket: usize,
    offset: usize,
    numel: usize,
}

struct Bucket {
    /// f32 (f32, f16 and bf16 gradients) or f64, summed in place.
    buf: Tensor,
    slots: Vec<usize>,
}

pub(super) struct Reducer {
    pg: ProcessGroup,
    slots: Vec<Slot>,
    buckets: Vec<Bucket>,
    /// `[ranks that failed, then per slot the ranks that have a gradient]`.
    status: Tensor,
    /// Why the reducer stopped (a sum timed out: its buffers are leaked).
    stopped: Option<String>,
    // The step in progress.
    keys: HashMap<usize, usize>,
    copied: Vec<bool>,
    has_grad: Vec<bool>,
    left: Vec<usize>,
    launched: usize,
    pending: Vec<Option<Pending>>,
}

/// The bucket element type of a gradient dtype.
fn bucket_dtype(d: DType) -> DType {
    if d == DType::F64 {
        DType::F64
    } else {
        DType::F32
    }
}

impl Reducer {
    /// Buckets for `params` (the trainable ones, in the module's order),
    /// `cap` bytes each after a first one of at most 1 MiB.
    pub(super) fn new(pg: ProcessGroup, params: &[(String, &Tensor)], cap: usize) -> Result<Self> {
        let mut slots: Vec<Slot> = Vec::with_capacity(params.len());
        let mut buckets: Vec<(DType, usize, Vec<usize>)> = Vec::new();
        // Reverse order: backward finishes the last parameters first.
        for (i, (name, p)) in params.iter().enumerate().rev() {
            let dt = bucket_dtype(p.dtype());
            let bytes = p.numel() * dt.size_in_bytes();
            let limit = if buckets.len() <= 1 {
                cap.min(FIRST_BUCKET_BYTES)
            } else {
                cap
            };
            let fits = buckets
                .last()
                .is_some_and(|(d, used, _)| *d == dt && (*used == 0 || used + bytes <= limit));
            if !fits {
                buckets.push((dt, 0, Vec::new()));
            }
            let b = buckets.len() - 1;
            let (_, used, members) = buckets.last_mut().expect("pushed above");
            let offset = *used / dt.size_in_bytes();
            *used += bytes;
            members.push(i);
            slots.push(Slot {
                name: name.clone(),
                shape: p.shape().to_vec(),
                view: p.shape().iter().map(|&d| d as isize).collect(),
                dtype: p.dtype(),
                bucket: b,
                offset,
                numel: p.numel(),
            });
        }
        slots.reverse();
        // `members` held parameter indices: map them to slot indices (equal
        // after the reverse above).
        let buckets = buckets
            .into_iter()
            .map(|(dt, used, members)| {
                let n = used / dt.size_in_bytes();
                Ok(Bucket {
                    buf: Tensor::zeros(&[n.max(1)], dt, Device::Cpu)?,
                    slots: members,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let n = slots.len();
        Ok(Reducer {
            pg,
            status: Tensor::zeros(&[1 + n], DType::F32, Device::Cpu)?,
            stopped: None,
            keys: HashMap::with_capacity(n),
            copied: vec![false; n],
            has_grad: vec![false; n],
            left: vec![0; buckets.len()],
            launched: 0,
            pending: (0..buckets.len()).map(|_| None).collect(),
            slots,
            buckets,
        })
    }

    /// A fingerprint of the bucket layout, agreed on by every rank.
    pub(super) fn layout_words(&self) -> impl Iterator<Item = u64> + '_ {
        self.slots.iter().flat_map(|s| {
            let head = [
                s.dtype as u64,
                s.bucket as u64,
                s.offset as u64,
                s.numel as u64,
            ];
            head.into_iter().chain(s.shape.iter().map(|&d| d as u64))
        })
    }

    pub(super) fn bucket_count(&self) -> usize {
        self.buckets.len()
    }

    /// The bytes the buckets hold (the reducer's whole memory, with the
    /// status vector).
    pub(super) fn bytes(&self) -> usize {
        let b: usize = self.buckets.iter().map(|b| b.buf.nbytes()).sum();
        b + self.status.nbytes()
    }

    fn check_running(&self) -> Result<()> {
        match &self.stopped {
            None => Ok(()),
            Some(why) => Err(Error::Collective {
                op: OP,
                rank: self.pg.rank(),
                msg: format!("data-parallel training stopped after an earlier failure: {why}"),
            }),
        }
    }

    /// Prepares a step over the module's trainable parameters, which must
    /// be those the reducer was built for.
    pub(super) fn begin(&mut self, params: &[(String, &Tensor)]) -> Result<()> {
        self.check_running()?;
        self.keys.clear();
        self.copied.iter_mut().for_each(|c| *c = false);
        self.has_grad.iter_mut().for_each(|c| *c = false);
        for (b, bucket) in self.buckets.iter().enumerate() {
            self.left[b] = bucket.slots.len();
        }
        self.launched = 0;
        if params.len() != self.slots.len() {
            return Err(Error::arg(
                OP,
                format!(
                    "the module has {} trainable parameters now, {} when it was wrapped",
                    params.len(),
                    self.slots.len()
                ),
            ));
        }
        for (i, ((name, p), s)) in params.iter().zip(&self.slots).enumerate() {
            if p.shape() != s.shape.as_slice() || p.dtype() != s.dtype || p.device() != Device::Cpu
            {
                return Err(Error::arg(
                    OP,
                    format!(
                        "parameter {name:?} is {:?} {} on {} now, {:?} {} on cpu when it was wrapped",
                        p.shape(),
                        p.dtype(),
                        p.device(),
                        s.shape,
                        s.dtype
                    ),
                ));
            }
            self.keys.insert(leaf_key(p), i);
        }
        Ok(())
    }

    /// Writes slot `i` from `grad` (zeros without one).
    fn copy_in(&mut self, i: usize, grad: Option<&Tensor>) -> Result<()> {
        let s = &self.slots[i];
        let mut dst = self.buckets[s.bucket].buf.narrow(0, s.offset, s.numel)?;
        match grad {
            Some(g) => dst.copy_(&g.reshape(&[-1])?)?,
            None => dst.zero_()?,
        };
        self.copied[i] = true;
        self.has_grad[i] = grad.is_some();
        self.left[s.bucket] -= 1;
        Ok(())
    }

    /// Starts every bucket whose gradients are all in, in bucket order.
    fn launch_ready(&mut self) -> Result<()> {
        while self.launched < self.buckets.len() && self.left[self.launched] == 0 {
            let b = self.launched;
            // SAFETY: the bucket is private to the reducer, contiguous f32 or
            // f64 on the CPU; nothing touches it until `finish` waited for
            // it, and a failed wait stops the reducer and leaks the buckets.
            // Every rank starts the buckets of the agreed layout in order.
            let p = unsafe { self.pg.start_sum(OP, &self.buckets[b].buf) }?;
            self.pending[b] = Some(p);
            self.launched += 1;
        }
        Ok(())
    }

    /// Lets the engine move the sums in flight along.
    fn progress(&mut self) -> Result<()> {
        for p in &mut self.pending[..self.launched] {
            if let Some(q) = p
                && self.pg.poll(OP, q)?
            {
                *p = None;
            }
        }
        Ok(())
    }

    /// Ends the step on this rank: fills and starts the buckets backward
    /// did not finish (from `params`' gradients, zeros without one), sums
    /// the status, and waits for everything. `failed` says this rank could
    /// not compute its gradients. Returns whether every rank succeeded.
    pub(super) fn flush(&mut self, params: &[(String, &Tensor)], failed: bool) -> Result<bool> {
        let r = self.flush_inner(params, failed);
        if r.is_err() {
            self.stop_waiting();
        }
        r
    }

    fn flush_inner(&mut self, params: &[(String, &Tensor)], failed: bool) -> Result<bool> {
        for b in self.launched..self.buckets.len() {
            for k in 0..self.buckets[b].slots.len() {
                let i = self.buckets[b].slots[k];
                if !self.copied[i] {
                    // The keys did not match (a failed `begin`): zeros, so
                    // the other ranks still get every bucket.
                    let g = if failed {
                        None
                    } else {
                        params.get(i).and_then(|(_, p)| p.grad())
                    };
                    self.copy_in(i, g.as_ref())?;
                }
            }
            self.launch_ready()?;
        }
        let n = self.slots.len();
        // SAFETY: the status is the reducer's alone: a contiguous CPU f32
        // tensor of 1 + n elements, not in use by any sum now.
        let status =
            unsafe { std::slice::from_raw_parts_mut(host(&self.status) as *mut f32, 1 + n) };
        status[0] = f32::from(u8::from(failed));
        for (s, &h) in status[1..].iter_mut().zip(&self.has_grad) {
            *s = f32::from(u8::from(h));
        }
        // SAFETY: as for the buckets in `launch_ready`.
        let p = unsafe { self.pg.start_sum(OP, &self.status) }?;
        for b in 0..self.buckets.len() {
            if let Some(q) = self.pending[b].take() {
                self.pg.finish(OP, &q)?;
            }
        }
        self.pg.finish(OP, &p)?;
        // SAFETY: the status sum is done; the slice is the reducer's alone.
        let status = unsafe { std::slice::from_raw_parts(host(&self.status) as *const f32, 1 + n) };
        Ok(status[0] == 0.0)
    }

    /// After a failed wait the engine may still write the buckets and the
    /// status: keep them alive forever, and refuse further steps.
    fn stop_waiting(&mut self) {
        for b in &self.buckets {
            std::mem::forget(b.buf.alias());
        }
        std::mem::forget(self.status.alias());
        self.pending.iter_mut().for_each(|p| *p = None);
        self.stopped
            .get_or_insert_with(|| "a gradient reduction did not finish".into());
    }

    /// The averaged gradients into `params`: a parameter that some rank had
    /// a gradient for gets the average (a new gradient where this rank had
    /// none); one that no rank had keeps none.
    pub(super) fn write_back(&mut self, params: &[(String, &Tensor)]) -> Result<()> {
        let world = self.pg.world_size() as f64;
        for b in &mut self.buckets {
            b.buf.mul_scalar_(1.0 / world)?;
        }
        let status = self.status.to_vec::<f32>()?;
        for (i, (_, p)) in params.iter().enumerate() {
            if status[1 + i] == 0.0 {
                continue;
            }
            let s = &self.slots[i];
            let src = self.buckets[s.bucket]
                .buf
                .narrow(0, s.offset, s.numel)?
                .reshape(&s.view)?;
            match p.grad() {
                Some(mut g) => {
                    g.copy_(&src)?;
                }
                None => p.set_grad(Some(src.to_dtype(s.dtype)?.deep_clone()?))?,
            }
        }
        Ok(())
    }

    /// The parameters no rank had a gradient for in the last step.
    pub(super) fn unused(&self) -> Result<Vec<String>> {
        let status = self.status.to_vec::<f32>()?;
        Ok(self
            .slots
            .iter()
            .zip(&status[1..])
            .filter(|(_, n)| **n == 0.0)
            .map(|(s, _)| s.name.clone())
            .collect())
    }
}

impl LeafSink for Reducer {
    fn accumulating(&mut self, leaf: usize) -> Result<()> {
        if let Some(&i) = self.keys.get(&leaf)
            && self.copied[i]
        {
            return Err(Error::Autograd {
                op: OP,
                msg: format!(
                    "parameter {:?} received a gradient after its bucket was reduced (a \
                     parameter used both inside and outside a checkpointed segment, or a \
                     backward started from inside backward)",
                    self.slots[i].name
                ),
            });
        }
        Ok(())
    }

    fn finished(&mut self, leaf: usize, grad: Option<Tensor>) -> Result<()> {
        if let Some(&i) = self.keys.get(&leaf) {
            if !self.copied[i] {
                self.copy_in(i, grad.as_ref())?;
            }
            self.launch_ready()?;
        }
        self.progress()
    }
}
