//! The record protection of an established TLS connection: rustls runs the handshake and keeps
//! the traffic secrets ([`rustls::kernel`]); this seals and opens the records in the
//! connection's own buffers with aws-lc-rs' AEADs: opened in place, or straight into where
//! the reader wants the content ([`Records::open_into`]); sealed in place, or from where the
//! content lies straight into the record ([`Records::seal_slice`]). rustls' buffered
//! connection copies each record twice more on its way in (into its deframer, then into a
//! plaintext buffer of its own) and on its way out allocates each one and copies its content
//! into it; this allocates none, and copies only the content it seals in place.
//!
//! # Wire format
//!
//! Every record starts with a 5-byte header: content type (1 byte: 21 alert, 22 handshake,
//! 23 application data), protocol version (2 bytes, `03 03`), body length (2 bytes,
//! big-endian). Nonces are 12 bytes; `seq` is the direction's record count since its keys
//! were set, starting at 0; `iv ^ seq` is the IV with the sequence number, big-endian, XORed
//! into its last 8 bytes. Tags are 16 bytes.
//!
//! - TLS 1.3 (RFC 8446 §5.2, §5.3), every suite: the header's type is always 23; the body is
//!   `AEAD(nonce = iv ^ seq, aad = header, content || real type (1 byte) || zero padding)`
//!   followed by the tag, at most 2^14 + 256 bytes; the content is at most 2^14.
//! - TLS 1.2, AES-GCM (RFC 5288): the body is the explicit nonce (8 bytes), the ciphertext and
//!   the tag; the nonce is `iv[0..4] || explicit`; `aad = seq (8 bytes, big-endian) || type ||
//!   03 03 || content length (2 bytes)`. This side sends `(iv ^ seq)[4..12]` as its explicit
//!   nonce, as rustls does.
//! - TLS 1.2, ChaCha20-Poly1305 (RFC 7905): the body is the ciphertext and the tag; the nonce is
//!   `iv ^ seq`; the aad is as AES-GCM's.
//!
//! A connection's keys wear out (AES-GCM after about 2^24.5 records): in TLS 1.3 the sender
//! moves to new keys with a KeyUpdate message ([`Records::needs_new_keys`]); in TLS 1.2,
//! which has none, the connection ends there.

use std::ops::Range;

use aws_lc_rs::aead::{self, Aad, LessSafeKey, Nonce, UnboundKey};
use bytes::{Buf, BufMut};
use rustls::ConnectionTrafficSecrets;

/// Content types.
pub(crate) const ALERT: u8 = 21;
pub(crate) const HANDSHAKE: u8 = 22;
pub(crate) const APPLICATION_DATA: u8 = 23;

/// A record header's length.
pub(crate) const HEADER_LEN: usize = 5;
/// The most content a record carries.
pub(crate) const MAX_CONTENT: usize = 1 << 14;
/// The longest record body accepted: TLS 1.2 allows 2^14 + 2048 (RFC 5246 §6.2.3).
const MAX_BODY: usize = MAX_CONTENT + 2048;
/// The longest TLS 1.3 record body (RFC 8446 §5.2).
const MAX_BODY_TLS13: usize = MAX_CONTENT + 256;
/// The largest record, header included.
pub(crate) const MAX_RECORD: usize = HEADER_LEN + MAX_BODY;

const TAG_LEN: usize = 16;
const EXPLICIT_NONCE_LEN: usize = 8;

/// Sealed records on their way to the socket: [`RecordBuf::bytes`]. The memory past them
/// holds zeros or what earlier records left (sealed bytes, or the content of a record that
/// failed to seal), never sent, and is reused as it is, not zeroed again: a record sealed from
/// where its content lies ([`Records::seal_slice`]) is written once, by the cipher.
#[derive(Default)]
pub(crate) struct RecordBuf {
    /// `buf[..len]` the records; `buf[len..]` room from earlier records.
    buf: Vec<u8>,
    len: usize,
}

impl RecordBuf {
    /// The bytes held.
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.buf[..self.len]
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The memory held, records and room.
    pub(crate) fn memory(&self) -> usize {
        self.buf.capacity()
    }

    /// Makes room for `additional` more bytes without moving them later (and no more room:
    /// the caller knows what is coming).
    pub(crate) fn reserve(&mut self, additional: usize) {
        self.buf
            .reserve_exact((self.len + additional).saturating_sub(self.buf.len()));
    }

    /// Holds `n` more bytes at the end: zeros, or what earlier records left there, which the
    /// caller overwrites before they can be sent (or drops with [`RecordBuf::truncate`]).
    fn grow(&mut self, n: usize) {
        self.len += n;
        if self.buf.len() < self.len {
            self.buf.resize(self.len, 0);
        }
    }

    pub(crate) fn extend_from_slice(&mut self, bytes: &[u8]) {
        let at = self.len;
        self.grow(bytes.len());
        self.buf[at..self.len].copy_from_slice(bytes);
    }

    fn push(&mut self, byte: u8) {
        self.extend_from_slice(&[byte]);
    }

    fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// Drops the first `n` bytes (what the socket took), moving the rest to the front.
    pub(crate) fn consume(&mut self, n: usize) {
        let n = n.min(self.len);
        self.buf.copy_within(n..self.len, 0);
        self.len -= n;
    }

    /// Holds nothing; the memory stays for the next records.
    pub(crate) fn clear(&mut self) {
        self.len = 0;
    }
}

/// Why a record could not be sealed or opened. The connection ends on any of them.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RecordError {
    #[error("TLS record of content type {0} not expected")]
    UnexpectedType(u8),
    #[error("TLS record header with version {0:#06x}")]
    BadVersion(u16),
    #[error("TLS record of {0} bytes, over the limit")]
    Oversized(usize),
    #[error("TLS record too short for its protection")]
    Truncated,
    #[error("TLS record failed authentication")]
    BadMac,
    #[error("TLS record could not be sealed")]
    SealFailed,
    #[error("TLS record's content needs {0} bytes of room to be opened into")]
    NoRoom(usize),
    #[error("TLS record without a content type")]
    NoContentType,
    #[error("TLS keys used up")]
    KeysUsedUp,
    #[error("TLS suite not supported by the record layer")]
    UnsupportedSuite,
}

impl From<RecordError> for std::io::Error {
    fn from(e: RecordError) -> std::io::Error {
        std::io::Error::new(std::io::ErrorKind::InvalidData, e)
    }
}

/// Which record format the connection uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    Tls13,
    Tls12Gcm,
    Tls12Chacha,
}

/// One direction's key, IV and sequence number.
struct Keys {
    key: LessSafeKey,
    iv: [u8; 12],
    seq: u64,
}

impl Keys {
    fn new(seq: u64, secrets: &ConnectionTrafficSecrets) -> Result<(Keys, bool), RecordError> {
        let (algorithm, key, iv, chacha) = match secrets {
            ConnectionTrafficSecrets::Aes128Gcm { key, iv } => (&aead::AES_128_GCM, key, iv, false),
            ConnectionTrafficSecrets::Aes256Gcm { key, iv } => (&aead::AES_256_GCM, key, iv, false),
            ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv } => {
                (&aead::CHACHA20_POLY1305, key, iv, true)
            }
            _ => return Err(RecordError::UnsupportedSuite),
        };
        let key =
            UnboundKey::new(algorithm, key.as_ref()).map_err(|_| RecordError::UnsupportedSuite)?;
        let iv = <[u8; 12]>::try_from(iv.as_ref()).map_err(|_| RecordError::UnsupportedSuite)?;
        let keys = Keys {
            key: LessSafeKey::new(key),
            iv,
            seq,
        };
        Ok((keys, chacha))
    }

    /// `iv ^ seq`.
    fn nonce_bytes(&self) -> [u8; 12] {
        let mut nonce = self.iv;
        let mut seq = [0u8; 8];
        (&mut seq[..]).put_u64(self.seq);
        for (n, s) in nonce[4..].iter_mut().zip(seq) {
            *n ^= s;
        }
        nonce
    }

    /// TLS 1.2's additional data.
    fn aad12(&self, typ: u8, content_len: usize) -> [u8; 13] {
        let mut aad = [0u8; 13];
        (&mut aad[..8]).put_u64(self.seq);
        aad[8..11].copy_from_slice(&[typ, 3, 3]);
        (&mut aad[11..]).put_u16(content_len as u16);
        aad
    }

    fn advance(&mut self) -> Result<(), RecordError> {
        self.seq = self.seq.checked_add(1).ok_or(RecordError::KeysUsedUp)?;
        Ok(())
    }
}

/// A connection's record protection, both directions.
pub(crate) struct Records {
    format: Format,
    tx: Keys,
    rx: Keys,
    /// Records one key may seal before it must be replaced (the suite's confidentiality limit).
    limit: u64,
}

impl Records {
    /// The protection rustls' handshake ended with: `tls13` tells the record format, `tx` and
    /// `rx` are each a sequence number and the secrets it goes with, `limit` the suite's
    /// confidentiality limit.
    pub(crate) fn new(
        tls13: bool,
        tx: (u64, ConnectionTrafficSecrets),
        rx: (u64, ConnectionTrafficSecrets),
        limit: u64,
    ) -> Result<Records, RecordError> {
        let (tx, chacha) = Keys::new(tx.0, &tx.1)?;
        let (rx, _) = Keys::new(rx.0, &rx.1)?;
        let format = match (tls13, chacha) {
            (true, _) => Format::Tls13,
            (false, false) => Format::Tls12Gcm,
            (false, true) => Format::Tls12Chacha,
        };
        Ok(Records {
            format,
            tx,
            rx,
            limit,
        })
    }

    /// Whether the sending key has sealed as many records as it may: in TLS 1.3, time for a
    /// KeyUpdate and [`Records::set_tx`]; in TLS 1.2, the end of the connection.
    pub(crate) fn needs_new_keys(&self) -> bool {
        self.tx.seq >= self.limit
    }

    /// Test-only: new sending keys after every `records` records.
    #[cfg(test)]
    pub(crate) fn set_limit(&mut self, records: u64) {
        self.limit = records;
    }

    /// Whether the connection is TLS 1.3 (which has KeyUpdate).
    pub(crate) fn is_tls13(&self) -> bool {
        self.format == Format::Tls13
    }

    /// Seals with the new sending keys from here on.
    pub(crate) fn set_tx(
        &mut self,
        (seq, secrets): (u64, ConnectionTrafficSecrets),
    ) -> Result<(), RecordError> {
        self.tx = Keys::new(seq, &secrets)?.0;
        Ok(())
    }

    /// Opens with the new receiving keys from here on.
    pub(crate) fn set_rx(
        &mut self,
        (seq, secrets): (u64, ConnectionTrafficSecrets),
    ) -> Result<(), RecordError> {
        self.rx = Keys::new(seq, &secrets)?.0;
        Ok(())
    }

    /// Appends to `out` one record of type `typ` whose content `fill` appends (at most
    /// [`MAX_CONTENT`] bytes; more is an error and leaves `out` as it was). The content is
    /// sealed where `fill` put it.
    pub(crate) fn seal(
        &mut self,
        typ: u8,
        out: &mut RecordBuf,
        fill: impl FnOnce(&mut RecordBuf),
    ) -> Result<(), RecordError> {
        let (start, nonce, next) = self.begin(typ, out)?;
        let content_at = out.len();
        fill(out);
        let content_len = out.len() - content_at;
        if content_len > MAX_CONTENT {
            out.truncate(start);
            return Err(RecordError::Oversized(content_len));
        }
        if self.is_tls13() {
            out.push(typ);
        }
        let (aad, aad_len) = self.finish_header(typ, out, start, content_len);
        let sealed = self.tx.key.seal_in_place_separate_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(&aad[..aad_len]),
            &mut out.bytes_mut()[content_at..],
        );
        let Ok(tag) = sealed else {
            // Nothing of a record that failed to seal may go out.
            out.truncate(start);
            return Err(RecordError::SealFailed);
        };
        out.extend_from_slice(tag.as_ref());
        self.tx.seq = next;
        Ok(())
    }

    /// Appends to `out` one record of type `typ` carrying `content` (at most
    /// [`MAX_CONTENT`] bytes), sealed from where `content` lies into `out`: the cipher reads
    /// the content once and writes the record, where [`Records::seal`] copies it first.
    pub(crate) fn seal_slice(
        &mut self,
        typ: u8,
        out: &mut RecordBuf,
        content: &[u8],
    ) -> Result<(), RecordError> {
        if content.len() > MAX_CONTENT {
            return Err(RecordError::Oversized(content.len()));
        }
        let (start, nonce, next) = self.begin(typ, out)?;
        // TLS 1.3's real type is sealed behind the content, before the tag.
        let inner: &[u8] = if self.is_tls13() { &[typ] } else { &[] };
        let content_at = out.len();
        out.grow(content.len() + inner.len());
        let (aad, aad_len) = self.finish_header(typ, out, start, content.len());
        out.grow(TAG_LEN);
        let (ciphertext, inner_and_tag) = out.bytes_mut()[content_at..].split_at_mut(content.len());
        let sealed = self.tx.key.seal_out_of_place_scatter(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(&aad[..aad_len]),
            content,
            ciphertext,
            inner,
            inner_and_tag,
        );
        if sealed.is_err() {
            out.truncate(start);
            return Err(RecordError::SealFailed);
        }
        self.tx.seq = next;
        Ok(())
    }

    /// The start of a record of type `typ` at the end of `out`: its header (length still 0)
    /// and, in TLS 1.2 with AES-GCM, its explicit nonce. Where it starts, its nonce, and the
    /// sequence number after it.
    fn begin(&self, typ: u8, out: &mut RecordBuf) -> Result<(usize, [u8; 12], u64), RecordError> {
        // TLS 1.2 cannot renew its keys: past the limit only an alert may still go, to end the
        // connection.
        if self.tx.seq >= self.limit && !self.is_tls13() && typ != ALERT {
            return Err(RecordError::KeysUsedUp);
        }
        // The sequence number this record takes must have a next one: a nonce is never used
        // twice.
        let next = self.tx.seq.checked_add(1).ok_or(RecordError::KeysUsedUp)?;
        let start = out.len();
        let outer = if self.is_tls13() {
            APPLICATION_DATA
        } else {
            typ
        };
        out.extend_from_slice(&[outer, 3, 3, 0, 0]);
        let nonce = self.tx.nonce_bytes();
        if self.format == Format::Tls12Gcm {
            out.extend_from_slice(&nonce[4..]);
        }
        Ok((start, nonce, next))
    }

    /// Writes the body length into the header of the record at `start` of `out`, which holds
    /// everything of it but its tag (TLS 1.3's real type included) and carries
    /// `content_len` bytes of content: its additional data, and how many bytes of it count.
    fn finish_header(
        &self,
        typ: u8,
        out: &mut RecordBuf,
        start: usize,
        content_len: usize,
    ) -> ([u8; 13], usize) {
        let body_len = out.len() - start - HEADER_LEN + TAG_LEN;
        let header = &mut out.bytes_mut()[start..start + HEADER_LEN];
        (&mut header[3..]).put_u16(body_len as u16);
        match self.format {
            Format::Tls13 => {
                let mut aad = [0u8; 13];
                aad[..HEADER_LEN].copy_from_slice(header);
                (aad, HEADER_LEN)
            }
            Format::Tls12Gcm | Format::Tls12Chacha => {
                let aad = self.tx.aad12(typ, content_len);
                (aad, aad.len())
            }
        }
    }

    /// The whole length (header included) of the record whose header starts `head`, once
    /// its 5 bytes are there; an error for a header no record of this connection can have.
    pub(crate) fn record_len(&self, head: &[u8]) -> Option<Result<usize, RecordError>> {
        let [typ, major, minor, hi, lo, ..] = *head else {
            return None;
        };
        let len = usize::from((&[hi, lo][..]).get_u16());
        let max = if self.is_tls13() {
            MAX_BODY_TLS13
        } else {
            MAX_BODY
        };
        let checked = if !(typ == APPLICATION_DATA
            || (!self.is_tls13() && matches!(typ, ALERT | HANDSHAKE)))
        {
            Err(RecordError::UnexpectedType(typ))
        } else if major != 3 {
            Err(RecordError::BadVersion((&[major, minor][..]).get_u16()))
        } else if len > max {
            Err(RecordError::Oversized(len))
        } else {
            Ok(HEADER_LEN + len)
        };
        Some(checked)
    }

    /// Opens `record` (exactly one whole record, header included, as [`Records::record_len`]
    /// measured it) in place: its content type and where its content now lies in `record`.
    pub(crate) fn open(&mut self, record: &mut [u8]) -> Result<(u8, Range<usize>), RecordError> {
        let sealed = self.sealed_parts(record)?;
        let (text, tag) = record.split_at_mut(record.len() - TAG_LEN);
        let text = &mut text[sealed.text.clone()];
        self.rx
            .key
            .open_in_place_separate_tag(sealed.nonce(), sealed.aad(), tag, text)
            .map_err(|_| RecordError::BadMac)?;
        let (typ, len) = self.opened(sealed.typ, text)?;
        Ok((typ, sealed.text.start..sealed.text.start + len))
    }

    /// Opens `record` as [`Records::open`] does, into `out` instead of in place: the cipher
    /// reads the record once and writes its content where the reader wants it. `out` must
    /// hold [`Records::opened_room`] bytes (less is refused as [`RecordError::NoRoom`]). Its
    /// content type and the length of its content, at the start of `out`; in TLS 1.3 the
    /// real type and any padding follow the content there. On an error, what `out` holds is
    /// not to be read.
    pub(crate) fn open_into(
        &mut self,
        record: &[u8],
        out: &mut [u8],
    ) -> Result<(u8, usize), RecordError> {
        let sealed = self.sealed_parts(record)?;
        let room = sealed.text.len();
        let out = out.get_mut(..room).ok_or(RecordError::NoRoom(room))?;
        let tag = &record[record.len() - TAG_LEN..];
        self.rx
            .key
            .open_separate_gather(
                sealed.nonce(),
                sealed.aad(),
                &record[sealed.text.clone()],
                tag,
                out,
            )
            .map_err(|_| RecordError::BadMac)?;
        self.opened(sealed.typ, out)
    }

    /// The room [`Records::open_into`] needs for a record of `len` bytes, header included: its
    /// ciphertext's length (in TLS 1.3 the content, its type and any padding).
    pub(crate) fn opened_room(&self, len: usize) -> usize {
        len.saturating_sub(self.text_at() + TAG_LEN)
    }

    /// Where a record's ciphertext starts: past the header, and in TLS 1.2 with AES-GCM past
    /// the explicit nonce too. The tag is the record's last 16 bytes.
    fn text_at(&self) -> usize {
        match self.format {
            Format::Tls12Gcm => HEADER_LEN + EXPLICIT_NONCE_LEN,
            Format::Tls13 | Format::Tls12Chacha => HEADER_LEN,
        }
    }

    /// Where the protected parts of `record` lie and what opens them, with the receiving keys.
    fn sealed_parts(&self, record: &[u8]) -> Result<SealedParts, RecordError> {
        let text_at = self.text_at();
        // TLS 1.3's ciphertext holds at least the content type.
        let min_text = usize::from(self.format == Format::Tls13);
        if record.len() < text_at + min_text + TAG_LEN {
            return Err(RecordError::Truncated);
        }
        let (typ, text) = (record[0], text_at..record.len() - TAG_LEN);
        let rx = &self.rx;
        let (nonce, aad) = match self.format {
            // The header is the additional data.
            Format::Tls13 => {
                let mut aad = [0u8; 13];
                aad[..HEADER_LEN].copy_from_slice(&record[..HEADER_LEN]);
                (rx.nonce_bytes(), (aad, HEADER_LEN))
            }
            // TLS 1.2's additional data counts the content, as long as the ciphertext.
            Format::Tls12Gcm => {
                let mut nonce = [0u8; 12];
                nonce[..4].copy_from_slice(&rx.iv[..4]);
                nonce[4..].copy_from_slice(&record[HEADER_LEN..text_at]);
                (nonce, (rx.aad12(typ, text.len()), 13))
            }
            Format::Tls12Chacha => (rx.nonce_bytes(), (rx.aad12(typ, text.len()), 13)),
        };
        Ok(SealedParts {
            typ,
            nonce,
            aad,
            text,
        })
    }

    /// The content type and content length of an opened record whose header said `typ` and
    /// whose text is `text`; counts the record.
    fn opened(&mut self, typ: u8, text: &[u8]) -> Result<(u8, usize), RecordError> {
        let opened = match self.format {
            Format::Tls13 => {
                // Content, type and padding together (RFC 8446 §5.4).
                if text.len() > MAX_CONTENT + 1 {
                    return Err(RecordError::Oversized(text.len()));
                }
                // The real type is the last byte that is not padding.
                let end = text
                    .iter()
                    .rposition(|&b| b != 0)
                    .ok_or(RecordError::NoContentType)?;
                (text[end], end)
            }
            Format::Tls12Gcm | Format::Tls12Chacha => (typ, text.len()),
        };
        if opened.1 > MAX_CONTENT {
            return Err(RecordError::Oversized(opened.1));
        }
        self.rx.advance()?;
        Ok(opened)
    }
}

/// What [`Records::sealed_parts`] found: the header's type, the nonce and additional data, and
/// where the ciphertext lies (the tag is the record's last 16 bytes).
struct SealedParts {
    typ: u8,
    nonce: [u8; 12],
    aad: ([u8; 13], usize),
    text: Range<usize>,
}

impl SealedParts {
    fn nonce(&self) -> Nonce {
        Nonce::assume_unique_for_key(self.nonce)
    }

    fn aad(&self) -> Aad<&[u8]> {
        Aad::from(&self.aad.0[..self.aad.1])
    }
}

#[cfg(test)]
#[path = "record_tests.rs"]
mod tests;
