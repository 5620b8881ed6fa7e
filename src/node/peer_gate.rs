//! Which connections the native door serves brokers' own traffic on: Raft's RPCs, metadata
//! proposals (registrations among them), admin requests another broker forwarded, and the
//! questions brokers ask each other about the replicas they host.
//!
//! Brokers given their CA ([`TlsConfig::ca_cert`](crate::TlsConfig)) know each other by
//! certificate: the native listener asks every client for one signed by the CA, and each broker
//! dials its peers presenting its own, which names it `broker-<id>`. Such traffic is served
//! only on a connection whose certificate names the broker the traffic claims to come from
//! (the candidate of a vote, the leader of an append, the broker a registration registers), or
//! some broker of the cluster where the traffic names none. Anything else is refused before it
//! reaches a partition's Raft group or the metadata log: no term moves, no leader changes, no
//! broker registers. The first refusal on a connection is logged, at warn.
//!
//! A certificate that names some broker, one of the cluster's or not (a joining broker's), is
//! a broker's everywhere else: its connection is not asked to log in where native clients
//! must (`NodeConfig::native_sasl`), its certificate stands for no user, and it may use the
//! room and memory kept for peers. What it may send is still decided as above, so a broker
//! not in the cluster yet may send its own registration, and nothing else of brokers' traffic.
//!
//! Brokers without TLS between them trust their network: every connection may send it.

use crate::catalog::MetaCommand;
use crate::transport::Caller;
use crate::transport::frame::Op;
use crate::types::NodeId;

use super::Broker;

/// Which broker a request of brokers' traffic claims to come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Claim {
    /// This broker of the cluster (a Raft RPC's sender: one this broker knows of).
    Peer(NodeId),
    /// This broker, known yet or not (a registration: a joining broker registers itself).
    Broker(NodeId),
    /// Any of the cluster's.
    AnyBroker,
}

/// [`Caller::confirmed_broker`]'s value until a known broker is confirmed.
pub(crate) const NO_BROKER: NodeId = NodeId::MAX;

impl Claim {
    /// What a metadata proposal claims: a command about a broker of its own (its address, its
    /// producer ids) comes from that broker; any other from any broker.
    pub(super) fn of_command(command: &MetaCommand) -> Claim {
        match command {
            MetaCommand::RegisterBroker { id, .. }
            | MetaCommand::RegisterKafka { id, .. }
            | MetaCommand::RegisterRack { id, .. } => Claim::Broker(*id),
            MetaCommand::AllocateProducerIds { broker, .. } => Claim::Broker(*broker),
            _ => Claim::AnyBroker,
        }
    }
}

impl Broker {
    /// Whether peer brokers must present certificates: they were given their CA.
    fn peers_present_certificates(&self) -> bool {
        self.config
            .tls
            .as_ref()
            .is_some_and(|t| t.ca_cert.is_some())
    }

    /// Whether `caller` may send `op`, traffic only brokers send, claiming to be `claim`.
    /// A refusal is logged once per connection.
    pub(super) fn admits_peer(&self, caller: &Caller, op: Op, claim: Claim) -> bool {
        if !self.peers_present_certificates() {
            return true;
        }
        let admitted = self.confirm_broker(caller, claim);
        if !admitted && caller.first_refusal() {
            let claimed = match claim {
                Claim::Peer(id) | Claim::Broker(id) => format!("broker {id}"),
                Claim::AnyBroker => "a broker".to_string(),
            };
            let presented = if caller.certificate.is_some() {
                "a certificate that does not name it"
            } else {
                "no certificate"
            };
            tracing::warn!(
                from = %caller.from,
                op = op.name(),
                "refused a request only brokers send: it claims to come from {claimed}, the \
                 connection presented {presented}"
            );
        }
        admitted
    }

    /// Whether `caller`'s certificate names the broker `claim` says. A known broker found is
    /// remembered for the connection (brokers never leave a cluster yet), so that Raft's
    /// traffic does not parse the certificate again on every request; an unknown one (a
    /// joining broker's registration) is checked each time.
    fn confirm_broker(&self, caller: &Caller, claim: Claim) -> bool {
        use std::sync::atomic::Ordering;
        let confirmed = caller.confirmed_broker.load(Ordering::Relaxed);
        if confirmed != NO_BROKER {
            match claim {
                Claim::Peer(id) | Claim::Broker(id) if id == confirmed => return true,
                Claim::AnyBroker => return true,
                _ => {}
            }
        }
        let Some(cert) = &caller.certificate else {
            return false;
        };
        let known = self.known_brokers();
        let (admitted, found) = match claim {
            Claim::Peer(id) => {
                let ok = known.contains(&id) && cert.names_broker(id);
                (ok, ok.then_some(id))
            }
            Claim::Broker(id) => {
                let ok = cert.names_broker(id);
                (ok, (ok && known.contains(&id)).then_some(id))
            }
            Claim::AnyBroker => {
                let found = known.into_iter().find(|id| cert.names_broker(*id));
                (found.is_some(), found)
            }
        };
        if let Some(id) = found {
            caller.confirmed_broker.store(id, Ordering::Relaxed);
        }
        admitted
    }

    /// The brokers this one knows of: the catalog's, those it was configured with, and itself.
    fn known_brokers(&self) -> Vec<NodeId> {
        let mut ids = self.catalog.read().brokers();
        ids.extend(self.config.peers.keys().copied());
        ids.push(self.config.id);
        ids.sort_unstable();
        ids.dedup();
        ids
    }
}

/// The broker a Raft RPC's body (after its partition) claims to come from: the node of the
/// vote it opens with. Each of the four RPCs (Vote, AppendEntries, Snapshot, TransferLeader)
/// begins with the sender's vote (openraft's `vote`, `vote`, the tuple's first item and
/// `from_leader`), a candidate's or a leader's; a test pins that for each.
pub(super) fn raft_sender(body: &[u8]) -> Option<NodeId> {
    use openraft::vote::RaftLeaderId;
    let (vote, _) = postcard::take_from_bytes::<crate::raft::types::Vote>(body).ok()?;
    Some(*vote.leader_id().node_id())
}

#[cfg(test)]
mod tests {
    use openraft::raft::{AppendEntriesRequest, TransferLeaderRequest, VoteRequest};

    use crate::transport::frame::Op;

    use super::*;
    use crate::raft::types::{C, Vote};

    #[test]
    fn every_raft_rpc_opens_with_its_senders_vote() {
        let vote = Vote::new(7, 3);
        let votes = postcard::to_stdvec(&VoteRequest::<C>::new(vote, None)).unwrap();
        let append = AppendEntriesRequest::<C> {
            vote,
            prev_log_id: None,
            entries: Vec::new(),
            leader_commit: None,
        };
        let appends = postcard::to_stdvec(&append).unwrap();
        let transfer = TransferLeaderRequest::<C>::new(vote, 2, None);
        let transfers = postcard::to_stdvec(&transfer).unwrap();
        let snapshot = postcard::to_stdvec(&(vote, 1u8, 2u8)).unwrap();
        for body in [votes, appends, transfers, snapshot] {
            assert_eq!(raft_sender(&body), Some(3));
        }
        assert_eq!(raft_sender(&[0xff; 3]), None);
    }

    #[test]
    fn a_command_about_a_broker_claims_that_broker() {
        let register = MetaCommand::RegisterBroker {
            id: 4,
            addr: "127.0.0.1:1".into(),
            join: false,
        };
        assert_eq!(Claim::of_command(&register), Claim::Broker(4));
        let delete = MetaCommand::DeleteTopic { name: "t".into() };
        assert_eq!(Claim::of_command(&delete), Claim::AnyBroker);
    }

    /// Broker 1 of a cluster whose brokers know each other by certificate, called by
    /// impostors: a client without a certificate, one with a client certificate of the
    /// cluster's CA, broker 3 claiming to be broker 2, broker 2 of another CA, and a broker 4
    /// the cluster does not have (a certificate of its CA) as itself. None of
    /// their 1,000 votes at a higher term (each a leadership transfer, from a log far ahead;
    /// twenty tries for the one whose handshakes fail, which delivers none) moves a term or a
    /// leader; their registration of broker 2 moves no broker; the topic
    /// those that are no broker forward is not created.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn traffic_only_brokers_send_needs_the_brokers_certificate() {
        use std::time::Duration;

        use crate::protocol::{CreateTopicRequest, ProposeRequest, WireError};
        use crate::raft::types::LogId;
        use crate::tls::{DevCertificates, TlsConfig, TlsDialer, TlsServer, broker_name};
        use crate::transport::{Dial, Peer};
        use crate::types::PartitionId;

        let dir = tempfile::tempdir().unwrap();
        let certs = dir.path().join("certs");
        let hosts = ["127.0.0.1".to_string()];
        DevCertificates::generate(&[1, 2, 3, 4], &hosts)
            .unwrap()
            .write_to(&certs)
            .unwrap();
        let other = dir.path().join("other");
        DevCertificates::generate(&[2], &hosts)
            .unwrap()
            .write_to(&other)
            .unwrap();
        let ca = certs.join("ca.pem");
        let cluster = crate::LocalCluster::start(3, dir.path(), |c| {
            let mut tls = DevCertificates::broker_config(&certs, c.id);
            tls.ca_cert = Some(ca.clone());
            c.tls = Some(tls);
            c.topics = vec![("t".into(), 3)];
        })
        .await
        .unwrap();
        cluster
            .wait_for_leaders("t", 3, Duration::from_secs(30))
            .await
            .unwrap();
        let states = || {
            let mut all = Vec::new();
            for node in cluster.nodes() {
                for p in node.partitions() {
                    let s = node.status(&p.topic, p.partition).unwrap();
                    all.push((node.id(), p, s.term, s.leader));
                }
            }
            all
        };
        let before = states();
        let brokers = cluster.node(1).unwrap().brokers();

        let presenting = |config: TlsConfig| {
            TlsDialer::for_peers(&ca, &TlsServer::new(&config).unwrap()).unwrap()
        };
        let client = TlsConfig::new(certs.join("client.pem"), certs.join("client.key"));
        // Who calls, and whether it is a broker of the cluster (which may forward requests).
        let impostors = [
            (
                "no certificate",
                TlsDialer::from_ca_file(&ca).unwrap(),
                false,
            ),
            ("a client certificate", presenting(client), false),
            (
                "broker 3 as broker 2",
                presenting(DevCertificates::broker_config(&certs, 3)),
                true,
            ),
            (
                "another CA's broker 2",
                presenting(DevCertificates::broker_config(&other, 2)),
                false,
            ),
        ];
        // And a broker the cluster does not have, with a certificate of its CA, as itself.
        let unknown = (
            "unknown broker 4",
            presenting(DevCertificates::broker_config(&certs, 4)),
            false,
        );
        let claims = [2, 2, 2, 2, 4];
        let node = cluster.node(1).unwrap();
        let partitions = node.partitions();
        let (_stop, stopping) = tokio::sync::watch::channel(false);
        let timeout = Duration::from_secs(5);
        for ((who, dialer, a_broker), claimed) in impostors.into_iter().chain([unknown]).zip(claims)
        {
            let dial = Dial {
                dialer,
                name: broker_name(1),
                login: None,
            };
            let peer = Peer::new(node.addr().into(), 1 << 20, stopping.clone(), Some(dial));
            let mut answered = 0;
            for i in 0..1000u64 {
                // A caller whose handshakes all fail delivers no vote at all: twenty failed
                // handshakes show that; a thousand would only spend minutes of reconnects.
                if i == 20 && answered == 0 {
                    break;
                }
                let partition: &PartitionId = &partitions[i as usize % partitions.len()];
                let vote = crate::raft::types::Vote::new(1000 + i, claimed);
                let mut rpc =
                    VoteRequest::<C>::new(vote, Some(LogId::new_term_index(999, 1 << 40)));
                rpc.leadership_transfer = true;
                let topic_id = crate::catalog::CONFIGURED_TOPIC_ID;
                let body = crate::transport::body::encode(&(partition, topic_id, &rpc)).unwrap();
                // Refused, or never delivered (a handshake that fails).
                if let Ok(answer) = peer.call(Op::Vote, body, timeout).await {
                    let answer: Result<openraft::raft::VoteResponse<C>, String> =
                        postcard::from_bytes(&answer).unwrap();
                    assert!(answer.is_err(), "{who}: {answer:?}");
                    answered += 1;
                }
            }
            let register = ProposeRequest {
                command: MetaCommand::RegisterBroker {
                    id: claimed,
                    addr: "127.0.0.1:9".into(),
                    join: false,
                },
                forwarded: false,
            };
            let body = crate::transport::body::encode(&register).unwrap();
            if let Ok(answer) = peer.call(Op::Propose, body, timeout).await {
                let answer: Result<(), WireError> = postcard::from_bytes(&answer).unwrap();
                // A certificate of broker 4 may register broker 4: the metadata log refuses a
                // broker it does not have (no join asked).
                let refused = matches!(answer, Err(WireError::ClusterAuthorizationFailed))
                    || (claimed == 4 && answer.is_err());
                assert!(refused, "{who}: {answer:?}");
            }
            if a_broker {
                continue;
            }
            let create = CreateTopicRequest {
                configs: crate::topic_config::TopicConfigs::default(),
                assignment: Vec::new(),
                name: "planted".into(),
                partitions: 1,
                replication_factor: 1,
                forwarded: true,
            };
            let body = crate::transport::body::encode(&create).unwrap();
            if let Ok(answer) = peer.call(Op::CreateTopic, body, timeout).await {
                let answer: Result<(), WireError> = postcard::from_bytes(&answer).unwrap();
                assert!(
                    matches!(answer, Err(WireError::ClusterAuthorizationFailed)),
                    "{who}"
                );
            }
        }
        assert_eq!(states(), before, "a term or a leader moved");
        assert_eq!(node.brokers(), brokers, "a broker moved");
        assert!(node.status("planted", 0).is_err(), "a topic was planted");
        cluster.shutdown().await.unwrap();
    }
}
