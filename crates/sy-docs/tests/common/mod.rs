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
