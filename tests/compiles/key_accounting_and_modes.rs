//! Arguments used through a format string, inside a macro, and past a closure parameter
//! that does not shadow them (in `key` and in `tags`); and the leader mode chosen
//! explicitly.
use stampede::cached;

#[cached(fresh = "60s", key = format!("{tenant}:{}", id), key_type = String)]
async fn by_format(tenant: String, id: u64) -> u64 {
    tenant.len() as u64 + id
}

#[cached(fresh = "60s", key = format!("{r}:{id}", r = region), key_type = String)]
async fn by_named_format(region: String, id: u64) -> u64 {
    region.len() as u64 + id
}

#[cached(fresh = "60s", key = (0..1).map(|n| n + id).sum::<u64>(), key_type = u64)]
async fn through_a_closure(id: u64) -> u64 {
    id
}

/// Tags that use no argument are computable from any key, an expression's too.
#[cached(fresh = "60s", key = format!("{tenant}:{id}"), key_type = String, tags = ["by-expression"])]
async fn tagged_by_a_constant(tenant: String, id: u64) -> u64 {
    tenant.len() as u64 + id
}

struct Db;

/// The closure's `db` is its own, not the skipped argument; `region` is in the key.
#[cached(fresh = "60s", skip(db), tags = (0..2).map(|db| format!("{region}-{db}")))]
async fn tagged_past_a_closure_parameter(region: String, db: &Db) -> usize {
    let _ = db;
    region.len()
}

#[cached(fresh = "60s", mode = inline)]
async fn inline_by_choice(id: u64) -> u64 {
    id
}

#[cached(fresh = "60s", mode = detached)]
async fn detached_by_choice(id: u64) -> u64 {
    id
}

#[tokio::test(flavor = "current_thread")]
async fn key_accounting_and_modes_compile_and_run() {
    assert_eq!(by_format("ab".to_owned(), 1).await, 3);
    assert_eq!(by_named_format("eu".to_owned(), 1).await, 3);
    assert_eq!(through_a_closure(4).await, 4);
    assert_eq!(inline_by_choice(5).await, 5);
    assert_eq!(detached_by_choice(6).await, 6);
    assert_eq!(tagged_by_a_constant("ab".to_owned(), 1).await, 3);
    assert_eq!(
        tagged_past_a_closure_parameter("eu".to_owned(), &Db).await,
        2
    );
    assert_eq!(INLINE_BY_CHOICE.leader_mode(), stampede::LeaderMode::Inline);
    assert_eq!(
        DETACHED_BY_CHOICE.leader_mode(),
        stampede::LeaderMode::Detached
    );
}
