//! A fixed inspection for the snapshot tests: the mappings of a captured process
//! (`tests/fixtures/inspect/arenas20.smaps`: glibc 2.36, 20 threads, 16 arenas), in a
//! cgroup with a 0.5 CPU quota on a 2-CPU host, watched for 10 s, plus a `--top` list.
//! Nothing here reads the live machine.

use super::arenas::{LimitSource, Method};
use super::classify::{self, Kind};
use super::glibc::{GlibcVersion, VersionSource};
use super::procs::{Member, RankBy, Top, TopEntry, Tree};
use super::*;
use crate::linux::container::{Container, CpuGroup, CpuQuota, CpusetGroup, MemoryGroup, Version};

const SMAPS: &str = include_str!("../../tests/fixtures/inspect/arenas20.smaps");

/// The 15 heaps of the capture (found from its heap headers when it was taken).
fn heaps(maps: &[Mapping]) -> Vec<(u64, u64)> {
    maps.iter()
        .filter(|m| m.path.is_none() && m.inode == 0 && m.perms == "rw-p")
        .filter(|m| m.start % arenas::HEAP_MAX == 0 && m.end - m.start < arenas::HEAP_MAX)
        .map(|m| (m.start, m.start + arenas::HEAP_MAX))
        .collect()
}

pub fn inspection() -> Inspection {
    let smaps = classify::parse_smaps(SMAPS).expect("captured smaps parse");
    let maps: Vec<Mapping> = smaps.iter().map(|(m, _)| m.clone()).collect();
    let kinds = classify::classify(&maps, &heaps(&maps));
    let mappings = classify::group(&smaps, &kinds);
    let sum = |f: fn(&Group) -> u64| mappings.iter().map(f).sum::<u64>();
    let rss = sum(|g| g.rss_bytes);
    let mapping_totals = MappingTotals {
        mappings: sum(|g| g.mappings),
        size_bytes: sum(|g| g.size_bytes),
        rss_bytes: rss,
        pss_bytes: sum(|g| g.pss_bytes),
        uss_bytes: sum(|g| g.uss_bytes),
        swap_bytes: 0,
        rollup_rss_bytes: Some(rss),
        rollup_pss_bytes: Some(sum(|g| g.pss_bytes) + 1024),
    };
    let thread_stacks = classify::thread_stack_count(&maps, &kinds);
    let quota = CpuQuota {
        quota_us: 50_000,
        period_us: 100_000,
        cpus: 0.5,
    };
    let samples: Vec<Sample> = (0..=20)
        .map(|i| Sample {
            t_seconds: f64::from(i) * 0.5,
            rss_bytes: rss + if i < 4 { 0 } else { 4096 },
            pss_bytes: Some(mapping_totals.pss_bytes),
            threads: 21,
            arenas: Some(16),
        })
        .collect();
    let series: Vec<(f64, f64)> = samples
        .iter()
        .map(|s| (s.t_seconds, s.rss_bytes as f64))
        .collect();
    let mut ins = Inspection {
        schema_version: SCHEMA_VERSION,
        pid: 4242,
        complete: true,
        missing: vec![],
        access: None,
        threads: 21,
        memory: Memory {
            rss_bytes: rss,
            rss_anon_bytes: rss - (1500 << 10),
            rss_file_bytes: 1500 << 10,
            rss_shmem_bytes: 0,
            pss_bytes: Some(mapping_totals.pss_bytes + 1024),
            uss_bytes: Some(mapping_totals.uss_bytes),
            swap_bytes: 0,
            peak_rss_bytes: rss + (2 << 20),
            vsz_bytes: mapping_totals.size_bytes - 4096,
        },
        process: Process {
            comm: "arenas".into(),
            exe: Some("/tmp/mt/arenas".into()),
            cmdline: vec!["/tmp/mt/arenas".into(), "20".into(), "600".into()],
            state: 'S',
            ppid: 4200,
            threads: 21,
            age_seconds: Some(95.0),
            cpu_seconds: 0.12,
            runtimes: vec![],
        },
        mappings,
        mapping_totals: Some(mapping_totals),
        thread_stacks: Some(thread_stacks),
        allocator: Some(allocator()),
        glibc: Some(glibc()),
        glibc_arenas: Some(Arenas {
            count: 16,
            method: Method::HeapHeaders,
            heaps: 15,
            limit: 16,
            limit_source: LimitSource::Default { online_cpus: 2 },
            threads: 21,
        }),
        cgroup: Some(cgroup(quota)),
        host: Host {
            online_cpus: 2,
            memory_bytes: 24 << 30,
        },
        tree: Some(tree(rss, &mapping_totals)),
        advice: vec![],
        watch: Some(Watch {
            interval_seconds: 0.5,
            requested_seconds: 10.0,
            end: WatchEnd::Completed,
            samples,
            trend: trend::trend(&series, &TrendRules::default()),
        }),
        thp: Some(super::ThpSeen {
            host: crate::linux::thp::ThpMode {
                enabled: "madvise".into(),
                defrag: "madvise".into(),
            },
            enabled_for_process: Some(true),
            anon_huge_bytes: Some(0),
        }),
        trimmable: Some(crate::linux::glibc_heap::Trimmable {
            bytes: 41 << 20,
            top_bytes: 1 << 20,
            free_chunks: 1_234,
            free_bytes: 44 << 20,
            heaps: 5,
            chunks: 250_000,
            complete: true,
        }),
        jemalloc_arenas: None,
        trimmed: None,
    };
    ins.advice = advice::advise(&ins);
    ins
}

/// The allocator the fixture process uses: glibc, dynamically linked.
fn allocator() -> Allocator {
    Allocator {
        name: "glibc".into(),
        evidence: vec![
            "dynamically linked (interpreter /lib64/ld-linux-x86-64.so.2)".into(),
            "no other allocator library is mapped; malloc comes from glibc's /usr/lib/x86_64-linux-gnu/libc.so.6".into(),
        ],
        linkage: Some("dynamic".into()),
        defines_malloc: Some(false),
        ld_preload: None,
        preload_ignored: None,
        settings: vec![],
    }
}

/// The fixture's glibc: Debian 12's 2.36, from its banner.
fn glibc() -> GlibcVersion {
    GlibcVersion {
        version: "2.36".into(),
        banner: Some(
            "GNU C Library (Debian GLIBC 2.36-9+deb12u4) stable release version 2.36.".into(),
        ),
        library: "/usr/lib/x86_64-linux-gnu/libc.so.6".into(),
        source: VersionSource::Banner,
    }
}

/// A v1 cgroup with half a CPU of quota on a 2-CPU host.
fn cgroup(quota: CpuQuota) -> Container {
    Container {
        memory_limit_bytes: Some(512 << 20),
        memory_usage_bytes: Some(64 << 20),
        cpu_quota_cpus: Some(0.5),
        visible_cpus: 2,
        memory: Some(MemoryGroup {
            working_set_bytes: None,
            limit_from: None,
            version: Version::V1,
            path: "/svc/web".into(),
            limit_bytes: Some(512 << 20),
            usage_bytes: Some(64 << 20),
            peak_bytes: Some(80 << 20),
        }),
        cpu: Some(CpuGroup {
            quota_from: None,
            version: Version::V1,
            path: "/svc/web".into(),
            quota: Some(quota),
        }),
        cpuset: Some(CpusetGroup {
            version: Version::V1,
            path: "/".into(),
            cpus: "0-1".into(),
            count: 2,
        }),
        cpus_allowed: Some("0-1".into()),
        cpus_allowed_count: Some(2),
        own_pid_namespace: Some(false),
        notes: vec![],
    }
}

/// The process and one child.
fn tree(rss: u64, mapping_totals: &MappingTotals) -> Tree {
    Tree {
        root: 4242,
        processes: 2,
        threads: 22,
        rss_bytes: rss + (3 << 20),
        pss_bytes: mapping_totals.pss_bytes + (1 << 20),
        uss_bytes: mapping_totals.uss_bytes + (900 << 10),
        swap_bytes: 0,
        pss_unreadable: 0,
        exited: 0,
        members: vec![
            Member {
                pid: 4242,
                ppid: 4200,
                comm: "arenas".into(),
                threads: 21,
                rss_bytes: rss,
                pss_bytes: Some(mapping_totals.pss_bytes),
                uss_bytes: Some(mapping_totals.uss_bytes),
                swap_bytes: 0,
            },
            Member {
                pid: 4243,
                ppid: 4242,
                comm: "sh".into(),
                threads: 1,
                rss_bytes: 3 << 20,
                pss_bytes: Some(1 << 20),
                uss_bytes: Some(900 << 10),
                swap_bytes: 0,
            },
        ],
    }
}

/// A fixed `--top 3`.
pub fn top() -> Top {
    Top {
        schema_version: SCHEMA_VERSION,
        ranked_by: RankBy::Rss,
        scanned: 57,
        exited: 1,
        processes: vec![
            TopEntry {
                pid: 4242,
                comm: "java".into(),
                threads: 1003,
                rss_bytes: 6 << 30,
                pss_bytes: Some(5 << 30),
                allocator: Some("glibc".into()),
                glibc_arenas: Some(412),
                arenas_method: Some(Method::HeapHeaders),
                notes: vec![],
            },
            TopEntry {
                pid: 977,
                comm: "rustc".into(),
                threads: 8,
                rss_bytes: 190 << 20,
                pss_bytes: Some(188 << 20),
                allocator: Some("jemalloc (linked into the executable)".into()),
                glibc_arenas: None,
                arenas_method: None,
                notes: vec![],
            },
            TopEntry {
                pid: 1,
                comm: "systemd".into(),
                threads: 1,
                rss_bytes: 12 << 20,
                pss_bytes: None,
                allocator: Some("glibc".into()),
                glibc_arenas: Some(1),
                arenas_method: Some(Method::Estimate),
                notes: vec!["/proc/PID/smaps_rollup: permission denied".into()],
            },
        ],
    }
}

#[test]
fn the_fixture_is_what_it_says() {
    let i = inspection();
    assert_eq!(i.thread_stacks, Some(20));
    let k: Vec<Option<Kind>> = i.mappings.iter().map(|g| g.kind).collect();
    assert!(k.contains(&Some(Kind::MallocArenas)));
    assert!(i
        .advice
        .iter()
        .any(|a| a.kind == AdviceKind::ArenaLimitAboveCpuQuota));
}
