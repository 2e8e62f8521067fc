//! One screen of text for an [`Inspection`]. Pure.

use std::fmt::Write;

use super::arenas::{LimitSource, Method};
use super::{Inspection, WatchEnd};
use crate::plan::units::{format_bytes, format_seconds};

fn b(x: u64) -> String {
    format_bytes(x as f64)
}

fn bold(s: &str, color: bool) -> String {
    if color {
        format!("\x1b[1m{s}\x1b[0m")
    } else {
        s.to_string()
    }
}

fn age(s: f64) -> String {
    if s < 600.0 {
        format_seconds(s)
    } else if s < 48.0 * 3600.0 {
        format!("{:.1} h", s / 3600.0)
    } else {
        format!("{:.1} days", s / 86400.0)
    }
}

/// Renders the inspection. `color` adds bold headings.
pub fn render(ins: &Inspection, color: bool) -> String {
    let mut o = String::new();
    let p = &ins.process;
    let h = |s: &str| bold(s, color);
    let _ = writeln!(
        o,
        "{} {} ({}){}",
        h("PID"),
        ins.pid,
        p.comm,
        if ins.complete { "" } else { "  [partial]" }
    );
    let _ = writeln!(
        o,
        "  exe      {}",
        p.exe.as_deref().unwrap_or("(unreadable)")
    );
    if !p.cmdline.is_empty() {
        let mut line = shell_words::join(&p.cmdline);
        if line.chars().count() > 100 {
            line = line.chars().take(97).collect::<String>() + "...";
        }
        let _ = writeln!(o, "  command  {line}");
    }
    let _ = writeln!(
        o,
        "  running  {}, {} threads, {} CPU time, state {}, parent {}{}",
        p.age_seconds.map_or("?".into(), age),
        p.threads,
        format_seconds(p.cpu_seconds),
        p.state,
        p.ppid,
        if p.runtimes.is_empty() {
            String::new()
        } else {
            format!(
                ", runtime {}",
                p.runtimes
                    .iter()
                    .map(|r| format!("{:?} ({})", r.runtime, r.evidence))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        }
    );

    if let Some(m) = &ins.memory {
        let _ = writeln!(
            o,
            "{}  RSS {} (anon {}, file {}, shmem {}) · PSS {} · USS {} · swap {} · peak RSS {} (VmHWM)",
            h("Memory"),
            b(m.rss_bytes),
            b(m.rss_anon_bytes),
            b(m.rss_file_bytes),
            b(m.rss_shmem_bytes),
            m.pss_bytes.map_or("?".into(), b),
            m.uss_bytes.map_or("?".into(), b),
            b(m.swap_bytes),
            b(m.peak_rss_bytes)
        );
    }
    if !ins.breakdown.is_empty() {
        let _ = writeln!(
            o,
            "  {:<20} {:>5} {:>10} {:>10} {:>10} {:>10}",
            "kind", "maps", "virtual", "RSS", "USS", "swap"
        );
        for g in &ins.breakdown {
            let mut label = g.kind.map_or("?", |k| k.label()).to_string();
            if g.kind == Some(super::Kind::ThreadStacks) {
                label.push('*');
            }
            let _ = writeln!(
                o,
                "  {:<20} {:>5} {:>10} {:>10} {:>10} {:>10}",
                label,
                g.mappings,
                b(g.virtual_bytes),
                b(g.rss_bytes),
                b(g.uss_bytes),
                b(g.swap_bytes)
            );
        }
        let _ = writeln!(
            o,
            "  * {} thread stacks recognised by a heuristic (anonymous rw with a guard page below)",
            ins.thread_stacks.unwrap_or(0)
        );
    }

    if let Some(a) = &ins.allocator {
        let _ = writeln!(o, "{} {}", h("Allocator"), a.name);
        for e in &a.evidence {
            let _ = writeln!(o, "  - {e}");
        }
        if !a.settings.is_empty() {
            let s: Vec<String> = a.settings.iter().map(|(k, v)| format!("{k}={v}")).collect();
            let _ = writeln!(o, "  settings {}", s.join(" "));
        }
    }
    if let Some(ar) = &ins.arenas {
        let limit_src = match &ar.limit.source {
            LimitSource::MallocArenaMax => "MALLOC_ARENA_MAX".to_string(),
            LimitSource::GlibcTunables => "GLIBC_TUNABLES".to_string(),
            LimitSource::Default { online_cpus } => {
                format!("default 8 × {online_cpus} online CPUs")
            }
        };
        let how = match ar.method {
            Method::HeapHeaders => {
                format!("distinct heap headers in /proc/PID/mem, {} heaps", ar.heaps)
            }
            Method::Estimate => format!(
                "ESTIMATE from the maps ({} heap-shaped mappings, an upper bound)",
                ar.heaps
            ),
        };
        let _ = writeln!(
            o,
            "{}    {} glibc arenas (main included) · limit {} ({limit_src}) · {} threads\n  counted from {how}",
            h("Arenas"),
            ar.count,
            ar.limit.limit,
            ar.threads
        );
    }

    if let Some(c) = &ins.container {
        let mut parts = Vec::new();
        if let Some(cpu) = &c.cpu {
            parts.push(match cpu.quota {
                Some(q) => format!(
                    "CPU quota {:.2} CPU ({}/{} µs, {:?} {})",
                    q.cpus, q.quota_us, q.period_us, cpu.version, cpu.path
                ),
                None => format!("no CPU quota ({:?} {})", cpu.version, cpu.path),
            });
        }
        if let Some(m) = &c.memory {
            parts.push(format!(
                "memory {} of {} (peak {}, {:?} {})",
                m.usage_bytes.map_or("?".into(), b),
                m.limit_bytes.map_or("no limit".into(), b),
                m.peak_bytes.map_or("?".into(), b),
                m.version,
                m.path
            ));
        }
        if let Some(s) = &c.cpuset {
            parts.push(format!("cpuset {} ({} CPUs)", s.cpus, s.count));
        }
        if let Some(a) = &c.cpus_allowed {
            parts.push(format!("affinity {a}"));
        }
        if c.own_pid_namespace == Some(true) {
            parts.push("own PID namespace (container)".into());
        }
        let _ = writeln!(o, "{} {}", h("Cgroup"), parts.join(" · "));
        let _ = writeln!(
            o,
            "  host: {} online CPUs, {} memory",
            ins.host.online_cpus,
            b(ins.host.memory_bytes)
        );
    }

    if let Some(w) = &ins.watch {
        let end = match w.end {
            WatchEnd::Completed => "",
            WatchEnd::ProcessExited => " (the process exited)",
            WatchEnd::Interrupted => " (interrupted)",
        };
        let (lo, hi) = w.samples.iter().fold((u64::MAX, 0u64), |(lo, hi), s| {
            (lo.min(s.rss_bytes), hi.max(s.rss_bytes))
        });
        let _ = writeln!(
            o,
            "{}     {} RSS samples over {}{end}, min {} max {}\n  {}",
            h("Watch"),
            w.samples.len(),
            format_seconds(w.samples.last().map_or(0.0, |s| s.t_seconds)),
            if w.samples.is_empty() {
                "?".into()
            } else {
                b(lo)
            },
            b(hi),
            w.trend.sentence()
        );
    }

    if ins.advice.is_empty() {
        let _ = writeln!(
            o,
            "{} none: nothing observed calls for a change",
            h("Advice")
        );
    } else {
        let _ = writeln!(o, "{}", h("Advice"));
        for a in &ins.advice {
            let _ = writeln!(o, "  ▸ {}", a.message);
            for e in &a.evidence {
                let _ = writeln!(o, "      because: {e}");
            }
        }
    }
    for m in &ins.missing {
        let _ = writeln!(o, "note: {m}");
    }
    o
}
