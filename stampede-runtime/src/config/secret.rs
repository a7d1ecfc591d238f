//! Settings that must never be printed: a password, and the URLs that may carry one.
//!
//! A configuration is printed in many places (a `Debug` of the builder, an error naming
//! the setting at fault, a health endpoint, a log line): each of these types prints a
//! password as `***` in every form, so none of them can leak it.
use serde::Deserialize;
use std::borrow::Cow;
use std::fmt;

/// A password or another credential: `Debug` and `Display` write `***`.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub(crate) struct Secret(String);

// Made and read only by the Redis client's settings (and this module's tests, which
// run without it too).
#[cfg(any(feature = "redis", test))]
impl Secret {
    pub(crate) fn new(text: impl Into<String>) -> Self {
        Secret(text.into())
    }
}

#[cfg(feature = "redis")]
impl Secret {
    /// The credential itself, for the one place that sends it.
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// A Redis URL as a setting: printed with its password replaced by `***`.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub(crate) struct RedisUrl(String);

impl RedisUrl {
    pub(crate) fn new(url: impl Into<String>) -> Self {
        RedisUrl(url.into())
    }

    /// The URL itself, password included, for parsing.
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for RedisUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", redacted(&self.0))
    }
}

impl fmt::Display for RedisUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&redacted(&self.0))
    }
}

/// `url` with the password of its user information replaced by `***`
/// (`rediss://app:***@cache:6380/0`). User information without a `:` may be a bare
/// password (`redis://secret@host`, as some clients read it), so it is replaced whole.
/// Text that is not a URL is returned whole only if it has no `@`.
pub(crate) fn redacted(url: &str) -> Cow<'_, str> {
    let Some(authority_at) = url.find("://").map(|at| at + 3) else {
        return match url.contains('@') {
            true => Cow::Borrowed("***"),
            false => Cow::Borrowed(url),
        };
    };
    let rest = &url[authority_at..];
    let authority_len = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..authority_len];
    let Some(user_info_len) = authority.rfind('@') else {
        return Cow::Borrowed(url);
    };
    let user_info = &authority[..user_info_len];
    let kept = match user_info.split_once(':') {
        Some((user, _)) => format!("{user}:***"),
        None => "***".to_owned(),
    };
    Cow::Owned(format!(
        "{}{kept}{}",
        &url[..authority_at],
        &url[authority_at + user_info_len..]
    ))
}

#[cfg(test)]
mod tests;
