//! Devices: where a tensor's bytes live.

use std::fmt;

/// Where a tensor's storage lives.
///
/// `Cpu` is always available. `Cuda(ordinal)` names a GPU; without the `cuda`
/// feature (or without a GPU) every allocation on it returns
/// [`Error::DeviceUnavailable`](crate::Error::DeviceUnavailable).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum Device {
    /// Host memory, served by the CPU caching allocator.
    #[default]
    Cpu,
    /// A CUDA device, by ordinal.
    Cuda(usize),
}

/// A kind of device, without an ordinal: what an autocast region covers
/// (PyTorch's `device_type`, `"cpu"` or `"cuda"`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum DeviceType {
    /// The host.
    Cpu,
    /// Every CUDA device.
    Cuda,
}

impl fmt::Display for DeviceType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DeviceType::Cpu => "cpu",
            DeviceType::Cuda => "cuda",
        })
    }
}

impl Device {
    /// The kind of device, without the ordinal.
    pub fn device_type(self) -> DeviceType {
        match self {
            Device::Cpu => DeviceType::Cpu,
            Device::Cuda(_) => DeviceType::Cuda,
        }
    }
    /// `true` for [`Device::Cpu`].
    pub fn is_cpu(self) -> bool {
        matches!(self, Device::Cpu)
    }
    /// `true` for [`Device::Cuda`].
    pub fn is_cuda(self) -> bool {
        matches!(self, Device::Cuda(_))
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Cpu => write!(f, "cpu"),
            Device::Cuda(i) => write!(f, "cuda:{i}"),
        }
    }
}
