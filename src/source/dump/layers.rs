//! Grouping of tensor names into layers for the per-layer breakdown of `StepStats.layers`.
//!
//! Rule: split the name on '.'; if a component is a number (a layer index), the key is the
//! name up to and including the first such component (`model.layers.3.mlp.up_proj.weight` →
//! `model.layers.3`); otherwise the key drops the last component (the parameter kind:
//! `model.embed_tokens.weight` → `model.embed_tokens`, `lm_head.weight` → `lm_head`); a name
//! without '.' is its own key.

/// The layer key of a tensor name (see the module docs for the rule).
pub fn layer_key(name: &str) -> String {
    let parts: Vec<&str> = name.split('.').collect();
    let numeric = |p: &&str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
    if let Some(i) = parts.iter().position(numeric) {
        return parts[..=i].join(".");
    }
    if parts.len() > 1 {
        parts[..parts.len() - 1].join(".")
    } else {
        name.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::layer_key;

    #[test]
    fn groups_by_first_index_or_drops_the_parameter_kind() {
        assert_eq!(
            layer_key("model.layers.3.mlp.up_proj.weight"),
            "model.layers.3"
        );
        assert_eq!(
            layer_key("transformer.h.10.attn.c_attn.bias"),
            "transformer.h.10"
        );
        assert_eq!(layer_key("model.embed_tokens.weight"), "model.embed_tokens");
        assert_eq!(layer_key("lm_head.weight"), "lm_head");
        assert_eq!(layer_key("scale"), "scale");
    }
}
