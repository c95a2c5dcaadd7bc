//! Floating-point operations of a training step (Narayanan et al. 2021, arXiv 2104.04473),
//! generalised to GQA (narrower K/V projections), SwiGLU (three FFN matrices) and MoE (top-k
//! experts active per token). For a GPT shape (kv = h, ffn = 4h, no gating) the model FLOPs are
//! exactly 72·B·s·l·h²·(1 + s/6h + V/12lh), and 96·B·s·l·h²·(1 + s/6h + V/16lh) with full
//! recompute.

use super::{ModelProfile, Recompute};

/// Forward FLOPs per token of one layer's GEMMs (projections and the active experts).
pub fn layer_gemm_flops_per_token(m: &ModelProfile) -> f64 {
    2.0 * (m.attention_params() + m.active_experts() * m.expert_params())
}

/// Forward FLOPs per token of one layer's attention core (QKᵀ and AV, full s×s as Megatron
/// counts it, not halved for the causal mask).
pub fn layer_attention_flops_per_token(m: &ModelProfile) -> f64 {
    4.0 * m.seq_len as f64 * m.hidden as f64
}

/// Forward FLOPs per token of the output layer (logits).
pub fn logits_flops_per_token(m: &ModelProfile) -> f64 {
    2.0 * m.hidden as f64 * m.vocab as f64
}

/// Model FLOPs of one step over `tokens` tokens (forward + backward = 3× forward), the MFU
/// basis: recomputation is not counted.
pub fn model_flops(m: &ModelProfile, tokens: f64) -> f64 {
    let per_layer = layer_gemm_flops_per_token(m) + layer_attention_flops_per_token(m);
    3.0 * tokens * (m.layers as f64 * per_layer + logits_flops_per_token(m))
}

/// Share (0–1) of [`model_flops`] that is the attention core's (QKᵀ and AV counted in full):
/// half of it is the causal mask's upper triangle, which fused kernels skip, so an MFU over
/// the FLOPs the kernels execute is `mfu · (1 − share/2)`.
pub fn attention_flop_share(m: &ModelProfile) -> f64 {
    let layers = m.layers as f64;
    let attention = layers * layer_attention_flops_per_token(m);
    let all = layers * (layer_gemm_flops_per_token(m) + layer_attention_flops_per_token(m))
        + logits_flops_per_token(m);
    if all > 0.0 { attention / all } else { 0.0 }
}

/// FLOPs the hardware executes in one step over `tokens` tokens, counting recomputation:
/// selective recompute repeats the attention core's forward, full recompute every layer's
/// forward (the output layer is never recomputed).
pub fn hardware_flops(m: &ModelProfile, tokens: f64, recompute: Recompute) -> f64 {
    let layers = m.layers as f64;
    let extra = match recompute {
        Recompute::None => 0.0,
        Recompute::Selective => layers * layer_attention_flops_per_token(m),
        // Every other GEMM of the layer (about half its GEMM FLOPs), as step_time models it.
        Recompute::Op => layers * 0.5 * layer_gemm_flops_per_token(m),
        Recompute::Full => {
            layers * (layer_gemm_flops_per_token(m) + layer_attention_flops_per_token(m))
        }
    };
    model_flops(m, tokens) + tokens * extra
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpt(l: u32, h: u32, a: u32) -> ModelProfile {
        ModelProfile {
            name: "gpt".into(),
            layers: l,
            hidden: h,
            heads: a,
            kv_heads: a,
            ffn_hidden: 4 * h,
            vocab: 131072,
            seq_len: 4096,
            swiglu: false,
            tied_embeddings: false,
            dropout: None,
            moe: None,
            source: String::new(),
        }
    }

    #[test]
    fn gpt_shapes_match_narayanan() {
        for (l, h, a) in [(24, 2048, 16), (96, 12288, 96), (7, 640, 5)] {
            let m = gpt(l, h, a);
            let (lf, hf, s, v) = (l as f64, h as f64, 4096.0, 131072.0);
            let b = 3.0;
            let tokens = b * s;
            let narayanan =
                72.0 * b * s * lf * hf * hf * (1.0 + s / (6.0 * hf) + v / (12.0 * lf * hf));
            let full = 96.0 * b * s * lf * hf * hf * (1.0 + s / (6.0 * hf) + v / (16.0 * lf * hf));
            assert!((model_flops(&m, tokens) / narayanan - 1.0).abs() < 1e-12);
            let hw = hardware_flops(&m, tokens, Recompute::Full);
            assert!((hw / full - 1.0).abs() < 1e-12);
            assert!(hardware_flops(&m, tokens, Recompute::Selective) > model_flops(&m, tokens));
        }
    }

    #[test]
    fn gqa_and_swiglu_change_the_projection_flops() {
        let mut m = gpt(2, 1024, 16);
        let dense = layer_gemm_flops_per_token(&m);
        m.kv_heads = 4;
        let gqa = layer_gemm_flops_per_token(&m);
        // K and V shrink from h×h to h×h/4 each: 2·(2h² − 2h²/4) fewer FLOPs per token.
        let h = 1024.0;
        assert!((dense - gqa - 2.0 * (2.0 * h * h - 0.5 * h * h)).abs() < 1e-6);
        m.swiglu = true;
        assert!((layer_gemm_flops_per_token(&m) - gqa - 2.0 * h * 4.0 * h).abs() < 1e-6);
    }
}
