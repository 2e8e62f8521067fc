//! The load's seconds: each worker's second merged into one slot, finished when every
//! worker reported, and kept for the result or streamed whole to a caller.

use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use super::{ms, new_histogram, Errors, SecondStats};

/// Per-second slots the workers merge into; finished when every worker reported.
pub(crate) struct Seconds {
    slots: std::collections::BTreeMap<u64, Slot>,
    done: Vec<SecondStats>,
    workers: usize,
    t0: Instant,
    measure_start: Instant,
    measure_end: Instant,
    /// Where each finished second goes, whole, when the caller streams them (nothing is
    /// then kept here: a load of days stays in bounded memory).
    sink: Option<std::sync::mpsc::Sender<SecondReport>>,
}

/// One finished second of a streamed load ([`RunOptions::sink`]), its histogram whole.
#[derive(Debug, Clone)]
pub struct SecondReport {
    /// Seconds since the measurement began.
    pub index: u64,
    /// Its start, in seconds since the `t0` given to [`run_with`].
    pub t_seconds: f64,
    pub requests: u64,
    pub errors: Errors,
    /// Latency of the second's responses in microseconds (the bounds of every histogram
    /// here: 1 µs to 1 h, 3 significant digits).
    pub latency: Histogram<u64>,
}

/// How a load is run besides its spec.
#[derive(Debug, Default)]
pub struct RunOptions {
    /// When the schedule begins (now by default): loads given the same `begin` and the
    /// same source and rate send the same requests at the same moments (a fan-out).
    pub begin: Option<Instant>,
    /// Streams each finished second here instead of keeping it for the result's
    /// `per_second`.
    pub sink: Option<std::sync::mpsc::Sender<SecondReport>>,
}

struct Slot {
    hist: Histogram<u64>,
    counts: Errors,
    requests: u64,
    reported: usize,
}

impl Seconds {
    /// Slots for `workers` workers over the measurement `measure`; `t0` is the caller's
    /// clock origin; with a `sink`, each finished second is sent there instead of kept.
    pub(crate) fn new(
        workers: usize,
        t0: Instant,
        measure: std::ops::Range<Instant>,
        sink: Option<std::sync::mpsc::Sender<SecondReport>>,
    ) -> Seconds {
        Seconds {
            slots: Default::default(),
            done: Vec::new(),
            workers,
            t0,
            measure_start: measure.start,
            measure_end: measure.end,
            sink,
        }
    }

    /// Adds one worker's second `index`.
    pub fn report(&mut self, index: u64, hist: &Histogram<u64>, requests: u64, errors: &Errors) {
        let slot = self.slots.entry(index).or_insert_with(|| Slot {
            hist: new_histogram(),
            counts: Errors::default(),
            requests: 0,
            reported: 0,
        });
        // Same bounds everywhere, so adding cannot fail.
        let _ = slot.hist.add(hist);
        slot.counts.add(errors);
        slot.requests += requests;
        slot.reported += 1;
        if slot.reported == self.workers {
            if let Some(slot) = self.slots.remove(&index) {
                self.finish(index, slot);
            }
        }
    }

    /// Finishes seconds not every worker reported (a run stopped early).
    fn finish_all(&mut self) {
        while let Some((index, slot)) = self.slots.pop_first() {
            self.finish(index, slot);
        }
    }

    fn finish(&mut self, index: u64, slot: Slot) {
        let start = self.measure_start + Duration::from_secs(index);
        let end = (start + Duration::from_secs(1)).min(self.measure_end);
        if let Some(sink) = &self.sink {
            // A receiver gone means nobody reads any more: the seconds are dropped.
            let _ = sink.send(SecondReport {
                index,
                t_seconds: start.saturating_duration_since(self.t0).as_secs_f64(),
                requests: slot.requests,
                errors: slot.counts,
                latency: slot.hist,
            });
            return;
        }
        let (p50, p99) = if slot.hist.is_empty() {
            (0.0, 0.0)
        } else {
            (
                ms(slot.hist.value_at_quantile(0.5)),
                ms(slot.hist.value_at_quantile(0.99)),
            )
        };
        self.done.push(SecondStats {
            t_seconds: start.saturating_duration_since(self.t0).as_secs_f64(),
            seconds: end.saturating_duration_since(start).as_secs_f64(),
            requests: slot.requests,
            errors_connect: slot.counts.connect,
            errors_timeout: slot.counts.timeout,
            errors_other: slot.counts.other,
            http_4xx: slot.counts.status_4xx,
            http_5xx: slot.counts.status_5xx,
            p50_ms: p50,
            p99_ms: p99,
        });
    }

    /// Finishes every second still open and returns the series in time order.
    pub(crate) fn series(&mut self) -> Vec<SecondStats> {
        self.finish_all();
        let mut v = std::mem::take(&mut self.done);
        v.sort_by(|a, b| a.t_seconds.total_cmp(&b.t_seconds));
        v
    }
}
