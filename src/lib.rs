//! replog: a Raft-replicated, partitioned, mmap-backed log storage engine to embed in a Rust
//! service, the storage and replication core of a Kafka-style broker shipped as a library.
//!
//! This release provides the local partition log, [`PartitionLog`]: an append-only log of
//! CRC-checked record batches in memory-mapped segment files, with a sparse offset index,
//! crash recovery, truncation, retention and group-committed syncs. Replication (one Raft
//! group per partition), the node and the redirect-following client build on it.
//!
//! ```
//! use replog::{LogConfig, Offset, PartitionLog, Record};
//!
//! # fn main() -> replog::Result<()> {
//! let dir = tempfile::tempdir()?;
//! let log = PartitionLog::open(dir.path(), LogConfig::default())?;
//! log.append(&[Record::new("follower-message-1").with_key("email")])?;
//! log.flush()?; // durable from here on
//! for item in log.iter(Offset(0)) {
//!     let (offset, record) = item?;
//!     println!("{offset}: {:?}", record.value);
//! }
//! # Ok(())
//! # }
//! ```
//!
//! # Cargo features
//!
//! - `failpoints`: fault injection in the file layer (`LogConfig::faults`), for tests.
//!
//! # Files
//!
//! The on-disk format is specified byte by byte in [`format`](mod@format); the architecture is described
//! in the repository's `README.md`.

#![deny(unsafe_code)]
#![warn(missing_docs)]

mod client;
mod config;
mod error;
mod fault;
mod log;
mod node;
mod protocol;
mod raft;
mod segment;
mod transport;
mod types;

pub mod format {
    #![doc = include_str!("segment/FORMAT.md")]
}

pub use client::{Client, ClientConfig, Delivery, PartitionDescription, RouteStep};
pub use config::{LogConfig, Preallocate};
pub use error::{CorruptKind, Error, Result};
#[cfg(any(test, feature = "failpoints"))]
pub use fault::FaultInjector;
pub use fault::FaultPoint;
pub use log::{AppendInfo, LogIter, PartitionLog};
pub use node::{Node, NodeConfig, PartitionStatus};
pub use raft::storage::Durability;
pub use segment::RecoveryEvent;
pub use segment::record::{Batch, Header, Record, RecordIter};
pub use types::{LeaderHint, LogIndex, NodeId, Offset, PartitionId, Term};

/// Helpers for the `replog` binary's inspection tools. Not part of the API.
#[doc(hidden)]
pub mod __tools {
    pub use crate::segment::{SegmentReport, inspect_segment};
}

/// Entry points for the fuzz targets. Not part of the API.
#[doc(hidden)]
pub mod __fuzz {
    pub use crate::segment::fuzz_scan_segment;
    pub use crate::segment::record::fuzz_decode_frame;
    pub use crate::transport::frame::fuzz_decode_head;
}
