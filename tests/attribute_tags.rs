//! `#[cached(tags = ...)]`: entries tagged from their keys, retired by tag through the
//! process's runtime (every cache) or a function's handle (its cache alone), counted in
//! origin calls. Each test has tags of its own: every test of this binary shares the
//! process's runtime, where `stampede::invalidate_tag` reaches every cache.
use crate::common::{bounded, AppError};
use stampede::cached;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A database handle that is borrowed and skipped: not in the key, so not in the tags.
struct Db;

#[cached(
    fresh = "60s",
    key = (tenant, id),
    skip(db),
    tags = [format!("tenant:{tenant}"), "profiles".to_owned()],
)]
async fn profile(tenant: u32, id: u64, db: &Db) -> Result<String, AppError> {
    let _ = db;
    Ok(format!("{tenant}/{id}"))
}

#[tokio::test]
async fn invalidating_a_tag_loads_its_entries_again_and_no_others() {
    let keys = [(7, 1), (7, 2), (8, 1)];
    for (tenant, id) in keys {
        let loaded = bounded(profile(tenant, id, &Db)).await.unwrap();
        assert_eq!(loaded, format!("{tenant}/{id}"));
    }
    for (tenant, id) in keys {
        bounded(profile(tenant, id, &Db)).await.unwrap();
    }
    assert_eq!(PROFILE.stats().origin_calls, 3, "the second round hits");

    bounded(stampede::invalidate_tag("tenant:7")).await.unwrap();
    for (tenant, id) in keys {
        bounded(profile(tenant, id, &Db)).await.unwrap();
    }
    assert_eq!(
        PROFILE.stats().origin_calls,
        5,
        "tenant 7's two entries loaded again, tenant 8's a hit"
    );
    // The entries loaded since are stored, under the tag's new version.
    bounded(profile(7, 1, &Db)).await.unwrap();
    assert_eq!(PROFILE.stats().origin_calls, 5);

    // A tag no entry carries retires nothing.
    bounded(stampede::invalidate_tag("tenant:9")).await.unwrap();
    bounded(profile(8, 1, &Db)).await.unwrap();
    assert_eq!(PROFILE.stats().origin_calls, 5);
}

#[cached(fresh = "60s", tags = [format!("product:{product}")])]
async fn price(product: u64) -> u64 {
    product * 100
}

#[cached(fresh = "60s", tags = [format!("product:{product}")])]
async fn stock(product: u64) -> u64 {
    product + 1
}

#[tokio::test]
async fn a_handle_invalidates_its_own_functions_entries_only() {
    assert_eq!(bounded(price(42)).await, 4_200);
    assert_eq!(bounded(stock(42)).await, 43);
    bounded(price(43)).await;

    let product = 42;
    bounded(PRICE.invalidate_tag(format!("product:{product}")))
        .await
        .unwrap();
    bounded(price(42)).await;
    bounded(price(43)).await;
    bounded(stock(42)).await;
    assert_eq!(PRICE.stats().origin_calls, 3, "price of 42 loaded again");
    assert_eq!(STOCK.stats().origin_calls, 1, "stock keeps its entry");

    // Through the runtime, the tag reaches both functions.
    bounded(stampede::invalidate_tag(format!("product:{product}")))
        .await
        .unwrap();
    bounded(price(42)).await;
    bounded(stock(42)).await;
    assert_eq!(PRICE.stats().origin_calls, 4);
    assert_eq!(STOCK.stats().origin_calls, 2);
}

static GREETINGS: AtomicUsize = AtomicUsize::new(0);

/// Borrowed arguments: the tags see `name` and `lang` as the function does, `&str` (an
/// array of `&str` with a literal).
#[cached(fresh = "60s", tags = [name, "greetings"], key = (name, lang))]
async fn greeting(name: &str, lang: &str) -> String {
    GREETINGS.fetch_add(1, Ordering::SeqCst);
    match lang {
        "fr" => format!("bonjour {name}"),
        _ => format!("hello {name}"),
    }
}

#[tokio::test]
async fn tags_read_borrowed_arguments_from_the_key() {
    assert_eq!(bounded(greeting("ada", "en")).await, "hello ada");
    assert_eq!(bounded(greeting("ada", "fr")).await, "bonjour ada");
    assert_eq!(bounded(greeting("grace", "en")).await, "hello grace");
    bounded(GREETING.invalidate_tag("ada")).await.unwrap();
    assert_eq!(bounded(greeting("ada", "en")).await, "hello ada");
    assert_eq!(bounded(greeting("ada", "fr")).await, "bonjour ada");
    assert_eq!(bounded(greeting("grace", "en")).await, "hello grace");
    assert_eq!(GREETINGS.load(Ordering::SeqCst), 5, "grace's entry kept");
    bounded(GREETING.invalidate_tag("greetings")).await.unwrap();
    bounded(greeting("grace", "en")).await;
    assert_eq!(GREETINGS.load(Ordering::SeqCst), 6);
}

static ASKED: AtomicUsize = AtomicUsize::new(0);

/// In a batch, the batch argument's name stands for the one element of an entry's key.
#[cached(fresh = "60s", batch(ids), tags = [format!("item:{ids}"), format!("shelf:{}", ids / 10)])]
async fn items(ids: Vec<u64>) -> HashMap<u64, String> {
    ASKED.fetch_add(ids.len(), Ordering::SeqCst);
    ids.into_iter()
        .map(|id| (id, format!("item-{id}")))
        .collect()
}

#[tokio::test]
async fn a_batch_tags_each_element_by_its_own_key() {
    let found = bounded(items(vec![1, 2, 11])).await;
    assert_eq!(found.len(), 3);
    bounded(ITEMS.invalidate_tag("item:2")).await.unwrap();
    bounded(items(vec![1, 2, 11])).await;
    assert_eq!(ASKED.load(Ordering::SeqCst), 4, "only 2 asked again");
    bounded(ITEMS.invalidate_tag("shelf:0")).await.unwrap();
    bounded(items(vec![1, 2, 11])).await;
    assert_eq!(
        ASKED.load(Ordering::SeqCst),
        6,
        "1 and 2 asked again, 11 kept"
    );
}

static SETTINGS: AtomicUsize = AtomicUsize::new(0);

/// A plain `fn`: its entries are tagged as an `async fn`'s are.
#[cached(fresh = "60s", tags = [format!("settings:{section}")])]
fn setting(section: u32, name: String) -> usize {
    let _ = (section, name);
    SETTINGS.fetch_add(1, Ordering::SeqCst) + 1
}

#[tokio::test]
async fn a_plain_fns_entries_are_tagged_too() {
    assert_eq!(setting(1, "a".into()), 1);
    assert_eq!(setting(2, "a".into()), 2);
    assert_eq!(setting(1, "a".into()), 1, "a hit");
    bounded(SETTING.invalidate_tag("settings:1")).await.unwrap();
    assert_eq!(setting(1, "a".into()), 3);
    assert_eq!(setting(2, "a".into()), 2, "section 2 kept");
}
