//! The process's runtime: installed once, or read from `STAMPEDE_CONFIG` and `STAMPEDE_*`
//! on first use. Process-wide state, so each scenario runs in a process of its own: the
//! tests re-run this binary with one `child_*` test selected and their own environment,
//! and read what it reports. The `child_*` tests are ignored in a normal run, and share
//! the process's runtime if run together (`--include-ignored`): run them through their
//! parents.
use crate::common;

use common::{run_child, AppError, ConfigFile, Origin, REPORT};
use stampede::{Cache, CacheBuilder, Error, Overrides, Policy, Runtime};
use std::ffi::OsString;
use std::time::Duration;

macro_rules! report {
    ($($arg:tt)*) => {
        println!("{REPORT}{}", format_args!($($arg)*))
    };
}

fn config(file: &ConfigFile) -> (&'static str, OsString) {
    ("STAMPEDE_CONFIG", file.0.clone().into_os_string())
}

/// The cache of a function named `user-profile` that is fresh for a minute, built as the
/// `#[cached]` attribute builds one: without a runtime of its own, so it binds the
/// process's.
fn user_profile() -> Cache<u32, usize, AppError> {
    let policy = Policy::builder("user-profile")
        .fresh(Duration::from_secs(60))
        .build()
        .unwrap();
    CacheBuilder::new(policy, AppError::from).build()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
#[ignore = "a child process of the tests in this file"]
fn child_calls_user_profile_three_times() {
    let cache = user_profile();
    let origin = Origin::default();
    runtime().block_on(async {
        for pause in [Duration::from_millis(600), Duration::ZERO, Duration::ZERO] {
            let origin = origin.clone();
            let got = cache
                .load(1, move || async move {
                    Ok(origin.slow(Duration::from_millis(1)).await)
                })
                .await;
            assert!(got.is_ok(), "{got:?}");
            tokio::time::sleep(pause).await;
        }
    });
    report!("origin_calls={}", origin.calls());
    report!("fresh={:?}", cache.policy().fresh());
}

#[test]
fn an_unchanged_binary_follows_the_file_stampede_config_names() {
    assert_eq!(
        run_child(module_path!(), "child_calls_user_profile_three_times", &[]),
        ["origin_calls=1", "fresh=60s"],
        "nothing set: the compiled settings on the memory backend"
    );
    let short = ConfigFile::new("short", "[functions.\"user-profile\"]\nfresh = \"300ms\"\n");
    assert_eq!(
        run_child(
            module_path!(),
            "child_calls_user_profile_three_times",
            &[config(&short)]
        ),
        ["origin_calls=2", "fresh=300ms"],
        "fresh for 300 ms: expired during the 600 ms pause, then fresh again"
    );
    let off = ConfigFile::new("off", "[functions.\"user-profile\"]\nenabled = false\n");
    assert_eq!(
        run_child(
            module_path!(),
            "child_calls_user_profile_three_times",
            &[config(&off)]
        ),
        ["origin_calls=3", "fresh=60s"],
        "caching off: every call reaches the origin"
    );
}

#[test]
fn stampede_variables_override_the_file() {
    let short = ConfigFile::new("env", "[functions.\"user-profile\"]\nfresh = \"300ms\"\n");
    let reports = run_child(
        module_path!(),
        "child_calls_user_profile_three_times",
        &[
            config(&short),
            ("STAMPEDE_FUNCTION_USER_PROFILE_FRESH", "1h".into()),
        ],
    );
    assert_eq!(reports, ["origin_calls=1", "fresh=3600s"]);
}

#[test]
#[ignore = "a child process of the tests in this file"]
fn child_reports_its_configuration_error() {
    let error = Runtime::global().expect_err("the configuration is invalid");
    report!("global={error}");
    let cache = user_profile();
    let origin = Origin::default();
    let o = origin.clone();
    let got =
        runtime().block_on(cache.load(1, move || async move { Ok(o.slow(Duration::ZERO).await) }));
    match got {
        Err(AppError::Cache(Error::Config {
            cache,
            error: on_call,
        })) => {
            assert_eq!((&*cache, &on_call), ("user-profile", &error));
        }
        other => panic!("expected a configuration error, got {other:?}"),
    }
    assert_eq!(origin.calls(), 0);
    report!("origin_calls={}", origin.calls());
}

#[test]
fn a_bad_file_named_by_stampede_config_fails_calls_with_its_location() {
    let bad = ConfigFile::new(
        "bad",
        "[admission.db]\nlimit = 4\n[functions.\"user-profile\"]\nfersh = \"30s\"\n",
    );
    let reports = run_child(
        module_path!(),
        "child_reports_its_configuration_error",
        &[config(&bad)],
    );
    let expected = format!(
        "global={}:4:1: `functions.user-profile.fersh`: unknown field `fersh`",
        bad.0.display()
    );
    assert!(reports[0].starts_with(&expected), "{reports:?}");
    assert_eq!(reports[1], "origin_calls=0");
}

#[test]
fn a_bad_variable_fails_calls_naming_it() {
    let reports = run_child(
        module_path!(),
        "child_reports_its_configuration_error",
        &[("STAMPEDE_ADMISSION_DB_LIMIT", "none".into())],
    );
    assert_eq!(
        reports[0],
        "global=environment variable `STAMPEDE_ADMISSION_DB_LIMIT`: `none` is not a whole number"
    );
}

#[test]
fn a_redis_url_without_a_shared_backend_kind_is_refused_not_ignored() {
    let reports = run_child(
        module_path!(),
        "child_reports_its_configuration_error",
        &[
            ("STAMPEDE_REDIS_URL", "redis://127.0.0.1:6379".into()),
            ("STAMPEDE_REDIS_PREFIX", "shop".into()),
        ],
    );
    assert_eq!(
        reports[0],
        "global=environment variable `STAMPEDE_REDIS_URL`: a Redis `url` with the \"memory\" kind would be ignored; set `kind = \"redis\"` or `\"tiered\"`"
    );
    assert_eq!(reports[1], "origin_calls=0");
}

#[test]
#[ignore = "a child process of the tests in this file"]
fn child_installs_then_builds() {
    let installed = Runtime::builder()
        .admission("db", 2, Duration::from_millis(100))
        .function(
            "user-profile",
            Overrides::new().fresh(Duration::from_secs(5)),
        )
        .install()
        .expect("the first install");
    let cache = user_profile();
    assert_eq!(cache.policy().fresh(), Duration::from_secs(5));
    report!("fresh={:?}", cache.policy().fresh());
    report!("global_db={:?}", Runtime::global().unwrap().admission("db"));
    assert_eq!(
        installed.admission("db"),
        Some((2, Duration::from_millis(100)))
    );
    let again = Runtime::builder().install().expect_err("a second install");
    report!("again={again}");
}

#[test]
fn an_installed_runtime_serves_later_caches_and_cannot_be_replaced() {
    assert_eq!(
        run_child(module_path!(), "child_installs_then_builds", &[]),
        [
            "fresh=5s",
            "global_db=Some((2, 100ms))",
            "again=stampede runtime: a runtime was already installed in this process; install it once, at startup",
        ]
    );
}

#[test]
#[ignore = "a child process of the tests in this file"]
fn child_builds_then_installs() {
    let cache = user_profile();
    let late = Runtime::builder()
        .function(
            "user-profile",
            Overrides::new().fresh(Duration::from_secs(5)),
        )
        .install()
        .expect_err("an install after first use");
    report!("late={late}");
    report!("fresh={:?}", cache.policy().fresh());
}

#[test]
fn installing_after_first_use_is_an_error() {
    let reports = run_child(module_path!(), "child_builds_then_installs", &[]);
    assert!(
        reports[0].starts_with(
            "late=stampede runtime: a cache was built before this install and took its settings from the environment"
        ),
        "{reports:?}"
    );
    assert_eq!(
        reports[1], "fresh=60s",
        "the cache kept what it was built with"
    );
}
