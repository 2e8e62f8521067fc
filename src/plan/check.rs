//! Validation: the rules every plan keeps (`Plan::check`) and the rules for names.

use super::*;

impl Plan {
    /// The rules every plan keeps, however it was made (built here, or read back from a
    /// record on import): at least one variant; each name by [`VARIANT_NAME_RULE`] and
    /// once; the baseline one of them; each environment key a valid name, once, and no
    /// value with a NUL byte.
    pub fn check(&self) -> Result<(), PlanError> {
        self.fault().map_or(Ok(()), |f| Err(f.error))
    }

    /// The first way the plan's variants and baseline break the rules, and where: the one
    /// rule `run --plan`, `kube` and `import` hold plans to (import names the place as a
    /// JSON pointer, the others by the error alone).
    pub(crate) fn fault(&self) -> Option<PlanFault> {
        let at = |variant: usize, field: &'static str, value: String, error: PlanError| {
            Some(PlanFault {
                variant: Some(variant),
                field,
                value,
                error,
            })
        };
        let mut seen: Vec<&str> = Vec::new();
        for (i, v) in self.variants.iter().enumerate() {
            if !valid_name(&v.name) {
                let error = PlanError::BadVariantName {
                    name: shown_name(&v.name),
                };
                return at(i, "name", shown_name(&v.name), error);
            }
            if seen.contains(&v.name.as_str()) {
                let error = PlanError::DuplicateVariant {
                    name: v.name.clone(),
                };
                return at(i, "name", format!("{:?}", v.name), error);
            }
            seen.push(&v.name);
            let mut keys: Vec<&str> = Vec::new();
            for (k, val) in &v.env {
                let reason = env_key_problem(k).or_else(|| {
                    val.contains('\0').then_some(
                        "has a value containing a NUL byte (an environment cannot hold one)",
                    )
                });
                if let Some(reason) = reason {
                    let error = PlanError::BadEnvKey {
                        variant: v.name.clone(),
                        key: k.clone(),
                        reason,
                    };
                    return at(i, "env", format!("{k:?}"), error);
                }
                if keys.contains(&k.as_str()) {
                    let error = PlanError::DuplicateEnvKey {
                        variant: v.name.clone(),
                        key: k.clone(),
                    };
                    return at(i, "env", format!("{k:?}"), error);
                }
                keys.push(k);
            }
        }
        if !seen.contains(&self.baseline.as_str()) {
            return Some(PlanFault {
                variant: None,
                field: "baseline",
                value: format!("{:?}", self.baseline),
                error: PlanError::BaselineNotAVariant {
                    baseline: shown_name(&self.baseline),
                    variants: if seen.is_empty() {
                        "it has none".into()
                    } else {
                        seen.join(", ")
                    },
                },
            });
        }
        None
    }
}

/// The one rule for a variant's name, wherever it comes from (`--variant NAME=SPEC`, a
/// plan's `[[variant]]`, hence `memtrial kube`): 1 to 64 ASCII letters, digits, '-', '_'
/// or '.'. A name is written into environments, YAML, reports and file names; nothing
/// else can end a line, a comment or a document there.
pub(crate) const VARIANT_NAME_RULE: &str =
    "a variant's name is 1 to 64 letters, digits, '-', '_' or '.'";

/// Whether `name` follows [`VARIANT_NAME_RULE`].
pub(crate) fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// A name from outside for a message: escaped like Rust's `{:?}` (every control and line
/// break visible) and cut to 80 characters, so the message stays one readable line.
pub(crate) fn shown_name(name: &str) -> String {
    let cut: String = name.chars().take(80).collect();
    if cut.len() < name.len() {
        format!("{cut:?}… ({} bytes)", name.len())
    } else {
        format!("{cut:?}")
    }
}

/// Why `key` cannot be an environment variable's name, if it cannot: empty, or holding
/// `=` or a NUL byte (the kernel's `NAME=VALUE` strings could not say where it ends).
pub(crate) fn env_key_problem(key: &str) -> Option<&'static str> {
    if key.is_empty() {
        Some("is empty")
    } else if key.contains('=') {
        Some("contains '=' (the environment would read it as a different key and value)")
    } else if key.contains('\0') {
        Some("contains a NUL byte (an environment cannot hold one)")
    } else {
        None
    }
}
/// Where a plan breaks the rules ([`Plan::fault`]): the variant (by index; `None` for the
/// plan's own `baseline`), the field, the value as shown, and the error.
#[derive(Debug)]
pub(crate) struct PlanFault {
    pub(crate) variant: Option<usize>,
    pub(crate) field: &'static str,
    pub(crate) value: String,
    pub(crate) error: PlanError,
}
