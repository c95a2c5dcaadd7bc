//! CUDA kernel sources, embedded from `kernels/*.cu` and compiled with NVRTC at run time by
//! the CUDA backend (feature `cuda`). Listed here so tests can compile every one of them.

/// Every kernel file: (file name, source text, entry points it must export).
pub const KERNELS: &[(&str, &str, &[&str])] = &[(
    "reduce.cu",
    include_str!("../../../kernels/reduce.cu"),
    &["copus_reduce_f32", "copus_reduce_f16", "copus_reduce_bf16"],
)];

/// Compile one kernel source to PTX with NVRTC.
///
/// NVRTC must be loadable (`libnvrtc.so.13` on the loader path); check
/// [`super::device::nvrtc_present`] first, since cudarc panics when the library is missing.
#[cfg(feature = "cuda")]
pub fn compile(name: &str, src: &str) -> Result<cudarc::nvrtc::Ptx, super::ComputeError> {
    let opts = cudarc::nvrtc::CompileOptions {
        name: Some(name.to_string()),
        options: vec!["--std=c++17".into()],
        ..Default::default()
    };
    cudarc::nvrtc::compile_ptx_with_opts(src, opts)
        .map_err(|e| super::ComputeError::Cuda(format!("NVRTC failed on kernels/{name}: {e:?}")))
}
