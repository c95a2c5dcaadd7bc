//! Number formatting for narrow terminal cells and status lines (shared by the app and the view).

/// A compact human number: 1234 → "1.2k", 3.4e6 → "3.4M".
pub fn si(x: f64) -> String {
    let a = x.abs();
    let (v, s) = if a >= 1e12 {
        (x / 1e12, "T")
    } else if a >= 1e9 {
        (x / 1e9, "G")
    } else if a >= 1e6 {
        (x / 1e6, "M")
    } else if a >= 1e3 {
        (x / 1e3, "k")
    } else {
        (x, "")
    };
    if v.abs() >= 100.0 || s.is_empty() {
        format!("{v:.0}{s}")
    } else {
        format!("{v:.1}{s}")
    }
}

/// A count that may be below one (B_crit in another unit): 0.27 → "0.27", 8.5 → "8.50",
/// larger values as [`si`].
pub fn count(x: f64) -> String {
    if x.abs() < 10.0 {
        format!("{x:.2}")
    } else {
        si(x)
    }
}

/// Tokens as "12.3B" style text: k, M, B (billions, as token counts are written), T; the
/// one unit style for token counts on every screen.
pub fn tokens(t: f64) -> String {
    if t >= 1e12 {
        format!("{:.1}T", t / 1e12)
    } else if t >= 1e9 {
        format!("{:.1}B", t / 1e9)
    } else if t >= 1e6 {
        format!("{:.1}M", t / 1e6)
    } else if t >= 1e5 {
        format!("{:.0}k", t / 1e3)
    } else if t >= 1e4 {
        format!("{:.1}k", t / 1e3)
    } else {
        format!("{t:.0}")
    }
}

/// `s` with control characters other than newline and tab written as `\u{..}` escapes, so a
/// name read from a file (a layer, a run, a session) cannot drive the terminal.
pub fn escape_controls(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_control() && c != '\n' && c != '\t' {
                c.escape_unicode().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compact_numbers() {
        assert_eq!(si(950.0), "950");
        assert_eq!(si(1234.0), "1.2k");
        assert_eq!(si(123_456.0), "123k");
        assert_eq!(si(3.4e6), "3.4M");
        assert_eq!(tokens(600e9), "600.0B");
        assert_eq!(count(0.27), "0.27");
        assert_eq!(count(2304.0), "2.3k");
    }
}
