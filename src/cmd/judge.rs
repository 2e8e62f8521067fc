//! `memtrial judge`: the flags checked and turned into groups and windows, the judgement
//! printed (and written as JSON).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};

use crate::cli::JudgeArgs;
use memtrial::judge::{check_selector, Group, JudgeSpec};
use memtrial::plan::settings as ranges;
use memtrial::report::printer::OutputTarget;

use super::ui::{Outcome, Ui};

/// A moment: RFC 3339, seconds optional (`2026-11-01T00:00Z`).
fn moment(flag: &str, text: &str) -> Result<f64> {
    let t = text.trim();
    let parsed = humantime::parse_rfc3339_weak(t).or_else(|_| {
        // Without seconds: HH:MM before the zone.
        let (date, zone) = match t.strip_suffix('Z') {
            Some(d) => (d, "Z"),
            None => (t, ""),
        };
        humantime::parse_rfc3339_weak(&format!("{date}:00{zone}"))
    });
    let at = parsed.with_context(|| {
        format!("{flag} {text:?}: give a moment as RFC 3339, e.g. 2026-11-01T00:00:00Z")
    })?;
    Ok(at
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64())
}

fn window(flag: &'static str, text: &str) -> Result<f64> {
    Ok(ranges::duration(flag, text, ranges::JUDGE_WINDOW)?.as_secs_f64())
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_secs_f64()
}

/// The groups the flags name, the baseline first.
fn groups(args: &JudgeArgs) -> Result<Vec<Group>> {
    if let Some(sel) = &args.selector {
        check_selector("--selector", sel).map_err(anyhow::Error::msg)?;
        let before = args.before.as_deref().unwrap_or_default();
        let Some((at, dur)) = before.split_once('/') else {
            bail!("--before {before:?}: give TIME/DURATION, e.g. 2026-11-01T00:00:00Z/7d");
        };
        let at = moment("--before", at)?;
        let dur = window("--before", dur)?;
        let after = match &args.after {
            Some(a) => window("--after", a)?,
            None => dur,
        };
        if args.align.is_some() && (dur % memtrial::judge::WEEK != 0.0 || after != dur) {
            bail!(
                "--align hour-of-week: give --before TIME/DURATION with whole weeks (7d, 14d, …) \
                 and no --after, or one as long: the blocks after must fall on the same hours \
                 of the week as the blocks before"
            );
        }
        let end = (at + after).min(now());
        if args.align.is_some() && end < at + after {
            bail!(
                "--align hour-of-week: the window after {} ends in the future; wait until it is \
                 over, or give a moment a whole window ago",
                before
            );
        }
        if end <= at {
            bail!(
                "--before: the moment {} is not in the past: there is nothing after it yet",
                before
            );
        }
        return Ok(vec![
            Group {
                name: "before".into(),
                selector: sel.clone(),
                start: at - dur,
                end: at,
            },
            Group {
                name: "after".into(),
                selector: sel.clone(),
                start: at,
                end,
            },
        ]);
    }
    let Some(base) = &args.baseline else {
        bail!("give --baseline SELECTOR with one or more --variant NAME=SELECTOR, or --selector with --before");
    };
    check_selector("--baseline", base).map_err(anyhow::Error::msg)?;
    if args.variants.is_empty() {
        bail!("--baseline needs at least one --variant NAME=SELECTOR to compare with");
    }
    let end = match &args.until {
        Some(u) => moment("--until", u)?,
        None => now(),
    };
    let start = end - window("--since", &args.since)?;
    let mut out = vec![Group {
        name: "baseline".into(),
        selector: base.clone(),
        start,
        end,
    }];
    for v in &args.variants {
        let Some((name, sel)) = v.split_once('=') else {
            bail!("--variant {v:?}: give NAME=SELECTOR, e.g. 'jemalloc=deployment=\"web\",variant=\"jemalloc\"'");
        };
        let ok_name = !name.is_empty()
            && name.len() <= 64
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
        if !ok_name || out.iter().any(|g| g.name == name) {
            bail!(
                "--variant {v:?}: the name before '=' must be new and 1 to 64 letters, digits, '_', '-' or '.'"
            );
        }
        check_selector(&format!("--variant {name}"), sel).map_err(anyhow::Error::msg)?;
        out.push(Group {
            name: name.into(),
            selector: sel.into(),
            start,
            end,
        });
    }
    Ok(out)
}

pub(super) fn judge_cmd(args: &JudgeArgs, ui: &Ui) -> Result<Outcome> {
    let json = args.json.as_deref().map(OutputTarget::from_path);
    if let Some(t) = &json {
        t.check("--json")?;
    }
    let html = args.html.as_deref().map(OutputTarget::from_path);
    if let Some(t) = &html {
        t.check("--html")?;
    }
    if json.as_ref().is_some_and(OutputTarget::is_stdout)
        && html.as_ref().is_some_and(OutputTarget::is_stdout)
    {
        bail!("--json - and --html -: only one of them can take standard output; give the other a file");
    }
    let block = args
        .block
        .as_deref()
        .map(|b| ranges::duration("--block", b, ranges::JUDGE_BLOCK))
        .transpose()?
        .map(|d| d.as_secs_f64());
    let warmup = args
        .warmup
        .as_deref()
        .map(|w| ranges::duration("--warmup", w, ranges::JUDGE_WARMUP))
        .transpose()?
        .map(|d| d.as_secs_f64());
    if let Some(m) = &args.metric {
        let ok = !m.is_empty()
            && m.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
            && !m.starts_with(|c: char| c.is_ascii_digit());
        if !ok {
            bail!("--metric {m:?}: give a metric name (letters, digits, '_' and ':'), without a selector");
        }
    }
    let spec = JudgeSpec {
        prometheus: args.prometheus.clone(),
        groups: groups(args)?,
        metric: args.metric.clone(),
        block,
        warmup,
        align_week: args.align.is_some(),
        latency: args.latency.clone(),
    };
    if let Some(l) = &spec.latency {
        memtrial::judge::parse_latency(l).map_err(anyhow::Error::msg)?;
    }
    let j =
        memtrial::judge::judge(&spec, &mut |what| ui.live(Some(what))).map_err(anyhow::Error::msg);
    ui.live(None);
    let j = j?;
    let stdout_taken = json.as_ref().is_some_and(OutputTarget::is_stdout)
        || html.as_ref().is_some_and(OutputTarget::is_stdout);
    if !stdout_taken {
        ui.human(&memtrial::judge::text(&j), false)?;
    }
    if let Some(t) = &json {
        let mut bytes = serde_json::to_vec_pretty(&j)?;
        bytes.push(b'\n');
        ui.write_output(t, &bytes, "--json")?;
    }
    if let Some(t) = &html {
        ui.write_output(t, memtrial::judge::html::render(&j).as_bytes(), "--html")?;
    }
    Ok(Outcome::Ok)
}
