//! [`NodeConfig`]: what a broker is told when it starts.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::Address;
use crate::config::LogConfig;
use crate::security::acl::AuthorizerPolicy;
use crate::types::Durability;
use crate::types::NodeId;
use crate::{KafkaSecurityProtocol, SaslMechanism, ScramCredential, ScramMechanism};

pub(crate) use crate::transport::frame::REQUEST_OVERHEAD_BYTES_MAX;

mod validate;

/// Configuration of a [`Node`](crate::Node).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeConfig {
    /// This broker's id; also its Raft node id in every partition it hosts. Never reuse an id
    /// with a fresh data directory.
    pub id: NodeId,
    /// Address to listen on for peers and clients.
    pub listen: SocketAddr,
    /// Where other brokers and clients reach this broker (default: `listen`): a host name
    /// (resolved at each connection, so the broker may come back at another IP under the same
    /// name) or an IP address. Registered in the metadata log; metadata answers name it.
    pub advertised: Option<Address>,
    /// Every other broker: id and address (a host name or an IP address). The ids are the
    /// cluster's brokers; an address is where to find a broker until the metadata log says
    /// otherwise (each broker registers its advertised address there when it starts, so a
    /// broker that moved is found again).
    pub peers: BTreeMap<NodeId, Address>,
    /// Directory holding one subdirectory per partition replica (`{topic}-{partition}`).
    pub data_dir: PathBuf,
    /// Configured topics and their partition counts: they exist from the start, with a
    /// replica of every partition on every broker, and cannot be deleted. Every broker must
    /// be given the same list. Other topics are created at run time
    /// ([`Client::create_topic`](crate::Client::create_topic)).
    pub topics: Vec<(String, u32)>,
    /// Configuration of each partition's log.
    pub log: LogConfig,
    /// This broker's defaults for topic configs ([`TopicConfigs`](crate::TopicConfigs)),
    /// for keys a topic does not set: `cleanup.policy`, `segment.ms`, the
    /// `message.timestamp.*` keys, and the compaction settings. The defaults of
    /// `retention.ms`, `retention.bytes`, `segment.bytes` and `max.message.bytes` are
    /// [`log`](Self::log)'s `retention_time`, `retention_bytes`, `segment_bytes` and
    /// `batch_bytes_max`. Default: none (replog's defaults).
    pub topic_defaults: crate::TopicConfigs,
    /// When an append counts as written. Default [`Durability::Fsync`].
    pub durability: Durability,
    /// Raft heartbeat interval. Default 250 ms.
    pub heartbeat_interval: Duration,
    /// Raft election timeout (the lower bound; the upper is one and a half times it).
    /// Default 1000 ms.
    pub election_timeout: Duration,
    /// How long an append may wait for commit before it fails as indeterminate. Default 5 s.
    pub request_timeout: Duration,
    /// Largest network frame accepted. Default 16 MiB.
    pub frame_bytes_max: u32,
    /// Connections this broker keeps open at once, peers' and clients' together (Kafka's
    /// `max.connections`); one more is closed as soon as it is accepted. Default 4096.
    pub connections_max: usize,
    /// Of `connections_max`, how many only peer brokers may take, so that clients filling
    /// the rest never keep a peer's Raft traffic out. A connection accepted into this room
    /// stays only if its first request, within two election timeouts, is a peer's (Raft
    /// traffic or a metadata proposal). Default 64; below `connections_max`, and more than
    /// two per peer.
    pub peer_connections_reserved: usize,
    /// A connection that sends nothing for this long is closed (Kafka's
    /// `connections.max.idle.ms`; a peer or client reconnects when it needs to). Default 10 min.
    pub connections_max_idle: Duration,
    /// A frame whose first bytes arrived must be whole within this, or its connection is
    /// closed (a client that starts frames and never finishes them holds no buffer for long).
    /// Default 30 s.
    pub frame_read_timeout: Duration,
    /// Client requests one connection may have unanswered, counting answers not yet written
    /// to it; past it the broker reads no further from that connection until answers drain
    /// (a client that pipelines without reading holds at most this many answers). Peers' Raft
    /// traffic is not counted. Default 256.
    pub requests_in_flight_max: usize,
    /// Bytes of frame bodies being read, over all connections together, the Kafka
    /// listener's included (Kafka's `queued.max.request.bytes`); a frame waits for its share,
    /// within `frame_read_timeout`. At least `frame_bytes_max`. Default 256 MiB.
    pub buffered_request_bytes_max: usize,
    /// Bytes of answers built and not yet written, over all connections together, the Kafka
    /// listener's included: a fetch reserves the bytes its answer may take before it reads
    /// the log, and waits for them (a Kafka fetch waits no longer than its `max_wait_ms`, and
    /// is then answered without records).
    /// One connection holds at most two full frames of them, and a connection whose answers
    /// are not written within `frame_read_timeout` (a client that never reads) is closed.
    /// At least two full frames (`2 × frame_bytes_max`). Default 256 MiB.
    pub buffered_response_bytes_max: usize,
    /// How often the broker applies retention by itself (see [`Node::enforce_retention`](crate::Node::enforce_retention)).
    /// Default 60 s; 0 turns the background task off.
    pub retention_check_interval: Duration,
    /// Bytes of segments log compaction reads per second at most, over all of the broker's
    /// compacted partitions (it compacts one at a time, at each retention check): its I/O
    /// budget, so that appends and reads keep the disk. 0 for no limit. Default 128 MiB/s.
    pub compaction_bytes_per_second: u64,
    /// This broker joins a running cluster instead of founding one (`replog node --join`).
    /// Its `peers` are the cluster's founding brokers, as they were started (the same ids), and
    /// its id is new. It registers itself through them; the metadata Raft group makes it a learner
    /// (it replicates the catalog without voting on it), and topics created from then on are
    /// spread over it too. It hosts no replica of the configured topics. Default false.
    pub join: bool,
    /// Where Kafka's clients reach this broker: the address of its Kafka-protocol listener
    /// (see the crate docs for the APIs served). `None` (the default) runs none.
    pub kafka_listen: Option<SocketAddr>,
    /// The rack (or zone) this broker runs in, if named: new topics and decommissions spread
    /// each partition's replicas over as many racks as there are (Kafka's `broker.rack`), and
    /// Metadata names it. Registered in the metadata log. `None` by default.
    pub rack: Option<String>,
    /// The Kafka address metadata answers give for this broker (default: `kafka_listen`), a
    /// host name or an IP address. The broker registers it in the metadata log, so every
    /// broker's answers name it.
    pub kafka_advertised: Option<Address>,
    /// Other brokers' advertised Kafka addresses, for metadata answers until those brokers
    /// have registered theirs (a registered address wins). Empty by default.
    pub kafka_peers: BTreeMap<NodeId, Address>,
    /// Whether a Kafka client's Metadata request that allows it creates the topics it names
    /// that do not exist (Kafka's `auto.create.topics.enable`), with
    /// [`num_partitions`](Self::num_partitions) partitions of
    /// [`default_replication_factor`](Self::default_replication_factor) replicas. The client's
    /// principal needs CREATE on the topic (or the cluster) where ACLs are enforced; names
    /// starting with `__` are never created so. Default `true`, as Kafka's.
    pub auto_create_topics: bool,
    /// Partitions of a topic created without a count (an automatically created one, or one
    /// CreateTopics asks for with −1; Kafka's `num.partitions`). Default 1.
    pub num_partitions: u32,
    /// Replicas of each partition of a topic created without a replication factor, or the
    /// broker count if smaller (Kafka's `default.replication.factor`). Default 3.
    pub default_replication_factor: u32,
    /// Partitions of the consumer groups' offsets topic (`__consumer_offsets`, Kafka's
    /// `offsets.topic.num.partitions`), created with this count on the first group request.
    /// Each is a Raft group whose leader coordinates the groups that hash to it. Default 8.
    pub offsets_topic_partitions: u32,
    /// Replicas of each offsets partition (Kafka's `offsets.topic.replication.factor`), at
    /// most the brokers there are. Default 3.
    pub offsets_topic_replication_factor: u32,
    /// Segment size of the offsets topic's partitions (Kafka's `offsets.topic.segment.bytes`):
    /// small, so that superseded commits are soon in sealed segments, which compaction
    /// rewrites (the active segment it leaves whole). Default 16 MiB.
    pub offsets_segment_bytes: u64,
    /// Shortest session timeout a group member may ask for (Kafka's
    /// `group.min.session.timeout.ms`). Default 1 s.
    pub group_session_timeout_min: Duration,
    /// Longest session timeout a group member may ask for (Kafka's
    /// `group.max.session.timeout.ms`). Default 30 min.
    pub group_session_timeout_max: Duration,
    /// How long the first rebalance of an empty group waits for more members to join
    /// (Kafka's `group.initial.rebalance.delay.ms`, at most the members' rebalance timeout).
    /// Default 300 ms.
    pub group_initial_rebalance_delay: Duration,
    /// Most members one group may have (Kafka's `group.max.size`). Default 1000.
    pub group_members_max: usize,
    /// Leadership goes back to each partition's preferred replica (the first of its
    /// assignment) by itself, by a leadership transfer that pays no election timeout,
    /// once a broker leads too few of the partitions it is preferred for (Kafka's
    /// `auto.leader.rebalance.enable`). Default on.
    pub auto_leader_rebalance: bool,
    /// Whether replicas move by themselves until every broker holds as many as the others,
    /// give or take one (Redpanda's continuous balancing): a broker that joins takes replicas
    /// over from the others, a few partitions at a time, each keeping its racks. Default off.
    pub replica_balance: bool,
    /// The share of a broker's preferred partitions, in percent, that others may lead before
    /// their leaders hand them back (Kafka's `leader.imbalance.per.broker.percentage`).
    /// Default 10.
    pub leader_imbalance_percentage: u32,
    /// How often each broker checks the partitions it leads for ones to hand back to their
    /// preferred replicas; it hands back a few at a time (Kafka's
    /// `leader.imbalance.check.interval.seconds`). Default 300 s.
    pub leader_imbalance_check_interval: Duration,
    /// What the Kafka listener asks of its clients (Kafka's `security.protocol`). Default
    /// [`KafkaSecurityProtocol::Plaintext`]: no authentication, for trusted networks only.
    pub kafka_security_protocol: KafkaSecurityProtocol,
    /// The SASL mechanisms offered where clients authenticate. Default SCRAM-SHA-512 and
    /// SCRAM-SHA-256. PLAIN sends the password itself: it is refused here without TLS unless
    /// `sasl_plain_without_tls`.
    pub sasl_mechanisms: Vec<SaslMechanism>,
    /// Offers PLAIN on a listener without TLS (the password crosses the network in the clear).
    /// Default false.
    pub sasl_plain_without_tls: bool,
    /// Native clients log in with SASL (the mechanisms of `sasl_mechanisms`; Kafka's users
    /// and principals) before their first request, as Kafka clients of a `SASL_*` listener
    /// do; peer brokers are known by their certificates instead. Needs the native listener
    /// over TLS with the brokers' CA ([`TlsConfig::ca_cert`](crate::TlsConfig::ca_cert)).
    /// Default false: native clients are `User:ANONYMOUS`.
    pub native_sasl: bool,
    /// How long a Kafka client's SASL session lasts (Kafka's `connections.max.reauth.ms`,
    /// KIP-368): a client told so (SaslAuthenticate v1 and later) re-authenticates on its
    /// connection before then, or the connection is closed at its next request; so a deleted
    /// user or a changed password reaches open connections within it. Default `None`: sessions
    /// last as long as their connections.
    pub sasl_session_lifetime: Option<Duration>,
    /// Whether the TLS listeners ask clients for certificates signed by the brokers' CA
    /// (Kafka's `ssl.client.auth`; needs [`TlsConfig::ca_cert`](crate::TlsConfig::ca_cert)):
    /// a client's certificate is then its identity (`User:<CN>`) where it does not log in
    /// with SASL. Default [`ClientAuth::None`](crate::ClientAuth::None).
    pub client_auth: crate::ClientAuth,
    /// How a client certificate's subject names its principal (Kafka's
    /// `ssl.principal.mapping.rules`, `replog node --ssl-principal-mapping-rules`): the first
    /// rule that applies to the subject, printed as Kafka prints it (`CN=alice,O=Acme`), gives
    /// the name, and a certificate no rule applies to is refused. Needs `client_auth`.
    /// Default `None`: the subject's CN (`User:<CN>`; Kafka's default, `DEFAULT`, is the
    /// whole subject).
    pub ssl_principal_mapping_rules: Option<crate::PrincipalMappingRules>,
    /// The certificate and key (PEM files) this broker serves TLS with: on the Kafka listener
    /// when `kafka_security_protocol` says so (`SSL`, `SASL_SSL`), and, when the brokers' CA
    /// is given too ([`TlsConfig::ca_cert`](crate::TlsConfig::ca_cert)), on the native
    /// listener, to clients and peer brokers alike, whom this broker then dials over TLS
    /// (every broker of a cluster needs the CA then). `None` (the default): no TLS. The files
    /// are read at start and again by [`Node::reload_tls`](crate::Node::reload_tls). A broker
    /// started without TLS logs nothing about it (`replog node` warns once at start of what
    /// is plaintext or unauthenticated; embedders say what fits their setting).
    pub tls: Option<crate::TlsConfig>,
    /// Users the cluster starts with (Kafka's KIP-900 bootstrap): while the cluster has no
    /// user at all, the brokers write these credentials to the metadata log; once it has one,
    /// they are ignored. Empty by default.
    pub bootstrap_users: Vec<(String, ScramCredential)>,
    /// Kafka's ACLs enforced on every client request of both doors, with this policy (super
    /// users, and what a resource no ACL names allows); `None` (the default) enforces none.
    /// The ACLs themselves live in the metadata log ([`crate::acl`]). A client that did not
    /// authenticate is `User:ANONYMOUS`. Requests brokers make of each other are not
    /// authorized (until brokers authenticate each other, anyone who reaches the native port
    /// can make them).
    pub authorization: Option<AuthorizerPolicy>,
    /// The newest protocol version this broker speaks to the others and writes in the
    /// metadata log ([`PROTOCOL_VERSION`](crate::PROTOCOL_VERSION) by default). For a rolling
    /// upgrade, pin the new build to the version the old one speaks until every broker runs
    /// the new build, then unpin them one by one: the cluster finalizes the new version once
    /// every broker speaks it (see [`Node::finalized_version`](crate::Node::finalized_version)).
    /// A broker pinned below the cluster's finalized version refuses to start.
    pub protocol_version: u16,
    /// A partition unwritten this long, its log on every live replica, goes quiet: no
    /// heartbeats or timers until the next write (`node/quiet.rs`). 2 s by default; `None`: never.
    pub quiesce_after: Option<Duration>,
    /// A partition quiet this long on a broker drops its Raft member there, most of an idle
    /// replica's memory, and builds it again when a write, a peer's Raft message, a broker's
    /// liveness or an admin change needs it (`raft/dormant.rs`). A minute by default; `None`:
    /// never. Does nothing without [`quiesce_after`](Self::quiesce_after).
    pub dormant_after: Option<Duration>,
}

impl NodeConfig {
    /// A configuration with defaults for everything but identity, addresses and storage.
    /// (`peers` by IP address; to name them by host name, set [`peers`](Self::peers).)
    pub fn new(
        id: NodeId,
        listen: SocketAddr,
        peers: BTreeMap<NodeId, SocketAddr>,
        data_dir: impl Into<PathBuf>,
    ) -> Self {
        NodeConfig {
            id,
            listen,
            advertised: None,
            peers: peers.into_iter().map(|(id, a)| (id, a.into())).collect(),
            data_dir: data_dir.into(),
            topics: Vec::new(),
            topic_defaults: crate::TopicConfigs::default(),
            log: LogConfig::default(),
            durability: Durability::default(),
            heartbeat_interval: Duration::from_millis(250),
            election_timeout: Duration::from_secs(1),
            request_timeout: Duration::from_secs(5),
            frame_bytes_max: 16 << 20,
            connections_max: 4096,
            peer_connections_reserved: 64,
            connections_max_idle: Duration::from_secs(600),
            frame_read_timeout: Duration::from_secs(30),
            requests_in_flight_max: 256,
            buffered_request_bytes_max: 256 << 20,
            buffered_response_bytes_max: 256 << 20,
            retention_check_interval: Duration::from_secs(60),
            compaction_bytes_per_second: 128 << 20,
            join: false,
            kafka_listen: None,
            kafka_advertised: None,
            rack: None,
            kafka_peers: BTreeMap::new(),
            offsets_topic_partitions: 8,
            auto_create_topics: true,
            num_partitions: 1,
            default_replication_factor: 3,
            offsets_topic_replication_factor: 3,
            offsets_segment_bytes: 16 << 20,
            group_session_timeout_min: Duration::from_secs(1),
            group_session_timeout_max: Duration::from_secs(1800),
            group_initial_rebalance_delay: Duration::from_millis(300),
            group_members_max: 1000,
            auto_leader_rebalance: true,
            replica_balance: false,
            leader_imbalance_percentage: 10,
            leader_imbalance_check_interval: Duration::from_secs(300),
            kafka_security_protocol: KafkaSecurityProtocol::default(),
            sasl_mechanisms: vec![
                SaslMechanism::Scram(ScramMechanism::Sha512),
                SaslMechanism::Scram(ScramMechanism::Sha256),
            ],
            sasl_plain_without_tls: false,
            native_sasl: false,
            sasl_session_lifetime: None,
            client_auth: crate::ClientAuth::None,
            ssl_principal_mapping_rules: None,
            tls: None,
            bootstrap_users: Vec::new(),
            authorization: None,
            protocol_version: crate::PROTOCOL_VERSION,
            quiesce_after: Some(Duration::from_secs(2)),
            dormant_after: Some(Duration::from_secs(60)),
        }
    }

    /// Bytes of Raft frame bodies being read at once, apart from the clients'
    /// `buffered_request_bytes_max` (so that clients filling theirs never hold a peer's
    /// replication back): two full frames per peer, at least two.
    pub(crate) fn peer_buffered_bytes_max(&self) -> usize {
        (self.frame_bytes_max as usize)
            .saturating_mul(2)
            .saturating_mul(self.peers.len().max(1))
    }

    /// Of `buffered_response_bytes_max`, what one connection's answers may hold: two full
    /// frames.
    pub(crate) fn connection_answer_bytes_max(&self) -> usize {
        (self.frame_bytes_max as usize).saturating_mul(2)
    }

    /// The most bytes of log frames one message carries (a replication request, a fetch
    /// answer): `frame_bytes_max` less a message's own overhead ([`validate`](Self::validate)
    /// guarantees a full batch fits).
    pub(crate) fn payload_bytes_max(&self) -> usize {
        self.frame_bytes_max
            .saturating_sub(REQUEST_OVERHEAD_BYTES_MAX) as usize
    }

    /// The budgets this broker's server holds its connections to.
    pub(crate) fn server_limits(&self) -> crate::transport::ServerLimits {
        crate::transport::ServerLimits {
            frame_bytes_max: self.frame_bytes_max,
            connections_max: self.connections_max,
            peer_connections_reserved: self.peer_connections_reserved,
            first_frame_timeout: self.election_timeout.saturating_mul(2),
            peer_buffered_bytes_max: self.peer_buffered_bytes_max(),
            answer_bytes_max: self.buffered_response_bytes_max,
            connection_answer_bytes_max: self.connection_answer_bytes_max(),
            idle_timeout: self.connections_max_idle,
            frame_timeout: self.frame_read_timeout,
            in_flight_max: self.requests_in_flight_max,
            buffered_bytes_max: self.buffered_request_bytes_max,
            protocol_version: self.protocol_version,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    fn config() -> NodeConfig {
        let addr = SocketAddr::from(([127, 0, 0, 1], 9092));
        let peers = BTreeMap::from([(2, SocketAddr::from(([127, 0, 0, 1], 19092)))]);
        let mut c = NodeConfig::new(1, addr, peers, "/nonexistent");
        c.topics = vec![("email.send".into(), 3)];
        c
    }

    #[test]
    fn the_defaults_are_valid() {
        config().validate().unwrap();
    }

    #[test]
    fn each_broken_relation_names_its_field() {
        let field = |change: &dyn Fn(&mut NodeConfig)| {
            let mut c = config();
            change(&mut c);
            match c.validate() {
                Err(Error::InvalidConfig { field, .. }) => field,
                other => panic!("expected InvalidConfig, got {other:?}"),
            }
        };
        assert_eq!(field(&|c| c.log.record_bytes_max = 3), "record_bytes_max");
        assert_eq!(
            field(&|c| c.heartbeat_interval = c.election_timeout),
            "heartbeat_interval"
        );
        assert_eq!(
            field(&|c| c.heartbeat_interval = Duration::ZERO),
            "heartbeat_interval"
        );
        assert_eq!(
            field(&|c| c.election_timeout = Duration::ZERO),
            "election_timeout"
        );
        assert_eq!(
            field(&|c| c.request_timeout = Duration::ZERO),
            "request_timeout"
        );
        assert_eq!(
            field(&|c| c.frame_bytes_max = c.log.batch_bytes_max),
            "frame_bytes_max",
            "a full batch plus its request must fit a frame"
        );
        assert_eq!(
            field(&|c| {
                c.log.batch_bytes_max = 32 << 20;
                c.log.segment_bytes = 64 << 20;
            }),
            "frame_bytes_max"
        );
        assert_eq!(
            field(&|c| {
                c.peers.insert(1, c.listen.into());
            }),
            "peers"
        );
        assert_eq!(
            field(&|c| c.connections_max = c.peer_connections_reserved),
            "connections_max",
            "clients need room beside the peers'"
        );
        assert_eq!(
            field(&|c| c.peer_connections_reserved = 2 * c.peers.len()),
            "peer_connections_reserved"
        );
        assert_eq!(
            field(&|c| c.buffered_request_bytes_max = c.frame_bytes_max as usize - 1),
            "buffered_request_bytes_max"
        );
        assert_eq!(
            field(&|c| c.buffered_response_bytes_max = c.frame_bytes_max as usize),
            "buffered_response_bytes_max"
        );
        assert_eq!(
            field(&|c| c.buffered_request_bytes_max = usize::MAX),
            "buffered_request_bytes_max"
        );
        assert_eq!(
            field(&|c| {
                c.join = true;
                c.peers.clear();
            }),
            "join"
        );
        assert_eq!(
            field(&|c| c.ssl_principal_mapping_rules = Some("DEFAULT".parse().unwrap())),
            "ssl_principal_mapping_rules",
            "rules without client certificates to map"
        );
        assert_eq!(
            field(&|c| c.topics.push(("email.send".into(), 1))),
            "topics"
        );
        assert_eq!(
            field(&|c| c.offsets_segment_bytes = 1000),
            "offsets_segment_bytes",
            "an offsets segment holds a full batch"
        );
        assert_eq!(
            field(&|c| c.offsets_topic_partitions = 0),
            "offsets_topic_partitions"
        );
        assert_eq!(
            field(&|c| c.group_session_timeout_min =
                c.group_session_timeout_max + Duration::from_millis(1)),
            "group_session_timeout_min"
        );
        assert_eq!(field(&|c| c.topics.push(("bad/name".into(), 1))), "topics");
        assert_eq!(field(&|c| c.topics.push(("empty".into(), 0))), "topics");
        assert_eq!(
            field(&|c| c.kafka_security_protocol = KafkaSecurityProtocol::Ssl),
            "kafka_security_protocol",
            "TLS needs a certificate"
        );
        assert_eq!(
            field(&|c| c.kafka_security_protocol = KafkaSecurityProtocol::SaslSsl),
            "kafka_security_protocol"
        );
        assert_eq!(
            field(&|c| {
                c.kafka_security_protocol = KafkaSecurityProtocol::SaslPlaintext;
                c.sasl_mechanisms = vec![SaslMechanism::Plain];
            }),
            "sasl_mechanisms",
            "PLAIN without TLS needs sasl_plain_without_tls"
        );
        // PLAIN inside TLS needs nothing more.
        let mut c = config();
        c.kafka_security_protocol = KafkaSecurityProtocol::SaslSsl;
        c.sasl_mechanisms = vec![SaslMechanism::Plain];
        c.tls = Some(crate::TlsConfig::new("broker.pem", "broker.key"));
        c.validate().unwrap();
        // The smallest frame that carries a full batch is enough.
        let mut c = config();
        c.frame_bytes_max = (4 << 20) + REQUEST_OVERHEAD_BYTES_MAX;
        c.validate().unwrap();
    }
}
