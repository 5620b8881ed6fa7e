//! The Raft layer: a partition's log as an openraft log store, and its state machine.
//!
//! This is the only module that names openraft types (openraft 0.10 is an alpha whose API
//! moves between releases). The partition log *is* the Raft log: one frame per entry, the
//! leader's record batch stored as it arrived, control entries (blank, membership) taking a log
//! index but no offsets.

pub(crate) mod dormant;
pub(crate) mod leadership;
mod meta_file;
pub(crate) mod network;
pub(crate) mod producers;
pub(crate) mod quiet;
pub(crate) mod replica;
pub(crate) mod state_machine;
pub(crate) mod storage;
pub(crate) mod types;
