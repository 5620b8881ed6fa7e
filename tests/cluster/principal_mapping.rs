//! Kafka's `ssl.principal.mapping.rules` (`NodeConfig::ssl_principal_mapping_rules`): a
//! client certificate's subject names its principal by the first rule that applies, on both
//! doors; a certificate no rule applies to is refused.

use std::path::Path;
use std::time::Duration;

use replog::{Client, ClientConfig, DevCertificates, Error, Record};

/// Writes `<name>.pem` and `<name>.key` into `certs`: a client certificate whose subject is
/// `subject` (most general first), signed by the dev CA there (`replog dev CA`, its key in
/// `ca.key`).
fn client_certificate(certs: &Path, name: &str, subject: &[(rcgen::DnType, &str)]) {
    use rcgen::{CertificateParams, DistinguishedName, DnType, KeyPair};
    let ca_key = std::fs::read_to_string(certs.join("ca.key")).unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.distinguished_name = DistinguishedName::new();
    ca.distinguished_name
        .push(DnType::CommonName, "replog dev CA");
    let issuer = rcgen::Issuer::new(ca, KeyPair::from_pem(&ca_key).unwrap());
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name = DistinguishedName::new();
    for (kind, value) in subject {
        params.distinguished_name.push(kind.clone(), *value);
    }
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let key = KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, &issuer).unwrap();
    std::fs::write(certs.join(format!("{name}.pem")), cert.pem()).unwrap();
    std::fs::write(certs.join(format!("{name}.key")), key.serialize_pem()).unwrap();
}

/// A native client presenting the certificate `name` of `certs`.
fn presenting(certs: &Path, name: &str) -> ClientConfig {
    let mut config = ClientConfig::default();
    config.tls_ca = Some(certs.join("ca.pem"));
    config.tls_cert = Some(certs.join(format!("{name}.pem")));
    config.tls_key = Some(certs.join(format!("{name}.key")));
    config.delivery_timeout = Duration::from_secs(10);
    config
}

/// Brokers taking client certificates as identities, with the rule
/// `RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L` and `User:alice` a super user: Alice's
/// certificate (`CN=Alice,OU=ServiceUsers,O=Acme`) is `User:alice` and writes, on the native
/// door and through kcat; the dev client certificate (`CN=client`), to which no rule
/// applies, is refused on both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificates_subject_names_its_principal_by_the_first_rule_that_applies() {
    use rcgen::DnType;
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    DevCertificates::generate(&[1, 2, 3], &["127.0.0.1".to_string()])
        .unwrap()
        .write_to(&certs)
        .unwrap();
    let alice = [
        (DnType::OrganizationName, "Acme"),
        (DnType::OrganizationalUnitName, "ServiceUsers"),
        (DnType::CommonName, "Alice"),
    ];
    client_certificate(&certs, "alice", &alice);
    let rules: replog::PrincipalMappingRules =
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L".parse().unwrap();
    let at = certs.clone();
    let cluster = crate::local_cluster(3, dir.path(), "email.send", 1, move |c| {
        c.tls = Some(crate::native_tls::native_tls(&at, c.id));
        c.client_auth = replog::ClientAuth::Required;
        c.ssl_principal_mapping_rules = Some(rules.clone());
        c.authorization = Some(replog::acl::AuthorizerPolicy {
            super_users: vec!["User:alice".into()],
            ..Default::default()
        });
        c.kafka_listen = Some(std::net::SocketAddr::from(([127, 0, 0, 1], 0)));
        c.kafka_security_protocol = replog::KafkaSecurityProtocol::Ssl;
    })
    .await;
    let addrs = cluster.addrs();
    let as_alice =
        crate::support::connect(&addrs, presenting(&certs, "alice"), Duration::from_secs(20)).await;
    as_alice
        .send("email.send", 0, &[Record::new("as-alice")])
        .await
        .unwrap();
    match Client::connect(&addrs, presenting(&certs, "client")).await {
        Err(Error::AuthenticationFailed(why)) => assert!(
            why.contains("no principal mapping rule applies") && why.contains("\"CN=client\""),
            "{why}"
        ),
        other => panic!("a certificate no rule applies to: {other:?}"),
    }

    if crate::kafka::kcat().is_none() {
        return;
    }
    let kafka = cluster.node(1).and_then(|n| n.kafka_addr()).unwrap();
    let produce = |name: &str| {
        let file = |ext: &str| certs.join(format!("{name}.{ext}")).display().to_string();
        let mut args: Vec<String> = [
            "-P",
            "-b",
            &kafka.to_string(),
            "-t",
            "email.send",
            "-p",
            "0",
        ]
        .map(String::from)
        .to_vec();
        for setting in [
            "security.protocol=SSL".to_string(),
            format!("ssl.ca.location={}", certs.join("ca.pem").display()),
            format!("ssl.certificate.location={}", file("pem")),
            format!("ssl.key.location={}", file("key")),
            "message.timeout.ms=5000".to_string(),
        ] {
            args.extend(["-X".to_string(), setting]);
        }
        args
    };
    let (ok, out, err) = crate::kafka_sasl::kcat_with(produce("alice"), "kcat-as-alice\n").await;
    assert!(ok, "{out}{err}");
    let (ok, out, err) = crate::kafka_sasl::kcat_with(produce("client"), "refused\n").await;
    assert!(!ok, "a certificate no rule applies to wrote: {out}{err}");
    drop(as_alice);
    cluster.shutdown().await.unwrap();
}
