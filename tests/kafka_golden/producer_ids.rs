//! InitProducerId (0 to 4): an idempotent producer's id from the cluster at epoch 0; a
//! transactional id refused (TRANSACTIONAL_ID_AUTHORIZATION_FAILED: transactions are not
//! served).

use kafka_protocol::messages::{ApiKey, InitProducerIdRequest, InitProducerIdResponse, ProducerId};

use crate::{Broker, Golden, s, versions};

pub(crate) const GOLDEN: Golden = &[(ApiKey::InitProducerId, &[0, 4])];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_producer_id_gives_an_idempotent_producer_a_new_id_and_refuses_transactions() {
    let mut broker = Broker::start().await;
    let mut last = 0;
    for &v in versions(GOLDEN, ApiKey::InitProducerId) {
        let request = InitProducerIdRequest::default()
            .with_transactional_id(None)
            .with_transaction_timeout_ms(60_000)
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1);
        let answer = broker.exchange(ApiKey::InitProducerId, v, &request).await;
        // The id comes from the cluster's blocks of ids, whose start is not fixed: taken from
        // the answer, and checked to be new (above the last one handed out here).
        let r: InitProducerIdResponse = broker.decode(ApiKey::InitProducerId, v, &answer);
        assert!(r.producer_id.0 > last, "a new id: {r:?}");
        last = r.producer_id.0;
        let expected = InitProducerIdResponse::default()
            .with_producer_id(r.producer_id)
            .with_producer_epoch(0);
        broker.assert_answer(ApiKey::InitProducerId, v, &answer, &expected);

        let transactional = request.with_transactional_id(Some(s("golden-txn").into()));
        let answer = broker
            .exchange(ApiKey::InitProducerId, v, &transactional)
            .await;
        let expected = InitProducerIdResponse::default()
            .with_error_code(53)
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1);
        broker.assert_answer(ApiKey::InitProducerId, v, &answer, &expected);
    }
    broker.shutdown().await;
}
