//! Seeded fault schedules on in-process brokers (stops, restarts, power losses, lossy links):
//! every history is checked, and a failing seed can be replayed alone or soaked.

use super::*;

/// Runs one schedule and checks its history; panics with the seed on a violation.
async fn schedule(
    seed: u64,
    nodes: usize,
    appends: u64,
    durability: Durability,
    created: Option<u32>,
) -> Report {
    let mut rng = Rng::new(seed);
    let mut cluster = Cluster::start_with(nodes, durability, created).await;
    let mut report = Report::default();
    let per_producer = appends.div_ceil(u64::from(PRODUCERS));
    let held = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let addrs = cluster.addrs.clone();
            let losses = Arc::clone(&cluster.power_losses);
            let held = Arc::clone(&held);
            // The last producer pipelines through `Producer`; the others send one at a time.
            if p + 1 == PRODUCERS {
                let producer = produce_pipelined(addrs, p, per_producer, seed, 16, losses);
                tokio::spawn(HELD.scope(held, producer))
            } else {
                tokio::spawn(HELD.scope(held, produce(addrs, p, per_producer, seed, losses)))
            }
        })
        .collect();
    let tolerated = (nodes - 1) / 2;
    // Faults while the producers run; bounded by the producers' own deadlines.
    let started = Instant::now();
    let mut timeline = Timeline::new(started);
    while !producers.iter().all(|p| p.is_finished()) {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "seed {seed}: producers hang"
        );
        // Pacing the faults at random: the faults are the subject, not a wait.
        tokio::time::sleep(Duration::from_millis(100 + rng.below(300))).await;
        let down = cluster.down();
        let mut impaired = down.clone();
        impaired.extend(cluster.impaired.iter().filter(|id| !down.contains(id)));
        let may_impair = impaired.len() < tolerated;
        let ids: Vec<u64> = (1..=nodes as u64).collect();
        match rng.below(8) {
            0 | 1 if may_impair => {
                let victim = if rng.below(2) == 0 {
                    let p = rng.below(u64::from(PARTITIONS)) as u32;
                    cluster.leader(p)
                } else {
                    None
                };
                report.leader_stops += usize::from(victim.is_some());
                let live: Vec<u64> = cluster
                    .live()
                    .into_iter()
                    .filter(|id| !impaired.contains(id))
                    .collect();
                let victim = victim.unwrap_or_else(|| live[rng.below(live.len() as u64) as usize]);
                // Under `Replicated`, half the stops are power losses. The other brokers
                // converge before the one that lost power returns, and it catches up before
                // the next fault: a second failure inside that window can lose a committed
                // write (the contract allows it; soak seed 1087 found it), which the checker
                // here would count as a loss. The replica that still holds such a write
                // rebuilds itself from the leader: see
                // `a_replica_holding_a_committed_write_the_cluster_lost_rebuilds_from_the_leader`.
                if durability == Durability::Replicated && rng.below(2) == 0 {
                    report.bytes_lost += cluster.lose_power(victim).await;
                    report.power_losses += 1;
                    timeline.note(format!("power loss of {victim}, heal, converge, restart"));
                    cluster.net.heal();
                    cluster.impaired.clear();
                    cluster.converge(Duration::from_secs(30)).await;
                    cluster.restart(victim).await;
                    report.restarts += 1;
                    cluster.converge(Duration::from_secs(30)).await;
                } else {
                    cluster.stop(victim).await;
                    timeline.note(format!("stop {victim}"));
                }
                report.stops += 1;
            }
            2 if may_impair => {
                // Isolate one broker, the leader of a partition half the time.
                let victim = match rng.below(2) {
                    0 => cluster.leader(rng.below(u64::from(PARTITIONS)) as u32),
                    _ => None,
                }
                .unwrap_or_else(|| ids[rng.below(ids.len() as u64) as usize]);
                let others: Vec<u64> = ids.iter().copied().filter(|i| *i != victim).collect();
                cluster.net.partition(&[victim], &others);
                timeline.note(format!("isolate {victim}"));
                cluster.impaired.push(victim);
                report.isolations += 1;
            }
            3 if may_impair => {
                // One way: `from` still hears `to`, but `to` no longer hears `from`.
                let from = ids[rng.below(ids.len() as u64) as usize];
                let to =
                    ids[(from as usize + rng.below(ids.len() as u64 - 1) as usize) % ids.len()];
                cluster.net.cut(from, to);
                timeline.note(format!("cut {from} -> {to}"));
                cluster.impaired.push(to);
                report.one_way_cuts += 1;
            }
            4 => {
                let (loss, delay) = (rng.below(200) as u32, rng.below(30));
                cluster.net.set_loss(loss);
                cluster.net.set_delay(0, delay);
                timeline.note(format!("loss {loss}/1000, delay up to {delay} ms"));
                report.lossy_periods += 1;
            }
            5 | 6 if !down.is_empty() => {
                let id = down[rng.below(down.len() as u64) as usize];
                cluster.restart(id).await;
                timeline.note(format!("restart {id}"));
                report.restarts += 1;
            }
            _ => {
                cluster.net.heal();
                cluster.impaired.clear();
                timeline.note("heal".into());
                report.heals += 1;
            }
        }
        // Now and then a quiet period, whatever faults are in effect: with nothing written,
        // partitions whose replicas all hold their log go quiet (150 ms), and the next
        // writes, stops and cuts meet them quiet.
        if rng.below(5) == 0 {
            let quiet = Duration::from_millis(300 + rng.below(600));
            timeline.note(format!("producers held back for {quiet:?}"));
            held.store(true, Ordering::SeqCst);
            tokio::time::sleep(quiet).await;
            report.quiet_replicas += cluster
                .local
                .nodes()
                .map(|n| n.quiet_replicas())
                .sum::<usize>();
            report.dormant_replicas += cluster
                .local
                .nodes()
                .map(|n| n.dormant_replicas())
                .sum::<usize>();
            held.store(false, Ordering::SeqCst);
            report.quiet_periods += 1;
        }
    }
    // An acknowledged send made before the last power loss may have been lost with it.
    let losses = cluster.power_losses.load(Ordering::SeqCst);
    let mut ops = Vec::new();
    for p in producers {
        ops.extend(p.await.unwrap().into_iter().map(|(mut op, sent_after)| {
            if let Outcome::Ok { offset } = op.outcome
                && sent_after < losses
            {
                op.outcome = Outcome::OkLossy { offset };
            }
            op
        }));
    }
    // Heal, converge, read everything back, check.
    cluster.net.heal();
    cluster.impaired.clear();
    for id in cluster.down() {
        cluster.restart(id).await;
        report.restarts += 1;
    }
    timeline.note("producers done; heal, restart every stopped broker, converge".into());
    cluster.converge(Duration::from_secs(30)).await;
    let replicas = cluster.read_all();
    let (violations, summary) = history::check(&ops, &replicas);
    let written = (!violations.is_empty())
        .then(|| write_history("schedule", seed, &timeline, &ops, &replicas, &violations));
    for v in violations.iter().take(3) {
        if let history::Violation::Reordered {
            producer,
            partition,
        } = v
        {
            let r = replicas.iter().find(|r| r.partition == *partition).unwrap();
            let mut last = 0;
            for (offset, payload) in &r.records {
                let s = String::from_utf8_lossy(payload);
                let Some((p, n)) = s.split_once(':') else {
                    continue;
                };
                if p.parse::<u32>().ok() != Some(*producer) {
                    continue;
                }
                let n: u64 = n.parse().unwrap();
                let op = ops.iter().find(|o| o.producer == *producer && o.n == n);
                if n < last {
                    eprintln!("  REORDER at offset {offset}: n {n} after {last}: {op:?}");
                    let prev = ops.iter().find(|o| o.producer == *producer && o.n == last);
                    eprintln!("     previous: {prev:?}");
                }
                last = last.max(n);
            }
        }
        if let history::Violation::Duplicate { producer, n } = v {
            let payload = Op::payload(*producer, *n);
            let op = ops.iter().find(|o| o.producer == *producer && o.n == *n);
            eprintln!("seed {seed}: {v:?}: sent as {op:?}");
            for r in &replicas {
                let at: Vec<u64> = r
                    .records
                    .iter()
                    .filter(|(_, p)| *p == payload)
                    .map(|(o, _)| *o)
                    .collect();
                eprintln!(
                    "  broker {} partition {}: offsets {at:?}",
                    r.node, r.partition
                );
            }
        }
    }
    assert!(
        violations.is_empty(),
        "seed {seed} ({nodes} nodes): {} violations, first: {:?}; history, faults and replicas \
         in {}",
        violations.len(),
        &violations[..violations.len().min(10)],
        written.map_or("(not written)".into(), |p| p.display().to_string())
    );
    report.summary = summary;
    cluster.shutdown().await;
    report
}

/// Runs `count` schedules from `first_seed` on; every third one on five brokers, every fourth
/// with `Durability::Replicated`.
async fn run_schedules(first_seed: u64, count: u64) {
    // `FAULT_LOG=<filter>` prints the brokers' log lines of a failing run (`replog=warn`).
    if let Ok(filter) = std::env::var("FAULT_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_test_writer()
            .try_init();
    }
    let mut total = Report::default();
    let started = Instant::now();
    // `FAULT_CPU_HOG=<threads>` runs the schedules beside that many spinning threads: D0 (a
    // pipelined producer's records reordered) showed only on a loaded machine.
    let _hog = CpuHog::start(env_u64("FAULT_CPU_HOG", 0) as usize);
    for seed in first_seed..first_seed + count {
        let nodes = if seed % 3 == 2 { 5 } else { 3 };
        let t = Instant::now();
        // Every fourth schedule acknowledges on a quorum's page cache (`Replicated`). Its
        // contract allows losing acknowledged writes only when a quorum loses power at once;
        // brokers stopped or crashed here keep the page cache, so the check is the same: nothing
        // acknowledged may be lost.
        let durability = if seed % 4 == 3 {
            Durability::Replicated
        } else {
            Durability::Fsync
        };
        // Every other schedule creates its topic through the metadata Raft group, with three
        // replicas per partition (on five brokers, each partition on three of them).
        let created = (seed % 2 == 0).then_some(3);
        let r = schedule(seed, nodes, 500, durability, created).await;
        eprintln!(
            "seed {seed}: {nodes} nodes, {durability:?}, topic created: {created:?}, {r:?} in {:?}",
            t.elapsed()
        );
        total.stops += r.stops;
        total.leader_stops += r.leader_stops;
        total.restarts += r.restarts;
        total.isolations += r.isolations;
        total.one_way_cuts += r.one_way_cuts;
        total.lossy_periods += r.lossy_periods;
        total.quiet_periods += r.quiet_periods;
        total.quiet_replicas += r.quiet_replicas;
        total.dormant_replicas += r.dormant_replicas;
        total.heals += r.heals;
        total.power_losses += r.power_losses;
        total.bytes_lost += r.bytes_lost;
        total.summary.lost_as_allowed += r.summary.lost_as_allowed;
        total.summary.acknowledged += r.summary.acknowledged;
        total.summary.failed += r.summary.failed;
        total.summary.unknown += r.summary.unknown;
        total.summary.unknown_applied += r.summary.unknown_applied;
        total.summary.records_read += r.summary.records_read;
    }
    eprintln!("{count} schedules in {:?}: {total:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_schedules_lose_and_duplicate_nothing_a() {
    run_schedules(1, env_u64("FAULT_SCHEDULES", 25)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_schedules_lose_and_duplicate_nothing_b() {
    run_schedules(1_000_001, env_u64("FAULT_SCHEDULES", 25)).await;
}

/// Replays one schedule: `FAULT_SEED=<seed>`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay() {
    if let Ok(seed) = std::env::var("FAULT_SEED") {
        run_schedules(seed.parse().expect("FAULT_SEED is a number"), 1).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "soak: thousands of schedules"]
async fn soak() {
    run_schedules(
        env_u64("FAULT_SOAK_SEED", 5_000_000),
        env_u64("FAULT_SOAK", 1000),
    )
    .await;
}
