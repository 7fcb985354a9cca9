//! The document types of the run directory's artifacts, beside their names
//! ([`crate::layout::Artifact`]): what each file holds, for the tool that writes it and every
//! reader. The code that computes a document stays with its tool or library; the type is here.
//!
//! A type whose members are a heavy library's results stays with that library (this crate
//! depends only on `sy-selector`, `sy-stats` and serde); [`crate::layout`]'s table names where
//! each one lives, and why.

pub mod adaptive;
pub mod check;
pub mod comparison;
pub mod eval_block;
pub mod eval_manifest;
pub mod fit;
pub mod manifest;
pub mod margins;
pub mod selection;
