//! What a test needs and does not find: skipped with the reason, or a failure under
//! `MEMTRIAL_TEST_STRICT=1` (set by scripts/test.sh, so CI never goes green by skipping).
//!
//! One file for both kinds of test: the library's unit tests compile it as
//! `crate::testing` (under `cfg(test)`), and the integration tests include the
//! same file from tests/it/common.rs with `#[path]`.

/// Whether missing requirements fail the test instead of skipping it.
pub fn strict() -> bool {
    std::env::var("MEMTRIAL_TEST_STRICT").is_ok_and(|v| v == "1")
}

/// Checks one requirement of the running test. When `check` says it is missing: under
/// `MEMTRIAL_TEST_STRICT=1` the test fails; otherwise it prints
/// `skipped: <test> needs <what> (<how to get it>)` and returns false, and the test returns.
pub fn require(what: &str, how: &str, check: impl FnOnce() -> bool) -> bool {
    if check() {
        return true;
    }
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("this test");
    let msg = format!("{test} needs {what} ({how})");
    assert!(!strict(), "MEMTRIAL_TEST_STRICT=1 and {msg}");
    eprintln!("skipped: {msg}");
    false
}
