use crate::Golden;
use kafka_protocol::messages::ApiKey;
pub(crate) const GOLDEN: Golden = &[(ApiKey::Produce, &[])];
