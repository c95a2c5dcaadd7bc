//! Synthetic gradient dumps (for `copus bench`, examples and the speed comparison): K files
//! per step whose tensors hold a shared "true gradient" plus independent per-file noise, as
//! mean gradients over `samples` samples each.

use super::error::DumpError;
use super::st_file::SAMPLES_KEY;
use crate::compute::DType;
use safetensors::{Dtype, View};
use std::borrow::Cow;
use std::collections::HashMap;
use std::path::Path;

/// What to generate.
#[derive(Debug, Clone, PartialEq)]
pub struct SynthSpec {
    /// Number of steps (`step_0` … `step_{steps-1}`).
    pub steps: u64,
    /// Gradient files per step (K).
    pub files: usize,
    /// Samples per file, written to the `"samples"` metadata key.
    pub samples: f64,
    /// Element type.
    pub dtype: DType,
    /// Element counts of the tensors, named `model.layers.<i>.weight`.
    pub tensor_elems: Vec<usize>,
    /// Seed of the generator.
    pub seed: u64,
}

impl SynthSpec {
    /// One step of K files totalling about `bytes` bytes, in tensors of at most 16 Mi elements.
    pub fn of_size(bytes: u64, files: usize, dtype: DType) -> Self {
        let elems = (bytes / (files.max(1) as u64 * dtype.size() as u64)) as usize;
        let chunk = 16 << 20;
        let mut tensor_elems = vec![chunk; elems / chunk];
        if !elems.is_multiple_of(chunk) {
            tensor_elems.push(elems % chunk);
        }
        SynthSpec {
            steps: 1,
            files,
            samples: 8.0,
            dtype,
            tensor_elems,
            seed: 1,
        }
    }
}

struct Raw {
    dtype: Dtype,
    shape: Vec<usize>,
    data: Vec<u8>,
}

impl View for &Raw {
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(&self.data)
    }
    fn data_len(&self) -> usize {
        self.data.len()
    }
}

/// SplitMix64: a fast seeded generator (bench data need not be high quality).
fn next(s: &mut u64) -> u64 {
    *s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *s;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Uniform in [-1, 1).
fn unit(s: &mut u64) -> f32 {
    (next(s) >> 40) as f32 / (1u64 << 23) as f32 - 1.0
}

/// Write the dump under `dir` (created if needed).
pub fn write_dump(dir: &Path, spec: &SynthSpec) -> Result<(), DumpError> {
    let io = |p: &Path| {
        let p = p.to_path_buf();
        move |source| DumpError::Io { path: p, source }
    };
    for step in 0..spec.steps {
        let sdir = dir.join(format!("step_{step}"));
        std::fs::create_dir_all(&sdir).map_err(io(&sdir))?;
        for k in 0..spec.files {
            let mut rng = spec.seed ^ (step << 32) ^ (k as u64).wrapping_mul(0x1234_5678_9abc);
            let mut tensors = Vec::new();
            for (i, &n) in spec.tensor_elems.iter().enumerate() {
                let mut mu_rng = spec.seed ^ (i as u64) << 8;
                let mut data = Vec::with_capacity(n * spec.dtype.size());
                for _ in 0..n {
                    let x = 0.01 * unit(&mut mu_rng) + 0.05 * unit(&mut rng);
                    match spec.dtype {
                        DType::F32 => data.extend_from_slice(&x.to_le_bytes()),
                        DType::F16 => data.extend_from_slice(&half::f16::from_f32(x).to_le_bytes()),
                        DType::BF16 => {
                            data.extend_from_slice(&half::bf16::from_f32(x).to_le_bytes())
                        }
                    }
                }
                let dtype = match spec.dtype {
                    DType::F32 => Dtype::F32,
                    DType::F16 => Dtype::F16,
                    DType::BF16 => Dtype::BF16,
                };
                tensors.push((
                    format!("model.layers.{i}.weight"),
                    Raw {
                        dtype,
                        shape: vec![n],
                        data,
                    },
                ));
            }
            let meta = HashMap::from([(SAMPLES_KEY.to_string(), spec.samples.to_string())]);
            let path = sdir.join(format!("part_{k:03}.safetensors"));
            safetensors::serialize_to_file(
                tensors.iter().map(|(n, r)| (n.as_str(), r)),
                Some(meta),
                &path,
            )
            .map_err(|e| DumpError::Header {
                path: path.clone(),
                message: format!("writing: {e:?}"),
            })?;
        }
    }
    Ok(())
}
