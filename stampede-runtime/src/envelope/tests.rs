use super::*;

fn policy() -> Policy {
    Policy::builder("t")
        .fresh(Duration::from_secs(10))
        .stale(Duration::from_secs(5))
        .stale_if_error(Duration::from_secs(60))
        .jitter(0.2)
        .build()
        .unwrap()
}

#[test]
fn state_moves_from_fresh_to_stale_to_expired() {
    let now = Instant::from_nanos(1_000_000_000);
    let env = Envelope::fill("v", now, &policy(), 0.1, 1, 0.5);
    assert_eq!(env.state(now), State::Fresh);
    assert_eq!(env.state(now + Duration::from_millis(9_999)), State::Fresh);
    assert_eq!(env.state(now + Duration::from_secs(10)), State::Stale);
    assert_eq!(env.state(now + Duration::from_millis(14_999)), State::Stale);
    assert_eq!(env.state(now + Duration::from_secs(15)), State::Expired);
    assert_eq!(env.keep_until, now + Duration::from_secs(70));
}

#[test]
fn jitter_spreads_fresh_by_the_fraction_both_ways() {
    let now = Instant::from_nanos(1_000_000_000);
    let low = Envelope::fill((), now, &policy(), 0.0, 1, 0.0);
    let high = Envelope::fill((), now, &policy(), 0.0, 1, 1.0);
    assert_eq!(low.fresh_until, now + Duration::from_secs(8));
    assert_eq!(high.fresh_until, now + Duration::from_secs(12));
    assert_eq!(high.stale_until, now + Duration::from_secs(17));
}

#[test]
fn rearm_extends_by_the_throttle_without_passing_keep_until() {
    let now = Instant::from_nanos(1_000_000_000);
    let env = Envelope::fill("v", now, &policy(), 0.1, 7, 0.5);
    let later = now + Duration::from_secs(20);
    let again = env.rearm(later, Duration::from_secs(5));
    assert_eq!(again.state(later), State::Fresh);
    assert_eq!(again.fresh_until, later + Duration::from_secs(5));
    assert_eq!((again.generation, again.rearmed()), (7, true));
    assert_eq!(
        again.age(later),
        Duration::from_secs(20),
        "aged from the load"
    );
    let near_end = now + Duration::from_secs(68);
    assert_eq!(
        env.rearm(near_end, Duration::from_secs(5)).fresh_until,
        env.keep_until
    );
}
