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
use super::efficiency::{Precision, Sharding};
use super::measurements::Measurement;
use super::stack::{Stack, StackPreset};
use super::{
    ConfigCost, EfficiencyParams, HardwareProfile, ModelProfile, ParallelConfig, PerfContext,
    Prediction, Recompute, enumerate, flops,
};

/// The stack of a published row as the CSV names it: a preset name ([`StackPreset::name`],
/// what `--stack` takes), or, in files written before the names were unified, one of
/// `megatron-2021-torchddp`, `megatron-2021-local` and `mcore-2024`. The stack is a property of the
/// measurement (what its authors ran), not a fitted parameter; `precision` and `sharding`
/// columns change single settings.
pub fn parse_stack(name: &str) -> Option<Stack> {
    let preset = match name {
        "megatron-2021-torchddp" => StackPreset::MegatronLm2021,
        "megatron-2021-local" => StackPreset::MegatronLm2021Local,
        "mcore-2024" => StackPreset::MegatronCore,
        other => StackPreset::parse(other)?,
    };
    Some(Stack::preset(preset))
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
    /// Software stack (preset and changed settings).
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
    /// Peak memory per GPU the source measured, bytes (its framework's reading: usually the
    /// caching allocator's reserved total), if it published one.
    pub measured_memory_bytes: Option<f64>,
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

/// Bytes in a GiB.
const GIB: f64 = (1u64 << 30) as f64;

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

/// Optional columns after the required ones, in any order: the shape of a modern model
/// (`kv_heads`, `ffn`, `swiglu`, `tied`, `dropout` as yes/no), context parallelism (`cp`) and single
/// stack settings (`precision` bf16|fp8, `sharding` deepspeed|fsdp1|fsdp2|hsdp,
/// `grad_reduce` fp32|bf16, `tp_overlap` and `dp_overlap` yes|no, `sequence_parallel` yes|no,
/// `attention` fused|cudnn|unfused|triton,
/// `elementwise` fused|eager, `cp_comm` ring|all_gather|all_to_all, `cross_entropy`
/// fused|vocab_parallel|pytorch, `stage_split` ends|balanced|greedy) and the source's measured peak memory per GPU (`memory_gib`,
/// GiB). An empty value keeps the default.
const EXTRA_COLUMNS: [&str; 18] = [
    "kv_heads",
    "ffn",
    "swiglu",
    "tied",
    "dropout",
    "cp",
    "precision",
    "sharding",
    "grad_reduce",
    "tp_overlap",
    "dp_overlap",
    "memory_gib",
    "attention",
    "elementwise",
    "cp_comm",
    "cross_entropy",
    "sequence_parallel",
    "stage_split",
];

/// The finite, positive number `v` of column `name`, or why it is not one.
fn positive_number(name: &str, v: &str) -> Result<f64, String> {
    v.parse()
        .ok()
        .filter(|x: &f64| x.is_finite() && *x > 0.0)
        .ok_or_else(|| format!("{name} = '{v}' is not a positive number"))
}

/// Apply the optional columns of one row.
fn apply_extra(row: &mut PublishedRow, extra: &[(usize, &str)], f: &[&str]) -> Result<(), String> {
    for &(i, name) in extra {
        let v = f[i];
        if v.is_empty() {
            continue;
        }
        let int = || {
            v.parse::<u32>()
                .ok()
                .filter(|x| *x > 0)
                .ok_or_else(|| format!("{name} = '{v}' is not a positive whole number"))
        };
        let yes = || match v {
            "yes" => Ok(true),
            "no" => Ok(false),
            _ => Err(format!("{name} = '{v}' (yes|no)")),
        };
        match name {
            "kv_heads" => row.model.kv_heads = int()?,
            "ffn" => row.model.ffn_hidden = int()?,
            "swiglu" => row.model.swiglu = yes()?,
            "tied" => row.model.tied_embeddings = yes()?,
            "dropout" => row.model.dropout = Some(yes()?),
            "cp" => row.config.cp = int()?,
            "tp_overlap" => row.stack.tp_overlap = Some(yes()?),
            "dp_overlap" => row.stack.dp_overlap = Some(yes()?),
            "sequence_parallel" => row.stack.sequence_parallel = Some(yes()?),
            "memory_gib" => row.measured_memory_bytes = Some(positive_number(name, v)? * GIB),
            "precision" => {
                row.stack.precision = Some(match v {
                    "bf16" => Precision::Bf16,
                    "fp8" => Precision::Fp8,
                    _ => return Err(format!("precision '{v}' (bf16|fp8)")),
                })
            }
            "sharding" => {
                row.stack.sharding = Some(match v {
                    "deepspeed" => Sharding::DeepSpeed,
                    "fsdp1" => Sharding::Fsdp1,
                    "fsdp2" => Sharding::Fsdp2,
                    "hsdp" => Sharding::Hsdp,
                    _ => return Err(format!("sharding '{v}' (deepspeed|fsdp1|fsdp2|hsdp)")),
                })
            }
            "attention" => {
                row.stack.attention = Some(
                    super::efficiency::AttentionKind::from_name(v)
                        .ok_or_else(|| format!("attention '{v}' (fused|cudnn|unfused|triton)"))?,
                )
            }
            "elementwise" => {
                row.stack.elementwise = Some(
                    super::efficiency::Elementwise::from_name(v)
                        .ok_or_else(|| format!("elementwise '{v}' (fused|eager)"))?,
                )
            }
            "cross_entropy" => {
                row.stack.cross_entropy = Some(
                    super::efficiency::CrossEntropy::from_name(v).ok_or_else(|| {
                        format!("cross_entropy '{v}' (fused|vocab_parallel|pytorch)")
                    })?,
                )
            }
            "cp_comm" => {
                row.stack.cp_comm = Some(
                    super::efficiency::CpComm::from_name(v)
                        .ok_or_else(|| format!("cp_comm '{v}' (ring|all_gather|all_to_all)"))?,
                )
            }
            "stage_split" => {
                row.stack.stage_split = Some(
                    super::efficiency::StageSplit::from_name(v)
                        .ok_or_else(|| format!("stage_split '{v}' (ends|balanced|greedy)"))?,
                )
            }
            "grad_reduce" => {
                row.stack.grad_reduce = Some(match v {
                    "fp32" => super::stack::GradReduce::Fp32,
                    "bf16" => super::stack::GradReduce::Bf16,
                    _ => return Err(format!("grad_reduce '{v}' (fp32|bf16)")),
                })
            }
            other => return Err(format!("column '{other}' is not handled")),
        }
    }
    Ok(())
}

/// Parse a published-measurement CSV (module docs); `origin` names it in errors.
pub fn parse(text: &str, origin: &str) -> Result<Vec<PublishedRow>, ParseError> {
    let mut rows = Vec::new();
    let mut header_seen = false;
    let mut width = COLUMNS.len();
    let mut extra: Vec<(usize, &str)> = Vec::new();
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
        let owned = super::measurements::split_csv_line(line).map_err(err)?;
        let f: Vec<&str> = owned.iter().map(String::as_str).collect();
        if !header_seen {
            if f.len() < COLUMNS.len() || f[..COLUMNS.len()] != COLUMNS {
                return Err(err(format!(
                    "header must be {} (then any of {})",
                    COLUMNS.join(","),
                    EXTRA_COLUMNS.join(",")
                )));
            }
            for (i, name) in f.iter().enumerate().skip(COLUMNS.len()) {
                let known = EXTRA_COLUMNS
                    .iter()
                    .find(|c| *c == name)
                    .ok_or_else(|| err(format!("unknown column '{name}'")))?;
                if extra.iter().any(|(_, n)| n == known) {
                    return Err(err(format!("column '{name}' twice")));
                }
                extra.push((i, known));
            }
            width = f.len();
            header_seen = true;
            continue;
        }
        if f.len() != width {
            return Err(err(format!("{} fields, expected {width}", f.len())));
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
            dropout: None,
            moe: None,
            source: origin.to_string(),
        };
        let recompute = match f[16] {
            "auto" => None,
            o => Some(
                Recompute::parse(o)
                    .ok_or_else(|| err(format!("recompute '{o}' (none|selective|op|full|auto)")))?,
            ),
        };
        let zero = u8::try_from(int(15)?)
            .ok()
            .filter(|z| *z <= 3)
            .ok_or_else(|| err("zero must be 0–3".into()))?;
        let tflops = positive_number("tflops", f[18]).map_err(err)?;
        let mut row = PublishedRow {
            set: f[0].to_string(),
            model,
            hardware: f[2].to_string(),
            stack: parse_stack(f[3]).ok_or_else(|| err(format!("unknown stack '{}'", f[3])))?,
            gpus_per_node: int(9)?,
            config: ParallelConfig {
                dp: int(10)?,
                tp: int(11)?,
                pp: int(12)?,
                mbs: auto_int(13)?,
                zero,
                recompute: recompute.unwrap_or(Recompute::Selective),
                vpp: auto_int(14)?,
                cp: 1,
                ep: 1,
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
            measured_memory_bytes: None,
        };
        apply_extra(&mut row, &extra, &f).map_err(err)?;
        rows.push(row);
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

/// The configuration of `row` with its auto choices resolved to the fastest that fits (among
/// the recompute policies its stack has), and its prediction.
pub fn resolve(
    ctx: &PerfContext,
    row: &PublishedRow,
) -> Result<(ParallelConfig, Prediction), super::Invalid> {
    let c = row.config;
    let recompute: Vec<Recompute> = match row.recompute {
        Some(r) => vec![r],
        // The policies the row's framework has, as `auto` chooses for a user.
        None => row.stack.base().recompute_policies().to_vec(),
    };
    let vpps: Vec<u32> = if c.vpp > 0 {
        vec![c.vpp]
    } else {
        super::validate::interleave_candidates(&row.model, c.pp)
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
    match enumerate::auto(ctx, &base, row.batch, &recompute, (&vpps, &[base.ep])) {
        Err(super::Invalid::OutOfMemory { .. }) => {
            lightest(ctx, &base, row.batch, &recompute, &vpps)
        }
        resolved => resolved,
    }
}

/// The auto choice of `base` that needs least memory (the faster one on a tie), predicted
/// although it does not fit: a row that ran but that no choice fits in the model's memory is
/// still scored for its time, and its `fits: false` shows the memory disagreement.
fn lightest(
    ctx: &PerfContext,
    base: &ParallelConfig,
    global_batch: u64,
    recompute: &[Recompute],
    interleave: &[u32],
) -> Result<(ParallelConfig, Prediction), super::Invalid> {
    let key = |p: &Prediction| (p.memory_per_gpu_bytes, p.step_time_s);
    enumerate::auto_choices(ctx, base, global_batch, recompute, (interleave, &[base.ep]))?
        .iter()
        .filter_map(|k| Some((k.cfg, k.at(ctx, global_batch).ok()?)))
        .min_by(|a, b| {
            key(&a.1)
                .partial_cmp(&key(&b.1))
                .unwrap_or(std::cmp::Ordering::Equal)
        })
        .ok_or_else(|| super::Invalid::Other("no configuration can be costed".into()))
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

    #[test]
    fn quoted_fields_keep_their_commas_and_an_open_quote_names_its_line() {
        let header = COLUMNS.join(",");
        let row = |name: &str| {
            format!(
                "t,{name},h100-sxm,torchtitan-fsdp2,2,64,2,100,16,8,1,2,1,1,1,3,full,8,1,model,test"
            )
        };
        let rows =
            parse(&format!("{header}\n{}\n", row("\"gpt, small\"")), "f.csv").expect("parses");
        assert_eq!(rows[0].model.name, "gpt, small");
        let e = parse(&format!("{header}\n{}\n", row("\"gpt")), "f.csv").expect_err("open quote");
        assert!(
            e.to_string().starts_with("f.csv:2:") && e.to_string().contains("not closed"),
            "{e}"
        );
    }

    #[test]
    fn async_tp_and_measured_memory_columns() {
        let header = format!("{},tp_overlap,memory_gib", COLUMNS.join(","));
        let row = "t,m,h100-sxm,torchtitan-fsdp2,2,64,2,100,16,8,1,2,1,1,1,3,full,8,1,model,test";
        let text = format!("{header}\n{row},yes,61.5\n{row},,\n");
        let rows = parse(&text, "f.csv").expect("parses");
        assert_eq!(rows[0].stack.tp_overlap, Some(true));
        assert_eq!(rows[0].measured_memory_bytes, Some(61.5 * GIB));
        // Empty values keep the preset's setting and no measurement.
        assert_eq!(rows[1].stack.tp_overlap, None);
        assert_eq!(rows[1].measured_memory_bytes, None);
        for (bad, says) in [
            ("maybe,1", "tp_overlap"),
            ("no,-3", "memory_gib"),
            ("no,x", "memory_gib"),
        ] {
            let e = parse(&format!("{header}\n{row},{bad}\n"), "f.csv").expect_err(bad);
            assert!(
                e.to_string().contains(says) && e.to_string().starts_with("f.csv:2:"),
                "{e}"
            );
        }
    }

    #[test]
    fn attention_and_elementwise_columns() {
        use crate::perf::efficiency::{AttentionKind, Elementwise};
        let header = format!("{},attention,elementwise", COLUMNS.join(","));
        let row = "t,m,h100-sxm,llm-foundry,2,64,2,100,16,8,1,2,1,1,1,3,full,8,1,model,test";
        let rows =
            parse(&format!("{header}\n{row},triton,fused\n{row},,\n"), "f.csv").expect("parses");
        assert_eq!(rows[0].stack.attention, Some(AttentionKind::Triton));
        assert_eq!(rows[0].stack.elementwise, Some(Elementwise::Fused));
        assert_eq!(
            (rows[1].stack.attention, rows[1].stack.elementwise),
            (None, None)
        );
        for (bad, says) in [
            ("flash,eager", "attention 'flash'"),
            ("fused,compiled", "elementwise"),
        ] {
            let e = parse(&format!("{header}\n{row},{bad}\n"), "f.csv").expect_err(bad);
            assert!(
                e.to_string().contains(says) && e.to_string().starts_with("f.csv:2:"),
                "{e}"
            );
        }
    }

    #[test]
    fn sequence_parallel_column_sets_the_stack() {
        let header = format!("{},sequence_parallel", COLUMNS.join(","));
        let row =
            "t,m,a100-80g,megatron-lm-2021,4,1024,16,1000,2048,8,1,8,1,1,1,0,none,4,1,model,test";
        let rows = parse(&format!("{header}\n{row},yes\n{row},\n"), "f.csv").expect("parses");
        assert_eq!(rows[0].stack.sequence_parallel, Some(true));
        assert_eq!(rows[1].stack.sequence_parallel, None);
        let eff = EfficiencyParams::default();
        let (with_sp, without) = (
            rows[0].stack.apply(&eff).sequence_parallel,
            rows[1].stack.apply(&eff).sequence_parallel,
        );
        assert!(with_sp && !without, "the 2021 preset runs without it");
        let e = parse(&format!("{header}\n{row},on\n"), "f.csv").expect_err("on");
        assert!(
            e.to_string().starts_with("f.csv:2:") && e.to_string().contains("sequence_parallel"),
            "{e}"
        );
    }

    #[test]
    fn cp_comm_column() {
        use crate::perf::efficiency::CpComm;
        let header = format!("{},cp,cp_comm", COLUMNS.join(","));
        let row = "t,m,h100-sxm,torchtitan-fsdp2,2,64,2,100,16,8,1,1,1,1,1,3,full,8,1,model,test";
        let rows = parse(
            &format!("{header}\n{row},2,all_to_all\n{row},2,\n"),
            "f.csv",
        )
        .expect("parses");
        assert_eq!(rows[0].stack.cp_comm, Some(CpComm::AllToAll));
        assert_eq!(rows[1].stack.cp_comm, None);
        let with_ce = format!("{header},cross_entropy\n{row},1,,fused\n");
        let rows = parse(&with_ce, "f.csv").expect("parses");
        assert_eq!(
            rows[0].stack.cross_entropy,
            Some(crate::perf::efficiency::CrossEntropy::Fused)
        );
        let bad = format!("{header},cross_entropy\n{row},1,,apex\n");
        let e = parse(&bad, "f.csv").expect_err("apex");
        assert!(e.to_string().contains("cross_entropy 'apex'"), "{e}");
        let e = parse(&format!("{header}\n{row},2,ulysses\n"), "f.csv").expect_err("ulysses");
        assert!(
            e.to_string().starts_with("f.csv:2:") && e.to_string().contains("cp_comm 'ulysses'"),
            "{e}"
        );
    }
}
