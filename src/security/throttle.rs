//! Failed logins, counted by source address and slowed: each refusal of a login (a wrong
//! password, an unknown user, a mechanism not offered) is answered only after a delay that
//! grows with the failures from that address in the last minute, [`DELAY_STEP`] for each, at
//! most [`DELAY_MAX`] (Kafka delays every such answer by a fixed
//! `connection.failed.authentication.delay.ms`, 100 ms). A successful login from the address
//! forgets its failures. A client guessing passwords from one address gets at most one guess
//! per `DELAY_MAX` once it has failed for a while; honest clients that mistype lose a fraction
//! of a second.

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
/// forgotten first, then all (a flood from many addresses is slowed per connection anyway).
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
            if recent.len() >= ADDRESSES_MAX {
                recent.clear();
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

    /// A login from `from` succeeded: its failures are forgotten.
    pub(crate) fn succeeded(&self, from: IpAddr) {
        self.recent.lock().remove(&from);
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
        logins.succeeded(a);
        assert_eq!(logins.failed(a), DELAY_STEP);
    }

    #[test]
    fn the_addresses_remembered_are_bounded() {
        let logins = FailedLogins::default();
        for i in 0..(ADDRESSES_MAX as u32 + 10) {
            logins.failed(IpAddr::from(std::net::Ipv4Addr::from(i)));
        }
        assert!(logins.recent.lock().len() <= ADDRESSES_MAX);
    }
}
