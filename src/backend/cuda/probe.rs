//! Finding the CUDA libraries and devices without ever panicking.
//!
//! cudarc loads `libcuda`, `libnvrtc` and `libcublas` lazily and *panics*
//! when one is missing (and `catch_unwind` does not help under
//! `panic = "abort"`). So before any other cudarc call, each library is
//! probed with its `is_culib_present()`, which only tries to open it. Only
//! when the driver library is there is the driver initialised and asked for
//! its device count; a driver without a device (`CUDA_ERROR_NO_DEVICE`) or
//! any other driver error means 0 devices.

use std::sync::OnceLock;

/// Which CUDA libraries the loader found, and what the driver reported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Libraries {
    /// `libcuda` (the driver).
    pub driver: bool,
    /// `libnvrtc` (the runtime compiler every kernel needs).
    pub nvrtc: bool,
    /// `libcublas` (needed by matmul only).
    pub cublas: bool,
    /// Devices the driver reports (0 without a driver).
    pub devices: usize,
    /// The driver's CUDA version as `major * 1000 + minor * 10`, if known.
    pub driver_version: Option<i32>,
    /// NVRTC's `(major, minor)` version, if NVRTC was found.
    pub nvrtc_version: Option<(i32, i32)>,
    /// Why the driver reported no device, if it did not.
    pub error: Option<String>,
}

static PROBE: OnceLock<Libraries> = OnceLock::new();

fn run_probe() -> Libraries {
    // SAFETY: these only try to open the shared libraries (libloading), they
    // call nothing in them.
    let (driver, nvrtc, cublas) = unsafe {
        (
            cudarc::driver::sys::is_culib_present(),
            cudarc::nvrtc::sys::is_culib_present(),
            cudarc::cublas::sys::is_culib_present(),
        )
    };
    let mut lib = Libraries {
        driver,
        nvrtc,
        cublas,
        devices: 0,
        driver_version: None,
        nvrtc_version: None,
        error: None,
    };
    if nvrtc {
        let (mut major, mut minor) = (0, 0);
        // SAFETY: the library is present; nvrtcVersion writes two ints.
        let r = unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) };
        if r == cudarc::nvrtc::sys::nvrtcResult::NVRTC_SUCCESS {
            lib.nvrtc_version = Some((major, minor));
        }
    }
    if !driver {
        lib.error = Some("the CUDA driver library (libcuda) was not found".into());
        return lib;
    }
    match cudarc::driver::CudaContext::device_count() {
        Ok(n) => lib.devices = n.max(0) as usize,
        Err(e) => lib.error = Some(format!("the CUDA driver reported {e:?}")),
    }
    let mut v = 0;
    // SAFETY: the driver library is present and initialised; one int out.
    if unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut v) }
        .result()
        .is_ok()
    {
        lib.driver_version = Some(v);
    }
    lib
}

/// What the loader and the driver report (probed once per process).
pub fn libraries() -> Libraries {
    PROBE.get_or_init(run_probe).clone()
}

pub(crate) fn probe() -> &'static Libraries {
    PROBE.get_or_init(run_probe)
}

/// `true` when the CUDA driver and NVRTC are loadable and at least one GPU is
/// present. Never panics; `false` on machines without CUDA.
pub fn is_available() -> bool {
    let p = probe();
    p.driver && p.nvrtc && p.devices > 0
}

/// Number of CUDA devices the driver reports; 0 without a driver or GPU.
/// Never panics.
pub fn device_count() -> usize {
    probe().devices
}

/// Whether the driver library exports `cuEventElapsedTime_v2` (CUDA 12.8+),
/// which cudarc's CUDA 13 bindings call for every elapsed-time query and
/// whose absence they turn into a panic. Looked up once.
pub(crate) fn has_elapsed_v2() -> bool {
    static V2: OnceLock<bool> = OnceLock::new();
    *V2.get_or_init(|| {
        // SAFETY: `culib` opens the driver library (present: checked first;
        // it panics only when it is missing) and `get` only looks a symbol
        // up, calling nothing.
        probe().driver
            && unsafe {
                cudarc::driver::sys::culib()
                    .get::<unsafe extern "C" fn()>(b"cuEventElapsedTime_v2")
                    .is_ok()
            }
    })
}

/// Why CUDA device `ordinal` cannot be used, or `None` if it can.
pub(crate) fn unusable_reason(ordinal: usize) -> Option<String> {
    let p = probe();
    if !p.driver {
        return Some("the CUDA driver library (libcuda.so) was not found".into());
    }
    if !p.nvrtc {
        return Some("the NVRTC library (libnvrtc.so) was not found".into());
    }
    if ordinal >= p.devices {
        return Some(match &p.error {
            Some(e) if p.devices == 0 => format!("no CUDA device ({e})"),
            _ => format!("the driver reports {} CUDA device(s)", p.devices),
        });
    }
    None
}
