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

/// `mmap` only allocations of at least this many bytes (glibc's maximum for the setting).
const MMAP_THRESHOLD_BYTES: i32 = 32 << 20;
/// Trim the heap top only when this many bytes are free there.
const TRIM_THRESHOLD_BYTES: i32 = 1 << 30;

/// Apply the settings above (glibc on Linux; elsewhere nothing). Call once at start-up,
/// before threads exist; an environment variable of glibc's (`MALLOC_MMAP_THRESHOLD_`,
/// `MALLOC_TRIM_THRESHOLD_`) set by the user wins.
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
        }
    }
}
