//! A TLS connection over a TCP socket, as both of a broker's doors and its peer links use it.
//!
//! rustls' unbuffered API runs the handshake ([`TlsStream::accept`], [`TlsStream::connect`]);
//! the connection then turns into rustls' kernel connection, which keeps the traffic secrets
//! (for key updates) and, on a client, takes the session tickets its server sends, while
//! [`Records`] seals and opens the traffic in this stream's own buffers:
//!
//! - Reading, the socket's bytes land in one buffer and each record is opened where it lies;
//!   a read copies the content out of it once. rustls' buffered connection copies each record
//!   into its deframer and again into a plaintext buffer of its own before that.
//! - Writing, the content is copied once, into the record that seals it in place; records
//!   wait in one buffer until the socket takes them (up to [`WRITE_AHEAD`] sealed ahead).
//!
//! Past the handshake, TLS 1.3 handshake messages are handled here: a KeyUpdate moves the
//! receiving side to new keys (and, when the peer asks, the sending side before its next
//! record); a NewSessionTicket goes to rustls. A close_notify alert ends the reading side;
//! any other alert, a record that fails authentication or breaks the protocol ends the
//! connection with an [`std::io::ErrorKind::InvalidData`] error.

use std::io::IoSlice;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use rustls::client::{ClientConnectionData, UnbufferedClientConnection};
use rustls::kernel::KernelConnection;
use rustls::server::{ServerConnectionData, UnbufferedServerConnection};
use rustls::unbuffered::{ConnectionState, EncodeError, UnbufferedStatus};
use rustls::{ProtocolVersion, SupportedCipherSuite};
use rustls_pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;

use super::record::{
    ALERT, APPLICATION_DATA, HANDSHAKE, HEADER_LEN, MAX_CONTENT, MAX_RECORD, RecordError, Records,
};

/// Bytes of sealed records a connection holds ahead of what its socket took. A large answer is
/// sealed and written in pieces of this size: big enough that the writer makes few writes and
/// wakes the reader few times, small enough that the reader opens one piece while the next is
/// sealed. It is memory beside the answer only while a large answer is written: a flush that
/// empties a buffer grown past [`WRITE_BUFFER_KEPT`] lets it go.
const WRITE_AHEAD: usize = 1 << 20;

/// The most write buffer a connection keeps between its flushes.
const WRITE_BUFFER_KEPT: usize = 64 << 10;

/// The most a connection's read buffer grows to. It starts empty, takes [`READ_BUFFER_MIN`] at
/// the first read, then grows to hold a whole record when one comes, and further (doubling)
/// while reads keep filling it: a connection that receives a stream of large records reads
/// several at once, an idle one holds little.
const READ_BUFFER_MAX: usize = 64 << 10;
const READ_BUFFER_MIN: usize = 4 << 10;

/// The most bytes of handshake messages a connection buffers: during its handshake (a
/// certificate chain), and after it, a post-handshake message not yet whole.
const HANDSHAKE_BYTES_MAX: usize = 64 << 10;

/// Records in a row that carry nothing for the application (empty ones, key updates) before the
/// peer is taken for one wasting the connection's work.
const IDLE_RECORDS_MAX: u32 = 32;

/// Handshake message types handled past the handshake.
const NEW_SESSION_TICKET: u8 = 4;
const KEY_UPDATE: u8 = 24;
/// Alert descriptions.
const CLOSE_NOTIFY: u8 = 0;
const USER_CANCELED: u8 = 90;

/// rustls' side of an established connection.
enum Kernel {
    Client(KernelConnection<ClientConnectionData>),
    Server(KernelConnection<ServerConnectionData>),
}

impl Kernel {
    fn update_tx(&mut self) -> Result<(u64, rustls::ConnectionTrafficSecrets), rustls::Error> {
        match self {
            Kernel::Client(k) => k.update_tx_secret(),
            Kernel::Server(k) => k.update_tx_secret(),
        }
    }

    fn update_rx(&mut self) -> Result<(u64, rustls::ConnectionTrafficSecrets), rustls::Error> {
        match self {
            Kernel::Client(k) => k.update_rx_secret(),
            Kernel::Server(k) => k.update_rx_secret(),
        }
    }
}

/// An established TLS connection.
pub(crate) struct TlsStream {
    tcp: TcpStream,
    records: Records,
    kernel: Kernel,
    peer_certificates: Option<Vec<CertificateDer<'static>>>,
    read: ReadSide,
    write: WriteSide,
}

/// What the reading side holds.
#[derive(Default)]
struct ReadSide {
    /// Bytes from the socket: `head..tail` not yet opened.
    buf: Vec<u8>,
    head: usize,
    tail: usize,
    /// Content opened and not yet read, in `buf`.
    content: std::ops::Range<usize>,
    /// Application data that came with the handshake, and how much of it was read.
    early: Vec<u8>,
    early_read: usize,
    /// Post-handshake handshake messages not yet whole.
    messages: Vec<u8>,
    /// Whether the peer sent close_notify.
    closed: bool,
    /// Records in a row without application data.
    idle_records: u32,
}

/// What the writing side holds.
#[derive(Default)]
struct WriteSide {
    /// Sealed records; `sent..` not yet taken by the socket.
    buf: Vec<u8>,
    sent: usize,
    /// Whether the peer asked for a KeyUpdate this side has not sent yet.
    owe_key_update: bool,
    /// Whether this side sent close_notify.
    closed: bool,
}

fn tls_error(e: rustls::Error) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, e)
}

fn protocol_error(what: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, format!("TLS: {what}"))
}

/// The unbuffered connection of either side, as the handshake drives it.
trait Handshaking {
    type Data;
    fn process<'c, 'i>(
        &'c mut self,
        incoming: &'i mut [u8],
    ) -> UnbufferedStatus<'c, 'i, Self::Data>;
    fn is_handshaking(&self) -> bool;
}

impl Handshaking for UnbufferedServerConnection {
    type Data = ServerConnectionData;
    fn process<'c, 'i>(
        &'c mut self,
        incoming: &'i mut [u8],
    ) -> UnbufferedStatus<'c, 'i, Self::Data> {
        self.process_tls_records(incoming)
    }
    fn is_handshaking(&self) -> bool {
        rustls::CommonState::is_handshaking(self)
    }
}

impl Handshaking for UnbufferedClientConnection {
    type Data = ClientConnectionData;
    fn process<'c, 'i>(
        &'c mut self,
        incoming: &'i mut [u8],
    ) -> UnbufferedStatus<'c, 'i, Self::Data> {
        self.process_tls_records(incoming)
    }
    fn is_handshaking(&self) -> bool {
        rustls::CommonState::is_handshaking(self)
    }
}

/// What the handshake does next, once rustls' state is let go.
enum Step {
    Again,
    Transmit,
    Receive,
    Done,
}

/// What a finished handshake leaves: TLS bytes received past it, and application data that
/// came with it.
struct Leftovers {
    received: Vec<u8>,
    early: Vec<u8>,
}

/// Runs `conn`'s handshake over `tcp` until it is done (both sides' Finished exchanged).
async fn handshake<C: Handshaking>(
    conn: &mut C,
    tcp: &mut TcpStream,
) -> std::io::Result<Leftovers> {
    let (mut incoming, mut used) = (vec![0u8; 4096], 0usize);
    let (mut outgoing, mut early) = (Vec::new(), Vec::new());
    // Bounded: each turn moves the handshake on or reads from the socket, and the caller's
    // deadline bounds the whole.
    loop {
        let UnbufferedStatus { discard, state } = conn.process(&mut incoming[..used]);
        let mut extra_discard = 0;
        let step = match state {
            Err(e) => {
                let _ = tcp.write_all(&outgoing).await;
                send_alert(conn, tcp).await;
                return Err(tls_error(e));
            }
            Ok(ConnectionState::EncodeTlsData(mut encode)) => {
                let at = outgoing.len();
                outgoing.resize(at + MAX_RECORD, 0);
                let written = loop {
                    match encode.encode(&mut outgoing[at..]) {
                        Ok(n) => break n,
                        Err(EncodeError::InsufficientSize(s)) => {
                            outgoing.resize(at + s.required_size, 0);
                        }
                        Err(e) => return Err(protocol_error(&e.to_string())),
                    }
                };
                outgoing.truncate(at + written);
                Step::Again
            }
            Ok(ConnectionState::TransmitTlsData(transmit)) => {
                transmit.done();
                Step::Transmit
            }
            Ok(ConnectionState::BlockedHandshake) => Step::Receive,
            Ok(ConnectionState::ReadTraffic(mut traffic)) => {
                while let Some(record) = traffic.next_record() {
                    let record = record.map_err(tls_error)?;
                    extra_discard += record.discard;
                    early.extend_from_slice(record.payload);
                }
                Step::Again
            }
            Ok(ConnectionState::WriteTraffic(_)) => {
                // May send, but the peer's Finished is still to come (a server's 0.5-RTT).
                if conn.is_handshaking() {
                    Step::Receive
                } else {
                    Step::Done
                }
            }
            Ok(ConnectionState::PeerClosed | ConnectionState::Closed) => {
                return Err(protocol_error("closed during the handshake"));
            }
            Ok(other) => return Err(protocol_error(&format!("unexpected state {other:?}"))),
        };
        let discard = discard + extra_discard;
        incoming.copy_within(discard..used, 0);
        used -= discard;
        match step {
            Step::Again => {}
            Step::Transmit => {
                tcp.write_all(&outgoing).await?;
                outgoing.clear();
            }
            Step::Receive => {
                if used == incoming.len() {
                    if incoming.len() >= HANDSHAKE_BYTES_MAX + MAX_RECORD {
                        return Err(protocol_error("handshake message too large"));
                    }
                    incoming.resize(incoming.len() * 2, 0);
                }
                let n = tcp.read(&mut incoming[used..]).await?;
                if n == 0 {
                    return Err(std::io::ErrorKind::UnexpectedEof.into());
                }
                used += n;
            }
            Step::Done => {
                return Ok(Leftovers {
                    received: incoming[..used].to_vec(),
                    early,
                });
            }
        }
    }
}

/// Sends the alert rustls queued on a failed handshake, if it did: the peer learns why.
async fn send_alert<C: Handshaking>(conn: &mut C, tcp: &mut TcpStream) {
    let mut alert = vec![0u8; 64];
    let written = match conn.process(&mut []).state {
        Ok(ConnectionState::EncodeTlsData(mut encode)) => encode.encode(&mut alert).ok(),
        _ => None,
    };
    if let Some(n) = written {
        let _ = tcp.write_all(&alert[..n]).await;
    }
}

/// The suite's confidentiality limit: records one key may seal.
fn limit(suite: SupportedCipherSuite) -> u64 {
    match suite {
        SupportedCipherSuite::Tls12(s) => s.common.confidentiality_limit,
        SupportedCipherSuite::Tls13(s) => s.common.confidentiality_limit,
    }
}

impl TlsStream {
    /// The server's side of a handshake on `tcp` with `config`.
    pub(crate) async fn accept(
        mut tcp: TcpStream,
        config: Arc<rustls::ServerConfig>,
    ) -> std::io::Result<TlsStream> {
        let mut conn = UnbufferedServerConnection::new(config).map_err(tls_error)?;
        let left = handshake(&mut conn, &mut tcp).await?;
        let peer_certificates = conn.peer_certificates().map(<[_]>::to_vec);
        let (secrets, kernel) = conn.dangerous_into_kernel_connection().map_err(tls_error)?;
        let tls13 = kernel.protocol_version() == ProtocolVersion::TLSv1_3;
        let limit = limit(kernel.negotiated_cipher_suite());
        let records = Records::new(tls13, secrets.tx, secrets.rx, limit)?;
        Ok(TlsStream::new(
            tcp,
            records,
            Kernel::Server(kernel),
            peer_certificates,
            left,
        ))
    }

    /// The client's side of a handshake on `tcp` with `config`, expecting a certificate that
    /// names `name`.
    pub(crate) async fn connect(
        mut tcp: TcpStream,
        config: Arc<rustls::ClientConfig>,
        name: ServerName<'static>,
    ) -> std::io::Result<TlsStream> {
        let mut conn = UnbufferedClientConnection::new(config, name).map_err(tls_error)?;
        let left = handshake(&mut conn, &mut tcp).await?;
        let (secrets, kernel) = conn.dangerous_into_kernel_connection().map_err(tls_error)?;
        let tls13 = kernel.protocol_version() == ProtocolVersion::TLSv1_3;
        let limit = limit(kernel.negotiated_cipher_suite());
        let records = Records::new(tls13, secrets.tx, secrets.rx, limit)?;
        Ok(TlsStream::new(
            tcp,
            records,
            Kernel::Client(kernel),
            None,
            left,
        ))
    }

    fn new(
        tcp: TcpStream,
        records: Records,
        kernel: Kernel,
        peer_certificates: Option<Vec<CertificateDer<'static>>>,
        left: Leftovers,
    ) -> TlsStream {
        let tail = left.received.len();
        TlsStream {
            tcp,
            records,
            kernel,
            peer_certificates,
            read: ReadSide {
                buf: left.received,
                tail,
                early: left.early,
                ..ReadSide::default()
            },
            write: WriteSide::default(),
        }
    }

    /// The certificate chain the peer presented, if it was asked for one and did.
    pub(crate) fn peer_certificates(&self) -> Option<&[CertificateDer<'static>]> {
        self.peer_certificates.as_deref()
    }

    /// Test-only: seal with new keys after every `records` records.
    #[cfg(test)]
    pub(crate) fn set_key_limit(&mut self, records: u64) {
        self.records.set_limit(records);
    }

    /// Opens the record of `len` bytes at the read buffer's head and acts on it.
    fn open_next(&mut self, len: usize) -> std::io::Result<()> {
        let read = &mut self.read;
        let at = read.head;
        let (typ, range) = self.records.open(&mut read.buf[at..at + len])?;
        read.head += len;
        let content = at + range.start..at + range.end;
        if typ != APPLICATION_DATA || content.is_empty() {
            read.idle_records += 1;
            if read.idle_records > IDLE_RECORDS_MAX {
                return Err(protocol_error("too many records without data in a row"));
            }
        }
        match typ {
            APPLICATION_DATA if !read.messages.is_empty() => Err(protocol_error(
                "data between the parts of a handshake message",
            )),
            APPLICATION_DATA => {
                if !content.is_empty() {
                    read.idle_records = 0;
                }
                read.content = content;
                Ok(())
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
                [_, description] => Err(protocol_error(&format!("alert {description} received"))),
                _ => Err(protocol_error("malformed alert")),
            },
            other => Err(RecordError::UnexpectedType(other).into()),
        }
    }

    /// Acts on the whole post-handshake messages buffered; a message's parts may span
    /// records.
    fn handle_messages(&mut self) -> std::io::Result<()> {
        let messages = std::mem::take(&mut self.read.messages);
        let mut rest = &messages[..];
        // Bounded by the messages' bytes: each turn takes one.
        while let [typ, a, b, c, body @ ..] = rest {
            let len = usize::from(*a) << 16 | usize::from(*b) << 8 | usize::from(*c);
            let Some((payload, after)) = body.split_at_checked(len) else {
                break;
            };
            match (*typ, &mut self.kernel) {
                (NEW_SESSION_TICKET, Kernel::Client(kernel)) => {
                    kernel
                        .handle_new_session_ticket(payload)
                        .map_err(tls_error)?;
                }
                (KEY_UPDATE, kernel) => {
                    // A key change must end its record (RFC 8446 §5.1).
                    let asked = match payload {
                        [0] => false,
                        [1] => true,
                        _ => return Err(protocol_error("malformed KeyUpdate")),
                    };
                    if !after.is_empty() {
                        return Err(protocol_error("KeyUpdate not at the end of its record"));
                    }
                    self.records
                        .set_rx(kernel.update_rx().map_err(tls_error)?)?;
                    self.write.owe_key_update |= asked;
                }
                (typ, _) => {
                    return Err(protocol_error(&format!(
                        "handshake message {typ} past the handshake"
                    )));
                }
            }
            rest = after;
        }
        if rest.len() > HANDSHAKE_BYTES_MAX {
            return Err(protocol_error("handshake message too large"));
        }
        self.read.messages = rest.to_vec();
        Ok(())
    }

    /// Makes room in the read buffer for the rest of a record of `need` bytes (its header
    /// only, if its length is not known yet), and more where reads keep filling it.
    fn make_room(&mut self, need: usize) {
        let read = &mut self.read;
        if read.head == read.tail {
            (read.head, read.tail) = (0, 0);
        } else if read.buf.len() - read.head < need.max(read.buf.len() / 2) {
            read.buf.copy_within(read.head..read.tail, 0);
            (read.tail, read.head) = (read.tail - read.head, 0);
        }
        let wanted = if read.tail == read.buf.len() {
            (read.buf.len() * 2).clamp(READ_BUFFER_MIN, READ_BUFFER_MAX)
        } else {
            0
        };
        let wanted = wanted.max(read.head + need);
        if wanted > read.buf.len() {
            read.buf.resize(wanted, 0);
        }
    }

    /// Writes sealed records to the socket until at most `keep` bytes of them wait.
    fn push(&mut self, cx: &mut Context<'_>, keep: usize) -> Poll<std::io::Result<()>> {
        let write = &mut self.write;
        // Bounded: each turn the socket takes bytes or the call returns.
        while write.buf.len() - write.sent > keep {
            let n = ready!(Pin::new(&mut self.tcp).poll_write(cx, &write.buf[write.sent..]))?;
            if n == 0 {
                return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into()));
            }
            write.sent += n;
        }
        if write.sent == write.buf.len() {
            write.buf.clear();
            write.sent = 0;
        }
        Poll::Ready(Ok(()))
    }

    /// Before sealing data: moves to new sending keys where the peer asked for it or the old
    /// ones are used up (TLS 1.3's KeyUpdate, sealed with the old keys, announces it).
    fn renew_keys_if_due(&mut self) -> std::io::Result<()> {
        if !self.write.owe_key_update && !self.records.needs_new_keys() {
            return Ok(());
        }
        if !self.records.is_tls13() {
            return Err(RecordError::KeysUsedUp.into());
        }
        self.records.seal(HANDSHAKE, &mut self.write.buf, |out| {
            out.extend_from_slice(&[KEY_UPDATE, 0, 0, 1, 0]);
        })?;
        self.records
            .set_tx(self.kernel.update_tx().map_err(tls_error)?)?;
        self.write.owe_key_update = false;
        Ok(())
    }
}

/// Appends to `out` up to `max` bytes of `bufs`, skipping their first `from`: how many.
fn gather(bufs: &[IoSlice<'_>], mut from: usize, max: usize, out: &mut Vec<u8>) -> usize {
    let mut taken = 0;
    for buf in bufs {
        if from >= buf.len() {
            from -= buf.len();
            continue;
        }
        let piece = &buf[from..];
        from = 0;
        let n = piece.len().min(max - taken);
        out.extend_from_slice(&piece[..n]);
        taken += n;
        if taken == max {
            break;
        }
    }
    taken
}

impl AsyncRead for TlsStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let mut delivered = false;
        // Bounded: each turn delivers content, opens a record or reads from the socket, and
        // returns once `buf` is full or nothing more is there without waiting.
        loop {
            let read = &mut this.read;
            if buf.remaining() == 0 {
                return Poll::Ready(Ok(()));
            }
            if read.early_read < read.early.len() {
                let n = buf.remaining().min(read.early.len() - read.early_read);
                buf.put_slice(&read.early[read.early_read..read.early_read + n]);
                read.early_read += n;
                delivered = true;
                continue;
            }
            if !read.content.is_empty() {
                let n = buf.remaining().min(read.content.len());
                buf.put_slice(&read.buf[read.content.start..read.content.start + n]);
                read.content.start += n;
                delivered = true;
                continue;
            }
            if read.closed {
                return Poll::Ready(Ok(()));
            }
            let need = match this.records.record_len(&read.buf[read.head..read.tail]) {
                Some(Err(e)) => return Poll::Ready(Err(e.into())),
                Some(Ok(len)) if read.tail - read.head >= len => {
                    this.open_next(len)?;
                    continue;
                }
                Some(Ok(len)) => len,
                None => HEADER_LEN,
            };
            if delivered {
                return Poll::Ready(Ok(()));
            }
            this.make_room(need);
            let read = &mut this.read;
            let mut into = ReadBuf::new(&mut read.buf[read.tail..]);
            ready!(Pin::new(&mut this.tcp).poll_read(cx, &mut into))?;
            let n = into.filled().len();
            if n == 0 {
                return Poll::Ready(if read.head == read.tail {
                    Ok(())
                } else {
                    Err(std::io::ErrorKind::UnexpectedEof.into())
                });
            }
            read.tail += n;
        }
    }
}

impl AsyncWrite for TlsStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.poll_write_vectored(cx, &[IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        if total == 0 {
            return Poll::Ready(Ok(0));
        }
        ready!(this.push(cx, WRITE_AHEAD - 1))?;
        let mut taken = 0;
        // Bounded: each turn seals up to a record's worth of `bufs`.
        while taken < total && this.write.buf.len() - this.write.sent < WRITE_AHEAD {
            this.renew_keys_if_due()?;
            let mut n = 0;
            this.records
                .seal(APPLICATION_DATA, &mut this.write.buf, |out| {
                    n = gather(bufs, taken, MAX_CONTENT, out);
                })?;
            taken += n;
        }
        // What the socket takes now goes at once; the rest waits for the next write or a
        // flush.
        if let Poll::Ready(Err(e)) = this.push(cx, 0) {
            return Poll::Ready(Err(e));
        }
        Poll::Ready(Ok(taken))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        ready!(this.push(cx, 0))?;
        if this.write.buf.capacity() > WRITE_BUFFER_KEPT {
            this.write.buf = Vec::new();
        }
        Pin::new(&mut this.tcp).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        if !this.write.closed {
            this.write.closed = true;
            this.records.seal(ALERT, &mut this.write.buf, |out| {
                out.extend_from_slice(&[1, CLOSE_NOTIFY]);
            })?;
        }
        ready!(this.push(cx, 0))?;
        Pin::new(&mut this.tcp).poll_shutdown(cx)
    }
}

#[cfg(test)]
#[path = "stream_tests.rs"]
mod tests;
