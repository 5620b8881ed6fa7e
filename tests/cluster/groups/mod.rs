//! Consumer groups: members sharing a topic's partitions, a killed member's
//! partitions moving to the others within the session timeout, commits fenced by generation,
//! committed offsets surviving the coordinator's failover, and a restarted consumer resuming
//! at its group's committed offset.
//!
//! This file holds what the subjects share; `membership.rs` holds the tests of members
//! joining, leaving and sharing partitions, `offsets.rs` those of committed offsets (fencing,
//! resets, the coordinator's failover, the offsets topic, the CLI), `deletion.rs` those of
//! deleting groups and offsets.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::support::wait_until;
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

mod deletion;
mod membership;
mod offsets;

/// Polls `consumer` until it is a member of a complete generation (at most 30 s).
async fn joined(consumer: &mut Consumer) {
    poll_until(consumer, "a generation joined", |c| {
        c.generation().is_some()
    })
    .await;
}

/// Polls `consumer` until `done` holds of it (at most 30 s).
async fn poll_until(consumer: &mut Consumer, what: &str, done: impl Fn(&Consumer) -> bool) {
    wait_until(Duration::from_secs(30), what, async || {
        if done(consumer) {
            return Ok(());
        }
        consumer.poll(Duration::from_millis(100)).await.unwrap();
        Err(format!("assignment {:?}", consumer.assignment()))
    })
    .await;
}

/// [`poll_until`] in a spawned task, returning the consumer: the condition owns it (behind a
/// lock), because a condition that borrows from the task makes the task's future not provably
/// `Send`.
async fn poll_until_owned(consumer: Consumer, what: &str, done: fn(&Consumer) -> bool) -> Consumer {
    let shared = Arc::new(tokio::sync::Mutex::new(consumer));
    let polled = Arc::clone(&shared);
    wait_until(Duration::from_secs(30), what, async move || {
        let mut consumer = polled.lock().await;
        if done(&consumer) {
            return Ok(());
        }
        consumer.poll(Duration::from_millis(100)).await.unwrap();
        Err(format!("assignment {:?}", consumer.assignment()))
    })
    .await;
    Arc::into_inner(shared)
        .expect("the condition is dropped with the wait")
        .into_inner()
}

fn broker_at(cluster: &replog::LocalCluster, addr: &replog::Address) -> replog::NodeId {
    cluster
        .nodes()
        .find(|n| *addr == n.addr())
        .map(|n| n.id())
        .expect("a broker at the coordinator's address")
}
