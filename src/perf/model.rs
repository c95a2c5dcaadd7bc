//! Model profiles: the transformer shape the performance model needs.
//! Profiles live as RON under `assets/models/`.

use serde::{Deserialize, Serialize};

/// Mixture-of-experts settings of a model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MoeSpec {
    /// Number of experts per MoE layer.
    pub experts: u32,
    /// Experts each token is routed to.
    pub top_k: u32,
    /// Capacity factor (tokens an expert accepts, relative to an even share).
    pub capacity_factor: f64,
}

/// A decoder-only transformer shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelProfile {
    /// Short name used on the CLI and in sessions (e.g. "llama-7b").
    pub name: String,
    /// Transformer layers.
    pub layers: u32,
    /// Hidden size h.
    pub hidden: u32,
    /// Attention heads a.
    pub heads: u32,
    /// Key/value heads (GQA); equal to `heads` for multi-head attention.
    pub kv_heads: u32,
    /// Feed-forward inner size.
    pub ffn_hidden: u32,
    /// Vocabulary size V.
    pub vocab: u32,
    /// Sequence length s in tokens (one sample = one sequence).
    pub seq_len: u32,
    /// Gated (SwiGLU) MLP with three projections instead of two.
    #[serde(default)]
    pub swiglu: bool,
    /// Mixture-of-experts settings, if any.
    #[serde(default)]
    pub moe: Option<MoeSpec>,
    /// Where the shape comes from.
    #[serde(default)]
    pub source: String,
}
