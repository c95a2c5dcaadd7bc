//! Divan benchmarks of the CPU reduction kernels: bytes per second over K=4 in-memory parts
//! of F32 / F16 / BF16 data (no file I/O), with and without the temporal EMA update.

use copus::compute::{Backend, CpuBackend, DType, EmaParams, Segment};

fn main() {
    divan::main();
}

const ELEMS: usize = 1 << 22;
const K: usize = 4;

fn dtype(name: &str) -> DType {
    match name {
        "f16" => DType::F16,
        "bf16" => DType::BF16,
        _ => DType::F32,
    }
}

fn parts(dtype: DType) -> Vec<Vec<u8>> {
    (0..K)
        .map(|k| {
            (0..ELEMS * dtype.size())
                .map(|i| ((i * 31 + k * 7) % 251) as u8 & 0x3f)
                .collect()
        })
        .collect()
}

fn segments(dtype: DType, data: &[Vec<u8>]) -> Vec<Segment<'_>> {
    let step = (1 << 16) * dtype.size();
    (0..data[0].len() / step)
        .map(|s| Segment {
            dtype,
            parts: data.iter().map(|p| &p[s * step..(s + 1) * step]).collect(),
            offset: s * (1 << 16),
        })
        .collect()
}

#[divan::bench(args = ["f32", "f16", "bf16"])]
fn reduce(bencher: divan::Bencher, name: &str) {
    let dtype = dtype(name);
    let data = parts(dtype);
    let segs = segments(dtype, &data);
    let w = vec![1.0 / K as f64; K];
    bencher
        .counter(divan::counter::BytesCount::new(ELEMS * K * dtype.size()))
        .bench(|| CpuBackend::new().reduce(&segs, &w, None).expect("reduce"));
}

#[divan::bench]
fn reduce_f32_with_ema(bencher: divan::Bencher) {
    let data = parts(DType::F32);
    let segs = segments(DType::F32, &data);
    let w = vec![1.0 / K as f64; K];
    let cpu = CpuBackend::new();
    let mut state = cpu.new_ema_state(ELEMS).expect("state");
    let p = EmaParams {
        decay: 0.95,
        first: false,
    };
    bencher
        .counter(divan::counter::BytesCount::new(ELEMS * K * 4))
        .bench_local(|| {
            cpu.reduce(&segs, &w, Some((&mut state, p)))
                .expect("reduce")
        });
}
