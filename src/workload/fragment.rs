//! Sidekiq-style fragmentation workload (std only).
#![allow(clippy::type_complexity)]
use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};

pub struct FragmentConfig {
    pub threads: usize,
    pub duration: Option<Duration>,
    pub iterations: Option<u64>,
    pub min_size: usize,
    pub max_size: usize,
    pub survivor_fraction: f64,
    pub live_objects: usize,
    pub seed: u64,
}

impl Default for FragmentConfig {
    fn default() -> Self {
        FragmentConfig {
            threads: 16,
            duration: None,
            iterations: Some(100_000),
            min_size: 16,
            max_size: 64 * 1024,
            survivor_fraction: 0.02,
            live_objects: 2_000,
            seed: 42,
        }
    }
}

#[derive(Debug, Clone)]
pub struct FragmentSummary {
    pub threads: usize,
    pub allocations: u64,
    pub bytes_allocated: u64,
    pub survivors: u64,
    pub survivor_bytes: u64,
    pub cross_thread_frees: u64,
    pub elapsed: Duration,
}

fn knob(name: &str, def: f64) -> f64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(def)
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
    fn below(&mut self, n: usize) -> usize {
        (((self.next() >> 32) * n as u64) >> 32) as usize
    }
}

fn alloc_touched(size: usize) -> Box<[u8]> {
    let mut v = vec![0u8; size].into_boxed_slice();
    let mut i = 0;
    while i < size {
        v[i] = 1;
        i += 4096;
    }
    v[size - 1] = 1;
    v
}

#[derive(Default)]
struct Counts {
    allocations: u64,
    bytes: u64,
    survivors: u64,
    survivor_bytes: u64,
    cross: u64,
}

struct Params {
    cycle: u64,
    burst: f64,
    xfrac: f64,
    duty: f64,
    survmax: f64,
}

pub fn run(cfg: &FragmentConfig) -> FragmentSummary {
    assert!(
        cfg.duration.is_some() != cfg.iterations.is_some(),
        "exactly one of duration/iterations"
    );
    let threads = cfg.threads.max(1);
    let min = cfg.min_size.max(1);
    let max = cfg.max_size.max(min);
    let p = Params {
        cycle: knob("FW_CYCLE", 20000.0) as u64,
        burst: knob("FW_BURST", 8.0),
        xfrac: knob("FW_XFRAC", 0.1),
        duty: knob("FW_DUTY", 1.0),
        survmax: knob("FW_SURVMAX", 1e18),
    };
    let inboxes: Arc<Vec<Mutex<Vec<Box<[u8]>>>>> =
        Arc::new((0..threads).map(|_| Mutex::new(Vec::new())).collect());
    let barrier = Arc::new(Barrier::new(threads));
    let start = Instant::now();
    let p = Arc::new(p);
    let handles: Vec<_> = (0..threads)
        .map(|tid| {
            let inboxes = inboxes.clone();
            let barrier = barrier.clone();
            let p = p.clone();
            let iterations = cfg.iterations;
            let deadline = cfg.duration.map(|d| start + d);
            let frac = cfg.survivor_fraction.clamp(0.0, 1.0);
            let live = cfg.live_objects.max(1);
            let seed = cfg.seed;
            thread::spawn(move || {
                worker(
                    tid, threads, &inboxes, &barrier, &p, iterations, deadline, min, max, frac,
                    live, seed,
                )
            })
        })
        .collect();
    let mut total = Counts::default();
    for h in handles {
        let c = h.join().expect("worker panicked");
        total.allocations += c.allocations;
        total.bytes += c.bytes;
        total.survivors += c.survivors;
        total.survivor_bytes += c.survivor_bytes;
        total.cross += c.cross;
    }
    FragmentSummary {
        threads,
        allocations: total.allocations,
        bytes_allocated: total.bytes,
        survivors: total.survivors,
        survivor_bytes: total.survivor_bytes,
        cross_thread_frees: total.cross,
        elapsed: start.elapsed(),
    }
}

#[allow(clippy::too_many_arguments)]
fn worker(
    tid: usize,
    threads: usize,
    inboxes: &[Mutex<Vec<Box<[u8]>>>],
    barrier: &Barrier,
    p: &Params,
    iterations: Option<u64>,
    deadline: Option<Instant>,
    min: usize,
    max: usize,
    frac: f64,
    live: usize,
    seed: u64,
) -> Counts {
    let mut rng = Rng(seed ^ (tid as u64 + 1).wrapping_mul(0xD1B5_4A32_D192_ED03));
    let mut c = Counts::default();
    let ln_min = (min as f64).ln();
    let ln_span = (max as f64).ln() - ln_min;
    let mut ring: Vec<Box<[u8]>> = Vec::with_capacity(live * p.burst.max(1.0) as usize + 1);
    let mut survivors: Vec<Box<[u8]>> = Vec::new();
    let neighbour = (tid + 1) % threads;
    let offset = p.cycle * tid as u64 / threads as u64;
    let mut outbox: Vec<Box<[u8]>> = Vec::new();
    let mut i: u64 = 0;
    loop {
        if let Some(n) = iterations {
            if i >= n {
                break;
            }
        } else if i % 256 == 0 && Instant::now() >= deadline.unwrap() {
            break;
        }
        // phase: triangular working-set target, shifted per thread
        let pos = ((i + offset) % p.cycle.max(1)) as f64 / p.cycle.max(1) as f64;
        let q = pos / p.duty;
        let tri = if q >= 1.0 {
            0.0
        } else if q < 0.5 {
            q * 2.0
        } else {
            2.0 - q * 2.0
        };
        let target = ((live as f64) * (1.0 + (p.burst - 1.0) * tri)) as usize;
        let survive = rng.unit() < frac;
        let span = if survive {
            ((p.survmax.min(max as f64)).ln() - ln_min).max(0.0)
        } else {
            ln_span
        };
        let size = ((ln_min + span * rng.unit()).exp() as usize).clamp(min, max);
        let obj = alloc_touched(size);
        c.allocations += 1;
        c.bytes += size as u64;
        if survive {
            c.survivors += 1;
            c.survivor_bytes += size as u64;
            survivors.push(obj);
        } else {
            ring.push(obj);
        }
        while ring.len() > target.max(1) {
            let idx = rng.below(ring.len());
            let victim = ring.swap_remove(idx);
            if threads > 1 && rng.unit() < p.xfrac {
                outbox.push(victim);
            } else {
                drop(victim);
            }
        }
        if i % 64 == 63 {
            if !outbox.is_empty() {
                inboxes[neighbour].lock().unwrap().append(&mut outbox);
            }
            let got = std::mem::take(&mut *inboxes[tid].lock().unwrap());
            c.cross += got.len() as u64;
            drop(got);
        }
        i += 1;
    }
    if !outbox.is_empty() {
        inboxes[neighbour].lock().unwrap().append(&mut outbox);
    }
    barrier.wait();
    let got = std::mem::take(&mut *inboxes[tid].lock().unwrap());
    c.cross += got.len() as u64;
    drop(got);
    drop(ring);
    barrier.wait();
    drop(survivors);
    c
}
