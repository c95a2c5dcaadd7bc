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
    /// Capacity factor (tokens an expert accepts, relative to an even share), for routers that
    /// drop the tokens over it. It sets the batch floor below which too many are dropped
    /// (`moe::batch_floor`, the grid's caveat and the explorer's explanation). `None` (the
    /// field left out): dropless routing, no capacity and no floor, as Megatron-Core's default
    /// MoE and MegaBlocks run. Step time and memory are costed for the routed tokens without
    /// padding to capacity either way. Written `capacity_factor: 1.25` or `Some(1.25)`.
    #[serde(default, deserialize_with = "number_or_none")]
    pub capacity_factor: Option<f64>,
}

/// A number written plainly (`1.25`) or as an option (`Some(1.25)`, `None`, JSON `null`).
fn number_or_none<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    struct Visitor;
    impl<'de> serde::de::Visitor<'de> for Visitor {
        type Value = Option<f64>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a number, Some(number) or None")
        }
        fn visit_f64<E: serde::de::Error>(self, x: f64) -> Result<Self::Value, E> {
            Ok(Some(x))
        }
        fn visit_i64<E: serde::de::Error>(self, x: i64) -> Result<Self::Value, E> {
            Ok(Some(x as f64))
        }
        fn visit_u64<E: serde::de::Error>(self, x: u64) -> Result<Self::Value, E> {
            Ok(Some(x as f64))
        }
        fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            f64::deserialize(d).map(Some)
        }
    }
    d.deserialize_any(Visitor)
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
    /// Input embedding and output layer share one matrix (false: two V×h matrices, as in the
    /// Megatron GPT table and Llama 2/3 ≥ 7B).
    #[serde(default)]
    pub tied_embeddings: bool,
    /// Trained with dropout (Megatron's GPT recipes, p = 0.1): the backward keeps two dropout
    /// masks per layer, one byte an element. `None` follows the MLP: GELU shapes (GPT) with
    /// dropout, SwiGLU shapes (Llama, Mistral, DeepSeek, whose recipes set it to 0) without.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dropout: Option<bool>,
    /// Mixture-of-experts settings, if any.
    #[serde(default)]
    pub moe: Option<MoeSpec>,
    /// Where the shape comes from.
    #[serde(default)]
    pub source: String,
}

impl ModelProfile {
    /// Key/value projection width (h·kv_heads/heads), elements.
    pub fn kv_hidden(&self) -> f64 {
        self.hidden as f64 * self.kv_heads as f64 / self.heads.max(1) as f64
    }

    /// Whether the backward keeps dropout masks ([`Self::dropout`], else its default).
    pub fn keeps_dropout_masks(&self) -> bool {
        self.dropout.unwrap_or(!self.swiglu)
    }

    /// Feed-forward projection matrices per expert (3 for SwiGLU, 2 otherwise).
    pub fn ffn_matrices(&self) -> f64 {
        if self.swiglu { 3.0 } else { 2.0 }
    }

    /// Experts per MoE layer (1 for a dense model).
    pub fn experts(&self) -> f64 {
        self.moe.as_ref().map_or(1.0, |m| m.experts.max(1) as f64)
    }

    /// Experts each token visits (1 for a dense model).
    pub fn active_experts(&self) -> f64 {
        self.moe.as_ref().map_or(1.0, |m| m.top_k.max(1) as f64)
    }

    /// Attention parameters of one layer (Q, K, V, output projections).
    pub fn attention_params(&self) -> f64 {
        let h = self.hidden as f64;
        2.0 * h * h + 2.0 * h * self.kv_hidden()
    }

    /// Feed-forward parameters of one expert of one layer.
    pub fn expert_params(&self) -> f64 {
        self.ffn_matrices() * self.hidden as f64 * self.ffn_hidden as f64
    }

    /// Parameters of one layer outside its experts (attention), norms and biases left out.
    pub fn dense_layer_params(&self) -> f64 {
        self.attention_params()
    }

    /// Parameters of one layer's experts together (its MLP for a dense model).
    pub fn expert_layer_params(&self) -> f64 {
        self.experts() * self.expert_params()
    }

    /// Parameters of one transformer layer (all experts), norms and biases left out.
    pub fn layer_params(&self) -> f64 {
        self.attention_params() + self.experts() * self.expert_params()
    }

    /// Parameters of the input embedding and output layer together (V·h, twice if untied).
    pub fn embedding_params(&self) -> f64 {
        let one = self.vocab as f64 * self.hidden as f64;
        if self.tied_embeddings { one } else { 2.0 * one }
    }
}
