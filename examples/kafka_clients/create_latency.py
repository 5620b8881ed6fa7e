"""Kafka's CreateTopics, then Metadata until the new partition has a leader, for the
create_topic example.

Creates TOPICS topics of one partition with three replicas through confluent-kafka's
AdminClient, one after another; for each, asks for the topic's metadata again (at once, as a
client retrying LEADER_NOT_AVAILABLE would, bounded by 30 s) until it names a leader. Prints
one JSON line: the milliseconds from each CreateTopics answer to the leader in Metadata.

Usage: create_latency.py BOOTSTRAP TOPICS
"""
import json
import sys
import time

from confluent_kafka.admin import AdminClient, NewTopic


def main():
    bootstrap, topics = sys.argv[1], int(sys.argv[2])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    times = []
    for n in range(topics):
        name = f"kafka-new-{n}"
        for future in admin.create_topics([NewTopic(name, 1, 3)]).values():
            future.result(timeout=30)
        created = time.monotonic()
        deadline = created + 30
        while True:
            meta = admin.list_topics(topic=name, timeout=10).topics.get(name)
            if meta is not None and meta.error is None and meta.partitions.get(0) is not None \
                    and meta.partitions[0].leader >= 0:
                times.append((time.monotonic() - created) * 1000.0)
                break
            if time.monotonic() > deadline:
                sys.exit(f"{name} has no leader in Metadata after 30 s")
    print(json.dumps(times), flush=True)


if __name__ == "__main__":
    main()
