//! Compute backends for the gradient-dump reduction: a CPU backend (rayon, vectorised f64
//! lanes) and a CUDA backend (cudarc with dynamic loading, in the default build through the
//! `cuda` cargo feature; kernels in `kernels/*.cu`, compiled with NVRTC at run time). A build
//! without CUDA installed compiles and runs; `--device auto` uses the GPU when the probe in
//! [`device`] finds a driver, NVRTC and a device, else the CPU with a note.
//!
//! The unit of work is a [`Segment`]: the same element range of one tensor in each of the K
//! gradient files of a step. A backend reduces a batch of segments to per-segment [`Sums`]:
//! Σ_k |g_k|² and |Σ_k w_k g_k|², accumulated in f64, and optionally advances the temporal EMA
//! estimator's state ([`EmaState`]) over the same elements.

pub(crate) mod cpu;
mod cpu_kernel;
#[cfg(feature = "cuda")]
pub(crate) mod cuda;
pub mod device;
pub mod ema;
mod half_bits;
pub mod kernels;
// Only the CUDA backend launches through the staging plan (its tests run in every build).
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub(crate) mod staging;

pub use cpu::CpuBackend;
pub use device::{BackendReport, Device, Selected, backend_report, check, select};
pub use ema::{EmaParams, EmaState};

/// Element type of a gradient tensor on disk (little endian).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    /// IEEE 754 binary32.
    F32,
    /// IEEE 754 binary16.
    F16,
    /// bfloat16 (the top 16 bits of a binary32).
    BF16,
}

impl DType {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::F16 | DType::BF16 => 2,
        }
    }

    /// The safetensors spelling ("F32", "F16", "BF16").
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "F32",
            DType::F16 => "F16",
            DType::BF16 => "BF16",
        }
    }
}

/// One element range of one tensor, seen in each of the K files of a step.
///
/// `parts[k]` holds the raw little-endian bytes of file k; every part has the same length, a
/// multiple of `dtype.size()`.
#[derive(Debug, Clone)]
pub struct Segment<'a> {
    /// Element type of every part.
    pub dtype: DType,
    /// Raw bytes of the range, one slice per file (K ≥ 1).
    pub parts: Vec<&'a [u8]>,
    /// Index of the range's first element in the flattened model (all tensors of the step in
    /// processing order); used to address the EMA state.
    pub offset: usize,
}

impl Segment<'_> {
    /// Number of elements in the range.
    pub fn len(&self) -> usize {
        self.parts
            .first()
            .map_or(0, |p| p.len() / self.dtype.size())
    }

    /// True when the range holds no element.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Sums of one segment, in f64.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Sums {
    /// Σ_k |g_k|² over the segment's elements (sum over files, not the mean).
    pub sq_parts: f64,
    /// |Σ_k w_k g_k|² over the segment's elements (the big-batch gradient's squared norm).
    pub sq_big: f64,
    /// Temporal EMA estimator: Σ (EMA[g²] − EMA[g]²) after this step's update (0 without EMA).
    pub ema_noise: f64,
    /// Temporal EMA estimator: Σ EMA[g]² after this step's update (0 without EMA).
    pub ema_signal: f64,
}

impl std::ops::Add for Sums {
    type Output = Sums;
    /// Element-wise sum of two partial results.
    fn add(self, o: Sums) -> Sums {
        Sums {
            sq_parts: self.sq_parts + o.sq_parts,
            sq_big: self.sq_big + o.sq_big,
            ema_noise: self.ema_noise + o.ema_noise,
            ema_signal: self.ema_signal + o.ema_signal,
        }
    }
}

impl Sums {
    /// True when every field is finite (a NaN or ±Inf element makes the sums non-finite).
    pub fn is_finite(&self) -> bool {
        self.sq_parts.is_finite()
            && self.sq_big.is_finite()
            && self.ema_noise.is_finite()
            && self.ema_signal.is_finite()
    }
}

/// Why a backend could not reduce a batch.
#[derive(Debug, thiserror::Error)]
pub enum ComputeError {
    /// The segments or weights are inconsistent (a caller bug or corrupt input).
    #[error("invalid reduction input: {0}")]
    Invalid(String),
    /// The CUDA driver, NVRTC or a kernel failed.
    #[error("CUDA: {0}")]
    Cuda(String),
}

/// A reduction backend. Implementations must give the same sums up to f64 rounding.
pub trait Backend: Send + Sync {
    /// Short human-readable name ("cpu (2 threads)", "cuda:0 NVIDIA H200").
    fn name(&self) -> String;

    /// Reduce a batch of segments with the per-file weights `weights[k]` (w_k = n_k / N, the
    /// file's share of the step's samples); one [`Sums`] per segment, in order.
    ///
    /// With `ema = Some((state, params))` the temporal EMA state is advanced with this step's
    /// big-batch gradient over the segments' elements and the EMA fields of [`Sums`] are filled.
    fn reduce(
        &self,
        segments: &[Segment<'_>],
        weights: &[f64],
        ema: Option<(&mut EmaState, EmaParams)>,
    ) -> Result<Vec<Sums>, ComputeError>;

    /// Fresh EMA state for a model of `len` elements (two f32 vectors: 8 bytes per element).
    fn new_ema_state(&self, len: usize) -> Result<EmaState, ComputeError>;

    /// Elements per segment this backend works best with (callers split tensors into
    /// segments of about this size; the CPU wants many small ones for load balance, the GPU
    /// few large ones to amortise launches).
    fn preferred_segment_elems(&self) -> usize {
        1 << 16
    }

    /// Bytes (all K parts together) a caller should hand over per [`Backend::reduce`] call:
    /// the bound on the data in flight. A GPU wants several staging buffers' worth, so that
    /// staging one launch on the host overlaps the copy and kernel of the one before.
    fn preferred_wave_bytes(&self) -> usize {
        64 << 20
    }

    /// Copy baselines a benchmark shows beside this backend's reduction of `bytes` bytes:
    /// (what, seconds) for each, e.g. the host-to-device copy that bounds a GPU's reduction
    /// and the device's own copy bandwidth. Empty when data is reduced where it lies (CPU).
    fn copy_baselines(&self, _bytes: usize) -> Vec<(String, Result<f64, ComputeError>)> {
        Vec::new()
    }
}

/// Check that a batch is well formed: K ≥ 1 equal-length parts per segment, K weights.
pub(crate) fn validate(segments: &[Segment<'_>], weights: &[f64]) -> Result<(), ComputeError> {
    for s in segments {
        if s.parts.len() != weights.len() {
            return Err(ComputeError::Invalid(format!(
                "{} parts for {} weights",
                s.parts.len(),
                weights.len()
            )));
        }
        let n = s.parts.first().map_or(0, |p| p.len());
        if n % s.dtype.size() != 0 || s.parts.iter().any(|p| p.len() != n) {
            return Err(ComputeError::Invalid(
                "parts of unequal or misaligned length".into(),
            ));
        }
    }
    Ok(())
}
