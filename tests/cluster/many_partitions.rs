//! Hundreds of partitions on three `replog node` processes: the broker that leads a third of
//! them is SIGKILLed while writers keep every partition busy; every partition takes writes
//! again, and every acknowledged record is still there. 300 partitions by default (the debug
//! build `cargo test` runs); `REPLOG_MANY_PARTITIONS=1000 cargo test --release --test cluster
//! many_partitions` runs a thousand.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use replog::{Client, ClientConfig};

use super::*;

const MANY: &str = "many";
/// Partitions of the topic, unless `REPLOG_MANY_PARTITIONS` says otherwise.
const MANY_PARTITIONS: u32 = 300;

/// The topic's partitions: `REPLOG_MANY_PARTITIONS`, or [`MANY_PARTITIONS`].
fn many_partitions() -> u32 {
    std::env::var("REPLOG_MANY_PARTITIONS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(MANY_PARTITIONS)
}
/// Writer tasks, each writing one record at a time to its share of the partitions in turn.
const WRITERS: u32 = 8;
/// How long a writer waits for one write before it moves on (the write may still land).
const WRITE_WAIT: Duration = Duration::from_secs(2);

/// Acknowledged records: partition → values, and the partitions acknowledged since a mark.
#[derive(Default)]
struct Acked {
    values: BTreeMap<u32, Vec<String>>,
    since_mark: Option<BTreeSet<u32>>,
}

/// Writes `partitions` in turn, one record at a time, until `stop`, noting every
/// acknowledged record in `acked`.
async fn write_until_stopped(
    client: Arc<Client>,
    partitions: Vec<u32>,
    acked: Arc<parking_lot::Mutex<Acked>>,
    stop: Arc<AtomicBool>,
) {
    // Bounded by `stop`, which the test sets within its deadlines.
    for round in 0u64.. {
        for &p in &partitions {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            let value = format!("{p}-{round}");
            let record = [Record::new(value.clone())];
            let sent = client.send(MANY, p, &record);
            if let Ok(Ok(_)) = tokio::time::timeout(WRITE_WAIT, sent).await {
                let mut acked = acked.lock();
                acked.values.entry(p).or_default().push(value);
                if let Some(since) = acked.since_mark.as_mut() {
                    since.insert(p);
                }
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_leading_hundreds_of_partitions_is_sigkilled_under_writes_and_nothing_is_lost() {
    let partitions = many_partitions();
    let dir = tempfile::tempdir().unwrap();
    let addrs = process_addrs(3);
    // A heartbeat a second: a thousand Raft groups heartbeating four times as often as that
    // keep the two cores of a test machine busy on a debug build.
    let timing = [
        "--election-timeout-ms",
        "8000",
        "--heartbeat-interval-ms",
        "1000",
    ];
    let mut brokers: Vec<Option<Broker>> = (1..=3)
        .map(|id| Some(spawn_broker_with(id, &addrs, dir.path(), false, &timing)))
        .collect();
    let client = wait_until(Duration::from_secs(20), "brokers to start", async || {
        Client::connect(&addrs, ClientConfig::default()).await
    })
    .await;
    let client = Arc::new(client);
    let created = Instant::now();
    // The call waits a while for the leaders, then says so; the wait below goes on.
    match client.create_topic(MANY, partitions, 3).await {
        Ok(_) | Err(Error::Timeout { .. }) => {}
        Err(e) => panic!("{e}"),
    }
    let leaders: Vec<u64> = wait_until(
        Duration::from_secs(120),
        "every partition to have a leader",
        async || {
            let described = client.describe(MANY).await.map_err(|e| e.to_string())?;
            let leaders: Option<Vec<u64>> = described.iter().map(|p| p.leader).collect();
            leaders
                .filter(|l| l.len() == partitions as usize)
                .ok_or_else(|| "not yet".to_string())
        },
    )
    .await;
    eprintln!(
        "{partitions} partitions led {:?} after creation",
        created.elapsed()
    );
    let victim = leaders[0];
    let led = leaders.iter().filter(|l| **l == victim).count();
    assert!(
        led >= partitions as usize / 10,
        "broker {victim} leads only {led} partitions"
    );

    let acked = Arc::new(parking_lot::Mutex::new(Acked::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let share = (w..partitions).step_by(WRITERS as usize).collect();
            tokio::spawn(write_until_stopped(
                Arc::clone(&client),
                share,
                Arc::clone(&acked),
                Arc::clone(&stop),
            ))
        })
        .collect();
    wait_until(
        Duration::from_secs(60),
        "every partition written once",
        async || {
            let n = acked.lock().values.len();
            (n == partitions as usize)
                .then_some(())
                .ok_or(format!("{n} written"))
        },
    )
    .await;

    // SIGKILL the victim under the writers; from here, every partition must take writes again.
    acked.lock().since_mark = Some(BTreeSet::new());
    drop(brokers[victim as usize - 1].take());
    wait_until(
        Duration::from_secs(120),
        "every partition written after the SIGKILL",
        async || {
            let missing: Vec<u32> = {
                let acked = acked.lock();
                let since = acked.since_mark.as_ref().unwrap();
                (0..partitions).filter(|p| !since.contains(p)).collect()
            };
            if missing.is_empty() {
                return Ok(());
            }
            let described = client.describe(MANY).await.map_err(|e| e.to_string())?;
            let seen: Vec<String> = missing
                .iter()
                .take(5)
                .map(|p| format!("{:?}", described[*p as usize]))
                .collect();
            Err(format!(
                "{} not written, among them {seen:?}",
                missing.len()
            ))
        },
    )
    .await;
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.await.unwrap();
    }

    // Every acknowledged record is on the partition's new leader.
    let acked = std::mem::take(&mut acked.lock().values);
    let total: usize = acked.values().map(Vec::len).sum();
    for (p, values) in &acked {
        let stored: BTreeSet<String> = wait_until(
            Duration::from_secs(20),
            "a read of the partition",
            async || {
                let batches = client
                    .fetch(MANY, *p, Offset(0), 16 << 20, None)
                    .await
                    .map_err(|e| e.to_string())?;
                Ok::<_, String>(
                    batches
                        .iter()
                        .flat_map(|b| b.records())
                        .map(|(_, r)| String::from_utf8_lossy(&r.value).into_owned())
                        .collect(),
                )
            },
        )
        .await;
        let lost: Vec<&String> = values.iter().filter(|v| !stored.contains(*v)).collect();
        assert!(
            lost.is_empty(),
            "partition {p} lost acknowledged records {lost:?} (of {total})"
        );
    }
}
