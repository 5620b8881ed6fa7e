//! The Kafka-protocol listener: Kafka's own clients (kcat, librdkafka, kafka-python) reach a
//! broker on `NodeConfig::kafka_listen` and are served by the same [`BrokerService`] as the
//! native door. This module and its files are a codec: each decodes Kafka's requests (the
//! `kafka-protocol` crate), maps them to the service's, and maps the answers back; what a
//! request means (which records a fetch answers, the long poll, epoch checks, validation) is
//! the service's.
//!
//! - `handlers/`: one file per API or family of APIs (ApiVersions, Metadata, Produce, Fetch,
//!   ListOffsets and OffsetForLeaderEpoch, InitProducerId, the group APIs, the admin APIs,
//!   SASL's once a connection is past authentication),
//!   each declaring what it serves and at which versions.
//! - `refusals.rs`: the answers to what is not served. Any other API or version gets its own
//!   answer refusing it (every item `UNSUPPORTED_VERSION`, or the API's own error) where that
//!   answer can say so, and the connection stays open; otherwise the connection is closed,
//!   as Kafka brokers do with requests they cannot parse. ApiVersions at a version newer than
//!   served is answered at version 0 with `UNSUPPORTED_VERSION` and the ranges, as Kafka
//!   does.
//! - `sasl.rs`: on a listener that asks for it, SASL authentication before anything else
//!   (SCRAM-SHA-256/512, PLAIN), as Kafka's `SaslServerAuthenticator` runs it.
//! - `conn.rs`: a connection (requests pipelined, answers in order); `frame.rs` and
//!   `fetch_answer.rs`: answers written in pieces, a fetch's batches from where they lie.
//!
//! Produce takes acks 0, 1 and −1 (a write is acknowledged once committed, whatever the
//! producer asked); an idempotent producer's numbers go through the partition's producer
//! table. Transactions are not served.
//!
//! Records: a Kafka producer's batch is checked here (its framing), decoded whole by the
//! write path (its CRC-32C, its records), and stored as it was sent (FORMAT.md §4.2 and
//! §6.4); a fetch serves it back byte for byte with its base offset and leader epoch set. A
//! batch of replog's records is served as one uncompressed Kafka v2 batch with the same
//! offsets and a valid CRC-32C.

mod conn;
mod fetch_answer;
mod frame;
mod handlers;
mod refusals;
mod sasl;

use handlers::{
    acls, admin, api_versions, configs, delete_groups, fetch, groups, leaders, metadata,
    offset_delete, offsets, produce, producer_ids, reassignments, records, sasl as sasl_state,
    users,
};

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiKey, BrokerId, RequestHeader, RequestKind, ResponseHeader, ResponseKind, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::error::Error;
use crate::node::service::BrokerService;
use crate::transport::Turn;
use crate::types::NodeId;

/// Kafka's error codes used here.
mod code {
    pub(super) const NONE: i16 = 0;
    pub(super) const OFFSET_OUT_OF_RANGE: i16 = 1;
    pub(super) const CORRUPT_MESSAGE: i16 = 2;
    pub(super) const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
    pub(super) const LEADER_NOT_AVAILABLE: i16 = 5;
    pub(super) const NOT_LEADER_OR_FOLLOWER: i16 = 6;
    pub(super) const REQUEST_TIMED_OUT: i16 = 7;
    pub(super) const MESSAGE_TOO_LARGE: i16 = 10;
    pub(super) const UNSUPPORTED_VERSION: i16 = 35;
    pub(super) const INVALID_TOPIC_EXCEPTION: i16 = 17;
    pub(super) const UNKNOWN_SERVER_ERROR: i16 = -1;
    pub(super) const OUT_OF_ORDER_SEQUENCE_NUMBER: i16 = 45;
    pub(super) const INVALID_PRODUCER_EPOCH: i16 = 47;
    pub(super) const TRANSACTIONAL_ID_AUTHORIZATION_FAILED: i16 = 53;
    pub(super) const TOPIC_ALREADY_EXISTS: i16 = 36;
    pub(super) const INVALID_PARTITIONS: i16 = 37;
    pub(super) const INVALID_REPLICATION_FACTOR: i16 = 38;
    pub(super) const INVALID_REPLICA_ASSIGNMENT: i16 = 39;
    pub(super) const INVALID_CONFIG: i16 = 40;
    pub(super) const INVALID_RECORD: i16 = 87;
    pub(super) const INVALID_TIMESTAMP: i16 = 32;
    pub(super) const PREFERRED_LEADER_NOT_AVAILABLE: i16 = 80;
    pub(super) const ELIGIBLE_LEADERS_NOT_AVAILABLE: i16 = 83;
    pub(super) const ELECTION_NOT_NEEDED: i16 = 84;
    pub(super) const REASSIGNMENT_IN_PROGRESS: i16 = 60;
    pub(super) const NO_REASSIGNMENT_IN_PROGRESS: i16 = 85;
    pub(super) const NOT_CONTROLLER: i16 = 41;
    pub(super) const COORDINATOR_NOT_AVAILABLE: i16 = 15;
    pub(super) const INVALID_REQUEST: i16 = 42;
    pub(super) const FENCED_LEADER_EPOCH: i16 = 74;
    pub(super) const UNKNOWN_LEADER_EPOCH: i16 = 75;
    pub(super) const UNKNOWN_TOPIC_ID: i16 = 100;
    pub(super) const UNSUPPORTED_SASL_MECHANISM: i16 = 33;
    pub(super) const ILLEGAL_SASL_STATE: i16 = 34;
    pub(super) const SASL_AUTHENTICATION_FAILED: i16 = 58;
    pub(super) const TOPIC_AUTHORIZATION_FAILED: i16 = 29;
    pub(super) const CLUSTER_AUTHORIZATION_FAILED: i16 = 31;
    pub(super) const SECURITY_DISABLED: i16 = 54;
}

/// What the listener needs beside the service.
#[derive(Clone)]
pub(crate) struct KafkaConfig {
    pub(crate) me: NodeId,
    /// The broker's limits, the same as its native door's.
    pub(crate) limits: crate::transport::ServerLimits,
    /// The broker's budgets for clients' request and answer bytes, shared with its native
    /// door.
    pub(crate) budgets: crate::transport::ClientBudgets,
    /// The broker's connection cap, shared with its native door.
    pub(crate) admission: Arc<crate::transport::Admission>,
    /// The SASL authentication every connection goes through first, if the listener asks
    /// for one.
    pub(crate) sasl: Option<sasl::SaslSettings>,
    /// How a client certificate names its principal
    /// ([`NodeConfig::ssl_principal_mapping_rules`](crate::NodeConfig)).
    pub(crate) principal_rules: Option<crate::PrincipalMappingRules>,
}

/// What the listener's SASL authentication offers, if `config` asks for it.
pub(crate) fn sasl_settings(config: &crate::NodeConfig) -> Option<sasl::SaslSettings> {
    config
        .kafka_security_protocol
        .sasl()
        .then(|| sasl::SaslSettings::new(config))
}

/// Bytes of a budget held until an answer is written (or a request served).
type Held = Option<tokio::sync::OwnedSemaphorePermit>;

/// Takes `bytes` of `budget`, waiting for them; `None` only once the budget is closed.
async fn take(budget: &Arc<tokio::sync::Semaphore>, bytes: usize) -> Held {
    let n = u32::try_from(bytes).unwrap_or(u32::MAX);
    Arc::clone(budget).acquire_many_owned(n).await.ok()
}

/// Serves Kafka clients on `listener` until `shutdown`, each connection admitted under the
/// broker's one connection cap (the room kept for peer brokers is not theirs), and put
/// through a TLS handshake with `tls` if given.
pub(crate) fn spawn(
    listener: TcpListener,
    service: BrokerService,
    config: KafkaConfig,
    tls: Option<crate::tls::TlsServer>,
    shutdown: watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    let config = Arc::new(config);
    let admission = Arc::clone(&config.admission);
    let closing = shutdown.clone();
    crate::transport::spawn_accept(listener, admission, false, tls, closing, move |accepted| {
        let (service, config) = (service.clone(), Arc::clone(&config));
        Box::pin(conn::serve(accepted, service, config, shutdown.clone()))
    })
}

/// What a request's bytes (its header and body, after the length) ask for.
pub(crate) enum Decoded {
    /// A request for the service.
    Serve {
        header: RequestHeader,
        api: ApiKey,
        version: i16,
        request: Box<RequestKind>,
    },
    /// A request answered without the service (an API or version not served, an ApiVersions
    /// newer than served): the answer's frame.
    Answered(Bytes),
}

/// Decodes a request. `Err`: bytes that cannot be answered (an unknown API, a malformed
/// header or body, an API or version not served whose answer cannot say so), which close the
/// connection, as Kafka brokers do with requests they cannot parse. Never panics, whatever the
/// bytes.
pub(crate) fn decode_request(mut body: Bytes) -> Result<Decoded, String> {
    let (key, version) = {
        let mut peek = &body[..];
        if peek.len() < 4 {
            return Err(format!("a request of {} bytes", peek.len()));
        }
        (peek.get_i16(), peek.get_i16())
    };
    let api = ApiKey::try_from(key).map_err(|_| format!("unknown api key {key}"))?;
    let served = handlers::served().find(|(k, _, _)| *k == api);
    if api == ApiKey::ApiVersions && served.is_some_and(|(_, _, max)| version > max) {
        // Kafka's answer to a newer ApiVersions: version 0, UNSUPPORTED_VERSION, our ranges.
        let correlation = {
            let mut peek = &body[4..];
            if peek.len() < 4 { 0 } else { peek.get_i32() }
        };
        let mut r = api_versions::api_versions();
        r.error_code = code::UNSUPPORTED_VERSION;
        let answer = ResponseKind::ApiVersions(r);
        return encode(correlation, ApiKey::ApiVersions, 0, &answer)
            .map(Decoded::Answered)
            .map_err(|e| e.to_string());
    }
    let header = decode_guarded(|| {
        RequestHeader::decode(&mut body, api.request_header_version(version))
            .map_err(|e| e.to_string())
    })?;
    if !served.is_some_and(|(_, min, max)| (min..=max).contains(&version)) {
        // Answered with the API's own answer carrying UNSUPPORTED_VERSION where that answer
        // has a top-level error code at this version; otherwise (an API whose answer cannot
        // say so, or a version the codec cannot write) the connection is closed.
        // Admin APIs whose answer names each item: decoded, and every item refused.
        let per_item = refusals::refused_per_item(api)
            .then(|| {
                decode_guarded(|| {
                    RequestKind::decode(api, &mut body, version).map_err(|e| e.to_string())
                })
                .ok()
            })
            .flatten()
            .and_then(refusals::refuse_items);
        let Some(refusal) = per_item.or_else(|| refusals::unsupported(api, version)) else {
            return Err(format!("{api:?} v{version} is not served"));
        };
        return encode(header.correlation_id, api, version, &refusal)
            .map(Decoded::Answered)
            .map_err(|e| e.to_string());
    }
    let request =
        decode_guarded(|| RequestKind::decode(api, &mut body, version).map_err(|e| e.to_string()))?;
    Ok(Decoded::Serve {
        header,
        api,
        version,
        request: Box::new(request),
    })
}

/// For the `kafka_request` fuzz target: `data` decoded as a Kafka request's header and body,
/// as the listener decodes what a client sends (any `Err` is fine; a panic is a bug).
#[doc(hidden)]
pub fn fuzz_kafka_request(data: &[u8]) -> Result<(), String> {
    decode_request(Bytes::copy_from_slice(data)).map(|_| ())
}

/// Decodes a request, serves it, encodes the answer (`None`: no answer, a produce with acks 0),
/// with the answer budget's bytes it holds until it is written (a fetch's).
async fn answer(
    body: Bytes,
    service: &BrokerService,
    config: &KafkaConfig,
    from: Option<SocketAddr>,
    turn: Turn,
) -> std::io::Result<Option<(frame::Frame, Held)>> {
    let (header, api, version, request) = match decode_request(body) {
        Ok(Decoded::Serve {
            header,
            api,
            version,
            request,
        }) => (header, api, version, *request),
        Ok(Decoded::Answered(answer)) => return Ok(Some((answer.into(), None))),
        Err(e) => return Err(std::io::Error::other(e)),
    };
    // Only a produce keeps its place among the connection's requests; the others pass it at
    // once (a long poll must not hold up the produces behind it).
    let turn = matches!(request, RequestKind::Produce(_)).then_some(turn);
    let response = match request {
        RequestKind::Produce(r) => {
            let acks = r.acks;
            let response = produce::produce(r, version, service, turn).await;
            if acks == 0 {
                return Ok(None);
            }
            ResponseKind::Produce(response)
        }
        RequestKind::Fetch(r) => {
            let (response, records, held) = fetch::fetch(r, version, service, config).await;
            let correlation = header.correlation_id;
            return fetch_answer::encode(correlation, version, &response, records)
                .map(|frame| Some((frame, held)))
                .map_err(std::io::Error::other);
        }
        request => respond(request, &header, (api, version), from, service, config).await?,
    };
    encode(header.correlation_id, api, version, &response).map(|a| Some((a.into(), None)))
}

/// The answer to a request other than a produce or a fetch (whose answers are written their
/// own way): a client's, a group's, a security request's here, an admin request's by
/// [`respond_admin`]. `Err` for a request not served.
async fn respond(
    request: RequestKind,
    header: &RequestHeader,
    (api, version): (ApiKey, i16),
    from: Option<SocketAddr>,
    service: &BrokerService,
    config: &KafkaConfig,
) -> std::io::Result<ResponseKind> {
    Ok(match request {
        RequestKind::ApiVersions(_) => ResponseKind::ApiVersions(api_versions::api_versions()),
        RequestKind::Metadata(r) => {
            ResponseKind::Metadata(metadata::metadata(r, version, service, config).await)
        }
        RequestKind::ListOffsets(r) => {
            ResponseKind::ListOffsets(offsets::list_offsets(r, version, service))
        }
        RequestKind::InitProducerId(r) => {
            ResponseKind::InitProducerId(producer_ids::init_producer_id(&r, service).await)
        }
        RequestKind::OffsetForLeaderEpoch(r) => {
            ResponseKind::OffsetForLeaderEpoch(offsets::offset_for_leader_epoch(r, service))
        }
        group @ (RequestKind::FindCoordinator(_)
        | RequestKind::JoinGroup(_)
        | RequestKind::SyncGroup(_)
        | RequestKind::Heartbeat(_)
        | RequestKind::LeaveGroup(_)
        | RequestKind::OffsetCommit(_)
        | RequestKind::OffsetFetch(_)
        | RequestKind::ListGroups(_)
        | RequestKind::DescribeGroups(_)) => {
            let client_id = header.client_id.as_ref().map_or("", |c| c.as_str());
            let served = groups::serve(group, version, client_id, from, service).await;
            served.ok_or_else(|| std::io::Error::other("not a group request"))?
        }
        RequestKind::DeleteGroups(r) => {
            ResponseKind::DeleteGroups(delete_groups::delete_groups(r, service).await)
        }
        RequestKind::OffsetDelete(r) => {
            ResponseKind::OffsetDelete(offset_delete::offset_delete(r, service).await)
        }
        RequestKind::DescribeAcls(r) => {
            ResponseKind::DescribeAcls(acls::describe_acls(&r, service))
        }
        RequestKind::CreateAcls(r) => ResponseKind::CreateAcls(acls::create_acls(r, service).await),
        RequestKind::DeleteAcls(r) => ResponseKind::DeleteAcls(acls::delete_acls(r, service).await),
        RequestKind::DescribeUserScramCredentials(r) => {
            ResponseKind::DescribeUserScramCredentials(users::describe(r, service))
        }
        RequestKind::AlterUserScramCredentials(r) => {
            ResponseKind::AlterUserScramCredentials(users::alter(r, service).await)
        }
        RequestKind::SaslHandshake(_) | RequestKind::SaslAuthenticate(_) => {
            sasl_state::out_of_place(api).ok_or_else(|| std::io::Error::other("not SASL"))?
        }
        admin => respond_admin(admin, version, service, config).await?,
    })
}

/// The answer to an admin request: topics, partitions, records, leaders, reassignments,
/// configs, the cluster. `Err` for a request not served.
async fn respond_admin(
    request: RequestKind,
    version: i16,
    service: &BrokerService,
    config: &KafkaConfig,
) -> std::io::Result<ResponseKind> {
    Ok(match request {
        RequestKind::CreateTopics(r) => {
            ResponseKind::CreateTopics(admin::create_topics(r, version, service).await)
        }
        RequestKind::DeleteRecords(r) => {
            ResponseKind::DeleteRecords(records::delete_records(r, service).await)
        }
        RequestKind::ElectLeaders(r) => {
            ResponseKind::ElectLeaders(leaders::elect_leaders(r, version, service).await)
        }
        RequestKind::AlterPartitionReassignments(r) => ResponseKind::AlterPartitionReassignments(
            reassignments::alter_partition_reassignments(r, version, service).await,
        ),
        RequestKind::ListPartitionReassignments(r) => ResponseKind::ListPartitionReassignments(
            reassignments::list_partition_reassignments(&r, service),
        ),
        RequestKind::CreatePartitions(r) => {
            ResponseKind::CreatePartitions(admin::create_partitions(r, service).await)
        }
        RequestKind::DeleteTopics(r) => {
            ResponseKind::DeleteTopics(admin::delete_topics(r, service).await)
        }
        RequestKind::DescribeConfigs(r) => {
            ResponseKind::DescribeConfigs(configs::describe_configs(r, service, config))
        }
        RequestKind::AlterConfigs(r) => {
            ResponseKind::AlterConfigs(configs::alter_configs(r, service).await)
        }
        RequestKind::IncrementalAlterConfigs(r) => ResponseKind::IncrementalAlterConfigs(
            configs::incremental_alter_configs(r, service).await,
        ),
        RequestKind::DescribeCluster(r) => {
            ResponseKind::DescribeCluster(admin::describe_cluster(&r, service, config))
        }
        other => {
            let what = format!("{other:?} is not served");
            return Err(std::io::Error::other(what));
        }
    })
}

/// Runs a decoder over bytes from the network, turning a panic inside it into an error.
fn decode_guarded<T>(f: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
        .unwrap_or_else(|_| Err("a request the decoder could not read".into()))
}

/// The answer's frame: its big-endian length, then the response header and body, encoded
/// into one buffer.
fn encode(
    correlation_id: i32,
    api: ApiKey,
    version: i16,
    response: &ResponseKind,
) -> std::io::Result<Bytes> {
    let mut out = BytesMut::new();
    out.put_i32(0);
    let mut header = ResponseHeader::default();
    header.correlation_id = correlation_id;
    header
        .encode(&mut out, api.response_header_version(version))
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    response
        .encode(&mut out, version)
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    let len =
        i32::try_from(out.len() - 4).map_err(|_| std::io::Error::other("an answer over 2 GiB"))?;
    if let Some(mut prefix) = out.get_mut(..4) {
        // Kafka's framing is big-endian: `BufMut` writes it.
        prefix.put_i32(len);
    }
    Ok(out.freeze())
}

/// A Kafka string field's value.
fn message(s: impl Into<String>) -> Option<StrBytes> {
    Some(StrBytes::from_string(s.into()))
}

fn broker_id(id: NodeId) -> BrokerId {
    BrokerId(i32::try_from(id).unwrap_or(i32::MAX))
}

fn topic_name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

/// Kafka's code for an error of the service.
fn error_code(e: &Error) -> i16 {
    match e {
        Error::NotLeader { .. } | Error::TryAgain { .. } => code::NOT_LEADER_OR_FOLLOWER,
        Error::UnknownPartition(_) | Error::UnknownTopic(_) => code::UNKNOWN_TOPIC_OR_PARTITION,
        Error::OffsetOutOfRange { .. } => code::OFFSET_OUT_OF_RANGE,
        Error::TopicAuthorizationFailed(_) => code::TOPIC_AUTHORIZATION_FAILED,
        Error::ClusterAuthorizationFailed => code::CLUSTER_AUTHORIZATION_FAILED,
        Error::AuthenticationFailed(_) => code::SASL_AUTHENTICATION_FAILED,
        Error::InvalidAcl(_) => code::INVALID_REQUEST,
        Error::SecurityDisabled => code::SECURITY_DISABLED,
        Error::LeaderEpochMismatch { asked, current, .. } if asked < current => {
            code::FENCED_LEADER_EPOCH
        }
        Error::LeaderEpochMismatch { .. } => code::UNKNOWN_LEADER_EPOCH,
        Error::RecordTooLarge { .. } | Error::BatchTooLarge { .. } => code::MESSAGE_TOO_LARGE,
        Error::InvalidBatch { .. } | Error::EmptyBatch => code::CORRUPT_MESSAGE,
        Error::InvalidTopic { .. } => code::INVALID_TOPIC_EXCEPTION,
        Error::InvalidTopicConfig { .. } => code::INVALID_CONFIG,
        Error::InvalidReplicaAssignment(_) => code::INVALID_REPLICA_ASSIGNMENT,
        Error::ReassignmentInProgress(_) => code::REASSIGNMENT_IN_PROGRESS,
        Error::NoReassignmentInProgress(_) => code::NO_REASSIGNMENT_IN_PROGRESS,
        Error::CannotDecommission { .. } => code::INVALID_REQUEST,
        Error::PartitionsNotAdded { .. } | Error::InvalidPartitionCount { .. } => {
            code::INVALID_PARTITIONS
        }
        Error::InvalidRecord(_) => code::INVALID_RECORD,
        Error::InvalidTimestamp(_) => code::INVALID_TIMESTAMP,
        Error::Indeterminate { .. } | Error::Timeout { .. } => code::REQUEST_TIMED_OUT,
        Error::OutOfOrderSequence { .. } => code::OUT_OF_ORDER_SEQUENCE_NUMBER,
        Error::ProducerFenced { .. } => code::INVALID_PRODUCER_EPOCH,
        _ => code::UNKNOWN_SERVER_ERROR,
    }
}

/// The current leader of a partition and its term, for the answer to a request refused with
/// `NOT_LEADER_OR_FOLLOWER` (KIP-951: the client goes there without asking for metadata
/// first): the refusing replica's hint, or, from a broker that hosts no replica, the
/// metadata it gathers from the replicas.
async fn current_leader(
    e: &Error,
    service: &BrokerService,
) -> Option<(NodeId, u64, crate::Address)> {
    let Error::NotLeader { partition, leader } = e else {
        return None;
    };
    let (node, term) = match leader {
        Some(hint) => (hint.node_id, hint.term.get()),
        None => {
            let meta = service.metadata(Some(&partition.topic), false).await;
            let p = meta.partitions.iter().find(|p| &p.partition == partition)?;
            (p.leader?, p.term)
        }
    };
    Some((node, term, service.kafka_brokers().get(&node)?.clone()))
}
