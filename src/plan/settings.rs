//! Every numeric setting's range, and the one resolution of load settings shared by
//! `memtrial load` and server trials (`memtrial run --url …`).
//!
//! A number enters memtrial once — as a flag or a plan key — and is checked here once,
//! against a documented range, with a message naming the flag and the range. Past this
//! point values are plain, bounded data: nothing downstream can overflow or panic on them.

use std::fmt::Display;
use std::time::Duration;

use super::PlanError;
use crate::units::DurationRange;

const fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}
const fn millis(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

const HOUR: u64 = 3600;
const DAY: u64 = 24 * HOUR;

/// `--runs`: measured runs per variant.
pub const RUNS: (u32, u32) = (1, 10_000);
/// `--warmup`: warm-up runs per variant.
pub const WARMUP: (u32, u32) = (0, 10_000);
/// `--interval`: the memory sampling interval.
pub const INTERVAL: DurationRange = DurationRange::new(millis(10), secs(HOUR));
/// `--probe-interval`: how often the probes inside the workload report.
pub const PROBE_INTERVAL: DurationRange = DurationRange::new(millis(10), secs(HOUR));
/// `--timeout`: the longest a run may take.
pub const TIMEOUT: DurationRange = DurationRange::new(millis(1), secs(7 * DAY));
/// `--memory-limit`, bytes: below 4 MiB programs cannot even start; 64 TiB is far above
/// any machine's memory.
pub const MEMORY_LIMIT: (u64, u64) = (4 << 20, 64 << 40);
/// `--cpus`: CPU quota in CPUs.
pub const CPUS: (f64, f64) = (0.01, 4096.0);
/// `--pids-limit`: the kernel's own maximum PID count is 4,194,304.
/// At least 2: the spawner (in the run's group) and the workload.
pub const PIDS_LIMIT: (u64, u64) = (2, 4_194_304);
/// `--seed`: kept exact in JSON (53 bits).
pub const SEED: (u64, u64) = (0, (1 << 53) - 1);

/// `--ready-timeout`.
pub const READY_TIMEOUT: DurationRange = DurationRange::new(millis(1), secs(HOUR));
/// `--warmup-duration` (load before measuring).
pub const LOAD_WARMUP: DurationRange = DurationRange::up_to(secs(DAY));
/// `--duration` (measured load).
pub const LOAD_DURATION: DurationRange = DurationRange::new(millis(1), secs(DAY));
/// `--duration` of a service or worker trial (without `--url`): how long it runs.
pub const SERVICE_DURATION: DurationRange = DurationRange::new(millis(1), secs(7 * DAY));
/// `--cooldown`.
pub const COOLDOWN: DurationRange = DurationRange::up_to(secs(DAY));
/// `--request-timeout` / `load --timeout`.
pub const REQUEST_TIMEOUT: DurationRange = DurationRange::new(millis(1), secs(HOUR));
/// `--connections`.
pub const CONNECTIONS: (usize, usize) = (1, 100_000);
/// `--load-threads` / `load --threads` (and at most one per connection).
pub const LOAD_THREADS: (usize, usize) = (1, 1024);
/// `--rate`, requests per second.
pub const RATE: (f64, f64) = (0.001, 10_000_000.0);
/// `--speed`, the replay's pace factor.
pub const SPEED: (f64, f64) = (0.001, 1_000_000.0);

/// `inspect --top`.
pub const INSPECT_TOP: (usize, usize) = (1, 100_000);
/// `inspect --interval`.
pub const INSPECT_INTERVAL: DurationRange = DurationRange::new(millis(10), secs(HOUR));
/// `inspect --watch`.
pub const INSPECT_WATCH: DurationRange = DurationRange::new(millis(1), secs(7 * DAY));

/// `exporter --budget`: time per scrape for the costly reads (smaps_rollup, arenas).
pub const EXPORTER_BUDGET: DurationRange = DurationRange::new(millis(1), secs(60));
/// `exporter --max-age`: how old a cached costly figure may be before it is read again.
pub const EXPORTER_MAX_AGE: DurationRange = DurationRange::up_to(secs(DAY));
/// `judge --since`, `--before`'s and `--after`'s windows.
pub const JUDGE_WINDOW: DurationRange = DurationRange::new(secs(1), secs(400 * DAY));
/// `judge --block`.
pub const JUDGE_BLOCK: DurationRange = DurationRange::new(secs(1), secs(30 * DAY));
/// `judge --warmup`.
pub const JUDGE_WARMUP: DurationRange = DurationRange::up_to(secs(30 * DAY));

/// `kube collect --wait`: how long to wait for the Job's pods to finish.
pub const KUBE_COLLECT_WAIT: DurationRange = DurationRange::up_to(secs(30 * DAY));

/// `workload fragment --threads`.
pub const FRAGMENT_THREADS: (usize, usize) = (1, 1024);
/// `workload fragment --seconds`.
pub const FRAGMENT_SECONDS: DurationRange = DurationRange::new(millis(1), secs(DAY));
/// `workload fragment --iterations` (allocations per thread).
pub const FRAGMENT_ITERATIONS: (u64, u64) = (1, 1_000_000_000_000);
/// `workload fragment --min-size` / `--max-size`, bytes.
pub const FRAGMENT_SIZE: (u64, u64) = (1, 1 << 30);
/// `workload fragment --live`: short-lived objects per thread.
pub const FRAGMENT_LIVE: (usize, usize) = (1, 10_000_000);

/// `workload fragment --survivors`: the fraction of objects kept alive until the end.
pub const FRAGMENT_SURVIVORS: (f64, f64) = (0.0, 1.0);
/// `run --max-runs` (with `--until-decided`): with fewer than 3 runs of each, nothing is
/// decided.
pub const MAX_RUNS: (u32, u32) = (3, 10_000);
/// `kube --parallelism`: pods of the Job at once.
pub const KUBE_PARALLELISM: (u32, u32) = (1, 10_000);

/// `memtrial soak --duration` / `--max-duration`.
pub const SOAK_DURATION: DurationRange = DurationRange::new(secs(10), secs(7 * DAY));
/// `memtrial soak --window`.
pub const SOAK_WINDOW: DurationRange = DurationRange::new(secs(2), secs(DAY));
/// `memtrial soak --warmup-windows`.
pub const SOAK_WARMUP_WINDOWS: (u32, u32) = (0, 1000);
/// `memtrial soak --interval`.
pub const SOAK_INTERVAL: DurationRange = DurationRange::new(millis(200), secs(60));
/// `memtrial soak --window`'s default.
pub const SOAK_WINDOW_DEFAULT: Duration = secs(600);
/// `memtrial soak --warmup-windows`'s default.
pub const SOAK_WARMUP_WINDOWS_DEFAULT: u32 = 1;
/// `memtrial soak --interval`'s default.
pub const SOAK_INTERVAL_DEFAULT: Duration = secs(1);
/// `memtrial soak --margin`.
pub const SOAK_MARGIN: (f64, f64) = (0.005, 0.5);
/// `memtrial soak --consecutive`.
pub const SOAK_CONSECUTIVE: (u32, u32) = (1, 100);
/// `--require-cut-off`'s default, bytes: requires that added less are left out of the
/// reports' trees (derailed's `CUT_OFF`).
pub const REQUIRE_CUT_OFF: u64 = 314_573; // 0.3 MiB
/// `workload cache-server --port`.
pub const CACHE_SERVER_PORT: (u64, u64) = (0, 65_535);
/// `workload cache-server --threads`.
pub const CACHE_SERVER_THREADS: (usize, usize) = (1, 1024);
/// `workload cache-server --cache-size`, bytes.
pub const CACHE_SERVER_CACHE: (u64, u64) = (1 << 20, 64 << 30);
/// `workload cache-server --drift`, requests per step of the hot spot.
pub const CACHE_SERVER_DRIFT: (u64, u64) = (1, 1_000_000_000_000);

/// Checks an integer against its range; the error names the flag and the range.
pub fn count<T: PartialOrd + Display + Copy>(
    flag: &'static str,
    value: T,
    (min, max): (T, T),
) -> Result<T, PlanError> {
    if value < min || value > max {
        return Err(PlanError::BadValue {
            flag,
            value: value.to_string(),
            reason: format!("must be from {min} to {max}"),
        });
    }
    Ok(value)
}

/// A real number for a message: `1e300`, not 300 digits.
pub(crate) fn show_real(v: f64) -> String {
    if v != 0.0 && v.is_finite() && (v.abs() >= 1e9 || v.abs() < 1e-3) {
        format!("{v:e}")
    } else {
        v.to_string()
    }
}

/// Checks a real number against its range (NaN and infinities are refused).
pub fn real(flag: &'static str, value: f64, (min, max): (f64, f64)) -> Result<f64, PlanError> {
    if !value.is_finite() || value < min || value > max {
        return Err(PlanError::BadValue {
            flag,
            value: show_real(value),
            reason: format!("must be a number from {min} to {max}"),
        });
    }
    Ok(value)
}

/// Parses a duration and checks it against its range.
pub fn duration(
    flag: &'static str,
    text: &str,
    range: DurationRange,
) -> Result<Duration, PlanError> {
    range.parse(text).map_err(|reason| PlanError::BadValue {
        flag,
        value: text.to_string(),
        reason,
    })
}

/// Which command a load belongs to: the defaults and flag names differ, the rules do not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadCommand {
    /// `memtrial load`.
    Load,
    /// A server trial, `memtrial run --url …` or a plan's `[server]`.
    ServerTrial,
}

impl LoadCommand {
    fn threads_flag(self) -> &'static str {
        match self {
            LoadCommand::Load => "--threads",
            LoadCommand::ServerTrial => "--load-threads",
        }
    }
    fn timeout_flag(self) -> &'static str {
        match self {
            LoadCommand::Load => "--timeout",
            LoadCommand::ServerTrial => "--request-timeout",
        }
    }
    /// The default measured duration.
    pub(crate) fn default_duration(self) -> &'static str {
        match self {
            LoadCommand::Load => "10s",
            LoadCommand::ServerTrial => "30s",
        }
    }
    /// The default number of connections.
    pub(crate) fn default_connections(self) -> usize {
        match self {
            LoadCommand::Load => 64,
            LoadCommand::ServerTrial => 16,
        }
    }
    /// The default request timeout.
    pub(crate) fn default_request_timeout(self) -> &'static str {
        match self {
            LoadCommand::Load => "5s",
            LoadCommand::ServerTrial => "10s",
        }
    }
}

/// The load settings as given (flags or plan), before defaults and validation.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LoadInput {
    pub duration: Option<String>,
    pub warmup_duration: Option<String>,
    pub connections: Option<usize>,
    pub threads: Option<usize>,
    pub rate: Option<f64>,
    pub request_timeout: Option<String>,
    pub speed: Option<f64>,
}

/// Validated load settings: every value within its range.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadSettings {
    pub duration: Duration,
    pub warmup: Duration,
    pub connections: usize,
    pub threads: usize,
    pub rate: Option<f64>,
    pub request_timeout: Duration,
    pub speed: Option<f64>,
}

/// The methods a replay keeps unless others are asked for ([`crate::load::DEFAULT_METHODS`]).
pub fn default_methods() -> Vec<String> {
    crate::load::DEFAULT_METHODS
        .iter()
        .map(|m| m.as_str().to_string())
        .collect()
}

/// The default number of load threads, for both commands: half the online CPUs (the
/// server under test usually shares the machine), at least 1, at most one per connection.
pub(crate) fn default_load_threads(online_cpus: u32, connections: usize) -> usize {
    (online_cpus as usize / 2).clamp(1, connections.max(1))
}

/// Applies the defaults of `command` and checks every rule once.
pub fn resolve_load(
    input: &LoadInput,
    command: LoadCommand,
    online_cpus: u32,
) -> Result<LoadSettings, PlanError> {
    let LoadInput {
        duration,
        warmup_duration,
        connections,
        threads,
        rate,
        request_timeout,
        speed,
    } = input;
    let duration_text = duration.as_deref().unwrap_or(command.default_duration());
    let duration = self::duration("--duration", duration_text, LOAD_DURATION)?;
    let warmup = self::duration(
        "--warmup-duration",
        warmup_duration.as_deref().unwrap_or("0s"),
        LOAD_WARMUP,
    )?;
    let timeout_text = request_timeout
        .as_deref()
        .unwrap_or(command.default_request_timeout());
    let request_timeout = self::duration(command.timeout_flag(), timeout_text, REQUEST_TIMEOUT)?;
    let connections = count(
        "--connections",
        connections.unwrap_or(command.default_connections()),
        CONNECTIONS,
    )?;
    let threads = match *threads {
        Some(t) => {
            let t = count(command.threads_flag(), t, LOAD_THREADS)?;
            if t > connections {
                return Err(PlanError::BadValue {
                    flag: command.threads_flag(),
                    value: t.to_string(),
                    reason: format!(
                        "more threads than --connections {connections}: every thread needs a connection"
                    ),
                });
            }
            t
        }
        None => default_load_threads(online_cpus, connections),
    };
    let rate = rate.map(|r| real("--rate", r, RATE)).transpose()?;
    let speed = speed.map(|s| real("--speed", s, SPEED)).transpose()?;
    Ok(LoadSettings {
        duration,
        warmup,
        connections,
        threads,
        rate,
        request_timeout,
        speed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_rule_for_threads() {
        let i = LoadInput::default();
        let l = resolve_load(&i, LoadCommand::Load, 8).unwrap();
        let s = resolve_load(&i, LoadCommand::ServerTrial, 8).unwrap();
        assert_eq!((l.threads, s.threads), (4, 4));
        assert_eq!((l.connections, s.connections), (64, 16));
        assert_eq!(resolve_load(&i, LoadCommand::Load, 1).unwrap().threads, 1);
        let i = LoadInput {
            threads: Some(5),
            connections: Some(4),
            ..Default::default()
        };
        let e = resolve_load(&i, LoadCommand::Load, 8)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("--threads 5"), "{e}");
        let e = resolve_load(&i, LoadCommand::ServerTrial, 8)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("--load-threads 5"), "{e}");
    }

    #[test]
    fn every_number_has_a_range() {
        for (input, flag) in [
            (
                LoadInput {
                    duration: Some("1e300".into()),
                    ..Default::default()
                },
                "--duration 1e300",
            ),
            (
                LoadInput {
                    duration: Some("1e18".into()),
                    ..Default::default()
                },
                "--duration 1e18",
            ),
            (
                LoadInput {
                    rate: Some(1e-300),
                    ..Default::default()
                },
                "--rate 1e-300",
            ),
            (
                LoadInput {
                    rate: Some(1e300),
                    ..Default::default()
                },
                "--rate 1e300",
            ),
            (
                LoadInput {
                    speed: Some(f64::NAN),
                    ..Default::default()
                },
                "--speed NaN",
            ),
            (
                LoadInput {
                    connections: Some(0),
                    ..Default::default()
                },
                "--connections 0",
            ),
            (
                LoadInput {
                    request_timeout: Some("0s".into()),
                    ..Default::default()
                },
                "--timeout 0s",
            ),
        ] {
            let e = resolve_load(&input, LoadCommand::Load, 2)
                .unwrap_err()
                .to_string();
            assert!(e.starts_with(flag) && e.contains("must be"), "{e}");
        }
    }

    #[test]
    fn ranges_are_described() {
        assert_eq!(INTERVAL.describe(), "from 10ms to 1h");
        assert_eq!(LOAD_WARMUP.describe(), "from 0s to 1day");
        assert_eq!(LOAD_DURATION.describe(), "from 1ms to 1day");
        assert_eq!(
            INTERVAL.parse("1e300").unwrap_err(),
            "must be from 10ms to 1h"
        );
        assert!(INTERVAL.parse("inf").is_err() && INTERVAL.parse("NaN").is_err());
        assert!(INTERVAL
            .parse("2h")
            .unwrap_err()
            .contains("from 10ms to 1h"));
        assert!(LOAD_WARMUP.parse("0").is_ok());
        assert!(LOAD_DURATION.parse("0").is_err());
    }

    /// A named default is one its own check accepts.
    #[test]
    fn the_soak_defaults_are_within_their_ranges() {
        let within = |d: Duration, r: DurationRange| r.min <= d && d <= r.max;
        assert!(within(SOAK_WINDOW_DEFAULT, SOAK_WINDOW));
        assert!(within(SOAK_INTERVAL_DEFAULT, SOAK_INTERVAL));
        let (lo, hi) = SOAK_WARMUP_WINDOWS;
        assert!((lo..=hi).contains(&SOAK_WARMUP_WINDOWS_DEFAULT));
    }
}
