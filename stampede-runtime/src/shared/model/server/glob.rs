//! Redis's glob patterns (`SCAN … MATCH`, `KEYS`): `*`, `?`, `[abc]`, `[^a-z]` and `\`
//! escapes, case-sensitive, as `stringmatchlen` in Redis 7.0's `util.c` reads them,
//! quirks included: an unclosed `[` runs to the end of the pattern, a range may be given
//! high to low, a trailing `\` matches itself, and bytes compare as C's signed `char`.

/// Whether `key` matches `pattern`.
pub(super) fn matches(pattern: &[u8], key: &[u8]) -> bool {
    let mut skip_longer = false;
    match_from(pattern, key, &mut skip_longer)
}

/// The byte at `at`, or 0 past the end: Redis's strings end with a NUL it reads there.
fn at(text: &[u8], at: usize) -> u8 {
    text.get(at).copied().unwrap_or(0)
}

/// `stringmatchlen_impl`: `skip_longer` ends the search once a `*` has tried every
/// position (its result cannot change by trying more).
fn match_from(mut pattern: &[u8], mut key: &[u8], skip_longer: &mut bool) -> bool {
    while !pattern.is_empty() && !key.is_empty() {
        match pattern[0] {
            b'*' => {
                while pattern.len() > 1 && pattern[1] == b'*' {
                    pattern = &pattern[1..];
                }
                if pattern.len() == 1 {
                    return true;
                }
                while !key.is_empty() {
                    if match_from(&pattern[1..], key, skip_longer) {
                        return true;
                    }
                    if *skip_longer {
                        return false;
                    }
                    key = &key[1..];
                }
                *skip_longer = true;
                return false;
            }
            b'?' => key = &key[1..],
            b'[' => {
                pattern = &pattern[1..];
                let negate = at(pattern, 0) == b'^';
                if negate {
                    pattern = &pattern[1..];
                }
                let mut matched = false;
                let c = key[0] as i8;
                loop {
                    if at(pattern, 0) == b'\\' && pattern.len() >= 2 {
                        pattern = &pattern[1..];
                        if pattern[0] == key[0] {
                            matched = true;
                        }
                    } else if at(pattern, 0) == b']' {
                        break;
                    } else if pattern.is_empty() {
                        // Unclosed: the class ends with the pattern (the step below takes
                        // the last byte again, as Redis's pointer arithmetic does).
                        break;
                    } else if pattern.len() >= 3 && pattern[1] == b'-' {
                        let (mut start, mut end) = (pattern[0] as i8, pattern[2] as i8);
                        if start > end {
                            std::mem::swap(&mut start, &mut end);
                        }
                        pattern = &pattern[2..];
                        if c >= start && c <= end {
                            matched = true;
                        }
                    } else if pattern[0] == key[0] {
                        matched = true;
                    }
                    pattern = &pattern[1..];
                }
                if negate {
                    matched = !matched;
                }
                if !matched {
                    return false;
                }
                key = &key[1..];
            }
            b'\\' if pattern.len() >= 2 => {
                pattern = &pattern[1..];
                if pattern[0] != key[0] {
                    return false;
                }
                key = &key[1..];
            }
            literal => {
                if literal != key[0] {
                    return false;
                }
                key = &key[1..];
            }
        }
        // After an unclosed class the pattern is already used up.
        if !pattern.is_empty() {
            pattern = &pattern[1..];
        }
        if key.is_empty() {
            while at(pattern, 0) == b'*' {
                pattern = &pattern[1..];
            }
            break;
        }
    }
    pattern.is_empty() && key.is_empty()
}
