//! What the dynamic loader (`ld.so`) says about a preload it refused. glibc's loader
//! prints, on the program's standard error:
//!
//! `ERROR: ld.so: object '/etc/hostname' from LD_PRELOAD cannot be preloaded (invalid ELF header): ignored.`
//!
//! with its own reason in parentheses (`invalid ELF header`, `file too short`,
//! `cannot open shared object file`, `wrong ELF class: ELFCLASS32`, …) and goes on
//! without the library. That line, not a guess, is why a preload is not mapped.

/// A preload the loader refused, as it said it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PreloadRefusal {
    /// The object named in the line.
    pub object: String,
    /// The loader's reason, between the parentheses.
    pub reason: String,
    /// The whole line, from `ld.so:` on.
    pub line: String,
}

/// The loader's refusals found in a program's standard error, in order.
pub(crate) fn preload_refusals(stderr: &str) -> Vec<PreloadRefusal> {
    stderr.lines().filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<PreloadRefusal> {
    let start = line.find("ld.so: object '")?;
    let line = line[start..].trim_end();
    let rest = &line["ld.so: object '".len()..];
    let (object, rest) = rest.split_once("' from ")?;
    let (_, rest) = rest.split_once(" cannot be preloaded (")?;
    let reason = rest.rsplit_once("): ignored").map_or(rest, |(r, _)| r);
    Some(PreloadRefusal {
        object: object.to_string(),
        reason: reason.to_string(),
        line: line.to_string(),
    })
}

/// The refusal of `object` (or of any object when none names it) in `stderr`.
pub(crate) fn refusal_of(stderr: &str, object: &str) -> Option<PreloadRefusal> {
    let all = preload_refusals(stderr);
    all.iter()
        .find(|r| r.object == object)
        .or(all.first())
        .cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loaders_own_reason_is_read() {
        let text = "hello\nERROR: ld.so: object '/etc/hostname' from LD_PRELOAD cannot be preloaded (invalid ELF header): ignored.\n";
        let r = refusal_of(text, "/etc/hostname").unwrap();
        assert_eq!(r.reason, "invalid ELF header");
        assert_eq!(
            r.line,
            "ld.so: object '/etc/hostname' from LD_PRELOAD cannot be preloaded (invalid ELF header): ignored."
        );
        let r = preload_refusals(
            "ERROR: ld.so: object 'libx.so' from /etc/ld.so.preload cannot be preloaded (cannot open shared object file): ignored.",
        );
        assert_eq!(r[0].object, "libx.so");
        assert_eq!(r[0].reason, "cannot open shared object file");
        assert!(preload_refusals("ld.so: object 'x").is_empty());
        assert!(refusal_of("", "/x").is_none());
    }
}
