//! CSV: one row per run with every scalar figure.

use super::{escape, ExportError, Exporter, Report};
use crate::analysis::Figure;
use crate::record::evidence::Standing;
use crate::record::{Experiment, RunRecord};

/// The column names, in order.
pub(crate) const COLUMNS: [&str; 37] = [
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
    "allocator_answered",
    "live_at_peak_bytes",
    "held_at_peak_bytes",
    "held_over_live",
    "peak_live_bytes",
    "why",
    "why_detail",
    "peak_uss_bytes",
    "coverage",
    "absent",
    "host",
];

/// `--csv`: one row per run.
pub(crate) struct CsvExporter;

impl<'a> Exporter<Report<'a>> for CsvExporter {
    fn serialize(&self, r: &Report<'a>) -> Result<Vec<u8>, ExportError> {
        Ok(runs_csv(r.experiment)?)
    }
}

/// `--samples-csv`: one row per memory sample.
pub(crate) struct SamplesCsvExporter;

impl<'a> Exporter<Report<'a>> for SamplesCsvExporter {
    fn serialize(&self, r: &Report<'a>) -> Result<Vec<u8>, ExportError> {
        Ok(samples_csv(r.experiment)?)
    }
}

/// Writes one row, each cell neutralised for spreadsheets ([`escape::csv_cell`]): the one
/// way a row leaves this module.
fn row<I, S>(w: &mut csv::Writer<Vec<u8>>, cells: I) -> Result<(), csv::Error>
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    w.write_record(
        cells
            .into_iter()
            .map(|c| escape::csv_cell(c.as_ref()).into_owned()),
    )
}

fn finish(w: csv::Writer<Vec<u8>>) -> Result<Vec<u8>, csv::Error> {
    w.into_inner().map_err(|e| csv::Error::from(e.into_error()))
}

/// Renders the runs of an experiment as CSV.
pub fn render(e: &Experiment) -> String {
    runs_csv(e)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}

fn runs_csv(e: &Experiment) -> Result<Vec<u8>, csv::Error> {
    let mut w = csv::Writer::from_writer(Vec::new());
    // A worker's driver figures: one column each, `driver_<name>`, after the fixed ones.
    let names: std::collections::BTreeSet<&str> = e
        .runs
        .iter()
        .filter_map(|r| r.driver.as_ref())
        .flat_map(|d| d.figures.keys().map(String::as_str))
        .collect();
    row(
        &mut w,
        COLUMNS
            .iter()
            .map(|c| c.to_string())
            .chain(names.iter().map(|n| format!("driver_{n}"))),
    )?;
    for (i, r) in e.runs.iter().enumerate() {
        let driver = names.iter().map(|n| {
            r.driver
                .as_ref()
                .and_then(|d| d.figures.get(*n))
                .map(|f| f.value.to_string())
                .unwrap_or_default()
        });
        row(&mut w, run_cells(e, i, r).into_iter().chain(driver))?;
    }
    finish(w)
}

/// What each shown sampled figure of run `r` rests on, in the same words as the other
/// formats: "live_at_peak_bytes: …, 40 samples over 98% of the run, at the memory peak | …".
fn coverage_cell(r: &RunRecord) -> String {
    let words: Vec<String> = Figure::ALL
        .iter()
        .filter_map(|f| {
            let e = crate::analysis::evidence::of(*f, r)?;
            let c = e.coverage.as_ref().filter(|_| e.standing.stands())?;
            let mut w = format!(
                "{}: {}, {} samples over {:.0}% of the run",
                f.key(),
                e.source.words(),
                c.samples,
                c.share() * 100.0
            );
            if c.brackets_peak == Some(true) {
                w.push_str(", at the memory peak");
            }
            Some(w)
        })
        .collect();
    words.join(" | ")
}

/// Why each figure left empty in run `r` is, and what would give it.
fn absent_cell(r: &RunRecord) -> String {
    let words: Vec<String> = Figure::ALL
        .iter()
        .filter_map(|f| match crate::analysis::evidence::of(*f, r)?.standing {
            Standing::Absent { reason, remedy } => {
                Some(format!("{}: {reason}; {remedy} would give it", f.key()))
            }
            Standing::Stands => None,
        })
        .collect();
    words.join(" | ")
}

/// The fixed columns ([`COLUMNS`]) of run `r`, the `i`th of experiment `e`.
fn run_cells(e: &Experiment, i: usize, r: &RunRecord) -> Vec<String> {
    let opt = |v: Option<String>| v.unwrap_or_default();
    let al = r.inside.allocator.as_ref();
    // The allocator's figures at the memory peak, as analysis chooses them.
    let at = crate::analysis::evidence::at_peak_point(r);
    let why = crate::analysis::why::run_why(r);
    // A figure below its rule in this run is left empty; `absent` says why.
    let shown = |f: Figure, v: String| {
        if crate::analysis::evidence::stands(f, r) {
            v
        } else {
            String::new()
        }
    };
    vec![
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
        shown(Figure::MeanRssBytes, r.mean_rss_bytes.to_string()),
        shown(Figure::FinalRssBytes, r.final_rss_bytes.to_string()),
        shown(
            Figure::PeakPssBytes,
            opt(r.peak_pss_bytes.map(|v| v.to_string())),
        ),
        r.peak_vsz_bytes.to_string(),
        r.threads_peak.to_string(),
        r.minor_faults.to_string(),
        r.major_faults.to_string(),
        r.processes_seen.to_string(),
        r.samples.len().to_string(),
        opt(r.message.clone()),
        r.stderr_path.display().to_string(),
        opt(al.map(|a| a.answered.clone())),
        shown(
            Figure::LiveAtPeakBytes,
            opt(at.and_then(|p| p.live_bytes).map(|v| v.to_string())),
        ),
        shown(
            Figure::HeldAtPeakBytes,
            opt(at.and_then(|p| p.held_bytes).map(|v| v.to_string())),
        ),
        shown(
            Figure::HeldOverLive,
            opt(at
                .and_then(|p| p.fragmentation())
                .map(|v| format!("{v:.4}"))),
        ),
        shown(
            Figure::PeakLiveBytes,
            opt(al.and_then(|a| a.peak_live_bytes).map(|v| v.to_string())),
        ),
        why.name().to_string(),
        why.sentence(),
        shown(
            Figure::PeakUssBytes,
            opt(r.peak_uss_bytes.map(|v| v.to_string())),
        ),
        coverage_cell(r),
        absent_cell(r),
        e.host_of(i).hostname.clone(),
    ]
}

/// Every sample of every run, one row each.
#[cfg(test)]
pub(crate) fn render_samples(e: &Experiment) -> String {
    samples_csv(e)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}

fn samples_csv(e: &Experiment) -> Result<Vec<u8>, csv::Error> {
    let mut w = csv::Writer::from_writer(Vec::new());
    row(
        &mut w,
        [
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
            "uss_bytes",
        ],
    )?;
    for (i, r) in e.runs.iter().enumerate() {
        let run = e.seqs.get(i).copied().unwrap_or(i as u32).to_string();
        for s in &r.samples {
            row(
                &mut w,
                [
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
                    s.uss_bytes.map(|v| v.to_string()).unwrap_or_default(),
                ],
            )?;
        }
    }
    finish(w)
}
