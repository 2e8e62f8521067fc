//! Advice from an [`Inspection`]: each item names the facts that triggered it.
//! No facts, no advice. Pure, so every rule is tested on constructed inspections.

use serde::Serialize;

use super::arenas::LimitSource;
use super::{Inspection, WatchEnd};
use crate::analysis::trend::Trend;
use crate::units::format_bytes;

/// Which rule fired.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AdviceKind {
    /// glibc sizes its arena limit from online CPUs, above the cgroup CPU quota.
    ArenaLimitAboveCpuQuota,
    /// jemalloc sizes its default arena count from the affinity mask, above the quota.
    JemallocArenasAboveCpuQuota,
    /// Many more arenas than CPUs the process can use.
    ManyArenas,
    /// `LD_PRELOAD` names an allocator that does not answer `malloc`.
    PreloadIgnored,
    /// Cgroup memory usage near its limit.
    NearMemoryLimit,
    /// Part of the process is swapped out.
    Swapped,
    /// RSS kept growing while watched.
    Growing,
    /// A Ruby process's executable anonymous region (YJIT's) is large.
    JitRegion,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Advice {
    pub kind: AdviceKind,
    pub message: String,
    /// The observed facts behind it.
    pub evidence: Vec<String>,
}

/// `8` or `0.5`.
fn fmt_cpus(c: f64) -> String {
    if c.fract() == 0.0 {
        format!("{c:.0}")
    } else {
        format!("{c:.2}").trim_end_matches('0').to_string()
    }
}

fn try_line(ins: &Inspection) -> String {
    if ins.process.cmdline.is_empty() {
        "memtrial run --variants glibc,arena2,jemalloc -- COMMAND".into()
    } else {
        format!(
            "memtrial run --variants glibc,arena2,jemalloc -- {}",
            shell_words::join(&ins.process.cmdline)
        )
    }
}

/// The advice for an inspection.
pub(crate) fn advise(ins: &Inspection) -> Vec<Advice> {
    let cpus = CpuView::of(ins);
    let mut out = Vec::new();
    glibc_arena_advice(ins, &cpus, &mut out);
    jemalloc_arena_advice(ins, &cpus, &mut out);
    preload_advice(ins, &mut out);
    memory_limit_advice(ins, &mut out);
    swap_advice(ins, &mut out);
    growth_advice(ins, &mut out);
    jit_advice(ins, &mut out);
    out
}

/// What the process can use of the CPUs, as the rules about arenas need it.
struct CpuView {
    /// The cgroup's CPU quota and the cgroup's path, when there is one.
    quota: Option<(crate::linux::container::CpuQuota, String)>,
    /// CPUs usable: online, quota, cpuset and affinity.
    usable: f64,
    /// CPUs in the affinity mask: what jemalloc sizes its default arena count from.
    affinity: u32,
    jemalloc_default: u64,
}

impl CpuView {
    fn of(ins: &Inspection) -> CpuView {
        let quota = ins
            .cgroup
            .as_ref()
            .and_then(|c| c.cpu.as_ref())
            .and_then(|c| c.quota.map(|q| (q, c.path.clone())));
        let usable = ins
            .cgroup
            .as_ref()
            .and_then(|c| c.effective_cpus())
            .unwrap_or(f64::from(ins.host.online_cpus))
            .min(f64::from(ins.host.online_cpus));
        let affinity = ins
            .cgroup
            .as_ref()
            .and_then(|c| c.cpus_allowed_count)
            .unwrap_or(ins.host.online_cpus);
        CpuView {
            quota,
            usable,
            affinity,
            jemalloc_default: 4 * u64::from(affinity),
        }
    }

    fn jemalloc_line(&self, q: f64) -> String {
        let (affinity, jemalloc_default) = (self.affinity, self.jemalloc_default);
        format!(
            "jemalloc's default is 4 arenas per CPU in the affinity mask: 4 × {affinity} = {jemalloc_default} here, also blind to the quota (set MALLOC_CONF=narenas:{} with it)",
            crate::linux::allocator::jemalloc_arenas_for(q)
        )
    }
}

/// glibc: an arena limit sized from online CPUs above the CPU quota, or many more arenas
/// than usable CPUs.
fn glibc_arena_advice(ins: &Inspection, cpus: &CpuView, out: &mut Vec<Advice>) {
    let glibc = ins.allocator.as_ref().is_some_and(|a| a.is_glibc());
    let (quota, usable) = (&cpus.quota, cpus.usable);
    let jemalloc_line = |q: f64| cpus.jemalloc_line(q);
    if let (true, Some(a)) = (glibc, &ins.glibc_arenas) {
        let default_limit = matches!(a.limit_source, LimitSource::Default { .. });
        let mut fired = false;
        if let (true, Some((q, path))) = (default_limit, &quota) {
            if q.cpus < f64::from(ins.host.online_cpus) {
                fired = true;
                // glibc hands a thread its own arena on contention until the limit;
                // a process cannot have more arenas than threads that allocate.
                let bound = a.limit.min(a.threads.max(1));
                out.push(Advice {
                    kind: AdviceKind::ArenaLimitAboveCpuQuota,
                    message: format!(
                        "{} arenas for {} threads; glibc allows {} here because {} CPUs are visible but the quota is {} → set MALLOC_ARENA_MAX=2 or preload jemalloc; try `{}` to measure both",
                        a.count,
                        a.threads,
                        a.limit,
                        ins.host.online_cpus,
                        fmt_cpus(q.cpus),
                        try_line(ins)
                    ),
                    evidence: vec![
                        format!(
                            "cgroup {path}: CPU quota {} µs per {} µs = {:.2} CPU",
                            q.quota_us, q.period_us, q.cpus
                        ),
                        format!(
                            "no MALLOC_ARENA_MAX or glibc.malloc.arena_max in the environment: limit 8 × {} online CPUs = {} (glibc does not read the quota)",
                            ins.host.online_cpus, a.limit
                        ),
                        format!(
                            "{} of at most {} arenas now ({:.0}%): the bound is the smaller of the limit ({}) and the threads ({}){}",
                            a.count,
                            bound,
                            100.0 * a.count as f64 / bound as f64,
                            a.limit,
                            a.threads,
                            if a.threads < a.limit {
                                format!("; more threads can take it to {}", a.limit)
                            } else {
                                String::new()
                            }
                        ),
                        jemalloc_line(q.cpus),
                    ],
                });
            }
        }
        let many = a.count >= 4 && (a.count as f64) > 2.0 * usable.ceil().max(1.0);
        if many && !fired {
            out.push(Advice {
                kind: AdviceKind::ManyArenas,
                message: format!(
                    "{} arenas for {} usable CPU(s): free memory kept per arena fragments the heap; compare a lower MALLOC_ARENA_MAX and jemalloc: {}",
                    a.count,
                    usable,
                    try_line(ins)
                ),
                evidence: vec![
                    format!(
                        "{} glibc arenas ({}), limit {}, {} threads",
                        a.count,
                        match a.method {
                            super::arenas::Method::HeapHeaders => "counted from heap headers",
                            super::arenas::Method::Estimate => "estimated from the maps",
                        },
                        a.limit,
                        a.threads
                    ),
                    format!("{usable} CPU(s) usable (online, quota, cpuset and affinity)"),
                ],
            });
        }
    }
}

/// jemalloc: a default arena count from the affinity mask above the CPU quota.
fn jemalloc_arena_advice(ins: &Inspection, cpus: &CpuView, out: &mut Vec<Advice>) {
    let (quota, affinity) = (&cpus.quota, cpus.affinity);
    let (Some(j), Some((q, path))) = (&ins.jemalloc_arenas, &quota) else {
        return;
    };
    use crate::linux::allocator::JemallocArenasSource as S;
    if j.source == S::Setting {
        return;
    }
    let Some(warranted) = crate::linux::allocator::jemalloc_arena_pitfall(j.count, Some(q.cpus))
    else {
        return;
    };
    let counted = match j.source {
        S::Probe => format!(
            "{} arenas (arenas.narenas, read by memtrial's probe in the process)",
            j.count
        ),
        _ => format!(
            "{} arenas by default (4 × {affinity} CPUs in the affinity mask)",
            j.count
        ),
    };
    out.push(Advice {
        kind: AdviceKind::JemallocArenasAboveCpuQuota,
        message: format!(
            "jemalloc makes {counted}, sized for the host, but the quota is {} → set MALLOC_CONF=narenas:{warranted} (its own 4 per CPU, on the quota); try `{}` to measure it",
            fmt_cpus(q.cpus),
            try_line_with(ins, &format!("--variant 'jemalloc-narenas{warranted}=preload:jemalloc MALLOC_CONF=narenas:{warranted}'"))
        ),
        evidence: vec![
            format!(
                "cgroup {path}: CPU quota {} µs per {} µs = {:.2} CPU",
                q.quota_us, q.period_us, q.cpus
            ),
            format!("{affinity} CPUs in the affinity mask; no narenas in MALLOC_CONF"),
        ],
    });
}

/// `memtrial run VARIANTS -- COMMAND` with the process's own command line.
fn try_line_with(ins: &Inspection, variants: &str) -> String {
    let command = if ins.process.cmdline.is_empty() {
        "COMMAND".to_string()
    } else {
        shell_words::join(&ins.process.cmdline)
    };
    format!("memtrial run {variants} -- {command}")
}

/// A preloaded allocator that does not answer malloc.
fn preload_advice(ins: &Inspection, out: &mut Vec<Advice>) {
    if let Some(a) = &ins.allocator {
        if let Some(why) = &a.preload_ignored {
            out.push(Advice {
                kind: AdviceKind::PreloadIgnored,
                message: format!(
                    "the preloaded allocator is not the one answering malloc ({}): remove the LD_PRELOAD or change how the program is built",
                    a.name
                ),
                evidence: vec![
                    format!("LD_PRELOAD={}", a.ld_preload.as_deref().unwrap_or("")),
                    why.clone(),
                ],
            });
        }
    }
}

/// A cgroup close to its memory limit.
fn memory_limit_advice(ins: &Inspection, out: &mut Vec<Advice>) {
    if let Some(m) = ins.cgroup.as_ref().and_then(|c| c.memory.as_ref()) {
        if let (Some(limit), Some(usage)) = (m.limit_bytes, m.usage_bytes) {
            if limit > 0 && usage as f64 >= 0.8 * limit as f64 {
                out.push(Advice {
                    kind: AdviceKind::NearMemoryLimit,
                    message: format!(
                        "the cgroup uses {:.0}% of its memory limit: the OOM killer or reclaim is close",
                        100.0 * usage as f64 / limit as f64
                    ),
                    evidence: vec![format!(
                        "cgroup {}: usage {} of limit {} (usage includes page cache)",
                        m.path,
                        format_bytes(usage as f64),
                        format_bytes(limit as f64)
                    )],
                });
            }
        }
    }
}

/// Part of the process in swap.
fn swap_advice(ins: &Inspection, out: &mut Vec<Advice>) {
    {
        let m = &ins.memory;
        if m.swap_bytes > 0 {
            out.push(Advice {
                kind: AdviceKind::Swapped,
                message: "part of the process is in swap: RSS understates its footprint; compare RSS + swap".into(),
                evidence: vec![format!(
                    "VmSwap {} beside VmRSS {}",
                    format_bytes(m.swap_bytes as f64),
                    format_bytes(m.rss_bytes as f64)
                )],
            });
        }
    }
}

/// RSS still growing under --watch.
fn growth_advice(ins: &Inspection, out: &mut Vec<Advice>) {
    if let Some(w) = &ins.watch {
        if let Trend::Leak { .. } = w.trend {
            let mut evidence = vec![w.trend.sentence()];
            if w.end == WatchEnd::ProcessExited {
                evidence.push("the process exited before the watch ended".into());
            }
            out.push(Advice {
                kind: AdviceKind::Growing,
                message: "RSS is still growing: watch longer to tell a leak from a cache or heap still warming up, and run under jemalloc or tcmalloc to see whether the growth is fragmentation".into(),
                evidence,
            });
        }
    }
}

/// A JIT region worth a smaller size: at least this much of it resident.
const JIT_RESIDENT: u64 = 32 << 20;

/// Ruby: a large executable anonymous region is YJIT's, all of it resident on Ruby 3.1 from
/// the start; a smaller `--yjit-exec-mem-size` caps it.
fn jit_advice(ins: &Inspection, out: &mut Vec<Advice>) {
    use crate::inspect::Runtime;
    let ruby = ins
        .process
        .runtimes
        .iter()
        .any(|h| h.runtime == Runtime::Ruby);
    let Some(exec) = ins
        .mappings
        .iter()
        .filter(|g| g.kind == Some(crate::linux::regions::Kind::ExecAnon))
        .flat_map(|g| g.largest.iter())
        .max_by_key(|m| (m.rss_bytes, m.size_bytes))
    else {
        return;
    };
    if !ruby || exec.rss_bytes < JIT_RESIDENT {
        return;
    }
    // The command without its own YJIT options: the variants set them, the baseline has none.
    let args: Vec<&String> = ins
        .process
        .cmdline
        .iter()
        .filter(|a| !a.starts_with("--yjit"))
        .collect();
    let command = if args.is_empty() {
        "COMMAND".to_string()
    } else {
        shell_words::join(args)
    };
    out.push(Advice {
        kind: AdviceKind::JitRegion,
        message: format!(
            "YJIT's executable region holds {} of the {} resident; a smaller --yjit-exec-mem-size caps it, and memtrial's Ruby probe sizes it from the code YJIT makes: memtrial run --probe ruby --variant 'yjit=RUBYOPT=--yjit' --variant 'yjit32=RUBYOPT=\"--yjit --yjit-exec-mem-size=32\"' -- {command}",
            format_bytes(exec.rss_bytes as f64),
            format_bytes(ins.memory.rss_bytes as f64)
        ),
        evidence: vec![
            format!(
                "one executable anonymous mapping of {} at {:#x}, {} resident (a JIT's code region: YJIT's in a Ruby process)",
                format_bytes(exec.size_bytes as f64),
                exec.start,
                format_bytes(exec.rss_bytes as f64)
            ),
            "Ruby 3.1's YJIT maps its whole region (256 MiB by default) and touches it at start".into(),
        ],
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inspect::arenas::Method;
    use crate::inspect::{Allocator, Arenas, Host, Memory, Process};
    use crate::linux::container::{Container, CpuGroup, CpuQuota, MemoryGroup, Version};

    fn base() -> Inspection {
        Inspection {
            schema_version: 1,
            pid: 42,
            complete: true,
            missing: vec![],
            access: None,
            threads: 20,
            process: Process {
                comm: "app".into(),
                exe: Some("/usr/bin/app".into()),
                cmdline: vec!["/usr/bin/app".into(), "--serve".into()],
                state: 'S',
                ppid: 1,
                threads: 20,
                age_seconds: Some(60.0),
                cpu_seconds: 1.0,
                runtimes: vec![],
            },
            memory: Memory {
                rss_bytes: 100 << 20,
                rss_anon_bytes: 90 << 20,
                rss_file_bytes: 10 << 20,
                rss_shmem_bytes: 0,
                pss_bytes: Some(95 << 20),
                uss_bytes: Some(90 << 20),
                swap_bytes: 0,
                peak_rss_bytes: 120 << 20,
                vsz_bytes: 1 << 30,
            },
            mappings: vec![],
            mapping_totals: None,
            thread_stacks: Some(19),
            allocator: Some(Allocator {
                name: "glibc".into(),
                evidence: vec![],
                linkage: Some("dynamic".into()),
                defines_malloc: Some(false),
                ld_preload: None,
                preload_ignored: None,
                settings: vec![],
            }),
            glibc: None,
            glibc_arenas: Some(Arenas {
                count: 3,
                method: Method::HeapHeaders,
                heaps: 2,
                limit: 16,
                limit_source: LimitSource::Default { online_cpus: 2 },
                threads: 20,
            }),
            cgroup: None,
            host: Host {
                online_cpus: 2,
                memory_bytes: 24 << 30,
            },
            tree: None,
            advice: vec![],
            watch: None,
            thp: None,
            trimmable: None,
            jemalloc_arenas: None,
            trimmed: None,
        }
    }

    fn kinds(ins: &Inspection) -> Vec<AdviceKind> {
        advise(ins).iter().map(|a| a.kind).collect()
    }

    #[test]
    fn a_ruby_with_a_large_jit_region_gets_a_smaller_one_to_try() {
        use crate::inspect::{Runtime, RuntimeHint};
        use crate::linux::regions::{Group, Kind, MapEntry};
        let mut ins = base();
        let exec = MapEntry {
            start: 0x7f00_0000_0000,
            size_bytes: 256 << 20,
            rss_bytes: 256 << 20,
            pss_bytes: 256 << 20,
            swap_bytes: 0,
            perms: "rwxp".into(),
            path: None,
        };
        ins.mappings.push(Group {
            kind: Some(Kind::ExecAnon),
            label: Kind::ExecAnon.label(),
            mappings: 1,
            size_bytes: 256 << 20,
            rss_bytes: 256 << 20,
            pss_bytes: 256 << 20,
            uss_bytes: 256 << 20,
            swap_bytes: 0,
            largest: vec![exec],
        });
        assert!(!kinds(&ins).contains(&AdviceKind::JitRegion), "not a Ruby");
        ins.process.runtimes.push(RuntimeHint {
            runtime: Runtime::Ruby,
            evidence: "libruby".into(),
        });
        let advice = advise(&ins);
        let a = advice
            .iter()
            .find(|a| a.kind == AdviceKind::JitRegion)
            .unwrap();
        assert!(
            a.message.contains("--yjit-exec-mem-size=32")
                && a.message.contains("-- /usr/bin/app --serve"),
            "{}",
            a.message
        );
        // The suggested variant parses as memtrial reads it.
        let arg = a.message.split("--variant '").nth(2).unwrap();
        assert!(arg.starts_with("yjit32=RUBYOPT=\"--yjit --yjit-exec-mem-size=32\"'"));
    }

    #[test]
    fn quiet_process_gets_no_advice() {
        assert!(advise(&base()).is_empty());
    }

    #[test]
    fn many_arenas_on_few_cpus() {
        let mut i = base();
        i.glibc_arenas.as_mut().unwrap().count = 16;
        let a = advise(&i);
        assert_eq!(a.len(), 1);
        assert_eq!(a[0].kind, AdviceKind::ManyArenas);
        assert!(
            a[0].message.contains("-- /usr/bin/app --serve"),
            "{}",
            a[0].message
        );
        assert!(a[0].evidence[0].starts_with("16 glibc arenas"));
    }

    fn with_quota(i: &mut Inspection, cpus: f64) {
        i.cgroup = Some(Container {
            memory_limit_bytes: None,
            memory_usage_bytes: None,
            cpu_quota_cpus: Some(cpus),
            visible_cpus: i.host.online_cpus,
            memory: None,
            cpu: Some(CpuGroup {
                quota_from: None,
                version: Version::V1,
                path: "/q".into(),
                quota: Some(CpuQuota {
                    quota_us: (cpus * 100000.0) as u64,
                    period_us: 100000,
                    cpus,
                }),
            }),
            cpuset: None,
            cpus_allowed: Some("0-1".into()),
            cpus_allowed_count: Some(2),
            own_pid_namespace: Some(false),
            notes: vec![],
        });
    }

    #[test]
    fn quota_below_cpus_with_default_limit() {
        let mut i = base();
        with_quota(&mut i, 0.5);
        let a = advise(&i);
        assert_eq!(kinds(&i), [AdviceKind::ArenaLimitAboveCpuQuota]);
        assert!(a[0].evidence[0].contains("50000 µs per 100000 µs = 0.50 CPU"));
        // An explicit limit answers it.
        {
            let a = i.glibc_arenas.as_mut().unwrap();
            a.limit = 2;
            a.limit_source = LimitSource::MallocArenaMax;
        }
        assert!(advise(&i).is_empty());
        // A quota of all CPUs is no reason either.
        let mut j = base();
        with_quota(&mut j, 2.0);
        assert!(advise(&j).is_empty());
    }

    /// The JNI story of the issue: 64 CPUs visible, a quota of 8, 1003 threads.
    #[test]
    fn quota_advice_names_the_numbers_of_the_pitfall() {
        let mut i = base();
        i.host.online_cpus = 64;
        i.threads = 1003;
        {
            let a = i.glibc_arenas.as_mut().unwrap();
            a.count = 412;
            a.threads = 1003;
            a.limit = 512;
            a.limit_source = LimitSource::Default { online_cpus: 64 };
        }
        with_quota(&mut i, 8.0);
        let c = i.cgroup.as_mut().unwrap();
        c.cpus_allowed = Some("0-63".into());
        c.cpus_allowed_count = Some(64);
        let a = advise(&i);
        assert_eq!(a[0].kind, AdviceKind::ArenaLimitAboveCpuQuota);
        assert!(
            a[0].message.starts_with(
                "412 arenas for 1003 threads; glibc allows 512 here because 64 CPUs are visible but the quota is 8 → set MALLOC_ARENA_MAX=2 or preload jemalloc; try `memtrial run"
            ),
            "{}",
            a[0].message
        );
        assert!(
            a[0].evidence[2].starts_with("412 of at most 512 arenas now (80%)"),
            "{}",
            a[0].evidence[2]
        );
        assert!(
            a[0].evidence[3].contains("4 × 64 = 256") && a[0].evidence[3].contains("narenas:32"),
            "{}",
            a[0].evidence[3]
        );
    }

    #[test]
    fn jemalloc_under_a_quota() {
        let mut i = base();
        i.glibc_arenas = None;
        i.allocator.as_mut().unwrap().name = "jemalloc".into();
        i.jemalloc_arenas = Some(crate::linux::allocator::jemalloc_arenas(None, &[], 2));
        with_quota(&mut i, 0.5);
        let a = advise(&i);
        assert_eq!(kinds(&i), [AdviceKind::JemallocArenasAboveCpuQuota]);
        assert!(a[0].message.contains("jemalloc makes 8 arenas by default (4 × 2 CPUs in the affinity mask), sized for the host, but the quota is 0.5 → set MALLOC_CONF=narenas:4"), "{}", a[0].message);
        assert!(a[0].message.contains("--variant 'jemalloc-narenas4=preload:jemalloc MALLOC_CONF=narenas:4' -- /usr/bin/app --serve"), "{}", a[0].message);
        // The probe's own count, where it is preloaded.
        i.jemalloc_arenas = Some(crate::linux::allocator::jemalloc_arenas(Some(8), &[], 2));
        assert!(advise(&i)[0]
            .message
            .contains("8 arenas (arenas.narenas, read by memtrial's probe"));
        // A quota that warrants them: no advice.
        with_quota(&mut i, 2.0);
        assert!(advise(&i).is_empty());
        with_quota(&mut i, 0.5);
        let conf = vec![("MALLOC_CONF".into(), "narenas:1".into())];
        i.allocator.as_mut().unwrap().settings = conf.clone();
        i.jemalloc_arenas = Some(crate::linux::allocator::jemalloc_arenas(None, &conf, 2));
        assert!(advise(&i).is_empty());
    }

    #[test]
    fn not_glibc_no_arena_advice() {
        let mut i = base();
        i.glibc_arenas.as_mut().unwrap().count = 16;
        i.allocator.as_mut().unwrap().name = "jemalloc".into();
        i.jemalloc_arenas = Some(crate::linux::allocator::jemalloc_arenas(None, &[], 2));
        with_quota(&mut i, 0.5);
        // jemalloc's own arenas, never glibc's.
        assert_eq!(kinds(&i), [AdviceKind::JemallocArenasAboveCpuQuota]);
    }

    #[test]
    fn ignored_preload_memory_limit_and_swap() {
        let mut i = base();
        {
            let a = i.allocator.as_mut().unwrap();
            a.ld_preload = Some("/usr/lib/x86_64-linux-gnu/libjemalloc.so.2".into());
            a.preload_ignored = Some("static".into());
        }
        i.memory.swap_bytes = 1 << 20;
        i.cgroup = Some(Container {
            memory_limit_bytes: Some(100 << 20),
            memory_usage_bytes: Some(90 << 20),
            cpu_quota_cpus: None,
            visible_cpus: 2,
            memory: Some(MemoryGroup {
                working_set_bytes: None,
                limit_from: None,
                version: Version::V2,
                path: "/m".into(),
                limit_bytes: Some(100 << 20),
                usage_bytes: Some(90 << 20),
                peak_bytes: None,
            }),
            cpu: None,
            cpuset: None,
            cpus_allowed: None,
            cpus_allowed_count: None,
            own_pid_namespace: None,
            notes: vec![],
        });
        assert_eq!(
            kinds(&i),
            [
                AdviceKind::PreloadIgnored,
                AdviceKind::NearMemoryLimit,
                AdviceKind::Swapped
            ]
        );
        i.cgroup
            .as_mut()
            .unwrap()
            .memory
            .as_mut()
            .unwrap()
            .usage_bytes = Some(10 << 20);
        assert_eq!(kinds(&i), [AdviceKind::PreloadIgnored, AdviceKind::Swapped]);
    }
}
