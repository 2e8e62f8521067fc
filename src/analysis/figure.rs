//! The figures a variant is summarised by: what each is, its unit, where a run has it.

use serde::Serialize;

use super::evidence;
use crate::record::RunRecord;

/// A figure summarised per variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Figure {
    PeakRssBytes,
    MeanRssBytes,
    FinalRssBytes,
    /// The highest sum of PSS over the tree: shared pages divided among their processes.
    PeakPssBytes,
    /// The highest sum of USS over the tree: pages private to one process.
    PeakUssBytes,
    PeakVszBytes,
    WallSeconds,
    CpuSeconds,
    CpuUserSeconds,
    CpuSysSeconds,
    ThreadsPeak,
    CgroupPeakBytes,
    CgroupAnonPeakBytes,
    ThrottledSeconds,
    Requests,
    ThroughputRps,
    LatencyP50Ms,
    LatencyP90Ms,
    LatencyP95Ms,
    LatencyP99Ms,
    LatencyMaxMs,
    Errors,
    /// The allocator's live bytes at the run's RSS peak (allocator probe).
    LiveAtPeakBytes,
    /// The bytes the allocator holds from the system at the RSS peak.
    HeldAtPeakBytes,
    /// Held over live at the RSS peak: what the allocator kept beyond what was live at
    /// that moment (retention after frees), not the size of fragmentation.
    HeldOverLive,
    /// The most live bytes the allocator's samples saw over the run: the program's own
    /// peak as this allocator counts it, a lower bound (sampled).
    PeakLiveBytes,
    /// The run's peak RSS over the program's floor (`analysis::floor`): not a figure of one
    /// run (the floor is the experiment's), filled in per variant by the analysis.
    PeakOverFloor,
}

impl Figure {
    pub(crate) const ALL: [Figure; 27] = [
        Figure::PeakRssBytes,
        Figure::MeanRssBytes,
        Figure::FinalRssBytes,
        Figure::PeakPssBytes,
        Figure::PeakUssBytes,
        Figure::PeakVszBytes,
        Figure::WallSeconds,
        Figure::CpuSeconds,
        Figure::CpuUserSeconds,
        Figure::CpuSysSeconds,
        Figure::ThreadsPeak,
        Figure::CgroupPeakBytes,
        Figure::CgroupAnonPeakBytes,
        Figure::ThrottledSeconds,
        Figure::Requests,
        Figure::ThroughputRps,
        Figure::LatencyP50Ms,
        Figure::LatencyP90Ms,
        Figure::LatencyP95Ms,
        Figure::LatencyP99Ms,
        Figure::LatencyMaxMs,
        Figure::Errors,
        Figure::LiveAtPeakBytes,
        Figure::HeldAtPeakBytes,
        Figure::HeldOverLive,
        Figure::PeakLiveBytes,
        Figure::PeakOverFloor,
    ];

    pub fn key(self) -> &'static str {
        match self {
            Figure::PeakRssBytes => "peak_rss_bytes",
            Figure::MeanRssBytes => "mean_rss_bytes",
            Figure::FinalRssBytes => "final_rss_bytes",
            Figure::PeakPssBytes => "peak_pss_bytes",
            Figure::PeakUssBytes => "peak_uss_bytes",
            Figure::PeakVszBytes => "peak_vsz_bytes",
            Figure::WallSeconds => "wall_seconds",
            Figure::CpuSeconds => "cpu_seconds",
            Figure::CpuUserSeconds => "cpu_user_seconds",
            Figure::CpuSysSeconds => "cpu_sys_seconds",
            Figure::ThreadsPeak => "threads_peak",
            Figure::CgroupPeakBytes => "cgroup_peak_bytes",
            Figure::CgroupAnonPeakBytes => "cgroup_anon_peak_bytes",
            Figure::ThrottledSeconds => "throttled_seconds",
            Figure::Requests => "requests",
            Figure::ThroughputRps => "throughput_rps",
            Figure::LatencyP50Ms => "latency_p50_ms",
            Figure::LatencyP90Ms => "latency_p90_ms",
            Figure::LatencyP95Ms => "latency_p95_ms",
            Figure::LatencyP99Ms => "latency_p99_ms",
            Figure::LatencyMaxMs => "latency_max_ms",
            Figure::Errors => "errors",
            Figure::LiveAtPeakBytes => "live_at_peak_bytes",
            Figure::HeldAtPeakBytes => "held_at_peak_bytes",
            Figure::HeldOverLive => "held_over_live",
            Figure::PeakLiveBytes => "peak_live_bytes",
            Figure::PeakOverFloor => "peak_over_floor",
        }
    }

    pub(crate) fn is_bytes(self) -> bool {
        matches!(
            self,
            Figure::PeakRssBytes
                | Figure::MeanRssBytes
                | Figure::FinalRssBytes
                | Figure::PeakPssBytes
                | Figure::PeakUssBytes
                | Figure::PeakVszBytes
                | Figure::CgroupPeakBytes
                | Figure::CgroupAnonPeakBytes
                | Figure::LiveAtPeakBytes
                | Figure::HeldAtPeakBytes
                | Figure::PeakLiveBytes
        )
    }

    /// The figure's value in one run, if it was measured.
    pub fn of(self, r: &RunRecord) -> Option<f64> {
        Some(match self {
            Figure::PeakRssBytes => r.peak_rss_bytes as f64,
            Figure::MeanRssBytes => r.mean_rss_bytes as f64,
            Figure::FinalRssBytes => r.final_rss_bytes as f64,
            Figure::PeakPssBytes => r.peak_pss_bytes? as f64,
            Figure::PeakUssBytes => r.peak_uss_bytes? as f64,
            Figure::PeakVszBytes => r.peak_vsz_bytes as f64,
            Figure::WallSeconds => r.wall_seconds,
            Figure::CpuSeconds => r.cpu_user_seconds + r.cpu_sys_seconds,
            Figure::CpuUserSeconds => r.cpu_user_seconds,
            Figure::CpuSysSeconds => r.cpu_sys_seconds,
            Figure::ThreadsPeak => r.threads_peak as f64,
            Figure::CgroupPeakBytes => r.cgroup.as_ref()?.peak_bytes? as f64,
            Figure::CgroupAnonPeakBytes => r.cgroup.as_ref()?.anon_peak_bytes as f64,
            Figure::ThrottledSeconds => r.cgroup.as_ref()?.throttled_seconds,
            Figure::Requests => r.load.as_ref()?.requests as f64,
            Figure::ThroughputRps => r.load.as_ref()?.throughput_rps,
            Figure::LatencyP50Ms => r.load.as_ref()?.latency_p50_ms,
            Figure::LatencyP90Ms => r.load.as_ref()?.latency_p90_ms,
            Figure::LatencyP95Ms => r.load.as_ref()?.latency_p95_ms,
            Figure::LatencyP99Ms => r.load.as_ref()?.latency_p99_ms,
            Figure::LatencyMaxMs => r.load.as_ref()?.latency_max_ms,
            Figure::Errors => r.load.as_ref()?.errors.total() as f64,
            Figure::LiveAtPeakBytes => evidence::at_peak_point(r)?.live_bytes? as f64,
            Figure::HeldAtPeakBytes => evidence::at_peak_point(r)?.held_bytes? as f64,
            Figure::HeldOverLive => evidence::at_peak_point(r)?.fragmentation()?,
            Figure::PeakLiveBytes => r.inside.allocator.as_ref()?.peak_live_bytes? as f64,
            Figure::PeakOverFloor => return None,
        })
    }

    /// Milliseconds of latency.
    pub(crate) fn is_latency(self) -> bool {
        matches!(
            self,
            Figure::LatencyP50Ms
                | Figure::LatencyP90Ms
                | Figure::LatencyP95Ms
                | Figure::LatencyP99Ms
                | Figure::LatencyMaxMs
        )
    }

    /// The allocator's own view: it explains a cost (why the RSS is what it is), it is
    /// not a cost of its own, so it never decides a recommendation.
    pub(crate) fn explains(self) -> bool {
        matches!(
            self,
            Figure::LiveAtPeakBytes
                | Figure::HeldAtPeakBytes
                | Figure::HeldOverLive
                | Figure::PeakLiveBytes
                | Figure::PeakOverFloor
        )
    }

    /// Whether a variant's figure is compared with the baseline's as a ratio. Not the
    /// figures at the RSS peak: each variant's is taken at its own moment (live bytes at
    /// glibc's peak and at jemalloc's differ by when, not by allocator); not the program's
    /// own peak of live bytes, which is the program's whatever the allocator (variants that
    /// disagree on it are flagged instead: `analysis::floor`); not the peak over the floor,
    /// whose ratio would repeat peak RSS's.
    pub fn compared(self) -> bool {
        !self.explains()
    }

    /// Bigger is better (throughput); for every other figure smaller is better.
    pub(crate) fn higher_is_better(self) -> bool {
        matches!(self, Figure::ThroughputRps | Figure::Requests)
    }

    pub(super) fn index(self) -> u64 {
        Figure::ALL.iter().position(|f| *f == self).unwrap_or(0) as u64
    }
}
