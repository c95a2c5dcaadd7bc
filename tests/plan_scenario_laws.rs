//! The B_crit laws the paper-like planner sessions use.

use copus::source::scenario::{Scenario, ScenarioLaw};

fn zhang(tokens_per_param: f64) -> Scenario {
    Scenario {
        law: ScenarioLaw::ZhangDataScaling {
            coefficient: 93.2,
            exponent: 0.47,
            tokens_per_param,
            reference_seq_len: 512.0,
        },
        start_tokens: 1e9,
        total_tokens: 140e9,
        phases: 50,
        nominal_batch: 512,
    }
}

#[test]
fn zhang_matches_the_published_fit_at_chinchilla_optimal_data() {
    let s = zhang(20.0);
    // A 1B-parameter model's Chinchilla budget is 20B tokens: 93.2·1000^0.47 sequences of 512
    // tokens, i.e. an eighth as many samples of 4096 tokens.
    let (b, loss) = s.b_crit_at(20e9, 4096);
    let expected = 93.2 * 1000f64.powf(0.47) / 8.0;
    assert!((b - expected).abs() < 1e-9 * expected, "{b} vs {expected}");
    assert!(loss.is_none());
    // Ten times the data: 10^0.47 ≈ 2.95 times the critical batch.
    let ratio = s.b_crit_at(200e9, 4096).0 / b;
    assert!((ratio - 10f64.powf(0.47)).abs() < 1e-9);
    let t = s.trajectory(4096).expect("valid");
    assert!(t.points.windows(2).all(|w| w[1].b_crit > w[0].b_crit));
    assert!(zhang(0.0).trajectory(4096).is_err());
}

#[test]
fn each_law_says_what_it_measures_and_the_factor_its_definition_implies() {
    use copus::plan::Efficiency;
    use copus::source::scenario::{BCritKind, ChinchillaLoss, ScenarioLaw};
    let zhang = ScenarioLaw::ZhangDataScaling {
        coefficient: 93.2,
        exponent: 0.47,
        tokens_per_param: 20.0,
        reference_seq_len: 512.0,
    };
    assert_eq!(zhang.kind(), BCritKind::ThresholdCbs);
    assert_eq!(ScenarioLaw::MerrillPlateau.kind(), BCritKind::ThresholdCbs);
    assert!(ScenarioLaw::MerrillPlateau.b_noise_factor().is_none());
    let kaplan = ScenarioLaw::KaplanChinchilla {
        b_star_tokens: 2e8,
        alpha_b: 0.21,
        loss: ChinchillaLoss::default(),
        params: 7e9,
    };
    assert_eq!(kaplan.kind(), BCritKind::ScalingLaw);
    assert_eq!(kaplan.b_noise_factor().map(|f| f.0), Some(1.0));
    // Zhang's CBS: steps exceed linear scaling (ΔS_min/B) by 20 %. With the implied factor,
    // the McCandlish step count at B = CBS is exactly 1.2× the linear one.
    let (factor, _) = zhang.b_noise_factor().expect("Zhang implies a factor");
    let cbs = 300.0;
    let steps = Efficiency::MCCANDLISH.steps_per_min_sample(cbs, factor * cbs);
    assert!((steps * cbs - 1.2).abs() < 1e-12, "{}", steps * cbs);
}
