//! Unit tests of `transport/peer.rs`.

use std::sync::atomic::AtomicUsize;

use super::*;
use crate::transport::{
    Admission, Answer, AnswerBudget, BoxFuture, Caller, ClientBudgets, Handler, Turn, spawn_server,
};

/// Answers each request once `release` gives it a permit; counts what it was sent.
struct Holding {
    seen: AtomicUsize,
    release: Arc<tokio::sync::Semaphore>,
}

impl Handler for Holding {
    fn handle(
        self: Arc<Self>,
        _op: Op,
        _body: Vec<u8>,
        turn: Turn,
        _answers: AnswerBudget,
        _caller: Arc<Caller>,
    ) -> BoxFuture<Answer> {
        drop(turn);
        self.seen.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move {
            let _ = self.release.acquire().await.map(|p| p.forget());
            Answer::from(vec![7])
        })
    }
}

/// A broker reads two requests of a connection ahead of its answers; a client windowed to
/// two sends no third until an answer comes. The third waits unsent, and fails as
/// `Busy` (known unsent) when no slot frees within its timeout, not as a request
/// "timed out after sending" that the broker never read.
#[tokio::test]
async fn a_windowed_peer_sends_no_more_than_the_broker_reads_ahead() {
    let unused = std::net::SocketAddr::from(([127, 0, 0, 1], 1));
    let mut config = crate::NodeConfig::new(1, unused, Default::default(), "unused");
    config.requests_in_flight_max = 2;
    let limits = config.server_limits();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let handler = Arc::new(Holding {
        seen: AtomicUsize::new(0),
        release: Arc::new(tokio::sync::Semaphore::new(0)),
    });
    let (stop, stopping) = watch::channel(false);
    let server = spawn_server(
        listener,
        Arc::clone(&handler) as Arc<dyn Handler>,
        limits,
        ClientBudgets::new(&limits),
        (Admission::new(limits), None),
        stopping.clone(),
    );
    let peer = Arc::new(Peer::new(addr.into(), 1 << 20, stopping, None).windowed(2));
    let long = Duration::from_secs(10);
    let call = |peer: Arc<Peer>, timeout| async move {
        peer.call(Op::Produce, Body::from(vec![1, 2, 3]), timeout)
            .await
    };
    let first = tokio::spawn(call(Arc::clone(&peer), long));
    let second = tokio::spawn(call(Arc::clone(&peer), long));
    let deadline = std::time::Instant::now() + long;
    // Bounded by the deadline.
    while handler.seen.load(Ordering::SeqCst) < 2 {
        assert!(std::time::Instant::now() < deadline, "the broker got both");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let third = call(Arc::clone(&peer), Duration::from_millis(200)).await;
    assert!(matches!(third, Err(CallError::Busy)), "{third:?}");
    assert_eq!(
        handler.seen.load(Ordering::SeqCst),
        2,
        "the third was never sent"
    );
    // An answer frees a slot: the next request goes out and is answered.
    handler.release.add_permits(3);
    assert_eq!(first.await.unwrap().unwrap(), vec![7]);
    assert_eq!(second.await.unwrap().unwrap(), vec![7]);
    assert_eq!(call(Arc::clone(&peer), long).await.unwrap(), vec![7]);
    assert_eq!(handler.seen.load(Ordering::SeqCst), 3);
    let _ = stop.send(true);
    let _ = server.await;
}
