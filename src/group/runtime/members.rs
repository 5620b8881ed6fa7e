//! A group's members: JoinGroup (answered once the rebalance completes), SyncGroup (the
//! member's assignment, once the leader's is written), Heartbeat and LeaveGroup.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;

use super::{GroupCoordinator, Host};
use crate::group::api::{JoinAnswer, JoinGroup, JoinReply, MemberRef, SyncGroup};
use crate::group::coordinator::Shard;
use crate::group::live::{JoinOutcome, SyncOutcome};
use crate::group::state::{JoinRequest, Joined, State, StaticRejoin};
use crate::group::{GROUP_NAME_BYTES_MAX, GroupError, GroupResult, MEMBER_BLOB_BYTES_MAX};

impl GroupCoordinator {
    /// JoinGroup: answered once the rebalance completes.
    pub(crate) async fn join_group<H: Host>(
        self: &Arc<Self>,
        host: &Arc<H>,
        request: JoinGroup,
        from: Option<SocketAddr>,
    ) -> GroupResult<JoinReply> {
        check_join(&request)?;
        let (replica, shard) = self.coordinate(host, &request.group).await?;
        let rebalance_timeout = Duration::from_millis(request.rebalance_timeout_ms.into());
        let join = JoinRequest {
            member_id: request.member_id,
            client_id: request.client_id,
            client_host: from.map_or_else(String::new, |a| format!("/{}", a.ip())),
            session_timeout: Duration::from_millis(request.session_timeout_ms.into()),
            rebalance_timeout,
            protocol_type: request.protocol_type,
            protocols: request.protocols,
            require_known_member_id: request.require_known_member_id,
            group_instance_id: request.group_instance_id,
            nonce: crate::client::new_producer_id(),
        };
        let outcome = {
            let mut groups = shard.groups.lock();
            let group = groups.entry(request.group.clone()).or_default();
            group.join(join, &self.limits, Instant::now())
        };
        let joined = match outcome {
            JoinOutcome::MemberIdRequired(id) => return Ok(JoinReply::MemberIdRequired(id)),
            JoinOutcome::Now(r) => r,
            // A static member back in a Stable group: its new member id is written, then
            // applied, before it is answered (no rebalance).
            JoinOutcome::Rejoin(rejoin) => {
                self.rejoin(host.as_ref(), &replica, &shard, &request.group, &rejoin)
                    .await
            }
            // The rebalance ends by its deadline (the timers complete it); a dropped answer
            // means the shard went away with the leadership.
            JoinOutcome::Parked(rx) => {
                let wait = rebalance_timeout + Duration::from_secs(5);
                match tokio::time::timeout(wait, rx).await {
                    Ok(Ok(r)) => r,
                    Ok(Err(_)) => Err(GroupError::NotCoordinator),
                    Err(_) => Err(GroupError::RebalanceInProgress),
                }
            }
        }?;
        Ok(JoinReply::Joined(JoinAnswer {
            generation: joined.generation,
            protocol: joined.protocol,
            leader: joined.leader,
            member_id: joined.member_id,
            members: joined.members,
        }))
    }

    /// A static member's rejoin under a new member id: written (if it still stands), then
    /// applied to the group.
    async fn rejoin<H: Host>(
        &self,
        host: &H,
        replica: &H::Replica,
        shard: &Shard,
        group: &str,
        rejoin: &StaticRejoin,
    ) -> GroupResult<Joined> {
        let _writer = shard.writer.lock().await;
        let stands = shard
            .groups
            .lock()
            .get(group)
            .is_some_and(|g| g.rejoin_stands(rejoin));
        let written = if !stands {
            Err(GroupError::RebalanceInProgress)
        } else {
            match self.may_write(host, shard) {
                Ok(()) => self
                    .write_snapshot(host, replica, shard, group, &rejoin.snapshot)
                    .await
                    .map_err(|_| GroupError::CoordinatorNotAvailable),
                Err(e) => Err(e),
            }
        };
        match shard.groups.lock().get_mut(group) {
            Some(g) => g.rejoined(rejoin, written, Instant::now()),
            None => Err(GroupError::UnknownMemberId),
        }
    }

    /// SyncGroup: the member's assignment, once the leader's is written.
    pub(crate) async fn sync_group<H: Host>(
        self: &Arc<Self>,
        host: &Arc<H>,
        request: SyncGroup,
    ) -> GroupResult<Bytes> {
        if request
            .assignments
            .iter()
            .any(|(m, a)| m.len() > GROUP_NAME_BYTES_MAX || a.len() > MEMBER_BLOB_BYTES_MAX)
        {
            return Err(GroupError::InconsistentGroupProtocol);
        }
        let (replica, shard) = self.coordinate(host, &request.group).await?;
        let limits = &self.limits;
        let outcome = {
            let mut groups = shard.groups.lock();
            let Some(group) = groups.get_mut(&request.group) else {
                return Err(GroupError::UnknownMemberId);
            };
            group.sync(
                &request.member_id,
                request.group_instance_id.as_deref(),
                request.generation,
                request.assignments,
                Instant::now(),
            )
        };
        let rx = match outcome {
            SyncOutcome::Now(r) => return r,
            SyncOutcome::Parked(rx) => rx,
            SyncOutcome::Write(snapshot, rx) => {
                let written = {
                    let _writer = shard.writer.lock().await;
                    match self.may_write(host.as_ref(), &shard) {
                        Ok(()) => self
                            .write_snapshot(
                                host.as_ref(),
                                &replica,
                                &shard,
                                &request.group,
                                &snapshot,
                            )
                            .await
                            // A SyncGroup answers only what Kafka's clients expect of it.
                            .map_err(|_| GroupError::CoordinatorNotAvailable),
                        Err(e) => Err(e),
                    }
                };
                if let Some(group) = shard.groups.lock().get_mut(&request.group) {
                    group.synced(snapshot.generation, written, limits, Instant::now());
                }
                rx
            }
        };
        // A follower waits for the leader's sync, within its session (the timers end the
        // wait by rebalancing when the leader's session ends).
        let wait = limits.session_timeout_max.min(Duration::from_secs(300));
        match tokio::time::timeout(wait, rx).await {
            Ok(Ok(r)) => r,
            Ok(Err(_)) => Err(GroupError::NotCoordinator),
            Err(_) => Err(GroupError::RebalanceInProgress),
        }
    }

    /// Heartbeat.
    pub(crate) async fn heartbeat<H: Host>(
        self: &Arc<Self>,
        host: &Arc<H>,
        group: &str,
        generation: i32,
        member: &MemberRef,
    ) -> GroupResult<()> {
        let (_replica, shard) = self.coordinate(host, group).await?;
        let mut groups = shard.groups.lock();
        let g = groups.get_mut(group).ok_or(GroupError::UnknownMemberId)?;
        g.heartbeat(
            &member.member_id,
            member.group_instance_id.as_deref(),
            generation,
            Instant::now(),
        )
    }

    /// LeaveGroup.
    pub(crate) async fn leave_group<H: Host>(
        self: &Arc<Self>,
        host: &Arc<H>,
        group: &str,
        member: &MemberRef,
    ) -> GroupResult<()> {
        let (replica, shard) = self.coordinate(host, group).await?;
        let emptied = {
            let mut groups = shard.groups.lock();
            let g = groups.get_mut(group).ok_or(GroupError::UnknownMemberId)?;
            let was_empty = g.state == State::Empty;
            g.leave(
                &member.member_id,
                member.group_instance_id.as_deref(),
                &self.limits,
                Instant::now(),
            )?;
            (!was_empty && g.state == State::Empty).then(|| g.snapshot())
        };
        if let Some(snapshot) = emptied {
            let host = host.as_ref();
            let _writer = shard.writer.lock().await;
            let written = match self.may_write(host, &shard) {
                Ok(()) => {
                    self.write_snapshot(host, &replica, &shard, group, &snapshot)
                        .await
                }
                Err(e) => Err(e),
            };
            if let Err(e) = written {
                tracing::debug!(error = ?e, "writing an emptied group failed");
            }
        }
        Ok(())
    }
}

/// Refuses a JoinGroup whose ids, protocols or subscriptions are beyond the brokers' bounds.
fn check_join(request: &JoinGroup) -> GroupResult<()> {
    let too_long = |s: &str| s.len() > GROUP_NAME_BYTES_MAX;
    if too_long(&request.member_id)
        || too_long(&request.client_id)
        || too_long(&request.protocol_type)
        || request.protocols.len() > 16
        || request
            .protocols
            .iter()
            .any(|(n, m)| too_long(n) || m.len() > MEMBER_BLOB_BYTES_MAX)
    {
        return Err(GroupError::InconsistentGroupProtocol);
    }
    Ok(())
}
