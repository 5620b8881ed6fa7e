//! Frame bodies: postcard encoding into a buffer sized once, with the large byte strings of the
//! value sent from where they lie.
//!
//! A replication request or a fetch answer is mostly record batches that already sit in memory
//! (a producer's frame, a segment's map). Copying each into the body costs a pass over every
//! byte per follower and per fetch. A field serialized with [`lend`] is not copied: the body
//! becomes pieces, the encoded bytes around the field and the field's own [`Bytes`], which the
//! connection's writer sends together in one vectored write. The bytes sent are exactly
//! postcard's encoding of the value either way.
//!
//! The receiving side mirrors it: a field deserialized with [`in_frame`], decoded inside
//! [`decode_in_frame`], is a slice of the received frame rather than a copy of its bytes.

use std::cell::RefCell;
use std::io::IoSlice;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use serde::{Deserializer, Serialize, Serializer};

/// A byte string shorter than this is copied into the body: a piece of its own would cost
/// more (a reference count, an entry in the write's vector) than the copy saves.
const LEND_MIN: usize = 1024;

thread_local! {
    /// The field [`lend`] is serializing on this thread, for [`Pieces::try_extend`] to take.
    static LENT: RefCell<Option<Bytes>> = const { RefCell::new(None) };
    /// The received frame that the value being decoded on this thread lies in (see
    /// [`decode_in_frame`]).
    static FRAME: RefCell<Option<Bytes>> = const { RefCell::new(None) };
}

/// Serializes `bytes` as serde's byte string (what `Bytes`'s own `Serialize` does), offering
/// the body being encoded ([`encode`]) to send it where it lies instead of copying it. Use it
/// with `#[serde(serialize_with = "…")]` on fields that hold record batches.
pub(crate) fn lend<S: Serializer>(bytes: &Bytes, s: S) -> Result<S::Ok, S::Error> {
    if bytes.len() < LEND_MIN {
        return s.serialize_bytes(bytes);
    }
    LENT.with(|l| *l.borrow_mut() = Some(bytes.clone()));
    let done = s.serialize_bytes(bytes);
    // Not taken (another serializer than `encode`'s, or one that failed first): no reference
    // outlives the call.
    LENT.with(|l| l.borrow_mut().take());
    done
}

/// Whether `data` is the field being lent (the same memory, not only equal bytes).
fn is_lent(data: &[u8]) -> bool {
    LENT.with(|l| {
        l.borrow()
            .as_ref()
            .is_some_and(|b| b.as_ptr() == data.as_ptr() && b.len() == data.len())
    })
}

/// The field being lent, if `data` is its bytes.
fn take_lent(data: &[u8]) -> Option<Bytes> {
    if is_lent(data) {
        LENT.with(|l| l.borrow_mut().take())
    } else {
        None
    }
}

/// A frame body to send: pieces written one after the other, none of them empty.
#[derive(Debug, Default, Clone)]
pub(crate) struct Body {
    pieces: Vec<Bytes>,
    len: usize,
}

impl Body {
    /// The body's length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The body in one buffer (a copy, for tests and for the rare reader that needs one).
    #[cfg(test)]
    pub(crate) fn to_vec(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.len);
        for piece in &self.pieces {
            out.extend_from_slice(piece);
        }
        out
    }

    /// How many pieces the body is sent as.
    #[cfg(test)]
    pub(crate) fn piece_count(&self) -> usize {
        self.pieces.len()
    }

    /// Adds `piece` at the end, sent as it lies.
    pub(crate) fn push(&mut self, piece: Bytes) {
        if !piece.is_empty() {
            self.len += piece.len();
            self.pieces.push(piece);
        }
    }

    /// The body as a [`Buf`] that a writer drains, vectored where the stream takes it.
    pub(crate) fn into_buf(self) -> BodyBuf {
        BodyBuf {
            pieces: self.pieces,
            at: 0,
            remaining: self.len,
        }
    }
}

impl From<Vec<u8>> for Body {
    fn from(bytes: Vec<u8>) -> Body {
        let mut body = Body::default();
        body.push(Bytes::from(bytes));
        body
    }
}

/// A [`Body`] being written.
#[derive(Debug)]
pub(crate) struct BodyBuf {
    pieces: Vec<Bytes>,
    /// The first piece not written whole.
    at: usize,
    remaining: usize,
}

impl Buf for BodyBuf {
    fn remaining(&self) -> usize {
        self.remaining
    }

    fn chunk(&self) -> &[u8] {
        self.pieces.get(self.at).map_or(&[], |piece| &piece[..])
    }

    fn advance(&mut self, mut cnt: usize) {
        while cnt > 0 {
            let Some(piece) = self.pieces.get_mut(self.at) else {
                break;
            };
            let step = cnt.min(piece.len());
            piece.advance(step);
            cnt -= step;
            self.remaining -= step;
            if piece.is_empty() {
                self.at += 1;
            }
        }
    }

    fn chunks_vectored<'a>(&'a self, dst: &mut [IoSlice<'a>]) -> usize {
        let pieces = self.pieces.get(self.at..).unwrap_or_default();
        let mut n = 0;
        for (slot, piece) in dst.iter_mut().zip(pieces) {
            *slot = IoSlice::new(piece);
            n += 1;
        }
        n
    }
}

/// Encodes `value` with postcard: its lent fields ([`lend`]) as pieces of their own, the rest
/// into one buffer allocated once at its exact size (each run between lent fields a view of
/// it).
///
/// `postcard::to_stdvec` grows its buffer by doubling: for a replication request of a few MiB
/// that was a chain of reallocations, each copying what was written and faulting in fresh
/// pages (a profile of the produce bench put half the CPU there). Sizing first is a pass that
/// copies nothing.
pub(crate) fn encode<T: Serialize + ?Sized>(value: &T) -> postcard::Result<Body> {
    let inline = postcard::serialize_with_flavor(value, Sizer::default())?;
    postcard::serialize_with_flavor(
        value,
        Pieces {
            body: Body::default(),
            run: BytesMut::with_capacity(inline),
        },
    )
}

/// Counts the bytes of an encoding that are not lent.
#[derive(Default)]
struct Sizer {
    inline: usize,
}

impl postcard::ser_flavors::Flavor for Sizer {
    type Output = usize;

    fn try_push(&mut self, _: u8) -> postcard::Result<()> {
        self.inline += 1;
        Ok(())
    }

    fn try_extend(&mut self, data: &[u8]) -> postcard::Result<()> {
        if !is_lent(data) {
            self.inline += data.len();
        }
        Ok(())
    }

    fn finalize(self) -> postcard::Result<usize> {
        Ok(self.inline)
    }
}

/// A postcard output that takes lent fields as pieces and copies the rest into `run`.
struct Pieces {
    body: Body,
    /// The bytes since the last lent piece, in one allocation sized beforehand for every run:
    /// each run goes out as a view of it.
    run: BytesMut,
}

impl postcard::ser_flavors::Flavor for Pieces {
    type Output = Body;

    fn try_push(&mut self, data: u8) -> postcard::Result<()> {
        self.run.put_u8(data);
        Ok(())
    }

    fn try_extend(&mut self, data: &[u8]) -> postcard::Result<()> {
        match take_lent(data) {
            Some(piece) => {
                let run = self.run.split().freeze();
                self.body.push(run);
                self.body.push(piece);
            }
            None => self.run.extend_from_slice(data),
        }
        Ok(())
    }

    fn finalize(mut self) -> postcard::Result<Body> {
        self.body.push(self.run.freeze());
        Ok(self.body)
    }
}

/// Runs `decode` (a synchronous decode of bytes that lie in `frame`) so that every field it
/// decodes with [`in_frame`] is a slice of `frame`, not a copy: a follower's entries keep the
/// replication frame's buffer, a client's fetched batches the answer's. The bytes decoded are
/// the same either way; a field not within `frame` is copied.
pub(crate) fn decode_in_frame<T>(frame: &Bytes, decode: impl FnOnce() -> T) -> T {
    /// Puts back what the thread had before, even if `decode` unwinds.
    struct Restore(Option<Bytes>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let before = self.0.take();
            FRAME.with(|f| *f.borrow_mut() = before);
        }
    }
    let before = FRAME.with(|f| f.borrow_mut().replace(frame.clone()));
    let _restore = Restore(before);
    decode()
}

/// `v` as a slice of the frame being decoded on this thread if it lies within it, else a copy.
fn slice_of_frame(v: &[u8]) -> Bytes {
    FRAME.with(|f| match f.borrow().as_ref() {
        Some(frame) if !v.is_empty() && within(frame, v) => frame.slice_ref(v),
        _ => Bytes::copy_from_slice(v),
    })
}

/// Whether `v` lies within `frame`'s bytes.
fn within(frame: &[u8], v: &[u8]) -> bool {
    let (start, end) = (
        frame.as_ptr() as usize,
        frame.as_ptr() as usize + frame.len(),
    );
    let (v_start, v_end) = (v.as_ptr() as usize, v.as_ptr() as usize + v.len());
    start <= v_start && v_end <= end
}

/// Deserializes a byte string as [`Bytes`]: borrowed bytes within the frame being decoded on
/// this thread ([`decode_in_frame`]) as a slice of it; anything else copied, as `Bytes`'s own
/// `Deserialize` does. Use it with `#[serde(deserialize_with = "…")]` on the fields that
/// [`lend`] sends.
pub(crate) fn in_frame<'de, D: Deserializer<'de>>(d: D) -> Result<Bytes, D::Error> {
    struct InFrame;
    impl<'de> serde::de::Visitor<'de> for InFrame {
        type Value = Bytes;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a byte string")
        }

        fn visit_borrowed_bytes<E: serde::de::Error>(self, v: &'de [u8]) -> Result<Bytes, E> {
            Ok(slice_of_frame(v))
        }

        fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Bytes, E> {
            Ok(Bytes::copy_from_slice(v))
        }

        fn visit_byte_buf<E: serde::de::Error>(self, v: Vec<u8>) -> Result<Bytes, E> {
            Ok(Bytes::from(v))
        }

        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Bytes, A::Error> {
            let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
            while let Some(b) = seq.next_element::<u8>()? {
                out.push(b);
            }
            Ok(Bytes::from(out))
        }
    }
    d.deserialize_bytes(InFrame)
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use serde::Serialize;

    use super::*;
    use crate::types::PartitionId;

    /// `encode` writes exactly what postcard's own encoder does.
    #[test]
    fn encode_is_postcard() {
        let value = (
            PartitionId::new("t", 3),
            vec![Bytes::from(vec![7u8; 100_000]), Bytes::new()],
            u64::MAX,
            "hint",
        );
        let body = encode(&value).unwrap();
        assert_eq!(body.to_vec(), postcard::to_stdvec(&value).unwrap());
        assert_eq!(body.piece_count(), 1, "nothing lent: one buffer");
    }

    #[derive(Serialize)]
    struct Batches {
        head: u32,
        #[serde(serialize_with = "lend")]
        big: Bytes,
        #[serde(serialize_with = "lend")]
        small: Bytes,
        #[serde(serialize_with = "lend")]
        empty: Bytes,
        more: Vec<Lent>,
    }

    #[derive(Serialize)]
    struct Lent(#[serde(serialize_with = "lend")] Bytes);

    /// Lent fields are sent where they lie, the rest copied; the bytes are postcard's all the
    /// same, and a serializer other than `encode`'s keeps no reference to a lent field.
    #[test]
    fn lent_fields_are_pieces_of_their_own_and_the_bytes_are_postcards() {
        let big = Bytes::from(vec![1u8; 64 * 1024]);
        let value = Batches {
            head: 300,
            big: big.clone(),
            small: Bytes::from_static(b"small"),
            empty: Bytes::new(),
            more: vec![Lent(big.slice(..LEND_MIN)), Lent(big.slice(10..20))],
        };
        let body = encode(&value).unwrap();
        assert_eq!(body.to_vec(), postcard::to_stdvec(&value).unwrap());
        assert_eq!(body.len(), body.to_vec().len());
        // head+len | big | small, empty, count, len | big[..LEND_MIN] | the rest
        assert_eq!(body.piece_count(), 5);
        assert!(
            body.pieces
                .iter()
                .any(|p| p.as_ptr() == big.as_ptr() && p.len() == big.len())
        );
        assert!(LENT.with(|l| l.borrow().is_none()));
        let _ = postcard::to_stdvec(&value).unwrap();
        assert!(LENT.with(|l| l.borrow().is_none()), "no reference kept");
    }

    /// A body drained as a `Buf` gives its bytes in order, however the writes split it.
    #[test]
    fn a_body_drains_in_order_through_partial_writes() {
        let big = Bytes::from((0..20_000u32).map(|i| i as u8).collect::<Vec<u8>>());
        let value = Batches {
            head: 1,
            big: big.clone(),
            small: Bytes::new(),
            empty: Bytes::new(),
            more: vec![Lent(big.slice(5_000..9_000))],
        };
        let body = encode(&value).unwrap();
        let expected = body.to_vec();
        let mut buf = body.into_buf();
        let mut got = Vec::new();
        let mut step = 1;
        for _ in 0..10_000 {
            if !buf.has_remaining() {
                break;
            }
            let mut slices = [IoSlice::new(&[]); 4];
            let n = buf.chunks_vectored(&mut slices);
            assert!(n >= 1);
            let mut take = step.min(buf.remaining());
            let mut taken = 0;
            for s in &slices[..n] {
                let k = take.min(s.len());
                got.extend_from_slice(&s[..k]);
                take -= k;
                taken += k;
            }
            buf.advance(taken);
            step = step * 3 + 1;
        }
        assert!(!buf.has_remaining());
        assert_eq!(got, expected);
    }

    #[derive(Debug, PartialEq, Serialize, serde::Deserialize)]
    struct Carried(
        #[serde(serialize_with = "lend", deserialize_with = "in_frame")] Bytes,
        u32,
    );

    /// What `lend` sends, `in_frame` decodes as slices of the received frame; outside
    /// `decode_in_frame`, or from bytes elsewhere, as copies of the same bytes.
    #[test]
    fn fields_decoded_in_their_frame_are_slices_of_it() {
        let sent = vec![
            Carried(Bytes::from(vec![3u8; 5_000]), 1),
            Carried(Bytes::new(), 2),
            Carried(Bytes::from_static(b"third"), 3),
        ];
        let frame = Bytes::from(encode(&sent).unwrap().to_vec());
        let got: Vec<Carried> = decode_in_frame(&frame, || postcard::from_bytes(&frame).unwrap());
        assert_eq!(got, sent);
        for c in got.iter().filter(|c| !c.0.is_empty()) {
            assert!(within(&frame, &c.0), "{c:?} is a slice of the frame");
        }
        let copied: Vec<Carried> = postcard::from_bytes(&frame).unwrap();
        assert_eq!(copied, sent);
        assert!(copied.iter().all(|c| !within(&frame, &c.0)));
        let other = Bytes::from(postcard::to_stdvec(&sent).unwrap());
        let elsewhere: Vec<Carried> =
            decode_in_frame(&frame, || postcard::from_bytes(&other).unwrap());
        assert_eq!(elsewhere, sent);
        assert!(elsewhere.iter().all(|c| !within(&frame, &c.0)));
        assert!(
            FRAME.with(|f| f.borrow().is_none()),
            "the thread's frame is put back"
        );
        // A self-describing format still reads them (a sequence of numbers, in JSON).
        let json = serde_json::to_string(&sent[2]).unwrap();
        assert_eq!(serde_json::from_str::<Carried>(&json).unwrap(), sent[2]);
    }
}
