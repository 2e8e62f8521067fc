//! The one printer: every line a user sees goes through here. It knows `--quiet`,
//! colour (`--color`, `NO_COLOR`), whether standard output and standard error are
//! terminals, and that an output file named `-` is standard output.
//!
//! Kinds of output:
//! - **results** ([`Printer::result`]): what the command was asked for (a table, a
//!   report, a JSON line) — always shown, on standard output;
//! - **human text beside a machine format** ([`Printer::human`]): the table goes to
//!   standard output, or to standard error (unless `--quiet`) when a machine format
//!   already takes standard output;
//! - **notes** ([`Printer::note`]): progress and side remarks on standard error,
//!   silenced by `--quiet`;
//! - **the live line** ([`Printer::live`]): a line rewritten in place, only on a
//!   terminal and never with `--quiet`.
//!
//! Notes pass through [`escape::terminal_lines`]: text from a workload or a command
//! line cannot drive the terminal. Results are written as rendered (a renderer escapes
//! what it took from the input, and keeps its own colour codes).

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::escape;

/// `--color`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColorMode {
    /// On a terminal, unless `NO_COLOR` is set.
    Auto,
    Always,
    Never,
}

/// Where an output file goes: `-` is standard output, anything else a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutputTarget {
    Stdout,
    File(PathBuf),
}

impl OutputTarget {
    /// The one place where `-` means standard output.
    pub fn from_path(p: &Path) -> OutputTarget {
        if p.as_os_str() == "-" {
            OutputTarget::Stdout
        } else {
            OutputTarget::File(p.to_path_buf())
        }
    }

    pub fn is_stdout(&self) -> bool {
        matches!(self, OutputTarget::Stdout)
    }

    /// Checks a file can be written before hours of runs, not after: not a directory, its
    /// directory there and writable, and an existing file (or device) open for writing
    /// and taking a write of nothing (which `/dev/full` and `/proc` files refuse).
    pub fn check(&self, flag: &str) -> Result<(), OutputError> {
        use std::os::unix::ffi::OsStrExt;
        let OutputTarget::File(p) = self else {
            return Ok(());
        };
        let cannot = |error: std::io::Error| OutputError::File {
            flag: flag.to_string(),
            path: p.clone(),
            error,
        };
        if p.is_dir() {
            return Err(OutputError::Directory {
                flag: flag.to_string(),
                path: p.clone(),
            });
        }
        if p.exists() {
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .open(p)
                .map_err(cannot)?;
            // A write of no bytes: nothing changes in a file, and a device that takes no
            // data says so now.
            return f.write(&[]).map(drop).map_err(cannot);
        }
        let dir = match p.parent().filter(|d| !d.as_os_str().is_empty()) {
            Some(d) if !d.is_dir() => {
                return Err(OutputError::NoDirectory {
                    flag: flag.to_string(),
                    path: p.clone(),
                    dir: d.to_path_buf(),
                })
            }
            Some(d) => d,
            None => Path::new("."),
        };
        let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
            return Ok(());
        };
        // SAFETY: a valid NUL-terminated path; access only reads it.
        if unsafe { libc::access(c.as_ptr(), libc::W_OK) } != 0 {
            return Err(cannot(std::io::Error::last_os_error()));
        }
        Ok(())
    }
}

/// Failures to write what was asked for.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    #[error("{flag} {}: the directory {} does not exist", path.display(), dir.display())]
    NoDirectory {
        flag: String,
        path: PathBuf,
        dir: PathBuf,
    },
    #[error("{flag} {}: cannot write: {error}", path.display())]
    File {
        flag: String,
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{flag} {}: is a directory; give a file's path, e.g. {flag} {}", path.display(), path.join(match flag.as_str() { "--html" => "report.html", "--csv" => "runs.csv", "--samples-csv" => "samples.csv", "--markdown" => "summary.md", _ => "out.json" }).display())]
    Directory { flag: String, path: PathBuf },
    #[error("cannot write to standard output: {0}")]
    Stdout(std::io::Error),
}

type Sink = Arc<Mutex<dyn Write + Send>>;

/// The printer. Cheap to share by reference; each write takes its stream's lock.
pub struct Printer {
    quiet: bool,
    color: bool,
    stderr_tty: bool,
    stdout: Sink,
    stderr: Sink,
}

/// What a [`Printer::capture`] printer wrote, for tests.
#[cfg(test)]
#[derive(Clone, Default)]
pub(crate) struct Captured {
    pub stdout: Arc<Mutex<Vec<u8>>>,
    pub stderr: Arc<Mutex<Vec<u8>>>,
}

#[cfg(test)]
impl Captured {
    fn text(b: &Arc<Mutex<Vec<u8>>>) -> String {
        let g = b.lock().unwrap_or_else(|e| e.into_inner());
        String::from_utf8_lossy(&g).into_owned()
    }
    pub fn stdout(&self) -> String {
        Self::text(&self.stdout)
    }
    pub fn stderr(&self) -> String {
        Self::text(&self.stderr)
    }
}

#[cfg(test)]
struct Shared(Arc<Mutex<Vec<u8>>>);

#[cfg(test)]
impl Write for Shared {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Printer {
    /// The printer of the process: standard output and standard error.
    pub fn stdio(quiet: bool, color: ColorMode) -> Printer {
        let stdout_tty = std::io::stdout().is_terminal();
        let stderr_tty = std::io::stderr().is_terminal();
        let no_color = std::env::var_os("NO_COLOR").is_some();
        Printer {
            quiet,
            color: match color {
                ColorMode::Always => true,
                ColorMode::Never => false,
                ColorMode::Auto => stdout_tty && !no_color,
            },
            stderr_tty,
            stdout: Arc::new(Mutex::new(std::io::stdout())),
            stderr: Arc::new(Mutex::new(std::io::stderr())),
        }
    }

    /// A printer into memory (neither stream a terminal), for tests.
    #[cfg(test)]
    pub(crate) fn capture(quiet: bool, color: bool) -> (Printer, Captured) {
        let c = Captured::default();
        let p = Printer {
            quiet,
            color,
            stderr_tty: false,
            stdout: Arc::new(Mutex::new(Shared(Arc::clone(&c.stdout)))),
            stderr: Arc::new(Mutex::new(Shared(Arc::clone(&c.stderr)))),
        };
        (p, c)
    }

    pub fn quiet(&self) -> bool {
        self.quiet
    }

    /// Whether renderers may colour what they draw.
    pub fn color(&self) -> bool {
        self.color
    }

    /// Whether progress may be drawn in place (a bar, a live line): standard error is
    /// a terminal and `--quiet` is off.
    pub fn live_progress(&self) -> bool {
        self.stderr_tty && !self.quiet
    }

    fn write(sink: &Sink, bytes: &[u8]) -> std::io::Result<()> {
        let mut w = sink.lock().unwrap_or_else(|e| e.into_inner());
        w.write_all(bytes)?;
        w.flush()
    }

    /// A note on standard error (a line break is added), unless `--quiet`.
    pub fn note(&self, msg: &str) {
        if self.quiet {
            return;
        }
        let mut line = escape::terminal_lines(msg);
        line.push('\n');
        // A closed standard error leaves nobody to tell.
        let _ = Self::write(&self.stderr, line.as_bytes());
    }

    /// A result on standard output, as rendered.
    pub fn result(&self, text: &str) -> Result<(), OutputError> {
        Self::write(&self.stdout, text.as_bytes()).map_err(OutputError::Stdout)
    }

    /// Human text next to machine formats: on standard output, unless one of them
    /// takes it (`stdout_taken`); then on standard error, unless `--quiet`.
    pub fn human(&self, text: &str, stdout_taken: bool) -> Result<(), OutputError> {
        if !stdout_taken {
            return self.result(text);
        }
        if !self.quiet {
            let _ = Self::write(&self.stderr, text.as_bytes());
        }
        Ok(())
    }

    /// Rewrites the live line on standard error (only when [`Self::live_progress`]);
    /// `None` clears it.
    pub fn live(&self, line: Option<&str>) {
        if !self.live_progress() {
            return;
        }
        let text = match line {
            Some(l) => format!("\r\x1b[2K{}", escape::terminal(l)),
            None => "\r\x1b[2K".to_string(),
        };
        let _ = Self::write(&self.stderr, text.as_bytes());
    }

    /// Writes an output file (`--json FILE` and the like); standard output for `-`.
    /// A written file is announced as a note.
    pub fn write_output(
        &self,
        target: &OutputTarget,
        bytes: &[u8],
        flag: &str,
    ) -> Result<(), OutputError> {
        match target {
            OutputTarget::Stdout => Self::write(&self.stdout, bytes).map_err(OutputError::Stdout),
            OutputTarget::File(p) => {
                std::fs::write(p, bytes).map_err(|error| OutputError::File {
                    flag: flag.to_string(),
                    path: p.clone(),
                    error,
                })?;
                self.note(&format!("wrote {}", p.display()));
                Ok(())
            }
        }
    }

    /// Appends to a file another program reads as it grows (`$GITHUB_STEP_SUMMARY`),
    /// creating it when missing; announced as a note.
    pub fn append_output(&self, path: &Path, bytes: &[u8], flag: &str) -> Result<(), OutputError> {
        use std::io::Write;
        std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(path)
            .and_then(|mut f| f.write_all(bytes))
            .map_err(|error| OutputError::File {
                flag: flag.to_string(),
                path: path.to_path_buf(),
                error,
            })?;
        self.note(&format!("appended to {}", path.display()));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quiet_silences_notes_but_not_results() {
        let (p, c) = Printer::capture(true, false);
        p.note("progress");
        p.result("table\n").unwrap();
        p.human("beside json\n", true).unwrap();
        p.live(Some("live"));
        assert_eq!(c.stdout(), "table\n");
        assert_eq!(c.stderr(), "");
    }

    #[test]
    fn human_text_moves_to_stderr_when_stdout_is_taken() {
        let (p, c) = Printer::capture(false, false);
        p.human("table\n", true).unwrap();
        p.human("again\n", false).unwrap();
        assert_eq!(c.stderr(), "table\n");
        assert_eq!(c.stdout(), "again\n");
    }

    #[test]
    fn notes_cannot_drive_the_terminal() {
        let (p, c) = Printer::capture(false, false);
        p.note("run of \x1b[2J\u{202E}x\nsecond line");
        assert_eq!(c.stderr(), "run of \\x1b[2J\\u{202e}x\nsecond line\n");
    }

    #[test]
    fn dash_is_stdout_and_files_are_announced() {
        assert_eq!(
            OutputTarget::from_path(Path::new("-")),
            OutputTarget::Stdout
        );
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("r.json");
        let (p, c) = Printer::capture(false, false);
        p.write_output(&OutputTarget::Stdout, b"{}\n", "--json")
            .unwrap();
        p.write_output(&OutputTarget::from_path(&file), b"[]", "--json")
            .unwrap();
        assert_eq!(c.stdout(), "{}\n");
        assert_eq!(std::fs::read(&file).unwrap(), b"[]");
        assert!(c.stderr().starts_with("wrote "), "{}", c.stderr());
        let missing = OutputTarget::from_path(&dir.path().join("no/such/r.json"));
        let e = missing.check("--json").unwrap_err();
        assert!(e.to_string().contains("does not exist"), "{e}");
    }
}
