use super::*;

use crate::examples::{DURATIONS, NOT_DURATIONS};

#[test]
fn units_sums_spaces_and_digit_groups_parse() {
    for &(text, millis) in DURATIONS {
        assert_eq!(
            parse_duration(text),
            Ok(Duration::from_millis(millis)),
            "{text}"
        );
    }
}

#[test]
fn malformed_durations_say_why() {
    for &(text, why) in NOT_DURATIONS.iter().chain(&[("  ", "it is empty")]) {
        let message = parse_duration(text).unwrap_err();
        assert!(
            message.starts_with(&format!("`{text}` is not a duration: {why}")),
            "{text}: {message}"
        );
    }
}
