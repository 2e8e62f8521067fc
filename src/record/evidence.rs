//! What a figure rests on: where it came from, how much of the run its samples cover,
//! whether they bracket the moment that matters, and whether that is enough for it to be
//! shown. One type, read by analysis and every renderer; the rules that fill it live in
//! `analysis::evidence` and are stated in docs/methodology.md.

use serde::{Deserialize, Serialize};

/// Where a figure came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// A kernel high-water mark (`wait4` `ru_maxrss`, `VmHWM`, the cgroup's peak): exact.
    KernelMark,
    /// A kernel counter read once at the end (rusage CPU, the cgroup's throttling) or the
    /// run's own clock: exact.
    KernelCounter,
    /// A series memtrial sampled from `/proc` (RSS sums, PSS, USS, threads).
    SampledSeries,
    /// The allocator probe inside the workload.
    AllocatorProbe,
    /// A runtime probe (Ruby, JVM).
    RuntimeProbe,
    /// memtrial's load generator or a worker's driver.
    Driver,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::KernelMark => "kernel_mark",
            Source::KernelCounter => "kernel_counter",
            Source::SampledSeries => "sampled_series",
            Source::AllocatorProbe => "allocator_probe",
            Source::RuntimeProbe => "runtime_probe",
            Source::Driver => "driver",
        }
    }

    /// Words for people.
    pub fn words(self) -> &'static str {
        match self {
            Source::KernelMark => "kernel high-water mark",
            Source::KernelCounter => "kernel counter",
            Source::SampledSeries => "sampled series",
            Source::AllocatorProbe => "allocator probe",
            Source::RuntimeProbe => "runtime probe",
            Source::Driver => "driver",
        }
    }
}

/// The moment or stretch of the run a figure has to cover to mean what its label says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Moment {
    /// Exact by construction (a kernel mark or counter): nothing to cover.
    Exact,
    /// The run's memory peak.
    Peak,
    /// The whole run (a mean, a final value).
    WholeRun,
}

/// How much of a run a sampled figure's samples cover.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Coverage {
    /// Samples the figure rests on.
    pub samples: usize,
    /// Seconds between the first and the last of them.
    pub span_seconds: f64,
    /// The run's wall time.
    pub run_seconds: f64,
    /// For a figure at the peak: whether its sample lies at the run's memory peak.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub brackets_peak: Option<bool>,
}

impl Coverage {
    /// The share of the run between the first and the last sample, 0 to 1.
    pub fn share(&self) -> f64 {
        if self.run_seconds <= 0.0 {
            return 0.0;
        }
        (self.span_seconds / self.run_seconds).clamp(0.0, 1.0)
    }
}

/// Whether a figure meets its rule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "standing", rename_all = "snake_case")]
pub enum Standing {
    /// The figure meets its rule and is shown.
    Stands,
    /// Below its rule: not shown, with why and what would give it.
    Absent {
        /// E.g. "1 sample in a 0.99 s run".
        reason: String,
        /// E.g. "--probe-interval 100ms".
        remedy: String,
    },
}

impl Standing {
    pub fn stands(&self) -> bool {
        matches!(self, Standing::Stands)
    }
}

/// A figure's evidence in one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    pub source: Source,
    pub moment: Moment,
    /// Absent for exact figures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coverage: Option<Coverage>,
    #[serde(flatten)]
    pub standing: Standing,
}

impl Evidence {
    /// An exact figure: a kernel mark or counter, the load generator's count.
    pub fn exact(source: Source) -> Evidence {
        Evidence {
            source,
            moment: Moment::Exact,
            coverage: None,
            standing: Standing::Stands,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absent_evidence_round_trips_with_its_reason() {
        let e = Evidence {
            source: Source::AllocatorProbe,
            moment: Moment::Peak,
            coverage: Some(Coverage {
                samples: 1,
                span_seconds: 0.0,
                run_seconds: 0.99,
                brackets_peak: Some(false),
            }),
            standing: Standing::Absent {
                reason: "1 sample in a 0.99 s run".into(),
                remedy: "--probe-interval 100ms".into(),
            },
        };
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(v["standing"], "absent");
        assert_eq!(v["source"], "allocator_probe");
        let back: Evidence = serde_json::from_value(v).unwrap();
        assert_eq!(back, e);
        assert_eq!(back.coverage.map(|c| c.share()), Some(0.0));
    }
}
