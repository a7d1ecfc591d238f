use super::*;
use crate::config::Backend;
use crate::xfetch::XFetch;
use std::time::Duration;

/// `layers` with the variables among `vars` applied.
fn applied(
    mut layers: Layers,
    vars: impl IntoIterator<Item = (OsString, OsString)>,
) -> Result<Layers, ConfigError> {
    apply(&mut layers, vars)?;
    Ok(layers)
}

fn vars(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
    pairs
        .iter()
        .map(|(k, v)| (OsString::from(k), OsString::from(v)))
        .collect()
}

#[test]
fn names_become_variable_names() {
    assert_eq!(env_name("user-profile"), "USER_PROFILE");
    assert_eq!(env_name("app::load.v2"), "APP__LOAD_V2");
}

#[test]
fn variables_set_admissions_and_function_overrides() {
    let mut layers = Layers::default();
    layers.set_admission("db-main".into(), 20, Duration::from_secs(1));
    let layers = applied(
        layers,
        vars(&[
            ("STAMPEDE_ADMISSION_DB_MAIN_LIMIT", "8"),
            ("STAMPEDE_ADMISSION_SEARCH_LIMIT", "3"),
            ("STAMPEDE_ADMISSION_SEARCH_QUEUE_TIMEOUT", "250ms"),
            ("STAMPEDE_ADMISSION_SEARCH_RESERVED_HIGH", "1"),
            ("STAMPEDE_ADMISSION_SEARCH_LOW_QUEUE", "4"),
            ("STAMPEDE_ADMISSION_SEARCH_PER_GROUP", "2"),
            ("STAMPEDE_ADMISSION_DB_MAIN_SCOPE", "fleet"),
            ("STAMPEDE_ADMISSION_DB_MAIN_LOCAL_LIMIT", "2"),
            ("STAMPEDE_ADMISSION_DB_MAIN_PERMIT_TTL", "3s"),
            ("STAMPEDE_FUNCTION_USER_PROFILE_FRESH", "30s"),
            ("STAMPEDE_FUNCTION_USER_PROFILE_STALE_IF_ERROR", "5m"),
            ("STAMPEDE_FUNCTION_USER_PROFILE_ENABLED", "false"),
            ("STAMPEDE_FUNCTION_USER_PROFILE_ADMISSION", "search"),
            ("STAMPEDE_FUNCTION_USER_PROFILE_PRIORITY", "high"),
            ("STAMPEDE_REQUIRE_REDIS", "1"),
            ("PATH", "/bin"),
        ]),
    )
    .unwrap();
    let db = &layers.admissions[&Arc::from("db-main")].value;
    assert_eq!(
        (db.limit, db.queue_timeout),
        (Some(8), Some(Duration::from_secs(1)))
    );
    assert_eq!(
        (db.scope, db.local_limit, db.permit_ttl),
        (
            Some(crate::config::Scope::Fleet),
            Some(2),
            Some(Duration::from_secs(3))
        )
    );
    let search = &layers.admissions[&Arc::from("search")].value;
    assert_eq!(
        (search.limit, search.queue_timeout),
        (Some(3), Some(Duration::from_millis(250)))
    );
    assert_eq!(
        (search.reserved_high, search.low_queue, search.per_group),
        (Some(1), Some(4), Some(2))
    );
    assert_eq!(
        layers.env_functions["USER_PROFILE"].value,
        Overrides::new()
            .fresh(Duration::from_secs(30))
            .stale_if_error(Duration::from_secs(300))
            .enabled(false)
            .admission("search")
            .priority(crate::Priority::High)
    );
    let config = layers.check(|_| Ok(())).unwrap();
    let db = &config.admissions[&Arc::from("db-main")];
    assert_eq!(
        db.fleet,
        Some(crate::config::FleetWide {
            local_limit: 2,
            permit_ttl: Duration::from_secs(3)
        })
    );
    let search = &config.admissions[&Arc::from("search")];
    assert_eq!(search.fleet, None);
}

#[test]
fn a_fleet_wide_admission_defaults_to_a_quarter_of_its_limit_locally() {
    let layers = applied(
        Layers::default(),
        vars(&[
            ("STAMPEDE_ADMISSION_DB_LIMIT", "10"),
            ("STAMPEDE_ADMISSION_DB_SCOPE", "fleet"),
        ]),
    )
    .unwrap();
    let config = layers.check(|_| Ok(())).unwrap();
    assert_eq!(
        config.admissions[&Arc::from("db")].fleet,
        Some(crate::config::FleetWide {
            local_limit: 3,
            permit_ttl: crate::config::DEFAULT_PERMIT_TTL
        })
    );
}

#[test]
fn bad_variables_are_errors_naming_the_variable() {
    let cases = [
        (
            "STAMPEDE_FUNCTION_X_FRESH",
            "soon",
            "`soon` is not a duration",
        ),
        (
            "STAMPEDE_FUNCTION_X_FRESH",
            "0s",
            "must be greater than zero",
        ),
        (
            "STAMPEDE_FUNCTION_X_JITTER",
            "0.9",
            "jitter must be a fraction of fresh from 0.0 to 0.5",
        ),
        (
            "STAMPEDE_FUNCTION_X_CAPACITY",
            "-1",
            "`-1` is not a whole number",
        ),
        (
            "STAMPEDE_FUNCTION_X_CAPACITY",
            "99999999999999999999",
            "is not a whole number",
        ),
        (
            "STAMPEDE_FUNCTION_X_CAPACITY",
            "2000000000",
            "capacity must be at most 1000000000",
        ),
        (
            "STAMPEDE_FUNCTION_X_HOT_KEYS",
            "5000",
            "hot_keys must be at most 1024",
        ),
        (
            "STAMPEDE_FUNCTION_X_LEASE",
            "0s",
            "lease must be greater than zero",
        ),
        (
            "STAMPEDE_REDIS_RESPONSE_TIMEOUT",
            "0ms",
            "response_timeout must be greater than zero",
        ),
        (
            "STAMPEDE_REDIS_TIMEOUT",
            "1s",
            "expected one of STAMPEDE_REDIS_URL, STAMPEDE_REDIS_NODES",
        ),
        (
            "STAMPEDE_FUNCTION_X_ENABLED",
            "no",
            "`no` is not `true` or `false`",
        ),
        (
            "STAMPEDE_FUNCTION_X_FRSH",
            "1s",
            "expected a name and then one of _FRESH, _STALE",
        ),
        (
            "STAMPEDE_ADMISSION_DB_LIMIT",
            "0",
            "limit must be at least 1",
        ),
        (
            "STAMPEDE_ADMISSION_DB_SIZE",
            "4",
            "one of _LIMIT, _QUEUE_TIMEOUT",
        ),
        (
            "STAMPEDE_BACKEND",
            "redis",
            "backend kind `redis` needs a `url`",
        ),
        (
            "STAMPEDE_REDIS_URL",
            "redis://127.0.0.1",
            "with the \"memory\" kind would be ignored",
        ),
    ];
    for (key, value, expected) in cases {
        let error = applied(Layers::default(), vars(&[(key, value)]))
            .and_then(|layers| layers.check(|_| Ok(())))
            .unwrap_err();
        let message = error.to_string();
        assert_eq!(error.key(), Some(key));
        assert!(
            message.starts_with(&format!("environment variable `{key}`: ")),
            "{message}"
        );
        assert!(message.contains(expected), "{key}={value}: {message}");
    }
}

#[test]
fn every_function_key_has_a_variable_lease_and_coalesce_included() {
    let layers = applied(
        Layers::default(),
        vars(&[
            ("STAMPEDE_FUNCTION_F_LEASE", "5s"),
            ("STAMPEDE_FUNCTION_F_COALESCE", "false"),
            ("STAMPEDE_FUNCTION_F_FAIL_SAFE_THROTTLE", "1m 30s"),
            ("STAMPEDE_FUNCTION_F_XFETCH_BETA", "2"),
        ]),
    )
    .unwrap();
    assert_eq!(
        layers.env_functions["F"].value,
        Overrides::new()
            .lease(Duration::from_secs(5))
            .coalesce(false)
            .fail_safe_throttle(Duration::from_secs(90))
            .xfetch(2.0)
    );
    for key in Overrides::KEYS {
        let variable = format!("STAMPEDE_FUNCTION_F_{}", key.to_ascii_uppercase());
        let error = applied(Layers::default(), vars(&[(&variable, "?")]))
            .and_then(|layers| layers.check(|_| Ok(())))
            .unwrap_err();
        assert_eq!(error.key(), Some(variable.as_str()), "{key} is read");
    }
}

#[test]
fn xfetch_is_turned_off_by_either_spelling_but_not_set_by_both() {
    let cases = [
        ("STAMPEDE_FUNCTION_F_XFETCH", "false", XFetch::Off),
        ("STAMPEDE_FUNCTION_F_XFETCH", "true", XFetch::Beta(1.0)),
        ("STAMPEDE_FUNCTION_F_XFETCH", "2.5", XFetch::Beta(2.5)),
        ("STAMPEDE_FUNCTION_F_XFETCH_BETA", "0", XFetch::Off),
        ("STAMPEDE_FUNCTION_F_XFETCH_BETA", "1.5", XFetch::Beta(1.5)),
    ];
    for (variable, value, xfetch) in cases {
        let layers = applied(Layers::default(), vars(&[(variable, value)])).unwrap();
        assert_eq!(
            layers.env_functions["F"].value,
            Overrides::new().xfetch(xfetch),
            "{variable}={value}"
        );
    }
    let both = vars(&[
        ("STAMPEDE_FUNCTION_F_XFETCH", "false"),
        ("STAMPEDE_FUNCTION_F_XFETCH_BETA", "2"),
    ]);
    let error = applied(Layers::default(), both).unwrap_err();
    assert_eq!(error.key(), Some("STAMPEDE_FUNCTION_F_XFETCH_BETA"));
    assert!(
        error.message().contains(
            "`STAMPEDE_FUNCTION_F_XFETCH` sets the same setting (`xfetch`); keep one of the two"
        ),
        "{error}"
    );
    for (value, says) in [
        ("-1", "β must be a finite number above zero (1.0 is the usual choice), or 0 to turn XFetch off, not -1"),
        ("sometimes", "expected `true`, `false` or β, a number (0 turns XFetch off)"),
    ] {
        let error = applied(Layers::default(), vars(&[("STAMPEDE_FUNCTION_F_XFETCH_BETA", value)])).unwrap_err();
        assert_eq!(error.key(), Some("STAMPEDE_FUNCTION_F_XFETCH_BETA"));
        assert!(error.message().contains(says), "{error}");
    }
}

#[test]
fn redis_variables_fill_the_backend_table() {
    let layers = applied(
        Layers::default(),
        vars(&[
            (
                "STAMPEDE_REDIS_NODES",
                "redis://10.0.0.1:6379, redis://10.0.0.2:6379",
            ),
            ("STAMPEDE_REDIS_PREFIX", "shop"),
            ("STAMPEDE_REDIS_BREAKER_COOLDOWN", "2s"),
        ]),
    )
    .unwrap();
    let settings = layers.backend.value.resolve().unwrap();
    let nodes: Vec<_> = settings.nodes.iter().map(|node| node.expose()).collect();
    assert_eq!(nodes, ["redis://10.0.0.1:6379", "redis://10.0.0.2:6379"]);
    assert_eq!(settings.prefix, "shop");
    assert_eq!(settings.breaker_cooldown, Duration::from_secs(2));
    assert_eq!(settings.max_value_bytes, 8 * 1024 * 1024, "the default");
    // Nodes without a shared kind would be ignored: refused, under the variable.
    let error = layers.clone().check(|_| Ok(())).unwrap_err();
    assert_eq!(error.key(), Some("STAMPEDE_REDIS_NODES"));
    assert!(error.message().contains("\"memory\" kind"), "{error}");
    let settings = applied(layers, vars(&[("STAMPEDE_BACKEND", "tiered")]))
        .unwrap()
        .backend
        .value
        .resolve()
        .unwrap();
    assert_eq!(
        settings.available(),
        Ok(Backend::tiered_cluster([
            "redis://10.0.0.1:6379",
            "redis://10.0.0.2:6379"
        ]))
    );
}

#[test]
fn cluster_nodes_must_be_urls_and_exclude_a_url() {
    let error = applied(
        Layers::default(),
        vars(&[
            ("STAMPEDE_BACKEND", "redis"),
            ("STAMPEDE_REDIS_NODES", "10.0.0.1:6379"),
        ]),
    )
    .and_then(|layers| layers.check(|_| Ok(())))
    .unwrap_err();
    assert_eq!(error.key(), Some("STAMPEDE_REDIS_NODES"));
    assert!(error.message().contains("redis://"), "{error}");
    let error = applied(
        Layers::default(),
        vars(&[
            ("STAMPEDE_BACKEND", "redis"),
            ("STAMPEDE_REDIS_URL", "redis://10.0.0.9:6379"),
            ("STAMPEDE_REDIS_NODES", "redis://10.0.0.1:6379"),
        ]),
    )
    .and_then(|layers| layers.check(|_| Ok(())))
    .unwrap_err();
    assert!(error.message().contains("not both"), "{error}");
}
