//! Kafka's InitProducerId (versions 0 to 4) over the broker service's producer ids.

use kafka_protocol::messages::{ApiKey, InitProducerIdRequest, InitProducerIdResponse};

use super::Served;
use crate::kafka::code;
use crate::node::service::BrokerService;

/// The versions served.
pub(crate) const APIS: &[Served] = &[(ApiKey::InitProducerId, 0, 4)];

/// InitProducerId for an idempotent producer (no transactions): a producer id from the
/// cluster at epoch 0 (the service's rules).
pub(crate) async fn init_producer_id(
    request: &InitProducerIdRequest,
    service: &BrokerService,
) -> InitProducerIdResponse {
    use kafka_protocol::messages::ProducerId;
    let mut r = InitProducerIdResponse::default();
    r.producer_id = ProducerId(-1);
    r.producer_epoch = -1;
    if request.transactional_id.is_some() {
        r.error_code = code::TRANSACTIONAL_ID_AUTHORIZATION_FAILED;
        return r;
    }
    match service.init_producer_id().await {
        Ok((id, epoch)) => {
            r.producer_id = ProducerId(i64::try_from(id).unwrap_or(-1));
            r.producer_epoch = i16::try_from(epoch).unwrap_or(-1);
        }
        Err(e @ crate::Error::ClusterAuthorizationFailed) => {
            tracing::debug!(error = %e, "no producer id");
            r.error_code = code::CLUSTER_AUTHORIZATION_FAILED;
        }
        // No id could be had in time (the metadata Raft group has no reachable leader): Kafka's
        // answer when its producer id manager cannot hand one out, which clients retry.
        Err(e) => {
            tracing::debug!(error = %e, "no producer id");
            r.error_code = code::COORDINATOR_NOT_AVAILABLE;
        }
    }
    r
}
