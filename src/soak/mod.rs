//! `memtrial soak`: every variant's instance of a server side by side, each in its own
//! run cgroup with the same limits, all fed the same stream of requests at the same
//! moments (one schedule, fanned out: one open-loop load per instance with a shared
//! start), measured in time windows for hours, stored as it goes, resumable, and stopped
//! when the evidence is in. See docs/soak.md.
//!
//! The loop, once a second: sample each instance's memory (its processes' RSS, the cgroup's
//! working set, PSS every `pss_seconds`, the allocator probe's live and held bytes), take
//! the load's finished seconds (latency histograms, counts), commit the points; when a
//! window is over (and its last load second has arrived), commit every variant's window
//! and ask the rule whether the soak is decided.

pub mod decide;
mod instance;
pub mod report;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use hdrhistogram::Histogram;

use crate::backend::Backend;
use crate::load::{self, LoadSpec, SecondReport};
use crate::record::soak::{
    SoakEvent, SoakPoint, SoakSettings, SoakStatus, SoakWindow, WindowFigures,
};
use crate::store::{SoakTake, Store, StoreError};

pub use instance::VARIANT_PLACEHOLDER;

/// Why a soak could not go on (the instances are stopped by then).
#[derive(Debug, thiserror::Error)]
pub enum SoakError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{0}")]
    Start(String),
    #[error("the load generator failed: {0}")]
    Load(String),
    /// Another memtrial runs the soak (it took it first).
    #[error("soak {id} is running in another memtrial (PID {pid} on this machine); `memtrial report --follow {id}` shows it as it goes")]
    Busy { id: i64, pid: i64 },
    #[error("soak {id} is done ({reason}); `memtrial report --soak {id}` shows it")]
    Done { id: i64, reason: String },
}

/// What a soak's caller sees as it goes.
#[derive(Debug, Clone)]
pub struct Progress {
    /// The soak's id.
    pub soak: Option<i64>,
    /// A window closed (and was committed) since the last progress.
    pub window_closed: bool,
    /// Soak seconds now, and the soak's end (its duration).
    pub t: f64,
    pub end: f64,
    pub variants: Vec<VariantNow>,
    /// A note to show once (a window closed, an instance went down).
    pub note: Option<String>,
}

/// One variant's line of the progress.
#[derive(Debug, Clone)]
pub struct VariantNow {
    pub name: String,
    pub rss: Option<f64>,
    /// RSS change over the last closed window against the one before, bytes per minute.
    pub trend_per_min: Option<f64>,
    /// The p95 of the last closed window.
    pub p95_ms: Option<f64>,
    pub errors: u64,
    pub down: Option<String>,
}

/// How a soak ended.
#[derive(Debug, Clone)]
pub struct Ended {
    pub id: i64,
    pub status: SoakStatus,
    pub reason: String,
    /// The variants whose instance went down while this memtrial ran the soak.
    pub down: Vec<String>,
}

/// A new soak, or one to carry on.
pub enum Begin {
    New(Box<SoakSettings>),
    Resume(i64),
}

/// Seconds after a window's end that its last load seconds may still arrive (the load's
/// workers report a second when the next one begins).
const LATE: f64 = 3.0;

/// Thin the series this often.
const COMPACT_EVERY: Duration = Duration::from_secs(60);

/// The group names of the instances: above any experiment's run positions.
const GROUP_SEQ_BASE: u32 = 1_000_000;

/// Per instance, per window: the sums that become the window's figures.
struct Acc {
    samples: u32,
    sums: [(f64, u32); 5],
    rss_max: Option<f64>,
    requests: u64,
    errors: u64,
    timeouts: u64,
    http_5xx: u64,
    latency: Histogram<u64>,
    cpu_start: Option<f64>,
    down: bool,
}

impl Acc {
    fn new(cpu_start: Option<f64>) -> Acc {
        Acc {
            samples: 0,
            sums: [(0.0, 0); 5],
            rss_max: None,
            requests: 0,
            errors: 0,
            timeouts: 0,
            http_5xx: 0,
            latency: Histogram::new_with_bounds(1, 3_600_000_000, 3)
                .expect("static histogram bounds are valid"),
            cpu_start,
            down: false,
        }
    }

    fn add_sample(&mut self, p: &SoakPoint) {
        self.samples += 1;
        for (i, v) in [p.rss, p.working_set, p.pss, p.live, p.held]
            .into_iter()
            .enumerate()
        {
            if let Some(v) = v {
                self.sums[i].0 += v;
                self.sums[i].1 += 1;
            }
        }
        if let Some(r) = p.rss {
            self.rss_max = Some(self.rss_max.map_or(r, |m| m.max(r)));
        }
    }

    fn add_second(&mut self, s: &SecondReport) {
        self.requests += s.requests;
        let e = &s.errors;
        self.errors += e.connect + e.timeout + e.other + e.status_5xx;
        self.timeouts += e.timeout;
        self.http_5xx += e.status_5xx;
        let _ = self.latency.add(&s.latency);
    }

    fn figures(&self, cpu_end: Option<f64>, due: Option<u64>) -> WindowFigures {
        let mean = |i: usize| {
            let (s, n) = self.sums[i];
            (n > 0).then(|| s / f64::from(n))
        };
        let q = |p: f64| {
            (!self.latency.is_empty()).then(|| self.latency.value_at_quantile(p) as f64 / 1000.0)
        };
        WindowFigures {
            samples: self.samples,
            rss_mean: mean(0),
            rss_max: self.rss_max,
            working_set_mean: mean(1),
            pss_mean: mean(2),
            live_mean: mean(3),
            held_mean: mean(4),
            cpu_seconds: match (self.cpu_start, cpu_end) {
                (Some(a), Some(b)) if b >= a => Some(b - a),
                _ => None,
            },
            requests: self.requests,
            due,
            errors: self.errors,
            errors_timeout: self.timeouts,
            http_5xx: self.http_5xx,
            p50_ms: q(0.5),
            p95_ms: q(0.95),
            p99_ms: q(0.99),
            instance_down: self.down,
        }
    }

    fn latency_blob(&self) -> Option<Vec<u8>> {
        if self.latency.is_empty() {
            return None;
        }
        use hdrhistogram::serialization::Serializer;
        let mut out = Vec::new();
        hdrhistogram::serialization::V2DeflateSerializer::new()
            .serialize(&self.latency, &mut out)
            .ok()?;
        Some(out)
    }
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Everything a soak needs from its caller.
pub struct Context<'a> {
    pub store: &'a mut Store,
    pub backend: &'a dyn Backend,
    /// Where the instances' logs and probe reports go (one folder per soak inside).
    pub logs: &'a Path,
    pub stop: &'a AtomicBool,
    pub on_progress: &'a mut dyn FnMut(&Progress),
}

/// Runs (or carries on) a soak until its duration is over, the rule decides it, every
/// instance is down, or `stop`. The soak is taken for this memtrial first, atomically (a
/// soak another live memtrial runs is refused); from then on a soak that cannot go on is
/// stored as failed, with why.
pub fn soak(begin: Begin, cx: Context) -> Result<Ended, SoakError> {
    let (id, settings, started_unix) = match begin {
        Begin::New(settings) => {
            let now = unix_now();
            let id = cx.store.create_soak(&settings, now)?;
            (id, *settings, now)
        }
        Begin::Resume(id) => {
            let head = cx
                .store
                .soak_head(id)?
                .ok_or_else(|| SoakError::Start(format!("there is no soak {id}")))?;
            (id, head.settings, head.started_unix)
        }
    };
    let seg_t0 = unix_now() - started_unix;
    let segment = match cx.store.take_soak(id, seg_t0)? {
        SoakTake::Taken { segment } => segment,
        SoakTake::Busy(owner) => return Err(SoakError::Busy { id, pid: owner.pid }),
        SoakTake::Done(reason) => return Err(SoakError::Done { id, reason }),
        SoakTake::Missing => return Err(SoakError::Start(format!("there is no soak {id}"))),
    };
    let Context {
        store,
        backend,
        logs,
        stop,
        on_progress,
    } = cx;
    let outcome = run_segment(
        id,
        &settings,
        segment,
        seg_t0,
        Context {
            store: &mut *store,
            backend,
            logs,
            stop,
            on_progress,
        },
    );
    match outcome {
        Ok(ended) => Ok(ended),
        Err(e) if stop.load(Ordering::SeqCst) && matches!(e, SoakError::Start(_)) => {
            let reason = format!("interrupted while its instances started ({e})");
            store.end_soak(id, SoakStatus::Interrupted, &reason)?;
            Ok(Ended {
                id,
                status: SoakStatus::Interrupted,
                reason,
                down: Vec::new(),
            })
        }
        Err(e) => {
            // The soak is this memtrial's: left "running", it would show as running with
            // a dead owner. Stored as failed, with why (the error itself is the answer).
            let _ = store.end_soak(id, SoakStatus::Failed, &e.to_string());
            Err(e)
        }
    }
}

/// One start of the soak's instances (segment `segment`, from soak time `seg_t0`) to its end.
fn run_segment(
    id: i64,
    settings: &SoakSettings,
    segment: u32,
    seg_t0: f64,
    cx: Context,
) -> Result<Ended, SoakError> {
    if segment > 0 {
        let last = cx
            .store
            .soak_segments(id)?
            .iter()
            .filter(|s| s.index < segment)
            .map(|s| s.to_t)
            .fold(0.0, f64::max);
        cx.store.add_soak_event(
            id,
            &SoakEvent {
                t: seg_t0,
                variant: None,
                text: format!(
                    "resumed: nothing was measured for {} (from {:.0} s to {:.0} s); the instances started again, their first {} window(s) are warm-up",
                    humantime::format_duration(Duration::from_secs((seg_t0 - last).max(0.0) as u64)),
                    last,
                    seg_t0,
                    settings.warmup_windows
                ),
            },
        )?;
    }
    let dir = cx.logs.join(format!("soak-{id}"));
    std::fs::create_dir_all(&dir)
        .map_err(|e| SoakError::Start(format!("cannot create {}: {e}", dir.display())))?;
    let mut run = Running::start(id, settings, segment, seg_t0, &dir, &cx)?;
    for text in std::mem::take(&mut run.source_notes) {
        let e = SoakEvent {
            t: seg_t0,
            variant: None,
            text: format!("the requests: {text}"),
        };
        cx.store.add_soak_event(id, &e)?;
    }
    let outcome = run.go(settings, cx.store, cx.stop, cx.on_progress);
    run.stop_all(settings.plan.grace());
    let (status, reason) = outcome?;
    cx.store.end_soak(id, status, &reason)?;
    let down = run
        .went_down
        .iter()
        .map(|&i| run.variants[i].clone())
        .collect();
    Ok(Ended {
        id,
        status,
        reason,
        down,
    })
}

/// Instance `i`'s load on a thread of its own, its clock at `t0` and its schedule's first
/// request at `begin`; each second it measured goes to `tx`, tagged with `i`.
fn start_load(
    i: usize,
    spec: LoadSpec,
    (t0, begin): (Instant, Instant),
    tx: &mpsc::Sender<(usize, SecondReport)>,
    stop: Arc<AtomicBool>,
) -> Result<std::thread::JoinHandle<Result<(), String>>, SoakError> {
    let (itx, irx) = mpsc::channel::<SecondReport>();
    let fwd = tx.clone();
    std::thread::Builder::new()
        .name(format!("memtrial-soak-fwd-{i}"))
        .spawn(move || {
            for s in irx {
                if fwd.send((i, s)).is_err() {
                    break;
                }
            }
        })
        .map_err(|e| SoakError::Start(format!("cannot start a thread: {e}")))?;
    std::thread::Builder::new()
        .name(format!("memtrial-soak-load-{i}"))
        .spawn(move || {
            load::run_with(
                &spec,
                t0,
                &stop,
                load::RunOptions {
                    begin: Some(begin),
                    sink: Some(itx),
                },
            )
            .map(|_| ())
            .map_err(|e| e.to_string())
        })
        .map_err(|e| SoakError::Start(format!("cannot start a thread: {e}")))
}

struct Running {
    id: i64,
    segment: u32,
    instances: Vec<instance::Instance>,
    /// The instant and soak time the segment's clock starts at.
    t0: Instant,
    seg_t0: f64,
    /// Soak time of the fan-out's first scheduled request.
    load_t0: f64,
    seconds: mpsc::Receiver<(usize, SecondReport)>,
    /// Each instance's load stops when this is set (its own when it goes down, all at the end).
    load_stops: Vec<Arc<AtomicBool>>,
    /// The loads' threads, by instance.
    loads: Vec<(usize, std::thread::JoinHandle<Result<(), String>>)>,
    /// The instances' variants, in order.
    variants: Vec<String>,
    /// The instances that went down, in the order they did, with the soak time it was seen.
    went_down: Vec<usize>,
    down_at: Vec<Option<f64>>,
    /// What reading the requests found (a replayed log's skipped lines, its silences):
    /// events of each start, so the soak's result says what was sent.
    source_notes: Vec<String>,
    accs: Vec<BTreeMap<u32, Acc>>,
    last_windows: Vec<Option<WindowFigures>>,
    prev_windows: Vec<Option<WindowFigures>>,
    errors: Vec<u64>,
    announced_down: Vec<bool>,
    /// Soak time the loads were stopped at (the last window ends there).
    loads_ended: Option<f64>,
}

impl Running {
    fn start(
        id: i64,
        settings: &SoakSettings,
        segment: u32,
        seg_t0: f64,
        dir: &Path,
        cx: &Context,
    ) -> Result<Running, SoakError> {
        let plan = &settings.plan;
        let (source, source_notes) = match &plan.server {
            Some(server) => {
                let (source, notes) =
                    load::source::read_source(&server.source, &url_path(&server.url))
                        .map_err(SoakError::Start)?;
                (Some(source), notes)
            }
            None => (None, Vec::new()),
        };
        let interrupted = || cx.stop.load(Ordering::SeqCst);
        let mut instances = Vec::new();
        for (i, v) in plan.variants.iter().enumerate() {
            let spec = instance::StartSpec {
                plan,
                backend: cx.backend,
                group: crate::linux::cgroup::run_group_name(
                    GROUP_SEQ_BASE + segment * 1000 + i as u32,
                ),
                dir,
                segment,
                source: source.clone(),
                interrupted: &interrupted,
            };
            match instance::start(&spec, v) {
                Ok(inst) => instances.push(inst),
                Err(why) => {
                    for inst in instances {
                        inst.stop(plan.grace());
                    }
                    return Err(SoakError::Start(why));
                }
            }
        }
        let t0 = Instant::now();
        // Every load starts its schedule at the same instant: request k goes to every
        // instance at begin + k/rate (or the log's own offset).
        let lead = Duration::from_millis(200);
        let begin = t0 + lead;
        let load_t0 = seg_t0 + lead.as_secs_f64();
        let (tx, rx) = mpsc::channel::<(usize, SecondReport)>();
        let load_stops: Vec<Arc<AtomicBool>> = instances
            .iter()
            .map(|_| Arc::new(AtomicBool::new(false)))
            .collect();
        let mut loads = Vec::new();
        for (i, inst) in instances.iter().enumerate() {
            let Some(mut spec) = inst.load.clone() else {
                continue;
            };
            spec.warmup = Duration::ZERO;
            spec.duration =
                Duration::from_secs_f64((settings.duration_seconds - seg_t0).max(1.0) + 3600.0);
            let h = start_load(i, spec, (t0, begin), &tx, Arc::clone(&load_stops[i]))?;
            loads.push((i, h));
        }
        let n = instances.len();
        let variants = instances.iter().map(|i| i.variant.clone()).collect();
        Ok(Running {
            id,
            segment,
            instances,
            t0,
            seg_t0,
            load_t0,
            seconds: rx,
            load_stops,
            loads,
            variants,
            went_down: Vec::new(),
            down_at: vec![None; n],
            source_notes,
            accs: (0..n).map(|_| BTreeMap::new()).collect(),
            last_windows: vec![None; n],
            prev_windows: vec![None; n],
            errors: vec![0; n],
            announced_down: vec![false; n],
            loads_ended: None,
        })
    }

    fn now(&self) -> f64 {
        self.seg_t0 + self.t0.elapsed().as_secs_f64()
    }

    fn window_of(t: f64, settings: &SoakSettings) -> u32 {
        (t / settings.window_seconds).floor().max(0.0) as u32
    }

    /// The loop; returns how the soak ended.
    fn go(
        &mut self,
        settings: &SoakSettings,
        store: &mut Store,
        stop: &AtomicBool,
        on_progress: &mut dyn FnMut(&Progress),
    ) -> Result<(SoakStatus, String), SoakError> {
        let every = Duration::from_secs_f64(settings.sample_seconds);
        let pss_every = Duration::from_secs_f64(settings.pss_seconds);
        let first_window = Self::window_of(self.seg_t0, settings);
        let mut next = Instant::now();
        let mut next_pss = Instant::now();
        let mut next_compact = Instant::now() + COMPACT_EVERY;
        let mut next_progress = Instant::now();
        loop {
            let t = self.now();
            if stop.load(Ordering::SeqCst) {
                self.end_loads(settings);
                self.close_windows(settings, store, first_window, f64::INFINITY)?;
                return Ok((
                    SoakStatus::Interrupted,
                    format!("interrupted at {}", clock(t)),
                ));
            }
            if t >= settings.duration_seconds {
                self.end_loads(settings);
                self.close_windows(settings, store, first_window, f64::INFINITY)?;
                return Ok((
                    SoakStatus::Done,
                    format!("ran its duration ({})", clock(settings.duration_seconds)),
                ));
            }
            if let Some(h) = self.loads.iter().position(|(_, h)| h.is_finished()) {
                let (_, h) = self.loads.remove(h);
                let why = match h.join() {
                    Ok(Err(e)) => e,
                    Ok(Ok(())) => "it stopped before the soak's end".into(),
                    Err(_) => "a load thread panicked".into(),
                };
                return Err(SoakError::Load(why));
            }
            let pss_due = Instant::now() >= next_pss;
            if pss_due {
                next_pss += pss_every;
            }
            let (points, mut note) = self.sample_instances(t, settings, pss_due, store)?;
            self.stop_loads_of_down();
            self.drain(settings);
            if self.down_at.iter().all(Option::is_some) {
                // Nothing left to measure: a dead server is no slow machine.
                store.add_soak_points(self.id, self.segment, t, &points, false)?;
                self.end_loads(settings);
                self.close_windows(settings, store, first_window, f64::INFINITY)?;
                return Ok((SoakStatus::Failed, self.all_down(t)));
            }
            let compact = Instant::now() >= next_compact;
            if compact {
                next_compact += COMPACT_EVERY;
            }
            store.add_soak_points(self.id, self.segment, t, &points, compact)?;
            let closed = self.close_windows(settings, store, first_window, t - LATE)?;
            if let Some(n) = closed.clone() {
                note = note.or(Some(n));
                if let Some(why) = self.decided(t, settings, store)? {
                    return Ok((SoakStatus::Done, why));
                }
            }
            if Instant::now() >= next_progress || note.is_some() {
                next_progress = Instant::now() + Duration::from_secs(2);
                let mut p = self.progress(t, settings, &points, note);
                p.window_closed = closed.is_some();
                on_progress(&p);
            }
            next = wait_until(next + every, stop);
        }
    }

    /// Samples every instance at soak time `t` into its window's accumulator; stores the
    /// events an instance gave (its driver ended, it went down). Returns the points and the
    /// last event's text, for the progress line.
    fn sample_instances(
        &mut self,
        t: f64,
        settings: &SoakSettings,
        pss_due: bool,
        store: &mut Store,
    ) -> Result<(Vec<Point>, Option<String>), SoakError> {
        let k = Self::window_of(t, settings);
        let mut points = Vec::with_capacity(self.instances.len());
        let mut note = None;
        for (i, inst) in self.instances.iter_mut().enumerate() {
            let s = inst.sample(pss_due);
            let p = SoakPoint {
                t,
                n: 1,
                rss: s.rss,
                working_set: s.working_set,
                pss: s.pss,
                live: s.live,
                held: s.held,
            };
            let cpu = if self.accs[i].contains_key(&k) {
                None
            } else {
                inst.cpu_seconds()
            };
            let acc = self.accs[i].entry(k).or_insert_with(|| Acc::new(cpu));
            acc.add_sample(&p);
            let mut told = Vec::new();
            if let Some(why) = inst.driver_ended.clone().filter(|_| !inst.driver_said) {
                inst.driver_said = true;
                told.push(SoakEvent {
                    t,
                    variant: Some(inst.variant.clone()),
                    text: format!("the {} instance: {why}", inst.variant),
                });
            }
            if let Some(why) = &inst.down {
                acc.down = true;
                if !self.announced_down[i] {
                    self.announced_down[i] = true;
                    self.went_down.push(i);
                    self.down_at[i] = Some(t);
                    told.push(SoakEvent::down(t, &inst.variant, why));
                }
            }
            for e in told {
                store.add_soak_event(self.id, &e)?;
                note = Some(e.text);
            }
            points.push((inst.variant.clone(), p));
        }
        Ok((points, note))
    }

    /// Why a soak whose every instance is down (at soak time `t`) ends: each one, when
    /// and how.
    fn all_down(&self, t: f64) -> String {
        let which: Vec<String> = self
            .went_down
            .iter()
            .map(|&i| {
                format!(
                    "{} at {} ({})",
                    self.variants[i],
                    clock(self.down_at[i].unwrap_or(t)),
                    self.instances[i].down.as_deref().unwrap_or("gone")
                )
            })
            .collect();
        format!("every instance is down: {}", which.join(", "))
    }

    /// With `--until-decided`, after a window closed at soak time `t`: why the soak ends
    /// now, when every variant's memory ratio is decided.
    fn decided(
        &self,
        t: f64,
        settings: &SoakSettings,
        store: &mut Store,
    ) -> Result<Option<String>, SoakError> {
        let Some(rule) = &settings.until_decided else {
            return Ok(None);
        };
        let windows = store.soak_windows(self.id)?;
        let base = &settings.plan.baseline;
        let open = self
            .instances
            .iter()
            .map(|i| i.variant.as_str())
            .filter(|v| v != base)
            .any(|v| {
                decide::decided(&windows, settings.window_seconds, v, base, rule)
                    == decide::Standing::Open
            });
        Ok((!open).then(|| {
            format!(
                "decided at {}: every variant's memory ratio to {base} had its 95% interval wholly outside or wholly inside 1 ± {:.0}% after each of the last {} windows",
                clock(t),
                rule.margin * 100.0,
                rule.consecutive
            )
        }))
    }

    /// Takes the load's finished seconds into their windows.
    fn drain(&mut self, settings: &SoakSettings) {
        while let Ok((i, s)) = self.seconds.try_recv() {
            let k = Self::window_of(self.seg_t0 + s.t_seconds, settings);
            self.errors[i] +=
                s.errors.connect + s.errors.timeout + s.errors.other + s.errors.status_5xx;
            self.accs[i]
                .entry(k)
                .or_insert_with(|| Acc::new(None))
                .add_second(&s);
        }
    }

    /// Stops the load of every instance that went down: requests to a dead server measure
    /// nothing, and its connection errors would only pile up.
    fn stop_loads_of_down(&mut self) {
        let (down, up): (Vec<_>, Vec<_>) = std::mem::take(&mut self.loads)
            .into_iter()
            .partition(|(i, _)| self.down_at[*i].is_some());
        self.loads = up;
        for (i, h) in down {
            self.load_stops[i].store(true, Ordering::SeqCst);
            let _ = h.join();
        }
    }

    /// Stops the loads and takes their last seconds (before the last windows close).
    fn end_loads(&mut self, settings: &SoakSettings) {
        self.loads_ended = Some(self.now());
        for s in &self.load_stops {
            s.store(true, Ordering::SeqCst);
        }
        for (_, h) in self.loads.drain(..) {
            let _ = h.join();
        }
        // The forwarding threads pass on what the loads sent before they ended.
        std::thread::sleep(Duration::from_millis(50));
        self.drain(settings);
    }

    /// Closes (stores) every window that ended before `until`; returns a note when some
    /// closed.
    fn close_windows(
        &mut self,
        settings: &SoakSettings,
        store: &mut Store,
        first_window: u32,
        until: f64,
    ) -> Result<Option<String>, SoakError> {
        let w = settings.window_seconds;
        let now = self.loads_ended.unwrap_or_else(|| self.now());
        let mut closing: Vec<u32> = self
            .accs
            .iter()
            .flat_map(|m| m.keys().copied())
            .filter(|k| f64::from(*k + 1) * w <= until || until.is_infinite())
            .collect();
        closing.sort_unstable();
        closing.dedup();
        if closing.is_empty() {
            return Ok(None);
        }
        let mut rows = Vec::new();
        for &k in &closing {
            let from = (f64::from(k) * w).max(self.seg_t0);
            let to = (f64::from(k + 1) * w).min(now);
            let warm = k < first_window + settings.warmup_windows;
            let (load_t0, instances) = (self.load_t0, &mut self.instances);
            for (i, inst) in instances.iter_mut().enumerate() {
                let Some(acc) = self.accs[i].remove(&k) else {
                    continue;
                };
                let cpu_end = inst.cpu_seconds();
                // Nothing is due to an instance once it is down (its load is stopped).
                let due_to = self.down_at[i].map_or(to, |d| to.min(d)).max(from);
                let due = due(load_t0, inst, from, due_to);
                let figures = acc.figures(cpu_end, due);
                self.prev_windows[i] = self.last_windows[i].take();
                self.last_windows[i] = Some(figures.clone());
                rows.push(SoakWindow {
                    variant: inst.variant.clone(),
                    index: k,
                    segment: self.segment,
                    from_t: from,
                    to_t: to,
                    warm,
                    latency: acc.latency_blob(),
                    figures,
                });
            }
        }
        store.add_soak_windows(self.id, &rows)?;
        for &k in &closing {
            if let Some(e) = behind(&rows, k, w) {
                store.add_soak_event(self.id, &e)?;
            }
        }
        let last = closing.last().copied().unwrap_or(0);
        Ok(Some(format!(
            "window {} closed ({} to {})",
            last + 1,
            clock(f64::from(last) * w),
            clock(f64::from(last + 1) * w)
        )))
    }

    fn progress(
        &self,
        t: f64,
        settings: &SoakSettings,
        points: &[(String, SoakPoint)],
        note: Option<String>,
    ) -> Progress {
        let variants = self
            .instances
            .iter()
            .enumerate()
            .map(|(i, inst)| {
                let trend = match (&self.prev_windows[i], &self.last_windows[i]) {
                    (Some(a), Some(b)) => match (a.rss_mean, b.rss_mean) {
                        (Some(x), Some(y)) => Some((y - x) / (settings.window_seconds / 60.0)),
                        _ => None,
                    },
                    _ => None,
                };
                VariantNow {
                    name: inst.variant.clone(),
                    rss: points.get(i).and_then(|p| p.1.rss),
                    trend_per_min: trend,
                    p95_ms: self.last_windows[i].as_ref().and_then(|w| w.p95_ms),
                    errors: self.errors[i],
                    down: inst.down.clone(),
                }
            })
            .collect();
        Progress {
            soak: Some(self.id),
            window_closed: false,
            t,
            end: settings.duration_seconds,
            variants,
            note,
        }
    }

    fn stop_all(&mut self, grace: Duration) {
        for s in &self.load_stops {
            s.store(true, Ordering::SeqCst);
        }
        for (_, h) in self.loads.drain(..) {
            let _ = h.join();
        }
        for inst in self.instances.drain(..) {
            inst.stop(grace);
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop_all(Duration::from_secs(2));
    }
}

/// Below this share of the requests due, an instance is behind the schedule.
const BEHIND: f64 = 0.9;

/// An event when window `k`'s instances completed fewer requests than were due: all of
/// them (the machine, memtrial's load included, cannot drive the rate) or some (those
/// servers fell behind: their latency and errors say how).
fn behind(rows: &[SoakWindow], k: u32, window_seconds: f64) -> Option<SoakEvent> {
    // An instance that was down is not behind: it is down (an event of its own). A window
    // too short to count (the last one, cut by the soak's end) is not judged either: the
    // requests of its last moments are still in flight.
    let ws: Vec<&SoakWindow> = rows
        .iter()
        .filter(|w| w.index == k && !w.figures.instance_down)
        .filter(|w| w.to_t - w.from_t >= decide::MIN_WINDOW_SHARE * window_seconds)
        .collect();
    let instances = ws.len();
    let late: Vec<String> = ws
        .iter()
        .filter_map(|w| {
            let due = w.figures.due?;
            ((w.figures.requests as f64) < BEHIND * due as f64).then(|| {
                format!(
                    "{} completed {} of {} due",
                    w.variant, w.figures.requests, due
                )
            })
        })
        .collect();
    let first = ws.first()?;
    if late.is_empty() {
        return None;
    }
    let text = if late.len() == instances && instances > 1 {
        format!(
            "every instance fell behind the schedule in window {} ({}): the machine, memtrial's load generator included, cannot drive this rate for {instances} instances; the figures measure the machine as much as the variants — lower --rate (or --speed), or give the instances fewer CPUs (--cpus) so the load keeps its own",
            k + 1,
            late.join(", ")
        )
    } else {
        format!(
            "behind the schedule in window {}: {} (requests waited for a free connection; their latency counts from when they were due)",
            k + 1,
            late.join(", ")
        )
    };
    Some(SoakEvent {
        t: first.to_t,
        variant: None,
        text,
    })
}

/// Requests the fan-out's schedule (begun at soak time `load_t0`) meant to send between
/// soak times `from` and `to`.
fn due(load_t0: f64, inst: &instance::Instance, from: f64, to: f64) -> Option<u64> {
    let l = inst.load.as_ref()?;
    let a = (from - load_t0).max(0.0);
    let b = (to - load_t0).max(0.0);
    Some(load::due_before(l, b)? - load::due_before(l, a)?)
}

/// `1h 05m 12s` from seconds.
pub fn clock(secs: f64) -> String {
    let s = secs.max(0.0).round() as u64;
    let (h, m, s) = (s / 3600, (s / 60) % 60, s % 60);
    match (h, m) {
        (0, 0) => format!("{s}s"),
        (0, _) => format!("{m}m {s:02}s"),
        _ => format!("{h}h {m:02}m {s:02}s"),
    }
}

/// The path of a URL with `{port}` in it (for the request source).
fn url_path(url: &str) -> String {
    crate::load::parse_url(&crate::plan::substitute(url, 1))
        .map(|u| u.path_and_query)
        .unwrap_or_else(|_| "/".into())
}

/// One instance's sample at a moment: its variant's name and the point.
type Point = (String, SoakPoint);

/// Waits until `next` (the next sample's moment) in short steps, so that an interrupt is
/// seen at once; returns the moment the wait was for, or now when the loop is already late
/// (a late sample is taken at once, not made up for).
fn wait_until(next: Instant, stop: &AtomicBool) -> Instant {
    let now = Instant::now();
    if next <= now {
        return now;
    }
    while Instant::now() < next && !stop.load(Ordering::SeqCst) {
        std::thread::sleep((next - Instant::now()).min(Duration::from_millis(100)));
    }
    next
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(variant: &str, from_t: f64, to_t: f64, requests: u64, due: u64) -> SoakWindow {
        SoakWindow {
            variant: variant.into(),
            index: 2,
            segment: 0,
            from_t,
            to_t,
            warm: false,
            figures: WindowFigures {
                requests,
                due: Some(due),
                ..Default::default()
            },
            latency: None,
        }
    }

    /// Every instance short of its due requests in a whole window: the machine cannot drive
    /// the rate, said once for the window.
    #[test]
    fn a_whole_window_short_of_its_due_requests_is_behind() {
        let rows = [
            window("glibc", 20.0, 30.0, 50, 100),
            window("arena2", 20.0, 30.0, 40, 100),
        ];
        let e = behind(&rows, 2, 10.0).expect("behind");
        assert!(
            e.text.starts_with("every instance fell behind"),
            "{}",
            e.text
        );
        assert!(behind(&[window("glibc", 20.0, 30.0, 95, 100)], 2, 10.0).is_none());
    }

    /// The last window, cut short by the soak's end, still has requests in flight: it is
    /// not judged (it once said "every instance fell behind" at the end of healthy soaks).
    #[test]
    fn a_window_cut_short_by_the_end_is_not_judged_behind() {
        let rows = [
            window("glibc", 20.0, 21.0, 5, 10),
            window("arena2", 20.0, 21.0, 4, 10),
        ];
        assert!(behind(&rows, 2, 10.0).is_none());
    }

    /// A down instance is down, not behind.
    #[test]
    fn a_down_instance_is_not_behind() {
        let mut dead = window("glibc", 20.0, 30.0, 0, 100);
        dead.figures.instance_down = true;
        let rows = [dead, window("arena2", 20.0, 30.0, 100, 100)];
        assert!(behind(&rows, 2, 10.0).is_none());
    }
}
