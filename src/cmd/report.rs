//! The commands that read the store or the catalogue: `report`, `import`, `recommend`,
//! `list`, `variants`.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::cli::{GroupBy, ImportArgs, ReportArgs};
use memtrial::analysis::analyse;
use memtrial::analysis::recommend::recommend;
use memtrial::plan::catalog::{CatalogKind, Distro, LibraryLocator, CATALOG};
use memtrial::report::{self, escape, Grouping, Report};
use memtrial::store::Store;

use super::experiment::{check_outputs, present};
use super::ui::{Outcome, Ui};

pub(super) fn report_cmd(db: &Path, args: &ReportArgs, ui: &Ui) -> Result<Outcome> {
    let ReportArgs {
        id,
        by,
        output,
        soak: _,   // dispatched to `soak::soak_report`
        follow: _, // likewise
    } = args;
    check_outputs(output)?;
    let store = Store::open_read(db)?;
    let id = match id {
        Some(id) => *id,
        None => store.latest_id()?,
    };
    let exp = store.load(id)?;
    let grouping = match by {
        None => Grouping::Pooled,
        Some(GroupBy::Host) => Grouping::ByHost,
    };
    present(db, &exp, output, grouping, ui)?;
    Ok(Outcome::Ok)
}

/// `memtrial import FILE…`: every record, or none, into the store.
pub(super) fn import_cmd(db: &Path, args: &ImportArgs, ui: &Ui) -> Result<Outcome> {
    let ImportArgs { files } = args;
    import_files(db, files, ui)
}

/// Imports the records in `files` into `db` in one transaction (all or none) and says what
/// each joined or created: `memtrial import`, and `memtrial kube collect` (one file a call).
pub(crate) fn import_files(db: &Path, files: &[PathBuf], ui: &Ui) -> Result<Outcome> {
    let nothing = || format!("nothing was imported into {}", db.display());
    let records = memtrial::store::import::read_files(files).with_context(nothing)?;
    let mut store = Store::open(db)?;
    let outcomes =
        memtrial::store::import::import_records(&mut store, records).with_context(nothing)?;
    let mut text = String::new();
    for o in &outcomes {
        text.push_str(&format!(
            "{}: {} experiment {} (plan {}): {} new run(s), {} already present{}\n",
            escape::terminal(&o.source),
            if o.created { "new" } else { "joined" },
            o.experiment,
            memtrial::store::import::short(&o.fingerprint),
            o.new_runs,
            o.present_runs,
            if o.hosts.is_empty() {
                String::new()
            } else {
                // Hostnames come from the record: each on its line, whatever it holds.
                let hosts: Vec<String> = o.hosts.iter().map(|h| escape::terminal(h)).collect();
                format!("; host {}", hosts.join(", "))
            }
        ));
        for n in &o.notes {
            text.push_str(&format!("  note: {}\n", escape::terminal(n)));
        }
    }
    let mut ids: Vec<i64> = outcomes.iter().map(|o| o.experiment).collect();
    ids.dedup();
    if let [id] = ids[..] {
        text.push_str(&format!(
            "see it with: memtrial report --by host {id}{}\n",
            if db == Path::new("memtrial.db") {
                String::new()
            } else {
                format!(" --db {}", escape::shell_word(&db.display().to_string()))
            }
        ));
    }
    ui.result(&escape::terminal_lines(&text))?;
    Ok(Outcome::Ok)
}

pub(super) fn recommend_cmd(db: &Path, id: Option<i64>, ui: &Ui) -> Result<Outcome> {
    use memtrial::report::Exporter;
    let store = Store::open_read(db)?;
    let id = match id {
        Some(id) => id,
        None => store.latest_id()?,
    };
    let exp = store.load(id)?;
    if let Some(w) = report::hosts::pooled_warning(&exp) {
        ui.note(&w);
    }
    let analysis = analyse(&exp);
    let rec = recommend(&analysis);
    let text = report::text::RecommendationExporter.serialize(&Report {
        experiment: &exp,
        analysis: &analysis,
        recommendation: &rec,
    })?;
    ui.result(&String::from_utf8_lossy(&text))?;
    Ok(Outcome::Ok)
}

pub(super) fn list_cmd(db: &Path, ui: &Ui) -> Result<Outcome> {
    let store = Store::open_read(db)?;
    let list = store.list()?;
    ui.result(&report::text::experiment_list(db, &list))?;
    Ok(Outcome::Ok)
}

pub(super) fn variants_cmd(ui: &Ui) -> Result<Outcome> {
    let locator = LibraryLocator::new();
    let distro = Distro::detect();
    let ctx = super::experiment::plan_context(&locator)?;
    let mut t = comfy_table::Table::new();
    t.load_preset(comfy_table::presets::UTF8_FULL_CONDENSED);
    if !ui.color() {
        t.force_no_tty();
    }
    t.set_header(["variant", "available", "how", "what", "needs"]);
    for e in CATALOG.iter() {
        let (available, how) = match e.kind {
            CatalogKind::Glibc => ("yes".to_string(), "unchanged environment".to_string()),
            CatalogKind::ArenaMax(n) => ("yes".to_string(), format!("MALLOC_ARENA_MAX={n}")),
            CatalogKind::Preload(lib) => match locator.locate(lib) {
                Some(p) => ("yes".to_string(), format!("LD_PRELOAD={}", p.display())),
                None => (
                    "no".to_string(),
                    format!("install: {}", lib.install_hint(distro)),
                ),
            },
            CatalogKind::Knobs(_) => match memtrial::plan::catalog_variant_here(e.name, &ctx) {
                Ok(v) => ("yes".to_string(), knob_how(&v)),
                Err(why) => ("no".to_string(), why.to_string()),
            },
        };
        t.add_row([
            e.name.to_string(),
            available,
            how,
            e.description.to_string(),
            e.needs.to_string(),
        ]);
    }
    ui.result(&format!("{t}\nThe knobs (nothp, glibc-thp, jemalloc-thp, trim) run only when named: --variants glibc,nothp.\nCustom variants: --variant 'NAME=KEY=VALUE … preload:LIB thp:off|heap tunable:NAME=VALUE trim:DURATION' (LIB: jemalloc, tcmalloc, mimalloc or a path to a .so).\n"))?;
    Ok(Outcome::Ok)
}

/// How a knob variant runs: its settings, the preload, the knobs that are not settings.
fn knob_how(v: &memtrial::plan::Variant) -> String {
    let mut parts: Vec<String> = v
        .settings()
        .iter()
        .map(|(k, val)| format!("{k}={val}"))
        .collect();
    if let Some(p) = &v.preload {
        parts.insert(0, format!("LD_PRELOAD={}", p.display()));
    }
    if v.knobs.thp_off {
        parts.push("prctl(PR_SET_THP_DISABLE) at spawn".into());
    }
    if let Some(ms) = v.knobs.trim_ms {
        parts.push(format!(
            "malloc_trim(0) every {} (memtrial's probe library)",
            memtrial::plan::trim_text(ms)
        ));
    }
    parts.join(" ")
}
