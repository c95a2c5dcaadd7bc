//! Allocator settings for a process that builds and drops large buffers (a long run's records,
//! series, FFT blocks and JSON text: hundreds of MB in a few phases).
//!
//! glibc's defaults return memory to the kernel eagerly: allocations above a (dynamic) 128 KiB
//! – 32 MiB threshold are `mmap`ed and unmapped when freed, and the heap top is trimmed once
//! 128 KiB of it is free. Each phase then takes fresh pages again, and every first touch of a
//! page is a fault the kernel zero-fills: on `copus analyze --json` of 100k lines that was
//! half of its ≈100k page faults and about a fifth of its CPU time (BENCHMARKS.md, issue 15).
//! Raising both thresholds keeps freed memory in the heap for the next phase; the peak
//! resident size is unchanged, since what is kept is reused.
//!
//! The pages that are touched are then still taken one 4 KiB page at a time: 100k lines
//! analysed touch ≈130 MB, ≈32k faults, a quarter of the command's CPU time (issue 32).
//! [`HugePageAlloc`] asks the kernel for transparent huge pages (2 MiB, one fault each) on
//! large blocks, and the heap grows in steps of [`TOP_PAD_BYTES`] so that its new top is
//! large enough to hold them (unless an address-space limit is set); the advice only matters
//! where the kernel's THP mode is `madvise` or `always` (with `never` it is ignored).

use std::alloc::{GlobalAlloc, Layout, System};

/// `mmap` only allocations of at least this many bytes (glibc's maximum for the setting).
const MMAP_THRESHOLD_BYTES: i32 = 32 << 20;
/// Trim the heap top only when this many bytes are free there.
const TRIM_THRESHOLD_BYTES: i32 = 1 << 30;
/// Extra bytes the heap grows by whenever it must grow (glibc's default: 128 KiB).
const TOP_PAD_BYTES: i32 = 64 << 20;
/// Malloc arenas (glibc's default: 8 per core). One arena lets a block one thread freed serve
/// the next thread's request: rayon's workers allocate a phase's large buffers in turn, and
/// with an arena each they took fresh pages instead (issue 32). Small requests still come
/// from each thread's own cache without the lock.
const ARENA_MAX: i32 = 1;

/// Apply the settings above (glibc on Linux; elsewhere nothing). Call once at start-up,
/// before threads exist; an environment variable of glibc's (`MALLOC_MMAP_THRESHOLD_`,
/// `MALLOC_TRIM_THRESHOLD_`, `MALLOC_TOP_PAD_`, `MALLOC_ARENA_MAX`) set by the user wins.
pub fn tune_for_large_buffers() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let user_set = |name: &str| std::env::var_os(name).is_some();
        // SAFETY: mallopt only changes allocator parameters; called before other threads.
        unsafe {
            if !user_set("MALLOC_MMAP_THRESHOLD_") {
                libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES);
            }
            if !user_set("MALLOC_TRIM_THRESHOLD_") {
                libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES);
            }
            if !user_set("MALLOC_ARENA_MAX") {
                libc::mallopt(libc::M_ARENA_MAX, ARENA_MAX);
            }
            // Under an address-space limit (`ulimit -v`) the heap keeps growing in small
            // steps: a 64 MiB step could fail an allocation that fits the limit.
            if !user_set("MALLOC_TOP_PAD_") && address_space_unlimited() {
                libc::mallopt(libc::M_TOP_PAD, TOP_PAD_BYTES);
            }
        }
    }
}

/// Whether the process may map as much address space as it likes (no `RLIMIT_AS`).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn address_space_unlimited() -> bool {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` is a valid, writable rlimit for the duration of the call.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut limit) };
    rc == 0 && limit.rlim_cur == libc::RLIM_INFINITY
}

/// Blocks of at least this many bytes are advised to use huge pages.
const HUGE_ADVICE_MIN_BYTES: usize = 4 << 20;
/// The size (and alignment) of a transparent huge page on x86-64 and most aarch64 kernels.
const HUGE_PAGE_BYTES: usize = 2 << 20;

/// The system allocator, with every block of at least 4 MiB advised to the kernel as
/// wanting transparent huge pages (`madvise(MADV_HUGEPAGE)` over the 2 MiB-aligned pages
/// inside it). Memory is allocated, freed and moved exactly as by [`System`]; only the
/// page size the kernel backs it with changes.
#[derive(Debug, Default, Clone, Copy)]
pub struct HugePageAlloc;

/// Advise `[ptr, ptr + len)`'s whole huge pages as wanting huge pages (a hint: failures
/// are ignored, the memory stays usable either way).
fn advise_huge(ptr: *mut u8, len: usize) {
    #[cfg(target_os = "linux")]
    {
        if ptr.is_null() || len < HUGE_ADVICE_MIN_BYTES {
            return;
        }
        let start = (ptr as usize).next_multiple_of(HUGE_PAGE_BYTES);
        let end = (ptr as usize).saturating_add(len) / HUGE_PAGE_BYTES * HUGE_PAGE_BYTES;
        if end > start {
            // SAFETY: the range lies inside a block this process owns; MADV_HUGEPAGE only
            // changes how the kernel backs it, never its contents or its mapping.
            unsafe {
                libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (ptr, len);
}

// SAFETY: every call is forwarded to `System` with the same arguments; the advice does not
// change the memory's contents, size or ownership.
unsafe impl GlobalAlloc for HugePageAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's layout.
        let ptr = unsafe { System.alloc(layout) };
        advise_huge(ptr, layout.size());
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's layout.
        let ptr = unsafe { System.alloc_zeroed(layout) };
        advise_huge(ptr, layout.size());
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded; the caller guarantees `ptr` came from this allocator (System).
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded with the caller's arguments.
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        advise_huge(new, new_size);
        new
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_and_small_blocks_keep_their_contents_through_growth() {
        let a = HugePageAlloc;
        for size in [
            64usize,
            HUGE_ADVICE_MIN_BYTES,
            3 * HUGE_ADVICE_MIN_BYTES + 17,
        ] {
            let layout = Layout::from_size_align(size, 8).expect("layout");
            // SAFETY: layouts are non-zero sized; every pointer is checked and freed once
            // with the layout it was allocated (or reallocated) with.
            unsafe {
                let p = a.alloc(layout);
                assert!(!p.is_null());
                for i in 0..size {
                    *p.add(i) = (i % 251) as u8;
                }
                let bigger = 2 * size + HUGE_PAGE_BYTES;
                let q = a.realloc(p, layout, bigger);
                assert!(!q.is_null());
                assert!((0..size).all(|i| *q.add(i) == (i % 251) as u8));
                a.dealloc(q, Layout::from_size_align(bigger, 8).expect("layout"));
                let z = a.alloc_zeroed(layout);
                assert!(!z.is_null() && (0..size).all(|i| *z.add(i) == 0));
                a.dealloc(z, layout);
            }
        }
    }
}
