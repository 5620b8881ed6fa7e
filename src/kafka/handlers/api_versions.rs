//! Kafka's ApiVersions (versions 0 to 3): the APIs the handlers serve and their versions.

use kafka_protocol::messages::ApiVersionsResponse;
use kafka_protocol::messages::api_versions_response::ApiVersion;

use super::{Served, served};

/// The versions served.
pub(crate) const APIS: &[Served] = &[(kafka_protocol::messages::ApiKey::ApiVersions, 0, 3)];

/// Every API served, with its versions.
pub(crate) fn api_versions() -> ApiVersionsResponse {
    let mut r = ApiVersionsResponse::default();
    r.api_keys = served()
        .map(|(k, min, max)| {
            let mut v = ApiVersion::default();
            v.api_key = k as i16;
            v.min_version = min;
            v.max_version = max;
            v
        })
        .collect();
    r
}
