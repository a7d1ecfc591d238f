use super::*;

#[test]
fn out_of_range_settings_are_refused_with_their_name() {
    let base = || Policy::builder("p").fresh(Duration::from_secs(1));
    let cases = [
        (
            base().jitter(0.6),
            "jitter must be a fraction of fresh from 0.0 to 0.5",
        ),
        (
            base().jitter(f64::NAN),
            "jitter must be a fraction of fresh",
        ),
        (
            base().xfetch(-1.0),
            "xfetch_beta must be a finite number above zero",
        ),
        (
            base().xfetch(f64::INFINITY),
            "xfetch_beta must be a finite number",
        ),
        (
            base().timeout(Duration::ZERO),
            "timeout must be greater than zero",
        ),
        (base().capacity(0), "capacity must be at least 1"),
        (
            base().capacity(u64::MAX),
            "capacity must be at most 1000000000",
        ),
        (
            base().lease(Duration::ZERO),
            "lease must be greater than zero",
        ),
        (base().admission(""), "the admission name must not be empty"),
        (base().hot_keys(1_025), "hot_keys must be at most 1024"),
    ];
    for (builder, message) in cases {
        let error = builder.build().unwrap_err().to_string();
        assert!(
            error.starts_with(&format!("policy `p`: {message}")),
            "{error}"
        );
    }
    assert!(base().jitter(0.5).xfetch(1.0).build().is_ok());
}

#[test]
fn xfetch_false_and_a_beta_of_zero_turn_xfetch_off() {
    let base = || Policy::builder("p").fresh(Duration::from_secs(1));
    let beta = |builder: PolicyBuilder| builder.build().unwrap().xfetch_beta();
    assert_eq!(beta(base().xfetch(2.0)), Some(2.0));
    assert_eq!(beta(base().xfetch(true)), Some(1.0));
    assert_eq!(beta(base().xfetch(XFetch::Beta(0.5))), Some(0.5));
    assert_eq!(beta(base().xfetch(1.0).xfetch(false)), None);
    assert_eq!(beta(base().xfetch(1.0).xfetch(0.0)), None);
    assert_eq!(beta(base().xfetch(1.0).xfetch(XFetch::Beta(0.0))), None);
    assert_eq!(beta(base().xfetch(1.0).xfetch(XFetch::Off)), None);
}

#[test]
fn a_policy_whose_deadlines_overflow_is_refused_at_build() {
    let max = || Policy::builder("p").fresh(Duration::MAX);
    assert_eq!(
        max().build().unwrap_err().to_string(),
        "policy `p`: fresh must be at most 36500d"
    );
    let day = Duration::from_secs(86_400);
    let long = || Policy::builder("p").fresh(day * 30_000);
    assert_eq!(
        long().jitter(0.5).build().unwrap_err().to_string(),
        "policy `p`: fresh × (1 + jitter) plus the longer of stale and stale_if_error must be at most 36500d"
    );
    assert!(long().stale_if_error(day * 6_501).build().is_err());
    assert!(long().stale(day * 6_500).build().is_ok());
    assert!(max().build().is_err(), "never a policy a cache cannot hold");
}

#[test]
fn the_longest_policy_builds_a_cache() {
    let day = Duration::from_secs(86_400);
    let policy = Policy::builder("p")
        .fresh(day * 20_000)
        .jitter(0.5)
        .stale(day * 6_500)
        .build()
        .unwrap();
    let cache: crate::Cache<u32, u32> = crate::Cache::builder(policy)
        .runtime(&crate::Runtime::builder().build().unwrap())
        .build();
    assert_eq!(cache.policy().fresh(), day * 20_000);
}
