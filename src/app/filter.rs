//! The heatmap's layout filter (`/`): conditions on the layout's degrees, such as
//! `tp<=4 pp=1` or `dp >= 8, cp = 1`, that hide the rows which do not meet all of them.

use crate::goodput::Layout;

/// A degree of a layout a condition can test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Degree {
    /// Data-parallel degree.
    Dp,
    /// Tensor-parallel degree.
    Tp,
    /// Pipeline-parallel degree.
    Pp,
    /// Context-parallel degree.
    Cp,
}

/// A comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cmp {
    /// `<`
    Lt,
    /// `<=` or `≤`
    Le,
    /// `=` or `==`
    Eq,
    /// `>=` or `≥`
    Ge,
    /// `>`
    Gt,
}

/// One condition: `degree cmp value`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Condition {
    /// What is compared.
    pub degree: Degree,
    /// How.
    pub cmp: Cmp,
    /// With what.
    pub value: u32,
}

/// A parsed filter: every condition must hold. `text` is what the user typed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayoutFilter {
    /// The conditions, all of which must hold.
    pub conditions: Vec<Condition>,
    /// The text as typed (shown in the heatmap's title).
    pub text: String,
}

/// Most conditions in one filter.
pub const MAX_CONDITIONS: usize = 16;

impl Condition {
    /// Whether `layout` meets the condition.
    pub fn holds(&self, layout: &Layout) -> bool {
        let v = match self.degree {
            Degree::Dp => layout.dp,
            Degree::Tp => layout.tp,
            Degree::Pp => layout.pp,
            Degree::Cp => layout.cp.max(1),
        };
        match self.cmp {
            Cmp::Lt => v < self.value,
            Cmp::Le => v <= self.value,
            Cmp::Eq => v == self.value,
            Cmp::Ge => v >= self.value,
            Cmp::Gt => v > self.value,
        }
    }
}

impl LayoutFilter {
    /// Whether `layout` meets every condition.
    pub fn matches(&self, layout: &Layout) -> bool {
        self.conditions.iter().all(|c| c.holds(layout))
    }
}

const HINT: &str = "conditions on dp, tp, pp or cp, e.g. 'tp<=4 pp=1' or 'dp>=8, cp=1'";

/// Parse `text`; `Ok(None)` for an empty filter (every layout shown).
pub fn parse(text: &str) -> Result<Option<LayoutFilter>, String> {
    let joined: String = text
        .replace('≤', "<=")
        .replace('≥', ">=")
        .to_ascii_lowercase();
    // Glue "tp <= 4" into "tp<=4", then split on commas and spaces.
    let mut compact = String::new();
    for part in joined.split([',', ' ', '\t']).filter(|p| !p.is_empty()) {
        let glue = compact.ends_with(['<', '>', '=']) || part.starts_with(['<', '>', '=']);
        if !glue && !compact.is_empty() {
            compact.push(' ');
        }
        compact.push_str(part);
    }
    let mut conditions = Vec::new();
    for term in compact.split(' ').filter(|t| !t.is_empty()) {
        conditions.push(term_of(term)?);
        if conditions.len() > MAX_CONDITIONS {
            return Err(format!("at most {MAX_CONDITIONS} conditions"));
        }
    }
    Ok((!conditions.is_empty()).then(|| LayoutFilter {
        conditions,
        text: text.trim().to_string(),
    }))
}

fn term_of(term: &str) -> Result<Condition, String> {
    let at = term
        .find(['<', '>', '='])
        .ok_or_else(|| format!("'{term}': no comparison; {HINT}"))?;
    let (name, rest) = term.split_at(at);
    let degree = match name {
        "dp" => Degree::Dp,
        "tp" => Degree::Tp,
        "pp" => Degree::Pp,
        "cp" => Degree::Cp,
        "zero" | "mbs" | "recompute" => {
            return Err(format!(
                "'{term}': {name} is chosen per cell, not a layout; set it in the what-if (2)"
            ));
        }
        _ => return Err(format!("'{term}': unknown degree '{name}'; {HINT}")),
    };
    let (cmp, value) = [
        ("<=", Cmp::Le),
        (">=", Cmp::Ge),
        ("==", Cmp::Eq),
        ("<", Cmp::Lt),
        (">", Cmp::Gt),
        ("=", Cmp::Eq),
    ]
    .iter()
    .find_map(|(op, cmp)| rest.strip_prefix(op).map(|v| (*cmp, v)))
    .ok_or_else(|| format!("'{term}': {HINT}"))?;
    let value: u32 = value
        .parse()
        .map_err(|_| format!("'{term}': '{value}' is not a whole number; {HINT}"))?;
    Ok(Condition { degree, cmp, value })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l(dp: u32, tp: u32, pp: u32, cp: u32) -> Layout {
        Layout { dp, tp, pp, cp }
    }

    #[test]
    fn parses_spaced_glued_and_unicode_forms() {
        for text in [
            "tp<=4 pp=1",
            "TP <= 4, pp = 1",
            "tp ≤ 4,pp==1",
            " tp<=4  ,  pp=1 ",
        ] {
            let f = parse(text).unwrap().unwrap();
            assert_eq!(f.conditions.len(), 2, "{text}");
            assert!(f.matches(&l(16, 4, 1, 1)), "{text}");
            assert!(!f.matches(&l(8, 8, 1, 1)), "{text}");
            assert!(!f.matches(&l(16, 2, 2, 1)), "{text}");
        }
        let f = parse("dp>8 cp<2").unwrap().unwrap();
        assert!(f.matches(&l(16, 4, 1, 1)) && !f.matches(&l(8, 8, 1, 1)));
        assert!(!f.matches(&l(16, 2, 1, 2)));
        assert_eq!(parse("  ").unwrap(), None);
    }

    #[test]
    fn errors_say_what_is_wrong() {
        assert!(parse("zero=1").unwrap_err().contains("what-if"));
        assert!(parse("ep<=2").unwrap_err().contains("unknown degree"));
        assert!(parse("tp<=four").unwrap_err().contains("whole number"));
        assert!(parse("tp").unwrap_err().contains("no comparison"));
        assert!(parse(&"tp<=4 ".repeat(20)).unwrap_err().contains("at most"));
    }
}
