//! Ports for broker processes started by the tests (shared by the test binaries).

use std::net::SocketAddr;

/// Free loopback ports for brokers in other processes, which cannot be handed a listener:
/// below the kernel's ephemeral range (32768 and up), where no `bind` to port 0, this binary's
/// or another test binary's, ever lands, so a port found free here stays free for the broker.
/// Each call takes a new block of ports from a counter, starting at one derived from the process
/// id, so that test binaries running at once pick different blocks.
pub fn process_addrs(n: usize) -> Vec<SocketAddr> {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let base = 20_000 + (std::process::id() % 97) * 100;
    // Bounded: at most 100 blocks are tried.
    for _ in 0..100 {
        let block = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let first = 20_000 + (base - 20_000 + block * 8) % 12_000;
        let addrs: Vec<SocketAddr> = (0..n as u32)
            .map(|i| SocketAddr::from(([127, 0, 0, 1], (first + i) as u16)))
            .collect();
        if addrs.iter().all(|a| std::net::TcpListener::bind(a).is_ok()) {
            return addrs;
        }
    }
    panic!("no block of {n} free ports below the ephemeral range");
}
