//! Partition moves and preferred-leader elections with Kafka's own admin clients, on three
//! `replog node` processes: kafka-python reorders two partitions' replicas
//! (AlterPartitionReassignments) through one broker, sees a broker the cluster lacks refused
//! and no move left once they are done (ListPartitionReassignments); confluent-kafka elects
//! the new preferred leaders (ElectLeaders) through another broker, and they lead;
//! kafka-python's election of the same partitions then finds nothing to do.

use crate::kafka::cluster;
use crate::kafka_python::{python, python_clients};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafkas_admin_clients_move_replicas_and_elect_the_preferred_leaders() {
    if !python_clients() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (_brokers, _addrs, kafka) = cluster(dir.path());
    let (ok, out, err) = python(
        "leaders.py",
        vec![kafka[0].to_string(), kafka[1].to_string()],
    )
    .await;
    assert!(ok, "{out}{err}");
    println!("{out}");
    let r: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(
        r["altered"],
        serde_json::json!({"0": null, "1": null}),
        "{r}"
    );
    assert_eq!(
        r["unknown_broker"],
        serde_json::json!({"1": "InvalidReplicationAssignmentError"}),
        "{r}"
    );
    assert_eq!(
        r["replicas"],
        serde_json::json!({"0": [3, 2, 1], "1": [1, 2, 3]}),
        "{r}"
    );
    assert_eq!(r["listed"], serde_json::json!({}), "{r}");
    // Each partition's election moved it, unless its new preferred replica led already.
    for (p, preferred) in [("0", 3), ("1", 1)] {
        let expected = if r["leaders_before_election"][p] == preferred {
            serde_json::json!("ELECTION_NOT_NEEDED")
        } else {
            serde_json::Value::Null
        };
        assert_eq!(r["confluent"][p], expected, "{r}");
    }
    assert_eq!(r["leaders"], serde_json::json!({"0": 3, "1": 1}), "{r}");
    // ELECTION_NOT_NEEDED (84) for both (INVALID_REPLICA_ASSIGNMENT is kafka-python's
    // InvalidReplicationAssignmentError above).
    assert_eq!(
        r["kafka_python"],
        serde_json::json!([[0, 84], [1, 84]]),
        "{r}"
    );
}
