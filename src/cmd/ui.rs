//! What a user sees and how memtrial ends: the exit outcome, the one printer, the progress
//! of a running experiment, and the interrupt flag.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};

use crate::cli::{Cli, ColorChoice};
use memtrial::record::RunStatus;
use memtrial::report::escape;
use memtrial::report::printer::{ColorMode, Printer};
use memtrial::runner::Event;
use memtrial::units::{format_bytes, format_seconds};

/// How the process should exit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    RunsFailed,
    Interrupted,
}

impl Outcome {
    pub fn code(self) -> u8 {
        match self {
            Outcome::Ok => 0,
            Outcome::RunsFailed => 1,
            Outcome::Interrupted => 130,
        }
    }
}

/// Everything a user sees goes through the one printer.
pub(crate) type Ui = Printer;

pub(super) fn printer(cli: &Cli) -> Ui {
    Printer::stdio(
        cli.quiet,
        match cli.color {
            ColorChoice::Auto => ColorMode::Auto,
            ColorChoice::Always => ColorMode::Always,
            ColorChoice::Never => ColorMode::Never,
        },
    )
}

/// A flag set by SIGINT, SIGTERM, SIGHUP and SIGQUIT: memtrial then stops what it runs, cleans
/// up, keeps what it measured, and exits with 130.
pub(crate) fn stop_flag() -> Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
        signal_hook::consts::SIGQUIT,
    ] {
        signal_hook::flag::register(sig, Arc::clone(&stop))
            .context("cannot install signal handlers")?;
    }
    Ok(stop)
}

/// What a user sees while an experiment runs: notes, and a progress bar on a terminal.
pub(crate) struct Progress<'a> {
    plan: &'a memtrial::plan::Plan,
    ui: &'a Ui,
    bar: Option<ProgressBar>,
}

impl<'a> Progress<'a> {
    pub(crate) fn new(plan: &'a memtrial::plan::Plan, ui: &'a Ui) -> Self {
        let bar = ui.live_progress().then(|| {
            let b = ProgressBar::new(0);
            b.set_style(
                ProgressStyle::with_template("{spinner} [{bar:24}] {pos}/{len} {wide_msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_bar())
                    .progress_chars("=> "),
            );
            b.enable_steady_tick(Duration::from_millis(200));
            b
        });
        Progress { plan, ui, bar }
    }

    pub(crate) fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }

    pub(crate) fn event(&self, ev: Event) {
        let (plan, ui, bar) = (self.plan, self.ui, &self.bar);
        match ev {
            Event::Started {
                experiment,
                total,
                log_dir,
            } => {
                let variants_line = plan
                    .variants
                    .iter()
                    .map(|v| v.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ");
                ui.note(&format!(
                    "experiment {experiment}: {total} runs ({} variants: {variants_line}; {} measured + {} warm-up each), seed {}, output of each run in {}",
                    plan.variants.len(),
                    plan.runs,
                    plan.warmup,
                    plan.seed,
                    log_dir.display()
                ));
                if let Some(b) = bar {
                    b.set_length(total as u64);
                }
            }
            Event::TrialStart { variant, slot, .. } => {
                if let Some(b) = bar {
                    b.set_message(format!(
                        "{}{} starting",
                        escape::terminal(variant),
                        if slot.warmup { " (warm-up)" } else { "" }
                    ));
                }
            }
            Event::Sample { slot, live } => {
                if let Some(b) = bar {
                    let v = escape::terminal(&plan.variants[slot.variant].name);
                    b.set_message(format!(
                        "{v}{} · {} · RSS {}",
                        if slot.warmup { " (warm-up)" } else { "" },
                        format_seconds(live.elapsed.as_secs_f64()),
                        format_bytes(live.rss_bytes as f64)
                    ));
                }
            }
            Event::TrialEnd {
                index,
                total,
                record,
                ..
            } => self.trial_end(index, total, record),
        }
    }

    /// One line per finished run: above the bar when it did not go well, else a note.
    fn trial_end(&self, index: usize, total: usize, record: &memtrial::record::RunRecord) {
        let line = format!(
            "[{:>3}/{total}] {:<12} {:<8} {:>9}  peak RSS {:>9}  {}{}",
            index,
            record.variant,
            record.status.as_str(),
            format_seconds(record.wall_seconds),
            format_bytes(record.peak_rss_bytes as f64),
            record.verification.as_str(),
            if record.warmup { " (warm-up)" } else { "" },
        );
        // An ok run's message says what else is true of it (memtrial was disturbed).
        let said = record
            .message
            .as_ref()
            .filter(|_| record.status == RunStatus::Ok);
        let line = match said {
            Some(m) => format!("{line} — {m}"),
            None => line,
        };
        match &self.bar {
            Some(b) => {
                b.inc(1);
                if record.status != RunStatus::Ok || said.is_some() {
                    // The bar prints above itself; the line is escaped as a note is.
                    b.println(escape::terminal(&line));
                }
            }
            None => self.ui.note(&line),
        }
    }
}
