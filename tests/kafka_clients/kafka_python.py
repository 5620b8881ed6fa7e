"""kafka-python against replog's Kafka listener (driven by tests/cluster/kafka.rs).

  produce BOOTSTRAP TOPIC VALUE        one record, acks=all; prints its offset
  produce-many BOOTSTRAP TOPIC N       N records "r-<i>" in ten rounds (idempotent, as
                                       kafka-python 3 is by default); prints "ok"
  consume BOOTSTRAP TOPIC              every record from the beginning; prints the values
"""
import sys
import time

from kafka import KafkaConsumer, KafkaProducer


def main():
    mode, bootstrap, topic = sys.argv[1], sys.argv[2], sys.argv[3]
    if mode == "produce":
        p = KafkaProducer(bootstrap_servers=[bootstrap], acks="all", request_timeout_ms=30000)
        md = p.send(topic, sys.argv[4].encode()).get(timeout=60)
        p.flush()
        p.close()
        print(md.offset)
    elif mode == "produce-many":
        n = int(sys.argv[4])
        p = KafkaProducer(
            bootstrap_servers=[bootstrap],
            acks="all",
            enable_idempotence=True,
            linger_ms=5,
            request_timeout_ms=30000,
            delivery_timeout_ms=120000,
        )
        futures = []
        for round_ in range(10):
            for i in range(round_ * n // 10, (round_ + 1) * n // 10):
                futures.append(p.send(topic, ("r-%d" % i).encode()))
            time.sleep(0.1)
        for f in futures:
            f.get(timeout=120)
        p.close()
        print("ok")
    elif mode == "consume":
        c = KafkaConsumer(
            topic,
            bootstrap_servers=[bootstrap],
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            group_id=None,
            consumer_timeout_ms=5000,
        )
        for m in c:
            print(m.value.decode())
        c.close()
    else:
        raise SystemExit("unknown mode " + mode)


if __name__ == "__main__":
    main()
