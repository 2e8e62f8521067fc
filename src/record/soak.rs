//! A soak as stored: its settings, its segments (one per start; the gap between two is
//! time nobody measured), per variant and time window the window's figures, and the
//! memory series in tiers of resolution. Plain data; the store writes and reads it, the
//! soak produces it, analysis and reports read it.

use serde::{Deserialize, Serialize};

use crate::plan::Plan;

/// What a soak runs and how it decides, fixed at its start and kept for `--resume`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SoakSettings {
    /// The variants, the command, the limits each instance gets, the load.
    pub plan: Plan,
    /// The comparison's unit of time.
    pub window_seconds: f64,
    /// Windows after each start that are marked warm-up and left out of every ratio.
    pub warmup_windows: u32,
    /// How long the soak lasts (with `until_decided`: the most it lasts).
    pub duration_seconds: f64,
    /// Stop as soon as the rule says every variant is decided.
    pub until_decided: Option<DecideRule>,
    /// How often each instance's memory is sampled.
    pub sample_seconds: f64,
    /// How often each instance's PSS is read (it walks every mapping: costlier).
    pub pss_seconds: f64,
}

/// The sequential rule of `--until-decided`: a variant is decided once the 95% interval
/// of its memory ratio to the baseline has lain wholly outside `1 ± margin` (a
/// difference) or wholly inside it (no difference that matters) after each of the last
/// `consecutive` windows, with at least `min_windows` measured windows behind it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct DecideRule {
    pub margin: f64,
    pub consecutive: u32,
    pub min_windows: u32,
}

impl Default for DecideRule {
    fn default() -> Self {
        DecideRule {
            margin: 0.05,
            consecutive: 3,
            min_windows: 4,
        }
    }
}

/// A soak's state in the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SoakStatus {
    /// Running, or its memtrial died (then `--resume` carries on).
    Running,
    /// Ran its duration, or was decided.
    Done,
    /// Stopped by the user (SIGINT, SIGTERM): its windows so far stand.
    Interrupted,
    /// Could not go on: its instances did not start, every instance went down, or
    /// memtrial failed (the stop reason says which); its windows so far stand.
    Failed,
}

impl SoakStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            SoakStatus::Running => "running",
            SoakStatus::Done => "done",
            SoakStatus::Interrupted => "interrupted",
            SoakStatus::Failed => "failed",
        }
    }

    pub fn parse(s: &str) -> Option<SoakStatus> {
        match s {
            "running" => Some(SoakStatus::Running),
            "done" => Some(SoakStatus::Done),
            "interrupted" => Some(SoakStatus::Interrupted),
            "failed" => Some(SoakStatus::Failed),
            _ => None,
        }
    }
}

/// A stored soak's head.
#[derive(Debug, Clone, PartialEq)]
pub struct SoakHead {
    pub id: i64,
    pub created_at: String,
    pub status: SoakStatus,
    pub settings: SoakSettings,
    /// The Unix time of the soak's zero: every `t` of it counts from here.
    pub started_unix: f64,
    /// Why it stopped (the rule that decided it, the duration, an interrupt).
    pub stop_reason: Option<String>,
    /// The memtrial that last ran it still runs (same boot, PID and start time).
    pub owner_alive: bool,
    /// That memtrial's PID, while it runs the soak.
    pub owner_pid: Option<i64>,
}

/// One start of the instances: from `from_t` to `to_t` (soak seconds). Before a segment
/// other than the first lies a gap.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Segment {
    pub index: u32,
    pub from_t: f64,
    /// The last time a figure of this segment was committed.
    pub to_t: f64,
}

/// One variant's figures over one time window.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WindowFigures {
    /// Memory samples taken in the window.
    pub samples: u32,
    /// Mean over the samples of the instance's summed resident memory (its processes'
    /// VmRSS), bytes.
    pub rss_mean: Option<f64>,
    pub rss_max: Option<f64>,
    /// Mean of the cgroup's working set (usage less inactive page cache).
    pub working_set_mean: Option<f64>,
    /// Mean of the summed PSS (read less often: `pss_seconds`).
    pub pss_mean: Option<f64>,
    /// Mean of the allocator's live and held bytes as the probe reported them.
    pub live_mean: Option<f64>,
    pub held_mean: Option<f64>,
    /// CPU time of the instance's cgroup in the window.
    pub cpu_seconds: Option<f64>,
    /// Responses completed in the window (any status).
    pub requests: u64,
    /// Requests the schedule meant to send in the window (open loop); a variant that
    /// falls behind completes fewer.
    pub due: Option<u64>,
    pub errors: u64,
    pub errors_timeout: u64,
    pub http_5xx: u64,
    pub p50_ms: Option<f64>,
    pub p95_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    /// The instance's processes were gone for part of the window (exited, killed).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub instance_down: bool,
}

/// One stored window of one variant.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SoakWindow {
    pub variant: String,
    /// `floor(from_t / window_seconds)`.
    pub index: u32,
    pub segment: u32,
    pub from_t: f64,
    pub to_t: f64,
    /// A warm-up window (the first windows after a start): left out of every ratio.
    pub warm: bool,
    pub figures: WindowFigures,
    /// The window's latency histogram (HdrHistogram V2, deflated), merged from its seconds.
    #[serde(skip)]
    pub latency: Option<Vec<u8>>,
}

/// One point of a variant's memory series; a coarser tier's point stands for `n` samples
/// (their means).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct SoakPoint {
    pub t: f64,
    pub n: u32,
    pub rss: Option<f64>,
    pub working_set: Option<f64>,
    pub pss: Option<f64>,
    pub live: Option<f64>,
    pub held: Option<f64>,
}

/// Something that happened: an instance exited, was killed by the OOM killer, a restart.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SoakEvent {
    pub t: f64,
    pub variant: Option<String>,
    pub text: String,
}

impl SoakEvent {
    /// `variant`'s instance went down at `t` (`why`: how it ended). Its text is read back
    /// by [`SoakEvent::down_why`].
    pub fn down(t: f64, variant: &str, why: &str) -> SoakEvent {
        SoakEvent {
            t,
            variant: Some(variant.to_string()),
            text: format!("the {variant} instance is down: {why}"),
        }
    }

    /// How the instance ended, when this event is its going down.
    pub fn down_why(&self) -> Option<&str> {
        let v = self.variant.as_deref()?;
        self.text
            .strip_prefix("the ")?
            .strip_prefix(v)?
            .strip_prefix(" instance is down: ")
    }
}

/// How the series is thinned as it ages: points younger than `keep_seconds` stay at this
/// tier's resolution; older ones are merged into the next tier's `bucket_seconds`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tier {
    pub bucket_seconds: f64,
    pub keep_seconds: f64,
}

/// Full resolution for 10 minutes, then 10-second means for 6 hours, then minute means:
/// a day of five variants sampled each second is 21,000 rows, not 432,000.
pub const TIERS: [Tier; 3] = [
    Tier {
        bucket_seconds: 0.0,
        keep_seconds: 600.0,
    },
    Tier {
        bucket_seconds: 10.0,
        keep_seconds: 6.0 * 3600.0,
    },
    Tier {
        bucket_seconds: 60.0,
        keep_seconds: f64::INFINITY,
    },
];
