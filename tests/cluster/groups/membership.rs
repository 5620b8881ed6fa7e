//! Members joining, leaving and sharing a topic's partitions.

use super::*;

/// Runs a group member until `stop`: poll, record what came with the generation it came in,
/// commit after "processing" (at least once).
fn spawn_member(
    member: usize,
    client: Arc<Client>,
    seen: Arc<Mutex<Vec<Seen>>>,
    assignments: Arc<Mutex<Assignments>>,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<Consumer> {
    tokio::spawn(async move {
        let mut consumer = Consumer::new(client, group_config(GROUP));
        consumer.subscribe(&[TOPIC]).unwrap();
        let deadline = Instant::now() + Duration::from_secs(120);
        while !stop.load(Ordering::Acquire) && Instant::now() < deadline {
            let records = match consumer.poll(Duration::from_millis(200)).await {
                Ok(r) => r,
                Err(e) => panic!("member {member}: poll failed: {e}"),
            };
            let generation = consumer.generation().unwrap_or(-1);
            assignments
                .lock()
                .insert(member, (generation, consumer.assignment()));
            {
                let mut seen = seen.lock();
                for r in &records {
                    seen.push(Seen {
                        member,
                        generation,
                        partition: r.partition,
                        offset: r.offset.get(),
                    });
                }
            }
            // A commit fenced by a rebalance is expected: the next poll rejoins.
            match consumer.commit().await {
                Ok(()) => {}
                Err(Error::Group { .. }) => {}
                Err(e) => panic!("member {member}: commit failed: {e}"),
            }
        }
        consumer
    })
}

/// Waits until each of `members` has consumed a record in the generation it last reported.
async fn consumed_in_generation(
    seen: &Mutex<Vec<Seen>>,
    assignments: &Mutex<Assignments>,
    members: &[usize],
) {
    wait_until(
        Duration::from_secs(30),
        "each member to consume in its generation",
        async || {
            let generations = assignments.lock().clone();
            let seen = seen.lock();
            members.iter().all(|m| {
                generations.get(m).is_some_and(|(generation, _)| {
                    seen.iter()
                        .any(|s| s.member == *m && s.generation == *generation)
                })
            })
        },
    )
    .await;
}

/// Three members over six partitions under a producer; one is killed (dropped without leaving)
/// and its partitions move to the two others; in the end every record was consumed (nothing
/// committed was skipped), no partition had two members in one generation, and the committed
/// offsets reach the end of every partition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_shares_partitions_and_a_killed_members_partitions_move_within_the_session() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = crate::local_cluster(3, dir.path(), TOPIC, 6, |_| {}).await;
    let client = Arc::new(
        Client::connect(&cluster.addrs(), ClientConfig::default())
            .await
            .unwrap(),
    );
    let seen = Arc::new(Mutex::new(Vec::new()));
    let assignments = Arc::new(Mutex::new(HashMap::new()));
    let stop = Arc::new(AtomicBool::new(false));
    // The producer: 20 records per partition per round, until told to stop.
    let producing = Arc::new(AtomicBool::new(true));
    let producer = {
        let (client, producing) = (Arc::clone(&client), Arc::clone(&producing));
        tokio::spawn(async move {
            let mut round = 0u32;
            while producing.load(Ordering::Acquire) && round < 2000 {
                for p in 0..6 {
                    let batch: Vec<Record> = (0..20)
                        .map(|i| Record::new(format!("{p}-{round}-{i}")))
                        .collect();
                    client.send(TOPIC, p, &batch).await.unwrap();
                }
                round += 1;
                // Pacing: the producer writes at a rate while the group works, not waiting on it.
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    let members: Vec<_> = (0..3)
        .map(|m| {
            spawn_member(
                m,
                Arc::clone(&client),
                Arc::clone(&seen),
                Arc::clone(&assignments),
                Arc::clone(&stop),
            )
        })
        .collect();
    // All three share the six partitions in one generation.
    let all_six = |assignments: &Assignments, of: &[usize]| {
        let gens: BTreeSet<i32> = of
            .iter()
            .filter_map(|m| assignments.get(m))
            .map(|a| a.0)
            .collect();
        let parts: Vec<(String, u32)> = of
            .iter()
            .filter_map(|m| assignments.get(m))
            .flat_map(|a| a.1.clone())
            .collect();
        let distinct: BTreeSet<_> = parts.iter().cloned().collect();
        gens.len() == 1
            && parts.len() == 6
            && distinct.len() == 6
            && of
                .iter()
                .all(|m| assignments.get(m).is_some_and(|a| !a.1.is_empty()))
    };
    wait_until(Duration::from_secs(60), "a shared assignment", async || {
        let a = assignments.lock();
        all_six(&a, &[0, 1, 2])
            .then_some(())
            .ok_or(format!("{a:?}"))
    })
    .await;
    // Each member consumes in the shared generation before one is killed.
    consumed_in_generation(&seen, &assignments, &[0, 1, 2]).await;
    // Kill member 2: its task and its consumer (heartbeats included) end without a leave.
    let mut members = members;
    let killed = members.pop().unwrap();
    killed.abort();
    let _ = killed.await;
    let killed_at = Instant::now();
    let deadline = killed_at + Duration::from_secs(30);
    wait_until(deadline, "partitions to move", async || {
        let a = assignments.lock();
        all_six(&a, &[0, 1]).then_some(()).ok_or(format!("{a:?}"))
    })
    .await;
    let moved_after = killed_at.elapsed();
    println!("a killed member's partitions moved after {moved_after:?} (session timeout 3 s)");
    // The survivors consume in their new generation before the producer stops.
    consumed_in_generation(&seen, &assignments, &[0, 1]).await;
    producing.store(false, Ordering::Release);
    producer.await.unwrap();
    // Drain: every partition consumed up to its end.
    let ends: BTreeMap<u32, u64> = client
        .describe(TOPIC)
        .await
        .unwrap()
        .iter()
        .map(|d| (d.partition.partition, d.high_watermark.get()))
        .collect();
    wait_until(
        Duration::from_secs(60),
        "every record to be consumed",
        async || {
            let seen = seen.lock();
            ends.iter().all(|(p, end)| {
                let offsets: BTreeSet<u64> = seen
                    .iter()
                    .filter(|s| s.partition == *p)
                    .map(|s| s.offset)
                    .collect();
                offsets.len() as u64 == *end
            })
        },
    )
    .await;
    // Committed offsets reach the ends (the survivors commit after every poll).
    let what = format!("committed offsets to reach the ends {ends:?}");
    wait_until(Duration::from_secs(30), &what, async || {
        let committed = client.committed_offsets(GROUP).await.unwrap();
        let all = ends
            .iter()
            .all(|(p, end)| committed.get(&(TOPIC.to_string(), *p)) == Some(&Offset(*end)));
        all.then_some(()).ok_or(format!("committed {committed:?}"))
    })
    .await;
    stop.store(true, Ordering::Release);
    for m in members {
        m.await.unwrap().close().await.unwrap();
    }
    // No (generation, partition) was consumed by two members.
    let seen = std::mem::take(&mut *seen.lock());
    let mut owners: BTreeMap<(i32, u32), BTreeSet<usize>> = BTreeMap::new();
    for s in seen.iter() {
        owners
            .entry((s.generation, s.partition))
            .or_default()
            .insert(s.member);
    }
    for ((generation, partition), who) in &owners {
        assert_eq!(
            who.len(),
            1,
            "generation {generation}, partition {partition}: {who:?}"
        );
    }
    let redelivered = seen.len() as u64 - ends.values().sum::<u64>();
    println!(
        "{} records consumed ({} again after the kill, at least once), {} generations",
        seen.len(),
        redelivered,
        owners.keys().map(|k| k.0).collect::<BTreeSet<_>>().len()
    );
    drop(client);
    cluster.shutdown().await.unwrap();
}

/// A member that is slow to come back to `poll` during a rebalance keeps its session by its
/// heartbeats: the rebalance waits for it (up to the rebalance timeout), rather than expiring it
/// after the session timeout and rebalancing again when it returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_slow_to_rejoin_keeps_its_session_until_the_rebalance_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = crate::local_cluster(1, dir.path(), TOPIC, 2, |_| {}).await;
    let client = Arc::new(
        Client::connect(&cluster.addrs(), ClientConfig::default())
            .await
            .unwrap(),
    );
    let group = "slow";
    let mut slow = Consumer::new(Arc::clone(&client), group_config(group)); // session 3 s
    slow.subscribe(&[TOPIC]).unwrap();
    joined(&mut slow).await;
    let first = slow.generation().unwrap();
    // A second member joins; `slow` does not poll for 5 s, longer than its session.
    let mut other = Consumer::new(Arc::clone(&client), group_config(group));
    other.subscribe(&[TOPIC]).unwrap();
    let joined = |c: &Consumer| c.generation().is_some();
    let joining = tokio::spawn(poll_until_owned(other, "a generation joined", joined));
    // Not waiting for anything: staying away from `poll` longer than the session is the subject.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let info = client.describe_group(group).await.unwrap();
    assert_eq!(info.state, "PreparingRebalance", "{info:?}");
    assert_eq!(
        info.members.len(),
        2,
        "the slow member was not expired: {info:?}"
    );
    // It polls again: one rebalance, both in it.
    poll_until(&mut slow, "a new generation", |c| {
        c.generation().is_some_and(|g| g != first)
    })
    .await;
    let other = joining.await.unwrap();
    assert_eq!(slow.generation(), other.generation());
    assert_eq!(slow.generation(), Some(first + 1), "one rebalance");
    assert_eq!(slow.assignment().len() + other.assignment().len(), 2);
    slow.close().await.unwrap();
    other.close().await.unwrap();
    drop(client);
    cluster.shutdown().await.unwrap();
}

/// At a size groups meet: 50 members over 100 partitions form one generation in which every
/// partition has exactly one owner; when 25 of them leave, the other 25 take every partition
/// over in the next.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_members_share_a_hundred_partitions_and_half_of_them_take_over_from_the_rest() {
    const MEMBERS: usize = 50;
    let dir = tempfile::tempdir().unwrap();
    let cluster = crate::local_cluster(1, dir.path(), TOPIC, 100, |_| {}).await;
    let client = Arc::new(
        Client::connect(&cluster.addrs(), ClientConfig::default())
            .await
            .unwrap(),
    );
    let group = "crowd";
    let stop = Arc::new(AtomicBool::new(false));
    let assignments: Arc<Mutex<Assignments>> = Arc::default();
    let spawn = |m: usize, leave: Arc<AtomicBool>| {
        let (client, assignments) = (Arc::clone(&client), Arc::clone(&assignments));
        tokio::spawn(async move {
            let mut c = Consumer::new(client, group_config(group));
            c.subscribe(&[TOPIC]).unwrap();
            let deadline = Instant::now() + Duration::from_secs(120);
            while !leave.load(Ordering::Acquire) && Instant::now() < deadline {
                c.poll(Duration::from_millis(100)).await.unwrap();
                assignments
                    .lock()
                    .insert(m, (c.generation().unwrap_or(-1), c.assignment()));
            }
            assignments.lock().remove(&m);
            c.close().await.unwrap();
        })
    };
    let early = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = (0..MEMBERS)
        .map(|m| {
            spawn(
                m,
                if m % 2 == 0 {
                    Arc::clone(&early)
                } else {
                    Arc::clone(&stop)
                },
            )
        })
        .collect();
    // One generation, every partition owned once, by `expected` members.
    let settled = |expected: usize| {
        let a = assignments.lock();
        let gens: BTreeSet<i32> = a.values().map(|v| v.0).collect();
        let owned: Vec<&(String, u32)> = a.values().flat_map(|v| v.1.iter()).collect();
        let distinct: BTreeSet<&(String, u32)> = owned.iter().copied().collect();
        (a.len() == expected
            && gens.len() == 1
            && !gens.contains(&-1)
            && owned.len() == 100
            && distinct.len() == 100)
            .then(|| *gens.iter().next().unwrap())
    };
    let started = Instant::now();
    let first = wait_until(
        Duration::from_secs(60),
        "a settled generation",
        async || settled(MEMBERS).ok_or(format!("{} members", assignments.lock().len())),
    )
    .await;
    println!(
        "{MEMBERS} members settled in {:?} (generation {first})",
        started.elapsed()
    );
    early.store(true, Ordering::Release);
    let left = Instant::now();
    let second = wait_until(
        Duration::from_secs(60),
        "the rest to take over",
        async || settled(MEMBERS / 2).filter(|g| *g > first),
    )
    .await;
    println!(
        "half left: the others own every partition after {:?} (generation {second})",
        left.elapsed()
    );
    stop.store(true, Ordering::Release);
    for t in tasks {
        t.await.unwrap();
    }
    let info = client.describe_group(group).await.unwrap();
    assert_eq!(info.state, "Empty", "{info:?}");
    drop(client);
    cluster.shutdown().await.unwrap();
}

/// A topic a group consumes grows (CreatePartitions): its coordinator rebalances the group,
/// and the member takes the new partitions in and reads what is written to them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_takes_in_the_partitions_its_topic_grows_by() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = crate::local_cluster(3, dir.path(), TOPIC, 1, |_| {}).await;
    let client = Arc::new(
        Client::connect(&cluster.addrs(), ClientConfig::default())
            .await
            .unwrap(),
    );
    client.create_topic("growing", 1, 3).await.unwrap();
    let mut consumer = Consumer::new(Arc::clone(&client), group_config("growers"));
    consumer.subscribe(&["growing"]).unwrap();
    poll_until(&mut consumer, "the member to hold partition 0", |c| {
        c.assignment() == vec![("growing".to_string(), 0)]
    })
    .await;
    client.create_partitions("growing", 3).await.unwrap();
    poll_until(
        &mut consumer,
        "the member to hold the three partitions",
        |c| c.assignment().len() == 3,
    )
    .await;
    for p in 1..3 {
        client
            .send("growing", p, &[Record::new(format!("new-{p}"))])
            .await
            .unwrap();
    }
    let read = Arc::new(Mutex::new(BTreeSet::new()));
    wait_until(
        Duration::from_secs(30),
        "the records of the new partitions",
        async || {
            for r in consumer.poll(Duration::from_millis(200)).await.unwrap() {
                read.lock().insert(r.partition);
            }
            let got = read.lock().clone();
            if got.contains(&1) && got.contains(&2) {
                Ok(())
            } else {
                Err(format!("read from {got:?}"))
            }
        },
    )
    .await;
    consumer.close().await.unwrap();
    drop(client);
    cluster.shutdown().await.unwrap();
}
