//! Kafka's ACLs and users with Kafka's own clients: three `replog node` processes with SASL
//! and `--authorization`; a super user creates a topic and ACLs through confluent-kafka's
//! admin client on one broker, and an ordinary user, on another, is refused (29, 30, 31; 30
//! too when it deletes a group it may only read, which the super user then deletes) until
//! it holds the ACLs it needs, let in once they are committed, refused again by a DENY over
//! its ALLOW, and refused when it changes ACLs itself; a user created through the admin API
//! logs in, and once deleted cannot; kcat, without the ACLs, is refused its produce.

use std::time::Duration;

use crate::kafka::{kcat, run};
use crate::kafka_python::{python, python_clients};
use crate::kafka_sasl::sasl_cluster_with;
use crate::support::wait_until;

const ADMIN: (&str, &str) = ("admin", "admin-secret");
const ALICE: (&str, &str) = ("alice", "wonder-land");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_acls_are_managed_by_a_super_user_and_enforced_on_every_broker() {
    if !python_clients() || kcat().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (brokers, _addrs, kafka) = sasl_cluster_with(
        dir.path(),
        &[ADMIN, ALICE],
        &["--authorization", "--super-user", "User:admin"],
    );
    let (admin_at, user_at) = (kafka[0].to_string(), kafka[1].to_string());
    let sasl = |(user, password): (&str, &str)| -> Vec<String> {
        [
            "security.protocol=SASL_PLAINTEXT".to_string(),
            "sasl.mechanisms=SCRAM-SHA-512".into(),
            format!("sasl.username={user}"),
            format!("sasl.password={password}"),
        ]
        .into_iter()
        .flat_map(|x| ["-X".to_string(), x])
        .collect()
    };
    // The bootstrap users are written a moment after the cluster forms.
    wait_until(Duration::from_secs(30), "the admin logs in", async || {
        let mut args: Vec<String> = ["-L", "-b", &admin_at].map(String::from).to_vec();
        args.extend(sasl(ADMIN));
        let kcat = kcat().unwrap();
        let (ok, out, err) = tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            run(kcat, &args, "")
        })
        .await
        .unwrap();
        if ok {
            Ok(())
        } else {
            Err(format!("{out}{err}"))
        }
    })
    .await;

    let (ok, out, err) = python(
        "acls.py",
        vec![
            admin_at.clone(),
            user_at.clone(),
            format!("{}:{}", ADMIN.0, ADMIN.1),
            format!("{}:{}", ALICE.0, ALICE.1),
            "orders".into(),
        ],
    )
    .await;
    assert!(ok, "{out}{err}");
    println!("{out}");
    let r: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(
        r["produce_without_acl"], "TOPIC_AUTHORIZATION_FAILED",
        "{r}"
    );
    assert_eq!(r["created"], 3, "{r}");
    assert_eq!(r["described"], 3, "{r}");
    // The literal WRITE and the prefixed READ match the topic; the group's does not.
    assert_eq!(r["matching_topic"], 2, "{r}");
    assert!(r["produce_with_acl"].is_null(), "{r}");
    assert_eq!(r["consumed"], 10, "{r}");
    assert!(r["consume_error"].is_null(), "{r}");
    assert_eq!(r["other_group_error"], "GROUP_AUTHORIZATION_FAILED", "{r}");
    assert_eq!(r["user_deletes_group"], "GROUP_AUTHORIZATION_FAILED", "{r}");
    assert!(r["admin_deletes_group"].is_null(), "{r}");
    assert_eq!(r["consume_after_deny"], "TOPIC_AUTHORIZATION_FAILED", "{r}");
    assert_eq!(r["deleted"], 4, "{r}");
    assert_eq!(r["left"], 0, "{r}");
    assert_eq!(r["user_creates_acl"], "CLUSTER_AUTHORIZATION_FAILED", "{r}");
    assert_eq!(r["user_lists_topic"], false, "{r}");
    assert_eq!(
        r["carol_mechanisms"],
        serde_json::json!(["SCRAM_SHA_512"]),
        "{r}"
    );
    assert_eq!(r["carol_logs_in"], true, "{r}");
    assert_eq!(r["deleted_carol_logs_in"], false, "{r}");

    // kcat as the user, who holds no ACL any more: its produce is refused.
    let mut args: Vec<String> = ["-P", "-b", &user_at, "-t", "orders"]
        .map(String::from)
        .to_vec();
    args.extend(sasl(ALICE));
    args.extend(["-X".into(), "message.timeout.ms=5000".into()]);
    let kcat = kcat().unwrap();
    let (ok, out, err) = tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run(kcat, &args, "refused\n")
    })
    .await
    .unwrap();
    assert!(
        !ok && err.contains("uthoriz"),
        "kcat's produce without ACLs: {out}{err}"
    );
    drop(brokers);
}
