//! The counters, exported through the `metrics` facade (feature `metrics`).
//!
//! Counters and gauges are exported from the same snapshots as [`Cache::stats`] and
//! [`Runtime::backend_stats`], as absolute values, so the hit path stays a counter bump
//! whatever recorder is installed: on their own every [`RuntimeBuilder::metrics_interval`]
//! (5 s by default) on the background threads, from the first cache a runtime builds,
//! and on demand with [`Runtime::export_metrics`] (before a scrape, for exact figures).
//! The two histograms (origin call durations, callers' waits on misses) are recorded
//! when each happens: both are off the hit path. The observability guide
//! (`docs/observability.md`) lists every name, label and unit; a test holds it to this
//! file.
//!
//! [`Cache::stats`]: crate::Cache::stats
//! [`RuntimeBuilder::metrics_interval`]: crate::RuntimeBuilder::metrics_interval
use crate::config::backend::Kind;
use crate::runtime::Runtime;
use crate::stats::{BackendStats, Stats};
use std::time::Duration;

impl Runtime {
    /// Publishes the counters of every live cache built with this runtime (label
    /// `cache = <name>`), the state of its admission semaphores (`admission = <name>`) and
    /// its shared store's counters (`backend = redis | tiered`) to the installed `metrics`
    /// recorder. It runs on its own every [`metrics_interval`](crate::RuntimeBuilder::metrics_interval);
    /// call it before a scrape for figures of that moment. The observability guide
    /// (`docs/observability.md`) lists the names. Feature `metrics`.
    ///
    /// ```
    /// let runtime = stampede_runtime::Runtime::builder().build().unwrap();
    /// runtime.export_metrics(); // without a recorder, a no-op
    /// ```
    #[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
    pub fn export_metrics(&self) {
        for cache in self.observed() {
            export_cache(cache.name(), &cache.stats());
        }
        for admission in self.admissions() {
            let name = admission.name().to_string();
            metrics::gauge!("stampede_admission_limit", "admission" => name.clone())
                .set(admission.limit() as f64);
            metrics::gauge!("stampede_admission_in_use", "admission" => name.clone())
                .set(admission.in_use() as f64);
            metrics::gauge!("stampede_admission_queued", "admission" => name.clone())
                .set(admission.queued() as f64);
            metrics::gauge!("stampede_admission_groups", "admission" => name.clone())
                .set(admission.groups() as f64);
            if let Some(fleet) = admission.fleet_counts() {
                metrics::gauge!("stampede_admission_fleet_held", "admission" => name.clone())
                    .set(fleet.held as f64);
                metrics::gauge!("stampede_admission_fleet_local", "admission" => name.clone())
                    .set(fleet.local as f64);
                metrics::counter!("stampede_admission_fleet_local_total", "admission" => name.clone())
                    .absolute(fleet.local_total);
                metrics::counter!("stampede_admission_fleet_lapsed_total", "admission" => name)
                    .absolute(fleet.lapsed);
            }
        }
        if let Some(stats) = self.backend_stats() {
            let backend = match self.backend().kind() {
                Kind::Tiered => "tiered",
                Kind::Redis | Kind::Memory => "redis",
            };
            export_backend(backend, &stats);
        }
    }
}

fn export_cache(name: &str, stats: &Stats) {
    let counters = [
        ("stampede_fresh_hits_total", stats.fresh_hits),
        ("stampede_stale_hits_total", stats.stale_hits),
        ("stampede_misses_total", stats.misses),
        ("stampede_coalesced_total", stats.coalesced),
        ("stampede_origin_calls_total", stats.origin_calls),
        ("stampede_early_refreshes_total", stats.early_refreshes),
        ("stampede_refresh_errors_total", stats.refresh_errors),
        ("stampede_fallbacks_total", stats.fallbacks),
        ("stampede_timeouts_total", stats.timeouts),
        ("stampede_load_timeouts_total", stats.load_timeouts),
        ("stampede_admitted_total", stats.admitted),
        ("stampede_shed_total", stats.shed),
        ("stampede_shed_early_total", stats.shed_early),
        ("stampede_error_hits_total", stats.error_hits),
        ("stampede_shared_hits_total", stats.shared_hits),
        ("stampede_shared_misses_total", stats.shared_misses),
        ("stampede_backend_errors_total", stats.backend_errors),
        ("stampede_lease_waits_total", stats.lease_waits),
        ("stampede_lease_takeovers_total", stats.lease_takeovers),
        ("stampede_publish_refused_total", stats.publish_refused),
        ("stampede_leases_won_total", stats.leases_won),
        ("stampede_leases_lost_total", stats.leases_lost),
        ("stampede_leases_expired_total", stats.leases_expired),
        ("stampede_refreshes_refused_total", stats.refreshes_refused),
        ("stampede_tag_fenced_total", stats.tag_fenced),
    ];
    for (metric, value) in counters {
        metrics::counter!(metric, "cache" => name.to_owned()).absolute(value);
    }
    let gauges = [
        ("stampede_in_flight", stats.in_flight as f64),
        ("stampede_entries", stats.entries as f64),
        (
            "stampede_admission_wait_seconds_total",
            stats.admission_wait_total.as_secs_f64(),
        ),
        (
            "stampede_admission_wait_seconds_max",
            stats.admission_wait_max.as_secs_f64(),
        ),
        (
            "stampede_oldest_stale_served_seconds",
            stats.oldest_stale_served.as_secs_f64(),
        ),
        (
            "stampede_lease_wait_seconds_total",
            stats.lease_wait_total.as_secs_f64(),
        ),
        (
            "stampede_lease_wait_seconds_max",
            stats.lease_wait_max.as_secs_f64(),
        ),
    ];
    for (metric, value) in gauges {
        metrics::gauge!(metric, "cache" => name.to_owned()).set(value);
    }
}

fn export_backend(backend: &'static str, stats: &BackendStats) {
    let reads = [("hit", stats.hits), ("miss", stats.misses)];
    for (outcome, value) in reads {
        metrics::counter!("stampede_store_reads_total", "backend" => backend, "outcome" => outcome)
            .absolute(value);
    }
    let counters = [
        ("stampede_store_errors_total", stats.errors),
        ("stampede_store_late_answers_total", stats.late_answers),
        (
            "stampede_store_orphaned_leases_released_total",
            stats.orphaned_leases_released,
        ),
        (
            "stampede_store_decode_failures_total",
            stats.decode_failures,
        ),
        ("stampede_store_notices_sent_total", stats.notices_sent),
        (
            "stampede_store_notices_received_total",
            stats.notices_received,
        ),
        ("stampede_store_breaker_opened_total", stats.breaker_opened),
    ];
    for (metric, value) in counters {
        metrics::counter!(metric, "backend" => backend).absolute(value);
    }
    let gauges = [
        (
            "stampede_store_subscribed",
            f64::from(u8::from(stats.subscribed)),
        ),
        (
            "stampede_store_degraded",
            f64::from(u8::from(stats.degraded_now)),
        ),
        (
            "stampede_store_misconfigured",
            f64::from(u8::from(stats.problem.is_some())),
        ),
        ("stampede_store_notice_buckets", stats.notice_buckets as f64),
        (
            "stampede_store_degraded_seconds_total",
            stats.degraded.as_secs_f64(),
        ),
        (
            "stampede_store_invalidations_queued",
            stats.invalidations_queued as f64,
        ),
    ];
    for (metric, value) in gauges {
        metrics::gauge!(metric, "backend" => backend).set(value);
    }
}

/// One origin call of `cache`, as it ended (`loaded`, `failed` or `panicked`), and how
/// long it took: `stampede_origin_seconds`.
pub(crate) fn origin_call(cache: &str, outcome: &'static str, took: Duration) {
    metrics::histogram!("stampede_origin_seconds", "cache" => cache.to_owned(), "outcome" => outcome)
        .record(took.as_secs_f64());
}

/// How long a caller of `cache` waited on a miss before its answer (`ok` or `error`):
/// `stampede_miss_wait_seconds`.
pub(crate) fn miss_wait(cache: &str, ok: bool, waited: Duration) {
    let outcome = if ok { "ok" } else { "error" };
    metrics::histogram!("stampede_miss_wait_seconds", "cache" => cache.to_owned(), "outcome" => outcome)
        .record(waited.as_secs_f64());
}

#[cfg(test)]
mod tests;
