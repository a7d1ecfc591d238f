//! `herd --fleet N`: the herd across N replicas sharing one Redis.
//!
//! Each replica is its own `stampede::Runtime` (its own connections, memory and flights),
//! so N of them in one process behave like N processes. The same open-loop load as the
//! herd is spread over the replicas, once per strategy: memory per replica, Redis without
//! a lease, Redis with the fleet lease, and tiered with the lease and a stale window. The
//! example starts its own `redis-server` (or, with `--cluster`, a local three-master Redis
//! Cluster) on free loopback ports.
//!
//! Columns: origin calls per expiry; the cross-replica wake-up, from the moment an origin
//! call returned on one replica to the moment a caller that had been waiting for that
//! value on *another* replica got it (publish, notice, re-read), p50 and p99; the caller
//! p99 and the longest any caller waited. `--pause MS` pauses Redis (`CLIENT PAUSE`)
//! halfway through each run, while an origin call is running, and counts the origin calls
//! per expiry outside the pause (from one expiry after it ends).
mod flush;
mod notices;

use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use stampede::{Backend, Cache, Policy, Runtime};

const USAGE: &str = "usage: herd --fleet N [--cluster] [--rate REQ_PER_S] [--duration SECONDS] [--origin-ms MS] [--pause MS] [--chart SVG] [--keys M]

The herd across N replicas (independent runtimes in this process) sharing one Redis:
  --fleet       replicas, 1..=64
  --cluster     a local three-master Redis Cluster instead of one redis-server
  --rate        requests per second on the hot key, over all replicas (default 2000)
  --duration    seconds of load per strategy (default 3)
  --origin-ms   origin latency in milliseconds (default 50)
  --pause       pause Redis (CLIENT PAUSE) this many milliseconds halfway through each run
  --chart       also draw origin calls per 100 ms for each strategy into this SVG file
  --keys        also write M keys spread over the replicas and count the notices each
                replica receives (what a fleet's notices cost)
Needs `redis-server` and `redis-cli` on PATH (apt-get install redis-server).";

#[derive(Debug, Clone)]
struct Settings {
    replicas: usize,
    cluster: bool,
    rate: u64,
    duration: Duration,
    origin_latency: Duration,
    pause: Option<Duration>,
    chart: Option<std::path::PathBuf>,
    keys: Option<u64>,
}

/// Values are fresh this long in every strategy; the lease is longer than any origin call.
const FRESH: Duration = Duration::from_millis(500);
const LEASE: Duration = Duration::from_secs(5);
const KEY: u64 = 42;

/// Runs `herd --fleet …` when the arguments ask for it.
pub fn dispatch(args: impl Iterator<Item = String>) -> Option<ExitCode> {
    let args: Vec<String> = args.collect();
    if !args.iter().any(|a| a == "--fleet") {
        return None;
    }
    if let Some(code) = flush::dispatch(&args) {
        return Some(code);
    }
    Some(match parse(args.into_iter()) {
        Ok(settings) => run(&settings),
        Err(message) => super::refused("herd --fleet", USAGE, &message),
    })
}

fn parse(args: impl Iterator<Item = String>) -> Result<Settings, String> {
    let mut settings = Settings {
        replicas: 0,
        cluster: false,
        rate: 2_000,
        duration: Duration::from_secs(3),
        origin_latency: Duration::from_millis(50),
        pause: None,
        chart: None,
        keys: None,
    };
    let mut args = args.peekable();
    while let Some(flag) = args.next() {
        match flag.as_str() {
            "--help" | "-h" => return Err(String::new()),
            "--cluster" => {
                settings.cluster = true;
                continue;
            }
            "--fleet" | "--rate" | "--duration" | "--origin-ms" | "--pause" | "--chart"
            | "--keys" => {}
            other => return Err(format!("unknown flag `{other}`")),
        }
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let number = |what: &str| super::whole_number(&flag, &value, what);
        match flag.as_str() {
            "--fleet" => match number("replicas")? {
                n @ 1..=64 => settings.replicas = n as usize,
                n => return Err(format!("--fleet takes 1 to 64 replicas, not {n}")),
            },
            "--rate" => settings.rate = number("requests per second")?,
            "--duration" => settings.duration = Duration::from_secs(number("seconds")?),
            "--origin-ms" => {
                settings.origin_latency = Duration::from_millis(number("milliseconds")?)
            }
            "--pause" => settings.pause = Some(Duration::from_millis(number("milliseconds")?)),
            "--chart" => settings.chart = Some(value.into()),
            "--keys" => match number("keys")? {
                n @ 1..=1_000_000 => settings.keys = Some(n),
                n => return Err(format!("--keys takes 1 to 1000000 keys, not {n}")),
            },
            _ => unreachable!("every flag was matched above"),
        }
    }
    if settings.replicas == 0 {
        return Err("--fleet needs a number of replicas".into());
    }
    Ok(settings)
}

#[derive(Clone, Copy, PartialEq)]
enum Strategy {
    MemoryPerReplica,
    RedisNoLease,
    RedisLease,
    TieredLeaseStale,
}

impl Strategy {
    const ALL: [Strategy; 4] = [
        Strategy::MemoryPerReplica,
        Strategy::RedisNoLease,
        Strategy::RedisLease,
        Strategy::TieredLeaseStale,
    ];

    fn name(self) -> &'static str {
        match self {
            Strategy::MemoryPerReplica => "memory per replica",
            Strategy::RedisNoLease => "redis, no lease",
            Strategy::RedisLease => "redis + fleet lease",
            Strategy::TieredLeaseStale => "tiered + lease + stale",
        }
    }

    fn backend(self, store: &Store) -> Backend {
        match (self, store) {
            (Strategy::MemoryPerReplica, _) => Backend::Memory,
            (Strategy::TieredLeaseStale, Store::Node(redis)) => Backend::tiered(redis.direct_url()),
            (Strategy::TieredLeaseStale, Store::Cluster(cluster)) => {
                Backend::tiered_cluster(cluster.node_urls())
            }
            (_, Store::Node(redis)) => Backend::redis(redis.direct_url()),
            (_, Store::Cluster(cluster)) => Backend::redis_cluster(cluster.node_urls()),
        }
    }

    fn policy(self, run: usize) -> Policy {
        // A name per run, so no strategy finds another's entries in Redis.
        let policy = Policy::builder(format!("herd-fleet-{run}")).fresh(FRESH);
        let policy = match self {
            Strategy::MemoryPerReplica => policy,
            Strategy::RedisNoLease => policy.fleet_lease(false),
            Strategy::RedisLease => policy.lease(LEASE),
            Strategy::TieredLeaseStale => policy.lease(LEASE).stale(FRESH),
        };
        policy.build().expect("a valid policy")
    }
}

enum Store {
    Node(testkit::RedisServer),
    Cluster(testkit::RedisCluster),
}

impl Store {
    /// `CLIENT PAUSE` on every master (commands wait, connections stay up), sent from a
    /// thread of its own so the load does not wait for `redis-cli`.
    fn pause(&self, pause: Duration) {
        let ports: Vec<u16> = match self {
            Store::Node(redis) => vec![redis.port()],
            Store::Cluster(cluster) => (0..3).map(|node| cluster.port(node)).collect(),
        };
        let millis = pause.as_millis().to_string();
        std::thread::spawn(move || {
            for port in ports {
                let _ = std::process::Command::new("redis-cli")
                    .args(["-p", &port.to_string(), "CLIENT", "PAUSE", &millis])
                    .output();
            }
        });
    }
}

/// The slow origin, shared by every replica: counts calls and remembers when each
/// returned and on which replica, so a caller can tell how long after that it was served.
#[derive(Default)]
struct Database {
    calls: AtomicUsize,
    /// Per call: (replica, when its value was returned to the cache).
    returned: Mutex<Vec<(usize, Instant)>>,
    /// When each call started.
    calls_at: Mutex<Vec<Instant>>,
    /// Calls running now.
    running: AtomicUsize,
}

impl Database {
    async fn load(&self, replica: usize, latency: Duration) -> Result<u64, stampede::Error> {
        let call = self.calls.fetch_add(1, Ordering::SeqCst);
        self.calls_at.lock().unwrap().push(Instant::now());
        self.running.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(latency).await;
        self.running.fetch_sub(1, Ordering::SeqCst);
        let mut returned = self.returned.lock().unwrap();
        if returned.len() <= call {
            returned.resize(call + 1, (usize::MAX, Instant::now()));
        }
        returned[call] = (replica, Instant::now());
        Ok(call as u64)
    }
}

struct Served {
    replica: usize,
    asked: Instant,
    answered: Instant,
    value: Option<u64>,
}

struct Row {
    requests: usize,
    origin_calls: usize,
    wake_ups: Vec<Duration>,
    caller_p99: Duration,
    longest_wait: Duration,
    /// When each origin call after the warm-up started, from the start of load.
    origin_calls_at: Vec<Duration>,
    /// When Redis was paused, from the start of load.
    paused_at: Option<Duration>,
}

fn run(settings: &Settings) -> ExitCode {
    let store = if settings.cluster {
        testkit::RedisCluster::start().map(Store::Cluster)
    } else {
        testkit::RedisServer::start().map(Store::Node)
    };
    let Some(store) = store else {
        eprintln!("herd --fleet: needs `redis-server` and `redis-cli` on PATH (apt-get install redis-server)");
        return ExitCode::FAILURE;
    };
    let runtime = match super::tokio_runtime() {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
    let period = FRESH + settings.origin_latency;
    let expiries = (settings.duration.as_secs_f64() / period.as_secs_f64())
        .floor()
        .max(1.0);
    let paused = settings.pause.map_or(String::new(), |pause| {
        format!(", Redis paused {pause:?} halfway")
    });
    println!(
        "one hot key on {} replicas ({}), {} req/s in all for {:?}, origin {:?}, fresh {:?}, lease {:?} (about {:.0} expiries){paused}\n",
        settings.replicas,
        if settings.cluster { "a 3-master Redis Cluster" } else { "one redis-server" },
        settings.rate,
        settings.duration,
        settings.origin_latency,
        FRESH,
        LEASE,
        expiries,
    );
    let outside = if settings.pause.is_some() {
        format!(" {:>16}", "outside pause")
    } else {
        String::new()
    };
    println!(
        "{:<24} {:>9} {:>13} {:>11} {:>9} {:>12} {:>12} {:>11} {:>11}{outside}",
        "strategy",
        "requests",
        "origin calls",
        "per expiry",
        "wake-ups",
        "wake p50",
        "wake p99",
        "caller p99",
        "max wait"
    );
    let mut origin_calls_at = Vec::new();
    for (run_number, strategy) in Strategy::ALL.into_iter().enumerate() {
        let mut row = runtime.block_on(one(settings, &store, strategy, run_number));
        let outside = match (settings.pause, row.paused_at) {
            (Some(pause), Some(at)) => {
                let (calls, expiries) = outside_pause(&row, settings, at, pause, period);
                format!(
                    " {:>16}",
                    format!("{:.1} per expiry", calls as f64 / expiries)
                )
            }
            _ => String::new(),
        };
        origin_calls_at.push((strategy.name(), std::mem::take(&mut row.origin_calls_at)));
        let at = |q: f64| match row.wake_ups.len() {
            0 => "-".to_owned(),
            n => format!("{:.2?}", row.wake_ups[((n - 1) as f64 * q) as usize]),
        };
        println!(
            "{:<24} {:>9} {:>13} {:>11.1} {:>9} {:>12} {:>12} {:>11} {:>11}{outside}",
            strategy.name(),
            row.requests,
            row.origin_calls,
            row.origin_calls as f64 / expiries,
            row.wake_ups.len(),
            at(0.50),
            at(0.99),
            format!("{:.2?}", row.caller_p99),
            format!("{:.2?}", row.longest_wait),
        );
    }
    if let Some(keys) = settings.keys {
        let report = runtime.block_on(notices::measure(settings.replicas, keys, &store));
        let one_channel = 1.0 - 1.0 / settings.replicas as f64;
        println!(
            "\nnotices: {keys} keys spread over {} tiered replicas, each written 3 times ({:.2?})\n",
            settings.replicas, report.took
        );
        println!(
            "{:>8} {:>11} {:>34} {:>20} {:>18}",
            "writes",
            "deliveries",
            "per replica and write, keys not held",
            "buckets per replica",
            "Redis CPU per write"
        );
        println!(
            "{:>8} {:>11} {:>34} {:>20.1} {:>18}",
            report.writes,
            report.deliveries,
            format!(
                "{:.4} (one channel: {one_channel:.4})",
                report.foreign_per_write
            ),
            report.buckets_per_replica,
            format!("{:.2?}", report.redis_cpu_per_write),
        );
    }
    if let Some(path) = &settings.chart {
        let title = format!(
            "Origin calls per 100 ms: one hot key on {} replicas, {} req/s, origin {:?}, fresh {:?}",
            settings.replicas, settings.rate, settings.origin_latency, FRESH
        );
        if let Err(e) = super::chart::draw(path, &title, settings.duration, &origin_calls_at) {
            eprintln!("herd --fleet: cannot draw {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
        println!("\nchart: {}", path.display());
    }
    ExitCode::SUCCESS
}

/// The origin calls of a run that started outside a pause at `at` (from one expiry
/// `period` before it to one after it ended), and the expiries that time holds.
fn outside_pause(
    row: &Row,
    settings: &Settings,
    at: Duration,
    pause: Duration,
    period: Duration,
) -> (usize, f64) {
    let (from, to) = (at.saturating_sub(period), at + pause + period);
    let calls = (row.origin_calls_at.iter())
        .filter(|&&call| call < from || call > to)
        .count();
    let outside = settings.duration.saturating_sub(to - from);
    (
        calls,
        (outside.as_secs_f64() / period.as_secs_f64()).max(1.0),
    )
}

async fn one(settings: &Settings, store: &Store, strategy: Strategy, run: usize) -> Row {
    let replicas: Vec<(Runtime, Cache<u64, u64>)> = (0..settings.replicas)
        .map(|_| {
            let runtime = Runtime::builder()
                .backend(strategy.backend(store))
                .build()
                .expect("a runtime");
            let cache = Cache::builder(strategy.policy(run))
                .runtime(&runtime)
                .build();
            (runtime, cache)
        })
        .collect();
    let caches: Arc<Vec<Cache<u64, u64>>> =
        Arc::new(replicas.iter().map(|(_, cache)| cache.clone()).collect());
    let db = Arc::new(Database::default());
    let latency = settings.origin_latency;
    let call = |replica: usize| {
        let (caches, db) = (caches.clone(), db.clone());
        async move {
            caches[replica]
                .load(KEY, move || async move { db.load(replica, latency).await })
                .await
        }
    };
    // Warm every replica: the table is about expiries under load, not the cold start.
    for replica in 0..settings.replicas {
        let _ = call(replica).await;
    }
    let warm_calls = db.calls.load(Ordering::SeqCst);
    let (served_tx, mut served_rx) = tokio::sync::mpsc::unbounded_channel();
    let started = Instant::now();
    let mut paused_at = None;
    let mut tick = tokio::time::interval(Duration::from_millis(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let (mut owed, per_tick) = (0.0, settings.rate as f64 / 1_000.0);
    let mut requests = 0;
    while started.elapsed() < settings.duration {
        tick.tick().await;
        // Halfway, while an origin call runs: Redis stops answering for the pause.
        if let Some(pause) = settings.pause {
            let due = started.elapsed() >= settings.duration / 2;
            if paused_at.is_none() && due && db.running.load(Ordering::SeqCst) > 0 {
                store.pause(pause);
                paused_at = Some(started.elapsed());
            }
        }
        owed += per_tick;
        while owed >= 1.0 {
            owed -= 1.0;
            let replica = requests % settings.replicas;
            requests += 1;
            let (load, tx) = (call(replica), served_tx.clone());
            tokio::spawn(async move {
                let asked = Instant::now();
                let value = load.await.ok();
                let _ = tx.send(Served {
                    replica,
                    asked,
                    answered: Instant::now(),
                    value,
                });
            });
        }
    }
    drop(served_tx);
    let mut served = Vec::with_capacity(requests);
    while let Some(one) = served_rx.recv().await {
        served.push(one);
    }
    let returned = db.returned.lock().unwrap().clone();
    let origin_calls_at = db.calls_at.lock().unwrap()[warm_calls..]
        .iter()
        .map(|&at| at.saturating_duration_since(started))
        .collect();
    // A wake-up: a caller on another replica that asked before the value it got existed.
    let mut wake_ups: Vec<Duration> = served
        .iter()
        .filter_map(|s| {
            let (loader, at) = *returned.get(usize::try_from(s.value?).ok()?)?;
            (loader != s.replica && s.asked < at).then(|| s.answered.saturating_duration_since(at))
        })
        .collect();
    wake_ups.sort();
    let mut latencies: Vec<Duration> = served.iter().map(|s| s.answered - s.asked).collect();
    latencies.sort();
    drop(replicas);
    Row {
        requests,
        origin_calls: db.calls.load(Ordering::SeqCst) - warm_calls,
        wake_ups,
        caller_p99: latencies
            .get(((latencies.len().max(1) - 1) as f64 * 0.99) as usize)
            .copied()
            .unwrap_or_default(),
        longest_wait: latencies.last().copied().unwrap_or_default(),
        origin_calls_at,
        paused_at,
    }
}
