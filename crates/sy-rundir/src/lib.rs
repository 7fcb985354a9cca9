//! # sy-rundir: the run directory, its artifacts and their files
//!
//! Libraries and tools alike write their outputs through [`atomic`], so a failed run never
//! leaves a partial file behind, and check output paths before writing anything. Errors are
//! [`RunError`]; [`RunError::is_bad_input`] tells a bad path (exit code 2) from a failed write
//! (exit code 1).
//!
//! [`Fault`] says whose fault any library error is, for the tools' exit codes.
//!
//! [`layout`] owns the run directory: every artifact's file name, writer, schema version and
//! the checked read ([`read_artifact`]) that refuses a file of another kind or version;
//! [`artifact`] holds the artifacts' document types (the layout's table says where the others
//! live).

pub mod artifact;
pub mod atomic;
mod clock;
mod fault;
pub mod guard;
pub mod layout;
pub mod split;

pub use atomic::{
    Durability, RunError, Staged, atomic_write, atomic_write_all, atomic_write_json,
    check_output_path, file_sha256, json_bytes, json_error_with_field, stage_file, stage_open,
};
pub use clock::now_rfc3339;
pub use fault::Fault;
pub use guard::{
    LOCK_FILE_NAME, RunKind, RunLock, check_input_file, check_output_dir, check_output_target,
    check_plan_name, check_run_kind, ensure_dir, escape_control, open_append, read_input,
    terminal_message,
};
pub use layout::{
    ADAPTIVE_SCHEMA_VERSION, Artifact, ArtifactError, BLOCK_SCHEMA_VERSION, CHECK_SCHEMA_VERSION,
    COMPARISON_SCHEMA_VERSION, EVAL_MANIFEST_SCHEMA_VERSION, FIT_SCHEMA_VERSION,
    MANIFEST_SCHEMA_VERSION, MARGINS_SCHEMA_VERSION, PROBE_CACHE_SCHEMA_VERSION,
    RECORD_SCHEMA_VERSION, SELECTION_SCHEMA_VERSION, SPLITS_SCHEMA_VERSION, check_document,
    read_artifact, read_document,
};
