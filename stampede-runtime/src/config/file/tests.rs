use super::*;
use std::time::Duration;

fn parse_text(text: &str) -> Result<Settings, ConfigError> {
    parse(Path::new("stampede.toml"), text)
}

#[test]
fn the_documented_file_reads_into_settings() {
    let settings = parse_text(
        r#"
[backend]
kind = "memory"
prefix = "shop"
response_timeout = "100ms"
[admission.db]
limit = 20
queue_timeout = "500ms"
[functions."user-profile"]
fresh = "30s"
stale = "1m"
stale_if_error = "1h"
jitter = 0.1
xfetch_beta = 1
timeout = "2s"
capacity = 500
hot_keys = 64
enabled = false
coalesce = false
lease = "5s"
admission = "db"
"#,
    )
    .unwrap();
    let backend = settings.backend.value.resolve().unwrap();
    assert_eq!(backend.prefix, "shop");
    assert_eq!(backend.response_timeout, Duration::from_millis(100));
    assert_eq!(backend.breaker_failures, 5, "the default");
    let (name, admission) = &settings.admissions[0];
    assert_eq!(&**name, "db");
    assert_eq!(admission.value.limit, Some(20));
    let (name, overrides) = &settings.functions[0];
    assert_eq!(&**name, "user-profile");
    assert_eq!(
        overrides.value,
        Overrides::new()
            .fresh(Duration::from_secs(30))
            .stale(Duration::from_secs(60))
            .stale_if_error(Duration::from_secs(3_600))
            .jitter(0.1)
            .xfetch(1.0)
            .timeout(Duration::from_secs(2))
            .capacity(500)
            .hot_keys(64)
            .enabled(false)
            .coalesce(false)
            .lease(Duration::from_secs(5))
            .admission("db")
    );
    let at = &overrides.at["admission"];
    assert_eq!(at.line, Some(21));
    assert_eq!(at.key.as_deref(), Some("functions.user-profile.admission"));
}

#[test]
fn an_empty_file_sets_nothing() {
    let settings = parse_text("").unwrap();
    assert_eq!(settings.backend.value, BackendLayer::default());
    assert!(settings.admissions.is_empty() && settings.functions.is_empty());
}

#[test]
fn keys_are_written_as_toml_writes_them() {
    assert_eq!(toml_key("user-profile"), "user-profile");
    assert_eq!(toml_key("app::load_profile"), "\"app::load_profile\"");
}

#[test]
fn both_spellings_of_xfetch_in_one_table_are_refused_under_the_table() {
    let error = parse_text("[functions.f]\nfresh = \"1s\"\nxfetch = true\nxfetch_beta = 2\n")
        .err()
        .unwrap();
    assert_eq!(error.key(), Some("functions.f"));
    assert_eq!(error.line(), Some(1));
    assert!(
        error.message().ends_with(
            "duplicate field `xfetch`: `xfetch` and `xfetch_beta` are one setting; keep one"
        ),
        "{error}"
    );
}
