//! The layering check the build runs (build/layers.rs), held to trees that break it.

#[path = "../../build/layers.rs"]
#[allow(dead_code)]
mod check;

use std::path::Path;

fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (path, text) in files {
        let p = dir.path().join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    dir
}

#[test]
fn memtrials_own_tree_keeps_its_layers() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    assert_eq!(check::violations(&src), Vec::<String>::new());
}

#[test]
fn a_wrong_way_import_is_named_with_its_file_and_layers() {
    let t = tree(&[
        ("linux/mod.rs", "pub mod host;\n"),
        (
            "linux/host.rs",
            "use crate::units::parse_size;\nuse crate::{units, report::escape};\n",
        ),
        ("report/mod.rs", "use crate::analysis::Analysis;\n"),
        ("analysis/mod.rs", "pub struct Analysis;\n"),
    ]);
    let v = check::violations(t.path());
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(
        v[0].starts_with("src/linux/host.rs: `linux` (layer 1) uses `crate::report` (layer 5)"),
        "{v:?}"
    );
}

#[test]
fn same_layer_imports_and_unknown_modules_are_refused_but_tests_may_use_anything() {
    let t = tree(&[
        ("store/mod.rs", "use crate::analysis::x;\n#[cfg(test)]\nmod tests;\n"),
        ("store/tests.rs", "use crate::runner::x;\n"),
        (
            "analysis/mod.rs",
            "// crate::runner in a comment\n#[cfg(test)]\nmod tests {\n    use crate::report::x;\n}\n",
        ),
        ("gadget.rs", "pub fn f() {}\n"),
    ]);
    let v = check::violations(t.path());
    assert_eq!(v.len(), 2, "{v:?}");
    assert!(
        v.iter().any(|m| m
            .starts_with("src/store/mod.rs: `store` (layer 4) uses `crate::analysis` (layer 4)")),
        "{v:?}"
    );
    assert!(
        v.iter().any(|m| m.contains("module `gadget` has no layer")),
        "{v:?}"
    );
}
