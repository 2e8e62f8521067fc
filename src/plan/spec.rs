//! The `NAME=SPEC` parser of custom variants, with PATH and preload lookup.

use super::*;

/// Parses `NAME=SPEC`: SPEC holds `KEY=VALUE` settings and/or `preload:LIB`,
/// split like a shell would (quotes keep spaces inside a value).
pub fn parse_custom_variant(spec: &str, ctx: &PlanContext) -> Result<Variant, PlanError> {
    let bad = |reason: &str| PlanError::BadVariantSpec {
        spec: spec.to_string(),
        reason: reason.to_string(),
    };
    let (name, rest) = spec
        .split_once('=')
        .ok_or_else(|| bad("no '=' after the name"))?;
    let name = name.trim();
    if !valid_name(name) {
        return Err(bad(VARIANT_NAME_RULE));
    }
    let words = shell_words::split(rest).map_err(|e| bad(&e.to_string()))?;
    if words.is_empty() {
        return Err(bad("the spec is empty"));
    }
    let mut env = Vec::new();
    let mut preload = None;
    let mut preload_spec = None;
    let mut program: Option<VariantProgram> = None;
    let mut knob_words = Vec::new();
    for w in words {
        if let Some(k) = knob_word(&w) {
            knob_words.push(k.map_err(|why| bad(&why))?);
        } else if let Some(p) = w.strip_prefix("program:") {
            program = Some(variant_program(
                name,
                program,
                VariantProgram::Program {
                    spec: p.to_string(),
                    path: resolve_variant_program(name, "program:", p, ctx)?,
                },
            )?);
        } else if let Some(c) = w.strip_prefix("command:") {
            program = Some(variant_program(
                name,
                program,
                command_program(name, c, ctx)?,
            )?);
        } else if let Some(lib) = w.strip_prefix("preload:") {
            if preload.is_some() {
                return Err(bad("more than one preload: (use one library per variant)"));
            }
            let path = resolve_preload(name, lib, ctx)?;
            preload = Some(path);
            preload_spec = Some(lib.to_string());
        } else if let Some((k, v)) = w.split_once('=') {
            env.push(env_setting(spec, name, &w, (k, v), &env)?);
        } else {
            return Err(bad(&format!(
                "'{w}' is neither KEY=VALUE, preload:LIB, program:PATH, command:'…', \
                 thp:off|heap, tunable:NAME=VALUE nor trim:DURATION"
            )));
        }
    }
    let knobs = if knob_words.is_empty() {
        Knobs::default()
    } else {
        let pre = preload_spec.as_deref().zip(preload.as_deref());
        resolve_knobs(knob_words, &env, pre, &KnobHost::detect()).map_err(|why| bad(&why))?
    };
    Ok(Variant {
        name: name.to_string(),
        env,
        preload,
        preload_spec,
        origin: VariantOrigin::Custom,
        program,
        knobs,
    })
}

/// A variant's `command:'…'` word: the whole command, its program found as the command's.
fn command_program(name: &str, c: &str, ctx: &PlanContext) -> Result<VariantProgram, PlanError> {
    let argv = shell_words::split(c).map_err(|e| PlanError::BadVariantProgram {
        variant: name.to_string(),
        what: format!("command:{c}"),
        reason: format!("cannot be split like a shell would: {e}"),
    })?;
    let Some(first) = argv.first() else {
        return Err(PlanError::BadVariantProgram {
            variant: name.to_string(),
            what: "command:".into(),
            reason: "is empty; give the whole command, e.g. command:'ruby --yjit job.rb'".into(),
        });
    };
    let path = resolve_variant_program(name, "command:", first, ctx)?;
    Ok(VariantProgram::Command { argv, path })
}

/// A variant's `KEY=VALUE` word `w` of `spec`, checked against the settings `env` already
/// has.
fn env_setting(
    spec: &str,
    name: &str,
    w: &str,
    (k, v): (&str, &str),
    env: &[(String, String)],
) -> Result<(String, String), PlanError> {
    let bad = |reason: String| PlanError::BadVariantSpec {
        spec: spec.to_string(),
        reason,
    };
    let bad_key = |reason| PlanError::BadEnvKey {
        variant: name.to_string(),
        key: k.to_string(),
        reason,
    };
    if let Some(reason) = env_key_problem(k) {
        return Err(bad_key(reason));
    }
    if k.starts_with('-') {
        // `RUBYOPT=--yjit --yjit-exec-mem-size=32`: the spec is split like a shell
        // splits it, so an unquoted value with a space became two settings.
        return Err(bad(format!(
            "'{w}' is not a setting but part of the value before it: quote a value \
             with spaces, e.g. 'yjit32=RUBYOPT=\"--yjit --yjit-exec-mem-size=32\"'"
        )));
    }
    if v.contains('\0') {
        return Err(bad_key(
            "has a value containing a NUL byte (an environment cannot hold one)",
        ));
    }
    if env.iter().any(|(seen, _)| seen == k) {
        return Err(PlanError::DuplicateEnvKey {
            variant: name.to_string(),
            key: k.to_string(),
        });
    }
    if k == "LD_PRELOAD" {
        return Err(bad(
            "use preload:LIB instead of LD_PRELOAD=…, so memtrial can verify it".into(),
        ));
    }
    Ok((k.to_string(), v.to_string()))
}

/// One `program:` or `command:` per variant.
pub(super) fn variant_program(
    variant: &str,
    before: Option<VariantProgram>,
    new: VariantProgram,
) -> Result<VariantProgram, PlanError> {
    match before {
        None => Ok(new),
        Some(old) => Err(PlanError::BadVariantProgram {
            variant: variant.to_string(),
            what: format!("{} and {}", old.describe(), new.describe()),
            reason: "replace the program twice; give one: program:PATH runs another program \
                     with the command's arguments, command:'…' replaces the whole command"
                .into(),
        }),
    }
}

/// The executable a `program:` or `command:` names, found and checked as the command's own.
pub(super) fn resolve_variant_program(
    variant: &str,
    key: &str,
    program: &str,
    ctx: &PlanContext,
) -> Result<PathBuf, PlanError> {
    let bad = |reason: String| PlanError::BadVariantProgram {
        variant: variant.to_string(),
        what: format!("{key}{program}"),
        reason,
    };
    if program.is_empty() {
        return Err(bad(
            "names no program; give a path, e.g. program:/opt/ruby/bin/ruby".into(),
        ));
    }
    match resolve_program(program, &ctx.path_var, &ctx.workdir) {
        Ok(p) => Ok(p),
        Err(PlanError::NotExecutable { .. }) => Err(bad(
            "is not an executable file (a directory, or no x permission: chmod +x it?)".into(),
        )),
        Err(PlanError::CommandNotFound { .. }) if program.contains('/') => Err(bad(
            "does not exist; give the path of an executable file".into(),
        )),
        Err(PlanError::CommandNotFound { path, .. }) => Err(bad(format!(
            "is not found in PATH ({path}); give its full path"
        ))),
        Err(e) => Err(e),
    }
}

pub(super) fn resolve_preload(
    variant: &str,
    lib: &str,
    ctx: &PlanContext,
) -> Result<PathBuf, PlanError> {
    if let Some(a) = LibAllocator::from_name(lib) {
        return ctx
            .locator
            .locate(a)
            .ok_or_else(|| PlanError::LibraryMissing {
                variant: variant.to_string(),
                lib: a.name(),
                hint: a.install_hint(ctx.distro),
            });
    }
    let bad = |reason: String| PlanError::BadPreloadPath {
        variant: variant.to_string(),
        path: lib.to_string(),
        reason,
    };
    if !lib.contains('/') {
        return Err(bad(format!(
            "is neither a known allocator ({}) nor a path to a .so file",
            LibAllocator::ALL.map(|a| a.name()).join(", ")
        )));
    }
    let path = ctx.workdir.join(lib);
    match std::fs::metadata(&path) {
        Ok(m) if m.is_file() => {}
        Ok(_) => return Err(bad("is not a file".into())),
        Err(e) => return Err(bad(format!("cannot be read: {e}"))),
    }
    // The dynamic loader wants an absolute path to be sure which file it maps.
    let full = std::fs::canonicalize(&path).map_err(|e| bad(format!("cannot be resolved: {e}")))?;
    if full
        .to_string_lossy()
        .contains(|c: char| c.is_whitespace() || c == ':')
    {
        return Err(bad(format!(
            "resolves to '{}': LD_PRELOAD splits on spaces and colons, so the loader would ignore it; use a path without them (a symlink will do)",
            full.display()
        )));
    }
    Ok(full)
}

/// Finds the program like `execvp` would, and checks it can be executed.
pub fn resolve_program(cmd: &str, path_var: &str, workdir: &Path) -> Result<PathBuf, PlanError> {
    use std::os::unix::fs::PermissionsExt;
    let check = |p: &Path| -> Option<bool> {
        let m = std::fs::metadata(p).ok()?;
        Some(m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if cmd.contains('/') {
        let p = workdir.join(cmd);
        return match check(&p) {
            Some(true) => Ok(p),
            Some(false) => Err(PlanError::NotExecutable {
                command: cmd.to_string(),
            }),
            None => Err(PlanError::CommandNotFound {
                command: cmd.to_string(),
                path: "as a path it does not exist".into(),
            }),
        };
    }
    let mut non_exec = None;
    for dir in path_var.split(':').filter(|d| !d.is_empty()) {
        let p = Path::new(dir).join(cmd);
        match check(&p) {
            Some(true) => return Ok(p),
            Some(false) => non_exec = Some(p),
            None => {}
        }
    }
    match non_exec {
        Some(_) => Err(PlanError::NotExecutable {
            command: cmd.to_string(),
        }),
        None => Err(PlanError::CommandNotFound {
            command: cmd.to_string(),
            path: format!("PATH={path_var}"),
        }),
    }
}
