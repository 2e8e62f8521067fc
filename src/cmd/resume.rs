//! `memtrial run --resume [ID]`: the command-line edge of a resume. The same plan and
//! seed; only the missing slots of the schedule run.
//!
//! Data from another host is data, never a command: without an id, only an experiment
//! made here by `memtrial run` is resumed; an imported one (or one recorded on another
//! host) runs only when named *and* its command is repeated with `--confirm-command`.

use std::path::Path;

use anyhow::{bail, Context, Result};

use super::experiment::{check_outputs, fit_fd_limit, isolation, run_and_present};
use super::ui::{Outcome, Ui};
use crate::cli::OutputArgs;
use memtrial::linux::host::HostInfo;
use memtrial::plan::{Plan, VariantProgram};
use memtrial::record::{Experiment, ExperimentStatus, RunStatus};
use memtrial::report::escape;
use memtrial::runner::Start;
use memtrial::schedule::schedule;
use memtrial::store::{Origin, Store};

/// Resumes experiment `id` (or the newest made here) of `db`.
pub(crate) fn resume(
    db: &Path,
    id: Option<i64>,
    confirm: Option<&str>,
    output: &OutputArgs,
    ui: &Ui,
) -> Result<Outcome> {
    check_outputs(output)?;
    let mut store = Store::open_existing(db)?;
    let here = HostInfo::detect();
    let id = match id {
        Some(id) => id,
        None => store.latest_local_id(&here.hostname)?.ok_or_else(|| {
            anyhow::anyhow!(
                "{} holds no experiment made on this host ({}) by `memtrial run`; an imported \
                 experiment is resumed only by naming it: memtrial run --resume ID \
                 (`memtrial list` shows the ids)",
                escape::terminal(&db.display().to_string()),
                escape::terminal(&here.hostname)
            )
        })?,
    };
    let exp = store.load(id)?;
    if exp.status == ExperimentStatus::Complete {
        bail!("experiment {id} is complete; nothing to resume (memtrial report {id} shows it)");
    }
    let origin = store.origin(id)?;
    let made_here = origin == Origin::Local && exp.host.hostname == here.hostname;
    if !made_here {
        confirmed(&exp, origin, confirm)?;
    } else if confirm.is_some() {
        ui.note(&format!(
            "note: experiment {id} was made on this host; --confirm-command is not needed"
        ));
    }
    let plan = exp.plan.clone();
    if !plan.workdir.is_dir() {
        bail!(
            "cannot resume experiment {id}: it runs its command in {}, which does not exist \
             here; create that directory (with what the command needs) and resume again",
            escape::terminal(&plan.workdir.display().to_string())
        );
    }
    let Some(program) = plan.command.first() else {
        bail!("cannot resume experiment {id}: its stored plan has no command (the database is damaged)");
    };
    memtrial::plan::resolve_program(
        program,
        &std::env::var("PATH").unwrap_or_default(),
        &plan.workdir,
    )
    .with_context(|| format!("cannot resume experiment {id}"))?;
    if let Some(s) = &plan.server {
        fit_fd_limit(s.connections, s.threads, ui)?;
    }
    let deleted = store.delete_interrupted(id)?;
    let tally = Tally::of(&exp);
    ui.note(&tally.message(id, deleted, &here));
    let isolation = isolation(&plan.limits, ui)?;
    run_and_present(
        db,
        &mut store,
        &plan,
        Start::Resume {
            experiment: id,
            done: &tally.done,
            host: &here,
        },
        &isolation,
        output,
        ui,
        None,
    )
}

/// What a resume keeps and runs: the schedule's slots with a stored run are kept; runs
/// outside the schedule (imported from other hosts, numbered after it) are no slot's and
/// stay apart, by host.
struct Tally {
    /// The slots of the schedule whose run is stored.
    done: Vec<u32>,
    total: usize,
    /// Runs stored outside the schedule, and their hosts.
    apart: usize,
    apart_hosts: Vec<String>,
}

impl Tally {
    fn of(exp: &Experiment) -> Tally {
        let total = schedule(
            exp.plan.variants.len(),
            exp.plan.warmup,
            exp.plan.runs,
            exp.plan.seed,
        )
        .len();
        let mut done = Vec::new();
        let mut apart = 0;
        let mut apart_hosts: Vec<String> = Vec::new();
        for (i, (seq, r)) in exp.seqs.iter().zip(&exp.runs).enumerate() {
            if (*seq as usize) < total {
                if r.status != RunStatus::Interrupted && !done.contains(seq) {
                    done.push(*seq);
                }
            } else {
                apart += 1;
                let h = &exp.host_of(i).hostname;
                if !apart_hosts.contains(h) {
                    apart_hosts.push(h.clone());
                }
            }
        }
        Tally {
            done,
            total,
            apart,
            apart_hosts,
        }
    }

    fn message(&self, id: i64, deleted: usize, here: &HostInfo) -> String {
        let mut m = format!(
            "resuming experiment {id}: {} of its {} scheduled run(s) kept, {} to run on {}",
            self.done.len(),
            self.total,
            self.total - self.done.len(),
            escape::terminal(&here.hostname)
        );
        if deleted > 0 {
            m.push_str(&format!(" ({deleted} interrupted run(s) among them)"));
        }
        if self.apart > 0 {
            m.push_str(&format!(
                "; {} run(s) of other hosts ({}) are not slots of this schedule and stay apart: \
                 compare within a host with `memtrial report --by host {id}`",
                self.apart,
                escape::terminal(&self.apart_hosts.join(", "))
            ));
        }
        m
    }
}

/// Refuses to run an experiment that was not made here unless `confirm` repeats its
/// command exactly; the refusal shows what would run here, and where it came from.
fn confirmed(exp: &Experiment, origin: Origin, confirm: Option<&str>) -> Result<()> {
    let command = escape::shell_line(&exp.plan.command);
    if confirm == Some(command.as_str()) {
        return Ok(());
    }
    let whence = match origin {
        Origin::Imported => format!(
            "was imported from a record of host {}",
            escape::terminal(&exp.host.hostname)
        ),
        Origin::Local => format!(
            "was made on host {}, not this one",
            escape::terminal(&exp.host.hostname)
        ),
    };
    let mut text = format!(
        "experiment {} {whence}: resuming it runs its commands on this machine, as this user:\n{}",
        exp.id,
        what_runs(&exp.plan)
    );
    match confirm {
        Some(given) => text.push_str(&format!(
            "--confirm-command {} is not its command; nothing was run.\n",
            escape::shell_word(given)
        )),
        None => text.push_str("nothing was run.\n"),
    }
    text.push_str(&format!(
        "If you trust all of this, resume it by naming it and repeating its command:\n  memtrial run --resume {} --confirm-command {}",
        exp.id,
        escape::shell_word(&command)
    ));
    bail!(text)
}

/// Everything of a plan that executes or is loaded here, one line each, escaped.
fn what_runs(plan: &Plan) -> String {
    let mut out = format!(
        "  command: {}\n  in: {}\n",
        escape::shell_line(&plan.command),
        escape::terminal(&plan.workdir.display().to_string())
    );
    if let Some(w) = &plan.worker {
        if let Some(b) = &w.before {
            out.push_str(&format!(
                "  before each run: sh -c {}\n",
                escape::shell_word(b)
            ));
        }
        if let Some(d) = &w.driver {
            out.push_str(&format!("  driver: sh -c {}\n", escape::shell_word(d)));
        }
    }
    for v in &plan.variants {
        let mut parts: Vec<String> = v
            .env
            .iter()
            .map(|(k, x)| escape::shell_assignment(k, x))
            .collect();
        if let Some(p) = &v.preload {
            parts.push(format!(
                "preload {}",
                escape::shell_word(&p.display().to_string())
            ));
        }
        match &v.program {
            Some(VariantProgram::Program { path, .. }) => parts.push(format!(
                "program {}",
                escape::shell_word(&path.display().to_string())
            )),
            Some(VariantProgram::Command { argv, .. }) => {
                parts.push(format!("command {}", escape::shell_line(argv)))
            }
            None => {}
        }
        if !parts.is_empty() {
            out.push_str(&format!(
                "  variant {}: {}\n",
                escape::terminal(&v.name),
                parts.join(" ")
            ));
        }
    }
    out
}
