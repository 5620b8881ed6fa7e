//! The native wire's codec: decodes a request frame, calls the [`BrokerService`] (or, for a
//! peer's Raft RPC, the partition's replica), encodes the answer. No request's meaning lives here.
//! The requests' and answers' mapping to and from the service's types is `handler/convert.rs`'s;
//! produce and fetch, which carry the records, are `handler/records.rs`'s.

mod convert;
mod records;

use std::sync::Arc;

use serde::Serialize;

use crate::error::Error;
use crate::group::api::{GroupRequest, MemberRef};
use crate::protocol::{
    CreatePartitionsRequest, CreateTopicRequest, DeleteRecordsRequest, DeleteTopicRequest,
    ListOffsetsRequest, MetadataRequest, ProposeRequest, ReassignRequest, TopicConfigsRequest,
    WireError,
};
use crate::security::Session;
use crate::transport::body::Body;
use crate::transport::frame::Op;
use crate::transport::{Answer, AnswerBudget, BoxFuture, Caller, Handler, Turn};

use super::Broker;
use super::peer_gate::Claim;
use super::service::BrokerService;
use convert::{metadata_response, offset_spec};
use records::{fetch, produce};

/// The native protocol's door: client requests go to the [`BrokerService`], peers' Raft RPCs
/// to this broker's replica of their partition.
pub(super) struct NodeHandler {
    pub(super) broker: Arc<Broker>,
    pub(super) service: BrokerService,
    /// What clients log in with, where they must (`NodeConfig::native_sasl`).
    pub(super) sasl: Option<super::service::SaslSettings>,
}

/// The answer's body: `result` encoded, its lent record batches sent from where they lie.
pub(super) fn encode_response<T: Serialize>(result: &std::result::Result<T, WireError>) -> Body {
    crate::transport::body::encode(result).unwrap_or_else(|e| {
        let fallback: std::result::Result<(), WireError> = Err(WireError::Other(e.to_string()));
        crate::transport::body::encode(&fallback).unwrap_or_default()
    })
}

/// Decodes a client request's body.
fn decode_request<T: serde::de::DeserializeOwned>(
    body: &[u8],
) -> std::result::Result<T, WireError> {
    postcard::from_bytes(body).map_err(|e| WireError::Other(format!("bad request: {e}")))
}

/// Serves a group request; its answer is the request's own result type (see
/// [`GroupRequest`]), inside the wire's `Ok`.
async fn group_answer(
    service: &BrokerService,
    request: GroupRequest,
    from: Option<std::net::SocketAddr>,
) -> Body {
    fn ok<T: Serialize>(answer: T) -> Body {
        encode_response::<T>(&Ok(answer))
    }
    match request {
        GroupRequest::FindCoordinator { group } => ok(service.find_coordinator(&group).await),
        GroupRequest::Join(join) => ok(service.join_group(join, from).await),
        GroupRequest::Sync(sync) => ok(service.sync_group(sync).await),
        GroupRequest::Heartbeat {
            group,
            generation,
            member_id,
            group_instance_id,
        } => {
            let member = MemberRef {
                member_id,
                group_instance_id,
            };
            ok(service.heartbeat(&group, generation, &member).await)
        }
        GroupRequest::Leave {
            group,
            member_id,
            group_instance_id,
        } => {
            let member = MemberRef {
                member_id,
                group_instance_id,
            };
            ok(service.leave_group(&group, &member).await)
        }
        GroupRequest::Commit(commit) => ok(service.commit_offsets(commit).await),
        GroupRequest::FetchOffsets { group, partitions } => {
            ok(service.fetch_offsets(&group, partitions).await)
        }
        GroupRequest::List => ok(service.list_groups().await),
        GroupRequest::Describe { group } => ok(service.describe_group(&group).await),
        GroupRequest::Delete { group } => ok(service.delete_group(&group).await),
        GroupRequest::DeleteOffsets { group, partitions } => {
            ok(service.delete_offsets(&group, partitions).await)
        }
    }
}

fn wire(e: Error) -> WireError {
    WireError::from_error(&e)
}

impl NodeHandler {
    /// The user `caller`'s certificate stands for (`User:<name>`), worked out once per
    /// connection: none for a peer broker's. `Err`: a certificate no principal mapping rule
    /// applies to (logged once), why.
    fn certificate_user<'a>(&self, caller: &'a Caller) -> Result<Option<&'a String>, &'a String> {
        caller
            .certificate_user
            .get_or_init(|| {
                let Some(cert) = caller.certificate.as_ref() else {
                    return Ok(None);
                };
                if cert.names_a_broker() {
                    return Ok(None);
                }
                let user = cert.user(self.broker.config.ssl_principal_mapping_rules.as_ref());
                if let Err(why) = &user {
                    tracing::info!(from = %caller.from, reason = %why, "native client refused");
                }
                user
            })
            .as_ref()
            .map(Option::as_ref)
    }

    /// Refuses `op`, traffic only brokers send, unless `caller` may send it as `claim` (see
    /// `peer_gate.rs`), as Kafka refuses a cluster action: with a cluster authorization error.
    fn brokers_only(
        &self,
        caller: &Caller,
        op: Op,
        claim: Claim,
    ) -> std::result::Result<(), WireError> {
        if self.broker.admits_peer(caller, op, claim) {
            Ok(())
        } else {
            Err(wire(Error::ClusterAuthorizationFailed))
        }
    }

    /// The service as the principal of `caller`'s requests. `Err`: the refusal of each request
    /// of a connection whose certificate names nobody.
    fn service_for(&self, caller: &Caller) -> Result<BrokerService, WireError> {
        // Each request on behalf of whoever the connection is: the user it logged in as,
        // or an anonymous client where the broker asks for no login.
        let ip = Some(caller.from.ip());
        let user = match &caller.user {
            Some(user) => Some(user),
            None => match self.certificate_user(caller) {
                Ok(user) => user,
                // A certificate that names nobody: each request refused as a login is.
                Err(why) => return Err(WireError::AuthenticationFailed(why.clone())),
            },
        };
        let session = match user {
            Some(user) => Session::user(user, ip),
            None => Session::anonymous(ip),
        };
        Ok(self.service.with_session(session))
    }

    /// Serves one request, by the family of its op: a peer's, a client's reads and writes, a
    /// group's, an admin's, the security ops. `turn` is a produce's place among its
    /// connection's requests; a fetch reserves its answer's bytes in `answers`.
    async fn dispatch(
        &self,
        op: Op,
        body: Vec<u8>,
        turn: Option<Turn>,
        answers: &AnswerBudget,
        caller: &Caller,
        service: &BrokerService,
    ) -> Answer {
        let body = match op {
            Op::AppendEntries
            | Op::Vote
            | Op::PreVote
            | Op::Snapshot
            | Op::TransferLeader
            | Op::BrokerHeartbeat
            | Op::Quiesce
            | Op::Propose => self.serve_peer(op, body, caller, service).await,
            Op::Produce => produce(service, body, turn).await,
            Op::Fetch => return fetch(service, &body, answers, false).await,
            Op::FetchAsStored => return fetch(service, &body, answers, true).await,
            Op::Metadata => self.metadata(&body, caller, service).await,
            Op::ListOffsets => {
                encode_response(&decode_request(&body).and_then(|req: ListOffsetsRequest| {
                    service
                        .list_offset(&req.partition, offset_spec(req.at), None)
                        .map(|o| o.map(|l| l.offset.get()))
                        .map_err(wire)
                }))
            }
            Op::Group => match decode_request::<GroupRequest>(&body) {
                Err(e) => encode_response::<()>(&Err(e)),
                Ok(request) => group_answer(service, request, Some(caller.from)).await,
            },
            Op::CreateTopic
            | Op::DeleteTopic
            | Op::TopicConfigs
            | Op::CreatePartitions
            | Op::DeleteRecords => self.serve_topic_admin(op, &body, caller, service).await,
            Op::Reassign | Op::ElectLeaders | Op::Brokers | Op::ListReassignments => {
                self.serve_cluster_admin(op, &body, caller, service).await
            }
            Op::Acls => super::security_ops::acls(service, &body).await,
            Op::Users => super::security_ops::users(service, &body).await,
            // The transport answers a Hello itself (`transport/hello.rs`).
            Op::Hello => {
                encode_response::<()>(&Err(WireError::Other("Hello is the transport's".into())))
            }
            // A login's requests come before any other (`transport/login.rs`); later, or
            // where the broker asks for none, they are out of turn.
            Op::SaslHandshake | Op::SaslAuthenticate => {
                encode_response::<()>(&Err(WireError::AuthenticationFailed(format!(
                    "{} out of turn: the connection {}",
                    op.name(),
                    if self.sasl.is_some() {
                        "logged in already"
                    } else {
                        "needs no login on this broker"
                    }
                ))))
            }
        };
        Answer { body, held: None }
    }

    /// Serves a peer broker's op: a Raft RPC to this broker's replica of its partition, a
    /// heartbeat, a quiesce offer, a metadata proposal (the last three only from a caller that
    /// `peer_gate.rs` admits for them).
    async fn serve_peer(
        &self,
        op: Op,
        body: Vec<u8>,
        caller: &Caller,
        service: &BrokerService,
    ) -> Body {
        match op {
            Op::AppendEntries | Op::Vote | Op::PreVote | Op::Snapshot | Op::TransferLeader => {
                // An append's batches stay in the frame's buffer on their way to the log.
                let frame = bytes::Bytes::from(body);
                self.broker.serve_raft(op, &frame, caller).await.into()
            }
            Op::BrokerHeartbeat => encode_response(
                &async {
                    let heartbeat: super::liveness::BrokerHeartbeat = decode_request(&body)?;
                    self.brokers_only(caller, op, Claim::Peer(heartbeat.from))?;
                    self.broker.serve_heartbeat(heartbeat)
                }
                .await,
            ),
            Op::Quiesce => encode_response(
                &async {
                    let request: super::quiet::QuiesceRequest = decode_request(&body)?;
                    self.brokers_only(caller, op, Claim::Peer(request.from))?;
                    Ok(self.broker.serve_quiesce(request))
                }
                .await,
            ),
            Op::Propose => encode_response(
                &async {
                    let request: ProposeRequest = decode_request(&body)?;
                    self.brokers_only(caller, op, Claim::of_command(&request.command))?;
                    service.propose(request.into()).await.map_err(wire)
                }
                .await,
            ),
            _ => misrouted(op),
        }
    }

    /// Serves a metadata request: a broker's view of its own replicas only to another broker,
    /// a topic's only to a principal that may describe it.
    async fn metadata(&self, body: &[u8], caller: &Caller, service: &BrokerService) -> Body {
        encode_response(
            &async {
                let req: MetadataRequest = decode_request(body)?;
                if req.local_only {
                    self.brokers_only(caller, Op::Metadata, Claim::AnyBroker)?;
                } else if let Some(topic) = &req.topic {
                    // A topic asked for by name that the principal may not describe
                    // is refused as Kafka refuses it (whether it exists or not).
                    service
                        .authorize_topic(crate::acl::AclOperation::Describe, topic)
                        .map_err(wire)?;
                }
                let answer = service.metadata(req.topic.as_deref(), req.local_only).await;
                Ok(metadata_response(answer))
            }
            .await,
        )
    }

    /// Serves an admin op on a topic: its creation, deletion, configs, partitions, records.
    /// One forwarded from another broker is served only from a broker.
    async fn serve_topic_admin(
        &self,
        op: Op,
        body: &[u8],
        caller: &Caller,
        service: &BrokerService,
    ) -> Body {
        match op {
            Op::CreateTopic => encode_response(
                &async {
                    let request: CreateTopicRequest = decode_request(body)?;
                    if request.forwarded {
                        self.brokers_only(caller, op, Claim::AnyBroker)?;
                    }
                    service.create_topic(request.into()).await.map_err(wire)
                }
                .await,
            ),
            Op::DeleteTopic => encode_response(
                &async {
                    let request: DeleteTopicRequest = decode_request(body)?;
                    if request.forwarded {
                        self.brokers_only(caller, op, Claim::AnyBroker)?;
                    }
                    service.delete_topic(request.into()).await.map_err(wire)
                }
                .await,
            ),
            Op::TopicConfigs => match decode_request(body) {
                Err(e) => encode_response::<()>(&Err(e)),
                Ok(TopicConfigsRequest::Describe { topic }) => {
                    encode_response(&service.describe_topic_configs(&topic).map_err(wire))
                }
                Ok(TopicConfigsRequest::Alter(request)) => encode_response(
                    &async {
                        if request.forwarded {
                            self.brokers_only(caller, op, Claim::AnyBroker)?;
                        }
                        let deadline =
                            tokio::time::Instant::now() + self.broker.config.request_timeout;
                        let altered = service.alter_topic_configs(request.into(), deadline);
                        altered.await.map_err(wire)
                    }
                    .await,
                ),
            },
            Op::CreatePartitions => encode_response(
                &async {
                    let request = CreatePartitionsRequest::decode(body)
                        .map_err(|e| WireError::Other(format!("bad request: {e}")))?;
                    let deadline = tokio::time::Instant::now() + self.broker.config.request_timeout;
                    let grown = service.create_partitions(request.into(), deadline);
                    grown.await.map_err(wire)
                }
                .await,
            ),
            Op::DeleteRecords => encode_response(
                &async {
                    let request: DeleteRecordsRequest = decode_request(body)?;
                    let deleted = service.delete_records(&request.partition, request.before);
                    deleted.await.map(|start| start.get()).map_err(wire)
                }
                .await,
            ),
            _ => misrouted(op),
        }
    }

    /// Serves an admin op on the cluster: reassignments, leader elections, the brokers. One
    /// forwarded from another broker is served only from a broker.
    async fn serve_cluster_admin(
        &self,
        op: Op,
        body: &[u8],
        caller: &Caller,
        service: &BrokerService,
    ) -> Body {
        match op {
            Op::Reassign => encode_response(
                &async {
                    let request: ReassignRequest = decode_request(body)?;
                    service
                        .reassign_partition(request.into())
                        .await
                        .map_err(wire)
                }
                .await,
            ),
            Op::ElectLeaders => encode_response(
                &async {
                    let request: crate::protocol::ElectLeadersRequest = decode_request(body)?;
                    if request.forwarded {
                        self.brokers_only(caller, op, Claim::AnyBroker)?;
                    }
                    service.elect_leaders(request.into()).await.map_err(wire)
                }
                .await,
            ),
            Op::Brokers => match decode_request(body) {
                Err(e) => encode_response::<()>(&Err(e)),
                Ok(crate::protocol::BrokersRequest::Describe) => {
                    encode_response(&service.describe_brokers().await.map_err(wire))
                }
                Ok(crate::protocol::BrokersRequest::Decommission { id }) => {
                    encode_response(&service.decommission_broker(id).await.map_err(wire))
                }
            },
            Op::ListReassignments => encode_response(&decode_request(body).and_then(
                |request: crate::protocol::ListReassignmentsRequest| {
                    service
                        .list_reassignments(request.topics.as_deref())
                        .map_err(wire)
                },
            )),
            _ => misrouted(op),
        }
    }
}

impl Handler for NodeHandler {
    fn is_peer_certificate(&self, certificate: &crate::tls::ClientCertificate) -> bool {
        certificate.names_a_broker()
    }

    fn login(
        &self,
        from: std::net::SocketAddr,
        certificate: Option<&crate::tls::ClientCertificate>,
    ) -> Option<Box<dyn crate::transport::Login>> {
        let settings = self.sasl.as_ref()?;
        // Peer brokers are known by their certificates, and log in no other way: a joining
        // broker too, which the cluster does not know yet (what it may send is
        // `peer_gate.rs`'s to say).
        if certificate.is_some_and(crate::tls::ClientCertificate::names_a_broker) {
            return None;
        }
        let login =
            super::login::NativeLogin::new(self.service.clone(), settings.clone(), from.ip());
        Some(Box::new(login))
    }

    fn handle(
        self: Arc<Self>,
        op: Op,
        body: Vec<u8>,
        turn: Turn,
        answers: AnswerBudget,
        caller: Arc<Caller>,
    ) -> BoxFuture<Answer> {
        Box::pin(async move {
            let started = std::time::Instant::now();
            let service = match self.service_for(&caller) {
                Ok(service) => service,
                Err(refused) => return encode_response::<()>(&Err(refused)).into(),
            };
            let service = &service;
            // Only produce requests keep their connection's order (see `Replica::write`);
            // any other passes its turn on at once.
            let turn = matches!(op, Op::Produce).then_some(turn);
            // A broker removed from the cluster has nothing current to tell a client: it
            // leads nothing, so the client asks the others (as after any NotLeader without a
            // hint: they name the leaders).
            if !is_peer_op(op) && self.broker.departed() {
                let refused = WireError::NotLeader { leader: None };
                return Answer {
                    body: encode_response::<()>(&Err(refused)),
                    held: None,
                };
            }
            let answer = self
                .dispatch(op, body, turn, &answers, &caller, service)
                .await;
            crate::metrics::request(op.name(), started.elapsed());
            answer
        })
    }
}

/// Whether `op` is a peer broker's (its Raft RPCs, heartbeats, quiescing, metadata proposals).
fn is_peer_op(op: Op) -> bool {
    matches!(
        op,
        Op::AppendEntries
            | Op::Vote
            | Op::PreVote
            | Op::Snapshot
            | Op::TransferLeader
            | Op::Propose
            | Op::BrokerHeartbeat
            | Op::Quiesce
    )
}

/// The answer to an op handed to a family that does not serve it. None is (each op goes to
/// its own family's server), but each family's match covers every op.
fn misrouted(op: Op) -> Body {
    encode_response::<()>(&Err(WireError::Other(format!("{} misrouted", op.name()))))
}
