//! `herd --fleet N --flush`: many keys missing at once across N replicas, under an
//! admission limit of each replica's against one of the whole fleet's.
//!
//! ```text
//! cargo run --release --example herd -- --fleet 8 --flush --keys 2000 --admission-fleet 40
//! ```
//!
//! Each replica is its own `stampede::Runtime` on one `redis-server` the example starts.
//! Every key is asked for once, spread over the replicas, against an origin that counts how
//! many calls run at once. Three runs: a limit of L per replica (the fleet may run N × L),
//! a fleet-wide limit of L, and the fleet-wide limit again with one replica killed halfway
//! (its Tokio runtime shut down: its loads and their permits dropped at once; a process
//! killed outright has its permits lapse within `permit_ttl` instead, which
//! `tests/fleet_admission.rs` measures). Printed per run: origin calls, the most at once,
//! the average at once while work was queued, and the most at once in each 100 ms.
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use stampede::{Backend, Cache, Policy, Runtime};

pub const USAGE: &str =
    "usage: herd --fleet N --flush [--keys K] [--origin-ms MS] [--admission-fleet L] [--chart SVG]

Many keys missing at once across N replicas (independent runtimes in this process)
sharing one Redis, under a limit per replica, then a limit for the whole fleet, then
the fleet-wide limit with one replica killed halfway:
  --fleet            replicas, 2..=64
  --keys             keys flushed, each asked for once (default 2000)
  --origin-ms        origin latency in milliseconds (default 40)
  --admission-fleet  the limit L: each replica's in the first run, the fleet's after (default 40)
  --chart            also draw origin calls per 100 ms for each run into this SVG file
Needs `redis-server` and `redis-cli` on PATH (apt-get install redis-server).";

struct Settings {
    replicas: usize,
    keys: u64,
    origin_latency: Duration,
    limit: usize,
    chart: Option<std::path::PathBuf>,
}

/// Runs `herd --fleet N --flush …` when the arguments ask for both.
pub fn dispatch(args: &[String]) -> Option<ExitCode> {
    if !args.iter().any(|a| a == "--flush") {
        return None;
    }
    Some(match parse(args) {
        Ok(settings) => run(&settings),
        Err(message) => super::super::refused("herd --fleet --flush", USAGE, &message),
    })
}

fn parse(args: &[String]) -> Result<Settings, String> {
    let mut settings = Settings {
        replicas: 0,
        keys: 2_000,
        origin_latency: Duration::from_millis(40),
        limit: 40,
        chart: None,
    };
    let mut args = args.iter();
    while let Some(flag) = args.next() {
        match flag.as_str() {
            "--help" | "-h" => return Err(String::new()),
            "--flush" => continue,
            "--fleet" | "--keys" | "--origin-ms" | "--admission-fleet" | "--chart" => {}
            other => return Err(format!("unknown flag `{other}`")),
        }
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let number = |what: &str| super::super::whole_number(flag, value, what);
        match flag.as_str() {
            "--fleet" => match number("replicas")? {
                n @ 2..=64 => settings.replicas = n as usize,
                n => return Err(format!("--fleet --flush takes 2 to 64 replicas, not {n}")),
            },
            "--keys" => match number("keys")? {
                n @ 1..=100_000 => settings.keys = n,
                n => return Err(format!("--keys takes 1 to 100000 keys, not {n}")),
            },
            "--origin-ms" => {
                settings.origin_latency = Duration::from_millis(number("milliseconds")?)
            }
            "--admission-fleet" => match number("permits")? {
                n @ 1..=10_000 => settings.limit = n as usize,
                n => {
                    return Err(format!(
                        "--admission-fleet takes 1 to 10000 permits, not {n}"
                    ))
                }
            },
            "--chart" => settings.chart = Some(value.into()),
            _ => unreachable!("every flag was matched above"),
        }
    }
    if settings.replicas == 0 {
        return Err("--fleet needs a number of replicas".into());
    }
    Ok(settings)
}

/// The origin: counts its calls and how many run at once, and when each ran.
#[derive(Default)]
struct Origin {
    running: AtomicUsize,
    max: AtomicUsize,
    calls: Mutex<Vec<(Instant, Instant)>>,
}

impl Origin {
    async fn call(&self, key: u64, latency: Duration) -> Result<u64, stampede::Error> {
        let started = Instant::now();
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.max.fetch_max(now, Ordering::SeqCst);
        // Counted out however the call ends (a killed replica drops it).
        struct Out<'a>(&'a Origin, Instant);
        impl Drop for Out<'_> {
            fn drop(&mut self) {
                self.0.running.fetch_sub(1, Ordering::SeqCst);
                let ended = Instant::now();
                self.0.calls.lock().unwrap().push((self.1, ended));
            }
        }
        let _out = Out(self, started);
        tokio::time::sleep(latency).await;
        Ok(key)
    }
}

struct Row {
    calls: usize,
    max: usize,
    average: f64,
    took: Duration,
    /// The most calls at once in each 100 ms.
    per_window: Vec<usize>,
    /// When each call started, from the start.
    started_at: Vec<Duration>,
    lost: usize,
}

#[derive(Clone, Copy, PartialEq)]
enum Run {
    PerReplica,
    Fleet,
    FleetKilled,
}

fn replica(url: &str, limit: usize, run: Run) -> Runtime {
    let builder = Runtime::builder().backend(Backend::redis(url)).admission(
        "db",
        limit,
        Duration::from_secs(120),
    );
    match run {
        Run::PerReplica => builder,
        Run::Fleet | Run::FleetKilled => builder.admission_fleet_wide("db", None),
    }
    .build()
    .expect("the flush's runtimes are valid")
}

async fn flush(settings: &Settings, url: &str, run: Run, name: &str) -> Row {
    let replicas: Vec<Runtime> = (0..settings.replicas)
        .map(|_| replica(url, settings.limit, run))
        .collect();
    let policy = Policy::builder(name)
        .fresh(Duration::from_secs(600))
        .admission("db")
        .build()
        .expect("the flush's policy is valid");
    let caches: Vec<Cache<u64, u64>> = (replicas.iter())
        .map(|r| Cache::builder(policy.clone()).runtime(r).build())
        .collect();
    // The replica to kill runs on a Tokio runtime of its own.
    let mut doomed = Some(
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a Tokio runtime"),
    );
    let origin = Arc::new(Origin::default());
    let started = Instant::now();
    let mut loads = Vec::new();
    for key in 0..settings.keys {
        let at = key as usize % caches.len();
        let (cache, origin, latency) =
            (caches[at].clone(), origin.clone(), settings.origin_latency);
        let load = async move {
            cache
                .load(key, move || async move { origin.call(key, latency).await })
                .await
        };
        loads.push(
            if let Some(doomed) = doomed
                .as_ref()
                .filter(|_| at == 0 && run == Run::FleetKilled)
            {
                doomed.spawn(load)
            } else {
                tokio::spawn(load)
            },
        );
    }
    if run == Run::FleetKilled {
        let whole = settings.origin_latency * (settings.keys as u32) / (settings.limit as u32);
        tokio::time::sleep(whole / 2).await;
        if let Some(doomed) = doomed.take() {
            doomed.shutdown_background();
        }
    }
    let mut lost = 0;
    for load in loads {
        match load.await {
            Ok(Ok(_)) => {}
            Ok(Err(error)) => panic!("a load failed: {error}"),
            Err(_) => lost += 1,
        }
    }
    let took = started.elapsed();
    // Not dropped: a runtime cannot be dropped inside another's task.
    if let Some(doomed) = doomed.take() {
        doomed.shutdown_background();
    }
    let calls = origin.calls.lock().unwrap().clone();
    let last_start = calls.iter().map(|c| c.0).max().unwrap_or(started);
    let window = last_start.duration_since(started).as_secs_f64().max(1e-9);
    let busy: f64 = (calls.iter())
        .map(|&(s, e)| e.min(last_start).saturating_duration_since(s).as_secs_f64())
        .sum();
    let windows = (took.as_millis() / 100 + 1) as usize;
    let per_window = (0..windows)
        .map(|w| {
            let from = started + Duration::from_millis(100 * w as u64);
            let to = from + Duration::from_millis(100);
            // The most at once within the window: at some call's start inside it (or at
            // its opening).
            let mut instants: Vec<Instant> = (calls.iter())
                .map(|c| c.0)
                .filter(|&s| s >= from && s < to)
                .collect();
            instants.push(from);
            (instants.iter())
                .map(|&t| calls.iter().filter(|&&(s, e)| s <= t && t < e).count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    Row {
        calls: calls.len(),
        max: origin.max.load(Ordering::SeqCst),
        average: busy / window,
        took,
        per_window,
        started_at: calls.iter().map(|c| c.0.duration_since(started)).collect(),
        lost,
    }
}

fn run(settings: &Settings) -> ExitCode {
    let Some(redis) = testkit::RedisServer::start() else {
        eprintln!("herd --fleet --flush: needs `redis-server` and `redis-cli` on PATH (apt-get install redis-server)");
        return ExitCode::FAILURE;
    };
    let runtime = match super::super::tokio_runtime() {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
    println!(
        "fleet flush: {} keys across {} replicas on one redis-server, each asked for once, origin {:?}, limit {}\n",
        settings.keys, settings.replicas, settings.origin_latency, settings.limit
    );
    println!(
        "{:<44} {:>12} {:>13} {:>16} {:>10} {:>16}",
        "run", "origin calls", "max at once", "average queued", "took", "lost with it"
    );
    let runs = [
        (
            Run::PerReplica,
            format!("limit {} per replica", settings.limit),
        ),
        (Run::Fleet, format!("limit {} fleet-wide", settings.limit)),
        (
            Run::FleetKilled,
            format!("limit {} fleet-wide, a replica killed", settings.limit),
        ),
    ];
    let mut held = true;
    let mut charted = Vec::new();
    for (number, (run, name)) in runs.iter().enumerate() {
        let row = runtime.block_on(flush(
            settings,
            &redis.url(),
            *run,
            &format!("fleet-flush-{number}"),
        ));
        println!(
            "{:<44} {:>12} {:>13} {:>16.1} {:>10} {:>16}",
            name,
            row.calls,
            row.max,
            row.average,
            format!("{:.2?}", row.took),
            row.lost
        );
        let line: Vec<String> = row.per_window.iter().map(|n| n.to_string()).collect();
        println!("  most at once per 100 ms: {}", line.join(" "));
        if *run != Run::PerReplica {
            held &= row.max <= settings.limit;
        }
        charted.push((name.clone(), row.started_at));
    }
    if let Some(path) = &settings.chart {
        let strategies: Vec<(&str, Vec<Duration>)> = (charted.iter())
            .map(|(name, at)| (name.as_str(), at.clone()))
            .collect();
        let title = format!(
            "origin calls per 100 ms: {} keys across {} replicas",
            settings.keys, settings.replicas
        );
        let run = strategies
            .iter()
            .flat_map(|s| s.1.iter())
            .copied()
            .max()
            .unwrap_or_default();
        if let Err(e) = super::super::chart::draw(path, &title, run, &strategies) {
            eprintln!("herd --fleet --flush: cannot draw {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
        println!("\nchart: {}", path.display());
    }
    if !held {
        eprintln!("herd --fleet --flush: the fleet-wide limit was passed");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
