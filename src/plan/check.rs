//! Validation: the rules every plan keeps (`Plan::check`) and the rules for names.

use super::*;

impl Plan {
    /// The rules every plan keeps, however it was made (built here, or read back from a
    /// record on import): at least one variant; each name by [`VARIANT_NAME_RULE`] and
    /// once; the baseline one of them; each environment key a valid name, once, and no
    /// value with a NUL byte.
    pub fn check(&self) -> Result<(), PlanError> {
        let mut seen: Vec<&str> = Vec::new();
        for v in &self.variants {
            if !valid_name(&v.name) {
                return Err(PlanError::BadVariantName {
                    name: shown_name(&v.name),
                });
            }
            if seen.contains(&v.name.as_str()) {
                return Err(PlanError::DuplicateVariant {
                    name: v.name.clone(),
                });
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
                    return Err(PlanError::BadEnvKey {
                        variant: v.name.clone(),
                        key: k.clone(),
                        reason,
                    });
                }
                if keys.contains(&k.as_str()) {
                    return Err(PlanError::DuplicateEnvKey {
                        variant: v.name.clone(),
                        key: k.clone(),
                    });
                }
                keys.push(k);
            }
        }
        if !seen.contains(&self.baseline.as_str()) {
            return Err(PlanError::BaselineNotAVariant {
                baseline: shown_name(&self.baseline),
                variants: if seen.is_empty() {
                    "it has none".into()
                } else {
                    seen.join(", ")
                },
            });
        }
        Ok(())
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
