//! Themes: the view's colours as semantic roles, so that no view file names a colour.
//!
//! Built in: `dark` (the default, tuned for dark 256-colour terminals), `light` (the 16 ANSI
//! colours only, so the terminal's own palette decides: readable on light backgrounds and
//! projectors) and `colorblind` (the dark theme with a blue → yellow heatmap ramp, cividis-like,
//! distinguishable with red–green colour blindness, and blue against orange for good and bad).
//! NO_COLOR (https://no-color.org) keeps the heatmap in shading glyphs whatever the theme.
//!
//! The view reads the theme of the frame being drawn through [`current`]; [`draw_with`] sets it
//! for one draw call (the UI thread only draws, so the theme is per thread and per frame).

pub use crate::config::ThemeName;
use ratatui::style::{Color, Modifier, Style};
use std::cell::Cell;

/// The view's colours by what they mean. Each role has a plain and a soft (lighter) shade.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Theme {
    /// Which built-in theme this is.
    pub name: ThemeName,
    /// Titles, the focused panel's border, the current point.
    pub accent: Color,
    /// A lighter accent (a second series beside the accent's).
    pub accent_soft: Color,
    /// Secondary text: labels, axes, unfocused borders, hints.
    pub muted: Color,
    /// Text a step less prominent than the main text.
    pub dim: Color,
    /// What needs the user's attention: the status line, popups' borders, warnings.
    pub warning: Color,
    /// A lighter warning.
    pub warning_soft: Color,
    /// Errors and what cannot run.
    pub error: Color,
    /// A lighter error.
    pub error_soft: Color,
    /// What is good: a recommended cell, a connected live run.
    pub good: Color,
    /// A lighter good.
    pub good_soft: Color,
    /// Planned switch points and marks.
    pub mark: Color,
    /// A lighter mark.
    pub mark_soft: Color,
    /// Information: a third series, neutral notes.
    pub info: Color,
    /// A lighter information colour.
    pub info_soft: Color,
    /// Dark text on a light background (a coloured bar).
    pub on_light: Color,
    /// The heatmap's background colours, low to high.
    pub ramp: &'static [Color],
    /// Heatmap text is black on values above this (in [0, 1]) and white below.
    pub dark_text_above: f64,
}

/// Dark purple → blue → teal → green → yellow (viridis-like), xterm-256.
const VIRIDIS: [Color; 10] = [
    Color::Indexed(53),
    Color::Indexed(54),
    Color::Indexed(60),
    Color::Indexed(24),
    Color::Indexed(31),
    Color::Indexed(37),
    Color::Indexed(36),
    Color::Indexed(71),
    Color::Indexed(149),
    Color::Indexed(226),
];

/// Dark blue → grey → yellow (cividis-like), xterm-256: no red–green contrast carries value.
const CIVIDIS: [Color; 8] = [
    Color::Indexed(17),
    Color::Indexed(18),
    Color::Indexed(60),
    Color::Indexed(102),
    Color::Indexed(144),
    Color::Indexed(180),
    Color::Indexed(186),
    Color::Indexed(226),
];

/// The 16 ANSI colours, dark to bright as most palettes draw them.
const ANSI16: [Color; 6] = [
    Color::Blue,
    Color::Magenta,
    Color::Cyan,
    Color::Green,
    Color::Yellow,
    Color::LightYellow,
];

impl Theme {
    /// The built-in theme `name`.
    pub fn builtin(name: ThemeName) -> Self {
        match name {
            ThemeName::Dark => Theme::dark(),
            ThemeName::Light => Theme::light(),
            ThemeName::Colorblind => Theme {
                name,
                ramp: &CIVIDIS,
                dark_text_above: 0.45,
                // Blue for good, orange for bad (Okabe and Ito's pair), never red against green.
                good: Color::Indexed(33),
                good_soft: Color::Indexed(39),
                error: Color::Indexed(208),
                error_soft: Color::Indexed(214),
                ..Theme::dark()
            },
        }
    }

    fn dark() -> Self {
        Theme {
            name: ThemeName::Dark,
            accent: Color::Cyan,
            accent_soft: Color::LightCyan,
            muted: Color::DarkGray,
            dim: Color::Gray,
            warning: Color::Yellow,
            warning_soft: Color::LightYellow,
            error: Color::Red,
            error_soft: Color::LightRed,
            good: Color::Green,
            good_soft: Color::LightGreen,
            mark: Color::Magenta,
            mark_soft: Color::LightMagenta,
            info: Color::Blue,
            info_soft: Color::LightBlue,
            on_light: Color::Black,
            ramp: &VIRIDIS,
            dark_text_above: 0.7,
        }
    }

    fn light() -> Self {
        // Yellow and the light shades are unreadable on a light background.
        Theme {
            name: ThemeName::Light,
            accent: Color::Blue,
            accent_soft: Color::Cyan,
            muted: Color::DarkGray,
            dim: Color::DarkGray,
            warning: Color::Magenta,
            warning_soft: Color::Magenta,
            error: Color::Red,
            error_soft: Color::Red,
            good: Color::Green,
            good_soft: Color::Green,
            mark: Color::Magenta,
            mark_soft: Color::Magenta,
            info: Color::Blue,
            info_soft: Color::Blue,
            on_light: Color::Black,
            ramp: &ANSI16,
            dark_text_above: 0.3,
        }
    }

    /// The heatmap's (background, text) colours for a value in [0, 1].
    pub fn ramp_colours(&self, t: f64) -> (Color, Color) {
        let t = if t.is_finite() {
            t.clamp(0.0, 1.0)
        } else {
            0.0
        };
        let last = self.ramp.len().saturating_sub(1);
        let i = ((t * last as f64).round() as usize).min(last);
        let background = self.ramp.get(i).copied().unwrap_or(Color::Reset);
        let text = if t > self.dark_text_above {
            Color::Black
        } else {
            Color::White
        };
        (background, text)
    }

    /// A bold title in the accent colour.
    pub fn title(&self) -> Style {
        Style::new().add_modifier(Modifier::BOLD).fg(self.accent)
    }
}

impl Default for Theme {
    fn default() -> Self {
        Theme::builtin(ThemeName::Dark)
    }
}

thread_local! {
    static CURRENT: Cell<Theme> = Cell::new(Theme::default());
}

/// The theme of the frame being drawn on this thread ([`draw_with`]), the dark theme otherwise.
pub fn current() -> Theme {
    CURRENT.with(Cell::get)
}

/// Run `draw` with `theme` as this thread's [`current`] theme, restoring the previous one after
/// (also if `draw` panics).
pub fn draw_with<R>(theme: Theme, draw: impl FnOnce() -> R) -> R {
    struct Restore(Theme);
    impl Drop for Restore {
        fn drop(&mut self) {
            CURRENT.with(|c| c.set(self.0));
        }
    }
    let _restore = Restore(CURRENT.with(|c| c.replace(theme)));
    draw()
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [ThemeName; 3] = [ThemeName::Dark, ThemeName::Light, ThemeName::Colorblind];

    #[test]
    fn ramps_clamp_and_run_low_to_high() {
        for name in ALL {
            let t = Theme::builtin(name);
            assert_eq!(t.ramp_colours(-1.0), t.ramp_colours(0.0));
            assert_eq!(t.ramp_colours(2.0), t.ramp_colours(1.0));
            assert_eq!(t.ramp_colours(f64::NAN), t.ramp_colours(0.0));
            assert_ne!(t.ramp_colours(0.0), t.ramp_colours(1.0));
        }
    }

    #[test]
    fn the_light_theme_uses_only_the_16_ansi_colours() {
        let t = Theme::builtin(ThemeName::Light);
        let named = |c: Color| !matches!(c, Color::Indexed(_) | Color::Rgb(..));
        assert!(t.ramp.iter().all(|&c| named(c)));
        let roles = [
            t.accent,
            t.accent_soft,
            t.muted,
            t.dim,
            t.warning,
            t.warning_soft,
            t.error,
            t.error_soft,
            t.good,
            t.good_soft,
            t.mark,
            t.mark_soft,
            t.info,
            t.info_soft,
        ];
        assert!(roles.iter().all(|&c| named(c)), "{roles:?}");
        assert!(!roles.contains(&Color::Yellow) && !roles.contains(&Color::LightYellow));
    }

    #[test]
    fn the_colorblind_theme_never_sets_red_against_green() {
        let t = Theme::builtin(ThemeName::Colorblind);
        let reds = [Color::Red, Color::LightRed];
        let greens = [Color::Green, Color::LightGreen];
        for c in [t.good, t.good_soft, t.error, t.error_soft] {
            assert!(!reds.contains(&c) && !greens.contains(&c), "{c:?}");
        }
        assert_ne!(t.ramp, Theme::builtin(ThemeName::Dark).ramp);
    }

    #[test]
    fn draw_with_sets_and_restores() {
        let light = Theme::builtin(ThemeName::Light);
        let inside = draw_with(light, current);
        assert_eq!(inside, light);
        assert_eq!(current(), Theme::default());
    }
}
