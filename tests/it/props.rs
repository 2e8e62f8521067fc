//! Property tests: no parser of outside input panics, whatever it is given — arbitrary
//! text and bytes, and mutations of real captures (tests/fixtures, tests/fixtures/seeds,
//! examples/). A bounded run (256 cases per parser) is part of the suite; failures found
//! are kept in proptest-regressions/ and replayed first.

use std::path::{Path, PathBuf};

use proptest::prelude::*;

use memtrial::load::http::{Progress, ResponseParser};
use memtrial::load::Method;
use memtrial::plan::catalog::{Distro, LibraryLocator};
use memtrial::plan::PlanContext;

/// 256 cases per parser (a few seconds in all); `PROPTEST_CASES=20000` for a longer hunt.
fn config() -> ProptestConfig {
    ProptestConfig {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(256),
        ..ProptestConfig::default()
    }
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> Vec<u8> {
    let p = root().join(rel);
    std::fs::read(&p).unwrap_or_else(|e| panic!("seed {}: {e}", p.display()))
}

fn text(rel: &str) -> String {
    String::from_utf8_lossy(&read(rel)).into_owned()
}

/// Pieces that tend to break parsers: separators, huge and negative numbers, units,
/// control characters, brackets and quotes, non-ASCII.
const TOKENS: &[&str] = &[
    "",
    "\n",
    "\r\n",
    "\0",
    "=",
    ":",
    " ",
    "\t",
    "-",
    ",",
    "0",
    "-1",
    "1e300",
    "1e-300",
    "NaN",
    "inf",
    "18446744073709551616",
    "99999999999999999999999999",
    "4294967295",
    "0-4294967295",
    "max",
    " kB",
    "(deleted)",
    "0x",
    "ffffffffffffffff",
    "[",
    "]",
    "{",
    "}",
    "\"",
    "'",
    "\\",
    "#",
    "@",
    "%",
    "é",
    "\u{202e}",
    "\r\n\r\n",
    "HTTP/1.1 ",
    "Content-Length: ",
    "Transfer-Encoding: chunked\r\n",
    "preload:",
];

/// Edits applied in turn: (position, operation, argument).
type Edits = Vec<(usize, u8, usize)>;

fn edits() -> impl Strategy<Value = Edits> {
    prop::collection::vec((any::<usize>(), any::<u8>(), any::<usize>()), 0..12)
}

/// Applies `edits` to `seed`: insert a token or a byte, delete a span, truncate,
/// duplicate a span.
fn mutate(seed: &[u8], edits: &Edits) -> Vec<u8> {
    let mut b = seed.to_vec();
    for &(pos, op, arg) in edits {
        let p = pos % (b.len() + 1);
        match op % 5 {
            0 => {
                let t = TOKENS[arg % TOKENS.len()].as_bytes();
                b.splice(p..p, t.iter().copied());
            }
            1 => {
                let end = (p + arg % 32).min(b.len());
                b.drain(p..end);
            }
            2 => b.truncate(p),
            3 => b.insert(p, (arg % 256) as u8),
            _ => {
                let end = (p + arg % 128).min(b.len());
                let span = b[p..end].to_vec();
                b.splice(p..p, span);
            }
        }
        if b.len() > 1 << 20 {
            b.truncate(1 << 20);
        }
    }
    b
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Arbitrary short text of any characters.
fn any_text() -> impl Strategy<Value = String> {
    prop::collection::vec(any::<char>(), 0..300).prop_map(String::from_iter)
}

/// Arbitrary short byte strings.
fn any_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..600)
}

/// Text built from the tokens above (denser in trouble than arbitrary characters).
fn token_text() -> impl Strategy<Value = String> {
    prop::collection::vec(0..TOKENS.len(), 0..40)
        .prop_map(|ix| ix.into_iter().map(|i| TOKENS[i]).collect::<String>())
}

/// Either arbitrary text, token soup, or a mutation of one of `seeds`.
fn input_from(seeds: Vec<Vec<u8>>) -> impl Strategy<Value = Vec<u8>> {
    let n = seeds.len();
    prop_oneof![
        1 => any_text().prop_map(String::into_bytes),
        1 => token_text().prop_map(String::into_bytes),
        1 => any_bytes(),
        4 => (0..n, edits()).prop_map(move |(i, e)| mutate(&seeds[i], &e)),
    ]
}

fn plan_seeds() -> Vec<Vec<u8>> {
    let mut seeds = vec![read("tests/fixtures/seeds/plan_server.toml")];
    for dir in ["examples", "examples/puma-rack"] {
        let mut found: Vec<PathBuf> = std::fs::read_dir(root().join(dir))
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "toml"))
            .collect();
        found.sort();
        seeds.extend(found.iter().map(|p| std::fs::read(p).unwrap()));
    }
    seeds
}

fn with_ctx<T>(f: impl FnOnce(&PlanContext) -> T) -> T {
    let locator = LibraryLocator::in_dirs(vec![]);
    let dir = tempfile::tempdir().unwrap();
    let ctx = PlanContext {
        locator: &locator,
        distro: Distro::Debian,
        path_var: "/usr/bin:/bin".into(),
        workdir: dir.path().to_path_buf(),
        online_cpus: 2,
    };
    f(&ctx)
}

/// Feeds a response the way a load connection does: the head is buffered until parsed,
/// body bytes are dropped once fed, pipelined responses follow one another.
fn feed_like_a_connection(wire: &[u8], step: usize, head: bool) {
    let mut p = ResponseParser::new(head);
    let mut buf: Vec<u8> = Vec::new();
    for piece in wire.chunks(step.max(1)) {
        buf.extend_from_slice(piece);
        loop {
            let before_head = p.in_head();
            match p.feed(&buf) {
                Err(_) => return,
                Ok(Progress::Done { consumed }) => {
                    assert!(consumed <= buf.len());
                    buf.drain(..consumed);
                    p.reset(head);
                    if buf.is_empty() {
                        break;
                    }
                }
                Ok(Progress::NeedMore) => {
                    if !p.in_head() || !before_head {
                        buf.clear();
                    }
                    break;
                }
            }
        }
    }
    p.finish_on_close();
}

#[test]
fn seeds_parse_as_they_are() {
    for s in plan_seeds() {
        memtrial::plan::parse_plan_text(&lossy(&s)).expect("seed plans are valid");
    }
    let log = memtrial::load::parse_access_log(
        &text("tests/fixtures/seeds/access_combined.log"),
        &[Method::Get, Method::Head, Method::Post],
    );
    assert!(log.entries.len() >= 4, "{log:?}");
    let targets =
        memtrial::load::parse_targets(&text("tests/fixtures/seeds/targets.txt"), &mut |_| {
            Ok(Vec::new())
        })
        .unwrap();
    assert_eq!(targets.len(), 4);
    memtrial::linux::proc::parse_status(&text("tests/fixtures/proc/python_threads.status"))
        .unwrap();
    memtrial::linux::maps::parse_maps(&text("tests/fixtures/maps/cat_jemalloc.txt")).unwrap();
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn plan_text_never_panics(input in input_from(plan_seeds())) {
        if let Ok(plan) = memtrial::plan::parse_plan_text(&lossy(&input)) {
            let mut plan = plan;
            if plan.command.is_empty() {
                plan.command = vec!["true".into()];
            }
            plan.command[0] = "true".into();
            let _ = with_ctx(|ctx| memtrial::plan::build_plan(plan, ctx).map(|_| ()));
        }
    }

    #[test]
    fn variant_specs_never_panic(input in input_from(vec![
        b"je=preload:jemalloc MALLOC_CONF=narenas:2".to_vec(),
        b"w='RUBYOPT=-W0 --yjit' X=1".to_vec(),
        b"a2=MALLOC_ARENA_MAX=2 GLIBC_TUNABLES=glibc.malloc.trim_threshold=131072".to_vec(),
        b"own=preload:./lib/libmine.so".to_vec(),
    ])) {
        let _ = with_ctx(|ctx| memtrial::plan::parse_custom_variant(&lossy(&input), ctx).map(|_| ()));
    }

    #[test]
    fn access_logs_never_panic(input in input_from(vec![read("tests/fixtures/seeds/access_combined.log")])) {
        let _ = memtrial::load::parse_access_log(&lossy(&input), &[Method::Get, Method::Head]);
    }

    #[test]
    fn targets_files_never_panic(input in input_from(vec![read("tests/fixtures/seeds/targets.txt")])) {
        let _ = memtrial::load::parse_targets(&lossy(&input), &mut |name| {
            if name.len() < 8 { Ok(name.as_bytes().to_vec()) } else { Err("no such file".into()) }
        });
    }

    #[test]
    fn http_responses_never_panic(
        input in input_from(vec![
            read("tests/fixtures/seeds/response_length.http"),
            read("tests/fixtures/seeds/response_chunked.http"),
            read("tests/fixtures/seeds/response_interim.http"),
            read("tests/fixtures/seeds/response_close.http"),
        ]),
        step in 1usize..64,
        head in any::<bool>(),
    ) {
        feed_like_a_connection(&input, step, head);
    }

    #[test]
    fn urls_and_methods_never_panic(input in input_from(vec![
        b"http://127.0.0.1:{port}/items?a=b#frag".to_vec(),
        b"http://[::1]:9000?q".to_vec(),
        b"PROPFIND".to_vec(),
    ])) {
        let t = lossy(&input);
        let _ = memtrial::load::parse_url(&t);
        let _ = t.parse::<Method>();
    }

    #[test]
    fn proc_text_never_panics(input in input_from(vec![
        read("tests/fixtures/proc/python_threads.status"),
        read("tests/fixtures/proc/python_threads.stat"),
        read("tests/fixtures/proc/python_threads.statm"),
        read("tests/fixtures/proc/python_threads.smaps_rollup"),
        read("tests/fixtures/proc/python_threads.environ"),
        b"0.42 0.36 0.30 2/512 12345\n".to_vec(),
    ])) {
        use memtrial::linux::proc;
        let t = lossy(&input);
        let _ = proc::parse_status(&t);
        let _ = proc::parse_stat(&t);
        let _ = proc::parse_smaps_rollup(&t);
        let _ = proc::parse_environ(&input);
        let _ = proc::parse_loadavg_last_pid(&t);
        let _ = memtrial::linux::container::status_cpus_allowed(&t);
    }

    #[test]
    fn maps_and_smaps_never_panic(input in input_from(vec![
        read("tests/fixtures/maps/cat_jemalloc.txt"),
        read("tests/fixtures/maps/static.txt"),
        read("tests/fixtures/maps/spaces_deleted_tcmalloc.txt"),
        read("tests/fixtures/maps/cat_plain.txt"),
        read("tests/fixtures/inspect/arenas20.maps"),
        read("tests/fixtures/inspect/arenas20.smaps")[..20_000].to_vec(),
    ])) {
        let t = lossy(&input);
        if let Ok(maps) = memtrial::linux::maps::parse_maps(&t) {
            let _ = memtrial::linux::maps::mapped_libraries(&maps);
        }
        let _ = memtrial::inspect::classify::parse_smaps(&t);
    }

    #[test]
    fn cgroup_text_never_panics(input in input_from(vec![
        read("tests/fixtures/cgroup/mountinfo_v1_hybrid.txt"),
        read("tests/fixtures/seeds/proc_cgroup_v1.txt"),
        read("tests/fixtures/seeds/proc_cgroup_v2.txt"),
        read("tests/fixtures/seeds/memory_stat_v1.txt"),
        read("tests/fixtures/seeds/cpu_stat_v1.txt"),
        read("tests/fixtures/seeds/memory_events_v2.txt"),
        read("tests/fixtures/seeds/cpu_max_v2.txt"),
        read("tests/fixtures/seeds/cpu_max_v2_half.txt"),
        b"0-1,3,8-11\n".to_vec(),
        b"9223372036854771712\n".to_vec(),
    ])) {
        use memtrial::linux::container as c;
        use memtrial::linux::cgroup;
        let t = lossy(&input);
        let _ = cgroup::parse_mountinfo(&t);
        let _ = cgroup::parse_proc_cgroup(&t);
        let _ = cgroup::parse_flat_keyed(&t);
        let _ = cgroup::parse_cpu_list(&t);
        let mountinfo = text("tests/fixtures/cgroup/mountinfo_v1_hybrid.txt");
        let _ = cgroup::hierarchy_from(&mountinfo, &t);
        let _ = cgroup::hierarchy_from(&t, "0::/\n");
        if let Ok(lines) = c::parse_proc_cgroup(&t) {
            let mounts = c::parse_mountinfo(&mountinfo);
            let _ = c::group_dir(&lines, &mounts, "memory");
        }
        let _ = c::parse_mountinfo(&t);
        let _ = c::parse_limit(&t);
        let _ = c::parse_cpu_max(&t);
        let _ = c::parse_cfs(&t, "100000");
        let _ = c::parse_cfs("50000", &t);
        let _ = c::cpu_list_count(&t);
    }

    #[test]
    fn durations_and_sizes_never_panic(input in input_from(vec![
        b"100ms".to_vec(), b"1h 30m".to_vec(), b"2.5".to_vec(), b"1e300".to_vec(),
        b"512MiB".to_vec(), b"1.5G".to_vec(), b"64K".to_vec(),
    ])) {
        let t = lossy(&input);
        let _ = memtrial::units::parse_duration(&t);
        let _ = memtrial::units::parse_size(&t);
        for range in [memtrial::plan::settings::INTERVAL, memtrial::plan::settings::LOAD_WARMUP] {
            if let Ok(d) = range.parse(&t) {
                prop_assert!(d <= range.max);
            }
        }
    }
}

/// A real record: the first experiment of the committed v3 database, as `--json` writes it.
fn a_record() -> serde_json::Value {
    static RECORD: std::sync::OnceLock<serde_json::Value> = std::sync::OnceLock::new();
    RECORD
        .get_or_init(|| {
            let dir = tempfile::tempdir().unwrap();
            let db = dir.path().join("v3.db");
            std::fs::copy(root().join("tests/fixtures/db/v3.db"), &db).unwrap();
            let store = memtrial::store::Store::open_existing(&db).unwrap();
            let e = store.load(1).unwrap();
            let text = memtrial::report::json::render(&e, &memtrial::analysis::analyse(&e));
            serde_json::from_str(&text).unwrap()
        })
        .clone()
}

/// Strings a hostile record may carry: line breaks, escape sequences, shell and SQL.
fn hostile_string() -> impl Strategy<Value = String> {
    prop_oneof![
        token_text(),
        Just("node-b\nimported 9 runs: all good".to_string()),
        Just("\u{1b}[31mred\u{1b}]0;title\u{7}".to_string()),
        Just("$(touch /tmp/memtrial-pwned)`id`".to_string()),
        Just("x'; DROP TABLE runs; --".to_string()),
        Just("\u{202e}evil".to_string()),
        any_text(),
    ]
}

/// Sizes a hostile record may carry: around the store's limit and the extremes.
fn hostile_size() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0u64),
        Just(i64::MAX as u64),
        Just(i64::MAX as u64 + 1),
        Just(u64::MAX),
        any::<u64>(),
        0u64..(1 << 40),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: config().cases.min(64), ..config() })]

    /// A real record with hostile strings (hostname, variant name, a note, a run's message)
    /// and sizes (a peak, a sample): import never panics; it refuses every size the store
    /// cannot hold, naming it; whatever it imports loads, analyses and renders again.
    #[test]
    fn records_with_hostile_strings_and_sizes(
        host in hostile_string(),
        message in hostile_string(),
        note in hostile_string(),
        peak in hostile_size(),
        rss in hostile_size(),
    ) {
        let mut rec = a_record();
        rec["experiment"]["hosts"][0]["hostname"] = host.clone().into();
        rec["notes"] = serde_json::json!([note]);
        let run = &mut rec["variants"][0]["runs"][0];
        run["message"] = message.into();
        run["peak_rss_bytes"] = peak.into();
        if let Some(s) = run["samples"].get_mut(0) {
            s["rss_bytes"] = rss.into();
        }
        let dir = tempfile::tempdir().unwrap();
        let mut store = memtrial::store::Store::open(&dir.path().join("p.db")).unwrap();
        let r = memtrial::store::import::import(&mut store, &[("p.json".into(), rec.to_string())]);
        let too_big = peak > i64::MAX as u64 || rss > i64::MAX as u64;
        match r {
            Ok(out) => {
                prop_assert!(!too_big, "imported a size beyond the store: {peak} {rss}");
                let e = store.load(out[0].experiment).unwrap();
                let text = memtrial::report::json::render(&e, &memtrial::analysis::analyse(&e));
                prop_assert!(serde_json::from_str::<serde_json::Value>(&text).is_ok());
                prop_assert!(store.list().is_ok());
            }
            Err(e) => {
                prop_assert!(store.list().unwrap().is_empty());
                if too_big {
                    let text = e.to_string();
                    prop_assert!(text.contains("beyond what the store holds"), "{}", text);
                }
            }
        }
    }
}

#[test]
fn huge_cpu_ranges_are_refused_not_allocated() {
    let e = memtrial::linux::cgroup::parse_cpu_list("0-4294967295").unwrap_err();
    assert!(e.contains("4294967295"), "{e}");
    assert!(memtrial::linux::container::cpu_list_count("0-4294967295,1-4294967295").is_err());
}

/// The seeds directory exists and is committed with the tests.
#[test]
fn seeds_are_committed() {
    assert!(Path::new(&root().join("tests/fixtures/seeds")).is_dir());
}
