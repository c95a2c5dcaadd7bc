//! Compute backends for the gradient-dump reduction (CPU with rayon; CUDA with cudarc behind
//! the `cuda` feature). SKELETON: filled in by the dumps-and-backends issue.
