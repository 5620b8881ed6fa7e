//! Fault injection on the network between the brokers of an in-process cluster, for tests
//! (`failpoints` feature).

#[cfg(any(test, feature = "failpoints"))]
use std::sync::Arc;

/// Decides which broker-to-broker messages of an in-process cluster are lost or late, for
/// tests (`failpoints` feature). One injector is shared by every broker of the cluster through
/// `Env::with_net_faults`; it acts on Raft traffic between brokers, not on clients.
///
/// A lost request is never delivered; a lost response belongs to a request that *was*
/// delivered and processed. Either way the sender waits out its timeout, as it would on a real
/// network.
#[cfg(any(test, feature = "failpoints"))]
#[derive(Debug, Default)]
pub struct NetFaults {
    state: parking_lot::Mutex<NetState>,
}

#[cfg(any(test, feature = "failpoints"))]
#[derive(Debug, Default)]
struct NetState {
    /// Directed links `(from, to)` that carry nothing.
    cut: std::collections::HashSet<(u64, u64)>,
    /// Chance, in thousandths, that a message on a working link is lost.
    loss_per_mille: u32,
    /// Each delivered request waits this long first: `[min, max]` milliseconds.
    delay_ms: (u64, u64),
    /// A link's rate, in bytes a second (0: unlimited): a request's bytes take their time to
    /// cross it, counted against the request's deadline.
    link_bytes_per_sec: u64,
    /// Brokers whose replication requests (AppendEntries, heartbeats included) are lost.
    muted: std::collections::HashSet<u64>,
    rng: u64,
}

/// What happens to one message.
#[cfg(any(test, feature = "failpoints"))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    Deliver(std::time::Duration),
    Lose,
}

/// Host names pointed at addresses by [`NetFaults::set_host`], as lines of `/etc/hosts` would.
#[cfg(any(test, feature = "failpoints"))]
static HOSTS: parking_lot::Mutex<Option<std::collections::HashMap<String, std::net::IpAddr>>> =
    parking_lot::Mutex::new(None);

#[cfg(any(test, feature = "failpoints"))]
impl NetFaults {
    /// An injector with a healthy network.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Makes host name `name` resolve to `ip` in this whole process (brokers and clients), as a
    /// line of `/etc/hosts` would, or back to the system's resolver with `None`: for tests of
    /// a broker that comes back under the same name at another address. Give each test names
    /// of its own: the table is the process's, like the system's.
    pub fn set_host(name: &str, ip: Option<std::net::IpAddr>) {
        let mut hosts = HOSTS.lock();
        let table = hosts.get_or_insert_with(Default::default);
        match ip {
            Some(ip) => table.insert(name.to_string(), ip),
            None => table.remove(name),
        };
    }

    /// Where [`set_host`](Self::set_host) points `name`, if it does.
    pub(crate) fn host_ip(name: &str) -> Option<std::net::IpAddr> {
        HOSTS.lock().as_ref()?.get(name).copied()
    }

    /// Cuts the link from `from` to `to` (one way).
    pub fn cut(&self, from: u64, to: u64) {
        self.state.lock().cut.insert((from, to));
    }

    /// Cuts every link between a broker in `a` and one in `b`, both ways.
    pub fn partition(&self, a: &[u64], b: &[u64]) {
        let mut s = self.state.lock();
        for x in a {
            for y in b {
                s.cut.insert((*x, *y));
                s.cut.insert((*y, *x));
            }
        }
    }

    /// Loses each message on a working link with this chance, in thousandths.
    pub fn set_loss(&self, per_mille: u32) {
        self.state.lock().loss_per_mille = per_mille.min(1000);
    }

    /// Delays each delivered request by `min_ms..=max_ms` milliseconds.
    pub fn set_delay(&self, min_ms: u64, max_ms: u64) {
        self.state.lock().delay_ms = (min_ms, max_ms.max(min_ms));
    }

    /// Makes every link carry `bytes_per_sec` (0: unlimited), as a slow network or a follower's
    /// slow disk would: a request of `n` bytes needs `n / bytes_per_sec` of its deadline to
    /// arrive, and one that cannot arrive in time is never delivered.
    pub fn set_link_rate(&self, bytes_per_sec: u64) {
        self.state.lock().link_bytes_per_sec = bytes_per_sec;
    }

    /// Loses every replication request broker `id` sends (AppendEntries, heartbeats
    /// included) while its votes still arrive: it can win an election, and nobody hears from it
    /// as leader.
    pub fn mute_replication_from(&self, id: u64) {
        self.state.lock().muted.insert(id);
    }

    /// Whether broker `from`'s replication requests are lost.
    pub(crate) fn replication_muted(&self, from: u64) -> bool {
        self.state.lock().muted.contains(&from)
    }

    /// Restores a healthy network: no cuts, no loss, no delay, no rate limit, no muted
    /// replication.
    pub fn heal(&self) {
        let mut s = self.state.lock();
        s.cut.clear();
        s.muted.clear();
        s.loss_per_mille = 0;
        s.delay_ms = (0, 0);
        s.link_bytes_per_sec = 0;
    }

    /// How long a request of `bytes` takes to cross a link at the rate set.
    pub(crate) fn transit(&self, bytes: usize) -> std::time::Duration {
        match self.state.lock().link_bytes_per_sec {
            0 => std::time::Duration::ZERO,
            rate => std::time::Duration::from_secs_f64(bytes as f64 / rate as f64),
        }
    }

    /// The fate of one message from `from` to `to`.
    pub(crate) fn verdict(&self, from: u64, to: u64) -> Verdict {
        let mut s = self.state.lock();
        if s.cut.contains(&(from, to)) {
            return Verdict::Lose;
        }
        // xorshift: the sequence is not seeded per test; the schedule's own seed decides when
        // faults are on, this only spreads them over messages.
        s.rng = if s.rng == 0 { 0x2545_F491 } else { s.rng };
        s.rng ^= s.rng << 13;
        s.rng ^= s.rng >> 7;
        s.rng ^= s.rng << 17;
        if s.loss_per_mille > 0 && (s.rng % 1000) < u64::from(s.loss_per_mille) {
            return Verdict::Lose;
        }
        let (lo, hi) = s.delay_ms;
        let ms = if hi > lo {
            lo + (s.rng >> 20) % (hi - lo + 1)
        } else {
            lo
        };
        Verdict::Deliver(std::time::Duration::from_millis(ms))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn cuts_are_directed_partitions_symmetric_and_heal_restores_everything() {
        let net = NetFaults::new();
        assert_eq!(net.verdict(1, 2), Verdict::Deliver(Duration::ZERO));
        net.cut(1, 2);
        assert_eq!(net.verdict(1, 2), Verdict::Lose);
        assert_eq!(net.verdict(2, 1), Verdict::Deliver(Duration::ZERO));
        net.partition(&[3], &[1, 2]);
        for (a, b) in [(3, 1), (1, 3), (3, 2), (2, 3)] {
            assert_eq!(net.verdict(a, b), Verdict::Lose);
        }
        net.heal();
        assert_eq!(net.verdict(1, 2), Verdict::Deliver(Duration::ZERO));
        assert_eq!(net.verdict(3, 1), Verdict::Deliver(Duration::ZERO));
    }

    #[test]
    fn loss_and_delay_stay_within_their_settings() {
        let net = NetFaults::new();
        net.set_loss(1000);
        assert!((0..100).all(|_| net.verdict(1, 2) == Verdict::Lose));
        net.set_loss(200);
        net.set_delay(5, 9);
        let mut lost = 0;
        for _ in 0..10_000 {
            match net.verdict(1, 2) {
                Verdict::Lose => lost += 1,
                Verdict::Deliver(d) => {
                    assert!((Duration::from_millis(5)..=Duration::from_millis(9)).contains(&d));
                }
            }
        }
        assert!((1000..3000).contains(&lost), "about a fifth lost: {lost}");
    }

    #[test]
    fn a_rate_limited_link_takes_time_in_proportion_to_bytes_until_healed() {
        let net = NetFaults::new();
        assert_eq!(net.transit(1 << 20), Duration::ZERO);
        net.set_link_rate(4 << 20);
        assert_eq!(net.transit(1 << 20), Duration::from_millis(250));
        assert_eq!(net.transit(0), Duration::ZERO);
        net.heal();
        assert_eq!(net.transit(1 << 20), Duration::ZERO);
    }
}
