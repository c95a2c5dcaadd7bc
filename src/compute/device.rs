//! Device selection: `--device auto|cpu|cuda`.
//!
//! `auto` probes the CUDA driver library, NVRTC and the device count (without panicking:
//! cudarc panics when a library is missing, so presence is checked first and the rest runs
//! under `catch_unwind`) and falls back to the CPU with a note the caller shows. Call it before
//! any terminal set-up.

use super::{Backend, ComputeError, CpuBackend};

/// Which backend the user asked for.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Default,
    clap::ValueEnum,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Device {
    /// CUDA when a driver, NVRTC and a GPU are present, else the CPU (with a note).
    #[default]
    Auto,
    /// The CPU backend (rayon).
    Cpu,
    /// The CUDA backend; an error when it cannot start.
    Cuda,
}

/// The chosen backend and, when `auto` fell back to the CPU, why (a line to show the user).
pub struct Selected {
    /// The backend to reduce with.
    pub backend: Box<dyn Backend>,
    /// A visible note, e.g. "CUDA unavailable (no libcuda.so); using the CPU".
    pub note: Option<String>,
}

impl std::fmt::Debug for Selected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Selected")
            .field("backend", &self.backend.name())
            .field("note", &self.note)
            .finish()
    }
}

/// Pick a backend for `device`. Only `Device::Cuda` can fail.
pub fn select(device: Device) -> Result<Selected, ComputeError> {
    match device {
        Device::Cpu => Ok(cpu(None)),
        Device::Cuda => Ok(Selected {
            backend: cuda_backend()?,
            note: None,
        }),
        Device::Auto => match cuda_backend() {
            Ok(backend) => Ok(Selected {
                backend,
                note: None,
            }),
            Err(e) => Ok(cpu(Some(format!("{e}; using the CPU")))),
        },
    }
}

fn cpu(note: Option<String>) -> Selected {
    Selected {
        backend: Box::new(CpuBackend::new()),
        note,
    }
}

#[cfg(not(feature = "cuda"))]
fn cuda_backend() -> Result<Box<dyn Backend>, ComputeError> {
    Err(ComputeError::Cuda(
        "this copus was built without CUDA support (cargo feature `cuda`)".into(),
    ))
}

#[cfg(feature = "cuda")]
fn cuda_backend() -> Result<Box<dyn Backend>, ComputeError> {
    probe_cuda()?;
    Ok(Box::new(super::cuda::CudaBackend::new(0)?))
}

/// True when the NVRTC library can be loaded (cudarc's own candidate names, e.g.
/// `libnvrtc.so.13`). Never panics.
#[cfg(feature = "cuda")]
pub fn nvrtc_present() -> bool {
    // SAFETY: only tries to dlopen candidate library names.
    std::panic::catch_unwind(|| unsafe { cudarc::nvrtc::sys::is_culib_present() }).unwrap_or(false)
}

/// Check the driver library, NVRTC and that at least one GPU is visible. Never panics.
#[cfg(feature = "cuda")]
pub fn probe_cuda() -> Result<(), ComputeError> {
    use cudarc::driver::result;
    // SAFETY: only tries to dlopen candidate library names.
    let driver = std::panic::catch_unwind(|| unsafe { cudarc::driver::sys::is_culib_present() })
        .unwrap_or(false);
    if !driver {
        return Err(ComputeError::Cuda(
            "CUDA driver library (libcuda.so) not found".into(),
        ));
    }
    if !nvrtc_present() {
        return Err(ComputeError::Cuda(
            "NVRTC library (libnvrtc.so.13) not found".into(),
        ));
    }
    let count = std::panic::catch_unwind(|| {
        result::init()?;
        result::device::get_count()
    });
    match count {
        Ok(Ok(n)) if n > 0 => Ok(()),
        Ok(Ok(_)) => Err(ComputeError::Cuda("no CUDA device visible".into())),
        Ok(Err(e)) => Err(ComputeError::Cuda(format!("CUDA driver: {e:?}"))),
        Err(_) => Err(ComputeError::Cuda("CUDA driver library is unusable".into())),
    }
}
