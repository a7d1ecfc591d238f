//! Fresh hits for an instruction counter: `hit-instructions <contestant> <hits>` fills one
//! key, then makes `<hits>` fresh hits of it inside `measured`, the only function
//! `scripts/hit-instructions.py` has callgrind count (`--toggle-collect`). Two run lengths
//! give the instructions per hit, with start-up and the runtime entry cancelled out.
//!
//! The key is a `u64` and the value a `String`, cloned out on every hit by both
//! contestants:
//! - `stampede`: the function `#[cached]` makes, with the fresh-hit bench's settings;
//! - `moka`: `moka::sync::Cache::get` with moka's default settings (its default hasher,
//!   no expiry), the map stampede's memory store is built on.
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

fn moka(hits: u64) {
    let cache: moka::sync::Cache<u64, String> = moka::sync::Cache::new(10_000);
    cache.insert(KEY, format!("profile {KEY}"));
    measured(hits, &mut |key| drop(black_box(cache.get(&key))));
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let hits = args.get(1).and_then(|hits| hits.parse::<u64>().ok());
    match (args.first().map(String::as_str), hits) {
        (Some("stampede"), Some(hits)) => stampede(hits),
        (Some("moka"), Some(hits)) => moka(hits),
        _ => {
            eprintln!("usage: hit-instructions stampede|moka HITS");
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}
