//! Fits a hardware profile's kernel efficiencies on the training rows of the published tables
//! in `assets/validation/` and reports the held-out error:
//! `cargo run --release --example fit_profiles -- a100-80g`. The fitted values are what the
//! profile in `assets/hardware/` ships (docs/MODEL.md).

use copus::perf::calibrate::{Knob, calibrate_samples};
use copus::perf::validation::{self, PublishedRow, error_summary};
use copus::profiles;
use std::path::Path;

fn main() -> anyhow::Result<()> {
    let hw_name = std::env::args().nth(1).unwrap_or_else(|| "a100-80g".into());
    let hw = profiles::hardware(&hw_name, Path::new("."))?;
    let mut rows: Vec<PublishedRow> = Vec::new();
    for entry in std::fs::read_dir("assets/validation")? {
        let path = entry?.path();
        if path.extension().is_some_and(|x| x == "csv") {
            let text = std::fs::read_to_string(&path)?;
            rows.extend(validation::parse(&text, &path.display().to_string())?);
        }
    }
    rows.retain(|r| r.hardware == hw_name);
    let (train, test): (Vec<_>, Vec<_>) = rows.iter().cloned().partition(|r| r.train);
    let knobs: Vec<Knob> = std::env::args()
        .nth(2)
        .map(|s| s.split(',').filter_map(Knob::from_name).collect())
        .unwrap_or_else(|| {
            vec![
                Knob::MaxEff,
                Knob::GemmOverhead,
                Knob::MemEff,
                Knob::MicrobatchOverhead,
                Knob::ChunkHalf,
            ]
        });
    // Start from the generic defaults, not the shipped values, so the fit is reproducible;
    // a third argument fixes parameters measured rather than fitted (`name=value,...`).
    let mut start = copus::perf::EfficiencyParams::default();
    if let Some(fixed) = std::env::args().nth(3) {
        for pair in fixed.split(',') {
            let (name, value) = pair
                .split_once('=')
                .ok_or_else(|| anyhow::anyhow!("'{pair}': expected name=value"))?;
            let knob = Knob::from_name(name)
                .ok_or_else(|| anyhow::anyhow!("'{name}' is not a fittable parameter"))?;
            *knob.slot(&mut start) = value.parse()?;
        }
    }
    let samples = validation::samples(&train, &hw, &start)?;
    let fit = calibrate_samples(&samples, &start, &knobs, 60)?;
    println!(
        "{} training rows, rms log error {:.3} -> {:.3} in {} iterations",
        train.len(),
        fit.initial_rms,
        fit.rms,
        fit.iterations
    );
    let mut f = fit.params.clone();
    let mut s = start.clone();
    for k in &knobs {
        println!(
            "  {:24} {:12.6e} -> {:12.6e}",
            k.name(),
            *k.slot(&mut s),
            *k.slot(&mut f)
        );
    }
    for (label, set) in [("train", &train), ("test", &test)] {
        let mut errors = Vec::new();
        for row in set {
            let scored = validation::score(row, &hw, &fit.params)?;
            println!(
                "  {label:5} {:11} {:10} {:34} pub {:6.1} pred {:6.1} {:+6.1}%",
                row.set,
                row.model.name,
                scored.config.to_string(),
                row.tflops,
                scored.tflops,
                scored.rel_error * 100.0
            );
            errors.push(scored.rel_error);
        }
        let (mean, worst) = error_summary(&errors);
        println!(
            "{label}: mean |error| {:.1}%, worst {:.1}%",
            mean * 100.0,
            worst * 100.0
        );
    }
    Ok(())
}
