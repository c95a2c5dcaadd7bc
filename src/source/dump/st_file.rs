//! Reading a .safetensors header (through the `safetensors` crate over a memory map) into a
//! [`GradFile`], with errors that name the file and the tensor at fault.

use super::error::{DumpError, io};
use super::index::{GradFile, TensorEntry};
use crate::compute::DType;
use safetensors::{Dtype, SafeTensorError, SafeTensors};
use std::path::Path;

/// Metadata key holding the number of samples the file's mean gradient covers.
pub const SAMPLES_KEY: &str = "samples";

/// Parse the header of one .safetensors gradient file. Tensors come sorted by data offset.
pub fn read_header(path: &Path) -> Result<GradFile, DumpError> {
    let file = std::fs::File::open(path).map_err(io(path))?;
    // SAFETY: read-only map; a dump rewritten while being read can give wrong numbers but
    // not unsoundness in this code, which only reads bytes.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io(path))?;
    let (n, meta) = SafeTensors::read_metadata(&map).map_err(|e| explain(path, &map, e))?;
    let base = 8 + n as u64;
    let mut tensors = Vec::new();
    for name in meta.offset_keys() {
        let Some(info) = meta.info(&name) else {
            continue;
        };
        let dtype = match info.dtype {
            Dtype::F32 => DType::F32,
            Dtype::F16 => DType::F16,
            Dtype::BF16 => DType::BF16,
            other => {
                return Err(DumpError::UnknownDtype {
                    path: path.into(),
                    tensor: name,
                    dtype: format!("{other:?}"),
                });
            }
        };
        let (a, b) = info.data_offsets;
        // A file still being written has its header and only part of its data.
        let need = base.saturating_add(b as u64);
        if need > map.len() as u64 {
            return Err(DumpError::Truncated {
                path: path.into(),
                tensor: Some(name),
                need,
                have: map.len() as u64,
            });
        }
        tensors.push(TensorEntry {
            name,
            dtype,
            shape: info.shape.clone(),
            fortran: false,
            file: path.into(),
            offset: base + a as u64,
            nbytes: b.saturating_sub(a) as u64,
        });
    }
    let samples = match meta.metadata().as_ref().and_then(|m| m.get(SAMPLES_KEY)) {
        None => None,
        Some(s) => Some(parse_samples(path, s)?),
    };
    Ok(GradFile {
        path: path.into(),
        samples,
        tensors,
    })
}

/// Most samples one gradient set (a micro-batch's or a rank's) is taken to hold: more is a
/// token count or a corrupted value, and would make its step's noise estimate meaningless.
pub const MAX_SAMPLES_PER_SET: f64 = 1e9;

/// A sample count as text, checked: a whole number from 1 to [`MAX_SAMPLES_PER_SET`] ("8",
/// "8.0"); else what it must be. The one rule for the files' counts and `--samples`.
pub fn whole_samples(s: &str) -> Result<f64, &'static str> {
    match s.trim().parse::<f64>() {
        Ok(v) if !(v.is_finite() && v > 0.0) => Err("a positive number"),
        Ok(v) if v.fract() != 0.0 => Err("a whole number of samples"),
        Ok(v) if v > MAX_SAMPLES_PER_SET => {
            Err("at most 10^9 (the samples behind one gradient set: a micro-batch's or a rank's)")
        }
        Ok(v) => Ok(v),
        Err(_) => Err("a positive number"),
    }
}

/// Parse a file's sample count ([`whole_samples`]), or an error naming the file.
pub(crate) fn parse_samples(path: &Path, s: &str) -> Result<f64, DumpError> {
    whole_samples(s).map_err(|why| DumpError::Samples {
        path: path.into(),
        message: format!("\"{SAMPLES_KEY}\" must be {why}, got {s:?}"),
    })
}

/// Turn a safetensors error into one naming the file and, where possible, the tensor, by
/// re-reading the header leniently.
fn explain(path: &Path, buf: &[u8], e: SafeTensorError) -> DumpError {
    let have = buf.len() as u64;
    let header = || -> Option<(u64, serde_json::Map<String, serde_json::Value>)> {
        let n = u64::from_le_bytes(buf.get(..8)?.try_into().ok()?);
        let text = buf.get(8..8usize.checked_add(usize::try_from(n).ok()?)?)?;
        Some((8 + n, serde_json::from_slice(text).ok()?))
    };
    let header_need = buf
        .get(..8)
        .and_then(|b| b.try_into().ok())
        .map(|b| u64::from_le_bytes(b).saturating_add(8));
    match e {
        SafeTensorError::HeaderTooLarge => header_err(
            path,
            format!(
                "header length {} bytes exceeds the safetensors limit of 100,000,000",
                header_need.map_or(0, |n| n - 8)
            ),
        ),
        SafeTensorError::HeaderTooSmall | SafeTensorError::InvalidHeaderLength => match header_need
        {
            Some(need) if need > have => DumpError::Truncated {
                path: path.into(),
                tensor: None,
                need,
                have,
            },
            None if have < 8 => DumpError::Truncated {
                path: path.into(),
                tensor: None,
                need: 8,
                have,
            },
            _ => header_err(path, format!("invalid header length field ({e:?})")),
        },
        SafeTensorError::MetadataIncompleteBuffer | SafeTensorError::InvalidOffset(_) => {
            let Some((base, map)) = header() else {
                return header_err(path, format!("{e:?}"));
            };
            // The first tensor (by end offset) that does not fit, else the offending name.
            let mut worst: Option<(String, u64)> = None;
            for (name, v) in map.iter().filter(|(k, _)| *k != "__metadata__") {
                let end = v["data_offsets"][1].as_u64().unwrap_or(0);
                if base.saturating_add(end) > have && worst.as_ref().is_none_or(|(_, w)| end < *w) {
                    worst = Some((name.clone(), end));
                }
            }
            match (worst, e) {
                (Some((tensor, end)), _) => DumpError::Truncated {
                    path: path.into(),
                    tensor: Some(tensor),
                    need: base.saturating_add(end),
                    have,
                },
                (None, SafeTensorError::InvalidOffset(t)) => header_err(
                    path,
                    format!(
                        "tensor {t}: data_offsets overlap, leave gaps or do not match shape × dtype"
                    ),
                ),
                (None, _) => header_err(path, "bytes after the last tensor's data".into()),
            }
        }
        SafeTensorError::InvalidHeaderDeserialization(err) => {
            if let Some((_, map)) = header() {
                for (name, v) in map.iter().filter(|(k, _)| *k != "__metadata__") {
                    let d = v["dtype"].as_str().unwrap_or("?");
                    if serde_json::from_value::<Dtype>(v["dtype"].clone()).is_err() {
                        return DumpError::UnknownDtype {
                            path: path.into(),
                            tensor: name.clone(),
                            dtype: d.to_string(),
                        };
                    }
                }
            }
            header_err(path, err.to_string())
        }
        SafeTensorError::TensorInvalidInfo | SafeTensorError::ValidationOverflow => {
            let bad = header().and_then(|(_, map)| {
                map.iter()
                    .filter(|(k, _)| *k != "__metadata__")
                    .find_map(|(name, v)| {
                        let size = serde_json::from_value::<Dtype>(v["dtype"].clone())
                            .ok()?
                            .bitsize() as u64
                            / 8;
                        let elems = v["shape"]
                            .as_array()?
                            .iter()
                            .try_fold(1u64, |a, d| a.checked_mul(d.as_u64()?));
                        let (a, b) = (
                            v["data_offsets"][0].as_u64()?,
                            v["data_offsets"][1].as_u64()?,
                        );
                        (elems.and_then(|n| n.checked_mul(size)) != b.checked_sub(a))
                            .then(|| name.clone())
                    })
            });
            match bad {
                Some(t) => header_err(
                    path,
                    format!("tensor {t}: shape × dtype size does not match its data_offsets"),
                ),
                None => header_err(path, format!("{e:?}")),
            }
        }
        other => header_err(path, format!("{other:?}")),
    }
}

fn header_err(path: &Path, message: String) -> DumpError {
    DumpError::Header {
        path: path.into(),
        message,
    }
}
