use super::*;

#[tokio::test(start_paused = true)]
async fn a_full_semaphore_sheds_after_the_queue_timeout_and_admits_when_a_permit_frees() {
    let admission = Admission::new("db".into(), 2, Duration::from_millis(100));
    let first = admission.enter().await.expect("a free permit");
    let _second = admission.enter().await.expect("a free permit");
    assert_eq!(
        admission.permits.available_permits(),
        0,
        "both permits held"
    );
    let started = tokio::time::Instant::now();
    assert!(admission.enter().await.is_none(), "shed");
    assert_eq!(started.elapsed(), Duration::from_millis(100));
    let release = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(40)).await;
        drop(first);
    });
    let started = tokio::time::Instant::now();
    assert!(admission.enter().await.is_some(), "admitted once one frees");
    assert_eq!(started.elapsed(), Duration::from_millis(40));
    release.await.unwrap();
}
