//! Wire framing: pure encode/decode, every length checked before anything is allocated.
//!
//! A frame is a 16-byte header and a body:
//!
//! | pos | size | field | type | rule |
//! |---|---|---|---|---|
//! | 0 | 4 | body_len | u32 | bytes after the header; `≤ frame_bytes_max`, checked before the body is read |
//! | 4 | 1 | kind | u8 | `1` request, `2` response; others are `UnknownKind` |
//! | 5 | 1 | op | u8 | what the request asks (see [`Op`]); echoed in the response |
//! | 6 | 2 | reserved | u16 | must be 0 |
//! | 8 | 8 | request_id | u64 | chosen by the caller, echoed in the response |
//! | 16 | body_len | body | bytes | postcard-encoded request or response |
//!
//! All integers are little-endian. TCP checksums the bytes; a frame that breaks these rules
//! closes the connection.

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::body::Body;

/// Length of the frame header.
/// What a message carries beside its log bytes, at most: the frame header, the partition's
/// name and the encoded fields of a produce, fetch or replication message (a few hundred
/// bytes; each batch's own fields are fewer bytes than the frame header it is counted with),
/// rounded up generously.
pub(crate) const REQUEST_OVERHEAD_BYTES_MAX: u32 = 4096;

pub(crate) const FRAME_HEADER_LEN: usize = 16;

/// What a request asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Op {
    /// Raft vote (and pre-vote).
    Vote = 1,
    /// Raft append-entries (and heartbeats).
    AppendEntries = 2,
    /// Raft full snapshot.
    Snapshot = 3,
    /// Client: append a batch to a partition (leader only).
    Produce = 4,
    /// Client: read committed batches of a partition.
    Fetch = 5,
    /// Client: brokers, topics, and each partition's leader, replicas and in-sync replicas.
    Metadata = 6,
    /// Admin: create a topic (through the metadata Raft group).
    CreateTopic = 7,
    /// Admin: delete a created topic.
    DeleteTopic = 8,
    /// Broker: commit a metadata command (a broker's registration, a partition's move, its
    /// end, a topic's creation forwarded to the metadata leader). Never a client's: what
    /// clients may ask of the metadata log has operations of its own, with their checks.
    Propose = 9,
    /// Raft leader transfer: the leader asks a follower to take over (controlled shutdown).
    TransferLeader = 10,
    /// Client: a consumer-group request (find the coordinator, join, sync, heartbeat, leave,
    /// commit and fetch offsets, list, describe), the request named in the body.
    Group = 11,
    /// Client: the offset of a partition at a point (its start, its end, or the first record
    /// of a time or later), as Kafka's ListOffsets.
    ListOffsets = 12,
    /// Admin: move a created topic's partition to other brokers (Kafka's partition
    /// reassignment).
    Reassign = 13,
    /// Client, first on a connection to brokers that ask for SASL: the mechanism it will log in
    /// with.
    SaslHandshake = 14,
    /// Client: one of the mechanism's messages, answered with the broker's.
    SaslAuthenticate = 15,
    /// Admin: ACL bindings described, created or deleted.
    Acls = 16,
    /// Admin: users' SCRAM credentials described or changed.
    Users = 17,
    /// Admin: a topic's configs described or changed.
    TopicConfigs = 18,
    /// Admin: partitions added to a topic.
    CreatePartitions = 19,
    /// Admin: a partition's records before an offset deleted (Kafka's DeleteRecords).
    DeleteRecords = 20,
    /// Admin: leadership handed to each partition's preferred replica (Kafka's ElectLeaders).
    ElectLeaders = 21,
    /// Admin: the partitions moving now (Kafka's ListPartitionReassignments).
    ListReassignments = 22,
    /// Admin: the brokers described, or one decommissioned.
    Brokers = 23,
    /// Anyone, first on a connection: the protocol versions the caller speaks, answered with
    /// the one chosen (protocol version 2; see `hello.rs`).
    Hello = 24,
    /// Raft pre-vote: would the voter grant a vote at the next term? Changes nothing on the
    /// voter (protocol version 2).
    PreVote = 25,
    /// Broker: "I am alive, and my disk answers", sent to every other broker each heartbeat
    /// interval; answered the same way (protocol version 3; see `node/liveness.rs`).
    BrokerHeartbeat = 26,
    /// Raft: a leader broker asks a follower broker to let Raft groups go quiet; answered with
    /// one yes or no per group (protocol version 3; see `node/quiet.rs`).
    Quiesce = 27,
    /// Client: Fetch, its answer's batches each with its payload's format, a Kafka batch
    /// sent as stored (protocol version 4; see `protocol.rs`, `StoredBatch`).
    FetchAsStored = 28,
}

impl Op {
    /// The operation's name in metrics.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Op::Vote => "vote",
            Op::AppendEntries => "append_entries",
            Op::Snapshot => "snapshot",
            Op::Produce => "produce",
            Op::Fetch => "fetch",
            Op::Metadata => "metadata",
            Op::CreateTopic => "create_topic",
            Op::DeleteTopic => "delete_topic",
            Op::Propose => "propose",
            Op::TransferLeader => "transfer_leader",
            Op::Group => "group",
            Op::ListOffsets => "list_offsets",
            Op::Reassign => "reassign",
            Op::SaslHandshake => "sasl_handshake",
            Op::SaslAuthenticate => "sasl_authenticate",
            Op::Acls => "acls",
            Op::Users => "users",
            Op::TopicConfigs => "topic_configs",
            Op::CreatePartitions => "create_partitions",
            Op::DeleteRecords => "delete_records",
            Op::ElectLeaders => "elect_leaders",
            Op::ListReassignments => "list_reassignments",
            Op::Brokers => "brokers",
            Op::Hello => "hello",
            Op::PreVote => "pre_vote",
            Op::BrokerHeartbeat => "broker_heartbeat",
            Op::Quiesce => "quiesce",
            Op::FetchAsStored => "fetch_as_stored",
        }
    }

    /// The protocol version that brought the operation in: a connection of an older version
    /// treats it as unknown.
    pub(crate) fn since(self) -> u16 {
        match self {
            Op::Hello | Op::PreVote => 2,
            Op::BrokerHeartbeat | Op::Quiesce => 3,
            Op::FetchAsStored => 4,
            _ => 1,
        }
    }

    fn from_u8(v: u8) -> Option<Op> {
        match v {
            1 => Some(Op::Vote),
            2 => Some(Op::AppendEntries),
            3 => Some(Op::Snapshot),
            4 => Some(Op::Produce),
            5 => Some(Op::Fetch),
            6 => Some(Op::Metadata),
            7 => Some(Op::CreateTopic),
            8 => Some(Op::DeleteTopic),
            9 => Some(Op::Propose),
            10 => Some(Op::TransferLeader),
            11 => Some(Op::Group),
            12 => Some(Op::ListOffsets),
            13 => Some(Op::Reassign),
            14 => Some(Op::SaslHandshake),
            15 => Some(Op::SaslAuthenticate),
            16 => Some(Op::Acls),
            17 => Some(Op::Users),
            18 => Some(Op::TopicConfigs),
            19 => Some(Op::CreatePartitions),
            20 => Some(Op::DeleteRecords),
            21 => Some(Op::ElectLeaders),
            22 => Some(Op::ListReassignments),
            23 => Some(Op::Brokers),
            24 => Some(Op::Hello),
            25 => Some(Op::PreVote),
            26 => Some(Op::BrokerHeartbeat),
            27 => Some(Op::Quiesce),
            28 => Some(Op::FetchAsStored),
            _ => None,
        }
    }
}

/// Request or response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Kind {
    Request = 1,
    Response = 2,
}

/// A decoded frame header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FrameHead {
    pub(crate) body_len: u32,
    pub(crate) kind: Kind,
    pub(crate) op: Op,
    pub(crate) request_id: u64,
}

/// Why a frame was rejected. Any of these closes the connection.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum FrameError {
    #[error("frame body of {len} bytes exceeds the limit of {max}")]
    TooLarge { len: u64, max: u64 },
    #[error("unknown frame kind {0}")]
    UnknownKind(u8),
    #[error("unknown op {0}")]
    UnknownOp(u8),
    #[error("non-zero reserved field")]
    NonZeroReserved,
    #[error("connection closed in the middle of a frame")]
    Truncated,
}

/// A frame to send: its header and its body, written together without being copied into
/// one buffer (a body can be a whole record batch).
#[derive(Debug)]
pub(crate) struct OutFrame {
    pub(crate) head: [u8; FRAME_HEADER_LEN],
    pub(crate) body: Body,
}

impl OutFrame {
    pub(crate) fn new(kind: Kind, op: Op, request_id: u64, body: impl Into<Body>) -> Self {
        let body = body.into();
        let len = u32::try_from(body.len()).expect("bodies are bounded by frame_bytes_max, a u32");
        let mut head = [0u8; FRAME_HEADER_LEN];
        head[0..4].copy_from_slice(&len.to_le_bytes());
        head[4] = kind as u8;
        head[5] = op as u8;
        // Bytes 6..8: reserved, zero.
        head[8..16].copy_from_slice(&request_id.to_le_bytes());
        OutFrame { head, body }
    }

    /// Writes the frame to `wr` and flushes it: the header and the body's pieces in vectored
    /// writes where the stream takes them (a TLS stream sends what it holds once flushed, a
    /// plaintext one at once).
    pub(crate) async fn write_to<W: AsyncWrite + Unpin>(self, wr: &mut W) -> std::io::Result<()> {
        use bytes::Buf;
        let mut bytes = Buf::chain(&self.head[..], self.body.into_buf());
        wr.write_all_buf(&mut bytes).await?;
        wr.flush().await
    }
}

/// Encodes a whole frame into one buffer.
#[cfg(test)]
pub(crate) fn encode(kind: Kind, op: Op, request_id: u64, body: &[u8]) -> Vec<u8> {
    let frame = OutFrame::new(kind, op, request_id, body.to_vec());
    let mut out = frame.head.to_vec();
    out.extend_from_slice(&frame.body.to_vec());
    out
}

/// Decodes and checks a frame header.
///
/// # Panics
///
/// Never, for any input.
pub(crate) fn decode_head(
    head: &[u8; FRAME_HEADER_LEN],
    frame_bytes_max: u32,
) -> Result<FrameHead, FrameError> {
    let [
        l0,
        l1,
        l2,
        l3,
        kind,
        op,
        r0,
        r1,
        i0,
        i1,
        i2,
        i3,
        i4,
        i5,
        i6,
        i7,
    ] = *head;
    let body_len = u32::from_le_bytes([l0, l1, l2, l3]);
    if body_len > frame_bytes_max {
        return Err(FrameError::TooLarge {
            len: u64::from(body_len),
            max: u64::from(frame_bytes_max),
        });
    }
    let kind = match kind {
        1 => Kind::Request,
        2 => Kind::Response,
        other => return Err(FrameError::UnknownKind(other)),
    };
    let op = Op::from_u8(op).ok_or(FrameError::UnknownOp(op))?;
    if (r0, r1) != (0, 0) {
        return Err(FrameError::NonZeroReserved);
    }
    let request_id = u64::from_le_bytes([i0, i1, i2, i3, i4, i5, i6, i7]);
    Ok(FrameHead {
        body_len,
        kind,
        op,
        request_id,
    })
}

/// Reads one frame. `Ok(None)` at a clean end of stream (between frames). The body is
/// allocated only after its length passed the limit.
pub(crate) async fn read_frame<R: AsyncRead + Unpin>(
    r: &mut R,
    frame_bytes_max: u32,
) -> Result<Option<(FrameHead, Vec<u8>)>, FrameReadError> {
    let mut head = [0u8; FRAME_HEADER_LEN];
    let first = r.read(&mut head).await.map_err(FrameReadError::Io)?;
    if first == 0 {
        return Ok(None);
    }
    if let Some(rest) = head.get_mut(first..) {
        r.read_exact(rest).await.map_err(|e| {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                FrameReadError::Frame(FrameError::Truncated)
            } else {
                FrameReadError::Io(e)
            }
        })?;
    }
    let head = decode_head(&head, frame_bytes_max).map_err(FrameReadError::Frame)?;
    let body = read_body(r, head.body_len as usize).await.map_err(|e| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            FrameReadError::Frame(FrameError::Truncated)
        } else {
            FrameReadError::Io(e)
        }
    })?;
    Ok(Some((head, body)))
}

/// Reads the next `len` bytes into a buffer allocated at that size, without zero-filling it
/// first (a replication frame or a fetch answer is up to megabytes, each byte about to be
/// overwritten). `UnexpectedEof` if the stream ends first.
pub(crate) async fn read_body<R: AsyncRead + Unpin>(
    r: &mut R,
    len: usize,
) -> std::io::Result<Vec<u8>> {
    let mut body = Vec::with_capacity(len);
    let mut unread = r.take(len as u64);
    while body.len() < len {
        if unread.read_buf(&mut body).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
    }
    Ok(body)
}

/// A failed frame read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum FrameReadError {
    #[error("bad frame: {0}")]
    Frame(FrameError),
    #[error("i/o: {0}")]
    Io(std::io::Error),
}

/// Decodes a frame header from arbitrary bytes: the entry point of the `frame_decode` fuzz
/// target. Never panics.
#[doc(hidden)]
pub fn fuzz_decode_head(data: &[u8]) -> bool {
    let Some(head) = data.get(..FRAME_HEADER_LEN) else {
        return false;
    };
    let head: [u8; FRAME_HEADER_LEN] = head.try_into().unwrap_or([0; FRAME_HEADER_LEN]);
    decode_head(&head, 1 << 20).is_ok()
}

/// Reads frames from arbitrary bytes, as a connection would, until the stream ends or a frame
/// is rejected: the second entry point of the `frame_decode` fuzz target. Returns the number of
/// frames accepted. Never panics, and never allocates more than the 64 KiB limit per frame.
#[doc(hidden)]
pub fn fuzz_read_frames(data: &[u8]) -> usize {
    use futures_util::FutureExt;
    let mut stream = data;
    let mut frames = 0;
    // Bounded: every accepted frame consumes at least FRAME_HEADER_LEN bytes.
    while let Some(Ok(Some(_))) = read_frame(&mut stream, 1 << 16).now_or_never() {
        frames += 1;
    }
    frames
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let bytes = encode(Kind::Request, Op::AppendEntries, 77, b"body");
        let head: [u8; 16] = bytes[..16].try_into().unwrap();
        let h = decode_head(&head, 100).unwrap();
        assert_eq!(
            h,
            FrameHead {
                body_len: 4,
                kind: Kind::Request,
                op: Op::AppendEntries,
                request_id: 77
            }
        );
        assert_eq!(&bytes[16..], b"body");
    }

    #[test]
    fn hostile_headers_are_rejected_before_allocation() {
        let mut head = [0u8; 16];
        head[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        head[4] = 1;
        head[5] = 1;
        assert_eq!(
            decode_head(&head, 1 << 20),
            Err(FrameError::TooLarge {
                len: u64::from(u32::MAX),
                max: 1 << 20
            })
        );
        let mut h = encode(Kind::Request, Op::Vote, 1, b"")[..16]
            .try_into()
            .unwrap();
        let set = |h: &mut [u8; 16], i: usize, v: u8| h[i] = v;
        set(&mut h, 4, 9);
        assert_eq!(decode_head(&h, 10), Err(FrameError::UnknownKind(9)));
        set(&mut h, 4, 1);
        set(&mut h, 5, 0);
        assert_eq!(decode_head(&h, 10), Err(FrameError::UnknownOp(0)));
        set(&mut h, 5, 1);
        set(&mut h, 7, 1);
        assert_eq!(decode_head(&h, 10), Err(FrameError::NonZeroReserved));
    }

    #[test]
    fn fuzz_entry_points_accept_garbage() {
        let mut stream = encode(Kind::Request, Op::Vote, 1, b"x");
        stream.extend(encode(Kind::Response, Op::Fetch, 2, b""));
        assert_eq!(fuzz_read_frames(&stream), 2);
        stream.extend([0xFF; 20]);
        assert_eq!(fuzz_read_frames(&stream), 2);
        assert!(!fuzz_decode_head(&[0xFF; 16]));
        assert!(fuzz_decode_head(&stream));
    }

    #[tokio::test]
    async fn truncated_and_garbage_streams_are_errors() {
        let good = encode(Kind::Request, Op::Vote, 5, b"hello");
        let mut r = &good[..];
        let (h, body) = read_frame(&mut r, 100).await.unwrap().unwrap();
        assert_eq!((h.request_id, &body[..]), (5, &b"hello"[..]));
        assert!(
            read_frame(&mut r, 100).await.unwrap().is_none(),
            "clean end of stream"
        );
        for cut in 1..good.len() {
            let mut r = &good[..cut];
            assert!(
                matches!(
                    read_frame(&mut r, 100).await,
                    Err(FrameReadError::Frame(FrameError::Truncated))
                ),
                "cut at {cut}"
            );
        }
        let mut garbage = good.clone();
        garbage.extend_from_slice(&[0xFF; 16]);
        let mut r = &garbage[..];
        assert!(read_frame(&mut r, 100).await.unwrap().is_some());
        assert!(
            read_frame(&mut r, 100).await.is_err(),
            "garbage after a valid frame"
        );
    }
}
