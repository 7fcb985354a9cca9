//! The run directory's guards: one writer at a time ([`RunLock`]), nothing written outside it
//! (no output through a symbolic link, [`check_output_target`], [`ensure_dir`],
//! [`open_append`]), only regular files read as inputs ([`check_input_file`]) and nothing from
//! an input echoed raw to a terminal ([`escape_control`]).
//!
//! The lock is an advisory `flock(2)` on [`LOCK_FILE_NAME`] in the run directory, taken by every
//! tool that writes there for its whole run. The kernel drops it when the holder exits, however
//! it exits (a crash, `kill -9`), so a lock is never left stale; the file holds the holder's PID
//! and command line for the message a second writer gets and is removed when the run ends, so a
//! lock file found with a holder in it was left by a run that crashed, which is reported when
//! the next one takes the lock.

use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;

use crate::atomic::RunError;
use crate::layout::Artifact;

/// The lock file of a run directory (hidden; it holds the PID and command of the tool writing
/// there, empty when none is).
pub const LOCK_FILE_NAME: &str = ".sy-rundir.lock";

/// The run directories this process holds the lock of: every output under one of them is
/// written without following a symbolic link below it ([`check_output_target`]).
static ROOTS: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// The lock of a run directory, held until dropped (or the process ends).
#[derive(Debug)]
pub struct RunLock {
    file: File,
    dir: PathBuf,
    /// What an earlier holder left behind when it ended without releasing the lock (it crashed
    /// or was killed): its PID and command.
    stale: Option<String>,
    /// Whether taking the lock created the directory (removed again, when the run left nothing
    /// else in it).
    created: bool,
}

impl RunLock {
    /// Takes the lock of run directory `dir` for `tool` (created, with the directory, when
    /// missing). Another process holding it is bad input (exit code 2) naming its PID and
    /// command; `dir` being a symbolic link to elsewhere is allowed (the user's choice of
    /// where the run lives), but nothing below it may be one.
    pub fn acquire(dir: &Path, tool: &str) -> Result<RunLock, RunError> {
        if let Ok(m) = std::fs::metadata(dir)
            && !m.is_dir()
        {
            return Err(RunError::NotRegular {
                path: dir.to_path_buf(),
                what: "a run directory must be a directory",
            });
        }
        let created = std::fs::symlink_metadata(dir).is_err();
        std::fs::create_dir_all(dir).map_err(|source| {
            // A path under a file is the user's mistake, not the system's.
            if source.raw_os_error() == Some(libc::ENOTDIR) {
                RunError::NotRegular {
                    path: dir.to_path_buf(),
                    what: "cannot be a run directory: a part of the path is a file",
                }
            } else {
                RunError::Io {
                    what: "cannot create the run directory",
                    path: dir.to_path_buf(),
                    source,
                }
            }
        })?;
        let path = dir.join(LOCK_FILE_NAME);
        let mut file = lock_file(dir, &path)?;
        let mut before = String::new();
        let _ = file.read_to_string(&mut before);
        let stale = (!before.trim().is_empty()).then(|| holder_text(&before));
        let command: Vec<String> = std::env::args().map(|a| escape_control(&a)).collect();
        let text = format!(
            "pid {}\ntool {tool}\ncommand {}\n",
            std::process::id(),
            command.join(" ")
        );
        let written = file
            .set_len(0)
            .and_then(|()| file.write_all_at_start(text.as_bytes()));
        if let Err(source) = written {
            let _ = std::fs::remove_file(&path);
            if created {
                let _ = std::fs::remove_dir(dir);
            }
            return Err(RunError::Io {
                what: "cannot write",
                path,
                source,
            });
        }
        let canonical = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
        if let Ok(mut roots) = ROOTS.lock() {
            roots.push(canonical);
        }
        Ok(RunLock {
            file,
            dir: dir.to_path_buf(),
            stale,
            created,
        })
    }

    /// The run directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The PID and command of an earlier holder that ended without releasing the lock (it
    /// crashed or was killed), if one did: its outputs may be incomplete.
    pub fn stale_holder(&self) -> Option<&str> {
        self.stale.as_deref()
    }
}

impl Drop for RunLock {
    fn drop(&mut self) {
        // Removed while still held (a run that ends cleanly leaves no lock file; one that
        // crashed leaves its holder's PID and command in it, which is how the next tool
        // recognises the crash). A waiting tool that opened the removed file sees it is no
        // longer the lock file and takes the lock again ([`lock_file`]).
        let _ = self.file.set_len(0);
        let _ = std::fs::remove_file(self.dir.join(LOCK_FILE_NAME));
        // A directory this run created and left empty (it failed before writing anything) is
        // removed too.
        if self.created {
            let _ = std::fs::remove_dir(&self.dir);
        }
        let _ = self.file.unlock();
        let canonical = std::fs::canonicalize(&self.dir).unwrap_or_else(|_| self.dir.clone());
        if let Ok(mut roots) = ROOTS.lock()
            && let Some(i) = roots.iter().position(|r| *r == canonical)
        {
            roots.remove(i);
        }
    }
}

/// What a run directory holds: a calibration run (sy-collect, sy-fit, sy-margin, sy-select) or
/// an evaluation (sy-eval). Each tool writes only into a directory of its own kind (or a new
/// one), so neither overwrites the other's files (both write a `report.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunKind {
    Calibration,
    Evaluation,
}

impl RunKind {
    /// Files only a run of this kind holds.
    fn markers(self) -> &'static [Artifact] {
        match self {
            RunKind::Calibration => &[
                Artifact::Manifest,
                Artifact::Records,
                Artifact::RecordsParquet,
                Artifact::Splits,
                Artifact::Fit,
                Artifact::Margins,
                Artifact::Selection,
            ],
            RunKind::Evaluation => &[
                Artifact::EvalManifest,
                Artifact::Comparison,
                Artifact::EvalBlocks,
            ],
        }
    }

    fn describe(self) -> &'static str {
        match self {
            RunKind::Calibration => "a calibration run (sy-collect, sy-fit, sy-margin, sy-select)",
            RunKind::Evaluation => "an evaluation (sy-eval)",
        }
    }
}

/// Refuses (bad input) to write into `dir` when it holds a run of the other kind, naming the
/// file that shows it: sy-eval never writes into a calibration run directory, nor the
/// calibration tools into an evaluation's.
pub fn check_run_kind(dir: &Path, kind: RunKind) -> Result<(), RunError> {
    let other = match kind {
        RunKind::Calibration => RunKind::Evaluation,
        RunKind::Evaluation => RunKind::Calibration,
    };
    if let Some(found) = other
        .markers()
        .iter()
        .find(|m| std::fs::symlink_metadata(m.path(dir)).is_ok())
    {
        return Err(RunError::OtherTool {
            dir: dir.to_path_buf(),
            file: found.path(dir),
            holds: other.describe(),
            wants: kind.describe(),
        });
    }
    Ok(())
}

trait WriteAtStart {
    fn write_all_at_start(&mut self, bytes: &[u8]) -> std::io::Result<()>;
}

impl WriteAtStart for File {
    fn write_all_at_start(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        use std::os::unix::fs::FileExt;
        self.write_all_at(bytes, 0)?;
        self.flush()
    }
}

/// Opens and locks `path`, the lock file of `dir`. The file is removed by its holder when the
/// run ends, so a file locked here may have been removed meanwhile (a holder ending between
/// this open and this lock): the lock counts only when `path` still names the locked file,
/// else it is taken again on the new one.
fn lock_file(dir: &Path, path: &Path) -> Result<File, RunError> {
    use std::os::unix::fs::MetadataExt;
    for _ in 0..64 {
        let mut file = std::fs::File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(path)
            .map_err(|source| link_or_io(path, "cannot open the lock file", source))?;
        check_regular(&file, path)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let mut holder = String::new();
                let _ = file.read_to_string(&mut holder);
                return Err(RunError::Locked {
                    dir: dir.to_path_buf(),
                    holder: holder_text(&holder),
                });
            }
            Err(std::fs::TryLockError::Error(source)) => {
                return Err(RunError::Io {
                    what: "cannot lock",
                    path: path.to_path_buf(),
                    source,
                });
            }
        }
        let same = match (file.metadata(), std::fs::symlink_metadata(path)) {
            (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
            _ => false,
        };
        if same {
            return Ok(file);
        }
    }
    Err(RunError::Io {
        what: "cannot lock",
        path: path.to_path_buf(),
        source: std::io::Error::other("the lock file kept being replaced"),
    })
}

/// The holder's PID and command, on one line, from the lock file's text.
fn holder_text(text: &str) -> String {
    let field = |k: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(k).map(str::trim))
            .map(escape_control)
    };
    match (field("pid "), field("command ")) {
        (Some(pid), Some(cmd)) => format!("PID {pid} ({cmd})"),
        (Some(pid), None) => format!("PID {pid}"),
        _ => "another process (it left no PID)".to_string(),
    }
}

fn link_or_io(path: &Path, what: &'static str, source: std::io::Error) -> RunError {
    // O_NOFOLLOW on a symbolic link fails with ELOOP.
    if source.raw_os_error() == Some(libc::ELOOP) || is_symlink(path) {
        RunError::Link {
            path: path.to_path_buf(),
        }
    } else {
        RunError::Io {
            what,
            path: path.to_path_buf(),
            source,
        }
    }
}

fn is_symlink(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink())
}

fn check_regular(file: &File, path: &Path) -> Result<(), RunError> {
    let m = file.metadata().map_err(|source| RunError::Io {
        what: "cannot inspect",
        path: path.to_path_buf(),
        source,
    })?;
    if !m.is_file() {
        return Err(RunError::NotRegular {
            path: path.to_path_buf(),
            what: "expected a regular file",
        });
    }
    Ok(())
}

/// The held run directory `path` lies in, if any, and `path` relative to it.
fn under_root(path: &Path) -> Option<(PathBuf, PathBuf)> {
    let roots = ROOTS.lock().ok()?;
    if roots.is_empty() {
        return None;
    }
    let abs = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir().ok()?.join(path)
    };
    // Symbolic links between the root and the file are what is refused: so the walk is over
    // the path as given, not a canonical one (which would resolve them away).
    roots
        .iter()
        .find_map(|root| lexical_under(&abs, root).map(|rel| (root.clone(), rel)))
}

/// `path` relative to `root`, when a prefix of `path` (as written: its links below that prefix
/// are not resolved) is `root` once canonicalised, and the rest climbs no `..`.
fn lexical_under(path: &Path, root: &Path) -> Option<PathBuf> {
    let parts: Vec<Component<'_>> = path.components().collect();
    let mut prefix = PathBuf::new();
    for (i, c) in parts.iter().enumerate() {
        prefix.push(c);
        if std::fs::canonicalize(&prefix).is_ok_and(|p| p == root) {
            let rest = &parts[i + 1..];
            if rest
                .iter()
                .any(|c| matches!(c, Component::ParentDir | Component::RootDir))
            {
                return None;
            }
            return Some(rest.iter().collect());
        }
    }
    None
}

/// Refuses, as bad input (exit code 2), to write `path` when it would be written outside its
/// run directory: `path` or a directory between the held run directory and it is a symbolic
/// link, or `path` exists and is not a regular file (a FIFO, a device, a directory). A path
/// outside every held run directory is checked only for being a link to a non-regular file.
/// Every atomic write of this crate calls it.
pub fn check_output_target(path: &Path) -> Result<(), RunError> {
    if let Some((root, rel)) = under_root(path) {
        let mut at = root;
        let parts: Vec<_> = rel.components().collect();
        for (i, c) in parts.iter().enumerate() {
            at.push(c);
            let Ok(m) = std::fs::symlink_metadata(&at) else {
                break;
            };
            if m.file_type().is_symlink() {
                return Err(RunError::Link { path: at });
            }
            let last = i + 1 == parts.len();
            if !last && !m.is_dir() {
                return Err(RunError::NotRegular {
                    path: at,
                    what: "expected a directory",
                });
            }
        }
    }
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => match std::fs::metadata(path) {
            Ok(t) if t.is_file() => Ok(()),
            _ => Err(RunError::Link {
                path: path.to_path_buf(),
            }),
        },
        // A directory is left to `check_output_path`, which names the flag.
        Ok(m) if !m.is_file() && !m.is_dir() => Err(RunError::NotRegular {
            path: path.to_path_buf(),
            what: "not a regular file (a FIFO, device or socket cannot be an output)",
        }),
        _ => Ok(()),
    }
}

/// Refuses (bad input), before anything is written, an output directory that is a symbolic link
/// or not a directory, or lies below one inside the run directory; a missing one passes.
pub fn check_output_dir(path: &Path) -> Result<(), RunError> {
    check_output_target(&path.join(".probe"))?;
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => Err(RunError::Link {
            path: path.to_path_buf(),
        }),
        Ok(m) if !m.is_dir() => Err(RunError::NotRegular {
            path: path.to_path_buf(),
            what: "expected a directory",
        }),
        _ => Ok(()),
    }
}

/// Creates directory `path` (and its parents) inside the run directory, or checks that it is
/// one: a symbolic link or a file in its place is refused (bad input) naming it.
pub fn ensure_dir(path: &Path) -> Result<(), RunError> {
    check_output_dir(path)?;
    match std::fs::symlink_metadata(path) {
        Ok(_) => Ok(()),
        Err(_) => std::fs::create_dir_all(path).map_err(|source| RunError::Io {
            what: "cannot create the directory",
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// Opens `path` for appending (created when missing) without following a symbolic link: a
/// link or a non-regular file in its place is refused (bad input) naming it, so an append
/// (or a `--resume` cutting a torn tail) never writes outside the run directory.
pub fn open_append(path: &Path) -> Result<File, RunError> {
    check_output_target(path)?;
    let file = std::fs::File::options()
        .read(true)
        .append(true)
        .create(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|source| link_or_io(path, "cannot open", source))?;
    check_regular(&file, path)?;
    Ok(file)
}

/// Refuses, as bad input, an input file that is not a regular file (a FIFO, which would block
/// the reader forever, a device, a socket, a directory), naming it. A missing file passes
/// (its reader names it).
pub fn check_input_file(path: &Path) -> Result<(), RunError> {
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => Err(RunError::NotRegular {
            path: path.to_path_buf(),
            what: "is a directory, expected a file",
        }),
        Ok(m) if !m.is_file() => Err(RunError::NotRegular {
            path: path.to_path_buf(),
            what: "not a regular file (a FIFO, device or socket cannot be read as an input)",
        }),
        _ => Ok(()),
    }
}

/// Reads input file `path` whole, refusing a non-regular file ([`check_input_file`]) and one
/// larger than `limit` bytes, as bad input naming it.
pub fn read_input(path: &Path, limit: u64) -> Result<Vec<u8>, RunError> {
    check_input_file(path)?;
    let read_error = |source| RunError::Read {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::options()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(read_error)?;
    check_regular(&file, path)?;
    let mut bytes = Vec::new();
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(read_error)?;
    if bytes.len() as u64 > limit {
        return Err(RunError::TooLarge {
            path: path.to_path_buf(),
            limit,
        });
    }
    Ok(bytes)
}

/// A plan's `name` goes into run ids, messages and file names: one line of printable text.
/// `Err` holds the message for the plan's `name` field.
pub fn check_plan_name(name: &str) -> Result<(), String> {
    if name.chars().any(char::is_control) {
        return Err(format!(
            "{:?} holds control characters (a newline, an escape): a name is one line of \
             printable text",
            escape_control(name)
        ));
    }
    Ok(())
}

/// `text` with every control character (newlines, carriage returns, escape sequences, other
/// C0/C1 codes) written as an escape (`\n`, `\u{1b}`), for echoing input-derived text to a
/// terminal: a name from a file can then never forge a line of output or drive the terminal.
pub fn escape_control(text: &str) -> String {
    if !text.chars().any(char::is_control) {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// A multi-line message for a terminal: every line's control characters escaped
/// ([`escape_control`]) and every line after the first indented, so a line of it can never
/// pass for a line of its own (`error: ...`).
pub fn terminal_message(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for (i, line) in text.split('\n').enumerate() {
        if i > 0 {
            out.push_str("\n  ");
        }
        out.push_str(&escape_control(line));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_is_refused_naming_the_holder_and_a_crash_is_recognised() {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("run");
        // A directory the lock created and the run left empty is removed with the lock.
        drop(RunLock::acquire(&run, "sy-test").unwrap());
        assert!(!run.exists());
        std::fs::create_dir_all(&run).unwrap();
        let lock = RunLock::acquire(&run, "sy-test").unwrap();
        assert!(lock.stale_holder().is_none());
        let e = RunLock::acquire(&run, "sy-other").unwrap_err();
        assert!(e.is_bad_input());
        let text = e.to_string();
        assert!(
            text.contains(&format!("PID {}", std::process::id())) && text.contains("run"),
            "{text}"
        );
        drop(lock);
        assert!(!run.join(LOCK_FILE_NAME).exists(), "removed on release");
        let lock = RunLock::acquire(&run, "sy-other").unwrap();
        assert!(lock.stale_holder().is_none(), "released cleanly");
        drop(lock);
        // A holder that died: its text is left, the kernel released its lock.
        std::fs::write(run.join(LOCK_FILE_NAME), "pid 99999\ncommand sy-fit x\n").unwrap();
        let lock = RunLock::acquire(&run, "sy-other").unwrap();
        assert_eq!(lock.stale_holder(), Some("PID 99999 (sy-fit x)"));
    }

    #[test]
    fn writes_through_links_below_the_run_directory_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("run2");
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        let _lock = RunLock::acquire(&run, "sy-test").unwrap();
        std::os::unix::fs::symlink(&outside, run.join("bundles")).unwrap();
        let e = check_output_target(&run.join("bundles/a.json")).unwrap_err();
        assert!(matches!(e, RunError::Link { .. }), "{e}");
        assert!(e.to_string().contains("bundles"), "{e}");
        assert!(ensure_dir(&run.join("bundles")).is_err());
        std::os::unix::fs::symlink(outside.join("r"), run.join("records.jsonl")).unwrap();
        let e = open_append(&run.join("records.jsonl")).unwrap_err();
        assert!(e.to_string().contains("records.jsonl"), "{e}");
        assert!(!outside.join("r").exists());
        ensure_dir(&run.join("blocks")).unwrap();
        check_output_target(&run.join("blocks/b.json")).unwrap();
        open_append(&run.join("ok.jsonl")).unwrap();
    }

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(escape_control("plain é"), "plain é");
        assert_eq!(
            escape_control("a\nerror: x\u{1b}[2J"),
            "a\\nerror: x\\u{1b}[2J"
        );
        assert_eq!(terminal_message("a\nb\r"), "a\n  b\\r");
    }
}

#[cfg(test)]
mod plan_name_tests {
    use super::check_plan_name;

    #[test]
    fn a_plan_name_is_one_printable_line() {
        assert!(check_plan_name("demo run").is_ok());
        let e = check_plan_name("x\nerror: forged").unwrap_err();
        assert!(!e.contains('\n'), "the message stays one line: {e}");
        assert!(
            e.contains("error: forged") && e.contains("control characters"),
            "{e}"
        );
    }
}
