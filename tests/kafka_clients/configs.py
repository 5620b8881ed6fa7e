"""Topic configs through the admin clients of kafka-python and confluent-kafka (driven by
tests/cluster/kafka_configs.rs): each creates a topic with configs, describes them, changes
them with AlterConfigs and IncrementalAlterConfigs through another broker, and sees a
compacted topic refuse a record without a key; each grows topics and deletes records.

  configs.py BOOTSTRAP_A BOOTSTRAP_B
      prints one JSON line of what each client saw
"""
import json
import sys
import time

from confluent_kafka import KafkaException, Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
)
from kafka.admin import ConfigResource as KpConfigResource
from kafka.admin import ConfigResourceType as KpConfigResourceType
from kafka.admin import KafkaAdminClient
from kafka.admin import NewPartitions as KpNewPartitions
from kafka.admin import NewTopic as KpNewTopic
from kafka.structs import TopicPartition as KpTopicPartition


def until(fetch, ok, budget=30):
    """Calls `fetch` until its result satisfies `ok` (a change made through one broker is
    applied by the others a moment later), at most `budget` seconds; returns the result."""
    deadline = time.time() + budget
    while True:
        try:
            result = fetch()
            if ok(result):
                return result
        except Exception:  # noqa: BLE001 - retried until the budget ends
            if time.time() > deadline:
                raise
        if time.time() > deadline:
            raise AssertionError(f"never satisfied: {result}")
        time.sleep(0.2)


def confluent(a, b):
    out = {}
    # librdkafka's admin client is a producer underneath, which creates the topics it names by
    # default: its metadata refreshes of a topic it looked up would create it again once the
    # test deletes it.
    admin_a = AdminClient({"bootstrap.servers": a, "allow.auto.create.topics": False})
    admin_b = AdminClient({"bootstrap.servers": b, "allow.auto.create.topics": False})
    topic = "cfk.configured"
    fs = admin_a.create_topics(
        [NewTopic(topic, 1, 3, config={"cleanup.policy": "compact", "retention.ms": "1000"})]
    )
    fs[topic].result(30)

    def described():
        r = ConfigResource(ConfigResource.Type.TOPIC, topic)
        configs = admin_b.describe_configs([r])[r].result(30)
        return {k: (v.value, v.source) for k, v in configs.items()}

    d = until(described, lambda d: d["cleanup.policy"][0] == "compact")
    out["created"] = {k: d[k][0] for k in ("cleanup.policy", "retention.ms", "segment.ms")}
    out["retention_source"] = d["retention.ms"][1]

    # A record without a key on a compacted topic (its whole batch is refused, as Kafka's
    # is), then one with a key in a batch of its own.
    # A producer creates the topics it names by default (librdkafka's allow.auto.create.topics
    # is true for producers), so once this topic is deleted below its metadata refresh would
    # create it again with the brokers' defaults; this one only writes to topics that exist.
    producer = Producer({"bootstrap.servers": a, "allow.auto.create.topics": False})
    errors = []
    producer.produce(topic, b"no key", callback=lambda err, _m: errors.append(err))
    producer.flush(30)
    producer.produce(topic, b"v", key=b"k", callback=lambda err, _m: errors.append(err))
    producer.flush(30)
    out["keyless"] = errors[0].name() if errors and errors[0] else None
    out["keyed"] = errors[1].name() if len(errors) > 1 and errors[1] else None
    del producer

    # IncrementalAlterConfigs through the other broker.
    r = ConfigResource(
        ConfigResource.Type.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry("retention.ms", "5000", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.APPEND),
            ConfigEntry("segment.ms", None, incremental_operation=AlterConfigOpType.DELETE),
        ],
    )
    admin_b.incremental_alter_configs([r])[r].result(30)
    d = until(described, lambda d: d["retention.ms"][0] == "5000")
    out["incremental"] = {k: d[k][0] for k in ("cleanup.policy", "retention.ms")}

    # A value out of range: refused, nothing changed.
    bad = ConfigResource(
        ConfigResource.Type.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry("retention.ms", "-7", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    try:
        admin_a.incremental_alter_configs([bad])[bad].result(30)
        out["bad_value"] = None
    except KafkaException as e:
        out["bad_value"] = e.args[0].name()
    out["after_bad"] = described()["retention.ms"][0]

    # The topic grows to three partitions; shrinking is refused.
    admin_b.create_partitions([NewPartitions(topic, 3)])[topic].result(30)
    out["partitions"] = until(
        lambda: len(admin_a.list_topics(topic, timeout=10).topics[topic].partitions),
        lambda n: n == 3,
    )
    try:
        admin_a.create_partitions([NewPartitions(topic, 2)])[topic].result(30)
        out["shrink"] = None
    except KafkaException as e:
        out["shrink"] = e.args[0].name()

    # A topic's id (KIP-516): the same through every broker, another once the topic is
    # deleted and created again under its name.
    def topic_id(admin, name):
        described = admin.describe_topics(TopicCollection([name]))[name].result(30)
        return str(described.topic_id)

    first = until(lambda: (topic_id(admin_a, topic), topic_id(admin_b, topic)), lambda ids: ids[0] == ids[1])[0]
    admin_a.delete_topics([topic])[topic].result(30)
    until(lambda: topic not in admin_b.list_topics(timeout=10).topics, lambda gone: gone)
    admin_b.create_topics([NewTopic(topic, 1, 3)])[topic].result(30)
    again = until(lambda: topic_id(admin_a, topic), lambda i: i != first)
    out["ids"] = [first, again]

    # Replicas placed by the client (Kafka's replica assignment).
    placed = "cfk.placed"
    new = NewTopic(placed, 2, replica_assignment=[[3, 1], [2, 3]])
    admin_a.create_topics([new])[placed].result(30)

    def replicas():
        partitions = admin_b.list_topics(placed, timeout=10).topics[placed].partitions
        return [p.replicas for _, p in sorted(partitions.items())]

    out["placed"] = until(replicas, lambda r: len(r) == 2)

    # Partitions added on the brokers named (CreatePartitions assignments), and an
    # assignment of the wrong replication factor refused.
    admin_a.create_partitions([NewPartitions(placed, 3, replica_assignment=[[1, 2]])])[
        placed
    ].result(30)
    out["grown_placed"] = until(replicas, lambda r: len(r) == 3)
    try:
        admin_a.create_partitions([NewPartitions(placed, 4, replica_assignment=[[1]])])[
            placed
        ].result(30)
        out["bad_assignment"] = None
    except KafkaException as e:
        out["bad_assignment"] = e.args[0].name()

    # DeleteRecords: the records before offset 3 of five go; then all of them.
    trimmed = "cfk.trimmed"
    admin_a.create_topics([NewTopic(trimmed, 1, 3)])[trimmed].result(30)
    producer = Producer({"bootstrap.servers": a, "allow.auto.create.topics": False})
    for i in range(5):
        producer.produce(trimmed, f"r{i}".encode())
    producer.flush(30)
    del producer
    low = admin_b.delete_records([TopicPartition(trimmed, 0, 3)])
    out["deleted_to"] = low[TopicPartition(trimmed, 0, 3)].result(30).low_watermark
    low = admin_a.delete_records([TopicPartition(trimmed, 0, -1)])
    out["deleted_all_to"] = low[TopicPartition(trimmed, 0, -1)].result(30).low_watermark
    return out


def kafka_python(a, b):
    out = {}
    admin_a = KafkaAdminClient(bootstrap_servers=a)
    admin_b = KafkaAdminClient(bootstrap_servers=b)
    topic = "kp.configured"
    admin_a.create_topics(
        [KpNewTopic(topic, 1, 3, topic_configs={"retention.ms": "3000", "segment.ms": "600000"})]
    )

    def described():
        r = admin_b.describe_configs(
            [KpConfigResource(KpConfigResourceType.TOPIC, topic)], config_filter="all"
        )
        return {k: v["value"] for k, v in r["topic"][topic].items()}

    d = until(described, lambda d: d["retention.ms"] == "3000")
    out["created"] = {k: d[k] for k in ("retention.ms", "segment.ms", "cleanup.policy")}
    # AlterConfigs (the whole set; kafka-python adds the keys the topic has set that the
    # request leaves out, so segment.ms stays).
    admin_b.alter_configs(
        [KpConfigResource(KpConfigResourceType.TOPIC, topic, configs={"retention.ms": "4000"})],
        incremental=False,
    )
    d = until(described, lambda d: d["retention.ms"] == "4000")
    out["altered"] = {k: d[k] for k in ("retention.ms", "segment.ms")}
    # IncrementalAlterConfigs.
    admin_a.alter_configs(
        [
            KpConfigResource(
                KpConfigResourceType.TOPIC,
                topic,
                configs={"cleanup.policy": ("APPEND", "compact")},
            )
        ],
        incremental=True,
    )
    d = until(described, lambda d: "compact" in d["cleanup.policy"])
    out["incremental"] = d["cleanup.policy"]
    admin_a.create_partitions({topic: KpNewPartitions(total_count=2)})
    out["partitions"] = until(
        lambda: len(admin_b.describe_topics([topic])[0]["partitions"]), lambda n: n == 2
    )
    # DeleteRecords: the records before offset 2 of four go.
    trimmed = "kp.trimmed"
    admin_a.create_topics([KpNewTopic(trimmed, 1, 3)])
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=a)
    for i in range(4):
        producer.send(trimmed, f"r{i}".encode())
    producer.flush(30)
    producer.close()
    result = admin_b.delete_records({KpTopicPartition(trimmed, 0): 2}, timeout_ms=30000)
    out["deleted_to"] = {f"{tp.topic}-{tp.partition}": v for tp, v in result.items()}
    admin_a.close()
    admin_b.close()
    return out


def main():
    a, b = sys.argv[1], sys.argv[2]
    print(json.dumps({"confluent": confluent(a, b), "kafka_python": kafka_python(a, b)}))


if __name__ == "__main__":
    main()
