//! A TLS handshake over a TCP socket, driven through rustls' unbuffered API: rustls says what
//! to send and when it needs more, this does the socket's side. What the handshake leaves
//! ([`Leftovers`]) starts the [`TlsStream`](super::stream::TlsStream).

use rustls::client::{ClientConnectionData, UnbufferedClientConnection};
use rustls::server::{ServerConnectionData, UnbufferedServerConnection};
use rustls::unbuffered::{ConnectionState, EncodeError, UnbufferedStatus};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::record::MAX_RECORD;

/// The most bytes of handshake messages a connection buffers during its handshake (a
/// certificate chain).
const HANDSHAKE_BYTES_MAX: usize = 64 << 10;

pub(super) fn tls_error(e: rustls::Error) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, e)
}

pub(super) fn protocol_error(what: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, format!("TLS: {what}"))
}

/// The unbuffered connection of either side, as the handshake drives it.
pub(super) trait Handshaking {
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
    Fail(rustls::Error),
}

/// What a finished handshake leaves: TLS bytes received past it, application data that came
/// with it, and whether the peer's close_notify came too.
pub(super) struct Leftovers {
    pub(super) received: Vec<u8>,
    pub(super) early: Vec<u8>,
    pub(super) closed: bool,
}

/// Runs `conn`'s handshake over `tcp` until it is done (both sides' Finished exchanged).
pub(super) async fn handshake<C: Handshaking>(
    conn: &mut C,
    tcp: &mut TcpStream,
) -> std::io::Result<Leftovers> {
    let (mut incoming, mut used) = (vec![0u8; 4096], 0usize);
    let (mut outgoing, mut early, mut closed) = (Vec::new(), Vec::new(), false);
    // Bounded: each turn moves the handshake on or reads from the socket, and the caller's
    // deadline bounds the whole.
    loop {
        let UnbufferedStatus { discard, state } = conn.process(&mut incoming[..used]);
        let mut extra_discard = 0;
        let step = match state {
            Err(e) => Step::Fail(e),
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
            // The peer's close_notify right behind its Finished (and perhaps data): the stream
            // starts with its reading side ended.
            Ok(ConnectionState::PeerClosed) => {
                if conn.is_handshaking() {
                    return Err(protocol_error("closed during the handshake"));
                }
                closed = true;
                Step::Again
            }
            Ok(ConnectionState::Closed) => {
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
            // rustls has processed every whole record in `incoming`; a handshake message whose
            // first records came but not its last would be lost here, and its records already
            // opened would fail the stream's first read (closed, never misread). Peers send
            // nothing of the handshake after their Finished but a server's session tickets,
            // each in a record of its own.
            Step::Done => {
                return Ok(Leftovers {
                    received: incoming[..used].to_vec(),
                    early,
                    closed,
                });
            }
            Step::Fail(e) => {
                let _ = tcp.write_all(&outgoing).await;
                send_alert(conn, tcp, &mut incoming[..used]).await;
                return Err(tls_error(e));
            }
        }
    }
}

/// Sends the alert rustls queued on a failed handshake, if it did: the peer learns why.
/// `incoming` is what is left of the received bytes, as rustls expects it back.
async fn send_alert<C: Handshaking>(conn: &mut C, tcp: &mut TcpStream, incoming: &mut [u8]) {
    let mut alert = vec![0u8; 64];
    let written = match conn.process(incoming).state {
        Ok(ConnectionState::EncodeTlsData(mut encode)) => encode.encode(&mut alert).ok(),
        _ => None,
    };
    if let Some(n) = written {
        let _ = tcp.write_all(&alert[..n]).await;
    }
}
