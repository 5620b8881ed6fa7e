"""Re-authentication (KIP-368) with librdkafka (driven by tests/cluster/kafka_sasl.rs): brokers
whose SASL sessions last `connections.max.reauth.ms`; a confluent-kafka producer with
SCRAM-SHA-512 writes a record every 100 ms for several session lifetimes over the same
connections, re-authenticating on each before it ends, and a consumer reads them all back.

  reauth.py BOOTSTRAP USER PASSWORD SECONDS
      prints one JSON line: records delivered and failed, the client's errors, its
      re-authentications (from librdkafka's security log), and the records read back
"""
import json
import logging
import sys
import time

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

TOPIC = "reauth.topic"


class Lines(logging.Handler):
    """Keeps librdkafka's log lines."""

    def __init__(self):
        super().__init__()
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def main():
    bootstrap, user, password, seconds = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    security = {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": user,
        "sasl.password": password,
    }
    # The bootstrap user is written to the metadata log a moment after the cluster forms:
    # until a login succeeds, a failed one is not the re-authentication's.
    deadline = time.time() + 30
    while True:
        try:
            AdminClient(security).list_topics(timeout=5)
            break
        except Exception:  # noqa: BLE001 - retried until the deadline
            if time.time() > deadline:
                raise
            time.sleep(0.5)
    lines = Lines()
    logger = logging.getLogger("librdkafka")
    logger.addHandler(lines)
    logger.setLevel(logging.DEBUG)
    errors = []
    producer = Producer(
        {
            **security,
            "debug": "security",
            "logger": logger,
            "error_cb": lambda e: errors.append(str(e)),
        }
    )
    delivered, failed = [], []

    def done(err, msg):
        (failed if err else delivered).append(str(err) if err else msg.offset())

    sent = 0
    deadline = time.time() + seconds
    while time.time() < deadline:
        producer.produce(TOPIC, f"r{sent}".encode(), callback=done)
        sent += 1
        producer.poll(0.1)
    producer.flush(30)
    # librdkafka logs each re-authentication it starts as "Auth in state REAUTH".
    reauths = [l for l in lines.lines if "in state REAUTH" in l]

    consumer = Consumer({**security, "group.id": "reauth-reader", "auto.offset.reset": "earliest"})
    consumer.subscribe([TOPIC])
    read = 0
    until = time.time() + 30
    while read < sent and time.time() < until:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            read += 1
    consumer.close()
    print(
        json.dumps(
            {
                "sent": sent,
                "delivered": len(delivered),
                "failed": failed[:5],
                "errors": errors[:5],
                "reauths": len(reauths),
                "reauth_lines": reauths[:3],
                "read": read,
            }
        )
    )


if __name__ == "__main__":
    main()
