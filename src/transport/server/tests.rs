//! Unit tests of `transport/server.rs`.

use super::*;

#[tokio::test]
async fn answers_wait_for_their_connections_share_and_the_servers_budget() {
    let all = Arc::new(tokio::sync::Semaphore::new(3 << 20));
    let one = AnswerBudget::new(2 << 20, Arc::clone(&all));
    let other = AnswerBudget::new(2 << 20, Arc::clone(&all));
    let soon = Duration::from_millis(50);
    let a = one.reserve(1 << 20).await.unwrap();
    let b = one.reserve(1 << 20).await.unwrap();
    // The connection's share is spent: its next answer waits, another connection's not.
    assert!(tokio::time::timeout(soon, one.reserve(1)).await.is_err());
    let c = other.reserve(1 << 20).await.unwrap();
    // The server's budget is spent too.
    assert!(tokio::time::timeout(soon, other.reserve(1)).await.is_err());
    // A written answer gives its bytes back.
    drop(a);
    let d = tokio::time::timeout(soon, one.reserve(1 << 20))
        .await
        .unwrap();
    // An answer larger than the share takes the whole share, not forever.
    drop((b, c, d));
    assert!(
        tokio::time::timeout(soon, one.reserve(64 << 20))
            .await
            .unwrap()
            .is_some()
    );
}
