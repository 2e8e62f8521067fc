//! The suite's own summary (scripts/test_summary.py, what scripts/test.sh ends with): on
//! each sample log in tests/fixtures/ci, the summary it gives is the one expected there.

use std::path::Path;
use std::process::Command;

#[test]
fn the_suites_summary_names_each_failure_within_its_last_lines() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new("python3")
        .arg(root.join("scripts/test_summary.py"))
        .arg("--check")
        .current_dir(root)
        .output()
        .expect("run python3 scripts/test_summary.py --check");
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
