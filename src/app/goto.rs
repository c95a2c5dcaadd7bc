//! The go-to prompt (`g`): a step, a token count or a share of the run, to a trajectory point.

use crate::trajectory::Trajectory;

/// Where the user asked to go.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Position {
    /// An optimizer step of the trajectory (the nearest point).
    Step(u64),
    /// Tokens trained (the nearest point).
    Tokens(f64),
    /// A share of the run's points, 0–1 (0 the first point, 1 the last).
    Share(f64),
}

/// Parse what was typed: `1200` (a step), `150B` / `2.5M` / `800k` / `1T` (tokens), `40%`.
pub fn parse(text: &str) -> Result<Position, String> {
    let t = text.trim();
    if t.is_empty() {
        return Err("nothing typed".into());
    }
    if let Ok(step) = t.parse::<u64>() {
        return Ok(Position::Step(step));
    }
    let (number, suffix) = t.split_at(t.len() - t.chars().last().map_or(0, char::len_utf8));
    let value: f64 = number.trim().parse().map_err(|_| {
        format!("'{t}' is not a step (1200), tokens (150B) or a share of the run (40%)")
    })?;
    if !value.is_finite() || value < 0.0 {
        return Err(format!("'{t}': must be a finite number ≥ 0"));
    }
    let scale = match suffix.to_ascii_uppercase().as_str() {
        "%" if value <= 100.0 => return Ok(Position::Share(value / 100.0)),
        "%" => return Err(format!("'{t}': a share of the run lies in 0–100%")),
        "K" => 1e3,
        "M" => 1e6,
        "B" | "G" => 1e9,
        "T" => 1e12,
        _ => {
            return Err(format!(
                "'{t}' is not a step (1200), tokens (150B) or a share of the run (40%)"
            ));
        }
    };
    Ok(Position::Tokens(value * scale))
}

/// The index of the trajectory point `text` names: the nearest step or token count, or the
/// point at that share of the run; an error says why not (nothing to go to, or outside the
/// run, naming its range).
pub fn target(traj: &Trajectory, text: &str) -> Result<usize, String> {
    let (Some(first), Some(last)) = (traj.points.first(), traj.points.last()) else {
        return Err("the trajectory has no points yet".into());
    };
    match parse(text)? {
        Position::Share(f) => {
            let n = traj.points.len() - 1;
            Ok(((n as f64) * f).round() as usize)
        }
        // The trajectory, not the run: a measured run's last steps may have no estimate (it
        // said "outside the run (steps 0 to 392)" of a run logged to step 399).
        Position::Step(s) if s < first.step || s > last.step => Err(format!(
            "step {s} is outside the trajectory (its points, the steps with an estimate: {} to {})",
            first.step, last.step
        )),
        Position::Step(s) => Ok(traj
            .points
            .iter()
            .enumerate()
            .min_by_key(|(_, p)| p.step.abs_diff(s))
            .map_or(0, |(i, _)| i)),
        Position::Tokens(t) if t < first.tokens * 0.999 || t > last.tokens * 1.001 => Err(format!(
            "{} tokens is outside the trajectory ({} to {} tokens)",
            crate::format::tokens(t),
            crate::format::tokens(first.tokens),
            crate::format::tokens(last.tokens)
        )),
        Position::Tokens(t) => Ok(traj.index_at_tokens(t)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trajectory::TrajectoryPoint;

    fn traj() -> Trajectory {
        Trajectory {
            label: "t".into(),
            seq_len: 1,
            points: (0..11)
                .map(|i| TrajectoryPoint {
                    step: 100 * i,
                    tokens: 1e9 * i as f64,
                    b_crit: 10.0,
                    ci: None,
                    loss: None,
                })
                .collect(),
        }
    }

    #[test]
    fn steps_tokens_and_shares_land_on_the_nearest_point() {
        let t = traj();
        assert_eq!(target(&t, "420"), Ok(4));
        assert_eq!(target(&t, "6.4B"), Ok(6));
        assert!(matches!(target(&t, "2500m"), Ok(2 | 3)));
        assert_eq!(target(&t, "50%"), Ok(5));
        assert_eq!(target(&t, "100%"), Ok(10));
        assert_eq!(target(&t, " 0 "), Ok(0));
    }

    #[test]
    fn outside_or_unreadable_is_an_error_that_says_why() {
        let t = traj();
        let e = target(&t, "5000").expect_err("past the end");
        // The trajectory's points, not the run's steps (a run's last steps may have none).
        assert!(
            e.contains("outside the trajectory") && e.contains("an estimate: 0 to 1000"),
            "{e}"
        );
        assert!(
            target(&t, "20B")
                .expect_err("past the end")
                .contains("outside")
        );
        assert!(target(&t, "150%").is_err());
        assert!(target(&t, "-3").is_err());
        assert!(target(&t, "abc").expect_err("junk").contains("not a step"));
        assert!(target(&t, "").is_err());
        let empty = Trajectory {
            points: Vec::new(),
            ..traj()
        };
        assert!(target(&empty, "10").is_err());
    }
}
