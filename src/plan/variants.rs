//! Which variants run: catalog and custom variants, chosen by `--variants`, and the
//! baseline.

use super::*;

/// The variants defined by `--variant NAME=SPEC` (or the plan), checked for clashes.
/// The names of custom variants (`NAME=SPEC`, as flags and plan files give them), checked
/// before anything is resolved: each follows [`VARIANT_NAME_RULE`], none is a catalog
/// variant's name, none comes twice. `run` and `kube` both check names here.
pub fn custom_variant_names(specs: &[String]) -> Result<Vec<&str>, PlanError> {
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
pub(super) fn known_variants(custom: &[Variant]) -> String {
    let mut names: Vec<String> = catalog_names().iter().map(|s| s.to_string()).collect();
    names.extend(custom.iter().map(|c| c.name.clone()));
    names.join(", ")
}

/// The variants to run: those named by `--variants` (custom ones always included), or
/// the custom ones, or every catalog variant installed here (noting the others).
pub(super) fn choose_variants(
    names: Option<&[String]>,
    custom: &[Variant],
    ctx: &PlanContext,
    notes: &mut Vec<String>,
) -> Result<Vec<Variant>, PlanError> {
    let mut chosen: Vec<Variant> = Vec::new();
    let add = |v: Variant, chosen: &mut Vec<Variant>| -> Result<(), PlanError> {
        if chosen.iter().any(|c| c.name == v.name) {
            return Err(PlanError::DuplicateVariant { name: v.name });
        }
        chosen.push(v);
        Ok(())
    };
    match names {
        Some(names) => {
            for name in names {
                let name = name.trim();
                if name.is_empty() {
                    continue;
                }
                if let Some(c) = custom.iter().find(|c| c.name == name) {
                    add(c.clone(), &mut chosen)?;
                } else if catalog_entry(name).is_some() {
                    add(
                        catalog_variant(name, ctx, true)?.expect("required"),
                        &mut chosen,
                    )?;
                } else {
                    return Err(PlanError::UnknownVariant {
                        name: name.to_string(),
                        known: known_variants(custom),
                    });
                }
            }
            // Custom variants are always run: they were defined for a reason.
            for c in custom {
                if !chosen.iter().any(|v| v.name == c.name) {
                    chosen.push(c.clone());
                }
            }
        }
        None if !custom.is_empty() => {
            // The baseline plus the custom variants.
            chosen.extend(custom.iter().cloned());
        }
        None => {
            for entry in catalog::CATALOG.iter() {
                match catalog_variant(entry.name, ctx, false)? {
                    Some(v) => chosen.push(v),
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
        }
    }
    if chosen.is_empty() {
        return Err(PlanError::BadValue {
            flag: "--variants",
            value: names.map(|n| n.join(",")).unwrap_or_default(),
            reason: format!(
                "no variants selected; known variants: {}",
                known_variants(custom)
            ),
        });
    }
    Ok(chosen)
}

/// The baseline runs first among the variants: added when it was not chosen (and said
/// so when the user named it).
pub(super) fn add_baseline(
    chosen: &mut Vec<Variant>,
    baseline: &str,
    given: bool,
    custom: &[Variant],
    ctx: &PlanContext,
    notes: &mut Vec<String>,
) -> Result<(), PlanError> {
    if chosen.iter().any(|v| v.name == baseline) {
        return Ok(());
    }
    let base = if let Some(c) = custom.iter().find(|c| c.name == baseline) {
        c.clone()
    } else if catalog_entry(baseline).is_some() {
        catalog_variant(baseline, ctx, true)?.expect("required")
    } else {
        return Err(PlanError::UnknownVariant {
            name: baseline.to_string(),
            known: known_variants(custom),
        });
    };
    if given {
        notes.push(format!("added the baseline '{baseline}' to the variants"));
    }
    chosen.insert(0, base);
    Ok(())
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
    }))
}
