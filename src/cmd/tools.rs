//! The commands that run no experiment: `workload fragment`, `workload cache-server`,
//! `inspect`, `exporter`,
//! `probe-library`, `load`.

use anyhow::{bail, Result};

use crate::cli::{CacheServerArgs, ExporterArgs, FragmentArgs, InspectArgs, ProbeLibraryArgs};
use memtrial::report::printer::OutputTarget;
use memtrial::units::{format_seconds, parse_size};
use memtrial::workload::fragment::{self, FragmentConfig};

use super::experiment::{check_output, fit_fd_limit};
use super::ui::{stop_flag, Outcome, Ui};

pub(super) fn fragment_cmd(args: &FragmentArgs, ui: &Ui) -> Result<Outcome> {
    use memtrial::plan::settings::{self as ranges, count};
    let mut cfg = FragmentConfig::default();
    if let Some(t) = args.threads {
        cfg.threads = count("--threads", t, ranges::FRAGMENT_THREADS)?;
    }
    if let Some(s) = &args.seconds {
        cfg.duration = Some(ranges::duration("--seconds", s, ranges::FRAGMENT_SECONDS)?);
        cfg.iterations = None;
    }
    if let Some(n) = args.iterations {
        cfg.iterations = Some(count("--iterations", n, ranges::FRAGMENT_ITERATIONS)?);
        cfg.duration = None;
    }
    let size = |flag: &'static str, s: &str| -> Result<usize> {
        let bytes = parse_size(s).map_err(|e| anyhow::anyhow!("{flag} {s}: {e}"))?;
        if !(ranges::FRAGMENT_SIZE.0..=ranges::FRAGMENT_SIZE.1).contains(&bytes) {
            bail!("{flag} {s}: must be from 1 byte to 1G");
        }
        Ok(bytes as usize)
    };
    if let Some(s) = &args.min_size {
        cfg.min_size = size("--min-size", s)?;
    }
    if let Some(s) = &args.max_size {
        cfg.max_size = size("--max-size", s)?;
    }
    if cfg.min_size == 0 || cfg.min_size > cfg.max_size {
        bail!(
            "--min-size {} / --max-size {}: need 1 <= min-size <= max-size",
            cfg.min_size,
            cfg.max_size
        );
    }
    if cfg.max_size as u64 > ranges::FRAGMENT_SIZE.1 {
        bail!("--max-size {}: at most 1G per object", cfg.max_size);
    }
    if let Some(f) = args.survivors {
        let (least, most) = ranges::FRAGMENT_SURVIVORS;
        if !(least..=most).contains(&f) {
            bail!("--survivors {f}: must be a fraction between 0 and 1");
        }
        cfg.survivor_fraction = f;
    }
    if let Some(n) = args.live {
        cfg.live_objects = count("--live", n, ranges::FRAGMENT_LIVE)?;
    }
    if let Some(s) = args.seed {
        cfg.seed = s;
    }
    let summary = fragment::run(&cfg);
    let status = memtrial::linux::proc::read_status(std::process::id() as i32).ok();
    let line = serde_json::json!({
        "workload": "fragment",
        "threads": summary.threads,
        "allocations": summary.allocations,
        "bytes_allocated": summary.bytes_allocated,
        "survivors": summary.survivors,
        "survivor_bytes": summary.survivor_bytes,
        "cross_thread_frees": summary.cross_thread_frees,
        "elapsed_seconds": summary.elapsed.as_secs_f64(),
        "vm_hwm_bytes": status.as_ref().map(|s| s.vm_hwm),
        "vm_rss_bytes": status.as_ref().map(|s| s.vm_rss),
    });
    ui.result(&format!("{line}\n"))?;
    Ok(Outcome::Ok)
}

/// `workload cache-server`'s port and settings from its flags, each checked against its
/// range; what a flag not given leaves is the cache server's own default.
pub(super) fn cache_server_config(
    args: &CacheServerArgs,
) -> Result<(u64, memtrial::workload::cache_server::CacheServerConfig)> {
    use memtrial::plan::settings::{self as ranges, count};
    let mut cfg = memtrial::workload::cache_server::CacheServerConfig::default();
    let port = count("--port", args.port, ranges::CACHE_SERVER_PORT)?;
    if let Some(t) = args.threads {
        cfg.threads = count("--threads", t, ranges::CACHE_SERVER_THREADS)?;
    }
    let size = |flag: &'static str, s: &str, (lo, hi): (u64, u64)| -> Result<usize> {
        let bytes = parse_size(s).map_err(|e| anyhow::anyhow!("{flag} {s}: {e}"))?;
        if !(lo..=hi).contains(&bytes) {
            bail!(
                "{flag} {s}: must be from {} to {}",
                memtrial::units::format_bytes(lo as f64),
                memtrial::units::format_bytes(hi as f64)
            );
        }
        Ok(bytes as usize)
    };
    if let Some(s) = &args.cache_size {
        cfg.cache_bytes = size("--cache-size", s, ranges::CACHE_SERVER_CACHE)?;
    }
    if let Some(s) = &args.min_size {
        cfg.min_size = size("--min-size", s, ranges::FRAGMENT_SIZE)?;
    }
    if let Some(s) = &args.max_size {
        cfg.max_size = size("--max-size", s, ranges::FRAGMENT_SIZE)?;
    }
    if cfg.min_size > cfg.max_size {
        bail!(
            "--min-size {} / --max-size {}: need min-size <= max-size",
            cfg.min_size,
            cfg.max_size
        );
    }
    if let Some(d) = args.drift {
        cfg.drift_requests = count("--drift", d, ranges::CACHE_SERVER_DRIFT)?;
    }
    if let Some(seed) = args.seed {
        cfg.seed = seed;
    }
    Ok((port, cfg))
}

/// `memtrial workload cache-server`: serves until SIGTERM/SIGINT, then one summary line on
/// standard error.
pub(super) fn cache_server_cmd(args: &CacheServerArgs, ui: &Ui) -> Result<Outcome> {
    use memtrial::workload::cache_server;
    let (port, cfg) = cache_server_config(args)?;
    let listener = std::net::TcpListener::bind(("127.0.0.1", port as u16))
        .map_err(|e| anyhow::anyhow!("--port {port}: cannot listen on 127.0.0.1:{port}: {e}"))?;
    let stop = stop_flag()?;
    let shown = listener.local_addr().map_or(port, |a| u64::from(a.port()));
    ui.note(&format!(
        "cache-server listening on http://127.0.0.1:{shown}/ with {} threads, cache {} \
         (stop with SIGTERM or Ctrl-C)",
        cfg.threads,
        memtrial::units::format_bytes(cfg.cache_bytes as f64)
    ));
    let s = cache_server::serve(listener, &cfg, &stop)?;
    let status = memtrial::linux::proc::read_status(std::process::id() as i32).ok();
    let mib = |b: u64| format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64);
    ui.note(&format!(
        "cache-server: {} requests ({} refused) on {} connections in {}; cache {} entries, {}; \
         {} evictions, {} freed by another thread; peak RSS (VmHWM) {}",
        s.requests,
        s.bad_requests,
        s.connections,
        format_seconds(s.elapsed.as_secs_f64()),
        s.entries,
        mib(s.cache_bytes),
        s.evictions,
        s.cross_thread_frees,
        status.as_ref().map_or("?".into(), |st| mib(st.vm_hwm)),
    ));
    Ok(Outcome::Ok)
}

pub(super) fn inspect_cmd(args: &InspectArgs, ui: &Ui) -> Result<Outcome> {
    use memtrial::inspect::render::{live_line, InspectExport, View};
    use memtrial::plan::settings::{self as ranges, count};
    use memtrial::report::Exporter;
    let watch = args
        .watch
        .as_deref()
        .map(|w| ranges::duration("--watch", w, ranges::INSPECT_WATCH))
        .transpose()?;
    let interval = ranges::duration("--interval", &args.interval, ranges::INSPECT_INTERVAL)?;
    if let Some(n) = args.top {
        count("--top", n, ranges::INSPECT_TOP)?;
    }
    let json = args.json.as_deref().map(OutputTarget::from_path);
    if let Some(t) = &json {
        t.check("--json")?;
    }
    let stdout_taken = json.as_ref().is_some_and(OutputTarget::is_stdout);
    let text = InspectExport::Text {
        view: if args.maps { View::Maps } else { View::Screen },
        color: ui.color(),
    };
    let stop = stop_flag()?;
    if let Some(n) = args.top {
        let by = match args.by {
            crate::cli::RankByArg::Rss => memtrial::inspect::procs::RankBy::Rss,
            crate::cli::RankByArg::Pss => memtrial::inspect::procs::RankBy::Pss,
        };
        let top = memtrial::inspect::run_top(n, by)?;
        // `--json` on standard output: only the JSON, nothing for people beside it.
        if !stdout_taken {
            ui.human(&String::from_utf8_lossy(&text.serialize(&top)?), false)?;
        }
        if let Some(t) = &json {
            ui.write_output(t, &InspectExport::Json.serialize(&top)?, "--json")?;
        }
        return Ok(Outcome::Ok);
    }
    let Some(pid) = args.pid else {
        bail!("give a PID, or --top N");
    };
    let opts = memtrial::inspect::Options {
        pid,
        watch,
        interval,
        tree: args.tree,
        trim: args.trim,
    };
    let ins = memtrial::inspect::run(
        &opts,
        &mut |m| ui.note(m),
        &mut |s| ui.live(Some(&live_line(s))),
        &stop,
    )?;
    if opts.watch.is_some() {
        ui.live(None);
    }
    if !stdout_taken {
        ui.human(&String::from_utf8_lossy(&text.serialize(&ins)?), false)?;
    }
    if let Some(t) = &json {
        ui.write_output(t, &InspectExport::Json.serialize(&ins)?, "--json")?;
    }
    Ok(Outcome::Ok)
}

// ---- memtrial exporter --------------------------------------------------------

/// Validates every flag (exit 2 with the flag, the value and what to do), binds the
/// address, then serves until SIGINT or SIGTERM, which end it with exit 0.
pub(super) fn exporter_cmd(args: &ExporterArgs, ui: &Ui) -> Result<Outcome> {
    use memtrial::exporter::{self, Collector, Settings};
    use memtrial::plan::settings as ranges;
    let ExporterArgs {
        listen,
        matcher,
        per_process,
        budget,
        max_age,
        probe_dir,
    } = args;
    let addr = exporter::parse_listen(listen)?;
    let matcher = exporter::parse_match(matcher)?;
    let probe_dir = exporter::parse_probe_dir(probe_dir)?;
    let budget = ranges::duration("--budget", budget, ranges::EXPORTER_BUDGET)?;
    let max_age = ranges::duration("--max-age", max_age, ranges::EXPORTER_MAX_AGE)?;
    let listener = exporter::bind(addr, listen)?;
    let stop = stop_flag()?;
    let shown = listener.local_addr().map_or(addr, |a| a);
    ui.note(&format!(
        "serving http://{shown}/metrics for processes matching {} (stop with Ctrl-C)",
        matcher.as_str()
    ));
    let collector = Collector::new(Settings {
        matcher,
        per_process: *per_process,
        budget,
        max_age,
        probe_dir,
    });
    exporter::serve(listener, collector, &stop)?;
    Ok(Outcome::Ok)
}

// ---- memtrial probe-library ----------------------------------------------------

/// Writes the embedded probe library where `--out` says and prints where, its size and its
/// SHA-256 (the hash a run's notes record the start of).
pub(super) fn probe_library_cmd(args: &ProbeLibraryArgs, ui: &Ui) -> Result<Outcome> {
    let out = &args.out;
    let lib = memtrial::probe::allocator::write_library(out)
        .map_err(|e| anyhow::anyhow!("--out {}: {e}", out.display()))?;
    ui.result(&format!(
        "wrote {}: {} bytes, SHA-256 {}\n",
        lib.path.display(),
        lib.bytes,
        lib.sha256
    ))?;
    ui.note(
        "Preload it after any allocator library (LD_PRELOAD=\"<allocator> <this file>\"), with \
         MEMTRIAL_PROBE_DIR set to the exporter's --probe-dir and MEMTRIAL_PROBE_MAX_BYTES to \
         bound its file; it needs glibc 2.34 or newer. See docs/exporter.md.",
    );
    Ok(Outcome::Ok)
}

// ---- memtrial load -------------------------------------------------------------

/// Builds a load from the flags; every error names its flag, value and reason. The
/// numbers go through the same rules and defaults as a server trial's
/// ([`memtrial::plan::settings::resolve_load`]).
pub(super) fn load_spec(args: &crate::cli::LoadArgs, ui: &Ui) -> Result<memtrial::load::LoadSpec> {
    use memtrial::load::{self, Mode};
    use memtrial::plan::settings::{resolve_load, LoadCommand, LoadInput};
    let crate::cli::LoadArgs {
        url: url_text,
        duration,
        warmup_duration,
        connections,
        threads,
        rate,
        targets,
        replay,
        speed,
        methods,
        timeout,
        json: _, // where the result goes
    } = args;
    let url = load::parse_url(url_text).map_err(|e| anyhow::anyhow!("--url: {e}"))?;
    let addr = url
        .socket_addr()
        .map_err(|e| anyhow::anyhow!("--url {url_text}: {e}"))?;
    let settings = resolve_load(
        &LoadInput {
            duration: duration.clone(),
            warmup_duration: warmup_duration.clone(),
            connections: *connections,
            threads: *threads,
            rate: *rate,
            request_timeout: timeout.clone(),
            speed: *speed,
        },
        LoadCommand::Load,
        memtrial::linux::host::online_cpus(),
    )?;
    let mode = match settings.rate {
        Some(r) => Mode::Open {
            rate_per_sec: r,
            connections: settings.connections,
        },
        None => Mode::Closed {
            connections: settings.connections,
        },
    };
    fit_fd_limit(settings.connections, settings.threads, ui)?;
    let (kind, flag) = match (targets, replay) {
        (Some(path), _) => (
            memtrial::load::source::RequestSource::Targets { path: path.clone() },
            format!("--targets {}", path.display()),
        ),
        (None, Some(path)) => (
            memtrial::load::source::RequestSource::Replay {
                path: path.clone(),
                speed: settings.speed,
                methods: methods
                    .clone()
                    .unwrap_or_else(memtrial::plan::settings::default_methods),
            },
            format!("--replay {}", path.display()),
        ),
        (None, None) => (
            memtrial::load::source::RequestSource::Url,
            format!("--url {url_text}"),
        ),
    };
    let (source, notes) = memtrial::load::source::read_source(&kind, &url.path_and_query)
        .map_err(|e| anyhow::anyhow!("{flag}: {e}"))?;
    for n in notes {
        ui.note(&n);
    }
    Ok(memtrial::load::LoadSpec {
        addr,
        host_header: url.host_header(),
        source,
        mode,
        threads: settings.threads,
        duration: settings.duration,
        warmup: settings.warmup,
        timeout: settings.request_timeout,
    })
}

pub(super) fn load_cmd(args: &crate::cli::LoadArgs, ui: &Ui) -> Result<Outcome> {
    use std::sync::atomic::Ordering;
    if let Some(p) = &args.json {
        check_output(&Some(p.clone()), "--json")?;
    }
    let spec = load_spec(args, ui)?;
    let stop = stop_flag()?;
    let pacing = match spec.mode {
        memtrial::load::Mode::Open { rate_per_sec, .. } => {
            format!("open loop at {rate_per_sec} req/s")
        }
        memtrial::load::Mode::Closed { .. } => match &spec.source {
            memtrial::load::Source::Replay { speed: Some(s), .. } => format!("log's pace ×{s}"),
            _ => "closed loop".to_string(),
        },
    };
    let header = format!(
        "memtrial load: {} for {}{}, {} connection(s) on {} thread(s), {pacing}",
        args.url,
        format_seconds(spec.duration.as_secs_f64()),
        if spec.warmup.is_zero() {
            String::new()
        } else {
            format!(
                " after {} warm-up",
                format_seconds(spec.warmup.as_secs_f64())
            )
        },
        spec.mode.connections(),
        spec.threads,
    );
    ui.note(&format!("{header} …"));
    let t0 = std::time::Instant::now();
    let result = memtrial::load::run(&spec, t0, &stop)?;
    let text = memtrial::load::summary::render(&header, &result);
    let json = args.json.as_deref().map(OutputTarget::from_path);
    ui.human(&text, json.as_ref().is_some_and(OutputTarget::is_stdout))?;
    if let Some(target) = &json {
        let doc = serde_json::json!({
            "url": args.url,
            "threads": spec.threads,
            "connections": spec.mode.connections(),
            "duration_seconds": spec.duration.as_secs_f64(),
            "warmup_seconds": spec.warmup.as_secs_f64(),
            "timeout_seconds": spec.timeout.as_secs_f64(),
            "result": result,
        });
        let mut s = serde_json::to_vec_pretty(&doc)?;
        s.push(b'\n');
        ui.write_output(target, &s, "--json")?;
    }
    if stop.load(Ordering::Relaxed) {
        return Ok(Outcome::Interrupted);
    }
    Ok(if result.requests == 0 {
        ui.note("memtrial: no response was received");
        Outcome::RunsFailed
    } else {
        Outcome::Ok
    })
}
