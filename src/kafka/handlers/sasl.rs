//! Kafka's SaslHandshake (versions 0 and 1) and SaslAuthenticate (versions 0 to 2) once a connection
//! is past authentication, or on a listener that asks for none: `ILLEGAL_SASL_STATE`, as Kafka
//! answers them there. The exchange itself runs before any other request is served
//! (`kafka/sasl.rs`).

use kafka_protocol::messages::{
    ApiKey, ResponseKind, SaslAuthenticateResponse, SaslHandshakeResponse,
};

use super::Served;
use crate::kafka::code;

/// The versions served (after SaslHandshake v0, the mechanism's messages come as raw tokens,
/// outside Kafka's framing; librdkafka looks for v0 in ApiVersions before it uses SASL at all).
pub(crate) const APIS: &[Served] = &[
    (ApiKey::SaslHandshake, 0, 1),
    (ApiKey::SaslAuthenticate, 0, 2),
];

/// A SASL request out of its place: `ILLEGAL_SASL_STATE`.
pub(crate) fn out_of_place(api: ApiKey) -> Option<ResponseKind> {
    match api {
        ApiKey::SaslHandshake => {
            let mut r = SaslHandshakeResponse::default();
            r.error_code = code::ILLEGAL_SASL_STATE;
            Some(ResponseKind::SaslHandshake(r))
        }
        ApiKey::SaslAuthenticate => {
            let mut r = SaslAuthenticateResponse::default();
            r.error_code = code::ILLEGAL_SASL_STATE;
            Some(ResponseKind::SaslAuthenticate(r))
        }
        _ => None,
    }
}
