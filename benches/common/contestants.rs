//! The hit groups' contestants: one cached function per library, same key, same value,
//! each bounded to `CAPACITY` entries with a `TTL`, as a user who needs both would write it.
use super::{profile, Profile, CAPACITY, TTL};
use std::sync::LazyLock;

/// The origin behind every cached function; never reached on a hit.
async fn load_profile(id: u64) -> Result<Profile, stampede::Error> {
    std::hint::black_box(id);
    Ok(profile())
}

// stampede: its attribute on the same function (fresh for `TTL`, `CAPACITY` entries).
#[stampede::cached(fresh = "1h", capacity = 10_000, local)]
pub async fn stampede_profile(id: u64) -> Result<Profile, stampede::Error> {
    load_profile(id).await
}

// The `cached` crate's attribute, plain (concurrent misses each call the origin) and with
// per-key write synchronization (concurrent misses of one key call it once).
#[cached::proc_macro::cached(max_size = 10_000, ttl_secs = 3_600)]
pub async fn cached_profile(id: u64) -> Result<Profile, stampede::Error> {
    load_profile(id).await
}

#[cached::proc_macro::cached(max_size = 10_000, ttl_secs = 3_600, sync_writes = "by_key")]
pub async fn cached_by_key_profile(id: u64) -> Result<Profile, stampede::Error> {
    load_profile(id).await
}

/// Raw moka: no expiry (the baseline a hit is judged against), as bare as a cache gets.
pub static MOKA_SYNC: LazyLock<moka::sync::Cache<u64, Profile>> =
    LazyLock::new(|| moka::sync::Cache::new(CAPACITY));

/// Raw moka with the expiry stampede's store is configured with.
pub static MOKA_SYNC_TTL: LazyLock<moka::sync::Cache<u64, Profile>> = LazyLock::new(|| {
    moka::sync::Cache::builder()
        .max_capacity(CAPACITY)
        .time_to_live(TTL)
        .build()
});

/// moka's async cache with the same settings.
pub static MOKA_FUTURE: LazyLock<moka::future::Cache<u64, Profile>> = LazyLock::new(|| {
    moka::future::Cache::builder()
        .max_capacity(CAPACITY)
        .time_to_live(TTL)
        .build()
});

/// Puts `key` in every contestant, so each call after this is a fresh hit.
pub async fn fill(key: u64) {
    stampede_profile(key).await.expect("the origin succeeds");
    cached_profile(key).await.expect("the origin succeeds");
    cached_by_key_profile(key)
        .await
        .expect("the origin succeeds");
    MOKA_SYNC.insert(key, profile());
    MOKA_SYNC_TTL.insert(key, profile());
    MOKA_FUTURE.insert(key, profile()).await;
    assert_eq!(
        STAMPEDE_PROFILE.stats().origin_calls,
        1,
        "stampede was filled once"
    );
}
