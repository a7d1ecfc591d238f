use super::*;

fn breaker(failures: u32, cooldown: Duration) -> Arc<Breaker> {
    Arc::new(Breaker::new(failures, cooldown, String::new()))
}

#[test]
fn opens_after_consecutive_failures_only() {
    let breaker = breaker(3, Duration::from_secs(60));
    for _ in 0..2 {
        breaker.pass().unwrap().failed("refused");
    }
    breaker.pass().unwrap().succeeded();
    for _ in 0..2 {
        breaker.pass().unwrap().failed("refused");
    }
    assert_eq!(breaker.state(), BreakerState::Closed);
    breaker.pass().unwrap().failed("refused");
    assert_eq!(breaker.state(), BreakerState::Open);
    assert!(breaker.pass().is_none());
    assert_eq!(breaker.degraded().0, 1);
}

#[test]
fn one_probe_after_the_cooldown_decides() {
    let breaker = breaker(1, Duration::ZERO);
    breaker.pass().unwrap().failed("refused");
    let probe = breaker.pass().unwrap();
    assert!(probe.is_probe());
    assert!(breaker.pass().is_none(), "only one probe at a time");
    probe.failed("refused");
    assert_eq!(breaker.state(), BreakerState::Open);
    let probe = breaker.pass().unwrap();
    probe.succeeded();
    assert_eq!(breaker.state(), BreakerState::Closed);
    assert!(!breaker.pass().unwrap().is_probe());
    assert_eq!(
        breaker.degraded().0,
        1,
        "a failed probe does not count a new opening"
    );
}

#[test]
fn a_probe_its_caller_dropped_lets_the_next_call_probe_at_once() {
    let breaker = breaker(1, Duration::from_secs(60));
    breaker.pass().unwrap().failed("refused");
    assert!(breaker.pass().is_none(), "cooling down");
    // Past the cooldown: a caller takes the probe, then gives up on it.
    breaker.lock().opened_at = Instant::now().checked_sub(Duration::from_secs(61));
    drop(breaker.pass().unwrap());
    assert_eq!(breaker.state(), BreakerState::Open);
    let probe = breaker
        .pass()
        .expect("no second cooldown for a dropped probe");
    probe.succeeded();
    assert_eq!(breaker.state(), BreakerState::Closed);
}

#[test]
fn fails_fast_says_what_pass_would_refuse() {
    let cooling = breaker(1, Duration::from_secs(60));
    assert!(!cooling.fails_fast());
    cooling.pass().unwrap().failed("refused");
    assert!(cooling.fails_fast(), "open, cooling down");
    assert!(cooling.pass().is_none());
    let cooled = breaker(1, Duration::ZERO);
    cooled.pass().unwrap().failed("refused");
    assert_eq!(cooled.state(), BreakerState::Open);
    assert!(
        !cooled.fails_fast(),
        "open but cooled: the next call is the probe"
    );
    let probe = cooled.pass().unwrap();
    assert!(cooled.fails_fast(), "half-open, its probe out");
    probe.succeeded();
    assert!(!cooled.fails_fast());
}
