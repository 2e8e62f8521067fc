//! Pure renderers from analysis results to bytes.

pub mod csv;
pub mod json;
pub mod table;

#[cfg(test)]
pub(crate) mod fixture;

#[cfg(test)]
mod snapshots {
    use super::*;
    use crate::analysis::analyse;

    #[test]
    fn table_snapshot() {
        let e = fixture::experiment();
        insta::assert_snapshot!(table::render(&e, &analyse(&e), false));
    }

    #[test]
    fn json_snapshot() {
        let e = fixture::experiment();
        let text = json::render(&e, &analyse(&e));
        let v: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
        insta::assert_json_snapshot!(v, {".generator" => "[generator]"});
    }

    #[test]
    fn csv_snapshot() {
        insta::assert_snapshot!(csv::render(&fixture::experiment()));
    }
}
