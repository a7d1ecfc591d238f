//! `herd --flush`: many distinct keys missing at once, as after a cache flush or a cold
//! deploy. Coalescing gives one origin call per key, but with a thousand keys that is still
//! a thousand calls at once; an admission limit holds origin concurrency at the limit and
//! sheds (or serves stale) what would queue too long.
//!
//! ```text
//! cargo run --release --example herd -- --flush --keys 1000 --callers 2 --origin-ms 20 --limit 16 --queue-ms 200
//! ```
use stampede::{warmup, Cache, Policy, PolicyBuilder, Runtime};
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const USAGE: &str =
    "usage: herd --flush [--keys N] [--callers N] [--origin-ms MS] [--limit N] [--queue-ms MS]
  --keys        distinct keys that expire together (default 1000)
  --callers     concurrent requests per key (default 2)
  --origin-ms   origin latency in milliseconds (default 20)
  --limit       the admission limit of the limited strategies (default 16)
  --queue-ms    the short queue timeout, in milliseconds (default 200)";

#[derive(Debug, Clone)]
struct Settings {
    keys: u64,
    callers: u64,
    origin_latency: Duration,
    limit: usize,
    short_queue: Duration,
}

/// Runs the flush scenario when the arguments ask for it (`--flush`), else `None`.
pub fn dispatch(args: impl Iterator<Item = String>) -> Option<ExitCode> {
    let args = super::mode_args("--flush", args)?;
    Some(match parse(args.into_iter()) {
        Ok(settings) => run(&settings),
        Err(message) => super::refused("herd --flush", USAGE, &message),
    })
}

fn parse(args: impl Iterator<Item = String>) -> Result<Settings, String> {
    let mut settings = Settings {
        keys: 1_000,
        callers: 2,
        origin_latency: Duration::from_millis(20),
        limit: 16,
        short_queue: Duration::from_millis(200),
    };
    let mut args = args.peekable();
    while let Some(flag) = args.next() {
        match flag.as_str() {
            "--help" | "-h" => return Err(String::new()),
            "--keys" | "--callers" | "--origin-ms" | "--limit" | "--queue-ms" => {}
            other => return Err(format!("unknown flag `{other}`")),
        }
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let number = match value.parse::<u64>() {
            Ok(n) if n > 0 => n,
            _ => {
                return Err(format!(
                    "{flag} takes a whole number above zero, not `{value}`"
                ))
            }
        };
        match flag.as_str() {
            "--keys" => settings.keys = number,
            "--callers" => settings.callers = number,
            "--origin-ms" => settings.origin_latency = Duration::from_millis(number),
            "--limit" => settings.limit = number as usize,
            "--queue-ms" => settings.short_queue = Duration::from_millis(number),
            _ => unreachable!("every flag was matched above"),
        }
    }
    Ok(settings)
}

/// The origin: counts calls and how many run at once. Answers `1` (a value loaded after
/// the flush), so callers can tell it from the `0` the cache was filled with.
#[derive(Default)]
struct Database {
    calls: AtomicUsize,
    running: AtomicUsize,
    max_running: AtomicUsize,
}

impl Database {
    async fn load(&self, latency: Duration) -> Result<u64, stampede::Error> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_running.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(latency).await;
        self.running.fetch_sub(1, Ordering::SeqCst);
        Ok(1)
    }
}

struct Strategy {
    name: String,
    runtime: Runtime,
    policy: PolicyBuilder,
    limit: Option<usize>,
}

/// Fresh long enough to fill every key, short enough that the run waits little for the
/// flush: all keys were filled together, so they expire together.
const FRESH: Duration = Duration::from_millis(500);

fn strategies(settings: &Settings) -> Vec<Strategy> {
    let limited = |queue: Duration| {
        Runtime::builder()
            .admission("db", settings.limit, queue)
            .build()
            .expect("the flush runtimes are valid")
    };
    let base = || {
        Policy::builder("flush")
            .fresh(FRESH)
            .capacity(settings.keys * 2)
    };
    let (limit, short) = (settings.limit, settings.short_queue);
    let long = Duration::from_secs(60);
    vec![
        Strategy {
            name: "coalescing, no admission".into(),
            runtime: Runtime::builder().build().expect("valid"),
            policy: base(),
            limit: None,
        },
        Strategy {
            name: format!("admission {limit}, queue {long:?}"),
            runtime: limited(long),
            policy: base().admission("db"),
            limit: Some(limit),
        },
        Strategy {
            name: format!("admission {limit}, queue {short:?}"),
            runtime: limited(short),
            policy: base().admission("db"),
            limit: Some(limit),
        },
        Strategy {
            name: format!("admission {limit}, queue {short:?}, stale_if_error"),
            runtime: limited(short),
            policy: base()
                .admission("db")
                .stale_if_error(Duration::from_secs(3_600)),
            limit: Some(limit),
        },
    ]
}

struct Row {
    requests: usize,
    origin_calls: usize,
    max_concurrent: usize,
    shed: u64,
    stale_served: usize,
    errors: usize,
    p50: Duration,
    p99: Duration,
}

async fn flush(settings: &Settings, strategy: Strategy) -> Row {
    let policy = strategy
        .policy
        .build()
        .expect("the flush policies are valid");
    let cache: Cache<u64, u64> = Cache::builder(policy).runtime(&strategy.runtime).build();
    // Fill every key with 0 at once (an instant origin), then let them all expire.
    let filled = warmup(&cache, 0..settings.keys, |_| async { Ok(0) }).await;
    assert_eq!(filled.failed, 0, "filling an in-memory cache cannot fail");
    tokio::time::sleep(FRESH + Duration::from_millis(50)).await;

    let db = Arc::new(Database::default());
    let mut callers = Vec::new();
    for key in 0..settings.keys {
        for _ in 0..settings.callers {
            let (cache, db, latency) = (cache.clone(), db.clone(), settings.origin_latency);
            callers.push(tokio::spawn(async move {
                let asked = Instant::now();
                let answer = cache
                    .load(key, move || async move { db.load(latency).await })
                    .await;
                (asked.elapsed(), answer)
            }));
        }
    }
    let requests = callers.len();
    let (mut latencies, mut stale_served, mut errors) = (Vec::with_capacity(requests), 0, 0);
    for caller in callers {
        let (latency, answer) = caller.await.expect("a caller panicked");
        latencies.push(latency);
        match answer {
            Ok(0) => stale_served += 1,
            Ok(_) => {}
            Err(_) => errors += 1,
        }
    }
    latencies.sort();
    let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize];
    Row {
        requests,
        origin_calls: db.calls.load(Ordering::SeqCst),
        max_concurrent: db.max_running.load(Ordering::SeqCst),
        shed: cache.stats().shed,
        stale_served,
        errors,
        p50: at(0.50),
        p99: at(0.99),
    }
}

fn run(settings: &Settings) -> ExitCode {
    let runtime = match super::tokio_runtime() {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
    println!(
        "flush: {} keys expire together, {} callers each at once, origin {:?}\n",
        settings.keys, settings.callers, settings.origin_latency,
    );
    println!(
        "{:<44} {:>9} {:>13} {:>15} {:>6} {:>13} {:>7} {:>10} {:>10}",
        "strategy",
        "requests",
        "origin calls",
        "max concurrent",
        "shed",
        "stale served",
        "errors",
        "p50",
        "p99"
    );
    let mut held = true;
    for strategy in strategies(settings) {
        let (name, limit) = (strategy.name.clone(), strategy.limit);
        let row = runtime.block_on(flush(settings, strategy));
        println!(
            "{:<44} {:>9} {:>13} {:>15} {:>6} {:>13} {:>7} {:>10} {:>10}",
            name,
            row.requests,
            row.origin_calls,
            row.max_concurrent,
            row.shed,
            row.stale_served,
            row.errors,
            format!("{:.2?}", row.p50),
            format!("{:.2?}", row.p99),
        );
        held &= limit.is_none_or(|limit| row.max_concurrent <= limit);
    }
    if !held {
        eprintln!("herd --flush: origin concurrency passed an admission limit");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
