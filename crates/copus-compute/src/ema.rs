//! State of the seed's temporal EMA estimator (`GradientNoiseScaleEstimator` in the COPUS
//! seed): element-wise exponential moving averages of the big-batch gradient g and of g²
//! across optimizer steps. Per step it reports
//! `B · Σ(EMA[g²] − EMA[g]²) / Σ EMA[g]²`.
//!
//! This measures the temporal variance of a moving target (the parameters change between
//! steps), not the within-batch gradient noise of McCandlish et al.; docs/STATISTICS.md keeps it as
//! a labelled, biased comparison estimator, never the default. Its state is two f32 vectors
//! the size of the model (8 bytes per parameter), held on the backend's device.

/// Parameters of one EMA update.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EmaParams {
    /// Decay per step (the seed uses 0.95): EMA ← decay·EMA + (1 − decay)·x.
    pub decay: f64,
    /// First step: the state is set to g and g² instead of being blended.
    pub first: bool,
}

/// Where the EMA state lives.
pub(crate) enum EmaStorage {
    /// Host vectors (CPU backend): EMA[g] and EMA[g²].
    Host { mean: Vec<f32>, sq: Vec<f32> },
    /// Device vectors (CUDA backend).
    #[cfg(feature = "cuda")]
    Device {
        mean: cudarc::driver::CudaSlice<f32>,
        sq: cudarc::driver::CudaSlice<f32>,
    },
}

/// EMA state of a model of `len()` elements, created by [`super::Backend::new_ema_state`]
/// and only usable with the backend that created it.
pub struct EmaState {
    pub(crate) len: usize,
    pub(crate) storage: EmaStorage,
}

impl std::fmt::Debug for EmaState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let place = match self.storage {
            EmaStorage::Host { .. } => "host",
            #[cfg(feature = "cuda")]
            EmaStorage::Device { .. } => "device",
        };
        write!(f, "EmaState {{ len: {}, on: {place} }}", self.len)
    }
}

impl EmaState {
    /// Host-resident state of `len` zeros.
    pub(crate) fn host(len: usize) -> Self {
        EmaState {
            len,
            storage: EmaStorage::Host {
                mean: vec![0.0; len],
                sq: vec![0.0; len],
            },
        }
    }

    /// Number of model elements the state covers.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for a zero-element model.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// The seed's estimate from the summed EMA statistics: `b · noise / signal`, or `None` when
/// the signal is below the seed's 1e-12 floor (the seed returns infinity there).
pub fn ema_estimate(noise: f64, signal: f64, b: f64) -> Option<f64> {
    (signal >= 1e-12).then(|| noise / signal * b)
}
