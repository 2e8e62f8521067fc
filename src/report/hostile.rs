//! Property tests: hostile strings from outside (a record's variant names, command,
//! environment, messages, hostnames, notes) through every renderer. Whatever they hold,
//! the table and the recommendation show no control or bidirectional character raw, the
//! Markdown, HTML and CSV neither (nor markup of the input's making), the CSV starts no
//! formula, and the JSON carries each string back exactly. 12 cases: each renders the
//! HTML's charts, slow in a debug build; `PROPTEST_CASES` does not apply here.

use proptest::prelude::*;

use super::{escape, fixture, hosts, text, ExportType, Layout, Report};
use crate::analysis::analyse;
use crate::analysis::recommend::recommend;
use crate::record::Experiment;

/// Pieces that tend to break out of what they sit in.
const PIECES: &[&str] = &[
    "\x1b[2J",
    "\x1b]0;title\x07",
    "\x07",
    "\n",
    "\r",
    "\t",
    "\0",
    "\u{202e}",
    "\u{2066}",
    "\u{9b}31m",
    "\u{7f}",
    "=",
    "+",
    "-",
    "@",
    "=HYPERLINK(\"http://e.x\")",
    "<script>alert(1)</script>",
    "</td>",
    "&amp;",
    "\"",
    "'",
    "`",
    "```",
    "|",
    "[x](http://e.x)",
    "*",
    "_",
    "\\",
    "$HOME",
    "K=EQ",
    ": ",
    "# ",
    "---",
    "1e308",
    "-1",
    "é",
    " ",
];

fn hostile() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            3 => prop::sample::select(PIECES).prop_map(str::to_string),
            1 => any::<char>().prop_map(|c| c.to_string()),
            1 => "[a-z]{1,6}",
        ],
        1..8,
    )
    .prop_map(|v| v.concat())
}

/// The fixture with `s` in every string a record from outside may set.
fn with_strings(s: &[String]) -> Experiment {
    let mut e = fixture::experiment();
    let name = format!("v{}", s[0]);
    for v in e.plan.variants.iter_mut().filter(|v| v.name == "arena2") {
        v.name = name.clone();
        v.env = vec![(s[1].clone(), s[2].clone()), ("PLAIN".into(), s[3].clone())];
    }
    for r in e.runs.iter_mut() {
        if r.variant == "arena2" {
            r.variant = name.clone();
        }
        r.message = Some(s[4].clone());
        r.allocator_detected = s[5].clone();
        r.verification_detail = s[6].clone();
        r.stderr_path = s[7].clone().into();
    }
    e.plan.command.push(s[0].clone());
    e.plan.command.push(s[3].clone());
    e.host.hostname = s[1].clone();
    for h in &mut e.hosts {
        h.hostname = s[2].clone();
    }
    e.notes.push(s[4].clone());
    e
}

/// No control character but line breaks (and tabs), and no bidirectional control.
fn shown_safely(what: &str, out: &str) -> Result<(), TestCaseError> {
    let bad = out
        .chars()
        .find(|&c| c != '\n' && c != '\t' && escape::is_unsafe_for_terminal(c));
    prop_assert!(bad.is_none(), "{what} shows {bad:?} raw:\n{out}");
    Ok(())
}

fn is_plain_number(s: &str) -> bool {
    escape::csv_cell(s) == s
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    #[test]
    fn hostile_strings_through_every_renderer(s in prop::collection::vec(hostile(), 8)) {
        let e = with_strings(&s);
        let a = analyse(&e);
        let rec = recommend(&a);
        let report = Report { experiment: &e, analysis: &a, recommendation: &rec };
        let out = |t: ExportType| {
            String::from_utf8(t.serialize(&report).expect("renders")).expect("UTF-8")
        };

        shown_safely("the table", &out(ExportType::Table { color: false, layout: Layout::Detail }))?;
        shown_safely("the answer", &out(ExportType::Table { color: false, layout: Layout::Answer }))?;
        shown_safely("the recommendation", &text::recommendation(&report))?;
        shown_safely(
            "the table by host",
            &String::from_utf8_lossy(
                &hosts::serialize(ExportType::Table { color: false, layout: Layout::Detail }, &report).expect("renders"),
            ),
        )?;

        // (Markup of the input's making is Markdown's escape's job, unit-tested there:
        // inside a code span `<script>` is text.)
        shown_safely("the Markdown", &out(ExportType::Markdown))?;

        let html = out(ExportType::Html);
        shown_safely("the HTML", &html)?;
        prop_assert!(!html.contains("<script>alert"), "raw markup from the input");

        for format in [ExportType::Csv, ExportType::SamplesCsv] {
            let csv = out(format);
            shown_safely("the CSV", &csv)?;
            let mut rdr = ::csv::ReaderBuilder::new().has_headers(false).from_reader(csv.as_bytes());
            for row in rdr.records() {
                let row = row.expect("the CSV parses back");
                for cell in row.iter() {
                    prop_assert!(
                        !cell.starts_with(['=', '+', '-', '@', '\t', '\r']) || is_plain_number(cell),
                        "{cell:?} would start a formula"
                    );
                }
            }
        }

        let json: serde_json::Value = serde_json::from_str(&out(ExportType::Json)).expect("JSON");
        let text = json.to_string();
        for (i, field) in [(4, "message"), (5, "allocator_detected")] {
            let want = serde_json::Value::String(s[i].clone());
            prop_assert!(
                json["variants"][0]["runs"][0][field] == want,
                "{field} comes back exactly: {text}"
            );
        }
    }
}
