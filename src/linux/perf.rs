//! Sampling where a process tree spends its CPU, with perf events (through the
//! `perf-event2` crate: a maintained wrapper of `perf_event_open` with the ring buffer and
//! its record parser, which spares hand-written `mmap` and record parsing).
//!
//! One software `cpu-clock` event per online CPU, attached to one process with `inherit`:
//! every thread and child the process starts afterwards is sampled too, into the event's
//! ring on the CPU it ran on. `cpu-clock` is a timer, not a hardware counter, so it works
//! in VMs without a PMU. Per-task events must be per CPU to be read through a ring
//! (the kernel refuses to map an inherited event opened for any CPU).

use std::io;

use perf_event::events::Software;
use perf_event::{Builder, SampleFlag, Sampler};

/// One sample: which process and thread, at which instruction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    pub pid: u32,
    pub tid: u32,
    pub ip: u64,
}

/// Instruction addresses at or above this are the kernel's (x86-64 and arm64 alike).
pub const KERNEL_START: u64 = 0xffff_8000_0000_0000;

/// Ring bytes per CPU: at 24 bytes a sample (header, IP, PID/TID), about 10,000 samples,
/// 100 s of one busy thread at 99 Hz between two reads.
const RING_BYTES: usize = 256 << 10;

/// Sampling of one process and what it starts.
pub struct Sampling {
    samplers: Vec<Sampler>,
    /// Samples taken in the kernel too (root, `CAP_PERFMON`, or `perf_event_paranoid` ≤ 1);
    /// else user space only.
    pub kernel_included: bool,
    pub rate_hz: u64,
}

/// `kernel.perf_event_paranoid`, when readable.
pub fn paranoid() -> Option<i32> {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The online CPUs, from `/sys/devices/system/cpu/online` (`0-3,5`).
pub fn online_cpus() -> Vec<usize> {
    std::fs::read_to_string("/sys/devices/system/cpu/online")
        .ok()
        .and_then(|t| crate::linux::cgroup::container::cpu_list(&t).ok())
        .map(|l| l.into_iter().map(|c| c as usize).collect())
        .unwrap_or_default()
}

impl Sampling {
    /// Attaches to `pid` at `rate_hz` samples per second of each thread's CPU time. Kernel
    /// samples are asked for first and left out when the kernel refuses them.
    pub fn attach(pid: i32, rate_hz: u64) -> Result<Sampling, String> {
        let cpus = online_cpus();
        if cpus.is_empty() {
            return Err("no online CPUs found in /sys/devices/system/cpu/online".into());
        }
        match Self::open(pid, rate_hz, &cpus, true) {
            Ok(s) => Ok(s),
            Err(e) if permission(&e) => {
                Self::open(pid, rate_hz, &cpus, false).map_err(|e| explain(&e))
            }
            Err(e) => Err(explain(&e)),
        }
    }

    fn open(pid: i32, rate_hz: u64, cpus: &[usize], kernel: bool) -> io::Result<Sampling> {
        let mut samplers = Vec::with_capacity(cpus.len());
        for &cpu in cpus {
            let counter = Builder::new(Software::CPU_CLOCK)
                .observe_pid(pid)
                .one_cpu(cpu)
                .inherit(true)
                .sample_frequency(rate_hz)
                .sample(SampleFlag::IP | SampleFlag::TID)
                .exclude_kernel(!kernel)
                .exclude_hv(true)
                .enabled(true)
                .build()?;
            samplers.push(counter.sampled(RING_BYTES)?);
        }
        Ok(Sampling {
            samplers,
            kernel_included: kernel,
            rate_hz,
        })
    }

    /// Takes every sample waiting in the rings into `out`; returns the samples the kernel
    /// reports lost (a ring that filled up between two reads).
    pub fn drain(&mut self, out: &mut Vec<Sample>) -> u64 {
        use perf_event::data::Record;
        let mut lost = 0;
        for s in &mut self.samplers {
            while let Some(r) = s.next_record() {
                match r.parse_record() {
                    Ok(Record::Sample(x)) => {
                        if let (Some(ip), Some(pid), Some(tid)) = (x.ip(), x.pid(), x.tid()) {
                            out.push(Sample { pid, tid, ip });
                        }
                    }
                    Ok(Record::Lost(l)) => lost += l.lost,
                    Ok(Record::LostSamples(l)) => lost += l.lost,
                    _ => {}
                }
            }
        }
        lost
    }
}

fn permission(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EACCES) | Some(libc::EPERM))
}

/// What went wrong, and what to do about it.
fn explain(e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::EACCES) | Some(libc::EPERM) => format!(
            "perf events are not permitted ({e}): kernel.perf_event_paranoid is {}; run \
             memtrial as root (or with CAP_PERFMON), or allow user-space sampling of your own \
             processes with `sysctl kernel.perf_event_paranoid=2`",
            paranoid().map_or("unreadable".into(), |p| p.to_string())
        ),
        Some(libc::ENOENT) | Some(libc::ENOSYS) | Some(libc::EOPNOTSUPP) | Some(libc::ENODEV) => {
            format!(
                "this kernel offers no cpu-clock perf event ({e}): it needs CONFIG_PERF_EVENTS \
                 (a container may also block perf_event_open with its seccomp profile)"
            )
        }
        Some(libc::EMFILE) => format!(
            "out of file descriptors for the perf events (one per CPU): {e}; raise `ulimit -n`"
        ),
        _ => format!("perf_event_open failed: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_busy_child_is_sampled_from_its_first_instruction() {
        // This test process forks a child that spins; the events attached to the child
        // before it runs see its samples (root, or paranoid ≤ 2 for user space).
        // SAFETY: geteuid takes nothing and cannot fail.
        if paranoid().is_none_or(|p| p > 2) && unsafe { libc::geteuid() } != 0 {
            return;
        }
        let mut child = std::process::Command::new("sh")
            .args([
                "-c",
                "read x; i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done",
            ])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut s = Sampling::attach(child.id() as i32, 999).expect("attach");
        use std::io::Write;
        child.stdin.take().unwrap().write_all(b"go\n").unwrap();
        child.wait().unwrap();
        let mut out = Vec::new();
        s.drain(&mut out);
        assert!(out.len() > 20, "{} samples", out.len());
        assert!(out.iter().all(|x| x.pid == child.id()));
    }
}
