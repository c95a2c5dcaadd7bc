//! The human-readable `copus plan` report.

use super::report::PlanReport;
use std::fmt::Write as _;

/// Why the `cbs-*` baselines trail, when the report lists any: the same sentence in
/// `copus plan` and the explorer's plan panel.
pub fn cbs_baselines_note(rep: &PlanReport) -> Option<&'static str> {
    rep.strategies
        .iter()
        .any(|s| s.name.starts_with("cbs-"))
        .then_some(
            "cbs-*: the paper's baselines run at the grid batch nearest B_crit, where each sample \
             keeps only about half its value (B_crit/(B + B_crit) = ½ at B = B_crit), on one fixed \
             layout; the best batch sits below B_crit, so they trail: tracking B_crit is right, \
             running at it is not",
        )
}

/// The human-readable report.
pub fn render_text(rep: &PlanReport) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "{}", rep.session);
    let _ = writeln!(o, "planned for: {}", rep.scenario);
    let _ = writeln!(o, "stack: {}", rep.stack.label);
    o.push_str(&crate::format::line_labelled(
        "B_crit: ",
        &format!(
            // "Segments": a schedule's "phase" is one held state (`--emit`'s "phase K of N").
            "{} · {} trajectory segments · {} (layout, batch) states · token axis: {}",
            rep.trajectory,
            rep.phases,
            rep.states,
            rep.token_axis.words(rep.seq_len)
        ),
    ));
    if !rep.added_batches.is_empty() {
        let added: Vec<String> = rep.added_batches.iter().map(u64::to_string).collect();
        o.push_str(&crate::format::line_labelled(
            "batch axis: ",
            &format!(
                "the session's batch_sizes and {} (samples), the nearest multiples of the GPU \
                 count, so that a batch divides over the data-parallel ranks",
                added.join(", ")
            ),
        ));
    }
    if let Some(h) = &rep.horizon {
        let _ = writeln!(
            o,
            "horizon: to loss {} (mean over {} points), reached at step {} ({:.4} nats; {} of {} points)",
            h.target_loss,
            h.window_points,
            h.reached_at_step,
            h.reached_loss,
            h.points_kept,
            h.points_total
        );
    }
    let b = &rep.b_crit;
    o.push_str(&crate::format::line_labelled(
        "B_crit kind: ",
        &format!(
            "{} ({}); planned with B_noise = {} × this B_crit ({})",
            b.kind,
            b.measures,
            crate::format::factor(b.factor),
            b.factor_source
        ),
    ));
    if let (Some(f), Some(why)) = (b.implied_factor, &b.implied_because)
        && (f - b.factor).abs() > 1e-12
    {
        let _ = writeln!(o, "  note: the source's definition implies ×{f}: {why}");
    }
    let _ = match rep.lr_reference_batch {
        Some(b_ref) => writeln!(
            o,
            "objective: {} (learning rate tuned at B = {b_ref:.0}, scaled by √(B/{b_ref:.0}))",
            rep.objective
        ),
        None => writeln!(
            o,
            "objective: {} (learning rate re-tuned at every batch)",
            rep.objective
        ),
    };
    let c = rep.costs;
    o.push_str(&crate::format::line_labelled(
        "switch costs: ",
        &format!(
            "batch {:.0} s, DP resize {:.0} s, TP/PP/CP/EP/ZeRO reshard {:.0} s ({}); min dwell {} phase(s); \
             greedy switch threshold {:.0} %",
            c.batch_s,
            c.dp_resize_s,
            c.reshard_s,
            rep.reshard_mode,
            rep.min_dwell_phases,
            rep.switch_threshold * 100.0
        ),
    ));
    o.push('\n');
    // The time column's unit from the longest time: a short run's strategies, minutes apart,
    // all read "0.9" in hours.
    let longest = rep
        .strategies
        .iter()
        .chain(rep.current_batch_static.as_ref())
        .map(|s| s.time_s)
        .filter(|t| t.is_finite())
        .fold(0.0, f64::max);
    let (unit, per_unit, decimals) = crate::format::duration_column(longest);
    // An hours column whose shortest time is under an hour reads it to three decimals (five
    // strategies 33.3 to 33.7 min apart all read 0.56 h).
    let shortest = rep
        .strategies
        .iter()
        .map(|s| s.time_s)
        .filter(|t| t.is_finite() && *t > 0.0)
        .fold(f64::INFINITY, f64::min);
    let decimals = if unit == "h" && shortest < per_unit {
        decimals.max(3)
    } else {
        decimals
    };
    let _ = writeln!(
        o,
        "{:<16} {:>10} {:>9} {:>8}  starts at",
        "strategy",
        format!("time ({unit})"),
        "vs static",
        "switches"
    );
    for s in &rep.strategies {
        let head = format!(
            "{:<16} {:>10.decimals$} {:>8.3}× {:>8}  ",
            s.name,
            s.time_s / per_unit,
            s.speedup_vs_static,
            s.switches,
        );
        o.push_str(&strategy_row(&head, &s.start));
    }
    if let Some(c) = &rep.current_batch_static {
        let opt = rep.strategies.last().map_or(f64::NAN, |s| s.time_s);
        let head = format!(
            "{:<16} {:>10.decimals$} {:>8.3}× {:>8}  ",
            c.name,
            c.time_s / per_unit,
            c.speedup_vs_static,
            0,
        );
        let row = format!("{head}{}", c.start);
        let faster = format!(
            "(optimal-joint is {:.3}× faster than {})",
            c.time_s / opt,
            c.name
        );
        // The comparison after the row where both fit the text width, else under it.
        if row.chars().count() + 2 + faster.chars().count() <= crate::format::text_columns() {
            let _ = writeln!(o, "{row}  {faster}");
        } else {
            o.push_str(&strategy_row(&head, &c.start));
            let _ = writeln!(o, "  {faster}");
        }
    }
    // Under the table, not between its rows.
    if let Some(note) = cbs_baselines_note(rep) {
        o.push_str(&crate::format::wrap_labelled("  ", &format!("({note})")));
    }
    o.push('\n');
    o.push_str(&crate::format::wrap_labelled(
        "",
        &format!(
            "optimal-joint vs fastest paper baseline ({}): {:.3}× · vs hindsight static: {:.3}×",
            rep.fastest_baseline, rep.speedup_vs_fastest_baseline, rep.speedup_vs_hindsight_static
        ),
    ));
    o.push('\n');
    o.push_str(&crate::format::wrap_labelled(
        "",
        "optimal-joint switch points (tokens and step on the trajectory's axis, as the explorer \
         shows them and `grid --at` takes them; net gain: the time a switch saves over keeping \
         the layout and batch before it until the next switch, its cost taken off, so the gains \
         need not add up to the gain over the best static plan):",
    ));
    if rep.switches.is_empty() {
        let _ = writeln!(o, "  none: the best static plan is optimal here");
    }
    // Each switch: where (and what it costs and gains) on the first line, then the change and
    // the trainer's step under it, each wrapped at the text width.
    let under = " ".repeat(20);
    // The plan counts the model's samples: sequences of `seq_len` tokens (as the explorer's
    // timeline names them).
    let unit = crate::format::sample_word(rep.seq_len);
    for s in &rep.switches {
        let at = format!(
            "  {:>9} tokens, step {:>7} (B_crit {:.0} {unit} there): {} switch",
            crate::format::tokens(s.at_tokens),
            s.at_step,
            s.b_crit,
            s.kind,
        );
        let gain = format!("net gain {}", crate::format::duration(s.gain_s));
        let with_cost = format!("{at}, cost {:.0} s, {gain}", s.cost_s);
        // Where the line would wrap, the cost goes under it: a reshard's checkpoint-restart is
        // the costliest switch and was the one left out.
        let columns = crate::format::text_columns();
        let with_gain = format!("{at}, {gain}");
        if with_cost.chars().count() <= columns {
            let _ = writeln!(o, "{with_cost}");
        } else if with_gain.chars().count() <= columns {
            let _ = writeln!(o, "{with_gain}");
            o.push_str(&crate::format::line_labelled(
                &under,
                &format!("cost {:.0} s", s.cost_s),
            ));
        } else {
            // A narrow terminal: the gain goes under it too.
            let _ = writeln!(o, "{at}");
            o.push_str(&crate::format::line_labelled(
                &under,
                &format!("cost {:.0} s, {gain}", s.cost_s),
            ));
        }
        o.push_str(&crate::format::line_labelled(
            &under,
            &format!("{} → {}", s.from, s.to),
        ));
        o.push_str(&crate::format::line_labelled(
            &under,
            &format!(
                "the trainer's step {} ({} tokens consumed at the plan's batches)",
                s.plan_steps,
                crate::format::tokens(s.consumed_tokens)
            ),
        ));
    }
    if let Some(end) = plan_end(rep) {
        // The trajectory's own count beside the plan's: they differ by design (the objective
        // counts fewer samples at smaller batches for the same progress), and a trainer that
        // stops at the plan's count relies on that model.
        let stretch = match (rep.trajectory_start_past_zero(), rep.trajectory_end_tokens) {
            (Some(start), Some(end)) => format!(
                "runs from {} to {} tokens ({} tokens; the schedule's step 0 is its {} tokens)",
                crate::format::tokens(start),
                crate::format::tokens(end),
                crate::format::tokens(end - start),
                crate::format::tokens(start),
            ),
            (None, Some(end)) => format!("ends at {} tokens", crate::format::tokens(end)),
            _ => String::new(),
        };
        let against = rep
            .tokens_against_trajectory()
            .map_or(String::new(), |(_, change)| {
                let pct = 100.0 * change;
                format!(
                    "; the trajectory's axis {stretch}, so the plan trains on {:.1} % {} (the \
                     efficiency model's count of the samples its batches need for the same \
                     progress: a trainer that stops at the plan's count relies on that model)",
                    pct.abs(),
                    if pct < 0.0 { "fewer" } else { "more" }
                )
            });
        o.push_str(&crate::format::wrap_labelled(
            "",
            &format!(
                "the plan runs {} steps, {} {unit} ({} tokens) in all: what a trainer following \
                 it counts (`--emit json` writes the same; a framework's `--emit` plans within \
                 what it can express, and says what it left out); the trajectory's token axis: \
                 {}{against}",
                end.0,
                end.1,
                crate::format::tokens(end.2),
                rep.token_axis.words(rep.seq_len)
            ),
        ));
    }
    o
}

/// Steps, samples and tokens of the optimal-joint plan's schedule in all.
fn plan_end(rep: &PlanReport) -> Option<(u64, u64, f64)> {
    rep.end.map(|e| (e.step, e.samples, e.tokens))
}

/// One row of the strategy table: `head` (the name and number columns) and the layout it
/// starts at, on one line where it fits the text width, else with the layout's options
/// (`(mbs1 Z1 rc:none)`) on a line of their own under the layout column.
fn strategy_row(head: &str, start: &str) -> String {
    let row = format!("{head}{start}");
    let width = head.chars().count();
    match start.rfind(" (") {
        Some(cut) if row.chars().count() > crate::format::text_columns() => format!(
            "{head}{}\n{:width$}{}\n",
            &start[..cut],
            "",
            &start[cut + 1..]
        ),
        _ => format!("{row}\n"),
    }
}
