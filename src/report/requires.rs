//! "What does each require cost?": per variant, the tree of requires with the resident
//! bytes each added while it loaded (medians over runs, node by node), the objects
//! allocated per gem, and the difference from the baseline, from the require probe.

use std::collections::BTreeMap;

use crate::analysis::stats::{median, median_ci95, ratio_ci95};
use crate::analysis::Analysis;
use crate::record::{Experiment, RequireTree, RunRecord};
use crate::units::format_bytes;

/// The heading of the lines, in every format.
pub(crate) fn requires_heading(e: &Experiment) -> String {
    format!(
        "what does each require cost? (resident bytes each require added while it and what it required loaded, from /proc/self/statm around it; medians over runs, with 95% intervals from 3 runs; requires under {} left out)",
        match cut_off(e) {
            c if c >= 0.05 * 1048576.0 => format!("{:.1} MiB", c / 1048576.0),
            c => format_bytes(c),
        }
    )
}

/// Requires that added less than this are left out by default (`--require-cut-off`'s
/// default).
pub(crate) const CUT_OFF: f64 = crate::plan::settings::REQUIRE_CUT_OFF as f64;

/// The experiment's cut-off: `--require-cut-off`, else [`CUT_OFF`].
fn cut_off(e: &Experiment) -> f64 {
    e.plan
        .probes
        .require_cut_off_bytes
        .map_or(CUT_OFF, |b| b as f64)
}

/// At most this many lines of one variant's tree.
const MAX_LINES: usize = 40;

/// How many gems the objects line names.
const GEMS: usize = 8;

/// One node of a variant's tree: its key is the names from the top down.
#[derive(Debug, Default)]
struct Node {
    depth: u32,
    name: String,
    grew: Vec<f64>,
    objects: Vec<f64>,
    also: Vec<String>,
}

/// A variant's trees merged node by node (by the names from the top down), in the order of
/// the first run's tree.
struct Merged {
    order: Vec<Vec<String>>,
    nodes: BTreeMap<Vec<String>, Node>,
    top: Vec<f64>,
    top_objects: Vec<f64>,
    gems: BTreeMap<String, Vec<f64>>,
    runs: usize,
}

fn grew(before: u64, after: u64) -> f64 {
    after as f64 - before as f64
}

fn merge(trees: &[&RequireTree]) -> Merged {
    let mut m = Merged {
        order: Vec::new(),
        nodes: BTreeMap::new(),
        top: Vec::new(),
        top_objects: Vec::new(),
        gems: BTreeMap::new(),
        runs: trees.len(),
    };
    for t in trees {
        let mut path: Vec<String> = Vec::new();
        let mut top = 0.0;
        let mut top_objects = 0.0;
        let mut gems: BTreeMap<String, f64> = BTreeMap::new();
        for (i, n) in t.nodes.iter().enumerate() {
            path.truncate(n.depth as usize);
            path.push(n.name.clone());
            let g = grew(n.rss_before_bytes, n.rss_after_bytes);
            if n.depth == 0 {
                top += g;
                top_objects += n.objects as f64;
            }
            // Objects of the file itself: its count less what its own requires made.
            let children: u64 = t.nodes[i + 1..]
                .iter()
                .take_while(|c| c.depth > n.depth)
                .filter(|c| c.depth == n.depth + 1)
                .map(|c| c.objects)
                .sum();
            let own = n.objects.saturating_sub(children) as f64;
            let gem = if n.gem.is_empty() {
                "(no gem)"
            } else {
                n.gem.as_str()
            };
            *gems.entry(gem.to_string()).or_default() += own;
            let e = m.nodes.entry(path.clone()).or_insert_with(|| Node {
                depth: n.depth,
                name: n.name.clone(),
                ..Node::default()
            });
            if e.grew.is_empty() && e.objects.is_empty() {
                // A require first seen in this run goes after its parent's last descendant
                // so far (depth-first order), not at the end under another parent.
                let parent = &path[..path.len() - 1];
                let at = if parent.is_empty() {
                    m.order.len()
                } else {
                    m.order
                        .iter()
                        .rposition(|k| k.starts_with(parent))
                        .map_or(m.order.len(), |i| i + 1)
                };
                m.order.insert(at, path.clone());
            }
            e.grew.push(g);
            e.objects.push(n.objects as f64);
            for a in &n.also {
                if !e.also.contains(a) {
                    e.also.push(a.clone());
                }
            }
        }
        m.top.push(top);
        m.top_objects.push(top_objects);
        for (g, v) in gems {
            m.gems.entry(g).or_default().push(v);
        }
    }
    m
}

fn count(n: f64) -> String {
    crate::units::format_count(n.max(0.0).round() as u64)
}

fn signed(b: f64) -> String {
    if b < 0.0 {
        format!("-{}", format_bytes(-b))
    } else {
        format!("+{}", format_bytes(b))
    }
}

/// The trees of a variant's runs that count.
fn trees<'a>(e: &'a Experiment, variant: &str) -> Vec<&'a RequireTree> {
    e.runs
        .iter()
        .filter(|r: &&RunRecord| r.variant == variant && r.counts())
        .filter_map(|r| r.inside.requires.as_ref())
        .collect()
}

/// A pruned tree as indented lines (the top first).
fn indented(tree: Vec<(u32, String)>) -> Vec<String> {
    tree.into_iter()
        .map(|(depth, label)| format!("{}{label}", "  ".repeat(depth as usize + 1)))
        .collect()
}

/// A variant's tree pruned at [`CUT_OFF`]: (depth, label) in depth-first order; a last
/// line at depth 0 says how many more there are.
fn pruned(m: &Merged, cut: f64) -> Vec<(u32, String)> {
    let mut out = Vec::new();
    let mut pruned_below: Option<u32> = None;
    let mut left_out = 0usize;
    for key in &m.order {
        let n = &m.nodes[key];
        if let Some(d) = pruned_below {
            if n.depth > d {
                continue;
            }
            pruned_below = None;
        }
        // A node in fewer than half the runs is not the variant's.
        let g = median(&n.grew);
        if g < cut || n.grew.len() * 2 < m.runs {
            pruned_below = Some(n.depth);
            continue;
        }
        if out.len() >= MAX_LINES {
            left_out += 1;
            continue;
        }
        let also = if n.also.is_empty() {
            String::new()
        } else {
            let shown: Vec<&str> = n.also.iter().take(3).map(String::as_str).collect();
            format!(
                " (also required by: {}{})",
                shown.join(", "),
                if n.also.len() > 3 {
                    format!(" and {} more", n.also.len() - 3)
                } else {
                    String::new()
                }
            )
        };
        // From 3 runs, the median's interval over runs.
        let interval = if n.grew.len() >= 3 {
            let (lo, hi) = median_ci95(&n.grew, 0x5eed);
            format!(" [{}, {}]", format_bytes(lo), format_bytes(hi))
        } else {
            String::new()
        };
        out.push((
            n.depth,
            format!(
                "{}: {}{interval} ({} objects){also}",
                n.name,
                format_bytes(g),
                count(median(&n.objects))
            ),
        ));
    }
    if left_out > 0 {
        out.push((
            0,
            format!("… {left_out} more above the cut-off (the JSON record has every require)"),
        ));
    }
    out
}

/// One require in the HTML's collapsible tree.
pub(crate) struct Item {
    pub label: String,
    pub children: Vec<Item>,
}

/// Nests (depth, label) pairs in depth-first order.
fn nest(lines: &[(u32, String)]) -> Vec<Item> {
    let mut out: Vec<Item> = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let depth = lines[i].0;
        let end = lines[i + 1..]
            .iter()
            .position(|(d, _)| *d <= depth)
            .map_or(lines.len(), |p| i + 1 + p);
        out.push(Item {
            label: lines[i].1.clone(),
            children: nest(&lines[i + 1..end]),
        });
        i = end;
    }
    out
}

/// One variant's part of the report: its TOP line, its pruned tree as (depth, label), and
/// its objects per gem.
pub(crate) struct VariantRequires {
    pub top: String,
    pub tree: Vec<(u32, String)>,
    pub gems: Option<String>,
}

impl VariantRequires {
    /// The tree nested, for the HTML.
    pub(crate) fn items(&self) -> Vec<Item> {
        nest(&self.tree)
    }
}

/// The require report: each variant's part, then each variant against the baseline. Every
/// variant's trees are merged once here, for every format.
pub(crate) struct RequireReport {
    pub variants: Vec<VariantRequires>,
    pub against: Vec<String>,
}

pub(crate) fn require_report(e: &Experiment, a: &Analysis) -> RequireReport {
    let cut = cut_off(e);
    let merged: BTreeMap<&str, Merged> = a
        .variants
        .iter()
        .filter_map(|s| {
            let t = trees(e, &s.name);
            (!t.is_empty()).then(|| (s.name.as_str(), merge(&t)))
        })
        .collect();
    let mut variants = Vec::new();
    for s in &a.variants {
        let Some(m) = merged.get(s.name.as_str()) else {
            continue;
        };
        let mut gems: Vec<(&String, f64)> = m.gems.iter().map(|(g, v)| (g, median(v))).collect();
        gems.sort_by(|x, y| y.1.total_cmp(&x.1));
        let named: Vec<String> = gems
            .iter()
            .take(GEMS)
            .filter(|(_, n)| *n > 0.0)
            .map(|(g, n)| format!("{g} {}", count(*n)))
            .collect();
        variants.push(VariantRequires {
            top: format!(
                "{}: TOP {} ({} objects; {} run(s))",
                s.name,
                format_bytes(median(&m.top)),
                count(median(&m.top_objects)),
                m.runs
            ),
            tree: pruned(m, cut),
            gems: (!named.is_empty()).then(|| {
                format!(
                    "{}: objects allocated per gem while loading (its files' own, not their requires'): {}",
                    s.name,
                    named.join(", ")
                )
            }),
        });
    }
    let mut against = Vec::new();
    let base = &e.plan.baseline;
    if let Some(b) = merged.get(base.as_str()) {
        for s in a.variants.iter().filter(|s| s.name != *base) {
            let Some(m) = merged.get(s.name.as_str()) else {
                continue;
            };
            against.push(against_line(&s.name, base, m, b, cut));
        }
    }
    RequireReport { variants, against }
}

/// One variant's TOP against the baseline's, with an interval, and the nodes of the first
/// two levels that moved most.
fn against_line(name: &str, base: &str, m: &Merged, b: &Merged, cut: f64) -> String {
    let (mt, bt) = (median(&m.top), median(&b.top));
    let interval = ratio_ci95(&m.top, &b.top, 0x5eed)
        .map(|(_, (lo, hi))| {
            format!(
                " [{:+.1}%, {:+.1}%]",
                100.0 * (lo - 1.0),
                100.0 * (hi - 1.0)
            )
        })
        .unwrap_or_default();
    let mut moved: Vec<(String, f64)> = m
        .nodes
        .iter()
        .filter(|(_, n)| n.depth <= 1)
        .filter_map(|(k, n)| {
            let bn = b.nodes.get(k)?;
            let d = median(&n.grew) - median(&bn.grew);
            (d.abs() >= cut).then(|| (n.name.clone(), d))
        })
        .collect();
    moved.sort_by(|x, y| y.1.abs().total_cmp(&x.1.abs()));
    let moved: Vec<String> = moved
        .iter()
        .take(5)
        .map(|(n, d)| format!("{n} {}", signed(*d)))
        .collect();
    format!(
        "{name} against {base}: TOP {} ({:+.1}%{interval}){}",
        signed(mt - bt),
        if bt != 0.0 {
            100.0 * (mt - bt) / bt
        } else {
            0.0
        },
        if moved.is_empty() {
            String::new()
        } else {
            format!("; {}", moved.join(", "))
        }
    )
}

/// Per variant: TOP and the tree; the objects per gem; against the baseline.
pub(crate) fn require_lines(e: &Experiment, a: &Analysis) -> Vec<String> {
    let r = require_report(e, a);
    let mut out = Vec::new();
    for v in r.variants {
        out.push(v.top);
        out.extend(indented(v.tree));
        out.extend(v.gems);
    }
    out.extend(r.against);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_require_only_a_later_run_made_nests_under_its_own_parent() {
        let node = |depth, name: &str| crate::record::RequireNode {
            depth,
            name: name.into(),
            rss_after_bytes: 4 << 20,
            objects: 1,
            ..Default::default()
        };
        let tree = |nodes| RequireTree {
            processes: 1,
            ruby: "3.1.2".into(),
            own_objects: 0,
            nodes,
        };
        let one = tree(vec![node(0, "a"), node(1, "b"), node(0, "d")]);
        let two = tree(vec![node(0, "a"), node(1, "b"), node(1, "c"), node(0, "d")]);
        let m = merge(&[&one, &two]);
        let names: Vec<String> = m.order.iter().map(|k| k.join(">")).collect();
        assert_eq!(names, ["a", "a>b", "a>c", "d"]);
        // c is in one run of two: kept (half the runs), and under a.
        let lines = indented(pruned(&m, CUT_OFF));
        assert_eq!(lines[2], "    c: 4.0 MiB (1 objects)", "{lines:?}");
    }

    #[test]
    fn lines_nest_by_depth() {
        let lines: Vec<(u32, String)> = [(0, "a"), (1, "b"), (2, "c"), (1, "d"), (0, "e")]
            .iter()
            .map(|(d, l)| (*d, l.to_string()))
            .collect();
        let items = nest(&lines);
        assert_eq!(items.len(), 2);
        assert_eq!(items[0].children.len(), 2);
        assert_eq!(items[0].children[0].children[0].label, "c");
        assert!(items[1].children.is_empty());
    }

    #[test]
    fn small_requires_are_pruned_with_what_they_required() {
        let node = |depth, name: &str, grew: u64| crate::record::RequireNode {
            depth,
            name: name.into(),
            rss_before_bytes: 0,
            rss_after_bytes: grew,
            objects: 10,
            ..Default::default()
        };
        let t = RequireTree {
            processes: 1,
            ruby: "3.1.2".into(),
            own_objects: 0,
            nodes: vec![
                node(0, "big", 10 << 20),
                node(1, "small", 1 << 10),
                node(2, "under small", 5 << 20),
                node(1, "medium", 1 << 20),
            ],
        };
        let lines = indented(pruned(&merge(&[&t]), CUT_OFF));
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(lines[0].starts_with("  big: 10.0 MiB"), "{lines:?}");
        assert!(lines[1].starts_with("    medium: 1.0 MiB"), "{lines:?}");
    }
}
