//! Shared helpers of the dump tests: seeded gradient data rounded to each dtype, safetensors
//! and .npy writers, and the direct f64 reference of the reduction.
#![allow(dead_code)]

use copus::compute::DType;
use rand::{RngExt, SeedableRng, rngs::StdRng};
use safetensors::{Dtype, View};
use std::borrow::Cow;
use std::collections::HashMap;
use std::path::Path;

/// A tensor of one file: name, dtype, shape, values (already exactly representable in dtype).
#[derive(Clone, Debug)]
pub struct T {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub vals: Vec<f64>,
}

pub fn rng(seed: u64) -> StdRng {
    StdRng::seed_from_u64(seed)
}

/// Round to the dtype (so that the file holds exactly these values).
pub fn round(dtype: DType, x: f64) -> f64 {
    match dtype {
        DType::F32 => x as f32 as f64,
        DType::F16 => half::f16::from_f64(x).to_f64(),
        DType::BF16 => half::bf16::from_f64(x).to_f64(),
    }
}

/// Values of a mean gradient: shared signal `mu[i]` plus per-file noise, rounded to dtype.
pub fn grad(r: &mut StdRng, dtype: DType, mu: &[f64], noise: f64) -> Vec<f64> {
    mu.iter()
        .map(|m| round(dtype, m + noise * r.random_range(-1.0..1.0)))
        .collect()
}

pub fn encode(dtype: DType, vals: &[f64]) -> Vec<u8> {
    let mut out = Vec::with_capacity(vals.len() * dtype.size());
    for &v in vals {
        match dtype {
            DType::F32 => out.extend_from_slice(&(v as f32).to_le_bytes()),
            DType::F16 => out.extend_from_slice(&half::f16::from_f64(v).to_le_bytes()),
            DType::BF16 => out.extend_from_slice(&half::bf16::from_f64(v).to_le_bytes()),
        }
    }
    out
}

struct Raw(Dtype, Vec<usize>, Vec<u8>);
impl View for &Raw {
    fn dtype(&self) -> Dtype {
        self.0
    }
    fn shape(&self) -> &[usize] {
        &self.1
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(&self.2)
    }
    fn data_len(&self) -> usize {
        self.2.len()
    }
}

pub fn st_dtype(d: DType) -> Dtype {
    match d {
        DType::F32 => Dtype::F32,
        DType::F16 => Dtype::F16,
        DType::BF16 => Dtype::BF16,
    }
}

/// Serialize tensors with the safetensors crate; `samples` goes to `__metadata__`.
pub fn st_bytes(tensors: &[T], samples: Option<&str>) -> Vec<u8> {
    let raws: Vec<(String, Raw)> = tensors
        .iter()
        .map(|t| {
            (
                t.name.clone(),
                Raw(st_dtype(t.dtype), t.shape.clone(), encode(t.dtype, &t.vals)),
            )
        })
        .collect();
    let meta = samples.map(|s| HashMap::from([("samples".to_string(), s.to_string())]));
    safetensors::serialize(raws.iter().map(|(n, r)| (n.as_str(), r)), meta).expect("serialize")
}

pub fn write_st(path: &Path, tensors: &[T], samples: Option<&str>) {
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    std::fs::write(path, st_bytes(tensors, samples)).expect("write");
}

/// Write one .npy (format 1.0) file.
pub fn write_npy(path: &Path, t: &T) {
    let descr = match t.dtype {
        DType::F32 => "<f4",
        DType::F16 => "<f2",
        DType::BF16 => panic!("numpy has no bf16"),
    };
    let shape = match t.shape.len() {
        1 => format!("({},)", t.shape[0]),
        _ => format!(
            "({})",
            t.shape
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let mut h = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    while (10 + h.len() + 1) % 64 != 0 {
        h.push(' ');
    }
    h.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(h.len() as u16).to_le_bytes());
    out.extend_from_slice(h.as_bytes());
    out.extend_from_slice(&encode(t.dtype, &t.vals));
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    std::fs::write(path, out).expect("write npy");
}

/// Direct f64 reference: files[k] = tensors of file k (same order), samples[k].
/// Returns (sq_small, sq_big) per tensor.
pub fn reference(files: &[Vec<T>], samples: &[f64]) -> Vec<(f64, f64)> {
    let total: f64 = samples.iter().sum();
    let k = files.len() as f64;
    (0..files[0].len())
        .map(|i| {
            let n = files[0][i].vals.len();
            let small: f64 = files
                .iter()
                .map(|f| f[i].vals.iter().map(|x| x * x).sum::<f64>())
                .sum::<f64>()
                / k;
            let big: f64 = (0..n)
                .map(|e| {
                    let g: f64 = files
                        .iter()
                        .zip(samples)
                        .map(|(f, s)| s / total * f[i].vals[e])
                        .sum();
                    g * g
                })
                .sum();
            (small, big)
        })
        .collect()
}

pub fn rel(a: f64, b: f64) -> f64 {
    (a - b).abs() / b.abs().max(1e-300)
}
