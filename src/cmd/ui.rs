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
    /// `gate`: a figure worse than the baseline beyond its tolerance.
    Regression,
    /// `gate`: a criterion's interval straddles its tolerance (unless `--undecided pass`).
    Undecided,
    /// `gate --expect-recommendation`: the recommendation is another (or undecided).
    RecommendationChanged,
}

impl Outcome {
    pub fn code(self) -> u8 {
        match self {
            Outcome::Ok => 0,
            Outcome::RunsFailed => 1,
            Outcome::Regression => 3,
            Outcome::Undecided => 4,
            Outcome::RecommendationChanged => 5,
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
            Event::Looked {
                runs,
                open,
                unconfirmed,
                decided,
                next_total,
                max_runs,
            } => {
                let mut why: Vec<String> = open.to_vec();
                why.extend(unconfirmed.iter().map(|k| {
                    format!("{k}: answered, but not yet the same at the last looks in a row")
                }));
                let line = match (decided, next_total) {
                    (true, _) => format!(
                        "until decided: after {runs} runs of each, every question is decided (the same answer at the last looks)"
                    ),
                    (false, Some(_)) => format!(
                        "until decided: after {runs} runs of each, undecided: {}; one more block (at most {max_runs} runs of each)",
                        why.join("; ")
                    ),
                    (false, None) => format!(
                        "until decided: after {runs} runs of each ({}), still undecided: {}",
                        if runs >= max_runs {
                            "the most --max-runs allows"
                        } else {
                            "stopped"
                        },
                        why.join("; ")
                    ),
                };
                match bar {
                    Some(b) => {
                        if let Some(t) = next_total {
                            b.set_length(t as u64);
                        }
                        b.println(escape::terminal(&line));
                    }
                    None => ui.note(&line),
                }
            }
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
