//! The require probe: memtrial's own script (`probe-shim/ruby/memtrial_require.rb`,
//! embedded) is loaded into the run's Ruby processes through `RUBYOPT=-r<script>`, after the
//! variant's own options. It wraps `Kernel#require` and `#require_relative` and, at exit,
//! writes the tree of what each require loaded to `<dir>/<pid>`: per file, the process's
//! resident bytes before and after (`/proc/self/statm`), the objects allocated meanwhile
//! (`GC.stat`, less the probe's own, measured) and who else required it. This probe reads
//! the trees at the end of the run and keeps the largest (the process that booted).
//!
//! Lines (tab-separated):
//!
//! ```text
//! # memtrial-require 1  pid=<pid>  ruby=<version>  page=<bytes>  own_objects=<n>
//! N  <depth>  <rss before>  <rss after>  <objects>  <seconds>  <name>  <path>  <gem>
//! A  <depth>  <requirer>        also required by, after its node
//! ```

use std::path::{Path, PathBuf};

use super::{append_env, Probe, RunEnd, Tick};
use crate::record::{Absence, RequireNode, RequireTree, RunRecord};

/// The probe's name, in records and messages.
pub const NAME: &str = "require";

/// The script Ruby loads.
const SCRIPT: &str = include_str!("../../probe-shim/ruby/memtrial_require.rb");

/// The header's prefix.
const HEADER: &str = "# memtrial-require 1\t";

/// At most this many nodes are kept of one tree (a boot of a large application loads a
/// few thousand files).
const MAX_NODES: usize = 20_000;

/// At most this much of one tree file is read.
const MAX_FILE: u64 = 16 << 20;

/// One process's tree, parsed; `None` for anything that is not one.
pub(crate) fn parse(text: &str) -> Option<RequireTree> {
    let mut lines = text.lines();
    let head = lines.next()?.strip_prefix(HEADER)?;
    let field = |k: &str| {
        head.split('\t')
            .find_map(|f| f.strip_prefix(k)?.strip_prefix('='))
            .map(str::to_string)
    };
    let mut tree = RequireTree {
        processes: 1,
        ruby: field("ruby").unwrap_or_default(),
        own_objects: field("own_objects")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
        nodes: Vec::new(),
    };
    for line in lines {
        let f: Vec<&str> = line.split('\t').collect();
        match f.as_slice() {
            ["N", depth, before, after, objects, seconds, name, path, gem] => {
                if tree.nodes.len() >= MAX_NODES {
                    break;
                }
                let depth: u32 = depth.parse().ok()?;
                // A node is at most one level below the one before it.
                let max = tree.nodes.last().map_or(0, |n| n.depth + 1);
                if depth > max {
                    return None;
                }
                tree.nodes.push(RequireNode {
                    depth,
                    name: name.to_string(),
                    path: path.to_string(),
                    gem: gem.to_string(),
                    rss_before_bytes: before.parse().ok()?,
                    rss_after_bytes: after.parse().ok()?,
                    objects: objects.parse().ok()?,
                    seconds: seconds.parse().ok().filter(|s: &f64| s.is_finite())?,
                    also: Vec::new(),
                });
            }
            ["A", _, requirer] => {
                if let Some(n) = tree.nodes.last_mut() {
                    if n.also.len() < 64 {
                        n.also.push(requirer.to_string());
                    }
                }
            }
            _ => {}
        }
    }
    Some(tree)
}

/// The trees the run's processes wrote: the one that loaded the most (its top-level
/// requires' growth summed), with the number of processes that wrote one.
fn read_trees(dir: &Path) -> Option<RequireTree> {
    let mut trees: Vec<RequireTree> = Vec::new();
    for e in std::fs::read_dir(dir).ok()?.flatten() {
        if e.file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
            .is_none()
        {
            continue;
        }
        use crate::linux::safe_file::{read_bounded, End};
        let Ok(bytes) = read_bounded(&e.path(), MAX_FILE, End::Head) else {
            continue;
        };
        trees.extend(parse(&String::from_utf8_lossy(&bytes)));
    }
    let n = trees.len() as u32;
    let mut best = trees
        .into_iter()
        .max_by_key(|t| (t.top_growth_bytes(), t.nodes.len()))?;
    best.processes = n;
    Some(best)
}

/// Where the embedded script is written for Ruby.
fn script_path() -> Result<PathBuf, String> {
    static PATH: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();
    PATH.get_or_init(|| super::ruby::install_script("memtrial_require", SCRIPT))
        .clone()
}

/// Reads the Ruby processes' require trees at the end of a run.
pub struct RequireProbe {
    dir: Result<PathBuf, String>,
}

impl RequireProbe {
    /// A probe whose processes write into `dir` (created here, without the trees a run
    /// before this one left there).
    pub fn new(dir: PathBuf) -> RequireProbe {
        let dir = super::reports::fresh_dir(&dir).map(|_| dir);
        RequireProbe { dir }
    }
}

impl Probe for RequireProbe {
    fn instrument(&mut self, env: &mut Vec<(String, String)>) {
        let Ok(dir) = &self.dir else {
            return;
        };
        match script_path() {
            Ok(script) => {
                append_env(env, "RUBYOPT", &format!("-r{}", script.display()), ' ');
                env.push(("MEMTRIAL_REQUIRE_DIR".into(), dir.display().to_string()));
            }
            Err(why) => self.dir = Err(why),
        }
    }

    fn observe(&mut self, _tick: &Tick) {}

    fn finish(self: Box<Self>, _end: &RunEnd, record: &mut RunRecord) {
        let tree = match &self.dir {
            Ok(dir) => read_trees(dir).ok_or_else(|| {
                "no Ruby process wrote its requires: the program is not Ruby, it exited \
                 without running its at_exit hooks (exit!, a signal), or it resets RUBYOPT"
                    .to_string()
            }),
            Err(why) => Err(why.clone()),
        };
        let tree = tree.and_then(|t| {
            if t.nodes.is_empty() {
                Err(
                    "the Ruby process loaded no file through require or require_relative \
                     after the probe was loaded"
                        .to_string(),
                )
            } else {
                Ok(t)
            }
        });
        match tree {
            Ok(t) => record.inside.requires = Some(t),
            Err(reason) => record.inside.absent.push(Absence {
                probe: NAME.into(),
                reason,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TREE: &str = "# memtrial-require 1\tpid=7\truby=3.1.2\tpage=4096\town_objects=21\n\
N\t0\t100\t900\t50\t0.5\trails/all\t/g/railties/lib/rails/all.rb\trailties\n\
N\t1\t150\t500\t30\t0.2\trails\t/g/railties/lib/rails.rb\trailties\n\
A\t1\tactive_record/railtie\n\
N\t2\t200\t300\t5\t0.01\tset\t/usr/lib/ruby/3.1.0/set.rb\truby\n\
N\t0\t900\t1000\t2\t0.01\tjson\t/usr/lib/ruby/3.1.0/json.rb\truby\n";

    #[test]
    fn a_tree_parses_with_its_also_required_by() {
        let t = parse(TREE).unwrap();
        assert_eq!(t.ruby, "3.1.2");
        assert_eq!(t.own_objects, 21);
        assert_eq!(t.nodes.len(), 4);
        assert_eq!(t.nodes[1].also, ["active_record/railtie"]);
        assert_eq!(
            t.nodes[0].rss_after_bytes - t.nodes[0].rss_before_bytes,
            800
        );
        assert_eq!(t.top_growth_bytes(), 900);
    }

    #[test]
    fn malformed_trees_are_refused() {
        assert!(parse("").is_none());
        assert!(parse("# memtrial-require 2\tpid=1\n").is_none());
        // A node two levels below the one before it.
        assert!(parse("# memtrial-require 1\tpid=1\nN\t2\t1\t2\t3\t0.1\ta\tb\tc\n").is_none());
        assert!(parse("# memtrial-require 1\tpid=1\nN\t0\tx\t2\t3\t0.1\ta\tb\tc\n").is_none());
        assert!(parse("# memtrial-require 1\tpid=1\nN\t0\t1\t2\t3\tNaN\ta\tb\tc\n").is_none());
    }

    proptest::proptest! {
        #[test]
        fn parse_never_panics(text in "(# memtrial-require 1\tpid=1\n)?((N|A)(\t[0-9a-z.]{0,4}){0,9}\n){0,12}") {
            let _ = parse(&text);
        }
    }
}
