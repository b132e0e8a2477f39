//! The CPU's caching allocator, over segments from the system (zeroed).
//!
//! On Linux a segment is an anonymous `mmap` aligned to 2 MiB and marked
//! `MADV_HUGEPAGE`, so that the kernel backs it with transparent huge pages
//! where it can (the default `madvise` mode of most distributions gives
//! huge pages only to memory that asks). Segments are reused by the caching
//! allocator for the life of the process, so the page faults (one per
//! 2 MiB instead of one per 4 KiB) and the TLB misses of every later
//! kernel shrink together: a large sum runs faster on huge pages
//! (Note [huge pages] in `bench/results/ops-why.md`).
//! `TENSORSCOPE_HUGEPAGES=0` (read once) leaves the advice out; where the
//! kernel has transparent huge pages off, the advice is a no-op. Elsewhere
//! segments come from the system allocator (64-byte aligned).

use crate::alloc::caching::{CachingAllocator, SegmentSource};
use crate::device::Device;
#[cfg(not(target_os = "linux"))]
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
        if !fits_in_machine(bytes, *MACHINE_BYTES) {
            return None;
        }
        #[cfg(target_os = "linux")]
        {
            pages::map(bytes, *HUGE_PAGES)
        }
        #[cfg(not(target_os = "linux"))]
        {
            let layout = Layout::from_size_align(bytes, CPU_ALIGN).ok()?;
            // Zeroed, so that every byte a kernel can ever read is initialised
            // (large zeroed allocations are fresh mmap pages: no memset cost).
            // SAFETY: `bytes` is never 0 (segments are at least 2 MiB).
            let p = unsafe { alloc_zeroed(layout) };
            (!p.is_null()).then_some(p as usize)
        }
    }
    unsafe fn free_segment(&self, addr: usize, bytes: usize) {
        #[cfg(target_os = "linux")]
        // SAFETY: the caller guarantees (addr, bytes) came from `alloc_segment`,
        // which mapped exactly that range.
        unsafe {
            pages::unmap(addr, bytes)
        }
        #[cfg(not(target_os = "linux"))]
        {
            let layout =
                Layout::from_size_align(bytes, CPU_ALIGN).expect("layout was valid at allocation");
            // SAFETY: the caller guarantees (addr, bytes) came from `alloc_segment`.
            unsafe { dealloc(addr as *mut u8, layout) }
        }
    }
    fn mem_info(&self) -> Option<(usize, usize)> {
        let [available, total] = meminfo(["MemAvailable:", "MemTotal:"])?;
        Some((available?, total?))
    }
}

/// Whether segments ask for transparent huge pages: unless
/// `TENSORSCOPE_HUGEPAGES=0` (read once).
#[cfg(target_os = "linux")]
static HUGE_PAGES: LazyLock<bool> =
    LazyLock::new(|| std::env::var("TENSORSCOPE_HUGEPAGES").map_or(true, |v| v.trim() != "0"));

/// Anonymous mappings for the segments (Linux).
#[cfg(target_os = "linux")]
mod pages {
    /// The huge page size the segments are aligned to (x86-64 and aarch64
    /// with 4 KiB base pages; elsewhere the alignment is merely generous).
    pub(super) const HUGE: usize = 2 << 20;
    // Every segment starts on a HUGE boundary: the alignment promised.
    const _: () = assert!(HUGE.is_multiple_of(super::CPU_ALIGN));

    /// A fresh zeroed mapping of `bytes` (rounded up to whole pages by the
    /// kernel), starting on a `HUGE` boundary, advised `MADV_HUGEPAGE`
    /// when `huge`; `None` when the kernel refuses.
    pub(super) fn map(bytes: usize, huge: bool) -> Option<usize> {
        let size = bytes.checked_next_multiple_of(page())?;
        // Room to slide the start up to a HUGE boundary.
        let len = size.checked_add(HUGE)?;
        // SAFETY: an anonymous private mapping at an address of the kernel's
        // choosing: it aliases nothing of ours.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return None;
        }
        let start = p as usize;
        let aligned = start.next_multiple_of(HUGE);
        let end = aligned + size;
        // SAFETY: `start` is page-aligned (mmap), and so are `aligned`, `size`
        // and `len`; `start <= aligned < start + HUGE`, so the head
        // `[start, aligned)` and the tail `[end, start + len)` are disjoint
        // page ranges inside the mapping just made, outside the segment
        // `[aligned, end)`, and nothing refers to them.
        unsafe {
            if aligned > start {
                libc::munmap(p, aligned - start);
            }
            if start + len > end {
                libc::munmap(end as *mut libc::c_void, start + len - end);
            }
            if huge {
                // Advice only: failure (no THP in this kernel) changes nothing.
                libc::madvise(aligned as *mut libc::c_void, size, libc::MADV_HUGEPAGE);
            }
        }
        Some(aligned)
    }

    /// Unmaps a segment of [`map`].
    ///
    /// # Safety
    /// `(addr, bytes)` came from one `map` call and nothing uses it any more.
    pub(super) unsafe fn unmap(addr: usize, bytes: usize) {
        // SAFETY: the caller's contract: the range is the live mapping `map`
        // returned (the kernel rounds `bytes` up to the page, as `map` did).
        unsafe { libc::munmap(addr as *mut libc::c_void, bytes) };
    }

    /// The base page size.
    fn page() -> usize {
        // SAFETY: `sysconf` reads a constant of the system.
        let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        usize::try_from(p).ok().filter(|&p| p > 0).unwrap_or(4096)
    }
}

/// The named fields of /proc/meminfo, in bytes (each `None` if absent);
/// `None` where the file cannot be read.
fn meminfo<const N: usize>(names: [&str; N]) -> Option<[Option<usize>; N]> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    Some(names.map(|name| {
        let line = text.lines().find(|l| l.starts_with(name))?;
        let kb: usize = line.split_whitespace().nth(1)?.parse().ok()?;
        kb.checked_mul(1024)
    }))
}

/// The machine's physical memory plus its swap (`MemTotal + SwapTotal` of
/// /proc/meminfo), read once; `None` where that cannot be read.
static MACHINE_BYTES: LazyLock<Option<usize>> = LazyLock::new(|| {
    let [total, swap] = meminfo(["MemTotal:", "SwapTotal:"])?;
    total?.checked_add(swap.unwrap_or(0))
});

/// `false` for a segment larger than the whole machine (`machine`: physical
/// memory plus swap, in bytes), which could never be backed: the allocator
/// then reports `OutOfMemory` instead of asking the system. Where the
/// kernel overcommits (`vm.overcommit_memory = 1`, as on the GPU machines
/// this project is tested on) the system grants such a request and the
/// process is killed when the pages are touched: a hostile-argument test
/// asked for 433 GB through `arange` on a 128 GiB machine and was
/// OOM-killed there (PyTorch is killed the same way; GUIDE 10 lists the
/// difference). Requests that fit are left to the system, as before.
pub(crate) fn fits_in_machine(bytes: usize, machine: Option<usize>) -> bool {
    machine.is_none_or(|m| bytes <= m)
}

static CPU: LazyLock<CachingAllocator<SystemSource>> =
    LazyLock::new(|| CachingAllocator::new(SystemSource));

pub(crate) fn allocator() -> &'static CachingAllocator<SystemSource> {
    &CPU
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(target_os = "linux")]
    #[test]
    fn a_segment_larger_than_the_machine_is_refused_without_asking_the_system() {
        assert!(fits_in_machine(1 << 30, Some(1 << 30)));
        assert!(!fits_in_machine((1 << 30) + 1, Some(1 << 30)));
        assert!(
            fits_in_machine(usize::MAX, None),
            "unknown size: ask the system"
        );
        let m = MACHINE_BYTES.expect("/proc/meminfo on Linux");
        assert!(m >= 1 << 28, "{m}");
        // One byte past physical memory plus swap: refused here, before any
        // mmap, whatever the kernel's overcommit policy.
        assert_eq!(SystemSource.alloc_segment(m + 1), None);
    }

    /// Segments are 2 MiB aligned, zeroed, writable to their last byte,
    /// and given back whole, with and without the huge page advice (a
    /// size that is not a whole number of pages included).
    #[cfg(target_os = "linux")]
    #[test]
    fn segments_are_aligned_zeroed_mappings() {
        for (bytes, huge) in [(2 << 20, true), (6 << 20, false), ((2 << 20) + 100, true)] {
            let addr = pages::map(bytes, huge).expect("a few MiB");
            assert_eq!(addr % pages::HUGE, 0, "{bytes} {huge}");
            // SAFETY: `map` returned `bytes` fresh, writable bytes at `addr`.
            let seg = unsafe { std::slice::from_raw_parts_mut(addr as *mut u8, bytes) };
            assert!(seg.iter().all(|&b| b == 0));
            seg[0] = 1;
            seg[bytes - 1] = 2;
            assert_eq!((seg[0], seg[bytes - 1]), (1, 2));
            // SAFETY: the mapping of this iteration, unused from here on.
            unsafe { pages::unmap(addr, bytes) };
        }
    }
}
