//! The TOML file: every bad file is refused with its path, the key and the line; a good
//! one's overrides change the cache of that name. Runtimes here are explicit, so nothing
//! in this binary touches the process's runtime.
use crate::common;

use common::{bounded, AppError, ConfigFile, Origin};
use stampede::{Cache, Clock, Overrides, Policy, Runtime};
use std::time::Duration;

const MS: Duration = Duration::from_millis(1);

struct Bad {
    name: &'static str,
    text: &'static str,
    line: usize,
    key: Option<&'static str>,
    says: &'static str,
}

const BAD_FILES: &[Bad] = &[
    Bad {
        name: "unknown-function-key",
        text: "[functions.\"user-profile\"]\nfresh = \"30s\"\nfersh = \"10s\"\n",
        line: 3,
        key: Some("functions.user-profile.fersh"),
        says: "unknown field `fersh`, expected one of `fresh`",
    },
    Bad {
        name: "unknown-table",
        text: "[backends]\nkind = \"memory\"\n",
        line: 1,
        key: Some("backends"),
        says: "unknown field `backends`, expected one of `backend`, `admission`, `functions`",
    },
    Bad {
        name: "unknown-admission-key",
        text: "[admission.db]\nlimit = 4\nqueue = \"1s\"\n",
        line: 3,
        key: Some("admission.db.queue"),
        says: "unknown field `queue`, expected one of `limit`, `queue_timeout`, `reserved_high`, `low_queue`, `per_group`, `scope`, `local_limit`, `permit_ttl`",
    },
    Bad {
        name: "bad-duration",
        text: "[functions.\"user-profile\"]\nfresh = \"30x\"\n",
        line: 2,
        key: Some("functions.user-profile.fresh"),
        says: "`30x` is not a duration: `x` is not a unit",
    },
    Bad {
        name: "duration-without-unit",
        text: "[functions.f]\nstale = \"30\"\n",
        line: 2,
        key: Some("functions.f.stale"),
        says: "`30` is not a duration: the unit is missing (as in \"30s\"); write whole numbers with a unit",
    },
    Bad {
        name: "duration-as-number",
        text: "[functions.f]\n\ntimeout = 30\n",
        line: 3,
        key: Some("functions.f.timeout"),
        says: "invalid type: integer `30`, expected a duration string like \"500ms\", \"30s\" or \"1m 30s\"",
    },
    Bad {
        name: "zero-fresh",
        text: "[functions.f]\nfresh = \"0s\"\n",
        line: 2,
        key: Some("functions.f.fresh"),
        says: "fresh must be greater than zero",
    },
    Bad {
        name: "jitter-out-of-range",
        text: "[functions.f]\nfresh = \"1s\"\njitter = 0.9\n",
        line: 3,
        key: Some("functions.f.jitter"),
        says: "jitter must be a fraction of fresh from 0.0 to 0.5 (0.15 means ±15 %), not 0.9",
    },
    Bad {
        name: "limit-out-of-range",
        text: "[admission.db]\nlimit = 0\n",
        line: 2,
        key: Some("admission.db.limit"),
        says: "limit must be at least 1",
    },
    Bad {
        name: "negative-capacity",
        text: "[functions.f]\ncapacity = -5\n",
        line: 2,
        key: Some("functions.f.capacity"),
        says: "-5 is below zero; write a whole number of at least 1",
    },
    Bad {
        name: "negative-beta",
        text: "[functions.f]\nxfetch_beta = -1.0\n",
        line: 2,
        key: Some("functions.f.xfetch_beta"),
        says: "β must be a finite number above zero (1.0 is the usual choice), or 0 to turn XFetch off, not -1",
    },
    Bad {
        name: "xfetch-not-a-switch",
        text: "[functions.f]\nfresh = \"1s\"\nxfetch = \"sometimes\"\n",
        line: 3,
        key: Some("functions.f.xfetch"),
        says: "expected `true`, `false` or β, a number (0 turns XFetch off)",
    },
    Bad {
        name: "enabled-not-a-boolean",
        text: "[functions.f]\nenabled = \"no\"\n",
        line: 2,
        key: Some("functions.f.enabled"),
        says: "invalid type: string \"no\", expected a boolean",
    },
    Bad {
        name: "unknown-backend",
        text: "# caches\n[backend]\nkind = \"memcached\"\n",
        line: 3,
        key: Some("backend.kind"),
        says: "unknown variant `memcached`, expected one of `memory`, `redis`, `tiered`",
    },
    Bad {
        name: "redis-backend-without-url",
        text: "[backend]\nkind = \"redis\"\n",
        line: 2,
        key: Some("backend.kind"),
        says: "backend kind `redis` needs a `url` such as \"redis://127.0.0.1:6379\"",
    },
    Bad {
        name: "tiered-backend-without-url",
        text: "[backend]\nkind = \"tiered\"\n",
        line: 2,
        key: Some("backend.kind"),
        says: "backend kind `tiered` needs a `url` such as \"redis://127.0.0.1:6379\"",
    },
    Bad {
        name: "undefined-admission",
        text: "[admission.db]\nlimit = 4\n\n[functions.\"user-profile\"]\nadmission = \"dbb\"\n",
        line: 5,
        key: Some("functions.user-profile.admission"),
        says: "admission `dbb` is not defined (add an `[admission.dbb]` table with a `limit`)",
    },
    Bad {
        name: "admission-without-limit",
        text: "[admission.db]\nqueue_timeout = \"1s\"\n",
        line: 1,
        key: Some("admission.db"),
        says: "admission `db` has no `limit`",
    },
    Bad {
        name: "capacity-too-large",
        text: "[functions.f]\ncapacity = 5_000_000_000\n",
        line: 2,
        key: Some("functions.f.capacity"),
        says: "capacity must be at most 1000000000",
    },
    Bad {
        name: "zero-lease",
        text: "[functions.f]\nlease = \"0s\"\n",
        line: 2,
        key: Some("functions.f.lease"),
        says: "lease must be greater than zero",
    },
    Bad {
        name: "duration-with-a-fraction",
        text: "[functions.f]\nstale = \"1.5s\"\n",
        line: 2,
        key: Some("functions.f.stale"),
        says: "`1.5s` is not a duration: `.` is not a unit",
    },
    Bad {
        name: "names-one-variable-cannot-tell-apart",
        text: "[functions.\"user-profile\"]\nenabled = false\n[functions.user_profile]\nenabled = true\n",
        line: 3,
        key: Some("functions.user_profile"),
        says: "the functions `user-profile` and `user_profile` are both `USER_PROFILE` in environment variables",
    },
    Bad {
        name: "redis-url-with-memory-kind",
        text: "[backend]\nprefix = \"shop\"\nurl = \"redis://127.0.0.1:6379\"\n",
        line: 3,
        key: Some("backend.url"),
        says: "a Redis `url` with the \"memory\" kind would be ignored; set `kind = \"redis\"` or `\"tiered\"`",
    },
    Bad {
        name: "zero-response-timeout",
        text: "[backend]\nresponse_timeout = \"0ms\"\n",
        line: 2,
        key: Some("backend.response_timeout"),
        says: "response_timeout must be greater than zero",
    },
    Bad {
        name: "unknown-backend-key",
        text: "[backend]\nkind = \"memory\"\nprefx = \"shop\"\n",
        line: 3,
        key: Some("backend.prefx"),
        says: "unknown field `prefx`, expected one of `kind`, `url`, `nodes`, `prefix`",
    },
    Bad {
        name: "reserved-all-permits",
        text: "[admission.db]\nlimit = 2\nreserved_high = 2\n",
        line: 3,
        key: Some("admission.db.reserved_high"),
        says: "reserved_high must be below the limit (2)",
    },
    Bad {
        name: "low-queue-zero",
        text: "[admission.db]\nlimit = 2\nlow_queue = 0\n",
        line: 3,
        key: Some("admission.db.low_queue"),
        says: "low_queue must be at least 1",
    },
    Bad {
        name: "per-group-zero",
        text: "[admission.db]\nlimit = 2\nper_group = 0\n",
        line: 3,
        key: Some("admission.db.per_group"),
        says: "per_group must be at least 1",
    },
    Bad {
        name: "per-group-above-limit",
        text: "[admission.db]\nlimit = 2\nper_group = 3\n",
        line: 3,
        key: Some("admission.db.per_group"),
        says: "per_group must be at most the limit (2)",
    },
    Bad {
        name: "unknown-scope",
        text: "[admission.db]\nlimit = 2\nscope = \"global\"\n",
        line: 3,
        key: Some("admission.db.scope"),
        says: "unknown variant `global`, expected `replica` or `fleet`",
    },
    Bad {
        name: "local-limit-of-a-replica-admission",
        text: "[admission.db]\nlimit = 8\nlocal_limit = 2\n",
        line: 3,
        key: Some("admission.db.local_limit"),
        says: "local_limit applies to a fleet-wide admission only: add scope = \"fleet\"",
    },
    Bad {
        name: "local-limit-above-limit",
        text: "[admission.db]\nlimit = 8\nscope = \"fleet\"\nlocal_limit = 9\n",
        line: 4,
        key: Some("admission.db.local_limit"),
        says: "local_limit must be at most the limit (8)",
    },
    Bad {
        name: "permit-ttl-too-short",
        text: "[admission.db]\nlimit = 8\nscope = \"fleet\"\npermit_ttl = \"50ms\"\n",
        line: 4,
        key: Some("admission.db.permit_ttl"),
        says: "permit_ttl must be at least 1s",
    },
    Bad {
        name: "unknown-priority",
        text: "[functions.reports]\npriority = \"urgent\"\n",
        line: 2,
        key: Some("functions.reports.priority"),
        says: "unknown variant `urgent`, expected one of `low`, `normal`, `high`",
    },
    Bad {
        name: "not-toml",
        text: "[functions.f]\nfresh = \"30s\n",
        line: 2,
        key: None,
        says: "invalid basic string",
    },
];

#[test]
fn bad_config_files_are_refused_with_the_file_key_and_line() {
    for bad in BAD_FILES {
        let file = ConfigFile::new(bad.name, bad.text);
        let error = Runtime::builder()
            .file(&file.0)
            .and_then(|builder| builder.build())
            .expect_err(bad.name);
        let message = error.to_string();
        assert_eq!(error.path(), Some(file.0.as_path()), "{}", bad.name);
        assert_eq!(error.line(), Some(bad.line), "{}: {message}", bad.name);
        assert_eq!(error.key(), bad.key, "{}: {message}", bad.name);
        let location = format!("{}:{}:", file.0.display(), bad.line);
        assert!(message.starts_with(&location), "{}: {message}", bad.name);
        if let Some(key) = bad.key {
            assert!(
                message.contains(&format!("`{key}`: ")),
                "{}: {message}",
                bad.name
            );
        }
        assert!(message.contains(bad.says), "{}: {message}", bad.name);
    }
}

#[test]
fn the_documented_example_file_is_accepted() {
    let file = ConfigFile::new(
        "documented",
        r#"
[backend]
kind = "memory"                 # or "redis" / "tiered" with a `url`
[admission.db]
limit = 20
queue_timeout = "500ms"
[functions."user-profile"]      # keyed by the attribute's `name`
fresh = "30s"
"#,
    );
    let runtime = Runtime::builder().file(&file.0).unwrap().build().unwrap();
    assert_eq!(runtime.admission("db"), Some((20, 500 * MS)));
    assert_eq!(runtime.backend(), stampede::Backend::Memory);
}

async fn two_loads_150ms_apart(runtime: &Runtime) -> (usize, Duration) {
    let policy = Policy::builder("user-profile")
        .fresh(Duration::from_secs(60))
        .build()
        .unwrap();
    let cache: Cache<u32, usize, AppError> = Cache::builder(policy)
        .clock(Clock::tokio())
        .runtime(runtime)
        .build();
    let origin = Origin::default();
    for _ in 0..2 {
        let origin = origin.clone();
        bounded(cache.load(1, move || async move { Ok(origin.slow(MS).await) }))
            .await
            .unwrap();
        tokio::time::sleep(150 * MS).await;
    }
    (origin.calls(), cache.policy().fresh())
}

#[tokio::test(start_paused = true)]
async fn a_files_override_changes_the_cache_of_that_name() {
    let file = ConfigFile::new(
        "override",
        "[functions.\"user-profile\"]\nfresh = \"100ms\"\n",
    );
    let configured = Runtime::builder().file(&file.0).unwrap().build().unwrap();
    let plain = Runtime::builder().build().unwrap();
    assert_eq!(
        two_loads_150ms_apart(&plain).await,
        (1, Duration::from_secs(60)),
        "compiled: fresh for a minute"
    );
    assert_eq!(
        two_loads_150ms_apart(&configured).await,
        (2, 100 * MS),
        "overridden: expired between the loads"
    );
}

#[tokio::test(start_paused = true)]
async fn a_files_durations_read_the_attributes_grammar() {
    let file = ConfigFile::new(
        "grammar",
        "[functions.\"user-profile\"]\nfresh = \"1h 1m\"\nstale = \"1_500ms\"\nload_timeout = \"2s\"\n",
    );
    let runtime = Runtime::builder().file(&file.0).unwrap().build().unwrap();
    let policy = Policy::builder("user-profile")
        .fresh(Duration::from_secs(60))
        .build()
        .unwrap();
    let cache: Cache<u32, u32> = Cache::builder(policy).runtime(&runtime).build();
    assert_eq!(cache.policy().fresh(), Duration::from_secs(3_660));
    assert_eq!(cache.policy().stale(), 1_500 * MS);
    assert_eq!(cache.policy().load_timeout(), Some(Duration::from_secs(2)));
}

/// An admission's priority shares and a function's priority, from the file.
#[tokio::test(start_paused = true)]
async fn the_file_sets_an_admissions_shares_and_a_functions_priority() {
    let file = ConfigFile::new(
        "priorities",
        "[admission.db]\nlimit = 3\nreserved_high = 1\nlow_queue = 1\n[functions.reports]\npriority = \"low\"\n",
    );
    let runtime = Runtime::builder().file(&file.0).unwrap().build().unwrap();
    let policy = Policy::builder("reports")
        .fresh(Duration::from_secs(60))
        .admission("db")
        .build()
        .unwrap();
    let reports: Cache<u32, u32> = Cache::builder(policy).runtime(&runtime).build();
    assert_eq!(reports.policy().priority(), stampede::Priority::Low);
    // Two shared permits held, one load queued: the next low-priority load is shed at
    // once (low loads never take the reserved permit, so it does not run).
    let slow = |key: u32| {
        let reports = reports.clone();
        tokio::spawn(async move {
            reports
                .load(key, move || async move {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    Ok::<_, stampede::Error>(key)
                })
                .await
        })
    };
    let running = [slow(1), slow(2), slow(3)];
    tokio::time::sleep(Duration::from_millis(1)).await;
    let shed = reports.load(4, || async { Ok(4) }).await;
    assert!(
        matches!(shed, Err(stampede::Error::Overloaded { .. })),
        "{shed:?}"
    );
    for load in running {
        assert!(load.await.unwrap().is_ok());
    }
    let stats = reports.stats();
    assert_eq!((stats.admitted, stats.shed, stats.shed_early), (3, 1, 1));
}

/// `xfetch = false` and `xfetch_beta = 0` in the file, and `Overrides::xfetch(false)` in
/// code, each turn off the XFetch a cache was built with.
#[test]
fn the_file_and_the_code_turn_xfetch_off() {
    let beta_of = |runtime: &Runtime| {
        let policy = Policy::builder("prices")
            .fresh(Duration::from_secs(60))
            .xfetch(1.0)
            .build()
            .unwrap();
        let cache: Cache<u32, u32> = Cache::builder(policy).runtime(runtime).build();
        cache.policy().xfetch_beta()
    };
    let from_file = |name: &str, text: &str| {
        let file = ConfigFile::new(name, text);
        beta_of(&Runtime::builder().file(&file.0).unwrap().build().unwrap())
    };
    assert_eq!(beta_of(&Runtime::builder().build().unwrap()), Some(1.0));
    assert_eq!(
        from_file("xfetch-false", "[functions.prices]\nxfetch = false\n"),
        None
    );
    assert_eq!(
        from_file("beta-zero", "[functions.prices]\nxfetch_beta = 0\n"),
        None
    );
    assert_eq!(
        from_file("beta-two", "[functions.prices]\nxfetch = 2.0\n"),
        Some(2.0)
    );
    let in_code = Runtime::builder()
        .function("prices", Overrides::new().xfetch(false))
        .build()
        .unwrap();
    assert_eq!(beta_of(&in_code), None);
    let refused = Runtime::builder()
        .function("prices", Overrides::new().xfetch(f64::NAN))
        .build()
        .unwrap_err();
    assert_eq!(refused.key(), Some("functions.prices.xfetch"));
    assert!(
        refused
            .message()
            .contains("or 0 to turn XFetch off, not NaN"),
        "{refused}"
    );
}

#[test]
fn entries_no_cache_claims_are_listed_until_one_does() {
    let file = ConfigFile::new(
        "unclaimed",
        "[functions.\"user-profile\"]\nfresh = \"1s\"\n[functions.\"user-proflie\"]\nfresh = \"1s\"\n",
    );
    let runtime = Runtime::builder().file(&file.0).unwrap().build().unwrap();
    assert_eq!(
        runtime.unclaimed_functions(),
        ["user-profile", "user-proflie"]
    );
    let policy = Policy::builder("user-profile")
        .fresh(Duration::from_secs(60))
        .build()
        .unwrap();
    let _profiles: Cache<u32, u32> = Cache::builder(policy).runtime(&runtime).build();
    assert_eq!(
        runtime.unclaimed_functions(),
        ["user-proflie"],
        "the typo is left"
    );
}
