//! [`NodeConfig::validate`]: the checks of every limit and of the relations between them.

use crate::SaslMechanism;
use crate::catalog::{PARTITIONS_MAX, check_topic_name};
use crate::config::LogConfig;
use crate::error::{Error, Result};
use crate::node::META_RECORD_BYTES_MAX;

use super::{NodeConfig, REQUEST_OVERHEAD_BYTES_MAX};

/// The error naming `field` as the one at fault, for `reason`.
fn bad(field: &'static str, reason: String) -> Result<()> {
    Err(Error::InvalidConfig { field, reason })
}

impl NodeConfig {
    /// Checks every limit and every relation between them, naming the field at fault; what
    /// [`Node::start`](crate::Node::start) does first.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] naming the field: the log's limits ([`LogConfig::validate`]);
    /// a heartbeat interval that is 0 or not below the election timeout (a follower would
    /// call elections against a live leader); a zero request timeout; a `frame_bytes_max` that
    /// cannot carry a full batch (of a partition's log or of the metadata log) with its request
    /// overhead; a broker among its own peers, or one that joins with no peer to join through;
    /// a configured topic with a bad name, a repeated name, or a partition count outside
    /// 1..=10,000.
    pub fn validate(&self) -> Result<()> {
        self.log.validate()?;
        self.topic_defaults.check_as_defaults()?;
        self.validate_defaults_and_timing()?;
        self.validate_connections()?;
        self.validate_buffers()?;
        self.validate_cluster()?;
        self.validate_groups()?;
        self.validate_security()?;
        Ok(())
    }

    /// The checks of the defaults of created topics, of the rack and of the Raft timing.
    fn validate_defaults_and_timing(&self) -> Result<()> {
        if self.num_partitions == 0 || self.num_partitions > crate::catalog::PARTITIONS_MAX {
            return bad(
                "num_partitions",
                format!("must be from 1 to {}", crate::catalog::PARTITIONS_MAX),
            );
        }
        if self.default_replication_factor == 0 {
            return bad("default_replication_factor", "must be positive".into());
        }
        if let Some(rack) = &self.rack
            && (rack.is_empty() || rack.len() > crate::catalog::RACK_BYTES_MAX)
        {
            return bad(
                "rack",
                format!("must have 1 to {} bytes", crate::catalog::RACK_BYTES_MAX),
            );
        }
        if self.election_timeout.is_zero() {
            return bad("election_timeout", "must be positive".into());
        }
        if self.heartbeat_interval.is_zero() || self.heartbeat_interval >= self.election_timeout {
            return bad(
                "heartbeat_interval",
                format!(
                    "must be positive and below election_timeout ({:?})",
                    self.election_timeout
                ),
            );
        }
        if self.request_timeout.is_zero() {
            return bad("request_timeout", "must be positive".into());
        }
        Ok(())
    }

    /// The checks of the frame size and of the connections' limits and timeouts.
    fn validate_connections(&self) -> Result<()> {
        let batch = self.log.batch_bytes_max.max(META_RECORD_BYTES_MAX);
        let needed = u64::from(batch) + u64::from(REQUEST_OVERHEAD_BYTES_MAX);
        if u64::from(self.frame_bytes_max) < needed {
            return bad(
                "frame_bytes_max",
                format!(
                    "must carry a full batch ({batch} bytes) and its request overhead \
                     ({REQUEST_OVERHEAD_BYTES_MAX}): at least {needed}"
                ),
            );
        }
        if self.peer_connections_reserved <= 2 * self.peers.len() {
            return bad(
                "peer_connections_reserved",
                format!(
                    "must hold the {} connections of the peers (two each), with room to spare",
                    2 * self.peers.len()
                ),
            );
        }
        if self.connections_max <= self.peer_connections_reserved {
            return bad(
                "connections_max",
                format!(
                    "must leave room for clients beside the {} connections kept for peers",
                    self.peer_connections_reserved
                ),
            );
        }
        if self.connections_max_idle <= self.heartbeat_interval {
            return bad(
                "connections_max_idle",
                "must be above heartbeat_interval, or peers' connections close between heartbeats"
                    .into(),
            );
        }
        if self.frame_read_timeout.is_zero() {
            return bad("frame_read_timeout", "must be positive".into());
        }
        if self.requests_in_flight_max == 0 {
            return bad("requests_in_flight_max", "must be positive".into());
        }
        Ok(())
    }

    /// The checks of the budgets of buffered requests and responses.
    fn validate_buffers(&self) -> Result<()> {
        if self.buffered_request_bytes_max < self.frame_bytes_max as usize {
            return bad(
                "buffered_request_bytes_max",
                format!(
                    "must hold one frame: at least frame_bytes_max ({})",
                    self.frame_bytes_max
                ),
            );
        }
        for (field, value) in [
            (
                "buffered_request_bytes_max",
                self.buffered_request_bytes_max,
            ),
            (
                "buffered_response_bytes_max",
                self.buffered_response_bytes_max,
            ),
        ] {
            if value > tokio::sync::Semaphore::MAX_PERMITS {
                return bad(
                    field,
                    format!(
                        "must be at most {} (a budget, not unlimited)",
                        tokio::sync::Semaphore::MAX_PERMITS
                    ),
                );
            }
        }
        if self.buffered_response_bytes_max < self.connection_answer_bytes_max() {
            return bad(
                "buffered_response_bytes_max",
                format!(
                    "must hold one connection's answers: at least two frames ({})",
                    self.connection_answer_bytes_max()
                ),
            );
        }
        Ok(())
    }

    /// The checks of the peers, of joining, of the configured topics, of the protocol version
    /// and of the leader balance.
    fn validate_cluster(&self) -> Result<()> {
        if self.peers.contains_key(&self.id) {
            return bad(
                "peers",
                format!("broker {} cannot be one of its own peers", self.id),
            );
        }
        if self.join && self.peers.is_empty() {
            return bad(
                "join",
                "a broker that joins needs a peer to join through".into(),
            );
        }
        let mut names = std::collections::BTreeSet::new();
        for (topic, partitions) in &self.topics {
            check_topic_name(topic).map_err(|reason| Error::InvalidConfig {
                field: "topics",
                reason,
            })?;
            if !names.insert(topic.as_str()) {
                return bad("topics", format!("topic {topic} is configured twice"));
            }
            if *partitions == 0 || *partitions > PARTITIONS_MAX {
                return bad(
                    "topics",
                    format!(
                        "topic {topic} has {partitions} partitions: a topic has 1 to {PARTITIONS_MAX}"
                    ),
                );
            }
        }
        if !crate::version::is_known(self.protocol_version) {
            return bad(
                "protocol_version",
                format!(
                    "{} is not a version this build speaks ({} to {})",
                    self.protocol_version,
                    crate::PROTOCOL_VERSION_MIN,
                    crate::PROTOCOL_VERSION
                ),
            );
        }
        if self.leader_imbalance_percentage > 100 {
            return bad(
                "leader_imbalance_percentage",
                format!(
                    "{} is not a percentage (0 to 100)",
                    self.leader_imbalance_percentage
                ),
            );
        }
        Ok(())
    }

    /// The checks of the offsets topic and of the consumer groups' limits.
    fn validate_groups(&self) -> Result<()> {
        if self.offsets_topic_partitions == 0 || self.offsets_topic_partitions > PARTITIONS_MAX {
            return bad(
                "offsets_topic_partitions",
                format!("must be 1 to {PARTITIONS_MAX}"),
            );
        }
        let offsets_log = LogConfig {
            segment_bytes: self.offsets_segment_bytes,
            ..self.log.clone()
        };
        offsets_log.validate().map_err(|e| match e {
            Error::InvalidConfig { reason, .. } => Error::InvalidConfig {
                field: "offsets_segment_bytes",
                reason,
            },
            other => other,
        })?;
        if self.offsets_topic_replication_factor == 0 {
            return bad(
                "offsets_topic_replication_factor",
                "must be positive".into(),
            );
        }
        if self.group_session_timeout_min.is_zero()
            || self.group_session_timeout_min > self.group_session_timeout_max
        {
            return bad(
                "group_session_timeout_min",
                "must be positive and at most group_session_timeout_max".into(),
            );
        }
        if self.group_members_max == 0 {
            return bad("group_members_max", "must be positive".into());
        }
        Ok(())
    }

    /// The security settings' checks (see [`validate`](Self::validate)).
    fn validate_security(&self) -> Result<()> {
        let protocol = self.kafka_security_protocol;
        if protocol.tls() && self.tls.is_none() {
            return bad(
                "kafka_security_protocol",
                format!(
                    "{} needs a certificate: set tls (replog node --tls-cert and --tls-key)",
                    protocol.name()
                ),
            );
        }
        if self.native_sasl && self.tls.as_ref().is_none_or(|t| t.ca_cert.is_none()) {
            return bad(
                "native_sasl",
                "native clients log in over TLS, where brokers know each other by certificate: \
                 set tls with its ca_cert (replog node --tls-cert, --tls-key and --tls-ca)"
                    .into(),
            );
        }
        if self.client_auth != crate::ClientAuth::None
            && self.tls.as_ref().is_none_or(|t| t.ca_cert.is_none())
        {
            return bad(
                "client_auth",
                "client certificates are checked against the brokers' CA: set tls with its \
                 ca_cert (replog node --tls-ca)"
                    .into(),
            );
        }
        if self.ssl_principal_mapping_rules.is_some() && self.client_auth == crate::ClientAuth::None
        {
            return bad(
                "ssl_principal_mapping_rules",
                "the rules map client certificates, which brokers ask for with client_auth \
                 (replog node --client-auth)"
                    .into(),
            );
        }
        if (protocol.sasl() || self.native_sasl) && self.sasl_mechanisms.is_empty() {
            return bad(
                "sasl_mechanisms",
                "a SASL listener needs at least one mechanism".into(),
            );
        }
        if protocol.sasl()
            && !protocol.tls()
            && self.sasl_mechanisms.contains(&SaslMechanism::Plain)
            && !self.sasl_plain_without_tls
        {
            return bad(
                "sasl_mechanisms",
                "PLAIN sends passwords in the clear without TLS: set sasl_plain_without_tls to \
                 offer it anyway"
                    .into(),
            );
        }
        self.validate_users()?;
        Ok(())
    }

    /// The checks of the bootstrap users and of the super users.
    fn validate_users(&self) -> Result<()> {
        if let Some((user, _)) = self
            .bootstrap_users
            .iter()
            .find(|(u, _)| u.is_empty() || u.len() > crate::catalog::USER_NAME_BYTES_MAX)
        {
            return bad(
                "bootstrap_users",
                format!(
                    "a user name has 1 to {} bytes, not {user:?}",
                    crate::catalog::USER_NAME_BYTES_MAX
                ),
            );
        }
        if let Some(policy) = &self.authorization
            && let Some(Err(reason)) = policy
                .super_users
                .iter()
                .map(|p| crate::security::acl::check_principal(p))
                .find(Result::is_err)
        {
            return bad("authorization", format!("a super user: {reason}"));
        }
        Ok(())
    }
}
