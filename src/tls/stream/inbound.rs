//! What a connection does with each record it opens: application data for its reader,
//! post-handshake handshake messages (TLS 1.3's KeyUpdate and NewSessionTicket, TLS 1.2's
//! HelloRequest), alerts; and what it tells a peer that broke the protocol ([`Fatal`]).

use std::ops::Range;

use tokio::io::ReadBuf;

use super::{Kernel, TlsStream};
use crate::tls::handshake::protocol_error;
use crate::tls::record::{ALERT, APPLICATION_DATA, HANDSHAKE, HEADER_LEN, RecordError};

/// The most bytes of a post-handshake message not yet whole a connection buffers.
const MESSAGE_BYTES_MAX: usize = 64 << 10;

/// Records in a row that carry nothing for the application (empty ones, key updates, warning
/// alerts) before the peer is taken for one wasting the connection's work.
const IDLE_RECORDS_MAX: u32 = 32;

/// Handshake message types handled past the handshake.
const HELLO_REQUEST: u8 = 0;
const NEW_SESSION_TICKET: u8 = 4;
pub(super) const KEY_UPDATE: u8 = 24;

/// Alert levels and descriptions.
pub(super) const WARNING: u8 = 1;
pub(super) const FATAL: u8 = 2;
pub(super) const CLOSE_NOTIFY: u8 = 0;
const UNEXPECTED_MESSAGE: u8 = 10;
const BAD_RECORD_MAC: u8 = 20;
const RECORD_OVERFLOW: u8 = 22;
const DECODE_ERROR: u8 = 50;
const INTERNAL_ERROR: u8 = 80;
const USER_CANCELED: u8 = 90;

/// Why the peer broke the connection: the fatal alert it is sent, and the error.
pub(super) struct Fatal {
    pub(super) alert: u8,
    pub(super) error: std::io::Error,
}

impl Fatal {
    fn new(alert: u8, what: &str) -> Fatal {
        Fatal {
            alert,
            error: protocol_error(what),
        }
    }
}

impl From<RecordError> for Fatal {
    fn from(e: RecordError) -> Fatal {
        let alert = match e {
            RecordError::BadMac => BAD_RECORD_MAC,
            RecordError::Oversized(_) => RECORD_OVERFLOW,
            RecordError::Truncated => DECODE_ERROR,
            RecordError::NoRoom(_) => INTERNAL_ERROR,
            _ => UNEXPECTED_MESSAGE,
        };
        Fatal {
            alert,
            error: e.into(),
        }
    }
}

impl TlsStream {
    /// Opens the record of `len` bytes at the read buffer's head and acts on it.
    fn open_next(&mut self, len: usize) -> Result<(), Fatal> {
        let read = &mut self.read;
        let at = read.head;
        let (typ, range) = self.records.open(&mut read.buf[at..at + len])?;
        read.head += len;
        self.act_on(typ, at + range.start..at + range.end)
    }

    /// Opens the record of `len` bytes at the read buffer's head: straight into `out` where
    /// `out` has room for its ciphertext and its header says application data (which every
    /// TLS 1.3 header says), else in place as [`TlsStream::open_next`] does. Into `out`, its
    /// application data lands where the reader wants it, not copied out of the read buffer
    /// again; that room is zeroed first where `out` is not initialized memory (a buffer
    /// allocated for a frame's body), which costs less than the copy, and no more than the
    /// cipher's own first write there would (opening into it unzeroed, which takes `unsafe`,
    /// read no faster: measured and not kept). Anything else the record
    /// holds is put back in the read buffer and acted on as `open_next` does (its content
    /// passed through `out`'s unfilled room on the way). Whether `out` got content.
    pub(super) fn open_next_into(
        &mut self,
        len: usize,
        out: &mut ReadBuf<'_>,
    ) -> Result<bool, Fatal> {
        let read = &mut self.read;
        let at = read.head;
        let room = self.records.opened_room(len);
        if out.remaining() < room || read.buf[at] != APPLICATION_DATA {
            return self.open_next(len).map(|()| false);
        }
        let opened = out.initialize_unfilled_to(room);
        let (typ, n) = self.records.open_into(&read.buf[at..at + len], opened)?;
        read.head += len;
        if typ == APPLICATION_DATA && n > 0 && read.messages.is_empty() {
            read.idle_records = 0;
            out.advance(n);
            return Ok(true);
        }
        // Rare (a TLS 1.3 handshake message or alert, an empty record): its content goes
        // where an open in place would have left it, inside the record just read.
        let content = at + HEADER_LEN..at + HEADER_LEN + n;
        read.buf[content.clone()].copy_from_slice(&opened[..n]);
        self.act_on(typ, content).map(|()| false)
    }

    /// Acts on an opened record of type `typ` whose content lies at `content` in the read
    /// buffer.
    fn act_on(&mut self, typ: u8, content: Range<usize>) -> Result<(), Fatal> {
        let read = &mut self.read;
        if typ != APPLICATION_DATA || content.is_empty() {
            read.idle_records += 1;
            if read.idle_records > IDLE_RECORDS_MAX {
                return Err(Fatal::new(
                    UNEXPECTED_MESSAGE,
                    "too many records without data",
                ));
            }
        }
        if typ != HANDSHAKE && !read.messages.is_empty() {
            return Err(Fatal::new(
                UNEXPECTED_MESSAGE,
                "a record between the parts of a handshake message",
            ));
        }
        match typ {
            APPLICATION_DATA => {
                if !content.is_empty() {
                    read.idle_records = 0;
                }
                read.content = content;
                Ok(())
            }
            HANDSHAKE if content.is_empty() => {
                Err(Fatal::new(UNEXPECTED_MESSAGE, "an empty handshake record"))
            }
            HANDSHAKE => {
                read.messages.extend_from_slice(&read.buf[content]);
                self.handle_messages()
            }
            ALERT => match read.buf[content] {
                [_, CLOSE_NOTIFY] => {
                    read.closed = true;
                    Ok(())
                }
                [_, USER_CANCELED] => Ok(()),
                // TLS 1.2's warnings (TLS 1.3 has none but the two above).
                [WARNING, _] if !self.records.is_tls13() => Ok(()),
                [_, description] => Err(Fatal::new(
                    CLOSE_NOTIFY,
                    &format!("alert {description} received"),
                )),
                _ => Err(Fatal::new(DECODE_ERROR, "a malformed alert")),
            },
            other => Err(RecordError::UnexpectedType(other).into()),
        }
    }

    /// Acts on the whole post-handshake messages buffered; a message's parts may span
    /// records.
    fn handle_messages(&mut self) -> Result<(), Fatal> {
        let messages = std::mem::take(&mut self.read.messages);
        let mut rest = &messages[..];
        // Bounded by the messages' bytes: each turn takes one.
        while let [typ, a, b, c, body @ ..] = rest {
            let len = (usize::from(*a) << 16) | (usize::from(*b) << 8) | usize::from(*c);
            let Some((payload, after)) = body.split_at_checked(len) else {
                break;
            };
            match (*typ, &mut self.kernel) {
                (NEW_SESSION_TICKET, Kernel::Client(kernel)) => {
                    kernel
                        .handle_new_session_ticket(payload)
                        .map_err(|e| Fatal::new(DECODE_ERROR, &e.to_string()))?;
                }
                (KEY_UPDATE, kernel) => {
                    let asked = match payload {
                        [0] => false,
                        [1] => true,
                        _ => return Err(Fatal::new(DECODE_ERROR, "a malformed KeyUpdate")),
                    };
                    // A key change must end its record (RFC 8446 §5.1).
                    if !after.is_empty() {
                        return Err(Fatal::new(
                            UNEXPECTED_MESSAGE,
                            "a KeyUpdate not at the end of its record",
                        ));
                    }
                    let keys = kernel
                        .update_rx()
                        .map_err(|e| Fatal::new(UNEXPECTED_MESSAGE, &e.to_string()))?;
                    self.records.set_rx(keys)?;
                    self.write.owe_key_update |= asked;
                }
                // A TLS 1.2 server asking for a renegotiation, which the client may ignore.
                (HELLO_REQUEST, Kernel::Client(_))
                    if payload.is_empty() && !self.records.is_tls13() => {}
                (typ, _) => {
                    return Err(Fatal::new(
                        UNEXPECTED_MESSAGE,
                        &format!("handshake message {typ} past the handshake"),
                    ));
                }
            }
            rest = after;
        }
        if rest.len() > MESSAGE_BYTES_MAX {
            return Err(Fatal::new(DECODE_ERROR, "a handshake message too large"));
        }
        self.read.messages = rest.to_vec();
        Ok(())
    }
}
