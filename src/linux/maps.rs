//! Parsing of `/proc/PID/maps` text.
//!
//! Each line has the form (see proc(5)):
//!
//! ```text
//! 7f80e3112000-7f80e3138000 r--p 00000000 fe:00 326269    /usr/lib/x86_64-linux-gnu/libc.so.6
//! address                   perms offset  dev   inode     pathname
//! ```
//!
//! The first five fields are separated by single spaces; the kernel then pads
//! with spaces up to a fixed column before the pathname. The pathname is
//! everything after that padding and may itself contain spaces. A file that
//! was unlinked while mapped gets a `" (deleted)"` suffix. The kernel escapes
//! a newline in a pathname as `\012`, so one mapping is always one line.

/// One line of `/proc/PID/maps`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    /// Start address (inclusive).
    pub start: u64,
    /// End address (exclusive).
    pub end: u64,
    /// Permission string as printed by the kernel, e.g. `"r-xp"`.
    pub perms: String,
    /// Offset into the mapped file.
    pub offset: u64,
    /// Device as `"major:minor"` in hex, e.g. `"fe:00"`.
    pub dev: String,
    /// Inode of the mapped file; 0 for anonymous and pseudo mappings.
    pub inode: u64,
    /// Pathname, or a pseudo name such as `[heap]`, `[stack]`, `[vdso]`;
    /// `None` for anonymous mappings. Kept verbatim, including any
    /// `" (deleted)"` suffix.
    pub path: Option<String>,
}

/// Error returned by [`parse_maps`].
#[derive(Debug, thiserror::Error)]
pub enum MapsError {
    /// A line that does not follow the maps format. `line` is 1-based.
    #[error("line {line}: {reason}")]
    Malformed { line: usize, reason: String },
}

/// Suffix the kernel appends to the pathname of an unlinked file.
const DELETED_SUFFIX: &str = " (deleted)";

/// Parse the full text of a `/proc/PID/maps` file. Empty lines are ignored.
pub fn parse_maps(text: &str) -> Result<Vec<Mapping>, MapsError> {
    let mut out = Vec::new();
    for (idx, raw) in text.lines().enumerate() {
        let line = raw.strip_suffix('\r').unwrap_or(raw);
        if line.trim().is_empty() {
            continue;
        }
        let mapping = parse_line(line).map_err(|reason| MapsError::Malformed {
            line: idx + 1,
            reason,
        })?;
        out.push(mapping);
    }
    Ok(out)
}

/// Split off the next space-delimited field, skipping leading spaces.
/// Returns `(field, rest)` where `rest` starts right after the field.
fn next_field(s: &str) -> Option<(&str, &str)> {
    let s = s.trim_start_matches(' ');
    if s.is_empty() {
        return None;
    }
    match s.find(' ') {
        Some(pos) => Some((&s[..pos], &s[pos..])),
        None => Some((s, "")),
    }
}

fn parse_hex(field: &str, what: &str) -> Result<u64, String> {
    if field.is_empty() {
        return Err(format!("empty {what}"));
    }
    u64::from_str_radix(field, 16).map_err(|e| format!("bad {what} {field:?}: {e}"))
}

fn parse_line(line: &str) -> Result<Mapping, String> {
    let (range, rest) = next_field(line).ok_or("missing address range")?;
    let (perms, rest) = next_field(rest).ok_or("missing permissions")?;
    let (offset, rest) = next_field(rest).ok_or("missing offset")?;
    let (dev, rest) = next_field(rest).ok_or("missing device")?;
    let (inode, rest) = next_field(rest).ok_or("missing inode")?;

    let (start, end) = range
        .split_once('-')
        .ok_or_else(|| format!("address range {range:?} has no '-'"))?;
    let start = parse_hex(start, "start address")?;
    let end = parse_hex(end, "end address")?;
    if end < start {
        return Err(format!("end address {end:#x} below start {start:#x}"));
    }

    let valid_perms = perms.len() == 4
        && perms
            .chars()
            .zip(["r-", "w-", "x-", "ps"])
            .all(|(c, allowed)| allowed.contains(c));
    if !valid_perms {
        return Err(format!("bad permissions {perms:?}"));
    }

    let offset = parse_hex(offset, "offset")?;

    let dev_ok = dev.split_once(':').is_some_and(|(maj, min)| {
        !maj.is_empty()
            && !min.is_empty()
            && maj.chars().all(|c| c.is_ascii_hexdigit())
            && min.chars().all(|c| c.is_ascii_hexdigit())
    });
    if !dev_ok {
        return Err(format!("bad device {dev:?}"));
    }

    let inode: u64 = inode
        .parse()
        .map_err(|e| format!("bad inode {inode:?}: {e}"))?;

    // Everything after the padding is the pathname, spaces included.
    let path = rest.trim_start_matches(' ');
    let path = if path.is_empty() {
        None
    } else {
        Some(path.to_owned())
    };

    Ok(Mapping {
        start,
        end,
        perms: perms.to_owned(),
        offset,
        dev: dev.to_owned(),
        inode,
        path,
    })
}

/// Strip the kernel's `" (deleted)"` suffix, if present.
fn without_deleted(path: &str) -> &str {
    path.strip_suffix(DELETED_SUFFIX).unwrap_or(path)
}

/// Whether a file name looks like a shared object: `libfoo.so`,
/// `libfoo.so.6`, `ld-linux-x86-64.so.2`, … (a `.so` component that ends the
/// name or is followed by `.`).
fn is_shared_object_name(file_name: &str) -> bool {
    file_name.match_indices(".so").any(|(pos, m)| {
        let after = &file_name[pos + m.len()..];
        after.is_empty() || after.starts_with('.')
    })
}

/// Distinct file paths of mapped shared objects, in first-seen order.
///
/// Only absolute paths whose file name has a `.so` component count (so
/// `[vdso]`, `/memfd:…` and `foo.sock` do not). A `" (deleted)"` suffix is
/// removed, so a library that was replaced on disk after being mapped is
/// reported under its original path.
pub fn mapped_libraries(maps: &[Mapping]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for path in maps.iter().filter_map(|m| m.path.as_deref()) {
        // memfd mappings print as "/memfd:NAME (deleted)" but are not files.
        if !path.starts_with('/') || path.starts_with("/memfd:") {
            continue;
        }
        let path = without_deleted(path);
        let file_name = path.rsplit('/').next().unwrap_or(path);
        if is_shared_object_name(file_name) && !out.iter().any(|p| p == path) {
            out.push(path.to_owned());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAT_PLAIN: &str = include_str!("../../tests/fixtures/maps/cat_plain.txt");
    const CAT_JEMALLOC: &str = include_str!("../../tests/fixtures/maps/cat_jemalloc.txt");
    const SPACES_DELETED: &str =
        include_str!("../../tests/fixtures/maps/spaces_deleted_tcmalloc.txt");
    const STATIC: &str = include_str!("../../tests/fixtures/maps/static.txt");

    #[test]
    fn parses_every_line_of_real_captures() {
        for (name, text) in [
            ("cat_plain", CAT_PLAIN),
            ("cat_jemalloc", CAT_JEMALLOC),
            ("spaces_deleted", SPACES_DELETED),
            ("static", STATIC),
        ] {
            let maps = parse_maps(text).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(maps.len(), text.lines().count(), "{name}");
            for m in &maps {
                assert!(m.start < m.end, "{name}: {m:?}");
            }
        }
    }

    #[test]
    fn fields_of_a_file_backed_line() {
        let maps = parse_maps(
            "7f80e3138000-7f80e328e000 r-xp 00026000 fe:00 326269                     /usr/lib/x86_64-linux-gnu/libc.so.6\n",
        )
        .expect("valid line");
        assert_eq!(
            maps,
            vec![Mapping {
                start: 0x7f80_e313_8000,
                end: 0x7f80_e328_e000,
                perms: "r-xp".into(),
                offset: 0x26000,
                dev: "fe:00".into(),
                inode: 326_269,
                path: Some("/usr/lib/x86_64-linux-gnu/libc.so.6".into()),
            }]
        );
    }

    #[test]
    fn anonymous_and_pseudo_mappings() {
        let maps = parse_maps(STATIC).expect("valid");
        let anon = maps
            .iter()
            .find(|m| m.start == 0x004a_7000)
            .expect("anon line");
        assert_eq!(anon.path, None);
        assert_eq!(anon.inode, 0);
        let names: Vec<_> = maps.iter().filter_map(|m| m.path.as_deref()).collect();
        for pseudo in ["[heap]", "[stack]", "[vdso]", "[vvar]", "[vsyscall]"] {
            assert!(names.contains(&pseudo), "{pseudo} missing");
        }
        let vsyscall = maps.last().expect("non-empty");
        assert_eq!(vsyscall.start, 0xffff_ffff_ff60_0000);
        assert_eq!(vsyscall.perms, "--xp");
    }

    #[test]
    fn anonymous_line_with_trailing_space() {
        // The kernel prints a trailing space after the inode of an anonymous
        // mapping; that must not become an empty path.
        let maps = parse_maps("7fa70e874000-7fa70e877000 rw-p 00000000 00:00 0 \n").expect("ok");
        assert_eq!(maps[0].path, None);
    }

    #[test]
    fn path_with_spaces_and_deleted_suffix() {
        let maps = parse_maps(SPACES_DELETED).expect("valid");
        assert_eq!(maps[0].path.as_deref(), Some("/tmp/space dir/alloc loop"));
        assert!(maps
            .iter()
            .any(|m| m.path.as_deref() == Some("/tmp/pre/libtcmalloc_minimal.so.4 (deleted)")));
        let libs = mapped_libraries(&maps);
        assert_eq!(
            libs,
            vec![
                "/usr/lib/x86_64-linux-gnu/libgcc_s.so.1",
                "/usr/lib/x86_64-linux-gnu/libstdc++.so.6.0.30",
                "/usr/lib/x86_64-linux-gnu/libm.so.6",
                "/usr/lib/x86_64-linux-gnu/libc.so.6",
                "/tmp/pre/libtcmalloc_minimal.so.4",
                "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
            ]
        );
    }

    #[test]
    fn preloaded_jemalloc_is_listed_once() {
        let libs = mapped_libraries(&parse_maps(CAT_JEMALLOC).expect("valid"));
        let jemalloc: Vec<_> = libs.iter().filter(|l| l.contains("libjemalloc")).collect();
        assert_eq!(jemalloc, ["/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"]);
        assert!(!libs
            .iter()
            .any(|l| l.contains("LC_CTYPE") || l.ends_with("/cat")));
    }

    #[test]
    fn plain_process_has_no_allocator_library() {
        let libs = mapped_libraries(&parse_maps(CAT_PLAIN).expect("valid"));
        assert!(libs.contains(&"/usr/lib/x86_64-linux-gnu/libc.so.6".to_owned()));
        assert!(!libs
            .iter()
            .any(|l| l.contains("jemalloc") || l.contains("tcmalloc") || l.contains("mimalloc")));
    }

    #[test]
    fn static_process_maps_no_library() {
        let libs = mapped_libraries(&parse_maps(STATIC).expect("valid"));
        assert!(libs.is_empty(), "{libs:?}");
    }

    #[test]
    fn shared_object_name_rules() {
        assert!(is_shared_object_name("libc.so.6"));
        assert!(is_shared_object_name("libfoo.so"));
        assert!(is_shared_object_name("ld-linux-x86-64.so.2"));
        assert!(!is_shared_object_name("foo.sock"));
        assert!(!is_shared_object_name("libsomething"));
        assert!(!is_shared_object_name("x.solib"));
        let maps = parse_maps(concat!(
            "1000-2000 r--p 00000000 00:05 7 /run/app.sock\n",
            "2000-3000 r--p 00000000 00:01 9 /memfd:libfake.so (deleted)\n",
            "3000-4000 r-xp 00000000 00:00 0 [vdso]\n",
        ))
        .expect("valid");
        assert!(mapped_libraries(&maps).is_empty());
    }

    #[test]
    fn empty_input_and_blank_lines() {
        assert!(parse_maps("").expect("ok").is_empty());
        assert_eq!(
            parse_maps("\n1000-2000 r--p 00000000 00:00 0\n\n")
                .expect("ok")
                .len(),
            1
        );
    }

    #[test]
    fn malformed_lines_report_line_number() {
        let cases = [
            "garbage",
            "1000 r--p 00000000 00:00 0",
            "zz00-2000 r--p 00000000 00:00 0",
            "2000-1000 r--p 00000000 00:00 0",
            "1000-2000 rwxq 00000000 00:00 0",
            "1000-2000 r--p 0000000g 00:00 0",
            "1000-2000 r--p 00000000 0000 0",
            "1000-2000 r--p 00000000 00:00 -1",
            "1000-2000 r--p 00000000 00:00",
            "1000-ffffffffffffffffff r--p 00000000 00:00 0",
        ];
        for case in cases {
            let text = format!("1000-2000 r--p 00000000 00:00 0\n{case}\n");
            match parse_maps(&text) {
                Err(MapsError::Malformed { line, reason }) => {
                    assert_eq!(line, 2, "{case}: {reason}");
                }
                Ok(m) => panic!("{case:?} accepted: {m:?}"),
            }
        }
        let err = parse_maps("x").expect_err("malformed");
        assert!(err.to_string().starts_with("line 1: "), "{err}");
    }
}
