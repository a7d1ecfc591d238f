//! Acknowledged invalidations on the tiered backend: once `stampede::acknowledged(…)`
//! returns, no replica serves the retired value (read-your-writes across replicas), even
//! while notice subscriptions are being killed; what one costs at 2, 8 and 64 replicas;
//! and a replica that stops hearing its notices (past its hearing lease) serves no copy.
//! Against a real `redis-server` each test starts for itself (skipped, loudly, without
//! one; `STAMPEDE_REQUIRE_REDIS=1` makes that a failure).
use crate::common;

use common::{bounded, eventually, AppError, ConfigFile, PATIENT_REDIS};
use stampede::{Backend, Cache, Policy, Runtime};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};
use testkit::RedisServer;

/// Each replica's hearing lease (`[backend] hearing_lease`).
const HEARING_LEASE: Duration = Duration::from_millis(200);

/// Read-your-writes pairs per configuration and mode, unless `STAMPEDE_RYW_PAIRS` says.
const DEFAULT_PAIRS: usize = 150;

/// One test of this file at a time: each runs up to 64 replicas, or times invalidations,
/// and two of them side by side on two cores would measure each other.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Takes [`ONE_AT_A_TIME`], bounded by the other tests' whole run (theirs are bounded).
async fn alone() -> tokio::sync::MutexGuard<'static, ()> {
    tokio::time::timeout(Duration::from_secs(120), ONE_AT_A_TIME.lock())
        .await
        .expect("the other tests of this file ended")
}

/// A tiered replica like [`common::patient_replica`], waiting `response` for each Redis
/// call (and for connecting), with a hearing lease of [`HEARING_LEASE`].
fn replica(url: String, response: Duration) -> Runtime {
    static FILES: AtomicUsize = AtomicUsize::new(0);
    let n = FILES.fetch_add(1, Ordering::Relaxed);
    let (millis, lease) = (response.as_millis(), HEARING_LEASE.as_millis());
    let file = ConfigFile::new(
        &format!("read-your-writes-{n}"),
        &format!(
            "[backend]\nresponse_timeout = \"{millis}ms\"\nconnect_timeout = \"{millis}ms\"\nhearing_lease = \"{lease}ms\"\n"
        ),
    );
    Runtime::builder()
        .file(&file.0)
        .expect("the replica's file parses")
        .backend(Backend::tiered(url))
        .build()
        .expect("a tiered backend with its url")
}

/// Every replica's cache, of one policy name.
fn cache(runtime: &Runtime, name: &str) -> Cache<u64, u64, AppError> {
    let policy = Policy::builder(name)
        .fresh(Duration::from_secs(60))
        .build()
        .unwrap();
    Cache::builder(policy).runtime(runtime).build()
}

/// The database: a version that the origin reads, and how many times it was read.
#[derive(Clone, Default)]
struct Database {
    version: Arc<AtomicU64>,
    calls: Arc<AtomicUsize>,
}

impl Database {
    /// The new version.
    fn write(&self) -> u64 {
        self.version.fetch_add(1, Ordering::SeqCst) + 1
    }

    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    /// `cache`'s load of `key` through the database (the current version).
    async fn load(&self, cache: &Cache<u64, u64, AppError>, key: u64) -> u64 {
        let database = self.clone();
        let origin = move || async move {
            database.calls.fetch_add(1, Ordering::SeqCst);
            Ok(database.version.load(Ordering::SeqCst))
        };
        bounded(cache.load(key, origin)).await.unwrap()
    }
}

/// The invalidating call: acknowledged, or plain (eventual).
async fn invalidate(cache: &Cache<u64, u64, AppError>, key: u64, acknowledged: bool) {
    let invalidation = cache.invalidate(&key);
    let answer = if acknowledged {
        bounded(stampede::acknowledged(invalidation)).await
    } else {
        bounded(invalidation).await
    };
    answer.unwrap();
}

/// The invalidating replica's counts: acknowledged by every receiver, and waited out.
fn acknowledgements(runtime: &Runtime) -> (u64, u64) {
    let stats = runtime.backend_stats().unwrap();
    (
        stats.acknowledged_writes,
        stats.acknowledged_writes_waited_out,
    )
}

/// Loads a probe key on each replica (which connects it), then waits until every one is
/// subscribed and hears its notices.
async fn hearing(replicas: &[Runtime], caches: &[Cache<u64, u64, AppError>], db: &Database) {
    for cache in caches {
        db.load(cache, u64::MAX).await;
    }
    eventually(|| {
        replicas.iter().all(|runtime| {
            runtime
                .backend_stats()
                .is_some_and(|stats| stats.subscribed && stats.hearing_lease_holds)
        })
    })
    .await;
}

/// A seeded generator (the tests' package has no `fastrand`): splitmix64. The seed is
/// printed, and `STAMPEDE_RYW_SEED` replays it.
struct Rng(u64);

impl Rng {
    fn seeded() -> (Self, u64) {
        let seed = (std::env::var("STAMPEDE_RYW_SEED").ok())
            .and_then(|seed| seed.parse().ok())
            .unwrap_or_else(|| {
                let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
                now.map_or(0, |now| now.as_nanos() as u64) ^ u64::from(std::process::id())
            });
        (Rng(seed), seed)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// In `0..n`.
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// `redis-cli` against the server's own port (not through the proxy).
fn cli(port: u16, args: &[&str]) -> String {
    let output = std::process::Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .output()
        .expect("redis-cli runs");
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

/// The ids of the notice subscriptions' connections: `CLIENT LIST` names them
/// `stampede-<replica, 16 hex digits>-notices`.
fn notice_connections(port: u16) -> Vec<String> {
    let list = cli(port, &["CLIENT", "LIST"]);
    (list.lines())
        .filter_map(|client| {
            let field = |name: &str| {
                (client.split(' '))
                    .find_map(|field| field.strip_prefix(name))
                    .map(str::to_owned)
            };
            let name = field("name=")?;
            let replica = name.strip_prefix("stampede-")?.strip_suffix("-notices")?;
            let named = replica.len() == 16 && replica.chars().all(|c| c.is_ascii_hexdigit());
            named.then(|| field("id=")).flatten()
        })
        .collect()
}

/// A thread that kills one random replica's notice subscription (`CLIENT KILL ID`) a
/// moment (0 to 20 ms) after each request, so the kill lands among the pairs running
/// then, not between two of them.
struct Killer {
    requests: Option<mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<usize>>,
}

impl Killer {
    fn start(port: u16, seed: u64) -> Self {
        let (requests, asked) = mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            let mut rng = Rng(seed);
            let mut killed = 0;
            while asked.recv().is_ok() {
                std::thread::sleep(Duration::from_millis(rng.below(21) as u64));
                let connections = notice_connections(port);
                if connections.is_empty() {
                    continue;
                }
                let id = &connections[rng.below(connections.len())];
                if cli(port, &["CLIENT", "KILL", "ID", id]) == "1" {
                    killed += 1;
                }
            }
            killed
        });
        Killer {
            requests: Some(requests),
            thread: Some(thread),
        }
    }

    fn kill_one(&self) {
        if let Some(requests) = &self.requests {
            let _ = requests.send(());
        }
    }

    /// Ends the thread after the kills asked for: how many connections it killed.
    async fn stop(mut self) -> usize {
        drop(self.requests.take());
        let thread = self.thread.take().unwrap();
        let joined = bounded(tokio::task::spawn_blocking(move || thread.join())).await;
        joined.unwrap().expect("the killing thread did not panic")
    }
}

/// What one run of read-your-writes pairs saw.
#[derive(Debug, Default)]
struct Pairs {
    /// Reads, right after an invalidation returned, of a value below the version written.
    retired_served: usize,
    /// Pairs whose reader held a memory copy of the key just before the write.
    reader_held_a_copy: usize,
    /// Copies held by the replicas just before each write, over all pairs.
    copies: usize,
    /// Notice subscriptions killed meanwhile.
    killed: usize,
    took: Duration,
}

/// `count` read-your-writes pairs on `caches`, while a notice subscription is killed
/// every `count / 5` pairs.
async fn pairs(
    caches: &[Cache<u64, u64, AppError>],
    db: &Database,
    count: usize,
    acknowledged: bool,
    rng: &mut Rng,
    port: u16,
) -> Pairs {
    let killer = Killer::start(port, rng.next());
    let kill_every = (count / 5).max(1);
    let mut seen = Pairs::default();
    let started = Instant::now();
    for pair in 0..count {
        if pair % kill_every == kill_every / 2 {
            killer.kill_one();
        }
        let key = 1 + rng.below(4) as u64;
        // Every replica holds a copy (a replica whose subscription is down makes none).
        for cache in caches {
            db.load(cache, key).await;
        }
        let writer_at = rng.below(caches.len());
        let reader_at = (writer_at + 1 + rng.below(caches.len() - 1)) % caches.len();
        let (writer, reader) = (&caches[writer_at], &caches[reader_at]);
        seen.copies += caches.iter().filter(|c| c.peek(&key).is_some()).count();
        if reader.peek(&key).is_some() {
            seen.reader_held_a_copy += 1;
        }
        let written = db.write();
        invalidate(writer, key, acknowledged).await;
        let read = db.load(reader, key).await;
        if read < written {
            seen.retired_served += 1;
            if acknowledged {
                println!(
                    "retired value served after an acknowledged invalidation: pair {pair}, key {key}, replica {writer_at} wrote version {written}, replica {reader_at} read {read}"
                );
            }
        }
    }
    seen.took = started.elapsed();
    seen.killed = killer.stop().await;
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_invalidation_is_read_your_writes_on_two_and_eight_replicas() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let _alone = alone().await;
    let count = (std::env::var("STAMPEDE_RYW_PAIRS").ok())
        .and_then(|pairs| pairs.parse().ok())
        .filter(|&pairs: &usize| pairs > 0)
        .unwrap_or(DEFAULT_PAIRS);
    let (mut rng, seed) = Rng::seeded();
    println!("read-your-writes: seed {seed} (STAMPEDE_RYW_SEED replays it)");
    let started = Instant::now();
    for replicas in [2, 8] {
        let (runtimes, caches, db) = fleet(&redis, replicas, "read-your-writes").await;
        let before: Vec<_> = runtimes.iter().map(acknowledgements).collect();
        let acknowledged = pairs(&caches, &db, count, true, &mut rng, redis.port()).await;
        let (confirmed, waited_out) = (runtimes.iter().zip(&before))
            .map(|(runtime, before)| {
                let after = acknowledgements(runtime);
                (after.0 - before.0, after.1 - before.1)
            })
            .fold((0, 0), |sum, one| (sum.0 + one.0, sum.1 + one.1));
        // The same pairs with plain invalidations, for contrast: a notice on its way
        // when the reader reads leaves it the retired value.
        hearing(&runtimes, &caches, &db).await;
        let eventual = pairs(&caches, &db, count, false, &mut rng, redis.port()).await;
        println!(
            "read-your-writes: {replicas} replicas, {count} pairs, acknowledged: {} retired served; eventual: {} retired served",
            acknowledged.retired_served, eventual.retired_served
        );
        for (mode, seen) in [("acknowledged", &acknowledged), ("eventual", &eventual)] {
            println!(
                "  {mode}: {:?}, {} subscriptions killed, the reader held a copy in {} pairs, {:.1} copies of {replicas} held per write",
                seen.took,
                seen.killed,
                seen.reader_held_a_copy,
                seen.copies as f64 / count as f64
            );
        }
        println!(
            "  acknowledged invalidations: {confirmed} acknowledged by every receiver, {waited_out} waited out the hearing lease"
        );
        assert_eq!(
            acknowledged.retired_served, 0,
            "{replicas} replicas (seed {seed}): a reader served a retired value after an acknowledged invalidation returned"
        );
        assert!(
            acknowledged.reader_held_a_copy > 0,
            "{replicas} replicas: no reader ever held a copy, so nothing was tested"
        );
    }
    println!("read-your-writes: {:?} in all", started.elapsed());
}

/// The `q` quantile of `sorted`, in milliseconds.
/// `replicas` tiered replicas of one cache (`<name>-<replicas>`), every one hearing, over
/// a fresh database.
async fn fleet(
    redis: &RedisServer,
    replicas: usize,
    name: &str,
) -> (Vec<Runtime>, Vec<Cache<u64, u64, AppError>>, Database) {
    let runtimes: Vec<Runtime> = (0..replicas)
        .map(|_| replica(redis.direct_url(), PATIENT_REDIS))
        .collect();
    let name = format!("{name}-{replicas}");
    let caches: Vec<_> = (runtimes.iter())
        .map(|runtime| cache(runtime, &name))
        .collect();
    let db = Database::default();
    hearing(&runtimes, &caches, &db).await;
    (runtimes, caches, db)
}

/// Loads `key` on `cache` until memory keeps a copy of it: a copy made before the
/// subscription came up is dropped when it does.
async fn hold_copy(cache: &Cache<u64, u64, AppError>, db: &Database, key: u64) {
    bounded(async {
        while cache.peek(&key).is_none() {
            cache.invalidate(&key).await.unwrap();
            db.load(cache, key).await;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

fn quantile_ms(sorted: &[Duration], q: f64) -> f64 {
    let at = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[at].as_secs_f64() * 1000.0
}

/// The replica counts the latency test measures: `STAMPEDE_RYW_REPLICAS=2,8,64` (the
/// figures in docs/performance.md); 2 and 8 by default, which keeps the suite quick.
fn measured_replicas() -> Vec<usize> {
    let counts = std::env::var("STAMPEDE_RYW_REPLICAS").unwrap_or_else(|_| "2,8".into());
    let counts: Vec<usize> = counts
        .split(',')
        .filter_map(|n| n.trim().parse().ok())
        .collect();
    match counts.is_empty() {
        true => vec![2, 8],
        false => counts,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_invalidation_latency_at_2_8_and_64_replicas() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let _alone = alone().await;
    // `STAMPEDE_RYW_ROUNDS=200` for the figures in docs/performance.md; fewer by default,
    // which keeps the suite quick.
    let rounds: usize = std::env::var("STAMPEDE_RYW_ROUNDS")
        .ok()
        .and_then(|rounds| rounds.parse().ok())
        .unwrap_or(60);
    const KEY: u64 = 7;
    for replicas in measured_replicas() {
        let started = Instant::now();
        let (runtimes, caches, db) = fleet(&redis, replicas, "acknowledged-latency").await;
        let ready = started.elapsed();
        let before = acknowledgements(&runtimes[0]);
        let (mut latencies, mut answered, mut copies) = (Vec::new(), 0, 0);
        for _ in 0..rounds {
            // Untimed: a copy on every replica again. Loads at once leave some replicas
            // without one (answered while another replica loaded), so those load again.
            let loads = caches.iter().map(|cache| db.load(cache, KEY));
            futures_util::future::join_all(loads).await;
            for cache in &caches {
                if cache.peek(&KEY).is_none() {
                    db.load(cache, KEY).await;
                }
            }
            copies += caches.iter().filter(|c| c.peek(&KEY).is_some()).count();
            db.write();
            let invalidation = stampede::acknowledged(caches[0].invalidate(&KEY));
            let timed = Instant::now();
            let answer = bounded(invalidation).await;
            latencies.push(timed.elapsed());
            answered += usize::from(answer.is_ok());
        }
        let after = acknowledgements(&runtimes[0]);
        let (confirmed, waited_out) = (after.0 - before.0, after.1 - before.1);
        latencies.sort();
        println!(
            "acknowledged invalidation: {replicas} replicas, {rounds} rounds: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms; {confirmed} acknowledged, {waited_out} waited out; {:.1} copies of {replicas} held per invalidation; ready in {ready:?}, {:?} in all",
            quantile_ms(&latencies, 0.5),
            quantile_ms(&latencies, 0.99),
            quantile_ms(&latencies, 1.0),
            copies as f64 / rounds as f64,
            started.elapsed()
        );
        assert_eq!(
            answered, rounds,
            "{replicas} replicas: invalidations that failed"
        );
        // Nothing was killed: every receiver should answer within the lease. Lenient (5%)
        // for a starved scheduler on two cores.
        assert!(
            waited_out as usize * 20 <= rounds.max(20),
            "{replicas} replicas: {waited_out} of {rounds} acknowledged invalidations waited out the hearing lease"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_stops_hearing_serves_no_copy() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let _alone = alone().await;
    const KEY: u64 = 11;
    let started = Instant::now();
    // A straight to the server; B through the proxy, which the test black-holes. B waits
    // less for each call, so that its load into the black hole ends soon.
    let (a, b) = (
        replica(redis.direct_url(), PATIENT_REDIS),
        replica(redis.url(), Duration::from_millis(500)),
    );
    let (a_cache, b_cache) = (cache(&a, "stops-hearing"), cache(&b, "stops-hearing"));
    let db = Database::default();
    hearing(
        &[a.clone(), b.clone()],
        &[a_cache.clone(), b_cache.clone()],
        &db,
    )
    .await;
    db.write();
    assert_eq!(db.load(&a_cache, KEY).await, 1);
    // B's copy: made once its subscription is up (a copy made before would be dropped
    // when it comes up).
    hold_copy(&b_cache, &db, KEY).await;
    // Served from memory while B hears: neither the origin nor Redis is asked.
    let reads = |runtime: &Runtime| {
        let stats = runtime.backend_stats().unwrap();
        stats.hits + stats.misses
    };
    let (calls, read) = (db.calls(), reads(&b));
    assert_eq!(db.load(&b_cache, KEY).await, 1);
    assert_eq!(
        (db.calls(), reads(&b)),
        (calls, read),
        "B's copy served while it hears"
    );

    redis.black_hole();
    tokio::time::sleep(3 * HEARING_LEASE).await;
    let stats = b.backend_stats().unwrap();
    println!(
        "stops hearing: after {:?} black-holed, B: hearing {}, subscribed {}, copy held {}",
        3 * HEARING_LEASE,
        stats.hearing_lease_holds,
        stats.subscribed,
        b_cache.peek(&KEY).is_some()
    );
    assert!(
        !stats.hearing_lease_holds,
        "B's lease held 3 leases into the black hole"
    );
    let (calls, loading) = (db.calls(), Instant::now());
    assert_eq!(db.load(&b_cache, KEY).await, 1);
    println!(
        "stops hearing: B's load took {:?}, origin calls {} -> {}",
        loading.elapsed(),
        calls,
        db.calls()
    );
    assert_eq!(
        db.calls(),
        calls + 1,
        "B served its copy past its hearing lease"
    );

    redis.heal();
    let healed = Instant::now();
    eventually(|| {
        b.backend_stats()
            .is_some_and(|stats| stats.hearing_lease_holds)
    })
    .await;
    println!(
        "stops hearing: B hears again {:?} after the heal; {:?} in all",
        healed.elapsed(),
        started.elapsed()
    );
}

/// A proxy whose freeze holds everything, the end of a connection (FIN) too, unlike
/// `testkit::Proxy`, whose forwarding threads pass an EOF on at once even when held.
struct Freezer {
    addr: std::net::SocketAddr,
    frozen: Arc<(std::sync::Mutex<bool>, std::sync::Condvar)>,
    /// The local ports of the proxy's connections to the server (`addr=` in CLIENT LIST).
    upstream_ports: Arc<std::sync::Mutex<Vec<u16>>>,
}

impl Freezer {
    fn start(upstream: std::net::SocketAddr) -> Self {
        use std::net::{TcpListener, TcpStream};
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let frozen = Arc::new((std::sync::Mutex::new(false), std::sync::Condvar::new()));
        let upstream_ports = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (f, ports) = (frozen.clone(), upstream_ports.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(upstream) else {
                    continue;
                };
                ports
                    .lock()
                    .unwrap()
                    .push(server.local_addr().unwrap().port());
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                let (fa, fb) = (f.clone(), f.clone());
                std::thread::spawn(move || forward_frozen(client, server, fa));
                std::thread::spawn(move || forward_frozen(s2, c2, fb));
            }
        });
        Freezer {
            addr,
            frozen,
            upstream_ports,
        }
    }
    fn url(&self) -> String {
        format!("redis://{}/", self.addr)
    }
    fn freeze(&self, on: bool) {
        *self.frozen.0.lock().unwrap() = on;
        self.frozen.1.notify_all();
    }
}

fn forward_frozen(
    mut from: std::net::TcpStream,
    mut to: std::net::TcpStream,
    frozen: Arc<(std::sync::Mutex<bool>, std::sync::Condvar)>,
) {
    use std::io::{Read, Write};
    let mut buffer = [0u8; 16 * 1024];
    loop {
        let n = from.read(&mut buffer).unwrap_or(0);
        let held = frozen.0.lock().unwrap();
        drop(frozen.1.wait_while(held, |f| *f).unwrap());
        if n == 0 || to.write_all(&buffer[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Write);
}

/// B is cut off (frozen proxy: nothing passes, not even a FIN) and then Redis drops B's
/// notice subscription (as the output buffer limit for pubsub clients or a CLIENT KILL
/// does): Redis no longer counts B among the subscribers, while B's hearing lease still
/// runs. The hearing registry still lists B, so an acknowledged invalidation from A waits
/// for B's answer or its lease, and B serves no copy of what it retired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_dropped_without_a_word_is_waited_out() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let _alone = alone().await;
    const KEY: u64 = 21;
    for (round, kill) in [(0, false), (1, true), (2, true), (3, true)] {
        let freezer = Freezer::start(std::net::SocketAddr::from(([127, 0, 0, 1], redis.port())));
        let a = replica(redis.direct_url(), PATIENT_REDIS);
        let b = replica(freezer.url(), Duration::from_millis(500));
        let name = format!("frozen-{round}");
        let (a_cache, b_cache) = (cache(&a, &name), cache(&b, &name));
        let db = Database::default();
        hearing(
            &[a.clone(), b.clone()],
            &[a_cache.clone(), b_cache.clone()],
            &db,
        )
        .await;
        let v1 = db.write();
        assert_eq!(db.load(&a_cache, KEY).await, v1);
        hold_copy(&b_cache, &db, KEY).await;
        let before = acknowledgements(&a);
        freezer.freeze(true);
        let frozen_at = Instant::now();
        let mut killed = String::from("-");
        if kill {
            let ports = freezer.upstream_ports.lock().unwrap().clone();
            let list = cli(redis.port(), &["CLIENT", "LIST"]);
            for client in list.lines() {
                let is_b = ports
                    .iter()
                    .any(|p| client.contains(&format!("addr=127.0.0.1:{p} ")));
                if is_b && client.contains("-notices ") {
                    let id = client
                        .split(' ')
                        .find_map(|f| f.strip_prefix("id="))
                        .unwrap();
                    killed = cli(redis.port(), &["CLIENT", "KILL", "ID", id]);
                }
            }
        }
        let v2 = db.write();
        let timed = Instant::now();
        bounded(stampede::acknowledged(a_cache.invalidate(&KEY)))
            .await
            .unwrap();
        let ack_took = timed.elapsed();
        let after = acknowledgements(&a);
        let hearing_b = b.backend_stats().unwrap().hearing_lease_holds;
        let read = db.load(&b_cache, KEY).await;
        freezer.freeze(false);
        println!(
            "frozen round {round}: kill B's subscription server-side: {kill} (CLIENT KILL answered {killed}); acknowledged invalidation took {ack_took:?} ({} acknowledged, {} waited out); {:?} after the freeze B hearing {hearing_b} and B read {read} (written {v2}){}",
            after.0 - before.0,
            after.1 - before.1,
            frozen_at.elapsed(),
            if read < v2 { "  <-- RETIRED VALUE SERVED" } else { "" }
        );
        assert!(
            read >= v2,
            "round {round}: B read v{read} after v{v2} was written and acknowledged"
        );
        assert_eq!(
            after.0 - before.0,
            0,
            "round {round}: B cannot have acknowledged"
        );
    }
}
