//! Numbers as the reasons and the app's screens write them.

/// `x` to `digits` significant digits in plain notation (a whole number keeps all its
/// integer digits: 41013.5 → "41014" at four), or in scientific notation outside
/// 10⁻³..10⁹: for statistical estimates whose intervals make further digits noise
/// (B_simple 1540.0892 [1069.1232, 2735.1151] → "1540 [1069, 2735]").
pub fn significant(x: f64, digits: usize) -> String {
    let digits = digits.max(1);
    if !x.is_finite() || x == 0.0 {
        return format!("{x}");
    }
    let magnitude = x.abs().log10().floor();
    if !(-3.0..9.0).contains(&magnitude) {
        return format!("{x:.*e}", digits - 1);
    }
    // Non-negative: the magnitude lies in -3..9.
    let decimals = (digits as f64 - 1.0 - magnitude).max(0.0) as usize;
    format!("{x:.decimals$}")
}
