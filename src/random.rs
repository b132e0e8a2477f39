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
/// the same values on both. The two streams advance independently: a CPU
/// fill does not move the CUDA offset, nor the reverse. One offset serves
/// every CUDA device.
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
    philox_offset: u64,
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
            philox_offset: 0,
        }
    }

    /// Runs a device fill `f(seed, offset)` at this generator's Philox
    /// offset, then advances the offset by the counters `f` reports it used.
    pub(crate) fn philox<E>(
        &mut self,
        f: impl FnOnce(u64, u64) -> std::result::Result<u64, E>,
    ) -> std::result::Result<(), E> {
        let used = f(self.seed, self.philox_offset)?;
        self.philox_offset = self.philox_offset.wrapping_add(used);
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
/// [`Generator::new`]: the CPU stream restarts and the CUDA Philox offset
/// goes back to 0).
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
    let gen = g.get_or_insert_with(|| {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        Generator::new(t)
    });
    f(gen)
}
