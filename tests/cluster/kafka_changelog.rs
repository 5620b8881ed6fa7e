//! A stream-processing library's state against replog: a stateful quixstreams application
//! counts records per key in a store backed by a changelog topic it creates compacted, loses
//! its local state, and recovers the same counts from the changelog before it counts on from
//! where its consumer group committed.

use crate::kafka::cluster;
use crate::kafka_python::{python_env, quixstreams_python};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quixstreams_application_recovers_its_state_from_a_compacted_changelog() {
    let Some(interpreter) = quixstreams_python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (_brokers, _addrs, kafka) = cluster(dir.path());
    let state = dir.path().join("quixstreams-state");
    let (ok, out, err) = python_env(
        "changelog.py",
        vec![kafka[1].to_string(), state.display().to_string()],
        vec![("REPLOG_PYTHON", interpreter)],
    )
    .await;
    assert!(ok, "{out}{err}");
    println!("{out}");
    let r: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let keys: Vec<String> = (0..5).map(|k| format!("key-{k}")).collect();
    assert_eq!(r["first"]["processed"], 15, "{r}");
    // The second run reads on from its group's committed offsets, not the input's start.
    assert_eq!(r["second"]["processed"], 10, "{r}");
    for key in &keys {
        assert_eq!(r["first"]["found"][key], 0, "{r}");
        assert_eq!(r["first"]["counts"][key], 3, "{r}");
        // Its local state deleted, it found each count in the changelog.
        assert_eq!(r["second"]["found"][key], 3, "{r}");
        assert_eq!(r["second"]["counts"][key], 5, "{r}");
    }
    let policies = r["policies"].as_object().unwrap();
    assert!(!policies.is_empty(), "{r}");
    assert!(policies.values().all(|p| p == "compact"), "{r}");
}
