//! Nelder–Mead downhill simplex in a box: the joint polish after the link fit's coordinate
//! descent, whose one-parameter-at-a-time steps crawl along valleys where two parameters trade
//! off (a latency against the chunk fall-off, both a constant time on small messages).

/// Minimise `f` over the box `[lo, hi]` (one bound pair a coordinate) from `start`, for at most
/// `evaluations` calls of `f`; points outside the box are clamped onto it. Returns the best
/// point found and its value.
pub(crate) fn minimise(
    f: impl Fn(&[f64]) -> f64,
    start: &[f64],
    (lo, hi): (&[f64], &[f64]),
    evaluations: usize,
) -> (Vec<f64>, f64) {
    let n = start.len();
    let clamp = |p: &mut Vec<f64>| {
        for (i, x) in p.iter_mut().enumerate() {
            *x = x.clamp(lo[i], hi[i]);
        }
    };
    let mut simplex: Vec<(Vec<f64>, f64)> = Vec::with_capacity(n + 1);
    let mut first = start.to_vec();
    clamp(&mut first);
    let value = f(&first);
    simplex.push((first.clone(), value));
    for i in 0..n {
        let mut p = first.clone();
        // A tenth of the coordinate's range, towards the side with room.
        let step = 0.1 * (hi[i] - lo[i]).max(1e-9);
        p[i] = if p[i] + step <= hi[i] {
            p[i] + step
        } else {
            p[i] - step
        };
        clamp(&mut p);
        let v = f(&p);
        simplex.push((p, v));
    }
    let mut used = n + 1;
    while used < evaluations {
        simplex.sort_by(|a, b| a.1.total_cmp(&b.1));
        let (best, worst) = (simplex[0].1, simplex[n].1);
        if (worst - best).abs() <= 1e-12 * (1.0 + best.abs()) {
            break;
        }
        let centroid: Vec<f64> = (0..n)
            .map(|i| simplex[..n].iter().map(|(p, _)| p[i]).sum::<f64>() / n as f64)
            .collect();
        let towards = |t: f64| {
            let mut p: Vec<f64> = (0..n)
                .map(|i| centroid[i] + t * (simplex[n].0[i] - centroid[i]))
                .collect();
            clamp(&mut p);
            p
        };
        let reflected = towards(-1.0);
        let fr = f(&reflected);
        used += 1;
        if fr < simplex[0].1 {
            let expanded = towards(-2.0);
            let fe = f(&expanded);
            used += 1;
            simplex[n] = if fe < fr {
                (expanded, fe)
            } else {
                (reflected, fr)
            };
        } else if fr < simplex[n - 1].1 {
            simplex[n] = (reflected, fr);
        } else {
            let contracted = towards(if fr < worst { -0.5 } else { 0.5 });
            let fc = f(&contracted);
            used += 1;
            if fc < worst.min(fr) {
                simplex[n] = (contracted, fc);
            } else {
                // Shrink every point halfway towards the best.
                let best_point = simplex[0].0.clone();
                for (p, v) in simplex.iter_mut().skip(1) {
                    for (x, b) in p.iter_mut().zip(&best_point) {
                        *x = b + 0.5 * (*x - b);
                    }
                    *v = f(p);
                }
                used += n;
            }
        }
    }
    simplex.sort_by(|a, b| a.1.total_cmp(&b.1));
    simplex.swap_remove(0)
}

#[cfg(test)]
mod tests {
    use super::minimise;

    #[test]
    fn finds_the_rosenbrock_valley_floor() {
        let rosenbrock = |p: &[f64]| (1.0 - p[0]).powi(2) + 100.0 * (p[1] - p[0] * p[0]).powi(2);
        let (p, v) = minimise(rosenbrock, &[-1.2, 1.0], (&[-5.0, -5.0], &[5.0, 5.0]), 4000);
        assert!(v < 1e-8, "{v} at {p:?}");
        assert!(
            (p[0] - 1.0).abs() < 1e-3 && (p[1] - 1.0).abs() < 1e-3,
            "{p:?}"
        );
    }

    #[test]
    fn stays_in_the_box_and_stops_on_its_edge() {
        // The unconstrained minimum (3, -2) lies outside [0, 1]²: the box's corner (1, 0).
        let bowl = |p: &[f64]| (p[0] - 3.0).powi(2) + (p[1] + 2.0).powi(2);
        let (p, _) = minimise(bowl, &[0.5, 0.5], (&[0.0, 0.0], &[1.0, 1.0]), 2000);
        assert!((p[0] - 1.0).abs() < 1e-6 && p[1].abs() < 1e-6, "{p:?}");
    }
}
