//! The connection's stream on its own, as a fetch answer crosses it, through TLS and through
//! plain TCP: the floor a fetch over TLS stands on, measured without brokers, logs or
//! clients around it (`examples/security_targets.rs` prints it). Not part of the API.

use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};

use super::{TlsDialer, TlsServer, broker_name};
use crate::tls::DevCertificates;
use crate::transport::body::Body;
use crate::transport::frame::{Kind, Op, OutFrame, read_frame};

/// The size of the pieces a frame's body is written in (a stored batch each, as a fetch
/// answer's body is).
const PIECE: usize = 64 << 10;

/// Streams `frames` frames of `frame_bytes` bytes one way over loopback, as fetch answers go:
/// the sender writes each frame's header and body (pieces of one shared buffer, as stored
/// batches lie in the log's map) in vectored writes and flushes it; the receiver reads each
/// frame as a client does, its body into a buffer allocated at its size. Through this
/// crate's TLS stream when `certs` names a directory of [`DevCertificates`] (the brokers'
/// server configuration, broker 1's certificate), else through TCP. The time from the first
/// byte written to the last read.
pub async fn stream(
    frames: usize,
    frame_bytes: usize,
    certs: Option<&Path>,
) -> std::io::Result<Duration> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let to = listener.local_addr()?;
    let (accepted, dialed) = tokio::join!(listener.accept(), TcpStream::connect(to));
    let ((accepted, from), dialed) = (accepted?, dialed?);
    let content = Bytes::from(vec![0x5a; frame_bytes]);
    let Some(certs) = certs else {
        return run(accepted, dialed, frames, content).await;
    };
    let setup = |e: super::TlsError| std::io::Error::other(e.to_string());
    let server = TlsServer::new(&DevCertificates::broker_config(certs, 1)).map_err(setup)?;
    let dialer = TlsDialer::presenting(&certs.join("ca.pem"), None, None).map_err(setup)?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let (served, client) = tokio::join!(
        server.accept(accepted, from, deadline),
        dialer.connect(dialed, broker_name(1))
    );
    let (served, _) = served.ok_or_else(|| std::io::Error::other("TLS handshake failed"))?;
    run(served, client?, frames, content).await
}

/// Sends `frames` frames of `content` from `from` and reads them at `to`.
async fn run<W, R>(from: W, mut to: R, frames: usize, content: Bytes) -> std::io::Result<Duration>
where
    W: AsyncWrite + Unpin + Send + 'static,
    R: AsyncRead + Unpin,
{
    let started = Instant::now();
    let sender = tokio::spawn(async move {
        let mut from = from;
        for id in 0..frames as u64 {
            let mut body = Body::default();
            let mut at = 0;
            // Bounded by the content's length: each turn takes a piece.
            while at < content.len() {
                let end = (at + PIECE).min(content.len());
                body.push(content.slice(at..end));
                at = end;
            }
            OutFrame::new(Kind::Response, Op::Fetch, id, body)
                .write_to(&mut from)
                .await?;
        }
        Ok::<_, std::io::Error>(from)
    });
    for _ in 0..frames {
        let frame = read_frame(&mut to, u32::MAX)
            .await
            .map_err(|e| std::io::Error::other(e.to_string()))?
            .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::UnexpectedEof))?;
        std::hint::black_box(frame);
    }
    let elapsed = started.elapsed();
    sender.await.map_err(std::io::Error::other)??;
    Ok(elapsed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn frames_cross_both_streams() {
        let dir = tempfile::tempdir().unwrap();
        DevCertificates::generate(&[1], &["127.0.0.1".to_string()])
            .unwrap()
            .write_to(dir.path())
            .unwrap();
        stream(3, 200_000, Some(dir.path())).await.unwrap();
        stream(3, 200_000, None).await.unwrap();
    }
}
