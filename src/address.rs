//! Where a broker is, as an operator names it: a host name or an IP address, and a port.
//!
//! Brokers and clients keep addresses as given (`broker-3.kafka:9092`, `127.0.0.1:9092`) and
//! resolve a name each time they connect, so a broker that comes back at another IP under the
//! same name (a restarted Kubernetes pod) is found by its next connection. An IP address is
//! used as it is, without a lookup.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Longest host name (DNS's limit on a name's text form).
pub const HOST_BYTES_MAX: usize = 253;

/// A host name or IP address and a port: where a broker listens, as configured and as the
/// metadata log records it. Written and parsed as `HOST:PORT`, an IPv6 address in brackets
/// (`[::1]:9092`).
///
/// ```
/// use replog::Address;
/// let a: Address = "broker-1.example:9092".parse()?;
/// assert_eq!((a.host(), a.port()), ("broker-1.example", 9092));
/// let b = Address::from(std::net::SocketAddr::from(([127, 0, 0, 1], 19092)));
/// assert_eq!(b.to_string(), "127.0.0.1:19092");
/// assert!("no-port".parse::<Address>().is_err());
/// # Ok::<(), replog::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub struct Address {
    host: String,
    port: u16,
}

impl Address {
    /// `host` (a name or an IP address, an IPv6 one without brackets) and `port`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidAddress`] for an empty host, one longer than [`HOST_BYTES_MAX`], or one
    /// with a character no host name has.
    pub fn new(host: &str, port: u16) -> Result<Address> {
        let bad = |why: &str| Error::InvalidAddress {
            addr: format!("{host}:{port}"),
            reason: why.to_string(),
        };
        if host.parse::<IpAddr>().is_ok() {
            return Ok(Address {
                host: host.to_string(),
                port,
            });
        }
        if host.is_empty() {
            return Err(bad("no host"));
        }
        if host.len() > HOST_BYTES_MAX {
            return Err(bad(&format!(
                "a host name has at most {HOST_BYTES_MAX} bytes"
            )));
        }
        // Letters, digits, '-', '.', and '_' (which DNS does not allow in host names but
        // container runtimes use).
        if !host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
        {
            return Err(bad(
                "a host name has only letters, digits, '-', '.' and '_'",
            ));
        }
        Ok(Address {
            host: host.to_string(),
            port,
        })
    }

    /// The host: a name, or an IP address (an IPv6 one without brackets).
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The socket address, if the host is an IP address (no lookup).
    pub fn ip(&self) -> Option<SocketAddr> {
        let ip: IpAddr = self.host.parse().ok()?;
        Some(SocketAddr::new(ip, self.port))
    }

    /// Where the host is now: its IP address, or the addresses its name resolves to (IPv4
    /// first: brokers usually listen on IPv4, and `localhost` may resolve to `::1` too).
    ///
    /// # Errors
    ///
    /// The resolver's error for a name it cannot resolve, or one with no address.
    pub async fn resolve(&self) -> std::io::Result<Vec<SocketAddr>> {
        if let Some(addr) = self.ip() {
            return Ok(vec![addr]);
        }
        #[cfg(any(test, feature = "failpoints"))]
        if let Some(ip) = crate::env::NetFaults::host_ip(&self.host) {
            return Ok(vec![SocketAddr::new(ip, self.port)]);
        }
        let mut addrs: Vec<SocketAddr> = tokio::net::lookup_host((self.host.as_str(), self.port))
            .await?
            .collect();
        if addrs.is_empty() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("{} resolves to no address", self.host),
            ));
        }
        addrs.sort_by_key(SocketAddr::is_ipv6);
        Ok(addrs)
    }

    /// The first address [`resolve`](Self::resolve) gives, for binding a listener.
    ///
    /// # Errors
    ///
    /// As [`resolve`](Self::resolve).
    pub async fn resolve_first(&self) -> std::io::Result<SocketAddr> {
        let addrs = self.resolve().await?;
        Ok(addrs[0])
    }

    /// The TLS server name a client checks the broker's certificate against: the host name,
    /// or the IP address. A host name TLS cannot check (one with '_') is checked as a name no
    /// certificate holds, so the handshake fails instead of checking another name.
    pub(crate) fn server_name(&self) -> rustls_pki_types::ServerName<'static> {
        rustls_pki_types::ServerName::try_from(self.host.clone()).unwrap_or_else(|_| {
            rustls_pki_types::ServerName::DnsName(
                rustls_pki_types::DnsName::try_from("host-name-tls-cannot-check.invalid")
                    .expect("a valid DNS name"),
            )
        })
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

impl FromStr for Address {
    type Err = Error;

    fn from_str(s: &str) -> Result<Address> {
        let bad = |why: &str| Error::InvalidAddress {
            addr: s.to_string(),
            reason: why.to_string(),
        };
        let (host, port) = s.rsplit_once(':').ok_or_else(|| bad("no :PORT"))?;
        let port: u16 = port
            .parse()
            .map_err(|_| bad("the port is not a number from 0 to 65535"))?;
        let host = match host.strip_prefix('[') {
            Some(v6) => {
                let v6 = v6.strip_suffix(']').ok_or_else(|| bad("an unclosed '['"))?;
                if v6.parse::<std::net::Ipv6Addr>().is_err() {
                    return Err(bad("not an IPv6 address in brackets"));
                }
                v6
            }
            None if host.contains(':') => {
                return Err(bad("an IPv6 address goes in brackets: [ADDR]:PORT"));
            }
            None => host,
        };
        Address::new(host, port)
    }
}

impl From<SocketAddr> for Address {
    fn from(addr: SocketAddr) -> Address {
        Address {
            host: addr.ip().to_string(),
            port: addr.port(),
        }
    }
}

impl From<&SocketAddr> for Address {
    fn from(addr: &SocketAddr) -> Address {
        Address::from(*addr)
    }
}

impl From<&Address> for Address {
    fn from(addr: &Address) -> Address {
        addr.clone()
    }
}

impl From<Address> for String {
    fn from(addr: Address) -> String {
        addr.to_string()
    }
}

impl TryFrom<String> for Address {
    type Error = Error;

    fn try_from(s: String) -> Result<Address> {
        s.parse()
    }
}

impl PartialEq<SocketAddr> for Address {
    fn eq(&self, other: &SocketAddr) -> bool {
        self.ip() == Some(*other)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_ip_addresses_parse_and_print_back() {
        for text in [
            "localhost:9092",
            "broker-3.kafka.svc.cluster.local:19092",
            "my_broker:1",
            "127.0.0.1:29092",
            "[::1]:9092",
            "[fe80::1]:0",
        ] {
            let a: Address = text.parse().unwrap();
            assert_eq!(a.to_string(), text);
            // Through serde as a string, as configs and the metadata log hold it.
            let json = serde_json::to_string(&a).unwrap();
            assert_eq!(json, format!("\"{text}\""));
            assert_eq!(serde_json::from_str::<Address>(&json).unwrap(), a);
        }
        let v6: Address = "[::1]:9092".parse().unwrap();
        assert_eq!(v6.host(), "::1");
        assert_eq!(v6.ip(), Some("[::1]:9092".parse().unwrap()));
        assert_eq!("a:1".parse::<Address>().unwrap().ip(), None);
    }

    #[test]
    fn bad_addresses_are_refused_with_the_reason() {
        for (text, why) in [
            ("localhost", "no :PORT"),
            ("localhost:", "port"),
            ("localhost:65536", "port"),
            (":9092", "no host"),
            ("::1:9092", "brackets"),
            ("[::1:9092", "unclosed"),
            ("[nope]:1", "IPv6"),
            ("bad host:1", "letters"),
            ("a/b:1", "letters"),
        ] {
            let err = text.parse::<Address>().unwrap_err();
            assert!(
                matches!(&err, Error::InvalidAddress { addr, reason } if addr == text && reason.contains(why)),
                "{text}: {err}"
            );
        }
        let long = format!("{}:1", "a".repeat(HOST_BYTES_MAX + 1));
        assert!(long.parse::<Address>().is_err());
        assert!(
            format!("{}:1", "a".repeat(HOST_BYTES_MAX))
                .parse::<Address>()
                .is_ok()
        );
        assert!(serde_json::from_str::<Address>("\"nope\"").is_err());
    }

    #[tokio::test]
    async fn an_ip_address_resolves_to_itself_and_localhost_to_loopback() {
        let a: Address = "127.0.0.1:7".parse().unwrap();
        assert_eq!(a.resolve().await.unwrap(), vec![a.ip().unwrap()]);
        let local: Address = "localhost:7".parse().unwrap();
        let resolved = local.resolve().await.unwrap();
        assert!(
            resolved.iter().all(|s| s.ip().is_loopback()),
            "{resolved:?}"
        );
        assert!(resolved[0].is_ipv4() || resolved.iter().all(SocketAddr::is_ipv6));
    }
}
