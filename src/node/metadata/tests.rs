use std::time::Duration;

use crate::LocalCluster;
use crate::catalog::MetaCommand;
use crate::protocol::ProposeRequest;

/// A broker is taken to be at an address only if it answers there as itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_is_recognized_only_at_its_own_address() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = LocalCluster::start(2, dir.path(), |_| {}).await.unwrap();
    let (one, two) = (cluster.addrs()[0], cluster.addrs()[1]);
    let broker = &cluster.node(1).unwrap().broker;
    assert!(broker.answers_at(2, two.into()).await);
    assert!(
        !broker.answers_at(2, one.into()).await,
        "broker 1 is not broker 2"
    );
    let nobody = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let free = nobody.local_addr().unwrap();
    drop(nobody);
    assert!(!broker.answers_at(2, free.into()).await);
    cluster.shutdown().await.unwrap();
}

/// Regression: a proposed registration moved the broker's traffic to the
/// new address at once, before it was committed (or even if it never was). Now only a
/// committed registration does, or an address where the broker answers as itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uncommitted_registration_moves_no_traffic() {
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = LocalCluster::start(3, dir.path(), |c| {
        c.heartbeat_interval = Duration::from_millis(100);
        c.election_timeout = Duration::from_millis(500);
        c.request_timeout = Duration::from_millis(1000);
    })
    .await
    .unwrap();
    let two = cluster.addrs()[1];
    // Without brokers 2 and 3 nothing commits in the metadata Raft group.
    cluster.stop(2).await.unwrap();
    cluster.stop(3).await.unwrap();
    let elsewhere = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let request = ProposeRequest {
        command: MetaCommand::RegisterBroker {
            id: 2,
            addr: elsewhere.local_addr().unwrap().to_string(),
            join: false,
        },
        forwarded: false,
    };
    let broker = &cluster.node(1).unwrap().broker;
    let proposed = tokio::time::timeout(Duration::from_secs(30), broker.propose(request))
        .await
        .expect("the proposal ends within its timeouts");
    assert!(proposed.is_err(), "nothing commits without a quorum");
    assert_eq!(
        broker.peers.addr_of(2),
        Some(two.into()),
        "broker 2's traffic still goes where the catalog says"
    );
    cluster.shutdown().await.unwrap();
}
