//! # sy-run: the run directory's files
//!
//! Libraries and tools alike write their outputs through [`atomic`], so a failed run never
//! leaves a partial file behind, and check output paths before writing anything. Errors are
//! [`RunError`]; [`RunError::is_bad_input`] tells a bad path (exit code 2) from a failed write
//! (exit code 1).
//!
//! This crate will own the run directory's layout; for now it holds the file operations every
//! crate needs without depending on the command-line crate.

pub mod atomic;

pub use atomic::{
    RunError, atomic_write, atomic_write_all, atomic_write_json, check_output_path, file_sha256,
    json_bytes, json_error_with_field,
};
