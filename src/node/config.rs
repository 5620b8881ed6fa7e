//! [`NodeConfig`]: what a broker is told when it starts.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use crate::config::LogConfig;
use crate::raft::storage::Durability;
use crate::types::NodeId;

/// Configuration of a [`Node`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct NodeConfig {
    /// This broker's id; also its Raft node id in every partition it hosts. Never reuse an id
    /// with a fresh data directory.
    pub id: NodeId,
    /// Address to listen on for peers and clients.
    pub listen: SocketAddr,
    /// Every other broker: id and address. The ids are the cluster's brokers; an address is
    /// where to find a broker until the metadata log says otherwise (each broker registers
    /// its `listen` address there when it starts, so a broker that moved is found again).
    pub peers: BTreeMap<NodeId, SocketAddr>,
    /// Directory holding one subdirectory per partition replica (`{topic}-{partition}`).
    pub data_dir: PathBuf,
    /// Configured topics and their partition counts: they exist from the start, with a
    /// replica of every partition on every broker, and cannot be deleted. Every broker must
    /// be given the same list. Other topics are created at run time
    /// ([`Client::create_topic`](crate::Client::create_topic)).
    pub topics: Vec<(String, u32)>,
    /// Configuration of each partition's log.
    pub log: LogConfig,
    /// When an append counts as written. Default [`Durability::Fsync`].
    pub durability: Durability,
    /// Raft heartbeat interval. Default 250 ms.
    pub heartbeat_interval_ms: u64,
    /// Raft election timeout (the lower bound; the upper is twice it). Default 1000 ms.
    pub election_timeout_ms: u64,
    /// How long an append may wait for commit before it fails as indeterminate. Default 5 s.
    pub request_timeout_ms: u64,
    /// Largest network frame accepted. Default 16 MiB.
    pub frame_bytes_max: u32,
    /// How often the broker applies retention by itself (see [`Node::enforce_retention`]).
    /// Default 60 s; 0 turns the background task off.
    pub retention_check_ms: u64,
    /// This broker joins a running cluster instead of founding one (`replog node --join`).
    /// Its `peers` are the cluster's founding brokers, as they were started (the same ids), and
    /// its id is new. It registers itself through them; the metadata group makes it a learner
    /// (it replicates the catalog without voting on it), and topics created from then on are
    /// spread over it too. It hosts no replica of the configured topics. Default false.
    pub join: bool,
    /// Network fault injection between brokers, for tests (`failpoints` feature).
    #[cfg(any(test, feature = "failpoints"))]
    pub net_faults: Option<std::sync::Arc<crate::fault::NetFaults>>,
}

impl NodeConfig {
    /// A configuration with defaults for everything but identity, addresses and storage.
    pub fn new(
        id: NodeId,
        listen: SocketAddr,
        peers: BTreeMap<NodeId, SocketAddr>,
        data_dir: impl Into<PathBuf>,
    ) -> Self {
        NodeConfig {
            id,
            listen,
            peers,
            data_dir: data_dir.into(),
            topics: Vec::new(),
            log: LogConfig::default(),
            durability: Durability::default(),
            heartbeat_interval_ms: 250,
            election_timeout_ms: 1000,
            request_timeout_ms: 5000,
            frame_bytes_max: 16 << 20,
            retention_check_ms: 60_000,
            join: false,
            #[cfg(any(test, feature = "failpoints"))]
            net_faults: None,
        }
    }
}
