//! `cargo run --release` in `examples/service`: the price service on `PORT` (default
//! 3000; `0` picks a free one), its database `DB_LATENCY_MS` slow (default 20), its
//! prices `PRICE_BASE + id` cents (default 100).
use metrics_exporter_prometheus::PrometheusBuilder;
use stampede_service::{app, Db};
use std::time::Duration;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

#[tokio::main]
async fn main() -> std::io::Result<()> {
    // stampede's warnings (degraded mode, a failover) and errors (a setting Redis refuses)
    // go to standard error; `RUST_LOG` chooses, e.g. `RUST_LOG=info,stampede=debug`.
    let filter = std::env::var("RUST_LOG")
        .ok()
        .and_then(|spec| spec.parse::<Targets>().ok())
        .unwrap_or_else(|| Targets::new().with_default(tracing::Level::INFO));
    tracing_subscriber::registry()
        .with(tracing_subscriber::fmt::layer().with_writer(std::io::stderr))
        .with(filter)
        .init();
    // Fail at start-up, not on the first request, if the environment is wrong.
    if let Err(error) = stampede::Runtime::global() {
        eprintln!("stampede configuration: {error}");
        std::process::exit(2);
    }
    let metrics = PrometheusBuilder::new().install_recorder().ok();
    let number = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|value| value.parse().ok())
            .unwrap_or(default)
    };
    let (latency, base) = (number("DB_LATENCY_MS", 20), number("PRICE_BASE", 100));
    let port = std::env::var("PORT").unwrap_or_else(|_| "3000".into());
    let listener = tokio::net::TcpListener::bind(format!("127.0.0.1:{port}")).await?;
    println!("listening on http://{}", listener.local_addr()?);
    let db = Db::new(Duration::from_millis(latency), base);
    axum::serve(listener, app(db, metrics)).await
}
