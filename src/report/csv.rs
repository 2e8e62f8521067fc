//! CSV: one row per run with every scalar figure.

use crate::record::Experiment;

/// The column names, in order.
pub const COLUMNS: [&str; 26] = [
    "experiment_id",
    "variant",
    "block",
    "warmup",
    "started_at",
    "status",
    "exit_code",
    "signal",
    "verification",
    "allocator_detected",
    "wall_seconds",
    "cpu_user_seconds",
    "cpu_sys_seconds",
    "peak_rss_bytes",
    "peak_rss_source",
    "mean_rss_bytes",
    "final_rss_bytes",
    "peak_pss_bytes",
    "peak_vsz_bytes",
    "threads_peak",
    "minor_faults",
    "major_faults",
    "processes_seen",
    "samples",
    "message",
    "stderr_path",
];

/// Renders the runs of an experiment as CSV.
pub fn render(e: &Experiment) -> String {
    let mut w = csv::Writer::from_writer(Vec::new());
    let opt = |v: Option<String>| v.unwrap_or_default();
    let _ = w.write_record(COLUMNS);
    for r in &e.runs {
        let _ = w.write_record([
            e.id.to_string(),
            r.variant.clone(),
            r.block.to_string(),
            r.warmup.to_string(),
            r.started_at.clone(),
            r.status.as_str().to_string(),
            opt(r.exit_code.map(|v| v.to_string())),
            opt(r.signal.map(|v| v.to_string())),
            r.verification.as_str().to_string(),
            r.allocator_detected.clone(),
            format!("{:.6}", r.wall_seconds),
            format!("{:.6}", r.cpu_user_seconds),
            format!("{:.6}", r.cpu_sys_seconds),
            r.peak_rss_bytes.to_string(),
            r.peak_rss_source.as_str().to_string(),
            r.mean_rss_bytes.to_string(),
            r.final_rss_bytes.to_string(),
            opt(r.peak_pss_bytes.map(|v| v.to_string())),
            r.peak_vsz_bytes.to_string(),
            r.threads_peak.to_string(),
            r.minor_faults.to_string(),
            r.major_faults.to_string(),
            r.processes_seen.to_string(),
            r.samples.len().to_string(),
            opt(r.message.clone()),
            r.stderr_path.display().to_string(),
        ]);
    }
    let bytes = w.into_inner().unwrap_or_default();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Every sample of every run, one row each.
pub fn render_samples(e: &Experiment) -> String {
    let mut w = csv::Writer::from_writer(Vec::new());
    let _ = w.write_record([
        "experiment_id",
        "run",
        "variant",
        "warmup",
        "t_seconds",
        "rss_bytes",
        "vsz_bytes",
        "pss_bytes",
        "threads",
        "processes",
    ]);
    for (i, r) in e.runs.iter().enumerate() {
        let run = e.seqs.get(i).copied().unwrap_or(i as u32).to_string();
        for s in &r.samples {
            let _ = w.write_record([
                e.id.to_string(),
                run.clone(),
                r.variant.clone(),
                r.warmup.to_string(),
                format!("{:.3}", s.t_seconds),
                s.rss_bytes.to_string(),
                s.vsz_bytes.to_string(),
                s.pss_bytes.map(|v| v.to_string()).unwrap_or_default(),
                s.threads.to_string(),
                s.processes.to_string(),
            ]);
        }
    }
    let bytes = w.into_inner().unwrap_or_default();
    String::from_utf8_lossy(&bytes).into_owned()
}
