//! The `replog` command line, shaped like Kafka's tools: run a broker, describe topics,
//! produce, consume, inspect segment files, and `demo`, which plays the whole tutorial on an
//! embedded three-broker cluster.

use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand, ValueEnum};
use replog::{Client, ClientConfig, Durability, Error, Node, NodeConfig, Offset, Record};

#[derive(Parser)]
#[command(
    name = "replog",
    version,
    about = "A Raft-replicated, mmap-backed partition log"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Where `produce` and `consume` go: brokers to bootstrap from, a topic and a partition.
#[derive(Debug, clap::Args)]
struct Target {
    /// Brokers to bootstrap from, comma-separated HOST:PORT.
    #[arg(long)]
    bootstrap_server: String,
    /// The topic.
    #[arg(long)]
    topic: String,
    /// The partition.
    #[arg(long, default_value_t = 0)]
    partition: u32,
}

#[derive(Subcommand)]
enum Command {
    /// Runs a broker until interrupted (Ctrl-C or SIGTERM).
    Node {
        /// This broker's id.
        #[arg(long)]
        id: u64,
        /// Address to listen on, e.g. 127.0.0.1:9092.
        #[arg(long)]
        listen: SocketAddr,
        /// Another broker, as ID@HOST:PORT; repeat for each.
        #[arg(long = "peer", value_parser = parse_peer)]
        peers: Vec<(u64, SocketAddr)>,
        /// Data directory.
        #[arg(long)]
        data: PathBuf,
        /// A configured topic and its partition count, as NAME:PARTITIONS, replicated on every
        /// broker; repeat for each. Every broker must be given the same list. Other topics are
        /// created with `replog topics --create`.
        #[arg(long = "topic", value_parser = parse_topic)]
        topics: Vec<(String, u32)>,
        /// When a write counts as done.
        #[arg(long, value_enum, default_value_t = DurabilityArg::Fsync)]
        durability: DurabilityArg,
        /// Raft election timeout.
        #[arg(long, default_value_t = 1000)]
        election_timeout_ms: u64,
        /// Join a running cluster whose founding brokers are the `--peer`s; this broker's id
        /// is new. Topics created from then on are spread over it too.
        #[arg(long)]
        join: bool,
    },
    /// Creates, deletes, describes or lists topics.
    Topics {
        /// Brokers to bootstrap from, comma-separated HOST:PORT.
        #[arg(long)]
        bootstrap_server: String,
        /// Print partition, leader, replicas and in-sync replicas.
        #[arg(long)]
        describe: bool,
        /// List topic names.
        #[arg(long)]
        list: bool,
        /// Create the topic named by --topic.
        #[arg(long, conflicts_with_all = ["describe", "list", "delete"], requires = "topic")]
        create: bool,
        /// Delete the topic named by --topic (not a topic configured on the brokers).
        #[arg(long, conflicts_with_all = ["describe", "list"], requires = "topic")]
        delete: bool,
        /// The topic (default: every topic).
        #[arg(long)]
        topic: Option<String>,
        /// Partitions, with --create.
        #[arg(long, default_value_t = 1, requires = "create")]
        partitions: u32,
        /// Replicas of each partition (at most the number of brokers), with --create.
        #[arg(long, default_value_t = 1, requires = "create")]
        replication_factor: u32,
        /// Move partition --partition of the topic named by --topic to the brokers
        /// --replicas (Kafka's partition reassignment).
        #[arg(long, conflicts_with_all = ["describe", "list", "delete", "create"], requires_all = ["topic", "replicas"])]
        reassign: bool,
        /// The partition to move, with --reassign.
        #[arg(long, default_value_t = 0, requires = "reassign")]
        partition: u32,
        /// Where to move it, with --reassign: broker ids, comma-separated, the preferred
        /// leader first.
        #[arg(long, value_delimiter = ',', requires = "reassign")]
        replicas: Vec<u64>,
    },
    /// Sends each line of standard input as a record.
    Produce {
        #[command(flatten)]
        target: Target,
        /// Split each line at the first occurrence of this into key and value.
        #[arg(long)]
        key_separator: Option<String>,
        /// Print the partition and offset of each record, and the route it took.
        #[arg(long)]
        print_offsets: bool,
    },
    /// Prints the records of a partition.
    Consume {
        #[command(flatten)]
        target: Target,
        /// Start at the first record still in the log.
        #[arg(long)]
        from_beginning: bool,
        /// Start at this offset.
        #[arg(long)]
        offset: Option<u64>,
        /// Stop after this many records.
        #[arg(long)]
        max_messages: Option<u64>,
        /// Stop after this long without new records.
        #[arg(long, default_value_t = 2000)]
        timeout_ms: u64,
        /// Read the bootstrap broker's own replica instead of the leader's.
        #[arg(long)]
        from_replica: bool,
    },
    /// Plays the tutorial on an embedded three-broker cluster (ports 9092, 19092, 29092, or
    /// free ports when those are taken), in a temporary directory.
    Demo,
    /// Checks every segment file in a partition directory without changing anything, and
    /// prints what each holds and where (and why) its valid data ends.
    Check {
        /// The partition directory.
        dir: PathBuf,
        /// The `record_bytes_max` the log was written with.
        #[arg(long, default_value_t = 1 << 20)]
        record_bytes_max: u32,
        /// The `batch_bytes_max` the log was written with.
        #[arg(long, default_value_t = 4 << 20)]
        batch_bytes_max: u32,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum DurabilityArg {
    Fsync,
    Replicated,
}

fn parse_peer(s: &str) -> Result<(u64, SocketAddr), String> {
    let (id, addr) = s.split_once('@').ok_or("expected ID@HOST:PORT")?;
    let id = id.parse().map_err(|_| format!("bad broker id {id:?}"))?;
    let addr = addr
        .parse()
        .map_err(|_| format!("bad address {addr:?} (use IP:PORT)"))?;
    Ok((id, addr))
}

fn parse_topic(s: &str) -> Result<(String, u32), String> {
    let (name, n) = s.split_once(':').unwrap_or((s, "1"));
    let n = n
        .parse()
        .map_err(|_| format!("bad partition count {n:?}"))?;
    if name.is_empty() || n == 0 {
        return Err("expected NAME:PARTITIONS with at least one partition".into());
    }
    Ok((name.to_string(), n))
}

/// Resolves `host:port,host:port` to every address of every host.
async fn bootstrap(list: &str) -> Result<Vec<SocketAddr>, String> {
    let mut out = Vec::new();
    for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let addrs = tokio::net::lookup_host(part)
            .await
            .map_err(|e| format!("{part}: {e}"))?;
        // IPv4 first: brokers usually listen on 127.0.0.1, and localhost may resolve to ::1.
        let mut addrs: Vec<SocketAddr> = addrs.collect();
        addrs.sort_by_key(|a| a.is_ipv6());
        out.extend(addrs);
    }
    if out.is_empty() {
        return Err("no bootstrap server given".into());
    }
    Ok(out)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("replog: error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("replog: error: {e}");
            ExitCode::from(1)
        }
    }
}

async fn run(cli: Cli) -> Result<ExitCode, String> {
    match cli.command {
        Command::Node {
            id,
            listen,
            peers,
            data,
            topics,
            durability,
            election_timeout_ms,
            join,
        } => {
            let mut config = NodeConfig::new(id, listen, peers.into_iter().collect(), data);
            config.topics = topics;
            config.join = join;
            config.election_timeout_ms = election_timeout_ms;
            config.heartbeat_interval_ms = (election_timeout_ms / 4).max(20);
            config.durability = match durability {
                DurabilityArg::Fsync => Durability::Fsync,
                DurabilityArg::Replicated => Durability::Replicated,
            };
            let node = Node::start(config).await.map_err(|e| e.to_string())?;
            eprintln!("replog: broker {id} listening on {}", node.addr());
            wait_for_signal().await;
            node.shutdown().await.map_err(|e| e.to_string())?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Topics {
            bootstrap_server,
            describe,
            list,
            create,
            delete,
            topic,
            partitions,
            replication_factor,
            reassign,
            partition,
            replicas,
        } => {
            let client = connect(&bootstrap_server).await?;
            if let (true, Some(t)) = (reassign, &topic) {
                client
                    .reassign_partition(t, partition, &replicas)
                    .await
                    .map_err(|e| describe_error(t, e))?;
                let list: Vec<String> = replicas.iter().map(u64::to_string).collect();
                println!("Moving {t}-{partition} to {}.", list.join(","));
                return Ok(ExitCode::SUCCESS);
            }
            if let (true, Some(t)) = (create, &topic) {
                client
                    .create_topic(t, partitions, replication_factor)
                    .await
                    .map_err(|e| e.to_string())?;
                println!("Created topic {t}.");
                return Ok(ExitCode::SUCCESS);
            }
            if let (true, Some(t)) = (delete, &topic) {
                client
                    .delete_topic(t)
                    .await
                    .map_err(|e| describe_error(t, e))?;
                println!("Deleted topic {t}.");
                return Ok(ExitCode::SUCCESS);
            }
            if list || !describe {
                for (name, n) in client.list_topics().await.map_err(|e| e.to_string())? {
                    if topic.as_deref().is_none_or(|t| t == name) {
                        println!("{name}\t({n} partitions)");
                    }
                }
                return Ok(ExitCode::SUCCESS);
            }
            let topics: Vec<String> = match topic {
                Some(t) => vec![t],
                None => client
                    .list_topics()
                    .await
                    .map_err(|e| e.to_string())?
                    .into_iter()
                    .map(|(t, _)| t)
                    .collect(),
            };
            for t in topics {
                for p in client
                    .describe(&t)
                    .await
                    .map_err(|e| describe_error(&t, e))?
                {
                    println!("{p}");
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Produce {
            target:
                Target {
                    bootstrap_server,
                    topic,
                    partition,
                },
            key_separator,
            print_offsets,
        } => {
            let client = connect(&bootstrap_server).await?;
            let stdin = std::io::stdin();
            for line in stdin.lock().lines() {
                let line = line.map_err(|e| e.to_string())?;
                let record = match key_separator
                    .as_deref()
                    .and_then(|sep| line.split_once(sep))
                {
                    Some((k, v)) => Record::new(v.to_string()).with_key(k.to_string()),
                    None => Record::new(line.clone()),
                };
                let d = client
                    .send(&topic, partition, &[record])
                    .await
                    .map_err(|e| e.to_string())?;
                if print_offsets {
                    let route: Vec<String> = d
                        .route
                        .iter()
                        .map(|s| format!("{} ({})", s.addr, s.outcome))
                        .collect();
                    println!(
                        "{topic}/{partition}@{}\tvia {}",
                        d.base_offset,
                        route.join(" -> ")
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Consume {
            target:
                Target {
                    bootstrap_server,
                    topic,
                    partition,
                },
            from_beginning,
            offset,
            max_messages,
            timeout_ms,
            from_replica,
        } => {
            let addrs = bootstrap(&bootstrap_server).await?;
            let client = Client::connect(&addrs, ClientConfig::default())
                .await
                .map_err(|e| e.to_string())?;
            let replica = from_replica.then(|| addrs[0]);
            let start = match (offset, from_beginning) {
                (Some(o), _) => Offset(o),
                (None, true) => Offset(0),
                (None, false) => {
                    let d = client
                        .describe(&topic)
                        .await
                        .map_err(|e| describe_error(&topic, e))?;
                    d.iter()
                        .find(|p| p.partition.partition == partition)
                        .map_or(Offset(0), |p| p.high_watermark)
                }
            };
            let printed = consume(
                &client,
                &topic,
                partition,
                start,
                max_messages,
                timeout_ms,
                replica,
            )
            .await?;
            eprintln!("Processed a total of {printed} messages");
            Ok(ExitCode::SUCCESS)
        }
        Command::Demo => demo().await.map(|()| ExitCode::SUCCESS),
        Command::Check {
            dir,
            record_bytes_max,
            batch_bytes_max,
        } => match check(&dir, record_bytes_max, batch_bytes_max) {
            Ok(true) => Ok(ExitCode::SUCCESS),
            Ok(false) => Ok(ExitCode::from(1)),
            Err(e) => Err(format!("{}: {e}", dir.display())),
        },
    }
}

fn describe_error(topic: &str, e: Error) -> String {
    match e {
        Error::UnknownPartition(_) => format!("unknown topic {topic:?}"),
        other => other.to_string(),
    }
}

async fn connect(list: &str) -> Result<Client, String> {
    let addrs = bootstrap(list).await?;
    Client::connect(&addrs, ClientConfig::default())
        .await
        .map_err(|e| e.to_string())
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}

/// Prints records from `start` until `max` records or `timeout_ms` without new ones.
async fn consume(
    client: &Client,
    topic: &str,
    partition: u32,
    start: Offset,
    max: Option<u64>,
    timeout_ms: u64,
    replica: Option<SocketAddr>,
) -> Result<u64, String> {
    let mut next = start;
    let mut printed = 0u64;
    let mut idle_since = Instant::now();
    let stdout = std::io::stdout();
    loop {
        if max.is_some_and(|m| printed >= m) {
            return Ok(printed);
        }
        let batches = match client.fetch(topic, partition, next, 1 << 20, replica).await {
            Ok(b) => b,
            Err(Error::OffsetOutOfRange { start, end, .. }) if next < start => {
                next = start;
                let _ = end;
                continue;
            }
            Err(e) => return Err(describe_error(topic, e)),
        };
        if batches.is_empty() {
            if idle_since.elapsed() >= Duration::from_millis(timeout_ms) {
                return Ok(printed);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        }
        idle_since = Instant::now();
        let mut out = stdout.lock();
        for b in &batches {
            for (o, r) in b.records() {
                if o < next || max.is_some_and(|m| printed >= m) {
                    continue;
                }
                let _ = out.write_all(&r.value);
                let _ = out.write_all(b"\n");
                printed += 1;
            }
            next = next.max(b.next_offset());
        }
        let _ = out.flush();
    }
}

/// The tutorial, in one process.
async fn demo() -> Result<(), String> {
    let started = Instant::now();
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let topic = "email.send";
    let wanted: Vec<SocketAddr> = ["127.0.0.1:9092", "127.0.0.1:19092", "127.0.0.1:29092"]
        .iter()
        .filter_map(|a| a.parse().ok())
        .collect();
    let addrs = if wanted
        .iter()
        .all(|a| std::net::TcpListener::bind(a).is_ok())
    {
        wanted
    } else {
        println!("(ports 9092/19092/29092 are taken; using free ports instead)");
        let listeners: Vec<std::net::TcpListener> = (0..3)
            .filter_map(|_| std::net::TcpListener::bind("127.0.0.1:0").ok())
            .collect();
        listeners
            .iter()
            .filter_map(|l| l.local_addr().ok())
            .collect()
    };
    if addrs.len() != 3 {
        return Err("could not find three free loopback ports".into());
    }
    let config = |id: u64| {
        let peers: BTreeMap<u64, SocketAddr> = (1..=3u64)
            .filter(|p| *p != id)
            .map(|p| (p, addrs[(p - 1) as usize]))
            .collect();
        let mut c = NodeConfig::new(
            id,
            addrs[(id - 1) as usize],
            peers,
            dir.path().join(format!("broker-{id}")),
        );
        c.heartbeat_interval_ms = 100;
        c.election_timeout_ms = 500;
        c.log.segment_bytes = 4 << 20;
        c.log.batch_bytes_max = 1 << 20;
        c
    };
    println!(
        "== three brokers on {}, {}, {} (data in {})",
        addrs[0],
        addrs[1],
        addrs[2],
        dir.path().display()
    );
    let mut nodes: Vec<Option<Node>> = Vec::new();
    for id in 1..=3 {
        let node = Node::start(config(id)).await.map_err(|e| e.to_string())?;
        println!("   broker {id} listening on {}", node.addr());
        nodes.push(Some(node));
    }
    println!(
        "\n$ replog topics --bootstrap-server {} --create --topic {topic} --partitions 1 --replication-factor 3",
        addrs[1]
    );
    let creator = Client::connect(&[addrs[1]], ClientConfig::default())
        .await
        .map_err(|e| e.to_string())?;
    creator
        .create_topic(topic, 1, 3)
        .await
        .map_err(|e| e.to_string())?;
    println!("Created topic {topic}.");
    drop(creator);
    let leader = wait_leader(&nodes, topic).await?;
    let bootstrap_id = if leader == 2 { 3 } else { 2 };
    let bootstrap_addr = addrs[(bootstrap_id - 1) as usize];

    println!(
        "\n$ replog topics --bootstrap-server {} --describe --topic {topic}",
        addrs[0]
    );
    let admin = Client::connect(&[addrs[0]], ClientConfig::default())
        .await
        .map_err(|e| e.to_string())?;
    for p in admin.describe(topic).await.map_err(|e| e.to_string())? {
        println!("{p}");
    }
    println!("   broker {leader} leads; the others are followers.");

    println!(
        "\n== a write sent straight to follower broker {bootstrap_id} is refused, with a hint:"
    );
    let follower = nodes[(bootstrap_id - 1) as usize]
        .as_ref()
        .ok_or("broker missing")?;
    match follower.append(topic, 0, &[Record::new("x")]).await {
        Err(Error::NotLeader {
            leader: Some(h), ..
        }) => {
            println!(
                "   NotLeader: the leader is broker {} at {}",
                h.node_id, h.addr
            );
        }
        other => println!("   unexpected: {other:?}"),
    }

    println!(
        "\n$ echo follower-message-1 | replog produce --bootstrap-server {bootstrap_addr} --topic {topic}"
    );
    let producer = Client::connect(&[bootstrap_addr], ClientConfig::default())
        .await
        .map_err(|e| e.to_string())?;
    let d = producer
        .send(topic, 0, &[Record::new("follower-message-1")])
        .await
        .map_err(|e| e.to_string())?;
    println!(
        "   bootstrapped on broker {bootstrap_id} ({bootstrap_addr}); metadata named broker {leader} as leader;"
    );
    for step in &d.route {
        println!("   sent to {}: {}", step.addr, step.outcome);
    }
    println!("   -> {topic}/0 offset {}", d.base_offset);

    for addr in &addrs {
        println!(
            "\n$ replog consume --bootstrap-server {addr} --topic {topic} --from-beginning --from-replica"
        );
        print_replica(&producer, topic, *addr, 1).await?;
    }

    println!("\n== broker {leader} (the leader) dies");
    if let Some(node) = nodes[(leader - 1) as usize].take() {
        node.shutdown().await.map_err(|e| e.to_string())?;
    }
    let t = Instant::now();
    let new_leader = wait_leader(&nodes, topic).await?;
    println!(
        "   broker {new_leader} was elected leader after {} ms",
        t.elapsed().as_millis()
    );
    let survivor = addrs[(new_leader - 1) as usize];
    println!("\n$ replog topics --bootstrap-server {survivor} --describe --topic {topic}");
    let admin = Client::connect(&[survivor], ClientConfig::default())
        .await
        .map_err(|e| e.to_string())?;
    for p in admin.describe(topic).await.map_err(|e| e.to_string())? {
        println!("{p}");
    }

    println!(
        "\n$ echo follower-message-2 | replog produce --bootstrap-server {bootstrap_addr} --topic {topic}"
    );
    let d = producer
        .send(topic, 0, &[Record::new("follower-message-2")])
        .await
        .map_err(|e| e.to_string())?;
    for step in &d.route {
        println!("   sent to {}: {}", step.addr, step.outcome);
    }
    println!("   -> {topic}/0 offset {}", d.base_offset);

    for (i, addr) in addrs.iter().enumerate() {
        if nodes[i].is_none() {
            continue;
        }
        println!(
            "\n$ replog consume --bootstrap-server {addr} --topic {topic} --from-beginning --from-replica"
        );
        print_replica(&producer, topic, *addr, 2).await?;
    }
    println!(
        "\nEvery acknowledged record is on every live broker. Done in {} ms.",
        started.elapsed().as_millis()
    );
    drop((producer, admin));
    for node in nodes.into_iter().flatten() {
        node.shutdown().await.map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Waits (at most 10 s) until the live brokers agree on a leader.
async fn wait_leader(nodes: &[Option<Node>], topic: &str) -> Result<u64, String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let leaders: Vec<Option<u64>> = nodes
            .iter()
            .flatten()
            .filter_map(|n| n.status(topic, 0).ok())
            .map(|s| s.leader)
            .collect();
        let live: Vec<u64> = nodes.iter().flatten().map(Node::id).collect();
        if let Some(Some(l)) = leaders.first()
            && live.contains(l)
            && leaders.iter().all(|x| x == &Some(*l))
        {
            return Ok(*l);
        }
        if Instant::now() >= deadline {
            return Err("no leader was elected within 10 s".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Prints the records of `addr`'s replica once it holds at least `want` of them (at most 5 s).
async fn print_replica(
    client: &Client,
    topic: &str,
    addr: SocketAddr,
    want: usize,
) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let batches = client
            .fetch(topic, 0, Offset(0), 1 << 20, Some(addr))
            .await
            .map_err(|e| e.to_string())?;
        let values: Vec<String> = batches
            .iter()
            .flat_map(|b| b.records())
            .map(|(_, r)| String::from_utf8_lossy(&r.value).into_owned())
            .collect();
        if values.len() >= want || Instant::now() >= deadline {
            for v in &values {
                println!("{v}");
            }
            println!("Processed a total of {} messages", values.len());
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Prints a line per segment; returns whether every segment but the last ends cleanly where
/// the next one begins.
fn check(dir: &Path, record_max: u32, batch_max: u32) -> std::io::Result<bool> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    files.sort();
    let mut ok = true;
    let mut expected_next: Option<(u64, u64)> = None;
    let count = files.len();
    for (i, path) in files.iter().enumerate() {
        let data = std::fs::read(path)?;
        let r = replog::__tools::inspect_segment(&data, record_max, batch_max);
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        match r.header {
            Err(kind) => {
                ok = false;
                println!("{name}: bad header: {kind}");
                expected_next = None;
                continue;
            }
            Ok((base, base_offset)) => {
                if let Some((idx, off)) = expected_next
                    && (idx, off) != (base, base_offset)
                {
                    ok = false;
                    println!(
                        "{name}: starts at log index {base}, offset {base_offset}; expected {idx}, {off}"
                    );
                }
                let end = match &r.stop {
                    None => "clean end".to_string(),
                    Some(kind) => {
                        if i + 1 < count {
                            ok = false;
                        }
                        format!("invalid frame: {kind}")
                    }
                };
                println!(
                    "{name}: log index {base}..{}, offsets {base_offset}..{}, {} frames, {} records, \
                     data ends at byte {} ({end})",
                    r.next.0, r.next.1, r.frames, r.records, r.end
                );
            }
        }
        expected_next = Some((r.next.0, r.next.1));
    }
    Ok(ok)
}
