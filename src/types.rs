//! Small newtypes that keep offsets, log indices and terms apart.

use std::fmt;

macro_rules! number_newtype {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(
            Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash,
            serde::Serialize, serde::Deserialize,
        )]
        pub struct $name(pub u64);

        impl $name {
            /// The number inside.
            pub const fn get(self) -> u64 {
                self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.0, f)
            }
        }

        impl From<u64> for $name {
            fn from(v: u64) -> Self {
                $name(v)
            }
        }
    };
}

number_newtype!(
    /// The number of a record in a partition: dense, starting at 0, assigned on append.
    Offset
);
number_newtype!(
    /// The number of an entry (a record batch or a control entry) in the log; a Raft log index.
    LogIndex
);
number_newtype!(
    /// A Raft term. A local-only log writes term 0.
    Term
);

/// A broker's id; also its Raft node id in every partition it hosts.
pub type NodeId = u64;

/// A partition of a topic.
#[derive(
    Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct PartitionId {
    /// The topic's name.
    pub topic: String,
    /// The partition number within the topic.
    pub partition: u32,
}

impl PartitionId {
    /// The partition `partition` of `topic`.
    pub fn new(topic: impl Into<String>, partition: u32) -> Self {
        PartitionId {
            topic: topic.into(),
            partition,
        }
    }
}

impl fmt::Display for PartitionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.topic, self.partition)
    }
}

/// Where to send a request that reached a broker that does not lead the partition.
///
/// The one shape of a leader hint, from openraft's `ForwardToLeader` (with the address the
/// catalog has for the broker) through the wire's `NotLeader`, [`Error::NotLeader`] and the
/// client's leader cache.
///
/// [`Error::NotLeader`]: crate::Error::NotLeader
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LeaderHint {
    /// The leader's broker id.
    pub node_id: NodeId,
    /// The leader's address.
    pub addr: crate::Address,
    /// The Raft term the refusing broker was in: of two hints, the one with the higher term
    /// is the newer.
    pub term: Term,
}

/// How an idempotent producer numbers one batch: the producer, its epoch, and the sequence
/// number of the batch's first record (Kafka's producer id, epoch and base sequence).
///
/// A partition takes a producer's batches only in sequence order, answers a batch it already
/// holds with its original offsets, and once it has taken a batch of some epoch refuses every
/// earlier epoch of that producer ([`Error::ProducerFenced`](crate::Error::ProducerFenced)), so
/// that a batch given up on can never land after the batches sent in its place.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ProducerSeq {
    /// The producer (never 0).
    pub producer_id: u64,
    /// The producer's epoch.
    pub epoch: u16,
    /// The sequence number of the batch's first record, counting every record the producer
    /// sent to the partition in this epoch (wrapping at `u32::MAX`).
    pub base_sequence: u32,
}

impl ProducerSeq {
    /// Batch `base_sequence` of `producer_id`, in epoch 0.
    pub const fn new(producer_id: u64, base_sequence: u32) -> ProducerSeq {
        ProducerSeq {
            producer_id,
            epoch: 0,
            base_sequence,
        }
    }

    /// The same numbers in `epoch`.
    #[must_use]
    pub const fn with_epoch(self, epoch: u16) -> ProducerSeq {
        ProducerSeq { epoch, ..self }
    }
}

/// When an appended entry counts as written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Durability {
    /// After `fdatasync`: an acknowledged write is on disk on a quorum.
    #[default]
    Fsync,
    /// As soon as it is in the page cache: an acknowledged write is in memory on a quorum.
    /// Any number of process crashes lose nothing. Appends are synced only at segment rolls,
    /// before the vote changes, before snapshots and at shutdown, so a broker that loses power
    /// comes back without its unsynced writes; an acknowledged write is lost if the brokers
    /// still holding it are outvoted (with three replicas: a follower that acknowledged it
    /// loses power, then the leader fails before the third replica has it). A replica that
    /// still holds a lost write holds it as committed, which Raft never truncates: it
    /// notices when the new leader's log contradicts it, and rebuilds itself empty from the
    /// leader.
    Replicated,
}
