//! Branch-free conversion of 16-bit floats to f32, written so that the CPU loops vectorise
//! (`half::f16::to_f32` is exact too but branches on the exponent).

/// IEEE binary16 bits to f32 (exact, including subnormals, ±Inf and NaN).
#[inline(always)]
pub(crate) fn f16_to_f32(h: u16) -> f32 {
    let h = h as u32;
    let sign = (h & 0x8000) << 16;
    let exp = h & 0x7c00;
    let mant = h & 0x03ff;
    // Normal numbers: rebias the exponent (15 → 127) and widen the mantissa.
    let normal = ((exp + ((127 - 15) << 10)) | mant) << 13;
    // Inf/NaN: all-ones exponent.
    let special = 0x7f80_0000 | (mant << 13);
    // Subnormals: mant · 2^-24, exact in f32.
    let sub = (mant as f32 * f32::from_bits(0x3380_0000)).to_bits();
    let bits = if exp == 0x7c00 {
        special
    } else if exp == 0 {
        sub
    } else {
        normal
    };
    f32::from_bits(bits | sign)
}

/// bfloat16 bits to f32 (exact: bf16 is the top half of an f32).
#[inline(always)]
pub(crate) fn bf16_to_f32(b: u16) -> f32 {
    f32::from_bits((b as u32) << 16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16_matches_half_crate_on_every_bit_pattern() {
        for bits in 0..=u16::MAX {
            let want = half::f16::from_bits(bits).to_f32();
            let got = f16_to_f32(bits);
            assert!(
                want.to_bits() == got.to_bits() || (want.is_nan() && got.is_nan()),
                "{bits:#06x}: {want} vs {got}"
            );
        }
    }

    #[test]
    fn bf16_matches_half_crate() {
        for bits in (0..=u16::MAX).step_by(7) {
            let want = half::bf16::from_bits(bits).to_f32();
            let got = bf16_to_f32(bits);
            assert!(want.to_bits() == got.to_bits() || (want.is_nan() && got.is_nan()));
        }
    }
}
