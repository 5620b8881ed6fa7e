//! replog: a Raft-replicated, partitioned, mmap-backed log storage engine to embed in a Rust
//! service: the storage and replication core of a Kafka-style broker, shipped as a library.
//!
//! - [`PartitionLog`]: one partition's append-only log of CRC-checked record batches in
//!   memory-mapped segment files, with a sparse offset index, crash recovery, truncation,
//!   retention and group-committed syncs. Usable on its own.
//! - [`Node`]: a broker that hosts partition replicas, each one Raft group (openraft) whose Raft
//!   log *is* the partition log. Only a partition's leader takes writes; any other broker
//!   answers [`Error::NotLeader`] with a [`LeaderHint`]. Topics are created and deleted at run
//!   time through a metadata Raft group every broker belongs to.
//! - [`Client`]: takes a bootstrap list, learns each partition's leader from metadata, sends
//!   writes there and follows redirects and leader changes, like a Kafka producer.
//! - [`Producer`]: one record at a time in, batches out: Kafka's key partitioner (murmur2)
//!   and sticky partitioner, batching by size and linger, over a [`Client`]; `flush` and
//!   `close` wait until every record sent is settled.
//! - [`Consumer`]: assigned partitions fetched ahead with long polls ([`Client::fetch_with`]
//!   waits at the end of a log for the next commit), each partition's records once and in
//!   order, with seek, pause, position and lag; or, with
//!   [`subscribe`](Consumer::subscribe), a member of a consumer group that shares a topic's
//!   partitions with the other members and commits its offsets, as Kafka's classic group
//!   protocol defines it (the offsets live in the replicated topic [`OFFSETS_TOPIC`]; see
//!   [`GroupError`] for the refusals, with Kafka's codes).
//! - A Kafka-protocol listener on each broker that asks for one
//!   ([`NodeConfig::kafka_listen`]): Kafka's own clients (kcat, librdkafka, kafka-python)
//!   create and delete topics, produce (idempotently too), fetch, list offsets, check their
//!   position after a leader change (OffsetForLeaderEpoch) and consume in groups against the
//!   same logs and coordinators (static members too), unchanged. Both doors go through one
//!   broker service (fetch rules, leader-epoch checks, topic defaults, producer ids handed out
//!   from blocks taken through the metadata log) and share one connection cap and one set of
//!   memory budgets. A Kafka producer's batches are stored as sent and served back byte for
//!   byte from where they lie; a [`Client`]'s are Kafka batches too (its clock as CreateTime),
//!   so both doors serve every producer's batches without converting them, and native
//!   clients read them as [`Record`]s. Transactions are not served.
//! - [`LocalCluster`]: a cluster's brokers in one process on loopback, for tests, benches and
//!   the demo.
//! - Security on the Kafka listener ([`NodeConfig::kafka_security_protocol`]): SASL,
//!   SCRAM-SHA-256/512 and PLAIN ([`SaslMechanism`]) with Kafka's handshake and answers,
//!   checked against each user's [`ScramCredential`] (a salt, an iteration count and two
//!   keys, never the password), kept in the metadata log; the first users come from
//!   [`NodeConfig::bootstrap_users`]; TLS on the Kafka listener (`SSL`, `SASL_SSL`) with the
//!   certificate and key of [`NodeConfig::tls`] ([`TlsConfig`]), reloaded without a restart
//!   by [`Node::reload_tls`], and, given the brokers' CA, on the native listener, between
//!   brokers (each checks its peer's certificate names `broker-<id>`) and for [`Client`]s
//!   ([`ClientConfig::tls_ca`]), refusing certificates the CA's revocation lists revoke
//!   ([`TlsConfig::crl`]); [`DevCertificates`] makes a local CA, certificates and revocation
//!   lists for dev clusters and tests.
//! - Kafka's ACLs ([`acl`]), enforced on both doors when [`NodeConfig::authorization`] is set,
//!   kept in the metadata log and managed through Kafka's ACL APIs. The native door takes
//!   the same logins ([`NodeConfig::native_sasl`]), and with the brokers' CA
//!   ([`TlsConfig::ca_cert`]) it serves what only brokers send to the broker whose certificate
//!   names it.
//! - Topics as Kafka's: configs ([`TopicConfigs`]: `cleanup.policy`, `retention.ms`,
//!   `max.message.bytes`, …) kept in the metadata log and applied by every replica without a
//!   restart ([`Client::create_topic_with_configs`], [`Client::alter_topic_configs`], Kafka's
//!   DescribeConfigs, AlterConfigs and IncrementalAlterConfigs); partitions added
//!   ([`Client::create_partitions`]); records deleted through Raft
//!   ([`Client::delete_records`], Kafka's DeleteRecords);
//!   topics created by a Kafka client's first Metadata request
//!   ([`NodeConfig::auto_create_topics`]); topic ids (KIP-516).
//!
//! # Metrics
//!
//! Brokers and clients report through the [`metrics`](https://docs.rs/metrics) facade: install
//! any recorder (`metrics-exporter-prometheus`, as `replog node --metrics-listen` does) to
//! collect them. Per replica: log end, high watermark, log start, leadership; per follower
//! of a partition led here: lag in entries, bytes and seconds since its last acknowledgement;
//! requests and their latency by operation; coordinated groups' members, generation and lag;
//! produce retries, latency and batches in flight; consumer lag and records. Names, kinds
//! and labels are listed in the repository's `src/metrics.rs`.
//!
//! # Example: a three-broker cluster in one process
//!
//! ```
//! use std::collections::BTreeMap;
//! use replog::{Client, ClientConfig, Node, NodeConfig, Offset, Record};
//!
//! # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
//! # async fn main() -> replog::Result<()> {
//! let dir = tempfile::tempdir()?;
//! // Three loopback ports, each bound once and handed to its broker.
//! let listeners = (0..3)
//!     .map(|_| std::net::TcpListener::bind("127.0.0.1:0"))
//!     .collect::<Result<Vec<_>, _>>()?;
//! let addrs = listeners
//!     .iter()
//!     .map(|l| l.local_addr())
//!     .collect::<Result<Vec<_>, _>>()?;
//! let mut nodes = Vec::new();
//! for (id, listener) in (1..=3u64).zip(listeners) {
//!     let peers: BTreeMap<u64, _> = (1..=3u64)
//!         .filter(|p| *p != id)
//!         .map(|p| (p, addrs[p as usize - 1]))
//!         .collect();
//!     let config =
//!         NodeConfig::new(id, addrs[id as usize - 1], peers, dir.path().join(id.to_string()));
//!     nodes.push(Node::start_on(config, listener).await?);
//! }
//! // (`LocalCluster` does all of this in one call.)
//!
//! // Bootstrap from broker 2 only: it creates the topic through the metadata Raft group (one
//! // partition, three replicas); then the client asks it who leads and writes there.
//! let client = Client::connect(&[addrs[1]], ClientConfig::default()).await?;
//! client.create_topic("email.send", 1, 3).await?;
//! let delivery = client.send("email.send", 0, &[Record::new("follower-message-1")]).await?;
//! assert_eq!(delivery.base_offset, Offset(0));
//!
//! // Every broker's replica has it once committed there.
//! let batches = client.fetch("email.send", 0, Offset(0), 1 << 20, None).await?;
//! assert_eq!(&batches[0].records().next().unwrap().1.value[..], b"follower-message-1");
//! # drop(client);
//! # for node in nodes { node.shutdown().await?; }
//! # Ok(())
//! # }
//! ```
//!
//! # Example: a local log
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
//! # Durability
//!
//! [`Durability::Fsync`] (the default) acknowledges a write once it is on disk on a quorum;
//! [`Durability::Replicated`] once it is in the page cache of a quorum (faster; it survives
//! any process crash, but a write acknowledged before a power loss can be lost: see the
//! variant's documentation).
//!
//! # Cargo features
//!
//! - `failpoints`: fault injection for tests, passed in through an [`Env`]: in the file layer
//!   ([`Env::with_disk_faults`]) and on the network between brokers ([`Env::with_net_faults`]).
//!
//! # Files
//!
//! The on-disk format is specified byte by byte in [`format`](mod@format), the native wire
//! protocol in [`wire`](mod@wire); the architecture is described in the repository's
//! `README.md`.

#![deny(unsafe_code)]
#![warn(missing_docs)]

mod address;
mod catalog;
mod client;
mod config;
mod consumer;
mod dirlock;
mod env;
mod error;
mod group;
mod kafka;
mod local_cluster;
mod log;
mod metrics;
mod node;
pub mod partitioner;
mod producer;
mod protocol;
mod raft;
mod security;
mod segment;
mod tls;
mod topic_config;
mod transport;
mod types;
mod version;

pub mod format {
    #![doc = include_str!("segment/FORMAT.md")]
}

pub mod wire {
    #![doc = include_str!("transport/PROTOCOL.md")]
}

pub use address::{Address, HOST_BYTES_MAX};
pub use client::{
    BrokerDescription, BrokerState, Client, ClientConfig, Delivery, FetchOptions, Fetched,
    GroupInfo, GroupMemberInfo, GroupSummary, PartitionDescription, Reassignment, RouteStep,
    SaslLogin, UserCredentials,
};
pub use config::LogConfig;
pub use consumer::{Consumer, ConsumerConfig, ConsumerRecord, StartAt};
pub use env::{Env, FaultPoint};
#[cfg(any(test, feature = "failpoints"))]
pub use env::{FaultInjector, NetFaults, PowerLoss};
pub use error::{CorruptKind, Error, Result};
pub use group::assignor::Assignor;
pub use group::{GroupError, OFFSETS_TOPIC};
pub use local_cluster::LocalCluster;
pub use log::{AppendInfo, CompactionPolicy, CompactionStats, LogIter, PartitionLog};
pub use node::{Election, Node, NodeConfig, PartitionStatus};
pub use producer::{Producer, ProducerConfig, RecordMetadata};

pub use security::acl;
pub use security::{
    ClientAuth, KafkaSecurityProtocol, PrincipalMappingRules, SaslError, SaslMechanism,
    ScramCredential, ScramMechanism,
};
pub use segment::batch::{Batch, RecordIter, TimestampType};
pub use segment::record::{Header, Record};
pub use segment::{Preallocate, RecoveryEvent};
pub use tls::{DevCertificates, TlsConfig, TlsError};
pub use topic_config::{ConfigChange, ConfigEntry, ConfigSource, TopicConfigs};
pub use types::{Durability, LeaderHint, LogIndex, NodeId, Offset, PartitionId, ProducerSeq, Term};
pub use version::{PROTOCOL_VERSION, PROTOCOL_VERSION_MIN};

/// Helpers for the `replog` binary's inspection tools. Not part of the API.
#[doc(hidden)]
pub mod __tools {
    pub use crate::segment::{SegmentReport, inspect_segment};
}

/// Measurements the examples print beside their targets. Not part of the API.
#[doc(hidden)]
pub mod __bench {
    pub use crate::tls::floor::stream as tls_stream_floor;
}

/// Entry points for the fuzz targets. Not part of the API.
#[doc(hidden)]
pub mod __fuzz {
    pub use crate::kafka::fuzz_kafka_request;
    pub use crate::security::fuzz_sasl_server;
    pub use crate::segment::frame::fuzz_decode_frame;
    pub use crate::segment::fuzz_scan_segment;
    pub use crate::segment::kafka::fuzz_kafka_batch;
    pub use crate::transport::frame::{fuzz_decode_head, fuzz_read_frames};
}
