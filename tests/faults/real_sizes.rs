//! Fault schedules at real sizes: records up to 1 MiB and batches up to 4 MiB while followers
//! stop, links lose messages and slow down; a partition whose first leader stops before
//! replicating anything; replication over a slow link.

use super::*;

/// A producer of real sizes: batches of records from 1 KiB up to the brokers'
/// `record_bytes_max`, each batch up to their `batch_bytes_max`, to partitions at random, one
/// batch at a time, until `bytes` of them were acknowledged (or three minutes passed).
async fn produce_big(
    addrs: Vec<SocketAddr>,
    producer: u32,
    bytes: u64,
    seed: u64,
    log: LogConfig,
    losses: Arc<AtomicU64>,
) -> Vec<(Op, u64)> {
    // Room for a record's own encoding (lengths, timestamp delta, header count) and a batch's.
    const RECORD_OVERHEAD: usize = 64;
    let mut rng = Rng::new(seed ^ u64::from(producer) << 32);
    let mut config = ClientConfig::default();
    config.request_timeout = Duration::from_millis(5000);
    config.delivery_timeout = Duration::from_millis(20_000);
    config.record_bytes_max = log.record_bytes_max;
    config.batch_bytes_max = log.batch_bytes_max;
    let client = Client::connect(&addrs, config).await.unwrap();
    let record_max = log.record_bytes_max as usize - RECORD_OVERHEAD;
    let batch_max = log.batch_bytes_max as usize;
    let mut ops = Vec::new();
    let (mut n, mut acked) = (0u64, 0u64);
    // The failed sends, and the last few of them, for the message if the producer falls short.
    let (mut failures, mut last_failures) = (0u64, Vec::new());
    let started = Instant::now();
    while acked < bytes && started.elapsed() < Duration::from_secs(180) {
        let partition = rng.below(u64::from(PARTITIONS)) as u32;
        let mut records = Vec::new();
        let mut size = 0;
        // Half the records as large as allowed, the others anywhere from 1 KiB up; as many as
        // the batch limit takes.
        loop {
            let len = if rng.below(2) == 0 {
                record_max
            } else {
                1024 + rng.below((record_max - 1024) as u64) as usize
            };
            if size + len + RECORD_OVERHEAD > batch_max {
                break;
            }
            records.push(Record::new(Op::payload_sized(
                producer,
                n + records.len() as u64,
                len,
            )));
            size += len + RECORD_OVERHEAD;
        }
        let sent_after = losses.load(Ordering::SeqCst);
        let asked = started.elapsed();
        let sent = client.send(TOPIC, partition, &records).await;
        match &sent {
            Ok(_) => acked += size as u64,
            Err(e) => {
                failures += 1;
                if last_failures.len() == 8 {
                    last_failures.remove(0);
                }
                last_failures.push(format!(
                    "{} ms +{} ms partition {partition}: {e}",
                    asked.as_millis(),
                    (started.elapsed() - asked).as_millis()
                ));
            }
        }
        for i in 0..records.len() as u64 {
            let offset = match &sent {
                Ok(d) => Ok(d.base_offset.get() + i),
                Err(e) => Err(e.clone()),
            };
            ops.push(sent_op(producer, n + i, partition, offset, sent_after));
        }
        n += records.len() as u64;
    }
    assert!(
        acked >= bytes,
        "producer {producer}: {acked} of {bytes} bytes acknowledged in {:?}; {failures} sends \
         failed, the last: {last_failures:#?}",
        started.elapsed()
    );
    eprintln!("producer {producer}: {acked} bytes acknowledged in {n} records");
    ops
}

/// A schedule at real sizes, on five brokers. A follower of partition 0
/// is stopped while a producer writes at least `mib` MiB in records up to `record_bytes_max`
/// (1 MiB) and batches up to `batch_bytes_max` (4 MiB), beside two small producers; among the
/// other four, at random, one more broker is stopped (a partition's leader half the time) and
/// restarted, and the network turns lossy and slow and heals. Then the follower is restarted,
/// catches up from that far behind, and the history is checked against every replica.
async fn big_schedule(seed: u64, mib: u64) {
    let mut log = LogConfig::default();
    log.segment_bytes = 16 << 20;
    let mut rng = Rng::new(seed);
    let mut cluster = Cluster::start_sized(5, Durability::Fsync, None, log.clone()).await;
    let started = Instant::now();
    let mut timeline = Timeline::new(started);
    let leader = wait_leader_of(&cluster, 0).await;
    let followers: Vec<u64> = (1..=5).filter(|id| *id != leader).collect();
    let follower = followers[rng.below(4) as usize];
    cluster.stop(follower).await;
    timeline.note(format!("stop follower {follower}"));
    let losses = Arc::clone(&cluster.power_losses);
    let small: Vec<_> = (0..2)
        .map(|p| {
            tokio::spawn(produce(
                cluster.addrs.clone(),
                p,
                100,
                seed,
                Arc::clone(&losses),
            ))
        })
        .collect();
    let big = tokio::spawn(produce_big(
        cluster.addrs.clone(),
        2,
        mib << 20,
        seed,
        log,
        Arc::clone(&losses),
    ));
    // Bounded by the producers' own deadlines.
    while !big.is_finished() {
        // Pacing the faults at random: the faults are the subject, not a wait.
        tokio::time::sleep(Duration::from_millis(200 + rng.below(500))).await;
        let other_down: Vec<u64> = cluster
            .down()
            .into_iter()
            .filter(|id| *id != follower)
            .collect();
        match rng.below(4) {
            0 if other_down.is_empty() => {
                let leader = cluster.leader(rng.below(u64::from(PARTITIONS)) as u32);
                let live: Vec<u64> = cluster
                    .live()
                    .into_iter()
                    .filter(|id| *id != follower)
                    .collect();
                let victim = leader
                    .filter(|_| rng.below(2) == 0)
                    .unwrap_or_else(|| live[rng.below(live.len() as u64) as usize]);
                cluster.stop(victim).await;
                timeline.note(format!("stop {victim}"));
            }
            1 if !other_down.is_empty() => {
                cluster.restart(other_down[0]).await;
                timeline.note(format!("restart {}", other_down[0]));
            }
            2 => {
                let (loss, delay) = (rng.below(100) as u32, rng.below(20));
                // Half the time the links are slow too: 16 to 64 MiB/s, so that a batch of
                // 4 MiB takes longer to reach a follower than a heartbeat's deadline.
                let mib_per_sec = [0, 16 + rng.below(49)][rng.below(2) as usize];
                cluster.net.set_loss(loss);
                cluster.net.set_delay(0, delay);
                cluster.net.set_link_rate(mib_per_sec << 20);
                timeline.note(format!(
                    "loss {loss}/1000, delay up to {delay} ms, links at {mib_per_sec} MiB/s \
                     (0: unlimited)"
                ));
            }
            _ => {
                cluster.net.heal();
                timeline.note("heal".into());
            }
        }
    }
    let mut ops = Vec::new();
    for p in small.into_iter().chain(std::iter::once(big)) {
        match p.await {
            Ok(sent) => ops.extend(sent.into_iter().map(|(op, _)| op)),
            Err(e) => panic!(
                "seed {seed} at real sizes: a producer failed ({e}); faults: {}; cluster: {}",
                timeline.lines.join("; "),
                cluster.dump()
            ),
        }
    }
    cluster.net.heal();
    for id in cluster.down() {
        cluster.restart(id).await;
    }
    timeline.note(format!(
        "heal, restart {follower} (and any other), converge"
    ));
    let behind = Instant::now();
    cluster.converge(Duration::from_secs(180)).await;
    eprintln!(
        "seed {seed}: {mib} MiB written with broker {follower} down; caught up in {:?}",
        behind.elapsed()
    );
    let replicas = cluster.read_all();
    let (violations, summary) = history::check(&ops, &replicas);
    let written = (!violations.is_empty())
        .then(|| write_history("real-sizes", seed, &timeline, &ops, &replicas, &violations));
    assert!(
        violations.is_empty(),
        "seed {seed} at real sizes: {} violations, first: {:?}; history in {}",
        violations.len(),
        &violations[..violations.len().min(10)],
        written.map_or("(not written)".into(), |p| p.display().to_string())
    );
    eprintln!(
        "seed {seed} at real sizes: {summary:?} in {:?}; faults: {}",
        started.elapsed(),
        timeline.lines.join("; ")
    );
    cluster.shutdown().await;
}

/// See [`big_schedule`]; `FAULT_BIG_SCHEDULES` (default 2) and `FAULT_BIG_MIB` (default 64).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_schedules_at_real_sizes_lose_and_duplicate_nothing() {
    let mib = env_u64("FAULT_BIG_MIB", 64);
    for seed in 1..=env_u64("FAULT_BIG_SCHEDULES", 2) {
        big_schedule(seed, mib).await;
    }
}

/// A partition whose preferred leader wins the first election and stops before anyone hears
/// from it as leader still forms among the others. Broker 1 leads partition 0 first; its
/// replication is muted from the start, so the others grant it their votes and never get the
/// Raft group's first entry from it. Before the fix, they had no membership of their own (only the
/// preferred leader initialized at once; the others later, and openraft refuses a replica that
/// has seen a vote), so they could neither elect a leader nor initialize: the partition stayed
/// without a leader for as long as broker 1 was down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_forms_when_its_first_leader_stops_before_replicating_anything() {
    let mut cluster = Cluster::start(3, Durability::Fsync).await;
    cluster.net.mute_replication_from(1);
    wait_until(
        Duration::from_secs(20),
        "broker 1 to lead partition 0",
        async || {
            let one_leads = cluster
                .node(1)
                .and_then(|n| n.status(TOPIC, 0).ok()?.leader)
                == Some(1);
            // Another broker led first: nothing to stop before it replicates.
            one_leads || cluster.leader(0).is_some_and(|l| l != 1)
        },
    )
    .await;
    cluster.stop(1).await;
    cluster.net.heal();
    let started = Instant::now();
    let what = "a leader of partition 0 among brokers 2 and 3 after broker 1 stopped";
    let leader = wait_until(Duration::from_secs(20), what, async || {
        let leaders: Vec<Option<u64>> = [2, 3]
            .iter()
            .map(|id| {
                cluster
                    .node(*id)
                    .and_then(|n| n.status(TOPIC, 0).ok()?.leader)
            })
            .collect();
        if let [Some(a), Some(b)] = leaders[..]
            && a == b
            && a != 1
        {
            Ok(a)
        } else {
            Err(cluster.dump())
        }
    })
    .await;
    eprintln!(
        "broker {leader} leads partition 0 {:?} after broker 1 stopped",
        started.elapsed()
    );
    let client = producer_client(&cluster.addrs, 0).await;
    let written = client
        .send(TOPIC, 0, &[Record::new(&b"formed"[..])])
        .await
        .unwrap();
    assert_eq!(written.base_offset.get(), 0);
    cluster.shutdown().await;
}

/// A follower behind a slow link (a slow network, or a slow disk under it) still takes
/// batches of `batch_bytes_max` and catches up from 16 MiB behind. Each AppendEntries needs
/// longer to arrive than the deadline openraft gives a heartbeat (75 ms here): every link
/// carries 16 MiB/s, so a 4 MiB batch takes 250 ms and a catch-up request of 16 MiB a second.
/// With a fixed deadline, the leader resent the same entries forever and no write was
/// acknowledged (the fault schedules at real sizes stalled so on a loaded CI machine).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replication_over_a_slow_link_carries_full_size_batches_and_catches_up() {
    let mut log = LogConfig::default();
    log.segment_bytes = 16 << 20;
    let mut cluster = Cluster::start_sized(3, Durability::Fsync, None, log.clone()).await;
    let leader = wait_leader_of(&cluster, 0).await;
    let behind = (1..=3).find(|id| *id != leader).unwrap();
    cluster.stop(behind).await;
    cluster.net.set_link_rate(16 << 20);
    let mut config = ClientConfig::default();
    config.record_bytes_max = log.record_bytes_max;
    config.batch_bytes_max = log.batch_bytes_max;
    let client = Client::connect(&cluster.addrs, config).await.unwrap();
    // Four records of 1000 KiB fill a batch of 4 MiB; four batches make 16 MiB.
    let mut sent = Vec::new();
    for batch in 0..4u64 {
        let records: Vec<Record> = (0..4u64)
            .map(|i| Record::new(Op::payload_sized(9, batch * 4 + i, 1000 << 10)))
            .collect();
        let started = Instant::now();
        let delivered = client.send(TOPIC, 0, &records).await;
        let delivered = delivered.unwrap_or_else(|e| {
            panic!(
                "batch {batch} over a slow link: {e} after {:?}",
                started.elapsed()
            )
        });
        eprintln!(
            "batch {batch} (4 MiB) acknowledged at offset {} in {:?}",
            delivered.base_offset.get(),
            started.elapsed()
        );
        sent.extend(records.into_iter().map(|r| r.value.to_vec()));
    }
    cluster.restart(behind).await;
    let started = Instant::now();
    cluster.converge(Duration::from_secs(60)).await;
    eprintln!(
        "broker {behind} caught up 16 MiB over the slow link in {:?}",
        started.elapsed()
    );
    cluster.net.heal();
    for replica in cluster.read_all().iter().filter(|r| r.partition == 0) {
        let values: Vec<&Vec<u8>> = replica.records.iter().map(|(_, v)| v).collect();
        assert_eq!(
            values,
            sent.iter().collect::<Vec<_>>(),
            "broker {}: partition 0 holds other records than were acknowledged",
            replica.node
        );
    }
    cluster.shutdown().await;
}
