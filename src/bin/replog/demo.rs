//! `replog demo`: the README's tutorial played on an embedded three-broker cluster in a
//! temporary directory, printing each step as the equivalent `replog` command and its output:
//! create and describe a topic, a write refused by a follower, a produce bootstrapped on a
//! follower, a consume from every broker's own replica, then the leader dies, another is
//! elected, and the same client writes on.

use std::net::{SocketAddr, TcpListener};
use std::time::{Duration, Instant};

use replog::{Client, ClientConfig, Delivery, Error, LocalCluster, Node, Offset, Record};
use tempfile::TempDir;

use crate::error::CliError;

/// The tutorial's topic: one partition, three replicas.
const TOPIC: &str = "email.send";

/// The ports the tutorial uses, when they are free.
const WANTED: [&str; 3] = ["127.0.0.1:9092", "127.0.0.1:19092", "127.0.0.1:29092"];

/// The tutorial, in one process.
pub(crate) async fn run() -> Result<(), CliError> {
    let started = Instant::now();
    let mut cluster = Cluster::start().await?;
    let leader = cluster.create_topic().await?;
    // Bootstrap the producer on a follower (never broker 1, which the first describe uses).
    let bootstrap_id = if leader == 2 { 3 } else { 2 };
    let bootstrap_addr = cluster.addr(bootstrap_id);

    cluster.describe(cluster.addr(1)).await?;
    println!("   broker {leader} leads; the others are followers.");
    cluster.append_to_follower(bootstrap_id).await?;

    print_produce_command(bootstrap_addr, "follower-message-1");
    let producer = Client::connect(&[bootstrap_addr], ClientConfig::default()).await?;
    let d = send(&producer, "follower-message-1").await?;
    println!(
        "   bootstrapped on broker {bootstrap_id} ({bootstrap_addr}); metadata named broker {leader} as leader;"
    );
    print_route(&d);
    cluster.consume_everywhere(&producer, 1).await?;

    let new_leader = cluster.kill(leader).await?;
    cluster.describe(cluster.addr(new_leader)).await?;

    // The same client: its metadata still names the dead leader.
    print_produce_command(bootstrap_addr, "follower-message-2");
    let d = send(&producer, "follower-message-2").await?;
    print_route(&d);
    cluster.consume_everywhere(&producer, 2).await?;

    println!(
        "\nEvery acknowledged record is on every live broker. Done in {} ms.",
        started.elapsed().as_millis()
    );
    drop(producer);
    cluster.shutdown().await
}

/// The tutorial's three brokers: a [`LocalCluster`] in a temporary directory.
struct Cluster {
    dir: TempDir,
    brokers: LocalCluster,
}

impl Cluster {
    /// Starts the three brokers in a new temporary directory, printing where.
    async fn start() -> Result<Cluster, CliError> {
        let dir = tempfile::tempdir().map_err(CliError::TempDir)?;
        let listeners = demo_listeners()?;
        let addrs: Vec<SocketAddr> = listeners
            .iter()
            .filter_map(|l| l.local_addr().ok())
            .collect();
        println!(
            "== three brokers on {}, {}, {} (data in {})",
            addrs[0],
            addrs[1],
            addrs[2],
            dir.path().display()
        );
        // Short Raft timings, small segments.
        let brokers = LocalCluster::start_on(listeners, dir.path(), |c| {
            c.heartbeat_interval = Duration::from_millis(100);
            c.election_timeout = Duration::from_millis(500);
            c.log.segment_bytes = 4 << 20;
            c.log.batch_bytes_max = 1 << 20;
        })
        .await?;
        for node in brokers.nodes() {
            println!("   broker {} listening on {}", node.id(), node.addr());
        }
        Ok(Cluster { dir, brokers })
    }

    /// Broker `id`'s address.
    fn addr(&self, id: u64) -> SocketAddr {
        self.brokers.addrs()[(id - 1) as usize]
    }

    /// Creates the topic through broker 2; returns its leader once elected.
    async fn create_topic(&self) -> Result<u64, CliError> {
        println!(
            "\n$ replog topics --bootstrap-server {} --create --topic {TOPIC} --partitions 1 --replication-factor 3",
            self.addr(2)
        );
        let creator = Client::connect(&[self.addr(2)], ClientConfig::default()).await?;
        creator.create_topic(TOPIC, 1, 3).await?;
        println!("Created topic {TOPIC}.");
        let leader = self.wait_leader().await?;
        // The followers are in sync once they acknowledged the new leader: a moment after its
        // election. Bounded: at most 10 s of 20 ms turns.
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            let described = creator.describe(TOPIC).await?;
            if described.iter().all(|p| p.isr.len() == 3) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(leader)
    }

    /// `replog topics --describe` through the broker at `addr`.
    async fn describe(&self, addr: SocketAddr) -> Result<(), CliError> {
        println!("\n$ replog topics --bootstrap-server {addr} --describe --topic {TOPIC}");
        let admin = Client::connect(&[addr], ClientConfig::default()).await?;
        for p in admin.describe(TOPIC).await? {
            println!("{p}");
        }
        Ok(())
    }

    /// Appends straight to follower `id`'s node, which refuses and names the leader.
    async fn append_to_follower(&self, id: u64) -> Result<(), CliError> {
        println!("\n== a write sent straight to follower broker {id} is refused, with a hint:");
        let follower = self
            .brokers
            .node(id)
            .ok_or(CliError::Demo("broker missing"))?;
        match follower.append(TOPIC, 0, &[Record::new("x")]).await {
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
        Ok(())
    }

    /// `replog consume --from-replica` on every live broker, each once it holds `want`
    /// records.
    async fn consume_everywhere(&self, client: &Client, want: usize) -> Result<(), CliError> {
        let live: Vec<SocketAddr> = self.brokers.nodes().map(Node::addr).collect();
        for addr in live {
            println!(
                "\n$ replog consume --bootstrap-server {addr} --topic {TOPIC} --from-beginning --from-replica"
            );
            print_replica(client, addr, want).await?;
        }
        Ok(())
    }

    /// Shuts broker `leader` down; returns the leader the others elect, printing how long
    /// that took from the stop (a stopping leader hands its leadership over first).
    async fn kill(&mut self, leader: u64) -> Result<u64, CliError> {
        println!("\n== broker {leader} (the leader) dies");
        let t = Instant::now();
        self.brokers.stop(leader).await?;
        let new_leader = self.wait_leader().await?;
        println!(
            "   broker {new_leader} was elected leader after {} ms",
            t.elapsed().as_millis()
        );
        // The new leader drops the dead broker from the in-sync replicas at its first
        // heartbeat the dead broker's port refuses. Bounded: at most 10 s of 20 ms turns.
        let client = Client::connect(&[self.addr(new_leader)], ClientConfig::default()).await?;
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            let described = client.describe(TOPIC).await?;
            if described.iter().all(|p| !p.isr.contains(&leader)) {
                println!(
                    "   broker {leader} left the in-sync replicas after {} ms",
                    t.elapsed().as_millis()
                );
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(new_leader)
    }

    /// Waits (at most 10 s) until a live broker leads the topic's partition.
    async fn wait_leader(&self) -> Result<u64, CliError> {
        let leaders = self
            .brokers
            .wait_for_leaders(TOPIC, 1, Duration::from_secs(10))
            .await
            .map_err(|_| CliError::Demo("no leader was elected within 10 s"))?;
        leaders
            .first()
            .copied()
            .ok_or(CliError::Demo("no leader was elected within 10 s"))
    }

    /// Shuts the live brokers down, then removes their data.
    async fn shutdown(self) -> Result<(), CliError> {
        self.brokers.shutdown().await?;
        drop(self.dir);
        Ok(())
    }
}

/// Listeners on the tutorial's ports if all three are free, else on three free loopback
/// ports; each is handed to its broker as it is.
fn demo_listeners() -> Result<Vec<TcpListener>, CliError> {
    let wanted: Vec<SocketAddr> = WANTED.iter().filter_map(|a| a.parse().ok()).collect();
    let fixed: Vec<TcpListener> = wanted
        .iter()
        .filter_map(|a| TcpListener::bind(a).ok())
        .collect();
    let listeners = if fixed.len() == wanted.len() {
        fixed
    } else {
        drop(fixed);
        println!("(ports 9092/19092/29092 are taken; using free ports instead)");
        (0..3)
            .filter_map(|_| TcpListener::bind("127.0.0.1:0").ok())
            .collect()
    };
    if listeners.len() != 3 {
        return Err(CliError::Demo("could not find three free loopback ports"));
    }
    Ok(listeners)
}

/// `echo VALUE | replog produce ...` through the broker at `addr`.
fn print_produce_command(addr: SocketAddr, value: &str) {
    println!("\n$ echo {value} | replog produce --bootstrap-server {addr} --topic {TOPIC}");
}

/// Sends one record of `value` to partition 0.
async fn send(client: &Client, value: &'static str) -> Result<Delivery, CliError> {
    Ok(client.send(TOPIC, 0, &[Record::new(value)]).await?)
}

/// Every broker the write went to and its answer, then where the record landed.
fn print_route(d: &Delivery) {
    for step in &d.route {
        println!("   sent to {}: {}", step.addr, step.outcome);
    }
    println!("   -> {TOPIC}/0 offset {}", d.base_offset);
}

/// Prints the records of `addr`'s replica once it holds at least `want` of them (at most 5 s).
async fn print_replica(client: &Client, addr: SocketAddr, want: usize) -> Result<(), CliError> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let batches = client
            .fetch(TOPIC, 0, Offset(0), 1 << 20, Some(addr.into()))
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
