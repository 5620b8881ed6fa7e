//! Consumer groups through a [`Client`]: finding a group's coordinator, the one call path
//! every group request takes (`group_call`: to the coordinator, found again when it moved),
//! and the administration of groups: listing, describing, deleting, committed offsets, their
//! reset and their deletion.
//! The membership itself (join, sync, heartbeat) is the [`Consumer`](crate::Consumer)'s.

use crate::Address;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde::de::DeserializeOwned;

use super::{Client, elapsed_ms, jitter};
use crate::error::{Error, Result};
use crate::group::GroupError;
use crate::group::api::{
    CommitOffset, CommittedOffset, Coordinator, GroupDescription, GroupListing, GroupRequest,
    JoinGroup, JoinReply, OffsetCommit, PartitionResult, SyncGroup,
};
use crate::group::assignor::decode_assignment;
use crate::protocol::WireError;
use crate::transport::frame::Op;
use crate::types::Offset;

/// A group, as [`Client::list_groups`] lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct GroupSummary {
    /// The group id.
    pub group: String,
    /// Its members' protocol type (`consumer` for consumers; empty when it has none).
    pub protocol_type: String,
    /// Kafka's state name: `Empty`, `PreparingRebalance`, `CompletingRebalance` or `Stable`.
    pub state: String,
}

/// A group, as [`Client::describe_group`] describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct GroupInfo {
    /// The group id.
    pub group: String,
    /// Kafka's state name (`Dead` for a group the coordinator does not know).
    pub state: String,
    /// The chosen assignor (`range`, `roundrobin`), empty without members.
    pub protocol: String,
    /// The current generation.
    pub generation: i32,
    /// The members, with what each is assigned.
    pub members: Vec<GroupMemberInfo>,
}

/// A member of a group.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct GroupMemberInfo {
    /// Its member id (the coordinator's name for it).
    pub member_id: String,
    /// The client id it gave.
    pub client_id: String,
    /// Its address, as the coordinator saw it (`/127.0.0.1`).
    pub host: String,
    /// Its partitions in the current generation: (topic, partitions).
    pub assignment: Vec<(String, Vec<u32>)>,
}

/// `addr`'s refusal of a group request, as an error: a refused login as itself, anything else
/// as the broker's.
fn refused(addr: Address, e: WireError) -> Error {
    match e {
        WireError::AuthenticationFailed(why) => Error::AuthenticationFailed(why),
        other => Error::Remote(format!("{addr} refused a group request: {other:?}")),
    }
}

impl Client {
    /// How long a group request may retry (coordinator moves, elections).
    fn group_deadline(&self) -> Instant {
        Instant::now() + self.config.delivery_timeout
    }

    /// The coordinator of `group`: from the cache, or asked of any broker (the one that
    /// leads the group's offsets partition; the brokers create the offsets topic on the
    /// first such question, so this may take a few elections' time).
    async fn coordinator(&self, group: &str, deadline: Instant) -> Result<Address> {
        if let Some(addr) = self.coordinators.lock().get(group) {
            return Ok(addr.clone());
        }
        let request = GroupRequest::FindCoordinator {
            group: group.to_string(),
        };
        let started = Instant::now();
        let mut last = String::from("no broker asked");
        let mut backoff = Duration::from_millis(20);
        // Bounded by the deadline.
        loop {
            for addr in self.candidates() {
                match self
                    .call::<_, std::result::Result<Coordinator, GroupError>>(
                        &addr,
                        Op::Group,
                        &request,
                    )
                    .await
                {
                    Ok(Ok(Ok(c))) => {
                        let Ok(found) = c.addr.parse::<Address>() else {
                            last = format!("{addr} named an unusable address {}", c.addr);
                            continue;
                        };
                        self.coordinators
                            .lock()
                            .insert(group.to_string(), found.clone());
                        return Ok(found);
                    }
                    Ok(Ok(Err(e))) if e.coordinator_moved() => last = format!("{addr}: {e}"),
                    Ok(Ok(Err(e))) => {
                        return Err(Error::Group {
                            group: group.to_string(),
                            error: e,
                        });
                    }
                    Ok(Err(e @ WireError::AuthenticationFailed(_))) => {
                        return Err(refused(addr, e));
                    }
                    Ok(Err(e)) => last = format!("{addr}: {e:?}"),
                    Err(e) => last = format!("{addr}: {e}"),
                }
            }
            if Instant::now() >= deadline {
                return Err(Error::Timeout {
                    elapsed_ms: elapsed_ms(started),
                    last: format!("finding the coordinator of group {group}: {last}"),
                });
            }
            tokio::time::sleep(jitter(backoff)).await;
            backoff = (backoff * 2).min(Duration::from_millis(500));
        }
    }

    /// Sends a group request to the group's coordinator, finding it again (with backoff,
    /// until the delivery deadline) when it moved or cannot be reached. `wait` is how long
    /// the coordinator may hold the request (a join waits for its rebalance).
    pub(crate) async fn group_call<T: DeserializeOwned>(
        &self,
        group: &str,
        request: &GroupRequest,
        wait: Duration,
    ) -> Result<T> {
        let deadline = self.group_deadline() + wait;
        let started = Instant::now();
        let mut backoff = Duration::from_millis(20);
        let mut last;
        // Bounded by the deadline.
        loop {
            let addr = self.coordinator(group, deadline).await?;
            let answer = self
                .call_timeout::<_, std::result::Result<T, GroupError>>(
                    &addr,
                    Op::Group,
                    request,
                    wait + self.timeout(),
                )
                .await;
            match answer {
                Ok(Ok(Ok(v))) => return Ok(v),
                Ok(Ok(Err(e))) if e.coordinator_moved() => last = format!("{addr}: {e}"),
                Ok(Ok(Err(e))) => {
                    return Err(Error::Group {
                        group: group.to_string(),
                        error: e,
                    });
                }
                Ok(Err(e)) => return Err(refused(addr, e)),
                Err(e) => last = format!("{addr}: {e}"),
            }
            self.coordinators.lock().remove(group);
            if Instant::now() >= deadline {
                return Err(Error::Timeout {
                    elapsed_ms: elapsed_ms(started),
                    last: format!("group {group}: {last}"),
                });
            }
            tokio::time::sleep(jitter(backoff)).await;
            backoff = (backoff * 2).min(Duration::from_millis(500));
        }
    }

    /// The address of the broker that coordinates `group` now (the leader of the group's
    /// partition of the offsets topic, which the brokers create on the first such question).
    ///
    /// # Errors
    ///
    /// [`Error::Group`] for an invalid group id; [`Error::Timeout`] if no broker names one by
    /// the delivery deadline.
    pub async fn group_coordinator(&self, group: &str) -> Result<Address> {
        self.coordinators.lock().remove(group);
        self.coordinator(group, self.group_deadline()).await
    }

    /// JoinGroup; waits for the rebalance (up to the request's rebalance timeout).
    pub(crate) async fn join_group(&self, request: JoinGroup) -> Result<JoinReply> {
        let group = request.group.clone();
        let wait = Duration::from_millis(request.rebalance_timeout_ms.into());
        self.group_call(&group, &GroupRequest::Join(request), wait)
            .await
    }

    /// SyncGroup; waits for the leader's assignment (up to `wait`).
    pub(crate) async fn sync_group(&self, request: SyncGroup, wait: Duration) -> Result<Bytes> {
        let group = request.group.clone();
        self.group_call(&group, &GroupRequest::Sync(request), wait)
            .await
    }

    /// Heartbeat, sent once (the caller heartbeats again at its interval).
    pub(crate) async fn heartbeat(
        &self,
        group: &str,
        generation: i32,
        member_id: &str,
    ) -> Result<()> {
        let request = GroupRequest::Heartbeat {
            group: group.to_string(),
            generation,
            member_id: member_id.to_string(),
            group_instance_id: None,
        };
        let addr = self.coordinator(group, self.group_deadline()).await?;
        match self
            .call::<_, std::result::Result<(), GroupError>>(&addr, Op::Group, &request)
            .await
        {
            Ok(Ok(Ok(()))) => Ok(()),
            Ok(Ok(Err(e))) => {
                if e.coordinator_moved() {
                    self.coordinators.lock().remove(group);
                }
                Err(Error::Group {
                    group: group.to_string(),
                    error: e,
                })
            }
            Ok(Err(e)) => Err(refused(addr, e)),
            Err(e) => {
                self.coordinators.lock().remove(group);
                Err(Error::NoBrokerReachable {
                    tried: format!("{addr} ({e})"),
                })
            }
        }
    }

    /// LeaveGroup.
    pub(crate) async fn leave_group(&self, group: &str, member_id: &str) -> Result<()> {
        let request = GroupRequest::Leave {
            group: group.to_string(),
            member_id: member_id.to_string(),
            group_instance_id: None,
        };
        self.group_call(group, &request, Duration::ZERO).await
    }

    /// OffsetCommit; a partition the coordinator refused is an error.
    pub(crate) async fn commit_group(
        &self,
        group: &str,
        generation: i32,
        member_id: &str,
        offsets: Vec<CommitOffset>,
    ) -> Result<()> {
        let request = GroupRequest::Commit(OffsetCommit {
            group: group.to_string(),
            generation,
            member_id: member_id.to_string(),
            offsets,
            group_instance_id: None,
        });
        let results: Vec<PartitionResult> =
            self.group_call(group, &request, Duration::ZERO).await?;
        match results.into_iter().find_map(|r| r.error) {
            Some(error) => Err(Error::Group {
                group: group.to_string(),
                error,
            }),
            None => Ok(()),
        }
    }

    /// OffsetFetch for `partitions` (all the group's with `None`).
    pub(crate) async fn fetch_group_offsets(
        &self,
        group: &str,
        partitions: Option<Vec<(String, u32)>>,
    ) -> Result<Vec<CommittedOffset>> {
        let request = GroupRequest::FetchOffsets {
            group: group.to_string(),
            partitions,
        };
        self.group_call(group, &request, Duration::ZERO).await
    }

    /// Every group the cluster's coordinators know, asking each broker for those it
    /// coordinates (as Kafka's admin client does).
    ///
    /// # Errors
    ///
    /// [`Error::NoBrokerReachable`] if no broker answers.
    pub async fn list_groups(&self) -> Result<Vec<GroupSummary>> {
        let brokers = self.brokers().await?;
        let mut out: BTreeMap<String, GroupSummary> = BTreeMap::new();
        for (_, addr) in brokers {
            let answer = self
                .call::<_, Vec<GroupListing>>(&addr, Op::Group, &GroupRequest::List)
                .await;
            if let Ok(Ok(groups)) = answer {
                for g in groups {
                    out.insert(
                        g.group.clone(),
                        GroupSummary {
                            group: g.group,
                            protocol_type: g.protocol_type,
                            state: g.state,
                        },
                    );
                }
            }
        }
        Ok(out.into_values().collect())
    }

    /// Describes a group: its state, generation and members with their assignments.
    ///
    /// # Errors
    ///
    /// [`Error::Group`] (an invalid group id); [`Error::Timeout`] if no coordinator answers
    /// by the delivery deadline.
    pub async fn describe_group(&self, group: &str) -> Result<GroupInfo> {
        let request = GroupRequest::Describe {
            group: group.to_string(),
        };
        let d: GroupDescription = self.group_call(group, &request, Duration::ZERO).await?;
        Ok(GroupInfo {
            group: d.group,
            state: d.state,
            protocol: d.protocol,
            generation: d.generation,
            members: d
                .members
                .into_iter()
                .map(|m| GroupMemberInfo {
                    member_id: m.member_id,
                    client_id: m.client_id,
                    host: m.client_host,
                    assignment: decode_assignment(&m.assignment).unwrap_or_default(),
                })
                .collect(),
        })
    }

    /// The group's committed offsets: (topic, partition) → the offset of the next record
    /// its consumers will read.
    ///
    /// # Errors
    ///
    /// As [`describe_group`](Self::describe_group).
    pub async fn committed_offsets(&self, group: &str) -> Result<BTreeMap<(String, u32), Offset>> {
        Ok(self
            .fetch_group_offsets(group, None)
            .await?
            .into_iter()
            .filter_map(|c| Some(((c.topic, c.partition), Offset(c.offset?))))
            .collect())
    }

    /// Sets a group's committed offsets (`None` deletes one: the group's consumers then
    /// start where their `auto_offset_reset` says), as `kafka-consumer-groups
    /// --reset-offsets` does. Only for a group with no live members: a member's commits are
    /// fenced by its generation, and would overwrite these.
    ///
    /// # Errors
    ///
    /// [`Error::Group`] with [`GroupError::NonEmptyGroup`] if the group has members, or
    /// [`GroupError::UnknownTopicOrPartition`]; as [`describe_group`](Self::describe_group).
    pub async fn reset_group_offsets(
        &self,
        group: &str,
        offsets: &[(String, u32, Option<Offset>)],
    ) -> Result<()> {
        // As Kafka's admin client: refused here when the group has members (the coordinator
        // would refuse the commit too, as from an unknown member).
        if !self.describe_group(group).await?.members.is_empty() {
            return Err(Error::Group {
                group: group.to_string(),
                error: GroupError::NonEmptyGroup,
            });
        }
        let offsets = offsets
            .iter()
            .map(|(topic, partition, offset)| CommitOffset {
                topic: topic.clone(),
                partition: *partition,
                offset: offset.map(Offset::get),
                metadata: String::new(),
                leader_epoch: None,
            })
            .collect();
        self.commit_group(group, -1, "", offsets).await
    }

    /// Deletes a group and its committed offsets, as `kafka-consumer-groups --delete` does:
    /// only a group with no live members. Durable once it returns: no later coordinator
    /// brings the group back.
    ///
    /// # Errors
    ///
    /// [`Error::Group`] with [`GroupError::NonEmptyGroup`] if the group has members,
    /// [`GroupError::GroupIdNotFound`] if no such group exists; as
    /// [`describe_group`](Self::describe_group).
    pub async fn delete_group(&self, group: &str) -> Result<()> {
        let request = GroupRequest::Delete {
            group: group.to_string(),
        };
        self.group_call(group, &request, Duration::ZERO).await
    }

    /// Deletes a group's committed offsets of `partitions` (topic, partition), as
    /// `kafka-consumer-groups --delete-offsets` does: the group's consumers then start where
    /// their `auto_offset_reset` says. A group left with no members and no committed offsets
    /// is deleted. Answers each partition's refusal, if any.
    ///
    /// # Errors
    ///
    /// [`Error::Group`] with [`GroupError::GroupIdNotFound`] if no such group exists; as
    /// [`describe_group`](Self::describe_group).
    pub async fn delete_group_offsets(
        &self,
        group: &str,
        partitions: &[(String, u32)],
    ) -> Result<Vec<((String, u32), Option<GroupError>)>> {
        let request = GroupRequest::DeleteOffsets {
            group: group.to_string(),
            partitions: partitions.to_vec(),
        };
        let results: Vec<PartitionResult> =
            self.group_call(group, &request, Duration::ZERO).await?;
        Ok(results
            .into_iter()
            .map(|r| ((r.topic, r.partition), r.error))
            .collect())
    }
}
