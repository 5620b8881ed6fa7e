//! Kafka's DeleteGroups (versions 0 to 2) over the broker's coordinator: each group deleted
//! with its committed offsets, or answered why not (NON_EMPTY_GROUP while it has members,
//! GROUP_ID_NOT_FOUND, NOT_COORDINATOR, GROUP_AUTHORIZATION_FAILED without DELETE on it), in
//! the order asked.

use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::{DeleteGroupsRequest, DeleteGroupsResponse};

use crate::node::service::BrokerService;

/// The versions served.
pub(crate) const APIS: &[super::Served] = &[(kafka_protocol::messages::ApiKey::DeleteGroups, 0, 2)];

pub(crate) async fn delete_groups(
    request: DeleteGroupsRequest,
    service: &BrokerService,
) -> DeleteGroupsResponse {
    let mut r = DeleteGroupsResponse::default();
    for group in request.groups_names {
        let mut result = DeletableGroupResult::default();
        if let Err(e) = service.delete_group(&group.0).await {
            result.error_code = e.code();
        }
        result.group_id = group;
        r.results.push(result);
    }
    r
}
