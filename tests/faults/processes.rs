//! `replog node` processes killed (SIGKILL) and paused (SIGSTOP) while clients write, at random
//! and, for a leader paused until its successor committed more, on purpose: nothing
//! acknowledged is lost or doubled, checked against every replica's files.

use super::*;

/// Every committed record of `partition` on the broker at `addr`.
async fn read_replica(
    client: &Client,
    addr: SocketAddr,
    partition: u32,
) -> replog::Result<Vec<(u64, Vec<u8>)>> {
    let mut out = Vec::new();
    let mut next = Offset(0);
    // Bounded: each pass moves `next` forward or ends.
    loop {
        let batches = client
            .fetch(TOPIC, partition, next, 1 << 20, Some(addr.into()))
            .await?;
        if batches.is_empty() {
            return Ok(out);
        }
        for b in &batches {
            for (o, r) in b.records() {
                if o >= next {
                    out.push((o.get(), r.value.to_vec()));
                    next = Offset(o.get() + 1);
                }
            }
        }
    }
}

/// Every replica of every partition, read over the wire from each broker at `addrs`, once each
/// holds as many committed records as its leader's high watermark (at most 60 s).
async fn converged(addrs: &[SocketAddr], what: &str) -> Vec<Replica> {
    let client = Client::connect(addrs, ClientConfig::default())
        .await
        .unwrap();
    wait_until(Duration::from_secs(60), what, async || {
        let mut replicas = Vec::new();
        let mut settled = true;
        for partition in 0..PARTITIONS {
            let hw = match client.describe(TOPIC).await {
                Ok(d) if d[partition as usize].leader.is_some() => {
                    d[partition as usize].high_watermark.get()
                }
                _ => {
                    settled = false;
                    continue;
                }
            };
            for (node, addr) in (1u64..).zip(addrs) {
                match read_replica(&client, *addr, partition).await {
                    Ok(records) => {
                        settled &= records.len() as u64 == hw;
                        replicas.push(Replica {
                            node,
                            partition,
                            records,
                        });
                    }
                    Err(_) => settled = false,
                }
            }
        }
        settled.then_some(replicas)
    })
    .await
}

/// Three broker processes SIGKILLed (then restarted from their directories) and
/// SIGSTOPped/SIGCONTed at random under four producers for `FAULT_PROCESS_SECS` seconds
/// (default 60), then converged and checked. Never more than one broker down or paused at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_processes_killed_and_paused_at_random_lose_and_duplicate_nothing() {
    use rustix::process::Signal;
    let seed = env_u64("FAULT_SEED", 7);
    let secs = env_u64("FAULT_PROCESS_SECS", 60);
    let mut rng = Rng::new(seed);
    let dir = tempfile::tempdir().unwrap();
    let addrs = process_addrs(3);
    let mut brokers: Vec<Option<Broker>> = (1..=3)
        .map(|id| Some(spawn_process(id, &addrs, dir.path())))
        .collect();
    let mut timeline = Timeline::new(Instant::now());
    let end = Instant::now() + Duration::from_secs(secs);
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let losses = Arc::new(AtomicU64::new(0));
            tokio::spawn(produce_until(
                addrs.clone(),
                p,
                u64::MAX,
                seed,
                move || Instant::now() >= end,
                losses,
            ))
        })
        .collect();
    let (mut kills, mut pauses) = (0, 0);
    // Bounded by `end`; each pass sleeps at least 300 ms.
    while Instant::now() < end {
        // Pacing the faults at random: the chaos is the subject, not a wait.
        tokio::time::sleep(Duration::from_millis(300 + rng.below(1200))).await;
        let impaired =
            (1..=3u64).find(|id| brokers[*id as usize - 1].as_ref().is_none_or(|b| b.stopped));
        match impaired {
            // Heal the one broker that is down or paused.
            Some(id) => match brokers[id as usize - 1].as_mut() {
                Some(paused) => {
                    paused.signal(Signal::CONT);
                    timeline.note(format!("SIGCONT {id}"));
                }
                None => {
                    brokers[id as usize - 1] = Some(spawn_process(id, &addrs, dir.path()));
                    timeline.note(format!("restart {id}"));
                }
            },
            None => {
                let id = 1 + rng.below(3);
                if rng.below(2) == 0 {
                    drop(brokers[id as usize - 1].take());
                    timeline.note(format!("SIGKILL {id}"));
                    kills += 1;
                } else if let Some(b) = brokers[id as usize - 1].as_mut() {
                    b.signal(Signal::STOP);
                    timeline.note(format!("SIGSTOP {id}"));
                    pauses += 1;
                }
            }
        }
    }
    for id in 1..=3u64 {
        match brokers[id as usize - 1].as_mut() {
            Some(b) if b.stopped => b.signal(Signal::CONT),
            Some(_) => {}
            None => brokers[id as usize - 1] = Some(spawn_process(id, &addrs, dir.path())),
        }
    }
    let mut ops = Vec::new();
    for p in producers {
        ops.extend(p.await.unwrap().into_iter().map(|(op, _)| op));
    }

    let replicas = converged(&addrs, "convergence after the chaos").await;
    let summary = checked("processes", seed, &timeline, &ops, &replicas);
    eprintln!("processes: {secs} s, seed {seed}, {kills} SIGKILLs, {pauses} SIGSTOPs, {summary:?}");
}

/// Checks the history of `ops` against `replicas`: panics on a violation, after writing the
/// history (named by `test` and `seed`) to a file; else returns the summary.
fn checked(
    test: &str,
    seed: u64,
    timeline: &Timeline,
    ops: &[Op],
    replicas: &[Replica],
) -> history::Summary {
    let (violations, summary) = history::check(ops, replicas);
    let written = (!violations.is_empty())
        .then(|| write_history(test, seed, timeline, ops, replicas, &violations));
    assert!(
        violations.is_empty(),
        "seed {seed}: {} violations, first: {:?}; history in {} (the brokers' logs: \
         REPLOG_TEST_LOG_DIR=DIR)",
        violations.len(),
        &violations[..violations.len().min(10)],
        written.map_or("(not written)".into(), |p| p.display().to_string())
    );
    assert!(summary.acknowledged > 0, "some writes were acknowledged");
    summary
}

/// The leader of partition 0 as `client` describes it (waiting at most 20 s for one), with
/// its high watermark.
async fn leader_of_partition_0(client: &Client) -> (u64, u64) {
    wait_until(
        Duration::from_secs(20),
        "a leader of partition 0",
        async || {
            let d = client.describe(TOPIC).await.ok()?;
            let p0 = &d[0];
            p0.leader.map(|l| (l, p0.high_watermark.get()))
        },
    )
    .await
}

/// The case the random test found one run in three, every round: the leader of partition 0 is
/// stopped (SIGSTOP) while four producers write, with entries of its term not yet committed;
/// the other two elect a leader that commits more over those entries' places; then the old
/// leader is let go on (SIGCONT) and sends what it holds. Eight rounds, then converged and
/// checked: nothing acknowledged is lost or doubled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_paused_under_writes_and_resumed_after_its_successor_committed_loses_nothing() {
    use rustix::process::Signal;
    const ROUNDS: u32 = 8;
    let seed = env_u64("FAULT_SEED", 7);
    let mut timeline = Timeline::new(Instant::now());
    let dir = tempfile::tempdir().unwrap();
    let addrs = process_addrs(3);
    let mut brokers: Vec<Broker> = (1..=3)
        .map(|id| spawn_process(id, &addrs, dir.path()))
        .collect();
    let running = Arc::new(std::sync::atomic::AtomicBool::new(true));
    // Bounded: the producers stop once the rounds are over, or after 120 s.
    let until = Instant::now() + Duration::from_secs(120);
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let running = Arc::clone(&running);
            tokio::spawn(produce_until(
                addrs.clone(),
                p,
                u64::MAX,
                seed,
                move || !running.load(Ordering::SeqCst) || Instant::now() >= until,
                Arc::new(AtomicU64::new(0)),
            ))
        })
        .collect();
    let mut config = ClientConfig::default();
    config.request_timeout = Duration::from_millis(500);
    let watcher = wait_until(Duration::from_secs(30), "a client", async || {
        Client::connect(&addrs, config.clone()).await.ok()
    })
    .await;
    for round in 0..ROUNDS {
        let (old, paused_at) = leader_of_partition_0(&watcher).await;
        brokers[old as usize - 1].signal(Signal::STOP);
        timeline.note(format!(
            "SIGSTOP {old}, the leader at high watermark {paused_at}"
        ));
        // The successor commits at least 20 records past where the old leader stopped.
        let what = format!("round {round}: a successor of broker {old} committing more");
        wait_until(Duration::from_secs(30), &what, async || {
            let d = watcher.describe(TOPIC).await.ok()?;
            let p0 = &d[0];
            (p0.leader.is_some_and(|l| l != old) && p0.high_watermark.get() >= paused_at + 20)
                .then_some(())
        })
        .await;
        brokers[old as usize - 1].signal(Signal::CONT);
        timeline.note(format!("SIGCONT {old}"));
        // The old leader follows the new one and catches up with it (it is in sync again).
        let what = format!("round {round}: broker {old} to follow again");
        wait_until(Duration::from_secs(30), &what, async || {
            let d = watcher.describe(TOPIC).await.ok()?;
            (d[0].leader.is_some_and(|l| l != old) && d[0].isr.contains(&old)).then_some(())
        })
        .await;
    }
    running.store(false, Ordering::SeqCst);
    let mut ops = Vec::new();
    for p in producers {
        ops.extend(p.await.unwrap().into_iter().map(|(op, _)| op));
    }
    let replicas = converged(&addrs, "convergence after the pauses").await;
    let summary = checked("paused-leaders", seed, &timeline, &ops, &replicas);
    eprintln!("paused leaders: {ROUNDS} rounds, seed {seed}, {summary:?}");
}
