//! The consumer side's targets ("3 of 4"), each measured in one run and reported as a ratio
//! to a floor measured in the same run (these machines are shared and noisy):
//!
//! 1. produce-to-consume latency through the long poll, one record in flight, next to the
//!    same records' produce (replicate) latency: three brokers, `Fsync`;
//! 2. the CPU that 1,000 long-polling consumers idle at the end of their partitions cost one
//!    broker, with Kafka's default wait (500 ms) and with a 30 s wait;
//! 3. a `Consumer` reading a committed 1 GiB partition, in records/s, as a ratio of reading
//!    the same replica's log in process (`Node::read`, the `PartitionLog` read under it);
//! 4. `replog produce` of a file of 65,536 lines of 1 KiB (the process, from its start),
//!    in records/s, as a ratio of a `Producer` sending the same records in process.
//!
//! Run: `cargo build --release && cargo run --release --example consumer_targets` (about a
//! minute; `-- 256` reads a 256 MiB partition instead of 1 GiB; part 4 needs the `replog`
//! binary beside the example's directory, which `cargo build --release` puts there).

use std::sync::Arc;
use std::time::{Duration, Instant};

use replog::{
    Client, ClientConfig, Consumer, ConsumerConfig, Durability, LocalCluster, Offset, Record,
    StartAt,
};

#[path = "support/process.rs"]
mod process;
use process::cpu_seconds;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(i).copied().unwrap_or_default()
}

/// 1. One record in flight: the time from `send` to its ack, and from `send` to a
///    long-polling consumer's `poll` returning it.
async fn latency() -> replog::Result<()> {
    const TOPIC: &str = "latency";
    const N: usize = 2000;
    let dir = tempfile::tempdir()?;
    let cluster = LocalCluster::start(3, dir.path(), |c| {
        c.topics = vec![(TOPIC.into(), 1)];
    })
    .await?;
    cluster
        .wait_for_leaders(TOPIC, 1, Duration::from_secs(30))
        .await?;
    let client = Arc::new(Client::connect(&cluster.addrs(), ClientConfig::default()).await?);
    let mut consumer = Consumer::new(Arc::clone(&client), ConsumerConfig::default());
    consumer.assign(TOPIC, None, StartAt::End).await?;
    let (mut acked, mut consumed) = (Vec::with_capacity(N), Vec::with_capacity(N));
    for i in 0..N {
        // The producer and the consumer run at once: the commit answers the produce and
        // wakes the long poll.
        let sent = Instant::now();
        let sending = {
            let client = Arc::clone(&client);
            tokio::spawn(async move {
                let r = client.send(TOPIC, 0, &[Record::new(format!("r{i}"))]).await;
                r.map(|_| sent.elapsed())
            })
        };
        // Bounded by the poll timeouts: the record is committed, so it comes.
        let mut got = Vec::new();
        for _ in 0..100 {
            got = consumer.poll(Duration::from_secs(1)).await?;
            if !got.is_empty() {
                break;
            }
        }
        assert_eq!(got.len(), 1, "record {i} not consumed");
        consumed.push(sent.elapsed());
        acked.push(sending.await.expect("the send task")?);
    }
    acked.sort_unstable();
    consumed.sort_unstable();
    let (a50, a99) = (percentile(&acked, 0.5), percentile(&acked, 0.99));
    let (c50, c99) = (percentile(&consumed, 0.5), percentile(&consumed, 0.99));
    println!(
        "1. produce-to-consume, one record in flight ({N} records, 3 brokers, Fsync):\n   \
         acked (replicate) p50 {a50:?} p99 {a99:?}\n   consumed        p50 {c50:?} p99 {c99:?}\n   \
         ratio consumed/acked: p50 {:.2}, p99 {:.2}",
        c50.as_secs_f64() / a50.as_secs_f64(),
        c99.as_secs_f64() / a99.as_secs_f64()
    );
    drop(consumer);
    drop(client);
    cluster.shutdown().await
}

/// 2. 1,000 consumers long-polling at the end of 10 partitions of one broker, 20 per client
///    connection: the process's CPU over 10 s, less the idle broker's own.
async fn idle_consumers() -> replog::Result<()> {
    const TOPIC: &str = "idle";
    const CONSUMERS: usize = 1000;
    let dir = tempfile::tempdir()?;
    let cluster = LocalCluster::start(1, dir.path(), |c| {
        c.topics = vec![(TOPIC.into(), 10)];
    })
    .await?;
    cluster
        .wait_for_leaders(TOPIC, 10, Duration::from_secs(30))
        .await?;
    let window = Duration::from_secs(10);
    let measure = || async {
        let (cpu, t) = (cpu_seconds(), Instant::now());
        tokio::time::sleep(window).await;
        (cpu_seconds() - cpu) / t.elapsed().as_secs_f64()
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    let baseline = measure().await;
    println!(
        "2. idle long-polling consumers on one broker (baseline: the idle broker, {baseline:.3} cores):"
    );
    for wait in [Duration::from_millis(500), Duration::from_secs(30)] {
        let mut clients = Vec::new();
        for _ in 0..CONSUMERS / 20 {
            clients.push(Arc::new(
                Client::connect(&cluster.addrs(), ClientConfig::default()).await?,
            ));
        }
        let mut consumers = Vec::new();
        for i in 0..CONSUMERS {
            let mut config = ConsumerConfig::default();
            config.max_wait = wait;
            let mut c = Consumer::new(Arc::clone(&clients[i / 20]), config);
            c.assign(TOPIC, Some(&[(i % 10) as u32]), StartAt::End)
                .await?;
            consumers.push(c);
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
        let cores = measure().await - baseline;
        println!(
            "   {CONSUMERS} consumers, max_wait {wait:?}: {cores:.3} cores above the baseline"
        );
        drop(consumers);
        drop(clients);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    cluster.shutdown().await
}

/// 3. A committed partition of `mib` MiB (1 KiB records, 1 MiB batches), read by a `Consumer`
///    and by `Node::read` in the broker's process.
async fn read_rate(mib: u64) -> replog::Result<()> {
    const TOPIC: &str = "big";
    let dir = tempfile::tempdir()?;
    let cluster = LocalCluster::start(1, dir.path(), |c| {
        c.topics = vec![(TOPIC.into(), 1)];
        c.durability = Durability::Replicated;
    })
    .await?;
    cluster
        .wait_for_leaders(TOPIC, 1, Duration::from_secs(30))
        .await?;
    let client = Arc::new(Client::connect(&cluster.addrs(), ClientConfig::default()).await?);
    let batch: Vec<Record> = (0..1000).map(|_| Record::new(vec![7u8; 1024])).collect();
    let batches = mib * 1024 * 1024 / (1000 * 1024);
    let filled = Instant::now();
    for _ in 0..batches {
        client.send(TOPIC, 0, &batch).await?;
    }
    let records = batches * 1000;
    println!(
        "3. reading a committed {mib} MiB partition ({records} records of 1 KiB, written in {:?}):",
        filled.elapsed()
    );
    let node = cluster.node(1).expect("broker 1");
    let mut rates = Vec::new();
    for round in 0..2 {
        // In process: the replica's log, batch by batch, every record decoded.
        let t = Instant::now();
        let (mut next, mut n) = (Offset(0), 0u64);
        while n < records {
            for b in node.read(TOPIC, 0, next, 4 << 20)? {
                for (offset, r) in b.records() {
                    if offset >= next {
                        n += 1;
                        std::hint::black_box(&r.value);
                    }
                }
                next = next.max(b.next_offset());
            }
        }
        let local = n as f64 / t.elapsed().as_secs_f64();
        // Over the network: a Consumer from the beginning.
        let mut config = ConsumerConfig::default();
        config.max_bytes = 4 << 20;
        let mut consumer = Consumer::new(Arc::clone(&client), config);
        consumer.assign(TOPIC, None, StartAt::Beginning).await?;
        let t = Instant::now();
        let mut n = 0u64;
        while n < records {
            n += consumer.poll(Duration::from_secs(5)).await?.len() as u64;
        }
        let remote = n as f64 / t.elapsed().as_secs_f64();
        println!(
            "   round {round}: Node::read {:.0} records/s, Consumer {:.0} records/s: ratio {:.2}",
            local,
            remote,
            remote / local
        );
        rates.push(remote / local);
    }
    drop(client);
    cluster.shutdown().await
}

/// 4. 65,536 records of 1 KiB: through a `Producer` in this process, then as lines piped to
///    a `replog produce` process, on a three-broker cluster of `Fsync` brokers.
async fn cli_produce() -> replog::Result<()> {
    const TOPIC: &str = "lines";
    const LINES: usize = 65_536;
    let Some(binary) = std::env::current_exe()
        .ok()
        .and_then(|e| Some(e.parent()?.parent()?.join("replog")))
        .filter(|b| b.exists())
    else {
        println!("4. skipped: build the replog binary first (cargo build --release)");
        return Ok(());
    };
    let dir = tempfile::tempdir()?;
    let cluster = LocalCluster::start(3, dir.path(), |c| {
        c.topics = vec![(TOPIC.into(), 3)];
    })
    .await?;
    cluster
        .wait_for_leaders(TOPIC, 3, Duration::from_secs(30))
        .await?;
    let line = "x".repeat(1023);
    let client = Arc::new(Client::connect(&cluster.addrs(), ClientConfig::default()).await?);
    let producer = replog::Producer::new(Arc::clone(&client), replog::ProducerConfig::default());
    let t = Instant::now();
    let sent: Vec<_> = (0..LINES)
        .map(|_| producer.send(TOPIC, Record::new(line.clone())))
        .collect();
    for s in sent {
        s.await?;
    }
    let in_process = LINES as f64 / t.elapsed().as_secs_f64();
    producer.close().await;
    let input: String = (0..LINES).map(|_| format!("{line}\n")).collect();
    let server = cluster.addrs()[1].to_string();
    let t = Instant::now();
    let out = tokio::task::spawn_blocking(move || {
        use std::io::Write;
        let mut child = std::process::Command::new(binary)
            .args(["produce", "--bootstrap-server", &server, "--topic", TOPIC])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin.write_all(input.as_bytes())?;
        }
        child.wait_with_output()
    })
    .await
    .map_err(std::io::Error::other)??;
    let cli = LINES as f64 / t.elapsed().as_secs_f64();
    println!(
        "4. {LINES} records of 1 KiB, 3 brokers, Fsync: Producer {in_process:.0} records/s, \
         replog produce {cli:.0} records/s (the process from its start): ratio {:.2}\n   \
         replog produce said: {}",
        cli / in_process,
        String::from_utf8_lossy(&out.stderr).trim()
    );
    drop(client);
    cluster.shutdown().await
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> replog::Result<()> {
    let mib: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1024);
    latency().await?;
    idle_consumers().await?;
    read_rate(mib).await?;
    cli_produce().await?;
    Ok(())
}
