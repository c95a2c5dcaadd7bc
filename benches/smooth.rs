//! Library-level: one two-sided smoothing of a 100k-step series (the analysis runs one per
//! layer plus one for the whole model): kernel sums by FFT blocks, the detrended residuals,
//! the Newey–West windows, the inflation factor and every step's interval.
//!
//! Run: `cargo bench --bench smooth` (add `RAYON_NUM_THREADS=1` for one core).

use copus::stats::analysis::settings::EstimatorSettings;
use copus::stats::analysis::summarize::{Series, smooth};
use divan::Bencher;
use divan::counter::ItemsCount;
use std::sync::LazyLock;

const STEPS: usize = 100_000;

/// Steps, tr(Σ), |G|² (a decaying signal under noise, some steps negative) and b_big.
static SERIES: LazyLock<[Vec<f64>; 3]> = LazyLock::new(|| {
    let mut s = 1u64;
    let mut uniform = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s >> 11) as f64 / (1u64 << 53) as f64
    };
    let trace = (0..STEPS).map(|_| 2.0 + uniform()).collect();
    let g2 = (0..STEPS)
        .map(|i| 0.02 / (1.0 + i as f64 / 1e4) + 0.05 * (uniform() - 0.5))
        .collect();
    [trace, g2, vec![128.0; STEPS]]
});

fn main() {
    copus::malloc_tuning::tune_for_large_buffers();
    LazyLock::force(&SERIES);
    divan::main();
}

#[divan::bench(sample_count = 20)]
fn two_sided_100k_steps(bencher: Bencher) {
    let steps: Vec<u64> = (0..STEPS as u64).collect();
    let [trace, g2, b_big] = &*SERIES;
    let settings = EstimatorSettings::default();
    bencher.counter(ItemsCount::new(STEPS)).bench(|| {
        let sm = smooth(
            &Series {
                steps: &steps,
                trace,
                g2,
                b_big,
            },
            &settings,
        );
        assert_eq!(sm.points.len(), STEPS);
        sm.summary.b_simple
    });
}
