//! The CPU inner loops: one segment (the same element range in K files) reduced to f64 sums.
//!
//! Elements are processed in blocks of [`BLOCK`]: for each file k the block is converted to
//! f64 and folded into [`LANES`] independent accumulators of x² while w_k·x is added into a
//! block-sized f64 buffer (in L1); the buffer's squares then give |Σ_k w_k g_k|². Independent
//! lanes let the compiler vectorise without reassociating a single sum; every product and sum
//! is in f64, so the only rounding is f64 rounding. On x86-64 an AVX2 copy of the loops is
//! chosen at run time.

use super::half_bits::{bf16_to_f32, f16_to_f32};
use super::{DType, EmaParams, Segment, Sums};

/// Independent accumulators per sum.
const LANES: usize = 8;
/// Elements per block (the w_k·x buffer is BLOCK f64 = 2 KiB).
const BLOCK: usize = 256;

/// A little-endian element type read from raw bytes.
trait Load {
    const SIZE: usize;
    fn load(b: &[u8]) -> f32;
    /// LANES consecutive elements from `b` (at least LANES × SIZE bytes).
    #[inline(always)]
    fn load_lanes(b: &[u8]) -> [f32; LANES] {
        let b = &b[..LANES * Self::SIZE];
        let mut out = [0f32; LANES];
        for (l, o) in out.iter_mut().enumerate() {
            *o = Self::load(&b[l * Self::SIZE..]);
        }
        out
    }
}

/// F16 through the F16C instruction `vcvtph2ps`. Only used behind the run-time check in
/// `dispatch` (AVX2 and F16C present).
#[cfg(target_arch = "x86_64")]
struct F16C;

#[cfg(target_arch = "x86_64")]
impl Load for F16C {
    const SIZE: usize = 2;
    #[inline(always)]
    fn load(b: &[u8]) -> f32 {
        F16L::load(b)
    }
    #[inline(always)]
    fn load_lanes(b: &[u8]) -> [f32; LANES] {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm256_cvtph_ps};
        let b = &b[..LANES * 2];
        // SAFETY: `b` holds 16 readable bytes (unaligned load); F16C is present whenever
        // this type is used (see `dispatch`).
        unsafe {
            let v = _mm_loadu_si128(b.as_ptr() as *const __m128i);
            std::mem::transmute::<std::arch::x86_64::__m256, [f32; LANES]>(_mm256_cvtph_ps(v))
        }
    }
}

struct F32L;
struct F16L;
struct Bf16L;

impl Load for F32L {
    const SIZE: usize = 4;
    #[inline(always)]
    fn load(b: &[u8]) -> f32 {
        f32::from_le_bytes([b[0], b[1], b[2], b[3]])
    }
}
impl Load for F16L {
    const SIZE: usize = 2;
    #[inline(always)]
    fn load(b: &[u8]) -> f32 {
        f16_to_f32(u16::from_le_bytes([b[0], b[1]]))
    }
}
impl Load for Bf16L {
    const SIZE: usize = 2;
    #[inline(always)]
    fn load(b: &[u8]) -> f32 {
        bf16_to_f32(u16::from_le_bytes([b[0], b[1]]))
    }
}

/// EMA state slices covering exactly the segment's elements, with the update parameters.
pub(crate) type EmaSlices<'a> = Option<(&'a mut [f32], &'a mut [f32], EmaParams)>;

/// Reduce one segment with weights `w` (one per part), advancing the EMA state if given.
pub(crate) fn reduce_segment(seg: &Segment<'_>, w: &[f64], ema: EmaSlices<'_>) -> Sums {
    match seg.dtype {
        DType::F32 => dispatch::<F32L>(&seg.parts, w, ema),
        DType::F16 => {
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("f16c")
            {
                // SAFETY: the CPU supports AVX2 and F16C (checked just above).
                return unsafe { run_avx2_f16c::<F16C>(&seg.parts, w, ema) };
            }
            dispatch::<F16L>(&seg.parts, w, ema)
        }
        DType::BF16 => dispatch::<Bf16L>(&seg.parts, w, ema),
    }
}

fn dispatch<L: Load>(parts: &[&[u8]], w: &[f64], ema: EmaSlices<'_>) -> Sums {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports AVX2 (checked just above).
        return unsafe { run_avx2::<L>(parts, w, ema) };
    }
    run::<L>(parts, w, ema)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn run_avx2<L: Load>(parts: &[&[u8]], w: &[f64], ema: EmaSlices<'_>) -> Sums {
    run::<L>(parts, w, ema)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,f16c")]
fn run_avx2_f16c<L: Load>(parts: &[&[u8]], w: &[f64], ema: EmaSlices<'_>) -> Sums {
    run::<L>(parts, w, ema)
}

#[inline(always)]
fn run<L: Load>(parts: &[&[u8]], w: &[f64], mut ema: EmaSlices<'_>) -> Sums {
    let n = parts.first().map_or(0, |p| p.len() / L::SIZE);
    let mut small = [0f64; LANES];
    let mut bigsq = [0f64; LANES];
    let mut noise = [0f64; LANES];
    let mut signal = [0f64; LANES];
    let mut buf = [0f64; BLOCK];
    let mut start = 0;
    while start < n {
        let m = (n - start).min(BLOCK);
        let mv = m - m % LANES;
        let big = &mut buf[..mv];
        for (k, part) in parts.iter().enumerate() {
            let bytes = &part[start * L::SIZE..(start + mv) * L::SIZE];
            if k == 0 {
                acc_first::<L>(bytes, w[k], big, &mut small);
            } else {
                acc::<L>(bytes, w[k], big, &mut small);
            }
        }
        for c in big.chunks_exact(LANES) {
            for l in 0..LANES {
                bigsq[l] += c[l] * c[l];
            }
        }
        if let Some((mean, sq, p)) = ema.as_mut() {
            let (mean, sq) = (&mut mean[start..start + mv], &mut sq[start..start + mv]);
            for ((g, m), s) in big
                .chunks_exact(LANES)
                .zip(mean.chunks_exact_mut(LANES))
                .zip(sq.chunks_exact_mut(LANES))
            {
                for l in 0..LANES {
                    let (nz, sg) = ema_one(g[l], &mut m[l], &mut s[l], *p);
                    noise[l] += nz;
                    signal[l] += sg;
                }
            }
        }
        // Scalar tail (only in the last block of a segment).
        for i in start + mv..start + m {
            let mut b = 0.0;
            for (k, part) in parts.iter().enumerate() {
                let x = L::load(&part[i * L::SIZE..]) as f64;
                small[0] += x * x;
                b += w[k] * x;
            }
            bigsq[0] += b * b;
            if let Some((mean, sq, p)) = ema.as_mut() {
                let (nz, sg) = ema_one(b, &mut mean[i], &mut sq[i], *p);
                noise[0] += nz;
                signal[0] += sg;
            }
        }
        start += m;
    }
    Sums {
        sq_parts: small.iter().sum(),
        sq_big: bigsq.iter().sum(),
        ema_noise: noise.iter().sum(),
        ema_signal: signal.iter().sum(),
    }
}

/// First file of a block: x² into the lanes, w·x into the buffer.
#[inline(always)]
fn acc_first<L: Load>(bytes: &[u8], wk: f64, big: &mut [f64], small: &mut [f64; LANES]) {
    for (bc, gc) in bytes
        .chunks_exact(LANES * L::SIZE)
        .zip(big.chunks_exact_mut(LANES))
    {
        let xs = L::load_lanes(bc);
        for l in 0..LANES {
            let x = xs[l] as f64;
            small[l] += x * x;
            gc[l] = wk * x;
        }
    }
}

/// Further files: x² into the lanes, w·x added to the buffer.
#[inline(always)]
fn acc<L: Load>(bytes: &[u8], wk: f64, big: &mut [f64], small: &mut [f64; LANES]) {
    for (bc, gc) in bytes
        .chunks_exact(LANES * L::SIZE)
        .zip(big.chunks_exact_mut(LANES))
    {
        let xs = L::load_lanes(bc);
        for l in 0..LANES {
            let x = xs[l] as f64;
            small[l] += x * x;
            gc[l] += wk * x;
        }
    }
}

/// One element's EMA update (state stored in f32, as the seed's torch tensors); returns its
/// (EMA[g²] − EMA[g]², EMA[g]²) from the stored values.
#[inline(always)]
fn ema_one(g: f64, mean: &mut f32, sq: &mut f32, p: EmaParams) -> (f64, f64) {
    let (m, s) = if p.first {
        (g, g * g)
    } else {
        let d = p.decay;
        (
            d * *mean as f64 + (1.0 - d) * g,
            d * *sq as f64 + (1.0 - d) * g * g,
        )
    };
    *mean = m as f32;
    *sq = s as f32;
    let (m, s) = (*mean as f64, *sq as f64);
    (s - m * m, m * m)
}

#[cfg(test)]
#[path = "cpu_kernel_tests.rs"]
mod tests;
