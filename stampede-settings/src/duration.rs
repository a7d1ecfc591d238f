//! Durations as people write them: whole numbers with a unit, summed.
use std::time::Duration;

/// Parses a duration: one or more groups of a whole number and a unit (`ms`, `s`, `m`,
/// `h`, `d`), optionally separated by spaces; digits may be grouped with `_`.
/// `"500ms"`, `"30s"`, `"1m30s"`, `"1h 30m"`, `"1_000ms"` and `"0s"` are durations;
/// `"30"`, `"1.5s"`, `"30sec"` and `""` are not. On failure, says why in words the
/// author can act on.
///
/// ```
/// use std::time::Duration;
/// use stampede_settings::parse_duration;
/// assert_eq!(parse_duration("1h 1m"), Ok(Duration::from_secs(3_660)));
/// assert!(parse_duration("30").unwrap_err().contains("the unit is missing"));
/// ```
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let invalid = |why: &str| {
        Err(format!(
            "`{text}` is not a duration: {why}; write whole numbers with a unit (ms, s, m, h or d), such as \"500ms\", \"30s\" or \"1m 30s\""
        ))
    };
    let mut rest = text.trim();
    if rest.is_empty() {
        return invalid("it is empty");
    }
    let mut total = Duration::ZERO;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit() && c != '_')
            .unwrap_or(rest.len());
        if digits == 0 || rest.starts_with('_') {
            return invalid("a number must come before each unit");
        }
        let Ok(number) = rest[..digits].replace('_', "").parse::<u64>() else {
            return invalid("it is too long");
        };
        rest = &rest[digits..];
        let letters = rest
            .find(|c: char| !c.is_ascii_alphabetic())
            .unwrap_or(rest.len());
        let unit = match &rest[..letters] {
            "ms" => Duration::from_millis(1),
            "s" => Duration::from_secs(1),
            "m" => Duration::from_secs(60),
            "h" => Duration::from_secs(60 * 60),
            "d" => Duration::from_secs(24 * 60 * 60),
            "" if rest
                .trim_start()
                .starts_with(|c: char| c.is_ascii_alphabetic()) =>
            {
                let word = rest
                    .trim_start()
                    .split(|c: char| !c.is_ascii_alphabetic())
                    .next();
                return match word.unwrap_or_default() {
                    unit @ ("ms" | "s" | "m" | "h" | "d") => {
                        invalid(&format!("`{unit}` must follow its number without a space"))
                    }
                    other => invalid(&format!("`{other}` is not a unit")),
                };
            }
            "" if rest.is_empty() || rest.starts_with(' ') => {
                return invalid(&format!("the unit is missing (as in \"{number}s\")"))
            }
            "" => return invalid(&format!("`{}` is not a unit", &rest[..1])),
            other => return invalid(&format!("`{other}` is not a unit")),
        };
        let part = u32::try_from(number).ok().and_then(|n| unit.checked_mul(n));
        let Some(sum) = part.and_then(|part| total.checked_add(part)) else {
            return invalid("it is too long");
        };
        total = sum;
        rest = rest[letters..].trim_start();
    }
    Ok(total)
}

#[cfg(test)]
mod tests;
