//! The error type of building and reading plans.

use std::path::PathBuf;

use super::{MAX_PLAN_BYTES, VARIANT_NAME_RULE};

/// Errors building a plan. Each names the flag or setting, the value and what to do.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("unknown variant '{name}'; known variants: {known}. Define your own with --variant NAME=SPEC")]
    UnknownVariant { name: String, known: String },
    #[error(
        "variant '{variant}' needs {lib}, which is not installed here; install it with: {hint}"
    )]
    LibraryMissing {
        variant: String,
        lib: &'static str,
        hint: String,
    },
    #[error("variant '{variant}': preload library '{path}' {reason}")]
    BadPreloadPath {
        variant: String,
        path: String,
        reason: String,
    },
    #[error("bad variant definition '{spec}': {reason}. Expected NAME=SPEC where SPEC is space-separated KEY=VALUE settings, preload:LIB and/or one program:PATH or command:'…', and knobs thp:off, thp:heap, tunable:NAME=VALUE, trim:DURATION, e.g. 'je=preload:jemalloc MALLOC_CONF=narenas:2'")]
    BadVariantSpec { spec: String, reason: String },
    #[error("variant '{variant}' sets {key} twice; give each environment key once (in its spec or its env table), or runs would not get what the variant says")]
    DuplicateEnvKey { variant: String, key: String },
    #[error("variant '{variant}': environment key {key:?} {reason}")]
    BadEnvKey {
        variant: String,
        key: String,
        reason: &'static str,
    },
    #[error("variant '{variant}': {what} {reason}")]
    BadVariantProgram {
        variant: String,
        what: String,
        reason: String,
    },
    #[error("variant name '{name}' is used twice")]
    DuplicateVariant { name: String },
    #[error("variant name {name}: {VARIANT_NAME_RULE}")]
    BadVariantName { name: String },
    #[error("the baseline {baseline} is not one of the plan's variants ({variants})")]
    BaselineNotAVariant { baseline: String, variants: String },
    #[error("plan file {path}: {size}; memtrial reads plans of at most {MAX_PLAN_BYTES} bytes (1 MiB): a plan is settings, not data — put large inputs in files the plan names")]
    PlanTooBig { path: PathBuf, size: String },
    #[error("no command to run: give it after '--' (memtrial run -- ./job --flag) or as `command` in the plan file")]
    NoCommand,
    #[error("command '{command}' not found in PATH ({path})")]
    CommandNotFound { command: String, path: String },
    #[error("command '{command}' is not an executable file")]
    NotExecutable { command: String },
    #[error("{flag} {value}: {reason}")]
    BadValue {
        flag: &'static str,
        value: String,
        reason: String,
    },
    #[error("plan file {path}: {message}")]
    PlanFile { path: PathBuf, message: String },
}
