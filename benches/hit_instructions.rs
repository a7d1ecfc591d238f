//! Fresh hits for an instruction counter: `hit-instructions <contestant> <hits>` fills one
//! key, then makes `<hits>` fresh hits of it inside `measured`, the only function
//! `scripts/hit-instructions.py` has callgrind count (`--toggle-collect`). Two run lengths
//! give the instructions per hit, with start-up and the runtime entry cancelled out.
//!
//! The key is a `u64` and the value a `String`, cloned out on every hit by both
//! contestants:
//! - `stampede`: the function `#[cached]` makes, with the fresh-hit bench's settings;
//! - `stampede-load`: `Cache::load` called directly with the same settings;
//! - `stampede-tagged`: the same, on a cache whose entries carry a tag (`CacheBuilder::tags`):
//!   what a hit of a tagged entry adds when no tag moved;
//! - `moka`: `moka::sync::Cache::get` with moka's default settings (its default hasher,
//!   no expiry), the map stampede's memory store is built on;
//! - `moka-ttl`: the same with a `time_to_live`, as stampede's store is configured.
use std::future::Future;
use std::hint::black_box;
use std::process::ExitCode;

const KEY: u64 = 42;

#[stampede::cached(fresh = "1h", capacity = 10_000, local)]
async fn stampede_profile(id: u64) -> Result<String, stampede::Error> {
    Ok(format!("profile {}", black_box(id)))
}

/// Every hit of a run, and nothing else, happens under this frame.
#[inline(never)]
fn measured(hits: u64, hit: &mut dyn FnMut(u64)) {
    for _ in 0..hits {
        hit(black_box(KEY));
    }
}

fn stampede(hits: u64) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a current-thread runtime");
    runtime.block_on(async {
        stampede_profile(KEY).await.expect("the origin succeeds");
        // A hit completes on its first poll, so polling it in place needs no waker.
        let waker = std::task::Waker::noop();
        let mut context = std::task::Context::from_waker(waker);
        measured(hits, &mut |key| {
            let mut call = std::pin::pin!(stampede_profile(key));
            match call.as_mut().poll(&mut context) {
                std::task::Poll::Ready(value) => drop(black_box(value)),
                std::task::Poll::Pending => panic!("a fresh hit completes on its first poll"),
            }
        });
        assert_eq!(STAMPEDE_PROFILE.stats().origin_calls, 1, "every call a hit");
        assert_eq!(STAMPEDE_PROFILE.stats().fresh_hits, hits);
    });
}

/// `Cache::load` called directly, as `stampede` but without the function `#[cached]`
/// writes around it: the difference is what that function costs.
fn stampede_load(hits: u64) {
    stampede_load_of(hits, false);
}

/// `Cache::load` on a cache built with `tagged` tags or without.
fn stampede_load_of(hits: u64, tagged: bool) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a current-thread runtime");
    let policy = stampede::Policy::builder("hit-instructions::load")
        .fresh(std::time::Duration::from_secs(3_600))
        .capacity(10_000)
        .build()
        .expect("a valid policy");
    let builder = stampede::Cache::<u64, String>::builder(policy);
    let cache = if tagged {
        builder
            .tags(|key: &u64, _: &String| [format!("profile:{key}")])
            .build()
    } else {
        builder.build()
    };
    runtime.block_on(async {
        let filled = cache.load(KEY, || async { Ok(format!("profile {KEY}")) });
        filled.await.expect("the origin succeeds");
        let waker = std::task::Waker::noop();
        let mut context = std::task::Context::from_waker(waker);
        measured(hits, &mut |key| {
            let mut call = std::pin::pin!(cache.load(key, || async { unreachable!("a hit") }));
            match call.as_mut().poll(&mut context) {
                std::task::Poll::Ready(value) => drop(black_box(value)),
                std::task::Poll::Pending => panic!("a fresh hit completes on its first poll"),
            }
        });
        assert_eq!(cache.stats().fresh_hits, hits, "every call a hit");
    });
}

fn moka(hits: u64, ttl: bool) {
    let mut builder = moka::sync::Cache::builder().max_capacity(10_000);
    if ttl {
        builder = builder.time_to_live(std::time::Duration::from_secs(3_600));
    }
    let cache: moka::sync::Cache<u64, String> = builder.build();
    cache.insert(KEY, format!("profile {KEY}"));
    measured(hits, &mut |key| drop(black_box(cache.get(&key))));
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let hits = args.get(1).and_then(|hits| hits.parse::<u64>().ok());
    match (args.first().map(String::as_str), hits) {
        (Some("stampede"), Some(hits)) => stampede(hits),
        (Some("stampede-load"), Some(hits)) => stampede_load(hits),
        (Some("stampede-tagged"), Some(hits)) => stampede_load_of(hits, true),
        (Some("moka"), Some(hits)) => moka(hits, false),
        (Some("moka-ttl"), Some(hits)) => moka(hits, true),
        _ => {
            eprintln!(
                "usage: hit-instructions stampede|stampede-load|stampede-tagged|moka|moka-ttl HITS"
            );
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}
