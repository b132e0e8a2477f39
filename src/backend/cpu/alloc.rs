//! The CPU's caching allocator, over segments from the system allocator
//! (64-byte aligned, zeroed).

use crate::alloc::caching::{CachingAllocator, SegmentSource};
use crate::device::Device;
use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::sync::LazyLock;

/// Alignment of every CPU segment (a cache line, and enough for AVX-512 loads).
pub const CPU_ALIGN: usize = 64;

pub(crate) struct SystemSource;

impl SegmentSource for SystemSource {
    fn device(&self) -> Device {
        Device::Cpu
    }
    fn alloc_segment(&self, bytes: usize) -> Option<usize> {
        let layout = Layout::from_size_align(bytes, CPU_ALIGN).ok()?;
        // Zeroed, so that every byte a kernel can ever read is initialised
        // (large zeroed allocations are fresh mmap pages: no memset cost).
        // SAFETY: `bytes` is never 0 (segments are at least 2 MiB).
        let p = unsafe { alloc_zeroed(layout) };
        (!p.is_null()).then_some(p as usize)
    }
    unsafe fn free_segment(&self, addr: usize, bytes: usize) {
        let layout =
            Layout::from_size_align(bytes, CPU_ALIGN).expect("layout was valid at allocation");
        // SAFETY: the caller guarantees (addr, bytes) came from `alloc_segment`.
        unsafe { dealloc(addr as *mut u8, layout) }
    }
    fn mem_info(&self) -> Option<(usize, usize)> {
        let text = std::fs::read_to_string("/proc/meminfo").ok()?;
        let field = |name: &str| -> Option<usize> {
            let line = text.lines().find(|l| l.starts_with(name))?;
            let kb: usize = line.split_whitespace().nth(1)?.parse().ok()?;
            Some(kb * 1024)
        };
        Some((field("MemAvailable:")?, field("MemTotal:")?))
    }
}

static CPU: LazyLock<CachingAllocator<SystemSource>> =
    LazyLock::new(|| CachingAllocator::new(SystemSource));

pub(crate) fn allocator() -> &'static CachingAllocator<SystemSource> {
    &CPU
}
