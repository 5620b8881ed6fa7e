//! The client's metadata cache (known brokers, each partition's leader and its term, each
//! topic's partition count), how metadata answers fill it, and the one rule for taking a
//! `NotLeader` hint ([`redirect`]).

use crate::Address;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use super::Client;
use crate::error::{Error, Result};
use crate::protocol::{MetadataRequest, MetadataResponse, WireError};
use crate::transport::frame::Op;
use crate::types::{LeaderHint, NodeId, PartitionId, Term};

impl Client {
    /// Every address worth asking: known brokers, then the bootstrap list.
    pub(super) fn candidates(&self) -> Vec<Address> {
        let mut out: Vec<Address> = self.brokers.lock().values().cloned().collect();
        out.sort();
        for a in &self.bootstrap {
            if !out.contains(a) {
                out.push(a.clone());
            }
        }
        out
    }

    /// Asks brokers for metadata until one answers, and caches it.
    pub(super) async fn refresh(&self, topic: Option<&str>) -> Result<Arc<MetadataResponse>> {
        self.refresh_for(topic, None).await
    }

    /// Asks brokers for metadata, and caches it: as [`Client::ask_for_metadata`], except that
    /// callers asking about one topic at once share one request, as the sends waiting on a
    /// Kafka client's metadata do. A caller that finds a refresh of its topic under way waits
    /// for it to end, then takes the answer of a refresh asked for after it asked itself, or
    /// asks anew; so a thousand sends that lose their partitions' leader at once cost two
    /// metadata requests, not a thousand, each for the whole topic.
    pub(super) async fn refresh_for(
        &self,
        topic: Option<&str>,
        leader_of: Option<&PartitionId>,
    ) -> Result<Arc<MetadataResponse>> {
        let asked = Instant::now();
        let refresh = Arc::clone(
            self.refreshes
                .lock()
                .entry(topic.map(str::to_string))
                .or_default(),
        );
        let mut last = refresh.last.lock().await;
        if let Some((at, meta)) = last.as_ref()
            && *at >= asked
        {
            return Ok(Arc::clone(meta));
        }
        let at = Instant::now();
        let meta = Arc::new(self.ask_for_metadata(topic, leader_of).await?);
        *last = Some((at, Arc::clone(&meta)));
        Ok(meta)
    }

    /// Asks brokers for metadata, and caches it. Keeps asking the others while the answers
    /// do not know `topic` (a broker that was down may not have caught up with the catalog
    /// yet) or, with `leader_of`, name no leader for that partition (a broker that is cut off,
    /// or whose replica stopped, knows none); returns the last such answer if no broker
    /// gives a better one.
    async fn ask_for_metadata(
        &self,
        topic: Option<&str>,
        leader_of: Option<&PartitionId>,
    ) -> Result<MetadataResponse> {
        let mut tried = Vec::new();
        let mut lacking = None;
        for addr in self.candidates() {
            let request = MetadataRequest {
                topic: topic.map(str::to_string),
                local_only: false,
            };
            match self
                .call::<_, MetadataResponse>(&addr, Op::Metadata, &request)
                .await
            {
                Ok(Ok(meta)) => {
                    self.absorb(&meta);
                    let knows_topic = topic.is_none() || !meta.partitions.is_empty();
                    let names_leader = leader_of.is_none_or(|id| {
                        meta.partitions
                            .iter()
                            .any(|p| &p.partition == id && p.leader.is_some())
                    });
                    if knows_topic && names_leader {
                        return Ok(meta);
                    }
                    if knows_topic || lacking.is_none() {
                        lacking = Some(meta);
                    }
                }
                // The client's principal may not know the topic: no broker will say more.
                Ok(Err(WireError::TopicAuthorizationFailed)) => {
                    return Err(Error::TopicAuthorizationFailed(
                        topic.unwrap_or_default().to_string(),
                    ));
                }
                Ok(Err(WireError::AuthenticationFailed(why))) => {
                    return Err(Error::AuthenticationFailed(why));
                }
                Ok(Err(e)) => tried.push(format!("{addr} ({e:?})")),
                Err(e) => tried.push(format!("{addr} ({e})")),
            }
        }
        if let (Some(t), Some(meta)) = (topic, &lacking)
            && meta.partitions.is_empty()
        {
            // No broker knows it: deleted (or never created).
            self.forget_topic(t);
        }
        lacking.ok_or_else(|| Error::NoBrokerReachable {
            tried: tried.join(", "),
        })
    }

    /// Caches brokers and leaders; a leader is replaced only by one of a term at least as new.
    fn absorb(&self, meta: &MetadataResponse) {
        self.limits.lock().insert(meta.broker, meta.limits);
        // The answer names every broker of the cluster: one that left is forgotten.
        let named: HashMap<NodeId, Address> = meta
            .brokers
            .iter()
            .filter_map(|(id, addr)| Some((*id, addr.parse().ok()?)))
            .collect();
        if !named.is_empty() {
            *self.brokers.lock() = named.into_iter().collect();
        }
        let mut counts: HashMap<&str, u32> = HashMap::new();
        for p in &meta.partitions {
            *counts.entry(p.partition.topic.as_str()).or_default() += 1;
        }
        self.topics
            .lock()
            .extend(counts.into_iter().map(|(t, n)| (t.to_string(), n)));
        let mut leaders = self.leaders.lock();
        for p in &meta.partitions {
            if let Some(l) = p.leader {
                let term = Term(p.term);
                let newer = leaders.get(&p.partition).is_none_or(|(_, t)| term >= *t);
                if newer {
                    leaders.insert(p.partition.clone(), (l, term));
                }
            }
        }
    }

    /// The address of `partition`'s cached leader.
    pub(super) fn leader_addr(&self, partition: &PartitionId) -> Option<Address> {
        let (leader, _) = *self.leaders.lock().get(partition)?;
        self.brokers.lock().get(&leader).cloned()
    }

    /// The address this client knows broker `id` at, from metadata or a leader hint.
    pub fn broker_addr(&self, id: NodeId) -> Option<Address> {
        self.brokers.lock().get(&id).cloned()
    }

    /// Caches a `NotLeader` hint that is followed as the partition's leader.
    pub(super) fn learn_leader(&self, id: &PartitionId, hint: LeaderHint) {
        // (Locks one at a time: `absorb` takes `brokers` before `leaders`.)
        self.brokers.lock().insert(hint.node_id, hint.addr);
        self.leaders
            .lock()
            .insert(id.clone(), (hint.node_id, hint.term));
    }

    /// Forgets the partition's cached leader: the next attempt asks for metadata.
    pub(super) fn forget_leader(&self, id: &PartitionId) {
        self.leaders.lock().remove(id);
    }

    /// Forgets what is cached of `topic` (deleted, or never created).
    pub(super) fn forget_topic(&self, topic: &str) {
        self.topics.lock().remove(topic);
        self.leaders.lock().retain(|id, _| id.topic != topic);
    }

    /// The cached leader of a partition: broker id and address.
    pub fn cached_leader(&self, topic: &str, partition: u32) -> Option<(NodeId, Address)> {
        let id = PartitionId::new(topic, partition);
        let (leader, _) = *self.leaders.lock().get(&id)?;
        Some((leader, self.brokers.lock().get(&leader).cloned()?))
    }

    /// The cached leader of `id` as a hint. (Locks one at a time: `absorb` takes `brokers`
    /// before `leaders`.)
    pub(super) fn cached_hint(&self, id: &PartitionId) -> Option<LeaderHint> {
        let (node_id, term) = *self.leaders.lock().get(id)?;
        let addr = self.brokers.lock().get(&node_id).cloned()?;
        Some(LeaderHint {
            node_id,
            addr,
            term,
        })
    }
}

/// Where to go after `refused_by` answered `NotLeader`.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Redirect {
    /// To the hinted leader, which becomes the cached one.
    Follow(LeaderHint),
    /// To the cached leader: the hint is older than what the cache knows.
    KeepCache(Address),
    /// Nowhere known: refresh metadata (forgetting the cached leader).
    Refresh,
}

/// Decides where a refused request goes next. A hint is followed unless the cache names
/// another broker in a newer term (the refusing broker has not heard of the newer leader
/// yet: a hint is only as fresh as its term); a cached leader that itself refused is never
/// trusted again.
pub(super) fn redirect(
    refused_by: &Address,
    cached: Option<LeaderHint>,
    hint: Option<LeaderHint>,
) -> Redirect {
    let cached = cached.filter(|c| &c.addr != refused_by);
    match (hint, cached) {
        (Some(h), Some(c)) if c.term > h.term => Redirect::KeepCache(c.addr),
        (Some(h), _) if &h.addr != refused_by => Redirect::Follow(h),
        (_, Some(c)) => Redirect::KeepCache(c.addr),
        _ => Redirect::Refresh,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_leader_hints_are_followed_only_when_at_least_as_new_as_the_cache() {
        let addr = |port: u16| Address::from(std::net::SocketAddr::from(([127, 0, 0, 1], port)));
        let hint = |node_id: NodeId, term: u64| LeaderHint {
            node_id,
            addr: addr(9090 + node_id as u16),
            term: Term(term),
        };
        let (a, b, c) = (&addr(9091), hint(2, 7), hint(3, 5));
        // A newer hint than the cache: follow it.
        assert_eq!(
            redirect(a, Some(c.clone()), Some(b.clone())),
            Redirect::Follow(b.clone())
        );
        // An older hint than the cache (the refusing broker lags): go to the cached leader.
        assert_eq!(
            redirect(a, Some(b.clone()), Some(c.clone())),
            Redirect::KeepCache(b.addr.clone())
        );
        // The same term: the hint, from a broker in that term, wins.
        assert_eq!(
            redirect(a, Some(hint(3, 7)), Some(b.clone())),
            Redirect::Follow(b.clone())
        );
        // No hint (an election runs): the cache, unless the cached leader is who refused.
        assert_eq!(
            redirect(a, Some(b.clone()), None),
            Redirect::KeepCache(b.addr.clone())
        );
        assert_eq!(redirect(&b.addr, Some(b.clone()), None), Redirect::Refresh);
        assert_eq!(redirect(a, None, None), Redirect::Refresh);
        // The cached leader refused and names a newer one: follow.
        assert_eq!(
            redirect(&c.addr, Some(c.clone()), Some(b.clone())),
            Redirect::Follow(b.clone())
        );
        // A hint naming the refusing broker itself is no hint.
        assert_eq!(redirect(&b.addr, None, Some(b.clone())), Redirect::Refresh);
    }
}

/// One topic's metadata refreshes: held while one runs; the last answer and when it was asked
/// for.
#[derive(Debug, Default)]
pub(super) struct Refresh {
    last: tokio::sync::Mutex<Option<(Instant, Arc<MetadataResponse>)>>,
}
