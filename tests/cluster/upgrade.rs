//! Rolling upgrades: brokers of two protocol versions in one cluster. A broker pinned to
//! version 1 (`NodeConfig::protocol_version`) speaks as a build before versions did: it says
//! no Hello, closes a connection that says one, and knows no pre-vote. The others find that
//! out per connection and speak version 1 to it, version 2 among themselves.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use replog::{ClientConfig, Error, FetchOptions, Offset, PROTOCOL_VERSION};

use crate::support::{
    connect, local_cluster, spawn_writer, wait_for_acked_on_every_replica, wait_for_writes,
    wait_until,
};

const TOPIC: &str = "upgraded";
const PARTITIONS: u32 = 3;

/// Whether each running broker of `cluster` speaks to each other the version it should: 1
/// with broker `pinned` (if any), the newest between the others.
async fn versions_negotiated(
    cluster: &replog::LocalCluster,
    pinned: Option<u64>,
) -> Result<(), String> {
    for node in cluster.nodes() {
        for peer in cluster.nodes().map(replog::Node::id) {
            if peer == node.id() {
                continue;
            }
            let want = if pinned == Some(node.id()) || pinned == Some(peer) {
                1
            } else {
                PROTOCOL_VERSION
            };
            let got = node.peer_protocol_version(peer).await;
            if got != Some(want) {
                return Err(format!(
                    "broker {} to {peer}: {got:?}, want {want}",
                    node.id()
                ));
            }
        }
    }
    Ok(())
}

/// A cluster upgraded one broker at a time: broker 3 runs pinned to protocol version 1 while
/// the others run the newest; writes and reads go on through a restart of each of the three,
/// nothing acknowledged is lost or doubled, and the cluster does not finalize the newest
/// version while broker 3 cannot speak it. Unpinned and restarted, broker 3 speaks it and the
/// cluster finalizes it; a broker pinned to version 1 after that refuses to start, naming both
/// versions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_of_the_previous_protocol_version_upgrades_with_the_cluster_under_writes() {
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = local_cluster(3, dir.path(), TOPIC, PARTITIONS, |c| {
        if c.id == 3 {
            c.protocol_version = 1;
        }
    })
    .await;
    let client = Arc::new(
        connect(
            &cluster.addrs(),
            ClientConfig::default(),
            Duration::from_secs(20),
        )
        .await,
    );
    wait_until(
        Duration::from_secs(20),
        "each connection to speak the version both ends know",
        async || versions_negotiated(&cluster, Some(3)).await,
    )
    .await;
    let stop = Arc::new(AtomicBool::new(false));
    let written = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let writer = spawn_writer(
        Arc::clone(&client),
        TOPIC,
        PARTITIONS,
        (Arc::clone(&stop), Arc::clone(&written)),
    );
    // A reader of partition 0 all along: the next offset it has not read.
    let read_to = Arc::new(AtomicU64::new(0));
    let reader = {
        let (client, stop, read_to) =
            (Arc::clone(&client), Arc::clone(&stop), Arc::clone(&read_to));
        tokio::spawn(async move {
            // Bounded by `stop`; a failed fetch (a broker restarting) is tried again.
            while !stop.load(Ordering::Acquire) {
                let next = Offset(read_to.load(Ordering::Acquire));
                let mut options = FetchOptions::default();
                options.max_wait = Duration::from_millis(200);
                match client.fetch_with(TOPIC, 0, next, &options).await {
                    Ok(fetched) => {
                        for b in fetched.batches {
                            read_to.store(b.next_offset().get(), Ordering::Release);
                        }
                    }
                    Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                }
            }
        })
    };
    for id in 1..=3 {
        let before = read_to.load(Ordering::Acquire);
        cluster.stop(id).await.unwrap();
        cluster.restart(id).await.unwrap();
        cluster
            .wait_for_leaders(TOPIC, PARTITIONS, Duration::from_secs(30))
            .await
            .unwrap();
        wait_until(
            Duration::from_secs(30),
            "the reader to read on after the restart",
            async || {
                let now = read_to.load(Ordering::Acquire);
                if now > before {
                    Ok(())
                } else {
                    Err(format!("at {now}"))
                }
            },
        )
        .await;
        wait_until(
            Duration::from_secs(20),
            "each connection to speak the version both ends know",
            async || versions_negotiated(&cluster, Some(3)).await,
        )
        .await;
        for node in cluster.nodes() {
            assert_eq!(node.finalized_version(), 1, "broker {}", node.id());
        }
    }
    // Writes through every partition's leader after the last restart.
    let since = written.load(Ordering::Acquire);
    wait_for_writes(&written, since, 2 * PARTITIONS as usize).await;
    stop.store(true, Ordering::Release);
    let acked = writer.await.unwrap();
    reader.await.unwrap();
    assert!(acked.len() > PARTITIONS as usize, "{} writes", acked.len());
    wait_for_acked_on_every_replica(&cluster, TOPIC, PARTITIONS, &acked).await;

    // Broker 3 runs the newest version too: the cluster finalizes it.
    cluster.stop(3).await.unwrap();
    cluster.config_mut(3).unwrap().protocol_version = PROTOCOL_VERSION;
    cluster.restart(3).await.unwrap();
    wait_until(
        Duration::from_secs(30),
        "the cluster to finalize the newest protocol version",
        async || {
            versions_negotiated(&cluster, None).await?;
            for node in cluster.nodes() {
                if node.finalized_version() != PROTOCOL_VERSION {
                    return Err(format!(
                        "broker {}: {}",
                        node.id(),
                        node.finalized_version()
                    ));
                }
            }
            Ok(())
        },
    )
    .await;
    let d = client
        .send(TOPIC, 0, &[replog::Record::new("after")])
        .await
        .unwrap();
    assert!(d.base_offset.get() > 0);

    // No way back below a finalized version.
    cluster.stop(3).await.unwrap();
    cluster.config_mut(3).unwrap().protocol_version = 1;
    match cluster.restart(3).await {
        Err(Error::UnsupportedVersion {
            needed, supported, ..
        }) => assert_eq!((needed, supported), (PROTOCOL_VERSION, 1)),
        other => panic!("a broker pinned below the finalized version started: {other:?}"),
    }
    drop(client);
    cluster.shutdown().await.unwrap();
}

/// A native producer's batches are Kafka batches from protocol version 4 on: a broker of
/// version 4 serves them to a native fetch as they are stored, one pinned to version 3 (the
/// build before) converts them into replog's records as it always did, and both read back
/// as the records sent, keys, values and headers alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_native_fetch_reads_a_native_producers_batches_from_brokers_of_both_versions() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = local_cluster(3, dir.path(), TOPIC, 1, |c| {
        if c.id == 3 {
            c.protocol_version = 3;
        }
    })
    .await;
    let client = connect(
        &cluster.addrs(),
        ClientConfig::default(),
        Duration::from_secs(20),
    )
    .await;
    let batches: Vec<Vec<replog::Record>> = (0..4)
        .map(|b| {
            (0..50)
                .map(|i| {
                    replog::Record::new(format!("value {b}.{i}"))
                        .with_key(format!("key {i}"))
                        .with_header("h", format!("{b}"))
                })
                .collect()
        })
        .collect();
    for records in &batches {
        client.send(TOPIC, 0, records).await.unwrap();
    }
    let sent: Vec<replog::Record> = batches.concat();
    let read_from = async |broker: usize| {
        let mut options = FetchOptions::default();
        options.replica = Some(cluster.addrs()[broker - 1].into());
        let mut read = Vec::new();
        let mut sizes = Vec::new();
        let mut next = Offset(0);
        let what = format!("broker {broker} to serve all {} records", sent.len());
        wait_until(Duration::from_secs(20), &what, async || {
            // Bounded: every turn reads on from `next`, or waits.
            if let Ok(fetched) = client.fetch_with(TOPIC, 0, next, &options).await {
                for b in fetched.batches {
                    sizes.push(b.size_bytes());
                    read.extend(b.records().map(|(_, r)| r));
                    next = b.next_offset();
                }
            }
            if read.len() >= sent.len() {
                Ok(())
            } else {
                Err(format!("{} read", read.len()))
            }
        })
        .await;
        (read, sizes)
    };
    let (stored, stored_sizes) = read_from(1).await;
    let (converted, converted_sizes) = read_from(3).await;
    assert_eq!(stored, sent);
    assert_eq!(converted, sent);
    assert_eq!(stored_sizes.len(), batches.len());
    for (s, c) in stored_sizes.iter().zip(&converted_sizes) {
        // Kafka's layout: a 61-byte batch header, and records with varint lengths where
        // replog's have fixed ones.
        assert_ne!(
            s, c,
            "the same bytes from both: {stored_sizes:?}, {converted_sizes:?}"
        );
    }
    drop(client);
    cluster.shutdown().await.unwrap();
}
