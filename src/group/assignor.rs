//! What a consumer group's leader runs: the partition assignors and Kafka's consumer-protocol
//! encoding of subscriptions and assignments (`ConsumerProtocolSubscription` and
//! `ConsumerProtocolAssignment`, version 0, which every Kafka client reads), so that replog
//! consumers and Kafka consumers can share a group.
//!
//! Subscription, big-endian: `i16 version | i32 topic_count | topic_count × (i16 len, bytes)
//! | i32 user_data_len (-1: none) | user_data`. Later versions add fields after these, which a
//! reader of version 0 ignores (Kafka's rule for this protocol).
//!
//! Assignment: `i16 version | i32 topic_count | topic_count × (i16 len, bytes, i32
//! partition_count, partition_count × i32) | i32 user_data_len | user_data`.

use std::collections::{BTreeMap, BTreeSet};

use bytes::{Buf, BufMut, Bytes, BytesMut};

/// The group protocol type of consumers (Kafka's).
pub(crate) const CONSUMER_PROTOCOL: &str = "consumer";

/// How a consumer group's leader spreads partitions over the members.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Assignor {
    /// Kafka's `range`: per topic, each member gets a run of consecutive partitions (the
    /// first members one more when they do not divide evenly).
    #[default]
    Range,
    /// Kafka's `roundrobin`: every subscribed partition, in order, dealt to the members in
    /// turn.
    RoundRobin,
}

impl Assignor {
    /// The protocol name Kafka clients know it by.
    pub fn name(self) -> &'static str {
        match self {
            Assignor::Range => "range",
            Assignor::RoundRobin => "roundrobin",
        }
    }

    pub(crate) fn from_name(name: &str) -> Option<Assignor> {
        match name {
            "range" => Some(Assignor::Range),
            "roundrobin" => Some(Assignor::RoundRobin),
            _ => None,
        }
    }

    /// Assigns the partitions of the subscribed topics (`partition_counts`) to the members
    /// (`subscriptions`: member id → its topics). Every partition of a subscribed topic goes
    /// to exactly one member subscribed to it.
    pub(crate) fn assign(
        self,
        subscriptions: &BTreeMap<String, Vec<String>>,
        partition_counts: &BTreeMap<String, u32>,
    ) -> BTreeMap<String, Vec<(String, Vec<u32>)>> {
        let mut out: BTreeMap<String, BTreeMap<String, Vec<u32>>> = subscriptions
            .keys()
            .map(|m| (m.clone(), BTreeMap::new()))
            .collect();
        let subscribed = |topic: &str| -> Vec<&String> {
            subscriptions
                .iter()
                .filter(|(_, topics)| topics.iter().any(|t| t == topic))
                .map(|(m, _)| m)
                .collect()
        };
        let topics: BTreeSet<&String> = subscriptions.values().flatten().collect();
        match self {
            Assignor::Range => {
                for topic in topics {
                    let n = partition_counts.get(topic).copied().unwrap_or(0);
                    let members = subscribed(topic);
                    if members.is_empty() {
                        continue;
                    }
                    let m = members.len() as u32;
                    let (per, extra) = (n / m, n % m);
                    for (i, member) in members.into_iter().enumerate() {
                        let i = i as u32;
                        let start = per * i + i.min(extra);
                        let len = per + u32::from(i < extra);
                        if len > 0 {
                            out.entry(member.clone())
                                .or_default()
                                .insert(topic.clone(), (start..start + len).collect());
                        }
                    }
                }
            }
            Assignor::RoundRobin => {
                let members: Vec<&String> = subscriptions.keys().collect();
                let mut next = 0usize;
                for topic in topics {
                    let n = partition_counts.get(topic).copied().unwrap_or(0);
                    for p in 0..n {
                        // The next member in turn that subscribes to the topic (one does).
                        for _ in 0..members.len() {
                            let member = members[next % members.len()];
                            next += 1;
                            if subscriptions[member].iter().any(|t| t == topic) {
                                out.entry(member.clone())
                                    .or_default()
                                    .entry(topic.clone())
                                    .or_default()
                                    .push(p);
                                break;
                            }
                        }
                    }
                }
            }
        }
        out.into_iter()
            .map(|(m, topics)| (m, topics.into_iter().collect()))
            .collect()
    }
}

fn put_str(b: &mut BytesMut, s: &str) {
    let len = i16::try_from(s.len()).unwrap_or(i16::MAX);
    b.put_i16(len);
    b.put_slice(&s.as_bytes()[..len as usize]);
}

/// A subscription to `topics`, version 0.
pub(crate) fn encode_subscription(topics: &[String]) -> Bytes {
    let mut b = BytesMut::new();
    b.put_i16(0);
    b.put_i32(i32::try_from(topics.len()).unwrap_or(i32::MAX));
    for t in topics {
        put_str(&mut b, t);
    }
    b.put_i32(-1);
    b.freeze()
}

/// An assignment, version 0.
pub(crate) fn encode_assignment(assigned: &[(String, Vec<u32>)]) -> Bytes {
    let mut b = BytesMut::new();
    b.put_i16(0);
    b.put_i32(i32::try_from(assigned.len()).unwrap_or(i32::MAX));
    for (topic, partitions) in assigned {
        put_str(&mut b, topic);
        b.put_i32(i32::try_from(partitions.len()).unwrap_or(i32::MAX));
        for p in partitions {
            b.put_i32(*p as i32);
        }
    }
    b.put_i32(-1);
    b.freeze()
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Some(head)
    }

    // Kafka's protocol is big-endian: `Buf`'s getters read it, once the bytes are there.
    fn i16(&mut self) -> Option<i16> {
        Some(self.take(2)?.get_i16())
    }

    fn i32(&mut self) -> Option<i32> {
        Some(self.take(4)?.get_i32())
    }

    fn string(&mut self) -> Option<String> {
        let len = usize::try_from(self.i16()?).ok()?;
        String::from_utf8(self.take(len)?.to_vec()).ok()
    }

    /// An array's count, refused when it could not fit the bytes left (each element takes at
    /// least `min_element` bytes), so that a hostile count allocates nothing.
    fn count(&mut self, min_element: usize) -> Option<usize> {
        let n = usize::try_from(self.i32()?).ok()?;
        (n.saturating_mul(min_element) <= self.0.len()).then_some(n)
    }
}

/// The topics of a subscription (any version: later fields are ignored); `None` if it does
/// not decode.
pub(crate) fn decode_subscription(bytes: &[u8]) -> Option<Vec<String>> {
    let mut r = Reader(bytes);
    let _version = r.i16()?;
    let n = r.count(2)?;
    (0..n).map(|_| r.string()).collect()
}

/// The partitions of an assignment (any version); `None` if it does not decode. An empty
/// assignment (a member given nothing, or no sync yet) decodes as no partitions.
pub(crate) fn decode_assignment(bytes: &[u8]) -> Option<Vec<(String, Vec<u32>)>> {
    if bytes.is_empty() {
        return Some(Vec::new());
    }
    let mut r = Reader(bytes);
    let _version = r.i16()?;
    let n = r.count(6)?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let topic = r.string()?;
        let count = r.count(4)?;
        let partitions = (0..count)
            .map(|_| r.i32().and_then(|p| u32::try_from(p).ok()))
            .collect::<Option<Vec<u32>>>()?;
        out.push((topic, partitions));
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subs(members: &[(&str, &[&str])]) -> BTreeMap<String, Vec<String>> {
        members
            .iter()
            .map(|(m, ts)| (m.to_string(), ts.iter().map(|t| t.to_string()).collect()))
            .collect()
    }

    fn counts(topics: &[(&str, u32)]) -> BTreeMap<String, u32> {
        topics.iter().map(|(t, n)| (t.to_string(), *n)).collect()
    }

    /// Kafka's examples: range gives runs per topic, round-robin deals partitions in turn.
    #[test]
    fn assignors_spread_partitions_as_kafkas_do() {
        let s = subs(&[("c0", &["t0", "t1"]), ("c1", &["t0", "t1"])]);
        let c = counts(&[("t0", 3), ("t1", 3)]);
        let range = Assignor::Range.assign(&s, &c);
        assert_eq!(
            range["c0"],
            vec![("t0".into(), vec![0, 1]), ("t1".into(), vec![0, 1])]
        );
        assert_eq!(
            range["c1"],
            vec![("t0".into(), vec![2]), ("t1".into(), vec![2])]
        );
        let rr = Assignor::RoundRobin.assign(&s, &c);
        assert_eq!(
            rr["c0"],
            vec![("t0".into(), vec![0, 2]), ("t1".into(), vec![1])]
        );
        assert_eq!(
            rr["c1"],
            vec![("t0".into(), vec![1]), ("t1".into(), vec![0, 2])]
        );
    }

    /// Whatever the members and topics, every partition goes to exactly one subscribed member.
    #[test]
    fn every_partition_goes_to_exactly_one_subscriber() {
        for assignor in [Assignor::Range, Assignor::RoundRobin] {
            for members in 1..6usize {
                for n in 0..9u32 {
                    let names: Vec<String> = (0..members).map(|i| format!("m{i}")).collect();
                    let mut s = BTreeMap::new();
                    for (i, m) in names.iter().enumerate() {
                        let mut topics = vec!["a".to_string()];
                        if i % 2 == 0 {
                            topics.push("b".into());
                        }
                        s.insert(m.clone(), topics);
                    }
                    let c = counts(&[("a", n), ("b", n + 1)]);
                    let out = assignor.assign(&s, &c);
                    for (topic, count) in &c {
                        let mut seen = Vec::new();
                        for (m, topics) in &out {
                            for (t, ps) in topics {
                                if t == topic {
                                    assert!(s[m].contains(t), "{m} is not subscribed to {t}");
                                    seen.extend(ps.iter().copied());
                                }
                            }
                        }
                        seen.sort_unstable();
                        assert_eq!(seen, (0..*count).collect::<Vec<_>>(), "{assignor:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn the_consumer_protocol_round_trips_and_refuses_garbage() {
        let topics = vec!["email.send".to_string(), "t".to_string()];
        assert_eq!(
            decode_subscription(&encode_subscription(&topics)),
            Some(topics)
        );
        let assigned = vec![("t".to_string(), vec![0, 3, 5])];
        assert_eq!(
            decode_assignment(&encode_assignment(&assigned)),
            Some(assigned)
        );
        assert_eq!(decode_assignment(b""), Some(vec![]));
        // A count of 2^31 - 1 topics with nothing behind it.
        assert_eq!(decode_subscription(&[0, 0, 0x7f, 0xff, 0xff, 0xff]), None);
        assert_eq!(decode_assignment(&[0, 0, 0, 0, 0, 1]), None);
        // Version 1 adds owned partitions after the user data: still read.
        let mut v1 = encode_subscription(&["x".to_string()]).to_vec();
        v1[1] = 1;
        v1.extend_from_slice(&[0, 0, 0, 0]);
        assert_eq!(decode_subscription(&v1), Some(vec!["x".to_string()]));
    }
}
