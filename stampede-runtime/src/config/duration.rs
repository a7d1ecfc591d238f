//! Durations as operators write them: a whole number and a unit, or a sum of them
//! (`500ms`, `30s`, `1m30s`, `2h`, `1d`); the same grammar as the attribute's.
use std::time::Duration;

/// Parses `text`, or says what is wrong with it in words a config file's author can act on.
pub(crate) fn parse(text: &str) -> Result<Duration, String> {
    let invalid = |why: &str| {
        Err(format!(
            "`{text}` is not a duration: {why} (write a whole number and a unit: ms, s, m, h or d, or a sum like \"1m30s\")"
        ))
    };
    if text.is_empty() {
        return invalid("it is empty");
    }
    let mut total = Duration::ZERO;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return invalid("a number must come before each unit");
        }
        let Ok(number) = rest[..digits].parse::<u64>() else {
            return invalid("the number is too large");
        };
        rest = &rest[digits..];
        let letters = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
        let unit = match &rest[..letters] {
            "ms" => Duration::from_millis(1),
            "s" => Duration::from_secs(1),
            "m" => Duration::from_secs(60),
            "h" => Duration::from_secs(60 * 60),
            "d" => Duration::from_secs(24 * 60 * 60),
            "" if rest.is_empty() => return invalid("the unit is missing"),
            "" => return invalid(&format!("`{}` is not a unit", &rest[..1])),
            other => return invalid(&format!("`{other}` is not a unit")),
        };
        rest = &rest[letters..];
        let Some(part) = u32::try_from(number).ok().and_then(|n| unit.checked_mul(n)) else {
            return invalid("it is too long");
        };
        let Some(sum) = total.checked_add(part) else {
            return invalid("it is too long");
        };
        total = sum;
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_and_sums_parse() {
        let cases = [
            ("500ms", Duration::from_millis(500)),
            ("30s", Duration::from_secs(30)),
            ("1m30s", Duration::from_secs(90)),
            ("2h", Duration::from_secs(7_200)),
            ("1d", Duration::from_secs(86_400)),
            ("1s250ms", Duration::from_millis(1_250)),
            ("0s", Duration::ZERO),
        ];
        for (text, expected) in cases {
            assert_eq!(parse(text), Ok(expected), "{text}");
        }
    }

    #[test]
    fn malformed_durations_say_why() {
        let cases = [
            ("", "it is empty"),
            ("30", "the unit is missing"),
            ("30x", "`x` is not a unit"),
            ("s", "a number must come before each unit"),
            ("1.5s", "`.` is not a unit"),
            (" 3s", "a number must come before each unit"),
            ("99999999999999999999s", "the number is too large"),
            ("5000000000d", "it is too long"),
        ];
        for (text, why) in cases {
            let message = parse(text).unwrap_err();
            assert!(
                message.starts_with(&format!("`{text}` is not a duration: {why} (")),
                "{text}: {message}"
            );
        }
    }
}
