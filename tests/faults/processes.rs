//! `replog node` processes killed (SIGKILL) and paused (SIGSTOP) at random while clients write:
//! nothing acknowledged is lost or doubled, checked against every replica's files.

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
                Some(end),
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

    // Converge: every replica holds as many committed records as the leader's high watermark.
    let client = Client::connect(&addrs, ClientConfig::default())
        .await
        .unwrap();
    let what = "convergence after the chaos";
    let replicas = wait_until(Duration::from_secs(60), what, async || {
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
            for (node, addr) in (1u64..).zip(&addrs) {
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
    .await;
    let (violations, summary) = history::check(&ops, &replicas);
    eprintln!("processes: {secs} s, seed {seed}, {kills} SIGKILLs, {pauses} SIGSTOPs, {summary:?}");
    let written = (!violations.is_empty())
        .then(|| write_history(seed, &timeline, &ops, &replicas, &violations));
    assert!(
        violations.is_empty(),
        "seed {seed}: {} violations, first: {:?}; history in {} (the brokers' logs: \
         REPLOG_TEST_LOG_DIR=DIR)",
        violations.len(),
        &violations[..violations.len().min(10)],
        written.map_or("(not written)".into(), |p| p.display().to_string())
    );
    assert!(summary.acknowledged > 0, "some writes were acknowledged");
}
