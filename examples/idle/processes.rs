//! The idle example with each broker in a process of its own (`-- N quiet MS processes`), as a
//! deployment runs them: three child processes of this example, each hosting a replica of
//! every partition, so that `-- 10000 quiet 1000 processes` puts 10,000 replicas in each
//! process. Each child reports on its standard output, and the parent measures each process
//! apart: idle CPU, memory, descriptors, memory maps and disk per replica, and a restart of
//! broker 2 (stop, ready, quiet again).
//!
//! Lines a child prints (one per line, space-separated):
//! - `baseline SAMPLE`: before its broker starts;
//! - `ready SECONDS`: its broker is ready (metadata replayed, every replica open), that long
//!   after the process started;
//! - `status QUIET DORMANT CPU`: every 500 ms, the quiet replicas, those of them dormant, and
//!   the CPU seconds used;
//! - `sample SAMPLE`: when a line `sample` arrives on its standard input (reading
//!   descriptors and maps of 10,000 replicas takes CPU time, so it is not done all along);
//! - `stopped SECONDS`: its broker shut down, that long after it was asked to.
//!
//! A `SAMPLE` is `cpu rss anon file fds maps`: CPU seconds, resident, anonymous and
//! file-backed memory in KiB, open descriptors and memory maps. A child stops its broker
//! (a controlled shutdown) when any other line or the end of its standard input arrives.

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use replog::{Node, NodeConfig};

use crate::process::{count_fds, count_maps, cpu_seconds, disk_kib, status_kib};

/// The child's broker id, in its environment.
const BROKER: &str = "REPLOG_IDLE_BROKER";
/// The three brokers' addresses, comma-separated, in a child's environment.
const ADDRS: &str = "REPLOG_IDLE_ADDRS";
/// The data directory of all three, in a child's environment.
const DIR: &str = "REPLOG_IDLE_DIR";

/// What a process holds at one moment.
#[derive(Clone, Copy, Debug, Default)]
struct Sample {
    cpu: f64,
    rss: u64,
    anon: u64,
    file: u64,
    fds: u64,
    maps: u64,
}

impl Sample {
    fn now() -> Sample {
        Sample {
            cpu: cpu_seconds(),
            rss: status_kib("VmRSS"),
            anon: status_kib("RssAnon"),
            file: status_kib("RssFile"),
            fds: count_fds() as u64,
            maps: count_maps() as u64,
        }
    }

    fn line(&self) -> String {
        format!(
            "{:.2} {} {} {} {} {}",
            self.cpu, self.rss, self.anon, self.file, self.fds, self.maps
        )
    }

    /// A sample from the six fields `line` printed.
    fn parse(fields: &[&str]) -> Option<Sample> {
        let n = |i: usize| fields.get(i).and_then(|v| v.parse::<u64>().ok());
        Some(Sample {
            cpu: fields.first()?.parse().ok()?,
            rss: n(1)?,
            anon: n(2)?,
            file: n(3)?,
            fds: n(4)?,
            maps: n(5)?,
        })
    }
}

/// Whether this process is one of the brokers (a child).
pub fn is_broker() -> bool {
    std::env::var_os(BROKER).is_some()
}

/// Runs one broker in this process (the child's side).
pub async fn broker(
    partitions: u32,
    configure: impl Fn(&mut NodeConfig, u32),
) -> replog::Result<()> {
    let started = Instant::now();
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    let id: u64 = var(BROKER).parse().unwrap_or(1);
    let addrs: Vec<SocketAddr> = var(ADDRS)
        .split(',')
        .filter_map(|a| a.parse().ok())
        .collect();
    raise_open_files_limit();
    println!("baseline {}", Sample::now().line());
    let peers = (1u64..)
        .zip(&addrs)
        .filter(|(p, _)| *p != id)
        .map(|(p, a)| (p, *a))
        .collect();
    let own = addrs[(id - 1) as usize];
    let mut config = NodeConfig::new(id, own, peers, Path::new(&var(DIR)).join(id.to_string()));
    configure(&mut config, partitions);
    let node = Arc::new(Node::start(config).await?);
    node.wait_ready(Duration::from_secs(600)).await?;
    println!("ready {:.3}", started.elapsed().as_secs_f64());
    let (stop, mut stopped) = tokio::sync::watch::channel(false);
    let reporter = {
        let node = Arc::clone(&node);
        tokio::spawn(async move {
            // Ends when asked to stop.
            loop {
                println!(
                    "status {} {} {:.2}",
                    node.quiet_replicas(),
                    node.dormant_replicas(),
                    cpu_seconds()
                );
                tokio::select! {
                    _ = stopped.changed() => break,
                    _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                }
            }
        })
    };
    // Each `sample` line asks for a sample; any other line, or the end of the input (the
    // parent gone), asks for the stop.
    let _ = tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        // Bounded by the parent's input.
        while std::io::stdin().read_line(&mut line).is_ok_and(|n| n > 0) && line.trim() == "sample"
        {
            println!("sample {}", Sample::now().line());
            line.clear();
        }
    })
    .await;
    let asked = Instant::now();
    let _ = stop.send(true);
    let _ = reporter.await;
    if let Ok(node) = Arc::try_unwrap(node) {
        node.shutdown().await?;
    }
    println!("stopped {:.3}", asked.elapsed().as_secs_f64());
    Ok(())
}

/// Raises the soft limit on open files to the hard one, as `replog node` does: a process of
/// 10,000 replicas holds about as many descriptors.
fn raise_open_files_limit() {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    if limit.current < limit.maximum || limit.maximum.is_none() {
        let raised = Rlimit {
            current: limit.maximum.or(Some(1 << 20)),
            maximum: limit.maximum,
        };
        let _ = setrlimit(Resource::Nofile, raised);
    }
}

/// What the parent has read of one child.
#[derive(Debug, Default)]
struct Seen {
    baseline: Option<Sample>,
    ready: Option<f64>,
    quiet: usize,
    dormant: usize,
    cpu: f64,
    last: Option<Sample>,
    stopped: Option<f64>,
    /// Lines that were none of the above (errors), kept for the report.
    other: Vec<String>,
}

/// One broker process, seen from the parent.
struct BrokerProcess {
    child: Child,
    stdin: Option<ChildStdin>,
    seen: Arc<parking_lot::Mutex<Seen>>,
    spawned: Instant,
}

impl BrokerProcess {
    fn spawn(id: u64, addrs: &[SocketAddr], dir: &Path, args: &[String]) -> BrokerProcess {
        let addrs: Vec<String> = addrs.iter().map(ToString::to_string).collect();
        let mut child = Command::new(std::env::current_exe().expect("this example's path"))
            .args(args)
            .env(BROKER, id.to_string())
            .env(ADDRS, addrs.join(","))
            .env(DIR, dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("a broker process");
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("piped");
        let seen = Arc::new(parking_lot::Mutex::new(Seen::default()));
        let reading = Arc::clone(&seen);
        std::thread::spawn(move || {
            // Ends when the child closes its output.
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let fields: Vec<&str> = line.split_whitespace().collect();
                let mut seen = reading.lock();
                match fields.as_slice() {
                    ["baseline", rest @ ..] => seen.baseline = Sample::parse(rest),
                    ["ready", s] => seen.ready = s.parse().ok(),
                    ["status", quiet, dormant, cpu] => {
                        seen.quiet = quiet.parse().unwrap_or(0);
                        seen.dormant = dormant.parse().unwrap_or(0);
                        seen.cpu = cpu.parse().unwrap_or(0.0);
                    }
                    ["sample", rest @ ..] => seen.last = Sample::parse(rest),
                    ["stopped", s] => seen.stopped = s.parse().ok(),
                    _ => seen.other.push(line.clone()),
                }
            }
        });
        BrokerProcess {
            child,
            stdin,
            seen,
            spawned: Instant::now(),
        }
    }

    /// Asks for a sample, and waits (at most 30 s) for it.
    async fn sample(&mut self) -> Sample {
        self.seen.lock().last = None;
        if let Some(stdin) = self.stdin.as_mut() {
            let _ = writeln!(stdin, "sample");
        }
        wait(Duration::from_secs(30), || self.seen.lock().last.is_some()).await;
        self.seen.lock().last.unwrap_or_default()
    }

    /// Asks the broker to stop (a controlled shutdown), and waits for the process to end.
    fn stop(&mut self) {
        if let Some(mut stdin) = self.stdin.take() {
            let _ = writeln!(stdin, "stop");
        }
        let _ = self.child.wait();
    }
}

/// Polls `done` every 100 ms for at most `limit`; whether it came true.
async fn wait(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    // Bounded by the deadline.
    while !done() {
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    true
}

/// Runs the three brokers as processes and reports (the parent's side). `args` are this
/// example's arguments, passed on to each child.
pub async fn run(
    partitions: u32,
    loud: bool,
    written: bool,
    args: Vec<String>,
) -> replog::Result<()> {
    let dir = tempfile::tempdir()?;
    let addrs: Vec<SocketAddr> = (0..3)
        .map(|_| {
            std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("a loopback port")
        })
        .collect();
    let mut brokers: Vec<BrokerProcess> = (1..=3)
        .map(|id| BrokerProcess::spawn(id, &addrs, dir.path(), &args))
        .collect();
    let ready = wait(Duration::from_secs(600), || {
        brokers.iter().all(|b| b.seen.lock().ready.is_some())
    })
    .await;
    if !ready {
        for (id, b) in (1..).zip(&brokers) {
            println!("broker {id}: {:?}", b.seen.lock().other);
        }
        return Ok(());
    }
    let started = brokers
        .iter()
        .map(|b| b.spawned)
        .min()
        .unwrap_or_else(Instant::now);
    let client = replog::Client::connect(&addrs, replog::ClientConfig::default()).await?;
    let led = leaders_elected(&client, partitions).await;
    println!(
        "{} replicas ({partitions} partitions x 3 broker processes): every broker ready after \
         {:.1} s, every leader elected{} after {:.1} s",
        partitions * 3,
        brokers
            .iter()
            .filter_map(|b| b.seen.lock().ready)
            .fold(0.0, f64::max),
        if led { "" } else { " (not: gave up waiting)" },
        started.elapsed().as_secs_f64()
    );
    if written {
        crate::write_every_partition(&addrs, partitions).await?;
    }
    let all_quiet = |brokers: &[BrokerProcess]| {
        brokers.iter().all(|b| {
            let seen = b.seen.lock();
            let all = partitions as usize;
            seen.quiet == all && (crate::dormant_after().is_none() || seen.dormant == all)
        })
    };
    if !loud {
        let since = Instant::now();
        let quiet = wait(Duration::from_secs(300), || all_quiet(&brokers)).await;
        println!(
            "every replica quiet{}{} {:.1} s after that",
            if crate::dormant_after().is_some() {
                " and dormant"
            } else {
                ""
            },
            if quiet { "" } else { " (not: gave up waiting)" },
            since.elapsed().as_secs_f64()
        );
    }
    report_idle(&mut brokers, partitions, dir.path()).await;
    // A restart of broker 2 (a controlled shutdown first).
    let stop_at = Instant::now();
    brokers[1].stop();
    let stopped = stop_at.elapsed();
    brokers[1] = BrokerProcess::spawn(2, &addrs, dir.path(), &args);
    let ready = wait(Duration::from_secs(300), || {
        brokers[1].seen.lock().ready.is_some()
    })
    .await;
    let ready_after = brokers[1].spawned.elapsed();
    let quiet_again = !loud && wait(Duration::from_secs(300), || all_quiet(&brokers)).await;
    println!(
        "broker 2 ({partitions} replicas) stopped in {:.1} s, ready {:.1} s after its restart{}{}",
        stopped.as_secs_f64(),
        ready_after.as_secs_f64(),
        if ready { "" } else { " (not: gave up waiting)" },
        if loud {
            String::new()
        } else {
            format!(
                ", every replica quiet again after {:.1} s{}",
                brokers[1].spawned.elapsed().as_secs_f64(),
                if quiet_again {
                    ""
                } else {
                    " (not: gave up waiting)"
                }
            )
        }
    );
    for b in &mut brokers {
        b.stop();
    }
    Ok(())
}

/// Whether every partition of the topic has a leader (asked for 600 s at most).
async fn leaders_elected(client: &replog::Client, partitions: u32) -> bool {
    let deadline = Instant::now() + Duration::from_secs(600);
    // Bounded by the deadline.
    while Instant::now() < deadline {
        if let Ok(described) = client.describe("idle").await
            && described.len() == partitions as usize
            && described.iter().all(|p| p.leader.is_some())
        {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    false
}

/// Measures 20 s of idle and prints, per broker process: CPU, memory, descriptors, maps and
/// disk per replica.
async fn report_idle(brokers: &mut [BrokerProcess], partitions: u32, dir: &Path) {
    let before: Vec<(f64, Instant)> = brokers
        .iter()
        .map(|b| (b.seen.lock().cpu, Instant::now()))
        .collect();
    tokio::time::sleep(Duration::from_secs(20)).await;
    let replicas = f64::from(partitions);
    for ((id, b), (cpu0, t0)) in (1..).zip(brokers).zip(before) {
        let cpu = (b.seen.lock().cpu - cpu0) / t0.elapsed().as_secs_f64();
        let s1 = b.sample().await;
        let base = b.seen.lock().baseline.unwrap_or_default();
        let data: PathBuf = dir.join(id.to_string());
        let per = |now: u64, then: u64| now.saturating_sub(then) as f64 / replicas;
        println!(
            "broker {id}: idle CPU {cpu:.3} cores; per replica {:.0} KiB resident ({:.0} \
             anonymous, {:.0} mapped files), {:.2} descriptors, {:.2} memory maps, {:.1} KiB \
             of disk",
            per(s1.rss, base.rss),
            per(s1.anon, base.anon),
            per(s1.file, base.file),
            per(s1.fds, base.fds),
            per(s1.maps, base.maps),
            disk_kib(&data) as f64 / replicas,
        );
    }
}
