use super::*;

#[test]
fn a_urls_password_is_replaced() {
    assert_eq!(
        redacted("rediss://app:s3cret@cache:6380/0"),
        "rediss://app:***@cache:6380/0"
    );
    assert_eq!(redacted("redis://:s3cret@cache"), "redis://:***@cache");
    // Without a `:` the user information may be a bare password.
    assert_eq!(redacted("redis://s3cret@cache/1"), "redis://***@cache/1");
    // An `@` in the password itself (unescaped, as people write them).
    assert_eq!(
        redacted("redis://app:p@ss@cache:6379"),
        "redis://app:***@cache:6379"
    );
    assert_eq!(
        redacted("redis+sentinel://app:pw@s1:26379,s2:26379/mymaster"),
        "redis+sentinel://app:***@s1:26379,s2:26379/mymaster"
    );
}

#[test]
fn a_url_without_credentials_is_kept() {
    assert_eq!(redacted("redis://cache:6379/0"), "redis://cache:6379/0");
    // An `@` after the authority is no credential.
    assert_eq!(redacted("redis://cache/0#a@b"), "redis://cache/0#a@b");
    assert_eq!(redacted("cache:6379"), "cache:6379");
    assert_eq!(redacted("pw@cache:6379"), "***");
}

#[test]
fn secrets_print_as_stars_in_every_form() {
    let secret = Secret::new("s3cret");
    assert_eq!(format!("{secret} {secret:?}"), "*** ***");
    let url = RedisUrl::new("redis://u:s3cret@h");
    assert_eq!(
        format!("{url} {url:?}"),
        "redis://u:***@h \"redis://u:***@h\""
    );
}
