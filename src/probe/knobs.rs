//! Did a variant's knobs take effect inside the process? The verifier asks this of every
//! process it checks, after its environment and preload:
//!
//! * `thp:off`: `THP_enabled: 0` in `/proc/PID/status` (kernel 5.0+);
//! * tunables (and `thp:heap` on glibc, which is `hugetlb=1`): glibc's own settings read
//!   from the process's memory ([`crate::linux::glibc_malloc`]) against the values set;
//! * `thp:heap`: a mapping madvised for huge pages (`hg` in `smaps`' `VmFlags`): the
//!   allocator asked for them.
//!
//! What cannot be read is "set, not verifiable", with why — never verified.

use std::collections::HashMap;

use crate::linux::glibc_malloc::{self, TunableCheck, Unread};
use crate::linux::proc::{self, ProcError};
use crate::plan::{HeapThp, Knobs};

/// What the knobs of one process came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum KnobVerdict {
    /// Nothing to check.
    None,
    /// Not decidable yet (malloc not initialised, no madvised mapping yet): why.
    Pending(String),
    /// Every knob took effect: what showed it.
    Took(Vec<String>),
    /// A knob did not take effect: why.
    NotEffective(String),
    /// Some knobs took effect (what showed it), the others cannot be verified (why).
    NotVerifiable(Vec<String>, String),
}

/// Reads of `smaps` per process before a `thp:heap` without a madvised mapping is given up
/// as not verifiable.
const SMAPS_READS: u32 = 20;

/// Checks the knobs of one variant in each process of a run.
#[derive(Debug, Default)]
pub(crate) struct KnobChecker {
    knobs: Knobs,
    /// `smaps` reads so far, per process.
    smaps_reads: HashMap<i32, u32>,
}

impl KnobChecker {
    pub(crate) fn new(knobs: &Knobs) -> KnobChecker {
        KnobChecker {
            knobs: knobs.clone(),
            smaps_reads: HashMap::new(),
        }
    }

    /// Whether there is anything to check in a process (trimming is checked from the
    /// probe's own account at the end of the run).
    pub(crate) fn any(&self) -> bool {
        self.knobs.thp_off || self.knobs.heap_thp.is_some() || !self.knobs.tunables.is_empty()
    }

    /// The knobs in process `pid`, whose `malloc` is answered by `allocator` (as the
    /// verifier named it).
    pub(crate) fn check(&mut self, pid: i32, allocator: &str) -> Result<KnobVerdict, ProcError> {
        if !self.any() {
            return Ok(KnobVerdict::None);
        }
        let mut found = Found::default();
        for step in [
            Self::check_thp_off,
            Self::check_tunables,
            Self::check_heap_thp,
        ] {
            if let Some(verdict) = step(self, pid, allocator, &mut found)? {
                return Ok(verdict);
            }
        }
        let Found { took, unverifiable } = found;
        Ok(if unverifiable.is_empty() {
            KnobVerdict::Took(took)
        } else {
            KnobVerdict::NotVerifiable(took, unverifiable.join("; "))
        })
    }

    /// thp:off: THP_enabled 0 in its status.
    fn check_thp_off(
        &mut self,
        pid: i32,
        _allocator: &str,
        found: &mut Found,
    ) -> Result<Option<KnobVerdict>, ProcError> {
        if !self.knobs.thp_off {
            return Ok(None);
        }
        match proc::read_status(pid)?.thp_enabled {
            Some(false) => found.took.push("THP_enabled: 0".to_string()),
            Some(true) => {
                return Ok(Some(KnobVerdict::NotEffective(
                    "THP_enabled: 1 in its status: transparent huge pages are on for it".into(),
                )))
            }
            None => found
                .unverifiable
                .push("thp:off: this kernel's status has no THP_enabled line (5.0+)".into()),
        }
        Ok(None)
    }

    /// glibc's tunables, as its malloc holds them.
    fn check_tunables(
        &mut self,
        pid: i32,
        allocator: &str,
        found: &mut Found,
    ) -> Result<Option<KnobVerdict>, ProcError> {
        if self.knobs.tunables.is_empty() {
            return Ok(None);
        }
        let glibc = allocator.starts_with("glibc");
        if !glibc && !allocator.starts_with("unknown") {
            return Ok(Some(KnobVerdict::NotEffective(format!(
                "glibc's tunables are set, but {allocator} answers malloc"
            ))));
        }
        match glibc_malloc::read(pid) {
            Ok(p) => {
                for t in &self.knobs.tunables {
                    match glibc_malloc::check_tunable(&t.name, t.value, &p) {
                        TunableCheck::Took(what) => found.took.push(what),
                        // glibc sets its initialised flag before it applies the
                        // tunables, and hugetlb's reads sysfs meanwhile: a read in that
                        // window (seen once in the suite) sees thp_pagesize 0 on a
                        // host in madvise mode, which glibc never leaves it at.
                        TunableCheck::Differs(_)
                            if t.name == "hugetlb"
                                && t.value == 1
                                && p.thp_pagesize == Some(0)
                                && crate::linux::thp::host_mode()
                                    .is_some_and(|m| m.is_madvise()) =>
                        {
                            return Ok(Some(KnobVerdict::Pending(
                                "glibc had not applied hugetlb=1 yet when it was checked".into(),
                            )))
                        }
                        TunableCheck::Differs(why) => {
                            return Ok(Some(KnobVerdict::NotEffective(format!(
                                "{} set, but {why}",
                                t.setting()
                            ))))
                        }
                        TunableCheck::NotReadable(why) => {
                            found.unverifiable.push(format!("{}: {why}", t.setting()))
                        }
                    }
                }
            }
            Err(Unread::NotYet) => {
                return Ok(Some(KnobVerdict::Pending(
                    "glibc's malloc had not initialised when it was checked".into(),
                )))
            }
            Err(Unread::Gone) => return Err(ProcError::Gone { pid }),
            Err(Unread::NoGlibc) => {
                return Ok(Some(KnobVerdict::NotEffective(
                    "glibc's tunables are set, but no glibc is mapped in it".into(),
                )))
            }
            Err(Unread::Unreadable(why)) => found
                .unverifiable
                .push(format!("glibc's settings cannot be read here: {why}")),
        }
        Ok(None)
    }

    /// thp:heap: mappings madvised for huge pages, looked for in up to SMAPS_READS reads.
    fn check_heap_thp(
        &mut self,
        pid: i32,
        allocator: &str,
        found: &mut Found,
    ) -> Result<Option<KnobVerdict>, ProcError> {
        let Some(heap) = self.knobs.heap_thp else {
            return Ok(None);
        };
        let whose = match heap {
            HeapThp::Glibc => "glibc",
            HeapThp::Jemalloc => "jemalloc",
        };
        if heap == HeapThp::Jemalloc && !allocator.starts_with("jemalloc") {
            return Ok(Some(KnobVerdict::NotEffective(format!(
                "MALLOC_CONF=thp:always is jemalloc's, but {allocator} answers malloc"
            ))));
        }
        let reads = self.smaps_reads.entry(pid).or_default();
        *reads += 1;
        let text = proc::read_proc_file(pid, "smaps")?;
        let advised = crate::linux::regions::parse_smaps(&String::from_utf8_lossy(&text))
            .map(|m| m.iter().filter(|(_, s)| s.huge_advised).count())
            .unwrap_or(0);
        if advised > 0 {
            found.took.push(format!(
                "{advised} mapping(s) madvised for huge pages (hg in smaps)"
            ));
        } else if *reads < SMAPS_READS {
            return Ok(Some(KnobVerdict::Pending(format!(
                "no mapping madvised for huge pages yet ({whose} asks when its heap grows)"
            ))));
        } else {
            found.unverifiable.push(format!(
                "no mapping madvised for huge pages in {SMAPS_READS} reads of its smaps"
            ));
        }
        Ok(None)
    }
}

/// What the knobs' checks found so far: what took, and what could not be verified.
#[derive(Default)]
struct Found {
    took: Vec<String>,
    unverifiable: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_knobs_nothing_to_check() {
        let mut k = KnobChecker::new(&Knobs::default());
        assert!(!k.any());
        assert_eq!(
            k.check(std::process::id() as i32, "glibc").unwrap(),
            KnobVerdict::None
        );
    }

    /// This test process has THP on (unless its runner turned it off): `thp:off` is then
    /// not effective in it.
    #[test]
    fn thp_off_is_read_from_the_status() {
        let me = std::process::id() as i32;
        let mut k = KnobChecker::new(&Knobs {
            thp_off: true,
            ..Default::default()
        });
        match proc::read_status(me).unwrap().thp_enabled {
            Some(true) => assert!(matches!(
                k.check(me, "glibc").unwrap(),
                KnobVerdict::NotEffective(w) if w.contains("THP_enabled: 1")
            )),
            Some(false) => assert!(matches!(
                k.check(me, "glibc").unwrap(),
                KnobVerdict::Took(_)
            )),
            None => assert!(matches!(
                k.check(me, "glibc").unwrap(),
                KnobVerdict::NotVerifiable(_, _)
            )),
        }
    }

    #[test]
    fn tunables_under_another_allocator_are_not_effective() {
        let mut k = KnobChecker::new(&Knobs {
            tunables: vec![crate::plan::Tunable {
                name: "trim_threshold".into(),
                value: 0,
            }],
            ..Default::default()
        });
        let v = k
            .check(std::process::id() as i32, "jemalloc (linked)")
            .unwrap();
        assert!(
            matches!(&v, KnobVerdict::NotEffective(w) if w.contains("jemalloc (linked) answers")),
            "{v:?}"
        );
    }
}
