//! Attacks at real sizes, against a `replog node` process with
//! its default budgets, measuring the broker's memory: ignored in CI (it opens some twenty
//! thousand connections and moves gigabytes); run it with
//! `cargo test --release --test cluster -- --ignored attack --nocapture`.
//!
//! - D2: 64 connections each send a 16 MiB frame header and 16 MiB − 1 body bytes.
//! - D3: 4 connections each pipeline 512 fetches of 1 MiB and never read an answer.
//! - D4: 19,990 connections opened and left idle.
//!
//! After each, the broker's peak resident memory (`VmHWM`) and its anonymous memory now
//! (`RssAnon`) are printed beside its budgets, and a client connected before the attacks
//! still produces and fetches. The test fails if the peak passes the budgets plus 64 MiB.

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use replog::{Client, ClientConfig, Offset, Record};

use crate::hostile::{fetch_body, header};
use crate::support::{process_addrs, wait_until};

const TOPIC: &str = "attack";

/// A line's value in KiB of the broker's `/proc/{pid}/status`, opened once (so that it can be
/// read again while the attack holds every file descriptor this process may have).
fn status_kib(status: &mut std::fs::File, key: &str) -> u64 {
    use std::io::{Read, Seek};
    let mut text = String::new();
    if status.rewind().is_err() || status.read_to_string(&mut text).is_err() {
        return 0;
    }
    text.lines()
        .find_map(|l| {
            l.strip_prefix(key)?
                .trim()
                .strip_suffix("kB")?
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// The broker still serves a client that connected before the attack.
async fn still_served(client: &Client, what: &str) {
    let awaited = format!("{what}: the honest client to be served");
    wait_until(Duration::from_secs(60), &awaited, async || {
        let sent = client
            .send(TOPIC, 0, &[Record::new(what.to_string())])
            .await;
        let fetched = client.fetch(TOPIC, 0, Offset(0), 1 << 16, None).await;
        sent.is_ok() && fetched.is_ok_and(|b| !b.is_empty())
    })
    .await
}

fn report(status: &mut std::fs::File, phase: &str, budget_mib: u64) {
    let peak = status_kib(status, "VmHWM:");
    let anon = status_kib(status, "RssAnon:");
    println!(
        "{phase}: peak RSS {:.0} MiB, anonymous now {:.0} MiB (budgets {budget_mib} MiB + 64)",
        mib(peak),
        mib(anon)
    );
    assert!(
        peak <= (budget_mib + 64) << 10,
        "{phase}: peak RSS {:.0} MiB over the budgets",
        mib(peak)
    );
}

/// A `replog node` process serving `TOPIC` with its default budgets (and `extra` arguments),
/// its `/proc/{pid}/status`, and a client connected to it.
async fn start_broker(
    dir: &std::path::Path,
    addr: SocketAddr,
    extra: &[String],
) -> (crate::Broker, std::fs::File, Client) {
    let broker = std::process::Command::new(env!("CARGO_BIN_EXE_replog"))
        .args(["node", "--id", "1", "--listen", &addr.to_string(), "--data"])
        .arg(dir)
        .args(["--topic", &format!("{TOPIC}:1")])
        .args(extra)
        .env("RUST_LOG", "warn")
        .spawn()
        .unwrap();
    // Killed when dropped, so a failed test leaves no broker behind.
    let broker = crate::Broker::from(broker);
    let status = std::fs::File::open(format!("/proc/{}/status", broker.child.id())).unwrap();
    let mut config = ClientConfig::default();
    config.request_timeout = Duration::from_millis(30_000);
    config.delivery_timeout = Duration::from_millis(60_000);
    let client = crate::support::connect(&[addr], config, Duration::from_secs(30)).await;
    (broker, status, client)
}

/// Writes `n` records of 1000 KiB, checks the client is served and reports the broker's memory
/// before the attacks.
async fn fill_and_report(client: &Client, status: &mut std::fs::File, n: usize) {
    for _ in 0..n {
        client
            .send(TOPIC, 0, &[Record::new(vec![5u8; 1000 << 10])])
            .await
            .unwrap();
    }
    still_served(client, "before").await;
    report(status, "before the attacks", BUDGET_MIB);
}

/// The defaults: 256 MiB of requests, 256 MiB of answers, two frames for peers (none).
const BUDGET_MIB: u64 = 256 + 256 + 32;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the attack suite at full size: minutes, gigabytes, twenty thousand connections"]
async fn attack_suite_at_full_size_stays_within_the_budgets() {
    let dir = tempfile::tempdir().unwrap();
    let addr: SocketAddr = process_addrs(1)[0];
    let (mut broker, mut status, client) = start_broker(dir.path(), addr, &[]).await;
    let budget_mib = BUDGET_MIB;
    fill_and_report(&client, &mut status, 8).await;

    // D2: half-sent frames.
    let d2 = std::thread::spawn(move || {
        let body = vec![1u8; (16 << 20) - 1];
        let conns: Vec<TcpStream> = (0..64)
            .filter_map(|_| {
                let mut c = TcpStream::connect(addr).ok()?;
                c.set_write_timeout(Some(Duration::from_secs(2))).ok()?;
                c.write_all(&header(16 << 20, 6, 1)).ok()?;
                // A frame over the budget's free share waits for it (and times out): the
                // body stops going in when the broker stops reading.
                let _ = c.write_all(&body);
                Some(c)
            })
            .collect();
        conns
    });
    // The attack stands for 5 s before the honest client tries: its length is the subject.
    tokio::time::sleep(Duration::from_secs(5)).await;
    still_served(&client, "during D2").await;
    let held = d2.join().unwrap();
    report(
        &mut status,
        "D2: 64 connections x 16 MiB half-sent frames",
        budget_mib,
    );
    drop(held);

    // D3: pipelined fetches never read.
    let body = fetch_body(TOPIC, 0, 1 << 20);
    let d3 = std::thread::spawn(move || {
        (0..4)
            .filter_map(|_| {
                let mut c = TcpStream::connect(addr).ok()?;
                c.set_write_timeout(Some(Duration::from_secs(2))).ok()?;
                for id in 0..512u64 {
                    let mut frame = header(body.len() as u32, 5, id).to_vec();
                    frame.extend_from_slice(&body);
                    if c.write_all(&frame).is_err() {
                        break;
                    }
                }
                Some(c)
            })
            .collect::<Vec<_>>()
    });
    // The attack stands for 5 s before the honest client tries: its length is the subject.
    tokio::time::sleep(Duration::from_secs(5)).await;
    still_served(&client, "during D3").await;
    let held = d3.join().unwrap();
    report(
        &mut status,
        "D3: 4 x 512 pipelined 1 MiB fetches, never read",
        budget_mib,
    );
    drop(held);

    // D4: idle connections, as many as the file descriptors allow.
    let d4 = std::thread::spawn(move || {
        let started = Instant::now();
        let (mut conns, mut failures) = (Vec::new(), 0);
        let mut last_error = None;
        while conns.len() < 19_990 && failures < 100 && started.elapsed() < Duration::from_secs(120)
        {
            match TcpStream::connect_timeout(&addr, Duration::from_millis(500)) {
                Ok(c) => conns.push(c),
                Err(e) => {
                    failures += 1;
                    last_error = Some(e);
                    // Pacing the attacker's next connect after a refusal, not a wait.
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
        }
        (conns, failures, last_error)
    });
    let (held, failures, last_error) = d4.join().unwrap();
    println!(
        "D4: {} idle connections opened ({failures} connects failed, last: {last_error:?})",
        held.len()
    );
    still_served(&client, "during D4").await;
    report(&mut status, "D4: idle connections", budget_mib);
    drop(held);

    drop(client);
    assert!(
        broker.child.try_wait().unwrap().is_none(),
        "the broker survived the attacks"
    );
}

/// The Kafka door takes its clients' memory from the broker's budgets, which it shares with
/// the native door: 48 connections each send a Kafka Fetch of 16 MiB and never read the
/// answer (K1), then 64 connections each send a 16 MiB Kafka frame header and 16 MiB − 1 body
/// bytes (K2). The broker's peak resident memory stays within the budgets plus 64 MiB, and it
/// serves a client afterwards. Before, each Kafka connection held its own request and
/// answer: K1 built 48 answers of 16 MiB at once (and copied each once more to frame it),
/// K2 held 64 bodies of 16 MiB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kafka_door_holds_its_clients_to_the_brokers_budgets() {
    use kafka_protocol::messages::ApiKey;
    let dir = tempfile::tempdir().unwrap();
    let addrs = process_addrs(2);
    let (addr, kafka) = (addrs[0], addrs[1]);
    let (mut broker, mut status, client) = start_broker(
        dir.path(),
        addr,
        &["--kafka-listen".into(), kafka.to_string()],
    )
    .await;
    fill_and_report(&client, &mut status, 20).await;

    // K1: Kafka fetches of 16 MiB, never read.
    let mut request = crate::kafka::fetch_request(TOPIC, 1, 16 << 20);
    request.topics[0].partitions[0].partition_max_bytes = 16 << 20;
    let frame = crate::kafka::kafka_frame(ApiKey::Fetch, 11, &request).to_vec();
    let k1 = std::thread::spawn(move || {
        (0..48)
            .filter_map(|_| {
                let mut c = TcpStream::connect(kafka).ok()?;
                c.set_write_timeout(Some(Duration::from_secs(2))).ok()?;
                c.write_all(&frame).ok()?;
                Some(c)
            })
            .collect::<Vec<_>>()
    });
    let held = k1.join().unwrap();
    assert_eq!(held.len(), 48);
    // The attack stands for 5 s before memory is read: its length is the subject.
    tokio::time::sleep(Duration::from_secs(5)).await;
    report(
        &mut status,
        "K1: 48 Kafka fetches of 16 MiB, never read",
        BUDGET_MIB,
    );
    drop(held);
    still_served(&client, "after K1").await;

    // K2: half-sent Kafka frames of 16 MiB.
    let body = std::sync::Arc::new(vec![1u8; (16 << 20) - 1]);
    let k2: Vec<_> = (0..64)
        .map(|_| {
            let body = std::sync::Arc::clone(&body);
            std::thread::spawn(move || {
                let mut c = TcpStream::connect(kafka).ok()?;
                c.set_write_timeout(Some(Duration::from_secs(2))).ok()?;
                let mut claim = Vec::new();
                bytes::BufMut::put_i32(&mut claim, 16 << 20);
                c.write_all(&claim).ok()?;
                // Past the budget the broker stops reading: the write times out.
                let _ = c.write_all(&body);
                Some(c)
            })
        })
        .collect();
    // (A client's request waits for the request budget meanwhile, up to the frame timeout,
    // 30 s, as in D2: not waited for here.) The attack stands for 5 s: its length is the
    // subject.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let held: Vec<TcpStream> = k2.into_iter().filter_map(|t| t.join().unwrap()).collect();
    assert_eq!(held.len(), 64);
    report(
        &mut status,
        "K2: 64 Kafka connections x 16 MiB half-sent frames",
        BUDGET_MIB,
    );
    drop(held);
    still_served(&client, "after K2").await;
    drop(client);
    assert!(
        broker.child.try_wait().unwrap().is_none(),
        "the broker survived the attacks"
    );
}
