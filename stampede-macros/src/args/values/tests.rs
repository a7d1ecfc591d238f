use super::parse_duration;

#[test]
fn durations_read_the_shared_grammar_in_milliseconds() {
    assert_eq!(parse_duration("fresh", "250ms"), Ok(250));
    assert_eq!(parse_duration("fresh", "1m30s"), Ok(90_000));
    assert_eq!(parse_duration("fresh", "1h 1m"), Ok(3_660_000));
    assert_eq!(parse_duration("fresh", "1_000ms"), Ok(1_000));
    assert_eq!(
        parse_duration("stale", "36501d"),
        Err("`stale` must be at most 36500d".to_owned())
    );
}

#[test]
fn the_attribute_reads_the_one_duration_grammar() {
    use stampede_settings::examples::{DURATIONS, NOT_DURATIONS};
    for &(text, millis) in DURATIONS {
        assert_eq!(parse_duration("stale", text), Ok(millis), "{text}");
    }
    for &(text, why) in NOT_DURATIONS {
        let message = parse_duration("stale", text).unwrap_err();
        assert!(
            message.starts_with(&format!("`{text}` is not a duration: {why}")),
            "{text}: {message}"
        );
    }
}
