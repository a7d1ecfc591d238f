use super::*;

#[test]
fn the_system_clock_ticks_and_never_goes_back() {
    let clock = Clock::system();
    let first = clock.now();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let mut last = first;
    while last <= first + TICK {
        assert!(
            std::time::Instant::now() < deadline,
            "the clock did not advance"
        );
        let now = clock.now();
        assert!(now >= last);
        last = now;
        std::thread::yield_now();
    }
    assert!(clock.precise() >= last);
}
