"""kafka-python against replog's Kafka listener (driven by tests/cluster/kafka.rs).

  produce BOOTSTRAP TOPIC VALUE        one record, acks=all; prints its offset
  produce-many BOOTSTRAP TOPIC N       N records "r-<i>" in ten rounds (idempotent, as
                                       kafka-python 3 is by default); prints "ok"
  consume BOOTSTRAP TOPIC              every record from the beginning; prints the values
  create BOOTSTRAP TOPIC PARTITIONS RF through the admin client; prints "created"
  describe BOOTSTRAP TOPIC             the topic as kafka-topics --describe prints it
  delete-group BOOTSTRAP GROUP         KafkaAdminClient's group deletion; prints "OK" or the
                                       error's name (NON_EMPTY_GROUP, ...)
  times BOOTSTRAP TOPIC T0             five records in one batch, timestamped T0, T0+10,
                                       T0+20, T0+5, T0+30; then offsets_for_times for T0,
                                       T0+1, T0+5, T0+11, T0+21, T0+31 on partition 0: a line
                                       "<time> <offset> <timestamp>" each ("<time> none")

With REPLOG_SASL=MECHANISM:USER:PASSWORD in the environment, every client authenticates with
SASL (security_protocol SASL_PLAINTEXT); with REPLOG_SSL_CAFILE=PEM, every client speaks TLS
and trusts that CA (SSL, or SASL_SSL with REPLOG_SASL too).
"""
import os
import sys
import time

from kafka import KafkaConsumer, KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic


def describe_lines(topic, partitions):
    """kafka-topics --describe's lines for (partition, leader, replicas, isr) tuples."""
    partitions = sorted(partitions)
    factor = len(partitions[0][2]) if partitions else 0
    lines = ["Topic: %s\tPartitionCount: %d\tReplicationFactor: %d" % (topic, len(partitions), factor)]
    for p, leader, replicas, isr in partitions:
        lines.append(
            "\tTopic: %s\tPartition: %d\tLeader: %d\tReplicas: %s\tIsr: %s"
            % (topic, p, leader, ",".join(map(str, replicas)), ",".join(map(str, isr)))
        )
    return "\n".join(lines)


def security():
    """The clients' security settings, from REPLOG_SASL and REPLOG_SSL_CAFILE (none without)."""
    settings = {}
    sasl = os.environ.get("REPLOG_SASL")
    cafile = os.environ.get("REPLOG_SSL_CAFILE")
    if sasl:
        mechanism, user, password = sasl.split(":", 2)
        settings.update(
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism=mechanism,
            sasl_plain_username=user,
            sasl_plain_password=password,
        )
    if cafile:
        settings.update(
            security_protocol="SASL_SSL" if sasl else "SSL",
            ssl_cafile=cafile,
        )
    return settings


def main():
    mode, bootstrap, topic = sys.argv[1], sys.argv[2], sys.argv[3]
    if mode == "produce":
        p = KafkaProducer(
            bootstrap_servers=[bootstrap], acks="all", request_timeout_ms=30000, **security()
        )
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
            **security(),
        )
        futures = []
        for round_ in range(10):
            for i in range(round_ * n // 10, (round_ + 1) * n // 10):
                futures.append(p.send(topic, ("r-%d" % i).encode()))
            # Pacing the rounds, so that the leader dies mid-stream: not a wait.
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
            **security(),
        )
        for m in c:
            print(m.value.decode())
        c.close()
    elif mode == "create":
        admin = KafkaAdminClient(bootstrap_servers=[bootstrap], request_timeout_ms=30000, **security())
        admin.create_topics(
            [NewTopic(topic, num_partitions=int(sys.argv[4]), replication_factor=int(sys.argv[5]))]
        )
        admin.close()
        print("created")
    elif mode == "describe":
        admin = KafkaAdminClient(bootstrap_servers=[bootstrap], request_timeout_ms=30000, **security())
        # Leaders are elected right after creation: asked again until every partition has one.
        for _ in range(100):
            [t] = admin.describe_topics([topic])
            # kafka-python names the fields as Metadata's answer does.
            parts = [
                (
                    p.get("partition_index", p.get("partition")),
                    p.get("leader_id", p.get("leader")),
                    p.get("replica_nodes", p.get("replicas")),
                    p.get("isr_nodes", p.get("isr")),
                )
                for p in t["partitions"]
            ]
            if parts and all(p[1] >= 0 and len(p[3]) == len(p[2]) for p in parts):
                break
            # The pause between two polls of a bounded wait (100 at most), not a wait by itself.
            time.sleep(0.2)
        admin.close()
        print(describe_lines(topic, parts))
    elif mode == "delete-group":
        import kafka.errors

        group = sys.argv[3]
        admin = KafkaAdminClient(bootstrap_servers=[bootstrap], request_timeout_ms=30000, **security())
        # kafka-python 3 names it delete_groups (a dict of the error's class name, or "OK");
        # 2.x delete_consumer_groups (a list of pairs with the error's class).
        if hasattr(admin, "delete_groups"):
            result = admin.delete_groups([group])[group]
        else:
            result = dict(admin.delete_consumer_groups([group]))[group]
        if isinstance(result, str):
            result = getattr(kafka.errors, result, None) or result
        name = result if isinstance(result, str) else result.message
        print("OK" if name in ("OK", "NO_ERROR") else name)
        admin.close()
    elif mode == "times":
        from kafka import TopicPartition

        t0 = int(sys.argv[4])
        # One batch: every send lingers until flush().
        p = KafkaProducer(
            bootstrap_servers=[bootstrap], acks="all", linger_ms=60000, request_timeout_ms=30000, **security()
        )
        for i, delta in enumerate([0, 10, 20, 5, 30]):
            p.send(topic, ("t-%d" % i).encode(), partition=0, timestamp_ms=t0 + delta)
        p.flush()
        p.close()
        c = KafkaConsumer(bootstrap_servers=[bootstrap], request_timeout_ms=30000, **security())
        tp = TopicPartition(topic, 0)
        for delta in [0, 1, 5, 11, 21, 31]:
            found = c.offsets_for_times({tp: t0 + delta})[tp]
            if found is None:
                print("%d none" % (t0 + delta))
            else:
                print("%d %d %d" % (t0 + delta, found.offset, found.timestamp))
        c.close()
    else:
        raise SystemExit("unknown mode " + mode)


if __name__ == "__main__":
    main()
