use super::*;

#[test]
fn out_of_range_values_are_refused_with_the_bound() {
    assert_eq!(
        capacity("capacity", 0).unwrap_err(),
        "capacity must be at least 1"
    );
    assert_eq!(
        capacity("capacity", u64::MAX).unwrap_err(),
        "capacity must be at most 1000000000"
    );
    assert_eq!(
        admission_limit("limit", 1_000_001).unwrap_err(),
        "limit must be at most 1000000"
    );
    assert!(jitter("jitter", 0.6)
        .unwrap_err()
        .starts_with("jitter must be a fraction"));
    assert!(jitter("jitter", f64::NAN).is_err());
    assert!(xfetch_beta("beta", -1.0).is_err() && xfetch_beta("beta", f64::INFINITY).is_err());
    assert!(xfetch_beta("beta", f64::NAN).is_err());
    assert_eq!(
        positive("fresh", Duration::ZERO).unwrap_err(),
        "fresh must be greater than zero"
    );
    assert_eq!(
        within_horizon("stale", Duration::MAX).unwrap_err(),
        "stale must be at most 36500d"
    );
}

#[test]
fn an_xfetch_beta_of_zero_turns_xfetch_off() {
    assert_eq!(xfetch_beta("beta", 0.0), Ok(None));
    assert_eq!(xfetch_beta("beta", -0.0), Ok(None));
    assert_eq!(xfetch_beta("beta", 1.5), Ok(Some(1.5)));
}

#[test]
fn the_kept_horizon_counts_jitter_and_the_longer_window() {
    let day = Duration::from_secs(86_400);
    assert!(horizon(day * 20_000, 0.5, day * 6_500, Duration::ZERO).is_ok());
    assert!(horizon(day * 20_000, 0.5, Duration::ZERO, day * 6_501).is_err());
    assert!(horizon(HORIZON, 0.0, Duration::ZERO, Duration::ZERO).is_ok());
    assert!(horizon(HORIZON, 0.1, Duration::ZERO, Duration::ZERO).is_err());
}
