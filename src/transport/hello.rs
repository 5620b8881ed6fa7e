//! The Hello a connection opens with: the caller names the protocol versions it speaks, and
//! the broker answers with the highest one both know (see `version.rs`).
//!
//! Request body: `HelloRequest { min: u16, max: u16 }` (postcard: two varints). Answer:
//! `Result<u16, WireError>`: `Ok(version)`, or `Err(UnsupportedVersion { min, max })` (the
//! broker's own range) where the two ranges do not meet; the broker closes the connection
//! after that answer. A broker of version 1 does not know the operation and closes the
//! connection unanswered: the caller then connects again and speaks version 1 without a Hello.

use serde::{Deserialize, Serialize};

use super::frame::{Kind, Op, OutFrame, read_frame};
use super::{CallError, ReadHalf, WriteHalf};
use crate::protocol::WireError;
use crate::version::PROTOCOL_VERSION_MIN;

/// An answer to a Hello is a few bytes; more is no answer.
const HELLO_FRAME_BYTES_MAX: u32 = 1 << 10;

/// A Hello's body: the range of versions the caller speaks.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct HelloRequest {
    pub(crate) min: u16,
    pub(crate) max: u16,
}

/// How a caller's Hello ended.
#[derive(Debug)]
pub(crate) enum Greeted {
    /// The broker chose this version.
    Version(u16),
    /// The broker closed the connection without an answer: it does not know Hello.
    Closed,
}

/// The caller's side: sends a Hello for `min..=max` and reads its answer.
pub(crate) async fn say_hello(
    (rd, wr): (&mut ReadHalf, &mut WriteHalf),
    max: u16,
) -> Result<Greeted, CallError> {
    let broken = |why: String| CallError::Unreachable(format!("saying hello: {why}"));
    let request = HelloRequest {
        min: PROTOCOL_VERSION_MIN,
        max,
    };
    let body = super::body::encode(&request).map_err(|e| broken(e.to_string()))?;
    let frame = OutFrame::new(Kind::Request, Op::Hello, 0, body);
    if frame.write_to(wr).await.is_err() {
        return Ok(Greeted::Closed);
    }
    let (head, body) = match read_frame(rd, HELLO_FRAME_BYTES_MAX).await {
        Ok(Some(frame)) => frame,
        // Closed at once, or cut short: a broker that does not know the operation.
        Ok(None) | Err(super::frame::FrameReadError::Io(_)) => return Ok(Greeted::Closed),
        Err(e) => return Err(broken(e.to_string())),
    };
    if head.kind != Kind::Response || head.op != Op::Hello || head.request_id != 0 {
        return Err(broken("an answer out of turn".into()));
    }
    let answer: Result<u16, WireError> =
        postcard::from_bytes(&body).map_err(|e| broken(format!("a malformed answer: {e}")))?;
    match answer {
        Ok(version) if (PROTOCOL_VERSION_MIN..=max).contains(&version) => {
            Ok(Greeted::Version(version))
        }
        Ok(version) => Err(broken(format!(
            "the broker chose version {version}, outside {PROTOCOL_VERSION_MIN}..={max}"
        ))),
        Err(WireError::UnsupportedVersion { min, max: theirs }) => {
            Err(CallError::Unreachable(format!(
                "the broker speaks protocol versions {min}..={theirs}, this side {PROTOCOL_VERSION_MIN}..={max}"
            )))
        }
        // A broker that wants a login first, from a caller that gave none.
        Err(WireError::AuthenticationFailed(reason)) => Err(CallError::LoginRefused(reason)),
        Err(other) => Err(broken(format!("{other:?}"))),
    }
}

/// The broker's side: the answer to a Hello's `body` from a broker that speaks up to `max`,
/// and the version chosen (`None`: the ranges do not meet, or the body is malformed; the
/// connection is closed after the answer).
pub(crate) fn answer_hello(body: &[u8], max: u16) -> (super::body::Body, Option<u16>) {
    let chosen = match postcard::from_bytes::<HelloRequest>(body) {
        Ok(HelloRequest { min, max: theirs }) if min <= theirs => {
            let version = theirs.min(max);
            if version >= min.max(PROTOCOL_VERSION_MIN) {
                Ok(version)
            } else {
                Err(WireError::UnsupportedVersion {
                    min: PROTOCOL_VERSION_MIN,
                    max,
                })
            }
        }
        Ok(_) => Err(WireError::Other("a Hello whose range is empty".into())),
        Err(e) => Err(WireError::Other(format!("a malformed Hello: {e}"))),
    };
    let version = chosen.as_ref().ok().copied();
    let answer = super::body::encode(&chosen).unwrap_or_default();
    (answer, version)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chosen(min: u16, max: u16, ours: u16) -> Option<u16> {
        let body = super::super::body::encode(&HelloRequest { min, max }).unwrap();
        answer_hello(&body.to_vec(), ours).1
    }

    #[test]
    fn the_highest_version_both_speak_is_chosen() {
        assert_eq!(chosen(1, 2, 2), Some(2));
        assert_eq!(chosen(1, 5, 2), Some(2));
        assert_eq!(chosen(1, 1, 2), Some(1));
        assert_eq!(chosen(1, 2, 1), Some(1));
    }

    #[test]
    fn ranges_that_do_not_meet_are_refused_with_the_brokers_range() {
        assert_eq!(chosen(3, 4, 2), None);
        let body = super::super::body::encode(&HelloRequest { min: 3, max: 4 }).unwrap();
        let answer: Result<u16, WireError> =
            postcard::from_bytes(&answer_hello(&body.to_vec(), 2).0.to_vec()).unwrap();
        assert!(matches!(
            answer,
            Err(WireError::UnsupportedVersion { min: 1, max: 2 })
        ));
        assert_eq!(chosen(2, 1, 2), None, "an empty range");
        assert_eq!(
            answer_hello(&[0xff, 0xff, 0xff], 2).1,
            None,
            "a malformed body"
        );
    }

    #[test]
    fn a_hello_is_two_varints() {
        let body = super::super::body::encode(&HelloRequest { min: 1, max: 2 }).unwrap();
        assert_eq!(body.to_vec(), [0x01, 0x02]);
        let answer = super::super::body::encode(&Ok::<u16, WireError>(2)).unwrap();
        assert_eq!(answer.to_vec(), [0x00, 0x02]);
    }
}
