//! The explorer's background threads (workers, the live re-analysis, rayon's pool) run below
//! the drawing thread's scheduling priority, so that on a machine with few cores a frame is
//! not preempted halfway by an analysis: at 10k lines/s on two cores, one frame in ~100 took
//! twice its CPU time in wall time (docs/LIVE.md). Throughput is unchanged while the drawing
//! thread sleeps, which is most of the time.

/// Nice value added to a background thread's (capped at 19, the lowest priority).
pub const BACKGROUND_NICE_STEP: i32 = 10;

/// Lower the calling thread's priority by [`BACKGROUND_NICE_STEP`] nice levels (Linux, where
/// each thread has its own nice value; elsewhere nothing). Raising a nice value needs no
/// privilege; if the call fails the thread simply keeps its priority.
pub fn lower_current_thread() {
    #[cfg(target_os = "linux")]
    if let Some(now) = current_nice() {
        // SAFETY: setpriority only sets the calling thread's scheduling attribute.
        unsafe {
            let _ = libc::setpriority(
                libc::PRIO_PROCESS,
                libc::gettid() as libc::id_t,
                (now + BACKGROUND_NICE_STEP).min(19),
            );
        }
    }
}

/// [`lower_current_thread`] on every thread of rayon's global pool (which the analyses use).
pub fn lower_rayon_pool() {
    rayon::broadcast(|_| lower_current_thread());
}

/// The calling thread's nice value (Linux; `None` elsewhere or on error).
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn current_nice() -> Option<i32> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: gettid and getpriority only read the calling thread's attributes; errno is
        // per thread, cleared first since -1 is also a valid nice value.
        unsafe {
            *libc::__errno_location() = 0;
            let now = libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t);
            if now == -1 && *libc::__errno_location() != 0 {
                return None;
            }
            Some(now)
        }
    }
    #[cfg(not(target_os = "linux"))]
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(target_os = "linux")]
    fn a_background_thread_runs_lower_and_the_caller_keeps_its_priority() {
        let before = current_nice().expect("nice value readable");
        let (inside, after) = std::thread::spawn(move || {
            lower_current_thread();
            let inside = current_nice();
            (inside, before)
        })
        .join()
        .expect("thread ran");
        assert_eq!(inside, Some((after + BACKGROUND_NICE_STEP).min(19)));
        assert_eq!(
            current_nice(),
            Some(before),
            "only the calling thread changes"
        );
    }
}
