//! The CUDA backend's staging arithmetic, kept free of CUDA so that it is compiled and tested
//! in every build: how segments are cut into launches that fit one pinned staging buffer, how
//! the K parts of a launch are laid out in it, which lane (stream) and which slot of the
//! partials buffer each launch uses.

/// Bytes per pinned staging buffer (all K parts of one launch).
pub const STAGE_BYTES: usize = 64 << 20;
/// Threads per block (must match COPUS_BLOCK in the kernel).
pub const THREADS: u32 = 256;
/// Most blocks per launch (each writes 4 f64 partials).
pub const MAX_BLOCKS: usize = 1024;
/// Alignment of each part inside a staging buffer, bytes.
pub const ALIGN: usize = 256;
/// Staging lanes (pinned buffer + device buffer + stream), used round-robin.
pub const LANES: usize = 2;
/// f64 partials per launch slot (4 per block).
pub const SLOT_F64: usize = MAX_BLOCKS * 4;

/// One launch: element range [lo, hi) of segment `seg`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Job {
    /// Index of the segment in the batch.
    pub seg: usize,
    /// First element of the range.
    pub lo: usize,
    /// One past the last element.
    pub hi: usize,
}

#[cfg(test)]
impl Job {
    /// Elements in the launch.
    pub fn len(&self) -> usize {
        self.hi - self.lo
    }

    /// True for an empty range (never planned).
    pub fn is_empty(&self) -> bool {
        self.hi == self.lo
    }
}

/// Most elements of `elem_size` bytes per part when K parts share one staging buffer, each
/// part starting on an ALIGN boundary. `None` when K parts cannot fit (K > STAGE_BYTES/ALIGN).
pub fn elems_per_launch(k: usize, elem_size: usize) -> Option<usize> {
    let per_part = (STAGE_BYTES / k.max(1)) & !(ALIGN - 1);
    let n = per_part / elem_size.max(1);
    (n > 0).then_some(n)
}

/// Cut segments of the given (element count, element size) into launches, in order.
pub fn plan(segments: &[(usize, usize)], k: usize) -> Result<Vec<Job>, String> {
    let mut jobs = Vec::new();
    for (i, &(len, size)) in segments.iter().enumerate() {
        if len == 0 {
            continue;
        }
        let per = elems_per_launch(k, size).ok_or_else(|| {
            format!(
                "{k} gradient files per step do not fit one {} MiB staging buffer",
                STAGE_BYTES >> 20
            )
        })?;
        let mut lo = 0;
        while lo < len {
            let hi = (lo + per).min(len);
            jobs.push(Job { seg: i, lo, hi });
            lo = hi;
        }
    }
    Ok(jobs)
}

/// Bytes between the starts of consecutive parts in the staging buffer for a launch of `n`
/// elements of `size` bytes (the kernel's part stride, in bytes).
pub fn part_stride_bytes(n: usize, size: usize) -> usize {
    (n * size).next_multiple_of(ALIGN)
}

/// Bytes one worker copies at a time when staging (large enough to stream, small enough that
/// the cores share a 64 MiB launch evenly).
const STAGE_PIECE: usize = 1 << 20;

/// Copy bytes `range` of every part into `host`, part p at `p * stride_bytes`, on all cores:
/// the mapped files are read (and their pages faulted in) in parallel, which a single thread
/// cannot do at the speed of the copy to the GPU. `host` holds K strides exactly.
pub fn stage(host: &mut [u8], parts: &[&[u8]], range: std::ops::Range<usize>, stride_bytes: usize) {
    use rayon::prelude::*;
    debug_assert_eq!(host.len(), parts.len() * stride_bytes);
    host.par_chunks_mut(stride_bytes.max(1))
        .zip(parts.par_iter())
        .for_each(|(dst, part)| {
            let src = &part[range.clone()];
            dst[..src.len()]
                .par_chunks_mut(STAGE_PIECE)
                .zip(src.par_chunks(STAGE_PIECE))
                .for_each(|(d, s)| d.copy_from_slice(s));
        });
}

/// Blocks of a launch of `n` elements (each thread strides over the range).
pub fn blocks(n: usize) -> usize {
    n.div_ceil(THREADS as usize).clamp(1, MAX_BLOCKS)
}

/// The lane that runs launch `j`.
pub fn lane_of(j: usize) -> usize {
    j % LANES
}

/// Offset (in f64) of launch `j`'s partials in its lane's output buffer.
pub fn slot_of(j: usize) -> usize {
    j / LANES * SLOT_F64
}

/// Launches per lane for `jobs` launches, i.e. how many slots each lane's output buffer needs.
pub fn per_lane(jobs: usize) -> [usize; LANES] {
    [jobs.div_ceil(LANES), jobs / LANES]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(segs: &[(usize, usize)], k: usize) {
        let jobs = plan(segs, k).expect("plan");
        // Every segment is covered exactly once, in order, by contiguous launches.
        for (i, &(len, size)) in segs.iter().enumerate() {
            let mine: Vec<_> = jobs.iter().filter(|j| j.seg == i).collect();
            let mut at = 0;
            for j in &mine {
                assert_eq!(j.lo, at);
                assert!(!j.is_empty());
                at = j.hi;
                // K parts at their aligned stride fit the staging buffer.
                let stride = part_stride_bytes(j.len(), size);
                assert_eq!(stride % ALIGN, 0);
                assert!(stride >= j.len() * size);
                assert!(k * stride <= STAGE_BYTES, "k {k} stride {stride}");
                assert_eq!(stride % size, 0, "the kernel's stride is whole elements");
                let b = blocks(j.len());
                assert!((1..=MAX_BLOCKS).contains(&b));
            }
            assert_eq!(at, len);
        }
        // Slots of each lane are distinct and inside the lane's output buffer.
        let lanes = per_lane(jobs.len());
        assert_eq!(lanes.iter().sum::<usize>(), jobs.len());
        let mut seen = std::collections::HashSet::new();
        for j in 0..jobs.len() {
            let (l, s) = (lane_of(j), slot_of(j));
            assert!(s + SLOT_F64 <= lanes[l] * SLOT_F64, "launch {j}");
            assert!(seen.insert((l, s)));
        }
    }

    #[test]
    fn launches_cover_segments_and_fit_the_staging_buffers() {
        for k in [1, 2, 3, 5, 8, 64, 1000] {
            for size in [2, 4] {
                check(
                    &[(1, size), (100_003, size), (0, size), (40_000_000, size)],
                    k,
                );
            }
        }
        check(&[(5, 4), (7, 2), (STAGE_BYTES, 2)], 4);
    }

    #[test]
    fn a_large_tensor_splits_at_the_staging_size() {
        // 4 F32 files: 16 MiB of each file per launch.
        let per = elems_per_launch(4, 4).expect("fits");
        assert_eq!(per, (16 << 20) / 4);
        let jobs = plan(&[(per * 2 + 1, 4)], 4).expect("plan");
        assert_eq!(jobs.len(), 3);
        assert_eq!(jobs[2].len(), 1);
    }

    #[test]
    fn too_many_files_is_an_error_not_an_overflow() {
        let k = STAGE_BYTES / ALIGN + 1;
        assert_eq!(elems_per_launch(k, 4), None);
        assert!(plan(&[(10, 4)], k).unwrap_err().contains("staging buffer"));
        assert!(plan(&[(10, 4)], STAGE_BYTES / ALIGN).is_ok());
        // An empty batch plans nothing, whatever K.
        assert_eq!(plan(&[(0, 4)], k), Ok(vec![]));
    }

    #[test]
    fn staging_places_each_part_at_its_stride() {
        // Three parts of 2.5 pieces each (so the parallel pieces have a ragged end), a range
        // that starts mid-part, and a stride with padding after each part's bytes.
        let len = STAGE_PIECE * 5 / 2 + 3;
        let parts: Vec<Vec<u8>> = (0..3u8)
            .map(|p| (0..len).map(|i| (i as u8).wrapping_mul(7) ^ p).collect())
            .collect();
        let refs: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
        let range = 5..len;
        let stride = (range.len()).next_multiple_of(ALIGN);
        let mut host = vec![0xAAu8; 3 * stride];
        stage(&mut host, &refs, range.clone(), stride);
        for (p, part) in parts.iter().enumerate() {
            let at = p * stride;
            assert_eq!(
                &host[at..at + range.len()],
                &part[range.clone()],
                "part {p}"
            );
            assert!(
                host[at + range.len()..at + stride]
                    .iter()
                    .all(|&b| b == 0xAA)
            );
        }
    }

    #[test]
    fn lanes_alternate_and_slots_advance_every_other_launch() {
        assert_eq!((0..5).map(lane_of).collect::<Vec<_>>(), [0, 1, 0, 1, 0]);
        assert_eq!(
            (0..5).map(slot_of).collect::<Vec<_>>(),
            [0, 0, SLOT_F64, SLOT_F64, 2 * SLOT_F64]
        );
        assert_eq!(per_lane(5), [3, 2]);
        assert_eq!(per_lane(0), [0, 0]);
        assert_eq!(blocks(0), 1);
        assert_eq!(blocks(257), 2);
        assert_eq!(blocks(usize::MAX / 2), MAX_BLOCKS);
    }
}
