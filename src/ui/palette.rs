//! The heatmap's encoding: the current theme's colour ramp ([`crate::ui::theme`]), or shading
//! glyphs when NO_COLOR is set.

use ratatui::style::Color;

/// How the view may use colour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColorMode {
    /// 256-colour (or better) terminal.
    Indexed,
    /// NO_COLOR: shading glyphs instead of colours.
    Monochrome,
}

impl ColorMode {
    /// Read the mode from the environment (NO_COLOR, https://no-color.org).
    pub fn from_env() -> Self {
        match std::env::var_os("NO_COLOR") {
            Some(v) if !v.is_empty() => ColorMode::Monochrome,
            _ => ColorMode::Indexed,
        }
    }
}

/// Shading glyphs from low to high.
pub const SHADES: [char; 5] = ['·', '░', '▒', '▓', '█'];

/// Background colour for a value in [0, 1], from the current theme's ramp.
pub fn ramp_color(t: f64) -> Color {
    crate::ui::theme::current().ramp_colours(t).0
}

/// A readable foreground on top of [`ramp_color`]`(t)`.
pub fn text_on(t: f64) -> Color {
    crate::ui::theme::current().ramp_colours(t).1
}

/// Shading glyph for a value in [0, 1].
pub fn shade(t: f64) -> char {
    let t = if t.is_finite() {
        t.clamp(0.0, 1.0)
    } else {
        0.0
    };
    SHADES[((t * (SHADES.len() - 1) as f64).round() as usize).min(SHADES.len() - 1)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ramp_is_monotone_in_index_and_clamps() {
        assert_eq!(ramp_color(-1.0), ramp_color(0.0));
        assert_eq!(ramp_color(2.0), ramp_color(1.0));
        assert_eq!(ramp_color(f64::NAN), ramp_color(0.0));
        assert_ne!(ramp_color(0.0), ramp_color(1.0));
        assert_eq!(shade(0.0), '·');
        assert_eq!(shade(1.0), '█');
    }
}
