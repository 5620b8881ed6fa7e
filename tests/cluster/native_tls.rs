//! TLS on the native door, for clients and peer brokers alike: brokers given the CA that
//! signed their certificates (`TlsConfig::ca_cert`, `replog node --tls-ca`) serve TLS on their
//! native listeners and dial each other over it. Embedded brokers elect leaders and replicate
//! over TLS, a `Client` trusting the CA writes and reads from every broker, and clients that do
//! not speak TLS or trust another CA reach no broker; `replog node` processes do the same with
//! `replog topics`, `produce` and `consume` given `--tls-ca`. With native logins
//! (`native_sasl`), clients log in by SCRAM or PLAIN and act as their user under the ACLs,
//! which `replog users` and `replog acls` manage; a refused login is an authentication
//! failure; the `Producer` and `Consumer` work as such a user; and a broker joins such a
//! cluster by its certificate.

use std::path::Path;
use std::time::Duration;

use replog::{Client, ClientConfig, DevCertificates, Error, Offset, Record};

use crate::support::{cli, wait_until};

/// Broker `id`'s TLS settings from `certs` (written by `DevCertificates::write_to`), with the
/// CA there: TLS on the native listener and to its peers.
pub(crate) fn native_tls(certs: &Path, id: u64) -> replog::TlsConfig {
    let mut tls = DevCertificates::broker_config(certs, id);
    tls.ca_cert = Some(certs.join("ca.pem"));
    tls
}

/// Three `replog node` processes in `dir` with certificates from `replog certs dev` (in
/// `dir/certs`), TLS on their native listeners with the CA, and `extra` flags: the
/// certificates' directory, the brokers' addresses and the brokers.
fn tls_brokers(
    dir: &Path,
    extra: &[&str],
) -> (
    std::path::PathBuf,
    Vec<std::net::SocketAddr>,
    Vec<crate::Broker>,
) {
    let certs = dir.join("certs");
    let out = certs.to_str().unwrap();
    let (ok, _, err) = cli(&["certs", "dev", "--out", out, "--brokers", "1,2,3"], "");
    assert!(ok, "{err}");
    let file = |name: String| certs.join(name).display().to_string();
    let ca = file("ca.pem".into());
    let addrs = crate::process_addrs(3);
    let brokers = (1..=3u64)
        .map(|id| {
            let (cert, key) = (
                file(format!("broker-{id}.pem")),
                file(format!("broker-{id}.key")),
            );
            let mut args = vec!["--tls-cert", &cert, "--tls-key", &key, "--tls-ca", &ca];
            args.extend(extra);
            crate::spawn_broker_with(id, &addrs, dir, true, &args)
        })
        .collect();
    (certs, addrs, brokers)
}

/// A client of `addrs` trusting the CA in `certs`, or none with `None`.
fn client_config(ca: Option<&Path>) -> ClientConfig {
    let mut config = ClientConfig::default();
    config.tls_ca = ca.map(Path::to_path_buf);
    config.delivery_timeout = Duration::from_secs(3);
    config
}

/// The values of `topic`/`partition` from offset 0, fetched by `client` (from `replica` if
/// given); `None` while the fetch fails.
async fn fetched_values(
    client: &Client,
    topic: &str,
    partition: u32,
    replica: Option<std::net::SocketAddr>,
) -> Option<Vec<Vec<u8>>> {
    let replica = replica.map(replog::Address::from);
    let batches = client
        .fetch(topic, partition, Offset(0), 1 << 20, replica)
        .await
        .ok()?;
    let values = batches
        .iter()
        .flat_map(|b| b.records())
        .map(|(_, r)| r.value.to_vec())
        .collect();
    Some(values)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_brokers_replicate_over_tls_and_serve_only_clients_that_trust_their_ca() {
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    let hosts = ["localhost".to_string(), "127.0.0.1".to_string()];
    DevCertificates::generate(&[1, 2, 3], &hosts)
        .unwrap()
        .write_to(&certs)
        .unwrap();
    let at = certs.clone();
    // Leaders are elected over TLS: Raft's votes and appends travel between the brokers so.
    let cluster = crate::local_cluster(3, dir.path(), "email.send", 1, move |c| {
        c.tls = Some(native_tls(&at, c.id));
    })
    .await;
    let addrs = cluster.addrs();
    let ca = certs.join("ca.pem");
    let client =
        crate::support::connect(&addrs, client_config(Some(&ca)), Duration::from_secs(20)).await;
    let sent = client
        .send("email.send", 0, &[Record::new("over-tls")])
        .await
        .unwrap();
    assert_eq!(sent.base_offset, Offset(0));
    for addr in &addrs {
        let what = format!("the record on {addr}");
        wait_until(Duration::from_secs(10), &what, async || {
            let values = fetched_values(&client, "email.send", 0, Some(*addr)).await?;
            (values == [b"over-tls".to_vec()]).then_some(())
        })
        .await;
    }

    // A plaintext client and one trusting another CA reach no broker.
    let other = dir.path().join("other");
    DevCertificates::generate(&[1], &hosts)
        .unwrap()
        .write_to(&other)
        .unwrap();
    for ca in [None, Some(other.join("ca.pem"))] {
        match Client::connect(&addrs, client_config(ca.as_deref())).await {
            Err(Error::NoBrokerReachable { .. }) => {}
            other => panic!("a client trusting {ca:?}: {other:?}"),
        }
    }
    drop(client);
    cluster.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_reaches_broker_processes_over_tls_with_tls_ca() {
    let dir = tempfile::tempdir().unwrap();
    let (certs, addrs, brokers) = tls_brokers(dir.path(), &[]);
    let ca = certs.join("ca.pem").display().to_string();
    let at: Vec<String> = addrs.iter().map(|a| a.to_string()).collect();
    let tls = |args: &[&str]| -> Vec<String> {
        let mut all: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        all.extend(["--tls-ca".to_string(), ca.clone()]);
        all
    };
    let cli = |args: Vec<String>, stdin: &str| {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        cli(&args, stdin)
    };
    let describe = [
        "topics",
        "--bootstrap-server",
        &at[1],
        "--describe",
        "--topic",
    ];
    wait_until(Duration::from_secs(30), "a leader, over TLS", async || {
        let (ok, out, err) = cli(tls(&[&describe[..], &["email.send"]].concat()), "");
        let leader = out
            .split("Leader: ")
            .nth(1)
            .and_then(|r| r.split('\t').next());
        (ok && leader.is_some_and(|l| l.parse::<u64>().is_ok()))
            .then_some(())
            .ok_or(format!("{out}{err}"))
    })
    .await;
    let produce = [
        "produce",
        "--bootstrap-server",
        &at[1],
        "--topic",
        "email.send",
    ];
    let (ok, _, err) = cli(tls(&produce), "over-tls\n");
    assert!(ok, "{err}");
    for a in &at {
        let consume = [
            "consume",
            "--bootstrap-server",
            a,
            "--topic",
            "email.send",
            "--from-beginning",
            "--from-replica",
            "--max-messages",
            "1",
        ];
        let what = format!("the record through {a}");
        wait_until(Duration::from_secs(20), &what, async || {
            let (ok, out, err) = cli(tls(&consume), "");
            (ok && out.lines().next() == Some("over-tls"))
                .then_some(())
                .ok_or(format!("{out}{err}"))
        })
        .await;
    }
    // Without --tls-ca: no broker answers.
    let plain: Vec<String> = [&describe[..], &["email.send"]]
        .concat()
        .iter()
        .map(|a| a.to_string())
        .collect();
    let (ok, _, err) = cli(plain, "");
    assert!(!ok, "a plaintext client was served");
    assert!(err.contains("no broker reachable"), "{err}");
    drop(brokers);
}

/// A client of the brokers in `certs` logging in as `user` with `password` by `mechanism`.
fn login_config(certs: &Path, mechanism: &str, user: &str, password: &str) -> ClientConfig {
    let mut config = client_config(Some(&certs.join("ca.pem")));
    let mechanism = replog::SaslMechanism::from_name(mechanism).unwrap();
    config.sasl = Some(replog::SaslLogin::new(mechanism, user, password));
    config
}

/// Certificates for brokers `brokers` (and a client), naming 127.0.0.1, written in
/// `dir/certs`: that directory.
fn dev_certs(dir: &Path, brokers: &[u64]) -> std::path::PathBuf {
    let certs = dir.join("certs");
    DevCertificates::generate(brokers, &["127.0.0.1".to_string()])
        .unwrap()
        .write_to(&certs)
        .unwrap();
    certs
}

/// Makes `c` a broker whose native clients log in (SCRAM or PLAIN, over TLS with the
/// certificates in `certs`) under ACLs: users admin (a super user, `admin-secret`, a SCRAM-SHA-512
/// credential) and bob (`bob-secret`, SCRAM-SHA-256) to start with.
fn logins_required(c: &mut replog::NodeConfig, certs: &Path) {
    use replog::{ScramCredential, ScramMechanism};
    c.tls = Some(native_tls(certs, c.id));
    c.native_sasl = true;
    c.sasl_mechanisms.push(replog::SaslMechanism::Plain);
    c.bootstrap_users = vec![
        (
            "admin".to_string(),
            ScramCredential::new(ScramMechanism::Sha512, "admin-secret", 4096).unwrap(),
        ),
        (
            "bob".to_string(),
            ScramCredential::new(ScramMechanism::Sha256, "bob-secret", 4096).unwrap(),
        ),
    ];
    c.authorization = Some(replog::acl::AuthorizerPolicy {
        super_users: vec!["User:admin".into()],
        ..Default::default()
    });
}

/// Three embedded brokers in `dir` whose native clients log in ([`logins_required`]), with
/// `email.send` of `partitions` partitions: the cluster, its certificates' directory, and a
/// client logged in as the admin.
async fn logins_cluster(
    dir: &Path,
    partitions: u32,
) -> (replog::LocalCluster, std::path::PathBuf, Client) {
    let certs = dev_certs(dir, &[1, 2, 3]);
    let at = certs.clone();
    let cluster = crate::local_cluster(3, dir, "email.send", partitions, move |c| {
        logins_required(c, &at);
    })
    .await;
    let admin = crate::support::connect(
        &cluster.addrs(),
        login_config(&certs, "SCRAM-SHA-512", "admin", "admin-secret"),
        Duration::from_secs(20),
    )
    .await;
    (cluster, certs, admin)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_clients_log_in_with_scram_or_plain_and_act_as_their_user() {
    let dir = tempfile::tempdir().unwrap();
    // The brokers elect leaders among themselves by certificate, without logging in.
    let (cluster, certs, admin) = logins_cluster(dir.path(), 1).await;
    let addrs = cluster.addrs();
    let sent = admin
        .send("email.send", 0, &[Record::new("as-admin")])
        .await
        .unwrap();
    assert_eq!(sent.base_offset, Offset(0));

    // PLAIN logs in the same user, inside TLS.
    let plain = Client::connect(
        &addrs,
        login_config(&certs, "PLAIN", "admin", "admin-secret"),
    )
    .await
    .unwrap();
    plain
        .send("email.send", 0, &[Record::new("as-admin-plain")])
        .await
        .unwrap();

    // A user without ACLs logs in, and may not write.
    let bob = Client::connect(
        &addrs,
        login_config(&certs, "SCRAM-SHA-256", "bob", "bob-secret"),
    )
    .await
    .unwrap();
    match bob.send("email.send", 0, &[Record::new("as-bob")]).await {
        Err(Error::TopicAuthorizationFailed(_)) => {}
        other => panic!("bob wrote without an ACL: {other:?}"),
    }

    // A wrong password and an unknown user are refused alike, and so is a credential of a
    // mechanism the user has none for, and a client that does not log in: each a failed
    // authentication, told by the first broker asked, not an unreachable broker.
    let refused = [
        login_config(&certs, "SCRAM-SHA-512", "admin", "wrong"),
        login_config(&certs, "SCRAM-SHA-512", "nobody", "admin-secret"),
        login_config(&certs, "PLAIN", "admin", "wrong"),
        login_config(&certs, "PLAIN", "nobody", "wrong"),
        login_config(&certs, "SCRAM-SHA-256", "admin", "admin-secret"),
        client_config(Some(&certs.join("ca.pem"))),
    ];
    let mut reasons = Vec::new();
    for config in refused {
        let login = format!("{:?}", config.sasl);
        match Client::connect(&addrs, config).await {
            Err(Error::AuthenticationFailed(reason)) => reasons.push(reason),
            other => panic!("{login}: {other:?}"),
        }
    }
    let credentials = "invalid credentials with SASL mechanism";
    assert_eq!(reasons[0], format!("{credentials} SCRAM-SHA-512"));
    assert_eq!(reasons[1], reasons[0], "an unknown user told apart");
    assert_eq!(reasons[2], format!("{credentials} PLAIN"));
    assert_eq!(reasons[3], reasons[2], "an unknown user told apart");
    assert_eq!(reasons[4], format!("{credentials} SCRAM-SHA-256"));
    assert!(reasons[5].starts_with("log in first"), "{}", reasons[5]);
    drop((admin, plain, bob));
    cluster.shutdown().await.unwrap();
}

/// Broker processes with `--native-sasl` and `--authorization`: the admin (a bootstrap user,
/// a super user) creates user alice with `replog users` and grants her writes on topics
/// prefixed `email.` with `replog acls`; alice produces with her `--command-config`; listed,
/// the user and the binding are there; deleted, alice logs in no more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_manages_users_and_acls_that_native_logins_obey() {
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("users");
    std::fs::write(&users, "admin:admin-secret:SCRAM-SHA-512\n").unwrap();
    let users = users.display().to_string();
    let secure = [
        "--native-sasl",
        "--authorization",
        "--super-user",
        "User:admin",
        "--bootstrap-user-file",
        &users,
    ];
    let (certs, addrs, _brokers) = tls_brokers(dir.path(), &secure);
    let ca = certs.join("ca.pem").display().to_string();
    let properties = |user: &str, password: &str| {
        let path = dir.path().join(format!("{user}.properties"));
        let text = format!(
            "security.protocol=SASL_SSL\nssl.ca.location={ca}\nsasl.mechanism=SCRAM-SHA-512\n\
             sasl.username={user}\nsasl.password={password}\n"
        );
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    };
    let (admin, alice) = (
        properties("admin", "admin-secret"),
        properties("alice", "alice-secret"),
    );
    let at = addrs[1].to_string();
    let run = |config: &str, args: &[&str], stdin: &str| {
        let mut all = args.to_vec();
        all.extend(["--bootstrap-server", &at, "--command-config", config]);
        cli(&all, stdin)
    };
    wait_until(
        Duration::from_secs(30),
        "the admin to create alice",
        async || {
            let (ok, out, err) = run(
                &admin,
                &["users", "--create", "alice", "--password-file", "-"],
                "alice-secret\n",
            );
            ok.then_some(()).ok_or(format!("{out}{err}"))
        },
    )
    .await;
    let grant = [
        "acls",
        "--add",
        "--allow-principal",
        "User:alice",
        "--operation",
        "Write",
        "--operation",
        "Describe",
        "--topic",
        "email.",
        "--resource-pattern-type",
        "prefixed",
    ];
    let (ok, out, err) = run(&admin, &grant, "");
    assert!(ok && out.contains("Added 2 ACL binding(s)"), "{out}{err}");
    let produce = ["produce", "--topic", "email.send"];
    wait_until(Duration::from_secs(30), "alice's record", async || {
        let (ok, out, err) = run(&alice, &produce, "from-alice\n");
        ok.then_some(()).ok_or(format!("{out}{err}"))
    })
    .await;
    let (ok, out, err) = run(&admin, &["acls", "--list", "--principal", "User:alice"], "");
    assert!(ok, "{err}");
    assert!(
        out.contains("TOPIC PREFIXED email.: ALLOW User:alice WRITE"),
        "{out}"
    );
    let (ok, out, err) = run(&admin, &["users", "--list"], "");
    assert!(
        ok && out.contains("alice: SCRAM-SHA-512(iterations=8192)"),
        "{out}{err}"
    );
    // Alice may not list ACLs, nor manage users.
    let (ok, _, err) = run(&alice, &["users", "--list"], "");
    assert!(!ok && err.contains("not authorized"), "{err}");

    let (ok, out, err) = run(&admin, &["users", "--delete", "alice"], "");
    assert!(ok, "{out}{err}");
    let (ok, _, err) = run(&alice, &produce, "after-deletion\n");
    let refused = "authentication failed for user \"alice\": invalid credentials with SASL \
                   mechanism SCRAM-SHA-512 (check sasl.username and sasl.password in \
                   --command-config)";
    assert!(!ok && err.contains(refused), "{err}");
    // Without a login: told to give one.
    let anonymous = ["produce", "--bootstrap-server", &at, "--tls-ca", &ca];
    let (ok, _, err) = cli(&[&anonymous[..], &produce[1..]].concat(), "anonymous\n");
    assert!(
        !ok && err.contains("authentication failed: log in first")
            && err.contains("give a login in --command-config"),
        "{err}"
    );
}

/// A broker joins a cluster whose native clients must log in: the cluster does not know it
/// yet, but its certificate (of the cluster's CA) names `broker-4`, so its registration is
/// taken without a login. It then hosts replicas of a topic created afterwards, which a
/// logged-in client writes to and reads back, through it too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_joins_a_cluster_whose_native_clients_log_in() {
    let dir = tempfile::tempdir().unwrap();
    let certs = dev_certs(dir.path(), &[1, 2, 3, 4]);
    let addrs = crate::support::free_addrs(4);
    let secure = |id: u64, founders: &[std::net::SocketAddr]| {
        let mut c = crate::bare(id, founders, dir.path());
        logins_required(&mut c, &certs);
        c
    };
    let mut nodes = crate::support::start_all(|id| secure(id, &addrs[..3])).await;
    let mut joiner = secure(4, &addrs);
    joiner.join = true;
    nodes.push(Some(crate::support::start_node(joiner).await.unwrap()));
    crate::wait_for_broker_everywhere(&nodes, 4, addrs[3]).await;

    let mut config = login_config(&certs, "SCRAM-SHA-512", "admin", "admin-secret");
    config.delivery_timeout = Duration::from_secs(20);
    let admin = crate::support::connect(&addrs, config.clone(), Duration::from_secs(20)).await;
    // Four partitions of two replicas over four brokers: the joiner hosts some of them.
    admin.create_topic("after", 4, 2).await.unwrap();
    let described = admin.describe("after").await.unwrap();
    assert!(
        described.iter().any(|p| p.replicas.contains(&4)),
        "{described:?}"
    );
    let at_4 = Client::connect(&addrs[3..], config).await.unwrap();
    for p in 0..4 {
        at_4.send("after", p, &[Record::new(format!("a{p}"))])
            .await
            .unwrap();
    }
    for p in 0..4 {
        let what = format!("partition {p}'s record");
        wait_until(Duration::from_secs(10), &what, async || {
            let values = fetched_values(&admin, "after", p, None).await?;
            (values == [format!("a{p}").into_bytes()]).then_some(())
        })
        .await;
    }
    drop((admin, at_4));
    crate::support::shutdown_all(nodes).await;
}

/// The native `Producer` and `Consumer` over TLS, logged in by SCRAM as a user holding only
/// the ACLs they need: WRITE and READ on the topic, READ on the consumer group. The producer
/// writes keyed records, the consumer reads every one of them in its group and commits; a
/// group the user may not read is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_producer_and_a_consumer_log_in_as_a_user_with_only_the_acls_they_need() {
    use std::sync::Arc;

    use replog::acl::{AclBinding, AclOperation, AclPermission, PatternType, ResourceType};
    use replog::{Consumer, ConsumerConfig, GroupError, Producer, ProducerConfig, StartAt};

    const TOPIC: &str = "email.send";
    let dir = tempfile::tempdir().unwrap();
    let (cluster, certs, admin) = logins_cluster(dir.path(), 2).await;
    let addrs = cluster.addrs();
    let grant = |resource_type, name: &str, operation| AclBinding {
        resource_type,
        resource_name: name.into(),
        pattern_type: PatternType::Literal,
        principal: "User:bob".into(),
        host: "*".into(),
        operation,
        permission: AclPermission::Allow,
    };
    admin
        .create_acls(&[
            grant(ResourceType::Topic, TOPIC, AclOperation::Write),
            grant(ResourceType::Topic, TOPIC, AclOperation::Read),
            grant(ResourceType::Group, "mailers", AclOperation::Read),
        ])
        .await
        .unwrap();
    let mut config = login_config(&certs, "SCRAM-SHA-256", "bob", "bob-secret");
    config.delivery_timeout = Duration::from_secs(20);
    let bob = Arc::new(Client::connect(&addrs, config).await.unwrap());
    // Every broker applied the grants (one metadata command): bob reads each one's replica.
    for addr in &addrs {
        let what = format!("bob's grants on {addr}");
        wait_until(Duration::from_secs(10), &what, async || {
            bob.fetch(TOPIC, 0, Offset(0), 1 << 10, Some(addr.into()))
                .await
        })
        .await;
    }

    let producer = Producer::new(Arc::clone(&bob), ProducerConfig::default());
    let sent: Vec<_> = (0..20)
        .map(|i| {
            let record = Record::new(format!("m{i}")).with_key(format!("k{}", i % 4));
            producer.send(TOPIC, record)
        })
        .collect();
    producer.close().await;
    let mut partitions = std::collections::BTreeSet::new();
    for landed in sent {
        partitions.insert(landed.await.unwrap().partition);
    }

    let mut group = ConsumerConfig::default();
    group.group_id = Some("mailers".into());
    group.auto_offset_reset = StartAt::Beginning;
    let mut consumer = Consumer::new(Arc::clone(&bob), group.clone());
    consumer.subscribe(&[TOPIC]).unwrap();
    let records = crate::consumer::poll_n(&mut consumer, 20).await;
    let mut values: Vec<String> = records
        .iter()
        .map(|r| String::from_utf8_lossy(&r.value).into_owned())
        .collect();
    values.sort_by_key(|v| v[1..].parse::<u32>().unwrap());
    let want: Vec<String> = (0..20).map(|i| format!("m{i}")).collect();
    assert_eq!(values, want);
    consumer.commit().await.unwrap();
    for p in partitions {
        let committed = consumer.committed(TOPIC, p).await.unwrap();
        assert!(committed.is_some_and(|o| o > Offset(0)), "partition {p}");
    }
    consumer.close().await.unwrap();

    // A group bob has no ACL for.
    group.group_id = Some("others".into());
    let mut other = Consumer::new(Arc::clone(&bob), group);
    other.subscribe(&[TOPIC]).unwrap();
    match other.poll(Duration::from_secs(1)).await {
        Err(Error::Group {
            error: GroupError::AuthorizationFailed,
            ..
        }) => {}
        answer => panic!("a group bob may not read: {answer:?}"),
    }
    drop((admin, bob, other));
    cluster.shutdown().await.unwrap();
}
