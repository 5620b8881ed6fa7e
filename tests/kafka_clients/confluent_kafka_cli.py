"""confluent-kafka (librdkafka) against replog's Kafka listener (driven by tests/cluster/kafka.rs).

  create BOOTSTRAP TOPIC PARTITIONS RF through AdminClient; prints "created"
  describe BOOTSTRAP TOPIC             the topic as kafka-topics --describe prints it
  produce BOOTSTRAP TOPIC VALUE        one record, acks=all; prints its offset
  consume BOOTSTRAP TOPIC              every record from the beginning; prints the values
  delete-group BOOTSTRAP GROUP         AdminClient.delete_consumer_groups; prints "OK" or
                                       the error's name (NON_EMPTY_GROUP, ...)

With REPLOG_SASL=MECHANISM:USER:PASSWORD in the environment, every client authenticates with
SASL; with REPLOG_SSL_CAFILE=PEM, every client speaks TLS and trusts that CA (SASL_SSL with
both).
"""
import os
import sys
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def config(bootstrap, **more):
    """A client's settings: the bootstrap address, the security settings from the
    environment, and `more`."""
    settings = {"bootstrap.servers": bootstrap}
    sasl = os.environ.get("REPLOG_SASL")
    cafile = os.environ.get("REPLOG_SSL_CAFILE")
    if sasl:
        mechanism, user, password = sasl.split(":", 2)
        settings.update(
            {
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanisms": mechanism,
                "sasl.username": user,
                "sasl.password": password,
            }
        )
    if cafile:
        settings["security.protocol"] = "SASL_SSL" if sasl else "SSL"
        settings["ssl.ca.location"] = cafile
    settings.update(more)
    return settings


def describe(admin, topic):
    # Leaders are elected right after creation: asked again until every partition has one.
    for _ in range(100):
        md = admin.list_topics(topic=topic, timeout=10)
        t = md.topics[topic]
        parts = sorted(
            (p.id, p.leader, list(p.replicas), list(p.isrs)) for p in t.partitions.values()
        )
        if t.error is None and parts and all(p[1] >= 0 and len(p[3]) == len(p[2]) for p in parts):
            break
        # The pause between two polls of a bounded wait (100 at most), not a wait by itself.
        time.sleep(0.2)
    factor = len(parts[0][2]) if parts else 0
    print("Topic: %s\tPartitionCount: %d\tReplicationFactor: %d" % (topic, len(parts), factor))
    for p, leader, replicas, isr in parts:
        print(
            "\tTopic: %s\tPartition: %d\tLeader: %d\tReplicas: %s\tIsr: %s"
            % (topic, p, leader, ",".join(map(str, replicas)), ",".join(map(str, isr)))
        )


def main():
    mode, bootstrap, topic = sys.argv[1], sys.argv[2], sys.argv[3]
    if mode == "create":
        admin = AdminClient(config(bootstrap))
        futures = admin.create_topics(
            [NewTopic(topic, num_partitions=int(sys.argv[4]), replication_factor=int(sys.argv[5]))],
            request_timeout=30,
        )
        futures[topic].result(timeout=60)
        print("created")
    elif mode == "describe":
        describe(AdminClient(config(bootstrap)), topic)
    elif mode == "produce":
        p = Producer(config(bootstrap, **{"acks": "all", "message.timeout.ms": 30000}))
        got = []
        p.produce(topic, sys.argv[4].encode(), on_delivery=lambda err, m: got.append((err, m)))
        p.flush(60)
        [(err, m)] = got
        if err is not None:
            raise SystemExit("delivery failed: %s" % err)
        print(m.offset())
    elif mode == "consume":
        c = Consumer(
            config(
                bootstrap,
                **{"group.id": "replog-cli-%d" % time.time_ns(), "enable.auto.commit": False}
            )
        )
        md = c.list_topics(topic=topic, timeout=10)
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in md.topics[topic].partitions])
        idle_until = time.time() + 5
        while time.time() < idle_until:
            m = c.poll(0.5)
            if m is None or m.error():
                continue
            print(m.value().decode())
            idle_until = time.time() + 5
        c.close()
    elif mode == "delete-group":
        group = sys.argv[3]
        admin = AdminClient(config(bootstrap))
        try:
            admin.delete_consumer_groups([group], request_timeout=30)[group].result(60)
            print("OK")
        except KafkaException as e:
            print(e.args[0].name())
    else:
        raise SystemExit("unknown mode " + mode)


if __name__ == "__main__":
    main()
