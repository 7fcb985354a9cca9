//! Background load held steady while a probe runs.
//!
//! Each background *slot* is a closed loop: it sends one request through the accounting path,
//! and when that request ends it sends the next, so the number of booked background requests
//! stays constant. Slots come in three kinds:
//!
//! - prefill contention: large uncached prompts (unique tokens every time), one output token;
//! - decode contention: short prompts generating `short` or `long` outputs (`ignore_eos`), with
//!   equal request counts for the short and the long condition;
//! - busy capable destination: long generations on the capable model.
//!
//! [`BackgroundLoad::start`] spawns the slots, [`BackgroundLoad::warm_up`] waits until every
//! slot has streamed its first token and then the plan's warm-up time, and
//! [`BackgroundLoad::stop`] cancels the slots; every cancelled request still deletes its
//! reservation before the slot task ends.

pub mod load;
pub mod slots;

pub use load::BackgroundLoad;
pub use slots::{Loops, SlotSpec, busy_slot};
