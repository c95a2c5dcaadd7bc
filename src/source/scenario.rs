//! B_crit scenarios from published laws (Kaplan et al. 2020, arXiv 2001.08361; Merrill et al. 2025, arXiv 2505.23971; Zhang et al. 2024, arXiv 2410.21676), for the demo, the planner and
//! what-if work when no measured run is at hand.

use crate::trajectory::{Trajectory, TrajectoryPoint};
use serde::{Deserialize, Serialize};

/// Chinchilla loss law L(N, D) = E + A/N^α + B/D^β (Hoffmann et al. 2022, approach 3 fit),
/// N parameters, D tokens, L in nats.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChinchillaLoss {
    /// Irreducible loss E.
    pub e: f64,
    /// Model-size coefficient A.
    pub a: f64,
    /// Model-size exponent α.
    pub alpha: f64,
    /// Data coefficient B.
    pub b: f64,
    /// Data exponent β.
    pub beta: f64,
}

impl Default for ChinchillaLoss {
    fn default() -> Self {
        Self {
            e: 1.69,
            a: 406.4,
            alpha: 0.34,
            b: 410.7,
            beta: 0.28,
        }
    }
}

impl ChinchillaLoss {
    /// Loss in nats after `tokens` tokens for a model of `params` parameters.
    pub fn loss(&self, params: f64, tokens: f64) -> f64 {
        self.e + self.a / params.powf(self.alpha) + self.b / tokens.powf(self.beta)
    }
}

/// How B_crit evolves over training.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ScenarioLaw {
    /// Kaplan et al. 2020: B_crit(L) = B*/L^(1/α_B) tokens, along a Chinchilla loss curve.
    KaplanChinchilla {
        /// B* in tokens (Kaplan: ≈ 2·10⁸).
        b_star_tokens: f64,
        /// α_B (Kaplan: ≈ 0.21).
        alpha_b: f64,
        /// Loss curve.
        loss: ChinchillaLoss,
        /// Model parameters N used in the loss law.
        params: f64,
    },
    /// Merrill et al. 2025 (OLMo, branched training): CBS grows as a power law through
    /// (168B tokens, 2048 docs) and (503B tokens, 4096 docs), then plateaus at 4096 documents
    /// of 4096 tokens.
    MerrillPlateau,
    /// Zhang et al. 2024 (arXiv 2410.21676) read as a function of data seen: for
    /// Chinchilla-optimal runs B* ≈ `coefficient`·N^`exponent` sequences of `reference_seq_len`
    /// tokens (N in millions of parameters; paper: 93.2, 0.47, 512), and CBS scales with data
    /// size, so after D tokens we take N = D / `tokens_per_param` (Chinchilla: 20). An
    /// extrapolation of an end-of-run law to a within-run trajectory; say so where it is used.
    ZhangDataScaling {
        /// Coefficient of the fit (paper: 93.2 sequences).
        coefficient: f64,
        /// Exponent of the fit (paper: 0.47).
        exponent: f64,
        /// Tokens per parameter of a Chinchilla-optimal run (20).
        tokens_per_param: f64,
        /// Sequence length of the fit's sequences, tokens (512).
        reference_seq_len: f64,
    },
    /// Log-linear interpolation between (tokens, B_crit samples) points, held flat outside.
    Piecewise {
        /// (tokens, B_crit in samples), ascending in tokens.
        points: Vec<(f64, f64)>,
    },
}

/// A scenario: a law sampled into phases between two token counts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Scenario {
    /// The law.
    pub law: ScenarioLaw,
    /// Tokens at the first phase.
    pub start_tokens: f64,
    /// Tokens at the last phase (the training target).
    pub total_tokens: f64,
    /// Number of phases (timeline points), ≥ 2.
    pub phases: usize,
    /// Batch size (samples) used to number steps on the timeline.
    pub nominal_batch: u64,
}

/// Why a scenario cannot be sampled.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ScenarioError {
    /// A parameter is out of range.
    #[error("scenario: {0}")]
    Invalid(String),
}

const MERRILL_DOC_TOKENS: f64 = 4096.0;

impl Scenario {
    /// B_crit in samples of `seq_len` tokens at `tokens`, and the loss where the law has one.
    pub fn b_crit_at(&self, tokens: f64, seq_len: u32) -> (f64, Option<f64>) {
        let seq = seq_len as f64;
        match &self.law {
            ScenarioLaw::KaplanChinchilla {
                b_star_tokens,
                alpha_b,
                loss,
                params,
            } => {
                let l = loss.loss(*params, tokens.max(1.0));
                (b_star_tokens / l.powf(1.0 / alpha_b) / seq, Some(l))
            }
            ScenarioLaw::MerrillPlateau => {
                let (t1, c1, t2, c2): (f64, f64, f64, f64) = (168e9, 2048.0, 503e9, 4096.0);
                let k = (c2 / c1).ln() / (t2 / t1).ln();
                let docs = (c1 * (tokens.max(1.0) / t1).powf(k)).min(c2);
                (docs * MERRILL_DOC_TOKENS / seq, None)
            }
            ScenarioLaw::ZhangDataScaling {
                coefficient,
                exponent,
                tokens_per_param,
                reference_seq_len,
            } => {
                let n_millions = tokens.max(1.0) / tokens_per_param / 1e6;
                let seqs = coefficient * n_millions.powf(*exponent);
                (seqs * reference_seq_len / seq, None)
            }
            ScenarioLaw::Piecewise { points } => (interpolate_log(points, tokens), None),
        }
    }

    /// Sample the scenario into a trajectory of `phases` points evenly spaced in tokens.
    pub fn trajectory(&self, seq_len: u32) -> Result<Trajectory, ScenarioError> {
        if self.phases < 2 {
            return Err(ScenarioError::Invalid(format!(
                "phases must be ≥ 2, got {}",
                self.phases
            )));
        }
        if !(self.start_tokens >= 0.0 && self.total_tokens > self.start_tokens) {
            return Err(ScenarioError::Invalid(format!(
                "need 0 ≤ start_tokens < total_tokens, got {} and {}",
                self.start_tokens, self.total_tokens
            )));
        }
        if self.nominal_batch == 0 || seq_len == 0 {
            return Err(ScenarioError::Invalid(
                "nominal_batch and seq_len must be positive".into(),
            ));
        }
        if let ScenarioLaw::ZhangDataScaling {
            coefficient,
            exponent,
            tokens_per_param,
            reference_seq_len,
        } = &self.law
            && [
                *coefficient,
                *exponent,
                *tokens_per_param,
                *reference_seq_len,
            ]
            .iter()
            .any(|v| !(v.is_finite() && *v > 0.0))
        {
            return Err(ScenarioError::Invalid(
                "ZhangDataScaling parameters must be positive and finite".into(),
            ));
        }
        if let ScenarioLaw::Piecewise { points } = &self.law
            && (points.is_empty()
                || points
                    .iter()
                    .any(|p| p.1.is_nan() || p.1 <= 0.0 || !p.0.is_finite()))
        {
            return Err(ScenarioError::Invalid(
                "piecewise points must be finite with B_crit > 0".into(),
            ));
        }
        let tokens_per_step = self.nominal_batch as f64 * seq_len as f64;
        let points = (0..self.phases)
            .map(|i| {
                let f = i as f64 / (self.phases - 1) as f64;
                let tokens = self.start_tokens + f * (self.total_tokens - self.start_tokens);
                let (b_crit, loss) = self.b_crit_at(tokens, seq_len);
                TrajectoryPoint {
                    step: (tokens / tokens_per_step).round() as u64,
                    tokens,
                    b_crit,
                    ci: None,
                    loss,
                }
            })
            .collect();
        Ok(Trajectory {
            label: self.label(),
            seq_len,
            points,
        })
    }

    /// A one-line description naming the source of the law.
    pub fn label(&self) -> String {
        match &self.law {
            ScenarioLaw::KaplanChinchilla { .. } => {
                "Kaplan et al. 2020 B_crit(L) on a Chinchilla loss curve".into()
            }
            ScenarioLaw::MerrillPlateau => "Merrill et al. 2025 measured CBS (OLMo)".into(),
            ScenarioLaw::ZhangDataScaling { .. } => {
                "Zhang et al. 2024 CBS ∝ N^0.47 read at N = D/20 (data seen)".into()
            }
            ScenarioLaw::Piecewise { .. } => "piecewise B_crit points".into(),
        }
    }
}

fn interpolate_log(points: &[(f64, f64)], x: f64) -> f64 {
    let first = points[0];
    let last = points[points.len() - 1];
    if x <= first.0 {
        return first.1;
    }
    if x >= last.0 {
        return last.1;
    }
    for w in points.windows(2) {
        let ((x0, y0), (x1, y1)) = (w[0], w[1]);
        if x >= x0 && x <= x1 && x1 > x0 {
            let f = (x - x0) / (x1 - x0);
            return (y0.ln() + f * (y1.ln() - y0.ln())).exp();
        }
    }
    last.1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scenario(law: ScenarioLaw) -> Scenario {
        Scenario {
            law,
            start_tokens: 1e9,
            total_tokens: 600e9,
            phases: 50,
            nominal_batch: 512,
        }
    }

    #[test]
    fn merrill_passes_through_published_points_and_plateaus() {
        let s = scenario(ScenarioLaw::MerrillPlateau);
        let (at_168b, _) = s.b_crit_at(168e9, 4096);
        let (at_503b, _) = s.b_crit_at(503e9, 4096);
        let (at_2t, _) = s.b_crit_at(2e12, 4096);
        assert!((at_168b - 2048.0).abs() < 1e-6, "{at_168b}");
        assert!((at_503b - 4096.0).abs() < 1e-6, "{at_503b}");
        assert_eq!(at_2t, 4096.0);
        // Half the sequence length doubles the count of samples.
        assert!((s.b_crit_at(168e9, 2048).0 - 4096.0).abs() < 1e-6);
    }

    #[test]
    fn kaplan_bcrit_grows_as_loss_falls() {
        let s = scenario(ScenarioLaw::KaplanChinchilla {
            b_star_tokens: 2e8,
            alpha_b: 0.21,
            loss: ChinchillaLoss::default(),
            params: 32e9,
        });
        let t = s.trajectory(4096).expect("valid scenario");
        assert_eq!(t.points.len(), 50);
        for w in t.points.windows(2) {
            assert!(w[1].b_crit > w[0].b_crit);
            assert!(w[1].loss < w[0].loss);
        }
        let growth = t.points[49].b_crit / t.points[0].b_crit;
        assert!(
            growth > 2.0,
            "B_crit should grow several-fold, got {growth}"
        );
    }

    #[test]
    fn piecewise_interpolates_geometrically() {
        let s = scenario(ScenarioLaw::Piecewise {
            points: vec![(0.0, 100.0), (100.0, 400.0)],
        });
        assert!((s.b_crit_at(50.0, 1).0 - 200.0).abs() < 1e-9);
        assert_eq!(s.b_crit_at(-5.0, 1).0, 100.0);
        assert_eq!(s.b_crit_at(500.0, 1).0, 400.0);
    }

    #[test]
    fn invalid_scenarios_are_errors() {
        let mut s = scenario(ScenarioLaw::MerrillPlateau);
        s.phases = 1;
        assert!(s.trajectory(4096).is_err());
        let s = scenario(ScenarioLaw::Piecewise { points: vec![] });
        assert!(s.trajectory(4096).is_err());
    }
}

/// What a B_crit source measures. The planner's efficiency formula needs McCandlish's noise
/// scale B_noise (efficiency 1/2 at B = B_noise); the session's `b_crit_scale` converts the
/// source to it (see `docs/PLANNER.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum BCritKind {
    /// A gradient noise scale (McCandlish et al. 2018, arXiv 1812.06162: B_simple), as the
    /// estimators measure: already B_noise up to the B_simple/B_noise gap.
    NoiseScale,
    /// A threshold critical batch: the batch below which loss or steps degrade by less than a
    /// set tolerance (Merrill et al. 2025, arXiv 2505.23971; Zhang et al. 2024, arXiv
    /// 2410.21676).
    ThresholdCbs,
    /// A scaling-law B_crit(L) fitted on another dataset and tokenizer (Kaplan et al. 2020,
    /// arXiv 2001.08361), defined as E_min/S_min, i.e. McCandlish's B_crit.
    ScalingLaw,
    /// Points given by the user: whatever they measured.
    Given,
}

impl BCritKind {
    /// Kebab-case name used in reports.
    pub fn name(self) -> &'static str {
        match self {
            BCritKind::NoiseScale => "noise-scale",
            BCritKind::ThresholdCbs => "threshold-cbs",
            BCritKind::ScalingLaw => "scaling-law",
            BCritKind::Given => "given",
        }
    }

    /// What it measures, in a few words.
    pub fn measures(self) -> &'static str {
        match self {
            BCritKind::NoiseScale => "gradient noise scale (B_simple ≈ B_noise)",
            BCritKind::ThresholdCbs => "threshold critical batch (tolerance on loss or steps)",
            BCritKind::ScalingLaw => "scaling-law B_crit(L) = E_min/S_min on another dataset",
            BCritKind::Given => "user-given points",
        }
    }
}

impl ScenarioLaw {
    /// What this law measures.
    pub fn kind(&self) -> BCritKind {
        match self {
            ScenarioLaw::KaplanChinchilla { .. } => BCritKind::ScalingLaw,
            ScenarioLaw::MerrillPlateau | ScenarioLaw::ZhangDataScaling { .. } => {
                BCritKind::ThresholdCbs
            }
            ScenarioLaw::Piecewise { .. } => BCritKind::Given,
        }
    }

    /// The factor B_noise / (this law's B_crit) its definition implies, with the reasoning;
    /// `None` where the definition gives none.
    pub fn b_noise_factor(&self) -> Option<(f64, &'static str)> {
        match self {
            ScenarioLaw::KaplanChinchilla { .. } => Some((
                1.0,
                "Kaplan et al. define B_crit = E_min/S_min, McCandlish's B_crit ≈ B_noise",
            )),
            ScenarioLaw::ZhangDataScaling { .. } => Some((
                5.0,
                "Zhang et al.: CBS where steps exceed linear scaling by 20 %; with \
                 S = S_min(1 + B_noise/B) that is B = 0.2·B_noise",
            )),
            ScenarioLaw::MerrillPlateau | ScenarioLaw::Piecewise { .. } => None,
        }
    }
}
