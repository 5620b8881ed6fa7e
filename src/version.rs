//! The protocol version: what brokers of one cluster may say to each other, on the native wire
//! and in the metadata log.
//!
//! Brokers of two builds can share a cluster while it is upgraded one broker at a time (a
//! rolling upgrade). Each build speaks every version from [`PROTOCOL_VERSION_MIN`] to
//! [`PROTOCOL_VERSION`], and a broker can be pinned lower
//! ([`NodeConfig::protocol_version`](crate::NodeConfig::protocol_version), `replog node
//! --protocol-version`) so that it speaks exactly as the previous build did:
//!
//! - **On the wire**, each connection speaks the highest version both ends know. A connection
//!   opens with a Hello that names the caller's range and is answered with the version chosen;
//!   a broker that closes the connection on a Hello (a build before versions, or one pinned
//!   to version 1) is spoken to at version 1, without one. An operation of a later version
//!   than its connection's closes the connection, as an unknown operation always did.
//! - **In the metadata log**, the cluster's *finalized* version (Kafka's `metadata.version`)
//!   is a record, `FinalizeVersion`, which the metadata leader writes once every registered
//!   broker speaks the version over a live connection. A record of a later version than the
//!   finalized one is never written; a broker that reads one newer than it understands, or a
//!   finalized version above its own, stops applying the log and says which versions
//!   (`Error::UnsupportedVersion`), rather than skipping it. Finalizing is one way: once every
//!   broker speaks a version, none may go back below it.
//! - **In a partition's log**, a new kind of record (a payload format, a frame kind) comes
//!   with a protocol version too, and is written only once the cluster finalized it, so a
//!   follower of an older build is never sent one. On disk, segments carry a format version
//!   of their own (FORMAT.md §9): a segment newer than the build reads is refused when its
//!   log opens (`CorruptKind::UnsupportedVersion`, naming the version found and those read).
//!
//! | version | what it adds |
//! |---|---|
//! | 1 | the native wire and the metadata log as they were before versions (operations 1 to 23, metadata commands 0 to 17) |
//! | 2 | Hello (operation 24); PreVote (operation 25: a candidate asks whether it would win before it bumps its term, and a voter that still hears its leader says no); the `FinalizeVersion` metadata command (18) |
//! | 3 | BrokerHeartbeat (operation 26: one liveness message per broker pair, sent while the broker's disk answers) and Quiesce (operation 27: a leader asks a follower to let idle Raft groups go quiet); a broker lets a Raft group go quiet only where every member's broker speaks 3 |
//! | 4 | FetchAsStored (operation 28: a fetch whose answer gives each batch's payload format, so that a Kafka batch, which is what a native producer sends from this version on, goes to native clients as stored instead of converted into replog's records) |

/// The newest protocol version this build speaks.
pub const PROTOCOL_VERSION: u16 = 4;

/// The oldest protocol version this build speaks: the one of builds before versions.
pub const PROTOCOL_VERSION_MIN: u16 = 1;

/// Whether `version` is one this build speaks.
pub(crate) fn is_known(version: u16) -> bool {
    (PROTOCOL_VERSION_MIN..=PROTOCOL_VERSION).contains(&version)
}
