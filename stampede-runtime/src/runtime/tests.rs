use super::*;

fn policy(name: &str) -> Policy {
    Policy::builder(name)
        .fresh(Duration::from_secs(60))
        .build()
        .unwrap()
}

#[test]
fn overrides_replace_only_what_they_set() {
    let runtime = Runtime::builder()
        .admission("db", 4, Duration::from_millis(200))
        .function(
            "user-profile",
            Overrides::new()
                .fresh(Duration::from_secs(5))
                .admission("db")
                .enabled(false),
        )
        .build()
        .unwrap();
    let own = Policy::builder("user-profile")
        .fresh(Duration::from_secs(60))
        .stale(Duration::from_secs(30))
        .build()
        .unwrap();
    let (bound, gate) = runtime.bind(own);
    assert_eq!(bound.fresh(), Duration::from_secs(5));
    assert_eq!(bound.stale(), Duration::from_secs(30), "kept");
    assert!(!bound.enabled());
    assert_eq!(gate.limit(), Some(4));
    let (other, gate) = runtime.bind(policy("other"));
    assert_eq!(other.fresh(), Duration::from_secs(60));
    assert!(matches!(gate, Gate::Open));
}

#[test]
fn an_admission_nobody_defines_closes_the_gate_with_an_error_naming_it() {
    let runtime = Runtime::builder().build().unwrap();
    let own = Policy::builder("p")
        .fresh(Duration::from_secs(1))
        .admission("db")
        .build()
        .unwrap();
    let (_, gate) = runtime.bind(own);
    let Gate::Closed(error) = gate else {
        panic!("the gate is open")
    };
    assert_eq!(
        error,
        Error::UnknownAdmission {
            cache: "p".into(),
            admission: "db".into()
        }
    );
}

#[test]
fn builder_settings_are_checked_at_build() {
    let undefined = Runtime::builder()
        .function("f", Overrides::new().admission("db"))
        .build()
        .unwrap_err();
    assert_eq!(undefined.key(), Some("functions.f.admission"));
    assert!(undefined
        .message()
        .contains("admission `db` is not defined"));
    let jitter = Runtime::builder()
        .function("f", Overrides::new().jitter(0.7))
        .build()
        .unwrap_err();
    assert_eq!(
        jitter.to_string(),
        "runtime builder: `functions.f.jitter`: jitter must be a fraction of fresh from 0.0 to 0.5 (0.15 means ±15 %), not 0.7"
    );
}

#[test]
fn names_the_environment_cannot_tell_apart_are_refused_naming_both() {
    let error = Runtime::builder()
        .function("user-profile", Overrides::new().enabled(false))
        .function("user_profile", Overrides::new().enabled(true))
        .build()
        .unwrap_err();
    assert_eq!(
        error.message(),
        "the functions `user-profile` and `user_profile` are both `USER_PROFILE` in environment variables, so `STAMPEDE_FUNCTION_USER_PROFILE_*` could mean either; rename one"
    );
}

#[test]
fn two_caches_one_environment_form_get_neither_variable() {
    let builder = Runtime::builder().read_env([(
        "STAMPEDE_FUNCTION_USER_PROFILE_ENABLED".into(),
        "false".into(),
    )]);
    let runtime = builder.unwrap().build().unwrap();
    let (first, gate) = runtime.bind(policy("user-profile"));
    assert!(!first.enabled(), "the first claims the variables");
    assert!(matches!(gate, Gate::Open));
    let (_, gate) = runtime.bind(policy("user.profile"));
    let Gate::Closed(Error::Config { error, .. }) = gate else {
        panic!("an ambiguous variable was applied")
    };
    assert!(error
        .message()
        .contains("`user-profile` and `user.profile`"));
}

#[test]
fn overrides_no_cache_claims_are_listed() {
    let runtime = Runtime::builder()
        .function("user-profile", Overrides::new().enabled(false))
        .function("user-proflie", Overrides::new().enabled(false))
        .read_env([
            ("STAMPEDE_FUNCTION_ORDERS_FRESH".into(), "1s".into()),
            ("STAMPEDE_FUNCTION_CARTS_FRESH".into(), "1s".into()),
            ("STAMPEDE_FUNCTION_BASKETS_FRESH".into(), "1s".into()),
        ])
        .unwrap()
        .build()
        .unwrap();
    assert_eq!(
        runtime.unclaimed_functions(),
        [
            "user-profile",
            "user-proflie",
            "STAMPEDE_FUNCTION_BASKETS_*",
            "STAMPEDE_FUNCTION_CARTS_*",
            "STAMPEDE_FUNCTION_ORDERS_*"
        ]
    );
    runtime.bind(policy("user-profile"));
    runtime.bind(policy("orders"));
    runtime.bind(policy("carts"));
    runtime.bind(policy("baskets"));
    assert_eq!(runtime.unclaimed_functions(), ["user-proflie"]);
}

#[test]
fn a_runtime_clock_reaches_its_caches() {
    let runtime = Runtime::builder().clock(Clock::tokio()).build().unwrap();
    assert!(matches!(runtime.clock(), c if format!("{c:?}").contains("Tokio")));
    assert!(format!("{:?}", Runtime::builder().build().unwrap().clock()).contains("System"));
}

#[test]
fn a_missing_file_is_an_error_naming_it() {
    let error = Runtime::builder()
        .file("/nonexistent/stampede.toml")
        .unwrap_err();
    assert_eq!(error.path(), Some(Path::new("/nonexistent/stampede.toml")));
    assert!(
        error
            .to_string()
            .starts_with("/nonexistent/stampede.toml: cannot read the stampede config file: "),
        "{error}"
    );
}

#[tokio::test]
async fn an_override_sets_how_many_hot_keys_a_cache_counts() {
    let runtime = Runtime::builder()
        .function("counted", Overrides::new().hot_keys(1))
        .build()
        .unwrap();
    let cache: crate::Cache<u64, u64> = crate::Cache::builder(policy("counted"))
        .runtime(&runtime)
        .build();
    for key in [1, 2, 3] {
        cache
            .load(key, move || async move { Ok(key) })
            .await
            .unwrap();
    }
    assert_eq!(cache.hot_keys().len(), 1, "the override's 1, not 32");
}
