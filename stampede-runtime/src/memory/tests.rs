use super::*;
use std::hash::BuildHasher;

#[test]
fn each_cache_hashes_with_seeds_of_its_own() {
    let (one, other) = (seeded_hasher(), seeded_hasher());
    let keys = [0_u64, 1, 42, u64::MAX];
    let differ = keys
        .iter()
        .filter(|key| one.hash_one(key) != other.hash_one(key))
        .count();
    assert_eq!(differ, keys.len(), "no key hashes the same in both caches");
    assert_eq!(
        one.hash_one(42_u64),
        one.hash_one(42_u64),
        "stable within a cache"
    );
}
