use super::*;

#[test]
fn outside_a_runtime_the_future_runs_without_a_deadline() {
    let answer = futures_util::future::ready(7);
    assert_eq!(
        futures_executor_free(within(Duration::ZERO, answer)),
        Some(7)
    );
}

#[test]
fn without_the_time_driver_the_future_runs_without_a_deadline() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let answer = runtime.block_on(within(Duration::ZERO, async { 7 }));
    assert_eq!(answer, Some(7));
}

#[tokio::test(start_paused = true)]
async fn with_a_timer_the_deadline_holds() {
    let never = std::future::pending::<()>();
    assert_eq!(within(Duration::from_millis(5), never).await, None);
}

/// Polls a future that is ready at once, with no executor at all.
fn futures_executor_free<F: Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let waker = futures_util::task::noop_waker();
    match future
        .as_mut()
        .poll(&mut std::task::Context::from_waker(&waker))
    {
        std::task::Poll::Ready(output) => output,
        std::task::Poll::Pending => panic!("the future was not ready"),
    }
}
