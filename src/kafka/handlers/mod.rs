//! The Kafka APIs served, a file per API or family of APIs. Each file declares the APIs it
//! serves and their versions (`APIS`), maps Kafka's request to the broker service's, and maps
//! the answer back, nothing more: ApiVersions and the decoder's refusals come from these
//! declarations.
//!
//! Every API declared here has golden tests in `tests/kafka_golden/` (a family's file there
//! per file here): its answers at its oldest and newest version, compared byte for byte with
//! the response Kafka gives. An API declared without them fails
//! `every_served_api_has_a_golden_case_at_its_oldest_and_newest_version`.

pub(super) mod acls;
pub(super) mod admin;
pub(super) mod api_versions;
pub(super) mod configs;
pub(super) mod delete_groups;
pub(super) mod fetch;
pub(super) mod groups;
pub(super) mod leaders;
pub(super) mod metadata;
pub(super) mod offset_delete;
pub(super) mod offsets;
pub(super) mod produce;
pub(super) mod producer_ids;
pub(super) mod reassignments;
pub(super) mod records;
pub(super) mod sasl;
pub(super) mod users;

use kafka_protocol::messages::ApiKey;

/// An API served, from its oldest to its newest version served.
pub(crate) type Served = (ApiKey, i16, i16);

/// Every API served, with its versions, from each handler's declaration.
pub(crate) fn served() -> impl Iterator<Item = Served> {
    [
        produce::APIS,
        fetch::APIS,
        offsets::APIS,
        metadata::APIS,
        api_versions::APIS,
        groups::APIS,
        producer_ids::APIS,
        admin::APIS,
        configs::APIS,
        records::APIS,
        leaders::APIS,
        reassignments::APIS,
        sasl::APIS,
        acls::APIS,
        users::APIS,
        delete_groups::APIS,
        offset_delete::APIS,
    ]
    .into_iter()
    .flatten()
    .copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The thirty-six APIs served, each once.
    #[test]
    fn every_api_is_declared_by_one_handler() {
        let keys: std::collections::BTreeSet<i16> = served().map(|(k, _, _)| k as i16).collect();
        assert_eq!(keys.len(), served().count(), "an API declared twice");
        assert_eq!(keys.len(), 36);
        assert!(served().all(|(_, min, max)| min <= max));
    }
}
