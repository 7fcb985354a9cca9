//! Helpers the sy-docs integration tests share: where the repository and the tool binaries are.
#![allow(clippy::unwrap_used, dead_code)]

use std::path::{Path, PathBuf};

/// The repository's root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// A tool binary: beside the test's target directory, or in `SY_TEST_BIN_DIR` when set (a copy
/// of them that a concurrent build in a shared target directory cannot replace).
pub fn bin(name: &str) -> PathBuf {
    let dir = match std::env::var_os("SY_TEST_BIN_DIR") {
        Some(d) => PathBuf::from(d),
        None => {
            let exe = std::env::current_exe().unwrap();
            exe.parent().unwrap().parent().unwrap().to_path_buf()
        }
    };
    dir.join(name)
}

/// Runs the tool binary `tool` with `args` in `work` and returns its output; panics, with its
/// standard error, unless it succeeds.
pub fn run_in(work: &Path, tool: &str, args: &[&str]) -> std::process::Output {
    let out = std::process::Command::new(bin(tool))
        .args(args)
        .current_dir(work)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{tool} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}
