//! Plain-text summary of a load run, as `memtrial load` prints it (no I/O here).

use std::fmt::Write;

use super::LoadResult;

/// Groups thousands: 1234567 → `1,234,567`.
fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

fn lat(ms: f64) -> String {
    if ms >= 1000.0 {
        format!("{:.2} s", ms / 1000.0)
    } else if ms >= 10.0 {
        format!("{ms:.1} ms")
    } else {
        format!("{ms:.3} ms")
    }
}

/// The summary lines; `header` describes what was run.
pub fn render(header: &str, r: &LoadResult) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "{header}");
    let secs = r.duration_measured.as_secs_f64();
    let _ = writeln!(
        o,
        "  requests     {} in {secs:.2} s, {:.1} req/s{}",
        thousands(r.requests),
        r.throughput_rps,
        match r.target_rate {
            Some(t) => format!(
                " (target {t:.1} req/s, {:.1}% achieved)",
                100.0 * r.achieved_rate / t
            ),
            None => String::new(),
        }
    );
    let _ = writeln!(
        o,
        "  latency      p50 {}  p90 {}  p95 {}  p99 {}  p99.9 {}  max {}{}",
        lat(r.latency_p50_ms),
        lat(r.latency_p90_ms),
        lat(r.latency_p95_ms),
        lat(r.latency_p99_ms),
        lat(r.latency_p999_ms),
        lat(r.latency_max_ms),
        if r.target_rate.is_some() {
            "  (from the intended send time)"
        } else {
            ""
        }
    );
    let e = &r.errors;
    let _ = writeln!(
        o,
        "  errors       connect {} · timeout {} · http 4xx {} · http 5xx {} · other {}",
        thousands(e.connect),
        thousands(e.timeout),
        thousands(e.status_4xx),
        thousands(e.status_5xx),
        thousands(e.other)
    );
    if let Some(why) = &r.other_example {
        let _ = writeln!(o, "               first other error: {why}");
    }
    let _ = writeln!(
        o,
        "  received     {:.1} MiB",
        r.bytes_received as f64 / (1024.0 * 1024.0)
    );
    let _ = writeln!(
        o,
        "  client CPU   {:.2} s on {} thread(s), busiest thread {:.0}% busy",
        r.client_cpu_seconds,
        r.threads,
        100.0 * r.client_max_thread_busy
    );
    if r.client_saturated {
        let _ = writeln!(
            o,
            "warning: a load thread was over {:.0}% busy: the client may be the bottleneck, so these figures measure the client as much as the server (add --threads or CPUs, or lower --connections/--rate)",
            100.0 * super::SATURATION
        );
    }
    if let Some(st) = &r.client_stall {
        let _ = writeln!(
            o,
            "warning: {}; give the load generator a CPU of its own or run on a quieter machine",
            st.describe(r.target_rate.is_some())
        );
    }
    if r.requests == 0 && r.errors.connect > 0 {
        let _ = writeln!(
            o,
            "warning: no request got a connection: the server refused them or did not accept them within --timeout ({} connect error(s), one per request)",
            thousands(r.errors.connect)
        );
    } else if let Some(t) = r.target_rate {
        if r.achieved_rate < 0.95 * t {
            let _ = writeln!(
                o,
                "warning: achieved {:.1} req/s of the {t:.1} asked: the server (or the client) could not keep up; latency includes the time requests waited for their turn",
                r.achieved_rate
            );
        }
    }
    if r.stopped_early {
        let _ = writeln!(o, "note: stopped early; figures cover {secs:.2} s");
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_thousands() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(1234567), "1,234,567");
    }
}
