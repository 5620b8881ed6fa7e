//! `replog node --metrics-listen HOST:PORT`: the library's metrics (see the crate's `metrics`
//! module for the list) recorded by `metrics-exporter-prometheus` and served in Prometheus'
//! text format at `GET /metrics` (any path answers the same), one short HTTP/1.1 exchange per
//! connection.
//!
//! The listener faces the network, so it holds to limits: at most [`SCRAPERS_MAX`]
//! connections at once (more wait in the accept queue), a request head of at most
//! [`HEAD_BYTES_MAX`] read within [`HEAD_TIMEOUT`], and anything but a `GET` answered `405`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use metrics_util::MetricKindMask;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::error::CliError;

/// Scrape connections served at once.
const SCRAPERS_MAX: usize = 16;

/// Longest request head read.
const HEAD_BYTES_MAX: usize = 8 << 10;

/// How long a scraper has to send its request head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(5);

/// A gauge or counter not set for this long (a partition moved away, a group gone) leaves the
/// scrape.
const IDLE: Duration = Duration::from_secs(60);

/// Installs the Prometheus recorder and serves it on `addr` until the process ends.
pub(crate) async fn serve(addr: SocketAddr) -> Result<SocketAddr, CliError> {
    let handle = PrometheusBuilder::new()
        .idle_timeout(MetricKindMask::ALL, Some(IDLE))
        .set_buckets(&[
            0.000_1, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
            5.0, 10.0, 30.0, 60.0,
        ])
        .map_err(|e| CliError::Metrics(e.to_string()))?
        .install_recorder()
        .map_err(|e| CliError::Metrics(e.to_string()))?;
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| CliError::Metrics(format!("cannot listen on {addr}: {e}")))?;
    let local = listener
        .local_addr()
        .map_err(|e| CliError::Metrics(e.to_string()))?;
    let slots = Arc::new(tokio::sync::Semaphore::new(SCRAPERS_MAX));
    let upkeep = handle.clone();
    tokio::spawn(async move {
        // Ends with the process.
        loop {
            tokio::time::sleep(Duration::from_secs(5)).await;
            upkeep.run_upkeep();
        }
    });
    tokio::spawn(async move {
        // Ends with the process.
        loop {
            let Ok(permit) = Arc::clone(&slots).acquire_owned().await else {
                return;
            };
            let Ok((stream, _)) = listener.accept().await else {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            };
            let handle = handle.clone();
            tokio::spawn(async move {
                let _permit = permit;
                if let Err(e) = answer(stream, &handle).await {
                    tracing::debug!(error = %e, "a metrics scrape failed");
                }
            });
        }
    });
    Ok(local)
}

/// Reads one request head and answers it.
async fn answer(mut stream: TcpStream, handle: &PrometheusHandle) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(1024);
    let read = tokio::time::timeout(HEAD_TIMEOUT, async {
        let mut buf = [0u8; 1024];
        // Bounded by HEAD_BYTES_MAX.
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            if head.len() >= HEAD_BYTES_MAX {
                return Err(std::io::Error::other("request head too long"));
            }
            let n = stream.read(&mut buf).await?;
            if n == 0 {
                return Err(std::io::Error::other(
                    "closed before its request head ended",
                ));
            }
            head.extend_from_slice(&buf[..n]);
        }
        Ok(())
    })
    .await;
    match read {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(e),
        Err(_) => return Err(std::io::Error::other("request head not sent in time")),
    }
    let (status, body) = if head.starts_with(b"GET ") {
        ("200 OK", handle.render())
    } else {
        (
            "405 Method Not Allowed",
            String::from("only GET is served\n"),
        )
    };
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    tokio::time::timeout(HEAD_TIMEOUT, stream.write_all(response.as_bytes()))
        .await
        .map_err(|_| std::io::Error::other("scraper did not read its answer in time"))??;
    stream.shutdown().await
}
