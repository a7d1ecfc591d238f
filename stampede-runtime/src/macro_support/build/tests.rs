use super::*;
use crate::config::Overrides;
use crate::policy::Policy;
use crate::runtime::Runtime;
use std::time::Duration;

#[tokio::test(start_paused = true)]
async fn a_plain_function_ignores_overrides_that_would_fail_its_callers() {
    let runtime = Runtime::builder()
        .function("plain", Overrides::new().timeout(Duration::from_millis(10)))
        .build()
        .unwrap();
    let policy = Policy::builder("plain")
        .fresh(Duration::from_secs(60))
        .build()
        .unwrap();
    let cache: Cache<u32, u32, Error> = CacheBuilder::new(policy, keep_error)
        .runtime(&runtime)
        .infallible()
        .build();
    assert_eq!(cache.policy().timeout(), None);
    let slow = cache.load(1, || async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        Ok(7)
    });
    assert_eq!(
        slow.await,
        Ok(7),
        "no deadline: a plain function has no error to give"
    );
}
