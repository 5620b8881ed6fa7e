//! The cluster's protocol version (see `version.rs`): the metadata leader finalizes the
//! newest version every broker speaks, and a broker refuses a metadata record newer than it
//! understands instead of skipping it.

use std::sync::Arc;
use std::time::Duration;

use crate::catalog::{Catalog, MetaCommand};
use crate::error::{Error, Result};
use crate::protocol::ProposeRequest;

use super::{Broker, Node};
use crate::types::NodeId;

impl Node {
    /// The cluster's finalized protocol version, as this broker's copy of the metadata log
    /// has it: the newest version every broker speaks (see
    /// [`NodeConfig::protocol_version`](crate::NodeConfig::protocol_version)). Records of later versions are not written before it
    /// rises.
    pub fn finalized_version(&self) -> u16 {
        self.broker.catalog.read().finalized_version()
    }

    /// The protocol version this broker speaks to broker `peer`: the highest both know (see
    /// [`NodeConfig::protocol_version`](crate::NodeConfig::protocol_version)), as the connection to it chose, connecting if none
    /// is open. `None` if `peer` is not a broker this one knows, or cannot be reached within
    /// the request timeout.
    pub async fn peer_protocol_version(&self, peer: NodeId) -> Option<u16> {
        let connection = self.broker.peers.get(peer, true)?;
        connection
            .version(self.broker.config.request_timeout)
            .await
            .ok()
    }
}

impl Broker {
    /// At start, after the replicas opened: says so if this broker runs pinned below this
    /// build's newest protocol version, and refuses to run on (its caller stops what it started) if
    /// its metadata log holds a record newer than it understands, such as a finalized version
    /// above its pin.
    pub(super) async fn check_version_at_start(&self) -> Result<()> {
        if self.config.protocol_version < crate::PROTOCOL_VERSION {
            tracing::info!(
                version = self.config.protocol_version,
                newest = crate::PROTOCOL_VERSION,
                "speaking a pinned protocol version (a rolling upgrade): the cluster finalizes no later one while this broker runs pinned"
            );
        }
        if let Err(e @ Error::UnsupportedVersion { .. }) = self.catch_up_catalog() {
            tracing::error!(error = %e, "this broker cannot run in its cluster; stopping");
            return Err(e);
        }
        Ok(())
    }

    /// The version the metadata leader may finalize now: the newest that this broker and every
    /// other broker of the cluster speak over a live connection, if it is above the finalized
    /// one. `None` while a broker is not connected (its version is unknown).
    pub(super) fn version_to_finalize(&self) -> Option<u16> {
        let catalog = self.catalog.read();
        let finalized = catalog.finalized_version();
        let mut version = self.config.protocol_version;
        for id in catalog.brokers() {
            if id != self.config.id {
                version = version.min(self.peers.live_version(id)?);
            }
        }
        (version > finalized).then_some(version)
    }

    /// Whether this broker may apply `command` (the record at `offset`; `None`: a record that
    /// did not decode) to `catalog`: not a command of a later protocol version than this
    /// broker's, nor one that finalizes such a version.
    pub(super) fn check_record_version(
        &self,
        offset: u64,
        command: Option<&MetaCommand>,
    ) -> Result<()> {
        let supported = self.config.protocol_version;
        let refused = |what: String, needed: u16| Error::UnsupportedVersion {
            what,
            needed,
            supported,
        };
        match command {
            None => Err(refused(
                format!(
                    "the metadata record at offset {offset}, of a kind this build does not know,"
                ),
                supported.saturating_add(1),
            )),
            Some(MetaCommand::FinalizeVersion { version }) if *version > supported => Err(refused(
                format!(
                    "the cluster, whose metadata log finalized version {version} at offset {offset},"
                ),
                *version,
            )),
            Some(command) if command.since() > supported => Err(refused(
                format!(
                    "the metadata record at offset {offset} ({})",
                    command_name(command)
                ),
                command.since(),
            )),
            Some(_) => Ok(()),
        }
    }

    /// Whether the metadata log may take `command` now: a command of a later protocol version
    /// than the cluster's finalized one is never written, and a version is finalized only up
    /// to this broker's.
    pub(super) fn check_proposal_version(&self, command: &MetaCommand) -> Result<()> {
        let (needed, supported) = match command {
            MetaCommand::FinalizeVersion { version } => (*version, self.config.protocol_version),
            other => (other.since(), self.catalog.read().finalized_version()),
        };
        if needed > supported {
            return Err(Error::UnsupportedVersion {
                what: format!("the metadata command {}", command_name(command)),
                needed,
                supported,
            });
        }
        Ok(())
    }
}

/// A command's name, for errors.
fn command_name(command: &MetaCommand) -> String {
    let debug = format!("{command:?}");
    debug
        .split([' ', '{', '('])
        .next()
        .unwrap_or_default()
        .to_string()
}

/// On the metadata leader, finalizes the newest protocol version every broker speaks, on a
/// task of its own (`finalizing`: the one in flight).
pub(super) fn finalize_version(
    broker: &Arc<Broker>,
    finalizing: &mut Option<tokio::task::JoinHandle<()>>,
) {
    if broker.meta.raft.leader() != Some(broker.config.id)
        || finalizing.as_ref().is_some_and(|task| !task.is_finished())
    {
        return;
    }
    let Some(version) = broker.version_to_finalize() else {
        return;
    };
    let broker = Arc::clone(broker);
    *finalizing = Some(tokio::spawn(async move {
        let request = ProposeRequest {
            command: MetaCommand::FinalizeVersion { version },
            forwarded: false,
        };
        if let Err(e) = broker.propose(request).await {
            tracing::debug!(error = %e, "finalizing protocol version {version} failed; will retry");
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }));
}

/// Says once, when the finalized version of `catalog` changed from `said`, which version the
/// cluster speaks.
pub(super) fn say_finalized(catalog: &Catalog, said: &mut u16) {
    let finalized = catalog.finalized_version();
    if finalized != *said {
        tracing::info!(
            version = finalized,
            "cluster protocol version finalized: every broker speaks it"
        );
        *said = finalized;
    }
}
