//! Sanity check against MosaicML llm-foundry H100 rows (MosaicML llm-foundry README, training benchmarks): FSDP full shard
//! modelled as ZeRO-3, BF16, MPT shapes (tied embeddings, V = 50368, s = 2048). These rows
//! were not used to choose any parameter.

use copus::perf::{
    EfficiencyParams, ModelProfile, ParallelConfig, PerfContext, Recompute, predict,
};
use copus::profiles;
use std::path::Path;

fn mpt(name: &str, layers: u32, hidden: u32, heads: u32) -> ModelProfile {
    ModelProfile {
        name: name.into(),
        layers,
        hidden,
        heads,
        kv_heads: heads,
        ffn_hidden: 4 * hidden,
        vocab: 50368,
        seq_len: 2048,
        swiglu: false,
        tied_embeddings: true,
        // MPT trains without dropout (attn_pdrop, resid_pdrop and emb_pdrop 0).
        dropout: Some(false),
        moe: None,
        source: "MPT config".into(),
    }
}

#[test]
fn llm_foundry_rows_are_within_a_quarter() {
    let hw = profiles::hardware("h100-sxm", Path::new(".")).expect("h100");
    // The H100 profile's efficiencies, with llm-foundry's stack: FSDP reduces BF16 gradients.
    let eff = EfficiencyParams {
        grad_bytes: 2.0,
        ..hw.efficiency.clone()
    };
    // (model, GPUs, global batch, mbs, recompute, published tokens/s/GPU)
    let rows = [
        (
            mpt("mpt-7b", 32, 4096, 32),
            8u32,
            48u64,
            6u32,
            Recompute::Selective,
            10643.0,
        ),
        (
            mpt("mpt-70b", 80, 8192, 64),
            64,
            2048,
            8,
            Recompute::Full,
            1039.0,
        ),
    ];
    for (model, gpus, batch, mbs, recompute, published) in rows {
        let ctx = PerfContext {
            hw: &hw,
            model: &model,
            eff: &eff,
            gpus_per_node: 8,
        };
        let cfg = ParallelConfig {
            dp: gpus,
            tp: 1,
            pp: 1,
            mbs,
            zero: 3,
            recompute,
            vpp: 1,
            cp: 1,
            ep: 1,
        };
        let p = predict(&ctx, &cfg, batch).expect("valid");
        let err = p.tokens_per_s_per_gpu / published - 1.0;
        println!(
            "{} {cfg}: {:.0} tokens/s/GPU (published {published}), error {:+.1}%, MFU {:.1}%, {:.1} GB",
            model.name,
            p.tokens_per_s_per_gpu,
            err * 100.0,
            p.mfu * 100.0,
            p.memory_per_gpu_bytes / 1e9
        );
        assert!(p.fits, "{} must fit", model.name);
        assert!(err.abs() < 0.25, "{}: error {err}", model.name);
    }
}
