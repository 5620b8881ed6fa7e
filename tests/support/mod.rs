//! The fixture the test binaries share: brokers in this process ([`nodes`]) or as `replog node`
//! processes ([`processes`]), free loopback ports for each ([`ports`]), what the kernel shows
//! of a broker's connections ([`sockets`]), threads that keep cores busy ([`cpu`]), and the one
//! wait on a condition with a deadline ([`wait`]).
//!
//! Each binary includes it with `#[path = "../support/mod.rs"] mod support;` and uses the part
//! it needs, hence the `dead_code` and `unused_imports` allowances for this module only.
#![allow(dead_code, unused_imports)]

pub mod cpu;
pub mod nodes;
pub mod ports;
pub mod processes;
pub mod sockets;
pub mod wait;

pub use cpu::CpuHog;
pub use nodes::{
    ELECTION_TIMEOUT, HEARTBEAT_INTERVAL, free_addrs, local_cluster, shutdown_all, spawn_writer,
    start_all, start_node, wait_for_acked_on_every_replica, wait_for_writes,
};
pub use ports::process_addrs;
pub use processes::{Broker, cli};
pub use wait::{wait_until, wait_until_blocking};

use std::net::SocketAddr;
use std::time::Duration;

/// A client of the brokers at `addrs`, connecting again while they start (at most `limit`).
pub async fn connect(
    addrs: &[SocketAddr],
    config: replog::ClientConfig,
    limit: Duration,
) -> replog::Client {
    wait_until(limit, "brokers to start", async || {
        replog::Client::connect(addrs, config.clone()).await
    })
    .await
}
