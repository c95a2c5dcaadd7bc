//! Number formatting for narrow terminal cells and status lines (shared by the app and the view).

/// The units of [`si`], smallest first: scale and suffix.
const SI_UNITS: [(f64, &str); 5] = [(1.0, ""), (1e3, "k"), (1e6, "M"), (1e9, "G"), (1e12, "T")];

/// A compact human number: 1234 → "1.2k", 3.4e6 → "3.4M". The unit is chosen after rounding
/// to the printed precision, so 999 700 is "1.0M", not "1000k".
pub fn si(x: f64) -> String {
    let a = x.abs();
    let mut i = SI_UNITS
        .iter()
        .rposition(|&(scale, _)| a >= scale)
        .unwrap_or(0);
    // Rounded to a whole number the value reaches 1000 of its unit: one of the next.
    if i + 1 < SI_UNITS.len() && (a / SI_UNITS[i].0).round() >= 1000.0 {
        i += 1;
    }
    let (scale, s) = SI_UNITS[i];
    let v = x / scale;
    // Whole numbers from 100 up, after rounding to one decimal (99.96k is "100k").
    if s.is_empty() || (v.abs() * 10.0).round() >= 1000.0 {
        format!("{v:.0}{s}")
    } else {
        format!("{v:.1}{s}")
    }
}

pub use copus_stats::text::significant;

/// What one sample is called on screen: "sequences" where a sample is a sequence of several
/// tokens (`seq_len` > 1), "samples" for one-token samples (the built-in trainer's read as
/// they are); the one word the timeline, the panels and `plan`'s text use.
pub fn sample_word(seq_len: u32) -> &'static str {
    if seq_len > 1 { "sequences" } else { "samples" }
}

/// A dimensionless factor (a B_crit scale): a whole number as it is ("1"), else three
/// significant digits ("0.360"; a measured ratio printed as 0.3602868644075818).
pub fn factor(x: f64) -> String {
    if x == x.round() {
        format!("{x:.0}")
    } else {
        significant(x, 3)
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
    // Each unit starts where the smaller one's text would round up to 1000 of it (or, for
    // the one-decimal thousands, to 100.0k), so 999 700 is "1.0M", not "1000k".
    if t >= 999.95e12 {
        // Past a thousand trillion, an exponent (it read "99999999999.0T").
        format!("{t:.2e}")
    } else if t >= 999.95e9 {
        format!("{:.1}T", t / 1e12)
    } else if t >= 999.95e6 {
        format!("{:.1}B", t / 1e9)
    } else if t >= 999.5e3 {
        format!("{:.1}M", t / 1e6)
    } else if t >= 99.95e3 {
        format!("{:.0}k", t / 1e3)
    } else if t >= 9_999.5 {
        format!("{:.1}k", t / 1e3)
    } else {
        format!("{t:.0}")
    }
}

/// A duration in seconds at a unit its size reads in, with about three significant digits:
/// "32.4 h" from 10 h up, "3.24 h" from an hour, "54.4 min" from a minute, else "45 s" (a sign
/// kept: a net loss reads "-12.0 min"). Short runs' plans differ by minutes: one decimal of an
/// hour showed "0.9 h" for strategies 6 % apart.
pub fn duration(seconds: f64) -> String {
    let a = seconds.abs();
    if !a.is_finite() {
        format!("{seconds} s")
    } else if a >= 36_000.0 {
        format!("{:.1} h", seconds / 3600.0)
    } else if a >= 3600.0 {
        format!("{:.2} h", seconds / 3600.0)
    } else if a >= 60.0 {
        format!("{:.1} min", seconds / 60.0)
    } else {
        format!("{seconds:.0} s")
    }
}

/// The unit and scale a table of durations reads in, chosen by its longest (seconds): hours
/// with one decimal from 10 h, with two from an hour, else minutes with one: ("h", 3600, 1),
/// ("h", 3600, 2) or ("min", 60, 1).
pub fn duration_column(longest_s: f64) -> (&'static str, f64, usize) {
    if !longest_s.is_finite() || longest_s >= 36_000.0 {
        ("h", 3600.0, 1)
    } else if longest_s >= 3600.0 {
        ("h", 3600.0, 2)
    } else {
        ("min", 60.0, 1)
    }
}

/// A short time for a step: "2.41 s", "0.72 s", "45.6 ms", "85 µs" (a tiny model's step read
/// "0.00 s").
pub fn step_seconds(seconds: f64) -> String {
    let a = seconds.abs();
    if !a.is_finite() || a >= 0.1 || a == 0.0 {
        format!("{seconds:.2} s")
    } else if a >= 1e-2 {
        format!("{:.1} ms", seconds * 1e3)
    } else if a >= 1e-3 {
        format!("{:.2} ms", seconds * 1e3)
    } else {
        format!("{:.0} µs", seconds * 1e6)
    }
}

/// A fraction as a percentage with the digits it needs: "53%", "4.2%", "0.031%" (a tiny
/// model's MFU read "0%").
pub fn percent(fraction: f64) -> String {
    let p = fraction * 100.0;
    let a = p.abs();
    if !a.is_finite() || a >= 10.0 || a == 0.0 {
        format!("{p:.0}%")
    } else if a >= 1.0 {
        format!("{p:.1}%")
    } else {
        // Two significant digits.
        let digits = (2 - a.log10().floor() as i32 - 1).clamp(1, 6) as usize;
        format!("{p:.digits$}%")
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

/// Columns a wrapped line of text output takes at most (the 100-column terminals most
/// users have; a word longer than that stays whole): the default of [`text_columns`], and
/// its largest value.
pub const TEXT_COLUMNS: usize = 100;

/// Fewest columns [`set_text_columns`] wraps at.
pub const MIN_TEXT_COLUMNS: usize = 60;

/// The columns text output wraps at now.
static COLUMNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(TEXT_COLUMNS);

/// Columns a wrapped line of text output takes at most: [`TEXT_COLUMNS`], or the narrower
/// terminal the command line found ([`set_text_columns`]).
pub fn text_columns() -> usize {
    COLUMNS.load(std::sync::atomic::Ordering::Relaxed)
}

/// Whether text output goes to a terminal narrower than [`TEXT_COLUMNS`] (tables then take
/// their narrow layouts; files and pipes keep the usual one).
pub fn narrow_text() -> bool {
    text_columns() < TEXT_COLUMNS
}

/// `label` and `text` on one line, however long, where the text width is the usual one (a
/// file, a pipe, a wide terminal: a line a script may match whole), else [`wrap_labelled`]
/// at the narrower terminal's width; ends with a newline.
pub fn one_line_unless_narrow(label: &str, text: &str) -> String {
    if narrow_text() {
        wrap_labelled(label, text)
    } else {
        format!("{label}{text}\n")
    }
}

/// Wrap text output at `columns` (a terminal's width), kept within
/// [`MIN_TEXT_COLUMNS`]..=[`TEXT_COLUMNS`]: at 80 columns lines of 100 broke mid-word.
pub fn set_text_columns(columns: usize) {
    COLUMNS.store(
        columns.clamp(MIN_TEXT_COLUMNS, TEXT_COLUMNS),
        std::sync::atomic::Ordering::Relaxed,
    );
}

/// `text` after `label` on one line where the two fit in [`text_columns`] (written as they
/// are, column spacing kept), else [`wrap_labelled`]; ends with a newline.
pub fn line_labelled(label: &str, text: &str) -> String {
    if label.chars().count() + text.chars().count() <= text_columns() {
        format!("{label}{text}\n")
    } else {
        wrap_labelled(label, text)
    }
}

/// Units a number is kept on one line with ("104157 tokens/s", "13.0 GB").
const UNITS: [&str; 22] = [
    "tokens/s",
    "tokens",
    "samples",
    "sequences",
    "steps",
    "layers",
    "GPUs",
    "nodes",
    "GB",
    "GiB",
    "MB",
    "MiB",
    "kB",
    "ms",
    "µs",
    "s",
    "min",
    "h",
    "%",
    "TFLOP/s",
    "B",
    "×",
];

/// Whether `word` reads as a number ("13.0", "+1.5", "−29", "1/4096", "×2").
fn is_number(word: &str) -> bool {
    let w = word.trim_start_matches(['+', '-', '−', '×', '~', '(', '[']);
    w.starts_with(|c: char| c.is_ascii_digit())
}

/// The words of `paragraph` grouped so that a wrapped line never breaks between a number and
/// its unit ("104157 tokens/s"), between a word and the number after it ("activations 13.0"),
/// or inside a `code span`.
fn unbreakable_chunks(paragraph: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for word in paragraph.split(' ').filter(|w| !w.is_empty()) {
        let glue = out.last().is_some_and(|prev| {
            // (A stray backtick must not glue the rest of the text: code spans are short.)
            let open_code = prev.matches('`').count() % 2 == 1 && prev.chars().count() < 60;
            let last = prev.rsplit(' ').next().unwrap_or(prev);
            let unit = word.trim_end_matches([',', ';', ':', ')', ']', '.']);
            let number_then_unit = is_number(last) && UNITS.contains(&unit);
            let word_then_number = is_number(word)
                && !last.ends_with([',', ';', ':', ')', ']', '.'])
                && !is_number(last);
            // A flag and its value ("--emit megatron").
            let flag = last.trim_start_matches(['(', '[', '`']);
            let flag_then_value =
                flag.starts_with("--") && !word.starts_with('-') && flag.len() < 30;
            open_code || number_then_unit || word_then_number || flag_then_value
        });
        match out.last_mut() {
            Some(prev) if glue => {
                prev.push(' ');
                prev.push_str(word);
            }
            _ => out.push(word.to_string()),
        }
    }
    out
}

/// `text` after `label` (e.g. `"note: "`), wrapped at word boundaries to lines of at most
/// [`text_columns`] characters, every line after the first indented by `label`'s width;
/// ends with a newline. Text with newlines of its own keeps them.
pub fn wrap_labelled(label: &str, text: &str) -> String {
    let columns = text_columns();
    let indent = label.chars().count();
    let mut out = String::with_capacity(label.len() + text.len() + 16);
    let mut first_line = true;
    for paragraph in text.split('\n') {
        let mut width = 0;
        if first_line {
            out.push_str(label);
        } else {
            out.push_str(&" ".repeat(indent));
        }
        first_line = false;
        width += indent;
        let mut line_empty = true;
        for word in unbreakable_chunks(paragraph) {
            let word = word.as_str();
            let w = word.chars().count();
            if !line_empty && width + 1 + w > columns {
                out.push('\n');
                out.push_str(&" ".repeat(indent));
                width = indent;
                line_empty = true;
            }
            if !line_empty {
                out.push(' ');
                width += 1;
            }
            out.push_str(word);
            width += w;
            line_empty = false;
        }
        out.push('\n');
    }
    out
}

/// Counts in order as runs of equal values: "6 ×10, 5 ×2" (a run of one without "×"), e.g.
/// the layers of each pipeline stage.
pub fn runs(counts: &[u32]) -> String {
    let mut runs: Vec<(u32, usize)> = Vec::new();
    for &c in counts {
        match runs.last_mut() {
            Some((v, n)) if *v == c => *n += 1,
            _ => runs.push((c, 1)),
        }
    }
    runs.iter()
        .map(|&(v, n)| {
            if n == 1 {
                v.to_string()
            } else {
                format!("{v} ×{n}")
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {

    /// Durations keep about three significant digits: two plans 6 % apart over a short run
    /// both read "0.9 h".
    #[test]
    fn durations_tell_short_runs_apart() {
        assert_eq!(duration(0.86 * 3600.0), "51.6 min");
        assert_eq!(duration(0.92 * 3600.0), "55.2 min");
        assert_eq!(duration(1.65 * 3600.0), "1.65 h");
        assert_eq!(duration(197.1 * 3600.0), "197.1 h");
        assert_eq!(duration(-720.0), "-12.0 min");
        assert_eq!(duration(45.0), "45 s");
        assert_eq!(duration_column(0.92 * 3600.0), ("min", 60.0, 1));
        assert_eq!(duration_column(1.65 * 3600.0), ("h", 3600.0, 2));
        assert_eq!(duration_column(197.1 * 3600.0), ("h", 3600.0, 1));
    }

    /// Estimates to four significant digits: no more digits than the interval supports, a
    /// whole number's integer digits kept, tiny and huge values in scientific notation.
    #[test]
    fn significant_digits() {
        let s = |x| super::significant(x, 4);
        assert_eq!(s(1540.0892), "1540");
        assert_eq!(s(17.7929), "17.79");
        assert_eq!(s(41013.4974), "41013");
        assert_eq!(s(0.38), "0.3800");
        assert_eq!(s(-2.5), "-2.500");
        assert_eq!(s(0.0), "0");
        assert_eq!(s(2.5e-5), "2.500e-5");
        assert_eq!(s(3.1e12), "3.100e12");
        assert_eq!(s(f64::INFINITY), "inf");
    }

    /// A tiny model's step and MFU keep their digits ("0.00 s/step · 0% MFU" said nothing).
    #[test]
    fn small_times_and_percentages_keep_their_digits() {
        assert_eq!(super::step_seconds(2.4137), "2.41 s");
        assert_eq!(super::step_seconds(0.72), "0.72 s");
        assert_eq!(super::step_seconds(0.0456), "45.6 ms");
        assert_eq!(super::step_seconds(0.0032), "3.20 ms");
        assert_eq!(super::step_seconds(8.5e-5), "85 µs");
        assert_eq!(super::percent(0.532), "53%");
        assert_eq!(super::percent(0.042), "4.2%");
        assert_eq!(super::percent(0.00031), "0.031%");
        assert_eq!(super::percent(0.0), "0%");
    }

    #[test]
    fn wrapping_keeps_numbers_with_their_units_labels_and_code_spans_whole() {
        let text = "x ".repeat(40)
            + "goodput 104157 tokens/s, states 436.5, activations 13.0, run it with `--emit \
               megatron|torchtitan|deepspeed` now";
        let wrapped = super::wrap_labelled("note: ", &text);
        for line in wrapped.lines() {
            assert!(line.chars().count() <= super::TEXT_COLUMNS, "{wrapped}");
            assert!(!line.trim_start().starts_with("tokens/s"), "{wrapped}");
            assert!(!line.trim_start().starts_with("13.0"), "{wrapped}");
            assert!(!line.trim_start().starts_with("megatron|"), "{wrapped}");
        }
        let words = |t: &str| t.split_whitespace().collect::<Vec<_>>().join(" ");
        assert_eq!(words(&wrapped), words(&format!("note: {text}")));
    }

    use super::*;

    #[test]
    fn labelled_text_wraps_at_words_under_the_column_limit() {
        let text = "the command line set B_crit scale to ×4 (was ×1), scale-out bw to ×2 \
                    (was ×1) (--b-crit-scale 4 --inter-link-scale 2) and a-very-long-word-"
            .to_string()
            + &"x".repeat(120);
        let out = wrap_labelled("note: ", &text);
        let lines: Vec<&str> = out.lines().collect();
        assert!(lines[0].starts_with("note: the command line"));
        assert!(lines.len() >= 3, "{out}");
        for l in &lines[1..] {
            assert!(
                l.starts_with("      ") && !l.starts_with("       "),
                "{l:?}"
            );
        }
        // Every line within the limit but the one holding the over-long word, which stays whole.
        for l in &lines {
            assert!(
                l.chars().count() <= TEXT_COLUMNS || !l.trim().contains(' '),
                "{l:?}"
            );
        }
        assert!(
            lines
                .iter()
                .any(|l| l.trim_start().starts_with("a-very-long-word-x"))
        );
        // The words, in order, are the text's.
        let words: Vec<&str> = out.split_whitespace().skip(1).collect();
        assert_eq!(words, text.split_whitespace().collect::<Vec<_>>());
        assert_eq!(wrap_labelled("note: ", "short"), "note: short\n");
    }

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

    #[test]
    fn compact_numbers_take_the_next_unit_when_rounding_reaches_it() {
        assert_eq!(si(999.4), "999");
        assert_eq!(si(999.96), "1.0k");
        assert_eq!(si(99_940.0), "99.9k");
        assert_eq!(si(99_960.0), "100k");
        assert_eq!(si(999_400.0), "999k");
        assert_eq!(si(999_700.0), "1.0M");
        assert_eq!(si(-999_700.0), "-1.0M");
        assert_eq!(si(999_999_999.0), "1.0G");
        assert_eq!(si(999.7e9), "1.0T");
        assert_eq!(si(2.5e15), "2500T");
        assert_eq!(si(0.4), "0");
    }

    #[test]
    fn token_counts_take_the_next_unit_when_rounding_reaches_it() {
        assert_eq!(tokens(9_999.0), "9999");
        assert_eq!(tokens(9_999.7), "10.0k");
        assert_eq!(tokens(99_940.0), "99.9k");
        assert_eq!(tokens(99_960.0), "100k");
        assert_eq!(tokens(999_400.0), "999k");
        assert_eq!(tokens(999_700.0), "1.0M");
        assert_eq!(tokens(25e6), "25.0M");
        assert_eq!(tokens(999_940_000.0), "999.9M");
        assert_eq!(tokens(999_999_999.0), "1.0B");
        assert_eq!(tokens(2.2e9), "2.2B");
        assert_eq!(tokens(999.97e9), "1.0T");
        // Past a thousand trillion, an exponent ("99999999999.0T" was read back to the user).
        assert_eq!(tokens(999.9e12), "999.9T");
        assert_eq!(tokens(99_999_999_999e12), "1.00e23");
    }
}
