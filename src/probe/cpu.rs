//! The CPU probe: where the workload's CPU time goes, and how much of it the allocator takes
//! (what the JNI team read from perf: 13.5% in allocation under glibc, 4.8% under
//! jemalloc).
//!
//! Before the workload exists, while memtrial's spawner waits at its gate, the probe
//! attaches perf's `cpu-clock` timer to the spawner with `inherit` (see
//! [`crate::linux::perf`]): every process and thread of the workload is sampled from its
//! first instruction, at [`RATE_HZ`] per second of its CPU time. On each tick of the run's
//! clock the probe empties the rings and attributes each sample by the mapping its
//! instruction lies in (`/proc/PID/maps`, read when a process is first seen and again
//! when an address falls outside what was read):
//!
//! * the allocator: a mapping of jemalloc's, tcmalloc's or mimalloc's library, or, in
//!   libc, glibc's `malloc.c` functions (found by [`crate::linux::symbols`] from libc's
//!   full symbol table, `libc6-dbg`);
//! * the kernel (system calls and page faults, the allocator's included: without call
//!   chains they are not told apart), when the kernel lets memtrial sample it;
//! * everything else, by object.
//!
//! Samples of a process that ended before its mappings were read are counted as
//! unattributed; the share is taken of the attributed ones.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::{Probe, RunEnd, Tick};
use crate::linux::maps::Mapping;
use crate::linux::perf::{Sample, Sampling, KERNEL_START};
use crate::linux::symbols::MallocCode;
use crate::record::{Absence, CpuPlace, CpuView, RunRecord};

/// The probe's name, in records and messages.
pub const NAME: &str = "cpu";

/// Samples per second of each thread's CPU time: perf's habit of 99 keeps clear of
/// lockstep with timers at round rates.
pub const RATE_HZ: u64 = 99;

/// The place samples in the kernel are counted under.
const KERNEL: &str = "[kernel]";

/// Allocator libraries, by the start of their file name.
const ALLOCATOR_LIBS: &[&str] = &["libjemalloc", "libtcmalloc", "libmimalloc"];

/// What one mapping's samples count as.
#[derive(Debug, Clone)]
enum Class {
    /// A whole object: allocator or not.
    Object { name: String, allocator: bool },
    /// glibc's libc: its `malloc.c` is the allocator, the rest not.
    Libc {
        name: String,
        code: Option<Arc<MallocCode>>,
    },
}

/// One process's mappings, as last read, each with its class.
struct ProcessMaps {
    exec_generation: u32,
    maps: Vec<(Mapping, Class)>,
}

/// Where the gate's closure leaves the sampling it attached to the spawner (with its PID),
/// or why it could not.
type Gate = Arc<Mutex<Option<Result<(Sampling, i32), String>>>>;

pub struct CpuProbe {
    attached: Gate,
    sampling: Option<Sampling>,
    spawner: Option<u32>,
    failure: Option<String>,
    buf: Vec<Sample>,
    processes: HashMap<u32, ProcessMaps>,
    /// glibc's allocator code per libc file (device and inode), or why it is unknown.
    libcs: HashMap<(String, u64), Result<Arc<MallocCode>, String>>,
    places: BTreeMap<String, (u64, bool)>,
    view: CpuView,
    spent: f64,
}

impl Default for CpuProbe {
    fn default() -> Self {
        Self::new()
    }
}

impl CpuProbe {
    pub fn new() -> CpuProbe {
        CpuProbe {
            attached: Arc::new(Mutex::new(None)),
            sampling: None,
            spawner: None,
            failure: None,
            buf: Vec::new(),
            processes: HashMap::new(),
            libcs: HashMap::new(),
            places: BTreeMap::new(),
            view: CpuView {
                rate_hz: RATE_HZ,
                ..Default::default()
            },
            spent: 0.0,
        }
    }

    /// Takes the sampling the gate attached, once.
    fn take_attached(&mut self) {
        if self.sampling.is_some() || self.failure.is_some() {
            return;
        }
        let Some(got) = self.attached.lock().ok().and_then(|mut a| a.take()) else {
            return;
        };
        match got {
            Ok((s, spawner)) => {
                self.view.kernel_included = s.kernel_included;
                self.spawner = u32::try_from(spawner).ok();
                self.sampling = Some(s);
            }
            Err(e) => self.failure = Some(e),
        }
    }

    /// Empties the rings and attributes every sample.
    fn drain(&mut self, members: &[super::Member]) {
        let Some(s) = self.sampling.as_mut() else {
            return;
        };
        let mut buf = std::mem::take(&mut self.buf);
        buf.clear();
        self.view.lost += s.drain(&mut buf);
        // A process that exec'd since its mappings were read has others now.
        for m in members {
            let pid = m.pid as u32;
            if self
                .processes
                .get(&pid)
                .is_some_and(|p| p.exec_generation != m.exec_generation)
            {
                self.processes.remove(&pid);
            }
        }
        let mut reread: Vec<u32> = Vec::new();
        for x in &buf {
            if Some(x.pid) == self.spawner {
                continue;
            }
            self.view.samples += 1;
            if x.ip >= KERNEL_START {
                self.view.kernel += 1;
                self.count(KERNEL.to_string(), false);
                continue;
            }
            let mut place = self.place(x.pid, x.ip);
            if place.is_none() && !reread.contains(&x.pid) {
                // A library loaded since, or a process not read yet: read once per drain.
                reread.push(x.pid);
                let generation = members
                    .iter()
                    .find(|m| m.pid as u32 == x.pid)
                    .map_or(0, |m| m.exec_generation);
                self.read_maps(x.pid, generation);
                place = self.place(x.pid, x.ip);
            }
            match place {
                Some((name, allocator)) => {
                    if allocator {
                        self.view.allocator += 1;
                    }
                    self.count(name, allocator);
                }
                None => self.view.unattributed += 1,
            }
        }
        self.buf = buf;
    }

    fn count(&mut self, name: String, allocator: bool) {
        let e = self.places.entry(name).or_insert((0, allocator));
        e.0 += 1;
    }

    /// The place of `ip` in `pid`, from the mappings last read.
    fn place(&self, pid: u32, ip: u64) -> Option<(String, bool)> {
        let p = self.processes.get(&pid)?;
        let (m, class) = p.maps.iter().find(|(m, _)| ip >= m.start && ip < m.end)?;
        Some(match class {
            Class::Object { name, allocator } => (name.clone(), *allocator),
            Class::Libc { name, code } => match code {
                Some(c) if c.contains_offset(ip - m.start + m.offset) => {
                    (format!("{name} (malloc.c)"), true)
                }
                _ => (name.clone(), false),
            },
        })
    }

    fn read_maps(&mut self, pid: u32, exec_generation: u32) {
        let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else {
            return;
        };
        let Ok(maps) = crate::linux::maps::parse_maps(&text) else {
            return;
        };
        let mut classed = Vec::new();
        for m in maps.into_iter().filter(|m| m.perms.contains('x')) {
            let class = self.class_of(pid, &m);
            classed.push((m, class));
        }
        self.processes.insert(
            pid,
            ProcessMaps {
                exec_generation,
                maps: classed,
            },
        );
    }

    fn class_of(&mut self, pid: u32, m: &Mapping) -> Class {
        let name = match m.path.as_deref() {
            None => "[anonymous: JIT code]".to_string(),
            Some(p) => p.rsplit('/').next().unwrap_or(p).to_string(),
        };
        if ALLOCATOR_LIBS.iter().any(|l| name.starts_with(l)) {
            return Class::Object {
                name,
                allocator: true,
            };
        }
        if !is_libc(&name) {
            return Class::Object {
                name,
                allocator: false,
            };
        }
        let key = (m.dev.clone(), m.inode);
        let code = self
            .libcs
            .entry(key)
            .or_insert_with(|| {
                // The very file mapped (even in another mount namespace), else its path.
                let direct = format!("/proc/{pid}/map_files/{:x}-{:x}", m.start, m.end);
                let path = m.path.clone().unwrap_or_default();
                std::fs::read(&direct)
                    .or_else(|_| std::fs::read(format!("/proc/{pid}/root{path}")))
                    .map_err(|e| format!("{path}: {e}"))
                    .and_then(|bytes| crate::linux::symbols::glibc_malloc_code(&bytes, &path))
                    .map(Arc::new)
            })
            .clone();
        match code {
            Ok(c) => {
                self.view.note.get_or_insert_with(|| {
                    format!(
                        "glibc's allocator code (malloc.c's functions) found in {} from the \
                         symbols in {}",
                        name,
                        c.symbols_from.display()
                    )
                });
                Class::Libc {
                    name,
                    code: Some(c),
                }
            }
            Err(e) => {
                self.view.note.get_or_insert(e);
                Class::Libc { name, code: None }
            }
        }
    }
}

/// Before an experiment: can this memtrial sample at all? Attaches to itself for a moment;
/// the note says how the runs will be sampled, the error what is missing.
pub fn preflight() -> Result<String, String> {
    let s = Sampling::attach(std::process::id() as i32, RATE_HZ)?;
    Ok(format!(
        "cpu probe: perf's cpu-clock timer at {RATE_HZ} Hz per thread of the workload, {}; the          allocator is jemalloc's, tcmalloc's or mimalloc's library, or glibc's malloc.c (from          libc's full symbol table)",
        if s.kernel_included {
            "kernel samples included (system calls and page faults count as the kernel's)"
        } else {
            "user space only (the kernel refused kernel samples)"
        }
    ))
}

/// glibc's C library by its file name: `libc.so.6`, or `libc-2.31.so` before 2.34.
fn is_libc(name: &str) -> bool {
    name.starts_with("libc.so") || (name.starts_with("libc-") && name.ends_with(".so"))
}

impl Probe for CpuProbe {
    fn at_gate(&mut self) -> Option<Box<dyn FnOnce(i32)>> {
        let slot = Arc::clone(&self.attached);
        Some(Box::new(move |pid| {
            let got = Sampling::attach(pid, RATE_HZ).map(|s| (s, pid));
            if let Ok(mut a) = slot.lock() {
                *a = Some(got);
            }
        }))
    }

    fn observe(&mut self, tick: &Tick) {
        let started = Instant::now();
        self.take_attached();
        // Every process seen gets its mappings read while it lives.
        for m in tick.members {
            let pid = m.pid as u32;
            if self.sampling.is_some()
                && Some(pid) != self.spawner
                && self
                    .processes
                    .get(&pid)
                    .is_none_or(|p| p.exec_generation != m.exec_generation)
            {
                self.read_maps(pid, m.exec_generation);
            }
        }
        self.drain(tick.members);
        self.spent += started.elapsed().as_secs_f64();
    }

    fn finish(mut self: Box<Self>, _end: &RunEnd, record: &mut RunRecord) {
        let started = Instant::now();
        self.take_attached();
        self.drain(&[]);
        self.spent += started.elapsed().as_secs_f64();
        let failure = match (&self.sampling, self.failure.take()) {
            (_, Some(e)) => Some(e),
            (None, None) => Some(
                "this backend starts the workload without memtrial's spawner, so nothing \
                 could attach before it ran"
                    .to_string(),
            ),
            (Some(_), None) if self.view.samples == 0 => Some(
                "no samples: the workload used less CPU than one sample's period (10 ms at 99 \
                 Hz)"
                .to_string(),
            ),
            _ => None,
        };
        if let Some(reason) = failure {
            record.inside.absent.push(Absence {
                probe: NAME.into(),
                reason,
            });
            return;
        }
        let mut places: Vec<CpuPlace> = self
            .places
            .iter()
            .map(|(name, (samples, allocator))| CpuPlace {
                name: name.clone(),
                samples: *samples,
                allocator: *allocator,
            })
            .collect();
        places.sort_by(|a, b| b.samples.cmp(&a.samples).then(a.name.cmp(&b.name)));
        places.truncate(CpuView::PLACES);
        self.view.places = places;
        self.view.own_seconds = self.spent;
        record.inside.cpu = Some(self.view.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libc_is_known_by_its_names() {
        assert!(is_libc("libc.so.6"));
        assert!(is_libc("libc-2.31.so"));
        assert!(!is_libc("libcrypto.so.3"));
        assert!(!is_libc("libc++.so.1"));
    }
}
