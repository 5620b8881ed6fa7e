//! A TLS connection over a TCP socket, as both of a broker's doors and its peer links use it.
//!
//! rustls' unbuffered API runs the handshake ([`TlsStream::accept`], [`TlsStream::connect`],
//! `handshake.rs`); the connection then turns into rustls' kernel connection, which keeps the
//! traffic secrets (for key updates) and, on a client, takes the session tickets its server
//! sends, while [`Records`] seals and opens the traffic in this stream's own buffers:
//!
//! - Reading, the socket's bytes land in one buffer, and each whole record there is opened
//!   straight into the reader's buffer where that has room for it (the cipher reads the
//!   record once and writes its content where the reader wants it, into room zeroed first
//!   where the reader's buffer is not initialized memory); else, as for a small read, it is
//!   opened where it lies and its content copied out as the reader asks. rustls' buffered
//!   connection copies each record into its deframer and again into a plaintext buffer of its
//!   own, then out to the reader.
//! - Writing, a piece of a write of 4 KiB or more (a stored batch a fetch answer sends from
//!   the log's map, a produced batch) is sealed from where it lies into its records: the
//!   cipher reads it once and writes the record. Smaller pieces (and a long piece's last
//!   bytes, under 4 KiB) are copied together into a record and sealed there. Records wait
//!   in one buffer until the socket takes them (at most [`WRITE_AHEAD`] not yet taken); its
//!   memory is reused without being zeroed again.
//! - Both buffers grow for a stream and are kept while it flows: a connection that has moved
//!   no more than small messages for [`BUFFERS_LINGER`] lets them go ([`Quiet`]).
//!
//! Past the handshake, TLS 1.3 handshake messages are handled (`stream/inbound.rs`): a
//! KeyUpdate moves the receiving side to new keys (and, when the peer asks, the sending side
//! before its next record); a NewSessionTicket goes to rustls. A close_notify alert ends the
//! reading side. Any other fatal alert, a record that fails authentication or breaks the
//! protocol ends the connection: the peer is sent the fatal alert that says why where the
//! socket takes it, and every later read and write returns the same
//! [`std::io::ErrorKind::InvalidData`] error.
//!
//! A socket that ends between records ends the stream as close_notify would: both doors'
//! frames carry their lengths, so an end inside a frame is still told apart (by the frame
//! reader), and one between frames loses nothing the peer sent.

use std::io::IoSlice;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use rustls::client::{ClientConnectionData, UnbufferedClientConnection};
use rustls::kernel::KernelConnection;
use rustls::server::{ServerConnectionData, UnbufferedServerConnection};
use rustls::{ProtocolVersion, SupportedCipherSuite};
use rustls_pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

mod inbound;

use inbound::{CLOSE_NOTIFY, FATAL, Fatal, KEY_UPDATE, WARNING};

use super::handshake::{Leftovers, handshake, tls_error};
use super::record::{
    ALERT, APPLICATION_DATA, HANDSHAKE, HEADER_LEN, MAX_CONTENT, MAX_RECORD, RecordBuf,
    RecordError, Records,
};

/// Bytes of sealed records a connection holds that its socket has not taken yet. A large answer
/// is sealed and written in pieces of this size: big enough that the writer makes few writes
/// and wakes the reader few times, small enough that the reader opens one piece while the next
/// is sealed. It is memory beside the answers only while large answers are written: a buffer
/// grown past [`WRITE_BUFFER_KEPT`] is let go once the connection is quiet ([`Quiet`]).
const WRITE_AHEAD: usize = 1 << 20;

/// The most write buffer a quiet connection keeps ([`BUFFERS_LINGER`]).
const WRITE_BUFFER_KEPT: usize = 64 << 10;

/// The most a connection's read buffer grows to. An empty buffer takes [`READ_BUFFER_MIN`] at
/// its first read; it then grows to hold a whole record when one comes, and doubles after each
/// read that filled the room it was given, whether or not that read ended inside a record: a
/// connection that receives a stream of large records reads many at once. (Growing only when
/// a read left part of a record at its end kept the buffer one record long, since a read of
/// exactly one record leaves nothing over: a stream was read a record, 16 KiB, a read where
/// TCP reads around 1 MiB, and each read's acknowledgement cost the receiver and the sender
/// more than the cipher did: 660,000 reads for 10 GiB streamed through `tls_stream_floor`
/// before, 48,000 since; 1 MiB here read no faster.)
const READ_BUFFER_MAX: usize = 256 << 10;
/// What an empty read buffer takes at its first read.
const READ_BUFFER_MIN: usize = 4 << 10;
/// The most read buffer a quiet connection keeps: two whole records (Kafka's TLS transport
/// holds about as much for each connection's reads all the time). A connection that receives
/// a message of a record or two now and then keeps its buffer; one grown past this for a
/// stream lets it go once it has been quiet for [`BUFFERS_LINGER`] ([`Quiet`]), so an idle
/// connection holds little.
const READ_BUFFER_IDLE: usize = 2 * MAX_RECORD;

/// How long a connection keeps the buffers it grew for a stream (a read buffer past
/// [`READ_BUFFER_IDLE`], a write buffer past [`WRITE_BUFFER_KEPT`]) once it has moved no more
/// than small messages: [`Quiet`]. A stream of fetch answers pauses between answers, its
/// socket dry while the next is made: buffers let go at each pause were allocated and grown
/// again for each answer, and the allocator (glibc's malloc) often handed back memory it had
/// returned to the system, each page faulted in again: a fetch over TLS read a third fewer
/// records a second in such runs.
const BUFFERS_LINGER: std::time::Duration = std::time::Duration::from_secs(1);

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
    quiet: Quiet,
    /// The error that ended the connection, returned again by every later read and write.
    failed: Option<(std::io::ErrorKind, String)>,
}

/// When a connection lets the buffers it grew for a stream go: [`BUFFERS_LINGER`] after the
/// stream's last large read (more than [`READ_BUFFER_IDLE`] at once) or large write (more
/// than [`WRITE_BUFFER_KEPT`]); small messages (a caught-up consumer's empty answers, Raft's
/// heartbeats) do not hold them. The timer is set and checked where the reading side finds
/// its socket dry, and wakes that reader when it runs out; a write that grows the write
/// buffer while no timer is set wakes the reader to set one. A reader that waits elsewhere
/// when woken (a Kafka connection at its in-flight limit) lets go at its next dry read.
#[derive(Default)]
struct Quiet {
    /// Made at the first grown buffer and kept for the connection's life.
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
    /// Whether `timer` counts towards letting go.
    armed: bool,
    /// Whether a large read or write came since the timer was last set.
    busy: bool,
    /// The task that last found the socket dry.
    reader: Option<std::task::Waker>,
}

/// What the reading side holds.
#[derive(Default)]
struct ReadSide {
    /// Bytes from the socket: `head..tail` not yet opened.
    buf: Vec<u8>,
    head: usize,
    tail: usize,
    /// Whether the socket's last read filled the room it was given (more was likely
    /// waiting): the next [`TlsStream::make_room`] doubles the buffer, once.
    filled: bool,
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

impl ReadSide {
    /// A buffer that holds nothing and grew past [`READ_BUFFER_IDLE`] is let go.
    fn let_go_if_idle(&mut self) {
        if self.head == self.tail && self.grown() {
            (self.buf, self.head, self.tail) = (Vec::new(), 0, 0);
        }
    }

    fn grown(&self) -> bool {
        self.buf.len() > READ_BUFFER_IDLE
    }
}

/// What the writing side holds.
#[derive(Default)]
struct WriteSide {
    /// Sealed records; `sent..` not yet taken by the socket.
    buf: RecordBuf,
    sent: usize,
    /// Whether the peer asked for a KeyUpdate this side has not sent yet.
    owe_key_update: bool,
    /// Whether this side sent its last record (close_notify, or a fatal alert).
    closed: bool,
}

impl WriteSide {
    /// A buffer that holds nothing and grew past [`WRITE_BUFFER_KEPT`] is let go.
    fn let_go_if_idle(&mut self) {
        if self.buf.len() == 0 && self.grown() {
            self.buf = RecordBuf::default();
        }
    }

    fn grown(&self) -> bool {
        self.buf.memory() > WRITE_BUFFER_KEPT
    }
}

/// The record protection a finished handshake left: `secrets` in the format of `kernel`'s
/// protocol version, held to its suite's confidentiality limit (records one key may seal).
fn records_for<D>(
    secrets: rustls::ExtractedSecrets,
    kernel: &KernelConnection<D>,
) -> Result<Records, RecordError> {
    let tls13 = kernel.protocol_version() == ProtocolVersion::TLSv1_3;
    let limit = match kernel.negotiated_cipher_suite() {
        SupportedCipherSuite::Tls12(s) => s.common.confidentiality_limit,
        SupportedCipherSuite::Tls13(s) => s.common.confidentiality_limit,
    };
    Records::new(tls13, secrets.tx, secrets.rx, limit)
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
        let records = records_for(secrets, &kernel)?;
        let kernel = Kernel::Server(kernel);
        Ok(TlsStream::new(
            tcp,
            records,
            kernel,
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
        let records = records_for(secrets, &kernel)?;
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
                closed: left.closed,
                ..ReadSide::default()
            },
            write: WriteSide::default(),
            quiet: Quiet::default(),
            failed: None,
        }
    }

    /// Where the socket has nothing to read: sets the timer while a buffer is grown, and
    /// lets the grown buffers go once it runs out ([`Quiet`]).
    fn let_go_when_quiet(&mut self, cx: &mut Context<'_>) {
        let quiet = &mut self.quiet;
        if !quiet
            .reader
            .as_ref()
            .is_some_and(|w| w.will_wake(cx.waker()))
        {
            quiet.reader = Some(cx.waker().clone());
        }
        if !self.read.grown() && !self.write.grown() {
            quiet.armed = false;
            return;
        }
        let set = |timer: &mut Pin<Box<tokio::time::Sleep>>| {
            timer
                .as_mut()
                .reset(tokio::time::Instant::now() + BUFFERS_LINGER);
        };
        let busy = std::mem::take(&mut quiet.busy);
        let timer = quiet
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(BUFFERS_LINGER)));
        if busy || !quiet.armed {
            set(timer);
            quiet.armed = true;
        }
        if timer.as_mut().poll(cx).is_pending() {
            return;
        }
        self.read.let_go_if_idle();
        self.write.let_go_if_idle();
        // A buffer still holding bytes (a record's start, records the socket has not taken)
        // is looked at again a linger later.
        quiet.armed = self.read.grown() || self.write.grown();
        if quiet.armed {
            set(timer);
            let _ = timer.as_mut().poll(cx);
        }
    }

    /// After a write of `taken` bytes: a large one keeps the grown buffers; a write buffer
    /// grown while no timer is set wakes the reader to set one.
    fn note_write(&mut self, taken: usize) {
        self.quiet.busy |= taken > WRITE_BUFFER_KEPT;
        if self.write.grown()
            && !self.quiet.armed
            && let Some(reader) = self.quiet.reader.take()
        {
            reader.wake();
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

    /// The error that ended the connection, again.
    fn failure(&self) -> Option<std::io::Error> {
        let (kind, what) = self.failed.as_ref()?;
        Some(std::io::Error::new(*kind, what.clone()))
    }

    /// Ends the connection on `fatal`: its alert sealed for the peer (unless this side already
    /// sent its last record) and written where the socket takes it now, and its error kept.
    fn fail(&mut self, cx: &mut Context<'_>, fatal: Fatal) -> std::io::Error {
        if !self.write.closed {
            self.write.closed = true;
            let sealed = self.records.seal(ALERT, &mut self.write.buf, |out| {
                out.extend_from_slice(&[FATAL, fatal.alert]);
            });
            if sealed.is_ok() {
                let _ = self.push(cx, 0);
            }
        }
        self.failed = Some((fatal.error.kind(), fatal.error.to_string()));
        fatal.error
    }

    /// Makes room in the read buffer for the rest of a record of `need` bytes (its header
    /// only, if its length is not known yet): [`READ_BUFFER_MIN`] if it has none, and twice
    /// as much (up to [`READ_BUFFER_MAX`]) if the last read filled it.
    fn make_room(&mut self, need: usize) {
        let read = &mut self.read;
        if read.head == read.tail {
            (read.head, read.tail) = (0, 0);
        } else if read.buf.len() - read.head < need.max(read.buf.len() / 2) {
            read.buf.copy_within(read.head..read.tail, 0);
            (read.tail, read.head) = (read.tail - read.head, 0);
        }
        // Once for each read that filled its room: a socket polled again after it had nothing
        // finds the flag taken.
        let grown = if read.buf.is_empty() {
            READ_BUFFER_MIN
        } else if std::mem::take(&mut read.filled) {
            (read.buf.len() * 2).min(READ_BUFFER_MAX)
        } else {
            0
        };
        // A record's whole length (at most `MAX_RECORD`) always fits past `head`: the read
        // below never gets an empty slice.
        let wanted = grown.max(read.head + need);
        if wanted > read.buf.len() {
            read.buf.resize(wanted, 0);
        }
    }

    /// Writes sealed records to the socket until at most `keep` bytes of them wait.
    fn push(&mut self, cx: &mut Context<'_>, keep: usize) -> Poll<std::io::Result<()>> {
        let write = &mut self.write;
        // Bounded: each turn the socket takes bytes or the call returns.
        while write.buf.len() - write.sent > keep {
            let n =
                ready!(Pin::new(&mut self.tcp).poll_write(cx, &write.buf.bytes()[write.sent..]))?;
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

    /// Seals up to [`WRITE_AHEAD`] bytes' worth of `bufs` (`total` bytes in all) as records
    /// behind what the socket has not taken yet: how many bytes.
    fn seal_from(&mut self, bufs: &[IoSlice<'_>], total: usize) -> std::io::Result<usize> {
        let write = &mut self.write;
        // What the socket took goes first, so that the buffer holds at most `WRITE_AHEAD`
        // not taken, plus as much taken, plus a record.
        if write.sent >= WRITE_AHEAD {
            write.buf.consume(write.sent);
            write.sent = 0;
        }
        let room = WRITE_AHEAD - (write.buf.len() - write.sent).min(WRITE_AHEAD);
        let want = total.min(room);
        // What this call may add: `want` bytes of content in records (full ones, a key update,
        // and around each piece sealed where it lies, 4 KiB or more each, at most two short
        // ones: the piece's tail and the small pieces before it), and where more is given than
        // the write-ahead lets in, the record that crosses it. Reserved at once, the buffer
        // never grows by doubling.
        let records = want.div_ceil(MAX_CONTENT) + 1 + 2 * (want / SEALED_WHERE_IT_LIES + 1);
        let crossing = if total > want { MAX_RECORD } else { 0 };
        write
            .buf
            .reserve(want + records * RECORD_OVERHEAD + crossing);
        let mut taken = 0;
        let mut content = Pieces::new(bufs);
        // Bounded: each turn seals up to a record's worth of `bufs`.
        while taken < total && self.write.buf.len() - self.write.sent < WRITE_AHEAD {
            if let Err(e) = self.renew_keys_if_due() {
                return if taken > 0 { Ok(taken) } else { Err(e) };
            }
            let next = content.next_piece();
            let sealed = if next.len() >= SEALED_WHERE_IT_LIES {
                let n = next.len().min(MAX_CONTENT);
                self.records
                    .seal_slice(APPLICATION_DATA, &mut self.write.buf, &next[..n])
                    .map(|()| n)
            } else {
                let mut n = 0;
                self.records
                    .seal(APPLICATION_DATA, &mut self.write.buf, |out| {
                        n = content.gather(out);
                    })
                    .map(|()| n)
            };
            match sealed {
                Ok(n) => {
                    taken += n;
                    content.advance(n);
                }
                Err(_) if taken > 0 => return Ok(taken),
                Err(e) => return Err(e.into()),
            }
        }
        Ok(taken)
    }
}

/// The most bytes a sealed record takes beyond its content: header, TLS 1.2's explicit nonce
/// (or TLS 1.3's inner type) and tag.
const RECORD_OVERHEAD: usize = HEADER_LEN + 8 + 16;

/// A piece of a write at least this long is sealed from where it lies, in records of its own
/// ([`Records::seal_slice`]): a stored batch a fetch answer sends from the log's map, a
/// produced batch. Shorter pieces (frame and answer headers, small batches), and a long
/// piece's last bytes when fewer than this are left, are copied together into records, where
/// a record of each would cost more than the copy.
const SEALED_WHERE_IT_LIES: usize = 4 << 10;

/// The bytes of a vectored write not sealed yet: the slices from `index`, the first from
/// `offset`.
struct Pieces<'a, 'b> {
    bufs: &'a [IoSlice<'b>],
    index: usize,
    offset: usize,
}

impl<'a, 'b> Pieces<'a, 'b> {
    fn new(bufs: &'a [IoSlice<'b>]) -> Self {
        Pieces {
            bufs,
            index: 0,
            offset: 0,
        }
    }

    /// The rest of the slice the next bytes are in (empty at the end).
    fn next_piece(&mut self) -> &'a [u8] {
        // Bounded by the slices: each turn passes an empty one.
        while let Some(buf) = self.bufs.get(self.index) {
            if self.offset < buf.len() {
                let bufs: &'a [IoSlice<'b>] = self.bufs;
                return &bufs[self.index][self.offset..];
            }
            (self.index, self.offset) = (self.index + 1, 0);
        }
        &[]
    }

    /// Moves past `n` bytes.
    fn advance(&mut self, mut n: usize) {
        // Bounded by the slices: each turn passes one or ends.
        while let Some(buf) = self.bufs.get(self.index) {
            let left = buf.len() - self.offset;
            if n < left {
                self.offset += n;
                return;
            }
            n -= left;
            (self.index, self.offset) = (self.index + 1, 0);
        }
    }

    /// Appends to `out` the next bytes, up to a record's content, ending before a slice that
    /// is sealed where it lies: how many. The bytes stay unread until [`Pieces::advance`].
    fn gather(&self, out: &mut RecordBuf) -> usize {
        let mut taken = 0;
        let mut offset = self.offset;
        for buf in self.bufs.iter().skip(self.index) {
            let piece = &buf[offset.min(buf.len())..];
            if taken > 0 && piece.len() >= SEALED_WHERE_IT_LIES {
                break;
            }
            offset = 0;
            let n = piece.len().min(MAX_CONTENT - taken);
            out.extend_from_slice(&piece[..n]);
            taken += n;
            if taken == MAX_CONTENT {
                break;
            }
        }
        taken
    }
}

impl AsyncRead for TlsStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        if let Some(e) = this.failure() {
            return Poll::Ready(Err(e));
        }
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
                if read.early_read == read.early.len() {
                    (read.early, read.early_read) = (Vec::new(), 0);
                }
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
                Some(Ok(len)) if read.tail - read.head >= len => {
                    match this.open_next_into(len, buf) {
                        Ok(got) => {
                            delivered |= got;
                            continue;
                        }
                        Err(fatal) => {
                            let e = this.fail(cx, fatal);
                            // What was read before it is the caller's; the error comes next.
                            return Poll::Ready(if delivered { Ok(()) } else { Err(e) });
                        }
                    }
                }
                Some(Ok(len)) => len,
                None => HEADER_LEN,
                Some(Err(e)) => {
                    let e = this.fail(cx, e.into());
                    return Poll::Ready(if delivered { Ok(()) } else { Err(e) });
                }
            };
            if delivered {
                return Poll::Ready(Ok(()));
            }
            this.make_room(need.min(MAX_RECORD));
            let read = &mut this.read;
            let mut into = ReadBuf::new(&mut read.buf[read.tail..]);
            let polled = Pin::new(&mut this.tcp).poll_read(cx, &mut into);
            let (n, room) = (into.filled().len(), into.capacity());
            let Poll::Ready(result) = polled else {
                this.let_go_when_quiet(cx);
                return Poll::Pending;
            };
            result?;
            read.filled = n == room;
            this.quiet.busy |= n > READ_BUFFER_IDLE;
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
        if let Some(e) = this.failure() {
            return Poll::Ready(Err(e));
        }
        if this.write.closed {
            return Poll::Ready(Err(std::io::ErrorKind::BrokenPipe.into()));
        }
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        if total == 0 {
            return Poll::Ready(Ok(0));
        }
        ready!(this.push(cx, WRITE_AHEAD - 1))?;
        let taken = this.seal_from(bufs, total)?;
        this.note_write(taken);
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
        Pin::new(&mut this.tcp).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        if !this.write.closed {
            this.write.closed = true;
            this.records.seal(ALERT, &mut this.write.buf, |out| {
                out.extend_from_slice(&[WARNING, CLOSE_NOTIFY]);
            })?;
        }
        ready!(this.push(cx, 0))?;
        Pin::new(&mut this.tcp).poll_shutdown(cx)
    }
}

#[cfg(test)]
#[path = "stream_tests.rs"]
mod tests;
