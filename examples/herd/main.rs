//! A thundering herd on one hot key, once per strategy.
//!
//! Steady open-loop load (a fixed request rate, whatever the latency) hits one key whose
//! value is fresh for a short window, so it expires several times during the run. Each
//! strategy runs the same load against a slow origin and reports what the origin and the
//! callers saw:
//!
//! ```text
//! cargo run --release --example herd --no-default-features -- --rate 2000 --duration 3 --origin-ms 50
//! ```
//!
//! `--flush` runs the many-keys scenario instead (`flush.rs`), `--batch` pages of ids read
//! per id against batch loads (`batch.rs`), `--fleet N` the herd across
//! N replicas sharing one Redis (`fleet.rs`, which needs the default `redis` feature:
//! `cargo run --release --example herd -- --fleet 8`); `--chart herd.svg` also draws origin
//! calls per 100 ms for each strategy (`chart.rs`). Without `--fleet` the herd runs on
//! memory, so `--no-default-features` leaves the Redis client, most of the build, out.
mod batch;
mod chart;
#[cfg(feature = "redis")]
mod fleet;
mod flush;

use stampede::cached;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
struct Settings {
    rate: u64,
    duration: Duration,
    origin_latency: Duration,
    chart: Option<PathBuf>,
}

const USAGE: &str =
    "usage: herd [--rate REQ_PER_S] [--duration SECONDS] [--origin-ms MS] [--chart SVG]
       herd --flush [--keys N] [--callers N] [--origin-ms MS] [--limit N] [--queue-ms MS]
       herd --batch [--pages N] [--page-size N] [--ids N] [--concurrency N] [--origin-ms MS] [--row-us US]

One hot key under steady load, once per strategy:
  --rate        requests per second on the hot key (default 2000)
  --duration    seconds of load per strategy (default 3)
  --origin-ms   origin latency in milliseconds (default 50)
  --chart       also draw origin calls per 100 ms for each strategy into this SVG file
Values are fresh for 500 ms (the strategies' #[cached] attributes).

--flush: many keys expiring together, with and without an admission limit
(`herd --flush --help` lists its flags).

--batch: pages of ids with Zipf popularity, one cached load per id against batch loads
(`herd --batch --help` lists its flags).

--fleet N: the herd across N replicas sharing one Redis (or, with --cluster, a local
Redis Cluster), with and without the fleet lease (`herd --fleet 1 --help`).

--fleet N --flush: many keys missing at once across N replicas, under an admission limit
per replica and one for the whole fleet (`herd --fleet 8 --flush --help`).";

fn parse(args: impl Iterator<Item = String>) -> Result<Settings, String> {
    let mut settings = Settings {
        rate: 2_000,
        duration: Duration::from_secs(3),
        origin_latency: Duration::from_millis(50),
        chart: None,
    };
    let mut args = args.peekable();
    while let Some(flag) = args.next() {
        match flag.as_str() {
            "--help" | "-h" => return Err(String::new()),
            "--rate" | "--duration" | "--origin-ms" | "--chart" => {}
            other => return Err(format!("unknown flag `{other}`")),
        }
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let number = |what: &str| whole_number(&flag, &value, what);
        match flag.as_str() {
            "--rate" => settings.rate = number("requests per second")?,
            "--duration" => settings.duration = Duration::from_secs(number("seconds")?),
            "--origin-ms" => {
                settings.origin_latency = Duration::from_millis(number("milliseconds")?)
            }
            "--chart" => settings.chart = Some(PathBuf::from(value)),
            _ => unreachable!("every flag was matched above"),
        }
    }
    Ok(settings)
}

/// What a mode's flags that did not parse come to: its usage when they asked for it (an
/// empty message, from `--help`), else the message and the usage, as an error.
/// The arguments less `flag`, when they hold it (they ask for that mode), else `None`.
fn mode_args(flag: &str, args: impl Iterator<Item = String>) -> Option<Vec<String>> {
    let mut args: Vec<String> = args.collect();
    let at = args.iter().position(|a| a == flag)?;
    args.remove(at);
    Some(args)
}

fn refused(mode: &str, usage: &str, message: &str) -> ExitCode {
    if message.is_empty() {
        println!("{usage}");
        return ExitCode::SUCCESS;
    }
    eprintln!("{mode}: {message}\n{usage}");
    ExitCode::from(2)
}

/// A flag's value as a whole number above zero, or the message that says it is not.
fn whole_number(flag: &str, value: &str, what: &str) -> Result<u64, String> {
    match value.parse::<u64>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!(
            "{flag} takes a whole number of {what} above zero, not `{value}`"
        )),
    }
}

/// The slow origin: counts calls, when each started, and how many run at once.
#[derive(Default)]
struct Database {
    calls: AtomicUsize,
    calls_at: Mutex<Vec<Instant>>,
    running: AtomicUsize,
    max_running: AtomicUsize,
}

impl Database {
    async fn load_profile(&self, id: u64, latency: Duration) -> Result<u64, stampede::Error> {
        let _ = id;
        let call = self.calls.fetch_add(1, Ordering::SeqCst) as u64;
        self.calls_at.lock().unwrap().push(Instant::now());
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_running.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(latency).await;
        self.running.fetch_sub(1, Ordering::SeqCst);
        Ok(call)
    }
}

/// The hot key every request asks for.
const KEY: u64 = 42;

// One annotated function per strategy: the same origin, four attributes.

#[cached(fresh = "500ms", coalesce = false, skip(db, latency))]
async fn unprotected(
    id: u64,
    db: Arc<Database>,
    latency: Duration,
) -> Result<u64, stampede::Error> {
    db.load_profile(id, latency).await
}

#[cached(fresh = "500ms", skip(db, latency))]
async fn coalesced(id: u64, db: Arc<Database>, latency: Duration) -> Result<u64, stampede::Error> {
    db.load_profile(id, latency).await
}

#[cached(fresh = "500ms", stale = "500ms", skip(db, latency))]
async fn stale_while_revalidate(
    id: u64,
    db: Arc<Database>,
    latency: Duration,
) -> Result<u64, stampede::Error> {
    db.load_profile(id, latency).await
}

#[cached(fresh = "500ms", xfetch(beta = 1.0), skip(db, latency))]
async fn early_refresh(
    id: u64,
    db: Arc<Database>,
    latency: Duration,
) -> Result<u64, stampede::Error> {
    db.load_profile(id, latency).await
}

// The README's quickstart shape: a borrowed handle, a stale window and XFetch. Skipped,
// the handle keeps the function inline, and the caller that triggers a refresh waits for
// it; cloned, the function is detached and nobody waits.

#[cached(fresh = "500ms", stale = "500ms", xfetch, key = id, skip(db, latency))]
async fn quickstart_skipped(
    id: u64,
    db: &Arc<Database>,
    latency: Duration,
) -> Result<u64, stampede::Error> {
    db.load_profile(id, latency).await
}

#[cached(fresh = "500ms", stale = "500ms", xfetch, key = id, clone(db), skip(latency))]
async fn quickstart_cloned(
    id: u64,
    db: &Arc<Database>,
    latency: Duration,
) -> Result<u64, stampede::Error> {
    db.load_profile(id, latency).await
}

/// How long every strategy's values are fresh (the attributes above).
const FRESH: Duration = Duration::from_millis(500);

#[derive(Clone, Copy)]
enum Strategy {
    NoProtection,
    Coalescing,
    StaleWindow,
    XFetch,
    QuickstartSkipped,
    QuickstartCloned,
}

impl Strategy {
    const ALL: [Strategy; 6] = [
        Strategy::NoProtection,
        Strategy::Coalescing,
        Strategy::StaleWindow,
        Strategy::XFetch,
        Strategy::QuickstartSkipped,
        Strategy::QuickstartCloned,
    ];

    fn name(self) -> &'static str {
        match self {
            Strategy::NoProtection => "no protection",
            Strategy::Coalescing => "coalescing",
            Strategy::StaleWindow => "coalescing + stale window",
            Strategy::XFetch => "coalescing + XFetch",
            Strategy::QuickstartSkipped => "quickstart, skip(db)",
            Strategy::QuickstartCloned => "quickstart, clone(db)",
        }
    }

    async fn call(self, db: Arc<Database>, latency: Duration) -> Result<u64, stampede::Error> {
        match self {
            Strategy::NoProtection => unprotected(KEY, db, latency).await,
            Strategy::Coalescing => coalesced(KEY, db, latency).await,
            Strategy::StaleWindow => stale_while_revalidate(KEY, db, latency).await,
            Strategy::XFetch => early_refresh(KEY, db, latency).await,
            Strategy::QuickstartSkipped => quickstart_skipped(KEY, &db, latency).await,
            Strategy::QuickstartCloned => quickstart_cloned(KEY, &db, latency).await,
        }
    }

    fn stats(self) -> stampede::Stats {
        match self {
            Strategy::NoProtection => UNPROTECTED.stats(),
            Strategy::Coalescing => COALESCED.stats(),
            Strategy::StaleWindow => STALE_WHILE_REVALIDATE.stats(),
            Strategy::XFetch => EARLY_REFRESH.stats(),
            Strategy::QuickstartSkipped => QUICKSTART_SKIPPED.stats(),
            Strategy::QuickstartCloned => QUICKSTART_CLONED.stats(),
        }
    }
}

struct Row {
    requests: usize,
    origin_calls: usize,
    max_concurrent: usize,
    p50: Duration,
    p99: Duration,
    /// The slowest caller: with a stale window, the one that triggered a refresh inline.
    max: Duration,
    stale_served: u64,
    /// When each origin call after the warm-up started, from the start of load.
    origin_calls_at: Vec<Duration>,
}

async fn run(settings: &Settings, strategy: Strategy) -> Row {
    let db = Arc::new(Database::default());
    let latency = settings.origin_latency;
    // Warm the key first: the table is about expiries under load, not the cold start.
    let _ = strategy.call(db.clone(), latency).await;
    let warm_calls = db.calls.load(Ordering::SeqCst);
    let stale_before = strategy.stats().stale_hits;
    let (latencies_tx, mut latencies_rx) = tokio::sync::mpsc::unbounded_channel();
    let started = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut owed = 0.0;
    let per_tick = settings.rate as f64 / 1_000.0;
    let mut requests = 0;
    while started.elapsed() < settings.duration {
        tick.tick().await;
        owed += per_tick;
        while owed >= 1.0 {
            owed -= 1.0;
            requests += 1;
            let (db, tx) = (db.clone(), latencies_tx.clone());
            tokio::spawn(async move {
                let asked = Instant::now();
                let answer = strategy.call(db, latency).await;
                let _ = tx.send((asked.elapsed(), answer.is_ok()));
            });
        }
    }
    drop(latencies_tx);
    let mut latencies = Vec::with_capacity(requests);
    while let Some((latency, _ok)) = latencies_rx.recv().await {
        latencies.push(latency);
    }
    latencies.sort();
    let origin_calls_at = db.calls_at.lock().unwrap()[warm_calls..]
        .iter()
        .map(|&at| at.saturating_duration_since(started))
        .collect();
    let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize];
    Row {
        requests,
        origin_calls: db.calls.load(Ordering::SeqCst) - warm_calls,
        max_concurrent: db.max_running.load(Ordering::SeqCst),
        p50: at(0.50),
        p99: at(0.99),
        max: at(1.0),
        stale_served: strategy.stats().stale_hits - stale_before,
        origin_calls_at,
    }
}

fn main() -> ExitCode {
    // Before `--flush`: `--fleet N --flush` is the fleet's flush.
    #[cfg(feature = "redis")]
    if let Some(code) = fleet::dispatch(std::env::args().skip(1)) {
        return code;
    }
    if let Some(code) = flush::dispatch(std::env::args().skip(1)) {
        return code;
    }
    if let Some(code) = batch::dispatch(std::env::args().skip(1)) {
        return code;
    }
    // The README's command builds the herd on memory alone (`--no-default-features`): the
    // Redis client is most of the build, and only `--fleet` uses it.
    #[cfg(not(feature = "redis"))]
    if std::env::args().any(|arg| arg == "--fleet") {
        eprintln!(
            "herd --fleet: this build has no Redis client (built with --no-default-features); \
             run it with the default features:\n  cargo run --release --example herd -- --fleet 8"
        );
        return ExitCode::from(2);
    }
    let settings = match parse(std::env::args().skip(1)) {
        Ok(settings) => settings,
        Err(message) => return refused("herd", USAGE, &message),
    };
    let runtime = match tokio_runtime() {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
    // With coalescing a value lives fresh + one reload, so that is the expiry period.
    let period = FRESH + settings.origin_latency;
    let expiries = (settings.duration.as_secs_f64() / period.as_secs_f64())
        .floor()
        .max(1.0);
    println!(
        "one hot key, {} req/s for {:?}, origin {:?}, fresh {:?} (about {:.0} expiries; rate × latency = {:.0} callers per expiry)\n",
        settings.rate,
        settings.duration,
        settings.origin_latency,
        FRESH,
        expiries,
        settings.rate as f64 * settings.origin_latency.as_secs_f64(),
    );
    println!(
        "{:<27} {:>9} {:>13} {:>11} {:>15} {:>10} {:>10} {:>10} {:>13}",
        "strategy",
        "requests",
        "origin calls",
        "per expiry",
        "max concurrent",
        "p50",
        "p99",
        "max",
        "stale served"
    );
    let mut origin_calls_at = Vec::new();
    for strategy in Strategy::ALL {
        let row = runtime.block_on(run(&settings, strategy));
        println!(
            "{:<27} {:>9} {:>13} {:>11.1} {:>15} {:>10} {:>10} {:>10} {:>13}",
            strategy.name(),
            row.requests,
            row.origin_calls,
            row.origin_calls as f64 / expiries,
            row.max_concurrent,
            format!("{:.2?}", row.p50),
            format!("{:.2?}", row.p99),
            format!("{:.2?}", row.max),
            row.stale_served,
        );
        origin_calls_at.push((strategy.name(), row.origin_calls_at));
    }
    if let Some(path) = &settings.chart {
        let title = format!(
            "Origin calls per 100 ms: one hot key, {} req/s, origin {:?}, fresh {:?}",
            settings.rate, settings.origin_latency, FRESH
        );
        if let Err(e) = chart::draw(path, &title, settings.duration, &origin_calls_at) {
            eprintln!("herd: cannot draw {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
        println!("\nchart: {}", path.display());
    }
    ExitCode::SUCCESS
}

/// The multi-threaded runtime every scenario runs on, or the exit code when it cannot start.
fn tokio_runtime() -> Result<tokio::runtime::Runtime, ExitCode> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| {
            eprintln!("herd: cannot start the Tokio runtime: {e}");
            ExitCode::FAILURE
        })
}
