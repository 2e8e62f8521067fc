//! What a server trial's load measured, as stored with the run.

use serde::{Deserialize, Serialize};

use crate::load::LoadResult;

/// Failures kept apart by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorCounts {
    pub connect: u64,
    pub timeout: u64,
    pub status_4xx: u64,
    pub status_5xx: u64,
    pub other: u64,
}

impl ErrorCounts {
    pub fn total(&self) -> u64 {
        self.connect + self.timeout + self.status_4xx + self.status_5xx + self.other
    }
}

/// One second of load, on the run's clock (seconds since the server was started).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadSecond {
    pub t_seconds: f64,
    pub requests: u64,
    pub throughput_rps: f64,
    pub errors: u64,
    pub p50_ms: f64,
    pub p99_ms: f64,
}

/// Quantiles kept of the whole latency histogram, for the percentile chart.
pub(crate) const LATENCY_QUANTILES: [f64; 12] = [
    0.0, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.995, 0.999, 0.9995, 0.9999, 1.0,
];

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadFigures {
    /// Responses completed while measuring (warm-up excluded).
    pub requests: u64,
    pub throughput_rps: f64,
    pub errors: ErrorCounts,
    pub latency_mean_ms: f64,
    pub latency_p50_ms: f64,
    pub latency_p90_ms: f64,
    pub latency_p95_ms: f64,
    pub latency_p99_ms: f64,
    pub latency_p999_ms: f64,
    pub latency_max_ms: f64,
    /// `(quantile, ms)` of the whole run's histogram.
    pub latency_quantiles: Vec<(f64, f64)>,
    pub per_second: Vec<LoadSecond>,
    /// Open loop: the rate asked for; achieved rate is `throughput_rps`.
    pub target_rate: Option<f64>,
    pub client_cpu_seconds: f64,
    /// The load generator was CPU-bound: the figures measure the client too.
    pub client_saturated: bool,
    /// Phases on the run's clock (seconds since the server was started).
    pub ready_seconds: f64,
    pub load_start_seconds: f64,
    pub load_end_seconds: f64,
    pub cooldown_end_seconds: f64,
    /// The server's RSS when the load stopped, and after the cool-down: what it gave back.
    pub rss_at_load_end_bytes: Option<u64>,
    pub rss_after_cooldown_bytes: Option<u64>,
}

impl LoadFigures {
    pub fn new(
        r: &LoadResult,
        ready_seconds: f64,
        load_start_seconds: f64,
        load_end_seconds: f64,
        cooldown_end_seconds: f64,
        rss_at_load_end_bytes: Option<u64>,
        rss_after_cooldown_bytes: Option<u64>,
    ) -> LoadFigures {
        let us_to_ms = |us: u64| us as f64 / 1000.0;
        LoadFigures {
            requests: r.requests,
            throughput_rps: r.throughput_rps,
            errors: ErrorCounts {
                connect: r.errors.connect,
                timeout: r.errors.timeout,
                status_4xx: r.errors.status_4xx,
                status_5xx: r.errors.status_5xx,
                other: r.errors.other,
            },
            latency_mean_ms: r.latency_mean_ms,
            latency_p50_ms: r.latency_p50_ms,
            latency_p90_ms: r.latency_p90_ms,
            latency_p95_ms: r.latency_p95_ms,
            latency_p99_ms: r.latency_p99_ms,
            latency_p999_ms: r.latency_p999_ms,
            latency_max_ms: r.latency_max_ms,
            latency_quantiles: if r.latency.is_empty() {
                Vec::new()
            } else {
                LATENCY_QUANTILES
                    .iter()
                    .map(|q| (*q, us_to_ms(r.latency.value_at_quantile(*q))))
                    .collect()
            },
            per_second: r
                .per_second
                .iter()
                .map(|s| LoadSecond {
                    t_seconds: s.t_seconds,
                    requests: s.requests,
                    throughput_rps: if s.seconds > 0.0 {
                        s.requests as f64 / s.seconds
                    } else {
                        0.0
                    },
                    errors: s.errors_connect
                        + s.errors_timeout
                        + s.errors_other
                        + s.http_4xx
                        + s.http_5xx,
                    p50_ms: s.p50_ms,
                    p99_ms: s.p99_ms,
                })
                .collect(),
            target_rate: r.target_rate,
            client_cpu_seconds: r.client_cpu_seconds,
            client_saturated: r.client_saturated,
            ready_seconds,
            load_start_seconds,
            load_end_seconds,
            cooldown_end_seconds,
            rss_at_load_end_bytes,
            rss_after_cooldown_bytes,
        }
    }
}
