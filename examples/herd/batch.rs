//! `herd --batch`: pages of ids, as a product list or a feed reads them. Each page asks
//! for `--page-size` ids out of `--ids`, drawn with Zipf popularity (a few ids on most
//! pages), from `--concurrency` tasks at once. The origin is a database: every query costs
//! `--origin-ms`, plus `--row-us` per row it returns.
//!
//! Three strategies on the same pages: one cached load per id (what a per-key `#[cached]`
//! function does), one batch load per page (`#[cached(batch(ids))]` on a function whose
//! other arguments differ per call), and a batch load through a batcher that every page
//! shares (`#[cached(batch(ids))]`, whose calls with the same other arguments share origin
//! calls).
//!
//! ```text
//! cargo run --release --example herd --no-default-features -- --batch
//! ```
use stampede::{Cache, Policy, Runtime};
use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const USAGE: &str = "usage: herd --batch [--pages N] [--page-size N] [--ids N] [--concurrency N] [--origin-ms MS] [--row-us US]
  --pages        pages read in all, per strategy (default 20000)
  --page-size    ids per page (default 50)
  --ids          distinct ids, with Zipf popularity (default 10000)
  --concurrency  pages read at once (default 32)
  --origin-ms    the cost of one query, in milliseconds (default 2)
  --row-us       the cost of each row a query returns, in microseconds (default 20)";

#[derive(Debug, Clone)]
struct Settings {
    pages: u64,
    page_size: u64,
    ids: u64,
    concurrency: u64,
    query: Duration,
    row: Duration,
}

/// Runs the batch scenario when the arguments ask for it (`--batch`), else `None`.
pub fn dispatch(args: impl Iterator<Item = String>) -> Option<ExitCode> {
    let args = super::mode_args("--batch", args)?;
    Some(match parse(args.into_iter()) {
        Ok(settings) => run(&settings),
        Err(message) => super::refused("herd --batch", USAGE, &message),
    })
}

fn parse(args: impl Iterator<Item = String>) -> Result<Settings, String> {
    let mut settings = Settings {
        pages: 20_000,
        page_size: 50,
        ids: 10_000,
        concurrency: 32,
        query: Duration::from_millis(2),
        row: Duration::from_micros(20),
    };
    let mut args = args.peekable();
    while let Some(flag) = args.next() {
        let what = match flag.as_str() {
            "--help" | "-h" => return Err(String::new()),
            "--pages" | "--page-size" | "--ids" | "--concurrency" => "items",
            "--origin-ms" => "milliseconds",
            "--row-us" => "microseconds",
            other => return Err(format!("unknown flag `{other}`")),
        };
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let number = super::whole_number(&flag, &value, what)?;
        match flag.as_str() {
            "--pages" => settings.pages = number,
            "--page-size" => settings.page_size = number,
            "--ids" => settings.ids = number,
            "--concurrency" => settings.concurrency = number,
            "--origin-ms" => settings.query = Duration::from_millis(number),
            "--row-us" => settings.row = Duration::from_micros(number),
            _ => unreachable!("every flag was matched above"),
        }
    }
    if settings.page_size > settings.ids {
        return Err("--page-size cannot pass --ids".to_owned());
    }
    Ok(settings)
}

/// The database: counts queries and rows, and takes the time they cost.
#[derive(Default)]
struct Database {
    queries: AtomicU64,
    rows: AtomicU64,
}

impl Database {
    async fn query(&self, ids: Vec<u64>, settings: &Settings) -> HashMap<u64, u64> {
        self.queries.fetch_add(1, Ordering::Relaxed);
        self.rows.fetch_add(ids.len() as u64, Ordering::Relaxed);
        tokio::time::sleep(settings.query + settings.row * ids.len() as u32).await;
        ids.into_iter().map(|id| (id, id * 10)).collect()
    }
}

#[derive(Clone, Copy)]
enum Strategy {
    PerKey,
    PerPage,
    Shared,
}

impl Strategy {
    fn name(self) -> &'static str {
        match self {
            Strategy::PerKey => "one load per id (per-key #[cached])",
            Strategy::PerPage => "one batch per page (load_many)",
            Strategy::Shared => "batches sharing origin calls (batch(ids))",
        }
    }
}

struct Row {
    queries: u64,
    rows: u64,
    elapsed: Duration,
    p50: Duration,
    p99: Duration,
}

/// The pages, the same for every strategy: ids drawn with Zipf popularity (s = 1).
fn pages(settings: &Settings) -> Vec<Vec<u64>> {
    let weights: Vec<f64> = (1..=settings.ids).map(|rank| 1.0 / rank as f64).collect();
    let total: f64 = weights.iter().sum();
    let mut cumulative = Vec::with_capacity(weights.len());
    let mut sum = 0.0;
    for weight in weights {
        sum += weight / total;
        cumulative.push(sum);
    }
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    let mut draw = move || {
        // xorshift64*: deterministic pages, so every strategy reads the same ones.
        seed ^= seed >> 12;
        seed ^= seed << 25;
        seed ^= seed >> 27;
        (seed.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    };
    (0..settings.pages)
        .map(|_| {
            let mut page = Vec::with_capacity(settings.page_size as usize);
            while (page.len() as u64) < settings.page_size {
                let at = cumulative.partition_point(|c| *c < draw());
                let id = (at as u64).min(settings.ids - 1) + 1;
                if !page.contains(&id) {
                    page.push(id);
                }
            }
            page
        })
        .collect()
}

async fn read(settings: &Settings, strategy: Strategy, pages: Arc<Vec<Vec<u64>>>) -> Row {
    let runtime = Runtime::builder().build().expect("a memory runtime");
    let policy = Policy::builder("herd-batch")
        .fresh(Duration::from_secs(600))
        .capacity(settings.ids * 2)
        .build()
        .expect("the batch policy is valid");
    let db = Arc::new(Database::default());
    let per_key: Cache<u64, u64> = Cache::builder(policy.clone()).runtime(&runtime).build();
    let batched: Cache<u64, Option<u64>> = Cache::builder(policy).runtime(&runtime).build();
    let shared = Arc::new(batched.batcher({
        let (db, settings) = (db.clone(), settings.clone());
        move |ids: Vec<u64>| {
            let (db, settings) = (db.clone(), settings.clone());
            async move { Ok(db.query(ids, &settings).await) }
        }
    }));
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let tasks: Vec<_> = (0..settings.concurrency)
        .map(|_| {
            let (settings, pages, next, db) =
                (settings.clone(), pages.clone(), next.clone(), db.clone());
            let (per_key, batched, shared) = (per_key.clone(), batched.clone(), shared.clone());
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                loop {
                    let page = next.fetch_add(1, Ordering::Relaxed) as usize;
                    let Some(ids) = pages.get(page) else {
                        return latencies;
                    };
                    let asked = Instant::now();
                    let found = match strategy {
                        Strategy::PerKey => {
                            let loads = ids.iter().map(|&id| {
                                let (db, settings) = (db.clone(), settings.clone());
                                per_key.load(id, move || async move {
                                    Ok(db.query(vec![id], &settings).await[&id])
                                })
                            });
                            futures_util::future::join_all(loads).await.len()
                        }
                        Strategy::PerPage => {
                            let (db, settings) = (db.clone(), settings.clone());
                            let origin = move |ids: Vec<u64>| {
                                let (db, settings) = (db.clone(), settings.clone());
                                async move { Ok(db.query(ids, &settings).await) }
                            };
                            batched
                                .load_many(ids.clone(), origin)
                                .await
                                .map_or(0, |f| f.len())
                        }
                        Strategy::Shared => {
                            shared.load_many(ids.clone()).await.map_or(0, |f| f.len())
                        }
                    };
                    assert_eq!(found, ids.len(), "every id of the page is found");
                    latencies.push(asked.elapsed());
                }
            })
        })
        .collect();
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await.expect("a page reader panicked"));
    }
    let elapsed = started.elapsed();
    latencies.sort_unstable();
    let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize];
    Row {
        queries: db.queries.load(Ordering::Relaxed),
        rows: db.rows.load(Ordering::Relaxed),
        elapsed,
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
        "batch: {} pages of {} ids out of {} (Zipf), {} at once; a query costs {:?} + {:?} per row\n",
        settings.pages, settings.page_size, settings.ids, settings.concurrency, settings.query, settings.row,
    );
    println!(
        "{:<44} {:>9} {:>11} {:>10} {:>10} {:>10} {:>10}",
        "strategy", "queries", "rows", "rows/query", "pages/s", "p50", "p99"
    );
    let pages = Arc::new(pages(settings));
    for strategy in [Strategy::PerKey, Strategy::PerPage, Strategy::Shared] {
        let row = runtime.block_on(read(settings, strategy, pages.clone()));
        println!(
            "{:<44} {:>9} {:>11} {:>10.1} {:>10.0} {:>10} {:>10}",
            strategy.name(),
            row.queries,
            row.rows,
            row.rows as f64 / row.queries.max(1) as f64,
            settings.pages as f64 / row.elapsed.as_secs_f64(),
            format!("{:.2?}", row.p50),
            format!("{:.2?}", row.p99),
        );
    }
    ExitCode::SUCCESS
}
