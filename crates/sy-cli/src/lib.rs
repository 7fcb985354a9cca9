//! Shared command-line plumbing for the sy tools.
//!
//! Every tool (`sy-collect`, `sy-fit`, `sy-margin`, `sy-select`, `sy-sim`) takes the same
//! [`CommonArgs`] (`--run-dir`, `--seed`, `--no-progress`, `--json`, `-v/-q`), reports errors
//! through [`ToolError`] with the exit codes of [`ExitStatus`], and writes every output file with
//! [`atomic_write`] (from `sy-rundir`, re-exported) so a failed run never leaves a partial file
//! behind.

mod allocator;
mod common;
mod error;
mod progress;

pub use allocator::{Arenas, keep_freed_memory};
pub use common::{
    CacheArgs, CommonArgs, dir_of, init_tracing, lock_output_dirs, print_completions,
};
pub use error::{ExitStatus, RunDirError, ToolError, run_main, tool_error_from};
pub use progress::{Phases, progress_bar, spinner};
pub use sy_rundir::{
    RunError, atomic_write, atomic_write_all, atomic_write_json, check_output_path, file_sha256,
    json_bytes, json_error_with_field,
};
