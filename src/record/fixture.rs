//! Test data: the optional parts of a run, filled, for the tests that write a run out and
//! read it back (the store, the JSON record).

use super::{DriverFigure, DriverFigures, RegionsRead, RunRecord};
use crate::linux::cgroup::CgroupFigures;
use crate::linux::regions::{FileRss, Kind, Region, Regions};

/// `r` with its cgroup's figures, a driver's figures and where its memory was.
pub(crate) fn with_optional_parts(mut r: RunRecord) -> RunRecord {
    r.cgroup = Some(CgroupFigures {
        peak_bytes: Some(1 << 30),
        oom_kills: 1,
        ..Default::default()
    });
    r.driver = Some(DriverFigures {
        driven_start_seconds: 0.01,
        ready_seconds: Some(0.5),
        driven_end_seconds: 2.0,
        figures: [(
            "jobs_per_second".to_string(),
            DriverFigure {
                value: 812.5,
                unit: Some("jobs/s".into()),
            },
        )]
        .into(),
        ignored: vec!["memtrial-figure x: bad".into()],
    });
    r.regions = Some(RegionsRead {
        t_seconds: 1.5,
        tree_rss_bytes: 300 << 20,
        status_rss_bytes: 297 << 20,
        status_rss_after_bytes: 296 << 20,
        processes: 2,
        reads: 4,
        read_seconds: 0.012,
        regions: Regions {
            by_kind: [(Kind::ExecAnon, 256 << 20), (Kind::FileCode, 40 << 20)].into(),
            rss_bytes: 296 << 20,
            arena_heaps: 3,
            thread_stacks: 5,
            largest_exec_anon: Some(Region {
                size_bytes: 256 << 20,
                rss_bytes: 256 << 20,
            }),
            files: vec![FileRss {
                path: "/usr/lib/libruby.so.3.1".into(),
                rss_bytes: 30 << 20,
            }],
            anon_huge_by_kind: [(Kind::ExecAnon, 4 << 20)].into(),
        },
        series: vec![
            crate::record::RegionsPoint {
                t_seconds: 0.5,
                by_kind: [(Kind::ExecAnon, 256 << 20)].into(),
            },
            crate::record::RegionsPoint {
                t_seconds: 1.5,
                by_kind: [(Kind::ExecAnon, 256 << 20), (Kind::FileCode, 40 << 20)].into(),
            },
        ],
    });
    r.inside.trim = Some(crate::record::TrimView {
        interval_ms: 1000,
        processes: 1,
        trims: 2,
        released: 2,
        returned_bytes: 180 << 20,
        largest_bytes: 180 << 20,
        cpu_seconds: 0.03,
        longest_seconds: 0.05,
        series: vec![crate::record::TrimPoint {
            t_seconds: 1.0,
            returned_bytes: 180 << 20,
            cpu_seconds: 0.03,
        }],
    });
    r.inside.thp = Some(crate::record::ThpView {
        host: Some(crate::linux::thp::ThpMode {
            enabled: "madvise".into(),
            defrag: "madvise".into(),
        }),
        peak_anon_huge_bytes: Some(62 << 20),
        rss_at_peak_anon_huge_bytes: Some(64 << 20),
        reads: 3,
    });
    r.inside.python = Some(crate::record::PythonView {
        executable: "/usr/bin/python3.11".into(),
        pythonmalloc: Some("malloc".into()),
    });
    r
}

/// A one-variant plan of `/bin/true`, for tests of what stores and reads plans.
pub(crate) fn plan() -> crate::plan::Plan {
    crate::plan::Plan {
        command: vec!["true".into()],
        program: "/bin/true".into(),
        workdir: "/".into(),
        variants: vec![crate::plan::Variant {
            name: "glibc".into(),
            env: vec![],
            preload: None,
            preload_spec: None,
            origin: crate::plan::VariantOrigin::Catalog,
            program: None,
            knobs: Default::default(),
        }],
        baseline: "glibc".into(),
        runs: 1,
        warmup: 0,
        interval_ms: 100,
        timeout_ms: None,
        grace_ms: 3000,
        limits: Default::default(),
        server: None,
        probes: Default::default(),
        worker: None,
        seed: 9,
    }
}
