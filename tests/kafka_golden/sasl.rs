//! SaslHandshake (1) and SaslAuthenticate (0 to 2): on a listener that asks for no
//! authentication, `ILLEGAL_SASL_STATE` (as Kafka answers there); on a `SASL_PLAINTEXT`
//! listener, the whole exchange before anything else (SCRAM's two messages, PLAIN's one),
//! Kafka's refusals (33 for a mechanism not offered, 58 for wrong credentials, then the
//! connection closed), and nothing served before it.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use bytes::Bytes;
use hmac::{Hmac, Mac};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, MetadataRequest, MetadataResponse, SaslAuthenticateRequest,
    SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse,
};
use sha2::{Digest, Sha256, Sha512};

use replog::{KafkaSecurityProtocol, SaslMechanism, ScramCredential, ScramMechanism};

use crate::{Broker, Golden, WAIT, s, versions};

pub(crate) const GOLDEN: Golden = &[
    (ApiKey::SaslHandshake, &[0, 1]),
    (ApiKey::SaslAuthenticate, &[0, 2]),
];

const USER: &str = "alice";
const PASSWORD: &str = "wonderland";

/// A broker whose Kafka listener asks for SASL (SCRAM-SHA-512, SCRAM-SHA-256 and PLAIN),
/// with user [`USER`] bootstrapped, once that user can log in.
async fn sasl_broker() -> Broker {
    sasl_broker_with(|_| {}).await
}

/// [`sasl_broker`], configured further by `more`.
async fn sasl_broker_with(more: impl Fn(&mut replog::NodeConfig) + Send + 'static) -> Broker {
    let mut broker = Broker::start_configured(1, move |c| {
        c.kafka_security_protocol = KafkaSecurityProtocol::SaslPlaintext;
        c.sasl_mechanisms = vec![
            SaslMechanism::Scram(ScramMechanism::Sha512),
            SaslMechanism::Scram(ScramMechanism::Sha256),
            SaslMechanism::Plain,
        ];
        c.sasl_plain_without_tls = true;
        c.bootstrap_users = ScramMechanism::ALL
            .into_iter()
            .map(|m| {
                let credential = ScramCredential::new(m, PASSWORD, 4096).unwrap();
                (USER.to_string(), credential)
            })
            .collect();
        more(c);
    })
    .await;
    // The bootstrap users are written to the metadata log shortly after the start: a PLAIN
    // login, each on a new connection, until one goes through.
    crate::support::wait_until(WAIT, "the bootstrap user to log in", async || {
        broker.connect_to(1).await;
        plain_login(&mut broker, 2).await.error_code == 0
    })
    .await;
    broker.connect_to(1).await;
    broker
}

/// A handshake for PLAIN, then PLAIN's one message with the right password, at
/// SaslAuthenticate `version`.
async fn plain_login(broker: &mut Broker, version: i16) -> SaslAuthenticateResponse {
    let handshake = SaslHandshakeRequest::default().with_mechanism(s("PLAIN"));
    let answer = broker.exchange(ApiKey::SaslHandshake, 1, &handshake).await;
    let _: SaslHandshakeResponse = broker.decode(ApiKey::SaslHandshake, 1, &answer);
    let message = format!("\0{USER}\0{PASSWORD}");
    let request = SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(message));
    match broker
        .exchange_unanswered(ApiKey::SaslAuthenticate, version, &request)
        .await
    {
        Some(answer) => broker.decode(ApiKey::SaslAuthenticate, version, &answer),
        None => SaslAuthenticateResponse::default().with_error_code(-1),
    }
}

/// The mechanisms the SASL broker offers, as its handshake answers list them.
fn offered() -> Vec<kafka_protocol::protocol::StrBytes> {
    ["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"]
        .into_iter()
        .map(s)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sasl_requests_on_a_listener_without_authentication_are_out_of_place() {
    let mut broker = Broker::start().await;
    for &v in versions(GOLDEN, ApiKey::SaslHandshake) {
        let request = SaslHandshakeRequest::default().with_mechanism(s("SCRAM-SHA-512"));
        let answer = broker.exchange(ApiKey::SaslHandshake, v, &request).await;
        let expected = SaslHandshakeResponse::default().with_error_code(34);
        broker.assert_answer(ApiKey::SaslHandshake, v, &answer, &expected);
    }
    for &v in versions(GOLDEN, ApiKey::SaslAuthenticate) {
        let request = SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from("n,,n=a,r=b"));
        let answer = broker.exchange(ApiKey::SaslAuthenticate, v, &request).await;
        let expected = SaslAuthenticateResponse::default().with_error_code(34);
        broker.assert_answer(ApiKey::SaslAuthenticate, v, &answer, &expected);
    }
    broker.shutdown().await;
}

/// SCRAM's client side, from RFC 5802: (client-final, the server-final expected).
fn scram_client_final(
    mechanism: ScramMechanism,
    client_first_bare: &str,
    server_first: &str,
) -> (String, String) {
    fn hmac<M: Mac + hmac::digest::KeyInit>(key: &[u8], data: &[u8]) -> Vec<u8> {
        let mut m = <M as hmac::digest::KeyInit>::new_from_slice(key).unwrap();
        m.update(data);
        m.finalize().into_bytes().to_vec()
    }
    let attr = |key: &str| {
        server_first
            .split(',')
            .find_map(|a| a.strip_prefix(key))
            .unwrap()
    };
    let salt = BASE64.decode(attr("s=")).unwrap();
    let iterations: u32 = attr("i=").parse().unwrap();
    let without_proof = format!("c=biws,r={}", attr("r="));
    let auth = format!("{client_first_bare},{server_first},{without_proof}");
    let (client_key, signature, server_signature) = match mechanism {
        ScramMechanism::Sha256 => {
            let mut salted = [0u8; 32];
            pbkdf2::pbkdf2::<Hmac<Sha256>>(PASSWORD.as_bytes(), &salt, iterations, &mut salted)
                .unwrap();
            let client_key = hmac::<Hmac<Sha256>>(&salted, b"Client Key");
            let stored = Sha256::digest(&client_key).to_vec();
            let server_key = hmac::<Hmac<Sha256>>(&salted, b"Server Key");
            (
                client_key,
                hmac::<Hmac<Sha256>>(&stored, auth.as_bytes()),
                hmac::<Hmac<Sha256>>(&server_key, auth.as_bytes()),
            )
        }
        _ => {
            let mut salted = [0u8; 64];
            pbkdf2::pbkdf2::<Hmac<Sha512>>(PASSWORD.as_bytes(), &salt, iterations, &mut salted)
                .unwrap();
            let client_key = hmac::<Hmac<Sha512>>(&salted, b"Client Key");
            let stored = Sha512::digest(&client_key).to_vec();
            let server_key = hmac::<Hmac<Sha512>>(&salted, b"Server Key");
            (
                client_key,
                hmac::<Hmac<Sha512>>(&stored, auth.as_bytes()),
                hmac::<Hmac<Sha512>>(&server_key, auth.as_bytes()),
            )
        }
    };
    let proof: Vec<u8> = client_key
        .iter()
        .zip(&signature)
        .map(|(a, b)| a ^ b)
        .collect();
    (
        format!("{without_proof},p={}", BASE64.encode(proof)),
        format!("v={}", BASE64.encode(server_signature)),
    )
}

/// A whole SCRAM exchange per mechanism and SaslAuthenticate version, byte for byte (the
/// server's nonce and the user's salt vary: taken from the server's first answer, which must
/// extend the client's nonce), then a request served on the authenticated connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scram_login_is_answered_as_kafka_answers_it_then_requests_are_served() {
    let mut broker = sasl_broker().await;
    for mechanism in ScramMechanism::ALL {
        for &v in versions(GOLDEN, ApiKey::SaslAuthenticate) {
            broker.connect_to(1).await;
            // ApiVersions before the handshake is answered.
            let answer = broker
                .exchange(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default())
                .await;
            let _: kafka_protocol::messages::ApiVersionsResponse =
                broker.decode(ApiKey::ApiVersions, 3, &answer);
            let request = SaslHandshakeRequest::default().with_mechanism(s(mechanism.name()));
            let answer = broker.exchange(ApiKey::SaslHandshake, 1, &request).await;
            let expected = SaslHandshakeResponse::default().with_mechanisms(offered());
            broker.assert_answer(ApiKey::SaslHandshake, 1, &answer, &expected);

            let bare = "n=alice,r=goldennonce";
            let first = SaslAuthenticateRequest::default()
                .with_auth_bytes(Bytes::from(format!("n,,{bare}")));
            let answer = broker.exchange(ApiKey::SaslAuthenticate, v, &first).await;
            let r: SaslAuthenticateResponse = broker.decode(ApiKey::SaslAuthenticate, v, &answer);
            let server_first = String::from_utf8(r.auth_bytes.to_vec()).unwrap();
            assert!(server_first.starts_with("r=goldennonce"), "{server_first}");
            assert!(server_first.ends_with(",i=4096"), "{server_first}");
            let expected = SaslAuthenticateResponse::default().with_auth_bytes(r.auth_bytes);
            broker.assert_answer(ApiKey::SaslAuthenticate, v, &answer, &expected);

            let (last, server_final) = scram_client_final(mechanism, bare, &server_first);
            let request = SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(last));
            let answer = broker.exchange(ApiKey::SaslAuthenticate, v, &request).await;
            let expected =
                SaslAuthenticateResponse::default().with_auth_bytes(Bytes::from(server_final));
            broker.assert_answer(ApiKey::SaslAuthenticate, v, &answer, &expected);

            let answer = broker
                .exchange(ApiKey::Metadata, 12, &MetadataRequest::default())
                .await;
            let meta: MetadataResponse = broker.decode(ApiKey::Metadata, 12, &answer);
            assert_eq!(meta.brokers.len(), 1, "served once authenticated");
            // A second handshake on an authenticated connection is out of place.
            let again = SaslHandshakeRequest::default().with_mechanism(s(mechanism.name()));
            let answer = broker.exchange(ApiKey::SaslHandshake, 1, &again).await;
            let expected = SaslHandshakeResponse::default().with_error_code(34);
            broker.assert_answer(ApiKey::SaslHandshake, 1, &answer, &expected);
        }
    }
    broker.shutdown().await;
}

/// A wrong password and an unknown user get the same answer (58, one message), and the
/// connection is closed; PLAIN logs in at both versions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_credentials_are_refused_alike_and_the_connection_closed() {
    let mut broker = sasl_broker().await;
    for &v in versions(GOLDEN, ApiKey::SaslAuthenticate) {
        for message in [format!("\0{USER}\0nope"), "\0mallory\0nope".to_string()] {
            broker.connect_to(1).await;
            let handshake = SaslHandshakeRequest::default().with_mechanism(s("PLAIN"));
            broker.exchange(ApiKey::SaslHandshake, 1, &handshake).await;
            let request = SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(message));
            let answer = broker.exchange(ApiKey::SaslAuthenticate, v, &request).await;
            let expected = SaslAuthenticateResponse::default()
                .with_error_code(58)
                .with_error_message(Some(s(
                    "Authentication failed during authentication due to invalid credentials \
                     with SASL mechanism PLAIN",
                )));
            broker.assert_answer(ApiKey::SaslAuthenticate, v, &answer, &expected);
            let after = broker
                .exchange_unanswered(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default())
                .await;
            assert!(after.is_none(), "closed after a failed login");
        }
        broker.connect_to(1).await;
        let ok = plain_login(&mut broker, v).await;
        assert_eq!(ok, SaslAuthenticateResponse::default(), "PLAIN v{v}");
    }
    broker.shutdown().await;
}

/// Before authentication: a mechanism not offered is answered 33 with the list, then the
/// connection closed; any request but ApiVersions and the handshake closes it unanswered,
/// and so does a SaslAuthenticate before the handshake.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_is_served_before_authentication() {
    let mut broker = sasl_broker().await;
    let request = SaslHandshakeRequest::default().with_mechanism(s("GSSAPI"));
    let answer = broker.exchange(ApiKey::SaslHandshake, 1, &request).await;
    let expected = SaslHandshakeResponse::default()
        .with_error_code(33)
        .with_mechanisms(offered());
    broker.assert_answer(ApiKey::SaslHandshake, 1, &answer, &expected);
    let after = broker
        .exchange_unanswered(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default())
        .await;
    assert!(after.is_none(), "closed after an unknown mechanism");

    broker.connect_to(1).await;
    let metadata = broker
        .exchange_unanswered(ApiKey::Metadata, 12, &MetadataRequest::default())
        .await;
    assert!(metadata.is_none(), "no metadata before authentication");

    broker.connect_to(1).await;
    let early = SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from("\0a\0b"));
    let answer = broker
        .exchange_unanswered(ApiKey::SaslAuthenticate, 2, &early)
        .await;
    assert!(
        answer.is_none(),
        "a SaslAuthenticate before the handshake closes"
    );
    broker.shutdown().await;
}

/// A Produce between SCRAM's two messages is answered `ILLEGAL_SASL_STATE` on each of its
/// partitions, as Kafka answers it, and the connection is closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_produce_between_the_scram_messages_is_an_illegal_state() {
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use kafka_protocol::messages::produce_response::{
        PartitionProduceResponse, TopicProduceResponse,
    };
    use kafka_protocol::messages::{ProduceRequest, ProduceResponse, TopicName};
    let mut broker = sasl_broker().await;
    let handshake = SaslHandshakeRequest::default().with_mechanism(s("SCRAM-SHA-256"));
    broker.exchange(ApiKey::SaslHandshake, 1, &handshake).await;
    let first =
        SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from("n,,n=alice,r=goldennonce"));
    broker.exchange(ApiKey::SaslAuthenticate, 2, &first).await;
    let topic = || TopicName(s("email.send"));
    let produce = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(1000)
        .with_topic_data(vec![
            TopicProduceData::default()
                .with_name(topic())
                .with_partition_data(vec![PartitionProduceData::default().with_index(0)]),
        ]);
    let answer = broker.exchange(ApiKey::Produce, 9, &produce).await;
    let expected = ProduceResponse::default().with_responses(vec![
        TopicProduceResponse::default()
            .with_name(topic())
            .with_partition_responses(vec![
                PartitionProduceResponse::default()
                    .with_index(0)
                    .with_error_code(34),
            ]),
    ]);
    broker.assert_answer(ApiKey::Produce, 9, &answer, &expected);
    let after = broker
        .exchange_unanswered(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default())
        .await;
    assert!(after.is_none(), "closed after a request out of turn");
    broker.shutdown().await;
}

/// With sessions limited (KIP-368), SaslAuthenticate v1+ tells a client its session's
/// lifetime; the client re-authenticates on its connection (the same mechanism, the same
/// user) and is served on; another mechanism is refused and the connection closed; a session
/// not renewed ends at the first request after it expired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limited_session_is_renewed_on_its_connection_or_ends() {
    let lifetime = std::time::Duration::from_millis(1500);
    let mut broker = sasl_broker_with(move |c| c.sasl_session_lifetime = Some(lifetime)).await;
    let told = plain_login(&mut broker, 2).await;
    assert_eq!(told.error_code, 0);
    assert_eq!(told.session_lifetime_ms, 1500);
    // Renewed on the same connection, twice, and served in between.
    for _ in 0..2 {
        let renewed = plain_login(&mut broker, 1).await;
        assert_eq!(
            renewed,
            SaslAuthenticateResponse::default().with_session_lifetime_ms(1500)
        );
        let answer = broker
            .exchange(ApiKey::Metadata, 12, &MetadataRequest::default())
            .await;
        let meta: MetadataResponse = broker.decode(ApiKey::Metadata, 12, &answer);
        assert_eq!(meta.brokers.len(), 1);
    }
    // Another mechanism than the session's: refused, and the connection closed.
    let other = SaslHandshakeRequest::default().with_mechanism(s("SCRAM-SHA-256"));
    let answer = broker.exchange(ApiKey::SaslHandshake, 1, &other).await;
    let expected = SaslHandshakeResponse::default().with_error_code(34);
    broker.assert_answer(ApiKey::SaslHandshake, 1, &answer, &expected);
    let after = broker
        .exchange_unanswered(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default())
        .await;
    assert!(after.is_none(), "closed after a refused re-authentication");

    // A session not renewed: requests are served until it expires, then the connection ends.
    broker.connect_to(1).await;
    plain_login(&mut broker, 2).await;
    crate::support::wait_until(WAIT, "the session to expire", async || {
        broker
            .exchange_unanswered(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default())
            .await
            .is_none()
    })
    .await;
    broker.shutdown().await;
}

/// After SaslHandshake v0 the mechanism's messages come as raw tokens (a big-endian length and
/// the bytes, each way): PLAIN's one, answered with an empty token; then requests are served.
/// A wrong password closes the connection unanswered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_version_0_handshake_the_messages_are_raw_tokens() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut broker = sasl_broker().await;
    for (password, accepted) in [("nope", false), (PASSWORD, true)] {
        broker.connect_to(1).await;
        let handshake = SaslHandshakeRequest::default().with_mechanism(s("PLAIN"));
        let answer = broker.exchange(ApiKey::SaslHandshake, 0, &handshake).await;
        let expected = SaslHandshakeResponse::default().with_mechanisms(offered());
        broker.assert_answer(ApiKey::SaslHandshake, 0, &answer, &expected);
        let token = format!("\0{USER}\0{password}");
        let conn = broker.conn_mut();
        let framed = [&(token.len() as u32).to_be_bytes()[..], token.as_bytes()].concat();
        conn.write_all(&framed).await.unwrap();
        let mut reply = [0u8; 4];
        let read = tokio::time::timeout(WAIT, conn.read_exact(&mut reply))
            .await
            .expect("an answer or a close in time");
        if accepted {
            read.unwrap();
            assert_eq!(reply, [0, 0, 0, 0], "an empty token");
            let answer = broker
                .exchange(ApiKey::Metadata, 12, &MetadataRequest::default())
                .await;
            let meta: MetadataResponse = broker.decode(ApiKey::Metadata, 12, &answer);
            assert_eq!(meta.brokers.len(), 1, "served once authenticated");
        } else {
            assert!(read.is_err(), "closed unanswered: {reply:?}");
        }
    }
    broker.shutdown().await;
}

/// A client that asks for a newer ApiVersions first (kafka-python 3 asks for v4) is answered
/// at version 0 with the ranges, and goes on to authenticate on the same connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_api_versions_before_authentication_keeps_the_connection() {
    let mut broker = sasl_broker().await;
    let answer = broker
        .exchange(ApiKey::ApiVersions, 4, &ApiVersionsRequest::default())
        .await;
    let refused: kafka_protocol::messages::ApiVersionsResponse =
        broker.decode(ApiKey::ApiVersions, 0, &answer);
    assert_eq!(refused.error_code, 35);
    assert_eq!(
        plain_login(&mut broker, 2).await,
        SaslAuthenticateResponse::default()
    );
    broker.shutdown().await;
}
