//! The streaming pass: one step's K files memory-mapped, walked in lockstep in segments,
//! reduced by a backend in waves of bounded size, summed per tensor in a fixed order.
//!
//! Convention: file k holds the MEAN gradient g_k over its n_k samples. With N = Σ n_k and
//! w_k = n_k / N, the big-batch gradient is g_big = Σ_k w_k g_k. Per step:
//! `sq_small` = (1/K) Σ_k |g_k|², `sq_big` = |g_big|², `b_big` = N and `b_small` = the
//! harmonic mean of the n_k (so that E[sq_small] = |G|² + tr Σ / b_small exactly; with equal
//! n_k it is simply n_k).

use super::error::{DumpError, io};
use super::index::StepEntry;
use super::layers::layer_key;
use super::{DumpOptions, EmaPoint};
use crate::compute::{Backend, EmaParams, EmaState, Segment, Sums};
use crate::stats::{LayerSq, StepStats};
use std::collections::HashMap;
use std::path::PathBuf;

/// Per-step sample weights: (w_k, b_small, b_big).
fn weights(step: &StepEntry, opts: &DumpOptions) -> Result<(Vec<f64>, f64, f64), DumpError> {
    if let Some(v) = opts.samples
        && !(v.is_finite() && v > 0.0)
    {
        return Err(DumpError::Samples {
            path: step.dir.clone(),
            message: format!(
                "the sample count given for every file (--samples, or `samples` in the session) must be a positive finite number, got {v}"
            ),
        });
    }
    let n: Vec<f64> = step
        .files
        .iter()
        .map(|f| {
            opts.samples.or(f.samples).ok_or_else(|| DumpError::Samples {
                path: f.path.clone(),
                message: "no sample count: add \"samples\" to the safetensors __metadata__ (or samples.txt beside .npy files), or pass --samples".into(),
            })
        })
        .collect::<Result<_, _>>()?;
    let total: f64 = n.iter().sum();
    let harmonic = n.len() as f64 / n.iter().map(|x| 1.0 / x).sum::<f64>();
    Ok((n.iter().map(|x| x / total).collect(), harmonic, total))
}

/// Reduce one step; `ema` is advanced when given. `done` counts bytes for progress.
pub(crate) fn reduce_step(
    step: &StepEntry,
    opts: &DumpOptions,
    backend: &dyn Backend,
    mut ema: Option<(&mut EmaState, f64, bool)>,
    progress: &mut dyn FnMut(u64),
) -> Result<(StepStats, Option<EmaPoint>), DumpError> {
    let (w, b_small, b_big) = weights(step, opts)?;
    let k = step.files.len();
    let maps = map_files(step)?;
    let tensors = &step.files[0].tensors;
    let seg_elems = opts
        .segment_elems
        .unwrap_or_else(|| backend.preferred_segment_elems())
        .max(1);
    let wave_limit = backend.preferred_wave_bytes().max(1);
    let mut per_tensor = vec![Sums::default(); tensors.len()];
    // (tensor, first element, end element, segment)
    let mut wave: Vec<(usize, usize, usize, Segment<'_>)> = Vec::new();
    let (mut wave_bytes, mut offset) = (0usize, 0usize);
    let mut flush = |wave: &mut Vec<(usize, usize, usize, Segment<'_>)>,
                     bytes: &mut usize|
     -> Result<(), DumpError> {
        if wave.is_empty() {
            return Ok(());
        }
        let segs: Vec<Segment<'_>> = wave.iter().map(|(.., s)| s.clone()).collect();
        let e = ema.as_mut().map(|(st, decay, first)| {
            (
                &mut **st,
                EmaParams {
                    decay: *decay,
                    first: *first,
                },
            )
        });
        let sums = backend.reduce(&segs, &w, e)?;
        for ((t, ..), s) in wave.iter().zip(sums) {
            per_tensor[*t] = per_tensor[*t] + s;
        }
        release(
            step,
            &maps,
            wave.iter().map(|(t, lo, hi, _)| (*t, *lo, *hi)),
        );
        progress(*bytes as u64);
        wave.clear();
        *bytes = 0;
        Ok(())
    };
    for (i, t0) in tensors.iter().enumerate() {
        let (n, size) = (t0.elems(), t0.dtype.size());
        let mut lo = 0;
        while lo < n {
            let hi = (lo + seg_elems).min(n);
            let parts = step
                .files
                .iter()
                .map(|f| {
                    let t = &f.tensors[i];
                    let at = t.offset as usize;
                    &maps[&t.file][at + lo * size..at + hi * size]
                })
                .collect();
            wave.push((
                i,
                lo,
                hi,
                Segment {
                    dtype: t0.dtype,
                    parts,
                    offset: offset + lo,
                },
            ));
            wave_bytes += (hi - lo) * size * k;
            if wave_bytes >= wave_limit {
                flush(&mut wave, &mut wave_bytes)?;
            }
            lo = hi;
        }
        offset += n;
    }
    flush(&mut wave, &mut wave_bytes)?;
    let mut stats = StepStats::new(step.step, b_small, b_big, 0.0, 0.0);
    stats.n_small = Some(k as u32);
    let mut total = Sums::default();
    for (t, s) in tensors.iter().zip(&per_tensor) {
        total = total + *s;
        let e = stats
            .layers
            .get_or_insert_with(layer_key(&t.name), || LayerSq {
                sq_small: 0.0,
                sq_big: 0.0,
            });
        e.sq_small += s.sq_parts / k as f64;
        e.sq_big += s.sq_big;
    }
    let ema_point = ema.map(|_| EmaPoint::new(step.step, b_big, total.ema_noise, total.ema_signal));
    if let Some(bad) = per_tensor
        .iter()
        .position(|s| !(s.sq_parts.is_finite() && s.sq_big.is_finite()))
    {
        stats.skipped = Some(non_finite_note(step, bad, &maps));
        stats.layers.clear();
    } else {
        stats.sq_small = total.sq_parts / k as f64;
        stats.sq_big = total.sq_big;
    }
    Ok((stats, ema_point))
}

/// Map every distinct file of a step once, checking it still holds its tensors' bytes.
fn map_files(step: &StepEntry) -> Result<HashMap<PathBuf, memmap2::Mmap>, DumpError> {
    let mut maps = HashMap::new();
    crate::signals::set_mapped_context(&format!("dump step directory {}", step.dir.display()));
    for t in step.files.iter().flat_map(|f| &f.tensors) {
        if !maps.contains_key(&t.file) {
            let f = std::fs::File::open(&t.file).map_err(io(&t.file))?;
            // SAFETY: read-only map; see st_file::read_header.
            let m = unsafe { memmap2::Mmap::map(&f) }.map_err(io(&t.file))?;
            let _ = m.advise(memmap2::Advice::Sequential);
            maps.insert(t.file.clone(), m);
        }
        let have = maps[&t.file].len() as u64;
        let need = t.offset.saturating_add(t.nbytes);
        if need > have {
            return Err(DumpError::Truncated {
                path: t.file.clone(),
                tensor: Some(t.name.clone()),
                need,
                have,
            });
        }
    }
    Ok(maps)
}

/// Drop reduced element ranges `(tensor, lo, hi)` from this process's mappings
/// (MADV_DONTNEED), so that the resident set stays bounded by a wave rather than growing with
/// the dump; the pages stay in the page cache. Whole pages only; failures are harmless.
fn release(
    step: &StepEntry,
    maps: &HashMap<PathBuf, memmap2::Mmap>,
    ranges: impl Iterator<Item = (usize, usize, usize)> + Clone,
) {
    const PAGE: u64 = 4096;
    for f in &step.files {
        for (i, lo, hi) in ranges.clone() {
            let t = &f.tensors[i];
            let size = t.dtype.size() as u64;
            let start = (t.offset + lo as u64 * size).next_multiple_of(PAGE);
            let end = (t.offset + hi as u64 * size) / PAGE * PAGE;
            if end > start {
                // SAFETY: a read-only shared file mapping: MADV_DONTNEED only drops page-table
                // entries, a later access re-reads the same file bytes. No slice into the
                // range is used after this point except through a fresh fault.
                #[cfg(unix)]
                let _ = unsafe {
                    maps[&t.file].unchecked_advise_range(
                        memmap2::UncheckedAdvice::DontNeed,
                        start as usize,
                        (end - start) as usize,
                    )
                };
            }
        }
    }
}

/// "non-finite ..." naming the first file holding a NaN/±Inf in tensor `i` (rare path: a
/// second, scalar scan of that tensor only).
fn non_finite_note(step: &StepEntry, i: usize, maps: &HashMap<PathBuf, memmap2::Mmap>) -> String {
    for f in &step.files {
        let t = &f.tensors[i];
        let bytes = &maps[&t.file][t.offset as usize..(t.offset + t.nbytes) as usize];
        let count = count_non_finite(bytes, t.dtype);
        if count > 0 {
            return format!(
                "non-finite: {count} NaN/Inf values in tensor {} of {}",
                t.name,
                f.path.display()
            );
        }
    }
    format!(
        "non-finite: sums of tensor {} overflow f64",
        step.files[0].tensors[i].name
    )
}

fn count_non_finite(bytes: &[u8], dtype: crate::compute::DType) -> usize {
    use crate::compute::DType::*;
    match dtype {
        F32 => bytes
            .chunks_exact(4)
            .filter(|b| !f32::from_le_bytes([b[0], b[1], b[2], b[3]]).is_finite())
            .count(),
        F16 => bytes
            .chunks_exact(2)
            .filter(|b| !half::f16::from_le_bytes([b[0], b[1]]).is_finite())
            .count(),
        BF16 => bytes
            .chunks_exact(2)
            .filter(|b| !half::bf16::from_le_bytes([b[0], b[1]]).is_finite())
            .count(),
    }
}

/// Check that a step has the same tensors (names, shapes, dtypes) as the first one, as the EMA
/// state addresses elements by position.
pub(crate) fn same_model(first: &StepEntry, step: &StepEntry) -> Result<(), DumpError> {
    let (a, b) = (&first.files[0].tensors, &step.files[0].tensors);
    for (i, t) in b.iter().enumerate() {
        match a.get(i) {
            Some(t0) if t0.name == t.name && t0.shape == t.shape => {}
            _ => {
                return Err(DumpError::Mismatch {
                    path: step.dir.clone(),
                    tensor: t.name.clone(),
                    what: format!(
                        "differs from step {} (the EMA estimator needs the same tensors every step)",
                        first.step
                    ),
                });
            }
        }
    }
    if a.len() != b.len() {
        return Err(DumpError::Mismatch {
            path: step.dir.clone(),
            tensor: a[b.len().min(a.len() - 1)].name.clone(),
            what: format!("missing (present in step {})", first.step),
        });
    }
    Ok(())
}
