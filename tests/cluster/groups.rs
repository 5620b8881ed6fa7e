//! Consumer groups: members sharing a topic's partitions, a killed member's
//! partitions moving to the others within the session timeout, commits fenced by generation,
//! committed offsets surviving the coordinator's failover, and a restarted consumer resuming
//! at its group's committed offset.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use replog::{
    Assignor, Client, ClientConfig, Consumer, ConsumerConfig, Error, GroupError, Offset, Record,
    StartAt,
};

const TOPIC: &str = "grouped";
const GROUP: &str = "workers";

fn group_config(group: &str) -> ConsumerConfig {
    let mut c = ConsumerConfig::default();
    c.group_id = Some(group.into());
    c.session_timeout = Duration::from_secs(3);
    c.heartbeat_interval = Duration::from_millis(300);
    c.rebalance_timeout = Duration::from_secs(10);
    c.auto_offset_reset = StartAt::Beginning;
    c.auto_commit_interval = None;
    c.max_wait = Duration::from_millis(100);
    c
}

/// Each member's last seen generation and partitions.
type Assignments = HashMap<usize, (i32, Vec<(String, u32)>)>;

/// One consumed record: who, in which generation, where.
#[derive(Clone, Copy, Debug)]
struct Seen {
    member: usize,
    generation: i32,
    partition: u32,
    offset: u64,
}

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
    let deadline = Instant::now() + Duration::from_secs(60);
    while !all_six(&assignments.lock(), &[0, 1, 2]) {
        assert!(
            Instant::now() < deadline,
            "no shared assignment: {:?}",
            assignments.lock()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    // Kill member 2: its task and its consumer (heartbeats included) end without a leave.
    let mut members = members;
    let killed = members.pop().unwrap();
    killed.abort();
    let _ = killed.await;
    let killed_at = Instant::now();
    let deadline = killed_at + Duration::from_secs(30);
    while !all_six(&assignments.lock(), &[0, 1]) {
        assert!(
            Instant::now() < deadline,
            "partitions did not move: {:?}",
            assignments.lock()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let moved_after = killed_at.elapsed();
    println!("a killed member's partitions moved after {moved_after:?} (session timeout 3 s)");
    tokio::time::sleep(Duration::from_secs(1)).await;
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
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let covered = {
            let seen = seen.lock();
            ends.iter().all(|(p, end)| {
                let offsets: BTreeSet<u64> = seen
                    .iter()
                    .filter(|s| s.partition == *p)
                    .map(|s| s.offset)
                    .collect();
                offsets.len() as u64 == *end
            })
        };
        if covered {
            break;
        }
        assert!(Instant::now() < deadline, "not every record was consumed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Committed offsets reach the ends (the survivors commit after every poll).
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let committed = client.committed_offsets(GROUP).await.unwrap();
        let all = ends
            .iter()
            .all(|(p, end)| committed.get(&(TOPIC.to_string(), *p)) == Some(&Offset(*end)));
        if all {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "committed {committed:?}, ends {ends:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
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

/// A commit from a member of an older generation is refused; committed offsets survive the
/// coordinator's broker going away; a consumer that starts again resumes at them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn committed_offsets_are_fenced_survive_the_coordinators_failover_and_resume_a_consumer() {
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = crate::local_cluster(3, dir.path(), TOPIC, 2, |_| {}).await;
    let client = Arc::new(
        Client::connect(&cluster.addrs(), ClientConfig::default())
            .await
            .unwrap(),
    );
    for p in 0..2 {
        let batch: Vec<Record> = (0..50).map(|i| Record::new(format!("{p}-{i}"))).collect();
        client.send(TOPIC, p, &batch).await.unwrap();
    }
    let group = "resumers";
    // The first member gives a rebalance only 2 s to see it again.
    let mut config = group_config(group);
    config.rebalance_timeout = Duration::from_secs(2);
    let mut first = Consumer::new(Arc::clone(&client), config);
    first.subscribe(&[TOPIC]).unwrap();
    let mut got = 0;
    let deadline = Instant::now() + Duration::from_secs(30);
    while got < 100 {
        assert!(Instant::now() < deadline);
        got += first.poll(Duration::from_millis(500)).await.unwrap().len();
    }
    let generation = first.generation().unwrap();
    first
        .commit_offsets(&[(TOPIC, 0, Offset(30)), (TOPIC, 1, Offset(40))])
        .await
        .unwrap();
    assert_eq!(first.committed(TOPIC, 0).await.unwrap(), Some(Offset(30)));

    // A second member makes the group rebalance. The first does not poll, so it does not
    // rejoin: the new generation goes on without it, and its commits are refused.
    let mut second = Consumer::new(Arc::clone(&client), group_config(group));
    second.subscribe(&[TOPIC]).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while second.assignment().len() < 2 {
        assert!(Instant::now() < deadline, "{:?}", second.assignment());
        second.poll(Duration::from_millis(100)).await.unwrap();
    }
    assert!(second.generation().unwrap() > generation);
    let fenced = first.commit_offsets(&[(TOPIC, 0, Offset(45))]).await;
    assert!(
        matches!(
            fenced,
            Err(Error::Group {
                error: GroupError::UnknownMemberId | GroupError::IllegalGeneration,
                ..
            })
        ),
        "{fenced:?}"
    );
    assert_eq!(first.committed(TOPIC, 0).await.unwrap(), Some(Offset(30)));
    // Once it polls, it joins again and the two share the partitions.
    let second = tokio::spawn(async move {
        let deadline = Instant::now() + Duration::from_secs(30);
        while second.assignment().len() != 1 {
            assert!(Instant::now() < deadline);
            second.poll(Duration::from_millis(100)).await.unwrap();
        }
        second
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    while first.assignment().len() != 1 {
        assert!(Instant::now() < deadline);
        first.poll(Duration::from_millis(100)).await.unwrap();
    }
    let second = second.await.unwrap();
    assert_eq!(first.generation(), second.generation());
    let info = client.describe_group(group).await.unwrap();
    assert_eq!(info.state, "Stable");
    assert_eq!(info.members.len(), 2);
    let parts: BTreeSet<(String, u32)> = info
        .members
        .iter()
        .flat_map(|m| {
            m.assignment
                .iter()
                .flat_map(|(t, ps)| ps.iter().map(move |p| (t.clone(), *p)))
        })
        .collect();
    assert_eq!(parts.len(), 2, "{info:?}");
    // An offset reset needs a group with no members.
    let reset = client
        .reset_group_offsets(group, &[(TOPIC.to_string(), 0, Some(Offset(1)))])
        .await;
    assert!(
        matches!(
            reset,
            Err(Error::Group {
                error: GroupError::NonEmptyGroup,
                ..
            })
        ),
        "{reset:?}"
    );
    // Auto-commit is off: closing commits nothing, and the offsets stay 30 and 40.
    first.close().await.unwrap();
    second.close().await.unwrap();
    let committed = client.committed_offsets(group).await.unwrap();
    assert_eq!(
        committed.values().copied().collect::<Vec<_>>(),
        vec![Offset(30), Offset(40)]
    );

    // Stop the coordinator's broker: the offsets are read back by the next coordinator.
    let coordinator = client.group_coordinator(group).await.unwrap();
    let id = broker_at(&cluster, coordinator);
    cluster.stop(id).await.unwrap();
    let survivors: Vec<SocketAddr> = cluster
        .addrs()
        .into_iter()
        .filter(|a| *a != coordinator)
        .collect();
    let client = Arc::new(
        Client::connect(&survivors, ClientConfig::default())
            .await
            .unwrap(),
    );
    let after = client.committed_offsets(group).await.unwrap();
    assert_eq!(after, committed, "committed offsets after the failover");
    assert_ne!(client.group_coordinator(group).await.unwrap(), coordinator);

    // A consumer of the group starts at the committed offsets.
    let mut again = Consumer::new(Arc::clone(&client), group_config(group));
    again.subscribe(&[TOPIC]).unwrap();
    let mut first_offsets = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while first_offsets.len() < 2 {
        assert!(Instant::now() < deadline);
        for r in again.poll(Duration::from_millis(500)).await.unwrap() {
            first_offsets.entry(r.partition).or_insert(r.offset);
        }
    }
    let resumed: BTreeMap<u32, Offset> = committed.iter().map(|((_, p), o)| (*p, *o)).collect();
    assert_eq!(first_offsets, resumed);
    again.close().await.unwrap();
    drop(client);
    cluster.shutdown().await.unwrap();
}

/// A round-robin group, and a consumer that commits for partitions it assigned itself (no
/// membership) while the group has no members; groups are listed and described.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn groups_are_listed_described_and_reset_and_round_robin_assigns() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = crate::local_cluster(1, dir.path(), TOPIC, 3, |_| {}).await;
    let client = Arc::new(
        Client::connect(&cluster.addrs(), ClientConfig::default())
            .await
            .unwrap(),
    );
    let mut manual = Consumer::new(Arc::clone(&client), group_config("manual"));
    manual
        .assign(TOPIC, Some(&[1]), StartAt::Beginning)
        .await
        .unwrap();
    assert!(
        manual.subscribe(&[TOPIC]).is_err(),
        "assign or subscribe, not both"
    );
    manual
        .commit_offsets(&[(TOPIC, 1, Offset(0))])
        .await
        .unwrap();
    assert_eq!(manual.committed(TOPIC, 1).await.unwrap(), Some(Offset(0)));
    assert_eq!(manual.committed(TOPIC, 2).await.unwrap(), None);
    client
        .reset_group_offsets("manual", &[(TOPIC.to_string(), 1, None)])
        .await
        .unwrap();
    assert_eq!(manual.committed(TOPIC, 1).await.unwrap(), None);
    let unknown = client
        .reset_group_offsets(
            "manual",
            &[("no-such-topic".to_string(), 0, Some(Offset(3)))],
        )
        .await;
    assert!(
        matches!(
            unknown,
            Err(Error::Group {
                error: GroupError::UnknownTopicOrPartition,
                ..
            })
        ),
        "{unknown:?}"
    );
    manual
        .commit_offsets(&[(TOPIC, 1, Offset(0))])
        .await
        .unwrap();

    let mut config = group_config("rr");
    config.assignors = vec![Assignor::RoundRobin];
    let mut rr = Consumer::new(Arc::clone(&client), config);
    rr.subscribe(&[TOPIC]).unwrap();
    joined(&mut rr).await;
    assert_eq!(rr.assignment().len(), 3);
    let info = client.describe_group("rr").await.unwrap();
    assert_eq!(info.protocol, "roundrobin");
    assert_eq!(info.members[0].client_id, "replog");
    assert_eq!(info.members[0].host, "/127.0.0.1");
    let listed = client.list_groups().await.unwrap();
    let names: Vec<&str> = listed.iter().map(|g| g.group.as_str()).collect();
    assert!(
        names.contains(&"rr") && names.contains(&"manual"),
        "{listed:?}"
    );
    assert_eq!(
        listed.iter().find(|g| g.group == "rr").unwrap().state,
        "Stable"
    );
    rr.close().await.unwrap();
    let info = client.describe_group("rr").await.unwrap();
    assert_eq!(info.state, "Empty");
    manual.close().await.unwrap();
    drop(client);
    cluster.shutdown().await.unwrap();
}

/// Polls `consumer` until it is a member of a complete generation (at most 30 s).
async fn joined(consumer: &mut Consumer) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while consumer.generation().is_none() {
        assert!(Instant::now() < deadline, "no generation joined");
        consumer.poll(Duration::from_millis(100)).await.unwrap();
    }
}

fn broker_at(cluster: &replog::LocalCluster, addr: SocketAddr) -> replog::NodeId {
    cluster
        .nodes()
        .find(|n| n.addr() == addr)
        .map(|n| n.id())
        .expect("a broker at the coordinator's address")
}

/// The CLI as Kafka's tools: `replog consume --group` reads a 4-partition topic in full and
/// commits what it printed; a second run resumes after it; `replog groups` lists the group,
/// describes it with kafka-consumer-groups' columns, and resets its offsets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_consumes_as_a_group_resumes_and_describes_and_resets_it() {
    const CLI_TOPIC: &str = "cli-grouped";
    let dir = tempfile::tempdir().unwrap();
    let cluster = crate::local_cluster(3, dir.path(), CLI_TOPIC, 4, |_| {}).await;
    let client = Client::connect(&cluster.addrs(), ClientConfig::default())
        .await
        .unwrap();
    for p in 0..4 {
        let batch: Vec<Record> = (0..100).map(|i| Record::new(format!("{p}-{i}"))).collect();
        client.send(CLI_TOPIC, p, &batch).await.unwrap();
    }
    let server = cluster.addrs()[2].to_string();
    let run = |args: Vec<String>| {
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            crate::cli(&args, "")
        })
    };
    let consume = || -> Vec<String> {
        [
            "consume",
            "--bootstrap-server",
            &server,
            "--topic",
            CLI_TOPIC,
            "--group",
            "cli",
            "--from-beginning",
            "--timeout-ms",
            "3000",
        ]
        .map(String::from)
        .to_vec()
    };
    let groups = |extra: &[&str]| -> Vec<String> {
        let mut v = vec![
            "groups".to_string(),
            "--bootstrap-server".into(),
            server.clone(),
        ];
        v.extend(extra.iter().map(|s| s.to_string()));
        v
    };
    let (ok, out, err) = run(consume()).await.unwrap();
    assert!(ok, "{err}");
    let mut lines: Vec<&str> = out.lines().collect();
    lines.sort_unstable();
    let mut want: Vec<String> = (0..4)
        .flat_map(|p| (0..100).map(move |i| format!("{p}-{i}")))
        .collect();
    want.sort_unstable();
    assert_eq!(lines, want, "every record of every partition, once");
    assert!(err.contains("Processed a total of 400 messages"), "{err}");

    let (ok, out, err) = run(groups(&["--describe", "--group", "cli"]))
        .await
        .unwrap();
    assert!(ok, "{err}");
    println!("{out}");
    assert!(
        out.contains("Consumer group 'cli' has no active members."),
        "{out}"
    );
    let header: Vec<&str> = out
        .lines()
        .find(|l| l.starts_with("GROUP"))
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        [
            "GROUP",
            "TOPIC",
            "PARTITION",
            "CURRENT-OFFSET",
            "LOG-END-OFFSET",
            "LAG",
            "CONSUMER-ID",
            "HOST",
            "CLIENT-ID"
        ]
    );
    let rows: Vec<Vec<&str>> = out
        .lines()
        .filter(|l| l.starts_with("cli "))
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows.len(), 4, "{out}");
    for r in &rows {
        assert_eq!(&r[3..6], ["100", "100", "0"], "{out}");
    }

    // New records only, on the next run.
    client
        .send(
            CLI_TOPIC,
            2,
            &[Record::new("late-1"), Record::new("late-2")],
        )
        .await
        .unwrap();
    let (ok, out, err) = run(consume()).await.unwrap();
    assert!(ok, "{err}");
    assert_eq!(out, "late-1\nlate-2\n");
    let (ok, out, _) = run(groups(&["--list"])).await.unwrap();
    assert!(ok);
    assert!(out.lines().any(|l| l == "cli"), "{out}");

    // A dry run changes nothing; --execute resets to the beginning.
    let reset = |execute: bool| {
        let mut a = groups(&[
            "--reset-offsets",
            "--group",
            "cli",
            "--topic",
            CLI_TOPIC,
            "--to-earliest",
        ]);
        if execute {
            a.push("--execute".into());
        }
        a
    };
    let (ok, out, err) = run(reset(false)).await.unwrap();
    assert!(ok, "{err}");
    assert!(err.contains("dry run"), "{err}");
    assert_eq!(
        out.lines().filter(|l| l.starts_with("cli ")).count(),
        4,
        "{out}"
    );
    assert_eq!(
        client.committed_offsets("cli").await.unwrap()[&(CLI_TOPIC.to_string(), 2)],
        Offset(102)
    );
    let (ok, _, err) = run(reset(true)).await.unwrap();
    assert!(ok, "{err}");
    let committed = client.committed_offsets("cli").await.unwrap();
    assert!(committed.values().all(|o| *o == Offset(0)), "{committed:?}");
    let (ok, out, _) = run(consume()).await.unwrap();
    assert!(ok);
    assert_eq!(out.lines().count(), 402);
    // A group with a live member cannot be reset.
    let mut live = Consumer::new(
        Arc::new(
            Client::connect(&cluster.addrs(), ClientConfig::default())
                .await
                .unwrap(),
        ),
        group_config("cli"),
    );
    live.subscribe(&[CLI_TOPIC]).unwrap();
    joined(&mut live).await;
    let (ok, _, err) = run(reset(true)).await.unwrap();
    assert!(!ok);
    assert!(err.contains("has live members"), "{err}");
    live.close().await.unwrap();
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
    let joining = tokio::spawn(async move {
        joined(&mut other).await;
        other
    });
    tokio::time::sleep(Duration::from_secs(5)).await;
    let info = client.describe_group(group).await.unwrap();
    assert_eq!(info.state, "PreparingRebalance", "{info:?}");
    assert_eq!(
        info.members.len(),
        2,
        "the slow member was not expired: {info:?}"
    );
    // It polls again: one rebalance, both in it.
    let deadline = Instant::now() + Duration::from_secs(30);
    while slow.generation().is_none_or(|g| g == first) {
        assert!(Instant::now() < deadline);
        slow.poll(Duration::from_millis(100)).await.unwrap();
    }
    let other = joining.await.unwrap();
    assert_eq!(slow.generation(), other.generation());
    assert_eq!(slow.generation(), Some(first + 1), "one rebalance");
    assert_eq!(slow.assignment().len() + other.assignment().len(), 2);
    slow.close().await.unwrap();
    other.close().await.unwrap();
    drop(client);
    cluster.shutdown().await.unwrap();
}

/// The offsets topic does not grow without bound: once a partition holds far more than its
/// live records, its coordinator rewrites them, and every replica purges the segments before
/// the rewrite; the committed offsets read back the same, after the coordinator's failover
/// too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_offsets_topic_is_rewritten_purged_on_every_replica_and_reads_back_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = crate::local_cluster(3, dir.path(), TOPIC, 20, |c| {
        c.log.record_bytes_max = 16 << 10;
        c.log.batch_bytes_max = 64 << 10;
        c.offsets_segment_bytes = 80 << 10;
        c.offsets_rewrite_bytes = 256 << 10;
        c.durability = replog::Durability::Replicated;
        c.offsets_topic_partitions = 1;
        c.retention_check_interval = Duration::from_millis(0); // applied below, by hand
    })
    .await;
    let client = Client::connect(&cluster.addrs(), ClientConfig::default())
        .await
        .unwrap();
    let group = "compacted";
    let rounds = 500u64;
    for round in 1..=rounds {
        let offsets: Vec<(String, u32, Option<Offset>)> = (0..20)
            .map(|p| {
                (
                    TOPIC.to_string(),
                    p,
                    Some(Offset(round * 100 + u64::from(p))),
                )
            })
            .collect();
        client.reset_group_offsets(group, &offsets).await.unwrap();
    }
    let want: BTreeMap<(String, u32), Offset> = (0..20)
        .map(|p| ((TOPIC.to_string(), p), Offset(rounds * 100 + u64::from(p))))
        .collect();
    // Every replica of the offsets partition purges what the rewrite superseded.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut starts = Vec::new();
        for node in cluster.nodes() {
            node.enforce_retention().await.unwrap();
            let status = node.status(replog::OFFSETS_TOPIC, 0).unwrap();
            starts.push((status.log_start, status.log_end));
        }
        if starts.iter().all(|(start, _)| start.get() > 0) {
            println!("offsets partition (log start, log end) on each broker: {starts:?}");
            break;
        }
        assert!(Instant::now() < deadline, "not purged: {starts:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(client.committed_offsets(group).await.unwrap(), want);
    // The next coordinator loads the rewritten partition.
    let coordinator = client.group_coordinator(group).await.unwrap();
    let id = broker_at(&cluster, coordinator);
    cluster.stop(id).await.unwrap();
    let survivors: Vec<SocketAddr> = cluster
        .addrs()
        .into_iter()
        .filter(|a| *a != coordinator)
        .collect();
    let client = Client::connect(&survivors, ClientConfig::default())
        .await
        .unwrap();
    assert_eq!(client.committed_offsets(group).await.unwrap(), want);
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
    let deadline = started + Duration::from_secs(60);
    let first = loop {
        if let Some(g) = settled(MEMBERS) {
            break g;
        }
        assert!(
            Instant::now() < deadline,
            "no settled generation: {:?}",
            assignments.lock().len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    println!(
        "{MEMBERS} members settled in {:?} (generation {first})",
        started.elapsed()
    );
    early.store(true, Ordering::Release);
    let left = Instant::now();
    let deadline = left + Duration::from_secs(60);
    let second = loop {
        match settled(MEMBERS / 2) {
            Some(g) if g > first => break g,
            _ => {}
        }
        assert!(Instant::now() < deadline, "the rest did not take over");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
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
