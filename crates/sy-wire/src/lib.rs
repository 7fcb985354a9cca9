//! Dynamo 1.6.1 wire types: the OpenAI-compatible frontend (completions and chat, with Dynamo's
//! `nvext` extension) and the selection service (`dynamo.select_service`); and
//! [`ObservedFields`], what the adapter reads from those answers about one candidate and a record
//! stores.
//!
//! Why a crate of its own: the simulator (`sy-sim`) *serialises* these bodies and the clients
//! (`sy-dynamo`, used by `sy-collect`) *deserialise* them. Keeping one definition means the
//! simulator cannot drift from what the clients expect, and the fixture tests under
//! `tests/fixtures/dynamo-1.6.1/` (JSON captured from the real Dynamo 1.6.1) pin both to the
//! real wire format.
//!
//! Conventions:
//! - Field names are exactly Dynamo's JSON names.
//! - Worker ids are `u64` (Dynamo's ids are above 2^53; never parse them as `f64`).
//! - Sequence hashes are `i64` (negative values occur).
//! - Every struct carries `extra`: any field Dynamo sends that is not modelled here is kept
//!   (flattened) so that a deserialise → serialise round trip loses nothing, and a newer
//!   Dynamo adding fields does not break the clients.
//! - Optional fields are `Option` and skipped when `None`.

pub mod failure;
pub mod frontend;
pub mod observed;
pub mod selection;

pub use failure::ErrorClass;
pub use frontend::*;
pub use observed::{ObservedFields, unix_ms_now};
pub use selection::*;

/// Unmodelled JSON fields, kept verbatim.
pub type Extra = serde_json::Map<String, serde_json::Value>;

/// A Dynamo worker (instance) id. Always an integer, often above 2^53.
pub type WorkerId = u64;

/// A data-parallel rank inside one worker.
pub type DpRank = u32;

/// A token id.
pub type TokenId = u32;
