//! One validation of everything a command reads before it computes: model, hardware and
//! efficiency profiles ([`profile`]), the ranges and sizes of a resolved session
//! ([`session`]), and unknown field names in RON text ([`fields`]). Every message names the
//! field at fault with its value, so that a typo or an out-of-range number is an error rather
//! than a silently wrong answer.

pub mod fields;
pub mod profile;
pub mod session;

/// A value out of range: the dotted field path and what is wrong.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{field}: {msg}")]
pub struct Invalid {
    /// Dotted path of the field (e.g. `model.kv_heads`, `cluster.nodes`).
    pub field: String,
    /// What is wrong, with the value.
    pub msg: String,
}

impl Invalid {
    /// An error for `field`.
    pub fn new(field: impl Into<String>, msg: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            msg: msg.into(),
        }
    }
}

/// `v` must be finite and > 0.
pub(crate) fn positive(field: &str, v: f64) -> Result<(), Invalid> {
    if v.is_finite() && v > 0.0 {
        Ok(())
    } else {
        Err(Invalid::new(
            field,
            format!("must be a positive finite number, got {}", num(v)),
        ))
    }
}

/// A number for an error message: plain when of everyday size, else in scientific notation
/// (never 300 digits of 1e300).
pub(crate) fn num(v: f64) -> String {
    if v == 0.0 || !v.is_finite() || (1e-4..1e9).contains(&v.abs()) {
        format!("{v}")
    } else {
        format!("{v:e}")
    }
}

/// `v` must lie in `lo..=hi` (`unit` names what it counts, for the message).
pub(crate) fn in_range(field: &str, v: f64, lo: f64, hi: f64, unit: &str) -> Result<(), Invalid> {
    if (lo..=hi).contains(&v) {
        Ok(())
    } else {
        Err(Invalid::new(
            field,
            format!(
                "must lie in {}..={} {unit}, got {}",
                num(lo),
                num(hi),
                num(v)
            ),
        ))
    }
}

/// `v` must be finite and ≥ 0.
pub(crate) fn non_negative(field: &str, v: f64) -> Result<(), Invalid> {
    if v.is_finite() && v >= 0.0 {
        Ok(())
    } else {
        Err(Invalid::new(
            field,
            format!("must be a finite number ≥ 0, got {}", num(v)),
        ))
    }
}

/// `v` must lie in (0, 1].
pub(crate) fn fraction(field: &str, v: f64) -> Result<(), Invalid> {
    if v > 0.0 && v <= 1.0 {
        Ok(())
    } else {
        Err(Invalid::new(
            field,
            format!("must lie in (0, 1], got {}", num(v)),
        ))
    }
}

/// `v` must lie in [0, 1].
pub(crate) fn unit(field: &str, v: f64) -> Result<(), Invalid> {
    if (0.0..=1.0).contains(&v) {
        Ok(())
    } else {
        Err(Invalid::new(
            field,
            format!("must lie in [0, 1], got {}", num(v)),
        ))
    }
}

/// Every number in `value` (walked through its RON form, so that fields added later are
/// covered too) must be finite; `field` prefixes the reported path.
pub(crate) fn all_finite<T: serde::Serialize>(field: &str, value: &T) -> Result<(), Invalid> {
    let text = ron::to_string(value).map_err(|e| Invalid::new(field, e.to_string()))?;
    let v: ron::Value = ron::from_str(&text).map_err(|e| Invalid::new(field, e.to_string()))?;
    walk_finite(field, &v)
}

fn walk_finite(path: &str, v: &ron::Value) -> Result<(), Invalid> {
    match v {
        ron::Value::Number(n) => {
            let x = (*n).into_f64();
            if x.is_finite() {
                Ok(())
            } else {
                Err(Invalid::new(
                    path,
                    format!("must be a finite number, got {x}"),
                ))
            }
        }
        ron::Value::Map(m) => m.iter().try_for_each(|(k, v)| match k {
            ron::Value::String(k) => walk_finite(&format!("{path}.{k}"), v),
            _ => walk_finite(path, v),
        }),
        ron::Value::Seq(s) => s
            .iter()
            .enumerate()
            .try_for_each(|(i, v)| walk_finite(&format!("{path}[{i}]"), v)),
        ron::Value::Option(Some(v)) => walk_finite(path, v),
        _ => Ok(()),
    }
}
