//! Which variants run: catalog and custom variants, chosen by `--variants`, and the
//! baseline.

use super::*;

/// The variants defined by `--variant NAME=SPEC` (or the plan), checked for clashes.
/// The names of custom variants (`NAME=SPEC`, as flags and plan files give them), checked
/// before anything is resolved: each follows [`VARIANT_NAME_RULE`], none is a catalog
/// variant's name, none comes twice. `run` and `kube` both check names here.
pub(crate) fn custom_variant_names(specs: &[String]) -> Result<Vec<&str>, PlanError> {
    let mut names: Vec<&str> = Vec::new();
    for spec in specs {
        // A spec without '=' is refused by its parser, with what it lacks.
        let Some((name, _)) = spec.split_once('=') else {
            continue;
        };
        let name = name.trim();
        if !valid_name(name) {
            return Err(PlanError::BadVariantName {
                name: shown_name(name),
            });
        }
        if catalog_entry(name).is_some() || names.contains(&name) {
            return Err(PlanError::DuplicateVariant {
                name: name.to_string(),
            });
        }
        names.push(name);
    }
    Ok(names)
}

pub(super) fn custom_variants(
    specs: &[String],
    ctx: &PlanContext,
) -> Result<Vec<Variant>, PlanError> {
    custom_variant_names(specs)?;
    let mut custom: Vec<Variant> = Vec::new();
    for spec in specs {
        let v = parse_custom_variant(spec, ctx)?;
        if catalog_entry(&v.name).is_some() || custom.iter().any(|c| c.name == v.name) {
            return Err(PlanError::DuplicateVariant { name: v.name });
        }
        custom.push(v);
    }
    Ok(custom)
}

/// Every variant memtrial knows here, catalog and custom, for messages.
fn known_variants(custom: &[Variant]) -> String {
    let mut names: Vec<String> = catalog_names().iter().map(|s| s.to_string()).collect();
    names.extend(custom.iter().map(|c| c.name.clone()));
    names.join(", ")
}

/// The baseline when a plan names none.
pub(crate) const DEFAULT_BASELINE: &str = "glibc";

/// The variants a plan runs, by name, in order: the baseline first (when it was not
/// among them), then the listed ones, then the custom ones not listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Selection<'a> {
    pub names: Vec<&'a str>,
    /// The baseline was not listed and was put first.
    pub baseline_added: bool,
}

/// Why a list of variant names selects nothing runnable. Each caller words it for its
/// own setting (`--variants` for `run`, the plan's `variants` for `kube`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SelectionError<'a> {
    /// Neither a catalog variant nor a custom one.
    Unknown(&'a str),
    /// Listed twice.
    Twice(&'a str),
    /// The list (after dropping empty names) is empty and there are no custom variants.
    Empty,
}

/// The one variant-selection rule, used by `run` (building a plan) and by `kube`
/// (sizing the Job), so that the pod at an index runs the slot `kube` counted there.
///
/// `listed` are the names asked for (each trimmed; empty ones skipped): each must be a
/// catalog variant or one of `custom` (the names of the custom variants, as
/// [`custom_variant_names`] gives them), and come once. The custom variants are always
/// run, after the listed ones. The baseline comes first; it must be known too.
pub(crate) fn select_variants<'a>(
    listed: &'a [String],
    custom: &[&'a str],
    baseline: &'a str,
) -> Result<Selection<'a>, SelectionError<'a>> {
    let known = |n: &str| custom.contains(&n) || catalog_entry(n).is_some();
    let mut names: Vec<&'a str> = Vec::new();
    for name in listed.iter().map(|n| n.trim()).filter(|n| !n.is_empty()) {
        if !known(name) {
            return Err(SelectionError::Unknown(name));
        }
        if names.contains(&name) {
            return Err(SelectionError::Twice(name));
        }
        names.push(name);
    }
    // Custom variants are always run: they were defined for a reason.
    for &c in custom {
        if !names.contains(&c) {
            names.push(c);
        }
    }
    if names.is_empty() {
        return Err(SelectionError::Empty);
    }
    let baseline_added = !names.contains(&baseline);
    if baseline_added {
        if !known(baseline) {
            return Err(SelectionError::Unknown(baseline));
        }
        names.insert(0, baseline);
    }
    Ok(Selection {
        names,
        baseline_added,
    })
}

/// The variants to run: those named by `--variants` (custom ones always included), or
/// the custom ones, or every catalog variant installed here (noting the others); the
/// baseline first (noted when the user named it and not among them). The choice is
/// [`select_variants`]'s.
pub(super) fn choose_variants(
    names: Option<&[String]>,
    custom: &[Variant],
    baseline: &str,
    baseline_given: bool,
    ctx: &PlanContext,
    notes: &mut Vec<String>,
) -> Result<Vec<Variant>, PlanError> {
    // Without `--variants` and custom variants: every catalog variant installed here.
    let mut installed: Vec<Variant> = Vec::new();
    let listed: Vec<String> = match names {
        Some(names) => names.to_vec(),
        None if !custom.is_empty() => Vec::new(),
        None => {
            for entry in catalog::CATALOG.iter().filter(|e| e.by_default) {
                match catalog_variant(entry.name, ctx, false)? {
                    Some(v) => installed.push(v),
                    None => {
                        if let CatalogKind::Preload(lib) = entry.kind {
                            notes.push(format!(
                                "skipping {}: not installed here ({})",
                                entry.name,
                                lib.install_hint(ctx.distro)
                            ));
                        }
                    }
                }
            }
            installed.iter().map(|v| v.name.clone()).collect()
        }
    };
    let custom_names: Vec<&str> = custom.iter().map(|c| c.name.as_str()).collect();
    let selection = select_variants(&listed, &custom_names, baseline).map_err(|e| match e {
        SelectionError::Unknown(name) => PlanError::UnknownVariant {
            name: name.to_string(),
            known: known_variants(custom),
        },
        SelectionError::Twice(name) => PlanError::DuplicateVariant {
            name: name.to_string(),
        },
        SelectionError::Empty => PlanError::BadValue {
            flag: "--variants",
            value: names.map(|n| n.join(",")).unwrap_or_default(),
            reason: format!(
                "no variants selected; known variants: {}",
                known_variants(custom)
            ),
        },
    })?;
    if selection.baseline_added && baseline_given {
        notes.push(format!("added the baseline '{baseline}' to the variants"));
    }
    let mut chosen = Vec::with_capacity(selection.names.len());
    for name in selection.names {
        let v = if let Some(c) = custom.iter().find(|c| c.name == name) {
            c.clone()
        } else if let Some(v) = installed.iter().find(|v| v.name == name) {
            v.clone()
        } else {
            catalog_variant(name, ctx, true)?.expect("required")
        };
        chosen.push(v);
    }
    Ok(chosen)
}

/// A catalog variant as it would run here, or why it cannot (for `memtrial variants`).
pub fn catalog_variant_here(name: &str, ctx: &PlanContext) -> Result<Variant, PlanError> {
    catalog_variant(name, ctx, true).map(|v| v.expect("required"))
}

/// A catalog variant; `Ok(None)` when its library is missing and it was not required.
pub(super) fn catalog_variant(
    name: &str,
    ctx: &PlanContext,
    required: bool,
) -> Result<Option<Variant>, PlanError> {
    let entry = catalog_entry(name).ok_or_else(|| PlanError::UnknownVariant {
        name: name.to_string(),
        known: catalog_names().join(", "),
    })?;
    let (env, preload, preload_spec) = match entry.kind {
        CatalogKind::Knobs(spec) => {
            // Built as a custom variant of its spec, with the same checks.
            return match parse_custom_variant(&format!("{name}={spec}"), ctx) {
                Ok(v) => Ok(Some(Variant {
                    origin: VariantOrigin::Catalog,
                    ..v
                })),
                Err(PlanError::LibraryMissing { .. }) if !required => Ok(None),
                Err(PlanError::BadVariantSpec { reason, .. }) => Err(PlanError::BadVariantSpec {
                    spec: format!("{name} (built in: {spec})"),
                    reason,
                }),
                Err(e) => Err(e),
            };
        }
        CatalogKind::Glibc => (vec![], None, None),
        CatalogKind::ArenaMax(n) => (
            vec![("MALLOC_ARENA_MAX".to_string(), n.to_string())],
            None,
            None,
        ),
        CatalogKind::Preload(lib) => match ctx.locator.locate(lib) {
            Some(p) => (vec![], Some(p), Some(lib.name().to_string())),
            None if required => {
                return Err(PlanError::LibraryMissing {
                    variant: name.to_string(),
                    lib: lib.name(),
                    hint: lib.install_hint(ctx.distro),
                })
            }
            None => return Ok(None),
        },
    };
    Ok(Some(Variant {
        name: name.to_string(),
        env,
        preload,
        preload_spec,
        origin: VariantOrigin::Catalog,
        program: None,
        knobs: Knobs::default(),
    }))
}
