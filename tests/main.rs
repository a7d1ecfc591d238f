//! stampede's integration tests, one module per concern, in one binary so that the
//! runtime and the Redis client are linked once. Tests that need the process to
//! themselves (the process's runtime, its environment) re-run this binary for one test
//! (`common::run_child`).
mod common;

/// Set in the processes that `common::run_child` starts: they build the process's runtime
/// themselves.
pub const CHILD: &str = "INTEGRATION_TEST_CHILD";

/// `#[cached]` functions and caches built without a runtime of their own share the
/// process's runtime, so it is installed before any test runs, whichever runs first: on
/// Tokio's clock (the real time outside a paused runtime), so that tests on a paused
/// clock control freshness exactly, with the `db` admission limit that attribute forms
/// name. Installing builds a value and starts nothing (no thread, no I/O).
///
/// Also before any test: a process-wide subscriber that records nothing but keeps every
/// callsite's interest open. Tests that record spans set a subscriber for their own thread;
/// without this one, a callsite another test reached first, with no subscriber anywhere,
/// could stay disabled for them.
#[ctor::ctor(unsafe)]
fn before_any_test() {
    if std::env::var_os(PRINT_LOGS).is_some() {
        tracing::subscriber::set_global_default(Printing)
            .expect("the first global subscriber of this process");
    } else {
        tracing::subscriber::set_global_default(Undecided)
            .expect("the first global subscriber of this process");
    }
    if std::env::var_os(CHILD).is_none() {
        stampede::Runtime::builder()
            .clock(stampede::Clock::tokio())
            .admission("db", 8, std::time::Duration::from_secs(1))
            .install()
            .expect("the process's runtime, installed before any test");
    }
}

/// Set in a child process (`common::run_child`) whose every event and span field, on
/// any thread, the parent reads back: each printed as a report line.
pub const PRINT_LOGS: &str = "INTEGRATION_TEST_PRINT_LOGS";

/// Prints every event and every span's fields as `@report log …` lines.
struct Printing;

impl tracing::Subscriber for Printing {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, span: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        let mut line = format!("span {}", span.metadata().name());
        span.record(&mut Fields(&mut line));
        println!("{}log {line}", common::REPORT);
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, values: &tracing::span::Record<'_>) {
        let mut line = "span fields".to_owned();
        values.record(&mut Fields(&mut line));
        println!("{}log {line}", common::REPORT);
    }
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut line = format!("{} {}", event.metadata().level(), event.metadata().target());
        event.record(&mut Fields(&mut line));
        println!("{}log {line}", common::REPORT);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// Appends ` name=value` for each field, values as `Debug` shows them.
struct Fields<'a>(&'a mut String);

impl tracing::field::Visit for Fields<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.push_str(&format!(" {}={value:?}", field.name()));
    }
}

/// Leaves every callsite's interest to the subscriber of the moment, and records nothing.
struct Undecided;

impl tracing::Subscriber for Undecided {
    fn register_callsite(
        &self,
        _: &'static tracing::Metadata<'static>,
    ) -> tracing::subscriber::Interest {
        tracing::subscriber::Interest::sometimes()
    }
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        false
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, _: &tracing::Event<'_>) {}
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

mod admission;
mod attribute;
mod attribute_tags;
mod batch;
mod cluster;
mod coalescing;
mod compiles;
mod config_file;
mod environment;
mod everyday;
mod faults;
mod fences;
mod fixtures;
mod fleet;
mod fleet_admission;
mod freshness;
mod global_runtime;
mod hot_keys;
mod identity;
mod load_timeout;
mod negative_caching;
mod notices;
mod observability;
mod origin_errors;
mod production;
mod read_your_writes;
mod shared_store;
mod spans;
mod tags;
mod warmup;
mod write_through;
