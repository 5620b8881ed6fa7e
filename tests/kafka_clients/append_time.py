"""Record timestamps a producer learns from the broker (driven by
tests/cluster/kafka_configs.rs): on a topic with message.timestamp.type=LogAppendTime, the
ProduceResponse's log_append_time_ms is the broker's stamp, so the producer's record
metadata has the timestamp a consumer later reads; on a CreateTime topic the producer keeps
the record's own, unless it is past message.timestamp.after.max.ms (an hour by default)
ahead of the leader's clock: then the record is refused with INVALID_TIMESTAMP.

  append_time.py BOOTSTRAP
      prints one JSON line of what each client saw
"""
import json
import sys

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

# The records' own (CreateTime) timestamp: far in the past, so the broker's is told apart.
CREATED_MS = 1_000_000


def kafka_python(bootstrap, topic):
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    meta = producer.send(topic, b"v", timestamp_ms=CREATED_MS).get(timeout=30)
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, consumer_timeout_ms=10_000)
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek(tp, meta.offset)
    record = next(iter(consumer))
    consumer.close()
    return {
        "produced": meta.timestamp,
        "read": record.timestamp,
        "read_type": record.timestamp_type,
    }


def confluent(bootstrap, topic):
    producer = Producer({"bootstrap.servers": bootstrap})
    reports = []
    producer.produce(topic, b"v", timestamp=CREATED_MS, on_delivery=lambda e, m: reports.append((e, m)))
    producer.flush(30)
    error, message = reports[0]
    assert error is None, error
    produced_type, produced = message.timestamp()
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "append-time", "enable.auto.commit": False}
    )
    from confluent_kafka import TopicPartition as CfkTopicPartition

    consumer.assign([CfkTopicPartition(topic, 0, message.offset())])
    record = consumer.poll(30)
    consumer.close()
    read_type, read = record.timestamp()
    return {
        "produced": produced,
        "produced_type": produced_type,
        "read": read,
        "read_type": read_type,
    }


def refused_future(bootstrap, topic):
    """What each client is told of a record stamped two hours ahead."""
    import time

    from kafka.errors import KafkaError

    ahead = int(time.time() * 1000) + 2 * 3600 * 1000
    producer = KafkaProducer(bootstrap_servers=bootstrap, retries=0)
    try:
        producer.send(topic, b"v", timestamp_ms=ahead).get(timeout=30)
        kafka_python_saw = "accepted"
    except KafkaError as e:
        kafka_python_saw = type(e).__name__
    producer.close()
    reports = []
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(topic, b"v", timestamp=ahead, on_delivery=lambda e, m: reports.append(e))
    producer.flush(30)
    confluent_saw = reports[0].name() if reports and reports[0] is not None else "accepted"
    return {"kafka_python": kafka_python_saw, "confluent": confluent_saw}


def main():
    bootstrap = sys.argv[1]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = {
        "stamped": NewTopic("stamped", 1, 3, config={"message.timestamp.type": "LogAppendTime"}),
        "created": NewTopic("created", 1, 3),
    }
    for f in admin.create_topics(list(topics.values())).values():
        f.result(30)
    out = {
        name: {"kafka_python": kafka_python(bootstrap, name), "confluent": confluent(bootstrap, name)}
        for name in topics
    }
    out["future"] = refused_future(bootstrap, "created")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
