//! A deposed leader comes back: what it appended in its term and never committed reaches the
//! replicas that committed other entries at those places since, and changes nothing.

use super::*;

/// The leader of partition 0 is cut off and takes a write it cannot commit; the other two
/// elect a leader that commits writes over the same log indexes. Then the network heals: the
/// old leader's next requests (its stale entry, or a heartbeat, whichever goes first) are
/// from an older term, openraft refuses them, and the answer deposes it. Nothing the new
/// leader acknowledged is lost and the stale write appears nowhere. (A stale entry taken for
/// committed entries the cluster lost had each replica wipe its log and rebuild, the leader
/// included; the unit test beside `raft::network::serve` pins that case, whose timing this
/// test does not control.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_leaders_stale_entries_do_not_unsettle_the_replicas_that_committed_others() {
    let cluster = Cluster::start(3, Durability::Replicated).await;
    let node = |id: u64| cluster.node(id).unwrap();
    let (old, _) = append_on_leader(&cluster, &[Record::new(Op::payload(0, 0))], None).await;
    cluster.converge(Duration::from_secs(10)).await;
    let others: Vec<u64> = (1..=3).filter(|id| *id != old).collect();
    cluster.net.partition(&[old], &others);

    // The old leader appends a write it cannot replicate; it is never acknowledged.
    let stale = [Record::new(Op::payload(9, 0))];
    let unacked = tokio::time::timeout(
        Duration::from_millis(300),
        node(old).append(TOPIC, 0, &stale),
    )
    .await;
    assert!(
        !matches!(unacked, Ok(Ok(_))),
        "a leader cut off from both followers acknowledged a write"
    );
    wait_until(
        Duration::from_secs(10),
        "the stale entry in the old leader's log",
        async || {
            let s = node(old).status(TOPIC, 0).ok()?;
            (s.log_end > s.high_watermark).then_some(())
        },
    )
    .await;

    // The other two elect a leader and commit writes over the stale entry's place.
    let records: Vec<Record> = (0..4).map(|n| Record::new(Op::payload(1, n))).collect();
    let (new, acked) = wait_until(
        Duration::from_secs(20),
        "the other two to elect a leader that takes the write",
        async || {
            let new = others
                .iter()
                .find_map(|id| node(*id).status(TOPIC, 0).ok()?.leader)
                .filter(|l| *l != old)?;
            Some((new, node(new).append(TOPIC, 0, &records).await.ok()?))
        },
    )
    .await;
    let end = acked.last_offset().get() + 1;
    for id in &others {
        wait_until(
            Duration::from_secs(10),
            "both to know the writes committed",
            async || (node(*id).status(TOPIC, 0).ok()?.high_watermark.get() >= end).then_some(()),
        )
        .await;
    }

    // The network heals; the answer to the old leader's next request tells it of the newer
    // term.
    cluster.net.heal();
    wait_until(
        Duration::from_secs(10),
        "the old leader to learn of the new term",
        async || {
            let s = node(old).status(TOPIC, 0).ok()?;
            (s.leader != Some(old)).then_some(())
        },
    )
    .await;
    cluster.converge(Duration::from_secs(30)).await;

    let replicas = cluster.read_all();
    for r in replicas.iter().filter(|r| r.partition == 0) {
        let held: Vec<&Vec<u8>> = r.records.iter().map(|(_, v)| v).collect();
        for record in &records {
            assert!(
                held.contains(&&record.value.to_vec()),
                "broker {} lost a write broker {new} acknowledged: holds {:?}",
                r.node,
                r.records
            );
        }
        assert!(
            !held.contains(&&Op::payload(9, 0)),
            "broker {} holds the old leader's unacknowledged write",
            r.node
        );
        assert!(r.records.len() as u64 >= end, "broker {} is short", r.node);
    }
    cluster.shutdown().await;
}
