//! Published training-throughput measurements and how the performance model scores against
//! them (docs/MODEL.md). The measurements ship as CSV under `assets/validation/` with their
//! sources; each row names the model shape, hardware, software stack and configuration, and the
//! published TFLOP/s per GPU on its stated FLOP basis.
//!
//! CSV columns: `set,model,hardware,stack,layers,hidden,heads,vocab,seq,gpus_per_node,dp,tp,pp,
//! mbs,vpp,zero,recompute,batch,tflops,basis,split`. `mbs`, `vpp` and `recompute` may be `auto` (the
//! fastest fitting choice, for sources that do not state them). `basis` is `model` (recomputation
//! not counted) or `hardware` (counted, as Narayanan et al.'s eq. 3). `split` is `train` for
//! the rows the hardware profiles' defaults are fitted on and `test` for held-out rows. Lines
//! starting with `#` are comments.

use super::calibrate::{Sample, Target};
use super::efficiency::AttentionKind;
use super::measurements::Measurement;
use super::{
    ConfigCost, EfficiencyParams, HardwareProfile, ModelProfile, ParallelConfig, PerfContext,
    Prediction, Recompute, enumerate, flops,
};

/// The software stacks the published rows were measured on, as settings of the model: the
/// stack is a property of the measurement (what its authors ran), not a fitted parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stack {
    /// Megatron-LM 2021 with PyTorch DDP: unfused attention, no sequence parallelism, FP32
    /// gradient reduction overlapped with the last backward.
    Megatron2021TorchDdp,
    /// Megatron-LM 2021 with its local DDP: as above, gradients reduced after the backward.
    Megatron2021Local,
    /// DeepSpeed ZeRO-3 (2021): unfused attention, FP16 gradient reduction.
    DeepSpeed2021,
    /// Megatron-Core 2024: fused attention, sequence parallelism, TP/DP/PP overlap.
    MegatronCore2024,
}

impl Stack {
    /// Parse a stack name as written in the CSV files.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "megatron-2021-torchddp" => Self::Megatron2021TorchDdp,
            "megatron-2021-local" => Self::Megatron2021Local,
            "deepspeed-2021" => Self::DeepSpeed2021,
            "mcore-2024" => Self::MegatronCore2024,
            _ => return None,
        })
    }

    /// `base` (the hardware's kernel efficiencies) with this stack's choices applied.
    pub fn apply(self, base: &EfficiencyParams) -> EfficiencyParams {
        let mut e = base.clone();
        match self {
            Self::Megatron2021TorchDdp | Self::Megatron2021Local => {
                e.attention = AttentionKind::Unfused;
                e.sequence_parallel = false;
                e.tp_overlap = 0.0;
                e.grad_bytes = 4.0;
                e.grad_reduce_overlap = if self == Self::Megatron2021TorchDdp {
                    1.0
                } else {
                    0.0
                };
            }
            Self::DeepSpeed2021 => {
                e.attention = AttentionKind::Unfused;
                e.sequence_parallel = false;
                e.tp_overlap = 0.0;
                e.grad_bytes = 2.0;
            }
            Self::MegatronCore2024 => {
                e.attention = AttentionKind::Fused;
                e.sequence_parallel = true;
                e.grad_bytes = 4.0;
                e.grad_reduce_overlap = 1.0;
            }
        }
        e
    }
}

/// FLOP basis of a published TFLOP/s figure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Basis {
    /// Model FLOPs (recomputation not counted; the MFU basis).
    Model,
    /// Hardware FLOPs (recomputation counted).
    Hardware,
}

/// One published measurement.
#[derive(Debug, Clone, PartialEq)]
pub struct PublishedRow {
    /// Group the row belongs to (a table, or one job's splits).
    pub set: String,
    /// Model shape (GPT: MHA, FFN 4h, untied embeddings).
    pub model: ModelProfile,
    /// Hardware profile name.
    pub hardware: String,
    /// Software stack.
    pub stack: Stack,
    /// GPUs per node.
    pub gpus_per_node: u32,
    /// Configuration; `mbs`/`vpp` 0 mean auto.
    pub config: ParallelConfig,
    /// Recompute policy, `None` for auto.
    pub recompute: Option<Recompute>,
    /// Global batch, samples.
    pub batch: u64,
    /// Published TFLOP/s per GPU.
    pub tflops: f64,
    /// FLOP basis of `tflops`.
    pub basis: Basis,
    /// Whether the hardware defaults were fitted on this row (false: held out).
    pub train: bool,
}

/// Why a published-measurement file could not be read.
#[derive(Debug, thiserror::Error)]
#[error("{origin}:{line}: {msg}")]
pub struct ParseError {
    /// File name.
    pub origin: String,
    /// 1-based line.
    pub line: usize,
    /// What is wrong.
    pub msg: String,
}

const COLUMNS: [&str; 21] = [
    "set",
    "model",
    "hardware",
    "stack",
    "layers",
    "hidden",
    "heads",
    "vocab",
    "seq",
    "gpus_per_node",
    "dp",
    "tp",
    "pp",
    "mbs",
    "vpp",
    "zero",
    "recompute",
    "batch",
    "tflops",
    "basis",
    "split",
];

/// Parse a published-measurement CSV (module docs); `origin` names it in errors.
pub fn parse(text: &str, origin: &str) -> Result<Vec<PublishedRow>, ParseError> {
    let mut rows = Vec::new();
    let mut header_seen = false;
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        let err = |msg: String| ParseError {
            origin: origin.to_string(),
            line: i + 1,
            msg,
        };
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let f: Vec<&str> = line.split(',').map(str::trim).collect();
        if !header_seen {
            if f != COLUMNS {
                return Err(err(format!("header must be {}", COLUMNS.join(","))));
            }
            header_seen = true;
            continue;
        }
        if f.len() != COLUMNS.len() {
            return Err(err(format!(
                "{} fields, expected {}",
                f.len(),
                COLUMNS.len()
            )));
        }
        let int = |k: usize| -> Result<u32, ParseError> {
            f[k].parse::<u32>()
                .map_err(|_| err(format!("{} = '{}' is not a whole number", COLUMNS[k], f[k])))
        };
        let auto_int = |k: usize| if f[k] == "auto" { Ok(0) } else { int(k) };
        let (layers, hidden, heads) = (int(4)?, int(5)?, int(6)?);
        let model = ModelProfile {
            name: f[1].to_string(),
            layers,
            hidden,
            heads,
            kv_heads: heads,
            ffn_hidden: hidden
                .checked_mul(4)
                .ok_or_else(|| err("hidden too large".into()))?,
            vocab: int(7)?,
            seq_len: int(8)?,
            swiglu: false,
            tied_embeddings: false,
            moe: None,
            source: origin.to_string(),
        };
        let recompute = match f[16] {
            "auto" => None,
            "none" => Some(Recompute::None),
            "selective" => Some(Recompute::Selective),
            "full" => Some(Recompute::Full),
            o => return Err(err(format!("recompute '{o}' (none|selective|full|auto)"))),
        };
        let zero = u8::try_from(int(15)?)
            .ok()
            .filter(|z| *z <= 3)
            .ok_or_else(|| err("zero must be 0–3".into()))?;
        let tflops: f64 = f[18]
            .parse()
            .ok()
            .filter(|x: &f64| x.is_finite() && *x > 0.0)
            .ok_or_else(|| err(format!("tflops = '{}' is not a positive number", f[18])))?;
        rows.push(PublishedRow {
            set: f[0].to_string(),
            model,
            hardware: f[2].to_string(),
            stack: Stack::parse(f[3]).ok_or_else(|| err(format!("unknown stack '{}'", f[3])))?,
            gpus_per_node: int(9)?,
            config: ParallelConfig {
                dp: int(10)?,
                tp: int(11)?,
                pp: int(12)?,
                mbs: auto_int(13)?,
                zero,
                recompute: recompute.unwrap_or(Recompute::Selective),
                vpp: auto_int(14)?,
            },
            recompute,
            batch: u64::from(int(17)?),
            tflops,
            basis: match f[19] {
                "model" => Basis::Model,
                "hardware" => Basis::Hardware,
                o => return Err(err(format!("basis '{o}' (model|hardware)"))),
            },
            train: match f[20] {
                "train" => true,
                "test" => false,
                o => return Err(err(format!("split '{o}' (train|test)"))),
            },
        });
    }
    Ok(rows)
}

/// The model's prediction for one published row.
#[derive(Debug, Clone, PartialEq)]
pub struct Scored {
    /// The configuration predicted (auto choices resolved).
    pub config: ParallelConfig,
    /// The prediction.
    pub prediction: Prediction,
    /// Predicted TFLOP/s per GPU on the row's basis.
    pub tflops: f64,
    /// predicted / published − 1.
    pub rel_error: f64,
}

/// Predict `row` on `hw` with kernel efficiencies `base` (the row's stack applied on top).
pub fn score(
    row: &PublishedRow,
    hw: &HardwareProfile,
    base: &EfficiencyParams,
) -> Result<Scored, super::Invalid> {
    let eff = row.stack.apply(base);
    let ctx = PerfContext {
        hw,
        model: &row.model,
        eff: &eff,
        gpus_per_node: row.gpus_per_node,
    };
    let (config, prediction) = resolve(&ctx, row)?;
    let tokens = row.batch as f64 * row.model.seq_len as f64;
    let work = match row.basis {
        Basis::Model => flops::model_flops(&row.model, tokens),
        Basis::Hardware => flops::hardware_flops(&row.model, tokens, config.recompute),
    };
    let tflops = work / prediction.step_time_s / config.gpus() as f64 / 1e12;
    Ok(Scored {
        config,
        prediction,
        tflops,
        rel_error: tflops / row.tflops - 1.0,
    })
}

/// The configuration of `row` with its auto choices resolved to the fastest that fits, and
/// its prediction.
pub fn resolve(
    ctx: &PerfContext,
    row: &PublishedRow,
) -> Result<(ParallelConfig, Prediction), super::Invalid> {
    let c = row.config;
    let recompute: Vec<Recompute> = match row.recompute {
        Some(r) => vec![r],
        None => vec![Recompute::None, Recompute::Selective, Recompute::Full],
    };
    let vpps: Vec<u32> = if c.vpp > 0 {
        vec![c.vpp]
    } else if c.pp > 1 {
        let per_stage = row.model.layers / c.pp.max(1);
        (1..=per_stage)
            .filter(|v| per_stage.is_multiple_of(*v))
            .collect()
    } else {
        vec![1]
    };
    if c.mbs > 0 {
        let mut best: Option<(ParallelConfig, Prediction)> = None;
        for &r in &recompute {
            for &v in &vpps {
                let cfg = ParallelConfig {
                    recompute: r,
                    vpp: v,
                    ..c
                };
                let Ok(p) = ConfigCost::new(ctx, &cfg).and_then(|k| k.at(ctx, row.batch)) else {
                    continue;
                };
                // A row that ran did fit: memory only decides between auto choices.
                let usable = p.fits || (row.recompute.is_some() && vpps.len() == 1);
                if usable && best.is_none_or(|(_, b)| p.step_time_s < b.step_time_s) {
                    best = Some((cfg, p));
                }
            }
        }
        return best.ok_or_else(|| super::Invalid::Other("no configuration fits".into()));
    }
    let base = ParallelConfig {
        mbs: 1,
        vpp: 1,
        ..c
    };
    enumerate::auto(ctx, &base, row.batch, &recompute, &vpps)
}

/// Calibration samples of `rows` (all on `hw`): each row's configuration resolved with the
/// kernel efficiencies `base`, its stack applied, and its measured step time derived from the
/// published TFLOP/s.
pub fn samples<'a>(
    rows: &'a [PublishedRow],
    hw: &'a HardwareProfile,
    base: &EfficiencyParams,
) -> Result<Vec<Sample<'a>>, super::Invalid> {
    rows.iter()
        .map(|row| {
            let scored = score(row, hw, base)?;
            let tokens = row.batch as f64 * row.model.seq_len as f64;
            let work = match row.basis {
                Basis::Model => flops::model_flops(&row.model, tokens),
                Basis::Hardware => {
                    flops::hardware_flops(&row.model, tokens, scored.config.recompute)
                }
            };
            let step_time_s = work / (row.tflops * 1e12 * scored.config.gpus() as f64);
            Ok(Sample {
                target: Target {
                    hw,
                    model: &row.model,
                    gpus_per_node: row.gpus_per_node,
                },
                eff: row.stack.apply(base),
                measurement: Measurement {
                    config: scored.config,
                    batch: row.batch,
                    step_time_s,
                },
            })
        })
        .collect()
}

/// Mean and worst absolute relative error of scored rows.
pub fn error_summary(errors: &[f64]) -> (f64, f64) {
    let n = errors.len().max(1) as f64;
    let mean = errors.iter().map(|e| e.abs()).sum::<f64>() / n;
    let worst = errors.iter().map(|e| e.abs()).fold(0.0, f64::max);
    (mean, worst)
}

/// Spearman rank correlation of two equally long samples (average ranks for ties).
pub fn spearman(a: &[f64], b: &[f64]) -> f64 {
    fn ranks(x: &[f64]) -> Vec<f64> {
        let mut idx: Vec<usize> = (0..x.len()).collect();
        idx.sort_by(|&i, &j| x[i].total_cmp(&x[j]));
        let mut r = vec![0.0; x.len()];
        let mut i = 0;
        while i < idx.len() {
            let mut j = i;
            while j + 1 < idx.len() && x[idx[j + 1]] == x[idx[i]] {
                j += 1;
            }
            let avg = (i + j) as f64 / 2.0 + 1.0;
            for &k in &idx[i..=j] {
                r[k] = avg;
            }
            i = j + 1;
        }
        r
    }
    let (ra, rb) = (ranks(a), ranks(b));
    let n = ra.len() as f64;
    let mean = (n + 1.0) / 2.0;
    let cov: f64 = ra
        .iter()
        .zip(&rb)
        .map(|(x, y)| (x - mean) * (y - mean))
        .sum();
    let var = |r: &[f64]| r.iter().map(|x| (x - mean).powi(2)).sum::<f64>();
    cov / (var(&ra) * var(&rb)).sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spearman_of_monotone_and_reversed_orders() {
        let a = [1.0, 2.0, 3.0, 4.0];
        assert!((spearman(&a, &[10.0, 20.0, 30.0, 40.0]) - 1.0).abs() < 1e-12);
        assert!((spearman(&a, &[4.0, 3.0, 2.0, 1.0]) + 1.0).abs() < 1e-12);
        assert!(spearman(&a, &[1.0, 3.0, 2.0, 4.0]) < 1.0);
    }

    #[test]
    fn parse_names_the_line_of_a_bad_row() {
        let header = COLUMNS.join(",");
        let text = format!(
            "# c\n{header}\nt,m,a100-80g,mcore-2024,2,64,2,100,16,8,1,1,1,x,1,1,full,8,1,model,test\n"
        );
        let e = parse(&text, "f.csv").expect_err("bad mbs");
        assert!(e.to_string().starts_with("f.csv:3:"), "{e}");
    }
}
