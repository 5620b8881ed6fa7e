//! Hostile connections, in small bounded counts: connections that idle, frames begun and never
//! finished, more connections than the broker allows, requests pipelined by a client that never
//! reads. Each closes the offending connection only, and an honest client is still served.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use replog::{Client, ClientConfig, LocalCluster, Record};

const TOPIC: &str = "hostile";

/// A frame header as the native protocol has it: body length, kind (1: request), op, two
/// reserved bytes, request id.
fn header(body_len: u32, op: u8, request_id: u64) -> [u8; 16] {
    let mut h = [0u8; 16];
    h[0..4].copy_from_slice(&body_len.to_le_bytes());
    h[4] = 1;
    h[5] = op;
    h[8..16].copy_from_slice(&request_id.to_le_bytes());
    h
}

/// Whether the broker closes `conn` within `limit` (it reads EOF, or the connection resets).
fn closed_within(conn: &mut TcpStream, limit: Duration) -> bool {
    conn.set_read_timeout(Some(limit)).unwrap();
    let mut buf = [0u8; 64];
    let started = Instant::now();
    // Bounded by `limit`: every read times out by then.
    loop {
        match conn.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
        if started.elapsed() >= limit {
            return false;
        }
    }
}

async fn one_broker(
    dir: &std::path::Path,
    configure: impl Fn(&mut replog::NodeConfig),
) -> LocalCluster {
    let cluster = LocalCluster::start(1, dir, |c| {
        c.topics = vec![(TOPIC.into(), 1)];
        c.heartbeat_interval_ms = 100;
        c.election_timeout_ms = 1000;
        configure(c);
    })
    .await
    .unwrap();
    cluster
        .wait_for_leaders(TOPIC, 1, Duration::from_secs(20))
        .await
        .unwrap();
    cluster
}

/// An honest client connects and writes, retrying (boundedly) while hostile connections
/// hold the broker's slots.
async fn honest_write(addr: SocketAddr, value: &'static str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(client) = Client::connect(&[addr], ClientConfig::default()).await
            && client.send(TOPIC, 0, &[Record::new(value)]).await.is_ok()
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the honest client is never served"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_and_unfinished_frames_are_closed() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = one_broker(dir.path(), |c| {
        c.connections_max_idle_ms = 300;
        c.frame_read_timeout_ms = 300;
    })
    .await;
    let addr = cluster.addrs()[0];
    let mut idle = TcpStream::connect(addr).unwrap();
    assert!(
        closed_within(&mut idle, Duration::from_secs(10)),
        "an idle connection is closed"
    );
    // A frame that announces 1000 bytes and sends 10 of them.
    let mut half = TcpStream::connect(addr).unwrap();
    half.write_all(&header(1000, 6, 1)).unwrap();
    half.write_all(&[0u8; 10]).unwrap();
    assert!(
        closed_within(&mut half, Duration::from_secs(10)),
        "an unfinished frame's connection is closed"
    );
    // A frame over the frame limit is refused at its header.
    let mut huge = TcpStream::connect(addr).unwrap();
    huge.write_all(&header(u32::MAX, 6, 1)).unwrap();
    assert!(closed_within(&mut huge, Duration::from_secs(10)));
    honest_write(addr, "after").await;
    cluster.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_the_cap_are_refused_and_idle_ones_make_room() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = one_broker(dir.path(), |c| {
        c.connections_max = 8;
        c.connections_max_idle_ms = 500;
    })
    .await;
    let addr = cluster.addrs()[0];
    let mut held: Vec<TcpStream> = (0..8).map(|_| TcpStream::connect(addr).unwrap()).collect();
    // Give the broker a moment to accept them all (bounded by the check below).
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut extra = TcpStream::connect(addr).unwrap();
    assert!(
        closed_within(&mut extra, Duration::from_millis(400)),
        "a connection past the cap is closed at once"
    );
    // The idle ones are closed after the idle timeout, and an honest client gets in.
    honest_write(addr, "served").await;
    for conn in &mut held {
        assert!(closed_within(conn, Duration::from_secs(10)));
    }
    cluster.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_pipelines_without_reading_starves_nobody() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = one_broker(dir.path(), |c| c.requests_in_flight_max = 4).await;
    let addr = cluster.addrs()[0];
    // 200 metadata requests (an empty body does not decode: each answer is an error), never
    // read. The broker answers four, then reads no further from this connection.
    let mut greedy = TcpStream::connect(addr).unwrap();
    greedy
        .set_write_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    for id in 0..200u64 {
        if greedy.write_all(&header(0, 6, id)).is_err() {
            break;
        }
    }
    // Everyone else is served meanwhile.
    honest_write(addr, "served").await;
    drop(greedy);
    cluster.shutdown().await.unwrap();
}
