//! Production Redis: TLS with a private CA and mutual TLS, a least-privilege ACL user, a
//! server whose admin commands are renamed away, a TLS cluster, a Sentinel failover, and
//! for each wrong setting one error that names it. No secret appears in any output.
//!
//! Each test starts its own servers (and certificates, with `openssl`) on free loopback
//! ports; without `redis-server` they skip loudly, and `STAMPEDE_REQUIRE_REDIS=1` makes
//! that a failure.
use crate::common::{self, bounded, eventually, AppError, REPORT};
use stampede::{Backend, Cache, Policy, Runtime};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use testkit::{Certificates, RedisCluster, RedisServer, Sentinels};

/// Each Redis call's patience: TLS handshakes on a busy machine are slow, and these tests
/// count origin calls, which a call timed out would add.
const PATIENT: &str = "2s";

/// A replica on `backend` with these backend settings (as their keys and texts).
fn replica(backend: Backend, settings: &[(&str, &str)]) -> Runtime {
    let mut builder = Runtime::builder()
        .backend(backend)
        .backend_setting("response_timeout", PATIENT)
        .unwrap()
        .backend_setting("connect_timeout", PATIENT)
        .unwrap();
    for (key, value) in settings {
        builder = builder.backend_setting(key, value).unwrap();
    }
    builder.build().unwrap()
}

type Tagged = Cache<u64, String, AppError>;

/// Key `k` is tagged `<name>:group:<k mod 2>`: a cache's tags are its own, so one
/// scenario's tag invalidation is no tag move for another's loads.
fn tagged(runtime: &Runtime, name: &str) -> Tagged {
    let policy = Policy::builder(name)
        .fresh(Duration::from_secs(60))
        .build()
        .unwrap();
    Cache::builder(policy)
        .runtime(runtime)
        .tags({
            let name = name.to_owned();
            move |key: &u64, _: &String| [format!("{name}:group:{}", key % 2)]
        })
        .build()
}

fn policy_named(name: &str) -> Policy {
    Policy::builder(name)
        .fresh(Duration::from_secs(60))
        .build()
        .unwrap()
}

/// An origin every replica shares: its n-th call answers `v<n>`.
#[derive(Clone, Default)]
struct Origin(Arc<AtomicUsize>);

impl Origin {
    fn calls(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }

    async fn load(&self, cache: &Tagged, key: u64) -> String {
        let calls = self.0.clone();
        let loaded = cache.load(key, move || async move {
            let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
            tokio::time::sleep(Duration::from_millis(30)).await;
            Ok(format!("v{n}"))
        });
        bounded(loaded).await.expect("a value")
    }

    /// Loads `key` on `cache` until it answers something else than the `retired` values
    /// (a memory copy goes when the notice that retired it arrives).
    async fn until_retired(&self, cache: &Tagged, key: u64, retired: &[String]) -> String {
        bounded(async {
            loop {
                let served = self.load(cache, key).await;
                if !retired.contains(&served) {
                    return served;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
    }
}

/// The fleet's core promises across `replicas` (tiered: each keeps memory copies): a herd
/// makes one origin call for the fleet; an invalidation on one replica reaches every
/// other's memory (only its notice can drop those copies); so does a tag's; nothing is
/// reported wrong with the settings.
///
/// The one call of the herd is the promise of a fleet whose replicas keep running. A
/// holder starved of the CPU past its beats (a busy test machine stalls a thread for
/// hundreds of milliseconds) is taken over, as the fleet guide says of a frozen replica:
/// one more origin call per takeover, which the caches count. A takeover of a holder
/// that was not silent is the simulated fleet's to catch (on simulated time nothing
/// starves, and without a fault its checker allows no second call).
async fn core_scenarios(replicas: &[Runtime], name: &str) {
    let caches: Vec<Tagged> = replicas.iter().map(|r| tagged(r, name)).collect();
    for cache in &caches {
        connected(cache).await;
    }
    let origin = Origin::default();
    let herd: Vec<_> = (caches.iter())
        .flat_map(|cache| std::iter::repeat_n(cache, 10))
        .map(|cache| {
            let (cache, origin) = (cache.clone(), origin.clone());
            tokio::spawn(async move { origin.load(&cache, 1).await })
        })
        .collect();
    let mut answers = Vec::new();
    for caller in herd {
        answers.push(bounded(caller).await.unwrap());
    }
    let stats: Vec<_> = (replicas.iter().zip(&caches))
        .map(|(replica, cache)| (replica.backend_stats(), cache.stats()))
        .collect();
    let takeovers: u64 = stats.iter().map(|(_, cache)| cache.lease_takeovers).sum();
    assert!(
        takeovers > 0 || answers.iter().all(|a| a == "v1"),
        "{name}: {answers:?} {stats:#?}"
    );
    let herd_calls = origin.calls();
    assert!(
        (1..=1 + takeovers as usize).contains(&herd_calls),
        "{name}: one origin call for the fleet, and one per takeover ({takeovers}): {herd_calls} {stats:#?}"
    );

    bounded(caches[0].invalidate(&1)).await.unwrap();
    let reload = format!("v{}", herd_calls + 1);
    assert_eq!(origin.load(&caches[0], 1).await, reload);
    for cache in &caches[1..] {
        assert_eq!(origin.until_retired(cache, 1, &answers).await, reload);
    }
    assert_eq!(
        origin.calls(),
        herd_calls + 1,
        "{name}: the others read the reload"
    );

    bounded(replicas[0].invalidate_tag(format!("{name}:group:1")))
        .await
        .unwrap();
    assert_eq!(
        origin.load(&caches[0], 1).await,
        format!("v{}", herd_calls + 2)
    );
    for cache in &caches[1..] {
        let served = origin
            .until_retired(cache, 1, std::slice::from_ref(&reload))
            .await;
        assert!(!answers.contains(&served), "{name}: {served}");
    }
    assert!(
        origin.calls() > herd_calls + 1,
        "{name}: a tag reaches every replica"
    );

    for replica in replicas {
        let stats = replica.backend_stats().expect("connected");
        assert_eq!(stats.problem, None, "{name}");
        assert!(!stats.degraded_now, "{name}");
    }
}

/// Until a load on `cache` reads the store without an error: a replica connects on its
/// first call, and on a busy machine the handshakes with a new server (with every node
/// of a new cluster, over TLS) can outlast that call's patience, which the replica then
/// answers alone, by design. Keys of its own (each new, so each is read from the store),
/// outside the scenarios' counts.
async fn connected(cache: &Tagged) {
    bounded(async {
        for key in (0..u64::MAX).rev() {
            let errors = cache.stats().backend_errors;
            let loaded = cache.load(key, || async { Ok("warm-up".to_owned()) });
            loaded.await.expect("a value");
            if cache.stats().backend_errors == errors {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

fn path(path: &std::path::Path) -> &str {
    path.to_str().expect("a UTF-8 temp path")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fleet_works_over_tls_with_a_private_ca() {
    let Some(certificates) = Certificates::generate() else {
        return;
    };
    let Some(redis) = RedisServer::start_tls(&certificates, false) else {
        return;
    };
    let ca = certificates.ca();
    let replicas: Vec<_> = (0..3)
        .map(|_| {
            replica(
                Backend::tiered(redis.tls_url()),
                &[("tls_ca_file", path(&ca))],
            )
        })
        .collect();
    core_scenarios(&replicas, "tls").await;
    // Every connection of every replica is TLS: none came in on the plain port.
    let clients = redis.cli(&["CLIENT", "LIST"]);
    let tls_port = redis
        .tls_url()
        .rsplit(':')
        .next()
        .unwrap()
        .trim_end_matches('/')
        .to_owned();
    let plain: Vec<_> = (clients.lines())
        .filter(|client| !client.contains(&format!("laddr=127.0.0.1:{tls_port} ")))
        .filter(|client| !client.contains("cmd=client|list"))
        .collect();
    assert!(plain.is_empty(), "connections not over TLS: {plain:#?}");
    assert!(
        clients.lines().count() >= 6,
        "a call and a notice connection each:\n{clients}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fleet_works_over_mutual_tls() {
    let Some(certificates) = Certificates::generate() else {
        return;
    };
    let Some(redis) = RedisServer::start_tls(&certificates, true) else {
        return;
    };
    let (ca, (cert, key)) = (certificates.ca(), certificates.client());
    let settings = [
        ("tls_ca_pem", &*std::fs::read_to_string(&ca).unwrap()),
        ("tls_cert_file", path(&cert)),
        ("tls_key_file", path(&key)),
    ];
    let replicas: Vec<_> = (0..2)
        .map(|_| replica(Backend::tiered(redis.tls_url()), &settings))
        .collect();
    core_scenarios(&replicas, "mutual-tls").await;

    // Without its certificate a replica is refused, and says what to give.
    let anonymous = replica(Backend::tiered(redis.tls_url()), &settings[..1]);
    let problem = a_problem_after_a_load(&anonymous).await;
    assert!(problem.contains("tls_cert_file"), "{problem}");
}

/// Loads once on `runtime` (answered by the origin whatever the store does) and returns
/// the problem its store reports.
async fn a_problem_after_a_load(runtime: &Runtime) -> String {
    let cache = tagged(runtime, "problem");
    let origin = Origin::default();
    assert_eq!(origin.load(&cache, 7).await, "v1", "answered all the same");
    let mut problem = None;
    bounded(async {
        loop {
            problem = runtime.backend_stats().and_then(|stats| stats.problem);
            if problem.is_some() {
                return;
            }
            // Each call may be the one that meets the setting at fault.
            origin.load(&cache, 7).await;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let stats = runtime.backend_stats().unwrap();
    assert!(stats.degraded_now, "a problem is degraded mode");
    problem.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_certificate_names_the_ca_setting() {
    let Some(certificates) = Certificates::generate() else {
        return;
    };
    let Some(redis) = RedisServer::start_tls(&certificates, false) else {
        return;
    };
    let other = certificates.other_ca();
    let runtime = replica(
        Backend::redis(redis.tls_url()),
        &[("tls_ca_file", path(&other))],
    );
    let problem = a_problem_after_a_load(&runtime).await;
    assert!(problem.contains("tls_ca_file"), "{problem}");
    assert!(problem.contains("certificate"), "{problem}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_names_the_credentials_settings() {
    let Some(redis) = RedisServer::start_with(&["--requirepass", "right"]) else {
        return;
    };
    let runtime = replica(Backend::redis(redis.url()), &[("password", "wrong")]);
    let problem = a_problem_after_a_load(&runtime).await;
    assert!(problem.contains("password_file"), "{problem}");
    assert!(
        !problem.contains("wrong"),
        "no password in the problem: {problem}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_sentinels_are_named_with_the_url_to_check() {
    let nowhere = testkit_free_port();
    let url = format!("redis+sentinel://127.0.0.1:{nowhere}/orders");
    let runtime = replica(Backend::redis(url), &[]);
    let problem = a_problem_after_a_load(&runtime).await;
    assert!(
        problem.contains("no Sentinel named the master `orders`"),
        "{problem}"
    );
    assert!(
        problem.contains(&format!("127.0.0.1:{nowhere}")),
        "{problem}"
    );
}

fn testkit_free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// The commands stampede needs, as the production guide lists them.
const MINIMAL_ACL: &[&str] = &[
    "-@all",
    "+evalsha",
    "+eval",
    "+get",
    "+mget",
    "+set",
    "+del",
    "+exists",
    "+pttl",
    "+time",
    "+publish",
    "+subscribe",
    "+unsubscribe",
    "+ping",
    "+scan",
    "+client|setname",
    "+hset",
    "+hget",
    "+hgetall",
    "+hdel",
    "+pexpire",
];

/// Creates the ACL user `name` (password `pw`) limited to stampede's keys and channels
/// and to `commands`.
fn acl_user(redis: &RedisServer, name: &str, commands: &[&str]) {
    let mut args = vec!["ACL", "SETUSER", name, "reset", "on", ">pw"];
    args.extend(["~stampede:*", "&stampede:*"]);
    args.extend(commands);
    assert_eq!(redis.cli(&args), "OK");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_with_only_the_minimal_acl_runs_every_feature() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    acl_user(&redis, "orders", MINIMAL_ACL);
    let login = [("username", "orders"), ("password", "pw")];
    let replicas: Vec<_> = (0..2)
        .map(|_| replica(Backend::tiered(redis.url()), &login))
        .collect();
    core_scenarios(&replicas, "minimal-acl").await;

    // invalidate_at, batch loads, write-through and the whole-cache invalidation.
    let policy = policy_named("versions");
    let versions: Vec<Cache<u64, (String, u64), AppError>> = (replicas.iter())
        .map(|r| {
            Cache::builder(policy.clone())
                .runtime(r)
                .source_version(|(_, version): &(String, u64)| *version)
                .build()
        })
        .collect();
    let loaded = versions[0].load(1, || async { Ok(("old".to_owned(), 1)) });
    assert_eq!(bounded(loaded).await.unwrap(), ("old".to_owned(), 1));
    bounded(versions[1].invalidate_at(&1, 2)).await.unwrap();
    let late = versions[1].load(1, || async { Ok(("new".to_owned(), 2)) });
    assert_eq!(bounded(late).await.unwrap(), ("new".to_owned(), 2));
    let pages: Vec<Cache<u64, Option<String>, AppError>> = (replicas.iter())
        .map(|r| Cache::builder(policy_named("pages")).runtime(r).build())
        .collect();
    let batch = |keys: Vec<u64>| async move {
        Ok(keys
            .into_iter()
            .map(|k| (k, format!("page {k}")))
            .collect::<HashMap<_, _>>())
    };
    let first = bounded(pages[0].load_many([1, 2], batch)).await.unwrap();
    assert_eq!(first[&2], "page 2");
    let unasked = |keys: Vec<u64>| async move {
        Ok(keys
            .into_iter()
            .map(|k| (k, format!("again {k}")))
            .collect::<HashMap<_, _>>())
    };
    let second = bounded(pages[1].load_many([1, 2, 3], unasked))
        .await
        .unwrap();
    assert_eq!(second[&1], "page 1", "read from Redis, not loaded again");
    assert_eq!(second[&3], "again 3");
    bounded(versions[0].insert(4, ("written".to_owned(), 5)))
        .await
        .unwrap();
    bounded(versions[0].invalidate_all()).await.unwrap();
    let after = versions[1].load(3, || async { Ok(("reloaded".to_owned(), 9)) });
    assert_eq!(bounded(after).await.unwrap(), ("reloaded".to_owned(), 9));
    for replica in &replicas {
        assert_eq!(replica.backend_stats().unwrap().problem, None);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_permission_is_named_at_start() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let without_publish: Vec<_> = (MINIMAL_ACL.iter().copied())
        .filter(|command| *command != "+publish")
        .collect();
    acl_user(&redis, "orders", &without_publish);
    let runtime = replica(
        Backend::tiered(redis.url()),
        &[("username", "orders"), ("password", "pw")],
    );
    let problem = a_problem_after_a_load(&runtime).await;
    assert!(
        problem.contains("publish"),
        "the command is named: {problem}"
    );
    assert!(problem.contains("minimal ACL"), "{problem}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_with_its_admin_commands_renamed_away_still_shares_everything() {
    let renamed = [
        "--rename-command",
        "INFO",
        "",
        "--rename-command",
        "CONFIG",
        "",
        "--rename-command",
        "CLIENT",
        "",
        "--rename-command",
        "KEYS",
        "",
        "--rename-command",
        "DEBUG",
        "",
    ];
    let Some(redis) = RedisServer::start_with(&renamed) else {
        return;
    };
    let replicas: Vec<_> = (0..2)
        .map(|_| replica(Backend::tiered(redis.url()), &[]))
        .collect();
    core_scenarios(&replicas, "renamed").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fleet_works_on_a_tls_cluster() {
    let Some(certificates) = Certificates::generate() else {
        return;
    };
    let Some(cluster) = RedisCluster::start_tls(&certificates) else {
        return;
    };
    let ca = certificates.ca();
    let replicas: Vec<_> = (0..2)
        .map(|_| {
            replica(
                Backend::tiered_cluster(cluster.tls_node_urls()),
                &[("tls_ca_file", path(&ca))],
            )
        })
        .collect();
    core_scenarios(&replicas, "tls-cluster").await;
}

/// A Sentinel failover under load: how long callers go without the shared store, what
/// it costs in origin calls, and that the new master refuses a publish whose read went to
/// the old one while every replica follows it (calls and notices alike).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_failover_moves_every_replica_to_the_new_master() {
    let Some(mut sentinels) = Sentinels::start() else {
        return;
    };
    let replicas: Vec<_> = (0..2)
        .map(|_| replica(Backend::tiered(sentinels.url()), &[]))
        .collect();
    core_scenarios(&replicas, "before-failover").await;

    // A load whose read (and lease) went to the old master, held until after the failover.
    let caches: Vec<Tagged> = replicas.iter().map(|r| tagged(r, "failover")).collect();
    let (release, held) = tokio::sync::oneshot::channel::<()>();
    let slow = caches[0].clone();
    let straddling = tokio::spawn(async move {
        slow.load(100, move || async move {
            let _ = held.await;
            Ok("read before the failover".to_owned())
        })
        .await
    });
    eventually(|| caches[0].stats().origin_calls == 1).await;

    let failed_over = sentinels.fail_over();
    let killed = Instant::now() - failed_over;
    // Until both replicas share again: a key one loads is found by the other.
    let origin = Origin::default();
    let mut key = 1000;
    let recovered = bounded(async {
        loop {
            key += 1;
            origin.load(&caches[0], key).await;
            let before = origin.calls();
            origin.load(&caches[1], key).await;
            if origin.calls() == before {
                return Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    release.send(()).unwrap();
    assert_eq!(
        bounded(straddling).await.unwrap().unwrap(),
        "read before the failover",
        "its callers are answered"
    );
    // Not stored on the new master: the other replica loads for itself.
    let fresh = Origin::default();
    assert_eq!(fresh.load(&caches[1], 100).await, "v1");
    assert_eq!(fresh.calls(), 1, "the old master's read was not published");

    // Notices follow too: an invalidation on one replica reaches the other's copy.
    core_scenarios(&replicas, "after-failover").await;
    println!(
        "{REPORT}failover: the Sentinels named the new master {:?} after the kill; replicas shared again {:?} after it, {} keys loaded twice meanwhile",
        failed_over,
        recovered - killed,
        key - 1000 - 1
    );
    assert!(sentinels.master_port() == Some(sentinels.replica().port()));
}

/// Writes what every output of the store's settings and failures says, in a process of
/// its own with a subscriber that prints every event and span field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by no_secret_appears_in_any_output, in a process of its own"]
async fn child_prints_every_output_with_a_secret() {
    let secret = std::env::var("SECRET_UNDER_TEST").unwrap();
    let report = |what: &str, text: String| println!("{REPORT}{what}: {text}");
    // A server whose password is not ours, a password file, a bad URL, a Sentinel URL.
    let redis = RedisServer::start_with(&["--requirepass", "other"]).expect("redis-server");
    let url = redis
        .url()
        .replace("redis://", &format!("redis://app:{secret}@"));
    let dir = tempfile_dir();
    let file = dir.join("password");
    std::fs::write(&file, format!("{secret}\n")).unwrap();
    let builder = Runtime::builder()
        .backend(Backend::tiered(url.clone()))
        .backend_setting("password_file", path(&file))
        .unwrap();
    report("builder", format!("{builder:?}"));
    let runtime = builder.build().unwrap();
    report("runtime", format!("{runtime:?}"));
    report(
        "backend",
        format!("{} {:?}", runtime.backend(), runtime.backend()),
    );
    let problem = a_problem_after_a_load(&runtime).await;
    report("problem", problem);
    report("stats", format!("{:?}", runtime.backend_stats()));
    let cache = tagged(&runtime, "secret");
    report("invalidate", format!("{:?}", cache.invalidate(&1).await));
    report(
        "invalidate_tag",
        format!("{:?}", runtime.invalidate_tag("t").await),
    );
    for bad in [
        format!("redis://app:{secret}@cache:notaport"),
        format!("rediss+sentinel://app:{secret}@/master"),
        format!("http://app:{secret}@cache"),
    ] {
        let refused = Runtime::builder().backend(Backend::redis(bad)).build();
        report(
            "refused",
            format!("{:?} / {}", refused, refused.as_ref().unwrap_err()),
        );
    }
    let sentinel = format!(
        "redis+sentinel://app:{secret}@127.0.0.1:{}/m",
        testkit_free_port()
    );
    let runtime = replica(Backend::redis(sentinel), &[("sentinel_password", &secret)]);
    report("sentinel", a_problem_after_a_load(&runtime).await);
    report(
        "sentinel runtime",
        format!("{runtime:?} {:?}", runtime.backend_stats()),
    );
}

fn tempfile_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("stampede-secret-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn no_secret_appears_in_any_output() {
    if RedisServer::start().is_none() {
        return;
    }
    let secret = "s3cr3t-Zq7";
    let lines = common::run_child(
        module_path!(),
        "child_prints_every_output_with_a_secret",
        &[
            ("SECRET_UNDER_TEST", secret.into()),
            (crate::PRINT_LOGS, "1".into()),
        ],
    );
    let leaks: Vec<_> = lines.iter().filter(|line| line.contains(secret)).collect();
    assert!(leaks.is_empty(), "secrets printed: {leaks:#?}");
    // The outputs were there to look at: the problems, the refusals, the logs.
    let said = |text: &str| lines.iter().any(|line| line.contains(text));
    assert!(
        said("problem: Redis refused this replica's credentials"),
        "{lines:#?}"
    );
    assert!(said("refused: Err("), "{lines:#?}");
    assert!(said("log ERROR stampede"), "{lines:#?}");
    assert!(said("app:***@"), "{lines:#?}");
}
