//! The portable loops and the run-time selected SIMD loops agree, including tails and the
//! EMA update, on every dtype.

use super::*;

fn bytes(dtype: DType, n: usize, k: usize) -> Vec<u8> {
    (0..n)
        .flat_map(|i| {
            let x = ((i * 7919 + k * 104_729) % 2001) as f32 / 1000.0 - 1.0;
            match dtype {
                DType::F32 => x.to_le_bytes().to_vec(),
                DType::F16 => half::f16::from_f32(x).to_le_bytes().to_vec(),
                DType::BF16 => half::bf16::from_f32(x).to_le_bytes().to_vec(),
            }
        })
        .collect()
}

#[test]
fn portable_and_dispatched_paths_agree() {
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        for n in [1usize, 7, 8, 255, 256, 257, 1000] {
            let data: Vec<Vec<u8>> = (0..3).map(|k| bytes(dtype, n, k)).collect();
            let seg = Segment {
                dtype,
                parts: data.iter().map(|d| &d[..]).collect(),
                offset: 0,
            };
            let w = [0.2, 0.3, 0.5];
            let p = EmaParams {
                decay: 0.9,
                first: false,
            };
            let (mut m1, mut q1) = (vec![0.1f32; n], vec![0.2f32; n]);
            let (mut m2, mut q2) = (m1.clone(), q1.clone());
            let fast = reduce_segment(&seg, &w, Some((&mut m1, &mut q1, p)));
            let slow = match dtype {
                DType::F32 => run::<F32L>(&seg.parts, &w, Some((&mut m2, &mut q2, p))),
                DType::F16 => run::<F16L>(&seg.parts, &w, Some((&mut m2, &mut q2, p))),
                DType::BF16 => run::<Bf16L>(&seg.parts, &w, Some((&mut m2, &mut q2, p))),
            };
            let close = |a: f64, b: f64| (a - b).abs() <= 1e-12 * b.abs().max(1e-300);
            assert!(close(fast.sq_parts, slow.sq_parts), "{dtype:?} n={n}");
            assert!(close(fast.sq_big, slow.sq_big), "{dtype:?} n={n}");
            assert!(close(fast.ema_signal, slow.ema_signal), "{dtype:?} n={n}");
            assert_eq!(m1, m2);
            assert_eq!(q1, q2);
            // And both equal a plain f64 sum.
            let val = |k: usize, i: usize| match dtype {
                DType::F32 => {
                    f32::from_le_bytes(data[k][4 * i..4 * i + 4].try_into().expect("4")) as f64
                }
                DType::F16 => {
                    half::f16::from_le_bytes([data[k][2 * i], data[k][2 * i + 1]]).to_f64()
                }
                DType::BF16 => {
                    half::bf16::from_le_bytes([data[k][2 * i], data[k][2 * i + 1]]).to_f64()
                }
            };
            let small: f64 = (0..3)
                .flat_map(|k| (0..n).map(move |i| (k, i)))
                .map(|(k, i)| val(k, i).powi(2))
                .sum();
            let big: f64 = (0..n)
                .map(|i| (0..3).map(|k| w[k] * val(k, i)).sum::<f64>().powi(2))
                .sum();
            assert!(
                (fast.sq_parts - small).abs() <= 1e-12 * small,
                "{dtype:?} n={n}"
            );
            assert!((fast.sq_big - big).abs() <= 1e-12 * big, "{dtype:?} n={n}");
        }
    }
}
