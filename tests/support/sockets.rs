//! What the kernel shows of a broker's side of a loopback TCP connection (`/proc/net/tcp`), for
//! tests that must know the broker accepted or let go of a connection that never spoke.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};

/// `/proc/net/tcp` states (include/net/tcp_states.h).
const ESTABLISHED: u8 = 0x01;
const CLOSE_WAIT: u8 = 0x08;

/// One line of `/proc/net/tcp`: local and remote address, state, bytes not yet acknowledged by
/// the other side and not yet read by this side, inode (0 while the socket is not yet a file
/// of the process that listens: still in its accept queue, or already closed).
struct Entry {
    local: SocketAddrV4,
    remote: SocketAddrV4,
    state: u8,
    tx_queue: u64,
    rx_queue: u64,
    inode: u64,
}

/// `0100007F:1F90` as the kernel prints it: the address as a native-endian u32 in hex (the
/// test machines are little-endian), then the port.
fn parse_addr(s: &str) -> Option<SocketAddrV4> {
    let (ip, port) = s.split_once(':')?;
    let ip = u32::from_str_radix(ip, 16).ok()?;
    let port = u16::from_str_radix(port, 16).ok()?;
    Some(SocketAddrV4::new(Ipv4Addr::from(ip.to_le_bytes()), port))
}

fn entries() -> Vec<Entry> {
    let table = std::fs::read_to_string("/proc/net/tcp").expect("read /proc/net/tcp");
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (tx, rx) = f.get(4)?.split_once(':')?;
            Some(Entry {
                local: parse_addr(f.get(1)?)?,
                remote: parse_addr(f.get(2)?)?,
                state: u8::from_str_radix(f.get(3)?, 16).ok()?,
                tx_queue: u64::from_str_radix(tx, 16).ok()?,
                rx_queue: u64::from_str_radix(rx, 16).ok()?,
                inode: f.get(9)?.parse().ok()?,
            })
        })
        .collect()
}

/// The entries whose local end is `local` and remote end `remote`.
fn between(local: SocketAddr, remote: SocketAddr) -> Vec<Entry> {
    let (SocketAddr::V4(local), SocketAddr::V4(remote)) = (local, remote) else {
        panic!("loopback IPv4 addresses only: {local}, {remote}");
    };
    entries()
        .into_iter()
        .filter(|e| e.local == local && e.remote == remote)
        .collect()
}

/// The broker's side of the connection from `client` to `server`.
fn server_side(server: SocketAddr, client: SocketAddr) -> Vec<Entry> {
    between(server, client)
}

/// Bytes the client at `client` sent to `server` that the broker has not read yet (still in
/// the client's send queue or in the broker's receive queue); `None` without the connection.
pub fn unread_by_server(server: SocketAddr, client: SocketAddr) -> Option<u64> {
    let sent = between(client, server).first()?.tx_queue;
    let received = server_side(server, client).first()?.rx_queue;
    Some(sent + received)
}

/// Whether the broker at `server` has taken the connection from `client` off its accept queue
/// (it holds it, or has closed it already).
pub fn accepted(server: SocketAddr, client: SocketAddr) -> bool {
    !server_side(server, client)
        .iter()
        .any(|e| e.state == ESTABLISHED && e.inode == 0)
}

/// Whether the broker at `server` has let go of the connection from `client` (closed its side,
/// whoever closed first): its side is neither open nor waiting to be closed.
pub fn released(server: SocketAddr, client: SocketAddr) -> bool {
    !server_side(server, client)
        .iter()
        .any(|e| e.state == ESTABLISHED || e.state == CLOSE_WAIT)
}
