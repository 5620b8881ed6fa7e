//! Failed logins, counted by source address and slowed: each refusal of a login (a wrong
//! password, an unknown user, a mechanism not offered) is answered only after a delay that
//! grows with the failures from that address in the last minute, [`DELAY_STEP`] for each, at
//! most [`DELAY_MAX`] (Kafka delays every such answer by a fixed
//! `connection.failed.authentication.delay.ms`, 100 ms). A successful login from the address
//! takes one failure off its count (so an account an attacker holds does not wipe its record).
//! Each connection's guesses from an address that failed for a while wait `DELAY_MAX`; honest
//! clients that mistype lose a fraction of a second. (Connections in parallel each wait: the
//! connection cap bounds them.)

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// The delay added per failure.
pub(crate) const DELAY_STEP: Duration = Duration::from_millis(100);
/// The longest delay.
pub(crate) const DELAY_MAX: Duration = Duration::from_secs(3);
/// How long a failure counts.
const WINDOW: Duration = Duration::from_secs(60);
/// Addresses remembered at most; past it, those whose failures are older than the window are
/// forgotten first, then the one whose last failure is the oldest.
const ADDRESSES_MAX: usize = 4096;

/// Failed logins per source address, shared by a broker's two doors.
#[derive(Debug, Default)]
pub(crate) struct FailedLogins {
    recent: parking_lot::Mutex<HashMap<IpAddr, (u32, Instant)>>,
}

impl FailedLogins {
    /// Records a failed login from `from`: how long to wait before answering it.
    pub(crate) fn failed(&self, from: IpAddr) -> Duration {
        let now = Instant::now();
        let mut recent = self.recent.lock();
        if recent.len() >= ADDRESSES_MAX && !recent.contains_key(&from) {
            recent.retain(|_, (_, last)| now.duration_since(*last) < WINDOW);
            let oldest = recent
                .iter()
                .min_by_key(|(_, (_, last))| *last)
                .map(|(address, _)| *address);
            if let (true, Some(oldest)) = (recent.len() >= ADDRESSES_MAX, oldest) {
                recent.remove(&oldest);
            }
        }
        let entry = recent.entry(from).or_insert((0, now));
        if now.duration_since(entry.1) >= WINDOW {
            entry.0 = 0;
        }
        entry.0 = entry.0.saturating_add(1);
        entry.1 = now;
        crate::metrics::failed_login();
        DELAY_STEP.saturating_mul(entry.0).min(DELAY_MAX)
    }

    /// A login from `from` succeeded: one failure fewer counts.
    pub(crate) fn succeeded(&self, from: IpAddr) {
        let mut recent = self.recent.lock();
        if let Some((count, _)) = recent.get_mut(&from) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                recent.remove(&from);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_from_one_address_wait_longer_each_time_up_to_the_cap() {
        let logins = FailedLogins::default();
        let (a, b): (IpAddr, IpAddr) = ("127.0.0.1".parse().unwrap(), "::1".parse().unwrap());
        assert_eq!(logins.failed(a), DELAY_STEP);
        assert_eq!(logins.failed(a), DELAY_STEP * 2);
        assert_eq!(logins.failed(b), DELAY_STEP, "another address counts apart");
        for _ in 0..100 {
            logins.failed(a);
        }
        assert_eq!(logins.failed(a), DELAY_MAX);
        // A success takes one failure off, not all of them.
        logins.succeeded(a);
        assert_eq!(logins.failed(a), DELAY_MAX);
        let fresh: IpAddr = "127.0.0.2".parse().unwrap();
        logins.failed(fresh);
        logins.succeeded(fresh);
        assert_eq!(logins.failed(fresh), DELAY_STEP);
    }

    #[test]
    fn the_addresses_remembered_are_bounded() {
        let logins = FailedLogins::default();
        for i in 0..(ADDRESSES_MAX as u32 + 10) {
            logins.failed(IpAddr::from(std::net::Ipv4Addr::from(i)));
        }
        let recent = logins.recent.lock();
        assert!(recent.len() <= ADDRESSES_MAX);
        // The latest addresses are remembered; the oldest gave way.
        let last = IpAddr::from(std::net::Ipv4Addr::from(ADDRESSES_MAX as u32 + 9));
        assert!(recent.contains_key(&last));
    }
}
