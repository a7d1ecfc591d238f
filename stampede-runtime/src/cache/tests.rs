use super::*;

#[tokio::test]
async fn source_version_marks_in_memory_are_bounded_by_the_capacity() {
    let policy = Policy::builder("marks")
        .fresh(Duration::from_secs(60))
        .capacity(100)
        .build()
        .unwrap();
    let runtime = Runtime::builder().build().unwrap();
    let cache: Cache<u64, u64> = Cache::builder(policy).runtime(&runtime).build();
    for key in 0..10_000 {
        cache.invalidate_at(&key, 7).await.unwrap();
    }
    let marks = cache.inner.marks.get().expect("marks were kept");
    marks.run_pending_tasks();
    assert!(
        marks.entry_count() <= 100,
        "{} marks for a cache of 100 entries",
        marks.entry_count()
    );
}
