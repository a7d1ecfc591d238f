use super::*;

/// The empirical early-refresh rate matches exp(-x/(βδ)) within five standard errors
/// (a false alarm about once in 3.5 million runs).
#[test]
fn early_refresh_rate_matches_exp_minus_x_over_beta_delta() {
    let draws = 200_000;
    for (x, delta, beta) in [
        (0.05, 0.1, 1.0),
        (0.2, 0.1, 1.0),
        (0.1, 0.05, 2.0),
        (1.0, 0.5, 0.5),
    ] {
        let to_expiry = Duration::from_secs_f64(x);
        let hits = (0..draws)
            .filter(|_| should_refresh_early(to_expiry, delta, beta, draw_u()))
            .count();
        let rate = hits as f64 / draws as f64;
        let expected = (-x / (delta * beta)).exp();
        let sigma = (expected * (1.0 - expected) / draws as f64).sqrt();
        assert!(
            (rate - expected).abs() <= 5.0 * sigma,
            "x={x} δ={delta} β={beta}: rate {rate:.4}, expected {expected:.4} ± {:.4}",
            5.0 * sigma
        );
    }
}

#[test]
fn u_is_never_zero() {
    assert!((0..100_000).map(|_| draw_u()).all(|u| u > 0.0 && u <= 1.0));
}

#[test]
fn far_from_expiry_practically_never_and_at_expiry_always() {
    // A 100 ms recompute ten seconds before expiry, with a middling draw: no.
    assert!(!should_refresh_early(
        Duration::from_secs(10),
        0.1,
        1.0,
        0.5
    ));
    // At expiry, even with the draw that makes -ln(u) zero: yes.
    assert!(should_refresh_early(Duration::ZERO, 0.1, 1.0, 1.0));
}
