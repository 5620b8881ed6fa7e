//! Golden tests of the Kafka listener: for every Kafka API served, at the oldest and the newest
//! version served, a request encoded with the `kafka-protocol` crate goes over a real loopback
//! connection to an in-process broker's Kafka listener (decode, dispatch, handler, broker
//! service, encode: the path a Kafka client's request takes), and the answer's bytes are
//! compared, byte for byte, with those of the response the test expects, built with the
//! crate's structs and encoded at the same version. A byte comparison catches fields the broker
//! forgets, wrong defaults and fields present at the wrong versions, which a decode-only check
//! misses.
//!
//! The fixture is one broker per test ([`Broker::start`]); [`Broker::exchange`] sends one
//! request and returns the answer's bytes; [`Broker::assert_answer`] compares them. Each
//! family of APIs has its module, and declares in `GOLDEN` the versions its tests exchange at
//! (the tests loop over those declarations), so that
//! `every_served_api_has_a_golden_case_at_its_oldest_and_newest_version` can check them
//! against what the broker says it serves.

// Kafka's wire is big-endian; the crate's own formats are little-endian, which the lint guards.
#![allow(clippy::big_endian_bytes)]
// The futures of a test's exchanges nest deeper than the default limit when clippy computes
// their layout.
#![recursion_limit = "256"]

use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader, TopicName};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use replog::LocalCluster;

mod acls;
mod admin;
mod api_versions;
mod configs;
mod delete_groups;
mod fetch;
mod group_coordinator;
mod groups;
mod leaders;
mod metadata;
mod offset_delete;
mod offsets;
mod produce;
mod producer_ids;
mod reassignments;
mod records;
mod sasl;
#[path = "../support/mod.rs"]
mod support;
mod users;

/// The topic every fixture broker starts with, and its partition count.
pub(crate) const TOPIC: &str = "golden";
pub(crate) const TOPIC_PARTITIONS: u32 = 2;

/// How long a test waits for anything (a broker's start, an election, an answer).
pub(crate) const WAIT: Duration = Duration::from_secs(30);

/// The client id every request carries.
pub(crate) const CLIENT_ID: &str = "golden-client";

/// The APIs a family's tests exchange, each with the versions exchanged.
pub(crate) type Golden = &'static [(ApiKey, &'static [i16])];

/// A topic's id as replog derives it (KIP-516; `catalog.rs`, `topic_uuid`): the first 16
/// bytes of SHA-256 over `"replog topic id" 00`, the topic's catalog id (0 for a configured
/// topic; little-endian) and its name, with a version-4 UUID's bits set.
pub(crate) fn topic_uuid(name: &str, id: u64) -> uuid::Uuid {
    use sha2::Digest;
    let mut hash = sha2::Sha256::new();
    hash.update(b"replog topic id\0");
    hash.update(id.to_le_bytes());
    hash.update(name.as_bytes());
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&hash.finalize()[..16]);
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    uuid::Uuid::from_bytes(bytes)
}

/// The versions of `api` that `golden` declares (empty if none).
pub(crate) fn versions(golden: Golden, api: ApiKey) -> &'static [i16] {
    golden
        .iter()
        .find(|(k, _)| *k == api)
        .map_or(&[], |(_, v)| v)
}

/// One in-process broker of a one-broker cluster, with a Kafka listener on a port of
/// 127.0.0.1 it bound itself (port 0), topic [`TOPIC`] led, and one Kafka connection open.
pub(crate) struct Broker {
    cluster: Option<LocalCluster>,
    _dir: tempfile::TempDir,
    /// The Kafka listener's address, as the broker's Metadata names it.
    pub(crate) kafka: SocketAddr,
    conn: TcpStream,
    /// The correlation id of the last request sent.
    correlation: i32,
}

impl Broker {
    /// A broker with the fixture's settings: the offsets topic of one partition and one
    /// replica (its leader is the broker), no wait for more members of a new group.
    pub(crate) async fn start() -> Broker {
        Broker::start_brokers(1).await
    }

    /// [`start`](Self::start) with a cluster of `n` brokers (for what takes more than one: a
    /// broker that is not a group's coordinator), connected to broker 1.
    pub(crate) async fn start_brokers(n: usize) -> Broker {
        Broker::start_configured(n, |_| {}).await
    }

    /// [`start_brokers`](Self::start_brokers) with `configure` applied last to each broker's
    /// configuration (a SASL listener, its users).
    pub(crate) async fn start_configured(
        n: usize,
        configure: impl Fn(&mut replog::NodeConfig),
    ) -> Broker {
        let dir = tempfile::tempdir().unwrap();
        let cluster = LocalCluster::start(n, dir.path(), |c| {
            c.kafka_listen = Some(SocketAddr::from(([127, 0, 0, 1], 0)));
            c.topics = vec![(TOPIC.into(), TOPIC_PARTITIONS)];
            c.offsets_topic_partitions = 1;
            c.offsets_topic_replication_factor = 1;
            c.group_initial_rebalance_delay = Duration::ZERO;
            c.heartbeat_interval = Duration::from_millis(50);
            c.election_timeout = Duration::from_millis(200);
            configure(c);
        })
        .await
        .unwrap();
        cluster
            .wait_for_leaders(TOPIC, TOPIC_PARTITIONS, WAIT)
            .await
            .unwrap();
        let kafka = cluster.node(1).unwrap().kafka_addr().unwrap();
        let conn = tokio::time::timeout(WAIT, TcpStream::connect(kafka))
            .await
            .expect("connected in time")
            .unwrap();
        Broker {
            cluster: Some(cluster),
            _dir: dir,
            kafka,
            conn,
            correlation: 0,
        }
    }

    /// The cluster (for its native API: a partition's term, its leader).
    pub(crate) fn cluster(&self) -> &LocalCluster {
        self.cluster.as_ref().unwrap()
    }

    /// The cluster, to stop and restart its brokers.
    pub(crate) fn cluster_mut(&mut self) -> &mut LocalCluster {
        self.cluster.as_mut().unwrap()
    }

    /// Broker `id`'s Kafka address.
    pub(crate) fn kafka_of(&self, id: u64) -> SocketAddr {
        self.cluster().node(id).unwrap().kafka_addr().unwrap()
    }

    /// Speaks to broker `id` from now on, on a new connection.
    pub(crate) async fn connect_to(&mut self, id: u64) {
        self.kafka = self.kafka_of(id);
        self.conn = tokio::time::timeout(WAIT, TcpStream::connect(self.kafka))
            .await
            .expect("connected in time")
            .unwrap();
    }

    /// The fixture's connection, for bytes outside Kafka's framing (SASL's raw tokens).
    pub(crate) fn conn_mut(&mut self) -> &mut TcpStream {
        &mut self.conn
    }

    /// The Raft term of partition `p` of `topic`: Kafka's leader epoch.
    pub(crate) fn term(&self, topic: &str, p: u32) -> i32 {
        let status = self.cluster().node(1).unwrap().status(topic, p).unwrap();
        i32::try_from(status.term).unwrap()
    }

    /// Sends `request` as `api` at `version` (a new correlation id, the client id
    /// [`CLIENT_ID`]) on the fixture's connection, as a Kafka client frames it, and returns
    /// the answer's frame: its length, then the response header and body.
    pub(crate) async fn exchange(
        &mut self,
        api: ApiKey,
        version: i16,
        request: &impl Encodable,
    ) -> Bytes {
        self.correlation += 1;
        let frame = request_frame(api, version, self.correlation, request);
        tokio::time::timeout(WAIT, async {
            self.conn.write_all(&frame).await.unwrap();
            read_frame(&mut self.conn).await.expect("an answer")
        })
        .await
        .expect("an answer in time")
    }

    /// Sends `request` as [`exchange`](Self::exchange) does, for a request that is not
    /// answered (a produce with acks 0).
    pub(crate) async fn send(&mut self, api: ApiKey, version: i16, request: &impl Encodable) {
        self.correlation += 1;
        let frame = request_frame(api, version, self.correlation, request);
        tokio::time::timeout(WAIT, self.conn.write_all(&frame))
            .await
            .expect("sent in time")
            .unwrap();
    }

    /// Sends `request` as [`exchange`](Self::exchange) does, for a request the broker closes
    /// the connection on: `None` once it is closed, or the answer if one came.
    pub(crate) async fn exchange_unanswered(
        &mut self,
        api: ApiKey,
        version: i16,
        request: &impl Encodable,
    ) -> Option<Bytes> {
        self.correlation += 1;
        let frame = request_frame(api, version, self.correlation, request);
        tokio::time::timeout(WAIT, async {
            self.conn.write_all(&frame).await.unwrap();
            read_frame(&mut self.conn).await
        })
        .await
        .expect("closed in time")
    }

    /// Checks that `answer` (from [`exchange`](Self::exchange)) is, byte for byte, the frame
    /// of `expected` answering the last request (its correlation id) at `version`. On a
    /// difference, shows where, and both answers decoded.
    pub(crate) fn assert_answer<R>(&self, api: ApiKey, version: i16, answer: &Bytes, expected: &R)
    where
        R: Encodable + Decodable + std::fmt::Debug,
    {
        assert_frame(api, version, self.correlation, answer, expected);
    }

    /// The response in `answer`, decoded at `version` (to read what varies per run).
    pub(crate) fn decode<R: Decodable>(&self, api: ApiKey, version: i16, answer: &Bytes) -> R {
        let (correlation, r) = decode_frame(api, version, answer);
        assert_eq!(correlation, self.correlation, "the correlation id echoed");
        r
    }

    /// Waits (bounded by [`WAIT`]) until the answer to `api` at `version` with `request`,
    /// decoded, satisfies `ready`; returns that answer's bytes (for retriable states: a new
    /// topic's leaders, a coordinator loading).
    pub(crate) async fn exchange_until<R: Decodable>(
        &mut self,
        api: ApiKey,
        version: i16,
        request: &impl Encodable,
        ready: impl Fn(&R) -> bool,
    ) -> Bytes {
        let what = format!("{api:?} v{version} to be ready");
        support::wait_until(WAIT, &what, async || {
            let answer = self.exchange(api, version, request).await;
            ready(&self.decode::<R>(api, version, &answer)).then_some(answer)
        })
        .await
    }

    /// Shuts the broker down.
    pub(crate) async fn shutdown(mut self) {
        if let Some(cluster) = self.cluster.take() {
            cluster.shutdown().await.unwrap();
        }
    }
}

/// A request as a Kafka client sends it: a big-endian length, the request header (at the
/// header version the API and version call for), the body.
pub(crate) fn request_frame(
    api: ApiKey,
    version: i16,
    correlation: i32,
    request: &impl Encodable,
) -> Bytes {
    let mut header = RequestHeader::default();
    header.request_api_key = api as i16;
    header.request_api_version = version;
    header.correlation_id = correlation;
    header.client_id = Some(StrBytes::from_static_str(CLIENT_ID));
    let mut out = BytesMut::new();
    out.put_i32(0);
    header
        .encode(&mut out, api.request_header_version(version))
        .unwrap();
    request.encode(&mut out, version).unwrap();
    let len = i32::try_from(out.len() - 4).unwrap();
    (&mut out[..4]).put_i32(len);
    out.freeze()
}

/// An answer's frame as the broker should write it: a big-endian length, the response header
/// with `correlation`, `response` encoded at `version`.
pub(crate) fn answer_frame(
    api: ApiKey,
    version: i16,
    correlation: i32,
    response: &impl Encodable,
) -> Bytes {
    let mut header = ResponseHeader::default();
    header.correlation_id = correlation;
    let mut out = BytesMut::new();
    out.put_i32(0);
    header
        .encode(&mut out, api.response_header_version(version))
        .unwrap();
    response.encode(&mut out, version).unwrap();
    let len = i32::try_from(out.len() - 4).unwrap();
    (&mut out[..4]).put_i32(len);
    out.freeze()
}

/// Reads one frame (length and body); `None` if the connection ends first.
pub(crate) async fn read_frame(conn: &mut TcpStream) -> Option<Bytes> {
    let mut len = [0u8; 4];
    conn.read_exact(&mut len).await.ok()?;
    let n = usize::try_from((&len[..]).get_i32()).ok()?;
    let mut frame = vec![0u8; 4 + n];
    frame[..4].copy_from_slice(&len);
    conn.read_exact(&mut frame[4..]).await.ok()?;
    Some(Bytes::from(frame))
}

/// An answer frame's correlation id and response, decoded at `version`.
pub(crate) fn decode_frame<R: Decodable>(api: ApiKey, version: i16, frame: &Bytes) -> (i32, R) {
    let mut body = frame.slice(4..);
    let header = ResponseHeader::decode(&mut body, api.response_header_version(version)).unwrap();
    let r = R::decode(&mut body, version).unwrap();
    assert!(
        !body.has_remaining(),
        "{} bytes after the answer",
        body.len()
    );
    (header.correlation_id, r)
}

/// [`Broker::assert_answer`] for an answer to the request with `correlation`.
pub(crate) fn assert_frame<R>(
    api: ApiKey,
    version: i16,
    correlation: i32,
    answer: &Bytes,
    expected: &R,
) where
    R: Encodable + Decodable + std::fmt::Debug,
{
    let want = answer_frame(api, version, correlation, expected);
    if answer[..] == want[..] {
        return;
    }
    let at = answer.iter().zip(want.iter()).position(|(a, b)| a != b);
    let got = std::panic::catch_unwind(|| decode_frame::<R>(api, version, answer).1)
        .map_or_else(|_| "(does not decode)".to_string(), |r| format!("{r:#?}"));
    panic!(
        "{api:?} v{version}: the answer differs from the expected one at byte {at:?} \
         ({} bytes answered, {} expected)\nanswered: {got}\nexpected: {expected:#?}\n\
         answered bytes: {:02x?}\nexpected bytes: {:02x?}",
        answer.len(),
        want.len(),
        &answer[..],
        &want[..],
    );
}

/// A Kafka string.
pub(crate) fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

/// A Kafka topic name.
pub(crate) fn topic(v: &str) -> TopicName {
    TopicName(s(v))
}

/// Every family's declaration of the versions its tests exchange.
fn golden_cases() -> Vec<(ApiKey, i16)> {
    [
        acls::GOLDEN,
        admin::GOLDEN,
        api_versions::GOLDEN,
        configs::GOLDEN,
        delete_groups::GOLDEN,
        fetch::GOLDEN,
        groups::GOLDEN,
        group_coordinator::GOLDEN,
        leaders::GOLDEN,
        metadata::GOLDEN,
        offset_delete::GOLDEN,
        offsets::GOLDEN,
        produce::GOLDEN,
        producer_ids::GOLDEN,
        reassignments::GOLDEN,
        records::GOLDEN,
        sasl::GOLDEN,
        users::GOLDEN,
    ]
    .into_iter()
    .flatten()
    .flat_map(|(api, versions)| versions.iter().map(move |v| (*api, *v)))
    .collect()
}

/// Every API the broker serves (its ApiVersions answer, which lists each handler's
/// declaration) has a golden case at its oldest and its newest version: a handler added
/// without one fails here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_served_api_has_a_golden_case_at_its_oldest_and_newest_version() {
    use kafka_protocol::messages::{ApiVersionsRequest, ApiVersionsResponse};
    let mut broker = Broker::start().await;
    let answer = broker
        .exchange(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default())
        .await;
    let served: ApiVersionsResponse = broker.decode(ApiKey::ApiVersions, 3, &answer);
    assert_eq!(served.api_keys.len(), 36, "the thirty-six APIs served");
    let cases = &golden_cases();
    let missing: Vec<String> = served
        .api_keys
        .iter()
        .flat_map(|k| {
            let api = ApiKey::try_from(k.api_key).unwrap();
            [k.min_version, k.max_version]
                .into_iter()
                .filter(move |v| !cases.contains(&(api, *v)))
                .map(move |v| format!("{api:?} v{v}"))
        })
        .collect();
    assert!(missing.is_empty(), "no golden case for {missing:?}");
    broker.shutdown().await;
}
