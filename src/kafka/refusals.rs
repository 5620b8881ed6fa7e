//! The answers to what the listener does not serve, so that a client hears why instead of
//! losing its connection: admin requests whose answer names each item get every item refused
//! with `UNSUPPORTED_VERSION` and the reason; other APIs get their own answer with their
//! top-level error, where it has one at the version asked. The APIs served and their versions
//! are the handlers' (`handlers/mod.rs`).

use kafka_protocol::messages::{ApiKey, RequestKind, ResponseKind};

use crate::kafka::{code, message};

/// The answer to an API (or version) this listener does not serve, for the APIs whose answer
/// has a top-level error code at the version asked (Fetch from 7, ElectLeaders from 1,
/// DescribeLogDirs from 3, AddPartitionsToTxn from 4: the versions that gained the field):
/// `UNSUPPORTED_VERSION`; for SASL at a version not served `UNSUPPORTED_SASL_MECHANISM` and
/// `ILLEGAL_SASL_STATE`; for transactions `TRANSACTIONAL_ID_AUTHORIZATION_FAILED`,
/// as InitProducerId answers a transactional id.
pub(super) fn unsupported(api: ApiKey, version: i16) -> Option<ResponseKind> {
    use kafka_protocol::messages as m;
    macro_rules! refuse {
        ($kind:ident, $ty:ident, $code:expr) => {{
            let mut r = m::$ty::default();
            r.error_code = $code;
            ResponseKind::$kind(r)
        }};
    }
    let no = code::UNSUPPORTED_VERSION;
    let txn = code::TRANSACTIONAL_ID_AUTHORIZATION_FAILED;
    Some(match api {
        ApiKey::SaslHandshake => refuse!(
            SaslHandshake,
            SaslHandshakeResponse,
            code::UNSUPPORTED_SASL_MECHANISM
        ),
        ApiKey::SaslAuthenticate => refuse!(
            SaslAuthenticate,
            SaslAuthenticateResponse,
            code::ILLEGAL_SASL_STATE
        ),
        // Transactions are refused as InitProducerId refuses a transactional id.
        ApiKey::AddOffsetsToTxn => refuse!(AddOffsetsToTxn, AddOffsetsToTxnResponse, txn),
        ApiKey::EndTxn => refuse!(EndTxn, EndTxnResponse, txn),
        ApiKey::AddPartitionsToTxn if version >= 4 => {
            refuse!(AddPartitionsToTxn, AddPartitionsToTxnResponse, txn)
        }
        ApiKey::OffsetDelete => refuse!(OffsetDelete, OffsetDeleteResponse, no),
        ApiKey::ElectLeaders if version >= 1 => refuse!(ElectLeaders, ElectLeadersResponse, no),
        ApiKey::DescribeLogDirs if version >= 3 => {
            refuse!(DescribeLogDirs, DescribeLogDirsResponse, no)
        }
        ApiKey::RenewDelegationToken => {
            refuse!(RenewDelegationToken, RenewDelegationTokenResponse, no)
        }
        ApiKey::ExpireDelegationToken => {
            refuse!(ExpireDelegationToken, ExpireDelegationTokenResponse, no)
        }
        ApiKey::ListTransactions => refuse!(ListTransactions, ListTransactionsResponse, no),
        ApiKey::DescribeQuorum => refuse!(DescribeQuorum, DescribeQuorumResponse, no),
        ApiKey::GetTelemetrySubscriptions => refuse!(
            GetTelemetrySubscriptions,
            GetTelemetrySubscriptionsResponse,
            no
        ),
        ApiKey::PushTelemetry => refuse!(PushTelemetry, PushTelemetryResponse, no),
        ApiKey::ConsumerGroupHeartbeat => {
            refuse!(ConsumerGroupHeartbeat, ConsumerGroupHeartbeatResponse, no)
        }
        ApiKey::ShareGroupHeartbeat => {
            refuse!(ShareGroupHeartbeat, ShareGroupHeartbeatResponse, no)
        }
        ApiKey::ListPartitionReassignments => refuse!(
            ListPartitionReassignments,
            ListPartitionReassignmentsResponse,
            no
        ),
        ApiKey::AlterPartitionReassignments => refuse!(
            AlterPartitionReassignments,
            AlterPartitionReassignmentsResponse,
            no
        ),
        ApiKey::DescribeClientQuotas => {
            refuse!(DescribeClientQuotas, DescribeClientQuotasResponse, no)
        }
        ApiKey::CreateDelegationToken => {
            refuse!(CreateDelegationToken, CreateDelegationTokenResponse, no)
        }
        ApiKey::DescribeDelegationToken => {
            refuse!(DescribeDelegationToken, DescribeDelegationTokenResponse, no)
        }
        ApiKey::Fetch if version >= 7 => refuse!(Fetch, FetchResponse, no),
        _ => return None,
    })
}

/// The answer to an admin request replog does not serve but whose answer names each item
/// (a topic, a resource, a partition) and has no error of its own: every item is answered
/// `UNSUPPORTED_VERSION` with the reason, so the client reports it instead of losing its
/// connection. `None` for any other request.
pub(super) fn refuse_items(request: RequestKind) -> Option<ResponseKind> {
    use RequestKind as R;
    match request {
        R::DeleteGroups(_) => refuse_group_deletion(request),
        R::TxnOffsetCommit(_) | R::DescribeProducers(_) | R::DescribeTransactions(_) => {
            refuse_transactions(request)
        }
        _ => None,
    }
}

/// [`refuse_items`] for groups' deletion; `None` for any other.
fn refuse_group_deletion(request: RequestKind) -> Option<ResponseKind> {
    use kafka_protocol::messages as m;
    let RequestKind::DeleteGroups(r) = request else {
        return None;
    };
    let mut out = m::DeleteGroupsResponse::default();
    for g in r.groups_names {
        let mut res = m::delete_groups_response::DeletableGroupResult::default();
        res.group_id = g;
        res.error_code = code::UNSUPPORTED_VERSION;
        out.results.push(res);
    }
    Some(ResponseKind::DeleteGroups(out))
}

/// [`refuse_items`] for transactions and producers; `None` for any other.
fn refuse_transactions(request: RequestKind) -> Option<ResponseKind> {
    use kafka_protocol::messages as m;
    let no = code::UNSUPPORTED_VERSION;
    Some(match request {
        RequestKind::TxnOffsetCommit(r) => {
            let mut out = m::TxnOffsetCommitResponse::default();
            for topic in r.topics {
                let mut t = m::txn_offset_commit_response::TxnOffsetCommitResponseTopic::default();
                t.name = topic.name;
                for p in topic.partitions {
                    let mut res =
                        m::txn_offset_commit_response::TxnOffsetCommitResponsePartition::default();
                    res.partition_index = p.partition_index;
                    res.error_code = code::TRANSACTIONAL_ID_AUTHORIZATION_FAILED;
                    t.partitions.push(res);
                }
                out.topics.push(t);
            }
            ResponseKind::TxnOffsetCommit(out)
        }
        RequestKind::DescribeProducers(r) => {
            let mut out = m::DescribeProducersResponse::default();
            for topic in r.topics {
                let mut t = m::describe_producers_response::TopicResponse::default();
                t.name = topic.name;
                for index in topic.partition_indexes {
                    let mut res = m::describe_producers_response::PartitionResponse::default();
                    res.partition_index = index;
                    res.error_code = no;
                    res.error_message = message("replog does not describe producers");
                    t.partitions.push(res);
                }
                out.topics.push(t);
            }
            ResponseKind::DescribeProducers(out)
        }
        RequestKind::DescribeTransactions(r) => {
            let mut out = m::DescribeTransactionsResponse::default();
            for id in r.transactional_ids {
                let mut res = m::describe_transactions_response::TransactionState::default();
                res.transactional_id = id;
                res.error_code = TRANSACTIONAL_ID_NOT_FOUND;
                out.transaction_states.push(res);
            }
            ResponseKind::DescribeTransactions(out)
        }
        _ => return None,
    })
}

/// Kafka's answer for a transactional id it has no transaction of.
const TRANSACTIONAL_ID_NOT_FOUND: i16 = 105;

/// The APIs [`refuse_items`] answers.
pub(super) fn refused_per_item(api: kafka_protocol::messages::ApiKey) -> bool {
    use kafka_protocol::messages::ApiKey as K;
    matches!(
        api,
        K::DeleteGroups | K::TxnOffsetCommit | K::DescribeProducers | K::DescribeTransactions
    )
}
