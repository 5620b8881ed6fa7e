//! ApiVersions (0 to 3): the APIs served with their ranges; a newer ApiVersions answered
//! as Kafka answers it (version 0, UNSUPPORTED_VERSION, the ranges).

use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, ApiVersionsResponse};

use crate::{Broker, Golden, s, versions};

pub(crate) const GOLDEN: Golden = &[(ApiKey::ApiVersions, &[0, 3])];

/// The APIs served and their versions, in the order the broker lists them (its handlers'
/// order): the table a Kafka client picks its versions from.
const SERVED: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Produce, 3, 11),
    (ApiKey::Fetch, 4, 12),
    (ApiKey::ListOffsets, 1, 7),
    (ApiKey::OffsetForLeaderEpoch, 2, 4),
    (ApiKey::Metadata, 1, 12),
    (ApiKey::ApiVersions, 0, 3),
    (ApiKey::FindCoordinator, 0, 3),
    (ApiKey::JoinGroup, 0, 7),
    (ApiKey::SyncGroup, 0, 5),
    (ApiKey::Heartbeat, 0, 4),
    (ApiKey::LeaveGroup, 0, 4),
    (ApiKey::OffsetCommit, 2, 8),
    (ApiKey::OffsetFetch, 1, 7),
    (ApiKey::ListGroups, 0, 4),
    (ApiKey::DescribeGroups, 0, 5),
    (ApiKey::InitProducerId, 0, 4),
    (ApiKey::CreateTopics, 2, 7),
    (ApiKey::DeleteTopics, 1, 6),
    (ApiKey::CreatePartitions, 0, 3),
    (ApiKey::DescribeCluster, 0, 2),
    (ApiKey::DescribeConfigs, 1, 4),
    (ApiKey::AlterConfigs, 0, 2),
    (ApiKey::IncrementalAlterConfigs, 0, 1),
    (ApiKey::DeleteRecords, 0, 2),
    (ApiKey::ElectLeaders, 0, 2),
    (ApiKey::AlterPartitionReassignments, 0, 1),
    (ApiKey::ListPartitionReassignments, 0, 0),
    (ApiKey::SaslHandshake, 0, 1),
    (ApiKey::SaslAuthenticate, 0, 2),
    (ApiKey::DescribeAcls, 1, 3),
    (ApiKey::CreateAcls, 1, 3),
    (ApiKey::DeleteAcls, 1, 3),
    (ApiKey::DescribeUserScramCredentials, 0, 0),
    (ApiKey::AlterUserScramCredentials, 0, 0),
    (ApiKey::DeleteGroups, 0, 2),
    (ApiKey::OffsetDelete, 0, 0),
];

/// The answer listing [`SERVED`], with `error_code`.
fn served(error_code: i16) -> ApiVersionsResponse {
    let api_keys = SERVED
        .iter()
        .map(|(k, min, max)| {
            ApiVersion::default()
                .with_api_key(*k as i16)
                .with_min_version(*min)
                .with_max_version(*max)
        })
        .collect();
    ApiVersionsResponse::default()
        .with_error_code(error_code)
        .with_api_keys(api_keys)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_versions_lists_every_api_served_with_its_versions() {
    let mut broker = Broker::start().await;
    for &v in versions(GOLDEN, ApiKey::ApiVersions) {
        // From version 3 the client names its software, as librdkafka does.
        let request = ApiVersionsRequest::default()
            .with_client_software_name(s("golden"))
            .with_client_software_version(s("1.0"));
        let answer = broker.exchange(ApiKey::ApiVersions, v, &request).await;
        // No supported or finalized features (replog has no feature flags), no throttle.
        broker.assert_answer(ApiKey::ApiVersions, v, &answer, &served(0));
    }
    broker.shutdown().await;
}

/// An ApiVersions newer than served (4) is answered at version 0 with UNSUPPORTED_VERSION and
/// the ranges, so that the client retries at a version it finds there; the connection stays
/// open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_api_versions_is_answered_at_version_0_with_unsupported_version_and_the_ranges() {
    let mut broker = Broker::start().await;
    let answer = broker
        .exchange(ApiKey::ApiVersions, 4, &ApiVersionsRequest::default())
        .await;
    broker.assert_answer(ApiKey::ApiVersions, 0, &answer, &served(35));
    let answer = broker
        .exchange(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default())
        .await;
    broker.assert_answer(ApiKey::ApiVersions, 3, &answer, &served(0));
    broker.shutdown().await;
}
