//! Idle cost of many partitions: three brokers in one process, each hosting a replica of every
//! partition (one Raft group each), measured while nothing is written.
//!
//! Run: `cargo run --release --example idle -- 300` (partitions per broker; default 300), and
//! `-- 300 loud` for the same with partitions that never go quiet (`quiesce_after: None`:
//! every Raft group heartbeats all the time, as before quiet partitions), and `-- 300
//! written` for partitions that go quiet after a pipelining producer wrote 16 records of
//! 1 KiB to each. The quiet run waits
//! until every replica is quiet before it measures. A third argument sets the heartbeat
//! interval in milliseconds (250 by default; the election timeout is eight of them):
//! `-- 3334 quiet 1000` runs 10,002 replicas in one process with a one-second heartbeat. A
//! fourth argument, `processes`, runs each broker in a process of its own instead (see
//! `processes.rs`): `-- 10000 quiet 1000 processes` puts 10,000 replicas in each of three
//! processes and reports each process apart.
//! Partitions quiet for 5 s go dormant (their Raft members dropped, `NodeConfig::dormant_after`),
//! and the quiet runs wait for that too; `REPLOG_IDLE_DORMANT_MS=0` keeps them quiet but awake,
//! any other value sets the delay.
//! Prints CPU used (cores), resident memory, leader changes while idle, the descriptors and
//! memory maps the process holds (against the `ulimit -n` and `vm.max_map_count` a broker of
//! many replicas must fit in), and how long broker 2 takes to stop, to be ready again after a
//! restart, and until every replica is quiet again. Memory per replica
//! is reported two ways: the process's whole growth divided by the replicas, and the cost of
//! one more replica, from a second run of this example (in a child process) with a tenth of
//! the partitions: a process pays some memory once however many replicas it hosts (openraft
//! builds about 27 MiB of histogram scale tables once per process, tokio its runtime).

use std::time::{Duration, Instant};

use replog::{LocalCluster, NodeConfig, Preallocate};

/// As the `replog` binary's: jemalloc returns what dormant partitions' dropped Raft members
/// freed, where glibc's malloc keeps most of it (see the README's idle cost).
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[path = "../support/process.rs"]
mod process;
use process::{count_fds, count_maps, cpu_seconds, disk_kib, status_kib};

mod processes;

/// Records of 1 KiB each partition gets in the `written` mode.
const WRITTEN_PER_PARTITION: u32 = 16;

/// The `written` mode's load: [`WRITTEN_PER_PARTITION`] records of 1 KiB to every partition
/// of `idle`, all sent at once through one pipelining `Producer` (batches of many partitions
/// in flight together), then flushed. Prints what was acknowledged and how long it took.
async fn write_every_partition(
    addrs: &[std::net::SocketAddr],
    partitions: u32,
) -> replog::Result<()> {
    let client =
        std::sync::Arc::new(replog::Client::connect(addrs, replog::ClientConfig::default()).await?);
    let producer = replog::Producer::new(client, replog::ProducerConfig::default());
    let started = Instant::now();
    let mut sends = Vec::with_capacity((partitions * WRITTEN_PER_PARTITION) as usize);
    for round in 0..WRITTEN_PER_PARTITION {
        for p in 0..partitions {
            let value = vec![(round % 251) as u8; 1024];
            sends.push(producer.send_to("idle", p, replog::Record::new(value)));
        }
    }
    producer.flush().await;
    let mut acked = 0u64;
    let mut failures: std::collections::BTreeMap<String, u64> = Default::default();
    for send in sends {
        match send.await {
            Ok(_) => acked += 1,
            Err(e) => {
                // By kind: the error's variant, without its fields.
                let what = format!("{e:?}");
                let kind = what.split([' ', '(', '{']).next().unwrap_or_default();
                *failures.entry(kind.to_string()).or_default() += 1;
            }
        }
    }
    println!(
        "written: {acked} of {} records of 1 KiB ({WRITTEN_PER_PARTITION} to each partition) in \
         {:.1} s, pipelined{}",
        partitions * WRITTEN_PER_PARTITION,
        started.elapsed().as_secs_f64(),
        if failures.is_empty() {
            String::new()
        } else {
            format!("; failed: {failures:?}")
        }
    );
    Ok(())
}

/// Every broker's configuration: `partitions` partitions of topic `idle`, heartbeat
/// `heartbeat`, election timeout eight of them, quiet after 2 s unless `loud`.
fn configure(c: &mut NodeConfig, partitions: u32, loud: bool, heartbeat: Duration) {
    c.topics = vec![("idle".into(), partitions)];
    c.heartbeat_interval = heartbeat;
    c.election_timeout = heartbeat * 8;
    c.log.segment_bytes = 1 << 20;
    c.log.record_bytes_max = 64 << 10;
    c.log.batch_bytes_max = 256 << 10;
    c.log.preallocate = Preallocate::Fallocate;
    c.quiesce_after = (!loud).then_some(Duration::from_secs(2));
    c.dormant_after = dormant_after();
}

/// How long a quiet partition waits before it goes dormant: `REPLOG_IDLE_DORMANT_MS`, 5 s if
/// unset, never if 0.
fn dormant_after() -> Option<Duration> {
    let ms = std::env::var("REPLOG_IDLE_DORMANT_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5000);
    (ms > 0).then(|| Duration::from_millis(ms))
}

/// Whether `node` has its `partitions` replicas quiet, and dormant too if they go dormant.
fn settled_quiet(node: &replog::Node, partitions: u32) -> bool {
    let all = partitions as usize;
    node.quiet_replicas() == all && (dormant_after().is_none() || node.dormant_replicas() == all)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> replog::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let partitions: u32 = args.first().and_then(|a| a.parse().ok()).unwrap_or(300);
    let loud = args.get(1).is_some_and(|a| a == "loud");
    let written = args.get(1).is_some_and(|a| a == "written");
    // Heartbeat interval; the election timeout is eight of them.
    let heartbeat = Duration::from_millis(args.get(2).and_then(|a| a.parse().ok()).unwrap_or(250));
    if processes::is_broker() {
        return processes::broker(partitions, |c, n| configure(c, n, loud, heartbeat)).await;
    }
    if args.get(3).is_some_and(|a| a == "processes") {
        return processes::run(partitions, loud, written, args).await;
    }
    let dir = tempfile::tempdir()?;
    let rss_before = status_kib("VmRSS");
    let (anon_before, file_before) = (status_kib("RssAnon"), status_kib("RssFile"));
    let (fds_before, maps_before) = (count_fds(), count_maps());
    let mut cluster = LocalCluster::start(3, dir.path(), |c| {
        configure(c, partitions, loud, heartbeat);
    })
    .await?;
    let started = Instant::now();
    let terms = |cluster: &LocalCluster| -> Vec<u64> {
        (0..partitions)
            .map(|p| {
                cluster
                    .node(1)
                    .and_then(|n| n.status("idle", p).ok())
                    .map_or(0, |s| s.term)
            })
            .collect()
    };
    if cluster
        .wait_for_leaders("idle", partitions, Duration::from_secs(300))
        .await
        .is_err()
    {
        println!("not every partition elected a leader within 300 s");
    }
    println!(
        "{} replicas ({partitions} partitions x 3 brokers): all leaders elected after {:.1} s",
        partitions * 3,
        started.elapsed().as_secs_f64()
    );
    if written {
        write_every_partition(&cluster.addrs(), partitions).await?;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    if !loud {
        let quiet_since = Instant::now();
        let all_quiet = |c: &LocalCluster| c.nodes().all(|n| settled_quiet(n, partitions));
        // Bounded by its two minutes.
        while !all_quiet(&cluster) && quiet_since.elapsed() < Duration::from_secs(120) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let quiet: usize = cluster.nodes().map(|n| n.quiet_replicas()).sum();
        let dormant: usize = cluster.nodes().map(|n| n.dormant_replicas()).sum();
        println!(
            "quiet replicas: {quiet} of {}, dormant: {dormant} ({:.1} s after the leaders settled)",
            partitions * 3,
            quiet_since.elapsed().as_secs_f64() + 3.0
        );
    }
    let terms_before = terms(&cluster);
    let (cpu0, t0) = (cpu_seconds(), Instant::now());
    tokio::time::sleep(Duration::from_secs(20)).await;
    let (cpu1, elapsed) = (cpu_seconds(), t0.elapsed().as_secs_f64());
    let changes = terms(&cluster)
        .iter()
        .zip(&terms_before)
        .filter(|(a, b)| a != b)
        .count();
    let rss = status_kib("VmRSS").saturating_sub(rss_before);
    println!(
        "idle CPU: {:.3} cores over {elapsed:.0} s",
        (cpu1 - cpu0) / elapsed
    );
    println!(
        "resident memory: {} KiB in all, {} KiB per replica",
        rss,
        rss / u64::from(partitions * 3)
    );
    println!(
        "of which anonymous (heap, stacks): {} KiB, mapped files (segments, indexes): {} KiB",
        status_kib("RssAnon").saturating_sub(anon_before),
        status_kib("RssFile").saturating_sub(file_before),
    );
    println!("partitions whose term changed while idle: {changes}");
    let (fds, maps) = (
        count_fds().saturating_sub(fds_before),
        count_maps().saturating_sub(maps_before),
    );
    let replicas = f64::from(partitions * 3);
    println!(
        "open descriptors: {fds} ({:.2} per replica), memory maps: {maps} ({:.2} per replica), \
         disk: {:.1} KiB per replica",
        fds as f64 / replicas,
        maps as f64 / replicas,
        disk_kib(dir.path()) as f64 / replicas,
    );
    // A restart of one broker (a controlled shutdown first): the time until it is ready (its
    // metadata log replayed, every replica open and following a leader), and until every
    // replica in the process is quiet again.
    let stop_at = Instant::now();
    cluster.stop(2).await?;
    let stopped = stop_at.elapsed();
    let restart_at = Instant::now();
    cluster.restart(2).await?;
    let ready = match cluster.node(2) {
        Some(node) => node.wait_ready(Duration::from_secs(300)).await.map(|_| ()),
        None => Ok(()),
    };
    let ready_after = restart_at.elapsed();
    match ready {
        Ok(()) => {
            let quiet = |c: &LocalCluster| c.nodes().all(|n| settled_quiet(n, partitions));
            // Bounded by its five minutes.
            while !loud && !quiet(&cluster) && restart_at.elapsed() < Duration::from_secs(300) {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            println!(
                "broker 2 ({partitions} replicas) stopped in {:.1} s, ready {:.1} s after its \
                 restart{}",
                stopped.as_secs_f64(),
                ready_after.as_secs_f64(),
                if loud {
                    String::new()
                } else {
                    format!(
                        ", every replica quiet again after {:.1} s{}",
                        restart_at.elapsed().as_secs_f64(),
                        if quiet(&cluster) {
                            ""
                        } else {
                            " (not: gave up waiting)"
                        }
                    )
                },
            );
        }
        Err(e) => println!("broker 2 not ready {ready_after:?} after its restart: {e}"),
    }
    cluster.shutdown().await?;
    // The smaller run, for the cost of one more replica (not when this is that run).
    let small = partitions / 10;
    if std::env::var_os(CHILD).is_none() && small > 0 {
        let out = std::process::Command::new(std::env::current_exe()?)
            .arg(small.to_string())
            .arg(args.get(1).map_or("quiet", String::as_str))
            .arg(heartbeat.as_millis().to_string())
            .env(CHILD, "1")
            .output()?;
        let text = String::from_utf8_lossy(&out.stdout);
        let small_rss = text
            .lines()
            .find_map(|l| l.strip_prefix("resident memory: "))
            .and_then(|l| l.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok());
        match small_rss {
            Some(small_rss) => println!(
                "one more replica: {} KiB (against {small} partitions per broker: {small_rss} KiB in all)",
                rss.saturating_sub(small_rss) / u64::from((partitions - small) * 3)
            ),
            None => println!("the run with {small} partitions failed:\n{text}"),
        }
    }
    Ok(())
}

/// Set in the child run.
const CHILD: &str = "REPLOG_IDLE_CHILD";
