//! The Ruby probe: memtrial's own script (`probe-shim/ruby/memtrial_probe.rb`, embedded)
//! is loaded into the run's Ruby processes through `RUBYOPT=-r<script>`, after the
//! variant's own options (`--yjit`). In every process one background thread appends one
//! line per interval to `<dir>/<pid>` with Ruby's own figures (`GC.stat`, and YJIT's code
//! sizes while YJIT is on); this probe reads the new lines on the run's clock and sums the
//! latest line of every live process into one series per figure.
//!
//! Lines (tab-separated):
//!
//! ```text
//! # memtrial-ruby 1  pid=<pid>  ruby=<RUBY_VERSION>  platform=<RUBY_PLATFORM>  yjit=<0|1>
//! F  <monotonic ns>  <name>=<integer>  …     one per interval
//! E  <monotonic ns>  <name>=<integer>  …     at exit
//! ```

use std::collections::BTreeSet;
use std::path::PathBuf;

use super::reports::{ProcessReports, ReportDir};
use super::{append_env, Probe, RunEnd, Tick, TickKind};
use crate::record::{Absence, FigureUnit, RunRecord, RuntimeFigure, RuntimeSeries, RuntimeView};

/// The probe's name, in records and messages; also the runtime's name in the record.
pub const NAME: &str = "ruby";

/// The script Ruby loads.
const SCRIPT: &str = include_str!("../../probe-shim/ruby/memtrial_probe.rb");

/// The header's prefix; the version of the line format follows it.
const HEADER: &str = "# memtrial-ruby 1\t";

/// At most this many distinct figures are kept: a misbehaving writer cannot grow memtrial.
const MAX_FIGURES: usize = 128;

/// What the reader of the view should know about the figures.
const NOTE: &str = "Ruby's own figures, summed over its live processes at each sample: \
    GC.stat counts slots (objects) and pages, not bytes; the *_bytes figures are malloc \
    growth since the last GC; YJIT's *_size figures are the memory of its generated code.";

/// Where the embedded script is written for Ruby: once per memtrial process.
pub(crate) fn script_path() -> Result<PathBuf, String> {
    static PATH: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();
    PATH.get_or_init(|| install_script("memtrial_probe", SCRIPT))
        .clone()
}

/// Writes one of memtrial's Ruby scripts where `RUBYOPT=-r<path>` can load it.
pub(crate) fn install_script(name: &str, text: &str) -> Result<PathBuf, String> {
    let path = super::files::install(name, "rb", text.as_bytes())?;
    // RUBYOPT is split on white space: a path with a space in it cannot be loaded.
    if path.to_string_lossy().contains(char::is_whitespace) {
        return Err(format!(
            "the probe script's path {} has white space in it, which RUBYOPT cannot \
             carry (set TMPDIR to a path without spaces)",
            path.display()
        ));
    }
    Ok(path)
}

/// The header a process writes once.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct Header {
    version: String,
    platform: String,
    yjit: bool,
}

/// One line of a report file.
#[derive(Debug, Clone, PartialEq)]
enum Record {
    Header(Header),
    /// Figures by Ruby's own name, in the order written.
    Figures(Vec<(String, u64)>),
}

/// A figure's name as Ruby spells it: short, lowercase letters, digits, `_` and `.`.
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'.')
}

/// Parses one line; `None` for anything malformed or unknown (never panics).
fn parse_record(line: &str) -> Option<Record> {
    if let Some(rest) = line.strip_prefix(HEADER) {
        let mut h = Header::default();
        for field in rest.split('\t') {
            match field.split_once('=')? {
                ("ruby", v) => h.version = v.to_string(),
                ("platform", v) => h.platform = v.to_string(),
                ("yjit", v) => h.yjit = v == "1",
                _ => {}
            }
        }
        return (!h.version.is_empty()).then_some(Record::Header(h));
    }
    let mut fields = line.split('\t');
    if !matches!(fields.next()?, "F" | "E") {
        return None;
    }
    fields.next()?.parse::<u64>().ok()?;
    let mut figures: Vec<(String, u64)> = Vec::new();
    for field in fields {
        let (k, v) = field.split_once('=')?;
        if !valid_name(k) {
            return None;
        }
        let v: u64 = v.parse().ok()?;
        match figures.iter_mut().find(|(n, _)| n == k) {
            Some(f) => f.1 = v,
            None => figures.push((k.to_string(), v)),
        }
    }
    Some(Record::Figures(figures))
}

/// What a figure counts: Ruby's `*_bytes` and YJIT's `*_size` are bytes, the rest counts.
fn unit_of(name: &str) -> FigureUnit {
    if name.ends_with("_bytes") || name.ends_with("_size") {
        FigureUnit::Bytes
    } else {
        FigureUnit::Count
    }
}

/// One process's reports.
#[derive(Debug, Default)]
struct ProcessFile {
    header: Option<Header>,
    latest: Option<Vec<(String, u64)>>,
}

impl ProcessReports for ProcessFile {
    fn line(&mut self, line: &str) -> bool {
        match parse_record(line) {
            Some(Record::Header(h)) => self.header = Some(h),
            // A line with no figure says nothing.
            Some(Record::Figures(f)) if !f.is_empty() => {
                self.latest = Some(f);
                return true;
            }
            _ => {}
        }
        false
    }
}

/// Sums each figure over the processes that report it, in the order of first appearance.
fn sum<'a>(lines: impl IntoIterator<Item = &'a [(String, u64)]>) -> Vec<(&'a str, u64)> {
    let mut out: Vec<(&str, u64)> = Vec::new();
    for line in lines {
        for (name, v) in line {
            match out.iter_mut().find(|(n, _)| n == name) {
                Some(s) => s.1 = s.1.saturating_add(*v),
                None => out.push((name, *v)),
            }
        }
    }
    out
}

/// Reads the Ruby probe's reports of one run.
pub struct RubyProbe {
    /// The processes' reports; the error says why the probe cannot run, decided before
    /// launch.
    reports: Result<ReportDir<ProcessFile>, String>,
    interval_ms: u64,
    /// Summed series per figure, in the order figures first appeared.
    series: Vec<(String, Vec<[f64; 2]>)>,
    /// Processes already looked at: (pid, start time, exec generation).
    looked: BTreeSet<(i32, u64, u32)>,
    /// Names of the executables seen in the run, to say why nothing reported.
    executables: BTreeSet<String>,
}

impl RubyProbe {
    /// A probe whose processes report into `dir` (created here) every `interval_ms`.
    pub fn new(dir: PathBuf, interval_ms: u64) -> RubyProbe {
        RubyProbe {
            reports: ReportDir::create(dir),
            interval_ms,
            series: Vec::new(),
            looked: BTreeSet::new(),
            executables: BTreeSet::new(),
        }
    }

    /// Adds a point at `t_seconds` from the latest lines of the processes in `pids`, if any
    /// of them reported since the last point.
    fn point(&mut self, t_seconds: f64, pids: &BTreeSet<i32>) {
        if let Ok(reports) = self.reports.as_mut() {
            if let Some(states) = reports.take_point(pids) {
                add_point(&mut self.series, &states, t_seconds);
            }
        }
    }

    /// Notes the executable of each process not looked at yet (one `readlink` each).
    fn look(&mut self, tick: &Tick) {
        for m in tick.members {
            if self.executables.len() >= 16
                || !self
                    .looked
                    .insert((m.pid, m.starttime_ticks, m.exec_generation))
            {
                continue;
            }
            if let Ok(exe) = std::fs::read_link(format!("/proc/{}/exe", m.pid)) {
                if let Some(name) = exe.file_name() {
                    self.executables.insert(name.to_string_lossy().into_owned());
                }
            }
        }
    }

    fn view(
        &self,
        reports: &ReportDir<ProcessFile>,
        record: &RunRecord,
    ) -> Result<RuntimeView, String> {
        let reporting: Vec<&ProcessFile> = reports
            .states()
            .filter(|f| f.header.is_some() || f.latest.is_some())
            .collect();
        if reporting.is_empty() {
            return Err(why_no_reports(record, &self.executables));
        }
        if self.series.is_empty() {
            return Err(format!(
                "{} Ruby process(es) loaded the probe but none reported a figure while the \
                 run was sampled",
                reporting.len()
            ));
        }
        let mut versions: Vec<&str> = reporting
            .iter()
            .filter_map(|f| f.header.as_ref().map(|h| h.version.as_str()))
            .collect();
        versions.sort_unstable();
        versions.dedup();
        let headers = reporting.iter().filter(|f| f.header.is_some()).count();
        let yjit = reporting
            .iter()
            .filter(|f| f.header.as_ref().is_some_and(|h| h.yjit))
            .count();
        let figures = self
            .series
            .iter()
            .filter_map(|(name, points)| {
                let last = points.last()?[1];
                let max = points.iter().map(|p| p[1]).fold(f64::MIN, f64::max);
                Some(RuntimeFigure {
                    name: name.clone(),
                    unit: unit_of(name),
                    last,
                    max,
                })
            })
            .collect();
        let series = self
            .series
            .iter()
            .map(|(name, points)| RuntimeSeries {
                name: name.clone(),
                unit: unit_of(name),
                points: points.clone(),
            })
            .collect();
        Ok(RuntimeView {
            runtime: NAME.into(),
            version: (!versions.is_empty()).then(|| versions.join("+")),
            processes: reporting.len() as u32,
            figures,
            series,
            note: Some(format!(
                "{NOTE} YJIT was on at start in {yjit} of {headers} process(es); \
                 probe interval {} ms.{}",
                self.interval_ms,
                if reporting.len() > 1 {
                    " With forked processes the sums overstate: a child's cumulative \
                     counters (count, total_*) start from its parent's, and slots shared \
                     copy-on-write count in each process."
                } else {
                    ""
                }
            )),
        })
    }
}

/// Adds a point at `t_seconds`: each figure summed over the processes' latest reports, at
/// most [`MAX_FIGURES`] distinct figures.
fn add_point(series: &mut Vec<(String, Vec<[f64; 2]>)>, states: &[&ProcessFile], t_seconds: f64) {
    let lines: Vec<&[(String, u64)]> = states.iter().filter_map(|f| f.latest.as_deref()).collect();
    for (name, v) in sum(lines) {
        let i = match series.iter().position(|(n, _)| n == name) {
            Some(i) => i,
            None if series.len() < MAX_FIGURES => {
                series.push((name.to_string(), Vec::new()));
                series.len() - 1
            }
            None => continue,
        };
        series[i].1.push([t_seconds, v as f64]);
    }
}

/// Why no process reported: what the run's processes were says which case it is.
fn why_no_reports(record: &RunRecord, executables: &BTreeSet<String>) -> String {
    let ruby: Vec<&str> = executables
        .iter()
        .filter(|e| e.starts_with("ruby"))
        .map(String::as_str)
        .collect();
    let seen: Vec<&str> = executables.iter().map(String::as_str).collect();
    if !ruby.is_empty() {
        format!(
            "Ruby ran ({}) but never loaded the probe: RUBYOPT was reset or replaced before \
             it started (a wrapper, `env -i`, or `ruby --disable=rubyopt`)",
            ruby.join(", ")
        )
    } else if !seen.is_empty() {
        format!(
            "not a Ruby program: no process of the run was ruby (seen: {}); the probe is \
             loaded by ruby through RUBYOPT",
            seen.join(", ")
        )
    } else if record.processes_seen == 0 {
        "no process of the run lived long enough to be seen".into()
    } else {
        "no process loaded the probe: not a Ruby program, or RUBYOPT was reset".into()
    }
}

impl Probe for RubyProbe {
    fn instrument(&mut self, env: &mut Vec<(String, String)>) {
        let Ok(reports) = &self.reports else {
            return;
        };
        let dir = reports.dir().display().to_string();
        match script_path() {
            Ok(script) => {
                append_env(env, "RUBYOPT", &format!("-r{}", script.display()), ' ');
                env.push(("MEMTRIAL_RUBY_PROBE_DIR".into(), dir));
                if !env.iter().any(|(k, _)| k == "MEMTRIAL_PROBE_INTERVAL_MS") {
                    env.push((
                        "MEMTRIAL_PROBE_INTERVAL_MS".into(),
                        self.interval_ms.to_string(),
                    ));
                }
            }
            Err(why) => self.reports = Err(why),
        }
    }

    fn observe(&mut self, tick: &Tick) {
        if self.reports.is_err() {
            return;
        }
        // Which programs ran is noted on every tick (short processes are seen early);
        // figures are read only on samples.
        self.look(tick);
        if tick.kind != TickKind::Sample {
            return;
        }
        if let Ok(reports) = self.reports.as_mut() {
            if let Some(states) = reports.sample(tick.members) {
                add_point(&mut self.series, &states, tick.t_seconds);
            }
        }
    }

    fn finish(mut self: Box<Self>, end: &RunEnd, record: &mut RunRecord) {
        let Some(pids) = super::reports::end_of_run(&mut self.reports, NAME, record) else {
            return;
        };
        self.point(end.t_seconds, &pids);
        let view = match &self.reports {
            Ok(reports) => self.view(reports, record),
            Err(reason) => Err(reason.clone()),
        };
        match view {
            Ok(v) => record.inside.runtimes.push(v),
            Err(reason) => record.inside.absent.push(Absence {
                probe: NAME.into(),
                reason,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAPTURED: &str = "# memtrial-ruby 1\tpid=31103\truby=3.1.7\tplatform=x86_64-linux-gnu\tyjit=1\n\
        F\t14039264450999\theap_live_slots=160204\theap_free_slots=2828\theap_allocated_pages=399\tmalloc_increase_bytes=1696\toldmalloc_increase_bytes=401280\tcount=16\tminor_gc_count=13\tmajor_gc_count=3\ttotal_allocated_objects=202748\ttotal_freed_objects=42544\tinline_code_size=85736\toutlined_code_size=65822\n\
        E\t14040892258938\theap_live_slots=234583\theap_free_slots=1997\theap_allocated_pages=579\tmalloc_increase_bytes=411992\toldmalloc_increase_bytes=411992\tcount=49\tminor_gc_count=39\tmajor_gc_count=10\ttotal_allocated_objects=2823929\ttotal_freed_objects=2589346\tinline_code_size=87964\toutlined_code_size=67233\n";

    fn figures(line: &str) -> Vec<(String, u64)> {
        match parse_record(line) {
            Some(Record::Figures(f)) => f,
            other => panic!("not a figures line: {other:?}"),
        }
    }

    #[test]
    fn captured_lines_parse() {
        let mut lines = CAPTURED.lines();
        assert_eq!(
            parse_record(lines.next().unwrap()),
            Some(Record::Header(Header {
                version: "3.1.7".into(),
                platform: "x86_64-linux-gnu".into(),
                yjit: true,
            }))
        );
        let f = figures(lines.next().unwrap());
        assert_eq!(f.len(), 12);
        assert_eq!(f[0], ("heap_live_slots".into(), 160204));
        assert_eq!(f[11], ("outlined_code_size".into(), 65822));
        let e = figures(lines.next().unwrap());
        assert_eq!(e[5], ("count".into(), 49));
    }

    #[test]
    fn unknown_keys_are_figures_and_unknown_header_fields_are_ignored() {
        let f = figures("F\t1\tcode_region_size=4096\tyjit_alloc_size=12\tnew_thing=3");
        assert_eq!(f.len(), 3);
        assert_eq!(unit_of("code_region_size"), FigureUnit::Bytes);
        assert_eq!(unit_of("malloc_increase_bytes"), FigureUnit::Bytes);
        assert_eq!(unit_of("heap_live_slots"), FigureUnit::Count);
        assert_eq!(unit_of("new_thing"), FigureUnit::Count);
        assert!(matches!(
            parse_record("# memtrial-ruby 1\tpid=1\truby=3.4.1\tgc=x"),
            Some(Record::Header(h)) if h.version == "3.4.1" && !h.yjit
        ));
        // A figure written twice keeps its last value.
        assert_eq!(figures("F\t1\tcount=1\tcount=2"), vec![("count".into(), 2)]);
        assert_eq!(figures("F\t1"), vec![]);
    }

    #[test]
    fn malformed_lines_are_refused() {
        for bad in [
            "",
            "F",
            "F\tx\tcount=1",
            "F\t-1\tcount=1",
            "F\t1\tcount",
            "F\t1\tcount=",
            "F\t1\tcount=-3",
            "F\t1\tcount=1.5",
            "F\t1\tCount=1",
            "F\t1\t=1",
            "F\t1\tcount=1\t",
            "X\t1\tcount=1",
            "# memtrial-ruby 2\tpid=1\truby=3.1.7",
            "# memtrial-ruby 1\tpid=1",
            "# memtrial-ruby 1\tpid",
            "F\t1\tcount=99999999999999999999999",
            "F\t1\tcount=1\u{0}",
            "heap_live_slots=1",
        ] {
            assert_eq!(parse_record(bad), None, "{bad:?}");
        }
        let long = format!("F\t1\t{}=1", "a".repeat(65));
        assert_eq!(parse_record(&long), None);
    }

    proptest::proptest! {
        #[test]
        fn parsing_never_panics(line in "[FE# \t=_.0-9a-z\\-]{0,60}|\\PC{0,60}") {
            let _ = parse_record(&line);
        }

        #[test]
        fn captured_lines_cut_anywhere_never_panic(cut in 0usize..CAPTURED.len()) {
            for line in CAPTURED[..cut].lines() {
                let _ = parse_record(line);
            }
        }
    }

    #[test]
    fn captured_reports_are_read_whole_lines_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let mut r: ReportDir<ProcessFile> = ReportDir::create(dir.path().join("r")).unwrap();
        let path = r.dir().join("7");
        let (head, tail) = CAPTURED.split_at(CAPTURED.len() - 40);
        std::fs::write(&path, head).unwrap();
        r.read_new();
        let pids: BTreeSet<i32> = [7].into();
        {
            let st = r.take_point(&pids).unwrap();
            assert_eq!(st[0].header.as_ref().unwrap().version, "3.1.7");
            assert_eq!(st[0].latest.as_ref().unwrap()[0].1, 160204);
        }
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        std::io::Write::write_all(&mut f, tail.as_bytes()).unwrap();
        std::io::Write::write_all(&mut f, b"garbage line\nF\t9\tcount=").unwrap();
        r.read_new();
        let st = r.take_point(&pids).unwrap();
        assert_eq!(st[0].latest.as_ref().unwrap()[0].1, 234583);
        assert_eq!(st[0].latest.as_ref().unwrap().last().unwrap().1, 67233);
    }

    #[test]
    fn figures_are_summed_over_the_processes_that_report_them() {
        let a = figures("F\t1\theap_live_slots=10\tinline_code_size=100");
        let b = figures("F\t1\theap_live_slots=5\tcount=2");
        let s = sum([a.as_slice(), b.as_slice()]);
        assert_eq!(
            s,
            vec![
                ("heap_live_slots", 15),
                ("inline_code_size", 100),
                ("count", 2)
            ]
        );
    }

    fn member(pid: i32) -> crate::probe::Member {
        crate::probe::Member {
            pid,
            ppid: 1,
            starttime_ticks: 1,
            comm: "ruby".into(),
            exec_generation: 0,
            state: 'S',
            rss_bytes: 0,
            vsz_bytes: 0,
            threads: 1,
            hwm_bytes: 0,
            peak_rss_bytes: 0,
        }
    }

    #[test]
    fn a_run_gives_a_view_with_last_and_max_of_the_sums() {
        let dir = tempfile::tempdir().unwrap();
        let mut p = Box::new(RubyProbe::new(dir.path().to_path_buf(), 1000));
        // Pids that cannot exist: the probe's look at /proc finds nothing.
        let (a, b) = (i32::MAX - 1, i32::MAX - 2);
        let write = |pid: i32, text: &str| {
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(dir.path().join(pid.to_string()))
                .unwrap();
            std::io::Write::write_all(&mut f, text.as_bytes()).unwrap();
        };
        let head = "# memtrial-ruby 1\tpid=1\truby=3.1.7\tplatform=x\tyjit=1\n";
        write(a, head);
        write(a, "F\t1\theap_live_slots=100\tinline_code_size=10\n");
        let members = [member(a)];
        fn tick(t: f64, members: &[crate::probe::Member]) -> Tick<'_> {
            Tick {
                t_seconds: t,
                start_ns: 0,
                kind: TickKind::Sample,
                members,
            }
        }
        p.observe(&tick(0.5, &members));
        write(b, head);
        write(b, "F\t2\theap_live_slots=50\tinline_code_size=20\n");
        write(a, "F\t2\theap_live_slots=300\tinline_code_size=10\n");
        let both = [member(a), member(b)];
        p.observe(&tick(1.5, &both));
        // No new line: no point.
        p.observe(&tick(2.0, &both));
        write(b, "E\t3\theap_live_slots=40\tinline_code_size=20\n");
        let mut record = RunRecord::skeleton("yjit", 0, false, String::new());
        p.finish(
            &RunEnd {
                t_seconds: 2.5,
                ..Default::default()
            },
            &mut record,
        );
        let v = record.inside.runtime("ruby").expect("a ruby view");
        assert_eq!(v.version.as_deref(), Some("3.1.7"));
        assert_eq!(v.processes, 2);
        let live = v.figure("heap_live_slots").unwrap();
        assert_eq!((live.last, live.max), (340.0, 350.0));
        assert_eq!(live.unit, FigureUnit::Count);
        let code = v.figure("inline_code_size").unwrap();
        assert_eq!(code.unit, FigureUnit::Bytes);
        assert_eq!(
            v.series[0].points,
            vec![[0.5, 100.0], [1.5, 350.0], [2.5, 340.0]]
        );
        assert!(v
            .note
            .as_deref()
            .unwrap()
            .contains("YJIT was on at start in 2 of 2"));
    }

    #[test]
    fn no_reports_is_an_absence_with_a_reason() {
        let dir = tempfile::tempdir().unwrap();
        let p = Box::new(RubyProbe::new(dir.path().to_path_buf(), 1000));
        let mut record = RunRecord::skeleton("glibc", 0, false, String::new());
        p.finish(&RunEnd::default(), &mut record);
        assert!(record.inside.runtimes.is_empty());
        assert!(record
            .inside
            .absence("ruby")
            .unwrap()
            .contains("lived long enough"));

        let ruby: BTreeSet<String> = ["ruby3.1".to_string(), "sh".to_string()].into();
        assert!(why_no_reports(&record, &ruby).contains("RUBYOPT was reset"));
        let sh: BTreeSet<String> = ["sh".to_string()].into();
        assert!(why_no_reports(&record, &sh).starts_with("not a Ruby program"));
    }

    #[test]
    fn rubyopt_gains_the_script_after_the_variant_and_the_interval_is_set_once() {
        let dir = tempfile::tempdir().unwrap();
        let mut p = RubyProbe::new(dir.path().join("ruby"), 250);
        let mut env = vec![
            ("RUBYOPT".to_string(), "--yjit".to_string()),
            ("MEMTRIAL_PROBE_INTERVAL_MS".to_string(), "250".to_string()),
        ];
        p.instrument(&mut env);
        let get = |k: &str| env.iter().filter(|(ek, _)| ek == k).collect::<Vec<_>>();
        let rubyopt = &get("RUBYOPT")[0].1;
        let script = script_path().unwrap();
        assert_eq!(rubyopt, &format!("--yjit -r{}", script.display()));
        assert_eq!(std::fs::read_to_string(script).unwrap(), SCRIPT);
        assert_eq!(get("MEMTRIAL_PROBE_INTERVAL_MS").len(), 1);
        assert_eq!(
            get("MEMTRIAL_RUBY_PROBE_DIR")[0].1,
            dir.path().join("ruby").display().to_string()
        );
        assert!(dir.path().join("ruby").is_dir());
    }
}
