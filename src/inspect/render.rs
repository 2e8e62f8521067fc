//! One screen of text for an [`Inspection`]. Pure.

use std::fmt::Write;

use super::arenas::{LimitSource, Method};
use super::procs::{RankBy, Top};
use super::{Inspection, Sample, WatchEnd};
use crate::report::escape;
use crate::report::{ExportError, Exporter};
use crate::units::{format_bytes, format_seconds};

fn b(x: u64) -> String {
    format_bytes(x as f64)
}

/// A string from the inspected process (its name, paths, environment, files) for one
/// line of the screen: every control and bidirectional character shown as an escape.
fn esc(s: &str) -> String {
    escape::terminal(s)
}

/// What leaves a text view: every control character escaped but the line breaks and the
/// bold this renderer adds itself. Fields from the process are escaped one by one
/// already ([`t`]); this catches any that was not.
fn screen_safe(text: String) -> String {
    const OWN: [&str; 2] = ["\x1b[1m", "\x1b[0m"];
    let mut out = String::with_capacity(text.len());
    let mut rest = text.as_str();
    while let Some(c) = rest.chars().next() {
        if let Some(own) = OWN.iter().find(|o| rest.starts_with(**o)) {
            out.push_str(own);
            rest = &rest[own.len()..];
            continue;
        }
        if c == '\n' || !escape::is_unsafe_for_terminal(c) {
            out.push(c);
        } else {
            out.push_str(&escape::terminal(c.encode_utf8(&mut [0; 4])));
        }
        rest = &rest[c.len_utf8()..];
    }
    out
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

/// Which text to draw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    /// One screen: what it is, what it holds, what to do.
    Screen,
    /// The pmap-like breakdown by kind, with totals checked against the kernel's.
    Maps,
}

/// The formats of `memtrial inspect`: one renderer interface with the reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InspectExport {
    Text { view: View, color: bool },
    Json,
}

fn json_bytes<T: serde::Serialize + ?Sized>(v: &T) -> Result<Vec<u8>, ExportError> {
    let mut b = serde_json::to_vec_pretty(v)?;
    b.push(b'\n');
    Ok(b)
}

impl Exporter<Inspection> for InspectExport {
    fn serialize(&self, ins: &Inspection) -> Result<Vec<u8>, ExportError> {
        match *self {
            InspectExport::Text { view, color } => {
                Ok(screen_safe(render(ins, view, color)).into_bytes())
            }
            InspectExport::Json => json_bytes(ins),
        }
    }
}

impl Exporter<Top> for InspectExport {
    fn serialize(&self, t: &Top) -> Result<Vec<u8>, ExportError> {
        match *self {
            InspectExport::Text { color, .. } => Ok(screen_safe(render_top(t, color)).into_bytes()),
            InspectExport::Json => json_bytes(t),
        }
    }
}

/// The live line of a watch sample.
pub fn live_line(s: &Sample) -> String {
    format!(
        "{:>7}  RSS {}  PSS {}  threads {}{}",
        format_seconds(s.t_seconds),
        b(s.rss_bytes),
        s.pss_bytes.map_or("?".into(), b),
        s.threads,
        s.arenas.map_or(String::new(), |a| format!("  arenas {a}"))
    )
}

fn opt_b(x: Option<u64>) -> String {
    x.map_or("?".into(), b)
}

/// The pmap-like view: every kind with its size, RSS, PSS, USS and swap, the
/// largest mappings of each, and the totals beside pmap's and smaps_rollup's.
/// What could not be read, and why: the same under every view.
fn footer(o: &mut String, ins: &Inspection, color: bool) {
    if let Some(a) = &ins.access {
        let _ = writeln!(
            o,
            "{} {} refused: {}",
            bold("Access", color),
            esc(&a.denied.join(", ")),
            esc(&a.hint)
        );
    }
    for m in &ins.missing {
        let _ = writeln!(o, "note: {}", esc(m));
    }
}

pub(crate) fn render_maps(ins: &Inspection, color: bool) -> String {
    let mut o = String::new();
    let h = |s: &str| bold(s, color);
    let _ = writeln!(
        o,
        "{} {} ({}){} — address space by kind (from /proc/PID/smaps)",
        h("PID"),
        ins.pid,
        esc(&ins.process.comm),
        if ins.complete { "" } else { "  [partial]" }
    );
    if ins.mappings.is_empty() {
        let _ = writeln!(o, "  no mappings could be read");
    } else {
        let _ = writeln!(
            o,
            "  {:<20} {:>6} {:>10} {:>10} {:>10} {:>10} {:>10}",
            "kind", "maps", "size", "RSS", "PSS", "USS", "swap"
        );
        for g in &ins.mappings {
            let _ = writeln!(
                o,
                "  {:<20} {:>6} {:>10} {:>10} {:>10} {:>10} {:>10}",
                h(g.label),
                g.mappings,
                b(g.size_bytes),
                b(g.rss_bytes),
                b(g.pss_bytes),
                b(g.uss_bytes),
                b(g.swap_bytes)
            );
            for m in &g.largest {
                let _ = writeln!(
                    o,
                    "    {:016x} {} {:>10} {:>10} {:>10}  {}",
                    m.start,
                    m.perms,
                    b(m.size_bytes),
                    b(m.rss_bytes),
                    b(m.pss_bytes),
                    esc(m.path.as_deref().unwrap_or("[anon]"))
                );
            }
            if g.mappings as usize > g.largest.len() {
                let _ = writeln!(o, "    … {} more", g.mappings as usize - g.largest.len());
            }
        }
    }
    if let Some(t) = &ins.mapping_totals {
        let _ = writeln!(
            o,
            "  {:<20} {:>6} {:>10} {:>10} {:>10} {:>10} {:>10}",
            h("total"),
            t.mappings,
            b(t.size_bytes),
            b(t.rss_bytes),
            b(t.pss_bytes),
            b(t.uss_bytes),
            b(t.swap_bytes)
        );
        let _ = writeln!(
            o,
            "  size total {} kB = pmap's total (virtual: reserved address space, not memory); VmSize {} kB",
            t.size_bytes / 1024,
            ins.memory.vsz_bytes / 1024
        );
        let _ = writeln!(
            o,
            "  resident total {} kB; smaps_rollup Rss {} kB, Pss {} kB",
            t.rss_bytes / 1024,
            t.rollup_rss_bytes
                .map_or("?".into(), |x| (x / 1024).to_string()),
            t.rollup_pss_bytes
                .map_or("?".into(), |x| (x / 1024).to_string())
        );
        if ins.thread_stacks.is_some() {
            let _ = writeln!(
                o,
                "  {} thread stacks recognised by a heuristic (anonymous rw with a guard page below)",
                ins.thread_stacks.unwrap_or(0)
            );
        }
    }
    footer(&mut o, ins, color);
    o
}

/// `memtrial inspect --top`.
pub(crate) fn render_top(t: &Top, color: bool) -> String {
    let mut o = String::new();
    let by = match t.ranked_by {
        RankBy::Rss => "RSS (VmRSS; shared pages count in every process)",
        RankBy::Pss => "PSS (smaps_rollup; shared pages split between their users)",
    };
    let _ = writeln!(
        o,
        "{} {} largest of {} processes, ranked by {by}",
        bold("Top", color),
        t.processes.len(),
        t.scanned
    );
    let _ = writeln!(
        o,
        "  {:>8} {:<16} {:>10} {:>10} {:>7}  {:<38} {:>7}",
        "PID", "command", "RSS", "PSS", "threads", "allocator", "arenas"
    );
    for p in &t.processes {
        let arenas = match (p.glibc_arenas, p.arenas_method) {
            (Some(n), Some(Method::Estimate)) => format!("~{n}"),
            (Some(n), _) => n.to_string(),
            (None, _)
                if p.allocator
                    .as_deref()
                    .is_some_and(|a| a.starts_with("glibc")) =>
            {
                "?".into()
            }
            (None, _) => "-".into(),
        };
        let _ = writeln!(
            o,
            "  {:>8} {:<16} {:>10} {:>10} {:>7}  {:<38} {:>7}",
            p.pid,
            esc(&p.comm),
            b(p.rss_bytes),
            opt_b(p.pss_bytes),
            p.threads,
            p.allocator.as_deref().unwrap_or("? (unreadable)"),
            arenas
        );
    }
    let _ = writeln!(
        o,
        "  arenas: glibc arenas, main included (~: estimated from the maps, /proc/PID/mem refused; -: not glibc malloc)"
    );
    if t.exited > 0 {
        let _ = writeln!(o, "  {} candidates exited during the scan", t.exited);
    }
    let unreadable = t.processes.iter().filter(|p| !p.notes.is_empty()).count();
    if unreadable > 0 {
        let _ = writeln!(
            o,
            "  {unreadable} processes partly unreadable (run as root for all): memtrial inspect PID says what"
        );
    }
    o
}

/// Renders the inspection. `color` adds bold headings.
pub fn render(ins: &Inspection, view: View, color: bool) -> String {
    if view == View::Maps {
        return render_maps(ins, color);
    }
    render_screen(ins, color)
}

fn render_screen(ins: &Inspection, color: bool) -> String {
    let mut o = String::new();
    screen_process(&mut o, ins, color);
    screen_memory(&mut o, ins, color);
    screen_tree(&mut o, ins, color);
    screen_mappings(&mut o, ins);
    screen_allocator(&mut o, ins, color);
    screen_arenas(&mut o, ins, color);
    screen_knobs(&mut o, ins, color);
    screen_cgroup(&mut o, ins, color);
    screen_watch(&mut o, ins, color);
    screen_advice(&mut o, ins, color);
    footer(&mut o, ins, color);
    o
}

/// The screen's lines on the process: PID, executable, command line, age, threads, runtimes.
fn screen_process(o: &mut String, ins: &Inspection, color: bool) {
    let p = &ins.process;
    let h = |s: &str| bold(s, color);
    let _ = writeln!(
        o,
        "{} {} ({}){}",
        h("PID"),
        ins.pid,
        esc(&p.comm),
        if ins.complete { "" } else { "  [partial]" }
    );
    let _ = writeln!(
        o,
        "  exe      {}",
        esc(p.exe.as_deref().unwrap_or("(unreadable)"))
    );
    if !p.cmdline.is_empty() {
        // Quoted for a shell, controls as `$'\x1b'`: pasteable and harmless.
        let mut line = escape::shell_line(&p.cmdline);
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
        esc(&p.state.to_string()),
        p.ppid,
        if p.runtimes.is_empty() {
            String::new()
        } else {
            format!(
                ", runtime {}",
                p.runtimes
                    .iter()
                    .map(|r| format!("{:?} ({})", r.runtime, esc(&r.evidence)))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        }
    );
}

/// The screen's lines on the process's memory by kind, with its kernel peak.
fn screen_memory(o: &mut String, ins: &Inspection, color: bool) {
    let h = |s: &str| bold(s, color);
    {
        let m = &ins.memory;
        let _ = writeln!(
            o,
            "{}  RSS {} (anon {}, file {}, shmem {}) · PSS {} · USS {} · swap {} · peak RSS {} (VmHWM) · virtual {}",
            h("Memory"),
            b(m.rss_bytes),
            b(m.rss_anon_bytes),
            b(m.rss_file_bytes),
            b(m.rss_shmem_bytes),
            m.pss_bytes.map_or("?".into(), b),
            m.uss_bytes.map_or("?".into(), b),
            b(m.swap_bytes),
            b(m.peak_rss_bytes),
            b(m.vsz_bytes)
        );
    }
}

/// The screen's lines on the process tree's sums and its largest members.
fn screen_tree(o: &mut String, ins: &Inspection, color: bool) {
    let h = |s: &str| bold(s, color);
    if let Some(t) = &ins.tree {
        let _ = writeln!(
            o,
            "{}    {} processes, {} threads · PSS {} · USS {} · RSS {} (summed, double-counts shared pages) · swap {}{}{}",
            h("Tree"),
            t.processes,
            t.threads,
            b(t.pss_bytes),
            b(t.uss_bytes),
            b(t.rss_bytes),
            b(t.swap_bytes),
            if t.pss_unreadable > 0 {
                format!(" · PSS/USS unreadable for {}", t.pss_unreadable)
            } else {
                String::new()
            },
            if t.exited > 0 {
                format!(" · {} exited during the scan", t.exited)
            } else {
                String::new()
            }
        );
        for m in t.members.iter().take(8) {
            let _ = writeln!(
                o,
                "  {:>8} {:<16} PSS {:>10}  RSS {:>10}  {} threads",
                m.pid,
                esc(&m.comm),
                opt_b(m.pss_bytes),
                b(m.rss_bytes),
                m.threads
            );
        }
        if t.members.len() > 8 {
            let _ = writeln!(o, "  … {} more (--json lists all)", t.members.len() - 8);
        }
    }
}

/// The screen's lines on memory by kind of mapping.
fn screen_mappings(o: &mut String, ins: &Inspection) {
    if !ins.mappings.is_empty() {
        let _ = writeln!(
            o,
            "  {:<20} {:>5} {:>10} {:>10} {:>10} {:>10}",
            "kind", "maps", "size", "RSS", "PSS", "swap"
        );
        for g in &ins.mappings {
            let mut label = g.kind.map_or("?", |k| k.label()).to_string();
            if g.kind == Some(super::Kind::ThreadStacks) {
                label.push('*');
            }
            let _ = writeln!(
                o,
                "  {:<20} {:>5} {:>10} {:>10} {:>10} {:>10}",
                label,
                g.mappings,
                b(g.size_bytes),
                b(g.rss_bytes),
                b(g.pss_bytes),
                b(g.swap_bytes)
            );
        }
        let _ = writeln!(
            o,
            "  * {} thread stacks recognised by a heuristic (anonymous rw with a guard page below); --maps for detail",
            ins.thread_stacks.unwrap_or(0)
        );
    }
}

/// The screen's lines on the allocator with its evidence, and the glibc version.
fn screen_allocator(o: &mut String, ins: &Inspection, color: bool) {
    let h = |s: &str| bold(s, color);
    let glibc = ins.glibc.as_ref().map(|g| {
        format!(
            "glibc {} ({})",
            g.version,
            esc(g.banner.as_deref().unwrap_or(&g.library))
        )
    });
    match &ins.allocator {
        None => {
            let _ = writeln!(
                o,
                "{} unknown: the maps or the executable could not be read",
                h("Allocator")
            );
        }
        Some(a) => {
            let _ = writeln!(o, "{} {}", h("Allocator"), esc(&a.name));
            for e in &a.evidence {
                let _ = writeln!(o, "  - {}", esc(e));
            }
            if !a.settings.is_empty() {
                let s: Vec<String> = a
                    .settings
                    .iter()
                    .map(|(k, v)| escape::shell_assignment(k, v))
                    .collect();
                let _ = writeln!(o, "  settings {}", s.join(" "));
            }
        }
    }
    match (&glibc, &ins.allocator) {
        (Some(g), _) => {
            let _ = writeln!(o, "  {g}");
        }
        (None, Some(a)) if a.linkage.as_deref() == Some("static") => {
            let _ = writeln!(
                o,
                "  glibc version unknown: a static executable carries no version banner (the host's is {})",
                crate::linux::host::glibc_version()
            );
        }
        _ => {}
    }
}

/// The screen's lines on glibc arenas against their limit.
fn screen_arenas(o: &mut String, ins: &Inspection, color: bool) {
    let h = |s: &str| bold(s, color);
    if let Some(ar) = &ins.glibc_arenas {
        let limit_src = match &ar.limit_source {
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
            ar.limit,
            ar.threads
        );
    }
}

/// The screen's lines on huge pages, what a trim could return, and jemalloc's arenas.
fn screen_knobs(o: &mut String, ins: &Inspection, color: bool) {
    let h = |s: &str| bold(s, color);
    if let Some(t) = &ins.thp {
        let share = match (t.anon_huge_bytes, ins.memory.rss_bytes) {
            (Some(huge), rss) if rss > 0 => format!(
                " · {} of {} resident in huge pages (AnonHugePages)",
                b(huge),
                b(rss)
            ),
            _ => String::new(),
        };
        let own = match t.enabled_for_process {
            Some(false) => " · THP off for the process (THP_enabled: 0)",
            _ => "",
        };
        let _ = writeln!(
            o,
            "{} host THP {}{share}{own}",
            h("Huge pages"),
            esc(&t.host.describe())
        );
    }
    if let Some(t) = &ins.trimmable {
        let _ = writeln!(
            o,
            "{}       malloc_trim(0) could give back {} now{}: the resident whole pages of {} free chunks ({}), {} of it at the main heap's top; {}",
            h("Trim"),
            b(t.bytes),
            if t.complete { "" } else { " or more (a heap changed while walked)" },
            crate::units::format_count(t.free_chunks),
            b(t.free_bytes),
            b(t.top_bytes),
            if ins.trimmed.is_some() {
                "read before the call below"
            } else {
                "nothing was trimmed"
            }
        );
    }
    if let Some(t) = &ins.trimmed {
        let _ = writeln!(
            o,
            "{}    malloc_trim(0) asked of the probe library: resident {} → {} ({} returned), {} of CPU inside it, the call took {}",
            h("Trimmed"),
            b(t.resident_before_bytes),
            b(t.resident_after_bytes),
            b(t.resident_before_bytes.saturating_sub(t.resident_after_bytes)),
            crate::units::format_seconds(t.cpu_ns as f64 / 1e9),
            crate::units::format_seconds(t.wall_ns as f64 / 1e9)
        );
    }
    if let Some(j) = &ins.jemalloc_arenas {
        use crate::linux::allocator::JemallocArenasSource as S;
        let from = match j.source {
            S::Probe => "arenas.narenas, from memtrial's probe in the process".to_string(),
            S::Setting => "narenas of its MALLOC_CONF".to_string(),
            S::Default => {
                "jemalloc's default, 4 per CPU in its affinity mask: not read from the process"
                    .to_string()
            }
        };
        let _ = writeln!(o, "{} {} jemalloc arenas ({from})", h("jemalloc"), j.count);
    }
}

/// The screen's lines on the cgroup's limits against the host.
fn screen_cgroup(o: &mut String, ins: &Inspection, color: bool) {
    let h = |s: &str| bold(s, color);
    if let Some(c) = &ins.cgroup {
        let mut parts = Vec::new();
        if let Some(cpu) = &c.cpu {
            parts.push(match cpu.quota {
                Some(q) => format!(
                    "CPU quota {:.2} CPU ({}/{} µs, {:?} {}{})",
                    q.cpus,
                    q.quota_us,
                    q.period_us,
                    cpu.version,
                    esc(&cpu.path),
                    cpu.quota_from
                        .as_ref()
                        .map(|f| format!(", set on {}", esc(f)))
                        .unwrap_or_default()
                ),
                None => format!("no CPU quota ({:?} {})", cpu.version, esc(&cpu.path)),
            });
        }
        if let Some(m) = &c.memory {
            parts.push(format!(
                "memory {}{} of {} (peak {}, {:?} {}{})",
                m.usage_bytes.map_or("?".into(), b),
                m.working_set_bytes
                    .map(|w| format!(" (working set {})", b(w)))
                    .unwrap_or_default(),
                m.limit_bytes.map_or("no limit".into(), b),
                m.peak_bytes.map_or("?".into(), b),
                m.version,
                esc(&m.path),
                m.limit_from
                    .as_ref()
                    .map(|f| format!(", limit set on {}", esc(f)))
                    .unwrap_or_default()
            ));
        }
        if let Some(s) = &c.cpuset {
            parts.push(format!("cpuset {} ({} CPUs)", esc(&s.cpus), s.count));
        }
        if let Some(a) = &c.cpus_allowed {
            parts.push(format!("affinity {}", esc(a)));
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
}

/// The screen's lines on what --watch saw over time.
fn screen_watch(o: &mut String, ins: &Inspection, color: bool) {
    let h = |s: &str| bold(s, color);
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
            "{}     {} samples over {}{end}, RSS min {} max {}",
            h("Watch"),
            w.samples.len(),
            format_seconds(w.samples.last().map_or(0.0, |s| s.t_seconds)),
            if w.samples.is_empty() {
                "?".into()
            } else {
                b(lo)
            },
            b(hi),
        );
        if let (Some(f), Some(l)) = (w.samples.first(), w.samples.last()) {
            let arenas = match (f.arenas, l.arenas) {
                (Some(a), Some(z)) => format!(" · arenas {a} → {z}"),
                _ => String::new(),
            };
            let _ = writeln!(
                o,
                "  first → last: RSS {} → {} · PSS {} → {} · threads {} → {}{arenas}",
                b(f.rss_bytes),
                b(l.rss_bytes),
                opt_b(f.pss_bytes),
                opt_b(l.pss_bytes),
                f.threads,
                l.threads
            );
        }
        let _ = writeln!(o, "  {}", w.trend.sentence());
    }
}

/// The screen's lines on advice, each with its evidence.
fn screen_advice(o: &mut String, ins: &Inspection, color: bool) {
    let h = |s: &str| bold(s, color);
    if ins.advice.is_empty() {
        let _ = writeln!(
            o,
            "{} none: nothing observed calls for a change",
            h("Advice")
        );
    } else {
        let _ = writeln!(o, "{}", h("Advice"));
        for a in &ins.advice {
            let _ = writeln!(o, "  ▸ {}", esc(&a.message));
            for e in &a.evidence {
                let _ = writeln!(o, "      because: {}", esc(e));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inspect::fixture;

    #[test]
    fn screen_snapshot() {
        insta::assert_snapshot!(render(&fixture::inspection(), View::Screen, false));
    }

    #[test]
    fn maps_snapshot() {
        insta::assert_snapshot!(render(&fixture::inspection(), View::Maps, false));
    }

    #[test]
    fn top_snapshot() {
        insta::assert_snapshot!(render_top(&fixture::top(), false));
    }

    #[test]
    fn json_snapshot() {
        insta::assert_json_snapshot!(fixture::inspection());
    }

    #[test]
    fn the_screen_keeps_its_own_bold_and_line_breaks_and_escapes_the_rest() {
        let text = format!("{}\n\x07x\x1b[2J\u{202e}\n", bold("PID", true));
        assert_eq!(
            screen_safe(text),
            "\x1b[1mPID\x1b[0m\n\\x07x\\x1b[2J\\u{202e}\n"
        );
        let mut ins = fixture::inspection();
        ins.process.comm = "\x1b]0;t\x07n\nx".into();
        ins.process.cmdline = vec!["a\x1b[2J".into(), "b\nc".into()];
        let screen = render(&ins, View::Screen, false);
        assert!(
            screen.contains("PID 4242 (\\x1b]0;t\\x07n\\nx)"),
            "{screen}"
        );
        assert!(
            screen.contains("command  $'a\\x1b[2J' $'b\\nc'"),
            "{screen}"
        );
        assert!(!screen.contains('\x1b') && !screen.contains('\x07'));
    }

    #[test]
    fn live_line_of_a_sample() {
        let s = Sample {
            t_seconds: 12.0,
            rss_bytes: 3 << 20,
            pss_bytes: None,
            threads: 4,
            arenas: Some(3),
        };
        assert_eq!(
            live_line(&s),
            "12.00 s  RSS 3.0 MiB  PSS ?  threads 4  arenas 3"
        );
    }
}
