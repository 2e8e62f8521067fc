//! A fixed experiment for snapshot tests: numbers that do not drift with the machine.

use crate::linux::host::HostInfo;
use crate::plan::{Plan, Variant, VariantOrigin};
use crate::record::{
    AllocatorPoint, AllocatorView, ArenaHoles, CpuPlace, CpuView, Experiment, ExperimentStatus,
    FigureUnit, HoleClass, HolePart, Holes, InsideView, PeakSource, RequireNode, RequireTree,
    RunRecord, RunStatus, RuntimeFigure, RuntimeSeries, RuntimeView, TreeSample, Verification,
};

fn variant(name: &str, env: &[(&str, &str)], preload: Option<&str>) -> Variant {
    Variant {
        name: name.into(),
        env: env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        preload: preload.map(|p| format!("/usr/lib/x86_64-linux-gnu/lib{p}.so.2").into()),
        preload_spec: preload.map(String::from),
        origin: VariantOrigin::Catalog,
        program: None,
        knobs: Default::default(),
    }
}

/// The allocator probe's view: the program has about 250 MiB live at most under every
/// variant (a run's own share of the peak's last digits on top, so runs differ a little);
/// glibc holds twice what is live, jemalloc 1.1×; a ruby runtime view on glibc.
fn inside(variant: &str, peak: u64, grows: bool, wall: f64) -> InsideView {
    let live = (250 << 20) + (peak % (7 << 20));
    let held = if grows { live * 2 } else { live + live / 10 };
    // Five samples over the run, the last two (the most held) at its peak.
    let at = [0.0, 0.3, 0.6, 0.91, 0.93];
    let series: Vec<AllocatorPoint> = (0..=4)
        .map(|i| AllocatorPoint {
            t_seconds: at[i as usize] * wall,
            live_bytes: Some(live * i / 4),
            held_bytes: Some(held * i / 4),
            free_bytes: Some((held - live) * i / 4),
            ..Default::default()
        })
        .collect();
    let mut runtimes = Vec::new();
    if variant == "glibc" {
        runtimes.push(RuntimeView {
            runtime: "ruby".into(),
            version: Some("3.1.2".into()),
            processes: 1,
            figures: vec![RuntimeFigure {
                name: "heap_live_slots".into(),
                unit: FigureUnit::Count,
                last: 120_000.0,
                max: 150_000.0,
            }],
            series: vec![RuntimeSeries {
                name: "heap_live_slots".into(),
                unit: FigureUnit::Count,
                points: vec![[0.0, 10_000.0], [2.0, 150_000.0], [4.0, 120_000.0]],
            }],
            note: None,
        });
    }
    InsideView {
        allocator: Some(AllocatorView {
            answered: if variant == "jemalloc" {
                "jemalloc"
            } else {
                "glibc"
            }
            .into(),
            library: "/lib/x86_64-linux-gnu/libc.so.6".into(),
            processes: 1,
            interval_ms: 1000,
            disagreement: None,
            at_peak: series.last().cloned(),
            peak_live_bytes: Some(live),
            peak_held_bytes: Some(held),
            series,
            holes: Some(holes(variant, peak)),
        }),
        runtimes,
        absent: Vec::new(),
        requires: (variant != "arena2").then(|| requires(variant)),
        cpu: (variant != "arena2").then(|| cpu(variant)),
        trim: None,
        thp: None,
        python: None,
    }
}

/// Where the CPU went: glibc's malloc.c takes 13.5%, jemalloc 4.8% (the JNI team's figures).
fn cpu(variant: &str) -> CpuView {
    let (name, allocator) = if variant == "jemalloc" {
        ("libjemalloc.so.2", 48)
    } else {
        ("libc.so.6 (malloc.c)", 135)
    };
    CpuView {
        rate_hz: 99,
        kernel_included: true,
        samples: 1000,
        allocator,
        kernel: 60,
        unattributed: 0,
        lost: 0,
        places: vec![
            CpuPlace {
                name: "server".into(),
                samples: 1000 - allocator - 60,
                allocator: false,
            },
            CpuPlace {
                name: name.into(),
                samples: allocator,
                allocator: true,
            },
            CpuPlace {
                name: "[kernel]".into(),
                samples: 60,
                allocator: false,
            },
        ],
        note: Some("glibc's allocator code (malloc.c's functions) found in libc.so.6".into()),
        own_seconds: 0.01,
    }
}

/// A boot's requires: rails/all with rails and active_support under it; jemalloc's a
/// tenth smaller.
fn requires(variant: &str) -> RequireTree {
    let scale = if variant == "jemalloc" { 0.9 } else { 1.0 };
    let node =
        |depth: u32, name: &str, gem: &str, start_mib: f64, mib: f64, objects: u64| RequireNode {
            depth,
            name: name.into(),
            path: format!("/usr/share/rubygems-integration/all/gems/{gem}/lib/{name}.rb"),
            gem: gem.into(),
            rss_before_bytes: (start_mib * 1048576.0) as u64,
            rss_after_bytes: ((start_mib + mib * scale) * 1048576.0) as u64,
            objects,
            seconds: 0.01,
            also: if name == "rails" {
                vec!["active_record/railtie".into()]
            } else {
                Vec::new()
            },
        };
    RequireTree {
        processes: 1,
        ruby: "3.1.2".into(),
        own_objects: 21,
        nodes: vec![
            node(0, "rails/all", "railties", 14.0, 42.0, 600_000),
            node(1, "rails", "railties", 14.5, 18.0, 250_000),
            node(2, "active_support", "activesupport", 15.0, 3.5, 70_000),
            node(2, "set", "ruby", 18.5, 0.1, 900),
            node(
                1,
                "active_record/railtie",
                "activerecord",
                33.0,
                12.0,
                120_000,
            ),
        ],
    }
}

/// The allocator's free memory at the peak: glibc with free chunks mostly under 1 KiB in
/// five arenas and an eighth of its peak free at the tops of its heaps; jemalloc with a
/// fifth of its peak in dirty pages.
fn holes(variant: &str, peak: u64) -> Holes {
    let part = |name: &str, bytes: u64, resident: bool| HolePart {
        name: name.into(),
        bytes,
        resident,
    };
    if variant == "jemalloc" {
        return Holes {
            allocator: "jemalloc".into(),
            processes: 1,
            t_seconds: 1.0,
            resident_bytes: peak,
            free_bytes: Some(peak / 10),
            free_blocks: Some(peak / 10 / 256),
            classes: vec![HoleClass {
                from_bytes: 65,
                up_to_bytes: Some(256),
                bytes: peak / 10,
                blocks: peak / 10 / 256,
            }],
            parts: vec![
                part("dirty pages", peak / 5, true),
                part("muzzy pages", 0, false),
                part("retained", peak / 3, false),
            ],
            arenas: Vec::new(),
        };
    }
    let free = peak / 4;
    Holes {
        allocator: "glibc".into(),
        processes: 1,
        t_seconds: 1.0,
        resident_bytes: peak,
        free_bytes: Some(free),
        free_blocks: Some(free / 300),
        classes: vec![
            HoleClass {
                from_bytes: 257,
                up_to_bytes: Some(1024),
                bytes: free / 5 * 4,
                blocks: free / 5 * 4 / 300,
            },
            HoleClass {
                from_bytes: 4097,
                up_to_bytes: Some(16384),
                bytes: free / 5,
                blocks: free / 5 / 8192,
            },
        ],
        parts: vec![part("top of heaps", peak / 8, true)],
        arenas: (0..5)
            .map(|i| ArenaHoles {
                main: i == 0,
                system_bytes: peak / 5,
                free_bytes: free / 5,
                top_bytes: peak / 40,
            })
            .collect(),
    }
}

fn run(variant: &str, block: u32, peak_mib: f64, wall: f64, status: RunStatus) -> RunRecord {
    let peak = (peak_mib * 1048576.0) as u64;
    // The run sampled 41 times: glibc keeps growing, the others level off after 1 s.
    let grows = variant == "glibc";
    let samples = (0..=40)
        .map(|i| {
            let t = i as f64 * wall / 40.0;
            let frac = if grows { t / wall } else { (t / 1.0).min(1.0) };
            let rss = (peak as f64 * (0.05 + 0.95 * frac)) as u64;
            TreeSample {
                t_seconds: t,
                rss_bytes: rss,
                vsz_bytes: peak * 3,
                threads: 17,
                pss_bytes: (i % 10 == 0).then_some(rss - 4096),
                uss_bytes: None,
                processes: 1,
            }
        })
        .collect();
    RunRecord {
        variant: variant.into(),
        block,
        warmup: false,
        started_at: format!("2026-11-22T10:0{block}:00Z"),
        status,
        exit_code: Some(if status == RunStatus::Failed { 1 } else { 0 }),
        signal: None,
        wall_seconds: wall,
        cpu_user_seconds: wall * 1.5,
        cpu_sys_seconds: wall * 0.25,
        peak_rss_bytes: peak,
        peak_rss_source: PeakSource::Wait4Maxrss,
        mean_rss_bytes: peak * 3 / 5,
        final_rss_bytes: peak,
        peak_pss_bytes: Some(peak - 4096),
        peak_uss_bytes: Some(peak - 8192),
        peak_vsz_bytes: peak * 3,
        threads_peak: 17,
        minor_faults: 1000 + block as u64,
        major_faults: 0,
        processes_seen: 1,
        allocator_detected: match variant {
            "jemalloc" => "jemalloc".into(),
            _ => "glibc".into(),
        },
        verification: match variant {
            "glibc" => Verification::NothingToVerify,
            _ => Verification::Verified,
        },
        verification_detail: "fixture".into(),
        message: (status == RunStatus::Failed).then(|| "exited with code 1".into()),
        stdout_path: format!("/tmp/logs/{block}-{variant}.stdout").into(),
        stderr_path: format!("/tmp/logs/{block}-{variant}.stderr").into(),
        cgroup: None,
        load: None,
        inside: inside(variant, peak, grows, wall),
        driver: None,
        regions: None,
        samples,
    }
}

/// Three variants, three blocks; arena2's last run failed.
pub fn experiment() -> Experiment {
    let runs = vec![
        run("glibc", 0, 812.0, 3.10, RunStatus::Ok),
        run("arena2", 0, 501.0, 3.40, RunStatus::Ok),
        run("jemalloc", 0, 402.0, 2.90, RunStatus::Ok),
        run("jemalloc", 1, 398.5, 2.95, RunStatus::Ok),
        run("glibc", 1, 790.0, 3.05, RunStatus::Ok),
        run("arena2", 1, 512.0, 3.35, RunStatus::Ok),
        run("arena2", 2, 505.0, 3.50, RunStatus::Failed),
        run("glibc", 2, 805.5, 3.20, RunStatus::Ok),
        run("jemalloc", 2, 405.0, 2.85, RunStatus::Ok),
    ];
    Experiment {
        id: 7,
        seqs: (0..9).collect(),
        created_at: "2026-11-22T10:00:00Z".into(),
        finished_at: Some("2026-11-22T10:03:00Z".into()),
        status: ExperimentStatus::Complete,
        plan: Plan {
            command: vec![
                "ruby".into(),
                "job.rb".into(),
                "--input".into(),
                "big file.csv".into(),
            ],
            program: "/usr/bin/ruby".into(),
            workdir: "/srv/app".into(),
            variants: vec![
                variant("glibc", &[], None),
                variant("arena2", &[("MALLOC_ARENA_MAX", "2")], None),
                variant("jemalloc", &[], Some("jemalloc")),
            ],
            baseline: "glibc".into(),
            runs: 3,
            warmup: 0,
            interval_ms: 100,
            timeout_ms: None,
            grace_ms: 3000,
            limits: Default::default(),
            server: None,
            probes: Default::default(),
            worker: None,
            seed: 1234,
        },
        host: host("build-1"),
        hosts: vec![host("build-1")],
        run_hosts: vec![0; runs.len()],
        runs,
        notes: vec![
            "skipping tcmalloc: not installed here (apt-get install -y libtcmalloc-minimal4)"
                .into(),
        ],
    }
}

fn host(name: &str) -> HostInfo {
    HostInfo {
        hostname: name.into(),
        cpus: 2,
        memory_bytes: 24 << 30,
        kernel: "6.1.0-fixture".into(),
        glibc: "2.36".into(),
        container: None,
    }
}

/// The three-variant experiment run again on a second host, `node-b`, whose own cgroup
/// has a CPU quota of one CPU and where every run took twice as long and used less memory.
pub(crate) fn two_host_experiment() -> Experiment {
    let mut e = experiment();
    let mut b = host("node-b");
    b.container = Some(crate::linux::host::HostLimits {
        cpu_quota_us: Some(100_000),
        cpu_period_us: Some(100_000),
        ..Default::default()
    });
    let mut a = host("node-a");
    a.container = Some(crate::linux::host::HostLimits::default());
    e.host = a.clone();
    e.hosts = vec![a, b];
    let more: Vec<RunRecord> = e
        .runs
        .iter()
        .map(|r| {
            let mut r = r.clone();
            r.wall_seconds *= 2.0;
            r.cpu_user_seconds *= 2.0;
            r.peak_rss_bytes = r.peak_rss_bytes / 4 * 3;
            r
        })
        .collect();
    let n = e.runs.len();
    e.runs.extend(more);
    e.seqs = (0..e.runs.len() as u32).collect();
    e.run_hosts = (0..e.runs.len()).map(|i| usize::from(i >= n)).collect();
    e
}
