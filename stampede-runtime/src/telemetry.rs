//! The counters, exported through the `metrics` facade (feature `metrics`).
//!
//! Exporting reads the same snapshots as [`Cache::stats`](crate::Cache::stats) and sets
//! absolute values, so the hit path stays a counter bump whatever recorder is installed;
//! call [`Runtime::export_metrics`] before each scrape or on an interval.
use crate::runtime::Runtime;

impl Runtime {
    /// Publishes the counters of every live cache built with this runtime, labelled
    /// `cache = <name>`, and the state of its admission semaphores, labelled
    /// `admission = <name>`, to the installed `metrics` recorder. The observability guide
    /// (`docs/observability.md`) lists the names.
    ///
    /// ```
    /// let runtime = stampede_runtime::Runtime::builder().build().unwrap();
    /// runtime.export_metrics(); // without a recorder, a no-op
    /// ```
    pub fn export_metrics(&self) {
        for cache in self.observed() {
            let stats = cache.stats();
            let name = cache.name().to_string();
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
                ("stampede_admitted_total", stats.admitted),
                ("stampede_shed_total", stats.shed),
                ("stampede_error_hits_total", stats.error_hits),
            ];
            for (metric, value) in counters {
                metrics::counter!(metric, "cache" => name.clone()).absolute(value);
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
            ];
            for (metric, value) in gauges {
                metrics::gauge!(metric, "cache" => name.clone()).set(value);
            }
        }
        for admission in self.admissions() {
            let name = admission.name().to_string();
            metrics::gauge!("stampede_admission_limit", "admission" => name.clone())
                .set(admission.limit() as f64);
            metrics::gauge!("stampede_admission_in_use", "admission" => name)
                .set(admission.in_use() as f64);
        }
    }
}

#[cfg(test)]
mod tests;
