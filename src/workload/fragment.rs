//! Sidekiq-style heap fragmentation workload (std only, no `unsafe`).
//!
//! Every worker thread allocates objects with log-uniform sizes in
//! `min_size..=max_size` through the global allocator (the system `malloc`,
//! so `LD_PRELOAD` / `MALLOC_ARENA_MAX` apply) and touches one byte per 4 KiB
//! page plus the last byte, so the memory is really resident.
//!
//! * **Working set** - each thread keeps a ring of `live_objects` short-lived
//!   objects; every new object evicts a random old one.
//! * **Bursts** - threads are split into `BURST_LANES` lanes; in each lane a
//!   token rotates and the token holder lets its working set grow by
//!   `BURST_FACTOR * live_objects` objects (a "big job"), then frees the whole
//!   burst at once and passes the token on. At any moment only a few threads
//!   are bursting, but over the run every thread bursts.
//! * **Survivors** - a `survivor_fraction` of all objects (including those
//!   allocated mid-burst) is kept until the end of the run, scattered between
//!   short-lived objects.
//! * **Cross-thread frees** - `CROSS_THREAD_FRACTION` of dying objects are
//!   handed to the neighbour thread through a `Mutex<Vec<_>>` and freed there.
//!
//! Why glibc ends up largest: with 16 threads on a 2-core box glibc gives each
//! thread its own arena (up to 8 x cores = 16), so each arena grows to the size
//! of its own thread's burst and keeps it: survivors allocated during a burst
//! sit near the top of the arena and block trimming, and glibc never returns
//! free memory in the middle of a heap. The footprint becomes the *sum* of the
//! per-thread peaks, whereas allocators that share memory between threads
//! (tcmalloc's central heap, a single glibc arena) or purge freed pages
//! (jemalloc, mimalloc) stay closer to the number of bursts in flight.
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// Extra objects allocated by a bursting thread, as a multiple of `live_objects`.
const BURST_FACTOR: usize = 40;
/// Number of threads that may be bursting at the same time.
const BURST_LANES: usize = 4;
/// Fraction of dying objects that are freed by the neighbour thread.
const CROSS_THREAD_FRACTION: f64 = 0.3;

pub struct FragmentConfig {
    /// Worker threads.
    pub threads: usize,
    /// Run for this long ...
    pub duration: Option<Duration>,
    /// ... or this many allocations per thread (exactly one of the two is `Some`).
    pub iterations: Option<u64>,
    /// Smallest object in bytes.
    pub min_size: usize,
    /// Largest object in bytes.
    pub max_size: usize,
    /// Fraction (0..=1) of objects kept alive until the end of the run.
    pub survivor_fraction: f64,
    /// Size of each thread's short-lived working set (ring).
    pub live_objects: usize,
    pub seed: u64,
}

impl Default for FragmentConfig {
    /// Tuned so that, on a 2-core box, plain glibc malloc shows the largest
    /// peak and mean RSS (about 1 GB peak, ~3 s wall).
    fn default() -> Self {
        FragmentConfig {
            threads: 16,
            duration: None,
            iterations: Some(800_000),
            min_size: 16,
            max_size: 16 * 1024,
            survivor_fraction: 0.001,
            live_objects: 500,
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

/// SplitMix64: a small, seedable generator (the workloads need no cryptographic quality).
pub(super) struct Rng(pub(super) u64);
impl Rng {
    pub(super) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub(super) fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
    pub(super) fn below(&mut self, n: usize) -> usize {
        (((self.next() >> 32) * n as u64) >> 32) as usize
    }
}

/// Allocate `size` bytes with the global (system) allocator and touch the first byte,
/// one byte per 4 KiB page and the last byte, so the pages are really resident.
/// No full memset: the allocator decides where the bytes come from, we only fault them in.
fn alloc_touched(size: usize) -> Obj {
    let mut v: Vec<u8> = Vec::with_capacity(size);
    let spare = v.spare_capacity_mut();
    let mut i = 0;
    while i < size {
        spare[i] = MaybeUninit::new(1);
        i += 4096;
    }
    spare[size - 1] = MaybeUninit::new(1);
    v
}

/// An allocated object: an empty `Vec<u8>` whose capacity is the object's size.
type Obj = Vec<u8>;

#[derive(Default)]
struct Counts {
    allocations: u64,
    bytes: u64,
    survivors: u64,
    survivor_bytes: u64,
    cross: u64,
}

struct Shared {
    inboxes: Vec<Mutex<Vec<Obj>>>,
    /// Monotonic burst counter: thread `token % threads` is the current burster.
    tokens: Vec<AtomicUsize>,
    finished: AtomicUsize,
    barrier: Barrier,
}

pub fn run(cfg: &FragmentConfig) -> FragmentSummary {
    assert!(
        cfg.duration.is_some() != cfg.iterations.is_some(),
        "exactly one of duration/iterations"
    );
    let threads = cfg.threads.max(1);
    let min = cfg.min_size.max(1);
    let max = cfg.max_size.max(min);
    let lanes = BURST_LANES.clamp(1, threads);
    let sh = Arc::new(Shared {
        inboxes: (0..threads).map(|_| Mutex::new(Vec::new())).collect(),
        tokens: (0..lanes).map(|_| AtomicUsize::new(0)).collect(),
        finished: AtomicUsize::new(0),
        barrier: Barrier::new(threads),
    });
    let start = Instant::now();
    let params = Params {
        threads,
        iterations: cfg.iterations,
        deadline: cfg.duration.map(|d| start + d),
        min,
        max,
        frac: cfg.survivor_fraction.clamp(0.0, 1.0),
        live: cfg.live_objects.max(1),
        seed: cfg.seed,
    };
    let handles: Vec<_> = (0..threads)
        .map(|tid| {
            let sh = sh.clone();
            thread::spawn(move || worker(tid, &params, &sh))
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

/// A worker's settings: the config's, clamped, with the run's end.
#[derive(Clone, Copy)]
struct Params {
    threads: usize,
    /// Allocations per thread, or else run until `deadline`.
    iterations: Option<u64>,
    deadline: Option<Instant>,
    min: usize,
    max: usize,
    /// Fraction of objects kept to the end.
    frac: f64,
    /// Size of the short-lived working set.
    live: usize,
    seed: u64,
}

/// A temporary's end: freed here or, a share of them when there are other threads, put in
/// `outbox` for the neighbour to free.
fn retire(victim: Obj, threads: usize, rng: &mut Rng, outbox: &mut Vec<Obj>) {
    if threads > 1 && rng.unit() < CROSS_THREAD_FRACTION {
        outbox.push(victim);
    } else {
        drop(victim);
    }
}

/// Frees what other threads put in thread `tid`'s inbox; how many.
fn empty_inbox(sh: &Shared, tid: usize) -> u64 {
    let got = std::mem::take(&mut *sh.inboxes[tid].lock().unwrap());
    got.len() as u64
}

fn worker(tid: usize, p: &Params, sh: &Shared) -> Counts {
    let threads = p.threads;
    let mut rng = Rng(p.seed ^ (tid as u64 + 1).wrapping_mul(0xD1B5_4A32_D192_ED03));
    let mut c = Counts::default();
    let ln_min = (p.min as f64).ln();
    let ln_span = (p.max as f64).ln() - ln_min;
    let burst_len = p.live * BURST_FACTOR;
    let mut ring: Vec<Obj> = Vec::with_capacity(p.live + 1);
    let mut burst: Vec<Obj> = Vec::with_capacity(burst_len);
    let mut survivors: Vec<Obj> = Vec::new();
    let neighbour = (tid + 1) % threads;
    let mut outbox: Vec<Obj> = Vec::new();
    let lanes = sh.tokens.len();
    let token = &sh.tokens[tid % lanes];
    let members = (threads - tid % lanes).div_ceil(lanes);
    let me = tid / lanes;
    let mut bursting = false;
    let mut i: u64 = 0;
    loop {
        if let Some(n) = p.iterations {
            if i >= n {
                break;
            }
        } else if i % 256 == 0 && Instant::now() >= p.deadline.unwrap() {
            break;
        }
        if !bursting && i % 64 == 0 && token.load(Ordering::Acquire) % members == me {
            bursting = true;
        }
        let survive = rng.unit() < p.frac;
        // log-uniform size: as many objects in 16..32 B as in 8..16 KiB
        let size = ((ln_min + ln_span * rng.unit()).exp() as usize).clamp(p.min, p.max);
        let obj = alloc_touched(size);
        c.allocations += 1;
        c.bytes += size as u64;
        if survive {
            c.survivors += 1;
            c.survivor_bytes += size as u64;
            survivors.push(obj);
        } else if bursting {
            burst.push(obj);
            if burst.len() >= burst_len {
                // The burst is over: all of its temporaries die at once.
                bursting = false;
                token.fetch_add(1, Ordering::AcqRel);
                for victim in burst.drain(..) {
                    retire(victim, threads, &mut rng, &mut outbox);
                }
            }
        } else {
            ring.push(obj);
            if ring.len() > p.live {
                let idx = rng.below(ring.len());
                retire(ring.swap_remove(idx), threads, &mut rng, &mut outbox);
            }
        }
        if i % 16 == 15 {
            if !outbox.is_empty() {
                sh.inboxes[neighbour].lock().unwrap().append(&mut outbox);
            }
            c.cross += empty_inbox(sh, tid);
        }
        i += 1;
    }
    if bursting {
        token.fetch_add(1, Ordering::AcqRel);
    }
    drop(ring);
    drop(burst);
    if !outbox.is_empty() {
        sh.inboxes[neighbour].lock().unwrap().append(&mut outbox);
    }
    // Keep the burst token moving while slower threads finish.
    sh.finished.fetch_add(1, Ordering::AcqRel);
    while sh.finished.load(Ordering::Acquire) < threads {
        let t = token.load(Ordering::Acquire);
        if t % members == me {
            let _ = token.compare_exchange(t, t + 1, Ordering::AcqRel, Ordering::Acquire);
        }
        c.cross += empty_inbox(sh, tid);
        thread::sleep(Duration::from_millis(1));
    }
    sh.barrier.wait();
    c.cross += empty_inbox(sh, tid);
    sh.barrier.wait();
    drop(survivors);
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny(threads: usize) -> FragmentConfig {
        FragmentConfig {
            threads,
            duration: None,
            iterations: Some(2000),
            min_size: 16,
            max_size: 8192,
            survivor_fraction: 0.05,
            live_objects: 10,
            seed: 7,
        }
    }

    #[test]
    fn counts_are_consistent() {
        let s = run(&tiny(2));
        assert_eq!(s.threads, 2);
        assert_eq!(s.allocations, 4000);
        assert!(s.survivors > 0 && s.survivors < s.allocations);
        assert!(s.survivor_bytes >= s.survivors * 16 && s.survivor_bytes <= s.survivors * 8192);
        assert!(
            s.bytes_allocated >= s.allocations * 16 && s.bytes_allocated <= s.allocations * 8192
        );
        assert!(s.survivor_bytes < s.bytes_allocated);
        assert!(s.cross_thread_frees > 0);
        assert!(s.cross_thread_frees <= s.allocations - s.survivors);
    }

    #[test]
    fn deterministic_counts_for_same_seed() {
        let a = run(&tiny(2));
        let b = run(&tiny(2));
        assert_eq!(a.bytes_allocated, b.bytes_allocated);
        assert_eq!(a.survivors, b.survivors);
        assert_eq!(a.survivor_bytes, b.survivor_bytes);
    }

    #[test]
    fn single_thread_has_no_cross_frees() {
        let s = run(&tiny(1));
        assert_eq!(s.allocations, 2000);
        assert_eq!(s.cross_thread_frees, 0);
    }

    #[test]
    fn duration_mode_stops() {
        let mut c = tiny(2);
        c.iterations = None;
        c.duration = Some(Duration::from_millis(50));
        let s = run(&c);
        assert!(s.allocations > 0);
        assert!(s.elapsed < Duration::from_secs(5));
    }
}
