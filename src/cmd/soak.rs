//! `memtrial soak` (flags to soak settings, then the soak with its live progress) and
//! `memtrial report --soak/--follow` (a stored soak, or one still running, shown again).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};

use crate::cli::{ServerArgs, SoakArgs, WorkerArgs};
use memtrial::backend::local::LocalBackend;
use memtrial::plan::settings::{
    self, SOAK_CONSECUTIVE, SOAK_DURATION, SOAK_INTERVAL, SOAK_INTERVAL_DEFAULT, SOAK_MARGIN,
    SOAK_WARMUP_WINDOWS, SOAK_WARMUP_WINDOWS_DEFAULT, SOAK_WINDOW, SOAK_WINDOW_DEFAULT,
};
use memtrial::plan::{PlanInput, PORT_PLACEHOLDER};
use memtrial::record::soak::{DecideRule, SoakHead, SoakSettings, SoakStatus};
use memtrial::report::printer::OutputTarget;
use memtrial::soak::{self, report, Begin, Progress};
use memtrial::store::Store;
use memtrial::trial::Isolation;
use memtrial::units::format_bytes;

use super::experiment::{fit_fd_limit, isolation, resolve_plan};
use super::ui::{stop_flag, Outcome, Ui};

/// PSS walks every mapping: read it this often, whatever the sampling interval.
const PSS_EVERY: f64 = 10.0;

/// The soak's settings from its flags: the plan (variants, command, limits, load) built
/// and checked the way `memtrial run` builds it, the soak's own settings checked against
/// their ranges (`plan::settings`).
pub(super) fn settings_from(args: &SoakArgs, ui: &Ui) -> Result<SoakSettings> {
    let SoakArgs {
        variants,
        custom,
        baseline,
        until_decided,
        max_duration,
        margin,
        consecutive,
        window,
        warmup_windows,
        interval,
        limits,
        no_probes,
        log_limit: _, // set in `dispatch`
        resume: _,    // handled before
        json: _,
        html: _,
        server,
        worker,
        command,
    } = args;
    let is_server = server.url.is_some();
    check_feed(server, worker)?;
    let mut server = server.clone();
    let timing = timing(
        max_duration,
        server.duration.take(),
        window,
        *warmup_windows,
        interval,
    )?;
    let until_decided = if *until_decided {
        Some(decide_rule(*margin, *consecutive)?)
    } else {
        None
    };
    let input = PlanInput {
        command: command.clone(),
        variants: variants.clone(),
        custom: custom.clone(),
        baseline: baseline.clone(),
        runs: Some(1),
        limits: limits.clone(),
        server,
        worker: memtrial::plan::WorkerInput {
            before: worker.before.clone(),
            driver: worker.driver.clone(),
            ..Default::default()
        },
        no_probes: *no_probes,
        ..Default::default()
    };
    let plan = resolve_plan(input, ui)?.plan;
    if plan.variants.len() < 2 {
        bail!("--variants: a soak compares variants side by side; name at least two (the baseline {} and another)", plan.baseline);
    }
    if let Some(v) = plan.variants.iter().find(|v| v.knobs.trim_ms.is_some()) {
        bail!("variant '{}': trim: runs in `memtrial run` (its trims counted and verified there); a soak cannot count them yet — compare it with `memtrial run --duration …`", v.name);
    }
    let takes_port = plan
        .command
        .iter()
        .skip(1)
        .any(|a| a.contains(PORT_PLACEHOLDER) || a.contains("MEMTRIAL_PORT"));
    if is_server && !takes_port {
        bail!(
            "the command has no {PORT_PLACEHOLDER}: {} instances run side by side and each needs a port of its own; put {PORT_PLACEHOLDER} where the server takes its port (e.g. `puma -b tcp://127.0.0.1:{PORT_PLACEHOLDER}`), or read $MEMTRIAL_PORT in a `sh -c` wrapper",
            plan.variants.len()
        );
    }
    Ok(SoakSettings {
        plan,
        window_seconds: timing.window.as_secs_f64(),
        warmup_windows: timing.warmup_windows,
        duration_seconds: timing.length.as_secs_f64(),
        until_decided,
        sample_seconds: timing.interval.as_secs_f64(),
        pss_seconds: PSS_EVERY.max(timing.interval.as_secs_f64()),
    })
}

/// A soak feeds every variant the same work: a server the same open-loop requests, a
/// worker its own driver; `memtrial run`'s warm-up and cool-down have no place in it.
fn check_feed(server: &ServerArgs, worker: &WorkerArgs) -> Result<()> {
    let is_server = server.url.is_some();
    if !is_server && worker.driver.is_none() {
        bail!("--url or --driver: a soak feeds every variant the same work: a server gets the same requests (--url with {{port}}, and --rate or --replay with --speed), a worker its own --driver per instance");
    }
    if is_server && worker.driver.is_some() {
        bail!("--driver: a server soak is fed by its --url's requests; a --driver is for a worker soak (without --url)");
    }
    if is_server && server.rate.is_none() && server.speed.is_none() {
        bail!("--rate: a soak sends every instance the same requests at the same moments, an open loop: give --rate R (requests per second to each instance), or --replay LOG with --speed X (the log's own timing)");
    }
    if server.warmup_duration.is_some() || server.cooldown.is_some() {
        bail!("--warmup-duration and --cooldown belong to `memtrial run`; a soak leaves out its first --warmup-windows windows after each start instead");
    }
    Ok(())
}

/// The soak's clock: how long it lasts, its window, the warm-up windows, the sampling
/// interval, each checked against its range and against each other.
struct Timing {
    length: Duration,
    window: Duration,
    warmup_windows: u32,
    interval: Duration,
}

fn timing(
    max_duration: &Option<String>,
    duration: Option<String>,
    window: &Option<String>,
    warmup_windows: Option<u32>,
    interval: &Option<String>,
) -> Result<Timing> {
    let length_text = match (max_duration, duration) {
        (Some(m), _) => m.clone(),
        (None, Some(d)) => d,
        (None, None) => bail!("--duration: how long the soak runs is needed (e.g. --duration 6h), or --until-decided with --max-duration"),
    };
    let flag = if max_duration.is_some() {
        "--max-duration"
    } else {
        "--duration"
    };
    let length = settings::duration(flag, &length_text, SOAK_DURATION)?;
    let window = match window {
        Some(w) => settings::duration("--window", w, SOAK_WINDOW)?,
        None => SOAK_WINDOW_DEFAULT,
    };
    let warmup_windows = settings::count(
        "--warmup-windows",
        warmup_windows.unwrap_or(SOAK_WARMUP_WINDOWS_DEFAULT),
        SOAK_WARMUP_WINDOWS,
    )?;
    let interval = match interval {
        Some(i) => settings::duration("--interval", i, SOAK_INTERVAL)?,
        None => SOAK_INTERVAL_DEFAULT,
    };
    if window < interval * 2 {
        bail!(
            "--window {}: a window must hold at least two samples; the interval is {}",
            humantime::format_duration(window),
            humantime::format_duration(interval)
        );
    }
    if length < window {
        bail!("{flag} {length_text}: shorter than one window ({}); lengthen it or pass a shorter --window", humantime::format_duration(window));
    }
    Ok(Timing {
        length,
        window,
        warmup_windows,
        interval,
    })
}

/// `--until-decided`'s rule from `--margin` and `--consecutive`, each within its range.
fn decide_rule(margin: Option<f64>, consecutive: Option<u32>) -> Result<DecideRule> {
    let d = DecideRule::default();
    Ok(DecideRule {
        margin: settings::real("--margin", margin.unwrap_or(d.margin), SOAK_MARGIN)?,
        consecutive: settings::count(
            "--consecutive",
            consecutive.unwrap_or(d.consecutive),
            SOAK_CONSECUTIVE,
        )?,
        min_windows: d.min_windows,
    })
}

/// Which soak `--resume` means, and that it may be carried on.
fn resumable(store: &Store, id: Option<i64>) -> Result<SoakHead> {
    let id = match id {
        Some(id) => id,
        None => store.latest_soak()?.context(
            "--resume: there is no soak in this database; start one with `memtrial soak …`",
        )?,
    };
    let head = store
        .soak_head(id)?
        .with_context(|| format!("--resume {id}: there is no soak {id} in this database"))?;
    if head.status == SoakStatus::Done {
        bail!(
            "--resume {id}: soak {id} is done ({}); `memtrial report --soak {id}` shows it",
            head.stop_reason.as_deref().unwrap_or("ended")
        );
    }
    if head.owner_alive {
        bail!(
            "--resume {id}: soak {id} is running in another memtrial ({}); `memtrial report --follow {id}` shows it as it goes",
            head.owner_pid
                .map_or("on this machine".into(), |p| format!("PID {p} on this machine"))
        );
    }
    Ok(head)
}

pub(super) fn soak_cmd(db: &Path, args: &SoakArgs, ui: &Ui) -> Result<Outcome> {
    for (flag, p) in [("--json", &args.json), ("--html", &args.html)] {
        if let Some(p) = p {
            OutputTarget::from_path(p).check(flag)?;
        }
    }
    if args.html.as_deref() == Some(Path::new("-")) {
        bail!("--html -: write the HTML page to a file (it is meant to be opened in a browser)");
    }
    let stop = stop_flag()?;
    let mut store = Store::open(db)?;
    let (begin, settings) = match args.resume {
        Some(id) => {
            let head = resumable(&store, id)?;
            ui.note(&format!("memtrial soak: resuming soak {}", head.id));
            (Begin::Resume(head.id), head.settings)
        }
        None => {
            let s = settings_from(args, ui)?;
            (Begin::New(Box::new(s.clone())), s)
        }
    };
    let iso = isolation(&settings.plan.limits, ui)?;
    if let Isolation::None { reason } = &iso {
        bail!("a soak runs each variant in a cgroup of its own (the same limits, its own memory figures), and there is none: {reason}");
    }
    let n = settings.plan.variants.len();
    if let Some(server) = &settings.plan.server {
        fit_fd_limit(server.connections * n, server.threads * n, ui)?;
    }
    let backend = LocalBackend { isolation: iso };
    let logs = memtrial::store::logs_root(db);
    std::fs::create_dir_all(&logs).with_context(|| format!("cannot create {}", logs.display()))?;
    ui.note(&format!(
        "memtrial soak: {} side by side ({}), windows of {}, for {}{}; Ctrl-C ends it and reports what it has",
        n,
        settings.plan.variants.iter().map(|v| v.name.as_str()).collect::<Vec<_>>().join(", "),
        soak::clock(settings.window_seconds),
        soak::clock(settings.duration_seconds),
        if settings.until_decided.is_some() { " at most, or until decided" } else { "" }
    ));
    let mut last_block = std::time::Instant::now() - Duration::from_secs(3600);
    let html = args.html.clone();
    let mut on_progress = |p: &Progress| {
        show_progress(ui, p, &mut last_block);
        // A window closed: the page is written again from the database (and reloads
        // itself in the browser while the soak runs).
        if let (Some(path), Some(id), true) = (&html, p.soak, p.window_closed) {
            if let Err(e) = live_html(db, id, path, settings.window_seconds) {
                ui.note(&format!("warning: --html: {e:#}"));
            }
        }
    };
    let ended = soak::soak(
        begin,
        soak::Context {
            store: &mut store,
            backend: &backend,
            logs: &logs,
            stop: &stop,
            on_progress: &mut on_progress,
        },
    );
    ui.live(None);
    let ended = match ended {
        Err(e @ (soak::SoakError::Busy { .. } | soak::SoakError::Done { .. })) => {
            bail!("--resume: {e}")
        }
        e => e?,
    };
    let head = store
        .soak_head(ended.id)?
        .context("the soak vanished from the database")?;
    let summary = report::summarise(&store, &head)?;
    present(
        &store,
        &summary,
        args.json.as_deref(),
        html.as_deref(),
        ui,
        None,
    )?;
    for v in &ended.down {
        ui.note(&format!(
            "note: the {v} instance went down during the soak (see its event); its windows from then on are left out of every figure"
        ));
    }
    Ok(match ended.status {
        SoakStatus::Interrupted => Outcome::Interrupted,
        SoakStatus::Failed => Outcome::RunsFailed,
        _ if !ended.down.is_empty() => Outcome::RunsFailed,
        _ => Outcome::Ok,
    })
}

fn show_progress(ui: &Ui, p: &Progress, last_block: &mut std::time::Instant) {
    let mut lines = vec![format!(
        "soak {} of {} ({} left)",
        soak::clock(p.t),
        soak::clock(p.end),
        soak::clock(p.end - p.t)
    )];
    for v in &p.variants {
        let mut l = format!(
            "  {:<12} RSS {:>10}",
            v.name,
            v.rss.map_or("-".into(), format_bytes)
        );
        if let Some(t) = v.trend_per_min {
            l += &format!(
                "  {}{}/min",
                if t >= 0.0 { "+" } else { "-" },
                format_bytes(t.abs())
            );
        }
        if let Some(p95) = v.p95_ms {
            l += &format!("  p95 {p95:.1} ms");
        }
        l += &format!("  errors {}", v.errors);
        if let Some(d) = &v.down {
            l += &format!("  DOWN: {d}");
        }
        lines.push(l);
    }
    if let Some(n) = &p.note {
        ui.live(None);
        ui.note(&format!("{n}\n{}", lines.join("\n")));
        *last_block = std::time::Instant::now();
    } else if ui.live_progress() {
        ui.live(Some(&lines.join(" | ").replace("  ", " ")));
    } else if last_block.elapsed() >= Duration::from_secs(60) {
        ui.note(&lines.join("\n"));
        *last_block = std::time::Instant::now();
    }
}

/// The table on standard output (or standard error when --json - takes it), the JSON and
/// the HTML page.
fn present(
    store: &Store,
    summary: &report::SoakSummary,
    json: Option<&Path>,
    html: Option<&Path>,
    ui: &Ui,
    refresh: Option<u32>,
) -> Result<()> {
    let json_stdout = json == Some(Path::new("-"));
    ui.human(&report::table(summary), json_stdout)?;
    if let Some(p) = json {
        let mut text =
            serde_json::to_string_pretty(summary).context("cannot serialise the soak's summary")?;
        text.push('\n');
        ui.write_output(&OutputTarget::from_path(p), text.as_bytes(), "--json")?;
    }
    if let Some(p) = html {
        write_html(store, summary, p, refresh)?;
        if refresh.is_none() {
            ui.note(&format!("wrote {}", p.display()));
        }
    }
    Ok(())
}

fn write_html(
    store: &Store,
    summary: &report::SoakSummary,
    path: &Path,
    refresh: Option<u32>,
) -> Result<()> {
    let mut series = Vec::new();
    for v in &summary.variants {
        series.push((v.name.clone(), store.soak_points(summary.id, &v.name)?));
    }
    let windows = store.soak_windows(summary.id)?;
    let head = store
        .soak_head(summary.id)?
        .context("the soak vanished from the database")?;
    let page = report::html(
        summary,
        &series,
        &windows,
        head.settings.sample_seconds,
        refresh,
    );
    let tmp: PathBuf = path.with_extension("html.tmp");
    std::fs::write(&tmp, page)
        .with_context(|| format!("--html: cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, path)
        .with_context(|| format!("--html: cannot write {}", path.display()))?;
    Ok(())
}

/// The page of a running soak, from a connection of its own to the database.
fn live_html(db: &Path, id: i64, path: &Path, window: f64) -> Result<()> {
    let store = Store::open_read(db)?;
    let head = store
        .soak_head(id)?
        .context("the soak vanished from the database")?;
    let summary = report::summarise(&store, &head)?;
    write_html(&store, &summary, path, Some(window.clamp(2.0, 60.0) as u32))
}

/// `memtrial report --soak [ID]` and `--follow`: the stored soak's table; with `follow`,
/// again every window (at most every 30 s) while its memtrial runs it.
pub(super) fn soak_report(
    db: &Path,
    id: Option<i64>,
    follow: bool,
    json: Option<&Path>,
    html: Option<&Path>,
    ui: &Ui,
) -> Result<Outcome> {
    let stop = stop_flag()?;
    loop {
        let store = Store::open_read(db)?;
        let id = match id {
            Some(id) => id,
            None => store.latest_soak()?.with_context(|| {
                format!(
                    "{} holds no soak; start one with `memtrial soak …`",
                    db.display()
                )
            })?,
        };
        let head = store
            .soak_head(id)?
            .with_context(|| format!("there is no soak {id} in {}", db.display()))?;
        let running = head.status == SoakStatus::Running && head.owner_alive;
        let summary = report::summarise(&store, &head)?;
        let every = head.settings.window_seconds.clamp(2.0, 30.0);
        if follow && running {
            if ui.live_progress() {
                // Redraw in place: clear the screen, the table from the top.
                let _ = ui.result("\x1b[2J\x1b[H");
            }
            present(&store, &summary, None, html, ui, Some(every as u32))?;
            drop(store);
            let until = std::time::Instant::now() + Duration::from_secs_f64(every);
            while std::time::Instant::now() < until {
                if stop.load(std::sync::atomic::Ordering::SeqCst) {
                    return Ok(Outcome::Interrupted);
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            continue;
        }
        if follow && head.status == SoakStatus::Running {
            ui.note(&format!("note: soak {id}'s memtrial is no longer running; `memtrial soak --resume {id}` carries it on"));
        }
        present(&store, &summary, json, html, ui, None)?;
        return Ok(Outcome::Ok);
    }
}
