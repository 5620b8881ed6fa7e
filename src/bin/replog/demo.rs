//! `replog demo`: the README's tutorial played on an embedded three-broker cluster in a
//! temporary directory, printing each step as the equivalent `replog` command and its output.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use replog::{Client, ClientConfig, Error, Node, NodeConfig, Offset, Record};

use crate::error::CliError;

/// The tutorial, in one process.
pub(crate) async fn run() -> Result<(), CliError> {
    let started = Instant::now();
    let dir = tempfile::tempdir().map_err(CliError::TempDir)?;
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
        return Err(CliError::Demo("could not find three free loopback ports"));
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
        let node = Node::start(config(id)).await?;
        println!("   broker {id} listening on {}", node.addr());
        nodes.push(Some(node));
    }
    println!(
        "\n$ replog topics --bootstrap-server {} --create --topic {topic} --partitions 1 --replication-factor 3",
        addrs[1]
    );
    let creator = Client::connect(&[addrs[1]], ClientConfig::default()).await?;
    creator.create_topic(topic, 1, 3).await?;
    println!("Created topic {topic}.");
    drop(creator);
    let leader = wait_leader(&nodes, topic).await?;
    let bootstrap_id = if leader == 2 { 3 } else { 2 };
    let bootstrap_addr = addrs[(bootstrap_id - 1) as usize];

    println!(
        "\n$ replog topics --bootstrap-server {} --describe --topic {topic}",
        addrs[0]
    );
    let admin = Client::connect(&[addrs[0]], ClientConfig::default()).await?;
    for p in admin.describe(topic).await? {
        println!("{p}");
    }
    println!("   broker {leader} leads; the others are followers.");

    println!(
        "\n== a write sent straight to follower broker {bootstrap_id} is refused, with a hint:"
    );
    let follower = nodes[(bootstrap_id - 1) as usize]
        .as_ref()
        .ok_or(CliError::Demo("broker missing"))?;
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
    let producer = Client::connect(&[bootstrap_addr], ClientConfig::default()).await?;
    let d = producer
        .send(topic, 0, &[Record::new("follower-message-1")])
        .await?;
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
        node.shutdown().await?;
    }
    let t = Instant::now();
    let new_leader = wait_leader(&nodes, topic).await?;
    println!(
        "   broker {new_leader} was elected leader after {} ms",
        t.elapsed().as_millis()
    );
    let survivor = addrs[(new_leader - 1) as usize];
    println!("\n$ replog topics --bootstrap-server {survivor} --describe --topic {topic}");
    let admin = Client::connect(&[survivor], ClientConfig::default()).await?;
    for p in admin.describe(topic).await? {
        println!("{p}");
    }

    println!(
        "\n$ echo follower-message-2 | replog produce --bootstrap-server {bootstrap_addr} --topic {topic}"
    );
    let d = producer
        .send(topic, 0, &[Record::new("follower-message-2")])
        .await?;
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
        node.shutdown().await?;
    }
    Ok(())
}

/// Waits (at most 10 s) until the live brokers agree on a leader.
async fn wait_leader(nodes: &[Option<Node>], topic: &str) -> Result<u64, CliError> {
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
            return Err(CliError::Demo("no leader was elected within 10 s"));
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
) -> Result<(), CliError> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let batches = client
            .fetch(topic, 0, Offset(0), 1 << 20, Some(addr))
            .await?;
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
