//! Kafka's ElectLeaders over the broker service. A preferred election hands each partition
//! to the first of its replicas by a Raft leadership transfer; an unclean one has nothing to
//! do in Raft (a Raft group elects only a replica holding every committed entry, by itself), so a
//! partition with a leader needs none and one without waits for its Raft group's own election.
//! Codec only.

use std::collections::BTreeMap;

use kafka_protocol::messages::elect_leaders_response::{PartitionResult, ReplicaElectionResult};
use kafka_protocol::messages::{ElectLeadersRequest, ElectLeadersResponse};

use crate::acl::AclOperation;
use crate::kafka::{code, error_code, message, topic_name};
use crate::node::Election;
use crate::node::service::BrokerService;
use crate::types::PartitionId;

/// The versions served.
pub(crate) const APIS: &[super::Served] = &[(kafka_protocol::messages::ApiKey::ElectLeaders, 0, 2)];

/// Kafka's election types (v1 on; v0 is always preferred).
const PREFERRED: i8 = 0;
const UNCLEAN: i8 = 1;

/// ElectLeaders: each partition asked (null: every partition, answered only for those where
/// something happened or failed, as Kafka's controller answers) with its outcome. Without
/// ALTER on the cluster every partition asked is refused with CLUSTER_AUTHORIZATION_FAILED,
/// also the request's error from v1 on; an unknown election type is INVALID_REQUEST.
pub(crate) async fn elect_leaders(
    request: ElectLeadersRequest,
    version: i16,
    service: &BrokerService,
) -> ElectLeadersResponse {
    let asked: Option<Vec<PartitionId>> = request.topic_partitions.as_ref().map(|topics| {
        topics
            .iter()
            .flat_map(|t| {
                t.partitions.iter().map(|p| {
                    PartitionId::new(t.topic.0.as_str(), u32::try_from(*p).unwrap_or(u32::MAX))
                })
            })
            .collect()
    });
    let every = asked.is_none();
    let all_asked = asked.clone();
    let refused = |code: i16, why: &str| {
        let outcomes = all_asked
            .iter()
            .flatten()
            .map(|id| (id.clone(), (code, Some(why.to_string()))))
            .collect();
        let mut r = answer(outcomes, false);
        // v0 has no error of the request's own.
        if version >= 1 {
            r.error_code = code;
        }
        r
    };
    if !service.may_on_cluster(AclOperation::Alter) {
        return refused(
            code::CLUSTER_AUTHORIZATION_FAILED,
            "ALTER on the cluster is needed to elect leaders",
        );
    }
    let outcomes: Vec<(PartitionId, (i16, Option<String>))> = match request.election_type {
        PREFERRED => {
            let elected = crate::node::service::ElectLeaders {
                partitions: asked,
                forwarded: false,
            };
            match service.elect_leaders(elected).await {
                Ok(done) => done.into_iter().map(|(id, e)| (id, outcome(e))).collect(),
                Err(e) => return refused(error_code(&e), &e.to_string()),
            }
        }
        UNCLEAN => unclean(asked, service).await,
        _ => return refused(code::INVALID_REQUEST, "an unknown election type"),
    };
    answer(outcomes, every)
}

/// An outcome as Kafka's error code and message.
fn outcome(e: Election) -> (i16, Option<String>) {
    match e {
        Election::Elected => (code::NONE, None),
        Election::NotNeeded => (code::ELECTION_NOT_NEEDED, None),
        Election::PreferredUnavailable(why) => (code::PREFERRED_LEADER_NOT_AVAILABLE, Some(why)),
        Election::UnknownPartition => (code::UNKNOWN_TOPIC_OR_PARTITION, None),
        Election::TryAgain(why) => (code::REQUEST_TIMED_OUT, Some(why)),
    }
}

/// An unclean election: nothing to do where a partition has a leader; none possible where it
/// has not (its Raft group elects one from the replicas holding every committed entry).
async fn unclean(
    asked: Option<Vec<PartitionId>>,
    service: &BrokerService,
) -> Vec<(PartitionId, (i16, Option<String>))> {
    let metadata = service.metadata(None, false).await;
    let leaders: BTreeMap<&PartitionId, Option<u64>> = metadata
        .partitions
        .iter()
        .map(|p| (&p.partition, p.leader))
        .collect();
    let asked = asked.unwrap_or_else(|| leaders.keys().map(|id| (*id).clone()).collect());
    asked
        .into_iter()
        .map(|id| {
            let outcome = match leaders.get(&id) {
                None => (code::UNKNOWN_TOPIC_OR_PARTITION, None),
                Some(Some(_)) => (code::ELECTION_NOT_NEEDED, None),
                Some(None) => (
                    code::ELIGIBLE_LEADERS_NOT_AVAILABLE,
                    Some(
                        "a Raft group elects only a replica holding every committed entry; \
                         the partition's Raft group is electing one"
                            .to_string(),
                    ),
                ),
            };
            (id, outcome)
        })
        .collect()
}

/// The response: outcomes grouped by topic, in partition order (`every`: those not needed
/// left out).
fn answer(
    mut outcomes: Vec<(PartitionId, (i16, Option<String>))>,
    every: bool,
) -> ElectLeadersResponse {
    outcomes.sort_by(|a, b| a.0.cmp(&b.0));
    let mut r = ElectLeadersResponse::default();
    for (id, (error_code, why)) in outcomes {
        if every && error_code == code::ELECTION_NOT_NEEDED {
            continue;
        }
        let mut p = PartitionResult::default();
        p.partition_id = i32::try_from(id.partition).unwrap_or(i32::MAX);
        p.error_code = error_code;
        p.error_message = why.and_then(message);
        match r.replica_election_results.last_mut() {
            Some(t) if t.topic.0.as_str() == id.topic.as_str() => t.partition_result.push(p),
            _ => {
                let mut t = ReplicaElectionResult::default();
                t.topic = topic_name(&id.topic);
                t.partition_result.push(p);
                r.replica_election_results.push(t);
            }
        }
    }
    r
}
