//! A seedable random generator, global and explicit.
//!
//! `manual_seed(s)` makes every later `rand`/`randn`/`uniform_`/`normal_` on the
//! global generator reproducible. An explicit [`Generator`] can be passed to the
//! `*_with` forms instead.
//!
//! As in PyTorch, the CPU and CUDA draw different streams from one seed: the
//! CPU draws on the host from a xoshiro256++ stream, CUDA generates on the
//! device with Philox 4x32-10 keyed by the seed, at a counter offset the
//! generator advances by what each fill used (see [`Generator`]).

use std::sync::Mutex;

/// A seeded generator: a xoshiro256++ stream (seeded through SplitMix64)
/// for the CPU, and a Philox seed and offset for CUDA.
///
/// **CPU and CUDA values differ for one seed, as in PyTorch.** On the CPU a
/// fill draws its values on the host, in row-major order. On CUDA a fill
/// generates on the device (no host work or host-to-device copy in
/// proportion to the tensor): element `i` of a fill is a function of the
/// seed, the generator's Philox offset and `i` only, and the fill advances
/// the offset by the Philox counters it used (`ceil(n / 4)`, or
/// `ceil(n / 2)` for f64 `rand`/`randn`), like PyTorch's Philox offset. So a
/// seed gives the same values on CUDA every time, whatever the device or
/// launch configuration, and the same values on the CPU every time, but not
/// the same values on both. The streams advance independently: a CPU fill
/// does not move a CUDA offset, nor the reverse, and each CUDA device has its
/// own offset (as PyTorch keeps one generator per device), so what runs on
/// `cuda:1` never changes the values `cuda:0` draws.
///
/// ```
/// use tensorscope::{DType, Device, Generator, Tensor};
/// let dev = Device::cuda_if_available();
/// let a = Tensor::rand_with(&[4], DType::F32, dev, &mut Generator::new(7))?;
/// let b = Tensor::rand_with(&[4], DType::F32, dev, &mut Generator::new(7))?;
/// assert_eq!(a.to_vec::<f32>()?, b.to_vec::<f32>()?); // same seed, same device
/// # Ok::<(), tensorscope::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Generator {
    s: [u64; 4],
    seed: u64,
    /// The Philox offset of each CUDA device, by ordinal (missing: 0).
    philox_offsets: Vec<u64>,
}

impl Generator {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Generator {
        let mut z = seed;
        let mut next = || {
            z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut x = z;
            x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            x ^ (x >> 31)
        };
        Generator {
            s: [next(), next(), next(), next()],
            seed,
            philox_offsets: Vec::new(),
        }
    }

    /// The seed this generator was made from.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The Philox counter offset at which the next fill on `device` starts:
    /// 0 for a fresh generator, advanced by every CUDA fill on that device
    /// (`ceil(n / 4)` counters for `n` elements, `ceil(n / 2)` for f64
    /// `rand`/`randn`). Always 0 for the CPU, which draws from its own
    /// stream (PyTorch's `Generator.get_offset()` on a CUDA generator).
    ///
    /// ```
    /// use tensorscope::{Device, Generator};
    /// let g = Generator::new(1);
    /// assert_eq!(g.philox_offset(Device::Cuda(0)), 0);
    /// assert_eq!(g.philox_offset(Device::Cpu), 0);
    /// ```
    pub fn philox_offset(&self, device: crate::device::Device) -> u64 {
        match device {
            crate::device::Device::Cpu => 0,
            crate::device::Device::Cuda(i) => self.philox_offsets.get(i).copied().unwrap_or(0),
        }
    }

    /// Runs a fill `f(seed, offset)` on CUDA device `ordinal` at that
    /// device's Philox offset, then advances that offset (only) by the
    /// counters `f` reports it used. A failed fill moves nothing.
    pub(crate) fn philox<E>(
        &mut self,
        ordinal: usize,
        f: impl FnOnce(u64, u64) -> std::result::Result<u64, E>,
    ) -> std::result::Result<(), E> {
        let offset = self.philox_offsets.get(ordinal).copied().unwrap_or(0);
        let used = f(self.seed, offset)?;
        if self.philox_offsets.len() <= ordinal {
            self.philox_offsets.resize(ordinal + 1, 0);
        }
        self.philox_offsets[ordinal] = offset.wrapping_add(used);
        Ok(())
    }

    /// The next 64 random bits.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.s;
        let r = s[0].wrapping_add(s[3]).rotate_left(23).wrapping_add(s[0]);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        r
    }

    /// Uniform in `[0, 1)` with 53 random bits.
    #[inline]
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Standard normal (Box-Muller; one value per call, no cached spare, so
    /// the stream depends only on the number of calls).
    #[inline]
    pub fn next_normal(&mut self) -> f64 {
        let u1 = 1.0 - self.next_f64(); // (0, 1]
        let u2 = self.next_f64();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }
}

static GLOBAL: Mutex<Option<Generator>> = Mutex::new(None);

/// Seeds the global generator, for the CPU and for CUDA (a fresh
/// [`Generator::new`]: the CPU stream restarts and every CUDA device's
/// Philox offset goes back to 0).
///
/// A seed gives the same values on one device every time, but CUDA's values
/// differ from the CPU's (as in PyTorch): see [`Generator`].
///
/// ```
/// use tensorscope::{manual_seed, DType, Device, Tensor};
/// manual_seed(3);
/// let a = Tensor::randn(&[5], DType::F32, Device::Cpu)?;
/// manual_seed(3);
/// let b = Tensor::randn(&[5], DType::F32, Device::Cpu)?;
/// assert_eq!(a.to_vec::<f32>()?, b.to_vec::<f32>()?);
/// # Ok::<(), tensorscope::Error>(())
/// ```
pub fn manual_seed(seed: u64) {
    *GLOBAL.lock().unwrap_or_else(|e| e.into_inner()) = Some(Generator::new(seed));
}

/// Runs `f` with the global generator (seeded from the clock if never seeded).
pub(crate) fn with_global<R>(f: impl FnOnce(&mut Generator) -> R) -> R {
    let mut g = GLOBAL.lock().unwrap_or_else(|e| e.into_inner());
    let generator = g.get_or_insert_with(|| {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        Generator::new(t)
    });
    f(generator)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Device;

    #[test]
    fn each_cuda_device_has_its_own_philox_offset() {
        let mut g = Generator::new(9);
        let mut seen = Vec::new();
        g.philox(1, |seed, off| {
            seen.push((seed, off));
            Ok::<u64, ()>(10)
        })
        .unwrap();
        assert_eq!(g.philox_offset(Device::Cuda(1)), 10);
        assert_eq!(
            g.philox_offset(Device::Cuda(0)),
            0,
            "cuda:1 left cuda:0 alone"
        );
        g.philox(0, |seed, off| {
            seen.push((seed, off));
            Ok::<u64, ()>(3)
        })
        .unwrap();
        g.philox(1, |seed, off| {
            seen.push((seed, off));
            Ok::<u64, ()>(5)
        })
        .unwrap();
        assert_eq!(seen, vec![(9, 0), (9, 0), (9, 10)]);
        assert_eq!(g.philox_offset(Device::Cuda(0)), 3);
        assert_eq!(g.philox_offset(Device::Cuda(1)), 15);
        assert_eq!(g.philox_offset(Device::Cuda(7)), 0);
        assert_eq!(g.philox_offset(Device::Cpu), 0);
        // A failed fill moves nothing; the CPU stream is untouched throughout.
        assert_eq!(g.philox(0, |_, _| Err::<u64, &str>("boom")), Err("boom"));
        assert_eq!(g.philox_offset(Device::Cuda(0)), 3);
        assert_eq!(g.next_u64(), Generator::new(9).next_u64());
    }
}
