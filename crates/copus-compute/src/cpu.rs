//! The CPU backend: segments reduced in parallel on rayon's pool, each by the vectorised
//! loops of `cpu_kernel`. Results are per segment and summed by the caller in a fixed order,
//! so they do not depend on the thread count or scheduling.

use super::cpu_kernel::{EmaSlices, reduce_segment};
use super::ema::EmaStorage;
use super::{Backend, ComputeError, EmaParams, EmaState, Segment, Sums, validate};
use rayon::prelude::*;

/// CPU reduction on the global rayon pool.
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuBackend;

impl CpuBackend {
    /// A CPU backend using rayon's global thread pool.
    pub fn new() -> Self {
        CpuBackend
    }
}

impl Backend for CpuBackend {
    fn name(&self) -> String {
        format!("cpu ({} threads)", rayon::current_num_threads())
    }

    fn reduce(
        &self,
        segments: &[Segment<'_>],
        weights: &[f64],
        ema: Option<(&mut EmaState, EmaParams)>,
    ) -> Result<Vec<Sums>, ComputeError> {
        validate(segments, weights)?;
        let Some((state, params)) = ema else {
            return Ok(segments
                .par_iter()
                .map(|s| reduce_segment(s, weights, None))
                .collect());
        };
        let len = state.len;
        #[allow(irrefutable_let_patterns)]
        let EmaStorage::Host { mean, sq } = &mut state.storage else {
            return Err(ComputeError::Invalid(
                "EMA state was created by another backend".into(),
            ));
        };
        // Hand each segment its own disjoint window of the state.
        let mut windows: Vec<EmaSlices<'_>> = Vec::with_capacity(segments.len());
        let (mut mean_rest, mut sq_rest, mut at) = (&mut mean[..], &mut sq[..], 0usize);
        for s in segments {
            if s.offset < at || s.offset + s.len() > len {
                return Err(ComputeError::Invalid(format!(
                    "segment at element {} (+{}) overlaps or leaves the EMA state of {len}",
                    s.offset,
                    s.len()
                )));
            }
            let skip = s.offset - at;
            let (_, m) = std::mem::take(&mut mean_rest).split_at_mut(skip);
            let (_, q) = std::mem::take(&mut sq_rest).split_at_mut(skip);
            let (m, m_rest) = m.split_at_mut(s.len());
            let (q, q_rest) = q.split_at_mut(s.len());
            windows.push(Some((m, q, params)));
            (mean_rest, sq_rest, at) = (m_rest, q_rest, s.offset + s.len());
        }
        Ok(segments
            .par_iter()
            .zip(windows.into_par_iter())
            .map(|(s, win)| reduce_segment(s, weights, win))
            .collect())
    }

    fn new_ema_state(&self, len: usize) -> Result<EmaState, ComputeError> {
        Ok(EmaState::host(len))
    }
}
